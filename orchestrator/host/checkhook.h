/*
 * checkhook: a stage's own check of its tasks (plugin.h's
 * dagrun_stage.check, ABI 1.2), for `dagrun check` and so for `run` and
 * `serve`, which check first. dagrun never loads a stage itself
 * (describe.h), so the check runs in a helper, `dagrun-worker __check
 * FILE`, one for all of a file's tasks: it reads their params as JSON on
 * its stdin, loads the file (loader_open), calls the stage's check for
 * each and writes the answers as JSON on its stdout.
 *
 * The protocol: stdin [{"world_size": N, "params": {NAME: value, ...},
 * "deferred": [NAME, ...]}, ...] (params_build's values, defaults
 * included; deferred the params whose values wait for run time);
 * stdout [{"error": "..." or null, "param": "..." or null}, ...], one a
 * task, in order.
 *
 * What the parent makes of a helper that fails (P the file): "P: its
 * check crashed (SIG...)", "P: its check did not answer within N s
 * (DAGRUN_DESCRIBE_TIMEOUT sets the limit)", "P: its check exited with
 * status S", "P: its check's answer is not readable", "P: cannot start
 * HELPER: WHY", "P: cannot be checked: dagrun-worker, its helper, is
 * missing".
 *
 * Single-threaded, as describe.h.
 */
#ifndef DAGRUN_CHECKHOOK_H
#define DAGRUN_CHECKHOOK_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* One task to check. */
typedef struct checkhook_task {
  int world_size;
  const cJSON *params;   /* borrowed: params_build's object */
  const cJSON *deferred; /* borrowed: an array of names, or NULL */
} checkhook_task;

/* A stage's answer about one task. */
typedef struct checkhook_answer {
  char *error; /* NULL: fine; caller frees */
  char *param; /* the param it is about, or NULL; caller frees */
} checkhook_answer;

/* Checks tasks[0..n) with the stage in path, by the dagrun-worker
 * installed with dagrun; answers into res[0..n) (zeroed first). 0, or -1
 * with why the helper gave no answer in err (above). */
int checkhook_run(const char *path, const checkhook_task *tasks, size_t n,
                  checkhook_answer *res, char *err, size_t errlen);

/* The same with a given helper and limit (seconds). For tests. */
int checkhook_run_with(const char *helper, double limit, const char *path,
                       const checkhook_task *tasks, size_t n,
                       checkhook_answer *res, char *err, size_t errlen);

/* The helper's side: reads the tasks from stdin, checks them with the
 * stage in path, writes the answers; the exit status. Only
 * dagrun-worker's main() calls it (and _exits with it). */
int checkhook_main(const char *path);

#endif /* DAGRUN_CHECKHOOK_H */
