/* split_check.c: see split_check.h. */
#include "split_check.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_check.h"

#define MAX_WORLD 64

static int fail(const char *what, int rank, const char *detail) {
  printf("split check FAILED on rank %d: %s%s%s\n", rank, what, detail ? ": " : "", detail ? detail : "");
  return 1;
}

static int call_failed(const char *what, cohort_status st, int rank) {
  if (st == COHORT_OK) return 0;
  char text[1200];
  snprintf(text, sizeof text, "%s (%s)", cohort_last_error(), cohort_strerror(st));
  return fail(what, rank, text);
}

/* sub's members, in order, must be members[0..n): each tells the others its rank in world. */
static int check_members(cohort_comm *sub, int world_rank, const int *members, int n) {
  if (cohort_size(sub) != n) return fail("sub-communicator size", world_rank, NULL);
  int32_t mine = world_rank, all[MAX_WORLD];
  int failures = call_failed("allgather of world ranks", cohort_allgather(sub, &mine, all, 1, COHORT_I32), world_rank);
  for (int i = 0; i < n && !failures; i++)
    if (all[i] != members[i]) failures += fail("member order (by key, then rank)", world_rank, NULL);
  if (!failures && members[cohort_rank(sub)] != world_rank) failures += fail("own sub rank", world_rank, NULL);
  return failures;
}

static int run_matrix(cohort_comm *sub, const size_t *counts, int ncounts) {
  int f = coll_check_all(sub, counts, ncounts);
  if (!f) f += coll_check_async(sub);
  if (!f) f += coll_check_barrier(sub);
  return f;
}

int split_check_matrix(cohort_comm *world, const size_t *counts, int ncounts) {
  int rank = cohort_rank(world), size = cohort_size(world), failures = 0;
  if (size > MAX_WORLD) return fail("world too large for the check", rank, NULL);
  /* At 5 ranks: {4, 2, 0} and {3}; at 8: {6, 4, 2, 0} and {7, 5, 3}: odd and even groups, and rank 1 in none. */
  int left_out = size >= 5 ? 1 : -1;
  int color = rank == left_out ? COHORT_UNDEFINED : rank % 2;
  cohort_comm *sub = (cohort_comm *)&failures; /* must become NULL for the rank left out */
  cohort_status st = cohort_comm_split(world, color, -rank, &sub);
  if ((failures = call_failed("cohort_comm_split", st, rank))) return failures;
  if (color == COHORT_UNDEFINED) {
    if (sub != NULL) failures += fail("a rank with COHORT_UNDEFINED got a communicator", rank, NULL);
  } else if (!sub) {
    failures += fail("no sub-communicator", rank, NULL);
  } else {
    int members[MAX_WORLD], n = 0;
    for (int p = size - 1; p >= 0; p--) /* key -rank: descending */
      if (p != left_out && p % 2 == color) members[n++] = p;
    failures += check_members(sub, rank, members, n);
    if (!failures) failures += run_matrix(sub, counts, ncounts);
    /* Nested: the group halved by sub rank parity, with the sum of world ranks over it. */
    cohort_comm *half = NULL;
    if (!failures)
      failures += call_failed("nested split", cohort_comm_split(sub, cohort_rank(sub) % 2, 0, &half), rank);
    if (!failures) {
      int64_t v = rank, want = 0;
      for (int i = cohort_rank(sub) % 2; i < n; i += 2)
        want += members[i];
      failures += call_failed("nested allreduce", cohort_allreduce(half, &v, &v, 1, COHORT_I64, COHORT_SUM), rank);
      if (!failures && v != want) failures += fail("nested allreduce value", rank, NULL);
    }
    cohort_comm_destroy(half);
  }
  cohort_comm_destroy(sub);
  /* world goes on after its split, and a dup is world again, on a transport of its own. */
  int f = 0;
  if ((f = call_failed("barrier on world after the split", cohort_barrier(world), rank))) return failures + f;
  cohort_comm *dup = NULL;
  if ((f = call_failed("cohort_comm_dup", cohort_comm_dup(world, &dup), rank))) return failures + f;
  int members[MAX_WORLD];
  for (int p = 0; p < size; p++)
    members[p] = p;
  f = check_members(dup, rank, members, size);
  if (!f) f += run_matrix(dup, counts, ncounts < 3 ? ncounts : 3);
  cohort_comm_destroy(dup);
  return failures + f;
}

/* ---- two groups at once ---- */

typedef struct driver {
  cohort_comm *sub;
  int world_rank, kind, failures;
} driver;

enum { ITERS = 150, N = 3000 };

/* kind 0: allreduces of i32; kind 1: broadcasts from a moving root, then allgathers. Values from world ranks. */
static void *drive(void *arg) {
  driver *d = arg;
  int n = cohort_size(d->sub), me = cohort_rank(d->sub);
  int32_t *buf = malloc(sizeof *buf * N * (size_t)n), *mine = malloc(sizeof *mine * N);
  int32_t ids[MAX_WORLD], id = d->world_rank;
  d->failures += call_failed("allgather of ids", cohort_allgather(d->sub, &id, ids, 1, COHORT_I32), d->world_rank);
  for (int it = 0; it < ITERS && !d->failures; it++) {
    if (d->kind == 0) {
      int64_t want = 0;
      for (int i = 0; i < n; i++)
        want += ids[i] + it;
      for (int k = 0; k < N; k++)
        buf[k] = d->world_rank + it;
      d->failures +=
          call_failed("allreduce", cohort_allreduce(d->sub, buf, buf, N, COHORT_I32, COHORT_SUM), d->world_rank);
      for (int k = 0; k < N && !d->failures; k++)
        if (buf[k] != want) d->failures += fail("allreduce value while another group runs", d->world_rank, NULL);
    } else {
      int root = it % n;
      for (int k = 0; k < N; k++)
        buf[k] = me == root ? ids[root] * 1000 + k : -1;
      d->failures += call_failed("broadcast", cohort_broadcast(d->sub, buf, N, COHORT_I32, root), d->world_rank);
      for (int k = 0; k < N && !d->failures; k++)
        if (buf[k] != ids[root] * 1000 + k) d->failures += fail("broadcast value", d->world_rank, NULL);
      for (int k = 0; k < N; k++)
        mine[k] = d->world_rank + k * it;
      if (!d->failures)
        d->failures += call_failed("allgather", cohort_allgather(d->sub, mine, buf, N, COHORT_I32), d->world_rank);
      for (int i = 0; i < n && !d->failures; i++)
        for (int k = 0; k < N && !d->failures; k++)
          if (buf[(size_t)i * N + k] != ids[i] + k * it) d->failures += fail("allgather value", d->world_rank, NULL);
    }
  }
  free(buf);
  free(mine);
  return NULL;
}

int split_check_concurrent(cohort_comm *world) {
  int rank = cohort_rank(world), size = cohort_size(world), failures = 0;
  cohort_comm *parity = NULL, *half = NULL;
  failures += call_failed("split by parity", cohort_comm_split(world, rank % 2, rank, &parity), rank);
  if (!failures) failures += call_failed("split by half", cohort_comm_split(world, rank < size / 2, rank, &half), rank);
  if (failures) {
    cohort_comm_destroy(parity);
    return failures;
  }
  driver d[2] = {{parity, rank, 0, 0}, {half, rank, 1, 0}};
  pthread_t th;
  pthread_create(&th, NULL, drive, &d[1]);
  drive(&d[0]);
  pthread_join(th, NULL);
  failures += d[0].failures + d[1].failures;

  /* One thread, work on both in flight, issued and waited for in opposite orders on even and odd ranks. */
  enum { M = 4096 };
  float *a = malloc(sizeof *a * M), *g = malloc(sizeof *g * M), *b = malloc(sizeof *b * M * (size_t)size);
  for (int k = 0; k < M; k++)
    a[k] = g[k] = (float)rank;
  cohort_work *wa = NULL, *wb = NULL;
  cohort_status sa, sb;
  if (rank % 2) {
    sb = cohort_iallgather(half, g, b, M, COHORT_F32, &wb);
    sa = cohort_iallreduce(parity, a, a, M, COHORT_F32, COHORT_MAX, &wa);
  } else {
    sa = cohort_iallreduce(parity, a, a, M, COHORT_F32, COHORT_MAX, &wa);
    sb = cohort_iallgather(half, g, b, M, COHORT_F32, &wb);
  }
  failures += call_failed("issuing cohort_i* work", sa != COHORT_OK ? sa : sb, rank);
  if (rank % 2) {
    sa = wa ? cohort_work_wait(wa) : sa;
    sb = wb ? cohort_work_wait(wb) : sb;
  } else {
    sb = wb ? cohort_work_wait(wb) : sb;
    sa = wa ? cohort_work_wait(wa) : sa;
  }
  failures += call_failed("iallreduce on one group", sa, rank) + call_failed("iallgather on the other", sb, rank);
  cohort_work_free(wa);
  cohort_work_free(wb);
  int maxp = (size - 1) % 2 == rank % 2 ? size - 1 : size - 2; /* the largest rank of this parity */
  if (!failures && a[M - 1] != (float)maxp) failures += fail("iallreduce value", rank, NULL);
  for (int p = 0, i = 0; p < size && !failures; p++) /* half's members: this half's ranks, ascending */
    if ((p < size / 2) == (rank < size / 2) && b[(size_t)i++ * M + M - 1] != (float)p)
      failures += fail("iallgather value", rank, NULL);
  free(a);
  free(g);
  free(b);
  cohort_comm_destroy(parity);
  cohort_comm_destroy(half);
  return failures;
}

typedef struct splitter {
  cohort_comm *parent;
  int world_rank, world_size, salt, failures;
  cohort_comm *made[8];
} splitter;

/* Each member contributes salt * 1000 + its world rank: the sum over a parity group is known. */
static int check_group(splitter *s, cohort_comm *g, const char *what) {
  int64_t v = (int64_t)s->salt * 1000 + s->world_rank, sum = 0, want = 0;
  for (int p = s->world_rank % 2; p < s->world_size; p += 2)
    want += (int64_t)s->salt * 1000 + p;
  if (call_failed(what, cohort_allreduce(g, &v, &sum, 1, COHORT_I64, COHORT_SUM), s->world_rank)) return 1;
  return sum == want ? 0 : fail(what, s->world_rank, "a wrong sum (another group's values?)");
}

static void *split_repeatedly(void *arg) {
  splitter *s = arg;
  for (int i = 0; i < 8 && !s->failures; i++) {
    s->failures +=
        call_failed("a split made beside another thread's",
                    cohort_comm_split(s->parent, s->world_rank % 2, s->world_rank, &s->made[i]), s->world_rank);
    if (!s->failures) s->failures += check_group(s, s->made[i], "allreduce on a group split beside another");
  }
  return NULL;
}

int split_check_concurrent_splits(cohort_comm *world) {
  int rank = cohort_rank(world), size = cohort_size(world), failures = 0;
  cohort_comm *dup = NULL;
  if (call_failed("dup of world", cohort_comm_dup(world, &dup), rank)) return 1;
  splitter s[2] = {{.parent = world, .world_rank = rank, .world_size = size, .salt = 1},
                   {.parent = dup, .world_rank = rank, .world_size = size, .salt = 2}};
  pthread_t th;
  pthread_create(&th, NULL, split_repeatedly, &s[1]);
  split_repeatedly(&s[0]);
  pthread_join(th, NULL);
  failures += s[0].failures + s[1].failures;
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < 8; i++) {
      if (!failures && s[t].made[i]) failures += check_group(&s[t], s[t].made[i], "allreduce on every group after");
      cohort_comm_destroy(s[t].made[i]);
    }
  cohort_comm_destroy(dup);
  return failures;
}

int split_check_mismatch(cohort_comm *world) {
  int rank = cohort_rank(world), size = cohort_size(world), failures = 0;
  cohort_comm *sub = NULL;
  if ((failures = call_failed("split by parity", cohort_comm_split(world, rank % 2, rank, &sub), rank)))
    return failures;
  float buf[64] = {0};
  int odd = rank % 2, culprit = rank == 3; /* sub rank 1 of the odd group */
  cohort_status st = cohort_allreduce(sub, buf, buf, culprit ? 32 : 64, COHORT_F32, COHORT_SUM);
  char msg[1200];
  snprintf(msg, sizeof msg, "%s", cohort_last_error());
  if (odd && size >= 4) {
    if (st != COHORT_ERR_MISMATCH) failures += fail("mismatch in the odd group not reported", rank, msg);
    if (!strstr(msg, "(rank 3 of the parent)") || !strstr(msg, "count=32"))
      failures += fail("mismatch message does not name rank 3 of the parent", rank, msg);
    /* Refused before data moved on every rank: the group goes on, and its next call is right. */
    float one = (float)rank;
    failures += call_failed("the group's allreduce after a refused call",
                            cohort_allreduce(sub, &one, &one, 1, COHORT_F32, COHORT_SUM), rank);
    float want = 0;
    for (int p = 1; p < size; p += 2)
      want += (float)p;
    if (!failures && one != want) failures += fail("the group's allreduce after a refused call is wrong", rank, NULL);
  } else {
    failures += call_failed("allreduce in the even group", st, rank);
  }
  cohort_comm_destroy(sub);
  failures += call_failed("world after a failed sub-communicator", cohort_barrier(world), rank);
  return failures;
}

/* ---- twins ---- */

typedef struct twin_maker {
  cohort_comm *world, *twin;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go, world_rank, failures;
} twin_maker;

static void *make_twin(void *arg) {
  twin_maker *m = arg;
  pthread_mutex_lock(&m->mu);
  while (!m->go)
    pthread_cond_wait(&m->cv, &m->mu);
  pthread_mutex_unlock(&m->mu);
  m->failures += call_failed("cohort_comm_twin", cohort_comm_twin(m->world, "check-twin", &m->twin), m->world_rank);
  /* Its own collectives, while world's go on in the main thread. */
  for (int it = 0; it < 20 && !m->failures; it++) {
    int64_t v = m->world_rank * 1000 + it, want = 0;
    for (int p = 0; p < cohort_size(m->world); p++)
      want += p * 1000 + it;
    m->failures += call_failed("allreduce on the twin", cohort_allreduce(m->twin, &v, &v, 1, COHORT_I64, COHORT_SUM),
                               m->world_rank);
    if (!m->failures && v != want) m->failures += fail("allreduce value on the twin", m->world_rank, NULL);
  }
  return NULL;
}

int split_check_twin(cohort_comm *world) {
  int rank = cohort_rank(world), size = cohort_size(world), failures = 0;
  twin_maker m = {.world = world, .world_rank = rank};
  pthread_mutex_init(&m.mu, NULL);
  pthread_cond_init(&m.cv, NULL);
  pthread_t th;
  pthread_create(&th, NULL, make_twin, &m);
  /* rank r lets its twin start after r of world's allreduces: the ranks arrive at different points of world's
   * sequence, which a collective on world could not allow. */
  for (int it = 0; it < size + 30 && !failures; it++) {
    if (it == rank) {
      pthread_mutex_lock(&m.mu);
      m.go = 1;
      pthread_cond_signal(&m.cv);
      pthread_mutex_unlock(&m.mu);
    }
    int32_t v[256];
    for (int k = 0; k < 256; k++)
      v[k] = rank + k;
    failures += call_failed("allreduce on world beside the twin",
                            cohort_allreduce(world, v, v, 256, COHORT_I32, COHORT_SUM), rank);
    if (!failures && v[255] != size * (size - 1) / 2 + 255 * size)
      failures += fail("allreduce value on world", rank, NULL);
  }
  if (failures) { /* the twin thread waits for its turn: let it go, so that it can fail too */
    pthread_mutex_lock(&m.mu);
    m.go = 1;
    pthread_cond_signal(&m.cv);
    pthread_mutex_unlock(&m.mu);
  }
  pthread_join(th, NULL);
  failures += m.failures;
  cohort_comm *again = NULL;
  if (!failures && cohort_comm_twin(world, "check-twin", &again) != COHORT_ERR_INVALID)
    failures += fail("a second twin of one name was not refused", rank, cohort_last_error());
  if (!failures && (cohort_comm_twin(world, "no spaces", &again) != COHORT_ERR_INVALID ||
                    !strstr(cohort_last_error(), "[A-Za-z0-9_.-]")))
    failures += fail("a bad twin name was not refused", rank, cohort_last_error());
  cohort_comm_destroy(m.twin);
  pthread_mutex_destroy(&m.mu);
  pthread_cond_destroy(&m.cv);
  failures += call_failed("barrier on world after its twin", cohort_barrier(world), rank);
  return failures;
}
