/*
 * sync_batchnorm.c: SyncBatchNorm for a model trained under the DDP engine. The nn layer knows nothing of
 * communicators; it hands its per-channel sums to a hook (cohort_model_set_batchnorm_sync), and this file supplies
 * the hook: a blocking float64 SUM allreduce on the engine's communicator.
 *
 * The hook runs on the training thread in the middle of forward and backward. A blocking collective queues behind
 * the bucket allreduces already started on the communicator's progress thread, and every rank starts buckets and
 * syncs batchnorm layers at the same points of the same backward, so the collectives pair up in the same order on
 * every rank (which is also how PyTorch's SyncBatchNorm shares DDP's process group).
 *
 * The hook keeps the communicator, not the engine, so a model whose engine was destroyed still reduces over a live
 * communicator; the communicator must outlive the model's use of it (turn sync off before destroying it).
 *
 * Thread-safety: as the model's; the hook runs on the thread that calls forward and backward.
 */
#include "cohort/ddp.h"
#include "cohort/nn.h"
#include "core/error.h"
#include "ddp/ddp_internal.h"

static cohort_status allreduce_sums(void *user, double *sums, size_t count) {
  cohort_comm *comm = user;
  cohort_status st = cohort_allreduce(comm, sums, sums, count, COHORT_F64, COHORT_SUM);
  if (st != COHORT_OK)
    return cohort__error_prefix(st, "SyncBatchNorm allreduce of %zu sums on rank %d", count, cohort_rank(comm));
  return COHORT_OK;
}

cohort_status cohort_ddp_sync_batchnorm(cohort_ddp *ddp, struct cohort_model *model, int on) {
  if (!ddp || !model)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_sync_batchnorm: %s is NULL", ddp ? "model" : "engine");
  cohort_comm *comm = cohort_ddp_comm(ddp);
  if (!comm) return cohort__error(COHORT_ERR_INVALID, "cohort_ddp_sync_batchnorm: the engine has no communicator");
  ddp->syncbn = on != 0;
  if (on)
    cohort_model_set_batchnorm_sync(model, allreduce_sums, comm);
  else
    cohort_model_set_batchnorm_sync(model, NULL, NULL);
  return COHORT_OK;
}
