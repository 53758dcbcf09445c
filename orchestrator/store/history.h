/*
 * history: a run's life written to the run store (store.h) as it happens,
 * and the commands that read it back: `dagrun runs`, `dagrun status` and
 * `dagrun logs`.
 *
 * What is recorded, and when (all on the loop's thread, each a committed
 * transaction before dagrun goes on):
 *   - the run and all its tasks ("waiting"), with this dagrun's pid and
 *     start time as its orchestrator, before the first task starts (a
 *     resumed run: its unfinished tasks back to "waiting", after
 *     `dagrun resume` claimed it and recorded its orphaned attempts);
 *   - each task's state change (queued, running, retry_wait and the
 *     terminal states), from the scheduler's observer, which sched calls
 *     after changing its own state and before acting on it: a success is
 *     committed before any downstream task is queued, a failure before the
 *     retry timer is set;
 *   - each attempt: "starting" before its process is spawned (the
 *     attempt_start hook), its pid right after the spawn (an attempt
 *     recorded "starting" with no pid may or may not have a process: a
 *     kill -9 between spawn and that commit), then its end with exit code
 *     and error;
 *   - the run's final state when every task is finished.
 * Not recorded: progress, log lines and metrics (they stay in the run
 * directory). A task that fails before an attempt could be started (its
 * params do not resolve) has a task row with the error and no attempt.
 *
 * When a write fails during a run (disk full, a lock held past the busy
 * timeout), dagrun says so once on stderr and stops recording; the run
 * goes on and run.json stays complete. Opening the store is checked
 * before the run starts, so that a store that cannot be opened fails the
 * run up front (exit 2) instead of running it unrecorded.
 */
#ifndef DAGRUN_HISTORY_H
#define DAGRUN_HISTORY_H

#include <stdio.h>

#include "dagfile/spec.h"
#include "run/rundir.h"
#include "run/scheduler.h"
#include "store.h"

typedef struct history history;

/* Records the start of a run in st (borrowed, must outlive the history),
 * with its resolved params (may be NULL), what started it (trigger, see
 * store.h; logical_date 0: none), this process as its orchestrator.
 * Returns 0 with *out, or an error with a message in err. */
int history_begin(store *st, const spec *sp, const rundir *run,
                  const char *params_json, const char *trigger,
                  double logical_date, history **out, char *err,
                  size_t errlen);
/* SHA-256 (hex) of the DAG file at path as recorded with a run, or NULL
 * when it cannot be read. Caller frees. */
char *history_dag_sha256(const char *path);

/* Records that the run run_id, already in st, goes on (`dagrun resume`):
 * its tasks that had not succeeded (preset, one per task) go back to
 * "waiting"; the caller has claimed the run (store_run_claim). */
int history_resume(store *st, const spec *sp, const char *run_id,
                   const sched_preset *preset, history **out, char *err,
                   size_t errlen);
/* Observer parts: call from the sched observer's task_event and
 * attempt_start (which commits the batch: history_flush). s is the run's
 * scheduler (for outputs). */
void history_task_event(history *h, const sched *s, const sched_event *e);
void history_attempt_start(history *h, size_t task, int attempt,
                           const char *log_path);
/* Records guard (the pid of the run's guard, host/guard.h; <= 0: none)
 * beside this dagrun as the run's owner (store_run_guard). Call before
 * the scheduler starts anything. */
void history_guard(history *h, int guard);
/* Records that this dagrun lives (store_run_beat): call every
 * OWNER_BEAT_S (owner.h) while the run goes. A failed beat is not a
 * failed record: the next one tries again. */
void history_beat(history *h);
/* The sched observer's tasks_added: tasks first .. first + n - 1 (a map's
 * instances, already in the spec) are recorded as the run's, waiting. */
void history_tasks_added(history *h, size_t first, size_t n);
/* The fingerprint cache's lookup (sched_opts.cache_lookup): the newest
 * successful task in the store with this fingerprint whose out/ directory
 * and absolute-path outputs still exist. Returns 1 with *from_run,
 * *from_out_dir, *outputs (caller frees), or 0 (none, or the store failed:
 * said on stderr, and the task runs). */
int history_cache_lookup(history *h, const char *fingerprint, char **from_run,
                         char **from_out_dir, cJSON **outputs);
/* Machine-wide pools (store_lease_acquire): the scheduler's
 * sched_opts.pool_acquire and pool_release for task, whose pool is `pool`
 * of `size` in this DAG. Acquire returns 1 when the task holds a slot, 0
 * with *why (caller frees; also recorded as the task's waiting) when the
 * pool is full. A store that fails is said once and grants the slot: the
 * pool then holds within this run only. */
int history_pool_acquire(history *h, size_t task, const char *pool, int size,
                         char **why);
void history_pool_release(history *h, size_t task);
/* Approval tasks: the scheduler's sched_opts.approval_poll for attempt
 * `attempt` of task (after committing the batch, so that what the store
 * holds is read fresh). An "approved" decision for any attempt counts: a
 * task approved whose dagrun died before it noticed was never acted on (a
 * task that succeeded does not run again on resume), so the resume takes
 * it up. A "rejected" one counts for its own attempt only: resuming asks
 * again. Returns 1 with *outputs ({approved_by, approved_via}), -1 with
 * *reason ("by WHO via HOW[: REASON]"), both for the caller to free, or 0
 * (not decided, or the store failed: said once, as for every read). */
int history_approval_poll(history *h, size_t task, int attempt, cJSON **outputs,
                          char **reason);
/* max_active_runs (store_run_admit): 1 when the run may start (recorded
 * "running"), 0 with *why (caller frees) when it is recorded "queued". A
 * store that fails is said once and admits the run. */
int history_admit(history *h, int max, char **why);
/* The store h records into (borrowed), or NULL for a NULL h. */
store *history_store(const history *h);
/* A run's writes are batched (store_batch_start): this commits them.
 * Called at each turn of the run's loop before it waits, and by
 * history_attempt_start before a process is spawned, so that what is
 * recorded precedes any process started on it (docs/internals/store.md).
 * A failure is said once and stops the recording, as for any write. NULL
 * is a no-op. */
void history_flush(history *h);
/* Records the run's final state (after committing the batch) and frees h;
 * NULL is a no-op. */
void history_finish(history *h, const char *state);

/* Opens the run store (store_default_path) for reading and finds run
 * id_prefix, a run id or a unique prefix of one, as `dagrun resume`,
 * `cancel` and `report` do. Returns 0 with *st and *run (caller closes and
 * frees), or the exit status after saying why on stderr: 2 (no store, an
 * unknown or ambiguous run), 1 (the store cannot be read). */
int history_open_run(const char *id_prefix, store **st, cJSON **run);

/* The commands `dagrun runs`, `status` and `logs` (main.c's table); argv
 * holds the arguments after the command's name, and main.c answers --help
 * before calling them. Return the exit status: 0, 1 (the store cannot be
 * read, or a followed log cannot be), 2 (bad usage, an unknown or
 * ambiguous run, an unknown task or attempt). */
int history_cmd_runs(int argc, char **argv);
int history_cmd_status(int argc, char **argv);
int history_cmd_logs(int argc, char **argv);

#endif /* DAGRUN_HISTORY_H */
