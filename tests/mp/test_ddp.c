/*
 * test_ddp.c: the DDP engine between real processes. Run under cohortrun:
 *
 *   cohortrun -np N build/tests/test_ddp                 every check of ddp_check.c
 *   cohortrun -np N build/tests/test_ddp --check NAME    one of them
 *   cohortrun -np N build/tests/test_ddp --mode MODE     a scenario that tests/mp/test_ddp_faults.sh inspects:
 *     train      a few engine steps of an MLP with timeline spans (COHORT_TIMELINE is set by the script)
 *     held_back  the last rank sleeps 3.5 s before its backward; the others wait in finish (COHORT_STALL_S=1)
 *     missing    the last rank never marks one gradient ready: it fails naming the parameter, the others get a
 *                remote failure naming it
 *     killed     the last rank SIGKILLs itself in backward: every survivor's finish fails naming it
 * In the modes each rank prints one line "RESULT rank=R status=S msg=..." for the script to check.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/ddp.h"
#include "cohort/nn.h"
#include "ddp_check.h"

static void result(int rank, cohort_status st) {
  printf("RESULT rank=%d status=%s msg=%s\n", rank, st == COHORT_OK ? "ok" : cohort_strerror(st),
         st == COHORT_OK ? "" : cohort_last_error());
  fflush(stdout);
}

static cohort_status one_step(cohort_ddp *ddp, cohort_model *m, cohort_optim *o, int rank, int size, int step,
                              const char *mode) {
  float x[8 * 20], dl[8 * 5];
  int32_t y[8];
  for (int k = 0; k < 8 * 20; k++)
    x[k] = (float)((k * 31 + rank * 7 + step) % 17) / 17.0f - 0.5f;
  for (int k = 0; k < 8; k++)
    y[k] = (k + rank + step) % 5;
  cohort_tensor t;
  int64_t shape[4] = {8, 1, 4, 5};
  const cohort_tensor *logits;
  float loss;
  cohort_status st = cohort_ddp_prepare(ddp);
  if (st == COHORT_OK) st = cohort_tensor_wrap(&t, x, 4, shape);
  if (st == COHORT_OK) st = cohort_model_forward(m, &t, &logits);
  if (st == COHORT_OK) st = cohort_softmax_xent(logits, y, &loss, dl, NULL);
  if (st != COHORT_OK) return st;
  cohort_ddp_span_begin(ddp, COHORT_SPAN_BACKWARD);
  int last = rank == size - 1;
  if (last && step == 1 && !strcmp(mode, "held_back")) usleep(3500000);
  if (last && step == 1 && !strcmp(mode, "killed")) {
    printf("KILLING rank=%d\n", rank);
    fflush(stdout);
    raise(SIGKILL);
  }
  if (last && step == 1 && !strcmp(mode, "missing")) cohort_model_set_grad_hook(m, NULL, NULL);
  cohort_model_zero_grad(m);
  if ((st = cohort_model_backward(m, dl)) != COHORT_OK) return st;
  if (last && step == 1 && !strcmp(mode, "missing")) /* every gradient but fc1.bias (parameter 1) */
    for (int i = cohort_model_num_params(m) - 1; i >= 0; i--)
      if (i != 1 && (st = cohort_ddp_mark_ready(ddp, i)) != COHORT_OK) return st;
  if ((st = cohort_ddp_finish(ddp)) != COHORT_OK) return st;
  cohort_ddp_span_begin(ddp, COHORT_SPAN_OPTIMIZER);
  st = cohort_optim_step(o);
  cohort_ddp_span_end(ddp, COHORT_SPAN_OPTIMIZER);
  return st;
}

static int run_mode(cohort_comm *c, const char *mode) {
  int rank = cohort_rank(c), size = cohort_size(c);
  /* The survivors of "killed" must live to report: cohortrun stops the job with SIGTERM once a rank dies. */
  if (!strcmp(mode, "killed")) signal(SIGTERM, SIG_IGN);
  cohort_model *m = NULL;
  cohort_optim *o = NULL;
  cohort_ddp *ddp = NULL;
  cohort_ddp_options opt;
  cohort_ddp_options_init(&opt);
  opt.bucket_bytes = 400 * sizeof(float);
  opt.first_bucket_bytes = 100 * sizeof(float);
  cohort_sgd_config sgd = {.lr = 0.05f};
  cohort_status st = cohort_model_create_mlp(3, 20, 32, 5, &m);
  if (st == COHORT_OK) st = cohort_ddp_create_model(c, m, &opt, &ddp);
  if (st == COHORT_OK) st = cohort_optim_sgd_create(m, &sgd, &o);
  for (int step = 0; step < 4 && st == COHORT_OK; step++)
    st = one_step(ddp, m, o, rank, size, step, mode);
  result(rank, st);
  if (st == COHORT_OK && !strcmp(mode, "train") && rank == 0) {
    cohort_ddp_stats s;
    cohort_ddp_get_stats(ddp, &s);
    printf("STATS steps=%lld buckets=%d bytes=%zu\n", (long long)s.steps, s.num_buckets, s.bytes_per_step);
  }
  cohort_optim_destroy(o);
  cohort_ddp_destroy(ddp);
  cohort_model_destroy(m);
  return 0;
}

int main(int argc, char **argv) {
  const char *check = NULL, *mode = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--check"))
      check = argv[i + 1];
    else if (!strcmp(argv[i], "--mode"))
      mode = argv[i + 1];
  }
  cohort_comm *c = NULL;
  cohort_status st = cohort_init(&c);
  if (st != COHORT_OK) {
    fprintf(stderr, "cohort_init: %s: %s\n", cohort_strerror(st), cohort_last_error());
    return 1;
  }
  int rc = mode ? run_mode(c, mode) : (ddp_check_run(c, check) ? 1 : 0);
  if (!mode)
    printf("rank %d of %d (%s): %s\n", cohort_rank(c), cohort_size(c), cohort_transport_name(c),
           rc ? "FAILED" : "all DDP checks passed");
  cohort_comm_destroy(c);
  return rc;
}
