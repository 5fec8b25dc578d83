/*
 * layers.cu: the model's layers on the GPU, forward and backward: conv2d on cuDNN, linear on cuBLAS, the rest on the
 * kernels of kernels.cu. A ReLU right after a conv2d or linear layer is applied by that layer's bias kernel and its
 * mask by the bias-gradient kernel (one pass each instead of two), as the CPU reference fuses them.
 *
 * Convolutions run in true float32 (CUDNN_FMA_MATH: no TF32), so that results stay within float32's error of the CPU
 * reference and of torch with allow_tf32 off. The algorithm of each convolution and direction is the fastest one
 * cudnnFind*AlgorithmEx measures for the batch size (once per size, in nnc_plan_get), among those that fit the fixed
 * workspace.
 *
 * Row-major [n, features] matrices are column-major [features, n] to cuBLAS, so for y = x W^T + b (W: [out, in]):
 *   forward  y^T  = W^T(op T of W's column-major [in, out]) x^T      gemm(T, N, out, n, in)
 *   dx       dx^T = W dy^T                                             gemm(N, N, in, n, out)
 *   dW       dW^T = x^T dy                                             gemm(N, T, in, out, n)
 */
#include <stdio.h>
#include <string.h>

#include "nn_cuda/internal.h"

const char *nnc_kind_name(cohort_layer_kind k) {
  switch (k) {
  case COHORT_LAYER_LINEAR:
    return "linear";
  case COHORT_LAYER_CONV2D:
    return "conv2d";
  case COHORT_LAYER_MAXPOOL2D:
    return "maxpool2d";
  case COHORT_LAYER_RELU:
    return "relu";
  case COHORT_LAYER_DROPOUT:
    return "dropout";
  case COHORT_LAYER_BATCHNORM2D:
    return "batchnorm2d";
  case COHORT_LAYER_FLATTEN:
    return "flatten";
  }
  return "?";
}

/* A "what" string naming the layer, for error messages. */
static const char *where(const nnc_layer *l, const char *what) {
  static __thread char buf[160];
  snprintf(buf, sizeof buf, "%s (layer %s, %s)", what, l->info.name ? l->info.name : "?", nnc_kind_name(l->info.kind));
  return buf;
}

static int alloc_floats(float **p, size_t n, const char *what) {
  NNC_CUDA(cudaMalloc((void **)p, (n ? n : 1) * sizeof(float)), what);
  return 0;
}

int nnc_layers_setup(cohort__nnc_net *net) {
  const cohort__nnc_net_desc *d = &net->desc;
  int c = d->channels, h = d->height, w = d->width;
  const size_t max_n = (size_t)d->max_batch;
  float *prev_y = net->x, *prev_dy = net->dx;
  net->nlayers = d->nlayers;
  for (int i = 0; i < d->nlayers; i++) {
    nnc_layer *l = &net->layers[i];
    memset(l, 0, sizeof *l);
    l->info = d->layers[i];
    l->in_c = c;
    l->in_h = h;
    l->in_w = w;
    l->in_per = (size_t)c * h * w;
    switch (l->info.kind) {
    case COHORT_LAYER_CONV2D: {
      const int k = l->info.kernel, s = l->info.stride, p = l->info.padding;
      if (l->info.in_channels != c || h + 2 * p < k || w + 2 * p < k)
        return nnc_fail("layer %s (conv2d): expects %d channels of at least %dx%d, gets %dx%dx%d", l->info.name,
                        l->info.in_channels, k - 2 * p, k - 2 * p, c, h, w);
      l->out_c = l->info.out_channels;
      l->out_h = (h + 2 * p - k) / s + 1;
      l->out_w = (w + 2 * p - k) / s + 1;
      NNC_CUDNN(cudnnCreateFilterDescriptor(&l->filter), where(l, "filter descriptor"));
      NNC_CUDNN(cudnnSetFilter4dDescriptor(l->filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l->out_c, c, k, k),
                where(l, "filter descriptor"));
      NNC_CUDNN(cudnnCreateConvolutionDescriptor(&l->conv), where(l, "convolution descriptor"));
      NNC_CUDNN(cudnnSetConvolution2dDescriptor(l->conv, p, p, s, s, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                where(l, "convolution descriptor"));
      NNC_CUDNN(cudnnSetConvolutionMathType(l->conv, CUDNN_FMA_MATH), where(l, "convolution math type"));
      break;
    }
    case COHORT_LAYER_LINEAR:
      if ((size_t)l->info.in_features != l->in_per)
        return nnc_fail("layer %s (linear): expects %d features, gets %zu", l->info.name, l->info.in_features,
                        l->in_per);
      l->out_c = l->info.out_features;
      l->out_h = l->out_w = 1;
      break;
    case COHORT_LAYER_MAXPOOL2D:
      if (h < l->info.kernel || w < l->info.kernel || l->info.kernel > 16 || l->info.stride < 1)
        return nnc_fail("layer %s (maxpool2d): kernel %d, stride %d on %dx%d input: not supported", l->info.name,
                        l->info.kernel, l->info.stride, h, w);
      l->out_c = c;
      l->out_h = (h - l->info.kernel) / l->info.stride + 1;
      l->out_w = (w - l->info.kernel) / l->info.stride + 1;
      break;
    case COHORT_LAYER_RELU:
      l->out_c = c;
      l->out_h = h;
      l->out_w = w;
      l->passthrough = i > 0 && net->layers[i - 1].fuse_relu;
      break;
    case COHORT_LAYER_FLATTEN:
      l->out_c = c * h * w;
      l->out_h = l->out_w = 1;
      l->passthrough = 1;
      break;
    case COHORT_LAYER_DROPOUT:
    case COHORT_LAYER_BATCHNORM2D:
      return nnc_fail("layer %s (%s) does not run on cuda yet (the GPU runs conv2d, linear, relu, maxpool2d and "
                      "flatten): train this model with --device cpu",
                      l->info.name, nnc_kind_name(l->info.kind));
    }
    /* The ReLU that follows a conv2d or linear layer is done by it. */
    if ((l->info.kind == COHORT_LAYER_CONV2D || l->info.kind == COHORT_LAYER_LINEAR) && i + 1 < d->nlayers &&
        d->layers[i + 1].kind == COHORT_LAYER_RELU)
      l->fuse_relu = 1;
    l->out_per = (size_t)l->out_c * l->out_h * l->out_w;
    if (l->info.num_params) {
      const int p = l->info.first_param;
      l->w = net->params + net->tensors.off[p];
      l->gw = net->grads + net->tensors.off[p];
      if (l->info.num_params > 1) {
        l->b = net->params + net->tensors.off[p + 1];
        l->gb = net->grads + net->tensors.off[p + 1];
      }
    }
    if (l->passthrough) {
      l->y = prev_y;
      l->dy = prev_dy;
    } else {
      NNC_TRY(alloc_floats(&l->y, max_n * l->out_per, where(l, "output activations")));
      NNC_TRY(alloc_floats(&l->dy, max_n * l->out_per, where(l, "output gradient")));
    }
    if (l->info.kind == COHORT_LAYER_MAXPOOL2D)
      NNC_CUDA(cudaMalloc((void **)&l->argmax, max_n * l->out_per), where(l, "pooling winners"));
    prev_y = l->y;
    prev_dy = l->dy;
    c = l->out_c;
    h = l->out_h;
    w = l->out_w;
  }
  int widest = 1;
  for (int i = 0; i < net->nlayers; i++)
    if (net->layers[i].info.num_params && net->layers[i].out_c > widest) widest = net->layers[i].out_c;
  NNC_TRY(alloc_floats(&net->bias_partial, (size_t)widest * NNC_BIAS_PARTS, "bias gradient partial sums"));
  if ((size_t)c * h * w != (size_t)d->classes)
    return nnc_fail("the model's last layer gives %d x %d x %d outputs, the net was described with %d classes", c, h, w,
                    d->classes);
  /* The last layer's dy receives the loss gradient: it must be memory of its own, not the input's. */
  if (net->layers[d->nlayers - 1].dy == NULL || net->layers[d->nlayers - 1].dy == net->dx)
    return nnc_fail("the model computes nothing (its last layer aliases the input)");
  return 0;
}

void nnc_layers_free(cohort__nnc_net *net) {
  for (int i = 0; i < net->nlayers; i++) {
    nnc_layer *l = &net->layers[i];
    if (!l->passthrough) {
      cudaFree(l->y);
      cudaFree(l->dy);
    }
    cudaFree(l->argmax);
    if (l->filter) cudnnDestroyFilterDescriptor(l->filter);
    if (l->conv) cudnnDestroyConvolutionDescriptor(l->conv);
  }
  for (int i = 0; i < net->plans_n; i++)
    for (int k = 0; k < net->nlayers; k++) {
      if (net->plans[i].conv[k].x) cudnnDestroyTensorDescriptor(net->plans[i].conv[k].x);
      if (net->plans[i].conv[k].y) cudnnDestroyTensorDescriptor(net->plans[i].conv[k].y);
    }
}

/* The input of layer i and the gradient buffer of that input (NULL: not needed): the output of the nearest layer
 * before it that computes something, else the batch x (which evaluation points at the test set itself) and dx. */
static const float *input_of(const cohort__nnc_net *net, int i, const float *x) {
  for (int j = i - 1; j >= 0; j--)
    if (!net->layers[j].passthrough) return net->layers[j].y;
  return x;
}
static float *input_grad_of(const cohort__nnc_net *net, int i) {
  for (int j = i - 1; j >= 0; j--)
    if (!net->layers[j].passthrough) return net->layers[j].dy;
  return net->dx;
}

static int set_math(const nnc_layer *l, cudnnMathType_t m) {
  NNC_CUDNN(cudnnSetConvolutionMathType(l->conv, m), where(l, "convolution math type"));
  return 0;
}

/* cuDNN's measured choice: the first (fastest) result that succeeded, preferring plain FMA math. */
#define PICK(results, count, out_algo, out_math, out_ws)                                                               \
  do {                                                                                                                 \
    int chosen_ = -1;                                                                                                  \
    for (int r_ = 0; r_ < (count) && chosen_ < 0; r_++)                                                                \
      if ((results)[r_].status == CUDNN_STATUS_SUCCESS && (results)[r_].mathType == CUDNN_FMA_MATH) chosen_ = r_;      \
    for (int r_ = 0; r_ < (count) && chosen_ < 0; r_++)                                                                \
      if ((results)[r_].status == CUDNN_STATUS_SUCCESS) chosen_ = r_;                                                  \
    if (chosen_ < 0)                                                                                                   \
      return nnc_fail("%s: cuDNN found no algorithm that runs in %u MiB", what, NNC_CUDNN_WORKSPACE >> 20);            \
    (out_algo) = (results)[chosen_].algo;                                                                              \
    (out_math) = (results)[chosen_].mathType;                                                                          \
    (out_ws) = (results)[chosen_].memory;                                                                              \
  } while (0)

static int plan_conv(cohort__nnc_net *net, int i, int n, nnc_conv_plan *cp) {
  nnc_layer *l = &net->layers[i];
  const char *what;
  NNC_CUDNN(cudnnCreateTensorDescriptor(&cp->x), where(l, "input descriptor"));
  NNC_CUDNN(cudnnSetTensor4dDescriptor(cp->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l->in_c, l->in_h, l->in_w),
            where(l, "input descriptor"));
  NNC_CUDNN(cudnnCreateTensorDescriptor(&cp->y), where(l, "output descriptor"));
  NNC_CUDNN(cudnnSetTensor4dDescriptor(cp->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l->out_c, l->out_h, l->out_w),
            where(l, "output descriptor"));
  int oc, oh, ow, on;
  NNC_CUDNN(cudnnGetConvolution2dForwardOutputDim(l->conv, cp->x, l->filter, &on, &oc, &oh, &ow),
            where(l, "output shape"));
  if (on != n || oc != l->out_c || oh != l->out_h || ow != l->out_w)
    return nnc_fail("%s: cuDNN's output %dx%dx%dx%d differs from the layer's %dx%dx%dx%d",
                    where(l, "convolution shape"), on, oc, oh, ow, n, l->out_c, l->out_h, l->out_w);
  const float *x = input_of(net, i, net->x);
  int found = 0;
  NNC_TRY(set_math(l, CUDNN_FMA_MATH)); /* what Find measures: a previous plan may have left another */
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  what = where(l, "choosing the forward algorithm");
  NNC_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(net->dnn, cp->x, x, l->filter, l->w, l->conv, cp->y, l->y,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, fwd, net->cudnn_ws,
                                                   NNC_CUDNN_WORKSPACE),
            what);
  PICK(fwd, found, cp->fwd, cp->fwd_math, cp->fwd_ws);
  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  what = where(l, "choosing the filter-gradient algorithm");
  NNC_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(net->dnn, cp->x, x, cp->y, l->dy, l->conv, l->filter, l->gw,
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, bf,
                                                          net->cudnn_ws, NNC_CUDNN_WORKSPACE),
            what);
  PICK(bf, found, cp->bwd_filter, cp->bwd_filter_math, cp->bwd_filter_ws);
  float *dx = input_grad_of(net, i);
  if (dx) {
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    what = where(l, "choosing the input-gradient algorithm");
    NNC_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(net->dnn, l->filter, l->w, cp->y, l->dy, l->conv, cp->x, dx,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, bd,
                                                          net->cudnn_ws, NNC_CUDNN_WORKSPACE),
              what);
    PICK(bd, found, cp->bwd_data, cp->bwd_data_math, cp->bwd_data_ws);
  }
  return 0;
}

int nnc_plan_get(cohort__nnc_net *net, int n, nnc_plan **out) {
  for (int i = 0; i < net->plans_n; i++)
    if (net->plans[i].n == n) {
      *out = &net->plans[i];
      return 0;
    }
  if (n < 1 || n > net->desc.max_batch)
    return nnc_fail("a batch of %d images: the net holds 1 to %d", n, net->desc.max_batch);
  if (net->plans_n == NNC_MAX_PLANS) return nnc_fail("more than %d batch sizes in one run", NNC_MAX_PLANS);
  nnc_plan *p = &net->plans[net->plans_n++];
  memset(p, 0, sizeof *p);
  p->n = n;
  /* Find* runs the candidates on the handle's stream: the net's, outside any capture. */
  for (int i = 0; i < net->nlayers; i++)
    if (net->layers[i].info.kind == COHORT_LAYER_CONV2D) NNC_TRY(plan_conv(net, i, n, &p->conv[i]));
  NNC_CUDA(cudaStreamSynchronize(net->stream), "choosing the convolution algorithms");
  *out = p;
  return 0;
}

static int conv_forward(cohort__nnc_net *net, const nnc_layer *l, const nnc_conv_plan *cp, const float *x, int n) {
  const float one = 1.0f, zero = 0.0f;
  NNC_TRY(set_math(l, cp->fwd_math));
  NNC_CUDNN(cudnnConvolutionForward(net->dnn, &one, cp->x, x, l->filter, l->w, l->conv, cp->fwd, net->cudnn_ws,
                                    cp->fwd_ws, &zero, cp->y, l->y),
            where(l, "forward"));
  return nnc_bias_act(net->stream, l->y, l->b, n, l->out_c, l->out_h * l->out_w, l->fuse_relu);
}

static int conv_backward(cohort__nnc_net *net, const nnc_layer *l, const nnc_conv_plan *cp, const float *x, float *dx,
                         int n) {
  const float one = 1.0f, zero = 0.0f;
  NNC_TRY(nnc_bias_grad(net->stream, l->dy, l->fuse_relu ? l->y : NULL, n, l->out_c, l->out_h * l->out_w, l->gb,
                        net->bias_partial));
  NNC_TRY(set_math(l, cp->bwd_filter_math));
  NNC_CUDNN(cudnnConvolutionBackwardFilter(net->dnn, &one, cp->x, x, cp->y, l->dy, l->conv, cp->bwd_filter,
                                           net->cudnn_ws, cp->bwd_filter_ws, &zero, l->filter, l->gw),
            where(l, "filter gradient"));
  if (dx) {
    NNC_TRY(set_math(l, cp->bwd_data_math));
    NNC_CUDNN(cudnnConvolutionBackwardData(net->dnn, &one, l->filter, l->w, cp->y, l->dy, l->conv, cp->bwd_data,
                                           net->cudnn_ws, cp->bwd_data_ws, &zero, cp->x, dx),
              where(l, "input gradient"));
  }
  return 0;
}

static int linear_forward(cohort__nnc_net *net, const nnc_layer *l, const float *x, int n) {
  const float one = 1.0f, zero = 0.0f;
  const int in = l->info.in_features, out = l->info.out_features;
  NNC_CUBLAS(cublasSgemm(net->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, l->w, in, x, in, &zero, l->y, out),
             where(l, "forward"));
  return nnc_bias_act(net->stream, l->y, l->b, n, out, 1, l->fuse_relu);
}

static int linear_backward(cohort__nnc_net *net, const nnc_layer *l, const float *x, float *dx, int n) {
  const float one = 1.0f, zero = 0.0f;
  const int in = l->info.in_features, out = l->info.out_features;
  NNC_TRY(nnc_bias_grad(net->stream, l->dy, l->fuse_relu ? l->y : NULL, n, out, 1, l->gb, net->bias_partial));
  NNC_CUBLAS(cublasSgemm(net->blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, l->dy, out, &zero, l->gw, in),
             where(l, "weight gradient"));
  if (dx)
    NNC_CUBLAS(cublasSgemm(net->blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, l->w, in, l->dy, out, &zero, dx, in),
               where(l, "input gradient"));
  return 0;
}

int nnc_forward(cohort__nnc_net *net, const nnc_plan *plan, const float *x, int n) {
  for (int i = 0; i < net->nlayers; i++) {
    const nnc_layer *l = &net->layers[i];
    const float *in = input_of(net, i, x);
    if (l->passthrough) {
      if (net->marks) NNC_CUDA(cudaEventRecord(net->marks[NNC_MARK_FWD + i], net->stream), "profiling: an event");
      continue;
    }
    switch (l->info.kind) {
    case COHORT_LAYER_CONV2D:
      NNC_TRY(conv_forward(net, l, &plan->conv[i], in, n));
      break;
    case COHORT_LAYER_LINEAR:
      NNC_TRY(linear_forward(net, l, in, n));
      break;
    case COHORT_LAYER_MAXPOOL2D:
      NNC_TRY(nnc_maxpool_forward(net->stream, l, in, n));
      break;
    case COHORT_LAYER_RELU:
      NNC_TRY(nnc_relu_forward(net->stream, in, l->y, (size_t)n * l->out_per));
      break;
    default:
      return nnc_fail("%s: no forward on the GPU", where(l, "forward"));
    }
    if (net->marks) NNC_CUDA(cudaEventRecord(net->marks[NNC_MARK_FWD + i], net->stream), "profiling: an event");
  }
  return 0;
}

int nnc_backward(cohort__nnc_net *net, const nnc_plan *plan, const float *x, int n) {
  return nnc_backward_layers(net, plan, x, n, net->nlayers - 1, 0);
}

int nnc_backward_layers(cohort__nnc_net *net, const nnc_plan *plan, const float *x, int n, int from, int to) {
  for (int i = from; i >= to; i--) {
    const nnc_layer *l = &net->layers[i];
    const float *in = input_of(net, i, x);
    float *dx = input_grad_of(net, i);
    if (l->passthrough) {
      if (net->marks) NNC_CUDA(cudaEventRecord(net->marks[NNC_MARK_BWD(net) + i], net->stream), "profiling: an event");
      continue;
    }
    switch (l->info.kind) {
    case COHORT_LAYER_CONV2D:
      NNC_TRY(conv_backward(net, l, &plan->conv[i], in, dx, n));
      break;
    case COHORT_LAYER_LINEAR:
      NNC_TRY(linear_backward(net, l, in, dx, n));
      break;
    case COHORT_LAYER_MAXPOOL2D:
      if (dx) NNC_TRY(nnc_maxpool_backward(net->stream, l, dx, n));
      break;
    case COHORT_LAYER_RELU:
      if (dx) NNC_TRY(nnc_relu_backward(net->stream, l->y, l->dy, dx, (size_t)n * l->out_per));
      break;
    default:
      return nnc_fail("%s: no backward on the GPU", where(l, "backward"));
    }
    if (net->marks) NNC_CUDA(cudaEventRecord(net->marks[NNC_MARK_BWD(net) + i], net->stream), "profiling: an event");
  }
  return 0;
}

const float *nnc_logits(const cohort__nnc_net *net) { return net->layers[net->nlayers - 1].y; }
float *nnc_dlogits(const cohort__nnc_net *net) { return net->layers[net->nlayers - 1].dy; }
