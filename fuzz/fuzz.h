/*
 * fuzz.h: what the fuzz targets share. Each target defines LLVMFuzzerTestOneInput: built with clang's libFuzzer
 * (cmake -DCOHORT_FUZZ=ON, scripts/fuzz.sh) it is fuzzed; built by the normal build, replay.c's main feeds it every
 * file of its corpus (fuzz/corpus/NAME), so that each input once found stays a test (ctest -R fuzz.corpus).
 *
 * A target must never crash, hang, leak or trip a sanitizer, whatever the bytes; it must also reject what is wrong,
 * which each target checks (FUZZ_CHECK aborts, and the fuzzer reports the input).
 */
#ifndef COHORT_FUZZ_FUZZ_H
#define COHORT_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                                               \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed\n", __FILE__, __LINE__, #cond);                                    \
      abort();                                                                                                         \
    }                                                                                                                  \
  } while (0)

/* Reads every byte of what a parser handed back, so that ASan sees any that lies outside its allocation. */
static inline uint8_t fuzz_touch(const void *p, size_t len) {
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < len; i++)
    sum = (uint8_t)(sum + ((const uint8_t *)p)[i]);
  return sum;
}

/* The readers under test take a path: the input becomes an anonymous file, reached as /proc/self/fd/N, so that
 * no fuzzing run writes to the disk. Returns the fd (close it after), or -1. */
static inline int fuzz_input_file(const uint8_t *data, size_t size, char *path, size_t path_len) {
  int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)n;
  }
  snprintf(path, path_len, "/proc/self/fd/%d", fd);
  return fd;
}

#endif
