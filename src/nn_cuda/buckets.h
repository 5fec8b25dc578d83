/*
 * buckets.h: where the CUDA training stack cuts its gradients into buckets for the overlapped multi-rank step
 * (net.cu's overlapped_step). Plain C with no CUDA type, so that the CPU-only suite tests the cut (unit.nnc_buckets)
 * on every machine, where the plugin itself only runs on a GPU.
 */
#ifndef COHORT_NN_CUDA_BUCKETS_H
#define COHORT_NN_CUDA_BUCKETS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NNC_MAX_BUCKETS 8

/* The buckets: bucket b holds the gradients of the layers from top[b] down to top[b + 1] + 1 (the last one's down to
 * layer 0), grads[lo[b], hi[b]); bucket 0 is the last layers' and carries the loss, the float after the gradients. */
typedef struct nnc_bucket_cut {
  int n;
  int top[NNC_MAX_BUCKETS];
  size_t lo[NNC_MAX_BUCKETS], hi[NNC_MAX_BUCKETS];
} nnc_bucket_cut;

/* Cuts nlayers layers, whose gradients lie at grads[lo[i], hi[i]) (has[i] 0: the layer has none), of count floats in
 * all, as the CPU engine cuts its buckets (src/ddp/layout.c): from the last layer, a bucket closed where the next
 * layer's gradients would pass its cap (min(1 MiB, bucket_bytes) for the first, so that its average starts early;
 * bucket_bytes after); a layer larger than the cap gets a bucket of its own; at most NNC_MAX_BUCKETS, the last taking
 * what is left. Every bucket must be one range of grads, all of them together the whole of it (the layers' parameters
 * lie back to back in the layers' order); where not, one bucket (out->n = 1: the step with one allreduce). */
void nnc_cut_buckets(int nlayers, const int *has, const size_t *lo, const size_t *hi, size_t count, size_t bucket_bytes,
                     nnc_bucket_cut *out);

#ifdef __cplusplus
}
#endif

#endif
