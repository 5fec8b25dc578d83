/*
 * test_nnc_buckets.c: where the CUDA training stack cuts its gradients into buckets (src/nn_cuda/buckets.c), on the
 * CPU: the plugin itself runs only on a GPU, and 20-training checks its results there against one allreduce.
 */
#include "nn_cuda/buckets.h"
#include "test.h"

/* The reference CNN as the GPU lays it out: conv1, relu, conv2, relu, maxpool, flatten, fc1, relu, fc2, each layer's
 * weight then bias, back to back. */
enum { CNN_LAYERS = 9 };
static const int cnn_has[CNN_LAYERS] = {1, 0, 1, 0, 0, 0, 1, 0, 1};
static const size_t cnn_lo[CNN_LAYERS] = {0, 0, 320, 0, 0, 0, 18816, 0, 1198592};
static const size_t cnn_hi[CNN_LAYERS] = {320, 0, 18816, 0, 0, 0, 1198592, 0, 1199882};
static const size_t cnn_count = 1199882;

static void expect_cut(const nnc_bucket_cut *c, int n, const int *top, const size_t *lo, size_t count) {
  ASSERT_EQ(c->n, n);
  for (int b = 0; b < n; b++) {
    ASSERT_EQ(c->top[b], top[b]);
    ASSERT_EQ(c->lo[b], lo[b]);
    ASSERT_EQ(c->hi[b],
              b == 0 ? count + 1 : lo[b - 1]); /* bucket 0 carries the loss; each ends where the next starts */
  }
}

static size_t mib(double m) { return (size_t)(m * 1048576.0); }

TEST(cnn_default_two_buckets) {
  nnc_bucket_cut c;
  nnc_cut_buckets(CNN_LAYERS, cnn_has, cnn_lo, cnn_hi, cnn_count, mib(25), &c);
  const int top[] = {8, 6};
  const size_t lo[] = {1198592, 0};
  expect_cut(&c, 2, top, lo, cnn_count); /* fc2 (5160 bytes, under the first 1 MiB); fc1 and the convolutions */
}

TEST(cnn_small_caps) {
  nnc_bucket_cut c;
  nnc_cut_buckets(CNN_LAYERS, cnn_has, cnn_lo, cnn_hi, cnn_count, mib(0.1), &c);
  const int top3[] = {8, 6, 2};
  const size_t lo3[] = {1198592, 18816, 0};
  expect_cut(&c, 3, top3, lo3, cnn_count); /* conv2 and conv1 (75,264 bytes) share a 0.1 MiB bucket */
  nnc_cut_buckets(CNN_LAYERS, cnn_has, cnn_lo, cnn_hi, cnn_count, mib(0.05), &c);
  const int top4[] = {8, 6, 2, 0};
  const size_t lo4[] = {1198592, 18816, 320, 0};
  expect_cut(&c, 4, top4, lo4, cnn_count); /* fc1 alone: larger than the cap */
}

TEST(at_most_eight_buckets) {
  enum { L = 12 };
  int has[L];
  size_t lo[L], hi[L];
  for (int i = 0; i < L; i++) {
    has[i] = 1;
    lo[i] = (size_t)i * 1000;
    hi[i] = lo[i] + 1000;
  }
  nnc_bucket_cut c;
  nnc_cut_buckets(L, has, lo, hi, L * 1000, 4, &c); /* every layer past the cap: one each, the last takes the rest */
  const int top[] = {11, 10, 9, 8, 7, 6, 5, 4};
  const size_t want_lo[] = {11000, 10000, 9000, 8000, 7000, 6000, 5000, 0};
  expect_cut(&c, 8, top, want_lo, L * 1000);
}

TEST(one_bucket_where_not_ranges) {
  nnc_bucket_cut c;
  /* fc1's and fc2's gradients swapped in grads: buckets would not be ranges in the layers' order */
  const size_t lo[CNN_LAYERS] = {0, 0, 320, 0, 0, 0, 20106, 0, 18816};
  const size_t hi[CNN_LAYERS] = {320, 0, 18816, 0, 0, 0, 1199882, 0, 20106};
  nnc_cut_buckets(CNN_LAYERS, cnn_has, lo, hi, cnn_count, mib(25), &c);
  ASSERT_EQ(c.n, 1);
  ASSERT_EQ(c.hi[0], cnn_count + 1);
  /* a parameter no layer owns (count larger than the layers' gradients) */
  nnc_cut_buckets(CNN_LAYERS, cnn_has, cnn_lo, cnn_hi, cnn_count + 7, mib(25), &c);
  ASSERT_EQ(c.n, 1);
  /* no layer with parameters */
  const int none[CNN_LAYERS] = {0};
  nnc_cut_buckets(CNN_LAYERS, none, cnn_lo, cnn_hi, 0, mib(25), &c);
  ASSERT_EQ(c.n, 1);
  ASSERT_EQ(c.top[0], CNN_LAYERS - 1);
}

COHORT_TEST_MAIN(TEST_CASE(cnn_default_two_buckets), TEST_CASE(cnn_small_caps), TEST_CASE(at_most_eight_buckets),
                 TEST_CASE(one_bucket_where_not_ranges))
