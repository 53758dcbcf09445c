/*
 * trigger: the cron trigger's decisions with a fake clock: nothing due
 * before the schedule time; one time due started, skipped, queued or
 * started beside a running run by `overlap`; downtime with and without
 * catch-up (the latest only and the count dropped; every missed time,
 * queued in order whatever `overlap` says); the catch-up cap; the DST gap.
 * Then a simulated day of a daemon that ticks every minute, with runs
 * longer than the schedule's period, for each overlap policy: what ran,
 * when, and whether runs overlapped.
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "serve/trigger.h"
#include "testlib.h"

static cron_expr *expr(const char *s) {
  cron_expr *e;
  char err[128];
  CHECK_INT(cron_parse(s, &e, NULL, err, sizeof err), 0);
  return e;
}

static trigger_plan plan_at(const cron_expr *e, const cron_zone *z,
                            int64_t last, int64_t now, int catchup,
                            spec_overlap ov, int busy) {
  trigger_plan p;
  char err[128];
  CHECK_INT(trigger_plan_at(e, z, last, now, catchup, ov, busy, &p, err,
                            sizeof err),
            0);
  return p;
}

static void test_one_due(void) {
  cron_expr *e = expr("*/10 * * * *");
  cron_zone *z;
  char err[128];
  CHECK_INT(cron_zone_open("UTC", &z, err, sizeof err), 0);
  int64_t t0 = test_utc("2026-11-21T00:00:00");
  /* Before the next schedule time: nothing, last unchanged. */
  trigger_plan p = plan_at(e, z, t0, t0 + 599, 0, SPEC_OVERLAP_SKIP, 0);
  CHECK_INT((int)p.n, 0);
  CHECK(p.last == t0);
  free(p.d);
  /* At it: started when nothing runs, whatever the policy. */
  for (int ov = 0; ov < 3; ov++) {
    p = plan_at(e, z, t0, t0 + 600, 0, (spec_overlap)ov, 0);
    CHECK_INT((int)p.n, 1);
    CHECK(p.d[0].at == t0 + 600 && p.last == t0 + 600);
    CHECK_INT(p.d[0].action, TRIGGER_START);
    free(p.d);
  }
  /* While a run is going: skip, queue, allow. */
  p = plan_at(e, z, t0, t0 + 601, 0, SPEC_OVERLAP_SKIP, 1);
  CHECK_INT(p.d[0].action, TRIGGER_SKIP);
  CHECK(p.last == t0 + 600); /* a skipped time is handled all the same */
  free(p.d);
  p = plan_at(e, z, t0, t0 + 601, 0, SPEC_OVERLAP_QUEUE, 1);
  CHECK_INT(p.d[0].action, TRIGGER_QUEUE);
  free(p.d);
  p = plan_at(e, z, t0, t0 + 601, 0, SPEC_OVERLAP_ALLOW, 1);
  CHECK_INT(p.d[0].action, TRIGGER_START);
  free(p.d);
  cron_destroy(e);
  cron_zone_close(z);
}

static void test_downtime(void) {
  cron_expr *e = expr("*/10 * * * *");
  cron_zone *z;
  char err[128];
  CHECK_INT(cron_zone_open(NULL, &z, err, sizeof err), 0);
  int64_t t0 = test_utc("2026-11-21T00:00:00");
  int64_t now = test_utc("2026-11-21T01:05:00");
  /* Down from 00:00 to 01:05: six times missed (00:10 ... 01:00). */
  trigger_plan p = plan_at(e, z, t0, now, 0, SPEC_OVERLAP_SKIP, 0);
  CHECK_INT((int)p.n, 1);
  CHECK(p.d[0].at == test_utc("2026-11-21T01:00:00"));
  CHECK_INT(p.d[0].action, TRIGGER_START);
  CHECK_INT((int)p.dropped, 5);
  CHECK(p.last == p.d[0].at);
  free(p.d);
  p = plan_at(e, z, t0, now, 0, SPEC_OVERLAP_SKIP, 1);
  CHECK_INT(p.d[0].action, TRIGGER_SKIP);
  free(p.d);
  /* Catch-up: all six, in order, queued even with allow (no storm). */
  for (int ov = 0; ov < 3; ov++) {
    p = plan_at(e, z, t0, now, 1, (spec_overlap)ov, 0);
    CHECK_INT((int)p.n, 6);
    CHECK_INT((int)p.dropped, 0);
    for (size_t i = 0; i < p.n; i++) {
      CHECK(p.d[i].at == t0 + 600 * (int64_t)(i + 1));
      CHECK_INT(p.d[i].action, TRIGGER_QUEUE);
    }
    CHECK(p.last == test_utc("2026-11-21T01:00:00"));
    CHECK(!p.more);
    free(p.d);
  }
  cron_destroy(e);
  /* The cap: 2000 minutes down with a minutely job, caught up 1000 at a
   * time, nothing lost or repeated. */
  e = expr("* * * * *");
  p = plan_at(e, z, t0, t0 + 2000 * 60, 1, SPEC_OVERLAP_QUEUE, 0);
  CHECK_INT((int)p.n, CRON_CATCHUP_MAX);
  CHECK(p.more);
  CHECK(p.last == t0 + 1000 * 60);
  free(p.d);
  p = plan_at(e, z, t0 + 1000 * 60, t0 + 2000 * 60, 1, SPEC_OVERLAP_QUEUE, 0);
  CHECK_INT((int)p.n, 1000);
  CHECK(p.d[0].at == t0 + 1001 * 60 && p.last == t0 + 2000 * 60);
  free(p.d);
  cron_destroy(e);
  cron_zone_close(z);
}

static void test_dst(void) {
  /* 02:30 every day in New York; the daemon down over the spring-forward
   * night: 2026-03-08's run is due at 03:00 EDT (07:00Z). */
  cron_expr *e = expr("30 2 * * *");
  cron_zone *z;
  char err[128];
  CHECK_INT(cron_zone_open("America/New_York", &z, err, sizeof err), 0);
  trigger_plan p = plan_at(e, z, test_utc("2026-03-07T07:30:00"),
                           test_utc("2026-03-09T12:00:00"), 1, SPEC_OVERLAP_SKIP, 0);
  CHECK_INT((int)p.n, 2);
  CHECK(p.d[0].at == test_utc("2026-03-08T07:00:00"));
  CHECK(p.d[1].at == test_utc("2026-03-09T06:30:00"));
  free(p.d);
  cron_destroy(e);
  cron_zone_close(z);
}

/* A daemon on a fake clock: ticks every minute for 3 hours; the DAG runs
 * every 10 minutes and each run takes 25 minutes. Queued times start when
 * no run is going, as dagrun serve does. Returns the number of runs
 * started; *max_at_once is the most runs going at one time. */
static int simulate(spec_overlap ov, int catchup, int64_t *starts,
                    int *max_at_once) {
  cron_expr *e = expr("*/10 * * * *");
  cron_zone *z;
  char err[128];
  CHECK_INT(cron_zone_open(NULL, &z, err, sizeof err), 0);
  int64_t t0 = test_utc("2026-11-21T00:00:00"), last = t0;
  int64_t ends[64];
  int n_runs = 0, going = 0;
  int64_t queue[64];
  int nq = 0;
  *max_at_once = 0;
  for (int64_t now = t0 + 60; now <= t0 + 3 * 3600; now += 60) {
    going = 0;
    for (int i = 0; i < n_runs; i++)
      going += ends[i] > now;
    trigger_plan p = plan_at(e, z, last, now, catchup, ov, going > 0);
    last = p.last;
    for (size_t i = 0; i < p.n; i++) {
      if (p.d[i].action == TRIGGER_START) {
        starts[n_runs] = now;
        ends[n_runs++] = now + 25 * 60;
        going++;
      } else if (p.d[i].action == TRIGGER_QUEUE) {
        queue[nq++] = p.d[i].at;
      }
    }
    free(p.d);
    if (nq > 0 && going == 0) {
      starts[n_runs] = now;
      ends[n_runs++] = now + 25 * 60;
      going++;
      for (int i = 1; i < nq; i++)
        queue[i - 1] = queue[i];
      nq--;
    }
    if (going > *max_at_once)
      *max_at_once = going;
  }
  cron_destroy(e);
  cron_zone_close(z);
  return n_runs;
}

static void test_simulated_day(void) {
  int64_t starts[64];
  int most;
  int64_t t0 = test_utc("2026-11-21T00:00:00");
  /* skip: 00:10 runs to 00:35; 00:20 and 00:30 skipped; 00:40 runs ...
   * one run at a time, every 30 minutes. */
  int n = simulate(SPEC_OVERLAP_SKIP, 0, starts, &most);
  CHECK_INT(n, 6);
  CHECK_INT(most, 1);
  for (int i = 0; i < n; i++)
    CHECK(starts[i] == t0 + 600 + 1800 * i);
  /* queue: every time runs, one after another (each 25 minutes after the
   * previous start): 18 times due, 7 started in 3 hours (00:10 to
   * 02:40), never two at once. */
  n = simulate(SPEC_OVERLAP_QUEUE, 0, starts, &most);
  CHECK_INT(n, 7);
  CHECK_INT(most, 1);
  for (int i = 1; i < n; i++)
    CHECK(starts[i] - starts[i - 1] == 25 * 60);
  /* allow: every time runs at its time; three at once. */
  n = simulate(SPEC_OVERLAP_ALLOW, 0, starts, &most);
  CHECK_INT(n, 18);
  CHECK_INT(most, 3);
}

int main(void) {
  test_one_due();
  test_downtime();
  test_dst();
  test_simulated_day();
  TEST_DONE();
}
