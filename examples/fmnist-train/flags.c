/* flags.c: fmnist-train's command line. Every mistake is one line on stderr and exit code 2, before any rank
 * starts talking to another, so that a typo costs nothing. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cohort/ddp.h"
#include "train.h"

const char *train_model_name(train_model_kind kind) { return kind == TRAIN_MODEL_MLP ? "mlp" : "cnn"; }

void train_flags_usage(FILE *f) {
  fprintf(f,
          "usage: cohortrun -np N fmnist-train [options]\n"
          "       fmnist-train --replicas N [options]\n"
          "Trains a CNN (or an MLP) on Fashion-MNIST, data-parallel over the ranks; rank 0 reports.\n"
          "  --model cnn|mlp         the reference CNN (default) or a 784-256-10 MLP\n"
          "  --epochs N              planned length in epochs; the lr schedule spans it (default 1)\n"
          "  --steps N               stop after N optimizer steps in all (default: run the epochs); 0 trains\n"
          "                          nothing and reports (and dumps) the initial parameters\n"
          "  --batch N               images per rank per step (default 64)\n"
          "  --lr X                  peak learning rate per %d images of global batch; the job uses\n"
          "                          X * ranks * batch / %d (default 0.05)\n"
          "  --momentum X            SGD momentum in [0, 1) (default 0.9)\n"
          "  --weight-decay X        L2 weight decay (default 0)\n"
          "  --warmup N              linear warmup steps; default: a fifth of an epoch, at most 200\n"
          "  --lars ETA              layer-wise rate: each weight tensor's step is capped at about ETA of its own\n"
          "                          norm (LARC; what lets the linearly scaled rate of a large global batch\n"
          "                          train); default 0.02; 0: plain SGD\n"
          "  --lars-mode larc|lars   larc (default): the cap alone, plain SGD wherever the rate is already small\n"
          "                          for the layer; lars: every weight tensor's step scaled to ETA x lr of its norm\n"
          "  --seed N                weights and shuffling (default 0)\n"
          "  --checkpoint PATH       rank 0 writes the state here every epoch and at the end\n"
          "  --checkpoint-every N    ... and also every N steps\n"
          "  --resume                continue from --checkpoint (which must exist)\n"
          "  --resume auto           continue from --checkpoint if it exists, else start fresh (for cohortrun\n"
          "                          --max-restarts: the first generation starts, later ones resume)\n"
          "  --data DIR              Fashion-MNIST files (default %s)\n"
          "  --threads N             kernel threads per rank (OpenBLAS, oneDNN; default 1; in a task of a Slurm\n"
          "                          step, SLURM_CPUS_PER_TASK: srun --cpus-per-task=C gives each task C CPUs)\n"
          "  --kernels auto|onednn|reference  the CPU kernels: onednn (by the CPU's features), reference (im2col +\n"
          "                          OpenBLAS); auto (default): COHORT_KERNELS, else onednn where its ISA is wider\n"
          "                          than OpenBLAS's kernels (e.g. OPENBLAS_CORETYPE pinned below the CPU)\n"
          "  --csv PATH              per-evaluation metrics: epoch,step,train_loss,test_acc,img_per_s,seconds\n"
          "  --metrics PATH          per-step metrics across ranks, JSON lines (rank 0 writes; docs/training.md)\n"
          "  --dump-params PATH      rank 0 writes the final parameters as raw little-endian float32\n"
          "  --log-every N           plain progress lines every N steps when stdout is not a terminal (default 50)\n"
          "  --eval-batch N          images per evaluation batch (default 1000)\n"
          "  --eval-images N         score the first N test images (default all 10000); 0 skips evaluation\n"
          "                          and reports test_acc=nan (runs that compare parameters, not accuracy)\n"
          "  --quiet                 no progress lines, only the final line\n"
          "  --sync ddp|fused        how gradients are averaged: ddp (default) runs the engine's bucketed\n"
          "                          allreduces during backward; fused is one allreduce after backward\n"
          "  --bucket-mb X           ddp bucket cap in MB (default: COHORT_BUCKET_MB, else 25)\n"
          "  --compress none|f16|bf16  gradients travel compressed in the allreduce (default none)\n"
          "  --accumulate K          K micro-batches of --batch per optimizer step (default 1)\n"
          "  --zero 0|1              1: ZeRO stage 1, each rank keeps the optimizer state of 1/W of the parameters\n"
          "                          (gradients reduce-scattered, parameters allgathered; default 0)\n"
          "  --replicas N            N replicas as threads of this one process (in-process transport) instead\n"
          "                          of one rank per process; run it without cohortrun. --threads is then the\n"
          "                          process's BLAS pool shared by the replicas: the default 1 gives each\n"
          "                          replica one thread of its own, which is what N cores want\n"
          "  --device cpu|cuda       where the model trains (default cpu); cuda: the training stack of\n"
          "                          libcohort_nn_cuda.so on the GPU (the local rank's, shared when there are\n"
          "                          fewer GPUs than ranks), the step replayed as a CUDA graph (docs/training.md)\n"
          "  --profile               rank 0 prints the time per step in data, compute, allreduce and update;\n"
          "                          with --device cuda, each layer's forward and backward (20 passes before\n"
          "                          training, without the CUDA graph)\n"
          "  --uneven                uneven shards: rank r of W trains only (W - r)/W of each epoch's steps, then\n"
          "                          joins (the others average over the ranks still training; cohort_ddp_join)\n"
          "  --help                  this text;   --version   the version\n"
          "The last line on rank 0's stdout is machine-readable:\n"
          "  final: steps=N loss=X test_acc=Y img_per_s=Z param_sha256=H\n"
          "Exit codes: 0 success, 1 failure while running, 2 bad command line.\n",
          TRAIN_LR_REFERENCE_BATCH, TRAIN_LR_REFERENCE_BATCH, COHORT_FMNIST_DEFAULT_DIR);
}

static int usage_error(const char *fmt, const char *a, const char *b) {
  /* One write for the whole line: under cohortrun a sibling's exit may stop this rank between two writes. */
  char msg[1024];
  int n = snprintf(msg, sizeof msg, "fmnist-train: ");
  n += snprintf(msg + n, sizeof msg - (size_t)n, fmt, a, b);
  if (n < (int)sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, " (see --help)\n");
  fputs(msg, stderr);
  return TRAIN_EXIT_USAGE;
}

/* A whole decimal integer in [lo, hi]; anything else (empty, trailing bytes, overflow) is refused. */
static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0' || errno == ERANGE) return usage_error("%s needs an integer, got '%s'", flag, s);
  if (v < lo || v > hi) {
    char range[96];
    snprintf(range, sizeof range, "'%s' (allowed: %lld to %lld)", s, lo, hi);
    return usage_error("%s is out of range: %s", flag, range);
  }
  *out = v;
  return TRAIN_EXIT_OK;
}

static int parse_double(const char *flag, const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v))
    return usage_error("%s needs a finite number, got '%s'", flag, s);
  *out = v;
  return TRAIN_EXIT_OK;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int train_flags_parse(int argc, char **argv, train_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->model = TRAIN_MODEL_CNN;
  cfg->epochs = 1;
  cfg->batch = 64;
  cfg->lr = 0.05;
  cfg->momentum = 0.9;
  cfg->warmup_steps = -1;
  cfg->lars = 0.02; /* NVIDIA apex's LARC default; docs/training.md has the accuracy it gives from 1 to 16 ranks */
  cfg->lars_clip = 1;
  cfg->max_steps = -1;
  cfg->data_dir = COHORT_FMNIST_DEFAULT_DIR;
  cfg->threads = 1;
  const char *slurm_cpus = getenv("SLURM_CPUS_PER_TASK"), *slurm_step = getenv("SLURM_STEP_ID");
  if (slurm_cpus && slurm_step && slurm_step[0] && atoi(slurm_cpus) >= 1 && atoi(slurm_cpus) <= 256)
    cfg->threads = atoi(slurm_cpus);
  cfg->log_every = 50;
  cfg->eval_batch = 1000;
  cfg->eval_images = -1;
  cfg->sync = TRAIN_SYNC_DDP;
  cfg->compress = COHORT_DDP_COMPRESS_NONE;
  cfg->accumulate = 1;

  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0) return usage_error("unexpected argument '%s'%s", arg, "");
    /* --flag=value and --flag value are both accepted. */
    char name[64];
    const char *value = NULL;
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) return usage_error("unknown flag '%s'%s", arg, "");
    memcpy(name, arg, len);
    name[len] = '\0';
    if (eq) value = eq + 1;

    int boolean = !strcmp(name, "--resume") || !strcmp(name, "--help") || !strcmp(name, "--version") ||
                  !strcmp(name, "--quiet") || !strcmp(name, "--profile") || !strcmp(name, "--uneven");
    static const char *const known[] = {"--model",
                                        "--epochs",
                                        "--steps",
                                        "--batch",
                                        "--lr",
                                        "--momentum",
                                        "--weight-decay",
                                        "--warmup",
                                        "--lars",
                                        "--lars-mode",
                                        "--seed",
                                        "--checkpoint",
                                        "--checkpoint-every",
                                        "--data",
                                        "--threads",
                                        "--csv",
                                        "--metrics",
                                        "--dump-params",
                                        "--log-every",
                                        "--eval-batch",
                                        "--eval-images",
                                        "--sync",
                                        "--bucket-mb",
                                        "--compress",
                                        "--accumulate",
                                        "--zero",
                                        "--replicas",
                                        "--device",
                                        "--kernels"};
    int valued = 0;
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
      if (!strcmp(name, known[k])) valued = 1;
    if (!boolean && !valued) return usage_error("unknown flag '%s'%s", name, "");
    if (boolean) {
      if (value && !strcmp(name, "--resume") && !strcmp(value, "auto")) {
        cfg->resume = 2;
        continue;
      }
      if (value) return usage_error("%s takes no value, got '%s'", name, value);
      if (!strcmp(name, "--help")) {
        train_flags_usage(stdout);
        return -1;
      }
      if (!strcmp(name, "--version")) {
        printf("fmnist-train (cohort) %s\n", cohort_version());
        return -1;
      }
      if (!strcmp(name, "--resume")) cfg->resume = 1;
      if (!strcmp(name, "--uneven")) cfg->uneven = 1;
      /* "--resume auto": decided below, once --checkpoint is known. */
      if (!strcmp(name, "--resume") && i + 1 < argc && !strcmp(argv[i + 1], "auto")) {
        cfg->resume = 2;
        i++;
      }
      if (!strcmp(name, "--quiet")) cfg->quiet = 1;
      if (!strcmp(name, "--profile")) cfg->profile = 1;
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) return usage_error("%s needs a value%s", name, "");
      /* "--checkpoint --steps 1": the value was forgotten, not a file named "--steps" (give "--checkpoint=--x" or
       * "./--x" for that); a negative number is a value. */
      const char *next = argv[i + 1];
      if (next[0] == '-' && next[1] == '-' && next[2])
        return usage_error("%s needs a value, got the flag '%s' (a value that starts with '--' goes as FLAG=VALUE)",
                           name, next);
      value = argv[++i];
    }

    long long n = 0;
    int rc = TRAIN_EXIT_OK;
    if (!strcmp(name, "--model")) {
      if (!strcmp(value, "cnn"))
        cfg->model = TRAIN_MODEL_CNN;
      else if (!strcmp(value, "mlp"))
        cfg->model = TRAIN_MODEL_MLP;
      else
        return usage_error("--model must be cnn or mlp, got '%s'%s", value, "");
    } else if (!strcmp(name, "--epochs")) {
      if ((rc = parse_int(name, value, 1, 100000, &n)) == TRAIN_EXIT_OK) cfg->epochs = (int)n;
    } else if (!strcmp(name, "--steps")) {
      if ((rc = parse_int(name, value, 0, INT64_MAX / 2, &n)) == TRAIN_EXIT_OK) cfg->max_steps = n;
    } else if (!strcmp(name, "--batch")) {
      if ((rc = parse_int(name, value, 1, 65536, &n)) == TRAIN_EXIT_OK) cfg->batch = (int)n;
    } else if (!strcmp(name, "--lr")) {
      if ((rc = parse_double(name, value, &cfg->lr)) == TRAIN_EXIT_OK && !(cfg->lr > 0))
        return usage_error("--lr must be > 0, got '%s'%s", value, "");
    } else if (!strcmp(name, "--momentum")) {
      if ((rc = parse_double(name, value, &cfg->momentum)) == TRAIN_EXIT_OK &&
          !(cfg->momentum >= 0 && cfg->momentum < 1))
        return usage_error("--momentum must be in [0, 1), got '%s'%s", value, "");
    } else if (!strcmp(name, "--weight-decay")) {
      if ((rc = parse_double(name, value, &cfg->weight_decay)) == TRAIN_EXIT_OK && !(cfg->weight_decay >= 0))
        return usage_error("--weight-decay must be >= 0, got '%s'%s", value, "");
    } else if (!strcmp(name, "--warmup")) {
      if ((rc = parse_int(name, value, 0, INT_MAX, &n)) == TRAIN_EXIT_OK) cfg->warmup_steps = (int)n;
    } else if (!strcmp(name, "--lars")) {
      if ((rc = parse_double(name, value, &cfg->lars)) == TRAIN_EXIT_OK && !(cfg->lars >= 0))
        return usage_error("--lars must be >= 0 (0: plain SGD), got '%s'%s", value, "");
    } else if (!strcmp(name, "--lars-mode")) {
      if (!strcmp(value, "larc") || !strcmp(value, "lars"))
        cfg->lars_clip = !strcmp(value, "larc");
      else
        return usage_error("--lars-mode must be larc or lars, got '%s'%s", value, "");
    } else if (!strcmp(name, "--seed")) {
      if ((rc = parse_int(name, value, 0, LLONG_MAX, &n)) == TRAIN_EXIT_OK) cfg->seed = (uint64_t)n;
    } else if (!strcmp(name, "--checkpoint")) {
      if (!*value) return usage_error("--checkpoint needs a path%s%s", "", "");
      cfg->checkpoint = value;
    } else if (!strcmp(name, "--checkpoint-every")) {
      if ((rc = parse_int(name, value, 1, INT64_MAX / 2, &n)) == TRAIN_EXIT_OK) cfg->checkpoint_every = n;
    } else if (!strcmp(name, "--data")) {
      cfg->data_dir = value;
    } else if (!strcmp(name, "--threads")) {
      if ((rc = parse_int(name, value, 1, 256, &n)) == TRAIN_EXIT_OK) cfg->threads = (int)n;
    } else if (!strcmp(name, "--csv")) {
      if (!*value) return usage_error("--csv needs a path%s%s", "", "");
      cfg->csv = value;
    } else if (!strcmp(name, "--metrics")) {
      if (!*value) return usage_error("--metrics needs a path%s%s", "", "");
      cfg->metrics = value;
    } else if (!strcmp(name, "--dump-params")) {
      if (!*value) return usage_error("--dump-params needs a path%s%s", "", "");
      cfg->dump_params = value;
    } else if (!strcmp(name, "--log-every")) {
      if ((rc = parse_int(name, value, 1, INT64_MAX / 2, &n)) == TRAIN_EXIT_OK) cfg->log_every = n;
    } else if (!strcmp(name, "--eval-batch")) {
      if ((rc = parse_int(name, value, 1, 65536, &n)) == TRAIN_EXIT_OK) cfg->eval_batch = (int)n;
    } else if (!strcmp(name, "--eval-images")) {
      if ((rc = parse_int(name, value, 0, INT64_MAX / 2, &n)) == TRAIN_EXIT_OK) cfg->eval_images = n;
    } else if (!strcmp(name, "--sync")) {
      if (!strcmp(value, "ddp"))
        cfg->sync = TRAIN_SYNC_DDP;
      else if (!strcmp(value, "fused"))
        cfg->sync = TRAIN_SYNC_FUSED;
      else
        return usage_error("--sync must be ddp or fused, got '%s'%s", value, "");
    } else if (!strcmp(name, "--bucket-mb")) {
      /* The cap becomes a byte count; beyond 1 TB it is a typo rather than a bucket. */
      if ((rc = parse_double(name, value, &cfg->bucket_mb)) == TRAIN_EXIT_OK &&
          !(cfg->bucket_mb > 0 && cfg->bucket_mb <= 1e6))
        return usage_error("--bucket-mb must be > 0 and at most 1e6, got '%s'%s", value, "");
    } else if (!strcmp(name, "--compress")) {
      if (!strcmp(value, "none"))
        cfg->compress = COHORT_DDP_COMPRESS_NONE;
      else if (!strcmp(value, "f16"))
        cfg->compress = COHORT_DDP_COMPRESS_F16;
      else if (!strcmp(value, "bf16"))
        cfg->compress = COHORT_DDP_COMPRESS_BF16;
      else
        return usage_error("--compress must be none, f16 or bf16, got '%s'%s", value, "");
    } else if (!strcmp(name, "--zero")) {
      if ((rc = parse_int(name, value, 0, 1, &n)) == TRAIN_EXIT_OK) cfg->zero = (int)n;
    } else if (!strcmp(name, "--accumulate")) {
      if ((rc = parse_int(name, value, 1, 65536, &n)) == TRAIN_EXIT_OK) cfg->accumulate = (int)n;
    } else if (!strcmp(name, "--device")) {
      if (!strcmp(value, "cpu") || !strcmp(value, "cuda"))
        cfg->device = !strcmp(value, "cuda") ? TRAIN_DEVICE_CUDA : TRAIN_DEVICE_CPU;
      else
        return usage_error("--device must be cpu or cuda, got '%s'%s", value, "");
    } else if (!strcmp(name, "--kernels")) {
      if (cohort_kernels_parse(value, &cfg->kernels) != COHORT_OK)
        return usage_error("--kernels must be auto, onednn or reference, got '%s'%s", value, "");
    } else if (!strcmp(name, "--replicas")) {
      if ((rc = parse_int(name, value, 1, 64, &n)) == TRAIN_EXIT_OK) cfg->replicas = (int)n;
    }
    if (rc != TRAIN_EXIT_OK) return rc;
  }

  /* A set this build or machine cannot run (or a bad COHORT_KERNELS) is a usage error, before any rank starts. */
  if (cfg->device == TRAIN_DEVICE_CPU && cohort_kernels_resolve(cfg->kernels, &cfg->kernels) != COHORT_OK)
    return usage_error("%s%s", cohort_last_error(), "");
  if (cfg->resume && !cfg->checkpoint) return usage_error("--resume needs --checkpoint PATH%s%s", "", "");
  /* Every rank decides before any of them trains, so before rank 0 can write a checkpoint: they agree. */
  if (cfg->resume == 2) cfg->resume = access(cfg->checkpoint, F_OK) == 0;
  if (cfg->checkpoint_every && !cfg->checkpoint)
    return usage_error("--checkpoint-every needs --checkpoint PATH%s%s", "", "");
  /* The fused path has neither buckets nor compression: saying so beats ignoring the flag. */
  if (cfg->sync == TRAIN_SYNC_FUSED && cfg->bucket_mb > 0)
    return usage_error("--bucket-mb needs --sync ddp%s%s", "", " (the fused allreduce has no buckets)");
  if (cfg->sync == TRAIN_SYNC_FUSED && cfg->compress != COHORT_DDP_COMPRESS_NONE)
    return usage_error("--compress needs --sync ddp%s%s", "", " (the fused allreduce sends float32)");
  if (cfg->lars == 0) cfg->lars_clip = 0; /* plain SGD: one setting, whatever --lars-mode said */
  /* ZeRO-1 is the engine's, and replaces its allreduce with one reduce-scatter of float32 over every rank. */
  if (cfg->zero && cfg->sync != TRAIN_SYNC_DDP)
    return usage_error("--zero 1 needs --sync ddp%s%s", "", " (sharding the optimizer is the engine's)");
  if (cfg->zero && cfg->compress != COHORT_DDP_COMPRESS_NONE)
    return usage_error("--zero 1 does not combine with --compress%s%s", "", " (its reduce-scatter sends float32)");
  if (cfg->zero && cfg->uneven)
    return usage_error("--zero 1 does not combine with --uneven%s%s", "",
                       " (a joined rank would have to step its shard without data)");
  if (cfg->uneven && cfg->sync != TRAIN_SYNC_DDP)
    return usage_error("--uneven needs --sync ddp%s%s", "", " (joining is the engine's: cohort_ddp_join)");
  if (cfg->uneven && cfg->checkpoint_every)
    return usage_error("--uneven checkpoints at the ends of epochs only%s%s", "",
                       ": leave out --checkpoint-every (mid-epoch, the ranks are at different places)");
  if (cfg->metrics && cfg->sync != TRAIN_SYNC_DDP)
    return usage_error("--metrics needs --sync ddp%s%s", "", " (the engine gathers them)");
  /* The GPU path averages buckets during backward (--sync ddp, --bucket-mb) or once after it (--sync fused), with a
   * plain optimizer: what it does not do yet, it says. */
  if (cfg->device == TRAIN_DEVICE_CUDA) {
    const char *no = cfg->replicas > 0                           ? "--replicas"
                     : cfg->zero                                 ? "--zero 1"
                     : cfg->accumulate > 1                       ? "--accumulate"
                     : cfg->uneven                               ? "--uneven"
                     : cfg->compress != COHORT_DDP_COMPRESS_NONE ? "--compress"
                     : cfg->metrics                              ? "--metrics"
                                                                 : NULL;
    if (no) return usage_error("%s does not run with --device cuda yet%s", no, " (use --device cpu)");
  }
  if (cfg->replicas > 0) {
    /* Under a launcher every process would start its own N replicas: N separate jobs that never meet. */
    static const char *const launcher_sizes[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t k = 0; k < sizeof launcher_sizes / sizeof launcher_sizes[0]; k++) {
      const char *v = getenv(launcher_sizes[k]);
      if (v && atol(v) > 1)
        return usage_error("--replicas runs the whole job in this process, but %s=%s says it is one of several "
                           "ranks: run it without cohortrun/mpirun, or drop --replicas",
                           launcher_sizes[k], v);
    }
  }
  if (!is_dir(cfg->data_dir))
    return usage_error("--data: no directory '%s'%s", cfg->data_dir,
                       " (install the dataset-fashion-mnist package or pass --data DIR)");
  return TRAIN_EXIT_OK;
}
