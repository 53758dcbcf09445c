/* The train stage's pipeline-parallel loop; see pipeloop.h. */
#include "pipeloop.h"
#include "gangloop.h"
#include "gangmem.h"

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "common/stagekit.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "pipeline/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The gang of N = D x P ranks: rank r is stage r % P of data-parallel
 * replica r / P (a replica's stages are consecutive ranks, so that
 * mpirun's by-slot placement keeps a pipeline's neighbours on one node
 * where it can, and their activations off the network). */
typedef struct pipe_run {
  comm *c;  /* the gang: the stop agreement */
  comm *pc; /* this replica's P stages: the pipeline's */
  comm *dc; /* this stage's D replicas: the gradients' mean */
  pipeline *pl;
  int rank, N, P, D, m;
  pipeline_schedule sched;
  uint32_t *in, *tg; /* the step's m micro-batches */
  double idle_sum;   /* the bubble over the steps of this run */
  int64_t nsteps;
  comm_stats cs; /* the communication of this run's steps */
} pipe_run;

int pipeloop_param(trainrun *r, int *P) {
  int64_t v;
  if (stagekit_param_int(r->ctx, r->h, "pipeline_parallel", 1, 1024, &v))
    return -1;
  *P = (int)v;
  return 0;
}

static _Noreturn void pipe_abort(trainrun *r, pipe_run *p, const char *what,
                                 const char *err) {
  gangloop_abort(r, p->c, p->rank, what, err);
}

/* What pipeline_parallel refuses, before any collective. 0 or
 * EXIT_BAD_PARAMS. */
static int check_params(trainrun *r, pipe_run *p) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  if (!p->N || !gangloop_launched_by_mpi()) {
    h->fail(ctx,
            "pipeline_parallel %d needs a gang of %d CPU ranks: set "
            "world_size: %d and launcher: mpirun (or srun) on this task",
            p->P, p->P, p->P);
    return EXIT_BAD_PARAMS;
  }
  if (p->N % p->P != 0) {
    h->fail(ctx,
            "world_size %d is not a multiple of pipeline_parallel %d (the "
            "gang is data-parallel replicas of pipeline_parallel stages "
            "each)",
            p->N, p->P);
    return EXIT_BAD_PARAMS;
  }
  p->D = p->N / p->P;
  const char *why = r->c.device == ENGINE_WANT_CUDA ? "device: cuda"
                    : r->c.dropout > 0              ? "dropout"
                    : r->c.overfit                  ? "overfit_one_batch"
                                                    : NULL;
  if (why) {
    h->fail(ctx,
            "pipeline_parallel %d runs on CPU ranks without %s (not "
            "supported with it yet): leave it out, or train without "
            "pipeline_parallel",
            p->P, why);
    return EXIT_BAD_PARAMS;
  }
  int sc;
  if (stagekit_param_choice(ctx, h, "pipeline_schedule",
                            pipeline_schedule_names, &sc))
    return EXIT_BAD_PARAMS;
  p->sched = (pipeline_schedule)sc;
  if (r->c.device == ENGINE_WANT_AUTO && engine_built_with_cuda())
    h->log(ctx, DAGRUN_LOG_INFO,
           "device: auto is cpu with pipeline_parallel (GPU ranks do not "
           "run pipeline stages yet)");
  p->m = r->c.accum;
  return gangloop_threads(r, p->N);
}

/* The model's shape against P, the communicator and the stage. 0, or
 * the exit status (before the communicator: every rank fails alike). */
static int start(trainrun *r, pipe_run *p) {
  char err[2048];
  /* The loader draws each micro-batch's D x B rows, as a ZeRO gang's
   * and one process of batch_size D x B do; replica d keeps rows
   * [d B, (d + 1) B). */
  if (trainrun_setup(r, p->D, 0, ENGINE_CPU) != 0)
    return EXIT_FAILED;
  if (pipeline_check(gpt_get_config(r->model), p->P, p->N, err, sizeof err)) {
    r->h->fail(r->ctx, "%s", err);
    return EXIT_BAD_PARAMS;
  }
  if (gangloop_open_mpi(r, p->N, &p->c, &p->rank) != 0)
    return EXIT_FAILED;
  if (comm_split(p->c, p->rank / p->P, p->rank, &p->pc, err, sizeof err) ||
      comm_split(p->c, p->rank % p->P, p->rank, &p->dc, err, sizeof err))
    pipe_abort(r, p, "splitting the gang", err);
  pipeline_options o = {.micro = p->m,
                        .schedule = p->sched,
                        .B = r->c.B,
                        .T = r->c.m.T,
                        .opt = r->c.opt,
                        .recompute = (gpt_recompute)r->c.recompute,
                        .autocast = r->c.autocast,
                        .dp = p->dc};
  size_t n = (size_t)p->m * r->c.B * r->c.m.T;
  /* Rank 0's engine: the pre-flight loss and validation, on the whole
   * model it gathers, over the global batch's D x B rows. */
  engine_options eo = {.B = r->c.B * p->D, .T = r->c.m.T, .opt = r->c.opt};
  if (pipeline_create(p->pc, r->model, &o, &p->pl, err, sizeof err) != 0 ||
      (p->rank == 0 && engine_create(ENGINE_CPU, r->model, r->opt, &eo, &r->eng,
                                     err, sizeof err) != 0))
    pipe_abort(r, p, "pipeline", err);
  p->in = malloc(n * sizeof *p->in);
  p->tg = malloc(n * sizeof *p->tg);
  if (!p->in || !p->tg)
    pipe_abort(r, p, "pipeline", "out of memory for the step's batches");
  int first, last, s = pipeline_stage(p->pl, &first, &last);
  pipeline_stats st;
  pipeline_get_stats(p->pl, &st);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "pipeline: rank %d is stage %d of %d (layers %d-%d%s%s), "
            "schedule %s, %d micro-batches (grad_accum) of %d x %d, the "
            "activations of %d of them kept at most; data-parallel replica "
            "%d of %d (global batch %d x %d x %d = %d sequences); "
            "zero_stage ignored",
            p->rank, s, p->P, first, last - 1, s == 0 ? ", embeddings" : "",
            s == p->P - 1 ? ", head and loss" : "",
            pipeline_schedule_names[p->sched], p->m, r->c.B, r->c.m.T, st.slots,
            p->rank / p->P, p->D, p->D, r->c.B, p->m, p->D * r->c.B * p->m);
  return 0;
}

/* resume: every rank reads the whole checkpoint, the stage keeps its
 * part. */
static void resume(trainrun *r, pipe_run *p) {
  char err[2048];
  char *dir = trainrun_resume_dir(r);
  if (!dir)
    return;
  if (trainstate_load(dir, &r->st, err, sizeof err) != 0 ||
      pipeline_load(p->pl, r->opt, err, sizeof err) != 0) {
    char what[4200];
    snprintf(what, sizeof what, "resume from %s", dir);
    free(dir);
    pipe_abort(r, p, what, err);
  }
  if (p->rank == 0)
    r->h->log(r->ctx, DAGRUN_LOG_INFO, "resumed from %s at step %lld", dir,
              (long long)r->st.step);
  snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", dir);
  free(dir);
}

/* Rank 0's pre-flight loss, on the whole model (the same on every rank
 * before the first step). */
static void preflight(trainrun *r, pipe_run *p) {
  char err[2048];
  double loss = 0;
  trainrun_peek_batch(r);
  if (engine_loss(r->eng, r->inputs, r->targets, &loss, err, sizeof err))
    pipe_abort(r, p, "first forward pass", err);
  trainrun_report_init_loss(r, loss);
}

/* Every stage's weights (and with opt, optimizer state) to rank 0,
 * from replica 0 (the replicas hold the same weights). */
static void gather(trainrun *r, pipe_run *p, int opt) {
  char err[2048];
  if (p->rank < p->P &&
      pipeline_gather(p->pl, opt, p->rank == 0 ? r->opt : NULL, err,
                      sizeof err) != 0)
    pipe_abort(r, p, "gathering the model", err);
}

/* A one-process checkpoint of the gathered model, by rank 0. */
static int save(trainrun *r, pipe_run *p) {
  char err[2048];
  gather(r, p, 1);
  if (p->rank != 0)
    return 0;
  if (trainstate_save(r->ckpt_dir, &r->st, r->last_ckpt, sizeof r->last_ckpt,
                      err, sizeof err) != 0) {
    r->h->fail(r->ctx, "checkpoint: %s", err);
    return -1;
  }
  ckpt_prune(r->ckpt_dir, (int)r->c.keep);
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "checkpoint step %lld: %s",
            (long long)r->st.step, r->last_ckpt);
  return 0;
}

static int score(void *arg, trainrun *r, loader *ld, double *loss, char *err,
                 size_t errlen) {
  (void)arg;
  return engine_eval_loss(r->eng, ld, (uint64_t)r->c.eval_batches, loss, err,
                          errlen);
}

/* Validation by rank 0 on the gathered weights; NAN elsewhere. */
static double evaluate(trainrun *r, pipe_run *p, int64_t step) {
  gather(r, p, 0);
  if (p->rank != 0)
    return NAN;
  trainrun_lm_eval(r, r->model, step);
  return trainrun_validate(r, step, 1, score, NULL);
}

/* The guard's lr factor for this step's loss and norm (the same on every
 * rank): 0 skips the update. */
static double guard(trainrun *r, pipe_run *p, double loss, double gnorm) {
  double z = 0;
  if (!isfinite(loss) || !isfinite(gnorm))
    return 0;
  if (!r->c.spike_on)
    return 1;
  if (spike_check(&r->guard, loss, gnorm, &z)) {
    if (p->rank == 0)
      trainrun_spike_report(r, r->st.step, loss, gnorm, z, 1);
    if (r->c.spike.policy != SPIKE_LOWER_LR)
      return 0;
  }
  return spike_lr_factor(&r->guard);
}

/* The bubble line: this step's measured idle share beside the formula. */
static void log_bubble(trainrun *r, pipe_run *p, const char *when,
                       double idle) {
  pipeline_stats st;
  pipeline_get_stats(p->pl, &st);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "pipeline bubble (%s): %.1f%% of the stages' step time idle, "
            "measured; (p-1)/(m+p-1) = (%d-1)/(%d+%d-1) = %.1f%%",
            when, 100 * idle, p->P, p->m, p->P, 100 * st.formula);
}

static void train_step(trainrun *r, pipe_run *p) {
  char err[2048];
  size_t BT = (size_t)r->c.B * r->c.m.T, mine = (size_t)(p->rank / p->P) * BT;
  double t0 = clock_monotonic();
  for (int k = 0; k < p->m; k++) {
    loader_next(r->train, r->inputs, r->targets);
    memcpy(p->in + k * BT, r->inputs + mine, BT * sizeof *p->in);
    memcpy(p->tg + k * BT, r->targets + mine, BT * sizeof *p->tg);
  }
  double t_data = clock_monotonic() - t0, loss = 0, gnorm = 0;
  if (pipeline_forward_backward(p->pl, p->in, p->tg, &loss, err, sizeof err) ||
      pipeline_clip_grad_norm(p->pl, r->c.grad_clip, &gnorm, err, sizeof err))
    pipe_abort(r, p, "step", err);
  double t_fb = clock_monotonic();
  double lr = lr_at(&r->c.sched, r->st.step);
  double f = guard(r, p, loss, gnorm);
  if (f > 0)
    pipeline_step(p->pl, (float)(lr * f));
  double t_end = clock_monotonic();
  r->st.step++;
  r->st.tokens += r->tokens_per_step;
  r->last_loss = loss;
  pipeline_stats st;
  pipeline_get_stats(p->pl, &st);
  p->idle_sum += st.idle;
  p->nsteps++;
  if (p->rank != 0)
    return;
  trainrun_times times = {t_data, t_fb - t0 - t_data, 0, t_end - t_fb,
                          0,      t_end - t0};
  trainrun_report_step(r, loss, lr * f, gnorm, &times, p->N);
  r->h->metric(r->ctx, "pipeline_idle", st.idle, r->st.step);
  if (p->nsteps == 1)
    log_bubble(r, p, "first step", st.idle);
  trainrun_progress(r, loss, 1);
}

/* The steps, with validation and checkpoints on their cadences; a stop
 * request (agreed on by every rank) checkpoints and fails. 0 or -1. */
static int train_loop(trainrun *r, pipe_run *p) {
  char err[2048];
  trainrun_loop_start(r, (size_t)p->D * r->c.B * r->c.m.T * p->m);
  comm_stats_reset(p->c);
  comm_stats_reset(p->pc);
  comm_stats_reset(p->dc);
  while (r->st.step < r->c.steps) {
    float stop = r->h->cancelled(r->ctx) ? 1.0f : 0.0f;
    if (comm_allreduce_sum(p->c, &stop, 1, err, sizeof err) != 0)
      pipe_abort(r, p, "stop agreement", err);
    if (stop > 0) {
      if (save(r, p) == 0)
        r->h->fail(r->ctx, "stopped at step %lld; checkpoint %s",
                   (long long)r->st.step, r->last_ckpt);
      return -1;
    }
    train_step(r, p);
    int64_t s = r->st.step;
    if (r->c.eval_every && s % r->c.eval_every == 0 && s < r->c.steps) {
      r->val_loss = evaluate(r, p, s);
      if (p->rank == 0)
        r->h->log(r->ctx, DAGRUN_LOG_INFO,
                  "step %lld: loss %.4f, val loss %.4f", (long long)s,
                  r->last_loss, r->val_loss);
    }
    if (r->c.ckpt_every && s % r->c.ckpt_every == 0 && s < r->c.steps &&
        save(r, p) != 0)
      return -1;
  }
  return 0;
}

/* The final checkpoint and validation (collective), then rank 0's
 * results. The exit status. */
static int finish(trainrun *r, pipe_run *p) {
  double train_s = clock_monotonic() - r->t_start;
  comm_stats_add(p->c, &p->cs);
  comm_stats_add(p->pc, &p->cs);
  comm_stats_add(p->dc, &p->cs);
  if (p->nsteps && p->rank == 0)
    log_bubble(r, p, "mean over the steps", p->idle_sum / p->nsteps);
  r->val_loss = evaluate(r, p, r->st.step);
  if (save(r, p) != 0)
    return EXIT_FAILED;
  if (p->rank != 0)
    return 0;
  trainrun_samples(r, r->model);
  double tps = trainrun_tokens_per_s(r, train_s);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "done: %lld steps on %d pipeline stages x %d data-parallel "
            "replicas, %.0f tokens/s; loss %.4f, val loss %.4f",
            (long long)r->st.step, p->P, p->D, tps, r->last_loss, r->val_loss);
  cJSON *s = trainrun_summary_start(r, gpt_num_params(r->model));
  cJSON_AddNumberToObject(s, "world_size", p->N);
  cJSON_AddNumberToObject(s, "pipeline_parallel", p->P);
  cJSON_AddNumberToObject(s, "data_parallel", p->D);
  cJSON_AddStringToObject(s, "pipeline_schedule",
                          pipeline_schedule_names[p->sched]);
  if (p->nsteps)
    cJSON_AddNumberToObject(s, "pipeline_idle", p->idle_sum / p->nsteps);
  cJSON_AddStringToObject(s, "device", "cpu");
  trainrun_summary_losses(r, s);
  trainrun_summary_rates(r, s, tps);
  gangmem_comm(r, &p->cs, p->nsteps, s);
  return trainrun_finish(r, s, r->last_ckpt, r->ckpt_dir, NULL, NULL) == 0
             ? 0
             : EXIT_FAILED;
}

int pipeloop_run(trainrun *r, int N, int P) {
  pipe_run p = {.N = N, .P = P};
  int status = check_params(r, &p);
  if (status == 0)
    status = start(r, &p);
  if (status == 0) {
    trainrun_set_config(r);
    r->lnV = log((double)gpt_get_config(r->model)->vocab_size);
    resume(r, &p);
    /* The one-process optimizer over the whole model is rank 0's, for
     * the checkpoints it writes; the others needed it only to read one. */
    if (p.rank != 0) {
      optim_destroy(r->opt);
      r->opt = r->st.opt = NULL;
    }
    if (p.rank == 0 && r->st.step == 0)
      preflight(r, &p);
    status = train_loop(r, &p) == 0 ? finish(r, &p) : EXIT_FAILED;
  }
  pipeline_destroy(p.pl);
  comm_destroy(p.dc);
  comm_destroy(p.pc);
  comm_destroy(p.c);
  free(p.in);
  free(p.tg);
  return status;
}
