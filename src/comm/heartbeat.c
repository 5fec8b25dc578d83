/* heartbeat.c: the worker's side of COHORT_HEARTBEAT_FD (see heartbeat.h). */
#include "comm/heartbeat.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/env.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cohort__heartbeat_page *page;

static void map_page(void) {
  const char *s = cohort__env_str("COHORT_HEARTBEAT_FD");
  if (!s || !s[0]) return;
  char *end = NULL;
  long fd = strtol(s, &end, 10);
  if (*end != '\0' || fd < 3 || fd > 1 << 20) return;
  /* Only a descriptor that is what cohortrun made (a file of one page whose magic is set) is trusted: the variable
   * may have been inherited by a process that does not hold the descriptor, or holds another file under it. */
  struct stat st;
  if (fstat((int)fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != COHORT_HEARTBEAT_PAGE_BYTES) return;
  void *p = mmap(NULL, COHORT_HEARTBEAT_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
  if (p == MAP_FAILED) return;
  cohort__heartbeat_page *hp = p;
  if (atomic_load_explicit(&hp->magic, memory_order_relaxed) != COHORT_HEARTBEAT_MAGIC) {
    munmap(p, COHORT_HEARTBEAT_PAGE_BYTES);
    return;
  }
  page = hp; /* mapped for the life of the process */
}

void cohort__heartbeat_enter(int rank, uint32_t seq, int kind) {
  pthread_once(&once, map_page);
  if (!page) return;
  atomic_store_explicit(&page->last_seq, seq, memory_order_relaxed);
  atomic_store_explicit(&page->last_kind, (uint32_t)kind, memory_order_relaxed);
  atomic_store_explicit(&page->last_rank, rank, memory_order_relaxed);
  atomic_fetch_add_explicit(&page->started, 1, memory_order_release);
}

void cohort__heartbeat_leave(void) {
  if (page) atomic_fetch_add_explicit(&page->completed, 1, memory_order_release);
}
