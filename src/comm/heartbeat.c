/* heartbeat.c: the worker's side of COHORT_HEARTBEAT_FD (see heartbeat.h). */
#include "comm/heartbeat.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The process's page (NULL: none): set once, by the first attach, and read by every communicator's threads. */
static pthread_mutex_t attach_mu = PTHREAD_MUTEX_INITIALIZER;
static int attached;
static _Atomic(cohort__heartbeat_page *) page;

static cohort__heartbeat_page *map_page(long fd) {
  if (fd < 3) return NULL; /* -1: none; 0 to 2 are stdio, never cohortrun's page */
  /* Only a descriptor that is what cohortrun made (a file of one page whose magic is set) is trusted: the variable
   * may have been inherited by a process that does not hold the descriptor, or holds another file under it. */
  struct stat st;
  if (fstat((int)fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != COHORT_HEARTBEAT_PAGE_BYTES) return NULL;
  void *p = mmap(NULL, COHORT_HEARTBEAT_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
  if (p == MAP_FAILED) return NULL;
  cohort__heartbeat_page *hp = p;
  if (atomic_load_explicit(&hp->magic, memory_order_relaxed) != COHORT_HEARTBEAT_MAGIC) {
    munmap(p, COHORT_HEARTBEAT_PAGE_BYTES);
    return NULL;
  }
  atomic_store_explicit(&hp->attached, (int32_t)getpid(), memory_order_release);
  return hp; /* mapped for the life of the process */
}

void cohort__heartbeat_attach(long fd) {
  pthread_mutex_lock(&attach_mu);
  if (!attached) { /* every communicator of a process reads the same environment: the first one decides */
    attached = 1;
    atomic_store_explicit(&page, map_page(fd), memory_order_release);
  }
  pthread_mutex_unlock(&attach_mu);
}

void cohort__heartbeat_enter(int rank, uint32_t seq, int kind) {
  cohort__heartbeat_page *pg = atomic_load_explicit(&page, memory_order_acquire);
  if (!pg) return;
  atomic_store_explicit(&pg->last_seq, seq, memory_order_relaxed);
  atomic_store_explicit(&pg->last_kind, (uint32_t)kind, memory_order_relaxed);
  atomic_store_explicit(&pg->last_rank, rank, memory_order_relaxed);
  atomic_fetch_add_explicit(&pg->started, 1, memory_order_release);
}

void cohort__heartbeat_leave(void) {
  cohort__heartbeat_page *pg = atomic_load_explicit(&page, memory_order_acquire);
  if (pg) atomic_fetch_add_explicit(&pg->completed, 1, memory_order_release);
}
