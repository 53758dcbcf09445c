#include "store.h"
#include "datastate.h"
#include "store_impl.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "lib/clock.h"
#include "lib/fileio.h"
#include "owner.h"

/* Statements, prepared once per handle on first use. */
#define STORE_STMTS(XX)                                                        \
  XX(BEGIN, "BEGIN IMMEDIATE")                                                 \
  XX(COMMIT, "COMMIT")                                                         \
  XX(ROLLBACK, "ROLLBACK")                                                     \
  XX(SAVEPOINT, "SAVEPOINT w")                                                 \
  XX(RELEASE, "RELEASE w")                                                     \
  XX(ROLLBACK_TO, "ROLLBACK TO w")                                             \
  XX(RUN_INSERT, "INSERT INTO runs(id, dag, dag_file, run_dir, state, "        \
                 "started, params, trigger, logical_date, dag_sha256) "        \
                 "VALUES(?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7, ?8, ?9)")      \
  XX(RUN_FINISH, "UPDATE runs SET state = ?2, finished = ?3, waiting = NULL "  \
                 "WHERE id = ?1")                                              \
  XX(TASK_INSERT, "INSERT INTO tasks(run_id, name, state, attempts) "          \
                  "VALUES(?1, ?2, 'waiting', 0)")                              \
  XX(TASK_SET, "UPDATE tasks SET state = ?3, attempts = ?4, exit_code = ?5, "  \
               "error = ?6, started = coalesce(?7, started), "                 \
               "finished = coalesce(?8, finished), "                           \
               "outputs = coalesce(?9, outputs), "                             \
               "fingerprint = coalesce(?10, fingerprint), "                    \
               "cached_from = coalesce(?11, cached_from) "                     \
               "WHERE run_id = ?1 AND name = ?2")                              \
  XX(TASK_RUNNING, "UPDATE tasks SET state = 'running', attempts = ?3, "       \
                   "started = coalesce(started, ?4) "                          \
                   "WHERE run_id = ?1 AND name = ?2")                          \
  XX(ATT_INSERT, "INSERT INTO attempts(run_id, task, n, state, started, log) " \
                 "VALUES(?1, ?2, ?3, 'starting', ?4, ?5)")                     \
  XX(ATT_PID, "UPDATE attempts SET pid = ?4, pid_start = ?5, "                 \
              "state = 'running' WHERE run_id = ?1 AND task = ?2 AND n = ?3")  \
  XX(RUN_CLAIM, "UPDATE runs SET state = 'running', finished = NULL, "         \
                "orch_pid = ?2, orch_start = ?3, orch_host = ?6, "             \
                "orch_boot = ?7, orch_pidns = ?8, orch_guard = NULL, "         \
                "orch_guard_start = NULL, orch_beat = ?9 WHERE id = ?1 AND "   \
                "orch_pid IS ?4 AND orch_start IS ?5")                         \
  XX(RUN_GUARD, "UPDATE runs SET orch_guard = ?3, orch_guard_start = ?4 "      \
                "WHERE id = ?1 AND orch_pid IS ?2")                            \
  XX(RUN_BEAT, "UPDATE runs SET orch_beat = ?3 WHERE id = ?1 AND "             \
               "orch_pid IS ?2")                                               \
  XX(ATT_END, "UPDATE attempts SET state = ?4, exit_code = ?5, error = ?6, "   \
              "finished = ?7 WHERE run_id = ?1 AND task = ?2 AND n = ?3")      \
  XX(RUNS_LIST,                                                                \
     "SELECT r.id, r.dag, r.dag_file, r.run_dir, r.state, r.started, "         \
     "r.finished, (SELECT count(*) FROM tasks t WHERE t.run_id = r.id), "      \
     "(SELECT count(*) FROM tasks t WHERE t.run_id = r.id AND "                \
     "t.state IN ('success', 'cached')), r.trigger, r.logical_date, "          \
     "r.orch_pid, r.orch_start, "                                              \
     "(SELECT count(*) FROM tasks t WHERE t.run_id = r.id AND "                \
     "t.state = 'cached'), (SELECT group_concat(DISTINCT t.cached_from) "      \
     "FROM tasks t WHERE t.run_id = r.id AND t.state = 'cached'), r.waiting, " \
     "r.tags, r.user_note, r.orch_host, r.orch_boot, r.orch_pidns, "           \
     "r.orch_guard, r.orch_guard_start, r.orch_beat "                          \
     "FROM runs r "                                                            \
     "WHERE (?1 IS NULL OR r.dag = ?1) AND (?3 IS NULL OR r.state = ?3) "      \
     "AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(r.tags) "             \
     "WHERE json_each.value = ?4)) "                                           \
     "ORDER BY r.started DESC, r.id DESC LIMIT ?2")                            \
  XX(RUN_FIND, "SELECT id, dag, dag_file, run_dir, state, started, finished, " \
               "params, orch_pid, orch_start, trigger, logical_date, "         \
               "dag_sha256, waiting, tags, user_note, orch_host, orch_boot, "  \
               "orch_pidns, orch_guard, orch_guard_start, orch_beat "          \
               "FROM runs WHERE substr(id, 1, "                                \
               "length(?1)) = ?1 "                                             \
               "ORDER BY id LIMIT 2")                                          \
  XX(TASKS_OF, "SELECT name, state, attempts, exit_code, error, started, "     \
               "finished, outputs, fingerprint, cached_from, waiting FROM "    \
               "tasks "                                                        \
               "WHERE run_id = ?1 ORDER BY rowid")                             \
  XX(ATTS_OF, "SELECT n, pid, state, exit_code, error, started, finished, "    \
              "log, pid_start FROM attempts WHERE run_id = ?1 AND task = ?2 "  \
              "ORDER BY n")                                                    \
  XX(TASK_EXISTS, "SELECT 1 FROM tasks WHERE run_id = ?1 AND name = ?2")       \
  XX(CACHE_FIND, "SELECT t.run_id, t.name, t.outputs, r.run_dir FROM tasks t " \
                 "JOIN runs r ON r.id = t.run_id WHERE t.fingerprint = ?1 "    \
                 "AND t.state = 'success' AND r.run_dir IS NOT NULL "          \
                 "ORDER BY t.finished DESC, t.rowid DESC")                     \
  XX(ALERT_INSERT,                                                             \
     "INSERT INTO alert_deliveries(run_id, time, event, task, "                \
     "attempt, try, status, error, duration_s, result, "                       \
     "endpoint) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "              \
     "?11)")                                                                   \
  XX(ALERTS_OF, "SELECT time, event, task, attempt, try, status, error, "      \
                "duration_s, result, endpoint FROM alert_deliveries "          \
                "WHERE run_id = ?1 ORDER BY rowid")                            \
  XX(RUNS_OWNED, "SELECT id, orch_pid, orch_start, orch_host, orch_boot, "     \
                 "orch_pidns, orch_guard, orch_guard_start, orch_beat FROM "   \
                 "runs "                                                       \
                 "WHERE state IN ('running', 'queued') AND orch_pid > 0 AND "  \
                 "(?1 IS NULL OR substr(id, 1, length(?1)) = ?1)")             \
  XX(RUN_GONE, "UPDATE runs SET state = 'interrupted', finished = max("        \
               "coalesce(started, 0), coalesce((SELECT max(max("               \
               "coalesce(a.started, 0), coalesce(a.finished, 0))) FROM "       \
               "attempts a WHERE a.run_id = ?1), 0), coalesce((SELECT "        \
               "max(t.finished) FROM tasks t WHERE t.run_id = ?1), 0)) "       \
               "WHERE id = ?1 AND state IN ('running', 'queued') AND "         \
               "orch_pid IS ?2 AND "                                           \
               "orch_start IS ?3")                                             \
  XX(TASKS_GONE, "UPDATE tasks SET state = 'cancelled', finished = "           \
                 "coalesce(finished, (SELECT finished FROM runs WHERE "        \
                 "id = ?1)) WHERE run_id = ?1 AND state NOT IN ('success', "   \
                 "'cached', 'failed', 'upstream_failed', 'cancelled', "        \
                 "'skipped')")                                                 \
  XX(CRON_GET, "SELECT last_fire FROM cron_state WHERE dag = ?1")              \
  XX(CRON_SET, "INSERT INTO cron_state(dag, last_fire, updated) "              \
               "VALUES(?1, ?2, ?3) ON CONFLICT(dag) DO UPDATE SET "            \
               "last_fire = excluded.last_fire, updated = excluded.updated")   \
  XX(LEASES_OF, "SELECT l.run_id, l.task, l.pid, l.pid_start, r.orch_host, "   \
                "r.orch_boot, r.orch_pidns, r.orch_guard, "                    \
                "r.orch_guard_start, r.orch_beat, r.orch_pid IS l.pid AND "    \
                "r.orch_start IS l.pid_start FROM pool_leases l LEFT JOIN "    \
                "runs r ON r.id = l.run_id WHERE l.pool = ?1 "                 \
                "ORDER BY l.since, l.rowid")                                   \
  XX(LEASE_DROP, "DELETE FROM pool_leases WHERE run_id = ?1 AND task = ?2")    \
  XX(LEASE_ADD, "INSERT OR REPLACE INTO pool_leases(pool, run_id, task, pid, " \
                "pid_start, since) VALUES(?1, ?2, ?3, ?4, ?5, ?6)")            \
  XX(LEASES_DROP_RUN, "DELETE FROM pool_leases WHERE run_id = ?1")             \
  XX(TASK_WAITING, "UPDATE tasks SET waiting = ?3 WHERE run_id = ?1 AND "      \
                   "name = ?2 AND waiting IS NOT ?3")                          \
  XX(TASKS_WAIT_CLEAR, "UPDATE tasks SET waiting = NULL WHERE run_id = ?1 "    \
                       "AND waiting IS NOT NULL")                              \
  XX(RUNS_ACTIVE, "SELECT id, state, orch_pid, orch_start, orch_host, "        \
                  "orch_boot, orch_pidns, orch_guard, orch_guard_start, "      \
                  "orch_beat, started FROM runs WHERE dag = ?1 AND (state IN " \
                  "('running', 'queued') OR (state = 'interrupted' AND "       \
                  "coalesce(orch_beat, started) > ?3)) AND orch_pid > 0 AND "  \
                  "id <> ?2 ORDER BY started, id")                             \
  XX(RUN_STARTED, "SELECT started FROM runs WHERE id = ?1")                    \
  XX(RUN_TAGS_GET, "SELECT tags FROM runs WHERE id = ?1")                      \
  XX(RUN_TAGS_SET, "UPDATE runs SET tags = ?2 WHERE id = ?1")                  \
  XX(TASK_STATE, "SELECT state, attempts FROM tasks WHERE run_id = ?1 AND "    \
                 "name = ?2")                                                  \
  XX(APPROVAL_GET, "SELECT decision, by, via, time, reason, task, attempt "    \
                   "FROM approvals WHERE run_id = ?1 AND (?2 IS NULL OR "      \
                   "task = ?2) AND (?3 <= 0 OR attempt = ?3) ORDER BY rowid")  \
  XX(APPROVAL_ADD, "INSERT INTO approvals(run_id, task, attempt, decision, "   \
                   "by, via, time, reason) VALUES(?1, ?2, ?3, ?4, ?5, ?6, "    \
                   "?7, ?8)")                                                  \
  XX(RUN_NOTE_SET, "UPDATE runs SET user_note = ?2 WHERE id = ?1")             \
  XX(RUN_ADMIT, "UPDATE runs SET state = ?2, waiting = ?3 WHERE id = ?1 AND "  \
                "(state IS NOT ?2 OR waiting IS NOT ?3)")

enum {
#define XX(name, sql) S_##name,
  STORE_STMTS(XX)
#undef XX
      S_COUNT
};

static const char *const stmt_sql[] = {
#define XX(name, sql) sql,
    STORE_STMTS(XX)
#undef XX
};

struct store {
  sqlite3 *db;
  char *path;
  sqlite3_stmt *stmt[S_COUNT];
  int batching; /* store_batch_start: writes share one transaction */
};

/* The tables version 4 added, in both the new schema and the migration. */
#define V4_TABLES_SQL                                                          \
  "CREATE TABLE alert_deliveries(\n"                                           \
  "  run_id TEXT NOT NULL,\n"                                                  \
  "  time REAL NOT NULL,\n"                                                    \
  "  event TEXT NOT NULL,\n"                                                   \
  "  task TEXT,\n"                                                             \
  "  attempt INTEGER,\n"                                                       \
  "  try INTEGER NOT NULL,\n"                                                  \
  "  status INTEGER,\n"                                                        \
  "  error TEXT,\n"                                                            \
  "  duration_s REAL,\n"                                                       \
  "  result TEXT NOT NULL,\n"                                                  \
  "  endpoint TEXT\n"                                                          \
  ");\n"                                                                       \
  "CREATE INDEX alert_deliveries_run ON alert_deliveries(run_id);\n"           \
  "CREATE TABLE cron_state(\n"                                                 \
  "  dag TEXT PRIMARY KEY,\n"                                                  \
  "  last_fire INTEGER NOT NULL,\n"                                            \
  "  updated REAL\n"                                                           \
  ");\n"

/* The table version 5 added: machine-wide pool leases, one per task of a
 * run that holds a slot, with the dagrun that holds it (pid and start time,
 * so that a lease of a dead dagrun can be told and freed). */
#define V5_TABLES_SQL                                                          \
  "CREATE TABLE pool_leases(\n"                                                \
  "  pool TEXT NOT NULL,\n"                                                    \
  "  run_id TEXT NOT NULL,\n"                                                  \
  "  task TEXT NOT NULL,\n"                                                    \
  "  pid INTEGER NOT NULL,\n"                                                  \
  "  pid_start INTEGER,\n"                                                     \
  "  since REAL,\n"                                                            \
  "  PRIMARY KEY(run_id, task)\n"                                              \
  ");\n"                                                                       \
  "CREATE INDEX pool_leases_pool ON pool_leases(pool);\n"

/* The table version 6 added: a person's decision on an approval task's
 * attempt, at most one per attempt (the key makes a replay harmless). */
#define V6_TABLES_SQL                                                          \
  "CREATE TABLE approvals(\n"                                                  \
  "  run_id TEXT NOT NULL,\n"                                                  \
  "  task TEXT NOT NULL,\n"                                                    \
  "  attempt INTEGER NOT NULL,\n"                                              \
  "  decision TEXT NOT NULL,\n"                                                \
  "  by TEXT NOT NULL,\n"                                                      \
  "  via TEXT NOT NULL,\n"                                                     \
  "  time REAL NOT NULL,\n"                                                    \
  "  reason TEXT,\n"                                                           \
  "  PRIMARY KEY(run_id, task, attempt)\n"                                     \
  ");\n"

/* The table version 7 added: the DAGs whose schedule is paused (pause.h),
 * a row per paused DAG, removed when it is unpaused. */
#define V7_TABLES_SQL                                                          \
  "CREATE TABLE dag_pauses(\n"                                                 \
  "  dag TEXT PRIMARY KEY,\n"                                                  \
  "  since REAL NOT NULL,\n"                                                   \
  "  by TEXT NOT NULL,\n"                                                      \
  "  via TEXT NOT NULL\n"                                                      \
  ");\n"

/* The table version 8 added: the runs dagrun serve has queued and not yet
 * started (runqueue.h), a row each until it starts or is cancelled. IF
 * NOT EXISTS: a store made by this version has it before any migration
 * runs. */
#define V8_TABLES_SQL                                                          \
  "CREATE TABLE IF NOT EXISTS serve_queue(\n"                                  \
  "  seq INTEGER PRIMARY KEY AUTOINCREMENT,\n"                                 \
  "  dag TEXT NOT NULL,\n"                                                     \
  "  at INTEGER NOT NULL,\n"                                                   \
  "  run_id TEXT,\n"                                                           \
  "  trigger TEXT NOT NULL,\n"                                                 \
  "  params TEXT,\n"                                                           \
  "  info TEXT,\n"                                                             \
  "  queued REAL NOT NULL\n"                                                   \
  ");\n"

static const char schema_sql[] =
    "CREATE TABLE runs(\n"
    "  id TEXT PRIMARY KEY,\n"
    "  dag TEXT NOT NULL,\n"
    "  dag_file TEXT,\n"
    "  run_dir TEXT,\n"
    "  state TEXT NOT NULL,\n"
    "  started REAL,\n"
    "  finished REAL,\n"
    "  params TEXT,\n"
    "  orch_pid INTEGER,\n"
    "  orch_start INTEGER,\n"
    "  trigger TEXT,\n"
    "  logical_date REAL,\n"
    "  dag_sha256 TEXT,\n"
    "  waiting TEXT,\n"
    "  tags TEXT,\n"
    "  user_note TEXT,\n"
    "  orch_host TEXT,\n"
    "  orch_boot TEXT,\n"
    "  orch_pidns TEXT,\n"
    "  orch_guard INTEGER,\n"
    "  orch_guard_start INTEGER,\n"
    "  orch_beat REAL\n"
    ");\n"
    "CREATE INDEX runs_dag_started ON runs(dag, started);\n"
    "CREATE INDEX runs_started ON runs(started);\n"
    "CREATE TABLE tasks(\n"
    "  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "  name TEXT NOT NULL,\n"
    "  state TEXT NOT NULL,\n"
    "  attempts INTEGER NOT NULL DEFAULT 0,\n"
    "  exit_code INTEGER,\n"
    "  error TEXT,\n"
    "  started REAL,\n"
    "  finished REAL,\n"
    "  outputs TEXT,\n"
    "  fingerprint TEXT,\n"
    "  cached_from TEXT,\n"
    "  waiting TEXT,\n"
    "  PRIMARY KEY(run_id, name)\n"
    ");\n"
    "CREATE INDEX tasks_fingerprint ON tasks(fingerprint);\n"
    "CREATE TABLE attempts(\n"
    "  run_id TEXT NOT NULL,\n"
    "  task TEXT NOT NULL,\n"
    "  n INTEGER NOT NULL,\n"
    "  pid INTEGER,\n"
    "  state TEXT NOT NULL,\n"
    "  exit_code INTEGER,\n"
    "  error TEXT,\n"
    "  started REAL,\n"
    "  finished REAL,\n"
    "  log TEXT,\n"
    "  pid_start INTEGER,\n"
    "  PRIMARY KEY(run_id, task, n),\n"
    "  FOREIGN KEY(run_id, task) REFERENCES tasks(run_id, name)\n"
    "    ON DELETE CASCADE\n"
    ");\n" V4_TABLES_SQL V5_TABLES_SQL V6_TABLES_SQL V7_TABLES_SQL
        V8_TABLES_SQL;

/* Version 1 -> 2: who runs a run (the orchestrator's pid and process start
 * time, against pid reuse) and each attempt's process start time. */
static const char migrate_v1_sql[] =
    "ALTER TABLE runs ADD COLUMN orch_pid INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN orch_start INTEGER;\n"
    "ALTER TABLE attempts ADD COLUMN pid_start INTEGER;\n";

/* Version 2 -> 3: the fingerprint cache (each task's fingerprint, and for a
 * cached task the run its outputs came from). */
static const char migrate_v2_sql[] =
    "ALTER TABLE tasks ADD COLUMN fingerprint TEXT;\n"
    "ALTER TABLE tasks ADD COLUMN cached_from TEXT;\n"
    "CREATE INDEX tasks_fingerprint ON tasks(fingerprint);\n";

/* Version 3 -> 4: how a run was started (trigger, logical date), alert
 * deliveries, and each scheduled DAG's last cron fire time (dagrun serve). */
static const char migrate_v3_sql[] =
    "ALTER TABLE runs ADD COLUMN trigger TEXT;\n"
    "ALTER TABLE runs ADD COLUMN logical_date REAL;\n"
    "ALTER TABLE runs ADD COLUMN dag_sha256 TEXT;\n" V4_TABLES_SQL;

/* Version 4 -> 5: what a queued run or task waits for (max_active_runs, a
 * machine-wide pool), and the pool leases. */
static const char migrate_v4_sql[] =
    "ALTER TABLE runs ADD COLUMN waiting TEXT;\n"
    "ALTER TABLE tasks ADD COLUMN waiting TEXT;\n" V5_TABLES_SQL;

/* Version 5 -> 6: a run's tags (a JSON array of strings) and the note
 * people write on it (`dagrun tag`, `dagrun note`, the API), and the
 * approvals of approval tasks. */
static const char migrate_v5_sql[] =
    "ALTER TABLE runs ADD COLUMN tags TEXT;\n"
    "ALTER TABLE runs ADD COLUMN user_note TEXT;\n" V6_TABLES_SQL;

/* Version 6 -> 7: paused schedules (`dagrun pause`, the API). */
static const char migrate_v6_sql[] = V7_TABLES_SQL;

/* Version 7 -> 8: serve's queued runs, kept across its restarts. */
static const char migrate_v7_sql[] = V8_TABLES_SQL;

/* Version 8 -> 9: where a run's dagrun runs (owner.h: its pid is judged
 * only where it means something), when it last said it lived (judged from
 * elsewhere by that), and its guard (a dead dagrun's attempts hold their
 * pools until the guard has stopped them). */
static const char migrate_v8_sql[] =
    "ALTER TABLE runs ADD COLUMN orch_host TEXT;\n"
    "ALTER TABLE runs ADD COLUMN orch_boot TEXT;\n"
    "ALTER TABLE runs ADD COLUMN orch_pidns TEXT;\n"
    "ALTER TABLE runs ADD COLUMN orch_guard INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN orch_guard_start INTEGER;\n"
    "ALTER TABLE runs ADD COLUMN orch_beat REAL;\n";

static int fail(store *st, int rc, char *err, size_t errlen, const char *what) {
  snprintf(err, errlen, "run store %s: %s: %s", st->path, what,
           st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
  return DR_ESTORE;
}

static int exec_sql(store *st, const char *sql, char *err, size_t errlen) {
  int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? 0 : fail(st, rc, err, errlen, sql);
}

static sqlite3_stmt *stmt(store *st, int which, char *err, size_t errlen) {
  if (!st->stmt[which]) {
    int rc =
        sqlite3_prepare_v3(st->db, stmt_sql[which], -1,
                           SQLITE_PREPARE_PERSISTENT, &st->stmt[which], NULL);
    if (rc != SQLITE_OK) {
      fail(st, rc, err, errlen, "preparing a statement");
      return NULL;
    }
  }
  sqlite3_reset(st->stmt[which]);
  sqlite3_clear_bindings(st->stmt[which]);
  return st->stmt[which];
}

char *store_default_path(void) {
  const char *home = getenv("DAGRUN_HOME");
  if (home && *home)
    return path_join(home, "state.db");
  return xstrdup(".dagrun/state.db");
}

const char *store_path(const store *st) { return st->path; }

double store_num(const cJSON *o, const char *k, double dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

const char *store_str(const cJSON *o, const char *k, const char *dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(j) ? j->valuestring : dflt;
}

int store_state_active(const char *state) {
  return state &&
         (strcmp(state, "running") == 0 || strcmp(state, "queued") == 0);
}

void store_close(store *st) {
  if (!st)
    return;
  for (int i = 0; i < S_COUNT; i++)
    sqlite3_finalize(st->stmt[i]);
  sqlite3_close(st->db);
  free(st->path);
  free(st);
}

static int read_version(store *st, int *v, char *err, size_t errlen) {
  sqlite3_stmt *s;
  int rc = sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &s, NULL);
  if (rc != SQLITE_OK)
    return fail(st, rc, err, errlen, "reading the schema version");
  rc = sqlite3_step(s);
  *v = rc == SQLITE_ROW ? sqlite3_column_int(s, 0) : 0;
  sqlite3_finalize(s);
  return rc == SQLITE_ROW
             ? 0
             : fail(st, rc, err, errlen, "reading the schema version");
}

/* Creates the schema in an empty database, or checks the version of an
 * existing one. A store at this version needs nothing written, so that
 * is read first, without a lock: an open (each API request's) does not
 * wait for a writer's transaction. Otherwise under BEGIN IMMEDIATE, so
 * two processes that open a new database at once do not both create it
 * (the version is read again under it). */
static int init_schema(store *st, char *err, size_t errlen) {
  int v, rc;
  if ((rc = read_version(st, &v, err, errlen)) != 0)
    return rc;
  if (v == STORE_SCHEMA_VERSION)
    return 0;
  if ((rc = exec_sql(st, "BEGIN IMMEDIATE", err, errlen)) != 0)
    return rc;
  if ((rc = read_version(st, &v, err, errlen)) != 0)
    goto out;
  if (v > STORE_SCHEMA_VERSION) {
    snprintf(err, errlen,
             "run store %s has schema version %d, newer than this dagrun "
             "understands (%d): use a newer dagrun, or set DAGRUN_HOME to "
             "another directory",
             st->path, v, STORE_SCHEMA_VERSION);
    rc = DR_EVERSION;
    goto out;
  }
  if (v == 0 && (rc = exec_sql(st, schema_sql, err, errlen)) != 0)
    goto out;
  if (v == 1 && (rc = exec_sql(st, migrate_v1_sql, err, errlen)) != 0)
    goto out;
  if (v >= 1 && v <= 2 && (rc = exec_sql(st, migrate_v2_sql, err, errlen)) != 0)
    goto out;
  if (v >= 1 && v <= 3 && (rc = exec_sql(st, migrate_v3_sql, err, errlen)) != 0)
    goto out;
  if (v >= 1 && v <= 4 && (rc = exec_sql(st, migrate_v4_sql, err, errlen)) != 0)
    goto out;
  if (v >= 1 && v <= 5 && (rc = exec_sql(st, migrate_v5_sql, err, errlen)) != 0)
    goto out;
  if (v >= 1 && v <= 6 && (rc = exec_sql(st, migrate_v6_sql, err, errlen)) != 0)
    goto out;
  if (v >= 1 && v <= 7 && (rc = exec_sql(st, migrate_v7_sql, err, errlen)) != 0)
    goto out;
  if (v >= 1 && v <= 8 && (rc = exec_sql(st, migrate_v8_sql, err, errlen)) != 0)
    goto out;
  if (v < STORE_SCHEMA_VERSION) {
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", STORE_SCHEMA_VERSION);
    if ((rc = exec_sql(st, sql, err, errlen)) != 0)
      goto out;
  }
  return exec_sql(st, "COMMIT", err, errlen);
out:
  sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}

/* Switching a new database to WAL needs it alone, and SQLite does not
 * call the busy handler for that: two dagruns that create the store at
 * once would see "database is locked". Retried here for as long as
 * busy_timeout would wait. */
static int set_wal(store *st, char *err, size_t errlen) {
  for (int tries = 0;; tries++) {
    int rc = sqlite3_exec(st->db, "PRAGMA journal_mode = WAL", NULL, NULL,
                          NULL);
    if (rc == SQLITE_OK)
      return 0;
    if ((rc & 0xff) != SQLITE_BUSY || tries >= 1000)
      return fail(st, rc, err, errlen, "PRAGMA journal_mode = WAL");
    sqlite3_sleep(10);
  }
}

int store_open(const char *path, int create, store **out, char *err,
               size_t errlen) {
  *out = NULL;
  store *st = xcalloc(1, sizeof(*st));
  st->path = xstrdup(path);
  if (create) {
    char *dir = path_dirname(path);
    int rc = fileio_mkdir_p(dir, 0755);
    if (rc != 0) {
      snprintf(err, errlen, "run store %s: cannot create directory %s: %s",
               path, dir, strerror(-rc));
      free(dir);
      store_close(st);
      return DR_ESTORE;
    }
    free(dir);
  }
  int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path, &st->db, flags, NULL);
  if (rc != SQLITE_OK) {
    int missing = !create && rc == SQLITE_CANTOPEN;
    fail(st, rc, err, errlen, "cannot open");
    store_close(st);
    return missing ? DR_ENOENT : DR_ESTORE;
  }
  sqlite3_extended_result_codes(st->db, 1);
  /* Waits for another process's write rather than failing at once. */
  sqlite3_busy_timeout(st->db, 10000);
  if ((rc = exec_sql(st, "PRAGMA foreign_keys = ON", err, errlen)) != 0 ||
      (rc = set_wal(st, err, errlen)) != 0 ||
      /* NORMAL: a commit is in the WAL, which survives the crash of any
       * process (dagrun's kill -9 included); only a power cut can lose
       * the commits since the last checkpoint, and resume then redoes
       * those tasks. FULL's fdatasync per commit (four a task) was a sixth
       * of dagrun's own time per task (docs/internals/store.md). */
      (rc = exec_sql(st, "PRAGMA synchronous = NORMAL", err, errlen)) != 0 ||
      (rc = init_schema(st, err, errlen)) != 0) {
    store_close(st);
    return rc;
  }
  /* journal_mode=WAL fails silently (returns the old mode) on a file that
   * is not a database; init_schema would have caught that. */
  *out = st;
  return 0;
}

/* Steps one of the fixed statements (BEGIN, COMMIT...): SQLITE_DONE or
 * SQLite's error. */
static int step_fixed(store *st, int which, char *err, size_t errlen) {
  sqlite3_stmt *s = stmt(st, which, err, errlen);
  if (!s)
    return SQLITE_ERROR;
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  return rc;
}

/* Transactions around each write. While batching, the write is a
 * savepoint of the batch's transaction, which the first write opens: it
 * stays all-or-nothing, and the batch is committed as one. */
static int begin(store *st, char *err, size_t errlen) {
  int rc = SQLITE_DONE;
  if (!st->batching || sqlite3_get_autocommit(st->db))
    rc = step_fixed(st, S_BEGIN, err, errlen);
  if (rc == SQLITE_DONE && st->batching)
    rc = step_fixed(st, S_SAVEPOINT, err, errlen);
  return rc == SQLITE_DONE ? 0 : fail(st, rc, err, errlen, "BEGIN");
}

static int commit(store *st, int rc, char *err, size_t errlen) {
  if (st->batching) {
    /* SQLite may have rolled the whole transaction back on an error (a
     * full disk): the savepoint is gone with it. */
    if (sqlite3_get_autocommit(st->db))
      return rc;
    if (rc != 0)
      step_fixed(st, S_ROLLBACK_TO, err, errlen);
    int src = step_fixed(st, S_RELEASE, err, errlen);
    if (rc != 0)
      return rc;
    return src == SQLITE_DONE ? 0 : fail(st, src, err, errlen, "RELEASE");
  }
  int src = step_fixed(st, rc == 0 ? S_COMMIT : S_ROLLBACK, err, errlen);
  if (rc != 0) /* the first error's message stays in err */
    return rc;
  if (src != SQLITE_DONE) {
    fail(st, src, err, errlen, "COMMIT");
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return DR_ESTORE;
  }
  return 0;
}

void store_batch_start(store *st) { st->batching = 1; }

int store_batch_commit(store *st, char *err, size_t errlen) {
  if (!st || !st->batching || sqlite3_get_autocommit(st->db))
    return 0;
  int rc = step_fixed(st, S_COMMIT, err, errlen);
  if (rc == SQLITE_DONE)
    return 0;
  fail(st, rc, err, errlen, "COMMIT");
  sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
  return DR_ESTORE;
}

int store_batch_stop(store *st, char *err, size_t errlen) {
  int rc = store_batch_commit(st, err, errlen);
  if (st)
    st->batching = 0;
  return rc;
}

static void bind_text(sqlite3_stmt *s, int i, const char *v) {
  if (v)
    sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(s, i);
}

static void bind_time(sqlite3_stmt *s, int i, double t) {
  if (t > 0)
    sqlite3_bind_double(s, i, t);
  else
    sqlite3_bind_null(s, i);
}

static void bind_code(sqlite3_stmt *s, int i, int code) {
  if (code >= 0)
    sqlite3_bind_int(s, i, code);
  else
    sqlite3_bind_null(s, i);
}

static void bind_i64(sqlite3_stmt *s, int i, long long v) {
  if (v > 0)
    sqlite3_bind_int64(s, i, v);
  else
    sqlite3_bind_null(s, i);
}

/* Steps a bound write statement to its end; with must_change, a statement
 * that changed no row is an error (a task or attempt never recorded). */
static int step_write(store *st, sqlite3_stmt *s, int must_change,
                      const char *what, char *err, size_t errlen) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return fail(st, rc, err, errlen, what);
  if (must_change && sqlite3_changes(st->db) == 0) {
    snprintf(err, errlen, "run store %s: %s: no such row", st->path, what);
    return DR_ESTORE;
  }
  return 0;
}

/* Rows in state "waiting" for run id's tasks, inside an open
 * transaction. */
static int insert_tasks(store *st, const char *id, const char *const *tasks,
                        size_t n_tasks, char *err, size_t errlen) {
  for (size_t i = 0; i < n_tasks; i++) {
    sqlite3_stmt *s = stmt(st, S_TASK_INSERT, err, errlen);
    if (!s)
      return DR_ESTORE;
    bind_text(s, 1, id);
    bind_text(s, 2, tasks[i]);
    int rc = step_write(st, s, 1, "recording a task", err, errlen);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int store_run_begin(store *st, const char *id, const char *dag,
                    const char *dag_file, const char *run_dir, double started,
                    const char *params_json, const char *trigger,
                    double logical_date, const char *dag_sha256,
                    const char *const *tasks, size_t n_tasks, char *err,
                    size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_RUN_INSERT, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
    goto out;
  }
  bind_text(s, 1, id);
  bind_text(s, 2, dag);
  bind_text(s, 3, dag_file);
  bind_text(s, 4, run_dir);
  bind_time(s, 5, started);
  bind_text(s, 6, params_json);
  bind_text(s, 7, trigger);
  bind_time(s, 8, logical_date);
  bind_text(s, 9, dag_sha256);
  if ((rc = step_write(st, s, 1, "recording a run", err, errlen)) != 0)
    goto out;
  rc = insert_tasks(st, id, tasks, n_tasks, err, errlen);
out:
  return commit(st, rc, err, errlen);
}

int store_tasks_add(store *st, const char *run_id, const char *const *tasks,
                    size_t n_tasks, char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  rc = insert_tasks(st, run_id, tasks, n_tasks, err, errlen);
  return commit(st, rc, err, errlen);
}

/* Drops run id's pool leases and its tasks' wait notes, inside an open
 * transaction. */
static int run_release(store *st, const char *id, char *err, size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_LEASES_DROP_RUN, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, id);
  int rc = step_write(st, s, 0, "releasing a run's pools", err, errlen);
  if (rc != 0 || !(s = stmt(st, S_TASKS_WAIT_CLEAR, err, errlen)))
    return rc ? rc : DR_ESTORE;
  bind_text(s, 1, id);
  return step_write(st, s, 0, "clearing a run's waits", err, errlen);
}

int store_run_finish(store *st, const char *id, const char *state,
                     double finished, char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_RUN_FINISH, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, id);
    bind_text(s, 2, state);
    bind_time(s, 3, finished);
    rc = step_write(st, s, 1, "recording the end of a run", err, errlen);
  }
  /* A run that is over holds no pool and waits for nothing. */
  if (rc == 0)
    rc = run_release(st, id, err, errlen);
  return commit(st, rc, err, errlen);
}

/* Binds z, NULL when it is NULL or empty (an identity not known). */
static void bind_text_or_null(sqlite3_stmt *s, int i, const char *z) {
  bind_text(s, i, z && *z ? z : NULL);
}

int store_run_claim(store *st, const char *id, const owner *me, int old_pid,
                    long long old_start, char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_RUN_CLAIM, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, id);
    sqlite3_bind_int(s, 2, me->pid);
    bind_i64(s, 3, me->start);
    bind_i64(s, 4, old_pid);
    bind_i64(s, 5, old_start);
    bind_text_or_null(s, 6, me->host);
    bind_text_or_null(s, 7, me->boot);
    bind_text_or_null(s, 8, me->pidns);
    sqlite3_bind_double(s, 9, clock_wall());
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
      rc = fail(st, rc, err, errlen, "claiming a run");
    } else if (sqlite3_changes(st->db) == 0) {
      snprintf(err, errlen, "run %s was claimed by another dagrun", id);
      rc = DR_EBUSY;
    } else {
      rc = 0;
    }
  }
  return commit(st, rc, err, errlen);
}

int store_run_guard(store *st, const char *id, int pid, int guard,
                    long long guard_start, char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_RUN_GUARD, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, id);
    sqlite3_bind_int(s, 2, pid);
    sqlite3_bind_int(s, 3, guard);
    bind_i64(s, 4, guard_start);
    rc = step_write(st, s, 0, "recording a run's guard", err, errlen);
  }
  return commit(st, rc, err, errlen);
}

int store_run_beat(store *st, const char *id, int pid, double now, char *err,
                   size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_RUN_BEAT, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, id);
    sqlite3_bind_int(s, 2, pid);
    sqlite3_bind_double(s, 3, now);
    rc = step_write(st, s, 0, "recording that the run's dagrun lives", err,
                    errlen);
  }
  return commit(st, rc, err, errlen);
}

/* The task update inside an open transaction. */
static int task_set(store *st, const char *run_id, const char *task,
                    const store_task_update *u, char *err, size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_TASK_SET, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  bind_text(s, 3, u->state);
  sqlite3_bind_int(s, 4, u->attempts);
  bind_code(s, 5, u->exit_code);
  bind_text(s, 6, u->error);
  bind_time(s, 7, u->started);
  bind_time(s, 8, u->finished);
  bind_text(s, 9, u->outputs_json);
  bind_text(s, 10, u->fingerprint);
  bind_text(s, 11, u->cached_from);
  return step_write(st, s, 1, "recording a task's state", err, errlen);
}

int store_task_set(store *st, const char *run_id, const char *task,
                   const store_task_update *u, char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  rc = task_set(st, run_id, task, u, err, errlen);
  return commit(st, rc, err, errlen);
}

int store_attempt_begin(store *st, const char *run_id, const char *task, int n,
                        const char *log_path, double started, char *err,
                        size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_ATT_INSERT, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
    goto out;
  }
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  sqlite3_bind_int(s, 3, n);
  bind_time(s, 4, started);
  bind_text(s, 5, log_path);
  if ((rc = step_write(st, s, 1, "recording an attempt", err, errlen)) != 0)
    goto out;
  if (!(s = stmt(st, S_TASK_RUNNING, err, errlen))) {
    rc = DR_ESTORE;
    goto out;
  }
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  sqlite3_bind_int(s, 3, n);
  bind_time(s, 4, started);
  rc = step_write(st, s, 1, "recording a task's state", err, errlen);
out:
  return commit(st, rc, err, errlen);
}

int store_attempt_pid(store *st, const char *run_id, const char *task, int n,
                      int pid, long long pid_start, char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_ATT_PID, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, run_id);
    bind_text(s, 2, task);
    sqlite3_bind_int(s, 3, n);
    sqlite3_bind_int(s, 4, pid);
    bind_i64(s, 5, pid_start);
    rc = step_write(st, s, 1, "recording an attempt's pid", err, errlen);
  }
  return commit(st, rc, err, errlen);
}

int store_attempt_end(store *st, const char *run_id, const char *task, int n,
                      const char *state, int exit_code, const char *error,
                      double finished, const store_task_update *task_u,
                      char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_ATT_END, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, run_id);
    bind_text(s, 2, task);
    sqlite3_bind_int(s, 3, n);
    bind_text(s, 4, state);
    bind_code(s, 5, exit_code);
    bind_text(s, 6, error);
    bind_time(s, 7, finished);
    rc = step_write(st, s, 1, "recording the end of an attempt", err, errlen);
  }
  if (rc == 0 && task_u)
    rc = task_set(st, run_id, task, task_u, err, errlen);
  return commit(st, rc, err, errlen);
}

/* Reading: column i of the current row into obj under key, by type; a
 * NULL column adds nothing. json: the text is JSON, parsed. */
static void add_col(cJSON *obj, sqlite3_stmt *s, int i, const char *key,
                    int json) {
  switch (sqlite3_column_type(s, i)) {
  case SQLITE_NULL:
    return;
  case SQLITE_INTEGER:
  case SQLITE_FLOAT:
    cJSON_AddNumberToObject(obj, key, sqlite3_column_double(s, i));
    return;
  default: {
    const char *z = (const char *)sqlite3_column_text(s, i);
    cJSON *v = json && z ? cJSON_Parse(z) : NULL;
    if (v)
      cJSON_AddItemToObject(obj, key, v);
    else
      cJSON_AddStringToObject(obj, key, z ? z : "");
  }
  }
}

/* Steps s to its end, adding one object per row to arr (keys name the
 * columns in order; column json_col, or none when -1, holds JSON text).
 * 0, or -1 with err saying it failed while `what`. */
static int rows_into(store *st, sqlite3_stmt *s, cJSON *arr,
                     const char *const *keys, int nkeys, int json_col,
                     const char *what, char *err, size_t errlen) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < nkeys; i++)
      add_col(o, s, i, keys[i], i == json_col);
    cJSON_AddItemToArray(arr, o);
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) {
    fail(st, rc, err, errlen, what);
    return -1;
  }
  return 0;
}

/* ---- runs whose dagrun is gone ----
 *
 * A dagrun that dies (kill -9, a crash, a power cut) cannot record the end
 * of its run. Readers do it for it: before each read, a run recorded
 * "running" whose dagrun is gone is recorded "interrupted", its unfinished
 * tasks "cancelled" (its attempts are left as they are: `dagrun resume`
 * finds the workers of those still "running" and stops them). So every
 * reader (runs, status, logs --follow, the API and the dashboard, serve)
 * sees the same, without a `cancel` first.
 *
 * Gone means: the recorded pid no longer names a live process that started
 * at the recorded time (a reused pid has another start time). A live dagrun,
 * however slow, is never taken for gone. The write is conditional on the
 * run still being "running" with the same dagrun: a resume that claimed it
 * meanwhile (store_run_claim) is left alone. A reader that cannot write
 * (a read-only store, a lock held too long) still shows the run
 * interrupted and leaves the write to the next reader. */

/* The owner (owner.h) in columns k to k+7 of a row of s (orch_pid,
 * orch_start, orch_host, orch_boot, orch_pidns, orch_guard,
 * orch_guard_start, orch_beat, or their like); its strings valid until s steps
 * again. Only the recorded owner decides. The run's own start time must not: a
 * run begun before a reboot and resumed after it is owned by the live
 * resume, whose claim (store_run_claim) replaced the owner but not the
 * run's start. */
static void owner_from_row(sqlite3_stmt *s, int k, owner *o) {
  o->pid = sqlite3_column_int(s, k);
  o->start = sqlite3_column_int64(s, k + 1);
  o->host = (const char *)sqlite3_column_text(s, k + 2);
  o->boot = (const char *)sqlite3_column_text(s, k + 3);
  o->pidns = (const char *)sqlite3_column_text(s, k + 4);
  o->guard = sqlite3_column_int(s, k + 5);
  o->guard_start = sqlite3_column_int64(s, k + 6);
  o->beat = sqlite3_column_double(s, k + 7);
}

/* Whether the run of owner o is over for its readers: its dagrun is gone
 * (its guard may still be stopping its attempts). A dagrun elsewhere is
 * never taken for gone. */
static int owner_gone(const owner *o) {
  owner_state w = owner_judge(o);
  return w == OWNER_GONE || w == OWNER_STOPPING;
}

/* Records run id "interrupted" if it is still "running" under dagrun
 * pid/start; 0 or DR_ESTORE. */
static int run_gone(store *st, const char *id, int pid, long long start,
                    char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_RUN_GONE, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, id);
    sqlite3_bind_int(s, 2, pid);
    bind_i64(s, 3, start);
    rc = step_write(st, s, 0, "recording a run interrupted", err, errlen);
  }
  if (rc == 0 && sqlite3_changes(st->db) > 0) {
    if (!(s = stmt(st, S_TASKS_GONE, err, errlen))) {
      rc = DR_ESTORE;
    } else {
      bind_text(s, 1, id);
      rc = step_write(st, s, 0, "recording a run's tasks cancelled", err,
                      errlen);
    }
  }
  return commit(st, rc, err, errlen);
}

/* Records interrupted the runs (all, or those whose id starts with
 * prefix) whose dagrun is gone. Failures are left to the next reader. */
static void reap_gone(store *st, const char *prefix) {
  char err[512];
  sqlite3_stmt *s = stmt(st, S_RUNS_OWNED, err, sizeof err);
  if (!s)
    return;
  bind_text(s, 1, prefix);
  cJSON *gone = cJSON_CreateArray();
  while (sqlite3_step(s) == SQLITE_ROW) {
    owner o;
    owner_from_row(s, 1, &o);
    if (!owner_gone(&o))
      continue;
    cJSON *g = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "id", (const char *)sqlite3_column_text(s, 0));
    cJSON_AddNumberToObject(g, "pid", o.pid);
    cJSON_AddNumberToObject(g, "start", (double)o.start);
    cJSON_AddItemToArray(gone, g);
  }
  sqlite3_reset(s);
  const cJSON *g;
  cJSON_ArrayForEach(g, gone) {
    run_gone(st, cJSON_GetObjectItem(g, "id")->valuestring,
             (int)cJSON_GetObjectItem(g, "pid")->valuedouble,
             (long long)cJSON_GetObjectItem(g, "start")->valuedouble, err,
             sizeof err);
  }
  cJSON_Delete(gone);
}

/* A run object as read: shown "interrupted" if its dagrun is gone though
 * the write failed; an interrupted run gets a "note" that says what to
 * do. */
/* The tags column's JSON text as an array of strings ([] for none). */
static void tags_as_array(cJSON *run) {
  const cJSON *t = cJSON_GetObjectItem(run, "tags");
  cJSON *arr = cJSON_IsString(t) ? cJSON_Parse(t->valuestring) : NULL;
  if (!cJSON_IsArray(arr)) {
    cJSON_Delete(arr);
    arr = cJSON_CreateArray();
  }
  if (cJSON_GetObjectItem(run, "tags"))
    cJSON_ReplaceItemInObject(run, "tags", arr);
  else
    cJSON_AddItemToObject(run, "tags", arr);
}

/* The note of a run whose dagrun runs elsewhere (owner.h): shown
 * running, as it may well be. */
static void note_elsewhere(cJSON *run, const owner *o) {
  char where[320];
  owner_where(o, where, sizeof where);
  char *note = xasprintf("dagrun (pid %d) runs it %s: whether it is still "
                         "alive cannot be seen from here",
                         o->pid, where);
  cJSON_AddStringToObject(run, "note", note);
  free(note);
}

static void annotate_run(cJSON *run) {
  tags_as_array(run);
  cJSON *state = cJSON_GetObjectItem(run, "state");
  const cJSON *id = cJSON_GetObjectItem(run, "id");
  if (!cJSON_IsString(state) || !cJSON_IsString(id))
    return;
  owner o;
  owner_of_run(run, &o);
  if (store_state_active(state->valuestring) && o.pid > 0) {
    owner_state w = owner_judge(&o);
    if (w == OWNER_ELSEWHERE) {
      note_elsewhere(run, &o);
      return;
    }
    if (w != OWNER_ALIVE)
      cJSON_SetValuestring(state, "interrupted");
  }
  if (strcmp(state->valuestring, "interrupted") != 0)
    return;
  char who[48] = "its dagrun";
  if (o.pid > 0)
    snprintf(who, sizeof who, "dagrun (pid %d)", o.pid);
  char *note = xasprintf("%s is gone: `dagrun resume %s` goes on with the run",
                         who, id->valuestring);
  cJSON_AddStringToObject(run, "note", note);
  free(note);
}

cJSON *store_runs(store *st, const char *dag, const char *state, int limit,
                  char *err, size_t errlen) {
  return store_runs_tagged(st, dag, state, NULL, limit, err, errlen);
}

cJSON *store_runs_tagged(store *st, const char *dag, const char *state,
                         const char *tag, int limit, char *err, size_t errlen) {
  static const char *const keys[] = {"id",
                                     "dag",
                                     "dag_file",
                                     "run_dir",
                                     "state",
                                     "started",
                                     "finished",
                                     "tasks_total",
                                     "tasks_succeeded",
                                     "trigger",
                                     "logical_date",
                                     "orch_pid",
                                     "orch_start",
                                     "tasks_cached",
                                     "cached_from",
                                     "waiting",
                                     "tags",
                                     "user_note",
                                     "orch_host",
                                     "orch_boot",
                                     "orch_pidns",
                                     "orch_guard",
                                     "orch_guard_start",
                                     "orch_beat"};
  reap_gone(st, NULL);
  sqlite3_stmt *s = stmt(st, S_RUNS_LIST, err, errlen);
  if (!s)
    return NULL;
  bind_text(s, 1, dag);
  sqlite3_bind_int(s, 2, limit > 0 ? limit : -1);
  bind_text(s, 3, state);
  bind_text(s, 4, tag);
  cJSON *arr = cJSON_CreateArray();
  if (rows_into(st, s, arr, keys, (int)(sizeof keys / sizeof keys[0]), -1,
                "listing runs", err, errlen) != 0) {
    cJSON_Delete(arr);
    return NULL;
  }
  cJSON *r;
  cJSON_ArrayForEach(r, arr) annotate_run(r);
  store_runs_trigger_info(st, arr);
  return arr;
}

static const char *const att_keys[] = {"n",         "pid",   "state",
                                       "exit_code", "error", "started",
                                       "finished",  "log",   "pid_start"};

/* The attempts of a task, in order, as an array; NULL on error. */
static cJSON *attempts_of(store *st, const char *run_id, const char *task,
                          char *err, size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_ATTS_OF, err, errlen);
  if (!s)
    return NULL;
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  cJSON *arr = cJSON_CreateArray();
  if (rows_into(st, s, arr, att_keys, 9, -1, "reading attempts", err,
                errlen) != 0) {
    cJSON_Delete(arr);
    return NULL;
  }
  return arr;
}

/* Reads are one transaction each, so a run, its tasks and their attempts
 * are one consistent snapshot while a writer goes on (WAL). */
cJSON *store_run(store *st, const char *id_prefix, int *rc, char *err,
                 size_t errlen) {
  static const char *const keys[] = {
      "id",         "dag",        "dag_file",
      "run_dir",    "state",      "started",
      "finished",   "params",     "orch_pid",
      "orch_start", "trigger",    "logical_date",
      "dag_sha256", "waiting",    "tags",
      "user_note",  "orch_host",  "orch_boot",
      "orch_pidns", "orch_guard", "orch_guard_start",
      "orch_beat"};
  static const char *const task_keys[] = {
      "name",    "state",    "attempts", "exit_code",   "error",
      "started", "finished", "outputs",  "fingerprint", "cached_from",
      "waiting"};
  cJSON *run = NULL;
  *rc = DR_ESTORE;
  reap_gone(st, id_prefix);
  /* Inside a batch's transaction the read is already one snapshot. */
  int own = sqlite3_get_autocommit(st->db);
  if (own && exec_sql(st, "BEGIN", err, errlen) != 0)
    return NULL;
  sqlite3_stmt *s = stmt(st, S_RUN_FIND, err, errlen);
  if (!s)
    goto out;
  bind_text(s, 1, id_prefix);
  cJSON *found = cJSON_CreateArray();
  if (rows_into(st, s, found, keys, (int)(sizeof keys / sizeof keys[0]), 7,
                "finding a run", err, errlen) != 0) {
    cJSON_Delete(found);
    goto bad;
  }
  int n = cJSON_GetArraySize(found);
  run = n > 0 ? cJSON_DetachItemFromArray(found, 0) : NULL;
  cJSON_Delete(found);
  if (n == 0) {
    snprintf(err, errlen, "no run '%s' in %s", id_prefix, st->path);
    *rc = DR_ENOENT;
    goto out;
  }
  if (n > 1) {
    snprintf(err, errlen, "'%s' names more than one run; give more of the id",
             id_prefix);
    *rc = DR_EINVAL;
    goto bad;
  }
  char *id = xstrdup(cJSON_GetObjectItem(run, "id")->valuestring);
  cJSON *tasks = cJSON_AddArrayToObject(run, "tasks");
  if (!(s = stmt(st, S_TASKS_OF, err, errlen))) {
    free(id);
    goto bad;
  }
  bind_text(s, 1, id);
  if (rows_into(st, s, tasks, task_keys, 11, 7, "reading tasks", err,
                errlen) != 0) {
    free(id);
    goto bad;
  }
  for (cJSON *t = tasks->child; t; t = t->next) {
    cJSON *a = attempts_of(st, id, cJSON_GetObjectItem(t, "name")->valuestring,
                           err, errlen);
    if (!a) {
      free(id);
      goto bad;
    }
    cJSON_AddItemToObject(t, "attempt_list", a);
  }
  cJSON *approvals = store_approvals(st, id, NULL, 0, err, errlen);
  free(id);
  if (!approvals)
    goto bad;
  cJSON_AddItemToObject(run, "approvals", approvals);
  annotate_run(run);
  store_runs_trigger_info(st, run);
  *rc = 0;
  goto out;
bad:
  cJSON_Delete(run);
  run = NULL;
out:
  if (own)
    sqlite3_exec(st->db, "COMMIT", NULL, NULL, NULL);
  if (*rc != 0) {
    cJSON_Delete(run);
    run = NULL;
  }
  return run;
}

cJSON *store_attempt(store *st, const char *run_id, const char *task, int n,
                     int *rc, char *err, size_t errlen) {
  *rc = DR_ESTORE;
  sqlite3_stmt *s = stmt(st, S_TASK_EXISTS, err, errlen);
  if (!s)
    return NULL;
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  int src = sqlite3_step(s);
  sqlite3_reset(s);
  if (src != SQLITE_ROW && src != SQLITE_DONE) {
    fail(st, src, err, errlen, "finding a task");
    return NULL;
  }
  if (src == SQLITE_DONE) {
    snprintf(err, errlen, "run %s has no task '%s'", run_id, task);
    *rc = DR_ENOENT;
    return NULL;
  }
  cJSON *all = attempts_of(st, run_id, task, err, errlen);
  if (!all)
    return NULL;
  int count = cJSON_GetArraySize(all);
  cJSON *pick = NULL;
  if (n <= 0 && count > 0)
    pick = cJSON_DetachItemFromArray(all, count - 1);
  for (int i = 0; n > 0 && i < count && !pick; i++) {
    cJSON *a = cJSON_GetArrayItem(all, i);
    if ((int)cJSON_GetObjectItem(a, "n")->valuedouble == n)
      pick = cJSON_DetachItemFromArray(all, i);
  }
  cJSON_Delete(all);
  if (!pick) {
    if (n > 0)
      snprintf(err, errlen, "task '%s' of run %s has no attempt %d", task,
               run_id, n);
    else
      snprintf(err, errlen, "task '%s' of run %s has not started yet", task,
               run_id);
    *rc = DR_ENOENT;
    return NULL;
  }
  *rc = 0;
  return pick;
}

int store_cache_find(store *st, const char *fingerprint,
                     int (*usable)(void *ud, const char *run_dir,
                                   const char *task, const cJSON *outputs),
                     void *ud, char **run_id, char **out_dir, cJSON **outputs,
                     char *err, size_t errlen) {
  *run_id = *out_dir = NULL;
  *outputs = NULL;
  sqlite3_stmt *s = stmt(st, S_CACHE_FIND, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, fingerprint);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *rid = (const char *)sqlite3_column_text(s, 0);
    const char *name = (const char *)sqlite3_column_text(s, 1);
    const char *oj = (const char *)sqlite3_column_text(s, 2);
    const char *dir = (const char *)sqlite3_column_text(s, 3);
    cJSON *o = oj ? cJSON_Parse(oj) : cJSON_CreateObject();
    if (!o || !cJSON_IsObject(o) || !rid || !name || !dir ||
        !usable(ud, dir, name, o)) {
      cJSON_Delete(o);
      continue;
    }
    char *task_dir = path_join(dir, name);
    *out_dir = path_join(task_dir, "out");
    free(task_dir);
    *run_id = xstrdup(rid);
    *outputs = o;
    sqlite3_reset(s);
    return 1;
  }
  sqlite3_reset(s);
  return rc == SQLITE_DONE ? 0
                           : fail(st, rc, err, errlen, "looking up the cache");
}

int store_alert_record(store *st, const char *run_id,
                       const store_alert_delivery *d, char *err,
                       size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_ALERT_INSERT, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, run_id);
    sqlite3_bind_double(s, 2, d->time);
    bind_text(s, 3, d->event);
    bind_text(s, 4, d->task);
    bind_i64(s, 5, d->attempt);
    sqlite3_bind_int(s, 6, d->try_n);
    bind_i64(s, 7, d->http_status);
    bind_text(s, 8, d->error);
    sqlite3_bind_double(s, 9, d->duration_s);
    bind_text(s, 10, d->result);
    bind_text(s, 11, d->endpoint);
    rc = step_write(st, s, 1, "recording an alert delivery", err, errlen);
  }
  return commit(st, rc, err, errlen);
}

cJSON *store_alerts(store *st, const char *run_id, char *err, size_t errlen) {
  static const char *const keys[] = {"time",     "event",  "task",
                                     "attempt",  "try",    "status",
                                     "error",    "duration_s", "result",
                                     "endpoint"};
  sqlite3_stmt *s = stmt(st, S_ALERTS_OF, err, errlen);
  if (!s)
    return NULL;
  bind_text(s, 1, run_id);
  cJSON *arr = cJSON_CreateArray();
  if (rows_into(st, s, arr, keys, 10, -1, "reading alert deliveries", err,
                errlen) != 0) {
    cJSON_Delete(arr);
    return NULL;
  }
  return arr;
}

int store_cron_get(store *st, const char *dag, long long *last_fire,
                   char *err, size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_CRON_GET, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, dag);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW)
    *last_fire = sqlite3_column_int64(s, 0);
  sqlite3_reset(s);
  if (rc == SQLITE_ROW)
    return 0;
  if (rc == SQLITE_DONE)
    return DR_ENOENT;
  return fail(st, rc, err, errlen, "reading a cron trigger's state");
}

int store_cron_set(store *st, const char *dag, long long last_fire,
                   double now, char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_CRON_SET, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, dag);
    sqlite3_bind_int64(s, 2, last_fire);
    sqlite3_bind_double(s, 3, now);
    rc = step_write(st, s, 1, "recording a cron trigger's state", err, errlen);
  }
  return commit(st, rc, err, errlen);
}

/* ---- tags and notes ---- */

int store_tag_check(const char *tag, char *err, size_t errlen) {
  size_t n = strlen(tag);
  if (n == 0 || n > STORE_TAG_MAX) {
    snprintf(err, errlen, "tag '%.80s': 1 to %d characters", tag,
             STORE_TAG_MAX);
    return DR_EINVAL;
  }
  for (const char *p = tag; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          (*p >= '0' && *p <= '9') || strchr("_-.:=/+", *p))) {
      snprintf(err, errlen,
               "tag '%.80s': letters, digits and _ - . : = / + only", tag);
      return DR_EINVAL;
    }
  return 0;
}

int store_note_check(const char *note, char *err, size_t errlen) {
  if (strlen(note) > STORE_NOTE_MAX) {
    snprintf(err, errlen, "note of %zu bytes: at most %d", strlen(note),
             STORE_NOTE_MAX);
    return DR_EINVAL;
  }
  for (const unsigned char *p = (const unsigned char *)note; *p; p++)
    if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f) {
      snprintf(err, errlen, "note: control character 0x%02x", *p);
      return DR_EINVAL;
    }
  /* Every answer that shows the note is JSON, which is UTF-8. */
  size_t n = strlen(note), bad = utf8_bad_at(note, n);
  if (bad < n) {
    snprintf(err, errlen,
             "note: invalid UTF-8 at byte %zu (byte 0x%02x): a note is "
             "UTF-8 text",
             bad, (unsigned char)note[bad]);
    return DR_EINVAL;
  }
  return 0;
}

/* tags (an array) with add's tags appended where missing and remove's
 * taken out; DR_EINVAL for a bad tag or too many. */
static int tags_edit(cJSON *tags, const char *const *add, size_t n_add,
                     const char *const *remove, size_t n_remove, char *err,
                     size_t errlen) {
  for (size_t i = 0; i < n_add + n_remove; i++) {
    const char *t = i < n_add ? add[i] : remove[i - n_add];
    int rc = store_tag_check(t, err, errlen);
    if (rc)
      return rc;
    int at = -1, k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, tags) {
      if (cJSON_IsString(x) && strcmp(x->valuestring, t) == 0)
        at = k;
      k++;
    }
    if (i >= n_add && at >= 0)
      cJSON_DeleteItemFromArray(tags, at);
    else if (i < n_add && at < 0)
      cJSON_AddItemToArray(tags, cJSON_CreateString(t));
  }
  if (cJSON_GetArraySize(tags) > STORE_TAGS_MAX) {
    snprintf(err, errlen, "at most %d tags a run", STORE_TAGS_MAX);
    return DR_EINVAL;
  }
  return 0;
}

int store_run_tag(store *st, const char *id, const char *const *add,
                  size_t n_add, const char *const *remove, size_t n_remove,
                  cJSON **tags_out, char *err, size_t errlen) {
  *tags_out = NULL;
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  cJSON *tags = NULL;
  sqlite3_stmt *s = stmt(st, S_RUN_TAGS_GET, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
    goto out;
  }
  bind_text(s, 1, id);
  int step = sqlite3_step(s);
  if (step == SQLITE_ROW) {
    const char *text = (const char *)sqlite3_column_text(s, 0);
    tags = text ? cJSON_Parse(text) : NULL;
  }
  sqlite3_reset(s);
  if (step != SQLITE_ROW) {
    rc = step == SQLITE_DONE ? DR_ENOENT : fail(st, step, err, errlen, "tags");
    if (step == SQLITE_DONE)
      snprintf(err, errlen, "no run '%s'", id);
    goto out;
  }
  if (!cJSON_IsArray(tags)) {
    cJSON_Delete(tags);
    tags = cJSON_CreateArray();
  }
  if ((rc = tags_edit(tags, add, n_add, remove, n_remove, err, errlen)))
    goto out;
  char *text = cJSON_PrintUnformatted(tags);
  if (!(s = stmt(st, S_RUN_TAGS_SET, err, errlen))) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, id);
    bind_text(s, 2, text);
    rc = step_write(st, s, 1, "recording a run's tags", err, errlen);
  }
  free(text);
out:
  rc = commit(st, rc, err, errlen);
  if (rc == 0)
    *tags_out = tags;
  else
    cJSON_Delete(tags);
  return rc;
}

int store_run_set_note(store *st, const char *id, const char *note, char *err,
                       size_t errlen) {
  int rc = note ? store_note_check(note, err, errlen) : 0;
  if (rc || (rc = begin(st, err, errlen)))
    return rc;
  sqlite3_stmt *s = stmt(st, S_RUN_NOTE_SET, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, id);
    bind_text(s, 2, note && *note ? note : NULL);
    rc = step_write(st, s, 0, "recording a run's note", err, errlen);
    if (rc == 0 && sqlite3_changes(st->db) == 0) {
      snprintf(err, errlen, "no run '%s'", id);
      rc = DR_ENOENT;
    }
  }
  return commit(st, rc, err, errlen);
}

/* ---- machine-wide pools and run admission ----
 *
 * Both are decided inside one BEGIN IMMEDIATE transaction, so that two
 * dagruns that ask at once are served one after the other: the second
 * sees what the first took. A holder whose dagrun is gone, and its
 * attempts with it (owner_judge: the test the readers use for runs),
 * holds nothing. */

/* Sets what task waits for (NULL: nothing); writes only on a change, so
 * that polling a full pool does not commit a write each time. */
static int task_waiting(store *st, const char *run_id, const char *task,
                        const char *why, char *err, size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_TASK_WAITING, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  bind_text(s, 3, why);
  return step_write(st, s, 0, "recording what a task waits for", err, errlen);
}

/* What holds the lease in a row of LEASES_OF (OWNER_GONE: nothing). Its holder
 * is judged as its run's owner (owner.h: where it runs, and its guard) while it
 * is that owner; a holder the run has since been resumed from is judged by its
 * pid alone (a resume waited for its attempts). */
static owner_state lease_state(sqlite3_stmt *s) {
  owner o = {0};
  if (sqlite3_column_int(s, 10))
    owner_from_row(s, 2, &o);
  o.pid = sqlite3_column_int(s, 2);
  o.start = sqlite3_column_int64(s, 3);
  return owner_judge(&o);
}

/* Counts the live leases of pool other than (run_id, task), dropping the
 * dead holders'; *first is the oldest live holder ("run R task T", caller
 * frees) or NULL. 0 or DR_ESTORE. */
static int leases_count(store *st, const char *pool, const char *run_id,
                        const char *task, int *n, char **first, char *err,
                        size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_LEASES_OF, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, pool);
  cJSON *dead = cJSON_CreateArray();
  int rc;
  *n = 0;
  *first = NULL;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *r = (const char *)sqlite3_column_text(s, 0);
    const char *t = (const char *)sqlite3_column_text(s, 1);
    if (strcmp(r, run_id) == 0 && strcmp(t, task) == 0)
      continue;
    int w = lease_state(s);
    if (w == OWNER_GONE) {
      cJSON *d = cJSON_CreateArray();
      cJSON_AddItemToArray(d, cJSON_CreateString(r));
      cJSON_AddItemToArray(d, cJSON_CreateString(t));
      cJSON_AddItemToArray(dead, d);
      continue;
    }
    if ((*n)++ == 0)
      *first = xasprintf("run %s task %s%s", r, t,
                         w == OWNER_STOPPING
                             ? ", whose dead dagrun's attempts are being "
                               "stopped"
                             : "");
  }
  sqlite3_reset(s);
  rc = rc == SQLITE_DONE ? 0 : fail(st, rc, err, errlen, "reading leases");
  const cJSON *d;
  cJSON_ArrayForEach(d, dead) {
    if (rc != 0 || !(s = stmt(st, S_LEASE_DROP, err, errlen))) {
      rc = rc ? rc : DR_ESTORE;
      break;
    }
    bind_text(s, 1, cJSON_GetArrayItem(d, 0)->valuestring);
    bind_text(s, 2, cJSON_GetArrayItem(d, 1)->valuestring);
    rc = step_write(st, s, 0, "freeing a dead dagrun's lease", err, errlen);
  }
  cJSON_Delete(dead);
  if (rc != 0) {
    free(*first);
    *first = NULL;
  }
  return rc;
}

int store_lease_acquire(store *st, const char *pool, int size,
                        const char *run_id, const char *task, int pid,
                        long long pid_start, double now, char **why,
                        char *err, size_t errlen) {
  *why = NULL;
  int rc = begin(st, err, errlen), n = 0;
  char *first = NULL;
  if (rc)
    return rc;
  if ((rc = leases_count(st, pool, run_id, task, &n, &first, err, errlen)))
    goto out;
  if (n >= size) {
    *why = xasprintf("pool %s (held by %s)", pool, first);
    rc = task_waiting(st, run_id, task, *why, err, errlen);
    goto out;
  }
  sqlite3_stmt *s = stmt(st, S_LEASE_ADD, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
    goto out;
  }
  bind_text(s, 1, pool);
  bind_text(s, 2, run_id);
  bind_text(s, 3, task);
  sqlite3_bind_int(s, 4, pid);
  bind_i64(s, 5, pid_start);
  bind_time(s, 6, now);
  if ((rc = step_write(st, s, 1, "leasing a pool slot", err, errlen)) == 0)
    rc = task_waiting(st, run_id, task, NULL, err, errlen);
out:
  free(first);
  rc = commit(st, rc, err, errlen);
  if (rc != 0) {
    free(*why);
    *why = NULL;
    return rc;
  }
  return *why ? 0 : 1;
}

int store_lease_release(store *st, const char *run_id, const char *task,
                        char *err, size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = stmt(st, S_LEASE_DROP, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
  } else {
    bind_text(s, 1, run_id);
    bind_text(s, 2, task);
    rc = step_write(st, s, 0, "releasing a pool slot", err, errlen);
  }
  return commit(st, rc, err, errlen);
}

/* Counts the runs of dag other than id that come before it: those
 * "running" and those "queued" earlier than `started` (FIFO among the
 * waiting), each with a live dagrun. *first names the first of them
 * (caller frees). 0 or DR_ESTORE. */
static int runs_ahead(store *st, const char *dag, const char *id,
                      double started, int *n, char **first, char *err,
                      size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_RUNS_ACTIVE, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, dag);
  bind_text(s, 2, id);
  /* An interrupted run holds its place only while its dead dagrun's guard
   * stops its attempts, within their kill_grace of its death (its last
   * heartbeat): the day-old ones are not judged again at every poll. */
  sqlite3_bind_double(s, 3, clock_wall() - 86400);
  int rc;
  *n = 0;
  *first = NULL;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const char *oid = (const char *)sqlite3_column_text(s, 0);
    const char *ostate = (const char *)sqlite3_column_text(s, 1);
    int queued = strcmp(ostate, "queued") == 0;
    double ostarted = sqlite3_column_double(s, 10);
    owner o;
    owner_from_row(s, 2, &o);
    /* An interrupted run's attempts may still be stopping (its guard
     * lives): its place is held until they are gone. One recorded
     * interrupted elsewhere was judged gone there. */
    owner_state w = owner_judge(&o);
    if (w == OWNER_GONE ||
        (w == OWNER_ELSEWHERE && strcmp(ostate, "interrupted") == 0))
      continue;
    if (queued && (ostarted > started ||
                   (ostarted == started && strcmp(oid, id) > 0)))
      continue;
    if ((*n)++ == 0)
      *first = xstrdup(oid);
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) {
    free(*first);
    *first = NULL;
    return fail(st, rc, err, errlen, "counting a DAG's runs");
  }
  return 0;
}

/* Our run's start time into *started. */
static int run_started(store *st, const char *id, double *started, char *err,
                       size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_RUN_STARTED, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, id);
  int rc = sqlite3_step(s);
  *started = rc == SQLITE_ROW ? sqlite3_column_double(s, 0) : 0;
  sqlite3_reset(s);
  if (rc == SQLITE_ROW)
    return 0;
  if (rc == SQLITE_DONE) {
    snprintf(err, errlen, "run store %s: no run %s", st->path, id);
    return DR_ESTORE;
  }
  return fail(st, rc, err, errlen, "reading a run");
}

int store_run_admit(store *st, const char *id, const char *dag, int max,
                    char **why, char *err, size_t errlen) {
  *why = NULL;
  double started;
  int n = 0, rc = begin(st, err, errlen);
  char *first = NULL;
  if (rc)
    return rc;
  if ((rc = run_started(st, id, &started, err, errlen)) != 0 ||
      (rc = runs_ahead(st, dag, id, started, &n, &first, err, errlen)) != 0)
    goto out;
  if (n >= max)
    *why = xasprintf("max_active_runs %d reached (run %s)", max, first);
  sqlite3_stmt *s = stmt(st, S_RUN_ADMIT, err, errlen);
  if (!s) {
    rc = DR_ESTORE;
    goto out;
  }
  bind_text(s, 1, id);
  bind_text(s, 2, *why ? "queued" : "running");
  bind_text(s, 3, *why);
  rc = step_write(st, s, 0, "recording a run queued or admitted", err, errlen);
out:
  free(first);
  rc = commit(st, rc, err, errlen);
  if (rc != 0) {
    free(*why);
    *why = NULL;
    return rc;
  }
  return *why ? 0 : 1;
}

/* ---- for the store's other modules (store_impl.h) ---- */

sqlite3 *store_sqlite(store *st) { return st->db; }

int store_write_begin(store *st, char *err, size_t errlen) {
  return begin(st, err, errlen);
}

int store_write_end(store *st, int rc, char *err, size_t errlen) {
  return commit(st, rc, err, errlen);
}

void store_bind_text(sqlite3_stmt *s, int i, const char *v) {
  bind_text(s, i, v);
}

sqlite3_stmt *store_prep(store *st, const char *sql, char *err, size_t errlen) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) {
    fail(st, rc, err, errlen, "preparing a statement");
    sqlite3_finalize(s);
    return NULL;
  }
  return s;
}

int store_sql_fail(store *st, int rc, char *err, size_t errlen,
                   const char *what) {
  return fail(st, rc, err, errlen, what);
}

/* ---- approvals ---- */

cJSON *store_approvals(store *st, const char *run_id, const char *task, int n,
                       char *err, size_t errlen) {
  static const char *const keys[] = {"decision", "by",   "via",    "time",
                                     "reason",   "task", "attempt"};
  sqlite3_stmt *s = stmt(st, S_APPROVAL_GET, err, errlen);
  if (!s)
    return NULL;
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  sqlite3_bind_int(s, 3, n);
  cJSON *arr = cJSON_CreateArray();
  if (rows_into(st, s, arr, keys, 7, -1, "reading approvals", err, errlen) !=
      0) {
    cJSON_Delete(arr);
    return NULL;
  }
  return arr;
}

/* The task's state and attempts, in *state (caller frees) and *attempts;
 * DR_ENOENT when the run has no such task. */
static int task_state_of(store *st, const char *run_id, const char *task,
                         char **state, int *attempts, char *err,
                         size_t errlen) {
  sqlite3_stmt *s = stmt(st, S_TASK_STATE, err, errlen);
  if (!s)
    return DR_ESTORE;
  bind_text(s, 1, run_id);
  bind_text(s, 2, task);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *state = xstrdup((const char *)sqlite3_column_text(s, 0));
    *attempts = sqlite3_column_int(s, 1);
  }
  sqlite3_reset(s);
  if (rc == SQLITE_DONE) {
    snprintf(err, errlen, "run %s has no task '%s'", run_id, task);
    return DR_ENOENT;
  }
  return rc == SQLITE_ROW ? 0 : fail(st, rc, err, errlen, "reading a task");
}

/* With the task known to wait at attempt n: 0 when nothing is decided for
 * it yet, 1 when the same decision is (a replay), DR_EEXIST when the other
 * one is. */
static int approval_prior(store *st, const char *run_id, const char *task,
                          int n, const char *decision, char *err,
                          size_t errlen) {
  cJSON *prior = store_approvals(st, run_id, task, n, err, errlen);
  if (!prior)
    return DR_ESTORE;
  int rc = 0;
  if (prior->child) {
    const cJSON *d = cJSON_GetObjectItem(prior->child, "decision");
    rc = d && cJSON_IsString(d) && strcmp(d->valuestring, decision) == 0
             ? 1
             : DR_EEXIST;
    if (rc == DR_EEXIST)
      snprintf(err, errlen, "task '%s' of run %s was already %s", task, run_id,
               d ? d->valuestring : "decided");
  }
  cJSON_Delete(prior);
  return rc;
}

int store_approval_decide(store *st, const char *run_id, const char *task,
                          const store_approval *a, double now, char *err,
                          size_t errlen) {
  int rc = begin(st, err, errlen);
  if (rc)
    return rc;
  char *state = NULL;
  int n = 0;
  rc = task_state_of(st, run_id, task, &state, &n, err, errlen);
  if (rc == 0 && strcmp(state, "waiting_approval") != 0) {
    snprintf(err, errlen,
             "task '%s' of run %s is not waiting for approval (it is %s)", task,
             run_id, state);
    rc = DR_EINVAL;
  }
  if (rc == 0)
    rc = approval_prior(st, run_id, task, n, a->decision, err, errlen);
  if (rc == 0) {
    sqlite3_stmt *s = stmt(st, S_APPROVAL_ADD, err, errlen);
    if (!s) {
      rc = DR_ESTORE;
    } else {
      bind_text(s, 1, run_id);
      bind_text(s, 2, task);
      sqlite3_bind_int(s, 3, n);
      bind_text(s, 4, a->decision);
      bind_text(s, 5, a->by);
      bind_text(s, 6, a->via);
      bind_time(s, 7, now);
      bind_text(s, 8, a->reason);
      rc = step_write(st, s, 1, "recording an approval", err, errlen);
    }
  }
  free(state);
  int replay = rc == 1;
  rc = commit(st, replay ? 0 : rc, err, errlen);
  return rc == 0 && replay ? 1 : rc;
}
