/*
 * rundir: the run directory, runs/<dag>/<run-id>/, and its paths.
 *
 *   run.json                   the run as resolved: tasks, states, times
 *   <task>/attempt-<n>/log     stdout+stderr of the attempt
 *   <task>/attempt-<n>/attempt.json   what the worker was given
 *   <task>/out/                outputs, stable across attempts
 *   <task>/outputs.json        key/value outputs of the successful attempt
 *   <task>/metrics.jsonl       one JSON object per metric event
 *
 * Single-threaded.
 */
#ifndef DAGRUN_RUNDIR_H
#define DAGRUN_RUNDIR_H

#include <stddef.h>

typedef struct rundir {
  char *path;     /* <base>/<dag>/<id>, absolute */
  char *id;       /* e.g. 20261121T135327Z-3fa9 */
  char *date;     /* UTC date of the start, YYYY-MM-DD */
  double started; /* wall clock */
} rundir;

/* Creates a new, uniquely named run directory under base (created if
 * needed). Returns 0 with *out (free with rundir_destroy) or DR_EIO with a
 * message in err. */
int rundir_create(const char *base, const char *dag, rundir **out, char *err,
                  size_t errlen);
/* An existing run directory (a run being resumed): its absolute path, id
 * and start time as recorded. Returns 0 with *out, or DR_ENOENT with a
 * message in err when the directory is gone. */
int rundir_open(const char *path, const char *id, double started,
                rundir **out, char *err, size_t errlen);
void rundir_destroy(rundir *r);

/* Paths; caller frees. */
char *rundir_task(const rundir *r, const char *task);
char *rundir_out(const rundir *r, const char *task);
char *rundir_attempt(const rundir *r, const char *task, int attempt);

#endif /* DAGRUN_RUNDIR_H */
