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
 * and ${item_index} (template.h). Lists known only at run time (an
 * upstream task's output) are refused with a message saying so.
 */
#ifndef DAGRUN_MAPPING_H
#define DAGRUN_MAPPING_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "spec.h"

/* Reads task `task`'s `map:` value v into m (node, items, param, n).
 * Returns the number of errors added to d (each at file:line:col); m->n
 * is 0 after an error. */
size_t mapping_parse(const spec *s, const char *task, const ynode *v,
                     spec_map *m, diags *d);

/* Whether v may become the run's value of param `name`: a param some task
 * maps over must stay a list of as many items as the file's. 0, or
 * DR_EINVAL with the reason in err. */
int mapping_check_override(const spec *s, const char *name, const cJSON *v,
                           char *err, size_t errlen);

#endif /* DAGRUN_MAPPING_H */
