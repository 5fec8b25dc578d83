/* schedule.c: learning-rate schedules: Horovod's linear scaling with warmup, then constant, cosine or step decay. */
#include <math.h>

#include "nn/layer.h"

cohort_status cohort_lr_schedule_check(const cohort_lr_schedule *s) {
  if (!s) return cohort__error(COHORT_ERR_INVALID, "lr schedule: NULL");
  if (!(s->base_lr >= 0.0f)) return cohort__error(COHORT_ERR_INVALID, "lr schedule: base_lr %g < 0", s->base_lr);
  if (s->world_size < 1) return cohort__error(COHORT_ERR_INVALID, "lr schedule: world_size %d < 1", s->world_size);
  if (s->warmup_steps < 0)
    return cohort__error(COHORT_ERR_INVALID, "lr schedule: warmup_steps %lld < 0", (long long)s->warmup_steps);
  switch (s->decay) {
  case COHORT_LR_CONSTANT:
    return COHORT_OK;
  case COHORT_LR_COSINE:
    if (s->total_steps <= s->warmup_steps)
      return cohort__error(COHORT_ERR_INVALID, "lr schedule: cosine total_steps %lld must exceed warmup_steps %lld",
                           (long long)s->total_steps, (long long)s->warmup_steps);
    if (!(s->min_lr >= 0.0f)) return cohort__error(COHORT_ERR_INVALID, "lr schedule: min_lr %g < 0", s->min_lr);
    return COHORT_OK;
  case COHORT_LR_STEP:
    if (s->step_size < 1)
      return cohort__error(COHORT_ERR_INVALID, "lr schedule: step_size %lld < 1", (long long)s->step_size);
    if (!(s->gamma > 0.0f)) return cohort__error(COHORT_ERR_INVALID, "lr schedule: gamma %g <= 0", s->gamma);
    return COHORT_OK;
  }
  return cohort__error(COHORT_ERR_INVALID, "lr schedule: unknown decay %d", (int)s->decay);
}

float cohort_lr_schedule_at(const cohort_lr_schedule *s, int64_t step) {
  const double peak = (double)s->base_lr * s->world_size;
  if (step < 0) step = 0;
  if (step < s->warmup_steps) {
    /* Goyal et al. / Horovod: from the one-rank rate to the scaled one, reaching it as warmup ends. */
    double frac = (double)step / (double)s->warmup_steps;
    return (float)(s->base_lr + (peak - s->base_lr) * frac);
  }
  const int64_t t = step - s->warmup_steps;
  switch (s->decay) {
  case COHORT_LR_COSINE: {
    const int64_t span = s->total_steps - s->warmup_steps;
    if (span <= 0 || t >= span) return s->min_lr;
    return (float)(s->min_lr + (peak - s->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * (double)t / span)));
  }
  case COHORT_LR_STEP:
    if (s->step_size < 1) return (float)peak;
    return (float)(peak * pow((double)s->gamma, (double)(t / s->step_size)));
  case COHORT_LR_CONSTANT:
    break;
  }
  return (float)peak;
}
