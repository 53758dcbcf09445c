/*
 * sentmetrics: the last metrics a worker sent to dagrun, kept until the
 * worker knows whether dagrun wrote them.
 *
 * dagrun writes each metric it reads from an attempt's pipe to the
 * task's metrics.jsonl. When dagrun dies (kill -9, a crash), what it had
 * not read yet dies with the pipe: the step before the one the stage
 * finishes on its way out lost its loss, and `dagrun resume` continued
 * with a hole in the curve. A worker that sees dagrun gone appends the
 * kept metrics that metrics.jsonl has no line of (sentmetrics_flush),
 * then writes the later ones itself (worker.c's orphan path).
 *
 * Not thread-safe: the worker calls it under its context's lock.
 */
#ifndef DAGRUN_HOST_SENTMETRICS_H
#define DAGRUN_HOST_SENTMETRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct sentmetrics sentmetrics;

/* Keeps the last cap metrics. Caller frees with sentmetrics_free. */
sentmetrics *sentmetrics_create(size_t cap);
void sentmetrics_free(sentmetrics *m);

/* One metric about to be sent (name copied); the oldest goes past cap. */
void sentmetrics_add(sentmetrics *m, const char *name, double value,
                     int64_t step);

/* Appends to path (a task's metrics.jsonl; made when missing) each kept
 * metric, oldest first, that has no line there of attempt with its name
 * and step, as proto_metric_line writes them, and forgets them all.
 * Returns how many it appended, or -1 when path cannot be read or
 * written (a full disk loses metrics, not the attempt). */
int sentmetrics_flush(sentmetrics *m, const char *path, int attempt);

#endif
