/*
 * nn_cuda_plugin.h: the table of functions between a program that trains with cohort's nn layer (fmnist-train, the
 * GPU tests) and the training stack on CUDA, libcohort_nn_cuda.so (src/nn_cuda/).
 *
 * The program never links CUDA: it loads the plugin with dlopen when --device cuda is asked for
 * (core/plugin.c: cohort__plugin_load) and calls it only through this table. The plugin never calls libcohort by
 * symbol (fmnist-train links libcohort.a, whose symbols it does not export): the model arrives as a description
 * (cohort_layer_info, parameter sizes), parameters and optimizer state as flat host arrays in the CPU model's order,
 * and the gradient allreduce as a function pointer of the program's (cohort__nnc_comm).
 *
 * What the plugin runs: the model's layers forward and backward (cuDNN convolutions, cuBLAS matrix products, its
 * own kernels for the rest), softmax cross-entropy, and SGD (momentum, LARS/LARC) or AdamW, fused, on parameters
 * and state that live on the GPU, with the training images on the GPU too. One training step (gather the batch,
 * forward, loss, backward, update) is captured once per batch size into a CUDA graph and replayed; with several
 * ranks the allreduce between backward and the update stays outside the graphs.
 *
 * Every function returns 0, or -1 with a message naming the call and the layer in last_error() (this thread's).
 * Plain C, no CUDA type: streams travel as void *.
 *
 * Thread-safety: a net belongs to one thread at a time; different nets may be used from different threads.
 */
#ifndef COHORT_NN_CUDA_PLUGIN_H
#define COHORT_NN_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COHORT__NNC_PLUGIN_VERSION 3
#define COHORT__NNC_PLUGIN_FILE "libcohort_nn_cuda.so"
#define COHORT__NNC_PLUGIN_ENTRY "cohort_nn_cuda_plugin_v1"
/* The most parameter tensors a net may have (the optimizer's kernels take their table by value). */
#define COHORT__NNC_MAX_PARAMS 32
/* The most layers a net may have. */
#define COHORT__NNC_MAX_LAYERS 32

typedef enum cohort__nnc_optim_kind { COHORT__NNC_SGD = 0, COHORT__NNC_ADAMW = 1 } cohort__nnc_optim_kind;

/* The model and the optimizer, as the CPU side has them. */
typedef struct cohort__nnc_net_desc {
  int nlayers;
  const cohort_layer_info *layers;
  int nparams;                                /* parameter tensors, <= COHORT__NNC_MAX_PARAMS */
  size_t param_numel[COHORT__NNC_MAX_PARAMS]; /* in the model's parameter order */
  int param_ndim[COHORT__NNC_MAX_PARAMS];     /* LARS leaves tensors of one dimension alone */
  int channels, height, width;                /* one input sample */
  int classes;                                /* the last layer's outputs */
  int max_batch;                              /* the most images of one forward (training or evaluation) */
  int input_grad;                             /* 1: backward also computes d loss / d input (the tests) */
  int device_hint; /* the device is device_hint modulo the devices seen (the local rank: one GPU each if there are
                    * enough, else shared) */
  cohort__nnc_optim_kind optim;
  float momentum, dampening, weight_decay; /* SGD (weight_decay: AdamW's decoupled one too) */
  int nesterov;
  float trust_coefficient; /* SGD: LARS when > 0 */
  int trust_clip;          /* SGD: LARC */
  float beta1, beta2, eps; /* AdamW */
} cohort__nnc_net_desc;

/* The gradient allreduce of several ranks, the program's: averages count floats of device memory in place, ordered
 * on stream (a cudaStream_t): it reads them after the work queued there and the work queued after it sees the
 * result. NULL, or world 1: one rank, nothing to do. The functions return 0, or -1 with last_error(ctx). */
typedef struct cohort__nnc_comm {
  void *ctx;
  int world;
  int (*allreduce_avg)(void *ctx, float *device_buf, size_t count, void *stream);
  /* Without allreduce_avg (a libcohort without device collectives): the same on host memory; the plugin stages the
   * gradients through pinned host memory around it. */
  int (*allreduce_avg_host)(void *ctx, float *host_buf, size_t count);
  const char *(*last_error)(void *ctx);
  /* With allreduce_avg: 0, one allreduce of every gradient after backward; else gradient buckets of at most this
   * many bytes (the first, of the last layers, at most 1 MiB), each averaged on a stream of its own as soon as
   * backward has made it, while backward goes on with the layers before (DDP's overlap). */
  size_t bucket_bytes;
} cohort__nnc_comm;

typedef struct cohort__nnc_net cohort__nnc_net;

typedef struct cohort__nnc_api {
  int version; /* COHORT__NNC_PLUGIN_VERSION */
  const char *(*last_error)(void);
  /* 0 when the process sees a usable GPU; else -1 and the reason (no driver, no device, a driver too old). */
  int (*available)(void);
  /* One line: the device, the driver and the libraries (cuDNN, cuBLAS versions). */
  const char *(*describe)(void);

  /* A net on the current device for desc, parameters and optimizer state zero. Refuses (naming the layer) what it
   * cannot run yet. */
  int (*net_create)(const cohort__nnc_net_desc *desc, cohort__nnc_net **out);
  void (*net_destroy)(cohort__nnc_net *net);
  /* What the net chose (convolution algorithms, math mode), one line. */
  const char *(*net_describe)(cohort__nnc_net *net);

  /* Parameters (the model's flat array, count floats) and optimizer state (SGD: a momentum buffer per parameter;
   * AdamW: exp_avg then exp_avg_sq per parameter: cohort_optim_state's order, back to back) with the optimizer's
   * step count. The get functions wait for the work queued before them. */
  int (*set_params)(cohort__nnc_net *net, const float *host, size_t count);
  int (*get_params)(cohort__nnc_net *net, float *host, size_t count);
  int (*set_state)(cohort__nnc_net *net, const float *host, size_t count, int64_t optim_steps);
  int (*get_state)(cohort__nnc_net *net, float *host, size_t count, int64_t *optim_steps);

  /* The tests' path, outside any graph: forward of n host images (training mode) into host logits [n, classes];
   * then backward of host d loss / d logits into the host gradients (the flat parameter order) and, with
   * desc.input_grad, d loss / d input (dx may be NULL). */
  int (*forward_host)(cohort__nnc_net *net, const float *x, int n, float *logits);
  int (*backward_host)(cohort__nnc_net *net, const float *dlogits, float *grads, size_t count, float *dx);

  /* The training path. The data sets move to the GPU once (test may be NULL with ntest 0). */
  int (*set_data)(cohort__nnc_net *net, const float *train_x, const int32_t *train_y, size_t ntrain,
                  const float *test_x, const int32_t *test_y, size_t ntest);
  /* The rate of every optimizer step from step 0 (lr[s] for the step taken when s steps are done), and where the
   * schedule stands (the steps already taken: a resumed run). */
  int (*set_schedule)(cohort__nnc_net *net, const float *lr, int64_t nsteps, int64_t done);
  /* This rank's order of the training set for the epoch (dataset indices) and the position of the next batch. */
  int (*set_order)(cohort__nnc_net *net, const int64_t *indices, size_t n, size_t cursor);
  /* Queues one step of `batch` images from the order's position (which then moves on by batch), averaging the
   * gradients and the loss over comm's ranks. Returns without waiting for the GPU. */
  int (*train_step)(cohort__nnc_net *net, int batch, const cohort__nnc_comm *comm);
  /* Waits for the steps queued, then gives the sum of their losses (each the step's mean loss over the global
   * batch, as a float, summed in double) and how many, and starts a new sum. */
  int (*take_loss)(cohort__nnc_net *net, double *loss_sum, int64_t *steps);
  /* Evaluation mode over test images [lo, hi) in batches of at most max_batch: how many are classified right. */
  int (*evaluate)(cohort__nnc_net *net, size_t lo, size_t hi, int64_t *correct);
  /* Waits for everything queued. */
  int (*synchronize)(cohort__nnc_net *net);
  /* Where a step's time goes: `steps` passes of forward and backward over `batch` images at the order's position,
   * as plain launches (no graph) with an event between the parts, after one pass not counted; out gets one line:
   * microseconds per pass of the gather, each layer's forward and backward, and the loss. The parameters, the
   * optimizer state, the position and the schedule stay as they were. */
  int (*profile)(cohort__nnc_net *net, int batch, int steps, char *out, size_t len);
} cohort__nnc_api;

typedef const cohort__nnc_api *(*cohort__nnc_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
