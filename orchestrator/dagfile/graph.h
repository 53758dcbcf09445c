/*
 * graph: `dagrun graph` output of a spec's DAG.
 *   text     tasks in topological order, "name (stage) <- needs, ..."
 *   dot      Graphviz digraph
 *   mermaid  a "flowchart TD" block
 * Names are quoted/escaped as each format needs.
 */
#ifndef DAGRUN_GRAPH_H
#define DAGRUN_GRAPH_H

#include <stdio.h>

#include "spec.h"

/* Returns 0, DR_EINVAL for an unknown format, or DR_ECYCLE. */
int graph_print(const spec *s, const char *format, FILE *out);

#endif /* DAGRUN_GRAPH_H */
