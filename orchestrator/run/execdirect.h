/*
 * execdirect: an attempt of the built-in exec stage that dagrun runs
 * itself, without a worker.
 *
 * A one-process exec attempt needs nothing a worker gives (a plugin to
 * load, a message pipe): dagrun starts the command as ninja starts sh,
 * one process a task instead of two. The worker's start was about as
 * costly as the command's own in the scheduling benchmark
 * (bench/README.md). The behaviour is the exec plugin's, through the
 * same code (lib/execcmd.h, lib/channels.h): the same argv, environment
 * (the worker's, workerenv.h, then the `env` param, then the report
 * files' variables), working directory, PATH lookup, report files,
 * exit statuses and messages, and the same "running: ..." line in the
 * log. What differs: no heartbeat (dagrun watches the command itself),
 * the command leads the attempt's process group, and the log's "dagrun
 * worker:" lines are "dagrun:" lines.
 *
 * Anything the plan cannot settle without running (a bad param, a cwd
 * that is not a directory, a program not on PATH, a spawn that fails)
 * is not handled here: the caller runs that attempt in a worker, as
 * before, which reports it with the exec plugin's status and message and
 * counts as an attempt (retries apply).
 *
 * Use (scheduler.c, executor.c), all on the loop's thread:
 *   execdirect_create  -> a plan, or NULL: use a worker
 *   spawn execdirect_file()/argv()/env() in execdirect_cwd()
 *   execdirect_started, then execdirect_poll(final 0) every
 *   EXECDIRECT_POLL_MS while it runs
 *   execdirect_end when it has exited -> the attempt's status and error
 *   execdirect_destroy
 */
#ifndef DAGRUN_EXECDIRECT_H
#define DAGRUN_EXECDIRECT_H

#include <cjson/cJSON.h>

#include "host/loader.h"
#include "host/proto.h"
#include "secrets.h"

/* How often the report files are read while the command runs: as the
 * exec plugin does, 5 times a second. */
#define EXECDIRECT_POLL_MS 200

typedef struct execdirect execdirect;

/* What the scheduler knows of the attempt (all borrowed). */
typedef struct execdirect_spec {
  const cJSON *params;     /* typed (params_build): command, shell, cwd, env */
  const char *dag_dir;     /* relative cwd params start there */
  const char *attempt_dir; /* the report files go there */
  const char *log_path;    /* the attempt's log, appended to */
  char **base_env;         /* workerenv_build's: the worker's environment */
  cJSON *declared;         /* the task's `outputs:` (strings), or NULL;
                              taken over */
  const secrets *secrets;  /* masked in what is written to the log */
} execdirect_spec;

/* Where messages go: as if a worker had sent them (executor.h). */
typedef void (*execdirect_emit)(void *ud, const proto_msg *m);

/* Whether a task of plugin p, with n_ranks processes and a launcher or
 * not, may run without a worker: the built-in exec stage, one process. */
int execdirect_eligible(const loader_plugin *p, int n_ranks, int launched);

/* The plan for one attempt, or NULL when it must run in a worker
 * (above). */
execdirect *execdirect_create(const execdirect_spec *sp);

/* The program to spawn: a resolved path, or NULL to search dagrun's own
 * PATH for argv[0] (posix_spawnp), which is the worker's too. */
const char *execdirect_file(const execdirect *d);
char *const *execdirect_argv(const execdirect *d);
char *const *execdirect_env(const execdirect *d);
/* NULL: dagrun's own working directory. */
const char *execdirect_cwd(const execdirect *d);

/* The command was spawned: "running: ..." in the log. */
void execdirect_started(execdirect *d);

/* Forwards what the command added to its metrics and progress files
 * (final: it has ended) as messages. */
void execdirect_poll(execdirect *d, execdirect_emit emit, void *ud,
                     int final);

/* The command ended with wait status wstatus, or was stopped by dagrun
 * (stopped: a timeout or cancel, whose own report wins): the last
 * metrics and progress, and after a success its outputs, as messages;
 * then its status as the exec plugin's worker would have exited with,
 * with the reason in *error (caller frees; NULL on success). */
int execdirect_end(execdirect *d, int wstatus, int stopped,
                   execdirect_emit emit, void *ud, char **error);

/* NULL is a no-op. */
void execdirect_destroy(execdirect *d);

#endif /* DAGRUN_EXECDIRECT_H */
