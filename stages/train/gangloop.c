/* The train stage's data-parallel loop in a gang; see gangloop.h. */
#include "gangloop.h"
#include "gangmem.h"

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "common/stagekit.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "zero/zero.h"
#include "zero/zero_cuda.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct gang {
  comm *c;  /* MPI: every rank's host-side exchanges */
  comm *nc; /* GPU ranks: NCCL, the gradients and parameters */
  zero *z;
  zero_cuda *zc;     /* GPU ranks: the step on the GPU */
  engine_device dev; /* agreed on by every rank (gangloop_pick_device) */
  int rank, N, stage;
  int B, T;      /* each rank's micro-batch */
  size_t bucket; /* zero_bucket */
  gpt *full;     /* stage 3: the gathered model for validation and the end
                    (every rank: each scores its share of the windows) */
  uint32_t *in, *tg; /* this rank's rows of the step's accum batches */
  zero_memory *mem;  /* every rank's memory figures (gather_memory) */
  comm_stats cs;     /* the communication of this run's steps */
  int64_t step0;     /* the step this run's loop began at */
} gang;

/* DAGRUN_WORLD_SIZE: the ranks of this task's gang; 0 when not in one. */
static int world_size(void) {
  const char *z = getenv("DAGRUN_WORLD_SIZE");
  int n = z ? atoi(z) : 0;
  return n > 0 ? n : 0;
}

int gangloop_launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") ||
         getenv("PMIX_RANK");
}

int gangloop_ranks(void) {
  int n = world_size();
  return n > 1 || (n == 1 && gangloop_launched_by_mpi()) ? n : 0;
}

void gangloop_abort(trainrun *r, comm *c, int rank, const char *what,
                    const char *err) {
  r->h->fail(r->ctx, "rank %d: %s: %s", rank, what, err);
  r->h->log(r->ctx, DAGRUN_LOG_ERROR, "rank %d: %s: %s (stopping the gang)",
            rank, what, err);
  comm_abort(c, EXIT_FAILED);
}

/* A failure in the middle of the collectives: every rank must stop. */
static _Noreturn void gang_abort(trainrun *r, gang *g, const char *what,
                                 const char *err) {
  gangloop_abort(r, g->c, g->rank, what, err);
}

int gangloop_open_mpi(trainrun *r, int N, comm **c, int *rank) {
  char err[2048];
  comm_config cc = {.backend = COMM_MPI};
  if (comm_create(&cc, c, err, sizeof err) != 0) {
    r->h->fail(r->ctx, "%s", err);
    return -1;
  }
  *rank = comm_rank(*c);
  if (comm_size(*c) != N) {
    r->h->fail(r->ctx, "MPI says %d ranks, DAGRUN_WORLD_SIZE %d", comm_size(*c),
               N);
    comm_abort(*c, EXIT_FAILED);
  }
  return 0;
}

int gangloop_threads(trainrun *r, int N) {
  int64_t v;
  if (stagekit_param_int(r->ctx, r->h, "threads", 0, 1024, &v))
    return EXIT_BAD_PARAMS;
  if (v == 0) { /* the CPUs shared by the ranks (one host) */
    int n = (int)stagekit_cpu_count() / N;
    trainkit_set_threads(n > 0 ? n : 1);
  }
  return 0;
}

/* What a gang frees when it ends (every path). */
static void gang_free(gang *g) {
  zero_cuda_destroy(g->zc);
  zero_destroy(g->z);
  comm_destroy(g->nc);
  comm_destroy(g->c);
  free(g->in);
  free(g->tg);
  free(g->mem);
  gpt_destroy(g->full);
}

/* ---- Before the collectives ---- */

/* The params a gang reads or refuses on top of trainrun's, and the CPU
 * threads shared by the ranks. 0 or EXIT_BAD_PARAMS. */
static int check_params(trainrun *r, gang *g) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  int64_t v;
  if (!gangloop_launched_by_mpi()) {
    h->fail(ctx,
            "world_size %d, but the ranks were not started by mpirun: "
            "the train stage's ranks talk over MPI; set launcher: "
            "mpirun (or srun) on this task",
            g->N);
    return EXIT_BAD_PARAMS;
  }
  if (stagekit_param_choice(ctx, h, "zero_stage", trainrun_zero_stage_names,
                            &g->stage))
    return EXIT_BAD_PARAMS;
  if (stagekit_param_int(ctx, h, "zero_bucket", 0, INT64_C(1) << 40, &v))
    return EXIT_BAD_PARAMS;
  g->bucket = (size_t)v;
  if (r->c.dropout > 0) {
    h->fail(ctx,
            "dropout %g in a gang: the ranks' ZeRO steps have no "
            "dropout; train in one process for it, or set dropout: 0",
            r->c.dropout);
    return EXIT_BAD_PARAMS;
  }
  if (r->c.overfit) {
    h->fail(ctx, "overfit_one_batch is a one-process check: run it without "
                 "world_size");
    return EXIT_BAD_PARAMS;
  }
  return gangloop_threads(r, g->N);
}

int gangloop_pick_device(trainrun *r, comm *c, int N, int rank,
                         engine_device *dev) {
  char why[512] = "", err[512];
  int have = zero_cuda_available(why, sizeof why);
  float n = have ? 1.0f : 0.0f;
  if (comm_allreduce_sum(c, &n, 1, err, sizeof err) != 0)
    gangloop_abort(r, c, rank, "agreeing on the device", err);
  int all = (int)n == N, lead = rank == 0;
  const char *asked = engine_device_names[r->c.device];
  char no[768] = "";
  if (!all && have)
    snprintf(no, sizeof no, "%d of the %d ranks see a usable GPU", (int)n, N);
  else if (!all)
    snprintf(no, sizeof no,
             "%d of the %d ranks see a usable GPU (this one: "
             "%s)",
             (int)n, N, why);
  if (engine_choose(r->c.device, all, dev) != 0) {
    r->h->fail(r->ctx,
               "device: cuda in a gang of %d, but %s; use device: "
               "cpu or auto",
               N, no);
    return -1;
  }
  if (!lead)
    return 0;
  if (*dev == ENGINE_CUDA)
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "device: cuda (device: %s; every rank sees a GPU: one GPU a "
              "rank, NCCL between them)",
              asked);
  else if (r->c.device == ENGINE_WANT_CPU)
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "device: cpu (device: cpu was asked "
              "for; the ranks talk over MPI)");
  else
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "device: cpu (device: auto, and %s; the ranks talk over MPI)",
              no);
  return 0;
}

/* GPU ranks accumulate micro-batches at ZeRO stages 0-1 only
 * (zero_cuda_step_accum: stages 2-3 reduce each group's gradient buffer
 * as backward ends): grad_accum above 1 at stage 2-3 fails the task
 * there, on every rank alike (they agreed on the device). 1 when
 * refused. */
static int gpu_accum_refused(trainrun *r, gang *g) {
  if (g->dev != ENGINE_CUDA || r->c.accum <= 1 || g->stage < 2)
    return 0;
  r->h->fail(r->ctx,
             "grad_accum %d in a gang on GPUs at zero_stage %d: GPU ranks "
             "accumulate micro-batches at ZeRO stages 0 and 1 only; use "
             "zero_stage: 1, raise batch_size or world_size instead (global "
             "batch = world_size x batch_size x grad_accum), or use device: "
             "cpu",
             r->c.accum, g->stage);
  return 1;
}

/* The communicators (MPI; NCCL too on GPUs) and the device. 0 or the
 * exit status. */
static int open_comm(trainrun *r, gang *g) {
  char err[2048];
  if (gangloop_open_mpi(r, g->N, &g->c, &g->rank) != 0)
    return EXIT_FAILED;
  if (gangloop_pick_device(r, g->c, g->N, g->rank, &g->dev) != 0 ||
      gpu_accum_refused(r, g)) {
    comm_destroy(g->c);
    g->c = NULL;
    return EXIT_BAD_PARAMS;
  }
  if (g->dev == ENGINE_CUDA) {
    comm_config nccfg = {.backend = COMM_NCCL, .device = -1};
    if (comm_create(&nccfg, &g->nc, err, sizeof err) != 0)
      gang_abort(r, g, "NCCL", err);
  }
  return 0;
}

/* Rank 0's opening lines: the model, the gang, a refused spike policy. */
static void log_start(trainrun *r, gang *g) {
  const dagrun_host *h = r->h;
  const gpt_config *mc = gpt_get_config(r->model);
  size_t np = gpt_num_params(r->model);
  h->log(r->ctx, DAGRUN_LOG_INFO,
         "model %s: %d layers, %d heads, width %d, context %d, vocab %d: "
         "%.2fM parameters",
         r->c.m.name, mc->n_layer, mc->n_head, mc->n_embd, mc->block_size,
         mc->vocab_size, np / 1e6);
  const char *dev = g->dev == ENGINE_CUDA ? "GPUs, NCCL" : "CPUs, MPI";
  int A = r->c.accum;
  if (A == 1)
    h->log(r->ctx, DAGRUN_LOG_INFO,
           "gang of %d ranks (%s), ZeRO stage %d: global batch %d x %d = %d "
           "sequences of %d tokens a step",
           g->N, dev, g->stage, g->N, g->B, g->N * g->B, g->T);
  else
    h->log(r->ctx, DAGRUN_LOG_INFO,
           "gang of %d ranks (%s), ZeRO stage %d: global batch %d x %d x %d "
           "(grad_accum) = %d sequences of %d tokens a step; %s",
           g->N, dev, g->stage, g->N, g->B, A, g->N * g->B * A, g->T,
           g->stage < 2 ? "the gradients are reduced once a step, after the "
                          "last micro-batch"
                        : "the gradients are reduce-scattered every "
                          "micro-batch and summed in each rank's shard (it "
                          "keeps no full gradient to accumulate in)");
  h->metric(r->ctx, "parameters", (double)np, 0);
  if (r->c.spike_on &&
      (r->c.spike.policy == SPIKE_RESET || r->c.spike.policy == SPIKE_ROLLBACK))
    h->log(r->ctx, DAGRUN_LOG_WARN,
           "spike_policy %s: a gang skips the spike's update instead (it "
           "cannot reset or roll back inside a ZeRO step)",
           trainrun_spike_policy_names[r->c.spike.policy + 1]);
}

/* ---- This rank's device ----
 * The two places that run a batch on the device chosen: the GPU once
 * zero_cuda has the model (g->zc), else the CPU (the host model, or
 * ZeRO's step over it). */

/* One batch's loss (B,T) with no backward. */
static int rank_loss(gang *g, gpt *model, const uint32_t *in,
                     const uint32_t *tg, float *loss, char *err,
                     size_t errlen) {
  if (g->zc)
    return zero_cuda_loss(g->zc, in, tg, g->B, g->T, loss, err, errlen);
  return gpt_forward(model, in, tg, g->B, g->T, loss, err, errlen);
}

/* One ZeRO step on this rank's rows (collective). */
static int rank_step(trainrun *r, gang *g, const uint32_t *in,
                     const uint32_t *tg, double lr, zero_step_result *res,
                     char *err, size_t errlen) {
  if (g->zc) /* open_comm refuses grad_accum on GPUs at stages 2-3 */
    return zero_cuda_step_accum(g->zc, in, tg, g->B, g->T, r->c.accum,
                                (float)lr, r->c.grad_clip, res, err, errlen);
  return zero_step_accum(g->z, in, tg, g->B, g->T, r->c.accum, (float)lr,
                         r->c.grad_clip, res, err, errlen);
}

/* ---- Collective pieces ---- */

/* The whole model with the current weights, on every rank. Stages 0-2
 * hold the full parameters on every rank after a step; stage 3 gathers
 * them into a model of its own (collective); GPU ranks bring the GPUs'
 * master weights into the host model (collective). */
static gpt *gang_model(trainrun *r, gang *g) {
  char err[1024];
  if (g->zc) {
    if (zero_cuda_gather_params(g->zc, err, sizeof err) != 0)
      gang_abort(r, g, "gathering the parameters", err);
    return r->model;
  }
  if (g->stage < 3)
    return r->model;
  if (!g->full) {
    if (gpt_create(gpt_get_config(r->model), &g->full, err, sizeof err) != 0)
      gang_abort(r, g, "the model for evaluation", err);
    gpt_release(g->full, GPT_BUF_GRADS); /* it never trains */
  }
  if (zero_gather_params(g->z, gpt_params(g->full), err, sizeof err) != 0)
    gang_abort(r, g, "gathering the parameters", err);
  return g->full;
}

/* A sharded checkpoint of step (collective); rank 0 prunes and logs. */
static void gang_save(trainrun *r, gang *g) {
  char err[1024];
  if (g->zc && zero_cuda_pull(g->zc, err, sizeof err) != 0)
    gang_abort(r, g, "sharded checkpoint", err);
  if (zero_save(g->z, r->ckpt_dir, r->st.step, err, sizeof err) != 0)
    gang_abort(r, g, "sharded checkpoint", err);
  if (g->rank != 0)
    return;
  if (snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s/step-%08lld", r->ckpt_dir,
               (long long)r->st.step) >= (int)sizeof r->last_ckpt)
    r->last_ckpt[0] = '\0'; /* too long a path to name */
  int removed = ckpt_prune(r->ckpt_dir, (int)r->c.keep);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "sharded checkpoint step %lld (%d ranks): "
            "%s%s",
            (long long)r->st.step, g->N, r->last_ckpt,
            removed > 0 ? " (older ones pruned)" : "");
}

/* The checkpoint to resume from, found by rank 0 and broadcast so that
 * every rank loads the same one; "" when none. */
static void find_resume(trainrun *r, gang *g, char *dir, size_t dirlen) {
  char err[1024];
  memset(dir, 0, dirlen);
  if (g->rank == 0) {
    char *found = trainrun_resume_dir(r);
    if (found)
      snprintf(dir, dirlen, "%s", found);
    free(found);
  }
  if (comm_broadcast(g->c, dir, dirlen, 0, err, sizeof err) != 0)
    gang_abort(r, g, "agreeing on the checkpoint", err);
}

/* The validation windows are those one process of the gang's global
 * micro-batch (N x batch_size) scores: eval_batches batches of N x B
 * windows from the start of the split (the loader's batch is N x B in a
 * gang). Each rank scores its B rows of each batch, on m (its CPU
 * model) or, m NULL, on its GPU. */
typedef struct val_share {
  gang *g;
  gpt *m;
} val_share;

/* engine_eval_batches's fn: this rank's rows of a batch of N x B. */
static int share_loss(void *arg, const uint32_t *in, const uint32_t *tg,
                      float *loss, char *err, size_t errlen) {
  val_share *v = arg;
  gang *g = v->g;
  size_t off = (size_t)g->rank * g->B * g->T;
  if (v->m)
    return gpt_forward(v->m, in + off, tg + off, g->B, g->T, loss, err, errlen);
  return rank_loss(g, NULL, in + off, tg + off, loss, err, errlen);
}

/* trainrun_validate's fn on every rank (collective): each rank's mean
 * over its share of ld's batches, summed over the ranks and divided by
 * N, is the mean over every window (the shares are equal). Every rank
 * gets the same answer: -1 when any rank failed (a failed rank logs its
 * reason; rank 0's err counts them). */
static int gang_score(void *arg, trainrun *r, loader *ld, double *out,
                      char *err, size_t errlen) {
  val_share *v = arg;
  gang *g = v->g;
  char e2[512];
  double loss = 0;
  int rc =
      engine_eval_batches(ld, g->N * g->B, g->T, (uint64_t)r->c.eval_batches,
                          share_loss, v, &loss, err, errlen);
  /* A rank that failed says so in the sum of failures; the loss is
   * summed in double, as one process sums its batches. */
  float bad = rc != 0 ? 1.0f : 0.0f;
  if (rc != 0)
    loss = 0;
  if (comm_allreduce_sum(g->c, &bad, 1, e2, sizeof e2) != 0 ||
      comm_allreduce_sum_double(g->c, &loss, e2, sizeof e2) != 0)
    gang_abort(r, g, "validation", e2);
  if (rc != 0 && g->rank != 0) /* into this rank's log */
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "rank %d: validation: %s", g->rank, err);
  if (bad > 0 && rc == 0)
    snprintf(err, errlen,
             "%d of the %d ranks failed to score their share (see their "
             "logs)",
             (int)bad, g->N);
  *out = loss / g->N;
  return bad > 0 ? -1 : 0;
}

/* Validation at step on every rank (collective). m: the model each rank
 * scores on its CPU, or NULL for its GPU. Rank 0 reports; NAN on the
 * others. */
static double gang_evaluate(trainrun *r, gang *g, gpt *m, int64_t step) {
  if (g->rank == 0)
    trainrun_lm_eval(r, m, step);
  val_share v = {g, m};
  return trainrun_validate(r, step, g->rank == 0, gang_score, &v);
}

/* The model validation scores on: the GPU at stages 0-2 (NULL), else the
 * whole model on each rank's CPU (collective at stage 3). */
static gpt *val_model(trainrun *r, gang *g) {
  return g->zc && g->stage < 3 ? NULL : gang_model(r, g);
}

/* The loss at initialization, on rank 0's rows of the first batch (the
 * loader's position kept), on its GPU or its CPU model; logged and a
 * metric, as in one process. */
static void preflight(trainrun *r, gang *g) {
  char err[1024];
  float loss = 0;
  trainrun_peek_batch(r);
  if (rank_loss(g, r->model, r->inputs, r->targets, &loss, err, sizeof err) !=
      0)
    gang_abort(r, g, "first forward pass", err);
  trainrun_report_init_loss(r, loss);
}

/* ---- ZeRO and resume ---- */

/* The gang's update guard (zero.h's zero_guard_fn), run inside each ZeRO
 * step on every rank before any weight moves; rank 0's answer is the one
 * applied. The loss-spike guard as in one process for skip and lower_lr;
 * reset and rollback would move the shards' state in the middle of a
 * step, so a gang skips the update instead. DAGRUN_FAULT_SPIKE_STEPS
 * multiplies what the guard sees at those steps as the bad batch does in
 * one process (loss x20, norm x100); the gradients are not scaled. */
typedef struct gang_guard {
  trainrun *r;
  trainrun_faults fault;
  int lead;
} gang_guard;

static double gang_guard_fn(void *arg, float loss, double norm) {
  gang_guard *gg = arg;
  trainrun *r = gg->r;
  int64_t step = r->st.step;
  double l = loss, z = 0;
  if (trainrun_faults_take(&gg->fault, step + 1)) {
    if (gg->lead)
      r->h->log(r->ctx, DAGRUN_LOG_WARN,
                "step %lld: injected bad batch (DAGRUN_FAULT_SPIKE_STEPS)",
                (long long)(step + 1));
    l *= 20;
    norm *= 100;
  }
  if (!r->c.spike_on)
    return 1.0;
  if (spike_check(&r->guard, l, norm, &z)) {
    if (gg->lead)
      trainrun_spike_report(r, step, l, norm, z, 1);
    if (r->c.spike.policy != SPIKE_LOWER_LR)
      return 0.0;
  }
  return spike_lr_factor(&r->guard);
}

/* One process's checkpoint (trainstate.h: full weights and optimizer
 * state) is read whole by every rank into the model, before ZeRO takes
 * it, and into an optimizer over the whole model (returned; the caller
 * destroys it), whose state ZeRO cuts after. Its loader position is for
 * one process's batch: replaying the steps' batches continues its data
 * order exactly when the global batch is that batch. */
static optim *load_whole(trainrun *r, gang *g, const char *dir) {
  char err[2048];
  optim *whole = NULL;
  train_state ts = r->st;
  ts.train = NULL;
  if (trainkit_make_optim(r->model, &r->c.opt, &whole, err, sizeof err) != 0)
    gang_abort(r, g, "resume", err);
  ts.opt = whole;
  if (trainrun_verify_resume(dir, err, sizeof err) != 0 ||
      trainstate_load(dir, &ts, err, sizeof err) != 0)
    gang_abort(r, g, "resume", err);
  r->st.step = ts.step;
  r->st.init_loss = ts.init_loss;
  return whole;
}

/* ZeRO over the model with the guard, and the state resumed from dir
 * ("" for none: a fresh run). */
static void start_zero(trainrun *r, gang *g, const char *dir,
                       gang_guard *guard) {
  char err[2048];
  int sharded = dir[0] && zero_is_sharded(dir);
  optim *whole = dir[0] && !sharded ? load_whole(r, g, dir) : NULL;
  zero_config zc = {.stage = g->stage, .bucket_floats = g->bucket};
  if (zero_create(&zc, r->model, &r->c.opt, g->c, &g->z, err, sizeof err) != 0)
    gang_abort(r, g, "ZeRO", err);
  zero_set_guard(g->z, gang_guard_fn, guard);
  if (!dir[0])
    return;
  int64_t step = r->st.step;
  if (whole)
    zero_set_optim_state(g->z, optim_state(whole), optim_get_t(whole));
  optim_destroy(whole);
  if (sharded && zero_load(g->z, dir, &step, err, sizeof err) != 0)
    gang_abort(r, g, "resume", err);
  /* The loader's position: the batches of the steps done, replayed. */
  for (int64_t k = 0; k < step * r->c.accum; k++)
    loader_next(r->train, r->inputs, r->targets);
  r->st.step = step;
  r->st.tokens = (uint64_t)step * g->N * g->B * g->T * r->c.accum;
  if (trainrun_check_resumed(r, dir, err, sizeof err) != 0)
    gang_abort(r, g, "resume", err);
  snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", dir);
  if (g->rank == 0)
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "resumed from %s checkpoint %s at step %lld",
              sharded ? "sharded" : "one-process", dir, (long long)step);
}

/* GPU ranks: the GPUs take the host model and the shards' optimizer
 * state as they are now (resumed or new). */
static void start_gpu(trainrun *r, gang *g) {
  char err[2048];
  zero_cuda_options zo = {.B = g->B,
                          .T = g->T,
                          .opt = r->c.opt,
                          .recompute = (int)r->c.recompute,
                          .deterministic = r->c.deterministic};
  if (zero_cuda_create(g->z, r->model, g->c, g->nc, &zo, &g->zc, err,
                       sizeof err) != 0)
    gang_abort(r, g, "the GPU", err);
  if (g->rank == 0)
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "rank 0's GPU: %s; recompute: %s, "
              "deterministic: %s",
              zero_cuda_describe(g->zc), engine_recompute_name(r->c.recompute),
              r->c.deterministic ? "true" : "false");
}

/* ---- The loop ---- */

/* The test hook DAGRUN_TEST_KILL_RANK_AT_STEP (gangloop.h). */
static void test_kill(trainrun *r, gang *g) {
  const char *z = getenv("DAGRUN_TEST_KILL_RANK_AT_STEP");
  int rank;
  long long step;
  if (!z || sscanf(z, "%d:%lld", &rank, &step) != 2 || rank != g->rank ||
      step != r->st.step)
    return;
  char *flag =
      fileio_join(r->h->dir(r->ctx, DAGRUN_DIR_TASK), "test-kill-rank.done");
  int fd = flag ? open(flag, O_CREAT | O_EXCL | O_WRONLY, 0644) : -1;
  free(flag);
  if (fd < 0)
    return; /* done once already */
  close(fd);
  r->h->log(r->ctx, DAGRUN_LOG_WARN,
            "rank %d: killing itself after step %lld "
            "(DAGRUN_TEST_KILL_RANK_AT_STEP)",
            g->rank, step);
  raise(SIGKILL);
}

/* Every rank's memory figures (gangmem.h) into g->mem on rank 0, each
 * rank broadcasting its own in turn (exact byte counts; N is small), and
 * the figures' frame in *m. Collective. */
static void gather_memory(trainrun *r, gang *g, gangmem *m) {
  char err[512];
  if (!g->mem && !(g->mem = calloc((size_t)g->N, sizeof *g->mem)))
    gang_abort(r, g, "memory figures", "out of memory");
  zero_memory mine;
  if (g->zc) {
    uint64_t acts = 0;
    zero_cuda_memory_get(g->zc, &mine, &acts);
    mine.acts = mine.peak_acts = acts; /* allocated at the start */
  } else {
    zero_memory_get(g->z, &mine);
  }
  for (int q = 0; q < g->N; q++) {
    if (q == g->rank)
      g->mem[q] = mine;
    if (comm_broadcast(g->c, &g->mem[q], sizeof g->mem[q], q, err,
                       sizeof err) != 0)
      gang_abort(r, g, "memory figures", err);
  }
  gpt_memory gm;
  gpt_memory_estimate(gpt_get_config(r->model), g->B, g->T,
                      (int)optim_state_floats_for(r->c.opt.kind, 1),
                      (gpt_recompute)r->c.recompute, &gm);
  *m = (gangmem){.N = g->N,
                 .stage = g->stage,
                 .gpu = g->zc != NULL,
                 .f_acts = gm.acts,
                 .rank = g->mem};
}

/* Rank 0's report of a step done. */
static void report_step(trainrun *r, gang *g, const zero_step_result *res,
                        double lr, const trainrun_times *t) {
  const dagrun_host *h = r->h;
  trainrun_report_step(r, res->loss, lr, res->norm, t, g->N);
  /* The overlap achieved: reduce-scatters started while backward still
   * ran, of all of them. */
  if (res->buckets > 0) {
    h->metric(r->ctx, "comm_buckets_early", res->buckets_early, r->st.step);
    h->metric(r->ctx, "comm_overlap", (double)res->buckets_early / res->buckets,
              r->st.step);
  }
  trainrun_progress(r, res->loss, 0);
}

/* One step on every rank (collective); a failure aborts the gang. */
static void train_step(trainrun *r, gang *g) {
  char err[2048];
  int64_t step = r->st.step;
  size_t bt = (size_t)g->B * g->T;
  double t_step = clock_monotonic();
  /* The global batch of each micro-batch (N x B rows, as one process of
   * that batch draws them), this rank's rows of it kept: accum of them
   * make the step's, which one process of N x accum x B draws at once. */
  for (int k = 0; k < r->c.accum; k++) {
    loader_next(r->train, r->inputs, r->targets);
    memcpy(g->in + k * bt, r->inputs + (size_t)g->rank * bt,
           bt * sizeof *g->in);
    memcpy(g->tg + k * bt, r->targets + (size_t)g->rank * bt,
           bt * sizeof *g->tg);
  }
  double lr = lr_at(&r->c.sched, step);
  double t_call = clock_monotonic();
  zero_step_result res;
  if (rank_step(r, g, g->in, g->tg, lr, &res, err, sizeof err) != 0)
    gang_abort(r, g, "step", err);
  double t_end = clock_monotonic();
  /* A step whose loss or norm is not finite, or that the spike guard
   * stopped, moved nothing. Every rank has the global loss and norm:
   * they stop together. */
  if (trainrun_count_step(r, step, res.loss, res.norm, g->rank == 0, err,
                          sizeof err) != 0)
    gang_abort(r, g, "step", err);
  lr *= res.lr_factor > 0.0 ? res.lr_factor : 1.0;
  /* Rank 0's time, from one chain of clock reads so that the phases add
   * up to the step: the optimizer phase is the rest of the call, as
   * zero_step counts it (res.t_optimizer), plus the moments on either
   * side of its own clock reads, where a loaded machine can deschedule
   * the rank for a timeslice. */
  trainrun_times times = {
      t_call - t_step,
      res.t_forward,
      res.t_backward,
      (t_end - t_call) - res.t_forward - res.t_backward - res.t_comm,
      res.t_comm,
      t_end - t_step};
  r->st.step++;
  r->st.tokens += r->tokens_per_step;
  r->last_loss = res.loss;
  if (g->rank == 0)
    report_step(r, g, &res, lr, &times);
  if (r->st.step == r->first_step + 1) { /* every rank's first step */
    gangmem m;
    gather_memory(r, g, &m);
    if (g->rank == 0)
      gangmem_log(r, &m);
  }
}

/* The steps to r->c.steps on every rank. A stop (timeout, Ctrl-C) may
 * reach the ranks at different steps: they agree on it by an all-reduce
 * each step, then checkpoint together and fail the task (-1). */
static int train_loop(trainrun *r, gang *g) {
  char err[2048];
  size_t n = (size_t)r->c.accum * g->B * g->T;
  g->in = malloc(n * sizeof *g->in);
  g->tg = malloc(n * sizeof *g->tg);
  if (!g->in || !g->tg)
    gang_abort(r, g, "the batches", "out of memory");
  comm_stats_reset(g->c);
  if (g->nc)
    comm_stats_reset(g->nc);
  g->step0 = r->st.step;
  trainrun_loop_start(r, (size_t)g->N * g->B * g->T * r->c.accum);
  while (r->st.step < r->c.steps) {
    int64_t step = r->st.step;
    float stop = r->h->cancelled(r->ctx) ? 1.0f : 0.0f;
    if (comm_allreduce_sum(g->c, &stop, 1, err, sizeof err) != 0)
      gang_abort(r, g, "step", err);
    if (stop > 0) {
      gang_save(r, g);
      r->h->fail(r->ctx,
                 "stopped at step %lld; sharded checkpoint %s "
                 "(resume: auto continues from it)",
                 (long long)step, r->last_ckpt);
      return -1;
    }
    test_kill(r, g);
    train_step(r, g);
    if (r->c.eval_every && r->st.step % r->c.eval_every == 0 &&
        r->st.step < r->c.steps) {
      r->val_loss = gang_evaluate(r, g, val_model(r, g), r->st.step);
      if (g->rank == 0)
        r->h->log(r->ctx, DAGRUN_LOG_INFO,
                  "step %lld: loss %.4f, val loss %.4f", (long long)r->st.step,
                  r->last_loss, r->val_loss);
    }
    if (r->c.ckpt_every && r->st.step % r->c.ckpt_every == 0 &&
        r->st.step < r->c.steps)
      gang_save(r, g);
  }
  return 0;
}

/* ---- The end (rank 0) ---- */

/* The full weights of m, without optimizer state, as a train checkpoint
 * in <task>/model (dir), its path into final. 0 or -1. */
static int save_full_model(trainrun *r, gpt *m, char *dir, size_t dirlen,
                           char *final, size_t finallen) {
  char err[2048];
  snprintf(dir, dirlen, "%s/model", r->h->dir(r->ctx, DAGRUN_DIR_TASK));
  train_state fs = {.model = m,
                    .step = r->st.step,
                    .tokens = r->st.tokens,
                    .config_json = r->config_text,
                    .init_loss = r->st.init_loss};
  if (trainstate_save(dir, &fs, final, finallen, err, sizeof err) != 0) {
    r->h->fail(r->ctx, "final model: %s", err);
    return -1;
  }
  ckpt_prune(dir, 1);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "full model (weights only) at step %lld: %s", (long long)r->st.step,
            final);
  return 0;
}

/* Rank 0's results, m the gathered model (validated): the full model,
 * samples, the last line, summary.json and the outputs. 0 or -1. */
static int write_results(trainrun *r, gang *g, gpt *m, const gangmem *mem,
                         double train_s) {
  char model_dir[4096], final[4096];
  if (save_full_model(r, m, model_dir, sizeof model_dir, final, sizeof final) !=
          0 ||
      trainrun_check_end(r) != 0)
    return -1;
  trainrun_samples(r, m);
  double tps = trainrun_tokens_per_s(r, train_s);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "done: %lld steps on %d ranks, %.0f tokens/s; loss %.4f, val "
            "loss %.4f; peak RSS of rank 0 %.0f MiB",
            (long long)r->st.step, g->N, tps, r->last_loss, r->val_loss,
            stagekit_peak_rss() / 1048576.0);
  cJSON *s = trainrun_summary_start(r, gpt_num_params(r->model));
  cJSON_AddNumberToObject(s, "world_size", g->N);
  cJSON_AddNumberToObject(s, "zero_stage", g->stage);
  cJSON_AddStringToObject(s, "device", g->zc ? "cuda" : "cpu");
  if (g->zc)
    cJSON_AddStringToObject(s, "gpu", zero_cuda_describe(g->zc));
  cJSON_AddNumberToObject(s, "global_batch", g->N * g->B * r->c.accum);
  trainrun_summary_losses(r, s);
  trainrun_summary_rates(r, s, tps);
  gangmem_summary(mem, s);
  gangmem_comm(r, &g->cs, r->st.step - g->step0, s);
  return trainrun_finish(r, s, final, model_dir, r->last_ckpt, r->ckpt_dir);
}

/* The last sharded checkpoint and the gathered model (collective), then
 * rank 0's results. Returns the exit status. */
static int finish(trainrun *r, gang *g) {
  double train_s = clock_monotonic() - r->t_start;
  comm_stats_add(g->c, &g->cs);
  comm_stats_add(g->nc, &g->cs);
  gang_save(r, g);
  gpt *m = gang_model(r, g);
  /* Every rank scores its share: on the GPU at stages 0-2, else on m. */
  r->val_loss =
      gang_evaluate(r, g, g->zc && g->stage < 3 ? NULL : m, r->st.step);
  gangmem mem; /* the last step's figures, for summary.json */
  gather_memory(r, g, &mem);
  /* The collectives are over; the ranks other than 0 are done. NCCL's
   * communicator goes now, on every rank together (its finalize waits
   * for the peers), not after rank 0's writing, which may outlast the
   * communicator's timeout. */
  comm_destroy(g->nc);
  g->nc = NULL;
  if (g->rank != 0)
    return 0;
  return write_results(r, g, m, &mem, train_s) == 0 ? 0 : EXIT_FAILED;
}

int gangloop_run(trainrun *r, int N) {
  gang g = {.N = N};
  int status = check_params(r, &g);
  if (status == 0)
    status = open_comm(r, &g);
  if (status != 0)
    return status;
  if (trainrun_setup(r, N, 1) != 0)
    comm_abort(g.c, EXIT_FAILED);
  /* After setup: init_from's model sets the sequence length. */
  g.B = r->c.B;
  g.T = r->c.m.T;
  trainrun_set_config(r);
  char resume_dir[4096];
  find_resume(r, &g, resume_dir, sizeof resume_dir);
  int lead = g.rank == 0;
  if (lead)
    log_start(r, &g);
  r->lnV = log((double)gpt_get_config(r->model)->vocab_size);
  /* Pre-flight on the CPU before ZeRO takes the model (stage 3 frees its
   * parameters); on the GPU once it has them, but at stage 3, where a
   * forward on one GPU would need the other ranks' layers. */
  int gpu_preflight = g.dev == ENGINE_CUDA && g.stage < 3;
  if (lead && !resume_dir[0] && !gpu_preflight)
    preflight(r, &g);
  gang_guard guard = {.r = r, .lead = lead};
  trainrun_faults_read(&guard.fault);
  start_zero(r, &g, resume_dir, &guard);
  if (g.dev == ENGINE_CUDA) {
    start_gpu(r, &g);
    if (lead && !resume_dir[0] && gpu_preflight)
      preflight(r, &g);
  }
  status = train_loop(r, &g) == 0 ? finish(r, &g) : EXIT_FAILED;
  gang_free(&g);
  return status;
}
