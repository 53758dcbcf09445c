/*
 * mapping: reads `map:` and guards the count of a mapped param's items.
 */
#include "mapping.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text between "${" and "}" of a scalar that is one reference and
 * nothing else, spaces trimmed, into *x and *n: 1, or 0 when it is not. */
static int whole_ref(const ynode *v, const char **x, size_t *n) {
  const char *s = v->str;
  size_t len = strlen(s);
  if (len < 3 || s[0] != '$' || s[1] != '{' || s[len - 1] != '}' ||
      memchr(s + 2, '}', len - 3) || strstr(s + 2, "${"))
    return 0;
  *x = s + 2;
  *n = len - 3;
  while (*n > 0 && (**x == ' ' || **x == '\t')) {
    (*x)++;
    (*n)--;
  }
  while (*n > 0 && ((*x)[*n - 1] == ' ' || (*x)[*n - 1] == '\t'))
    (*n)--;
  return 1;
}

static const char map_forms[] =
    "a list ([a, b, c]), ${params.NAME} naming a param whose value is a "
    "list, or ${tasks.TASK.outputs.KEY} naming an upstream task's output "
    "that is a JSON list";

/* map: ${tasks.TASK.outputs.KEY}: a list known at run time. Only its form
 * is checked here; that TASK is upstream and may produce KEY is checked
 * with the task's other templates (check.h), when needs are known. */
static size_t parse_output(const spec *s, const char *task, const ynode *v,
                           const char *x, size_t n, diags *d) {
  const char *dot = memchr(x + 6, '.', n - 6);
  if (dot && dot > x + 6 && (size_t)(x + n - dot) > 9 &&
      memcmp(dot, ".outputs.", 9) == 0)
    return 0;
  diags_add(d, s->path, v->line, v->col,
            "'map' in task '%s': ${%.*s} is not a task's output; expected %s",
            task, (int)n, x, map_forms);
  return 1;
}

/* map: ${params.NAME}: the param's value in the file must be a list. */
static size_t parse_param(const spec *s, const char *task, const ynode *v,
                          const char *name, size_t ln, spec_map *m, diags *d) {
  char *key = xstrndup(name, ln);
  const ynode *p = s->params ? ynode_get(s->params, key) : NULL;
  size_t errors = 1;
  if (!p)
    diags_add(d, s->path, v->line, v->col,
              "'map' in task '%s' names unknown param '%s' (declare it under "
              "'params' as a list)",
              task, key);
  else if (p->kind != YNODE_SEQ)
    diags_add(d, s->path, v->line, v->col,
              "'map' in task '%s': param '%s' is %s at line %d, not a list; "
              "the number of instances is fixed when the file is loaded, "
              "so the param's value in the file must be a list",
              task, key, ynode_a_type(p), p->line);
  else {
    m->items = p;
    m->param = key;
    m->n = p->n;
    return 0;
  }
  free(key);
  return errors;
}

size_t mapping_parse(const spec *s, const char *task, const ynode *v,
                     spec_map *m, diags *d) {
  const char *x;
  size_t n;
  m->node = v;
  m->n = 0;
  m->items = NULL;
  if (v->kind == YNODE_SEQ) {
    m->items = v;
    m->n = v->n;
    return 0;
  }
  if (v->kind == YNODE_SCALAR && whole_ref(v, &x, &n)) {
    if (n > 7 && memcmp(x, "params.", 7) == 0)
      return parse_param(s, task, v, x + 7, n - 7, m, d);
    if (n > 6 && memcmp(x, "tasks.", 6) == 0)
      return parse_output(s, task, v, x, n, d);
  }
  diags_add(d, s->path, v->line, v->col,
            "'map' in task '%s': expected %s, found %s", task, map_forms,
            v->kind == YNODE_SCALAR && ynode_scalar_type(v) == YSCALAR_STRING
                ? "a string"
                : ynode_a_type(v));
  return 1;
}

int mapping_check_override(const spec *s, const char *name, const cJSON *v,
                           char *err, size_t errlen) {
  for (size_t i = 0; i < s->n_maps; i++) {
    const spec_map *m = &s->maps[i];
    if (!m->param || strcmp(m->param, name) != 0)
      continue;
    if (cJSON_IsArray(v) && (size_t)cJSON_GetArraySize(v) == m->n)
      continue;
    snprintf(err, errlen,
             "task '%s' maps over param '%s', and its %zu instances are "
             "fixed when the DAG file is loaded: give a list of %zu items "
             "(or change the list in the file)",
             m->name, name, m->n, m->n);
    return DR_EINVAL;
  }
  return 0;
}

int mapping_items(const spec_map *m, const cJSON *v, cJSON **items, char *err,
                  size_t errlen) {
  cJSON *parsed = NULL;
  *items = NULL;
  /* A plugin's outputs are strings: one holding a JSON list is a list. */
  if (cJSON_IsString(v) && (parsed = cJSON_Parse(v->valuestring)) &&
      cJSON_IsArray(parsed))
    v = parsed;
  if (!cJSON_IsArray(v)) {
    char *text = cJSON_PrintUnformatted(v);
    size_t len = text ? strlen(text) : 0;
    snprintf(err, errlen,
             "task '%s' maps over %s, which is %s (%.80s%s), not a JSON list",
             m->name, m->node->str,
             cJSON_IsString(v)   ? "a string"
             : cJSON_IsNumber(v) ? "a number"
             : cJSON_IsBool(v)   ? "a bool"
             : cJSON_IsObject(v) ? "a map"
                                 : "null",
             text ? text : "?", len > 80 ? "..." : "");
    cJSON_free(text);
    cJSON_Delete(parsed);
    return DR_EINVAL;
  }
  int n = cJSON_GetArraySize(v);
  if (n > SPEC_MAP_MAX) {
    snprintf(err, errlen,
             "task '%s' maps over %s, a list of %d items: a mapped task has "
             "at most %d instances",
             m->name, m->node->str, n, SPEC_MAP_MAX);
    cJSON_Delete(parsed);
    return DR_EINVAL;
  }
  *items = parsed ? parsed : cJSON_Duplicate(v, 1);
  return 0;
}
