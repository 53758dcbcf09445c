/*
 * batch_sweep: the built-in stage that measures training throughput and
 * memory at micro-batch 1, 2, 4, ... and recommends a micro-batch (and
 * the gradient accumulation for a target global batch) for a train task
 * downstream:
 *
 *   batch_sweep:
 *     stage: batch_sweep
 *     needs: [tokenize]
 *     with: {data: "${tasks.tokenize.outputs.dir}", model: gpt-tiny,
 *            memory_cap: 2GiB, target_batch: 64}
 *   train:
 *     stage: train
 *     needs: [batch_sweep]
 *     with: {batch_size: "${tasks.batch_sweep.outputs.micro_batch}",
 *            grad_accum: "${tasks.batch_sweep.outputs.grad_accum}", ...}
 *
 * Each size gets a fresh engine (model with the same starting weights,
 * gradients, optimizer, activations) whose bytes are computed before
 * anything is allocated (gpt_memory_estimate): a size that would exceed
 * memory_cap is never tried, which is what "out of memory" means on the
 * CPU. The sweep also stops at a real allocation failure (reported, not a
 * crash), at a non-finite loss or grad norm, at a loss that rises more
 * than loss_rise_factor over the first size's (instability), and at
 * max_batch.
 *
 * Made to give the same pick on a noisy machine: each size's tokens/s is
 * that of its median step (each measured step is one timing), and the
 * pick is the smallest size unless a larger one is faster by more than
 * TRAINKIT_PICK_MARGIN (trainkit_pick_batch). Its result is this
 * machine's, so dagrun does not cache the stage unless a task says
 * `cache: true` (scheduler.c's task_cacheable).
 */
#include <dagrun/plugin.h>

#include "common/stagekit.h"
#include "common/tokdata.h"
#include "common/trainkit.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/svgplot.h"
#include "model/gpt.h"
#include "optim/optim.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ROWS 40

static const dagrun_param_spec params[] = {
    TRAINKIT_MODEL_PARAMS,
    TRAINKIT_OPTIM_PARAMS,
    {"lr", DAGRUN_PARAM_FLOAT, "0", 0,
     "Learning rate of the measured steps (0: 1e-3 for adamw, 1e-4 for "
     "lion)"},
    {"steps_per_size", DAGRUN_PARAM_INT, "5", 0,
     "Measured steps per micro-batch size (after one warm-up step); a "
     "size's tokens/s is its median step's"},
    {"max_batch", DAGRUN_PARAM_INT, "1024", 0, "Largest micro-batch tried"},
    {"memory_cap", DAGRUN_PARAM_STRING, "", 0,
     "The most the engine may take (params, grads, optimizer, "
     "activations), e.g. \"2GiB\" (empty: 80% of physical memory)"},
    {"target_batch", DAGRUN_PARAM_INT, "0", 0,
     "Global batch (sequences per optimizer step) to recommend gradient "
     "accumulation for (0: none)"},
    {"loss_rise_factor", DAGRUN_PARAM_FLOAT, "1.5", 0,
     "A size whose loss is more than this times the first size's is "
     "unstable: the sweep stops there"},
    {"seed", DAGRUN_PARAM_INT, "1234", 0,
     "Seed of the initial weights and the data order"},
    {"threads", DAGRUN_PARAM_INT, "0", 0, "CPU threads (0: one per CPU)"},
    {NULL, 0, NULL, 0, NULL},
};

typedef struct row {
  int B;
  double tokens_per_s;
  uint64_t memory_bytes;  /* the engine's, computed (gpt_memory_estimate) */
  uint64_t rss_peak;      /* VmHWM over this size's steps */
  double loss, grad_norm; /* means over the measured steps */
  int unstable;
} row;

typedef struct sweep {
  dagrun_ctx *ctx;
  const dagrun_host *h;
  trainkit_model m;
  optim_config opt;
  double grad_clip, lr, rise;
  int64_t steps, max_batch, target;
  uint64_t cap, seed;
  int threads, per_param;
  tokdata data;
  float *weights0; /* the starting weights every size begins from */
  double *step_s;  /* steps_per_size: one size's measured steps' times */
  int pick;        /* the recommended row, or -1 */
  row rows[MAX_ROWS];
  int nrows;
  int next_B;     /* the size the sweep stopped before (or at) */
  char why[1200]; /* stopped_reason */
} sweep;

/* The process's peak resident set (VmHWM) in bytes; 0 if unknown. */
static uint64_t vm_hwm(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  uint64_t kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %" SCNu64, &kib) == 1)
      break;
  if (f)
    fclose(f);
  return kib * 1024;
}

/* Resets VmHWM to the current RSS (Linux >= 4.0), so that each size's
 * peak is its own; best effort. */
static void reset_hwm(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

static int read_params(sweep *s) {
  dagrun_ctx *ctx = s->ctx;
  const dagrun_host *h = s->h;
  int64_t v;
  const char *z;
  if (trainkit_read_model(ctx, h, &s->m) != 0 ||
      trainkit_read_optim(ctx, h, &s->opt, &s->grad_clip) != 0 ||
      stagekit_param_int(ctx, h, "steps_per_size", 1, 100000, &s->steps) ||
      stagekit_param_int(ctx, h, "max_batch", 1, 1 << 20, &s->max_batch) ||
      stagekit_param_int(ctx, h, "target_batch", 0, 1 << 30, &s->target) ||
      stagekit_param_int(ctx, h, "threads", 0, 1024, &v))
    return -1;
  s->threads = (int)v;
  if (stagekit_param_int(ctx, h, "seed", 0, INT64_MAX, &v))
    return -1;
  s->seed = (uint64_t)v;
  h->param_float(ctx, "lr", &s->lr);
  if (s->lr == 0)
    s->lr = trainkit_default_lr(s->opt.kind);
  h->param_float(ctx, "loss_rise_factor", &s->rise);
  if (!(s->lr > 0 && s->lr < 10) || !(s->rise > 1)) {
    h->fail(ctx, "lr must be in (0,10) and loss_rise_factor above 1");
    return -1;
  }
  h->param_string(ctx, "memory_cap", &z);
  if (z[0]) {
    if (stagekit_parse_size(z, &s->cap) != 0 || s->cap == 0) {
      h->fail(ctx, "memory_cap '%s' is not a size (e.g. 512MiB, 2GiB)", z);
      return -1;
    }
  } else {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    s->cap = (uint64_t)((double)pages * (double)page * 0.8);
  }
  s->per_param = (int)optim_state_floats_for(s->opt.kind, 1);
  return 0;
}

/* Runs one size. 0: a row was added (maybe unstable); 1: the sweep stops
 * before this size (why set); -1: the attempt fails (already reported). */
static int measure(sweep *s, int B) {
  const dagrun_host *h = s->h;
  const int T = s->m.T;
  char err[1024];
  gpt_memory est;
  gpt_memory_estimate(&s->m.cfg, B, T, s->per_param, GPT_RECOMPUTE_NONE, &est);
  if (est.total > s->cap) {
    snprintf(s->why, sizeof s->why,
             "memory_cap: micro-batch %d would take %.1f MiB (params %.1f, "
             "grads %.1f, optimizer %.1f, activations %.1f), above the "
             "memory_cap of %.1f MiB",
             B, mib(est.total), mib(est.params), mib(est.grads), mib(est.optim),
             mib(est.acts), mib(s->cap));
    return 1;
  }
  gpt *model = NULL;
  trainkit_stepper st = {0};
  int rc = 1;
  reset_hwm();
  double t0 = clock_monotonic();
  if (gpt_create(&s->m.cfg, &model, err, sizeof err) != 0 ||
      trainkit_stepper_init(&st, model, &s->opt, &s->data, B, T, s->seed, err,
                            sizeof err) != 0) {
    snprintf(s->why, sizeof s->why, "%smicro-batch %d: %s",
             strstr(err, "out of memory") ? "out of memory: " : "", B, err);
    goto done;
  }
  memcpy(gpt_params(model), s->weights0, gpt_num_params(model) * sizeof(float));
  row *r = &s->rows[s->nrows];
  *r = (row){.B = B, .memory_bytes = est.total};
  double sum_loss = 0, sum_norm = 0;
  for (int64_t i = 0; i <= s->steps; i++) {
    double loss, norm;
    if (h->cancelled(s->ctx)) {
      h->fail(s->ctx, "stopped at micro-batch %d", B);
      rc = -1;
      goto done;
    }
    /* Activations are allocated by the first forward. */
    if (trainkit_stepper_step(&st, s->lr, s->grad_clip, &loss, &norm, err,
                              sizeof err) != 0) {
      snprintf(s->why, sizeof s->why, "%smicro-batch %d: %s",
               strstr(err, "out of memory") ? "out of memory: " : "", B, err);
      goto done;
    }
    double t1 = clock_monotonic();
    if (i > 0) /* not the warm-up step: first touch of every buffer */
      s->step_s[i - 1] = t1 - t0;
    t0 = t1;
    if (i == 0)
      continue;
    sum_loss += loss;
    sum_norm += norm;
  }
  double med = trainkit_median(s->step_s, (size_t)s->steps);
  r->tokens_per_s = med > 0 ? (double)B * T / med : 0;
  r->loss = sum_loss / (double)s->steps;
  r->grad_norm = sum_norm / (double)s->steps;
  r->rss_peak = vm_hwm();
  uint64_t held =
      gpt_allocated_bytes(model) + optim_state_floats(st.opt) * sizeof(float);
  if (held != est.total)
    h->log(s->ctx, DAGRUN_LOG_WARN,
           "micro-batch %d: the engine holds %llu bytes, the estimate said "
           "%llu",
           B, (unsigned long long)held, (unsigned long long)est.total);
  s->nrows++;
  if (!isfinite(r->loss) || !isfinite(r->grad_norm)) {
    r->unstable = 1;
    snprintf(s->why, sizeof s->why,
             "unstable: micro-batch %d: loss %g, grad norm %g", B, r->loss,
             r->grad_norm);
  } else if (s->nrows > 1 && r->loss > s->rise * s->rows[0].loss) {
    r->unstable = 1;
    snprintf(s->why, sizeof s->why,
             "unstable: micro-batch %d: loss %.4f is more than %g x the "
             "loss %.4f of micro-batch %d",
             B, r->loss, s->rise, s->rows[0].loss, s->rows[0].B);
  }
  h->metric(s->ctx, "tokens_per_s", r->tokens_per_s, B);
  h->metric(s->ctx, "memory_bytes", (double)r->memory_bytes, B);
  h->log(s->ctx, DAGRUN_LOG_INFO,
         "micro-batch %d: %.0f tokens/s, engine %.1f MiB, peak RSS %.1f "
         "MiB, loss %.4f, grad norm %.3f",
         B, r->tokens_per_s, mib(r->memory_bytes), mib(r->rss_peak), r->loss,
         r->grad_norm);
  rc = r->unstable ? 1 : 0;
done:
  trainkit_stepper_free(&st);
  gpt_destroy(model);
  return rc;
}

/* The pick among the stable sizes (at most target_batch when there is
 * one, so that accumulation reaches it without overshooting):
 * trainkit_pick_batch's rule. -1 when no size qualifies. */
static int recommend(const sweep *s) {
  double tps[MAX_ROWS];
  int ok[MAX_ROWS];
  for (int i = 0; i < s->nrows; i++) {
    tps[i] = s->rows[i].tokens_per_s;
    ok[i] = !s->rows[i].unstable && (!s->target || s->rows[i].B <= s->target);
  }
  return trainkit_pick_batch(tps, ok, s->nrows, TRAINKIT_PICK_MARGIN);
}

/* Two charts stacked in one SVG: tokens/s and memory against batch
 * size. */
static char *sweep_svg(const sweep *s) {
  double x[MAX_ROWS], tps[MAX_ROWS], mem[MAX_ROWS], rss[MAX_ROWS];
  for (int i = 0; i < s->nrows; i++) {
    x[i] = s->rows[i].B;
    tps[i] = s->rows[i].tokens_per_s;
    mem[i] = mib(s->rows[i].memory_bytes);
    rss[i] = mib(s->rows[i].rss_peak);
  }
  /* The cap as a horizontal line over the sizes measured and the one
   * refused. */
  double cx[2] = {1, s->next_B > 1 ? s->next_B : 2};
  double cy[2] = {mib(s->cap), mib(s->cap)};
  char cap_label[64], pick_label[64];
  snprintf(cap_label, sizeof cap_label, "memory_cap (%.1f MiB)", mib(s->cap));
  snprintf(pick_label, sizeof pick_label, "recommended: micro-batch %d",
           s->pick >= 0 ? s->rows[s->pick].B : 0);
  svgplot_mark pick[1] = {
      {s->pick >= 0 ? s->rows[s->pick].B : NAN, pick_label}};
  svgplot_chart c1 = {.title = "Throughput by micro-batch size",
                      .xlabel = "micro-batch size (sequences)",
                      .ylabel = "tokens/s",
                      .logx = 1,
                      .marks = pick,
                      .n_marks = 1,
                      .mark_legend = "recommended",
                      .mark_labels = 1};
  svgplot_series s1[] = {{"tokens/s", x, tps, (size_t)s->nrows, 0}};
  svgplot_chart c2 = {.title = "Memory by micro-batch size",
                      .xlabel = "micro-batch size (sequences)",
                      .ylabel = "memory (MiB)",
                      .logx = 1,
                      .logy = 1,
                      .marks = pick,
                      .n_marks = 1,
                      .mark_legend = "recommended",
                      .mark_labels = 1};
  svgplot_series s2[] = {{"engine (computed)", x, mem, (size_t)s->nrows, 0},
                         {"peak RSS (VmHWM)", x, rss, (size_t)s->nrows, 0},
                         {cap_label, cx, cy, 2, 0}};
  char *a = svgplot_lines(&c1, s1, 1), *b = svgplot_lines(&c2, s2, 3);
  char *out = NULL;
  if (a && b) {
    /* The second chart moves down by the first's height (320 by
     * default) and a gap. */
    const char *head =
        "<svg xmlns=\"http://www.w3.org/2000/svg\" "
        "width=\"640\" height=\"650\" viewBox=\"0 0 640 650\">\n";
    size_t len = strlen(head) + strlen(a) + strlen(b) + 64;
    out = malloc(len);
    if (out)
      snprintf(out, len,
               "%s%s\n<g transform=\"translate(0,330)\">\n%s\n</g>\n</svg>\n",
               head, a, b);
  }
  free(a);
  free(b);
  return out;
}

static cJSON *row_json(const row *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "batch", r->B);
  cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s);
  cJSON_AddNumberToObject(o, "memory_bytes", (double)r->memory_bytes);
  cJSON_AddNumberToObject(o, "rss_peak_bytes", (double)r->rss_peak);
  cJSON_AddNumberToObject(o, "loss", r->loss);
  cJSON_AddNumberToObject(o, "grad_norm", r->grad_norm);
  return o;
}

static int write_results(sweep *s, int pick, int accum) {
  const dagrun_host *h = s->h;
  const row *p = &s->rows[pick];
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", s->m.name);
  cJSON_AddNumberToObject(o, "n_layer", s->m.cfg.n_layer);
  cJSON_AddNumberToObject(o, "n_head", s->m.cfg.n_head);
  cJSON_AddNumberToObject(o, "n_embd", s->m.cfg.n_embd);
  cJSON_AddNumberToObject(o, "seq_len", s->m.T);
  cJSON_AddStringToObject(o, "optimizer",
                          s->opt.kind == OPTIM_ADAMW ? "adamw" : "lion");
  cJSON_AddNumberToObject(o, "memory_cap_bytes", (double)s->cap);
  cJSON_AddNumberToObject(o, "steps_per_size", (double)s->steps);
  cJSON_AddNumberToObject(o, "pick_margin", TRAINKIT_PICK_MARGIN);
  cJSON *rows = cJSON_AddArrayToObject(o, "rows");
  for (int i = 0; i < s->nrows; i++) {
    cJSON *r = row_json(&s->rows[i]);
    if (i == s->nrows - 1)
      cJSON_AddStringToObject(r, "stopped_reason", s->why);
    cJSON_AddItemToArray(rows, r);
  }
  cJSON_AddStringToObject(o, "stopped_reason", s->why);
  cJSON *rec = cJSON_AddObjectToObject(o, "recommendation");
  cJSON_AddNumberToObject(rec, "micro_batch", p->B);
  cJSON_AddNumberToObject(rec, "grad_accum", accum);
  cJSON_AddNumberToObject(rec, "global_batch", (double)p->B * accum);
  cJSON_AddNumberToObject(rec, "target_batch", (double)s->target);
  cJSON_AddNumberToObject(rec, "tokens_per_s", p->tokens_per_s);
  cJSON_AddNumberToObject(rec, "memory_bytes", (double)p->memory_bytes);
  char *json = cJSON_Print(o);
  cJSON_Delete(o);

  size_t cap = 256 + (size_t)s->nrows * 128 + strlen(s->why) * 2;
  char *csv = malloc(cap);
  size_t off = 0;
  if (csv) {
    off += (size_t)snprintf(csv, cap,
                            "batch,tokens_per_s,memory_bytes,"
                            "rss_peak_bytes,loss,grad_norm,"
                            "stopped_reason\n");
    for (int i = 0; i < s->nrows; i++) {
      const row *r = &s->rows[i];
      off += (size_t)snprintf(
          csv + off, cap - off,
          "%d,%.1f,%llu,%llu,%.6f,"
          "%.6f,",
          r->B, r->tokens_per_s, (unsigned long long)r->memory_bytes,
          (unsigned long long)r->rss_peak, r->loss, r->grad_norm);
      if (i == s->nrows - 1) { /* quoted: the reason has commas */
        csv[off++] = '"';
        for (const char *c = s->why; *c && off < cap - 4; c++) {
          if (*c == '"')
            csv[off++] = '"';
          csv[off++] = *c;
        }
        csv[off++] = '"';
      }
      csv[off++] = '\n';
      csv[off] = 0;
    }
  }
  char *svg = sweep_svg(s);
  char *jpath = NULL;
  int rc = -1;
  if (trainkit_write_results(s->ctx, h, "sweep", json, csv, svg, &jpath) == 0) {
    char v[64];
    snprintf(v, sizeof v, "%d", p->B);
    h->output(s->ctx, "micro_batch", v);
    snprintf(v, sizeof v, "%d", accum);
    h->output(s->ctx, "grad_accum", v);
    snprintf(v, sizeof v, "%lld", (long long)p->B * accum);
    h->output(s->ctx, "global_batch", v);
    snprintf(v, sizeof v, "%.0f", p->tokens_per_s);
    h->output(s->ctx, "tokens_per_s", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)p->memory_bytes);
    h->output(s->ctx, "memory_bytes", v);
    h->output(s->ctx, "sweep", jpath);
    rc = 0;
  }
  free(jpath);
  free(json);
  free(csv);
  free(svg);
  return rc;
}

static void log_table(const sweep *s, int pick) {
  const dagrun_host *h = s->h;
  h->log(s->ctx, DAGRUN_LOG_INFO, "%10s %12s %12s %12s %9s %10s", "micro",
         "tokens/s", "engine MiB", "peak RSS MiB", "loss", "grad norm");
  for (int i = 0; i < s->nrows; i++) {
    const row *r = &s->rows[i];
    h->log(s->ctx, DAGRUN_LOG_INFO, "%10d %12.0f %12.1f %12.1f %9.4f %10.3f%s",
           r->B, r->tokens_per_s, mib(r->memory_bytes), mib(r->rss_peak),
           r->loss, r->grad_norm,
           i == pick     ? "  <- recommended"
           : r->unstable ? "  unstable"
                         : "");
  }
  h->log(s->ctx, DAGRUN_LOG_INFO, "stopped: %s", s->why);
}

static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  sweep *s = calloc(1, sizeof *s);
  gpt *base = NULL;
  char *init_dir = NULL;
  int status = EXIT_FAILED;
  if (!s) {
    h->fail(ctx, "out of memory");
    return EXIT_FAILED;
  }
  s->ctx = ctx;
  s->h = h;
  s->pick = -1;
  if (read_params(s) != 0) {
    status = EXIT_BAD_PARAMS;
    goto done;
  }
  s->step_s = malloc((size_t)s->steps * sizeof *s->step_s);
  if (!s->step_s) {
    h->fail(ctx, "out of memory");
    goto done;
  }
  trainkit_set_threads(s->threads);
  if (trainkit_open_data(ctx, h, &s->m, &s->data) != 0 ||
      trainkit_make_model(ctx, h, &s->m, &s->data, s->seed, &base, &init_dir))
    goto done;
  /* Every size starts from these weights; the model itself goes, so that
   * only the engine being measured holds memory. */
  size_t np = gpt_num_params(base);
  s->weights0 = malloc(np * sizeof(float));
  if (!s->weights0) {
    h->fail(ctx, "out of memory for a copy of the weights");
    goto done;
  }
  memcpy(s->weights0, gpt_params(base), np * sizeof(float));
  gpt_destroy(base);
  base = NULL;
  const gpt_config *mc = &s->m.cfg;
  h->log(ctx, DAGRUN_LOG_INFO,
         "model %s: %d layers, %d heads, width %d, seq_len %d, vocab %d: "
         "%.2fM parameters; memory_cap %.1f MiB; %lld steps per size",
         s->m.name, mc->n_layer, mc->n_head, mc->n_embd, s->m.T, mc->vocab_size,
         np / 1e6, mib(s->cap), (long long)s->steps);

  int B = 1;
  for (;;) {
    s->next_B = B;
    h->progress(ctx, log2(B) / (log2((double)s->max_batch) + 1), NULL);
    int rc = measure(s, B);
    if (rc < 0)
      goto done;
    if (rc > 0)
      break;
    if ((int64_t)B * 2 > s->max_batch || s->nrows == MAX_ROWS) {
      snprintf(s->why, sizeof s->why,
               "max_batch: micro-batch %d would be above max_batch %lld", B * 2,
               (long long)s->max_batch);
      break;
    }
    B *= 2;
  }
  s->pick = recommend(s);
  int pick = s->pick;
  log_table(s, pick);
  if (pick < 0) {
    h->fail(ctx, "no micro-batch to recommend: %s",
            s->nrows ? "the first size is already unstable" : s->why);
    goto done;
  }
  const row *p = &s->rows[pick];
  int accum = s->target ? (int)((s->target + p->B - 1) / p->B) : 1;
  h->log(ctx, DAGRUN_LOG_INFO,
         "recommended: micro_batch %d (%.0f tokens/s, %.1f MiB)%s", p->B,
         p->tokens_per_s, mib(p->memory_bytes),
         s->target ? "" : "; no target_batch: grad_accum 1");
  if (s->target)
    h->log(ctx, DAGRUN_LOG_INFO,
           "target_batch %lld: grad_accum %d gives a global batch of %lld "
           "sequences",
           (long long)s->target, accum, (long long)p->B * accum);
  if (write_results(s, pick, accum) != 0)
    goto done;
  status = 0;
done:
  gpt_destroy(base);
  free(init_dir);
  tokdata_free(&s->data);
  free(s->weights0);
  free(s->step_s);
  free(s);
  return status;
}

static const dagrun_param_choice choices[] = {
    TRAINKIT_MODEL_CHOICES,
    TRAINKIT_OPTIM_CHOICES,
    {NULL, NULL},
};

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "batch_sweep",
    "1.0.0",
    "Measures tokens/s and memory at micro-batch 1, 2, 4, ... up to a "
    "memory cap or instability; recommends a micro-batch and accumulation.",
    params,
    run,
    choices,
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
