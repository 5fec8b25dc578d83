/*
 * internal.h: what the files of the CUDA plugin share: its error message, the checks around CUDA calls, and the
 * device communicator of each path.
 */
#ifndef COHORT_CUDA_INTERNAL_H
#define COHORT_CUDA_INTERNAL_H

#include <cuda.h>
#include <cuda_runtime.h>

#include "gpu/cuda_plugin.h"

/* Records this thread's message (cohort__cuda_api.last_error) and returns status. */
cohort_status cc_fail(cohort_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *cc_last_error(void);

/* A failed runtime call becomes COHORT_ERR_SYSTEM naming the call and CUDA's words for the error. */
#define CC_TRY(call)                                                                                                   \
  do {                                                                                                                 \
    cudaError_t cc_e_ = (call);                                                                                        \
    if (cc_e_ != cudaSuccess)                                                                                          \
      return cc_fail(COHORT_ERR_SYSTEM, "%s: %s (%s)", #call, cudaGetErrorString(cc_e_), cudaGetErrorName(cc_e_));     \
  } while (0)

#define CC_CHECK(expr)                                                                                                 \
  do {                                                                                                                 \
    cohort_status cc_s_ = (expr);                                                                                      \
    if (cc_s_ != COHORT_OK) return cc_s_;                                                                              \
  } while (0)

/* The plugin calls nothing of libcohort's (a program may link it statically): its own copies of these. */
static inline size_t cc_dtype_size(cohort_dtype d) {
  switch (d) {
  case COHORT_F64:
  case COHORT_I64:
    return 8;
  case COHORT_F32:
  case COHORT_I32:
    return 4;
  case COHORT_F16:
  case COHORT_BF16:
    return 2;
  case COHORT_U8:
    return 1;
  default:
    return 0;
  }
}

/* Bytes of each buffer of a call: what sendbuf and recvbuf span. */
void cc_call_bytes(const cohort__cuda_call *call, int size, size_t *send_bytes, size_t *recv_bytes);
/* Waits on the host until the call's input is ready (its event, else its stream). */
cohort_status cc_wait_input(const cohort__cuda_call *call);

/* ---- the reduction and copy kernels (kernels.cu) ---- */

/* One reduction: out[o][i] = op over k of in[k][i], for i < count, every o < nout. */
typedef struct cc_reduce_job {
  const void *in[COHORT__CUDA_IPC_MAX_RANKS];
  void *out[COHORT__CUDA_IPC_MAX_RANKS];
  int nin, nout;
  size_t count;
} cc_reduce_job;

/* Runs njobs reductions (at most COHORT__CUDA_IPC_MAX_RANKS) in one launch on stream; AVG divides by avg_n. skip:
 * a device-visible word that, non-zero when the kernel starts, makes it touch nothing (an aborted communicator's
 * kernels, released from their waits, must not write into a dead rank's buffers); NULL: none. */
cohort_status cc_reduce(const cc_reduce_job *jobs, int njobs, cohort_dtype dtype, cohort_op op, int avg_n,
                        cudaStream_t stream, const uint32_t *skip);

/* One copy of bytes from src to dst. */
typedef struct cc_copy_job {
  const void *src;
  void *dst;
  size_t bytes;
} cc_copy_job;

#define CC_COPY_MAX_JOBS (COHORT__CUDA_IPC_MAX_RANKS * COHORT__CUDA_IPC_MAX_RANKS)
/* Runs njobs copies (at most CC_COPY_MAX_JOBS) in one launch on stream; skip as for cc_reduce. */
cohort_status cc_copy(const cc_copy_job *jobs, int njobs, cudaStream_t stream, const uint32_t *skip);

/* ---- the paths ---- */

struct cohort__cuda_comm {
  cohort__cuda_path path;
  int device, rank, size;
  cudaStream_t stream; /* the IPC leader's kernels */
  struct cc_ipc *ipc;
  struct cc_nccl *nccl;
};

cohort_status cc_ipc_create(cohort__cuda_comm *c, const cohort__cuda_rank_info *infos, const cohort__cuda_host *host);
cohort_status cc_ipc_run(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host);
/* Any thread: releases every stream waiting at the IPC path's flags, and fails its later runs. */
void cc_ipc_abort(cohort__cuda_comm *c);
void cc_ipc_destroy(cohort__cuda_comm *c);

/* 1 when libnccl.so.2 loads here (the reason of a failure in *why, for the path choice's message). */
int cc_nccl_loadable(void);
cohort_status cc_nccl_create(cohort__cuda_comm *c, const cohort__cuda_rank_info *infos, const cohort__cuda_host *host);
cohort_status cc_nccl_run(cohort__cuda_comm *c, const cohort__cuda_call *call, const cohort__cuda_host *host);
void cc_nccl_abort(cohort__cuda_comm *c);
void cc_nccl_destroy(cohort__cuda_comm *c);

#endif
