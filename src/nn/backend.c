/*
 * backend.c: the kernel sets of include/cohort/nn.h and the reference backend (backend.h).
 *
 * The reference backend binds nothing: every layer runs the kernels of its own file (conv2d.c, linear.c, ...). Which
 * set AUTO means is decided here, once per call, from COHORT_KERNELS (parsed by core/config.c like every knob), from
 * what the build holds, and from the SIMD families oneDNN and OpenBLAS run on this CPU.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "nn/backend.h"

static const char *reference_unavailable(void) { return NULL; }

static void reference_describe(char *buf, size_t len) {
  snprintf(buf, len, "reference (im2col + OpenBLAS %s)", cohort_blas_corename());
}

static const cohort__kernels *reference_kernels(const cohort__layer *l) { return NULL; }

const cohort__backend cohort__backend_reference = {
    COHORT_KERNELS_REFERENCE, "reference", reference_unavailable, reference_describe, reference_kernels, NULL, NULL};

const cohort__backend *cohort__backend_of(cohort_kernels k) {
  return k == COHORT_KERNELS_ONEDNN ? &cohort__backend_onednn : &cohort__backend_reference;
}

const char *cohort_kernels_name(cohort_kernels k) {
  switch (k) {
  case COHORT_KERNELS_AUTO:
    return "auto";
  case COHORT_KERNELS_REFERENCE:
    return "reference";
  case COHORT_KERNELS_ONEDNN:
    return "onednn";
  }
  return NULL;
}

cohort_status cohort_kernels_parse(const char *name, cohort_kernels *out) {
  static const cohort_kernels all[] = {COHORT_KERNELS_AUTO, COHORT_KERNELS_REFERENCE, COHORT_KERNELS_ONEDNN};
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_kernels_parse: out is NULL");
  for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
    if (strcmp(name, cohort_kernels_name(all[i])) == 0) {
      *out = all[i];
      return COHORT_OK;
    }
  return cohort__error(COHORT_ERR_INVALID, "kernels '%s' is not one of auto, reference, onednn",
                       name ? name : "(null)");
}

/* oneDNN where its kernels run a wider SIMD family than OpenBLAS's (an OPENBLAS_CORETYPE pinned below the CPU,
 * generic kernels on a masked CPU model), and where both run AVX-512: there oneDNN's kernels measured 1.34x the
 * reference's img/s on 1 rank and 1.33x on 2 (docs/performance.md, "On an AVX-512 CPU, pinned and not": an Intel
 * Xeon with OpenBLAS's SkylakeX kernels). Where both run AVX2 the reference measured as fast or faster (785 against 761
 * img/s on 1 rank and 1399 against 1193 on 2 on a Zen 3, whose memory traffic oneDNN's blocked activations raise). An
 * OpenBLAS core name the table does not know is taken to be a newer one, AVX-512. */
cohort_kernels cohort__kernels_auto_choice(int onednn_level, int blas_level) {
  if (blas_level == 0) blas_level = 4;
  if (onednn_level > blas_level || (onednn_level >= 4 && onednn_level == blas_level)) return COHORT_KERNELS_ONEDNN;
  return COHORT_KERNELS_REFERENCE;
}

cohort_status cohort_kernels_resolve(cohort_kernels k, cohort_kernels *out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_kernels_resolve: out is NULL");
  if (!cohort_kernels_name(k))
    return cohort__error(COHORT_ERR_INVALID, "cohort_kernels_resolve: unknown set %d", (int)k);
  const char *from = "";
  if (k == COHORT_KERNELS_AUTO) {
    cohort__config cfg;
    COHORT_CHECK(cohort__config_load_one(&cfg, "COHORT_KERNELS"));
    COHORT_CHECK(cohort_kernels_parse(cfg.kernels, &k));
    from = "COHORT_KERNELS=";
  }
  if (k == COHORT_KERNELS_AUTO)
    k = cohort__kernels_auto_choice(cohort__onednn_isa_level(), cohort_blas_core_level(cohort_blas_corename()));
  const char *why = cohort__backend_of(k)->unavailable();
  if (why) return cohort__error(COHORT_ERR_INVALID, "kernels %s%s: %s", from, cohort_kernels_name(k), why);
  *out = k;
  return COHORT_OK;
}

cohort_status cohort_kernels_describe(cohort_kernels k, char *buf, size_t len) {
  if (!buf || len == 0) return cohort__error(COHORT_ERR_INVALID, "cohort_kernels_describe: no buffer");
  COHORT_CHECK(cohort_kernels_resolve(k, &k));
  cohort__backend_of(k)->describe(buf, len);
  return COHORT_OK;
}
