/*
 * xcore: what it costs two cores to swap N bytes through shared memory, the floor under a staged shared-memory
 * allreduce of 2 ranks (docs/performance.md, "Shared memory").
 *
 *   build/bin/xcore [MAX_MIB]        (default 16; sizes 64 KiB x 2 up to MAX_MIB MiB)
 *
 * Two processes, bound to the first two CPUs this one may use, each own a buffer in one shared mapping. Per round,
 * each copies N bytes from its private memory into its shared buffer, says so (a release store on a cache line of
 * its own), waits for the other's word, copies the other's N bytes into private memory, and waits again before the
 * next round reuses the buffers. This is the least a staged allreduce of 2 ranks must do twice per call, for its
 * input's other half and for the other rank's result, each of S/2 bytes; cohort's node allreduce
 * (src/transport/shm_coll.c) does this and a reduction besides. The same two copies on one core, alone, are printed
 * beside it: the difference is the price of taking cache lines that the other core holds.
 *
 * Output: one line per size: bytes, us per swap (median of the rounds), GB/s per side, us for the one-core copies.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { ROUNDS = 200, ROUNDS_LARGE = 40 }; /* ROUNDS_LARGE above 4 MiB */

typedef struct {
  _Alignas(64) _Atomic uint64_t posted; /* round r: my buffer holds this round's bytes */
  _Alignas(64) _Atomic uint64_t taken;  /* round r: I copied the other's bytes out */
} side_flags;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void await_at_least(_Atomic uint64_t *word, uint64_t want) {
  while (atomic_load_explicit(word, memory_order_acquire) < want) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* The first two CPUs of this process's affinity mask, or -1 when it has fewer than two. */
static int two_cpus(int cpu[2]) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  int found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
    if (CPU_ISSET(c, &set)) cpu[found++] = c;
  return found == 2 ? 0 : -1;
}

static void bind_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

/* One side of the swap of n bytes; side 0 writes the medians to *result. */
static void swap_side(int side, size_t n, int rounds, side_flags *flags, char *shared[2], double *result) {
  char *mine = malloc(n), *theirs = malloc(n);
  double *t = malloc((size_t)rounds * sizeof *t);
  if (!mine || !theirs || !t) {
    fprintf(stderr, "xcore: out of memory for %zu bytes\n", n);
    _exit(1);
  }
  memset(mine, side + 1, n);
  memset(theirs, 0, n);
  side_flags *me = &flags[side], *other = &flags[1 - side];
  for (int r = -3; r < rounds; r++) { /* three rounds of warm-up */
    uint64_t k = (uint64_t)(r + 4);
    double t0 = now_us();
    memcpy(shared[side], mine, n);
    atomic_store_explicit(&me->posted, k, memory_order_release);
    await_at_least(&other->posted, k);
    memcpy(theirs, shared[1 - side], n);
    atomic_store_explicit(&me->taken, k, memory_order_release);
    await_at_least(&other->taken, k);
    if (r >= 0) t[r] = now_us() - t0;
  }
  if (theirs[0] != (char)(2 - side) || theirs[n - 1] != (char)(2 - side)) {
    fprintf(stderr, "xcore: side %d read the wrong bytes\n", side);
    _exit(1);
  }
  if (side == 0) {
    *result = median(t, rounds);
    /* The same two copies on this core alone, through the same shared buffer. */
    for (int r = 0; r < rounds; r++) {
      double t0 = now_us();
      memcpy(shared[0], mine, n);
      memcpy(theirs, shared[0], n);
      t[r] = now_us() - t0;
    }
    result[1] = median(t, rounds);
  }
  free(mine);
  free(theirs);
  free(t);
}

int main(int argc, char **argv) {
  long max_mib = 16;
  if (argc > 2 || (argc == 2 && ((max_mib = strtol(argv[1], NULL, 10)) < 1 || max_mib > 1024))) {
    fprintf(stderr, "usage: xcore [MAX_MIB]   (1 to 1024; default 16)\n");
    return 2;
  }
  int cpu[2];
  if (two_cpus(cpu) != 0) {
    fprintf(stderr, "xcore: needs two CPUs in its affinity mask\n");
    return 2;
  }
  size_t max = (size_t)max_mib << 20;
  size_t len = 2 * sizeof(side_flags) + 2 * sizeof(double) + 2 * max + 4096;
  char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) {
    perror("xcore: mmap");
    return 1;
  }
  side_flags *flags = (side_flags *)map;
  double *result = (double *)(map + 2 * sizeof(side_flags));
  char *shared[2] = {map + 4096, map + 4096 + max};
  printf("# xcore: 2 processes on CPUs %d and %d; median of %d rounds per size\n", cpu[0], cpu[1], ROUNDS);
  printf("# bytes swap_us GBps_per_side one_core_us\n");
  for (size_t n = 64 << 10; n <= max; n *= 2) {
    int rounds = n > ((size_t)4 << 20) ? ROUNDS_LARGE : ROUNDS;
    memset(flags, 0, 2 * sizeof(side_flags));
    pid_t pid[2];
    for (int side = 0; side < 2; side++) {
      if ((pid[side] = fork()) == 0) {
        bind_to(cpu[side]);
        swap_side(side, n, rounds, flags, shared, result);
        _exit(0);
      }
      if (pid[side] < 0) {
        perror("xcore: fork");
        return 1;
      }
    }
    int bad = 0;
    for (int side = 0; side < 2; side++) {
      int status;
      waitpid(pid[side], &status, 0);
      bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (bad) return 1;
    printf("%10zu %9.1f %8.2f %9.1f\n", n, result[0], (double)n / result[0] / 1e3, result[1]);
  }
  return 0;
}
