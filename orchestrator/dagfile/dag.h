/*
 * dag: graph algorithms over a spec's tasks (edges are `needs`).
 * Single-threaded; O(tasks + edges) unless noted.
 */
#ifndef DAGRUN_DAG_H
#define DAGRUN_DAG_H

#include <stddef.h>

#include "spec.h"

/* Topological order, stable (ties keep written order), into order[0..n).
 * Returns 0, or DR_ECYCLE after adding one diagnostic per cycle found,
 * "dependency cycle: a -> b -> c -> a", at the position of the `needs`
 * entry that closes it. order may be NULL (cycle check only). */
int dag_toposort(const spec *s, size_t *order, diags *d);

/* Is `up` a transitive upstream task of `task`? Caches reachability work
 * between calls in the reach object. */
typedef struct dag_reach dag_reach;
dag_reach *dag_reach_create(const spec *s);
int dag_is_upstream(dag_reach *r, size_t task, size_t up);
void dag_reach_destroy(dag_reach *r);

#endif /* DAGRUN_DAG_H */
