/*
 * trigger: what a DAG's cron trigger does when it wakes up, given the
 * last schedule time it handled, the time now and whether a run of the
 * DAG is going. No clock and no processes: `dagrun serve` passes the
 * times (its clock may be a fake one in tests) and acts on the answer.
 *
 * The rules (README "dagrun serve"):
 * - The schedule times due are those in (last, now]: with `catchup: false`
 *   only the latest of them (the others are dropped, and counted), with
 *   `catchup: true` all of them, oldest first, at most CRON_CATCHUP_MAX
 *   per call (the rest on the next call).
 * - One time due (the normal case, and every case without catch-up):
 *   `overlap` decides when a run is going: skip drops it, queue runs it
 *   after the runs ahead of it, allow starts it beside them. With no run
 *   going, it starts.
 * - Several times due (catch-up after downtime): they are owed runs and
 *   all go to the queue, so that they run one after another, in order,
 *   whatever `overlap` says: a long downtime never starts a storm of runs
 *   at once.
 */
#ifndef DAGRUN_TRIGGER_H
#define DAGRUN_TRIGGER_H

#include <stddef.h>
#include <stdint.h>

#include "base/cron.h"
#include "dagfile/spec.h"

typedef enum trigger_action {
  TRIGGER_START, /* start a run for this time now */
  TRIGGER_QUEUE, /* start it when no run of the DAG is going */
  TRIGGER_SKIP   /* do not run it (overlap: skip) */
} trigger_action;

typedef struct trigger_decision {
  int64_t at; /* the schedule time (UTC seconds): the run's logical date */
  trigger_action action;
} trigger_decision;

typedef struct trigger_plan {
  trigger_decision *d; /* in schedule order; caller frees */
  size_t n;
  int64_t last;    /* the last schedule time handled: store it */
  size_t dropped;  /* catchup false: earlier due times not run */
  int more;        /* catch-up capped: call again for the rest */
} trigger_plan;

/* Plans the trigger at now. last is the last schedule time handled (the
 * daemon's first sight of a DAG records now as its last). Returns 0 with
 * *plan (plan->n may be 0: nothing due, plan->last == last), or a
 * negative DR_ code with err. */
int trigger_plan_at(const cron_expr *e, const cron_zone *z, int64_t last,
                    int64_t now, int catchup, spec_overlap overlap, int busy,
                    trigger_plan *plan, char *err, size_t errlen);

/* The rule above for one of n_due runs owed at once (a schedule's due
 * times, a data trigger's events): several are queued, one goes by
 * overlap when busy (a run of the DAG is going or queued). */
trigger_action trigger_decide(size_t n_due, int busy, spec_overlap overlap);

/* "start", "queue", "skip". */
const char *trigger_action_name(trigger_action a);

#endif /* DAGRUN_TRIGGER_H */
