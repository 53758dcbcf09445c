/*
 * backfill: `dagrun backfill`, one run per past schedule time; what it
 * does and its exit statuses are in backfill.h.
 *
 * Each run is a child process, `dagrun run FILE --trigger backfill
 * --logical-date T ...`, not a run inside this process: a run then records
 * itself, reacts to Ctrl-C and exits exactly as one started by hand, and
 * backfill only has to read its exit status. The runs go one at a time,
 * in schedule order, because a backfill usually replays days of a pipeline
 * whose later days read what earlier days wrote.
 */
#include "backfill.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/cron.h"
#include "base/util.h"
#include "dagfile/spec.h"
#include "host/check.h"
#include "lib/exitcode.h"
#include "store/resume.h"
#include "store/store.h"


/* Like cli_usage_error, but naming backfill and its synopsis: backfill's
 * own options are few and easy to forget. Returns EXIT_USAGE. */
static int usage(const char *fmt, const char *arg) {
  fprintf(stderr, "dagrun backfill: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(usage: dagrun backfill FILE --from TIME --to TIME "
                  "[--rerun] [--dry-run] [run options])\n");
  return EXIT_USAGE;
}

/* The fire times in [from, to] into *out (caller frees): their count, or
 * -1 with why in err. */
static long fire_times(const cron_expr *e, const cron_zone *z, int64_t from,
                       int64_t to, int64_t **out, char *err, size_t errlen) {
  size_t n = 0, cap = 16;
  int64_t *t = xmalloc(cap * sizeof *t);
  int64_t at = from - 1;
  for (;;) {
    int64_t next;
    int rc = cron_next(e, z, at, &next, err, errlen);
    if (rc == DR_ENOENT || (rc == 0 && next > to))
      break;
    if (rc != 0) {
      free(t);
      return -1;
    }
    if (n == CRON_CATCHUP_MAX) {
      snprintf(err, errlen,
               "more than %d schedule times in the range: give a narrower one",
               CRON_CATCHUP_MAX);
      free(t);
      return -1;
    }
    if (n == cap)
      t = xrealloc(t, (cap *= 2) * sizeof *t);
    t[n++] = at = next;
  }
  *out = t;
  return (long)n;
}

long backfill_plan(const cron_expr *e, const cron_zone *z, const char *from_s,
                   const char *to_s, int64_t **times, char *err,
                   size_t errlen) {
  int64_t from, to;
  *times = NULL;
  int bad_from = cron_parse_time(from_s, z, &from) != 0;
  if (bad_from || cron_parse_time(to_s, z, &to) != 0) {
    snprintf(err, errlen,
             "from and to take times such as 2026-11-01 or 2026-11-01T02:30 "
             "(local in the DAG's timezone) or 2026-11-01T01:30:00Z, got '%s'",
             bad_from ? from_s : to_s);
    return -1;
  }
  if (to < from) {
    snprintf(err, errlen, "to (%s) is before from (%s)", to_s, from_s);
    return -1;
  }
  return fire_times(e, z, from, to, times, err, errlen);
}

const char *backfill_done_for(const cJSON *done, int64_t t) {
  const cJSON *r;
  cJSON_ArrayForEach(r, done) {
    const cJSON *ld = cJSON_GetObjectItemCaseSensitive(r, "logical_date");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
    if (cJSON_IsNumber(ld) && (int64_t)ld->valuedouble == t &&
        cJSON_IsString(id))
      return id->valuestring;
  }
  return NULL;
}

/* The signal (SIGINT, SIGTERM) that stopped the backfill, or 0. The
 * handler only notes it: the run in progress got the same signal from the
 * terminal (or from whoever signalled the process group) and stops itself;
 * backfill starts no further run. */
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) { interrupted = sig; }

/* Runs `dagrun run FILE --trigger backfill --logical-date T ARGS...` and
 * waits: its exit status, 128 + signal for a signal, or -1. */
static int run_one(const char *self_exe, const char *file, const char *when,
                   char **pass, int n_pass) {
  char **argv = xcalloc((size_t)n_pass + 8, sizeof(char *));
  int k = 0;
  argv[k++] = (char *)self_exe;
  argv[k++] = "run";
  argv[k++] = (char *)file;
  argv[k++] = "--trigger";
  argv[k++] = "backfill";
  argv[k++] = "--logical-date";
  argv[k++] = (char *)when;
  for (int i = 0; i < n_pass; i++)
    argv[k++] = pass[i];
  /* What backfill printed must come before what the run prints. */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execv(self_exe, argv);
    fprintf(stderr, "dagrun backfill: cannot run %s: %s\n", self_exe,
            strerror(errno));
    _exit(127);
  }
  free(argv);
  if (pid < 0) {
    fprintf(stderr, "dagrun backfill: cannot start a run: %s\n",
            strerror(errno));
    return -1;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* `dagrun backfill`'s command line, read. */
typedef struct backfill_args {
  const char *file, *from_s, *to_s;
  int rerun, dry_run;
  char **pass; /* run options passed on to each run, borrowed from argv */
  int n_pass;
} backfill_args;

/* Whether run option a takes a value (the next argument), as `dagrun run`
 * reads it. */
static int run_option_takes_value(const char *a) {
  static const char *const with_value[] = {
      "-j", "--max-parallel", "--events", "--runs-dir", "-p", "--param", NULL};
  for (int k = 0; with_value[k]; k++)
    if (strcmp(a, with_value[k]) == 0)
      return 1;
  return 0;
}

/* Fills a from argv (a->pass allocated by the caller, argc + 1 long): 0,
 * or EXIT_USAGE after a usage error. */
static int backfill_parse(int argc, char **argv, backfill_args *a) {
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    if (strcmp(o, "--from") == 0 && i + 1 < argc) {
      a->from_s = argv[++i];
    } else if (strcmp(o, "--to") == 0 && i + 1 < argc) {
      a->to_s = argv[++i];
    } else if (strcmp(o, "--rerun") == 0) {
      a->rerun = 1;
    } else if (strcmp(o, "--dry-run") == 0) {
      a->dry_run = 1;
    } else if (strcmp(o, "--trigger") == 0 ||
               strcmp(o, "--logical-date") == 0 ||
               strcmp(o, "--run-id") == 0) {
      return usage("%s is set by backfill for each run", o);
    } else if (o[0] == '-') {
      /* A run option (and its value, when it takes one): `dagrun run`
       * checks it, so that backfill never accepts what run refuses. */
      a->pass[a->n_pass++] = argv[i];
      if (i + 1 < argc && argv[i + 1][0] != '-' && run_option_takes_value(o))
        a->pass[a->n_pass++] = argv[++i];
    } else if (!a->file) {
      a->file = o;
    } else {
      return usage("takes one DAG file, got also '%s'", o);
    }
  }
  if (!a->file || !a->from_s || !a->to_s)
    return usage("%s", "needs a DAG file, --from and --to");
  return 0;
}

/* The fire times of sp's schedule (e in zone z) in [--from, --to] into
 * *times (caller frees): their count, or 0 or -1 after saying why (none in
 * the range; a bad range or too many). */
static long backfill_times(const spec *sp, const backfill_args *a,
                           const cron_expr *e, const cron_zone *z,
                           int64_t **times) {
  char err[512];
  long n = backfill_plan(e, z, a->from_s, a->to_s, times, err, sizeof err);
  if (n < 0)
    usage("%s", err);
  else if (n == 0)
    fprintf(stderr,
            "dagrun backfill: no schedule time of %s (\"%s\", %s) between "
            "%s and %s\n",
            sp->dag, sp->schedule->str, cron_zone_name(z), a->from_s, a->to_s);
  return n;
}

/* The DAG's successful runs (store_runs' JSON array; caller frees) into
 * *done, to skip their schedule times: 0 (*done NULL when the store does
 * not exist yet), or -1 after saying why the store cannot be read. */
static int backfill_succeeded(const spec *sp, cJSON **done) {
  char err[512];
  char *path = store_default_path();
  store *st;
  int rc = store_open(path, 0, &st, err, sizeof err);
  free(path);
  *done = NULL;
  if (rc == DR_ENOENT)
    return 0;
  if (rc != 0) {
    fprintf(stderr, "dagrun backfill: %s\n", err);
    return -1;
  }
  *done = store_runs(st, sp->dag, "success", 0, err, sizeof err);
  store_close(st);
  return 0;
}

/* The id of a run of sp for logical date t that is going (in the store
 * as running or queued, its dagrun alive: one started by hand, by serve,
 * or by another backfill), copied into id; 0 when none (or no store yet).
 * Asked before each run, not once: a backfill takes hours, and serve may
 * start a time's run meanwhile; two runs of one logical date at once race
 * on its outputs, so even --rerun skips it. */
static int going_for(const spec *sp, int64_t t, char *id, size_t idlen) {
  char err[512];
  char *path = store_default_path();
  store *st;
  int rc = store_open(path, 0, &st, err, sizeof err);
  free(path);
  if (rc != 0)
    return 0; /* none yet; an unreadable store is said by the run */
  cJSON *going = resume_runs_going(st, sp->dag, err, sizeof err);
  const char *run = backfill_done_for(going, t);
  if (run)
    snprintf(id, idlen, "%s", run);
  cJSON_Delete(going);
  store_close(st);
  return run != NULL;
}

/* Starts the runs for times[0..n), one at a time, until the end or an
 * interruption. Returns the exit status (see backfill.h) after the
 * summary line. */
static int backfill_run_all(const spec *sp, const backfill_args *a,
                            const char *self_exe, const cron_zone *z,
                            const int64_t *times, long n, const cJSON *done) {
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_interrupt; /* not SIG_IGN: the runs must get it */
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int ran = 0, skipped = 0, failed = 0, code = 0;
  for (long i = 0; i < n && !interrupted; i++) {
    char when[40], shown[64];
    format_utc((double)times[i], 0, when, sizeof when);
    cron_format(z, times[i], shown, sizeof shown);
    const char *prev = done ? backfill_done_for(done, times[i]) : NULL;
    char going[128];
    if (!prev && going_for(sp, times[i], going, sizeof going)) {
      printf("backfill %ld/%ld: %s: skipped, run %s is going\n", i + 1, n,
             shown, going);
      skipped++;
      continue;
    }
    if (prev) {
      printf("backfill %ld/%ld: %s: skipped, run %s succeeded (--rerun runs "
             "it again)\n",
             i + 1, n, shown, prev);
      skipped++;
      continue;
    }
    printf("backfill %ld/%ld: %s\n", i + 1, n, shown);
    if (a->dry_run)
      continue;
    int rc = run_one(self_exe, a->file, when, a->pass, a->n_pass);
    ran++;
    /* The run exits 130 or 143 when it was stopped by the signal that the
     * terminal sent to both of us: then the backfill stops too. */
    if (rc == 130 || rc == 143 || rc == 128 + SIGINT || rc == 128 + SIGTERM)
      interrupted = interrupted ? interrupted : SIGINT;
    else if (rc != 0)
      failed++;
    /* A refused run (bad options) would be refused for every time. */
    if (rc == EXIT_USAGE) {
      fprintf(stderr, "dagrun backfill: stopping: the run was refused\n");
      code = EXIT_USAGE;
      break;
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  printf("backfill %s: %d run%s, %d failed, %d skipped%s\n", sp->dag, ran,
         ran == 1 ? "" : "s", failed, skipped,
         interrupted ? ", interrupted" : a->dry_run ? " (dry run)" : "");
  if (interrupted)
    return 130;
  return failed && code == 0 ? EXIT_FAILED : code;
}

int backfill_cmd_backfill(int argc, char **argv) {
  backfill_args a = {0};
  a.pass = xcalloc((size_t)argc + 1, sizeof(char *));
  int code = EXIT_USAGE;
  char self_exe[4096];
  if (backfill_parse(argc, argv, &a) != 0 ||
      cli_self_exe(self_exe, sizeof self_exe) != 0) {
    free(a.pass);
    return EXIT_USAGE;
  }
  diags d = {0};
  spec *sp;
  checked *ck;
  int rc = check_load(a.file, &sp, &ck, &d);
  if (rc != 0) {
    diags_print(&d, stderr);
    if (!d.n)
      fprintf(stderr, "dagrun backfill: %s: %s\n", a.file, dr_strerror(rc));
    diags_free(&d);
    free(a.pass);
    return EXIT_USAGE;
  }
  diags_free(&d);
  cron_expr *e;
  cron_zone *z;
  char err[512];
  if (spec_schedule_open(sp, &e, &z, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun backfill: %s: backfill follows a DAG's schedule\n",
            err);
    goto free_spec;
  }
  int64_t *times = NULL;
  cJSON *done = NULL;
  long n = backfill_times(sp, &a, e, z, &times);
  if (n > 0 && !a.rerun && backfill_succeeded(sp, &done) != 0)
    code = EXIT_FAILED;
  else if (n > 0)
    code = backfill_run_all(sp, &a, self_exe, z, times, n, done);
  cJSON_Delete(done);
  free(times);
  cron_destroy(e);
  cron_zone_close(z);
free_spec:
  checked_free(ck);
  spec_free(sp);
  free(a.pass);
  return code;
}
