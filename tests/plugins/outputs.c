/* Test plugin: sets one output (key=value), one metric and progress. */
#include <dagrun/plugin.h>

static const dagrun_param_spec params[] = {
    {"key", DAGRUN_PARAM_STRING, "answer", 0, "Output key"},
    {"value", DAGRUN_PARAM_STRING, "42", 0, "Output value"},
    {NULL, 0, NULL, 0, NULL},
};

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  const char *key = "answer", *value = "42";
  host->param_string(ctx, "key", &key);
  host->param_string(ctx, "value", &value);
  host->progress(ctx, 0.5, "half way");
  host->metric(ctx, "loss", 2.5, 7);
  if (host->output(ctx, key, value) != 0) {
    host->fail(ctx, "outputs: key '%s' refused", key);
    return 1;
  }
  host->progress(ctx, 1.0, NULL);
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "outputs",
                                   "1.0",
                                   "Sets an output, a metric, progress (tests)",
                                   params,
                                   run,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
