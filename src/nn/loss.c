/* loss.c: softmax cross-entropy over [N, C] logits, mean over the batch (F.cross_entropy's default). */
#include <math.h>

#include "nn/layer.h"

cohort_status cohort_softmax_xent(const cohort_tensor *logits, const int32_t *labels, float *loss, float *grad,
                                  int *correct) {
  if (!logits || !logits->data || !labels || !loss)
    return cohort__error(COHORT_ERR_INVALID, "cohort_softmax_xent: NULL argument");
  if (logits->ndim != 2)
    return cohort__error(COHORT_ERR_INVALID, "cohort_softmax_xent: logits must be [N, C], got %d dims", logits->ndim);
  const int64_t n = logits->shape[0], nc = logits->shape[1];
  for (int64_t i = 0; i < n; i++)
    if (labels[i] < 0 || labels[i] >= nc)
      return cohort__error(COHORT_ERR_INVALID, "cohort_softmax_xent: label %d of row %lld outside [0, %lld)",
                           (int)labels[i], (long long)i, (long long)nc);
  double total = 0.0;
  int hits = 0;
  for (int64_t i = 0; i < n; i++) {
    const float *z = logits->data + i * nc;
    int64_t arg = 0;
    for (int64_t j = 1; j < nc; j++)
      if (z[j] > z[arg]) arg = j;
    hits += arg == labels[i];
    /* Subtracting the max keeps exp() from overflowing; the sum is then at least 1, so log() is finite. */
    const double zmax = z[arg];
    double sum = 0.0;
    for (int64_t j = 0; j < nc; j++)
      sum += exp((double)z[j] - zmax);
    const double lse = zmax + log(sum);
    total += lse - z[labels[i]];
    if (grad) {
      float *g = grad + i * nc;
      for (int64_t j = 0; j < nc; j++)
        g[j] = (float)(exp((double)z[j] - lse) / (double)n);
      g[labels[i]] -= (float)(1.0 / (double)n);
    }
  }
  *loss = (float)(total / (double)n);
  if (correct) *correct = hits;
  return COHORT_OK;
}
