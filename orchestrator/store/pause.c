/*
 * pause: paused schedules in the run store, `dagrun pause`, `unpause` and
 * `dags` (pause.h).
 */
#include "pause.h"

#include <pwd.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/util.h"
#include "host/check.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "store_impl.h"

int pause_set(store *st, const char *dag, int paused, const pause_who *who,
              double now, char *err, size_t errlen) {
  int rc = store_write_begin(st, err, errlen);
  if (rc)
    return rc;
  /* OR IGNORE: pausing a paused DAG keeps who paused it first, and when. */
  sqlite3_stmt *s = store_prep(
      st,
      paused ? "INSERT OR IGNORE INTO dag_pauses(dag, since, by, via) "
               "VALUES(?1, ?2, ?3, ?4)"
             : "DELETE FROM dag_pauses WHERE dag = ?1",
      err, errlen);
  if (!s)
    return store_write_end(st, DR_ESTORE, err, errlen);
  store_bind_text(s, 1, dag);
  if (paused) {
    sqlite3_bind_double(s, 2, now);
    store_bind_text(s, 3, who && who->by ? who->by : "unknown");
    store_bind_text(s, 4, who && who->via ? who->via : "cli");
  }
  int src = sqlite3_step(s);
  sqlite3_finalize(s);
  if (src != SQLITE_DONE)
    return store_write_end(
        st, store_sql_fail(st, src, err, errlen, "recording a paused DAG"), err,
        errlen);
  int changed = sqlite3_changes(store_sqlite(st)) > 0;
  rc = store_write_end(st, 0, err, errlen);
  return rc ? rc : changed ? 0 : 1;
}

cJSON *pause_list(store *st, char *err, size_t errlen) {
  sqlite3_stmt *s =
      store_prep(st, "SELECT dag, since, by, via FROM dag_pauses ORDER BY dag",
                 err, errlen);
  if (!s)
    return NULL;
  cJSON *out = cJSON_CreateArray();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dag", (const char *)sqlite3_column_text(s, 0));
    cJSON_AddNumberToObject(o, "since", sqlite3_column_double(s, 1));
    cJSON_AddStringToObject(o, "by", (const char *)sqlite3_column_text(s, 2));
    cJSON_AddStringToObject(o, "via", (const char *)sqlite3_column_text(s, 3));
    cJSON_AddItemToArray(out, o);
  }
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) {
    cJSON_Delete(out);
    store_sql_fail(st, rc, err, errlen, "reading the paused DAGs");
    return NULL;
  }
  return out;
}

const cJSON *pause_find(const cJSON *list, const char *dag) {
  const cJSON *o;
  cJSON_ArrayForEach(o, list) {
    const char *d = cJSON_GetStringValue(cJSON_GetObjectItem(o, "dag"));
    if (d && strcmp(d, dag) == 0)
      return o;
  }
  return NULL;
}

void pause_say(store *st, const char *dag, char *buf, size_t n) {
  char err[256], since[40];
  cJSON *list = pause_list(st, err, sizeof err);
  const cJSON *p = pause_find(list, dag);
  buf[0] = '\0';
  if (p) {
    format_utc(cJSON_GetNumberValue(cJSON_GetObjectItem(p, "since")), 0, since,
               sizeof since);
    snprintf(buf, n, "dag %s is paused since %s by %s (dagrun unpause %s)", dag,
             since, cJSON_GetStringValue(cJSON_GetObjectItem(p, "by")), dag);
  }
  cJSON_Delete(list);
}

/* The DAGs the store knows: those with a run, a schedule's state (serve
 * records it when it loads a scheduled DAG) or a pause. NULL with err. */
static cJSON *known_dags(store *st, char *err, size_t errlen) {
  sqlite3_stmt *s = store_prep(st,
                               "SELECT dag FROM runs UNION SELECT dag FROM "
                               "cron_state UNION SELECT dag FROM dag_pauses "
                               "ORDER BY 1",
                               err, errlen);
  if (!s)
    return NULL;
  cJSON *out = cJSON_CreateArray();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    cJSON_AddItemToArray(
        out, cJSON_CreateString((const char *)sqlite3_column_text(s, 0)));
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) {
    cJSON_Delete(out);
    store_sql_fail(st, rc, err, errlen, "listing the DAGs");
    return NULL;
  }
  return out;
}

static int has_yaml_suffix(const char *n) {
  size_t l = strlen(n);
  return (l > 5 && strcmp(n + l - 5, ".yaml") == 0) ||
         (l > 4 && strcmp(n + l - 4, ".yml") == 0);
}

/* The DAG an argument names: a DAG file (its dag: name, the store created
 * when missing) or a name the store knows. 0 with *dag and *st, else the
 * exit status after saying why. */
static int open_dag(const char *arg, store **st, char **dag) {
  *st = NULL;
  *dag = NULL;
  int file = has_yaml_suffix(arg) || strchr(arg, '/') != NULL;
  if (file) {
    diags d = {0};
    spec *sp;
    checked *ck;
    int rc = check_load(arg, &sp, &ck, &d);
    if (rc != 0) {
      char *text = d.n ? diags_text(&d) : NULL;
      fprintf(stderr, "dagrun: %s does not load: %s\n", arg,
              text ? text : dr_strerror(rc));
      free(text);
      diags_free(&d);
      return EXIT_USAGE;
    }
    diags_free(&d);
    *dag = xstrdup(sp->dag);
    checked_free(ck);
    spec_free(sp);
  }
  char err[1024];
  char *path = store_default_path();
  int rc = store_open(path, file, st, err, sizeof err);
  if (rc == DR_ENOENT)
    fprintf(stderr,
            "dagrun: no run store at %s: it knows no DAG '%s' (give the "
            "DAG's file instead)\n",
            path, arg);
  else if (rc)
    fprintf(stderr, "dagrun: %s\n", err);
  free(path);
  if (rc) {
    free(*dag);
    *dag = NULL;
    return rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
  }
  if (file)
    return 0;
  cJSON *known = known_dags(*st, err, sizeof err);
  int found = 0;
  const cJSON *k;
  cJSON_ArrayForEach(k, known) found |= strcmp(k->valuestring, arg) == 0;
  cJSON_Delete(known);
  if (!known || !found) {
    if (!known)
      fprintf(stderr, "dagrun: %s\n", err);
    else
      fprintf(stderr,
              "dagrun: the run store %s knows no DAG '%s' (it has no run and "
              "serve never scheduled it; see dagrun dags, or give the DAG's "
              "file)\n",
              store_path(*st), arg);
    store_close(*st);
    *st = NULL;
    return known ? EXIT_USAGE : EXIT_FAILED;
  }
  *dag = xstrdup(arg);
  return 0;
}

static int pause_cmd(int argc, char **argv, int paused) {
  const char *name = paused ? "pause" : "unpause";
  if (argc != 1 || argv[0][0] == '-')
    return cli_usage_error("usage: dagrun %s DAG|FILE", name);
  store *st;
  char *dag;
  int code = open_dag(argv[0], &st, &dag);
  if (code)
    return code;
  const struct passwd *pw = getpwuid(getuid());
  const char *by = pw && pw->pw_name ? pw->pw_name : getenv("USER");
  pause_who who = {by ? by : "unknown", "cli"};
  char err[1024];
  int rc = pause_set(st, dag, paused, &who, clock_wall(), err, sizeof err);
  if (rc == 0)
    printf("dag %s %s\n", dag, paused ? "paused" : "unpaused");
  else if (rc == 1)
    printf("dag %s was already %s\n", dag, paused ? "paused" : "unpaused");
  else
    fprintf(stderr, "dagrun: %s\n", err);
  free(dag);
  store_close(st);
  return rc >= 0 ? 0 : EXIT_FAILED;
}

int pause_cmd_pause(int argc, char **argv) { return pause_cmd(argc, argv, 1); }

int pause_cmd_unpause(int argc, char **argv) {
  return pause_cmd(argc, argv, 0);
}

/* [{dag, paused, paused_since, paused_by, runs (count), last_run,
 * last_state, last_started}] of the DAGs the store knows. */
static cJSON *dags_json(store *st, char *err, size_t errlen) {
  cJSON *known = known_dags(st, err, errlen);
  cJSON *paused = known ? pause_list(st, err, errlen) : NULL;
  if (!paused) {
    cJSON_Delete(known);
    return NULL;
  }
  cJSON *out = cJSON_CreateArray();
  const cJSON *k;
  cJSON_ArrayForEach(k, known) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dag", k->valuestring);
    const cJSON *p = pause_find(paused, k->valuestring);
    cJSON_AddBoolToObject(o, "paused", p != NULL);
    if (p) {
      cJSON_AddItemToObject(
          o, "paused_since",
          cJSON_Duplicate(cJSON_GetObjectItem(p, "since"), 0));
      cJSON_AddItemToObject(o, "paused_by",
                            cJSON_Duplicate(cJSON_GetObjectItem(p, "by"), 0));
    }
    /* store_runs: a run whose dagrun is gone reads as interrupted. */
    cJSON *runs = store_runs(st, k->valuestring, NULL, 0, err, errlen);
    cJSON_AddNumberToObject(o, "runs", cJSON_GetArraySize(runs));
    const cJSON *last = cJSON_GetArrayItem(runs, 0);
    if (last) {
      cJSON_AddItemToObject(
          o, "last_run", cJSON_Duplicate(cJSON_GetObjectItem(last, "id"), 0));
      cJSON_AddItemToObject(
          o, "last_state",
          cJSON_Duplicate(cJSON_GetObjectItem(last, "state"), 0));
      cJSON_AddItemToObject(
          o, "last_started",
          cJSON_Duplicate(cJSON_GetObjectItem(last, "started"), 0));
    }
    cJSON_Delete(runs);
    cJSON_AddItemToArray(out, o);
  }
  cJSON_Delete(known);
  cJSON_Delete(paused);
  return out;
}

static void print_dags(const cJSON *dags) {
  printf("%-24s %-8s %5s  %-26s %-12s %s\n", "DAG", "PAUSED", "RUNS",
         "LAST RUN", "STATE", "PAUSED SINCE");
  const cJSON *o;
  cJSON_ArrayForEach(o, dags) {
    const char *last = cJSON_GetStringValue(cJSON_GetObjectItem(o, "last_run"));
    const char *state =
        cJSON_GetStringValue(cJSON_GetObjectItem(o, "last_state"));
    int paused = cJSON_IsTrue(cJSON_GetObjectItem(o, "paused"));
    char since[40] = "";
    if (paused)
      format_utc(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "paused_since")),
                 0, since, sizeof since);
    printf("%-24s %-8s %5d  %-26s %-12s %s%s%s\n",
           cJSON_GetStringValue(cJSON_GetObjectItem(o, "dag")),
           paused ? "yes" : "no",
           (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "runs")),
           last ? last : "-", state ? state : "-", since, paused ? " by " : "",
           paused ? cJSON_GetStringValue(cJSON_GetObjectItem(o, "paused_by"))
                  : "");
  }
}

int pause_cmd_dags(int argc, char **argv) {
  int json = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else
      return cli_usage_error("unknown argument '%s' for dags", argv[i]);
  }
  char err[1024];
  char *path = store_default_path();
  store *st;
  int rc = store_open(path, 0, &st, err, sizeof err);
  if (rc == DR_ENOENT)
    fprintf(stderr, "dagrun: no run store at %s: no DAG recorded there\n",
            path);
  else if (rc)
    fprintf(stderr, "dagrun: %s\n", err);
  free(path);
  if (rc)
    return rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
  cJSON *dags = dags_json(st, err, sizeof err);
  store_close(st);
  if (!dags) {
    fprintf(stderr, "dagrun: %s\n", err);
    return EXIT_FAILED;
  }
  if (json) {
    char *s = cJSON_PrintUnformatted(dags);
    printf("%s\n", s);
    free(s);
  } else {
    print_dags(dags);
  }
  cJSON_Delete(dags);
  return 0;
}
