/*
 * reduce.h: the element-wise reduction kernels and the half-precision conversions (reduce.c), used by every layer
 * that combines or compresses data: the collective algorithms (src/coll/), the shared-memory transport's node
 * allreduce, and the DDP engine's compression hooks.
 *
 * The kernels are vectorized (built at -O3 and cloned for x86-64-v3); f16 and bf16 are combined in f32 and rounded
 * back once per combination. Integer SUM and PROD wrap around. Pure functions: safe from any thread.
 */
#ifndef COHORT_CORE_REDUCE_H
#define COHORT_CORE_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

/* dst[i] = a[i] op b[i] for n elements; dst may alias a or b. AVG reduces as SUM (see cohort__reduce_avg). */
void cohort__reduce(void *dst, const void *a, const void *b, size_t n, cohort_dtype dtype, cohort_op op);
/* buf[i] /= world, the last step of AVG. Integers round toward zero. */
void cohort__reduce_avg(void *buf, size_t n, cohort_dtype dtype, int world);

/* Conversions used by the f16/bf16 kernels (and by tests). */
float cohort__f16_to_f32(uint16_t h);
uint16_t cohort__f32_to_f16(float f);
float cohort__bf16_to_f32(uint16_t h);
uint16_t cohort__f32_to_bf16(float f);
/* n elements between f32 and half (COHORT_F16 or COHORT_BF16), rounding to nearest even. */
void cohort__f32_to_half(uint16_t *dst, const float *src, size_t n, cohort_dtype half);
void cohort__half_to_f32(float *dst, const uint16_t *src, size_t n, cohort_dtype half);

#endif
