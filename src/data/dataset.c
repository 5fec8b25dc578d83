/*
 * dataset.c: samples in memory, float32 CHW images and int32 labels, loaded from IDX pairs or given as arrays.
 *
 * Images are converted to float once, at load time, so that the loader's background thread only copies: a batch
 * is then gathered at memory speed whatever the normalization.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/data.h"
#include "core/error.h"

struct cohort_dataset {
  size_t count;
  int channels, height, width;
  float *images;
  int32_t *labels;
};

static cohort_status dataset_alloc(size_t count, int channels, int height, int width, cohort_dataset **out) {
  if (channels < 1 || height < 1 || width < 1)
    return cohort__error(COHORT_ERR_INVALID, "dataset: bad sample shape %dx%dx%d", channels, height, width);
  size_t per = (size_t)channels * (size_t)height * (size_t)width;
  if (count && per > SIZE_MAX / sizeof(float) / count)
    return cohort__error(COHORT_ERR_INVALID, "dataset: %zu samples of %zu floats overflow the address space", count,
                         per);
  cohort_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) return cohort__error(COHORT_ERR_SYSTEM, "dataset: out of memory");
  ds->count = count;
  ds->channels = channels, ds->height = height, ds->width = width;
  ds->images = malloc(count * per * sizeof(float) + 1);
  ds->labels = malloc(count * sizeof(int32_t) + 1);
  if (!ds->images || !ds->labels) {
    cohort_dataset_destroy(ds);
    return cohort__error(COHORT_ERR_SYSTEM, "dataset: cannot allocate %zu samples of %zu floats", count, per);
  }
  *out = ds;
  return COHORT_OK;
}

void cohort_dataset_destroy(cohort_dataset *ds) {
  if (!ds) return;
  free(ds->images);
  free(ds->labels);
  free(ds);
}

cohort_status cohort_dataset_create(size_t count, int channels, int height, int width, const float *images,
                                    const int32_t *labels, cohort_dataset **out) {
  if (!out || (count && (!images || !labels)))
    return cohort__error(COHORT_ERR_INVALID, "cohort_dataset_create: NULL images, labels or output");
  cohort_dataset *ds;
  COHORT_CHECK(dataset_alloc(count, channels, height, width, &ds));
  memcpy(ds->images, images, count * cohort_dataset_sample_floats(ds) * sizeof(float));
  memcpy(ds->labels, labels, count * sizeof(int32_t));
  *out = ds;
  return COHORT_OK;
}

cohort_status cohort_dataset_load_idx(const char *images_path, const char *labels_path, float mean, float std,
                                      int num_classes, cohort_dataset **out) {
  cohort_status st = COHORT_OK;
  cohort_idx im = {0}, lb = {0};
  cohort_dataset *ds = NULL;
  if (!images_path || !labels_path || !out)
    return cohort__error(COHORT_ERR_INVALID, "cohort_dataset_load_idx: NULL path or output");
  if (!(std > 0.0f)) return cohort__error(COHORT_ERR_INVALID, "cohort_dataset_load_idx: std must be > 0, not %g", std);
  if ((st = cohort_idx_read(images_path, "images", &im)) != COHORT_OK) goto fail;
  if ((st = cohort_idx_read(labels_path, "labels", &lb)) != COHORT_OK) goto fail;
  if (im.type != COHORT_IDX_U8 || (im.ndims != 3 && im.ndims != 4)) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "images file '%s': expected unsigned bytes (type 0x08) in 3 or 4 dimensions [N, (C,) H, W], "
                       "got type 0x%02x in %d dimensions",
                       images_path, (unsigned)im.type, im.ndims);
    goto fail;
  }
  if ((lb.type != COHORT_IDX_U8 && lb.type != COHORT_IDX_I32) || lb.ndims != 1) {
    st = cohort__error(COHORT_ERR_INVALID,
                       "labels file '%s': expected one dimension of type 0x08 or 0x0c, got type 0x%02x in %d "
                       "dimensions",
                       labels_path, (unsigned)lb.type, lb.ndims);
    goto fail;
  }
  if (im.dims[0] != lb.dims[0]) {
    st = cohort__error(COHORT_ERR_INVALID, "image and label counts differ: '%s' holds %u images, '%s' %u labels",
                       images_path, im.dims[0], labels_path, lb.dims[0]);
    goto fail;
  }
  int c = im.ndims == 4 ? (int)im.dims[1] : 1;
  int h = (int)im.dims[im.ndims - 2], w = (int)im.dims[im.ndims - 1];
  if ((st = dataset_alloc(im.dims[0], c, h, w, &ds)) != COHORT_OK) goto fail;
  /* The same float32 operations as ToTensor (x / 255) and Normalize ((x - mean) / std), in that order, so that the
   * values are bit-identical to PyTorch's. */
  const uint8_t *px = im.data;
  for (size_t i = 0; i < im.count; i++)
    ds->images[i] = ((float)px[i] / 255.0f - mean) / std;
  for (size_t i = 0; i < ds->count; i++) {
    int32_t y = lb.type == COHORT_IDX_U8 ? ((const uint8_t *)lb.data)[i] : ((const int32_t *)lb.data)[i];
    if (num_classes > 0 && (y < 0 || y >= num_classes)) {
      st = cohort__error(COHORT_ERR_INVALID, "labels file '%s': label %d of sample %zu is outside 0..%d", labels_path,
                         (int)y, i, num_classes - 1);
      goto fail;
    }
    ds->labels[i] = y;
  }
  cohort_idx_free(&im);
  cohort_idx_free(&lb);
  *out = ds;
  return COHORT_OK;

fail:
  cohort_idx_free(&im);
  cohort_idx_free(&lb);
  cohort_dataset_destroy(ds);
  return st;
}

/* DIR/SPLIT-KIND-ubyte.gz as distributed, or the same name without .gz as torchvision and many mirrors unpack it.
 * Neither: the .gz name, whose read fails with the hint on how to get the data. */
static cohort_status find_idx_file(const char *dir, const char *split, const char *kind, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/%s-%s-ubyte.gz", dir, split, kind);
  if (n < 0 || (size_t)n >= cap)
    return cohort__error(COHORT_ERR_INVALID, "Fashion-MNIST directory name too long: '%s'", dir);
  if (access(out, F_OK) == 0) return COHORT_OK;
  out[n - 3] = '\0';
  if (access(out, F_OK) == 0) return COHORT_OK;
  out[n - 3] = '.';
  return COHORT_OK;
}

cohort_status cohort_dataset_load_fmnist(const char *dir, const char *split, float mean, float std,
                                         cohort_dataset **out) {
  if (!dir || !*dir) dir = COHORT_FMNIST_DEFAULT_DIR;
  if (!split || (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0))
    return cohort__error(COHORT_ERR_INVALID, "Fashion-MNIST split must be \"train\" or \"t10k\", not \"%s\"",
                         split ? split : "(null)");
  char ip[4096], lp[4096];
  COHORT_CHECK(find_idx_file(dir, split, "images-idx3", ip, sizeof ip));
  COHORT_CHECK(find_idx_file(dir, split, "labels-idx1", lp, sizeof lp));
  cohort_dataset *ds;
  COHORT_CHECK(cohort_dataset_load_idx(ip, lp, mean, std, 10, &ds));
  if (ds->channels != 1 || ds->height != 28 || ds->width != 28) {
    cohort_status st = cohort__error(COHORT_ERR_INVALID, "'%s' holds %dx%dx%d images; Fashion-MNIST's are 1x28x28", ip,
                                     ds->channels, ds->height, ds->width);
    cohort_dataset_destroy(ds);
    return st;
  }
  *out = ds;
  return COHORT_OK;
}

size_t cohort_dataset_size(const cohort_dataset *ds) { return ds->count; }

size_t cohort_dataset_sample_floats(const cohort_dataset *ds) {
  return (size_t)ds->channels * (size_t)ds->height * (size_t)ds->width;
}

void cohort_dataset_shape(const cohort_dataset *ds, int *channels, int *height, int *width) {
  if (channels) *channels = ds->channels;
  if (height) *height = ds->height;
  if (width) *width = ds->width;
}

const float *cohort_dataset_images(const cohort_dataset *ds) { return ds->images; }
const int32_t *cohort_dataset_labels(const cohort_dataset *ds) { return ds->labels; }
