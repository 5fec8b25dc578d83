/*
 * p2p_pingpong.c: ping-pong between ranks 0 and 1, cohort_send/cohort_recv, or with --mpi (built only where mpicc
 * builds it: bench/p2p.sh) Open MPI's MPI_Send/MPI_Recv. Prints one line per size:
 *   <system> <bytes> B: latency <us> us (half the round trip, median of 5 blocks), bandwidth <GB/s>
 * Run: cohortrun -np 2 build/bin/p2p_pingpong [ITERS]   or   mpirun -np 2 p2p_pingpong_mpi [ITERS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef P2P_MPI
#include <mpi.h>
#else
#include "cohort/cohort.h"
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  int me;
#ifdef P2P_MPI
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const char *sys = "openmpi";
#define SEND(b, n) MPI_Send(b, (int)(n), MPI_BYTE, 1 - me, 0, MPI_COMM_WORLD)
#define RECV(b, n) MPI_Recv(b, (int)(n), MPI_BYTE, 1 - me, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
#else
  cohort_comm *c;
  if (cohort_init(&c) != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s\n", cohort_last_error());
    return 1;
  }
  me = cohort_rank(c);
  char sys[64];
  snprintf(sys, sizeof sys, "cohort-%s", cohort_transport_name(c));
#define SEND(b, n)                                                                                                     \
  if (cohort_send(c, b, n, COHORT_U8, 1 - me, 0) != COHORT_OK) return fprintf(stderr, "%s\n", cohort_last_error()), 1
#define RECV(b, n)                                                                                                     \
  if (cohort_recv(c, b, n, COHORT_U8, 1 - me, 0, NULL) != COHORT_OK)                                                   \
  return fprintf(stderr, "%s\n", cohort_last_error()), 1
#endif
  static const size_t sizes[] = {8, 4u << 20};
  char *buf = calloc(4u << 20, 1);
  for (int s = 0; s < 2; s++) {
    size_t n = sizes[s];
    int it = n > 65536 ? iters / 20 + 5 : iters;
    double block[5];
    for (int k = -1; k < 5; k++) { /* block -1 warms up */
      double t0 = now();
      for (int i = 0; i < it; i++) {
        if (me == 0) {
          SEND(buf, n);
          RECV(buf, n);
        } else if (me == 1) {
          RECV(buf, n);
          SEND(buf, n);
        }
      }
      if (k >= 0) block[k] = (now() - t0) / it / 2;
    }
    qsort(block, 5, sizeof block[0], cmp);
    if (me == 0)
      printf("%s %zu B: latency %.2f us, bandwidth %.3f GB/s\n", sys, n, block[2] * 1e6, (double)n / block[2] / 1e9);
  }
  free(buf);
#ifdef P2P_MPI
  MPI_Finalize();
#else
  cohort_comm_destroy(c);
#endif
  return 0;
}
