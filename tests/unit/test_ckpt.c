/* test_ckpt.c: CRC32C, and checkpoint round trips, lookups and atomic replacement. Corruption is in fault/. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "ckpt/crc32c.h"
#include "cohort/ckpt.h"
#include "cohort/data.h"
#include "test.h"

#define tmp_path cohort_test_tmp_path

/* Vectors from RFC 3720 (iSCSI), appendix B.4, and the customary "123456789" check value. */
TEST(crc32c_known_vectors) {
  uint8_t buf[32];
  ASSERT_EQ(cohort__crc32c(0, "123456789", 9), 0xE3069283u);
  ASSERT_EQ(cohort__crc32c_sw(0, "123456789", 9), 0xE3069283u);
  memset(buf, 0, 32);
  ASSERT_EQ(cohort__crc32c(0, buf, 32), 0x8A9136AAu);
  memset(buf, 0xff, 32);
  ASSERT_EQ(cohort__crc32c(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++)
    buf[i] = (uint8_t)i;
  ASSERT_EQ(cohort__crc32c(0, buf, 32), 0x46DD794Eu);
  ASSERT_EQ(cohort__crc32c_sw(0, buf, 32), 0x46DD794Eu);
}

TEST(crc32c_paths_agree_and_chain) {
  uint8_t buf[4099];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof buf; i++)
    buf[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
  for (size_t off = 0; off < 9; off++)
    for (size_t len = 0; len + off <= sizeof buf; len += 1 + len / 3) {
      uint32_t hw = cohort__crc32c(0, buf + off, len);
      ASSERT_EQ(hw, cohort__crc32c_sw(0, buf + off, len));
      size_t cut = len / 3;
      ASSERT_EQ(cohort__crc32c(cohort__crc32c(0, buf + off, cut), buf + off + cut, len - cut), hw);
    }
}

static int count_files(void) {
  DIR *d = opendir(cohort_test_tmp_dir());
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

TEST(roundtrip_is_bitwise) {
  /* Values that a lossy or text path would change: NaN payloads, -0, denormals, infinities. */
  uint32_t special[8] = {0x7fc00001u, 0xffc12345u, 0x80000000u, 0x00000001u,
                         0x007fffffu, 0x7f800000u, 0xff800000u, 0x3f800000u};
  float w1[3 * 4 * 5], b1[7], sp[8], empty[1];
  for (int i = 0; i < 60; i++)
    w1[i] = sinf((float)i) * 1e3f;
  for (int i = 0; i < 7; i++)
    b1[i] = (float)i / 3.0f;
  memcpy(sp, special, sizeof sp);
  uint8_t rng[40];
  for (int i = 0; i < 40; i++)
    rng[i] = (uint8_t)(255 - i);
  cohort_ckpt_writer *w;
  ASSERT_OK(cohort_ckpt_writer_create("cnn:c1=1x32x3,f2=128x10", &w));
  int64_t d_w1[3] = {3, 4, 5}, d_b1[1] = {7}, d_sp[2] = {2, 4}, d_empty[2] = {0, 9};
  ASSERT_OK(cohort_ckpt_add_f32(w, "layer1.weight", 3, d_w1, w1));
  ASSERT_OK(cohort_ckpt_add_f32(w, "layer1.bias", 1, d_b1, b1));
  ASSERT_OK(cohort_ckpt_add_f32(w, "special", 2, d_sp, sp));
  ASSERT_OK(cohort_ckpt_add_f32(w, "empty", 2, d_empty, empty));
  ASSERT_OK(cohort_ckpt_add_bytes(w, "rng", rng, sizeof rng));
  ASSERT_OK(cohort_ckpt_add_i64(w, "step", -1234567890123LL));
  /* The writer copied: changing the caller's tensor now does not change the file. */
  w1[0] = 42.0f;
  const char *path = tmp_path("model.ckpt");
  ASSERT_OK(cohort_ckpt_writer_save(w, path));
  w1[0] = sinf(0.0f) * 1e3f;
  ASSERT_EQ(count_files(), 1); /* no temporary left behind */

  cohort_ckpt *ck;
  ASSERT_OK(cohort_ckpt_load(path, "cnn:c1=1x32x3,f2=128x10", &ck));
  ASSERT_STREQ(cohort_ckpt_signature(ck), "cnn:c1=1x32x3,f2=128x10");
  ASSERT_EQ(cohort_ckpt_version(ck), COHORT_CKPT_VERSION);
  ASSERT_EQ(cohort_ckpt_count(ck), 6);
  float g_w1[60], g_b1[7], g_sp[8];
  ASSERT_OK(cohort_ckpt_get_f32(ck, "layer1.weight", 3, d_w1, g_w1));
  ASSERT_OK(cohort_ckpt_get_f32(ck, "layer1.bias", 1, d_b1, g_b1));
  ASSERT_OK(cohort_ckpt_get_f32(ck, "special", 2, d_sp, g_sp));
  ASSERT_EQ(memcmp(g_w1, w1, sizeof w1), 0);
  ASSERT_EQ(memcmp(g_b1, b1, sizeof b1), 0);
  ASSERT_EQ(memcmp(g_sp, special, sizeof special), 0);
  uint8_t g_rng[40];
  ASSERT_OK(cohort_ckpt_get_bytes(ck, "rng", g_rng, sizeof g_rng));
  ASSERT_EQ(memcmp(g_rng, rng, sizeof rng), 0);
  int64_t step;
  ASSERT_OK(cohort_ckpt_get_i64(ck, "step", &step));
  ASSERT_EQ(step, -1234567890123LL);
  cohort_ckpt_entry e;
  ASSERT_OK(cohort_ckpt_find(ck, "empty", &e));
  ASSERT_EQ(e.count, 0);
  ASSERT_EQ(e.ndims, 2);
  ASSERT_EQ(e.dims[1], 9);
  ASSERT_OK(cohort_ckpt_entry_at(ck, 0, &e)); /* entries keep the order they were added in */
  ASSERT_STREQ(e.name, "layer1.weight");
  ASSERT_EQ(e.dtype, COHORT_F32);
  ASSERT_EQ(e.nbytes, sizeof w1);
  ASSERT_OK(cohort_ckpt_entry_at(ck, 5, &e));
  ASSERT_STREQ(e.name, "step");
  ASSERT_EQ(e.dtype, COHORT_I64);
  ASSERT_EQ(e.ndims, 0);
  ASSERT_STATUS(cohort_ckpt_entry_at(ck, 6, &e), COHORT_ERR_INVALID);
  cohort_ckpt_destroy(ck);
  /* NULL skips the signature check (inspection tools). */
  ASSERT_OK(cohort_ckpt_load(path, NULL, &ck));
  cohort_ckpt_destroy(ck);
  cohort_ckpt_writer_destroy(w);
}

TEST(lookup_checks_name_dtype_and_shape) {
  cohort_ckpt_writer *w;
  ASSERT_OK(cohort_ckpt_writer_create("m", &w));
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t d[2] = {2, 3};
  ASSERT_OK(cohort_ckpt_add_f32(w, "fc.weight", 2, d, x));
  ASSERT_OK(cohort_ckpt_add_i64(w, "step", 7));
  ASSERT_STATUS(cohort_ckpt_add_f32(w, "fc.weight", 2, d, x), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "'fc.weight' was already added");
  ASSERT_STATUS(cohort_ckpt_add_f32(w, "", 2, d, x), COHORT_ERR_INVALID);
  const char *path = tmp_path("lookup.ckpt");
  ASSERT_OK(cohort_ckpt_writer_save(w, path));
  cohort_ckpt_writer_destroy(w);
  cohort_ckpt *ck;
  ASSERT_OK(cohort_ckpt_load(path, "m", &ck));
  float y[6];
  int64_t wrong[2] = {3, 2};
  ASSERT_STATUS(cohort_ckpt_get_f32(ck, "fc.weight", 2, wrong, y), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "entry 'fc.weight' is f32 [2, 3], expected f32 [3, 2]");
  ASSERT_CONTAINS(cohort_last_error(), path);
  ASSERT_STATUS(cohort_ckpt_get_f32(ck, "fc.bias", 1, d, y), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "has no entry 'fc.bias'");
  ASSERT_STATUS(cohort_ckpt_get_f32(ck, "step", 0, NULL, y), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "is i64 [], expected f32 []");
  uint8_t b[48];
  ASSERT_STATUS(cohort_ckpt_get_bytes(ck, "fc.weight", b, 24), COHORT_ERR_INVALID);
  int64_t step = 0;
  ASSERT_OK(cohort_ckpt_get_i64(ck, "step", &step));
  ASSERT_EQ(step, 7);
  cohort_ckpt_destroy(ck);
}

TEST(save_replaces_the_previous_checkpoint) {
  const char *path = tmp_path("replace.ckpt");
  for (int round = 0; round < 3; round++) {
    cohort_ckpt_writer *w;
    ASSERT_OK(cohort_ckpt_writer_create("m", &w));
    ASSERT_OK(cohort_ckpt_add_i64(w, "step", 100 + round));
    /* A different number of entries each round, so the file changes length too. */
    for (int k = 0; k < round; k++) {
      char name[16];
      snprintf(name, sizeof name, "extra%d", k);
      ASSERT_OK(cohort_ckpt_add_i64(w, name, k));
    }
    ASSERT_OK(cohort_ckpt_writer_save(w, path));
    cohort_ckpt_writer_destroy(w);
    cohort_ckpt *ck;
    ASSERT_OK(cohort_ckpt_load(path, "m", &ck));
    int64_t step;
    ASSERT_OK(cohort_ckpt_get_i64(ck, "step", &step));
    ASSERT_EQ(step, 100 + round);
    ASSERT_EQ(cohort_ckpt_count(ck), (size_t)round + 1);
    cohort_ckpt_destroy(ck);
  }
  /* Saving into a directory that does not exist fails, naming the temporary file, and leaves nothing behind. */
  cohort_ckpt_writer *w;
  ASSERT_OK(cohort_ckpt_writer_create("m", &w));
  ASSERT_STATUS(cohort_ckpt_writer_save(w, tmp_path("no/such/dir/x.ckpt")), COHORT_ERR_SYSTEM);
  ASSERT_CONTAINS(cohort_last_error(), "x.ckpt.tmp.");
  cohort_ckpt_writer_destroy(w);
}

/* A writer killed mid-save leaves PATH.tmp.<pid>: the next save removes those of processes that are gone, and keeps
 * those of live ones and every other file. */
TEST(save_removes_the_files_of_dead_writers) {
  char path[4096], dead[4200], alive[4200], other[4200], beside[4200];
  snprintf(path, sizeof path, "%s", tmp_path("left.ckpt")); /* tmp_path's string is overwritten by the next call */
  snprintf(dead, sizeof dead, "%s.tmp.2147483646", path);   /* above any pid_max: no such process */
  snprintf(alive, sizeof alive, "%s.tmp.%ld", path, (long)getppid());
  snprintf(other, sizeof other, "%s.tmp.12ab", path);
  snprintf(beside, sizeof beside, "%s.tmp.2147483646", tmp_path("another.ckpt"));
  const char *files[] = {dead, alive, other, beside};
  for (int i = 0; i < 4; i++) {
    FILE *f = fopen(files[i], "w");
    ASSERT_TRUE(f != NULL);
    fputs("left by a killed writer", f);
    fclose(f);
  }
  cohort_ckpt_writer *w;
  ASSERT_OK(cohort_ckpt_writer_create("m", &w));
  ASSERT_OK(cohort_ckpt_add_i64(w, "step", 7));
  ASSERT_OK(cohort_ckpt_writer_save(w, path));
  cohort_ckpt_writer_destroy(w);
  ASSERT_EQ(access(dead, F_OK), -1);
  ASSERT_EQ(access(alive, F_OK), 0);
  ASSERT_EQ(access(other, F_OK), 0);
  ASSERT_EQ(access(beside, F_OK), 0);
  cohort_ckpt *ck;
  ASSERT_OK(cohort_ckpt_load(path, "m", &ck));
  cohort_ckpt_destroy(ck);
  for (int i = 1; i < 4; i++)
    unlink(files[i]);
}

/* What a training job stores to resume: the sampler position travels as bytes next to the step. */
TEST(sampler_state_travels_in_a_checkpoint) {
  cohort_sampler *s;
  ASSERT_OK(cohort_sampler_create(50, 2, 0, 1, 3, 0, &s));
  ASSERT_OK(cohort_sampler_set_epoch(s, 4));
  int64_t idx[9], after[16], resumed[16];
  ASSERT_EQ(cohort_sampler_next(s, idx, 9), 9);
  cohort_sampler_state st;
  cohort_sampler_get_state(s, &st);
  cohort_ckpt_writer *w;
  ASSERT_OK(cohort_ckpt_writer_create("m", &w));
  ASSERT_OK(cohort_ckpt_add_bytes(w, "sampler", &st, sizeof st));
  const char *path = tmp_path("sampler.ckpt");
  ASSERT_OK(cohort_ckpt_writer_save(w, path));
  cohort_ckpt_writer_destroy(w);
  ASSERT_EQ(cohort_sampler_next(s, after, 16), 16);

  cohort_ckpt *ck;
  ASSERT_OK(cohort_ckpt_load(path, "m", &ck));
  cohort_sampler_state got;
  ASSERT_OK(cohort_ckpt_get_bytes(ck, "sampler", &got, sizeof got));
  cohort_ckpt_destroy(ck);
  cohort_sampler *t;
  ASSERT_OK(cohort_sampler_create(50, 2, 0, 1, 3, 0, &t));
  ASSERT_OK(cohort_sampler_restore(t, &got));
  ASSERT_EQ(cohort_sampler_next(t, resumed, 16), 16);
  ASSERT_EQ(memcmp(after, resumed, sizeof after), 0);
  cohort_sampler_destroy(t);
  cohort_sampler_destroy(s);
}

COHORT_TEST_MAIN(TEST_CASE(crc32c_known_vectors), TEST_CASE(crc32c_paths_agree_and_chain),
                 TEST_CASE(roundtrip_is_bitwise), TEST_CASE(lookup_checks_name_dtype_and_shape),
                 TEST_CASE(save_replaces_the_previous_checkpoint), TEST_CASE(save_removes_the_files_of_dead_writers),
                 TEST_CASE(sampler_state_travels_in_a_checkpoint))
