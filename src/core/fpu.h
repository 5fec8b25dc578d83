/*
 * fpu.h: flush subnormal floats to zero on the calling thread for a stretch of code, then put the caller's mode back.
 *
 * Why: an optimizer's state decays geometrically wherever a gradient stays zero (a momentum buffer is multiplied by
 * 0.9 every step, Adam's exp_avg_sq holds squares of tiny gradients), so late in training a large share of it is
 * subnormal (below FLT_MIN, about 1.2e-38). x86 CPUs handle each subnormal operand or result in a microcode assist
 * that costs on the order of a hundred cycles: on an Intel Xeon the SGD step of the reference CNN went from about
 * 1 ms to over 20 ms after a few epochs, a third of the training step (bench/optim.sh: 75 ms when all of the state
 * is subnormal). Flush-to-zero (results) and
 * denormals-are-zero (operands) make those values plain zeros. A value below FLT_MIN moves no weight of normal size
 * (it is far below half an ulp of any float above 1e-31), so the arithmetic that matters is unchanged.
 *
 * The mode is per thread (MXCSR on x86, FPCR on AArch64) and is restored at the end, so code around it, the caller's
 * included, keeps IEEE subnormals. Elsewhere both calls do nothing. Both are compiler barriers for memory: the
 * compiler does not model the floating-point mode, and a load or store moved across the switch would take its float
 * math with it.
 *
 *   unsigned saved = cohort__fpu_flush_begin();
 *   ... float math ...
 *   cohort__fpu_flush_end(saved);
 */
#ifndef COHORT_CORE_FPU_H
#define COHORT_CORE_FPU_H

#include <stdint.h>

#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE__))
#include <xmmintrin.h>
#define COHORT_FPU_FLUSH_BITS 0x8040u /* MXCSR bit 15: flush to zero; bit 6: denormals are zero */

static inline unsigned cohort__fpu_flush_begin(void) {
  unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | COHORT_FPU_FLUSH_BITS);
  __asm__ __volatile__("" ::: "memory");
  return saved;
}

static inline void cohort__fpu_flush_end(unsigned saved) {
  __asm__ __volatile__("" ::: "memory");
  _mm_setcsr(saved);
}

#elif defined(__aarch64__)
#define COHORT_FPU_FLUSH_BITS (1u << 24) /* FPCR.FZ: flush subnormal inputs and results to zero */

static inline unsigned cohort__fpu_flush_begin(void) {
  uint64_t fpcr;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr | COHORT_FPU_FLUSH_BITS) : "memory");
  return (unsigned)fpcr;
}

static inline void cohort__fpu_flush_end(unsigned saved) {
  uint64_t fpcr = saved;
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr) : "memory");
}

#else
static inline unsigned cohort__fpu_flush_begin(void) { return 0; }
static inline void cohort__fpu_flush_end(unsigned saved) { (void)saved; }
#endif

#endif
