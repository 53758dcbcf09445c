/*
 * datastate: the run store's record of data triggers (docs/dag-files.md,
 * "Data triggers"), in tables of the same database (store.h):
 *
 *   trigger_files    (dag, path, size, mtime): the files of a DAG's
 *                    `on.files` glob as the last run it started saw them
 *   dataset_versions (dataset, version, run_id, dag, task, outputs,
 *                    created): one row per update of a dataset, version
 *                    1, 2, ... per dataset
 *   dataset_seen     (dag, dataset, version): the last version of a
 *                    dataset a DAG's `on.datasets` has acted on
 *   run_triggers     (run_id, info): what started a data-triggered run,
 *                    JSON ({"files": [...]} or {"dataset", "version",
 *                    "run_id", "task", "outputs"})
 *
 * The tables are created by the first call that needs them (CREATE TABLE
 * IF NOT EXISTS), whatever the schema version: a store no data trigger
 * has used does not have them, and no numbered migration is needed.
 * Same threading and error rules as store.h: DR_ESTORE with a message in
 * err.
 */
#ifndef DAGRUN_DATASTATE_H
#define DAGRUN_DATASTATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "store.h"

/* The files recorded for dag: {path: {"size": N, "mtime": T}}, or NULL
 * with err; *seen: 0 when dag's files were never recorded (a DAG's first
 * sight), 1 otherwise (even with no file). Caller frees. */
cJSON *store_files_get(store *st, const char *dag, int *seen, char *err,
                       size_t errlen);
/* Replaces dag's recorded files with files (the shape store_files_get
 * returns), in one transaction. */
int store_files_set(store *st, const char *dag, const cJSON *files, char *err,
                    size_t errlen);

/* Records a new version of dataset, made by task of run_id (of dag);
 * outputs: the task's outputs as JSON text, or NULL. *version: the new
 * version number. One statement: two writers never get the same number. */
int store_dataset_add(store *st, const char *dataset, const char *run_id,
                      const char *dag, const char *task, const char *outputs,
                      double now, long long *version, char *err, size_t errlen);
/* Versions of dataset newer than after, oldest first, at most limit
 * (<= 0: all): [{dataset, version, run_id, dag, task, outputs, created}]
 * (outputs parsed), or NULL with err. dataset NULL: the latest version of
 * every dataset, by name. */
cJSON *store_dataset_versions(store *st, const char *dataset, long long after,
                              int limit, char *err, size_t errlen);
/* The last version of dataset that dag acted on: 0 with *version, or
 * DR_ENOENT when never (a DAG's first sight of a dataset). */
int store_dataset_seen_get(store *st, const char *dag, const char *dataset,
                           long long *version, char *err, size_t errlen);
int store_dataset_seen_set(store *st, const char *dag, const char *dataset,
                           long long version, char *err, size_t errlen);

/* Records (once; a second call for the run is a no-op) what started
 * run_id: info_json, a JSON object. */
int store_run_trigger_set(store *st, const char *run_id, const char *info_json,
                          char *err, size_t errlen);
/* Adds "trigger_info" (the parsed JSON) and "trigger_summary"
 * (store_trigger_summary's words) to each run object of runs (an array of
 * runs or one run object) that has one. Errors are not fatal: the keys
 * are then left out. */
void store_runs_trigger_info(store *st, cJSON *runs);
/* What started a data-triggered run, in a few words for `dagrun runs` and
 * `status`: "dataset tokens v3", "2 files: /in/a.txt, ..."; "" for
 * other runs. run: a run object with trigger_info. */
void store_trigger_summary(const cJSON *run, char *buf, size_t n);

#endif /* DAGRUN_DATASTATE_H */
