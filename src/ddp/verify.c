/*
 * verify.c: before the first gradient moves, the ranks prove they hold the same model. A rank with a different
 * layer, shape or option would otherwise reduce the wrong bytes together, or hang in a collective of another size.
 *
 * The cheap path is one allgather of a SHA-256 over a text description of the parameter list and the options.
 * Only when the digests differ do the ranks exchange enough to say what differs: rank 0's description is
 * broadcast, every rank finds its first line that differs, and those findings are allgathered so that every rank
 * reports the same message.
 */
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ddp/ddp_internal.h"

#define DIGEST_BYTES 32
#define FINDING_BYTES 384

/* Appends printf output to a growing string. */
typedef struct text {
  char *s;
  size_t len, cap;
  int oom;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...) {
  if (t->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = 1;
      return;
    }
    if (t->s && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 4096;
    while (cap <= t->len + (size_t)n)
      cap *= 2;
    char *grown = realloc(t->s, cap);
    if (!grown) {
      t->oom = 1;
      return;
    }
    t->s = grown;
    t->cap = cap;
  }
}

/* One line per parameter and buffer, then the options: this is what must be equal on every rank. */
static cohort_status describe(const cohort_ddp *ddp, text *t) {
  text_add(t,
           "options bucket_bytes=%zu first_bucket_bytes=%zu broadcast_buffers=%d find_unused=%d compression=%d "
           "static_order=%d uneven_inputs=%d zero_stage=%d\n",
           ddp->opt.bucket_bytes, ddp->opt.first_bucket_bytes, ddp->opt.broadcast_buffers, ddp->opt.find_unused_params,
           (int)ddp->opt.compression, ddp->opt.static_bucket_order, ddp->opt.uneven_inputs != 0, ddp->opt.zero_stage);
  text_add(t, "params %d buffers %d\n", ddp->num_params, ddp->num_buffers);
  for (int i = 0; i < ddp->num_params; i++) {
    const ddp_param *p = &ddp->params[i];
    text_add(t, "parameter %d '%s' f32 shape [", i, p->name);
    for (int d = 0; d < p->ndim; d++)
      text_add(t, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
    text_add(t, "] count %zu\n", p->count);
  }
  for (int i = 0; i < ddp->num_buffers; i++)
    text_add(t, "buffer %d '%s' bytes %zu\n", i, ddp->buffers[i].name, ddp->buffers[i].bytes);
  if (t->oom) return cohort__error(COHORT_ERR_SYSTEM, "out of memory describing the model");
  return COHORT_OK;
}

/* The first line where mine differs from rank 0's, as "<rank 0's line> here: <mine>". */
static void first_difference(const char *mine, const char *theirs, char *out, size_t len) {
  for (;;) {
    const char *me = strchr(mine, '\n'), *te = strchr(theirs, '\n');
    size_t ml = me ? (size_t)(me - mine) : strlen(mine), tl = te ? (size_t)(te - theirs) : strlen(theirs);
    if (ml != tl || memcmp(mine, theirs, ml) != 0) {
      snprintf(out, len, "has \"%.*s\" where rank 0 has \"%.*s\"", (int)(ml > 160 ? 160 : ml), mine,
               (int)(tl > 160 ? 160 : tl), theirs);
      return;
    }
    if (!me || !te) break;
    mine = me + 1;
    theirs = te + 1;
  }
  snprintf(out, len, "differs from rank 0 (no single line differs)");
}

cohort_status cohort__ddp_verify(cohort_ddp *ddp) {
  cohort_comm *comm = ddp->comm;
  const int size = ddp->size;
  text mine = {0};
  unsigned char digest[DIGEST_BYTES];
  unsigned char *digests = NULL;
  char *theirs = NULL, *findings = NULL;
  cohort_status st = describe(ddp, &mine);
  if (st != COHORT_OK) goto done;
  if (size == 1) goto done;
  unsigned int dlen = 0;
  if (EVP_Digest(mine.s, mine.len, digest, &dlen, EVP_sha256(), NULL) != 1 || dlen != DIGEST_BYTES) {
    st = cohort__error(COHORT_ERR_INTERNAL, "SHA-256 of the model description failed");
    goto done;
  }
  digests = malloc((size_t)size * DIGEST_BYTES);
  if (!digests) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    goto done;
  }
  if ((st = cohort_allgather(comm, digest, digests, DIGEST_BYTES, COHORT_U8)) != COHORT_OK) goto done;
  int all_equal = 1;
  for (int r = 1; r < size; r++)
    all_equal &= memcmp(digests, digests + (size_t)r * DIGEST_BYTES, DIGEST_BYTES) == 0;
  if (all_equal) goto done;

  /* Somebody differs: find out what, the same way on every rank. */
  int64_t theirs_len = (int64_t)mine.len;
  if ((st = cohort_broadcast(comm, &theirs_len, 1, COHORT_I64, 0)) != COHORT_OK) goto done;
  theirs = malloc((size_t)theirs_len + 1);
  findings = calloc((size_t)size, FINDING_BYTES);
  if (!theirs || !findings) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    goto done;
  }
  if (ddp->rank == 0) memcpy(theirs, mine.s, (size_t)theirs_len);
  if ((st = cohort_broadcast(comm, theirs, (size_t)theirs_len, COHORT_U8, 0)) != COHORT_OK) goto done;
  theirs[theirs_len] = '\0';
  char finding[FINDING_BYTES] = "";
  if (memcmp(digest, digests, DIGEST_BYTES) != 0) first_difference(mine.s, theirs, finding, sizeof finding);
  if ((st = cohort_allgather(comm, finding, findings, FINDING_BYTES, COHORT_U8)) != COHORT_OK) goto done;

  char message[COHORT__DDP_MESSAGE_MAX];
  size_t used = (size_t)snprintf(message, sizeof message, "the ranks' models differ:");
  int differing = 0;
  for (int r = 1; r < size; r++) {
    const char *f = findings + (size_t)r * FINDING_BYTES;
    if (!f[0]) continue;
    if (++differing > 3) continue;
    if (used < sizeof message)
      used += (size_t)snprintf(message + used, sizeof message - used, "%s rank %d %.*s", differing > 1 ? ";" : "", r,
                               FINDING_BYTES, f);
  }
  if (differing > 3 && used < sizeof message)
    snprintf(message + used, sizeof message - used, "; and %d more ranks", differing - 3);
  st = cohort__error(COHORT_ERR_MISMATCH, "%s", message);

done:
  free(mine.s);
  free(digests);
  free(theirs);
  free(findings);
  return st;
}
