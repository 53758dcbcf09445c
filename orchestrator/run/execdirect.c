/* execdirect: see execdirect.h. */
#include "execdirect.h"

#include "base/util.h"
#include "lib/channels.h"
#include "lib/clock.h"
#include "lib/execcmd.h"

#include <dagrun/plugin.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The plan, and the context channels.h reports through (as a
 * dagrun_ctx): the host table below hands its calls to emit as worker
 * messages. */
struct execdirect {
  const char **argv;  /* items, or /bin/sh -c items[0] */
  char **items;       /* the command param's strings, copied */
  size_t n_items;
  char **env;         /* borrowed strings (base_env, extra, channels) */
  char **extra;       /* "NAME=value" of the env param, owned */
  size_t n_extra;
  char *file;         /* resolved program, or NULL */
  char *cwd;          /* or NULL */
  chan *ch;
  int log_fd;         /* appended to; -1 when it could not be opened */
  const secrets *sec;
  cJSON *declared;
  cJSON *produced;    /* output keys given, as true */
  char *error;        /* the last fail() */
  double started;
  execdirect_emit emit;
  void *ud;
};

static const char *const level_tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};

/* One log line as the worker writes them ("<UTC> LEVEL msg"), masked. */
static void log_line(execdirect *d, int level, const char *msg) {
  if (d->log_fd < 0)
    return;
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof ts);
  char *masked = secrets_count(d->sec) ? secrets_mask(d->sec, msg) : NULL;
  char *line = xasprintf("%s %s %s\n", ts, level_tags[level],
                         masked ? masked : msg);
  /* A full disk loses log lines, not the run. */
  (void)!write(d->log_fd, line, strlen(line));
  free(line);
  free(masked);
}

static void emit(execdirect *d, const proto_msg *m) {
  if (d->emit)
    d->emit(d->ud, m);
}

/* ---- the host table channels.h calls ---- */

static void host_log(dagrun_ctx *ctx, dagrun_log_level level, const char *fmt,
                     ...) {
  execdirect *d = (execdirect *)ctx;
  sbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  sbuf_puts(&b, "");
  int lv = level >= DAGRUN_LOG_DEBUG && level <= DAGRUN_LOG_ERROR
               ? (int)level
               : DAGRUN_LOG_INFO;
  log_line(d, lv, b.s);
  proto_msg m = {.type = PROTO_LOG, .level = lv, .text = b.s};
  emit(d, &m);
  sbuf_free(&b);
}

static void host_fail(dagrun_ctx *ctx, const char *fmt, ...) {
  execdirect *d = (execdirect *)ctx;
  sbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  sbuf_puts(&b, "");
  free(d->error);
  d->error = sbuf_take(&b);
}

static void host_progress(dagrun_ctx *ctx, double fraction, const char *msg) {
  execdirect *d = (execdirect *)ctx;
  if (!(fraction >= 0)) /* also NaN */
    fraction = 0;
  if (fraction > 1)
    fraction = 1;
  proto_msg m = {.type = PROTO_PROGRESS, .number = fraction,
                 .text = (char *)msg};
  emit(d, &m);
}

static void host_metric(dagrun_ctx *ctx, const char *name, double value,
                        int64_t step) {
  execdirect *d = (execdirect *)ctx;
  proto_msg m = {.type = PROTO_METRIC, .text = (char *)name, .number = value,
                 .step = step};
  emit(d, &m);
}

static int host_output(dagrun_ctx *ctx, const char *key, const char *value) {
  execdirect *d = (execdirect *)ctx;
  if (!proto_output_key_valid(key) || !value) {
    char *why = xasprintf("output refused: key '%s' is not [A-Za-z0-9_]+",
                          key ? key : "(NULL)");
    log_line(d, DAGRUN_LOG_WARN, why);
    free(why);
    return DR_EINVAL;
  }
  char *shown = xasprintf("output %s=%s", key, value);
  log_line(d, DAGRUN_LOG_INFO, shown);
  free(shown);
  if (!cJSON_GetObjectItemCaseSensitive(d->produced, key))
    cJSON_AddTrueToObject(d->produced, key);
  proto_msg m = {.type = PROTO_OUTPUT, .text = (char *)key,
                 .value = (char *)value};
  emit(d, &m);
  return 0;
}

static const dagrun_host host_table = {
    .log = host_log,
    .progress = host_progress,
    .metric = host_metric,
    .output = host_output,
    .fail = host_fail,
};

/* ---- the plan ---- */

int execdirect_eligible(const loader_plugin *p, int n_ranks, int launched) {
  return n_ranks <= 1 && !launched && loader_builtin(p, "exec");
}

/* The env param's entries as "NAME=value" into d->extra; -1 on a name a
 * worker would refuse (it reports that). */
static int take_env(execdirect *d, const cJSON *env) {
  d->n_extra = 0;
  d->extra = xcalloc((size_t)cJSON_GetArraySize(env) + 1, sizeof(char *));
  const cJSON *e;
  cJSON_ArrayForEach(e, env) {
    if (!*e->string || strchr(e->string, '=') || !cJSON_IsString(e))
      return -1;
    for (const char *const *v = chan_environ(d->ch); *v; v++)
      if (execcmd_sets(*v, e->string, strlen(e->string)))
        return -1; /* the worker warns about it: let it */
    d->extra[d->n_extra++] = xasprintf("%s=%s", e->string, e->valuestring);
  }
  return 0;
}

/* The program's path as a worker would find it: by the PATH of the env
 * param, else of the worker's environment; NULL in *file when neither
 * sets one (posix_spawnp then searches dagrun's own, which is the
 * same). -1 when it is on none of them (the worker reports that). */
static int find_program(execdirect *d, char **base_env) {
  const char *prog = d->argv[0];
  if (strchr(prog, '/'))
    return 0;
  size_t n_base = 0;
  while (base_env[n_base])
    n_base++;
  const char *path = execcmd_path_of(d->extra, d->n_extra);
  if (!path)
    path = execcmd_path_of(base_env, n_base);
  if (!path)
    return 0;
  d->file = execcmd_search_path(prog, path);
  return d->file ? 0 : -1;
}

/* The argv from the command and shell params; -1 when they make no
 * sense (the worker reports why). */
static int take_argv(execdirect *d, const cJSON *params) {
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(params, "command");
  const cJSON *shell = cJSON_GetObjectItemCaseSensitive(params, "shell");
  size_t n = (size_t)cJSON_GetArraySize(cmd);
  /* Copies: the params are gone before the command ends. */
  d->items = xcalloc(n + 1, sizeof(char *));
  const cJSON *c;
  cJSON_ArrayForEach(c, cmd) {
    if (!cJSON_IsString(c))
      return -1;
    d->items[d->n_items++] = xstrdup(c->valuestring);
  }
  char msg[256];
  d->argv = execcmd_argv((const char *const *)d->items, n,
                         cJSON_IsTrue(shell), msg, sizeof msg);
  return d->argv ? 0 : -1;
}

execdirect *execdirect_create(const execdirect_spec *sp) {
  execdirect *d = xcalloc(1, sizeof(*d));
  d->log_fd = -1;
  d->sec = sp->secrets;
  d->declared = sp->declared;
  d->produced = cJSON_CreateObject();
  const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(sp->params, "cwd");
  char msg[512];
  if (take_argv(d, sp->params) != 0 ||
      !(d->ch = chan_create(sp->attempt_dir, 0)) ||
      take_env(d, cJSON_GetObjectItemCaseSensitive(sp->params, "env")) != 0 ||
      execcmd_cwd(sp->dag_dir, cJSON_IsString(cwd) ? cwd->valuestring : NULL,
                  &d->cwd, msg, sizeof msg) != 0 ||
      find_program(d, sp->base_env) != 0 ||
      !(d->env = execcmd_env(sp->base_env, d->extra, d->n_extra,
                             chan_environ(d->ch)))) {
    execdirect_destroy(d);
    return NULL;
  }
  d->log_fd = open(sp->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                   0644);
  return d;
}

const char *execdirect_file(const execdirect *d) { return d->file; }
char *const *execdirect_argv(const execdirect *d) {
  return (char *const *)d->argv;
}
char *const *execdirect_env(const execdirect *d) { return d->env; }
const char *execdirect_cwd(const execdirect *d) { return d->cwd; }

void execdirect_started(execdirect *d) {
  d->started = clock_monotonic();
  /* The whole command is masked before it is cut to SHOWN_MAX: a secret
   * cut in two at the end would show its first part unmasked. */
  enum { SHOWN_MAX = 512 };
  char *full = execcmd_join(d->argv);
  if (!full)
    return; /* the line is a courtesy; the run goes on */
  char *shown = secrets_mask(d->sec, full);
  if (strlen(shown) >= SHOWN_MAX)
    memcpy(shown + SHOWN_MAX - 4, "...", 4);
  host_log((dagrun_ctx *)d, DAGRUN_LOG_INFO, "running: %s", shown);
  free(shown);
  memset(full, 0, strlen(full)); /* as secrets_destroy does */
  free(full);
}

void execdirect_poll(execdirect *d, execdirect_emit fn, void *ud, int final) {
  d->emit = fn;
  d->ud = ud;
  chan_poll(d->ch, (dagrun_ctx *)d, &host_table, final);
}

/* After a success: the first output the task declares and the command
 * did not give, or NULL. */
static const char *missing_output(const execdirect *d) {
  const cJSON *k;
  cJSON_ArrayForEach(k, d->declared) {
    if (cJSON_IsString(k) &&
        !cJSON_GetObjectItemCaseSensitive(d->produced, k->valuestring))
      return k->valuestring;
  }
  return NULL;
}

int execdirect_end(execdirect *d, int wstatus, int stopped,
                   execdirect_emit fn, void *ud, char **error) {
  execdirect_poll(d, fn, ud, 1); /* whatever the end, the curve is kept */
  char msg[512];
  int status = execcmd_status(d->argv[0], wstatus, msg, sizeof msg);
  if (status != 0)
    host_fail((dagrun_ctx *)d, "%s", msg);
  /* Outputs are what a command that succeeded leaves for downstream. */
  if (status == 0 && chan_outputs(d->ch, (dagrun_ctx *)d, &host_table) != 0)
    status = 1;
  const char *missing = status == 0 ? missing_output(d) : NULL;
  if (missing) {
    host_fail((dagrun_ctx *)d,
              "stage exec succeeded but did not produce output '%s', which "
              "the task declares in outputs:",
              missing);
    status = 1;
  }
  char took[32];
  format_duration(clock_monotonic() - d->started, took, sizeof took);
  if (status == 0) {
    char *line = xasprintf("dagrun: command succeeded in %s", took);
    log_line(d, DAGRUN_LOG_INFO, line);
    free(line);
  } else if (!stopped) {
    char *line = xasprintf("dagrun: command failed with status %d after %s: "
                           "%s",
                           status, took, d->error ? d->error : "?");
    log_line(d, DAGRUN_LOG_ERROR, line);
    free(line);
  }
  *error = status != 0 && d->error ? xstrdup(d->error) : NULL;
  return status;
}

void execdirect_destroy(execdirect *d) {
  if (!d)
    return;
  for (size_t i = 0; i < d->n_extra; i++)
    free(d->extra[i]);
  free(d->extra);
  free(d->argv);
  for (size_t i = 0; i < d->n_items; i++)
    free(d->items[i]);
  free(d->items);
  free(d->env);
  free(d->file);
  free(d->cwd);
  chan_destroy(d->ch);
  if (d->log_fd >= 0)
    close(d->log_fd);
  cJSON_Delete(d->produced);
  cJSON_Delete(d->declared);
  free(d->error);
  free(d);
}
