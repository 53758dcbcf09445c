/*
 * datamix: the train stage's data mixture, from its params
 *
 *   data_mix:         {web: "${tasks.tok_web.outputs.dir}",
 *                      code: "${tasks.tok_code.outputs.dir}"}
 *   data_weights:     {web: 0.8, code: 0.2}    (absent: 1)
 *   data_max_tokens:  {code: 5000000}          (a token budget; optional)
 *   data_epochs:      {web: 2}                 (or one in epochs; optional)
 *
 * into the sources of a loader mixture (dataloader.h) over several
 * tokenize stage outputs, which must share one tokenizer. Sources are
 * named by data_mix's keys, in its order; the names name the metrics
 * mix_tokens_<name>. data and data_mix exclude each other; one of them
 * is needed.
 *
 * Errors fail the task through the host, naming the param and the
 * source, and the function returns -1.
 */
#ifndef DAGRUN_TRAIN_DATAMIX_H
#define DAGRUN_TRAIN_DATAMIX_H

#include <dagrun/plugin.h>

#include "common/tokdata.h"
#include "data/dataloader.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* clang-format off */
/* Param spec entries: data (not required here: data_mix may stand in)
 * and the mixture's. */
#define DATAMIX_PARAMS                                                         \
  {"data", DAGRUN_PARAM_STRING, NULL, 0,                                       \
   "The tokenize stage's output directory, e.g. "                              \
   "\"${tasks.tokenize.outputs.dir}\" (or data_mix)"},                         \
      {"data_mix", DAGRUN_PARAM_MAP, NULL, 0,                                  \
       "Instead of data, a mixture: source name -> tokenize output "           \
       "directory (one tokenizer); each sequence drawn from a source by "      \
       "data_weights, seeded"},                                                \
      {"data_weights", DAGRUN_PARAM_MAP, NULL, 0,                              \
       "data_mix: source name -> weight above 0 (relative; absent: 1)"},       \
      {"data_max_tokens", DAGRUN_PARAM_MAP, NULL, 0,                           \
       "data_mix: source name -> token budget; a source at it drops out "      \
       "and the others' weights renormalize"},                                 \
      {"data_epochs", DAGRUN_PARAM_MAP, NULL, 0,                               \
       "data_mix: source name -> budget in epochs (times its train tokens); "  \
       "when every source has a budget, steps is cut to what they hold"}
/* clang-format on */

typedef struct datamix {
  size_t n; /* sources; 0: no data_mix (data is used) */
  /* Names borrowed from the host's params; paths, once opened, point
   * into the merged tokdata's train files. */
  loader_source src[LOADER_MAX_SOURCES];
  char *dir[LOADER_MAX_SOURCES]; /* each source's directory, resolved */
  /* Each source's validation files, once opened: val_n of them from
   * index val_first of the merged tokdata's val list (val_n 0: none). */
  size_t val_first[LOADER_MAX_SOURCES], val_n[LOADER_MAX_SOURCES];
} datamix;

/* Reads the params into m (no files opened): names, weights above 0,
 * budgets, and that exactly one of data and data_mix is given. */
int datamix_read(dagrun_ctx *ctx, const dagrun_host *h, datamix *m);

/* Opens each source's directory (relative to the DAG's) and merges them
 * into td: every source's train files in order (m->src[i].paths into
 * them), every validation file, the first source's tokenizer. Sources
 * whose vocabulary or tokenizer differ are refused, naming both. */
int datamix_open(dagrun_ctx *ctx, const dagrun_host *h, datamix *m,
                 tokdata *td);

/* The mixture as JSON, for the checkpoints' config and summary.json:
 * {name: {dir, weight (normalized), max_tokens or epochs when set, with
 * a loader, tokens (served so far) and share (of all served), and with
 * val_loss (one per source), the source's last validation loss when it
 * is finite}}. NULL when out of memory. */
cJSON *datamix_json(const datamix *m, const loader *l, const double *val_loss);

void datamix_free(datamix *m);

#endif /* DAGRUN_TRAIN_DATAMIX_H */
