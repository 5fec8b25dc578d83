/*
 * prefix_store.c: a view of a store in which every key is scoped under a prefix (as Gloo's PrefixStore), so that a
 * part of the setup (the shm transport, a node of a layered job) owns a key space without knowing where it lies in
 * the job's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "store/store.h"
#include "store/store_impl.h"

typedef struct prefix_store {
  cohort__store base;
  cohort__store *inner;
  int owns_inner; /* cohort__store_prefixed_owner */
  char prefix[COHORT_STORE_KEY_MAX];
} prefix_store;

/* The inner key, or COHORT_ERR_INVALID when prefix + key is longer than a key may be. */
static cohort_status scoped(cohort__store *s, const char *key, char *out) {
  prefix_store *p = (prefix_store *)s;
  if ((size_t)snprintf(out, COHORT_STORE_KEY_MAX + 1, "%s%s", p->prefix, key) > COHORT_STORE_KEY_MAX)
    return cohort__error(COHORT_ERR_INVALID, "store key '%s%s' is longer than %d bytes", p->prefix, key,
                         COHORT_STORE_KEY_MAX);
  return COHORT_OK;
}

static cohort_status prefix_set(cohort__store *s, const char *key, const void *value, size_t len) {
  char k[COHORT_STORE_KEY_MAX + 1];
  COHORT_CHECK(scoped(s, key, k));
  return cohort__store_set(((prefix_store *)s)->inner, k, value, len);
}

static cohort_status prefix_get(cohort__store *s, const char *key, double timeout_s, void **value, size_t *len) {
  char k[COHORT_STORE_KEY_MAX + 1];
  COHORT_CHECK(scoped(s, key, k));
  return cohort__store_get(((prefix_store *)s)->inner, k, timeout_s, value, len);
}

static cohort_status prefix_check(cohort__store *s, const char *key, int *exists) {
  char k[COHORT_STORE_KEY_MAX + 1];
  COHORT_CHECK(scoped(s, key, k));
  return cohort__store_check(((prefix_store *)s)->inner, k, exists);
}

static cohort_status prefix_add(cohort__store *s, const char *key, int64_t delta, int64_t *result) {
  char k[COHORT_STORE_KEY_MAX + 1];
  COHORT_CHECK(scoped(s, key, k));
  return cohort__store_add(((prefix_store *)s)->inner, k, delta, result);
}

static cohort_status prefix_del(cohort__store *s, const char *key) {
  char k[COHORT_STORE_KEY_MAX + 1];
  COHORT_CHECK(scoped(s, key, k));
  return cohort__store_delete(((prefix_store *)s)->inner, k);
}

/* Frees the view, and the inner store only when the view owns it. */
static void prefix_close(cohort__store *s) {
  prefix_store *p = (prefix_store *)s;
  if (p->owns_inner) cohort__store_close(p->inner);
  free(p);
}

static const cohort__store_ops prefix_ops = {
    .name = "prefix",
    .set = prefix_set,
    .get = prefix_get,
    .check = prefix_check,
    .add = prefix_add,
    .del = prefix_del,
    .close = prefix_close,
};

cohort_status cohort__store_prefixed(cohort__store *inner, const char *prefix, cohort__store **out) {
  *out = NULL;
  if (strlen(prefix) >= COHORT_STORE_KEY_MAX)
    return cohort__error(COHORT_ERR_INVALID, "store prefix '%s' is longer than a key may be", prefix);
  prefix_store *p = calloc(1, sizeof *p);
  if (!p) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  p->base.ops = &prefix_ops;
  p->inner = inner;
  snprintf(p->prefix, sizeof p->prefix, "%s", prefix);
  *out = &p->base;
  return COHORT_OK;
}

cohort_status cohort__store_prefixed_owner(cohort__store *inner, const char *prefix, cohort__store **out) {
  cohort_status st = cohort__store_prefixed(inner, prefix, out);
  if (st != COHORT_OK) {
    cohort__store_close(inner);
    return st;
  }
  ((prefix_store *)*out)->owns_inner = 1;
  return COHORT_OK;
}
