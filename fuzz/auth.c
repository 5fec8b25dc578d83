/* auth.c: both sides of the HMAC handshake (src/store/auth.c) against a peer that sends any bytes and then hangs up.
 * The first input byte picks the side and whether it holds a secret. No input may pass: a proof is over nonces drawn
 * at random for this very handshake, so bytes fixed in advance cannot carry one, and a pass would be a forgery. */
#include <sys/socket.h>

#include "core/clock.h"
#include "fuzz.h"
#include "store/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 1 << 16) return 0;
  int accepting = data[0] & 1;
  const char *secret = (data[0] & 2) ? "fuzz-secret" : "";
  data++, size--;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  /* The peer's bytes wait in the socket buffer (large enough for any input here), then EOF. */
  int bufsize = 1 << 18;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
  size_t done = 0;
  while (done < size) {
    ssize_t n = send(sv[1], data + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;
    done += (size_t)n;
  }
  shutdown(sv[1], SHUT_WR);
  char hello[16] = "fuzz hello";
  int64_t deadline = cohort__now_ns() + 2000000000LL;
  cohort_status st = accepting ? cohort__auth_accept(sv[0], secret, "fuzz", hello, sizeof hello, deadline)
                               : cohort__auth_connect(sv[0], secret, "fuzz", hello, sizeof hello, deadline);
  FUZZ_CHECK(st != COHORT_OK);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
