/*
 * alertspec: `alerts:` -> alertspec entries, every problem one diagnostic
 * and parsing going on, as spec.c does, so that one `dagrun check` shows
 * all of them.
 */
#include "alertspec.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const event_names[] = {"failure",  "retry",    "success",
                                          "deadline", "approval", NULL};
static const char *const alert_keys[] = {"on",      "webhook", "deadline",
                                         "timeout", "tasks",   NULL};

static void err_at(diags *d, const spec *s, const ynode *n, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));
static void err_at(diags *d, const spec *s, const ynode *n, const char *fmt,
                   ...) {
  va_list ap;
  va_start(ap, fmt);
  diags_vadd(d, s->path, n ? n->line : 0, n ? n->col : 0, fmt, ap);
  va_end(ap);
}

/* `deadline:` and `timeout:` are positive: 0 would fire at once or never
 * connect, so unlike a task's timeout it cannot mean "off". */
static int get_duration(const spec *s, const ynode *v, const char *key,
                        size_t idx, double *out, diags *d) {
  double x;
  if (spec_duration(v, &x) != 0 || !(x > 0)) {
    err_at(d, s, v,
           "alert %zu: '%s' expects a positive duration up to 365d (e.g. 90, "
           "30s, 5m, 2h), found %s",
           idx + 1, key, v->kind == YNODE_SCALAR ? v->str : ynode_a_type(v));
    return DR_ESPEC;
  }
  *out = x;
  return 0;
}

static void parse_event(const spec *s, const ynode *v, size_t idx,
                        unsigned *events, diags *d) {
  if (v->kind != YNODE_SCALAR || ynode_scalar_type(v) != YSCALAR_STRING) {
    err_at(d, s, v, "alert %zu: 'on' expects event names (%s), found %s",
           idx + 1, "failure, retry, success, deadline, approval",
           ynode_a_type(v));
    return;
  }
  for (unsigned i = 0; event_names[i]; i++)
    if (strcmp(v->str, event_names[i]) == 0) {
      *events |= 1u << i;
      return;
    }
  const char *m = closest_match(v->str, event_names);
  err_at(d, s, v,
         "alert %zu: unknown event '%s'%s%s%s (expected failure, retry, "
         "success, deadline or approval)",
         idx + 1, v->str, m ? "; did you mean '" : "", m ? m : "",
         m ? "'?" : "");
}

/* `on:` of alert idx: one event name or a list of them. */
static void parse_on(const spec *s, const ynode *m, const ynode *on, size_t idx,
                     alertspec *a, diags *d) {
  if (!on) {
    err_at(d, s, m,
           "alert %zu: missing 'on' (a list of events: failure, retry, "
           "success, deadline, approval)",
           idx + 1);
  } else if (on->kind == YNODE_SEQ) {
    if (on->n == 0)
      err_at(d, s, on, "alert %zu: 'on' lists no event", idx + 1);
    for (size_t k = 0; k < on->n; k++)
      parse_event(s, on->items[k], idx, &a->events, d);
  } else {
    parse_event(s, on, idx, &a->events, d);
  }
}

/* `tasks: [name, ...]` of alert idx: indices into s->tasks. */
static void parse_tasks(const spec *s, const ynode *v, size_t idx, alertspec *a,
                        diags *d) {
  if (v->kind != YNODE_SEQ) {
    err_at(d, s, v, "alert %zu: 'tasks' expects a list of task names, found %s",
           idx + 1, ynode_a_type(v));
    return;
  }
  free(a->tasks);
  a->tasks = xcalloc(v->n ? v->n : 1, sizeof(size_t));
  a->n_tasks = 0;
  const char **names = xcalloc(s->n_tasks + 1, sizeof(char *));
  for (size_t k = 0; k < s->n_tasks; k++)
    names[k] = s->tasks[k].name;
  for (size_t k = 0; k < v->n; k++) {
    const ynode *it = v->items[k];
    long t =
        it->kind == YNODE_SCALAR && it->str ? spec_task_find(s, it->str) : -1;
    if (it->kind != YNODE_SCALAR) {
      err_at(d, s, it, "alert %zu: 'tasks' expects task names, found %s",
             idx + 1, ynode_a_type(it));
    } else if (t < 0) {
      const char *m = closest_match(it->str, names);
      err_at(d, s, it, "alert %zu: unknown task '%s'%s%s%s", idx + 1, it->str,
             m ? "; did you mean '" : "", m ? m : "", m ? "'?" : "");
    } else {
      a->tasks[a->n_tasks++] = (size_t)t;
    }
  }
  free(names);
}

/* The keys of alert idx that parse one by one; `on`, `deadline` and
 * `tasks` as written go to the caller, which checks how they go
 * together. */
static void parse_keys(const spec *s, const ynode *m, size_t idx, alertspec *a,
                       const ynode **on, const ynode **deadline,
                       const ynode **tasks, diags *d) {
  for (size_t k = 0; k < m->n; k++) {
    const ynode *key = m->items[2 * k], *val = m->items[2 * k + 1];
    const char *z = key->str ? key->str : "";
    if (strcmp(z, "on") == 0) {
      *on = val;
    } else if (strcmp(z, "webhook") == 0) {
      a->webhook = val;
    } else if (strcmp(z, "deadline") == 0) {
      *deadline = val;
      (void)get_duration(s, val, "deadline", idx, &a->deadline_s, d);
    } else if (strcmp(z, "timeout") == 0) {
      (void)get_duration(s, val, "timeout", idx, &a->timeout_s, d);
    } else if (strcmp(z, "tasks") == 0) {
      *tasks = val;
      parse_tasks(s, val, idx, a, d);
    } else {
      const char *near = closest_match(z, alert_keys);
      err_at(d, s, key, "alert %zu: unknown key '%s'%s%s%s", idx + 1, z,
             near ? "; did you mean '"
                  : " (expected on, webhook, "
                    "deadline, timeout, tasks)",
             near ? near : "", near ? "'?" : "");
    }
  }
}

/* Entry idx of `alerts:`, the map m, into a. */
static void parse_entry(const spec *s, const ynode *m, size_t idx, alertspec *a,
                        diags *d) {
  a->node = m;
  a->timeout_s = ALERTSPEC_DEFAULT_TIMEOUT_S;
  if (m->kind != YNODE_MAP) {
    err_at(d, s, m,
           "alert %zu: expected a map with 'on' and 'webhook', found %s",
           idx + 1, ynode_a_type(m));
    return;
  }
  const ynode *on = NULL, *deadline = NULL, *tasks = NULL;
  parse_keys(s, m, idx, a, &on, &deadline, &tasks, d);
  parse_on(s, m, on, idx, a, d);
  if (!a->webhook)
    err_at(d, s, m, "alert %zu: missing 'webhook' (the URL to POST to)",
           idx + 1);
  else if (a->webhook->kind != YNODE_SCALAR)
    err_at(d, s, a->webhook, "alert %zu: 'webhook' expects a URL, found %s",
           idx + 1, ynode_a_type(a->webhook));
  if (deadline && !(a->events & ALERTSPEC_DEADLINE))
    err_at(d, s, deadline,
           "alert %zu: 'deadline' without the 'deadline' event in 'on' "
           "would never fire",
           idx + 1);
  if (tasks && !(a->events & ALERTSPEC_DEADLINE))
    err_at(d, s, tasks,
           "alert %zu: 'tasks' names the tasks of a per-task deadline: it "
           "needs the 'deadline' event in 'on'",
           idx + 1);
  if ((a->events & ALERTSPEC_DEADLINE) && !deadline)
    err_at(d, s, on,
           "alert %zu: the 'deadline' event needs 'deadline: DURATION' "
           "(how long the run may take)",
           idx + 1);
}

int alertspec_parse(const spec *s, alertspec **out, size_t *n, diags *d) {
  size_t before = d->n;
  *out = NULL;
  *n = 0;
  const ynode *al = s->alerts;
  if (!al ||
      (al->kind == YNODE_SCALAR && ynode_scalar_type(al) == YSCALAR_NULL))
    return 0;
  if (al->kind != YNODE_SEQ) {
    err_at(d, s, al, "'alerts' expects a list of alerts, found %s",
           ynode_a_type(al));
    return DR_ESPEC;
  }
  alertspec *v = xcalloc(al->n ? al->n : 1, sizeof(*v));
  for (size_t i = 0; i < al->n; i++)
    parse_entry(s, al->items[i], i, &v[i], d);
  *out = v;
  *n = al->n;
  return d->n > before ? DR_ESPEC : 0;
}

void alertspec_free(alertspec *v, size_t n) {
  for (size_t i = 0; v && i < n; i++)
    free(v[i].tasks);
  free(v);
}

static int is_http_url(const char *z) {
  return strncmp(z, "http://", 7) == 0 || strncmp(z, "https://", 8) == 0;
}

int alertspec_webhook(const spec *s, const alertspec *a, size_t idx,
                      const tmpl_env *e, char **url, diags *d) {
  *url = NULL;
  cJSON *v = NULL;
  int rc = tmpl_resolve(e, SIZE_MAX, a->webhook, &v, d);
  if (rc != 0)
    return rc;
  /* "" (`${env:HOOK:-}` with HOOK unset) turns the alert off. */
  if (cJSON_IsString(v) && v->valuestring[0] == '\0') {
    cJSON_Delete(v);
    return 0;
  }
  if (!cJSON_IsString(v) || !is_http_url(v->valuestring)) {
    /* The value may be a secret: the message never shows it. */
    err_at(d, s, a->webhook,
           "alert %zu: 'webhook' must resolve to an http:// or https:// "
           "URL",
           idx + 1);
    cJSON_Delete(v);
    return DR_ESPEC;
  }
  *url = xstrdup(v->valuestring);
  cJSON_Delete(v);
  return 0;
}

int alertspec_check(const spec *s, const cJSON *params, diags *d) {
  size_t before = d->n;
  alertspec *v;
  size_t n;
  (void)alertspec_parse(s, &v, &n, d);
  tmpl_env e = {0};
  e.s = s;
  e.params = params;
  for (size_t i = 0; i < n; i++) {
    const ynode *w = v[i].webhook;
    if (!w || w->kind != YNODE_SCALAR)
      continue;
    if (tmpl_mentions_tasks(w)) {
      err_at(d, s, w, "alert %zu: 'webhook' cannot use ${tasks.*}", i + 1);
      continue;
    }
    char *url = NULL;
    (void)alertspec_webhook(s, &v[i], i, &e, &url, d);
    if (url) {
      memset(url, 0, strlen(url));
      free(url);
    }
  }
  alertspec_free(v, n);
  return d->n > before ? DR_ESPEC : 0;
}
