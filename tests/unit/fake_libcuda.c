/*
 * fake_libcuda.c: a stand-in for the CUDA driver (soname libcuda.so.1) whose every entry point aborts, for
 * test_gpu_host's fork cases on machines without a GPU. Loaded into a process, it makes cohort believe CUDA is there;
 * any call cohort then makes into the driver kills the process, as the real driver's cuInit did in a child forked
 * after the parent had loaded it. It exports what cohort's CUDA plugin (libcohort_cuda.so, its CUDA runtime linked
 * statically) takes from the driver, so that the plugin loads where it was built and its cuInit is what is reached;
 * where it was not built, cohort's own look at the pointer (cuPointerGetAttribute) is.
 */
#include <stddef.h>
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

int cuPointerGetAttributes(unsigned count, int *attributes, void **data, unsigned long long ptr) {
  (void)count, (void)attributes, (void)data, (void)ptr;
  reached("cuPointerGetAttributes");
  return 0;
}

int cuGetErrorName(int error, const char **name) {
  (void)error, (void)name;
  reached("cuGetErrorName");
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

int cuCtxGetCurrent(void **ctx) {
  (void)ctx;
  reached("cuCtxGetCurrent");
  return 0;
}

/* The IPC path's flags in shared host memory (src/cuda/ipc.cu). */
int cuMemHostRegister_v2(void *p, size_t bytes, unsigned flags) {
  (void)p, (void)bytes, (void)flags;
  reached("cuMemHostRegister_v2");
  return 0;
}

int cuMemHostUnregister(void *p) {
  (void)p;
  reached("cuMemHostUnregister");
  return 0;
}

int cuMemHostGetDevicePointer_v2(unsigned long long *dptr, void *p, unsigned flags) {
  (void)dptr, (void)p, (void)flags;
  reached("cuMemHostGetDevicePointer_v2");
  return 0;
}

int cuStreamWaitValue32_v2(void *stream, unsigned long long addr, unsigned value, unsigned flags) {
  (void)stream, (void)addr, (void)value, (void)flags;
  reached("cuStreamWaitValue32_v2");
  return 0;
}

int cuStreamWriteValue32_v2(void *stream, unsigned long long addr, unsigned value, unsigned flags) {
  (void)stream, (void)addr, (void)value, (void)flags;
  reached("cuStreamWriteValue32_v2");
  return 0;
}

int cuStreamIsCapturing(void *stream, int *status) {
  (void)stream, (void)status;
  reached("cuStreamIsCapturing");
  return 0;
}
