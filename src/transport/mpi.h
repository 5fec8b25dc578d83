/*
 * mpi.h: the MPI transport (mpi.c): cohort's collectives over MPI's point-to-point calls, for clusters whose fast
 * network is reached through MPI. Built when CMake finds MPI (libopenmpi-dev); otherwise creating it fails saying so.
 */
#ifndef COHORT_TRANSPORT_MPI_H
#define COHORT_TRANSPORT_MPI_H

#include "transport/transport.h"

/* Initializes MPI if the program has not (asking for MPI_THREAD_MULTIPLE, which it requires), checks that MPI's
 * rank and size are the job's, and makes the transport over a duplicate of MPI_COMM_WORLD. op_timeout_s:
 * COHORT_OP_TIMEOUT. */
cohort_status cohort__mpi_create(int rank, int size, double op_timeout_s, cohort__transport **out);
/* The transport of a communicator made from the job's (parent, made by cohort__mpi_create), over a duplicate of
 * MPI_COMM_WORLD that parent set aside when it was made: COHORT__MPI_P2P, for the communicator's point-to-point
 * engine; COHORT__MPI_TWIN, for its twin (whose own engine then takes the twin's spare). One of each per transport:
 * the second is COHORT_ERR_INVALID. No MPI call that makes a communicator, so any thread may call it. */
typedef enum { COHORT__MPI_P2P, COHORT__MPI_TWIN } cohort__mpi_derivation;
cohort_status cohort__mpi_derive(cohort__transport *parent, cohort__mpi_derivation how, double op_timeout_s,
                                 cohort__transport **out);
/* 1 when this libcohort was built with MPI. */
int cohort__mpi_available(void);

#endif
