/*
 * tcp.h: the TCP transport (tcp.c: the data path; tcp_mesh.c: connecting the mesh; tcp_setup.c: its rendezvous over
 * the store): a full mesh of sockets between the ranks, COHORT_SOCKETS_PER_PEER per pair, each link authenticated
 * with the job secret.
 *
 * Setting it up over a store, as shm's is (shm.h): every rank listens on a fresh port, publishes "peer/<rank>" =
 * "host:port" in the store it is given (the job's key space, or a sub-communicator's), reads everyone's, connects
 * the mesh, and counts in under "connected", so that no rank returns (and rank 0 stops no store) while another
 * still needs the store.
 */
#ifndef COHORT_TRANSPORT_TCP_H
#define COHORT_TRANSPORT_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
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
/* Its progress op (transport.h), for the layered transport's. */
cohort_status cohort__tcp_progress(cohort__transport *t, int *progressed);

/* The setup's options: the mesh's, where to listen, and the caller's hooks. */
typedef struct cohort__tcp_setup_options {
  cohort__tcp_options mesh; /* its connect_deadline_ns is the setup's deadline */
  const char *bind_addr;    /* COHORT_BIND_ADDR: listen there; "": */
  const char *ifname;       /* COHORT_SOCKET_IFNAME: on that interface's first IPv4 (else IPv6) address; "": */
  const char *towards;      /* on the address whose route leads towards this host (the store's) */
  long timeout_s;           /* COHORT_TIMEOUT, for messages */
  /* Optional: called while waiting for peer p's address; a failure it returns (p runs another transport, say) ends
   * the setup at once instead of at the deadline. */
  cohort_status (*peer_elsewhere)(void *arg, int p);
  /* Optional: the failure to return when some ranks' "<key>/<rank>" is still missing at the deadline (the caller
   * names them); without it, COHORT_ERR_TIMEOUT. */
  cohort_status (*never_arrived)(void *arg, const char *key);
  void *arg;
} cohort__tcp_setup_options;

/* Builds the TCP transport of rank of size over store (the keys above), by deadline_ns (COHORT_TIMEOUT). */
cohort_status cohort__tcp_rendezvous(int rank, int size, cohort__store *store, int64_t deadline_ns,
                                     const cohort__tcp_setup_options *options, cohort__transport **out);

#endif
