/* test.c: the runner behind COHORT_TEST_MAIN. */
#include "test.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

int cohort_test_in_child(int (*child)(void *arg), void *arg, char *err, size_t len) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    close(fd[1]);
    _exit(child(arg));
  }
  close(fd[1]);
  size_t n = 0;
  ssize_t k;
  while (n + 1 < len && (k = read(fd[0], err + n, len - 1 - n)) > 0)
    n += (size_t)k;
  err[n] = '\0';
  close(fd[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

/* ---- a crash names its case and its stack ----
 * A test that dies of a signal left ctest "SEGFAULT" and nothing else: the case's own output was still in stdout's
 * buffer (gpu.nn on the GPU host, 2026-11-27, where no debugger is at hand). So stdout is line-buffered, and a
 * crash writes the case and the return addresses: a library's frames read "lib.so(+0xOFFSET)", which
 * `addr2line -f -e lib.so 0xOFFSET` turns into a function and line (scripts/gpu-check.sh does so). Not where a
 * sanitizer has its own handler: its report says more. */
static const char *current_case = "(before the first case)";

static void write_str(const char *s) {
  for (size_t n = strlen(s); n > 0;) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void on_crash(int sig) {
  write_str("\nCRASH in case ");
  write_str(current_case);
  write_str(sig == SIGSEGV ? ": SIGSEGV" : sig == SIGBUS ? ": SIGBUS" : sig == SIGFPE ? ": SIGFPE" : ": SIGILL");
  write_str("; its stack, innermost first:\n");
  void *frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  signal(sig, SIG_DFL); /* and die of it, as before: ctest and the callers see the same signal */
  raise(sig);
}

/* Before main: setvbuf must come before the first output on the stream, and some tests print before the runner. */
__attribute__((constructor)) static void line_buffered_stdout(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

static void catch_crashes(void) {
  void *warm[1];
  backtrace(warm, 1); /* its first call loads libgcc, which a signal handler must not */
  /* A stack overflow leaves no stack for the handler: it runs on one of its own (the runner's thread's). */
  static char alt[64 * 1024];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
  int on_alt = sigaltstack(&ss, NULL) == 0;
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = on_alt ? SA_ONSTACK : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(sigs[i], &sa, NULL);
  }
}

static int selected(int argc, char **argv, const char *name) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

int cohort_test_run(int argc, char **argv, const cohort_test_case *cases, int ncases) {
  int passed = 0, failed = 0;
  catch_crashes();
  for (int i = 0; i < ncases; i++) {
    if (!selected(argc, argv, cases[i].name)) continue;
    cohort_test_failed = 0;
    current_case = cases[i].name;
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
