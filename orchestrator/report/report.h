/*
 * report: a run's report.html, written into its run directory at the end
 * of every run (`dagrun run`, `dagrun resume`) and by `dagrun report RUN`.
 *
 * One self-contained HTML5 page: inline CSS and SVG only (no script, no
 * font, image or style sheet from anywhere), every text escaped. It shows
 * the run (DAG, id, state, trigger, logical date, start, duration), the
 * DAG as a graph coloured by task state and a table of tasks, a timeline
 * of every attempt of every task (retries visible), the training curves of
 * every task with a metrics.jsonl holding `loss` (loss and val_loss
 * against step and tokens, learning rate, grad norm, tokens/s, MFU, loss-
 * spike guard events, the per-step time split), validation results and
 * samples, the finder stages' results and figures (any .svg in out/ without
 * script), and the resolved parameters (run params as recorded, each
 * task's from its latest attempt.json: secrets already masked there).
 *
 * Sources: run.json (tasks, dependencies, states), the run store when
 * given (trigger, logical date, attempts with their times; it wins where
 * both say something), then each task's directory. Every chart comes from
 * svgplot (svgplot.h): <svg class="chart" data-title=...> with series
 * counting their points.
 *
 * Single-threaded; no global state.
 */
#ifndef DAGRUN_REPORT_H
#define DAGRUN_REPORT_H

#include <stddef.h>

#include "run/secrets.h"
#include "store/store.h"

/* Writes <run_dir>/report.html (atomically) for run run_id, from run.json
 * in run_dir and, when st is not NULL (borrowed), the run's records in the
 * store. Every secret of sec (borrowed, may be NULL) is masked in the whole
 * page, so in every file it embeds (samples.txt, figures, validation
 * results), as it is and HTML-escaped. Returns 0 with *path (the file written;
 * caller frees; path may be NULL), DR_ENOENT when neither run.json nor the
 * store knows the run, or DR_EIO; a message in err. */
int report_write(store *st, const char *run_dir, const char *run_id,
                 const secrets *sec, char **path, char *err, size_t errlen);

/* `dagrun report RUN` (main.c's table; main.c answers --help before
 * calling it): RUN is an id or a unique prefix, found in the run store as
 * `dagrun status` finds it; prints the path written. Returns the exit
 * status: 0, 1 (the store or the file cannot be read or written), 2 (bad
 * usage, an unknown or ambiguous run). argv: the arguments after
 * "report". */
int report_cmd_report(int argc, char **argv);

#endif /* DAGRUN_REPORT_H */
