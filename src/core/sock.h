/*
 * sock.h: small TCP helpers shared by the store and the TCP transport: listen, connect with retry, accept, and
 * whole-buffer send/receive with a deadline. Deadlines are absolute cohort__now_ns() times; 0 means no deadline.
 * A peer that closes the connection gives COHORT_ERR_REMOTE; a deadline gives COHORT_ERR_TIMEOUT.
 */
#ifndef COHORT_CORE_SOCK_H
#define COHORT_CORE_SOCK_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

/* Listens on host:port (host NULL or "" for every interface; port 0 for any free port). */
cohort_status cohort__sock_listen(const char *host, int port, int backlog, int *fd_out, int *port_out);
/* Connects to host:port, retrying refused connections until deadline_ns. The socket is blocking, TCP_NODELAY. */
cohort_status cohort__sock_connect(const char *host, int port, int64_t deadline_ns, int *fd_out);
/* Accepts one connection, waiting at most until deadline_ns. peer gets "ip:port" of the other side. */
cohort_status cohort__sock_accept(int listen_fd, int64_t deadline_ns, int *fd_out, char *peer, size_t peer_len);
cohort_status cohort__sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns);
cohort_status cohort__sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns);
/* Waits until fd is readable (events POLLIN) or writable (POLLOUT); COHORT_ERR_TIMEOUT at the deadline. */
cohort_status cohort__sock_wait(int fd, short events, int64_t deadline_ns);
cohort_status cohort__sock_set_nonblocking(int fd, int nonblocking);
/* TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF of buffer_bytes when it is > 0. */
void cohort__sock_tune(int fd, int buffer_bytes);
/* The local IP address this host uses to reach host (the address peers should dial), as text. */
cohort_status cohort__sock_local_addr_towards(const char *host, char *out, size_t out_len);
/* "ip:port" of the socket's own address. */
cohort_status cohort__sock_name(int fd, char *out, size_t out_len, int *port);

#endif
