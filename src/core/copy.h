/*
 * copy.h: cohort__copy(), memcpy for the data plane's large copies between a user's buffer and cohort's own (the
 * shared-memory transport's staging buffers and rings), and why memcpy alone is not enough there (copy.c).
 */
#ifndef COHORT_CORE_COPY_H
#define COHORT_CORE_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Copies n bytes between buffers that do not overlap by a loop of vector loads and stores (copy.c). */
void cohort__copy_vectors(void *dst, const void *src, size_t n);

/* cohort__copy_vectors(), or memcpy on Intel CPUs, where glibc's is the faster at these distances (copy.c). */
void cohort__copy_near(void *dst, const void *src, size_t n);

/* memcpy, except where the destination lies 1 to 63 bytes past the source modulo 4096 and the copy is long enough
 * for glibc to use `rep movsb`: there cohort__copy_near(). The buffers must not overlap. */
static inline void cohort__copy(void *dst, const void *src, size_t n) {
  uintptr_t gap = ((uintptr_t)dst - (uintptr_t)src) & 4095;
  if (n >= 4096 && gap - 1 < 63)
    cohort__copy_near(dst, src, n);
  else
    memcpy(dst, src, n);
}

#endif
