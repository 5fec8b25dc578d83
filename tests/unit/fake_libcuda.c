/*
 * fake_libcuda.c: a stand-in for the CUDA driver (soname libcuda.so.1) whose every entry point aborts, for
 * test_gpu_host's fork cases on machines without a GPU. Loaded into a process, it makes cohort believe CUDA is there;
 * any call cohort then makes into the driver (through its plugin or directly) kills the process, as the real driver's
 * cuInit did in a child forked after the parent had loaded it.
 */
#include <stdio.h>
#include <stdlib.h>

static void reached(const char *fn) {
  fprintf(stderr, "fake libcuda.so.1: %s called\n", fn);
  abort();
}

int cuInit(unsigned flags) {
  (void)flags;
  reached("cuInit");
  return 0;
}

int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) {
  (void)data, (void)attribute, (void)ptr;
  reached("cuPointerGetAttribute");
  return 0;
}

int cuDriverGetVersion(int *version) {
  (void)version;
  reached("cuDriverGetVersion");
  return 0;
}

int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
  (void)symbol, (void)pfn, (void)version, (void)flags, (void)status;
  reached("cuGetProcAddress_v2");
  return 0;
}
