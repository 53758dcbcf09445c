/* Test plugin: takes `seconds`, reporting progress every 50 ms; stops
 * early (status 1, "cancelled") when the task is cancelled. */
#define _POSIX_C_SOURCE 200809L
#include <dagrun/plugin.h>
#include <stdio.h>
#include <time.h>

static const dagrun_param_spec params[] = {
    {"seconds", DAGRUN_PARAM_FLOAT, "1", 0, "How long to run"},
    {NULL, 0, NULL, 0, NULL},
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  double seconds = 1;
  host->param_float(ctx, "seconds", &seconds);
  double t0 = now(), elapsed;
  while ((elapsed = now() - t0) < seconds) {
    if (host->cancelled(ctx)) {
      host->fail(ctx, "cancelled after %.2fs of %.2fs", elapsed, seconds);
      return 1;
    }
    char msg[64];
    snprintf(msg, sizeof(msg), "%.1fs of %.1fs", elapsed, seconds);
    host->progress(ctx, elapsed / seconds, msg);
    struct timespec t = {0, 50 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  host->progress(ctx, 1.0, "done");
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "slow",
                                   "1.0",
                                   "Sleeps with progress, honours cancel "
                                   "(tests)",
                                   params,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
