/*
 * auth.c: the mutual HMAC-SHA256 handshake of auth.h.
 *
 * Wire format (all integers big-endian):
 *   accepting  -> connecting: header(8) nonce_a(32)
 *   connecting -> accepting : header(8) nonce_c(32) hello_len(4) hello(hello_len) mac_c(32)
 *   accepting  -> connecting: verdict(1) [mac_a(32) when the verdict is AUTH_OK]
 * header = "CHRT" version(1) flags(1) reserved(2); flags bit 0 says "this side has a non-empty secret".
 *
 * mac_c and mac_a are HMACs keyed by the secret over the same transcript (both headers' flags, both nonces, the
 * purpose and the hello) with a different leading label, so that one side's proof can never be reflected back as
 * the other's, and fresh nonces on both sides make a recorded answer useless. The magic comes first so that a
 * stranger (an HTTP client, a port scanner) is turned away after 8 bytes, before anything is computed; every read
 * has a fixed size, so nothing the peer says decides how much we allocate.
 *
 * The verdict byte exists only to give the connecting side a precise error ("the accepting side refused our proof")
 * instead of a bare closed connection; it tells a stranger nothing it did not already know.
 */
#include "store/auth.h"

#include <limits.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/sock.h"

#define AUTH_MAGIC "CHRT"
#define AUTH_VERSION 1
#define AUTH_HEADER_LEN 8
#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN 32
#define AUTH_FLAG_HAS_SECRET 0x01
#define AUTH_PURPOSE_MAX 128

enum { AUTH_OK = 0, AUTH_BAD_PROOF = 1, AUTH_SECRET_PRESENCE = 2, AUTH_BAD_HELLO = 3 };

static const char *side_name(int accepting) { return accepting ? "accepting side" : "connecting side"; }

static void put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void make_header(unsigned char *h, int has_secret) {
  memcpy(h, AUTH_MAGIC, 4);
  h[4] = AUTH_VERSION;
  h[5] = has_secret ? AUTH_FLAG_HAS_SECRET : 0;
  h[6] = h[7] = 0;
}

static cohort_status check_header(const unsigned char *h, int accepting) {
  if (memcmp(h, AUTH_MAGIC, 4) != 0)
    return cohort__error(COHORT_ERR_AUTH, "auth (%s): bad magic: not a cohort peer (first bytes %02x %02x %02x %02x)",
                         side_name(accepting), h[0], h[1], h[2], h[3]);
  if (h[4] != AUTH_VERSION)
    return cohort__error(COHORT_ERR_AUTH,
                         "auth (%s): peer speaks handshake version %d, this side speaks %d "
                         "(mixed cohort versions?)",
                         side_name(accepting), h[4], AUTH_VERSION);
  return COHORT_OK;
}

static cohort_status check_args(const char *purpose, const void *hello, size_t hello_len, int accepting) {
  if (!purpose || strlen(purpose) > AUTH_PURPOSE_MAX)
    return cohort__error(COHORT_ERR_INVALID, "auth (%s): purpose missing or longer than %d bytes", side_name(accepting),
                         AUTH_PURPOSE_MAX);
  if (hello_len > COHORT_AUTH_HELLO_MAX || (hello_len > 0 && !hello))
    return cohort__error(COHORT_ERR_INVALID, "auth (%s): hello of %zu bytes (at most %d, and not NULL)",
                         side_name(accepting), hello_len, COHORT_AUTH_HELLO_MAX);
  return COHORT_OK;
}

/* The MAC over the transcript; label tells the two directions apart. */
static cohort_status compute_mac(const char *label, const char *secret, const char *purpose,
                                 const unsigned char *nonce_a, const unsigned char *nonce_c, int flags_a, int flags_c,
                                 const void *hello, size_t hello_len, unsigned char *mac) {
  unsigned char buf[64 + AUTH_PURPOSE_MAX + 2 * AUTH_NONCE_LEN + 8 + COHORT_AUTH_HELLO_MAX];
  size_t n = 0, label_len = strlen(label), purpose_len = strlen(purpose);
  memcpy(buf + n, label, label_len + 1);
  n += label_len + 1;
  memcpy(buf + n, purpose, purpose_len + 1);
  n += purpose_len + 1;
  memcpy(buf + n, nonce_a, AUTH_NONCE_LEN);
  n += AUTH_NONCE_LEN;
  memcpy(buf + n, nonce_c, AUTH_NONCE_LEN);
  n += AUTH_NONCE_LEN;
  buf[n++] = (unsigned char)flags_a;
  buf[n++] = (unsigned char)flags_c;
  put_u32(buf + n, (uint32_t)hello_len);
  n += 4;
  if (hello_len) memcpy(buf + n, hello, hello_len);
  n += hello_len;
  size_t key_len = strlen(secret);
  if (key_len > INT_MAX) return cohort__error(COHORT_ERR_INVALID, "auth: the job secret is too long");
  unsigned int mac_len = 0;
  /* A zero-length key must still be a valid pointer: OpenSSL reads a NULL key as "reuse the previous key". */
  if (!HMAC(EVP_sha256(), secret, (int)key_len, buf, n, mac, &mac_len) || mac_len != AUTH_MAC_LEN)
    return cohort__error(COHORT_ERR_SYSTEM, "auth: HMAC-SHA256 failed in libcrypto");
  return COHORT_OK;
}

static cohort_status recv_step(int fd, void *buf, size_t len, int64_t deadline_ns, int accepting, const char *what) {
  cohort_status st = cohort__sock_recv_all(fd, buf, len, deadline_ns);
  if (st == COHORT_ERR_TIMEOUT)
    return cohort__error(COHORT_ERR_TIMEOUT, "auth (%s): the peer was silent: %s did not come before the deadline",
                         side_name(accepting), what);
  if (st != COHORT_OK) return cohort__error_prefix(st, "auth (%s): waiting for %s", side_name(accepting), what);
  return COHORT_OK;
}

static cohort_status send_step(int fd, const void *buf, size_t len, int64_t deadline_ns, int accepting,
                               const char *what) {
  cohort_status st = cohort__sock_send_all(fd, buf, len, deadline_ns);
  if (st != COHORT_OK) return cohort__error_prefix(st, "auth (%s): sending %s", side_name(accepting), what);
  return COHORT_OK;
}

static cohort_status fresh_nonce(unsigned char *nonce) {
  if (RAND_bytes(nonce, AUTH_NONCE_LEN) != 1)
    return cohort__error(COHORT_ERR_SYSTEM, "auth: RAND_bytes failed: libcrypto has no entropy");
  return COHORT_OK;
}

cohort_status cohort__auth_accept(int fd, const char *secret, const char *purpose, void *hello, size_t hello_len,
                                  int64_t deadline_ns) {
  if (!secret) secret = "";
  COHORT_CHECK(check_args(purpose, hello, hello_len, 1));
  int flags_a = secret[0] ? AUTH_FLAG_HAS_SECRET : 0;

  unsigned char first[AUTH_HEADER_LEN + AUTH_NONCE_LEN];
  make_header(first, flags_a);
  COHORT_CHECK(fresh_nonce(first + AUTH_HEADER_LEN));
  const unsigned char *nonce_a = first + AUTH_HEADER_LEN;
  COHORT_CHECK(send_step(fd, first, sizeof first, deadline_ns, 1, "the challenge"));

  unsigned char header[AUTH_HEADER_LEN];
  COHORT_CHECK(recv_step(fd, header, sizeof header, deadline_ns, 1, "handshake header"));
  COHORT_CHECK(check_header(header, 1));
  int flags_c = header[5];

  unsigned char nonce_len[AUTH_NONCE_LEN + 4];
  COHORT_CHECK(recv_step(fd, nonce_len, sizeof nonce_len, deadline_ns, 1, "nonce"));
  uint32_t peer_hello_len = get_u32(nonce_len + AUTH_NONCE_LEN);
  if (peer_hello_len != hello_len) {
    unsigned char verdict = AUTH_BAD_HELLO;
    cohort__sock_send_all(fd, &verdict, 1, deadline_ns); /* best effort: the failure is ours to report */
    return cohort__error(COHORT_ERR_PROTOCOL,
                         "auth (accepting side): peer sent a %u-byte hello, expected %zu "
                         "(mixed cohort versions?)",
                         peer_hello_len, hello_len);
  }
  unsigned char peer_hello[COHORT_AUTH_HELLO_MAX + AUTH_MAC_LEN];
  COHORT_CHECK(recv_step(fd, peer_hello, hello_len + AUTH_MAC_LEN, deadline_ns, 1, "proof"));

  unsigned char expect[AUTH_MAC_LEN];
  COHORT_CHECK(compute_mac("cohort-auth connecting", secret, purpose, nonce_a, nonce_len, flags_a, flags_c, peer_hello,
                           hello_len, expect));
  if ((flags_a ^ flags_c) & AUTH_FLAG_HAS_SECRET) {
    unsigned char verdict = AUTH_SECRET_PRESENCE;
    cohort__sock_send_all(fd, &verdict, 1, deadline_ns);
    return cohort__error(COHORT_ERR_AUTH,
                         "auth (accepting side): peer did not prove the job secret: %s "
                         "(set the same COHORT_SECRET on every process)",
                         flags_a ? "this side has a secret and the peer has none"
                                 : "the peer has a secret and this side has none");
  }
  if (CRYPTO_memcmp(expect, peer_hello + hello_len, AUTH_MAC_LEN) != 0) {
    unsigned char verdict = AUTH_BAD_PROOF;
    cohort__sock_send_all(fd, &verdict, 1, deadline_ns);
    return cohort__error(COHORT_ERR_AUTH,
                         "auth (accepting side): peer did not prove the job secret "
                         "(wrong COHORT_SECRET?) for purpose '%s'",
                         purpose);
  }

  unsigned char answer[1 + AUTH_MAC_LEN];
  answer[0] = AUTH_OK;
  COHORT_CHECK(compute_mac("cohort-auth accepting", secret, purpose, nonce_a, nonce_len, flags_a, flags_c, peer_hello,
                           hello_len, answer + 1));
  COHORT_CHECK(send_step(fd, answer, sizeof answer, deadline_ns, 1, "our proof"));
  if (hello_len) memcpy(hello, peer_hello, hello_len);
  return COHORT_OK;
}

cohort_status cohort__auth_connect(int fd, const char *secret, const char *purpose, const void *hello, size_t hello_len,
                                   int64_t deadline_ns) {
  if (!secret) secret = "";
  COHORT_CHECK(check_args(purpose, hello, hello_len, 0));
  int flags_c = secret[0] ? AUTH_FLAG_HAS_SECRET : 0;

  unsigned char first[AUTH_HEADER_LEN + AUTH_NONCE_LEN];
  COHORT_CHECK(recv_step(fd, first, sizeof first, deadline_ns, 0, "the challenge"));
  COHORT_CHECK(check_header(first, 0));
  int flags_a = first[5];
  const unsigned char *nonce_a = first + AUTH_HEADER_LEN;

  unsigned char msg[AUTH_HEADER_LEN + AUTH_NONCE_LEN + 4 + COHORT_AUTH_HELLO_MAX + AUTH_MAC_LEN];
  size_t n = 0;
  make_header(msg, flags_c);
  n += AUTH_HEADER_LEN;
  unsigned char *nonce_c = msg + n;
  COHORT_CHECK(fresh_nonce(nonce_c));
  n += AUTH_NONCE_LEN;
  put_u32(msg + n, (uint32_t)hello_len);
  n += 4;
  if (hello_len) memcpy(msg + n, hello, hello_len);
  n += hello_len;
  COHORT_CHECK(compute_mac("cohort-auth connecting", secret, purpose, nonce_a, nonce_c, flags_a, flags_c, hello,
                           hello_len, msg + n));
  n += AUTH_MAC_LEN;
  COHORT_CHECK(send_step(fd, msg, n, deadline_ns, 0, "our proof"));

  unsigned char verdict;
  COHORT_CHECK(recv_step(fd, &verdict, 1, deadline_ns, 0, "the verdict on our proof"));
  switch (verdict) {
  case AUTH_OK:
    break;
  case AUTH_BAD_PROOF:
    return cohort__error(COHORT_ERR_AUTH,
                         "auth (connecting side): the accepting side refused our proof of the job "
                         "secret (wrong COHORT_SECRET?) for purpose '%s'",
                         purpose);
  case AUTH_SECRET_PRESENCE:
    return cohort__error(COHORT_ERR_AUTH,
                         "auth (connecting side): the accepting side refused us: %s (set the same "
                         "COHORT_SECRET on every process)",
                         flags_c ? "this side has a secret and the accepting side has none"
                                 : "the accepting side has a secret and this side has none");
  case AUTH_BAD_HELLO:
    return cohort__error(COHORT_ERR_PROTOCOL,
                         "auth (connecting side): the accepting side expects another hello size "
                         "than our %zu bytes (mixed cohort versions?)",
                         hello_len);
  default:
    return cohort__error(COHORT_ERR_AUTH, "auth (connecting side): unknown verdict %d from the accepting side",
                         verdict);
  }

  unsigned char peer_mac[AUTH_MAC_LEN], expect[AUTH_MAC_LEN];
  COHORT_CHECK(recv_step(fd, peer_mac, sizeof peer_mac, deadline_ns, 0, "the accepting side's proof"));
  COHORT_CHECK(compute_mac("cohort-auth accepting", secret, purpose, nonce_a, nonce_c, flags_a, flags_c, hello,
                           hello_len, expect));
  if (CRYPTO_memcmp(expect, peer_mac, AUTH_MAC_LEN) != 0)
    return cohort__error(COHORT_ERR_AUTH,
                         "auth (connecting side): peer did not prove the job secret "
                         "(wrong COHORT_SECRET?) for purpose '%s'",
                         purpose);
  return COHORT_OK;
}
