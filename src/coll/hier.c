/*
 * hier.c: the hierarchical allreduce, for a job on several nodes with several ranks each (cohort__layers in
 * transport/transport.h).
 *
 * The node transport's node_allreduce (over shared memory: transport/shm_coll.c) already splits every chunk of the
 * vector into one slice per local rank and has local rank l reduce slice l from all the node's inputs before the others
 * copy it. Here that reduced slice is, before anyone copies it, allreduced across nodes with the ranks that have local
 * index l on the other nodes (ring or recursive doubling by size, over a view of the TCP mesh): every local rank runs
 * its own slice's exchange at the same time, so all of the node's ranks, and their links, work in parallel. Then the
 * node's ranks copy the slices, as in the node allreduce: that is the allgather. Small vectors (the node
 * allreduce's small path, where every rank reduces the whole vector itself) are allreduced across nodes whole, by
 * every local rank, so that nobody waits for a broadcast within the node.
 *
 *   shm reduce-scatter (per chunk)  ->  allreduce of slice l across nodes  ->  shm allgather
 *
 * Bitwise agreement: the ranks of a node hold the same reduced slice (computed once, in rank order, or in the same
 * order everywhere on the small path); ranks with the same local index on all nodes then run the same deterministic
 * algorithm on it, and everyone else copies its result. AVG is summed on both levels and divided once, by the world
 * size, by the rank that computes the slice.
 *
 * Every slice (empty ones too) goes through the exchange across nodes: ring and rd send at least one frame each,
 * stamped with the call, so a node that runs a different count or op is reported as a mismatch, not waited for.
 */
#include "coll/coll.h"
#include "core/error.h"
#include "core/reduce.h"

typedef struct across_job {
  cohort__coll_ctx *across;
  cohort_dtype dtype;
  cohort_op op;
  int world;
} across_job;

static cohort_status allreduce_across(void *arg, void *slice, size_t first, size_t count) {
  (void)first;
  across_job *j = arg;
  cohort__coll_args a = {.coll = COHORT__COLL_ALLREDUCE,
                         .sendbuf = slice,
                         .recvbuf = slice,
                         .count = count,
                         .dtype = j->dtype,
                         .op = j->op == COHORT_AVG ? COHORT_SUM : j->op,
                         .root = -1};
  size_t bytes = count * cohort_dtype_size(j->dtype);
  cohort_status st =
      bytes <= j->across->small_bytes ? cohort__rd_allreduce(j->across, &a) : cohort__ring_allreduce(j->across, &a);
  if (st == COHORT_OK && j->op == COHORT_AVG) cohort__reduce_avg(slice, count, j->dtype, j->world);
  return st;
}

cohort_status cohort__hier_allreduce(cohort__coll_ctx *ctx, const cohort__coll_args *a) {
  if (!ctx->layers || !ctx->across)
    return cohort__error(COHORT_ERR_INTERNAL, "hierarchical allreduce on a communicator without layers");
  across_job job = {.across = ctx->across, .dtype = a->dtype, .op = a->op, .world = ctx->size};
  cohort__transport *node = ctx->layers->node;
  return node->ops->node_allreduce(node, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, allreduce_across, &job);
}
