/*
 * report: report.html for a run. See report.h for what it shows and
 * where the numbers come from.
 */
#include "report.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "lib/svgplot.h"
#include "report/metricseries.h"
#include "store/history.h"


/* A chart's time-split bars: at most this many (steps are averaged per
 * bar). */
#define MAX_BARS 60
/* Samples and embedded figures larger than this are cut or left out. */
#define MAX_SAMPLES_BYTES (16 * 1024)
#define MAX_SVG_BYTES (4 * 1024 * 1024)

/* ---- small helpers ------------------------------------------------------ */

static double jnum(const cJSON *o, const char *k, double dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* HTML text and attribute values: & < > " ' escaped (svgplot's
 * escaping, so that the page and its charts agree). */
static void esc(sbuf *b, const char *s) {
  if (!s)
    return;
  char *e = svgplot_escape(s);
  sbuf_puts(b, e);
  free(e);
}

/* "2026-11-21T20:24:42.111Z" -> seconds since the epoch, or 0. */
static double parse_utc(const char *z) {
  struct tm tm = {0};
  double sec = 0;
  if (!z || sscanf(z, "%d-%d-%dT%d:%d:%lf", &tm.tm_year, &tm.tm_mon,
                   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &sec) != 6)
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_sec = 0;
  return (double)timegm(&tm) + sec;
}

static cJSON *read_json(const char *path) {
  char *text;
  size_t n;
  if (fileio_read_file(path, &text, &n) != 0)
    return NULL;
  cJSON *j = cJSON_Parse(text);
  free(text);
  return j;
}

static double file_mtime(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return 0;
  return (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9;
}

static void fmt_num(char *buf, size_t n, double v) {
  svgplot_format_number(buf, n, v);
}

/* ---- the run as the report sees it ----------------------------------------
 */

typedef struct attempt {
  int n;
  const char *state; /* success, failed, cancelled, running, starting */
  double start, end; /* wall clock; end 0: not over */
  int exit_code;     /* -1: none */
  const char *error;
} attempt;

typedef struct rtask {
  const char *name, *stage, *state, *error, *cached_from;
  const cJSON *needs; /* run.json's names, or NULL */
  int n_attempts, exit_code;
  double started, ended;
  attempt *att;
  size_t n_att;
  int depth, visiting;
  char *dir; /* <run_dir>/<name> */
} rtask;

typedef struct rep {
  const char *run_dir;
  cJSON *rj;   /* run.json, or NULL */
  cJSON *srun; /* the store's run, or NULL */
  const char *dag, *id, *state, *trigger, *file;
  double started, ended, logical_date, now;
  const cJSON *params; /* as recorded, secrets redacted */
  cJSON *params_owned;
  rtask *t;
  size_t n;
  strmap by_name; /* task name -> index in t */
  sbuf out;
  /* The run had secrets that this report does not know (`dagrun report`
   * sees only "(redacted)"): the files that would be embedded as they are
   * (samples, figures) are left out rather than shown unmasked. */
  int withhold;
  /* The run's secrets in every form the page holds them (raw, and escaped
   * as HTML and SVG write them), or NULL when it has none: mask_page
   * masks the page with them, and write_figures each figure before it is
   * encoded, where mask_page cannot see into it. */
  secrets *masks;
} rep;

static const char *state_color(const char *s) {
  static const struct {
    const char *state, *color;
  } map[] = {{"waiting", "#c9ced8"},         {"queued", "#a9b8d6"},
             {"running", "#3d8bfd"},         {"starting", "#3d8bfd"},
             {"retry_wait", "#f0a830"},      {"success", "#2fa36b"},
             {"cached", "#7cc4a0"},          {"failed", "#d9434b"},
             {"upstream_failed", "#e89aa0"}, {"cancelled", "#8a8f9c"},
             {"skipped", "#c6b3e6"},         {"waiting_approval", "#e3a6e8"}};
  for (size_t i = 0; s && i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i].state, s) == 0)
      return map[i].color;
  return "#c9ced8";
}

/* The store's task entry named name, or NULL. */
/* The store's record of task name. *next is where the last one found
 * ended: run.json and the store list the tasks in the same order, so the
 * search starts there and a whole run costs one pass, not one per task
 * (a quarter of a 10,000-task run's report). */
static const cJSON *store_task(const cJSON *srun, const char *name,
                               const cJSON **next) {
  const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(srun, "tasks");
  const cJSON *first = tasks ? tasks->child : NULL;
  const cJSON *start = *next ? *next : first;
  for (int pass = 0; pass < 2; pass++) {
    for (const cJSON *k = pass ? first : start; k; k = k->next) {
      if (pass && k == start)
        break;
      const char *z = jstr(k, "name");
      if (z && strcmp(z, name) == 0) {
        *next = k->next;
        return k;
      }
    }
  }
  return NULL;
}

/* Attempts from the store; else, from the attempt directories (the
 * attempt.json written at the start, the log last written at the end). */
static void load_attempts(rep *r, rtask *t, const cJSON *st) {
  const cJSON *al =
      st ? cJSON_GetObjectItemCaseSensitive(st, "attempt_list") : NULL;
  int n = cJSON_GetArraySize(al);
  if (n > 0) {
    t->att = xcalloc((size_t)n, sizeof *t->att);
    for (const cJSON *a = al->child; a; a = a->next) {
      attempt *x = &t->att[t->n_att++];
      x->n = (int)jnum(a, "n", (double)t->n_att);
      x->state = jstr(a, "state") ? jstr(a, "state") : "failed";
      x->start = jnum(a, "started", 0);
      x->end = jnum(a, "finished", 0);
      x->exit_code = (int)jnum(a, "exit_code", -1);
      x->error = jstr(a, "error");
    }
    return;
  }
  if (t->n_attempts <= 0)
    return;
  t->att = xcalloc((size_t)t->n_attempts, sizeof *t->att);
  for (int i = 1; i <= t->n_attempts; i++) {
    char *d = xasprintf("%s/attempt-%d", t->dir, i);
    char *aj = path_join(d, "attempt.json"), *log = path_join(d, "log");
    attempt *x = &t->att[t->n_att++];
    x->n = i;
    x->start = file_mtime(aj);
    x->end = file_mtime(log);
    if (i == 1 && t->started > 0)
      x->start = t->started;
    if (i == t->n_attempts && t->ended > 0)
      x->end = t->ended;
    /* Files touched since (copied, restored) say nothing: keep the bars
     * inside the task's recorded span. */
    if (t->started > 0 && t->ended >= t->started) {
      x->start = fmin(fmax(x->start, t->started), t->ended);
      x->end = fmin(fmax(x->end, x->start), t->ended);
    }
    x->exit_code = i == t->n_attempts ? t->exit_code : -1;
    x->state = i < t->n_attempts                    ? "failed"
               : strcmp(t->state, "success") == 0   ? "success"
               : strcmp(t->state, "running") == 0   ? "running"
               : strcmp(t->state, "cancelled") == 0 ? "cancelled"
                                                    : "failed";
    free(aj);
    free(log);
    free(d);
  }
  (void)r;
}

static int task_index(const rep *r, const char *name) {
  size_t i;
  return strmap_get(&r->by_name, name, &i) ? (int)i : -1;
}

/* Longest chain of needs above the task (0: a root). */
static int task_depth(rep *r, size_t i) {
  rtask *t = &r->t[i];
  if (t->depth >= 0)
    return t->depth;
  if (t->visiting) /* a cycle cannot be in a run; be safe anyway */
    return 0;
  t->visiting = 1;
  int d = 0;
  for (const cJSON *k = t->needs ? t->needs->child : NULL; k; k = k->next) {
    int j = cJSON_IsString(k) ? task_index(r, k->valuestring) : -1;
    if (j >= 0) {
      int dj = task_depth(r, (size_t)j) + 1;
      if (dj > d)
        d = dj;
    }
  }
  t->visiting = 0;
  t->depth = d;
  return d;
}

static int load_run(rep *r, store *st, const char *run_id, char *err,
                    size_t errlen) {
  char *p = path_join(r->run_dir, "run.json");
  r->rj = read_json(p);
  free(p);
  if (st) {
    int rc = 0;
    char serr[512];
    r->srun = store_run(st, run_id, &rc, serr, sizeof serr);
  }
  if (!r->rj && !r->srun) {
    snprintf(err, errlen, "no run.json in %s and no record of run %s",
             r->run_dir, run_id);
    return DR_ENOENT;
  }
  const cJSON *rj = r->rj, *sr = r->srun;
  r->dag = jstr(sr, "dag") ? jstr(sr, "dag") : jstr(rj, "dag");
  r->id = run_id;
  r->state = jstr(sr, "state") ? jstr(sr, "state") : jstr(rj, "state");
  r->trigger = jstr(sr, "trigger");
  r->file = jstr(sr, "dag_file") ? jstr(sr, "dag_file") : jstr(rj, "file");
  r->logical_date = jnum(sr, "logical_date", 0);
  r->started = jnum(sr, "started", 0);
  if (r->started <= 0)
    r->started = parse_utc(jstr(rj, "started"));
  r->ended = jnum(sr, "finished", 0);
  if (r->ended <= 0)
    r->ended = parse_utc(jstr(rj, "ended"));
  r->now = clock_wall();
  r->params = cJSON_GetObjectItemCaseSensitive(rj, "params");
  if (!r->params && jstr(sr, "params")) {
    r->params_owned = cJSON_Parse(jstr(sr, "params"));
    r->params = r->params_owned;
  }
  if (!r->dag)
    r->dag = "?";
  if (!r->state)
    r->state = "unknown";

  const cJSON *tasks = cJSON_GetObjectItemCaseSensitive(rj, "tasks");
  int from_store = !cJSON_IsArray(tasks) || cJSON_GetArraySize(tasks) == 0;
  if (from_store)
    tasks = cJSON_GetObjectItemCaseSensitive(sr, "tasks");
  int n = cJSON_GetArraySize(tasks);
  r->t = xcalloc(n > 0 ? (size_t)n : 1, sizeof *r->t);
  const cJSON *next = NULL;
  for (const cJSON *k = tasks ? tasks->child : NULL; k; k = k->next) {
    const char *name = jstr(k, "name");
    if (!name)
      continue;
    rtask *t = &r->t[r->n++];
    const cJSON *s = from_store ? k : store_task(sr, name, &next);
    const cJSON *j = from_store ? NULL : k;
    t->name = name;
    t->stage = jstr(j, "stage") ? jstr(j, "stage") : "";
    t->needs = cJSON_GetObjectItemCaseSensitive(j, "needs");
    t->state = jstr(s, "state") ? jstr(s, "state") : jstr(j, "state");
    if (!t->state)
      t->state = "unknown";
    t->n_attempts = (int)jnum(s, "attempts", jnum(j, "attempts", 0));
    t->exit_code = (int)jnum(s, "exit_code", jnum(j, "exit_code", -1));
    t->error = jstr(s, "error") ? jstr(s, "error") : jstr(j, "reason");
    t->cached_from = jstr(j, "cached_from");
    t->started = jnum(s, "started", 0);
    if (t->started <= 0)
      t->started = parse_utc(jstr(j, "started"));
    t->ended = jnum(s, "finished", 0);
    if (t->ended <= 0)
      t->ended = parse_utc(jstr(j, "ended"));
    t->dir = path_join(r->run_dir, name);
    t->depth = -1;
    load_attempts(r, t, s);
    strmap_put(&r->by_name, name, r->n - 1);
  }
  for (size_t i = 0; i < r->n; i++)
    task_depth(r, i);
  return 0;
}

static void rep_free(rep *r) {
  for (size_t i = 0; i < r->n; i++) {
    free(r->t[i].att);
    free(r->t[i].dir);
  }
  free(r->t);
  strmap_free(&r->by_name);
  cJSON_Delete(r->rj);
  cJSON_Delete(r->srun);
  cJSON_Delete(r->params_owned);
  sbuf_free(&r->out);
  secrets_destroy(r->masks);
}

/* The series' value at step, or NAN (binary search: sorted by step). */
static double value_at(const metric_series *s, double step) {
  size_t lo = 0, hi = s ? s->n : 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->p[mid].step < step)
      lo = mid + 1;
    else
      hi = mid;
  }
  return s && lo < s->n && s->p[lo].step == step ? s->p[lo].value : NAN;
}

/* x (steps) and y (values times scale) of a series; caller frees both. */
static void series_xy(const metric_series *s, double scale, double **x,
                      double **y) {
  size_t n = s ? s->n : 0;
  *x = xmalloc((n ? n : 1) * sizeof **x);
  *y = xmalloc((n ? n : 1) * sizeof **y);
  for (size_t i = 0; i < n; i++) {
    (*x)[i] = s->p[i].step;
    (*y)[i] = s->p[i].value * scale;
  }
}

/* ---- HTML pieces ----------------------------------------------------------
 */

static void add_chart(rep *r, char *svg) {
  if (!svg)
    return;
  sbuf_puts(&r->out, "<figure class=\"plot\">");
  sbuf_puts(&r->out, svg);
  sbuf_puts(&r->out, "</figure>\n");
  free(svg);
}

static void note(rep *r, const char *text) {
  sbuf_puts(&r->out, "<p class=\"note\">");
  esc(&r->out, text);
  sbuf_puts(&r->out, "</p>\n");
}

static void badge(sbuf *b, const char *state) {
  sbuf_printf(b, "<span class=\"badge\" style=\"background:%s\">",
              state_color(state));
  esc(b, state);
  sbuf_puts(b, "</span>");
}

static void dt(sbuf *b, const char *k, const char *v) {
  sbuf_puts(b, "<dt>");
  esc(b, k);
  sbuf_puts(b, "</dt><dd>");
  esc(b, v ? v : "-");
  sbuf_puts(b, "</dd>\n");
}

static void fmt_time(double t, char *buf, size_t n) {
  if (t > 0)
    format_utc(t, 0, buf, n);
  else
    snprintf(buf, n, "-");
}

/* The JSON value as a short text: strings as they are, the rest as JSON. */
static char *json_text(const cJSON *v) {
  if (cJSON_IsString(v))
    return xstrdup(v->valuestring);
  char *z = cJSON_PrintUnformatted(v);
  char *out = xstrdup(z ? z : "");
  cJSON_free(z);
  return out;
}

/* A two-column table of an object's members. */
static void kv_table(sbuf *b, const cJSON *o, int scalars_only) {
  sbuf_puts(b, "<table class=\"kv\"><tbody>\n");
  for (const cJSON *k = o ? o->child : NULL; k; k = k->next) {
    if (scalars_only && (cJSON_IsObject(k) || cJSON_IsArray(k)))
      continue;
    char *v = json_text(k);
    sbuf_puts(b, "<tr><th>");
    esc(b, k->string);
    sbuf_puts(b, "</th><td>");
    esc(b, v);
    sbuf_puts(b, "</td></tr>\n");
    free(v);
  }
  sbuf_puts(b, "</tbody></table>\n");
}

/* ---- (a) header -----------------------------------------------------------
 */

static void write_header(rep *r) {
  sbuf *b = &r->out;
  char t0[40], dur[32], ld[40];
  fmt_time(r->started, t0, sizeof t0);
  double end = r->ended > 0 ? r->ended : r->now;
  format_duration(r->started > 0 ? end - r->started : 0, dur, sizeof dur);
  size_t ok = 0, skipped = 0;
  for (size_t i = 0; i < r->n; i++) {
    ok += strcmp(r->t[i].state, "success") == 0 ||
          strcmp(r->t[i].state, "cached") == 0;
    skipped += strcmp(r->t[i].state, "skipped") == 0;
  }
  sbuf_puts(b, "<header>\n<h1>");
  esc(b, r->dag);
  sbuf_puts(b, " <small>run ");
  esc(b, r->id);
  sbuf_puts(b, "</small> ");
  badge(b, r->state);
  sbuf_puts(b, "</h1>\n<dl class=\"meta\">\n");
  dt(b, "DAG", r->dag);
  dt(b, "run id", r->id);
  dt(b, "state", r->state);
  dt(b, "trigger", r->trigger ? r->trigger : "manual (not recorded)");
  if (r->logical_date > 0) {
    fmt_time(r->logical_date, ld, sizeof ld);
    dt(b, "logical date", ld);
  } else {
    dt(b, "logical date", "- (started by hand)");
  }
  dt(b, "started", t0);
  char dd[64];
  snprintf(dd, sizeof dd, "%s%s", dur, r->ended > 0 ? "" : " so far");
  dt(b, "duration", dd);
  char tasks[64];
  snprintf(tasks, sizeof tasks, "%zu, %zu succeeded", r->n, ok);
  if (skipped)
    snprintf(tasks + strlen(tasks), sizeof tasks - strlen(tasks),
             ", %zu skipped", skipped);
  dt(b, "tasks", tasks);
  dt(b, "DAG file", r->file);
  dt(b, "run directory", r->run_dir);
  sbuf_puts(b, "</dl>\n</header>\n");
}

/* ---- (b) the DAG and its tasks --------------------------------------------
 */

#define BOX_W 160.0
#define BOX_H 44.0
#define COL_W 210.0
#define ROW_H 62.0

/* v as printf's "%.1f" would print it. The DAG's coordinates are halves
 * (integers, .5), whose decimal form is exact: written from integers here,
 * since printf's general float conversion was a third of report.html's
 * time for a 10,000-task DAG (30,000 boxes and 20,000 edges). Anything
 * else goes to printf. */
static void put_1f(sbuf *b, double v) {
  double twice = v * 2;
  if (!(fabs(twice) < 1e15) || twice != floor(twice)) {
    sbuf_printf(b, "%.1f", v);
    return;
  }
  long long h = (long long)twice; /* v = h / 2 */
  char buf[32];
  int neg = h < 0;
  unsigned long long u = neg ? (unsigned long long)-h : (unsigned long long)h;
  int n = snprintf(buf, sizeof buf, "%s%llu.%c", neg ? "-" : "", u / 2,
                   u % 2 ? '5' : '0');
  sbuf_add(b, buf, (size_t)n);
}

/* sbuf_printf for the DAG's hot loops: "%.1f" by put_1f, "%s" and "%%";
 * nothing else is used there. */
static void svg_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *p = fmt;
  while (*p) {
    const char *pct = strchr(p, '%');
    if (!pct) {
      sbuf_puts(b, p);
      break;
    }
    sbuf_add(b, p, (size_t)(pct - p));
    if (strncmp(pct, "%.1f", 4) == 0) {
      put_1f(b, va_arg(ap, double));
      p = pct + 4;
    } else if (pct[1] == 's') {
      sbuf_puts(b, va_arg(ap, const char *));
      p = pct + 2;
    } else { /* "%%" */
      sbuf_putc(b, '%');
      p = pct + 2;
    }
  }
  va_end(ap);
}

static void write_dag(rep *r) {
  sbuf *b = &r->out;
  int max_depth = 0;
  for (size_t i = 0; i < r->n; i++)
    if (r->t[i].depth > max_depth)
      max_depth = r->t[i].depth;
  int *rows_in = xcalloc((size_t)max_depth + 1, sizeof *rows_in);
  int *row = xcalloc(r->n ? r->n : 1, sizeof *row);
  int max_rows = 1;
  for (size_t i = 0; i < r->n; i++) {
    row[i] = rows_in[r->t[i].depth]++;
    if (rows_in[r->t[i].depth] > max_rows)
      max_rows = rows_in[r->t[i].depth];
  }
  double W = fmax(420, 20 + COL_W * (max_depth + 1) - (COL_W - BOX_W));
  double H = 40 + ROW_H * max_rows;
  /* Drawn a third larger than its viewBox: 12-unit text reads as 16px. */
  sbuf_printf(b,
              "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart dag\" "
              "data-title=\"DAG\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" "
              "height=\"%.0f\" role=\"img\" font-family=\"sans-serif\" "
              "font-size=\"12\">\n<title>The DAG: tasks by dependency depth, "
              "coloured by state</title>\n",
              W, H, W * 4 / 3, H * 4 / 3);
  sbuf_printf(b, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", W,
              H);
  /* Box i's top-left corner, each column centred vertically. */
#define BX(i) (10 + COL_W * r->t[i].depth)
#define BY(i)                                                                  \
  (20 + (max_rows - rows_in[r->t[i].depth]) * ROW_H / 2 + ROW_H * row[i])
  sbuf_puts(b, "<g class=\"edges\" stroke=\"#7a8294\" fill=\"none\" "
               "stroke-width=\"1.5\">\n");
  for (size_t i = 0; i < r->n; i++) {
    const cJSON *nd = r->t[i].needs;
    for (const cJSON *k = nd ? nd->child : NULL; k; k = k->next) {
      int j = cJSON_IsString(k) ? task_index(r, k->valuestring) : -1;
      if (j < 0)
        continue;
      double x1 = BX(j) + BOX_W, y1 = BY(j) + BOX_H / 2;
      double x2 = BX(i) - 2, y2 = BY(i) + BOX_H / 2, mx = (x1 + x2) / 2;
      svg_printf(b,
                 "<path class=\"edge\" d=\"M%.1f %.1f C%.1f %.1f %.1f "
                 "%.1f %.1f %.1f\"/>",
                 x1, y1, mx, y1, mx, y2, x2 - 6, y2);
      svg_printf(b,
                 "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" "
                 "fill=\"#7a8294\" stroke=\"none\"/>\n",
                 x2, y2, x2 - 8, y2 - 4.5, x2 - 8, y2 + 4.5);
    }
  }
  sbuf_puts(b, "</g>\n");
  for (size_t i = 0; i < r->n; i++) {
    const rtask *t = &r->t[i];
    double x = BX(i), y = BY(i);
    const char *c = state_color(t->state);
    sbuf_puts(b, "<g class=\"task\" data-task=\"");
    esc(b, t->name);
    sbuf_puts(b, "\" data-state=\"");
    esc(b, t->state);
    sbuf_puts(b, "\"><title>");
    esc(b, t->name);
    sbuf_puts(b, ": ");
    esc(b, t->state);
    if (t->error) {
      sbuf_puts(b, " \xe2\x80\x94 ");
      esc(b, t->error);
    }
    sbuf_puts(b, "</title>");
    svg_printf(b,
               "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
               "rx=\"6\" fill=\"#ffffff\" stroke=\"%s\" "
               "stroke-width=\"2\"/>",
               x, y, BOX_W, BOX_H, c);
    svg_printf(b,
               "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"%.1f\" "
               "rx=\"3\" fill=\"%s\"/>",
               x, y, BOX_H, c);
    /* Long names are cut to fit the box; the <title> has them whole. */
    char name[64];
    size_t ln = strlen(t->name);
    if (ln > 21)
      snprintf(name, sizeof name, "%.19s\xe2\x80\xa6", t->name);
    else
      snprintf(name, sizeof name, "%s", t->name);
    svg_printf(b,
               "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\" "
               "fill=\"#1d2330\">",
               x + 16, y + 18);
    esc(b, name);
    svg_printf(b,
               "</text><text x=\"%.1f\" y=\"%.1f\" fill=\"#555b6b\" "
               "font-size=\"11\">",
               x + 16, y + 34);
    esc(b, t->state);
    if (t->n_attempts > 1)
      sbuf_printf(b, ", %d attempts", t->n_attempts);
    sbuf_puts(b, "</text></g>\n");
  }
#undef BX
#undef BY
  sbuf_puts(b, "</svg>\n");
  free(rows_in);
  free(row);
}

static void write_tasks(rep *r) {
  sbuf *b = &r->out;
  sbuf_puts(b, "<section id=\"tasks\">\n<h2>DAG and tasks</h2>\n"
               "<figure class=\"plot wide\">");
  write_dag(r);
  sbuf_puts(b, "</figure>\n<table class=\"tasks\">\n<thead><tr><th>task</th>"
               "<th>stage</th><th>state</th><th>attempts</th><th>exit</th>"
               "<th>duration</th><th>error</th></tr></thead>\n<tbody>\n");
  for (size_t i = 0; i < r->n; i++) {
    const rtask *t = &r->t[i];
    char dur[32] = "-", code[16] = "-";
    if (t->started > 0 && t->ended > 0)
      format_duration(t->ended - t->started, dur, sizeof dur);
    if (t->exit_code >= 0)
      snprintf(code, sizeof code, "%d", t->exit_code);
    sbuf_puts(b, "<tr data-task=\"");
    esc(b, t->name);
    sbuf_puts(b, "\"><td>");
    esc(b, t->name);
    sbuf_puts(b, "</td><td>");
    esc(b, t->stage);
    sbuf_puts(b, "</td><td>");
    badge(b, t->state);
    sbuf_printf(b,
                "</td><td class=\"num\">%d</td><td class=\"num\">%s</td>"
                "<td class=\"num\">%s</td><td class=\"err\">",
                t->n_attempts, code, dur);
    if (t->error)
      esc(b, t->error);
    else if (t->cached_from) {
      sbuf_puts(b, "(outputs reused from run ");
      esc(b, t->cached_from);
      sbuf_puts(b, ")");
    }
    sbuf_puts(b, "</td></tr>\n");
  }
  sbuf_puts(b, "</tbody></table>\n</section>\n");
}

/* ---- (c) the timeline ------------------------------------------------------
 */

static const char *outcome_color(const char *state) {
  if (strcmp(state, "success") == 0)
    return "#2fa36b";
  if (strcmp(state, "running") == 0 || strcmp(state, "starting") == 0)
    return "#3d8bfd";
  if (strcmp(state, "cancelled") == 0)
    return "#8a8f9c";
  return "#d9434b";
}

static void write_timeline(rep *r) {
  sbuf *b = &r->out;
  sbuf_puts(b, "<section id=\"timeline\">\n<h2>Timeline</h2>\n");
  svgplot_row *rows = xcalloc(r->n ? r->n : 1, sizeof *rows);
  svgplot_span **spans = xcalloc(r->n ? r->n : 1, sizeof *spans);
  char ***labels = xcalloc(r->n ? r->n : 1, sizeof *labels);
  double t0 = r->started;
  if (t0 <= 0) /* no start recorded: the earliest attempt's */
    for (size_t i = 0; i < r->n; i++)
      for (size_t a = 0; a < r->t[i].n_att; a++)
        if (r->t[i].att[a].start > 0 && (t0 <= 0 || r->t[i].att[a].start < t0))
          t0 = r->t[i].att[a].start;
  size_t retried = 0;
  for (size_t i = 0; i < r->n; i++) {
    const rtask *t = &r->t[i];
    rows[i].label = t->name;
    spans[i] = xcalloc(t->n_att ? t->n_att : 1, sizeof **spans);
    labels[i] = xcalloc(t->n_att ? t->n_att : 1, sizeof **labels);
    retried += t->n_att > 1;
    for (size_t a = 0; a < t->n_att; a++) {
      const attempt *x = &t->att[a];
      double end = x->end > 0 ? x->end : (r->ended > 0 ? r->ended : r->now);
      char dur[32], code[32] = "";
      format_duration(end - x->start, dur, sizeof dur);
      if (x->exit_code >= 0)
        snprintf(code, sizeof code, ", exit %d", x->exit_code);
      labels[i][a] =
          xasprintf("%s attempt %d: %s%s after %s%s%s", t->name, x->n, x->state,
                    code, dur, x->error ? ": " : "", x->error ? x->error : "");
      spans[i][a] = (svgplot_span){x->start > 0 ? x->start - t0 : NAN,
                                   x->start > 0 ? end - t0 : NAN,
                                   outcome_color(x->state), labels[i][a]};
    }
    rows[i].spans = spans[i];
    rows[i].n = t->n_att;
  }
  static const svgplot_key keys[] = {{"success", "#2fa36b"},
                                     {"failed", "#d9434b"},
                                     {"running", "#3d8bfd"},
                                     {"cancelled", "#8a8f9c"}};
  svgplot_chart c = {.title = "Attempts of every task",
                     .xlabel = "time since the run started (s)",
                     .width = 900};
  add_chart(
      r, svgplot_timeline(&c, rows, r->n, keys, sizeof keys / sizeof keys[0]));
  note(r, retried ? "One bar per attempt: a task that was retried has "
                    "several bars on its row; hover a bar for its outcome."
                  : "One bar per attempt; hover a bar for its outcome.");
  for (size_t i = 0; i < r->n; i++) {
    for (size_t a = 0; a < r->t[i].n_att; a++)
      free(labels[i][a]);
    free(labels[i]);
    free(spans[i]);
  }
  free(labels);
  free(spans);
  free(rows);
  sbuf_puts(b, "</section>\n");
}

/* ---- (d) training curves ---------------------------------------------------
 */

static cJSON *attempt_json_of(const rtask *t, int n) {
  char *p = xasprintf("%s/attempt-%d/attempt.json", t->dir, n);
  cJSON *j = read_json(p);
  free(p);
  return j;
}

/* The task's params from its latest attempt.json (masked), or NULL;
 * caller frees. *n_out: that attempt's number. The recorded count of
 * attempts names it; the directory is listed only when that attempt has
 * no attempt.json (a run recorded in part: a full disk). */
static cJSON *latest_attempt_json(const rtask *t, int *n_out) {
  cJSON *j = t->n_attempts > 0 ? attempt_json_of(t, t->n_attempts) : NULL;
  if (j) {
    *n_out = t->n_attempts;
    return j;
  }
  DIR *d = opendir(t->dir);
  int best = 0;
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      int n;
      char tail;
      if (sscanf(e->d_name, "attempt-%d%c", &n, &tail) == 1 && n > best)
        best = n;
    }
    closedir(d);
  }
  *n_out = best;
  return best ? attempt_json_of(t, best) : NULL;
}

static double param_num(const cJSON *params, const char *k, double dflt) {
  return jnum(params, k, dflt);
}

/* Tokens per optimizer step: from the params (batch_size x seq_len, or
 * block_size when seq_len is 0, x grad_accum), else from out/summary.json
 * (tokens / steps). 0 with *why when neither says. */
static double tokens_per_step(const rtask *t, const cJSON *params,
                              const cJSON *summary, const char **why) {
  double B = param_num(params, "batch_size", 0);
  double T = param_num(params, "seq_len", 0);
  if (T <= 0)
    T = param_num(params, "block_size", 0);
  double A = param_num(params, "grad_accum", 1);
  if (B > 0 && T > 0 && A > 0)
    return B * T * A;
  double tokens = jnum(summary, "tokens", 0), steps = jnum(summary, "steps", 0);
  if (tokens > 0 && steps > 0)
    return tokens / steps;
  (void)t;
  *why = "no `tokens` metric was recorded, and the task's params do not "
         "give batch_size \xc3\x97 seq_len \xc3\x97 grad_accum (the model "
         "preset sets the context length) nor does out/summary.json give "
         "tokens and steps";
  return 0;
}

/* Loss-spike guard events: the `spike` metric's steps, and the steps
 * where the cumulative `spike_events` metric went up. The train stage
 * records spike_events at the 0-based index of the step being taken, and
 * that step's loss at index + 1: the mark goes on the loss point. */
static svgplot_mark *spike_marks(const metric_set *m, size_t *n_out,
                                 char ***labels_out) {
  svgplot_mark *marks = NULL;
  char **labels = NULL;
  size_t n = 0, cap = 0, lcap = 0, ln = 0;
  const metric_series *sp = metric_set_get(m, "spike");
  const metric_series *ev = metric_set_get(m, "spike_events");
  double *steps = NULL;
  size_t ns = 0, scap = 0;
  for (size_t i = 0; sp && i < sp->n; i++)
    VEC_PUSH(steps, ns, scap, sp->p[i].step);
  double prev = 0;
  for (size_t i = 0; ev && i < ev->n; i++) {
    if (ev->p[i].value > prev) {
      int dup = 0;
      for (size_t k = 0; k < ns; k++)
        if (fabs(steps[k] - (ev->p[i].step + 1)) <= 1)
          dup = 1;
      if (!dup)
        VEC_PUSH(steps, ns, scap, ev->p[i].step + 1);
    }
    prev = ev->p[i].value;
  }
  for (size_t i = 0; i < ns; i++) {
    char *lab = xasprintf("loss-spike guard fired at step %.0f", steps[i]);
    VEC_PUSH(labels, ln, lcap, lab);
    svgplot_mark mk = {steps[i], lab};
    VEC_PUSH(marks, n, cap, mk);
  }
  free(steps);
  *n_out = n;
  *labels_out = labels;
  return marks;
}

/* A one-series line chart of metric name against step, if recorded. */
static void metric_chart(rep *r, const metric_set *m, const char *task,
                         const char *name, double scale, const char *title,
                         const char *ylabel, int logy_auto) {
  const metric_series *s = metric_set_get(m, name);
  if (!s || !s->n)
    return;
  double *x, *y;
  series_xy(s, scale, &x, &y);
  int logy = 0;
  if (logy_auto) {
    double mn = INFINITY, mx = 0;
    for (size_t i = 0; i < s->n; i++)
      if (y[i] > 0) {
        mn = fmin(mn, y[i]);
        mx = fmax(mx, y[i]);
      }
    logy = mx > 0 && mx / mn > 50;
  }
  char *t = xasprintf("%s: %s", task, title);
  svgplot_series se = {.label = name, .x = x, .y = y, .n = s->n};
  svgplot_chart c = {
      .title = t, .xlabel = "step", .ylabel = ylabel, .logy = logy};
  add_chart(r, svgplot_lines(&c, &se, 1));
  free(t);
  free(x);
  free(y);
}

static const struct {
  const char *metric, *label;
} time_parts[] = {{"time_data_s", "data wait"},
                  {"time_forward_s", "forward"},
                  {"time_backward_s", "backward"},
                  {"time_optimizer_s", "optimizer"},
                  {"time_comm_s", "communication"}};
#define N_TIME_PARTS (sizeof time_parts / sizeof time_parts[0])

/* Where the time goes: the per-step split as stacked bars, steps averaged
 * into at most MAX_BARS bars, and each part's share of the total. */
static void time_chart(rep *r, const metric_set *m, const char *task) {
  const metric_series *parts[N_TIME_PARTS];
  const metric_series *base = NULL;
  for (size_t k = 0; k < N_TIME_PARTS; k++) {
    parts[k] = metric_set_get(m, time_parts[k].metric);
    if (parts[k] && (!base || parts[k]->n > base->n))
      base = parts[k];
  }
  if (!base || !base->n)
    return;
  size_t n = base->n, nb = n < MAX_BARS ? n : MAX_BARS;
  double *x = xcalloc(nb, sizeof *x), *v[N_TIME_PARTS];
  double total[N_TIME_PARTS] = {0}, all = 0, peak = 0;
  for (size_t k = 0; k < N_TIME_PARTS; k++)
    v[k] = xcalloc(nb, sizeof *v[k]);
  for (size_t bkt = 0; bkt < nb; bkt++) {
    size_t a = bkt * n / nb, e = (bkt + 1) * n / nb;
    double sum = 0;
    for (size_t i = a; i < e; i++) {
      x[bkt] += base->p[i].step;
      for (size_t k = 0; k < N_TIME_PARTS; k++) {
        double val = parts[k] ? value_at(parts[k], base->p[i].step) : NAN;
        if (isfinite(val) && val > 0) {
          v[k][bkt] += val;
          total[k] += val;
          all += val;
        }
      }
    }
    x[bkt] /= (double)(e - a);
    for (size_t k = 0; k < N_TIME_PARTS; k++) {
      v[k][bkt] /= (double)(e - a);
      sum += v[k][bkt];
    }
    peak = fmax(peak, sum);
  }
  /* Milliseconds read better than 0.0123 s. */
  double scale = peak < 1 ? 1000 : 1;
  for (size_t k = 0; k < N_TIME_PARTS; k++)
    for (size_t bkt = 0; bkt < nb; bkt++)
      v[k][bkt] *= scale;
  svgplot_stack st[N_TIME_PARTS];
  size_t ns = 0;
  for (size_t k = 0; k < N_TIME_PARTS; k++)
    if (parts[k])
      st[ns++] = (svgplot_stack){time_parts[k].label, v[k]};
  char *t =
      xasprintf("%s: where the time goes (mean per step, %zu step%s "
                "a bar)",
                task, (n + nb - 1) / nb, (n + nb - 1) / nb == 1 ? "" : "s");
  svgplot_chart c = {.title = t,
                     .xlabel = "step",
                     .ylabel = scale > 1 ? "time per step (ms)"
                                         : "time per step (s)"};
  add_chart(r, svgplot_stacked_bars(&c, x, nb, st, ns));
  free(t);
  if (all > 0) {
    sbuf *b = &r->out;
    sbuf_puts(b, "<p class=\"note\">Share of step time: ");
    for (size_t k = 0, first = 1; k < N_TIME_PARTS; k++) {
      if (!parts[k])
        continue;
      sbuf_printf(b, "%s%s %.1f%%", first ? "" : ", ", time_parts[k].label,
                  100 * total[k] / all);
      first = 0;
    }
    sbuf_puts(b, ".");
    if (parts[0] && total[0] / all > 0.05)
      sbuf_puts(b, " <strong>Data wait is above 5% of step time: the input "
                   "pipeline holds training back (raise the prefetch depth "
                   "or the loader threads).</strong>");
    sbuf_puts(b, "</p>\n");
  }
  for (size_t k = 0; k < N_TIME_PARTS; k++)
    free(v[k]);
  free(x);
}

static void write_summary(rep *r, const cJSON *summary) {
  static const struct {
    const char *key, *label;
  } keys[] = {{"steps", "steps"},
              {"tokens", "tokens"},
              {"parameters", "parameters"},
              {"loss", "final loss"},
              {"val_loss", "final val_loss"},
              {"tokens_per_s", "tokens/s"},
              {"spike_events", "loss-spike guard events"},
              {"peak_rss_bytes", "peak RSS (bytes)"}};
  sbuf *b = &r->out;
  int any = 0;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(summary, keys[i].key);
    if (!cJSON_IsNumber(v))
      continue;
    if (!any)
      sbuf_puts(b, "<dl class=\"meta summary\">\n");
    any = 1;
    char num[64];
    if (strstr(keys[i].key, "loss"))
      snprintf(num, sizeof num, "%.4f", v->valuedouble);
    else
      fmt_num(num, sizeof num, v->valuedouble);
    dt(b, keys[i].label, num);
  }
  if (any)
    sbuf_puts(b, "</dl>\n");
}

static void write_training(rep *r, const rtask *t, const metric_set *m) {
  sbuf *b = &r->out;
  int an;
  cJSON *aj = latest_attempt_json(t, &an);
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(aj, "params");
  char *sp = xasprintf("%s/out/summary.json", t->dir);
  cJSON *summary = read_json(sp);
  free(sp);

  sbuf_puts(b, "<section class=\"training\" id=\"train-");
  esc(b, t->name);
  sbuf_puts(b, "\">\n<h2>Training: ");
  esc(b, t->name);
  sbuf_puts(b, "</h2>\n");
  write_summary(r, summary);
  sbuf_puts(b, "<div class=\"charts\">\n");

  const metric_series *loss = metric_set_get(m, "loss");
  const metric_series *val = metric_set_get(m, "val_loss");
  size_t n_marks = 0;
  char **mark_labels = NULL;
  svgplot_mark *marks = spike_marks(m, &n_marks, &mark_labels);
  double *lx, *ly, *vx, *vy;
  series_xy(loss, 1, &lx, &ly);
  series_xy(val, 1, &vx, &vy);
  svgplot_series s[2] = {
      {.label = "loss (train)", .x = lx, .y = ly, .n = loss ? loss->n : 0},
      {.label = "val_loss", .x = vx, .y = vy, .n = val ? val->n : 0}};
  char *title = xasprintf("%s: loss", t->name);
  svgplot_chart c = {.title = title,
                     .xlabel = "step",
                     .ylabel = "loss (nats/token)",
                     .logy = 1,
                     .marks = marks,
                     .n_marks = n_marks,
                     .mark_legend = "loss-spike guard"};
  add_chart(r, svgplot_lines(&c, s, val && val->n ? 2 : 1));
  free(title);

  /* Against tokens: the `tokens` metric, else steps x tokens per step. */
  const metric_series *tok = metric_set_get(m, "tokens");
  const char *why = NULL;
  double tps = tok ? 0 : tokens_per_step(t, params, summary, &why);
  if (tok || tps > 0) {
    double *tx = xmalloc((s[0].n ? s[0].n : 1) * sizeof *tx);
    double *tvx = xmalloc((s[1].n ? s[1].n : 1) * sizeof *tvx);
    for (size_t i = 0; i < s[0].n; i++)
      tx[i] = tok ? value_at(tok, lx[i]) : lx[i] * tps;
    for (size_t i = 0; i < s[1].n; i++)
      tvx[i] = tok ? value_at(tok, vx[i]) : vx[i] * tps;
    svgplot_series st[2] = {s[0], s[1]};
    st[0].x = tx;
    st[1].x = tvx;
    svgplot_mark *tmarks = xcalloc(n_marks ? n_marks : 1, sizeof *tmarks);
    for (size_t i = 0; i < n_marks; i++)
      tmarks[i] = (svgplot_mark){
          tok ? value_at(tok, marks[i].x) : marks[i].x * tps, marks[i].label};
    title = xasprintf("%s: loss against tokens", t->name);
    svgplot_chart ct = c;
    ct.title = title;
    ct.xlabel = tok ? "tokens seen"
                    : "tokens seen (step \xc3\x97 tokens "
                      "per step)";
    ct.marks = tmarks;
    add_chart(r, svgplot_lines(&ct, st, val && val->n ? 2 : 1));
    free(title);
    free(tmarks);
    free(tx);
    free(tvx);
  }
  free(lx);
  free(ly);
  free(vx);
  free(vy);

  metric_chart(r, m, t->name, "lr", 1, "learning rate", "learning rate", 0);
  metric_chart(r, m, t->name, "grad_norm", 1, "gradient norm",
               "global gradient L2 norm", 1);
  metric_chart(r, m, t->name, "tokens_per_s", 1, "throughput", "tokens/s", 0);
  const char *mfu_note = NULL;
  if (metric_set_get(m, "mfu"))
    metric_chart(r, m, t->name, "mfu", 100, "model FLOPs utilization",
                 "MFU (% of peak FLOP/s)", 0);
  else if (metric_set_get(m, "flops_per_s"))
    metric_chart(r, m, t->name, "flops_per_s", 1,
                 "achieved FLOP/s (no peak known: no MFU)", "FLOP/s", 0);
  else
    mfu_note = "MFU: not plotted, the task recorded neither an `mfu` nor a "
               "`flops_per_s` metric.";
  time_chart(r, m, t->name);
  sbuf_puts(b, "</div>\n");
  if (why) {
    char *z = xasprintf("Loss against tokens: not plotted, %s.", why);
    note(r, z);
    free(z);
  }
  if (mfu_note)
    note(r, mfu_note);
  if (!metric_set_get(m, "time_data_s") && !metric_set_get(m, "time_forward_s"))
    note(r, "Where the time goes: not plotted, the task recorded no "
            "per-step time split (time_data_s, time_forward_s, ...).");
  if (n_marks) {
    char *z = xasprintf("%zu loss-spike guard event%s marked on the loss "
                        "charts (dashed red lines).",
                        n_marks, n_marks == 1 ? "" : "s");
    note(r, z);
    free(z);
  }
  for (size_t i = 0; i < n_marks; i++)
    free(mark_labels[i]);
  free(mark_labels);
  free(marks);
  cJSON_Delete(summary);
  cJSON_Delete(aj);
  sbuf_puts(b, "</section>\n");
}

/* ---- (e) validation and samples -------------------------------------------
 */

/* Whether an embedded file is left out (rep.withhold), after a note. */
static int withheld(rep *r, const rtask *t, const char *file) {
  if (!r->withhold)
    return 0;
  char *z = xasprintf("%s/out/%s: not embedded (the run has secrets, which "
                      "only the report written at the end of the run "
                      "masks).",
                      t->name, file);
  note(r, z);
  free(z);
  return 1;
}

static void write_samples(rep *r, const rtask *t) {
  char *p = xasprintf("%s/out/samples.txt", t->dir);
  char *text;
  size_t n;
  if (access(p, R_OK) == 0 && withheld(r, t, "samples.txt")) {
    free(p);
    return;
  }
  if (fileio_read_file(p, &text, &n) == 0) {
    sbuf *b = &r->out;
    sbuf_puts(b, "<h3>Samples from ");
    esc(b, t->name);
    sbuf_puts(
        b, " <small>(out/samples.txt)</small></h3>\n<pre class=\"samples\">");
    if (n > MAX_SAMPLES_BYTES) {
      size_t cut = MAX_SAMPLES_BYTES;
      while (cut > 0 && ((unsigned char)text[cut] & 0xC0) == 0x80)
        cut--;
      text[cut] = '\0';
    }
    esc(b, text);
    if (n > MAX_SAMPLES_BYTES)
      sbuf_puts(b, "\n[\xe2\x80\xa6 cut: the file is longer]");
    sbuf_puts(b, "</pre>\n");
    free(text);
  }
  free(p);
}

static void write_validation_one(rep *r, const rtask *t, const cJSON *vm) {
  sbuf *b = &r->out;
  char num[64];
  sbuf_puts(b, "<h3>");
  esc(b, t->name);
  sbuf_puts(b, " ");
  const cJSON *passed = cJSON_GetObjectItemCaseSensitive(vm, "passed");
  badge(b, cJSON_IsTrue(passed) ? "success" : "failed");
  sbuf_puts(b, cJSON_IsTrue(passed) ? " <small>gates passed</small>"
                                    : " <small>gates failed</small>");
  sbuf_puts(b, "</h3>\n<table class=\"kv validation\"><tbody>\n");
  static const struct {
    const char *key, *label, *fmt;
  } rows[] = {{"val_loss", "validation loss (nats/token)", "%.4f"},
              {"perplexity", "perplexity", "%.3f"},
              {"accuracy", "next-token accuracy", "%"},
              {"tokens", "tokens evaluated", "n"},
              {"step", "checkpoint step", "n"}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(vm, rows[i].key);
    if (!cJSON_IsNumber(v))
      continue;
    if (strcmp(rows[i].fmt, "%") == 0)
      snprintf(num, sizeof num, "%.2f%%", 100 * v->valuedouble);
    else if (strcmp(rows[i].fmt, "n") == 0)
      snprintf(num, sizeof num, "%.0f", v->valuedouble);
    else
      snprintf(num, sizeof num, rows[i].fmt, v->valuedouble);
    sbuf_printf(b,
                "<tr><th>%s</th><td class=\"num\" data-key=\"%s\">%s</td>"
                "</tr>\n",
                rows[i].label, rows[i].key, num);
  }
  const char *ck = jstr(vm, "checkpoint");
  if (ck) {
    sbuf_puts(b, "<tr><th>checkpoint</th><td>");
    esc(b, ck);
    sbuf_puts(b, "</td></tr>\n");
  }
  const cJSON *gates = cJSON_GetObjectItemCaseSensitive(vm, "gates");
  for (const cJSON *g = gates ? gates->child : NULL; g; g = g->next) {
    sbuf_puts(b, "<tr><th>gate ");
    esc(b, g->string);
    sbuf_puts(b, "</th><td>");
    if (cJSON_IsNumber(g)) {
      snprintf(num, sizeof num, "%g", g->valuedouble);
      esc(b, num);
    } else {
      sbuf_puts(b, "off");
    }
    sbuf_puts(b, "</td></tr>\n");
  }
  const cJSON *fails = cJSON_GetObjectItemCaseSensitive(vm, "failures");
  for (const cJSON *f = fails ? fails->child : NULL; f; f = f->next)
    if (cJSON_IsString(f)) {
      sbuf_puts(b, "<tr><th>failed gate</th><td class=\"err\">");
      esc(b, f->valuestring);
      sbuf_puts(b, "</td></tr>\n");
    }
  sbuf_puts(b, "</tbody></table>\n");
}

static int write_validation(rep *r) {
  sbuf *b = &r->out;
  size_t mark = b->n;
  int any = 0;
  sbuf_puts(b,
            "<section id=\"validation\">\n<h2>Validation and samples</h2>\n");
  for (size_t i = 0; i < r->n; i++) {
    const rtask *t = &r->t[i];
    char *p = xasprintf("%s/out/metrics.json", t->dir);
    cJSON *vm = read_json(p);
    free(p);
    const char *fmt = jstr(vm, "format");
    if (fmt && strcmp(fmt, "dagrun-validation") == 0) {
      write_validation_one(r, t, vm);
      any = 1;
    }
    cJSON_Delete(vm);
    size_t before = b->n;
    write_samples(r, t);
    any |= b->n != before;
  }
  if (!any) {
    b->n = mark;
    b->s[mark] = '\0';
    return 0;
  }
  sbuf_puts(b, "</section>\n");
  return 1;
}

/* ---- (f) finder results and figures ----------------------------------------
 */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every .svg file in the task's out/, sorted by name, when safe; else a
 * note. */
static int write_figures(rep *r, const rtask *t) {
  char *out = path_join(t->dir, "out");
  DIR *d = opendir(out);
  char **names = NULL;
  size_t n = 0, cap = 0;
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      size_t k = strlen(e->d_name);
      if (k > 4 && strcmp(e->d_name + k - 4, ".svg") == 0)
        VEC_PUSH(names, n, cap, xstrdup(e->d_name));
    }
    closedir(d);
  }
  if (n)
    qsort(names, n, sizeof *names, cmp_str);
  for (size_t i = 0; i < n; i++) {
    char *p = path_join(out, names[i]), *text = NULL;
    size_t len = 0;
    sbuf *b = &r->out;
    if (withheld(r, t, names[i])) {
      /* nothing more */
    } else if (fileio_read_file(p, &text, &len) == 0 && len <= MAX_SVG_BYTES) {
      /* As an image, not as markup: a browser runs no script, follows no
       * link and fetches nothing from an SVG it shows as an image, which
       * no filter of the file's text could promise (entities, odd
       * spacing, <style>), and the file's styles stay in its box. */
      sbuf_puts(b, "<figure class=\"plot embedded\"><img alt=\"");
      esc(b, names[i]);
      sbuf_puts(b, "\" src=\"data:image/svg+xml;base64,");
      char *masked = r->masks ? secrets_mask(r->masks, text) : NULL;
      sbuf_base64(b, masked ? masked : text, masked ? strlen(masked) : len);
      free(masked);
      sbuf_puts(b, "\"><figcaption>");
      esc(b, t->name);
      sbuf_puts(b, "/out/");
      esc(b, names[i]);
      sbuf_puts(b, "</figcaption></figure>\n");
    } else {
      char *z = xasprintf("%s/out/%s: not embedded (unreadable, or over "
                          "4 MiB).",
                          t->name, names[i]);
      note(r, z);
      free(z);
    }
    free(text);
    free(p);
    free(names[i]);
  }
  free(names);
  free(out);
  return n > 0;
}

static int write_finders(rep *r) {
  sbuf *b = &r->out;
  size_t mark = b->n;
  int any = 0;
  sbuf_puts(b, "<section id=\"finders\">\n<h2>Finders and figures</h2>\n");
  static const char *const files[] = {"sweep.json", "lr_find.json"};
  for (size_t i = 0; i < r->n; i++) {
    const rtask *t = &r->t[i];
    size_t before = b->n;
    sbuf_puts(b, "<h3>");
    esc(b, t->name);
    sbuf_puts(b, "</h3>\n");
    size_t head = b->n;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
      char *p = xasprintf("%s/out/%s", t->dir, files[f]);
      cJSON *j = read_json(p);
      free(p);
      if (cJSON_IsObject(j)) {
        sbuf_puts(b, "<p class=\"note\">Results (out/");
        esc(b, files[f]);
        sbuf_puts(b, "):</p>\n");
        kv_table(b, j, 1);
      }
      cJSON_Delete(j);
    }
    sbuf_puts(b, "<div class=\"charts\">\n");
    int figs = write_figures(r, t);
    sbuf_puts(b, "</div>\n");
    if (!figs && b->n == head + strlen("<div class=\"charts\">\n</div>\n")) {
      b->n = before; /* nothing for this task */
      b->s[before] = '\0';
    } else {
      any = 1;
    }
  }
  if (!any) {
    b->n = mark;
    b->s[mark] = '\0';
    return 0;
  }
  sbuf_puts(b, "</section>\n");
  return 1;
}

/* ---- (g) parameters
 * ---------------------------------------------------------- */

static void write_params(rep *r) {
  sbuf *b = &r->out;
  sbuf_puts(b, "<section id=\"params\">\n<h2>Resolved parameters</h2>\n"
               "<h3>Run params <small>(secrets redacted)</small></h3>\n");
  if (cJSON_IsObject(r->params) && r->params->child)
    kv_table(b, r->params, 0);
  else
    note(r, "The DAG has no params.");
  for (size_t i = 0; i < r->n; i++) {
    const rtask *t = &r->t[i];
    int an;
    cJSON *aj = latest_attempt_json(t, &an);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(aj, "params");
    sbuf_puts(b, "<details><summary>");
    esc(b, t->name);
    if (p)
      sbuf_printf(b, " <small>(attempt %d, secrets masked)</small>", an);
    else
      sbuf_puts(b, " <small>(no attempt ran)</small>");
    sbuf_puts(b, "</summary>\n");
    if (p)
      kv_table(b, p, 0);
    sbuf_puts(b, "</details>\n");
    cJSON_Delete(aj);
  }
  sbuf_puts(b, "</section>\n");
}

/* ---- the page
 * ------------------------------------------------------------------- */

static const char css[] =
    ":root{--ink:#1d2330;--muted:#6b7385;--line:#dde1e8;--bg:#f6f7f9}\n"
    "*{box-sizing:border-box}\n"
    "body{margin:0;background:var(--bg);color:var(--ink);"
    "font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif}\n"
    "main{max-width:1400px;margin:0 auto;padding:12px 20px 40px}\n"
    "header{background:#1d2330;color:#fff;padding:14px 20px}\n"
    "header h1{margin:0 0 8px;font-size:22px}\n"
    "header small{color:#b9c0cf;font-weight:normal;font-size:14px}\n"
    "dl.meta{display:grid;grid-template-columns:max-content 1fr;"
    "gap:2px 14px;margin:0}\n"
    "dl.meta dt{color:#b9c0cf}dl.meta dd{margin:0;word-break:break-all}\n"
    "section dl.meta dt{color:var(--muted)}\n"
    "dl.summary{grid-template-columns:repeat(4,max-content 1fr);"
    "background:#fff;border:1px solid var(--line);border-radius:6px;"
    "padding:8px 12px;margin:0 0 12px}\n"
    "nav{padding:8px 20px;background:#fff;border-bottom:1px solid "
    "var(--line)}\nnav a{margin-right:14px}\n"
    "section{margin-top:22px}\n"
    "h2{font-size:18px;border-bottom:1px solid var(--line);"
    "padding-bottom:4px}\nh3{font-size:15px;margin:16px 0 6px}\n"
    ".badge{display:inline-block;padding:1px 8px;border-radius:10px;"
    "color:#fff;font-size:12px;font-weight:600;vertical-align:middle}\n"
    "table{border-collapse:collapse;background:#fff;margin:6px 0}\n"
    "th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;"
    "vertical-align:top}\n"
    "thead th{background:#eef0f4}\n"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}\n"
    "td.err{color:#b3262e;white-space:pre-wrap;max-width:520px}\n"
    "table.kv th{font-weight:600;background:#f3f4f7}\n"
    "table.kv td{font-family:ui-monospace,monospace;font-size:12px;"
    "word-break:break-all;max-width:900px}\n"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,"
    "minmax(560px,1fr));gap:14px}\n"
    "figure.plot{margin:6px 0;background:#fff;border:1px solid var(--line);"
    "border-radius:6px;padding:6px}\n"
    "figure.plot svg,figure.plot img{display:block;width:100%;height:auto;"
    "max-width:100%}\n"
    "figure.wide svg{width:auto;max-width:100%}\n"
    "figcaption{color:var(--muted);font-size:12px}\n"
    "p.note{color:var(--muted);margin:4px 0}\n"
    "pre.samples{background:#fff;border:1px solid var(--line);padding:8px;"
    "white-space:pre-wrap;max-height:360px;overflow:auto}\n"
    "details{margin:4px 0}summary{cursor:pointer}\n"
    "footer{color:var(--muted);font-size:12px;margin-top:30px}\n";

static void write_page(rep *r) {
  sbuf *b = &r->out;
  /* The policy the API serves it with (serve/api.c), also for the file
   * opened from disk: nothing runs, nothing is fetched. */
  sbuf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
               "<meta charset=\"utf-8\">\n<meta "
               "http-equiv=\"Content-Security-Policy\" content=\""
               "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
               "base-uri 'none'; form-action 'none'\">\n<meta "
               "name=\"viewport\" "
               "content=\"width=device-width, initial-scale=1\">\n<title>");
  esc(b, r->dag);
  sbuf_puts(b, " ");
  esc(b, r->id);
  sbuf_puts(b, ": ");
  esc(b, r->state);
  sbuf_puts(b, " \xe2\x80\x94 dagrun report</title>\n<style>\n");
  sbuf_puts(b, css);
  sbuf_puts(b, "</style>\n</head>\n<body>\n");
  write_header(r);

  /* Training tasks first found: their metrics decide the sections. */
  metric_set *ms = xcalloc(r->n ? r->n : 1, sizeof *ms);
  int *training = xcalloc(r->n ? r->n : 1, sizeof *training);
  for (size_t i = 0; i < r->n; i++)
    if (metric_set_load(r->t[i].dir, &ms[i]) == 0)
      training[i] = metric_set_get(&ms[i], "loss") != NULL;

  /* The sections first, so that the contents name only those there. */
  sbuf head = r->out;
  r->out = (sbuf){0};
  b = &r->out;
  sbuf_puts(b, "<main>\n");
  write_tasks(r);
  write_timeline(r);
  for (size_t i = 0; i < r->n; i++)
    if (training[i])
      write_training(r, &r->t[i], &ms[i]);
  int has_validation = write_validation(r);
  int has_finders = write_finders(r);
  write_params(r);
  sbuf body = r->out;
  r->out = head;
  b = &r->out;
  sbuf_puts(b, "<nav><a href=\"#tasks\">DAG and tasks</a>"
               "<a href=\"#timeline\">Timeline</a>");
  for (size_t i = 0; i < r->n; i++)
    if (training[i]) {
      sbuf_puts(b, "<a href=\"#train-");
      esc(b, r->t[i].name);
      sbuf_puts(b, "\">Training: ");
      esc(b, r->t[i].name);
      sbuf_puts(b, "</a>");
    }
  if (has_validation)
    sbuf_puts(b, "<a href=\"#validation\">Validation</a>");
  if (has_finders)
    sbuf_puts(b, "<a href=\"#finders\">Finders and figures</a>");
  sbuf_puts(b, "<a href=\"#params\">Parameters</a></nav>\n");
  sbuf_add(b, body.s, body.n);
  sbuf_free(&body);
  char now[40];
  format_utc(r->now, 0, now, sizeof now);
  sbuf_printf(b,
              "<footer>Written by dagrun %s at %s. Regenerate with "
              "<code>dagrun report ",
              DAGRUN_VERSION, now);
  esc(b, r->id);
  sbuf_puts(b, "</code>.</footer>\n</main>\n</body>\n</html>\n");
  for (size_t i = 0; i < r->n; i++)
    metric_set_free(&ms[i]);
  free(ms);
  free(training);
}

/* Whether the recorded params show that the run had secrets. */
static int had_secrets(const cJSON *params) {
  const cJSON *it;
  cJSON_ArrayForEach(it, params) {
    if (cJSON_IsString(it) && strcmp(it->valuestring, SECRETS_REDACTED) == 0)
      return 1;
  }
  return 0;
}

/* Masks the run's secrets in the page as written, so that every text it
 * embeds (samples.txt, figures, validation results) is masked in one
 * place, whichever part of the page took it in. Escaped forms too: a text
 * goes in HTML-escaped, so a secret holding '<' or '&' is written so. */
static void mask_page(rep *r) {
  if (!r->masks)
    return;
  sbuf_putc(&r->out, '\0');
  char *m = secrets_mask(r->masks, r->out.s);
  sbuf_free(&r->out);
  r->out.s = m;
  r->out.n = strlen(m);
  r->out.cap = r->out.n + 1;
}

int report_write(store *st, const char *run_dir, const char *run_id,
                 const secrets *sec, char **path, char *err, size_t errlen) {
  rep r = {0};
  r.run_dir = run_dir;
  if (path)
    *path = NULL;
  int rc = load_run(&r, st, run_id, err, errlen);
  if (rc != 0) {
    rep_free(&r);
    return rc;
  }
  r.withhold = !sec && had_secrets(r.params);
  r.masks = secrets_count(sec) ? secrets_with_forms(sec, svgplot_escape) : NULL;
  write_page(&r);
  mask_page(&r);
  char *p = path_join(run_dir, "report.html");
  if (fileio_write_atomic(p, r.out.s, r.out.n, NULL, 0) != 0) {
    snprintf(err, errlen, "cannot write %s: %s", p, strerror(errno));
    free(p);
    rep_free(&r);
    return DR_EIO;
  }
  if (path)
    *path = p;
  else
    free(p);
  rep_free(&r);
  return 0;
}

/* ---- `dagrun report RUN` ----------------------------------------------------
 */

int report_cmd_report(int argc, char **argv) {
  const char *id = NULL;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] == '-') {
      fprintf(stderr,
              "dagrun: unknown option '%s' for report\n(see dagrun "
              "--help)\n",
              argv[i]);
      return EXIT_USAGE;
    }
    if (id) {
      fprintf(stderr, "dagrun: report takes one run id, got also '%s'\n",
              argv[i]);
      return EXIT_USAGE;
    }
    id = argv[i];
  }
  if (!id) {
    fprintf(stderr, "dagrun: report needs a run id (see dagrun runs)\n");
    return EXIT_USAGE;
  }
  store *st;
  cJSON *run;
  int rc = history_open_run(id, &st, &run);
  if (rc != 0)
    return rc;
  char err[1024];
  const char *full = jstr(run, "id"), *dir = jstr(run, "run_dir");
  char *out = NULL;
  if (!full || !dir) {
    fprintf(stderr, "dagrun: run %s has no run directory recorded\n", id);
    rc = DR_ENOENT;
  } else {
    rc = report_write(st, dir, full, NULL, &out, err, sizeof err);
    if (rc != 0)
      fprintf(stderr, "dagrun: report of run %s: %s\n", full, err);
    else
      printf("%s\n", out);
  }
  free(out);
  cJSON_Delete(run);
  store_close(st);
  return rc == 0 ? 0 : EXIT_FAILED;
}
