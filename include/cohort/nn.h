/*
 * nn.h: the neural-network layer of the training stack: float32 tensors, layers with forward and backward, a
 * sequential model, seeded initialisation, softmax cross-entropy, SGD and AdamW, learning-rate schedules, gradient
 * clipping, and hashes of the parameters.
 *
 * Semantics follow PyTorch wherever PyTorch has an answer (init distributions, optimizer update rules, batchnorm
 * running statistics, clip_grad_norm_), so that a model trained here behaves like the same model trained there;
 * tests/golden checks this against torch numerically.
 *
 * Invariants:
 *  - Tensors are row-major, NCHW for images and [N, features] for flat data; at most 4 dims.
 *  - A model's parameters are numbered in the order the layers were added, weight before bias, and this order
 *    (and every name, e.g. "conv1.weight") is stable: it is what checkpoints, hashes and the DDP engine key on.
 *    Parameter values live in one contiguous array in that order (cohort_model_param_data()).
 *  - Gradients accumulate: backward adds into the gradient arrays, cohort_model_zero_grad() clears them.
 *  - During backward the grad hook fires exactly once per parameter, the moment its gradient is final, with
 *    strictly decreasing parameter indices (reverse layer order, bias before weight within a layer).
 *  - The same seed gives bit-identical weights on every machine (integer PRNG, no libm in the uniform path).
 *
 * Ownership: the model owns its parameters, gradients (unless rebound with cohort_model_set_grad_buffer(), in
 * which case the caller owns that memory and must keep it alive), buffers and activations. The tensor returned by
 * forward belongs to the model and stays valid until the next forward or destroy. The input passed to forward must
 * stay alive and unchanged until the matching backward returns. An optimizer keeps a pointer to its model: destroy
 * the optimizer first.
 *
 * Thread-safety: a model and its optimizer belong to one thread at a time. The grad hook runs on the thread that
 * calls backward. Different models may be used from different threads concurrently. cohort_nn_set_threads()
 * changes OpenBLAS's process-wide thread count and the count oneDNN's kernels use on each thread.
 */
#ifndef COHORT_NN_H
#define COHORT_NN_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COHORT_TENSOR_MAX_DIMS 4
/* Length of a hex SHA-256 digest plus its NUL. */
#define COHORT_HASH_HEX_LEN 65

/* ---- CPU kernels ----
 * The matrix math runs on OpenBLAS, which picks its kernels when it is loaded, by the CPU's model. On a CPU model it
 * does not know (a hypervisor may mask it) it falls back to generic SSE3 kernels several times slower than the
 * AVX2 or AVX-512 ones the CPU runs; only OPENBLAS_CORETYPE, set before the program starts, changes that. */

/* The kernels OpenBLAS runs: "Haswell", "Zen", "SkylakeX", "Prescott" (generic), ... */
COHORT_API const char *cohort_blas_corename(void);
/* The best core type this CPU's feature flags can run ("SkylakeX" for AVX-512 F/CD/BW/DQ/VL, "Haswell" for
 * AVX2+FMA, "Sandybridge" for AVX), or NULL (older CPUs, other architectures). */
COHORT_API const char *cohort_blas_best_core(void);
/* The SIMD family of a core type name: 1 SSE, 2 AVX, 3 AVX2+FMA, 4 AVX-512; 0 for a name it does not know. */
COHORT_API int cohort_blas_core_level(const char *name);
/* When the kernels `chosen` (NULL: the ones running) are of a lower family than this CPU can run, the core type to
 * ask for instead with OPENBLAS_CORETYPE; otherwise NULL. It goes by the feature flags alone: where OPENBLAS_CORETYPE
 * is set, the environment may pin it because faster kernels compute wrong results on this CPU, so do not advise
 * leaving it then (neither fmnist-train nor the library's warning does). */
COHORT_API const char *cohort_blas_better_core(const char *chosen);

/* ---- kernel sets ----
 * A model's layers run on one kernel set, chosen per model:
 *  - the reference: im2col + OpenBLAS sgemm and plain loops, written to be read; the oracle every other set is tested
 *    against (tests/unit/test_nn_kernels.c), and what the golden tests against PyTorch were written on;
 *  - oneDNN (built where libdnnl-dev is found, COHORT_DNNL): its JIT kernels for conv2d (bias and a following ReLU
 *    fused), linear (the same) and max pooling, which pick AVX2, AVX-512 or AMX code by the CPU's features when the
 *    process starts, whatever OPENBLAS_CORETYPE says; the other layer kinds run the reference's.
 * Both compute the same float32 sums in other orders: results agree within float32 rounding, not bit for bit. */
typedef enum cohort_kernels {
  COHORT_KERNELS_AUTO = 0, /* COHORT_KERNELS (docs/env.md); where that says auto: oneDNN where its ISA is wider than
                            * OpenBLAS's kernels (pinned below the CPU, or generic) or both are AVX-512, else the
                            * reference */
  COHORT_KERNELS_REFERENCE = 1,
  COHORT_KERNELS_ONEDNN = 2,
} cohort_kernels;

/* "auto", "reference" or "onednn" (NULL for another value). */
COHORT_API const char *cohort_kernels_name(cohort_kernels kernels);
/* The set a name means ("auto", "reference", "onednn"); COHORT_ERR_INVALID naming the choices otherwise. */
COHORT_API cohort_status cohort_kernels_parse(const char *name, cohort_kernels *out);
/* What `kernels` means in this process: AUTO becomes COHORT_KERNELS's choice, then the build's. COHORT_ERR_INVALID
 * with the reason for a malformed COHORT_KERNELS or a set this build or machine cannot run. */
COHORT_API cohort_status cohort_kernels_resolve(cohort_kernels kernels, cohort_kernels *out);
/* One line naming what the set runs here, e.g. "oneDNN 2.6.3, ISA avx2 (conv2d, linear, max pooling)" or
 * "reference (im2col + OpenBLAS Haswell)". Resolves AUTO first. */
COHORT_API cohort_status cohort_kernels_describe(cohort_kernels kernels, char *buf, size_t len);

/* ---- tensors ---- */

typedef struct cohort_tensor {
  int ndim;                              /* 1..COHORT_TENSOR_MAX_DIMS */
  int64_t shape[COHORT_TENSOR_MAX_DIMS]; /* unused dims are 1 */
  size_t numel;                          /* product of the used dims */
  float *data;
} cohort_tensor;

/* Allocates a zeroed tensor of the given shape; free it with cohort_tensor_free(). */
COHORT_API cohort_status cohort_tensor_alloc(cohort_tensor *t, int ndim, const int64_t *shape);
/* Frees data from cohort_tensor_alloc() and clears the struct. Safe on a cleared struct. */
COHORT_API void cohort_tensor_free(cohort_tensor *t);
/* Describes caller memory as a tensor (nothing is allocated or copied; do not cohort_tensor_free it). */
COHORT_API cohort_status cohort_tensor_wrap(cohort_tensor *t, float *data, int ndim, const int64_t *shape);

/* ---- random numbers ---- */

/* xoshiro256** seeded through splitmix64. The struct is the whole state: copy it to checkpoint it. */
typedef struct cohort_rng {
  uint64_t s[4];
} cohort_rng;

COHORT_API void cohort_rng_seed(cohort_rng *rng, uint64_t seed);
COHORT_API uint64_t cohort_rng_next(cohort_rng *rng);
/* Uniform in [0, 1) with 24 random bits (exactly representable in float). */
COHORT_API float cohort_rng_uniform(cohort_rng *rng);
/* Standard normal (Box-Muller in double). */
COHORT_API double cohort_rng_normal(cohort_rng *rng);

/* ---- models ---- */

typedef struct cohort_model cohort_model;

/* A parameter or buffer of a model. Pointers stay valid until the model is destroyed (grad: until rebound). */
typedef struct cohort_param {
  const char *name; /* "conv1.weight", "bn1.running_mean", ... */
  float *value;
  float *grad; /* NULL for buffers */
  size_t numel;
  int ndim;
  int64_t shape[COHORT_TENSOR_MAX_DIMS];
} cohort_param;

/* Called during backward when parameter param_index's gradient is final. */
typedef void (*cohort_grad_hook)(void *user, int param_index);

/* An empty model in training mode. Add layers, then cohort_model_init() before the first forward. */
COHORT_API cohort_status cohort_model_create(cohort_model **out);
COHORT_API void cohort_model_destroy(cohort_model *model);

/* Runs the model's layers on kernel set `kernels` (resolved as cohort_kernels_resolve() does) from the next forward
 * on; a new model takes AUTO's. Not between a forward and its backward (backward then fails: no forward). */
COHORT_API cohort_status cohort_model_set_kernels(cohort_model *model, cohort_kernels kernels);
/* The model's kernel set (resolved: never AUTO). */
COHORT_API cohort_kernels cohort_model_kernels(const cohort_model *model);

/* Layers, applied in the order added. Names ("conv1") prefix the parameter names; they must be unique. */
COHORT_API cohort_status cohort_model_add_linear(cohort_model *model, const char *name, int in_features,
                                                 int out_features);
COHORT_API cohort_status cohort_model_add_conv2d(cohort_model *model, const char *name, int in_channels,
                                                 int out_channels, int kernel, int stride, int padding);
/* stride 0 means stride = kernel (PyTorch's default). No padding, floor mode. */
COHORT_API cohort_status cohort_model_add_maxpool2d(cohort_model *model, int kernel, int stride);
COHORT_API cohort_status cohort_model_add_relu(cohort_model *model);
/* Inverted dropout with probability p in [0, 1]; masks come from the model's RNG (cohort_model_rng()). */
COHORT_API cohort_status cohort_model_add_dropout(cohort_model *model, float p);
/* Per-channel batch normalisation of NCHW input; momentum as in PyTorch (0.1 is PyTorch's default). */
COHORT_API cohort_status cohort_model_add_batchnorm2d(cohort_model *model, const char *name, int channels, float eps,
                                                      float momentum);
/* [N, C, H, W] -> [N, C*H*W]. */
COHORT_API cohort_status cohort_model_add_flatten(cohort_model *model);

typedef enum cohort_init_kind {
  COHORT_INIT_TORCH_DEFAULT = 0, /* PyTorch's default: weights kaiming_uniform(a=sqrt(5)), bias U(+-1/sqrt(fan_in)) */
  COHORT_INIT_KAIMING_UNIFORM,   /* He uniform (ReLU gain), bias 0 */
  COHORT_INIT_KAIMING_NORMAL,    /* He normal (ReLU gain), bias 0 */
  COHORT_INIT_XAVIER_UNIFORM,    /* Glorot uniform, bias 0 */
  COHORT_INIT_XAVIER_NORMAL,     /* Glorot normal, bias 0 */
} cohort_init_kind;

/*
 * Allocates the parameters and initialises them from an RNG seeded with seed, drawing in parameter order; sets
 * batchnorm to weight 1, bias 0, running mean 0, running var 1; zeroes the gradients; seeds the dropout RNG from
 * seed as well. May be called again to re-initialise. No layers can be added after it.
 */
COHORT_API cohort_status cohort_model_init(cohort_model *model, cohort_init_kind kind, uint64_t seed);
/* The RNG that dropout draws from: its state is part of a checkpoint; reseed it (e.g. with the rank) if wanted. */
COHORT_API cohort_rng *cohort_model_rng(cohort_model *model);

/* Training mode (the default) uses batch statistics and dropout; eval mode uses running stats and no dropout. */
COHORT_API void cohort_model_set_training(cohort_model *model, int training);
COHORT_API int cohort_model_training(const cohort_model *model);

/* Runs every layer. *output belongs to the model (see Ownership). The batch size may change between calls. */
COHORT_API cohort_status cohort_model_forward(cohort_model *model, const cohort_tensor *input,
                                              const cohort_tensor **output);
/*
 * Back-propagates grad_output (the gradient of the loss with respect to the last forward's output, same shape)
 * and adds each parameter's gradient into its grad array, firing the grad hook as each one is final.
 */
COHORT_API cohort_status cohort_model_backward(cohort_model *model, const float *grad_output);
COHORT_API void cohort_model_zero_grad(cohort_model *model);
/* Sets (or with fn NULL clears) the grad hook. */
COHORT_API void cohort_model_set_grad_hook(cohort_model *model, cohort_grad_hook fn, void *user);
/* Cross-replica batch statistics (SyncBatchNorm): when set, batchnorm layers in training mode pass their
 * per-channel partial sums to fn, which must replace them in place with the sums over all replicas (e.g. an
 * allreduce SUM) and return COHORT_OK; a failure stops forward/backward with that status. Forward passes 2*C+1
 * sums ([sum x per channel], [sum x^2 per channel], sample count), backward 2*C ([sum dy], [sum dy*xhat]) for a
 * layer with an input gradient; every replica makes the same calls in the same order. NULL fn clears it. */
typedef cohort_status (*cohort_batchnorm_sync_fn)(void *user, double *sums, size_t count);
COHORT_API void cohort_model_set_batchnorm_sync(cohort_model *model, cohort_batchnorm_sync_fn fn, void *user);

COHORT_API int cohort_model_num_params(const cohort_model *model);
/* Parameter i in the stable order, or NULL when i is out of range or the model is not initialised. */
COHORT_API const cohort_param *cohort_model_param(const cohort_model *model, int i);
COHORT_API int cohort_model_num_buffers(const cohort_model *model);
COHORT_API const cohort_param *cohort_model_buffer(const cohort_model *model, int i);
/* All parameter values back to back in parameter order (e.g. to broadcast or checkpoint them in one go). */
COHORT_API float *cohort_model_param_data(cohort_model *model);
/* Total number of parameter elements. */
COHORT_API size_t cohort_model_param_count(const cohort_model *model);
/*
 * Makes backward write parameter i's gradient into caller memory of its numel floats (so a DDP engine can keep
 * gradients inside its buckets); NULL goes back to the model's own array. The contents are left as they are.
 */
COHORT_API cohort_status cohort_model_set_grad_buffer(cohort_model *model, int i, float *grad);

/* ---- the model's layers, described (for another backend that runs the same model, e.g. the CUDA plugin) ---- */

typedef enum cohort_layer_kind {
  COHORT_LAYER_LINEAR = 0,
  COHORT_LAYER_CONV2D = 1,
  COHORT_LAYER_MAXPOOL2D = 2,
  COHORT_LAYER_RELU = 3,
  COHORT_LAYER_DROPOUT = 4,
  COHORT_LAYER_BATCHNORM2D = 5,
  COHORT_LAYER_FLATTEN = 6,
} cohort_layer_kind;

/* One layer as it was added: its kind, its name, its configuration (each kind fills its own fields, the others are
 * 0) and which parameters and buffers are its own (indices into the model's tables). */
typedef struct cohort_layer_info {
  cohort_layer_kind kind;
  const char *name;              /* "conv1"; generated for layers added without one ("relu1") */
  int in_features, out_features; /* linear */
  int in_channels, out_channels; /* conv2d; batchnorm2d: both its channels */
  int kernel, stride, padding;   /* conv2d; maxpool2d: kernel and stride */
  float p;                       /* dropout */
  float eps, momentum;           /* batchnorm2d */
  int first_param, num_params;   /* weight then bias */
  int first_buffer, num_buffers; /* batchnorm2d's running mean and variance */
} cohort_layer_info;

COHORT_API int cohort_model_num_layers(const cohort_model *model);
/* Layer i in the order added; COHORT_ERR_INVALID when i is out of range. The name stays valid as long as model. */
COHORT_API cohort_status cohort_model_layer(const cohort_model *model, int i, cohort_layer_info *out);

/*
 * Scales all gradients so that their global L2 norm is at most max_norm (PyTorch clip_grad_norm_ semantics:
 * coefficient max_norm / (norm + 1e-6), applied only when below 1). *total_norm (may be NULL) gets the norm before
 * clipping.
 */
COHORT_API cohort_status cohort_model_clip_grad_norm(cohort_model *model, float max_norm, float *total_norm);

/* SHA-256 of every parameter's float32 bytes (little-endian) in parameter order, as lowercase hex. */
COHORT_API cohort_status cohort_model_hash(const cohort_model *model, char hex[COHORT_HASH_HEX_LEN]);
/* SHA-256 of the parameter and buffer names and shapes: equal signatures mean a checkpoint fits the model. */
COHORT_API cohort_status cohort_model_signature(const cohort_model *model, char hex[COHORT_HASH_HEX_LEN]);

/*
 * The reference CNN of the main job, the same as the anchor's (bench-anchors/torch_ddp_fmnist.py): conv1 1->32 3x3,
 * relu, conv2 32->64 3x3, relu, maxpool 2, flatten, fc1 9216->128, relu, fc2 128->10 (no dropout, as in the
 * anchor). Input [N, 1, 28, 28]. Initialised with COHORT_INIT_TORCH_DEFAULT from seed.
 */
COHORT_API cohort_status cohort_model_create_cnn(uint64_t seed, cohort_model **out);
/* flatten, fc1 in->hidden, relu, fc2 hidden->classes: input [N, ...] with in elements per sample. */
COHORT_API cohort_status cohort_model_create_mlp(uint64_t seed, int in, int hidden, int classes, cohort_model **out);

/* ---- loss ---- */

/*
 * Softmax cross-entropy of logits [N, C] against labels in [0, C), mean over the batch, computed stably
 * (log-sum-exp). *loss gets the mean; grad (may be NULL) gets d loss / d logits, N*C floats; *correct (may be
 * NULL) gets the number of rows whose argmax equals the label.
 */
COHORT_API cohort_status cohort_softmax_xent(const cohort_tensor *logits, const int32_t *labels, float *loss,
                                             float *grad, int *correct);

/* ---- optimizers ---- */

typedef struct cohort_optim cohort_optim;

typedef struct cohort_sgd_config {
  float lr;
  float momentum;     /* 0 for plain SGD */
  float dampening;    /* PyTorch's dampening; usually 0 */
  float weight_decay; /* L2 added to the gradient (coupled), as torch.optim.SGD */
  int nesterov;       /* requires momentum > 0 and dampening 0 */
  /* LARS (You et al. 2017, "Large Batch Training of Convolutional Networks"): > 0 scales each weight tensor's
   * gradient (weight decay included) by trust_coefficient * ||w|| / (||g|| + weight_decay * ||w||) before the
   * momentum, so that every layer moves by about lr * trust_coefficient of its own norm per step, whatever the scale
   * of its gradient. Tensors of one dimension (biases, batchnorm) keep the plain rule, as in the paper's practice;
   * so does a tensor whose weights or gradient are all zero. 0: plain SGD. Not with ZeRO-1 (its shards split the
   * tensors whose norms it needs). */
  float trust_coefficient;
  /* With trust_coefficient: LARC's clipping (NVIDIA apex's LARC, clip=True): the ratio is divided by lr and capped
   * at 1, so a layer never moves faster than plain SGD would move it, and no layer moves by more than about
   * trust_coefficient of its norm per step. Plain SGD wherever the rate is small for the layer. */
  int trust_clip;
} cohort_sgd_config;

typedef struct cohort_adamw_config {
  float lr;
  float beta1, beta2; /* PyTorch: 0.9, 0.999 */
  float eps;          /* PyTorch: 1e-8 */
  float weight_decay; /* decoupled; PyTorch's default is 0.01 */
} cohort_adamw_config;

/* A named array of optimizer state (e.g. "fc1.weight.momentum_buffer"), for checkpoints. */
typedef struct cohort_named_array {
  const char *name;
  float *data;
  size_t count;
} cohort_named_array;

/* The model must be initialised and must outlive the optimizer. */
COHORT_API cohort_status cohort_optim_sgd_create(cohort_model *model, const cohort_sgd_config *config,
                                                 cohort_optim **out);
COHORT_API cohort_status cohort_optim_adamw_create(cohort_model *model, const cohort_adamw_config *config,
                                                   cohort_optim **out);
COHORT_API void cohort_optim_destroy(cohort_optim *optim);
/* One update of every parameter from its current gradient. Subnormal floats (below FLT_MIN) in the gradients and
 * state count as zero during the step and results that small become zero: state decayed that far would otherwise
 * make the step tens of times slower on x86. The calling thread's floating-point mode is put back afterwards. */
COHORT_API cohort_status cohort_optim_step(cohort_optim *optim);
COHORT_API void cohort_optim_set_lr(cohort_optim *optim, float lr);
COHORT_API float cohort_optim_lr(const cohort_optim *optim);
/* Steps taken so far. Part of the state: AdamW's bias correction and SGD's first-step momentum depend on it. */
COHORT_API int64_t cohort_optim_steps(const cohort_optim *optim);
COHORT_API void cohort_optim_set_steps(cohort_optim *optim, int64_t steps);
/* State arrays in a stable order (per parameter, in parameter order); write into data to restore a checkpoint. */
COHORT_API int cohort_optim_num_states(const cohort_optim *optim);
COHORT_API const cohort_named_array *cohort_optim_state(const cohort_optim *optim, int i);

/* ---- learning-rate schedules ---- */

typedef enum cohort_lr_decay {
  COHORT_LR_CONSTANT = 0,
  COHORT_LR_COSINE, /* peak -> min_lr over total_steps - warmup_steps, then min_lr */
  COHORT_LR_STEP,   /* peak * gamma^floor((step - warmup_steps) / step_size) */
} cohort_lr_decay;

/*
 * Horovod's rule: the peak rate is base_lr * world_size, reached by a linear warmup from base_lr (the one-rank
 * rate) over warmup_steps (so with world_size 1 there is nothing to warm up); then the decay.
 */
typedef struct cohort_lr_schedule {
  float base_lr;
  int world_size;
  int64_t warmup_steps;
  cohort_lr_decay decay;
  int64_t total_steps; /* cosine */
  int64_t step_size;   /* step */
  float gamma;         /* step */
  float min_lr;        /* cosine */
} cohort_lr_schedule;

/* COHORT_ERR_INVALID with the reason when the schedule's fields do not make sense. */
COHORT_API cohort_status cohort_lr_schedule_check(const cohort_lr_schedule *schedule);
/* The rate for optimizer step `step` (0-based). */
COHORT_API float cohort_lr_schedule_at(const cohort_lr_schedule *schedule, int64_t step);

/* ---- threads ---- */

/* Threads for the kernels (n >= 1): OpenBLAS's process-wide count, and oneDNN's OpenMP count on every thread that
 * runs a model. Until called, the first model created sets 1 thread per rank. */
COHORT_API cohort_status cohort_nn_set_threads(int n);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_NN_H */
