/*
 * describe: a stage plugin's descriptor, read in a child process.
 *
 * dagrun itself never dlopens a stage. Loading one runs its code (ELF
 * constructors, then dagrun_stage_entry()), and a plugin that calls
 * exit(), crashes or hangs there would take `dagrun check`, `run`,
 * `stages` or `serve` with it: a run that exits 0 having recorded
 * nothing, a serve that stops answering. So `check` (and with it `run`
 * and `serve`) and `stages` ask a helper, `dagrun-worker __describe
 * FILE`, which loads the file with loader_open() (every check of
 * loader.h, the same messages) and writes what the descriptor says as
 * JSON on its stdout. The worker that runs an attempt still dlopens the
 * plugin: there a stage's bug fails its own task, as it should.
 *
 * The helper runs in a process group of its own, with SIGKILL as its
 * parent-death signal, with no time limit of its own: dagrun waits for
 * it at most DESCRIBE_TIMEOUT_S seconds ($DAGRUN_DESCRIBE_TIMEOUT, a
 * number of seconds in (0, 3600], overrides it), then kills its group.
 * The files of one call are described in parallel (at most
 * DESCRIBE_PARALLEL helpers at a time), one helper per file, so that a
 * helper's fate is its file's, except for the built-in stages: they are
 * described too (files on disk like any other: a broken build of one
 * must not take dagrun down either), but by one helper together, which
 * costs about what dlopen in dagrun did (docs/internals/plugins.md); a
 * failure there is retried file by file (describe_files_with).
 *
 * What the parent makes of the helper, as the error of that file (P is
 * the path as given; the loader's own refusals keep loader.h's wording):
 *   P: crashed while being loaded (SIGSEGV in its constructor or
 *      dagrun_stage_entry())
 *   P: exited with status S while being loaded, before describing itself
 *      (a plugin must not call exit())
 *   P: did not describe itself within N s (killed: its constructor or
 *      dagrun_stage_entry() hangs?; DAGRUN_DESCRIBE_TIMEOUT sets the limit)
 *   P: cannot be described: its description is not readable (WHY)
 *   P: cannot be described: cannot start HELPER: WHY
 *   P: cannot be described: dagrun-worker, its helper, is missing
 *   P: cannot be described: DAGRUN_DESCRIBE_TIMEOUT='V' is not a number
 *      of seconds in (0, 3600]
 *
 * The description (one JSON object and a newline per file, the helper's
 * only stdout):
 *   {"struct_size": N, "abi_version": N, "name": "...", "version": "..."
 *    or null, "summary": "..." or null, "params": [{"name", "type" (int),
 *    "default" (string or null), "required" (int), "help" (string or
 *    null)}, ...] or null, "choices": [{"param": "...", "values": [...]},
 *    ...] or null, and "check": true when the stage has a check (ABI
 *    1.2; checkhook.h runs it)}
 * or {"error": "P: ...", "code": DR_EPLUGIN or DR_EABI} for a file the
 * loader refuses. A described plugin (loader_plugin.handle NULL) has
 * every member of its descriptor but run, which is NULL: only a worker
 * runs a stage.
 *
 * Single-threaded: call from one thread at a time (it waits for its
 * children by pid, so a libuv loop's SIGCHLD handling does not take them),
 * a thread that outlives the call: the helpers' parent-death signal is
 * sent when the thread that started them ends.
 */
#ifndef DAGRUN_DESCRIBE_H
#define DAGRUN_DESCRIBE_H

#include <stddef.h>
#include <sys/types.h>

#include "loader.h"

#define DESCRIBE_TIMEOUT_S 10.0
#define DESCRIBE_PARALLEL 8
/* A description larger than this is refused (and its helper killed): a
 * real one is a few KiB. */
#define DESCRIBE_MAX_BYTES (16u << 20)

typedef struct describe_result {
  loader_plugin *plugin; /* rc 0: the description; free with loader_close */
  /* 0; DR_EPLUGIN, DR_EABI (the loader's refusal, or the helper died);
   * DR_ESPAWN (no helper); DR_EINVAL (a bad DAGRUN_DESCRIBE_TIMEOUT) */
  int rc;
  char *error; /* rc != 0: "P: what happened"; caller frees */
} describe_result;

/* Describes paths[0..n) with the dagrun-worker installed with dagrun
 * (cli_helper_exe), filling res[0..n) (every one, success or not). The
 * limit is $DAGRUN_DESCRIBE_TIMEOUT or DESCRIBE_TIMEOUT_S. The files of
 * the built-in stage directory share one helper (loader_is_builtin_file).
 */
void describe_files(const char *const *paths, size_t n, describe_result *res);

/* From now on, describe_files keeps each description it gets under its
 * file's identity (device, inode, size, modification time) and answers
 * from it while the file is unchanged, without a helper: for a process
 * that checks DAG after DAG over its life (serve), which otherwise paid a
 * helper's start and the stages' loading for every DAG it loaded. A file
 * that failed to be described is tried again each time. */
void describe_cache_keep(void);

/* The same with a given helper, run as `HELPER __describe PATH...`, and
 * limit (seconds); the files i with shared[i] non-zero (shared may be
 * NULL: none) are described by one helper, the others by one each. A
 * shared helper that ends before it has described all of its files (it
 * exited, crashed, hung) is not taken as their error: the files it did
 * not describe are described again, each by a helper of its own, whose
 * fate is that file's. So a bad file among shared ones costs one helper
 * more (and, for one that hangs, twice the limit), and its error names it
 * all the same. For tests and describe_files. */
void describe_files_with(const char *helper, double limit,
                         const char *const *paths, const int *shared, size_t n,
                         describe_result *res);

/* Starts argv (argv[0] the helper's path) with stdin from in (-1:
 * /dev/null) and stdout on a pipe whose reading end goes into *out, in
 * a new process group, every signal at its default and none blocked
 * (serve's loop thread blocks some). 0 with *pid, or an errno value
 * (*pid 0). For the helpers of describe and checkhook.h. */
int describe_spawn(char *const *argv, int in, pid_t *pid, int *out);

/* $DAGRUN_DESCRIBE_TIMEOUT, else DESCRIBE_TIMEOUT_S (the limit of the
 * stages' checks too, checkhook.h): 0, or -1 with the reason in err. */
int describe_limit(double *limit, char *err, size_t errlen);

/* The helper's side: loads each of paths[0..n) in turn (loader_open) and
 * writes its description (or the loader's refusal) on stdout, one line
 * each, as soon as it has it; returns the exit status, 0 once all are
 * written. The plugins' own prints to stdout go to stderr. Only
 * dagrun-worker's main() calls it, and exits with its result at once
 * (_exit: a plugin's destructors do not run). */
int describe_main(int n, char **paths);

#endif /* DAGRUN_DESCRIBE_H */
