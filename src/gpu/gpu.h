/*
 * gpu.h: collectives on device memory, the host side (docs/gpu.md).
 *
 * A communicator meets device memory at some collective; from then on it holds a cohort__gpu: the CUDA plugin
 * (libcohort_cuda.so, loaded here with dlopen), the path its ranks chose together at that first call (NCCL, CUDA IPC
 * or staged through host memory) and that path's device communicator. Device collectives run in the communicator's
 * one order of calls, on the caller's thread or the progress thread as any other, and their frames carry the call
 * (algorithm "device") so that a rank that passes host memory where the others pass device memory, or calls
 * something else, is a mismatch.
 */
#ifndef COHORT_GPU_GPU_H
#define COHORT_GPU_GPU_H

#include "coll/coll.h"
#include "core/config.h"
#include "gpu/cuda_plugin.h"
#include "transport/transport.h"

typedef struct cohort__gpu cohort__gpu;

/* Whether a's buffers are device memory: sets a->on_device and a->device. Cheap for host memory when the process has
 * never loaded the CUDA driver (no buffer can be on a device then). COHORT_ERR_INVALID for buffers on two devices or
 * split between host and device, or for device memory where the CUDA plugin cannot run (the reason named). A
 * _stream call (stream_call) on host memory is COHORT_ERR_INVALID too. */
cohort_status cohort__gpu_classify(cohort__coll_args *a, int stream_call);
/* An asynchronous call on device memory: marks the point of a->stream after which its input is ready (a->ready). */
cohort_status cohort__gpu_mark_ready(cohort__coll_args *a);
/* Gives back a->ready, once the call ran (or will never run). */
void cohort__gpu_release_ready(cohort__coll_args *a);

/* Runs a device collective as call seq over t (the caller owns t); makes *g at the communicator's first one. */
cohort_status cohort__gpu_run(cohort__gpu **g, cohort__transport *t, cohort__coll_ctx *coll, const cohort__config *cfg,
                              const cohort__coll_args *a, uint32_t seq);
/* Any thread, after the communicator failed: no device work waits any longer for the peers (NCCL: abort). */
void cohort__gpu_abort(cohort__gpu *g);
void cohort__gpu_destroy(cohort__gpu *g);
/* "nccl", "cuda-ipc", "staged", or NULL for none yet. */
const char *cohort__gpu_path_name(const cohort__gpu *g);

/* The path every rank takes, decided alike on every rank from every rank's description (infos[r] for rank r) and
 * COHORT_GPU_PATH (forced: "auto", "nccl", "ipc" or "staged"); COHORT_ERR_INVALID, saying why, for a forced path the
 * layout cannot take. */
cohort_status cohort__gpu_choose_path(const cohort__cuda_rank_info *infos, int n, const char *forced,
                                      cohort__cuda_path *path);

/* 1 when device collectives can run in this process; else 0 with the reason in cohort_last_error(). */
int cohort__gpu_available(void);

#endif
