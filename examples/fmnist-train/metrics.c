/* metrics.c: the CSV of evaluations (one row per epoch, and one at the end of a --steps run). Rows are flushed as
 * they are written, so the file is useful while the job runs and after it is killed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train.h"

struct train_metrics {
  FILE *f;
  char *path;
};

static const char header[] = "epoch,step,train_loss,test_acc,img_per_s,seconds\n";

int train_metrics_open(const char *path, int append, train_metrics **out) {
  *out = NULL;
  struct stat st;
  /* A resumed run extends the file of the run it continues, under the header that is already there. */
  int has_rows = append && stat(path, &st) == 0 && st.st_size > 0;
  FILE *f = fopen(path, has_rows ? "a" : "w");
  if (!f) {
    fprintf(stderr, "fmnist-train: cannot open --csv %s: %s\n", path, strerror(errno));
    return -1;
  }
  train_metrics *m = calloc(1, sizeof *m);
  char *copy = strdup(path);
  if (!m || !copy) {
    fprintf(stderr, "fmnist-train: out of memory opening --csv %s\n", path);
    fclose(f);
    free(m);
    free(copy);
    return -1;
  }
  m->f = f;
  m->path = copy;
  if (!has_rows && (fputs(header, f) == EOF || fflush(f) != 0)) {
    fprintf(stderr, "fmnist-train: cannot write --csv %s: %s\n", path, strerror(errno));
    train_metrics_close(m);
    return -1;
  }
  *out = m;
  return 0;
}

int train_metrics_row(train_metrics *m, int epoch, int64_t step, double train_loss, double test_acc, double img_per_s,
                      double seconds) {
  if (!m) return 0;
  if (fprintf(m->f, "%d,%lld,%.6f,%.6f,%.1f,%.3f\n", epoch, (long long)step, train_loss, test_acc, img_per_s, seconds) <
          0 ||
      fflush(m->f) != 0) {
    fprintf(stderr, "fmnist-train: cannot write --csv %s: %s\n", m->path, strerror(errno));
    return -1;
  }
  return 0;
}

void train_metrics_close(train_metrics *m) {
  if (!m) return;
  fclose(m->f);
  free(m->path);
  free(m);
}
