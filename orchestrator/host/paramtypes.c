/* paramtypes: see paramtypes.h. */
#include "paramtypes.h"

#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *params_type_name(dagrun_param_type t) {
  switch (t) {
  case DAGRUN_PARAM_STRING:
    return "string";
  case DAGRUN_PARAM_INT:
    return "int";
  case DAGRUN_PARAM_FLOAT:
    return "float";
  case DAGRUN_PARAM_BOOL:
    return "bool";
  case DAGRUN_PARAM_LIST:
    return "list";
  case DAGRUN_PARAM_MAP:
    return "map";
  }
  return "unknown";
}

const char *params_type_expected(dagrun_param_type t) {
  switch (t) {
  case DAGRUN_PARAM_STRING:
    return "a string";
  case DAGRUN_PARAM_INT:
    return "an integer";
  case DAGRUN_PARAM_FLOAT:
    return "a number";
  case DAGRUN_PARAM_BOOL:
    return "true or false";
  case DAGRUN_PARAM_LIST:
    return "a list of strings (or one string)";
  case DAGRUN_PARAM_MAP:
    return "a map of strings";
  }
  return "a value";
}

/* Strict decimal integer, the whole string. */
int params_parse_int(const char *s, double *out) {
  const char *p = s;
  if (*p == '-' || *p == '+')
    p++;
  if (!(*p >= '0' && *p <= '9'))
    return DR_EINVAL;
  while (*p >= '0' && *p <= '9')
    p++;
  if (*p)
    return DR_EINVAL;
  errno = 0;
  long long x = strtoll(s, NULL, 10);
  if (errno == ERANGE)
    return DR_EINVAL;
  *out = (double)x;
  return 0;
}

int params_parse_float(const char *s, double *out) {
  char *end;
  if (!*s || *s == ' ' || *s == '\t')
    return DR_EINVAL;
  double x = strtod(s, &end);
  if (*end || !isfinite(x))
    return DR_EINVAL;
  *out = x;
  return 0;
}

cJSON *params_default(const dagrun_param_spec *ps) {
  const char *s = ps->default_value;
  double x;
  if (!s)
    return NULL;
  switch (ps->type) {
  case DAGRUN_PARAM_STRING:
    return cJSON_CreateString(s);
  case DAGRUN_PARAM_INT:
    return params_parse_int(s, &x) == 0 ? cJSON_CreateNumber(x) : NULL;
  case DAGRUN_PARAM_FLOAT:
    return params_parse_float(s, &x) == 0 ? cJSON_CreateNumber(x) : NULL;
  case DAGRUN_PARAM_BOOL:
    if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0)
      return cJSON_CreateBool(s[0] == 't');
    return NULL;
  case DAGRUN_PARAM_LIST:
  case DAGRUN_PARAM_MAP:
    break; /* no defaults: absent means empty */
  }
  return NULL;
}

static int all_strings(const cJSON *v) {
  for (const cJSON *c = v->child; c; c = c->next)
    if (!cJSON_IsString(c))
      return 0;
  return 1;
}

int params_json_is(const cJSON *v, dagrun_param_type t) {
  switch (t) {
  case DAGRUN_PARAM_STRING:
    return cJSON_IsString(v);
  case DAGRUN_PARAM_INT:
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) < 9.3e18;
  case DAGRUN_PARAM_FLOAT:
    return cJSON_IsNumber(v) && isfinite(v->valuedouble);
  case DAGRUN_PARAM_BOOL:
    return cJSON_IsBool(v);
  case DAGRUN_PARAM_LIST:
    return cJSON_IsArray(v) && all_strings(v);
  case DAGRUN_PARAM_MAP:
    return cJSON_IsObject(v) && all_strings(v);
  }
  return 0;
}
