/* replay.c: main() for the fuzz targets outside libFuzzer: feeds the target each file named on the command line,
 * or each file of each directory named, and fails when a directory holds none (an empty corpus tests nothing). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, len = 0;
  uint8_t *buf = malloc(cap);
  size_t n;
  while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) return -1;
  LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
      if (replay_file(argv[i]) != 0) return 1;
      files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) return 1;
    int here = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      if (replay_file(path) != 0) return 1;
      here++;
    }
    closedir(d);
    if (here == 0) {
      fprintf(stderr, "replay: %s holds no input\n", argv[i]);
      return 1;
    }
    files += here;
  }
  printf("replayed %d inputs without a fault\n", files);
  return files > 0 ? 0 : 1;
}
