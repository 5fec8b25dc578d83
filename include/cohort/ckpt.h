/*
 * ckpt.h: checkpoint files: named tensors and small typed values, versioned, checksummed, written atomically.
 *
 * A checkpoint is a model signature (a string the caller chooses, e.g. the architecture and parameter shapes)
 * and a list of named entries. An entry has a dtype (cohort_dtype), a shape of up to COHORT_CKPT_MAX_DIMS
 * dimensions and its elements. Parameters and optimizer state are float tensors; the step, the epoch, the sampler
 * position or an RNG state are small i64 or u8 entries. The layout is in docs/checkpoint-format.md.
 *
 * Writing: collect entries in a writer (which copies them, so the caller may go on changing its tensors at once),
 * then cohort_ckpt_writer_save(): the file is written to PATH.tmp.<pid>, flushed with fsync, renamed over PATH and
 * the directory is fsync'ed. A crash at any moment leaves either the old checkpoint or the new one at PATH, never
 * a mixture. In a data-parallel job only one rank (rank 0) should save; the API does not decide that.
 *
 * Loading: cohort_ckpt_load() reads the whole file and checks, in this order, the magic number, the format
 * version, the length recorded in the header (truncation), the CRC32C over everything before the trailer, the
 * structure of every entry, and finally the model signature the caller expects. Each failure is
 * COHORT_ERR_INVALID with a message naming the file and what is wrong. Entries are then looked up by name, with a
 * check of dtype and shape.
 *
 * Thread-safety: a writer belongs to one thread. A loaded checkpoint is immutable: any number of threads may read
 * it. Nothing here is global.
 */
#ifndef COHORT_CKPT_H
#define COHORT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format version this library writes; it reads exactly this version. */
#define COHORT_CKPT_VERSION 1
#define COHORT_CKPT_MAX_DIMS 8
/* Longest entry name and signature, in bytes. */
#define COHORT_CKPT_MAX_NAME 255
#define COHORT_CKPT_MAX_SIGNATURE 4096

/* ---- writing ---- */

typedef struct cohort_ckpt_writer cohort_ckpt_writer;

/* A writer for a model with this signature (a non-empty string). */
COHORT_API cohort_status cohort_ckpt_writer_create(const char *signature, cohort_ckpt_writer **out);
COHORT_API void cohort_ckpt_writer_destroy(cohort_ckpt_writer *w);

/* Adds a copy of an entry: dims[0..ndims) elements of dtype at data. Names are unique, 1..255 bytes. */
COHORT_API cohort_status cohort_ckpt_add(cohort_ckpt_writer *w, const char *name, cohort_dtype dtype, int ndims,
                                         const int64_t *dims, const void *data);
/* A float32 tensor. */
COHORT_API cohort_status cohort_ckpt_add_f32(cohort_ckpt_writer *w, const char *name, int ndims, const int64_t *dims,
                                             const float *data);
/* Opaque bytes (a u8 vector of len elements), e.g. a struct such as cohort_sampler_state or an RNG state. */
COHORT_API cohort_status cohort_ckpt_add_bytes(cohort_ckpt_writer *w, const char *name, const void *data, size_t len);
/* One int64 (a 0-dimensional i64 entry), e.g. the step. */
COHORT_API cohort_status cohort_ckpt_add_i64(cohort_ckpt_writer *w, const char *name, int64_t value);

/* Writes everything added so far to path, atomically (see above). The writer may be saved again. */
COHORT_API cohort_status cohort_ckpt_writer_save(cohort_ckpt_writer *w, const char *path);

/* ---- loading ---- */

typedef struct cohort_ckpt cohort_ckpt;

/* One entry of a loaded checkpoint. Pointers stay valid until the checkpoint is destroyed. */
typedef struct cohort_ckpt_entry {
  const char *name;
  cohort_dtype dtype;
  int ndims;
  int64_t dims[COHORT_CKPT_MAX_DIMS];
  size_t count;     /* elements: the product of dims (1 for 0 dimensions) */
  size_t nbytes;    /* count * cohort_dtype_size(dtype) */
  const void *data; /* nbytes, host (little-endian) order; not aligned for any type: copy it out */
} cohort_ckpt_entry;

/*
 * Loads and checks path. expected_signature NULL skips the signature check (for tools that inspect any file);
 * otherwise a file written for another signature is refused ("written by a model with signature X, this model
 * is Y").
 */
COHORT_API cohort_status cohort_ckpt_load(const char *path, const char *expected_signature, cohort_ckpt **out);
COHORT_API void cohort_ckpt_destroy(cohort_ckpt *ck);

COHORT_API const char *cohort_ckpt_signature(const cohort_ckpt *ck);
/* The format version of the file (today always COHORT_CKPT_VERSION). */
COHORT_API uint32_t cohort_ckpt_version(const cohort_ckpt *ck);
COHORT_API size_t cohort_ckpt_count(const cohort_ckpt *ck);
/* The i-th entry, in the order they were added. */
COHORT_API cohort_status cohort_ckpt_entry_at(const cohort_ckpt *ck, size_t i, cohort_ckpt_entry *out);
/* The entry called name; COHORT_ERR_INVALID naming the file when there is none. */
COHORT_API cohort_status cohort_ckpt_find(const cohort_ckpt *ck, const char *name, cohort_ckpt_entry *out);

/* Copies the float32 tensor name into out, after checking that its shape is exactly dims[0..ndims). */
COHORT_API cohort_status cohort_ckpt_get_f32(const cohort_ckpt *ck, const char *name, int ndims, const int64_t *dims,
                                             float *out);
/* Copies the bytes entry name into out, which must be exactly len bytes long. */
COHORT_API cohort_status cohort_ckpt_get_bytes(const cohort_ckpt *ck, const char *name, void *out, size_t len);
COHORT_API cohort_status cohort_ckpt_get_i64(const cohort_ckpt *ck, const char *name, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_CKPT_H */
