/*
 * fmnist-train: the main job. Data-parallel training of the reference CNN on Fashion-MNIST:
 *
 *   build/bin/cohortrun -np 2 build/bin/fmnist-train [--epochs 10] [--steps N] [--batch 64] ...
 *   build/bin/fmnist-train --replicas 2 ...        the same job, its 2 ranks as threads of one process
 *
 * See --help, docs/training.md, and train.h for how the pieces fit.
 */
#include "replicas.h"
#include "train.h"

int main(int argc, char **argv) {
  train_config cfg;
  int rc = train_flags_parse(argc, argv, &cfg);
  if (rc < 0) return TRAIN_EXIT_OK; /* --help */
  if (rc != TRAIN_EXIT_OK) return rc;
  train_kernels_choose(&cfg, argv);

  if (cfg.replicas > 0) {
    /* One copy of the data for all replicas (about 220 MB each otherwise). */
    cohort_status st = train_load_fmnist(&cfg, "train", &cfg.shared_train_set);
    if (st == COHORT_OK) st = train_load_fmnist(&cfg, "t10k", &cfg.shared_test_set);
    if (st != COHORT_OK) {
      fprintf(stderr, "fmnist-train: loading the data: %s: %s\n", cohort_strerror(st), cohort_last_error());
      rc = TRAIN_EXIT_FAIL;
    } else
      rc = train_replicas_run(&cfg, cfg.replicas, train_run);
    cohort_dataset_destroy(cfg.shared_test_set);
    cohort_dataset_destroy(cfg.shared_train_set);
    return rc;
  }

  train_preempt_watch(&cfg); /* before cohort_init: its threads inherit the blocked signals */
  cohort_comm *comm = NULL;
  cohort_status st = cohort_init(&comm);
  if (st != COHORT_OK) {
    fprintf(stderr, "fmnist-train: joining the job: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return TRAIN_EXIT_FAIL;
  }
  rc = train_run(&cfg, comm);
  cohort_comm_destroy(comm);
  return rc;
}
