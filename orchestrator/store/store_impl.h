/*
 * store_impl: what store.c lends the store's other modules (datastate.c),
 * which keep their own tables in the same database. Not for use outside
 * orchestrator/store/.
 */
#ifndef DAGRUN_STORE_IMPL_H
#define DAGRUN_STORE_IMPL_H

#include <sqlite3.h>
#include <stddef.h>

#include "store.h"

/* The open database; valid while st is. */
sqlite3 *store_sqlite(store *st);
/* Starts a write (BEGIN IMMEDIATE, or a savepoint while batching);
 * store_write_end commits it when rc is 0, else rolls it back, and
 * returns rc or the commit's error. */
int store_write_begin(store *st, char *err, size_t errlen);
int store_write_end(store *st, int rc, char *err, size_t errlen);
/* Binds v (NULL: SQL NULL) to parameter i of s, copied. */
void store_bind_text(sqlite3_stmt *s, int i, const char *v);
/* sql prepared for one use (the caller finalizes it), or NULL with err. */
sqlite3_stmt *store_prep(store *st, const char *sql, char *err, size_t errlen);
/* DR_ESTORE with "run store PATH: what: SQLite's message" in err. */
int store_sql_fail(store *st, int rc, char *err, size_t errlen,
                   const char *what);

#endif /* DAGRUN_STORE_IMPL_H */
