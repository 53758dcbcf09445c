/* The trigger rules' verdicts (scheduler.h, "Trigger rules"), against
 * Airflow's documented meanings: when each rule runs a task, when it may
 * run before every upstream ended, and when it can no longer be met. */
#include "run/scheduler.h"
#include "testlib.h"

enum {
  W = SCHED_WAIT,
  R = SCHED_RUN,
  S = SCHED_SKIP,
  U = SCHED_UPSTREAM_FAILED
};

typedef struct row {
  spec_trigger rule;
  size_t n, done, ok, failed, skipped;
  int want;
} row;

int main(void) {
  static const row rows[] = {
      /* all_success: a failure decides at once, then a skip. */
      {SPEC_TRIGGER_ALL_SUCCESS, 3, 2, 2, 0, 0, W},
      {SPEC_TRIGGER_ALL_SUCCESS, 3, 3, 3, 0, 0, R},
      {SPEC_TRIGGER_ALL_SUCCESS, 3, 1, 0, 1, 0, U},
      {SPEC_TRIGGER_ALL_SUCCESS, 3, 1, 0, 0, 1, S},
      {SPEC_TRIGGER_ALL_SUCCESS, 3, 2, 0, 1, 1, U},
      /* all_done: only when all ended, however. */
      {SPEC_TRIGGER_ALL_DONE, 3, 2, 0, 2, 0, W},
      {SPEC_TRIGGER_ALL_DONE, 3, 3, 0, 2, 1, R},
      /* one_failed: at the first failure; skipped when none failed. */
      {SPEC_TRIGGER_ONE_FAILED, 3, 1, 0, 1, 0, R},
      {SPEC_TRIGGER_ONE_FAILED, 3, 2, 2, 0, 0, W},
      {SPEC_TRIGGER_ONE_FAILED, 3, 3, 2, 0, 1, S},
      /* one_success: at the first success; none: skipped if all were,
       * else upstream_failed. */
      {SPEC_TRIGGER_ONE_SUCCESS, 3, 1, 1, 0, 0, R},
      {SPEC_TRIGGER_ONE_SUCCESS, 3, 2, 0, 2, 0, W},
      {SPEC_TRIGGER_ONE_SUCCESS, 3, 3, 0, 2, 1, U},
      {SPEC_TRIGGER_ONE_SUCCESS, 3, 3, 0, 0, 3, S},
      /* none_failed: all ended, each a success or a skip. */
      {SPEC_TRIGGER_NONE_FAILED, 3, 3, 1, 0, 2, R},
      {SPEC_TRIGGER_NONE_FAILED, 3, 3, 0, 0, 3, R},
      {SPEC_TRIGGER_NONE_FAILED, 3, 2, 2, 0, 0, W},
      {SPEC_TRIGGER_NONE_FAILED, 3, 1, 0, 1, 0, U},
      /* none_failed_min_one_success: and one success. */
      {SPEC_TRIGGER_NONE_FAILED_MIN_ONE_SUCCESS, 3, 3, 1, 0, 2, R},
      {SPEC_TRIGGER_NONE_FAILED_MIN_ONE_SUCCESS, 3, 3, 0, 0, 3, S},
      {SPEC_TRIGGER_NONE_FAILED_MIN_ONE_SUCCESS, 3, 2, 0, 0, 2, W},
      {SPEC_TRIGGER_NONE_FAILED_MIN_ONE_SUCCESS, 3, 1, 0, 1, 0, U},
      /* all_failed: skipped at the first success or skip. */
      {SPEC_TRIGGER_ALL_FAILED, 2, 2, 0, 2, 0, R},
      {SPEC_TRIGGER_ALL_FAILED, 2, 1, 0, 1, 0, W},
      {SPEC_TRIGGER_ALL_FAILED, 2, 1, 1, 0, 0, S},
      {SPEC_TRIGGER_ALL_FAILED, 2, 1, 0, 0, 1, S},
      /* all_skipped: skipped at the first task that was not. */
      {SPEC_TRIGGER_ALL_SKIPPED, 2, 2, 0, 0, 2, R},
      {SPEC_TRIGGER_ALL_SKIPPED, 2, 1, 0, 0, 1, W},
      {SPEC_TRIGGER_ALL_SKIPPED, 2, 1, 1, 0, 0, S},
      {SPEC_TRIGGER_ALL_SKIPPED, 2, 1, 0, 1, 0, S},
      /* none_skipped: all ended, none skipped; failures are fine. */
      {SPEC_TRIGGER_NONE_SKIPPED, 2, 2, 1, 1, 0, R},
      {SPEC_TRIGGER_NONE_SKIPPED, 2, 1, 1, 0, 0, W},
      {SPEC_TRIGGER_NONE_SKIPPED, 2, 1, 0, 0, 1, S},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const row *r = &rows[i];
    int got = (int)sched_trigger_decide(r->rule, r->n, r->done, r->ok,
                                        r->failed, r->skipped);
    if (got != r->want)
      fprintf(stderr,
              "row %zu: %s n=%zu done=%zu ok=%zu failed=%zu "
              "skipped=%zu\n",
              i, spec_trigger_name(r->rule), r->n, r->done, r->ok, r->failed,
              r->skipped);
    CHECK_INT(got, r->want);
  }
  TEST_DONE();
}
