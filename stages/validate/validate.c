/*
 * validate: the built-in stage that evaluates a trained model on the
 * validation token files and decides whether it is good enough to keep.
 *
 *   validate:
 *     stage: validate
 *     needs: [train]
 *     with: {checkpoint: "${tasks.train.outputs.checkpoint}",
 *            data: "${tasks.tokenize.outputs.dir}", max_val_loss: 5.5}
 *
 * It measures mean loss, perplexity and next-token accuracy over the
 * validation split (all of it by default; sequential windows, so the
 * numbers are the same every time), checks the quality gates, writes the
 * numbers to out/metrics.json and a few generated samples next to them.
 * A failed gate fails the task with the numbers in the message, so that
 * the checkpoint and export tasks after it do not run on a bad model.
 *
 * Contract. Reads: the model (checkpoint: a train checkpoint, a
 * directory of them and its latest or `step`, a promoted model or a
 * Hugging Face GPT-2 or Llama directory, all through ckpt/modeldir.h), the
 * tokenize stage's directory (data: its validation token files and its
 * tokenizer, which must have the model's vocabulary), and for
 * min_improvement the models registry (common/registry.h). Writes:
 * out/metrics.json (atomically; written whether the gates pass or not,
 * so that a failed run still shows its numbers) and out/samples.txt.
 * Outputs, only when every gate passes: checkpoint (the model directory
 * evaluated), metrics, tokenizer, val_loss, perplexity, accuracy, step
 * and samples. Exit status: EXIT_BAD_PARAMS for a param out of range,
 * EXIT_FAILED for a model or data that cannot be used, a failed
 * evaluation or a failed gate; samples that cannot be made are only a
 * warning, since they judge nothing.
 *
 * It evaluates on the CPU engine (model/evaluate.h) whatever device
 * trained the model: every checkpoint is the CPU engine's format, and
 * the numbers then do not depend on the machine the task ran on.
 */
#include <dagrun/plugin.h>

#include "ckpt/modeldir.h"
#include "common/registry.h"
#include "common/stagekit.h"
#include "common/textgen.h"
#include "common/tokdata.h"
#include "data/dataloader.h"
#include "lib/bpe/bpe.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "model/evaluate.h"
#include "model/gpt.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const dagrun_param_spec params[] = {
    {"checkpoint", DAGRUN_PARAM_STRING, NULL, 1,
     "The model: a checkpoint (\"${tasks.train.outputs.checkpoint}\"), a "
     "directory of checkpoints (its latest, or `step`), a promoted model "
     "or a Hugging Face GPT-2 export"},
    {"step", DAGRUN_PARAM_INT, "-1", 0,
     "With a directory of checkpoints: the step to evaluate (-1: the "
     "latest)"},
    {"data", DAGRUN_PARAM_STRING, NULL, 1,
     "The tokenize stage's output directory "
     "(\"${tasks.tokenize.outputs.dir}\"): its validation files"},
    {"batch_size", DAGRUN_PARAM_INT, "8", 0, "Sequences per batch"},
    {"seq_len", DAGRUN_PARAM_INT, "0", 0,
     "Tokens per sequence (0: the model's context length)"},
    {"max_batches", DAGRUN_PARAM_INT, "0", 0,
     "Batches to evaluate (0: the whole validation split)"},
    {"max_val_loss", DAGRUN_PARAM_FLOAT, NULL, 0,
     "Gate: fail when the validation loss is above this"},
    {"max_perplexity", DAGRUN_PARAM_FLOAT, NULL, 0,
     "Gate: fail when the perplexity is above this"},
    {"min_improvement", DAGRUN_PARAM_FLOAT, NULL, 0,
     "Gate: fail unless the loss is at least this much below the previous "
     "promoted model's (0: no worse; negative: may be that much worse)"},
    {"models", DAGRUN_PARAM_STRING, "", 0,
     "The models registry min_improvement compares with (\"\": the "
     "checkpoint stage's default, models/<dag> beside runs/)"},
    {"samples", DAGRUN_PARAM_INT, "3", 0,
     "Texts generated into out/samples.txt (0: none)"},
    {"prompt", DAGRUN_PARAM_STRING, "", 0,
     "Prompt of the samples (\"\": the start of a document)"},
    {"sample_tokens", DAGRUN_PARAM_INT, "64", 0, "Tokens per sample at most"},
    {"temperature", DAGRUN_PARAM_FLOAT, "0.8", 0,
     "Sampling temperature (0: greedy)"},
    {"top_k", DAGRUN_PARAM_INT, "40", 0, "Sample among the k likeliest"},
    TEXTGEN_PARAM_SPECS,
    {"seed", DAGRUN_PARAM_INT, "1234", 0, "Seed of the samples"},
    {"threads", DAGRUN_PARAM_INT, "0", 0, "CPU threads (0: one per CPU)"},
    {NULL, 0, NULL, 0, NULL},
};

/* A gate that may be absent: on = 0 when the DAG does not set it. The
 * gates have no defaults: a DAG that sets none validates and reports
 * without judging. */
typedef struct gate {
  int on;
  double limit;
} gate;

typedef struct vcfg {
  const char *checkpoint, *data, *models, *prompt;
  int64_t step, B, T, max_batches, nsamples, sample_tokens, top_k, seed,
      threads;
  textgen_opts gen; /* the samples' sampling and stop strings (stop freed
                       at the end of run) */
  gate max_loss, max_ppl, min_improvement;
} vcfg;

/* One run of the stage: its params, what it opened, what it found. */
typedef struct vrun {
  dagrun_ctx *ctx;
  const dagrun_host *h;
  vcfg c;
  modeldir_info md;
  tokdata td;
  gpt *model;
  loader *val;
  eval_result ev;
  cJSON *failures; /* array of messages, one per failed gate */
  cJSON *previous; /* the previous promoted model, or NULL */
} vrun;

static void get_gate(vrun *r, const char *name, gate *g) {
  g->on = r->h->param_float(r->ctx, name, &g->limit) == 0;
}

/* Reads and checks the params into r->c; a bad one fails the task
 * (host->fail) and returns -1. */
static int read_cfg(vrun *r) {
  const dagrun_host *h = r->h;
  vcfg *c = &r->c;
  h->param_string(r->ctx, "checkpoint", &c->checkpoint);
  h->param_string(r->ctx, "data", &c->data);
  h->param_string(r->ctx, "models", &c->models);
  h->param_string(r->ctx, "prompt", &c->prompt);
  c->gen.sampling = (sampler_opts)SAMPLER_OPTS_INIT;
  h->param_float(r->ctx, "temperature", &c->gen.sampling.temperature);
  if (stagekit_param_int(r->ctx, r->h, "step", -1, INT64_MAX, &c->step) ||
      stagekit_param_int(r->ctx, r->h, "batch_size", 1, 1 << 16, &c->B) ||
      stagekit_param_int(r->ctx, r->h, "seq_len", 0, 1 << 20, &c->T) ||
      stagekit_param_int(r->ctx, r->h, "max_batches", 0, INT64_C(1) << 40, &c->max_batches) ||
      stagekit_param_int(r->ctx, r->h, "samples", 0, 100, &c->nsamples) ||
      stagekit_param_int(r->ctx, r->h, "sample_tokens", 1, 1 << 20, &c->sample_tokens) ||
      stagekit_param_int(r->ctx, r->h, "top_k", 0, 1 << 30, &c->top_k) ||
      stagekit_param_int(r->ctx, r->h, "seed", 0, INT64_MAX, &c->seed) ||
      stagekit_param_int(r->ctx, r->h, "threads", 0, 1024, &c->threads))
    return -1;
  get_gate(r, "max_val_loss", &c->max_loss);
  get_gate(r, "max_perplexity", &c->max_ppl);
  get_gate(r, "min_improvement", &c->min_improvement);
  if ((c->max_loss.on && !(c->max_loss.limit > 0)) ||
      (c->max_ppl.on && !(c->max_ppl.limit >= 1))) {
    h->fail(r->ctx, "max_val_loss must be above 0 and max_perplexity at "
                    "least 1");
    return -1;
  }
  if (!isfinite(c->gen.sampling.temperature) ||
      c->gen.sampling.temperature < 0) {
    h->fail(r->ctx, "temperature must be 0 (greedy) or above");
    return -1;
  }
  c->gen.sampling.top_k = (int)c->top_k;
  if (textgen_read_params(r->ctx, h, &c->gen) != 0)
    return -1;
  if (!c->threads)
    c->threads = stagekit_cpu_count();
  return 0;
}

/* checkpoint (+ step) -> the model directory to open. malloc'd. */
static char *model_path(vrun *r) {
  const char *dag_dir = r->h->dir(r->ctx, DAGRUN_DIR_DAG);
  char *p = r->c.checkpoint[0] == '/' ? strdup(r->c.checkpoint)
                                      : fileio_join(dag_dir, r->c.checkpoint);
  if (!p || r->c.step < 0)
    return p;
  char name[32];
  snprintf(name, sizeof name, "step-%08lld", (long long)r->c.step);
  char *q = fileio_join(p, name);
  free(p);
  return q;
}

/* Opens the model, the token files and the validation loader, and checks
 * that they belong together (one vocabulary and tokenizer, a context long
 * enough for seq_len). 0, or -1 with the task failed. */
static int load(vrun *r) {
  const dagrun_host *h = r->h;
  char err[2048];
  char *path = model_path(r);
  int rc = path ? modeldir_open(path, &r->md, err, sizeof err) : -1;
  if (rc != 0) {
    h->fail(r->ctx, "checkpoint: %s", path ? err : "out of memory");
    free(path);
    return -1;
  }
  free(path);
  if (r->md.skipped[0])
    h->log(r->ctx, DAGRUN_LOG_WARN, "checkpoint: %s", r->md.skipped);
  if (tokdata_open(h->dir(r->ctx, DAGRUN_DIR_DAG), r->c.data, &r->td, err,
                   sizeof err) != 0) {
    h->fail(r->ctx, "data: %s", err);
    return -1;
  }
  const gpt_config *mc = &r->md.config;
  if (mc->vocab_size != r->td.vocab_size) {
    h->fail(r->ctx,
            "the model %s has a vocabulary of %d tokens but the data %s was "
            "tokenized into %d: they do not belong together",
            r->md.dir, mc->vocab_size, r->td.dir, r->td.vocab_size);
    return -1;
  }
  if (tokdata_fits_model(&r->td, r->md.dir, r->md.tokenizer,
                         r->md.tokenizer_sha256, err, sizeof err) != 0) {
    h->fail(r->ctx, "%s: they do not belong together", err);
    return -1;
  }
  if (r->td.nval == 0) {
    h->fail(r->ctx, "%s has no validation files: give the shard stage a "
                    "val_fraction above 0", r->td.dir);
    return -1;
  }
  if (r->c.T == 0)
    r->c.T = mc->block_size;
  if (r->c.T > mc->block_size) {
    h->fail(r->ctx, "seq_len %lld is longer than the model's context %d",
            (long long)r->c.T, mc->block_size);
    return -1;
  }
  if (modeldir_load(&r->md, &r->model, err, sizeof err) != 0) {
    h->fail(r->ctx, "%s", err);
    return -1;
  }
  loader_config lc = {
      .paths = (const char *const *)r->td.val,
      .npaths = r->td.nval,
      .B = (int)r->c.B,
      .T = (int)r->c.T,
      .order = LOADER_SEQUENTIAL,
  };
  /* A small validation split may not fill one batch: evaluate what there
   * is with fewer or shorter sequences rather than nothing, and say so. */
  if (loader_create_fitting(&lc, 1, 8, &r->val, err, sizeof err) != 0) {
    h->fail(r->ctx, "validation data: %s", err);
    return -1;
  }
  if (lc.B != r->c.B || lc.T != r->c.T) {
    h->log(r->ctx, DAGRUN_LOG_WARN,
           "the validation split is too small for batches of %lldx%lld: "
           "evaluating %dx%d", (long long)r->c.B, (long long)r->c.T, lc.B,
           lc.T);
    r->c.B = lc.B;
    r->c.T = lc.T;
  }
  h->log(r->ctx, DAGRUN_LOG_INFO,
         "model %s (%s, step %lld): %d layers, width %d, context %d, vocab "
         "%d; validation: %zu files, %llu tokens",
         r->md.dir, r->md.kind == MODELDIR_HF ? "Hugging Face" : "checkpoint",
         (long long)r->md.step, mc->n_layer, mc->n_embd, mc->block_size,
         mc->vocab_size, r->td.nval,
         (unsigned long long)loader_tokens(r->val));
  return 0;
}

/* Records a failed gate: in r->failures for metrics.json and the final
 * message, and at once in the log, so that a reader of a long log sees
 * it where it happened. */
static void add_failure(vrun *r, const char *fmt, ...) DAGRUN_PRINTF(2, 3);
static void add_failure(vrun *r, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cJSON_AddItemToArray(r->failures, cJSON_CreateString(msg));
  r->h->log(r->ctx, DAGRUN_LOG_ERROR, "gate failed: %s", msg);
}

/* The newest promoted model that has a validation loss, or NULL (its
 * entry as JSON; caller deletes). A registry that cannot be read is a
 * warning and no previous model: min_improvement compares with the
 * past, and a first run has none, so it passes rather than blocking
 * every new DAG. */
static cJSON *previous_model(vrun *r, double *loss) {
  char err[1024];
  char *root = r->c.models[0]
                   ? (r->c.models[0] == '/'
                          ? strdup(r->c.models)
                          : fileio_join(r->h->dir(r->ctx, DAGRUN_DIR_DAG),
                                        r->c.models))
                   : registry_default_root(
                         r->h->dir(r->ctx, DAGRUN_DIR_RUN),
                         r->h->info(r->ctx, DAGRUN_INFO_DAG));
  registry_entry *v = NULL;
  size_t n = 0;
  cJSON *prev = NULL;
  if (!root || registry_list(root, &v, &n, err, sizeof err) != 0) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "models registry %s: %s",
              root ? root : "?", root ? err : "out of memory");
  } else {
    for (size_t i = n; i-- > 0;)
      if (isfinite(v[i].val_loss)) {
        prev = cJSON_CreateObject();
        cJSON_AddStringToObject(prev, "path", v[i].path);
        cJSON_AddStringToObject(prev, "run", v[i].run);
        cJSON_AddNumberToObject(prev, "step", (double)v[i].step);
        cJSON_AddNumberToObject(prev, "val_loss", v[i].val_loss);
        *loss = v[i].val_loss;
        break;
      }
    if (!prev)
      r->h->log(r->ctx, DAGRUN_LOG_INFO,
                "min_improvement: no validated model in %s yet, so nothing "
                "to improve on: the gate passes", root);
  }
  free(v);
  free(root);
  return prev;
}

/* Checks every gate that is set, and that the loss is a finite number,
 * and records each failure; all of them are checked, so that one message
 * names every limit missed. The comparisons are written as
 * !(value <= limit) so that a NAN loss fails a gate instead of slipping
 * through. */
static void check_gates(vrun *r) {
  const vcfg *c = &r->c;
  const eval_result *e = &r->ev;
  /* Not a gate one sets: a loss that is no number measures nothing (a
   * diverged model), and without gates it would pass as a result. */
  if (!isfinite(e->loss))
    add_failure(r,
                "val_loss is %g, not a finite number: the model's "
                "outputs are not numbers (did training diverge?)",
                fabs(e->loss));
  if (c->max_loss.on && !(e->loss <= c->max_loss.limit))
    add_failure(r, "val_loss %.4f is above max_val_loss %g", e->loss,
                c->max_loss.limit);
  if (c->max_ppl.on && !(e->perplexity <= c->max_ppl.limit))
    add_failure(r, "perplexity %.2f is above max_perplexity %g",
                e->perplexity, c->max_ppl.limit);
  if (c->min_improvement.on) {
    double prev = NAN;
    r->previous = previous_model(r, &prev);
    /* 1e-9: the previous loss went through JSON text, which may round
     * away its last bit; no gate should hinge on that. */
    if (r->previous && !(prev - e->loss >= c->min_improvement.limit - 1e-9))
      add_failure(r,
                  "val_loss %.4f against %.4f of the previous model %s: an "
                  "improvement of %.4f, less than min_improvement %g",
                  e->loss, prev,
                  cJSON_GetObjectItem(r->previous, "path")->valuestring,
                  prev - e->loss, c->min_improvement.limit);
  }
}

static void add_gate(cJSON *o, const char *name, const gate *g) {
  if (g->on)
    cJSON_AddNumberToObject(o, name, g->limit);
  else
    cJSON_AddNullToObject(o, name);
}

/* out/metrics.json: what the checkpoint stage records with the model. */
static char *metrics_json(vrun *r, const char *samples, double seconds) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "format", "dagrun-validation");
  cJSON_AddNumberToObject(o, "version", 1);
  cJSON_AddStringToObject(o, "checkpoint", r->md.dir);
  cJSON_AddNumberToObject(o, "step", (double)r->md.step);
  cJSON_AddStringToObject(o, "data", r->td.dir);
  cJSON_AddNumberToObject(o, "val_loss", r->ev.loss);
  cJSON_AddNumberToObject(o, "perplexity", r->ev.perplexity);
  cJSON_AddNumberToObject(o, "accuracy", r->ev.accuracy);
  cJSON_AddNumberToObject(o, "tokens", (double)r->ev.tokens);
  cJSON_AddNumberToObject(o, "batches", (double)r->ev.batches);
  cJSON_AddNumberToObject(o, "windows", (double)r->ev.windows);
  cJSON_AddNumberToObject(o, "batch_size", (double)r->c.B);
  cJSON_AddNumberToObject(o, "seq_len", (double)r->c.T);
  cJSON *g = cJSON_AddObjectToObject(o, "gates");
  add_gate(g, "max_val_loss", &r->c.max_loss);
  add_gate(g, "max_perplexity", &r->c.max_ppl);
  add_gate(g, "min_improvement", &r->c.min_improvement);
  cJSON_AddItemToObject(o, "previous",
                        r->previous ? cJSON_Duplicate(r->previous, 1)
                                    : cJSON_CreateNull());
  cJSON_AddBoolToObject(o, "passed", cJSON_GetArraySize(r->failures) == 0);
  cJSON_AddItemToObject(o, "failures", cJSON_Duplicate(r->failures, 1));
  if (samples)
    cJSON_AddStringToObject(o, "samples", samples);
  cJSON_AddNumberToObject(o, "seconds", seconds);
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}

/* r->c.nsamples texts from the model into path (textgen.h), seeded by
 * the seed param so that two validations of one model read alike.
 * 0, or -1 with a warning (no samples is no reason to fail). */
static int write_samples(vrun *r, const char *path) {
  char err[1024];
  bpe *tok = NULL;
  if (bpe_load_hf(r->td.tokenizer, &tok, err, sizeof err) != 0) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "no samples: %s", err);
    return -1;
  }
  textgen_opts o = r->c.gen;
  o.prompt = r->c.prompt;
  o.max_tokens = (int)r->c.sample_tokens;
  o.seed = (uint64_t)r->c.seed;
  o.stop_at_eot = 1;
  int rc = textgen_write_samples(r->model, tok, &o, (int)r->c.nsamples, path,
                                 err, sizeof err);
  if (rc != 0)
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "no samples: %s", err);
  bpe_destroy(tok);
  return rc;
}

/* evaluate_model's stop check: a timeout or Ctrl-C ends a long
 * evaluation between batches. */
static int stage_cancelled(void *arg) {
  vrun *r = arg;
  return r->h->cancelled(r->ctx);
}

/* The stage: params, load, evaluate, gates, metrics.json, outputs. The
 * metrics file is written before the gates' verdict is given, so that
 * a failed task leaves the numbers that failed it. */
static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  vrun r = {.ctx = ctx, .h = h};
  int status = EXIT_FAILED;
  char err[2048];
  char *samples = NULL, *mpath = NULL, *text = NULL;
  r.failures = cJSON_CreateArray();
  if (read_cfg(&r) != 0) {
    status = EXIT_BAD_PARAMS;
    goto done;
  }
  omp_set_num_threads((int)r.c.threads);
  openblas_set_num_threads((int)r.c.threads);
  if (load(&r) != 0)
    goto done;

  double t0 = clock_monotonic();
  if (evaluate_model(r.model, r.val, (int)r.c.B, (int)r.c.T,
                     (uint64_t)r.c.max_batches, stage_cancelled, &r, &r.ev,
                     err, sizeof err) != 0) {
    h->fail(ctx, "evaluation: %s", err);
    goto done;
  }
  double seconds = clock_monotonic() - t0;
  int64_t step = r.md.step > 0 ? r.md.step : 0;
  h->metric(ctx, "val_loss", r.ev.loss, step);
  h->metric(ctx, "perplexity", r.ev.perplexity, step);
  h->metric(ctx, "accuracy", r.ev.accuracy, step);
  h->log(ctx, DAGRUN_LOG_INFO,
         "val_loss %.4f, perplexity %.2f, next-token accuracy %.2f%% over "
         "%llu tokens (%llu windows of %lld in %llu batches of up to %lld) "
         "in %.1fs",
         r.ev.loss, r.ev.perplexity, 100 * r.ev.accuracy,
         (unsigned long long)r.ev.tokens, (unsigned long long)r.ev.windows,
         (long long)r.c.T, (unsigned long long)r.ev.batches, (long long)r.c.B,
         seconds);

  check_gates(&r);
  const char *out = h->dir(ctx, DAGRUN_DIR_OUT);
  if (r.c.nsamples > 0) {
    samples = fileio_join(out, "samples.txt");
    if (samples && write_samples(&r, samples) != 0) {
      free(samples);
      samples = NULL;
    }
  }
  mpath = fileio_join(out, "metrics.json");
  text = metrics_json(&r, samples, seconds);
  if (!mpath || !text ||
      fileio_write_atomic(mpath, text, strlen(text), err, sizeof err) != 0) {
    h->fail(ctx, "metrics.json: %s", mpath && text ? err : "out of memory");
    goto done;
  }
  int nfail = cJSON_GetArraySize(r.failures);
  if (nfail > 0) {
    /* All failed gates in one message: the user fixes them at once. */
    char msg[4096];
    size_t len = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, r.failures) {
      int k = snprintf(msg + len, sizeof msg - len, "%s%s", len ? "; " : "",
                       it->valuestring);
      if (k < 0 || (size_t)k >= sizeof msg - len)
        break;
      len += (size_t)k;
    }
    h->fail(ctx, "quality gate%s failed: %s (metrics: %s)",
            nfail > 1 ? "s" : "", msg, mpath);
    goto done;
  }
  char num[64];
  h->output(ctx, "checkpoint", r.md.dir);
  h->output(ctx, "metrics", mpath);
  h->output(ctx, "tokenizer", r.td.tokenizer);
  snprintf(num, sizeof num, "%.6f", r.ev.loss);
  h->output(ctx, "val_loss", num);
  snprintf(num, sizeof num, "%.6f", r.ev.perplexity);
  h->output(ctx, "perplexity", num);
  snprintf(num, sizeof num, "%.6f", r.ev.accuracy);
  h->output(ctx, "accuracy", num);
  snprintf(num, sizeof num, "%lld", (long long)r.md.step);
  h->output(ctx, "step", num);
  if (samples)
    h->output(ctx, "samples", samples);
  status = 0;
done:
  free(text);
  free(mpath);
  free(samples);
  cJSON_Delete(r.failures);
  cJSON_Delete(r.previous);
  free((void *)r.c.gen.stop);
  loader_destroy(r.val);
  gpt_destroy(r.model);
  tokdata_free(&r.td);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "validate",
    "1.0.0",
    "Evaluates a model on the validation split (loss, perplexity, "
    "accuracy), applies quality gates, writes samples.",
    params,
    run,
    NULL, /* no choices */
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
