/*
 * loader: finds stage plugins on disk, dlopens them and checks the
 * descriptor they return against the ABI rules of <dagrun/plugin.h>.
 */
#include "loader.h"

#include "base/util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DAGRUN_STAGE_DIR_REL
#error "DAGRUN_STAGE_DIR_REL must be defined by the build"
#endif

/* The size of dagrun_stage in ABI 1.0: every member up to and including
 * run. A descriptor smaller than this cannot be read safely. */
#define LOADER_STAGE_SIZE_1_0                                                  \
  (offsetof(dagrun_stage, run) + sizeof(((dagrun_stage *)0)->run))

/* The size of dagrun_stage up to and including choices (ABI 1.1). */
#define LOADER_STAGE_SIZE_1_1                                                  \
  (offsetof(dagrun_stage, choices) + sizeof(((dagrun_stage *)0)->choices))

/* The size of dagrun_stage up to and including check (ABI 1.2). */
#define LOADER_STAGE_SIZE_1_2                                                  \
  (offsetof(dagrun_stage, check) + sizeof(((dagrun_stage *)0)->check))

static const char **search_dirs;

/* realpath() when the path exists, else a copy: the directory may be
 * created later, and the user should still see what we looked for. */
static char *normalise(const char *path) {
  char *r = realpath(path, NULL);
  return r ? r : xstrdup(path);
}

/* <dir of /proc/self/exe>/DAGRUN_STAGE_DIR_REL, normalised. The build tree
 * mirrors an installed prefix, so this works in both. */
static char *builtin_stage_dir(void) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0)
    return NULL;
  exe[n] = '\0';
  char *dir = path_dirname(exe);
  char *joined = path_join(dir, DAGRUN_STAGE_DIR_REL);
  char *r = normalise(joined);
  free(dir);
  free(joined);
  return r;
}

int loader_builtin(const loader_plugin *p, const char *stage) {
  static char *dir;
  if (!dir && !(dir = builtin_stage_dir()))
    return 0;
  char *file = xasprintf("%s/%s.so", dir, stage);
  char *given = normalise(p->path);
  int same = strcmp(file, given) == 0 && strcmp(p->stage->name, stage) == 0;
  free(file);
  free(given);
  return same;
}

int loader_is_builtin_file(const char *path) {
  static char *dir;
  if (!dir && !(dir = builtin_stage_dir()))
    return 0;
  char *given = normalise(path);
  char *parent = path_dirname(given);
  int same = strcmp(parent, dir) == 0;
  free(parent);
  free(given);
  return same;
}

const char *const *loader_search_path(void) {
  if (search_dirs)
    return (const char *const *)search_dirs;
  const char **v = NULL;
  size_t n = 0, cap = 0;
  const char *env = getenv("DAGRUN_PLUGIN_PATH");
  if (env) {
    const char *p = env;
    while (*p) {
      const char *end = strchr(p, ':');
      size_t len = end ? (size_t)(end - p) : strlen(p);
      /* An empty entry ("a::b", a trailing ':') means nothing; skip it
       * rather than silently searching the current directory. */
      if (len > 0) {
        char *raw = xstrndup(p, len);
        VEC_PUSH(v, n, cap, (const char *)normalise(raw));
        free(raw);
      }
      p += len;
      if (*p == ':')
        p++;
    }
  }
  char *builtin = builtin_stage_dir();
  if (builtin)
    VEC_PUSH(v, n, cap, (const char *)builtin);
  VEC_PUSH(v, n, cap, (const char *)NULL);
  search_dirs = v;
  return (const char *const *)search_dirs;
}

static int is_regular_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int has_suffix(const char *s, const char *suffix) {
  size_t ls = strlen(s), lx = strlen(suffix);
  return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* Stage names ("<name>.so" files) in every search directory, for "did you
 * mean". NULL-terminated; caller frees each and the array. */
static char **list_stage_names(void) {
  char **v = NULL;
  size_t n = 0, cap = 0;
  for (const char *const *d = loader_search_path(); *d; d++) {
    DIR *dir = opendir(*d);
    if (!dir)
      continue;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
      if (!has_suffix(e->d_name, ".so") || strlen(e->d_name) <= 3)
        continue;
      VEC_PUSH(v, n, cap, xstrndup(e->d_name, strlen(e->d_name) - 3));
    }
    closedir(dir);
  }
  VEC_PUSH(v, n, cap, NULL);
  return v;
}

static void free_names(char **v) {
  for (char **p = v; p && *p; p++)
    free(*p);
  free(v);
}

static int find_path(const char *stage, const char *base_dir, char **path,
                     char *err, size_t errlen) {
  char *joined = path_join(base_dir ? base_dir : ".", stage);
  if (!is_regular_file(joined)) {
    snprintf(err, errlen, "stage file not found: %s (looked for %s)", stage,
             joined);
    free(joined);
    return DR_ESTAGE;
  }
  *path = normalise(joined);
  free(joined);
  return 0;
}

int loader_find(const char *stage, const char *base_dir, char **path, char *err,
                size_t errlen) {
  *path = NULL;
  if (!stage || !*stage) {
    snprintf(err, errlen, "empty stage name");
    return DR_ESTAGE;
  }
  if (strchr(stage, '/'))
    return find_path(stage, base_dir, path, err, errlen);

  char *file = xasprintf("%s.so", stage);
  for (const char *const *d = loader_search_path(); *d; d++) {
    char *candidate = path_join(*d, file);
    if (is_regular_file(candidate)) {
      *path = candidate;
      free(file);
      return 0;
    }
    free(candidate);
  }

  /* Not found: say where we looked, and offer the closest name. */
  sbuf b = {0};
  sbuf_printf(&b, "unknown stage '%s': no %s in ", stage, file);
  const char *const *dirs = loader_search_path();
  if (!dirs[0])
    sbuf_puts(&b, "any directory (no search path)");
  for (size_t i = 0; dirs[i]; i++)
    sbuf_printf(&b, "%s%s", i ? ", " : "", dirs[i]);
  char **names = list_stage_names();
  const char *best = closest_match(stage, (const char *const *)names);
  if (best)
    sbuf_printf(&b, "; did you mean '%s'?", best);
  /* "hello.so" next to the DAG is a path the user forgot to mark as one. */
  if (has_suffix(stage, ".so")) {
    char *rel = path_join(base_dir ? base_dir : ".", stage);
    if (is_regular_file(rel))
      sbuf_printf(&b, "; to use the file %s, write stage: ./%s", rel, stage);
    free(rel);
  }
  free_names(names);
  snprintf(err, errlen, "%s", b.s);
  sbuf_free(&b);
  free(file);
  return DR_ESTAGE;
}

/* Stage names are [a-z0-9_-]+: they appear in YAML, file names and logs. */
static int valid_stage_name(const char *s) {
  if (!*s)
    return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
          *s == '-'))
      return 0;
  return 1;
}

const dagrun_param_choice *loader_choices(const dagrun_stage *st) {
  /* A plugin built for ABI 1.0 has no such member: reading it would read
   * past its descriptor. */
  return st->struct_size >= LOADER_STAGE_SIZE_1_1 ? st->choices : NULL;
}

dagrun_check_fn loader_check(const dagrun_stage *st) {
  return st->struct_size >= LOADER_STAGE_SIZE_1_2 ? st->check : NULL;
}

const char *const *loader_param_choices(const dagrun_param_choice *choices,
                                        const char *param) {
  for (const dagrun_param_choice *c = choices; c && c->param; c++)
    if (strcmp(c->param, param) == 0)
      return c->values;
  return NULL;
}

/* Strict decimal integer, the whole string. */
static int parse_int(const char *z, long long *out) {
  const char *p = z + (*z == '-' || *z == '+');
  if (*p < '0' || *p > '9')
    return -1;
  char *end;
  errno = 0;
  *out = strtoll(z, &end, 10);
  return *end || errno ? -1 : 0;
}

long loader_choice_index(const char *const *values, dagrun_param_type type,
                         const char *z) {
  long long want, have;
  int numeric = type == DAGRUN_PARAM_INT && parse_int(z, &want) == 0;
  for (long i = 0; values && values[i]; i++) {
    if (numeric ? parse_int(values[i], &have) == 0 && have == want
                : strcmp(values[i], z) == 0)
      return i;
  }
  return -1;
}

void loader_choices_join(sbuf *b, const char *const *values) {
  for (size_t i = 0; values && values[i]; i++)
    sbuf_printf(b, "%s%s", i ? ", " : "", values[i]);
}

/* The choices of st, as the host will use them: each names a declared
 * STRING or INT param once, lists at least one value (integers for an INT
 * param), and holds the param's default. 0, or DR_EPLUGIN with err. */
static int check_choices(const dagrun_stage *st, char *err, size_t errlen) {
  for (const dagrun_param_choice *c = loader_choices(st); c && c->param; c++) {
    const dagrun_param_spec *p = st->params;
    while (p && p->name && strcmp(p->name, c->param) != 0)
      p++;
    if (!p || !p->name) {
      snprintf(err, errlen,
               "stage '%s' lists choices for param '%s', which it does not "
               "declare",
               st->name, c->param);
      return DR_EPLUGIN;
    }
    const dagrun_param_choice *first = loader_choices(st);
    while (strcmp(first->param, c->param) != 0)
      first++;
    if (first != c) {
      snprintf(err, errlen, "stage '%s' lists choices for param '%s' twice",
               st->name, c->param);
      return DR_EPLUGIN;
    }
    if (p->type != DAGRUN_PARAM_STRING && p->type != DAGRUN_PARAM_INT) {
      snprintf(err, errlen,
               "stage '%s' param '%s': choices are for string and int "
               "params, not %s ones",
               st->name, c->param,
               p->type == DAGRUN_PARAM_FLOAT  ? "float"
               : p->type == DAGRUN_PARAM_BOOL ? "bool"
               : p->type == DAGRUN_PARAM_LIST ? "list"
                                              : "map");
      return DR_EPLUGIN;
    }
    if (!c->values || !c->values[0]) {
      snprintf(err, errlen,
               "stage '%s' param '%s' has an empty list of "
               "choices",
               st->name, c->param);
      return DR_EPLUGIN;
    }
    long long x;
    for (size_t i = 0; p->type == DAGRUN_PARAM_INT && c->values[i]; i++) {
      if (parse_int(c->values[i], &x) != 0) {
        snprintf(err, errlen,
                 "stage '%s' param '%s': choice '%s' is not an integer",
                 st->name, c->param, c->values[i]);
        return DR_EPLUGIN;
      }
    }
    if (p->default_value &&
        loader_choice_index(c->values, p->type, p->default_value) < 0) {
      sbuf b = {0};
      loader_choices_join(&b, c->values);
      snprintf(err, errlen,
               "stage '%s' param '%s': its default '%s' is not one of %s",
               st->name, c->param, p->default_value, b.s);
      sbuf_free(&b);
      return DR_EPLUGIN;
    }
  }
  return 0;
}

int loader_check_stage(const dagrun_stage *st, char *err, size_t errlen) {
  uint32_t major = DAGRUN_ABI_MAJOR_OF(st->abi_version);
  uint32_t minor = DAGRUN_ABI_MINOR_OF(st->abi_version);
  /* A different major means incompatible layouts; a newer minor means the
   * plugin may call host members this dagrun does not have. */
  if (major != DAGRUN_ABI_MAJOR || minor > DAGRUN_ABI_MINOR) {
    snprintf(err, errlen,
             "built for dagrun plugin ABI %u.%u, this dagrun supports ABI "
             "%d.%d (rebuild the plugin against this dagrun's "
             "<dagrun/plugin.h>)",
             major, minor, DAGRUN_ABI_MAJOR, DAGRUN_ABI_MINOR);
    return DR_EABI;
  }
  if (st->struct_size < LOADER_STAGE_SIZE_1_0) {
    snprintf(err, errlen,
             "stage descriptor is %u bytes, smaller than ABI 1.0's %zu "
             "(define it with DAGRUN_STAGE_HEADER)",
             st->struct_size, (size_t)LOADER_STAGE_SIZE_1_0);
    return DR_EABI;
  }
  if (!st->name || !valid_stage_name(st->name)) {
    snprintf(err, errlen, "stage name %s%s%s is not [a-z0-9_-]+",
             st->name ? "'" : "", st->name ? st->name : "(NULL)",
             st->name ? "'" : "");
    return DR_EPLUGIN;
  }
  if (!st->run) {
    snprintf(err, errlen, "stage '%s' has no run function", st->name);
    return DR_EPLUGIN;
  }
  for (const dagrun_param_spec *p = st->params; p && p->name; p++) {
    if (p->type < DAGRUN_PARAM_STRING || p->type > DAGRUN_PARAM_MAP) {
      snprintf(err, errlen, "param '%s' has unknown type %d", p->name,
               (int)p->type);
      return DR_EPLUGIN;
    }
  }
  return check_choices(st, err, errlen);
}

int loader_open(const char *path, loader_plugin **out, char *err,
                size_t errlen) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT)
      snprintf(err, errlen, "%s: no such file", path);
    else
      snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return DR_EPLUGIN;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file", path);
    return DR_EPLUGIN;
  }

  /* Without a '/', dlopen would search the library path instead. */
  char *open_path = strchr(path, '/') ? xstrdup(path) : xasprintf("./%s", path);
  /* RTLD_NODELETE: a stage's libraries stay mapped after dlclose. Runtimes
   * such as OpenMP and OpenBLAS (the train stage's) start threads and keep
   * global state that unloading would pull out from under them. */
  void *h = dlopen(open_path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  free(open_path);
  if (!h) {
    const char *why = dlerror();
    if (!why)
      why = "unknown dlopen error";
    /* dlerror usually starts with the path; say it once. */
    const char *colon = strstr(why, ": ");
    if (colon && strstr(why, path) && strstr(why, path) < colon)
      why = colon + 2;
    snprintf(err, errlen, "%s: not a loadable shared object: %s", path, why);
    return DR_EPLUGIN;
  }

  dlerror();
  void *sym = dlsym(h, DAGRUN_STAGE_ENTRY_NAME);
  if (!sym) {
    snprintf(err, errlen,
             "%s: not a dagrun stage plugin: no symbol '%s' (export it with "
             "DAGRUN_EXPORT)",
             path, DAGRUN_STAGE_ENTRY_NAME);
    dlclose(h);
    return DR_EPLUGIN;
  }
  /* POSIX guarantees object and function pointers convert via dlsym. */
  dagrun_stage_entry_fn entry;
  memcpy(&entry, &sym, sizeof(entry));
  const dagrun_stage *stage = entry();
  if (!stage) {
    snprintf(err, errlen, "%s: %s() returned NULL", path,
             DAGRUN_STAGE_ENTRY_NAME);
    dlclose(h);
    return DR_EPLUGIN;
  }
  char why[512];
  int rc = loader_check_stage(stage, why, sizeof(why));
  if (rc != 0) {
    snprintf(err, errlen, "%s: %s", path, why);
    dlclose(h);
    return rc;
  }

  loader_plugin *p = xcalloc(1, sizeof(*p));
  p->path = xstrdup(path);
  p->handle = h;
  p->stage = stage;
  *out = p;
  return 0;
}

void loader_close(loader_plugin *p) {
  if (!p)
    return;
  /* A failing dlclose leaves the library mapped; nothing else to do. */
  if (p->handle)
    (void)dlclose(p->handle);
  if (p->release)
    p->release(p->storage);
  free(p->path);
  free(p);
}
