/*
 * compare: recorded runs side by side (compare.h).
 */
#include "compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/util.h"
#include "lib/exitcode.h"
#include "report/metricseries.h"
#include "store/history.h"
#include "store/store.h"

/* ---- the comparison as JSON ---------------------------------------------- */

/* A task name that stays inside the run directory as a path segment (DAG
 * files allow no other; the store could be edited by hand). */
static int task_name_ok(const char *s) {
  if (!s || !*s)
    return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
      return 0;
  return 1;
}

/* Whether a larger value of this metric is the better one (compare.h),
 * judged by the words of its name up to a slash (what follows one names a
 * part: val_loss/<source>, a data source, whatever its name holds); words
 * are split at '_', '.' and '-', so "accuracy", "val_acc", "eval.f1" and
 * "tokens_per_s" count, "mix_accounts" or "scores_dropped" do not. */
static int higher_is_better(const char *name) {
  static const char *const up[] = {"acc",  "accuracy",   "score", "f1",
                                   "auc",  "precision",  "recall", "mfu",
                                   "bleu", "throughput", NULL};
  const size_t own = strcspn(name, "/");
  const char *prev = "";
  size_t prev_len = 0;
  for (size_t i = 0; i < own;) {
    size_t n = strcspn(name + i, "_.-/");
    if (i + n > own)
      n = own - i;
    const char *w = name + i;
    for (int k = 0; up[k]; k++)
      if (strlen(up[k]) == n && strncmp(w, up[k], n) == 0)
        return 1;
    /* a rate: "<what>_per_s" or "_per_sec" */
    if (prev_len == 3 && strncmp(prev, "per", 3) == 0 &&
        ((n == 1 && w[0] == 's') || (n == 3 && strncmp(w, "sec", 3) == 0)))
      return 1;
    prev = w, prev_len = n;
    i += n + 1;
  }
  return 0;
}

/* The row of rows whose "task" and "name" are these, made (with n nulls
 * as its values) when there is none. task NULL: rows without a task. */
static cJSON *row_for(cJSON *rows, const char *task, const char *name,
                      size_t n) {
  cJSON *r;
  cJSON_ArrayForEach(r, rows) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "task");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "name");
    if (strcmp(k->valuestring, name) == 0 &&
        (!task || (cJSON_IsString(t) && strcmp(t->valuestring, task) == 0)))
      return r;
  }
  r = cJSON_CreateObject();
  if (task)
    cJSON_AddStringToObject(r, "task", task);
  cJSON_AddStringToObject(r, "name", name);
  cJSON *vals = cJSON_AddArrayToObject(r, "values");
  for (size_t i = 0; i < n; i++)
    cJSON_AddItemToArray(vals, cJSON_CreateNull());
  cJSON_AddItemToArray(rows, r);
  return r;
}

static void set_value(cJSON *row, size_t i, cJSON *v) {
  cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(row, "values"),
                           (int)i, v);
}

/* Each row's "same": every run has a value, and all are equal. */
static void mark_same(cJSON *rows) {
  cJSON *r;
  cJSON_ArrayForEach(r, rows) {
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(r, "values");
    const cJSON *first = vals->child, *v;
    int same = !cJSON_IsNull(first);
    cJSON_ArrayForEach(v, vals) same =
        same && !cJSON_IsNull(v) && cJSON_Compare(first, v, 1);
    cJSON_AddBoolToObject(r, "same", same);
  }
}

/* One series as {final, final_step, best, best_step, points}. */
static cJSON *series_summary(const metric_series *s, int higher) {
  size_t best = 0;
  for (size_t i = 1; i < s->n; i++)
    if (higher ? s->p[i].value > s->p[best].value
               : s->p[i].value < s->p[best].value)
      best = i;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "final", s->p[s->n - 1].value);
  cJSON_AddNumberToObject(o, "final_step", s->p[s->n - 1].step);
  cJSON_AddNumberToObject(o, "best", s->p[best].value);
  cJSON_AddNumberToObject(o, "best_step", s->p[best].step);
  cJSON_AddNumberToObject(o, "points", (double)s->n);
  return o;
}

/* Run i's tasks' metrics and outputs into the rows. */
static void add_tasks(const cJSON *run, size_t i, size_t n, cJSON *metrics,
                      cJSON *outputs) {
  const cJSON *dir = cJSON_GetObjectItemCaseSensitive(run, "run_dir");
  const cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(run, "tasks")) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
    if (!cJSON_IsString(nm) || !task_name_ok(nm->valuestring))
      continue;
    const char *task = nm->valuestring;
    const cJSON *kv;
    cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(t, "outputs"))
        set_value(row_for(outputs, task, kv->string, n), i,
                  cJSON_Duplicate(kv, 1));
    if (!cJSON_IsString(dir))
      continue;
    char *task_dir = path_join(dir->valuestring, task);
    metric_set m = {0};
    if (metric_set_load(task_dir, &m) == 0)
      for (size_t k = 0; k < m.n; k++) {
        if (m.s[k].n == 0)
          continue;
        int higher = higher_is_better(m.s[k].name);
        cJSON *row = row_for(metrics, task, m.s[k].name, n);
        if (!cJSON_GetObjectItemCaseSensitive(row, "better"))
          cJSON_AddStringToObject(row, "better", higher ? "higher" : "lower");
        set_value(row, i, series_summary(&m.s[k], higher));
      }
    metric_set_free(&m);
    free(task_dir);
  }
}

cJSON *compare_runs(cJSON *const *runs, size_t n) {
  static const char *const run_keys[] = {"id",      "dag",      "state",
                                         "started", "finished", "trigger",
                                         "tags",    "user_note"};
  cJSON *out = cJSON_CreateObject();
  cJSON *rs = cJSON_AddArrayToObject(out, "runs");
  cJSON *params = cJSON_AddArrayToObject(out, "params");
  cJSON *metrics = cJSON_AddArrayToObject(out, "metrics");
  cJSON *outputs = cJSON_AddArrayToObject(out, "outputs");
  for (size_t i = 0; i < n; i++) {
    cJSON *r = cJSON_CreateObject();
    for (size_t k = 0; k < sizeof run_keys / sizeof run_keys[0]; k++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(runs[i], run_keys[k]);
      cJSON_AddItemToObject(r, run_keys[k],
                            v ? cJSON_Duplicate(v, 1) : cJSON_CreateNull());
    }
    cJSON_AddItemToArray(rs, r);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(runs[i], "params"))
        set_value(row_for(params, NULL, kv->string, n), i,
                  cJSON_Duplicate(kv, 1));
    add_tasks(runs[i], i, n, metrics, outputs);
  }
  mark_same(params);
  mark_same(outputs);
  return out;
}

/* ---- `dagrun compare` -----------------------------------------------------
 */

#define CELL_MAX 32 /* a cell's characters at most; longer ones are cut */

/* A value as a table cell: numbers %.6g, strings as they are, "-" for
 * none, anything else its JSON; cut to CELL_MAX. Caller frees. */
static char *cell_of(const cJSON *v) {
  char *s;
  if (!v || cJSON_IsNull(v))
    s = xstrdup("-");
  else if (cJSON_IsNumber(v))
    s = xasprintf("%.6g", v->valuedouble);
  else if (cJSON_IsString(v))
    s = xstrdup(v->valuestring);
  else
    s = cJSON_PrintUnformatted(v);
  if (strlen(s) > CELL_MAX)
    strcpy(s + CELL_MAX - 3, "...");
  return s;
}

/* A metric's cell: "final (best @step)", or "final" when the final value
 * is the best. */
static char *metric_cell(const cJSON *v) {
  if (!cJSON_IsObject(v))
    return xstrdup("-");
  double fin = cJSON_GetObjectItemCaseSensitive(v, "final")->valuedouble;
  double best = cJSON_GetObjectItemCaseSensitive(v, "best")->valuedouble;
  double bstep = cJSON_GetObjectItemCaseSensitive(v, "best_step")->valuedouble;
  if (fin == best)
    return xasprintf("%.6g", fin);
  return xasprintf("%.6g (%.6g @%.0f)", fin, best, bstep);
}

/* The table `dagrun compare` prints: section titles and rows of a label
 * and a cell per run, laid out once every width is known. */
typedef struct table_row {
  char *label; /* or a section's title, when cells is NULL */
  char **cells;
} table_row;

typedef struct table {
  table_row *rows;
  size_t n, cap, n_runs;
} table;

static void table_add(table *t, char *label, char **cells) {
  table_row r = {label, cells};
  VEC_PUSH(t->rows, t->n, t->cap, r);
}

/* Columns as wide as their widest cell; no padding after the last. */
static void table_print(table *t) {
  int lw = 0, w = 0;
  for (size_t i = 0; i < t->n; i++) {
    if (!t->rows[i].cells)
      continue;
    if ((int)strlen(t->rows[i].label) > lw)
      lw = (int)strlen(t->rows[i].label);
    for (size_t k = 0; k < t->n_runs; k++)
      if ((int)strlen(t->rows[i].cells[k]) > w)
        w = (int)strlen(t->rows[i].cells[k]);
  }
  for (size_t i = 0; i < t->n; i++) {
    table_row *r = &t->rows[i];
    if (!r->cells) {
      printf("%s\n", r->label);
    } else {
      printf("  %-*s", lw, r->label);
      for (size_t k = 0; k < t->n_runs; k++) {
        printf("  %-*s", k + 1 < t->n_runs ? w : 0, r->cells[k]);
        free(r->cells[k]);
      }
      printf("\n");
      free(r->cells);
    }
    free(r->label);
  }
  free(t->rows);
}

/* The rows of one section (params, metrics or outputs) that --all or a
 * difference lets through, under title; metrics never hide. */
static void add_section(table *t, const char *title, const cJSON *rows, int all,
                        int is_metric) {
  const cJSON *r;
  size_t at = t->n;
  table_add(t, xstrdup(title), NULL);
  cJSON_ArrayForEach(r, rows) {
    if (!is_metric && !all &&
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "same")))
      continue;
    const cJSON *task = cJSON_GetObjectItemCaseSensitive(r, "task");
    const char *name = cJSON_GetObjectItemCaseSensitive(r, "name")->valuestring;
    char *label;
    if (is_metric)
      label =
          xasprintf("%s.%s (%s)", task->valuestring, name,
                    cJSON_GetObjectItemCaseSensitive(r, "better")->valuestring);
    else if (cJSON_IsString(task))
      label = xasprintf("%s.%s", task->valuestring, name);
    else
      label = xstrdup(name);
    char **cells = xcalloc(t->n_runs, sizeof *cells);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, "values")->child;
    for (size_t i = 0; i < t->n_runs; i++, v = v ? v->next : NULL)
      cells[i] = is_metric ? metric_cell(v) : cell_of(v);
    table_add(t, label, cells);
  }
  if (t->n == at + 1) {
    free(t->rows[at].label);
    t->rows[at].label =
        xasprintf("%s: %s", title, is_metric ? "none recorded" : "none");
  }
}

static void print_comparison(const cJSON *c, size_t n, int all) {
  table t = {NULL, 0, 0, n};
  static const char *const heads[] = {"id", "dag", "state"};
  for (size_t h = 0; h < 3; h++) {
    char **cells = xcalloc(n, sizeof *cells);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "runs")->child;
    for (size_t i = 0; i < n; i++, r = r->next)
      cells[i] = cell_of(cJSON_GetObjectItemCaseSensitive(r, heads[h]));
    table_add(&t, xstrdup(heads[h]), cells);
  }
  add_section(&t, all ? "params" : "params that differ",
              cJSON_GetObjectItemCaseSensitive(c, "params"), all, 0);
  add_section(&t, "metrics: final (best @step)",
              cJSON_GetObjectItemCaseSensitive(c, "metrics"), all, 1);
  add_section(&t, all ? "outputs" : "outputs that differ",
              cJSON_GetObjectItemCaseSensitive(c, "outputs"), all, 0);
  table_print(&t);
}

int compare_cmd(int argc, char **argv) {
  const char *ids[COMPARE_MAX_RUNS];
  size_t n = 0;
  int all = 0, json = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--all") == 0)
      all = 1;
    else if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (argv[i][0] == '-')
      return cli_usage_error("unknown option '%s' for compare", argv[i]);
    else if (n == COMPARE_MAX_RUNS)
      return cli_usage_error("compare takes at most 16 runs, got also '%s'",
                             argv[i]);
    else
      ids[n++] = argv[i];
  }
  if (n < 2)
    return cli_usage_error("%s", "compare needs two runs or more (see dagrun "
                                 "runs)");
  cJSON *runs[COMPARE_MAX_RUNS] = {0};
  store *st = NULL;
  int rc = history_open_run(ids[0], &st, &runs[0]);
  for (size_t i = 1; rc == 0 && i < n; i++) {
    char err[1024];
    int src;
    if (!(runs[i] = store_run(st, ids[i], &src, err, sizeof err))) {
      fprintf(stderr, "dagrun: %s\n", err);
      rc = src == DR_ESTORE ? EXIT_FAILED : EXIT_USAGE;
    }
  }
  if (st)
    store_close(st);
  if (rc == 0) {
    cJSON *c = compare_runs(runs, n);
    if (json) {
      char *s = cJSON_Print(c);
      printf("%s\n", s);
      free(s);
    } else {
      print_comparison(c, n, all);
    }
    cJSON_Delete(c);
  }
  for (size_t i = 0; i < n; i++)
    cJSON_Delete(runs[i]);
  return rc;
}
