/*
 * bench_nn.c: training throughput of the reference CNN on one core, to set beside the PyTorch anchor
 * (bench-anchors/torch_ddp_fmnist.py, 1 rank: 797 img/s at batch 64).
 *
 * usage: bench_nn [STEPS] [BATCH] [THREADS]   (defaults 60 64 1)
 * Times forward + cross-entropy + backward + SGD(momentum) on random inputs after a few warm-up steps, and prints
 * img/s plus the time spent per phase.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cohort/nn.h"
#include "core/clock.h"

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 60, batch = argc > 2 ? atoi(argv[2]) : 64;
  int threads = argc > 3 ? atoi(argv[3]) : 1;
  if (steps < 1 || batch < 1 || threads < 1) {
    fprintf(stderr, "usage: bench_nn [STEPS] [BATCH] [THREADS]\n");
    return 2;
  }
  cohort_model *m = NULL;
  cohort_optim *opt = NULL;
  cohort_tensor x = {0};
  int64_t shape[4] = {batch, 1, 28, 28};
  float *grad = malloc((size_t)batch * 10 * sizeof(float));
  int32_t *labels = malloc((size_t)batch * sizeof(int32_t));
  cohort_sgd_config sgd = {.lr = 0.05f, .momentum = 0.9f};
  if (!grad || !labels || cohort_nn_set_threads(threads) || cohort_model_create_cnn(0, &m) ||
      cohort_optim_sgd_create(m, &sgd, &opt) || cohort_tensor_alloc(&x, 4, shape)) {
    fprintf(stderr, "bench_nn: setup failed: %s\n", cohort_last_error());
    return 1;
  }
  cohort_rng rng;
  cohort_rng_seed(&rng, 1);
  for (size_t i = 0; i < x.numel; i++)
    x.data[i] = cohort_rng_uniform(&rng);
  for (int i = 0; i < batch; i++)
    labels[i] = (int32_t)(cohort_rng_next(&rng) % 10);
  double t_fwd = 0, t_bwd = 0, t_opt = 0, t0 = 0;
  float loss = 0;
  const int warm = 3;
  for (int s = 0; s < warm + steps; s++) {
    if (s == warm) t_fwd = t_bwd = t_opt = 0, t0 = cohort__now_s();
    const cohort_tensor *y;
    double a = cohort__now_s();
    cohort_model_zero_grad(m);
    if (cohort_model_forward(m, &x, &y) || cohort_softmax_xent(y, labels, &loss, grad, NULL)) goto fail;
    double b = cohort__now_s();
    if (cohort_model_backward(m, grad)) goto fail;
    double c = cohort__now_s();
    if (cohort_optim_step(opt)) goto fail;
    double d = cohort__now_s();
    t_fwd += b - a, t_bwd += c - b, t_opt += d - c;
  }
  double el = cohort__now_s() - t0;
  printf("cnn batch=%d threads=%d steps=%d img_per_s=%.0f ms_per_step=%.2f (forward %.2f, backward %.2f, sgd %.2f) "
         "loss=%.4f\n",
         batch, threads, steps, steps * (double)batch / el, 1e3 * el / steps, 1e3 * t_fwd / steps, 1e3 * t_bwd / steps,
         1e3 * t_opt / steps, loss);
  cohort_optim_destroy(opt);
  cohort_model_destroy(m);
  cohort_tensor_free(&x);
  free(grad);
  free(labels);
  return 0;
fail:
  fprintf(stderr, "bench_nn: %s\n", cohort_last_error());
  return 1;
}
