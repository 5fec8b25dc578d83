/*
 * kernel.h: COHORT_KERNEL marks a hot element-wise loop for the compiler to build twice, for x86-64-v3 (AVX2, FMA,
 * F16C) and for the baseline, the loader picking the clone that fits the CPU at run time. The file holding it
 * should be built with -O3 (CMakeLists.txt) so that the loops get vectorized.
 *
 * The clones give the same results: C11 mode keeps -ffp-contract=off, so no a * b + c becomes an FMA, and IEEE
 * add, multiply, divide and sqrt round the same at any vector width. Sanitizer builds get one plain copy (the
 * clone picker, an ifunc resolver, runs before the sanitizers' runtime is set up).
 */
#ifndef COHORT_CORE_KERNEL_H
#define COHORT_CORE_KERNEL_H

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define COHORT_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define COHORT_KERNEL
#endif

#endif
