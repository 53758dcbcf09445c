/* Test plugin: its constructor never returns (it waits for a signal that
 * never comes, and ignores SIGTERM). Loaded in dagrun itself, it hung
 * dagrun; described in a helper, the helper is killed at the describe
 * time limit and the stage is unusable, named. */
#include <dagrun/plugin.h>
#include <signal.h>
#include <unistd.h>

__attribute__((constructor)) static void hang(void) {
  signal(SIGTERM, SIG_IGN);
  for (;;)
    pause();
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  (void)ctx;
  (void)host;
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "ctor_hang",
                                   "1.0",
                                   "Hangs when loaded (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
