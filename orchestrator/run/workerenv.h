/*
 * workerenv: the environment a worker process starts with, for one task
 * (scheduler.c) and for each rank of a gang (gang.c) alike.
 *
 * An environment is a NULL-terminated array of "NAME=value" strings, as
 * execve and executor.h take it; each string and the array are the
 * caller's (workerenv_free). Values come from JSON objects: strings as
 * they are, booleans as true/false, integral numbers without a decimal
 * point, other numbers with 17 significant digits, anything else empty.
 *
 * Pure functions of their arguments and dagrun's own environment; any
 * thread, though dagrun calls them on the loop's.
 */
#ifndef DAGRUN_WORKERENV_H
#define DAGRUN_WORKERENV_H

#include <cjson/cJSON.h>

/* facts (the DAGRUN_* variables), then task_env (the task's `env:`,
 * resolved), then dagrun's own environment less every name that facts or
 * task_env set. A name in both facts and task_env comes twice, facts
 * first, and getenv() finds the fact. Either object may be NULL. Caller
 * frees with workerenv_free. */
char **workerenv_build(const cJSON *facts, const cJSON *task_env);

/* env (from workerenv_build) with kv ("NAME=value", taken over) in front,
 * so that it wins. Returns the array, which may have moved. */
char **workerenv_prepend(char **env, char *kv);

/* Frees an environment or an argv built the same way. NULL is a no-op. */
void workerenv_free(char **env);

#endif /* DAGRUN_WORKERENV_H */
