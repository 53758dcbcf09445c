/*
 * eval: the built-in stage that measures a model on what the DAG names:
 * its perplexity on a text file or a tokenize stage's directory, and its
 * accuracy on a multiple-choice task in HellaSwag's JSONL layout
 * (common/lmeval.h has the formats and the scoring).
 *
 *   eval:
 *     stage: eval
 *     needs: [train]
 *     with: {model: "${tasks.train.outputs.checkpoint}",
 *            text: held-out.txt, choices: tests/data/mc-fortunes.jsonl}
 *
 * Contract. Reads: the model (anything ckpt/modeldir.h opens) and its
 * tokenizer (or the tokenizer param's), text / data / choices. Relative
 * paths are relative to the DAG file's directory. Writes: out/eval.json
 * (the summary) and, with choices, out/choices.jsonl (one line per item:
 * index, label, predicted, correct, the endings' mean losses). Metrics
 * (report.html and TensorBoard through the host's metric path), at the
 * model's step: eval_loss and eval_perplexity; mc_accuracy,
 * mc_accuracy_low and mc_accuracy_high (the 95% Wilson interval).
 * Outputs: model, metrics (eval.json); loss, perplexity, tokens with a
 * perplexity; accuracy, accuracy_low, accuracy_high, chance, items,
 * results with choices. Exit status: EXIT_BAD_PARAMS for params out of
 * range or none of text, data and choices; EXIT_FAILED for a model or
 * input that cannot be used.
 *
 * Like validate, it runs on the CPU engine, so its numbers do not depend
 * on the machine.
 */
#include <dagrun/plugin.h>

#include "common/lmeval.h"
#include "common/stagekit.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const split_names[] = {"val", "train", NULL};

static const dagrun_param_choice choices[] = {{"split", split_names},
                                              {NULL, NULL}};

static const dagrun_param_spec params[] = {
    {"model", DAGRUN_PARAM_STRING, NULL, 1,
     "The model: a checkpoint (\"${tasks.train.outputs.checkpoint}\"), a "
     "directory of checkpoints (its latest), a promoted model or a Hugging "
     "Face GPT-2 or Llama directory"},
    {"text", DAGRUN_PARAM_STRING, "", 0,
     "A text file whose perplexity to take, tokenized with the model's "
     "tokenizer"},
    {"data", DAGRUN_PARAM_STRING, "", 0,
     "Or a tokenize stage's directory (\"${tasks.tokenize.outputs.dir}\") "
     "whose split to take the perplexity of"},
    {"split", DAGRUN_PARAM_STRING, "val", 0, "data's split: val or train"},
    {"choices", DAGRUN_PARAM_STRING, "", 0,
     "A multiple-choice JSONL in HellaSwag's layout ({\"ctx\", \"endings\", "
     "\"label\"} a line) to score"},
    {"tokenizer", DAGRUN_PARAM_STRING, "", 0,
     "A tokenizer.json (\"\": the model's)"},
    {"seq_len", DAGRUN_PARAM_INT, "0", 0,
     "Perplexity: tokens of context at most (0: the model's context)"},
    {"batch_size", DAGRUN_PARAM_INT, "8", 0,
     "Perplexity: windows per forward pass"},
    {"max_tokens", DAGRUN_PARAM_INT, "0", 0,
     "Perplexity: tokens to score at most (0: all)"},
    {"threads", DAGRUN_PARAM_INT, "0", 0, "CPU threads (0: one per CPU)"},
    {NULL, 0, NULL, 0, NULL},
};

/* A path param as the stage reads it: absolute, or under the DAG's
 * directory; "" stays "". malloc'd (NULL out of memory). */
static char *path_param(dagrun_ctx *ctx, const dagrun_host *h,
                        const char *name) {
  const char *z = "";
  h->param_string(ctx, name, &z);
  if (!z[0] || z[0] == '/')
    return strdup(z);
  return fileio_join(h->dir(ctx, DAGRUN_DIR_DAG), z);
}

/* lmeval's stop check: a timeout or Ctrl-C ends a long evaluation. */
typedef struct stage_arg {
  dagrun_ctx *ctx;
  const dagrun_host *h;
} stage_arg;

static int stage_cancelled(void *arg) {
  stage_arg *a = arg;
  return a->h->cancelled(a->ctx);
}

/* The numbers as metrics, outputs and one log line. */
static void report(dagrun_ctx *ctx, const dagrun_host *h, const lmeval_job *j,
                   const char *summary_path) {
  char num[64];
  int64_t step = j->md.step > 0 ? j->md.step : 0;
  h->output(ctx, "model", j->md.dir);
  h->output(ctx, "metrics", summary_path);
  if (j->have_ppl) {
    h->metric(ctx, "eval_loss", j->ppl.loss, step);
    h->metric(ctx, "eval_perplexity", j->ppl.perplexity, step);
    snprintf(num, sizeof num, "%.6f", j->ppl.loss);
    h->output(ctx, "loss", num);
    snprintf(num, sizeof num, "%.6f", j->ppl.perplexity);
    h->output(ctx, "perplexity", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)j->ppl.tokens);
    h->output(ctx, "tokens", num);
    h->log(ctx, DAGRUN_LOG_INFO,
           "perplexity %.3f (loss %.4f nats/token) over %llu tokens of %s",
           j->ppl.perplexity, j->ppl.loss, (unsigned long long)j->ppl.tokens,
           j->text[0] ? j->text : j->data);
  }
  if (j->have_mc) {
    const lmeval_mc *mc = &j->mc;
    h->metric(ctx, "mc_accuracy", mc->accuracy, step);
    h->metric(ctx, "mc_accuracy_low", mc->ci_low, step);
    h->metric(ctx, "mc_accuracy_high", mc->ci_high, step);
    const char *names[] = {"accuracy", "accuracy_low", "accuracy_high",
                           "chance"};
    double vals[] = {mc->accuracy, mc->ci_low, mc->ci_high, mc->chance};
    for (int i = 0; i < 4; i++) {
      snprintf(num, sizeof num, "%.6f", vals[i]);
      h->output(ctx, names[i], num);
    }
    snprintf(num, sizeof num, "%zu", mc->items);
    h->output(ctx, "items", num);
    h->output(ctx, "results", j->items_path);
    h->log(ctx, DAGRUN_LOG_INFO,
           "multiple choice: accuracy %.4f (%zu of %zu; 95%% interval "
           "%.4f-%.4f; chance %.4f) on %s",
           mc->accuracy, mc->correct, mc->items, mc->ci_low, mc->ci_high,
           mc->chance, j->choices);
  }
}

/* The params into j (paths resolved into paths[], which the caller
 * frees). 0, or -1 with the attempt failed. */
static int read_params(dagrun_ctx *ctx, const dagrun_host *h, lmeval_job *j,
                       char **paths) {
  static const char *const names[] = {"model", "text", "choices", "tokenizer"};
  for (int i = 0; i < 4; i++)
    if (!(paths[i] = path_param(ctx, h, names[i]))) {
      h->fail(ctx, "out of memory");
      return -1;
    }
  j->model = paths[0];
  j->text = paths[1];
  j->choices = paths[2];
  j->tokenizer = paths[3];
  h->param_string(ctx, "data", &j->data);
  h->param_string(ctx, "split", &j->split);
  j->base = h->dir(ctx, DAGRUN_DIR_DAG);
  j->out_dir = h->dir(ctx, DAGRUN_DIR_OUT);
  int64_t T, B, max, threads;
  if (stagekit_param_int(ctx, h, "seq_len", 0, 1 << 20, &T) ||
      stagekit_param_int(ctx, h, "batch_size", 1, 1 << 16, &B) ||
      stagekit_param_int(ctx, h, "max_tokens", 0, INT64_MAX, &max) ||
      stagekit_param_int(ctx, h, "threads", 0, 1024, &threads))
    return -1;
  j->o.T = (int)T;
  j->o.B = (int)B;
  j->o.max_tokens = (uint64_t)max;
  if (!j->text[0] && !j->data[0] && !j->choices[0]) {
    h->fail(ctx, "nothing to evaluate: set text or data (a perplexity) "
                 "and/or choices (a multiple-choice JSONL)");
    return -1;
  }
  if (j->text[0] && j->data[0]) {
    h->fail(ctx, "text and data are both set: one perplexity at a time, "
                 "give one of them (or use two eval tasks)");
    return -1;
  }
  threads = threads ? threads : (int64_t)stagekit_cpu_count();
  omp_set_num_threads((int)threads);
  openblas_set_num_threads((int)threads);
  return 0;
}

static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  lmeval_job j = {0};
  char *paths[4] = {NULL}, err[2048];
  stage_arg sa = {ctx, h};
  int status = EXIT_FAILED;
  if (read_params(ctx, h, &j, paths) != 0) {
    status = EXIT_BAD_PARAMS;
  } else {
    j.o.cancelled = stage_cancelled;
    j.o.arg = &sa;
    char *summary_path = fileio_join(j.out_dir, "eval.json");
    int rc = summary_path ? lmeval_run(&j, err, sizeof err) : -1;
    if (j.md.skipped[0])
      h->log(ctx, DAGRUN_LOG_WARN, "model: %s", j.md.skipped);
    if (!summary_path)
      h->fail(ctx, "out of memory");
    else if (rc != 0)
      h->fail(ctx, "%s", err);
    else {
      report(ctx, h, &j, summary_path);
      status = 0;
    }
    free(summary_path);
  }
  lmeval_job_free(&j);
  for (int i = 0; i < 4; i++)
    free(paths[i]);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "eval",
    "1.0.0",
    "Measures a model: perplexity on a text file or token files, accuracy "
    "on a multiple-choice JSONL (HellaSwag's layout).",
    params,
    run,
    choices,
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
