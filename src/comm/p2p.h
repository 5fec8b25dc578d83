/*
 * p2p.h: point-to-point messages (cohort_send, cohort_recv, cohort_isend, cohort_irecv) and the engine that matches
 * them, one per communicator. p2p.c says how.
 */
#ifndef COHORT_COMM_P2P_H
#define COHORT_COMM_P2P_H

#include <stddef.h>

#include "cohort/cohort.h"
#include "store/store.h"
#include "transport/transport.h"

typedef struct cohort__p2p cohort__p2p;
typedef struct cohort__p2p_op cohort__p2p_op;

/* Starts the engine over its own transport t (NULL for a 1-rank communicator: messages to itself only), which it
 * owns from then on, as the store connection `store` (NULL for none) that t was set up over. goodbye: whether the
 * engine tells its peers when it is destroyed (not over in-process hubs, where a peer may be gone already). */
cohort_status cohort__p2p_create(cohort__transport *t, int rank, int size, int goodbye, cohort__store *store,
                                 cohort__p2p **out);
/* Tells the peers that this rank leaves (their receives from it fail from then on instead of waiting), fails what is
 * still in flight, stops the engine's thread and frees everything. Safe on NULL. */
void cohort__p2p_destroy(cohort__p2p *p);
/* Any thread: fails every message in flight and every later one with status and message, and tells the peers. */
void cohort__p2p_abort(cohort__p2p *p, cohort_status status, const char *message);

/* Posts a send (peer: a rank) or a receive (peer: a rank or COHORT_ANY_SOURCE; tag: >= 0 or COHORT_ANY_TAG) of count
 * elements of dtype at buf; the arguments were checked. blocking: the caller waits for it at once (cohort_send,
 * cohort_recv), so a receive from any source fails once every other rank has left. */
cohort_status cohort__p2p_post(cohort__p2p *p, int is_send, int blocking, void *buf, size_t count, cohort_dtype dtype,
                               int peer, int tag, cohort__p2p_op **out);
/* Waits for op; returns its status (the message in cohort_last_error()). */
cohort_status cohort__p2p_wait(cohort__p2p_op *op);
/* *done = 1 and its status once op completed, else *done = 0 and COHORT_OK. */
cohort_status cohort__p2p_test(cohort__p2p_op *op, int *done);
/* A completed receive's source, tag and count: COHORT_ERR_INVALID for a send or one not complete. */
cohort_status cohort__p2p_info(const cohort__p2p_op *op, cohort_recv_info *info);
/* Frees op, waiting for it first. Safe on NULL. */
void cohort__p2p_op_free(cohort__p2p_op *op);
/* After cohort__p2p_destroy: op no longer refers to it; one not done fails with "communicator destroyed", and wait,
 * test and info then answer from op alone. */
void cohort__p2p_op_detach(cohort__p2p_op *op);

#endif
