/*
 * fingerprint: the cache key of a task, what says "this task would do
 * the same work as that earlier one" (scheduler.h, "The fingerprint
 * cache", says when it is computed and how it is used).
 *
 * A fingerprint is SHA-256, as 64 lowercase hex digits, of the canonical
 * JSON (keys sorted at every depth, no spaces) of
 *
 *   {"v": 1,                      the format of this object
 *    "stage": NAME, "version": V  the plugin's stage and version (or null)
 *    "params": {...},             the task's resolved params
 *    "env": {...},                its resolved `env:` ({} when none)
 *    "world_size": N,             only when above 1: a gang's result may
 *                                 depend on its size, and a plain task's
 *                                 fingerprint stays what it was before
 *    "interval": [START, END],    only for a run with a data interval (a
 *                                 cron or backfill run, rundir.h), in UTC
 *                                 seconds: a run for another interval is
 *                                 other work even when no value mentions
 *                                 ${run.*}, while a manual rerun of an
 *                                 unchanged DAG still hits the cache
 *    "ran_in": RUN,               only for a task the cache may not serve
 *                                 (exec by default, `cache: false`): the
 *                                 run it ran in. Its work is not a
 *                                 function of its inputs, so the keys of
 *                                 the tasks downstream of it must change
 *                                 each time it runs again
 *    "upstream": [                per `needs`, in the order written:
 *      {"name", "fingerprint", "outputs": {...}}, ...]}
 *
 * In the params and env a ${tasks.T.dir} stands for itself
 * (fingerprint_task_dir), not for a run's path: the directory differs
 * from run to run, and T's own fingerprint stands for its content.
 * Changing anything here changes every fingerprint, and so empties every
 * user's cache: bump "v" when it must.
 *
 * Pure functions; any thread.
 */
#ifndef DAGRUN_FINGERPRINT_H
#define DAGRUN_FINGERPRINT_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* An upstream task, as it enters its downstream's fingerprint. */
typedef struct fingerprint_upstream {
  const char *name;        /* the task's name */
  const char *fingerprint; /* its own fingerprint (hex) */
  const cJSON *outputs;    /* its key/value outputs; NULL: {} */
} fingerprint_upstream;

/* What a task's fingerprint is made of; all borrowed. */
typedef struct fingerprint_input {
  const char *stage;              /* the plugin's stage name */
  const char *version;            /* the plugin's version string, or NULL */
  const cJSON *params;            /* resolved params; NULL: {} */
  const cJSON *env;               /* resolved task env; NULL: {} */
  int world_size;                 /* ranks; 1 for a plain task */
  int has_interval;               /* 1: the run has a data interval */
  double interval_start, interval_end; /* UTC seconds, when it has */
  const char *ran_in;             /* the run id for an uncacheable task,
                                     else NULL */
  const fingerprint_upstream *up; /* n_up entries, in `needs` order */
  size_t n_up;
} fingerprint_input;

/* The fingerprint of in, as above. Returns hex (caller frees), or NULL
 * when the JSON cannot be printed (out of memory). */
char *fingerprint_compute(const fingerprint_input *in);

/* What ${tasks.T.dir} is while a fingerprint's params and env are
 * resolved: "${dagrun:task-dir:T}". Caller frees. */
char *fingerprint_task_dir(const char *task);

#endif /* DAGRUN_FINGERPRINT_H */
