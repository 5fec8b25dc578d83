/*
 * kernels.h: the element-wise loops of the hot path, written with GCC/Clang vector extensions.
 *
 * The library builds at -O2, where GCC's "very cheap" vectorizer leaves loops of unknown length scalar; these
 * helpers process 4 floats at a time explicitly (compiled to SSE on baseline x86-64, NEON on arm64) with a scalar
 * tail, and take restrict pointers so that no alias checks are needed. Loads and stores go through memcpy, which
 * compiles to unaligned vector moves.
 */
#ifndef COHORT_NN_KERNELS_H
#define COHORT_NN_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 16-byte vectors: wider ones would change the calling convention without AVX (-Wpsabi). */
typedef float cohort__v4f __attribute__((vector_size(16)));
typedef int32_t cohort__v4i __attribute__((vector_size(16)));

static inline cohort__v4f cohort__v4_load(const float *p) {
  cohort__v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void cohort__v4_store(float *p, cohort__v4f v) { memcpy(p, &v, sizeof v); }

/* y = max(y, 0) in place. */
static inline void cohort__relu_inplace(float *restrict y, size_t n) {
  const cohort__v4f zero = {0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    cohort__v4f v = cohort__v4_load(y + i);
    cohort__v4_store(y + i, (cohort__v4f)((cohort__v4i)v & (v > zero)));
  }
  for (; i < n; i++)
    y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

/* out = y > 0 ? in : 0 (the ReLU's backward; out may be in). */
static inline void cohort__relu_mask(float *out, const float *in, const float *restrict y, size_t n) {
  const cohort__v4f zero = {0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    cohort__v4f g = cohort__v4_load(in + i), v = cohort__v4_load(y + i);
    cohort__v4_store(out + i, (cohort__v4f)((cohort__v4i)g & (v > zero)));
  }
  for (; i < n; i++)
    out[i] = y[i] > 0.0f ? in[i] : 0.0f;
}

/* d += s. */
static inline void cohort__vadd(float *restrict d, const float *restrict s, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    cohort__v4_store(d + i, cohort__v4_load(d + i) + cohort__v4_load(s + i));
  for (; i < n; i++)
    d[i] += s[i];
}

/* d = s, inline: im2col copies many short rows, where a libc call per row costs more than the copy. */
static inline void cohort__vcopy(float *restrict d, const float *restrict s, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    cohort__v4_store(d + i, cohort__v4_load(s + i));
  for (; i < n; i++)
    d[i] = s[i];
}

/* d = v. */
static inline void cohort__vfill(float *restrict d, float v, size_t n) {
  const cohort__v4f b = {v, v, v, v};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    cohort__v4_store(d + i, b);
  for (; i < n; i++)
    d[i] = v;
}

/* The sum of s, in 4 interleaved partial sums. */
static inline float cohort__vsum(const float *restrict s, size_t n) {
  cohort__v4f acc = {0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    acc += cohort__v4_load(s + i);
  float t = 0.0f;
  t = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; i < n; i++)
    t += s[i];
  return t;
}

#endif
