/*
 * idx.c: the IDX array format (MNIST's): a 4-byte magic {0, 0, type, ndims}, ndims big-endian u32 dimensions,
 * then the elements, big-endian, row-major. Files are read through zlib, which reads gzip and plain files alike.
 *
 * A file is accepted only when its payload is exactly as long as its dimensions say: a truncated download and a
 * file with something appended are both errors, because training on a silently shortened dataset is worse than
 * not starting.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "cohort/data.h"
#include "core/error.h"

/* Buffers grow as data arrives rather than trusting the header's size up front, so that a corrupt header that
 * claims terabytes fails on the length check instead of on a giant allocation. */
#define IDX_FIRST_CHUNK ((size_t)64 << 20)

size_t cohort_idx_type_size(int type) {
  switch (type) {
  case COHORT_IDX_U8:
  case COHORT_IDX_I8:
    return 1;
  case COHORT_IDX_I16:
    return 2;
  case COHORT_IDX_I32:
  case COHORT_IDX_F32:
    return 4;
  case COHORT_IDX_F64:
    return 8;
  }
  return 0;
}

void cohort_idx_free(cohort_idx *idx) {
  if (!idx) return;
  free(idx->data);
  memset(idx, 0, sizeof *idx);
}

static const char *missing_hint(void) {
  return " (install the dataset with `apt-get install dataset-fashion-mnist`, or pass --data DIR with the "
         "directory that holds its files, gzipped or not)";
}

static cohort_status open_gz(const char *path, const char *what, const char *mode, gzFile *out) {
  int write = mode[0] == 'w';
  int fd = write ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (!write && err == ENOENT)
      return cohort__error(COHORT_ERR_INVALID, "cannot open %s file '%s': %s%s", what, path, strerror(err),
                           missing_hint());
    return cohort__error_errno(write ? COHORT_ERR_SYSTEM : COHORT_ERR_INVALID, err, "cannot open %s file '%s'", what,
                               path);
  }
  gzFile gz = gzdopen(fd, mode);
  if (!gz) {
    close(fd);
    return cohort__error(COHORT_ERR_SYSTEM, "zlib cannot open %s file '%s' (out of memory?)", what, path);
  }
  *out = gz;
  return COHORT_OK;
}

/* Reads up to len bytes; *got is how many arrived. *zerr is zlib's complaint when the stream is damaged. */
static void gz_read_full(gzFile gz, void *buf, size_t len, size_t *got, const char **zerr) {
  size_t done = 0;
  *zerr = NULL;
  while (done < len) {
    size_t want = len - done;
    if (want > (size_t)INT_MAX / 2) want = (size_t)INT_MAX / 2;
    int n = gzread(gz, (char *)buf + done, (unsigned)want);
    if (n < 0) {
      int code;
      *zerr = gzerror(gz, &code);
      break;
    }
    if (n == 0) {
      /* zlib reports a stream that ends mid-way (a cut download) as Z_BUF_ERROR beside a plain end of file. */
      int code;
      const char *msg = gzerror(gz, &code);
      if (code != Z_OK) *zerr = msg;
      break;
    }
    done += (size_t)n;
  }
  *got = done;
}

static void swap_to_host(void *data, size_t count, size_t esize) {
  uint8_t *p = data;
  if (esize == 1) return;
  for (size_t i = 0; i < count; i++, p += esize)
    for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
      uint8_t t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

cohort_status cohort_idx_read(const char *path, const char *what, cohort_idx *out) {
  cohort_status st = COHORT_OK;
  gzFile gz = NULL;
  uint8_t *data = NULL;
  if (!what) what = "data";
  if (!path || !out) return cohort__error(COHORT_ERR_INVALID, "cohort_idx_read: NULL path or output");
  memset(out, 0, sizeof *out);
  if ((st = open_gz(path, what, "rb", &gz)) != COHORT_OK) return st;

  uint8_t magic[4];
  size_t got;
  const char *zerr;
  gz_read_full(gz, magic, 4, &got, &zerr);
  if (got < 4) {
    st = cohort__error(COHORT_ERR_INVALID, "%s file '%s': expected a 4-byte IDX magic number, got %zu bytes%s%s", what,
                       path, got, zerr ? ": " : "", zerr ? zerr : "");
    goto fail;
  }
  size_t esize = cohort_idx_type_size(magic[2]);
  if (magic[0] != 0 || magic[1] != 0 || esize == 0) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "%s file '%s' is not an IDX file: magic number 0x%02x%02x%02x%02x (expected 0x0000TTDD, "
                       "TT an element type 08/09/0b/0c/0d/0e, DD the number of dimensions)",
                       what, path, magic[0], magic[1], magic[2], magic[3]);
    goto fail;
  }
  int ndims = magic[3];
  if (ndims < 1 || ndims > COHORT_IDX_MAX_DIMS) {
    st = cohort__error(COHORT_ERR_INVALID, "%s file '%s': %d dimensions in the IDX header (expected 1 to %d)", what,
                       path, ndims, COHORT_IDX_MAX_DIMS);
    goto fail;
  }
  uint8_t dimbuf[4 * COHORT_IDX_MAX_DIMS];
  gz_read_full(gz, dimbuf, 4 * (size_t)ndims, &got, &zerr);
  if (got < 4 * (size_t)ndims) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "%s file '%s' is truncated in its header: expected %d bytes of dimensions, got %zu%s%s", what,
                       path, 4 * ndims, got, zerr ? ": " : "", zerr ? zerr : "");
    goto fail;
  }
  size_t count = 1;
  for (int i = 0; i < ndims; i++) {
    const uint8_t *d = dimbuf + 4 * i;
    out->dims[i] = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
    if (out->dims[i] != 0 && count > SIZE_MAX / esize / out->dims[i]) {
      st = cohort__error(COHORT_ERR_INVALID, "%s file '%s': dimensions overflow the address space", what, path);
      goto fail;
    }
    count *= out->dims[i];
  }
  size_t want = count * esize;

  size_t cap = want < IDX_FIRST_CHUNK ? want : IDX_FIRST_CHUNK, have = 0;
  data = malloc(cap ? cap : 1);
  if (!data) {
    st = cohort__error(COHORT_ERR_SYSTEM, "%s file '%s': cannot allocate %zu bytes", what, path, cap);
    goto fail;
  }
  zerr = NULL;
  while (have < want) {
    if (have == cap) {
      size_t ncap = cap * 2 < want ? cap * 2 : want;
      uint8_t *n = realloc(data, ncap);
      if (!n) {
        st = cohort__error(COHORT_ERR_SYSTEM, "%s file '%s': cannot allocate %zu bytes", what, path, ncap);
        goto fail;
      }
      data = n;
      cap = ncap;
    }
    gz_read_full(gz, data + have, cap - have, &got, &zerr);
    have += got;
    if (got == 0 || zerr) break;
  }
  if (have < want) {
    st = cohort__error(COHORT_ERR_INVALID, "%s file '%s' is truncated: expected %zu bytes of %s, got %zu%s%s%s", what,
                       path, want, what, have, zerr ? " (gzip: " : "", zerr ? zerr : "", zerr ? ")" : "");
    goto fail;
  }
  /* One byte more tells a file with something appended; for gzip it also makes zlib check the stream's CRC. */
  uint8_t extra;
  gz_read_full(gz, &extra, 1, &got, &zerr);
  if (got != 0) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "%s file '%s' has trailing bytes after its payload: the dimensions promise %zu bytes of %s",
                       what, path, want, what);
    goto fail;
  }
  if (zerr) {
    st = cohort__error(COHORT_ERR_INVALID, "%s file '%s' is corrupt at the end of its gzip stream: %s", what, path,
                       zerr);
    goto fail;
  }
  swap_to_host(data, count, esize);
  gzclose(gz);
  out->type = (cohort_idx_type)magic[2];
  out->ndims = ndims;
  out->count = count;
  out->data = data;
  return COHORT_OK;

fail:
  free(data);
  if (gz) gzclose(gz);
  memset(out, 0, sizeof *out);
  return st;
}

cohort_status cohort_idx_write(const char *path, const cohort_idx *idx, int gzip) {
  cohort_status st = COHORT_OK;
  gzFile gz = NULL;
  uint8_t *be = NULL;
  if (!path || !idx || (!idx->data && idx->count))
    return cohort__error(COHORT_ERR_INVALID, "cohort_idx_write: NULL path, array or data");
  size_t esize = cohort_idx_type_size(idx->type);
  if (esize == 0 || idx->ndims < 1 || idx->ndims > COHORT_IDX_MAX_DIMS)
    return cohort__error(COHORT_ERR_INVALID, "cohort_idx_write '%s': bad type 0x%02x or %d dimensions", path,
                         (unsigned)idx->type, idx->ndims);
  size_t count = 1;
  for (int i = 0; i < idx->ndims; i++)
    count *= idx->dims[i];
  if (count != idx->count)
    return cohort__error(COHORT_ERR_INVALID, "cohort_idx_write '%s': count %zu is not the product of the dims (%zu)",
                         path, idx->count, count);
  if ((st = open_gz(path, "IDX", gzip ? "wb6" : "wbT", &gz)) != COHORT_OK) return st;
  uint8_t head[4 + 4 * COHORT_IDX_MAX_DIMS] = {0, 0, (uint8_t)idx->type, (uint8_t)idx->ndims};
  for (int i = 0; i < idx->ndims; i++) {
    uint32_t d = idx->dims[i];
    uint8_t *p = head + 4 + 4 * i;
    p[0] = (uint8_t)(d >> 24), p[1] = (uint8_t)(d >> 16), p[2] = (uint8_t)(d >> 8), p[3] = (uint8_t)d;
  }
  size_t bytes = count * esize;
  be = malloc(bytes ? bytes : 1);
  if (!be) {
    st = cohort__error(COHORT_ERR_SYSTEM, "cohort_idx_write '%s': cannot allocate %zu bytes", path, bytes);
    goto fail;
  }
  memcpy(be, idx->data, bytes);
  swap_to_host(be, count, esize); /* the swap is its own inverse */
  if (gzwrite(gz, head, 4 + 4 * (unsigned)idx->ndims) <= 0) goto write_fail;
  for (size_t off = 0; off < bytes;) {
    size_t n = bytes - off > (1u << 30) ? (1u << 30) : bytes - off;
    if (gzwrite(gz, be + off, (unsigned)n) <= 0) goto write_fail;
    off += n;
  }
  free(be);
  int rc = gzclose(gz);
  if (rc != Z_OK) return cohort__error(COHORT_ERR_SYSTEM, "cohort_idx_write '%s': closing failed (zlib %d)", path, rc);
  return COHORT_OK;

write_fail : {
  int code;
  st = cohort__error(COHORT_ERR_SYSTEM, "cohort_idx_write '%s': write failed: %s", path, gzerror(gz, &code));
}
fail:
  free(be);
  if (gz) gzclose(gz);
  return st;
}
