/*
 * sched: the scheduler of one run, on one libuv loop.
 *
 * It owns every task's state and decides what runs next: a task becomes
 * ready when its trigger rule is met, waits in its pool's FIFO queue until a
 * slot is free (max_parallel overall, each pool's size), and is started by
 * the executor. A failed attempt is retried after a backoff timer when the
 * task has retries left and the failure is worth retrying: any failure
 * without `retry_on`; with it, exits whose code is listed, and always
 * crashes, timeouts and missed heartbeats (the process did not get to
 * decide). The rest of the DAG goes on after a failure.
 *
 * Trigger rules (spec_trigger, Airflow's): each upstream task that ends
 * counts as succeeded (success, cached), skipped, or failed (failed,
 * upstream_failed, cancelled), in counters, so that deciding costs O(1)
 * per upstream event. A task is queued as soon as its rule is met (for
 * one_failed and one_success that may be before every upstream ended),
 * and settled without running as soon as its rule can no longer be met,
 * as sched_trigger_decide says: skipped (all_success after a skipped
 * upstream, one_failed when none failed, all_failed after a success or a
 * skip, ...), or upstream_failed (all_success, none_failed and
 * none_failed_min_one_success after a failure, one_success when none
 * succeeded and not all were skipped). Settled tasks count for their own
 * downstream in turn, so a skip goes down a chain of all_success tasks
 * and stops at a none_failed one. A run whose tasks all succeeded or
 * were skipped is a success.
 *
 * Branching: a task with `branch: true` that succeeded names, in its
 * output `branch`, the direct downstream tasks to run: one task name, or a
 * JSON list of names (`["export"]`; `[]` runs none of them). The others
 * that still wait are skipped at once ("not chosen by branch task 'T'"),
 * whatever their trigger rule, as Airflow's branch operators do; a chosen
 * task counts the branch task as succeeded. A branch task whose success
 * lacks the output, or names a task that is not its direct downstream,
 * fails that attempt instead (retries apply), with a reason that names
 * the bad name and the tasks it may choose from.
 *
 * Approval: a task with `approval:` (spec.h) runs no process. When its
 * trigger rule is met it goes straight to TASK_WAITING_APPROVAL (it takes
 * no max_parallel or pool slot: a person is not a machine), with an attempt
 * begun as for any task (attempt_start; its log says what it waits for) and
 * an event whose reason is the approval's message. opts.approval_poll is
 * asked on a timer: approved, the task succeeds with the outputs the poll
 * gives; rejected, it fails without retry (a person decided; retrying would
 * ask the same question again); at approval.timeout it fails "approval
 * timed out after T" and its retries apply (each retry waits again). A
 * cancelled run cancels it. An approval task has no fingerprint, so
 * nothing downstream of it is taken from the cache.
 *
 * The fingerprint cache: before a task's first attempt (of this
 * execution) is started, its fingerprint is computed (fingerprint.h: its
 * stage and the plugin's version, its resolved params and env, its
 * world_size above 1, and each upstream task's name, fingerprint and
 * outputs). A task with an upstream that has no fingerprint (did not
 * succeed, or was succeeded before a resume) gets none. When the task may
 * be cached (its `cache:` and opts.no_cache allow it) and
 * opts.cache_lookup finds an earlier successful task with that
 * fingerprint, the task does not run: it becomes TASK_CACHED with that
 * task's outputs and out/ directory (which `${tasks.T.dir}` then names).
 *
 * Mapping over a run-time list (`map: ${tasks.U.outputs.KEY}`, mapping.h):
 * the mapped task is one placeholder task until its trigger rule is met.
 * Then, instead of an attempt, the scheduler reads the list, expands the
 * spec (checked_expand: the instances T-0, T-1, ... are appended to the
 * task arrays, so the indices of the other tasks never change), tells the
 * observers (tasks_added), moves the tasks that waited for the
 * placeholder onto the instances, queues the instances, and settles the
 * placeholder: success with the list as its output `items`, or failed
 * (no retry: the same output would give the same answer) when the output
 * is no JSON list or holds over SPEC_MAP_MAX items. An empty list makes
 * no instance, and the placeholder's success is then what the tasks that
 * need it count. On a resume, a placeholder that succeeded keeps its
 * recorded list (resume.h expands the spec before the sched is made).
 *
 * Gangs (world_size above 1, or a launcher): each attempt's ranks are
 * prepared by gang.h and run by the executor; the attempt's failure
 * reason names the rank that failed first and the ranks stopped because
 * of it, and run.json says how each rank ended.
 *
 * Everything is an event on the loop: no sleeps, no polling. All functions
 * run on the loop's thread.
 */
#ifndef DAGRUN_SCHED_H
#define DAGRUN_SCHED_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <uv.h>

#include "dagfile/spec.h"
#include "host/check.h"
#include "rundir.h"
#include "secrets.h"

typedef enum task_state {
  TASK_WAITING,          /* upstream not done yet */
  TASK_QUEUED,           /* ready, waiting for a slot */
  TASK_RUNNING,          /* an attempt is running */
  TASK_RETRY_WAIT,       /* failed, next attempt after a delay */
  TASK_WAITING_APPROVAL, /* an approval task waits for a person */
  TASK_SUCCESS,          /* terminal */
  TASK_CACHED,           /* terminal, success-like: reused an earlier run's
                            task (fingerprint cache), did not run */
  TASK_FAILED,           /* terminal */
  TASK_UPSTREAM_FAILED,  /* terminal: never ran */
  TASK_CANCELLED,        /* terminal */
  TASK_SKIPPED,          /* terminal: never ran, its trigger rule could not
                            be met or a branch did not choose it; counts as
                            success for the run */
  TASK_STATE_COUNT
} task_state;

/* "waiting", "queued", "running", "retry_wait", "waiting_approval",
 * "success", "cached",
 * "failed", "upstream_failed", "cancelled", "skipped". */
const char *task_state_name(task_state s);
int task_state_terminal(task_state s);
/* TASK_SUCCESS or TASK_CACHED: counts as success for downstream and run. */
int task_state_succeeded(task_state s);

/* A state change, for observers. Strings are valid during the callback. */
typedef struct sched_event {
  size_t task;
  task_state state;
  int attempt;      /* attempt number this event is about (0: none yet) */
  int max_attempts; /* 1 + retries (+ attempts made before a resume) */
  int exit_code;    /* attempt's exit code when it exited, else -1 */
  double duration_s; /* attempt's duration for ends of attempts */
  double retry_in_s; /* TASK_RETRY_WAIT: delay before the next attempt */
  const char *reason; /* why it failed or was skipped, or NULL */
  int pid;            /* TASK_RUNNING: the attempt's worker process */
  const char *cached_from; /* TASK_CACHED: the run the outputs came from */
} sched_event;

typedef struct sched_observer {
  void (*task_event)(void *ud, const sched_event *e);
  void (*task_progress)(void *ud, size_t task, double fraction,
                        const char *msg);
  void (*task_log)(void *ud, size_t task, int level, const char *msg);
  /* Every task is in a terminal state and no process is left. */
  void (*run_done)(void *ud);
  void *ud;
  /* Attempt `attempt` of task is about to start: called after its
   * directory and attempt.json are made and before its process is
   * spawned, so that what an observer records about it precedes it. Then
   * comes TASK_RUNNING with the pid, or TASK_FAILED when the spawn
   * failed. log_path is valid during the call. May be NULL. */
  void (*attempt_start)(void *ud, size_t task, int attempt,
                        const char *log_path);
  /* A map over a run-time list expanded (see "Mapping over a run-time
   * list"): tasks first .. first + n - 1 were appended to the spec. Called
   * before any event about them, so that observers grow their per-task
   * state. May be NULL. */
  void (*tasks_added)(void *ud, size_t first, size_t n);
} sched_observer;

/* What an earlier execution of the same run left of a task, for
 * `dagrun resume`. Only success carries over: a task that was skipped or
 * upstream_failed is decided again from its upstream tasks (a branch
 * task's recorded `branch` output included), as sched_start begins. */
typedef struct sched_preset {
  int succeeded;        /* it succeeded: it stays so and does not run */
  int attempts;         /* attempts made so far: the next is attempts + 1,
                           with the task's retries afresh */
  const cJSON *outputs; /* succeeded: its key/value outputs (copied), for
                           downstream templates; may be NULL */
  double started, ended; /* wall clock, 0 when unknown */
  const char *fingerprint; /* succeeded: as recorded, or NULL (copied) */
} sched_preset;

typedef struct sched_opts {
  int max_parallel;     /* >= 1 */
  const char *worker_exe; /* the dagrun-worker program */
  sched_observer obs;
  uint64_t seed;        /* retry jitter; 0: from the clock */
  /* NULL, or one entry per task: the run starts from these states.
   * Succeeded tasks count as done for their downstream from the start;
   * no event is emitted for them. Borrowed during sched_create only. */
  const sched_preset *preset;
  /* The fingerprint cache; NULL: off. Called on the loop's thread with
   * obs.ud, a task that may be cached and its fingerprint: returns 1 with
   * *from_run, *from_out_dir and *outputs (an object) of the earlier task to
   * reuse, which the sched takes over, or 0 to run the task. */
  int (*cache_lookup)(void *ud, size_t task, const char *fingerprint,
                      char **from_run, char **from_out_dir, cJSON **outputs);
  int no_cache; /* `dagrun run --no-cache`: look nothing up */
  /* The run's secrets (secrets.h), borrowed, may be NULL: masked in what
   * the sched writes (attempt.json, outputs.json, metrics, attempt logs
   * through the executor) and hands to observers (reasons, log and
   * progress messages, sched_task_outputs, sched_tasks_json). Templates
   * of downstream tasks still see the real outputs, and workers the real
   * params. */
  const secrets *secrets;
  /* Machine-wide pools (history.h's history_pool_acquire); NULL: a pool
   * holds within this run only. Called with obs.ud for a task that has a
   * pool, once this run's own count of the pool has room, before the
   * task's attempt is launched: returns 1 when the task now holds a slot,
   * 0 when the pool is full elsewhere. A task refused stays first in its
   * pool's queue and is asked for again on a timer (SCHED_POOL_POLL_MS)
   * while any task waits so. pool_release gives the slot back when the
   * attempt ends, however (success, failure, timeout, cancel, and before a
   * retry's wait), or when it could not be launched. A DAG without pools
   * never calls either. */
  int (*pool_acquire)(void *ud, size_t task);
  void (*pool_release)(void *ud, size_t task);
  /* Approval tasks (see "Approval"); NULL: nothing approves them, they end
   * at their timeout. Called with obs.ud every SCHED_APPROVAL_POLL_MS while
   * attempt `attempt` of task waits: returns 1 approved (*outputs: an
   * object the sched takes over, or NULL), -1 rejected (*reason, caller
   * of the poll frees: the sched), 0 not decided yet. */
  int (*approval_poll)(void *ud, size_t task, int attempt, cJSON **outputs,
                       char **reason);
} sched_opts;

/* How often a waiting approval task asks approval_poll. */
#define SCHED_APPROVAL_POLL_MS 250

/* How often a task refused by pool_acquire asks again. */
#define SCHED_POOL_POLL_MS 200

typedef struct sched sched;

/* Creates the scheduler for a checked spec, a created run directory and the
 * run's resolved DAG params (borrowed; all must outlive the sched). */
sched *sched_create(uv_loop_t *loop, checked *c, const rundir *run,
                    const cJSON *params, const sched_opts *opts);
/* Queues the tasks without upstream and starts what fits. */
void sched_start(sched *s);
/* Stops the run: tasks not started are cancelled, running attempts get
 * SIGTERM (force: SIGKILL) and end cancelled. */
void sched_cancel(sched *s, int force);
/* Per-state counts of the tasks. */
void sched_counts(const sched *s, size_t counts[TASK_STATE_COUNT]);
/* The pid of the run's guard (executor_guard_pid), 0 when there is none. */
int sched_guard_pid(const sched *s);
task_state sched_task_state(const sched *s, size_t task);
/* The key/value outputs of the task's current attempt (an object, maybe
 * empty, or NULL before it ran). Borrowed: valid until the next attempt
 * starts or sched_destroy. */
const cJSON *sched_task_outputs(const sched *s, size_t task);
/* The task's fingerprint (hex), or NULL when it has none (yet), or when
 * an output of its current attempt held a secret (masked outputs are no
 * use to a later run: such a task is never a cache entry). Borrowed:
 * valid until sched_destroy. */
const char *sched_task_fingerprint(const sched *s, size_t task);
/* TASK_CACHED: the run whose task it reused; else NULL. Borrowed. */
const char *sched_task_cached_from(const sched *s, size_t task);
/* The run as JSON for run.json: tasks with state, attempts, exit codes,
 * times, errors, outputs. Caller frees. */
cJSON *sched_tasks_json(const sched *s);
void sched_destroy(sched *s);

/* What a waiting task's trigger rule says, from the counts of its n
 * upstream tasks: done have ended, of them ok succeeded, failed failed
 * and skipped were skipped (see "Trigger rules" above). */
typedef enum sched_verdict {
  SCHED_WAIT,           /* not decided yet */
  SCHED_RUN,            /* the rule is met: queue the task */
  SCHED_SKIP,           /* the rule can no longer be met: skipped */
  SCHED_UPSTREAM_FAILED /* it cannot be met because of failures */
} sched_verdict;
sched_verdict sched_trigger_decide(spec_trigger rule, size_t n, size_t done,
                                   size_t ok, size_t failed, size_t skipped);

/* Delay before retry number `retry` (1 for the first retry):
 * min(max_delay, delay * backoff^(retry-1)) scaled by (1 - jitter * u),
 * u uniform in [0,1). */
double sched_retry_delay(const spec_retry *r, int retry, double u);

#endif /* DAGRUN_SCHED_H */
