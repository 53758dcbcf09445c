/*
 * check: the checks that need more than the file's structure. Each stage
 * is resolved once per distinct name and each plugin file described once
 * (describe.h: in a helper process, all files at once), so a 100,000-task
 * DAG with three stages costs three helpers. Everything
 * goes on after an error, so that the user sees all of them at once.
 */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkhook.h"
#include "dagfile/alertspec.h"
#include "dagfile/dag.h"
#include "dagfile/template.h"
#include "describe.h"
#include "params.h"

/* What a stage name resolved to. */
typedef struct stage_ref {
  char *path;  /* the file, or NULL */
  char *error; /* loader_find's message when not found */
} stage_ref;

typedef struct stage_cache {
  strmap by_name; /* stage as written -> index into refs */
  stage_ref *refs;
  size_t n, cap;
  /* Distinct files, each described once, all at once (describe.h). */
  strmap by_path;     /* file -> index into files and described */
  const char **files; /* borrowed from refs */
  size_t n_files, cap_files;
  describe_result *described;
  size_t *plugin; /* per file: index into c->plugins, or SIZE_MAX */
  int *reported;  /* per file: its failure is in the diagnostics */
} stage_cache;

/* Resolves each distinct stage name of the DAG to a file, then describes
 * every distinct file in parallel, so that check waits for the slowest
 * helper rather than for their sum. Diagnostics come later, per task. */
static void describe_stages(const spec *s, stage_cache *sc) {
  for (size_t i = 0; i < s->n_tasks; i++) {
    const spec_task *t = &s->tasks[i];
    if (!t->stage || !t->stage_node || strmap_get(&sc->by_name, t->stage, NULL))
      continue;
    stage_ref ref = {NULL, NULL};
    char err[2048];
    if (loader_find(t->stage, s->dir, &ref.path, err, sizeof(err)) != 0)
      ref.error = xstrdup(err);
    VEC_PUSH(sc->refs, sc->n, sc->cap, ref);
    strmap_put(&sc->by_name, t->stage, sc->n - 1);
    if (ref.path && !strmap_get(&sc->by_path, ref.path, NULL)) {
      VEC_PUSH(sc->files, sc->n_files, sc->cap_files, ref.path);
      strmap_put(&sc->by_path, ref.path, sc->n_files - 1);
    }
  }
  size_t n = sc->n_files ? sc->n_files : 1;
  sc->described = xcalloc(n, sizeof *sc->described);
  sc->plugin = xmalloc(n * sizeof *sc->plugin);
  sc->reported = xcalloc(n, sizeof *sc->reported);
  describe_files(sc->files, sc->n_files, sc->described);
  for (size_t i = 0; i < sc->n_files; i++)
    sc->plugin[i] = SIZE_MAX;
}

static size_t open_plugin(checked *c, stage_cache *sc, const spec_task *t,
                          const char *path, diags *d) {
  size_t f;
  (void)strmap_get(&sc->by_path, path, &f);
  describe_result *r = &sc->described[f];
  if (sc->plugin[f] != SIZE_MAX)
    return sc->plugin[f];
  if (r->plugin) {
    c->plugins = xrealloc(c->plugins, (c->n_plugins + 1) * sizeof(*c->plugins));
    c->plugins[c->n_plugins] = r->plugin;
    r->plugin = NULL;
    sc->plugin[f] = c->n_plugins++;
  } else if (!sc->reported[f]) {
    /* Once per file: every task that uses it would say the same. */
    diags_add(d, c->s->path, t->stage_node->line, t->stage_node->col,
              "cannot load stage '%s' of task '%s': %s", t->stage, t->label,
              r->error);
    sc->reported[f] = 1;
  }
  return sc->plugin[f];
}

static size_t resolve_stage(checked *c, stage_cache *sc, const spec_task *t,
                            diags *d) {
  size_t i;
  (void)strmap_get(&sc->by_name, t->stage, &i);
  /* An unknown stage is reported at every task that names it: each is a
   * line to fix. */
  if (sc->refs[i].error) {
    diags_add(d, c->s->path, t->stage_node->line, t->stage_node->col,
              "task '%s': %s", t->label, sc->refs[i].error);
    return SIZE_MAX;
  }
  return open_plugin(c, sc, t, sc->refs[i].path, d);
}

static void stage_cache_free(stage_cache *sc) {
  for (size_t i = 0; i < sc->n_files; i++) {
    loader_close(sc->described[i].plugin);
    free(sc->described[i].error);
  }
  free(sc->described);
  free(sc->plugin);
  free(sc->reported);
  free(sc->files);
  for (size_t i = 0; i < sc->n; i++) {
    free(sc->refs[i].path);
    free(sc->refs[i].error);
  }
  free(sc->refs);
  strmap_free(&sc->by_name);
  strmap_free(&sc->by_path);
}

/* Checks the templates of a value whose type nobody checks here. */
static void check_templates(const tmpl_env *e, size_t task, const ynode *v,
                            diags *d) {
  cJSON *out = NULL;
  (void)tmpl_resolve(e, task, v, &out, d);
  cJSON_Delete(out);
}

/* Drops repeated diagnostics added since `from`: a value shared by many
 * tasks (from defaults' env, or a YAML alias) is checked once per task but
 * is one mistake at one place. */
static void dedupe(diags *d, size_t from) {
  strmap seen = {0};
  size_t w = from;
  for (size_t i = from; i < d->n; i++) {
    diag *g = &d->v[i];
    char *key = xasprintf("%d:%d:%s", g->line, g->col, g->msg);
    if (strmap_get(&seen, key, NULL)) {
      free(g->file);
      free(g->msg);
    } else {
      strmap_put(&seen, key, i);
      d->v[w++] = *g;
    }
    free(key);
  }
  d->n = w;
  strmap_free(&seen);
}

/* The tasks of stages with a check of their own (checkhook.h), whose
 * params are otherwise right: each with params_build's object. */
typedef struct hooked_task {
  size_t task;
  cJSON *params, *deferred; /* owned */
} hooked_task;
typedef struct hooked {
  hooked_task *v;
  size_t n, cap;
} hooked;

/* The params of task t that wait for run time: in its with, of the
 * schema, and not in params_build's object. An array, or NULL. */
static cJSON *deferred_params(const spec_task *t,
                              const dagrun_param_spec *schema,
                              const cJSON *params) {
  cJSON *a = NULL;
  for (size_t i = 0; t->with && i < t->with->n; i++) {
    const ynode *k = t->with->items[2 * i];
    if (k->kind != YNODE_SCALAR ||
        cJSON_GetObjectItemCaseSensitive(params, k->str))
      continue;
    for (const dagrun_param_spec *p = schema; p && p->name; p++)
      if (strcmp(p->name, k->str) == 0) {
        if (!a)
          a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, cJSON_CreateString(k->str));
      }
  }
  return a;
}

/* Where an answer about param of task t goes: the param's value, the
 * task's world_size, or its stage. */
static const ynode *answer_at(const spec_task *t, const char *param) {
  const ynode *at = NULL;
  if (param && strcmp(param, "world_size") == 0)
    at = ynode_get(t->node, "world_size");
  else if (param)
    at = ynode_get(t->with, param);
  return at ? at : t->stage_node ? t->stage_node : t->node;
}

/* Each plugin's checks of its tasks in h, by one helper a plugin, their
 * refusals into d. Frees h's contents. */
static void run_hooks(checked *c, hooked *h, diags *d) {
  for (size_t k = 0; k < c->n_plugins; k++) {
    size_t n = 0;
    checkhook_task *tasks = xcalloc(h->n ? h->n : 1, sizeof *tasks);
    size_t *which = xcalloc(h->n ? h->n : 1, sizeof *which);
    for (size_t i = 0; i < h->n; i++)
      if (c->task_plugin[h->v[i].task] == k) {
        const spec_task *t = &c->s->tasks[h->v[i].task];
        tasks[n] =
            (checkhook_task){t->world_size, h->v[i].params, h->v[i].deferred};
        which[n++] = h->v[i].task;
      }
    checkhook_answer *res = xcalloc(n ? n : 1, sizeof *res);
    char err[2048];
    const spec_task *t0 = n ? &c->s->tasks[which[0]] : NULL;
    if (n &&
        checkhook_run(c->plugins[k]->path, tasks, n, res, err, sizeof err) != 0)
      diags_add(d, c->s->path, answer_at(t0, NULL)->line,
                answer_at(t0, NULL)->col, "stage '%s': %s", t0->stage, err);
    for (size_t i = 0; i < n; i++) {
      const spec_task *t = &c->s->tasks[which[i]];
      if (res[i].error) {
        const ynode *at = answer_at(t, res[i].param);
        diags_add(d, c->s->path, at->line, at->col, "task '%s': %s", t->label,
                  res[i].error);
      }
      free(res[i].error);
      free(res[i].param);
    }
    free(res);
    free(tasks);
    free(which);
  }
  for (size_t i = 0; i < h->n; i++) {
    cJSON_Delete(h->v[i].params);
    cJSON_Delete(h->v[i].deferred);
  }
  free(h->v);
}

int check_spec(spec *s, checked **out, diags *d) {
  size_t before = d->n;
  checked *c = xcalloc(1, sizeof(checked));
  c->s = s;
  c->task_plugin = xmalloc((s->n_tasks ? s->n_tasks : 1) * sizeof(size_t));
  for (size_t i = 0; i < s->n_tasks; i++)
    c->task_plugin[i] = SIZE_MAX;
  *out = c;

  (void)dag_toposort(s, NULL, d);

  tmpl_env e = {0};
  e.s = s;
  (void)tmpl_resolve_params(&e, &c->params, d);
  e.params = c->params;

  stage_cache sc = {0};
  hooked hk = {0};
  describe_stages(s, &sc);
  for (size_t i = 0; i < s->n_tasks; i++) {
    const spec_task *t = &s->tasks[i];
    size_t plugin = SIZE_MAX;
    if (t->stage && t->stage_node)
      plugin = resolve_stage(c, &sc, t, d);
    c->task_plugin[i] = plugin;
    if (plugin != SIZE_MAX) {
      const dagrun_stage *st = c->plugins[plugin]->stage;
      cJSON *params = NULL;
      int rc = params_build(st->params, loader_choices(st), &e, i, &params, d);
      if (rc == 0 && loader_check(st)) {
        hooked_task x = {i, params, deferred_params(t, st->params, params)};
        VEC_PUSH(hk.v, hk.n, hk.cap, x);
      } else {
        cJSON_Delete(params);
      }
    } else if (t->with) {
      check_templates(&e, i, t->with, d);
    }
    if (t->env)
      check_templates(&e, i, t->env, d);
    /* map: ${tasks.U.outputs.KEY}: U upstream, KEY one it may output. */
    if (t->item_index == SPEC_ITEM_PENDING)
      check_templates(&e, i, s->maps[t->map].node, d);
  }
  c->n_task_plugin = s->n_tasks;
  run_hooks(c, &hk, d);
  stage_cache_free(&sc);
  dedupe(d, before);
  return d->n > before ? DR_ESPEC : 0;
}

void checked_expand(checked *c, size_t map, const cJSON *items) {
  spec *s = c->s;
  spec_map_expand(s, map, items);
  if (c->n_task_plugin >= s->n_tasks)
    return;
  c->task_plugin = xrealloc(c->task_plugin, s->n_tasks * sizeof(size_t));
  for (size_t i = c->n_task_plugin; i < s->n_tasks; i++) {
    const spec_task *t = &s->tasks[i];
    c->task_plugin[i] = t->map == SIZE_MAX
                            ? SIZE_MAX
                            : c->task_plugin[s->maps[t->map].placeholder];
  }
  c->n_task_plugin = s->n_tasks;
}

void checked_free(checked *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->n_plugins; i++)
    loader_close(c->plugins[i]);
  free(c->plugins);
  free(c->task_plugin);
  cJSON_Delete(c->params);
  free(c);
}

int check_load(const char *path, spec **sp, checked **ck, diags *d) {
  *sp = NULL;
  *ck = NULL;
  size_t before = d->n;
  int rc = spec_load(path, sp, d);
  if (*sp && rc != DR_ENOENT && rc != DR_EIO) {
    /* Structural errors do not stop the deeper checks: report all. */
    check_spec(*sp, ck, d);
    alertspec_check(*sp, (*ck)->params, d);
  }
  if (rc == 0 && d->n > before)
    rc = DR_ESPEC;
  if (rc != 0) {
    checked_free(*ck);
    spec_free(*sp);
    *ck = NULL;
    *sp = NULL;
  }
  return rc;
}
