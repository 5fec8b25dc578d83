/* store.c: argument checks shared by every backend, then dispatch through the backend's function table. */
#include "store/store_impl.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"

static cohort_status check_key(const cohort__store *store, const char *key, const char *call) {
  if (!store) return cohort__error(COHORT_ERR_INVALID, "%s: store is NULL", call);
  if (!key || !key[0]) return cohort__error(COHORT_ERR_INVALID, "%s: key is NULL or empty", call);
  size_t len = strnlen(key, COHORT_STORE_KEY_MAX + 1);
  if (len > COHORT_STORE_KEY_MAX)
    return cohort__error(COHORT_ERR_INVALID, "%s: key '%.40s...' is longer than %d bytes", call, key,
                         COHORT_STORE_KEY_MAX);
  return COHORT_OK;
}

int cohort__store_parse_int(const void *text, size_t len, int64_t *out) {
  const char *s = text;
  size_t i = 0;
  int negative = 0;
  if (len > 0 && s[0] == '-') {
    negative = 1;
    i = 1;
  }
  if (len == i || len - i > 19) return -1;
  /* Accumulate toward the negative side so that INT64_MIN parses too. */
  int64_t v = 0;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    int d = s[i] - '0';
    if (v < (INT64_MIN + d) / 10) return -1;
    v = v * 10 - d;
  }
  if (!negative) {
    if (v == INT64_MIN) return -1;
    v = -v;
  }
  *out = v;
  return 0;
}

size_t cohort__store_format_int(int64_t v, char *out) {
  char tmp[COHORT__STORE_INT_TEXT_MAX + 1];
  size_t n = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  size_t len = 0;
  if (v < 0) out[len++] = '-';
  while (n)
    out[len++] = tmp[--n];
  out[len] = '\0';
  return len;
}

void cohort__store_close(cohort__store *store) {
  if (store) store->ops->close(store);
}

cohort_status cohort__store_set(cohort__store *store, const char *key, const void *value, size_t len) {
  COHORT_CHECK(check_key(store, key, "store set"));
  if (len > COHORT_STORE_VALUE_MAX)
    return cohort__error(COHORT_ERR_INVALID, "store set '%s': value of %zu bytes is larger than the limit of %u", key,
                         len, COHORT_STORE_VALUE_MAX);
  if (len > 0 && !value) return cohort__error(COHORT_ERR_INVALID, "store set '%s': value is NULL", key);
  return store->ops->set(store, key, value, len);
}

cohort_status cohort__store_get(cohort__store *store, const char *key, double timeout_s, void **value, size_t *len) {
  COHORT_CHECK(check_key(store, key, "store get"));
  if (!value || !len) return cohort__error(COHORT_ERR_INVALID, "store get '%s': value or len is NULL", key);
  if (!(timeout_s >= 0) || isinf(timeout_s))
    return cohort__error(COHORT_ERR_INVALID, "store get '%s': timeout %g s is not a finite number >= 0", key,
                         timeout_s);
  *value = NULL;
  *len = 0;
  return store->ops->get(store, key, timeout_s, value, len);
}

cohort_status cohort__store_check(cohort__store *store, const char *key, int *exists) {
  COHORT_CHECK(check_key(store, key, "store check"));
  if (!exists) return cohort__error(COHORT_ERR_INVALID, "store check '%s': exists is NULL", key);
  return store->ops->check(store, key, exists);
}

cohort_status cohort__store_add(cohort__store *store, const char *key, int64_t delta, int64_t *result) {
  COHORT_CHECK(check_key(store, key, "store add"));
  int64_t ignored;
  return store->ops->add(store, key, delta, result ? result : &ignored);
}

cohort_status cohort__store_delete(cohort__store *store, const char *key) {
  COHORT_CHECK(check_key(store, key, "store delete"));
  return store->ops->del(store, key);
}

cohort_status cohort__store_count_in(cohort__store *store, const char *key, int64_t count, int64_t deadline_ns,
                                     cohort_status (*check)(void *arg), void *arg, int64_t *joined) {
  int64_t n = 0;
  cohort_status st = cohort__store_add(store, key, 1, &n);
  while (st == COHORT_OK && n < count) {
    if (check && (st = check(arg)) != COHORT_OK) break;
    if (cohort__now_ns() > deadline_ns) {
      st = cohort__error(COHORT_ERR_TIMEOUT, "only %lld of %lld ranks counted in under '%s' in time", (long long)n,
                         (long long)count, key);
      break;
    }
    usleep(1000);
    st = cohort__store_add(store, key, 0, &n);
  }
  if (joined) *joined = n;
  return st;
}

cohort_status cohort__store_await(cohort__store *store, const char *key, int64_t deadline_ns,
                                  cohort_status (*check)(void *arg), void *arg, void **value, size_t *len) {
  for (;;) {
    double left = (double)(deadline_ns - cohort__now_ns()) * 1e-9;
    cohort_status st = cohort__store_get(store, key, left > 0.05 ? 0.05 : left > 0 ? left : 0.001, value, len);
    if (st != COHORT_ERR_TIMEOUT || left <= 0) return st;
    if (check) COHORT_CHECK(check(arg));
  }
}
