/*
 * workerenv: JSON objects and dagrun's environment -> a worker's envp.
 */
#include "workerenv.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

extern char **environ;

static void json_to_env(const cJSON *obj, char ***env, size_t *n, size_t *cap) {
  for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next) {
    char *v;
    if (cJSON_IsString(it))
      v = xasprintf("%s=%s", it->string, it->valuestring);
    else if (cJSON_IsBool(it))
      v = xasprintf("%s=%s", it->string, cJSON_IsTrue(it) ? "true" : "false");
    else if (cJSON_IsNumber(it) &&
             it->valuedouble == (double)(long long)it->valuedouble)
      v = xasprintf("%s=%lld", it->string, (long long)it->valuedouble);
    else if (cJSON_IsNumber(it))
      v = xasprintf("%s=%.17g", it->string, it->valuedouble);
    else
      v = xasprintf("%s=", it->string);
    VEC_PUSH(*env, *n, *cap, v);
  }
}

char **workerenv_build(const cJSON *facts, const cJSON *task_env) {
  char **env = NULL;
  size_t n = 0, cap = 0;
  json_to_env(facts, &env, &n, &cap);
  json_to_env(task_env, &env, &n, &cap);
  size_t n_set = n;
  for (char **e = environ; *e; e++) {
    const char *eq = strchr(*e, '=');
    size_t klen = eq ? (size_t)(eq - *e) : strlen(*e);
    int overridden = 0;
    for (size_t k = 0; k < n_set && !overridden; k++)
      overridden = strncmp(env[k], *e, klen) == 0 && env[k][klen] == '=';
    if (!overridden)
      VEC_PUSH(env, n, cap, xstrdup(*e));
  }
  VEC_PUSH(env, n, cap, NULL);
  return env;
}

char **workerenv_prepend(char **env, char *kv) {
  size_t n = 0;
  while (env[n])
    n++;
  env = xrealloc(env, (n + 2) * sizeof(*env));
  memmove(env + 1, env, (n + 1) * sizeof(*env));
  env[0] = kv;
  return env;
}

void workerenv_free(char **env) {
  for (char **e = env; e && *e; e++)
    free(*e);
  free(env);
}
