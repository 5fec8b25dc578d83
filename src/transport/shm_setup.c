/*
 * shm_setup.c: setting up the shared-memory transport over the store (shm.h): every rank's arrival and host, one
 * segment per rank (its inbound rings, staging buffers and arena), the peers' segments mapped, and the names
 * unlinked once everyone has mapped them. The data path is in shm.c, the node allreduce in shm_coll.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/shm.h"
#include "transport/shm_impl.h"

#define HOST_ID_MAX COHORT__SHM_HOST_ID_MAX

static void seg_layout(int size, uint64_t ring_bytes, uint64_t stage_bytes, uint64_t arena_bytes, uint64_t *ctl_offset,
                       uint64_t *data_offset, uint64_t *stage_offset, uint64_t *arena_offset, uint64_t *total) {
  *ctl_offset = round_up(sizeof(seg_hdr), CACHE_LINE);
  *data_offset = round_up(*ctl_offset + (uint64_t)size * sizeof(ring_ctl), PAGE);
  *stage_offset = round_up(*data_offset + (uint64_t)(size - 1) * ring_bytes, PAGE);
  *arena_offset = round_up(*stage_offset + 2 * stage_bytes, PAGE);
  *total = *arena_offset + arena_bytes;
}

long cohort__shm_auto_ring_bytes(int size) {
  const long most = 4L << 20, least = 256L << 10, per_rank = 32L << 20;
  long ring = size > 1 ? per_rank / (size - 1) : most;
  ring = ring > most ? most : ring < least ? least : ring;
  return ring / PAGE * PAGE;
}

long cohort__shm_auto_small_bytes(int size) { return size <= 2 ? (long)COHORT__SHM_SMALL_BYTES : 0; }

/* The arena is address space until cohort_alloc hands a block out and reserves its pages (falling back to malloc
 * when /dev/shm has no room), so a large one costs little unused. A fixed 1 GiB filled up under one model of about
 * 60 M parameters (its parameters, gradients, optimizer state and DDP's buckets all pass through torch's allocator),
 * and from then on every collective staged its data again. So auto shares out /dev/shm among the host's ranks, but
 * at most 4 GiB each: every rank maps every local rank's arena (a virtual-memory limit, ulimit -v or Slurm's, is
 * met by ranks x arena; the arena is also capped to a quarter of it), and a process forked from a rank (DataLoader
 * workers) copies the arena blocks in use (python/torch_ext/shared_alloc.cpp), which the cap bounds too. */
long cohort__shm_auto_arena_bytes(int size) {
  const uint64_t least = 1ull << 30, most = 4ull << 30, ranks = (uint64_t)(size > 1 ? size : 1);
  struct statvfs fs;
  uint64_t shm = statvfs("/dev/shm", &fs) == 0 ? (uint64_t)fs.f_blocks * fs.f_frsize : 0;
  uint64_t arena = shm / ranks;
  arena = arena < least ? least : arena > most ? most : arena;
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && arena > (uint64_t)as.rlim_cur / 4 / ranks)
    arena = (uint64_t)as.rlim_cur / 4 / ranks;
  return (long)(arena / PAGE * PAGE);
}

/* The ring that producer writes into, in the segment of its owner. */
static char *ring_data(seg_hdr *s, int owner, int producer) {
  int slot = producer < owner ? producer : producer - 1;
  return (char *)s + s->data_offset + (uint64_t)slot * s->ring_bytes;
}

static ring_ctl *ring_ctl_of(seg_hdr *s, int producer) { return (ring_ctl *)((char *)s + s->ctl_offset) + producer; }

void cohort__shm_host_identity(const char *node, char *out, size_t len) {
  char host[128] = "?", boot[64] = "?", ns[64] = "?";
  gethostname(host, sizeof host - 1);
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, boot, sizeof boot - 1);
    boot[n > 0 ? n : 0] = '\0';
    boot[strcspn(boot, "\n")] = '\0';
    close(fd);
  }
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[n > 0 ? n : 0] = '\0';
  if (node && node[0])
    snprintf(out, len, "%s/%s/%s node %.64s", host, boot, ns, node);
  else
    snprintf(out, len, "%s/%s/%s", host, boot, ns);
}

/* Where a rank whose setup failed leaves "<status> rank <r>: <message>" for the others. */
#define ERROR_KEY "error"

/* A setup failure another rank reported under err_key ("<status> rank <r>: <message>"), as our own. */
static cohort_status peer_setup_failure(cohort__store *store, const char *err_key, int *found) {
  COHORT_CHECK(cohort__store_check(store, err_key, found));
  if (!*found) return COHORT_OK;
  char *why = NULL;
  size_t len = 0;
  COHORT_CHECK(cohort__store_get(store, err_key, 1.0, (void **)&why, &len));
  int status = 0, used = 0;
  if (sscanf(why, "%d %n", &status, &used) < 1 || status <= COHORT_OK || status > COHORT_ERR_PROTOCOL)
    status = COHORT_ERR_REMOTE;
  /* An INVALID setup (ranks on several hosts) is the same verdict everywhere, whoever saw it first. */
  cohort_status st = cohort__error((cohort_status)status, "shm setup failed on %s", why + used);
  free(why);
  return st;
}

/* For cohort__store_count_in: a setup failure some rank has reported under ERROR_KEY (arg is the store). */
static cohort_status any_setup_failure(void *arg) {
  int found = 0;
  return peer_setup_failure(arg, ERROR_KEY, &found);
}

/* Waits for key (rank p's), failing early if some rank has reported a setup failure under "error", or when the
 * caller's peer_elsewhere check fails (p runs another transport while we run COHORT_TRANSPORT=shm). */
static cohort_status await_key(cohort__store *store, const cohort__shm_options *opt, int p, const char *key,
                               int64_t deadline, void **value, size_t *len) {
  for (;;) {
    int exists = 0;
    COHORT_CHECK(cohort__store_check(store, key, &exists));
    if (exists) return cohort__store_get(store, key, 1.0, value, len);
    if (opt->peer_elsewhere) COHORT_CHECK(opt->peer_elsewhere(opt->arg, p));
    COHORT_CHECK(peer_setup_failure(store, ERROR_KEY, &exists));
    if (cohort__now_ns() > deadline) return COHORT_ERR_TIMEOUT;
    usleep(1000);
  }
}

static cohort_status map_peer(shm_transport *t, int p, const char *name, int pid) {
  peer *pe = &t->peers[p];
  struct stat sb;
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno,
                               "rank %d cannot open rank %d's segment /dev/shm%s (do the ranks share /dev/shm?)",
                               WORLD(t, t->base.rank), WORLD(t, p), name);
  if (fstat(fd, &sb) != 0 || sb.st_size < (off_t)sizeof(seg_hdr)) {
    close(fd);
    return cohort__error(COHORT_ERR_PROTOCOL, "rank %d's segment /dev/shm%s is too short (%lld bytes)", WORLD(t, p),
                         name, (long long)sb.st_size);
  }
  void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "mapping rank %d's segment /dev/shm%s", WORLD(t, p), name);
  pe->seg = m;
  pe->seg_len = (size_t)sb.st_size;
  seg_hdr *s = m;
  uint64_t ctl = 0, data = 0, stage = 0, arena = 0, total = 0;
  int sane = s->magic == SEG_MAGIC && s->ring_bytes >= 1 && s->ring_bytes <= (1ull << 40) &&
             s->stage_bytes <= (1ull << 40) && s->arena_bytes <= (1ull << 44);
  if (sane)
    seg_layout(t->base.size, s->ring_bytes, s->stage_bytes, s->arena_bytes, &ctl, &data, &stage, &arena, &total);
  if (!sane || s->rank != p || s->size != t->base.size || s->ctl_offset != ctl || s->data_offset != data ||
      s->stage_offset != stage || s->arena_offset != arena || s->total_bytes != total || total != (uint64_t)sb.st_size)
    return cohort__error(COHORT_ERR_PROTOCOL,
                         "rank %d's segment /dev/shm%s is not a cohort segment of rank %d among %d ranks", WORLD(t, p),
                         name, WORLD(t, p), t->base.size);
  /* The node collectives cut the vector into chunks of this size on every rank alike. */
  if (s->stage_bytes != t->me->stage_bytes)
    return cohort__error(COHORT_ERR_INVALID,
                         "ranks disagree on COHORT_SHM_CHUNK_BYTES: rank %d uses %llu, rank %d uses %llu", WORLD(t, p),
                         (unsigned long long)s->stage_bytes, WORLD(t, t->base.rank),
                         (unsigned long long)t->me->stage_bytes);
  /* ... and take the small path up to the same size: a rank on the other path would wait for flags never set. */
  if (s->small_bytes != t->me->small_bytes)
    return cohort__error(COHORT_ERR_INVALID,
                         "ranks disagree on COHORT_SHM_SMALL_BYTES: rank %d uses %llu, rank %d uses %llu", WORLD(t, p),
                         (unsigned long long)s->small_bytes, WORLD(t, t->base.rank),
                         (unsigned long long)t->me->small_bytes);
  pe->pid = pid;
  pe->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pe->pidfd < 0) {
    if (errno == ESRCH)
      return cohort__error(COHORT_ERR_REMOTE, "rank %d (pid %d) exited during shm setup", WORLD(t, p), pid);
    COHORT_LOG_DEBUG("pidfd_open(%d): %s; watching /proc instead", pid, strerror(errno));
  }
  pe->out_ctl = ring_ctl_of(s, t->base.rank);
  pe->out_data = ring_data(s, p, t->base.rank);
  pe->out_cap = s->ring_bytes;
  pe->out_head = pe->out_tail = 0;
  pe->in_ctl = ring_ctl_of(t->me, p);
  pe->in_data = ring_data(t->me, t->base.rank, p);
  pe->in_cap = t->me->ring_bytes;
  return COHORT_OK;
}

/* Shared memory needs every rank on this host: peer p's host identity must be ours. */
static cohort_status same_host(shm_transport *t, int rank, const char *host, int p, const char *peer_host) {
  if (strcmp(peer_host, host) == 0) return COHORT_OK;
  return cohort__error(COHORT_ERR_INVALID,
                       "COHORT_TRANSPORT=shm needs every rank on one host, but rank %d runs on %s and rank %d on %s "
                       "(host/boot id/pid namespace); use COHORT_TRANSPORT=tcp across hosts",
                       WORLD(t, rank), host, WORLD(t, p), peer_host);
}

static cohort_status create_own(shm_transport *t, uint64_t ring_bytes, uint64_t stage_bytes, uint64_t arena_bytes,
                                char *name, size_t name_len) {
  uint64_t r[2] = {0, 0};
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "getrandom for the segment name");
  snprintf(name, name_len, "/cohort-shm-%d-%016llx%016llx", (int)getpid(), (unsigned long long)r[0],
           (unsigned long long)r[1]);
  uint64_t ctl, data, stage, arena, total;
  seg_layout(t->base.size, ring_bytes, stage_bytes, arena_bytes, &ctl, &data, &stage, &arena, &total);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "shm_open(%s)", name);
  cohort_status st = COHORT_OK;
  int err;
  if (ftruncate(fd, (off_t)total) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "sizing /dev/shm%s to %llu bytes", name,
                             (unsigned long long)total);
  } else if ((err = posix_fallocate(fd, 0, (off_t)arena)) != 0) {
    /* Reserve the pages now: a full /dev/shm must be an error here, not a SIGBUS in the middle of a collective.
     * (The arena's pages are reserved when cohort_alloc hands them out.) */
    st = cohort__error_errno(COHORT_ERR_SYSTEM, err,
                             "reserving %llu bytes in /dev/shm for rank %d's rings and staging buffers "
                             "(COHORT_SHM_RING_BYTES=%llu per peer, COHORT_SHM_CHUNK_BYTES=%llu twice)",
                             (unsigned long long)total, WORLD(t, t->base.rank), (unsigned long long)ring_bytes,
                             (unsigned long long)stage_bytes);
  } else {
    void *m = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "mapping /dev/shm%s", name);
    } else {
      t->me = m;
      t->me_len = (size_t)total;
      t->me->rank = t->base.rank;
      t->me->size = t->base.size;
      t->me->ring_bytes = ring_bytes;
      t->me->ctl_offset = ctl;
      t->me->data_offset = data;
      t->me->stage_offset = stage;
      t->me->stage_bytes = stage_bytes;
      t->me->small_bytes = t->small_bytes;
      t->me->arena_offset = arena;
      t->me->arena_bytes = arena_bytes;
      t->me->total_bytes = total;
      for (int b = 0; b < 2; b++)
        t->me->node.zc_in[b] = t->me->node.zc_out[b] = -1;
      t->me->magic = SEG_MAGIC;
    }
  }
  if (st == COHORT_OK)
    t->me_fd = fd;
  else
    close(fd);
  if (st != COHORT_OK) shm_unlink(name);
  return st;
}

cohort_status cohort__shm_rendezvous(int rank, int size, int world_offset, cohort__store *store, int64_t deadline_ns,
                                     const cohort__shm_options *opt, cohort__transport **out) {
  long ring_bytes = opt->ring_bytes < 0 ? cohort__shm_auto_ring_bytes(size) : opt->ring_bytes;
  long chunk_bytes = opt->chunk_bytes;
  long arena_bytes = opt->arena_bytes < 0 ? cohort__shm_auto_arena_bytes(size) : opt->arena_bytes;
  long small_bytes = opt->small_bytes < 0 ? cohort__shm_auto_small_bytes(size) : opt->small_bytes;
  if ((uint64_t)small_bytes > COHORT__SHM_SMALL_BYTES)
    return cohort__error(COHORT_ERR_INVALID, "COHORT_SHM_SMALL_BYTES=%ld is not between 0 and %llu", small_bytes,
                         (unsigned long long)COHORT__SHM_SMALL_BYTES);
  if (chunk_bytes % CACHE_LINE)
    return cohort__error(COHORT_ERR_INVALID, "COHORT_SHM_CHUNK_BYTES=%ld is not a multiple of %d", chunk_bytes,
                         CACHE_LINE);
  /* The small-message path puts a whole vector of up to COHORT__SHM_SMALL_BYTES into one staging buffer. */
  uint64_t stage_bytes =
      (uint64_t)chunk_bytes < COHORT__SHM_SMALL_BYTES ? COHORT__SHM_SMALL_BYTES : (uint64_t)chunk_bytes;
  cohort_status st = COHORT_OK;
  const char *err_key = ERROR_KEY;
  char name[96] = "", key[160], host[HOST_ID_MAX];
  int created = 0;
  shm_transport *t = calloc(1, sizeof *t);
  if (!t) return cohort__error(COHORT_ERR_SYSTEM, "out of memory");
  t->base = (cohort__transport){.ops = &cohort__shm_ops, .rank = rank, .size = size};
  t->small_bytes = (uint64_t)small_bytes;
  t->me_fd = -1;
  pthread_mutex_init(&t->arena_mu, NULL);
  t->spin_ns = opt->spin_us * 1000;
  t->op_timeout_s = opt->op_timeout_s;
  t->timeout_ns = (int64_t)(opt->op_timeout_s * 1e9);
  t->peers = calloc((size_t)size, sizeof *t->peers);
  if (!t->peers) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    goto fail;
  }
  for (int p = 0; p < size; p++) {
    t->peers[p].pidfd = -1;
    t->peers[p].l.peer = p;
  }
  t->links = (cohort__links){.ops = &cohort__shm_link_ops,
                             .t = t,
                             .call = &t->call,
                             .pending = &t->pending,
                             .rank = rank,
                             .world_offset = world_offset,
                             .count = size};

  /* Arrive first, with no segment yet: a rank killed while it waits for its peers (cohortrun stopping a job whose
   * other rank failed to start, say) then leaves nothing in /dev/shm, where a segment would keep its memory until
   * reboot; the segments exist only for the moments in which every rank is there to map them. Everyone's host
   * identity comes with it, so ranks on several hosts are refused before anything is created. */
  cohort__shm_host_identity(opt->node_id, host, sizeof host);
  snprintf(key, sizeof key, "arrived/%d", rank);
  if ((st = cohort__store_set(store, key, host, strlen(host))) != COHORT_OK) goto fail;
  for (int p = 0; p < size; p++) {
    if (p == rank) continue;
    char *v = NULL, peer_host[HOST_ID_MAX];
    size_t len = 0;
    snprintf(key, sizeof key, "arrived/%d", p);
    st = await_key(store, opt, p, key, deadline_ns, (void **)&v, &len);
    if (st == COHORT_ERR_TIMEOUT)
      st = cohort__error(COHORT_ERR_TIMEOUT,
                         "shm rendezvous timed out: rank %d never arrived (COHORT_TIMEOUT sets the wait)", WORLD(t, p));
    if (st != COHORT_OK) goto fail;
    snprintf(peer_host, sizeof peer_host, "%.*s", (int)(len < sizeof peer_host ? len : sizeof peer_host - 1), v);
    free(v);
    if ((st = same_host(t, rank, host, p, peer_host)) != COHORT_OK) goto fail;
  }

  if ((st = create_own(t, (uint64_t)ring_bytes, stage_bytes, round_up((uint64_t)arena_bytes, PAGE), name,
                       sizeof name)) != COHORT_OK)
    goto fail;
  created = 1;
  char mine[HOST_ID_MAX + 160];
  snprintf(mine, sizeof mine, "%d %s %s", (int)getpid(), name, host);
  snprintf(key, sizeof key, "%d", rank);
  if ((st = cohort__store_set(store, key, mine, strlen(mine))) != COHORT_OK) goto fail;

  /* Everyone's segment, pid and host; all ranks see the same set, so all agree on whether shm can work. */
  for (int p = 0; p < size; p++) {
    if (p == rank) continue;
    char *v = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "%d", p);
    st = await_key(store, opt, p, key, deadline_ns, (void **)&v, &len);
    if (st == COHORT_ERR_TIMEOUT)
      st = cohort__error(COHORT_ERR_TIMEOUT,
                         "shm rendezvous timed out: rank %d never published its segment "
                         "(COHORT_TIMEOUT sets the wait)",
                         WORLD(t, p));
    if (st != COHORT_OK) goto fail;
    int pid = 0, used = 0;
    char peer_name[96], peer_host[HOST_ID_MAX];
    if (sscanf(v, "%d %95s %n", &pid, peer_name, &used) != 2 || pid <= 0 || strncmp(peer_name, "/cohort-shm-", 12)) {
      st = cohort__error(COHORT_ERR_PROTOCOL, "rank %d published a malformed shm address '%s'", WORLD(t, p), v);
      free(v);
      goto fail;
    }
    snprintf(peer_host, sizeof peer_host, "%s", v + used);
    free(v);
    if ((st = same_host(t, rank, host, p, peer_host)) != COHORT_OK) goto fail;
    if ((st = map_peer(t, p, peer_name, pid)) != COHORT_OK) goto fail;
  }

  /* Once every rank has mapped every segment, the names can go: the mappings keep the memory alive. */
  int64_t joined = 0;
  st = cohort__store_count_in(store, "mapped", size, deadline_ns, any_setup_failure, store, &joined);
  if (st == COHORT_ERR_TIMEOUT)
    st =
        cohort__error(st, "shm rendezvous: only %lld of %d ranks mapped the segments in time", (long long)joined, size);
  if (st != COHORT_OK) goto fail;
  shm_unlink(name);
  *out = &t->base;
  return COHORT_OK;

fail:
  if (!strstr(cohort_last_error(), "shm setup failed on")) {
    /* A peer that failed first has removed its segment, so what we saw since (a segment we could not open, say) may
     * be only the consequence: its reason, when there is one, is the cause. */
    char text[COHORT__ABORT_TEXT_MAX], why[COHORT__ABORT_TEXT_MAX + 32];
    snprintf(text, sizeof text, "%s", cohort_last_error());
    int found = 0;
    cohort_status theirs = peer_setup_failure(store, err_key, &found);
    if (found && theirs != COHORT_OK) {
      st = theirs;
      goto cleanup;
    }
    /* Tell the others, so that they fail now rather than at COHORT_TIMEOUT. */
    snprintf(why, sizeof why, "%d rank %d: %s", (int)st, WORLD(t, rank), text);
    cohort__store_set(store, err_key, why, strlen(why));
    cohort__error(st, "%s", text); /* the store call may have replaced the message */
  }
cleanup:
  if (created) shm_unlink(name);
  cohort__shm_destroy(&t->base);
  return st;
}
