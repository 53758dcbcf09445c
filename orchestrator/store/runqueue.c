/*
 * runqueue: serve's queued runs in the run store (runqueue.h).
 */
#include "runqueue.h"

#include <sqlite3.h>

#include "base/util.h"
#include "store_impl.h"

/* params as a JSON array of strings (NULL for none), malloc'd. */
static char *params_json(char *const *params) {
  if (!params || !*params)
    return NULL;
  cJSON *a = cJSON_CreateArray();
  for (char *const *p = params; *p; p++)
    cJSON_AddItemToArray(a, cJSON_CreateString(*p));
  char *s = cJSON_PrintUnformatted(a);
  cJSON_Delete(a);
  return s;
}

long long runqueue_add(store *st, const char *dag, int64_t at,
                       const char *run_id, const char *trigger,
                       char *const *params, const char *info, double now,
                       char *err, size_t errlen) {
  int rc = store_write_begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s = store_prep(
      st,
      "INSERT INTO serve_queue(dag, at, run_id, trigger, params, info, queued) "
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
      err, errlen);
  if (!s)
    return store_write_end(st, DR_ESTORE, err, errlen);
  char *pj = params_json(params);
  store_bind_text(s, 1, dag);
  sqlite3_bind_int64(s, 2, at);
  store_bind_text(s, 3, run_id);
  store_bind_text(s, 4, trigger);
  store_bind_text(s, 5, pj);
  store_bind_text(s, 6, info);
  sqlite3_bind_double(s, 7, now);
  int src = sqlite3_step(s);
  sqlite3_finalize(s);
  cJSON_free(pj);
  if (src != SQLITE_DONE)
    return store_write_end(
        st, store_sql_fail(st, src, err, errlen, "recording a queued run"), err,
        errlen);
  long long seq = (long long)sqlite3_last_insert_rowid(store_sqlite(st));
  rc = store_write_end(st, 0, err, errlen);
  return rc ? rc : seq;
}

int runqueue_remove(store *st, long long seq, char *err, size_t errlen) {
  int rc = store_write_begin(st, err, errlen);
  if (rc)
    return rc;
  sqlite3_stmt *s =
      store_prep(st, "DELETE FROM serve_queue WHERE seq = ?1", err, errlen);
  if (!s)
    return store_write_end(st, DR_ESTORE, err, errlen);
  sqlite3_bind_int64(s, 1, seq);
  int src = sqlite3_step(s);
  sqlite3_finalize(s);
  if (src != SQLITE_DONE)
    return store_write_end(
        st, store_sql_fail(st, src, err, errlen, "forgetting a queued run"),
        err, errlen);
  return store_write_end(st, 0, err, errlen);
}

/* Column i of s as a string item (null for SQL NULL). */
static cJSON *text_item(sqlite3_stmt *s, int i) {
  const unsigned char *v = sqlite3_column_text(s, i);
  return v ? cJSON_CreateString((const char *)v) : cJSON_CreateNull();
}

cJSON *runqueue_list(store *st, char *err, size_t errlen) {
  sqlite3_stmt *s = store_prep(st,
                               "SELECT seq, dag, at, run_id, trigger, params, "
                               "info, queued FROM serve_queue ORDER BY seq",
                               err, errlen);
  if (!s)
    return NULL;
  cJSON *out = cJSON_CreateArray();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "seq", (double)sqlite3_column_int64(s, 0));
    cJSON_AddItemToObject(o, "dag", text_item(s, 1));
    cJSON_AddNumberToObject(o, "at", (double)sqlite3_column_int64(s, 2));
    cJSON_AddItemToObject(o, "run_id", text_item(s, 3));
    cJSON_AddItemToObject(o, "trigger", text_item(s, 4));
    const unsigned char *pj = sqlite3_column_text(s, 5);
    cJSON *params = pj ? cJSON_Parse((const char *)pj) : NULL;
    cJSON_AddItemToObject(o, "params",
                          cJSON_IsArray(params) ? params : cJSON_CreateNull());
    if (params && !cJSON_IsArray(params))
      cJSON_Delete(params);
    cJSON_AddItemToObject(o, "info", text_item(s, 6));
    cJSON_AddNumberToObject(o, "queued", sqlite3_column_double(s, 7));
    cJSON_AddItemToArray(out, o);
  }
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) {
    store_sql_fail(st, rc, err, errlen, "reading the queued runs");
    cJSON_Delete(out);
    return NULL;
  }
  return out;
}
