/* Test plugin: prints a line, then dereferences NULL (SIGSEGV). The
 * attempt must end with status 139 while the orchestrator carries on. */
#include <dagrun/plugin.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

/* Read at run time, so the compiler cannot see the pointer is NULL. */
static volatile uintptr_t null_address = 0;

#if defined(__GNUC__)
__attribute__((no_sanitize("undefined")))
#endif
static int
run(dagrun_ctx *ctx, const dagrun_host *host) {
  printf("segv: about to dereference NULL\n");
  fflush(stdout);
  /* A sanitizer build installs its own SIGSEGV handler, which would turn
   * the crash into exit(1); the tests need the real death by signal. */
  signal(SIGSEGV, SIG_DFL);
  volatile int *p = (volatile int *)null_address;
  *p = 42;
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "segv",
                                   "1.0",
                                   "Crashes with SIGSEGV (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
