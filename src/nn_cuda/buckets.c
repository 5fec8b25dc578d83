/* buckets.c: the cut of the gradients into buckets (buckets.h). */
#include "nn_cuda/buckets.h"

#include <string.h>

void nnc_cut_buckets(int nlayers, const int *has, const size_t *lo, const size_t *hi, size_t count, size_t bucket_bytes,
                     nnc_bucket_cut *out) {
  memset(out, 0, sizeof *out);
  int n = 0, top = nlayers - 1;
  size_t bytes = 0, cap = bucket_bytes < ((size_t)1 << 20) ? bucket_bytes : ((size_t)1 << 20);
  for (int i = nlayers - 1; i >= 0; i--) {
    if (!has[i]) continue;
    const size_t b = (hi[i] - lo[i]) * sizeof(float);
    if (bytes > 0 && bytes + b > cap && n < NNC_MAX_BUCKETS - 1) {
      out->top[n++] = top;
      top = i;
      bytes = 0;
      cap = bucket_bytes;
    }
    bytes += b;
  }
  out->top[n++] = top;
  /* Each bucket's range: from its lowest layer's gradients to where the bucket after it (nearer the output) starts;
   * bucket 0 to the end, the loss included. Checked: the layers of a bucket cover exactly that range, once each. */
  size_t end = count + 1;
  int ok = 1;
  for (int b = 0; b < n && ok; b++) {
    const int to = b + 1 < n ? out->top[b + 1] + 1 : 0;
    size_t low = end, covered = 0;
    for (int i = out->top[b]; i >= to; i--) {
      if (!has[i]) continue;
      if (hi[i] > end || lo[i] > hi[i]) ok = 0; /* past the bucket above, or not a range */
      if (lo[i] < low) low = lo[i];
      covered += hi[i] - lo[i];
    }
    ok = ok && low < end && covered == end - low - (b == 0 ? 1 : 0);
    out->lo[b] = low;
    out->hi[b] = end;
    end = low;
  }
  if (!ok || end != 0) { /* not one range each, or gradients before the first layer's: one bucket */
    memset(out, 0, sizeof *out);
    out->n = 1;
    out->top[0] = nlayers - 1;
    out->hi[0] = count + 1;
    return;
  }
  out->n = n;
}
