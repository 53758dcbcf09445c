/*
 * execcmd: what the exec stage does around its command, apart from
 * running it: the argv from the `command` and `shell` params, the
 * environment, the working directory, the program's path, and what an
 * exit status means. The exec plugin (stages/exec, in a worker) and
 * dagrun itself (orchestrator/run/execdirect.h, a task without a worker)
 * both run exec tasks; both go through here, so the two behave alike.
 *
 * Pure functions of their arguments (and the file system, for paths);
 * any thread. Messages are written into the caller's buffer.
 */
#ifndef DAGRUN_EXECCMD_H
#define DAGRUN_EXECCMD_H

#include <stddef.h>

/* Exit statuses for failures before the command runs, as shells use
 * them: 127 command not found, 126 found but cannot run; 2 for a task
 * whose params make no sense. */
#define EXECCMD_NOT_FOUND 127
#define EXECCMD_CANNOT_RUN 126
#define EXECCMD_BAD_PARAMS 2

/* The argv of a command given as n strings (borrowed): as they are, or,
 * when shell is set, /bin/sh -c ITEM (n must be 1). NULL-terminated;
 * the caller frees the array, not the strings. NULL with the reason in
 * msg for an empty command, shell with a list, or one string with
 * spaces and no shell (someone meant a shell). */
const char **execcmd_argv(const char *const *items, size_t n, int shell,
                          char *msg, size_t msglen);

/* base (e.g. environ) less the names that extra or vars set, then extra
 * ("NAME=value" from the task's env param) less the names vars set, then
 * vars (dagrun's own, which win). NULL-terminated; the strings are
 * borrowed, the array is the caller's. NULL when out of memory. */
char **execcmd_env(char *const *base, char *const *extra, size_t n_extra,
                   const char *const *vars);

/* Whether entry ("NAME=value") sets the variable named by the klen bytes
 * of name. */
int execcmd_sets(const char *entry, const char *name, size_t klen);

/* The value of PATH among n "NAME=value" entries, or NULL. */
const char *execcmd_path_of(char *const *entries, size_t n);

/* prog looked up in path (colon-separated, an empty entry meaning the
 * working directory) as execvp does: a malloc'd path of a regular,
 * executable file, or NULL. */
char *execcmd_search_path(const char *prog, const char *path);

/* The working directory of the cwd param, relative to dag_dir unless
 * absolute, into *out (caller frees; NULL when cwd is NULL or empty).
 * Checked to be a directory: a chdir that fails in the child reports
 * ENOENT, which would read as "command not found". 0, or an exit status
 * (EXECCMD_BAD_PARAMS, EXECCMD_CANNOT_RUN) with the reason in msg. */
int execcmd_cwd(const char *dag_dir, const char *cwd, char **out, char *msg,
                size_t msglen);

/* "prog arg1 arg2" for the log, whole (a masker downstream must see a
 * secret whole): malloc'd, NULL out of memory. */
char *execcmd_join(const char *const *argv);

/* What posix_spawn's error rc means for prog: the exit status (127 for
 * ENOENT, else 126) with the reason in msg. */
int execcmd_spawn_failed(const char *prog, int rc, char *msg, size_t msglen);

/* The attempt's exit status for a command that ended with wait status
 * wstatus: its own exit code, or 128 + the signal that killed it; with
 * the reason in msg when that is not 0 (and msg empty when it is). */
int execcmd_status(const char *prog, int wstatus, char *msg, size_t msglen);

#endif /* DAGRUN_EXECCMD_H */
