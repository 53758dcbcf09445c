/* Test plugin: claims plugin ABI 1.99. A newer minor may call host
 * members this dagrun lacks, so the loader must refuse it. */
#include <dagrun/plugin.h>

static int run(dagrun_ctx *ctx, const dagrun_host *host) { return 0; }

static const dagrun_stage stage = {sizeof(dagrun_stage),
                                   (1u << 16) | 99u,
                                   "abi_newer_minor",
                                   "1.0",
                                   "Built for ABI 1.99 (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
