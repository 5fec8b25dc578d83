/*
 * tcp_impl.h: the TCP transport's private state, shared by its data path (tcp.c) and its mesh setup (tcp_mesh.c).
 *
 * A transport holds k channels (sockets) per peer; each channel carries frames both ways and has its own send
 * queue and receive state machine (tcp.c says how a frame is received). Thread-safety: as transport.h says.
 */
#ifndef COHORT_TRANSPORT_TCP_IMPL_H
#define COHORT_TRANSPORT_TCP_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/frame.h"
#include "transport/transport.h"

enum { RX_HEADER, RX_HELD, RX_PAYLOAD, RX_UNEXPECTED, RX_ABORT };

typedef struct unexpected {
  struct unexpected *next;
  cohort__frame hdr;
  char *data;
} unexpected;

typedef struct channel {
  int fd;
  int peer;
  int readable, writable; /* edge-triggered readiness, cleared on EAGAIN */
  int eof;                /* the peer closed its side between frames (it may simply be done) */
  /* send side */
  cohort__req *send_head, *send_tail;
  cohort__frame send_hdr;
  size_t send_hdr_done;
  int send_started;
  /* receive side */
  cohort__req *recv_head, *recv_tail;
  cohort__frame recv_hdr;
  size_t recv_hdr_done;
  int rx_state;
  unexpected *unexp_head, *unexp_tail;
  size_t aside_bytes; /* payload bytes of the frames in unexp_head..tail */
  char *rx_buf;       /* payload target of RX_UNEXPECTED / RX_ABORT */
  size_t rx_done;
} channel;

typedef struct tcp_transport {
  cohort__transport base;
  int k;          /* channels per peer */
  channel *chans; /* [peer * k + c]; the self entries are unused */
  uint64_t *send_frames, *recv_frames;
  int epfd;
  cohort__call call;
  cohort__tcp_options opt;
  cohort_status status;
  char message[COHORT__ABORT_TEXT_MAX];
  atomic_int abort_requested; /* set once the requested_* fields are written */
  atomic_flag abort_claimed;  /* the one interrupt() caller that writes them */
  cohort_status requested_status;
  char requested_message[COHORT__ABORT_TEXT_MAX];
  size_t pending; /* posted requests not yet complete */
  /* A link that broke while we still needed it. Its failure is reported after a short grace, in which the other
   * links are still read: if an ABORT with the real cause (a mismatch, say) is on its way, that wins. */
  int64_t lost_deadline_ns;
  int lost_peer;
  char lost_why[96];
  cohort_status (*idle_check)(void *arg); /* cohort__tcp_set_idle_check */
  void *idle_arg;
} tcp_transport;

static inline channel *chan_at(tcp_transport *t, int peer, int c) { return &t->chans[peer * t->k + c]; }

/* The transport table (tcp.c), which tcp_mesh.c puts in the transports it connects, and the destructor a failed
 * connect calls. */
extern const cohort__transport_ops cohort__tcp_ops;
void cohort__tcp_destroy(cohort__transport *t);

#endif
