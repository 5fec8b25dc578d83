/*
 * net.cu: the plugin's functions (nn_cuda_plugin.h): a net's life, its parameters and state, the tests' host path,
 * and the training path with its captured steps.
 *
 * A step for batch size n is first run once as plain launches (cuBLAS and cuDNN initialise lazily there, and any
 * error is reported with its call and layer), then captured into a CUDA graph and from then on replayed: one launch
 * a step with one rank. With several ranks the allreduce in between is the program's host-synchronous call, which a
 * capture cannot hold, so the step is two graphs: forward and backward, then the update.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_cuda/internal.h"

static __thread char message[2048];

int nnc_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return -1;
}

const char *nnc_last_error(void) { return message; }

static int available(void) {
  int count = 0, driver = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaDriverGetVersion(&driver);
    /* The runtime says "insufficient driver" also where there is no driver at all: say which it is. */
    if (driver == 0)
      return nnc_fail(
          "no usable GPU: no NVIDIA driver on this machine (libcuda.so.1 does not load; cudaGetDeviceCount: "
          "%s)",
          cudaGetErrorName(e));
    return nnc_fail("no usable GPU: cudaGetDeviceCount: %s (%s); CUDA driver version %d", cudaGetErrorName(e),
                    cudaGetErrorString(e), driver);
  }
  if (count < 1) return nnc_fail("no usable GPU: the CUDA runtime sees no device");
  return 0;
}

static const char *describe(void) {
  static __thread char line[512];
  int dev = 0, driver = 0, runtime = 0;
  cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  cudaGetDevice(&dev);
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "?");
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  int blas = 0;
  cublasHandle_t h;
  if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
    cublasGetVersion(h, &blas);
    cublasDestroy(h);
  }
  snprintf(line, sizeof line, "%s (device %d, sm_%d%d, %.0f GiB), driver %d, runtime %d, cuDNN %zu, cuBLAS %d",
           prop.name, dev, prop.major, prop.minor, (double)prop.totalGlobalMem / 1073741824.0, driver, runtime,
           cudnnGetVersion(), blas);
  return line;
}

static void destroy(cohort__nnc_net *net) {
  if (!net) return;
  if (net->stream) cudaStreamSynchronize(net->stream);
  if (net->comm_stream) {
    cudaStreamSynchronize(net->comm_stream);
    cudaStreamDestroy(net->comm_stream);
  }
  for (int s = 0; s < NNC_MAX_BUCKETS; s++)
    if (net->bucket_ready[s]) cudaEventDestroy(net->bucket_ready[s]);
  if (net->comm_done) cudaEventDestroy(net->comm_done);
  for (int i = 0; i < net->graphs_n; i++)
    cudaGraphExecDestroy(net->graphs[i].exec);
  nnc_layers_free(net);
  if (net->blas) cublasDestroy(net->blas);
  if (net->dnn) cudnnDestroy(net->dnn);
  void *bufs[] = {net->cudnn_ws, net->cublas_ws, net->params,   net->grads,        net->state,
                  net->x,        net->dx,        net->labels,   net->norm_partial, net->bias_partial,
                  net->trust,    net->scalars,   net->counters, net->train_x,      net->test_x,
                  net->train_y,  net->test_y,    net->order,    net->lr,           net->correct};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    cudaFree(bufs[i]);
  cudaFreeHost(net->counters_host);
  cudaFreeHost(net->staging);
  if (net->stream) cudaStreamDestroy(net->stream);
  free(net);
}

static int create_in(cohort__nnc_net *net) {
  const cohort__nnc_net_desc *d = &net->desc;
  if (d->nlayers < 1 || d->nlayers > NNC_MAX_LAYERS || !d->layers)
    return nnc_fail("a net of %d layers: 1 to %d supported", d->nlayers, NNC_MAX_LAYERS);
  if (d->nparams < 0 || d->nparams > COHORT__NNC_MAX_PARAMS)
    return nnc_fail("%d parameter tensors: at most %d", d->nparams, COHORT__NNC_MAX_PARAMS);
  if (d->max_batch < 1 || d->channels < 1 || d->height < 1 || d->width < 1 || d->classes < 1)
    return nnc_fail("batch %d of %dx%dx%d images into %d classes: every size must be positive", d->max_batch,
                    d->channels, d->height, d->width, d->classes);
  int devices = 0;
  NNC_CUDA(cudaGetDeviceCount(&devices), "counting the devices");
  net->device = (d->device_hint < 0 ? 0 : d->device_hint) % devices;
  NNC_CUDA(cudaSetDevice(net->device), "choosing the device");
  NNC_CUDA(cudaStreamCreateWithFlags(&net->stream, cudaStreamNonBlocking), "creating the net's stream");
  NNC_CUBLAS(cublasCreate(&net->blas), "creating the cuBLAS handle");
  NNC_CUBLAS(cublasSetStream(net->blas, net->stream), "cuBLAS stream");
  NNC_CUBLAS(cublasSetMathMode(net->blas, CUBLAS_DEFAULT_MATH), "cuBLAS math mode (float32, no TF32)");
  NNC_CUDA(cudaMalloc(&net->cublas_ws, NNC_CUBLAS_WORKSPACE), "cuBLAS workspace");
  NNC_CUBLAS(cublasSetWorkspace(net->blas, net->cublas_ws, NNC_CUBLAS_WORKSPACE), "cuBLAS workspace");
  NNC_CUDNN(cudnnCreate(&net->dnn), "creating the cuDNN handle");
  NNC_CUDNN(cudnnSetStream(net->dnn, net->stream), "cuDNN stream");
  NNC_CUDA(cudaMalloc(&net->cudnn_ws, NNC_CUDNN_WORKSPACE), "cuDNN workspace");

  /* Parameter layout, and which tensors LARS scales. */
  nnc_tensors *t = &net->tensors;
  t->n = d->nparams;
  size_t off = 0;
  const int lars = d->optim == COHORT__NNC_SGD && d->trust_coefficient > 0.0f;
  for (int i = 0; i < d->nparams; i++) {
    t->off[i] = (long long)off;
    t->numel[i] = (long long)d->param_numel[i];
    t->layerwise[i] = lars && d->param_ndim[i] >= 2;
    off += d->param_numel[i];
  }
  net->count = off;
  net->optim.kind = d->optim;
  net->optim.momentum = d->momentum;
  net->optim.dampening = d->dampening;
  net->optim.weight_decay = d->weight_decay;
  net->optim.trust_coefficient = d->trust_coefficient;
  net->optim.nesterov = d->nesterov;
  net->optim.trust_clip = d->trust_clip;
  net->optim.beta1 = d->beta1;
  net->optim.beta2 = d->beta2;
  net->optim.eps = d->eps;
  net->state_count = d->optim == COHORT__NNC_ADAMW ? 2 * off : (d->momentum != 0.0f ? off : 0);

  const size_t in_floats = (size_t)d->max_batch * d->channels * d->height * d->width;
  NNC_CUDA(cudaMalloc((void **)&net->params, (off ? off : 1) * sizeof(float)), "parameters");
  NNC_CUDA(cudaMemset(net->params, 0, (off ? off : 1) * sizeof(float)), "parameters");
  NNC_CUDA(cudaMalloc((void **)&net->grads, (off + 1) * sizeof(float)), "gradients");
  NNC_CUDA(cudaMemset(net->grads, 0, (off + 1) * sizeof(float)), "gradients");
  NNC_CUDA(cudaMalloc((void **)&net->state, (net->state_count ? net->state_count : 1) * sizeof(float)),
           "optimizer state");
  NNC_CUDA(cudaMemset(net->state, 0, (net->state_count ? net->state_count : 1) * sizeof(float)), "optimizer state");
  NNC_CUDA(cudaMalloc((void **)&net->x, in_floats * sizeof(float)), "input batch");
  if (d->input_grad) NNC_CUDA(cudaMalloc((void **)&net->dx, in_floats * sizeof(float)), "input gradient");
  NNC_CUDA(cudaMalloc((void **)&net->labels, (size_t)d->max_batch * sizeof(int32_t)), "labels");
  NNC_CUDA(
      cudaMalloc((void **)&net->norm_partial, (size_t)COHORT__NNC_MAX_PARAMS * NNC_NORM_BLOCKS * 2 * sizeof(double)),
      "LARS partial sums");
  NNC_CUDA(cudaMalloc((void **)&net->trust, COHORT__NNC_MAX_PARAMS * sizeof(float)), "trust ratios");
  NNC_CUDA(cudaMalloc((void **)&net->scalars, 8 * sizeof(float)), "optimizer scalars");
  NNC_CUDA(cudaMalloc((void **)&net->counters, sizeof(nnc_counters)), "counters");
  NNC_CUDA(cudaMemset(net->counters, 0, sizeof(nnc_counters)), "counters");
  NNC_CUDA(cudaMallocHost((void **)&net->counters_host, sizeof(nnc_counters)), "counters (pinned host copy)");
  NNC_CUDA(cudaMalloc((void **)&net->correct, sizeof(long long)), "accuracy count");
  /* A constant rate of 0 until set_schedule: a step without a schedule changes nothing rather than reading garbage. */
  NNC_CUDA(cudaMalloc((void **)&net->lr, sizeof(float)), "learning rates");
  NNC_CUDA(cudaMemset(net->lr, 0, sizeof(float)), "learning rates");
  net->lr_n = 1;
  NNC_TRY(nnc_layers_setup(net));
  NNC_CUDA(cudaDeviceSynchronize(), "setting the net up");
  return 0;
}

static int net_create(const cohort__nnc_net_desc *desc, cohort__nnc_net **out) {
  *out = NULL;
  NNC_TRY(available());
  cohort__nnc_net *net = (cohort__nnc_net *)calloc(1, sizeof *net);
  if (!net) return nnc_fail("out of host memory for a net");
  net->desc = *desc;
  if (create_in(net) != 0) {
    char saved[sizeof message];
    snprintf(saved, sizeof saved, "%s", message);
    destroy(net);
    return nnc_fail("%s", saved);
  }
  *out = net;
  return 0;
}

static const char *net_describe(cohort__nnc_net *net) {
  size_t len = 0;
  net->description[0] = '\0';
  for (int p = 0; p < net->plans_n; p++)
    for (int i = 0; i < net->nlayers; i++) {
      const nnc_conv_plan *c = &net->plans[p].conv[i];
      if (net->layers[i].info.kind != COHORT_LAYER_CONV2D || len >= sizeof net->description) continue;
      len += (size_t)snprintf(net->description + len, sizeof net->description - len,
                              "%sbatch %d %s: fwd algo %d, bwd-filter %d, bwd-data %d (math %d/%d/%d)", len ? "; " : "",
                              net->plans[p].n, net->layers[i].info.name, (int)c->fwd, (int)c->bwd_filter,
                              (int)c->bwd_data, (int)c->fwd_math, (int)c->bwd_filter_math, (int)c->bwd_data_math);
    }
  if (!len) len = (size_t)snprintf(net->description, sizeof net->description, "no convolution planned yet");
  if (net->buckets.n > 1 && len < sizeof net->description) {
    len += (size_t)snprintf(
        net->description + len, sizeof net->description - len,
        "; %d gradient buckets averaged while backward goes on (floats, from the output:", net->buckets.n);
    for (int b = 0; b < net->buckets.n && len < sizeof net->description; b++)
      len += (size_t)snprintf(net->description + len, sizeof net->description - len, " %zu",
                              net->buckets.hi[b] - net->buckets.lo[b] - (b == 0));
    if (len < sizeof net->description) snprintf(net->description + len, sizeof net->description - len, ")");
  }
  return net->description;
}

/* ---- parameters and state ---- */

static int check_count(const char *what, size_t got, size_t want) {
  if (got != want) return nnc_fail("%s: %zu floats given, the net has %zu", what, got, want);
  return 0;
}

static int set_params(cohort__nnc_net *net, const float *host, size_t count) {
  NNC_TRY(check_count("setting the parameters", count, net->count));
  NNC_CUDA(cudaMemcpyAsync(net->params, host, count * sizeof(float), cudaMemcpyHostToDevice, net->stream),
           "setting the parameters");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "setting the parameters");
  return 0;
}

static int get_params(cohort__nnc_net *net, float *host, size_t count) {
  NNC_TRY(check_count("reading the parameters", count, net->count));
  NNC_CUDA(cudaMemcpyAsync(host, net->params, count * sizeof(float), cudaMemcpyDeviceToHost, net->stream),
           "reading the parameters");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "reading the parameters");
  return 0;
}

static int set_state(cohort__nnc_net *net, const float *host, size_t count, int64_t optim_steps) {
  NNC_TRY(check_count("setting the optimizer state", count, net->state_count));
  if (count)
    NNC_CUDA(cudaMemcpyAsync(net->state, host, count * sizeof(float), cudaMemcpyHostToDevice, net->stream),
             "setting the optimizer state");
  long long steps = (long long)optim_steps;
  NNC_CUDA(cudaMemcpyAsync(&net->counters->optim_steps, &steps, sizeof steps, cudaMemcpyHostToDevice, net->stream),
           "setting the optimizer's step count");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "setting the optimizer state");
  return 0;
}

static int get_state(cohort__nnc_net *net, float *host, size_t count, int64_t *optim_steps) {
  NNC_TRY(check_count("reading the optimizer state", count, net->state_count));
  if (count)
    NNC_CUDA(cudaMemcpyAsync(host, net->state, count * sizeof(float), cudaMemcpyDeviceToHost, net->stream),
             "reading the optimizer state");
  NNC_CUDA(
      cudaMemcpyAsync(net->counters_host, net->counters, sizeof(nnc_counters), cudaMemcpyDeviceToHost, net->stream),
      "reading the counters");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "reading the optimizer state");
  *optim_steps = net->counters_host->optim_steps;
  return 0;
}

/* ---- the tests' host path ---- */

static int forward_host(cohort__nnc_net *net, const float *x, int n, float *logits) {
  nnc_plan *plan;
  NNC_TRY(nnc_plan_get(net, n, &plan));
  const size_t per = (size_t)net->desc.channels * net->desc.height * net->desc.width;
  NNC_CUDA(cudaMemcpyAsync(net->x, x, (size_t)n * per * sizeof(float), cudaMemcpyHostToDevice, net->stream),
           "copying the input to the GPU");
  NNC_TRY(nnc_forward(net, plan, net->x, n));
  NNC_CUDA(cudaMemcpyAsync(logits, nnc_logits(net), (size_t)n * net->desc.classes * sizeof(float),
                           cudaMemcpyDeviceToHost, net->stream),
           "copying the logits back");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "forward (host path)");
  net->host_n = n;
  return 0;
}

static int backward_host(cohort__nnc_net *net, const float *dlogits, float *grads, size_t count, float *dx) {
  NNC_TRY(check_count("backward's gradients", count, net->count));
  const int n = net->host_n;
  if (n < 1) return nnc_fail("backward_host before forward_host");
  nnc_plan *plan;
  NNC_TRY(nnc_plan_get(net, n, &plan));
  NNC_CUDA(cudaMemcpyAsync(nnc_dlogits(net), dlogits, (size_t)n * net->desc.classes * sizeof(float),
                           cudaMemcpyHostToDevice, net->stream),
           "copying the loss gradient to the GPU");
  NNC_TRY(nnc_backward(net, plan, net->x, n));
  NNC_CUDA(cudaMemcpyAsync(grads, net->grads, count * sizeof(float), cudaMemcpyDeviceToHost, net->stream),
           "copying the gradients back");
  if (dx && net->dx) {
    const size_t per = (size_t)net->desc.channels * net->desc.height * net->desc.width;
    NNC_CUDA(cudaMemcpyAsync(dx, net->dx, (size_t)n * per * sizeof(float), cudaMemcpyDeviceToHost, net->stream),
             "copying the input gradient back");
  }
  NNC_CUDA(cudaStreamSynchronize(net->stream), "backward (host path)");
  return 0;
}

/* ---- the training path ---- */

/* Captured pointers change: the graphs that hold the old ones go. */
static void drop_graphs(cohort__nnc_net *net) {
  for (int i = 0; i < net->graphs_n; i++)
    cudaGraphExecDestroy(net->graphs[i].exec);
  net->graphs_n = 0;
}

static int upload(void **dst, const void *src, size_t bytes, const char *what) {
  NNC_CUDA(cudaMalloc(dst, bytes ? bytes : 1), what);
  if (bytes) NNC_CUDA(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice), what);
  return 0;
}

static int set_data(cohort__nnc_net *net, const float *train_x, const int32_t *train_y, size_t ntrain,
                    const float *test_x, const int32_t *test_y, size_t ntest) {
  const size_t per = (size_t)net->desc.channels * net->desc.height * net->desc.width;
  NNC_CUDA(cudaStreamSynchronize(net->stream), "replacing the data sets");
  drop_graphs(net);
  cudaFree(net->train_x);
  cudaFree(net->train_y);
  cudaFree(net->test_x);
  cudaFree(net->test_y);
  cudaFree(net->order);
  net->train_x = net->test_x = NULL;
  net->train_y = net->test_y = NULL;
  net->order = NULL;
  net->ntrain = net->ntest = 0;
  NNC_TRY(upload((void **)&net->train_x, train_x, ntrain * per * sizeof(float), "copying the training images"));
  NNC_TRY(upload((void **)&net->train_y, train_y, ntrain * sizeof(int32_t), "copying the training labels"));
  NNC_TRY(upload((void **)&net->test_x, test_x, ntest * per * sizeof(float), "copying the test images"));
  NNC_TRY(upload((void **)&net->test_y, test_y, ntest * sizeof(int32_t), "copying the test labels"));
  /* A rank's order is at most the whole set (ceil(N / world) <= N): sized once, so the graphs keep its address. */
  NNC_CUDA(cudaMalloc((void **)&net->order, (ntrain ? ntrain : 1) * sizeof(long long)), "the epoch's order");
  /* cudaMemcpy from pageable memory may return before its DMA lands: nothing on the net's stream may start before. */
  NNC_CUDA(cudaDeviceSynchronize(), "copying the data sets");
  net->ntrain = ntrain;
  net->ntest = ntest;
  net->per = per;
  net->order_n = 0;
  return 0;
}

static int set_schedule(cohort__nnc_net *net, const float *lr, int64_t nsteps, int64_t done) {
  if (nsteps < 1 || done < 0)
    return nnc_fail("a schedule of %lld steps from step %lld", (long long)nsteps, (long long)done);
  NNC_CUDA(cudaStreamSynchronize(net->stream), "replacing the schedule");
  if (nsteps > net->lr_n) {
    drop_graphs(net);
    cudaFree(net->lr);
    net->lr = NULL;
    net->lr_n = 0;
    NNC_CUDA(cudaMalloc((void **)&net->lr, (size_t)nsteps * sizeof(float)), "the learning-rate schedule");
  }
  NNC_CUDA(cudaMemcpyAsync(net->lr, lr, (size_t)nsteps * sizeof(float), cudaMemcpyHostToDevice, net->stream),
           "copying the learning-rate schedule");
  net->lr_n = nsteps;
  long long at = (long long)done;
  NNC_CUDA(cudaMemcpyAsync(&net->counters->lr_step, &at, sizeof at, cudaMemcpyHostToDevice, net->stream),
           "setting the schedule's step");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "copying the learning-rate schedule");
  net->lr_step_h = at;
  return 0;
}

static int set_order(cohort__nnc_net *net, const int64_t *indices, size_t n, size_t cursor) {
  if (!net->order) return nnc_fail("set_order before set_data");
  if (n > net->ntrain || cursor > n)
    return nnc_fail("an order of %zu indices from %zu: the training set has %zu", n, cursor, net->ntrain);
  for (size_t i = 0; i < n; i++)
    if (indices[i] < 0 || (size_t)indices[i] >= net->ntrain)
      return nnc_fail("index %lld at position %zu of the order is outside the training set of %zu",
                      (long long)indices[i], i, net->ntrain);
  /* In stream order: the steps queued before still read the previous order. */
  NNC_CUDA(cudaMemcpyAsync(net->order, indices, n * sizeof(long long), cudaMemcpyHostToDevice, net->stream),
           "copying the epoch's order");
  long long at = (long long)cursor;
  NNC_CUDA(cudaMemcpyAsync(&net->counters->cursor, &at, sizeof at, cudaMemcpyHostToDevice, net->stream),
           "setting the position in the order");
  /* The copies above read pageable host memory the caller may reuse: wait for them. */
  NNC_CUDA(cudaStreamSynchronize(net->stream), "copying the epoch's order");
  net->order_n = n;
  net->cursor_h = at;
  return 0;
}

/* The parts of a step, as launches on the net's stream. */
static int queue_forward(cohort__nnc_net *net, const nnc_plan *plan, int n) {
  NNC_TRY(
      nnc_gather(net->stream, net->order, net->counters, net->train_x, net->train_y, net->per, n, net->x, net->labels));
  NNC_TRY(nnc_forward(net, plan, net->x, n));
  return nnc_softmax_xent(net->stream, nnc_logits(net), net->labels, n, net->desc.classes, nnc_dlogits(net),
                          net->grads + net->count);
}

static int queue_forward_backward(cohort__nnc_net *net, const nnc_plan *plan, int n) {
  NNC_TRY(queue_forward(net, plan, n));
  return nnc_backward(net, plan, net->x, n);
}

static int queue_part(cohort__nnc_net *net, const nnc_plan *plan, int n, int part) {
  if (part >= NNC_PART_BUCKET) {
    const int b = part - NNC_PART_BUCKET;
    if (b == 0) NNC_TRY(queue_forward(net, plan, n));
    const int to = b + 1 < net->buckets.n ? net->buckets.top[b + 1] + 1 : 0;
    return nnc_backward_layers(net, plan, net->x, n, net->buckets.top[b], to);
  }
  if (part != 2) NNC_TRY(queue_forward_backward(net, plan, n));
  if (part != 1) NNC_TRY(nnc_optim_update(net, n));
  return 0;
}

static int capture(cohort__nnc_net *net, const nnc_plan *plan, int n, int part, cudaGraphExec_t *out) {
  cudaGraph_t graph = NULL;
  NNC_CUDA(cudaStreamBeginCapture(net->stream, cudaStreamCaptureModeThreadLocal), "starting the step's capture");
  int rc = queue_part(net, plan, n, part);
  cudaError_t e = cudaStreamEndCapture(net->stream, &graph);
  if (rc != 0) {
    if (graph) cudaGraphDestroy(graph);
    return -1;
  }
  if (e != cudaSuccess)
    return nnc_fail("capturing the step (batch %d, part %d): cudaStreamEndCapture failed: %s (%s)", n, part,
                    cudaGetErrorName(e), cudaGetErrorString(e));
  e = cudaGraphInstantiate(out, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess)
    return nnc_fail("instantiating the step's graph (batch %d, part %d): %s (%s)", n, part, cudaGetErrorName(e),
                    cudaGetErrorString(e));
  return 0;
}

static int graph_for(cohort__nnc_net *net, int n, int part, cudaGraphExec_t *out) {
  for (int i = 0; i < net->graphs_n; i++)
    if (net->graphs[i].n == n && net->graphs[i].part == part) {
      *out = net->graphs[i].exec;
      return 0;
    }
  if (net->graphs_n == NNC_MAX_GRAPHS) drop_graphs(net);
  nnc_plan *plan;
  NNC_TRY(nnc_plan_get(net, n, &plan));
  if (!plan->warmed) {
    /* Once as plain launches: lazy initialisation stays out of the capture, and a failing call names itself here.
     * It writes activations and gradients only, which the step overwrites. */
    NNC_TRY(queue_forward_backward(net, plan, n));
    NNC_CUDA(cudaStreamSynchronize(net->stream), "the first run of a step (outside the graph)");
    plan->warmed = 1;
  }
  cudaGraphExec_t exec;
  NNC_TRY(capture(net, plan, n, part, &exec));
  net->graphs[net->graphs_n].n = n;
  net->graphs[net->graphs_n].part = part;
  net->graphs[net->graphs_n].exec = exec;
  net->graphs_n++;
  *out = exec;
  return 0;
}

static int allreduce(cohort__nnc_net *net, const cohort__nnc_comm *comm) {
  const size_t count = net->count + 1;
  int rc;
  if (comm->allreduce_avg)
    rc = comm->allreduce_avg(comm->ctx, net->grads, count, (void *)net->stream);
  else {
    if (!net->staging) NNC_CUDA(cudaMallocHost((void **)&net->staging, count * sizeof(float)), "staging buffer");
    NNC_CUDA(cudaMemcpyAsync(net->staging, net->grads, count * sizeof(float), cudaMemcpyDeviceToHost, net->stream),
             "staging the gradients to the host");
    NNC_CUDA(cudaStreamSynchronize(net->stream), "staging the gradients to the host");
    rc = comm->allreduce_avg_host(comm->ctx, net->staging, count);
    if (rc == 0)
      NNC_CUDA(cudaMemcpyAsync(net->grads, net->staging, count * sizeof(float), cudaMemcpyHostToDevice, net->stream),
               "staging the averaged gradients back");
  }
  if (rc != 0)
    return nnc_fail("averaging the gradients over %d ranks: %s", comm->world,
                    comm->last_error ? comm->last_error(comm->ctx) : "the allreduce failed");
  return 0;
}

/* Where layer l's gradients lie in grads: [*lo, *hi); 0 when it has no parameters. */
static int layer_grads(const cohort__nnc_net *net, const nnc_layer *l, size_t *lo, size_t *hi) {
  int found = 0;
  const float *mine[2] = {l->gw, l->gb};
  for (int k = 0; k < 2; k++) {
    if (!mine[k]) continue;
    for (int t = 0; t < net->tensors.n; t++) {
      if (net->grads + net->tensors.off[t] != mine[k]) continue;
      const size_t a = (size_t)net->tensors.off[t], z = a + (size_t)net->tensors.numel[t];
      if (!found || a < *lo) *lo = a;
      if (!found || z > *hi) *hi = z;
      found = 1;
    }
  }
  return found;
}

/* The buckets for bucket_bytes (buckets.h says where they are cut), and the stream and events of their averages. */
static int make_buckets(cohort__nnc_net *net, size_t bucket_bytes) {
  int has[NNC_MAX_LAYERS];
  size_t lo[NNC_MAX_LAYERS], hi[NNC_MAX_LAYERS];
  for (int i = 0; i < net->nlayers; i++)
    has[i] = layer_grads(net, &net->layers[i], &lo[i], &hi[i]);
  nnc_bucket_cut cut;
  nnc_cut_buckets(net->nlayers, has, lo, hi, net->count, bucket_bytes, &cut);
  const int n = cut.n;
  /* Each made once; one that failed is tried again by the next step's make_buckets (buckets_for is set last). */
  if (n > 1 && !net->comm_stream)
    NNC_CUDA(cudaStreamCreateWithFlags(&net->comm_stream, cudaStreamNonBlocking), "the buckets' stream");
  for (int b = 0; n > 1 && b < NNC_MAX_BUCKETS; b++)
    if (!net->bucket_ready[b])
      NNC_CUDA(cudaEventCreateWithFlags(&net->bucket_ready[b], cudaEventDisableTiming), "a bucket's event");
  if (n > 1 && !net->comm_done)
    NNC_CUDA(cudaEventCreateWithFlags(&net->comm_done, cudaEventDisableTiming), "the buckets' event");
  drop_graphs(net); /* the buckets' parts are cut anew */
  net->buckets = cut;
  net->buckets_for = bucket_bytes;
  return 0;
}

/* Several ranks, buckets: each bucket's backward is one graph on the net's stream, with an event after it; then,
 * on the buckets' stream, each bucket's average waits for its event only, so it runs while the net's stream goes
 * on with the backward of the layers before; the update waits for the last average. All the graphs are queued
 * before the first average: an allreduce that waits on the host for its input (staged, or cuda-ipc with
 * COHORT_GPU_IPC_SYNC=host) then does not hold back the backward behind it. */
static int overlapped_step(cohort__nnc_net *net, int batch, const cohort__nnc_comm *comm) {
  cudaGraphExec_t exec;
  for (int b = 0; b < net->buckets.n; b++) {
    NNC_TRY(graph_for(net, batch, NNC_PART_BUCKET + b, &exec));
    NNC_CUDA(cudaGraphLaunch(exec, net->stream), "launching a bucket's backward");
    NNC_CUDA(cudaEventRecord(net->bucket_ready[b], net->stream), "marking a bucket ready");
  }
  for (int b = 0; b < net->buckets.n; b++) {
    NNC_CUDA(cudaStreamWaitEvent(net->comm_stream, net->bucket_ready[b], 0), "the buckets' stream waiting");
    if (comm->allreduce_avg(comm->ctx, net->grads + net->buckets.lo[b], net->buckets.hi[b] - net->buckets.lo[b],
                            (void *)net->comm_stream) != 0)
      return nnc_fail("averaging gradient bucket %d of %d (%zu floats) over %d ranks: %s", b, net->buckets.n,
                      net->buckets.hi[b] - net->buckets.lo[b], comm->world,
                      comm->last_error ? comm->last_error(comm->ctx) : "the allreduce failed");
  }
  NNC_CUDA(cudaEventRecord(net->comm_done, net->comm_stream), "marking the averages done");
  NNC_CUDA(cudaStreamWaitEvent(net->stream, net->comm_done, 0), "the update waiting for the averages");
  NNC_TRY(graph_for(net, batch, 2, &exec));
  NNC_CUDA(cudaGraphLaunch(exec, net->stream), "launching the update");
  return 0;
}

static int train_step(cohort__nnc_net *net, int batch, const cohort__nnc_comm *comm) {
  if (!net->train_x || !net->order_n) return nnc_fail("a training step before set_data and set_order");
  if (batch < 1 || (size_t)(net->cursor_h + batch) > net->order_n)
    return nnc_fail("a step of %d images at position %lld of an order of %zu", batch, net->cursor_h, net->order_n);
  if (net->lr_step_h >= net->lr_n)
    return nnc_fail("step %lld is past the schedule's %lld steps", net->lr_step_h, (long long)net->lr_n);
  const int ranks = comm && comm->world > 1;
  const int bucketed = ranks && comm->allreduce_avg && comm->bucket_bytes;
  if (bucketed && net->buckets_for != comm->bucket_bytes) NNC_TRY(make_buckets(net, comm->bucket_bytes));
  cudaGraphExec_t exec;
  if (!ranks) {
    NNC_TRY(graph_for(net, batch, 0, &exec));
    NNC_CUDA(cudaGraphLaunch(exec, net->stream), "launching the step's graph");
  } else if (bucketed && net->buckets.n > 1) {
    NNC_TRY(overlapped_step(net, batch, comm));
  } else {
    NNC_TRY(graph_for(net, batch, 1, &exec));
    NNC_CUDA(cudaGraphLaunch(exec, net->stream), "launching forward and backward");
    /* The gradients and, after them, the step's loss: one allreduce. */
    NNC_TRY(allreduce(net, comm));
    NNC_TRY(graph_for(net, batch, 2, &exec));
    NNC_CUDA(cudaGraphLaunch(exec, net->stream), "launching the update");
  }
  net->cursor_h += batch;
  net->lr_step_h++;
  return 0;
}

static int take_loss(cohort__nnc_net *net, double *loss_sum, int64_t *steps) {
  NNC_CUDA(
      cudaMemcpyAsync(net->counters_host, net->counters, sizeof(nnc_counters), cudaMemcpyDeviceToHost, net->stream),
      "reading the loss");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "waiting for the steps (an error of a step shows here)");
  *loss_sum = net->counters_host->loss_sum;
  *steps = net->counters_host->loss_steps;
  static const struct {
    long long steps;
    double sum;
  } zero = {0, 0.0};
  NNC_CUDA(cudaMemcpyAsync(&net->counters->loss_steps, &zero, sizeof zero, cudaMemcpyHostToDevice, net->stream),
           "starting a new loss sum");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "starting a new loss sum");
  return 0;
}

static int evaluate(cohort__nnc_net *net, size_t lo, size_t hi, int64_t *correct) {
  if (hi > net->ntest || lo > hi) return nnc_fail("evaluating [%zu, %zu) of %zu test images", lo, hi, net->ntest);
  NNC_CUDA(cudaMemsetAsync(net->correct, 0, sizeof(long long), net->stream), "evaluation");
  for (size_t at = lo; at < hi;) {
    const int n = (int)(hi - at < (size_t)net->desc.max_batch ? hi - at : (size_t)net->desc.max_batch);
    nnc_plan *plan;
    NNC_TRY(nnc_plan_get(net, n, &plan));
    NNC_TRY(nnc_forward(net, plan, net->test_x + at * net->per, n));
    NNC_TRY(nnc_count_correct(net->stream, nnc_logits(net), net->test_y + at, n, net->desc.classes, net->correct));
    at += (size_t)n;
  }
  long long hits = 0;
  NNC_CUDA(cudaMemcpyAsync(&hits, net->correct, sizeof hits, cudaMemcpyDeviceToHost, net->stream), "evaluation");
  NNC_CUDA(cudaStreamSynchronize(net->stream), "evaluation");
  *correct = hits;
  return 0;
}

static int synchronize(cohort__nnc_net *net) {
  NNC_CUDA(cudaStreamSynchronize(net->stream), "waiting for the GPU");
  return 0;
}

/* ---- where a step's time goes ---- */

/* One pass of forward and backward with an event between the parts (the caller set net->marks). */
static int profiled_pass(cohort__nnc_net *net, const nnc_plan *plan, int n) {
  cudaEvent_t *m = net->marks;
  NNC_CUDA(cudaEventRecord(m[NNC_MARK_START], net->stream), "profiling: an event");
  NNC_TRY(
      nnc_gather(net->stream, net->order, net->counters, net->train_x, net->train_y, net->per, n, net->x, net->labels));
  NNC_CUDA(cudaEventRecord(m[NNC_MARK_GATHER], net->stream), "profiling: an event");
  NNC_TRY(nnc_forward(net, plan, net->x, n));
  NNC_TRY(nnc_softmax_xent(net->stream, nnc_logits(net), net->labels, n, net->desc.classes, nnc_dlogits(net),
                           net->grads + net->count));
  NNC_CUDA(cudaEventRecord(m[NNC_MARK_LOSS(net)], net->stream), "profiling: an event");
  NNC_TRY(nnc_backward(net, plan, net->x, n));
  return 0;
}

static double between(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, a, b) == cudaSuccess) return (double)ms * 1e3;
  (void)cudaGetLastError(); /* the runtime keeps the error for the next cudaGetLastError: training's launch check */
  return 0.0;
}

/* What profile() found: microseconds per pass of each part. */
typedef struct nnc_profile {
  double gather, loss, fwd[NNC_MAX_LAYERS], bwd[NNC_MAX_LAYERS];
} nnc_profile;

/* m: the events of the pass just waited for. Not net->marks, which profile() has set back to NULL by then (reading
 * it crashed the first counted pass with SIGSEGV on the GPU host, 2026-11-27). */
static void take_marks(const cohort__nnc_net *net, const cudaEvent_t *m, nnc_profile *p) {
  const int L = net->nlayers;
  p->gather += between(m[NNC_MARK_START], m[NNC_MARK_GATHER]);
  for (int i = 0; i < L; i++)
    p->fwd[i] += between(m[i == 0 ? NNC_MARK_GATHER : NNC_MARK_FWD + i - 1], m[NNC_MARK_FWD + i]);
  p->loss += between(m[NNC_MARK_FWD + L - 1], m[NNC_MARK_LOSS(net)]);
  for (int i = L - 1; i >= 0; i--) /* backward runs from the last layer to the first */
    p->bwd[i] += between(m[i == L - 1 ? NNC_MARK_LOSS(net) : NNC_MARK_BWD(net) + i + 1], m[NNC_MARK_BWD(net) + i]);
}

/* `steps` passes of forward and backward over `batch` images at the order's position, as plain launches (no graph)
 * with an event between the parts, then one line per part into out. The passes write activations and gradients
 * only: the parameters, the optimizer state, the position and the schedule stay as they were. */
static int profile(cohort__nnc_net *net, int batch, int steps, char *out, size_t len) {
  if (!net->train_x || !net->order_n) return nnc_fail("profiling before set_data and set_order");
  if (batch < 1 || steps < 1 || (size_t)(net->cursor_h + batch) > net->order_n)
    return nnc_fail("profiling %d steps of %d images at position %lld of an order of %zu", steps, batch, net->cursor_h,
                    net->order_n);
  nnc_plan *plan;
  NNC_TRY(nnc_plan_get(net, batch, &plan));
  const int nmarks = NNC_MARKS(net);
  cudaEvent_t *marks = (cudaEvent_t *)calloc((size_t)nmarks, sizeof *marks);
  if (!marks) return nnc_fail("profiling: out of memory");
  int rc = 0, made = 0;
  for (; made < nmarks && rc == 0; made++)
    if (cudaEventCreate(&marks[made]) != cudaSuccess) rc = nnc_fail("profiling: cudaEventCreate failed");
  nnc_profile p;
  memset(&p, 0, sizeof p);
  /* One pass first, not counted: cuBLAS and cuDNN start lazily. */
  for (int s = -1; s < steps && rc == 0; s++) {
    net->marks = marks;
    rc = profiled_pass(net, plan, batch);
    net->marks = NULL;
    cudaError_t e = rc == 0 ? cudaEventSynchronize(marks[NNC_MARK_BWD(net)]) : cudaSuccess;
    if (e != cudaSuccess) rc = nnc_fail("profiling: the pass failed on the GPU: %s", cudaGetErrorString(e));
    if (rc == 0 && s >= 0) take_marks(net, marks, &p);
  }
  for (int i = 0; i < made; i++)
    if (marks[i]) cudaEventDestroy(marks[i]);
  free(marks);
  if (rc != 0) {
    /* Training goes on after a failed profile: a CUDA error of its own (an event, a launch) would otherwise stay as
     * the runtime's last error and be reported by the next step's launch check (NNC_LAUNCHED) as that step's. */
    (void)cudaGetLastError();
    return rc;
  }
  double total = p.gather + p.loss;
  size_t at = (size_t)snprintf(out, len, "gather %.1f us", p.gather / steps);
  for (int i = 0; i < net->nlayers; i++) {
    const nnc_layer *l = &net->layers[i];
    total += p.fwd[i] + p.bwd[i];
    if (l->passthrough || at >= len) continue;
    at += (size_t)snprintf(out + at, len - at, "; %s (%s) forward %.1f, backward %.1f us",
                           l->info.name ? l->info.name : "?", nnc_kind_name(l->info.kind), p.fwd[i] / steps,
                           p.bwd[i] / steps);
  }
  if (at < len)
    snprintf(out + at, len - at, "; loss %.1f us; in all %.1f us a pass (%.0f img/s without the update)",
             p.loss / steps, total / steps, total > 0 ? batch * steps / (total * 1e-6) : 0.0);
  return 0;
}

static const cohort__nnc_api api = {
    COHORT__NNC_PLUGIN_VERSION,
    nnc_last_error,
    available,
    describe,
    net_create,
    destroy,
    net_describe,
    set_params,
    get_params,
    set_state,
    get_state,
    forward_host,
    backward_host,
    set_data,
    set_schedule,
    set_order,
    train_step,
    take_loss,
    evaluate,
    synchronize,
    profile,
};

extern "C" __attribute__((visibility("default"))) const cohort__nnc_api *cohort_nn_cuda_plugin_v1(void) { return &api; }
