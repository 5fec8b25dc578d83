/* store_server.c: the rendezvous store's server (src/store/store_server.c) fed any request stream by a client that
 * has passed the handshake (the strangers who have not are auth.c's). The server answers or drops the client, never
 * crashes or stalls, and keeps serving: a real client then sets and reads back a key. One server per input, stopped
 * (every thread joined) before the next, so that the leak check after each input sees the input's whole work. */
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "core/clock.h"
#include "core/sock.h"
#include "fuzz.h"
#include "store/auth.h"
#include "store/store.h"
#include "store/store_impl.h"

static void check_server_still_serves(int port) {
  cohort__store *client = NULL;
  FUZZ_CHECK(cohort__store_connect_tcp("127.0.0.1", port, "", 5.0, &client) == COHORT_OK);
  FUZZ_CHECK(cohort__store_set(client, "fuzz/alive", "yes", 3) == COHORT_OK);
  void *value = NULL;
  size_t len = 0;
  FUZZ_CHECK(cohort__store_get(client, "fuzz/alive", 5.0, &value, &len) == COHORT_OK);
  FUZZ_CHECK(len == 3 && memcmp(value, "yes", 3) == 0);
  free(value);
  cohort__store_close(client);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cohort__store_server *server = NULL;
  FUZZ_CHECK(cohort__store_server_start("127.0.0.1", 0, "", &server) == COHORT_OK);
  int port = cohort__store_server_port(server);
  int fd = -1;
  int64_t deadline = cohort__now_ns() + 5000000000LL;
  FUZZ_CHECK(cohort__sock_connect("127.0.0.1", port, deadline, &fd) == COHORT_OK);
  FUZZ_CHECK(cohort__auth_connect(fd, "", COHORT__STORE_PURPOSE, NULL, 0, deadline) == COHORT_OK);
  cohort__sock_send_all(fd, data, size, deadline);
  shutdown(fd, SHUT_WR);
  /* Read the replies until the server closes: it must, since our side has ended (a GET that waits sees it too). */
  char buf[4096];
  for (;;) {
    FUZZ_CHECK(cohort__sock_wait(fd, POLLIN, deadline) == COHORT_OK); /* else: neither answered nor closed in 5 s */
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
  }
  close(fd);
  check_server_still_serves(port);
  cohort__store_server_stop(server);
  return 0;
}
