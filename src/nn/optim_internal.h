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
 * each of its arrays, at o's current rate and step count, with the gradient scaled by trust (LARS's ratio for the
 * tensor the piece belongs to: cohort__optim_trust; 1 for the plain rule, to the bit). Does not advance the step
 * count. */
void cohort__optim_step_range_trusted(const cohort_optim *o, float *w, const float *g, float *const *state, size_t n,
                                      float trust);

/* Whether o's rule needs each tensor's norms (LARS). A shard of a flattened vector holds pieces of tensors: the
 * owner of each piece adds its sums of squares, and the ranks sum those before stepping. */
int cohort__optim_is_layerwise(const cohort_optim *o);
/* Adds sum(w^2) and sum(g^2) over n floats to *ww and *gg, in double (a sum of millions of floats in float would
 * lose digits to its order). */
void cohort__optim_square_sums(const float *w, const float *g, size_t n, double *ww, double *gg);
/* LARS's ratio for a tensor of ndim dimensions whose weights and gradient have the sums of squares ww and gg:
 * trust_coefficient * |w| / (|g| + weight_decay * |w|), LARC-clipped when asked; 1 when o is not layer-wise, for
 * tensors of one dimension (biases, batchnorm), and when either norm is 0. */
float cohort__optim_trust(const cohort_optim *o, int ndim, double ww, double gg);

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
