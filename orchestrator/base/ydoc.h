/*
 * ydoc: a YAML document as a tree of nodes that remember where they were
 * written (line and column), built with libyaml. Everything after parsing
 * (spec building, templates, errors) works on this tree so that every
 * message can say file:line:col.
 *
 * The whole tree lives in one allocation arena owned by the root: nodes are
 * immutable once parsed, and an alias shares its anchor's children (it is
 * equivalent to a deep copy, but costs one node), so alias bombs cost
 * neither memory nor time beyond a fixed limit on the expanded size.
 *
 * Lists and maps nest at most 256 levels (deeper is an error), since
 * everything downstream walks the tree recursively.
 *
 * Scalars keep their text; whether a plain scalar is an int, float, bool or
 * null is decided by ynode_scalar_type() (YAML 1.2 core schema: only
 * true/false are booleans, so "no" and "on" stay strings). Quoted scalars
 * are always strings. Anchors and aliases are supported (an alias is a deep
 * copy of its anchor); "<<" merge keys are merged into the map.
 */
#ifndef DAGRUN_YDOC_H
#define DAGRUN_YDOC_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum ynode_kind { YNODE_SCALAR, YNODE_SEQ, YNODE_MAP } ynode_kind;

typedef struct ynode ynode;
struct ynode {
  ynode_kind kind;
  int line, col; /* 1-based position of the node's first character */
  int quoted;    /* scalar written in quotes (or block scalar): a string */
  char *str;     /* scalar text; NULL for SEQ/MAP */
  size_t n;      /* SEQ: number of items; MAP: number of key/value pairs */
  ynode **items; /* SEQ: items[0..n); MAP: items[2i] key, items[2i+1] value */
  unsigned char style;   /* scalar: a yscalar_style */
  unsigned char oneline; /* scalar: started and ended on the same line */
};

/* How a scalar was written; template positions are exact only for plain
 * and quoted scalars on one line. */
typedef enum yscalar_style {
  YSTYLE_PLAIN = 0,
  YSTYLE_SINGLE = 1, /* 'single quoted' */
  YSTYLE_DOUBLE = 2, /* "double quoted" */
  YSTYLE_LITERAL = 3,
  YSTYLE_FOLDED = 4
} yscalar_style;

typedef enum yscalar_type {
  YSCALAR_NULL,  /* "", "~", "null" (plain) */
  YSCALAR_BOOL,  /* true/false (plain) */
  YSCALAR_INT,   /* plain decimal integer, optional sign, fits int64 */
  YSCALAR_FLOAT, /* plain decimal float, .inf/.nan excluded */
  YSCALAR_STRING /* anything else, and every quoted scalar */
} yscalar_type;

/* Parses a file. On success returns 0 and the root in *root (caller frees
 * with ynode_free). On a YAML syntax error returns DR_ESPEC with a
 * diagnostic "path:line:col: error: <libyaml's problem> (<libyaml's context>
 * that started at line L, column C)" added to d, plus a hint for the common
 * mistakes (tabs, an unquoted ${...} inside { } or [ ]). An empty document
 * gives an empty MAP. Multiple documents: error. Unreadable file: DR_ENOENT
 * or DR_EIO with a diagnostic. */
int ydoc_load(const char *path, ynode **root, diags *d);
/* A DAG file's bytes (NUL-terminated; the caller frees *text): 0, or
 * DR_ENOENT / DR_EIO with a diagnostic (a directory, a FIFO or a device
 * is refused by name, never read). */
int ydoc_read(const char *path, char **text, size_t *len, diags *d);
/* Same, from memory; name is used in diagnostics. */
int ydoc_parse(const char *name, const char *text, size_t len, ynode **root,
               diags *d);
/* Frees a whole document; n must be a root returned by ydoc_load or
 * ydoc_parse (NULL is a no-op). */
void ynode_free(ynode *n);
/* Allocates a node of the given kind inside root's document (freed with
 * it), positioned at line/col, with room for n items (2n for a MAP), all
 * NULL. For callers that build derived values such as merged maps. */
ynode *ynode_alloc(ynode *root, ynode_kind kind, size_t n, int line, int col);

/* MAP lookup by key; NULL when absent or not a MAP. Borrowed. */
const ynode *ynode_get(const ynode *map, const char *key);
/* "scalar", "list" or "map", for messages. */
const char *ynode_kind_name(ynode_kind k);
yscalar_type ynode_scalar_type(const ynode *n);
/* "null", "boolean", "integer", "number", "string", "list", "map". */
const char *ynode_type_name(const ynode *n);
/* The same with an article, for "found ..." messages: "a string",
 * "an integer", "a number", "a boolean", "null", "a list", "a map". */
const char *ynode_a_type(const ynode *n);
/* Scalar conversions: return 0 on success, DR_EINVAL if the scalar is not
 * of that type (a quoted "5" is not an int). */
int ynode_int(const ynode *n, int64_t *out);
int ynode_float(const ynode *n, double *out);
int ynode_bool(const ynode *n, int *out);

#endif /* DAGRUN_YDOC_H */
