/*
 * test_gpu_host.c: the host side of the device collectives, on a machine without a GPU (CI): the path every rank
 * chooses from the ranks' descriptions, what a CPU-only process says when asked for device collectives, and that
 * host memory never needs CUDA.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "test.h"

static cohort__cuda_rank_info rank_on(int host, int gpu, int nccl) {
  cohort__cuda_rank_info r;
  memset(&r, 0, sizeof r);
  r.host_hash = 1000u + (unsigned)host;
  r.uuid[0] = (uint8_t)(gpu + 1);
  r.uuid[15] = (uint8_t)host;
  r.nccl = nccl;
  return r;
}

TEST(path_auto) {
  cohort__cuda_rank_info infos[9];
  cohort__cuda_path p;
  /* one GPU per rank, NCCL everywhere: nccl (1 rank too) */
  for (int r = 0; r < 4; r++)
    infos[r] = rank_on(r / 2, r % 2, 1);
  ASSERT_EQ(cohort__gpu_choose_path(infos, 4, "auto", &p), COHORT_OK);
  ASSERT_EQ(p, COHORT__CUDA_PATH_NCCL);
  ASSERT_EQ(cohort__gpu_choose_path(infos, 1, "auto", &p), COHORT_OK);
  ASSERT_EQ(p, COHORT__CUDA_PATH_NCCL);
  /* the same without NCCL on one rank: several hosts, so staged */
  infos[3].nccl = 0;
  ASSERT_EQ(cohort__gpu_choose_path(infos, 4, "auto", &p), COHORT_OK);
  ASSERT_EQ(p, COHORT__CUDA_PATH_STAGED);
  /* every rank on one GPU of one host (the GPU host's layout): cuda-ipc, up to 8 ranks, with or without NCCL */
  for (int r = 0; r < 9; r++)
    infos[r] = rank_on(0, 0, 1);
  for (int n = 2; n <= 8; n++) {
    ASSERT_EQ(cohort__gpu_choose_path(infos, n, "auto", &p), COHORT_OK);
    ASSERT_EQ(p, COHORT__CUDA_PATH_IPC);
  }
  ASSERT_EQ(cohort__gpu_choose_path(infos, 9, "auto", &p), COHORT_OK);
  ASSERT_EQ(p, COHORT__CUDA_PATH_STAGED);
  /* one GPU, but on two hosts (the same device UUID can't be: another host's GPU is another GPU): staged */
  infos[1] = rank_on(1, 0, 0);
  ASSERT_EQ(cohort__gpu_choose_path(infos, 2, "auto", &p), COHORT_OK);
  ASSERT_EQ(p, COHORT__CUDA_PATH_STAGED);
}

TEST(path_forced) {
  cohort__cuda_rank_info infos[4];
  cohort__cuda_path p;
  for (int r = 0; r < 4; r++)
    infos[r] = rank_on(0, 0, 1);
  ASSERT_EQ(cohort__gpu_choose_path(infos, 4, "nccl", &p), COHORT_ERR_INVALID);
  ASSERT_TRUE(strstr(cohort_last_error(), "share a GPU") != NULL);
  ASSERT_EQ(cohort__gpu_choose_path(infos, 4, "staged", &p), COHORT_OK);
  ASSERT_EQ(p, COHORT__CUDA_PATH_STAGED);
  for (int r = 0; r < 4; r++)
    infos[r] = rank_on(0, r, r != 2);
  ASSERT_EQ(cohort__gpu_choose_path(infos, 4, "ipc", &p), COHORT_ERR_INVALID);
  ASSERT_TRUE(strstr(cohort_last_error(), "one GPU") != NULL);
  ASSERT_EQ(cohort__gpu_choose_path(infos, 4, "nccl", &p), COHORT_ERR_INVALID);
  ASSERT_TRUE(strstr(cohort_last_error(), "libnccl.so.2 does not load") != NULL);
}

/* A process without the CUDA driver: host memory works as ever, a _stream call is refused with the reason, and
 * cohort_cuda_available() says why not. */
TEST(cpu_only) {
  cohort_comm *c;
  ASSERT_EQ(cohort_init(&c), COHORT_OK);
  float x[4] = {1, 2, 3, 4}, y[4];
  ASSERT_EQ(cohort_allreduce(c, x, y, 4, COHORT_F32, COHORT_SUM), COHORT_OK);
  ASSERT_TRUE(y[3] == 4.0f);
  ASSERT_EQ(cohort_allreduce_stream(c, x, y, 4, COHORT_F32, COHORT_SUM, NULL), COHORT_ERR_INVALID);
  ASSERT_TRUE(strstr(cohort_last_error(), "has not loaded CUDA") != NULL);
  cohort_work *w = NULL;
  ASSERT_EQ(cohort_iallreduce_stream(c, x, y, 4, COHORT_F32, COHORT_SUM, NULL, &w), COHORT_ERR_INVALID);
  ASSERT_TRUE(w == NULL);
  ASSERT_TRUE(cohort_device_path(c) == NULL);
  ASSERT_TRUE(strcmp(cohort_transport_name(c), "inproc") == 0);
  /* the communicator is still usable: argument errors fail nothing */
  ASSERT_EQ(cohort_broadcast(c, x, 4, COHORT_F32, 0), COHORT_OK);
  cohort_comm_destroy(c);
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver) { /* a GPU machine: the plugin may well run here */
    printf("cohort_cuda_available() = %d (this machine has a CUDA driver)\n", cohort_cuda_available());
    return;
  }
  ASSERT_EQ(cohort_cuda_available(), 0);
  printf("cohort_cuda_available() = 0: %s\n", cohort_last_error());
  ASSERT_TRUE(strlen(cohort_last_error()) > 10);
}

/* COHORT_CUDA_LIBRARY names the plugin: a wrong path is the one place tried, and the error says so. (Run as its own
 * process: the plugin's loading is tried once per process.) */
TEST(plugin_override) {
  setenv("COHORT_CUDA_LIBRARY", "/nonexistent/libcohort_cuda.so", 1);
  ASSERT_EQ(cohort_cuda_available(), 0);
  printf("%s\n", cohort_last_error());
  ASSERT_TRUE(strstr(cohort_last_error(), "/nonexistent/libcohort_cuda.so") != NULL);
  ASSERT_TRUE(strstr(cohort_last_error(), "cannot load libcohort_cuda.so") != NULL);
}

/* Host collectives in this process, with the fake driver loaded: 0 where each answer is as expected. */
static int host_collectives_in_child(int expect_forked) {
  cohort_comm *c;
  if (cohort_init(&c) != COHORT_OK) return 1;
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  if (cohort_allreduce(c, x, y, 4, COHORT_F32, COHORT_SUM) != COHORT_OK || y[3] != 4.0f) return 2;
  if (!expect_forked) return 0;
  if (cohort_allreduce_stream(c, x, y, 4, COHORT_F32, COHORT_SUM, NULL) != COHORT_ERR_INVALID) return 3;
  printf("child: cohort_allreduce_stream: %s\n", cohort_last_error());
  if (!strstr(cohort_last_error(), "forked from one that had loaded the CUDA driver")) return 4;
  if (cohort_cuda_available() != 0) return 5;
  if (!strstr(cohort_last_error(), "spawn")) return 6;
  cohort_comm_destroy(c);
  fflush(stdout); /* the child ends with _exit */
  return 0;
}

static int child_status(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

/* Runs fn in a child whose stderr comes back in err; the child's wait status. */
typedef struct child_fn {
  int (*fn)(void);
} child_fn;

static int call_fn(void *box) { return ((child_fn *)box)->fn(); }

static int in_child(int (*fn)(void), char *err, size_t len) {
  child_fn box = {fn};
  return cohort_test_in_child(call_fn, &box, err, len);
}

/* Where the plugin is built, the driver call reached is its cuInit (the call that crashed on the GPU host); else
 * cohort's own look at the pointer. */
static int reached_the_driver(int status, const char *err) {
  printf("  child: %s %d; its stderr: %s", WIFEXITED(status) ? "exit" : "signal",
         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), err);
#ifdef COHORT_TEST_PLUGIN_BUILT
  const char *want = "cuInit called";
#else
  const char *want = "cuPointerGetAttribute called";
#endif
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(err, want) != NULL;
}

static int load_driver_then_collectives(void) {
  if (!dlopen(FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL)) return 90;
  return host_collectives_in_child(0);
}

/* A child forked from a process that had loaded the CUDA driver never calls into it (the real driver's cuInit crashed
 * there): host collectives work without it, and the device calls say why not. The fake driver aborts on any call. */
TEST(forked_after_cuda) {
  unsetenv("CUDA_VISIBLE_DEVICES"); /* a GPU hidden so is another case (gpus_hidden) */
  void *driver = dlopen(FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_TRUE(driver != NULL);
  fflush(stdout);
  pid_t pid = fork();
  ASSERT_TRUE(pid >= 0);
  if (pid == 0) _exit(host_collectives_in_child(1));
  int status = child_status(pid);
  printf("forked child: %s %d\n", WIFEXITED(status) ? "exit" : "signal",
         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* The other side of forked_after_cuda, so that it cannot pass for want of a reachable driver: a process that loaded
 * the (fake) driver itself, after the fork, does call it for a host buffer, and dies of it. */
TEST(fake_driver_reached) {
  unsetenv("CUDA_VISIBLE_DEVICES");
  char err[4096];
  int status = in_child(load_driver_then_collectives, err, sizeof err);
  ASSERT_TRUE(reached_the_driver(status, err));
}

/* CUDA_VISIBLE_DEVICES="" hides every GPU: a process that loaded the (fake) driver then never calls it, and the
 * device calls name the variable. */
TEST(gpus_hidden) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  ASSERT_TRUE(dlopen(FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL) != NULL);
  cohort_comm *c;
  ASSERT_EQ(cohort_init(&c), COHORT_OK);
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  ASSERT_EQ(cohort_allreduce(c, x, y, 4, COHORT_F32, COHORT_SUM), COHORT_OK);
  ASSERT_TRUE(y[2] == 3.0f);
  ASSERT_EQ(cohort_allreduce_stream(c, x, y, 4, COHORT_F32, COHORT_SUM, NULL), COHORT_ERR_INVALID);
  printf("%s\n", cohort_last_error());
  ASSERT_TRUE(strstr(cohort_last_error(), "CUDA_VISIBLE_DEVICES hides every GPU") != NULL);
  ASSERT_EQ(cohort_cuda_available(), 0);
  ASSERT_TRUE(strstr(cohort_last_error(), "CUDA_VISIBLE_DEVICES") != NULL);
  cohort_comm_destroy(c);
}

/* The variable is read when the driver is first seen loaded, not before: a process that hid the GPUs, ran host
 * collectives, then showed them again and loaded the driver does call it (and dies of the stand-in). */
static int unhide_then_load_driver(void) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  cohort_comm *c;
  if (cohort_init(&c) != COHORT_OK) return 80;
  float x[2] = {1, 2}, y[2];
  if (cohort_allreduce(c, x, y, 2, COHORT_F32, COHORT_SUM) != COHORT_OK) return 81;
  setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  if (!dlopen(FAKE_LIBCUDA, RTLD_NOW | RTLD_GLOBAL)) return 82;
  cohort_allreduce(c, x, y, 2, COHORT_F32, COHORT_SUM);
  return 0;
}

TEST(hidden_read_when_driver_seen) {
  char err[4096];
  int status = in_child(unhide_then_load_driver, err, sizeof err);
  ASSERT_TRUE(reached_the_driver(status, err));
}

COHORT_TEST_MAIN(TEST_CASE(path_auto), TEST_CASE(path_forced), TEST_CASE(cpu_only), TEST_CASE(plugin_override),
                 TEST_CASE(forked_after_cuda), TEST_CASE(fake_driver_reached), TEST_CASE(gpus_hidden),
                 TEST_CASE(hidden_read_when_driver_seen))
