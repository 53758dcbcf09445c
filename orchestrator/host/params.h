/*
 * params: a task's `with` map checked against its stage's param schema and
 * turned into the JSON object the worker hands the plugin.
 *
 * Rules: unknown keys are errors ("did you mean"); required params must be
 * set; absent params take the schema default (parsed from its YAML text);
 * values convert to the schema type: STRING from any scalar; INT from an
 * integer or a string holding one; FLOAT from a number or numeric string;
 * BOOL from true/false (or the strings "true"/"false"); LIST from a list
 * of scalars (each becomes a string) or from one scalar (a 1-item list);
 * MAP from a map of scalars (values become strings). A null value (`key:`
 * or `key: ~`) means "not set": the default applies, and a required param
 * is reported. A whole-scalar template is checked with the type of the
 * value it refers to. Anything else is an
 * error naming the param, what was found and what was expected, at the
 * value's file:line:col.
 *
 * At check time (tmpl_env without run/task lookups) values that wait for
 * upstream outputs are not type-checked; they are checked when the task
 * starts. Single-threaded.
 */
#ifndef DAGRUN_PARAMS_H
#define DAGRUN_PARAMS_H

#include <cjson/cJSON.h>
#include <dagrun/plugin.h>

#include "dagfile/template.h"
#include "paramtypes.h"

/* Builds the params object for task `task` of e->s with schema (may be
 * NULL: no params accepted) and the stage's choices (loader_choices; may
 * be NULL): a value of a param with choices must be one of them ("task
 * 'T': stage 'S' param 'P': 'V' is not one of A, B, C[; did you mean
 * 'A'?]" at the value). Defaults are not checked here: the loader
 * refuses a plugin whose default is not among its choices. Returns 0
 * with *out (caller frees); at check time *out may omit deferred values,
 * which are checked when the task starts. Returns DR_EPARAM or
 * DR_ETEMPLATE with diagnostics otherwise. */
int params_build(const dagrun_param_spec *schema,
                 const dagrun_param_choice *choices, const tmpl_env *e,
                 size_t task, cJSON **out, diags *d);

#endif /* DAGRUN_PARAMS_H */
