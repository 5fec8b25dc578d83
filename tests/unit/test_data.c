/* test_data.c: IDX files, datasets, the distributed sampler and the prefetching loader. */
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cohort/data.h"
#include "data/mt19937.h"
#include "test.h"

/* This file builds two binaries (see data.cmake); each runs only some of the tests below. */
#pragma GCC diagnostic ignored "-Wunused-function"

static char tmpdir[256];

static const char *tmp_path(const char *name) {
  static char path[512];
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "%s/cohort-data-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) abort();
  }
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  return path;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The C++ standard fixes this value ([rand.predef]: the 10000th output of a default-seeded mt19937), so it checks
 * the generator against an outside reference. */
TEST(mt19937_reference) {
  cohort__mt19937 mt;
  cohort__mt19937_seed(&mt, 5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; i++)
    v = cohort__mt19937_next(&mt);
  ASSERT_EQ(v, 4123659995u);
}

TEST(randperm_is_permutation) {
  static const int64_t sizes[] = {1, 2, 3, 10, 97, 1000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    int64_t n = sizes[k];
    int64_t *p = malloc((size_t)n * sizeof *p);
    char *seen = calloc((size_t)n, 1);
    cohort__randperm(42 + (uint64_t)k, p, n);
    for (int64_t i = 0; i < n; i++) {
      ASSERT_TRUE(p[i] >= 0 && p[i] < n);
      ASSERT_EQ(seen[p[i]], 0);
      seen[p[i]] = 1;
    }
    if (n >= 10) { /* a shuffle of 10+ elements that leaves them all in place would be a broken shuffle */
      int moved = 0;
      for (int64_t i = 0; i < n; i++)
        moved += p[i] != i;
      ASSERT_TRUE(moved > n / 2);
    }
    free(p);
    free(seen);
  }
}

TEST(idx_roundtrip_plain_and_gzip) {
  uint8_t u8[2 * 3 * 4];
  for (int i = 0; i < 24; i++)
    u8[i] = (uint8_t)(i * 11 + 3);
  int32_t i32[5] = {-7, 0, 1, 65536 + 258, INT32_MIN};
  float f32[3] = {1.5f, -0.0f, 3.25e-7f};
  for (int gz = 0; gz <= 1; gz++) {
    cohort_idx a = {.type = COHORT_IDX_U8, .ndims = 3, .dims = {2, 3, 4}, .count = 24, .data = u8};
    cohort_idx b = {.type = COHORT_IDX_I32, .ndims = 1, .dims = {5}, .count = 5, .data = i32};
    cohort_idx c = {.type = COHORT_IDX_F32, .ndims = 2, .dims = {1, 3}, .count = 3, .data = f32};
    const char *names[3] = {gz ? "a.gz" : "a", gz ? "b.gz" : "b", gz ? "c.gz" : "c"};
    cohort_idx *arrs[3] = {&a, &b, &c};
    for (int k = 0; k < 3; k++) {
      char path[512];
      snprintf(path, sizeof path, "%s", tmp_path(names[k]));
      ASSERT_OK(cohort_idx_write(path, arrs[k], gz));
      cohort_idx r;
      ASSERT_OK(cohort_idx_read(path, "data", &r));
      ASSERT_EQ(r.type, arrs[k]->type);
      ASSERT_EQ(r.ndims, arrs[k]->ndims);
      for (int d = 0; d < r.ndims; d++)
        ASSERT_EQ(r.dims[d], arrs[k]->dims[d]);
      ASSERT_EQ(r.count, arrs[k]->count);
      ASSERT_EQ(memcmp(r.data, arrs[k]->data, r.count * cohort_idx_type_size(r.type)), 0);
      cohort_idx_free(&r);
    }
  }
  /* The file on disk is big-endian: the i32 file's first element -7 is ff ff ff f9 after the 8-byte header. */
  FILE *f = fopen(tmp_path("b"), "rb");
  ASSERT_TRUE(f != NULL);
  uint8_t raw[12];
  ASSERT_EQ(fread(raw, 1, 12, f), 12);
  fclose(f);
  ASSERT_EQ(raw[2], 0x0C);
  ASSERT_EQ(raw[3], 1);
  ASSERT_EQ(raw[7], 5);
  ASSERT_EQ(raw[8], 0xff);
  ASSERT_EQ(raw[11], 0xf9);
}

static void write_pair(const char *images, const char *labels, uint32_t n_img, uint32_t n_lab, int gz) {
  uint8_t *px = malloc(n_img * 2 * 3);
  uint8_t *lb = malloc(n_lab);
  for (uint32_t i = 0; i < n_img * 6; i++)
    px[i] = (uint8_t)(i * 37);
  for (uint32_t i = 0; i < n_lab; i++)
    lb[i] = (uint8_t)(i % 10);
  cohort_idx a = {.type = COHORT_IDX_U8, .ndims = 3, .dims = {n_img, 2, 3}, .count = n_img * 6, .data = px};
  cohort_idx b = {.type = COHORT_IDX_U8, .ndims = 1, .dims = {n_lab}, .count = n_lab, .data = lb};
  cohort_idx_write(images, &a, gz);
  cohort_idx_write(labels, &b, gz);
  free(px);
  free(lb);
}

TEST(dataset_normalizes_like_torch) {
  char ip[512], lp[512];
  snprintf(ip, sizeof ip, "%s", tmp_path("img.gz"));
  snprintf(lp, sizeof lp, "%s", tmp_path("lab.gz"));
  write_pair(ip, lp, 7, 7, 1);
  cohort_dataset *ds;
  ASSERT_OK(cohort_dataset_load_idx(ip, lp, 0.5f, 0.25f, 10, &ds));
  ASSERT_EQ(cohort_dataset_size(ds), 7);
  int c, h, w;
  cohort_dataset_shape(ds, &c, &h, &w);
  ASSERT_EQ(c, 1);
  ASSERT_EQ(h, 2);
  ASSERT_EQ(w, 3);
  ASSERT_EQ(cohort_dataset_sample_floats(ds), 6);
  for (uint32_t i = 0; i < 42; i++) {
    float want = ((float)(uint8_t)(i * 37) / 255.0f - 0.5f) / 0.25f;
    ASSERT_TRUE(cohort_dataset_images(ds)[i] == want);
  }
  ASSERT_NEAR(cohort_dataset_images(ds)[1], (37.0 / 255.0 - 0.5) / 0.25, 1e-6);
  for (int i = 0; i < 7; i++)
    ASSERT_EQ(cohort_dataset_labels(ds)[i], i % 10);
  cohort_dataset_destroy(ds);
  /* Plain (uncompressed) files load the same way. */
  snprintf(ip, sizeof ip, "%s", tmp_path("img"));
  snprintf(lp, sizeof lp, "%s", tmp_path("lab"));
  write_pair(ip, lp, 3, 3, 0);
  ASSERT_OK(cohort_dataset_load_idx(ip, lp, 0.0f, 1.0f, 0, &ds));
  ASSERT_TRUE(cohort_dataset_images(ds)[1] == 37.0f / 255.0f);
  cohort_dataset_destroy(ds);
}

TEST(dataset_counts_must_agree) {
  char ip[512], lp[512];
  snprintf(ip, sizeof ip, "%s", tmp_path("img2.gz"));
  snprintf(lp, sizeof lp, "%s", tmp_path("lab2.gz"));
  write_pair(ip, lp, 5, 4, 1);
  cohort_dataset *ds = NULL;
  ASSERT_STATUS(cohort_dataset_load_idx(ip, lp, 0.0f, 1.0f, 10, &ds), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "counts differ");
  ASSERT_CONTAINS(cohort_last_error(), "5 images");
  ASSERT_CONTAINS(cohort_last_error(), "4 labels");
  /* labels 0..9 but only 5 classes allowed */
  write_pair(ip, lp, 8, 8, 1);
  ASSERT_STATUS(cohort_dataset_load_idx(ip, lp, 0.0f, 1.0f, 5, &ds), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "label 5 of sample 5 is outside 0..4");
}

/* Every rank's list, for one configuration. */
static int64_t *all_ranks(size_t n, int world, int shuffle, uint64_t seed, int drop_last, uint64_t epoch,
                          size_t *per_rank) {
  int64_t *out = NULL;
  for (int r = 0; r < world; r++) {
    cohort_sampler *s;
    if (cohort_sampler_create(n, world, r, shuffle, seed, drop_last, &s) != COHORT_OK) abort();
    cohort_sampler_set_epoch(s, epoch);
    *per_rank = cohort_sampler_num_samples(s);
    if (!out) out = malloc((*per_rank * (size_t)world + 1) * sizeof *out);
    memcpy(out + (size_t)r * *per_rank, cohort_sampler_indices(s), *per_rank * sizeof *out);
    cohort_sampler_destroy(s);
  }
  return out;
}

TEST(sampler_no_shuffle_is_strided) {
  size_t per;
  int64_t *idx = all_ranks(10, 4, 0, 0, 0, 0, &per);
  ASSERT_EQ(per, 3);
  /* rank r takes r, r+4, r+8 of 0..9 padded to 0..9,0,1 */
  static const int64_t want[4][3] = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int r = 0; r < 4; r++)
    for (int i = 0; i < 3; i++)
      ASSERT_EQ(idx[r * 3 + i], want[r][i]);
  free(idx);
}

TEST(sampler_padding_repeats_the_start) {
  for (int epoch = 0; epoch < 3; epoch++) {
    size_t per;
    int64_t *idx = all_ranks(10, 4, 1, 7, 0, (uint64_t)epoch, &per);
    ASSERT_EQ(per, 3); /* ceil(10 / 4) */
    int64_t perm[10];
    cohort__randperm(7 + (uint64_t)epoch, perm, 10);
    int count[10] = {0};
    for (int r = 0; r < 4; r++)
      for (size_t i = 0; i < per; i++) {
        size_t pos = (size_t)r + i * 4; /* position in the padded order */
        ASSERT_EQ(idx[(size_t)r * per + i], perm[pos % 10]);
        count[idx[(size_t)r * per + i]]++;
      }
    /* every sample is visited; exactly the first two of the permutation twice */
    for (int k = 0; k < 10; k++)
      ASSERT_EQ(count[k], (k == perm[0] || k == perm[1]) ? 2 : 1);
    free(idx);
  }
  /* More padding than samples: 3 samples over 8 ranks repeat the order, as PyTorch's (indices * k)[:pad] does. */
  size_t per;
  int64_t *idx = all_ranks(3, 8, 0, 0, 0, 0, &per);
  ASSERT_EQ(per, 1);
  for (int r = 0; r < 8; r++)
    ASSERT_EQ(idx[r], r % 3);
  free(idx);
}

TEST(sampler_drop_last_is_disjoint) {
  size_t per;
  int64_t *idx = all_ranks(10, 4, 1, 3, 1, 0, &per);
  ASSERT_EQ(per, 2); /* floor(10 / 4) */
  int64_t perm[10];
  cohort__randperm(3, perm, 10);
  int count[10] = {0};
  for (int r = 0; r < 4; r++)
    for (size_t i = 0; i < per; i++)
      count[idx[(size_t)r * per + i]]++;
  /* the first 8 of the permutation once each, the last 2 never */
  for (int k = 0; k < 8; k++)
    ASSERT_EQ(count[perm[k]], 1);
  ASSERT_EQ(count[perm[8]], 0);
  ASSERT_EQ(count[perm[9]], 0);
  free(idx);
}

TEST(sampler_deterministic_disjoint_and_epoch_dependent) {
  size_t per, per2;
  const size_t n = 999;
  int64_t *a = all_ranks(n, 3, 1, 0, 0, 0, &per);
  int64_t *b = all_ranks(n, 3, 1, 0, 0, 0, &per2);
  ASSERT_EQ(per, 333);
  ASSERT_EQ(memcmp(a, b, 3 * per * sizeof *a), 0); /* same seed and epoch: same lists on every rank */
  char *seen = calloc(n, 1);
  for (size_t i = 0; i < 3 * per; i++) {
    ASSERT_EQ(seen[a[i]], 0); /* 999 = 3 * 333: no padding, so the ranks are disjoint */
    seen[a[i]] = 1;
  }
  free(seen);
  int64_t *c = all_ranks(n, 3, 1, 0, 0, 1, &per2);
  size_t same = 0;
  for (size_t i = 0; i < 3 * per; i++)
    same += a[i] == c[i];
  ASSERT_TRUE(same < 20); /* another epoch, another order (a random match rate is about 1/999) */
  int64_t *d = all_ranks(n, 3, 1, 1, 0, 0, &per2);
  ASSERT_EQ(memcmp(c, d, 3 * per * sizeof *a), 0); /* the generator is seeded with seed + epoch */
  free(a);
  free(b);
  free(c);
  free(d);
}

TEST(sampler_state_resumes_mid_epoch) {
  cohort_sampler *s, *t;
  ASSERT_OK(cohort_sampler_create(100, 2, 1, 1, 5, 0, &s));
  ASSERT_OK(cohort_sampler_set_epoch(s, 3));
  int64_t first[7], rest_a[50], rest_b[50];
  ASSERT_EQ(cohort_sampler_next(s, first, 7), 7);
  ASSERT_EQ(cohort_sampler_cursor(s), 7);
  cohort_sampler_state st;
  cohort_sampler_get_state(s, &st);
  ASSERT_EQ(st.epoch, 3);
  ASSERT_EQ(st.cursor, 7);
  size_t na = cohort_sampler_next(s, rest_a, 50);
  ASSERT_EQ(na, 43);
  ASSERT_EQ(cohort_sampler_next(s, rest_a + na, 50), 0);
  ASSERT_OK(cohort_sampler_create(100, 2, 1, 1, 5, 0, &t));
  ASSERT_OK(cohort_sampler_restore(t, &st));
  ASSERT_EQ(cohort_sampler_epoch(t), 3);
  ASSERT_EQ(cohort_sampler_next(t, rest_b, 50), 43);
  ASSERT_EQ(memcmp(rest_a, rest_b, 43 * sizeof(int64_t)), 0);
  cohort_sampler_destroy(t);
  /* another world size or seed is refused with a message naming it */
  ASSERT_OK(cohort_sampler_create(100, 4, 1, 1, 5, 0, &t));
  ASSERT_STATUS(cohort_sampler_restore(t, &st), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "world size 2, this job has 4");
  cohort_sampler_destroy(t);
  ASSERT_OK(cohort_sampler_create(100, 2, 0, 1, 6, 0, &t));
  ASSERT_STATUS(cohort_sampler_restore(t, &st), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "seed 5");
  cohort_sampler_destroy(t);
  cohort_sampler_destroy(s);
  ASSERT_STATUS(cohort_sampler_create(100, 2, 2, 1, 0, 0, &t), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "rank 2");
}

/* A dataset whose sample k holds the floats k*1000 + j and the label k % 7, so a batch shows which samples it got. */
static cohort_dataset *tagged_dataset(size_t n) {
  float *im = malloc(n * 2 * 3 * 4 * sizeof(float));
  int32_t *lb = malloc(n * sizeof(int32_t));
  for (size_t k = 0; k < n; k++) {
    for (size_t j = 0; j < 24; j++)
      im[k * 24 + j] = (float)(k * 1000 + j);
    lb[k] = (int32_t)(k % 7);
  }
  cohort_dataset *ds = NULL;
  if (cohort_dataset_create(n, 2, 3, 4, im, lb, &ds) != COHORT_OK) abort();
  free(im);
  free(lb);
  return ds;
}

static void check_batch(const cohort_batch *b, const int64_t *want_idx, size_t want_size) {
  ASSERT_EQ(b->size, want_size);
  ASSERT_EQ(b->channels, 2);
  ASSERT_EQ(b->height, 3);
  ASSERT_EQ(b->width, 4);
  for (size_t i = 0; i < b->size; i++) {
    ASSERT_EQ(b->indices[i], want_idx[i]);
    ASSERT_EQ(b->labels[i], want_idx[i] % 7);
    for (size_t j = 0; j < 24; j++)
      ASSERT_TRUE(b->images[i * 24 + j] == (float)(want_idx[i] * 1000 + (int64_t)j));
  }
}

TEST(loader_follows_the_sampler) {
  cohort_dataset *ds = tagged_dataset(103);
  for (int drop_last = 0; drop_last <= 1; drop_last++) {
    cohort_sampler *s, *ref;
    ASSERT_OK(cohort_sampler_create(103, 2, 1, 1, 11, 0, &s));
    ASSERT_OK(cohort_sampler_create(103, 2, 1, 1, 11, 0, &ref));
    cohort_loader *l;
    ASSERT_OK(cohort_loader_create(ds, s, 10, drop_last, &l));
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
      if (epoch > 0) ASSERT_OK(cohort_loader_set_epoch(l, epoch));
      ASSERT_OK(cohort_sampler_set_epoch(ref, epoch));
      const int64_t *want = cohort_sampler_indices(ref);
      size_t num = cohort_sampler_num_samples(ref); /* 52 */
      ASSERT_EQ(num, 52);
      size_t nbatches = drop_last ? 5 : 6;
      ASSERT_EQ(cohort_loader_batches_left(l), nbatches);
      for (size_t k = 0; k < nbatches; k++) {
        cohort_batch b;
        ASSERT_OK(cohort_loader_next(l, &b));
        size_t size = k < 5 ? 10 : 2;
        check_batch(&b, want + k * 10, size);
        if (cohort_test_failed) return;
        ASSERT_EQ(cohort_sampler_cursor(s), k * 10 + size);
      }
      cohort_batch end;
      ASSERT_OK(cohort_loader_next(l, &end));
      ASSERT_EQ(end.size, 0);
      ASSERT_EQ(cohort_loader_batches_left(l), 0);
    }
    cohort_loader_destroy(l);
    cohort_sampler_destroy(s);
    cohort_sampler_destroy(ref);
  }
  cohort_dataset_destroy(ds);
}

static int wait_ready(cohort_loader *l, int want) {
  for (int i = 0; i < 5000; i++) {
    if (cohort_loader_ready(l) == want) return 1;
    sleep_ms(1);
  }
  return 0;
}

TEST(loader_prefetches_in_the_background) {
  cohort_dataset *ds = tagged_dataset(64);
  cohort_sampler *s;
  ASSERT_OK(cohort_sampler_create(64, 1, 0, 1, 0, 0, &s));
  cohort_loader *l;
  ASSERT_OK(cohort_loader_create(ds, s, 8, 0, &l));
  /* Nobody has asked for a batch, yet both buffers fill: the thread works ahead. */
  ASSERT_TRUE(wait_ready(l, 2));
  ASSERT_EQ(cohort_sampler_cursor(s), 0); /* prefetching does not count as consumed */
  cohort_batch b;
  ASSERT_OK(cohort_loader_next(l, &b));
  ASSERT_EQ(b.size, 8);
  /* One buffer is ours now, the other is already gathered; it was ready before we asked, so no waiting was needed
   * for this batch and the one after it. */
  ASSERT_EQ(cohort_loader_ready(l), 1);
  double waited = cohort_loader_wait_seconds(l);
  ASSERT_OK(cohort_loader_next(l, &b));
  ASSERT_TRUE(cohort_loader_wait_seconds(l) == waited);
  /* After we hand the first buffer back (by the call above), the thread refills it without being asked. */
  ASSERT_TRUE(wait_ready(l, 1));
  cohort_loader_destroy(l); /* joins the thread with a batch ready and unclaimed */
  cohort_sampler_destroy(s);
  cohort_dataset_destroy(ds);
}

TEST(loader_resumes_mid_epoch) {
  cohort_dataset *ds = tagged_dataset(90);
  cohort_sampler *s;
  ASSERT_OK(cohort_sampler_create(90, 3, 2, 1, 9, 0, &s));
  cohort_loader *l;
  ASSERT_OK(cohort_loader_create(ds, s, 4, 0, &l));
  ASSERT_OK(cohort_loader_set_epoch(l, 2));
  cohort_batch b;
  for (int k = 0; k < 3; k++)
    ASSERT_OK(cohort_loader_next(l, &b));
  cohort_sampler_state st;
  cohort_sampler_get_state(s, &st); /* as a checkpoint after 3 steps would store it */
  ASSERT_EQ(st.cursor, 12);
  int64_t rest[30];
  size_t nrest = 0;
  for (;;) {
    ASSERT_OK(cohort_loader_next(l, &b));
    if (!b.size) break;
    memcpy(rest + nrest, b.indices, b.size * sizeof(int64_t));
    nrest += b.size;
  }
  ASSERT_EQ(nrest, 18);
  cohort_loader_destroy(l);
  cohort_sampler_destroy(s);

  /* A new job: fresh sampler at epoch 0, restored from the saved state. */
  ASSERT_OK(cohort_sampler_create(90, 3, 2, 1, 9, 0, &s));
  ASSERT_OK(cohort_loader_create(ds, s, 4, 0, &l));
  ASSERT_TRUE(wait_ready(l, 2)); /* epoch 0's batches are in flight: restore must drop them */
  ASSERT_OK(cohort_loader_restore(l, &st));
  ASSERT_EQ(cohort_loader_batches_left(l), 5);
  size_t got = 0;
  for (;;) {
    ASSERT_OK(cohort_loader_next(l, &b));
    if (!b.size) break;
    check_batch(&b, rest + got, b.size);
    if (cohort_test_failed) return;
    got += b.size;
  }
  ASSERT_EQ(got, 18);
  cohort_loader_destroy(l);
  cohort_sampler_destroy(s);
  cohort_dataset_destroy(ds);
}

/* The real Fashion-MNIST (package dataset-fashion-mnist). Exits 77, which ctest reports as skipped, without it. */
TEST(fmnist_real) {
  struct stat sb;
  if (stat(COHORT_FMNIST_DEFAULT_DIR "/train-images-idx3-ubyte.gz", &sb) != 0) {
    fprintf(stderr, "skip: %s is not installed\n", COHORT_FMNIST_DEFAULT_DIR);
    exit(77);
  }
  cohort_dataset *tr, *te;
  ASSERT_OK(cohort_dataset_load_fmnist(NULL, "train", 0.0f, 1.0f, &tr));
  ASSERT_OK(cohort_dataset_load_fmnist(COHORT_FMNIST_DEFAULT_DIR, "t10k", 0.0f, 1.0f, &te));
  ASSERT_EQ(cohort_dataset_size(tr), 60000);
  ASSERT_EQ(cohort_dataset_size(te), 10000);
  ASSERT_EQ(cohort_dataset_sample_floats(tr), 784);
  int per_class[10] = {0};
  for (size_t i = 0; i < 60000; i++)
    per_class[cohort_dataset_labels(tr)[i]]++;
  for (int c = 0; c < 10; c++)
    ASSERT_EQ(per_class[c], 6000);            /* the dataset is balanced */
  ASSERT_EQ(cohort_dataset_labels(tr)[0], 9); /* the first training image is an ankle boot */
  ASSERT_EQ(cohort_dataset_labels(te)[0], 9);
  double sum = 0, sq = 0;
  const float *x = cohort_dataset_images(tr);
  for (size_t i = 0; i < 60000 * 784; i++)
    sum += x[i], sq += (double)x[i] * x[i];
  double mean = sum / (60000.0 * 784), sd = sqrt(sq / (60000.0 * 784) - mean * mean);
  ASSERT_NEAR(mean, 0.2860, 5e-4); /* the published per-pixel statistics */
  ASSERT_NEAR(sd, 0.3530, 5e-4);
  cohort_dataset_destroy(tr);
  /* Normalize(0.2860, 0.3530) makes the training set roughly zero-mean and unit-variance. */
  ASSERT_OK(cohort_dataset_load_fmnist(NULL, "train", COHORT_FMNIST_MEAN, COHORT_FMNIST_STD, &tr));
  sum = 0;
  x = cohort_dataset_images(tr);
  for (size_t i = 0; i < 60000 * 784; i++)
    sum += x[i];
  ASSERT_NEAR(sum / (60000.0 * 784), 0.0, 2e-3);
  cohort_dataset_destroy(tr);
  cohort_dataset_destroy(te);
}

static void cleanup(void) {
  if (tmpdir[0]) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  }
}

__attribute__((constructor)) static void register_cleanup(void) { atexit(cleanup); }

#ifdef COHORT_TEST_FMNIST
COHORT_TEST_MAIN(TEST_CASE(fmnist_real))
#else
COHORT_TEST_MAIN(TEST_CASE(mt19937_reference), TEST_CASE(randperm_is_permutation),
                 TEST_CASE(idx_roundtrip_plain_and_gzip), TEST_CASE(dataset_normalizes_like_torch),
                 TEST_CASE(dataset_counts_must_agree), TEST_CASE(sampler_no_shuffle_is_strided),
                 TEST_CASE(sampler_padding_repeats_the_start), TEST_CASE(sampler_drop_last_is_disjoint),
                 TEST_CASE(sampler_deterministic_disjoint_and_epoch_dependent),
                 TEST_CASE(sampler_state_resumes_mid_epoch), TEST_CASE(loader_follows_the_sampler),
                 TEST_CASE(loader_prefetches_in_the_background), TEST_CASE(loader_resumes_mid_epoch))
#endif
