/*
 * backfill: `dagrun backfill FILE --from TIME --to TIME`, the explicit way
 * to run a scheduled DAG for schedule times that are past.
 *
 * Every fire time of the DAG's schedule in [from, to] (in its time zone;
 * times without "Z" or an offset are local there) gets one run, in order,
 * one at a time: `dagrun run FILE --trigger backfill --logical-date T`,
 * as a child process, with the run options given to backfill passed on.
 * A schedule time that already has a successful run of the DAG (any
 * trigger) is skipped unless --rerun. A failed run does not stop the
 * backfill; Ctrl-C stops the run in progress and the backfill.
 *
 * At most CRON_CATCHUP_MAX runs at once: a wider range is refused, so that
 * a typo in a date cannot start thousands of runs.
 */
#ifndef DAGRUN_BACKFILL_H
#define DAGRUN_BACKFILL_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "base/cron.h"

/* The fire times of a schedule (e in zone z) from from_s to to_s, both
 * included (times as --from and --to take them: local in z unless "Z"
 * or an offset says), into *times (caller frees; NULL when none): their
 * count, at most CRON_CATCHUP_MAX, or -1 with why in err (a bad time, to
 * before from, too many). `dagrun backfill` and serve's POST
 * /api/dags/{dag}/backfill plan with it. */
long backfill_plan(const cron_expr *e, const cron_zone *z, const char *from_s,
                   const char *to_s, int64_t **times, char *err, size_t errlen);

/* The id of the run in done (store_runs' array) for logical date t, or
 * NULL: a schedule time a backfill skips unless told to run it again. */
const char *backfill_done_for(const cJSON *done, int64_t t);

/* `dagrun backfill`: argv holds the arguments after "backfill" (main.c
 * answers --help before calling it); the runs are started from dagrun's
 * own executable (/proc/self/exe). Returns the exit status: 0 (every run
 * succeeded or was skipped), 1 (a run failed, or the run store cannot be
 * read), 2 (bad usage, a DAG without a schedule, a range with no or too
 * many fire times, a run refused), 130 (interrupted). Main thread only: it
 * sets SIGINT and SIGTERM handlers while the runs go. */
int backfill_cmd_backfill(int argc, char **argv);

#endif /* DAGRUN_BACKFILL_H */
