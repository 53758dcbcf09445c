/*
 * alertspec: the DAG's top-level `alerts:` list, parsed and checked. What
 * the alerts do at run time (sending webhooks on the loop) is
 * report/alerts.h; this module only reads the file.
 *
 *   alerts:
 *     - on: [failure, retry, success, deadline, approval]  # or one name
 *       webhook: ${env:DAGRUN_WEBHOOK_URL}   # templated like task values
 *       deadline: 2h     # with `deadline`: the run not finished by then
 *       tasks: [train]   # optional: instead each task not finished
 *                        # `deadline` after it first started running
 *       timeout: 10s     # per delivery attempt, connect + transfer
 *
 * Rules, each broken one an error with file:line:col (spec.h's format):
 * `alerts:` is a list (or empty); each entry a map with the keys above
 * (unknown keys get "did you mean"); `on` lists at least one of failure,
 * retry, success, deadline, approval; `webhook` is a scalar; `deadline` and
 * `timeout` are positive durations (spec_duration: 90, 30s, 5m, 2h);
 * `tasks` names tasks of the DAG; `deadline` and `tasks` come with the
 * `deadline` event, and that event with `deadline`. alertspec_check also
 * resolves each webhook (at check time: env and params, run.* deferred):
 * it must not use ${tasks.*} and must give an http:// or https:// URL,
 * or "" (for instance `${env:HOOK:-}` with HOOK unset), which turns its
 * alert off. A webhook may hold a secret: no message shows its value.
 *
 * Ownership: an alertspec array is the caller's (alertspec_free); the
 * nodes it points to are borrowed from the spec, which must outlive it.
 * Single-threaded, like spec.h.
 */
#ifndef DAGRUN_ALERTSPEC_H
#define DAGRUN_ALERTSPEC_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "spec.h"
#include "template.h"

/* The events of `on:`, as bits of alertspec.events. */
#define ALERTSPEC_FAILURE 1u  /* a task failed for good */
#define ALERTSPEC_RETRY 2u    /* a failed attempt will be retried */
#define ALERTSPEC_SUCCESS 4u  /* the run succeeded */
#define ALERTSPEC_DEADLINE 8u /* the run (or a listed task) is late */
#define ALERTSPEC_APPROVAL 16u /* an approval task began to wait */

/* `timeout:` when not given, in seconds. */
#define ALERTSPEC_DEFAULT_TIMEOUT_S 10.0

/* One entry of `alerts:` as written. */
typedef struct alertspec {
  const ynode *node;    /* the entry (borrowed from the spec) */
  const ynode *webhook; /* the webhook template as written, or NULL */
  unsigned events;      /* ALERTSPEC_* bits */
  double deadline_s;    /* 0: none */
  double timeout_s;     /* per delivery attempt */
  size_t *tasks;        /* `tasks:` as indices into s->tasks, or NULL */
  size_t n_tasks;
} alertspec;

/* Parses s->alerts into *out, *n entries in the order written (*out NULL
 * and *n 0 when the DAG has no alerts); caller frees with alertspec_free.
 * Entries with errors are kept with what parsed. Returns 0, or DR_ESPEC
 * with every error added to d. Webhooks are not resolved. */
int alertspec_parse(const spec *s, alertspec **out, size_t *n, diags *d);

/* Frees what alertspec_parse made. NULL is a no-op. */
void alertspec_free(alertspec *v, size_t n);

/* Resolves the webhook of entry idx (0-based, as parsed) with e. Returns 0
 * with *url the URL (caller frees; a secret: zero it before freeing) or
 * NULL when it resolves to "" (the alert is off); DR_ETEMPLATE or
 * DR_EDEFERRED from tmpl_resolve (its errors in d); or DR_ESPEC with
 * "alert N: 'webhook' must resolve to an http:// or https:// URL" in d
 * (the value is not shown). */
int alertspec_webhook(const spec *s, const alertspec *a, size_t idx,
                      const tmpl_env *e, char **url, diags *d);

/* What `dagrun check` says of s->alerts: alertspec_parse's errors, then
 * each webhook resolved with params (the DAG params resolved at check
 * time, borrowed, may be NULL) and no run. Returns 0 or DR_ESPEC, with
 * every error added to d. */
int alertspec_check(const spec *s, const cJSON *params, diags *d);

#endif /* DAGRUN_ALERTSPEC_H */
