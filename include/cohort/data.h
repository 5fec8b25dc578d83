/*
 * data.h: training data for data-parallel jobs: IDX files, datasets, the distributed sampler and the loader.
 *
 * The pieces, bottom up:
 *  - cohort_idx_read() reads one IDX array (the MNIST file format, plain or gzip) and checks it completely: magic,
 *    element type, dimensions, and that the payload holds exactly the bytes the dimensions promise.
 *  - A cohort_dataset holds N samples in memory: float32 images in CHW order (already normalized) and int32 labels.
 *    cohort_dataset_load_fmnist() builds one from the Fashion-MNIST files.
 *  - A cohort_sampler decides which sample indices this rank visits in an epoch, with the semantics of PyTorch's
 *    DistributedSampler (see cohort_sampler_create()). Its state (epoch, cursor) can be saved and restored, so that
 *    a job resumed from a checkpoint goes on mid-epoch with exactly the samples it had not seen.
 *  - A cohort_loader cuts the sampler's order into batches and gathers each batch on a background thread while the
 *    caller trains on the previous one (double buffering).
 *
 * Invariants: for the same dataset size, world size, seed, shuffle and drop_last, every rank computes the same
 * permutation for an epoch; the ranks' index lists are disjoint apart from the padding that makes them equal in
 * length (padding repeats indices from the start of the permutation, as PyTorch does). The loader hands out
 * batches in exactly the sampler's order: prefetching changes when a batch is gathered, never which.
 *
 * Thread-safety: datasets are immutable after creation and may be read from any number of threads. A sampler and
 * a loader belong to one thread at a time. While a loader is alive it owns its sampler: change the epoch or the
 * position through cohort_loader_set_epoch() / cohort_loader_restore(), not on the sampler directly (the loader's
 * thread reads the sampler's index list). The loader's background thread is joined by cohort_loader_destroy().
 *
 * Memory: whoever creates an object destroys it. A batch returned by cohort_loader_next() points into the
 * loader's buffers and stays valid until the next cohort_loader_* call on that loader.
 */
#ifndef COHORT_DATA_H
#define COHORT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/cohort.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- IDX files ---- */

/* The element types of the IDX format (the third byte of the magic number). */
typedef enum cohort_idx_type {
  COHORT_IDX_U8 = 0x08,
  COHORT_IDX_I8 = 0x09,
  COHORT_IDX_I16 = 0x0B,
  COHORT_IDX_I32 = 0x0C,
  COHORT_IDX_F32 = 0x0D,
  COHORT_IDX_F64 = 0x0E,
} cohort_idx_type;

#define COHORT_IDX_MAX_DIMS 8

/* One IDX array in memory. data holds count elements in host byte order (the file's are big-endian). */
typedef struct cohort_idx {
  cohort_idx_type type;
  int ndims;
  uint32_t dims[COHORT_IDX_MAX_DIMS];
  size_t count; /* the product of dims */
  void *data;   /* malloc'ed; released by cohort_idx_free() */
} cohort_idx;

/* Bytes per element of an IDX type; 0 for a type the format does not define. */
COHORT_API size_t cohort_idx_type_size(int type);

/*
 * Reads an IDX file; a name ending in ".gz" may be gzip-compressed, and a plain file is read as it is. what names
 * the contents in error messages ("images", "labels"; NULL for "data"). Fails with COHORT_ERR_INVALID naming the
 * path when the file is missing (with a hint on how to install the dataset), has a bad magic number or element
 * type, has no or too many dimensions, is shorter than its dimensions say ("expected N bytes of images, got M")
 * or has bytes after the payload. On success *out owns its data; on failure *out is left empty.
 */
COHORT_API cohort_status cohort_idx_read(const char *path, const char *what, cohort_idx *out);
/* Writes idx to path, gzip-compressed when gzip != 0. For tests and tools that make small data sets. */
COHORT_API cohort_status cohort_idx_write(const char *path, const cohort_idx *idx, int gzip);
/* Frees idx->data and empties idx. Safe on an empty cohort_idx. */
COHORT_API void cohort_idx_free(cohort_idx *idx);

/* ---- datasets ---- */

typedef struct cohort_dataset cohort_dataset;

/* Where the dataset-fashion-mnist package installs the files. */
#define COHORT_FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
/* The per-pixel mean and standard deviation of the Fashion-MNIST training images in [0, 1], for callers that want
 * transforms.Normalize((0.2860,), (0.3530,)). The PyTorch anchor (bench-anchors/torch_ddp_fmnist.py) does not
 * normalize: it only divides by 255, which is mean 0, std 1 here. */
#define COHORT_FMNIST_MEAN 0.2860f
#define COHORT_FMNIST_STD 0.3530f

/*
 * Loads the Fashion-MNIST split "train" (60000 samples) or "t10k" (10000) from dir (NULL for
 * COHORT_FMNIST_DEFAULT_DIR): DIR/<split>-images-idx3-ubyte.gz and DIR/<split>-labels-idx1-ubyte.gz. Each pixel p
 * becomes (p / 255 - mean) / std, as torchvision's ToTensor followed by Normalize(mean, std) computes it; pass
 * mean 0 and std 1 to match the anchor. Fails when a file is missing or malformed, when the images are not 28x28,
 * when the image and label counts differ, or when a label is outside 0..9.
 */
COHORT_API cohort_status cohort_dataset_load_fmnist(const char *dir, const char *split, float mean, float std,
                                                    cohort_dataset **out);
/*
 * Loads any pair of IDX files: images u8 [N, H, W] (one channel) or [N, C, H, W], labels u8 or i32 [N]. Pixels
 * are normalized as in cohort_dataset_load_fmnist(). num_classes > 0 makes a label outside 0..num_classes-1 an
 * error.
 */
COHORT_API cohort_status cohort_dataset_load_idx(const char *images_path, const char *labels_path, float mean,
                                                 float std, int num_classes, cohort_dataset **out);
/* Makes a dataset from arrays in memory (copied): images holds count*channels*height*width floats. */
COHORT_API cohort_status cohort_dataset_create(size_t count, int channels, int height, int width, const float *images,
                                               const int32_t *labels, cohort_dataset **out);
COHORT_API void cohort_dataset_destroy(cohort_dataset *ds);

COHORT_API size_t cohort_dataset_size(const cohort_dataset *ds);
/* Floats per sample: channels * height * width. */
COHORT_API size_t cohort_dataset_sample_floats(const cohort_dataset *ds);
COHORT_API void cohort_dataset_shape(const cohort_dataset *ds, int *channels, int *height, int *width);
/* All images, sample after sample, each CHW. Valid until the dataset is destroyed. */
COHORT_API const float *cohort_dataset_images(const cohort_dataset *ds);
COHORT_API const int32_t *cohort_dataset_labels(const cohort_dataset *ds);

/* ---- the distributed sampler ---- */

typedef struct cohort_sampler cohort_sampler;

/*
 * A sampler over dataset_size samples for rank of world_size, with PyTorch DistributedSampler semantics:
 *  - num_samples = ceil(N / world), or floor(N / world) with drop_last; total = num_samples * world;
 *  - the epoch's order is 0..N-1, or with shuffle the permutation torch.randperm(N) draws from a generator seeded
 *    with seed + epoch (an MT19937 Fisher-Yates shuffle, the algorithm of PyTorch's CPU randperm);
 *  - without drop_last the order is padded to total by repeating it from the start; with drop_last it is cut;
 *  - rank r takes order[r], order[r + world], order[r + 2 world], ... (num_samples of them).
 * The sampler starts at epoch 0, cursor 0.
 */
COHORT_API cohort_status cohort_sampler_create(size_t dataset_size, int world_size, int rank, int shuffle,
                                               uint64_t seed, int drop_last, cohort_sampler **out);
COHORT_API void cohort_sampler_destroy(cohort_sampler *s);

/* Recomputes the order for epoch and moves the cursor to its start. */
COHORT_API cohort_status cohort_sampler_set_epoch(cohort_sampler *s, uint64_t epoch);
COHORT_API uint64_t cohort_sampler_epoch(const cohort_sampler *s);
/* How many indices this rank visits per epoch. */
COHORT_API size_t cohort_sampler_num_samples(const cohort_sampler *s);
/* This rank's indices for the current epoch (num_samples of them). Valid until the next set_epoch/restore. */
COHORT_API const int64_t *cohort_sampler_indices(const cohort_sampler *s);
/* Copies up to max of the next indices to out and advances the cursor; returns how many (0 at the epoch's end). */
COHORT_API size_t cohort_sampler_next(cohort_sampler *s, int64_t *out, size_t max);
/* How many indices of this epoch have been taken. */
COHORT_API size_t cohort_sampler_cursor(const cohort_sampler *s);

/*
 * Where a sampler stands, to be stored in a checkpoint. Every rank has the same state (ranks advance in step), so
 * rank 0's copy resumes them all. The configuration is kept too, so that resuming with a different dataset, world
 * size, seed or drop_last fails with a message instead of silently visiting other samples.
 */
typedef struct cohort_sampler_state {
  uint64_t epoch;
  uint64_t cursor;
  uint64_t seed;
  uint64_t dataset_size;
  int32_t world_size;
  int32_t shuffle;
  int32_t drop_last;
  int32_t reserved; /* 0 */
} cohort_sampler_state;

COHORT_API void cohort_sampler_get_state(const cohort_sampler *s, cohort_sampler_state *state);
/* Goes back to state: COHORT_ERR_INVALID, naming the field, when it was saved with another configuration. */
COHORT_API cohort_status cohort_sampler_restore(cohort_sampler *s, const cohort_sampler_state *state);

/* ---- the loader ---- */

typedef struct cohort_loader cohort_loader;

/* One batch: size samples, images [size, channels, height, width] and their labels and dataset indices. */
typedef struct cohort_batch {
  size_t size; /* 0 at the end of the epoch */
  int channels, height, width;
  const float *images;
  const int32_t *labels;
  const int64_t *indices;
} cohort_batch;

/*
 * A loader of batch_size samples at a time over sampler's order of ds, from the sampler's current cursor. The last
 * batch of an epoch is smaller unless drop_last, which skips it. The loader starts gathering at once, on its own
 * thread, into two buffers. ds and sampler must outlive the loader; the loader owns the sampler while it lives.
 */
COHORT_API cohort_status cohort_loader_create(const cohort_dataset *ds, cohort_sampler *sampler, size_t batch_size,
                                              int drop_last, cohort_loader **out);
/* Stops and joins the background thread, then frees the loader. Safe on NULL. */
COHORT_API void cohort_loader_destroy(cohort_loader *l);

/*
 * The next batch of the epoch (waiting for it if it is not gathered yet); batch->size == 0 at the end of the epoch.
 * Returning a batch moves the sampler's cursor past it, so that a state saved now resumes after this batch.
 */
COHORT_API cohort_status cohort_loader_next(cohort_loader *l, cohort_batch *batch);
/* Starts epoch: the sampler's set_epoch, then prefetching from its start. */
COHORT_API cohort_status cohort_loader_set_epoch(cohort_loader *l, uint64_t epoch);
/* Restores the sampler's state (see cohort_sampler_restore) and prefetches from there. */
COHORT_API cohort_status cohort_loader_restore(cohort_loader *l, const cohort_sampler_state *state);
/* Batches of this epoch still to come from cohort_loader_next(). */
COHORT_API size_t cohort_loader_batches_left(const cohort_loader *l);
/* Batches gathered and waiting (0..2): a loader that keeps up shows 1 or 2 here right after cohort_loader_next. */
COHORT_API int cohort_loader_ready(cohort_loader *l);
/* Total seconds cohort_loader_next() has spent waiting for the background thread (a data-bound job shows it). */
COHORT_API double cohort_loader_wait_seconds(cohort_loader *l);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_DATA_H */
