/*
 * dagrun: the command line. Parses arguments, then hands over to the
 * modules in the order data flows: spec -> check -> run directory ->
 * scheduler (with the executor and the view) on one libuv loop.
 *
 * Exit codes: 0 success; 1 a task failed; 2 bad usage or a bad DAG file,
 * a run store that cannot be opened (run), an unknown or ambiguous run,
 * task or attempt (runs, status, logs, resume, cancel), a resumed run
 * whose DAG file does not load or no longer matches; 1 also: resume of a
 * run still running, cancel of a run not running; 130 stopped by SIGINT
 * (Ctrl-C); 143 stopped by SIGTERM.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "base/cron.h"
#include "base/util.h"
#include "dagfile/graph.h"
#include "dagfile/spec.h"
#include "dagfile/template.h"
#include "host/catalog.h"
#include "host/check.h"
#include "host/worker.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "report/alerts.h"
#include "report/report.h"
#include "report/view.h"
#include "run/rundir.h"
#include "run/scheduler.h"
#include "run/secrets.h"
#include "serve/backfill.h"
#include "serve/serve.h"
#include "store/history.h"
#include "store/resume.h"
#include "store/store.h"


static const char usage_text[] =
    "usage: dagrun [run] FILE [options]    run a DAG now\n"
    "       dagrun check FILE...            validate DAG files, report all "
    "errors\n"
    "       dagrun graph FILE [--format text|dot|mermaid]\n"
    "       dagrun stages [--json]          installed stage plugins and "
    "their params\n"
    "       dagrun generate MODEL_DIR [--prompt TEXT] [options]\n"
    "                                       text from a trained model "
    "(--help: options)\n"
    "       dagrun cron-next \"EXPR\" [--tz ZONE] [-n N] [--from TIME]\n"
    "                                       next fire times of a schedule\n"
    "       dagrun runs [DAG] [-n N] [--json]  recorded runs, newest first\n"
    "       dagrun status RUN [--json]      a run's tasks: states, attempts, "
    "exits\n"
    "       dagrun logs RUN TASK [--attempt N] [--rank R] [--follow]\n"
    "                                       an attempt's stdout+stderr\n"
    "       dagrun resume RUN [-j N] [--plain|-q|--events json]\n"
    "                                       go on with a run: re-run what "
    "had not\n"
    "                                       succeeded, in its run "
    "directory\n"
    "       dagrun cancel RUN               stop a running run\n"
    "       dagrun report RUN               (re)write the run's report.html\n"
    "       dagrun backfill FILE --from TIME --to TIME [run options]\n"
    "                                       one run per schedule time in "
    "the range\n"
    "       dagrun serve PATH... [--port N] [--token-file F] ...\n"
    "                                       daemon: cron triggers, HTTP "
    "API,\n"
    "                                       dashboard (--help: options)\n"
    "       dagrun --version | --help\n"
    "\n"
    "run options:\n"
    "  -j, --max-parallel N   tasks running at once (default: the DAG's\n"
    "                         max_parallel, else the number of CPUs)\n"
    "  --runs-dir DIR         where run directories go (default: "
    "$DAGRUN_RUNS_DIR\n"
    "                         or ./runs)\n"
    "  --events json          one JSON object per state change on stdout\n"
    "  --plain                timestamped lines even on a terminal\n"
    "  -q, --quiet            only the final summary\n"
    "  --no-cache             run every task, even one whose fingerprint\n"
    "                         matches an earlier successful task (run,\n"
    "                         resume)\n"
    "  -p, --param NAME=VALUE set a DAG param (keeps its type; lists and\n"
    "                         maps as JSON); repeatable\n"
    "  --run-id ID            the run's id (default: time + random)\n"
    "  --logical-date TIME    the schedule time the run stands for\n"
    "                         (${run.date}), e.g. 2026-11-21T02:30:00Z\n"
    "  --trigger KIND         recorded as what started it: manual, cron,\n"
    "                         api, backfill\n"
    "\n"
    "Runs are recorded in $DAGRUN_HOME/state.db (default: "
    ".dagrun/state.db);\n"
    "RUN is a run id or a unique prefix of one.\n"
    "\n"
    "Stages are found by name on $DAGRUN_PLUGIN_PATH, then in the built-in\n"
    "stage directory; a stage given as a path is taken from the DAG's "
    "directory.\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "dagrun: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see dagrun --help)\n");
  return EXIT_USAGE;
}

/* Loads and checks a DAG file, printing every error. Returns 0 with *sp
 * and *ck set, or EXIT_USAGE. */
static int load_checked(const char *path, spec **sp, checked **ck) {
  diags d = {0};
  int rc = check_load(path, sp, ck, &d);
  if (rc == 0)
    secrets_warn(*sp, (*ck)->params, stderr);
  if (d.n) {
    diags_print(&d, stderr);
    fprintf(stderr, "%s: %zu error%s\n", path, d.n, d.n == 1 ? "" : "s");
  } else if (rc != 0) {
    fprintf(stderr, "dagrun: %s: %s\n", path, dr_strerror(rc));
  }
  diags_free(&d);
  return rc == 0 ? 0 : EXIT_USAGE;
}

static int cmd_check(int argc, char **argv) {
  if (argc < 1)
    return usage_error("%s", "check needs a DAG file");
  int bad = 0;
  for (int i = 0; i < argc; i++) {
    spec *sp;
    checked *ck;
    if (load_checked(argv[i], &sp, &ck) != 0) {
      bad = 1;
      continue;
    }
    printf("%s: ok (dag %s, %zu tasks)\n", argv[i], sp->dag, sp->n_tasks);
    checked_free(ck);
    spec_free(sp);
  }
  return bad ? EXIT_USAGE : 0;
}

static int cmd_graph(int argc, char **argv) {
  const char *file = NULL, *format = "text";
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--format") == 0 && i + 1 < argc)
      format = argv[++i];
    else if (strncmp(argv[i], "--format=", 9) == 0)
      format = argv[i] + 9;
    else if (argv[i][0] == '-')
      return usage_error("unknown option '%s' for graph", argv[i]);
    else if (!file)
      file = argv[i];
    else
      return usage_error("graph takes one DAG file, got also '%s'", argv[i]);
  }
  if (!file)
    return usage_error("%s", "graph needs a DAG file");
  if (strcmp(format, "text") != 0 && strcmp(format, "dot") != 0 &&
      strcmp(format, "mermaid") != 0)
    return usage_error("unknown graph format '%s' (expected text, dot or "
                       "mermaid)",
                       format);
  spec *sp;
  checked *ck;
  if (load_checked(file, &sp, &ck) != 0)
    return EXIT_USAGE;
  int rc = graph_print(sp, format, stdout);
  checked_free(ck);
  spec_free(sp);
  return rc == 0 ? 0 : EXIT_USAGE;
}

/* State shared by the run's callbacks. */
typedef struct run_ctx {
  uv_loop_t *loop;
  view *v;
  sched *s;
  alerts *al; /* NULL: the DAG has no alerts */
  history *h; /* the run store's record of this run */
  uv_signal_t sigint, sigterm;
  int stop_signal; /* first signal that stopped the run */
  int n_signals;
} run_ctx;

static void obs_event(void *ud, const sched_event *e) {
  /* The store first: what is recorded precedes what is shown or sent. */
  history_task_event(((run_ctx *)ud)->h, ((run_ctx *)ud)->s, e);
  view_task_event(((run_ctx *)ud)->v, e);
  alerts_task_event(((run_ctx *)ud)->al, e);
}

static int obs_cache_lookup(void *ud, size_t task, const char *fingerprint,
                            char **from_run, char **from_out_dir,
                            cJSON **outputs) {
  (void)task;
  return history_cache_lookup(((run_ctx *)ud)->h, fingerprint, from_run,
                              from_out_dir, outputs);
}

static void obs_attempt_start(void *ud, size_t task, int attempt,
                              const char *log_path) {
  history_attempt_start(((run_ctx *)ud)->h, task, attempt, log_path);
}

static void obs_progress(void *ud, size_t task, double f, const char *msg) {
  view_task_progress(((run_ctx *)ud)->v, task, f, msg);
}

static void obs_log(void *ud, size_t task, int level, const char *msg) {
  view_task_log(((run_ctx *)ud)->v, task, level, msg);
}

static void obs_done(void *ud) {
  run_ctx *r = ud;
  /* Closing the signal watchers lets uv_run return. */
  uv_close((uv_handle_t *)&r->sigint, NULL);
  uv_close((uv_handle_t *)&r->sigterm, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  run_ctx *r = h->data;
  r->n_signals++;
  if (!r->stop_signal)
    r->stop_signal = signum;
  if (r->n_signals == 1) {
    view_notice(r->v, signum == SIGINT
                          ? "interrupted: stopping tasks (Ctrl-C again to "
                            "kill them now)"
                          : "terminated: stopping tasks");
    sched_cancel(r->s, 0);
  } else {
    view_notice(r->v, "killing running tasks");
    sched_cancel(r->s, 1);
  }
}

static int write_run_json(const spec *sp, const rundir *run,
                          const cJSON *params, const sched *s,
                          const char *state, int max_parallel) {
  cJSON *j = cJSON_CreateObject();
  char ts[40];
  cJSON_AddStringToObject(j, "dag", sp->dag);
  cJSON_AddStringToObject(j, "file", sp->path);
  cJSON_AddStringToObject(j, "run_id", run->id);
  cJSON_AddStringToObject(j, "dir", run->path);
  cJSON_AddStringToObject(j, "state", state);
  format_utc(run->started, 1, ts, sizeof(ts));
  cJSON_AddStringToObject(j, "started", ts);
  if (strcmp(state, "running") != 0) {
    double end = clock_wall();
    format_utc(end, 1, ts, sizeof(ts));
    cJSON_AddStringToObject(j, "ended", ts);
    cJSON_AddNumberToObject(j, "duration_s", end - run->started);
  }
  cJSON_AddNumberToObject(j, "max_parallel", max_parallel);
  cJSON *shown = cJSON_Duplicate(params, 1);
  secrets_redact_params(sp, shown);
  cJSON_AddItemToObject(j, "params", shown);
  cJSON_AddItemToObject(j, "tasks", sched_tasks_json(s));
  char *text = cJSON_Print(j);
  char *path = path_join(run->path, "run.json");
  int rc = fileio_write_atomic(path, text, strlen(text), NULL, 0);
  if (rc != 0)
    fprintf(stderr, "dagrun: cannot write %s: %s\n", path, strerror(errno));
  free(path);
  cJSON_free(text);
  cJSON_Delete(j);
  return rc;
}

static int default_parallelism(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* From the moment the store names this process as a run's dagrun until
 * the loop watches for them, SIGINT and SIGTERM (`dagrun cancel`) wait
 * blocked: they then stop the run cleanly instead of killing dagrun with
 * the run recorded as running. */
static void stop_signals_block(int block) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

/* Runs (or, with preset, goes on with) a run whose start or resumption is
 * recorded in h (taken over: finished here), on the default loop. Returns
 * the exit code. */
static int execute(const spec *sp, const checked *ck, const rundir *run,
                   const cJSON *params, history *h, int max_parallel,
                   view_mode mode, const char *self_exe,
                   const sched_preset *preset, int no_cache) {
  char err[1024];
  run_ctx r = {0};
  r.h = h;
  r.loop = uv_default_loop();
  r.v = view_create(r.loop, mode, sp, stdout);
  secrets *sec = secrets_collect(sp, params, run);
  if (alerts_create(r.loop, sp, run, params, history_store(h), &r.al, err,
                    sizeof(err)) != 0)
    fprintf(stderr, "dagrun: alerts off for this run: %s\n", err);
  sched_opts so = {
      max_parallel,
      self_exe,
      {obs_event, obs_progress, obs_log, obs_done, &r, obs_attempt_start},
      0,
      preset,
      obs_cache_lookup,
      no_cache,
      sec};
  r.s = sched_create(r.loop, ck, run, params, &so);
  write_run_json(sp, run, params, r.s, "running", max_parallel);
  uv_signal_init(r.loop, &r.sigint);
  uv_signal_init(r.loop, &r.sigterm);
  r.sigint.data = r.sigterm.data = &r;
  uv_signal_start(&r.sigint, on_signal, SIGINT);
  uv_signal_start(&r.sigterm, on_signal, SIGTERM);
  stop_signals_block(0);

  view_run_started(r.v, run, max_parallel);
  sched_start(r.s);
  uv_run(r.loop, UV_RUN_DEFAULT);

  size_t counts[TASK_CANCELLED + 1];
  sched_counts(r.s, counts);
  const char *state =
      r.stop_signal                                               ? "cancelled"
      : counts[TASK_SUCCESS] + counts[TASK_CACHED] == sp->n_tasks ? "success"
                                                                  : "failed";
  store *db = history_store(r.h); /* the caller's: still open after */
  history_finish(r.h, state);
  r.h = NULL;
  write_run_json(sp, run, params, r.s, state, max_parallel);
  if (report_write(db, run->path, run->id, NULL, err, sizeof err) != 0)
    fprintf(stderr, "dagrun: warning: no report.html: %s\n", err);
  view_run_finished(r.v, state, r.s);
  view_destroy(r.v);
  alerts_run_finished(r.al, state, sp->n_tasks, clock_wall() - run->started);
  /* Lets closed handles finish, and alert deliveries (up to a grace). */
  uv_run(r.loop, UV_RUN_DEFAULT);
  alerts_destroy(r.al);
  sched_destroy(r.s);
  secrets_destroy(sec);
  uv_loop_close(r.loop);

  return r.stop_signal == SIGINT         ? 130
         : r.stop_signal == SIGTERM      ? 143
         : strcmp(state, "success") == 0 ? 0
                                         : EXIT_FAILED;
}

/* The dagrun executable, which workers run: 0, or -1 after saying why. */
static int find_self_exe(char *buf, size_t len) {
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0) {
    fprintf(stderr, "dagrun: cannot find its own executable: %s\n",
            strerror(errno));
    return -1;
  }
  buf[n] = '\0';
  return 0;
}

/* What `run` and `resume` both take: how many at once, how to show the
 * run, whether to use the cache. */
typedef struct exec_flags {
  int max_parallel, no_cache;
  view_mode mode;
} exec_flags;

static void exec_flags_init(exec_flags *f) {
  f->max_parallel = 0;
  f->no_cache = 0;
  f->mode = isatty(STDOUT_FILENO) ? VIEW_TTY : VIEW_PLAIN;
}

/* Reads argv[*i] (and its value) if it is one of exec_flags' options.
 * Returns 1 when it was (with *i past it), 0 when it is not one of
 * them, or EXIT_USAGE after a usage error. */
static int exec_flag(int argc, char **argv, int *i, exec_flags *f) {
  const char *a = argv[*i];
  const char *num = NULL;
  if ((strcmp(a, "-j") == 0 || strcmp(a, "--max-parallel") == 0) &&
      *i + 1 < argc)
    num = argv[++*i];
  else if (strncmp(a, "-j", 2) == 0 && a[2])
    num = a + 2;
  if (num) {
    char *end;
    long n = strtol(num, &end, 10);
    if (*end || n < 1 || n > 100000) {
      usage_error("--max-parallel needs a number >= 1, got '%s'", num);
      return EXIT_USAGE;
    }
    f->max_parallel = (int)n;
  } else if (strcmp(a, "--events") == 0 && *i + 1 < argc) {
    if (strcmp(argv[++*i], "json") != 0) {
      usage_error("--events takes 'json', got '%s'", argv[*i]);
      return EXIT_USAGE;
    }
    f->mode = VIEW_JSON;
  } else if (strcmp(a, "--events=json") == 0) {
    f->mode = VIEW_JSON;
  } else if (strcmp(a, "--plain") == 0) {
    if (f->mode == VIEW_TTY)
      f->mode = VIEW_PLAIN;
  } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
    f->mode = VIEW_QUIET;
  } else if (strcmp(a, "--no-cache") == 0) {
    f->no_cache = 1;
  } else {
    return 0;
  }
  return 1;
}

static int run_file(const char *file, const char *runs_dir,
                    const exec_flags *flp, const char *run_id,
                    const char *trigger, double logical_date,
                    char *const *overrides, size_t n_overrides);

/* What started a run, as `dagrun run --trigger` takes it (store.h). */
static const char *const run_triggers[] = {"manual", "cron", "api", "backfill",
                                           NULL};

/* Applies `--param NAME=VALUE` overrides (argv-style "NAME=VALUE" strings)
 * to the resolved DAG params: 0, or EXIT_USAGE after saying why. */
static int apply_param_overrides(const spec *sp, cJSON *params,
                                 char *const *kv, size_t n) {
  char err[512];
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(kv[i], '=');
    if (!eq || eq == kv[i])
      return usage_error("--param takes NAME=VALUE, got '%s'", kv[i]);
    char *name = xstrndup(kv[i], (size_t)(eq - kv[i]));
    int rc = tmpl_override_param(sp, params, name, eq + 1, err, sizeof err);
    free(name);
    if (rc != 0) {
      fprintf(stderr, "dagrun: --param %s: %s\n", kv[i], err);
      return EXIT_USAGE;
    }
  }
  return 0;
}

static int cmd_run(int argc, char **argv) {
  const char *file = NULL;
  const char *runs_dir = getenv("DAGRUN_RUNS_DIR");
  const char *run_id = NULL, *trigger = "manual";
  double logical_date = 0;
  char **overrides = xcalloc((size_t)argc + 1, sizeof(char *));
  size_t n_overrides = 0;
  int code = EXIT_USAGE;
  exec_flags fl;
  exec_flags_init(&fl);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int used = exec_flag(argc, argv, &i, &fl);
    if (used == EXIT_USAGE)
      goto done;
    if (used)
      continue;
    if (strcmp(a, "--runs-dir") == 0 && i + 1 < argc) {
      runs_dir = argv[++i];
    } else if ((strcmp(a, "--param") == 0 || strcmp(a, "-p") == 0) &&
               i + 1 < argc) {
      overrides[n_overrides++] = argv[++i];
    } else if (strcmp(a, "--run-id") == 0 && i + 1 < argc) {
      run_id = argv[++i];
      if (!rundir_id_valid(run_id)) {
        usage_error("bad --run-id '%s': expected letters, digits, '_', '.' "
                    "and '-', not starting with '.'",
                    run_id);
        goto done;
      }
    } else if (strcmp(a, "--trigger") == 0 && i + 1 < argc) {
      trigger = argv[++i];
      int known = 0;
      for (size_t k = 0; run_triggers[k]; k++)
        known |= strcmp(trigger, run_triggers[k]) == 0;
      if (!known) {
        usage_error("--trigger takes manual, cron, api or backfill, got '%s'",
                    trigger);
        goto done;
      }
    } else if (strcmp(a, "--logical-date") == 0 && i + 1 < argc) {
      int64_t t;
      if (cron_parse_time(argv[++i], NULL, &t) != 0) {
        usage_error("--logical-date takes a time such as "
                    "2026-11-21T02:30:00Z, got '%s'",
                    argv[i]);
        goto done;
      }
      logical_date = (double)t;
    } else if (a[0] == '-') {
      usage_error("unknown option '%s'", a);
      goto done;
    } else if (!file) {
      file = a;
    } else {
      usage_error("run takes one DAG file, got also '%s'", a);
      goto done;
    }
  }
  if (!file) {
    usage_error("%s", "run needs a DAG file");
    goto done;
  }
  if (!runs_dir || !*runs_dir)
    runs_dir = "runs";
  code = run_file(file, runs_dir, &fl, run_id, trigger, logical_date,
                  overrides, n_overrides);
done:
  free(overrides);
  return code;
}

/* `dagrun run` once its command line is read. */
static int run_file(const char *file, const char *runs_dir,
                    const exec_flags *flp, const char *run_id,
                    const char *trigger, double logical_date,
                    char *const *overrides, size_t n_overrides) {
  exec_flags fl = *flp;
  spec *sp;
  checked *ck;
  if (load_checked(file, &sp, &ck) != 0)
    return EXIT_USAGE;
  if (!fl.max_parallel)
    fl.max_parallel =
        sp->max_parallel ? sp->max_parallel : default_parallelism();

  /* The store is opened before anything runs: a run that could not be
   * recorded is refused, not run unrecorded. */
  char err[1024];
  char *db_path = store_default_path();
  store *db;
  if (store_open(db_path, 1, &db, err, sizeof(err)) != 0) {
    fprintf(stderr,
            "dagrun: %s\ndagrun: not running %s: its history cannot be "
            "recorded in %s (set DAGRUN_HOME to a writable directory)\n",
            err, file, db_path);
    free(db_path);
    checked_free(ck);
    spec_free(sp);
    return EXIT_USAGE;
  }
  free(db_path);
  rundir *run;
  if (rundir_create(runs_dir, sp->dag, run_id, logical_date, &run, err,
                    sizeof(err)) != 0) {
    fprintf(stderr, "dagrun: %s\n", err);
    store_close(db);
    checked_free(ck);
    spec_free(sp);
    return EXIT_USAGE;
  }
  /* DAG params again, now that run.* has values. */
  diags d = {0};
  cJSON *params = NULL;
  tmpl_env te = {sp, NULL, run->id, run->date, NULL, NULL, NULL};
  if (tmpl_resolve_params(&te, &params, &d) != 0 ||
      apply_param_overrides(sp, params, overrides, n_overrides) != 0) {
    diags_print(&d, stderr);
    diags_free(&d);
    cJSON_Delete(params);
    rmdir(run->path); /* nothing ran: no trace of a run */
    rundir_destroy(run);
    store_close(db);
    checked_free(ck);
    spec_free(sp);
    return EXIT_USAGE;
  }

  char self_exe[4096];
  if (find_self_exe(self_exe, sizeof self_exe) != 0)
    return EXIT_USAGE;

  history *h;
  {
    cJSON *shown = cJSON_Duplicate(params, 1);
    secrets_redact_params(sp, shown);
    char *pj = cJSON_PrintUnformatted(shown);
    stop_signals_block(1);
    int hrc = history_begin(db, sp, run, pj, trigger, logical_date, &h, err,
                            sizeof(err));
    cJSON_free(pj);
    cJSON_Delete(shown);
    if (hrc != 0) {
      fprintf(stderr,
              "dagrun: %s\ndagrun: not running %s: its history "
              "cannot be recorded\n",
              err, file);
      cJSON_Delete(params);
      rundir_destroy(run);
      store_close(db);
      checked_free(ck);
      spec_free(sp);
      return EXIT_USAGE;
    }
  }

  int code = execute(sp, ck, run, params, h, fl.max_parallel, fl.mode, self_exe,
                     NULL, fl.no_cache);
  cJSON_Delete(params);
  rundir_destroy(run);
  store_close(db);
  checked_free(ck);
  spec_free(sp);
  return code;
}

/* Opens the run store and finds run id_prefix in it. Returns 0 with *db and
 * *run (caller closes and frees), or the exit code after saying why. */
static int find_run(const char *id_prefix, store **db, cJSON **run) {
  char err[1024];
  char *path = store_default_path();
  int rc = store_open(path, 0, db, err, sizeof err);
  if (rc == DR_ENOENT)
    fprintf(stderr, "dagrun: no run store at %s: no run recorded there\n",
            path);
  else if (rc != 0)
    fprintf(stderr, "dagrun: %s\n", err);
  free(path);
  if (rc != 0)
    return rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
  *run = store_run(*db, id_prefix, &rc, err, sizeof err);
  if (!*run) {
    fprintf(stderr, "dagrun: %s\n", err);
    store_close(*db);
    *db = NULL;
    return rc == DR_ESTORE ? EXIT_FAILED : EXIT_USAGE;
  }
  return 0;
}

static const char *json_str(const cJSON *o, const char *k) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(j) ? j->valuestring : "";
}

static double json_num(const cJSON *o, const char *k) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(j) ? j->valuedouble : 0;
}

/* The DAG params of a resumed run: as the DAG resolves them for its run id
 * and date, with the recorded values on top (secrets were recorded
 * "(redacted)": those come from the DAG). Caller frees; NULL after
 * printing why. */
static cJSON *resume_params(const spec *sp, const rundir *run,
                            const cJSON *recorded) {
  diags d = {0};
  cJSON *params = NULL;
  tmpl_env te = {sp, NULL, run->id, run->date, NULL, NULL, NULL};
  if (tmpl_resolve_params(&te, &params, &d) != 0) {
    diags_print(&d, stderr);
    diags_free(&d);
    cJSON_Delete(params);
    return NULL;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, recorded) {
    if (!it->string || !cJSON_GetObjectItemCaseSensitive(params, it->string))
      continue;
    if (cJSON_IsString(it) && strcmp(it->valuestring, "(redacted)") == 0)
      continue;
    cJSON_ReplaceItemInObjectCaseSensitive(params, it->string,
                                           cJSON_Duplicate(it, 1));
  }
  return params;
}

/* dagrun resume RUN [options]: goes on with a recorded run in its run
 * directory, running again only what had not succeeded. */
static int cmd_resume(int argc, char **argv) {
  const char *id = NULL;
  exec_flags fl;
  exec_flags_init(&fl);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int used = exec_flag(argc, argv, &i, &fl);
    if (used == EXIT_USAGE)
      return EXIT_USAGE;
    if (used)
      continue;
    if (a[0] == '-') {
      return usage_error("unknown option '%s' for resume", a);
    } else if (!id) {
      id = a;
    } else {
      return usage_error("resume takes one run, got also '%s'", a);
    }
  }
  if (!id)
    return usage_error("%s", "resume needs a run id (see dagrun runs)");

  store *db;
  cJSON *rec;
  int code = find_run(id, &db, &rec);
  if (code != 0)
    return code;
  const char *run_id = json_str(rec, "id");
  const char *state = json_str(rec, "state");
  int owner;
  code = EXIT_FAILED;
  spec *sp = NULL;
  checked *ck = NULL;
  rundir *run = NULL;
  cJSON *params = NULL;
  sched_preset *preset = NULL;
  char err[1024];
  if (resume_owner_alive(rec, &owner) && strcmp(state, "running") == 0) {
    fprintf(stderr,
            "dagrun: run %s is still running (dagrun pid %d): not resuming "
            "it; `dagrun cancel %s` stops it\n",
            run_id, owner, run_id);
    goto out;
  }
  if (strcmp(state, "success") == 0) {
    printf("run %s already succeeded: nothing to resume\n", run_id);
    code = 0;
    goto out;
  }
  code = EXIT_USAGE;
  if (load_checked(json_str(rec, "dag_file"), &sp, &ck) != 0) {
    fprintf(stderr,
            "dagrun: cannot resume run %s: its DAG file %s does not "
            "load\n",
            run_id, json_str(rec, "dag_file"));
    goto out;
  }
  {
    /* Resuming with an edited DAG file is allowed (fixing a task is what
     * resume is for) but never silent. */
    const char *was = json_str(rec, "dag_sha256");
    char *now = history_dag_sha256(json_str(rec, "dag_file"));
    if (was && now && strcmp(was, now) != 0)
      fprintf(stderr,
              "dagrun: warning: %s changed since run %s started; resuming "
              "with the file as it is now\n",
              json_str(rec, "dag_file"), run_id);
    free(now);
  }
  if (rundir_open(json_str(rec, "run_dir"), run_id, json_num(rec, "started"),
                  json_num(rec, "logical_date"), &run, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun: cannot resume run %s: %s\n", run_id, err);
    goto out;
  }
  if (!(params = resume_params(
            sp, run, cJSON_GetObjectItemCaseSensitive(rec, "params"))))
    goto out;
  char self_exe[4096];
  if (find_self_exe(self_exe, sizeof self_exe) != 0)
    goto out;
  /* Claimed before the orphans are handled: of two resumes at once, one
   * goes on and the other stops here. */
  int me = (int)getpid();
  stop_signals_block(1);
  if (store_run_claim(db, run_id, me, proc_start_time(me), owner,
                      (long long)json_num(rec, "orch_start"), err,
                      sizeof err) != 0) {
    fprintf(stderr, "dagrun: cannot resume run %s: %s\n", run_id, err);
    code = EXIT_FAILED;
    goto out;
  }
  history *h = NULL;
  if (!(preset = resume_prepare(db, rec, sp, err, sizeof err)) ||
      history_resume(db, sp, run_id, preset, &h, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun: cannot resume run %s: %s\n", run_id, err);
    store_run_finish(db, run_id, state, clock_wall(), err, sizeof err);
    goto out;
  }
  if (!fl.max_parallel)
    fl.max_parallel =
        sp->max_parallel ? sp->max_parallel : default_parallelism();
  code = execute(sp, ck, run, params, h, fl.max_parallel, fl.mode, self_exe,
                 preset, fl.no_cache);
out:
  free(preset);
  cJSON_Delete(params);
  rundir_destroy(run);
  checked_free(ck);
  spec_free(sp);
  cJSON_Delete(rec);
  store_close(db);
  return code;
}

/* How long `dagrun cancel` waits for the run to be recorded finished. */
#define CANCEL_WAIT_S 60.0

/* dagrun cancel RUN: asks the dagrun running RUN to stop it (SIGTERM, as
 * Ctrl-C does) and waits until the run is recorded finished. */
static int cmd_cancel(int argc, char **argv) {
  if (argc != 1 || argv[0][0] == '-')
    return usage_error("%s", "usage: dagrun cancel RUN");
  store *db;
  cJSON *rec;
  int code = find_run(argv[0], &db, &rec);
  if (code != 0)
    return code;
  char *run_id = xstrdup(json_str(rec, "id"));
  int owner;
  code = EXIT_FAILED;
  if (strcmp(json_str(rec, "state"), "running") != 0) {
    fprintf(stderr, "dagrun: run %s is not running (it %s)\n", run_id,
            strcmp(json_str(rec, "state"), "success") == 0
                ? "succeeded"
                : json_str(rec, "state"));
  } else if (!resume_owner_alive(rec, &owner)) {
    fprintf(stderr,
            "dagrun: run %s is not running: the dagrun that ran it is gone; "
            "`dagrun resume %s` finishes it\n",
            run_id, run_id);
  } else if (kill(owner, SIGTERM) != 0) {
    fprintf(stderr, "dagrun: cannot signal dagrun pid %d: %s\n", owner,
            strerror(errno));
  } else {
    double end = clock_monotonic() + CANCEL_WAIT_S;
    int rc;
    char err[1024];
    for (;;) {
      cJSON_Delete(rec);
      rec = store_run(db, run_id, &rc, err, sizeof err);
      if (rec && strcmp(json_str(rec, "state"), "running") != 0) {
        printf("run %s %s\n", run_id, json_str(rec, "state"));
        code = 0;
        break;
      }
      if (!rec || !proc_alive(owner, (long long)json_num(rec, "orch_start"))) {
        fprintf(stderr,
                "dagrun: run %s: its dagrun ended without recording "
                "the end of the run\n",
                run_id);
        break;
      }
      if (clock_monotonic() > end) {
        fprintf(stderr,
                "dagrun: run %s still running %.0fs after SIGTERM "
                "to dagrun pid %d\n",
                run_id, CANCEL_WAIT_S, owner);
        break;
      }
      uv_sleep(100);
    }
  }
  free(run_id);
  cJSON_Delete(rec);
  store_close(db);
  return code;
}

/* `dagrun generate ...`: runs dagrun-generate, installed beside the stage
 * plugins (DAGRUN_LIBEXEC_DIR_REL from this executable's directory), with
 * the arguments after "generate". The engine stays out of this program.
 * Returns only when it cannot run it. */
static int cmd_generate(char **argv) {
  char self_exe[4096];
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
  if (n <= 0) {
    fprintf(stderr, "dagrun: cannot find its own executable: %s\n",
            strerror(errno));
    return EXIT_FAILED;
  }
  self_exe[n] = '\0';
  char *slash = strrchr(self_exe, '/');
  if (slash)
    *slash = '\0';
  char prog[4096 + 64];
  snprintf(prog, sizeof prog, "%s/%s/dagrun-generate", self_exe,
           DAGRUN_LIBEXEC_DIR_REL);
  /* argv[0] becomes the program; argv[1] ("generate") is dropped. */
  argv[1] = prog;
  execv(prog, argv + 1);
  fprintf(stderr,
          "dagrun: cannot run %s: %s (dagrun generate needs the "
          "dagrun-generate program installed with dagrun)\n",
          prog, strerror(errno));
  return EXIT_FAILED;
}

/* dagrun cron-next "EXPR" [--tz ZONE] [-n N] [--from TIME]: what a
 * schedule will do, one fire time a line, local and UTC. */
static int cmd_cron_next(int argc, char **argv) {
  const char *expr = NULL, *tz = "UTC", *from = NULL;
  long count = 5;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if ((strcmp(a, "--tz") == 0 || strcmp(a, "-n") == 0 ||
         strcmp(a, "--from") == 0) &&
        i + 1 >= argc)
      return usage_error("%s needs a value", a);
    if (strcmp(a, "--tz") == 0) {
      tz = argv[++i];
    } else if (strcmp(a, "--from") == 0) {
      from = argv[++i];
    } else if (strcmp(a, "-n") == 0) {
      char *end;
      count = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || count < 1 || count > 1000)
        return usage_error("-n needs a number from 1 to 1000, got '%s'",
                           argv[i]);
    } else if (a[0] == '-' && a[1]) {
      return usage_error("unknown option '%s' for cron-next", a);
    } else if (expr) {
      return usage_error("cron-next takes one expression (quote it), got "
                         "also '%s'",
                         a);
    } else {
      expr = a;
    }
  }
  if (!expr)
    return usage_error("%s", "cron-next needs an expression, e.g. dagrun "
                             "cron-next \"30 2 * * *\" --tz Europe/Berlin");
  char err[256];
  int col;
  cron_expr *e;
  cron_zone *z;
  if (cron_parse(expr, &e, &col, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun: cron expression, column %d: %s\n  %s\n  %*s^\n",
            col, err, expr, col - 1, "");
    return EXIT_USAGE;
  }
  if (cron_zone_open(tz, &z, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun: %s\n", err);
    cron_destroy(e);
    return EXIT_USAGE;
  }
  /* --from includes a fire time at that very time; now does not. */
  int64_t after = (int64_t)time(NULL), t;
  if (from && cron_parse_time(from, z, &t) != 0) {
    cron_destroy(e);
    cron_zone_close(z);
    return usage_error("--from takes a time like 2026-03-08T01:30 (local "
                       "in --tz) or 2026-03-08T06:30:00Z, got '%s'",
                       from);
  }
  if (from)
    after = t - 1;
  int rc = 0;
  for (long i = 0; i < count; i++) {
    char buf[96];
    if (cron_next(e, z, after, &after, err, sizeof err) != 0) {
      fprintf(stderr, "dagrun: %s\n", err);
      rc = EXIT_USAGE;
      break;
    }
    cron_format(z, after, buf, sizeof buf);
    printf("%s\n", buf);
  }
  cron_destroy(e);
  cron_zone_close(z);
  return rc;
}

static const char *const commands[] = {
    "run",       "check", "graph",  "stages", "generate", "help",   "version",
    "cron-next", "runs",  "status", "logs",   "resume",   "cancel",
    "backfill",  "serve", "report", NULL};

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "__worker") == 0) {
    if (argc != 3) {
      fprintf(stderr, "usage: dagrun __worker ATTEMPT_JSON (internal)\n");
      return EXIT_USAGE;
    }
    return worker_main(argv[2]);
  }
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
      strcmp(cmd, "help") == 0) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("dagrun %s (plugin ABI %d.%d)\n", DAGRUN_VERSION, DAGRUN_ABI_MAJOR,
           DAGRUN_ABI_MINOR);
    return 0;
  }
  if (strcmp(cmd, "check") == 0)
    return cmd_check(argc - 2, argv + 2);
  if (strcmp(cmd, "graph") == 0)
    return cmd_graph(argc - 2, argv + 2);
  if (strcmp(cmd, "stages") == 0) {
    int json = argc >= 3 && strcmp(argv[2], "--json") == 0;
    if (argc > 3 || (argc == 3 && !json))
      return usage_error("unknown option '%s' for stages", argv[2]);
    return catalog_print(stdout, json) == 0 ? 0 : 1;
  }
  if (strcmp(cmd, "run") == 0)
    return cmd_run(argc - 2, argv + 2);
  if (strcmp(cmd, "cron-next") == 0)
    return cmd_cron_next(argc - 2, argv + 2);
  if (strcmp(cmd, "generate") == 0)
    return cmd_generate(argv);
  if (strcmp(cmd, "runs") == 0)
    return history_cmd_runs(argc - 2, argv + 2);
  if (strcmp(cmd, "status") == 0)
    return history_cmd_status(argc - 2, argv + 2);
  if (strcmp(cmd, "logs") == 0)
    return history_cmd_logs(argc - 2, argv + 2);
  if (strcmp(cmd, "report") == 0)
    return report_cmd(argc - 2, argv + 2);
  if (strcmp(cmd, "resume") == 0)
    return cmd_resume(argc - 2, argv + 2);
  if (strcmp(cmd, "cancel") == 0)
    return cmd_cancel(argc - 2, argv + 2);
  if (strcmp(cmd, "serve") == 0) {
    char self_exe[4096];
    if (find_self_exe(self_exe, sizeof self_exe) != 0)
      return EXIT_USAGE;
    return serve_cmd(argc - 2, argv + 2, self_exe);
  }
  if (strcmp(cmd, "backfill") == 0) {
    char self_exe[4096];
    if (find_self_exe(self_exe, sizeof self_exe) != 0)
      return EXIT_USAGE;
    return backfill_cmd(argc - 2, argv + 2, self_exe);
  }
  /* `dagrun FILE` means `dagrun run FILE`; a word that is no file but
   * looks like a command was probably a typo. */
  const char *near = closest_match(cmd, commands);
  if (cmd[0] != '-' && near && access(cmd, F_OK) != 0) {
    fprintf(stderr, "dagrun: unknown command '%s'; did you mean '%s'?\n", cmd,
            near);
    return EXIT_USAGE;
  }
  return cmd_run(argc - 1, argv + 1);
}
