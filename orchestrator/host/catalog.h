/*
 * catalog: `dagrun stages`, the installed stage plugins and their params.
 * Scans every directory of loader_search_path() for *.so, describes each
 * in a helper process (describe.h; a file that fails to load, or crashes,
 * exits or hangs while being described, is listed with the reason, not
 * skipped silently, and the others are listed as usual), and prints, per stage:
 * name, version, file, summary, and a table of params (name, type, default,
 * required, help, and the values a param with choices may take: "(one of: a,
 * b)" after its help; in JSON, "choices": [...] or null). A stage's name is
 * the one a DAG writes in `stage:`, its file's name without ".so"; where
 * the descriptor calls the stage otherwise, a line under it says so
 * ("(its descriptor calls it 'wc': a DAG names it by its file, stage:
 * counter)"; in JSON, "descriptor_name" is always given). A stage name
 * found in two directories is listed once, from the first (the one a DAG
 * would get), with a note on the shadowed file. `dagrun stages NAME`
 * prints one stage, NAME as a DAG writes it.
 * Single-threaded.
 */
#ifndef DAGRUN_CATALOG_H
#define DAGRUN_CATALOG_H

#include <stdio.h>

/* Prints the catalog; with json non-zero, one JSON array instead of text.
 * With name (not NULL), only that stage, as the catalog shows it (in JSON
 * the one object, not an array). Returns 0; DR_EPLUGIN if some file could
 * not be loaded (all: still printed; name: <name>.so, the loader's reason
 * in err); DR_ENOENT for an unknown name, with "unknown stage 'X'; did
 * you mean 'Y'? (...)" in err when one is close; DR_EIO when out cannot
 * be written. */
int catalog_print(FILE *out, const char *name, int json, char *err,
                  size_t errlen);

#endif /* DAGRUN_CATALOG_H */
