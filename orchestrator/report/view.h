/*
 * view: what a user sees while a run goes on.
 *
 *   tty    a live, compact block redrawn in place (at most 10 times a
 *          second): counts, elapsed time, and a line per task (per running
 *          task on big DAGs) with its progress bar; failures and retries
 *          are printed above it and stay.
 *   plain  one timestamped line per state change (for logs and pipes).
 *   json   one JSON object per state change (`--events json`).
 *   quiet  nothing but the final summary.
 *
 * Single-threaded, on the loop's thread.
 */
#ifndef DAGRUN_VIEW_H
#define DAGRUN_VIEW_H

#include <stdio.h>
#include <uv.h>

#include "dagfile/spec.h"
#include "run/rundir.h"
#include "run/scheduler.h"

typedef enum view_mode { VIEW_TTY, VIEW_PLAIN, VIEW_JSON, VIEW_QUIET } view_mode;

typedef struct view view;

/* out is borrowed (stdout in the CLI). */
view *view_create(uv_loop_t *loop, view_mode mode, const spec *s, FILE *out);
void view_run_started(view *v, const rundir *run, int max_parallel);
void view_task_event(view *v, const sched_event *e);
/* Tasks first .. first + n - 1 were added to the spec (the sched
 * observer's tasks_added): shown from now on, waiting. */
void view_tasks_added(view *v, size_t first, size_t n);
void view_task_progress(view *v, size_t task, double fraction,
                        const char *msg);
void view_task_log(view *v, size_t task, int level, const char *msg);
/* Queued task waits for what (e.g. "pool gpu (held by run R task T)"),
 * shown on its line (tty), as a line (plain) or an event (json) until it
 * leaves the queue. Call when what changes, not at each poll. */
void view_task_waiting(view *v, size_t task, const char *what);
/* A line outside the task list ("cancelling: press Ctrl-C again to kill"). */
void view_notice(view *v, const char *msg);
/* Final summary: state is "success", "failed" or "cancelled". Stops the
 * redraw timer. */
void view_run_finished(view *v, const char *state, const sched *s);
/* Closes the view's handles; free happens when they are closed. */
void view_destroy(view *v);

#endif /* DAGRUN_VIEW_H */
