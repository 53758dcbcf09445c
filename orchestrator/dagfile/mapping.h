/*
 * mapping: a task's `map:`, the list it is expanded over (dynamic task
 * mapping, as Airflow's expand() or Argo's withItems/withParam).
 *
 *   map: [0.1, 0.3, 1.0]        a literal list
 *   map: ${params.lrs}          a param whose value in the file is a list
 *
 * The number of items is fixed when the file is loaded, so that every
 * instance is a task of its own from `dagrun check` on (checked, shown,
 * recorded, retried and cached like any task): spec.h makes task T's
 * instance k the task "T-k". The items of a literal list are the file's;
 * those of a param are the run's value of the param, which `--param` may
 * change but not lengthen or shorten (mapping_check_override). A task's
 * values name its item with ${item}, ${item.KEY} (an item that is a map)
 * and ${item_index} (template.h).
 *
 *   map: ${tasks.gen.outputs.lrs}   a list known only at run time
 *
 * An upstream task's output cannot be counted before the run, so such a
 * task is one placeholder task (spec.h) until the scheduler reaches it:
 * the output is then read (mapping_items), the list recorded as the
 * placeholder's output `items` (so that `dagrun resume` expands the same
 * instances), and spec_map_expand appends the instances, which from then
 * on are tasks like a static map's. The placeholder runs no stage: it
 * succeeds by expanding, or fails when the output is no list (or is longer
 * than SPEC_MAP_MAX), which fails the mapped task as a whole.
 */
#ifndef DAGRUN_MAPPING_H
#define DAGRUN_MAPPING_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "spec.h"

/* Reads task `task`'s `map:` value v into m (node, items, param, n).
 * Returns the number of errors added to d (each at file:line:col); m->n
 * is 0 after an error. A list known at run time leaves m->items NULL. */
size_t mapping_parse(const spec *s, const char *task, const ynode *v,
                     spec_map *m, diags *d);

/* The list a runtime map m expands over, from v, the value of its
 * ${tasks.U.outputs.KEY}: a JSON array, or a string holding one. 0 with
 * *items (caller frees), or DR_EINVAL with err naming the output and what
 * it holds (not a list, or over SPEC_MAP_MAX items). */
int mapping_items(const spec_map *m, const cJSON *v, cJSON **items, char *err,
                  size_t errlen);

/* Whether v may become the run's value of param `name`: a param some task
 * maps over must stay a list of as many items as the file's. 0, or
 * DR_EINVAL with the reason in err. */
int mapping_check_override(const spec *s, const char *name, const cJSON *v,
                           char *err, size_t errlen);

#endif /* DAGRUN_MAPPING_H */
