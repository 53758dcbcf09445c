/* Linked into every program and plugin of the sanitizer build
 * (-DDAGRUN_SANITIZE=ON, CMakeLists.txt): LeakSanitizer suppressions that
 * hold in every test, whatever LSAN_OPTIONS a test sets (a test's own
 * suppressions file, tests/lsan-mpi*.supp, adds to these).
 *
 * GetThreadStackTopAndBottom: the sanitizer runtime's own start of a
 * thread asks glibc for the thread's attributes (pthread_getattr_np, which
 * allocates the attributes' CPU set) and frees them a few instructions
 * later. A process that exits in that window, before the new thread's
 * stack is known to LeakSanitizer, is reported as leaking those 184
 * bytes: CI saw it once (2026-11-28, test_mp_layout) from a worker whose
 * stage took 1 ms, exiting while its detached pipe watcher
 * (orchestrator/host/worker.c) was starting. The frame is the runtime's,
 * never dagrun's: no allocation of ours passes through it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:GetThreadStackTopAndBottom\n";
}
