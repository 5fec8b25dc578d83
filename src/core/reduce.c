/*
 * reduce.c: element-wise reduction kernels (reduce.h). Built with -O3 so that GCC vectorizes the loops (see
 * docs/performance.md for the -fopt-info-vec check); each kernel is cloned for x86-64-v3 (AVX2, FMA, F16C) and a
 * baseline, and the loader picks the clone that fits the CPU at run time.
 *
 * Integer SUM and PROD wrap around; BAND, BOR and BXOR are for the integer types (and bool) only (computed on unsigned
 * types: signed overflow would be undefined behaviour). f16 and bf16 are converted to f32, combined in f32, and rounded
 * back once per combination.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/kernel.h"
#include "core/reduce.h"

#define KERNEL COHORT_KERNEL

/* ---- half-precision conversions (round to nearest even) ---- */

float cohort__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13); /* inf or nan */
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else { /* subnormal: normalize */
    int e = -1;
    do {
      e++;
      mant <<= 1;
    } while (!(mant & 0x400));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t cohort__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to infinity */
  if (absx < 0x38800000u) {                                  /* subnormal half or zero */
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t mant = (absx & 0x7fffff) | 0x800000;
    int shift = 126 - (int)(absx >> 23); /* value = mant * 2^-shift in units of the smallest subnormal, 2^-24 */
    uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = ((absx >> 13) - (112u << 10)), rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return (uint16_t)(sign | half);
}

float cohort__bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t cohort__f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* keep nan quiet */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

/* ---- kernels ---- */

#define DEFINE_KERNELS(NAME, T, U)                                                                                     \
  KERNEL static void NAME##_sum(T *d, const T *a, const T *b, size_t n) {                                              \
    for (size_t i = 0; i < n; i++)                                                                                     \
      d[i] = (T)((U)a[i] + (U)b[i]);                                                                                   \
  }                                                                                                                    \
  KERNEL static void NAME##_prod(T *d, const T *a, const T *b, size_t n) {                                             \
    for (size_t i = 0; i < n; i++)                                                                                     \
      d[i] = (T)((U)a[i] * (U)b[i]);                                                                                   \
  }                                                                                                                    \
  KERNEL static void NAME##_min(T *d, const T *a, const T *b, size_t n) {                                              \
    for (size_t i = 0; i < n; i++)                                                                                     \
      d[i] = a[i] < b[i] ? a[i] : b[i];                                                                                \
  }                                                                                                                    \
  KERNEL static void NAME##_max(T *d, const T *a, const T *b, size_t n) {                                              \
    for (size_t i = 0; i < n; i++)                                                                                     \
      d[i] = a[i] > b[i] ? a[i] : b[i];                                                                                \
  }

DEFINE_KERNELS(f32, float, float)
DEFINE_KERNELS(f64, double, double)
DEFINE_KERNELS(i32, int32_t, uint32_t)
DEFINE_KERNELS(i64, int64_t, uint64_t)
DEFINE_KERNELS(u8, uint8_t, uint32_t)
DEFINE_KERNELS(i8, int8_t, uint32_t)
DEFINE_KERNELS(i16, int16_t, uint32_t)

/* Bitwise ops, for the integer types. */
#define DEFINE_BITWISE(NAME, T)                                                                                        \
  KERNEL static void NAME##_band(T *d, const T *a, const T *b, size_t n) {                                             \
    for (size_t i = 0; i < n; i++)                                                                                     \
      d[i] = (T)(a[i] & b[i]);                                                                                         \
  }                                                                                                                    \
  KERNEL static void NAME##_bor(T *d, const T *a, const T *b, size_t n) {                                              \
    for (size_t i = 0; i < n; i++)                                                                                     \
      d[i] = (T)(a[i] | b[i]);                                                                                         \
  }                                                                                                                    \
  KERNEL static void NAME##_bxor(T *d, const T *a, const T *b, size_t n) {                                             \
    for (size_t i = 0; i < n; i++)                                                                                     \
      d[i] = (T)(a[i] ^ b[i]);                                                                                         \
  }

DEFINE_BITWISE(i32, int32_t)
DEFINE_BITWISE(i64, int64_t)
DEFINE_BITWISE(u8, uint8_t)
DEFINE_BITWISE(i8, int8_t)
DEFINE_BITWISE(i16, int16_t)

/* bool: any non-zero byte is true, results are 0 or 1. SUM and MAX (and BOR) are a logical or, PROD and MIN (and
 * BAND) a logical and, as torch reduces bool tensors on gloo; BXOR an exclusive or. */
KERNEL static void bool_reduce(uint8_t *d, const uint8_t *a, const uint8_t *b, size_t n, cohort_op op) {
  switch (op) {
  case COHORT_PROD:
  case COHORT_MIN:
  case COHORT_BAND:
    for (size_t i = 0; i < n; i++)
      d[i] = (uint8_t)((a[i] != 0) & (b[i] != 0));
    return;
  case COHORT_BXOR:
    for (size_t i = 0; i < n; i++)
      d[i] = (uint8_t)((a[i] != 0) ^ (b[i] != 0));
    return;
  default:
    for (size_t i = 0; i < n; i++)
      d[i] = (uint8_t)((a[i] != 0) | (b[i] != 0));
    return;
  }
}

/* Half types: blocks of 256 through f32 so that the conversion loops vectorize too. */
#define HALF_BLOCK 256
#define DEFINE_HALF(NAME, TO_F32, FROM_F32)                                                                            \
  KERNEL static void NAME##_reduce(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, cohort_op op) {        \
    float fa[HALF_BLOCK], fb[HALF_BLOCK];                                                                              \
    for (size_t base = 0; base < n; base += HALF_BLOCK) {                                                              \
      size_t m = n - base < HALF_BLOCK ? n - base : HALF_BLOCK;                                                        \
      for (size_t i = 0; i < m; i++) {                                                                                 \
        fa[i] = TO_F32(a[base + i]);                                                                                   \
        fb[i] = TO_F32(b[base + i]);                                                                                   \
      }                                                                                                                \
      switch (op) {                                                                                                    \
      case COHORT_PROD:                                                                                                \
        f32_prod(fa, fa, fb, m);                                                                                       \
        break;                                                                                                         \
      case COHORT_MIN:                                                                                                 \
        f32_min(fa, fa, fb, m);                                                                                        \
        break;                                                                                                         \
      case COHORT_MAX:                                                                                                 \
        f32_max(fa, fa, fb, m);                                                                                        \
        break;                                                                                                         \
      default:                                                                                                         \
        f32_sum(fa, fa, fb, m);                                                                                        \
        break;                                                                                                         \
      }                                                                                                                \
      for (size_t i = 0; i < m; i++)                                                                                   \
        d[base + i] = FROM_F32(fa[i]);                                                                                 \
    }                                                                                                                  \
  }

#ifdef __FLT16_MANT_DIG__
/* With _Float16 the compiler converts with F16C (vcvtph2ps/vcvtps2ph, round to nearest even) in the x86-64-v3
 * clone, eight lanes at a time; the portable functions above remain the reference and the fallback. */
static inline float f16_bits_to_f32(uint16_t h) {
  _Float16 x;
  memcpy(&x, &h, 2);
  return (float)x;
}
static inline uint16_t f32_to_f16_bits(float f) {
  _Float16 x = (_Float16)f;
  uint16_t h;
  memcpy(&h, &x, 2);
  return h;
}
DEFINE_HALF(f16, f16_bits_to_f32, f32_to_f16_bits)
#else
DEFINE_HALF(f16, cohort__f16_to_f32, cohort__f32_to_f16)
#endif
DEFINE_HALF(bf16, cohort__bf16_to_f32, cohort__f32_to_bf16)

#define DISPATCH(NAME, T)                                                                                              \
  switch (op) {                                                                                                        \
  case COHORT_PROD:                                                                                                    \
    NAME##_prod((T *)dst, (const T *)a, (const T *)b, n);                                                              \
    return;                                                                                                            \
  case COHORT_MIN:                                                                                                     \
    NAME##_min((T *)dst, (const T *)a, (const T *)b, n);                                                               \
    return;                                                                                                            \
  case COHORT_MAX:                                                                                                     \
    NAME##_max((T *)dst, (const T *)a, (const T *)b, n);                                                               \
    return;                                                                                                            \
  default:                                                                                                             \
    NAME##_sum((T *)dst, (const T *)a, (const T *)b, n);                                                               \
    return;                                                                                                            \
  }

#define DISPATCH_INT(NAME, T)                                                                                          \
  switch (op) {                                                                                                        \
  case COHORT_BAND:                                                                                                    \
    NAME##_band((T *)dst, (const T *)a, (const T *)b, n);                                                              \
    return;                                                                                                            \
  case COHORT_BOR:                                                                                                     \
    NAME##_bor((T *)dst, (const T *)a, (const T *)b, n);                                                               \
    return;                                                                                                            \
  case COHORT_BXOR:                                                                                                    \
    NAME##_bxor((T *)dst, (const T *)a, (const T *)b, n);                                                              \
    return;                                                                                                            \
  default:                                                                                                             \
    DISPATCH(NAME, T)                                                                                                  \
  }

/* dst is either exactly a or b (each element is read before it is written) or disjoint from both; the compiler
 * checks for overlap at run time and still uses the vector loop. */
void cohort__reduce(void *dst, const void *a, const void *b, size_t n, cohort_dtype dtype, cohort_op op) {
  switch (dtype) {
  case COHORT_F32:
    DISPATCH(f32, float)
  case COHORT_F64:
    DISPATCH(f64, double)
  case COHORT_I32:
    DISPATCH_INT(i32, int32_t)
  case COHORT_I64:
    DISPATCH_INT(i64, int64_t)
  case COHORT_U8:
    DISPATCH_INT(u8, uint8_t)
  case COHORT_I8:
    DISPATCH_INT(i8, int8_t)
  case COHORT_I16:
    DISPATCH_INT(i16, int16_t)
  case COHORT_BOOL:
    bool_reduce(dst, a, b, n, op);
    return;
  case COHORT_F16:
    f16_reduce(dst, a, b, n, op);
    return;
  case COHORT_BF16:
    bf16_reduce(dst, a, b, n, op);
    return;
  default:
    return;
  }
}

void cohort__reduce_avg(void *buf, size_t n, cohort_dtype dtype, int world) {
  switch (dtype) {
  case COHORT_F32: {
    float *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] /= (float)world;
    return;
  }
  case COHORT_F64: {
    double *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] /= world;
    return;
  }
  case COHORT_F16: {
    uint16_t *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] = cohort__f32_to_f16(cohort__f16_to_f32(p[i]) / (float)world);
    return;
  }
  case COHORT_BF16: {
    uint16_t *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] = cohort__f32_to_bf16(cohort__bf16_to_f32(p[i]) / (float)world);
    return;
  }
  case COHORT_I32: {
    int32_t *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] /= world;
    return;
  }
  case COHORT_I64: {
    int64_t *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] /= world;
    return;
  }
  case COHORT_U8: {
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] = (uint8_t)(p[i] / world);
    return;
  }
  case COHORT_I8: {
    int8_t *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] = (int8_t)(p[i] / world);
    return;
  }
  case COHORT_I16: {
    int16_t *p = buf;
    for (size_t i = 0; i < n; i++)
      p[i] = (int16_t)(p[i] / world);
    return;
  }
  default: /* bool: AVG is refused (coll.c) */
    return;
  }
}

/* Bulk conversions between f32 and a half type (gradient compression); vectorized like the kernels above. */
KERNEL static void f32_to_f16_array(uint16_t *dst, const float *src, size_t n) {
#ifdef __FLT16_MANT_DIG__
  for (size_t i = 0; i < n; i++)
    dst[i] = f32_to_f16_bits(src[i]);
#else
  for (size_t i = 0; i < n; i++)
    dst[i] = cohort__f32_to_f16(src[i]);
#endif
}
KERNEL static void f16_to_f32_array(float *dst, const uint16_t *src, size_t n) {
#ifdef __FLT16_MANT_DIG__
  for (size_t i = 0; i < n; i++)
    dst[i] = f16_bits_to_f32(src[i]);
#else
  for (size_t i = 0; i < n; i++)
    dst[i] = cohort__f16_to_f32(src[i]);
#endif
}
KERNEL static void f32_to_bf16_array(uint16_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = cohort__f32_to_bf16(src[i]);
}
KERNEL static void bf16_to_f32_array(float *dst, const uint16_t *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = cohort__bf16_to_f32(src[i]);
}

void cohort__f32_to_half(uint16_t *dst, const float *src, size_t n, cohort_dtype half) {
  if (half == COHORT_BF16)
    f32_to_bf16_array(dst, src, n);
  else
    f32_to_f16_array(dst, src, n);
}

void cohort__half_to_f32(float *dst, const uint16_t *src, size_t n, cohort_dtype half) {
  if (half == COHORT_BF16)
    bf16_to_f32_array(dst, src, n);
  else
    f16_to_f32_array(dst, src, n);
}
