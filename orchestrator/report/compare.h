/*
 * compare: recorded runs side by side, what an experiment tracker shows
 * (`dagrun compare RUN RUN...`, GET /api/compare?runs=A,B,...).
 *
 * For each run: its id, DAG, state, times, tags and note; then rows, each with
 * one value per run (JSON null where that run has none): params   the run's
 * params as recorded (`-p`, the API's, the DAG's defaults), "same": whether
 * every run has the same value; metrics  per task and metric of the task's
 * metrics.jsonl (metricseries.h: one value a step, a resumed task's last):
 *            {final, final_step, best, best_step, points}; "better" says
 *            which way is best: "higher" for names with a word (split
 *            at _ . -) acc, accuracy, score, f1, auc, precision, recall,
 *            mfu, bleu, throughput, or a rate (per_s, per_sec), "lower"
 *            for every other (losses, perplexity, times, mix_accounts),
 *            judged by the name up to a slash (val_loss/<source>: lower);
 *   outputs  per task and key of the task's outputs, "same" as above.
 * Rows come in the order they are first met, runs in the order given.
 */
#ifndef DAGRUN_REPORT_COMPARE_H
#define DAGRUN_REPORT_COMPARE_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Most runs one comparison takes. */
#define COMPARE_MAX_RUNS 16

/* The comparison of n runs (store_run's objects: params, run_dir, tasks
 * with outputs), as above: {runs, params, metrics, outputs}. Reads each
 * task's metrics.jsonl under its run directory; a task whose name could
 * leave that directory is skipped. Caller frees. */
cJSON *compare_runs(cJSON *const *runs, size_t n);

/* `dagrun compare RUN RUN... [--all] [--json]` (main.c's table): the
 * params and outputs that differ (--all: every one) and every metric's
 * final and best value, a column per run. Returns 0, 1 (the store cannot
 * be read), 2 (bad usage, an unknown or ambiguous run). */
int compare_cmd(int argc, char **argv);

#endif
