/*
 * ckpt.c: checkpoint files, format version 1 (docs/checkpoint-format.md).
 *
 * The writer streams the file through a buffer, extending the CRC as it goes, so that saving needs no second copy
 * of the model. The loader reads the whole file into one buffer; entries point into it.
 *
 * The format is little-endian and so is every host cohort supports; the assertion below makes a big-endian build
 * fail loudly rather than write files no one else can read.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/crc32c.h"
#include "cohort/ckpt.h"
#include "core/error.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checkpoint format is little-endian");

long long cohort__ckpt_test_kill_after = -1;

typedef struct wentry {
  char *name;
  cohort_dtype dtype;
  int ndims;
  int64_t dims[COHORT_CKPT_MAX_DIMS];
  size_t nbytes;
  void *data;
} wentry;

struct cohort_ckpt_writer {
  char *signature;
  wentry *entries;
  size_t count, cap;
};

struct cohort_ckpt {
  char *path;
  uint8_t *buf; /* the whole file */
  size_t size;
  uint32_t version;
  char *signature;
  cohort_ckpt_entry *entries;
  char **names;
  size_t count;
};

/* ---- writing ---- */

cohort_status cohort_ckpt_writer_create(const char *signature, cohort_ckpt_writer **out) {
  if (!out || !signature || !*signature || strlen(signature) > COHORT_CKPT_MAX_SIGNATURE)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_writer_create: the signature must be 1..%d bytes",
                         COHORT_CKPT_MAX_SIGNATURE);
  cohort_ckpt_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->signature = strdup(signature))) {
    free(w);
    return cohort__error(COHORT_ERR_SYSTEM, "cohort_ckpt_writer_create: out of memory");
  }
  *out = w;
  return COHORT_OK;
}

void cohort_ckpt_writer_destroy(cohort_ckpt_writer *w) {
  if (!w) return;
  for (size_t i = 0; i < w->count; i++) {
    free(w->entries[i].name);
    free(w->entries[i].data);
  }
  free(w->entries);
  free(w->signature);
  free(w);
}

cohort_status cohort_ckpt_add(cohort_ckpt_writer *w, const char *name, cohort_dtype dtype, int ndims,
                              const int64_t *dims, const void *data) {
  if (!w || !name) return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_add: NULL writer or name");
  size_t nlen = strlen(name);
  if (nlen == 0 || nlen > COHORT_CKPT_MAX_NAME)
    return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_add: entry name '%.40s' must be 1..%d bytes", name,
                         COHORT_CKPT_MAX_NAME);
  size_t esize = cohort_dtype_size(dtype);
  if (esize == 0) return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_add '%s': unknown dtype %d", name, (int)dtype);
  if (ndims < 0 || ndims > COHORT_CKPT_MAX_DIMS || (ndims > 0 && !dims))
    return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_add '%s': %d dimensions (0..%d allowed)", name, ndims,
                         COHORT_CKPT_MAX_DIMS);
  size_t count = 1;
  for (int i = 0; i < ndims; i++) {
    if (dims[i] < 0 || (dims[i] > 0 && count > SIZE_MAX / esize / (size_t)dims[i]))
      return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_add '%s': bad dimension %d: %lld", name, i,
                           (long long)dims[i]);
    count *= (size_t)dims[i];
  }
  size_t nbytes = count * esize;
  if (nbytes && !data) return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_add '%s': NULL data", name);
  for (size_t i = 0; i < w->count; i++)
    if (strcmp(w->entries[i].name, name) == 0)
      return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_add: entry '%s' was already added", name);
  if (w->count == w->cap) {
    size_t ncap = w->cap ? 2 * w->cap : 16;
    wentry *n = realloc(w->entries, ncap * sizeof *n);
    if (!n) return cohort__error(COHORT_ERR_SYSTEM, "cohort_ckpt_add: out of memory");
    w->entries = n;
    w->cap = ncap;
  }
  wentry *e = &w->entries[w->count];
  memset(e, 0, sizeof *e);
  e->name = strdup(name);
  e->data = malloc(nbytes ? nbytes : 1);
  if (!e->name || !e->data) {
    free(e->name);
    free(e->data);
    return cohort__error(COHORT_ERR_SYSTEM, "cohort_ckpt_add '%s': cannot copy %zu bytes", name, nbytes);
  }
  if (nbytes) memcpy(e->data, data, nbytes);
  e->dtype = dtype;
  e->ndims = ndims;
  for (int i = 0; i < ndims; i++)
    e->dims[i] = dims[i];
  e->nbytes = nbytes;
  w->count++;
  return COHORT_OK;
}

cohort_status cohort_ckpt_add_f32(cohort_ckpt_writer *w, const char *name, int ndims, const int64_t *dims,
                                  const float *data) {
  return cohort_ckpt_add(w, name, COHORT_F32, ndims, dims, data);
}

cohort_status cohort_ckpt_add_bytes(cohort_ckpt_writer *w, const char *name, const void *data, size_t len) {
  int64_t d = (int64_t)len;
  return cohort_ckpt_add(w, name, COHORT_U8, 1, &d, data);
}

cohort_status cohort_ckpt_add_i64(cohort_ckpt_writer *w, const char *name, int64_t value) {
  return cohort_ckpt_add(w, name, COHORT_I64, 0, NULL, &value);
}

/* A buffered output file that checksums what passes through it. */
typedef struct ostream {
  int fd;
  const char *path;
  uint8_t *buf;
  size_t len, cap;
  uint64_t written; /* bytes handed to the kernel */
  uint32_t crc;
} ostream;

static cohort_status os_flush(ostream *os) {
  size_t off = 0;
  while (off < os->len) {
    size_t n = os->len - off;
    if (cohort__ckpt_test_kill_after >= 0) {
      long long room = cohort__ckpt_test_kill_after - (long long)os->written;
      if (room <= 0) raise(SIGKILL);
      if ((long long)n > room) n = (size_t)room;
    }
    ssize_t k = write(os->fd, os->buf + off, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "checkpoint '%s': write failed at byte %llu", os->path,
                                 (unsigned long long)os->written);
    }
    off += (size_t)k;
    os->written += (uint64_t)k;
  }
  os->len = 0;
  return COHORT_OK;
}

static cohort_status os_write(ostream *os, const void *data, size_t len) {
  const uint8_t *p = data;
  os->crc = cohort__crc32c(os->crc, p, len);
  while (len) {
    if (os->len == os->cap) COHORT_CHECK(os_flush(os));
    size_t n = os->cap - os->len < len ? os->cap - os->len : len;
    memcpy(os->buf + os->len, p, n);
    os->len += n, p += n, len -= n;
  }
  return COHORT_OK;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static cohort_status write_all(cohort_ckpt_writer *w, ostream *os) {
  uint64_t total = COHORT__CKPT_HEADER_BYTES + strlen(w->signature) + COHORT__CKPT_TRAILER_BYTES;
  for (size_t i = 0; i < w->count; i++)
    total += COHORT__CKPT_ENTRY_FIXED + strlen(w->entries[i].name) + 8 * (uint64_t)w->entries[i].ndims + 8 +
             w->entries[i].nbytes;
  uint8_t head[COHORT__CKPT_HEADER_BYTES];
  memcpy(head, COHORT__CKPT_MAGIC, 8);
  put32(head + 8, COHORT_CKPT_VERSION);
  put32(head + 12, 0);
  put64(head + 16, total);
  put32(head + 24, (uint32_t)w->count);
  put32(head + 28, (uint32_t)strlen(w->signature));
  COHORT_CHECK(os_write(os, head, sizeof head));
  COHORT_CHECK(os_write(os, w->signature, strlen(w->signature)));
  for (size_t i = 0; i < w->count; i++) {
    const wentry *e = &w->entries[i];
    uint8_t fixed[COHORT__CKPT_ENTRY_FIXED] = {0};
    put32(fixed, (uint32_t)strlen(e->name));
    fixed[4] = (uint8_t)e->dtype;
    fixed[5] = (uint8_t)e->ndims;
    COHORT_CHECK(os_write(os, fixed, sizeof fixed));
    COHORT_CHECK(os_write(os, e->name, strlen(e->name)));
    for (int d = 0; d < e->ndims; d++) {
      uint8_t b[8];
      put64(b, (uint64_t)e->dims[d]);
      COHORT_CHECK(os_write(os, b, 8));
    }
    uint8_t nb[8];
    put64(nb, e->nbytes);
    COHORT_CHECK(os_write(os, nb, 8));
    COHORT_CHECK(os_write(os, e->data, e->nbytes));
  }
  uint8_t crc[4];
  put32(crc, os->crc);
  COHORT_CHECK(os_write(os, crc, 4));
  COHORT_CHECK(os_flush(os));
  if (os->written != total)
    return cohort__error(COHORT_ERR_INTERNAL, "checkpoint '%s': wrote %llu bytes, expected %llu", os->path,
                         (unsigned long long)os->written, (unsigned long long)total);
  return COHORT_OK;
}

/* The directory of path into dir; returns the name within it. */
static const char *dir_of(const char *path, char *dir, size_t len) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, len, ".");
  else if (slash == path)
    snprintf(dir, len, "/");
  else
    snprintf(dir, len, "%.*s", (int)(slash - path), path);
  return slash ? slash + 1 : path;
}

/* Makes the rename durable: without this a crash right after rename() may bring back the old directory entry. */
static cohort_status fsync_dir(const char *path) {
  char dir[4096];
  dir_of(path, dir, sizeof dir);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "checkpoint '%s': cannot open directory '%s'", path, dir);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  /* Some filesystems refuse fsync on directories (EINVAL); the data itself is already on disk then. */
  if (rc != 0 && err != EINVAL)
    return cohort__error_errno(COHORT_ERR_SYSTEM, err, "checkpoint '%s': fsync of directory '%s'", path, dir);
  return COHORT_OK;
}

/* Removes PATH.tmp.<pid> files that writers killed mid-save left beside path, whose process no longer exists on this
 * host: each is as large as a checkpoint, and a job preempted often (SIGKILL) would otherwise fill its disk with
 * them. Best effort, before this save writes its own (the space may be what it needs). A writer on another host of a
 * shared filesystem would look dead here; only one writer per path at a time is supported anyway (the last rename
 * wins), and one whose file went fails its rename with a message. */
static void remove_dead_writers_files(const char *path) {
  char dir[4096];
  const char *base = dir_of(path, dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d) return;
  size_t blen = strlen(base);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const char *name = e->d_name;
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0) continue;
    const char *digits = name + blen + 5;
    char *end = NULL;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (!*digits || *end || errno || pid <= 0 || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to ask): left alone */
    unlinkat(dirfd(d), name, 0);
  }
  closedir(d);
}

cohort_status cohort_ckpt_writer_save(cohort_ckpt_writer *w, const char *path) {
  cohort_status st = COHORT_OK;
  char tmp[4200];
  ostream os = {.fd = -1, .path = path};
  if (!w || !path || !*path) return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_writer_save: NULL writer or path");
  int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof tmp)
    return cohort__error(COHORT_ERR_INVALID, "checkpoint path too long: '%s'", path);
  remove_dead_writers_files(path);
  os.cap = 1 << 20;
  os.buf = malloc(os.cap);
  if (!os.buf) return cohort__error(COHORT_ERR_SYSTEM, "checkpoint '%s': out of memory", path);
  os.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (os.fd < 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "checkpoint: cannot create '%s'", tmp);
    goto fail;
  }
  os.path = tmp;
  if ((st = write_all(w, &os)) != COHORT_OK) goto fail;
  if (fsync(os.fd) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "checkpoint: fsync of '%s'", tmp);
    goto fail;
  }
  if (close(os.fd) != 0) {
    os.fd = -1;
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "checkpoint: close of '%s'", tmp);
    goto fail;
  }
  os.fd = -1;
  if (rename(tmp, path) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "checkpoint: cannot rename '%s' to '%s'", tmp, path);
    goto fail;
  }
  free(os.buf);
  return fsync_dir(path);

fail:
  if (os.fd >= 0) close(os.fd);
  unlink(tmp);
  free(os.buf);
  return st;
}

/* ---- loading ---- */

static uint32_t get32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint64_t get64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static cohort_status truncated(const cohort_ckpt *ck, const char *where) {
  return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is truncated at byte %zu (in the %s)", ck->path, ck->size,
                       where);
}

static cohort_status read_file(cohort_ckpt *ck) {
  int fd = open(ck->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cohort__error_errno(COHORT_ERR_INVALID, errno, "cannot open checkpoint '%s'", ck->path);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    return cohort__error_errno(COHORT_ERR_SYSTEM, err, "checkpoint '%s': fstat", ck->path);
  }
  ck->size = (size_t)sb.st_size;
  ck->buf = malloc(ck->size ? ck->size : 1);
  if (!ck->buf) {
    close(fd);
    return cohort__error(COHORT_ERR_SYSTEM, "checkpoint '%s': cannot allocate %zu bytes", ck->path, ck->size);
  }
  size_t off = 0;
  while (off < ck->size) {
    ssize_t k = read(fd, ck->buf + off, ck->size - off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int err = errno;
      close(fd);
      return cohort__error_errno(COHORT_ERR_SYSTEM, err, "checkpoint '%s': read failed at byte %zu", ck->path, off);
    }
    if (k == 0) break; /* shrank while we read: check what we have */
    off += (size_t)k;
  }
  ck->size = off;
  close(fd);
  return COHORT_OK;
}

static cohort_status parse_entries(cohort_ckpt *ck, size_t pos, uint32_t nentries) {
  size_t end = ck->size - COHORT__CKPT_TRAILER_BYTES;
  if (nentries > (end - pos) / COHORT__CKPT_ENTRY_FIXED)
    return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is malformed: %u entries cannot fit in %zu bytes",
                         ck->path, nentries, end - pos);
  ck->entries = calloc(nentries + 1, sizeof *ck->entries);
  ck->names = calloc(nentries + 1, sizeof *ck->names);
  if (!ck->entries || !ck->names) return cohort__error(COHORT_ERR_SYSTEM, "checkpoint '%s': out of memory", ck->path);
  for (uint32_t i = 0; i < nentries; i++) {
    size_t at = pos;
#define NEED(n)                                                                                                        \
  do {                                                                                                                 \
    if ((n) > end - pos)                                                                                               \
      return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is malformed: entry %u at byte %zu runs past the end", \
                           ck->path, i, at);                                                                           \
  } while (0)
    NEED(COHORT__CKPT_ENTRY_FIXED);
    uint32_t nlen = get32(ck->buf + pos);
    int dtype = ck->buf[pos + 4], ndims = ck->buf[pos + 5];
    pos += COHORT__CKPT_ENTRY_FIXED;
    size_t esize = cohort_dtype_size((cohort_dtype)dtype);
    if (nlen == 0 || nlen > COHORT_CKPT_MAX_NAME || esize == 0 || ndims > COHORT_CKPT_MAX_DIMS)
      return cohort__error(COHORT_ERR_INVALID,
                           "checkpoint '%s' is malformed: entry %u at byte %zu has name length %u, dtype %d, %d dims",
                           ck->path, i, at, nlen, dtype, ndims);
    NEED(nlen);
    if (!(ck->names[i] = strndup((const char *)ck->buf + pos, nlen)))
      return cohort__error(COHORT_ERR_SYSTEM, "checkpoint '%s': out of memory", ck->path);
    pos += nlen;
    cohort_ckpt_entry *e = &ck->entries[i];
    e->name = ck->names[i];
    e->dtype = (cohort_dtype)dtype;
    e->ndims = ndims;
    NEED(8 * (size_t)ndims + 8);
    size_t count = 1;
    for (int d = 0; d < ndims; d++) {
      uint64_t v = get64(ck->buf + pos + 8 * (size_t)d);
      if (v > (uint64_t)(end - pos) || (v && count > (end - pos) / v))
        return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is malformed: entry '%s' has dimension %llu",
                             ck->path, e->name, (unsigned long long)v);
      e->dims[d] = (int64_t)v;
      count *= (size_t)v;
    }
    pos += 8 * (size_t)ndims;
    uint64_t nbytes = get64(ck->buf + pos);
    pos += 8;
    if (count > SIZE_MAX / esize || nbytes != count * esize)
      return cohort__error(COHORT_ERR_INVALID,
                           "checkpoint '%s' is malformed: entry '%s' holds %llu bytes, its shape needs %zu", ck->path,
                           e->name, (unsigned long long)nbytes, count * esize);
    NEED(nbytes);
#undef NEED
    e->count = count;
    e->nbytes = (size_t)nbytes;
    e->data = ck->buf + pos;
    pos += (size_t)nbytes;
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(ck->names[j], e->name) == 0)
        return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is malformed: entry '%s' appears twice", ck->path,
                             e->name);
  }
  if (pos != end)
    return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is malformed: %zu unaccounted bytes after entry %u",
                         ck->path, end - pos, nentries);
  ck->count = nentries;
  return COHORT_OK;
}

cohort_status cohort_ckpt_load(const char *path, const char *expected_signature, cohort_ckpt **out) {
  cohort_status st = COHORT_OK;
  if (!path || !out) return cohort__error(COHORT_ERR_INVALID, "cohort_ckpt_load: NULL path or output");
  cohort_ckpt *ck = calloc(1, sizeof *ck);
  if (!ck || !(ck->path = strdup(path))) {
    free(ck);
    return cohort__error(COHORT_ERR_SYSTEM, "cohort_ckpt_load: out of memory");
  }
  if ((st = read_file(ck)) != COHORT_OK) goto fail;
  const uint8_t *b = ck->buf;
  if (ck->size < 8) {
    st = truncated(ck, "magic number");
    goto fail;
  }
  if (memcmp(b, COHORT__CKPT_MAGIC, 8) != 0) {
    st = cohort__error(COHORT_ERR_INVALID, "'%s' is not a cohort checkpoint: its first 8 bytes are not \"%s\"", path,
                       COHORT__CKPT_MAGIC);
    goto fail;
  }
  if (ck->size < 12) {
    st = truncated(ck, "header");
    goto fail;
  }
  /* The version before the checksum: a newer format may checksum differently, and "unsupported version" is the
   * message that helps then. */
  ck->version = get32(b + 8);
  if (ck->version != COHORT_CKPT_VERSION) {
    st = cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' has unsupported version %u (this build reads version %d)",
                       path, ck->version, COHORT_CKPT_VERSION);
    goto fail;
  }
  if (ck->size < COHORT__CKPT_HEADER_BYTES) {
    st = truncated(ck, "header");
    goto fail;
  }
  uint64_t want = get64(b + 16);
  if (ck->size < want) {
    st = cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is truncated at byte %zu: its header says it is %llu bytes",
                       path, ck->size, (unsigned long long)want);
    goto fail;
  }
  if (ck->size > want) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "checkpoint '%s' is %zu bytes but its header says %llu: bytes were appended or the header is "
                       "corrupt",
                       path, ck->size, (unsigned long long)want);
    goto fail;
  }
  if (want < COHORT__CKPT_HEADER_BYTES + COHORT__CKPT_TRAILER_BYTES) {
    st = cohort__error(COHORT_ERR_INVALID, "checkpoint '%s': header says it is only %llu bytes long", path,
                       (unsigned long long)want);
    goto fail;
  }
  uint32_t stored = get32(b + ck->size - COHORT__CKPT_TRAILER_BYTES);
  uint32_t computed = cohort__crc32c(0, b, ck->size - COHORT__CKPT_TRAILER_BYTES);
  if (stored != computed) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "checkpoint '%s': checksum mismatch: file is corrupt (CRC32C stored 0x%08x, computed 0x%08x)",
                       path, stored, computed);
    goto fail;
  }
  uint32_t nentries = get32(b + 24), siglen = get32(b + 28);
  size_t pos = COHORT__CKPT_HEADER_BYTES;
  if (siglen == 0 || siglen > COHORT_CKPT_MAX_SIGNATURE || siglen > ck->size - COHORT__CKPT_TRAILER_BYTES - pos) {
    st = cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' is malformed: signature of %u bytes", path, siglen);
    goto fail;
  }
  if (!(ck->signature = strndup((const char *)b + pos, siglen))) {
    st = cohort__error(COHORT_ERR_SYSTEM, "cohort_ckpt_load: out of memory");
    goto fail;
  }
  pos += siglen;
  if ((st = parse_entries(ck, pos, nentries)) != COHORT_OK) goto fail;
  if (expected_signature && strcmp(expected_signature, ck->signature) != 0) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "checkpoint '%s' was written by a model with signature \"%s\", this model is \"%s\"", path,
                       ck->signature, expected_signature);
    goto fail;
  }
  *out = ck;
  return COHORT_OK;

fail:
  cohort_ckpt_destroy(ck);
  return st;
}

void cohort_ckpt_destroy(cohort_ckpt *ck) {
  if (!ck) return;
  if (ck->names)
    for (size_t i = 0; ck->names[i]; i++)
      free(ck->names[i]);
  free(ck->names);
  free(ck->entries);
  free(ck->signature);
  free(ck->buf);
  free(ck->path);
  free(ck);
}

const char *cohort_ckpt_signature(const cohort_ckpt *ck) { return ck->signature; }
uint32_t cohort_ckpt_version(const cohort_ckpt *ck) { return ck->version; }
size_t cohort_ckpt_count(const cohort_ckpt *ck) { return ck->count; }

cohort_status cohort_ckpt_entry_at(const cohort_ckpt *ck, size_t i, cohort_ckpt_entry *out) {
  if (i >= ck->count)
    return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' has %zu entries, no entry %zu", ck->path, ck->count, i);
  *out = ck->entries[i];
  return COHORT_OK;
}

cohort_status cohort_ckpt_find(const cohort_ckpt *ck, const char *name, cohort_ckpt_entry *out) {
  for (size_t i = 0; i < ck->count; i++)
    if (strcmp(ck->entries[i].name, name) == 0) {
      *out = ck->entries[i];
      return COHORT_OK;
    }
  return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s' has no entry '%s'", ck->path, name);
}

static void shape_str(char *buf, size_t len, int ndims, const int64_t *dims) {
  size_t n = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndims && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)dims[i]);
  if (n < len) snprintf(buf + n, len - n, "]");
}

static cohort_status get_checked(const cohort_ckpt *ck, const char *name, cohort_dtype dtype, int ndims,
                                 const int64_t *dims, void *out) {
  cohort_ckpt_entry e;
  COHORT_CHECK(cohort_ckpt_find(ck, name, &e));
  int same = e.dtype == dtype && e.ndims == ndims;
  for (int i = 0; same && i < ndims; i++)
    same = e.dims[i] == dims[i];
  if (!same) {
    char have[200], want[200];
    shape_str(have, sizeof have, e.ndims, e.dims);
    shape_str(want, sizeof want, ndims, dims);
    return cohort__error(COHORT_ERR_INVALID, "checkpoint '%s': entry '%s' is %s %s, expected %s %s", ck->path, name,
                         cohort_dtype_name(e.dtype), have, cohort_dtype_name(dtype), want);
  }
  memcpy(out, e.data, e.nbytes);
  return COHORT_OK;
}

cohort_status cohort_ckpt_get_f32(const cohort_ckpt *ck, const char *name, int ndims, const int64_t *dims, float *out) {
  return get_checked(ck, name, COHORT_F32, ndims, dims, out);
}

cohort_status cohort_ckpt_get_bytes(const cohort_ckpt *ck, const char *name, void *out, size_t len) {
  int64_t d = (int64_t)len;
  return get_checked(ck, name, COHORT_U8, 1, &d, out);
}

cohort_status cohort_ckpt_get_i64(const cohort_ckpt *ck, const char *name, int64_t *out) {
  return get_checked(ck, name, COHORT_I64, 0, NULL, out);
}
