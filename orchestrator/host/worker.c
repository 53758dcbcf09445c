/*
 * worker: runs one task attempt in its own process. Reads the attempt
 * description, loads the plugin, implements the host table of
 * <dagrun/plugin.h> and reports to the orchestrator on PROTO_FD.
 *
 * The attempt log is this process's stdout and stderr: host->log() lines
 * go to stderr with a UTC timestamp and a level, and also travel on
 * PROTO_FD as log messages.
 */
#include "worker.h"

#include "base/util.h"
#include "guard.h"
#include "lib/clock.h"
#include "lib/fileio.h"
#include "loader.h"
#include "paramtypes.h"
#include "proto.h"
#include "sentmetrics.h"

#include <cjson/cJSON.h>
#include <dagrun/plugin.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* heartbeat() calls closer together than this send nothing: any message
 * counts as a heartbeat, and a plugin calling it in a tight loop must not
 * flood the pipe. */
#define WORKER_HEARTBEAT_MIN_MS 250

/* Set by the SIGTERM handler; read by host->cancelled() from any thread. */
static volatile sig_atomic_t cancel_flag;

/* Set when the connection to dagrun closed (watch_dagrun): dagrun was
 * killed or crashed, and what is sent from now on is lost. */
static atomic_int dagrun_gone;

/* The plugin whose run() was called; never unloaded (see worker_main).
 * volatile: the compiler must keep this never-read store, or an optimized
 * build's LeakSanitizer reports the plugin as leaked. */
static loader_plugin *volatile ran_plugin;

struct dagrun_ctx {
  cJSON *doc;    /* the attempt description */
  cJSON *params; /* member of doc, normalised to the stage's schema */
  const dagrun_stage *stage;
  const char *dirs[5];      /* by dagrun_dir, point into doc */
  const char *info[4];      /* by dagrun_info */
  char attempt[24];         /* info "attempt" as decimal text */
  int fd;                   /* PROTO_FD, or -1 when it is not open */
  atomic_llong last_msg_ms; /* monotonic time of the last message sent */
  pthread_mutex_t lock;     /* guards error, produced, sent, orphaned */
  char *error;              /* last host->fail() text */
  /* The metrics sent and perhaps never written by dagrun (sentmetrics.h);
   * orphaned once dagrun is gone and they are written: the worker writes
   * metrics.jsonl itself from then on. */
  sentmetrics *sent;
  int orphaned;
  cJSON *produced;          /* keys given to host->output(), as true */
  const cJSON *declared;    /* "outputs" of doc: the task's declared keys */
};

static const char *const level_tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
static const char *const dir_keys[] = {"out", "task", "attempt", "run", "dag"};
static const char *const info_keys[] = {"dag", "task", "run_id", "attempt"};

static long long monotonic_ms(void) {
  return (long long)(clock_monotonic() * 1000.0);
}

static void on_sigterm(int sig) {
  (void)sig;
  cancel_flag = 1;
}

/* Writes a whole buffer to fd 2. Errors are ignored: the log is the only
 * place left to report them. */
static void write_stderr(const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

/* One log-file line: "2026-11-21T13:53:27.123Z INFO msg". One write(2),
 * so lines from several threads stay whole. */
static void log_line(int level, const char *msg) {
  if (level < 0 || level > 3)
    level = DAGRUN_LOG_INFO;
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof(ts));
  char *line = xasprintf("%s %s %s\n", ts, level_tags[level], msg);
  write_stderr(line, strlen(line));
  free(line);
}

static void log_linef(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void log_linef(int level, const char *fmt, ...) {
  sbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  log_line(level, b.s);
  sbuf_free(&b);
}

static void sent(dagrun_ctx *ctx, int rc) {
  if (rc == 0)
    atomic_store(&ctx->last_msg_ms, monotonic_ms());
}

/* Host table: params. check_params() made every declared param what
 * params_build gives (typed JSON, defaults in); the getters still check
 * types, because a plugin may ask for a name its schema does not declare. */

static const cJSON *param(dagrun_ctx *ctx, const char *name) {
  if (!ctx || !name || !ctx->params)
    return NULL;
  return cJSON_GetObjectItemCaseSensitive(ctx->params, name);
}

/* The param if it has JSON type t; NULL with *rc set otherwise. */
static const cJSON *typed_param(dagrun_ctx *ctx, const char *name,
                                dagrun_param_type t, int *rc) {
  const cJSON *v = param(ctx, name);
  *rc = !v ? DR_ENOENT : params_json_is(v, t) ? 0 : DR_EPARAM;
  return *rc == 0 ? v : NULL;
}

static int host_param_string(dagrun_ctx *ctx, const char *name,
                             const char **out) {
  int rc;
  const cJSON *v = typed_param(ctx, name, DAGRUN_PARAM_STRING, &rc);
  if (v)
    *out = v->valuestring;
  return rc;
}

static int host_param_int(dagrun_ctx *ctx, const char *name, int64_t *out) {
  int rc;
  const cJSON *v = typed_param(ctx, name, DAGRUN_PARAM_INT, &rc);
  if (v)
    *out = (int64_t)v->valuedouble;
  return rc;
}

static int host_param_float(dagrun_ctx *ctx, const char *name, double *out) {
  int rc;
  const cJSON *v = typed_param(ctx, name, DAGRUN_PARAM_FLOAT, &rc);
  if (v)
    *out = v->valuedouble;
  return rc;
}

static int host_param_bool(dagrun_ctx *ctx, const char *name, int *out) {
  int rc;
  const cJSON *v = typed_param(ctx, name, DAGRUN_PARAM_BOOL, &rc);
  if (v)
    *out = cJSON_IsTrue(v);
  return rc;
}

static int host_param_list_size(dagrun_ctx *ctx, const char *name, size_t *n) {
  const cJSON *v = param(ctx, name);
  if (!v)
    *n = 0;
  else if (cJSON_IsArray(v))
    *n = (size_t)cJSON_GetArraySize(v);
  else if (cJSON_IsString(v))
    *n = 1; /* a scalar is a 1-item list */
  else
    return DR_EPARAM;
  return 0;
}

static int host_param_list_item(dagrun_ctx *ctx, const char *name, size_t i,
                                const char **out) {
  const cJSON *v = param(ctx, name);
  if (!v)
    return DR_ENOENT;
  const cJSON *item = NULL;
  if (cJSON_IsArray(v)) {
    if (i >= (size_t)cJSON_GetArraySize(v))
      return DR_EINVAL;
    item = cJSON_GetArrayItem(v, (int)i);
  } else if (cJSON_IsString(v)) {
    if (i != 0)
      return DR_EINVAL;
    item = v;
  }
  if (!cJSON_IsString(item) || !item->valuestring)
    return DR_EPARAM;
  *out = item->valuestring;
  return 0;
}

static int host_param_map_size(dagrun_ctx *ctx, const char *name, size_t *n) {
  const cJSON *v = param(ctx, name);
  if (!v)
    *n = 0;
  else if (cJSON_IsObject(v))
    *n = (size_t)cJSON_GetArraySize(v);
  else
    return DR_EPARAM;
  return 0;
}

static int host_param_map_entry(dagrun_ctx *ctx, const char *name, size_t i,
                                const char **key, const char **value) {
  const cJSON *v = param(ctx, name);
  if (!v)
    return DR_ENOENT;
  if (!cJSON_IsObject(v))
    return DR_EPARAM;
  if (i >= (size_t)cJSON_GetArraySize(v))
    return DR_EINVAL;
  const cJSON *e = cJSON_GetArrayItem(v, (int)i);
  if (!e || !e->string || !cJSON_IsString(e) || !e->valuestring)
    return DR_EPARAM;
  *key = e->string;
  *value = e->valuestring;
  return 0;
}

/* Host table: reporting. */

/* Drops trailing newlines: plugins often end log formats with "\n". */
static void chomp(sbuf *b) {
  while (b->n > 0 && (b->s[b->n - 1] == '\n' || b->s[b->n - 1] == '\r'))
    b->s[--b->n] = '\0';
}

static void host_log(dagrun_ctx *ctx, dagrun_log_level level, const char *fmt,
                     ...) {
  if (!fmt)
    return;
  sbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  sbuf_puts(&b, ""); /* never NULL, even for an empty message */
  chomp(&b);
  int lv = (int)level;
  if (lv < DAGRUN_LOG_DEBUG || lv > DAGRUN_LOG_ERROR)
    lv = DAGRUN_LOG_INFO;
  log_line(lv, b.s);
  if (ctx && ctx->fd >= 0)
    sent(ctx, proto_send_log(ctx->fd, lv, b.s));
  sbuf_free(&b);
}

static void host_progress(dagrun_ctx *ctx, double fraction,
                          const char *message) {
  if (!(fraction >= 0)) /* also NaN */
    fraction = 0;
  if (fraction > 1)
    fraction = 1;
  if (ctx && ctx->fd >= 0)
    sent(ctx, proto_send_progress(ctx->fd, fraction, message));
}

/* Metrics that could not reach dagrun because dagrun is gone: appended
 * to the task's metrics.jsonl as dagrun would have written them. A stage
 * stopped by dagrun's death still finishes its step and checkpoints it
 * (train: "stopped at step N; checkpoint"); without this the metrics of
 * that step were lost, and `dagrun resume` continued from step N with a
 * hole before it. The first time, the kept metrics dagrun never wrote
 * (read by nobody from the pipe) go first; then each one as it comes.
 * Rank 0 only, as for outputs. Nobody else writes the file meanwhile:
 * its writer is the dead dagrun. name NULL: only the kept ones (when
 * the watcher sees dagrun go). */
static void orphan_metrics(dagrun_ctx *ctx, const char *name, double value,
                           int64_t step) {
  const char *rank = getenv("DAGRUN_RANK");
  const char *task = ctx->dirs[DAGRUN_DIR_TASK];
  if ((rank && strcmp(rank, "0") != 0) || !task || !*task ||
      pthread_mutex_lock(&ctx->lock) != 0)
    return;
  char *path = xasprintf("%s/metrics.jsonl", task);
  if (!ctx->orphaned) {
    /* A full disk loses metrics, not the attempt. */
    (void)sentmetrics_flush(ctx->sent, path, atoi(ctx->attempt));
    ctx->orphaned = 1;
  } else if (name) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    char *line =
        proto_metric_line(clock_wall(), atoi(ctx->attempt), name, value, step);
    if (fd >= 0 && write(fd, line, strlen(line)) < 0) {
      /* A full disk loses metrics, not the attempt. */
    }
    free(line);
    if (fd >= 0)
      close(fd);
  }
  free(path);
  pthread_mutex_unlock(&ctx->lock);
}

/* Whether dagrun's end of fd closed: a send can fail before watch_dagrun
 * has seen it and set dagrun_gone. */
static int peer_closed(int fd) {
  struct pollfd p = {fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLRDHUP));
}

static void host_metric(dagrun_ctx *ctx, const char *name, double value,
                        int64_t step) {
  if (!name || !*name) {
    log_line(DAGRUN_LOG_WARN, "metric with no name ignored");
    return;
  }
  if (!ctx || ctx->fd < 0)
    return;
  /* Kept before it is sent: once in the pipe it may never be read. A
   * kept one is written by the flush of the kept ones (orphan_metrics,
   * from here or the watcher), a later one by itself. */
  int kept = 0;
  if (pthread_mutex_lock(&ctx->lock) == 0) {
    if (!ctx->orphaned) {
      sentmetrics_add(ctx->sent, name, value, step);
      kept = 1;
    }
    pthread_mutex_unlock(&ctx->lock);
  }
  int rc = proto_send_metric(ctx->fd, name, value, step);
  sent(ctx, rc);
  if (rc != 0 && (atomic_load(&dagrun_gone) || peer_closed(ctx->fd)))
    orphan_metrics(ctx, kept ? NULL : name, value, step);
}

static int host_output(dagrun_ctx *ctx, const char *key, const char *value) {
  if (!proto_output_key_valid(key) || !value) {
    log_linef(DAGRUN_LOG_WARN, "output refused: key '%s' is not [A-Za-z0-9_]+",
              key ? key : "(NULL)");
    return DR_EINVAL;
  }
  if (strlen(value) > PROTO_OUTPUT_MAX) {
    log_linef(DAGRUN_LOG_WARN,
              "output %s refused: %zu bytes, over the 16 MiB an output "
              "may hold (write it to a file in out/ and give its path)",
              key, strlen(value));
    return DR_EINVAL;
  }
  if (ctx && ctx->fd >= 0) {
    int rc = proto_send_output(ctx->fd, key, value);
    if (rc == DR_EINVAL) {
      log_linef(DAGRUN_LOG_WARN, "output %s refused: over %u bytes once "
                                 "written as JSON",
                key, PROTO_LINE_MAX);
      return DR_EINVAL;
    }
    sent(ctx, rc);
  }
  /* In the log too: the file then says what the attempt produced. */
  log_linef(DAGRUN_LOG_INFO, "output %s=%s", key, value);
  if (ctx && pthread_mutex_lock(&ctx->lock) == 0) {
    if (!ctx->produced)
      ctx->produced = cJSON_CreateObject();
    if (!cJSON_GetObjectItemCaseSensitive(ctx->produced, key))
      cJSON_AddTrueToObject(ctx->produced, key);
    pthread_mutex_unlock(&ctx->lock);
  }
  return 0;
}

static void host_heartbeat(dagrun_ctx *ctx) {
  if (!ctx || ctx->fd < 0)
    return;
  long long now = monotonic_ms();
  if (now - atomic_load(&ctx->last_msg_ms) < WORKER_HEARTBEAT_MIN_MS)
    return;
  sent(ctx, proto_send_heartbeat(ctx->fd));
}

static int host_cancelled(dagrun_ctx *ctx) { return cancel_flag != 0; }

static void host_fail(dagrun_ctx *ctx, const char *fmt, ...) {
  if (!ctx || !fmt)
    return;
  sbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  sbuf_puts(&b, "");
  chomp(&b);
  char *msg = sbuf_take(&b);
  if (pthread_mutex_lock(&ctx->lock) != 0) {
    free(msg);
    return;
  }
  free(ctx->error);
  ctx->error = msg;
  pthread_mutex_unlock(&ctx->lock);
}

static const char *host_dir(dagrun_ctx *ctx, dagrun_dir which) {
  if (!ctx || (int)which < 0 || (int)which >= 5)
    return NULL;
  return ctx->dirs[which];
}

static const char *host_info(dagrun_ctx *ctx, dagrun_info which) {
  if (!ctx || (int)which < 0 || (int)which >= 4)
    return NULL;
  return ctx->info[which];
}

static const dagrun_host host_table = {
    .struct_size = sizeof(dagrun_host),
    .abi_version = DAGRUN_ABI_VERSION,
    .param_string = host_param_string,
    .param_int = host_param_int,
    .param_float = host_param_float,
    .param_bool = host_param_bool,
    .param_list_size = host_param_list_size,
    .param_list_item = host_param_list_item,
    .param_map_size = host_param_map_size,
    .param_map_entry = host_param_map_entry,
    .log = host_log,
    .progress = host_progress,
    .metric = host_metric,
    .output = host_output,
    .heartbeat = host_heartbeat,
    .cancelled = host_cancelled,
    .fail = host_fail,
    .dir = host_dir,
    .info = host_info,
};

/* Setup: the attempt description and the params. */

/* Non-zero if v (of p's type) is among p's choices, or p has none. */
static int choice_ok(const cJSON *v, const dagrun_param_spec *p,
                     const dagrun_stage *st) {
  const char *const *values = loader_param_choices(loader_choices(st), p->name);
  if (!values)
    return 1;
  char *z = cJSON_IsString(v) ? xstrdup(v->valuestring)
                              : xasprintf("%.0f", v->valuedouble);
  int ok = loader_choice_index(values, p->type, z) >= 0;
  free(z);
  return ok;
}

/* Makes the params what the plugin's schema promises: the defaults of
 * absent params filled in, every declared param of its type and among its
 * choices. dagrun built
 * them that way already (params_build); this guards a worker started on a
 * hand-written attempt.json, or a plugin replaced since the check. */
static int check_params(cJSON *params, const dagrun_stage *st, char *err,
                        size_t errlen) {
  for (const dagrun_param_spec *p = st->params; p && p->name; p++) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(params, p->name);
    if (!v || cJSON_IsNull(v)) {
      cJSON_DeleteItemFromObjectCaseSensitive(params, p->name);
      if (p->required) {
        snprintf(err, errlen, "missing required param '%s'", p->name);
        return DR_EPARAM;
      }
      cJSON *d = params_default(p);
      if (d)
        cJSON_AddItemToObject(params, p->name, d);
      else if (p->default_value && p->type != DAGRUN_PARAM_LIST &&
               p->type != DAGRUN_PARAM_MAP) {
        snprintf(err, errlen,
                 "the plugin's default \"%s\" for param '%s' is not %s (a "
                 "bug in the plugin)",
                 p->default_value, p->name, params_type_expected(p->type));
        return DR_EPARAM;
      }
    } else if (!params_json_is(v, p->type)) {
      char *text = cJSON_PrintUnformatted(v);
      snprintf(err, errlen, "param '%s' must be %s, got %.80s", p->name,
               params_type_expected(p->type), text ? text : "?");
      cJSON_free(text);
      return DR_EPARAM;
    } else if (!choice_ok(v, p, st)) {
      char *text = cJSON_PrintUnformatted(v);
      sbuf b = {0};
      loader_choices_join(&b,
                          loader_param_choices(loader_choices(st), p->name));
      snprintf(err, errlen, "param '%s' must be one of %s, got %.80s", p->name,
               b.s, text ? text : "?");
      sbuf_free(&b);
      cJSON_free(text);
      return DR_EPARAM;
    }
  }
  return 0;
}

/* What watch_dagrun watches: fd 3, and whether this worker leads its
 * own process group (then the attempt's commands are in it); and how long
 * it waits, after SIGTERM to its group when dagrun died, before it kills
 * the group: the task's kill_grace (DAGRUN_KILL_GRACE_MS), as dagrun
 * alive would give it (a training stage's stop checkpoint). */
typedef struct watched {
  int fd;
  int leader;
  long long grace_ms;
} watched;

/* Cancels the stage as SIGTERM does; a worker that leads its own group
 * (as the executor and Open MPI's mpirun make it) sends SIGTERM to the
 * group, so that commands the stage started get it too. A worker run by
 * hand never signals its caller's group. */
static void cancel_attempt(const watched *w) {
  cancel_flag = 1;
  if (w->leader)
    kill(0, SIGTERM);
}

/* Watches the connection to dagrun (fd 3: the message pipe, or a
 * launched rank's socket).
 * - On a launched rank's socket dagrun sends "stop\n" when the gang's
 *   attempt ends (timeout, cancel, another rank's failure): this rank
 *   stops as if cancelled, within the task's kill_grace, before dagrun
 *   signals its launcher (executor.c: the launcher's own SIGTERM would
 *   leave it Open MPI's 1 s).
 * - "kill\n" comes on a forced stop (Ctrl-C twice): the rank must end
 *   now, and its launcher, killed soon after, may not end it (mpirun
 *   killed outright cannot), so it ends itself: SIGKILL to its group
 *   when it leads one (what its stage started dies with it), else to
 *   itself.
 * - When dagrun's end closes, the dagrun that started this attempt is
 *   gone (killed, crashed), nobody will record the result, and `dagrun
 *   resume` will run the task again. So the attempt stops as if
 *   cancelled, and a leader kills its group after a grace. */
static void *watch_dagrun(void *arg) {
  const watched *w = arg;
  struct stat st;
  /* Only a socket has anything to read: fd 3 is a pipe's write end, or a
   * file when a worker is run by hand. */
  int sock = fstat(w->fd, &st) == 0 && S_ISSOCK(st.st_mode);
  /* POLLRDHUP: on a TCP connection dagrun's end closing shows as that,
   * not as POLLHUP (which a pipe gives). */
  struct pollfd pfd = {w->fd, (short)(POLLRDHUP | (sock ? POLLIN : 0)), 0};
  char line[16];
  size_t n = 0;
  for (;;) {
    int k = poll(&pfd, 1, -1);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 || (pfd.revents & POLLNVAL))
      return NULL;
    if (pfd.revents & POLLIN) {
      /* A few bytes in a whole attempt: one read each keeps it simple. */
      char c;
      ssize_t r = read(w->fd, &c, 1);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        break; /* closed (data before the close was read first) */
      if (c != '\n') {
        if (n < sizeof(line) - 1)
          line[n++] = c;
        continue;
      }
      line[n] = '\0';
      n = 0;
      if (strcmp(line, "stop") == 0) {
        log_line(DAGRUN_LOG_WARN, "dagrun worker: dagrun stops this gang's "
                                  "attempt (timeout, cancel or another "
                                  "rank's failure): cancelling");
        cancel_attempt(w);
      } else if (strcmp(line, "kill") == 0) {
        log_line(DAGRUN_LOG_ERROR, "dagrun worker: dagrun kills this gang's "
                                   "attempt (a forced stop): killing it now");
        kill(w->leader ? 0 : getpid(), SIGKILL);
      }
      continue;
    }
    if (pfd.revents & (POLLERR | POLLHUP | POLLRDHUP))
      break;
  }
  atomic_store(&dagrun_gone, 1);
  log_line(DAGRUN_LOG_ERROR, "dagrun worker: dagrun is gone (message pipe "
                             "closed): stopping this attempt");
  cancel_attempt(w);
  if (!w->leader)
    return NULL;
  struct timespec grace = {(time_t)(w->grace_ms / 1000),
                           (long)(w->grace_ms % 1000) * 1000000};
  while (nanosleep(&grace, &grace) != 0 && errno == EINTR)
    ;
  log_line(DAGRUN_LOG_ERROR, "dagrun worker: still running after the grace: "
                             "killing this attempt");
  kill(0, SIGKILL);
  return NULL;
}

/* After a run() that succeeded: 0 when every output the task declares
 * (`outputs:` in the DAG file) was given, else 1 with the first missing
 * one as the attempt's error. Downstream tasks may rely on a declared
 * output, so its absence fails the task here, not theirs later. */
static int check_declared(dagrun_ctx *ctx) {
  const cJSON *k;
  int status = 0;
  /* In a gang, rank 0 speaks for the task (its outputs are the task's). */
  const char *rank = getenv("DAGRUN_RANK");
  if ((rank && strcmp(rank, "0") != 0) || pthread_mutex_lock(&ctx->lock) != 0)
    return 0;
  cJSON_ArrayForEach(k, ctx->declared) {
    if (!cJSON_IsString(k) ||
        cJSON_GetObjectItemCaseSensitive(ctx->produced, k->valuestring))
      continue;
    free(ctx->error);
    ctx->error = xasprintf("stage %s succeeded but did not produce output "
                           "'%s', which the task declares in outputs:",
                           ctx->stage->name, k->valuestring);
    status = 1;
    break;
  }
  pthread_mutex_unlock(&ctx->lock);
  return status;
}

/* Ends the attempt before the plugin ran: log line, result message, 125. */
static int setup_failed(int fd, const char *msg) {
  log_linef(DAGRUN_LOG_ERROR, "dagrun worker: %s", msg);
  if (fd >= 0)
    (void)proto_send_result(fd, WORKER_EXIT_SETUP, msg);
  return WORKER_EXIT_SETUP;
}

static int install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sigemptyset(&sa.sa_mask);
  /* The orchestrator may be gone; a write to the pipe must fail with EPIPE,
   * not kill the attempt. */
  sa.sa_handler = SIG_IGN;
  if (sigaction(SIGPIPE, &sa, NULL) != 0)
    return -1;
  /* A write past RLIMIT_FSIZE then fails with EFBIG, which the stage
   * reports and cleans up after, instead of the attempt being killed
   * mid-write with its temporaries left behind. */
  signal(SIGXFSZ, SIG_IGN);
  /* An inherited SIG_IGN for SIGCHLD would make children vanish before a
   * stage can wait for them. */
  sa.sa_handler = SIG_DFL;
  if (sigaction(SIGCHLD, &sa, NULL) != 0)
    return -1;
  /* SA_RESTART: plugins that read or write need not expect EINTR; sleeps
   * and sigtimedwait still return early, which is what cancellation
   * wants. */
  sa.sa_handler = on_sigterm;
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, NULL) != 0)
    return -1;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  return sigprocmask(SIG_UNBLOCK, &set, NULL) == 0 ? 0 : -1;
}

static int read_attempt(dagrun_ctx *ctx, const char *path, char **plugin,
                        char *err, size_t errlen) {
  char *text = NULL;
  size_t n = 0;
  int rc = fileio_read_file(path, &text, &n);
  if (rc != 0) {
    rc = rc == -ENOENT ? DR_ENOENT : DR_EIO;
    snprintf(err, errlen, "cannot read attempt file %s: %s", path,
             dr_strerror(rc));
    return rc;
  }
  ctx->doc = cJSON_ParseWithLength(text, n);
  if (!ctx->doc || !cJSON_IsObject(ctx->doc)) {
    const char *at = cJSON_GetErrorPtr();
    long off = (!ctx->doc && at && at >= text && at <= text + n)
                   ? (long)(at - text)
                   : -1;
    if (off >= 0)
      snprintf(err, errlen, "%s: not a JSON object (error at byte %ld)", path,
               off);
    else
      snprintf(err, errlen, "%s: not a JSON object", path);
    free(text);
    return DR_EINVAL;
  }
  free(text);

  const cJSON *pl = cJSON_GetObjectItemCaseSensitive(ctx->doc, "plugin");
  if (!cJSON_IsString(pl) || !*pl->valuestring) {
    snprintf(err, errlen, "%s: \"plugin\" must be a path string", path);
    return DR_EINVAL;
  }
  *plugin = xstrdup(pl->valuestring);

  cJSON *params = cJSON_GetObjectItemCaseSensitive(ctx->doc, "params");
  if (!params) {
    params = cJSON_AddObjectToObject(ctx->doc, "params");
  } else if (!cJSON_IsObject(params)) {
    snprintf(err, errlen, "%s: \"params\" must be an object", path);
    return DR_EINVAL;
  }
  ctx->params = params;

  /* Plugins may use every directory without checking for NULL. */
  const cJSON *dirs = cJSON_GetObjectItemCaseSensitive(ctx->doc, "dirs");
  for (int i = 0; i < 5; i++) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(dirs, dir_keys[i]);
    if (!cJSON_IsString(d)) {
      snprintf(err, errlen, "%s: \"dirs\".\"%s\" must be a path string", path,
               dir_keys[i]);
      return DR_EINVAL;
    }
    ctx->dirs[i] = d->valuestring;
  }

  const cJSON *outs = cJSON_GetObjectItemCaseSensitive(ctx->doc, "outputs");
  if (outs && !cJSON_IsArray(outs)) {
    snprintf(err, errlen, "%s: \"outputs\" must be a list of keys", path);
    return DR_EINVAL;
  }
  ctx->declared = outs;

  const cJSON *info = cJSON_GetObjectItemCaseSensitive(ctx->doc, "info");
  for (int i = 0; i < 4; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(info, info_keys[i]);
    if (cJSON_IsString(v)) {
      ctx->info[i] = v->valuestring;
    } else if (cJSON_IsNumber(v) && i == DAGRUN_INFO_ATTEMPT) {
      snprintf(ctx->attempt, sizeof(ctx->attempt), "%.0f", v->valuedouble);
      ctx->info[i] = ctx->attempt;
    } else {
      ctx->info[i] = ""; /* unknown facts are empty, never NULL */
    }
  }
  return 0;
}

/* How long a rank waits for dagrun's answer to its join line. dagrun
 * answers at once; only a stuck network takes this long. */
#define JOIN_ANSWER_MS 60000

/* Connects to dagrun's rendezvous at addr ("host:port", "[v6]:port") and
 * joins as rank, proving it with token: sends "dagrun-join TOKEN RANK\n"
 * and waits for "ok\n" (executor.h). Returns the socket, or -1 with err. */
static int rdv_connect(const char *addr, const char *token, const char *rank,
                       char *err, size_t errlen) {
  char host[256];
  const char *port;
  const char *colon = strrchr(addr, ':');
  size_t n = colon ? (size_t)(colon - addr) : 0;
  if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
    addr++;
    n -= 2;
  }
  if (!colon || n == 0 || n >= sizeof(host)) {
    snprintf(err, errlen, "DAGRUN_GANG_ADDR=%s is not host:port", addr);
    return -1;
  }
  memcpy(host, addr, n);
  host[n] = '\0';
  port = colon + 1;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai != 0) {
    snprintf(err, errlen, "cannot resolve dagrun's rendezvous %s: %s", host,
             gai_strerror(gai));
    return -1;
  }
  int s = -1, e = 0;
  for (struct addrinfo *ai = res; ai && s < 0; ai = ai->ai_next) {
    s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
      e = errno;
      close(s);
      s = -1;
    }
  }
  freeaddrinfo(res);
  if (s < 0) {
    snprintf(err, errlen, "cannot connect to dagrun's rendezvous at %s:%s: %s",
             host, port, strerror(e));
    return -1;
  }
  /* One short line on a fresh connection: one send, never a partial
   * one. MSG_NOSIGNAL: a rendezvous that closed must not kill the rank. */
  char *line = xasprintf("dagrun-join %s %s\n", token, rank);
  ssize_t w;
  do
    w = send(s, line, strlen(line), MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  int rc = w == (ssize_t)strlen(line) ? 0 : -1;
  free(line);
  char ans[4] = {0};
  size_t got = 0;
  while (rc == 0 && got < 3) {
    struct pollfd pfd = {s, POLLIN, 0};
    int pr = poll(&pfd, 1, JOIN_ANSWER_MS);
    if (pr < 0 && errno == EINTR)
      continue;
    ssize_t r = pr > 0 ? read(s, ans + got, 3 - got) : -1;
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  if (rc != 0 || strcmp(ans, "ok\n") != 0) {
    snprintf(err, errlen,
             "dagrun's rendezvous at %s:%s refused rank %s (a wrong "
             "DAGRUN_GANG_TOKEN, or a rank that joined already: see the "
             "attempt's log)",
             host, port, rank);
    close(s);
    return -1;
  }
  return s;
}

/* A rank started by a launcher (mpirun, srun; executor.h) inherits
 * neither its log nor the message pipe: with DAGRUN_GANG_DIR set and fd 3
 * closed, it learns its rank from the launcher's environment
 * (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID, and the
 * matching size and local rank), exports DAGRUN_RANK, DAGRUN_WORLD_SIZE
 * and DAGRUN_LOCAL_RANK for its stage, joins dagrun's rendezvous at
 * DAGRUN_GANG_ADDR with DAGRUN_GANG_TOKEN (the connection becomes fd 3),
 * and appends its stdout and stderr to its log (rank 0: DIR/log, rank r:
 * DIR/rank-<r>/log), DIR being on a filesystem every host shares. Returns
 * 0, or -1 with err (fd 3 is open when the rank joined: the error can go
 * to dagrun). */
static int join_gang(const char *dir, char *err, size_t errlen) {
  const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK",
                                   "PMI_RANK", "SLURM_PROCID", NULL};
  const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                   "SLURM_NTASKS", NULL};
  const char *const local_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
                                    "MPI_LOCALRANKID", "SLURM_LOCALID", NULL};
  const char *rank = NULL, *size = NULL, *local = NULL;
  for (size_t k = 0; !rank && rank_vars[k]; k++)
    rank = getenv(rank_vars[k]);
  for (size_t k = 0; !size && size_vars[k]; k++)
    size = getenv(size_vars[k]);
  for (size_t k = 0; !local && local_vars[k]; k++)
    local = getenv(local_vars[k]);
  const char *addr = getenv("DAGRUN_GANG_ADDR");
  const char *token = getenv("DAGRUN_GANG_TOKEN");
  if (!rank) {
    snprintf(err, errlen,
             "DAGRUN_GANG_DIR is set but no launcher said this "
             "process's rank");
    return -1;
  }
  if (!addr || !token) {
    snprintf(err, errlen,
             "DAGRUN_GANG_DIR is set but DAGRUN_GANG_ADDR or "
             "DAGRUN_GANG_TOKEN is not: this rank's launcher "
             "was not started by dagrun");
    return -1;
  }
  setenv("DAGRUN_RANK", rank, 1);
  if (size)
    setenv("DAGRUN_WORLD_SIZE", size, 1);
  setenv("DAGRUN_LOCAL_RANK", local ? local : rank, 1);
  int s = rdv_connect(addr, token, rank, err, errlen);
  if (s < 0)
    return -1;
  if (s != PROTO_FD) {
    dup2(s, PROTO_FD); /* the copy is inheritable; set CLOEXEC later */
    close(s);
  }
  /* The stage must not see the token: it proves nothing once joined, but
   * a command the stage runs could print it. */
  unsetenv("DAGRUN_GANG_TOKEN");
  char *log = atoi(rank) == 0 ? xasprintf("%s/log", dir)
                              : xasprintf("%s/rank-%s/log", dir, rank);
  int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    char me[256] = "?";
    gethostname(me, sizeof(me) - 1);
    snprintf(err, errlen,
             "rank %s on %s cannot open its log %s: %s (a gang across hosts "
             "needs the runs directory on a filesystem every host shares, "
             "at the same path)",
             rank, me, log, strerror(errno));
    free(log);
    return -1;
  }
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
  free(log);
  return 0;
}

int worker_main(const char *attempt_json_path) {
  /* Plugin printf()s should reach the log as they happen, not at exit. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *gang_dir = getenv("DAGRUN_GANG_DIR");
  if (gang_dir && *gang_dir && fcntl(PROTO_FD, F_GETFD) < 0) {
    char gerr[1024];
    if (join_gang(gang_dir, gerr, sizeof(gerr)) != 0)
      return setup_failed(fcntl(PROTO_FD, F_GETFD) >= 0 ? PROTO_FD : -1, gerr);
  }

  dagrun_ctx ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.fd = -1;
  atomic_init(&ctx.last_msg_ms, 0);
  if (pthread_mutex_init(&ctx.lock, NULL) != 0)
    return setup_failed(-1, "cannot create a mutex");
  /* A few seconds of a training stage's metrics: more than the pipe's
   * buffer holds unread. */
  ctx.sent = sentmetrics_create(4096);

  /* Run by hand, fd 3 may be closed: then the attempt runs, silently. */
  int flags = fcntl(PROTO_FD, F_GETFD);
  if (flags >= 0) {
    ctx.fd = PROTO_FD;
    /* Commands a stage starts must not hold the orchestrator's pipe. */
    if (fcntl(PROTO_FD, F_SETFD, flags | FD_CLOEXEC) != 0)
      log_linef(DAGRUN_LOG_WARN, "cannot set FD_CLOEXEC on fd %d: %s", PROTO_FD,
                strerror(errno));
  }
  if (install_signals() != 0)
    return setup_failed(ctx.fd, "cannot install signal handlers");
  static watched watch;
  pthread_t watcher;
  watch.fd = ctx.fd;
  watch.leader = getpgrp() == getpid();
  const char *grace = getenv("DAGRUN_KILL_GRACE_MS");
  char *end = NULL;
  watch.grace_ms = grace ? strtoll(grace, &end, 10) : -1;
  if (!grace || *end || watch.grace_ms < 0)
    watch.grace_ms = 1000LL * GUARD_GRACE_S; /* run by hand: the default */
  if (ctx.fd >= 0) {
    pthread_attr_t attr;
    /* The watcher takes no signals (it inherits this mask): a cancel's
     * SIGTERM must reach the stage's thread, waking its sleeps and waits
     * (exec's sigtimedwait) and setting the flag before that thread can
     * see the command the same SIGTERM killed exit; the SIGCHLD a stage
     * waits for must not be taken by another thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_attr_init(&attr) == 0) {
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (pthread_create(&watcher, &attr, watch_dagrun, &watch) != 0)
        log_line(DAGRUN_LOG_WARN, "dagrun worker: cannot watch the message "
                                  "pipe: this attempt will not stop by "
                                  "itself if dagrun dies");
      pthread_attr_destroy(&attr);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }

  char err[1024];
  char *plugin_path = NULL;
  loader_plugin *plugin = NULL;
  int status;
  if (read_attempt(&ctx, attempt_json_path, &plugin_path, err, sizeof(err)) !=
          0 ||
      loader_open(plugin_path, &plugin, err, sizeof(err)) != 0) {
    status = setup_failed(ctx.fd, err);
    goto done;
  }
  /* A description given as a memfd (the one on disk is masked, see
   * executor.h) holds secrets: the commands a stage starts do not get it. */
  if (strncmp(attempt_json_path, "/dev/fd/", 8) == 0)
    close(atoi(attempt_json_path + 8));
  ctx.stage = plugin->stage;
  if (check_params(ctx.params, ctx.stage, err, sizeof(err)) != 0) {
    char *msg =
        xasprintf("stage '%s' (%s): %s", ctx.stage->name, plugin_path, err);
    status = setup_failed(ctx.fd, msg);
    free(msg);
    goto done;
  }

  if (*ctx.info[DAGRUN_INFO_TASK])
    log_linef(
        DAGRUN_LOG_INFO, "dagrun worker: stage %s %s (%s), task %s, attempt %s",
        ctx.stage->name, ctx.stage->version ? ctx.stage->version : "",
        plugin_path, ctx.info[DAGRUN_INFO_TASK], ctx.info[DAGRUN_INFO_ATTEMPT]);
  else /* run by hand, without the executor's facts */
    log_linef(DAGRUN_LOG_INFO, "dagrun worker: stage %s %s (%s)",
              ctx.stage->name, ctx.stage->version ? ctx.stage->version : "",
              plugin_path);
  double t0 = clock_monotonic();
  status = ctx.stage->run(&ctx, &host_table);
  double elapsed = clock_monotonic() - t0;
  fflush(stdout);
  /* dagrun died and the stage sent nothing after: what it sent last may
   * still be unread in the dead pipe. */
  if (atomic_load(&dagrun_gone))
    orphan_metrics(&ctx, NULL, 0, 0);

  if (status < 0)
    status = 1;
  if (status > 255)
    status = 255;
  if (status == 0)
    status = check_declared(&ctx);
  char *error = NULL;
  if (pthread_mutex_lock(&ctx.lock) == 0) {
    if (status != 0 && ctx.error)
      error = xstrdup(ctx.error);
    pthread_mutex_unlock(&ctx.lock);
  }
  char took[32];
  format_duration(elapsed, took, sizeof(took));
  if (status == 0)
    log_linef(DAGRUN_LOG_INFO, "dagrun worker: stage %s succeeded in %s",
              ctx.stage->name, took);
  else
    log_linef(DAGRUN_LOG_ERROR,
              "dagrun worker: stage %s failed with status %d after %s: %s",
              ctx.stage->name, status, took,
              error ? error
                    : "(no reason given: the plugin did not call "
                      "host->fail())");
  if (ctx.fd >= 0 && proto_send_result(ctx.fd, status, error) != 0)
    log_line(DAGRUN_LOG_WARN, "dagrun worker: cannot send the result on the "
                              "message pipe");
  free(error);

  /* A plugin that ran stays loaded: threads it left behind may still run
   * its code until exit. */
  ran_plugin = plugin;
  plugin = NULL;
done:
  loader_close(plugin);
  free(plugin_path);
  free(ctx.error);
  sentmetrics_free(ctx.sent);
  cJSON_Delete(ctx.produced);
  cJSON_Delete(ctx.doc);
  pthread_mutex_destroy(&ctx.lock);
  return status;
}
