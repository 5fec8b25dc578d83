/*
 * tcp_impl.h: the TCP transport's private state, shared by its data path (tcp.c) and its mesh setup (tcp_mesh.c).
 *
 * A transport holds k channels (sockets) per peer; each channel carries frames both ways and has its own send
 * queue and receive state (frame.c says how a frame is received). Thread-safety: as transport.h says.
 */
#ifndef COHORT_TRANSPORT_TCP_IMPL_H
#define COHORT_TRANSPORT_TCP_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/failure.h"
#include "transport/frame.h"
#include "transport/tcp.h"

typedef struct channel {
  cohort__link l; /* its frames both ways (frame.c); first, so that a link is its channel; l.peer is the peer */
  int fd;
  int readable, writable; /* edge-triggered readiness, cleared on EAGAIN */
  int eof;                /* the peer closed its side between frames (it may simply be done) */
} channel;

typedef struct tcp_transport {
  cohort__transport base;
  int k;          /* channels per peer */
  channel *chans; /* [peer * k + c]; the self entries are unused */
  uint64_t *send_frames, *recv_frames;
  int epfd;
  cohort__links links; /* the channels' frame machine (frame.h) */
  cohort__call call;
  cohort__tcp_options opt;
  cohort__failure failure;           /* the first failure, final */
  cohort__failure_request interrupt; /* interrupt(): any thread asks, the driving thread fails */
  size_t pending;                    /* posted requests not yet complete */
  /* A link that broke while we still needed it. Its failure is reported after a short grace, in which the other
   * links are still read: if an ABORT with the real cause (a mismatch, say) is on its way, that wins. */
  int64_t lost_deadline_ns;
  int lost_peer;
  char lost_why[96];
  cohort_status (*idle_check)(void *arg); /* cohort__tcp_set_idle_check */
  void *idle_arg;
} tcp_transport;

static inline channel *chan_at(tcp_transport *t, int peer, int c) { return &t->chans[peer * t->k + c]; }

/* The transport table and the channels' byte carrier (tcp.c), which tcp_mesh.c puts in the transports it connects,
 * and the destructor a failed connect calls. */
extern const cohort__transport_ops cohort__tcp_ops;
extern const cohort__link_ops cohort__tcp_link_ops;
void cohort__tcp_destroy(cohort__transport *t);

#endif
