/*
 * ontrig: a DAG's data triggers as written in its file, and what its tasks
 * produce (docs/dag-files.md, "Data triggers"):
 *
 *   on:
 *     files:
 *       glob: data/incoming/shard-*.txt  # relative to the DAG file's directory
 *       settle: 30s                 # default 10s
 *     datasets: [tokenized]         # a name or a list of names
 *   tasks:
 *     tokenize:
 *       produces: tokenized         # a name or a list of names
 *
 * `dagrun serve` acts on them (serve/datatrig.h); `dagrun run` records a
 * new version of each dataset a task produces when the task succeeds
 * (store.h, "Datasets"). Parsing only, no I/O; single-threaded.
 */
#ifndef DAGRUN_ONTRIG_H
#define DAGRUN_ONTRIG_H

#include <stddef.h>

#include "base/util.h"
#include "base/ydoc.h"

/* The keys this module adds to a DAG file: at the top level, on a task. */
#define ONTRIG_TOP_KEY "on"
#define ONTRIG_TASK_KEY "produces"

/* The settle time when `settle:` is not written. */
#define ONTRIG_SETTLE_DEFAULT_S 10.0

typedef struct spec_on {
  const ynode *node; /* `on:` as written, or NULL */
  /* on.files: glob made absolute against the DAG file's directory; NULL
   * when the DAG has no file trigger. */
  char *glob;
  double settle_s;
  char **datasets; /* on.datasets, in the order written, no duplicates */
  size_t n_datasets;
} spec_on;

/* Parses `on:` (v, the value; may be NULL: no data trigger) of the DAG file
 * path whose directory is dir into *on. Every error goes to d with the
 * node's file:line:col. Returns the number of errors. */
size_t ontrig_parse(const char *path, const char *dir, const ynode *v,
                    spec_on *on, diags *d);
/* Parses a task's `produces:` (a dataset name or a list of them) into
 * *names / *n (caller frees with ontrig_names_free). where is the place
 * for messages (" in task 'x'"). Returns the number of errors. */
size_t ontrig_parse_produces(const char *path, const ynode *v,
                             const char *where, char ***names, size_t *n,
                             diags *d);
/* Whether name may name a dataset: [A-Za-z0-9_.-]+, as a DAG's name. */
int ontrig_name_valid(const char *name);
void ontrig_names_free(char **names, size_t n);
void ontrig_free(spec_on *on);

#endif /* DAGRUN_ONTRIG_H */
