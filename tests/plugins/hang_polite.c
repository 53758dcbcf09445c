/* Test plugin: loops with heartbeats until the task is cancelled, then
 * fails with "cancelled" and status 1. */
#define _POSIX_C_SOURCE 200809L
#include <dagrun/plugin.h>
#include <time.h>

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  host->log(ctx, DAGRUN_LOG_INFO, "hang_polite: waiting for cancel");
  while (!host->cancelled(ctx)) {
    host->heartbeat(ctx);
    struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  host->log(ctx, DAGRUN_LOG_WARN, "hang_polite: cancelled, stopping");
  host->fail(ctx, "cancelled");
  return 1;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "hang_polite",
                                   "1.0",
                                   "Waits for cancel with heartbeats (tests)",
                                   NULL,
                                   run,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
