/*
 * mt19937.h: the 32-bit Mersenne Twister, seeded as PyTorch's CPU generator seeds it (torch.manual_seed(s) keeps
 * the low 32 bits of s), so that the sampler's shuffles can match torch.randperm. Not for cryptography.
 * A generator is a plain value: no sharing, no locking.
 */
#ifndef COHORT_DATA_MT19937_H
#define COHORT_DATA_MT19937_H

#include <stdint.h>

typedef struct cohort__mt19937 {
  uint32_t state[624];
  int next;
} cohort__mt19937;

void cohort__mt19937_seed(cohort__mt19937 *mt, uint64_t seed);
uint32_t cohort__mt19937_next(cohort__mt19937 *mt);
/* perm[0..n) = the permutation torch.randperm(n, generator=g) returns after g.manual_seed(seed). */
void cohort__randperm(uint64_t seed, int64_t *perm, int64_t n);

#endif
