/*
 * cuda_plugin.h: the table of functions between libcohort and its CUDA plugin (libcohort_cuda.so, src/cuda/).
 *
 * libcohort never links CUDA: it loads the plugin with dlopen when a collective first meets a buffer that may be
 * device memory (core/plugin.c), and calls it through this table. The plugin never calls back into libcohort by
 * symbol (a program may link libcohort.a): what it needs of the host side (frames to and from the other ranks, to
 * exchange descriptors and to wait for each other) comes as a cohort__cuda_host table with each call.
 *
 * Plain C, no CUDA type: streams and events travel as void *, device ordinals as int.
 */
#ifndef COHORT_GPU_CUDA_PLUGIN_H
#define COHORT_GPU_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COHORT__CUDA_PLUGIN_VERSION                                                                                    \
  4 /* 2: cohort__cuda_call.agreed; 3: cohort__cuda_rank_info.ipc_sync; 4: host.timeout_s */
#define COHORT__CUDA_PLUGIN_FILE "libcohort_cuda.so"
#define COHORT__CUDA_PLUGIN_ENTRY "cohort_cuda_plugin_v1"
/* The most ranks the IPC path serves (its kernels take every rank's pointer as a parameter). */
#define COHORT__CUDA_IPC_MAX_RANKS 8

/* What each rank says of itself at a communicator's first device collective (the path is chosen from everyone's). */
typedef struct cohort__cuda_rank_info {
  uint8_t uuid[16];   /* the GPU's UUID (the same GPU seen from two processes has the same UUID) */
  int32_t device;     /* its ordinal in this process */
  int32_t nccl;       /* 1 when the plugin could load NCCL here */
  uint64_t host_hash; /* which host (the boot id and host name): IPC needs one host */
  int32_t pid;
  int32_t ipc_sync; /* COHORT__CUDA_IPC_SYNC_*: where this rank wants the IPC path's waits (COHORT_GPU_IPC_SYNC) */
} cohort__cuda_rank_info;

/* Where the IPC path's ranks wait for each other: their streams at flags in shared host memory (so that a stream-
 * ordered call returns once queued), or the host. One rank asking for the host puts every rank there. */
#define COHORT__CUDA_IPC_SYNC_DEVICE 0
#define COHORT__CUDA_IPC_SYNC_HOST 1

typedef enum cohort__cuda_path {
  COHORT__CUDA_PATH_NONE = 0,
  COHORT__CUDA_PATH_NCCL = 1,
  COHORT__CUDA_PATH_IPC = 2,
  COHORT__CUDA_PATH_STAGED = 3,
} cohort__cuda_path;

/* The host side's frames, under the call the host side has set (so every frame is checked against the peer's call:
 * a rank that runs another collective, or the same with other arguments, is a mismatch before any data moves). */
typedef struct cohort__cuda_host {
  void *ctx;
  int rank, size;
  cohort_status (*send)(void *ctx, int peer, const void *buf, size_t bytes);
  cohort_status (*recv)(void *ctx, int peer, void *buf, size_t bytes);
  /* Checks the links without waiting: a peer that died or aborted fails it (the NCCL path's watchdog). */
  cohort_status (*poll)(void *ctx);
  /* COHORT_OP_TIMEOUT: how long a wait of the plugin's on the peers (a flag, NCCL's progress) may last before it fails
   * with COHORT_ERR_TIMEOUT; 0: no limit. */
  double timeout_s;
} cohort__cuda_host;

/* One device collective. Counts as in cohort.h (per rank for allgather and reduce_scatter). */
typedef struct cohort__cuda_call {
  int coll; /* cohort__coll (transport/call.h): allreduce, broadcast, allgather, reduce_scatter */
  const void *sendbuf;
  void *recvbuf;
  size_t count;
  cohort_dtype dtype;
  cohort_op op;
  int root;
  void *stream; /* the caller's stream (NULL: the legacy default stream) */
  void *ready;  /* an event of the plugin's (record_ready) after which the input is ready, or NULL: stream's work */
  int wait;     /* 1: return once the result is in place; 0 (NCCL): once the work is queued on stream */
  int agreed;   /* 1: the ranks compared this call before it came here (coll/agree.c, COHORT_CALL_CHECK) */
} cohort__cuda_call;

typedef struct cohort__cuda_comm cohort__cuda_comm;

typedef struct cohort__cuda_api {
  int version; /* COHORT__CUDA_PLUGIN_VERSION */
  /* This thread's message of the plugin's last failure. */
  const char *(*last_error)(void);
  /* Whether the process sees a GPU: COHORT_OK, or the reason (no driver, no device) as an error. */
  cohort_status (*available)(void);
  /* The device that holds ptr (>= 0), or -1 for host memory of any kind (pageable, pinned, managed). */
  int (*device_of)(const void *ptr);
  /* What this rank says of itself for device (see cohort__cuda_rank_info). */
  cohort_status (*rank_info)(int device, cohort__cuda_rank_info *out);

  /* Records an event on stream (the caller's thread, when an asynchronous call is issued) and returns it. */
  cohort_status (*record_ready)(int device, void *stream, void **event);
  /* Waits on the host for an event of record_ready (NULL: for stream), then gives the event back. */
  cohort_status (*wait_ready)(int device, void *event, void *stream);
  void (*release_ready)(void *event);

  /* The device communicator of one path among the ranks of host (collective: every rank calls it at the same
   * point of its call sequence). infos: every rank's cohort__cuda_rank_info, indexed by rank. */
  cohort_status (*comm_create)(cohort__cuda_path path, int device, const cohort__cuda_rank_info *infos,
                               const cohort__cuda_host *host, cohort__cuda_comm **out);
  /* Runs one collective on comm (its path's way); the host side has set the call already. */
  cohort_status (*run)(cohort__cuda_comm *comm, const cohort__cuda_call *call, const cohort__cuda_host *host);
  /* Any thread: makes comm's work in flight and every later run fail (NCCL: ncclCommAbort; IPC: its flags are
   * forced), so nothing waits on the device for a rank that is gone. */
  void (*abort)(cohort__cuda_comm *comm);
  void (*comm_destroy)(cohort__cuda_comm *comm);

  /* The staged path's tools: page-locked host memory, and copies between device and host on stream, waited for. */
  void *(*host_alloc)(size_t bytes);
  void (*host_free)(void *ptr);
  cohort_status (*copy)(int device, void *dst, const void *src, size_t bytes, void *stream);
} cohort__cuda_api;

typedef const cohort__cuda_api *(*cohort__cuda_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
