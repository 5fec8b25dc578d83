/* ckpt.c: the checkpoint loader (src/ckpt/ckpt.c) on any bytes. An input whose first byte is odd gets a correct
 * CRC32C trailer before it is loaded, so that the fuzzer gets past the checksum to the structure behind it (lengths,
 * counts, names, shapes); one whose first byte is even is loaded as it is. */
#include <string.h>

#include "ckpt/crc32c.h"
#include "cohort/ckpt.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int fix_crc = data[0] & 1;
  data++, size--;
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  if (fix_crc && size >= 4) {
    uint32_t crc = cohort__crc32c(0, copy, size - 4);
    memcpy(copy + size - 4, &crc, 4); /* little-endian, as the format */
  }
  char path[64];
  int fd = fuzz_input_file(copy, size, path, sizeof path);
  free(copy);
  if (fd < 0) return 0;
  cohort_ckpt *ck = NULL;
  if (cohort_ckpt_load(path, NULL, &ck) == COHORT_OK) {
    FUZZ_CHECK(cohort_ckpt_signature(ck) != NULL);
    size_t total = 0;
    for (size_t i = 0; i < cohort_ckpt_count(ck); i++) {
      cohort_ckpt_entry e;
      FUZZ_CHECK(cohort_ckpt_entry_at(ck, i, &e) == COHORT_OK);
      FUZZ_CHECK(e.name != NULL && e.ndims >= 0 && e.ndims <= COHORT_CKPT_MAX_DIMS);
      size_t count = 1;
      for (int d = 0; d < e.ndims; d++) {
        FUZZ_CHECK(e.dims[d] >= 0);
        count *= (size_t)e.dims[d];
      }
      FUZZ_CHECK(count == e.count);
      FUZZ_CHECK(e.nbytes == e.count * cohort_dtype_size(e.dtype));
      /* The data lies inside the file: every byte readable, and all of them together no more than the file. */
      (void)fuzz_touch(e.data, e.nbytes);
      total += e.nbytes;
      FUZZ_CHECK(total <= size);
      cohort_ckpt_entry found;
      FUZZ_CHECK(cohort_ckpt_find(ck, e.name, &found) == COHORT_OK);
    }
    cohort_ckpt_destroy(ck);
  }
  close(fd);
  return 0;
}
