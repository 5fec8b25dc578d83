/*
 * tcp.h: the TCP transport (tcp.c: the data path; tcp_mesh.c: connecting the mesh): a full mesh of sockets between
 * the ranks, COHORT_SOCKETS_PER_PEER per pair, each link authenticated with the job secret.
 */
#ifndef COHORT_TRANSPORT_TCP_H
#define COHORT_TRANSPORT_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

typedef struct cohort__tcp_options {
  const char *secret;
  int sockets_per_peer;
  int socket_buffer;
  int spin_us;
  double op_timeout_s;
  int64_t connect_deadline_ns;
} cohort__tcp_options;

/* Opens this rank's listening socket first (its address is published before the mesh is connected). */
cohort_status cohort__tcp_listen(const char *bind_addr, int *listen_fd, char *addr, size_t addr_len);
/* Connects the mesh given every rank's "host:port" listening address; takes ownership of listen_fd (closed once
 * every peer is connected). */
cohort_status cohort__tcp_create(int rank, int size, int listen_fd, char *const *peer_addrs,
                                 const cohort__tcp_options *options, cohort__transport **out);
/* Optional: check(arg) runs whenever a wait of t finds nothing to do; a failure it returns fails the wait (and the
 * transport). The layered transport uses it to see node peers that run another collective over shared memory. */
void cohort__tcp_set_idle_check(cohort__transport *t, cohort_status (*check)(void *arg), void *arg);
/* Reads what has arrived on t without waiting (frames of the current call stay held for their receives, as in a
 * wait): an ABORT from a peer, or a link lost while something was expected of it, fails t. Returns t's status. For
 * the thread that drives t while it waits on something else (the node layer of the layered transport). */
cohort_status cohort__tcp_poll(cohort__transport *t);

#endif
