/*
 * ydoc: libyaml events -> a tree of positioned nodes in one arena.
 *
 * The parser keeps a stack of open collections; each collects its children
 * in a temporary vector and, when it closes, copies them into the arena in
 * one exact-size array, so the finished tree has no slack. A 100,000-task
 * file is about a million nodes: one malloc per node would double the
 * memory and the time.
 */
#include "ydoc.h"
#include "lib/fileio.h"

#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

/* ---- arena ---------------------------------------------------------- */

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  alignas(max_align_t) unsigned char data[];
} chunk;

/* The root node comes first so that a root pointer is a document pointer. */
typedef struct ydoc {
  ynode root;
  chunk *chunks;
} ydoc;

enum { CHUNK_SIZE = 64 * 1024 };

static void *arena_alloc(ydoc *doc, size_t n) {
  n = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
  chunk *c = doc->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK_SIZE / 4 ? n : CHUNK_SIZE;
    chunk *nc = xmalloc(sizeof(chunk) + cap);
    nc->used = 0;
    nc->cap = cap;
    /* A big one-off block goes behind the current chunk so the current
     * chunk's free space is still used. */
    if (c && cap != CHUNK_SIZE) {
      nc->next = c->next;
      c->next = nc;
    } else {
      nc->next = c;
      doc->chunks = nc;
    }
    c = nc;
  }
  void *p = c->data + c->used;
  c->used += n;
  return p;
}

static char *arena_strndup(ydoc *doc, const char *s, size_t n) {
  char *p = arena_alloc(doc, n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

static ynode *new_node(ydoc *doc, ynode_kind kind, int line, int col) {
  ynode *n = arena_alloc(doc, sizeof(ynode));
  memset(n, 0, sizeof(*n));
  n->kind = kind;
  n->line = line;
  n->col = col;
  return n;
}

ynode *ynode_alloc(ynode *root, ynode_kind kind, size_t n, int line, int col) {
  ydoc *doc = (ydoc *)root;
  ynode *node = new_node(doc, kind, line, col);
  size_t slots = kind == YNODE_MAP ? 2 * n : kind == YNODE_SEQ ? n : 0;
  node->n = kind == YNODE_SCALAR ? 0 : n;
  if (slots) {
    node->items = arena_alloc(doc, slots * sizeof(ynode *));
    memset(node->items, 0, slots * sizeof(ynode *));
  }
  return node;
}

void ynode_free(ynode *n) {
  if (!n)
    return;
  ydoc *doc = (ydoc *)n;
  chunk *c = doc->chunks;
  while (c) {
    chunk *next = c->next;
    free(c);
    c = next;
  }
  free(doc);
}

/* ---- parser --------------------------------------------------------- */

/* An alias shares its anchor's subtree, so a small file can stand for a
 * huge tree ("billion laughs"); everything downstream walks the expanded
 * tree and copies its strings, so its size is bounded: at most this many
 * values, or 8 times the values written, whichever is larger. A value
 * counts one, and a string one more per SCALAR_UNIT bytes, so that an
 * alias of a long string counts its bytes (100 aliases of a 1 MiB
 * string took gigabytes, as 100 values). */
enum { EXPANDED_MIN_LIMIT = 1000000, SCALAR_UNIT = 16 };

/* Everything downstream walks the tree recursively; a DAG file has no use
 * for deep nesting, and a bound keeps a hostile file from exhausting the
 * stack. */
enum { MAX_DEPTH = 256 };

typedef struct frame {
  ynode *node; /* the open collection (items not yet set) */
  ynode **tmp; /* children collected so far */
  size_t n, cap;
  uint64_t size; /* expanded size of the children, saturating */
  char *anchor;  /* libyaml's anchor of this collection, or NULL */
  int has_merge; /* a plain "<<" key was seen */
} frame;

typedef struct anchor {
  ynode *node;
  uint64_t size;
} anchor;

typedef struct parser {
  const char *name;
  const char *text;
  size_t len;
  diags *d;
  ydoc *doc;
  frame *stack;
  size_t depth, cap;
  strmap anchor_index; /* name -> index into anchors */
  anchor *anchors;
  size_t n_anchors, cap_anchors;
  uint64_t written; /* values written in the file (EXPANDED_MIN_LIMIT) */
  ynode *top;       /* the finished document node */
  uint64_t top_size;
  /* The alias that stands for the most values, for the error. */
  uint64_t big_alias;
  int big_line, big_col;
  int failed;
} parser;

static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a + b < a ? UINT64_MAX : a + b;
}

static void perr(parser *p, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void perr(parser *p, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diags_vadd(p->d, p->name, line, col, fmt, ap);
  va_end(ap);
  p->failed = 1;
}

static void add_anchor(parser *p, const char *name, ynode *node,
                       uint64_t size) {
  anchor a = {node, size};
  VEC_PUSH(p->anchors, p->n_anchors, p->cap_anchors, a);
  strmap_put(&p->anchor_index, name, p->n_anchors - 1);
}

/* Hands a finished node to the enclosing collection (or makes it the
 * document). */
static void attach(parser *p, ynode *node, uint64_t size) {
  if (p->depth == 0) {
    p->top = node;
    p->top_size = size;
    return;
  }
  frame *f = &p->stack[p->depth - 1];
  /* A "<<" key only merges when written plain; checked at the key. */
  if (f->node->kind == YNODE_MAP && f->n % 2 == 0 &&
      node->kind == YNODE_SCALAR && node->style == YSTYLE_PLAIN &&
      strcmp(node->str, "<<") == 0)
    f->has_merge = 1;
  VEC_PUSH(f->tmp, f->n, f->cap, node);
  f->size = sat_add(f->size, size);
}

static int key_equal(const ynode *a, const ynode *b) {
  return a->kind == YNODE_SCALAR && b->kind == YNODE_SCALAR &&
         strcmp(a->str, b->str) == 0;
}

/* Is key present among pairs[0..n) (a flat key/value array)? Linear for
 * small maps, a hash map otherwise. */
typedef struct keyset {
  ynode **pairs;
  size_t n; /* pairs */
  strmap map;
  int hashed;
} keyset;

static int keyset_has(keyset *k, const ynode *key) {
  if (key->kind != YNODE_SCALAR)
    return 0;
  if (k->hashed)
    return strmap_get(&k->map, key->str, NULL);
  for (size_t i = 0; i < k->n; i++)
    if (key_equal(k->pairs[2 * i], key))
      return 1;
  return 0;
}

static void keyset_add(keyset *k, ynode *key, ynode *value) {
  k->pairs[2 * k->n] = key;
  k->pairs[2 * k->n + 1] = value;
  k->n++;
  if (!k->hashed && k->n > 32) {
    k->hashed = 1;
    for (size_t i = 0; i < k->n; i++)
      if (k->pairs[2 * i]->kind == YNODE_SCALAR)
        strmap_put(&k->map, k->pairs[2 * i]->str, i);
  } else if (k->hashed && key->kind == YNODE_SCALAR) {
    strmap_put(&k->map, key->str, k->n - 1);
  }
}

/* Resolves "<<" merge keys of a closed map whose children are in f->tmp:
 * keys written in the map win over merged ones; among merged maps, the
 * first listed wins. Merged pairs take the place of the "<<" entry. */
static void apply_merge(parser *p, frame *f) {
  size_t total = 0;
  for (size_t i = 0; i + 1 < f->n; i += 2) {
    ynode *k = f->tmp[i], *v = f->tmp[i + 1];
    if (!(k->kind == YNODE_SCALAR && k->style == YSTYLE_PLAIN &&
          strcmp(k->str, "<<") == 0)) {
      total++;
      continue;
    }
    if (v->kind == YNODE_MAP) {
      total += v->n;
      continue;
    }
    int ok = v->kind == YNODE_SEQ;
    for (size_t j = 0; ok && j < v->n; j++) {
      if (v->items[j]->kind != YNODE_MAP)
        ok = 0;
      else
        total += v->items[j]->n;
    }
    if (!ok) {
      perr(p, v->line, v->col,
           "the merge key '<<' expects a map or a list of maps (usually "
           "an alias such as *defaults), found %s",
           ynode_a_type(v));
      return;
    }
  }
  keyset ks = {xmalloc((2 * total + 1) * sizeof(ynode *)), 0, {0}, 0};
  /* Explicit keys first, so that merged copies of them are dropped. */
  for (size_t i = 0; i + 1 < f->n; i += 2) {
    ynode *k = f->tmp[i];
    if (!(k->kind == YNODE_SCALAR && k->style == YSTYLE_PLAIN &&
          strcmp(k->str, "<<") == 0))
      keyset_add(&ks, k, f->tmp[i + 1]);
  }
  /* Merged pairs are appended and then rotated into place. */
  ynode **out = xmalloc((2 * total + 1) * sizeof(ynode *));
  size_t n_out = 0, next_explicit = 0;
  for (size_t i = 0; i + 1 < f->n; i += 2) {
    ynode *k = f->tmp[i], *v = f->tmp[i + 1];
    if (!(k->kind == YNODE_SCALAR && k->style == YSTYLE_PLAIN &&
          strcmp(k->str, "<<") == 0)) {
      out[n_out++] = ks.pairs[2 * next_explicit];
      out[n_out++] = ks.pairs[2 * next_explicit + 1];
      next_explicit++;
      continue;
    }
    size_t n_maps = v->kind == YNODE_MAP ? 1 : v->n;
    for (size_t m = 0; m < n_maps; m++) {
      ynode *src = v->kind == YNODE_MAP ? v : v->items[m];
      for (size_t j = 0; j < src->n; j++) {
        ynode *mk = src->items[2 * j], *mv = src->items[2 * j + 1];
        if (keyset_has(&ks, mk))
          continue;
        keyset_add(&ks, mk, mv);
        out[n_out++] = mk;
        out[n_out++] = mv;
      }
    }
  }
  free(f->tmp);
  f->tmp = out;
  f->n = n_out;
  f->cap = 2 * total + 1;
  /* f->size still counts each merged map once, through its "<<" entry:
   * merging copies pointers, not subtrees, so that stays a fair bound. */
  free(ks.pairs);
  strmap_free(&ks.map);
}

static void close_collection(parser *p) {
  frame *f = &p->stack[--p->depth];
  ynode *node = f->node;
  if (node->kind == YNODE_MAP && f->has_merge && !p->failed)
    apply_merge(p, f);
  node->n = node->kind == YNODE_MAP ? f->n / 2 : f->n;
  if (f->n) {
    node->items = arena_alloc(p->doc, f->n * sizeof(ynode *));
    memcpy(node->items, f->tmp, f->n * sizeof(ynode *));
  }
  uint64_t size = sat_add(f->size, 1);
  if (f->anchor)
    add_anchor(p, f->anchor, node, size);
  free(f->tmp);
  free(f->anchor);
  attach(p, node, size);
}

static void open_collection(parser *p, ynode_kind kind, yaml_mark_t m,
                            const unsigned char *anchor_name) {
  if (p->depth >= MAX_DEPTH) {
    perr(p, (int)m.line + 1, (int)m.column + 1,
         "lists and maps nested more than %d levels deep", MAX_DEPTH);
    return;
  }
  VEC_RESERVE(p->stack, p->cap, p->depth + 1);
  frame *f = &p->stack[p->depth++];
  memset(f, 0, sizeof(*f));
  f->node = new_node(p->doc, kind, (int)m.line + 1, (int)m.column + 1);
  f->anchor = anchor_name ? xstrdup((const char *)anchor_name) : NULL;
  p->written++;
}

static void on_scalar(parser *p, const yaml_event_t *e) {
  ynode *n = new_node(p->doc, YNODE_SCALAR, (int)e->start_mark.line + 1,
                      (int)e->start_mark.column + 1);
  n->str = arena_strndup(p->doc, (const char *)e->data.scalar.value,
                         e->data.scalar.length);
  switch (e->data.scalar.style) {
  case YAML_SINGLE_QUOTED_SCALAR_STYLE:
    n->style = YSTYLE_SINGLE;
    break;
  case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
    n->style = YSTYLE_DOUBLE;
    break;
  case YAML_LITERAL_SCALAR_STYLE:
    n->style = YSTYLE_LITERAL;
    break;
  case YAML_FOLDED_SCALAR_STYLE:
    n->style = YSTYLE_FOLDED;
    break;
  default:
    n->style = YSTYLE_PLAIN;
  }
  n->quoted = n->style != YSTYLE_PLAIN;
  /* An explicit !!str tag makes a plain scalar a string, as quotes do. */
  if (e->data.scalar.tag &&
      strcmp((const char *)e->data.scalar.tag, "tag:yaml.org,2002:str") == 0)
    n->quoted = 1;
  n->oneline = e->start_mark.line == e->end_mark.line;
  uint64_t size = 1 + e->data.scalar.length / SCALAR_UNIT;
  p->written += size;
  if (e->data.scalar.anchor)
    add_anchor(p, (const char *)e->data.scalar.anchor, n, size);
  attach(p, n, size);
}

static void on_alias(parser *p, const yaml_event_t *e) {
  const char *name = (const char *)e->data.alias.anchor;
  int line = (int)e->start_mark.line + 1, col = (int)e->start_mark.column + 1;
  size_t i;
  if (!strmap_get(&p->anchor_index, name, &i)) {
    perr(p, line, col,
         "unknown anchor '%s' in alias '*%s' (an anchor must "
         "be defined with '&%s' before it is used)",
         name, name, name);
    return;
  }
  /* A copy of the anchor's top node at the alias's position; children are
   * shared, which is a deep copy for an immutable tree. */
  ynode *n = new_node(p->doc, YNODE_SCALAR, line, col);
  *n = *p->anchors[i].node;
  n->line = line;
  n->col = col;
  p->written++;
  if (p->anchors[i].size > p->big_alias) {
    p->big_alias = p->anchors[i].size;
    p->big_line = line;
    p->big_col = col;
  }
  attach(p, n, p->anchors[i].size);
}

/* 1-based line and column of a byte offset, counting UTF-8 characters. */
static void offset_position(const char *text, size_t len, size_t off, int *line,
                            int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off && i < len; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
      (*col)++;
    }
  }
}

/* The text of 1-based line `line`, for hints; borrowed, not terminated. */
static const char *line_text(const char *text, size_t len, int line,
                             size_t *n) {
  size_t i = 0;
  for (int l = 1; l < line && i < len; i++)
    if (text[i] == '\n')
      l++;
  size_t j = i;
  while (j < len && text[j] != '\n')
    j++;
  *n = j - i;
  return text + i;
}

static void syntax_error(parser *p, yaml_parser_t *yp) {
  int line, col;
  if (yp->error == YAML_READER_ERROR) {
    offset_position(p->text, p->len, yp->problem_offset, &line, &col);
  } else {
    line = (int)yp->problem_mark.line + 1;
    col = (int)yp->problem_mark.column + 1;
  }
  sbuf b = {0};
  sbuf_puts(&b, yp->problem ? yp->problem : "invalid YAML");
  if (yp->error == YAML_READER_ERROR && yp->problem_value != -1)
    sbuf_printf(&b, " (byte 0x%02x)", (unsigned)yp->problem_value & 0xffu);
  if (yp->context && yp->error != YAML_READER_ERROR) {
    int cl = (int)yp->context_mark.line + 1;
    int cc = (int)yp->context_mark.column + 1;
    if (cl == line && cc == col)
      sbuf_printf(&b, " (%s)", yp->context);
    else
      sbuf_printf(&b, " (%s that started at line %d, column %d)", yp->context,
                  cl, cc);
  }
  /* Hints for the two mistakes libyaml's words do not explain. */
  size_t ln;
  const char *lt = line_text(p->text, p->len, line, &ln);
  if (yp->error == YAML_SCANNER_ERROR && memchr(lt, '\t', ln))
    sbuf_puts(&b, "; YAML does not allow tabs for indentation, use spaces");
  else if (yp->context && strstr(yp->context, "flow") &&
           memmem(lt, ln, "${", 2))
    sbuf_puts(&b, "; inside { } or [ ], a value containing ${...} must be "
                  "quoted, as in \"${params.x}\"");
  diags_add(p->d, p->name, line, col, "%s", b.s);
  sbuf_free(&b);
  p->failed = 1;
}

int ydoc_parse(const char *name, const char *text, size_t len, ynode **root,
               diags *d) {
  *root = NULL;
  parser p = {0};
  p.name = name;
  p.text = text;
  p.len = len;
  p.d = d;
  p.doc = xcalloc(1, sizeof(ydoc));

  yaml_parser_t yp;
  if (!yaml_parser_initialize(&yp)) {
    diags_add(d, name, 0, 0, "cannot initialise the YAML parser");
    free(p.doc);
    return DR_ESPEC;
  }
  yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
  int documents = 0, done = 0;
  while (!done && !p.failed) {
    yaml_event_t e;
    if (!yaml_parser_parse(&yp, &e)) {
      syntax_error(&p, &yp);
      break;
    }
    switch (e.type) {
    case YAML_STREAM_END_EVENT:
      done = 1;
      break;
    case YAML_DOCUMENT_START_EVENT:
      if (++documents > 1)
        perr(&p, (int)e.start_mark.line + 1, (int)e.start_mark.column + 1,
             "found a second YAML document; a DAG file holds exactly one "
             "(remove the '---' line or split the file)");
      break;
    case YAML_SCALAR_EVENT:
      on_scalar(&p, &e);
      break;
    case YAML_ALIAS_EVENT:
      on_alias(&p, &e);
      break;
    case YAML_SEQUENCE_START_EVENT:
      open_collection(&p, YNODE_SEQ, e.start_mark,
                      e.data.sequence_start.anchor);
      break;
    case YAML_MAPPING_START_EVENT:
      open_collection(&p, YNODE_MAP, e.start_mark, e.data.mapping_start.anchor);
      break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
      close_collection(&p);
      break;
    default:
      break;
    }
    yaml_event_delete(&e);
  }
  yaml_parser_delete(&yp);

  /* Open frames are left only after an error. */
  while (p.depth > 0) {
    frame *f = &p.stack[--p.depth];
    free(f->tmp);
    free(f->anchor);
  }
  free(p.stack);
  free(p.anchors);
  strmap_free(&p.anchor_index);

  if (!p.failed && p.top) {
    uint64_t limit = p.written * 8;
    if (limit < EXPANDED_MIN_LIMIT)
      limit = EXPANDED_MIN_LIMIT;
    if (p.top_size > limit)
      perr(&p, p.big_line, p.big_col,
           "aliases expand this document to more than %llu values (a "
           "string counts one more per %d bytes; this alias alone stands "
           "for %llu); refusing to expand it (is an alias referring to an "
           "alias many times over?)",
           (unsigned long long)limit, SCALAR_UNIT,
           (unsigned long long)p.big_alias);
  }
  if (p.failed) {
    ynode_free(&p.doc->root);
    return DR_ESPEC;
  }
  ydoc *doc = p.doc;
  if (!p.top || (p.top->kind == YNODE_SCALAR && !p.top->quoted &&
                 ynode_scalar_type(p.top) == YSCALAR_NULL)) {
    /* No document, or an empty one: an empty map. */
    memset(&doc->root, 0, sizeof(doc->root));
    doc->root.kind = YNODE_MAP;
    doc->root.line = p.top ? p.top->line : 1;
    doc->root.col = p.top ? p.top->col : 1;
  } else {
    doc->root = *p.top;
  }
  *root = &doc->root;
  return 0;
}

int ydoc_read(const char *path, char **text, size_t *len, diags *d) {
  struct stat sb;
  int rc = stat(path, &sb) == 0 ? 0 : -errno;
  /* A directory reads as EISDIR ("input/output error" to a user), and a
   * FIFO would block the reader until someone writes to it. */
  if (rc == 0 && !S_ISREG(sb.st_mode)) {
    diags_add(d, path, 0, 0,
              "cannot read the DAG file: it is %s, not a file (expected a "
              "DAG file such as dags/pretrain.yaml)",
              S_ISDIR(sb.st_mode)    ? "a directory"
              : S_ISFIFO(sb.st_mode) ? "a FIFO"
                                     : "a device or socket");
    return DR_EIO;
  }
  if (rc == 0)
    rc = fileio_read_file(path, text, len);
  if (rc != 0) {
    diags_add(d, path, 0, 0, "cannot read the DAG file: %s",
              rc == -ENOENT ? "no such file" : strerror(-rc));
    return rc == -ENOENT ? DR_ENOENT : DR_EIO;
  }
  return 0;
}

int ydoc_load(const char *path, ynode **root, diags *d) {
  char *text;
  size_t len;
  *root = NULL;
  int rc = ydoc_read(path, &text, &len, d);
  if (rc != 0)
    return rc;
  rc = ydoc_parse(path, text, len, root, d);
  free(text);
  return rc;
}

/* ---- queries -------------------------------------------------------- */

const ynode *ynode_get(const ynode *map, const char *key) {
  if (!map || map->kind != YNODE_MAP)
    return NULL;
  for (size_t i = 0; i < map->n; i++) {
    const ynode *k = map->items[2 * i];
    if (k->kind == YNODE_SCALAR && strcmp(k->str, key) == 0)
      return map->items[2 * i + 1];
  }
  return NULL;
}

const char *ynode_kind_name(ynode_kind k) {
  switch (k) {
  case YNODE_SCALAR:
    return "scalar";
  case YNODE_SEQ:
    return "list";
  case YNODE_MAP:
    return "map";
  }
  return "?";
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* [-+]?[0-9]+ */
static int looks_int(const char *s) {
  if (*s == '-' || *s == '+')
    s++;
  if (!is_digit(*s))
    return 0;
  while (is_digit(*s))
    s++;
  return *s == '\0';
}

/* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int looks_float(const char *s) {
  if (*s == '-' || *s == '+')
    s++;
  int digits = 0;
  while (is_digit(*s)) {
    s++;
    digits++;
  }
  if (*s == '.') {
    s++;
    while (is_digit(*s)) {
      s++;
      digits++;
    }
  }
  if (!digits)
    return 0;
  if (*s == 'e' || *s == 'E') {
    s++;
    if (*s == '-' || *s == '+')
      s++;
    if (!is_digit(*s))
      return 0;
    while (is_digit(*s))
      s++;
  }
  return *s == '\0';
}

yscalar_type ynode_scalar_type(const ynode *n) {
  if (!n || n->kind != YNODE_SCALAR || n->quoted)
    return YSCALAR_STRING;
  const char *s = n->str;
  if (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
      !strcmp(s, "NULL"))
    return YSCALAR_NULL;
  if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE") ||
      !strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
    return YSCALAR_BOOL;
  if (looks_int(s)) {
    errno = 0;
    char *end;
    (void)strtoll(s, &end, 10);
    return errno == ERANGE ? YSCALAR_FLOAT : YSCALAR_INT;
  }
  if (looks_float(s))
    return YSCALAR_FLOAT;
  return YSCALAR_STRING;
}

const char *ynode_a_type(const ynode *n) {
  if (n->kind == YNODE_SEQ)
    return "a list";
  if (n->kind == YNODE_MAP)
    return "a map";
  switch (ynode_scalar_type(n)) {
  case YSCALAR_NULL:
    return "null";
  case YSCALAR_BOOL:
    return "a boolean";
  case YSCALAR_INT:
    return "an integer";
  case YSCALAR_FLOAT:
    return "a number";
  case YSCALAR_STRING:
    break;
  }
  return "a string";
}

const char *ynode_type_name(const ynode *n) {
  /* The same words without the article: "an integer" -> "integer". */
  const char *a = ynode_a_type(n);
  const char *space = strchr(a, ' ');
  return space ? space + 1 : a;
}

int ynode_int(const ynode *n, int64_t *out) {
  if (ynode_scalar_type(n) != YSCALAR_INT)
    return DR_EINVAL;
  *out = (int64_t)strtoll(n->str, NULL, 10);
  return 0;
}

int ynode_float(const ynode *n, double *out) {
  yscalar_type t = ynode_scalar_type(n);
  if (t != YSCALAR_INT && t != YSCALAR_FLOAT)
    return DR_EINVAL;
  *out = strtod(n->str, NULL);
  return 0;
}

int ynode_bool(const ynode *n, int *out) {
  if (ynode_scalar_type(n) != YSCALAR_BOOL)
    return DR_EINVAL;
  *out = n->str[0] == 't' || n->str[0] == 'T';
  return 0;
}
