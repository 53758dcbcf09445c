/*
 * resume: what `dagrun resume` learns from the run store before it acts:
 * which runs are going, which attempts a dead dagrun left orphaned, and
 * what each task starts from when the run goes on. Whether a run's
 * dagrun is alive is owner.h's to tell.
 *
 * A process is named by its pid and its start time (proc_start_time), so
 * that a pid reused since it was recorded is not taken for it. Attempts
 * recorded without a start time (schema version 1) count as gone: their
 * process cannot be told from a stranger with the same pid.
 *
 * Single-threaded; the functions block (they wait for killed processes).
 */
#ifndef DAGRUN_RESUME_H
#define DAGRUN_RESUME_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "dagfile/spec.h"
#include "run/scheduler.h"
#include "store.h"

/* The runs of dag (store_run objects, a new array) that are going:
 * recorded running or queued (queued by max_active_runs) with their
 * dagrun alive, or elsewhere (owner.h: not visible from here, so maybe
 * alive). A run whose dagrun died is not going: it waits for a resume and
 * blocks nothing. NULL with a message in err when the store cannot be
 * read. */
cJSON *resume_runs_going(store *st, const char *dag, char *err, size_t errlen);

/* Prepares run (a store_run object as read before the claim, the run's
 * DAG re-read as sp) to go on. Each attempt recorded "starting" or
 * "running" is orphaned: a worker still alive has its process group
 * stopped (SIGTERM, SIGKILL after a few seconds) and is waited for, so
 * that no task runs twice at once, with a line on stderr that says so;
 * the attempt is recorded "orphaned" with the reason. Then, if the dead
 * dagrun's guard (host/guard.h) still lives, it is waited for (within its
 * grace, said on stderr): it stops what the attempts left outside their
 * groups. A dagrun elsewhere (owner.h; a resume --force) ran its workers
 * where their pids mean nothing here: they are not looked for. Returns
 * one preset per
 * task of sp (caller frees the array; outputs point into run, which must
 * outlive it): succeeded tasks with their outputs (recorded, else read
 * from <run_dir>/<task>/outputs.json), the others to run again after
 * their recorded attempts. NULL with a message in err when the DAG's tasks
 * are not the run's or the store cannot be written. */
/* Before resume_prepare: each map over a run-time list whose placeholder
 * succeeded in run (a store_run object) is expanded in ck's spec over the
 * list it recorded (its output `items`), so that the run goes on with the
 * instances it had. A placeholder that did not succeed expands when its
 * turn comes again. */
void resume_expand_maps(cJSON *run, checked *ck);

sched_preset *resume_prepare(store *st, cJSON *run, const spec *sp, char *err,
                             size_t errlen);

#endif /* DAGRUN_RESUME_H */
