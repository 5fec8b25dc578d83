/* kernels.c: fmnist-train runs on the best CPU kernels the machine has, without the user knowing OPENBLAS_CORETYPE.
 *
 * By default the layers run on oneDNN where its ISA is wider than OpenBLAS's kernels or both are AVX-512 (--kernels,
 * COHORT_KERNELS; include/cohort/nn.h "kernel sets"), which picks its code by the CPU's features itself: nothing to do
 * here then but name it. With the reference kernels, OpenBLAS does the matrix math, and OpenBLAS picks its kernels when
 * it is loaded, before main; on a CPU model it does not know (a hypervisor may mask it) it falls back to generic SSE3
 * kernels, 3-4x slower. The choice can only be changed through the environment of a new program image, so
 * fmnist-train restarts itself once (execv, same pid: cohortrun, mpirun and Slurm see nothing) with
 * OPENBLAS_CORETYPE set to what the CPU's feature flags allow. An OPENBLAS_CORETYPE given by the user or the
 * environment is kept, and no faster kernels are suggested then: some environments pin older kernels where newer
 * ones compute wrong results on their CPU, and only the environment knows which. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

/* Set in the restarted image: the kernels OpenBLAS had chosen by itself. */
#define RESTARTED_FROM "FMNIST_TRAIN_RESTARTED_FROM"
/* Test hooks (mp.train.kernels):
 *   COHORT_TEST_BLAS_CORENAME  pretend OpenBLAS chose these kernels when it loaded this image (the restarted image
 *                              runs the forced kernels for real: the restart drops the pretence)
 *   COHORT_TEST_BLAS_BEST      pretend the CPU's best family is this one; it only lowers the restart's target, so
 *                              that a test restarts onto kernels its environment computes correctly with */
#define FAKE_CORENAME "COHORT_TEST_BLAS_CORENAME"
#define FAKE_BEST "COHORT_TEST_BLAS_BEST"

static int is_rank0(void) {
  const char *rank = getenv("RANK");
  return !rank || strcmp(rank, "0") == 0;
}

static const char *loaded_corename(void) {
  const char *fake = getenv(FAKE_CORENAME);
  return fake && *fake ? fake : cohort_blas_corename();
}

static const char *better_core(const char *chosen) {
  const char *better = cohort_blas_better_core(chosen);
  const char *cap = getenv(FAKE_BEST);
  if (!better || !cap || !*cap || cohort_blas_core_level(cap) > cohort_blas_core_level(better)) return better;
  return cohort_blas_core_level(cap) > cohort_blas_core_level(chosen) ? cap : NULL;
}

void train_kernels_choose(const train_config *cfg, char **argv) {
  if (cfg->device != TRAIN_DEVICE_CPU || cfg->kernels != COHORT_KERNELS_REFERENCE) return;
  const char *pinned = getenv("OPENBLAS_CORETYPE");
  if ((pinned && *pinned) || getenv(RESTARTED_FROM)) return;
  char chosen[64], better[64], fake[64] = "";
  snprintf(chosen, sizeof chosen, "%s", loaded_corename());
  const char *to = better_core(chosen);
  if (!to) return;
  snprintf(better, sizeof better, "%s", to);
  if (is_rank0())
    fprintf(stderr,
            "fmnist-train: OpenBLAS chose its generic %s kernels on a CPU that can run %s ones: restarting with "
            "OPENBLAS_CORETYPE=%s\n",
            chosen, better, better);
  if (getenv(FAKE_CORENAME)) snprintf(fake, sizeof fake, "%s", getenv(FAKE_CORENAME));
  setenv("OPENBLAS_CORETYPE", better, 1);
  setenv(RESTARTED_FROM, chosen, 1);
  unsetenv(FAKE_CORENAME);
  execv("/proc/self/exe", argv);
  fprintf(stderr, "fmnist-train: could not restart (%s): going on with the %s kernels\n", strerror(errno), chosen);
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(RESTARTED_FROM);
  if (*fake) setenv(FAKE_CORENAME, fake, 1);
}

void train_kernels_describe(const train_config *cfg, char *buf, size_t len) {
  if (cfg->kernels != COHORT_KERNELS_REFERENCE) {
    char what[512];
    if (cohort_kernels_describe(cfg->kernels, what, sizeof what) != COHORT_OK)
      snprintf(what, sizeof what, "%s (%s)", cohort_kernels_name(cfg->kernels), cohort_last_error());
    snprintf(buf, len, "kernels: %s", what);
    return;
  }
  const char *pinned = getenv("OPENBLAS_CORETYPE");
  const char *from = getenv(RESTARTED_FROM);
  const char *name = loaded_corename();
  if (from)
    snprintf(buf, len, "kernels: OpenBLAS %s (OPENBLAS_CORETYPE=%s, set by fmnist-train: OpenBLAS had chosen %s)", name,
             pinned, from);
  else if (pinned && *pinned)
    /* No word on faster kernels, even where the CPU runs some: the pin may be there because they compute wrong
     * results on this CPU (docs/training.md). */
    snprintf(buf, len, "kernels: OpenBLAS %s (OPENBLAS_CORETYPE=%s, pinned by the environment: kept)", name, pinned);
  else
    snprintf(buf, len, "kernels: OpenBLAS %s (chosen by OpenBLAS for this CPU)", name);
}
