/*
 * loader: finds and opens stage plugins and checks their ABI.
 *
 * A stage named in YAML is either a path (it contains '/'; relative paths
 * are taken from the DAG file's directory) or a name, looked up as
 * "<name>.so" in each directory of $DAGRUN_PLUGIN_PATH (colon-separated),
 * then in the built-in stage directory next to the dagrun executable
 * (<exe dir>/../<libdir>/dagrun/stages, the same in the build tree and in
 * an installed prefix).
 *
 * Refusals name the file and the reason: dlopen's error, a missing entry
 * symbol, a NULL descriptor, a different ABI major, a newer ABI minor, a
 * struct_size smaller than ABI 1.0's, a missing name or run.
 * Single-threaded.
 *
 * Messages (err), exactly:
 *   P: no such file
 *   P: not a regular file
 *   P: not a loadable shared object: <dlerror, without the path>
 *   P: not a dagrun stage plugin: no symbol 'dagrun_stage_entry' (export
 *      it with DAGRUN_EXPORT)
 *   P: dagrun_stage_entry() returned NULL
 *   P: built for dagrun plugin ABI M.m, this dagrun supports ABI 1.1
 *      (rebuild the plugin against this dagrun's <dagrun/plugin.h>)
 *   P: stage descriptor is N bytes, smaller than ABI 1.0's S (define it
 *      with DAGRUN_STAGE_HEADER)
 *   P: stage name 'X' is not [a-z0-9_-]+
 *   P: stage 'X' has no run function
 *   P: param 'X' has unknown type T
 *   P: stage 'X' lists choices for param 'Y', which it does not declare
 *   P: stage 'X' lists choices for param 'Y' twice
 *   P: stage 'X' param 'Y': choices are for string and int params, not T
 *      ones
 *   P: stage 'X' param 'Y' has an empty list of choices
 *   P: stage 'X' param 'Y': choice 'Z' is not an integer
 *   P: stage 'X' param 'Y': its default 'D' is not one of A, B, C
 * where P is the path as given to loader_open. loader_find:
 *   unknown stage 'X': no X.so in DIR1, DIR2[; did you mean 'Y'?]
 *      [; to use the file B/X.so, write stage: ./X.so]
 *   stage file not found: REF (looked for JOINED)
 * The search directories are realpath()s where they exist; a path found
 * for a stage reference with a '/' is a realpath too.
 */
#ifndef DAGRUN_LOADER_H
#define DAGRUN_LOADER_H

#include <dagrun/plugin.h>
#include <stddef.h>

#include "base/util.h"

typedef struct loader_plugin {
  char *path;                /* as opened */
  void *handle;              /* dlopen handle; NULL when described */
  const dagrun_stage *stage; /* the plugin's (or storage's), valid until
                                close */
  /* A plugin described by a helper process (describe.h): storage holds
   * stage and what it points to, freed by loader_close with release. */
  void *storage;
  void (*release)(void *storage);
} loader_plugin;

/* Whether p is the built-in stage of that name, the file installed with
 * dagrun (not one of the same name on DAGRUN_PLUGIN_PATH). */
int loader_builtin(const loader_plugin *p, const char *stage);

/* Whether path is a file of the built-in stage directory, installed with
 * dagrun. */
int loader_is_builtin_file(const char *path);

/* Resolves a stage reference to a file. Returns 0 with *path (caller
 * frees), or DR_ESTAGE with a message in err saying where it looked (and
 * "did you mean" among the stages found there). */
int loader_find(const char *stage, const char *base_dir, char **path, char *err,
                size_t errlen);

/* Opens a plugin file and validates its descriptor. Returns 0 with *out
 * (free with loader_close), DR_EPLUGIN or DR_EABI with a message in err.
 * This runs the plugin's code (its constructors, dagrun_stage_entry())
 * in the calling process: only a worker, which runs the stage anyway,
 * and the describe helper (describe.h), which dagrun asks instead, call
 * it. */
int loader_open(const char *path, loader_plugin **out, char *err,
                size_t errlen);
void loader_close(loader_plugin *p);

/* What loader_open checks of a descriptor, without a file: 0, or DR_EABI /
 * DR_EPLUGIN with the reason (no file name) in err. */
int loader_check_stage(const dagrun_stage *st, char *err, size_t errlen);

/* The stage's choices (plugin.h), or NULL when it has none or was built
 * for ABI 1.0, whose descriptor ends before them. Owned by the plugin. */
const dagrun_param_choice *loader_choices(const dagrun_stage *st);
/* The stage's check (plugin.h), or NULL when it has none or was built
 * for an ABI before 1.2. In a described plugin (describe.h) a stand-in
 * that says the stage has one: checkhook.h runs the real one. */
typedef int (*dagrun_check_fn)(const dagrun_check_task *t, const char **param,
                               char *err, size_t errlen);
dagrun_check_fn loader_check(const dagrun_stage *st);
/* The NULL-terminated values param may take according to choices (may
 * be NULL), or NULL if it may take any. */
const char *const *loader_param_choices(const dagrun_param_choice *choices,
                                        const char *param);
/* Index of z in values for a param of type t (INT: compared as integers,
 * so "+1" is "1"; else as strings), or -1 if absent. */
long loader_choice_index(const char *const *values, dagrun_param_type t,
                         const char *z);
/* Appends "a, b, c" to b: the choices as messages and `dagrun stages`
 * write them. */
void loader_choices_join(sbuf *b, const char *const *values);

/* The directories searched, in order; NULL-terminated; valid until exit. */
const char *const *loader_search_path(void);

#endif /* DAGRUN_LOADER_H */
