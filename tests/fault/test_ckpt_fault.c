/*
 * test_ckpt_fault.c: checkpoints that are really truncated, corrupted, from another version or another model, and
 * writers that are really killed (SIGKILL) in the middle of a save. Each must give its own clear error, and a
 * killed save must leave the previous checkpoint loadable and unchanged.
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/crc32c.h"
#include "cohort/ckpt.h"
#include "test.h"

#define tmp_path cohort_test_tmp_path

#define W_ROWS 4
#define W_COLS 8

/* The reference checkpoint: signature "sigA", "w" f32 [4, 8] filled from seed, "step" i64. */
static cohort_status save_ref(const char *path, float seed, int64_t step, size_t extra_floats) {
  cohort_ckpt_writer *w;
  cohort_status st = cohort_ckpt_writer_create("sigA", &w);
  if (st != COHORT_OK) return st;
  float x[W_ROWS * W_COLS];
  for (int i = 0; i < W_ROWS * W_COLS; i++)
    x[i] = seed + (float)i * 0.5f;
  int64_t d[2] = {W_ROWS, W_COLS};
  st = cohort_ckpt_add_f32(w, "w", 2, d, x);
  if (st == COHORT_OK) st = cohort_ckpt_add_i64(w, "step", step);
  if (st == COHORT_OK && extra_floats) { /* a big tensor makes a save slow enough to be killed in the middle */
    float *big = calloc(extra_floats, sizeof(float));
    int64_t n = (int64_t)extra_floats;
    for (size_t i = 0; i < extra_floats; i++)
      big[i] = seed;
    st = cohort_ckpt_add_f32(w, "big", 1, &n, big);
    free(big);
  }
  if (st == COHORT_OK) st = cohort_ckpt_writer_save(w, path);
  cohort_ckpt_writer_destroy(w);
  return st;
}

/* Loads path and checks it holds save_ref(seed, step). */
static int ref_ok(const char *path, float seed, int64_t step) {
  cohort_ckpt *ck;
  if (cohort_ckpt_load(path, "sigA", &ck) != COHORT_OK) {
    fprintf(stderr, "load failed: %s\n", cohort_last_error());
    return 0;
  }
  float x[W_ROWS * W_COLS];
  int64_t d[2] = {W_ROWS, W_COLS}, s = -1;
  int ok = cohort_ckpt_get_f32(ck, "w", 2, d, x) == COHORT_OK && cohort_ckpt_get_i64(ck, "step", &s) == COHORT_OK &&
           s == step;
  for (int i = 0; ok && i < W_ROWS * W_COLS; i++)
    ok = x[i] == seed + (float)i * 0.5f;
  cohort_ckpt_destroy(ck);
  return ok;
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*len + 1);
  if (fread(b, 1, *len, f) != *len) abort();
  fclose(f);
  return b;
}

static void spit(const char *path, const uint8_t *b, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, len, f) != len) abort();
  fclose(f);
}

/* Layout of the reference file per docs/checkpoint-format.md. */
enum {
  SIG_AT = 32,
  E1_AT = SIG_AT + 4,
  W_DATA_AT = E1_AT + 8 + 1 + 2 * 8 + 8,
  E2_AT = W_DATA_AT + W_ROWS * W_COLS * 4,
  STEP_AT = E2_AT + 8 + 4 + 8,
  CRC_AT = STEP_AT + 8,
  REF_SIZE = CRC_AT + 4,
};

static const char *expect_load_error(const char *path, const char *expected_sig) {
  cohort_ckpt *ck = NULL;
  cohort_status st = cohort_ckpt_load(path, expected_sig, &ck);
  if (st == COHORT_OK) {
    cohort_ckpt_destroy(ck);
    return NULL;
  }
  return st == COHORT_ERR_INVALID ? cohort_last_error() : NULL;
}

TEST(layout_matches_the_documentation) {
  const char *path = tmp_path("ref.ckpt");
  ASSERT_OK(save_ref(path, 1.0f, 5, 0));
  size_t len;
  uint8_t *b = slurp(path, &len);
  ASSERT_EQ(len, REF_SIZE);
  ASSERT_EQ(memcmp(b, "COHORTCK", 8), 0);
  ASSERT_EQ(b[8], COHORT_CKPT_VERSION);
  uint64_t total;
  memcpy(&total, b + 16, 8);
  ASSERT_EQ(total, REF_SIZE);
  ASSERT_EQ(memcmp(b + SIG_AT, "sigA", 4), 0);
  ASSERT_EQ(b[E1_AT + 4], COHORT_F32);
  ASSERT_EQ(b[E1_AT + 5], 2);
  float f0;
  memcpy(&f0, b + W_DATA_AT, 4);
  ASSERT_TRUE(f0 == 1.0f);
  int64_t step;
  memcpy(&step, b + STEP_AT, 8);
  ASSERT_EQ(step, 5);
  uint32_t crc;
  memcpy(&crc, b + CRC_AT, 4);
  ASSERT_EQ(crc, cohort__crc32c(0, b, CRC_AT));
  free(b);
}

TEST(truncated_at_many_points) {
  const char *ref = tmp_path("ref.ckpt");
  ASSERT_OK(save_ref(ref, 1.0f, 5, 0));
  size_t len;
  uint8_t *b = slurp(ref, &len);
  const size_t cuts[] = {0,           3,      8,           11, 12, 20, 31, 32, SIG_AT + 2, E1_AT + 5, W_DATA_AT + 17,
                         STEP_AT + 3, CRC_AT, REF_SIZE - 1};
  char path[512], want[64];
  snprintf(path, sizeof path, "%s", tmp_path("cut.ckpt"));
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    spit(path, b, cuts[i]);
    const char *err = expect_load_error(path, "sigA");
    ASSERT_TRUE(err != NULL);
    snprintf(want, sizeof want, "truncated at byte %zu", cuts[i]);
    ASSERT_CONTAINS(err, want);
    ASSERT_CONTAINS(err, path);
  }
  free(b);
}

TEST(flipped_bytes_fail_the_checksum) {
  const char *ref = tmp_path("ref.ckpt");
  ASSERT_OK(save_ref(ref, 1.0f, 5, 0));
  size_t len;
  uint8_t *b = slurp(ref, &len);
  /* tensor data, the step, an entry name, a dimension, the signature, the entry count, the checksum itself */
  const size_t at[] = {W_DATA_AT + 6, STEP_AT, E1_AT + 8, E1_AT + 9, SIG_AT + 1, 24, CRC_AT + 2};
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("flip.ckpt"));
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    for (int bit = 0; bit < 8; bit += 7) {
      b[at[i]] ^= (uint8_t)(1u << bit);
      spit(path, b, len);
      b[at[i]] ^= (uint8_t)(1u << bit);
      const char *err = expect_load_error(path, "sigA");
      ASSERT_TRUE(err != NULL);
      ASSERT_CONTAINS(err, "checksum mismatch: file is corrupt");
      ASSERT_CONTAINS(err, path);
    }
  }
  /* and the untouched copy still loads */
  spit(path, b, len);
  ASSERT_TRUE(ref_ok(path, 1.0f, 5));
  free(b);
}

TEST(other_version_magic_or_length) {
  const char *ref = tmp_path("ref.ckpt");
  ASSERT_OK(save_ref(ref, 1.0f, 5, 0));
  size_t len;
  uint8_t *b = slurp(ref, &len);
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("bad.ckpt"));
  b[8] = 7;
  spit(path, b, len);
  const char *err = expect_load_error(path, "sigA");
  ASSERT_TRUE(err != NULL);
  ASSERT_CONTAINS(err, "unsupported version 7");
  b[8] = 0;
  spit(path, b, len);
  ASSERT_CONTAINS(expect_load_error(path, "sigA"), "unsupported version 0");
  b[8] = COHORT_CKPT_VERSION;
  b[0] = 'X';
  spit(path, b, len);
  ASSERT_CONTAINS(expect_load_error(path, "sigA"), "is not a cohort checkpoint");
  b[0] = 'C';
  /* bytes appended after a complete file */
  uint8_t *longer = malloc(len + 3);
  memcpy(longer, b, len);
  memset(longer + len, 0xAB, 3);
  spit(path, longer, len + 3);
  ASSERT_CONTAINS(expect_load_error(path, "sigA"), "bytes were appended");
  free(longer);
  /* missing file */
  ASSERT_CONTAINS(expect_load_error(tmp_path("absent.ckpt"), "sigA"), "cannot open checkpoint");
  free(b);
}

TEST(other_model_signature) {
  const char *ref = tmp_path("ref.ckpt");
  ASSERT_OK(save_ref(ref, 1.0f, 5, 0));
  const char *err = expect_load_error(ref, "sigB");
  ASSERT_TRUE(err != NULL);
  ASSERT_CONTAINS(err, "written by a model with signature \"sigA\", this model is \"sigB\"");
  ASSERT_CONTAINS(err, ref);
}

/* A file with a valid checksum but a broken structure (a buggy or hostile writer): the parser must not trust it. */
TEST(malformed_with_valid_checksum) {
  const char *ref = tmp_path("ref.ckpt");
  ASSERT_OK(save_ref(ref, 1.0f, 5, 0));
  size_t len;
  uint8_t *b = slurp(ref, &len);
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("malformed.ckpt"));
  struct {
    size_t at;
    uint8_t value;
  } edits[] = {
      {24, 3},              /* three entries announced, two present */
      {24, 1},              /* one announced: bytes left over */
      {E1_AT + 5, 9},       /* more dimensions than allowed */
      {E1_AT + 4, 99},      /* unknown dtype */
      {E1_AT, 200},         /* a name running over the data */
      {E1_AT + 9, 5},       /* a dimension that disagrees with the byte count */
      {W_DATA_AT - 8, 200}, /* a byte count that disagrees with the shape */
      {28, 250},            /* a signature longer than the file allows */
  };
  for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
    uint8_t save = b[edits[i].at];
    b[edits[i].at] = edits[i].value;
    uint32_t crc = cohort__crc32c(0, b, CRC_AT);
    uint8_t oldcrc[4];
    memcpy(oldcrc, b + CRC_AT, 4);
    memcpy(b + CRC_AT, &crc, 4);
    spit(path, b, len);
    b[edits[i].at] = save;
    memcpy(b + CRC_AT, oldcrc, 4);
    const char *err = expect_load_error(path, "sigA");
    if (!err) TEST_FAIL_("edit %zu (byte %zu = %u) was accepted", i, edits[i].at, edits[i].value);
    ASSERT_CONTAINS(err, "malformed");
  }
  free(b);
}

static int file_size(const char *path, off_t *size) {
  struct stat sb;
  if (stat(path, &sb) != 0) return 0;
  *size = sb.st_size;
  return 1;
}

/* The writer dies (SIGKILL from the test hook) after exactly kill_at bytes of the new file. */
TEST(killed_during_save_keeps_the_old_checkpoint) {
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("live.ckpt"));
  ASSERT_OK(save_ref(path, 1.0f, 100, 0));
  const long long kill_at[] = {0, 10, 32, 50, W_DATA_AT + 40, REF_SIZE - 2};
  for (size_t i = 0; i < sizeof kill_at / sizeof kill_at[0]; i++) {
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
      cohort__ckpt_test_kill_after = kill_at[i];
      save_ref(path, 2.0f, 200, 0);
      _exit(3); /* the hook should have killed us */
    }
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    ASSERT_EQ(WTERMSIG(status), SIGKILL);
    /* The half-written temporary is there, exactly as long as the writer got... */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)pid);
    off_t size;
    ASSERT_TRUE(file_size(tmp, &size));
    ASSERT_EQ(size, kill_at[i]);
    /* ...it is refused as truncated... */
    const char *err = expect_load_error(tmp, "sigA");
    ASSERT_TRUE(err != NULL);
    ASSERT_CONTAINS(err, "truncated");
    unlink(tmp);
    /* ...and the checkpoint at path is the old one, whole. */
    ASSERT_TRUE(ref_ok(path, 1.0f, 100));
  }
  /* A save that is not interrupted then replaces it. */
  ASSERT_OK(save_ref(path, 2.0f, 200, 0));
  ASSERT_TRUE(ref_ok(path, 2.0f, 200));
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* No hook: a child saves two checkpoints in turn, forever, and is killed at an arbitrary moment. Whenever that is,
 * the file at path must be one of the two, complete. */
TEST(killed_at_random_moments) {
  char path[512];
  snprintf(path, sizeof path, "%s", tmp_path("race.ckpt"));
  const size_t big = 1 << 18; /* 1 MiB per save */
  ASSERT_OK(save_ref(path, 1.0f, 1, big));
  unsigned seed = (unsigned)time(NULL);
  int torn = 0;
  for (int round = 0; round < 6; round++) {
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
      for (int k = 0;; k++)
        save_ref(path, k % 2 ? 1.0f : 2.0f, k % 2 ? 1 : 2, big);
    }
    sleep_us(2000 + (long)(rand_r(&seed) % 20000));
    kill(pid, SIGKILL);
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    ASSERT_TRUE(ref_ok(path, 1.0f, 1) || ref_ok(path, 2.0f, 2));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)pid);
    off_t size;
    if (file_size(tmp, &size)) {
      torn++;
      unlink(tmp);
    }
  }
  printf("    %d of 6 kills left a partial temporary behind\n", torn);
}

COHORT_TEST_MAIN(TEST_CASE(layout_matches_the_documentation), TEST_CASE(truncated_at_many_points),
                 TEST_CASE(flipped_bytes_fail_the_checksum), TEST_CASE(other_version_magic_or_length),
                 TEST_CASE(other_model_signature), TEST_CASE(malformed_with_valid_checksum),
                 TEST_CASE(killed_during_save_keeps_the_old_checkpoint), TEST_CASE(killed_at_random_moments))
