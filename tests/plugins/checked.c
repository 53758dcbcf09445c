/* Test plugin: a stage with a check of its own (plugin.h's check, ABI
 * 1.2): n must divide the task's world_size (refused at n's value);
 * n 7 is refused at world_size, n 9 at the task; crash: true crashes
 * the check (SIGSEGV), hang: true makes it hang, as a stage's bugs
 * would. */
#include <dagrun/plugin.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const dagrun_param_spec params[] = {
    {"n", DAGRUN_PARAM_INT, "1", 0, "Must divide world_size"},
    {"crash", DAGRUN_PARAM_BOOL, "false", 0, "Crash in the check"},
    {"hang", DAGRUN_PARAM_BOOL, "false", 0, "Hang in the check"},
    {NULL, 0, NULL, 0, NULL},
};

static int run(dagrun_ctx *ctx, const dagrun_host *host) { return 0; }

static int check(const dagrun_check_task *t, const char **param, char *err,
                 size_t errlen) {
  const char *crash = t->param(t, "crash", NULL);
  const char *hang = t->param(t, "hang", NULL);
  if (crash && strcmp(crash, "true") == 0)
    raise(SIGSEGV);
  while (hang && strcmp(hang, "true") == 0)
    pause();
  int deferred = 0;
  const char *z = t->param(t, "n", &deferred);
  if (!z)
    return deferred ? 0 : 1;
  long n = strtol(z, NULL, 10);
  if (n == 7 || n == 9) {
    *param = n == 7 ? "world_size" : NULL;
    snprintf(err, errlen, "n %ld is refused (world_size %d)", n, t->world_size);
    return 1;
  }
  if (n < 1 || t->world_size % n != 0) {
    *param = "n";
    snprintf(err, errlen, "n %ld does not divide world_size %d", n,
             t->world_size);
    return 1;
  }
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "checked",
                                   "1.0",
                                   "Refuses an n that does not divide "
                                   "world_size, at check time (tests)",
                                   params,
                                   run,
                                   NULL,
                                   check};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
