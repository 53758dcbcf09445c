/*
 * template: ${...} references in YAML values -> cJSON values.
 *
 * A value is walked once; every reference in it is checked even after an
 * error, so one `dagrun check` lists them all. A reference either yields a
 * value, or is deferred (valid, but its value exists only at run time), or
 * is an error with a diagnostic.
 */
#include "template.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dag.h"
#include "mapping.h"
#include "paramrule.h"

/* Above this many tasks, "did you mean" for an unknown task searches only
 * the task's own needs instead of every name. */
enum { SUGGEST_ALL_TASKS_MAX = 5000 };

typedef struct rctx {
  const tmpl_env *e;
  size_t task;   /* SIZE_MAX: a DAG-level value */
  int in_params; /* resolving spec->params */
  diags *d;
  int errors, deferred;
} rctx;

void tmpl_position(const ynode *v, size_t off, int *line, int *col) {
  *line = v->line;
  *col = v->col;
  if (!v->oneline || v->style == YSTYLE_LITERAL || v->style == YSTYLE_FOLDED)
    return;
  int c = v->col + (v->style != YSTYLE_PLAIN);
  for (size_t i = 0; i < off; i++)
    if (((unsigned char)v->str[i] & 0xC0) != 0x80)
      c++;
  *col = c;
}

static void terr(rctx *r, const ynode *v, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void terr(rctx *r, const ynode *v, size_t off, const char *fmt, ...) {
  int line, col;
  tmpl_position(v, off, &line, &col);
  va_list ap;
  va_start(ap, fmt);
  diags_vadd(r->d, r->e->s->path, line, col, fmt, ap);
  va_end(ap);
  r->errors++;
}

char *tmpl_scalar_text(const cJSON *v) {
  if (cJSON_IsString(v))
    return xstrdup(v->valuestring);
  if (cJSON_IsBool(v))
    return xstrdup(cJSON_IsTrue(v) ? "true" : "false");
  if (cJSON_IsNull(v))
    return xstrdup("");
  if (cJSON_IsNumber(v)) {
    double x = v->valuedouble;
    if (x == floor(x) && fabs(x) < 9.2e18)
      return xasprintf("%lld", (long long)x);
    /* The shortest form that reads back as the same double. */
    for (int prec = 15; prec <= 17; prec++) {
      char *s = xasprintf("%.*g", prec, x);
      if (prec == 17 || strtod(s, NULL) == x)
        return s;
      free(s);
    }
  }
  return NULL;
}

/* A plain or quoted scalar without templates, as JSON. */
static cJSON *scalar_value(const ynode *v) {
  int64_t i;
  double f;
  int b;
  switch (ynode_scalar_type(v)) {
  case YSCALAR_NULL:
    return cJSON_CreateNull();
  case YSCALAR_BOOL:
    (void)ynode_bool(v, &b);
    return cJSON_CreateBool(b);
  case YSCALAR_INT:
    (void)ynode_int(v, &i);
    return cJSON_CreateNumber((double)i);
  case YSCALAR_FLOAT:
    (void)ynode_float(v, &f);
    if (isfinite(f))
      return cJSON_CreateNumber(f);
    /* 1e400: no double holds it, and JSON would carry it as null (a
     * param "not set"): it stays the text it is, which no number param
     * takes. */
    break;
  case YSCALAR_STRING:
    break;
  }
  return cJSON_CreateString(v->str);
}

static int name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
}

/* Length of the [A-Za-z0-9_-]+ prefix of s[0..n). */
static size_t name_len(const char *s, size_t n) {
  size_t i = 0;
  while (i < n && name_char(s[i]))
    i++;
  return i;
}

static int has_prefix(const char *s, size_t n, const char *p) {
  size_t lp = strlen(p);
  return n >= lp && memcmp(s, p, lp) == 0;
}

/* "did you mean" among the DAG's params; the text goes into b. */
static void suggest_param(const spec *s, const char *name, sbuf *b) {
  const ynode *p = s->params;
  if (!p || p->n == 0) {
    sbuf_puts(b, "; the DAG has no params");
    return;
  }
  const char **names = xmalloc((p->n + 1) * sizeof(char *));
  size_t k = 0;
  for (size_t i = 0; i < p->n; i++)
    if (p->items[2 * i]->kind == YNODE_SCALAR)
      names[k++] = p->items[2 * i]->str;
  names[k] = NULL;
  const char *m = closest_match(name, names);
  if (m) {
    sbuf_printf(b, "; did you mean '%s'?", m);
  } else if (k <= 10) {
    sbuf_puts(b, "; the params are: ");
    for (size_t i = 0; i < k; i++)
      sbuf_printf(b, "%s%s", i ? ", " : "", names[i]);
  }
  free(names);
}

static void suggest_task(const rctx *r, const char *name, sbuf *b) {
  const spec *s = r->e->s;
  size_t n = 0;
  const char **names;
  if (s->n_tasks <= SUGGEST_ALL_TASKS_MAX || r->task == SIZE_MAX) {
    n = s->n_tasks <= SUGGEST_ALL_TASKS_MAX ? s->n_tasks : 0;
    names = xmalloc((n + 1) * sizeof(char *));
    for (size_t i = 0; i < n; i++)
      names[i] = s->tasks[i].name;
  } else {
    const spec_task *t = &s->tasks[r->task];
    n = t->n_needs;
    names = xmalloc((n + 1) * sizeof(char *));
    for (size_t i = 0; i < n; i++)
      names[i] = s->tasks[t->needs[i]].name;
  }
  names[n] = NULL;
  const char *m = closest_match(name, names);
  if (m)
    sbuf_printf(b, "; did you mean '%s'?", m);
  free(names);
}

/* The spec's upstream cache, created on first use. */
static int is_upstream(const spec *s, size_t task, size_t up) {
  if (!s->reach)
    ((spec *)s)->reach = dag_reach_create(s);
  return dag_is_upstream(s->reach, task, up);
}

static const char ref_forms[] =
    "${params.NAME}, ${env:NAME}, ${env:NAME:-default}, ${run.id}, "
    "${run.date}, ${run.logical_date}, ${run.data_interval_start}, "
    "${run.data_interval_end}, ${run.dag}, ${tasks.TASK.dir}, "
    "${tasks.TASK.outputs.KEY}, or in a mapped task ${item}, ${item.KEY} "
    "and ${item_index}";

/* One reference being resolved: the text x[0..n) between "${" and "}"
 * (spaces trimmed), found at offset off of scalar v (for diagnostics). */
typedef struct ref {
  const ynode *v;
  size_t off;
  const char *x;
  size_t n;
} ref;

/* The resolvers below each take one form of reference (the prefix already
 * matched) and return 0 with *out, DR_EDEFERRED, or DR_ETEMPLATE after a
 * diagnostic. */

/* ${params.NAME}: the DAG param's resolved value. */
static int resolve_param_ref(rctx *r, const ref *f, cJSON **out) {
  const tmpl_env *e = r->e;
  const char *name = f->x + 7;
  size_t ln = f->n - 7;
  if (ln == 0 || name_len(name, ln) != ln) {
    terr(r, f->v, f->off,
         "bad param reference ${%.*s}: expected ${params.NAME}", (int)f->n,
         f->x);
    return DR_ETEMPLATE;
  }
  char *key = xstrndup(name, ln);
  int rc = DR_ETEMPLATE;
  if (r->in_params || !e->params) {
    terr(r, f->v, f->off,
         "${params.%s} cannot be used in params: a param may use only "
         "${env:...} and ${run...}",
         key);
  } else if (!ynode_get(e->s->params, key)) {
    sbuf b = {0};
    suggest_param(e->s, key, &b);
    terr(r, f->v, f->off, "unknown param '%s' in ${params.%s}%s", key, key,
         b.s ? b.s : "");
    sbuf_free(&b);
  } else {
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(e->params, key);
    /* No value: it uses ${run.*}, or failed to resolve itself. */
    rc = val ? 0 : DR_EDEFERRED;
    if (val)
      *out = cJSON_Duplicate(val, 1);
  }
  free(key);
  return rc;
}

/* ${env:NAME} or ${env:NAME:-default}: an environment variable. */
static int resolve_env_ref(rctx *r, const ref *f, cJSON **out) {
  const char *name = f->x + 4;
  size_t ln = 0, rest = f->n - 4;
  /* NAME as the shell takes it: no '-', not starting with a digit. */
  if (rest > 0 && !(name[0] >= '0' && name[0] <= '9'))
    while (ln < rest && (name_char(name[ln]) && name[ln] != '-'))
      ln++;
  int has_default = ln + 2 <= rest && name[ln] == ':' && name[ln + 1] == '-';
  if (ln == 0 || (ln != rest && !has_default)) {
    terr(r, f->v, f->off,
         "bad environment reference ${%.*s}: expected ${env:NAME} or "
         "${env:NAME:-default}",
         (int)f->n, f->x);
    return DR_ETEMPLATE;
  }
  char *var = xstrndup(name, ln);
  const char *val = getenv(var);
  int rc = 0;
  if (val && *val) {
    *out = cJSON_CreateString(val);
  } else if (has_default) {
    /* As in the shell, ":-" also covers a variable set to "". */
    char *def = xstrndup(name + ln + 2, rest - ln - 2);
    *out = cJSON_CreateString(def);
    free(def);
  } else if (val) {
    *out = cJSON_CreateString("");
  } else {
    terr(r, f->v, f->off,
         "environment variable '%s' is not set (${env:%s}); set it, or "
         "give a default: ${env:%s:-VALUE}",
         var, var, var);
    rc = DR_ETEMPLATE;
  }
  free(var);
  return rc;
}

/* ${run.FIELD}: the run's; all but dag are deferred until the run has
 * them. */
static int resolve_run_ref(rctx *r, const ref *f, cJSON **out) {
  const tmpl_env *e = r->e;
  const char *field = f->x + 4;
  size_t lf = f->n - 4;
  if (lf == 3 && memcmp(field, "dag", 3) == 0) {
    *out = cJSON_CreateString(e->s->dag ? e->s->dag : "");
    return 0;
  }
  static const char *const fields[] = {"id",
                                       "date",
                                       "logical_date",
                                       "data_interval_start",
                                       "data_interval_end",
                                       "trigger",
                                       "trigger_files",
                                       "trigger_dataset",
                                       "trigger_dataset_version",
                                       "trigger_dataset_outputs",
                                       "dag",
                                       NULL};
  const char *vals[] = {e->run_id,
                        e->run_date,
                        e->run_logical_date,
                        e->run_interval_start,
                        e->run_interval_end,
                        e->run_trigger,
                        e->run_trigger_files,
                        e->run_trigger_dataset,
                        e->run_trigger_dataset_version,
                        e->run_trigger_dataset_outputs};
  enum { N_VALS = sizeof vals / sizeof vals[0] };
  int k = -1;
  for (int i = 0; i < N_VALS; i++)
    if (strlen(fields[i]) == lf && memcmp(field, fields[i], lf) == 0)
      k = i;
  if (k < 0) {
    char *name = xstrndup(field, lf);
    const char *m = closest_match(name, fields);
    if (m)
      terr(r, f->v, f->off,
           "unknown run field '%s' in ${%.*s}; did you mean ${run.%s}?", name,
           (int)f->n, f->x, m);
    else
      terr(r, f->v, f->off,
           "unknown run field '%s' in ${%.*s}; expected ${run.id}, "
           "${run.date}, ${run.logical_date}, ${run.data_interval_start}, "
           "${run.data_interval_end}, ${run.trigger}, "
           "${run.trigger_files}, ${run.trigger_dataset}, "
           "${run.trigger_dataset_version}, ${run.trigger_dataset_outputs} "
           "or ${run.dag}",
           name, (int)f->n, f->x);
    free(name);
    return DR_ETEMPLATE;
  }
  /* A run id without the others is a caller that fills only id and date
   * (older callers): the logical time is then unknown, not empty. */
  const char *val = vals[k];
  if (!val)
    return DR_EDEFERRED;
  *out = cJSON_CreateString(val);
  return 0;
}

/* ${tasks.TASK.dir} or ${tasks.TASK.outputs.KEY}, taken apart. */
typedef struct task_ref {
  char *name;      /* TASK; caller frees */
  const char *key; /* KEY (not terminated), for .outputs */
  size_t lk;
  int is_dir;
} task_ref;

/* Takes f apart into t: 0, or DR_ETEMPLATE after a diagnostic. */
static int parse_task_ref(rctx *r, const ref *f, task_ref *t) {
  const char *tn = f->x + 6;
  size_t rest = f->n - 6, lt = name_len(tn, rest);
  const char *tail = tn + lt;
  size_t ltail = rest - lt;
  t->is_dir = ltail == 4 && memcmp(tail, ".dir", 4) == 0;
  int is_out = has_prefix(tail, ltail, ".outputs.");
  t->lk = is_out ? ltail - 9 : 0;
  t->key = tail + 9;
  /* Output keys take no '-', unlike task names. */
  for (size_t i = 0; i < t->lk && is_out; i++)
    is_out = name_char(t->key[i]) && t->key[i] != '-';
  is_out = is_out && t->lk > 0;
  if (lt == 0 || (!t->is_dir && !is_out)) {
    terr(r, f->v, f->off,
         "bad task reference ${%.*s}: expected ${tasks.TASK.dir} or "
         "${tasks.TASK.outputs.KEY}",
         (int)f->n, f->x);
    return DR_ETEMPLATE;
  }
  t->name = xstrndup(tn, lt);
  return 0;
}

/* Whether the task being resolved may refer to task t (up: its index, -1
 * when unknown): 0, or DR_ETEMPLATE after a diagnostic. Only upstream
 * tasks qualify: their outputs exist before this task starts. */
static int check_task_ref(rctx *r, const ref *f, const task_ref *t, long up) {
  const spec *s = r->e->s;
  int n = (int)f->n;
  if (r->in_params) {
    terr(r, f->v, f->off,
         "${%.*s} cannot be used in params: a param may use only "
         "${env:...} and ${run...}",
         n, f->x);
  } else if (r->task == SIZE_MAX) {
    terr(r, f->v, f->off, "${%.*s} can be used only in a task's values", n,
         f->x);
  } else if (up < 0) {
    sbuf b = {0};
    suggest_task(r, t->name, &b);
    terr(r, f->v, f->off, "unknown task '%s' in ${%.*s}%s", t->name, n, f->x,
         b.s ? b.s : "");
    sbuf_free(&b);
  } else if ((size_t)up == r->task) {
    terr(r, f->v, f->off,
         "task '%s' refers to itself in ${%.*s}; a task can use only the "
         "outputs of tasks it needs",
         t->name, n, f->x);
  } else if (!is_upstream(s, r->task, (size_t)up)) {
    const char *me = s->tasks[r->task].label;
    terr(r, f->v, f->off,
         "task '%s' refers to task '%s' in ${%.*s}, but '%s' is not "
         "upstream of '%s'; add '%s' to the needs of '%s' (directly or "
         "through a task it needs)",
         me, t->name, n, f->x, t->name, me, t->name, me);
  } else {
    return 0;
  }
  return DR_ETEMPLATE;
}

/* Whether task up declares the output t names, when it declares any
 * (`outputs:`): 0, or DR_ETEMPLATE after a diagnostic with the closest
 * declared key. Caught by `dagrun check`, not when the task's turn comes. */
static int check_declared_output(rctx *r, const ref *f, const task_ref *t,
                                 size_t up) {
  const spec_task *ut = &r->e->s->tasks[up];
  if (t->is_dir || spec_task_may_output(ut, t->key, t->lk))
    return 0;
  size_t n = ut->outputs->n;
  const char **keys = xmalloc((n + 1) * sizeof(char *));
  sbuf all = {0};
  for (size_t i = 0; i < n; i++) {
    keys[i] = ut->outputs->items[i]->str;
    sbuf_printf(&all, "%s%s", i ? ", " : "", keys[i]);
  }
  keys[n] = NULL;
  char *key = xstrndup(t->key, t->lk);
  const char *m = closest_match(key, keys);
  if (m)
    terr(r, f->v, f->off,
         "task '%s' declares no output '%s' in ${%.*s}; did you mean "
         "${tasks.%s.outputs.%s}?",
         t->name, key, (int)f->n, f->x, t->name, m);
  else
    terr(r, f->v, f->off,
         "task '%s' declares no output '%s' in ${%.*s}; its outputs: are "
         "[%s]",
         t->name, key, (int)f->n, f->x, all.s ? all.s : "");
  free(key);
  sbuf_free(&all);
  free(keys);
  return DR_ETEMPLATE;
}

/* The value of a checked task reference to task up: deferred while the
 * environment cannot say (dagrun check, a task not yet run). */
static int task_ref_value(rctx *r, const ref *f, const task_ref *t, size_t up,
                          cJSON **out) {
  const tmpl_env *e = r->e;
  if (t->is_dir) {
    if (!e->task_dir)
      return DR_EDEFERRED;
    const char *dir = e->task_dir(e->ud, up);
    *out = cJSON_CreateString(dir ? dir : "");
    return 0;
  }
  if (!e->task_outputs)
    return DR_EDEFERRED;
  const cJSON *outs = e->task_outputs(e->ud, up);
  char *key = xstrndup(t->key, t->lk);
  const cJSON *val = outs ? cJSON_GetObjectItemCaseSensitive(outs, key) : NULL;
  int rc = 0;
  if (!val) {
    terr(r, f->v, f->off, "task '%s' produced no output '%s' (${%.*s})",
         t->name, key, (int)f->n, f->x);
    rc = DR_ETEMPLATE;
  } else {
    *out = cJSON_Duplicate(val, 1);
  }
  free(key);
  return rc;
}

/* A reference to mapped task m: the list of its instances' values, in
 * item order ([] when it has none). */
static int map_ref_value(rctx *r, const ref *f, const task_ref *t,
                         const spec_map *m, cJSON **out) {
  if (r->task != SIZE_MAX &&
      ((r->task >= m->first && r->task < m->first + m->n) ||
       r->task == m->placeholder)) {
    terr(r, f->v, f->off,
         "mapped task '%s' refers to itself in ${%.*s}; a task can use only "
         "the outputs of tasks it needs",
         m->name, (int)f->n, f->x);
    return DR_ETEMPLATE;
  }
  if (m->placeholder != SIZE_MAX && !m->expanded) {
    /* The instances are not known yet: the placeholder stands for them. */
    int rc = check_task_ref(r, f, t, (long)m->placeholder);
    if (rc == 0)
      rc = check_declared_output(r, f, t, m->placeholder);
    return rc ? rc : DR_EDEFERRED;
  }
  if (m->n == 0) {
    if (r->in_params || r->task == SIZE_MAX)
      return check_task_ref(r, f, t, -1);
    *out = cJSON_CreateArray();
    return 0;
  }
  int rc = check_task_ref(r, f, t, (long)m->first);
  if (rc == 0)
    rc = check_declared_output(r, f, t, m->first);
  cJSON *list = cJSON_CreateArray();
  for (size_t i = 0; i < m->n && rc == 0; i++) {
    cJSON *v = NULL;
    rc = task_ref_value(r, f, t, m->first + i, &v);
    if (rc == 0)
      cJSON_AddItemToArray(list, v);
  }
  if (rc == 0)
    *out = list;
  else
    cJSON_Delete(list);
  return rc;
}

/* ${tasks.TASK.dir} or ${tasks.TASK.outputs.KEY}: an upstream task's. */
static int resolve_task_ref(rctx *r, const ref *f, cJSON **out) {
  task_ref t = {0};
  int rc = parse_task_ref(r, f, &t);
  if (rc != 0)
    return rc;
  /* A map over a run-time list is also a task (its placeholder): the map
   * wins, so that its instances are what the reference names. */
  const spec_map *m = spec_map_find(r->e->s, t.name);
  long up = m ? -1 : spec_task_find(r->e->s, t.name);
  if (m) {
    rc = map_ref_value(r, f, &t, m, out);
    free(t.name);
    return rc;
  }
  rc = check_task_ref(r, f, &t, up);
  if (rc == 0)
    rc = check_declared_output(r, f, &t, (size_t)up);
  if (rc == 0)
    rc = task_ref_value(r, f, &t, (size_t)up, out);
  free(t.name);
  return rc;
}

/* The item of instance idx of mapped task m: the run's value of the param
 * m maps over, or the file's item resolved. */
static cJSON *resolve_node(rctx *r, const ynode *v);
static int map_item(rctx *r, const spec_map *m, size_t idx, cJSON **out) {
  if (m->run_items) {
    *out = cJSON_Duplicate(cJSON_GetArrayItem(m->run_items, (int)idx), 1);
    return 0;
  }
  if (!m->param) {
    int errors = r->errors;
    *out = resolve_node(r, m->items->items[idx]);
    return *out ? 0 : r->errors > errors ? DR_ETEMPLATE : DR_EDEFERRED;
  }
  const cJSON *p =
      r->e->params ? cJSON_GetObjectItemCaseSensitive(r->e->params, m->param)
                   : NULL;
  if (!p)
    return DR_EDEFERRED; /* it uses ${run.*}, or did not resolve */
  const cJSON *item = cJSON_GetArrayItem(p, (int)idx);
  if (!cJSON_IsArray(p) || !item) {
    terr(r, m->node, 0,
         "task '%s' maps over param '%s', whose value has no item %zu: its "
         "%zu instances were fixed when the file was loaded",
         m->name, m->param, idx, m->n);
    return DR_ETEMPLATE;
  }
  *out = cJSON_Duplicate(item, 1);
  return 0;
}

/* ${item}, ${item.KEY} or ${item_index}: the item of the mapped task's
 * instance being resolved. */
static int resolve_item_ref(rctx *r, const ref *f, cJSON **out) {
  const spec *s = r->e->s;
  const spec_task *t =
      r->in_params || r->task == SIZE_MAX ? NULL : &s->tasks[r->task];
  int n = (int)f->n;
  if (!t || t->map == SIZE_MAX) {
    terr(r, f->v, f->off,
         "${%.*s} is used outside a mapped task: ${item}, ${item.KEY} and "
         "${item_index} name the item of a task with 'map:'%s%s%s",
         n, f->x, t ? " (task '" : "", t ? t->label : "",
         t ? "' has no 'map:')" : "");
    return DR_ETEMPLATE;
  }
  if (t->item_index == SPEC_ITEM_PENDING)
    return DR_EDEFERRED; /* a list known at run time: not yet */
  if (f->n == 10) {
    *out = cJSON_CreateNumber((double)t->item_index);
    return 0;
  }
  const spec_map *m = &s->maps[t->map];
  const char *key = f->x + 5;
  size_t lk = f->n > 5 ? f->n - 5 : 0;
  if (f->n > 4 && (lk == 0 || name_len(key, lk) != lk)) {
    terr(r, f->v, f->off,
         "bad item reference ${%.*s}: expected ${item}, ${item.KEY} or "
         "${item_index}",
         n, f->x);
    return DR_ETEMPLATE;
  }
  cJSON *item = NULL;
  int rc = map_item(r, m, t->item_index, &item);
  if (rc != 0 || f->n == 4) {
    *out = item;
    return rc;
  }
  char *k = xstrndup(key, lk);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, k);
  if (v) {
    *out = cJSON_Duplicate(v, 1);
  } else {
    terr(r, f->v, f->off, "item %zu of mapped task '%s' %s '%s' (${%.*s})",
         t->item_index, m->name,
         cJSON_IsObject(item) ? "has no key" : "is not a map with a key", k, n,
         f->x);
    rc = DR_ETEMPLATE;
  }
  free(k);
  cJSON_Delete(item);
  return rc;
}

static int is_item_ref(const char *x, size_t n) {
  return (n == 4 && memcmp(x, "item", 4) == 0) ||
         (n == 10 && memcmp(x, "item_index", 10) == 0) ||
         has_prefix(x, n, "item.");
}

/* Resolves the reference x[0..n) (the text between "${" and "}", spaces
 * trimmed, no filter) found at offset off of scalar v. Returns 0 with *out,
 * DR_EDEFERRED, or DR_ETEMPLATE after a diagnostic. */
static int resolve_plain_ref(rctx *r, const ynode *v, size_t off, const char *x,
                             size_t n, cJSON **out) {
  const ref f = {v, off, x, n};
  *out = NULL;
  if (has_prefix(x, n, "params."))
    return resolve_param_ref(r, &f, out);
  if (has_prefix(x, n, "env:"))
    return resolve_env_ref(r, &f, out);
  if (has_prefix(x, n, "run."))
    return resolve_run_ref(r, &f, out);
  if (has_prefix(x, n, "tasks."))
    return resolve_task_ref(r, &f, out);
  if (is_item_ref(x, n))
    return resolve_item_ref(r, &f, out);
  /* The singulars and "env." are the likeliest slips: name the fix. */
  if (has_prefix(x, n, "env.") || has_prefix(x, n, "param.") ||
      has_prefix(x, n, "task.")) {
    const char *fix = x[0] == 'e' ? "env:" : x[0] == 'p' ? "params." : "tasks.";
    const char *dot = memchr(x, '.', n);
    terr(r, v, off, "unknown reference ${%.*s}; did you mean ${%s%.*s}?",
         (int)n, x, fix, (int)(n - (size_t)(dot - x) - 1), dot + 1);
    return DR_ETEMPLATE;
  }
  terr(r, v, off,
       "unknown reference ${%.*s}: expected %s (write $${ for a literal ${)",
       (int)n, x, ref_forms);
  return DR_ETEMPLATE;
}

char *tmpl_sh_quote(const char *s) {
  sbuf b = {0};
  sbuf_putc(&b, '\'');
  for (; *s; s++) {
    if (*s == '\'')
      sbuf_puts(&b, "'\\''");
    else
      sbuf_putc(&b, *s);
  }
  sbuf_putc(&b, '\'');
  return sbuf_take(&b);
}

/* rc and *out of a reference at offset off of v resolved without |sh: at
 * run time, a value made then (${run.trigger_files}, an output) that
 * lands raw in a script must be a plain word (paramrule.h). */
static int landing_check(rctx *r, const ynode *v, size_t off, int rc,
                         cJSON **out) {
  char err[1536];
  if (rc != 0 || !*out ||
      prules_check_landing(r->e->s, v, off, *out, err, sizeof err) == 0)
    return rc;
  terr(r, v, off, "%s", err);
  cJSON_Delete(*out);
  *out = NULL;
  return DR_ETEMPLATE;
}

/* ${run.trigger_files|sh}: each name (one a line) as its own quoted
 * word, space-separated ("" for none), so `for f in ${...|sh}` loops over
 * them. */
static int sh_words(cJSON **out) {
  const char *s = cJSON_IsString(*out) ? (*out)->valuestring : "";
  sbuf b = {0};
  while (*s) {
    size_t n = strcspn(s, "\n");
    char *name = xstrndup(s, n), *q = tmpl_sh_quote(name);
    sbuf_printf(&b, "%s%s", b.s ? " " : "", q);
    free(q);
    free(name);
    s += n + (s[n] == '\n');
  }
  cJSON_Delete(*out);
  *out = cJSON_CreateString(b.s ? b.s : "");
  sbuf_free(&b);
  return 0;
}

/* A reference with its filter: x[0..n) as resolve_plain_ref takes it, or
 * "REF|sh", REF's value as one POSIX shell word (a string). */
static int resolve_ref(rctx *r, const ynode *v, size_t off, const char *x,
                       size_t n, cJSON **out) {
  const char *bar = NULL;
  for (const char *p = x; p < x + n; p++)
    bar = *p == '|' ? p : bar;
  /* In ${env:NAME:-default}, a '|' belongs to the default (it did before
   * filters existed) unless what follows it is the filter sh. */
  if (bar && has_prefix(x, n, "env:") && memmem(x, n, ":-", 2) &&
      !(n - (size_t)(bar - x) == 3 && memcmp(bar, "|sh", 3) == 0))
    bar = NULL;
  if (!bar)
    return landing_check(r, v, off, resolve_plain_ref(r, v, off, x, n, out),
                         out);
  const char *f = bar + 1;
  size_t lf = n - (size_t)(f - x), lx = (size_t)(bar - x);
  while (lf > 0 && (*f == ' ' || *f == '\t')) {
    f++;
    lf--;
  }
  while (lx > 0 && (x[lx - 1] == ' ' || x[lx - 1] == '\t'))
    lx--;
  int json = lf == 4 && memcmp(f, "json", 4) == 0;
  if ((lf != 2 || memcmp(f, "sh", 2) != 0) && !json) {
    terr(r, v, off,
         "unknown filter '%.*s' in ${%.*s}: the filters are |sh (the "
         "value as one quoted shell word) and |json (the value as JSON "
         "text)",
         (int)lf, f, (int)n, x);
    return DR_ETEMPLATE;
  }
  int rc = resolve_plain_ref(r, v, off, x, lx, out);
  if (rc != 0)
    return rc;
  if (json) {
    char *text = cJSON_PrintUnformatted(*out);
    cJSON_Delete(*out);
    *out = cJSON_CreateString(text);
    cJSON_free(text);
    return landing_check(r, v, off, 0, out);
  }
  if (lx == 17 && memcmp(x, "run.trigger_files", 17) == 0)
    return sh_words(out);
  char *text = tmpl_scalar_text(*out);
  cJSON_Delete(*out);
  *out = NULL;
  if (!text) {
    terr(r, v, off, "${%.*s} is a list or a map: |sh quotes one value", (int)n,
         x);
    return DR_ETEMPLATE;
  }
  char *q = tmpl_sh_quote(text);
  *out = cJSON_CreateString(q);
  free(q);
  free(text);
  return 0;
}

/* A scalar that holds "${": pieces joined into a string, or the one
 * reference's value when it is the whole scalar. */
static cJSON *resolve_text(rctx *r, const ynode *v) {
  const char *s = v->str;
  size_t len = strlen(s);
  sbuf b = {0};
  cJSON *whole = NULL;
  int n_refs = 0, literal = 0, bad = 0;
  size_t i = 0;
  while (i < len) {
    if (s[i] == '$' && s[i + 1] == '$' && s[i + 2] == '{') {
      sbuf_puts(&b, "${");
      literal = 1;
      i += 3;
      continue;
    }
    if (!(s[i] == '$' && s[i + 1] == '{')) {
      sbuf_putc(&b, s[i++]);
      literal = 1;
      continue;
    }
    const char *close = memchr(s + i + 2, '}', len - i - 2);
    if (!close) {
      terr(r, v, i,
           "unterminated reference '%.40s': missing '}' (write $${ for a "
           "literal ${)",
           s + i);
      bad = 1;
      break;
    }
    const char *x = s + i + 2;
    size_t n = (size_t)(close - x);
    while (n > 0 && (*x == ' ' || *x == '\t')) {
      x++;
      n--;
    }
    while (n > 0 && (x[n - 1] == ' ' || x[n - 1] == '\t'))
      n--;
    cJSON *val = NULL;
    int rc;
    if (n == 0) {
      terr(r, v, i, "empty reference ${}: expected %s", ref_forms);
      rc = DR_ETEMPLATE;
    } else {
      rc = resolve_ref(r, v, i, x, n, &val);
    }
    n_refs++;
    if (rc == DR_EDEFERRED) {
      r->deferred++;
      bad = 1;
    } else if (rc != 0) {
      bad = 1;
    } else if (cJSON_IsArray(val) || cJSON_IsObject(val)) {
      /* Only a whole scalar may be a list or a map. */
      if (i > 0 || close + 1 < s + len) {
        terr(r, v, i,
             "${%.*s} is a %s and cannot be part of a string; use it as the "
             "whole value",
             (int)n, x, cJSON_IsArray(val) ? "list" : "map");
        bad = 1;
      }
    }
    if (!bad && val) {
      if (i == 0 && close + 1 == s + len) {
        whole = val;
        val = NULL;
      } else {
        char *t = tmpl_scalar_text(val);
        sbuf_puts(&b, t);
        free(t);
      }
    }
    cJSON_Delete(val);
    i = (size_t)(close - s) + 1;
  }
  if (bad) {
    cJSON_Delete(whole);
    sbuf_free(&b);
    return NULL;
  }
  if (whole && n_refs == 1 && !literal) {
    sbuf_free(&b);
    return whole;
  }
  cJSON_Delete(whole);
  char *str = sbuf_take(&b);
  cJSON *out = cJSON_CreateString(str);
  free(str);
  return out;
}

/* NULL when something failed or was deferred (counted in r). */
static cJSON *resolve_node(rctx *r, const ynode *v) {
  if (v->kind == YNODE_SCALAR) {
    if (!strstr(v->str, "${"))
      return v->quoted ? cJSON_CreateString(v->str) : scalar_value(v);
    return resolve_text(r, v);
  }
  int ok = 1;
  cJSON *out =
      v->kind == YNODE_SEQ ? cJSON_CreateArray() : cJSON_CreateObject();
  for (size_t i = 0; i < v->n; i++) {
    const ynode *item =
        v->kind == YNODE_SEQ ? v->items[i] : v->items[2 * i + 1];
    if (v->kind == YNODE_MAP && v->items[2 * i]->kind != YNODE_SCALAR)
      continue; /* spec reports keys that are not names */
    cJSON *c = resolve_node(r, item);
    if (!c) {
      ok = 0;
      continue;
    }
    if (!ok) {
      cJSON_Delete(c);
      continue;
    }
    if (v->kind == YNODE_SEQ)
      cJSON_AddItemToArray(out, c);
    else
      cJSON_AddItemToObject(out, v->items[2 * i]->str, c);
  }
  if (!ok) {
    cJSON_Delete(out);
    return NULL;
  }
  return out;
}

int tmpl_resolve(const tmpl_env *e, size_t task, const ynode *value,
                 cJSON **out, diags *d) {
  rctx r = {e, task, 0, d, 0, 0};
  *out = resolve_node(&r, value);
  if (r.errors) {
    cJSON_Delete(*out);
    *out = NULL;
    return DR_ETEMPLATE;
  }
  if (r.deferred) {
    cJSON_Delete(*out);
    *out = NULL;
    return DR_EDEFERRED;
  }
  return 0;
}

int tmpl_resolve_params(const tmpl_env *e, cJSON **out, diags *d) {
  cJSON *obj = cJSON_CreateObject();
  const ynode *p = e->s->params;
  int errors = 0;
  for (size_t i = 0; p && i < p->n; i++) {
    const ynode *k = p->items[2 * i];
    if (k->kind != YNODE_SCALAR)
      continue;
    rctx r = {e, SIZE_MAX, 1, d, 0, 0};
    cJSON *v = resolve_node(&r, p->items[2 * i + 1]);
    errors += r.errors;
    if (v && !r.errors && !r.deferred)
      cJSON_AddItemToObject(obj, k->str, v);
    else
      cJSON_Delete(v);
  }
  /* Once per run, not per task: the defaults against param_schema. */
  errors += (int)prules_check_defaults(e->s, obj, d);
  *out = obj;
  return errors ? DR_ETEMPLATE : 0;
}

static int mentions(const char *s) {
  for (const char *p = strstr(s, "${"); p; p = strstr(p + 2, "${")) {
    if (p > s && p[-1] == '$')
      continue; /* "$${": a literal */
    const char *q = p + 2;
    while (*q == ' ' || *q == '\t')
      q++;
    if (strncmp(q, "tasks.", 6) == 0)
      return 1;
  }
  return 0;
}

int tmpl_mentions_tasks(const ynode *value) {
  if (!value)
    return 0;
  if (value->kind == YNODE_SCALAR)
    return mentions(value->str);
  for (size_t i = 0; i < value->n; i++) {
    const ynode *item =
        value->kind == YNODE_SEQ ? value->items[i] : value->items[2 * i + 1];
    if (tmpl_mentions_tasks(item))
      return 1;
  }
  return 0;
}

static int override_param(const spec *s, cJSON *params, const char *name,
                          const char *text, char *err, size_t errlen) {
  if (!ynode_get(s->params, name)) {
    sbuf b = {0};
    suggest_param(s, name, &b);
    snprintf(err, errlen, "unknown param '%s'%s", name, b.s ? b.s : "");
    sbuf_free(&b);
    return DR_EINVAL;
  }
  const cJSON *old = cJSON_GetObjectItemCaseSensitive(params, name);
  cJSON *v = NULL;
  int declared = prules_from_text(s, name, text, &v, err, errlen);
  if (declared < 0)
    return declared;
  if (declared) {
    /* param_schema's type wins over the default's. */
  } else if (!old || cJSON_IsString(old) || cJSON_IsNull(old)) {
    v = cJSON_CreateString(text);
  } else if (cJSON_IsNumber(old)) {
    char *end;
    double d = strtod(text, &end);
    if (*text && !*end && isfinite(d))
      v = cJSON_CreateNumber(d);
  } else if (cJSON_IsBool(old)) {
    if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0)
      v = cJSON_CreateBool(text[0] == 't');
  } else {
    v = cJSON_Parse(text);
    if (v && (cJSON_IsArray(v) != cJSON_IsArray(old) ||
              cJSON_IsObject(v) != cJSON_IsObject(old))) {
      cJSON_Delete(v);
      v = NULL;
    }
  }
  if (!v) {
    snprintf(err, errlen, "param '%s' is %s in the DAG; '%s' is not", name,
             cJSON_IsNumber(old) ? "a number"
             : cJSON_IsBool(old) ? "true or false"
             : cJSON_IsArray(old) ? "a list (give it as JSON)"
                                  : "a map (give it as JSON)",
             text);
    return DR_EINVAL;
  }
  if (prules_check(s, name, v, 1, err, errlen) != 0 ||
      mapping_check_override(s, name, v, err, errlen) != 0) {
    cJSON_Delete(v);
    return DR_EINVAL;
  }
  if (old)
    cJSON_ReplaceItemInObjectCaseSensitive(params, name, v);
  else
    cJSON_AddItemToObject(params, name, v);
  return 0;
}

int tmpl_override_param(const spec *s, cJSON *params, const char *name,
                        const char *text, char *err, size_t errlen) {
  if (strlen(text) > TMPL_PARAM_MAX) {
    snprintf(err, errlen,
             "param '%s': a value of %zu bytes; at most %d (a run gets its "
             "params through its environment, which holds 128 KiB a "
             "variable)",
             name, strlen(text), TMPL_PARAM_MAX);
    return DR_EINVAL;
  }
  if (!spec_param_secret(s, name))
    return override_param(s, params, name, text, err, errlen);
  /* The message whole, then the secret value hidden in it. */
  size_t mlen = errlen + strlen(text) + 1;
  char *m = xcalloc(1, mlen);
  int rc = override_param(s, params, name, text, m, mlen);
  if (rc != 0)
    spec_hide_value(m, text, err, errlen);
  free(m);
  return rc;
}
