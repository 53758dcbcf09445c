/* Test plugin: claims plugin ABI 2.0; the loader must refuse it. */
#include <dagrun/plugin.h>

static int run(dagrun_ctx *ctx, const dagrun_host *host) { return 0; }

static const dagrun_stage stage = {sizeof(dagrun_stage),
                                   (2u << 16) | 0u,
                                   "abi2",
                                   "1.0",
                                   "Built for ABI 2.0 (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
