/*
 * train: the built-in stage that trains a GPT on the tokenize stage's
 * token files with dagrun's engine (gpu/), on the CPU or, with device:
 * cuda (or auto where there is a GPU), on one GPU (engine.h).
 *
 *   train:
 *     stage: train
 *     needs: [tokenize]
 *     with: {data: "${tasks.tokenize.outputs.dir}", model: gpt-tiny,
 *            steps: 2000}
 *
 * Checkpoints go to <task>/checkpoints/ every checkpoint_every steps, at
 * the end, and when the task is stopped (timeout, Ctrl-C: SIGTERM), so
 * that a retried attempt with resume: auto continues where the last one
 * stopped: the same bits as if it had never stopped. Validation runs
 * every eval_every steps; samples of generated text go to out/.
 *
 * In a gang (launcher: mpirun or srun) it trains data-parallel with ZeRO
 * (gpu/zero/zero.h; on GPU ranks gpu/zero/zero_cuda.h): see run_gang
 * below.
 */
#include <dagrun/plugin.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "common/stagekit.h"
#include "common/textgen.h"
#include "common/tokdata.h"
#include "common/trainkit.h"
#include "data/dataloader.h"
#include "data/tokfile.h"
#include "engine.h"
#include "lib/bpe/bpe.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "model/evaluate.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "optim/spike.h"
#include "trainstate.h"
#include "zero/zero.h"
#include "zero/zero_cuda.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static const dagrun_param_spec params[] = {
    TRAINKIT_MODEL_PARAMS,
    {"batch_size", DAGRUN_PARAM_INT, "16", 0, "Sequences per micro-batch"},
    {"grad_accum", DAGRUN_PARAM_INT, "1", 0,
     "Micro-batches per optimizer step (global batch = batch_size x this)"},
    {"steps", DAGRUN_PARAM_INT, "1000", 0, "Optimizer steps"},
    TRAINKIT_OPTIM_PARAMS,
    {"lr", DAGRUN_PARAM_FLOAT, "0", 0,
     "Peak learning rate (0: 1e-3 for adamw, 1e-4 for lion)"},
    {"min_lr", DAGRUN_PARAM_FLOAT, "-1", 0,
     "Final learning rate (-1: lr / 10)"},
    {"warmup", DAGRUN_PARAM_INT, "-1", 0,
     "Linear warmup steps (-1: 5% of steps)"},
    {"schedule", DAGRUN_PARAM_STRING, "cosine", 0,
     "After warmup: cosine, linear, or constant (with cooldown)"},
    {"cooldown", DAGRUN_PARAM_INT, "0", 0,
     "schedule constant: final steps decaying linearly to min_lr"},
    {"seed", DAGRUN_PARAM_INT, "1234", 0,
     "Seed of the initial weights, the data order and the samples"},
    {"eval_every", DAGRUN_PARAM_INT, "100", 0,
     "Validation every this many steps (0: only at the end)"},
    {"eval_batches", DAGRUN_PARAM_INT, "20", 0,
     "Validation batches (at most one pass over the validation shards)"},
    {"checkpoint_every", DAGRUN_PARAM_INT, "500", 0,
     "Checkpoint every this many steps (0: only at the end and on stop)"},
    {"keep_checkpoints", DAGRUN_PARAM_INT, "3", 0,
     "Checkpoints kept in <task>/checkpoints"},
    {"resume", DAGRUN_PARAM_STRING, "auto", 0,
     "auto (latest valid checkpoint of this task, if any), never, or a "
     "checkpoint directory"},
    {"spike_policy", DAGRUN_PARAM_STRING, "skip", 0,
     "Loss-spike guard: none, skip, lower_lr, reset or rollback"},
    {"spike_threshold", DAGRUN_PARAM_FLOAT, "6", 0,
     "z-score of loss or grad norm over the recent window that is a spike"},
    {"spike_window", DAGRUN_PARAM_INT, "50", 0, "Steps in that window"},
    {"spike_min_rise", DAGRUN_PARAM_FLOAT, "0.3", 0,
     "...and at least this fraction above the window's mean (0.3 = 30%)"},
    {"overfit_one_batch", DAGRUN_PARAM_BOOL, "false", 0,
     "Sanity check: train on one batch; fail unless its loss falls below "
     "overfit_target"},
    {"overfit_target", DAGRUN_PARAM_FLOAT, "0.1", 0,
     "overfit_one_batch: the loss to reach"},
    {"threads", DAGRUN_PARAM_INT, "0", 0, "CPU threads (0: one per CPU)"},
    {"prefetch", DAGRUN_PARAM_INT, "2", 0,
     "Train batches the loader's thread prepares ahead (0: made on the "
     "training thread)"},
    {"peak_tflops", DAGRUN_PARAM_FLOAT, "0", 0,
     "The hardware's peak TFLOP/s, for the mfu metric (0: unknown, no mfu); "
     "in a gang, one rank's"},
    {"samples", DAGRUN_PARAM_INT, "3", 0,
     "Texts generated at the end, into out/samples.txt"},
    {"sample_prompt", DAGRUN_PARAM_STRING, "", 0,
     "Prompt of the samples (empty: start of a document)"},
    {"sample_tokens", DAGRUN_PARAM_INT, "64", 0, "Tokens per sample"},
    {"temperature", DAGRUN_PARAM_FLOAT, "0.8", 0, "Sampling temperature"},
    {"top_k", DAGRUN_PARAM_INT, "40", 0, "Sample among the k likeliest"},
    {"device", DAGRUN_PARAM_STRING, "auto", 0,
     "cpu, cuda (BF16 compute, FP32 master weights and optimizer state; in "
     "a gang, one GPU per rank over NCCL), or auto (cuda when dagrun has "
     "CUDA and a GPU is present, in a gang on every rank, else cpu)"},
    {"recompute", DAGRUN_PARAM_STRING, "none", 0,
     "device cuda: activation recomputation to save memory: none, gelu (the "
     "MLP's GELU output) or block (each block's forward again in backward); "
     "the CPU engine keeps every activation and ignores it"},
    {"deterministic", DAGRUN_PARAM_BOOL, "false", 0,
     "device cuda: fixed-order reductions, so that two runs with one seed "
     "give the same bits (the CPU engine always is)"},
    {"zero_stage", DAGRUN_PARAM_INT, "1", 0,
     "In a gang (launcher: mpirun or srun): ZeRO stage 0 (plain data "
     "parallel), 1 (optimizer state sharded), 2 (+ gradients), 3 (+ "
     "parameters, gathered a layer at a time); ignored by one process"},
    {"zero_bucket", DAGRUN_PARAM_INT, "0", 0,
     "In a gang at stages 0-1: floats in a gradient bucket, all-reduced "
     "while backward goes on (0: 1048576). Stages 2-3 reduce a layer "
     "(group) at a time"},
    {NULL, 0, NULL, 0, NULL},
};

/* The params with a fixed set of values. Each array is also what read_cfg
 * maps the value with, so the check and the meaning cannot drift. */
static const char *const schedule_names[] = {[LR_COSINE] = "cosine",
                                             [LR_LINEAR] = "linear",
                                             [LR_CONSTANT] = "constant",
                                             [LR_CONSTANT + 1] = NULL};
/* "none", then the spike guard's policies shifted by one. */
static const char *const spike_policy_names[] = {
    "none",
    [SPIKE_SKIP + 1] = "skip",
    [SPIKE_LOWER_LR + 1] = "lower_lr",
    [SPIKE_RESET + 1] = "reset",
    [SPIKE_ROLLBACK + 1] = "rollback",
    [SPIKE_ROLLBACK + 2] = NULL};
/* ZeRO's stages (zero.h): the value is the stage. */
static const char *const zero_stage_names[] = {"0", "1", "2", "3", NULL};

/* clang-format off */
static const dagrun_param_choice choices[] = {
    TRAINKIT_MODEL_CHOICES,
    TRAINKIT_OPTIM_CHOICES,
    {"schedule", schedule_names},
    {"spike_policy", spike_policy_names},
    {"device", engine_device_names},
    {"recompute", engine_recompute_names},
    {"zero_stage", zero_stage_names},
    {NULL, NULL},
};
/* clang-format on */

typedef struct cfg {
  trainkit_model m; /* data, model, shape, seq_len, init_from */
  const char *resume, *prompt;
  int B, accum, threads, top_k, nsamples, sample_tokens;
  int prefetch;
  double peak_tflops;
  int64_t steps, eval_every, eval_batches, ckpt_every, keep;
  optim_config opt;
  lr_schedule sched;
  double grad_clip, temperature, overfit_target;
  uint64_t seed;
  int spike_on, overfit;
  spike_config spike;
  engine_want device;
  engine_recompute recompute;
  int deterministic;
} cfg;

typedef struct run_ctx {
  dagrun_ctx *ctx;
  const dagrun_host *h;
  cfg c;
  tokdata data; /* the token files and the tokenizer */
  char *init_dir; /* init_from's model directory, resolved; NULL if none */
  gpt *model;
  optim *opt;
  engine *eng; /* one process: the step on the CPU or the GPU (engine.h) */
  loader *train, *val;
  loader_pos val_start;
  spike_guard guard;
  train_state st;
  char ckpt_dir[4096];
  char last_ckpt[4096];
  uint32_t *inputs, *targets;
} run_ctx;

/* ---- Params ---- */

static int read_cfg(dagrun_ctx *ctx, const dagrun_host *h, cfg *c) {
  memset(c, 0, sizeof *c);
  int64_t v;
  if (trainkit_read_model(ctx, h, &c->m) != 0 ||
      trainkit_read_optim(ctx, h, &c->opt, &c->grad_clip) != 0)
    return -1;
  h->param_string(ctx, "resume", &c->resume);
  h->param_string(ctx, "sample_prompt", &c->prompt);
  if (stagekit_param_int(ctx, h, "batch_size", 1, 1 << 20, &v))
    return -1;
  c->B = (int)v;
  if (stagekit_param_int(ctx, h, "grad_accum", 1, 1 << 20, &v))
    return -1;
  c->accum = (int)v;
  if (stagekit_param_int(ctx, h, "steps", 1, INT64_C(1) << 40, &c->steps) ||
      stagekit_param_int(ctx, h, "eval_every", 0, INT64_C(1) << 40, &c->eval_every) ||
      stagekit_param_int(ctx, h, "eval_batches", 1, INT64_C(1) << 30, &c->eval_batches) ||
      stagekit_param_int(ctx, h, "checkpoint_every", 0, INT64_C(1) << 40, &c->ckpt_every) ||
      stagekit_param_int(ctx, h, "keep_checkpoints", 1, 1000, &c->keep))
    return -1;
  if (stagekit_param_int(ctx, h, "threads", 0, 1024, &v))
    return -1;
  c->threads = v ? (int)v : (int)stagekit_cpu_count();
  if (stagekit_param_int(ctx, h, "prefetch", 0, 1024, &v))
    return -1;
  c->prefetch = (int)v;
  h->param_float(ctx, "peak_tflops", &c->peak_tflops);
  if (!(c->peak_tflops >= 0) || isinf(c->peak_tflops)) {
    h->fail(ctx, "peak_tflops must be 0 (unknown) or a positive number");
    return -1;
  }
  if (stagekit_param_int(ctx, h, "seed", 0, INT64_MAX, &v))
    return -1;
  c->seed = (uint64_t)v;

  double lr, min_lr;
  h->param_float(ctx, "lr", &lr);
  h->param_float(ctx, "min_lr", &min_lr);
  if (lr == 0)
    lr = trainkit_default_lr(c->opt.kind);
  if (!(lr > 0 && lr < 10)) {
    h->fail(ctx, "lr must be in (0,10)");
    return -1;
  }

  int64_t warmup, cooldown;
  if (stagekit_param_int(ctx, h, "warmup", -1, INT64_C(1) << 40, &warmup) ||
      stagekit_param_int(ctx, h, "cooldown", 0, INT64_C(1) << 40, &cooldown))
    return -1;
  c->sched.max_lr = lr;
  c->sched.min_lr = min_lr < 0 ? lr / 10 : min_lr;
  c->sched.warmup_steps = warmup < 0 ? c->steps / 20 : warmup;
  c->sched.total_steps = c->steps;
  c->sched.cooldown_steps = cooldown;
  int k;
  if (stagekit_param_choice(ctx, h, "schedule", schedule_names, &k))
    return -1;
  c->sched.decay = (lr_decay)k;
  if (c->sched.min_lr > lr) {
    h->fail(ctx, "min_lr %g is above lr %g", c->sched.min_lr, lr);
    return -1;
  }

  if (stagekit_param_choice(ctx, h, "spike_policy", spike_policy_names, &k))
    return -1;
  c->spike_on = k > 0;
  c->spike.policy = (spike_policy)(k > 0 ? k - 1 : 0);
  int64_t window;
  if (stagekit_param_int(ctx, h, "spike_window", 2, SPIKE_MAX_WINDOW, &window))
    return -1;
  c->spike.window = (int)window;
  c->spike.min_history = (int)(window < 20 ? window : 20);
  h->param_float(ctx, "spike_threshold", &c->spike.threshold);
  h->param_float(ctx, "spike_min_rise", &c->spike.min_rise);
  c->spike.lr_factor = 0.1;
  c->spike.lr_steps = 100;

  if (stagekit_param_choice(ctx, h, "device", engine_device_names, &k))
    return -1;
  c->device = (engine_want)k;
  if (stagekit_param_choice(ctx, h, "recompute", engine_recompute_names, &k))
    return -1;
  c->recompute = (engine_recompute)k;
  h->param_bool(ctx, "deterministic", &c->deterministic);

  h->param_bool(ctx, "overfit_one_batch", &c->overfit);
  h->param_float(ctx, "overfit_target", &c->overfit_target);
  if (stagekit_param_int(ctx, h, "samples", 0, 100, &v))
    return -1;
  c->nsamples = (int)v;
  if (stagekit_param_int(ctx, h, "sample_tokens", 1, 1 << 20, &v))
    return -1;
  c->sample_tokens = (int)v;
  if (stagekit_param_int(ctx, h, "top_k", 0, 1 << 30, &v))
    return -1;
  c->top_k = (int)v;
  h->param_float(ctx, "temperature", &c->temperature);
  if (!(c->temperature > 0)) {
    h->fail(ctx, "temperature must be above 0");
    return -1;
  }
  return 0;
}

/* Unigram entropy (nats) of the train tokens: the loss of a model that
 * knows only token frequencies. The trained model must end well below. */
static double unigram_entropy(run_ctx *r, uint64_t *ntokens) {
  uint32_t V = (uint32_t)r->c.m.cfg.vocab_size;
  uint64_t *count = calloc(V, sizeof *count), total = 0;
  if (!count)
    return NAN;
  for (size_t i = 0; i < r->data.ntrain; i++) {
    tokfile *f = NULL;
    char err[512];
    if (tokfile_open(r->data.train[i], &f, err, sizeof err) != 0)
      continue;
    const tokfile_info *in = tokfile_header(f);
    const void *t = tokfile_tokens(f);
    for (uint64_t k = 0; k < in->n_tokens; k++) {
      uint32_t id = tokfile_get(t, in->token_bytes, k);
      if (id < V) {
        count[id]++;
        total++;
      }
    }
    tokfile_close(f);
  }
  double H = 0;
  for (uint32_t v = 0; v < V; v++)
    if (count[v]) {
      double p = (double)count[v] / (double)total;
      H -= p * log(p);
    }
  free(count);
  *ntokens = total;
  return H;
}

/* ---- Fault injection ----
 * DAGRUN_FAULT_SPIKE_STEPS="80,120" turns the batches of those steps into
 * bad ones (loss x20, gradients x100), once each, so that tests can
 * provoke the loss-spike guard's policies, as SQLite's fault tests do. */
#define MAX_FAULTS 16

typedef struct faults {
  int64_t step[MAX_FAULTS];
  int n;
} faults;

static void faults_read(faults *f) {
  const char *z = getenv("DAGRUN_FAULT_SPIKE_STEPS");
  f->n = 0;
  while (z && *z && f->n < MAX_FAULTS) {
    char *end;
    long long v = strtoll(z, &end, 10);
    if (end == z)
      break;
    f->step[f->n++] = v;
    z = *end == ',' ? end + 1 : end;
  }
}

/* Whether step is a listed one not yet used; uses it. */
static int faults_take(faults *f, int64_t step) {
  for (int i = 0; i < f->n; i++)
    if (f->step[i] == step) {
      f->step[i] = f->step[--f->n];
      return 1;
    }
  return 0;
}

/* ---- Pieces of the loop ---- */

/* Validation loss over the first eval_batches batches of the
 * validation files (the same ones every time); NAN when there is no
 * validation or it failed (logged). */
/* A validation's result: its loss as the metric, or the failure logged
 * and NAN. */
static double val_report(run_ctx *r, int rc, double loss, const char *err,
                         int64_t step) {
  if (rc != 0) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "validation: %s", err);
    return NAN;
  }
  r->h->metric(r->ctx, "val_loss", loss, step);
  return loss;
}

static double evaluate(run_ctx *r, gpt *model, int64_t step) {
  if (!r->val)
    return NAN;
  loader_set_pos(r->val, &r->val_start);
  eval_result er = {0};
  char err[512];
  int rc = evaluate_model(model, r->val, r->c.B, r->c.m.T,
                          (uint64_t)r->c.eval_batches, NULL, NULL, &er, err,
                          sizeof err);
  return val_report(r, rc, er.loss, err, step);
}

/* One process: validation on the engine's device. */
static double evaluate_one(run_ctx *r, int64_t step) {
  if (!r->val)
    return NAN;
  loader_set_pos(r->val, &r->val_start);
  double loss = NAN;
  char err[512];
  int rc = engine_eval_loss(r->eng, r->val, (uint64_t)r->c.eval_batches,
                            &loss, err, sizeof err);
  return val_report(r, rc, loss, err, step);
}

static int save_checkpoint(run_ctx *r, char *err, size_t errlen) {
  /* On the GPU the host model and optimizer are brought up to date first:
   * the checkpoint is the CPU engine's format whatever the device. */
  if (r->eng && engine_sync_to_host(r->eng, err, errlen) != 0)
    return -1;
  if (trainstate_save(r->ckpt_dir, &r->st, r->last_ckpt, sizeof r->last_ckpt,
                      err, errlen) != 0)
    return -1;
  int removed = ckpt_prune(r->ckpt_dir, (int)r->c.keep);
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "checkpoint step %lld: %s%s",
            (long long)r->st.step, r->last_ckpt,
            removed > 0 ? " (older ones pruned)" : "");
  return 0;
}

static void report_invalid(void *arg, const char *dir, const char *why) {
  run_ctx *r = arg;
  r->h->log(r->ctx, DAGRUN_LOG_WARN, "skipping checkpoint %s: %s", dir, why);
}

/* A gang's sharded checkpoint (zero.h) resumed by one process: read
 * whole into the model and optimizer. It holds no loader position: the
 * batches of the steps done are replayed, which continues the gang's data
 * order exactly when this run's batch is the gang's global batch
 * (batch_size = world_size x the gang's, grad_accum 1). The spike guard's
 * window starts empty (a gang keeps none). */
static int resume_sharded(run_ctx *r, const char *dir, char *err,
                          size_t errlen) {
  int64_t step = 0;
  if (zero_read_whole(dir, r->model, r->opt, r->c.opt.kind, &step, err,
                      errlen) != 0)
    return -1;
  for (int64_t k = 0; k < step * r->c.accum; k++)
    loader_next(r->train, r->inputs, r->targets);
  r->st.step = step;
  r->st.tokens = (uint64_t)step * r->c.B * r->c.m.T * r->c.accum;
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "%s is a gang's sharded checkpoint: read whole, the data "
            "loader replayed to step %lld",
            dir, (long long)step);
  return 0;
}

/* resume: auto / never / a directory. Returns 0 (resumed or fresh), or
 * -1 when the named checkpoint cannot be used. */
static int maybe_resume(run_ctx *r) {
  char err[1024];
  char *dir = NULL;
  if (strcmp(r->c.resume, "never") == 0)
    return 0;
  if (strcmp(r->c.resume, "auto") == 0) {
    if (ckpt_find_latest(r->ckpt_dir, &dir, report_invalid, r, err,
                         sizeof err) != 0) {
      r->h->log(r->ctx, DAGRUN_LOG_WARN, "%s", err);
      return 0;
    }
    if (!dir)
      return 0;
  } else {
    dir = r->c.resume[0] == '/'
              ? strdup(r->c.resume)
              : fileio_join(r->h->dir(r->ctx, DAGRUN_DIR_DAG), r->c.resume);
    if (ckpt_verify(dir, err, sizeof err) != 0) {
      r->h->fail(r->ctx, "resume: %s", err);
      free(dir);
      return -1;
    }
  }
  if ((zero_is_sharded(dir) ? resume_sharded(r, dir, err, sizeof err)
                             : trainstate_load(dir, &r->st, err, sizeof err)) !=
      0) {
    r->h->fail(r->ctx, "resume from %s: %s", dir, err);
    free(dir);
    return -1;
  }
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "resumed from %s at step %lld%s", dir,
            (long long)r->st.step,
            r->init_dir ? " (a checkpoint of this task comes before "
                          "init_from)"
                        : "");
  snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", dir);
  free(dir);
  return 0;
}

/* Samples: textgen.h's, seeded by the run's seed (sample i: seed + i). */
static int write_samples(run_ctx *r, gpt *model, const char *path) {
  char err[1024];
  bpe *tok = NULL;
  if (bpe_load_hf(r->data.tokenizer, &tok, err, sizeof err) != 0) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "no samples: %s", err);
    return -1;
  }
  textgen_opts o = {.prompt = r->c.prompt,
                    .max_tokens = r->c.sample_tokens,
                    .temperature = r->c.temperature,
                    .top_k = r->c.top_k,
                    .seed = r->c.seed,
                    .stop_at_eot = 1};
  int rc = textgen_write_samples(model, tok, &o, r->c.nsamples, path, err,
                                 sizeof err);
  if (rc != 0)
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "no samples: %s", err);
  bpe_destroy(tok);
  return rc;
}

static void free_run(run_ctx *r) {
  tokdata_free(&r->data);
  free(r->init_dir);
  loader_destroy(r->train);
  loader_destroy(r->val);
  engine_destroy(r->eng);
  optim_destroy(r->opt);
  gpt_destroy(r->model);
  free(r->inputs);
  free(r->targets);
}

/* ---- The stage ---- */

/* gang: a rank of a gang of nranks. Its train loader serves the global
 * batch (nranks x batch_size sequences, the order of one process with
 * that batch size), of which each rank trains on its own rows; ZeRO makes
 * the optimizer (none here). */
static int setup(run_ctx *r, int nranks, int gang) {
  const dagrun_host *h = r->h;
  char err[1024];
  /* A checkpoint of this task, when resume finds one, replaces
   * init_from's weights later (maybe_resume): it was made from them. */
  if (trainkit_open_data(r->ctx, h, &r->c.m, &r->data) != 0 ||
      trainkit_make_model(r->ctx, h, &r->c.m, r->c.seed, &r->model,
                          &r->init_dir) != 0)
    return -1;
  if (!gang &&
      trainkit_make_optim(r->model, &r->c.opt, &r->opt, err, sizeof err) !=
          0) {
    h->fail(r->ctx, "optimizer: %s", err);
    return -1;
  }
  spike_config sc = r->c.spike;
  if (spike_init(&r->guard, &sc, err, sizeof err) != 0) {
    h->fail(r->ctx, "spike guard: %s", err);
    return -1;
  }
  if (trainkit_train_loader(&r->data, r->c.B * nranks, r->c.m.T, r->c.seed,
                            r->c.prefetch, &r->train, err, sizeof err) != 0) {
    h->fail(r->ctx, "train data: %s", err);
    return -1;
  }
  if (r->data.nval) {
    loader_config vc = {
        .paths = (const char *const *)r->data.val,
        .npaths = r->data.nval,
        .B = r->c.B,
        .T = r->c.m.T,
        .order = LOADER_SEQUENTIAL,
        .seed = r->c.seed,
    };
    if (loader_create(&vc, &r->val, err, sizeof err) != 0) {
      h->log(r->ctx, DAGRUN_LOG_WARN, "no validation: %s", err);
      r->val = NULL;
    } else {
      loader_get_pos(r->val, &r->val_start);
    }
  }
  size_t bt = (size_t)r->c.B * (size_t)nranks * (size_t)r->c.m.T;
  r->inputs = malloc(bt * sizeof(uint32_t));
  r->targets = malloc(bt * sizeof(uint32_t));
  if (!r->inputs || !r->targets) {
    h->fail(r->ctx, "out of memory");
    return -1;
  }
  r->st = (train_state){.model = r->model, .opt = r->opt, .train = r->train,
                        .guard = &r->guard};
  return 0;
}

/* The settings that shape the run, for the checkpoint's manifest; the
 * tokenizer's path lets modeldir.h find the tokenizer of a bare
 * checkpoint. */
static char *config_json(const run_ctx *r) {
  const cfg *c = &r->c;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", c->m.name);
  if (r->init_dir)
    cJSON_AddStringToObject(o, "init_from", r->init_dir);
  if (r->data.tokenizer)
    cJSON_AddStringToObject(o, "tokenizer", r->data.tokenizer);
  cJSON_AddNumberToObject(o, "batch_size", c->B);
  cJSON_AddNumberToObject(o, "seq_len", c->m.T);
  cJSON_AddNumberToObject(o, "grad_accum", c->accum);
  cJSON_AddNumberToObject(o, "steps", (double)c->steps);
  cJSON_AddStringToObject(o, "optimizer",
                          c->opt.kind == OPTIM_ADAMW ? "adamw" : "lion");
  cJSON_AddNumberToObject(o, "lr", c->sched.max_lr);
  cJSON_AddNumberToObject(o, "min_lr", c->sched.min_lr);
  cJSON_AddNumberToObject(o, "warmup", (double)c->sched.warmup_steps);
  cJSON_AddStringToObject(o, "schedule",
                          c->sched.decay == LR_COSINE   ? "cosine"
                          : c->sched.decay == LR_LINEAR ? "linear"
                                                        : "constant");
  cJSON_AddNumberToObject(o, "cooldown", (double)c->sched.cooldown_steps);
  cJSON_AddNumberToObject(o, "beta1", c->opt.beta1);
  cJSON_AddNumberToObject(o, "beta2", c->opt.beta2);
  cJSON_AddNumberToObject(o, "eps", c->opt.eps);
  cJSON_AddNumberToObject(o, "weight_decay", c->opt.weight_decay);
  cJSON_AddNumberToObject(o, "grad_clip", c->grad_clip);
  cJSON_AddNumberToObject(o, "seed", (double)c->seed);
  if (r->eng) {
    cJSON_AddStringToObject(o, "device",
                            engine_get_device(r->eng) == ENGINE_CUDA ? "cuda"
                                                                     : "cpu");
    cJSON_AddStringToObject(o, "recompute",
                            engine_recompute_name(c->recompute));
    cJSON_AddBoolToObject(o, "deterministic", c->deterministic);
  }
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return text;
}

/* ---- Where the time goes ---- */

/* The seconds since *t, and *t moved to now: one clock read a phase. */
/* Model FLOPs per trained token (forward + backward):
 *
 *   6N + 6*L*C*T
 *
 * N the parameters that take part in matrix products (all but the
 * position embeddings, which are only added; the token embeddings count
 * as the tied LM head), L layers, C width, T sequence length. 6N is 2N
 * for the forward pass and 4N for the backward; 6*L*C*T is attention's
 * QK^T and AV products, PaLM's 12*L*C*T halved for the causal mask, since
 * MFU counts the work the model needs, not what a kernel spends (the CPU
 * engine computes the full T x T products). */
static double flops_per_token(const gpt_config *mc, size_t n_params, int T) {
  double N = (double)n_params - (double)mc->block_size * mc->n_embd;
  return 6.0 * N + 6.0 * mc->n_layer * (double)mc->n_embd * T;
}

/* Where a step's time went (seconds), as both paths report it. */
typedef struct step_times {
  double data, forward, backward, optimizer, comm, step;
} step_times;

/* The step's time metrics, tokens seen and achieved model FLOP/s of the
 * whole run (and MFU when peak_tflops, one device's, is known: against
 * ranks devices' peak), at step. */
/* Writes s (then deleted) to <out>/summary.json atomically. Returns the
 * file's path (caller frees), or NULL with err. */
static char *write_summary(const char *out, cJSON *s, char *err,
                          size_t errlen) {
  char *text = cJSON_Print(s);
  cJSON_Delete(s);
  char *spath = fileio_join(out, "summary.json");
  if (!text || !spath) {
    snprintf(err, errlen, "out of memory");
  } else if (fileio_write_atomic(spath, text, strlen(text), err, errlen) == 0) {
    free(text);
    return spath;
  }
  free(text);
  free(spath);
  return NULL;
}

static void report_step_times(run_ctx *r, int64_t step, const step_times *t,
                              double fpt, size_t tokens_per_step, int ranks) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  h->metric(ctx, "time_data_s", t->data, step);
  h->metric(ctx, "time_forward_s", t->forward, step);
  h->metric(ctx, "time_backward_s", t->backward, step);
  h->metric(ctx, "time_optimizer_s", t->optimizer, step);
  h->metric(ctx, "time_comm_s", t->comm, step);
  h->metric(ctx, "step_time_s", t->step, step);
  h->metric(ctx, "tokens", (double)r->st.tokens, step);
  /* This step's achieved model FLOP/s (tokens_per_s is the run's
   * average, evaluations and checkpoints included). */
  if (t->step > 0) {
    double fps = fpt * (double)tokens_per_step / t->step;
    h->metric(ctx, "flops_per_s", fps, step);
    if (r->c.peak_tflops > 0)
      h->metric(ctx, "mfu", fps / (ranks * r->c.peak_tflops * 1e12), step);
  }
}

/* The data-wait watch: data wait as a share of step time, summed over
 * windows of DW_WINDOW steps (and the last, shorter one when it has at
 * least DW_MIN steps); above DW_SHARE it warns, at most once every
 * DW_QUIET steps. */
#define DW_WINDOW 50
#define DW_MIN 10
#define DW_SHARE 0.05
#define DW_QUIET 1000

typedef struct data_watch {
  double data, total; /* seconds in the window */
  int n;              /* steps in the window */
  int64_t next_warn;  /* no warning before this step */
} data_watch;

static void watch_data(run_ctx *r, data_watch *w, int64_t step, double data_s,
                       double step_s) {
  w->data += data_s;
  w->total += step_s;
  w->n++;
  if (w->n < DW_WINDOW && !(step == r->c.steps && w->n >= DW_MIN))
    return;
  double share = w->total > 0 ? w->data / w->total : 0;
  if (share > DW_SHARE && step >= w->next_warn) {
    char advice[400];
    if (r->c.prefetch == 0)
      snprintf(advice, sizeof advice,
               "the batches are made on the training thread (train param "
               "prefetch is 0): set prefetch: 2 so that the loader's thread "
               "prepares them ahead");
    else
      snprintf(advice, sizeof advice,
               "raise the loader's prefetch depth (train param prefetch, now "
               "%d) if the wait comes in bursts; if it is steady, the "
               "loader's thread makes batches slower than the model trains "
               "on them: put the token files on faster storage (local disk, "
               "page cache) or use fewer, larger shards",
               r->c.prefetch);
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "data wait is %.0f%% of step time (steps %lld-%lld: %.2f ms of "
              "%.2f ms a step): %s",
              100 * share, (long long)(step - w->n + 1), (long long)step,
              1e3 * w->data / w->n, 1e3 * w->total / w->n, advice);
    w->next_warn = step + DW_QUIET;
  }
  w->data = w->total = 0;
  w->n = 0;
}

/* ---- Data-parallel training in a gang (gpu/zero/zero.h) ----
 *
 * A task with a launcher (mpirun or srun) and world_size N (1 too) runs
 * this stage in N ranks; each makes the same model (the same seed), draws the
 * same global batch of N x batch_size sequences (the order one process with
 * that batch size would see) and trains on its own batch_size rows of it, and
 * ZeRO (zero_stage) averages the gradients over the ranks, shards what
 * the stage shards and updates. N ranks of batch_size B therefore train
 * as one process of batch size N*B. Every collective is called by every
 * rank in the same order: the stop request is agreed on by an all-reduce
 * each step, evaluation at stage 3 gathers the parameters on all ranks.
 * Rank 0 alone reports (metrics, progress, outputs, samples, the final
 * model); the others' host calls would be ignored by dagrun.
 *
 * The device (device: cpu|cuda|auto) is agreed on by all ranks: cuda
 * when this build has GPU ranks and every rank sees a GPU (auto falls
 * back to the CPU otherwise; cuda fails). On GPUs the step is
 * zero_cuda's (NCCL for the gradients and parameters); the MPI
 * communicator stays for everything else (the stop agreement,
 * checkpoints, the loss), with the host model (stage 3: the host zero's
 * parameter shard) and the host zero as the state of record that
 * checkpoints read (zero_cuda_pull before a save). Validation runs on
 * rank 0's GPU at stages 0-2; at stage 3, where a GPU forward needs
 * every rank's layers, the pre-flight loss is taken on the CPU before
 * ZeRO shards the model, and validation on rank 0's CPU over the
 * gathered parameters, as on CPU ranks.
 *
 * Checkpoints are ZeRO's sharded ones (zero_save: one file per rank and a
 * manifest) in <task>/checkpoints, so that a retried attempt with resume:
 * auto continues from the newest (re-cut if the world size changed). The
 * loader's position is not in them: the resumed run replays the loader's
 * batches up to the step (cheap: a batch is a copy of B*N*T tokens). At
 * the end rank 0 also writes the full weights as a train checkpoint
 * without optimizer state into <task>/model (trainstate.h): the outputs
 * checkpoint and checkpoints point there, so that validate and export
 * read it as they read one process's.
 *
 * Not in a gang: gradient accumulation (ZeRO takes one micro-batch per
 * rank per step: refused), overfit_one_batch (refused), the loss-spike
 * guard's reset and rollback (ZeRO updates inside its step: the gang
 * skips the update instead, said in the log; skip and lower_lr work, and
 * a non-finite loss or norm never reaches the weights: gang_guard_fn).
 *
 * Test hook: DAGRUN_TEST_KILL_RANK_AT_STEP=R:S makes rank R raise SIGKILL
 * when it is about to train step S+1 (S steps done), once per task: it
 * leaves <task>/test-kill-rank.done first, and a rank that finds that
 * file does not do it again (the retried attempt runs through). */

/* A loss spike the guard found at step: logged with what its policy does
 * (in a gang, which applies skip and lower_lr alone, reset and rollback
 * skip the update) and counted in the metrics, the spike itself at the
 * step its loss is reported at, so that a plot marks it on the loss
 * curve. */
static void spike_report(run_ctx *r, int64_t step, double loss, double gnorm,
                         double z, int in_gang) {
  const dagrun_host *h = r->h;
  spike_policy p = r->c.spike.policy;
  h->log(r->ctx, DAGRUN_LOG_WARN,
         "step %lld: loss spike (loss %.4f, grad norm %.3f, z %.1f): %s",
         (long long)step, loss, gnorm, z,
         p == SPIKE_SKIP       ? "update skipped"
         : p == SPIKE_LOWER_LR ? "learning rate lowered"
         : in_gang             ? "update skipped (a gang cannot reset or "
                                 "roll back inside a ZeRO step)"
         : p == SPIKE_RESET    ? "update skipped, optimizer moments reset"
                               : "rolling back");
  h->metric(r->ctx, "spike_events", (double)r->guard.events, step);
  h->metric(r->ctx, "spike", loss, step + 1);
}

/* The gang's update guard (zero.h's zero_guard_fn), run inside each ZeRO
 * step on every rank before any weight moves; rank 0's answer is the one
 * applied. The loss-spike guard as in one process for skip and lower_lr;
 * reset and rollback would move the shards' state in the middle of a
 * step, so a gang skips the update instead. DAGRUN_FAULT_SPIKE_STEPS
 * multiplies what the guard sees at those steps as the bad batch does in
 * one process (loss x20, norm x100); the gradients are not scaled. */
typedef struct gang_guard {
  run_ctx *r;
  faults fault;
  int lead;
} gang_guard;

static double gang_guard_fn(void *arg, float loss, double norm) {
  gang_guard *gg = arg;
  run_ctx *r = gg->r;
  int64_t step = r->st.step;
  double l = loss, z = 0;
  if (faults_take(&gg->fault, step)) {
    if (gg->lead)
      r->h->log(r->ctx, DAGRUN_LOG_WARN,
                "step %lld: injected bad batch (DAGRUN_FAULT_SPIKE_STEPS)",
                (long long)step);
    l *= 20;
    norm *= 100;
  }
  if (!r->c.spike_on)
    return 1.0;
  if (spike_check(&r->guard, l, norm, &z)) {
    if (gg->lead)
      spike_report(r, step, l, norm, z, 1);
    if (r->c.spike.policy != SPIKE_LOWER_LR)
      return 0.0;
  }
  return spike_lr_factor(&r->guard);
}

/* DAGRUN_WORLD_SIZE: the ranks of this task's gang; 0 when not in one
 * (dagrun sets it for a task with world_size > 1 or a launcher). */
static int gang_size(void) {
  const char *z = getenv("DAGRUN_WORLD_SIZE");
  int n = z ? atoi(z) : 0;
  return n > 0 ? n : 0;
}

/* Whether mpirun, or srun with PMI, started this process. */
static int launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") ||
         getenv("PMIX_RANK");
}

typedef struct gang {
  comm *c;       /* MPI: every rank's host-side exchanges */
  comm *nc;      /* GPU ranks: NCCL, the gradients and parameters */
  zero *z;
  zero_cuda *zc; /* GPU ranks: the step on the GPU */
  int rank, N, stage;
  int B, T;      /* each rank's micro-batch */
  gpt *full;   /* rank 0, stage 3: the gathered model for eval / the end */
  float *buf;  /* stage 3: the gathered parameters (every rank) */
} gang;

/* A failure in the middle of the collectives: every rank must stop. */
static _Noreturn void gang_abort(run_ctx *r, gang *g, const char *what,
                                 const char *err) {
  r->h->fail(r->ctx, "rank %d: %s: %s", g->rank, what, err);
  r->h->log(r->ctx, DAGRUN_LOG_ERROR, "rank %d: %s: %s (stopping the gang)",
            g->rank, what, err);
  comm_abort(g->c, EXIT_FAILED);
}

/* The whole model with the current weights on rank 0 (NULL on the
 * others). Stages 0-2 hold the full parameters on every rank after a
 * step; stage 3 gathers them (collective). */
static gpt *gang_model(run_ctx *r, gang *g) {
  char err[1024];
  if (g->zc) {
    /* The GPUs' master weights into every rank's host model. */
    if (zero_cuda_gather_params(g->zc, err, sizeof err) != 0)
      gang_abort(r, g, "gathering the parameters", err);
    return g->rank == 0 ? r->model : NULL;
  }
  if (g->stage < 3)
    return g->rank == 0 ? r->model : NULL;
  size_t np = gpt_num_params(r->model);
  if (!g->buf && !(g->buf = malloc(np * sizeof(float))))
    gang_abort(r, g, "gathering the parameters", "out of memory");
  if (zero_gather_params(g->z, g->buf, err, sizeof err) != 0)
    gang_abort(r, g, "gathering the parameters", err);
  if (g->rank != 0)
    return NULL;
  if (!g->full &&
      gpt_create(gpt_get_config(r->model), &g->full, err, sizeof err) != 0)
    gang_abort(r, g, "the model for evaluation", err);
  memcpy(gpt_params(g->full), g->buf, np * sizeof(float));
  return g->full;
}

/* A sharded checkpoint of step (collective); rank 0 prunes and logs. */
static void gang_save(run_ctx *r, gang *g) {
  char err[1024];
  if (g->zc && zero_cuda_pull(g->zc, err, sizeof err) != 0)
    gang_abort(r, g, "sharded checkpoint", err);
  if (zero_save(g->z, r->ckpt_dir, r->st.step, err, sizeof err) != 0)
    gang_abort(r, g, "sharded checkpoint", err);
  if (g->rank != 0)
    return;
  if (snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s/step-%08lld",
               r->ckpt_dir, (long long)r->st.step) >= (int)sizeof r->last_ckpt)
    r->last_ckpt[0] = '\0'; /* too long a path to name */
  int removed = ckpt_prune(r->ckpt_dir, (int)r->c.keep);
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "sharded checkpoint step %lld (%d ranks): "
            "%s%s", (long long)r->st.step, g->N, r->last_ckpt,
            removed > 0 ? " (older ones pruned)" : "");
}

/* The checkpoint to resume from, found by rank 0 and broadcast so that
 * every rank loads the same one; "" when none. */
static int gang_find_resume(run_ctx *r, gang *g, char *dir, size_t dirlen) {
  char err[1024];
  memset(dir, 0, dirlen);
  if (g->rank == 0 && strcmp(r->c.resume, "never") != 0) {
    char *found = NULL;
    if (strcmp(r->c.resume, "auto") == 0) {
      if (ckpt_find_latest(r->ckpt_dir, &found, report_invalid, r, err,
                           sizeof err) != 0)
        r->h->log(r->ctx, DAGRUN_LOG_WARN, "%s", err);
    } else {
      found = r->c.resume[0] == '/'
                  ? strdup(r->c.resume)
                  : fileio_join(r->h->dir(r->ctx, DAGRUN_DIR_DAG),
                                r->c.resume);
    }
    if (found)
      snprintf(dir, dirlen, "%s", found);
    free(found);
  }
  if (comm_broadcast(g->c, dir, dirlen, 0, err, sizeof err) != 0)
    gang_abort(r, g, "agreeing on the checkpoint", err);
  return 0;
}

/* The test hook DAGRUN_TEST_KILL_RANK_AT_STEP (above). */
static void gang_test_kill(run_ctx *r, gang *g) {
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
            "(DAGRUN_TEST_KILL_RANK_AT_STEP)", g->rank, step);
  raise(SIGKILL);
}

/* The gang's device, the same on every rank (collective): cuda when this
 * build has GPU ranks and every rank sees a GPU; auto takes it when that
 * holds, else the CPU; cuda fails otherwise (on every rank, saying why).
 * 0 with *cuda, or -1. */
static int gang_pick_device(run_ctx *r, gang *g, int *cuda) {
  char why[512] = "", err[512];
  int have = zero_cuda_available(why, sizeof why);
  float n = have ? 1.0f : 0.0f;
  if (comm_allreduce_sum(g->c, &n, 1, err, sizeof err) != 0)
    gang_abort(r, g, "agreeing on the device", err);
  int all = (int)n == g->N, lead = g->rank == 0;
  *cuda = 0;
  if (r->c.device == ENGINE_WANT_CPU) {
    if (lead)
      r->h->log(r->ctx, DAGRUN_LOG_INFO, "device: cpu (device: cpu was asked "
                                         "for; the ranks talk over MPI)");
    return 0;
  }
  char no[768] = "";
  if (!all && have)
    snprintf(no, sizeof no, "%d of the %d ranks see a usable GPU", (int)n,
             g->N);
  else if (!all)
    snprintf(no, sizeof no, "%d of the %d ranks see a usable GPU (this one: "
             "%s)", (int)n, g->N, why);
  if (all) {
    *cuda = 1;
    if (lead)
      r->h->log(r->ctx, DAGRUN_LOG_INFO,
                "device: cuda (device: %s; every rank sees a GPU: one GPU a "
                "rank, NCCL between them)",
                r->c.device == ENGINE_WANT_CUDA ? "cuda" : "auto");
    return 0;
  }
  if (r->c.device == ENGINE_WANT_CUDA) {
    r->h->fail(r->ctx, "device: cuda in a gang of %d, but %s; use device: cpu "
                       "or auto", g->N, no);
    return -1;
  }
  if (lead)
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "device: cpu (device: auto, and %s; the ranks talk over MPI)",
              no);
  return 0;
}

/* One batch's loss on this rank's GPU (engine_eval_batches's fn). */
static int gang_gpu_loss(void *arg, const uint32_t *in, const uint32_t *tg,
                         float *loss, char *err, size_t errlen) {
  gang *g = arg;
  return zero_cuda_loss(g->zc, in, tg, g->B, g->T, loss, err, errlen);
}

/* Validation at an eval step, NAN on the ranks other than 0. GPU ranks
 * at stages 0-2: on rank 0's GPU alone (no exchange). Else on rank 0's
 * CPU, the model gathered where stage 3 shards it (collective: every
 * rank calls this). */
static double gang_evaluate(run_ctx *r, gang *g, int64_t step) {
  if (g->zc && g->stage < 3) {
    if (g->rank != 0 || !r->val)
      return NAN;
    loader_set_pos(r->val, &r->val_start);
    double loss = NAN;
    char err[512];
    int rc = engine_eval_batches(r->val, g->B, g->T,
                                 (uint64_t)r->c.eval_batches, gang_gpu_loss, g,
                                 &loss, err, sizeof err);
    return val_report(r, rc, loss, err, step);
  }
  gpt *m = gang_model(r, g);
  return m ? evaluate(r, m, step) : NAN;
}

/* The loss at initialization, on rank 0's rows of the first batch (the
 * loader's position kept), on its GPU or its CPU model; logged and a
 * metric, as in one process. */
static double gang_preflight(run_ctx *r, gang *g, double lnV) {
  char err[1024];
  loader_pos pos;
  loader_get_pos(r->train, &pos);
  float loss = 0;
  loader_next(r->train, r->inputs, r->targets);
  loader_set_pos(r->train, &pos);
  int rc = g->zc ? zero_cuda_loss(g->zc, r->inputs, r->targets, g->B, g->T,
                                  &loss, err, sizeof err)
                 : gpt_forward(r->model, r->inputs, r->targets, g->B, g->T,
                               &loss, err, sizeof err);
  if (rc != 0)
    gang_abort(r, g, "first forward pass", err);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "loss at initialization %.4f, ln(vocab) %.4f", loss, lnV);
  r->h->metric(r->ctx, "init_loss", loss, 0);
  return loss;
}

/* What a gang frees when it ends (every path). */
static void gang_free(gang *g) {
  zero_cuda_destroy(g->zc);
  zero_destroy(g->z);
  comm_destroy(g->nc);
  comm_destroy(g->c);
  free(g->buf);
  gpt_destroy(g->full);
}

static int run_gang(run_ctx *r, int N) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  char err[2048];
  gang g = {.N = N};
  int64_t v;
  if (!launched_by_mpi()) {
    h->fail(ctx, "world_size %d, but the ranks were not started by mpirun: "
                 "the train stage's ranks talk over MPI; set launcher: "
                 "mpirun (or srun) on this task", N);
    return EXIT_BAD_PARAMS;
  }
  if (stagekit_param_choice(ctx, h, "zero_stage", zero_stage_names, &g.stage))
    return EXIT_BAD_PARAMS;
  int64_t bucket;
  if (stagekit_param_int(ctx, h, "zero_bucket", 0, INT64_C(1) << 40, &bucket))
    return EXIT_BAD_PARAMS;
  if (r->c.accum > 1) {
    h->fail(ctx, "grad_accum %d in a gang: ZeRO takes one micro-batch per "
                 "rank per step; raise batch_size or world_size instead "
                 "(global batch = world_size x batch_size)", r->c.accum);
    return EXIT_BAD_PARAMS;
  }
  if (r->c.overfit) {
    h->fail(ctx, "overfit_one_batch is a one-process check: run it without "
                 "world_size");
    return EXIT_BAD_PARAMS;
  }
  if (stagekit_param_int(ctx, h, "threads", 0, 1024, &v))
    return EXIT_BAD_PARAMS;
  if (v == 0) { /* the CPUs shared by the ranks (one host) */
    int n = (int)stagekit_cpu_count() / N;
    trainkit_set_threads(n > 0 ? n : 1);
  }

  comm_config cc = {.backend = COMM_MPI};
  if (comm_create(&cc, &g.c, err, sizeof err) != 0) {
    h->fail(ctx, "%s", err);
    return EXIT_FAILED;
  }
  g.rank = comm_rank(g.c);
  if (comm_size(g.c) != N) {
    h->fail(ctx, "MPI says %d ranks, DAGRUN_WORLD_SIZE %d", comm_size(g.c), N);
    comm_abort(g.c, EXIT_FAILED);
  }
  int lead = g.rank == 0, cuda = 0;
  if (gang_pick_device(r, &g, &cuda) != 0) {
    comm_destroy(g.c);
    return EXIT_BAD_PARAMS;
  }
  if (cuda) {
    comm_config nccfg = {.backend = COMM_NCCL, .device = -1};
    if (comm_create(&nccfg, &g.nc, err, sizeof err) != 0)
      gang_abort(r, &g, "NCCL", err);
  }
  if (setup(r, N, 1) != 0)
    comm_abort(g.c, EXIT_FAILED);
  char *config_text = config_json(r);
  r->st.config_json = config_text;
  const gpt_config *mc = gpt_get_config(r->model);
  size_t np = gpt_num_params(r->model);
  int B = r->c.B, T = r->c.m.T;
  g.B = B;
  g.T = T;
  size_t bt = (size_t)B * T;
  char resume_dir[4096];
  gang_find_resume(r, &g, resume_dir, sizeof resume_dir);
  if (lead) {
    h->log(ctx, DAGRUN_LOG_INFO,
           "model %s: %d layers, %d heads, width %d, context %d, vocab %d: "
           "%.2fM parameters",
           r->c.m.name, mc->n_layer, mc->n_head, mc->n_embd, mc->block_size,
           mc->vocab_size, np / 1e6);
    h->log(ctx, DAGRUN_LOG_INFO,
           "gang of %d ranks (%s), ZeRO stage %d: global batch %d x %d = %d "
           "sequences of %d tokens a step", N,
           cuda ? "GPUs, NCCL" : "CPUs, MPI", g.stage, N, B, N * B, T);
    h->metric(ctx, "parameters", (double)np, 0);
    if (r->c.spike_on && (r->c.spike.policy == SPIKE_RESET ||
                          r->c.spike.policy == SPIKE_ROLLBACK))
      h->log(ctx, DAGRUN_LOG_WARN,
             "spike_policy %s: a gang skips the spike's update instead (it "
             "cannot reset or roll back inside a ZeRO step)",
             spike_policy_names[r->c.spike.policy + 1]);
  }
  double lnV = log((double)mc->vocab_size), init_loss = NAN;
  /* Pre-flight on the CPU before ZeRO takes the model (stage 3 frees its
   * parameters); on the GPU once it has them, but at stage 3, where a
   * forward on one GPU would need the other ranks' layers. */
  int gpu_preflight = cuda && g.stage < 3;
  if (lead && !resume_dir[0] && !gpu_preflight)
    init_loss = gang_preflight(r, &g, lnV);

  /* One process's checkpoint (trainstate.h: full weights and optimizer
   * state) is read whole by every rank into the model, before ZeRO takes
   * it, and into an optimizer over the whole model, whose state ZeRO cuts
   * after. Its loader position is for one process's batch: replaying the
   * steps' batches continues its data order exactly when the global
   * batch is that batch. */
  int sharded = resume_dir[0] && zero_is_sharded(resume_dir);
  optim *whole = NULL;
  if (resume_dir[0] && !sharded) {
    train_state ts = r->st;
    ts.train = NULL;
    if (trainkit_make_optim(r->model, &r->c.opt, &whole, err, sizeof err) !=
        0)
      gang_abort(r, &g, "resume", err);
    ts.opt = whole;
    if (ckpt_verify(resume_dir, err, sizeof err) != 0 ||
        trainstate_load(resume_dir, &ts, err, sizeof err) != 0)
      gang_abort(r, &g, "resume", err);
    r->st.step = ts.step;
  }
  zero_config zc = {.stage = g.stage, .bucket_floats = (size_t)bucket};
  if (zero_create(&zc, r->model, &r->c.opt, g.c, &g.z, err, sizeof err) != 0)
    gang_abort(r, &g, "ZeRO", err);
  gang_guard guard = {.r = r, .lead = lead};
  faults_read(&guard.fault);
  zero_set_guard(g.z, gang_guard_fn, &guard);
  if (resume_dir[0]) {
    int64_t step = r->st.step;
    if (whole)
      zero_set_optim_state(g.z, optim_state(whole), optim_get_t(whole));
    optim_destroy(whole);
    if (sharded && zero_load(g.z, resume_dir, &step, err, sizeof err) != 0)
      gang_abort(r, &g, "resume", err);
    /* The loader's position: the batches of the steps done, replayed. */
    for (int64_t k = 0; k < step; k++)
      loader_next(r->train, r->inputs, r->targets);
    r->st.step = step;
    r->st.tokens = (uint64_t)step * N * bt;
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", resume_dir);
    if (lead)
      h->log(ctx, DAGRUN_LOG_INFO, "resumed from %s checkpoint %s at step %lld",
             sharded ? "sharded" : "one-process", resume_dir,
             (long long)step);
  }
  if (cuda) {
    /* The GPUs take the host model and the shards' optimizer state as
     * they are now (resumed or new). */
    zero_cuda_options zo = {.B = B,
                            .T = T,
                            .opt = r->c.opt,
                            .recompute = (int)r->c.recompute,
                            .deterministic = r->c.deterministic};
    if (zero_cuda_create(g.z, r->model, g.c, g.nc, &zo, &g.zc, err,
                         sizeof err) != 0)
      gang_abort(r, &g, "the GPU", err);
    if (lead) {
      h->log(ctx, DAGRUN_LOG_INFO, "rank 0's GPU: %s; recompute: %s, "
             "deterministic: %s", zero_cuda_describe(g.zc),
             engine_recompute_name(r->c.recompute),
             r->c.deterministic ? "true" : "false");
      if (!resume_dir[0] && gpu_preflight)
        init_loss = gang_preflight(r, &g, lnV);
    }
  }

  size_t tokens_per_step = (size_t)N * bt;
  double fpt = flops_per_token(mc, np, T);
  double t_start = clock_monotonic(), t_last = 0, last_loss = NAN, val = NAN;
  int64_t first_step = r->st.step;
  uint32_t *in = r->inputs + (size_t)g.rank * bt;
  uint32_t *tg = r->targets + (size_t)g.rank * bt;
  while (r->st.step < r->c.steps) {
    int64_t step = r->st.step;
    /* A stop (timeout, Ctrl-C) may reach the ranks at different steps:
     * they agree on it, then checkpoint together. */
    float stop = h->cancelled(ctx) ? 1.0f : 0.0f;
    if (comm_allreduce_sum(g.c, &stop, 1, err, sizeof err) != 0)
      gang_abort(r, &g, "step", err);
    if (stop > 0) {
      gang_save(r, &g);
      h->fail(ctx, "stopped at step %lld; sharded checkpoint %s (resume: "
                   "auto continues from it)", (long long)step, r->last_ckpt);
      gang_free(&g);
      free(config_text);
      return EXIT_FAILED;
    }
    gang_test_kill(r, &g);
    double t_step = clock_monotonic();
    loader_next(r->train, r->inputs, r->targets);
    double lr = lr_at(&r->c.sched, step);
    double t_call = clock_monotonic();
    zero_step_result res;
    int rc = g.zc ? zero_cuda_step(g.zc, in, tg, B, T, (float)lr,
                                   r->c.grad_clip, &res, err, sizeof err)
                  : zero_step(g.z, in, tg, B, T, (float)lr, r->c.grad_clip,
                              &res, err, sizeof err);
    if (rc != 0)
      gang_abort(r, &g, "step", err);
    double t_end = clock_monotonic();
    /* A step whose loss or norm is not finite, or that the spike guard
     * stopped, moved nothing. */
    if (lead && res.lr_factor == 0.0 &&
        (!isfinite(res.loss) || !isfinite(res.norm)))
      h->log(ctx, DAGRUN_LOG_WARN,
             "step %lld: loss %g, grad norm %g: update skipped",
             (long long)step, res.loss, res.norm);
    lr *= res.lr_factor > 0.0 ? res.lr_factor : 1.0;
    /* Rank 0's time, from one chain of clock reads so that the phases
     * add up to the step: the optimizer phase is the rest of the call, as
     * zero_step counts it (res.t_optimizer), plus the moments on either
     * side of its own clock reads, where a loaded machine can deschedule
     * the rank for a timeslice. */
    step_times times = {t_call - t_step, res.t_forward, res.t_backward,
                        (t_end - t_call) - res.t_forward - res.t_backward -
                            res.t_comm,
                        res.t_comm, t_end - t_step};
    r->st.step++;
    r->st.tokens += tokens_per_step;
    last_loss = res.loss;
    if (lead) {
      h->metric(ctx, "loss", res.loss, r->st.step);
      h->metric(ctx, "lr", lr, r->st.step);
      h->metric(ctx, "grad_norm", res.norm, r->st.step);
      report_step_times(r, r->st.step, &times, fpt, tokens_per_step, N);
      /* The overlap achieved: reduce-scatters started while backward
       * still ran, of all of them. */
      if (res.buckets > 0) {
        h->metric(ctx, "comm_buckets_early", res.buckets_early, r->st.step);
        h->metric(ctx, "comm_overlap",
                  (double)res.buckets_early / res.buckets, r->st.step);
      }
      double now = clock_monotonic();
      if (now - t_last > 0.5 || r->st.step == r->c.steps) {
        double el = now - t_start;
        double tps = (double)(r->st.step - first_step) * tokens_per_step / el;
        char msg[160];
        snprintf(msg, sizeof msg, "step %lld/%lld loss %.4f %.0f tok/s",
                 (long long)r->st.step, (long long)r->c.steps, res.loss, tps);
        h->progress(ctx, (double)r->st.step / r->c.steps, msg);
        h->metric(ctx, "tokens_per_s", tps, r->st.step);
        t_last = now;
      }
      if (r->st.step == first_step + 1 && g.zc) {
        zero_memory zm;
        uint64_t acts;
        zero_cuda_memory_get(g.zc, &zm, &acts);
        h->log(ctx, DAGRUN_LOG_INFO,
               "rank 0's GPU holds params %.2f MiB (%s), grads %.2f MiB "
               "(FP32%s), optimizer %.2f MiB, activations %.2f MiB (ZeRO's "
               "mixed-precision formula for params + grads + optimizer: "
               "%.2f MiB)",
               zm.params / 1048576.0,
               g.stage == 3 ? "FP32 master weights and BF16 copy of its "
                              "shard, two gathered layers"
                            : "FP32 master weights of its part and the "
                              "BF16 copy of all",
               zm.grads / 1048576.0,
               g.stage >= 2 ? ": its part and the layers' buffers" : "",
               zm.optim / 1048576.0, acts / 1048576.0, zm.f_mixed / 1048576.0);
      } else if (r->st.step == first_step + 1) {
        zero_memory zm;
        zero_memory_get(g.z, &zm);
        h->log(ctx, DAGRUN_LOG_INFO,
               "rank 0 holds params %.2f MiB, grads %.2f MiB, optimizer "
               "%.2f MiB (ZeRO fp32 formula: %.2f, %.2f, %.2f MiB)",
               zm.params / 1048576.0, zm.grads / 1048576.0,
               zm.optim / 1048576.0, zm.f_params / 1048576.0,
               zm.f_grads / 1048576.0, zm.f_optim / 1048576.0);
      }
    }
    if (r->c.eval_every && r->st.step % r->c.eval_every == 0 &&
        r->st.step < r->c.steps) {
      val = gang_evaluate(r, &g, r->st.step);
      if (lead)
        h->log(ctx, DAGRUN_LOG_INFO, "step %lld: loss %.4f, val loss %.4f",
               (long long)r->st.step, res.loss, val);
    }
    if (r->c.ckpt_every && r->st.step % r->c.ckpt_every == 0 &&
        r->st.step < r->c.steps)
      gang_save(r, &g);
  }
  double train_s = clock_monotonic() - t_start;
  gang_save(r, &g);
  gpt *m = gang_model(r, &g);
  /* The collectives are over; the ranks other than 0 are done. NCCL's
   * communicator goes now, on every rank together (its finalize waits
   * for the peers), not after rank 0's validation and writing, which
   * may outlast the communicator's timeout; rank 0's GPU stays for the
   * validation. */
  comm_destroy(g.nc);
  g.nc = NULL;
  int status = 0;
  if (lead) {
    status = EXIT_FAILED;
    /* m is every rank's gathered model: on GPU ranks at stages 0-2 rank 0
     * validates on its GPU, which needs no exchange. */
    val = g.zc && g.stage < 3 ? gang_evaluate(r, &g, r->st.step)
                              : evaluate(r, m, r->st.step);
    char model_dir[4096], final[4096];
    snprintf(model_dir, sizeof model_dir, "%s/model",
             h->dir(ctx, DAGRUN_DIR_TASK));
    train_state fs = {.model = m, .step = r->st.step, .tokens = r->st.tokens,
                      .config_json = config_text};
    if (trainstate_save(model_dir, &fs, final, sizeof final, err,
                        sizeof err) != 0) {
      h->fail(ctx, "final model: %s", err);
      goto out;
    }
    ckpt_prune(model_dir, 1);
    h->log(ctx, DAGRUN_LOG_INFO, "full model (weights only) at step %lld: %s",
           (long long)r->st.step, final);
    const char *out = h->dir(ctx, DAGRUN_DIR_OUT);
    char *samples = fileio_join(out, "samples.txt");
    if (samples && r->c.nsamples > 0 && write_samples(r, m, samples) == 0)
      h->output(ctx, "samples", samples);
    free(samples);
    double tps = r->st.step > first_step && train_s > 0
                     ? (double)(r->st.step - first_step) * tokens_per_step /
                           train_s
                     : 0;
    h->log(ctx, DAGRUN_LOG_INFO,
           "done: %lld steps on %d ranks, %.0f tokens/s; loss %.4f, val loss "
           "%.4f; peak RSS of rank 0 %.0f MiB",
           (long long)r->st.step, N, tps, last_loss, val,
           stagekit_peak_rss() / 1048576.0);
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "steps", (double)r->st.step);
    cJSON_AddNumberToObject(s, "tokens", (double)r->st.tokens);
    cJSON_AddNumberToObject(s, "parameters", (double)np);
    cJSON_AddNumberToObject(s, "world_size", N);
    cJSON_AddNumberToObject(s, "zero_stage", g.stage);
    cJSON_AddStringToObject(s, "device", g.zc ? "cuda" : "cpu");
    if (g.zc)
      cJSON_AddStringToObject(s, "gpu", zero_cuda_describe(g.zc));
    cJSON_AddNumberToObject(s, "global_batch", N * B);
    cJSON_AddNumberToObject(s, "loss", last_loss);
    if (isfinite(val))
      cJSON_AddNumberToObject(s, "val_loss", val);
    else
      cJSON_AddNullToObject(s, "val_loss");
    cJSON_AddNumberToObject(s, "ln_vocab", lnV);
    if (isfinite(init_loss))
      cJSON_AddNumberToObject(s, "init_loss", init_loss);
    cJSON_AddNumberToObject(s, "tokens_per_s", tps);
    cJSON_AddNumberToObject(s, "spike_events", (double)r->guard.events);
    cJSON_AddStringToObject(s, "checkpoint", final);
    cJSON_AddStringToObject(s, "sharded_checkpoint", r->last_ckpt);
    cJSON_AddStringToObject(s, "tokenizer", r->data.tokenizer);
    char *spath = write_summary(out, s, err, sizeof err);
    if (!spath) {
      h->fail(ctx, "summary.json: %s", err);
      goto out;
    }
    h->output(ctx, "checkpoint", final);
    h->output(ctx, "checkpoints", model_dir);
    h->output(ctx, "sharded_checkpoints", r->ckpt_dir);
    h->output(ctx, "tokenizer", r->data.tokenizer);
    h->output(ctx, "summary", spath);
    free(spath);
    char num[32];
    snprintf(num, sizeof num, "%.6f", val);
    h->output(ctx, "val_loss", num);
    status = 0;
  }
out:
  gang_free(&g);
  free(config_text);
  return status;
}

static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  run_ctx r = {.ctx = ctx, .h = h};
  char *config_text = NULL;
  char err[2048];
  int status = EXIT_FAILED;
  if (read_cfg(ctx, h, &r.c) != 0)
    return EXIT_BAD_PARAMS;
  trainkit_set_threads(r.c.threads);
  snprintf(r.ckpt_dir, sizeof r.ckpt_dir, "%s/checkpoints",
           h->dir(ctx, DAGRUN_DIR_TASK));
  /* A gang of any size, 1 included, once a launcher started it. */
  int nranks = gang_size();
  if (nranks > 1 || (nranks == 1 && launched_by_mpi())) {
    status = run_gang(&r, nranks);
    goto done;
  }
  engine_device dev;
  char why[768];
  if (engine_pick(r.c.device, &dev, why, sizeof why, err, sizeof err) != 0) {
    h->fail(ctx, "%s", err);
    status = EXIT_BAD_PARAMS;
    goto done;
  }
  h->log(ctx, DAGRUN_LOG_INFO, "device: %s (%s)",
         dev == ENGINE_CUDA ? "cuda" : "cpu", why);
  if (dev == ENGINE_CPU && r.c.recompute != ENGINE_RECOMPUTE_NONE)
    h->log(ctx, DAGRUN_LOG_WARN,
           "recompute: %s is ignored on the CPU: the CPU engine keeps every "
           "activation (recomputation is the GPU's)",
           engine_recompute_name(r.c.recompute));
  if (setup(&r, 1, 0) != 0)
    goto done;
  engine_options eo = {.B = r.c.B,
                       .T = r.c.m.T,
                       .opt = r.c.opt,
                       .recompute = r.c.recompute,
                       .deterministic = r.c.deterministic};
  if (engine_create(dev, r.model, r.opt, &eo, &r.eng, err, sizeof err) != 0) {
    h->fail(ctx, "%s", err);
    goto done;
  }
  h->output(ctx, "device", dev == ENGINE_CUDA ? "cuda" : "cpu");
  if (dev == ENGINE_CUDA) {
    engine_memory em = {0};
    engine_memory_get(r.eng, &em, err, sizeof err);
    h->log(ctx, DAGRUN_LOG_INFO, "training on %s; recompute: %s; "
           "deterministic: %s; %.1f MiB of device memory allocated, %.1f of "
           "%.1f MiB in use on the device",
           engine_describe(r.eng), engine_recompute_name(r.c.recompute),
           r.c.deterministic ? "true" : "false", em.allocated / 1048576.0,
           em.device_used / 1048576.0, em.device_total / 1048576.0);
    h->metric(ctx, "gpu_allocated_bytes", (double)em.allocated, 0);
    h->metric(ctx, "gpu_device_used_bytes", (double)em.device_used, 0);
  }
  config_text = config_json(&r);
  r.st.config_json = config_text;
  const gpt_config *mc = gpt_get_config(r.model);
  size_t np = gpt_num_params(r.model);
  size_t opt_bytes = optim_state_floats(r.opt) * sizeof(float);
  h->log(ctx, DAGRUN_LOG_INFO,
         "model %s: %d layers, %d heads, width %d, context %d, vocab %d "
         "(padded %d): %.2fM parameters; params + grads + optimizer %.1f MiB",
         r.c.m.name, mc->n_layer, mc->n_head, mc->n_embd, mc->block_size,
         mc->vocab_size, mc->padded_vocab, np / 1e6,
         (2.0 * np * sizeof(float) + opt_bytes) / 1048576.0);
  h->metric(ctx, "parameters", (double)np, 0);
  uint64_t corpus_tokens = 0;
  double H1 = unigram_entropy(&r, &corpus_tokens);
  h->log(ctx, DAGRUN_LOG_INFO,
         "%llu train tokens; unigram entropy %.4f nats (the loss of a model "
         "that knows only token frequencies)",
         (unsigned long long)corpus_tokens, H1);

  /* Whatever the step of the checkpoint resumed from (a run cancelled
   * before its first step saves one at step 0), its weights are now the
   * host's: the device gets them too. */
  if (maybe_resume(&r) != 0 ||
      (r.last_ckpt[0] && engine_load_from_host(r.eng, err, sizeof err) != 0 &&
       (h->fail(ctx, "resume: %s", err), 1)))
    goto done;
  double lnV = log((double)mc->vocab_size), init_loss = NAN;
  if (r.st.step == 0) {
    /* Pre-flight: at initialization every token is about equally likely,
     * so the loss is close to ln(vocab); far off means a broken model or
     * data. The batch is peeked with a copy of the loader position. */
    loader_pos pos;
    loader_get_pos(r.train, &pos);
    double loss = 0;
    loader_next(r.train, r.inputs, r.targets);
    loader_set_pos(r.train, &pos);
    if (engine_loss(r.eng, r.inputs, r.targets, &loss, err, sizeof err) !=
        0) {
      h->fail(ctx, "first forward pass: %s", err);
      goto done;
    }
    init_loss = loss;
    h->log(ctx, DAGRUN_LOG_INFO, "loss at initialization %.4f, ln(vocab) %.4f",
           init_loss, lnV);
    h->metric(ctx, "init_loss", init_loss, 0);
    if (!isfinite(init_loss)) {
      h->fail(ctx, "loss at initialization is %g", init_loss);
      goto done;
    }
    /* A model from init_from has learned: its loss is meant to be far
     * below ln(vocab). */
    if (fabs(init_loss - lnV) > 0.5 && !r.init_dir)
      h->log(ctx, DAGRUN_LOG_WARN,
             "loss at initialization %.3f is far from ln(vocab) %.3f",
             init_loss, lnV);
  }
  if (r.c.overfit)
    loader_next(r.train, r.inputs, r.targets); /* the one batch */

  size_t tokens_per_step = (size_t)r.c.B * r.c.m.T * r.c.accum;
  double fpt = flops_per_token(mc, np, r.c.m.T);
  data_watch dwatch = {0};
  double t_start = clock_monotonic(), t_last = 0, last_loss = NAN, val = NAN;
  int64_t first_step = r.st.step;
  faults fault;
  faults_read(&fault);
  while (r.st.step < r.c.steps) {
    int64_t step = r.st.step;
    if (h->cancelled(ctx)) {
      if (save_checkpoint(&r, err, sizeof err) != 0)
        h->fail(ctx, "stopped at step %lld, and the checkpoint failed: %s",
                (long long)step, err);
      else
        h->fail(ctx, "stopped at step %lld; checkpoint %s (resume: auto "
                     "continues from it)", (long long)step, r.last_ckpt);
      goto done;
    }
    /* Where the step's time goes: data wait (blocked on the loader),
     * forward, backward (trainkit_forward_backward measures them; see
     * trainkit.h for why host clocks are right on the CPU and CUDA events
     * on the GPU), optimizer (zeroing the gradients, clipping, the spike
     * guard, the update) and communication (none in one process; ZeRO's
     * collectives will fill it). */
    double t_step = clock_monotonic();
    trainkit_times tt;
    double loss = 0;
    if (engine_forward_backward(r.eng, r.c.overfit ? NULL : r.train,
                                r.inputs, r.targets, r.c.accum, &loss, &tt,
                                err, sizeof err) != 0) {
      h->fail(ctx, "step %lld: %s", (long long)step, err);
      goto done;
    }
    double tk = clock_monotonic();
    double t_data = tt.data, t_fwd = tt.forward, t_bwd = tt.backward;
    double t_opt = tt.zero, t_comm = 0;
    if (faults_take(&fault, step)) {
      h->log(ctx, DAGRUN_LOG_WARN, "step %lld: injected bad batch "
             "(DAGRUN_FAULT_SPIKE_STEPS)", (long long)step);
      loss *= 20;
      if (engine_scale_grads(r.eng, 100, err, sizeof err) != 0) {
        h->fail(ctx, "step %lld: %s", (long long)step, err);
        goto done;
      }
      stagekit_lap(&tk); /* fault injection is no phase of a real step */
    }
    double gnorm = 0;
    if (engine_clip_grad_norm(r.eng, r.c.grad_clip, &gnorm, err,
                              sizeof err) != 0) {
      h->fail(ctx, "step %lld: %s", (long long)step, err);
      goto done;
    }
    double lr = lr_at(&r.c.sched, step), z = 0;
    int apply = 1;
    if (r.c.spike_on && spike_check(&r.guard, loss, gnorm, &z)) {
      spike_report(&r, step, loss, gnorm, z, 0);
      if (r.c.spike.policy == SPIKE_SKIP)
        apply = 0;
      else if (r.c.spike.policy == SPIKE_RESET) {
        apply = 0;
        if (engine_optim_reset(r.eng, err, sizeof err) != 0) {
          h->fail(ctx, "step %lld: %s", (long long)step, err);
          goto done;
        }
        spike_forget(&r.guard);
      } else if (r.c.spike.policy == SPIKE_ROLLBACK) {
        apply = 0;
        if (r.last_ckpt[0]) {
          /* Back to the checkpoint's weights and optimizer, but the data
           * stays where it is: the batches since are skipped. */
          loader *keep = r.st.train;
          uint64_t events = r.guard.events;
          r.st.train = NULL;
          if (trainstate_load(r.last_ckpt, &r.st, err, sizeof err) != 0 ||
              engine_load_from_host(r.eng, err, sizeof err) != 0) {
            h->fail(ctx, "rollback to %s: %s", r.last_ckpt, err);
            goto done;
          }
          r.st.train = keep;
          r.guard.events = events;
          h->log(ctx, DAGRUN_LOG_INFO, "rolled back to step %lld",
                 (long long)r.st.step);
          continue;
        }
        h->log(ctx, DAGRUN_LOG_WARN, "no checkpoint yet: update skipped");
      }
    }
    /* A non-finite loss or gradient never reaches the weights, whatever
     * the policy (lower_lr would apply it, none would not look). */
    if (apply && (!isfinite(loss) || !isfinite(gnorm))) {
      apply = 0;
      h->log(ctx, DAGRUN_LOG_WARN,
             "step %lld: loss %g, grad norm %g: update skipped",
             (long long)step, loss, gnorm);
    }
    if (apply) {
      lr *= spike_lr_factor(&r.guard);
      if (engine_step(r.eng, (float)lr, err, sizeof err) != 0) {
        h->fail(ctx, "step %lld: %s", (long long)step, err);
        goto done;
      }
    }
    t_opt += stagekit_lap(&tk);
    double step_s = tk - t_step;
    r.st.step++;
    r.st.tokens += tokens_per_step;
    last_loss = loss;
    h->metric(ctx, "loss", loss, r.st.step);
    h->metric(ctx, "lr", lr, r.st.step);
    h->metric(ctx, "grad_norm", gnorm, r.st.step);
    step_times times = {t_data, t_fwd, t_bwd, t_opt, t_comm, step_s};
    report_step_times(&r, r.st.step, &times, fpt, tokens_per_step, 1);
    watch_data(&r, &dwatch, r.st.step, t_data, step_s);
    double now = clock_monotonic();
    if (now - t_last > 0.5 || r.st.step == r.c.steps) {
      double el = now - t_start;
      double tps = (double)(r.st.step - first_step) * tokens_per_step / el;
      double eta = tps > 0 ? (double)(r.c.steps - r.st.step) * tokens_per_step / tps : 0;
      char msg[160];
      snprintf(msg, sizeof msg, "step %lld/%lld loss %.4f %.0f tok/s ETA %.0fs",
               (long long)r.st.step, (long long)r.c.steps, loss, tps, eta);
      h->progress(ctx, (double)r.st.step / r.c.steps, msg);
      h->metric(ctx, "tokens_per_s", tps, r.st.step);
      t_last = now;
    }
    if (!r.c.overfit && r.c.eval_every && r.st.step % r.c.eval_every == 0 &&
        r.st.step < r.c.steps) {
      val = evaluate_one(&r, r.st.step);
      h->log(ctx, DAGRUN_LOG_INFO, "step %lld: loss %.4f, val loss %.4f",
             (long long)r.st.step, loss, val);
    }
    if (r.c.ckpt_every && r.st.step % r.c.ckpt_every == 0 &&
        r.st.step < r.c.steps && save_checkpoint(&r, err, sizeof err) != 0) {
      h->fail(ctx, "checkpoint: %s", err);
      goto done;
    }
  }
  double train_s = clock_monotonic() - t_start;
  if (r.c.overfit) {
    double l = NAN;
    if (engine_loss(r.eng, r.inputs, r.targets, &l, err, sizeof err) != 0)
      l = NAN;
    h->log(ctx, DAGRUN_LOG_INFO, "overfit_one_batch: loss %.4f after %lld "
           "steps (target %g)", l, (long long)r.c.steps, r.c.overfit_target);
    if (!(l < r.c.overfit_target)) {
      h->fail(ctx, "overfit_one_batch: loss %.4f did not fall below %g in "
                   "%lld steps: the model, data or learning rate is broken",
              l, r.c.overfit_target, (long long)r.c.steps);
      goto done;
    }
    last_loss = l;
  } else {
    val = evaluate_one(&r, r.st.step);
  }
  if (save_checkpoint(&r, err, sizeof err) != 0) {
    h->fail(ctx, "final checkpoint: %s", err);
    goto done;
  }
  const char *out = h->dir(ctx, DAGRUN_DIR_OUT);
  char *samples = fileio_join(out, "samples.txt");
  if (samples && r.c.nsamples > 0 && write_samples(&r, r.model, samples) == 0)
    h->output(ctx, "samples", samples);
  free(samples);

  double tps = r.st.step > first_step && train_s > 0
                   ? (double)(r.st.step - first_step) * tokens_per_step / train_s
                   : 0;
  h->log(ctx, DAGRUN_LOG_INFO,
         "done: %lld steps, %.0f tokens/s; loss %.4f, val loss %.4f, unigram "
         "entropy %.4f; %llu loss spikes; peak RSS %.0f MiB",
         (long long)r.st.step, tps, last_loss, val, H1,
         (unsigned long long)r.guard.events, stagekit_peak_rss() / 1048576.0);
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "steps", (double)r.st.step);
  cJSON_AddNumberToObject(s, "tokens", (double)r.st.tokens);
  cJSON_AddNumberToObject(s, "parameters", (double)np);
  cJSON_AddNumberToObject(s, "loss", last_loss);
  if (isfinite(val))
    cJSON_AddNumberToObject(s, "val_loss", val);
  else
    cJSON_AddNullToObject(s, "val_loss");
  cJSON_AddNumberToObject(s, "unigram_entropy", H1);
  cJSON_AddNumberToObject(s, "ln_vocab", lnV);
  if (isfinite(init_loss))
    cJSON_AddNumberToObject(s, "init_loss", init_loss);
  cJSON_AddNumberToObject(s, "tokens_per_s", tps);
  cJSON_AddNumberToObject(s, "spike_events", (double)r.guard.events);
  cJSON_AddNumberToObject(s, "peak_rss_bytes", (double)stagekit_peak_rss());
  cJSON_AddStringToObject(s, "device", dev == ENGINE_CUDA ? "cuda" : "cpu");
  cJSON_AddStringToObject(s, "device_reason", why);
  if (dev == ENGINE_CUDA) {
    engine_memory em;
    if (engine_memory_get(r.eng, &em, err, sizeof err) == 0) {
      cJSON_AddNumberToObject(s, "gpu_allocated_bytes", (double)em.allocated);
      cJSON_AddNumberToObject(s, "gpu_device_used_bytes",
                              (double)em.device_used);
    }
  }
  cJSON_AddStringToObject(s, "checkpoint", r.last_ckpt);
  cJSON_AddStringToObject(s, "tokenizer", r.data.tokenizer);
  char *spath = write_summary(out, s, err, sizeof err);
  if (!spath) {
    h->fail(ctx, "summary.json: %s", err);
    goto done;
  }
  h->output(ctx, "checkpoint", r.last_ckpt);
  h->output(ctx, "checkpoints", r.ckpt_dir);
  h->output(ctx, "tokenizer", r.data.tokenizer);
  h->output(ctx, "summary", spath);
  free(spath);
  char num[32];
  snprintf(num, sizeof num, "%.6f", val);
  h->output(ctx, "val_loss", num);
  status = 0;
done:
  free(config_text);
  free_run(&r);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "train",
    "1.0.0",
    "Trains a GPT on token files with dagrun's engine (CPU or one GPU): "
    "AdamW or Lion, "
    "warmup + cosine, clipping, spike guard, exact resume; data-parallel "
    "with ZeRO in a gang.",
    params,
    run,
    choices,
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
