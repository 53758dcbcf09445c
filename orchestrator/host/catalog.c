/*
 * catalog: `dagrun stages`. Describes every plugin on the search path in
 * a helper process (describe.h): dagrun never loads one itself.
 *
 * A stage is listed, looked up and shadowed by the name a DAG writes in
 * `stage:`, its file's name without ".so" (loader.h), not by the name its
 * descriptor gives itself: a DAG finds files, and a catalog that listed
 * `wc` for counter.so would name a stage no DAG can use.
 */
#include "catalog.h"

#include "params.h"

#include "base/util.h"
#include "describe.h"
#include "loader.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct entry {
  char *file;            /* full path */
  char *name;            /* the stage a DAG names: file's name less .so */
  loader_plugin *plugin; /* NULL when it failed to load */
  char *error;           /* why, when plugin is NULL */
  char **shadows;        /* files of the same stage later in the path */
  size_t nshadows, capshadows;
} entry;

typedef struct catalog {
  entry *v;
  size_t n, cap;
  char **missing; /* search directories that do not exist */
  size_t nmissing, capmissing;
} catalog;

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_so(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 3 && strcmp(e->d_name + n - 3, ".so") == 0;
}

static entry *find_stage(catalog *c, const char *name) {
  for (size_t i = 0; i < c->n; i++)
    if (c->v[i].plugin && strcmp(c->v[i].name, name) == 0)
      return &c->v[i];
  return NULL;
}

/* The stage name of a plugin file: its name without the directory and
 * ".so". Caller frees. */
static char *stage_name_of(const char *file) {
  const char *slash = strrchr(file, '/');
  const char *base = slash ? slash + 1 : file;
  return xstrndup(base, strlen(base) - 3);
}

/* The *.so regular files of dir, in name order, appended to files; a
 * directory that cannot be read is noted as missing. */
static void scan_dir(catalog *c, const char *dir, char ***files, size_t *n,
                     size_t *cap) {
  struct dirent **names = NULL;
  int k = scandir(dir, &names, is_so, by_name);
  if (k < 0) {
    VEC_PUSH(c->missing, c->nmissing, c->capmissing, xstrdup(dir));
    return;
  }
  for (int i = 0; i < k; i++) {
    char *file = path_join(dir, names[i]->d_name);
    free(names[i]);
    struct stat st;
    if (stat(file, &st) != 0 || !S_ISREG(st.st_mode))
      free(file);
    else
      VEC_PUSH(*files, *n, *cap, file);
  }
  free(names);
}

/* Every plugin of the search path, described all at once (describe.h):
 * a file that crashes, exits or hangs while being described is listed
 * with what happened, like one the loader refuses. */
static void scan_path(catalog *c) {
  char **files = NULL;
  size_t n = 0, cap = 0;
  for (const char *const *d = loader_search_path(); *d; d++)
    scan_dir(c, *d, &files, &n, &cap);
  describe_result *res = xcalloc(n ? n : 1, sizeof *res);
  describe_files((const char *const *)files, n, res);
  for (size_t i = 0; i < n; i++) {
    loader_plugin *p = res[i].plugin;
    char *name = stage_name_of(files[i]);
    if (!p) {
      entry e = {.file = files[i], .name = name, .error = res[i].error};
      VEC_PUSH(c->v, c->n, c->cap, e);
      continue;
    }
    /* A DAG naming this stage gets the first file on the path. */
    entry *first = find_stage(c, name);
    if (first) {
      VEC_PUSH(first->shadows, first->nshadows, first->capshadows, files[i]);
      loader_close(p);
      free(name);
      continue;
    }
    entry e = {.file = files[i], .name = name, .plugin = p};
    VEC_PUSH(c->v, c->n, c->cap, e);
  }
  free(res);
  free(files);
}

static const char *or_dash(const char *s) { return s && *s ? s : "-"; }

static void print_text_stage(FILE *out, const entry *e) {
  const dagrun_stage *st = e->plugin->stage;
  fprintf(out, "%s %s  (%s)\n", e->name, or_dash(st->version), e->file);
  if (strcmp(st->name, e->name) != 0)
    fprintf(out,
            "  (its descriptor calls it '%s': a DAG names it by its file, "
            "stage: %s)\n",
            st->name, e->name);
  if (st->summary && *st->summary)
    fprintf(out, "  %s\n", st->summary);
  for (size_t i = 0; i < e->nshadows; i++)
    fprintf(out, "  (also in %s, not used: this file comes first)\n",
            e->shadows[i]);
  if (!st->params || !st->params[0].name) {
    fprintf(out, "  (no params)\n");
    return;
  }
  int wname = (int)strlen("PARAM"), wtype = (int)strlen("TYPE"),
      wdef = (int)strlen("DEFAULT");
  for (const dagrun_param_spec *p = st->params; p->name; p++) {
    int l = (int)strlen(p->name);
    wname = l > wname ? l : wname;
    l = (int)strlen(params_type_name(p->type));
    wtype = l > wtype ? l : wtype;
    l = (int)strlen(or_dash(p->default_value));
    wdef = l > wdef ? l : wdef;
  }
  fprintf(out, "  %-*s  %-*s  %-*s  %-8s  %s\n", wname, "PARAM", wtype, "TYPE",
          wdef, "DEFAULT", "REQUIRED", "HELP");
  for (const dagrun_param_spec *p = st->params; p->name; p++) {
    fprintf(out, "  %-*s  %-*s  %-*s  %-8s  %s", wname, p->name, wtype,
            params_type_name(p->type), wdef, or_dash(p->default_value),
            p->required ? "yes" : "no", p->help ? p->help : "");
    const char *const *values =
        loader_param_choices(loader_choices(st), p->name);
    if (values) {
      sbuf b = {0};
      loader_choices_join(&b, values);
      fprintf(out, "%s(one of: %s)", p->help && *p->help ? " " : "", b.s);
      sbuf_free(&b);
    }
    fputc('\n', out);
  }
}

static void print_text(FILE *out, const catalog *c) {
  int printed = 0, failed = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (!c->v[i].plugin) {
      failed++;
      continue;
    }
    if (printed++)
      fputc('\n', out);
    print_text_stage(out, &c->v[i]);
  }
  if (!printed)
    fprintf(out, "no stage plugins found\n");
  if (failed) {
    fprintf(out, "\nfiles that are not usable stage plugins:\n");
    for (size_t i = 0; i < c->n; i++)
      if (!c->v[i].plugin)
        fprintf(out, "  %s\n", c->v[i].error);
  }
  fprintf(out, "\nsearch path ($DAGRUN_PLUGIN_PATH, then built-in):\n");
  for (const char *const *d = loader_search_path(); *d; d++) {
    int missing = 0;
    for (size_t i = 0; i < c->nmissing; i++)
      missing |= strcmp(c->missing[i], *d) == 0;
    fprintf(out, "  %s%s\n", *d, missing ? "  (cannot be read)" : "");
  }
}

static cJSON *json_stage(const entry *e) {
  cJSON *o = cJSON_CreateObject();
  if (!e->plugin) {
    cJSON_AddStringToObject(o, "file", e->file);
    cJSON_AddStringToObject(o, "error", e->error);
    return o;
  }
  const dagrun_stage *st = e->plugin->stage;
  cJSON_AddStringToObject(o, "name", e->name);
  cJSON_AddStringToObject(o, "descriptor_name", st->name);
  if (st->version)
    cJSON_AddStringToObject(o, "version", st->version);
  else
    cJSON_AddNullToObject(o, "version");
  cJSON_AddStringToObject(o, "file", e->file);
  cJSON_AddStringToObject(o, "summary", st->summary ? st->summary : "");
  cJSON *params = cJSON_AddArrayToObject(o, "params");
  for (const dagrun_param_spec *p = st->params; p && p->name; p++) {
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "name", p->name);
    cJSON_AddStringToObject(q, "type", params_type_name(p->type));
    if (p->default_value)
      cJSON_AddStringToObject(q, "default", p->default_value);
    else
      cJSON_AddNullToObject(q, "default");
    cJSON_AddBoolToObject(q, "required", p->required != 0);
    cJSON_AddStringToObject(q, "help", p->help ? p->help : "");
    const char *const *values =
        loader_param_choices(loader_choices(st), p->name);
    if (values) {
      cJSON *a = cJSON_AddArrayToObject(q, "choices");
      for (size_t i = 0; values[i]; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(values[i]));
    } else {
      cJSON_AddNullToObject(q, "choices"); /* any value of its type */
    }
    cJSON_AddItemToArray(params, q);
  }
  cJSON *shadows = cJSON_AddArrayToObject(o, "shadows");
  for (size_t i = 0; i < e->nshadows; i++)
    cJSON_AddItemToArray(shadows, cJSON_CreateString(e->shadows[i]));
  return o;
}

static int print_json(FILE *out, const catalog *c) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < c->n; i++)
    cJSON_AddItemToArray(arr, json_stage(&c->v[i]));
  char *s = cJSON_Print(arr);
  cJSON_Delete(arr);
  if (!s)
    return DR_EIO;
  fprintf(out, "%s\n", s);
  cJSON_free(s);
  return 0;
}

/* The file that failed to load as stage name (<name>.so), or NULL. */
static const entry *find_failed(const catalog *c, const char *name) {
  for (size_t i = 0; i < c->n; i++)
    if (!c->v[i].plugin && strcmp(c->v[i].name, name) == 0)
      return &c->v[i];
  return NULL;
}

/* One stage, as the whole catalog shows it. */
static int print_one(FILE *out, catalog *c, const char *name, int json,
                     char *err, size_t errlen) {
  const entry *e = find_stage(c, name);
  if (!e && (e = find_failed(c, name))) {
    snprintf(err, errlen, "%s", e->error);
    return DR_EPLUGIN;
  }
  if (!e) {
    const char **names = xcalloc(c->n + 1, sizeof *names);
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++)
      if (c->v[i].plugin)
        names[n++] = c->v[i].name;
    const char *m = closest_match(name, names);
    snprintf(err, errlen,
             "unknown stage '%s'%s%s%s (dagrun stages lists the installed "
             "ones)",
             name, m ? "; did you mean '" : "", m ? m : "", m ? "'?" : "");
    free(names);
    return DR_ENOENT;
  }
  if (!json) {
    print_text_stage(out, e);
    return 0;
  }
  cJSON *o = json_stage(e);
  char *z = cJSON_Print(o);
  cJSON_Delete(o);
  if (!z)
    return DR_EIO;
  fprintf(out, "%s\n", z);
  cJSON_free(z);
  return 0;
}

int catalog_print(FILE *out, const char *name, int json, char *err,
                  size_t errlen) {
  catalog c = {0};
  scan_path(&c);
  int rc = name   ? print_one(out, &c, name, json, err, errlen)
           : json ? print_json(out, &c)
                  : (print_text(out, &c), 0);
  if (rc == 0 && fflush(out) != 0)
    rc = DR_EIO;
  if (rc == DR_EIO)
    snprintf(err, errlen, "cannot write the catalog: %s", strerror(errno));
  for (size_t i = 0; i < c.n; i++) {
    if (!c.v[i].plugin && !name)
      rc = rc ? rc : DR_EPLUGIN;
    free(c.v[i].file);
    free(c.v[i].name);
    free(c.v[i].error);
    loader_close(c.v[i].plugin);
    for (size_t j = 0; j < c.v[i].nshadows; j++)
      free(c.v[i].shadows[j]);
    free(c.v[i].shadows);
  }
  free(c.v);
  for (size_t i = 0; i < c.nmissing; i++)
    free(c.missing[i]);
  free(c.missing);
  return rc;
}
