/* Test plugin for retries: fails fail_times times with exit_code, then
 * succeeds. The count of runs so far lives in counter_file, so it
 * survives from one attempt (process) to the next. */
#include <dagrun/plugin.h>
#include <inttypes.h>
#include <stdio.h>

static const dagrun_param_spec params[] = {
    {"counter_file", DAGRUN_PARAM_STRING, NULL, 1,
     "File holding the number of runs so far"},
    {"fail_times", DAGRUN_PARAM_INT, "2", 0,
     "Runs that fail before one passes"},
    {"exit_code", DAGRUN_PARAM_INT, "3", 0, "Status of a failing run"},
    {NULL, 0, NULL, 0, NULL},
};

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  const char *path;
  int64_t fail_times = 2, exit_code = 3, runs = 0;
  if (host->param_string(ctx, "counter_file", &path) != 0) {
    host->fail(ctx, "flaky: counter_file is required");
    return 2;
  }
  host->param_int(ctx, "fail_times", &fail_times);
  host->param_int(ctx, "exit_code", &exit_code);

  FILE *f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%" SCNd64, &runs) != 1)
      runs = 0;
    fclose(f);
  }
  runs++;
  f = fopen(path, "w");
  if (!f || fprintf(f, "%" PRId64 "\n", runs) < 0 || fclose(f) != 0) {
    host->fail(ctx, "flaky: cannot write %s", path);
    return 2;
  }
  if (runs <= fail_times) {
    host->fail(ctx, "flaky: failure %" PRId64 " of %" PRId64 " (on purpose)",
               runs, fail_times);
    return (int)exit_code;
  }
  host->log(ctx, DAGRUN_LOG_INFO, "flaky: run %" PRId64 " succeeds", runs);
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "flaky",
                                   "1.0",
                                   "Fails N times, then succeeds (tests)",
                                   params,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
