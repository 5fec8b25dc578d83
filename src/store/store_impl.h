/*
 * store_impl.h: what the store backends share behind store.h: the function table each backend fills in, the
 * TCP store's wire format (client and server), and the counter encoding used by ADD.
 *
 * A backend's handle struct starts with a cohort__store, whose ops point at the backend's functions; store.c checks
 * the arguments once (key length, value size, timeouts) and then dispatches, so a backend never sees a NULL or
 * oversized key. Counters are stored as decimal text (as torch's stores do), so GET on a counter reads "42".
 */
#ifndef COHORT_STORE_STORE_IMPL_H
#define COHORT_STORE_STORE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

typedef struct cohort__store_ops {
  const char *name;
  cohort_status (*set)(cohort__store *store, const char *key, const void *value, size_t len);
  cohort_status (*get)(cohort__store *store, const char *key, double timeout_s, void **value, size_t *len);
  cohort_status (*check)(cohort__store *store, const char *key, int *exists);
  cohort_status (*add)(cohort__store *store, const char *key, int64_t delta, int64_t *result);
  cohort_status (*del)(cohort__store *store, const char *key);
  void (*close)(cohort__store *store);
} cohort__store_ops;

struct cohort__store {
  const cohort__store_ops *ops;
};

/* Longest decimal text of an int64 counter, sign included. */
#define COHORT__STORE_INT_TEXT_MAX 20

/* Parses a counter's text (an optional '-' and 1..19 digits, no spaces); 0 on success, -1 when it is not one. */
int cohort__store_parse_int(const void *text, size_t len, int64_t *out);
/* Writes the counter as decimal text into out (at least COHORT__STORE_INT_TEXT_MAX + 1 bytes); returns its length. */
size_t cohort__store_format_int(int64_t v, char *out);

/*
 * The TCP store's frames (after the auth handshake), all integers big-endian:
 *   request: op(1) key_len(4) value_len(4) arg(8) key(key_len) value(value_len)
 *   reply:   code(1) 0(4) value_len(4) arg(8) value(value_len)   (the same 17-byte header, no key)
 * arg is the wait in milliseconds for GET and the delta for ADD; in a reply it is the new counter for ADD and
 * 1/0 for CHECK. Only SET carries a value, only a GET reply carries one back.
 */
enum {
  COHORT__STORE_OP_SET = 1,
  COHORT__STORE_OP_GET,
  COHORT__STORE_OP_CHECK,
  COHORT__STORE_OP_ADD,
  COHORT__STORE_OP_DELETE
};
enum {
  COHORT__STORE_REPLY_OK = 0,
  COHORT__STORE_REPLY_TIMEOUT,
  COHORT__STORE_REPLY_NOT_INTEGER,
  COHORT__STORE_REPLY_OVERFLOW,
  COHORT__STORE_REPLY_STOPPING
};
#define COHORT__STORE_FRAME_HEADER 17
#define COHORT__STORE_PURPOSE "cohort-store"

static inline void cohort__store_put_header(unsigned char *p, int op, uint32_t key_len, uint32_t value_len,
                                            int64_t arg) {
  uint64_t a = (uint64_t)arg;
  p[0] = (unsigned char)op;
  for (int i = 0; i < 4; i++)
    p[1 + i] = (unsigned char)(key_len >> (24 - 8 * i));
  for (int i = 0; i < 4; i++)
    p[5 + i] = (unsigned char)(value_len >> (24 - 8 * i));
  for (int i = 0; i < 8; i++)
    p[9 + i] = (unsigned char)(a >> (56 - 8 * i));
}

static inline void cohort__store_get_header(const unsigned char *p, int *op, uint32_t *key_len, uint32_t *value_len,
                                            int64_t *arg) {
  uint32_t k = 0, v = 0;
  uint64_t a = 0;
  for (int i = 0; i < 4; i++)
    k = k << 8 | p[1 + i];
  for (int i = 0; i < 4; i++)
    v = v << 8 | p[5 + i];
  for (int i = 0; i < 8; i++)
    a = a << 8 | p[9 + i];
  *op = p[0];
  *key_len = k;
  *value_len = v;
  *arg = (int64_t)a;
}

#endif
