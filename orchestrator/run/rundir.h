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
  char *date;     /* UTC date of the run's logical date (a cron or
                     backfill run's schedule time), else of its start:
                     YYYY-MM-DD, ${run.date} */
  double started; /* wall clock */
} rundir;

/* A new run id for a run started at t (wall clock): the UTC time and 16
 * random bits, e.g. 20261121T135327Z-3fa9. Caller frees. */
char *rundir_new_id(double t);
/* Whether id may name a run: [A-Za-z0-9_.-]+, not starting with '.', at
 * most 128 bytes. */
int rundir_id_valid(const char *id);

/* Creates the run directory base/dag/<id> (base created if needed): id
 * given (`dagrun run --run-id`, dagrun serve) or, when NULL, a new unique
 * one. logical_date: the schedule time the run stands for, 0: none.
 * Returns 0 with *out (free with rundir_destroy), DR_EINVAL for a bad id,
 * DR_EEXIST when the given id exists, or DR_EIO; a message in err. */
int rundir_create(const char *base, const char *dag, const char *id,
                  double logical_date, rundir **out, char *err,
                  size_t errlen);
/* An existing run directory (a run being resumed): its absolute path, id,
 * start time and logical date (0: none) as recorded. Returns 0 with *out,
 * or DR_ENOENT with a message in err when the directory is gone. */
int rundir_open(const char *path, const char *id, double started,
                double logical_date, rundir **out, char *err, size_t errlen);
void rundir_destroy(rundir *r);

/* Paths; caller frees. */
char *rundir_task(const rundir *r, const char *task);
char *rundir_out(const rundir *r, const char *task);
char *rundir_attempt(const rundir *r, const char *task, int attempt);

#endif /* DAGRUN_RUNDIR_H */
