/*
 * trigger: what a DAG's cron trigger does when it wakes up; the rules
 * (overlap, catch-up) are in trigger.h.
 */
#include "trigger.h"

#include <stdlib.h>

#include "base/util.h"

const char *trigger_action_name(trigger_action a) {
  return a == TRIGGER_START ? "start" : a == TRIGGER_QUEUE ? "queue" : "skip";
}

trigger_action trigger_decide(size_t n_due, int busy, spec_overlap overlap) {
  if (n_due > 1)
    return TRIGGER_QUEUE;
  if (!busy || overlap == SPEC_OVERLAP_ALLOW)
    return TRIGGER_START;
  return overlap == SPEC_OVERLAP_QUEUE ? TRIGGER_QUEUE : TRIGGER_SKIP;
}

/* How many schedule times there are in (last, now], when there are few:
 * counted for `dropped` up to a bound, so that a long downtime of a
 * minutely job costs little. */
static size_t count_due(const cron_expr *e, const cron_zone *z, int64_t last,
                        int64_t now) {
  enum { COUNT_BOUND = 100000 };
  size_t n = 0;
  int64_t t = last, f;
  char err[128];
  while (n < COUNT_BOUND && cron_next(e, z, t, &f, err, sizeof err) == 0 &&
         f <= now) {
    n++;
    t = f;
  }
  return n;
}

int trigger_plan_at(const cron_expr *e, const cron_zone *z, int64_t last,
                    int64_t now, int catchup, spec_overlap overlap, int busy,
                    trigger_plan *plan, char *err, size_t errlen) {
  plan->d = NULL;
  plan->n = 0;
  plan->last = last;
  plan->dropped = 0;
  plan->more = 0;
  int64_t *due = xmalloc(CRON_CATCHUP_MAX * sizeof *due);
  size_t n = 0;
  int rc = cron_due(e, z, last, now, catchup, due, CRON_CATCHUP_MAX, &n,
                    &plan->more, err, errlen);
  if (rc != 0 || n == 0) {
    free(due);
    return rc;
  }
  if (!catchup) {
    size_t all = count_due(e, z, last, now);
    plan->dropped = all > 0 ? all - 1 : 0;
  }
  plan->d = xcalloc(n, sizeof *plan->d);
  for (size_t i = 0; i < n; i++) {
    plan->d[i].at = due[i];
    plan->d[i].action = trigger_decide(n, busy, overlap);
  }
  plan->n = n;
  plan->last = due[n - 1];
  free(due);
  return 0;
}
