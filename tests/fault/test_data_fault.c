/*
 * test_data_fault.c: IDX files that are really truncated (plain and gzip), have bytes appended, a wrong magic
 * number, impossible dimensions, a corrupted gzip stream, or are missing. Each must fail with a message that names
 * the file and says what is wrong.
 */
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "cohort/data.h"
#include "test.h"

#define tmp_path cohort_test_tmp_path

static void spit(const char *path, const uint8_t *b, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, len, f) != len) abort();
  fclose(f);
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) abort();
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*len + 1);
  if (fread(b, 1, *len, f) != *len) abort();
  fclose(f);
  return b;
}

static void spit_gz(const char *path, const uint8_t *b, size_t len) {
  gzFile gz = gzopen(path, "wb");
  if (!gz || gzwrite(gz, b, (unsigned)len) != (int)len) abort();
  gzclose(gz);
}

/* An images file in IDX form: 10 images of 5x6 (16-byte header + 300 bytes). */
static uint8_t *images_idx(size_t *len) {
  *len = 16 + 300;
  uint8_t *b = calloc(*len + 16, 1);
  b[2] = 0x08, b[3] = 3;
  b[7] = 10, b[11] = 5, b[15] = 6;
  for (int i = 0; i < 300; i++)
    b[16 + i] = (uint8_t)(i * 7);
  return b;
}

static const char *read_error(const char *path) {
  cohort_idx idx;
  cohort_status st = cohort_idx_read(path, "images", &idx);
  if (st == COHORT_OK) {
    cohort_idx_free(&idx);
    return NULL;
  }
  if (idx.data != NULL || idx.count != 0) return NULL; /* a failed read leaves the output empty */
  return st == COHORT_ERR_INVALID ? cohort_last_error() : NULL;
}

TEST(truncated_plain_and_gzip) {
  size_t len;
  uint8_t *b = images_idx(&len);
  char path[512], gzpath[512], want[128];
  snprintf(path, sizeof path, "%s", tmp_path("img"));
  snprintf(gzpath, sizeof gzpath, "%s", tmp_path("img.gz"));
  /* the whole file reads */
  spit(path, b, len);
  ASSERT_TRUE(read_error(path) == NULL);
  /* cut in the payload: the message gives both byte counts */
  const size_t cuts[] = {16, 17, 200, 315};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    for (int gz = 0; gz <= 1; gz++) {
      const char *p = gz ? gzpath : path;
      if (gz)
        spit_gz(p, b, cuts[i]); /* a well-formed gzip of a short IDX */
      else
        spit(p, b, cuts[i]);
      const char *err = read_error(p);
      ASSERT_TRUE(err != NULL);
      snprintf(want, sizeof want, "expected 300 bytes of images, got %zu", cuts[i] - 16);
      ASSERT_CONTAINS(err, want);
      ASSERT_CONTAINS(err, p);
    }
  }
  /* cut in the header */
  spit(path, b, 2);
  ASSERT_CONTAINS(read_error(path), "expected a 4-byte IDX magic number, got 2 bytes");
  spit(path, b, 9);
  ASSERT_CONTAINS(read_error(path), "truncated in its header: expected 12 bytes of dimensions, got 5");
  /* a gzip stream cut short (a partial download): zlib's complaint is passed on */
  spit_gz(gzpath, b, len);
  size_t zlen;
  uint8_t *z = slurp(gzpath, &zlen);
  spit(gzpath, z, zlen / 2);
  const char *err = read_error(gzpath);
  ASSERT_TRUE(err != NULL);
  ASSERT_CONTAINS(err, "truncated");
  ASSERT_CONTAINS(err, "bytes of images, got");
  /* half the 8-byte gzip trailer missing: every payload byte is there but the stream is incomplete */
  spit(gzpath, z, zlen - 4);
  err = read_error(gzpath);
  ASSERT_TRUE(err != NULL);
  ASSERT_CONTAINS(err, "unexpected end of file");
  free(z);
  free(b);
}

TEST(trailing_bytes) {
  size_t len;
  uint8_t *b = images_idx(&len);
  b[len] = 0x42;
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("img-trailing"));
  spit(path, b, len + 1);
  ASSERT_CONTAINS(read_error(path), "trailing bytes after its payload");
  snprintf(path, sizeof path, "%s", tmp_path("img-trailing.gz"));
  spit_gz(path, b, len + 5);
  ASSERT_CONTAINS(read_error(path), "trailing bytes after its payload");
  free(b);
}

TEST(bad_magic_type_and_dims) {
  size_t len;
  uint8_t *b = images_idx(&len);
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("img-bad"));
  b[0] = 0x1f; /* e.g. a gzip file with its .gz suffix lost would still read; this is garbage */
  spit(path, b, len);
  ASSERT_CONTAINS(read_error(path), "is not an IDX file: magic number 0x1f000803");
  b[0] = 0;
  b[2] = 0x0A; /* not an IDX element type */
  spit(path, b, len);
  ASSERT_CONTAINS(read_error(path), "is not an IDX file");
  b[2] = 0x08;
  b[3] = 0;
  spit(path, b, len);
  ASSERT_CONTAINS(read_error(path), "0 dimensions in the IDX header");
  b[3] = 9;
  spit(path, b, len);
  ASSERT_CONTAINS(read_error(path), "9 dimensions in the IDX header");
  /* dimensions that do not match the payload: 11 images announced, 10 present */
  b[3] = 3;
  b[7] = 11;
  spit(path, b, len);
  ASSERT_CONTAINS(read_error(path), "expected 330 bytes of images, got 300");
  /* dimensions too large to exist: refused by the length check, not by a huge allocation */
  b[4] = b[5] = b[6] = b[7] = 0xff;
  spit(path, b, len);
  ASSERT_CONTAINS(read_error(path), "expected 128849018850 bytes of images, got 300");
  b[8] = b[9] = b[10] = b[11] = 0xff;
  b[12] = b[13] = b[14] = b[15] = 0xff;
  spit(path, b, len);
  ASSERT_CONTAINS(read_error(path), "dimensions overflow the address space");
  free(b);
}

TEST(corrupt_gzip_stream) {
  size_t len;
  uint8_t *b = images_idx(&len);
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("img-corrupt.gz"));
  spit_gz(path, b, len);
  size_t zlen;
  uint8_t *z = slurp(path, &zlen);
  int failures = 0;
  /* Flip a byte at several places in the deflate data and the trailer (CRC32, length); every one must fail. */
  for (size_t at = 12; at < zlen; at += 7) {
    z[at] ^= 0x5a;
    spit(path, z, zlen);
    z[at] ^= 0x5a;
    const char *err = read_error(path);
    if (!err) TEST_FAIL_("a flipped byte at %zu of %zu went unnoticed", at, zlen);
    ASSERT_CONTAINS(err, path);
    failures++;
  }
  ASSERT_TRUE(failures > 5);
  free(z);
  free(b);
}

TEST(missing_file_says_how_to_get_it) {
  const char *err = read_error("/nonexistent/fashion/train-images-idx3-ubyte.gz");
  ASSERT_TRUE(err != NULL);
  ASSERT_CONTAINS(err, "/nonexistent/fashion/train-images-idx3-ubyte.gz");
  ASSERT_CONTAINS(err, "No such file or directory");
  ASSERT_CONTAINS(err, "apt-get install dataset-fashion-mnist");
  ASSERT_CONTAINS(err, "--data DIR");
  cohort_dataset *ds = NULL;
  ASSERT_STATUS(cohort_dataset_load_fmnist(tmp_path("empty-dir"), "train", 0, 1, &ds), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "empty-dir/train-images-idx3-ubyte.gz");
  ASSERT_STATUS(cohort_dataset_load_fmnist(NULL, "valid", 0, 1, &ds), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "\"train\" or \"t10k\"");
}

/* A directory that looks like Fashion-MNIST but is not: 27x28 images, or labels that disagree. */
TEST(fmnist_directory_checks) {
  char dir[512], ip[600], lp[600];
  snprintf(dir, sizeof dir, "%s", tmp_path("fake-fmnist"));
  mkdir(dir, 0755);
  snprintf(ip, sizeof ip, "%s/t10k-images-idx3-ubyte.gz", dir);
  snprintf(lp, sizeof lp, "%s/t10k-labels-idx1-ubyte.gz", dir);
  uint8_t *px = calloc(4 * 27 * 28, 1);
  uint8_t lb[4] = {1, 2, 3, 4};
  cohort_idx im = {.type = COHORT_IDX_U8, .ndims = 3, .dims = {4, 27, 28}, .count = 4 * 27 * 28, .data = px};
  cohort_idx la = {.type = COHORT_IDX_U8, .ndims = 1, .dims = {4}, .count = 4, .data = lb};
  ASSERT_OK(cohort_idx_write(ip, &im, 1));
  ASSERT_OK(cohort_idx_write(lp, &la, 1));
  cohort_dataset *ds = NULL;
  ASSERT_STATUS(cohort_dataset_load_fmnist(dir, "t10k", 0, 1, &ds), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "1x27x28 images; Fashion-MNIST's are 1x28x28");
  im.dims[1] = 28;
  im.count = 4 * 28 * 28;
  free(px);
  px = calloc(im.count, 1);
  im.data = px;
  ASSERT_OK(cohort_idx_write(ip, &im, 1));
  lb[2] = 10;
  ASSERT_OK(cohort_idx_write(lp, &la, 1));
  ASSERT_STATUS(cohort_dataset_load_fmnist(dir, "t10k", 0, 1, &ds), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "label 10 of sample 2 is outside 0..9");
  lb[2] = 3;
  la.dims[0] = la.count = 3;
  ASSERT_OK(cohort_idx_write(lp, &la, 1));
  ASSERT_STATUS(cohort_dataset_load_fmnist(dir, "t10k", 0, 1, &ds), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "holds 4 images");
  la.dims[0] = la.count = 4;
  ASSERT_OK(cohort_idx_write(lp, &la, 1));
  ASSERT_OK(cohort_dataset_load_fmnist(dir, "t10k", 0, 1, &ds));
  ASSERT_EQ(cohort_dataset_size(ds), 4);
  cohort_dataset_destroy(ds);
  /* Unpacked files, as torchvision leaves them: the same names without .gz are found and read. Labels differ from the
   * gzipped ones above so that the test sees which file was read. */
  ASSERT_EQ(unlink(ip), 0);
  ASSERT_EQ(unlink(lp), 0);
  ip[strlen(ip) - 3] = '\0';
  lp[strlen(lp) - 3] = '\0';
  ASSERT_OK(cohort_idx_write(ip, &im, 0));
  lb[0] = 7;
  ASSERT_OK(cohort_idx_write(lp, &la, 0));
  ASSERT_OK(cohort_dataset_load_fmnist(dir, "t10k", 0, 1, &ds));
  ASSERT_EQ(cohort_dataset_size(ds), 4);
  ASSERT_EQ(cohort_dataset_labels(ds)[0], 7);
  ASSERT_EQ(cohort_dataset_labels(ds)[3], 4);
  cohort_dataset_destroy(ds);
  unlink(ip);
  unlink(lp);
  free(px);
}

COHORT_TEST_MAIN(TEST_CASE(truncated_plain_and_gzip), TEST_CASE(trailing_bytes), TEST_CASE(bad_magic_type_and_dims),
                 TEST_CASE(corrupt_gzip_stream), TEST_CASE(missing_file_says_how_to_get_it),
                 TEST_CASE(fmnist_directory_checks))
