/* hash.c: SHA-256 of the parameter values (replicas in sync?) and of the names and shapes (checkpoint fits?). */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "nn/layer.h"

static void to_hex(const unsigned char *md, unsigned len, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (unsigned i = 0; i < len; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[2 * len] = '\0';
}

/* Hashes floats as little-endian bytes whatever the host's order, so that hashes compare across machines. */
static int update_floats(EVP_MD_CTX *ctx, const float *v, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  unsigned char buf[4096];
  while (n > 0) {
    size_t k = n < sizeof buf / 4 ? n : sizeof buf / 4;
    for (size_t i = 0; i < k; i++) {
      uint32_t u;
      memcpy(&u, &v[i], 4);
      u = __builtin_bswap32(u);
      memcpy(buf + 4 * i, &u, 4);
    }
    if (EVP_DigestUpdate(ctx, buf, 4 * k) != 1) return 0;
    v += k;
    n -= k;
  }
  return 1;
#else
  return EVP_DigestUpdate(ctx, v, n * sizeof(float)) == 1;
#endif
}

static int update_shape(EVP_MD_CTX *ctx, const char *kind, const cohort_param *p) {
  char line[256];
  int len = snprintf(line, sizeof line, "%s %s", kind, p->name);
  for (int d = 0; d < p->ndim && len < (int)sizeof line; d++)
    len += snprintf(line + len, sizeof line - (size_t)len, "%s%lld", d ? "x" : " ", (long long)p->shape[d]);
  if (len >= (int)sizeof line - 1) len = (int)sizeof line - 2;
  line[len++] = '\n';
  return EVP_DigestUpdate(ctx, line, (size_t)len) == 1;
}

static cohort_status digest(const cohort_model *m, int values, char hex[COHORT_HASH_HEX_LEN]) {
  const char *what = values ? "cohort_model_hash" : "cohort_model_signature";
  if (!m || !hex) return cohort__error(COHORT_ERR_INVALID, "%s: NULL argument", what);
  if (!cohort_model_param(m, 0)) return cohort__error(COHORT_ERR_INVALID, "%s: model not initialised", what);
  cohort_status st = COHORT_OK;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
    st = cohort__error(COHORT_ERR_SYSTEM, "%s: cannot start SHA-256 (OpenSSL)", what);
    goto done;
  }
  int ok = 1;
  if (!values) ok = EVP_DigestUpdate(ctx, "cohort-nn-signature-v1\n", 23) == 1;
  for (int i = 0; ok && i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    ok = values ? update_floats(ctx, p->value, p->numel) : update_shape(ctx, "param", p);
  }
  for (int i = 0; ok && !values && i < cohort_model_num_buffers(m); i++)
    ok = update_shape(ctx, "buffer", cohort_model_buffer(m, i));
  if (!ok || EVP_DigestFinal_ex(ctx, md, &len) != 1) {
    st = cohort__error(COHORT_ERR_SYSTEM, "%s: SHA-256 failed (OpenSSL)", what);
    goto done;
  }
  to_hex(md, len, hex);
done:
  EVP_MD_CTX_free(ctx);
  return st;
}

cohort_status cohort_model_hash(const cohort_model *m, char hex[COHORT_HASH_HEX_LEN]) { return digest(m, 1, hex); }

cohort_status cohort_model_signature(const cohort_model *m, char hex[COHORT_HASH_HEX_LEN]) { return digest(m, 0, hex); }
