/*
 * paramrule: `param_schema:` compiled, values checked against it, and the
 * places where a param lands unquoted in a shell script.
 */
#include "paramrule.h"

#include <math.h>
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template.h"

typedef enum ptype { PT_ANY, PT_STRING, PT_INT, PT_FLOAT, PT_BOOL } ptype;

/* Quoting around a place in a script, as its reader reads it. SHQ_CODE:
 * the code of an interpreter (python -c, ...), whose quotes are not read. */
typedef enum shq {
  SHQ_BARE,
  SHQ_SINGLE,
  SHQ_DOUBLE,
  SHQ_HEREDOC,
  SHQ_COMMENT,
  SHQ_CODE
} shq;
static const char *const shq_names[] = {"unquoted",       "inside '...'",
                                        "inside \"...\"", "in a heredoc",
                                        "in a comment",   "in the code"};

/* What a raw landing carries: a param, the item of a task mapped over a
 * param, the names of a files trigger, or a value known only at run time
 * (a task's output, the item of a map over one). */
typedef enum ukind { U_PARAM, U_ITEM, U_TRIGGER, U_OUTPUT } ukind;

typedef struct prule {
  const char *name; /* borrowed from the YAML */
  const ynode *at;  /* the entry's key, for positions */
  ptype type;
  const ynode *enums; /* SEQ of scalars or NULL */
  const ynode *pattern;
  regex_t re;
  int has_re, has_min, has_max;
  double min, max;
  int safe; /* no value it admits can carry shell metacharacters */
} prule;

/* One reference that lands raw (without `|sh`) in a script. */
typedef struct shell_use {
  ukind kind;
  char *name;     /* U_PARAM: the param; U_ITEM: the param the task maps over */
  char *key;      /* U_ITEM: KEY of ${item.KEY}, or NULL */
  char *ref;      /* the reference as written, without its filter */
  char *filter;   /* its filter (not sh: |json), or NULL */
  char *reader;   /* NULL: a shell script; else "python3 -c" and the like */
  const ynode *v; /* the script scalar */
  size_t off;     /* of "${" in v->str */
  shq q;
} shell_use;

struct prules {
  prule *r;
  size_t n;
  shell_use *u;
  size_t nu;
  strmap late; /* landing_key of a U_TRIGGER or U_OUTPUT use -> its index */
};

static const char *const rule_keys[] = {"type", "enum", "pattern",
                                        "min",  "max",  NULL};
static const char *const type_names[] = {"string", "int", "float", "bool",
                                         NULL};

/* Values a pattern must refuse to count as shell-safe: each would run a
 * command from some quoting (bare, '...' or "..."). Spaces are not among
 * them: a pattern that lets them through does so on purpose. */
static const char *const injections[] = {"x'; id; '", "x\"; id; echo \"",
                                         "$(id)",     "`id`",
                                         "a;id",      "a|id",
                                         "a&id",      "a\nid",
                                         NULL};

/* Characters a word may hold and stay one plain word in sh. */
static int bare_safe(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || strchr("_.,:/=+@%-", ch) != NULL;
}

static int all_bare_safe(const char *s) {
  for (; *s; s++)
    if (!bare_safe(*s))
      return 0;
  return 1;
}

static const prule *find_rule(const prules *p, const char *name) {
  for (size_t i = 0; p && i < p->n; i++)
    if (strcmp(p->r[i].name, name) == 0)
      return &p->r[i];
  return NULL;
}

/* The whole of s matches re (leftmost-longest: a full match is found if
 * one exists from offset 0). */
static int full_match(const regex_t *re, const char *s) {
  regmatch_t m;
  return regexec(re, s, 1, &m, 0) == 0 && m.rm_so == 0 &&
         (size_t)m.rm_eo == strlen(s);
}

static int parse_type(const ynode *v, ptype *out) {
  static const char *const aliases[] = {"integer", "number", "boolean", NULL};
  static const ptype alias_types[] = {PT_INT, PT_FLOAT, PT_BOOL};
  if (v->kind != YNODE_SCALAR)
    return -1;
  for (int i = 0; type_names[i]; i++)
    if (strcmp(v->str, type_names[i]) == 0) {
      *out = (ptype)(i + 1);
      return 0;
    }
  /* JSON Schema's names, as Airflow's Param takes them. */
  for (int i = 0; aliases[i]; i++)
    if (strcmp(v->str, aliases[i]) == 0) {
      *out = alias_types[i];
      return 0;
    }
  return -1;
}

/* Parses one key of a param's entry into r: the number of errors. */
static size_t parse_rule_key(const spec *s, prule *r, const ynode *k,
                             const ynode *v, diags *d) {
  const char *f = s->path;
  if (strcmp(k->str, "type") == 0) {
    if (parse_type(v, &r->type) == 0)
      return 0;
    diags_add(d, f, v->line, v->col,
              "param_schema '%s': 'type' must be string, int, float or "
              "bool",
              r->name);
  } else if (strcmp(k->str, "enum") == 0) {
    int ok = v->kind == YNODE_SEQ && v->n > 0;
    for (size_t i = 0; ok && i < v->n; i++)
      ok = v->items[i]->kind == YNODE_SCALAR;
    if (ok) {
      r->enums = v;
      return 0;
    }
    diags_add(d, f, v->line, v->col,
              "param_schema '%s': 'enum' must be a non-empty list of "
              "values",
              r->name);
  } else if (strcmp(k->str, "pattern") == 0) {
    int rc = v->kind == YNODE_SCALAR ? regcomp(&r->re, v->str, REG_EXTENDED)
                                     : REG_BADPAT;
    if (rc == 0) {
      r->has_re = 1;
      r->pattern = v;
      return 0;
    }
    char msg[256] = "not a string";
    if (v->kind == YNODE_SCALAR)
      regerror(rc, &r->re, msg, sizeof msg);
    diags_add(d, f, v->line, v->col,
              "param_schema '%s': bad 'pattern' (a POSIX extended regex): "
              "%s",
              r->name, msg);
  } else {
    int is_min = strcmp(k->str, "min") == 0;
    double x;
    if (ynode_float(v, &x) == 0 && isfinite(x)) {
      *(is_min ? &r->min : &r->max) = x;
      *(is_min ? &r->has_min : &r->has_max) = 1;
      return 0;
    }
    diags_add(d, f, v->line, v->col, "param_schema '%s': '%s' must be a number",
              r->name, k->str);
  }
  return 1;
}

/* Whether no value r admits can carry shell metacharacters. */
static int rule_safe(const prule *r) {
  if (r->type == PT_INT || r->type == PT_FLOAT || r->type == PT_BOOL)
    return 1;
  if (r->enums) {
    for (size_t i = 0; i < r->enums->n; i++)
      if (!all_bare_safe(r->enums->items[i]->str))
        return 0;
    return 1;
  }
  if (!r->has_re)
    return 0;
  for (size_t i = 0; injections[i]; i++)
    if (full_match(&r->re, injections[i]))
      return 0;
  return 1;
}

/* One param's entry (k: its name, v: its map): errors counted. */
static size_t parse_rule(spec *s, prules *p, const ynode *k, const ynode *v,
                         diags *d) {
  const char *f = s->path;
  if (!s->params || !ynode_get(s->params, k->str)) {
    diags_add(d, f, k->line, k->col,
              "param_schema names unknown param '%s' (declare it under "
              "'params')",
              k->str);
    return 1;
  }
  if (v->kind != YNODE_MAP) {
    diags_add(d, f, v->line, v->col,
              "param_schema '%s': expected a map of type, enum, pattern, "
              "min, max",
              k->str);
    return 1;
  }
  prule *r = &p->r[p->n++];
  memset(r, 0, sizeof *r);
  r->name = k->str;
  r->at = k;
  size_t errors = 0;
  for (size_t i = 0; i < v->n; i++) {
    const ynode *rk = v->items[2 * i];
    const char *m =
        rk->kind == YNODE_SCALAR ? closest_match(rk->str, rule_keys) : NULL;
    int twice = 0;
    for (size_t j = 0; j < i && rk->kind == YNODE_SCALAR; j++)
      twice |= strcmp(v->items[2 * j]->str, rk->str) == 0;
    if (twice) {
      diags_add(d, f, rk->line, rk->col,
                "param_schema '%s': '%s' is given twice", k->str, rk->str);
      errors++;
      continue;
    }
    if (rk->kind != YNODE_SCALAR || !m || strcmp(m, rk->str) != 0) {
      diags_add(d, f, rk->line, rk->col,
                "param_schema '%s': unknown key '%s'; expected type, enum, "
                "pattern, min or max",
                k->str, rk->kind == YNODE_SCALAR ? rk->str : "?");
      errors++;
      continue;
    }
    errors += parse_rule_key(s, r, rk, v->items[2 * i + 1], d);
  }
  if (r->has_min && r->has_max && r->min > r->max) {
    diags_add(d, f, k->line, k->col, "param_schema '%s': min is above max",
              k->str);
    errors++;
  }
  r->safe = rule_safe(r);
  return errors;
}

/* The key of the place at offset off of scalar v in prules.late: each
 * reference resolved at run time looks itself up there. */
static void landing_key(const ynode *v, size_t off, char *buf, size_t len) {
  snprintf(buf, len, "%p:%zu", (const void *)v, off);
}

/* Where an interpreter's code reads its arguments. */
static const char interp_argv[] = "sys.argv, @ARGV, ARGV, process.argv";

/* One script being scanned: the task it belongs to, the scalar, and what
 * reads it (NULL: a shell; else the interpreter and its flag). */
typedef struct scan {
  const spec *sp;
  prules *p;
  const spec_task *t;
  const ynode *v;
  const char *reader;
  diags *d;
  size_t errors;
} scan;

static int text_is(const char *x, size_t n, const char *lit) {
  return strlen(lit) == n && memcmp(x, lit, n) == 0;
}

/* What the reference x[0..n) (filter removed) carries into c's script:
 * sets *kind, *name and *key; 0 for what is neither outside nor run-time
 * text (env, run ids, a literal map's item, ...). */
static int classify_ref(const scan *c, const char *x, size_t n, ukind *kind,
                        char **name, char **key) {
  *name = *key = NULL;
  if (n > 7 && memcmp(x, "params.", 7) == 0) {
    *kind = U_PARAM;
    *name = xstrndup(x + 7, n - 7);
    return 1;
  }
  if (text_is(x, n, "run.trigger_files")) {
    *kind = U_TRIGGER;
    return 1;
  }
  if ((n > 6 && memcmp(x, "tasks.", 6) == 0 && memmem(x, n, ".outputs.", 9)) ||
      text_is(x, n, "run.trigger_dataset_outputs")) {
    *kind = U_OUTPUT;
    return 1;
  }
  int item = text_is(x, n, "item") || (n > 5 && memcmp(x, "item.", 5) == 0);
  if (!item || c->t->map == SIZE_MAX || c->t->map >= c->sp->n_maps)
    return 0;
  const spec_map *m = &c->sp->maps[c->t->map];
  if (m->param) {
    *kind = U_ITEM;
    *name = xstrdup(m->param);
    *key = n > 5 ? xstrndup(x + 5, n - 5) : NULL;
    return 1;
  }
  *kind = U_OUTPUT; /* a map over a task's output: known at run time */
  return m->placeholder != SIZE_MAX;
}

/* Where a `|sh` form cannot stand: why, or NULL where it can. */
static const char *sh_misplaced(const scan *c, shq q) {
  if (c->reader)
    return "|sh quotes a word for a shell, not for this interpreter; pass "
           "the value as an argument instead";
  if (q == SHQ_COMMENT)
    return "a newline in the value would end the comment; take the "
           "reference out of it";
  if (q == SHQ_HEREDOC)
    return "a heredoc's body reads no quotes (an unquoted one expands "
           "$(...) in the value); pass the value as an argument or in the "
           "environment instead";
  if (q != SHQ_BARE)
    return "the quoted word it gives would be read inside those quotes; "
           "close them before it and reopen them after";
  return NULL;
}

/* The reference at s[i] == "${" of c's script, with quoting q: recorded
 * when it lands raw, an error when its `|sh` is misplaced. Returns the
 * offset of its '}', or 0 when it has none (template.c reports it). */
static size_t scan_ref(scan *c, size_t i, shq q) {
  const char *s = c->v->str;
  const char *close = strchr(s + i, '}');
  if (!close)
    return 0;
  const char *x = s + i + 2;
  while (*x == ' ' || *x == '\t')
    x++;
  const char *bar = memchr(x, '|', (size_t)(close - x));
  const char *f = bar ? bar + 1 : close, *fe = close, *end = bar ? bar : close;
  while (end > x && (end[-1] == ' ' || end[-1] == '\t'))
    end--;
  while (f < fe && (*f == ' ' || *f == '\t'))
    f++;
  while (fe > f && (fe[-1] == ' ' || fe[-1] == '\t'))
    fe--;
  ukind kind;
  char *name, *key;
  size_t n = (size_t)(end - x);
  if (strncmp(x, "env:", 4) == 0 || !classify_ref(c, x, n, &kind, &name, &key))
    return (size_t)(close - s);
  if (!bar || !text_is(f, (size_t)(fe - f), "sh")) {
    prules *p = c->p;
    p->u = xrealloc(p->u, (p->nu + 1) * sizeof *p->u);
    p->u[p->nu++] =
        (shell_use){.kind = kind,
                    .name = name,
                    .key = key,
                    .ref = xstrndup(x, n),
                    .filter = bar ? xstrndup(f, (size_t)(fe - f)) : NULL,
                    .reader = c->reader ? xstrdup(c->reader) : NULL,
                    .v = c->v,
                    .off = i,
                    .q = q};
    if (kind == U_TRIGGER || kind == U_OUTPUT) {
      char k[64];
      landing_key(c->v, i, k, sizeof k);
      strmap_put(&p->late, k, p->nu - 1);
    }
    return (size_t)(close - s);
  }
  const char *why = sh_misplaced(c, q);
  if (why) {
    int line, col;
    tmpl_position(c->v, i, &line, &col);
    if (c->reader)
      diags_add(c->d, c->sp->path, line, col, "${%.*s} is in the %s code: %s",
                (int)(close - x), x, c->reader, why);
    else
      diags_add(c->d, c->sp->path, line, col,
                "${%.*s} is %s in the shell script: %s", (int)(close - x), x,
                shq_names[q], why);
    c->errors++;
  }
  free(name);
  free(key);
  return (size_t)(close - s);
}

/* An interpreter's code: every reference, its quotes not read. */
static void scan_code(scan *c) {
  const char *s = c->v->str;
  for (size_t i = 0; s[i]; i++) {
    if (s[i] == '$' && s[i + 1] == '$' && s[i + 2] == '{')
      i += 2;
    else if (s[i] == '$' && s[i + 1] == '{' && !(i = scan_ref(c, i, SHQ_CODE)))
      return;
  }
}

/* A heredoc whose body starts at the next line: its delimiter word,
 * whether `<<-` strips leading tabs. */
typedef struct heredoc {
  char *delim;
  int strip;
} heredoc;

enum { HEREDOCS_MAX = 8, NEST_MAX = 32 };

/* The heredoc operator at s[i] == "<<": parsed into *h (the quotes of
 * its word removed). Returns the offset of the word's last character. */
static size_t heredoc_word(const char *s, size_t i, heredoc *h) {
  i += 2;
  h->strip = s[i] == '-';
  i += (size_t)h->strip;
  while (s[i] == ' ' || s[i] == '\t')
    i++;
  sbuf b = {0};
  char q = 0;
  for (; s[i] && (q || !strchr(" \t\n;&|<>()", s[i])); i++) {
    if (q && s[i] == q)
      q = 0;
    else if (!q && (s[i] == '\'' || s[i] == '"'))
      q = s[i];
    else if (!q && s[i] == '\\' && s[i + 1])
      sbuf_putc(&b, s[++i]);
    else
      sbuf_putc(&b, s[i]);
  }
  h->delim = b.s ? sbuf_take(&b) : xstrdup("");
  return i - 1;
}

/* The bodies of heredocs h[0..n) from s[i] (after the operator's line):
 * each reference in them recorded as SHQ_HEREDOC. Returns the offset of
 * the newline that ends the last delimiter line (or of the end). */
static size_t heredoc_bodies(scan *c, size_t i, heredoc *h, size_t n) {
  const char *s = c->v->str;
  for (size_t k = 0; k < n; k++) {
    while (s[i]) {
      size_t ln = strcspn(s + i, "\n"), t = 0;
      while (h[k].strip && s[i + t] == '\t')
        t++;
      if (ln - t == strlen(h[k].delim) &&
          memcmp(s + i + t, h[k].delim, ln - t) == 0) {
        i += ln + (s[i + ln] == '\n');
        break;
      }
      for (size_t j = i; j < i + ln; j++) {
        if (s[j] == '$' && s[j + 1] == '$' && s[j + 2] == '{')
          j += 2;
        else if (s[j] == '$' && s[j + 1] == '{' &&
                 !(j = scan_ref(c, j, SHQ_HEREDOC)))
          return strlen(s);
      }
      i += ln + (s[i + ln] == '\n');
    }
  }
  return i ? i - 1 : 0;
}

/* The shell's quoting at one level: quotes, and the $( ... ) or `...`
 * levels it has opened (inside each, quoting starts afresh). */
typedef struct shstate {
  shq q;
  size_t depth;
  struct {
    shq q;
    char close; /* ')' or '`' */
    int parens;
  } nest[NEST_MAX];
  heredoc h[HEREDOCS_MAX];
  size_t nh;
} shstate;

static void nest_push(shstate *st, char close) {
  if (st->depth < NEST_MAX) {
    st->nest[st->depth].q = st->q;
    st->nest[st->depth].close = close;
    st->nest[st->depth].parens = 0;
  }
  st->depth++;
  st->q = SHQ_BARE;
}

static void nest_pop(shstate *st) {
  st->depth--;
  if (st->depth < NEST_MAX)
    st->q = st->nest[st->depth].q;
}

/* The comment at s[i] == '#', to the end of its line: a reference in it
 * still lands raw, as a newline in its value ends the comment. Returns
 * the offset before the newline (read next), SIZE_MAX at a reference
 * without its '}'. */
static size_t scan_comment(scan *c, size_t i) {
  const char *s = c->v->str;
  for (; s[i] && s[i] != '\n'; i++) {
    if (s[i] == '$' && s[i + 1] == '$' && s[i + 2] == '{')
      i += 2;
    else if (s[i] == '$' && s[i + 1] == '{' &&
             !(i = scan_ref(c, i, SHQ_COMMENT)))
      return SIZE_MAX;
  }
  return i - 1;
}

/* Character s[i] outside quotes; returns the offset to go on from
 * (SIZE_MAX: stop, at a reference without its '}'). */
static size_t shell_bare(scan *c, shstate *st, size_t i) {
  const char *s = c->v->str;
  char ch = s[i];
  int top = st->depth > 0 && st->depth <= NEST_MAX;
  if (ch == '\'' || ch == '"') {
    st->q = ch == '\'' ? SHQ_SINGLE : SHQ_DOUBLE;
  } else if (ch == '#' && (i == 0 || strchr(" \t\n;&|()<>", s[i - 1]))) {
    return scan_comment(c, i);
  } else if (ch == '(' && top) {
    st->nest[st->depth - 1].parens++;
  } else if (ch == ')' && top && st->nest[st->depth - 1].close == ')') {
    if (st->nest[st->depth - 1].parens-- == 0)
      nest_pop(st);
  } else if (ch == '<' && s[i + 1] == '<' && s[i + 2] != '<') {
    if (st->nh < HEREDOCS_MAX)
      return heredoc_word(s, i, &st->h[st->nh++]);
  } else if (ch == '\n' && st->nh) {
    i = heredoc_bodies(c, i + 1, st->h, st->nh);
    for (size_t k = 0; k < st->nh; k++)
      free(st->h[k].delim);
    st->nh = 0;
  }
  return i;
}

/* Records each reference that lands raw in shell script c->v, with the
 * quoting sh reads around it; a `|sh` form where its quotes would not be
 * read is an error. Tracks quotes, $( ... ) and `...` (quoting starts
 * afresh inside them), comments and heredocs. */
static void scan_shell(scan *c) {
  const char *s = c->v->str;
  shstate st = {0};
  for (size_t i = 0; s[i]; i++) {
    char ch = s[i];
    int top = st.depth > 0 && st.depth <= NEST_MAX;
    if (ch == '$' && s[i + 1] == '$' && s[i + 2] == '{') {
      i += 2;
    } else if (ch == '$' && s[i + 1] == '{') {
      if (!(i = scan_ref(c, i, st.q)))
        break;
    } else if (st.q == SHQ_SINGLE) {
      st.q = ch == '\'' ? SHQ_BARE : st.q;
    } else if (ch == '\\' && s[i + 1] &&
               !(s[i + 1] == '$' && s[i + 2] == '{')) {
      i++; /* (a "${" after it is still a reference, resolved before sh) */
    } else if (ch == '$' && s[i + 1] == '(') {
      nest_push(&st, ')');
      i++;
    } else if (ch == '`' && top && st.nest[st.depth - 1].close == '`') {
      nest_pop(&st);
    } else if (ch == '`') {
      nest_push(&st, '`');
    } else if (st.q == SHQ_DOUBLE) {
      st.q = ch == '"' ? SHQ_BARE : st.q;
    } else {
      if ((i = shell_bare(c, &st, i)) == SIZE_MAX)
        break;
    }
    if (!s[i])
      break;
  }
  for (size_t k = 0; k < st.nh; k++)
    free(st.h[k].delim);
}

/* Scans script v of task t (reader as in scan). */
static size_t scan_script(const spec *sp, prules *p, const spec_task *t,
                          const ynode *v, const char *reader, diags *d) {
  if (!v || v->kind != YNODE_SCALAR)
    return 0;
  scan c = {sp, p, t, v, reader, d, 0};
  if (reader)
    scan_code(&c);
  else
    scan_shell(&c);
  return c.errors;
}

static const char *base_name(const char *argv0) {
  const char *base = strrchr(argv0, '/');
  return base ? base + 1 : argv0;
}

static int is_shell(const char *argv0) {
  static const char *const shells[] = {"sh",  "bash", "dash", "zsh",
                                       "ksh", "ash",  NULL};
  const char *base = base_name(argv0);
  for (int i = 0; shells[i]; i++)
    if (strcmp(base, shells[i]) == 0)
      return 1;
  return 0;
}

/* The interpreter argv0 names, by the flag that gives it code: "c"
 * (python), "e" (perl, ruby; perl's -E too), "n" (node's -e/--eval,
 * -p/--print); 0 for none. */
static char interp_kind(const char *argv0) {
  const char *b = base_name(argv0);
  if (strncmp(b, "python", 6) == 0 &&
      strspn(b + 6, "0123456789.") == strlen(b + 6))
    return 'c';
  if (strcmp(b, "perl") == 0 || strcmp(b, "ruby") == 0)
    return 'e';
  if (strcmp(b, "node") == 0 || strcmp(b, "nodejs") == 0)
    return 'n';
  return 0;
}

/* The script of a shell's command line cmd[j] ...: the first operand
 * after the options when they hold -c (options -o NAME, +o NAME, -O NAME
 * and bash's --rcfile FILE take an argument; -euo pipefail combines). */
static const ynode *shell_script(const ynode *cmd, size_t j) {
  int c = 0;
  for (size_t i = j + 1; i < cmd->n; i++) {
    const ynode *a = cmd->items[i];
    const char *x = a->kind == YNODE_SCALAR ? a->str : "";
    if (strcmp(x, "--") == 0 || strcmp(x, "-") == 0)
      return c && i + 1 < cmd->n ? cmd->items[i + 1] : NULL;
    if (x[0] == '-' && x[1] == '-') {
      i += strcmp(x, "--rcfile") == 0 || strcmp(x, "--init-file") == 0;
    } else if ((x[0] == '-' || x[0] == '+') && x[1]) {
      for (const char *l = x + 1; *l; l++) {
        c |= *l == 'c';
        i += *l == 'o' || *l == 'O';
      }
    } else {
      return c ? a : NULL;
    }
  }
  return NULL;
}

/* Scans the code arguments of interpreter cmd[j] (kind as interp_kind):
 * the argument after a flag that ends in its code letter, up to the
 * first operand (a script file). */
static size_t scan_interp(const spec *s, prules *p, const spec_task *t,
                          const ynode *cmd, size_t j, char kind, diags *d) {
  size_t errors = 0;
  const char *base = base_name(cmd->items[j]->str);
  for (size_t i = j + 1; i + 1 < cmd->n; i++) {
    const ynode *a = cmd->items[i];
    const char *x = a->kind == YNODE_SCALAR ? a->str : "";
    size_t n = strlen(x);
    if (x[0] != '-' || n < 2)
      break;
    int code = kind == 'n'
                   ? strcmp(x, "-e") == 0 || strcmp(x, "--eval") == 0 ||
                         strcmp(x, "-p") == 0 || strcmp(x, "--print") == 0
                   : x[1] != '-' &&
                         (x[n - 1] == kind || (kind == 'e' && x[n - 1] == 'E'));
    if (!code)
      continue;
    char reader[64];
    snprintf(reader, sizeof reader, "%.40s %s", base, x);
    errors += scan_script(s, p, t, cmd->items[++i], reader, d);
    if (kind == 'c')
      break;
  }
  return errors;
}

/* The scripts of an exec task: `shell: true`'s command, the script of a
 * shell's -c (or -ec, -o pipefail -c, ...) and the code of python -c,
 * perl -e, ruby -e, node -e, behind wrappers (env, timeout, nohup). */
static size_t scan_task(const spec *s, prules *p, const spec_task *t,
                        diags *d) {
  size_t errors = 0;
  /* A mapped task's instances share its YAML: the first one stands for
   * all (the placeholder of a map known at run time is its only one). */
  int later = t->map != SIZE_MAX && t->item_index != 0 &&
              t->item_index != SPEC_ITEM_PENDING;
  if (later || !t->stage || strcmp(t->stage, "exec") != 0 || !t->with ||
      t->with->kind != YNODE_MAP)
    return 0;
  const ynode *cmd = ynode_get(t->with, "command");
  const ynode *sh = ynode_get(t->with, "shell");
  int shell = 0;
  if (!cmd)
    return 0;
  if (sh && ynode_bool(sh, &shell) == 0 && shell) {
    if (cmd->kind == YNODE_SCALAR)
      errors += scan_script(s, p, t, cmd, NULL, d);
    for (size_t i = 0; cmd->kind == YNODE_SEQ && i < cmd->n; i++)
      errors += scan_script(s, p, t, cmd->items[i], NULL, d);
    return errors;
  }
  /* The shell may follow a wrapper: [env, A=b, sh, -c, ...], [timeout,
   * 60, bash, -c, ...]. */
  for (size_t j = 0; cmd->kind == YNODE_SEQ && j < cmd->n; j++) {
    const ynode *a = cmd->items[j];
    if (a->kind != YNODE_SCALAR)
      continue;
    if (is_shell(a->str))
      return scan_script(s, p, t, shell_script(cmd, j), NULL, d);
    char kind = interp_kind(a->str);
    if (kind)
      return scan_interp(s, p, t, cmd, j, kind, d);
  }
  return 0;
}

size_t prules_compile(spec *s, const ynode *schema, diags *d) {
  prules *p = xcalloc(1, sizeof *p);
  s->rules = p;
  size_t errors = 0;
  if (schema && schema->kind == YNODE_MAP) {
    p->r = xcalloc(schema->n ? schema->n : 1, sizeof *p->r);
    for (size_t i = 0; i < schema->n; i++) {
      const ynode *k = schema->items[2 * i];
      if (k->kind == YNODE_SCALAR && find_rule(p, k->str)) {
        diags_add(d, s->path, k->line, k->col,
                  "param_schema: '%s' is given twice", k->str);
        errors++;
      } else if (k->kind == YNODE_SCALAR) {
        errors += parse_rule(s, p, k, schema->items[2 * i + 1], d);
      }
    }
  } else if (schema && !(schema->kind == YNODE_SCALAR &&
                         ynode_scalar_type(schema) == YSCALAR_NULL)) {
    diags_add(d, s->path, schema->line, schema->col,
              "'param_schema': expected a map of param names to their "
              "type, enum, pattern, min and max");
    errors++;
  }
  for (size_t i = 0; i < s->n_tasks; i++)
    errors += scan_task(s, p, &s->tasks[i], d);
  return errors;
}

void prules_destroy(prules *p) {
  if (!p)
    return;
  for (size_t i = 0; i < p->n; i++)
    if (p->r[i].has_re)
      regfree(&p->r[i].re);
  for (size_t i = 0; i < p->nu; i++) {
    free(p->u[i].name);
    free(p->u[i].key);
    free(p->u[i].ref);
    free(p->u[i].filter);
    free(p->u[i].reader);
  }
  free(p->r);
  free(p->u);
  strmap_free(&p->late);
  free(p);
}

/* "param 'NAME' is declared type: int; 'TEXT' is not an integer" */
static int type_error(const char *name, ptype t, const char *text, char *err,
                      size_t errlen) {
  static const char *const what[] = {"a string", "an integer", "a number",
                                     "true or false"};
  snprintf(err, errlen, "param '%s' is declared type: %s; '%s' is not %s", name,
           type_names[t - 1], text, what[t - 1]);
  return DR_EINVAL;
}

int prules_from_text(const spec *s, const char *name, const char *text,
                     cJSON **out, char *err, size_t errlen) {
  const prule *r = find_rule(s->rules, name);
  *out = NULL;
  if (!r || r->type == PT_ANY)
    return 0;
  char *end = NULL;
  double x = strtod(text, &end);
  int num = *text && !*end && isfinite(x);
  if (r->type == PT_STRING)
    *out = cJSON_CreateString(text);
  else if (r->type == PT_BOOL &&
           (strcmp(text, "true") == 0 || strcmp(text, "false") == 0))
    *out = cJSON_CreateBool(text[0] == 't');
  else if (num && (r->type == PT_FLOAT || x == floor(x)))
    *out = cJSON_CreateNumber(x);
  if (*out)
    return 1;
  return type_error(name, r->type, text, err, errlen);
}

/* Whether v is one of r's enum values: numbers compare as numbers. */
static int in_enum(const prule *r, const cJSON *v, const char *text) {
  for (size_t i = 0; i < r->enums->n; i++) {
    const ynode *e = r->enums->items[i];
    double x;
    if (cJSON_IsNumber(v) && ynode_float(e, &x) == 0 && x == v->valuedouble)
      return 1;
    if (strcmp(e->str, text) == 0)
      return 1;
  }
  return 0;
}

/* The type rule; text is v's scalar text. 0 or DR_EINVAL. */
static int check_type(const prule *r, const cJSON *v, const char *text,
                      char *err, size_t errlen) {
  int ok = r->type == PT_ANY || (r->type == PT_STRING && cJSON_IsString(v)) ||
           (r->type == PT_BOOL && cJSON_IsBool(v)) ||
           (r->type == PT_FLOAT && cJSON_IsNumber(v)) ||
           (r->type == PT_INT && cJSON_IsNumber(v) &&
            v->valuedouble == floor(v->valuedouble));
  return ok ? 0 : type_error(r->name, r->type, text, err, errlen);
}

/* Every rule of r against v (whose scalar text is text). */
static int check_rule(const prule *r, const cJSON *v, const char *text,
                      char *err, size_t errlen) {
  int rc = check_type(r, v, text, err, errlen);
  if (rc != 0)
    return rc;
  if (r->enums && !in_enum(r, v, text)) {
    sbuf b = {0};
    for (size_t i = 0; i < r->enums->n; i++)
      sbuf_printf(&b, "%s%s", i ? ", " : "", r->enums->items[i]->str);
    snprintf(err, errlen, "param '%s': '%s' is not one of its enum: [%s]",
             r->name, text, b.s);
    sbuf_free(&b);
    return DR_EINVAL;
  }
  if (r->has_re && !full_match(&r->re, text)) {
    snprintf(err, errlen,
             "param '%s': '%s' does not match its pattern '%s' (the whole "
             "value must match)",
             r->name, text, r->pattern->str);
    return DR_EINVAL;
  }
  int is_num = cJSON_IsNumber(v);
  double x = is_num ? v->valuedouble : 0;
  if ((r->has_min || r->has_max) &&
      (!is_num || (r->has_min && x < r->min) || (r->has_max && x > r->max))) {
    char lo[32] = "", hi[32] = "";
    if (r->has_min)
      snprintf(lo, sizeof lo, " >= %g", r->min);
    if (r->has_max)
      snprintf(hi, sizeof hi, "%s <= %g", r->has_min ? " and" : "", r->max);
    snprintf(err, errlen, "param '%s': '%s' is not a number%s%s", r->name, text,
             lo, hi);
    return DR_EINVAL;
  }
  return 0;
}

/* Where u lands, for messages: "(inside "...") in the shell script", or
 * "in the python3 -c code" (art: "a" or "the", where "a" drops an
 * interpreter's article), and with at, " at
 * FILE:LINE:COL". */
static void use_where(const spec *s, const shell_use *u, const char *art,
                      int at, char *buf, size_t len) {
  int line, col, k;
  tmpl_position(u->v, u->off, &line, &col);
  if (u->reader)
    k = snprintf(buf, len, "in %s%s code", art[0] == 't' ? "the " : "",
                 u->reader);
  else
    k = snprintf(buf, len, "(%s) in %s shell script", shq_names[u->q], art);
  if (at && k >= 0 && (size_t)k < len)
    snprintf(buf + k, len - (size_t)k, " at %s:%d:%d", s->path, line, col);
}

/* How to pass any value where u lands (warn: in check's words). */
static void use_fix(const shell_use *u, int warn, char *buf, size_t len) {
  if (u->reader)
    snprintf(buf, len, "pass the value as an argument instead (%s)",
             interp_argv);
  else if (u->q == SHQ_COMMENT)
    snprintf(buf, len,
             "take it out of the comment (a newline in the value would end "
             "it)");
  else
    snprintf(buf, len, "%s ${%s|sh}%s", warn ? "write" : "quote it there with",
             u->ref,
             u->kind == U_TRIGGER ? " (each name its own quoted word)"
             : warn               ? " to pass any value as one quoted word"
                                  : "");
}

/* The text v puts in a script: a scalar's text, else its JSON. */
static char *value_text(const cJSON *v) {
  char *t = v ? tmpl_scalar_text(v) : xstrdup("");
  if (!t) {
    char *j = cJSON_PrintUnformatted(v);
    t = xstrdup(j ? j : "");
    cJSON_free(j);
  }
  return t;
}

/* The first item of list v that is not a plain word where u lands (its
 * key's value for ${item.KEY}): its index, or -1. */
static int bad_item(const shell_use *u, const cJSON *v) {
  int k = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, v) {
    char *t =
        value_text(u->key ? cJSON_GetObjectItemCaseSensitive(it, u->key) : it);
    int ok = all_bare_safe(t);
    free(t);
    if (!ok)
      return k;
    k++;
  }
  return -1;
}

/* A value from outside against the scripts it lands in raw: only a plain
 * word is let through, whatever the quotes around it. Reading the quotes
 * would let more through ("a b" inside "..."), but a script may hand the
 * text on to what parses it again (eval, $(...), a heredoc, ssh, python
 * -c), and a plain word is the same text to all of them. A list param a
 * task maps over: each item where ${item} lands. */
static int check_shell(const spec *s, const prule *r, const char *name,
                       const cJSON *v, const char *text, char *err,
                       size_t errlen) {
  const prules *p = s->rules;
  for (size_t i = 0; p && i < p->nu; i++) {
    const shell_use *u = &p->u[i];
    if ((u->kind != U_PARAM && u->kind != U_ITEM) || strcmp(u->name, name))
      continue;
    int item = u->kind == U_ITEM ? (cJSON_IsArray(v) ? bad_item(u, v) : -1)
               : (r && r->safe) || all_bare_safe(text) ? -1
                                                       : 0;
    if (item < 0)
      continue;
    char place[1024], fix[256], what[128] = "";
    use_where(s, u, "the", 1, place, sizeof place);
    use_fix(u, 0, fix, sizeof fix);
    if (u->kind == U_ITEM)
      snprintf(what, sizeof what, "its item %d, as ${%.40s},", item, u->ref);
    snprintf(err, errlen,
             "param '%s': refused: %s lands raw %s, and a value for it "
             "from outside may hold only letters, digits and _.,:/=+@%%-; "
             "%s%s",
             name, what[0] ? what : "it", place, fix,
             u->kind == U_PARAM ? ", or declare its type, enum or pattern "
                                  "under param_schema"
                                : "");
    return DR_EINVAL;
  }
  return 0;
}

int prules_check_landing(const spec *s, const ynode *v, size_t off,
                         const cJSON *value, char *err, size_t errlen) {
  const prules *p = s->rules;
  char k[64];
  size_t i;
  landing_key(v, off, k, sizeof k);
  if (!p || !strmap_get(&p->late, k, &i))
    return 0;
  const shell_use *u = &p->u[i];
  char *t = value_text(value);
  int ok = all_bare_safe(t);
  free(t);
  if (ok)
    return 0;
  char place[1024], fix[256];
  use_where(s, u, "the", 0, place, sizeof place);
  use_fix(u, 0, fix, sizeof fix);
  snprintf(err, errlen,
           "refused: ${%s} lands raw %s, and its value here (%s) is not a "
           "plain word (letters, digits and _.,:/=+@%%-); %s",
           u->ref, place,
           u->kind == U_TRIGGER
               ? "the names of the files that triggered the run"
               : "made at run time by an upstream task",
           fix);
  return DR_EINVAL;
}

int prules_check(const spec *s, const char *name, const cJSON *v, int outside,
                 char *err, size_t errlen) {
  const prule *r = find_rule(s->rules, name);
  char *text = tmpl_scalar_text(v);
  if (!text)
    text = cJSON_PrintUnformatted(v);
  /* A secret's message is written whole, then its value hidden. */
  int secret = spec_param_secret(s, name);
  size_t mlen = secret ? errlen + strlen(text) + 1 : errlen;
  char *m = secret ? xcalloc(1, mlen) : err;
  int rc = 0;
  if (r)
    rc = check_rule(r, v, text, m, mlen);
  if (rc == 0 && outside)
    rc = check_shell(s, r, name, v, text, m, mlen);
  if (secret) {
    spec_hide_value(m, text, err, errlen);
    free(m);
  }
  free(text);
  return rc;
}

size_t prules_check_defaults(const spec *s, const cJSON *params, diags *d) {
  const prules *p = s->rules;
  size_t n = 0;
  for (size_t i = 0; p && i < p->n; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(params, p->r[i].name);
    char err[512];
    if (!v || prules_check(s, p->r[i].name, v, 0, err, sizeof err) == 0)
      continue;
    const ynode *at = ynode_get(s->params, p->r[i].name);
    diags_add(d, s->path, at->line, at->col, "default of %s", err);
    n++;
  }
  return n;
}

size_t prules_warn(const spec *s, FILE *f) {
  static const char *const refused[] = {
      "a value given with -p or the API is refused unless it is a plain "
      "word",
      "an item of the list param it maps over, given with -p or the API, is "
      "refused unless it is a plain word",
      "a name of the files that triggered the run that is not a plain word "
      "fails the task",
      "a value that is not a plain word fails the task at run time"};
  const prules *p = s->rules;
  size_t n = 0;
  for (size_t i = 0; p && i < p->nu; i++) {
    const shell_use *u = &p->u[i];
    const prule *r = u->kind == U_PARAM ? find_rule(p, u->name) : NULL;
    if (r && r->safe)
      continue;
    int line, col;
    char fix[256], where[256];
    tmpl_position(u->v, u->off, &line, &col);
    use_fix(u, 1, fix, sizeof fix);
    use_where(s, u, "a", 0, where, sizeof where);
    fprintf(f, "%s:%d:%d: warning: ${%s%s%s} lands raw %s: %s; %s%s\n", s->path,
            line, col, u->ref, u->filter ? "|" : "", u->filter ? u->filter : "",
            where, refused[u->kind], fix,
            u->kind == U_PARAM ? ", or declare the param's type, enum or "
                                 "pattern under param_schema"
                               : "");
    n++;
  }
  return n;
}
