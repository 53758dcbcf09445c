/*
 * history: a run's life written to the run store as it happens, and the
 * `dagrun runs`, `status` and `logs` commands that read it back; what is
 * recorded and when is in history.h.
 */
#include "history.h"
#include "datastate.h"
#include "pause.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/util.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "lib/sha256.h"


struct history {
  store *st;
  const spec *sp;
  char *run_id;
  int broken;        /* a write failed: recording stopped */
  int *open_attempt; /* per task: the attempt recorded as started, or 0 */
  int *last_exit;    /* per task: the last attempt's exit code, or -1 */
  char **last_error; /* per task: the last failure's reason */
  int pid;           /* this dagrun, as pool leases name it */
  long long pid_start;
  char err[1024];
};

store *history_store(const history *h) { return h ? h->st : NULL; }

static void broke(history *h) {
  if (!h->broken)
    fprintf(stderr,
            "dagrun: %s\ndagrun: the rest of this run is not recorded in "
            "the run store (run.json still is)\n",
            h->err);
  h->broken = 1;
}

static history *history_new(store *st, const spec *sp, const char *run_id) {
  history *h = xcalloc(1, sizeof(*h));
  size_t n = sp->n_tasks ? sp->n_tasks : 1;
  h->st = st;
  h->sp = sp;
  h->run_id = xstrdup(run_id);
  h->open_attempt = xcalloc(n, sizeof(int));
  h->last_exit = xcalloc(n, sizeof(int));
  h->last_error = xcalloc(n, sizeof(char *));
  for (size_t i = 0; i < sp->n_tasks; i++)
    h->last_exit[i] = -1;
  h->pid = (int)getpid();
  h->pid_start = proc_start_time(h->pid);
  store_batch_start(st);
  return h;
}

char *history_dag_sha256(const char *path) {
  char *data;
  size_t n;
  if (fileio_read_file(path, &data, &n) != 0)
    return NULL;
  char *hex = sha256_hex(data, n);
  free(data);
  return hex;
}

int history_begin(store *st, const spec *sp, const rundir *run,
                  const char *params_json, const char *trigger,
                  double logical_date, history **out, char *err,
                  size_t errlen) {
  *out = NULL;
  const char **names = xcalloc(sp->n_tasks ? sp->n_tasks : 1, sizeof(char *));
  for (size_t i = 0; i < sp->n_tasks; i++)
    names[i] = sp->tasks[i].name;
  char *abs = realpath(sp->path, NULL);
  char *dag_sha = history_dag_sha256(sp->path);
  int rc = store_run_begin(st, run->id, sp->dag, abs ? abs : sp->path,
                           run->path, run->started, params_json, trigger,
                           logical_date, dag_sha, names,
                           sp->n_tasks, err, errlen);
  free(abs);
  free(dag_sha);
  free(names);
  if (rc == 0)
    rc = store_run_claim(st, run->id, owner_here(), 0, 0, err, errlen);
  if (rc != 0)
    return rc;
  *out = history_new(st, sp, run->id);
  return 0;
}

int history_resume(store *st, const spec *sp, const char *run_id,
                   const sched_preset *preset, history **out, char *err,
                   size_t errlen) {
  *out = NULL;
  for (size_t i = 0; i < sp->n_tasks; i++) {
    if (preset[i].succeeded)
      continue;
    store_task_update u = {
        "waiting", preset[i].attempts, -1, NULL, 0, 0, NULL, NULL, NULL};
    int rc = store_task_set(st, run_id, sp->tasks[i].name, &u, err, errlen);
    if (rc != 0)
      return rc;
  }
  *out = history_new(st, sp, run_id);
  return 0;
}

void history_guard(history *h, int guard) {
  if (!h || h->broken || guard <= 0)
    return;
  if (store_run_guard(h->st, h->run_id, h->pid, guard, proc_start_time(guard),
                      h->err, sizeof h->err) != 0)
    broke(h);
}

void history_beat(history *h) {
  char err[256];
  if (h && !h->broken)
    (void)store_run_beat(h->st, h->run_id, h->pid, clock_wall(), err,
                         sizeof err);
}

void history_tasks_added(history *h, size_t first, size_t n) {
  if (!h)
    return;
  size_t total = first + n;
  h->open_attempt = xrealloc(h->open_attempt, total * sizeof(int));
  h->last_exit = xrealloc(h->last_exit, total * sizeof(int));
  h->last_error = xrealloc(h->last_error, total * sizeof(char *));
  const char **names = xcalloc(n ? n : 1, sizeof(char *));
  for (size_t i = first; i < total; i++) {
    h->open_attempt[i] = 0;
    h->last_exit[i] = -1;
    h->last_error[i] = NULL;
    names[i - first] = h->sp->tasks[i].name;
  }
  if (!h->broken &&
      store_tasks_add(h->st, h->run_id, names, n, h->err, sizeof h->err) != 0)
    broke(h);
  free(names);
}

void history_attempt_start(history *h, size_t task, int attempt,
                           const char *log_path) {
  if (!h || h->broken)
    return;
  if (store_attempt_begin(h->st, h->run_id, h->sp->tasks[task].name, attempt,
                          log_path, clock_wall(), h->err, sizeof h->err) != 0) {
    broke(h);
    return;
  }
  h->open_attempt[task] = attempt;
  history_flush(h);
}

void history_flush(history *h) {
  /* Even where recording stopped: a batch left open would hold the
   * store's write lock against every other dagrun. */
  if (!h)
    return;
  if (store_batch_commit(h->st, h->err, sizeof h->err) != 0)
    broke(h);
}

/* A success of a task that `produces:` datasets: a new version of each
 * (datastate.h), which `dagrun serve` hands to the DAGs that wait on it.
 * A cached task made nothing new: no version. */
static void record_datasets(history *h, const spec_task *t,
                            const char *outputs) {
  for (size_t k = 0; k < t->n_produces && !h->broken; k++) {
    long long version;
    if (store_dataset_add(h->st, t->produces[k], h->run_id, h->sp->dag, t->name,
                          outputs, clock_wall(), &version, h->err,
                          sizeof h->err) != 0)
      broke(h);
  }
}

void history_task_event(history *h, const sched *s, const sched_event *e) {
  if (!h || h->broken || e->state == TASK_WAITING)
    return;
  size_t i = e->task;
  const char *name = h->sp->tasks[i].name;
  double now = clock_wall();
  if (e->state == TASK_RUNNING) {
    /* The task row went to "running" with the attempt's start. */
    if (h->open_attempt[i] == e->attempt && e->pid > 0 &&
        store_attempt_pid(h->st, h->run_id, name, e->attempt, e->pid,
                          proc_start_time(e->pid), h->err, sizeof h->err) != 0)
      broke(h);
    return;
  }
  int terminal = task_state_terminal(e->state);
  if (e->state == TASK_RETRY_WAIT || terminal) {
    if (e->exit_code >= 0 || h->open_attempt[i] == e->attempt)
      h->last_exit[i] = e->exit_code;
    if (e->reason) {
      free(h->last_error[i]);
      h->last_error[i] = xstrdup(e->reason);
    }
  }
  char *outputs = NULL;
  int ok = task_state_succeeded(e->state);
  const cJSON *o = ok ? sched_task_outputs(s, i) : NULL;
  if (o && o->child)
    outputs = cJSON_PrintUnformatted(o);
  store_task_update u = {task_state_name(e->state),
                         e->attempt,
                         h->last_exit[i],
                         ok ? NULL : h->last_error[i],
                         0,
                         terminal ? now : 0,
                         outputs,
                         sched_task_fingerprint(s, i),
                         e->state == TASK_CACHED ? e->cached_from : NULL};
  int rc;
  if ((e->state == TASK_RETRY_WAIT || terminal) && e->attempt > 0 &&
      h->open_attempt[i] == e->attempt) {
    const char *ast = e->state == TASK_SUCCESS     ? "success"
                      : e->state == TASK_CANCELLED ? "cancelled"
                                                   : "failed";
    h->open_attempt[i] = 0;
    rc =
        store_attempt_end(h->st, h->run_id, name, e->attempt, ast, e->exit_code,
                          e->state == TASK_SUCCESS ? NULL : e->reason, now, &u,
                          h->err, sizeof h->err);
  } else {
    rc = store_task_set(h->st, h->run_id, name, &u, h->err, sizeof h->err);
  }
  if (rc != 0)
    broke(h);
  /* A map's placeholder ran nothing: its instances produce the data. */
  if (rc == 0 && e->state == TASK_SUCCESS &&
      h->sp->tasks[i].item_index != SPEC_ITEM_PENDING)
    record_datasets(h, &h->sp->tasks[i], outputs);
  cJSON_free(outputs);
}

/* A store that fails here is said once, as for every write, and the run
 * goes on: pools then hold within this run only, and max_active_runs is
 * not kept, rather than a run stuck waiting on a store it cannot use. */
int history_pool_acquire(history *h, size_t task, const char *pool, int size,
                         char **why) {
  *why = NULL;
  if (!h || h->broken)
    return 1;
  int rc = store_lease_acquire(h->st, pool, size, h->run_id,
                               h->sp->tasks[task].name, h->pid, h->pid_start,
                               clock_wall(), why, h->err, sizeof h->err);
  if (rc < 0) {
    broke(h);
    return 1;
  }
  return rc;
}

void history_pool_release(history *h, size_t task) {
  if (!h || h->broken)
    return;
  if (store_lease_release(h->st, h->run_id, h->sp->tasks[task].name, h->err,
                          sizeof h->err) != 0)
    broke(h);
}

int history_approval_poll(history *h, size_t task, int attempt, cJSON **outputs,
                          char **reason) {
  *outputs = NULL;
  *reason = NULL;
  if (!h || h->broken)
    return 0;
  history_flush(h);
  cJSON *all = store_approvals(h->st, h->run_id, h->sp->tasks[task].name, 0,
                               h->err, sizeof h->err);
  if (!all) {
    broke(h);
    return 0;
  }
  int rc = 0;
  for (const cJSON *a = all->child; a; a = a->next) {
    const char *d = cJSON_GetStringValue(cJSON_GetObjectItem(a, "decision"));
    const char *by = cJSON_GetStringValue(cJSON_GetObjectItem(a, "by"));
    const char *via = cJSON_GetStringValue(cJSON_GetObjectItem(a, "via"));
    const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(a, "reason"));
    int n = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(a, "attempt"));
    if (!d || !by || !via)
      continue;
    if (strcmp(d, "approved") == 0) {
      cJSON_Delete(*outputs);
      *outputs = cJSON_CreateObject();
      cJSON_AddStringToObject(*outputs, "approved_by", by);
      cJSON_AddStringToObject(*outputs, "approved_via", via);
      rc = 1;
    } else if (n == attempt) {
      free(*reason);
      *reason = xasprintf("by %s via %s%s%s", by, via, why ? ": " : "",
                          why ? why : "");
      rc = -1;
    }
  }
  if (rc != 1) {
    cJSON_Delete(*outputs);
    *outputs = NULL;
  }
  if (rc != -1) {
    free(*reason);
    *reason = NULL;
  }
  cJSON_Delete(all);
  return rc;
}

int history_admit(history *h, int max, char **why) {
  *why = NULL;
  if (!h || h->broken)
    return 1;
  int rc = store_run_admit(h->st, h->run_id, h->sp->dag, max, why, h->err,
                           sizeof h->err);
  if (rc < 0) {
    broke(h);
    return 1;
  }
  return rc;
}

void history_finish(history *h, const char *state) {
  if (!h)
    return;
  if (store_batch_stop(h->st, h->err, sizeof h->err) != 0 && !h->broken)
    broke(h);
  /* Tried even where recording stopped (a full disk, most often): the
   * run's end may fit now (the run's reserve is freed), and without it
   * the store would show the run as running. */
  if (store_run_finish(h->st, h->run_id, state, clock_wall(), h->err,
                       sizeof h->err) != 0) {
    if (h->broken)
      fprintf(stderr, "dagrun: nor the run's end (%s): %s\n", state, h->err);
    broke(h);
  } else if (h->broken) {
    fprintf(stderr,
            "dagrun: the run's end (%s) is recorded in the run store; its "
            "tasks' records stop where recording stopped\n",
            state);
  }
  for (size_t i = 0; i < h->sp->n_tasks; i++)
    free(h->last_error[i]);
  free(h->last_error);
  free(h->last_exit);
  free(h->open_attempt);
  free(h->run_id);
  free(h);
}

/* ---- commands ---- */

/* Opens the store for reading. Returns 0 with *st; DR_ENOENT when there is
 * no store yet (nothing was ever recorded there); else says why and
 * returns an error. */
static int open_for_reading(store **st) {
  char err[1024];
  char *path = store_default_path();
  int rc = store_open(path, 0, st, err, sizeof err);
  if (rc == DR_ENOENT)
    fprintf(stderr,
            "dagrun: no run store at %s: no run recorded there yet (runs "
            "are recorded in $DAGRUN_HOME/state.db, else "
            ".dagrun/state.db under the directory dagrun ran in)\n",
            path);
  else if (rc != 0)
    fprintf(stderr, "dagrun: %s\n", err);
  free(path);
  return rc;
}

static void fmt_time(double t, char *buf, size_t n) {
  if (t > 0)
    format_utc(t, 0, buf, n);
  else
    snprintf(buf, n, "-");
}

/* finished - started, or how long it has been going. */
static void fmt_span(const cJSON *o, char *buf, size_t n) {
  double a = store_num(o, "started", 0), b = store_num(o, "finished", 0);
  if (a <= 0) {
    snprintf(buf, n, "-");
    return;
  }
  format_duration((b > 0 ? b : clock_wall()) - a, buf, n);
}

static void print_json(cJSON *j) {
  char *text = cJSON_Print(j);
  printf("%s\n", text);
  cJSON_free(text);
}

/* What started a data-triggered run (store_trigger_summary), as a
 * terminal may show it: the files' names are whatever landed in the
 * watched directory. "" for other runs. Caller frees. */
static char *trigger_shown(const cJSON *run) {
  char what[160];
  store_trigger_summary(run, what, sizeof what);
  return xstrdup_shown(what);
}

/* A run's tags as "a, b" into buf ("" for none). */
static void fmt_tags(const cJSON *run, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  const cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItem(run, "tags")) {
    if (cJSON_IsString(t) && used < n)
      used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "",
                               t->valuestring);
  }
}

/* Prints "PREFIX" then member k of o as a terminal shows text from
 * outside (sbuf_put_shown: what people wrote through the API, a pool's
 * holder; its newlines as nl, NULL: one line), then a newline; nothing
 * when o has no such member. */
static void print_shown(const char *prefix, const cJSON *o, const char *k,
                        const char *nl) {
  const char *z = store_str(o, k, NULL);
  if (!z)
    return;
  sbuf b = {0};
  sbuf_puts(&b, prefix);
  sbuf_put_shown(&b, z, strlen(z), nl);
  printf("%s\n", b.s);
  sbuf_free(&b);
}

/* The lines under `dagrun runs`' table: what the columns cannot say. */
static void print_run_notes(const cJSON *runs) {
  /* Runs whose dagrun is gone (store.c): what to do about each. */
  for (cJSON *r = runs->child; r; r = r->next)
    if (store_str(r, "note", NULL))
      printf("%s %s\n", store_str(r, "id", "?"), store_str(r, "note", ""));
  /* Queued runs (max_active_runs): what each waits for. */
  for (cJSON *r = runs->child; r; r = r->next) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%.80s waiting: ", store_str(r, "id", "?"));
    print_shown(prefix, r, "waiting", NULL);
  }
  /* Tasks counted as done that did not run in that run. */
  for (cJSON *r = runs->child; r; r = r->next)
    if (store_num(r, "tasks_cached", 0) > 0)
      printf("%s %d of %d tasks cached from %s\n", store_str(r, "id", "?"),
             (int)store_num(r, "tasks_cached", 0),
             (int)store_num(r, "tasks_total", 0),
             store_str(r, "cached_from", "?"));
  /* What people wrote on runs: tags, and a note's first line. */
  for (cJSON *r = runs->child; r; r = r->next) {
    char tags[1024];
    fmt_tags(r, tags, sizeof tags);
    if (tags[0])
      printf("%s tags: %s\n", store_str(r, "id", "?"), tags);
    const char *note = store_str(r, "user_note", NULL);
    if (note) {
      sbuf b = {0};
      sbuf_put_shown(&b, note, strcspn(note, "\n"), NULL);
      printf("%s note: %s%s\n", store_str(r, "id", "?"), b.s ? b.s : "",
             strchr(note, '\n') ? " ..." : "");
      sbuf_free(&b);
    }
  }
}

int history_cmd_runs(int argc, char **argv) {
  const char *dag = NULL, *tag = NULL;
  long limit = 20;
  int json = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--tag") == 0) {
      if (i + 1 >= argc)
        return cli_usage_error("%s needs a tag", "--tag");
      tag = argv[++i];
    } else if (strcmp(argv[i], "-n") == 0) {
      if (i + 1 >= argc || cli_number(argv[++i], 1, 1000000, &limit) != 0)
        return cli_usage_error("-n needs a number >= 1, got '%s'",
                     i < argc ? argv[i] : "");
    } else if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (argv[i][0] == '-') {
      return cli_usage_error("unknown option '%s' for runs", argv[i]);
    } else if (!dag) {
      dag = argv[i];
    } else {
      return cli_usage_error("runs takes one DAG name, got also '%s'", argv[i]);
    }
  }
  store *st;
  int rc = open_for_reading(&st);
  if (rc == DR_ENOENT) {
    if (json)
      printf("[]\n");
    return 0;
  }
  if (rc != 0)
    return EXIT_FAILED;
  char err[1024];
  cJSON *runs =
      store_runs_tagged(st, dag, NULL, tag, (int)limit, err, sizeof err);
  if (!runs) {
    fprintf(stderr, "dagrun: %s\n", err);
    store_close(st);
    return EXIT_FAILED;
  }
  if (json) {
    print_json(runs);
  } else if (!runs->child) {
    fprintf(stderr, "dagrun: no runs%s%s%s%s recorded in %s\n",
            dag ? " of " : "", dag ? dag : "", tag ? " tagged " : "",
            tag ? tag : "", store_path(st));
  } else {
    printf("%-26s %-16s %-10s %-21s %9s %-6s %-8s %s\n", "RUN", "DAG",
           "STATE", "STARTED", "DURATION", "TASKS", "TRIGGER", "FOR");
    for (cJSON *r = runs->child; r; r = r->next) {
      char t[40], d[32], tasks[32], logical[40] = "";
      fmt_time(store_num(r, "started", 0), t, sizeof t);
      fmt_span(r, d, sizeof d);
      snprintf(tasks, sizeof tasks, "%d/%d",
               (int)store_num(r, "tasks_succeeded", 0),
               (int)store_num(r, "tasks_total", 0));
      /* Every run has a logical date; a manual run's is its start, not
       * worth a column of its own unless it was given. */
      double ld = store_num(r, "logical_date", 0);
      if (ld > 0 && (strcmp(store_str(r, "trigger", "manual"), "manual") != 0 ||
                     fabs(ld - store_num(r, "started", 0)) >= 1))
        fmt_time(ld, logical, sizeof logical);
      /* A data-triggered run stands for what started it. */
      char *what = trigger_shown(r);
      printf("%-26s %-16s %-10s %-21s %9s %-6s %-8s %s\n",
             store_str(r, "id", "?"), store_str(r, "dag", "?"),
             store_str(r, "state", "?"), t, d, tasks,
             store_str(r, "trigger", "manual"), *what ? what : logical);
      free(what);
    }
    print_run_notes(runs);
  }
  cJSON_Delete(runs);
  store_close(st);
  return 0;
}

/* Finds a run by id or unique prefix; prints why not and returns the exit
 * status when it cannot. */
static int find_run(store *st, const char *id, cJSON **run) {
  char err[1024];
  int rc;
  *run = store_run(st, id, &rc, err, sizeof err);
  if (*run)
    return 0;
  fprintf(stderr, "dagrun: %s\n", err);
  return rc == DR_ENOENT || rc == DR_EINVAL ? EXIT_USAGE : EXIT_FAILED;
}

int history_open_run(const char *id_prefix, store **st, cJSON **run) {
  char err[1024];
  char *path = store_default_path();
  int rc = store_open(path, 0, st, err, sizeof err);
  if (rc == DR_ENOENT)
    fprintf(stderr, "dagrun: no run store at %s: no run recorded there\n",
            path);
  else if (rc != 0)
    fprintf(stderr, "dagrun: %s\n", err);
  free(path);
  if (rc != 0) {
    *st = NULL;
    return rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
  }
  *run = store_run(*st, id_prefix, &rc, err, sizeof err);
  if (!*run) {
    fprintf(stderr, "dagrun: %s\n", err);
    store_close(*st);
    *st = NULL;
    return rc == DR_ESTORE ? EXIT_FAILED : EXIT_USAGE;
  }
  return 0;
}

int history_cmd_status(int argc, char **argv) {
  const char *id = NULL;
  int json = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (argv[i][0] == '-')
      return cli_usage_error("unknown option '%s' for status", argv[i]);
    else if (!id)
      id = argv[i];
    else
      return cli_usage_error("status takes one run id, got also '%s'", argv[i]);
  }
  if (!id)
    return cli_usage_error("%s", "status needs a run id (see dagrun runs)");
  store *st;
  int rc = open_for_reading(&st);
  if (rc != 0)
    return rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
  cJSON *run;
  if ((rc = find_run(st, id, &run)) != 0) {
    store_close(st);
    return rc;
  }
  if (json) {
    /* Every task has cached_from: the run it was taken from, or null. */
    cJSON *tasks = cJSON_GetObjectItem(run, "tasks");
    for (cJSON *k = tasks ? tasks->child : NULL; k; k = k->next)
      if (!cJSON_GetObjectItem(k, "cached_from"))
        cJSON_AddNullToObject(k, "cached_from");
    print_json(run);
  } else {
    char t[40], d[32];
    fmt_time(store_num(run, "started", 0), t, sizeof t);
    fmt_span(run, d, sizeof d);
    printf("run %s  dag %s  %s\n", store_str(run, "id", "?"),
           store_str(run, "dag", "?"), store_str(run, "state", "?"));
    if (store_str(run, "note", NULL))
      printf("%s\n", store_str(run, "note", ""));
    char paused[512];
    pause_say(st, store_str(run, "dag", ""), paused, sizeof paused);
    if (paused[0])
      printf("%s\n", paused);
    print_shown("waiting: ", run, "waiting", NULL);
    char tags[1024];
    fmt_tags(run, tags, sizeof tags);
    if (tags[0])
      printf("tags: %s\n", tags);
    print_shown("note: ", run, "user_note", "\n      ");
    printf("started %s, %s %s\n", t,
           store_num(run, "finished", 0) > 0 ? "took" : "running for", d);
    char *what = trigger_shown(run);
    if (*what)
      printf("triggered by %s\n", what);
    free(what);
    printf("file %s\ndir  %s\n\n", store_str(run, "dag_file", "-"),
           store_str(run, "run_dir", "-"));
    printf("%-20s %-16s %8s %5s %9s  %s\n", "TASK", "STATE", "ATTEMPTS", "EXIT",
           "DURATION", "ERROR");
    cJSON *tasks = cJSON_GetObjectItem(run, "tasks");
    for (cJSON *k = tasks ? tasks->child : NULL; k; k = k->next) {
      char code[16];
      double ec = store_num(k, "exit_code", -1);
      if (ec >= 0)
        snprintf(code, sizeof code, "%d", (int)ec);
      else
        snprintf(code, sizeof code, "-");
      fmt_span(k, d, sizeof d);
      /* A task taken from the cache did not run: say from which run. */
      const char *from = store_str(k, "cached_from", NULL);
      const char *waiting = store_str(k, "waiting", NULL);
      char note[320] = "";
      if (from && *from)
        snprintf(note, sizeof note, "cached from %s", from);
      /* A queued task held back by a machine-wide pool: by whom. */
      else if (waiting && strcmp(store_str(k, "state", ""), "queued") == 0) {
        char *shown = xstrdup_shown(waiting);
        snprintf(note, sizeof note, "waiting for %s", shown);
        free(shown);
      }
      /* The error quotes what the task was given (a param, a path): its
       * control bytes are shown, not obeyed, and it stays on its row. */
      char *error = xstrdup_shown(store_str(k, "error", ""));
      printf("%-20s %-16s %8d %5s %9s  %s%s%s\n", store_str(k, "name", "?"),
             store_str(k, "state", "?"), (int)store_num(k, "attempts", 0), code,
             d, note, note[0] && error[0] ? "; " : "", error);
      free(error);
    }
  }
  cJSON_Delete(run);
  store_close(st);
  return 0;
}

/* The task's entry in a run from store_run, or NULL. */
static cJSON *task_of(cJSON *run, const char *task) {
  cJSON *tasks = cJSON_GetObjectItem(run, "tasks");
  for (cJSON *k = tasks ? tasks->child : NULL; k; k = k->next)
    if (strcmp(store_str(k, "name", ""), task) == 0)
      return k;
  return NULL;
}

/* The attempt (n <= 0: the latest) from a task entry, or NULL. */
static cJSON *attempt_of(cJSON *t, int n) {
  cJSON *al = cJSON_GetObjectItem(t, "attempt_list");
  int count = cJSON_GetArraySize(al);
  if (n <= 0)
    return count ? cJSON_GetArrayItem(al, count - 1) : NULL;
  for (cJSON *a = al ? al->child : NULL; a; a = a->next)
    if ((int)store_num(a, "n", 0) == n)
      return a;
  return NULL;
}

/* Copies what f has beyond *off to stdout. */
static void copy_new(FILE *f, long *off) {
  char buf[65536];
  size_t got;
  clearerr(f);
  fseek(f, *off, SEEK_SET);
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
    fwrite(buf, 1, got, stdout);
    *off += (long)got;
  }
  fflush(stdout);
}

static int terminal_name(const char *state) {
  return strcmp(state, "success") == 0 || strcmp(state, "cached") == 0 ||
         strcmp(state, "failed") == 0 ||
         strcmp(state, "upstream_failed") == 0 ||
         strcmp(state, "cancelled") == 0 || strcmp(state, "skipped") == 0;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* `dagrun logs`' command line, read. */
typedef struct logs_args {
  const char *id, *task;
  long attempt, rank; /* attempt 0: the latest */
  int follow;
} logs_args;

static int logs_parse(int argc, char **argv, logs_args *a) {
  *a = (logs_args){0};
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--rank") == 0) {
      if (i + 1 >= argc || cli_number(argv[++i], 0, 65535, &a->rank) != 0)
        return cli_usage_error("--rank needs a number >= 0, got '%s'",
                               i < argc ? argv[i] : "");
    } else if (strcmp(argv[i], "--attempt") == 0) {
      if (i + 1 >= argc ||
          cli_number(argv[++i], 1, 1000000, &a->attempt) != 0)
        return cli_usage_error("--attempt needs a number >= 1, got '%s'",
                               i < argc ? argv[i] : "");
    } else if (strcmp(argv[i], "--follow") == 0 || strcmp(argv[i], "-f") == 0) {
      a->follow = 1;
    } else if (argv[i][0] == '-') {
      return cli_usage_error("unknown option '%s' for logs", argv[i]);
    } else if (!a->id) {
      a->id = argv[i];
    } else if (!a->task) {
      a->task = argv[i];
    } else {
      return cli_usage_error("logs takes a run id and a task, got also '%s'",
                             argv[i]);
    }
  }
  if (!a->task)
    return cli_usage_error("%s", "logs needs a run id and a task name");
  return 0;
}

/* One attempt's log, read (and with --follow, followed) from the store's
 * record of it. */
typedef struct log_reader {
  store *st;
  const logs_args *a;
  int n;     /* the attempt, once known (a->attempt until then) */
  char *log; /* its log file, once the attempt is known */
  FILE *f;   /* the log, once it exists */
  long off;  /* bytes of it copied to stdout */
} log_reader;

/* Sets r->n and r->log from the attempt at: 0, or EXIT_USAGE when the
 * attempt has no such rank (said, unless following: a gang's ranks may
 * not have started yet). */
static int logs_set_file(log_reader *r, const cJSON *at) {
  r->n = (int)store_num(at, "n", 0);
  r->log = xstrdup(store_str(at, "log", ""));
  if (r->a->rank == 0)
    return 0;
  /* A gang's rank r logs to rank-<r>/log beside rank 0's log. */
  char *dir = xstrdup(r->log), *slash = strrchr(dir, '/');
  if (slash)
    *slash = 0;
  free(r->log);
  r->log = xasprintf("%s/rank-%ld/log", slash ? dir : ".", r->a->rank);
  free(dir);
  if (access(r->log, F_OK) != 0 && !r->a->follow) {
    fprintf(stderr,
            "dagrun: attempt %d of task '%s' has no rank %ld (not a "
            "gang, or a smaller one)\n",
            r->n, r->a->task, r->a->rank);
    return EXIT_USAGE;
  }
  return 0;
}

/* One look: reads the run's record again, finds the attempt and its log
 * and copies what is new in it. Returns 0 with *more set when there is
 * more to follow, or the exit status (with *more 0). */
static int logs_poll(log_reader *r, int *more) {
  const logs_args *a = r->a;
  cJSON *run;
  int rc;
  *more = 0;
  if ((rc = find_run(r->st, a->id, &run)) != 0)
    return rc;
  const char *run_id = store_str(run, "id", a->id);
  cJSON *t = task_of(run, a->task);
  if (!t) {
    fprintf(stderr, "dagrun: run %s has no task '%s'\n", run_id, a->task);
    cJSON_Delete(run);
    return EXIT_USAGE;
  }
  int run_over = strcmp(store_str(run, "state", ""), "running") != 0;
  cJSON *at = attempt_of(t, r->n);
  if (!at && (!a->follow || r->n > 0 || run_over ||
              terminal_name(store_str(t, "state", "")))) {
    if (r->n > 0)
      fprintf(stderr, "dagrun: task '%s' of run %s has no attempt %d\n",
              a->task, run_id, r->n);
    else
      fprintf(stderr, "dagrun: task '%s' of run %s has not started (%s)\n",
              a->task, run_id, store_str(t, "state", "?"));
    cJSON_Delete(run);
    return EXIT_USAGE;
  }
  if (at && !r->log && (rc = logs_set_file(r, at)) != 0) {
    cJSON_Delete(run);
    return rc;
  }
  if (r->log && !r->f) {
    r->f = fopen(r->log, "rb");
    if (!r->f && (errno != ENOENT || !a->follow)) {
      fprintf(stderr, "dagrun: cannot read %s: %s\n", r->log,
              strerror(errno));
      cJSON_Delete(run);
      return EXIT_FAILED;
    }
  }
  /* The attempt's state is read before the file: a final copy after it
   * is seen finished gets everything the attempt wrote. */
  const char *as = at ? store_str(at, "state", "") : "";
  int over = at && strcmp(as, "starting") != 0 && strcmp(as, "running") != 0;
  int attempt_ok = strcmp(as, "success") == 0;
  /* A run that is no longer going (dagrun stopped, or was killed and
   * left the attempt "running") has nothing more to follow either. */
  over = over || (at && run_over);
  /* Following the task (no --attempt): a later attempt, a retry, is
   * followed in turn; only the task's final state ends the follow. */
  const cJSON *latest = attempt_of(t, 0);
  int later = latest && (int)store_num(latest, "n", 0) > r->n;
  const char *ts = store_str(t, "state", "");
  int task_over = terminal_name(ts) || run_over;
  int task_ok = strcmp(ts, "success") == 0 || strcmp(ts, "cached") == 0;
  /* How the attempt ended, e.g. "failed (exit 3)", for the switch and
   * for the last word of a follow that fails. */
  char how[80] = "";
  if (over) {
    int code = (int)store_num(at, "exit_code", -1);
    snprintf(how, sizeof how, "%.40s", store_str(at, "state", "ended"));
    if (code >= 0)
      snprintf(how + strlen(how), sizeof how - strlen(how), " (exit %d)", code);
  }
  /* Why a follow ends without success: said, not only an exit status (a
   * killed dagrun ended it silently). */
  char why[256];
  if (strcmp(store_str(run, "state", ""), "interrupted") == 0)
    snprintf(why, sizeof why,
             "run %.40s was interrupted (its dagrun stopped, or is gone) "
             "before task '%.60s' ended; `dagrun resume %.40s` goes on with it",
             run_id, a->task, run_id);
  else
    snprintf(why, sizeof why, "task '%.60s' of run %.40s ended %.20s", a->task,
             run_id, ts);
  cJSON_Delete(run);
  if (r->f)
    copy_new(r->f, &r->off);
  if (a->follow && !over) {
    *more = 1;
    return 0;
  }
  if (!r->f && r->log) {
    fprintf(stderr, "dagrun: cannot read %s: %s\n", r->log, strerror(ENOENT));
    return EXIT_FAILED;
  }
  if (!a->follow)
    return 0;
  if (a->attempt > 0) { /* one attempt followed: its outcome */
    if (!attempt_ok)
      fprintf(stderr, "dagrun: attempt %d %s\n", r->n, how);
    return attempt_ok ? 0 : EXIT_FAILED;
  }
  if (later) {
    fprintf(stderr, "dagrun: attempt %d %s; following attempt %d\n", r->n, how,
            r->n + 1);
    /* The next poll takes the attempt after this one. */
    r->n++;
    free(r->log);
    r->log = NULL;
    if (r->f)
      fclose(r->f);
    r->f = NULL;
    r->off = 0;
    *more = 1;
    return 0;
  }
  if (!task_over) { /* waiting for the retry to start */
    *more = 1;
    return 0;
  }
  if (!task_ok)
    fprintf(stderr, "dagrun: %s\n", why);
  return task_ok ? 0 : EXIT_FAILED;
}

int history_cmd_logs(int argc, char **argv) {
  logs_args a;
  if (logs_parse(argc, argv, &a) != 0)
    return EXIT_USAGE;
  log_reader r = {.a = &a, .n = (int)a.attempt};
  int rc = open_for_reading(&r.st);
  if (rc != 0)
    return rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
  int more;
  while ((rc = logs_poll(&r, &more)) == 0 && more)
    sleep_ms(100);
  if (r.f)
    fclose(r.f);
  free(r.log);
  store_close(r.st);
  return rc;
}

/* A cache source is usable while its out/ directory and every output that
 * is an absolute path still exist. */
static int cache_usable(void *ud, const char *run_dir, const char *task,
                        const cJSON *outputs) {
  (void)ud;
  struct stat sb;
  char *task_dir = path_join(run_dir, task);
  char *out = path_join(task_dir, "out");
  int ok = stat(out, &sb) == 0 && S_ISDIR(sb.st_mode);
  free(out);
  free(task_dir);
  for (const cJSON *o = outputs->child; ok && o; o = o->next)
    if (cJSON_IsString(o) && o->valuestring[0] == '/')
      ok = stat(o->valuestring, &sb) == 0;
  return ok;
}

int history_cache_lookup(history *h, const char *fingerprint, char **from_run,
                         char **from_out_dir, cJSON **outputs) {
  if (!h || h->broken)
    return 0;
  int rc = store_cache_find(h->st, fingerprint, cache_usable, NULL, from_run,
                            from_out_dir, outputs, h->err, sizeof h->err);
  if (rc < 0) {
    /* A lookup that fails runs the task: the cache is an optimisation. */
    fprintf(stderr, "dagrun: cache lookup: %s\n", h->err);
    return 0;
  }
  return rc;
}
