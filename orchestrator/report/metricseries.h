/*
 * metricseries: a task's metrics.jsonl read back as one series per
 * metric, what report.html charts and `dagrun compare` sums up.
 *
 * metrics.jsonl holds one JSON object a line, {"step", "name", "value",
 * "attempt", "time"} (worker.c and scheduler.c write it); lines that are
 * not such an object are skipped. A resumed or retried task writes the
 * steps after its checkpoint again: each series keeps one value a step,
 * the last attempt's, last written.
 */
#ifndef DAGRUN_REPORT_METRICSERIES_H
#define DAGRUN_REPORT_METRICSERIES_H

#include <stddef.h>

typedef struct metric_point {
  double step, value;
  int attempt;
  size_t order; /* the line's place in the file */
} metric_point;

/* One metric's points, sorted by step, one a step. */
typedef struct metric_series {
  char *name;
  metric_point *p;
  size_t n, cap;
} metric_series;

/* A task's metrics, in the order their names first appear. */
typedef struct metric_set {
  metric_series *s;
  size_t n, cap;
} metric_set;

/* Reads <task_dir>/metrics.jsonl into *m (zeroed by the caller).
 * Returns 0, or -1 when there is no such file (*m stays empty). */
int metric_set_load(const char *task_dir, metric_set *m);

/* The series of that name, or NULL. */
metric_series *metric_set_get(const metric_set *m, const char *name);

void metric_set_free(metric_set *m);

#endif
