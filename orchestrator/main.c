/*
 * dagrun: the command line. main() finds the command in one table (name,
 * handler, one-line summary, usage text), answers `--help` from it, and
 * hands the arguments after the command's name to the handler. Handlers
 * owned by a module are named <module>_cmd_<name> and live in it
 * (history_cmd_runs in store/history.c); the ones below are main.c's own,
 * cmd_<name>. `dagrun FILE` is short for `dagrun run FILE`.
 *
 * `run` hands over to the modules in the order data flows: spec -> check
 * -> run directory -> scheduler (with the executor and the view) on one
 * libuv loop.
 *
 * Exit codes (lib/exitcode.h): 0 success, `--help` included; 1 a task
 * failed; 2 bad usage or a bad DAG file, a run store that cannot be opened
 * (run), an unknown or ambiguous run, task or attempt (runs, status, logs,
 * resume, cancel), a resumed run whose DAG file does not load or no longer
 * matches; 1 also: resume of a run still running, cancel of a run not
 * running; 130 stopped by SIGINT (Ctrl-C); 143 stopped by SIGTERM; 129
 * stopped by SIGHUP (the terminal closed: the run is recorded interrupted).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "base/cli.h"
#include "base/cron.h"
#include "base/util.h"
#include "dagfile/dag.h"
#include "dagfile/graph.h"
#include "dagfile/paramrule.h"
#include "dagfile/spec.h"
#include "dagfile/template.h"
#include "host/catalog.h"
#include "host/check.h"
#include "host/worker.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "report/alerts.h"
#include "report/compare.h"
#include "report/report.h"
#include "report/view.h"
#include "run/rundir.h"
#include "run/scheduler.h"
#include "run/secrets.h"
#include "serve/backfill.h"
#include "serve/serve.h"
#include "store/annotate.h"
#include "store/approve.h"
#include "store/datastate.h"
#include "store/history.h"
#include "store/pause.h"
#include "store/resume.h"
#include "store/store.h"

/* ---- The usage texts --------------------------------------------------- */

/* The options `run` and `resume` share (exec_flags below). */
#define EXEC_OPTIONS_TEXT                                                      \
  "  -j, --max-parallel N   tasks running at once (default: the DAG's\n"      \
  "                         max_parallel, else the number of CPUs)\n"         \
  "  --events json          one JSON object per state change on stdout\n"    \
  "  --plain                timestamped lines even on a terminal\n"           \
  "  -q, --quiet            only the final summary\n"                         \
  "  --no-cache             run every task, even one whose fingerprint\n"     \
  "                         matches an earlier successful task\n"

/* The options only `run` takes (backfill passes them on to it). */
#define RUN_OPTIONS_TEXT                                                       \
  "  --runs-dir DIR         where run directories go (default: "              \
  "$DAGRUN_RUNS_DIR\n"                                                         \
  "                         or ./runs)\n"                                      \
  "  -p, --param NAME=VALUE set a DAG param (keeps its type; lists and\n"     \
  "                         maps as JSON); repeatable\n"                      \
  "  --params-from-env      more params from $DAGRUN_RUN_PARAMS, a JSON\n"   \
  "                         array of \"NAME=VALUE\" (kept off the command\n"  \
  "                         line, which any user can read)\n"               \
  "  --run-id ID            the run's id (default: time + random)\n"          \
  "  --logical-date TIME    the time the run stands for (${run.logical_date},\n" \
  "                         ${run.date}; default: now), e.g.\n"              \
  "                         2026-11-21T02:30:00Z; without an offset, local\n" \
  "                         to the DAG's timezone\n"                         \
  "  --trigger KIND         recorded as what started it: manual, cron,\n"     \
  "                         api, backfill\n"                                  \
  "  --ready-fd N           write a line to file descriptor N once the run\n" \
  "                         is recorded, then close it (how serve answers\n" \
  "                         a trigger only when its run can be seen)\n"

#define STORE_NOTE_TEXT                                                        \
  "Runs are recorded in $DAGRUN_HOME/state.db (default: "                     \
  ".dagrun/state.db);\n"                                                       \
  "RUN is a run id or a unique prefix of one.\n"

#define STAGES_NOTE_TEXT                                                       \
  "Stages are found by name on $DAGRUN_PLUGIN_PATH, then in the built-in\n"  \
  "stage directory; a stage given as a path is taken from the DAG's "         \
  "directory.\n"

static const char run_usage[] =
    "usage: dagrun run FILE [options]\n"
    "       dagrun FILE [options]\n"
    "Runs the DAG in FILE now, in a new run directory, and records the run.\n"
    "\n"
    "options:\n" EXEC_OPTIONS_TEXT RUN_OPTIONS_TEXT
    "\n"
    STAGES_NOTE_TEXT;

static const char check_usage[] =
    "usage: dagrun check FILE...\n"
    "Validates DAG files without running them and reports every error with\n"
    "file:line:col. Exit 0 when all are valid, 2 otherwise.\n";

static const char graph_usage[] =
    "usage: dagrun graph FILE [--format text|dot|mermaid]\n"
    "Prints the DAG's tasks and their dependencies (default: text).\n";

static const char stages_usage[] =
    "usage: dagrun stages [NAME] [--json]\n"
    "Lists the installed stage plugins and their params; plugins that do\n"
    "not load are listed with the reason. With NAME, only that stage (an\n"
    "unknown NAME exits 2).\n";

static const char cron_next_usage[] =
    "usage: dagrun cron-next \"EXPR\" [--tz ZONE] [-n N] [--from TIME]\n"
    "Prints the next N (default 5, at most 1000) fire times of a cron\n"
    "expression in time zone ZONE (default UTC), local and UTC, after now\n"
    "or from TIME (2026-03-08T01:30, local in ZONE, or "
    "2026-03-08T06:30:00Z).\n";

static const char runs_usage[] =
    "usage: dagrun runs [DAG] [--tag TAG] [-n N] [--json]\n"
    "Lists the recorded runs (of DAG, carrying TAG), newest first: the last\n"
    "N (default 20).\n"
    "\n" STORE_NOTE_TEXT;

static const char status_usage[] =
    "usage: dagrun status RUN [--json]\n"
    "Shows a run's tasks: their states, attempts, exit codes and errors,\n"
    "and for a task taken from the cache the run it came from.\n"
    "\n" STORE_NOTE_TEXT;

static const char compare_usage[] =
    "usage: dagrun compare RUN RUN... [--all] [--json]\n"
    "Shows recorded runs side by side, a column per run (at most 16): the\n"
    "params and task outputs that differ (--all: every one), and each\n"
    "task's metrics, final value and best (lowest, or highest for\n"
    "accuracies, scores and rates) with its step. --json: the whole\n"
    "comparison, as GET /api/compare returns it.\n"
    "\n" STORE_NOTE_TEXT;

static const char tag_usage[] =
    "usage: dagrun tag RUN [TAG...] [--remove TAG...] [--json]\n"
    "Adds TAGs to a recorded run and removes the --remove ones, then prints\n"
    "the run's tags (with no TAG, only prints them). A tag is 1 to 64\n"
    "letters, digits and _ - . : = / + (\"baseline\", \"lr=3e-4\"); a run\n"
    "has at most 32. `dagrun runs --tag TAG` lists the runs that carry one.\n"
    "\n" STORE_NOTE_TEXT;

static const char note_usage[] =
    "usage: dagrun note RUN [TEXT | - | --clear]\n"
    "Sets a recorded run's note to TEXT (- reads it from stdin), clears it,\n"
    "or with neither prints it. At most 4096 bytes, no control characters\n"
    "but newlines and tabs. `dagrun status` and `runs` show it.\n"
    "\n" STORE_NOTE_TEXT;

static const char logs_usage[] =
    "usage: dagrun logs RUN TASK [--attempt N] [--rank R] [--follow|-f]\n"
    "Prints an attempt's stdout and stderr (default: the latest attempt,\n"
    "rank 0 of a gang). --follow goes on until the task ends, through its\n"
    "retries, and exits 0 if it succeeded (or was cached), 1 if not; with\n"
    "--attempt N it follows that attempt only and exits with its outcome.\n"
    "\n" STORE_NOTE_TEXT;

static const char resume_usage[] =
    "usage: dagrun resume RUN [--clear TASK]... [--downstream] [options]\n"
    "Goes on with a run that did not succeed, in its run directory: runs\n"
    "again what had not succeeded, with the DAG file as it is now.\n"
    "--clear TASK runs TASK again even if it succeeded (in any run, a\n"
    "succeeded one too; not from the cache), --downstream with every task\n"
    "after it; its attempts go on from the last one recorded.\n"
    "\n"
    "options:\n" EXEC_OPTIONS_TEXT "\n" STORE_NOTE_TEXT;

static const char cancel_usage[] =
    "usage: dagrun cancel RUN\n"
    "Stops a running run (as Ctrl-C does) and waits until it is recorded\n"
    "finished.\n"
    "\n" STORE_NOTE_TEXT;

static const char approve_usage[] =
    "usage: dagrun approve RUN TASK\n"
    "Approves TASK of RUN, an approval task that waits (state\n"
    "waiting_approval): it succeeds. Recorded in the run store with your\n"
    "login name; approving again changes nothing.\n"
    "\n" STORE_NOTE_TEXT;

static const char reject_usage[] =
    "usage: dagrun reject RUN TASK [--reason TEXT]\n"
    "Rejects TASK of RUN, an approval task that waits: it fails (without\n"
    "retry), with the reason in its error.\n"
    "\n" STORE_NOTE_TEXT;

static const char pause_usage[] =
    "usage: dagrun pause DAG|FILE\n"
    "Pauses DAG's schedule: while paused, `dagrun serve` starts no run of\n"
    "it by its cron schedule or its data triggers (a manual run, `dagrun\n"
    "run` or the API's, still starts). Recorded in the run store with your\n"
    "login name, so serve sees it at its next tick and after a restart.\n"
    "DAG is a name the store knows (see dagrun dags); FILE a DAG file.\n"
    "\n" STORE_NOTE_TEXT;

static const char unpause_usage[] =
    "usage: dagrun unpause DAG|FILE\n"
    "Lets DAG's schedule go on. The schedule times that passed while it was\n"
    "paused follow its catchup: false runs the latest of them, true each.\n"
    "\n" STORE_NOTE_TEXT;

static const char dags_usage[] =
    "usage: dagrun dags [--json]\n"
    "Lists the DAGs the run store knows (a run, a schedule serve keeps, a\n"
    "pause): whether each is paused, its number of runs and its latest run.\n"
    "\n" STORE_NOTE_TEXT;

static const char report_usage[] =
    "usage: dagrun report RUN\n"
    "(Re)writes the run's report.html in its run directory and prints its\n"
    "path.\n"
    "\n" STORE_NOTE_TEXT;

static const char backfill_usage[] =
    "usage: dagrun backfill FILE --from TIME --to TIME [--rerun] "
    "[--dry-run]\n"
    "                       [run options]\n"
    "Runs the DAG once per fire time of its schedule in [--from, --to], one\n"
    "at a time, skipping times that already have a successful run (unless\n"
    "--rerun) and times whose run is going (always); --dry-run only lists\n"
    "them. Run options (see dagrun run --help) are passed on to each run.\n";

static const char version_usage[] =
    "usage: dagrun version | dagrun --version\n"
    "Prints dagrun's version and the plugin ABI it loads.\n";

static const char help_usage[] =
    "usage: dagrun help [COMMAND] | dagrun --help\n"
    "Lists the commands, or shows COMMAND's usage (as dagrun COMMAND "
    "--help).\n";

/* ---- The command table ------------------------------------------------- */

/* A command's handler: argv holds the arguments after its name (argv[argc]
 * is NULL). Returns the exit status. */
typedef int command_fn(int argc, char **argv);

typedef struct command {
  const char *name;
  command_fn *fn;
  const char *summary; /* one line, for `dagrun --help` */
  /* `dagrun NAME --help`; NULL: the program the command runs answers
   * --help itself (generate, eval). */
  const char *usage;
} command;

static command_fn cmd_run, cmd_check, cmd_graph, cmd_stages, cmd_generate,
    cmd_eval, cmd_models, cmd_cron_next, cmd_resume, cmd_cancel, cmd_version,
    cmd_help;

/* In the order `dagrun --help` lists them: a run's life, then the daemon. */
static const command commands[] = {
    {"run", cmd_run, "run a DAG now", run_usage},
    {"check", cmd_check, "validate DAG files, report all errors", check_usage},
    {"graph", cmd_graph, "print a DAG as text, dot or mermaid", graph_usage},
    {"stages", cmd_stages, "installed stage plugins and their params",
     stages_usage},
    {"generate", cmd_generate, "text from a trained model", NULL},
    {"eval", cmd_eval, "a model's perplexity and multiple-choice accuracy",
     NULL},
    {"models", cmd_models, "promoted models and the runs that made them", NULL},
    {"cron-next", cmd_cron_next, "next fire times of a schedule",
     cron_next_usage},
    {"runs", history_cmd_runs, "recorded runs, newest first", runs_usage},
    {"status", history_cmd_status, "a run's tasks: states, attempts, exits",
     status_usage},
    {"logs", history_cmd_logs, "an attempt's stdout+stderr", logs_usage},
    {"compare", compare_cmd, "runs side by side: params, metrics, outputs",
     compare_usage},
    {"tag", annotate_cmd_tag, "add, remove or list a run's tags", tag_usage},
    {"note", annotate_cmd_note, "write or show a note on a run", note_usage},
    {"resume", cmd_resume, "go on with a run that did not succeed",
     resume_usage},
    {"cancel", cmd_cancel, "stop a running run", cancel_usage},
    {"approve", approve_cmd_approve, "approve a task that waits for approval",
     approve_usage},
    {"reject", approve_cmd_reject, "reject a task that waits for approval",
     reject_usage},
    {"dags", pause_cmd_dags, "DAGs in the run store: paused, latest run",
     dags_usage},
    {"pause", pause_cmd_pause, "pause a DAG's schedule (serve starts none)",
     pause_usage},
    {"unpause", pause_cmd_unpause, "let a paused DAG's schedule go on",
     unpause_usage},
    {"report", report_cmd_report, "(re)write a run's report.html",
     report_usage},
    {"backfill", backfill_cmd_backfill, "one run per schedule time in a range",
     backfill_usage},
    {"serve", serve_cmd_serve, "daemon: cron triggers, HTTP API, dashboard",
     serve_usage},
    {"version", cmd_version, "dagrun's version and plugin ABI", version_usage},
    {"help", cmd_help, "this list, or a command's usage", help_usage},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static const command *command_find(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0)
      return &commands[i];
  return NULL;
}

/* `dagrun --help`: the commands from the table, then the run options
 * (`dagrun FILE` is the common case, so they are shown here too). */
static void print_overview(FILE *f) {
  fputs("usage: dagrun COMMAND [ARGS...]\n"
        "       dagrun FILE [run options]   (short for dagrun run FILE)\n"
        "\n"
        "commands:\n",
        f);
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fputs("\n"
        "Every command answers --help (or -h) with its usage and options.\n"
        "\n"
        "run options:\n" EXEC_OPTIONS_TEXT RUN_OPTIONS_TEXT "\n" STORE_NOTE_TEXT
        "\n" STAGES_NOTE_TEXT,
        f);
}

/* Whether the arguments ask for help: --help or -h anywhere before "--".
 * Checked before the handler runs, so that help never loads a DAG or
 * opens the store. */
static int wants_help(int argc, char **argv) {
  for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return 1;
  return 0;
}

/* Runs command c with the arguments after its name. */
static int command_run(const command *c, int argc, char **argv) {
  if (c->usage && wants_help(argc, argv)) {
    fputs(c->usage, stdout);
    return 0;
  }
  return c->fn(argc, argv);
}

/* Loads and checks a DAG file, printing every error. Returns 0 with *sp
 * and *ck set, or EXIT_USAGE. */
static int load_checked(const char *path, spec **sp, checked **ck) {
  diags d = {0};
  int rc = check_load(path, sp, ck, &d);
  if (rc == 0) {
    secrets_warn(*sp, (*ck)->params, stderr);
    (void)prules_warn(*sp, stderr);
  }
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
    return cli_usage_error("%s", "check needs a DAG file");
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
  const char *file = NULL, *format = "text", *v;
  for (int i = 0; i < argc; i++) {
    if ((v = cli_value(argc, argv, &i, "--format")))
      format = v;
    else if (argv[i][0] == '-')
      return cli_usage_error("unknown option '%s' for graph", argv[i]);
    else if (!file)
      file = argv[i];
    else
      return cli_usage_error("graph takes one DAG file, got also '%s'",
                             argv[i]);
  }
  if (!file)
    return cli_usage_error("%s", "graph needs a DAG file");
  if (strcmp(format, "text") != 0 && strcmp(format, "dot") != 0 &&
      strcmp(format, "mermaid") != 0)
    return cli_usage_error("unknown graph format '%s' (expected text, dot or "
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

static int cmd_stages(int argc, char **argv) {
  const char *name = NULL;
  int json = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (argv[i][0] == '-')
      return cli_usage_error("unknown option '%s' for stages", argv[i]);
    else if (!name)
      name = argv[i];
    else
      return cli_usage_error("stages takes one stage name, got also '%s'",
                             argv[i]);
  }
  char err[1024] = "";
  int rc = catalog_print(stdout, name, json, err, sizeof err);
  if (rc != 0 && err[0])
    fprintf(stderr, "dagrun: %s\n", err);
  return rc == 0 ? 0 : rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
}

/* State shared by the run's callbacks. */
typedef struct run_ctx {
  uv_loop_t *loop;
  view *v;
  sched *s;
  alerts *al; /* NULL: the DAG has no alerts */
  history *h; /* the run store's record of this run */
  uv_signal_t sigint, sigterm, sighup;
  int stop_signal; /* first signal that stopped the run */
  int n_signals;
  const spec *sp;
  char **pool_waits; /* per task: what it was last shown waiting for */
  /* max_active_runs: the poll while the run is queued, and why it is. */
  uv_timer_t admit;
  int admitting;
  char *admit_why;
  uv_prepare_t flush; /* commits the store's batch before the loop waits */
  char *store_reserve; /* see reserve_store; NULL: none */
  uv_timer_t beat;     /* history_beat every OWNER_BEAT_S */
} run_ctx;

static void on_beat(uv_timer_t *t) { history_beat(((run_ctx *)t->data)->h); }

/* Removes the reserves beside the store (reserve_store) of runs no longer
 * going: a dagrun killed leaves its reserve, 256 KiB a death, and its
 * resume makes one again. */
static void sweep_store_reserves(store *db, const char *dir,
                                 const char *db_name) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  char *prefix = xasprintf("%s.reserve-", db_name);
  size_t np = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, np) != 0)
      continue;
    char err[256];
    int rc;
    cJSON *r = store_run(db, e->d_name + np, &rc, err, sizeof err);
    if (rc == DR_ENOENT ||
        (r && !store_state_active(store_str(r, "state", "")))) {
      char *p = path_join(dir, e->d_name);
      unlink(p);
      free(p);
    }
    cJSON_Delete(r);
  }
  closedir(d);
  free(prefix);
}

/* The run store's own reserve, when it is on another file system than
 * the run's directory (DAGRUN_HOME elsewhere): that disk filling must not
 * leave a run that succeeded recorded as running, then interrupted, and
 * resumed from the start. A file beside the store, named for the run (runs
 * share a store); NULL when none is needed or the disk is full already. */
static char *reserve_store(store *db, const rundir *run) {
  const char *db_path = db ? store_path(db) : NULL;
  if (!db_path)
    return NULL;
  char *dir = path_dirname(db_path);
  struct stat a, b;
  int apart =
      stat(dir, &a) == 0 && stat(run->path, &b) == 0 && a.st_dev != b.st_dev;
  if (apart) {
    const char *slash = strrchr(db_path, '/');
    sweep_store_reserves(db, dir, slash ? slash + 1 : db_path);
  }
  free(dir);
  if (!apart)
    return NULL;
  char *path = xasprintf("%s.reserve-%s", db_path, run->id);
  if (fileio_reserve(path, RUNDIR_RESERVE_BYTES) != 0) {
    free(path);
    return NULL;
  }
  return path;
}

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

static int obs_approval_poll(void *ud, size_t task, int attempt,
                             cJSON **outputs, char **reason) {
  return history_approval_poll(((run_ctx *)ud)->h, task, attempt, outputs,
                               reason);
}

/* sched_opts.pool_acquire: a slot of the task's pool, machine-wide. The
 * view hears of a wait when what the task waits for changes, not at each
 * poll. */
static int obs_pool_acquire(void *ud, size_t task) {
  run_ctx *r = ud;
  const spec_pool *p = &r->sp->pools[r->sp->tasks[task].pool];
  char *why = NULL;
  int ok = history_pool_acquire(r->h, task, p->name, p->size, &why);
  char **last = &r->pool_waits[task];
  if (ok || !why || (*last && strcmp(*last, why) == 0)) {
    free(why);
    why = NULL;
  } else {
    view_task_waiting(r->v, task, why);
  }
  if (ok || why) {
    free(*last);
    *last = why;
  }
  return ok;
}

/* A map over a run-time list expanded: its instances are tasks from now
 * on, for the store first, as for events. */
static void obs_tasks_added(void *ud, size_t first, size_t n) {
  run_ctx *r = ud;
  history_tasks_added(r->h, first, n);
  view_tasks_added(r->v, first, n);
  alerts_tasks_added(r->al, first, n);
  r->pool_waits = xrealloc(r->pool_waits, (first + n) * sizeof(char *));
  memset(r->pool_waits + first, 0, n * sizeof(char *));
}

static void obs_pool_release(void *ud, size_t task) {
  history_pool_release(((run_ctx *)ud)->h, task);
}

static void obs_progress(void *ud, size_t task, double f, const char *msg) {
  view_task_progress(((run_ctx *)ud)->v, task, f, msg);
}

static void obs_log(void *ud, size_t task, int level, const char *msg) {
  view_task_log(((run_ctx *)ud)->v, task, level, msg);
}

static void on_flush(uv_prepare_t *p) {
  history_flush(((run_ctx *)p->data)->h);
}

static void obs_done(void *ud) {
  run_ctx *r = ud;
  /* Closing the signal watchers lets uv_run return. */
  uv_close((uv_handle_t *)&r->sigint, NULL);
  uv_close((uv_handle_t *)&r->sigterm, NULL);
  uv_close((uv_handle_t *)&r->sighup, NULL);
}

/* max_active_runs: the run starts once the store admits it
 * (store_run_admit); until then it is recorded "queued" and asks again
 * every ADMIT_POLL_MS. A stop signal meanwhile ends the wait (on_signal)
 * and the run, whose tasks never started, is recorded as it is stopped. */
#define ADMIT_POLL_MS 250

static void admit_stop(run_ctx *r) {
  if (!r->admitting)
    return;
  r->admitting = 0;
  uv_close((uv_handle_t *)&r->admit, NULL);
}

static void admit_try(run_ctx *r) {
  char *why = NULL;
  if (history_admit(r->h, r->sp->max_active_runs, &why)) {
    if (r->admit_why)
      view_notice(r->v, "admitted: starting the run");
    admit_stop(r);
    sched_start(r->s);
    return;
  }
  if (!r->admit_why || strcmp(r->admit_why, why) != 0) {
    char *m = xasprintf("waiting: %s", why);
    view_notice(r->v, m);
    free(m);
  }
  free(r->admit_why);
  r->admit_why = why;
}

static void on_admit_poll(uv_timer_t *t) { admit_try(t->data); }

/* Starts the run's tasks now, or, for a DAG with max_active_runs, once
 * the run is admitted. */
static void start_or_queue(run_ctx *r) {
  if (r->sp->max_active_runs <= 0) {
    sched_start(r->s);
    return;
  }
  uv_timer_init(r->loop, &r->admit);
  r->admit.data = r;
  r->admitting = 1;
  uv_timer_start(&r->admit, on_admit_poll, ADMIT_POLL_MS, ADMIT_POLL_MS);
  admit_try(r);
}

static void on_signal(uv_signal_t *h, int signum) {
  run_ctx *r = h->data;
  admit_stop(r);
  /* A closing terminal sends SIGHUP twice (the kernel to the foreground
   * group, the shell to its jobs): a hangup never asks to kill the tasks
   * now, as a second Ctrl-C does. */
  if (signum == SIGHUP && r->stop_signal)
    return;
  r->n_signals++;
  if (!r->stop_signal)
    r->stop_signal = signum;
  if (r->n_signals == 1) {
    view_notice(r->v, signum == SIGINT
                          ? "interrupted: stopping tasks (Ctrl-C again to "
                            "kill them now)"
                      : signum == SIGHUP ? "hangup: stopping tasks"
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
    fprintf(stderr, "dagrun: cannot write %s: %s\n", path, strerror(-rc));
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
 * the loop watches for them, SIGINT, SIGTERM (`dagrun cancel`) and SIGHUP
 * (the terminal closed) wait blocked: they then stop the run cleanly
 * instead of killing dagrun with the run recorded as running. */
static void stop_signals_block(int block) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

/* Runs (or, with preset, goes on with) a run whose start or resumption is
 * recorded in h (taken over: finished here), on the default loop. Returns
 * the exit code. */
static int execute(const spec *sp, checked *ck, const rundir *run,
                   const cJSON *params, history *h, int max_parallel,
                   view_mode mode, const char *worker_exe,
                   const sched_preset *preset, int no_cache) {
  char err[1024];
  run_ctx r = {0};
  r.h = h;
  r.sp = sp;
  r.pool_waits = xcalloc(sp->n_tasks ? sp->n_tasks : 1, sizeof(char *));
  r.loop = uv_default_loop();
  r.v = view_create(r.loop, mode, sp, stdout);
  secrets *sec = secrets_collect(sp, params, run);
  if (alerts_create(r.loop, sp, run, params, history_store(h), &r.al, err,
                    sizeof(err)) != 0)
    fprintf(stderr, "dagrun: alerts off for this run: %s\n", err);
  sched_opts so = {max_parallel,
                   worker_exe,
                   {obs_event, obs_progress, obs_log, obs_done, &r,
                    obs_attempt_start, obs_tasks_added},
                   0,
                   preset,
                   obs_cache_lookup,
                   no_cache,
                   sec,
                   obs_pool_acquire,
                   obs_pool_release,
                   obs_approval_poll};
  r.s = sched_create(r.loop, ck, run, params, &so);
  /* Before any attempt or pool slot: what the run holds stays held while
   * the guard stops its attempts, should this dagrun die (owner.h). */
  history_guard(h, sched_guard_pid(r.s));
  rundir_reserve(run);
  r.store_reserve = reserve_store(history_store(r.h), run);
  write_run_json(sp, run, params, r.s, "running", max_parallel);
  uv_signal_init(r.loop, &r.sigint);
  uv_signal_init(r.loop, &r.sigterm);
  uv_signal_init(r.loop, &r.sighup);
  r.sigint.data = r.sigterm.data = r.sighup.data = &r;
  uv_signal_start(&r.sigint, on_signal, SIGINT);
  uv_signal_start(&r.sigterm, on_signal, SIGTERM);
  uv_signal_start(&r.sighup, on_signal, SIGHUP);
  stop_signals_block(0);

  /* Unreferenced: neither keeps the loop alive by itself. */
  uv_timer_init(r.loop, &r.beat);
  r.beat.data = &r;
  uv_timer_start(&r.beat, on_beat, OWNER_BEAT_S * 1000, OWNER_BEAT_S * 1000);
  uv_unref((uv_handle_t *)&r.beat);
  uv_prepare_init(r.loop, &r.flush);
  r.flush.data = &r;
  uv_prepare_start(&r.flush, on_flush);
  uv_unref((uv_handle_t *)&r.flush);

  view_run_started(r.v, run, max_parallel);
  start_or_queue(&r);
  uv_run(r.loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&r.flush, NULL);
  uv_close((uv_handle_t *)&r.beat, NULL);

  size_t counts[TASK_STATE_COUNT];
  sched_counts(r.s, counts);
  /* Ctrl-C and SIGTERM are someone's wish to stop the run: cancelled. A
   * hangup is not (the terminal went away): interrupted, as a run whose
   * dagrun died is, to be resumed. */
  const char *state =
      r.stop_signal == SIGHUP ? "interrupted"
      : r.stop_signal         ? "cancelled"
      : counts[TASK_SUCCESS] + counts[TASK_CACHED] + counts[TASK_SKIPPED] ==
              sp->n_tasks
          ? "success"
          : "failed";
  store *db = history_store(r.h); /* the caller's: still open after */
  rundir_release_reserve(run);    /* room for the records below */
  if (r.store_reserve)
    unlink(r.store_reserve);
  free(r.store_reserve);
  history_finish(r.h, state);
  r.h = NULL;
  write_run_json(sp, run, params, r.s, state, max_parallel);
  if (report_write(db, run->path, run->id, sec, NULL, err, sizeof err) != 0)
    fprintf(stderr, "dagrun: warning: no report.html: %s\n", err);
  if (rundir_disk_short(run))
    fprintf(stderr,
            "dagrun: the disk holding %s is full (or nearly): free space "
            "there (df -h shows it), then `dagrun resume %s` goes on with "
            "the run\n",
            run->path, run->id);
  view_run_finished(r.v, state, r.s);
  view_destroy(r.v);
  alerts_run_finished(r.al, state, sp->n_tasks, clock_wall() - run->started);
  /* Lets closed handles finish, and alert deliveries (up to a grace). */
  uv_run(r.loop, UV_RUN_DEFAULT);
  alerts_destroy(r.al);
  sched_destroy(r.s);
  secrets_destroy(sec);
  uv_loop_close(r.loop);
  for (size_t i = 0; i < sp->n_tasks; i++)
    free(r.pool_waits[i]);
  free(r.pool_waits);
  free(r.admit_why);

  return r.stop_signal == SIGINT         ? 130
         : r.stop_signal == SIGTERM      ? 143
         : r.stop_signal == SIGHUP       ? 129
         : strcmp(state, "success") == 0 ? 0
                                         : EXIT_FAILED;
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
  const char *num = NULL, *events;
  long n;
  if ((strcmp(a, "-j") == 0 || strcmp(a, "--max-parallel") == 0) &&
      *i + 1 < argc)
    num = argv[++*i];
  else if (strncmp(a, "-j", 2) == 0 && a[2])
    num = a + 2;
  if (num) {
    if (cli_number(num, 1, 100000, &n) != 0)
      return cli_usage_error("--max-parallel needs a number >= 1, got '%s'",
                             num);
    f->max_parallel = (int)n;
  } else if ((events = cli_value(argc, argv, i, "--events"))) {
    if (strcmp(events, "json") != 0)
      return cli_usage_error("--events takes 'json', got '%s'", events);
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

/* Applies `--param NAME=VALUE` overrides (argv-style "NAME=VALUE" strings)
 * to the resolved DAG params: 0, or EXIT_USAGE after saying why. */
static int apply_param_overrides(const spec *sp, cJSON *params,
                                 char *const *kv, size_t n) {
  char err[512];
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(kv[i], '=');
    if (!eq || eq == kv[i])
      return cli_usage_error("--param takes NAME=VALUE, got '%s'", kv[i]);
    size_t len = strlen(eq + 1), bad = utf8_bad_at(eq + 1, len);
    if (bad < len) {
      /* run.json, the store and every JSON answer would show it. */
      fprintf(stderr,
              "dagrun: --param %.*s: the value is not UTF-8 text (byte "
              "0x%02x at %zu)\n",
              (int)(eq - kv[i]), kv[i], (unsigned char)eq[1 + bad], bad);
      return EXIT_USAGE;
    }
    char *name = xstrndup(kv[i], (size_t)(eq - kv[i]));
    int rc = tmpl_override_param(sp, params, name, eq + 1, err, sizeof err);
    int secret = spec_param_secret(sp, name);
    free(name);
    if (rc != 0) {
      /* A secret's value is not shown (its name is). */
      fprintf(stderr, "dagrun: --param %.*s%s: %s\n",
              secret ? (int)(eq - kv[i] + 1) : (int)strlen(kv[i]), kv[i],
              secret ? "***" : "", err);
      return EXIT_USAGE;
    }
  }
  return 0;
}

/* What started a run, as `dagrun run --trigger` takes it (store.h). */
static const char *const run_triggers[] = {
    "manual", "cron", "api", "backfill", "files", "dataset", NULL};

/* `dagrun run`'s command line, read. */
typedef struct run_args {
  const char *file, *runs_dir, *run_id, *trigger;
  const char *logical_date; /* --logical-date as given, or NULL */
  char **overrides;    /* --param "NAME=VALUE" strings, borrowed from argv */
  size_t n_overrides, cap_overrides;
  cJSON *env_params; /* --params-from-env: DAGRUN_RUN_PARAMS, parsed */
  int ready_fd;      /* --ready-fd, or -1 */
  exec_flags fl;
} run_args;

/* `--ready-fd N`: an open descriptor, made close-on-exec at once so that
 * no task inherits it (its holder waits for its end of file otherwise).
 * 1, or EXIT_USAGE. */
static int ready_fd_option(const char *v, run_args *ra) {
  char *end;
  long fd = strtol(v, &end, 10);
  if (*end || end == v || fd < 3 || fd > INT_MAX ||
      fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0)
    return cli_usage_error("--ready-fd takes an open file descriptor above "
                           "2, got '%s'",
                           v);
  ra->ready_fd = (int)fd;
  return 1;
}

/* Tells whoever holds the other end of --ready-fd that the run is
 * recorded, and closes it. A reader gone is no reason to stop the run. */
static void ready_tell(const run_args *ra) {
  if (ra->ready_fd < 0)
    return;
  static const char line[] = "recorded\n";
  if (write(ra->ready_fd, line, sizeof line - 1) < 0)
    fprintf(stderr, "dagrun: warning: --ready-fd %d: %s\n", ra->ready_fd,
            strerror(errno));
  close(ra->ready_fd);
}

/* `--params-from-env`: more overrides, from DAGRUN_RUN_PARAMS (a JSON
 * array of "NAME=VALUE" strings), which `serve` sets rather than passing
 * them as --param: a command line is anyone's to read, an environment
 * only its owner's. The variable is then unset, so that no task inherits
 * it. 1, or EXIT_USAGE. */
static int params_from_env(run_args *ra) {
  const char *text = getenv("DAGRUN_RUN_PARAMS");
  cJSON *list = text ? cJSON_Parse(text) : NULL;
  if (!cJSON_IsArray(list)) {
    cJSON_Delete(list);
    return cli_usage_error("%s", "--params-from-env: DAGRUN_RUN_PARAMS is "
                                 "not a JSON array of \"NAME=VALUE\" strings");
  }
  size_t n = (size_t)cJSON_GetArraySize(list);
  ra->overrides =
      xrealloc(ra->overrides, (ra->cap_overrides + n) * sizeof(char *));
  ra->cap_overrides += n;
  const cJSON *p;
  cJSON_ArrayForEach(p, list) {
    if (!cJSON_IsString(p)) {
      cJSON_Delete(list);
      return cli_usage_error("%s", "--params-from-env: DAGRUN_RUN_PARAMS "
                                   "holds something other than strings");
    }
    ra->overrides[ra->n_overrides++] = p->valuestring;
  }
  cJSON_Delete(ra->env_params);
  ra->env_params = list;
  unsetenv("DAGRUN_RUN_PARAMS");
  return 1;
}

/* Reads argv[*i] (and its value) if it is one of the options only `run`
 * takes. Returns 1 when it was (with *i past it), 0 when it is not one of
 * them, or EXIT_USAGE after a usage error. */
static int run_option(int argc, char **argv, int *i, run_args *ra) {
  const char *v;
  if ((v = cli_value(argc, argv, i, "--runs-dir"))) {
    ra->runs_dir = v;
  } else if ((v = cli_value(argc, argv, i, "--param")) ||
             (v = cli_value(argc, argv, i, "-p"))) {
    ra->overrides[ra->n_overrides++] = (char *)v;
  } else if (strcmp(argv[*i], "--params-from-env") == 0) {
    return params_from_env(ra);
  } else if ((v = cli_value(argc, argv, i, "--run-id"))) {
    if (!rundir_id_valid(v))
      return cli_usage_error("bad --run-id '%s': expected letters, digits, "
                             "'_', '.' and '-', not starting with '.'",
                             v);
    ra->run_id = v;
  } else if ((v = cli_value(argc, argv, i, "--ready-fd"))) {
    return ready_fd_option(v, ra);
  } else if ((v = cli_value(argc, argv, i, "--trigger"))) {
    int known = 0;
    for (size_t k = 0; run_triggers[k]; k++)
      known |= strcmp(v, run_triggers[k]) == 0;
    if (!known)
      return cli_usage_error(
          "--trigger takes manual, cron, api, backfill, files or dataset, "
          "got '%s'",
          v);
    ra->trigger = v;
  } else if ((v = cli_value(argc, argv, i, "--logical-date"))) {
    /* Checked here in UTC, so that a bad value is a usage error before
     * anything loads; read again in the DAG's zone (run_logical_date). */
    cron_zone *utc;
    int64_t t;
    char err[128];
    int bad = cron_zone_open(NULL, &utc, err, sizeof err) != 0 ||
              cron_parse_time(v, utc, &t) != 0;
    cron_zone_close(utc);
    if (bad)
      return cli_usage_error("--logical-date takes a time such as "
                             "2026-11-21T02:30:00Z, 2026-11-21T03:30:00+01:00 "
                             "or 2026-11-21 (local to the DAG's timezone), "
                             "got '%s'",
                             v);
    ra->logical_date = v;
  } else {
    return 0;
  }
  return 1;
}

static int run_file(const run_args *ra);

static int cmd_run(int argc, char **argv) {
  run_args ra = {.trigger = "manual", .ready_fd = -1};
  ra.overrides = xcalloc((size_t)argc + 1, sizeof(char *));
  ra.cap_overrides = (size_t)argc + 1;
  exec_flags_init(&ra.fl);
  int code = EXIT_USAGE;
  for (int i = 0; i < argc; i++) {
    int used = exec_flag(argc, argv, &i, &ra.fl);
    if (!used)
      used = run_option(argc, argv, &i, &ra);
    if (used == EXIT_USAGE)
      goto done;
    if (used)
      continue;
    if (argv[i][0] == '-') {
      cli_usage_error("unknown option '%s'", argv[i]);
      goto done;
    }
    if (ra.file) {
      cli_usage_error("run takes one DAG file, got also '%s'", argv[i]);
      goto done;
    }
    ra.file = argv[i];
  }
  if (!ra.file) {
    cli_usage_error("%s", "run needs a DAG file");
    goto done;
  }
  ra.runs_dir = cli_runs_dir(ra.runs_dir);
  code = run_file(&ra);
done:
  free(ra.overrides);
  cJSON_Delete(ra.env_params);
  return code;
}

/* Opens the run store for `dagrun run FILE`: 0 with *db, or EXIT_USAGE
 * after saying why. It is opened before anything runs: a run that could
 * not be recorded is refused, not run unrecorded. */
static int run_store_open(const char *file, store **db) {
  char err[1024];
  char *db_path = store_default_path();
  if (store_open(db_path, 1, db, err, sizeof err) != 0) {
    fprintf(stderr,
            "dagrun: %s\ndagrun: not running %s: its history cannot be "
            "recorded in %s (set DAGRUN_HOME to a writable directory)\n",
            err, file, db_path);
    free(db_path);
    *db = NULL;
    return EXIT_USAGE;
  }
  free(db_path);
  return 0;
}

/* The DAG params as the DAG resolves them for this run's id and date (run
 * and resume resolve them again once run.* has values). Caller frees; NULL
 * after printing why. */
static cJSON *run_params_resolve(const spec *sp, const rundir *run) {
  diags d = {0};
  cJSON *params = NULL;
  tmpl_env te = {0};
  te.s = sp;
  rundir_tmpl(run, &te);
  if (tmpl_resolve_params(&te, &params, &d) != 0) {
    diags_print(&d, stderr);
    cJSON_Delete(params);
    params = NULL;
  }
  diags_free(&d);
  return params;
}

/* Records the start of the run in db, its params shown with secrets
 * redacted: 0 with *h, or EXIT_USAGE after saying why. From here on,
 * SIGINT, SIGTERM and SIGHUP wait blocked until execute() watches for
 * them. */
static int run_record_start(store *db, const spec *sp, const rundir *run,
                            const cJSON *params, const run_args *ra,
                            history **h) {
  char err[1024];
  cJSON *shown = cJSON_Duplicate(params, 1);
  secrets_redact_params(sp, shown);
  char *pj = cJSON_PrintUnformatted(shown);
  stop_signals_block(1);
  int rc = history_begin(db, sp, run, pj, ra->trigger, run->logical_date, h,
                         err, sizeof err);
  cJSON_free(pj);
  cJSON_Delete(shown);
  if (rc != 0) {
    fprintf(stderr,
            "dagrun: %s\ndagrun: not running %s: its history "
            "cannot be recorded\n",
            err, ra->file);
    return EXIT_USAGE;
  }
  return 0;
}

/* Sets run's trigger and logical time: the logical date (0: its start) and,
 * for a cron or backfill run of a scheduled DAG, the data interval from the
 * schedule's previous fire time (cron_prev) to the logical date, both in
 * the DAG's time zone. Used by run and resume alike, so a resumed run sees
 * the same ${run.*} as it did first. 0, or EXIT_USAGE after saying why. */
static int run_set_time(const spec *sp, rundir *run, const char *trigger,
                        double logical_date) {
  char err[512];
  double istart = 0;
  int scheduled = trigger && (strcmp(trigger, "cron") == 0 ||
                              strcmp(trigger, "backfill") == 0);
  if (scheduled && logical_date > 0 && sp->schedule) {
    cron_expr *e;
    cron_zone *z;
    int64_t prev;
    if (spec_schedule_open(sp, &e, &z, err, sizeof err) != 0) {
      fprintf(stderr, "dagrun: %s: %s\n", sp->path, err);
      return EXIT_USAGE;
    }
    int rc = cron_prev(e, z, (int64_t)logical_date, &prev, err, sizeof err);
    cron_destroy(e);
    cron_zone_close(z);
    if (rc != 0) {
      fprintf(stderr, "dagrun: %s: %s\n", sp->path, err);
      return EXIT_USAGE;
    }
    istart = (double)prev;
  }
  if (rundir_set_time(run, trigger, sp->timezone, logical_date, istart, err,
                      sizeof err) != 0) {
    fprintf(stderr, "dagrun: %s: %s\n", sp->path, err);
    return EXIT_USAGE;
  }
  return 0;
}

/* --logical-date in sp's time zone (a time without an offset is local to
 * it) into *t (0 when not given): 0, or EXIT_USAGE after saying why. */
static int run_logical_date(const spec *sp, const char *z, double *t) {
  char err[512];
  cron_zone *zone;
  int64_t v;
  *t = 0;
  if (!z)
    return 0;
  if (cron_zone_open(sp->timezone, &zone, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun: %s: %s\n", sp->path, err);
    return EXIT_USAGE;
  }
  int rc = cron_parse_time(z, zone, &v);
  cron_zone_close(zone);
  if (rc != 0)
    return cli_usage_error("bad --logical-date '%s'", z);
  *t = (double)v;
  return 0;
}

/* A data-triggered run (--trigger files or dataset, started by `dagrun
 * serve`): what started it, from $DAGRUN_TRIGGER_INFO (a JSON object),
 * into run's ${run.trigger_*} and *info (caller frees; recorded in the
 * store once the run is). Other triggers: nothing. 0, or EXIT_USAGE after
 * saying why. */
static int run_trigger_info(rundir *run, const char *trigger, char **info) {
  *info = NULL;
  if (!trigger ||
      (strcmp(trigger, "files") != 0 && strcmp(trigger, "dataset") != 0))
    return 0;
  const char *v = getenv("DAGRUN_TRIGGER_INFO");
  cJSON *j = v ? cJSON_Parse(v) : NULL;
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return cli_usage_error("--trigger %s needs $DAGRUN_TRIGGER_INFO, a JSON "
                           "object saying what started the run (dagrun "
                           "serve sets it)",
                           trigger);
  }
  rundir_set_trigger_info(run, j);
  *info = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  return 0;
}

/* Whether db has run id's row (not another's whose id it begins). */
static int run_is_recorded(store *db, const char *id) {
  char err[512];
  int rc;
  cJSON *r = store_run(db, id, &rc, err, sizeof err);
  const cJSON *got = cJSON_GetObjectItemCaseSensitive(r, "id");
  int yes = cJSON_IsString(got) && strcmp(got->valuestring, id) == 0;
  cJSON_Delete(r);
  return yes;
}

/* `dagrun run` once its command line is read: the DAG, the store, the run
 * directory, the params, the record of the start, then the run. */
static int run_file(const run_args *ra) {
  exec_flags fl = ra->fl;
  spec *sp;
  checked *ck;
  if (load_checked(ra->file, &sp, &ck) != 0)
    return EXIT_USAGE;
  if (!fl.max_parallel)
    fl.max_parallel =
        sp->max_parallel ? sp->max_parallel : default_parallelism();
  int code = EXIT_USAGE;
  char err[1024];
  char worker_exe[4096];
  store *db = NULL;
  rundir *run = NULL;
  cJSON *params = NULL;
  history *h;
  double logical_date;
  char *tinfo = NULL; /* a data trigger's DAGRUN_TRIGGER_INFO */
  if (run_logical_date(sp, ra->logical_date, &logical_date) != 0)
    goto out;
  if (rundir_create(ra->runs_dir, sp->dag, ra->run_id, logical_date, &run,
                    err, sizeof(err)) != 0) {
    fprintf(stderr, "dagrun: %s\n", err);
    goto out;
  }
  /* The params need the run's id and dates; a run they refuse leaves no
   * trace: neither its directories nor a store (opened only after). */
  if (run_set_time(sp, run, ra->trigger, logical_date) != 0 ||
      run_trigger_info(run, ra->trigger, &tinfo) != 0 ||
      !(params = run_params_resolve(sp, run)) ||
      apply_param_overrides(sp, params, ra->overrides, ra->n_overrides) != 0 ||
      run_store_open(ra->file, &db) != 0) {
    rundir_discard(run);
    goto out;
  }
  if (cli_helper_exe("dagrun-worker", worker_exe, sizeof worker_exe) != 0 ||
      run_record_start(db, sp, run, params, ra, &h) != 0) {
    /* Nothing ran: the directory goes, unless a record names it (the
     * run's row can be in, its claim not). */
    if (!run_is_recorded(db, run->id))
      rundir_discard(run);
    goto out;
  }
  if (tinfo && store_run_trigger_set(db, run->id, tinfo, err, sizeof err) != 0)
    fprintf(stderr, "dagrun: warning: %s\n", err);
  ready_tell(ra);
  code = execute(sp, ck, run, params, h, fl.max_parallel, fl.mode, worker_exe,
                 NULL, fl.no_cache);
out:
  free(tinfo);
  cJSON_Delete(params);
  rundir_destroy(run);
  store_close(db);
  checked_free(ck);
  spec_free(sp);
  return code;
}

/* What `dagrun resume` gathers before the run goes on; all of it is freed
 * in one place (resume_job_free), whichever step fails. */
typedef struct resume_job {
  store *db;
  cJSON *rec;                 /* the run as recorded */
  const char **clear;         /* --clear: tasks to run again, succeeded too */
  size_t n_clear;
  int downstream;             /* --downstream: and every task after them */
  int force;                  /* --force: even if its dagrun is elsewhere */
  const char *run_id, *state; /* in rec */
  int owner;                  /* pid of the dagrun that last ran it */
  spec *sp;
  checked *ck;
  rundir *run;
  cJSON *params;
  sched_preset *preset;
} resume_job;

static void resume_job_free(resume_job *j) {
  free(j->clear);
  free(j->preset);
  cJSON_Delete(j->params);
  rundir_destroy(j->run);
  checked_free(j->ck);
  spec_free(j->sp);
  cJSON_Delete(j->rec);
  store_close(j->db);
}

/* Whether the recorded run is not to be resumed: 1 with *code (1: its
 * dagrun is still running it, or may be; 0: it succeeded, nothing to do),
 * after saying so; 0 when it may be resumed. A live dagrun refuses
 * whatever the state says: "interrupted" may have been written by a
 * reader that could not see it (an older dagrun in another container),
 * and one that recorded the end of its run may still be writing its
 * report in the run directory. */
static int resume_refused(resume_job *j, int *code) {
  owner o;
  owner_of_run(j->rec, &o);
  owner_state w = owner_judge(&o);
  j->owner = o.pid > 0 ? o.pid : 0;
  *code = EXIT_FAILED;
  if (w == OWNER_ALIVE && !store_state_active(j->state) &&
      strcmp(j->state, "interrupted") != 0) {
    fprintf(stderr,
            "dagrun: run %s is %s, but its dagrun (pid %d) has not exited "
            "yet: not resuming it until it has\n",
            j->run_id, j->state, j->owner);
    return 1;
  }
  if (w == OWNER_ALIVE) {
    fprintf(stderr,
            "dagrun: run %s is still running (dagrun pid %d): not resuming "
            "it; `dagrun cancel %s` stops it\n",
            j->run_id, j->owner, j->run_id);
    return 1;
  }
  if (w == OWNER_ELSEWHERE && store_state_active(j->state) && !j->force) {
    char where[320];
    owner_where(&o, where, sizeof where);
    fprintf(stderr,
            "dagrun: run %s is recorded running by dagrun (pid %d) %s, "
            "whose liveness cannot be seen from here: not resuming it. "
            "Resume it there; or, if you know that dagrun is dead (its "
            "host or container is gone), `dagrun resume %s --force`\n",
            j->run_id, j->owner, where, j->run_id);
    return 1;
  }
  if (strcmp(j->state, "success") == 0 && !j->n_clear) {
    printf("run %s already succeeded: nothing to resume (--clear TASK runs "
           "a task again)\n",
           j->run_id);
    *code = 0;
    return 1;
  }
  return 0;
}

/* The DAG params of a resumed run: as the DAG resolves them for its run id
 * and date, with the recorded values on top (secrets were recorded
 * "(redacted)": those come from the DAG). Caller frees; NULL after
 * printing why. */
static cJSON *resume_params(const spec *sp, const rundir *run,
                            const cJSON *recorded) {
  cJSON *params = run_params_resolve(sp, run);
  if (!params)
    return NULL;
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

/* The run's DAG file as it is now, its run directory and its params into
 * j: 0, or EXIT_USAGE after saying why. */
static int resume_load(resume_job *j) {
  const char *file = store_str(j->rec, "dag_file", "");
  char err[1024];
  if (load_checked(file, &j->sp, &j->ck) != 0) {
    fprintf(stderr,
            "dagrun: cannot resume run %s: its DAG file %s does not "
            "load\n",
            j->run_id, file);
    return EXIT_USAGE;
  }
  /* Resuming with an edited DAG file is allowed (fixing a task is what
   * resume is for) but never silent. */
  const char *was = store_str(j->rec, "dag_sha256", "");
  char *now = history_dag_sha256(file);
  if (was && now && strcmp(was, now) != 0)
    fprintf(stderr,
            "dagrun: warning: %s changed since run %s started; resuming "
            "with the file as it is now\n",
            file, j->run_id);
  free(now);
  if (rundir_open(store_str(j->rec, "run_dir", ""), j->run_id,
                  store_num(j->rec, "started", 0),
                  store_num(j->rec, "logical_date", 0), &j->run, err,
                  sizeof err) != 0) {
    fprintf(stderr, "dagrun: cannot resume run %s: %s\n", j->run_id, err);
    return EXIT_USAGE;
  }
  const char *trigger = store_str(j->rec, "trigger", "");
  if (run_set_time(j->sp, j->run, *trigger ? trigger : NULL,
                   store_num(j->rec, "logical_date", 0)) != 0)
    return EXIT_USAGE;
  rundir_set_trigger_info(
      j->run, cJSON_GetObjectItemCaseSensitive(j->rec, "trigger_info"));
  j->params = resume_params(j->sp, j->run,
                            cJSON_GetObjectItemCaseSensitive(j->rec, "params"));
  return j->params ? 0 : EXIT_USAGE;
}

/* Whether task i is one --clear names: by its name, or a mapped task's
 * instances by the name written (spec_task.label). */
static int clear_names(const resume_job *j, size_t i, const char *name) {
  const spec_task *t = &j->sp->tasks[i];
  return strcmp(t->name, name) == 0 ||
         (t->label && strcmp(t->label, name) == 0);
}

/* 0, or EXIT_USAGE after naming a --clear task the DAG does not have. */
static int resume_clear_check(const resume_job *j) {
  for (size_t k = 0; k < j->n_clear; k++) {
    size_t i = 0;
    while (i < j->sp->n_tasks && !clear_names(j, i, j->clear[k]))
      i++;
    if (i == j->sp->n_tasks) {
      fprintf(stderr, "dagrun: --clear %s: run %s's DAG has no such task\n",
              j->clear[k], j->run_id);
      return EXIT_USAGE;
    }
  }
  return 0;
}

/* --clear's tasks (and with --downstream every task they reach) run
 * again: their presets say not succeeded, the attempts made kept. */
static void resume_clear(resume_job *j) {
  size_t n = j->sp->n_tasks;
  int *hit = xcalloc(n ? n : 1, sizeof *hit);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < j->n_clear; k++)
      hit[i] |= clear_names(j, i, j->clear[k]);
  dag_reach *reach = j->downstream ? dag_reach_create(j->sp) : NULL;
  for (size_t i = 0; i < n; i++) {
    int again = hit[i];
    for (size_t c = 0; reach && !again && c < n; c++)
      again = hit[c] && dag_is_upstream(reach, i, c);
    if (again) {
      j->preset[i].succeeded = 0;
      j->preset[i].outputs = NULL;
      j->preset[i].fingerprint = NULL;
      printf("run %s: %s runs again (--clear)\n", j->run_id,
             j->sp->tasks[i].name);
    }
  }
  if (reach)
    dag_reach_destroy(reach);
  free(hit);
}

/* Makes this process the run's dagrun and records that the run goes on:
 * 0 with *h, or the exit status after saying why. From the claim on,
 * SIGINT, SIGTERM and SIGHUP wait blocked until execute() watches for
 * them. */
static int resume_claim(resume_job *j, history **h) {
  char err[1024];
  /* Claimed before the orphans are handled: of two resumes at once, one
   * goes on and the other stops here. */
  stop_signals_block(1);
  if (store_run_claim(j->db, j->run_id, owner_here(), j->owner,
                      (long long)store_num(j->rec, "orch_start", 0), err,
                      sizeof err) != 0) {
    fprintf(stderr, "dagrun: cannot resume run %s: %s\n", j->run_id, err);
    return EXIT_FAILED;
  }
  resume_expand_maps(j->rec, j->ck);
  if ((j->preset = resume_prepare(j->db, j->rec, j->sp, err, sizeof err)))
    resume_clear(j);
  if (!j->preset || history_resume(j->db, j->sp, j->run_id, j->preset, h, err,
                                   sizeof err) != 0) {
    fprintf(stderr, "dagrun: cannot resume run %s: %s\n", j->run_id, err);
    /* Back to the state it had: the next resume may try again. */
    store_run_finish(j->db, j->run_id, j->state, clock_wall(), err,
                     sizeof err);
    return EXIT_USAGE;
  }
  return 0;
}

/* dagrun resume RUN [options]: goes on with a recorded run in its run
 * directory, running again only what had not succeeded. */
static int cmd_resume(int argc, char **argv) {
  const char *id = NULL;
  exec_flags fl;
  exec_flags_init(&fl);
  resume_job j = {0};
  j.clear = xcalloc((size_t)argc + 1, sizeof *j.clear);
  int code = 0;
  for (int i = 0; i < argc && code == 0; i++) {
    int used = exec_flag(argc, argv, &i, &fl);
    if (used == EXIT_USAGE)
      code = EXIT_USAGE;
    else if (used)
      continue;
    else if (strcmp(argv[i], "--clear") == 0 && i + 1 < argc)
      j.clear[j.n_clear++] = argv[++i];
    else if (strcmp(argv[i], "--downstream") == 0)
      j.downstream = 1;
    else if (strcmp(argv[i], "--force") == 0)
      j.force = 1;
    else if (argv[i][0] == '-')
      code = cli_usage_error("unknown option '%s' for resume", argv[i]);
    else if (id)
      code = cli_usage_error("resume takes one run, got also '%s'", argv[i]);
    else
      id = argv[i];
  }
  if (code == 0 && !id)
    code = cli_usage_error("%s", "resume needs a run id (see dagrun runs)");
  if (code == 0 && j.downstream && !j.n_clear)
    code = cli_usage_error("%s", "--downstream goes with --clear TASK");
  /* A task run again on purpose runs: not taken from the cache. */
  fl.no_cache |= j.n_clear > 0;
  if (code == 0)
    code = history_open_run(id, &j.db, &j.rec);
  if (code != 0) {
    free(j.clear);
    return code;
  }
  j.run_id = store_str(j.rec, "id", "");
  j.state = store_str(j.rec, "state", "");
  char worker_exe[4096];
  history *h;
  if (resume_refused(&j, &code) || (code = resume_load(&j)) != 0 ||
      (code = resume_clear_check(&j)) != 0)
    goto out;
  if (cli_helper_exe("dagrun-worker", worker_exe, sizeof worker_exe) != 0) {
    code = EXIT_USAGE;
    goto out;
  }
  if ((code = resume_claim(&j, &h)) != 0)
    goto out;
  if (!fl.max_parallel)
    fl.max_parallel =
        j.sp->max_parallel ? j.sp->max_parallel : default_parallelism();
  code = execute(j.sp, j.ck, j.run, j.params, h, fl.max_parallel, fl.mode,
                 worker_exe, j.preset, fl.no_cache);
out:
  resume_job_free(&j);
  return code;
}

/* How long `dagrun cancel` waits for the run to be recorded finished. */
#define CANCEL_WAIT_S 60.0

/* Waits until run run_id, whose dagrun (pid dagrun_pid) was sent SIGTERM, is
 * recorded finished: 0 after printing its final state, or EXIT_FAILED
 * after saying why not. *rec is replaced by each new reading. */
static int cancel_wait(store *db, const char *run_id, int dagrun_pid,
                       cJSON **rec) {
  double end = clock_monotonic() + CANCEL_WAIT_S;
  int rc;
  char err[1024];
  for (;;) {
    cJSON_Delete(*rec);
    *rec = store_run(db, run_id, &rc, err, sizeof err);
    if (*rec && !store_state_active(store_str(*rec, "state", ""))) {
      printf("run %s %s\n", run_id, store_str(*rec, "state", ""));
      return 0;
    }
    if (!*rec ||
        !proc_alive(dagrun_pid, (long long)store_num(*rec, "orch_start", 0))) {
      fprintf(stderr,
              "dagrun: run %s: its dagrun ended without recording "
              "the end of the run\n",
              run_id);
      return EXIT_FAILED;
    }
    if (clock_monotonic() > end) {
      fprintf(stderr,
              "dagrun: run %s still running %.0fs after SIGTERM "
              "to dagrun pid %d\n",
              run_id, CANCEL_WAIT_S, dagrun_pid);
      return EXIT_FAILED;
    }
    uv_sleep(100);
  }
}

/* dagrun cancel RUN: asks the dagrun running RUN to stop it (SIGTERM, as
 * Ctrl-C does) and waits until the run is recorded finished. */
static int cmd_cancel(int argc, char **argv) {
  if (argc != 1 || argv[0][0] == '-')
    return cli_usage_error("%s", "usage: dagrun cancel RUN");
  store *db;
  cJSON *rec;
  int code = history_open_run(argv[0], &db, &rec);
  if (code != 0)
    return code;
  char *run_id = xstrdup(store_str(rec, "id", ""));
  int dagrun_pid;
  owner_state w = owner_of_run_judge(rec, &dagrun_pid);
  code = EXIT_FAILED;
  if (strcmp(store_str(rec, "state", ""), "interrupted") == 0) {
    /* Its dagrun is gone (store.h). */
    fprintf(stderr, "dagrun: run %s is not running (interrupted): %s\n", run_id,
            store_str(rec, "note", ""));
  } else if (!store_state_active(store_str(rec, "state", ""))) {
    fprintf(stderr, "dagrun: run %s is not running (it %s)\n", run_id,
            strcmp(store_str(rec, "state", ""), "success") == 0
                ? "succeeded"
                : store_str(rec, "state", ""));
  } else if (w == OWNER_ELSEWHERE) {
    /* Its pid names another process here, or none. */
    fprintf(stderr, "dagrun: run %s: %s; `dagrun cancel` it there\n", run_id,
            store_str(rec, "note", ""));
  } else if (w != OWNER_ALIVE) {
    fprintf(stderr,
            "dagrun: run %s is not running: the dagrun that ran it is gone; "
            "`dagrun resume %s` finishes it\n",
            run_id, run_id);
  } else if (kill(dagrun_pid, SIGTERM) != 0) {
    fprintf(stderr, "dagrun: cannot signal dagrun pid %d: %s\n", dagrun_pid,
            strerror(errno));
  } else {
    code = cancel_wait(db, run_id, dagrun_pid, &rec);
  }
  free(run_id);
  cJSON_Delete(rec);
  store_close(db);
  return code;
}

/* `dagrun generate ...` and `dagrun eval ...`: run dagrun-generate and
 * dagrun-eval, installed beside the stage plugins (DAGRUN_LIBEXEC_DIR_REL
 * from this executable's directory), with the arguments after the
 * command. The engine stays out of this program, and so does their
 * usage: each program answers --help itself. Returns only when it cannot
 * run it. */
static int exec_helper(const char *cmd, int argc, char **argv) {
  char prog[4096], name[64];
  snprintf(name, sizeof name, "dagrun-%s", cmd);
  if (cli_helper_exe(name, prog, sizeof prog) != 0)
    return EXIT_FAILED;
  char **args = xcalloc((size_t)argc + 2, sizeof(char *));
  args[0] = prog;
  memcpy(args + 1, argv, (size_t)argc * sizeof(char *));
  execv(prog, args);
  fprintf(stderr,
          "dagrun: cannot run %s: %s (dagrun %s needs the %s program "
          "installed with dagrun)\n",
          prog, strerror(errno), cmd, name);
  free(args);
  return EXIT_FAILED;
}

static int cmd_generate(int argc, char **argv) {
  return exec_helper("generate", argc, argv);
}

static int cmd_eval(int argc, char **argv) {
  return exec_helper("eval", argc, argv);
}

static int cmd_models(int argc, char **argv) {
  return exec_helper("models", argc, argv);
}

/* `dagrun cron-next`'s command line, read. */
typedef struct cron_next_args {
  const char *expr, *tz, *from;
  long count;
} cron_next_args;

/* Fills a from argv: 0, or EXIT_USAGE after a usage error. */
static int cron_next_parse(int argc, char **argv, cron_next_args *a) {
  *a = (cron_next_args){NULL, "UTC", NULL, 5};
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    if ((strcmp(o, "--tz") == 0 || strcmp(o, "-n") == 0 ||
         strcmp(o, "--from") == 0) &&
        i + 1 >= argc)
      return cli_usage_error("%s needs a value", o);
    if (strcmp(o, "--tz") == 0) {
      a->tz = argv[++i];
    } else if (strcmp(o, "--from") == 0) {
      a->from = argv[++i];
    } else if (strcmp(o, "-n") == 0) {
      if (cli_number(argv[++i], 1, 1000, &a->count) != 0)
        return cli_usage_error("-n needs a number from 1 to 1000, got '%s'",
                               argv[i]);
    } else if (o[0] == '-' && o[1]) {
      return cli_usage_error("unknown option '%s' for cron-next", o);
    } else if (a->expr) {
      return cli_usage_error("cron-next takes one expression (quote it), got "
                             "also '%s'",
                             o);
    } else {
      a->expr = o;
    }
  }
  if (!a->expr)
    return cli_usage_error("%s", "cron-next needs an expression, e.g. dagrun "
                                 "cron-next \"30 2 * * *\" --tz "
                                 "Europe/Berlin");
  return 0;
}

/* dagrun cron-next "EXPR" [--tz ZONE] [-n N] [--from TIME]: what a
 * schedule will do, one fire time a line, local and UTC. */
static int cmd_cron_next(int argc, char **argv) {
  cron_next_args a;
  if (cron_next_parse(argc, argv, &a) != 0)
    return EXIT_USAGE;
  char err[256];
  int col;
  cron_expr *e;
  cron_zone *z;
  if (cron_parse(a.expr, &e, &col, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun: cron expression, column %d: %s\n  %s\n  %*s^\n",
            col, err, a.expr, col - 1, "");
    return EXIT_USAGE;
  }
  if (cron_zone_open(a.tz, &z, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun: %s\n", err);
    cron_destroy(e);
    return EXIT_USAGE;
  }
  /* --from includes a fire time at that very time; now does not. */
  int64_t after = (int64_t)time(NULL), t;
  int rc = 0;
  if (a.from && cron_parse_time(a.from, z, &t) != 0)
    rc = cli_usage_error("--from takes a time like 2026-03-08T01:30 (local "
                         "in --tz) or 2026-03-08T06:30:00Z, got '%s'",
                         a.from);
  else if (a.from)
    after = t - 1;
  for (long i = 0; rc == 0 && i < a.count; i++) {
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

static int cmd_version(int argc, char **argv) {
  (void)argc;
  (void)argv;
  printf("dagrun %s (plugin ABI %d.%d)\n", DAGRUN_VERSION, DAGRUN_ABI_MAJOR,
         DAGRUN_ABI_MINOR);
  return 0;
}

/* dagrun help [COMMAND]: the overview, or COMMAND's usage. */
static int cmd_help(int argc, char **argv) {
  if (argc == 0) {
    print_overview(stdout);
    return 0;
  }
  if (argc > 1)
    return cli_usage_error("help takes one command, got also '%s'", argv[1]);
  const command *c = command_find(argv[0]);
  if (!c)
    return cli_usage_error("unknown command '%s'", argv[0]);
  char help[] = "--help";
  char *args[] = {help, NULL};
  return c->usage ? (fputs(c->usage, stdout), 0) : c->fn(1, args);
}

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
    print_overview(stderr);
    return EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
    print_overview(stdout);
    return 0;
  }
  const command *c =
      command_find(strcmp(name, "--version") == 0 ? "version" : name);
  if (c)
    return command_run(c, argc - 2, argv + 2);
  /* `dagrun FILE` means `dagrun run FILE`; a word that is no file but
   * looks like a command was probably a typo. */
  const char *names[N_COMMANDS + 1];
  for (size_t i = 0; i < N_COMMANDS; i++)
    names[i] = commands[i].name;
  names[N_COMMANDS] = NULL;
  const char *near = closest_match(name, names);
  if (name[0] != '-' && near && access(name, F_OK) != 0) {
    fprintf(stderr, "dagrun: unknown command '%s'; did you mean '%s'?\n",
            name, near);
    return EXIT_USAGE;
  }
  return command_run(command_find("run"), argc - 1, argv + 1);
}
