/* test.c: the runner behind COHORT_TEST_MAIN. */
#include "test.h"

int cohort_test_failed;

static char tmpdir[256];

static void remove_tmpdir(void) {
  if (!tmpdir[0]) return;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

const char *cohort_test_tmp_dir(void) {
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "%s/cohort-test-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) abort();
    atexit(remove_tmpdir);
  }
  return tmpdir;
}

const char *cohort_test_tmp_path(const char *name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", cohort_test_tmp_dir(), name);
  return path;
}

static int selected(int argc, char **argv, const char *name) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

int cohort_test_run(int argc, char **argv, const cohort_test_case *cases, int ncases) {
  int passed = 0, failed = 0;
  for (int i = 0; i < ncases; i++) {
    if (!selected(argc, argv, cases[i].name)) continue;
    cohort_test_failed = 0;
    cases[i].fn();
    if (cohort_test_failed) {
      fprintf(stderr, "FAIL %s\n", cases[i].name);
      failed++;
    } else {
      printf("ok   %s\n", cases[i].name);
      passed++;
    }
    fflush(stdout);
  }
  if (passed + failed == 0) {
    fprintf(stderr, "no test matched\n");
    return 2;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
