#include "scheduler.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "dagfile/mapping.h"
#include "dagfile/template.h"
#include "dirprep.h"
#include "executor.h"
#include "fingerprint.h"
#include "gang.h"
#include "host/params.h"
#include "lib/clock.h"
#include "lib/fileio.h"
#include "tfevents.h"
#include "workerenv.h"

typedef struct task_rt {
  task_state state;
  int attempt;          /* attempts started so far */
  int attempt_base;     /* of those, made before this execution (resume) */
  size_t n_waiting_up;  /* upstream tasks not in a terminal state */
  /* Of the upstream tasks that ended: how many succeeded, failed (failed,
   * upstream_failed, cancelled) and were skipped; the trigger rule is
   * decided from these (sched_trigger_decide), never by a rescan. */
  size_t n_up_ok, n_up_failed, n_up_skipped;
  /* A branch task that succeeded: the downstream tasks it chose (indices),
   * or NULL with chose 0 before it did. */
  size_t *chosen;
  size_t n_chosen;
  int chose;
  uint64_t queued_seq;  /* FIFO order across pools */
  int exit_code;        /* last attempt's, -1 if none */
  char *reason;         /* last failure reason */
  cJSON *outputs;       /* object, from the current attempt */
  cJSON *shown;         /* outputs masked (secrets.h), or NULL: the same */
  char *out_dir;        /* lazily computed */
  int metrics_fd;       /* -1 when closed */
  tfevents *tb;         /* the attempt's TensorBoard events, NULL if none */
  int tb_failed;        /* the attempt's events file could not be made */
  double started, ended; /* wall clock: first start, final end */
  uv_timer_t *retry_timer;
  int cache_checked; /* the cache was consulted (first attempt only) */
  char *fingerprint; /* hex SHA-256, NULL when none */
  char *cached_from; /* TASK_CACHED: the run it came from */
  char *fp_dir;      /* what ${tasks.T.dir} is in fingerprints */
  /* A gang's last attempt: how each rank ended (run.json), or NULL. */
  cJSON *ranks;
  int leased; /* holds a machine-wide pool slot (opts.pool_acquire) */
  int prepped; /* its directories were asked of s->prep */
  struct approval_wait *approval; /* TASK_WAITING_APPROVAL: its poll */
} task_rt;

/* A FIFO of task indices; entries whose task left TASK_QUEUED (cancelled)
 * are skipped when they reach the head. */
typedef struct fifo {
  size_t *v;
  size_t head, n, cap;
  size_t prep; /* v[head..prep) were offered to dirprep (prepare_ahead) */
} fifo;

struct sched {
  uv_loop_t *loop;
  checked *c; /* grows when a map over a run-time list expands */
  const spec *sp;
  const rundir *run;
  const cJSON *params;
  sched_opts opts;
  executor *x;
  task_rt *t;
  size_t *down_start, *down; /* downstream lists, CSR layout */
  fifo *queues;              /* one per pool, the last for "no pool" */
  int *pool_running;
  /* Per plugin (c->plugins): 1 when it is the built-in exec stage, whose
   * one-process attempts run without a worker (execdirect.h); -1 not
   * asked yet. */
  signed char *plugin_direct;
  /* Machine-wide pools: per pool, refused by pool_acquire in this pump
   * (skipped until the next); the timer that pumps again while so. */
  unsigned char *pool_blocked;
  uv_timer_t *pool_timer;
  int running;
  uint64_t seq;
  size_t n_terminal;
  int cancelling, done_reported;
  int pumping, pump_again;
  uint64_t rng;
  size_t *worklist;
  size_t n_worklist, cap_worklist;
  dirprep *prep; /* makes queued tasks' directories ahead; NULL: none */
  /* One byte per task, all 0 between uses: marks a branch task's
   * downstream tasks while its choice is checked or applied. NULL when the
   * DAG has no branch task. */
  unsigned char *mark;
  /* Placeholders of maps over run-time lists whose turn came (queued):
   * expanded by pump, outside release_downstream's walk of the edges that
   * an expansion rebuilds. */
  size_t *expand;
  size_t n_expand, cap_expand;
};

static const char *const state_names[] = {
    "waiting",          "queued",    "running", "retry_wait",
    "waiting_approval", "success",   "cached",  "failed",
    "upstream_failed",  "cancelled", "skipped"};

const char *task_state_name(task_state s) { return state_names[s]; }

int task_state_terminal(task_state s) { return s >= TASK_SUCCESS; }

int task_state_succeeded(task_state s) {
  return s == TASK_SUCCESS || s == TASK_CACHED;
}

double sched_retry_delay(const spec_retry *r, int retry, double u) {
  double d = r->delay_s * pow(r->backoff, retry > 1 ? retry - 1 : 0);
  if (d > r->max_delay_s)
    d = r->max_delay_s;
  return d * (1.0 - r->jitter * u);
}

static double next_uniform(sched *s) {
  /* xorshift64*: jitter needs spread, not cryptographic strength. */
  uint64_t x = s->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  s->rng = x;
  return (double)((x * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static void emit(sched *s, size_t i, task_state st, int exit_code,
                 double duration, double retry_in, const char *reason) {
  if (!s->opts.obs.task_event)
    return;
  const spec_task *st_ = &s->sp->tasks[i];
  sched_event e = {i,
                   st,
                   s->t[i].attempt,
                   s->t[i].attempt_base + 1 + st_->retry.retries,
                   exit_code,
                   duration,
                   retry_in,
                   reason,
                   0,
                   NULL};
  if (st == TASK_RUNNING)
    e.pid = executor_pid(s->x, i);
  if (st == TASK_CACHED)
    e.cached_from = s->t[i].cached_from;
  s->opts.obs.task_event(s->opts.obs.ud, &e);
}

static const char *out_dir(sched *s, size_t i) {
  if (!s->t[i].out_dir)
    s->t[i].out_dir = rundir_out(s->run, s->sp->tasks[i].name);
  return s->t[i].out_dir;
}

static const char *tmpl_task_dir(void *ud, size_t task) {
  return out_dir(ud, task);
}

/* In a fingerprint a task's directory is named, not given
 * (fingerprint.h). */
static const char *tmpl_fp_dir(void *ud, size_t task) {
  sched *s = ud;
  if (!s->t[task].fp_dir)
    s->t[task].fp_dir = fingerprint_task_dir(s->sp->tasks[task].name);
  return s->t[task].fp_dir;
}

static const cJSON *tmpl_task_outputs(void *ud, size_t task) {
  sched *s = ud;
  return task_state_succeeded(s->t[task].state) ? s->t[task].outputs : NULL;
}

/* Ends the attempt's metrics: the next attempt starts a new events file
 * (and tries again to make one). */
static void close_metrics(task_rt *t) {
  if (t->metrics_fd >= 0) {
    close(t->metrics_fd);
    t->metrics_fd = -1;
  }
  tfevents_destroy(t->tb);
  t->tb = NULL;
  t->tb_failed = 0;
}

static void pool_timer_close(sched *s);

static void check_done(sched *s) {
  if (s->done_reported || s->n_terminal < s->sp->n_tasks ||
      executor_running(s->x) > 0)
    return;
  s->done_reported = 1;
  dirprep_destroy(s->prep);
  s->prep = NULL;
  pool_timer_close(s);
  if (s->opts.obs.run_done)
    s->opts.obs.run_done(s->opts.obs.ud);
}

static void enqueue(sched *s, size_t i);

/* What may be written or shown of task i's outputs: masked. */
static const cJSON *shown_outputs(const task_rt *t) {
  return t->shown ? t->shown : t->outputs;
}

/* A copy of text with the run's secrets masked. Caller frees. */
static char *masked(const sched *s, const char *text) {
  return secrets_mask(s->opts.secrets, text);
}

static void write_outputs(sched *s, size_t i) {
  task_rt *t = &s->t[i];
  if (!t->outputs || !t->outputs->child)
    return;
  char *task_dir = rundir_task(s->run, s->sp->tasks[i].name);
  /* A cached task never ran here: its directory is made for this file. */
  fileio_mkdir_p(task_dir, 0755);
  char *path = path_join(task_dir, "outputs.json");
  char *text = cJSON_Print(shown_outputs(t));
  if (fileio_write_atomic(path, text, strlen(text), NULL, 0) != 0)
    fprintf(stderr, "dagrun: cannot write %s: %s\n", path, strerror(errno));
  cJSON_free(text);
  free(path);
  free(task_dir);
}

sched_verdict sched_trigger_decide(spec_trigger rule, size_t n, size_t done,
                                   size_t ok, size_t failed, size_t skipped) {
  int all_done = done == n;
  switch (rule) {
  case SPEC_TRIGGER_ALL_SUCCESS:
    return failed    ? SCHED_UPSTREAM_FAILED
           : skipped ? SCHED_SKIP
           : ok == n ? SCHED_RUN
                     : SCHED_WAIT;
  case SPEC_TRIGGER_ALL_DONE:
    return all_done ? SCHED_RUN : SCHED_WAIT;
  case SPEC_TRIGGER_ONE_FAILED:
    return failed ? SCHED_RUN : all_done ? SCHED_SKIP : SCHED_WAIT;
  case SPEC_TRIGGER_NONE_FAILED:
    return failed ? SCHED_UPSTREAM_FAILED : all_done ? SCHED_RUN : SCHED_WAIT;
  case SPEC_TRIGGER_ONE_SUCCESS:
  case SPEC_TRIGGER_NONE_FAILED_MIN_ONE_SUCCESS: {
    /* Both want a success; one_success tolerates failures, the other
     * none. Once all ended without one: skipped if all were skipped. */
    int one = rule == SPEC_TRIGGER_ONE_SUCCESS;
    if (one ? ok > 0 : failed > 0)
      return one ? SCHED_RUN : SCHED_UPSTREAM_FAILED;
    if (!all_done)
      return SCHED_WAIT;
    if (skipped == n)
      return SCHED_SKIP;
    return one ? SCHED_UPSTREAM_FAILED : SCHED_RUN;
  }
  case SPEC_TRIGGER_ALL_FAILED:
    return ok || skipped ? SCHED_SKIP : failed == n ? SCHED_RUN : SCHED_WAIT;
  case SPEC_TRIGGER_ALL_SKIPPED:
    return ok || failed ? SCHED_SKIP : skipped == n ? SCHED_RUN : SCHED_WAIT;
  case SPEC_TRIGGER_NONE_SKIPPED:
    return skipped ? SCHED_SKIP : all_done ? SCHED_RUN : SCHED_WAIT;
  case SPEC_TRIGGER_COUNT:
    break;
  }
  return SCHED_WAIT;
}

/* How upstream task k ended, for reasons ("upstream task 'k' failed"). */
static const char *ended_how(task_state kst) {
  switch (kst) {
  case TASK_CANCELLED:
    return "was cancelled";
  case TASK_FAILED:
    return "failed";
  case TASK_SKIPPED:
    return "was skipped";
  case TASK_SUCCESS:
  case TASK_CACHED:
    return "succeeded";
  default:
    return "did not run";
  }
}

/* Why task d was settled without running when upstream task k ended as
 * kst. Rules that decide on the last upstream to end say what none of
 * them did; the others name the upstream task that decided. Caller
 * frees. */
static char *verdict_reason(const sched *s, size_t d, size_t k,
                            task_state kst) {
  spec_trigger rule = s->sp->tasks[d].trigger;
  const task_rt *dt = &s->t[d];
  const char *rn = spec_trigger_name(rule);
  if (rule == SPEC_TRIGGER_ONE_FAILED)
    return xasprintf("trigger one_failed: no upstream task failed");
  if ((rule == SPEC_TRIGGER_ONE_SUCCESS ||
       rule == SPEC_TRIGGER_NONE_FAILED_MIN_ONE_SUCCESS) &&
      dt->n_up_skipped == s->sp->tasks[d].n_needs)
    return xasprintf("trigger %s: every upstream task was skipped", rn);
  if (rule == SPEC_TRIGGER_ONE_SUCCESS)
    return xasprintf("trigger one_success: no upstream task succeeded");
  const char *kn = s->sp->tasks[k].name;
  if (rule == SPEC_TRIGGER_ALL_SUCCESS)
    return xasprintf("upstream task '%s' %s", kn, ended_how(kst));
  return xasprintf("trigger %s: upstream task '%s' %s", rn, kn, ended_how(kst));
}

/* Task k (a branch task that chose) has its chosen downstream tasks
 * marked in s->mark while on is 1, unmarked with 0. */
static void mark_chosen(sched *s, size_t k, unsigned char on) {
  const task_rt *t = &s->t[k];
  for (size_t c = 0; c < t->n_chosen; c++)
    s->mark[t->chosen[c]] = on;
}

/* Upstream task k ended as kst: each of its downstream tasks counts it,
 * and those that still wait and whose trigger rule (or k's branch) now
 * decides are queued, or claimed: their state set and pushed onto the
 * worklist, for the caller to settle. O(1) per edge. */
static void release_downstream(sched *s, size_t k, task_state kst) {
  int ok = task_state_succeeded(kst);
  int branch = ok && s->t[k].chose;
  if (branch)
    mark_chosen(s, k, 1);
  for (size_t e = s->down_start[k]; e < s->down_start[k + 1]; e++) {
    size_t d = s->down[e];
    task_rt *dt = &s->t[d];
    const spec_task *sd = &s->sp->tasks[d];
    dt->n_waiting_up--;
    if (ok)
      dt->n_up_ok++;
    else if (kst == TASK_SKIPPED)
      dt->n_up_skipped++;
    else
      dt->n_up_failed++;
    if (dt->state != TASK_WAITING)
      continue;
    sched_verdict v =
        branch && !s->mark[d]
            ? SCHED_SKIP
            : sched_trigger_decide(sd->trigger, sd->n_needs,
                                   sd->n_needs - dt->n_waiting_up, dt->n_up_ok,
                                   dt->n_up_failed, dt->n_up_skipped);
    if (v == SCHED_WAIT)
      continue;
    if (s->cancelling) {
      dt->state = TASK_CANCELLED;
      dt->reason = xstrdup("run cancelled");
    } else if (v == SCHED_RUN) {
      enqueue(s, d);
      continue;
    } else if (branch && !s->mark[d]) {
      dt->state = TASK_SKIPPED;
      dt->reason =
          xasprintf("not chosen by branch task '%s'", s->sp->tasks[k].name);
    } else {
      dt->state = v == SCHED_SKIP ? TASK_SKIPPED : TASK_UPSTREAM_FAILED;
      dt->reason = verdict_reason(s, d, k, kst);
    }
    VEC_PUSH(s->worklist, s->n_worklist, s->cap_worklist, d);
  }
  if (branch)
    mark_chosen(s, k, 0);
}

/* Settles the tasks on the worklist (their states already set): each is
 * recorded, announced, and releases its downstream tasks, which may push
 * more. Task i's event carries exit_code and duration. A worklist rather
 * than recursion: a failure at the head of a 10,000-task chain settles
 * the whole chain. */
static void drain(sched *s, size_t i, int exit_code, double duration) {
  while (s->n_worklist) {
    size_t k = s->worklist[--s->n_worklist];
    task_rt *t = &s->t[k];
    task_state kst = t->state;
    t->ended = clock_wall();
    close_metrics(t);
    s->n_terminal++;
    if (task_state_succeeded(kst))
      write_outputs(s, k);
    if (k == i)
      emit(s, k, kst, exit_code, duration, 0, t->reason);
    else
      emit(s, k, kst, -1, 0, 0, t->reason);
    release_downstream(s, k, kst);
  }
}

/* The direct downstream tasks of task i, "a, b", for messages. Caller
 * frees. */
static char *downstream_names(const sched *s, size_t i) {
  sbuf b = {0};
  for (size_t e = s->down_start[i]; e < s->down_start[i + 1]; e++)
    sbuf_printf(&b, "%s%s", e > s->down_start[i] ? ", " : "",
                s->sp->tasks[s->down[e]].name);
  return sbuf_take(&b);
}

/* Appends to t->chosen the task named name, when it is marked (a direct
 * downstream task of branch task i); -1 with *reason when not. */
static int choose_one(sched *s, size_t i, const char *name, char **reason) {
  long d = spec_task_find(s->sp, name);
  task_rt *t = &s->t[i];
  if (d < 0 || !s->mark[d]) {
    char *names = downstream_names(s, i);
    *reason =
        xasprintf("output 'branch' of task '%s' names '%s', which is "
                  "not a direct downstream task of '%s' (it may "
                  "choose from: %s)",
                  s->sp->tasks[i].name, name, s->sp->tasks[i].name, names);
    free(names);
    return -1;
  }
  t->chosen[t->n_chosen++] = (size_t)d;
  return 0;
}

/* Branch task i succeeded with outputs: sets its choice (t->chosen) from
 * its output `branch`, a task name or a JSON list of them. Returns 0, or
 * -1 with *reason (caller frees) when the output is missing, not names,
 * or names a task that is not a direct downstream task of i. */
static int branch_choose(sched *s, size_t i, const cJSON *outputs,
                         char **reason) {
  task_rt *t = &s->t[i];
  const char *name = s->sp->tasks[i].name;
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(outputs, "branch");
  *reason = NULL;
  if (!cJSON_IsString(o)) {
    char *names = downstream_names(s, i);
    *reason = xasprintf("branch task '%s' succeeded without an output "
                        "'branch' naming the downstream tasks to run (of: "
                        "%s; [] for none)",
                        name, names);
    free(names);
    return -1;
  }
  cJSON *list = cJSON_Parse(o->valuestring);
  size_t n = cJSON_IsArray(list) ? (size_t)cJSON_GetArraySize(list) : 1;
  free(t->chosen);
  t->chosen = xcalloc(n ? n : 1, sizeof(size_t));
  t->n_chosen = 0;
  for (size_t e = s->down_start[i]; e < s->down_start[i + 1]; e++)
    s->mark[s->down[e]] = 1;
  int rc = 0;
  if (!cJSON_IsArray(list)) {
    /* One name, bare (export) or as a JSON string ("export"). */
    rc = choose_one(s, i,
                    cJSON_IsString(list) ? list->valuestring : o->valuestring,
                    reason);
  } else {
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
      if (!cJSON_IsString(it)) {
        *reason = xasprintf("output 'branch' of task '%s' must be a task "
                            "name or a JSON list of task names, found %s",
                            name, o->valuestring);
        rc = -1;
      } else {
        rc = choose_one(s, i, it->valuestring, reason);
      }
      if (rc != 0)
        break;
    }
  }
  for (size_t e = s->down_start[i]; e < s->down_start[i + 1]; e++)
    s->mark[s->down[e]] = 0;
  cJSON_Delete(list);
  t->chose = rc == 0;
  return rc;
}

/* Moves task i to a terminal state and lets its downstream react. */
static void settle(sched *s, size_t i, task_state st, int exit_code,
                   double duration, const char *reason) {
  task_rt *ti = &s->t[i];
  if (reason != ti->reason) {
    free(ti->reason);
    /* Reasons go to events, the store, run.json and alerts. */
    ti->reason = masked(s, reason);
  }
  ti->state = st;
  s->n_worklist = 0;
  VEC_PUSH(s->worklist, s->n_worklist, s->cap_worklist, i);
  drain(s, i, exit_code, duration);
}

static void approval_begin(sched *s, size_t i);

static void enqueue(sched *s, size_t i) {
  if (s->sp->tasks[i].item_index == SPEC_ITEM_PENDING) {
    VEC_PUSH(s->expand, s->n_expand, s->cap_expand, i);
    s->t[i].state = TASK_QUEUED;
    emit(s, i, TASK_QUEUED, -1, 0, 0, NULL);
    return;
  }
  if (s->sp->tasks[i].approval_node) {
    approval_begin(s, i);
    return;
  }
  size_t pool = s->sp->tasks[i].pool;
  fifo *q = &s->queues[pool == SIZE_MAX ? s->sp->n_pools : pool];
  if (q->head > 0 && q->head == q->n)
    q->head = q->n = q->prep = 0;
  VEC_PUSH(q->v, q->n, q->cap, i);
  s->t[i].state = TASK_QUEUED;
  s->t[i].queued_seq = s->seq++;
  emit(s, i, TASK_QUEUED, -1, 0, 0, NULL);
}

/* Joins diagnostics into one reason line. */
static char *diags_join(const diags *d) {
  sbuf b = {0};
  for (size_t i = 0; i < d->n; i++) {
    char *m = diag_format(&d->v[i]);
    if (i)
      sbuf_puts(&b, "; ");
    sbuf_puts(&b, m);
    free(m);
  }
  return sbuf_take(&b);
}

/* The DAGRUN_* variables of task i's current attempt (worker.h). */
static cJSON *task_facts(sched *s, size_t i) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "DAGRUN_DAG", s->sp->dag);
  cJSON_AddStringToObject(f, "DAGRUN_RUN_ID", s->run->id);
  cJSON_AddStringToObject(f, "DAGRUN_RUN_DIR", s->run->path);
  cJSON_AddStringToObject(f, "DAGRUN_TRIGGER", s->run->trigger);
  cJSON_AddStringToObject(f, "DAGRUN_LOGICAL_DATE", s->run->logical_iso);
  cJSON_AddStringToObject(f, "DAGRUN_DATA_INTERVAL_START",
                          s->run->interval_start_iso);
  cJSON_AddStringToObject(f, "DAGRUN_DATA_INTERVAL_END",
                          s->run->interval_end_iso);
  cJSON_AddStringToObject(f, "DAGRUN_TASK", s->sp->tasks[i].name);
  cJSON_AddNumberToObject(f, "DAGRUN_ATTEMPT", s->t[i].attempt);
  /* The worker's grace for its attempt should dagrun die (worker.c). */
  cJSON_AddNumberToObject(
      f, "DAGRUN_KILL_GRACE_MS",
      (double)(long long)(s->sp->tasks[i].kill_grace_s * 1000));
  cJSON_AddStringToObject(f, "DAGRUN_OUT_DIR", out_dir(s, i));
  /* Also how resume finds an attempt's process whose pid was never
   * recorded (store/resume.c). */
  char *attempt_dir = rundir_attempt(s->run, s->sp->tasks[i].name,
                                     s->t[i].attempt);
  cJSON_AddStringToObject(f, "DAGRUN_ATTEMPT_DIR", attempt_dir);
  free(attempt_dir);
  return f;
}

static cJSON *attempt_json(sched *s, size_t i, cJSON *params,
                           const char *attempt_dir) {
  const spec_task *st = &s->sp->tasks[i];
  const loader_plugin *p = s->c->plugins[s->c->task_plugin[i]];
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "plugin", p->path);
  cJSON_AddStringToObject(j, "stage", p->stage->name);
  cJSON_AddItemToObject(j, "params", params);
  cJSON *dirs = cJSON_AddObjectToObject(j, "dirs");
  char *task_dir = rundir_task(s->run, st->name);
  cJSON_AddStringToObject(dirs, "out", out_dir(s, i));
  cJSON_AddStringToObject(dirs, "task", task_dir);
  cJSON_AddStringToObject(dirs, "attempt", attempt_dir);
  cJSON_AddStringToObject(dirs, "run", s->run->path);
  cJSON_AddStringToObject(dirs, "dag", s->sp->dir);
  free(task_dir);
  cJSON *info = cJSON_AddObjectToObject(j, "info");
  cJSON_AddStringToObject(info, "dag", s->sp->dag);
  cJSON_AddStringToObject(info, "task", st->name);
  cJSON_AddStringToObject(info, "run_id", s->run->id);
  cJSON_AddNumberToObject(info, "attempt", s->t[i].attempt);
  /* The worker fails an attempt that ends without one of these. */
  if (st->outputs) {
    cJSON *outs = cJSON_AddArrayToObject(j, "outputs");
    for (size_t k = 0; k < st->outputs->n; k++)
      cJSON_AddItemToArray(outs,
                           cJSON_CreateString(st->outputs->items[k]->str));
  }
  return j;
}

/* Writes attempt.json for task i's attempt, masked when the run has
 * secrets, and sets *real to the unmasked text the worker gets instead
 * (executor.h; caller frees with cJSON_free), or NULL. params is taken
 * over. Returns 0, or -1 with *reason. */
static int write_attempt(sched *s, size_t i, cJSON *params,
                         const char *attempt_dir, const char *json_path,
                         char **real, char **reason) {
  cJSON *aj = attempt_json(s, i, params, attempt_dir);
  char *text = cJSON_PrintUnformatted(aj);
  *real = NULL;
  if (secrets_count(s->opts.secrets)) {
    *real = text;
    secrets_mask_json(s->opts.secrets, aj);
    text = cJSON_PrintUnformatted(aj);
  }
  int wrc = fileio_write_file(json_path, text, strlen(text));
  cJSON_free(text);
  cJSON_Delete(aj);
  if (wrc != 0) {
    cJSON_free(*real);
    *real = NULL;
    *reason = xasprintf("cannot write %s: %s", json_path, strerror(-wrc));
    return -1;
  }
  return 0;
}

/* What templates of the run's tasks see. */
static void task_tmpl_env(sched *s, const char *(*task_dir)(void *, size_t),
                          tmpl_env *te) {
  memset(te, 0, sizeof *te);
  te->s = s->sp;
  te->params = s->params;
  te->task_dir = task_dir;
  te->task_outputs = tmpl_task_outputs;
  te->ud = s;
  rundir_tmpl(s->run, te);
}

/* Task i's params and env resolved, ${tasks.T.dir} being task_dir's
 * answer (tmpl_task_dir for an attempt, tmpl_fp_dir for a fingerprint):
 * 0 with *params and *task_env (NULL when the task has none; caller
 * frees both in either case), or -1 with *reason when reason is not NULL
 * (caller frees). */
static int resolve_task(sched *s, size_t i,
                        const char *(*task_dir)(void *, size_t),
                        cJSON **params, cJSON **task_env, char **reason) {
  const spec_task *st = &s->sp->tasks[i];
  const loader_plugin *p = s->c->plugins[s->c->task_plugin[i]];
  tmpl_env te;
  task_tmpl_env(s, task_dir, &te);
  diags d = {0};
  *params = *task_env = NULL;
  int rc = 0;
  if (params_build(p->stage->params, loader_choices(p->stage), &te, i, params,
                   &d) != 0 ||
      (st->env && tmpl_resolve(&te, i, st->env, task_env, &d) != 0)) {
    if (reason)
      *reason = d.n ? diags_join(&d)
                    : xasprintf("params of task '%s' did not resolve",
                                st->name);
    rc = -1;
  }
  diags_free(&d);
  return rc;
}

/* The attempt has started: task i is running and holds its slots. */
static void mark_running(sched *s, size_t i) {
  s->t[i].state = TASK_RUNNING;
  s->running++;
  if (s->sp->tasks[i].pool != SIZE_MAX)
    s->pool_running[s->sp->tasks[i].pool]++;
  emit(s, i, TASK_RUNNING, -1, 0, 0, NULL);
}

/* ---- machine-wide pools (opts.pool_acquire) ----
 * Kept apart from the in-process counts: a DAG without pools, or a run
 * without the callbacks, never comes here. */

static void pool_release(sched *s, size_t i) {
  if (!s->t[i].leased)
    return;
  s->t[i].leased = 0;
  s->opts.pool_release(s->opts.obs.ud, i);
}

static void pump(sched *s);

static void on_pool_poll(uv_timer_t *timer) { pump(timer->data); }

static void on_pool_timer_closed(uv_handle_t *h) { free(h); }

static void pool_timer_close(sched *s) {
  if (s->pool_timer)
    uv_close((uv_handle_t *)s->pool_timer, on_pool_timer_closed);
  s->pool_timer = NULL;
}

/* Whether task i, taken from the head of its pool's queue, may be
 * launched: 1 when it needs no machine-wide slot or got one; 0 when the
 * pool is full elsewhere: the task goes back to the head of its queue and
 * the pool is skipped until the poll timer pumps again. */
static int pool_lease(sched *s, size_t i) {
  size_t pool = s->sp->tasks[i].pool;
  if (pool == SIZE_MAX || !s->opts.pool_acquire || s->t[i].leased)
    return 1;
  if (s->opts.pool_acquire(s->opts.obs.ud, i)) {
    s->t[i].leased = 1;
    return 1;
  }
  s->queues[pool].head--; /* next_ready just took it from there */
  s->pool_blocked[pool] = 1;
  if (!s->pool_timer) {
    s->pool_timer = xcalloc(1, sizeof(uv_timer_t));
    uv_timer_init(s->loop, s->pool_timer);
    s->pool_timer->data = s;
    /* The run's own handles keep the loop alive, not this poll. */
    uv_unref((uv_handle_t *)s->pool_timer);
  }
  if (!uv_is_active((uv_handle_t *)s->pool_timer))
    uv_timer_start(s->pool_timer, on_pool_poll, SCHED_POOL_POLL_MS,
                   SCHED_POOL_POLL_MS);
  return 0;
}

/* At the start of a pump: every pool may be asked again; the poll stops
 * when no task was refused in the last pump. */
static void pool_unblock(sched *s) {
  if (!s->pool_blocked)
    return;
  int any = 0;
  for (size_t q = 0; q < s->sp->n_pools; q++) {
    any |= s->pool_blocked[q];
    s->pool_blocked[q] = 0;
  }
  if (!any && s->pool_timer)
    uv_timer_stop(s->pool_timer);
}

/* The plan of task i's attempt when it runs without a worker (the
 * built-in exec stage, one process: execdirect.h), else NULL. */
static execdirect *direct_plan(sched *s, size_t i, const cJSON *params,
                               const char *attempt_dir, const char *log_path,
                               char **env) {
  const spec_task *st = &s->sp->tasks[i];
  size_t pi = s->c->task_plugin[i];
  if (s->plugin_direct[pi] < 0)
    s->plugin_direct[pi] =
        (signed char)execdirect_eligible(s->c->plugins[pi], 1, 0);
  if (!s->plugin_direct[pi] || gang_wanted(st))
    return NULL;
  cJSON *declared = NULL;
  if (st->outputs) {
    declared = cJSON_CreateArray();
    for (size_t k = 0; k < st->outputs->n; k++)
      cJSON_AddItemToArray(declared,
                           cJSON_CreateString(st->outputs->items[k]->str));
  }
  execdirect_spec ds = {params, s->sp->dir, attempt_dir, log_path,
                        env,    declared,   s->opts.secrets};
  return execdirect_create(&ds);
}

static void retry_or_fail(sched *s, size_t i, int worth_it, double duration,
                          char *reason);

/* Task i's next attempt begins (launch, approval_begin): counted, its
 * start time set at the first, the last attempt's outputs dropped. */
static void attempt_next(task_rt *t) {
  t->attempt++;
  if (t->attempt == 1 || t->started <= 0)
    t->started = clock_wall();
  cJSON_Delete(t->outputs);
  t->outputs = cJSON_CreateObject();
  cJSON_Delete(t->shown);
  t->shown = NULL;
}

/* Starts the next attempt of task i. A failure before the process starts
 * fails the task without retry where another attempt would meet the same
 * problem (params that do not resolve, a gang that cannot be set up);
 * one of the disk (the attempt's directory or attempt.json that cannot
 * be written: a full disk, most often) takes the task's retries, as a
 * failed attempt does, since space may be freed before the next. */
static void launch(sched *s, size_t i) {
  task_rt *t = &s->t[i];
  const spec_task *st = &s->sp->tasks[i];
  attempt_next(t);

  char err[1024];
  char *attempt_dir = rundir_attempt(s->run, st->name, t->attempt);
  char *log_path = path_join(attempt_dir, "log");
  char *json_path = path_join(attempt_dir, "attempt.json");
  char *reason = NULL, *real = NULL;
  char **env = NULL;
  gang g = {0};
  cJSON *params = NULL, *task_env = NULL, *facts = NULL;
  int disk = 0; /* the failure is the disk's: retries apply */

  /* A first attempt queued behind others had them made ahead. */
  int made = t->attempt == 1 && dirprep_claim(s->prep, i);
  int mrc = made ? 0 : fileio_mkdir_p(out_dir(s, i), 0755);
  if (mrc == 0 && !made)
    mrc = fileio_mkdir_p(attempt_dir, 0755);
  if (mrc != 0) {
    reason = xasprintf("cannot create %s: %s", attempt_dir, strerror(-mrc));
    disk = 1;
    goto failed;
  }
  if (resolve_task(s, i, tmpl_task_dir, &params, &task_env, &reason) != 0)
    goto failed;
  facts = task_facts(s, i);
  env = workerenv_build(facts, task_env);
  execdirect *direct =
      direct_plan(s, i, params, attempt_dir, log_path, env);
  int wrc = write_attempt(s, i, params, attempt_dir, json_path, &real,
                          &reason);
  params = NULL; /* taken over */
  if (wrc != 0) {
    execdirect_destroy(direct);
    disk = 1;
    goto failed;
  }
  if (gang_wanted(st) && gang_prepare(st, attempt_dir, log_path, facts,
                                      task_env, real != NULL, &env, &g,
                                      &reason) != 0)
    goto failed;
  exec_request rq = {.task = i,
                     .attempt_json = json_path,
                     .log_path = log_path,
                     .env = env,
                     .timeout_s = st->timeout_s,
                     .heartbeat_s = st->heartbeat_s,
                     .kill_grace_s = st->kill_grace_s,
                     .secrets = s->opts.secrets,
                     .attempt_text = real,
                     .direct = direct};
  gang_request(&g, &rq);
  if (s->opts.obs.attempt_start)
    s->opts.obs.attempt_start(s->opts.obs.ud, i, t->attempt, log_path);
  if (executor_start(s->x, &rq, err, sizeof(err)) != 0) {
    reason = xstrdup(err);
    goto failed;
  }
  mark_running(s, i);
  goto done;

failed:
  t->exit_code = -1;
  pool_release(s, i);
  if (disk) {
    retry_or_fail(s, i, 1, 0, reason);
    reason = NULL; /* taken over */
  } else {
    settle(s, i, TASK_FAILED, -1, 0, reason);
  }
done:
  cJSON_free(real);
  free(reason);
  workerenv_free(env);
  gang_free(&g);
  cJSON_Delete(params);
  cJSON_Delete(task_env);
  cJSON_Delete(facts);
  free(json_path);
  free(log_path);
  free(attempt_dir);
}

/* Whether task i may be taken from the cache: as its `cache:` says, and
 * when that is not written, every stage but exec. An exec task runs a
 * user's command, whose effects (a trained model, a table written
 * elsewhere, a message sent) dagrun cannot see; a user who wraps a script
 * expects it to run, so its caching is asked for, not assumed. */
static int task_cacheable(const sched *s, size_t i) {
  /* The built-in stages whose result is not a function of their inputs:
   * exec runs anything; batch_sweep measures this machine's throughput,
   * which a rerun on another machine (or the same one, busier) must
   * measure again rather than reuse. */
  static const char *const uncached[] = {"exec", "batch_sweep"};
  const spec_task *st = &s->sp->tasks[i];
  if (st->cache >= 0)
    return st->cache;
  const loader_plugin *p = s->c->plugins[s->c->task_plugin[i]];
  for (size_t k = 0; k < sizeof uncached / sizeof *uncached; k++)
    if (strcmp(p->stage->name, uncached[k]) == 0)
      return 0;
  return 1;
}

/* Task i's fingerprint (fingerprint.h) from its resolved params and env,
 * or NULL when an upstream task has none. Caller frees. */
static char *task_fingerprint(sched *s, size_t i, const cJSON *params,
                              const cJSON *task_env) {
  const spec_task *st = &s->sp->tasks[i];
  const loader_plugin *p = s->c->plugins[s->c->task_plugin[i]];
  fingerprint_upstream *up =
      xcalloc(st->n_needs ? st->n_needs : 1, sizeof(*up));
  for (size_t k = 0; k < st->n_needs; k++) {
    const task_rt *u = &s->t[st->needs[k]];
    if (!task_state_succeeded(u->state) || !u->fingerprint) {
      free(up);
      return NULL;
    }
    up[k].name = s->sp->tasks[st->needs[k]].name;
    up[k].fingerprint = u->fingerprint;
    up[k].outputs = u->outputs;
  }
  fingerprint_input in = {.stage = p->stage->name,
                          .version = p->stage->version,
                          .params = params,
                          .env = task_env,
                          .world_size = st->world_size,
                          .has_interval = s->run->has_interval,
                          .interval_start = s->run->interval_start,
                          .interval_end = s->run->interval_end,
                          .ran_in = task_cacheable(s, i) ? NULL : s->run->id,
                          .up = up,
                          .n_up = st->n_needs};
  char *hex = fingerprint_compute(&in);
  free(up);
  return hex;
}

/* Before the first attempt of task i: computes its fingerprint and, when
 * the cache may be used and has it, settles the task TASK_CACHED. Returns
 * 1 when it did (the task must not be launched). Params that do not
 * resolve give no fingerprint: launch reports them. */
static int try_cache(sched *s, size_t i) {
  task_rt *t = &s->t[i];
  if (t->cache_checked)
    return 0;
  t->cache_checked = 1;
  cJSON *params, *task_env;
  if (resolve_task(s, i, tmpl_fp_dir, &params, &task_env, NULL) == 0)
    t->fingerprint = task_fingerprint(s, i, params, task_env);
  cJSON_Delete(params);
  cJSON_Delete(task_env);
  char *from_run = NULL, *from_dir = NULL;
  cJSON *outputs = NULL;
  if (!t->fingerprint || !task_cacheable(s, i) || s->opts.no_cache ||
      !s->opts.cache_lookup ||
      !s->opts.cache_lookup(s->opts.obs.ud, i, t->fingerprint, &from_run,
                            &from_dir, &outputs))
    return 0;
  char *why = NULL;
  if (s->sp->tasks[i].branch && branch_choose(s, i, outputs, &why) != 0) {
    /* An earlier choice this DAG can no longer follow: run it. */
    free(why);
    free(from_run);
    free(from_dir);
    cJSON_Delete(outputs);
    return 0;
  }
  free(t->cached_from);
  t->cached_from = from_run;
  free(t->out_dir);
  t->out_dir = from_dir;
  cJSON_Delete(t->outputs);
  t->outputs = outputs ? outputs : cJSON_CreateObject();
  t->started = clock_wall();
  settle(s, i, TASK_CACHED, -1, 0, NULL);
  return 1;
}

/* Picks the queued task that was queued first among pools with room. */
static long next_ready(sched *s) {
  long best = -1;
  uint64_t best_seq = UINT64_MAX;
  for (size_t q = 0; q <= s->sp->n_pools; q++) {
    fifo *f = &s->queues[q];
    while (f->head < f->n && s->t[f->v[f->head]].state != TASK_QUEUED)
      f->head++;
    if (f->head == f->n)
      continue;
    if (q < s->sp->n_pools && (s->pool_running[q] >= s->sp->pools[q].size ||
                               (s->pool_blocked && s->pool_blocked[q])))
      continue;
    size_t i = f->v[f->head];
    if (s->t[i].queued_seq < best_seq) {
      best_seq = s->t[i].queued_seq;
      best = (long)q;
    }
  }
  if (best < 0)
    return -1;
  fifo *f = &s->queues[best];
  return (long)f->v[f->head++];
}

/* How far past the head of each queue directories are made ahead: enough
 * to keep every slot's next launch ready, few enough that a cancelled run
 * leaves few empty ones. */
#define PREPARE_AHEAD(s) (4 * (size_t)(s)->opts.max_parallel + 8)

/* Offers the first tasks waiting in each queue to dirprep: those whose
 * first attempt will run (not taken from the cache). */
static void prepare_ahead(sched *s) {
  for (size_t q = 0; q <= s->sp->n_pools; q++) {
    fifo *f = &s->queues[q];
    if (f->prep < f->head)
      f->prep = f->head;
    size_t end = f->head + PREPARE_AHEAD(s);
    for (; f->prep < f->n && f->prep < end; f->prep++) {
      size_t i = f->v[f->prep];
      task_rt *t = &s->t[i];
      if (t->state != TASK_QUEUED || t->attempt || t->prepped ||
          (task_cacheable(s, i) && !s->opts.no_cache && s->opts.cache_lookup))
        continue;
      if (!s->prep &&
          !(s->prep = dirprep_create(s->run->path, s->sp->n_tasks)))
        return;
      t->prepped = 1;
      dirprep_push(s->prep, i, s->sp->tasks[i].name);
    }
  }
}

/* s->down_start and s->down, the downstream lists, from the spec's
 * needs. */
static void build_down(sched *s) {
  const spec *sp = s->sp;
  size_t n = sp->n_tasks, n_edges = 0;
  free(s->down_start);
  free(s->down);
  s->down_start = xcalloc(n + 1, sizeof(size_t));
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < sp->tasks[i].n_needs; k++)
      s->down_start[sp->tasks[i].needs[k] + 1]++;
    n_edges += sp->tasks[i].n_needs;
  }
  for (size_t i = 0; i < n; i++)
    s->down_start[i + 1] += s->down_start[i];
  s->down = xcalloc(n_edges ? n_edges : 1, sizeof(size_t));
  size_t *fill = xcalloc(n ? n : 1, sizeof(size_t));
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < sp->tasks[i].n_needs; k++) {
      size_t up = sp->tasks[i].needs[k];
      s->down[s->down_start[up] + fill[up]++] = i;
    }
  free(fill);
}

/* ---- maps over run-time lists (mapping.h) ---- */

/* The list placeholder p's map expands over, recorded when p succeeded
 * before (a resume), else read from the upstream output it names: 0 with
 * *items (caller frees), or -1 with *reason (caller frees). */
static int map_list(sched *s, size_t p, cJSON **items, char **reason) {
  const spec_map *m = &s->sp->maps[s->sp->tasks[p].map];
  if (m->expanded) {
    *items = cJSON_Duplicate(m->run_items, 1);
    return 0;
  }
  tmpl_env te;
  task_tmpl_env(s, tmpl_task_dir, &te);
  diags d = {0};
  cJSON *v = NULL;
  char err[512];
  int rc = tmpl_resolve(&te, p, m->node, &v, &d);
  if (rc != 0)
    *reason = d.n ? diags_join(&d)
                  : xasprintf("task '%s' maps over %s, which is not known",
                              m->name, m->node->str);
  else if (mapping_items(m, v, items, err, sizeof err) != 0)
    *reason = xstrdup(err);
  diags_free(&d);
  cJSON_Delete(v);
  return rc == 0 && *items ? 0 : -1;
}

/* The tasks from `old` on were appended to the spec: each gets its state,
 * waiting with the counts of placeholder p's upstream tasks (the needs
 * the instances share with it), and the observers hear of them. */
static void sched_grow(sched *s, size_t old, size_t p) {
  size_t n = s->sp->n_tasks;
  s->t = xrealloc(s->t, (n ? n : 1) * sizeof(task_rt));
  for (size_t i = old; i < n; i++) {
    task_rt *t = &s->t[i];
    memset(t, 0, sizeof *t);
    t->metrics_fd = -1;
    t->exit_code = -1;
    t->n_up_ok = s->t[p].n_up_ok;
    t->n_up_failed = s->t[p].n_up_failed;
    t->n_up_skipped = s->t[p].n_up_skipped;
  }
  if (s->mark) {
    s->mark = xrealloc(s->mark, n ? n : 1);
    memset(s->mark + old, 0, n - old);
  }
  build_down(s);
  if (s->opts.obs.tasks_added && n > old)
    s->opts.obs.tasks_added(s->opts.obs.ud, old, n - old);
}

/* Placeholder p's turn came: its map expands over the list, the instances
 * are queued (their trigger rule is p's, on the same upstream tasks), the
 * tasks that needed p wait for them instead, and p succeeds with the list
 * as its output `items` (which a resume reads back). A list that cannot
 * be had fails p, and so the mapped task as a whole. */
static void expand_one(sched *s, size_t p) {
  cJSON *items = NULL;
  char *reason = NULL;
  s->t[p].started = clock_wall();
  if (map_list(s, p, &items, &reason) != 0) {
    settle(s, p, TASK_FAILED, -1, 0, reason);
    free(reason);
    return;
  }
  size_t map = s->sp->tasks[p].map, old = s->sp->n_tasks;
  size_t n = (size_t)cJSON_GetArraySize(items);
  /* Who waits for p: they now wait for the n instances instead. */
  size_t nd = s->down_start[p + 1] - s->down_start[p];
  size_t *down = xmalloc((nd ? nd : 1) * sizeof(size_t));
  memcpy(down, s->down + s->down_start[p], nd * sizeof(size_t));
  int was = s->sp->maps[map].expanded;
  checked_expand(s->c, map, items);
  if (!was)
    sched_grow(s, old, p);
  for (size_t e = 0; n && !was && e < nd; e++)
    s->t[down[e]].n_waiting_up += n - 1;
  free(down);
  cJSON_Delete(s->t[p].outputs);
  s->t[p].outputs = cJSON_CreateObject();
  cJSON_AddItemToObject(s->t[p].outputs, "items", items);
  if (secrets_count(s->opts.secrets)) {
    /* The instances get the items; the store and files do not. */
    s->t[p].shown = cJSON_Duplicate(s->t[p].outputs, 1);
    secrets_mask_json(s->opts.secrets, s->t[p].shown);
  }
  settle(s, p, TASK_SUCCESS, -1, 0, NULL);
  const spec_map *m = &s->sp->maps[map];
  for (size_t i = m->first; i < m->first + m->n; i++)
    if (s->t[i].state == TASK_WAITING)
      enqueue(s, i);
}

static void expand_queued(sched *s) {
  for (size_t k = 0; k < s->n_expand && !s->cancelling; k++)
    if (s->t[s->expand[k]].state == TASK_QUEUED)
      expand_one(s, s->expand[k]);
  s->n_expand = 0;
}

static void pump(sched *s) {
  if (s->pumping) {
    s->pump_again = 1;
    return;
  }
  s->pumping = 1;
  pool_unblock(s);
  do {
    s->pump_again = 0;
    expand_queued(s);
    while (!s->cancelling && s->running < s->opts.max_parallel) {
      long i = next_ready(s);
      if (i < 0)
        break;
      if (!try_cache(s, (size_t)i) && pool_lease(s, (size_t)i))
        launch(s, (size_t)i);
    }
    /* A task settled in this pump (cached, or its launch failed) may
     * have made a placeholder ready: expanded before the pump ends. */
  } while (s->pump_again || (s->n_expand && !s->cancelling));
  if (!s->cancelling && !s->done_reported)
    prepare_ahead(s);
  s->pumping = 0;
  check_done(s);
}

typedef struct retry_ctx {
  uv_timer_t timer;
  sched *s;
  size_t task;
} retry_ctx;

static void on_retry_closed(uv_handle_t *h) { free(h->data); }

static void on_retry_fire(uv_timer_t *timer) {
  retry_ctx *rc = timer->data;
  sched *s = rc->s;
  size_t i = rc->task;
  s->t[i].retry_timer = NULL;
  uv_close((uv_handle_t *)timer, on_retry_closed);
  if (s->t[i].state != TASK_RETRY_WAIT)
    return;
  enqueue(s, i);
  pump(s);
}

static void schedule_retry(sched *s, size_t i, double delay) {
  retry_ctx *rc = xcalloc(1, sizeof(*rc));
  rc->s = s;
  rc->task = i;
  uv_timer_init(s->loop, &rc->timer);
  rc->timer.data = rc;
  s->t[i].retry_timer = &rc->timer;
  uv_timer_start(&rc->timer, on_retry_fire, (uint64_t)(delay * 1000.0), 0);
}

/* After a failed attempt of task i (duration seconds; reason taken
 * over): its retry where one is left and worth_it, else the task fails. */
static void retry_or_fail(sched *s, size_t i, int worth_it, double duration,
                          char *reason) {
  task_rt *t = &s->t[i];
  const spec_task *st = &s->sp->tasks[i];
  int made = t->attempt - t->attempt_base;
  if (made <= st->retry.retries && worth_it) {
    double delay = sched_retry_delay(&st->retry, made, next_uniform(s));
    free(t->reason);
    t->reason = masked(s, reason);
    free(reason);
    t->state = TASK_RETRY_WAIT;
    emit(s, i, TASK_RETRY_WAIT, t->exit_code, duration, delay, t->reason);
    schedule_retry(s, i, delay);
  } else {
    settle(s, i, TASK_FAILED, t->exit_code, duration, reason);
    free(reason);
  }
}

static int retry_worth_it(const spec_retry *r, const exec_result *res) {
  if (res->end != EXEC_EXITED || !r->on)
    return 1;
  for (size_t k = 0; k < r->n_on; k++)
    if (r->on[k] == res->exit_code)
      return 1;
  return 0;
}

/* reason (taken over), and why the attempt that failed with it is not
 * retried although retries are left: its exit code is not in retry_on.
 * Without it the run would end with retries to spare and say nothing of
 * them. */
static char *not_retried(const spec_retry *r, const exec_result *res,
                         char *reason) {
  sbuf b = {0};
  sbuf_printf(&b, "%s; not retried: exit %d is not in retry_on [", reason,
              res->exit_code);
  for (size_t k = 0; k < r->n_on; k++)
    sbuf_printf(&b, "%s%d", k ? ", " : "", r->on[k]);
  sbuf_putc(&b, ']');
  free(reason);
  return sbuf_take(&b);
}

static char *failure_reason_1(const spec_task *st, const exec_result *r) {
  char dur[32];
  switch (r->end) {
  case EXEC_EXITED:
    return r->error ? xasprintf("exit %d: %s", r->exit_code, r->error)
                    : xasprintf("exit %d", r->exit_code);
  case EXEC_SIGNALED: {
    const char *abbrev = sigabbrev_np(r->term_signal);
    return xasprintf("killed by signal %d (SIG%s)", r->term_signal,
                     abbrev ? abbrev : "?");
  }
  case EXEC_TIMED_OUT:
    format_duration(st->timeout_s, dur, sizeof(dur));
    return xasprintf("timed out after %s", dur);
  case EXEC_HUNG:
    format_duration(st->heartbeat_s, dur, sizeof(dur));
    return xasprintf("hung: no heartbeat for %s", dur);
  case EXEC_CANCELLED:
    break;
  }
  return xstrdup("cancelled");
}

/* Why an attempt failed; for a gang, which rank failed first and which
 * were stopped because of it (gang.h). */
static char *failure_reason(const spec_task *st, const exec_result *r) {
  char *one = failure_reason_1(st, r);
  if (r->n_ranks <= 1)
    return one;
  char *all = gang_failure_reason(r, one);
  free(one);
  return all;
}

static void on_attempt_exit(void *ud, size_t i, const exec_result *r) {
  sched *s = ud;
  task_rt *t = &s->t[i];
  const spec_task *st = &s->sp->tasks[i];
  s->running--;
  if (st->pool != SIZE_MAX)
    s->pool_running[st->pool]--;
  pool_release(s, i);
  close_metrics(t);
  t->exit_code = r->end == EXEC_EXITED ? r->exit_code : -1;
  cJSON_Delete(t->ranks);
  t->ranks = r->n_ranks > 1 ? gang_ranks_json(r) : NULL;

  char *why = NULL;
  if (r->end == EXEC_EXITED && r->exit_code == 0 && st->branch &&
      branch_choose(s, i, t->outputs, &why) != 0) {
    /* The process succeeded but its choice cannot be followed. */
    retry_or_fail(s, i, 1, r->duration_s, why);
  } else if (r->end == EXEC_EXITED && r->exit_code == 0) {
    /* The slot is free, and what is queued does not wait on this task:
     * it starts first, and this end's records (the store, outputs, the
     * view) overlap its process instead of delaying it. */
    pump(s);
    settle(s, i, TASK_SUCCESS, 0, r->duration_s, NULL);
  } else if (r->end == EXEC_CANCELLED || s->cancelling) {
    settle(s, i, TASK_CANCELLED, t->exit_code, r->duration_s, "cancelled");
  } else {
    char *reason = failure_reason(st, r);
    int worth_it = retry_worth_it(&st->retry, r);
    if (!worth_it && t->attempt - t->attempt_base <= st->retry.retries)
      reason = not_retried(&st->retry, r, reason);
    retry_or_fail(s, i, worth_it, r->duration_s, reason);
  }
  pump(s);
}

/* Task i's metric as a TensorBoard scalar too. Opened at the attempt's
 * first metric; a file that cannot be made or written is said once and
 * costs its records only. */
static void append_tfevent(sched *s, size_t i, double now, const char *name,
                           const proto_msg *m) {
  task_rt *t = &s->t[i];
  const sched_observer *o = &s->opts.obs;
  char err[1024];
  if (t->tb_failed)
    return;
  if (!t->tb) {
    char *task_dir = rundir_task(s->run, s->sp->tasks[i].name);
    int rc = tfevents_create(task_dir, now, &t->tb, err, sizeof err);
    free(task_dir);
    if (rc != 0) {
      t->tb_failed = 1;
      if (o->task_log) {
        char *z = xasprintf("TensorBoard events not written: %s", err);
        o->task_log(o->ud, i, DAGRUN_LOG_WARN, z);
        free(z);
      }
      return;
    }
  }
  if (tfevents_scalar(t->tb, now, m->step, name, (float)m->number) != 0) {
    t->tb_failed = 1;
    if (o->task_log) {
      char *z = xasprintf("TensorBoard events cut short: cannot write %s",
                          tfevents_path(t->tb));
      o->task_log(o->ud, i, DAGRUN_LOG_WARN, z);
      free(z);
    }
    tfevents_destroy(t->tb);
    t->tb = NULL;
  }
}

static void append_metric(sched *s, size_t i, const proto_msg *m) {
  task_rt *t = &s->t[i];
  double now = clock_wall();
  char *name = masked(s, m->text);
  append_tfevent(s, i, now, name, m);
  if (t->metrics_fd < 0) {
    char *task_dir = rundir_task(s->run, s->sp->tasks[i].name);
    char *path = path_join(task_dir, "metrics.jsonl");
    t->metrics_fd =
        open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    free(path);
    free(task_dir);
    if (t->metrics_fd < 0) {
      free(name);
      return;
    }
  }
  char *line = proto_metric_line(now, t->attempt, name, m->number, m->step);
  free(name);
  if (write(t->metrics_fd, line, strlen(line)) < 0) {
    /* A full disk loses metrics, not the run. */
  }
  free(line);
}

static void on_message(void *ud, size_t i, const proto_msg *m) {
  sched *s = ud;
  const sched_observer *o = &s->opts.obs;
  switch (m->type) {
  case PROTO_LOG:
    if (o->task_log) {
      char *z = masked(s, m->text);
      o->task_log(o->ud, i, m->level, z);
      free(z);
    }
    break;
  case PROTO_PROGRESS:
    if (o->task_progress) {
      char *z = masked(s, m->text);
      o->task_progress(o->ud, i, m->number, z);
      free(z);
    }
    break;
  case PROTO_METRIC:
    append_metric(s, i, m);
    break;
  case PROTO_OUTPUT:
    cJSON_DeleteItemFromObjectCaseSensitive(s->t[i].outputs, m->text);
    cJSON_AddStringToObject(s->t[i].outputs, m->text, m->value);
    /* Downstream templates get the value; files and the store do not. */
    if (secrets_count(s->opts.secrets)) {
      cJSON_Delete(s->t[i].shown);
      s->t[i].shown = cJSON_Duplicate(s->t[i].outputs, 1);
      secrets_mask_json(s->opts.secrets, s->t[i].shown);
    }
    break;
  case PROTO_HEARTBEAT:
  case PROTO_RESULT:
    break;
  }
}

/* Task i succeeded in an earlier execution of the run (resume): it stays
 * so. Its downstream tasks count it when sched_start begins. */
static void preset_succeeded(sched *s, size_t i, const sched_preset *p) {
  task_rt *t = &s->t[i];
  t->state = TASK_SUCCESS;
  t->exit_code = 0;
  t->ended = p->ended;
  t->outputs =
      p->outputs ? cJSON_Duplicate(p->outputs, 1) : cJSON_CreateObject();
  t->fingerprint = p->fingerprint ? xstrdup(p->fingerprint) : NULL;
  t->cache_checked = 1;
  s->n_terminal++;
}

sched *sched_create(uv_loop_t *loop, checked *c, const rundir *run,
                    const cJSON *params, const sched_opts *opts) {
  sched *s = xcalloc(1, sizeof(*s));
  const spec *sp = c->s;
  s->loop = loop;
  s->c = c;
  s->sp = sp;
  s->run = run;
  s->params = params;
  s->opts = *opts;
  if (s->opts.max_parallel < 1)
    s->opts.max_parallel = 1;
  s->rng = opts->seed ? opts->seed
                      : (uint64_t)(clock_wall() * 1e6) ^ (uint64_t)getpid();
  if (!s->rng)
    s->rng = 1;
  exec_callbacks cb = {on_message, on_attempt_exit, s};
  s->x = executor_create(loop, opts->worker_exe, s->run->path, &cb);
  size_t n = sp->n_tasks;
  s->t = xcalloc(n ? n : 1, sizeof(task_rt));
  for (size_t i = 0; i < n; i++) {
    s->t[i].metrics_fd = -1;
    s->t[i].exit_code = -1;
    s->t[i].n_waiting_up = sp->tasks[i].n_needs;
  }
  build_down(s);
  s->queues = xcalloc(sp->n_pools + 1, sizeof(fifo));
  s->pool_running = xcalloc(sp->n_pools + 1, sizeof(int));
  s->plugin_direct = xmalloc(c->n_plugins + 1);
  memset(s->plugin_direct, -1, c->n_plugins + 1);
  if (sp->n_pools && opts->pool_acquire)
    s->pool_blocked = xcalloc(sp->n_pools, 1);
  for (size_t i = 0; i < n && !s->mark; i++)
    if (sp->tasks[i].branch)
      s->mark = xcalloc(n, 1);
  s->opts.preset = NULL; /* borrowed for this call only */
  for (size_t i = 0; opts->preset && i < n; i++) {
    const sched_preset *p = &opts->preset[i];
    task_rt *t = &s->t[i];
    t->attempt = t->attempt_base = p->attempts > 0 ? p->attempts : 0;
    t->started = p->started;
    char *why = NULL;
    if (p->succeeded && sp->tasks[i].branch &&
        branch_choose(s, i, p->outputs, &why) != 0)
      free(why); /* a choice this DAG cannot follow: it runs again */
    else if (p->succeeded)
      preset_succeeded(s, i, p);
  }
  return s;
}

/* ---- approval tasks (see "Approval" in scheduler.h) ---- */

typedef struct approval_wait {
  uv_timer_t timer;
  sched *s;
  size_t task;
  double since; /* wall clock: when this attempt began to wait */
} approval_wait;

static void on_approval_closed(uv_handle_t *h) { free(h->data); }

static void approval_stop(task_rt *t) {
  if (!t->approval)
    return;
  uv_timer_stop(&t->approval->timer);
  uv_close((uv_handle_t *)&t->approval->timer, on_approval_closed);
  t->approval = NULL;
}

/* Appends a line to the attempt's log, which `dagrun logs` shows; a log
 * that cannot be written loses the line, not the approval. */
static void approval_log(sched *s, size_t i, const char *line) {
  char *dir = rundir_attempt(s->run, s->sp->tasks[i].name, s->t[i].attempt);
  char *path = path_join(dir, "log");
  FILE *f = fopen(path, "a");
  if (f) {
    fprintf(f, "%s\n", line);
    fclose(f);
  }
  free(path);
  free(dir);
}

static void on_approval_tick(uv_timer_t *timer) {
  approval_wait *w = timer->data;
  sched *s = w->s;
  size_t i = w->task;
  task_rt *t = &s->t[i];
  const spec_task *st = &s->sp->tasks[i];
  cJSON *outputs = NULL;
  char *reason = NULL;
  int d = s->opts.approval_poll
              ? s->opts.approval_poll(s->opts.obs.ud, i, t->attempt, &outputs,
                                      &reason)
              : 0;
  double waited = clock_wall() - w->since;
  if (d == 0 &&
      !(st->approval_timeout_s > 0 && waited >= st->approval_timeout_s))
    return;
  approval_stop(t);
  if (d > 0) {
    if (outputs) {
      cJSON_Delete(t->outputs);
      t->outputs = outputs;
    }
    approval_log(s, i, "approved");
    settle(s, i, TASK_SUCCESS, 0, waited, NULL);
  } else if (d < 0) {
    char *why =
        xasprintf("rejected%s%s", reason ? ": " : "", reason ? reason : "");
    approval_log(s, i, why);
    settle(s, i, TASK_FAILED, -1, waited, why);
    free(why);
  } else {
    char dur[32];
    format_duration(st->approval_timeout_s, dur, sizeof(dur));
    char *why = xasprintf("approval timed out after %s", dur);
    approval_log(s, i, why);
    retry_or_fail(s, i, 1, waited, why);
  }
  free(reason);
  pump(s);
}

/* Called where another task would be queued: the task's next attempt
 * begins to wait, holding no slot. */
static void approval_begin(sched *s, size_t i) {
  task_rt *t = &s->t[i];
  const spec_task *st = &s->sp->tasks[i];
  attempt_next(t);
  t->exit_code = -1;
  char *attempt_dir = rundir_attempt(s->run, st->name, t->attempt);
  char *log_path = path_join(attempt_dir, "log");
  if (fileio_mkdir_p(attempt_dir, 0755) == 0) {
    char *line =
        xasprintf("waiting for approval%s%s", st->approval_message ? ": " : "",
                  st->approval_message ? st->approval_message : "");
    approval_log(s, i, line);
    free(line);
  }
  if (s->opts.obs.attempt_start)
    s->opts.obs.attempt_start(s->opts.obs.ud, i, t->attempt, log_path);
  free(log_path);
  free(attempt_dir);
  approval_wait *w = xcalloc(1, sizeof(*w));
  w->s = s;
  w->task = i;
  w->since = clock_wall();
  uv_timer_init(s->loop, &w->timer);
  w->timer.data = w;
  t->approval = w;
  t->state = TASK_WAITING_APPROVAL;
  emit(s, i, TASK_WAITING_APPROVAL, -1, 0, 0, st->approval_message);
  uv_timer_start(&w->timer, on_approval_tick, SCHED_APPROVAL_POLL_MS,
                 SCHED_APPROVAL_POLL_MS);
}

void sched_start(sched *s) {
  /* What succeeded before a resume decides for its downstream first, as
   * it did then (skips and branches included). */
  for (size_t i = 0; i < s->sp->n_tasks; i++)
    if (task_state_succeeded(s->t[i].state)) {
      s->n_worklist = 0;
      release_downstream(s, i, s->t[i].state);
      drain(s, SIZE_MAX, -1, 0);
    }
  for (size_t i = 0; i < s->sp->n_tasks; i++)
    if (s->sp->tasks[i].n_needs == 0 && s->t[i].state == TASK_WAITING)
      enqueue(s, i);
  pump(s);
}

void sched_cancel(sched *s, int force) {
  s->cancelling = 1;
  for (size_t i = 0; i < s->sp->n_tasks; i++) {
    task_rt *t = &s->t[i];
    switch (t->state) {
    case TASK_RETRY_WAIT:
      if (t->retry_timer) {
        uv_timer_stop(t->retry_timer);
        uv_close((uv_handle_t *)t->retry_timer, on_retry_closed);
        t->retry_timer = NULL;
      }
      /* fall through */
    case TASK_WAITING:
    case TASK_QUEUED:
      settle(s, i, TASK_CANCELLED, -1, 0, "run cancelled");
      break;
    case TASK_WAITING_APPROVAL:
      approval_stop(t);
      settle(s, i, TASK_CANCELLED, -1, 0, "run cancelled");
      break;
    case TASK_RUNNING:
      executor_cancel(s->x, i, force);
      break;
    default:
      break;
    }
  }
  check_done(s);
}

int sched_guard_pid(const sched *s) { return executor_guard_pid(s->x); }

void sched_counts(const sched *s, size_t counts[TASK_STATE_COUNT]) {
  memset(counts, 0, sizeof(size_t) * TASK_STATE_COUNT);
  for (size_t i = 0; i < s->sp->n_tasks; i++)
    counts[s->t[i].state]++;
}

task_state sched_task_state(const sched *s, size_t task) {
  return s->t[task].state;
}

const cJSON *sched_task_outputs(const sched *s, size_t task) {
  return shown_outputs(&s->t[task]);
}

const char *sched_task_fingerprint(const sched *s, size_t task) {
  const task_rt *t = &s->t[task];
  /* Outputs recorded masked cannot be reused: the store has no cache
   * entry for the task (its downstream still has fingerprints). */
  if (t->shown && !cJSON_Compare(t->shown, t->outputs, 1))
    return NULL;
  return t->fingerprint;
}

const char *sched_task_cached_from(const sched *s, size_t task) {
  return s->t[task].cached_from;
}

static void add_time(cJSON *j, const char *key, double t) {
  char buf[40];
  if (t <= 0)
    return;
  format_utc(t, 1, buf, sizeof(buf));
  cJSON_AddStringToObject(j, key, buf);
}

cJSON *sched_tasks_json(const sched *s) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < s->sp->n_tasks; i++) {
    const task_rt *t = &s->t[i];
    const spec_task *st = &s->sp->tasks[i];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", st->name);
    cJSON_AddStringToObject(j, "stage", st->stage);
    cJSON *needs = cJSON_AddArrayToObject(j, "needs");
    for (size_t k = 0; k < st->n_needs; k++)
      cJSON_AddItemToArray(
          needs, cJSON_CreateString(s->sp->tasks[st->needs[k]].name));
    cJSON_AddStringToObject(j, "state", task_state_name(t->state));
    cJSON_AddNumberToObject(j, "attempts", t->attempt);
    if (t->exit_code >= 0)
      cJSON_AddNumberToObject(j, "exit_code", t->exit_code);
    add_time(j, "started", t->started);
    add_time(j, "ended", t->ended);
    if (t->started > 0 && t->ended > 0)
      cJSON_AddNumberToObject(j, "duration_s", t->ended - t->started);
    if (t->reason && !task_state_succeeded(t->state))
      cJSON_AddStringToObject(j, "reason", t->reason);
    if (t->cached_from)
      cJSON_AddStringToObject(j, "cached_from", t->cached_from);
    if (t->fingerprint)
      cJSON_AddStringToObject(j, "fingerprint", t->fingerprint);
    if (t->outputs && t->outputs->child)
      cJSON_AddItemToObject(j, "outputs", cJSON_Duplicate(shown_outputs(t), 1));
    if (st->world_size > 1)
      cJSON_AddNumberToObject(j, "world_size", st->world_size);
    if (t->ranks)
      cJSON_AddItemToObject(j, "ranks", cJSON_Duplicate(t->ranks, 1));
    cJSON_AddItemToArray(arr, j);
  }
  return arr;
}

void sched_destroy(sched *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->sp->n_tasks; i++) {
    cJSON_Delete(s->t[i].outputs);
    cJSON_Delete(s->t[i].shown);
    free(s->t[i].reason);
    free(s->t[i].out_dir);
    free(s->t[i].fingerprint);
    free(s->t[i].cached_from);
    free(s->t[i].fp_dir);
    cJSON_Delete(s->t[i].ranks);
    free(s->t[i].chosen);
    close_metrics(&s->t[i]);
    approval_stop(&s->t[i]);
  }
  for (size_t q = 0; q <= s->sp->n_pools; q++)
    free(s->queues[q].v);
  free(s->queues);
  free(s->pool_running);
  free(s->plugin_direct);
  free(s->pool_blocked);
  free(s->down_start);
  free(s->down);
  free(s->t);
  free(s->worklist);
  free(s->expand);
  dirprep_destroy(s->prep);
  free(s->mark);
  executor_destroy(s->x);
  free(s);
}
