/*
 * datatrig: what a DAG's data triggers (`on:`, ontrig.h) have seen, and
 * the runs they owe, for `dagrun serve` (docs/dag-files.md, "Data
 * triggers"). serve.c polls each DAG on every tick and starts, queues or
 * skips the runs it is handed, by `overlap`, as for a schedule.
 *
 * Files (`on.files`): the glob is matched (glob(3) and stat(2)) on a poll
 * when inotify saw a change in the glob's directory, while files settle,
 * and every 30 s (what inotify cannot see: NFS written by another
 * machine); a glob with a wildcard directory, or a directory that does
 * not exist (yet), is matched on every poll. A file is
 * new or changed when its size or mtime differ from what the store
 * records for the DAG (datastate.h, trigger_files). It is taken once no
 * matched file has changed for `settle`: a file still being written keeps
 * the batch waiting. The whole batch is then one run, its files (sorted)
 * in the run's trigger info, and the files as seen are recorded in the
 * store before the run is started (a crash in between loses the run, never
 * repeats it). The store keeps the last state across restarts: a file
 * that arrived while serve was down is a change at the next start. A
 * DAG's first sight records the files present as seen, without a run
 * (as a schedule starts from now), unless `catchup: true`, when they are
 * a first batch.
 *
 * Datasets (`on.datasets`): each poll reads the versions of each dataset
 * newer than the last the DAG acted on (dataset_seen). `catchup: true`:
 * one run per version, oldest first (queued, one after another);
 * `catchup: false` (default): one run for the newest, the others counted
 * as coalesced. The version acted on is recorded before the runs start.
 * A DAG's first sight of a dataset starts from its newest version.
 *
 * Single-threaded: the loop's thread.
 */
#ifndef DAGRUN_DATATRIG_H
#define DAGRUN_DATATRIG_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "dagfile/spec.h"
#include "store/store.h"

typedef struct datatrig datatrig;

/* One run a data trigger owes. */
typedef struct datatrig_event {
  const char *trigger; /* "files" or "dataset" (static) */
  char *info;          /* JSON for DAGRUN_TRIGGER_INFO; caller frees */
  char *what;          /* for the log: "2 files", "dataset x v3"; frees */
} datatrig_event;

/* A DAG's data-trigger state; NULL-safe destroy. */
datatrig *datatrig_create(void);
void datatrig_destroy(datatrig *t);

/* Polls sp's data triggers at now (monotonic seconds, for settling).
 * Returns 0 with the runs owed in *ev / *n (caller frees each event with
 * datatrig_event_free and the array), *coalesced: dataset versions not
 * run (catchup: false). Or a negative DR_ code with err (the store): the
 * trigger that failed is polled again next time, and *ev still holds the
 * runs owed by the triggers polled before it (recorded as handled: start
 * them all the same). */
int datatrig_poll(datatrig *t, store *st, const spec *sp, double now,
                  datatrig_event **ev, size_t *n, size_t *coalesced, char *err,
                  size_t errlen);
void datatrig_event_free(datatrig_event *e);

/* sp's `on:` for the API's DAG objects: {"files": {"glob", "settle_s"},
 * "datasets": [...]}, or NULL when it has none. */
cJSON *datatrig_json(const spec *sp);

#endif /* DAGRUN_DATATRIG_H */
