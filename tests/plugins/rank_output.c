/* Test plugin: each rank of a gang sets output rank=<DAGRUN_RANK> and a
 * metric and progress, so a test can tell whose outputs the task kept. */
#include <dagrun/plugin.h>

#include <stdlib.h>

static const dagrun_param_spec params[] = {
    {NULL, 0, NULL, 0, NULL},
};

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  const char *rank = getenv("DAGRUN_RANK");
  if (!rank)
    rank = "none";
  host->progress(ctx, 0.5, rank);
  host->metric(ctx, "rank", atof(rank), 1);
  if (host->output(ctx, "rank", rank) != 0) {
    host->fail(ctx, "rank_output: output refused");
    return 1;
  }
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "rank_output",
                                   "1.0",
                                   "Sets output rank=$DAGRUN_RANK (tests)",
                                   params,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
