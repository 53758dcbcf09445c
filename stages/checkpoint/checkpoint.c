/*
 * checkpoint: the built-in stage that promotes a validated checkpoint
 * into the durable models/ registry (registry.h) and applies retention.
 *
 *   checkpoint:
 *     stage: checkpoint
 *     needs: [validate]
 *     with:
 *       checkpoint: ${tasks.validate.outputs.checkpoint}
 *       metrics: ${tasks.validate.outputs.metrics}
 *       keep_last: 3
 *       keep_best: 1
 *
 * The source's checksums are verified, its weights loaded (weights that
 * are not finite numbers, a diverged model's, are refused naming the
 * tensor), it is copied with its tokenizer
 * under a temporary name, the copy verified, and renamed into place;
 * promotion.json records the run, step and validation numbers. Metrics
 * are taken only when they are of this very checkpoint: the numbers of
 * another model would be a lie.
 */
#include <dagrun/plugin.h>

#include "ckpt/ckpt.h"
#include "ckpt/modeldir.h"
#include "common/registry.h"
#include "common/tokdata.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


static const dagrun_param_spec params[] = {
    {"checkpoint", DAGRUN_PARAM_STRING, NULL, 1,
     "The checkpoint directory to promote, e.g. "
     "\"${tasks.validate.outputs.checkpoint}\""},
    {"tokenizer", DAGRUN_PARAM_STRING, "", 0,
     "The tokenizer.json to keep beside it; \"\" = the one the checkpoint's "
     "manifest records (state.config.tokenizer)"},
    {"metrics", DAGRUN_PARAM_STRING, "", 0,
     "The validate stage's metrics.json, e.g. "
     "\"${tasks.validate.outputs.metrics}\" (it must be of this "
     "checkpoint); \"\" = promote without validation numbers"},
    {"dir", DAGRUN_PARAM_STRING, "", 0,
     "The registry root; \"\" = $DAGRUN_MODELS_DIR/<dag>, else models/<dag> "
     "beside the runs directory"},
    {"keep_last", DAGRUN_PARAM_INT, "3", 0,
     "Retention keeps this many newest models (at least 1)"},
    {"keep_best", DAGRUN_PARAM_INT, "1", 0,
     "and this many with the lowest validation loss (0 or more)"},
    {NULL, 0, NULL, 0, NULL},
};

typedef struct settings {
  const char *checkpoint, *tokenizer, *metrics, *dir;
  int64_t keep_last, keep_best;
} settings;

typedef struct job {
  dagrun_ctx *ctx;
  const dagrun_host *host;
} job;

static int read_settings(dagrun_ctx *ctx, const dagrun_host *h, settings *s) {
  memset(s, 0, sizeof *s);
  if (h->param_string(ctx, "checkpoint", &s->checkpoint) != 0 ||
      !*s->checkpoint) {
    h->fail(ctx, "checkpoint must name a checkpoint directory, e.g. "
                 "\"${tasks.validate.outputs.checkpoint}\"");
    return -1;
  }
  if (h->param_string(ctx, "tokenizer", &s->tokenizer) != 0)
    s->tokenizer = "";
  if (h->param_string(ctx, "metrics", &s->metrics) != 0)
    s->metrics = "";
  if (h->param_string(ctx, "dir", &s->dir) != 0)
    s->dir = "";
  if (h->param_int(ctx, "keep_last", &s->keep_last) != 0 || s->keep_last < 1 ||
      s->keep_last > INT_MAX) {
    h->fail(ctx, "keep_last must be an integer of at least 1 (the newest "
                 "model is always kept)");
    return -1;
  }
  if (h->param_int(ctx, "keep_best", &s->keep_best) != 0 || s->keep_best < 0 ||
      s->keep_best > INT_MAX) {
    h->fail(ctx, "keep_best must be an integer of at least 0");
    return -1;
  }
  return 0;
}

/* z, or z against the DAG's directory when relative; malloc'd. */
static char *resolve(const job *j, const char *z) {
  if (z[0] == '/')
    return strdup(z);
  return fileio_join(j->host->dir(j->ctx, DAGRUN_DIR_DAG), z);
}

/* NULL when path is a regular file, else why not. */
static const char *not_a_file(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return strerror(errno);
  return S_ISREG(st.st_mode) ? NULL : "not a regular file";
}

/* The tokenizer the checkpoint's manifest records in state.config, as a
 * malloc'd path, or NULL (none recorded; *why says so); sha gets its
 * identity, "" when not recorded (a checkpoint from before the record). */
static char *recorded_tokenizer(const job *j, const char *ckpt, char sha[65],
                                char *why, size_t whylen) {
  sha[0] = '\0';
  int64_t step;
  char *state = NULL;
  if (ckpt_read_state(ckpt, &step, &state, why, whylen) != 0)
    return NULL;
  cJSON *o = cJSON_Parse(state);
  free(state);
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(o, "config");
  const cJSON *tok = cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer");
  const char *ts = cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer_sha256"));
  if (ts && strlen(ts) == 64)
    memcpy(sha, ts, 65);
  char *path = NULL;
  if (cJSON_IsString(tok) && *tok->valuestring)
    path = resolve(j, tok->valuestring);
  else
    snprintf(why, whylen,
             "the checkpoint's manifest records no tokenizer "
             "(state.config.tokenizer)");
  cJSON_Delete(o);
  return path;
}

/* The tokenizer to keep beside the model: given (z, when not ""), or the
 * one the checkpoint ckpt was trained with; either way the one whose
 * identity the checkpoint records. Its path (caller frees), or NULL
 * after host->fail. */
static char *keep_tokenizer(const job *j, const char *z, const char *ckpt) {
  const dagrun_host *host = j->host;
  char why[2048] = "", err[4096], rec_sha[65];
  char *rec = recorded_tokenizer(j, ckpt, rec_sha, why, sizeof why);
  char *tok = *z ? resolve(j, z) : rec ? strdup(rec) : NULL;
  const char *bad = tok ? not_a_file(tok) : NULL;
  int ok = 0;
  if (!tok && *z)
    host->fail(j->ctx, "out of memory");
  else if (!tok)
    host->fail(j->ctx,
               "no tokenizer to keep beside the model: %s; set "
               "tokenizer: to the tokenizer.json it was trained with",
               why);
  else if (bad && *z)
    host->fail(j->ctx, "tokenizer %s: %s", tok, bad);
  else if (bad)
    host->fail(j->ctx,
               "the tokenizer %s that the checkpoint's manifest "
               "records: %s; set tokenizer: to the tokenizer.json it "
               "was trained with",
               tok, bad);
  else if (tokdata_file_fits_model(tok, ckpt, rec ? rec : "", rec_sha, err,
                                   sizeof err) != 0)
    host->fail(j->ctx,
               "%s: set tokenizer: to the tokenizer.json it was trained "
               "with",
               err);
  else
    ok = 1;
  free(rec);
  if (!ok) {
    free(tok);
    return NULL;
  }
  return tok;
}

static double num_or_nan(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Reads the validate stage's metrics at path into p (numbers and the
 * object's text, *text malloc'd), after checking that they are of the
 * checkpoint ckpt. 0, or -1 after host->fail. */
static int read_metrics(const job *j, const char *path, const char *ckpt,
                        registry_promotion *p, char **text) {
  char err[1024];
  *text = fileio_read_all(path, NULL, err, sizeof err);
  if (!*text) {
    j->host->fail(j->ctx, "metrics: %s", err);
    return -1;
  }
  cJSON *o = cJSON_Parse(*text);
  int rc = -1;
  const cJSON *of = cJSON_GetObjectItemCaseSensitive(o, "checkpoint");
  char *of_path = cJSON_IsString(of) ? resolve(j, of->valuestring) : NULL;
  char a[PATH_MAX], b[PATH_MAX];
  if (!cJSON_IsObject(o)) {
    j->host->fail(j->ctx, "metrics %s: not a JSON object", path);
  } else if (!of_path) {
    j->host->fail(j->ctx,
                  "metrics %s: no \"checkpoint\": cannot tell which model "
                  "these numbers are of",
                  path);
  } else if (!realpath(ckpt, a)) {
    j->host->fail(j->ctx, "checkpoint %s: %s", ckpt, strerror(errno));
  } else if (!realpath(of_path, b) || strcmp(a, b) != 0) {
    j->host->fail(j->ctx,
                  "metrics %s are of checkpoint %s, not of %s: promoting "
                  "another model's numbers would be a lie",
                  path, of->valuestring, ckpt);
  } else {
    p->val_loss = num_or_nan(o, "val_loss");
    p->perplexity = num_or_nan(o, "perplexity");
    p->accuracy = num_or_nan(o, "accuracy");
    p->validation_json = *text;
    rc = 0;
  }
  free(of_path);
  cJSON_Delete(o);
  return rc;
}

static void fmt_loss(char *buf, size_t n, double x) {
  if (isfinite(x))
    snprintf(buf, n, "%.4f", x);
  else
    snprintf(buf, n, "none");
}

static void on_removed(void *arg, const registry_entry *e) {
  const job *j = arg;
  char loss[32];
  fmt_loss(loss, sizeof loss, e->val_loss);
  j->host->log(j->ctx, DAGRUN_LOG_INFO,
               "retention removed %s (seq %lld, step %lld, val_loss %s)",
               e->name, (long long)e->seq, (long long)e->step, loss);
}

/* An entry of this name that an earlier attempt of this very run already
 * promoted (it failed or was stopped after the rename): 1 when it is
 * there and verifies, with *e filled. */
static int promoted_before(const char *root, const char *name, const char *dag,
                           const char *run, registry_entry *e) {
  registry_entry *v = NULL;
  size_t n = 0;
  char err[1024];
  int found = 0;
  if (registry_list(root, &v, &n, err, sizeof err) != 0)
    return 0;
  for (size_t i = 0; i < n && !found; i++)
    if (strcmp(v[i].name, name) == 0 && strcmp(v[i].dag, dag) == 0 &&
        strcmp(v[i].run, run) == 0 &&
        ckpt_verify(v[i].path, err, sizeof err) == 0) {
      *e = v[i];
      found = 1;
    }
  free(v);
  return found;
}

/* Whether the checkpoint's weights load and are all finite numbers
 * (modeldir_load): a diverged model's checksums are as good as any, and
 * promoted it would become latest, for export and serving. 0, or -1 with
 * the task failed naming the tensor. */
static int check_weights(const job *j, const char *ckpt) {
  modeldir_info info;
  gpt *m = NULL;
  char err[2048];
  if (modeldir_open(ckpt, &info, err, sizeof err) != 0 ||
      modeldir_load(&info, &m, err, sizeof err) != 0) {
    j->host->fail(j->ctx, "promotion refused: %s", err);
    return -1;
  }
  gpt_destroy(m);
  return 0;
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  settings st;
  if (read_settings(ctx, host, &st) != 0)
    return EXIT_BAD_PARAMS;
  job j = {.ctx = ctx, .host = host};
  const char *dag = host->info(ctx, DAGRUN_INFO_DAG);
  const char *run_id = host->info(ctx, DAGRUN_INFO_RUN_ID);
  const char *task = host->info(ctx, DAGRUN_INFO_TASK);
  char err[4096] = "", why[2048] = "";
  int status = EXIT_FAILED;
  char *ckpt = resolve(&j, st.checkpoint);
  char *tok = NULL, *metrics_text = NULL, *root = NULL;
  if (!ckpt) {
    host->fail(ctx, "out of memory");
    goto done;
  }
  host->progress(ctx, 0.0, "verifying");
  if (check_weights(&j, ckpt) != 0)
    goto done;

  if (!(tok = keep_tokenizer(&j, st.tokenizer, ckpt)))
    goto done;

  registry_promotion p = {.checkpoint = ckpt,
                          .tokenizer = tok,
                          .dag = dag,
                          .run = run_id,
                          .task = task,
                          .val_loss = NAN,
                          .perplexity = NAN,
                          .accuracy = NAN,
                          .validation_json = NULL};
  if (*st.metrics) {
    char *mpath = resolve(&j, st.metrics);
    int rc = mpath ? read_metrics(&j, mpath, ckpt, &p, &metrics_text) : -1;
    free(mpath);
    if (rc != 0)
      goto done;
  } else {
    host->log(ctx, DAGRUN_LOG_WARN,
              "no metrics: promoting without validation numbers (this model "
              "never counts as the best)");
  }

  root = *st.dir ? resolve(&j, st.dir)
                 : registry_default_root(host->dir(ctx, DAGRUN_DIR_RUN), dag);
  if (!root) {
    host->fail(ctx, "out of memory");
    goto done;
  }
  char loss[32];
  fmt_loss(loss, sizeof loss, p.val_loss);
  host->log(ctx, DAGRUN_LOG_INFO, "promoting %s (val_loss %s) into %s", ckpt,
            loss, root);
  if (host->cancelled(ctx)) {
    host->fail(ctx, "cancelled before the promotion");
    goto done;
  }

  registry_entry e;
  int64_t step = -1;
  char *state = NULL, name[256] = "";
  if (ckpt_read_state(ckpt, &step, &state, why, sizeof why) == 0)
    snprintf(name, sizeof name, "%s-step-%08lld", run_id, (long long)step);
  free(state);
  if (*name && promoted_before(root, name, dag, run_id, &e)) {
    host->log(ctx, DAGRUN_LOG_INFO,
              "%s was promoted by an earlier attempt of this run: kept",
              e.path);
  } else if (registry_promote(root, &p, &e, err, sizeof err) != 0) {
    host->fail(ctx, "promotion refused: %s", err);
    goto done;
  } else {
    host->log(ctx, DAGRUN_LOG_INFO,
              "promoted %s (seq %lld, step %lld, val_loss %s) to %s", e.name,
              (long long)e.seq, (long long)e.step, loss, e.path);
  }
  host->progress(ctx, 0.9, "retention");

  int removed = registry_retain(root, (int)st.keep_last, (int)st.keep_best,
                                on_removed, &j, err, sizeof err);
  if (removed < 0) {
    host->fail(ctx, "promoted %s, but retention failed: %s", e.name, err);
    goto done;
  }
  registry_entry *v = NULL;
  size_t n = 0;
  if (registry_list(root, &v, &n, err, sizeof err) == 0) {
    const registry_entry *best = registry_best(v, n);
    host->log(ctx, DAGRUN_LOG_INFO,
              "registry %s: %zu models (retention removed %d, keep_last %lld, "
              "keep_best %lld); latest %s, best %s",
              root, n, removed, (long long)st.keep_last,
              (long long)st.keep_best, n ? v[n - 1].name : "none",
              best ? best->name : "none");
  }
  free(v);

  host->output(ctx, "model", e.path);
  host->output(ctx, "name", e.name);
  host->output(ctx, "models", root);
  if (isfinite(e.val_loss)) {
    char num[32];
    snprintf(num, sizeof num, "%.6f", e.val_loss);
    host->output(ctx, "val_loss", num);
    host->metric(ctx, "val_loss", e.val_loss, e.step);
  }
  host->progress(ctx, 1.0, "promoted");
  status = 0;
done:
  free(ckpt);
  free(tok);
  free(metrics_text);
  free(root);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "checkpoint",
    "1.0.0",
    "Promotes a validated checkpoint into the models/ registry (verified, "
    "atomic) and keeps the newest and the best.",
    params,
    run,
    NULL, /* no choices */
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
