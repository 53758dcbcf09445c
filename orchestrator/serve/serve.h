/*
 * serve: `dagrun serve`, the daemon for scheduled and triggered runs.
 *
 * It loads DAG files (given as files or directories of *.yaml / *.yml),
 * notices when they change, appear or go (a file that stops loading keeps
 * its last good version running, and its error is shown), fires their
 * cron triggers (trigger.h) and data triggers (datatrig.h) and starts runs
 * for the HTTP API (api.h).
 *
 * Each run is its own process, `dagrun run FILE --run-id ID --trigger
 * cron|api|files|dataset [--logical-date T]` (a data trigger's run also
 * gets DAGRUN_TRIGGER_INFO, serve/datatrig.h), in its own session: it records
 * itself in the run store, so that the store, not the daemon's memory, is the
 * truth. A daemon that dies (kill -9) leaves its runs going; one that restarts
 * counts them as going (their dagrun is alive) and resumes (`dagrun
 * resume`) the runs it had started whose dagrun died or that its last
 * shutdown interrupted.
 *
 * The schedule state (each DAG's last handled schedule time) is in the
 * store (cron_state) and is committed before the runs it decides are
 * started: a crash between the two loses at most those runs, never
 * repeats them. A DAG seen for the first time starts from now (no
 * catch-up of times before the daemon knew it). Queued runs (overlap:
 * queue, catch-up, backfills, data triggers, API runs behind a going one)
 * are also in the store (store/runqueue.h) from the moment they are
 * queued until they start: a restart, after SIGTERM or kill -9, puts them
 * back in their DAGs' queues in their order.
 *
 * One daemon per store: a lock file beside the store keeps a second one
 * from firing the same schedules.
 *
 * Shutdown on SIGTERM or SIGINT: the API stops, no run starts; with
 * `--on-shutdown stop` (default) running runs are stopped (as `dagrun
 * cancel` does) and recorded "interrupted", to be resumed by the next
 * start; with `finish` the daemon waits for them to end. A second signal
 * stops them at once.
 *
 * Threads: everything runs on the loop's thread except the API's request
 * handlers, which read a snapshot of the DAGs and hand triggers and
 * cancels to the loop (uv_async) and wait for its answer.
 */
#ifndef DAGRUN_SERVE_H
#define DAGRUN_SERVE_H

/* `dagrun serve`: argv holds the arguments after "serve" (main.c answers
 * --help before calling it). The runs are started from dagrun's own
 * executable (/proc/self/exe). Returns the exit status: 0 after a clean
 * shutdown, 2 for bad usage or a daemon that cannot start. Call once, from
 * the main thread: it installs signal handlers and runs the default loop. */
int serve_cmd_serve(int argc, char **argv);

/* The usage text of `dagrun serve` (`dagrun serve --help`), also printed
 * after a usage error. */
extern const char serve_usage[];

#endif /* DAGRUN_SERVE_H */
