/*
 * catalog: `dagrun stages`, the installed stage plugins and their params.
 * Scans every directory of loader_search_path() for *.so, opens each with
 * loader_open (a file that fails to load is listed with the reason, not
 * skipped silently), and prints, per stage: name, version, file, summary,
 * and a table of params (name, type, default, required, help, and the
 * values a param with choices may take: "(one of: a, b)" after its help;
 * in JSON, "choices": [...] or null). A stage name
 * found in two directories is listed once, from the first (the one a DAG
 * would get), with a note on the shadowed file. Single-threaded.
 */
#ifndef DAGRUN_CATALOG_H
#define DAGRUN_CATALOG_H

#include <stdio.h>

/* Prints the catalog; with json non-zero, one JSON array instead of text.
 * Returns 0, or DR_EPLUGIN if some file could not be loaded (still printed). */
int catalog_print(FILE *out, int json);

#endif /* DAGRUN_CATALOG_H */
