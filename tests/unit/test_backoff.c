/* The retry backoff schedule: exponential, capped, jitter only shortens. */
#include "run/scheduler.h"
#include "testlib.h"

int main(void) {
  spec_retry r = {0};
  r.retries = 10;
  r.delay_s = 10;
  r.backoff = 2;
  r.max_delay_s = 60;
  r.jitter = 0;
  CHECK_NEAR(sched_retry_delay(&r, 1, 0.5), 10, 1e-9);
  CHECK_NEAR(sched_retry_delay(&r, 2, 0.5), 20, 1e-9);
  CHECK_NEAR(sched_retry_delay(&r, 3, 0.5), 40, 1e-9);
  CHECK_NEAR(sched_retry_delay(&r, 4, 0.5), 60, 1e-9); /* capped */
  CHECK_NEAR(sched_retry_delay(&r, 9, 0.5), 60, 1e-9);

  /* Constant delay with backoff 1. */
  r.backoff = 1;
  CHECK_NEAR(sched_retry_delay(&r, 5, 0.9), 10, 1e-9);

  /* Jitter 0.25 removes up to a quarter: u=0 keeps it all, u->1 removes
   * a quarter, never more, never adds. */
  r.backoff = 3;
  r.jitter = 0.25;
  CHECK_NEAR(sched_retry_delay(&r, 2, 0.0), 30, 1e-9);
  CHECK_NEAR(sched_retry_delay(&r, 2, 0.5), 26.25, 1e-9);
  CHECK_NEAR(sched_retry_delay(&r, 2, 0.999999), 22.5, 1e-4);
  for (int k = 1; k < 8; k++) {
    double d = sched_retry_delay(&r, k, 0.7);
    CHECK(d <= 60 && d >= 45 * 0.75 - 1e-9 ? 1 : k <= 2);
  }
  TEST_DONE();
}
