/*
 * backend.h: the device seam of nn: the kernels a model's layers run on, chosen once per model.
 *
 * A layer is its shape logic and its reference kernels (layer.h: ops->forward and ops->backward, im2col + OpenBLAS
 * sgemm and plain loops, written to be read). A backend is a table that may bind other kernels to some layer kinds
 * (cohort__backend.kernels) and leaves the others on the reference; the model binds every layer when it takes a
 * backend (cohort_model_init, cohort_model_set_kernels) and calls each layer's kernels through l->kern from then
 * on. The reference is the oracle: tests/unit/test_nn_kernels.c runs every layer kind's forward and backward on
 * each backend against it within float32's gamma(k) bound, and a short training run on each against the other.
 *
 * Contract of a backend's kernels (the reference's too): the same arguments and duties as layer.h's forward and
 * backward: forward writes y; backward adds into the parameter gradients, calls ready() for each parameter as it is
 * final (highest index first), then writes dx when dx is not NULL; neither can fail except by recording a status
 * in c->status (out of memory). Any state (oneDNN's primitives per input shape, reordered weights, workspaces) hangs
 * off l->state, is made on first use, and is freed by the backend's release(); buffers the model sizes (y, dx, aux)
 * keep the sizes the layer's ops ask for.
 *
 * Layouts. Between two layers bound to the same backend, the tensor may stay in a layout of that backend's choosing
 * (oneDNN's channel-blocked nChw8c/nChw16c, which its convolution and pooling kernels run fastest on), so that it is
 * not reordered on every layer boundary. The rules, which keep every other layer on plain tensors:
 *   - the model's input and output, and every tensor a reference kernel reads or writes, are plain row-major;
 *   - l->layout_free (set by the model at binding) allows layer l to choose the layout of y; it is set only when
 *     the next layer that computes (passthrough ReLUs skipped; flatten computes nothing but reads y as plain) is
 *     bound to kernels of the same backend with takes_layouts, and y holds as many floats as the plain tensor;
 *   - forward sets l->y_layout (NULL: plain) and the next layer receives it as c->x_layout;
 *   - a tensor's gradient has the tensor's layout: backward gets dy in y's layout and writes dx in x's.
 *
 * Threads: oneDNN runs its kernels on the OpenMP runtime it was built with; enter() sets the calling thread's
 * OpenMP thread count to cohort_nn_set_threads()'s before each pass (OpenMP keeps the count per thread, and the
 * replicas of fmnist-train --replicas are threads).
 *
 * The CUDA training plugin (src/nn_cuda) is not behind this seam yet: it runs the whole model, described by
 * cohort_model_layer(), in a captured CUDA graph. It could be: a backend whose kernels keep y and dx in device
 * memory (y_layout naming device memory, under the same rules as a blocked layout: only the same backend's kernels
 * read it), whose enter() issues on the model's stream, and whose last layer's output, like any layout, comes back
 * plain for the loss; docs/architecture.md, "The nn backends".
 *
 * Thread-safety: the backend tables are constant; a layer's state belongs to its model's thread.
 */
#ifndef COHORT_NN_BACKEND_H
#define COHORT_NN_BACKEND_H

#include "nn/layer.h"

/* The kernels of one layer kind on one backend. */
typedef struct cohort__kernels {
  void (*forward)(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y);
  void (*backward)(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                   float *dx);
  int takes_layouts; /* x may come in a layout of this backend's (c->x_layout) */
  /* Max pooling only: with l->mask_relu, backward applies the ReLU that the layer before it fused (dx = 0 where x
   * is not > 0), so that that layer need not pass over its dy again: the gradient reaches the input where the
   * window's maximum was, and that maximum is y, so the mask costs a look at y. */
  int masks_relu;
} cohort__kernels;

typedef struct cohort__backend {
  cohort_kernels id;
  const char *name; /* "reference", "onednn" */
  /* NULL when this process can run the backend, else why not ("built without oneDNN ..."). */
  const char *(*unavailable)(void);
  /* What runs, in a few words: "oneDNN 2.6.3, ISA avx2". */
  void (*describe)(char *buf, size_t len);
  /* The backend's kernels for layer l (after ReLU fusion was decided), or NULL: the reference's. */
  const cohort__kernels *(*kernels)(const cohort__layer *l);
  /* Frees l->state (NULL: the backend keeps none). */
  void (*release)(cohort__layer *l);
  /* Before each forward and backward pass, on the calling thread (NULL: nothing to do). */
  void (*enter)(void);
} cohort__backend;

extern const cohort__backend cohort__backend_reference;
extern const cohort__backend cohort__backend_onednn; /* onednn.c; a stub that says why where it is not built */

/* The SIMD family oneDNN's kernels run here, on cohort_blas_core_level()'s scale (1 SSE4.1, 2 AVX, 3 AVX2, 4 AVX-512);
 * 0 where oneDNN is not built in or cannot run. */
int cohort__onednn_isa_level(void);

/* AUTO's choice from the two levels above (blas_level 0: a core name cohort_blas_core_level() does not know). */
cohort_kernels cohort__kernels_auto_choice(int onednn_level, int blas_level);

/* The backend for a resolved kernel set (not AUTO). */
const cohort__backend *cohort__backend_of(cohort_kernels k);

/* The threads cohort_nn_set_threads() chose (1 until then). */
int cohort__nn_threads(void);

/* The layer's kernels: its backend's, or the reference in ops. */
static inline void cohort__layer_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  if (l->kern)
    l->kern->forward(l, c, x, y);
  else
    l->ops->forward(l, c, x, y);
}

static inline void cohort__layer_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x,
                                          const cohort_tensor *y, float *dy, float *dx) {
  if (l->kern)
    l->kern->backward(l, c, x, y, dy, dx);
  else
    l->ops->backward(l, c, x, y, dy, dx);
}

#endif
