/*
 * internal.h: what the files of the CUDA training stack share: the net's state, the error helpers and the kernels'
 * launchers. Not part of the plugin's interface (that is nn_cuda_plugin.h).
 *
 * Layout of a net on the GPU:
 *  - params: every parameter tensor back to back in the model's order (the CPU model's cohort_model_param_data);
 *    grads: the same layout plus one float, the step's mean loss, so that one allreduce averages both;
 *    state: the optimizer's arrays in cohort_optim_state's order (SGD: momentum per parameter; AdamW: exp_avg and
 *    exp_avg_sq per parameter).
 *  - Each layer owns its output y and the gradient dy of that output, sized for max_batch; layers that compute
 *    nothing (flatten, a ReLU fused into the conv2d or linear before it) alias the previous layer's.
 *  - counters: the position in the epoch's order, the schedule's step, the optimizer's step and the running loss sum,
 *    in device memory, so that a captured step reads and advances them itself and a replay needs no argument.
 *
 * Errors: every CUDA, cuBLAS and cuDNN call is checked; a failure sets this thread's message (naming the call and the
 * layer) and the function returns -1 upward.
 */
#ifndef COHORT_NN_CUDA_INTERNAL_H
#define COHORT_NN_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>

#include "nn_cuda/buckets.h"
#include "nn_cuda/nn_cuda_plugin.h"

#define NNC_MAX_LAYERS COHORT__NNC_MAX_LAYERS
#define NNC_MAX_PLANS 16
#define NNC_MAX_GRAPHS 32

/* Partial sums per tensor of LARS's norms (a fixed grid, so that the sums are the same on every rank and run). */
#define NNC_NORM_BLOCKS 64
/* The most blocks a bias gradient's channel is split over (their partial sums are then added in order). */
#define NNC_BIAS_PARTS 64
/* cuDNN's workspace: fixed, since the captured graphs hold its address; algorithms needing more are not chosen.
 * 512 MiB: at batch 1024 the fastest float32 algorithms want more than 64 MiB (0.75x torch's step with 64). */
#define NNC_CUDNN_WORKSPACE (512u << 20)
/* cuBLAS's workspace, given explicitly so that capture never makes it allocate. */
#define NNC_CUBLAS_WORKSPACE (32u << 20)

/* Sets this thread's message (printf style) and returns -1. */
int nnc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *nnc_last_error(void);

#define NNC_CUDA(call, what)                                                                                           \
  do {                                                                                                                 \
    cudaError_t nnc_e_ = (call);                                                                                       \
    if (nnc_e_ != cudaSuccess)                                                                                         \
      return nnc_fail("%s: %s failed: %s (%s)", (what), #call, cudaGetErrorName(nnc_e_), cudaGetErrorString(nnc_e_));  \
  } while (0)
#define NNC_CUBLAS(call, what)                                                                                         \
  do {                                                                                                                 \
    cublasStatus_t nnc_s_ = (call);                                                                                    \
    if (nnc_s_ != CUBLAS_STATUS_SUCCESS)                                                                               \
      return nnc_fail("%s: %s failed: %s", (what), #call, cublasGetStatusString(nnc_s_));                              \
  } while (0)
#define NNC_CUDNN(call, what)                                                                                          \
  do {                                                                                                                 \
    cudnnStatus_t nnc_s_ = (call);                                                                                     \
    if (nnc_s_ != CUDNN_STATUS_SUCCESS)                                                                                \
      return nnc_fail("%s: %s failed: %s", (what), #call, cudnnGetErrorString(nnc_s_));                                \
  } while (0)
/* After a kernel launch: a bad configuration shows here, not later. */
#define NNC_LAUNCHED(what) NNC_CUDA(cudaGetLastError(), what)
/* Propagates a -1. */
#define NNC_TRY(expr)                                                                                                  \
  do {                                                                                                                 \
    if ((expr) != 0) return -1;                                                                                        \
  } while (0)

/* The device-side counters a captured step reads and advances. */
typedef struct nnc_counters {
  long long cursor;      /* position of the next batch in the epoch's order */
  long long lr_step;     /* the schedule's step: lr[lr_step] is the next update's rate */
  long long optim_steps; /* updates taken: SGD's first momentum step, AdamW's bias correction */
  long long loss_steps;  /* steps in loss_sum */
  double loss_sum;       /* the steps' mean losses (each rounded to float, as the CPU path reports them) */
} nnc_counters;

/* The parameter tensors, by value in kernel arguments. */
typedef struct nnc_tensors {
  int n;
  long long off[COHORT__NNC_MAX_PARAMS];
  long long numel[COHORT__NNC_MAX_PARAMS];
  int layerwise[COHORT__NNC_MAX_PARAMS]; /* LARS applies (SGD with a trust coefficient, >= 2 dims) */
} nnc_tensors;

/* The optimizer's constants. */
typedef struct nnc_optim {
  int kind; /* cohort__nnc_optim_kind */
  float momentum, dampening, weight_decay, trust_coefficient;
  int nesterov, trust_clip;
  float beta1, beta2, eps;
} nnc_optim;

/* One layer as the GPU runs it. Shapes are per sample. */
typedef struct nnc_layer {
  cohort_layer_info info;
  int fuse_relu;   /* conv2d/linear: applies the ReLU that follows (whose layer is then a passthrough) */
  int passthrough; /* computes nothing: y and dy alias the previous layer's */
  int in_c, in_h, in_w, out_c, out_h, out_w;
  size_t in_per, out_per;
  float *w, *b, *gw, *gb; /* into params and grads */
  float *y, *dy;
  uint8_t *argmax; /* maxpool2d: the window's winning position */
  cudnnFilterDescriptor_t filter;
  cudnnConvolutionDescriptor_t conv;
} nnc_layer;

/* Per batch size: the convolutions' tensor descriptors and algorithms. */
typedef struct nnc_conv_plan {
  cudnnTensorDescriptor_t x, y;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  cudnnMathType_t fwd_math, bwd_data_math, bwd_filter_math;
  size_t fwd_ws, bwd_data_ws, bwd_filter_ws;
} nnc_conv_plan;

typedef struct nnc_plan {
  int n;
  int warmed; /* ran once outside a graph (lazy initialisation in cuBLAS/cuDNN happens there, not in a capture) */
  nnc_conv_plan conv[NNC_MAX_LAYERS];
} nnc_plan;

/* A captured step: part 0 the whole step (one rank), 1 the forward and backward, 2 the update (several ranks);
 * NNC_PART_BUCKET + s: the backward of bucket s's layers (several ranks, buckets), bucket 0's after the gather, the
 * forward and the loss. */
#define NNC_PART_BUCKET 16
typedef struct nnc_graph {
  int n, part;
  cudaGraphExec_t exec;
} nnc_graph;

struct cohort__nnc_net {
  cohort__nnc_net_desc desc;
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  void *cudnn_ws, *cublas_ws;
  int nlayers;
  nnc_layer layers[NNC_MAX_LAYERS];
  nnc_tensors tensors;
  nnc_optim optim;
  size_t count;       /* parameter floats */
  size_t state_count; /* optimizer state floats */
  float *params, *grads, *state;
  float *x, *dx;   /* the input batch and its gradient (desc.input_grad) */
  int32_t *labels; /* the batch's labels */
  double *norm_partial;
  float *bias_partial; /* the bias gradients' partial sums: the widest layer's channels * NNC_BIAS_PARTS */
  float *trust, *scalars;
  nnc_counters *counters;
  nnc_counters *counters_host; /* pinned */
  /* data */
  float *train_x, *test_x;
  int32_t *train_y, *test_y;
  size_t ntrain, ntest, per;
  long long *order;
  size_t order_n;
  float *lr;
  int64_t lr_n;
  long long *correct;
  float *staging; /* pinned: the gradients on their way through host memory (cohort__nnc_comm without device path) */
  /* host mirrors of the counters, to check the bounds before queueing a step */
  long long cursor_h, lr_step_h;
  int host_n; /* the batch of the last forward_host, which backward_host runs on */
  int plans_n;
  nnc_plan plans[NNC_MAX_PLANS];
  int graphs_n;
  nnc_graph graphs[NNC_MAX_GRAPHS];
  /* The buckets of the overlapped step (buckets.h), cut for buckets_for bytes (0: not cut yet); each is averaged on
   * comm_stream once its bucket_ready event has passed. */
  size_t buckets_for;
  nnc_bucket_cut buckets;
  cudaStream_t comm_stream;
  cudaEvent_t bucket_ready[NNC_MAX_BUCKETS], comm_done;
  char description[1024];
  /* While profile() runs: an event recorded after each layer's forward (mark NNC_MARK_FWD + i) and backward
   * (NNC_MARK_BWD(net) + i); NULL otherwise. */
  cudaEvent_t *marks;
};

/* profile()'s events: before the gather, after it, after each layer's forward, after the loss, after each layer's
 * backward. */
#define NNC_MARK_START 0
#define NNC_MARK_GATHER 1
#define NNC_MARK_FWD 2
#define NNC_MARK_LOSS(net) (NNC_MARK_FWD + (net)->nlayers)
#define NNC_MARK_BWD(net) (NNC_MARK_LOSS(net) + 1)
#define NNC_MARKS(net) (NNC_MARK_BWD(net) + (net)->nlayers)

/* ---- kernels.cu ---- */
int nnc_gather(cudaStream_t s, const long long *order, const nnc_counters *c, const float *xs, const int32_t *ys,
               size_t per, int n, float *x, int32_t *y);
/* y = act(y + b[channel]): y is [n, c, hw]; relu 0 or 1. */
int nnc_bias_act(cudaStream_t s, float *y, const float *b, int n, int c, int hw, int relu);
int nnc_relu_forward(cudaStream_t s, const float *x, float *y, size_t total);
int nnc_relu_backward(cudaStream_t s, const float *y, const float *dy, float *dx, size_t total);
/* db[c] = sum of dy over n and hw; with y (a fused ReLU's output), dy is first masked in place where y <= 0.
 * partial: c * NNC_BIAS_PARTS floats of scratch. */
int nnc_bias_grad(cudaStream_t s, float *dy, const float *y, int n, int c, int hw, float *db, float *partial);
int nnc_maxpool_forward(cudaStream_t s, const nnc_layer *l, const float *x, int n);
int nnc_maxpool_backward(cudaStream_t s, const nnc_layer *l, float *dx, int n);
/* Mean softmax cross-entropy of logits [n, classes] into *loss, and its gradient into dlogits. */
int nnc_softmax_xent(cudaStream_t s, const float *logits, const int32_t *labels, int n, int classes, float *dlogits,
                     float *loss);
int nnc_count_correct(cudaStream_t s, const float *logits, const int32_t *labels, int n, int classes,
                      long long *correct);

/* ---- optim.cu ---- */
/* The update: LARS norms and trust ratios when asked, then SGD or AdamW over every tensor at the scheduled rate,
 * then the counters advance (position by batch, schedule and optimizer by one, the loss in grads[count] summed). */
int nnc_optim_update(cohort__nnc_net *net, int batch);

/* ---- layers.cu ---- */
int nnc_layers_setup(cohort__nnc_net *net);
void nnc_layers_free(cohort__nnc_net *net);
/* The plan for batch n (made on first use: cuDNN's measured choice of algorithm); never during a capture. */
int nnc_plan_get(cohort__nnc_net *net, int n, nnc_plan **out);
int nnc_forward(cohort__nnc_net *net, const nnc_plan *plan, const float *x, int n);
int nnc_backward(cohort__nnc_net *net, const nnc_plan *plan, const float *x, int n);
/* The backward of layers from down to to (from >= to): a bucket's part of it. */
int nnc_backward_layers(cohort__nnc_net *net, const nnc_plan *plan, const float *x, int n, int from, int to);
const float *nnc_logits(const cohort__nnc_net *net);
/* "conv2d", "linear", ...: a layer kind's name, for messages. */
const char *nnc_kind_name(cohort_layer_kind k);
float *nnc_dlogits(const cohort__nnc_net *net);

#endif
