/*
 * paramrule: what a DAG declares about its params, and where its params
 * land in shell scripts.
 *
 *   params: {msg: hi, steps: 100, size: small}
 *   param_schema:
 *     msg:   {type: string, pattern: "[a-z ]+"}   # the whole value matches
 *     steps: {type: int, min: 1, max: 100000}
 *     size:  {enum: [small, medium, large]}
 *
 * `param_schema:` is a sibling of `params:` because a param's value may
 * itself be a map: `params: {opts: {type: int}}` already means a map param.
 * Keys: type (string, int, float or bool), enum (a list of scalars),
 * pattern (a POSIX extended regex the whole value must match), min and max
 * (numbers, inclusive). Defaults, values given with `-p` and values given
 * through serve's API are all checked.
 *
 * Scripts: an exec task's `command: [sh, -c, SCRIPT, ...]` (any of sh,
 * bash, dash, zsh, ksh, ash, by path or not, with options before the
 * script: -e, -o pipefail, -O shopt, +o NAME, -euo pipefail, ...), its
 * command with `shell: true`, and the code of `python -c`, `perl -e/-E`,
 * `ruby -e`, `node -e/--eval/-p/--print` (each also behind env, timeout,
 * nohup). A reference in a script without the `|sh` quoting form (bare,
 * or with another filter such as |json) lands in it as raw text:
 *   ${params.NAME}        unless the param is declared safe (type int,
 *                         float or bool; an enum of plain words; a
 *                         pattern that refuses the usual injections), a
 *                         value from outside (-p, the API) that is not a
 *                         plain word (letters, digits, _.,:/=+@%-) is
 *                         refused;
 *   ${item} ${item.KEY}   of a task mapped over a param: each item of an
 *                         outside list must be a plain word there;
 *   ${run.trigger_files}, ${tasks.T.outputs.K}, the item of a map over an
 *                         output: made at run time, so a value that is
 *                         not a plain word fails the task
 *                         (prules_check_landing).
 * `dagrun check` warns at each such place. The quotes around the place are
 * read for messages only, since the script may hand the text to something
 * that parses it again. The scanner reads sh's quotes, comments, $(...)
 * and `...` (quoting starts afresh inside) and heredocs, where a `|sh` is
 * an error: inside quotes or a heredoc's body its quotes would not be
 * read, and in an interpreter's code they mean nothing. The DAG's own
 * defaults are the author's and are not refused.
 * Single-threaded.
 */
#ifndef DAGRUN_PARAMRULE_H
#define DAGRUN_PARAMRULE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

#include "spec.h"

typedef struct prules prules;

/* Compiles `param_schema:` (schema, may be NULL) and finds where params
 * land in shell scripts; needs s's params and tasks parsed. Sets s->rules
 * (freed by spec_free). Returns the number of diagnostics added to d. */
size_t prules_compile(spec *s, const ynode *schema, diags *d);

void prules_destroy(prules *p);

/* Converts text given for param name (`-p`, the API) to its declared
 * type. Returns 1 with *out (caller frees) when the param declares a
 * type, 0 when it does not (the caller converts), DR_EINVAL with the
 * message in err when text is not of the type. */
int prules_from_text(const spec *s, const char *name, const char *text,
                     cJSON **out, char *err, size_t errlen);

/* Checks value v of param name against its declaration. outside: v comes
 * from `-p` or the API and must also be a plain word where it lands raw
 * in a shell script (unless the param is declared safe). 0, or
 * DR_EINVAL with a message naming the param and the rule in err (a
 * secret param's value written '***', spec_hide_value). */
int prules_check(const spec *s, const char *name, const cJSON *v, int outside,
                 char *err, size_t errlen);

/* Checks the resolved defaults in params against the declarations, with
 * diagnostics at the default's file:line:col. Returns their number. */
size_t prules_check_defaults(const spec *s, const cJSON *params, diags *d);

/* At run time: value (resolved, its filter applied) of the reference at
 * offset off of scalar v. Where that place is a raw landing in a script
 * of a value made at run time (${run.trigger_files}, a task's output, the
 * item of a map over one) and the value is not a plain word: DR_EINVAL
 * with a message naming the place and the fix in err. Else 0. */
int prules_check_landing(const spec *s, const ynode *v, size_t off,
                         const cJSON *value, char *err, size_t errlen);

/* Writes "FILE:LINE:COL: warning: ..." to f for each place where a param
 * not declared safe lands unquoted in a shell script. Returns how many. */
size_t prules_warn(const spec *s, FILE *f);

#endif /* DAGRUN_PARAMRULE_H */
