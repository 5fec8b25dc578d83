/*
 * zero.c: ZeRO stage 1 (Rajbhandari et al.; DeepSpeed's ZeRO-1, torch's ZeroRedundancyOptimizer). Every rank
 * computes every gradient, but each keeps optimizer state for, and updates, one shard of the parameters only.
 *
 * The shards are ranges of the gradient arena (layout.c pads it to a multiple of the world size), so the gradient
 * side is one reduce-scatter of the arena in place of the allreduce. Parameters are separate arrays: a rank steps the
 * pieces of them that fall in its range directly (the same offsets index the gradient, the parameter and the
 * shard's state), then copies them into a flat buffer in arena order for one allgather, and every rank copies the
 * gathered vector back into every parameter.
 *
 * The rule is optim.c's own (cohort__optim_step_range_trusted), called per piece at the optimizer's rate and step
 * count, with the same flush-to-zero: an element sees the same arithmetic as in the unsharded step. What differs is
 * only the order in which the ranks' gradients are summed by the reduce-scatter against the allreduce, a rounding.
 * LARS needs each tensor's norms, and a tensor may straddle shards: every rank sums the squares of the pieces it
 * owns, one small allreduce adds them up, and every piece of a tensor is stepped with the tensor's ratio.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fpu.h"
#include "ddp/ddp_internal.h"
#include "nn/optim_internal.h"

/* Where parameter i starts in the arena, in floats. */
static size_t arena_offset(const cohort_ddp *ddp, int i) {
  const ddp_param *p = &ddp->params[i];
  return (size_t)(ddp->buckets[p->bucket].view.data - ddp->arena) + p->offset;
}

/* The part of parameter i inside this rank's shard: [*lo, *hi) in arena floats; 0 when none. */
static int owned_piece(const cohort_ddp *ddp, int i, size_t *lo, size_t *hi) {
  const size_t begin = (size_t)ddp->rank * ddp->zero_shard, end = begin + ddp->zero_shard;
  const size_t a = arena_offset(ddp, i), b = a + ddp->params[i].count;
  *lo = a > begin ? a : begin;
  *hi = b < end ? b : end;
  return *lo < *hi;
}

void cohort__ddp_zero_free(cohort_ddp *ddp) {
  free(ddp->zero_state);
  free(ddp->zero_grad);
  free(ddp->zero_send);
  free(ddp->zero_sums);
  ddp->zero_sums = NULL;
  cohort_free(ddp->comm, ddp->zero_gathered);
  ddp->zero_state = ddp->zero_grad = ddp->zero_send = ddp->zero_gathered = NULL;
  ddp->zero_optim = NULL;
}

cohort_status cohort__ddp_zero_reduce(cohort_ddp *ddp) {
  /* The alignment gaps and the padding are zero on every rank and stay zero, as in the allreduce. The result goes
   * to a buffer of its own because the collective does not promise that recvbuf may alias sendbuf's block. */
  if (!ddp->zero_grad && !(ddp->zero_grad = malloc(ddp->zero_shard * sizeof(float))))
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory for a shard of %zu gradients", ddp->zero_shard);
  COHORT_CHECK(cohort_reduce_scatter(ddp->comm, ddp->arena, ddp->zero_grad, ddp->zero_shard, COHORT_F32, COHORT_AVG));
  memcpy(ddp->arena + (size_t)ddp->rank * ddp->zero_shard, ddp->zero_grad, ddp->zero_shard * sizeof(float));
  return COHORT_OK;
}

cohort_status cohort_ddp_zero_attach(cohort_ddp *ddp, cohort_optim *optim) {
  if (!ddp || !optim) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_zero_attach: NULL argument");
  if (!ddp->opt.zero_stage)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_zero_attach: the engine was made without zero_stage 1");
  if (ddp->zero_optim)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_zero_attach: an optimizer is attached already");
  cohort_model *model = cohort__optim_model(optim);
  if (cohort_model_num_params(model) != ddp->num_params)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_zero_attach: the optimizer has %d parameters, the engine %d",
                         cohort_model_num_params(model), ddp->num_params);
  for (int i = 0; i < ddp->num_params; i++) {
    const cohort_param *p = cohort_model_param(model, i);
    if (p->value != ddp->params[i].value || p->numel != ddp->params[i].count)
      return cohort__error(COHORT_ERR_INVALID,
                           "cohort_ddp_zero_attach: the optimizer's parameter %d ('%s') is not the engine's ('%s')", i,
                           p->name, ddp->params[i].name);
  }
  if (!cohort__optim_has_state(optim))
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_zero_attach: the optimizer is sharded by another engine");
  const int k = cohort__optim_arrays_per_param(optim);
  const size_t s = ddp->zero_shard;
  ddp->zero_state = calloc(k ? (size_t)k * s : 1, sizeof(float));
  if (!ddp->zero_grad) ddp->zero_grad = malloc(s * sizeof(float));
  ddp->zero_send = malloc(s * sizeof(float));
  ddp->zero_gathered = cohort_alloc(ddp->comm, (size_t)ddp->size * s * sizeof(float));
  if (!ddp->zero_state || !ddp->zero_grad || !ddp->zero_send || !ddp->zero_gathered) {
    cohort__ddp_zero_free(ddp);
    return cohort__error(COHORT_ERR_SYSTEM, "cohort_ddp_zero_attach: out of memory for a shard of %zu floats", s);
  }
  /* Keep this rank's range of whatever the optimizer holds (an unsharded checkpoint's state, or zeros). */
  const size_t base = (size_t)ddp->rank * s;
  for (int i = 0; i < ddp->num_params; i++) {
    size_t lo, hi;
    if (!owned_piece(ddp, i, &lo, &hi)) continue;
    const size_t in_param = lo - arena_offset(ddp, i);
    for (int j = 0; j < k; j++)
      memcpy(ddp->zero_state + (size_t)j * s + (lo - base), cohort_optim_state(optim, k * i + j)->data + in_param,
             (hi - lo) * sizeof(float));
  }
  cohort__optim_release_state(optim);
  ddp->zero_optim = optim;
  ddp->zero_arrays = k;
  return COHORT_OK;
}

static cohort_status check_attached(cohort_ddp *ddp, const char *who) {
  if (!ddp) return cohort__error(COHORT_ERR_INVALID, "%s: ddp is NULL", who);
  if (ddp->failure.status != COHORT_OK) return cohort__failure_raise(&ddp->failure);
  if (!ddp->zero_optim)
    return cohort__error(COHORT_ERR_INVALID, "%s: no optimizer is attached (cohort_ddp_zero_attach)", who);
  return COHORT_OK;
}

/* LARS: every tensor's sum(w^2) and sum(g^2) over all ranks' pieces, into ddp->zero_sums (2 per parameter). Nothing
 * for a plain rule. */
static cohort_status tensor_square_sums(cohort_ddp *ddp) {
  if (!cohort__optim_is_layerwise(ddp->zero_optim)) return COHORT_OK;
  const size_t n = 2 * (size_t)ddp->num_params;
  if (!ddp->zero_sums && !(ddp->zero_sums = malloc(n * sizeof(double))))
    return cohort__error(COHORT_ERR_SYSTEM, "out of memory for %zu norms (ZeRO-1 with LARS)", n);
  memset(ddp->zero_sums, 0, n * sizeof(double));
  for (int i = 0; i < ddp->num_params; i++) {
    size_t lo, hi;
    if (!owned_piece(ddp, i, &lo, &hi)) continue;
    const float *w = ddp->params[i].value + (lo - arena_offset(ddp, i));
    cohort__optim_square_sums(w, ddp->arena + lo, hi - lo, &ddp->zero_sums[2 * i], &ddp->zero_sums[2 * i + 1]);
  }
  if (ddp->size == 1) return COHORT_OK;
  cohort_status st = cohort_allreduce(ddp->comm, ddp->zero_sums, ddp->zero_sums, n, COHORT_F64, COHORT_SUM);
  if (st != COHORT_OK)
    return cohort__ddp_fail(ddp, cohort__error_prefix(st,
                                                      "summing the tensors' norms for LARS after step %lld "
                                                      "(ZeRO-1)",
                                                      (long long)ddp->step));
  return COHORT_OK;
}

cohort_status cohort_ddp_zero_step(cohort_ddp *ddp) {
  COHORT_CHECK(check_attached(ddp, "cohort_ddp_zero_step"));
  cohort_optim *o = ddp->zero_optim;
  /* Root's full copy from the last gather is stale after this step; the shard is the state. */
  if (cohort__optim_has_state(o)) cohort__optim_release_state(o);
  const size_t s = ddp->zero_shard, base = (size_t)ddp->rank * s;
  COHORT_CHECK(tensor_square_sums(ddp));
  const unsigned fpu = cohort__fpu_flush_begin();
  for (int i = 0; i < ddp->num_params; i++) {
    size_t lo, hi;
    if (!owned_piece(ddp, i, &lo, &hi)) continue;
    float *w = ddp->params[i].value + (lo - arena_offset(ddp, i));
    float *state[2] = {ddp->zero_arrays > 0 ? ddp->zero_state + (lo - base) : NULL,
                       ddp->zero_arrays > 1 ? ddp->zero_state + s + (lo - base) : NULL};
    const float trust =
        ddp->zero_sums ? cohort__optim_trust(o, ddp->params[i].ndim, ddp->zero_sums[2 * i], ddp->zero_sums[2 * i + 1])
                       : 1.0f;
    cohort__optim_step_range_trusted(o, w, ddp->arena + lo, state, hi - lo, trust);
    memcpy(ddp->zero_send + (lo - base), w, (hi - lo) * sizeof(float));
  }
  cohort__fpu_flush_end(fpu);
  cohort_optim_set_steps(o, cohort_optim_steps(o) + 1);
  if (ddp->size == 1) return COHORT_OK; /* the one shard is every parameter, updated in place */
  cohort_status st = cohort_allgather(ddp->comm, ddp->zero_send, ddp->zero_gathered, s, COHORT_F32);
  if (st != COHORT_OK)
    return cohort__ddp_fail(
        ddp, cohort__error_prefix(st, "gathering the parameters after step %lld (ZeRO-1)", (long long)ddp->step));
  for (int i = 0; i < ddp->num_params; i++)
    memcpy(ddp->params[i].value, ddp->zero_gathered + arena_offset(ddp, i), ddp->params[i].count * sizeof(float));
  return COHORT_OK;
}

cohort_status cohort_ddp_zero_gather_state(cohort_ddp *ddp, int root) {
  COHORT_CHECK(check_attached(ddp, "cohort_ddp_zero_gather_state"));
  if (root < 0 || root >= ddp->size)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_zero_gather_state: root %d of %d ranks", root, ddp->size);
  cohort_optim *o = ddp->zero_optim;
  const int k = ddp->zero_arrays;
  const size_t s = ddp->zero_shard;
  if (ddp->rank == root) {
    int r = cohort__optim_restore_state(o);
    if (r < 0) return (cohort_status)r;
  }
  /* One state array at a time through the allgather buffer: the full state exists on root only, and the
   * temporary costs what the parameters' staging already does. */
  for (int j = 0; j < k; j++) {
    if (ddp->size > 1) {
      cohort_status st =
          cohort_allgather(ddp->comm, ddp->zero_state + (size_t)j * s, ddp->zero_gathered, s, COHORT_F32);
      if (st != COHORT_OK)
        return cohort__ddp_fail(ddp, cohort__error_prefix(st, "gathering the optimizer state (ZeRO-1)"));
    } else
      memcpy(ddp->zero_gathered, ddp->zero_state + (size_t)j * s, s * sizeof(float));
    if (ddp->rank != root) continue;
    for (int i = 0; i < ddp->num_params; i++)
      memcpy(cohort_optim_state(o, k * i + j)->data, ddp->zero_gathered + arena_offset(ddp, i),
             ddp->params[i].count * sizeof(float));
  }
  return COHORT_OK;
}

size_t cohort_ddp_zero_state_bytes(const cohort_ddp *ddp) {
  return ddp && ddp->zero_optim ? (size_t)ddp->zero_arrays * ddp->zero_shard * sizeof(float) : 0;
}
