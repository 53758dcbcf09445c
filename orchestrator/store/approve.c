#include "approve.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/util.h"
#include "history.h"
#include "lib/clock.h"
#include "lib/exitcode.h"

int approve_decide(store *st, const char *run_prefix, const char *task,
                   const store_approval *a, char **run_id, char *err,
                   size_t errlen) {
  *run_id = NULL;
  int rc;
  /* store_run first records a run whose dagrun is gone as interrupted. */
  cJSON *run = store_run(st, run_prefix, &rc, err, errlen);
  if (!run)
    return rc;
  *run_id = xstrdup(cJSON_GetStringValue(cJSON_GetObjectItem(run, "id")));
  const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(run, "state"));
  if (!store_state_active(state)) {
    snprintf(err, errlen,
             "run %s is not running (it is %s): nothing waits for an "
             "approval%s",
             *run_id, state ? state : "?",
             state && strcmp(state, "interrupted") == 0
                 ? "; `dagrun resume` asks again"
                 : "");
    rc = DR_EINVAL;
  } else {
    rc = store_approval_decide(st, *run_id, task, a, clock_wall(), err, errlen);
  }
  cJSON_Delete(run);
  return rc;
}

static const char approve_usage[] = "usage: dagrun approve RUN TASK";
static const char reject_usage[] =
    "usage: dagrun reject RUN TASK [--reason TEXT]";

static int decide_cmd(int argc, char **argv, const char *decision) {
  const char *pos[2] = {NULL, NULL}, *reason = NULL;
  int npos = 0, reject = strcmp(decision, "rejected") == 0;
  const char *usage = reject ? reject_usage : approve_usage;
  for (int i = 0; i < argc; i++) {
    if (reject && strcmp(argv[i], "--reason") == 0 && i + 1 < argc)
      reason = argv[++i];
    else if (argv[i][0] == '-' || npos == 2)
      return cli_usage_error("%s", usage);
    else
      pos[npos++] = argv[i];
  }
  if (npos != 2)
    return cli_usage_error("%s", usage);
  store *st;
  cJSON *rec;
  int code = history_open_run(pos[0], &st, &rec);
  if (code != 0)
    return code;
  const struct passwd *pw = getpwuid(getuid());
  const char *who = pw && pw->pw_name ? pw->pw_name : getenv("USER");
  store_approval a = {decision, who ? who : "unknown", "cli", reason};
  char err[1024], *run_id = NULL;
  int rc =
      approve_decide(st, cJSON_GetStringValue(cJSON_GetObjectItem(rec, "id")),
                     pos[1], &a, &run_id, err, sizeof err);
  if (rc == 0)
    printf("task %s of run %s %s\n", pos[1], run_id, decision);
  else if (rc == 1)
    printf("task %s of run %s was already %s\n", pos[1], run_id, decision);
  else
    fprintf(stderr, "dagrun: %s\n", err);
  free(run_id);
  cJSON_Delete(rec);
  store_close(st);
  return rc >= 0 ? 0 : EXIT_FAILED;
}

int approve_cmd_approve(int argc, char **argv) {
  return decide_cmd(argc, argv, "approved");
}

int approve_cmd_reject(int argc, char **argv) {
  return decide_cmd(argc, argv, "rejected");
}
