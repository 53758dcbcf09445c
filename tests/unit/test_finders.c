/*
 * test_finders: the decisions of the finder stages on given numbers, where
 * a machine's timings cannot make them flaky: batch_sweep's median timing
 * and its pick (trainkit.h: the smallest size unless a larger one is
 * faster by more than the margin), and lr_find's smoothing without lag.
 */
#include <math.h>

#include "common/trainkit.h"
#include "testlib.h"

static void test_median(void) {
  double odd[5] = {3, 1, 100, 2, 4}; /* one slow repeat: 100 */
  CHECK(trainkit_median(odd, 5) == 3);
  double even[4] = {4, 1, 3, 2};
  CHECK(trainkit_median(even, 4) == 2.5);
  CHECK(isnan(trainkit_median(even, 0)));
}

static void test_pick(void) {
  const double m = TRAINKIT_PICK_MARGIN;
  int all[6] = {1, 1, 1, 1, 1, 1};
  /* Micro-batch 1..16 on one machine, twice: sizes 4, 8 and 16 within
   * noise of each other. The smallest of them both times (the old rule,
   * the largest within 5% of the best, picked 16, then 8). */
  double run1[5] = {1000, 1900, 3000, 3050, 2900};
  double run2[5] = {1000, 1900, 3000, 3060, 2890};
  CHECK_INT(trainkit_pick_batch(run1, all, 5, m), 2);
  CHECK_INT(trainkit_pick_batch(run2, all, 5, m), 2);
  /* Clearly faster (more than 5%) is taken, step by step up the sizes. */
  double up[4] = {1000, 1060, 1100, 1200};
  CHECK_INT(trainkit_pick_batch(up, all, 4, m), 3);
  /* Exactly 5% faster is not more than 5%. */
  double edge[2] = {1000, 1050};
  CHECK_INT(trainkit_pick_batch(edge, all, 2, m), 0);
  /* Slower larger sizes never win. */
  double down[3] = {2000, 1500, 1000};
  CHECK_INT(trainkit_pick_batch(down, all, 3, m), 0);
  /* Ineligible rows (unstable, above the target batch) are skipped. */
  int some[4] = {0, 1, 1, 0};
  double mixed[4] = {5000, 1000, 1040, 9000};
  CHECK_INT(trainkit_pick_batch(mixed, some, 4, m), 1);
  int none[2] = {0, 0};
  CHECK_INT(trainkit_pick_batch(mixed, none, 2, m), -1);
}

/* A loss with its minimum at point 100 of 200 (a parabola): the forward
 * average's minimum trails it by tens of points (lr_find's min_loss_lr
 * was that lag, a factor ~100 in lr); the unlagged one is on it. */
static void test_unlagged(void) {
  enum { N = 200 };
  double y[N], fwd[N], un[N];
  double avg = 0;
  for (int i = 0; i < N; i++) {
    y[i] = 5 + (i - 100) * (i - 100) / 1000.0 + ((i % 2) ? 0.05 : -0.05);
    avg = 0.98 * avg + 0.02 * y[i];
    fwd[i] = avg / (1 - pow(0.98, i + 1));
  }
  trainkit_smooth_unlagged(y, N, 0.98, un);
  int kf = 0, ku = 0;
  for (int i = 1; i < N; i++) {
    kf = fwd[i] < fwd[kf] ? i : kf;
    ku = un[i] < un[ku] ? i : ku;
  }
  CHECK(kf > 120);
  CHECK(ku >= 95 && ku <= 105);
  /* A constant stays itself; no smoothing is the data. */
  double c[3] = {2, 2, 2}, out[3];
  trainkit_smooth_unlagged(c, 3, 0.98, out);
  CHECK(fabs(out[0] - 2) < 1e-12 && fabs(out[2] - 2) < 1e-12);
  trainkit_smooth_unlagged(y, N, 0, un);
  CHECK(fabs(un[0] - y[0]) < 1e-9 && fabs(un[100] - y[100]) < 1e-9);
}

int main(void) {
  test_unlagged();
  test_median();
  test_pick();
  TEST_DONE();
}
