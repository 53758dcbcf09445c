/* Test plugin: its constructor dereferences NULL (SIGSEGV). Loaded in
 * dagrun itself, it killed dagrun with status 139 and no word of which
 * plugin; described in a helper, it is one unusable stage, named. */
#include <dagrun/plugin.h>
#include <signal.h>
#include <stdint.h>

/* Read at run time, so the compiler cannot see the pointer is NULL. */
static volatile uintptr_t null_address = 0;

#if defined(__GNUC__)
__attribute__((no_sanitize("undefined")))
#endif
__attribute__((constructor)) static void
crash(void) {
  /* A sanitizer build's own SIGSEGV handler would turn the crash into
   * exit(1); the test wants the death by signal a user's build gives. */
  signal(SIGSEGV, SIG_DFL);
  volatile int *p = (volatile int *)null_address;
  *p = 42;
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  (void)ctx;
  (void)host;
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "ctor_segv",
                                   "1.0",
                                   "Crashes when loaded (tests)",
                                   NULL,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
