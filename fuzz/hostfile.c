/* hostfile.c: cohortrun's --hostfile parser (tools/cohortrun/hosts.c) on any bytes: what it accepts is a list of
 * well-formed host names, each with the same number of workers in range. */
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "launcher.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_input_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  static cohort__launch_opts opts;
  memset(&opts, 0, sizeof opts);
  if (cohort__launch_read_hostfile(path, &opts) == COHORT_OK) {
    FUZZ_CHECK(opts.nhosts >= 1 && opts.nhosts <= COHORT_LAUNCH_HOSTS_MAX);
    FUZZ_CHECK(opts.np >= 1 && opts.np <= COHORT_LAUNCH_NP_MAX);
    for (int i = 0; i < opts.nhosts; i++) {
      size_t len = strnlen(opts.hosts[i], sizeof opts.hosts[i]);
      FUZZ_CHECK(len > 0 && len < sizeof opts.hosts[i]);
      for (size_t k = 0; k < len; k++)
        FUZZ_CHECK(isalnum((unsigned char)opts.hosts[i][k]) || strchr("-._", opts.hosts[i][k]));
    }
  }
  close(fd);
  return 0;
}
