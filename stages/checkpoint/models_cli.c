/*
 * dagrun-models: `dagrun models DAG | --root DIR [--json]`
 * (orchestrator/main.c runs it): the models the checkpoint stage promoted
 * into a registry (common/registry.h), oldest first, each with the run
 * and task that made it, its step, its validation figures and when it was
 * promoted; the entries that `latest` and `best` point at are marked.
 *
 * The registry: --root DIR, else the checkpoint stage's default for DAG:
 * $DAGRUN_MODELS_DIR/DAG, or models/DAG beside the runs directory
 * ($DAGRUN_RUNS_DIR, else runs/ under the working directory).
 *
 * Contract. stdout: a table, or with --json an array of {seq, name, path,
 * dag, run, task, step, val_loss, perplexity, accuracy, promoted_at,
 * latest, best} (null for a figure not known). A registry that does not
 * exist is an empty one: "no models in DIR", exit 0. Exit status: 0; 1
 * (EXIT_FAILED) when the registry cannot be read; 2 (EXIT_USAGE) for bad
 * usage; --help exits 0.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/registry.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"

static const char usage_text[] =
    "usage: dagrun models DAG [--json]\n"
    "       dagrun models --root DIR [--json]\n"
    "\n"
    "Lists the models the checkpoint stage promoted, oldest first: each\n"
    "one's run, task and step, validation loss, perplexity and accuracy,\n"
    "and when it was promoted; [latest] and [best] mark what the registry's\n"
    "latest and best links point at. The registry is DIR, else the\n"
    "checkpoint stage's default for DAG: $DAGRUN_MODELS_DIR/DAG, or\n"
    "models/DAG beside the runs directory ($DAGRUN_RUNS_DIR, else runs/).\n";

static int usage_error(const char *msg, const char *arg) {
  fprintf(stderr, "dagrun models: ");
  fprintf(stderr, msg, arg);
  fprintf(stderr, "\n(see dagrun models --help)\n");
  return EXIT_USAGE;
}

/* The default registry of dag: registry_default_root of a run directory
 * under the runs directory. Caller frees. */
static char *default_root(const char *dag) {
  const char *runs = getenv("DAGRUN_RUNS_DIR");
  char *run_dir =
      fileio_xprintf("%s/%s/run", runs && *runs ? runs : "runs", dag);
  char *root = registry_default_root(run_dir, dag);
  free(run_dir);
  return root;
}

/* The name a link of root (latest, best) points at, or "". */
static void link_target(const char *root, const char *link, char *out,
                        size_t n) {
  char *p = fileio_xprintf("%s/%s", root, link);
  ssize_t k = readlink(p, out, n - 1);
  out[k > 0 ? k : 0] = '\0';
  free(p);
}

/* promotion.json's string member key of entry e, or NULL; caller frees. */
static char *promotion_str(const registry_entry *e, const char *key) {
  char *p = fileio_xprintf("%s/promotion.json", e->path), *text = NULL;
  size_t len = 0;
  char *out = NULL;
  if (fileio_read_file(p, &text, &len) == 0) {
    cJSON *j = cJSON_ParseWithLength(text, len);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsString(v))
      out = strdup(v->valuestring);
    cJSON_Delete(j);
  }
  free(text);
  free(p);
  return out;
}

static void add_figure(cJSON *o, const char *key, double v) {
  if (isfinite(v))
    cJSON_AddNumberToObject(o, key, v);
  else
    cJSON_AddNullToObject(o, key);
}

static cJSON *entry_json(const registry_entry *e, const char *latest,
                         const char *best) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "seq", (double)e->seq);
  cJSON_AddStringToObject(o, "name", e->name);
  cJSON_AddStringToObject(o, "path", e->path);
  cJSON_AddStringToObject(o, "dag", e->dag);
  cJSON_AddStringToObject(o, "run", e->run);
  char *task = promotion_str(e, "task"), *at = promotion_str(e, "promoted_at");
  cJSON_AddItemToObject(o, "task",
                        task ? cJSON_CreateString(task) : cJSON_CreateNull());
  cJSON_AddNumberToObject(o, "step", (double)e->step);
  add_figure(o, "val_loss", e->val_loss);
  add_figure(o, "perplexity", e->perplexity);
  add_figure(o, "accuracy", e->accuracy);
  cJSON_AddItemToObject(o, "promoted_at",
                        at ? cJSON_CreateString(at) : cJSON_CreateNull());
  cJSON_AddBoolToObject(o, "latest", strcmp(e->name, latest) == 0);
  cJSON_AddBoolToObject(o, "best", strcmp(e->name, best) == 0);
  free(task);
  free(at);
  return o;
}

static void fmt_figure(char *buf, size_t n, const cJSON *v) {
  if (cJSON_IsNumber(v))
    snprintf(buf, n, "%.4f", v->valuedouble);
  else
    snprintf(buf, n, "-");
}

static void print_table(const char *root, const cJSON *list) {
  printf("%d model%s in %s\n", cJSON_GetArraySize(list),
         cJSON_GetArraySize(list) == 1 ? "" : "s", root);
  printf("%4s  %-40s %-26s %-12s %8s %9s %10s %8s  %s\n", "seq", "name", "run",
         "task", "step", "val_loss", "perplexity", "accuracy", "promoted");
  const cJSON *o;
  cJSON_ArrayForEach(o, list) {
    char vl[32], pp[32], acc[32];
    fmt_figure(vl, sizeof vl, cJSON_GetObjectItem(o, "val_loss"));
    fmt_figure(pp, sizeof pp, cJSON_GetObjectItem(o, "perplexity"));
    fmt_figure(acc, sizeof acc, cJSON_GetObjectItem(o, "accuracy"));
    const cJSON *task = cJSON_GetObjectItem(o, "task");
    const cJSON *at = cJSON_GetObjectItem(o, "promoted_at");
    printf("%4.0f  %-40s %-26s %-12s %8.0f %9s %10s %8s  %s%s%s\n",
           cJSON_GetObjectItem(o, "seq")->valuedouble,
           cJSON_GetObjectItem(o, "name")->valuestring,
           cJSON_GetObjectItem(o, "run")->valuestring,
           cJSON_IsString(task) ? task->valuestring : "-",
           cJSON_GetObjectItem(o, "step")->valuedouble, vl, pp, acc,
           cJSON_IsString(at) ? at->valuestring : "-",
           cJSON_IsTrue(cJSON_GetObjectItem(o, "latest")) ? " [latest]" : "",
           cJSON_IsTrue(cJSON_GetObjectItem(o, "best")) ? " [best]" : "");
  }
}

int main(int argc, char **argv) {
  const char *dag = NULL, *root_arg = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage_text, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--root")) {
      if (++i >= argc)
        return usage_error("%s needs a directory", "--root");
      root_arg = argv[i];
    } else if (argv[i][0] == '-') {
      return usage_error("unknown option '%s'", argv[i]);
    } else if (dag) {
      return usage_error("takes one DAG, got also '%s'", argv[i]);
    } else {
      dag = argv[i];
    }
  }
  if (!dag == !root_arg)
    return usage_error("%s", "needs a DAG or --root DIR, not both");
  if (dag && (strchr(dag, '/') || !strcmp(dag, ".") || !strcmp(dag, "..")))
    return usage_error("'%s' is not a DAG name", dag);
  char *root = root_arg ? strdup(root_arg) : default_root(dag);
  registry_entry *v = NULL;
  size_t n = 0;
  char err[1024];
  if (!root || registry_list(root, &v, &n, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun models: %s\n", root ? err : "out of memory");
    free(root);
    return EXIT_FAILED;
  }
  char latest[NAME_MAX + 1], best[NAME_MAX + 1];
  link_target(root, "latest", latest, sizeof latest);
  link_target(root, "best", best, sizeof best);
  cJSON *list = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++)
    cJSON_AddItemToArray(list, entry_json(&v[i], latest, best));
  if (json) {
    char *s = cJSON_Print(list);
    printf("%s\n", s);
    free(s);
  } else if (n == 0) {
    printf("no models in %s\n", root);
  } else {
    print_table(root, list);
  }
  cJSON_Delete(list);
  free(v);
  free(root);
  return 0;
}
