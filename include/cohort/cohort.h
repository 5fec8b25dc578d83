/*
 * cohort.h: the communicator and its collectives.
 *
 * A communicator (cohort_comm) joins the N processes (or threads) of one job. It is made by cohort_init(), which
 * reads the torchrun-compatible environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT) plus the COHORT_* knobs listed in docs/env.md, meets the other ranks at the rendezvous store,
 * authenticates every link with COHORT_SECRET when it is set, and connects a full mesh.
 *
 * Collectives must be called in the same order, with the same count, dtype, op and root, on every rank. A rank
 * that disagrees makes every rank return COHORT_ERR_MISMATCH; a rank that dies makes every survivor return
 * COHORT_ERR_REMOTE. After any error other than COHORT_ERR_INVALID the communicator is aborted: every later call
 * returns the same status at once, and the only thing left to do is cohort_comm_destroy().
 *
 * Errors: every call that can fail returns a cohort_status. cohort_last_error() returns a thread-local message with
 * the detail (which rank, which call, what differed). The library never prints except through its logger
 * (COHORT_LOG_LEVEL) and never exits the process.
 *
 * Thread-safety: the cohort_* functions may be called from any thread. Calls on one communicator are executed in
 * the order they were issued; if several threads issue on the same communicator, the user must make sure that the
 * resulting order is the same on every rank. Blocking calls and cohort_work_wait() may run concurrently with work
 * in flight on the progress thread. A cohort_work handle belongs to the thread that holds it.
 *
 * Memory: a collective never keeps a pointer to caller memory after it completes. For the asynchronous forms
 * (cohort_i*), the buffers belong to the library from the call until cohort_work_wait() returns or
 * cohort_work_test() reports completion.
 */
#ifndef COHORT_COHORT_H
#define COHORT_COHORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COHORT_VERSION_MAJOR 0
#define COHORT_VERSION_MINOR 1
#define COHORT_VERSION_PATCH 0

/* Marks the public API: libcohort is built with -fvisibility=hidden, so libcohort.so exports these functions and
 * nothing else (the cohort__ internals stay inside; tests that need them link the static objects). */
#if defined(__GNUC__)
#define COHORT_API __attribute__((visibility("default")))
#else
#define COHORT_API
#endif

typedef enum cohort_status {
  COHORT_OK = 0,
  COHORT_ERR_INVALID = 1,  /* a bad argument or bad environment: nothing was started */
  COHORT_ERR_SYSTEM = 2,   /* a system call failed (errno is named in the message) */
  COHORT_ERR_TIMEOUT = 3,  /* a peer or the store did not answer in time */
  COHORT_ERR_REMOTE = 4,   /* a peer died, closed its link, or aborted */
  COHORT_ERR_MISMATCH = 5, /* ranks disagree on the call: op, count, dtype, reduction or root */
  COHORT_ERR_AUTH = 6,     /* a peer or the store failed to prove it knows the job secret */
  COHORT_ERR_INTERNAL = 7, /* a bug in cohort: please report it with the message */
  COHORT_ERR_PROTOCOL = 8, /* a malformed, truncated or unexpected frame arrived */
} cohort_status;

typedef enum cohort_dtype {
  COHORT_F32 = 0,
  COHORT_F64 = 1,
  COHORT_F16 = 2,  /* IEEE half; reductions compute in float32 */
  COHORT_BF16 = 3, /* bfloat16; reductions compute in float32 */
  COHORT_I32 = 4,  /* sums and products wrap around on overflow */
  COHORT_I64 = 5,
  COHORT_U8 = 6,
  /* The integer types torch uses besides these (numbers never change meaning: they travel in frames). */
  COHORT_I8 = 7,
  COHORT_I16 = 8,
  COHORT_BOOL = 9, /* one byte, 0 false, anything else true; results are 0 or 1: SUM and MAX are a logical or,
                    * PROD and MIN a logical and (as torch on gloo), BXOR an exclusive or; AVG is refused */
  COHORT_DTYPE_COUNT
} cohort_dtype;

typedef enum cohort_op {
  COHORT_SUM = 0,
  COHORT_AVG = 1, /* the sum divided by the world size; integer types round toward zero */
  COHORT_MIN = 2,
  COHORT_MAX = 3,
  COHORT_PROD = 4,
  /* Bitwise ops, for the integer dtypes (and bool) only: a float dtype is COHORT_ERR_INVALID. */
  COHORT_BAND = 5,
  COHORT_BOR = 6,
  COHORT_BXOR = 7,
  COHORT_OP_COUNT
} cohort_op;

typedef struct cohort_comm cohort_comm;
typedef struct cohort_work cohort_work;

/* ---- version ---- */

/* The version of the library that runs, e.g. "0.1.0" (the headers a program was built with may be older). */
COHORT_API const char *cohort_version(void);

/* ---- errors ---- */

/* A constant, human-readable name for a status ("remote failure", ...). Never NULL. */
COHORT_API const char *cohort_strerror(cohort_status status);
/* The detail of the last failure on this thread; "" when there is none. Valid until the next cohort call. */
COHORT_API const char *cohort_last_error(void);

/* Bytes per element of dtype, 0 for an unknown dtype. */
COHORT_API size_t cohort_dtype_size(cohort_dtype dtype);
/* "f32", "bf16", "i8", "bool", ...; cohort_dtype_parse() accepts these names. */
COHORT_API const char *cohort_dtype_name(cohort_dtype dtype);
COHORT_API cohort_status cohort_dtype_parse(const char *name, cohort_dtype *out);
/* "sum", "avg", "min", "max", "prod", "band", "bor", "bxor". */
COHORT_API const char *cohort_op_name(cohort_op op);
COHORT_API cohort_status cohort_op_parse(const char *name, cohort_op *out);

/* ---- communicators ---- */

/* Joins the job described by the environment. With neither RANK nor WORLD_SIZE set, makes a 1-rank communicator. */
COHORT_API cohort_status cohort_init(cohort_comm **comm);
/* Closes every link and frees the communicator. Safe on NULL. Work still in flight is aborted: its handles
 * (cohort_work) stay the caller's, and waiting on, testing or freeing them afterwards is safe (a finished one keeps its
 * status, the others fail with COHORT_ERR_REMOTE, the communicator destroyed). In a process forked from the one that
 * made it, the communicator is the parent's (its links, and the threads that serve them, exist only there): calls on it
 * fail with COHORT_ERR_INVALID saying so, and destroying it does nothing; cohort_init in the child makes one of its
 * own. */
COHORT_API void cohort_comm_destroy(cohort_comm *comm);

COHORT_API int cohort_rank(const cohort_comm *comm);
COHORT_API int cohort_size(const cohort_comm *comm);
COHORT_API int cohort_local_rank(const cohort_comm *comm);
COHORT_API int cohort_local_size(const cohort_comm *comm);
/* The name of the transport in use: "tcp", "inproc", ... */
COHORT_API const char *cohort_transport_name(const cohort_comm *comm);

/*
 * Zero-copy buffers: bytes of memory (page-aligned) in this rank's shared arena when the transport has one (shm on
 * one host, and tcp+shm across nodes, where it is shared with the ranks of this node; COHORT_SHM_ARENA_BYTES), else
 * from malloc; NULL only when both fail. An allreduce whose sendbuf and recvbuf both lie in the arena skips the
 * copies through staging buffers: the other ranks of the node read the input and the result in place. Free with
 * cohort_free() on the same communicator, before cohort_comm_destroy(). Any thread.
 */
COHORT_API void *cohort_alloc(cohort_comm *comm, size_t bytes);
COHORT_API void cohort_free(cohort_comm *comm, void *ptr);
/* 1 when [ptr, ptr + bytes) lies in this rank's shared arena (collectives on it are zero copy), else 0. Any thread. */
COHORT_API int cohort_in_arena(const cohort_comm *comm, const void *ptr, size_t bytes);
/* The arena's addresses in this process, [*base, *base + *bytes), and 1; 0 (and NULL, 0) when the transport has
 * none. A block still allocated when the communicator is destroyed stays mapped, and valid, until the process ends
 * (torch's tensors outlive process groups: python/torch_ext/shared_alloc.cpp); its pages go back to /dev/shm when
 * its holder calls madvise(MADV_REMOVE) on it. Any thread. */
COHORT_API int cohort_arena_range(const cohort_comm *comm, void **base, size_t *bytes);

/* Makes every later call on comm (on every rank) fail with COHORT_ERR_REMOTE naming this rank and reason. */
COHORT_API void cohort_comm_abort(cohort_comm *comm, const char *reason);

/*
 * In-process groups: N ranks as threads of one process, joined by the in-process transport. Make the group once,
 * then call cohort_init_inproc() from each of the N threads with its rank; the call returns when all N have joined.
 * The group may be destroyed once every thread's cohort_init_inproc() has returned.
 */
typedef struct cohort_inproc_group cohort_inproc_group;
COHORT_API cohort_status cohort_inproc_group_create(int size, cohort_inproc_group **group);
COHORT_API void cohort_inproc_group_destroy(cohort_inproc_group *group);
COHORT_API cohort_status cohort_init_inproc(cohort_inproc_group *group, int rank, cohort_comm **comm);

/*
 * Sub-communicators (MPI_Comm_split's meaning). Collective over comm: every rank of comm calls it, in the same order
 * relative to comm's other collectives. The ranks that pass the same color >= 0 form a new communicator in *sub,
 * numbered by key, then by their rank in comm; a rank with color COHORT_UNDEFINED (any negative color) takes part in
 * the exchange but joins nothing and gets *sub = NULL. Returns once every member of this rank's color has joined.
 *
 * The sub-communicator is a communicator like any other, independent of comm from then on: its own transport (its
 * own TCP mesh, shared memory segments or in-process hub, chosen by where its members are), its own progress thread,
 * call numbering and mismatch checks. So collectives on different sub-communicators (and on comm) may run at the
 * same time from different threads of one process, and each makes progress on its own. Its failure messages name
 * ranks by their rank in comm too: "rank 2 (rank 5 of the parent)". A failed comm does not fail sub-communicators
 * made before (nor the other way round): each fails when it next needs a rank that is gone.
 *
 * Ownership: the caller destroys *sub with cohort_comm_destroy(), before or after comm (it holds nothing of comm's,
 * but a process's first communicator may be the one that serves the job's store, which a later cohort_comm_split on
 * a sub-communicator needs). Thread-safety: as any collective on comm.
 */
#define COHORT_UNDEFINED (-1)
COHORT_API cohort_status cohort_comm_split(cohort_comm *comm, int color, int key, cohort_comm **sub);
/* A communicator of the same ranks in the same order: cohort_comm_split(comm, 0, rank of comm, dup). Collectives on
 * it never interfere with those on comm (a library's own traffic, say). */
COHORT_API cohort_status cohort_comm_dup(cohort_comm *comm, cohort_comm **dup);
/*
 * A communicator of the same ranks in the same order, as cohort_comm_dup's, met through the job's store under name
 * instead of by a collective on comm: each rank may call it at any time and from any thread, without regard to the
 * calls comm is making meanwhile, and it returns once every rank of comm has called it with the same name. A library
 * that agrees with its peers on its own schedule (over comm's messages, say) makes its communicator this way while
 * the program's collectives go on. name: 1 to 48 of [A-Za-z0-9_.-], once per name per communicator (a second twin of
 * one name is refused with COHORT_ERR_INVALID, as a name outside that alphabet). A rank that never calls it leaves
 * the others waiting until COHORT_TIMEOUT. Over COHORT_TRANSPORT=mpi the communicator cohort_init made has one twin,
 * over a duplicate of MPI_COMM_WORLD set aside by cohort_init (Open MPI cannot make communicators safely while other
 * threads drive it); a second twin there is refused with COHORT_ERR_INVALID.
 */
COHORT_API cohort_status cohort_comm_twin(cohort_comm *comm, const char *name, cohort_comm **twin);

/* ---- collectives (blocking) ---- */

/* recvbuf[i] = op over ranks of sendbuf[i], on every rank. In place when sendbuf == recvbuf. */
COHORT_API cohort_status cohort_allreduce(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                          cohort_dtype dtype, cohort_op op);
/* Copies root's buf to every rank's buf. */
COHORT_API cohort_status cohort_broadcast(cohort_comm *comm, void *buf, size_t count, cohort_dtype dtype, int root);
/* recvbuf holds size*count elements: rank r's sendbuf at offset r*count. count is per rank. */
COHORT_API cohort_status cohort_allgather(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                          cohort_dtype dtype);
/* sendbuf holds size*count elements; rank r receives block r of the reduction. count is per rank. */
COHORT_API cohort_status cohort_reduce_scatter(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                               cohort_dtype dtype, cohort_op op);
/* Returns once every rank has entered the barrier. */
COHORT_API cohort_status cohort_barrier(cohort_comm *comm);
/*
 * Adds tag to the next collective this thread calls (blocking or cohort_i*), for the ranks to compare with the rest
 * of the call before data moves: ranks whose tags differ are refused with COHORT_ERR_MISMATCH, as for another count
 * or dtype. A binding passes what the C call cannot see, such as a hash of the tensor's shape (two tensors of 6
 * elements, 2x3 and 3x2, make the same allreduce to C). 0 (the default for every call) compares as no tag. Only
 * with COHORT_CALL_CHECK=on; the tag is not sent with the data.
 */
COHORT_API void cohort_tag_next_call(uint64_t tag);
/*
 * This rank has no more data (Horovod's hvd.join() for its collectives; the DDP engine's uneven inputs are
 * cohort_ddp_join). Until every rank has called cohort_join, this rank takes part in the others' collectives
 * as they call them: an allreduce or reduce_scatter that sums or averages gets zeros from it (an average still
 * divides by the whole world, as Horovod's does); any other call fails on the ranks that made it with
 * COHORT_ERR_MISMATCH naming the joined ranks, before any data moved, and they may go on. Returns once every rank
 * has joined; *last_rank (may be NULL) is then the rank that joined last (that took part in the fewest calls;
 * ties: the highest), the same on every rank. Needs COHORT_CALL_CHECK=on (the default): the joined rank learns
 * each call from the ranks' agreement. No other thread may call collectives on comm meanwhile. A joined rank
 * waits on the others like any collective: COHORT_OP_TIMEOUT bounds how long they may compute between calls.
 */
COHORT_API cohort_status cohort_join(cohort_comm *comm, int *last_rank);

/*
 * Rooted and personalized collectives. Counts and displacements are in elements. A buffer that a rank does not use
 * (recvbuf of reduce and gather(v) off the root, sendbuf of scatter(v) off the root) is not read and may be NULL.
 * Every rank passes the same root; for gatherv, scatterv and allgatherv every rank passes the same counts array
 * (counts[i] for rank i; ranks whose arrays differ all get COHORT_ERR_MISMATCH naming both calls, before any data
 * moves). displs (where rank i's block lies, displs[i] elements into the buffer that holds every rank's block) is
 * read where that buffer is (the root, or every rank for allgatherv); NULL means packed blocks: displs[i] = the sum
 * of counts[j] for j < i. Blocks must not overlap each other. The asynchronous forms read counts and displs when
 * they run: the arrays, like the buffers, belong to the library until the work completes.
 */
/* recvbuf[i] = op over ranks of sendbuf[i], on root only (count elements). In place at the root when sendbuf ==
 * recvbuf. */
COHORT_API cohort_status cohort_reduce(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                       cohort_dtype dtype, cohort_op op, int root);
/* The root's recvbuf (size*count elements) gets rank r's sendbuf (count elements) at offset r*count. The root may pass
 * sendbuf == recvbuf + root*count (in place). */
COHORT_API cohort_status cohort_gather(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                       cohort_dtype dtype, int root);
/* Rank r's recvbuf (count elements) gets block r of the root's sendbuf (size*count elements). The root may pass
 * recvbuf == sendbuf + root*count (in place); other overlap is refused. */
COHORT_API cohort_status cohort_scatter(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                        cohort_dtype dtype, int root);
/* gather with counts[r] elements from rank r (its sendbuf), placed at the root's recvbuf + displs[r]. */
COHORT_API cohort_status cohort_gatherv(cohort_comm *comm, const void *sendbuf, void *recvbuf, const size_t *counts,
                                        const size_t *displs, cohort_dtype dtype, int root);
/* scatter with counts[r] elements to rank r (its recvbuf), taken from the root's sendbuf + displs[r]. */
COHORT_API cohort_status cohort_scatterv(cohort_comm *comm, const void *sendbuf, void *recvbuf, const size_t *counts,
                                         const size_t *displs, cohort_dtype dtype, int root);
/* allgather with counts[r] elements from rank r, placed at recvbuf + displs[r] on every rank. sendbuf may be
 * recvbuf + displs[rank] (in place). */
COHORT_API cohort_status cohort_allgatherv(cohort_comm *comm, const void *sendbuf, void *recvbuf, const size_t *counts,
                                           const size_t *displs, cohort_dtype dtype);
/* sendbuf and recvbuf hold size*count elements: block p of sendbuf goes to rank p, and block p of recvbuf comes from
 * rank p. count is per peer. Separate buffers (overlap is refused). */
COHORT_API cohort_status cohort_alltoall(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                         cohort_dtype dtype);
/* alltoall with blocks of their own sizes: send_counts[p] elements at sendbuf + send_displs[p] go to rank p, and
 * recv_counts[p] elements from rank p land at recvbuf + recv_displs[p] (displs NULL: packed). Rank p's
 * send_counts[r] must equal rank r's recv_counts[p] (else COHORT_ERR_MISMATCH on every rank, naming the two ranks
 * and sizes, before the data lands); send_counts[rank] == recv_counts[rank]. Separate buffers. */
COHORT_API cohort_status cohort_alltoallv(cohort_comm *comm, const void *sendbuf, const size_t *send_counts,
                                          const size_t *send_displs, void *recvbuf, const size_t *recv_counts,
                                          const size_t *recv_displs, cohort_dtype dtype);

/* ---- collectives (asynchronous) ---- */

/*
 * The cohort_i* forms queue the collective on the communicator's progress thread and return at once with a work
 * handle. Work completes in issue order; several may be in flight. Argument errors are returned by the call itself;
 * communication errors are returned by cohort_work_wait()/cohort_work_test().
 */
COHORT_API cohort_status cohort_iallreduce(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                           cohort_dtype dtype, cohort_op op, cohort_work **work);
COHORT_API cohort_status cohort_ibroadcast(cohort_comm *comm, void *buf, size_t count, cohort_dtype dtype, int root,
                                           cohort_work **work);
COHORT_API cohort_status cohort_iallgather(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                           cohort_dtype dtype, cohort_work **work);
COHORT_API cohort_status cohort_ireduce_scatter(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                                cohort_dtype dtype, cohort_op op, cohort_work **work);
COHORT_API cohort_status cohort_ibarrier(cohort_comm *comm, cohort_work **work);

/* The asynchronous forms of the rooted and personalized collectives above. */
COHORT_API cohort_status cohort_ireduce(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                        cohort_dtype dtype, cohort_op op, int root, cohort_work **work);
COHORT_API cohort_status cohort_igather(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                        cohort_dtype dtype, int root, cohort_work **work);
COHORT_API cohort_status cohort_iscatter(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                         cohort_dtype dtype, int root, cohort_work **work);
COHORT_API cohort_status cohort_igatherv(cohort_comm *comm, const void *sendbuf, void *recvbuf, const size_t *counts,
                                         const size_t *displs, cohort_dtype dtype, int root, cohort_work **work);
COHORT_API cohort_status cohort_iscatterv(cohort_comm *comm, const void *sendbuf, void *recvbuf, const size_t *counts,
                                          const size_t *displs, cohort_dtype dtype, int root, cohort_work **work);
COHORT_API cohort_status cohort_iallgatherv(cohort_comm *comm, const void *sendbuf, void *recvbuf, const size_t *counts,
                                            const size_t *displs, cohort_dtype dtype, cohort_work **work);
COHORT_API cohort_status cohort_ialltoall(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                          cohort_dtype dtype, cohort_work **work);
COHORT_API cohort_status cohort_ialltoallv(cohort_comm *comm, const void *sendbuf, const size_t *send_counts,
                                           const size_t *send_displs, void *recvbuf, const size_t *recv_counts,
                                           const size_t *recv_displs, cohort_dtype dtype, cohort_work **work);

/* Blocks until work completes; returns its status (and sets cohort_last_error() on this thread). */
COHORT_API cohort_status cohort_work_wait(cohort_work *work);
/* *done = 1 and returns the work's status once it has completed; *done = 0 and COHORT_OK while it runs. */
COHORT_API cohort_status cohort_work_test(cohort_work *work, int *done);
/* Frees a handle; if the work is still running it is waited for first. Safe on NULL. */
COHORT_API void cohort_work_free(cohort_work *work);

/* ---- point-to-point messages ----
 *
 * cohort_send() sends count elements of dtype from buf to rank peer with tag (>= 0); cohort_recv() receives a
 * message into buf, which holds count elements: from rank peer, or from any rank with COHORT_ANY_SOURCE, with tag,
 * or with any tag with COHORT_ANY_TAG. A receive takes the first message it accepts, in the order the messages came;
 * two messages with the same source and tag are received in the order they were sent (MPI's non-overtaking rule),
 * while messages of different tags may be received in any order. A message may hold fewer elements than the
 * receive (info says how many came); one with more, or of another dtype, fails that receive with
 * COHORT_ERR_MISMATCH naming both sizes (or dtypes), the tag and both ranks, and is dropped: the sender's send
 * completes, and the communicator stays usable (the one exception to the rule at the top of this file). A rank may
 * send to itself. Zero elements is a message too.
 *
 * Messages are not collectives: no other rank needs to call anything in the same order, and they may be mixed
 * freely with collectives on the same communicator, from the same thread or others. They run on a transport of
 * their own that every communicator of more than one rank makes when it is made (the same kind as its collectives':
 * tcp, shm, tcp+shm, mpi or in-process), driven by a thread of its own, so that a collective never waits behind a
 * message nor a message behind a collective (docs/architecture.md says why, and how messages are matched).
 *
 * Completion: cohort_send() returns once buf may be reused (the message may still be on its way: messages up to 64
 * KiB are sent at once, larger ones once the receiver has posted a receive for them, straight into its buffer);
 * cohort_recv() once the message is in buf. The cohort_i* forms return a cohort_work at once, completed by
 * cohort_work_wait()/cohort_work_test() (any number may be in flight; they complete in any order); the buffer belongs
 * to the library until then. cohort_work_recv_info() gives a completed receive's source, tag and count.
 *
 * Failures: a peer that dies fails every message in flight with COHORT_ERR_REMOTE naming it, within the transport's
 * usual grace (well under a second over tcp and shm), and every later message on comm; a receive from a rank that
 * destroyed its communicator without sending fails the same way, and so does a blocking cohort_recv() from any
 * source once every other rank has (a cohort_irecv() from any source still waits: this rank may send to itself; and
 * not with in-process ranks, whose departures are not announced). A receive otherwise waits as long as it takes:
 * COHORT_OP_TIMEOUT does not apply. cohort_comm_abort() fails them too. Host memory only (device pointers give
 * COHORT_ERR_INVALID).
 */
#define COHORT_ANY_SOURCE (-1)
#define COHORT_ANY_TAG (-1)

typedef struct cohort_recv_info {
  int source;   /* the rank that sent the message */
  int tag;      /* its tag */
  size_t count; /* elements received: at most the receive's count */
} cohort_recv_info;

COHORT_API cohort_status cohort_send(cohort_comm *comm, const void *buf, size_t count, cohort_dtype dtype, int peer,
                                     int tag);
/* info may be NULL. */
COHORT_API cohort_status cohort_recv(cohort_comm *comm, void *buf, size_t count, cohort_dtype dtype, int peer, int tag,
                                     cohort_recv_info *info);
COHORT_API cohort_status cohort_isend(cohort_comm *comm, const void *buf, size_t count, cohort_dtype dtype, int peer,
                                      int tag, cohort_work **work);
COHORT_API cohort_status cohort_irecv(cohort_comm *comm, void *buf, size_t count, cohort_dtype dtype, int peer, int tag,
                                      cohort_work **work);
/* A completed cohort_irecv()'s source, tag and count; COHORT_ERR_INVALID for other work, or one not completed. */
COHORT_API cohort_status cohort_work_recv_info(cohort_work *work, cohort_recv_info *info);

/* ---- device memory (CUDA) ----
 *
 * The collectives above but the rooted and personalized ones (reduce, gather, scatter, their v-forms, allgatherv,
 * alltoall(v): COHORT_ERR_INVALID "not on device memory yet"; so are the dtypes i8, i16, bool and the bitwise ops)
 * also take CUDA device pointers (cudaMalloc'd memory, or any memory the driver reports as
 * device memory): all of a call's buffers on the device of the calling rank, on every rank alike (a rank that passes
 * host memory where the others pass device memory is a mismatch). The device path is chosen per communicator at its
 * first device collective, and named by cohort_device_path() (and after "+" by cohort_transport_name()):
 *   "nccl"      one GPU per rank: NCCL's kernels, its unique id exchanged over cohort's authenticated links;
 *   "cuda-ipc"  ranks of one host that share one GPU (which NCCL refuses): CUDA IPC handles exchanged over cohort's
 *               links and cohort's own reduction kernels (f16 and bf16 reduce in float32);
 *   "staged"    otherwise (several hosts without NCCL): copies through pinned host memory and the host transport.
 * COHORT_GPU_PATH forces one. cohort's control plane stays around each: calls are compared across ranks before data
 * moves, and a rank that dies or aborts fails every survivor's call naming it, never a hang in a kernel.
 *
 * Ordering. The blocking calls read their input after the work queued on the legacy default stream (stream 0) and
 * return once the result is in place. The _stream forms order the collective on `stream` (a cudaStream_t, passed as
 * void * so that this header needs no CUDA header; NULL is the legacy default stream): the input is read after the
 * work queued on stream before the call, and work queued on stream after the call sees the result. Over "nccl" the
 * call returns once the collective is queued on stream; over the other paths, once it is complete. The cohort_i*
 * forms (and cohort_i*_stream) read the input after the work queued on stream when they are called; the result is in
 * place when cohort_work_wait() returns.
 *
 * A build without CUDA, or a machine without the CUDA runtime, gives COHORT_ERR_INVALID with the reason at the first
 * device pointer; host memory never needs CUDA at run time.
 */

/* 1 when device collectives can run in this process (the CUDA plugin loads and sees a GPU), else 0; the reason is
 * then in cohort_last_error(). */
COHORT_API int cohort_cuda_available(void);
/* "nccl", "cuda-ipc" or "staged" once comm has run a device collective; NULL before. */
COHORT_API const char *cohort_device_path(const cohort_comm *comm);

COHORT_API cohort_status cohort_allreduce_stream(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                                 cohort_dtype dtype, cohort_op op, void *stream);
COHORT_API cohort_status cohort_broadcast_stream(cohort_comm *comm, void *buf, size_t count, cohort_dtype dtype,
                                                 int root, void *stream);
COHORT_API cohort_status cohort_allgather_stream(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                                 cohort_dtype dtype, void *stream);
COHORT_API cohort_status cohort_reduce_scatter_stream(cohort_comm *comm, const void *sendbuf, void *recvbuf,
                                                      size_t count, cohort_dtype dtype, cohort_op op, void *stream);
COHORT_API cohort_status cohort_iallreduce_stream(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                                  cohort_dtype dtype, cohort_op op, void *stream, cohort_work **work);
COHORT_API cohort_status cohort_ibroadcast_stream(cohort_comm *comm, void *buf, size_t count, cohort_dtype dtype,
                                                  int root, void *stream, cohort_work **work);
COHORT_API cohort_status cohort_iallgather_stream(cohort_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                                  cohort_dtype dtype, void *stream, cohort_work **work);
COHORT_API cohort_status cohort_ireduce_scatter_stream(cohort_comm *comm, const void *sendbuf, void *recvbuf,
                                                       size_t count, cohort_dtype dtype, cohort_op op, void *stream,
                                                       cohort_work **work);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_COHORT_H */
