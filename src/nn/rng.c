/*
 * rng.c: xoshiro256** (Blackman and Vigna), seeded by expanding a 64-bit seed with splitmix64 as its authors
 * recommend. Integer only, so every platform draws the same numbers from the same seed.
 */
#include <math.h>

#include "cohort/nn.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void cohort_rng_seed(cohort_rng *rng, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++)
    rng->s[i] = splitmix64(&x);
}

uint64_t cohort_rng_next(cohort_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

float cohort_rng_uniform(cohort_rng *rng) { return (float)(cohort_rng_next(rng) >> 40) * 0x1.0p-24f; }

double cohort_rng_normal(cohort_rng *rng) {
  /* 53-bit uniforms; u1 in (0, 1] so that log() is finite. */
  double u1 = ((double)(cohort_rng_next(rng) >> 11) + 1.0) * 0x1.0p-53;
  double u2 = (double)(cohort_rng_next(rng) >> 11) * 0x1.0p-53;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}
