/* Test plugin: calls abort() (SIGABRT, status 134). */
#include <dagrun/plugin.h>
#include <stdlib.h>

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  host->log(ctx, DAGRUN_LOG_INFO, "abort: calling abort()");
  abort();
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "abort",
                                   "1.0",
                                   "Calls abort() (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
