/* idx.c: the IDX reader (src/data/idx.c) on any bytes, plain or gzip: a file it accepts holds exactly the elements
 * its dimensions promise. */
#include "cohort/data.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_input_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  cohort_idx idx;
  if (cohort_idx_read(path, "fuzz", &idx) == COHORT_OK) {
    size_t count = 1;
    for (int i = 0; i < idx.ndims; i++)
      count *= idx.dims[i];
    FUZZ_CHECK(idx.ndims >= 1 && idx.ndims <= COHORT_IDX_MAX_DIMS);
    FUZZ_CHECK(count == idx.count);
    size_t esize = cohort_idx_type_size(idx.type);
    FUZZ_CHECK(esize > 0);
    /* Every byte is readable (ASan sees an overrun) and the payload came from the input, so it cannot be larger
     * than what a gzip stream of this size can expand to (1032:1). */
    (void)fuzz_touch(idx.data, count * esize);
    FUZZ_CHECK(count * esize <= 1032 * size + 64);
    cohort_idx_free(&idx);
  }
  close(fd);
  return 0;
}
