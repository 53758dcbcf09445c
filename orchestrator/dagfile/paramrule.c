/*
 * paramrule: `param_schema:` compiled, values checked against it, and the
 * places where a param lands unquoted in a shell script.
 */
#include "paramrule.h"

#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "template.h"

typedef enum ptype { PT_ANY, PT_STRING, PT_INT, PT_FLOAT, PT_BOOL } ptype;

/* Quoting around a place in a shell script, as sh reads it. */
typedef enum shq { SHQ_BARE, SHQ_SINGLE, SHQ_DOUBLE } shq;
static const char *const shq_names[] = {"unquoted", "inside '...'",
                                        "inside \"...\""};

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

/* One `${params.NAME}` inside a shell script, without `|sh`. */
typedef struct shell_use {
  char *name;
  const ynode *v; /* the script scalar */
  size_t off;     /* of "${" in v->str */
  shq q;
} shell_use;

struct prules {
  prule *r;
  size_t n;
  shell_use *u;
  size_t nu;
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

/* Records each `${params.NAME}` without `|sh` in script v, with the quoting
 * sh reads around it. A `|sh` form inside quotes is an error: its quoted
 * word would be read inside them, where its quotes mean nothing. Returns
 * the number of diagnostics added to d. */
static size_t scan_script(const spec *sp, prules *p, const ynode *v, diags *d) {
  size_t errors = 0;
  const char *s = v->str;
  shq q = SHQ_BARE;
  for (size_t i = 0; s[i]; i++) {
    char ch = s[i];
    if (ch == '$' && s[i + 1] == '$' && s[i + 2] == '{') {
      i += 2;
      continue;
    }
    if (ch == '$' && s[i + 1] == '{') {
      const char *close = strchr(s + i, '}');
      if (!close)
        return errors; /* template.c reports it */
      const char *x = s + i + 2;
      while (*x == ' ' || *x == '\t')
        x++;
      size_t ln = 0;
      if (strncmp(x, "params.", 7) == 0)
        while (x + 7 + ln < close && strchr("|} \t", x[7 + ln]) == NULL)
          ln++;
      const char *bar = memchr(x, '|', (size_t)(close - x));
      if (ln > 0 && !bar) {
        p->u = xrealloc(p->u, (p->nu + 1) * sizeof *p->u);
        p->u[p->nu++] = (shell_use){xstrndup(x + 7, ln), v, i, q};
      } else if (ln > 0 && q != SHQ_BARE) {
        int line, col;
        tmpl_position(v, i, &line, &col);
        diags_add(d, sp->path, line, col,
                  "${params.%.*s|sh} is %s in the shell script: the quoted "
                  "word it gives would be read inside those quotes; close "
                  "them before it and reopen them after",
                  (int)ln, x + 7, shq_names[q]);
        errors++;
      }
      i = (size_t)(close - s);
      continue;
    }
    if (q != SHQ_SINGLE && ch == '\\' && s[i + 1]) {
      i++;
    } else if (q == SHQ_BARE && (ch == '\'' || ch == '"')) {
      q = ch == '\'' ? SHQ_SINGLE : SHQ_DOUBLE;
    } else if ((q == SHQ_SINGLE && ch == '\'') ||
               (q == SHQ_DOUBLE && ch == '"')) {
      q = SHQ_BARE;
    }
  }
  return errors;
}

static int is_shell(const char *argv0) {
  static const char *const shells[] = {"sh",  "bash", "dash", "zsh",
                                       "ksh", "ash",  NULL};
  const char *base = strrchr(argv0, '/');
  base = base ? base + 1 : argv0;
  for (int i = 0; shells[i]; i++)
    if (strcmp(base, shells[i]) == 0)
      return 1;
  return 0;
}

/* The shell scripts of an exec task: `shell: true`'s command, or the
 * argument after a shell's -c (or -ec, -xc, ...). */
static size_t scan_task(const spec *s, prules *p, const spec_task *t,
                        diags *d) {
  size_t errors = 0;
  if (!t->stage || strcmp(t->stage, "exec") != 0 || !t->with ||
      t->with->kind != YNODE_MAP)
    return 0;
  const ynode *cmd = ynode_get(t->with, "command");
  const ynode *sh = ynode_get(t->with, "shell");
  int shell = 0;
  if (!cmd)
    return 0;
  if (sh && ynode_bool(sh, &shell) == 0 && shell) {
    if (cmd->kind == YNODE_SCALAR)
      errors += scan_script(s, p, cmd, d);
    for (size_t i = 0; cmd->kind == YNODE_SEQ && i < cmd->n; i++)
      if (cmd->items[i]->kind == YNODE_SCALAR)
        errors += scan_script(s, p, cmd->items[i], d);
    return errors;
  }
  /* The shell may follow a wrapper: [env, A=b, sh, -c, ...], [timeout,
   * 60, bash, -c, ...]. */
  size_t j = 0;
  while (cmd->kind == YNODE_SEQ && j < cmd->n &&
         !(cmd->items[j]->kind == YNODE_SCALAR && is_shell(cmd->items[j]->str)))
    j++;
  for (size_t i = j + 1; cmd->kind == YNODE_SEQ && i + 1 < cmd->n; i++) {
    const ynode *a = cmd->items[i];
    if (a->kind != YNODE_SCALAR || a->str[0] != '-' || a->str[1] == '-')
      return 0;
    if (strchr(a->str, 'c'))
      return cmd->items[i + 1]->kind == YNODE_SCALAR
                 ? scan_script(s, p, cmd->items[i + 1], d)
                 : 0;
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
  for (size_t i = 0; i < p->nu; i++)
    free(p->u[i].name);
  free(p->r);
  free(p->u);
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

/* A value from outside against the shell scripts it lands in raw: only a
 * plain word is let through, whatever the quotes around it. Reading the
 * quotes would let more through ("a b" inside "..."), but a script may
 * hand the text on to what parses it again (eval, $(...), a heredoc, ssh,
 * python -c), and a plain word is the same text to all of them. */
static int check_shell(const spec *s, const char *name, const char *text,
                       char *err, size_t errlen) {
  const prules *p = s->rules;
  for (size_t i = 0; p && i < p->nu; i++) {
    const shell_use *u = &p->u[i];
    if (strcmp(u->name, name) != 0 || all_bare_safe(text))
      continue;
    int line, col;
    tmpl_position(u->v, u->off, &line, &col);
    snprintf(err, errlen,
             "param '%s': refused: it lands raw (%s) in the shell script at "
             "%s:%d:%d, and a value for it from outside may hold only "
             "letters, digits and _.,:/=+@%%-; quote it there with "
             "${params.%s|sh}, or declare its type, enum or pattern under "
             "param_schema",
             name, shq_names[u->q], s->path, line, col, name);
    return DR_EINVAL;
  }
  return 0;
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
  if (rc == 0 && outside && !(r && r->safe))
    rc = check_shell(s, name, text, m, mlen);
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
  const prules *p = s->rules;
  size_t n = 0;
  for (size_t i = 0; p && i < p->nu; i++) {
    const shell_use *u = &p->u[i];
    const prule *r = find_rule(p, u->name);
    if (r && r->safe)
      continue;
    int line, col;
    tmpl_position(u->v, u->off, &line, &col);
    fprintf(f,
            "%s:%d:%d: warning: ${params.%s} lands raw (%s) in a shell "
            "script: a value given with -p or the API is refused unless it "
            "is a plain word; write ${params.%s|sh} to pass any value as one "
            "quoted word, or declare the param's type, enum or pattern "
            "under param_schema\n",
            s->path, line, col, u->name, shq_names[u->q], u->name);
    n++;
  }
  return n;
}
