/* Test plugin: each process that loads it appends what it is to the file
 * $DAGRUN_TEST_LOAD_LOG, one line: its second argument ("__describe" for
 * dagrun-worker's describe helper). test_plugin_describe counts the
 * helpers `dagrun serve` starts to describe it. */
#include <dagrun/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void log_load(void) {
  const char *log = getenv("DAGRUN_TEST_LOAD_LOG");
  if (!log)
    return;
  char cmd[4096] = "";
  FILE *f = fopen("/proc/self/cmdline", "r");
  size_t n = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0;
  if (f)
    fclose(f);
  cmd[n] = 0;
  const char *arg1 = cmd + strlen(cmd) + 1; /* argv[1], or "" */
  FILE *out = fopen(log, "a");
  if (out) {
    fprintf(out, "%s\n", arg1 < cmd + n ? arg1 : "");
    fclose(out);
  }
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  (void)ctx;
  (void)host;
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "load_log",
                                   "1.0",
                                   "Logs each process that loads it (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
