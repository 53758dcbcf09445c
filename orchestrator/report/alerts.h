/*
 * alerts: webhook alerts of one run (the DAG's top-level `alerts:` list,
 * whose syntax and checks are dagfile/alertspec.h; `dagrun check` reports
 * its errors through alertspec_check).
 *
 * A webhook that resolves to "" (e.g. `${env:HOOK:-}` with HOOK unset)
 * turns its alert off.
 *
 * Events: `failure` (a task failed for good), `retry` (a failed attempt
 * will be retried), `success` (the run succeeded: one alert per run),
 * `deadline` (the run still going `deadline` after it started; with
 * `tasks:`, one alert per listed task still not finished `deadline` after
 * its first attempt started, naming the task).
 *
 * Each alert is POSTed as Slack-compatible JSON ("text" plus dag, run,
 * task, state, attempt, max_attempts, error, log_tail, link, event),
 * asynchronously on the run's libuv loop through curl's multi socket
 * interface. A delivery is tried at most 3 times, 1 s then 2 s apart, on
 * network errors, HTTP 5xx and 429; other answers are final. Nothing here
 * blocks the run or changes its result. Every delivery attempt is appended
 * to <run>/alerts.jsonl, and recorded in the run store when one is given
 * (store_alert_record; a failing store write is said once on stderr and
 * changes nothing else), with the webhook reduced to scheme://host[:port]:
 * webhook URLs carry secrets in their path and query, and the resolved URL
 * is never written anywhere nor printed. Bodies and records are masked
 * with the run's secrets (secrets.h).
 *
 * All functions run on the loop's thread.
 */
#ifndef DAGRUN_ALERTS_H
#define DAGRUN_ALERTS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <uv.h>

#include "dagfile/spec.h"
#include "run/rundir.h"
#include "run/scheduler.h"
#include "store/store.h"

/* Seconds a finished run waits for deliveries still in flight. */
#define ALERTS_GRACE_S 5.0

typedef struct alerts alerts;

/* Creates the alerts of a run: resolves the webhooks with the run's params
 * and fields, opens <run>/alerts.jsonl and starts the deadline timers. All
 * arguments are borrowed and must outlive the object; db (may be NULL) is
 * the run store, used on the loop's thread. Returns 0 with *out
 * (NULL when the DAG has no alerts), or DR_ETEMPLATE / DR_EIO with a
 * message in err that never contains a resolved webhook. Its handles do
 * not keep the loop alive while the run goes on. */
int alerts_create(uv_loop_t *loop, const spec *s, const rundir *run,
                  const cJSON *params, store *db, alerts **out, char *err,
                  size_t errlen);

/* A task state change from the scheduler's observer; sends `retry` and
 * `failure` alerts, starts and stops per-task deadlines. NULL a: no-op. */
void alerts_task_event(alerts *a, const sched_event *e);
/* Tasks first .. first + n - 1 were added to the spec (the sched
 * observer's tasks_added). NULL a: no-op. */
void alerts_tasks_added(alerts *a, size_t first, size_t n);

/* The run ended in state ("success", "failed", "cancelled"): stops the
 * deadline timers, sends `success` alerts, and from now on keeps the loop
 * alive until every delivery is done or ALERTS_GRACE_S have passed; then
 * the rest are abandoned (recorded, and said on stderr) and every handle
 * is closed. The caller runs the loop after this. NULL a: no-op. */
void alerts_run_finished(alerts *a, const char *state, size_t n_tasks,
                         double duration_s);

/* Frees the object; its handles must be closed (the loop ran after
 * alerts_run_finished). NULL is a no-op. */
void alerts_destroy(alerts *a);

/* scheme://host[:port] of a URL, never its user, path or query, into buf
 * ("(invalid URL)" when it does not parse). */
void alerts_redact_url(const char *url, char *buf, size_t n);

#endif /* DAGRUN_ALERTS_H */
