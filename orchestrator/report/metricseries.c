/*
 * metricseries: a task's metrics.jsonl as series (metricseries.h).
 */
#include "metricseries.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

metric_series *metric_set_get(const metric_set *m, const char *name) {
  for (size_t i = 0; i < m->n; i++)
    if (strcmp(m->s[i].name, name) == 0)
      return &m->s[i];
  return NULL;
}

static double num_or(const cJSON *o, const char *k, double dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

static int point_cmp(const void *a, const void *b) {
  const metric_point *x = a, *y = b;
  if (x->step != y->step)
    return x->step < y->step ? -1 : 1;
  if (x->attempt != y->attempt)
    return x->attempt < y->attempt ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* Sorts each series by step (then attempt, then line) and keeps the
 * last point of each step. */
static void one_per_step(metric_set *m) {
  for (size_t i = 0; i < m->n; i++) {
    metric_series *s = &m->s[i];
    qsort(s->p, s->n, sizeof *s->p, point_cmp);
    size_t k = 0;
    for (size_t a = 0; a < s->n; a++) {
      if (k > 0 && s->p[k - 1].step == s->p[a].step)
        s->p[k - 1] = s->p[a];
      else
        s->p[k++] = s->p[a];
    }
    s->n = k;
  }
}

int metric_set_load(const char *task_dir, metric_set *m) {
  char *path = path_join(task_dir, "metrics.jsonl");
  FILE *f = fopen(path, "re");
  free(path);
  if (!f)
    return -1;
  char *line = NULL;
  size_t cap = 0, order = 0;
  while (getline(&line, &cap, f) > 0) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "value");
    if (cJSON_IsString(name) && cJSON_IsNumber(v)) {
      metric_series *s = metric_set_get(m, name->valuestring);
      if (!s) {
        VEC_RESERVE(m->s, m->cap, m->n + 1);
        s = &m->s[m->n++];
        memset(s, 0, sizeof *s);
        s->name = xstrdup(name->valuestring);
      }
      metric_point p = {num_or(j, "step", 0), v->valuedouble,
                        (int)num_or(j, "attempt", 1), order++};
      VEC_PUSH(s->p, s->n, s->cap, p);
    }
    cJSON_Delete(j);
  }
  free(line);
  fclose(f);
  one_per_step(m);
  return 0;
}

void metric_set_free(metric_set *m) {
  for (size_t i = 0; i < m->n; i++) {
    free(m->s[i].name);
    free(m->s[i].p);
  }
  free(m->s);
  memset(m, 0, sizeof *m);
}
