/*
 * params: a task's `with` map -> the JSON object its plugin reads, checked
 * against the stage's schema. Values are resolved (templates) first, then
 * converted to the schema's type, so `steps: ${params.steps}` is checked
 * with the value it will have.
 */
#include "params.h"

#include "loader.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* "a string (\"x\")", "an integer (5)", "a list", ... */
static void describe(sbuf *b, const cJSON *v) {
  if (cJSON_IsArray(v)) {
    sbuf_puts(b, "a list");
  } else if (cJSON_IsObject(v)) {
    sbuf_puts(b, "a map");
  } else if (cJSON_IsNull(v)) {
    sbuf_puts(b, "null");
  } else if (cJSON_IsString(v)) {
    size_t n = strlen(v->valuestring);
    char *end;
    double x = strtod(v->valuestring, &end);
    if (n && !*end && !isfinite(x) && isdigit((unsigned char)end[-1]))
      sbuf_printf(b, "a number beyond a double's range (%.60s)",
                  v->valuestring);
    else if (n > 60)
      sbuf_printf(b, "a string (\"%.57s...\")", v->valuestring);
    else
      sbuf_printf(b, "a string (\"%s\")", v->valuestring);
  } else {
    char *t = tmpl_scalar_text(v);
    const char *kind = cJSON_IsBool(v)                           ? "a boolean"
                       : v->valuedouble != floor(v->valuedouble) ? "a number"
                       : fabs(v->valuedouble) < 9.3e18
                           ? "an integer"
                           : "an integer beyond 64 bits";
    sbuf_printf(b, "%s (%s)", kind, t);
    free(t);
  }
}

/* The text a scalar value stands for. A plain YAML scalar without
 * templates keeps its written form ("1.10" stays "1.10"). */
static char *text_of(const cJSON *v, const ynode *node) {
  if (node && node->kind == YNODE_SCALAR && !strstr(node->str, "${") &&
      !cJSON_IsString(v))
    return xstrdup(node->str);
  return tmpl_scalar_text(v);
}

typedef struct pctx {
  const tmpl_env *e;
  const spec_task *t;
  diags *d;
  int errors;
} pctx;

static void perr(pctx *p, const ynode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void perr(pctx *p, const ynode *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diags_vadd(p->d, p->e->s->path, at ? at->line : 0, at ? at->col : 0, fmt, ap);
  va_end(ap);
  p->errors++;
}

static void type_error(pctx *p, const dagrun_param_spec *ps, const ynode *at,
                       const cJSON *v, const char *what) {
  sbuf b = {0};
  describe(&b, v);
  perr(p, at, "param '%s' of stage '%s' in task '%s': expected %s, found %s",
       ps->name, p->t->stage, p->t->label, what, b.s);
  sbuf_free(&b);
}

/* The node of item i of a list value, when the value was written as a
 * list (for positions); the value's node otherwise. */
static const ynode *item_node(const ynode *node, size_t i, int map) {
  if (!map && node->kind == YNODE_SEQ && i < node->n)
    return node->items[i];
  if (map && node->kind == YNODE_MAP && i < node->n)
    return node->items[2 * i + 1];
  return node;
}

/* Converts a resolved value to the param's type; NULL after an error. */
static cJSON *coerce(pctx *p, const dagrun_param_spec *ps, const ynode *node,
                     const cJSON *v) {
  double x;
  switch (ps->type) {
  case DAGRUN_PARAM_STRING:
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
      break;
    {
      char *s = text_of(v, node);
      cJSON *out = cJSON_CreateString(s);
      free(s);
      return out;
    }
  case DAGRUN_PARAM_INT:
    if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
        fabs(v->valuedouble) < 9.3e18)
      return cJSON_CreateNumber(v->valuedouble);
    if (cJSON_IsString(v) && params_parse_int(v->valuestring, &x) == 0)
      return cJSON_CreateNumber(x);
    break;
  case DAGRUN_PARAM_FLOAT:
    if (cJSON_IsNumber(v))
      return cJSON_CreateNumber(v->valuedouble);
    if (cJSON_IsString(v) && params_parse_float(v->valuestring, &x) == 0)
      return cJSON_CreateNumber(x);
    break;
  case DAGRUN_PARAM_BOOL:
    if (cJSON_IsBool(v))
      return cJSON_CreateBool(cJSON_IsTrue(v));
    if (cJSON_IsString(v) && (strcmp(v->valuestring, "true") == 0 ||
                              strcmp(v->valuestring, "false") == 0))
      return cJSON_CreateBool(v->valuestring[0] == 't');
    break;
  case DAGRUN_PARAM_LIST:
  case DAGRUN_PARAM_MAP: {
    int is_map = ps->type == DAGRUN_PARAM_MAP;
    if (is_map ? !cJSON_IsObject(v) : cJSON_IsObject(v))
      break;
    if (!is_map && !cJSON_IsArray(v)) {
      /* One scalar: a list of one. */
      char *s = text_of(v, node);
      cJSON *one = cJSON_CreateArray();
      cJSON_AddItemToArray(one, cJSON_CreateString(s));
      free(s);
      return one;
    }
    cJSON *out = is_map ? cJSON_CreateObject() : cJSON_CreateArray();
    int ok = 1;
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
      const ynode *at = item_node(node, i, is_map);
      if (cJSON_IsArray(c) || cJSON_IsObject(c) || cJSON_IsNull(c)) {
        sbuf b = {0};
        describe(&b, c);
        if (is_map)
          perr(p, at,
               "param '%s' of stage '%s' in task '%s': value of '%s' must "
               "be a string, found %s",
               ps->name, p->t->stage, p->t->label, c->string, b.s);
        else
          perr(p, at,
               "param '%s' of stage '%s' in task '%s': item %zu must be a "
               "string, found %s",
               ps->name, p->t->stage, p->t->label, i + 1, b.s);
        sbuf_free(&b);
        ok = 0;
        continue;
      }
      char *s = text_of(c, at == node ? NULL : at);
      if (is_map)
        cJSON_AddItemToObject(out, c->string, cJSON_CreateString(s));
      else
        cJSON_AddItemToArray(out, cJSON_CreateString(s));
      free(s);
    }
    if (ok)
      return out;
    cJSON_Delete(out);
    return NULL;
  }
  }
  type_error(p, ps, node, v, params_type_expected(ps->type));
  return NULL;
}

/* A schema default, from its YAML text; reports a plugin's bad default. */
static cJSON *default_value(pctx *p, const dagrun_param_spec *ps) {
  cJSON *v = params_default(ps);
  if (v || ps->type == DAGRUN_PARAM_LIST || ps->type == DAGRUN_PARAM_MAP)
    return v;
  perr(p, p->t->stage_node,
       "stage '%s' declares an invalid default \"%s\" for its %s param '%s' "
       "(a bug in the plugin); set '%s' in task '%s'",
       p->t->stage, ps->default_value, params_type_name(ps->type), ps->name,
       ps->name, p->t->label);
  return NULL;
}

/* A converted value (c) of a param with a fixed set of values (plugin.h's
 * dagrun_param_choice) that is not one of them: reported at the value. */
static int check_choice(pctx *p, const dagrun_param_spec *ps,
                        const char *const *values, const ynode *at,
                        const cJSON *c) {
  char *z = cJSON_IsString(c) ? xstrdup(c->valuestring) : tmpl_scalar_text(c);
  int ok = loader_choice_index(values, ps->type, z) >= 0;
  if (!ok) {
    sbuf b = {0};
    loader_choices_join(&b, values);
    /* A near miss of a word is a typo worth naming; of a number, noise. */
    const char *m =
        ps->type == DAGRUN_PARAM_STRING ? closest_match(z, values) : NULL;
    if (m)
      sbuf_printf(&b, "; did you mean '%s'?", m);
    perr(p, at, "task '%s': stage '%s' param '%s': '%s' is not one of %s",
         p->t->label, p->t->stage, ps->name, z, b.s);
    sbuf_free(&b);
  }
  free(z);
  return ok;
}

static void unknown_param(pctx *p, const dagrun_param_spec *schema,
                          const ynode *k) {
  size_t n = 0;
  while (schema && schema[n].name)
    n++;
  if (n == 0) {
    perr(p, k, "unknown param '%s' in task '%s': stage '%s' takes no params",
         k->str, p->t->label, p->t->stage);
    return;
  }
  const char **names = xmalloc((n + 1) * sizeof(char *));
  for (size_t i = 0; i < n; i++)
    names[i] = schema[i].name;
  names[n] = NULL;
  const char *m = closest_match(k->str, names);
  if (m) {
    perr(p, k,
         "unknown param '%s' for stage '%s' in task '%s'; did you mean "
         "'%s'?",
         k->str, p->t->stage, p->t->label, m);
  } else {
    sbuf b = {0};
    for (size_t i = 0; i < n; i++)
      sbuf_printf(&b, "%s%s", i ? ", " : "", names[i]);
    perr(p, k, "unknown param '%s' for stage '%s' in task '%s'; it takes: %s",
         k->str, p->t->stage, p->t->label, b.s);
    sbuf_free(&b);
  }
  free(names);
}

int params_build(const dagrun_param_spec *schema,
                 const dagrun_param_choice *choices, const tmpl_env *e,
                 size_t task, cJSON **out, diags *d) {
  const spec_task *t = &e->s->tasks[task];
  pctx p = {e, t, d, 0};
  int template_errors = 0;
  size_t n_schema = 0;
  while (schema && schema[n_schema].name)
    n_schema++;
  /* Which schema entries the task sets (deferred ones count as set). */
  unsigned char *set = xcalloc(n_schema ? n_schema : 1, 1);
  cJSON *obj = cJSON_CreateObject();
  const ynode *with = t->with;
  for (size_t i = 0; with && i < with->n; i++) {
    const ynode *k = with->items[2 * i], *v = with->items[2 * i + 1];
    if (k->kind != YNODE_SCALAR)
      continue; /* reported by spec */
    size_t j = 0;
    while (j < n_schema && strcmp(schema[j].name, k->str) != 0)
      j++;
    if (j == n_schema) {
      unknown_param(&p, schema, k);
      /* Its templates are still worth checking. */
      cJSON *ignored;
      if (tmpl_resolve(e, task, v, &ignored, d) == DR_ETEMPLATE)
        template_errors++;
      cJSON_Delete(ignored);
      continue;
    }
    const dagrun_param_spec *ps = &schema[j];
    cJSON *val;
    int rc = tmpl_resolve(e, task, v, &val, d);
    if (rc == DR_EDEFERRED) {
      set[j] = 1;
      continue;
    }
    if (rc != 0) {
      set[j] = 1;
      template_errors++;
      continue;
    }
    if (cJSON_IsNull(val)) {
      /* `key:` with no value means "not set": the default applies. */
      cJSON_Delete(val);
      if (ps->required)
        perr(&p, v,
             "param '%s' of stage '%s' in task '%s' is required, found null",
             ps->name, t->stage, t->label);
      set[j] = ps->required;
      continue;
    }
    set[j] = 1;
    cJSON *c = coerce(&p, ps, v, val);
    cJSON_Delete(val);
    const char *const *values = loader_param_choices(choices, ps->name);
    if (c && values && !check_choice(&p, ps, values, v, c)) {
      cJSON_Delete(c);
      c = NULL;
    }
    if (c)
      cJSON_AddItemToObject(obj, ps->name, c);
  }
  for (size_t j = 0; j < n_schema; j++) {
    const dagrun_param_spec *ps = &schema[j];
    if (set[j])
      continue;
    if (ps->required) {
      const ynode *at = t->stage_node ? t->stage_node : t->node;
      if (ps->help && *ps->help)
        perr(&p, at,
             "task '%s' is missing required param '%s' of stage '%s' (%s: "
             "%s); add it under 'with'",
             t->label, ps->name, t->stage, params_type_name(ps->type),
             ps->help);
      else
        perr(&p, at,
             "task '%s' is missing required param '%s' of stage '%s' (%s); "
             "add it under 'with'",
             t->label, ps->name, t->stage, params_type_name(ps->type));
      continue;
    }
    if (ps->default_value) {
      cJSON *c = default_value(&p, ps);
      if (c)
        cJSON_AddItemToObject(obj, ps->name, c);
    }
  }
  free(set);
  if (p.errors || template_errors) {
    cJSON_Delete(obj);
    *out = NULL;
    return p.errors ? DR_EPARAM : DR_ETEMPLATE;
  }
  *out = obj;
  return 0;
}
