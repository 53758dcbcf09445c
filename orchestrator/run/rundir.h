/*
 * rundir: the run directory, runs/<dag>/<run-id>/, and its paths.
 *
 *   run.json                   the run as resolved: tasks, states, times
 *   <task>/attempt-<n>/log     stdout+stderr of the attempt
 *   <task>/attempt-<n>/attempt.json   what the worker was given
 *   <task>/out/                outputs, stable across attempts
 *   <task>/outputs.json        key/value outputs of the successful attempt
 *   <task>/metrics.jsonl       one JSON object per metric event
 *   .reserve                   while the run goes: RUNDIR_RESERVE_BYTES
 *                              held for its last records (rundir_reserve)
 *
 * Single-threaded.
 */
#ifndef DAGRUN_RUNDIR_H
#define DAGRUN_RUNDIR_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "dagfile/template.h"

typedef struct rundir {
  char *path; /* <base>/<dag>/<id>, absolute */
  char *id;   /* e.g. 20261121T135327Z-3fa9 */
  /* Logical time (rundir_set_time). The logical date is the time the run
   * stands for: a cron or backfill run's schedule time, `--logical-date`,
   * else the run's start. The data interval is [start, end): for a
   * scheduled or backfilled run the schedule's previous fire time and the
   * logical date; for any other run both are the logical date. Strings
   * are ISO 8601 with the DAG time zone's offset. */
  double logical_date, interval_start, interval_end;
  char *logical_iso, *interval_start_iso, *interval_end_iso;
  char *date;     /* the logical date's day in the DAG's time zone:
                     YYYY-MM-DD, ${run.date} */
  int has_interval; /* 1: a scheduled or backfilled run's interval */
  char *trigger;    /* what started it (store.h): manual, cron, api,
                       backfill; DAGRUN_TRIGGER */
  double started;   /* wall clock */
  /* What a data trigger gave the run (rundir_set_trigger_info), for
   * ${run.trigger_*}; "" for other runs. */
  char *trigger_files, *trigger_dataset, *trigger_dataset_version,
      *trigger_dataset_outputs;
  /* The outermost directory rundir_create made on the way to path (the
   * base, or base/<dag>), NULL when they were there: rundir_discard
   * takes them away again. */
  char *made;
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
/* Sets r's trigger (NULL: "manual") and logical time (see rundir) in time
 * zone tz (an IANA name; NULL: UTC): logical_date (0: the run's start), and interval_start, the data
 * interval's start (0: no interval; then start and end are the logical
 * date). rundir_create and rundir_open set it in UTC without an interval.
 * Returns 0, or DR_ENOENT for an unknown zone with a message in err. */
int rundir_set_time(rundir *r, const char *trigger, const char *tz,
                    double logical_date, double interval_start, char *err,
                    size_t errlen);
/* Sets r's ${run.trigger_*} from a data trigger's info (datastate.h's
 * run_triggers: {"files": [paths]} or {"dataset", "version", "outputs"});
 * info NULL: none (all ""). */
void rundir_set_trigger_info(rundir *r, const cJSON *info);
/* Sets te's run fields (${run.id}, ${run.date}, the logical time) to r's,
 * borrowed from r; r NULL leaves them NULL (deferred). */
void rundir_tmpl(const rundir *r, tmpl_env *te);
void rundir_destroy(rundir *r);
/* For a run refused before it started (a param that fails its check, a
 * store that cannot be opened): removes r's directory and those
 * rundir_create made for it (the base, base/<dag>), each only if empty,
 * so that a refused run leaves no trace. r is still to be destroyed. */
void rundir_discard(const rundir *r);

/* Space kept for a run's last records (the store's end of the run,
 * run.json, report.html): a task that fills the disk would otherwise
 * leave the run recorded as running, with run.json as it was at the
 * start. */
#define RUNDIR_RESERVE_BYTES (256 * 1024)
/* Holds RUNDIR_RESERVE_BYTES in r's directory (the file .reserve), as
 * the run starts or resumes: 0, or a negative errno (a disk full
 * already, or -EFBIG under a file size limit below the reserve: the run
 * goes on without). */
int rundir_reserve(const rundir *r);
/* Frees the reserve, for the run's last records. */
void rundir_release_reserve(const rundir *r);
/* Whether the disk holding r's directory has less than
 * RUNDIR_RESERVE_BYTES free: the run may have met a full disk. */
int rundir_disk_short(const rundir *r);

/* Paths; caller frees. */
char *rundir_task(const rundir *r, const char *task);
char *rundir_out(const rundir *r, const char *task);
char *rundir_attempt(const rundir *r, const char *task, int attempt);

#endif /* DAGRUN_RUNDIR_H */
