/*
 * optim_step.c: the cost of one optimizer step on the reference CNN's 1.2 M parameters, with ordinary state and with
 * state that has decayed into subnormal floats, as it does late in training wherever a gradient stays zero. Set
 * beside bench/optim_step_torch.py (torch.optim, the same shapes and values) by bench/optim.sh.
 *
 *   optim_step [STEPS]      (default 100)
 *
 * Prints one line per optimizer and case: "sgd normal ms=X", "sgd subnormal ms=X", "adamw normal ms=X",
 * "adamw subnormal ms=X", each the median over STEPS timed steps.
 *   sgd:   lr 0.05, momentum 0.9 (fmnist-train's optimizer).
 *   adamw: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 (torch.optim.AdamW's defaults).
 *   normal:    gradients of 1e-3 and state of the size they give (1e-3; AdamW's two averages 1e-6).
 *   subnormal: every gradient zero (SGD) or 1e-21 (AdamW: its square, 1e-42, is subnormal), and every state value
 *              1e-39, a subnormal. The state is put back before each timed step, so that each one starts from it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/nn.h"
#include "core/clock.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void fill_grads(cohort_model *m, float value) {
  for (int i = 0; i < cohort_model_num_params(m); i++) {
    const cohort_param *p = cohort_model_param(m, i);
    for (size_t j = 0; j < p->numel; j++)
      p->grad[j] = value;
  }
}

static void fill_state(cohort_optim *o, float value) {
  for (int i = 0; i < cohort_optim_num_states(o); i++) {
    const cohort_named_array *a = cohort_optim_state(o, i);
    for (size_t j = 0; j < a->count; j++)
      a->data[j] = value;
  }
}

/* Median milliseconds of one step over `steps` steps, each starting from the same state. */
static double time_steps(cohort_optim *o, float state, int steps, double *samples) {
  for (int s = 0; s < steps; s++) {
    fill_state(o, state);
    double t0 = cohort__now_s();
    if (cohort_optim_step(o) != COHORT_OK) {
      fprintf(stderr, "optim_step: %s\n", cohort_last_error());
      exit(1);
    }
    samples[s] = 1e3 * (cohort__now_s() - t0);
  }
  qsort(samples, (size_t)steps, sizeof *samples, cmp_double);
  return samples[steps / 2];
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  if (steps < 1) {
    fprintf(stderr, "usage: optim_step [STEPS]\n");
    return 2;
  }
  double *samples = malloc((size_t)steps * sizeof *samples);
  cohort_model *m = NULL;
  if (!samples || cohort_model_create_cnn(0, &m) != COHORT_OK) {
    fprintf(stderr, "optim_step: setup failed: %s\n", cohort_last_error());
    return 1;
  }
  cohort_model_zero_grad(m);
  const cohort_sgd_config sgd = {.lr = 0.05f, .momentum = 0.9f};
  const cohort_adamw_config adamw = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
  printf("# %zu parameters, median of %d steps\n", cohort_model_param_count(m), steps);
  for (int k = 0; k < 2; k++) {
    const char *name = k == 0 ? "sgd" : "adamw";
    cohort_optim *o = NULL;
    cohort_status st = k == 0 ? cohort_optim_sgd_create(m, &sgd, &o) : cohort_optim_adamw_create(m, &adamw, &o);
    if (st != COHORT_OK) {
      fprintf(stderr, "optim_step: %s\n", cohort_last_error());
      return 1;
    }
    /* A first step, so that SGD's momentum buffers are in use (torch starts them at the first gradient). */
    fill_grads(m, 1e-3f);
    if (cohort_optim_step(o) != COHORT_OK) return 1;
    printf("%s normal ms=%.3f\n", name, time_steps(o, k == 0 ? 1e-3f : 1e-6f, steps, samples));
    fill_grads(m, k == 0 ? 0.0f : 1e-21f);
    printf("%s subnormal ms=%.3f\n", name, time_steps(o, 1e-39f, steps, samples));
    fflush(stdout);
    cohort_optim_destroy(o);
  }
  cohort_model_destroy(m);
  free(samples);
  return 0;
}
