/*
 * layer.h: the private interface between the sequential model (model.c) and its layers (one file per kind).
 *
 * A layer is a table of functions plus one struct holding every kind's configuration and its cached activations.
 * The model owns the parameters; a layer refers to its own by index (pidx, bidx) into the model's tables, so the
 * tables can be reallocated without touching layers. A layer owns its output buffer y, the gradient of its input
 * dx, and an aux buffer (argmax indices, dropout mask, batch statistics, im2col columns) sized by the model.
 *
 * Backward writes dx (when dx is not NULL: the first layer's input needs no gradient) and adds into the parameter
 * gradients; it calls ready() for each of its parameters, highest index first, as soon as that gradient is final,
 * before computing dx, so that communication can start as early as possible.
 *
 * Thread-safety: none; a layer belongs to its model.
 */
#ifndef COHORT_NN_LAYER_H
#define COHORT_NN_LAYER_H

#include "cohort/nn.h"
#include "core/error.h"

typedef struct cohort__layer cohort__layer;

/* blas.c: logs once, at the first model, when OpenBLAS runs kernels below what the CPU can run. */
void cohort__blas_warn_once(void);
/* BLAS threads of a process that did not choose (cohort_nn_set_threads): SLURM_CPUS_PER_TASK in a task of a Slurm
 * step (the CPUs Slurm gave it), else 1. */
int cohort__nn_default_threads(void);

/* What a layer may touch during forward and backward. */
typedef struct cohort__nnctx {
  cohort_param *params;
  cohort_param *buffers;
  int training;
  cohort_rng *rng;
  void (*ready)(void *arg, int param_index);
  void *ready_arg;
  /* SyncBatchNorm (NULL: per-replica statistics). A layer whose sync fails records the status here and returns;
   * the model checks it after every layer, since forward and backward themselves cannot fail. */
  cohort_batchnorm_sync_fn bn_sync;
  void *bn_sync_user;
  cohort_status status;
  /* The layout of the layer's input x (and of the dx it writes): NULL for plain row-major NCHW / [N, features];
   * otherwise the previous layer's backend's description of its output (backend.h, "Layouts"). */
  const void *x_layout;
} cohort__nnctx;

typedef struct cohort__layer_ops {
  const char *kind;
  /* Output shape for input x; an error names the layer and what did not fit. */
  cohort_status (*out_shape)(const cohort__layer *l, const cohort_tensor *x, cohort_tensor *y);
  /* Floats of aux scratch this layer needs for input x (0 if none). */
  size_t (*aux_floats)(const cohort__layer *l, const cohort_tensor *x);
  void (*forward)(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y);
  void (*backward)(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                   float *dx);
  /* Layers whose output is their input reshaped (flatten): y and dx alias x and dy, nothing is computed. */
  int alias;
} cohort__layer_ops;

struct cohort__layer {
  const cohort__layer_ops *ops;
  char name[48];
  int pidx, nparams;  /* first parameter index and count */
  int bidx, nbuffers; /* first buffer index and count */
  /* configuration (each kind reads its own fields) */
  int in_features, out_features;          /* linear */
  int cin, cout, kernel, stride, padding; /* conv2d, maxpool2d (kernel, stride) */
  float p;                                /* dropout */
  /* ReLU fusion (decided by cohort_model_init): a conv2d or linear layer with fuse_relu applies the ReLU that
   * follows it to its own output while it is still in cache, and masks dy in place in backward; the ReLU layer
   * itself is then a passthrough. Only done when a layer with a gradient buffer of its own comes later, so that
   * the dy being masked is the library's, never the caller's grad_output. */
  int fuse_relu, passthrough;
  float eps, momentum; /* batchnorm2d */
  /* The kernels (backend.h): NULL runs ops->forward and ops->backward, the reference; otherwise the model's backend
   * bound its own for this layer, with its state (created on first use, released by the backend). */
  const struct cohort__kernels *kern;
  void *state;
  /* NULL: y (and the dy that backward receives) is plain row-major; else the backend's description of its layout,
   * set by the kernels' forward. Only when layout_free: the next computing layer runs on the same backend's kernels
   * and takes its input in that backend's layouts. */
  const void *y_layout;
  int layout_free;
  /* Set at binding where a fused ReLU is followed by a max pooling whose kernels can undo the ReLU in its backward
   * (backend.h, masks_relu): relu_masked on the layer that fuses the ReLU (its backward then leaves dy as it is),
   * mask_relu on the pooling (its backward writes dx already masked). */
  int relu_masked, mask_relu;
  /* buffers owned by the layer, grown as the batch grows */
  cohort_tensor y;
  size_t y_cap;
  float *dx;
  size_t dx_cap;
  float *aux;
  size_t aux_cap;
};

/* Constructors fill ops and configuration; the model assigns names and parameter slots. */
extern const cohort__layer_ops cohort__linear_ops;
extern const cohort__layer_ops cohort__conv2d_ops;
extern const cohort__layer_ops cohort__maxpool2d_ops;
extern const cohort__layer_ops cohort__relu_ops;
extern const cohort__layer_ops cohort__dropout_ops;
extern const cohort__layer_ops cohort__batchnorm2d_ops;
extern const cohort__layer_ops cohort__flatten_ops;

/* Sets y's shape fields from ndim and shape (numel too); data untouched. */
void cohort__tensor_set_shape(cohort_tensor *t, int ndim, const int64_t *shape);

/* Fan-in and fan-out of a weight as PyTorch computes them (dim 1 * receptive field, dim 0 * receptive field). */
void cohort__fans(const cohort_param *p, double *fan_in, double *fan_out);

#endif
