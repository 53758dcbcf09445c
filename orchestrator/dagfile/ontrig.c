/*
 * ontrig: `on:` and `produces:` of a DAG file (ontrig.h).
 */
#include "ontrig.h"

#include <stdlib.h>
#include <string.h>

static const char *const on_keys[] = {"files", "datasets", NULL};
static const char *const files_keys[] = {"glob", "settle", NULL};

int ontrig_name_valid(const char *s) {
  if (!*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
    return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' || *s == '.'))
      return 0;
  return 1;
}

void ontrig_names_free(char **names, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

void ontrig_free(spec_on *on) {
  free(on->glob);
  ontrig_names_free(on->datasets, on->n_datasets);
  memset(on, 0, sizeof *on);
}

static int is_string(const ynode *v) {
  return v->kind == YNODE_SCALAR && ynode_scalar_type(v) != YSCALAR_NULL &&
         *v->str;
}

/* Whether v is a map whose keys are all in keys; what names it in
 * messages ("'on'"), expected says what it should be ("a map of ..."). */
static size_t check_map(const char *path, const ynode *v, const char *what,
                        const char *const *keys, const char *expected,
                        diags *d) {
  if (v->kind != YNODE_MAP) {
    diags_add(d, path, v->line, v->col, "%s: expected %s, found %s", what,
              expected, ynode_a_type(v));
    return 1;
  }
  size_t errors = 0;
  for (size_t i = 0; i < v->n; i++) {
    const ynode *k = v->items[2 * i];
    int known = 0;
    for (size_t j = 0; keys[j]; j++)
      known |= k->kind == YNODE_SCALAR && strcmp(k->str, keys[j]) == 0;
    if (!known) {
      diags_add(d, path, k->line, k->col,
                "unknown key '%s' in %s; expected %s or %s",
                k->kind == YNODE_SCALAR ? k->str : "?", what, keys[0], keys[1]);
      errors++;
    }
  }
  return errors;
}

/* A dataset name or a list of them (key: "produces", "on.datasets") into
 * *names, without duplicates. */
static size_t parse_names(const char *path, const ynode *v, const char *key,
                          const char *where, char ***names, size_t *n,
                          diags *d) {
  *names = NULL;
  *n = 0;
  const ynode *one = v;
  size_t count = 1;
  if (v->kind == YNODE_SEQ) {
    count = v->n;
  } else if (!is_string(v)) {
    diags_add(d, path, v->line, v->col,
              "'%s'%s: expected a dataset name or a list of them, found %s",
              key, where, ynode_a_type(v));
    return 1;
  }
  if (count == 0) {
    diags_add(d, path, v->line, v->col, "'%s'%s: the list is empty", key,
              where);
    return 1;
  }
  size_t errors = 0;
  *names = xcalloc(count, sizeof **names);
  for (size_t i = 0; i < count; i++) {
    const ynode *it = v->kind == YNODE_SEQ ? v->items[i] : one;
    if (!is_string(it) || !ontrig_name_valid(it->str)) {
      diags_add(d, path, it->line, it->col,
                "'%s'%s: a dataset name takes letters, digits, '_', '-' and "
                "'.', found %s%s%s",
                key, where, is_string(it) ? "\"" : ynode_a_type(it),
                is_string(it) ? it->str : "", is_string(it) ? "\"" : "");
      errors++;
      continue;
    }
    int dup = 0;
    for (size_t j = 0; j < *n; j++)
      dup |= strcmp((*names)[j], it->str) == 0;
    if (dup) {
      diags_add(d, path, it->line, it->col,
                "'%s'%s: dataset '%s' is named twice", key, where, it->str);
      errors++;
      continue;
    }
    (*names)[(*n)++] = xstrdup(it->str);
  }
  return errors;
}

size_t ontrig_parse_produces(const char *path, const ynode *v,
                             const char *where, char ***names, size_t *n,
                             diags *d) {
  return parse_names(path, v, "produces", where, names, n, d);
}

static size_t parse_files(const char *path, const char *dir, const ynode *v,
                          spec_on *on, diags *d) {
  size_t errors = check_map(path, v, "'on.files'", files_keys,
                            "a map with glob and settle", d);
  if (v->kind != YNODE_MAP)
    return errors;
  const ynode *g = ynode_get(v, "glob");
  if (!g) {
    diags_add(d, path, v->line, v->col,
              "'on.files': missing required key 'glob' (e.g. glob: "
              "data/incoming/*.txt)");
    errors++;
  } else if (!is_string(g)) {
    diags_add(d, path, g->line, g->col,
              "'on.files.glob': expected a file pattern, found %s",
              ynode_a_type(g));
    errors++;
  } else if (g->str[strlen(g->str) - 1] == '/') {
    diags_add(d, path, g->line, g->col,
              "'on.files.glob': \"%s\" names directories; it must match "
              "files (e.g. %s*)",
              g->str, g->str);
    errors++;
  } else {
    on->glob = g->str[0] == '/' ? xstrdup(g->str) : path_join(dir, g->str);
  }
  on->settle_s = ONTRIG_SETTLE_DEFAULT_S;
  const ynode *st = ynode_get(v, "settle");
  if (st && (!is_string(st) || parse_duration(st->str, &on->settle_s) != 0 ||
             on->settle_s < 0)) {
    diags_add(d, path, st->line, st->col,
              "'on.files.settle': expected a duration such as 30s or 2m, "
              "found %s%s%s",
              is_string(st) ? "\"" : ynode_a_type(st),
              is_string(st) ? st->str : "", is_string(st) ? "\"" : "");
    errors++;
  }
  return errors;
}

size_t ontrig_parse(const char *path, const char *dir, const ynode *v,
                    spec_on *on, diags *d) {
  memset(on, 0, sizeof *on);
  on->node = v;
  if (!v)
    return 0;
  size_t errors = check_map(path, v, "'on'", on_keys,
                            "a map with files and/or datasets", d);
  if (v->kind != YNODE_MAP)
    return errors;
  if (v->n == 0) {
    diags_add(d, path, v->line, v->col,
              "'on': expected files and/or datasets, found an empty map");
    return errors + 1;
  }
  const ynode *f = ynode_get(v, "files");
  if (f)
    errors += parse_files(path, dir, f, on, d);
  const ynode *ds = ynode_get(v, "datasets");
  if (ds)
    errors += parse_names(path, ds, "on.datasets", "", &on->datasets,
                          &on->n_datasets, d);
  return errors;
}
