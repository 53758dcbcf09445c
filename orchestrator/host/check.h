/*
 * check: everything `dagrun check` verifies beyond the file's structure,
 * and what a run needs from it: cycles, each stage found and loadable (ABI
 * included; described by a helper process, describe.h, so that a plugin
 * that crashes, exits or hangs while loading is an error of its tasks), each
 * task's params against its stage's schema, every template reference. Reports
 * all errors, not only the first.
 */
#ifndef DAGRUN_CHECK_H
#define DAGRUN_CHECK_H

#include <cjson/cJSON.h>

#include "dagfile/spec.h"
#include "loader.h"

typedef struct checked {
  spec *s; /* borrowed; grows when a map over a run-time list expands */
  loader_plugin **plugins;  /* distinct plugins, described once each */
  size_t n_plugins;
  size_t *task_plugin;      /* per task: index into plugins; SIZE_MAX if bad */
  size_t n_task_plugin;     /* tasks task_plugin covers */
  cJSON *params;            /* DAG params resolved (env only; no run.*) */
} checked;

/* Runs every check on a loaded spec. Returns 0 with *out, or DR_ESPEC
 * with every error in d (*out is still set, for partial use, and must be
 * freed). */
int check_spec(spec *s, checked **out, diags *d);
void checked_free(checked *c);

/* Expands map `map` of c->s over items (spec_map_expand) and gives each
 * new instance its placeholder's plugin. */
void checked_expand(checked *c, size_t map, const cJSON *items);

/* Loads a DAG file and runs every check on it, the alerts' included: what
 * `dagrun check` reports. Returns 0 with *sp and *ck (caller frees), or an
 * error (DR_ESPEC, DR_ENOENT, DR_EIO) with *sp and *ck NULL and every error
 * found in d (none for a file that cannot be read: the code says why). */
int check_load(const char *path, spec **sp, checked **ck, diags *d);

#endif /* DAGRUN_CHECK_H */
