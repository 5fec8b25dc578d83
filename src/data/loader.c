/*
 * loader.c: batches in the sampler's order, gathered one batch ahead on a background thread.
 *
 * Two slots, used round-robin. A slot is FREE, FILLING (the thread is copying samples into it without the lock),
 * READY, or HELD (handed to the caller by cohort_loader_next). The thread fills slots in order, from fill_pos; the
 * caller takes them in the same order, so the order of batches never depends on timing. Everything but the copy
 * itself happens under the mutex; one condition variable carries every change of state.
 *
 * The thread reads the sampler's index list while it copies. The list only changes in loader_resync(), which
 * first waits until no slot is FILLING and changes it with the mutex held, so no copy can start meanwhile.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/data.h"
#include "core/clock.h"
#include "core/error.h"
#include "data/data_internal.h"

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };
#define NSLOTS 2

typedef struct slot {
  int state;
  size_t start, size; /* the sampler positions [start, start + size) */
  float *images;
  int32_t *labels;
  int64_t *indices;
} slot;

struct cohort_loader {
  const cohort_dataset *ds;
  cohort_sampler *sampler;
  size_t batch_size, sample_floats;
  int drop_last;
  slot slots[NSLOTS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int thread_started;
  int stop;
  size_t fill_pos; /* the next sampler position the thread will gather */
  size_t end;      /* the epoch's batches end here (a multiple of batch_size from the start with drop_last) */
  int fill_slot, take_slot, held;
  int64_t wait_ns;
};

static void gather(cohort_loader *l, slot *sl) {
  const int64_t *idx = cohort_sampler_indices(l->sampler) + sl->start;
  const float *images = cohort_dataset_images(l->ds);
  const int32_t *labels = cohort_dataset_labels(l->ds);
  size_t per = l->sample_floats;
  for (size_t i = 0; i < sl->size; i++) {
    size_t k = (size_t)idx[i];
    memcpy(sl->images + i * per, images + k * per, per * sizeof(float));
    sl->labels[i] = labels[k];
    sl->indices[i] = idx[i];
  }
}

static void *loader_main(void *arg) {
  cohort_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    slot *sl = &l->slots[l->fill_slot];
    if (l->fill_pos >= l->end || sl->state != SLOT_FREE) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    sl->state = SLOT_FILLING;
    sl->start = l->fill_pos;
    sl->size = l->end - l->fill_pos < l->batch_size ? l->end - l->fill_pos : l->batch_size;
    l->fill_pos += sl->size;
    l->fill_slot = (l->fill_slot + 1) % NSLOTS;
    pthread_mutex_unlock(&l->mu);
    gather(l, sl);
    pthread_mutex_lock(&l->mu);
    sl->state = SLOT_READY;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* Drops every gathered batch and starts again from the sampler's cursor. Called with the mutex held; op, run while
 * no copy is in flight, may change the sampler. */
static cohort_status loader_resync(cohort_loader *l, cohort_status (*op)(cohort_loader *, const void *),
                                   const void *arg) {
  for (;;) {
    int filling = 0;
    for (int i = 0; i < NSLOTS; i++)
      filling |= l->slots[i].state == SLOT_FILLING;
    if (!filling) break;
    pthread_cond_wait(&l->cv, &l->mu);
  }
  cohort_status st = op ? op(l, arg) : COHORT_OK;
  for (int i = 0; i < NSLOTS; i++)
    l->slots[i].state = SLOT_FREE;
  l->fill_slot = l->take_slot = 0;
  l->held = -1;
  size_t start = cohort_sampler_cursor(l->sampler), num = cohort_sampler_num_samples(l->sampler);
  l->fill_pos = start;
  l->end = l->drop_last ? start + (num - start) / l->batch_size * l->batch_size : num;
  pthread_cond_broadcast(&l->cv);
  return st;
}

cohort_status cohort_loader_create(const cohort_dataset *ds, cohort_sampler *sampler, size_t batch_size, int drop_last,
                                   cohort_loader **out) {
  cohort_status st = COHORT_OK;
  if (!ds || !sampler || !out || batch_size == 0)
    return cohort__error(COHORT_ERR_INVALID, "cohort_loader_create: NULL dataset, sampler or output, or batch size 0");
  const int64_t *idx = cohort_sampler_indices(sampler);
  for (size_t i = 0; i < cohort_sampler_num_samples(sampler); i++)
    if (idx[i] < 0 || (size_t)idx[i] >= cohort_dataset_size(ds))
      return cohort__error(COHORT_ERR_INVALID,
                           "cohort_loader_create: the sampler yields index %lld but the dataset has %zu samples",
                           (long long)idx[i], cohort_dataset_size(ds));
  cohort_loader *l = calloc(1, sizeof *l);
  if (!l) return cohort__error(COHORT_ERR_SYSTEM, "cohort_loader_create: out of memory");
  l->ds = ds, l->sampler = sampler, l->batch_size = batch_size, l->drop_last = !!drop_last;
  l->sample_floats = cohort_dataset_sample_floats(ds);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  for (int i = 0; i < NSLOTS; i++) {
    slot *sl = &l->slots[i];
    sl->images = malloc(batch_size * l->sample_floats * sizeof(float));
    sl->labels = malloc(batch_size * sizeof(int32_t));
    sl->indices = malloc(batch_size * sizeof(int64_t));
    if (!sl->images || !sl->labels || !sl->indices) {
      st = cohort__error(COHORT_ERR_SYSTEM, "cohort_loader_create: cannot allocate two batches of %zu samples",
                         batch_size);
      goto fail;
    }
  }
  pthread_mutex_lock(&l->mu);
  loader_resync(l, NULL, NULL);
  pthread_mutex_unlock(&l->mu);
  int rc = pthread_create(&l->thread, NULL, loader_main, l);
  if (rc != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, rc, "cohort_loader_create: cannot start the prefetch thread");
    goto fail;
  }
  l->thread_started = 1;
  *out = l;
  return COHORT_OK;

fail:
  cohort_loader_destroy(l);
  return st;
}

void cohort_loader_destroy(cohort_loader *l) {
  if (!l) return;
  if (l->thread_started) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
  }
  for (int i = 0; i < NSLOTS; i++) {
    free(l->slots[i].images);
    free(l->slots[i].labels);
    free(l->slots[i].indices);
  }
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

/* The sampler position after the last batch handed out; what a checkpoint taken now must resume from. */
static size_t consumed_pos(const cohort_loader *l) { return cohort_sampler_cursor(l->sampler); }

cohort_status cohort_loader_next(cohort_loader *l, cohort_batch *batch) {
  memset(batch, 0, sizeof *batch);
  cohort_dataset_shape(l->ds, &batch->channels, &batch->height, &batch->width);
  pthread_mutex_lock(&l->mu);
  if (l->held >= 0) {
    l->slots[l->held].state = SLOT_FREE;
    l->held = -1;
    pthread_cond_broadcast(&l->cv);
  }
  if (consumed_pos(l) >= l->end) {
    pthread_mutex_unlock(&l->mu);
    return COHORT_OK;
  }
  slot *sl = &l->slots[l->take_slot];
  if (sl->state != SLOT_READY) {
    int64_t t0 = cohort__now_ns();
    while (sl->state != SLOT_READY)
      pthread_cond_wait(&l->cv, &l->mu);
    l->wait_ns += cohort__now_ns() - t0;
  }
  sl->state = SLOT_HELD;
  l->held = l->take_slot;
  l->take_slot = (l->take_slot + 1) % NSLOTS;
  cohort__sampler_seek(l->sampler, sl->start + sl->size);
  pthread_mutex_unlock(&l->mu);
  batch->size = sl->size;
  batch->images = sl->images;
  batch->labels = sl->labels;
  batch->indices = sl->indices;
  return COHORT_OK;
}

static cohort_status op_set_epoch(cohort_loader *l, const void *arg) {
  return cohort_sampler_set_epoch(l->sampler, *(const uint64_t *)arg);
}

static cohort_status op_restore(cohort_loader *l, const void *arg) { return cohort_sampler_restore(l->sampler, arg); }

cohort_status cohort_loader_set_epoch(cohort_loader *l, uint64_t epoch) {
  pthread_mutex_lock(&l->mu);
  cohort_status st = loader_resync(l, op_set_epoch, &epoch);
  pthread_mutex_unlock(&l->mu);
  return st;
}

cohort_status cohort_loader_restore(cohort_loader *l, const cohort_sampler_state *state) {
  pthread_mutex_lock(&l->mu);
  cohort_status st = loader_resync(l, op_restore, state);
  pthread_mutex_unlock(&l->mu);
  return st;
}

size_t cohort_loader_batches_left(const cohort_loader *l) {
  cohort_loader *m = (cohort_loader *)l; /* the mutex is not part of the loader's observable state */
  pthread_mutex_lock(&m->mu);
  size_t pos = consumed_pos(l), end = l->end;
  pthread_mutex_unlock(&m->mu);
  return pos >= end ? 0 : (end - pos + l->batch_size - 1) / l->batch_size;
}

int cohort_loader_ready(cohort_loader *l) {
  pthread_mutex_lock(&l->mu);
  int n = 0;
  for (int i = 0; i < NSLOTS; i++)
    n += l->slots[i].state == SLOT_READY;
  pthread_mutex_unlock(&l->mu);
  return n;
}

double cohort_loader_wait_seconds(cohort_loader *l) {
  pthread_mutex_lock(&l->mu);
  int64_t ns = l->wait_ns;
  pthread_mutex_unlock(&l->mu);
  return (double)ns * 1e-9;
}
