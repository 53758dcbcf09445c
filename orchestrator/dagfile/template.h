/*
 * template: resolves ${...} in DAG values into JSON (cJSON).
 *
 *   ${params.NAME}          a DAG param (params may use env and run only)
 *   ${env:NAME}             an environment variable; ${env:NAME:-default}
 *   ${run.id}               the run's id
 *   ${run.date}             the logical date's day in the DAG's time zone
 *                           (YYYY-MM-DD)
 *   ${run.logical_date}     the time the run stands for, ISO 8601 with the
 *                           DAG time zone's offset
 *   ${run.data_interval_start} ${run.data_interval_end}
 *                           the data interval (run/rundir.h)
 *   ${run.dag}              the DAG name
 *   ${run.trigger}          what started the run: manual, cron, api,
 *                           backfill, files, dataset
 *   ${run.trigger_files}    a files-triggered run's new or changed files,
 *                           absolute paths, one per line ("" otherwise)
 *   ${run.trigger_dataset} ${run.trigger_dataset_version}
 *   ${run.trigger_dataset_outputs}
 *                           a dataset-triggered run's dataset, its version
 *                           and the producing task's outputs (JSON text)
 *   ${tasks.T.dir}          directory of task T's outputs (<run>/<T>/out)
 *   ${tasks.T.outputs.K}    output K of task T (set by its plugin)
 *   ${tasks.T.outputs.K}    of a mapped task T (mapping.h): the JSON list
 *                           of its instances' outputs K, in item order
 *                           (and .dir the list of their directories)
 *   ${item} ${item.KEY}     in a mapped task's instance: its item, a key of
 *   ${item_index}           an item that is a map, the item's position
 *                           from 0; an error in any other task
 *   $${                     a literal "${"
 *   ${REF|sh}               REF's value as one POSIX shell word: '...'
 *                           with each ' written '\'' (a string)
 *   ${REF|json}             REF's value as JSON text (a string), so that
 *                           a list or a map can be part of a string
 *
 * A scalar that is exactly one template takes the referenced value's type
 * (so `vocab: ${params.vocab}` stays an integer); otherwise the pieces are
 * joined into a string. Plain scalars without templates become JSON by
 * their YAML type; quoted ones are strings; lists and maps recurse.
 *
 * A whole-scalar template keeps its type whether or not the scalar is
 * quoted: inside YAML's { } and [ ] a template must be quoted, and
 * `vocab: "${params.vocab}"` still means the integer.
 *
 * Every reference is validated whether or not its value is known: unknown
 * params (with "did you mean"), unset env vars without default, unknown
 * tasks, tasks that are not upstream of the task being resolved (tasks.*
 * may only name transitive upstream tasks), unknown run fields, bad syntax.
 * The "is upstream" answers are cached in e->s (spec->reach), so checking
 * every task of a 100,000-task DAG stays linear in practice.
 * Errors carry file:line:col of the "${" inside the scalar (exact for plain
 * and quoted single-line scalars, the node's position otherwise).
 * Single-threaded.
 */
#ifndef DAGRUN_TEMPLATE_H
#define DAGRUN_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "spec.h"

typedef struct tmpl_env {
  const spec *s;
  /* Resolved DAG params (from tmpl_resolve_params); NULL while resolving
   * the params themselves. Borrowed. */
  const cJSON *params;
  /* Run fields; NULL at check time (then ${run.*} is DR_EDEFERRED). */
  const char *run_id;
  const char *run_date;
  const char *run_logical_date;
  const char *run_interval_start;
  const char *run_interval_end;
  const char *run_trigger, *run_trigger_files, *run_trigger_dataset;
  const char *run_trigger_dataset_version, *run_trigger_dataset_outputs;
  /* Task lookups; NULL at check time (then ${tasks.*} is DR_EDEFERRED).
   * task_dir returns the task's out directory (borrowed). task_outputs
   * returns the task's outputs object, or NULL if it has not finished
   * successfully (then an outputs reference is DR_ETEMPLATE at run time:
   * "task T produced no output K"). */
  const char *(*task_dir)(void *ud, size_t task);
  const cJSON *(*task_outputs)(void *ud, size_t task);
  void *ud;
} tmpl_env;

/* Resolves one value. task is the index of the task the value belongs to,
 * or SIZE_MAX for DAG-level values. Returns 0 with *out (caller frees with
 * cJSON_Delete); DR_EDEFERRED when every reference is valid but some value
 * is not known yet (*out NULL, no diagnostic); DR_ETEMPLATE with
 * diagnostics (*out NULL). */
int tmpl_resolve(const tmpl_env *e, size_t task, const ynode *value,
                 cJSON **out, diags *d);

/* Resolves spec->params into an object (params may reference env and run;
 * a reference to params or tasks is an error). Returns 0 or DR_ETEMPLATE;
 * with run_id NULL, params that use ${run.*} are left out of *out. *out is
 * set in both cases (caller frees): on error it holds the params that did
 * resolve, so later checks do not repeat the same errors. */
int tmpl_resolve_params(const tmpl_env *e, cJSON **out, diags *d);

/* The longest value tmpl_override_param takes, in bytes: a run started
 * by `dagrun serve` gets its params through one environment variable,
 * which Linux caps at 128 KiB (MAX_ARG_STRLEN), and an exec task's
 * argument that holds one has the same cap. */
#define TMPL_PARAM_MAX 65536

/* Sets DAG param name in params (resolved, see above) to text given on
 * the command line or through the API (`--param NAME=VALUE`). The value
 * keeps the param's type in the DAG: a number must parse as one, a bool
 * is true or false, a list or map is given as JSON, a string (or a param
 * that did not resolve) takes text as it is. Params cannot reference
 * params, so no other value depends on it. A type declared under
 * param_schema wins over the default's, and the value is checked against
 * the declaration and the shell scripts it lands in (paramrule.h).
 * Returns 0, or DR_EINVAL with the message in err: an unknown param
 * ("did you mean"), a value over TMPL_PARAM_MAX bytes or of the wrong
 * type, one the declaration or a shell script refuses. A secret param's
 * value is written '***' in err (spec_hide_value). */
int tmpl_override_param(const spec *s, cJSON *params, const char *name,
                        const char *text, char *err, size_t errlen);

/* True if the YAML value contains a template reference to tasks.* (its
 * final value waits for upstream tasks). */
int tmpl_mentions_tasks(const ynode *value);

/* Text of a scalar JSON value as it is interpolated into a string: strings
 * as they are, numbers in their shortest exact form ("8", "0.02"),
 * "true"/"false", "" for null. NULL for arrays and objects. Caller frees. */
char *tmpl_scalar_text(const cJSON *v);

/* s as one POSIX shell word: '...', each ' written as '\''. Caller
 * frees. */
char *tmpl_sh_quote(const char *s);

/* Where offset off (of a "${") lies inside scalar v: exact when the scalar
 * is on one line and written plain or quoted (escapes aside), the node's
 * position otherwise. */
void tmpl_position(const ynode *v, size_t off, int *line, int *col);

#endif /* DAGRUN_TEMPLATE_H */
