/*
 * sampler.c: PyTorch DistributedSampler semantics (see data.h). The rank's list for an epoch is computed once, at
 * set_epoch, from the whole permutation: padding repeats the permutation from its start, so position p of the
 * padded order is perm[p mod N], and rank r's i-th index is perm[(r + i * world) mod N].
 */
#include <stdlib.h>
#include <string.h>

#include "cohort/data.h"
#include "core/error.h"
#include "data/data_internal.h"
#include "data/mt19937.h"

struct cohort_sampler {
  size_t n;
  int world, rank, shuffle, drop_last;
  uint64_t seed, epoch;
  size_t num_samples, cursor;
  int64_t *indices; /* num_samples */
  int64_t *perm;    /* n: scratch kept between epochs */
};

static cohort_status sampler_compute(cohort_sampler *s) {
  if (s->shuffle)
    cohort__randperm(s->seed + s->epoch, s->perm, (int64_t)s->n);
  else
    for (size_t i = 0; i < s->n; i++)
      s->perm[i] = (int64_t)i;
  for (size_t i = 0; i < s->num_samples; i++)
    s->indices[i] = s->perm[((size_t)s->rank + i * (size_t)s->world) % s->n];
  s->cursor = 0;
  return COHORT_OK;
}

cohort_status cohort_sampler_create(size_t dataset_size, int world_size, int rank, int shuffle, uint64_t seed,
                                    int drop_last, cohort_sampler **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "cohort_sampler_create: NULL output");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return cohort__error(COHORT_ERR_INVALID, "cohort_sampler_create: rank %d is not in a world of size %d", rank,
                         world_size);
  if (dataset_size == 0) return cohort__error(COHORT_ERR_INVALID, "cohort_sampler_create: the dataset is empty");
  /* PyTorch draws 64-bit numbers for larger n; staying below its threshold keeps the orders equal. */
  if (shuffle && dataset_size >= 0xffffffffu / 20)
    return cohort__error(COHORT_ERR_INVALID, "cohort_sampler_create: %zu samples is too many to shuffle (limit %u)",
                         dataset_size, 0xffffffffu / 20);
  cohort_sampler *s = calloc(1, sizeof *s);
  if (!s) return cohort__error(COHORT_ERR_SYSTEM, "cohort_sampler_create: out of memory");
  s->n = dataset_size;
  s->world = world_size, s->rank = rank, s->shuffle = !!shuffle, s->drop_last = !!drop_last;
  s->seed = seed;
  size_t w = (size_t)world_size;
  s->num_samples = drop_last ? dataset_size / w : (dataset_size + w - 1) / w;
  s->indices = malloc((s->num_samples + 1) * sizeof(int64_t));
  s->perm = malloc(dataset_size * sizeof(int64_t));
  if (!s->indices || !s->perm) {
    cohort_sampler_destroy(s);
    return cohort__error(COHORT_ERR_SYSTEM, "cohort_sampler_create: cannot allocate %zu indices", dataset_size);
  }
  sampler_compute(s);
  *out = s;
  return COHORT_OK;
}

void cohort_sampler_destroy(cohort_sampler *s) {
  if (!s) return;
  free(s->indices);
  free(s->perm);
  free(s);
}

cohort_status cohort_sampler_set_epoch(cohort_sampler *s, uint64_t epoch) {
  s->epoch = epoch;
  return sampler_compute(s);
}

uint64_t cohort_sampler_epoch(const cohort_sampler *s) { return s->epoch; }
size_t cohort_sampler_num_samples(const cohort_sampler *s) { return s->num_samples; }
const int64_t *cohort_sampler_indices(const cohort_sampler *s) { return s->indices; }
size_t cohort_sampler_cursor(const cohort_sampler *s) { return s->cursor; }

void cohort__sampler_seek(cohort_sampler *s, size_t pos) { s->cursor = pos < s->num_samples ? pos : s->num_samples; }

size_t cohort_sampler_next(cohort_sampler *s, int64_t *out, size_t max) {
  size_t n = s->num_samples - s->cursor;
  if (n > max) n = max;
  memcpy(out, s->indices + s->cursor, n * sizeof(int64_t));
  s->cursor += n;
  return n;
}

void cohort_sampler_get_state(const cohort_sampler *s, cohort_sampler_state *state) {
  memset(state, 0, sizeof *state);
  state->epoch = s->epoch;
  state->cursor = s->cursor;
  state->seed = s->seed;
  state->dataset_size = s->n;
  state->world_size = s->world;
  state->shuffle = s->shuffle;
  state->drop_last = s->drop_last;
}

cohort_status cohort_sampler_restore(cohort_sampler *s, const cohort_sampler_state *st) {
  if (!st) return cohort__error(COHORT_ERR_INVALID, "cohort_sampler_restore: NULL state");
  if (st->dataset_size != s->n)
    return cohort__error(COHORT_ERR_INVALID, "sampler state was saved for a dataset of %llu samples, this one has %zu",
                         (unsigned long long)st->dataset_size, s->n);
  if (st->world_size != s->world)
    return cohort__error(COHORT_ERR_INVALID, "sampler state was saved with world size %d, this job has %d",
                         (int)st->world_size, s->world);
  if (st->seed != s->seed)
    return cohort__error(COHORT_ERR_INVALID, "sampler state was saved with seed %llu, this sampler has %llu",
                         (unsigned long long)st->seed, (unsigned long long)s->seed);
  if (!!st->shuffle != s->shuffle || !!st->drop_last != s->drop_last)
    return cohort__error(COHORT_ERR_INVALID,
                         "sampler state was saved with shuffle=%d drop_last=%d, this sampler has %d and %d",
                         (int)st->shuffle, (int)st->drop_last, s->shuffle, s->drop_last);
  if (st->cursor > s->num_samples)
    return cohort__error(COHORT_ERR_INVALID, "sampler state's cursor %llu is past the epoch's %zu samples",
                         (unsigned long long)st->cursor, s->num_samples);
  s->epoch = st->epoch;
  sampler_compute(s);
  s->cursor = (size_t)st->cursor;
  return COHORT_OK;
}
