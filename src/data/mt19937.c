/* mt19937.c: Matsumoto and Nishimura's generator (1998), and PyTorch's CPU randperm on top of it. */
#include "data/mt19937.h"

#define MT_N 624
#define MT_M 397

void cohort__mt19937_seed(cohort__mt19937 *mt, uint64_t seed) {
  mt->state[0] = (uint32_t)(seed & 0xffffffffu);
  for (int i = 1; i < MT_N; i++)
    mt->state[i] = 1812433253u * (mt->state[i - 1] ^ (mt->state[i - 1] >> 30)) + (uint32_t)i;
  mt->next = MT_N;
}

static void mt_twist(cohort__mt19937 *mt) {
  for (int i = 0; i < MT_N; i++) {
    uint32_t y = (mt->state[i] & 0x80000000u) | (mt->state[(i + 1) % MT_N] & 0x7fffffffu);
    uint32_t v = mt->state[(i + MT_M) % MT_N] ^ (y >> 1);
    if (y & 1) v ^= 0x9908b0dfu;
    mt->state[i] = v;
  }
  mt->next = 0;
}

uint32_t cohort__mt19937_next(cohort__mt19937 *mt) {
  if (mt->next >= MT_N) mt_twist(mt);
  uint32_t y = mt->state[mt->next++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

void cohort__randperm(uint64_t seed, int64_t *perm, int64_t n) {
  cohort__mt19937 mt;
  cohort__mt19937_seed(&mt, seed);
  for (int64_t i = 0; i < n; i++)
    perm[i] = i;
  /* PyTorch's forward Fisher-Yates: position i swaps with a uniform-ish pick from [i, n). The modulo bias is
   * PyTorch's too; keeping it is what makes the orders equal. */
  for (int64_t i = 0; i + 1 < n; i++) {
    int64_t z = (int64_t)(cohort__mt19937_next(&mt) % (uint64_t)(n - i));
    int64_t t = perm[i];
    perm[i] = perm[z + i];
    perm[z + i] = t;
  }
}
