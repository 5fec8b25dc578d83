/*
 * tcp_mesh.c: connecting the TCP transport's full mesh (cohort__tcp_listen, cohort__tcp_create: tcp.h). Each rank dials
 * every lower rank and accepts from every higher one, COHORT_SOCKETS_PER_PEER links per pair. Dialing runs on the
 * calling thread, accepting on a thread of its own, and every incoming connection is authenticated on its own thread
 * (auth.h, purpose "cohort-peer-v1"), so a stranger that says nothing or speaks garbage only ever holds its own
 * thread; a handshake has HANDSHAKE_S. Once every link is up, the sockets go non-blocking into one epoll set.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "store/auth.h"
#include "transport/tcp_impl.h"

#define HELLO_MAGIC 0x4f4c4843u /* "CHLO" */
#define PEER_AUTH_PURPOSE "cohort-peer-v1"
#define HANDSHAKE_S 5.0

typedef struct hello {
  uint32_t magic;
  int32_t rank;
  int32_t channel;
  int32_t size;
} hello;

cohort_status cohort__tcp_listen(const char *bind_addr, int *listen_fd, char *addr, size_t addr_len) {
  int port = 0;
  COHORT_CHECK(cohort__sock_listen(bind_addr, 0, 128, listen_fd, &port));
  snprintf(addr, addr_len, "%s:%d", bind_addr, port);
  return COHORT_OK;
}

static cohort_status split_addr(const char *addr, char *host, size_t host_len, int *port) {
  const char *colon = strrchr(addr, ':');
  if (!colon || colon == addr) return cohort__error(COHORT_ERR_PROTOCOL, "bad peer address '%s'", addr);
  size_t n = (size_t)(colon - addr);
  if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') { /* [v6]:port */
    addr++;
    n -= 2;
  }
  if (n >= host_len) return cohort__error(COHORT_ERR_PROTOCOL, "peer address too long '%s'", addr);
  memcpy(host, addr, n);
  host[n] = '\0';
  *port = atoi(colon + 1);
  return COHORT_OK;
}

typedef struct handshake {
  struct handshake *next;
  struct accept_job *job;
  int fd; /* -1 once the thread has handed it over or closed it (under job->mu) */
  char who[96];
  pthread_t thread;
} handshake;

typedef struct accept_job {
  tcp_transport *t;
  int listen_fd;
  pthread_mutex_t mu;
  int connected; /* links from higher ranks proven so far */
  handshake *handshakes;
  cohort_status status;
  char message[1024];
} accept_job;

/* One thread per incoming connection: a stranger that says nothing or speaks garbage only ever holds its own
 * thread, never the real peers' handshakes. */
static void *handshake_main(void *arg) {
  handshake *h = arg;
  accept_job *job = h->job;
  tcp_transport *t = job->t;
  hello hl;
  int64_t deadline = cohort__now_ns() + (int64_t)(HANDSHAKE_S * 1e9);
  cohort_status st = cohort__auth_accept(h->fd, t->opt.secret, PEER_AUTH_PURPOSE, &hl, sizeof hl, deadline);
  if (st == COHORT_OK && (hl.magic != HELLO_MAGIC || hl.size != t->base.size || hl.rank <= t->base.rank ||
                          hl.rank >= t->base.size || hl.channel < 0 || hl.channel >= t->k))
    st = cohort__error(COHORT_ERR_PROTOCOL, "bad hello (rank %d, channel %d, world size %d; this job has %d)", hl.rank,
                       hl.channel, hl.size, t->base.size);
  pthread_mutex_lock(&job->mu);
  if (st == COHORT_OK) {
    channel *ch = chan_at(t, hl.rank, hl.channel);
    if (ch->fd >= 0) {
      st = cohort__error(COHORT_ERR_PROTOCOL, "duplicate link from rank %d", hl.rank);
    } else {
      ch->fd = h->fd;
      h->fd = -1;
      job->connected++;
    }
  }
  int fd = h->fd;
  h->fd = -1;
  pthread_mutex_unlock(&job->mu);
  if (st != COHORT_OK) {
    /* One budget for the process: a port scan meets every peer port of it. */
    static cohort__log_budget refusals = COHORT__LOG_BUDGET_INIT;
    uint64_t held;
    if (!cohort__log_budget_take(&refusals, &held)) {
      /* counted; reported with the next line that passes */
    } else if (held) {
      COHORT_LOG_WARN("refused a connection from %s to the peer port: %s (and %llu earlier refusals not logged)",
                      h->who, cohort_last_error(), (unsigned long long)held);
    } else {
      COHORT_LOG_WARN("refused a connection from %s to the peer port: %s", h->who, cohort_last_error());
    }
    close(fd);
  }
  return NULL;
}

/* Accepts the links of every higher rank, each handshake on its own thread. */
static void *accept_peers(void *arg) {
  accept_job *job = arg;
  tcp_transport *t = job->t;
  int expected = (t->base.size - 1 - t->base.rank) * t->k;
  job->status = COHORT_OK;
  for (;;) {
    pthread_mutex_lock(&job->mu);
    int done = job->connected >= expected;
    pthread_mutex_unlock(&job->mu);
    if (done) break;
    if (t->opt.connect_deadline_ns && cohort__now_ns() > t->opt.connect_deadline_ns) {
      job->status =
          cohort__error(COHORT_ERR_TIMEOUT, "timed out waiting for higher ranks to connect to rank %d", t->base.rank);
      break;
    }
    struct pollfd p = {.fd = job->listen_fd, .events = POLLIN};
    int n = poll(&p, 1, 50);
    if (n <= 0) continue;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) { /* shut down by the dialing side after a failure */
      job->status = cohort__error(COHORT_ERR_REMOTE, "mesh setup abandoned");
      break;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(job->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) continue;
    handshake *h = calloc(1, sizeof *h);
    if (!h) {
      close(fd);
      continue;
    }
    h->job = job;
    h->fd = fd;
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) == 0) {
      char host[64] = "?";
      if (peer.ss_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)&peer)->sin_addr, host, sizeof host);
      snprintf(h->who, sizeof h->who, "%s:%d", host, ntohs(((struct sockaddr_in *)&peer)->sin_port));
    }
    if (pthread_create(&h->thread, NULL, handshake_main, h) != 0) {
      close(fd);
      free(h);
      continue;
    }
    h->next = job->handshakes;
    job->handshakes = h;
  }
  /* Strangers still talking (or silent) are cut off now; their threads end at once. */
  pthread_mutex_lock(&job->mu);
  for (handshake *h = job->handshakes; h; h = h->next)
    if (h->fd >= 0) shutdown(h->fd, SHUT_RDWR);
  pthread_mutex_unlock(&job->mu);
  for (handshake *h = job->handshakes, *next; h; h = next) {
    next = h->next;
    pthread_join(h->thread, NULL);
    free(h);
  }
  job->handshakes = NULL;
  if (job->status != COHORT_OK) snprintf(job->message, sizeof job->message, "%s", cohort_last_error());
  return NULL;
}

static cohort_status connect_peer(tcp_transport *t, int peer, const char *addr) {
  char host[256];
  int port = 0;
  COHORT_CHECK(split_addr(addr, host, sizeof host, &port));
  for (int c = 0; c < t->k; c++) {
    int fd = -1;
    cohort_status st = cohort__sock_connect(host, port, t->opt.connect_deadline_ns, &fd);
    if (st != COHORT_OK) return cohort__error_prefix(st, "connecting to rank %d at %s", peer, addr);
    hello h = {.magic = HELLO_MAGIC, .rank = t->base.rank, .channel = c, .size = t->base.size};
    st = cohort__auth_connect(fd, t->opt.secret, PEER_AUTH_PURPOSE, &h, sizeof h, t->opt.connect_deadline_ns);
    if (st != COHORT_OK) {
      close(fd);
      return cohort__error_prefix(st, "handshake with rank %d at %s", peer, addr);
    }
    chan_at(t, peer, c)->fd = fd;
  }
  return COHORT_OK;
}

cohort_status cohort__tcp_create(int rank, int size, int listen_fd, char *const *peer_addrs,
                                 const cohort__tcp_options *options, cohort__transport **out) {
  cohort_status st = COHORT_OK;
  tcp_transport *t = calloc(1, sizeof *t);
  if (!t) {
    close(listen_fd);
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  }
  t->base = (cohort__transport){.ops = &cohort__tcp_ops, .rank = rank, .size = size};
  t->opt = *options;
  t->k = options->sockets_per_peer > 0 ? options->sockets_per_peer : 1;
  t->epfd = -1;
  t->chans = calloc((size_t)size * (size_t)t->k, sizeof *t->chans);
  t->send_frames = calloc((size_t)size, sizeof *t->send_frames);
  t->recv_frames = calloc((size_t)size, sizeof *t->recv_frames);
  if (!t->chans || !t->send_frames || !t->recv_frames) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < size * t->k; i++) {
    t->chans[i].fd = -1;
    t->chans[i].l.peer = i / t->k;
  }
  t->links = (cohort__links){.ops = &cohort__tcp_link_ops,
                             .t = t,
                             .call = &t->call,
                             .pending = &t->pending,
                             .rank = rank,
                             .count = size * t->k};

  /* Accept from higher ranks on a thread while this one dials the lower ranks, so nobody waits in a chain. */
  accept_job job = {.t = t, .listen_fd = listen_fd};
  pthread_mutex_init(&job.mu, NULL);
  pthread_t acceptor;
  if (pthread_create(&acceptor, NULL, accept_peers, &job) != 0) {
    st = cohort__error(COHORT_ERR_SYSTEM, "cannot start the accept thread");
    goto fail;
  }
  for (int p = 0; p < rank && st == COHORT_OK; p++)
    st = connect_peer(t, p, peer_addrs[p]);
  if (st != COHORT_OK) shutdown(listen_fd, SHUT_RDWR); /* wakes the acceptor */
  pthread_join(acceptor, NULL);
  pthread_mutex_destroy(&job.mu);
  close(listen_fd);
  listen_fd = -1;
  if (st == COHORT_OK && job.status != COHORT_OK) st = cohort__error(job.status, "%s", job.message);
  if (st != COHORT_OK) goto fail;

  t->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (t->epfd < 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "epoll_create1");
    goto fail;
  }
  for (int i = 0; i < size * t->k; i++) {
    channel *ch = &t->chans[i];
    if (ch->fd < 0) continue;
    cohort__sock_set_nonblocking(ch->fd, 1);
    cohort__sock_tune(ch->fd, options->socket_buffer);
    ch->readable = ch->writable = 1;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = ch};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, ch->fd, &ev) != 0) {
      st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "epoll_ctl");
      goto fail;
    }
  }
  *out = &t->base;
  return COHORT_OK;
fail:
  if (listen_fd >= 0) close(listen_fd);
  cohort__tcp_destroy(&t->base);
  return st;
}
