/*
 * channels: the files through which a command run by the exec stage
 * reports, forwarded to dagrun through the host table exactly as a
 * plugin stage reports (host->output, host->metric, host->progress).
 * In lib/ because two callers read them: the exec plugin (in a worker,
 * for a gang's ranks) and dagrun itself, which runs a one-process exec
 * task without a worker (orchestrator/run/execdirect.h) and hands the
 * host table its own functions.
 *
 * The command finds their paths in its environment; none exists before
 * the command makes it, and each is optional:
 *
 *   DAGRUN_OUTPUTS   a JSON object {"key": value, ...} of outputs for
 *                    downstream tasks (${tasks.T.outputs.KEY}). Keys are
 *                    [A-Za-z0-9_]+; values are strings, numbers,
 *                    booleans or lists (all but strings become their
 *                    JSON text). Read once, after the command exited with 0;
 *                    anything else in it fails the task.
 *   DAGRUN_METRICS   JSON lines, appended as training goes:
 *                    {"step": 12, "loss": 2.31, "lr": 0.0003}. "step" is
 *                    an integer >= 0; every other member is a metric of
 *                    that name at that step, and must be a number. Read
 *                    while the command runs (about 5 times a second) and
 *                    once more after it ends, so a run that is stopped
 *                    keeps its curve. A bad line (not JSON, no step, a
 *                    value that is not a number) is a warning naming the
 *                    file and line, and is skipped: a typo in a log line
 *                    does not throw away hours of training.
 *   DAGRUN_PROGRESS  lines "DONE TOTAL [message]" (37 1000) or
 *                    "FRACTION [message]" (0.037), appended or rewritten;
 *                    the last complete line is the task's progress. A bad
 *                    line is a warning naming the file.
 *
 * The files live in the attempt's directory (command-outputs.json,
 * command-metrics.jsonl, command-progress.txt; with ".rank-R" before the
 * extension for rank R > 0 of a gang).
 *
 * Single-threaded: one chan per exec attempt, used by the thread that
 * called run(). Messages go through host->log/fail; nothing here exits.
 */
#ifndef DAGRUN_CHANNELS_H
#define DAGRUN_CHANNELS_H

#include <dagrun/plugin.h>

typedef struct chan chan;

/* Makes the channels of an attempt whose directory is dir (rank: the
 * gang rank, 0 when none), removing files left there by an earlier run.
 * Returns NULL when out of memory. Caller destroys. */
chan *chan_create(const char *dir, int rank);

/* Frees c; NULL is a no-op. */
void chan_destroy(chan *c);

/* "DAGRUN_OUTPUTS=/path", "DAGRUN_METRICS=...", "DAGRUN_PROGRESS=...",
 * then NULL: the command's environment entries, owned by c. */
const char *const *chan_environ(const chan *c);

/* Forwards what the command added to the metrics and progress files since
 * the last call. With final set (the command has ended), a last line
 * without its newline counts too, and a summary of skipped metrics lines
 * is logged. */
void chan_poll(chan *c, dagrun_ctx *ctx, const dagrun_host *host, int final);

/* Reads the outputs file, if the command wrote one, and gives each entry
 * to host->output. Returns 0, or -1 after host->fail() with the file's
 * path and what is wrong in it (line and column for bad JSON). */
int chan_outputs(chan *c, dagrun_ctx *ctx, const dagrun_host *host);

#endif /* DAGRUN_CHANNELS_H */
