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

/* argv holds the arguments after "backfill"; self_exe is dagrun's own
 * executable. Returns the exit status: 0 (every run succeeded or was
 * skipped), 1 (a run failed), 2 (bad usage, a DAG without a schedule, a
 * range with no or too many fire times), 130 (interrupted). */
int backfill_cmd(int argc, char **argv, const char *self_exe);

#endif /* DAGRUN_BACKFILL_H */
