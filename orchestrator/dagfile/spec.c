/*
 * spec: the YAML tree of a DAG file -> tasks with settings, checking the
 * structure as it goes. Every problem becomes one diagnostic and parsing
 * goes on, so that one `dagrun check` shows all of them.
 */
#include "spec.h"

#include "base/cron.h"
#include "dag.h"
#include "lib/fileio.h"
#include "mapping.h"
#include "paramrule.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const top_keys[] = {
    "dag",          "description",     "params",       "defaults",
    "max_parallel", "pools",           "tasks",        "schedule",
    "timezone",     "catchup",         "overlap",      "alerts",
    "secrets",      "max_active_runs", "param_schema", NULL};

/* A task's keys; the ones from "retries" on are settings that `defaults`
 * may also give. */
static const char *const task_keys[] = {"stage",
                                        "needs",
                                        "with",
                                        "description",
                                        "outputs",
                                        "branch",
                                        "map",
                                        "approval",
                                        "retries",
                                        "retry_delay",
                                        "retry_backoff",
                                        "retry_max_delay",
                                        "retry_jitter",
                                        "retry_on",
                                        "timeout",
                                        "heartbeat_timeout",
                                        "kill_grace",
                                        "pool",
                                        "trigger",
                                        "env",
                                        "cache",
                                        "world_size",
                                        "launcher",
                                        "hosts",
                                        "rendezvous",
                                        NULL};
enum { FIRST_SETTING = 7 };
static const char *const *const setting_keys = task_keys + FIRST_SETTING;

/* Indexed by spec_trigger. */
static const char *const trigger_names[] = {
    "all_success", "all_done",    "one_failed",
    "one_success", "none_failed", "none_failed_min_one_success",
    "all_failed",  "all_skipped", "none_skipped",
    NULL};

const char *spec_trigger_name(spec_trigger t) { return trigger_names[t]; }

static const char *const launcher_names[] = {"local", "mpirun", "srun", NULL};
static const char *const overlap_names[] = {"skip", "queue", "allow", NULL};

/* Beyond this many unknown `needs`, stop searching 100,000 names for a
 * suggestion: each search costs a pass over every task name. */
enum { MAX_NEED_SUGGESTIONS = 50 };

typedef struct ctx {
  spec *s;
  diags *d;
  size_t errors;
  const char **names; /* NULL-terminated task names, built on demand */
  size_t n_suggested;
} ctx;

static void err(ctx *c, const ynode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void err(ctx *c, const ynode *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diags_vadd(c->d, c->s->path, at ? at->line : 0, at ? at->col : 0, fmt, ap);
  va_end(ap);
  c->errors++;
}

/* "a string (\"two\")", "an integer (5)", "a list", ... for messages. */
static void describe(sbuf *b, const ynode *v) {
  sbuf_puts(b, ynode_a_type(v));
  if (v->kind != YNODE_SCALAR || ynode_scalar_type(v) == YSCALAR_NULL)
    return;
  size_t len = strlen(v->str);
  const char *q = ynode_scalar_type(v) == YSCALAR_STRING ? "\"" : "";
  if (len > 60)
    sbuf_printf(b, " (%s%.57s...%s)", q, v->str, q);
  else
    sbuf_printf(b, " (%s%s%s)", q, v->str, q);
}

/* "'<key>'<where>: expected <what>, found <description of v>" */
static void type_err(ctx *c, const ynode *v, const char *key, const char *where,
                     const char *what) {
  sbuf b = {0};
  describe(&b, v);
  err(c, v, "'%s'%s: expected %s, found %s", key, where, what, b.s);
  sbuf_free(&b);
}

static void list_keys(sbuf *b, const char *const *keys) {
  for (size_t i = 0; keys[i]; i++)
    sbuf_printf(b, "%s%s", i ? ", " : "", keys[i]);
}

static void unknown_key(ctx *c, const ynode *k, const char *where,
                        const char *const *keys) {
  const char *m = closest_match(k->str, keys);
  if (m) {
    err(c, k, "unknown key '%s'%s; did you mean '%s'?", k->str, where, m);
    return;
  }
  sbuf b = {0};
  list_keys(&b, keys);
  err(c, k, "unknown key '%s'%s; expected one of: %s", k->str, where, b.s);
  sbuf_free(&b);
}

static int in_list(const char *s, const char *const *list) {
  for (; *list; list++)
    if (strcmp(s, *list) == 0)
      return 1;
  return 0;
}

static int name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
}

/* Names that appear in templates (${tasks.NAME...}, ${params.NAME}) and in
 * directory names: letters, digits, '_' and '-', at most NAME_MAX_LEN of
 * them (a directory name has 255 bytes, and a mapped task's adds its
 * index). */
enum { NAME_MAX_LEN = 128 };
static int valid_name(const char *s) {
  if (!*s || strlen(s) > NAME_MAX_LEN)
    return 0;
  for (; *s; s++)
    if (!name_char(*s))
      return 0;
  return 1;
}

/* A DAG name also names a directory under runs/; dots are allowed. */
static int valid_dag_name(const char *s) {
  if (!*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 ||
      strlen(s) > NAME_MAX_LEN)
    return 0;
  for (; *s; s++)
    if (!name_char(*s) && *s != '.')
      return 0;
  return 1;
}

static int valid_env_name(const char *s) {
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
    return 0;
  for (s++; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '_'))
      return 0;
  return 1;
}

/* Checks that every key of a map is a scalar and appears once. Small maps
 * compare pairwise; big ones (params of a generated file) use a hash map.
 * Returns the number of problems. */
static size_t check_keys(ctx *c, const ynode *map, const char *where) {
  size_t bad = 0;
  strmap seen = {0};
  int hashed = map->n > 16;
  for (size_t i = 0; i < map->n; i++) {
    const ynode *k = map->items[2 * i];
    if (k->kind != YNODE_SCALAR) {
      err(c, k, "expected a name as key%s, found %s", where, ynode_a_type(k));
      bad++;
      continue;
    }
    size_t first = SIZE_MAX;
    if (hashed) {
      if (!strmap_get(&seen, k->str, &first))
        strmap_put(&seen, k->str, i);
    } else {
      for (size_t j = 0; j < i; j++) {
        const ynode *kj = map->items[2 * j];
        if (kj->kind == YNODE_SCALAR && strcmp(kj->str, k->str) == 0) {
          first = j;
          break;
        }
      }
    }
    if (first != SIZE_MAX) {
      err(c, k, "duplicate key '%s'%s (first set at line %d)", k->str, where,
          map->items[2 * first]->line);
      bad++;
    }
  }
  strmap_free(&seen);
  return bad;
}

/* A string-like scalar: anything but null, a list or a map. */
static const char *get_string(ctx *c, const ynode *v, const char *key,
                              const char *where, const char *what) {
  if (v->kind != YNODE_SCALAR || ynode_scalar_type(v) == YSCALAR_NULL) {
    type_err(c, v, key, where, what);
    return NULL;
  }
  return v->str;
}

static int get_int(ctx *c, const ynode *v, const char *key, const char *where,
                   long long min, long long max, const char *what, int *out) {
  int64_t x;
  if (ynode_int(v, &x) != 0) {
    type_err(c, v, key, where, what);
    return DR_ESPEC;
  }
  if (x < min || x > max) {
    err(c, v, "'%s'%s: expected %s, found %s", key, where, what, v->str);
    return DR_ESPEC;
  }
  *out = (int)x;
  return 0;
}

static int get_number(ctx *c, const ynode *v, const char *key,
                      const char *where, double min, double max,
                      const char *what, double *out) {
  double x;
  if (ynode_float(v, &x) != 0 || !isfinite(x)) {
    type_err(c, v, key, where, what);
    return DR_ESPEC;
  }
  if (x < min || x > max) {
    err(c, v, "'%s'%s: expected %s, found %s", key, where, what, v->str);
    return DR_ESPEC;
  }
  *out = x;
  return 0;
}

static const char duration_forms[] =
    "a number of seconds, or numbers with units ms, s, m, h, d "
    "(e.g. 90, 500ms, 30s, 5m, 1h30m)";

int spec_duration(const ynode *v, double *out) {
  double x;
  yscalar_type t = ynode_scalar_type(v);
  if (v->kind != YNODE_SCALAR || t == YSCALAR_NULL || t == YSCALAR_BOOL)
    return SPEC_DURATION_NOT_SCALAR;
  if (t == YSCALAR_INT || t == YSCALAR_FLOAT) {
    if (ynode_float(v, &x) != 0)
      return SPEC_DURATION_SYNTAX;
    if (!isfinite(x)) /* 1e400: beyond any limit, not below zero */
      return x < 0 ? SPEC_DURATION_NEGATIVE : SPEC_DURATION_TOO_LONG;
    if (x < 0)
      return SPEC_DURATION_NEGATIVE;
  } else if (parse_duration(v->str, &x) != 0 || !isfinite(x)) {
    return SPEC_DURATION_SYNTAX;
  }
  if (x > SPEC_DURATION_MAX_S)
    return SPEC_DURATION_TOO_LONG;
  *out = x;
  return 0;
}

/* A task setting's duration (spec_duration), with the messages of a task
 * setting. min_nonzero: smallest value other than 0. */
static int get_duration(ctx *c, const ynode *v, const char *key,
                        const char *where, double min_nonzero, double *out) {
  double x;
  int rc = spec_duration(v, &x);
  if (rc == SPEC_DURATION_NOT_SCALAR) {
    sbuf b = {0};
    describe(&b, v);
    err(c, v, "'%s'%s: expected a duration: %s; found %s", key, where,
        duration_forms, b.s);
    sbuf_free(&b);
    return DR_ESPEC;
  }
  if (rc == SPEC_DURATION_NEGATIVE) {
    err(c, v, "'%s'%s: a duration cannot be negative, found %s", key, where,
        v->str);
    return DR_ESPEC;
  }
  if (rc == SPEC_DURATION_SYNTAX) {
    err(c, v, "'%s'%s: \"%s\" is not a duration; expected %s", key, where,
        v->str, duration_forms);
    return DR_ESPEC;
  }
  if (rc == SPEC_DURATION_TOO_LONG) {
    err(c, v, "'%s'%s: expected a duration from 0 to 365d, found %s", key,
        where, v->str);
    return DR_ESPEC;
  }
  if (x != 0 && x < min_nonzero) {
    char buf[32];
    format_duration(min_nonzero, buf, sizeof(buf));
    err(c, v, "'%s'%s: expected 0 (off) or at least %s, found %s", key, where,
        buf, v->str);
    return DR_ESPEC;
  }
  *out = x;
  return 0;
}

/* Whether the task's launcher is local as written (or by default): a
 * misspelt launcher is error enough, and keys that only a launcher uses
 * (hosts, rendezvous) are judged against a local one. */
static int local_as_written(const spec_task *t) {
  return t->launcher == SPEC_LAUNCHER_LOCAL &&
         (!t->launcher_node || strcmp(t->launcher_node->str, "local") == 0);
}

/* rendezvous: "auto", "ADDRESS", "ADDRESS:PORT" or "[IPv6]:PORT", the
 * address an IP literal (dagrun binds it without a lookup on its loop).
 * Returns 0 with t->rdv_bind and t->rdv_port set, or -1. */
static int parse_rendezvous(const char *s, spec_task *t) {
  char addr[INET6_ADDRSTRLEN + 2];
  const char *port = NULL;
  if (strcmp(s, "auto") == 0) {
    t->rdv_bind[0] = '\0';
    t->rdv_port = 0;
    return 0;
  }
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close || (size_t)(close - s - 1) >= sizeof(addr) ||
        (close[1] && close[1] != ':'))
      return -1;
    memcpy(addr, s + 1, (size_t)(close - s - 1));
    addr[close - s - 1] = '\0';
    port = close[1] ? close + 2 : NULL;
  } else {
    const char *colon = strchr(s, ':');
    /* Two colons or more: a bare IPv6 address, without a port. */
    if (colon && strchr(colon + 1, ':'))
      colon = NULL;
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    if (n >= sizeof(addr))
      return -1;
    memcpy(addr, s, n);
    addr[n] = '\0';
    port = colon ? colon + 1 : NULL;
  }
  unsigned char buf[sizeof(struct in6_addr)];
  if (inet_pton(strchr(addr, ':') ? AF_INET6 : AF_INET, addr, buf) != 1)
    return -1;
  long p = 0;
  if (port) {
    char *end;
    p = strtol(port, &end, 10);
    if (!*port || *end || p < 1 || p > 65535)
      return -1;
  }
  memcpy(t->rdv_bind, addr, strlen(addr) + 1);
  t->rdv_port = (int)p;
  return 0;
}

/* retry_on: one exit code or a list of them. */
static void parse_retry_on(ctx *c, const ynode *v, spec_task *t,
                           const char *where) {
  const char *key = "retry_on";
  size_t n = v->kind == YNODE_SEQ ? v->n : 1;
  if (v->kind == YNODE_MAP) {
    type_err(c, v, key, where, "a list of exit codes (1 to 255)");
    return;
  }
  int *on = xmalloc((n ? n : 1) * sizeof(int));
  size_t n_ok = 0;
  for (size_t i = 0; i < n; i++) {
    const ynode *item = v->kind == YNODE_SEQ ? v->items[i] : v;
    int code;
    if (get_int(c, item, key, where, 1, 255, "an exit code from 1 to 255",
                &code) == 0)
      on[n_ok++] = code;
  }
  free(t->retry.on);
  t->retry.on = on;
  t->retry.n_on = n_ok;
}

static void parse_trigger(ctx *c, const ynode *v, spec_task *t,
                          const char *where) {
  const char *key = "trigger";
  const char *s = get_string(c, v, key, where, "a trigger rule");
  if (!s)
    return;
  for (int i = 0; trigger_names[i]; i++)
    if (strcmp(s, trigger_names[i]) == 0) {
      t->trigger = (spec_trigger)i;
      return;
    }
  const char *m = closest_match(s, trigger_names);
  sbuf b = {0};
  list_keys(&b, trigger_names);
  err(c, v, "'trigger'%s: unknown trigger rule \"%s\"%s%s%s; the rules are: %s",
      where, s, m ? " (did you mean '" : "", m ? m : "", m ? "'?)" : "", b.s);
  sbuf_free(&b);
}

/* The keys of a gang: world_size, launcher, hosts, rendezvous. */
static void parse_gang_setting(ctx *c, const char *key, const ynode *v,
                               spec_task *t, const char *where) {
  if (strcmp(key, "world_size") == 0) {
    (void)get_int(c, v, key, where, 1, 65536, "an integer from 1 to 65536 (ranks)",
                  &t->world_size);
  } else if (strcmp(key, "launcher") == 0) {
    const char *s = get_string(c, v, key, where, "local, mpirun or srun");
    if (!s)
      return;
    t->launcher_node = v;
    if (strcmp(s, "local") == 0) {
      t->launcher = SPEC_LAUNCHER_LOCAL;
    } else if (strcmp(s, "mpirun") == 0) {
      t->launcher = SPEC_LAUNCHER_MPIRUN;
    } else if (strcmp(s, "srun") == 0) {
      t->launcher = SPEC_LAUNCHER_SRUN;
    } else {
      const char *m = closest_match(s, launcher_names);
      err(c, v,
          "'launcher'%s: expected local, mpirun or srun, found \"%s\"%s%s%s",
          where, s, m ? "; did you mean '" : "", m ? m : "", m ? "'?" : "");
    }
  } else if (strcmp(key, "hosts") == 0) {
    if (v->kind != YNODE_SEQ) {
      type_err(c, v, key, where, "a list of host names");
      return;
    }
    size_t bad = 0;
    for (size_t i = 0; i < v->n; i++) {
      const char *h = get_string(c, v->items[i], key, where, "a host name");
      if (!h || !*h || strpbrk(h, ", \t\n")) {
        if (h)
          err(c, v->items[i], "'hosts'%s: \"%s\" is not a host name", where, h);
        bad++;
      }
    }
    if (!bad)
      t->hosts = v;
  } else if (strcmp(key, "rendezvous") == 0) {
    const char *s = get_string(c, v, key, where,
                               "auto, an IP address or ADDRESS:PORT");
    if (!s)
      return;
    if (parse_rendezvous(s, t) != 0)
      err(c, v,
          "'rendezvous'%s: expected auto, an IP address or ADDRESS:PORT "
          "(IPv6 as [ADDRESS]:PORT, port 1-65535) that dagrun listens on "
          "for the gang's ranks, found \"%s\"",
          where, s);
    t->rendezvous_node = v;
  }
}

/* env: a map of variable names to strings (null: none). */
static void parse_env(ctx *c, const ynode *v, spec_task *t,
                      const char *where) {
  const char *key = "env";
  if (v->kind == YNODE_SCALAR && ynode_scalar_type(v) == YSCALAR_NULL)
    return;
  if (v->kind != YNODE_MAP) {
    type_err(c, v, key, where, "a map of variable names to strings");
    return;
  }
  sbuf w = {0};
  sbuf_printf(&w, " in 'env'%s", where);
  size_t bad = check_keys(c, v, w.s);
  for (size_t i = 0; i < v->n; i++) {
    const ynode *ek = v->items[2 * i], *ev = v->items[2 * i + 1];
    if (ek->kind == YNODE_SCALAR && !valid_env_name(ek->str)) {
      err(c, ek,
          "invalid environment variable name '%s'%s: use letters, digits "
          "and '_', not starting with a digit",
          ek->str, w.s);
      bad++;
    }
    if (ev->kind != YNODE_SCALAR) {
      sbuf b = {0};
      describe(&b, ev);
      err(c, ev, "environment variable '%s'%s: expected a string, found %s",
          ek->kind == YNODE_SCALAR ? ek->str : "?", where, b.s);
      sbuf_free(&b);
      bad++;
    }
  }
  sbuf_free(&w);
  if (!bad)
    t->env = v;
}

/* Parses one task setting (retries ... env) into t. */
static void parse_setting(ctx *c, const ynode *k, const ynode *v, spec_task *t,
                          const char *where) {
  const char *key = k->str;
  if (strcmp(key, "retries") == 0) {
    (void)get_int(c, v, key, where, 0, 1000000, "an integer from 0 to 1000000",
                  &t->retry.retries);
  } else if (strcmp(key, "retry_delay") == 0) {
    (void)get_duration(c, v, key, where, 0, &t->retry.delay_s);
  } else if (strcmp(key, "retry_backoff") == 0) {
    (void)get_number(c, v, key, where, 1, 1e6, "a number from 1 to 1000000",
                     &t->retry.backoff);
  } else if (strcmp(key, "retry_max_delay") == 0) {
    (void)get_duration(c, v, key, where, 0, &t->retry.max_delay_s);
  } else if (strcmp(key, "retry_jitter") == 0) {
    (void)get_number(c, v, key, where, 0, 1, "a number from 0 to 1",
                     &t->retry.jitter);
  } else if (strcmp(key, "retry_on") == 0) {
    parse_retry_on(c, v, t, where);
  } else if (strcmp(key, "timeout") == 0) {
    (void)get_duration(c, v, key, where, 0, &t->timeout_s);
  } else if (strcmp(key, "heartbeat_timeout") == 0) {
    (void)get_duration(c, v, key, where, 1, &t->heartbeat_s);
  } else if (strcmp(key, "kill_grace") == 0) {
    (void)get_duration(c, v, key, where, 0, &t->kill_grace_s);
  } else if (strcmp(key, "pool") == 0) {
    if (get_string(c, v, key, where, "a pool name"))
      t->pool_node = v;
  } else if (strcmp(key, "trigger") == 0) {
    parse_trigger(c, v, t, where);
  } else if (strcmp(key, "world_size") == 0 ||
             strcmp(key, "launcher") == 0 || strcmp(key, "hosts") == 0 ||
             strcmp(key, "rendezvous") == 0) {
    parse_gang_setting(c, key, v, t, where);
  } else if (strcmp(key, "cache") == 0) {
    if (ynode_bool(v, &t->cache) != 0)
      type_err(c, v, key, where, "true or false");
  } else if (strcmp(key, "env") == 0) {
    parse_env(c, v, t, where);
  }
}

/* Checks a map of settings (a task's or defaults); task-only keys are
 * handled by the caller and skipped here. */
static void parse_settings(ctx *c, const ynode *map, spec_task *t,
                           const char *where, int is_defaults) {
  for (size_t i = 0; i < map->n; i++) {
    const ynode *k = map->items[2 * i], *v = map->items[2 * i + 1];
    if (k->kind != YNODE_SCALAR)
      continue; /* reported by check_keys */
    if (in_list(k->str, setting_keys)) {
      parse_setting(c, k, v, t, where);
    } else if (is_defaults && (in_list(k->str, task_keys) ||
                               strcmp(k->str, ONTRIG_TASK_KEY) == 0)) {
      err(c, k,
          "'%s' cannot be set in defaults, only in each task; defaults may "
          "set: retries, retry_delay, retry_backoff, retry_max_delay, "
          "retry_jitter, retry_on, timeout, heartbeat_timeout, kill_grace, "
          "pool, trigger, env, cache, world_size, launcher, hosts, "
          "rendezvous",
          k->str);
    } else if (!in_list(k->str, task_keys) &&
               strcmp(k->str, ONTRIG_TASK_KEY) != 0) {
      unknown_key(c, k, where, is_defaults ? setting_keys : task_keys);
    }
  }
}

static long pool_find(const spec *s, const char *name) {
  for (size_t i = 0; i < s->n_pools; i++)
    if (strcmp(s->pools[i].name, name) == 0)
      return (long)i;
  return -1;
}

static size_t resolve_pool(ctx *c, const ynode *v, const char *where) {
  long i = pool_find(c->s, v->str);
  if (i >= 0)
    return (size_t)i;
  if (c->s->n_pools == 0) {
    err(c, v,
        "unknown pool '%s'%s: no pools are defined (add them at the top "
        "level, e.g. pools: {%s: 1})",
        v->str, where, valid_name(v->str) ? v->str : "gpu");
    return SIZE_MAX;
  }
  const char **names = xmalloc((c->s->n_pools + 1) * sizeof(char *));
  for (size_t j = 0; j < c->s->n_pools; j++)
    names[j] = c->s->pools[j].name;
  names[c->s->n_pools] = NULL;
  const char *m = closest_match(v->str, names);
  if (m) {
    err(c, v, "unknown pool '%s'%s; did you mean '%s'?", v->str, where, m);
  } else {
    sbuf b = {0};
    list_keys(&b, names);
    err(c, v, "unknown pool '%s'%s; the pools are: %s", v->str, where, b.s);
    sbuf_free(&b);
  }
  free(names);
  return SIZE_MAX;
}

static void parse_pools(ctx *c, const ynode *v) {
  if (v->kind != YNODE_MAP) {
    type_err(c, v, "pools", "", "a map of pool names to sizes (e.g. gpu: 1)");
    return;
  }
  check_keys(c, v, " in 'pools'");
  c->s->pools = xcalloc(v->n ? v->n : 1, sizeof(spec_pool));
  for (size_t i = 0; i < v->n; i++) {
    const ynode *k = v->items[2 * i], *val = v->items[2 * i + 1];
    if (k->kind != YNODE_SCALAR)
      continue;
    if (!valid_name(k->str)) {
      err(c, k,
          "invalid pool name '%s': use at most 128 letters, digits, '_' and "
          "'-'",
          k->str);
      continue;
    }
    int size;
    int rc = get_int(c, val, k->str, " in 'pools'", 1, 1000000,
                     "a pool size (an integer from 1 to 1000000)", &size);
    if (rc != 0 || pool_find(c->s, k->str) >= 0)
      continue;
    spec_pool *p = &c->s->pools[c->s->n_pools++];
    p->name = xstrdup(k->str);
    p->size = size;
  }
}

static void parse_params(ctx *c, const ynode *v) {
  if (v->kind == YNODE_SCALAR && ynode_scalar_type(v) == YSCALAR_NULL)
    return;
  if (v->kind != YNODE_MAP) {
    type_err(c, v, "params", "", "a map of param names to values");
    return;
  }
  check_keys(c, v, " in 'params'");
  for (size_t i = 0; i < v->n; i++) {
    const ynode *k = v->items[2 * i];
    if (k->kind == YNODE_SCALAR && !valid_name(k->str))
      err(c, k,
          "invalid param name '%s': use at most 128 letters, digits, '_' and "
          "'-' (it "
          "is referred to as ${params.NAME})",
          k->str);
  }
  c->s->params = v;
}

/* `secrets: [name, ...]`: names of declared params whose values are
 * secrets (secrets.h). Runs after parse_params. */
static void parse_secrets(ctx *c, const ynode *v) {
  spec *s = c->s;
  if (v->kind == YNODE_SCALAR && ynode_scalar_type(v) == YSCALAR_NULL)
    return;
  if (v->kind != YNODE_SEQ) {
    type_err(c, v, "secrets", "", "a list of param names");
    return;
  }
  const ynode *ps = s->params;
  size_t np = ps ? ps->n : 0;
  const char **names = xcalloc(np + 1, sizeof(char *));
  for (size_t i = 0; i < np; i++)
    names[i] = ps->items[2 * i]->str;
  s->secrets = xcalloc(v->n ? v->n : 1, sizeof(char *));
  s->secret_nodes = xcalloc(v->n ? v->n : 1, sizeof(ynode *));
  for (size_t i = 0; i < v->n; i++) {
    const ynode *item = v->items[i];
    if (item->kind != YNODE_SCALAR ||
        ynode_scalar_type(item) != YSCALAR_STRING) {
      sbuf b = {0};
      describe(&b, item);
      err(c, item, "'secrets': expected a param name, found %s", b.s);
      sbuf_free(&b);
      continue;
    }
    if (!ps || !ynode_get(ps, item->str)) {
      const char *m = closest_match(item->str, names);
      if (m)
        err(c, item, "'secrets' names unknown param '%s'; did you mean '%s'?",
            item->str, m);
      else
        err(c, item,
            "'secrets' names unknown param '%s' (declare it under 'params')",
            item->str);
      continue;
    }
    s->secret_nodes[s->n_secrets] = item;
    s->secrets[s->n_secrets++] = xstrdup(item->str);
  }
  free(names);
}

/* Fills a task with the built-in defaults. */
static void task_init(spec_task *t) {
  memset(t, 0, sizeof(*t));
  t->retry.delay_s = 10;
  t->retry.backoff = 2;
  t->retry.max_delay_s = 3600;
  t->retry.jitter = 0.1;
  t->kill_grace_s = 10;
  t->pool = SIZE_MAX;
  t->cache = -1;
  t->world_size = 1;
  t->launcher = SPEC_LAUNCHER_LOCAL;
  t->map = SIZE_MAX;
}

/* Copies defaults into a task; owned pointers are duplicated. */
static void task_from_defaults(spec_task *t, const spec_task *def) {
  *t = *def;
  if (def->retry.on) {
    t->retry.on =
        xmalloc((def->retry.n_on ? def->retry.n_on : 1) * sizeof(int));
    memcpy(t->retry.on, def->retry.on, def->retry.n_on * sizeof(int));
  }
}

/* Instance `index` of mapped task m, a copy of proto (a parsed task: what
 * it owns is copied, so that each instance frees its own), named
 * NAME-INDEX, at the end of s->tasks (room reserved by the caller). */
static spec_task *add_instance(spec *s, const spec_map *m,
                               const spec_task *proto, size_t index) {
  spec_task *t = &s->tasks[s->n_tasks];
  task_from_defaults(t, proto);
  t->stage = proto->stage ? xstrdup(proto->stage) : NULL;
  t->description = proto->description ? xstrdup(proto->description) : NULL;
  t->approval_message =
      proto->approval_message ? xstrdup(proto->approval_message) : NULL;
  if (proto->n_produces) {
    t->produces = xmalloc(proto->n_produces * sizeof(char *));
    for (size_t k = 0; k < proto->n_produces; k++)
      t->produces[k] = xstrdup(proto->produces[k]);
  }
  t->needs = NULL;
  t->need_nodes = NULL;
  t->n_needs = 0;
  t->name = xasprintf("%s-%zu", m->name, index);
  t->label = m->name;
  t->item_index = index;
  strmap_put(&s->task_index, t->name, s->n_tasks++);
  return t;
}

/* env: the task's map over the defaults' map, as a new map in the tree. */
static const ynode *merge_env(spec *s, const ynode *def, const ynode *own) {
  if (!def || !own)
    return own ? own : def;
  size_t n = own->n;
  for (size_t i = 0; i < def->n; i++)
    if (!ynode_get(own, def->items[2 * i]->str))
      n++;
  ynode *m = ynode_alloc(s->root, YNODE_MAP, n, own->line, own->col);
  size_t j = 0;
  for (size_t i = 0; i < def->n; i++) {
    if (ynode_get(own, def->items[2 * i]->str))
      continue;
    m->items[2 * j] = def->items[2 * i];
    m->items[2 * j + 1] = def->items[2 * i + 1];
    j++;
  }
  memcpy(m->items + 2 * j, own->items, 2 * own->n * sizeof(ynode *));
  return m;
}

/* Output keys go into ${tasks.T.outputs.KEY} and outputs.json: letters,
 * digits and '_' (host->output's rule). */
static int valid_output_key(const char *s) {
  if (!*s)
    return 0;
  for (; *s; s++)
    if (!name_char(*s) || *s == '-')
      return 0;
  return 1;
}

/* `outputs: [model_dir, val_loss]`: the keys the task produces. */
static void parse_outputs(ctx *c, spec_task *t, const ynode *v,
                          const char *where) {
  if (v->kind != YNODE_SEQ) {
    type_err(c, v, "outputs", where,
             "a list of output keys (e.g. [model_dir, val_loss])");
    return;
  }
  size_t errors = c->errors;
  for (size_t i = 0; i < v->n; i++) {
    const ynode *it = v->items[i];
    if (it->kind != YNODE_SCALAR || ynode_scalar_type(it) != YSCALAR_STRING) {
      type_err(c, it, "outputs", where, "an output key");
      continue;
    }
    if (!valid_output_key(it->str)) {
      err(c, it,
          "'outputs'%s: \"%s\" is not an output key (letters, digits and "
          "'_')",
          where, it->str);
      continue;
    }
    for (size_t j = 0; j < i; j++)
      if (v->items[j]->kind == YNODE_SCALAR &&
          strcmp(v->items[j]->str, it->str) == 0) {
        err(c, it, "'outputs'%s: '%s' is listed twice (first at line %d)",
            where, it->str, v->items[j]->line);
        break;
      }
  }
  if (c->errors == errors)
    t->outputs = v;
}

const char *spec_task_kind(const spec_task *t) {
  return t->approval_node ? "approval" : t->stage ? t->stage : "?";
}

int spec_task_may_output(const spec_task *t, const char *key, size_t n) {
  if (!t->outputs || (t->branch && n == 6 && memcmp(key, "branch", 6) == 0))
    return 1;
  for (size_t i = 0; i < t->outputs->n; i++) {
    const char *k = t->outputs->items[i]->str;
    if (strlen(k) == n && memcmp(k, key, n) == 0)
      return 1;
  }
  return 0;
}

/* `approval: {timeout: 4h, message: "..."}` (or `approval: {}`): the task
 * waits for a person instead of running a stage (scheduler.h, "Approval"). */
static void parse_approval(ctx *c, spec_task *t, const ynode *v,
                           const char *where) {
  t->approval_node = v;
  if (v->kind == YNODE_SCALAR && ynode_scalar_type(v) == YSCALAR_NULL)
    return;
  if (v->kind != YNODE_MAP) {
    type_err(c, v, "approval", where,
             "a map with timeout (a duration) and message (a string), or {}");
    return;
  }
  check_keys(c, v, where);
  for (size_t i = 0; i < v->n; i++) {
    const ynode *ak = v->items[2 * i], *av = v->items[2 * i + 1];
    if (ak->kind != YNODE_SCALAR)
      continue;
    if (strcmp(ak->str, "timeout") == 0) {
      (void)get_duration(c, av, "approval.timeout", where, 1,
                         &t->approval_timeout_s);
    } else if (strcmp(ak->str, "message") == 0) {
      const char *m = get_string(c, av, "approval.message", where, "a string");
      if (m) {
        free(t->approval_message);
        t->approval_message = xstrdup(m);
      }
    } else {
      err(c, ak,
          "unknown key 'approval.%s'%s; expected timeout (a duration) or "
          "message (a string)",
          ak->str, where);
    }
  }
}

static void parse_task(ctx *c, spec_task *t, const ynode *k, const ynode *v,
                       const spec_task *def) {
  char *where = xasprintf(" in task '%s'", t->name);
  const ynode *def_env = def->env;
  if (v->kind != YNODE_MAP) {
    sbuf b = {0};
    describe(&b, v);
    err(c, v,
        "task '%s' must be a map of settings (stage: ..., needs: ..., "
        "with: ...), found %s",
        t->name, b.s);
    sbuf_free(&b);
    free(where);
    return;
  }
  t->node = v;
  check_keys(c, v, where);
  t->env = NULL;
  parse_settings(c, v, t, where, 0);
  t->env = merge_env(c->s, def_env, t->env);
  for (size_t i = 0; i < v->n; i++) {
    const ynode *tk = v->items[2 * i], *tv = v->items[2 * i + 1];
    if (tk->kind != YNODE_SCALAR)
      continue;
    if (strcmp(tk->str, "stage") == 0) {
      const char *s = get_string(c, tv, "stage", where,
                                 "a stage name (e.g. exec) or a path to a "
                                 "stage plugin (.so)");
      if (s && !*s) {
        err(c, tv, "'stage'%s: expected a stage name, found an empty string",
            where);
      } else if (s) {
        free(t->stage);
        t->stage = xstrdup(s);
        t->stage_node = tv;
      }
    } else if (strcmp(tk->str, "with") == 0) {
      if (tv->kind == YNODE_MAP) {
        sbuf w = {0};
        sbuf_printf(&w, " in 'with'%s", where);
        check_keys(c, tv, w.s); /* a param set twice: one would be lost */
        sbuf_free(&w);
        t->with = tv;
      } else if (!(tv->kind == YNODE_SCALAR &&
                 ynode_scalar_type(tv) == YSCALAR_NULL))
        type_err(c, tv, "with", where, "a map of stage params");
    } else if (strcmp(tk->str, "description") == 0) {
      const char *s = get_string(c, tv, "description", where, "a string");
      if (s) {
        free(t->description);
        t->description = xstrdup(s);
      }
    } else if (strcmp(tk->str, "outputs") == 0) {
      parse_outputs(c, t, tv, where);
    } else if (strcmp(tk->str, ONTRIG_TASK_KEY) == 0) {
      ontrig_names_free(t->produces, t->n_produces);
      c->errors += ontrig_parse_produces(c->s->path, tv, where, &t->produces,
                                         &t->n_produces, c->d);
    } else if (strcmp(tk->str, "branch") == 0) {
      if (ynode_bool(tv, &t->branch) != 0)
        type_err(c, tv, "branch", where, "true or false");
      t->branch_node = tv;
    } else if (strcmp(tk->str, "approval") == 0) {
      parse_approval(c, t, tv, where);
    } else if (strcmp(tk->str, "needs") == 0) {
      if (tv->kind == YNODE_MAP)
        type_err(c, tv, "needs", where, "a list of task names");
      /* Resolved once every task is known. */
    }
  }
  if (t->approval_node && ynode_get(v, "stage"))
    err(c, t->approval_node,
        "task '%s' has both 'stage' and 'approval'; an approval task runs "
        "no stage: it waits for a person (remove one of them)",
        t->name);
  else if (t->approval_node && t->branch)
    err(c, t->branch_node,
        "'branch'%s: an approval task cannot be a branch task (it has no "
        "output to choose with)",
        where);
  else if (t->approval_node && t->with)
    err(c, t->with,
        "'with'%s: an approval task has no stage params (its keys are "
        "approval.timeout and approval.message)",
        where);
  else if (!t->stage && !ynode_get(v, "stage") && !ynode_get(v, "approval"))
    err(c, k,
        "task '%s' has no 'stage'; expected the name of a stage (e.g. "
        "stage: exec) or a path to a stage plugin, or 'approval' for a "
        "task that waits for a person",
        t->name);
  free(where);
}

static const char *const *task_names(ctx *c) {
  if (!c->names) {
    c->names = xmalloc((c->s->n_tasks + 1) * sizeof(char *));
    for (size_t i = 0; i < c->s->n_tasks; i++)
      c->names[i] = c->s->tasks[i].name;
    c->names[c->s->n_tasks] = NULL;
  }
  return c->names;
}

/* A branch task chooses among its direct downstream tasks: one that has
 * none has nothing to choose (most likely its `needs` are missing). */
static void check_branches(ctx *c) {
  spec *s = c->s;
  unsigned char *has_down = xcalloc(s->n_tasks ? s->n_tasks : 1, 1);
  for (size_t i = 0; i < s->n_tasks; i++)
    for (size_t k = 0; k < s->tasks[i].n_needs; k++)
      has_down[s->tasks[i].needs[k]] = 1;
  for (size_t i = 0; i < s->n_tasks; i++)
    if (s->tasks[i].branch && !has_down[i])
      err(c, s->tasks[i].branch_node,
          "'branch' in task '%s': a branch task chooses which of its "
          "downstream tasks run, and no task needs '%s'",
          s->tasks[i].name, s->tasks[i].name);
  free(has_down);
}

/* Adds need idx (written as item) unless t has it: listing a task twice
 * means the same as once. */
static void add_need(spec_task *t, const ynode *item, size_t idx) {
  for (size_t j = 0; j < t->n_needs; j++)
    if (t->needs[j] == idx)
      return;
  t->need_nodes[t->n_needs] = item;
  t->needs[t->n_needs++] = idx;
}

/* A need on a mapped task: a need on each of its instances, or on its
 * placeholder while the list is not known (spec_map_expand moves it). */
static void add_need_map(spec_task *t, const ynode *item, const spec_map *m) {
  if (m->placeholder != SIZE_MAX) {
    add_need(t, item, m->placeholder);
    return;
  }
  for (size_t k = 0; k < m->n; k++)
    add_need(t, item, m->first + k);
}

/* The instances of a mapped task need what its first one needs: resolved
 * (and its errors reported) once. */
static int copy_instance_needs(ctx *c, spec_task *t) {
  if (t->map == SIZE_MAX || t->item_index == 0 ||
      t->item_index == SPEC_ITEM_PENDING)
    return 0;
  const spec_task *first = &c->s->tasks[c->s->maps[t->map].first];
  size_t n = first->n_needs;
  t->needs = xmalloc((n ? n : 1) * sizeof(size_t));
  t->need_nodes = xmalloc((n ? n : 1) * sizeof(ynode *));
  memcpy(t->needs, first->needs, n * sizeof(size_t));
  memcpy(t->need_nodes, first->need_nodes, n * sizeof(ynode *));
  t->n_needs = n;
  return 1;
}

static void resolve_needs(ctx *c, spec_task *t) {
  const ynode *v = t->node ? ynode_get(t->node, "needs") : NULL;
  if (!v || v->kind == YNODE_MAP || copy_instance_needs(c, t))
    return;
  if (v->kind == YNODE_SCALAR && ynode_scalar_type(v) == YSCALAR_NULL)
    return;
  size_t n = v->kind == YNODE_SEQ ? v->n : 1, room = 0;
  for (size_t i = 0; i < n; i++) {
    const ynode *item = v->kind == YNODE_SEQ ? v->items[i] : v;
    size_t m;
    int mapped = item->kind == YNODE_SCALAR &&
                 strmap_get(&c->s->map_index, item->str, &m);
    room +=
        mapped && c->s->maps[m].placeholder == SIZE_MAX ? c->s->maps[m].n : 1;
  }
  t->needs = xmalloc((room ? room : 1) * sizeof(size_t));
  t->need_nodes = xmalloc((room ? room : 1) * sizeof(ynode *));
  /* Messages name the task as written, not its instance. */
  const char *name = t->map == SIZE_MAX ? t->name : c->s->maps[t->map].name;
  for (size_t i = 0; i < n; i++) {
    const ynode *item = v->kind == YNODE_SEQ ? v->items[i] : v;
    if (item->kind != YNODE_SCALAR) {
      sbuf b = {0};
      describe(&b, item);
      err(c, item, "'needs' in task '%s': expected a task name, found %s",
          t->name, b.s);
      sbuf_free(&b);
      continue;
    }
    size_t idx;
    if (strmap_get(&c->s->map_index, item->str, &idx)) {
      add_need_map(t, item, &c->s->maps[idx]);
      continue;
    }
    if (!strmap_get(&c->s->task_index, item->str, &idx)) {
      const char *m = NULL;
      if (c->n_suggested++ < MAX_NEED_SUGGESTIONS)
        m = closest_match(item->str, task_names(c));
      if (m)
        err(c, item, "task '%s' needs unknown task '%s'; did you mean '%s'?",
            name, item->str, m);
      else
        err(c, item, "task '%s' needs unknown task '%s'", name, item->str);
      continue;
    }
    add_need(t, item, idx);
  }
}

/* The line of the first key of `tasks` (v) named like key i. */
static int first_line(const ynode *v, size_t i) {
  const char *name = v->items[2 * i]->str;
  for (size_t j = 0; j < i; j++)
    if (v->items[2 * j]->kind == YNODE_SCALAR &&
        strcmp(v->items[2 * j]->str, name) == 0)
      return v->items[2 * j]->line;
  return 0;
}

/* The instances of a list known at run time are named when the run has
 * the list: no task may be named like one of them (T-0, T-1, ...). */
static void check_pending_names(ctx *c) {
  const spec *s = c->s;
  for (size_t i = 0; i < s->n_maps; i++) {
    const spec_map *m = &s->maps[i];
    size_t ln = strlen(m->name);
    if (m->placeholder == SIZE_MAX)
      continue;
    for (size_t k = 0; k < s->n_tasks; k++) {
      const char *z = s->tasks[k].name;
      if (strncmp(z, m->name, ln) != 0 || z[ln] != '-' || !z[ln + 1] ||
          strspn(z + ln + 1, "0123456789") != strlen(z + ln + 1))
        continue;
      err(c, s->tasks[k].node ? s->tasks[k].node : m->node,
          "task name '%s' may be taken by an instance of mapped task '%s' "
          "(line %d), whose instances are named %s-0, %s-1, ...; rename "
          "the task",
          z, m->name, m->node->line, m->name, m->name);
    }
  }
}

/* Room in s->tasks for n more. */
static void reserve_tasks(spec *s, size_t *cap, size_t n) {
  if (s->n_tasks + n <= *cap)
    return;
  size_t nc = *cap * 2 > s->n_tasks + n ? *cap * 2 : s->n_tasks + n;
  s->tasks = xrealloc(s->tasks, nc * sizeof(spec_task));
  memset(s->tasks + *cap, 0, (nc - *cap) * sizeof(spec_task));
  *cap = nc;
}

/* Whether task name k (key i of `tasks`) is free; else says why. */
static int name_free(ctx *c, const ynode *v, size_t i) {
  const ynode *k = v->items[2 * i];
  size_t first;
  spec *s = c->s;
  if (strmap_get(&s->task_index, k->str, &first) &&
      s->tasks[first].map != SIZE_MAX &&
      s->tasks[first].item_index != SPEC_ITEM_PENDING) {
    const spec_map *m = &s->maps[s->tasks[first].map];
    err(c, k,
        "task name '%s' is taken by instance %zu of mapped task '%s' (line "
        "%d); rename the task",
        k->str, s->tasks[first].item_index, m->name, m->node->line);
    return 0;
  }
  if (strmap_get(&s->task_index, k->str, NULL) ||
      strmap_get(&s->map_index, k->str, NULL)) {
    err(c, k, "duplicate task name '%s' (first defined at line %d)", k->str,
        first_line(v, i));
    return 0;
  }
  return 1;
}

/* A map over a list known at run time: one placeholder task, named as
 * the mapped task, parsed as its instances will be (spec_map_expand). */
static void add_placeholder(ctx *c, const ynode *k, const ynode *tv,
                            const spec_task *def, size_t *cap, spec_map *m) {
  spec *s = c->s;
  reserve_tasks(s, cap, 1);
  spec_task *t = &s->tasks[s->n_tasks];
  task_from_defaults(t, def);
  t->name = xstrdup(m->name);
  t->label = t->name;
  t->map = s->n_maps;
  t->item_index = SPEC_ITEM_PENDING;
  m->placeholder = m->first = s->n_tasks;
  strmap_put(&s->task_index, t->name, s->n_tasks++);
  parse_task(c, t, k, tv, def);
}

/* A task with `map:` (mv): parsed once, then copied into one instance
 * task per item, named NAME-INDEX. */
static void add_mapped(ctx *c, const ynode *k, const ynode *tv, const ynode *mv,
                       const spec_task *def, size_t *cap) {
  spec *s = c->s;
  spec_map m = {0};
  size_t errors = mapping_parse(s, k->str, mv, &m, c->d);
  c->errors += errors;
  m.name = xstrdup(k->str);
  m.first = s->n_tasks;
  m.placeholder = SIZE_MAX;
  if (!errors && !m.items) {
    add_placeholder(c, k, tv, def, cap, &m);
    goto add;
  }
  spec_task proto;
  task_from_defaults(&proto, def);
  proto.name = m.name;
  proto.label = m.name;
  proto.map = s->n_maps;
  parse_task(c, &proto, k, tv, def);
  size_t n = m.n;
  m.n = 0;
  reserve_tasks(s, cap, n);
  for (size_t i = 0; i < n; i++) {
    char *name = xasprintf("%s-%zu", k->str, i);
    if (strmap_get(&s->task_index, name, NULL) ||
        strmap_get(&s->map_index, name, NULL)) {
      err(c, mv,
          "instance %zu of mapped task '%s' would be named '%s', which is "
          "the name of another task; rename that task",
          i, k->str, name);
      free(name);
      break;
    }
    free(name);
    add_instance(s, &m, &proto, i);
    m.n++;
  }
  free(proto.stage);
  free(proto.description);
  free(proto.retry.on);
  free(proto.approval_message);
  ontrig_names_free(proto.produces, proto.n_produces);
add:
  s->maps = xrealloc(s->maps, (s->n_maps + 1) * sizeof(spec_map));
  s->maps[s->n_maps] = m;
  strmap_put(&s->map_index, m.name, s->n_maps++);
}

static void parse_tasks(ctx *c, const ynode *v, const spec_task *def) {
  if (v->kind != YNODE_MAP) {
    type_err(c, v, "tasks", "",
             "a map of task names to tasks (e.g. train: {stage: train})");
    return;
  }
  if (v->n == 0) {
    err(c, v, "'tasks' is empty; expected at least one task");
    return;
  }
  spec *s = c->s;
  size_t cap = v->n;
  s->tasks = xcalloc(cap, sizeof(spec_task));
  for (size_t i = 0; i < v->n; i++) {
    const ynode *k = v->items[2 * i], *tv = v->items[2 * i + 1];
    if (k->kind != YNODE_SCALAR) {
      err(c, k, "expected a task name as key in 'tasks', found %s",
          ynode_a_type(k));
      continue;
    }
    if (!valid_name(k->str)) {
      err(c, k,
          "invalid task name '%s': use at most 128 letters, digits, '_' and "
          "'-' (it "
          "is referred to as ${tasks.NAME...} and names a directory)",
          k->str);
      continue;
    }
    if (!name_free(c, v, i))
      continue;
    const ynode *mv = tv->kind == YNODE_MAP ? ynode_get(tv, "map") : NULL;
    if (mv) {
      add_mapped(c, k, tv, mv, def, &cap);
      continue;
    }
    reserve_tasks(s, &cap, 1);
    spec_task *t = &s->tasks[s->n_tasks];
    task_from_defaults(t, def);
    t->name = xstrdup(k->str);
    t->label = t->name;
    t->node = NULL;
    strmap_put(&s->task_index, t->name, s->n_tasks);
    s->n_tasks++;
    parse_task(c, t, k, tv, def);
  }
  /* Pools and needs refer to things defined anywhere in the file. */
  size_t def_pool = SIZE_MAX;
  if (def->pool_node)
    def_pool = resolve_pool(c, def->pool_node, " in defaults");
  for (size_t i = 0; i < s->n_tasks; i++) {
    spec_task *t = &s->tasks[i];
    resolve_needs(c, t);
    if (t->map != SIZE_MAX && t->item_index > 0 &&
        t->item_index != SPEC_ITEM_PENDING) {
      /* Checked (and reported) once, at the first instance. */
      t->pool = s->tasks[s->maps[t->map].first].pool;
      continue;
    }
    if (t->hosts && local_as_written(t))
      err(c, t->hosts,
          "'hosts' in task '%s': hosts name the machines of launcher mpirun "
          "or srun; launcher local runs every rank on this machine",
          t->label);
    if (t->rendezvous_node && local_as_written(t))
      err(c, t->rendezvous_node,
          "'rendezvous' in task '%s': the rendezvous is where the ranks of "
          "launcher mpirun or srun join; launcher local's ranks need none",
          t->label);
    if (t->pool_node && t->pool_node != def->pool_node) {
      char *where = xasprintf(" in task '%s'", t->label);
      t->pool = resolve_pool(c, t->pool_node, where);
      free(where);
    } else {
      t->pool = def_pool;
    }
  }
  check_branches(c);
  check_pending_names(c);
}

/* One error of the schedule's expression, at its bad token when the
 * scalar is on one line (plain or quoted: no escapes before it). */
typedef struct sched_err {
  ctx *c;
  const ynode *v;
} sched_err;

static void schedule_error(void *ud, int col, const char *msg) {
  sched_err *se = ud;
  const ynode *v = se->v;
  int at = v->col;
  if (v->oneline && v->style <= YSTYLE_DOUBLE)
    at += col - 1 + (v->style != YSTYLE_PLAIN);
  diags_add(se->c->d, se->c->s->path, v->line, at, "'schedule': %s", msg);
  se->c->errors++;
}

/* The cron trigger's keys. Every error of the expression is reported,
 * and one that never fires (`0 0 30 2 *`) is an error like a bad token. */
static void parse_schedule(ctx *c, const ynode *root) {
  spec *s = c->s;
  const ynode *v;
  char msg[256];
  if ((v = ynode_get(root, "schedule"))) {
    const char *z = get_string(c, v, "schedule", "",
                               "a cron expression such as \"30 2 * * *\" or "
                               "\"@daily\"");
    cron_expr *e = NULL;
    sched_err se = {c, v};
    if (z)
      (void)cron_parse_each(z, &e, schedule_error, &se);
    cron_destroy(e);
  }
  if ((v = ynode_get(root, "timezone"))) {
    const char *z = get_string(c, v, "timezone", "", "an IANA time zone name");
    cron_zone *zone = NULL;
    if (z && cron_zone_open(z, &zone, msg, sizeof msg) != 0)
      err(c, v, "'timezone': %s", msg);
    else if (z)
      s->timezone = xstrdup(z);
    cron_zone_close(zone);
  }
  if ((v = ynode_get(root, "catchup")) && ynode_bool(v, &s->catchup) != 0)
    type_err(c, v, "catchup", "", "true or false");
  if ((v = ynode_get(root, "overlap"))) {
    const char *o = get_string(c, v, "overlap", "", "skip, queue or allow");
    size_t i = 0;
    while (o && overlap_names[i] && strcmp(o, overlap_names[i]) != 0)
      i++;
    if (o && overlap_names[i]) {
      s->overlap = (spec_overlap)i;
    } else if (o) {
      const char *m = closest_match(o, overlap_names);
      err(c, v, "'overlap': expected skip, queue or allow, found \"%s\"%s%s%s",
          o, m ? "; did you mean '" : "", m ? m : "", m ? "'?" : "");
    }
  }
}

static void parse_root(ctx *c) {
  spec *s = c->s;
  const ynode *root = s->root;
  if (root->kind != YNODE_MAP) {
    sbuf b = {0};
    describe(&b, root);
    err(c, root,
        "expected a map at the top level (dag: NAME, tasks: ...), found %s",
        b.s);
    sbuf_free(&b);
    return;
  }
  check_keys(c, root, " at the top level");
  for (size_t i = 0; i < root->n; i++) {
    const ynode *k = root->items[2 * i];
    if (k->kind == YNODE_SCALAR && !in_list(k->str, top_keys) &&
        strcmp(k->str, ONTRIG_TOP_KEY) != 0)
      unknown_key(c, k, " at the top level", top_keys);
  }

  const ynode *v = ynode_get(root, "dag");
  if (!v) {
    err(c, root,
        "missing required key 'dag': the DAG's name (e.g. dag: pretrain)");
  } else {
    const char *name = get_string(c, v, "dag", "", "the DAG's name");
    if (name && !valid_dag_name(name))
      err(c, v,
          "invalid DAG name '%s': use at most 128 letters, digits, '_', '-' "
          "and '.'",
          name);
    else if (name)
      s->dag = xstrdup(name);
  }
  if ((v = ynode_get(root, "description"))) {
    const char *d = get_string(c, v, "description", "", "a string");
    if (d)
      s->description = xstrdup(d);
  }
  if ((v = ynode_get(root, "params")))
    parse_params(c, v);
  if ((v = ynode_get(root, "max_parallel")))
    (void)get_int(c, v, "max_parallel", "", 1, 1000000, "an integer from 1 to 1000000",
                  &s->max_parallel);
  if ((v = ynode_get(root, "max_active_runs")))
    (void)get_int(c, v, "max_active_runs", "", 1, 1000000, "an integer from 1 to 1000000",
                  &s->max_active_runs);
  if ((v = ynode_get(root, "pools")))
    parse_pools(c, v);
  s->schedule = ynode_get(root, "schedule");
  parse_schedule(c, root);
  c->errors +=
      ontrig_parse(s->path, s->dir, ynode_get(root, "on"), &s->on, c->d);
  s->alerts = ynode_get(root, "alerts");
  if ((v = ynode_get(root, "secrets")))
    parse_secrets(c, v);

  spec_task def;
  task_init(&def);
  if ((v = ynode_get(root, "defaults"))) {
    if (v->kind == YNODE_MAP) {
      check_keys(c, v, " in defaults");
      parse_settings(c, v, &def, " in defaults", 1);
    } else if (!(v->kind == YNODE_SCALAR &&
                 ynode_scalar_type(v) == YSCALAR_NULL)) {
      type_err(c, v, "defaults", "", "a map of task settings");
    }
  }
  if (!(v = ynode_get(root, "tasks")))
    err(c, root,
        "missing required key 'tasks': a map of task names to tasks (e.g. "
        "tasks: {train: {stage: train}})");
  else
    parse_tasks(c, v, &def);
  free(def.retry.on);
  c->errors += prules_compile(s, ynode_get(root, "param_schema"), c->d);
}

int spec_parse(const char *name, const char *text, size_t len, spec **out,
               diags *d) {
  ynode *root;
  *out = NULL;
  int rc = ydoc_parse(name, text, len, &root, d);
  if (rc != 0)
    return rc;
  spec *s = xcalloc(1, sizeof(spec));
  s->path = xstrdup(name);
  s->dir = path_dirname(name);
  s->root = root;
  ctx c = {s, d, 0, NULL, 0};
  parse_root(&c);
  free(c.names);
  *out = s;
  return c.errors ? DR_ESPEC : 0;
}

int spec_load(const char *path, spec **out, diags *d) {
  char *text;
  size_t len;
  *out = NULL;
  int rc = ydoc_read(path, &text, &len, d);
  if (rc != 0)
    return rc;
  rc = spec_parse(path, text, len, out, d);
  free(text);
  return rc;
}

void spec_free(spec *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->n_tasks; i++) {
    spec_task *t = &s->tasks[i];
    free(t->name);
    free(t->stage);
    free(t->approval_message);
    free(t->needs);
    free(t->need_nodes);
    free(t->description);
    free(t->retry.on);
    ontrig_names_free(t->produces, t->n_produces);
  }
  free(s->tasks);
  for (size_t i = 0; i < s->n_maps; i++) {
    free(s->maps[i].name);
    free(s->maps[i].param);
    cJSON_Delete(s->maps[i].run_items);
  }
  free(s->maps);
  strmap_free(&s->map_index);
  for (size_t i = 0; i < s->n_pools; i++)
    free(s->pools[i].name);
  free(s->pools);
  for (size_t i = 0; i < s->n_secrets; i++)
    free(s->secrets[i]);
  free(s->secrets);
  free(s->secret_nodes);
  prules_destroy(s->rules);
  strmap_free(&s->task_index);
  dag_reach_destroy(s->reach);
  ynode_free(s->root);
  free(s->path);
  free(s->dir);
  free(s->dag);
  free(s->description);
  free(s->timezone);
  ontrig_free(&s->on);
  free(s);
}

/* Whether template text t holds ${params.NAME with nothing of a longer
 * name after it (the names secrets.c reads from a webhook). */
static int mentions_param(const char *t, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(t, "${params."); p;
       p = strstr(p + 1, "${params.")) {
    const char *z = p + 9;
    if (strncmp(z, name, n) == 0 && !isalnum((unsigned char)z[n]) &&
        z[n] != '_' && z[n] != '-')
      return 1;
  }
  return 0;
}

int spec_param_secret(const spec *s, const char *name) {
  for (size_t i = 0; i < s->n_secrets; i++)
    if (strcmp(s->secrets[i], name) == 0)
      return 1;
  const ynode *al = s->alerts;
  for (size_t i = 0; al && al->kind == YNODE_SEQ && i < al->n; i++) {
    const ynode *w = ynode_get(al->items[i], "webhook");
    if (w && w->kind == YNODE_SCALAR && mentions_param(w->str, name))
      return 1;
  }
  return 0;
}

void spec_hide_value(const char *msg, const char *value, char *err,
                     size_t errlen) {
  size_t n = strlen(value);
  sbuf b = {0};
  const char *p = msg;
  for (const char *q; n && (q = strstr(p, value));) {
    int quoted = q > msg && q[-1] == '\'' && q[n] == '\'';
    sbuf_add(&b, p, (size_t)(q - p));
    sbuf_puts(&b, quoted ? "***" : "");
    if (!quoted)
      sbuf_add(&b, q, 1);
    p = quoted ? q + n : q + 1;
  }
  sbuf_puts(&b, p);
  snprintf(err, errlen, "%s", b.s ? b.s : "");
  if (b.s)
    memset(b.s, 0, b.n);
  sbuf_free(&b);
}

long spec_task_find(const spec *s, const char *name) {
  size_t i;
  if (!strmap_get(&s->task_index, name, &i))
    return -1;
  return (long)i;
}

const spec_map *spec_map_find(const spec *s, const char *name) {
  size_t i;
  return strmap_get(&s->map_index, name, &i) ? &s->maps[i] : NULL;
}

int spec_schedule_open(const spec *s, cron_expr **e, cron_zone **z, char *err,
                       size_t errlen) {
  *e = NULL;
  *z = NULL;
  if (!s->schedule || s->schedule->kind != YNODE_SCALAR) {
    snprintf(err, errlen, "%s has no schedule", s->path);
    return DR_ENOENT;
  }
  int rc = cron_parse(s->schedule->str, e, NULL, err, errlen);
  if (rc == 0 && (rc = cron_zone_open(s->timezone, z, err, errlen)) != 0) {
    cron_destroy(*e);
    *e = NULL;
  }
  return rc;
}

/* Task t's needs with need `from` replaced by the n tasks first.. (in its
 * place, written as the need was). */
static void move_need(spec_task *t, size_t from, size_t first, size_t n) {
  size_t k = 0;
  while (k < t->n_needs && t->needs[k] != from)
    k++;
  if (k == t->n_needs)
    return;
  size_t total = t->n_needs - 1 + n;
  size_t *needs = xmalloc((total ? total : 1) * sizeof(size_t));
  const ynode **nodes = xmalloc((total ? total : 1) * sizeof(ynode *));
  const ynode *written = t->need_nodes[k];
  size_t w = 0;
  for (size_t j = 0; j < t->n_needs; j++) {
    if (j != k) {
      needs[w] = t->needs[j];
      nodes[w++] = t->need_nodes[j];
      continue;
    }
    for (size_t i = 0; i < n; i++) {
      needs[w] = first + i;
      nodes[w++] = written;
    }
  }
  free(t->needs);
  free(t->need_nodes);
  t->needs = needs;
  t->need_nodes = nodes;
  t->n_needs = total;
}

void spec_map_expand(spec *s, size_t map, const cJSON *items) {
  spec_map *m = &s->maps[map];
  if (m->placeholder == SIZE_MAX || m->expanded)
    return;
  size_t n = (size_t)cJSON_GetArraySize(items), old = s->n_tasks;
  s->tasks = xrealloc(s->tasks, (old + n ? old + n : 1) * sizeof(spec_task));
  memset(s->tasks + old, 0, n * sizeof(spec_task));
  /* The placeholder as parsed is every instance's template. */
  spec_task proto = s->tasks[m->placeholder];
  for (size_t i = 0; i < n; i++) {
    spec_task *t = add_instance(s, m, &proto, i);
    t->needs = xmalloc((proto.n_needs ? proto.n_needs : 1) * sizeof(size_t));
    t->need_nodes =
        xmalloc((proto.n_needs ? proto.n_needs : 1) * sizeof(ynode *));
    memcpy(t->needs, proto.needs, proto.n_needs * sizeof(size_t));
    memcpy(t->need_nodes, proto.need_nodes, proto.n_needs * sizeof(ynode *));
    t->n_needs = proto.n_needs;
  }
  m->first = old;
  m->n = n;
  m->expanded = 1;
  m->run_items = cJSON_Duplicate(items, 1);
  for (size_t i = 0; n && i < old; i++)
    move_need(&s->tasks[i], m->placeholder, old, n);
  /* "Is A upstream of B" was answered for the tasks before. */
  dag_reach_destroy(s->reach);
  s->reach = NULL;
}
