/*
 * auth.h: mutual HMAC-SHA256 challenge-response on a freshly connected socket (OpenSSL libcrypto).
 *
 * Used by the store and by every peer link. The accepting side sends a random nonce; the connecting side answers
 * with its own nonce, a fixed-size hello (who it is: rank, channel, ...) and a MAC over both nonces, the purpose
 * string and the hello; the accepting side checks it and answers with its own MAC, which the connecting side
 * checks. The secret never crosses the wire and a replayed answer fails (fresh nonces). With an empty secret the
 * same exchange runs with an empty key: it still rejects strangers that do not speak the protocol, and a side with
 * a secret never accepts a side without one.
 *
 * Both calls work on a blocking or non-blocking socket, wait at most until deadline_ns (cohort__now_ns() clock),
 * and never close the socket: the caller does, on failure.
 */
#ifndef COHORT_STORE_AUTH_H
#define COHORT_STORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

#define COHORT_AUTH_HELLO_MAX 256

/* The accepting side. Receives the peer's hello (exactly hello_len bytes) into hello once it is proven. */
cohort_status cohort__auth_accept(int fd, const char *secret, const char *purpose, void *hello, size_t hello_len,
                                  int64_t deadline_ns);
/* The connecting side. Sends hello (hello_len bytes) and proves the secret, then checks the server's proof. */
cohort_status cohort__auth_connect(int fd, const char *secret, const char *purpose, const void *hello, size_t hello_len,
                                   int64_t deadline_ns);

#endif
