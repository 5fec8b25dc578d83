/*
 * blas.c: which OpenBLAS kernels run, and which this CPU could run (nn.h, "CPU kernels").
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels once, when it is loaded, from the CPU's model
 * number. A CPU model it does not know, as on cloud VMs whose hypervisor masks the model, gets the generic SSE3
 * kernels (Prescott), 3-4x slower than the AVX2 or AVX-512 ones the same CPU runs (docs/performance.md). Only the
 * environment (OPENBLAS_CORETYPE, read at load time) changes the choice afterwards, so this file only says what was
 * chosen and what the CPU's feature flags allow; programs act on it (fmnist-train restarts itself, the library
 * warns once).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cohort/nn.h"
#include "core/log.h"

const char *cohort_blas_corename(void) { return openblas_get_corename(); }

/* The x86-64 families of OpenBLAS 0.3.21-0.3.26 core types by the SIMD their SGEMM kernels use: 1 SSE, 2 AVX,
 * 3 AVX2+FMA, 4 AVX-512. Case-insensitive (openblas_get_corename says "Zen", OPENBLAS_CORETYPE takes "ZEN"). */
int cohort_blas_core_level(const char *name) {
  static const struct {
    const char *name;
    int level;
  } cores[] = {
      {"katmai", 1}, {"coppermine", 1},  {"northwood", 1},   {"prescott", 1},  {"banias", 1},     {"core2", 1},
      {"penryn", 1}, {"dunnington", 1},  {"nehalem", 1},     {"atom", 1},      {"opteron", 1},    {"barcelona", 1},
      {"bobcat", 1}, {"nano", 1},        {"sandybridge", 2}, {"bulldozer", 2}, {"piledriver", 2}, {"haswell", 3},
      {"zen", 3},    {"steamroller", 3}, {"excavator", 3},   {"skylakex", 4},  {"cooperlake", 4}, {"sapphirerapids", 4},
  };
  if (!name) return 0;
  for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
    if (strcasecmp(name, cores[i].name) == 0) return cores[i].level;
  return 0;
}

const char *cohort_blas_best_core(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
  return NULL;
#else
  return NULL;
#endif
}

const char *cohort_blas_better_core(const char *chosen) {
  const char *best = cohort_blas_best_core();
  if (!best) return NULL;
  int have = cohort_blas_core_level(chosen ? chosen : cohort_blas_corename());
  /* An unknown name (a newer OpenBLAS's core) is taken to know what it does. */
  return have > 0 && have < cohort_blas_core_level(best) ? best : NULL;
}

void cohort__blas_warn_once(void) {
  static int warned; /* a data race here costs at most a second line */
  if (warned) return;
  warned = 1;
  /* A pinned OPENBLAS_CORETYPE is deliberate (some environments pin older kernels where newer ones compute wrong
   * results on their CPU): say nothing then. */
  const char *pinned = getenv("OPENBLAS_CORETYPE");
  const char *better = cohort_blas_better_core(NULL);
  if (!better || (pinned && *pinned)) return;
  COHORT_LOG_WARN("OpenBLAS runs its generic %s kernels on a CPU that can run %s ones (it did not know this CPU's "
                  "model, as when a hypervisor masks it): export OPENBLAS_CORETYPE=%s for matrix math 3-4x faster",
                  cohort_blas_corename(), better, better);
}
