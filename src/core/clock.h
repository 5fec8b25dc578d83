/* clock.h: monotonic time for deadlines and measurements. */
#ifndef COHORT_CORE_CLOCK_H
#define COHORT_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t cohort__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double cohort__now_s(void) { return (double)cohort__now_ns() * 1e-9; }

#endif
