/*
 * runqueue: the runs `dagrun serve` has queued and not yet started (a
 * schedule's or data trigger's run behind a going one under overlap:
 * queue, catch-up runs, backfills, API runs behind a going one), in the
 * run store's serve_queue table (schema 8), a row each from the moment it
 * is queued until it starts or is cancelled. So a serve stopped (SIGTERM)
 * or killed before their turn starts them at its next start, in their
 * order, instead of losing them: the schedule time, dataset version or
 * file batch they were for is already recorded as handled, and an API
 * caller already holds the run's id.
 *
 * Removing a row before its run starts means a crash between the two
 * loses that run rather than starting it twice, the rule serve's
 * schedule state follows too (serve.h).
 *
 * All functions run on the caller's thread with a store it owns.
 */
#ifndef DAGRUN_STORE_RUNQUEUE_H
#define DAGRUN_STORE_RUNQUEUE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Records a queued run of dag: at its logical date (0: none), run_id
 * (NULL: made when it starts), trigger ("cron", "api", "backfill",
 * "files", "dataset"), params ("NAME=VALUE" overrides, NULL-terminated, or
 * NULL), info (a data trigger's JSON, or NULL), queued at now (UTC
 * seconds). Its sequence number (> 0; the queue's order), or a negative
 * DR_ code with err. */
long long runqueue_add(store *st, const char *dag, int64_t at,
                       const char *run_id, const char *trigger,
                       char *const *params, const char *info, double now,
                       char *err, size_t errlen);

/* Forgets the queued run seq (started or cancelled); one already gone is
 * no error. 0, or DR_ESTORE with err. */
int runqueue_remove(store *st, long long seq, char *err, size_t errlen);

/* The queued runs, oldest first: [{seq, dag, at, run_id (or null),
 * trigger, params (an array of "NAME=VALUE", or null), info (or null),
 * queued}], or NULL with err. */
cJSON *runqueue_list(store *st, char *err, size_t errlen);

#endif /* DAGRUN_STORE_RUNQUEUE_H */
