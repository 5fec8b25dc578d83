/* test_core.c: status names, error text, kept failures, dtype/op names, env knob parsing, and docs/env.md covering
 * every knob. */
#include <stdlib.h>

#include "core/config.h"
#include "core/copy.h"
#include "core/env.h"
#include "core/error.h"
#include "core/failure.h"
#include "test.h"

TEST(strerror_names_every_status) {
  ASSERT_STREQ(cohort_strerror(COHORT_OK), "success");
  ASSERT_STREQ(cohort_strerror(COHORT_ERR_REMOTE), "remote failure");
  ASSERT_STREQ(cohort_strerror(COHORT_ERR_MISMATCH), "mismatch between ranks");
  ASSERT_STREQ(cohort_strerror((cohort_status)999), "unknown status");
}

TEST(error_text_is_kept_per_thread_and_formatted) {
  cohort__error_clear();
  ASSERT_STREQ(cohort_last_error(), "");
  ASSERT_EQ(cohort__error(COHORT_ERR_TIMEOUT, "rank %d is late", 3), COHORT_ERR_TIMEOUT);
  ASSERT_STREQ(cohort_last_error(), "rank 3 is late");
  ASSERT_EQ(cohort__error_errno(COHORT_ERR_SYSTEM, 2, "open %s", "x"), COHORT_ERR_SYSTEM);
  ASSERT_STREQ(cohort_last_error(), "open x: No such file or directory");
}

TEST(a_failure_keeps_the_first_and_a_request_the_first) {
  cohort__failure f = {0};
  cohort__error_clear();
  ASSERT_EQ(cohort__failure_raise(&f), COHORT_OK);
  ASSERT_STREQ(cohort_last_error(), "");
  ASSERT_EQ(cohort__failure_keep(&f, COHORT_ERR_MISMATCH, "rank %d called %s", 2, "barrier"), 1);
  ASSERT_EQ(cohort__failure_keep(&f, COHORT_ERR_REMOTE, "rank 2 closed its connection"), 0); /* a consequence */
  ASSERT_EQ(cohort__failure_raise(&f), COHORT_ERR_MISMATCH);
  ASSERT_STREQ(cohort_last_error(), "rank 2 called barrier");

  cohort__failure_request r;
  cohort__failure_request_init(&r);
  ASSERT_EQ(cohort__failure_requested(&r), 0);
  cohort__failure_request_make(&r, COHORT_ERR_REMOTE, "communicator destroyed");
  cohort__failure_request_make(&r, COHORT_ERR_TIMEOUT, "too late");
  ASSERT_EQ(cohort__failure_requested(&r), 1);
  ASSERT_EQ(r.status, COHORT_ERR_REMOTE);
  ASSERT_STREQ(r.message, "communicator destroyed");
}

TEST(dtype_and_op_names_round_trip) {
  for (int d = 0; d < COHORT_DTYPE_COUNT; d++) {
    cohort_dtype back;
    ASSERT_OK(cohort_dtype_parse(cohort_dtype_name((cohort_dtype)d), &back));
    ASSERT_EQ(back, d);
  }
  ASSERT_EQ(cohort_dtype_size(COHORT_BF16), 2);
  ASSERT_EQ(cohort_dtype_size(COHORT_I64), 8);
  ASSERT_EQ(cohort_dtype_size((cohort_dtype)77), 0);
  cohort_op op;
  ASSERT_OK(cohort_op_parse("prod", &op));
  ASSERT_EQ(op, COHORT_PROD);
  cohort_dtype d;
  ASSERT_STATUS(cohort_dtype_parse("float", &d), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "unknown dtype 'float'");
  /* NULL is refused, not dereferenced (both segfaulted). */
  ASSERT_STATUS(cohort_dtype_parse(NULL, &d), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "name is NULL");
  ASSERT_STATUS(cohort_dtype_parse("f32", NULL), COHORT_ERR_INVALID);
  ASSERT_STATUS(cohort_op_parse(NULL, &op), COHORT_ERR_INVALID);
  ASSERT_STATUS(cohort_op_parse("sum", NULL), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "out is NULL");
}

TEST(env_knobs_parse_with_defaults_and_clear_errors) {
  long v = 0;
  unsetenv("COHORT_TIMEOUT");
  ASSERT_OK(cohort__env_long("COHORT_TIMEOUT", 0, 1000000, &v));
  ASSERT_EQ(v, 300);
  setenv("COHORT_TIMEOUT", "12", 1);
  ASSERT_OK(cohort__env_long("COHORT_TIMEOUT", 0, 1000000, &v));
  ASSERT_EQ(v, 12);
  setenv("COHORT_TIMEOUT", "12s", 1);
  ASSERT_STATUS(cohort__env_long("COHORT_TIMEOUT", 0, 1000000, &v), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "COHORT_TIMEOUT='12s' is not an integer");
  setenv("COHORT_TIMEOUT", "-5", 1);
  ASSERT_STATUS(cohort__env_long("COHORT_TIMEOUT", 0, 1000000, &v), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "out of range");
  unsetenv("COHORT_TIMEOUT");
  int present = 1;
  unsetenv("RANK");
  ASSERT_OK(cohort__env_long_var("RANK", 0, 10, &v, &present));
  ASSERT_EQ(present, 0);
}

/* The knob table parsed once into a config: defaults, each kind, and a bad value named. */
TEST(config_parses_every_knob_by_its_type_and_range) {
  static cohort__config cfg;
  unsetenv("COHORT_TIMEOUT");
  unsetenv("COHORT_SPIN_US");
  unsetenv("COHORT_BUCKET_MB");
  unsetenv("COHORT_ALGO");
  ASSERT_OK(cohort__config_load(&cfg));
  ASSERT_EQ(cfg.timeout_s, 300);
  ASSERT_EQ(cfg.spin_us, -1); /* auto */
  ASSERT_NEAR(cfg.bucket_mb, 25, 0);
  ASSERT_STREQ(cfg.algo, "auto");
  ASSERT_STREQ(cfg.transport, "auto");
  setenv("COHORT_SPIN_US", "50", 1);
  setenv("COHORT_BUCKET_MB", "0.5", 1);
  setenv("COHORT_ALGO", "rd", 1);
  ASSERT_OK(cohort__config_load(&cfg));
  ASSERT_EQ(cfg.spin_us, 50);
  ASSERT_NEAR(cfg.bucket_mb, 0.5, 0);
  ASSERT_STREQ(cfg.algo, "rd");
  setenv("COHORT_ALGO", "fast", 1);
  ASSERT_STATUS(cohort__config_load(&cfg), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "COHORT_ALGO='fast' is not one of auto, ring, rd, hier");
  unsetenv("COHORT_ALGO");
  setenv("COHORT_BUCKET_MB", "0", 1);
  ASSERT_STATUS(cohort__config_load(&cfg), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "COHORT_BUCKET_MB=0 is out of range (0, ");
  setenv("COHORT_BUCKET_MB", "lots", 1);
  ASSERT_STATUS(cohort__config_load(&cfg), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "COHORT_BUCKET_MB='lots' is not a number");
  unsetenv("COHORT_BUCKET_MB");
  setenv("COHORT_TIMEOUT", "12.5", 1);
  ASSERT_STATUS(cohort__config_load_one(&cfg, "COHORT_TIMEOUT"), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "COHORT_TIMEOUT='12.5' is not an integer");
  unsetenv("COHORT_TIMEOUT");
  unsetenv("COHORT_SPIN_US");
  /* A misspelt log level is an error like any other bad value, not the default in silence. */
  setenv("COHORT_LOG_LEVEL", "verbose", 1);
  ASSERT_STATUS(cohort__config_load(&cfg), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "COHORT_LOG_LEVEL='verbose' is not one of error, warn, info, debug");
  setenv("COHORT_LOG_LEVEL", "debug", 1);
  ASSERT_OK(cohort__config_load(&cfg));
  ASSERT_STREQ(cfg.log_level, "debug");
  unsetenv("COHORT_LOG_LEVEL");
  /* cohortrun's heartbeat descriptor: a number, or empty for none; anything else is refused by name. */
  setenv("COHORT_HEARTBEAT_FD", "", 1);
  ASSERT_OK(cohort__config_load(&cfg));
  ASSERT_EQ(cfg.heartbeat_fd, -1);
  setenv("COHORT_HEARTBEAT_FD", "7", 1);
  ASSERT_OK(cohort__config_load(&cfg));
  ASSERT_EQ(cfg.heartbeat_fd, 7);
  setenv("COHORT_HEARTBEAT_FD", "fd7", 1);
  ASSERT_STATUS(cohort__config_load(&cfg), COHORT_ERR_INVALID);
  ASSERT_CONTAINS(cohort_last_error(), "COHORT_HEARTBEAT_FD='fd7' is not an integer");
  unsetenv("COHORT_HEARTBEAT_FD");
}

static char *env_md;
static int env_md_missing;
static void check_documented(const char *name, const char *def, const char *desc, void *arg) {
  char row[256];
  snprintf(row, sizeof row, "`%s`", name);
  if (!strstr(env_md, row)) {
    fprintf(stderr, "docs/env.md does not list %s\n", name);
    env_md_missing++;
  }
}

TEST(docs_env_md_lists_every_knob) {
  const char *src = getenv("COHORT_TEST_SOURCE_DIR");
  ASSERT_TRUE(src != NULL);
  char path[4096];
  snprintf(path, sizeof path, "%s/docs/env.md", src);
  FILE *f = fopen(path, "rb");
  ASSERT_TRUE(f != NULL);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  env_md = buf;
  env_md_missing = 0;
  cohort__env_each(check_documented, NULL);
  ASSERT_EQ(env_md_missing, 0);
}

/* cohort__copy gives memcpy's bytes at every distance between the buffers modulo 4096 that picks its own loop (1 to
 * 63) and some that do not, for lengths with and without a tail after the loop's 128-byte steps, and touches no byte
 * outside the destination; so does the loop itself, which cohort__copy leaves to memcpy on Intel CPUs. */
TEST(copy_matches_memcpy_at_every_near_distance) {
  size_t cap = 3 * 8192 + 256;
  unsigned char *src = malloc(cap), *dst = malloc(cap + 8192), *want = malloc(cap + 8192);
  ASSERT_TRUE(src && dst && want);
  for (size_t i = 0; i < cap; i++)
    src[i] = (unsigned char)(i * 131 + 7);
  static const size_t lengths[] = {4096, 4097, 4096 + 127, 8192, 3 * 8192 + 5};
  for (int gap = 0; gap <= 70; gap++) {
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
      size_t n = lengths[li];
      /* dst - src = gap modulo 4096: both buffers from malloc, so place the copy within dst to make it so */
      uintptr_t base = (uintptr_t)dst + 64, want_mod = ((uintptr_t)src + (uintptr_t)gap) & 4095;
      unsigned char *d = (unsigned char *)(base + ((want_mod - base) & 4095));
      ASSERT_TRUE(d + n + 64 <= dst + cap + 8192);
      for (int loop = 0; loop < 2; loop++) {
        memset(dst, 0xAB, cap + 8192);
        memset(want, 0xAB, cap + 8192);
        if (loop)
          cohort__copy_vectors(d, src, n);
        else
          cohort__copy(d, src, n);
        memcpy(want + (d - dst), src, n);
        ASSERT_EQ((((uintptr_t)d - (uintptr_t)src) & 4095), (uintptr_t)gap);
        ASSERT_TRUE(memcmp(dst, want, cap + 8192) == 0);
      }
    }
  }
  free(src);
  free(dst);
  free(want);
}

COHORT_TEST_MAIN(TEST_CASE(copy_matches_memcpy_at_every_near_distance), TEST_CASE(strerror_names_every_status),
                 TEST_CASE(error_text_is_kept_per_thread_and_formatted),
                 TEST_CASE(a_failure_keeps_the_first_and_a_request_the_first), TEST_CASE(dtype_and_op_names_round_trip),
                 TEST_CASE(env_knobs_parse_with_defaults_and_clear_errors),
                 TEST_CASE(config_parses_every_knob_by_its_type_and_range), TEST_CASE(docs_env_md_lists_every_knob))
