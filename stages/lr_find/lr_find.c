/*
 * lr_find: the built-in stage that runs a learning-rate range test (Smith,
 * "Cyclical Learning Rates", 2017; fastai's lr_find): one training step
 * at each of `steps` learning rates growing exponentially from min_lr to
 * max_lr, the loss smoothed by a bias-corrected moving average, stopping
 * when the smoothed loss exceeds diverge_factor x its best. The suggested
 * learning rate (outputs lr and suggested_lr) is where the smoothed loss
 * falls fastest against log(lr) before the divergence, as fastai's and
 * PyTorch Lightning's finders suggest. min_loss_lr is the lr of the
 * lowest loss, found on the loss smoothed without lag (forwards and
 * backwards, trainkit_smooth_unlagged): the forward average trails the
 * raw loss by ~50 points, a factor ~100 in lr, so its minimum (what this
 * stage gave before) sat where training diverges. It is the edge, not a
 * rate to train at. grad_accum has train's meaning, so that the test runs
 * at the global batch that will be trained:
 *
 *   lr_find:
 *     stage: lr_find
 *     needs: [tokenize]
 *     with: {data: "${tasks.tokenize.outputs.dir}", model: gpt-tiny}
 *   train:
 *     stage: train
 *     needs: [lr_find]
 *     with: {lr: "${tasks.lr_find.outputs.lr}", ...}
 *
 * The weights it starts from are left as they were ("restored
 * afterwards"): the model is a copy in memory, made from scratch or read
 * from init_from, trained and then thrown away; the stage writes no
 * weights at all, so init_from's directory is only ever read.
 */
#include <dagrun/plugin.h>

#include "common/stagekit.h"
#include "common/tokdata.h"
#include "common/trainkit.h"
#include "lib/exitcode.h"
#include "lib/svgplot.h"
#include "model/gpt.h"
#include "optim/optim.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dagrun_param_spec params[] = {
    TRAINKIT_MODEL_PARAMS,
    TRAINKIT_OPTIM_PARAMS,
    {"batch_size", DAGRUN_PARAM_INT, "16", 0, "Sequences per micro-batch"},
    {"grad_accum", DAGRUN_PARAM_INT, "1", 0,
     "Micro-batches per step (global batch = batch_size x this), as the "
     "train task that will use the lr"},
    {"steps", DAGRUN_PARAM_INT, "200", 0,
     "Learning rates tried, one training step each"},
    {"min_lr", DAGRUN_PARAM_FLOAT, "1e-7", 0, "The first learning rate"},
    {"max_lr", DAGRUN_PARAM_FLOAT, "10", 0, "The last learning rate"},
    {"smoothing", DAGRUN_PARAM_FLOAT, "0.98", 0,
     "Decay of the loss's exponential moving average (bias-corrected)"},
    {"diverge_factor", DAGRUN_PARAM_FLOAT, "4", 0,
     "Stop when the smoothed loss exceeds this times its best"},
    {"seed", DAGRUN_PARAM_INT, "1234", 0,
     "Seed of the initial weights (without init_from) and the data order"},
    {"threads", DAGRUN_PARAM_INT, "0", 0, "CPU threads (0: one per CPU)"},
    {NULL, 0, NULL, 0, NULL},
};

typedef struct finder {
  dagrun_ctx *ctx;
  const dagrun_host *h;
  trainkit_model m;
  optim_config opt;
  double grad_clip, min_lr, max_lr, beta, factor;
  int64_t steps;
  int B, accum, threads;
  uint64_t seed;
  tokdata data;
  /* The points tried: lr[i], raw loss[i], smoothed[i] (forward, as
   * recorded), unlagged[i] (trainkit_smooth_unlagged, before the
   * divergence). */
  double *lr, *loss, *smooth, *unlagged;
  int n;         /* points recorded */
  int n_ok;      /* ...of which before the divergence */
  char why[256]; /* stopped_reason */
} finder;

static int read_params(finder *f) {
  dagrun_ctx *ctx = f->ctx;
  const dagrun_host *h = f->h;
  int64_t v;
  if (trainkit_read_model(ctx, h, &f->m) != 0 ||
      trainkit_read_optim(ctx, h, &f->opt, &f->grad_clip) != 0 ||
      stagekit_param_int(ctx, h, "steps", 10, 1000000, &f->steps) ||
      stagekit_param_int(ctx, h, "batch_size", 1, 1 << 20, &v))
    return -1;
  f->B = (int)v;
  if (stagekit_param_int(ctx, h, "grad_accum", 1, 1 << 20, &v))
    return -1;
  f->accum = (int)v;
  if (stagekit_param_int(ctx, h, "threads", 0, 1024, &v))
    return -1;
  f->threads = (int)v;
  if (stagekit_param_int(ctx, h, "seed", 0, INT64_MAX, &v))
    return -1;
  f->seed = (uint64_t)v;
  h->param_float(ctx, "min_lr", &f->min_lr);
  h->param_float(ctx, "max_lr", &f->max_lr);
  h->param_float(ctx, "smoothing", &f->beta);
  h->param_float(ctx, "diverge_factor", &f->factor);
  if (!(f->min_lr > 0 && f->min_lr < f->max_lr && f->max_lr < 1e6)) {
    h->fail(ctx, "min_lr %g and max_lr %g: need 0 < min_lr < max_lr", f->min_lr,
            f->max_lr);
    return -1;
  }
  if (!(f->beta >= 0 && f->beta < 1) || !(f->factor > 1)) {
    h->fail(ctx, "smoothing must be in [0,1) and diverge_factor above 1");
    return -1;
  }
  return 0;
}

/* The range test itself. 0, or -1 (reported). */
static int range_test(finder *f, gpt *model) {
  const dagrun_host *h = f->h;
  char err[1024];
  trainkit_stepper st;
  int rc = -1;
  if (trainkit_stepper_init(&st, model, &f->opt, &f->data, f->B, f->m.T,
                            f->seed, err, sizeof err) != 0) {
    h->fail(f->ctx, "%s", err);
    return -1;
  }
  st.accum = f->accum;
  double avg = 0, best = INFINITY;
  snprintf(f->why, sizeof f->why, "max_lr: reached max_lr %g without diverging",
           f->max_lr);
  f->n_ok = (int)f->steps;
  for (int64_t i = 0; i < f->steps; i++) {
    double lr = f->min_lr *
                pow(f->max_lr / f->min_lr, (double)i / (double)(f->steps - 1));
    double loss, norm;
    if (h->cancelled(f->ctx)) {
      h->fail(f->ctx, "stopped at step %lld", (long long)i);
      goto done;
    }
    if (trainkit_stepper_step(&st, lr, f->grad_clip, &loss, &norm, err,
                              sizeof err) != 0) {
      h->fail(f->ctx, "step %lld: %s", (long long)i, err);
      goto done;
    }
    avg = f->beta * avg + (1 - f->beta) * loss;
    double sm = avg / (1 - pow(f->beta, (double)(i + 1)));
    f->lr[f->n] = lr;
    f->loss[f->n] = loss;
    f->smooth[f->n] = sm;
    f->n++;
    h->metric(f->ctx, "loss", loss, i);
    h->metric(f->ctx, "lr", lr, i);
    if (i % 10 == 0)
      h->progress(f->ctx, (double)i / (double)f->steps, NULL);
    if (!isfinite(loss) || !isfinite(sm)) {
      snprintf(f->why, sizeof f->why, "diverged: the loss is %g at lr %.3g",
               loss, lr);
      f->n_ok = f->n - 1;
      break;
    }
    if (sm < best)
      best = sm;
    if (sm > f->factor * best) {
      snprintf(f->why, sizeof f->why,
               "diverged: the smoothed loss %.4f is above %g x its best "
               "%.4f at lr %.3g",
               sm, f->factor, best, lr);
      f->n_ok = f->n - 1;
      break;
    }
  }
  rc = 0;
done:
  trainkit_stepper_free(&st);
  return rc;
}

/* The index of the steepest descent of the smoothed loss against log(lr)
 * among the points before the divergence, leaving out the first 10%
 * (where the average is still settling): the minimum of its numerical
 * gradient (central differences inside, one-sided at the ends, as
 * numpy.gradient). -1 with fewer than 3 points to look at. */
static int steepest(const finder *f) {
  int n = f->n_ok, lo = n / 10 > 1 ? n / 10 : 1;
  if (n - lo < 3)
    return -1;
  int pick = -1;
  double best = INFINITY;
  for (int j = lo; j < n; j++) {
    int a = j > 0 ? j - 1 : j, b = j < n - 1 ? j + 1 : j;
    double g = (f->smooth[b] - f->smooth[a]) / (log(f->lr[b]) - log(f->lr[a]));
    if (g < best) {
      best = g;
      pick = j;
    }
  }
  return pick;
}

/* The plot's y range: from just under the lowest loss to 1.5 x the
 * first one. What lies above is the divergence, which on a full range
 * (to 284 nats on gpt-tiny) flattens the band the lr is read from. */
static void y_band(const finder *f, double *lo, double *hi) {
  double mn = INFINITY;
  for (int i = 0; i < f->n; i++)
    if (isfinite(f->loss[i]) && f->loss[i] < mn)
      mn = f->loss[i];
  *lo = 0.95 * mn;
  *hi = 1.5 * f->loss[0];
}

static char *finder_svg(const finder *f, double suggestion, double min_lr) {
  char l1[80], l2[80];
  snprintf(l1, sizeof l1, "suggested lr %.3g (steepest descent)", suggestion);
  snprintf(l2, sizeof l2, "min loss lr %.3g (the edge)", min_lr);
  svgplot_mark marks[] = {{suggestion, l1}, {min_lr, l2}};
  svgplot_chart c = {.title = "Learning-rate range test",
                     .xlabel = "learning rate",
                     .ylabel = "loss (nats)",
                     .logx = 1,
                     .marks = marks,
                     .n_marks = 2,
                     .mark_legend = "suggested / min loss lr",
                     .mark_labels = 1};
  y_band(f, &c.ymin, &c.ymax);
  svgplot_series s[] = {
      {"loss", f->lr, f->loss, (size_t)f->n, 0},
      {"smoothed loss", f->lr, f->smooth, (size_t)f->n, 0},
      {"smoothed without lag", f->lr, f->unlagged, (size_t)f->n_ok, 0}};
  return svgplot_lines(&c, s, 3);
}

static int write_results(finder *f, double suggestion, double min_loss_lr) {
  const dagrun_host *h = f->h;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", f->m.name);
  cJSON_AddNumberToObject(o, "batch_size", f->B);
  cJSON_AddNumberToObject(o, "grad_accum", f->accum);
  cJSON_AddNumberToObject(o, "global_batch", (double)f->B * f->accum);
  cJSON_AddNumberToObject(o, "seq_len", f->m.T);
  cJSON_AddStringToObject(o, "optimizer",
                          f->opt.kind == OPTIM_ADAMW ? "adamw" : "lion");
  cJSON_AddNumberToObject(o, "min_lr", f->min_lr);
  cJSON_AddNumberToObject(o, "max_lr", f->max_lr);
  cJSON_AddNumberToObject(o, "steps", (double)f->steps);
  cJSON_AddNumberToObject(o, "smoothing", f->beta);
  cJSON_AddNumberToObject(o, "diverge_factor", f->factor);
  cJSON *pts = cJSON_AddArrayToObject(o, "points");
  for (int i = 0; i < f->n; i++) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "lr", f->lr[i]);
    cJSON_AddNumberToObject(p, "loss", f->loss[i]); /* null if not finite */
    cJSON_AddNumberToObject(p, "smoothed", f->smooth[i]);
    if (i < f->n_ok)
      cJSON_AddNumberToObject(p, "unlagged", f->unlagged[i]);
    cJSON_AddItemToArray(pts, p);
  }
  cJSON_AddNumberToObject(o, "suggestion", suggestion); /* as before */
  cJSON_AddNumberToObject(o, "suggested_lr", suggestion);
  cJSON_AddNumberToObject(o, "min_loss_lr", min_loss_lr);
  double lo, hi;
  y_band(f, &lo, &hi);
  cJSON *band = cJSON_AddArrayToObject(o, "plot_y_range");
  cJSON_AddItemToArray(band, cJSON_CreateNumber(lo));
  cJSON_AddItemToArray(band, cJSON_CreateNumber(hi));
  cJSON_AddStringToObject(o, "stopped_reason", f->why);
  if (f->n_ok < f->n)
    cJSON_AddNumberToObject(o, "diverged_lr", f->lr[f->n - 1]);
  else
    cJSON_AddNullToObject(o, "diverged_lr");
  char *json = cJSON_Print(o);
  cJSON_Delete(o);

  size_t cap = 64 + (size_t)f->n * 80;
  char *csv = malloc(cap);
  if (csv) {
    size_t off = (size_t)snprintf(csv, cap, "lr,loss,smoothed\n");
    for (int i = 0; i < f->n; i++)
      off += (size_t)snprintf(csv + off, cap - off, "%.9g,%.9g,%.9g\n",
                              f->lr[i], f->loss[i], f->smooth[i]);
  }
  char *svg = finder_svg(f, suggestion, min_loss_lr);
  char *jpath = NULL;
  int rc = -1;
  if (trainkit_write_results(f->ctx, h, "lr_find", json, csv, svg, &jpath) ==
      0) {
    char v[64];
    snprintf(v, sizeof v, "%.6g", suggestion);
    h->output(f->ctx, "lr", v);
    h->output(f->ctx, "suggested_lr", v);
    snprintf(v, sizeof v, "%.6g", min_loss_lr);
    h->output(f->ctx, "min_loss_lr", v);
    h->output(f->ctx, "result", jpath);
    rc = 0;
  }
  free(jpath);
  free(json);
  free(csv);
  free(svg);
  return rc;
}

static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  finder f = {.ctx = ctx, .h = h};
  gpt *model = NULL;
  char *init_dir = NULL;
  int status = EXIT_FAILED;
  if (read_params(&f) != 0)
    return EXIT_BAD_PARAMS;
  trainkit_set_threads(f.threads);
  f.lr = calloc((size_t)f.steps, sizeof(double));
  f.loss = calloc((size_t)f.steps, sizeof(double));
  f.smooth = calloc((size_t)f.steps, sizeof(double));
  f.unlagged = calloc((size_t)f.steps, sizeof(double));
  if (!f.lr || !f.loss || !f.smooth || !f.unlagged) {
    h->fail(ctx, "out of memory");
    goto done;
  }
  /* The copy that is trained: init_from's weights are read into memory,
   * never written back (see the top of this file). */
  if (trainkit_open_data(ctx, h, &f.m, &f.data) != 0 ||
      trainkit_make_model(ctx, h, &f.m, &f.data, f.seed, &model, &init_dir))
    goto done;
  const gpt_config *mc = &f.m.cfg;
  h->log(ctx, DAGRUN_LOG_INFO,
         "model %s: %d layers, %d heads, width %d, seq_len %d%s%s; lr from "
         "%g to %g over %lld steps of %d x %d sequences (grad_accum %d)",
         f.m.name, mc->n_layer, mc->n_head, mc->n_embd, f.m.T,
         init_dir ? ", weights of " : "", init_dir ? init_dir : "", f.min_lr,
         f.max_lr, (long long)f.steps, f.accum, f.B, f.accum);
  if (range_test(&f, model) != 0)
    goto done;
  int k = steepest(&f);
  if (k < 0) {
    h->fail(ctx,
            "only %d points before the loss %s: too few to find the "
            "steepest descent; lower min_lr or raise steps",
            f.n_ok, f.n_ok < f.n ? "diverged" : "stopped");
    goto done;
  }
  trainkit_smooth_unlagged(f.loss, f.n_ok, f.beta, f.unlagged);
  int kmin = 0;
  for (int i = 1; i < f.n_ok; i++)
    if (f.unlagged[i] < f.unlagged[kmin])
      kmin = i;
  h->log(ctx, DAGRUN_LOG_INFO,
         "suggested lr %.3g (steepest descent of the smoothed loss, %.4f "
         "there); lowest loss %.4f at lr %.3g (smoothed without lag: the "
         "edge, train below it); %d steps, stopped: %s",
         f.lr[k], f.smooth[k], f.unlagged[kmin], f.lr[kmin], f.n, f.why);
  if (write_results(&f, f.lr[k], f.lr[kmin]) != 0)
    goto done;
  status = 0;
done:
  gpt_destroy(model);
  free(init_dir);
  tokdata_free(&f.data);
  free(f.lr);
  free(f.loss);
  free(f.smooth);
  free(f.unlagged);
  return status;
}

static const dagrun_param_choice choices[] = {
    TRAINKIT_MODEL_CHOICES,
    TRAINKIT_OPTIM_CHOICES,
    {NULL, NULL},
};

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "lr_find",
    "1.0.0",
    "Learning-rate range test: one step per exponentially growing lr until "
    "the loss diverges; suggests the lr of steepest descent.",
    params,
    run,
    choices,
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
