/* Test plugin: its constructor calls exit(0), as a library that "helps"
 * by ending the process might. Loading it in dagrun itself made `dagrun
 * run` exit 0 having run and recorded nothing; described in a helper, it
 * is one unusable stage, named. Never loaded by a worker in the tests. */
#include <dagrun/plugin.h>
#include <stdlib.h>

__attribute__((constructor)) static void leave(void) { exit(0); }

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  (void)ctx;
  (void)host;
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "ctor_exit",
                                   "1.0",
                                   "Exits 0 when loaded (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
