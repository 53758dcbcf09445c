/*
 * datastate: the data triggers' tables of the run store (datastate.h).
 * Statements are prepared per call: these run a few times a second at
 * most (serve's tick), not per task event.
 */
#include "datastate.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "store_impl.h"

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS trigger_files(\n"
    "  dag TEXT NOT NULL,\n"
    "  path TEXT NOT NULL,\n"
    "  size INTEGER NOT NULL,\n"
    "  mtime REAL NOT NULL,\n"
    "  PRIMARY KEY(dag, path)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS dataset_versions(\n"
    "  dataset TEXT NOT NULL,\n"
    "  version INTEGER NOT NULL,\n"
    "  run_id TEXT,\n"
    "  dag TEXT,\n"
    "  task TEXT,\n"
    "  outputs TEXT,\n"
    "  created REAL NOT NULL,\n"
    "  PRIMARY KEY(dataset, version)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS dataset_seen(\n"
    "  dag TEXT NOT NULL,\n"
    "  dataset TEXT NOT NULL,\n"
    "  version INTEGER NOT NULL,\n"
    "  PRIMARY KEY(dag, dataset)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS run_triggers(\n"
    "  run_id TEXT PRIMARY KEY,\n"
    "  info TEXT NOT NULL\n"
    ");\n";

/* Creates the tables when missing: a store that no data trigger has used
 * does not have them (nor their pages). */
static int ensure_tables(store *st, char *err, size_t errlen) {
  int rc = sqlite3_exec(store_sqlite(st), schema_sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? 0
                         : store_sql_fail(st, rc, err, errlen,
                                          "creating the data triggers' tables");
}

static const char *col_text(sqlite3_stmt *s, int i) {
  return (const char *)sqlite3_column_text(s, i);
}

/* sql prepared once the tables exist. */
static sqlite3_stmt *prep_tables(store *st, const char *sql, char *err,
                                 size_t errlen) {
  return ensure_tables(st, err, errlen) == 0 ? store_prep(st, sql, err, errlen)
                                             : NULL;
}

/* Steps a write statement to its end and finalizes it. */
static int run_write(store *st, sqlite3_stmt *s, const char *what, char *err,
                     size_t errlen) {
  int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  return rc == SQLITE_DONE ? 0 : store_sql_fail(st, rc, err, errlen, what);
}

/* The row with the empty path marks a DAG whose files were looked at,
 * so that "no file yet" differs from "never looked". */
cJSON *store_files_get(store *st, const char *dag, int *seen, char *err,
                       size_t errlen) {
  *seen = 0;
  if (ensure_tables(st, err, errlen) != 0)
    return NULL;
  sqlite3_stmt *s = store_prep(
      st, "SELECT path, size, mtime FROM trigger_files WHERE dag = ?1", err,
      errlen);
  if (!s)
    return NULL;
  store_bind_text(s, 1, dag);
  cJSON *out = cJSON_CreateObject();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    *seen = 1;
    if (!*col_text(s, 0))
      continue;
    cJSON *f =
        cJSON_AddObjectToObject(out, (const char *)sqlite3_column_text(s, 0));
    cJSON_AddNumberToObject(f, "size", (double)sqlite3_column_int64(s, 1));
    cJSON_AddNumberToObject(f, "mtime", sqlite3_column_double(s, 2));
  }
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) {
    store_sql_fail(st, rc, err, errlen, "reading a DAG's trigger files");
    cJSON_Delete(out);
    return NULL;
  }
  return out;
}

int store_files_set(store *st, const char *dag, const cJSON *files, char *err,
                    size_t errlen) {
  int rc = ensure_tables(st, err, errlen);
  if (rc == 0)
    rc = store_write_begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s =
      store_prep(st, "DELETE FROM trigger_files WHERE dag = ?1", err, errlen);
  if (!s)
    return store_write_end(st, DR_ESTORE, err, errlen);
  store_bind_text(s, 1, dag);
  rc = run_write(st, s, "forgetting a DAG's trigger files", err, errlen);
  if (rc == 0 &&
      (s = store_prep(st,
                      "INSERT INTO trigger_files(dag, path, size, mtime) "
                      "VALUES (?1, '', 0, 0)",
                      err, errlen))) {
    store_bind_text(s, 1, dag);
    rc = run_write(st, s, "recording a DAG's trigger files", err, errlen);
  }
  for (const cJSON *f = files ? files->child : NULL; f && rc == 0;
       f = f->next) {
    if (!(s = store_prep(st,
                         "INSERT INTO trigger_files(dag, path, size, mtime) "
                         "VALUES (?1, ?2, ?3, ?4)",
                         err, errlen))) {
      rc = DR_ESTORE;
      break;
    }
    store_bind_text(s, 1, dag);
    store_bind_text(s, 2, f->string);
    sqlite3_bind_int64(
        s, 3,
        (sqlite3_int64)cJSON_GetNumberValue(cJSON_GetObjectItem(f, "size")));
    sqlite3_bind_double(s, 4,
                        cJSON_GetNumberValue(cJSON_GetObjectItem(f, "mtime")));
    rc = run_write(st, s, "recording a DAG's trigger files", err, errlen);
  }
  return store_write_end(st, rc, err, errlen);
}

int store_dataset_add(store *st, const char *dataset, const char *run_id,
                      const char *dag, const char *task, const char *outputs,
                      double now, long long *version, char *err,
                      size_t errlen) {
  sqlite3_stmt *s = prep_tables(
      st,
      "INSERT INTO dataset_versions(dataset, version, run_id, dag, task, "
      "outputs, created) SELECT ?1, COALESCE(MAX(version), 0) + 1, ?2, ?3, "
      "?4, ?5, ?6 FROM dataset_versions WHERE dataset = ?1 RETURNING version",
      err, errlen);
  if (!s)
    return DR_ESTORE;
  store_bind_text(s, 1, dataset);
  store_bind_text(s, 2, run_id);
  store_bind_text(s, 3, dag);
  store_bind_text(s, 4, task);
  store_bind_text(s, 5, outputs);
  sqlite3_bind_double(s, 6, now);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *version = sqlite3_column_int64(s, 0);
    rc = sqlite3_step(s);
  }
  sqlite3_finalize(s);
  return rc == SQLITE_DONE
             ? 0
             : store_sql_fail(st, rc, err, errlen, "recording a dataset");
}

/* One row of dataset_versions as JSON. */
static cJSON *version_json(sqlite3_stmt *s) {
  cJSON *v = cJSON_CreateObject();
  cJSON_AddStringToObject(v, "dataset", col_text(s, 0));
  cJSON_AddNumberToObject(v, "version", (double)sqlite3_column_int64(s, 1));
  static const char *const keys[] = {"run_id", "dag", "task"};
  for (int i = 0; i < 3; i++)
    if (col_text(s, 2 + i))
      cJSON_AddStringToObject(v, keys[i], col_text(s, 2 + i));
  cJSON *o = col_text(s, 5) ? cJSON_Parse(col_text(s, 5)) : NULL;
  cJSON_AddItemToObject(v, "outputs", o ? o : cJSON_CreateObject());
  cJSON_AddNumberToObject(v, "created", sqlite3_column_double(s, 6));
  return v;
}

cJSON *store_dataset_versions(store *st, const char *dataset, long long after,
                              int limit, char *err, size_t errlen) {
  sqlite3_stmt *s = prep_tables(
      st,
      dataset ? "SELECT dataset, version, run_id, dag, task, outputs, created "
                "FROM dataset_versions WHERE dataset = ?1 AND version > ?2 "
                "ORDER BY version LIMIT ?3"
              : "SELECT dataset, MAX(version), run_id, dag, task, outputs, "
                "created FROM dataset_versions GROUP BY dataset "
                "ORDER BY dataset LIMIT ?3",
      err, errlen);
  if (!s)
    return NULL;
  store_bind_text(s, 1, dataset);
  sqlite3_bind_int64(s, 2, after);
  sqlite3_bind_int(s, 3, limit > 0 ? limit : -1);
  cJSON *out = cJSON_CreateArray();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    cJSON_AddItemToArray(out, version_json(s));
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) {
    store_sql_fail(st, rc, err, errlen, "reading dataset versions");
    cJSON_Delete(out);
    return NULL;
  }
  return out;
}

int store_dataset_seen_get(store *st, const char *dag, const char *dataset,
                           long long *version, char *err, size_t errlen) {
  sqlite3_stmt *s =
      prep_tables(st,
                  "SELECT version FROM dataset_seen WHERE dag = ?1 "
                  "AND dataset = ?2",
                  err, errlen);
  if (!s)
    return DR_ESTORE;
  store_bind_text(s, 1, dag);
  store_bind_text(s, 2, dataset);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW)
    *version = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  if (rc == SQLITE_ROW)
    return 0;
  return rc == SQLITE_DONE ? DR_ENOENT
                           : store_sql_fail(st, rc, err, errlen,
                                            "reading a DAG's dataset state");
}

int store_dataset_seen_set(store *st, const char *dag, const char *dataset,
                           long long version, char *err, size_t errlen) {
  sqlite3_stmt *s =
      prep_tables(st,
                  "INSERT OR REPLACE INTO dataset_seen(dag, dataset, "
                  "version) VALUES (?1, ?2, ?3)",
                  err, errlen);
  if (!s)
    return DR_ESTORE;
  store_bind_text(s, 1, dag);
  store_bind_text(s, 2, dataset);
  sqlite3_bind_int64(s, 3, version);
  return run_write(st, s, "recording a DAG's dataset state", err, errlen);
}

int store_run_trigger_set(store *st, const char *run_id, const char *info_json,
                          char *err, size_t errlen) {
  sqlite3_stmt *s =
      prep_tables(st,
                  "INSERT OR IGNORE INTO run_triggers(run_id, info) "
                  "VALUES (?1, ?2)",
                  err, errlen);
  if (!s)
    return DR_ESTORE;
  store_bind_text(s, 1, run_id);
  store_bind_text(s, 2, info_json);
  return run_write(st, s, "recording a run's trigger", err, errlen);
}

static void add_info(sqlite3_stmt *s, cJSON *run) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(run, "id");
  if (!cJSON_IsString(id))
    return;
  sqlite3_reset(s);
  sqlite3_bind_text(s, 1, id->valuestring, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s) != SQLITE_ROW)
    return;
  cJSON *info = cJSON_Parse(col_text(s, 0));
  if (!info)
    return;
  cJSON_AddItemToObject(run, "trigger_info", info);
  /* the CLI's words for it, so that every reader says the same */
  char sum[512];
  store_trigger_summary(run, sum, sizeof sum);
  if (sum[0])
    cJSON_AddStringToObject(run, "trigger_summary", sum);
}

void store_runs_trigger_info(store *st, cJSON *runs) {
  char err[256];
  if (!runs)
    return;
  sqlite3_stmt *s = store_prep(
      st, "SELECT info FROM run_triggers WHERE run_id = ?1", err, sizeof err);
  if (!s)
    return;
  if (cJSON_IsArray(runs)) {
    for (cJSON *r = runs->child; r; r = r->next)
      add_info(s, r);
  } else {
    add_info(s, runs);
  }
  sqlite3_finalize(s);
}

void store_trigger_summary(const cJSON *run, char *buf, size_t n) {
  const cJSON *info = cJSON_GetObjectItemCaseSensitive(run, "trigger_info");
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(info, "files");
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(info, "dataset");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(info, "version");
  buf[0] = '\0';
  if (cJSON_IsString(ds)) {
    snprintf(buf, n, "dataset %s v%lld", ds->valuestring,
             cJSON_IsNumber(v) ? (long long)v->valuedouble : 0LL);
  } else if (cJSON_IsArray(files)) {
    int nf = cJSON_GetArraySize(files);
    const cJSON *first = cJSON_GetArrayItem(files, 0);
    snprintf(buf, n, "%d file%s: %s%s", nf, nf == 1 ? "" : "s",
             cJSON_IsString(first) ? first->valuestring : "",
             nf > 1 ? ", ..." : "");
  }
}
