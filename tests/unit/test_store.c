/* The run store: creating, schema version refusal, migration from
 * version 1, writes read back, a
 * file that is no database, readers that go on while a writer writes
 * (WAL), and runs whose dagrun is gone read (and recorded) interrupted. */
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "lib/clock.h"
#include "store/pause.h"
#include "store/runqueue.h"
#include "store/store.h"
#include "testlib.h"

static const char *num_key(const cJSON *o, const char *k, double *v) {
  const cJSON *j = cJSON_GetObjectItem(o, k);
  if (!cJSON_IsNumber(j))
    return NULL;
  *v = j->valuedouble;
  return k;
}

static const char *str_key(const cJSON *o, const char *k) {
  const cJSON *j = cJSON_GetObjectItem(o, k);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* store_run_claim of id by pid (started at start) here: this process's
 * host, boot and PID namespace. */
static int claim(store *st, const char *id, int pid, long long start,
                 int old_pid, long long old_start, char *err, size_t errlen) {
  owner o = *owner_here();
  o.pid = pid;
  o.start = start;
  return store_run_claim(st, id, &o, old_pid, old_start, err, errlen);
}

/* Two runs begun, the first one's task "a" failed once and then
 * succeeded, and the run finished; the second is left running. */
static void records_write(store *st, const char *db, const char *id) {
  char err[1024];
  const char *tasks[] = {"a", "b"};
  CHECK_INT(store_run_begin(st, "20260101T000000Z-aaaa", "d", "/x/d.yaml",
                            "/runs/d/1", 1000.0, "{\"k\":1}", "cron", 960.0,
                            "ab12", tasks, 2, err,
                            sizeof err),
            0);
  CHECK_INT(store_run_begin(st, "20260102T000000Z-bbbb", "e", "/x/e.yaml",
                            "/runs/e/1", 2000.0, NULL, NULL, 0, NULL, tasks, 1, err,
                            sizeof err),
            0);
  /* The same id twice is refused, and the failed transaction leaves
   * nothing behind. */
  CHECK_INT(store_run_begin(st, "20260102T000000Z-bbbb", "e", NULL, NULL,
                            3000.0, NULL, NULL, 0, NULL, tasks, 1, err, sizeof err),
            DR_ESTORE);
  CHECK(strstr(err, db) != NULL);
  CHECK(strstr(err, "UNIQUE") != NULL);

  CHECK_INT(store_attempt_begin(st, id, "a", 1, "/runs/d/1/a/attempt-1/log",
                                1001.0, err, sizeof err),
            0);
  CHECK_INT(store_attempt_pid(st, id, "a", 1, 4242, 0, err, sizeof err), 0);
  CHECK_INT(store_attempt_end(st, id, "a", 1, "failed", 3, "exit 3", 1002.0,
                              NULL, err, sizeof err),
            0);
  store_task_update u = {"retry_wait", 1, 3, "exit 3", 0, 0, NULL, NULL, NULL};
  CHECK_INT(store_task_set(st, id, "a", &u, err, sizeof err), 0);
  CHECK_INT(store_attempt_begin(st, id, "a", 2, "/runs/d/1/a/attempt-2/log",
                                1003.0, err, sizeof err),
            0);
  CHECK_INT(store_attempt_pid(st, id, "a", 2, 4243, 0, err, sizeof err), 0);
  /* The attempt's end and the task's state: one transaction. */
  store_task_update u2 = {"success",         2,    0,   NULL, 0, 1004.0,
                          "{\"out\":\"v\"}", NULL, NULL};
  CHECK_INT(store_attempt_end(st, id, "a", 2, "success", 0, NULL, 1004.0, &u2,
                              err, sizeof err),
            0);
  /* An update of a task that was never recorded is an error. */
  CHECK_INT(store_task_set(st, id, "nope", &u2, err, sizeof err), DR_ESTORE);
  CHECK_INT(store_run_finish(st, id, "failed", 1005.0, err, sizeof err), 0);
}

/* The list of runs: newest first, filtered by dag and by state,
 * limited. */
static void records_list(store *st) {
  char err[1024];
  cJSON *runs = store_runs(st, NULL, NULL, 0, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(runs), 2);
  CHECK_STR(str_key(cJSON_GetArrayItem(runs, 0), "id"),
            "20260102T000000Z-bbbb");
  double v = 0;
  cJSON *r1 = cJSON_GetArrayItem(runs, 1);
  CHECK(num_key(r1, "tasks_total", &v) && v == 2);
  CHECK(num_key(r1, "tasks_succeeded", &v) && v == 1);
  CHECK(num_key(r1, "finished", &v) && v == 1005.0);
  cJSON_Delete(runs);
  runs = store_runs(st, "d", NULL, 0, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(runs), 1);
  cJSON_Delete(runs);
  runs = store_runs(st, NULL, NULL, 1, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(runs), 1);
  cJSON_Delete(runs);
  /* By state: "e" is still running; what started "d" is kept. */
  runs = store_runs(st, NULL, "running", 0, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(runs), 1);
  CHECK_STR(str_key(cJSON_GetArrayItem(runs, 0), "dag"), "e");
  CHECK(str_key(cJSON_GetArrayItem(runs, 0), "trigger") == NULL);
  cJSON_Delete(runs);
  runs = store_runs(st, "d", "failed", 0, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(runs), 1);
  CHECK_STR(str_key(cJSON_GetArrayItem(runs, 0), "trigger"), "cron");
  CHECK(num_key(cJSON_GetArrayItem(runs, 0), "logical_date", &v) && v == 960.0);
  cJSON_Delete(runs);
}

/* Alert deliveries, in order, NULL columns left out. */
static void records_alerts(store *st, const char *id) {
  char err[1024];
  double v = 0;
  store_alert_delivery d1 = {1006.0, "failure", "a", 2, 1, 500, "HTTP 500",
                             0.25, "retrying", "http://127.0.0.1:9"};
  store_alert_delivery d2 = {1007.0, "failure", "a", 2, 2, 200, NULL,
                             0.5, "delivered", "http://127.0.0.1:9"};
  CHECK_INT(store_alert_record(st, id, &d1, err, sizeof err), 0);
  CHECK_INT(store_alert_record(st, id, &d2, err, sizeof err), 0);
  cJSON *als = store_alerts(st, id, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(als), 2);
  CHECK_STR(str_key(cJSON_GetArrayItem(als, 0), "result"), "retrying");
  CHECK_STR(str_key(cJSON_GetArrayItem(als, 1), "result"), "delivered");
  CHECK(str_key(cJSON_GetArrayItem(als, 1), "error") == NULL);
  CHECK(num_key(cJSON_GetArrayItem(als, 1), "try", &v) && v == 2);
  cJSON_Delete(als);
}

/* Cron state: none, then set, then moved on. */
static void records_cron(store *st) {
  char err[1024];
  long long last = 0;
  CHECK_INT(store_cron_get(st, "d", &last, err, sizeof err), DR_ENOENT);
  CHECK_INT(store_cron_set(st, "d", 3600, 3601.0, err, sizeof err), 0);
  CHECK_INT(store_cron_get(st, "d", &last, err, sizeof err), 0);
  CHECK(last == 3600);
  CHECK_INT(store_cron_set(st, "d", 7200, 7201.0, err, sizeof err), 0);
  CHECK_INT(store_cron_get(st, "d", &last, err, sizeof err), 0);
  CHECK(last == 7200);
}

/* One run by id prefix, with its tasks and their attempts; an
 * ambiguous prefix and an unknown one. */
static void records_run(store *st) {
  char err[1024];
  double v = 0;
  int rc;
  cJSON *run = store_run(st, "20260101", &rc, err, sizeof err);
  CHECK_INT(rc, 0);
  CHECK_STR(str_key(run, "state"), "failed");
  CHECK_STR(str_key(run, "dag_sha256"), "ab12");
  CHECK(cJSON_IsObject(cJSON_GetObjectItem(run, "params")));
  cJSON *ta = cJSON_GetArrayItem(cJSON_GetObjectItem(run, "tasks"), 0);
  CHECK_STR(str_key(ta, "name"), "a");
  CHECK_STR(str_key(ta, "state"), "success");
  CHECK(num_key(ta, "attempts", &v) && v == 2);
  CHECK(num_key(ta, "started", &v) && v == 1001.0);
  CHECK_STR(str_key(cJSON_GetObjectItem(ta, "outputs"), "out"), "v");
  cJSON *al = cJSON_GetObjectItem(ta, "attempt_list");
  CHECK_INT(cJSON_GetArraySize(al), 2);
  cJSON *a1 = cJSON_GetArrayItem(al, 0);
  CHECK(num_key(a1, "pid", &v) && v == 4242);
  CHECK(num_key(a1, "exit_code", &v) && v == 3);
  CHECK_STR(str_key(a1, "error"), "exit 3");
  CHECK_STR(str_key(a1, "state"), "failed");
  cJSON *tb = cJSON_GetArrayItem(cJSON_GetObjectItem(run, "tasks"), 1);
  CHECK_STR(str_key(tb, "state"), "waiting");
  CHECK(cJSON_GetObjectItem(tb, "exit_code") == NULL);
  cJSON_Delete(run);
  CHECK(store_run(st, "2026", &rc, err, sizeof err) == NULL);
  CHECK_INT(rc, DR_EINVAL);
  CHECK(store_run(st, "1999", &rc, err, sizeof err) == NULL);
  CHECK_INT(rc, DR_ENOENT);
}

/* One attempt: the last (n 0), a given one, and the errors for an
 * attempt, a task not started and a task that does not exist. */
static void records_attempt(store *st, const char *id) {
  char err[1024];
  double v = 0;
  int rc;
  cJSON *att = store_attempt(st, id, "a", 0, &rc, err, sizeof err);
  CHECK_INT(rc, 0);
  CHECK(num_key(att, "n", &v) && v == 2);
  CHECK_STR(str_key(att, "log"), "/runs/d/1/a/attempt-2/log");
  cJSON_Delete(att);
  att = store_attempt(st, id, "a", 1, &rc, err, sizeof err);
  CHECK(num_key(att, "pid", &v) && v == 4242);
  cJSON_Delete(att);
  CHECK(store_attempt(st, id, "a", 3, &rc, err, sizeof err) == NULL);
  CHECK_INT(rc, DR_ENOENT);
  CHECK(store_attempt(st, id, "b", 0, &rc, err, sizeof err) == NULL);
  CHECK_INT(rc, DR_ENOENT);
  CHECK(strstr(err, "not started") != NULL);
  CHECK(store_attempt(st, id, "zz", 0, &rc, err, sizeof err) == NULL);
  CHECK_INT(rc, DR_ENOENT);
  CHECK(strstr(err, "no task 'zz'") != NULL);
}

/* Reopened: everything is still there; journal mode is WAL. A
 * database from a newer dagrun is then refused, and not changed. */
static void records_reopen(const char *db) {
  char err[1024];
  store *st;
  CHECK_INT(store_open(db, 0, &st, err, sizeof err), 0);
  cJSON *runs = st ? store_runs(st, NULL, NULL, 0, err, sizeof err) : NULL;
  CHECK_INT(cJSON_GetArraySize(runs), 2);
  cJSON_Delete(runs);
  store_close(st);
  sqlite3 *raw;
  CHECK_INT(sqlite3_open(db, &raw), SQLITE_OK);
  sqlite3_stmt *s;
  sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &s, NULL);
  CHECK_INT(sqlite3_step(s), SQLITE_ROW);
  CHECK_STR((const char *)sqlite3_column_text(s, 0), "wal");
  sqlite3_finalize(s);

  /* A database from a newer dagrun is refused, and not changed. */
  CHECK_INT(sqlite3_exec(raw, "PRAGMA user_version = 99", 0, 0, 0), SQLITE_OK);
  sqlite3_close(raw);
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), DR_EVERSION);
  CHECK(st == NULL);
  CHECK(strstr(err, "schema version 99") != NULL);
  CHECK(strstr(err, db) != NULL);
  CHECK(strstr(err, "DAGRUN_HOME") != NULL);
}

static void test_records(void) {
  char err[1024];
  store *st;
  const char *db = test_path("a/b/state.db");
  /* Without create, a missing database is ENOENT. */
  CHECK_INT(store_open(db, 0, &st, err, sizeof err), DR_ENOENT);
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), 0);
  if (!st) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  CHECK_STR(store_path(st), db);
  const char *id = "20260101T000000Z-aaaa";
  records_write(st, db, id);
  records_list(st);
  records_alerts(st, id);
  records_cron(st);
  records_run(st);
  records_attempt(st, id);
  store_close(st);
  store_close(NULL);
  records_reopen(db);
}

/* A version 1 database (before orchestrator pids) is migrated when opened:
 * its runs stay readable, claiming a run works, and a claim whose expected
 * orchestrator is no longer the recorded one loses (DR_EBUSY). */
static int usable_yes(void *ud, const char *run_dir, const char *task,
                      const cJSON *outputs) {
  return 1;
}

static int usable_no(void *ud, const char *run_dir, const char *task,
                     const cJSON *outputs) {
  return 0;
}

static void test_migrate_v1(void) {
  char err[1024];
  const char *db = test_path("v1.db");
  sqlite3 *raw;
  CHECK_INT(sqlite3_open(db, &raw), SQLITE_OK);
  CHECK_INT(
      sqlite3_exec(
          raw,
          "CREATE TABLE runs(id TEXT PRIMARY KEY, dag TEXT NOT NULL, dag_file "
          "TEXT, run_dir TEXT, state TEXT NOT NULL, started REAL, finished "
          "REAL, params TEXT);"
          "CREATE TABLE tasks(run_id TEXT NOT NULL, name TEXT NOT NULL, state "
          "TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, exit_code "
          "INTEGER, error TEXT, started REAL, finished REAL, outputs TEXT, "
          "PRIMARY KEY(run_id, name));"
          "CREATE TABLE attempts(run_id TEXT NOT NULL, task TEXT NOT NULL, n "
          "INTEGER NOT NULL, pid INTEGER, state TEXT NOT NULL, exit_code "
          "INTEGER, error TEXT, started REAL, finished REAL, log TEXT, "
          "PRIMARY KEY(run_id, task, n));"
          "INSERT INTO runs VALUES('old', 'd', '/x/d.yaml', '/r', 'failed', "
          "1.0, 2.0, NULL);"
          "INSERT INTO tasks VALUES('old', 't', 'failed', 1, 3, 'boom', 1.0, "
          "2.0, NULL);"
          "INSERT INTO attempts VALUES('old', 't', 1, 77, 'running', NULL, "
          "NULL, 1.0, NULL, '/r/t/attempt-1/log');"
          "PRAGMA user_version = 1;",
          0, 0, 0),
      SQLITE_OK);
  sqlite3_close(raw);
  store *st;
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), 0);
  if (!st) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  int rc;
  cJSON *run = store_run(st, "old", &rc, err, sizeof err);
  CHECK_INT(rc, 0);
  CHECK_STR(str_key(run, "state"), "failed");
  CHECK(cJSON_GetObjectItem(run, "orch_pid") == NULL);
  cJSON_Delete(run);
  CHECK_INT(claim(st, "old", 1234, 99, 0, 0, err, sizeof err), 0);
  /* A second claimer that still expects no orchestrator loses. */
  CHECK_INT(claim(st, "old", 5678, 98, 0, 0, err, sizeof err), DR_EBUSY);
  CHECK_INT(store_attempt_pid(st, "old", "t", 1, 77, 4242, err, sizeof err),
            0);
  run = store_run(st, "old", &rc, err, sizeof err);
  double v = 0;
  /* Pid 1234 started at tick 99 is no live process (and the run started
   * in 1970): the reader records the run interrupted (test_gone). */
  CHECK_STR(str_key(run, "state"), "interrupted");
  CHECK(num_key(run, "orch_pid", &v) && v == 1234);
  CHECK(num_key(run, "orch_start", &v) && v == 99);
  const cJSON *a = cJSON_GetArrayItem(
      cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(run, "tasks"),
                                             0),
                          "attempt_list"),
      0);
  CHECK(num_key(a, "pid_start", &v) && v == 4242);
  cJSON_Delete(run);
  /* v3's columns exist after the migration: the cache finds a success by
   * its fingerprint, never a failure, and only while usable says so. */
  store_task_update uf = {"failed", 1, 1, "boom", 0, 3.0, NULL, "fp", NULL};
  CHECK_INT(store_task_set(st, "old", "t", &uf, err, sizeof err), 0);
  char *from = NULL, *dir = NULL;
  cJSON *outs = NULL;
  CHECK_INT(store_cache_find(st, "fp", usable_yes, NULL, &from, &dir, &outs,
                             err, sizeof err),
            0);
  store_task_update us = {"success",       1,    0,   NULL, 0, 4.0,
                          "{\"k\":\"v\"}", NULL, NULL};
  CHECK_INT(store_task_set(st, "old", "t", &us, err, sizeof err), 0);
  CHECK_INT(store_cache_find(st, "fp", usable_no, NULL, &from, &dir, &outs, err,
                             sizeof err),
            0);
  CHECK_INT(store_cache_find(st, "fp", usable_yes, NULL, &from, &dir, &outs,
                             err, sizeof err),
            1);
  CHECK_STR(from, "old");
  CHECK_STR(dir, "/r/t/out");
  CHECK_STR(str_key(outs, "k"), "v");
  free(from);
  free(dir);
  cJSON_Delete(outs);
  /* v4's tables and columns too: a migrated run has no trigger. */
  long long last = 0;
  CHECK_INT(store_cron_set(st, "d", 60, 61.0, err, sizeof err), 0);
  CHECK_INT(store_cron_get(st, "d", &last, err, sizeof err), 0);
  CHECK(last == 60);
  cJSON *old_runs = store_runs(st, NULL, NULL, 0, err, sizeof err);
  CHECK(old_runs && str_key(cJSON_GetArrayItem(old_runs, 0), "trigger") == NULL);
  cJSON_Delete(old_runs);
  run = store_run(st, "old", &rc, err, sizeof err);
  CHECK_STR(str_key(cJSON_GetArrayItem(cJSON_GetObjectItem(run, "tasks"), 0),
                    "fingerprint"),
            "fp");
  /* v6's columns: a migrated run has no tags and no note, and takes both. */
  CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItem(run, "tags")), 0);
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(run, "user_note")) ||
        !cJSON_GetObjectItem(run, "user_note"));
  cJSON_Delete(run);
  const char *add[] = {"baseline"};
  cJSON *tags = NULL;
  CHECK_INT(store_run_tag(st, "old", add, 1, NULL, 0, &tags, err, sizeof err),
            0);
  CHECK_INT(cJSON_GetArraySize(tags), 1);
  cJSON_Delete(tags);
  CHECK_INT(store_run_set_note(st, "old", "kept", err, sizeof err), 0);
  run = store_run(st, "old", &rc, err, sizeof err);
  CHECK_STR(str_key(run, "user_note"), "kept");
  CHECK_STR(
      cJSON_GetArrayItem(cJSON_GetObjectItem(run, "tags"), 0)->valuestring,
      "baseline");
  cJSON_Delete(run);
  /* v7's table: a DAG can be paused. */
  pause_who who = {"alice", "cli"};
  CHECK_INT(pause_set(st, "d", 1, &who, 5.0, err, sizeof err), 0);
  cJSON *paused = pause_list(st, err, sizeof err);
  CHECK(pause_find(paused, "d") != NULL);
  cJSON_Delete(paused);
  store_close(st);
  CHECK_INT(sqlite3_open(db, &raw), SQLITE_OK);
  sqlite3_stmt *s;
  sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &s, NULL);
  CHECK_INT(sqlite3_step(s), SQLITE_ROW);
  CHECK_INT(sqlite3_column_int(s, 0), STORE_SCHEMA_VERSION);
  sqlite3_finalize(s);
  sqlite3_close(raw);
}

/* SQL that takes this schema's runs back to version 8's (SQLite 3.35 and
 * later drop columns). */
#define RUNS_TO_V8                                                             \
  "ALTER TABLE runs DROP COLUMN orch_host; "                                   \
  "ALTER TABLE runs DROP COLUMN orch_boot; "                                   \
  "ALTER TABLE runs DROP COLUMN orch_pidns; "                                  \
  "ALTER TABLE runs DROP COLUMN orch_guard; "                                  \
  "ALTER TABLE runs DROP COLUMN orch_guard_start; "                            \
  "ALTER TABLE runs DROP COLUMN orch_beat; "

/* db (closed) made an older store by sql (SQLite, beside the store), then
 * opened again, which migrates it; NULL (a failed check) if it does not
 * open. */
static store *reopen_older(const char *db, const char *sql) {
  char err[1024];
  sqlite3 *raw;
  CHECK_INT(sqlite3_open(db, &raw), SQLITE_OK);
  CHECK_INT(sqlite3_exec(raw, sql, 0, 0, 0), SQLITE_OK);
  sqlite3_close(raw);
  store *st = NULL;
  CHECK_INT(store_open(db, 0, &st, err, sizeof err), 0);
  return st;
}

/* A version 6 store (this one's schema without dag_pauses) migrates to
 * 7: its runs are kept and DAGs can be paused; the pause outlives a
 * reopen; pausing twice keeps the first pauser, unpausing twice changes
 * nothing the second time. */
static void test_pause_v6(void) {
  char err[1024];
  const char *db = test_path("v6.db");
  store *st;
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), 0);
  if (!st)
    return;
  CHECK_INT(store_run_begin(st, "r6", "nightly", "/d/n.yaml", "/r6", 1.0, NULL,
                            "cron", 0, NULL, NULL, 0, err, sizeof err),
            0);
  store_close(st);
  st = reopen_older(db, RUNS_TO_V8
                    "DROP TABLE dag_pauses; PRAGMA user_version = 6;");
  if (!st)
    return;
  int rc;
  cJSON *run = store_run(st, "r6", &rc, err, sizeof err);
  CHECK(run != NULL);
  cJSON_Delete(run);
  cJSON *list = pause_list(st, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(list), 0);
  cJSON_Delete(list);
  pause_who alice = {"alice", "cli"}, bob = {"bob", "api"};
  CHECK_INT(pause_set(st, "nightly", 1, &alice, 10.0, err, sizeof err), 0);
  CHECK_INT(pause_set(st, "nightly", 1, &bob, 20.0, err, sizeof err), 1);
  store_close(st);
  CHECK_INT(store_open(db, 0, &st, err, sizeof err), 0);
  if (!st)
    return;
  list = pause_list(st, err, sizeof err);
  const cJSON *p = pause_find(list, "nightly");
  CHECK(p != NULL);
  CHECK_STR(str_key(p, "by"), "alice");
  CHECK_STR(str_key(p, "via"), "cli");
  double since = 0;
  CHECK(num_key(p, "since", &since) && since == 10.0);
  CHECK(pause_find(list, "other") == NULL);
  cJSON_Delete(list);
  CHECK_INT(pause_set(st, "nightly", 0, NULL, 30.0, err, sizeof err), 0);
  CHECK_INT(pause_set(st, "nightly", 0, NULL, 31.0, err, sizeof err), 1);
  list = pause_list(st, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(list), 0);
  cJSON_Delete(list);
  store_close(st);
}

static void test_not_a_database(void) {
  char err[1024];
  store *st;
  const char *db = test_path("junk.db");
  FILE *f = fopen(db, "w");
  for (int i = 0; i < 200; i++)
    fputs("this is not a database file at all\n", f);
  fclose(f);
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), DR_ESTORE);
  CHECK(st == NULL);
  CHECK(strstr(err, db) != NULL);
  CHECK(strstr(err, "not a database") != NULL);
  /* A directory where the file should be made cannot be made. */
  const char *blocked = test_path("file-not-dir/state.db");
  f = fopen(test_path("file-not-dir"), "w");
  fclose(f);
  CHECK(store_open(blocked, 1, &st, err, sizeof err) != 0);
  CHECK(strstr(err, blocked) != NULL);
}

/* A reader is never blocked by a writer's open transaction (it sees the
 * last commit), and many reads while another process commits hundreds of
 * changes all succeed with consistent snapshots. */
static void test_concurrent(void) {
  char err[1024];
  store *st;
  const char *db = test_path("conc.db");
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), 0);
  if (!st)
    return;
  const char *tasks[] = {"t"};
  CHECK_INT(store_run_begin(st, "r1", "d", NULL, NULL, 1.0, NULL, NULL, 0, NULL, tasks, 1, err,
                            sizeof err),
            0);

  sqlite3 *w;
  sqlite3_open(db, &w);
  CHECK_INT(
      sqlite3_exec(w, "BEGIN IMMEDIATE; UPDATE runs SET state = 'x';", 0, 0, 0),
      SQLITE_OK);
  double t0 = clock_monotonic();
  int rc;
  cJSON *run = store_run(st, "r1", &rc, err, sizeof err);
  CHECK_INT(rc, 0);
  CHECK_STR(str_key(run, "state"), "running");
  CHECK(clock_monotonic() - t0 < 1.0);
  cJSON_Delete(run);
  sqlite3_exec(w, "ROLLBACK", 0, 0, 0);
  sqlite3_close(w);

  pid_t pid = fork();
  if (pid == 0) {
    store *ws;
    if (store_open(db, 1, &ws, err, sizeof err) != 0)
      _exit(2);
    for (int n = 1; n <= 300; n++) {
      if (store_attempt_begin(ws, "r1", "t", n, "log", n, err, sizeof err) ||
          store_attempt_pid(ws, "r1", "t", n, 100 + n, 0, err, sizeof err) ||
          store_attempt_end(ws, "r1", "t", n, "failed", 1, "e", n + 0.5, NULL,
                            err, sizeof err)) {
        fprintf(stderr, "writer: %s\n", err);
        _exit(1);
      }
    }
    store_close(ws);
    _exit(0);
  }
  int reads = 0, bad = 0, last = 0, done = 0, status = 0;
  while (!done) {
    done = waitpid(pid, &status, WNOHANG) == pid;
    cJSON *r = store_run(st, "r1", &rc, err, sizeof err);
    if (!r) {
      fprintf(stderr, "reader: %s\n", err);
      bad++;
      break;
    }
    cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "tasks"), 0);
    int n = (int)cJSON_GetObjectItem(t, "attempts")->valuedouble;
    int listed = cJSON_GetArraySize(cJSON_GetObjectItem(t, "attempt_list"));
    /* One snapshot: the task's count and its attempt rows agree, and
     * time only goes forward. */
    if (n != listed || n < last)
      bad++;
    last = n;
    reads++;
    cJSON_Delete(r);
  }
  if (!done)
    waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_INT(bad, 0);
  CHECK(reads > 1);
  CHECK_INT(last, 300);
  store_close(st);
}

/* A run recorded running whose dagrun is gone: read as interrupted (and
 * recorded so) with a note, its unfinished tasks cancelled, its attempts
 * left for resume; never a run whose dagrun lives; a resume's claim goes
 * on from there. */
static void test_gone(void) {
  char err[1024];
  store *st;
  const char *db = test_path("gone.db");
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), 0);
  if (!st) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  int me = (int)getpid(), rc;
  long long my_start = proc_start_time(me);
  double now = clock_wall();
  CHECK(my_start > 0);
  const char *tasks[] = {"a", "b", "c"};
  const char *ids[] = {"live", "reused", "preboot"};
  for (int i = 0; i < 3; i++)
    CHECK_INT(store_run_begin(st, ids[i], "d", NULL, NULL,
                              i == 2 ? 1000.0 : now, NULL, NULL, 0, NULL, tasks,
                              3, err, sizeof err),
              0);
  /* live: this process. reused: this pid, another start time (the pid
   * was reused since). preboot: a run begun before the machine booted and
   * resumed since by this live process: its owner is alive, so it is not
   * gone, whatever its start time says. */
  CHECK_INT(claim(st, "live", me, my_start, 0, 0, err, sizeof err), 0);
  CHECK_INT(claim(st, "reused", me, my_start + 1, 0, 0, err, sizeof err), 0);
  CHECK_INT(claim(st, "preboot", me, my_start, 0, 0, err, sizeof err), 0);
  store_task_update ok = {"success", 1,    0,    NULL, now,
                          now + 1,   NULL, NULL, NULL};
  CHECK_INT(store_task_set(st, "reused", "a", &ok, err, sizeof err), 0);
  CHECK_INT(store_attempt_begin(st, "reused", "b", 1, "/r/b/attempt-1/log",
                                now + 2, err, sizeof err),
            0);
  CHECK_INT(store_attempt_pid(st, "reused", "b", 1, 4242, 7, err, sizeof err),
            0);

  int rc2;
  cJSON *run = store_run(st, "live", &rc, err, sizeof err);
  CHECK_STR(str_key(run, "state"), "running");
  CHECK(cJSON_GetObjectItem(run, "note") == NULL);
  cJSON_Delete(run);

  run = store_run(st, "reused", &rc, err, sizeof err);
  CHECK_INT(rc, 0);
  CHECK_STR(str_key(run, "state"), "interrupted");
  char want[128];
  snprintf(want, sizeof want,
           "dagrun (pid %d) is gone: `dagrun resume reused` goes on with the "
           "run",
           me);
  CHECK_STR(str_key(run, "note"), want);
  double v = 0;
  /* Ended when it was last heard of: its last attempt's start. */
  CHECK(num_key(run, "finished", &v) && v == now + 2);
  const cJSON *t = cJSON_GetObjectItem(run, "tasks");
  CHECK_STR(str_key(cJSON_GetArrayItem(t, 0), "state"), "success");
  CHECK_STR(str_key(cJSON_GetArrayItem(t, 1), "state"), "cancelled");
  CHECK_STR(str_key(cJSON_GetArrayItem(t, 2), "state"), "cancelled");
  const cJSON *a = cJSON_GetArrayItem(
      cJSON_GetObjectItem(cJSON_GetArrayItem(t, 1), "attempt_list"), 0);
  CHECK_STR(str_key(a, "state"), "running");
  cJSON_Delete(run);

  /* Recorded, not only shown: a filter on the state finds it. */
  cJSON *runs = store_runs(st, NULL, "running", 0, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(runs), 2);
  for (int i = 0; i < cJSON_GetArraySize(runs); i++)
    CHECK(strcmp(str_key(cJSON_GetArrayItem(runs, i), "id"), "reused") != 0);
  cJSON_Delete(runs);
  /* A run begun before the last boot and resumed by a live dagrun is that
   * dagrun's: running, no note. */
  run = store_run(st, "preboot", &rc, err, sizeof err);
  CHECK_STR(str_key(run, "state"), "running");
  CHECK(cJSON_GetObjectItem(run, "note") == NULL);
  cJSON_Delete(run);
  runs = store_runs(st, NULL, "interrupted", 0, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(runs), 1);
  for (int i = 0; i < cJSON_GetArraySize(runs); i++)
    CHECK(strstr(str_key(cJSON_GetArrayItem(runs, i), "note"), "is gone"));
  cJSON_Delete(runs);

  /* A resume claims the interrupted run: running again, no note. */
  CHECK_INT(
      claim(st, "reused", me, my_start, me, my_start + 1, err, sizeof err), 0);
  run = store_run(st, "reused", &rc2, err, sizeof err);
  CHECK_STR(str_key(run, "state"), "running");
  CHECK(cJSON_GetObjectItem(run, "note") == NULL);
  CHECK(cJSON_GetObjectItem(run, "finished") == NULL);
  cJSON_Delete(run);
  store_close(st);
}

/* Approval decisions: only a task recorded waiting_approval can be
 * decided, once per attempt; the same decision again is a replay (1,
 * nothing written), the other one DR_EEXIST; an unknown task DR_ENOENT. */
static void test_approvals(void) {
  char err[1024];
  store *st;
  CHECK_INT(store_open(test_path("approvals.db"), 1, &st, err, sizeof err), 0);
  if (!st)
    return;
  const char *tasks[] = {"gate", "other"};
  CHECK_INT(store_run_begin(st, "r1", "d", NULL, NULL, 1.0, NULL, NULL, 0, NULL,
                            tasks, 2, err, sizeof err),
            0);
  store_approval yes = {"approved", "alice", "cli", NULL};
  store_approval no = {"rejected", "bob", "api", "too soon"};
  /* Not waiting yet. */
  CHECK_INT(store_approval_decide(st, "r1", "gate", &yes, 2.0, err, sizeof err),
            DR_EINVAL);
  CHECK(strstr(err, "is not waiting for approval (it is waiting)") != NULL);
  CHECK_INT(store_approval_decide(st, "r1", "nope", &yes, 2.0, err, sizeof err),
            DR_ENOENT);
  CHECK_INT(store_approval_decide(st, "r9", "gate", &yes, 2.0, err, sizeof err),
            DR_ENOENT);
  CHECK_INT(
      store_attempt_begin(st, "r1", "gate", 1, "/l", 2.0, err, sizeof err), 0);
  store_task_update u = {
      "waiting_approval", 1, -1, NULL, 0, 0, NULL, NULL, NULL};
  CHECK_INT(store_task_set(st, "r1", "gate", &u, err, sizeof err), 0);
  CHECK_INT(store_approval_decide(st, "r1", "gate", &yes, 3.0, err, sizeof err),
            0);
  CHECK_INT(store_approval_decide(st, "r1", "gate", &yes, 4.0, err, sizeof err),
            1);
  CHECK_INT(store_approval_decide(st, "r1", "gate", &no, 5.0, err, sizeof err),
            DR_EEXIST);
  CHECK(strstr(err, "was already approved") != NULL);
  cJSON *a = store_approvals(st, "r1", NULL, 0, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(a), 1);
  const cJSON *d = a ? cJSON_GetArrayItem(a, 0) : NULL;
  double t = 0, n = 0;
  CHECK_STR(str_key(d, "decision"), "approved");
  CHECK_STR(str_key(d, "by"), "alice");
  CHECK_STR(str_key(d, "via"), "cli");
  CHECK(num_key(d, "time", &t) && t == 3.0);
  CHECK(num_key(d, "attempt", &n) && n == 1);
  cJSON_Delete(a);
  /* The next attempt waits: a rejection of it is its own decision. */
  u.attempts = 2;
  CHECK_INT(store_task_set(st, "r1", "gate", &u, err, sizeof err), 0);
  CHECK_INT(store_approval_decide(st, "r1", "gate", &no, 6.0, err, sizeof err),
            0);
  a = store_approvals(st, "r1", "gate", 2, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(a), 1);
  CHECK_STR(str_key(cJSON_GetArrayItem(a, 0), "reason"), "too soon");
  cJSON_Delete(a);
  /* store_run carries them. */
  int rc;
  cJSON *run = store_run(st, "r1", &rc, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItem(run, "approvals")), 2);
  cJSON_Delete(run);
  store_close(st);
}

/* A version-7 store (no serve_queue) migrated to 8 on open: serve's
 * queue then keeps runs in order across reopening, with their params and
 * info, and forgets one removed (twice: no error). */
static void test_runqueue_v7(void) {
  char err[1024];
  const char *db = test_path("v7.db");
  store *st;
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), 0);
  if (!st)
    return;
  store_close(st);
  st = reopen_older(db, RUNS_TO_V8
                    "DROP TABLE serve_queue; PRAGMA user_version = 7;");
  if (!st)
    return;
  char *params[] = {"lr=0.1", "tag=a b", NULL};
  long long a = runqueue_add(st, "nightly", 7200, NULL, "cron", NULL, NULL,
                             1.0, err, sizeof err);
  long long b = runqueue_add(st, "nightly", 0, "r-api", "api", params,
                             "{\"files\":[]}", 2.0, err, sizeof err);
  CHECK(a > 0 && b > a);
  store_close(st);
  CHECK_INT(store_open(db, 0, &st, err, sizeof err), 0);
  if (!st)
    return;
  cJSON *l = runqueue_list(st, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(l), 2);
  const cJSON *q0 = cJSON_GetArrayItem(l, 0), *q1 = cJSON_GetArrayItem(l, 1);
  double at = 0;
  CHECK(num_key(q0, "at", &at) && at == 7200);
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(q0, "run_id")));
  CHECK_STR(str_key(q1, "run_id"), "r-api");
  CHECK_STR(str_key(q1, "trigger"), "api");
  CHECK_STR(str_key(q1, "info"), "{\"files\":[]}");
  const cJSON *p = cJSON_GetObjectItem(q1, "params");
  CHECK(cJSON_GetArraySize(p) == 2 &&
        strcmp(cJSON_GetArrayItem(p, 1)->valuestring, "tag=a b") == 0);
  cJSON_Delete(l);
  CHECK_INT(runqueue_remove(st, a, err, sizeof err), 0);
  CHECK_INT(runqueue_remove(st, a, err, sizeof err), 0);
  l = runqueue_list(st, err, sizeof err);
  CHECK_INT(cJSON_GetArraySize(l), 1);
  cJSON_Delete(l);
  store_close(st);
}

int main(void) {
  if (test_tmpdir_make("store") != 0)
    return 1;
  test_records();
  test_migrate_v1();
  test_pause_v6();
  test_runqueue_v7();
  test_not_a_database();
  test_concurrent();
  test_gone();
  test_approvals();
  if (!test_failures_)
    test_tmpdir_remove();
  TEST_DONE();
}
