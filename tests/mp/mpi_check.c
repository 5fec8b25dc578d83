/* mpi_check.c: the MPI transport's failure paths, as one rank of a job under mpirun (test_mpi_transport.sh).
 *   transport  prints the transport's name (auto must pick mpi under mpirun)
 *   mismatch   the last rank allreduces 10 floats, the others 11: every rank gets COHORT_ERR_MISMATCH naming both
 *   abort      rank 0 aborts the communicator with a reason: every other rank gets COHORT_ERR_REMOTE naming rank 0
 *   silent     the last rank never calls: the others give up after COHORT_OP_TIMEOUT naming it
 *   exit       after an allreduce every rank returns from main with its communicator alive (an error path that forgets
 *              cohort_comm_destroy): the exit status is the program's own, 3 (MPI_Finalize at exit once crashed the
 *              communicator's engine thread: SIGSEGV, status 139)
 *   late       an exit handler registered before cohort_init (so it runs after cohort's MPI_Finalize) calls a barrier:
 *              it gets COHORT_ERR_INVALID saying so, on every rank, instead of a hang or a crash
 *   fork       after an allreduce every rank forks a child that leaves by exit(0), running the exit handlers it
 *              inherited (cohort's MPI_Finalize among them): the child ends within 10 s, and the parent's next
 *              allreduce and its own exit go on as before (Open MPI's rule: a forked child must not call MPI)
 *   single     the program initializes MPI itself with plain MPI_Init (MPI_THREAD_SINGLE): cohort_init refuses with
 *              COHORT_ERR_INVALID saying that MPI_THREAD_MULTIPLE is needed and how to ask for it
 * Each prints "rank R: STATUS: message" for the test to check, and exits 0 when its rank saw what it must. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "cohort/cohort.h"

static cohort_comm *late_comm;

/* Forks a child that exits normally; 1 if it ended with status 0 within 10 s (it is killed otherwise). */
static int child_exits_cleanly(void) {
  pid_t pid = fork();
  if (pid == 0) exit(0); /* the exit handlers run here, in the child */
  if (pid < 0) return 0;
  int status = 0;
  for (int i = 0; i < 1000; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    struct timespec ms = {0, 10000000};
    nanosleep(&ms, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return 0;
}

static void late_barrier(void) {
  cohort_status st = cohort_barrier(late_comm);
  printf("late barrier: %s: %s\n", cohort_strerror(st), st == COHORT_OK ? "" : cohort_last_error());
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  cohort_comm *comm = NULL;
  if (!strcmp(mode, "single")) {
    MPI_Init(&argc, &argv);
    int provided = -1;
    MPI_Query_thread(&provided);
    cohort_status st = cohort_init(&comm);
    printf("provided %d: %s: %s\n", provided, cohort_strerror(st), st == COHORT_OK ? "" : cohort_last_error());
    fflush(stdout);
    if (comm) cohort_comm_destroy(comm);
    MPI_Finalize();
    return provided < MPI_THREAD_MULTIPLE && st == COHORT_ERR_INVALID ? 0 : 1;
  }
  if (!strcmp(mode, "late")) atexit(late_barrier); /* before cohort_init, which registers MPI_Finalize at exit */
  if (cohort_init(&comm) != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s\n", cohort_last_error());
    return 1;
  }
  int rank = cohort_rank(comm), size = cohort_size(comm), last = size - 1;
  float buf[11] = {0};
  cohort_status st = COHORT_OK, want = COHORT_OK;
  if (!strcmp(mode, "transport")) {
    printf("rank %d: transport %s\n", rank, cohort_transport_name(comm));
  } else if (!strcmp(mode, "mismatch")) {
    st = cohort_allreduce(comm, buf, buf, rank == last ? 10 : 11, COHORT_F32, COHORT_SUM);
    want = COHORT_ERR_MISMATCH;
  } else if (!strcmp(mode, "abort")) {
    if (rank == 0) {
      cohort_comm_abort(comm, "the data loader of rank 0 broke");
      st = cohort_barrier(comm);
    } else {
      st = cohort_allreduce(comm, buf, buf, 11, COHORT_F32, COHORT_SUM);
    }
    want = COHORT_ERR_REMOTE;
  } else if (!strcmp(mode, "late")) {
    late_comm = comm;
    st = cohort_allreduce(comm, buf, buf, 11, COHORT_F32, COHORT_SUM);
    return st == COHORT_OK ? 0 : 1; /* the communicator stays alive for late_barrier */
  } else if (!strcmp(mode, "exit")) {
    st = cohort_allreduce(comm, buf, buf, 11, COHORT_F32, COHORT_SUM);
    printf("rank %d: %s: leaving with the communicator alive\n", rank, cohort_strerror(st));
    fflush(stdout);
    return st == COHORT_OK ? 3 : 1;
  } else if (!strcmp(mode, "fork")) {
    st = cohort_allreduce(comm, buf, buf, 11, COHORT_F32, COHORT_SUM);
    if (st == COHORT_OK && !child_exits_cleanly()) {
      printf("rank %d: the forked child did not end with status 0 within 10 s\n", rank);
      st = COHORT_ERR_SYSTEM;
    }
    for (int i = 0; i < 11; i++)
      buf[i] = (float)(rank + 1);
    if (st == COHORT_OK) st = cohort_allreduce(comm, buf, buf, 11, COHORT_F32, COHORT_SUM);
    if (st == COHORT_OK && buf[10] != (float)(size * (size + 1) / 2)) st = COHORT_ERR_INTERNAL;
  } else if (!strcmp(mode, "silent")) {
    if (rank == last) {
      sleep(4);
      st = COHORT_ERR_TIMEOUT; /* it never took part: nothing to check on its side */
    } else {
      st = cohort_allreduce(comm, buf, buf, 11, COHORT_F32, COHORT_SUM);
    }
    want = COHORT_ERR_TIMEOUT;
  }
  printf("rank %d: %s: %s\n", rank, cohort_strerror(st), st == COHORT_OK ? "" : cohort_last_error());
  fflush(stdout);
  /* After a failure the ranks leave on their own: no collective can be trusted to end them together. */
  cohort_comm_destroy(comm);
  return st == want ? 0 : 1;
}
