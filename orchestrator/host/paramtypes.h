/*
 * paramtypes: the six param types of plugin.h as JSON values, what the
 * worker checks a plugin's params against. Apart from params (which
 * builds them from a DAG file's YAML and templates) so that the worker
 * program links no DAG-file code.
 */
#ifndef DAGRUN_PARAMTYPES_H
#define DAGRUN_PARAMTYPES_H

#include <cjson/cJSON.h>
#include <dagrun/plugin.h>

/* A schema default as typed JSON (caller frees), or NULL when the param
 * has none (lists and maps never do) or its text is not of its type. */
cJSON *params_default(const dagrun_param_spec *ps);

/* Non-zero if v is what params_build makes for type t: a string; an
 * integral number; a number; a bool; an array of strings; an object of
 * strings. The worker trusts nothing else. */
int params_json_is(const cJSON *v, dagrun_param_type t);

/* Name of a param type for messages and `dagrun stages`: "string", "int",
 * "float", "bool", "list", "map". */
const char *params_type_name(dagrun_param_type t);
/* What a value of that type looks like, for "expected ..." messages:
 * "an integer", "true or false", "a list of strings (or one string)". */
const char *params_type_expected(dagrun_param_type t);

/* Strict decimal integer (the whole string, optional sign) into *out.
 * 0 or DR_EINVAL (also when out of range). */
int params_parse_int(const char *s, double *out);
/* A finite number, the whole string, no leading blank. 0 or DR_EINVAL. */
int params_parse_float(const char *s, double *out);

#endif /* DAGRUN_PARAMTYPES_H */
