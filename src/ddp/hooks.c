/*
 * hooks.c: the engine's own comm hooks. The plain one averages a bucket in place. The compressed ones halve the
 * bytes on the wire: the bucket is rounded to f16 or bf16 into a side buffer, averaged there (the reduction
 * kernels add in f32 and round once per hop), and widened back into the bucket at finish. They go through the
 * same comm hook interface users get, so that interface is exercised on every compressed run.
 */
#include <stdlib.h>

#include "core/error.h"
#include "core/reduce.h"
#include "ddp/ddp_internal.h"

static cohort_status average_launch(void *user, cohort_comm *comm, const cohort_ddp_bucket *b, cohort_work **work) {
  (void)user;
  return cohort_iallreduce(comm, b->data, b->data, b->count, COHORT_F32, COHORT_AVG, work);
}

/* The side buffer of bucket b, made on first use (a rebuild frees it with the layout). */
static uint16_t *wire_of(cohort_ddp *ddp, const cohort_ddp_bucket *b) {
  ddp_bucket *bk = &ddp->buckets[b->index];
  if (!bk->wire) bk->wire = malloc((b->count ? b->count : 1) * sizeof(uint16_t));
  return bk->wire;
}

static cohort_status compressed_launch(cohort_ddp *ddp, cohort_dtype half, cohort_comm *comm,
                                       const cohort_ddp_bucket *b, cohort_work **work) {
  uint16_t *wire = wire_of(ddp, b);
  if (!wire) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for bucket %d's compressed copy", b->index);
  cohort__f32_to_half(wire, b->data, b->count, half);
  return cohort_iallreduce(comm, wire, wire, b->count, half, COHORT_AVG, work);
}

static cohort_status compressed_complete(cohort_ddp *ddp, cohort_dtype half, const cohort_ddp_bucket *b) {
  cohort__half_to_f32(b->data, ddp->buckets[b->index].wire, b->count, half);
  return COHORT_OK;
}

static cohort_status f16_launch(void *user, cohort_comm *comm, const cohort_ddp_bucket *b, cohort_work **work) {
  return compressed_launch(user, COHORT_F16, comm, b, work);
}
static cohort_status f16_complete(void *user, cohort_comm *comm, const cohort_ddp_bucket *b) {
  (void)comm;
  return compressed_complete(user, COHORT_F16, b);
}
static cohort_status bf16_launch(void *user, cohort_comm *comm, const cohort_ddp_bucket *b, cohort_work **work) {
  return compressed_launch(user, COHORT_BF16, comm, b, work);
}
static cohort_status bf16_complete(void *user, cohort_comm *comm, const cohort_ddp_bucket *b) {
  (void)comm;
  return compressed_complete(user, COHORT_BF16, b);
}

int cohort__ddp_hook_is_average(const cohort_ddp_comm_hook *hook) { return hook->launch == average_launch; }

void cohort__ddp_default_hook(const cohort_ddp *ddp, cohort_ddp_comm_hook *hook) {
  switch (ddp->opt.compression) {
  case COHORT_DDP_COMPRESS_F16:
    *hook = (cohort_ddp_comm_hook){f16_launch, f16_complete, (void *)ddp};
    return;
  case COHORT_DDP_COMPRESS_BF16:
    *hook = (cohort_ddp_comm_hook){bf16_launch, bf16_complete, (void *)ddp};
    return;
  default:
    *hook = (cohort_ddp_comm_hook){average_launch, NULL, NULL};
    return;
  }
}
