/*
 * worker: one task attempt, run in a child process (`dagrun __worker
 * ATTEMPT_JSON`). It reads the attempt description written by the
 * executor, loads the plugin, gives it the host table (plugin.h), sends
 * messages on PROTO_FD and returns the process's exit status: the plugin's
 * status (0..255), 125 when the plugin cannot be loaded or its params are
 * unreadable. SIGTERM sets the cancellation flag the plugin polls.
 *
 * Attempt description (JSON), written by executor.c:
 *   {"plugin": "/abs/exec.so", "stage": "exec",
 *    "params": {...resolved, typed per schema...},
 *    "dirs": {"out": "...", "task": "...", "attempt": "...", "run": "...",
 *             "dag": "..."},
 *    "info": {"dag": "smoke", "task": "hello", "run_id": "...",
 *             "attempt": 1}}
 *
 * Only main() calls worker_main, in a process of its own.
 */
#ifndef DAGRUN_WORKER_H
#define DAGRUN_WORKER_H

/* Exit status when the worker itself fails before the plugin runs. */
#define WORKER_EXIT_SETUP 125

int worker_main(const char *attempt_json_path);

#endif /* DAGRUN_WORKER_H */
