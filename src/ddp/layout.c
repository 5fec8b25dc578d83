/*
 * layout.c: which parameters share a bucket, and where each gradient lives.
 *
 * Buckets are filled in reduction order (at first the reverse of registration, the order backward produces
 * gradients in a sequential model) up to the byte cap; a small first bucket lets the first allreduce start early
 * in backward (PyTorch's 1 MiB first bucket). All buckets share one allocation and each starts on a cache line, so
 * the reduction kernels see aligned data and no two buckets share a line that two threads write.
 *
 * That allocation comes from cohort_alloc: where ranks share a host it lies in the rank's shared arena, so every
 * bucket's allreduce is zero copy (the peers read its gradients, and write the averages, in place); across nodes
 * (tcp+shm) it lies in the node's arena, where the hierarchical allreduce's node peers read it in place.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ddp/ddp_internal.h"

#define ALIGN_FLOATS 16 /* 64 bytes */

static size_t round_up(size_t n) { return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

void cohort__ddp_layout_free(cohort_ddp *ddp) {
  for (int b = 0; b < ddp->num_buckets; b++) {
    free(ddp->buckets[b].params);
    free(ddp->buckets[b].wire);
  }
  free(ddp->buckets);
  ddp->buckets = NULL;
  ddp->num_buckets = 0;
  cohort_free(ddp->comm, ddp->arena_block);
  ddp->arena_block = NULL;
  ddp->arena = NULL;
  ddp->arena_count = 0;
}

/* count floats on a cache line, zeroed. cohort_alloc's arena blocks are page-aligned but its malloc fallback is not,
 * hence the spare line. */
static cohort_status arena_alloc(cohort_ddp *ddp, size_t count) {
  size_t bytes = count * sizeof(float);
  ddp->arena_block = cohort_alloc(ddp->comm, bytes + 64);
  if (!ddp->arena_block) return COHORT_ERR_SYSTEM;
  ddp->arena = (float *)(((uintptr_t)ddp->arena_block + 63) & ~(uintptr_t)63);
  memset(ddp->arena, 0, bytes);
  ddp->arena_count = count;
  return COHORT_OK;
}

cohort_status cohort__ddp_layout(cohort_ddp *ddp, const int *order) {
  cohort__ddp_layout_free(ddp);
  const int n = ddp->num_params;
  /* Pass 1: bucket boundaries. */
  int *bucket_of = calloc((size_t)(n ? n : 1), sizeof *bucket_of);
  int *count_in = calloc((size_t)(n ? n : 1), sizeof *count_in);
  if (!bucket_of || !count_in) goto oom;
  int nb = 0;
  size_t bytes = 0;
  for (int k = 0; k < n; k++) {
    size_t pbytes = ddp->params[order[k]].count * sizeof(float);
    size_t cap = nb == 1 ? ddp->opt.first_bucket_bytes : ddp->opt.bucket_bytes; /* of the bucket being filled */
    if (nb == 0 || (bytes > 0 && bytes + pbytes > cap)) {
      nb++;
      bytes = 0;
    }
    bucket_of[k] = nb - 1;
    count_in[nb - 1]++;
    bytes += pbytes;
  }
  ddp->buckets = calloc((size_t)(nb ? nb : 1), sizeof *ddp->buckets);
  if (!ddp->buckets) goto oom;
  ddp->num_buckets = nb;
  for (int b = 0; b < nb; b++) {
    ddp->buckets[b].params = malloc((size_t)count_in[b] * sizeof(int));
    if (!ddp->buckets[b].params) goto oom;
  }
  /* Pass 2: offsets. */
  size_t total = 0;
  for (int k = 0; k < n; k++) {
    ddp_bucket *bk = &ddp->buckets[bucket_of[k]];
    ddp_param *p = &ddp->params[order[k]];
    if (bk->view.num_params == 0) total = round_up(total);
    p->bucket = bucket_of[k];
    p->offset = bk->view.count;
    bk->params[bk->view.num_params++] = order[k];
    bk->view.count += p->count;
    total += p->count;
  }
  /* ZeRO-1 cuts the arena into one equal shard per rank, each on a cache line. */
  const size_t unit = ALIGN_FLOATS * (size_t)(ddp->opt.zero_stage ? ddp->size : 1);
  total = (total + unit - 1) / unit * unit;
  if (ddp->opt.zero_stage) ddp->zero_shard = (total ? total : unit) / (size_t)ddp->size;
  if (arena_alloc(ddp, total ? total : unit) != COHORT_OK) goto oom;
  ddp->arena_count = total ? total : (ddp->opt.zero_stage ? unit : 0);
  size_t at = 0;
  for (int b = 0; b < nb; b++) {
    ddp_bucket *bk = &ddp->buckets[b];
    bk->view.index = b;
    bk->view.params = bk->params;
    bk->view.data = ddp->arena + at;
    bk->pending = bk->view.num_params;
    at = round_up(at + bk->view.count);
  }
  free(bucket_of);
  free(count_in);
  return COHORT_OK;

oom:
  free(bucket_of);
  free(count_in);
  cohort__ddp_layout_free(ddp);
  return cohort__error(COHORT_ERR_SYSTEM, "out of memory laying out %d gradients in buckets", n);
}

/* Rank 0's ready order, completed with the parameters it never saw ready (reverse registration order). */
static void observed_order(const cohort_ddp *ddp, int *order) {
  const int n = ddp->num_params;
  unsigned char *seen = calloc((size_t)(n ? n : 1), 1);
  int k = 0;
  for (int j = 0; j < ddp->ready_seen && seen; j++) {
    order[k++] = ddp->ready_order[j];
    seen[ddp->ready_order[j]] = 1;
  }
  for (int i = n - 1; i >= 0 && seen; i--)
    if (!seen[i]) order[k++] = i;
  if (!seen) /* no memory to merge: keep the registration order reversed, which is always valid */
    for (int i = 0; i < n; i++)
      order[i] = n - 1 - i;
  free(seen);
}

cohort_status cohort__ddp_rebuild(cohort_ddp *ddp) {
  const int n = ddp->num_params;
  ddp->rebuilt = 1;
  if (n == 0) return COHORT_OK;
  int *order = malloc((size_t)n * sizeof *order);
  int *current = malloc((size_t)n * sizeof *current);
  float **old_grads = malloc((size_t)n * sizeof *old_grads);
  void *old_block = NULL;
  cohort_status st = COHORT_OK;
  if (!order || !current || !old_grads) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory rebuilding the buckets");
    goto done;
  }
  if (ddp->rank == 0) observed_order(ddp, order);
  if (ddp->size > 1 && (st = cohort_broadcast(ddp->comm, order, (size_t)n, COHORT_I32, 0)) != COHORT_OK) goto done;
  int k = 0;
  for (int b = 0; b < ddp->num_buckets; b++)
    for (int j = 0; j < ddp->buckets[b].view.num_params; j++)
      current[k++] = ddp->buckets[b].params[j];
  if (memcmp(order, current, (size_t)n * sizeof *order) == 0) goto done; /* backward already runs in bucket order */

  /* Keep the old memory while the new is laid out, then move every gradient over: the optimizer has yet to read
   * this step's averages. */
  for (int i = 0; i < n; i++)
    old_grads[i] = cohort_ddp_grad(ddp, i);
  old_block = ddp->arena_block; /* the layout below frees only what ddp still points to */
  ddp->arena_block = NULL;
  ddp->arena = NULL;
  if ((st = cohort__ddp_layout(ddp, order)) != COHORT_OK) goto done;
  for (int i = 0; i < n; i++)
    memcpy(cohort_ddp_grad(ddp, i), old_grads[i], ddp->params[i].count * sizeof(float));
  st = cohort__ddp_bind_model(ddp);

done:
  cohort_free(ddp->comm, old_block);
  free(order);
  free(current);
  free(old_grads);
  return st;
}
