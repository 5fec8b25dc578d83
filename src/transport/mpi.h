/*
 * mpi.h: the MPI transport (mpi.c): cohort's collectives over MPI's point-to-point calls, for clusters whose fast
 * network is reached through MPI. Built when CMake finds MPI (libopenmpi-dev); otherwise creating it fails saying so.
 */
#ifndef COHORT_TRANSPORT_MPI_H
#define COHORT_TRANSPORT_MPI_H

#include <stdint.h>

#include "transport/transport.h"

/* Initializes MPI if the program has not (asking for MPI_THREAD_MULTIPLE, which it requires), checks that MPI's
 * rank and size are the job's, and makes the transport over a duplicate of MPI_COMM_WORLD. op_timeout_s:
 * COHORT_OP_TIMEOUT. */
cohort_status cohort__mpi_create(int rank, int size, double op_timeout_s, cohort__transport **out);
/* The transport of a communicator made from parent's, over a lane that parent set aside when it was made (a duplicate
 * of MPI_COMM_WORLD for the job's transport, a context for a split's, below): COHORT__MPI_P2P, for the communicator's
 * point-to-point engine; COHORT__MPI_TWIN, for its twin (whose own engine then takes the twin's spare). One of each per
 * transport: the second is COHORT_ERR_INVALID. No MPI call that makes a communicator, so any thread may call it. */
typedef enum { COHORT__MPI_P2P, COHORT__MPI_TWIN } cohort__mpi_derivation;
cohort_status cohort__mpi_derive(cohort__transport *parent, cohort__mpi_derivation how, double op_timeout_s,
                                 cohort__transport **out);
/* Sub-communicators (cohort_comm_split) over MPI make no MPI communicator either: all of them share one duplicate of
 * MPI_COMM_WORLD, made with the job's first transport, each in a context of its own (a range of tags), the way MPI
 * libraries give communicators context ids. A split takes COHORT__MPI_SPLIT_CONTEXTS contexts (the communicator, its
 * message engine, its twin, the twin's engine), numbered from a multiple of that. Every rank of the parent, member
 * or not, agrees on them in rounds (mpi_context.c says why one MAX is not enough):
 *   p = cohort__mpi_context_propose(floor)            the first free group from floor on, held for this proposal
 *   a = allreduce MAX of p over the parent
 *   h = cohort__mpi_context_claim(p, a)               1: this rank now holds a (p let go unless p == a)
 *   allreduce MIN of h over the parent                1: a is the split's for good, on every rank
 *   else: if h, cohort__mpi_context_release(a); again with floor = a + COHORT__MPI_SPLIT_CONTEXTS.
 * A context held for good is never let go: none is shared by two communicators with a rank in common, nor reused. */
#define COHORT__MPI_SPLIT_CONTEXTS 4
uint64_t cohort__mpi_context_propose(uint64_t floor);
int cohort__mpi_context_claim(uint64_t proposed, uint64_t agreed);
void cohort__mpi_context_release(uint64_t context);
/* The transport of a split of parent (a transport of this file): size members, members[i] being the parent's rank
 * of member i, this rank being member rank, in contexts context onwards. */
cohort_status cohort__mpi_split(cohort__transport *parent, uint64_t context, int rank, int size, const int *members,
                                double op_timeout_s, cohort__transport **out);
/* 1 when this libcohort was built with MPI. */
int cohort__mpi_available(void);

#endif
