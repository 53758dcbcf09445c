/*
 * worker: one task attempt, run in a child process (`dagrun-worker
 * __worker ATTEMPT_JSON`, or `dagrun __worker ATTEMPT_JSON` by hand). It
 * reads the attempt description written by the
 * executor, loads the plugin, gives it the host table (plugin.h), sends
 * messages on PROTO_FD and returns the process's exit status: the plugin's
 * status (0..255), 125 when the plugin cannot be loaded or its params are
 * unreadable. SIGTERM sets the cancellation flag the plugin polls.
 * When the run has secrets, ATTEMPT_JSON is /dev/fd/N, a memfd holding the
 * unmasked description (the attempt.json on disk is masked, executor.h);
 * the worker closes fd N once read, so commands a stage starts lack it.
 *
 * Attempt description (JSON), written by executor.c:
 *   {"plugin": "/abs/exec.so", "stage": "exec",
 *    "params": {...resolved, typed per schema...},
 *    "dirs": {"out": "...", "task": "...", "attempt": "...", "run": "...",
 *             "dag": "..."},
 *    "info": {"dag": "smoke", "task": "hello", "run_id": "...",
 *             "attempt": 1}}
 *
 * Before run(), params are checked against the plugin's schema: defaults
 * filled in, required ones present, scalars given for STRING become text,
 * a scalar for LIST becomes a 1-item list, list and map items become text,
 * numbers written as text ("8") are accepted for INT and FLOAT, and
 * true/false/yes/no/on/off for BOOL. A param that does not fit is a setup
 * failure (125) naming the param, as is a missing required one. null is
 * the same as absent.
 *
 * Other behaviour the executor can rely on:
 * - fd 3 is made close-on-exec, so commands a stage starts never hold the
 *   message pipe; if fd 3 is not open (run by hand) nothing is sent.
 * - A rank of a gang started by a launcher (mpirun, srun): with fd 3 not
 *   open and DAGRUN_GANG_DIR set (the attempt's directory), the worker
 *   takes its rank from the launcher's environment (OMPI_COMM_WORLD_RANK,
 *   PMIX_RANK, PMI_RANK or SLURM_PROCID, and the matching size and local
 *   rank), exports DAGRUN_RANK, DAGRUN_WORLD_SIZE and DAGRUN_LOCAL_RANK,
 *   joins the rendezvous at DAGRUN_GANG_ADDR with DAGRUN_GANG_TOKEN
 *   (executor.h; the connection becomes fd 3, and the token is removed
 *   from the environment) and appends its stdout and stderr to its log
 *   (DIR/log for rank 0, else DIR/rank-<r>/log). A rank that cannot join
 *   or open its log (DIR not on a filesystem its host shares) fails with
 *   125 before the stage runs, saying why on stderr (the launcher's
 *   output) and, once joined, in its result.
 * - SIGPIPE is ignored, SIGCHLD is reset to default.
 * - When dagrun is gone (its end of fd 3 closed: killed, crashed), the
 *   attempt is cancelled, and the metrics the stage still reports on its
 *   way out (train's last step, whose checkpoint it writes) are appended
 *   to DIRS.task/metrics.jsonl as dagrun writes them, so `dagrun resume`
 *   continues a complete record. Rank 0 only.
 * - heartbeat() sends at most one message per 250 ms (any message counts).
 * - An attempt description may list the task's declared outputs
 *   ("outputs": ["model_dir", ...], from `outputs:` in the DAG file). When
 *   run() returns 0 but one of them was never given to output(), the
 *   attempt fails with status 1 and "stage S succeeded but did not produce
 *   output 'K', which the task declares in outputs:" (rank 0 of a gang
 *   only).
 * - The result message is the last one; it is absent when the plugin
 *   crashed. Its error is sent only with a non-zero status. The status is
 *   clamped to 0..255, a negative one becomes 1.
 * - Setup failures and the start and end of run() are logged to stderr
 *   ("<UTC time> LEVEL dagrun worker: ...").
 *
 * Only a main() calls worker_main, in a process of its own: the
 * dagrun-worker program's (worker_main.c), which the executor starts, or
 * dagrun's own for `dagrun __worker`.
 */
#ifndef DAGRUN_WORKER_H
#define DAGRUN_WORKER_H

/* Exit status when the worker itself fails before the plugin runs. */
#define WORKER_EXIT_SETUP 125

int worker_main(const char *attempt_json_path);

#endif /* DAGRUN_WORKER_H */
