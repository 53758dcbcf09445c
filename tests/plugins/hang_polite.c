/* Test plugin: sends metrics first (metrics: N, "loss" of steps 1..N),
 * then loops with heartbeats until the task is cancelled, sends one more
 * metric (step N+1) when after is true, and fails with "cancelled" and
 * status 1. */
#define _POSIX_C_SOURCE 200809L
#include <dagrun/plugin.h>
#include <stdint.h>
#include <time.h>

static const dagrun_param_spec params[] = {
    {"metrics", DAGRUN_PARAM_INT, "0", 0, "Metrics sent before waiting"},
    {"after", DAGRUN_PARAM_BOOL, "false", 0, "One more metric once cancelled"},
    {NULL, 0, NULL, 0, NULL},
};

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  int64_t n = 0;
  int after = 0;
  host->param_int(ctx, "metrics", &n);
  host->param_bool(ctx, "after", &after);
  for (int64_t s = 1; s <= n; s++)
    host->metric(ctx, "loss", 10.0 / (double)s, s);
  host->log(ctx, DAGRUN_LOG_INFO, "hang_polite: waiting for cancel");
  while (!host->cancelled(ctx)) {
    host->heartbeat(ctx);
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  if (after)
    host->metric(ctx, "loss", 10.0 / (double)(n + 1), n + 1);
  host->log(ctx, DAGRUN_LOG_WARN, "hang_polite: cancelled, stopping");
  host->fail(ctx, "cancelled");
  return 1;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "hang_polite",
                                   "1.0",
                                   "Waits for cancel with heartbeats (tests)",
                                   params,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
