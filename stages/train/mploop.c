/* The train stage's model-parallel loop; see mploop.h. */
#include "mploop.h"
#include "gangloop.h"
#include "gangmem.h"
#include "mpmem.h"
#include "mpplace.h"

#include "ckpt/ckpt.h"
#include "common/stagekit.h"
#include "lib/clock.h"
#include "lib/exitcode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void mploop_abort(trainrun *r, mploop *l, const char *what,
                            const char *err) {
  gangloop_abort(r, l->c, l->rank, what, err);
}

/* ZeRO over the replicas of GPU ranks (gpu_ok) above the engine's
 * gpu_zero is not built: refused with device: cuda; device: auto keeps
 * CPU ranks, saying why. 0, or -1 having failed the task. */
static int check_gpu_zero(trainrun *r, mploop *l) {
  if (!l->gpu_ok || l->D == 1 || l->zero <= l->gpu_zero)
    return 0;
  if (r->c.device == ENGINE_WANT_CUDA) {
    r->h->fail(r->ctx,
               "zero_stage %d with %s %d on GPU ranks: ZeRO over the %d "
               "data-parallel replicas runs on CPU ranks only above "
               "zero_stage %d; set zero_stage: %d or device: cpu",
               l->zero, l->param, l->K, l->D, l->gpu_zero, l->gpu_zero);
    return -1;
  }
  if (r->c.device == ENGINE_WANT_AUTO && engine_built_with_cuda())
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "device: auto is cpu with zero_stage %d over %d replicas of "
              "%s (ZeRO beside %s runs on CPU ranks only above zero_stage "
              "%d; zero_stage: %d takes the GPUs)",
              l->zero, l->D, l->what, l->param, l->gpu_zero, l->gpu_zero);
  l->gpu_ok = 0;
  return 0;
}

int mploop_check(trainrun *r, mploop *l) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  if (!l->N || !gangloop_launched_by_mpi()) {
    h->fail(ctx,
            "%s %d needs a gang of %d CPU ranks: set world_size: %d and "
            "launcher: mpirun (or srun) on this task",
            l->param, l->K, l->K, l->K);
    return EXIT_BAD_PARAMS;
  }
  if (l->N % l->K != 0) {
    h->fail(ctx,
            "world_size %d is not a multiple of %s %d (the gang is "
            "data-parallel replicas of %s %s each)",
            l->N, l->param, l->K, l->param, l->part);
    return EXIT_BAD_PARAMS;
  }
  l->D = l->N / l->K;
  l->gpu = r->c.device == ENGINE_WANT_CUDA && l->gpu_ok;
  const char *why = r->c.device == ENGINE_WANT_CUDA && !l->gpu ? "device: cuda"
                    : r->c.dropout > 0                         ? "dropout"
                    : r->c.overfit ? "overfit_one_batch"
                                   : NULL;
  if (why) {
    h->fail(ctx,
            "%s %d runs on CPU ranks without %s (not supported with it "
            "yet): leave it out, or train without %s",
            l->param, l->K, why, l->param);
    return EXIT_BAD_PARAMS;
  }
  if (stagekit_param_choice(ctx, h, "zero_stage", trainrun_zero_stage_names,
                            &l->zero))
    return EXIT_BAD_PARAMS;
  if (r->c.device == ENGINE_WANT_AUTO && engine_built_with_cuda() && !l->gpu_ok)
    h->log(ctx, DAGRUN_LOG_INFO,
           "device: auto is cpu with %s (GPU ranks do not run %s yet)",
           l->param, l->what);
  if (check_gpu_zero(r, l) != 0)
    return EXIT_BAD_PARAMS;
  l->m = r->c.accum;
  return gangloop_threads(r, l->N);
}

/* GPU ranks: the device the gang agrees on and, on GPUs, the NCCL gang
 * and its splits. 0, or the exit status. */
static int open_gpu(trainrun *r, mploop *l) {
  char err[2048];
  engine_device dev = ENGINE_CPU;
  if (gangloop_pick_device(r, l->c, l->N, l->rank, &dev) != 0)
    return EXIT_BAD_PARAMS;
  if (dev != ENGINE_CUDA)
    return 0;
  l->gpu = 1;
  comm_config nccfg = {.backend = COMM_NCCL, .device = -1};
  if (comm_create(&nccfg, &l->nc, err, sizeof err) != 0)
    mploop_abort(r, l, "NCCL", err);
  l->device = comm_device(l->nc);
  if (comm_split(l->nc, l->pos / l->K, l->pos, &l->nkc, err, sizeof err) ||
      comm_split(l->nc, l->pos % l->K, l->pos, &l->ndc, err, sizeof err))
    mploop_abort(r, l, "splitting the NCCL gang", err);
  return 0;
}

/* This rank's position in the layout (mpplace.h), rank 0's line of
 * the placement. 0, or EXIT_BAD_PARAMS on every rank alike. */
static int place(trainrun *r, mploop *l) {
  char err[2048], line[2048];
  if (mpplace_position(l->c, l->T > 1 ? l->T : 1, &l->pos, line, sizeof line,
                       err, sizeof err) != 0) {
    r->h->fail(r->ctx, "%s", err);
    return EXIT_BAD_PARAMS;
  }
  if (l->rank == 0)
    r->h->log(r->ctx, DAGRUN_LOG_INFO, "%s", line);
  return 0;
}

int mploop_open(trainrun *r, mploop *l,
                int (*fits)(void *arg, const gpt_config *cfg, int N, char *err,
                            size_t errlen),
                void *arg) {
  char err[2048];
  /* The loader draws each micro-batch's D x B rows, as a ZeRO gang's
   * and one process of batch_size D x B do; replica d keeps rows
   * [d B, (d + 1) B). */
  if (trainrun_setup(r, l->D, 0) != 0)
    return EXIT_FAILED;
  if (fits(arg, gpt_get_config(r->model), l->N, err, sizeof err)) {
    r->h->fail(r->ctx, "%s", err);
    return EXIT_BAD_PARAMS;
  }
  if (gangloop_open_mpi(r, l->N, &l->c, &l->rank) != 0)
    return EXIT_FAILED;
  int status = place(r, l);
  if (status != 0)
    return status;
  if (comm_split(l->c, l->pos / l->K, l->pos, &l->kc, err, sizeof err) ||
      comm_split(l->c, l->pos % l->K, l->pos, &l->dc, err, sizeof err))
    mploop_abort(r, l, "splitting the gang", err);
  int st = l->gpu_ok ? open_gpu(r, l) : 0;
  if (st != 0)
    return st;
  size_t n = (size_t)l->m * r->c.B * r->c.m.T;
  /* Rank 0's engine: the pre-flight loss and validation, on the whole
   * model it gathers, over the global batch's D x B rows. */
  engine_options eo = {.B = r->c.B * l->D, .T = r->c.m.T, .opt = r->c.opt};
  if (l->rank == 0 && engine_create(ENGINE_CPU, r->model, r->opt, &eo, &r->eng,
                                    err, sizeof err) != 0)
    mploop_abort(r, l, l->what, err);
  l->in = malloc(n * sizeof *l->in);
  l->tg = malloc(n * sizeof *l->tg);
  if (!l->in || !l->tg)
    mploop_abort(r, l, l->what, "out of memory for the step's batches");
  return 0;
}

void mploop_log_memory(trainrun *r, mploop *l, const zslice_memory *m) {
  const double MiB = 1024.0 * 1024.0;
  int z3 = l->D > 1 && l->zero == 3; /* the parameters sharded too */
  l->held = *m;                      /* for summary.json's between_steps */
  l->held_set = 1;
  char pp[64] = "";
  if (z3)
    snprintf(pp, sizeof pp, " (%.3f MiB at most in a step)",
             (double)m->peak_params / MiB);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "rank %d holds %.3f MiB of parameters%s, %.3f MiB of gradients "
            "(%.3f MiB at most in a step) and %.3f MiB of optimizer state "
            "between steps (zero_stage %d over %d data-parallel replicas)",
            l->rank, (double)m->params / MiB, pp, (double)m->grads / MiB,
            (double)m->peak_grads / MiB, (double)m->optim / MiB,
            l->D > 1 ? l->zero : 0, l->D);
  const uint64_t mine[2] = {m->peak_params, m->peak_grads},
                 two[2] = {m->stage2_params, m->stage2_grads};
  for (int k = 0; z3 && k < 2; k++)
    if (mine[k] >= two[k])
      r->h->log(r->ctx, DAGRUN_LOG_WARN,
                "rank %d: zero_stage 3's %s at most in a step (%.3f MiB: "
                "its slice and %s) are no better than zero_stage 2's %.3f "
                "MiB for this model",
                l->rank, k ? "gradients" : "parameters", (double)mine[k] / MiB,
                l->z3_in_step ? l->z3_in_step : "the groups in use at once",
                (double)two[k] / MiB);
}

void mploop_close(mploop *l) {
  comm_destroy(l->ndc);
  comm_destroy(l->nkc);
  comm_destroy(l->nc);
  comm_destroy(l->dc);
  comm_destroy(l->kc);
  comm_destroy(l->c);
  free(l->in);
  free(l->tg);
  free(l->mem);
}

/* resume: every rank reads the whole checkpoint, the engine keeps its
 * part. */
static void resume(trainrun *r, mploop *l) {
  char err[2048];
  char *dir = trainrun_resume_dir(r);
  if (!dir)
    return;
  if ((strcmp(r->c.resume, "auto") != 0 &&
       trainrun_verify_resume(dir, err, sizeof err) != 0) ||
      trainstate_load(dir, &r->st, err, sizeof err) != 0 ||
      trainrun_check_resumed(r, dir, err, sizeof err) != 0 ||
      l->eng.load(l->eng.e, r->opt, err, sizeof err) != 0) {
    char what[4200];
    snprintf(what, sizeof what, "resume from %s", dir);
    free(dir);
    mploop_abort(r, l, what, err);
  }
  if (l->rank == 0)
    r->h->log(r->ctx, DAGRUN_LOG_INFO, "resumed from %s at step %lld", dir,
              (long long)r->st.step);
  snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", dir);
  free(dir);
}

/* Rank 0's pre-flight loss, on the whole model (the same on every rank
 * before the first step). */
static void preflight(trainrun *r, mploop *l) {
  char err[2048];
  double loss = 0;
  trainrun_peek_batch(r);
  if (engine_loss(r->eng, r->inputs, r->targets, &loss, err, sizeof err))
    mploop_abort(r, l, "first forward pass", err);
  trainrun_report_init_loss(r, loss);
}

/* Every part's weights (and with opt, optimizer state) to rank 0, from
 * replica 0 (the replicas hold the same weights; with ZeRO the other
 * replicas send their slices of the state to it, and every rank takes
 * part). */
static void gather(trainrun *r, mploop *l, int opt) {
  char err[2048];
  if (l->eng.gather(l->eng.e, opt, l->rank == 0 ? r->opt : NULL, err,
                    sizeof err) != 0)
    mploop_abort(r, l, "gathering the model", err);
}

/* A one-process checkpoint of the gathered model, by rank 0; 0 on every
 * rank, or -1 on every rank (the task failed with rank 0's reason) when
 * rank 0 could not write it. */
static int save(trainrun *r, mploop *l) {
  char err[2048], why[2048] = "";
  gather(r, l, 1);
  if (l->rank == 0 &&
      trainstate_save(r->ckpt_dir, &r->st, r->last_ckpt, sizeof r->last_ckpt,
                      why, sizeof why) != 0 &&
      !why[0])
    snprintf(why, sizeof why, "not written");
  /* Rank 0's outcome to all: told nothing, the others would go on into
   * the next step's collectives and wait there for rank 0 until the
   * communicator's timeout (300 s); each fails with rank 0's words, so
   * that whichever rank's exit the gang reports first says why. */
  if (comm_broadcast(l->c, why, sizeof why, 0, err, sizeof err) != 0)
    mploop_abort(r, l, "agreeing on the checkpoint", err);
  if (why[0]) {
    r->h->fail(r->ctx, "checkpoint: %s", why);
    return -1;
  }
  if (l->rank != 0)
    return 0;
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
static double evaluate(trainrun *r, mploop *l, int64_t step) {
  gather(r, l, 0);
  if (l->rank != 0)
    return NAN;
  trainrun_lm_eval(r, r->model, step);
  return trainrun_validate(r, step, 1, score, NULL);
}

/* The guard's lr factor for this step's loss and norm (the same on every
 * rank): 0 skips the update. */
static double guard(trainrun *r, mploop *l, double loss, double gnorm) {
  double z = 0;
  if (!isfinite(loss) || !isfinite(gnorm))
    return 0;
  if (!r->c.spike_on)
    return 1;
  if (spike_check(&r->guard, loss, gnorm, &z)) {
    if (l->rank == 0)
      trainrun_spike_report(r, r->st.step, loss, gnorm, z, 1);
    if (r->c.spike.policy != SPIKE_LOWER_LR)
      return 0;
  }
  return spike_lr_factor(&r->guard);
}

/* What one process would hold training the same micro-batch, the
 * memory report's yardstick. */
static void one_process(trainrun *r, gpt_memory *one) {
  gpt_memory_estimate(gpt_get_config(r->model), r->c.B, r->c.m.T,
                      (int)optim_state_floats_for(r->c.opt.kind, 1),
                      (gpt_recompute)r->c.recompute, one);
}

/* After the run's first step: every rank's memory figures (mpmem.h) to
 * rank 0, which logs them and keeps them for summary.json. */
static void memory(trainrun *r, mploop *l) {
  char err[512];
  if (!l->eng.memory)
    return;
  gpt_memory part;
  int in_model = 0;
  uint64_t step_bytes = 0;
  l->eng.memory(l->eng.arg, &part, &in_model, &step_bytes);
  mpmem_rank mine;
  mpmem_measure(r->model, l->rank == 0 ? r->opt : NULL, &part, in_model,
                step_bytes, l->held_set ? &l->held : NULL, &mine);
  if (!l->mem && !(l->mem = calloc((size_t)l->N, sizeof *l->mem)))
    mploop_abort(r, l, "memory figures", "out of memory");
  if (mpmem_gather(l->c, &mine, l->mem, err, sizeof err) != 0)
    mploop_abort(r, l, "memory figures", err);
  if (l->rank != 0)
    return;
  gpt_memory one;
  one_process(r, &one);
  mpmem_log(r, l->mem, l->N, &one);
}

static void train_step(trainrun *r, mploop *l) {
  char err[2048];
  size_t BT = (size_t)r->c.B * r->c.m.T, mine = (size_t)(l->pos / l->K) * BT;
  double t0 = clock_monotonic();
  for (int k = 0; k < l->m; k++) {
    loader_next(r->train, r->inputs, r->targets);
    memcpy(l->in + k * BT, r->inputs + mine, BT * sizeof *l->in);
    memcpy(l->tg + k * BT, r->targets + mine, BT * sizeof *l->tg);
  }
  double t_data = clock_monotonic() - t0, loss = 0, gnorm = 0;
  int first = r->st.step == r->first_step;
  if (first)
    mpmem_step_start();
  if (l->eng.fb(l->eng.e, l->in, l->tg, &loss, err, sizeof err) ||
      l->eng.clip(l->eng.e, r->c.grad_clip, &gnorm, err, sizeof err))
    mploop_abort(r, l, "step", err);
  double t_fb = clock_monotonic();
  double lr = lr_at(&r->c.sched, r->st.step);
  double f = guard(r, l, loss, gnorm);
  /* Every rank has the step's loss and norm: they stop together. */
  if (trainrun_count_step(r, r->st.step + 1, loss, gnorm, l->rank == 0, err,
                          sizeof err) != 0)
    mploop_abort(r, l, "step", err);
  if (f > 0)
    l->eng.step(l->eng.e, (float)(lr * f));
  double t_end = clock_monotonic();
  r->st.step++;
  r->st.tokens += r->tokens_per_step;
  r->last_loss = loss;
  l->nsteps++;
  if (l->rank == 0) {
    trainrun_times times = {t_data, t_fb - t0 - t_data, 0, t_end - t_fb,
                            0,      t_end - t0};
    trainrun_report_step(r, loss, lr * f, gnorm, &times, l->N);
  }
  if (l->eng.stepped)
    l->eng.stepped(l->eng.arg, r, l->rank);
  if (first)
    memory(r, l);
  if (l->rank == 0)
    trainrun_progress(r, loss, 1);
}

/* Over every communicator of the layout (the loop's and the engine's
 * own): their counters added into sum, or reset when sum is NULL. */
static void comm_traffic(mploop *l, comm_stats *sum) {
  comm *all[] = {l->c,   l->kc, l->dc,      l->nkc,
                 l->ndc, l->nc, l->more[0], l->more[1]};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    if (!all[i])
      continue;
    if (sum)
      comm_stats_add(all[i], sum);
    else
      comm_stats_reset(all[i]);
  }
}

/* The steps, with validation and checkpoints on their cadences; a stop
 * request (agreed on by every rank) checkpoints and fails. 0 or -1. */
static int train_loop(trainrun *r, mploop *l) {
  char err[2048];
  trainrun_loop_start(r, (size_t)l->D * r->c.B * r->c.m.T * l->m);
  comm_traffic(l, NULL);
  while (r->st.step < r->c.steps) {
    float stop = r->h->cancelled(r->ctx) ? 1.0f : 0.0f;
    if (comm_allreduce_sum(l->c, &stop, 1, err, sizeof err) != 0)
      mploop_abort(r, l, "stop agreement", err);
    if (stop > 0) {
      if (save(r, l) == 0)
        r->h->fail(r->ctx, "stopped at step %lld; checkpoint %s",
                   (long long)r->st.step, r->last_ckpt);
      return -1;
    }
    train_step(r, l);
    int64_t s = r->st.step;
    if (r->c.eval_every && s % r->c.eval_every == 0 && s < r->c.steps) {
      r->val_loss = evaluate(r, l, s);
      if (l->rank == 0)
        r->h->log(r->ctx, DAGRUN_LOG_INFO,
                  "step %lld: loss %.4f, val loss %.4f", (long long)s,
                  r->last_loss, r->val_loss);
    }
    if (r->c.ckpt_every && s % r->c.ckpt_every == 0 && s < r->c.steps &&
        save(r, l) != 0)
      return -1;
  }
  return 0;
}

/* The final validation and checkpoint (collective), then rank 0's
 * results. The exit status. */
static int finish(trainrun *r, mploop *l) {
  double train_s = clock_monotonic() - r->t_start;
  comm_traffic(
      l, &l->cs); /* the steps', before validation's and the checkpoint's */
  r->val_loss = evaluate(r, l, r->st.step);
  if (save(r, l) != 0)
    return EXIT_FAILED;
  if (l->rank != 0)
    return 0;
  if (trainrun_check_end(r) != 0)
    return EXIT_FAILED;
  trainrun_samples(r, r->model);
  double tps = trainrun_tokens_per_s(r, train_s);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "done: %lld steps on %d %s x %d data-parallel replicas, %.0f "
            "tokens/s; loss %.4f, val loss %.4f",
            (long long)r->st.step, l->K, l->what, l->D, tps, r->last_loss,
            r->val_loss);
  cJSON *s = trainrun_summary_start(r, gpt_num_params(r->model));
  cJSON_AddNumberToObject(s, "world_size", l->N);
  cJSON_AddNumberToObject(s, "data_parallel", l->D);
  cJSON_AddNumberToObject(s, "zero_stage", l->D > 1 ? l->zero : 0);
  if (l->eng.summary)
    l->eng.summary(l->eng.arg, r, s);
  cJSON_AddStringToObject(s, "device", l->gpu ? "cuda" : "cpu");
  trainrun_summary_losses(r, s);
  trainrun_summary_rates(r, s, tps);
  gangmem_comm(r, &l->cs, l->nsteps, s);
  if (l->mem) {
    gpt_memory one;
    one_process(r, &one);
    mpmem_summary(l->mem, l->N, &one, s);
  }
  return trainrun_finish(r, s, r->last_ckpt, r->ckpt_dir, NULL, NULL) == 0
             ? 0
             : EXIT_FAILED;
}

int mploop_train(trainrun *r, mploop *l) {
  trainrun_set_config(r);
  r->lnV = log((double)gpt_get_config(r->model)->vocab_size);
  resume(r, l);
  /* The one-process optimizer over the whole model is rank 0's, for the
   * checkpoints it writes; the others needed it only to read one. */
  if (l->rank != 0) {
    optim_destroy(r->opt);
    r->opt = r->st.opt = NULL;
    /* Likewise the whole model's weights, where the engine keeps its
     * part in arrays of its own: only rank 0 gathers into them. */
    if (l->eng.own_params)
      gpt_release(r->model, GPT_BUF_PARAMS);
  }
  if (l->rank == 0 && r->st.step == 0)
    preflight(r, l);
  return train_loop(r, l) == 0 ? finish(r, l) : EXIT_FAILED;
}
