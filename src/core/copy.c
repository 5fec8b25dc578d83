/*
 * copy.c: the copy loop behind cohort__copy() (copy.h).
 *
 * glibc's memcpy (2.36, Debian 12) copies blocks of a few KiB and more with `rep movsb`. On the AMD EPYC (Zen 3)
 * development machines that instruction runs at about a quarter of its speed when the destination lies a little
 * past the source modulo 4096 (4K aliasing: each load seems to depend on the store just before it): 128 KiB copies
 * that stay in L2 ran at 2.1-2.3 GB/s with the destination 4 to 24 bytes ahead, 8.5-9.4 GB/s from 40 bytes on
 * (docs/performance.md, "Buffers 16 bytes past a page"). A large block from malloc starts 16 bytes past a page boundary
 * and the shared-memory transport's staging buffers start on one, so the node allreduce of a malloc'd vector copied
 * its results out at that speed: 30 ms for 64 MiB on 2 ranks, against 14 ms for a 64-byte aligned vector (torch's).
 * Here the loads of four vectors come before their stores, so no load waits on a store it only seems to touch; the
 * same copies run at 8.2 GB/s.
 *
 * Not on Intel CPUs: there glibc avoids `rep movsb` at short distances itself (its Avoid_Short_Distance_REP_MOVSB,
 * set for Intel CPUs with fast short rep movsb), and this loop, whose stores split cache lines when the destination
 * is 16 bytes off, measured slower than memcpy on an Intel Xeon with AVX-512 (16 bytes apart: 74 against 146 GB/s
 * for 4 KiB in L1, 42 against 51 for 128 KiB, 28 against 35 for 1 MiB; the same at 16 MiB).
 */
#include "core/copy.h"

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static void copy_avx2(char *d, const char *s, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
    __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
    __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
    _mm256_storeu_si256((__m256i *)(d + i), a);
    _mm256_storeu_si256((__m256i *)(d + i + 32), b);
    _mm256_storeu_si256((__m256i *)(d + i + 64), c);
    _mm256_storeu_si256((__m256i *)(d + i + 96), e);
  }
  memcpy(d + i, s + i, n - i); /* under 128 bytes: no rep movsb */
}

static void copy_sse2(char *d, const char *s, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_storeu_si128((__m128i *)(d + i), a);
    _mm_storeu_si128((__m128i *)(d + i + 16), b);
    _mm_storeu_si128((__m128i *)(d + i + 32), c);
    _mm_storeu_si128((__m128i *)(d + i + 48), e);
  }
  memcpy(d + i, s + i, n - i);
}

void cohort__copy_vectors(void *dst, const void *src, size_t n) {
  if (__builtin_cpu_supports("avx2"))
    copy_avx2(dst, src, n);
  else
    copy_sse2(dst, src, n);
}

void cohort__copy_near(void *dst, const void *src, size_t n) {
  if (__builtin_cpu_is("intel"))
    memcpy(dst, src, n);
  else
    cohort__copy_vectors(dst, src, n);
}

#else

void cohort__copy_vectors(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
void cohort__copy_near(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

#endif
