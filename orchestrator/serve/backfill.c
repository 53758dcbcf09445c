#include "backfill.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cron.h"
#include "base/util.h"
#include "dagfile/spec.h"
#include "host/check.h"
#include "lib/exitcode.h"
#include "store/store.h"


static int usage(const char *fmt, const char *arg) {
  fprintf(stderr, "dagrun backfill: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(usage: dagrun backfill FILE --from TIME --to TIME "
                  "[--rerun] [--dry-run] [run options])\n");
  return EXIT_USAGE;
}

/* The fire times in [from, to] into *out (caller frees): their count, or
 * -1 after saying why. */
static long fire_times(const cron_expr *e, const cron_zone *z, int64_t from,
                       int64_t to, int64_t **out) {
  size_t n = 0, cap = 16;
  int64_t *t = xmalloc(cap * sizeof *t);
  int64_t at = from - 1;
  char err[256];
  for (;;) {
    int64_t next;
    int rc = cron_next(e, z, at, &next, err, sizeof err);
    if (rc == DR_ENOENT || (rc == 0 && next > to))
      break;
    if (rc != 0) {
      fprintf(stderr, "dagrun backfill: %s\n", err);
      free(t);
      return -1;
    }
    if (n == CRON_CATCHUP_MAX) {
      fprintf(stderr,
              "dagrun backfill: more than %d schedule times in the range: "
              "give a narrower one\n",
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

/* The id of a successful run of dag for logical date t, or NULL. */
static char *succeeded_for(const cJSON *done, int64_t t) {
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

int backfill_cmd(int argc, char **argv, const char *self_exe) {
  const char *file = NULL, *from_s = NULL, *to_s = NULL;
  int rerun = 0, dry_run = 0, n_pass = 0;
  char **pass = xcalloc((size_t)argc + 1, sizeof(char *));
  int code = EXIT_USAGE;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--from") == 0 && i + 1 < argc) {
      from_s = argv[++i];
    } else if (strcmp(a, "--to") == 0 && i + 1 < argc) {
      to_s = argv[++i];
    } else if (strcmp(a, "--rerun") == 0) {
      rerun = 1;
    } else if (strcmp(a, "--dry-run") == 0) {
      dry_run = 1;
    } else if (strcmp(a, "--trigger") == 0 || strcmp(a, "--logical-date") == 0 ||
               strcmp(a, "--run-id") == 0) {
      usage("%s is set by backfill for each run", a);
      goto out;
    } else if (a[0] == '-') {
      /* A run option (and its value, when it takes one): `dagrun run`
       * checks it. */
      pass[n_pass++] = argv[i];
      if (i + 1 < argc && argv[i + 1][0] != '-' &&
          (strcmp(a, "-j") == 0 || strcmp(a, "--max-parallel") == 0 ||
           strcmp(a, "--events") == 0 || strcmp(a, "--runs-dir") == 0 ||
           strcmp(a, "-p") == 0 || strcmp(a, "--param") == 0))
        pass[n_pass++] = argv[++i];
    } else if (!file) {
      file = a;
    } else {
      usage("takes one DAG file, got also '%s'", a);
      goto out;
    }
  }
  if (!file || !from_s || !to_s) {
    usage("%s", "needs a DAG file, --from and --to");
    goto out;
  }

  diags d = {0};
  spec *sp;
  checked *ck;
  int rc = check_load(file, &sp, &ck, &d);
  if (rc != 0) {
    diags_print(&d, stderr);
    if (!d.n)
      fprintf(stderr, "dagrun backfill: %s: %s\n", file, dr_strerror(rc));
    diags_free(&d);
    goto out;
  }
  diags_free(&d);
  cron_expr *e;
  cron_zone *z;
  char err[512];
  int64_t from, to, *times = NULL;
  long n = -1;
  if (spec_schedule_open(sp, &e, &z, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun backfill: %s: backfill follows a DAG's schedule\n",
            err);
    goto free_spec;
  }
  if (cron_parse_time(from_s, z, &from) != 0 ||
      cron_parse_time(to_s, z, &to) != 0) {
    usage("--from and --to take times such as 2026-11-01 or "
          "2026-11-01T02:30 (local in the DAG's timezone) or "
          "2026-11-01T01:30:00Z, got '%s'",
          cron_parse_time(from_s, z, &from) != 0 ? from_s : to_s);
  } else if (to < from) {
    usage("--to (%s) is before --from", to_s);
  } else {
    n = fire_times(e, z, from, to, &times);
    if (n == 0)
      fprintf(stderr,
              "dagrun backfill: no schedule time of %s (\"%s\", %s) between "
              "%s and %s\n",
              sp->dag, sp->schedule->str, cron_zone_name(z), from_s, to_s);
  }
  if (n <= 0)
    goto free_times;

  /* What already succeeded, to skip. */
  cJSON *done = NULL;
  if (!rerun) {
    char *path = store_default_path();
    store *st;
    int src = store_open(path, 0, &st, err, sizeof err);
    if (src == 0) {
      done = store_runs(st, sp->dag, "success", 0, err, sizeof err);
      store_close(st);
    }
    if (src != 0 && src != DR_ENOENT)
      fprintf(stderr, "dagrun backfill: %s\n", err);
    free(path);
    if (src != 0 && src != DR_ENOENT) {
      code = 1;
      goto free_times;
    }
  }

  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_interrupt; /* not SIG_IGN: the runs must get it */
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int ran = 0, skipped = 0, failed = 0;
  code = 0;
  for (long i = 0; i < n && !interrupted; i++) {
    char when[40], shown[64];
    format_utc((double)times[i], 0, when, sizeof when);
    cron_format(z, times[i], shown, sizeof shown);
    const char *prev = done ? succeeded_for(done, times[i]) : NULL;
    if (prev) {
      printf("backfill %ld/%ld: %s: skipped, run %s succeeded (--rerun runs "
             "it again)\n",
             i + 1, n, shown, prev);
      skipped++;
      continue;
    }
    printf("backfill %ld/%ld: %s\n", i + 1, n, shown);
    if (dry_run)
      continue;
    int rc1 = run_one(self_exe, file, when, pass, n_pass);
    ran++;
    if (rc1 == 130 || rc1 == 143 || rc1 == 128 + SIGINT ||
        rc1 == 128 + SIGTERM)
      interrupted = interrupted ? interrupted : SIGINT;
    else if (rc1 != 0)
      failed++;
    if (rc1 == EXIT_USAGE) {
      fprintf(stderr, "dagrun backfill: stopping: the run was refused\n");
      code = EXIT_USAGE;
      break;
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  printf("backfill %s: %d run%s, %d failed, %d skipped%s\n", sp->dag, ran,
         ran == 1 ? "" : "s", failed, skipped,
         interrupted ? ", interrupted" : dry_run ? " (dry run)" : "");
  if (interrupted)
    code = 130;
  else if (failed && code == 0)
    code = 1;
  cJSON_Delete(done);
free_times:
  free(times);
  cron_destroy(e);
  cron_zone_close(z);
free_spec:
  checked_free(ck);
  spec_free(sp);
out:
  free(pass);
  return code;
}
