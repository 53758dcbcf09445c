/* The train stage's run context; see trainrun.h. */
#include "trainrun.h"

#include "ckpt/ckpt.h"
#include "common/lmeval.h"
#include "common/stagekit.h"
#include "common/textgen.h"
#include "lib/bpe/bpe.h"
#include "lib/clock.h"
#include "lib/fileio.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const trainrun_schedule_names[] = {[LR_COSINE] = "cosine",
                                               [LR_LINEAR] = "linear",
                                               [LR_CONSTANT] = "constant",
                                               [LR_CONSTANT + 1] = NULL};
const char *const trainrun_spike_policy_names[] = {
    "none",
    [SPIKE_SKIP + 1] = "skip",
    [SPIKE_LOWER_LR + 1] = "lower_lr",
    [SPIKE_RESET + 1] = "reset",
    [SPIKE_ROLLBACK + 1] = "rollback",
    [SPIKE_ROLLBACK + 2] = NULL};
const char *const trainrun_zero_stage_names[] = {"0", "1", "2", "3", NULL};
const char *const trainrun_autocast_names[] = {"none", "bf16", NULL};

/* ---- Params ---- */

/* The sizes of the run: batch, steps, the cadences, threads. */
static int read_sizes(dagrun_ctx *ctx, const dagrun_host *h, trainrun_cfg *c) {
  int64_t v;
  if (stagekit_param_int(ctx, h, "batch_size", 1, 1 << 20, &v))
    return -1;
  c->B = (int)v;
  if (stagekit_param_int(ctx, h, "grad_accum", 1, 1 << 20, &v))
    return -1;
  c->accum = (int)v;
  if (stagekit_param_int(ctx, h, "steps", 1, INT64_C(1) << 40, &c->steps) ||
      stagekit_param_int(ctx, h, "eval_every", 0, INT64_C(1) << 40,
                         &c->eval_every) ||
      stagekit_param_int(ctx, h, "eval_batches", 1, INT64_C(1) << 30,
                         &c->eval_batches) ||
      stagekit_param_int(ctx, h, "checkpoint_every", 0, INT64_C(1) << 40,
                         &c->ckpt_every) ||
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
  return 0;
}

/* The learning rate's schedule (after steps: warmup defaults to 5% of
 * them). */
static int read_schedule(dagrun_ctx *ctx, const dagrun_host *h,
                         trainrun_cfg *c) {
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
  if (c->sched.warmup_steps > c->steps)
    h->log(ctx, DAGRUN_LOG_WARN,
           "warmup %lld is longer than steps %lld: the learning rate never "
           "reaches lr (it peaks at %.0f%% of it)",
           (long long)c->sched.warmup_steps, (long long)c->steps,
           100.0 * (double)c->steps / (double)c->sched.warmup_steps);
  c->sched.cooldown_steps = cooldown;
  int k;
  if (stagekit_param_choice(ctx, h, "schedule", trainrun_schedule_names, &k))
    return -1;
  c->sched.decay = (lr_decay)k;
  if (c->sched.min_lr > lr) {
    h->fail(ctx, "min_lr %g is above lr %g", c->sched.min_lr, lr);
    return -1;
  }
  return 0;
}

/* dropout, after device: only the CPU engine has it, so device: cuda is
 * refused with it and auto means cpu. */
static int read_dropout(dagrun_ctx *ctx, const dagrun_host *h,
                        trainrun_cfg *c) {
  h->param_float(ctx, "dropout", &c->dropout);
  if (!(c->dropout >= 0 && c->dropout < 1)) {
    h->fail(ctx, "dropout must be in [0,1)");
    return -1;
  }
  if (c->dropout == 0)
    return 0;
  if (c->m.cfg.family == GPT_FAMILY_LLAMA) {
    /* Its forward has no dropout sites: refused, not ignored. */
    h->fail(ctx,
            "dropout %g: the Llama family has no dropout yet (the GPT-2 "
            "family has): set dropout: 0",
            c->dropout);
    return -1;
  }
  if (c->device == ENGINE_WANT_CUDA) {
    h->fail(ctx,
            "dropout %g: the CUDA engine has no dropout (the CPU engine "
            "has): set device: cpu, or dropout: 0",
            c->dropout);
    return -1;
  }
  if (c->device == ENGINE_WANT_AUTO)
    h->log(ctx, DAGRUN_LOG_INFO,
           "dropout %g: training on the CPU engine (the CUDA engine has no "
           "dropout)",
           c->dropout);
  c->device = ENGINE_WANT_CPU;
  return 0;
}

/* The loss-spike guard and the device. */
static int read_guard_device(dagrun_ctx *ctx, const dagrun_host *h,
                             trainrun_cfg *c) {
  int k;
  if (stagekit_param_choice(ctx, h, "spike_policy", trainrun_spike_policy_names,
                            &k))
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
  if (stagekit_param_choice(ctx, h, "autocast", trainrun_autocast_names, &k))
    return -1;
  c->autocast = (gpt_autocast)k;
  h->param_bool(ctx, "deterministic", &c->deterministic);
  return read_dropout(ctx, h, c);
}

/* The overfit check and the samples. */
static int read_samples(dagrun_ctx *ctx, const dagrun_host *h,
                        trainrun_cfg *c) {
  int64_t v;
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
  c->gen.sampling = (sampler_opts)SAMPLER_OPTS_INIT;
  c->gen.sampling.top_k = (int)v;
  h->param_float(ctx, "temperature", &c->gen.sampling.temperature);
  if (!(c->gen.sampling.temperature > 0)) {
    h->fail(ctx, "temperature must be above 0");
    return -1;
  }
  return textgen_read_params(ctx, h, &c->gen);
}

/* eval_text and eval_choices: absolute, or under the DAG's directory;
 * a file that cannot be read fails the task now, not at step N. */
static int read_lm_eval(trainrun *r) {
  static const char *const names[] = {"eval_text", "eval_choices"};
  char **dst[] = {&r->lm_text, &r->lm_choices};
  for (int i = 0; i < 2; i++) {
    const char *z = "";
    r->h->param_string(r->ctx, names[i], &z);
    if (!z[0])
      continue;
    *dst[i] = z[0] == '/' ? strdup(z)
                          : fileio_join(r->h->dir(r->ctx, DAGRUN_DIR_DAG), z);
    if (!*dst[i] || access(*dst[i], R_OK) != 0) {
      r->h->fail(r->ctx, "%s: %s: %s", names[i], *dst[i] ? *dst[i] : z,
                 *dst[i] ? strerror(errno) : "out of memory");
      return -1;
    }
  }
  return 0;
}

int trainrun_init(trainrun *r) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  trainrun_cfg *c = &r->c;
  memset(c, 0, sizeof *c);
  if (trainkit_read_model(ctx, h, &c->m) != 0 ||
      datamix_read(ctx, h, &r->mix) != 0 ||
      trainkit_read_optim(ctx, h, &c->opt, &c->grad_clip) != 0)
    return -1;
  h->param_string(ctx, "resume", &c->resume);
  h->param_string(ctx, "sample_prompt", &c->prompt);
  if (read_sizes(ctx, h, c) != 0 || read_schedule(ctx, h, c) != 0 ||
      read_guard_device(ctx, h, c) != 0 || read_samples(ctx, h, c) != 0 ||
      read_lm_eval(r) != 0)
    return -1;
  trainkit_set_threads(c->threads);
  snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s/checkpoints",
           h->dir(ctx, DAGRUN_DIR_TASK));
  return 0;
}

/* ---- Setup and teardown ---- */

/* A validation loader, sequential over n of the validation files from
 * first, into *ld and its start. Files that cannot be read or hold ids
 * outside the vocabulary fail the task, as the validate stage fails on
 * them (-1). A split too small for one batch is scored in fewer or
 * shorter sequences, as the validate stage scores it
 * (loader_create_fitting), where one process scores it (fit); a gang's
 * ranks share each batch and its score functions take the training
 * shape, so there it is left out (NULL), with a warning naming what
 * (training goes on without). */
static int open_val_loader(trainrun *r, int nranks, int fit, size_t first,
                           size_t n, const char *what, loader **ld,
                           loader_pos *start) {
  char err[1024];
  const int B = r->c.B * nranks; /* a gang's ranks share each batch */
  loader_config vc = {
      .paths = (const char *const *)r->data.val + first,
      .npaths = n,
      .B = B,
      .T = r->c.m.T,
      .order = LOADER_SEQUENTIAL,
      .seed = r->c.seed,
  };
  if (loader_create_fitting(&vc, 1, 8, ld, err, sizeof err) != 0) {
    r->h->fail(r->ctx, "validation data%s: %s", what, err);
    return -1;
  }
  if ((vc.B != B || vc.T != r->c.m.T) && !fit) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "no validation%s: the split is too small for batches of %dx%d, "
              "which a gang's ranks share",
              what, B, r->c.m.T);
    loader_destroy(*ld);
    *ld = NULL;
    return 0;
  }
  if (vc.B != B || vc.T != r->c.m.T)
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "the validation split%s is too small for batches of %dx%d: "
              "evaluating %dx%d",
              what, B, r->c.m.T, vc.B, vc.T);
  loader_get_pos(*ld, start);
  return 0;
}

/* The validation loaders: one over every validation file, or with two or
 * more data_mix sources one per source over its own (trainrun_validate). */
static int open_validation(trainrun *r, int nranks, int gang) {
  for (size_t i = 0; i < LOADER_MAX_SOURCES; i++)
    r->src_val_loss[i] = NAN;
  if (r->mix.n < 2 && !r->data.nval) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "%s has no validation files (the shard stage's val_fraction "
              "left it none): no val_loss, nothing to tell overfitting by",
              r->data.dir);
    return 0;
  }
  if (r->mix.n < 2)
    return open_val_loader(r, nranks, !gang, 0, r->data.nval, "", &r->val,
                           &r->val_start);
  for (size_t i = 0; i < r->mix.n; i++) {
    char what[64];
    snprintf(what, sizeof what, " of %s", r->mix.src[i].name);
    if (!r->mix.val_n[i])
      r->h->log(r->ctx, DAGRUN_LOG_WARN,
                "data_mix: %s has no validation files: val_loss leaves it out",
                r->mix.src[i].name);
    else if (open_val_loader(r, nranks, !gang, r->mix.val_first[i],
                             r->mix.val_n[i], what, &r->src_val[i],
                             &r->src_val_start[i]) != 0)
      return -1;
  }
  return 0;
}

/* data_mix's sources, or data's directory, into r->data. */
static int open_data(trainrun *r) {
  if (!r->mix.n)
    return trainkit_open_data(r->ctx, r->h, &r->c.m, &r->data);
  if (datamix_open(r->ctx, r->h, &r->mix, &r->data) != 0)
    return -1;
  r->c.m.cfg.vocab_size = r->data.vocab_size;
  return 0;
}

/* When every source of data_mix has a budget, the loader ends after
 * loader_max_batches: steps (and the schedule's length) are cut to the
 * steps those hold, so that the run ends on its last full step with the
 * schedule decayed, rather than running out mid-run. A step takes accum
 * batches in one process, one (the global batch) in a gang. */
static int fit_steps(trainrun *r, int gang) {
  uint64_t mb = loader_max_batches(r->train);
  if (mb == UINT64_MAX)
    return 0;
  uint64_t held = mb / (uint64_t)(gang ? 1 : r->c.accum);
  if (held == 0) {
    r->h->fail(r->ctx,
               "data_mix: the sources' budgets hold %llu batches, fewer than "
               "one step",
               (unsigned long long)mb);
    return -1;
  }
  if (held >= (uint64_t)r->c.steps)
    return 0;
  r->h->log(r->ctx, DAGRUN_LOG_WARN,
            "data_mix: every source has a budget, and together they hold "
            "%llu steps of the %lld asked: training ends at step %llu (the "
            "schedule ends there too)",
            (unsigned long long)held, (long long)r->c.steps,
            (unsigned long long)held);
  r->c.steps = (int64_t)held;
  r->c.sched.total_steps = (int64_t)held;
  return 0;
}

int trainrun_setup(trainrun *r, int nranks, int gang) {
  const dagrun_host *h = r->h;
  char err[1024];
  /* A checkpoint of this task, when resume finds one, replaces
   * init_from's weights later: it was made from them. */
  if (open_data(r) != 0 ||
      trainkit_make_model(r->ctx, h, &r->c.m, &r->data, r->c.seed, &r->model,
                          &r->init_dir) != 0)
    return -1;
  /* Training forwards only (trainkit_forward_backward); the CPU engine's. */
  gpt_set_dropout(r->model, (float)r->c.dropout, r->c.seed);
  /* The CPU engine's recomputation and autocast (the GPU's are its own). */
  if (gpt_set_recompute(r->model, (gpt_recompute)r->c.recompute, err,
                        sizeof err) != 0 ||
      gpt_set_autocast(r->model, r->c.autocast, err, sizeof err) != 0) {
    h->fail(r->ctx, "%s", err);
    return -1;
  }
  if (!gang &&
      trainkit_make_optim(r->model, &r->c.opt, &r->opt, err, sizeof err) != 0) {
    h->fail(r->ctx, "optimizer: %s", err);
    return -1;
  }
  spike_config sc = r->c.spike;
  if (spike_init(&r->guard, &sc, err, sizeof err) != 0) {
    h->fail(r->ctx, "spike guard: %s", err);
    return -1;
  }
  if (trainkit_train_loader(&r->data, r->mix.src, r->mix.n, r->c.B * nranks,
                            r->c.m.T, r->c.seed, r->c.prefetch, &r->train, err,
                            sizeof err) != 0) {
    h->fail(r->ctx, "%s: %s", r->mix.n ? "data_mix" : "train data", err);
    return -1;
  }
  if (fit_steps(r, gang) != 0)
    return -1;
  if (open_validation(r, nranks, gang) != 0)
    return -1;
  size_t bt = (size_t)r->c.B * (size_t)nranks * (size_t)r->c.m.T;
  r->inputs = malloc(bt * sizeof(uint32_t));
  r->targets = malloc(bt * sizeof(uint32_t));
  if (!r->inputs || !r->targets) {
    h->fail(r->ctx, "out of memory");
    return -1;
  }
  r->st = (train_state){.model = r->model,
                        .opt = r->opt,
                        .train = r->train,
                        .guard = &r->guard,
                        .init_loss = NAN};
  return 0;
}

void trainrun_free(trainrun *r) {
  tokdata_free(&r->data);
  datamix_free(&r->mix);
  free(r->init_dir);
  loader_destroy(r->train);
  loader_destroy(r->val);
  for (size_t i = 0; i < LOADER_MAX_SOURCES; i++)
    loader_destroy(r->src_val[i]);
  engine_destroy(r->eng);
  optim_destroy(r->opt);
  gpt_destroy(r->model);
  free(r->inputs);
  free(r->targets);
  free(r->config_text);
  free((void *)r->c.gen.stop);
  free(r->lm_text);
  free(r->lm_choices);
  bpe_destroy(r->lm_tok);
}

/* The tokenizer's path lets modeldir.h find the tokenizer of a bare
 * checkpoint, and its sha256 is its identity, which every stage that
 * reads the checkpoint with data or a tokenizer compares (tokdata.h);
 * device, recompute and deterministic are one process's (a gang's are in
 * its log and summary). */
void trainrun_set_config(trainrun *r) {
  const trainrun_cfg *c = &r->c;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", c->m.name);
  if (r->init_dir)
    cJSON_AddStringToObject(o, "init_from", r->init_dir);
  if (r->data.tokenizer)
    cJSON_AddStringToObject(o, "tokenizer", r->data.tokenizer);
  if (r->data.tokenizer_sha256[0])
    cJSON_AddStringToObject(o, "tokenizer_sha256", r->data.tokenizer_sha256);
  if (r->mix.n)
    cJSON_AddItemToObject(o, "data_mix", datamix_json(&r->mix, NULL, NULL));
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
                          trainrun_schedule_names[c->sched.decay]);
  cJSON_AddNumberToObject(o, "cooldown", (double)c->sched.cooldown_steps);
  cJSON_AddNumberToObject(o, "beta1", c->opt.beta1);
  cJSON_AddNumberToObject(o, "beta2", c->opt.beta2);
  cJSON_AddNumberToObject(o, "eps", c->opt.eps);
  cJSON_AddNumberToObject(o, "weight_decay", c->opt.weight_decay);
  /* As the model's tensors say (trainkit_make_model set them). */
  const gpt_tensor *wte =
      r->model ? gpt_tensor_find(r->model, "wte.weight") : NULL;
  cJSON_AddStringToObject(o, "decay_tensors",
                          wte && wte->decay ? "all_2d" : "matrices");
  cJSON_AddNumberToObject(o, "grad_clip", c->grad_clip);
  cJSON_AddNumberToObject(o, "seed", (double)c->seed);
  cJSON_AddNumberToObject(o, "dropout", c->dropout);
  cJSON_AddStringToObject(o, "autocast", trainrun_autocast_names[c->autocast]);
  if (r->eng) {
    cJSON_AddStringToObject(
        o, "device", engine_get_device(r->eng) == ENGINE_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(o, "recompute",
                            engine_recompute_name(c->recompute));
    cJSON_AddBoolToObject(o, "deterministic", c->deterministic);
  }
  r->config_text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  r->st.config_json = r->config_text;
  r->st.tokenizer = r->data.tokenizer;
  r->st.tokenizer_sha256 = r->data.tokenizer_sha256;
}

/* ---- Checkpoints, validation, faults ---- */

/* The checkpoints resume: auto skipped, for the warning when none was
 * left. */
typedef struct skipped {
  trainrun *r;
  int n;
  char names[512]; /* base names, ", "-separated, cut short when long */
} skipped;

/* ckpt_find_latest's report of a checkpoint it skips: a warning. */
static void report_invalid(void *arg, const char *dir, const char *why) {
  skipped *sk = arg;
  sk->r->h->log(sk->r->ctx, DAGRUN_LOG_WARN, "skipping checkpoint %s: %s", dir,
                why);
  const char *base = strrchr(dir, '/');
  size_t used = strlen(sk->names);
  snprintf(sk->names + used, sizeof sk->names - used, "%s%s", sk->n ? ", " : "",
           base ? base + 1 : dir);
  sk->n++;
}

char *trainrun_resume_dir(trainrun *r) {
  char err[1024];
  char *dir = NULL;
  if (strcmp(r->c.resume, "never") == 0)
    return NULL;
  if (strcmp(r->c.resume, "auto") == 0) {
    skipped sk = {.r = r};
    if (ckpt_find_latest(r->ckpt_dir, &dir, report_invalid, &sk, err,
                         sizeof err) != 0) {
      r->h->log(r->ctx, DAGRUN_LOG_WARN, "%s", err);
      return NULL;
    }
    /* Starting over silently would look like a resume that worked: say
     * it once, plainly, and count it where dashboards look. */
    if (!dir && sk.n > 0) {
      r->h->log(r->ctx, DAGRUN_LOG_WARN,
                "resume: auto: every checkpoint in %s is corrupt (%d: %s): "
                "starting again from step 0",
                r->ckpt_dir, sk.n, sk.names);
      r->h->metric(r->ctx, "corrupt_checkpoints", sk.n, 0);
    }
    return dir;
  }
  return r->c.resume[0] == '/'
             ? strdup(r->c.resume)
             : fileio_join(r->h->dir(r->ctx, DAGRUN_DIR_DAG), r->c.resume);
}

int trainrun_verify_resume(const char *dir, char *err, size_t errlen) {
  struct stat st;
  int found = stat(dir, &st) == 0;
  if (!found || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen,
             "%s: %s (resume is auto, never, or a checkpoint directory)", dir,
             found ? "not a directory" : strerror(errno));
    return -1;
  }
  char sub[1024];
  if (ckpt_verify(dir, sub, sizeof sub) != 0) {
    snprintf(err, errlen, "%s: %s", dir, sub);
    return -1;
  }
  return 0;
}

int trainrun_check_resumed(const trainrun *r, const char *dir, char *err,
                           size_t errlen) {
  if (r->st.step <= r->c.steps)
    return 0;
  snprintf(err, errlen,
           "%s is at step %lld, past steps: %lld (the run's total, not the "
           "steps to add): raise steps to train on from it",
           dir, (long long)r->st.step, (long long)r->c.steps);
  return -1;
}

void trainrun_peek_batch(trainrun *r) {
  loader_pos pos;
  loader_get_pos(r->train, &pos);
  loader_next(r->train, r->inputs, r->targets);
  loader_set_pos(r->train, &pos);
}

void trainrun_report_init_loss(trainrun *r, double loss) {
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "loss at initialization %.4f, ln(vocab) %.4f", loss, r->lnV);
  r->h->metric(r->ctx, "init_loss", loss, 0);
  r->st.init_loss = loss;
}

/* A validation that fails (bad ids in the split, out of memory) fails
 * the run, as the validate stage fails on the same files: a val_loss
 * left out would pass the model on unmeasured. */
static void val_failed(trainrun *r, const char *what, const char *err,
                       int64_t step) {
  r->h->fail(r->ctx, "validation%s at step %lld: %s", what, (long long)step,
             err);
  r->val_failed = 1;
}

double trainrun_val_report(trainrun *r, int rc, double loss, const char *err,
                           int64_t step) {
  if (rc != 0) {
    val_failed(r, "", err, step);
    return NAN;
  }
  r->h->metric(r->ctx, "val_loss", loss, step);
  return loss;
}

/* trainrun_validate's per-source validation (r->mix.n >= 2). */
static double validate_sources(trainrun *r, int64_t step, int report,
                               trainrun_score_fn fn, void *arg) {
  char err[512], line[2048];
  double sum = 0, wsum = 0;
  int n = snprintf(line, sizeof line,
                   "step %lld: val loss by source:", (long long)step);
  for (size_t i = 0; i < r->mix.n; i++) {
    const loader_source *s = &r->mix.src[i];
    double loss = NAN;
    r->src_val_loss[i] = NAN;
    if (!r->src_val[i])
      continue;
    loader_set_pos(r->src_val[i], &r->src_val_start[i]);
    if (fn(arg, r, r->src_val[i], &loss, err, sizeof err) != 0) {
      char what[80];
      snprintf(what, sizeof what, " of %s", s->name);
      if (report)
        val_failed(r, what, err, step);
      continue;
    }
    r->src_val_loss[i] = loss;
    sum += s->weight * loss;
    wsum += s->weight;
    if (!report)
      continue;
    char name[64];
    snprintf(name, sizeof name, "val_loss/%s", s->name);
    r->h->metric(r->ctx, name, loss, step);
    if (n > 0 && (size_t)n < sizeof line)
      n += snprintf(line + n, sizeof line - (size_t)n, " %s %.4f", s->name,
                    loss);
  }
  if (!report)
    return NAN;
  if (!(wsum > 0)) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "validation: no data_mix source was scored");
    return NAN;
  }
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "%s", line);
  return trainrun_val_report(r, 0, sum / wsum, "", step);
}

double trainrun_validate(trainrun *r, int64_t step, int report,
                         trainrun_score_fn fn, void *arg) {
  if (r->mix.n >= 2)
    return validate_sources(r, step, report, fn, arg);
  if (!r->val)
    return NAN;
  char err[512] = "";
  double loss = NAN;
  loader_set_pos(r->val, &r->val_start);
  int rc = fn(arg, r, r->val, &loss, err, sizeof err);
  return report ? trainrun_val_report(r, rc, loss, err, step) : NAN;
}

void trainrun_lm_eval(trainrun *r, gpt *model, int64_t step) {
  char err[1024];
  if (!r->lm_text && !r->lm_choices)
    return;
  if (!model) {
    if (!r->lm_warned)
      r->h->log(r->ctx, DAGRUN_LOG_WARN,
                "eval_text and eval_choices are measured on the CPU "
                "engine's model only: not during this run (device cuda); "
                "an eval task after it measures the checkpoint");
    r->lm_warned = 1;
    return;
  }
  if (!r->lm_tok &&
      bpe_load_hf(r->data.tokenizer, &r->lm_tok, err, sizeof err) != 0) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "eval: tokenizer: %s", err);
    return;
  }
  lmeval_opts o = {.T = r->c.m.T, .B = r->c.B};
  lmeval_ppl p;
  lmeval_mc mc;
  if (r->lm_text && lmeval_text(model, r->lm_tok, r->lm_text, &o, &p, err,
                                sizeof err) != 0)
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "eval_text: %s", err);
  else if (r->lm_text) {
    r->h->metric(r->ctx, "eval_loss", p.loss, step);
    r->h->metric(r->ctx, "eval_perplexity", p.perplexity, step);
    r->h->log(r->ctx, DAGRUN_LOG_INFO, "step %lld: eval_text perplexity %.3f",
              (long long)step, p.perplexity);
  }
  if (r->lm_choices && lmeval_choices(model, r->lm_tok, r->lm_choices, NULL,
                                      &o, &mc, err, sizeof err) != 0)
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "eval_choices: %s", err);
  else if (r->lm_choices) {
    r->h->metric(r->ctx, "mc_accuracy", mc.accuracy, step);
    r->h->metric(r->ctx, "mc_accuracy_low", mc.ci_low, step);
    r->h->metric(r->ctx, "mc_accuracy_high", mc.ci_high, step);
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "step %lld: eval_choices accuracy %.4f (%zu of %zu)",
              (long long)step, mc.accuracy, mc.correct, mc.items);
  }
}

/* A comma-separated list of step numbers from the environment. */
static void faults_read(trainrun_faults *f, const char *env) {
  const char *z = getenv(env);
  f->n = 0;
  while (z && *z && f->n < TRAINRUN_MAX_FAULTS) {
    char *end;
    long long v = strtoll(z, &end, 10);
    if (end == z)
      break;
    f->step[f->n++] = v;
    z = *end == ',' ? end + 1 : end;
  }
}

void trainrun_faults_read(trainrun_faults *f) {
  faults_read(f, "DAGRUN_FAULT_SPIKE_STEPS");
}

void trainrun_faults_read_nan(trainrun_faults *f) {
  faults_read(f, "DAGRUN_FAULT_NAN_STEPS");
}

int trainrun_faults_take(trainrun_faults *f, int64_t step) {
  for (int i = 0; i < f->n; i++)
    if (f->step[i] == step) {
      f->step[i] = f->step[--f->n];
      return 1;
    }
  return 0;
}

/* The spike, its log line and spike_events are at the step its loss is
 * reported at (the steps done once this one is: step + 1, as
 * trainrun_report_step numbers them), so that a plot marks it on the loss
 * curve and the log names the step the metrics do. */
void trainrun_spike_report(trainrun *r, int64_t step, double loss, double gnorm,
                           double z, int in_gang) {
  const dagrun_host *h = r->h;
  spike_policy p = r->c.spike.policy;
  int64_t at = step + 1;
  h->log(r->ctx, DAGRUN_LOG_WARN,
         "step %lld: loss spike (loss %.4f, grad norm %.3f, z %.1f): %s",
         (long long)at, loss, gnorm, z,
         p == SPIKE_SKIP       ? "update skipped"
         : p == SPIKE_LOWER_LR ? "learning rate lowered"
         : in_gang             ? "update skipped (a gang cannot reset or "
                                 "roll back inside a ZeRO step)"
         : p == SPIKE_RESET    ? "update skipped, optimizer moments reset"
                               : "rolling back");
  h->metric(r->ctx, "spike_events", (double)r->guard.events, at);
  h->metric(r->ctx, "spike", loss, at);
}

/* ---- Where the time goes ---- */

/* Model FLOPs per trained token (forward + backward):
 *
 *   6N + 6*L*C*T
 *
 * N the parameters that take part in matrix products (all but GPT-2's
 * position embeddings, which are only added, and an untied Llama's token
 * embedding, which is only looked up; a tied embedding counts as the LM
 * head), L layers, C width, T sequence length. 6N is 2N
 * for the forward pass and 4N for the backward; 6*L*C*T is attention's
 * QK^T and AV products, PaLM's 12*L*C*T halved for the causal mask, since
 * MFU counts the work the model needs, not what a kernel spends (the CPU
 * engine computes the full T x T products). */
static double flops_per_token(const gpt_config *mc, size_t n_params, int T) {
  double N = (double)n_params;
  if (mc->family == GPT_FAMILY_LLAMA)
    N -= mc->untied_head ? (double)mc->padded_vocab * mc->n_embd : 0.0;
  else
    N -= (double)mc->block_size * mc->n_embd;
  return 6.0 * N + 6.0 * mc->n_layer * (double)mc->n_embd * T;
}

void trainrun_loop_start(trainrun *r, size_t tokens_per_step) {
  r->tokens_per_step = tokens_per_step;
  r->fpt = flops_per_token(gpt_get_config(r->model), gpt_num_params(r->model),
                           r->c.m.T);
  r->t_start = clock_monotonic();
  r->t_last = 0;
  r->first_step = r->st.step;
  r->last_loss = NAN;
  r->val_loss = NAN;
}

void trainrun_report_step(trainrun *r, double loss, double lr, double gnorm,
                          const trainrun_times *t, int ranks) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  int64_t step = r->st.step;
  h->metric(ctx, "loss", loss, step);
  h->metric(ctx, "lr", lr, step);
  h->metric(ctx, "grad_norm", gnorm, step);
  h->metric(ctx, "time_data_s", t->data, step);
  h->metric(ctx, "time_forward_s", t->forward, step);
  h->metric(ctx, "time_backward_s", t->backward, step);
  h->metric(ctx, "time_optimizer_s", t->optimizer, step);
  h->metric(ctx, "time_comm_s", t->comm, step);
  h->metric(ctx, "step_time_s", t->step, step);
  h->metric(ctx, "tokens", (double)r->st.tokens, step);
  for (size_t i = 0; i < r->mix.n; i++) {
    char name[64];
    snprintf(name, sizeof name, "mix_tokens_%s", r->mix.src[i].name);
    h->metric(ctx, name, (double)loader_source_tokens(r->train, i), step);
  }
  /* This step's achieved model FLOP/s (tokens_per_s is the run's
   * average, evaluations and checkpoints included). */
  if (t->step > 0) {
    double fps = r->fpt * (double)r->tokens_per_step / t->step;
    h->metric(ctx, "flops_per_s", fps, step);
    if (r->c.peak_tflops > 0)
      h->metric(ctx, "mfu", fps / (ranks * r->c.peak_tflops * 1e12), step);
  }
}

void trainrun_progress(trainrun *r, double loss, int eta) {
  double now = clock_monotonic();
  if (!(now - r->t_last > 0.5 || r->st.step == r->c.steps))
    return;
  double el = now - r->t_start;
  double tps = (double)(r->st.step - r->first_step) * r->tokens_per_step / el;
  char msg[160];
  int n = snprintf(msg, sizeof msg, "step %lld/%lld loss %.4f %.0f tok/s",
                   (long long)r->st.step, (long long)r->c.steps, loss, tps);
  if (eta && n > 0 && (size_t)n < sizeof msg) {
    double left =
        tps > 0 ? (double)(r->c.steps - r->st.step) * r->tokens_per_step / tps
                : 0;
    snprintf(msg + n, sizeof msg - (size_t)n, " ETA %.0fs", left);
  }
  r->h->progress(r->ctx, (double)r->st.step / r->c.steps, msg);
  r->h->metric(r->ctx, "tokens_per_s", tps, r->st.step);
  r->t_last = now;
}

double trainrun_tokens_per_s(const trainrun *r, double train_s) {
  return r->st.step > r->first_step && train_s > 0
             ? (double)(r->st.step - r->first_step) * r->tokens_per_step /
                   train_s
             : 0;
}

/* ---- The end of a run ---- */

void trainrun_samples(trainrun *r, gpt *model) {
  char err[1024];
  if (r->c.nsamples <= 0)
    return;
  char *path = fileio_join(r->h->dir(r->ctx, DAGRUN_DIR_OUT), "samples.txt");
  bpe *tok = NULL;
  if (!path)
    return;
  if (bpe_load_hf(r->data.tokenizer, &tok, err, sizeof err) != 0) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "no samples: %s", err);
    free(path);
    return;
  }
  textgen_opts o = r->c.gen;
  o.prompt = r->c.prompt;
  o.max_tokens = r->c.sample_tokens;
  o.seed = r->c.seed;
  o.stop_at_eot = 1;
  if (textgen_write_samples(model, tok, &o, r->c.nsamples, path, err,
                            sizeof err) != 0)
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "no samples: %s", err);
  else
    r->h->output(r->ctx, "samples", path);
  bpe_destroy(tok);
  free(path);
}

cJSON *trainrun_summary_start(const trainrun *r, size_t np) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddNumberToObject(s, "steps", (double)r->st.step);
  cJSON_AddNumberToObject(s, "tokens", (double)r->st.tokens);
  cJSON_AddNumberToObject(s, "parameters", (double)np);
  if (r->mix.n)
    cJSON_AddItemToObject(s, "data_mix",
                          datamix_json(&r->mix, r->train, r->src_val_loss));
  return s;
}

void trainrun_summary_losses(const trainrun *r, cJSON *s) {
  cJSON_AddNumberToObject(s, "loss", r->last_loss);
  if (isfinite(r->val_loss))
    cJSON_AddNumberToObject(s, "val_loss", r->val_loss);
  else
    cJSON_AddNullToObject(s, "val_loss");
}

void trainrun_summary_rates(const trainrun *r, cJSON *s, double tps) {
  cJSON_AddNumberToObject(s, "ln_vocab", r->lnV);
  if (isfinite(r->st.init_loss))
    cJSON_AddNumberToObject(s, "init_loss", r->st.init_loss);
  cJSON_AddNumberToObject(s, "tokens_per_s", tps);
  cJSON_AddNumberToObject(s, "spike_events", (double)r->guard.events);
  cJSON_AddNumberToObject(s, "nonfinite_steps", (double)r->nonfinite_steps);
}

int trainrun_count_step(trainrun *r, int64_t step, double loss, double gnorm,
                        int report, char *err, size_t errlen) {
  if (isfinite(loss) && isfinite(gnorm)) {
    r->nonfinite_run = 0;
    return 0;
  }
  r->nonfinite_steps++;
  r->nonfinite_run++;
  if (report)
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "step %lld: loss %g, grad norm %g: update skipped",
              (long long)step, loss, gnorm);
  if (r->nonfinite_run < TRAINRUN_MAX_NONFINITE_RUN)
    return 0;
  snprintf(err, errlen,
           "step %lld: the loss or grad norm was not finite %lld steps in a "
           "row (%lld in all): the run diverged; lower lr, or raise warmup "
           "or grad_clip",
           (long long)step, (long long)r->nonfinite_run,
           (long long)r->nonfinite_steps);
  return -1;
}

/* Whether the run scores a validation split (one of data_mix's sources'
 * at least); overfit_one_batch scores none. */
static int has_validation(const trainrun *r) {
  if (r->c.overfit)
    return 0;
  for (size_t i = 0; i < LOADER_MAX_SOURCES; i++)
    if (r->src_val[i])
      return 1;
  return r->val != NULL;
}

int trainrun_check_end(trainrun *r) {
  if (r->val_failed)
    return -1; /* it said why */
  /* A resumed run with no step left to take (a retry after its last
   * step) has no loss of its own. */
  int stepped = r->st.step > r->first_step;
  /* The weights are judged by what measures them, the last validation: a
   * step skipped for a loss or grad norm that was not finite left them as
   * they were (ten in a row failed the run already, trainrun_count_step),
   * so a bad batch at the very end is a warning, as anywhere else. */
  if (has_validation(r) && !isfinite(r->val_loss)) {
    r->h->fail(r->ctx,
               "the run ended with val loss %g (loss %g; %lld steps skipped "
               "for a loss or grad norm that was not finite): its weights are "
               "not usable; lower lr, or raise warmup or grad_clip",
               r->val_loss, r->last_loss, (long long)r->nonfinite_steps);
    return -1;
  }
  if (stepped && r->nonfinite_run > 0)
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "the last %lld steps were skipped for a loss or grad norm that "
              "was not finite (%lld in all): the weights are those before "
              "them",
              (long long)r->nonfinite_run, (long long)r->nonfinite_steps);
  if (stepped && isfinite(r->st.init_loss) && r->last_loss > r->st.init_loss)
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "the final loss %.4f is above the loss at initialization %.4f: "
              "the run diverged (lower lr, or raise warmup?)",
              r->last_loss, r->st.init_loss);
  return 0;
}

int trainrun_finish(trainrun *r, cJSON *s, const char *ckpt, const char *ckpts,
                    const char *sharded, const char *sharded_dir) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  cJSON_AddStringToObject(s, "checkpoint", ckpt);
  if (sharded)
    cJSON_AddStringToObject(s, "sharded_checkpoint", sharded);
  cJSON_AddStringToObject(s, "tokenizer", r->data.tokenizer);
  char *text = cJSON_Print(s), *spath = NULL;
  cJSON_Delete(s);
  int rc = trainkit_write_out(ctx, h, "summary.json", text, &spath);
  free(text);
  if (rc != 0)
    return -1;
  h->output(ctx, "checkpoint", ckpt);
  h->output(ctx, "checkpoints", ckpts);
  if (sharded_dir)
    h->output(ctx, "sharded_checkpoints", sharded_dir);
  h->output(ctx, "tokenizer", r->data.tokenizer);
  h->output(ctx, "summary", spath);
  free(spath);
  char num[32];
  snprintf(num, sizeof num, "%.6f", r->val_loss);
  h->output(ctx, "val_loss", num);
  return 0;
}
