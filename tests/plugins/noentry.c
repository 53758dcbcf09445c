/* Test plugin: a shared object that exports no dagrun_stage_entry. */
#include <dagrun/plugin.h>

DAGRUN_EXPORT int noentry_something_else(void) { return 42; }
