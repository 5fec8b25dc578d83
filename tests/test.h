/*
 * test.h: the suite's assertions and runner, in the libuv style.
 *
 * A test is `TEST(name) { ... }`; failed assertions print both sides, the file and the line, and end the test.
 * main() comes from COHORT_TEST_MAIN(...), which runs the listed tests (or the ones named on the command line)
 * and prints "N passed, N failed". Multi-rank programs use the same assertions; a failing rank exits non-zero,
 * which makes cohortrun, and so ctest, fail.
 */
#ifndef COHORT_TEST_H
#define COHORT_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/cohort.h"

typedef struct cohort_test_case {
  const char *name;
  void (*fn)(void);
} cohort_test_case;

/* Set by an assertion that fails; the runner counts the test as failed. */
extern int cohort_test_failed;
/* A path inside this process's own temporary directory (made on first use, removed at exit). The returned string
 * is overwritten by the next call. */
const char *cohort_test_tmp_path(const char *name);
/* Runs child(arg) in a forked process (its exit status is what child returns) with the child's stderr captured into
 * err (at most len - 1 bytes, NUL-terminated); returns the child's wait status, or -1 where it could not start. */
int cohort_test_in_child(int (*child)(void *arg), void *arg, char *err, size_t len);
/* The temporary directory itself (stable for the whole process). */
const char *cohort_test_tmp_dir(void);
int cohort_test_run(int argc, char **argv, const cohort_test_case *cases, int ncases);
/* The exit status of a GPU test that found no usable GPU, after its "SKIP: why" line: 77 (ctest's SKIP), or 1 where
 * COHORT_TEST_EXPECT_GPU=1 says a GPU is here (scripts/gpu-check.sh sets it where nvidia-smi lists one), so that a
 * plugin that does not load on the GPU host fails instead of passing as a machine without a GPU. */
static inline int expect_gpu_skip(void) {
  const char *v = getenv("COHORT_TEST_EXPECT_GPU");
  if (!v || strcmp(v, "1") != 0) return 77;
  printf("FAIL: that is no skip here: COHORT_TEST_EXPECT_GPU=1 (a GPU is listed on this machine)\n");
  return 1;
}

#define TEST(name) static void test_##name(void)
#define TEST_CASE(name)                                                                                                \
  { #name, test_##name }
#define COHORT_TEST_MAIN(...)                                                                                          \
  int main(int argc, char **argv) {                                                                                    \
    static const cohort_test_case cases[] = {__VA_ARGS__};                                                             \
    return cohort_test_run(argc, argv, cases, (int)(sizeof cases / sizeof cases[0]));                                  \
  }

#define TEST_FAIL_(...)                                                                                                \
  do {                                                                                                                 \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                                    \
    fprintf(stderr, __VA_ARGS__);                                                                                      \
    fprintf(stderr, "\n");                                                                                             \
    cohort_test_failed = 1;                                                                                            \
    return;                                                                                                            \
  } while (0)

#define ASSERT_TRUE(cond)                                                                                              \
  do {                                                                                                                 \
    if (!(cond)) TEST_FAIL_("assertion failed: %s", #cond);                                                            \
  } while (0)

#define ASSERT_EQ(a, b)                                                                                                \
  do {                                                                                                                 \
    long long a__ = (long long)(a), b__ = (long long)(b);                                                              \
    if (a__ != b__) TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a__, b__);                                            \
  } while (0)

#define ASSERT_NE(a, b)                                                                                                \
  do {                                                                                                                 \
    long long a__ = (long long)(a), b__ = (long long)(b);                                                              \
    if (a__ == b__) TEST_FAIL_("%s != %s: both are %lld", #a, #b, a__);                                                \
  } while (0)

#define ASSERT_NEAR(a, b, tol)                                                                                         \
  do {                                                                                                                 \
    double a__ = (double)(a), b__ = (double)(b);                                                                       \
    if (!(fabs(a__ - b__) <= (tol))) TEST_FAIL_("%s ~= %s: %.9g vs %.9g (tol %g)", #a, #b, a__, b__, (double)(tol));   \
  } while (0)

#define ASSERT_STREQ(a, b)                                                                                             \
  do {                                                                                                                 \
    const char *a__ = (a), *b__ = (b);                                                                                 \
    if (strcmp(a__, b__) != 0) TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a__, b__);                             \
  } while (0)

#define ASSERT_CONTAINS(haystack, needle)                                                                              \
  do {                                                                                                                 \
    const char *h__ = (haystack), *n__ = (needle);                                                                     \
    if (!strstr(h__, n__)) TEST_FAIL_("\"%s\" does not contain \"%s\"", h__, n__);                                     \
  } while (0)

/* Asserts a cohort call succeeded; on failure prints the status and cohort_last_error(). */
#define ASSERT_OK(expr)                                                                                                \
  do {                                                                                                                 \
    cohort_status s__ = (expr);                                                                                        \
    if (s__ != COHORT_OK) TEST_FAIL_("%s: %s: %s", #expr, cohort_strerror(s__), cohort_last_error());                  \
  } while (0)

/* Asserts a cohort call failed with exactly the given status. */
#define ASSERT_STATUS(expr, want)                                                                                      \
  do {                                                                                                                 \
    cohort_status s__ = (expr), w__ = (want);                                                                          \
    if (s__ != w__)                                                                                                    \
      TEST_FAIL_("%s: got %s (%s), want %s", #expr, cohort_strerror(s__), cohort_last_error(), cohort_strerror(w__));  \
  } while (0)

#endif
