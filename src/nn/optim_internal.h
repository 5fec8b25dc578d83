/*
 * optim_internal.h: what the DDP engine's ZeRO-1 (src/ddp/zero.c) needs from an optimizer, so that a rank can step
 * its shard of a flattened parameter vector with exactly the rules of optim.c instead of a copy of them.
 *
 * A sharded optimizer keeps its names, hyperparameters, rate and step count, but not its full state: the engine
 * holds the rank's range of it. While released, cohort_optim_state() still lists the arrays (names, counts) with
 * data NULL, and cohort_optim_step() refuses to run.
 *
 * Thread-safety: that of the optimizer (one thread at a time).
 */
#ifndef COHORT_NN_OPTIM_INTERNAL_H
#define COHORT_NN_OPTIM_INTERNAL_H

#include <stddef.h>

#include "cohort/nn.h"

/* State arrays per parameter: 0 (SGD without momentum), 1 (SGD's momentum buffer), 2 (AdamW's two moments).
 * cohort_optim_state(o, i * k + j) is parameter i's array j. */
int cohort__optim_arrays_per_param(const cohort_optim *o);

/* One step of o's rule over n floats (any contiguous piece of parameters): weights w, gradient g, and state[j] for
 * each of its arrays, at o's current rate and step count. Does not advance the step count. */
void cohort__optim_step_range(const cohort_optim *o, float *w, const float *g, float *const *state, size_t n);

/* The model whose parameters o steps. */
cohort_model *cohort__optim_model(const cohort_optim *o);

/* Frees the full state (the arrays keep their names and counts; data becomes NULL). */
void cohort__optim_release_state(cohort_optim *o);
/* Allocates the full state again, zeroed, if it was released. 1 when it was (and so is now zero), 0 if it was
 * there already, or a negative status. */
int cohort__optim_restore_state(cohort_optim *o);
/* Whether the full state is there (not released). */
int cohort__optim_has_state(const cohort_optim *o);

#endif
