/* sock.c: TCP helpers (IPv4 and IPv6 through getaddrinfo). */
#include "core/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"

static int ms_until(int64_t deadline_ns) {
  if (deadline_ns == 0) return -1;
  int64_t left = deadline_ns - cohort__now_ns();
  if (left <= 0) return 0;
  return (int)((left + 999999) / 1000000);
}

cohort_status cohort__sock_wait(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    int ms = ms_until(deadline_ns);
    if (ms == 0 && deadline_ns != 0 && cohort__now_ns() >= deadline_ns)
      return cohort__error(COHORT_ERR_TIMEOUT, "timed out waiting on socket");
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "poll");
    }
    if (n > 0) return COHORT_OK; /* readable, writable, or an error the next read/write will report */
  }
}

cohort_status cohort__sock_set_nonblocking(int fd, int nonblocking) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "fcntl(F_GETFL)");
  flags = nonblocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) < 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "fcntl(F_SETFL)");
  return COHORT_OK;
}

void cohort__sock_tune(int fd, int buffer_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (buffer_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
}

static cohort_status resolve(const char *host, int port, int passive, struct addrinfo **out) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  int rc = getaddrinfo(host && host[0] ? host : NULL, service, &hints, out);
  if (rc != 0) return cohort__error(COHORT_ERR_INVALID, "cannot resolve '%s': %s", host ? host : "", gai_strerror(rc));
  return COHORT_OK;
}

cohort_status cohort__sock_listen(const char *host, int port, int backlog, int *fd_out, int *port_out) {
  struct addrinfo *ai = NULL;
  COHORT_CHECK(resolve(host, port, 1, &ai));
  int err = 0;
  for (struct addrinfo *a = ai; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
      freeaddrinfo(ai);
      *fd_out = fd;
      if (port_out) return cohort__sock_name(fd, NULL, 0, port_out);
      return COHORT_OK;
    }
    err = errno;
    close(fd);
  }
  freeaddrinfo(ai);
  if (err == EADDRINUSE)
    return cohort__error(COHORT_ERR_SYSTEM,
                         "port %d on '%s' is already in use: pick another port or stop the process holding it", port,
                         host && host[0] ? host : "*");
  return cohort__error_errno(COHORT_ERR_SYSTEM, err, "cannot listen on %s:%d", host && host[0] ? host : "*", port);
}

cohort_status cohort__sock_connect(const char *host, int port, int64_t deadline_ns, int *fd_out) {
  int last_err = 0;
  int64_t backoff_ms = 10;
  for (;;) {
    struct addrinfo *ai = NULL;
    COHORT_CHECK(resolve(host, port, 0, &ai));
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_err = errno;
        continue;
      }
      /* Non-blocking connect, so that an unreachable host times out at our deadline, not the kernel's. */
      cohort__sock_set_nonblocking(fd, 1);
      int rc = connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc < 0 && errno == EINPROGRESS) {
        int64_t dl = deadline_ns;
        int64_t step = cohort__now_ns() + 2000000000LL; /* re-dial after 2 s: a SYN may have been lost */
        if (dl == 0 || step < dl) dl = step;
        if (cohort__sock_wait(fd, POLLOUT, dl) == COHORT_OK) {
          int soerr = 0;
          socklen_t sl = sizeof soerr;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
          rc = soerr == 0 ? 0 : -1;
          errno = soerr;
        } else {
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        freeaddrinfo(ai);
        cohort__sock_set_nonblocking(fd, 0);
        cohort__sock_tune(fd, 0);
        *fd_out = fd;
        return COHORT_OK;
      }
      last_err = errno;
      close(fd);
    }
    freeaddrinfo(ai);
    if (deadline_ns != 0 && cohort__now_ns() + backoff_ms * 1000000 >= deadline_ns) break;
    usleep((useconds_t)(backoff_ms * 1000));
    if (backoff_ms < 500) backoff_ms *= 2;
  }
  return cohort__error(COHORT_ERR_TIMEOUT, "cannot connect to %s:%d before the deadline (last error: %s)", host, port,
                       strerror(last_err));
}

cohort_status cohort__sock_accept(int listen_fd, int64_t deadline_ns, int *fd_out, char *peer, size_t peer_len) {
  for (;;) {
    COHORT_CHECK(cohort__sock_wait(listen_fd, POLLIN, deadline_ns));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "accept");
    }
    if (peer && peer_len) {
      char ip[INET6_ADDRSTRLEN] = "?";
      int port = 0;
      if (ss.ss_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
      } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
      }
      snprintf(peer, peer_len, "%s:%d", ip, port);
    }
    cohort__sock_tune(fd, 0);
    *fd_out = fd;
    return COHORT_OK;
  }
}

cohort_status cohort__sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      COHORT_CHECK(cohort__sock_wait(fd, POLLOUT, deadline_ns));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) return cohort__error(COHORT_ERR_REMOTE, "connection closed by peer");
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "send");
  }
  return COHORT_OK;
}

cohort_status cohort__sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) return cohort__error(COHORT_ERR_REMOTE, "connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      COHORT_CHECK(cohort__sock_wait(fd, POLLIN, deadline_ns));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return cohort__error(COHORT_ERR_REMOTE, "connection reset by peer");
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "recv");
  }
  return COHORT_OK;
}

cohort_status cohort__sock_local_addr_towards(const char *host, char *out, size_t out_len) {
  struct addrinfo *ai = NULL;
  COHORT_CHECK(resolve(host, 9, 0, &ai));
  int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  cohort_status st = COHORT_OK;
  /* A UDP connect sends nothing; it only makes the kernel choose the route and so the source address. */
  if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "no route to '%s'", host);
  else
    st = cohort__sock_name(fd, out, out_len, NULL);
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  if (st == COHORT_OK && out) {
    char *colon = strrchr(out, ':'); /* keep the address only */
    if (colon) *colon = '\0';
  }
  return st;
}

cohort_status cohort__sock_name(int fd, char *out, size_t out_len, int *port) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "getsockname");
  char ip[INET6_ADDRSTRLEN] = "?";
  int p = 0;
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
    p = ntohs(s4->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
    p = ntohs(s6->sin6_port);
  }
  if (out && out_len) snprintf(out, out_len, "%s:%d", ip, p);
  if (port) *port = p;
  return COHORT_OK;
}
