/* Test plugin: hangs without a sign of life. It never calls progress,
 * heartbeat or cancelled, so only a heartbeat timeout, a task timeout and
 * SIGKILL after the grace period can end it. */
#define _POSIX_C_SOURCE 200809L
#include <dagrun/plugin.h>
#include <time.h>

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  for (;;) {
    struct timespec t = {1, 0};
    nanosleep(&t, NULL); /* returns early on SIGTERM; loop on regardless */
  }
  return 0; /* not reached */
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "hang",
                                   "1.0",
                                   "Hangs forever, ignoring cancel (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
