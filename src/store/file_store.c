/*
 * file_store.c: the store as a directory on a (shared) filesystem, for jobs without a reachable TCP host.
 *
 * Layout: each key is one file, "k_<key>" with every byte outside [A-Za-z0-9._-] written as %XX; a key whose escaped
 * name would exceed NAME_MAX-ish limits becomes "h_<sha256 of the key>". The "k_"/"h_" prefixes keep key files apart
 * from ".lock" and the ".tmp.*" files, and make "." and ".." impossible names.
 *
 * Invariants: a key file is only ever created by rename() of a fully written and fsync'd temp file, so a reader sees
 * an old value or a new value, never a torn one. Writers (SET, ADD, DELETE) hold an exclusive flock on ".lock", which
 * makes ADD's read-modify-write atomic across threads and processes (each handle opens its own lock file description,
 * and flock excludes between descriptions even in one process). Readers take no lock: GET polls with a short,
 * growing sleep. flock is advisory and depends on the filesystem honouring it (local filesystems and NFSv4 do).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/clock.h"
#include "core/error.h"
#include "store/store_impl.h"

#define FILE_NAME_MAX 200
#define FILE_POLL_MAX_US 20000

typedef struct file_store {
  cohort__store base;
  int lock_fd;
  char dir[PATH_MAX - 2 * FILE_NAME_MAX];
} file_store;

static int safe_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

/* The file name of key (see the layout above). */
static cohort_status key_path(const file_store *f, const char *key, char *path, size_t size) {
  static const char hex[] = "0123456789abcdef";
  char name[FILE_NAME_MAX + 8];
  size_t n = 0;
  name[n++] = 'k';
  name[n++] = '_';
  for (const unsigned char *p = (const unsigned char *)key; *p && n <= FILE_NAME_MAX; p++) {
    if (safe_char(*p)) {
      name[n++] = (char)*p;
    } else {
      name[n++] = '%';
      name[n++] = hex[*p >> 4];
      name[n++] = hex[*p & 15];
    }
  }
  if (n > FILE_NAME_MAX) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (!EVP_Digest(key, strlen(key), md, &md_len, EVP_sha256(), NULL))
      return cohort__error(COHORT_ERR_SYSTEM, "file store: SHA-256 of a long key failed in libcrypto");
    n = 0;
    name[n++] = 'h';
    name[n++] = '_';
    for (unsigned int i = 0; i < md_len; i++) {
      name[n++] = hex[md[i] >> 4];
      name[n++] = hex[md[i] & 15];
    }
  }
  name[n] = '\0';
  snprintf(path, size, "%s/%s", f->dir, name);
  return COHORT_OK;
}

/* Reads the whole file at path; *found = 0 (and COHORT_OK) when it does not exist. */
static cohort_status read_value(const char *path, void **value, size_t *len, int *found) {
  *found = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return COHORT_OK;
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot open '%s'", path);
  }
  cohort_status st = COHORT_OK;
  unsigned char *buf = NULL;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot stat '%s'", path);
    goto done;
  }
  if (sb.st_size < 0 || (uint64_t)sb.st_size > COHORT_STORE_VALUE_MAX) {
    st = cohort__error(COHORT_ERR_PROTOCOL, "file store: '%s' holds %lld bytes, more than a value may (%u)", path,
                       (long long)sb.st_size, COHORT_STORE_VALUE_MAX);
    goto done;
  }
  size_t size = (size_t)sb.st_size;
  buf = malloc(size + 1);
  if (!buf) {
    st = cohort__error(COHORT_ERR_SYSTEM, "file store: out of memory for a %zu-byte value", size);
    goto done;
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, buf + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot read '%s'", path);
      goto done;
    }
    if (r == 0) break; /* cannot happen for a renamed-in file; treat what is there as the value */
    got += (size_t)r;
  }
  buf[got] = '\0';
  *value = buf;
  *len = got;
  *found = 1;
  buf = NULL;
done:
  free(buf);
  close(fd);
  return st;
}

/* Writes value to a fresh temp file, fsyncs it and renames it over path, so that readers never see a torn value. */
static cohort_status write_atomic(const file_store *f, const char *path, const void *value, size_t len) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.tmp.XXXXXX", f->dir);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0)
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot create a temp file in '%s'", f->dir);
  cohort_status st = COHORT_OK;
  const char *p = value;
  size_t left = len;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot write '%s'", tmp);
      goto fail;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: fsync '%s'", tmp);
    goto fail;
  }
  if (close(fd) != 0) {
    fd = -1;
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: close '%s'", tmp);
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: rename '%s' to '%s'", tmp, path);
    goto fail;
  }
  return COHORT_OK;
fail:
  if (fd >= 0) close(fd);
  unlink(tmp);
  return st;
}

static cohort_status lock_dir(file_store *f) {
  while (flock(f->lock_fd, LOCK_EX) != 0) {
    if (errno != EINTR) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: flock '%s/.lock'", f->dir);
  }
  return COHORT_OK;
}

static void unlock_dir(file_store *f) { flock(f->lock_fd, LOCK_UN); }

static cohort_status file_set(cohort__store *store, const char *key, const void *value, size_t len) {
  file_store *f = (file_store *)store;
  char path[PATH_MAX];
  COHORT_CHECK(key_path(f, key, path, sizeof path));
  COHORT_CHECK(lock_dir(f));
  cohort_status st = write_atomic(f, path, value, len);
  unlock_dir(f);
  return st;
}

static cohort_status file_get(cohort__store *store, const char *key, double timeout_s, void **value, size_t *len) {
  file_store *f = (file_store *)store;
  char path[PATH_MAX];
  COHORT_CHECK(key_path(f, key, path, sizeof path));
  int64_t deadline = cohort__now_ns() + (int64_t)(timeout_s * 1e9);
  useconds_t sleep_us = 1000;
  for (;;) {
    int found = 0;
    COHORT_CHECK(read_value(path, value, len, &found));
    if (found) return COHORT_OK;
    int64_t left_ns = deadline - cohort__now_ns();
    if (left_ns <= 0)
      return cohort__error(COHORT_ERR_TIMEOUT, "key '%s' was not set in the file store '%s' within %.3g s", key, f->dir,
                           timeout_s);
    /* Polling, because a shared filesystem offers no portable change notification; the sleep grows so that a long
     * wait costs little, and stays short so that a key set by another process is seen within ~20 ms. */
    useconds_t nap = sleep_us;
    if ((int64_t)nap * 1000 > left_ns) nap = (useconds_t)(left_ns / 1000 + 1);
    usleep(nap);
    if (sleep_us < FILE_POLL_MAX_US) sleep_us *= 2;
  }
}

static cohort_status file_check(cohort__store *store, const char *key, int *exists) {
  file_store *f = (file_store *)store;
  char path[PATH_MAX];
  COHORT_CHECK(key_path(f, key, path, sizeof path));
  struct stat sb;
  if (stat(path, &sb) == 0) {
    *exists = 1;
    return COHORT_OK;
  }
  if (errno != ENOENT) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot stat '%s'", path);
  *exists = 0;
  return COHORT_OK;
}

static cohort_status file_add(cohort__store *store, const char *key, int64_t delta, int64_t *result) {
  file_store *f = (file_store *)store;
  char path[PATH_MAX];
  COHORT_CHECK(key_path(f, key, path, sizeof path));
  COHORT_CHECK(lock_dir(f));
  void *old = NULL;
  size_t old_len = 0;
  int found = 0;
  int64_t v = 0, sum = 0;
  cohort_status st = read_value(path, &old, &old_len, &found);
  if (st != COHORT_OK) goto done;
  if (found && cohort__store_parse_int(old, old_len, &v) != 0) {
    st = cohort__error(COHORT_ERR_INVALID, "file store: key '%s' holds a value that is not an integer counter", key);
    goto done;
  }
  if (__builtin_add_overflow(v, delta, &sum)) {
    st = cohort__error(COHORT_ERR_INVALID, "file store: adding to counter '%s' would overflow int64", key);
    goto done;
  }
  char text[COHORT__STORE_INT_TEXT_MAX + 1];
  size_t text_len = cohort__store_format_int(sum, text);
  st = write_atomic(f, path, text, text_len);
  if (st == COHORT_OK) *result = sum;
done:
  unlock_dir(f);
  free(old);
  return st;
}

static cohort_status file_del(cohort__store *store, const char *key) {
  file_store *f = (file_store *)store;
  char path[PATH_MAX];
  COHORT_CHECK(key_path(f, key, path, sizeof path));
  COHORT_CHECK(lock_dir(f));
  cohort_status st = COHORT_OK;
  if (unlink(path) != 0 && errno != ENOENT)
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot remove '%s'", path);
  unlock_dir(f);
  return st;
}

static void file_close(cohort__store *store) {
  file_store *f = (file_store *)store;
  close(f->lock_fd);
  free(f);
}

static const cohort__store_ops file_ops = {.name = "file",
                                           .set = file_set,
                                           .get = file_get,
                                           .check = file_check,
                                           .add = file_add,
                                           .del = file_del,
                                           .close = file_close};

/* mkdir -p: several ranks may race to create the same directories, so EEXIST is success. */
static cohort_status make_dirs(char *path) {
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    int rc = mkdir(path, 0700);
    int err = errno;
    *p = saved;
    if (rc != 0 && err != EEXIST) {
      *p = '\0';
      cohort_status st = cohort__error_errno(COHORT_ERR_SYSTEM, err, "file store: cannot create directory '%s'", path);
      *p = saved;
      return st;
    }
    if (saved == '\0') break;
  }
  return COHORT_OK;
}

cohort_status cohort__store_open_file(const char *dir, cohort__store **out) {
  if (!out) return cohort__error(COHORT_ERR_INVALID, "file store: out is NULL");
  *out = NULL;
  if (!dir || !dir[0]) return cohort__error(COHORT_ERR_INVALID, "file store: the directory name is empty");
  file_store *f = calloc(1, sizeof *f);
  if (!f) return cohort__error(COHORT_ERR_SYSTEM, "file store: out of memory");
  f->lock_fd = -1;
  cohort_status st = COHORT_OK;
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--; /* "dir/" and "dir" are the same store */
  if (n >= sizeof f->dir) {
    st = cohort__error(COHORT_ERR_INVALID, "file store: directory name of %zu bytes is too long", n);
    goto fail;
  }
  memcpy(f->dir, dir, n);
  f->dir[n] = '\0';
  st = make_dirs(f->dir);
  if (st != COHORT_OK) goto fail;
  char lock_path[PATH_MAX];
  snprintf(lock_path, sizeof lock_path, "%s/.lock", f->dir);
  f->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (f->lock_fd < 0) {
    st = cohort__error_errno(COHORT_ERR_SYSTEM, errno, "file store: cannot open '%s'", lock_path);
    goto fail;
  }
  f->base.ops = &file_ops;
  *out = &f->base;
  return COHORT_OK;
fail:
  free(f);
  return st;
}
