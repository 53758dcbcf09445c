/*
 * store: the run history, a SQLite database (WAL mode).
 *
 * Where: $DAGRUN_HOME/state.db, else .dagrun/state.db under the current
 * directory. One row per run, per task of a run and per attempt of a task:
 *
 *   runs     (id, dag, dag_file, run_dir, state, started, finished, params,
 *             orch_pid, orch_start, trigger, logical_date, dag_sha256,
 *             waiting, tags, user_note, orch_host, orch_boot, orch_pidns,
 *             orch_guard, orch_guard_start)
 *   tasks    (run_id, name, state, attempts, exit_code, error, started,
 *             finished, outputs, fingerprint, cached_from)
 *   attempts (run_id, task, n, pid, state, exit_code, error, started,
 *             finished, log, pid_start)
 *   alert_deliveries (run_id, time, event, task, attempt, try, status,
 *             error, duration_s, result, endpoint)
 *   cron_state (dag, last_fire, updated)
 *   pool_leases (pool, run_id, task, pid, pid_start, since)
 *   approvals (run_id, task, attempt, decision, by, via, time, reason)
 *
 * Times are wall-clock seconds since the epoch (REAL, NULL when unknown);
 * params and outputs are JSON text; exit_code is NULL when there is none.
 * A task's fingerprint (hex SHA-256, see scheduler.h) is indexed for the
 * cache; cached_from is, for a task in state "cached", the run whose task
 * it reused. Schema history: v2 added orch_pid, orch_start, pid_start;
 * v3 fingerprint and cached_from; v4 trigger, logical_date and dag_sha256 (of
 * the DAG file when the run began, for resume to notice an edited file), the
 * alert_deliveries and cron_state tables; v5 the runs' and tasks' waiting
 * (what a queued run or task waits for) and the pool_leases table (older
 * databases are migrated on open); v6 the approvals table; v7 dag_pauses;
 * v8 serve_queue; v9 where the orchestrator runs (orch_host, orch_boot,
 * orch_pidns: owner.h) and its guard (orch_guard, orch_guard_start). A
 * run's trigger says
 * what started it: "manual" (`dagrun run`), "cron" or "api" (`dagrun serve`),
 * "backfill"; its logical_date is the schedule time it stands for (cron and
 * backfill runs), else NULL. A run's state is "queued" (a DAG with
 * max_active_runs waiting for its turn: see store_run_admit) or "running", then
 * "success", "failed", "cancelled" (Ctrl-C, SIGTERM, `dagrun cancel`) or
 * "interrupted" (SIGHUP, serve's shutdown, or a dagrun that is gone: see
 * "Reading"). An attempt's state is "starting" (recorded before its process is
 * spawned: pid NULL), "running" (spawned, pid set), then "success",
 * "failed" or "cancelled".
 *
 * Durability: WAL with synchronous=NORMAL: a commit survives the crash
 * of any process (dagrun's own kill -9 included); a power cut may drop the
 * commits since the last checkpoint (docs/internals/store.md).
 *
 * Every write is all-or-nothing: its own transaction (BEGIN IMMEDIATE, so
 * that concurrent writers wait on busy_timeout instead of failing on a
 * lock upgrade), or, while batching (store_batch_start), a savepoint of
 * the batch's one transaction. Errors return DR_ESTORE (DR_EVERSION for a
 * database written by a newer dagrun) with sqlite3_errmsg and the
 * database's path in err.
 *
 * A store handle is used by one thread at a time; several processes may
 * open the same database (each `dagrun run` writes, `dagrun runs` and
 * `status` read while runs write).
 */
#ifndef DAGRUN_STORE_H
#define DAGRUN_STORE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "owner.h"

/* The schema this dagrun writes (PRAGMA user_version). */
#define STORE_SCHEMA_VERSION 9

typedef struct store store;

/* The database path from the environment: $DAGRUN_HOME/state.db, or
 * .dagrun/state.db. Caller frees. */
char *store_default_path(void);

/* Opens the database at path. With create, makes its directory and the
 * file and schema if missing; without, a missing file is DR_ENOENT. A
 * database with a newer schema is refused with DR_EVERSION. Returns 0 with
 * *out (close with store_close) or an error with a message in err. */
int store_open(const char *path, int create, store **out, char *err,
               size_t errlen);
/* Closes the database; NULL is a no-op. */
void store_close(store *st);

/* Batching, for a run's records (store/history.h): from store_batch_start
 * on, the writes below join one transaction, opened by the first of them
 * and committed by store_batch_commit, so that a run commits a few times
 * per turn of its loop instead of four times per task. While a batch is
 * open this process holds the database's write lock: other writers wait
 * (busy_timeout), so commit before anything that may wait on another
 * process's write. store_batch_commit: 0 (also with nothing to commit), or
 * an error with err (the batch's writes are then lost: rolled back).
 * store_batch_stop commits as store_batch_commit does and ends batching.
 * NULL st: nothing. */
void store_batch_start(store *st);
int store_batch_commit(store *st, char *err, size_t errlen);
int store_batch_stop(store *st, char *err, size_t errlen);
/* The path it was opened with; valid while st is open. */
const char *store_path(const store *st);

/* Records a new run in state "running" and its tasks in state "waiting",
 * in one transaction. params_json, trigger and dag_sha256 may be NULL,
 * logical_date 0 (none). */
int store_run_begin(store *st, const char *id, const char *dag,
                    const char *dag_file, const char *run_dir, double started,
                    const char *params_json, const char *trigger,
                    double logical_date, const char *dag_sha256,
                    const char *const *tasks, size_t n_tasks, char *err,
                    size_t errlen);
/* Records tasks added to run run_id while it runs (the instances of a map
 * over a run-time list), in state "waiting", after the run's other tasks
 * (the order of a run's tasks is the order they were recorded in). */
int store_tasks_add(store *st, const char *run_id, const char *const *tasks,
                    size_t n_tasks, char *err, size_t errlen);
/* Sets the run's final state and end time. */
int store_run_finish(store *st, const char *id, const char *state,
                     double finished, char *err, size_t errlen);

/* A member k of a record read from the store (store_run, store_runs, an
 * attempt of theirs): its number, or dflt where it is absent or no number;
 * its string (borrowed from o), or dflt. */
double store_num(const cJSON *o, const char *k, double dflt);
const char *store_str(const cJSON *o, const char *k, const char *dflt);

/* Whether a run's state is one of a run not over: "running" or "queued". */
int store_state_active(const char *state);

/* Makes me (owner_here(): pid, start time and where they mean something)
 * the run's orchestrator, with no guard yet, and the run "running" again
 * (finished cleared), provided the recorded orchestrator is still
 * old_pid/old_start (0: none recorded): two dagruns that claim a run at
 * once cannot both win. DR_EBUSY when another claimed it first. */
int store_run_claim(store *st, const char *id, const owner *me, int old_pid,
                    long long old_start, char *err, size_t errlen);
/* Records guard (started at guard_start) as the guard (host/guard.h) of
 * run id's orchestrator pid, if pid still owns the run: while it lives,
 * a dead pid's pool leases and max_active_runs place stay held
 * (owner.h). */
int store_run_guard(store *st, const char *id, int pid, int guard,
                    long long guard_start, char *err, size_t errlen);
/* Records that the dagrun pid running run id lives at now (wall clock):
 * called every OWNER_BEAT_S while it runs, so that a reader elsewhere,
 * which cannot see its pid, can tell a dead one by the silence (owner.h).
 * 0, or DR_ESTORE. */
int store_run_beat(store *st, const char *id, int pid, double now, char *err,
                   size_t errlen);

/* A task's row after a state change. exit_code < 0: none; error,
 * outputs_json may be NULL; started/finished <= 0: left as they are. */
typedef struct store_task_update {
  const char *state;
  int attempts;
  int exit_code;
  const char *error;
  double started, finished;
  const char *outputs_json;
  const char *fingerprint; /* NULL: left as it is */
  const char *cached_from; /* NULL: left as it is */
} store_task_update;
int store_task_set(store *st, const char *run_id, const char *task,
                   const store_task_update *u, char *err, size_t errlen);

/* Attempt n of a task is about to start: recorded "starting", and the task
 * "running" with n attempts, in one transaction. */
int store_attempt_begin(store *st, const char *run_id, const char *task, int n,
                        const char *log_path, double started, char *err,
                        size_t errlen);
/* The attempt's process was spawned: state "running", pid and its start
 * time (0: unknown). */
int store_attempt_pid(store *st, const char *run_id, const char *task, int n,
                      int pid, long long pid_start, char *err, size_t errlen);
/* The attempt is over. exit_code < 0: none; error may be NULL. With
 * task_u, the task's new row is written in the same transaction, so that
 * no reader sees the attempt over and the task still running. */
int store_attempt_end(store *st, const char *run_id, const char *task, int n,
                      const char *state, int exit_code, const char *error,
                      double finished, const store_task_update *task_u,
                      char *err, size_t errlen);

/* The fingerprint cache: the newest task in state "success" (any run,
 * any dag) whose fingerprint is fingerprint and for which usable(ud,
 * run_dir, task name, outputs) says yes (non-zero). Returns 1 with *run_id,
 * *out_dir (the task's out/ directory) and *outputs (caller frees all
 * three), 0 when there is none, or DR_ESTORE. */
int store_cache_find(store *st, const char *fingerprint,
                     int (*usable)(void *ud, const char *run_dir,
                                   const char *task, const cJSON *outputs),
                     void *ud, char **run_id, char **out_dir, cJSON **outputs,
                     char *err, size_t errlen);

/* Reading. Each returns a new cJSON (caller frees) or NULL with err set.
 * Times are numbers (seconds), NULL columns are left out.
 *
 * store_runs and store_run first record "interrupted" each run they read
 * that is recorded "running" though its dagrun is gone (owner_judge: its
 * recorded pid and start time name no live process), its unfinished tasks
 * "cancelled"
 * (attempts are left for
 * resume_prepare): so readers write. The update holds only while the run
 * still names that dagrun, so a resume that claimed it meanwhile wins; a
 * failed write leaves it to the next reader (the run is shown interrupted
 * all the same). An interrupted run has a "note" key: "dagrun (pid N) is
 * gone: `dagrun resume RUN` goes on with the run". A run whose dagrun runs
 * on another host or in another PID namespace (OWNER_ELSEWHERE) is never
 * recorded interrupted: it is shown as recorded, with a "note": "dagrun
 * (pid N) runs it on host H: whether it is still alive cannot be seen
 * from here". */

/* Runs newest first, of one dag (NULL: all), in one state (NULL: any), at
 * most limit (<= 0: all): [{id, dag, dag_file, run_dir, state, started,
 * finished, tasks_total, tasks_succeeded (success or cached), trigger,
 * logical_date, orch_pid, orch_start, tasks_cached, cached_from (the runs
 * its cached tasks were taken from, comma-separated, or null)}]. */
cJSON *store_runs(store *st, const char *dag, const char *state, int limit,
                  char *err, size_t errlen);
/* store_runs of the runs that carry tag (NULL: any). Each run object of
 * store_runs, store_runs_tagged and store_run has "tags" (an array of
 * strings, [] for none) and "user_note" (a string, or null). */
cJSON *store_runs_tagged(store *st, const char *dag, const char *state,
                         const char *tag, int limit, char *err, size_t errlen);

/* Tags and notes: what people write on a run (`dagrun tag`, `dagrun
 * note`, POST /api/runs/{run}/tags and /note). A tag is 1 to STORE_TAG_MAX
 * letters, digits and _ - . : = / + (so "lr=3e-4" or "baseline"); a run
 * has at most STORE_TAGS_MAX; a note is at most STORE_NOTE_MAX bytes of
 * UTF-8 text (no control characters but newline and tab). */
#define STORE_TAG_MAX 64
#define STORE_TAGS_MAX 32
#define STORE_NOTE_MAX 4096
/* 0, or DR_EINVAL with why in err. */
int store_tag_check(const char *tag, char *err, size_t errlen);
int store_note_check(const char *note, char *err, size_t errlen);
/* Adds the tags of add (those not there yet, at the end) and removes
 * those of remove, in one transaction, on run id (a full id). 0 with
 * *tags_out the run's tags after (caller frees); DR_EINVAL (a bad tag, too
 * many), DR_ENOENT (no such run), DR_ESTORE; err says which. */
int store_run_tag(store *st, const char *id, const char *const *add,
                  size_t n_add, const char *const *remove, size_t n_remove,
                  cJSON **tags_out, char *err, size_t errlen);
/* Sets run id's note (NULL or "": none). 0, DR_EINVAL, DR_ENOENT,
 * DR_ESTORE. */
int store_run_set_note(store *st, const char *id, const char *note, char *err,
                       size_t errlen);

/* The run whose id is id_prefix or starts with it: {..., params, tasks:
 * [{name, state, attempts, exit_code, error, started, finished, outputs,
 * attempt_list: [{n, pid, state, exit_code, error, started, finished,
 * log, pid_start}]}], approvals: [as store_approvals]}, the run's own
 * keys including orch_pid and
 * orch_start when recorded. *rc: 0, DR_ENOENT (no such run) or DR_EINVAL (the
 * prefix is ambiguous), DR_ESTORE; err says which. */
cJSON *store_run(store *st, const char *id_prefix, int *rc, char *err,
                 size_t errlen);
/* One attempt (n <= 0: the latest) of a task of a run (full id):
 * {n, pid, state, exit_code, error, started, finished, log}. *rc: 0,
 * DR_ENOENT (no such task or attempt yet), DR_ESTORE. */
cJSON *store_attempt(store *st, const char *run_id, const char *task, int n,
                     int *rc, char *err, size_t errlen);

/* One delivery try of a webhook alert (alerts.h), as recorded. */
typedef struct store_alert_delivery {
  double time;        /* when the try ended */
  const char *event;  /* failure, retry, success, deadline, approval */
  const char *task;   /* NULL: about the run */
  int attempt;        /* the task's attempt, 0: none */
  int try_n;          /* 1, 2, 3 */
  int http_status;    /* 0: no answer */
  const char *error;  /* NULL: none */
  double duration_s;
  const char *result; /* "delivered", "retrying", "failed", "abandoned" */
  const char *endpoint; /* scheme://host[:port] only, never the URL */
} store_alert_delivery;
int store_alert_record(store *st, const char *run_id,
                       const store_alert_delivery *d, char *err,
                       size_t errlen);
/* A run's alert deliveries in order: [{time, event, task, attempt, try,
 * status, error, duration_s, result, endpoint}] (NULL columns left out),
 * or NULL with err. */
cJSON *store_alerts(store *st, const char *run_id, char *err, size_t errlen);

/* The cron trigger of dag (dagrun serve): the last schedule time it fired
 * or decided not to (UTC seconds). store_cron_get returns 0 with
 * *last_fire, DR_ENOENT when dag has none yet, or DR_ESTORE. */
int store_cron_get(store *st, const char *dag, long long *last_fire,
                   char *err, size_t errlen);
int store_cron_set(store *st, const char *dag, long long last_fire, double now,
                   char *err, size_t errlen);

/* Machine-wide pools. A pool is named: `gpu` in two DAGs is one pool, and
 * its slots are the leases in pool_leases, whoever holds them. A lease is
 * granted when fewer than `size` (the asking DAG's size for the pool) are
 * held by live dagruns: a DAG that declares a smaller size waits while
 * that many are held, one that declares a bigger size may go beyond a
 * smaller one's. In one BEGIN IMMEDIATE transaction, leases whose dagrun
 * is gone (owner_judge, as for runs) are dropped, the rest counted, and
 * the lease inserted for (run_id, task) held by dagrun pid/pid_start. A
 * lease of a dagrun that died is held until its guard has stopped its
 * attempts (OWNER_STOPPING), and one of a dagrun elsewhere (another host
 * or PID namespace) is held. Returns 1 when granted (the task's waiting
 * cleared), 0 when the pool is full, with *why "pool P (held by run R
 * task T)" (", whose dead dagrun's attempts are being stopped" added
 * while they are; caller frees), also recorded as the task's waiting; or
 * DR_ESTORE. */
int store_lease_acquire(store *st, const char *pool, int size,
                        const char *run_id, const char *task, int pid,
                        long long pid_start, double now, char **why,
                        char *err, size_t errlen);
/* Gives back the lease of (run_id, task), if it holds one. The end of a
 * run (store_run_finish) gives back all of its leases. */
int store_lease_release(store *st, const char *run_id, const char *task,
                        char *err, size_t errlen);

/* max_active_runs: whether run id of dag may start now that at most max
 * runs of dag may be active. In one BEGIN IMMEDIATE transaction, counts
 * the other runs of dag with a live dagrun that are "running", or
 * "queued" and started before id (first come, first served), and those
 * whose dagrun died while its guard still stops their attempts (owner.h,
 * OWNER_STOPPING; recorded "interrupted" or not); below max,
 * the run is recorded "running" and 1 returned; else it is recorded
 * "queued" with waiting "max_active_runs N reached (run X)" (also in
 * *why, caller frees) and 0 returned. DR_ESTORE on error. */
int store_run_admit(store *st, const char *id, const char *dag, int max,
                    char **why, char *err, size_t errlen);

/* Approval tasks (scheduler.h, "Approval"): a person's decision on the
 * attempt an approval task waits at, one per attempt. */
typedef struct store_approval {
  const char *decision; /* "approved" or "rejected" */
  const char *by;       /* who: a user name, or what the API was told */
  const char *via;      /* how: "cli", "api", "dashboard" */
  const char *reason;   /* may be NULL */
} store_approval;
/* Records a decision on task of run run_id (full id), in one BEGIN
 * IMMEDIATE transaction, for the attempt the task waits at. Only a task
 * recorded "waiting_approval" can be decided. Returns 0 when recorded; 1
 * when the same decision was already recorded for that attempt (a replay:
 * nothing is written); DR_ENOENT (no such task), DR_EINVAL (the task is
 * not waiting for approval), DR_EEXIST (the other decision was recorded)
 * or DR_ESTORE, each with err. */
int store_approval_decide(store *st, const char *run_id, const char *task,
                          const store_approval *a, double now, char *err,
                          size_t errlen);
/* The decisions of a run (full id), of one task (NULL: all) and attempt
 * (<= 0: all), in the order made: [{decision, by, via, time, reason, task,
 * attempt}]; or NULL with err. Caller frees. */
cJSON *store_approvals(store *st, const char *run_id, const char *task, int n,
                       char *err, size_t errlen);

#endif /* DAGRUN_STORE_H */
