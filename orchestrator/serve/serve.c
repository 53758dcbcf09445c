/*
 * serve: the `dagrun serve` daemon; what it promises (one daemon per
 * store, the store as the truth, shutdown and restart) is in serve.h.
 *
 * One libuv loop owns all state: a tick (TICK_MS) rescans the DAG files
 * and fires due schedules, child runs are uv_process handles, and the
 * API's threads reach the loop only through the request queue under mu
 * and the wake async. Runs are separate `dagrun run` processes so that a
 * daemon that dies takes no run with it.
 */
#include "serve.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "api.h"
#include "backfill.h"
#include "base/cli.h"
#include "base/cron.h"
#include "base/util.h"
#include "dagfile/spec.h"
#include "dagfile/template.h"
#include "datatrig.h"
#include "host/check.h"
#include "host/describe.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "run/rundir.h"
#include "run/workerenv.h"
#include "store/pause.h"
#include "store/resume.h"
#include "store/runqueue.h"
#include "store/store.h"
#include "trigger.h"

/* How often the daemon looks at its DAG files and schedules. */
#define TICK_MS 500
/* How long an API request waits for the loop before it gives up. */
#define API_WAIT_S 30
/* How long an API trigger waits for its run to be recorded (--ready-fd)
 * before it is answered anyway, counted as API_WAIT_S is, from when the
 * API thread handed it over: over the store's busy timeout (10 s), so
 * that a dagrun that gives up on a locked store is answered as failed,
 * and 10 s under API_WAIT_S, so that a slow start (or a loop held up by
 * a scan) is still answered with its run id. */
#define RECORD_WAIT_S 20

const char serve_usage[] =
    "usage: dagrun serve PATH... [options]\n"
    "  PATH                    DAG files, or directories of *.yaml / *.yml\n"
    "  --host ADDR             address to listen on (default 127.0.0.1)\n"
    "  --port N                port (default 8470; 0: any free port)\n"
    "  --allow-host NAME       accept Host: NAME (a reverse proxy's name;\n"
    "                          repeatable)\n"
    "  --request-timeout S     seconds a client has to send a whole request\n"
    "                          (default 30)\n"
    "  --token-file FILE       bearer token for POSTs (or $DAGRUN_API_TOKEN)\n"
    "  --hmac-secret-file FILE HMAC key for signed POSTs (or\n"
    "                          $DAGRUN_API_HMAC_SECRET)\n"
    "  --read-token-file FILE  bearer token for GETs of runs, logs and\n"
    "                          reports (or $DAGRUN_API_READ_TOKEN); needed\n"
    "                          off loopback\n"
    "  --runs-dir DIR          where runs go (default: $DAGRUN_RUNS_DIR or\n"
    "                          ./runs)\n"
    "  --on-shutdown stop|finish  on SIGTERM: stop running runs (resumed\n"
    "                          at the next start; default) or wait for them\n"
    "  --no-cron               fire no schedules and no data triggers (API\n"
    "                          only)\n";

/* A run waiting for its turn (overlap: queue, catch-up). */
typedef struct pending {
  int64_t at;      /* logical date, 0: none (an API run) */
  char *run_id;    /* given to the API caller already, or NULL */
  char *trigger;   /* "cron", "api", "files" or "dataset" */
  char **params;   /* "NAME=VALUE" overrides, NULL-terminated, or NULL */
  char *info;      /* a data trigger's DAGRUN_TRIGGER_INFO, or NULL */
  long long seq;   /* its row in the store's queue (runqueue.h), 0: none */
} pending;

typedef struct dag_entry {
  char *file; /* absolute */
  struct timespec mtime;
  off_t size;
  ino_t ino;
  int seen; /* found by the current scan */
  spec *sp; /* the version in use; NULL when it never loaded */
  checked *ck;
  char *error; /* why the file (its latest version) does not load */
  int dup;     /* error: its dag's name is another file's (scan) */
  cron_expr *cron;
  cron_zone *zone;
  int64_t last, next; /* schedule times: last handled, next (0: none) */
  pending *queue;
  size_t nq, capq;
  size_t fired, skipped, dropped; /* since the daemon started */
  datatrig *dt;                   /* its data triggers' state (datatrig.h) */
  size_t data_fired, data_coalesced; /* since the daemon started */
  /* Its row in the store's dag_pauses (pause.h: {dag, since, by, via}), or
   * NULL while its schedule goes; read on every tick. */
  cJSON *paused;
} dag_entry;

typedef struct server server;
typedef struct api_request api_request;

typedef struct child_run {
  server *srv;
  uv_process_t proc;
  /* The read end of a new run's --ready-fd, which its dagrun writes to
   * once the run is recorded. */
  uv_pipe_t ready;
  int recorded;     /* the run is in the store: what the API shows of it */
  int handles;      /* proc and ready while open: freed at 0 */
  api_request *req; /* an API trigger answered once the run is recorded */
  char ready_buf[64];
  char *run_id, *dag;
  int64_t at; /* its logical date as started (0: none, or a resume) */
  /* A resume asked through the API after the run's end was recorded but
   * before its dagrun exited (it still writes the report and delivers
   * alerts): `dagrun ARGS...`, started when this one exits. NULL: none. */
  char **then_resume;
  /* A resume this daemon started because the run's dagrun was killed: if
   * it is killed too, the run is left interrupted (no resume loop). */
  int revived;
  struct child_run *next;
} child_run;

/* A trigger, cancel or backfill from the API, handed to the loop. */
struct api_request {
  int cancel;
  int resume; /* run_id_in goes on; params: an array of tasks to clear */
  int downstream;
  int backfill; /* from, to, rerun: a backfill of dag; its answer: result */
  int pause;    /* 1 pause dag (by, via), 2 unpause it; answer: result */
  char *by, *via;
  char *from, *to;
  int rerun;
  cJSON *result;
  char *dag, *run_id_in;
  cJSON *params;
  char run_id[128];
  char err[512];
  int status;
  int done, abandoned;
  /* A trigger whose run started: answered when its dagrun has recorded
   * it (child_run.req), not when the loop is through with it. */
  int waiting;
  double queued_at; /* clock_monotonic() when the API thread handed it over */
  struct api_request *next;
};

struct server {
  uv_loop_t *loop;
  char **paths;
  int n_paths;
  char *runs_dir;
  const char *self_exe;
  dag_entry **dags;
  size_t n_dags;
  child_run *children;
  uv_timer_t tick;
  uv_signal_t sigterm, sigint;
  uv_async_t wake;
  store *st;
  api_server *api;
  int stopping;    /* a shutdown signal came */
  int restored;    /* the store's queued runs were put back (restore_queue) */
  int stop_runs;   /* ... and running runs are to be stopped */
  int no_cron;
  double clock_base, clock_rate, mono0; /* the fake clock, rate 0: none */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  api_request *reqs; /* under mu */
  int closed;        /* under mu: the loop takes no more requests */
  char *dags_json;   /* under mu: the API's snapshot of the DAGs */
  double started;
};

/* One line on stderr with the UTC time. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof ts);
  va_list ap;
  va_start(ap, fmt);
  sbuf m = {0};
  sbuf_vprintf(&m, fmt, ap);
  va_end(ap);
  /* A message holds names from outside (a DAG file named "x\n<time>
   * dagrun serve: ..."): its lines after the first are indented, so that
   * only say() starts a line with a time, and other control bytes are
   * written \xNN (a \r would hide the line's start on a terminal). */
  sbuf out = {0};
  sbuf_printf(&out, "%s dagrun serve: ", ts);
  sbuf_put_shown(&out, m.s, m.n, "\n  ");
  sbuf_putc(&out, '\n');
  fwrite(out.s, 1, out.n, stderr);
  sbuf_free(&out);
  sbuf_free(&m);
}

/* The daemon's clock: the wall clock, or with DAGRUN_FAKE_CLOCK=T*RATE
 * (tests) one that starts at T and runs RATE times as fast. */
static int64_t clock_now(const server *s) {
  if (s->clock_rate <= 0)
    return (int64_t)clock_wall();
  return (int64_t)(s->clock_base +
                   (clock_monotonic() - s->mono0) * s->clock_rate);
}

static int parse_fake_clock(server *s, const char *v) {
  char *end;
  s->clock_base = strtod(v, &end);
  s->clock_rate = 1;
  if (*end == '*')
    s->clock_rate = strtod(end + 1, &end);
  if (*end || s->clock_base <= 0 || s->clock_rate <= 0)
    return -1;
  s->mono0 = clock_monotonic();
  return 0;
}

static void iso_utc(int64_t t, char *buf, size_t n) {
  format_utc((double)t, 0, buf, n);
}

/* ---- DAG files ---- */

static void entry_clear_spec(dag_entry *e) {
  cron_destroy(e->cron);
  cron_zone_close(e->zone);
  checked_free(e->ck);
  spec_free(e->sp);
  e->cron = NULL;
  e->zone = NULL;
  e->ck = NULL;
  e->sp = NULL;
}

static void pending_free(pending *p) {
  free(p->run_id);
  free(p->trigger);
  free(p->info);
  for (char **q = p->params; q && *q; q++)
    free(*q);
  free(p->params);
}

static void entry_free(dag_entry *e) {
  cJSON_Delete(e->paused);
  entry_clear_spec(e);
  for (size_t i = 0; i < e->nq; i++)
    pending_free(&e->queue[i]);
  free(e->queue);
  datatrig_destroy(e->dt);
  free(e->error);
  free(e->file);
  free(e);
}

static const char *entry_name(const dag_entry *e) {
  return e->sp ? e->sp->dag : NULL;
}

static dag_entry *find_dag(server *s, const char *name) {
  for (size_t i = 0; i < s->n_dags; i++)
    if (entry_name(s->dags[i]) && strcmp(entry_name(s->dags[i]), name) == 0)
      return s->dags[i];
  return NULL;
}

/* Why a file does not load: its diagnostics, or the error code's text. */
static char *load_error(const diags *d, int rc, const char *path) {
  if (!d->n)
    return xasprintf("%s: %s", path, dr_strerror(rc));
  char *text = diags_text(d);
  text[strlen(text) - 1] = '\0'; /* the last newline */
  return text;
}

/* The schedule of a freshly loaded entry: its last handled time from the
 * store, or now for a DAG never seen (recorded). */
static void entry_schedule(server *s, dag_entry *e) {
  char err[512];
  e->next = 0;
  if (spec_schedule_open(e->sp, &e->cron, &e->zone, err, sizeof err) != 0)
    return; /* no schedule */
  long long last;
  int rc = store_cron_get(s->st, e->sp->dag, &last, err, sizeof err);
  if (rc == DR_ENOENT) {
    last = clock_now(s);
    if (store_cron_set(s->st, e->sp->dag, last, clock_wall(), err,
                       sizeof err) != 0)
      say("%s", err);
  } else if (rc != 0) {
    say("%s: its schedule is off: %s", e->sp->dag, err);
    cron_destroy(e->cron);
    cron_zone_close(e->zone);
    e->cron = NULL;
    e->zone = NULL;
    return;
  }
  e->last = last;
  int64_t next;
  if (cron_next(e->cron, e->zone, e->last, &next, err, sizeof err) == 0)
    e->next = next;
}

/* (Re)loads an entry's file. A version that does not load leaves the one
 * in use (if any) in place. */
static void entry_load(server *s, dag_entry *e) {
  diags d = {0};
  spec *sp;
  checked *ck;
  int rc = check_load(e->file, &sp, &ck, &d);
  e->dup = 0;
  if (rc == 0) {
    dag_entry *other = find_dag(s, sp->dag);
    if (other && other != e) {
      diags_free(&d);
      free(e->error);
      e->dup = 1;
      e->error = xasprintf("%s: dag '%s' is already defined in %s", e->file,
                           sp->dag, other->file);
      checked_free(ck);
      spec_free(sp);
      say("%s", e->error);
      return;
    }
  }
  if (rc != 0) {
    free(e->error);
    e->error = load_error(&d, rc, e->file);
    diags_free(&d);
    say("%s does not load%s:\n%s", e->file,
        e->sp ? " (its previous version is shown; no run starts until it loads)"
              : "",
        e->error);
    return;
  }
  diags_free(&d);
  int had = e->sp != NULL;
  entry_clear_spec(e);
  e->sp = sp;
  e->ck = ck;
  free(e->error);
  e->error = NULL;
  entry_schedule(s, e);
  char next[80] = "";
  if (e->next)
    cron_format(e->zone, e->next, next, sizeof next);
  say("%s dag %s from %s%s%s", had ? "reloaded" : "loaded", sp->dag, e->file,
      e->next ? "; next run " : "", next);
}

static int has_yaml_suffix(const char *n) {
  size_t l = strlen(n);
  return (l > 5 && strcmp(n + l - 5, ".yaml") == 0) ||
         (l > 4 && strcmp(n + l - 4, ".yml") == 0);
}

/* Why file f, found in DAG directory dir, is not read, or NULL: a symlink
 * out of the directory. Its content would reach the open GET /api/dags
 * in the load error's quotes ("unknown key 'root:$6$...'"): a link to
 * /etc/shadow or /proc/self/environ would show what the daemon may read
 * to whoever may write in the directory. */
static const char *outside_dir(const char *dir, const char *f) {
  struct stat lsb;
  if (lstat(f, &lsb) != 0 || !S_ISLNK(lsb.st_mode))
    return NULL;
  char *rd = realpath(dir, NULL), *rf = realpath(f, NULL);
  size_t n = rd ? strlen(rd) : 0;
  int inside = rd && rf && strncmp(rf, rd, n) == 0 && rf[n] == '/';
  free(rd);
  free(rf);
  return inside ? NULL
                : "a symlink to a file outside the DAG directory: not read "
                  "(copy the file in, or give serve its path or its "
                  "directory)";
}

/* A file found by the scan: new, changed or as it was. refused: why it is
 * not read (outside_dir), or NULL. 1 when it was (re)loaded or refused
 * anew. */
static int scan_file(server *s, const char *path, const struct stat *sb,
                     const char *refused) {
  dag_entry *e = NULL;
  for (size_t i = 0; i < s->n_dags && !e; i++)
    if (strcmp(s->dags[i]->file, path) == 0)
      e = s->dags[i];
  if (!e) {
    e = xcalloc(1, sizeof *e);
    e->file = xstrdup(path);
    s->dags = xrealloc(s->dags, (s->n_dags + 1) * sizeof *s->dags);
    s->dags[s->n_dags++] = e;
  } else if (e->mtime.tv_sec == sb->st_mtim.tv_sec &&
             e->mtime.tv_nsec == sb->st_mtim.tv_nsec &&
             e->size == sb->st_size && e->ino == sb->st_ino) {
    e->seen = 1;
    return 0;
  }
  e->seen = 1;
  e->mtime = sb->st_mtim;
  e->size = sb->st_size;
  e->ino = sb->st_ino;
  if (!refused) {
    entry_load(s, e);
    return 1;
  }
  free(e->error);
  e->error = xasprintf("%s: %s", e->file, refused);
  e->dup = 0; /* not to be loaded by scan's second look */
  say("%s", e->error);
  return 1;
}

/* Looks at every path: loads new and changed files, drops gone ones. */
static void scan(server *s) {
  int changed = 0; /* a file (re)loaded or gone: a name may be free now */
  for (size_t i = 0; i < s->n_dags; i++)
    s->dags[i]->seen = 0;
  for (int p = 0; p < s->n_paths; p++) {
    struct stat sb;
    if (stat(s->paths[p], &sb) != 0)
      continue;
    if (!S_ISDIR(sb.st_mode)) {
      changed |= scan_file(s, s->paths[p], &sb, NULL);
      continue;
    }
    DIR *dir = opendir(s->paths[p]);
    if (!dir)
      continue;
    struct dirent *de;
    while ((de = readdir(dir))) {
      if (de->d_name[0] == '.' || !has_yaml_suffix(de->d_name))
        continue;
      char *f = path_join(s->paths[p], de->d_name);
      if (stat(f, &sb) == 0 && S_ISREG(sb.st_mode))
        changed |= scan_file(s, f, &sb, outside_dir(s->paths[p], f));
      free(f);
    }
    closedir(dir);
  }
  size_t k = 0;
  for (size_t i = 0; i < s->n_dags; i++) {
    if (s->dags[i]->seen) {
      s->dags[k++] = s->dags[i];
    } else {
      say("%s is gone: dag %s unloaded (its running runs go on)",
          s->dags[i]->file,
          entry_name(s->dags[i]) ? entry_name(s->dags[i]) : "?");
      entry_free(s->dags[i]);
      changed = 1;
    }
  }
  s->n_dags = k;
  /* A file refused for another's dag name loads once that file is gone
   * or names another dag, without waiting for its own next change. */
  for (size_t i = 0; changed && i < s->n_dags; i++)
    if (s->dags[i]->dup)
      entry_load(s, s->dags[i]);
}

/* ---- runs ---- */

static void on_child_exit(uv_process_t *p, int64_t status, int sig);
static void publish_dags(server *s);

static void strv_free(char **v) {
  for (char **q = v; q && *q; q++)
    free(*q);
  free(v);
}

static void child_closed(uv_handle_t *h) {
  child_run *c = h->data;
  if (--c->handles > 0)
    return;
  strv_free(c->then_resume);
  free(c->run_id);
  free(c->dag);
  free(c);
}

static void request_answer(server *s, api_request *r);

/* The end of c's wait for its run to be recorded: req answered as it
 * stands, the pipe closed. */
static void ready_done(child_run *c) {
  if (c->req) {
    request_answer(c->srv, c->req);
    c->req = NULL;
  }
  if (c->ready.data && !uv_is_closing((uv_handle_t *)&c->ready))
    uv_close((uv_handle_t *)&c->ready, child_closed);
}

static void ready_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  child_run *c = h->data;
  *buf = uv_buf_init(c->ready_buf, sizeof c->ready_buf);
}

/* The run's dagrun wrote its line: the run is recorded (and no longer
 * shown "starting": the API's snapshot is made again at once). An end of
 * file before it leaves req to on_child_exit, which knows the exit
 * status. */
static void ready_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  child_run *c = st->data;
  if (n > 0) {
    c->recorded = 1;
    publish_dags(c->srv);
    ready_done(c);
  } else if (n < 0 && !c->req)
    ready_done(c);
  else if (n < 0)
    uv_read_stop(st);
}

/* Reads what the run's dagrun wrote to --ready-fd and the loop has not
 * read yet: its exit may be handled before its last write is (libuv
 * orders the two events as they come out of one poll). */
static void ready_drain(child_run *c) {
  uv_os_fd_t fd;
  if (c->recorded || !c->ready.data || uv_is_closing((uv_handle_t *)&c->ready) ||
      uv_fileno((uv_handle_t *)&c->ready, &fd) != 0)
    return;
  if (read(fd, c->ready_buf, sizeof c->ready_buf) > 0) /* non-blocking */
    c->recorded = 1;
}

/* Starts `dagrun ARGS...` for run id of dag (logical date at, 0: none)
 * as a child in its own session. ready: a new run, whose ARGS end in
 * "--ready-fd 3" (0: a run recorded already); req: an API trigger
 * answered once the run is recorded, or NULL. */
static int spawn_child(server *s, const char *dag, const char *run_id,
                       int64_t at, char **args, char **env, int ready,
                       api_request *req) {
  child_run *c = xcalloc(1, sizeof *c);
  c->srv = s;
  c->run_id = xstrdup(run_id);
  c->dag = xstrdup(dag);
  c->at = at;
  c->handles = 1;
  c->recorded = !ready;
  uv_stdio_container_t stdio[4] = {
      {UV_IGNORE, {0}}, {UV_INHERIT_FD, {.fd = 1}}, {UV_INHERIT_FD, {.fd = 2}}};
  if (ready) {
    uv_pipe_init(s->loop, &c->ready, 0);
    c->ready.data = c;
    c->handles++;
    /* Flags from the child's side: it writes. */
    stdio[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[3].data.stream = (uv_stream_t *)&c->ready;
  }
  uv_process_options_t o = {0};
  o.file = s->self_exe;
  o.args = args;
  o.env = env; /* NULL: the daemon's */
  o.exit_cb = on_child_exit;
  o.stdio = stdio;
  o.stdio_count = ready ? 4 : 3;
  /* Its own session: a Ctrl-C meant for the daemon's terminal reaches
   * the daemon, which decides what its runs get. */
  o.flags = UV_PROCESS_DETACHED;
  c->proc.data = c;
  int rc = uv_spawn(s->loop, &c->proc, &o);
  if (rc != 0) {
    say("cannot start a run of %s: %s", dag, uv_strerror(rc));
    if (ready)
      uv_close((uv_handle_t *)&c->ready, child_closed);
    uv_close((uv_handle_t *)&c->proc, child_closed);
    return -1;
  }
  if (ready &&
      uv_read_start((uv_stream_t *)&c->ready, ready_alloc, ready_read) != 0) {
    c->recorded = 1; /* unknown: not shown as starting for ever */
    uv_close((uv_handle_t *)&c->ready, child_closed); /* req answered now */
  } else if (req) {
    c->req = req;
    req->waiting = 1;
  }
  c->next = s->children;
  s->children = c;
  return 0;
}

/* The JSON array of the n "NAME=VALUE" params. Caller frees with
 * cJSON_free. */
static char *run_params_json(char *const *params, size_t n) {
  cJSON *list = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++)
    cJSON_AddItemToArray(list, cJSON_CreateString(params[i]));
  char *json = cJSON_PrintUnformatted(list);
  cJSON_Delete(list);
  return json;
}

/* The daemon's environment and DAGRUN_RUN_PARAMS, a JSON array of the
 * n "NAME=VALUE" params (what `dagrun run --params-from-env` reads), and
 * DAGRUN_TRIGGER_INFO when info is not NULL (a data trigger's).
 * Caller frees with workerenv_free. */
static char **child_env(char *const *params, size_t n, const char *info) {
  extern char **environ;
  char *json = run_params_json(params, n);
  size_t n_env = 0;
  while (environ[n_env])
    n_env++;
  char **env = xcalloc(n_env + 3, sizeof(char *));
  size_t k = 0;
  env[k++] = xasprintf("DAGRUN_RUN_PARAMS=%s", json);
  if (info)
    env[k++] = xasprintf("DAGRUN_TRIGGER_INFO=%s", info);
  for (size_t i = 0; i < n_env; i++)
    if (strncmp(environ[i], "DAGRUN_RUN_PARAMS=", 18) != 0 &&
        strncmp(environ[i], "DAGRUN_TRIGGER_INFO=", 20) != 0)
      env[k++] = xstrdup(environ[i]);
  cJSON_free(json);
  return env;
}

/* Starts a run of e now: `dagrun run`. run_id NULL: a new one; info: a
 * data trigger's DAGRUN_TRIGGER_INFO, or NULL; req: the API trigger that
 * asked for it (its run_id set here, and answered once the run is
 * recorded), or NULL. */
static int start_run(server *s, dag_entry *e, const char *trigger, int64_t at,
                     const char *run_id, char *const *params, const char *info,
                     api_request *req) {
  char *id = run_id ? xstrdup(run_id) : rundir_new_id(clock_wall());
  char when[40] = "";
  size_t np = 0;
  while (params && params[np])
    np++;
  char **args = xcalloc(16 + 2 * np, sizeof(char *));
  int k = 0;
  args[k++] = (char *)s->self_exe;
  args[k++] = "run";
  args[k++] = e->file;
  args[k++] = "-q";
  args[k++] = "--run-id";
  args[k++] = id;
  args[k++] = "--trigger";
  args[k++] = (char *)trigger;
  args[k++] = "--runs-dir";
  args[k++] = s->runs_dir;
  if (at > 0) {
    iso_utc(at, when, sizeof when);
    args[k++] = "--logical-date";
    args[k++] = when;
  }
  /* Params go through the environment, not the command line: any user
   * may read a process's command line (/proc/PID/cmdline), only its own
   * its environment, and a param may be a secret. */
  char **env = NULL;
  if (np)
    args[k++] = "--params-from-env";
  if (np || info)
    env = child_env(params, np, info);
  args[k++] = "--ready-fd";
  args[k++] = "3"; /* spawn_child's fourth descriptor */
  int rc = spawn_child(s, e->sp->dag, id, at, args, env, 1, req);
  workerenv_free(env);
  if (rc == 0) {
    e->fired += strcmp(trigger, "cron") == 0;
    e->data_fired +=
        strcmp(trigger, "files") == 0 || strcmp(trigger, "dataset") == 0;
    say("started run %s of %s (%s%s%s)", id, e->sp->dag, trigger,
        at > 0 ? ", for " : "", when);
    if (req)
      snprintf(req->run_id, sizeof req->run_id, "%s", id);
  }
  free(args);
  free(id);
  return rc;
}

static child_run *find_child(server *s, const char *run_id) {
  for (child_run *c = s->children; c; c = c->next)
    if (strcmp(c->run_id, run_id) == 0)
      return c;
  return NULL;
}

/* Whether a run of dag is going: one of ours, or one in the store whose
 * dagrun is alive (a run by hand, or one an earlier daemon started). */
static int dag_busy(server *s, const char *dag) {
  for (child_run *c = s->children; c; c = c->next)
    if (strcmp(c->dag, dag) == 0)
      return 1;
  char err[512];
  /* A run queued by max_active_runs is going too: overlap decides whether
   * another is started beside it. */
  cJSON *going = resume_runs_going(s->st, dag, err, sizeof err);
  if (!going)
    say("%s", err); /* unknown: do not start a second run on a guess */
  int busy = !going || cJSON_GetArraySize(going) > 0;
  cJSON_Delete(going);
  return busy;
}

/* The run of c, whose dagrun was killed by a signal (the OOM killer, a
 * kill -9, a crash) with its run recorded and not ended: resumed now, as a
 * restart of serve would (recover), rather than left for one; once: a run whose
 * resume is killed as well stays interrupted, said in the log. */
static void revive(server *s, child_run *c) {
  char err[512];
  int rc;
  cJSON *run = store_run(s->st, c->run_id, &rc, err, sizeof err);
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(run, "state");
  int going = run && cJSON_IsString(st) &&
              (store_state_active(st->valuestring) ||
               strcmp(st->valuestring, "interrupted") == 0);
  cJSON_Delete(run);
  if (!going)
    return; /* it recorded its end before it died: nothing to go on with */
  if (c->revived) {
    say("run %s of %s: not resumed again (its resume was killed too): "
        "left interrupted; `dagrun resume %s` goes on with it",
        c->run_id, c->dag, c->run_id);
    return;
  }
  char *args[] = {(char *)s->self_exe, "resume", c->run_id, "-q", NULL};
  if (spawn_child(s, c->dag, c->run_id, 0, args, NULL, 0, NULL) != 0)
    return;
  s->children->revived = 1;
  say("run %s of %s: resuming it", c->run_id, c->dag);
}

static void on_child_exit(uv_process_t *p, int64_t status, int sig) {
  child_run *c = p->data;
  server *s = c->srv;
  for (child_run **pp = &s->children; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  if (sig)
    say("run %s of %s: its dagrun was killed by signal %d", c->run_id, c->dag,
        sig);
  else
    say("run %s of %s ended (exit %d)", c->run_id, c->dag, (int)status);
  publish_dags(s); /* before req's answer: the API no longer shows it */
  ready_drain(c);
  if (!c->recorded) {
    /* No record, so no report and no alert: the log and the API caller
     * are all that can hear of it. */
    char why[400];
    snprintf(why, sizeof why,
             "run %s of %s did not start: its dagrun %s %d before it "
             "recorded the run",
             c->run_id, c->dag, sig ? "was killed by signal" : "exited with",
             sig ? sig : (int)status);
    say("%s (its message is above)", why);
    if (c->req) {
      c->req->status = 500;
      snprintf(c->req->err, sizeof c->req->err,
               "%s (the daemon's log has its message)", why);
      c->req->run_id[0] = 0;
    }
  }
  ready_done(c);
  if (s->stopping && s->stop_runs) {
    /* Stopped by the shutdown: resumed at the next start. */
    char err[512];
    int rc;
    cJSON *run = store_run(s->st, c->run_id, &rc, err, sizeof err);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(run, "state");
    if (run && cJSON_IsString(st) &&
        (strcmp(st->valuestring, "cancelled") == 0 ||
         store_state_active(st->valuestring)) &&
        store_run_finish(s->st, c->run_id, "interrupted", clock_wall(), err,
                         sizeof err) != 0)
      say("%s", err);
    cJSON_Delete(run);
  }
  if (sig && c->recorded && !s->stopping && !c->then_resume)
    revive(s, c);
  if (c->then_resume && s->stopping)
    say("run %s: the resume asked through the API is dropped: serve is "
        "stopping",
        c->run_id);
  else if (c->then_resume && spawn_child(s, c->dag, c->run_id, 0,
                                         c->then_resume, NULL, 0, NULL) == 0)
    say("run %s: its dagrun exited; the resume asked through the API starts",
        c->run_id);
  uv_close((uv_handle_t *)p, child_closed);
  if (s->stopping && !s->children) {
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->wake, NULL);
  }
}

/* Whether params ("NAME=VALUE") set one of sp's secret params: such a run
 * is not written to the store's queue, whose rows hold values unmasked. */
static int sets_secret(const spec *sp, char *const *params) {
  for (char *const *q = params; q && *q; q++)
    for (size_t k = 0; k < sp->n_secrets; k++) {
      size_t n = strlen(sp->secrets[k]);
      if (strncmp(*q, sp->secrets[k], n) == 0 && (*q)[n] == '=')
        return 1;
    }
  return 0;
}

/* Queues a run of e, recorded in the store's queue (runqueue.h) so that
 * a restart of serve before its turn still starts it (unless it sets a
 * secret param); seq: its row there already (restore_queue), 0 to record
 * it now. Takes params. */
static void queue_push(server *s, dag_entry *e, int64_t at, const char *run_id,
                       const char *trigger, char **params, const char *info,
                       long long seq) {
  if (!seq && sets_secret(e->sp, params)) {
    say("%s: a queued run that sets a secret param is kept in memory only "
        "(lost if serve stops first): the store would hold the secret",
        e->sp->dag);
  } else if (!seq) {
    char err[512];
    seq = runqueue_add(s->st, e->sp->dag, at, run_id, trigger, params, info,
                       clock_wall(), err, sizeof err);
    if (seq < 0) {
      say("%s: a queued run is kept in memory only (lost if serve stops "
          "first): %s",
          e->sp->dag, err);
      seq = 0;
    }
  }
  if (e->nq == e->capq)
    e->queue = xrealloc(e->queue, (e->capq = e->capq ? 2 * e->capq : 8) *
                                      sizeof *e->queue);
  pending *p = &e->queue[e->nq++];
  p->at = at;
  p->run_id = run_id ? xstrdup(run_id) : NULL;
  p->trigger = xstrdup(trigger);
  p->params = params;
  p->info = info ? xstrdup(info) : NULL;
  p->seq = seq;
}

/* Takes p out of e's queue (k its index) and forgets its row in the
 * store: before its run starts (or when it is cancelled), so that a crash
 * loses it rather than starting it twice. The caller frees *p. */
static pending queue_take(server *s, dag_entry *e, size_t k) {
  pending p = e->queue[k];
  memmove(e->queue + k, e->queue + k + 1, (e->nq - k - 1) * sizeof *e->queue);
  e->nq--;
  char err[512];
  if (p.seq && runqueue_remove(s->st, p.seq, err, sizeof err) != 0)
    say("%s: a queued run stays in the store's queue: %s", e->sp->dag, err);
  return p;
}

/* Whether a queued run may start while its DAG is paused: one a person
 * asked for (the API's trigger, a backfill), not the schedule's or a data
 * trigger's. */
static int asked_by_hand(const pending *p) {
  return strcmp(p->trigger, "api") == 0 || strcmp(p->trigger, "backfill") == 0;
}

/* Starts the first queued run of e when no run of it is going; while e is
 * paused, the first that a person asked for (the others wait for the
 * unpause, in their order). */
static void queue_pump(server *s, dag_entry *e) {
  if (!e->nq || !e->sp || dag_busy(s, e->sp->dag))
    return;
  size_t k = 0;
  while (e->paused && k < e->nq && !asked_by_hand(&e->queue[k]))
    k++;
  if (k == e->nq)
    return;
  pending p = queue_take(s, e, k);
  start_run(s, e, p.trigger, p.at, p.run_id, p.params, p.info, NULL);
  pending_free(&p);
}

/* The cron trigger of e, if a schedule time has come. */
static void fire_cron(server *s, dag_entry *e) {
  int64_t now = clock_now(s);
  if (!e->cron || !e->next || now < e->next)
    return;
  char err[512];
  trigger_plan plan;
  /* Runs waiting in the queue are ahead of this one: a time due now must
   * not overtake them. */
  int busy = e->nq > 0 || dag_busy(s, e->sp->dag);
  if (trigger_plan_at(e->cron, e->zone, e->last, now, e->sp->catchup,
                      e->sp->overlap, busy, &plan, err, sizeof err) != 0) {
    say("%s: schedule: %s", e->sp->dag, err);
    e->next = 0;
    return;
  }
  /* Recorded before acting: a crash from here on loses these runs rather
   * than starting them twice. */
  if (plan.n && store_cron_set(s->st, e->sp->dag, plan.last, clock_wall(), err,
                               sizeof err) != 0) {
    say("%s: not firing, the schedule state cannot be recorded: %s",
        e->sp->dag, err);
    free(plan.d);
    return;
  }
  e->last = plan.last;
  if (plan.dropped) {
    e->dropped += plan.dropped;
    say("%s: %zu earlier schedule time%s missed while down or paused, not "
        "run (catchup: false)",
        e->sp->dag, plan.dropped, plan.dropped == 1 ? "" : "s");
  }
  for (size_t i = 0; i < plan.n; i++) {
    char when[80];
    cron_format(e->zone, plan.d[i].at, when, sizeof when);
    switch (plan.d[i].action) {
    case TRIGGER_START:
      start_run(s, e, "cron", plan.d[i].at, NULL, NULL, NULL, NULL);
      break;
    case TRIGGER_QUEUE:
      queue_push(s, e, plan.d[i].at, NULL, "cron", NULL, NULL, 0);
      say("%s: run for %s queued (%s)", e->sp->dag, when,
          plan.n > 1 ? "catch-up" : "overlap: queue, a run is going");
      break;
    case TRIGGER_SKIP:
      e->skipped++;
      say("%s: run for %s skipped (overlap: skip, a run is going)",
          e->sp->dag, when);
      break;
    }
  }
  free(plan.d);
  e->next = 0;
  int64_t next;
  if (cron_next(e->cron, e->zone, e->last, &next, err, sizeof err) == 0)
    e->next = next;
}

/* The data triggers of e (datatrig.h): each run they owe started, queued
 * or skipped by overlap, as a schedule's. */
static void fire_data(server *s, dag_entry *e) {
  if (!e->sp->on.glob && !e->sp->on.n_datasets)
    return;
  if (!e->dt)
    e->dt = datatrig_create();
  char err[512];
  datatrig_event *ev;
  size_t n, coalesced;
  if (datatrig_poll(e->dt, s->st, e->sp, clock_monotonic(), &ev, &n, &coalesced,
                    err, sizeof err) != 0)
    say("%s: data trigger: %s", e->sp->dag, err);
  if (coalesced) {
    e->data_coalesced += coalesced;
    say("%s: %zu earlier dataset update%s coalesced into the newest "
        "(catchup: false)",
        e->sp->dag, coalesced, coalesced == 1 ? "" : "s");
  }
  int busy = n && (e->nq > 0 || dag_busy(s, e->sp->dag));
  for (size_t i = 0; i < n; i++) {
    switch (trigger_decide(n, busy, e->sp->overlap)) {
    case TRIGGER_START:
      say("%s: %s", e->sp->dag, ev[i].what);
      start_run(s, e, ev[i].trigger, 0, NULL, NULL, ev[i].info, NULL);
      break;
    case TRIGGER_QUEUE:
      queue_push(s, e, 0, NULL, ev[i].trigger, NULL, ev[i].info, 0);
      say("%s: %s: run queued (%s)", e->sp->dag, ev[i].what,
          n > 1 ? "several at once" : "overlap: queue, a run is going");
      break;
    case TRIGGER_SKIP:
      e->skipped++;
      say("%s: %s: run skipped (overlap: skip, a run is going)", e->sp->dag,
          ev[i].what);
      break;
    }
    datatrig_event_free(&ev[i]);
  }
  free(ev);
}

/* ---- the API's view ---- */

static const char *const overlap_names[] = {"skip", "queue", "allow"};

/* Whether a scalar under n holds a template reference. */
static int has_template(const ynode *n) {
  if (!n)
    return 0;
  if (n->kind == YNODE_SCALAR)
    return n->str && strstr(n->str, "${") != NULL;
  for (size_t i = 0; i < (n->kind == YNODE_MAP ? 2 * n->n : n->n); i++)
    if (has_template(n->items[i]))
      return 1;
  return 0;
}

/* The DAG's declared params, for the dashboard's run form: [{name,
 * default}], each default as a run without overrides takes it. A secret,
 * and a default that a template makes (${env:...}: a value of this
 * machine's environment), show null with "secret" or "templated": their
 * values are not the API's to show. */
static cJSON *params_json(const spec *sp) {
  cJSON *out = cJSON_CreateArray(), *resolved = NULL;
  if (!sp->params || sp->params->kind != YNODE_MAP)
    return out;
  diags d = {0};
  tmpl_env te = {0};
  te.s = sp;
  (void)tmpl_resolve_params(&te, &resolved, &d);
  diags_free(&d);
  for (size_t i = 0; i < sp->params->n; i++) {
    const char *name = sp->params->items[2 * i]->str;
    const ynode *v = sp->params->items[2 * i + 1];
    int secret = 0;
    for (size_t k = 0; k < sp->n_secrets; k++)
      secret |= strcmp(sp->secrets[k], name) == 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(resolved, name);
    if (secret || has_template(v) || !r)
      cJSON_AddNullToObject(o, "default");
    else
      cJSON_AddItemToObject(o, "default", cJSON_Duplicate(r, 1));
    if (secret)
      cJSON_AddTrueToObject(o, "secret");
    else if (has_template(v))
      cJSON_AddTrueToObject(o, "templated");
    cJSON_AddItemToArray(out, o);
  }
  cJSON_Delete(resolved);
  return out;
}

/* paused (bool), and while paused paused_since and paused_by, into j. */
static void add_paused(cJSON *j, const dag_entry *e) {
  cJSON_AddBoolToObject(j, "paused", e->paused != NULL);
  if (!e->paused)
    return;
  cJSON_AddItemToObject(
      j, "paused_since",
      cJSON_Duplicate(cJSON_GetObjectItem(e->paused, "since"), 0));
  cJSON_AddItemToObject(
      j, "paused_by", cJSON_Duplicate(cJSON_GetObjectItem(e->paused, "by"), 0));
}

static cJSON *dag_json(const server *s, const dag_entry *e) {
  cJSON *j = cJSON_CreateObject();
  const spec *sp = e->sp;
  if (sp) {
    cJSON_AddStringToObject(j, "name", sp->dag);
  } else {
    /* A file that never loaded: named after the file. */
    const char *b = strrchr(e->file, '/');
    cJSON_AddStringToObject(j, "name", b ? b + 1 : e->file);
  }
  cJSON_AddStringToObject(j, "file", e->file);
  cJSON_AddBoolToObject(j, "loaded", sp != NULL);
  if (e->error)
    cJSON_AddStringToObject(j, "error", e->error);
  if (!sp)
    return j;
  if (sp->description)
    cJSON_AddStringToObject(j, "description", sp->description);
  if (sp->schedule && sp->schedule->kind == YNODE_SCALAR) {
    cJSON_AddStringToObject(j, "schedule", sp->schedule->str);
    cJSON_AddStringToObject(j, "timezone",
                            sp->timezone ? sp->timezone : "UTC");
    cJSON_AddBoolToObject(j, "catchup", sp->catchup);
    cJSON_AddStringToObject(j, "overlap", overlap_names[sp->overlap]);
    if (e->next && !s->no_cron && !e->paused)
      cJSON_AddNumberToObject(j, "next_fire", (double)e->next);
    if (e->cron)
      cJSON_AddNumberToObject(j, "last_fire", (double)e->last);
  }
  cJSON *on = datatrig_json(sp);
  if (on) {
    cJSON_AddItemToObject(j, "on", on);
    if (!cJSON_GetObjectItem(j, "overlap")) {
      cJSON_AddBoolToObject(j, "catchup", sp->catchup);
      cJSON_AddStringToObject(j, "overlap", overlap_names[sp->overlap]);
    }
    cJSON_AddNumberToObject(j, "data_fired", (double)e->data_fired);
    cJSON_AddNumberToObject(j, "coalesced", (double)e->data_coalesced);
  }
  add_paused(j, e);
  cJSON_AddNumberToObject(j, "queued", (double)e->nq);
  /* In order: what the API shows of runs not yet started (an API run's
   * id is its caller's already). */
  cJSON *queue = cJSON_AddArrayToObject(j, "queue");
  for (size_t k = 0; k < e->nq; k++) {
    const pending *p = &e->queue[k];
    cJSON *o = cJSON_CreateObject();
    if (p->run_id)
      cJSON_AddStringToObject(o, "run_id", p->run_id);
    else
      cJSON_AddNullToObject(o, "run_id");
    cJSON_AddStringToObject(o, "trigger", p->trigger);
    if (p->at > 0)
      cJSON_AddNumberToObject(o, "logical_date", (double)p->at);
    else
      cJSON_AddNullToObject(o, "logical_date");
    cJSON_AddItemToArray(queue, o);
  }
  cJSON_AddNumberToObject(j, "fired", (double)e->fired);
  cJSON_AddNumberToObject(j, "skipped", (double)e->skipped);
  cJSON_AddNumberToObject(j, "dropped", (double)e->dropped);
  cJSON *running = cJSON_AddArrayToObject(j, "running");
  cJSON *starting = cJSON_AddArrayToObject(j, "starting");
  for (child_run *c = s->children; c; c = c->next)
    if (strcmp(c->dag, sp->dag) == 0) {
      cJSON_AddItemToArray(running, cJSON_CreateString(c->run_id));
      if (!c->recorded)
        cJSON_AddItemToArray(starting, cJSON_CreateString(c->run_id));
    }
  cJSON_AddItemToObject(j, "params", params_json(sp));
  cJSON *tasks = cJSON_AddArrayToObject(j, "tasks");
  for (size_t i = 0; i < sp->n_tasks; i++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", sp->tasks[i].name);
    cJSON_AddStringToObject(t, "stage", spec_task_kind(&sp->tasks[i]));
    if (sp->tasks[i].n_produces) {
      cJSON *pr = cJSON_AddArrayToObject(t, "produces");
      for (size_t k = 0; k < sp->tasks[i].n_produces; k++)
        cJSON_AddItemToArray(pr, cJSON_CreateString(sp->tasks[i].produces[k]));
    }
    cJSON *needs = cJSON_AddArrayToObject(t, "needs");
    for (size_t k = 0; k < sp->tasks[i].n_needs; k++)
      cJSON_AddItemToArray(
          needs, cJSON_CreateString(sp->tasks[sp->tasks[i].needs[k]].name));
    cJSON_AddItemToArray(tasks, t);
  }
  return j;
}

static void publish_dags(server *s) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < s->n_dags; i++)
    cJSON_AddItemToArray(arr, dag_json(s, s->dags[i]));
  char *text = cJSON_PrintUnformatted(arr);
  cJSON_Delete(arr);
  pthread_mutex_lock(&s->mu);
  char *old = s->dags_json;
  s->dags_json = xstrdup(text);
  pthread_mutex_unlock(&s->mu);
  free(old);
  cJSON_free(text);
}

/* API thread: the snapshot. */
static cJSON *api_dags(void *ud) {
  server *s = ud;
  pthread_mutex_lock(&s->mu);
  cJSON *j = s->dags_json ? cJSON_Parse(s->dags_json) : NULL;
  pthread_mutex_unlock(&s->mu);
  return j ? j : cJSON_CreateArray();
}

static void request_free(api_request *r) {
  free(r->dag);
  free(r->by);
  free(r->via);
  free(r->run_id_in);
  free(r->from);
  free(r->to);
  cJSON_Delete(r->params);
  cJSON_Delete(r->result);
  free(r);
}

/* Loop: r's answer is final; its API thread takes it (or r is freed, when
 * that thread gave up waiting). Called with s->mu not held. */
static void request_answer(server *s, api_request *r) {
  pthread_mutex_lock(&s->mu);
  if (r->abandoned)
    request_free(r);
  else
    r->done = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* API thread: hands r to the loop and waits for its answer. Returns the
 * status (r is freed here, or by the loop when this gave up waiting); a
 * backfill's answer goes to *result (may be NULL). */
static int api_call(server *s, api_request *r, char *run_id, size_t run_id_len,
                    cJSON **result, char *err, size_t errlen) {
  pthread_mutex_lock(&s->mu);
  if (s->closed) {
    pthread_mutex_unlock(&s->mu);
    snprintf(err, errlen, "dagrun serve is shutting down");
    request_free(r);
    return 503;
  }
  r->queued_at = clock_monotonic();
  r->next = s->reqs;
  s->reqs = r;
  uv_async_send(&s->wake);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += API_WAIT_S;
  while (!r->done &&
         pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {
  }
  int status;
  if (r->done) {
    status = r->status;
    if (run_id)
      snprintf(run_id, run_id_len, "%s", r->run_id);
    snprintf(err, errlen, "%s", r->err);
    if (result) {
      *result = r->result;
      r->result = NULL;
    }
    request_free(r);
  } else {
    r->abandoned = 1; /* the loop frees it */
    status = 503;
    snprintf(err, errlen, "dagrun serve did not answer in %d s", API_WAIT_S);
  }
  pthread_mutex_unlock(&s->mu);
  return status;
}

static int api_trigger(void *ud, const char *dag, const cJSON *params,
                       char *run_id, size_t run_id_len, char *err,
                       size_t errlen) {
  api_request *r = xcalloc(1, sizeof *r);
  r->dag = xstrdup(dag);
  r->params = params ? cJSON_Duplicate(params, 1) : NULL;
  return api_call(ud, r, run_id, run_id_len, NULL, err, errlen);
}

static int api_cancel(void *ud, const char *run_id, char *err,
                      size_t errlen) {
  api_request *r = xcalloc(1, sizeof *r);
  r->cancel = 1;
  r->run_id_in = xstrdup(run_id);
  return api_call(ud, r, NULL, 0, NULL, err, errlen);
}

static int api_resume(void *ud, const char *run_id, const cJSON *clear,
                      int downstream, char *err, size_t errlen) {
  api_request *r = xcalloc(1, sizeof *r);
  r->resume = 1;
  r->run_id_in = xstrdup(run_id);
  r->params = clear ? cJSON_Duplicate(clear, 1) : NULL;
  r->downstream = downstream;
  return api_call(ud, r, NULL, 0, NULL, err, errlen);
}

static int api_backfill(void *ud, const char *dag, const char *from,
                        const char *to, int rerun, cJSON **result, char *err,
                        size_t errlen) {
  api_request *r = xcalloc(1, sizeof *r);
  r->backfill = 1;
  r->dag = xstrdup(dag);
  r->from = xstrdup(from);
  r->to = xstrdup(to);
  r->rerun = rerun;
  return api_call(ud, r, NULL, 0, result, err, errlen);
}

static int api_pause(void *ud, const char *dag, int paused, const char *by,
                     const char *via, cJSON **result, char *err,
                     size_t errlen) {
  api_request *r = xcalloc(1, sizeof *r);
  r->pause = paused ? 1 : 2;
  r->dag = xstrdup(dag);
  r->by = by ? xstrdup(by) : NULL;
  r->via = via ? xstrdup(via) : NULL;
  return api_call(ud, r, NULL, 0, result, err, errlen);
}

/* Linux's MAX_ARG_STRLEN: the most one environment string may hold. */
#define PARAMS_ENV_MAX (128 * 1024)

/* Params of an API trigger as "NAME=VALUE" overrides, checked against the
 * DAG's params (types kept). NULL-terminated; NULL for none. */
static int api_params(const dag_entry *e, const cJSON *params, char ***out,
                      char *err, size_t errlen) {
  *out = NULL;
  if (!params || !params->child)
    return 0;
  cJSON *check = cJSON_Duplicate(e->ck->params, 1);
  size_t n = 0;
  char **kv = xcalloc((size_t)cJSON_GetArraySize(params) + 1, sizeof *kv);
  const cJSON *it;
  int rc = 0;
  cJSON_ArrayForEach(it, params) {
    char *text = tmpl_scalar_text(it);
    if (!text || cJSON_IsNull(it)) {
      snprintf(err, errlen, "param '%s': expected a string, number or bool",
               it->string);
      free(text);
      rc = -1;
      break;
    }
    if (tmpl_override_param(e->sp, check, it->string, text, err, errlen) != 0) {
      free(text);
      rc = -1;
      break;
    }
    kv[n++] = xasprintf("%s=%s", it->string, text);
    free(text);
  }
  cJSON_Delete(check);
  /* All of them go in DAGRUN_RUN_PARAMS (child_env), which execve caps at
   * 128 KiB with its name: past that the run could not start (E2BIG). */
  char *json = rc == 0 ? run_params_json(kv, n) : NULL;
  size_t len = json ? strlen("DAGRUN_RUN_PARAMS=") + strlen(json) + 1 : 0;
  if (len > PARAMS_ENV_MAX) {
    snprintf(err, errlen,
             "the params come to %zu bytes as the run's environment passes "
             "them (JSON): at most %d in all",
             len, PARAMS_ENV_MAX);
    rc = -1;
  }
  cJSON_free(json);
  if (rc != 0) {
    for (size_t i = 0; i < n; i++)
      free(kv[i]);
    free(kv);
    return rc;
  }
  *out = kv;
  return 0;
}

static void loop_trigger(server *s, api_request *r) {
  dag_entry *e = find_dag(s, r->dag);
  if (!e) {
    r->status = 404;
    snprintf(r->err, sizeof r->err, "no dag '%s' is loaded", r->dag);
    return;
  }
  if (s->stopping) {
    r->status = 503;
    snprintf(r->err, sizeof r->err, "dagrun serve is shutting down");
    return;
  }
  if (e->error) {
    /* A run is `dagrun run FILE`, which loads the file as it is now: it
     * would fail at once, under an id the API had already handed out. */
    r->status = 409;
    snprintf(r->err, sizeof r->err,
             "the DAG file of '%s' does not load; no run starts until it "
             "does: %s",
             r->dag, e->error);
    return;
  }
  char **kv;
  if (api_params(e, r->params, &kv, r->err, sizeof r->err) != 0) {
    r->status = 400;
    return;
  }
  char *id = rundir_new_id(clock_wall());
  /* Queued runs count as going: an API run does not overtake them. */
  int busy = e->nq > 0 || dag_busy(s, e->sp->dag);
  if (busy && e->sp->overlap != SPEC_OVERLAP_ALLOW) {
    if (e->sp->overlap == SPEC_OVERLAP_SKIP) {
      r->status = 409;
      snprintf(r->err, sizeof r->err,
               "a run of %s is going and its overlap policy is skip",
               e->sp->dag);
      for (char **q = kv; q && *q; q++)
        free(*q);
      free(kv);
    } else {
      queue_push(s, e, 0, id, "api", kv, NULL, 0);
      r->status = 0;
      snprintf(r->run_id, sizeof r->run_id, "%s", id);
      say("%s: API run %s queued (overlap: queue, a run is going)",
          e->sp->dag, id);
    }
    free(id);
    return;
  }
  if (start_run(s, e, "api", 0, id, kv, NULL, r) != 0) {
    r->status = 500;
    snprintf(r->err, sizeof r->err, "cannot start a run of %s", e->sp->dag);
  }
  for (char **q = kv; q && *q; q++)
    free(*q);
  free(kv);
  free(id);
}

/* Whether a run of e for schedule time at is queued already. */
/* The id of the run of dag for logical date at that serve has started
 * and is still going, or NULL: its dagrun may not have recorded itself as
 * running in the store yet. */
static const char *started_for(const server *s, const char *dag, int64_t at) {
  for (const child_run *c = s->children; c; c = c->next)
    if (c->at == at && strcmp(c->dag, dag) == 0)
      return c->run_id;
  return NULL;
}

static int queued_for(const dag_entry *e, int64_t at) {
  for (size_t k = 0; k < e->nq; k++)
    if (e->queue[k].at == at)
      return 1;
  return 0;
}

/* A backfill from the API: backfill_plan's schedule times of r->dag in
 * [r->from, r->to], each queued as a "backfill" run with that logical
 * date, one at a time as the DAG's queue goes; a time that has a
 * successful run (unless r->rerun), a run going, or is queued already is
 * skipped.
 * r->result: {dag, queued: [UTC times], skipped: [{at, run}]}. */
static void loop_backfill(server *s, api_request *r) {
  dag_entry *e = find_dag(s, r->dag);
  r->status = 400;
  if (!e) {
    r->status = 404;
    snprintf(r->err, sizeof r->err, "no dag '%s' is loaded", r->dag);
    return;
  }
  if (!e->cron) {
    snprintf(r->err, sizeof r->err,
             "%s has no schedule: backfill follows a DAG's schedule", r->dag);
    return;
  }
  if (s->stopping) {
    r->status = 503;
    snprintf(r->err, sizeof r->err, "dagrun serve is shutting down");
    return;
  }
  int64_t *times;
  long n = backfill_plan(e->cron, e->zone, r->from, r->to, &times, r->err,
                         sizeof r->err);
  if (n <= 0) {
    if (n == 0)
      snprintf(r->err, sizeof r->err,
               "no schedule time of %s between %s and %s", r->dag, r->from,
               r->to);
    free(times);
    return;
  }
  char err[512];
  cJSON *done =
      r->rerun ? NULL
               : store_runs(s->st, e->sp->dag, "success", 0, err, sizeof err);
  /* A time whose run is going is never queued again, rerun or not: two
   * runs of one logical date at once would race on its outputs. A run
   * whose dagrun died blocks nothing: it waits for a resume. */
  cJSON *going = resume_runs_going(s->st, e->sp->dag, err, sizeof err);
  r->result = cJSON_CreateObject();
  cJSON_AddStringToObject(r->result, "dag", e->sp->dag);
  cJSON *queued = cJSON_AddArrayToObject(r->result, "queued");
  cJSON *skipped = cJSON_AddArrayToObject(r->result, "skipped");
  for (long i = 0; i < n; i++) {
    char when[40];
    iso_utc(times[i], when, sizeof when);
    const char *prev = backfill_done_for(done, times[i]);
    if (!prev)
      prev = backfill_done_for(going, times[i]);
    if (!prev)
      prev = started_for(s, e->sp->dag, times[i]);
    if (prev || queued_for(e, times[i])) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "at", when);
      cJSON_AddStringToObject(o, "run", prev ? prev : "queued already");
      cJSON_AddItemToArray(skipped, o);
      continue;
    }
    queue_push(s, e, times[i], NULL, "backfill", NULL, NULL, 0);
    cJSON_AddItemToArray(queued, cJSON_CreateString(when));
  }
  say("%s: backfill from the API: %d run%s queued, %d skipped", e->sp->dag,
      cJSON_GetArraySize(queued), cJSON_GetArraySize(queued) == 1 ? "" : "s",
      cJSON_GetArraySize(skipped));
  cJSON_Delete(done);
  cJSON_Delete(going);
  free(times);
  queue_pump(s, e);
  r->status = 0;
}

/* Whether run (a store_run object) has a task of that name. */
static int run_has_task(const cJSON *run, const char *name) {
  const cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(run, "tasks")) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
      return 1;
  }
  return 0;
}

/* `dagrun resume RUN -q [--clear TASK]... [--downstream]` for r, each
 * string the caller's to free (strv_free); NULL with r's 400 when the run
 * has no task of that name. */
static char **resume_args(server *s, const cJSON *run, api_request *r) {
  size_t n = (size_t)cJSON_GetArraySize(r->params), k = 0;
  char **args = xcalloc(6 + 2 * n, sizeof(char *));
  args[k++] = xstrdup(s->self_exe);
  args[k++] = xstrdup("resume");
  args[k++] = xstrdup(cJSON_GetObjectItem(run, "id")->valuestring);
  args[k++] = xstrdup("-q");
  const cJSON *t;
  cJSON_ArrayForEach(t, r->params) {
    if (!run_has_task(run, t->valuestring)) {
      r->status = 400;
      snprintf(r->err, sizeof r->err, "run %s has no task '%.100s'",
               r->run_id_in, t->valuestring);
      strv_free(args);
      return NULL;
    }
    args[k++] = xstrdup("--clear");
    args[k++] = xstrdup(t->valuestring);
  }
  if (r->downstream)
    args[k++] = xstrdup("--downstream");
  return args;
}

/* A resume from the API: `dagrun resume RUN [--clear TASK]...
 * [--downstream]` as a child, as a run is started. Refused: an unknown run
 * (404), one going (409), a succeeded one with nothing to clear (409), a
 * task to clear that the run does not have (400). A run whose end is
 * recorded while its dagrun is still finishing (the report, the alerts)
 * is resumed when that dagrun exits: the click on a run the dashboard
 * shows as ended must not meet a 409. */
static void loop_resume(server *s, api_request *r) {
  char err[512];
  int rc = 0;
  cJSON *run = store_run(s->st, r->run_id_in, &rc, err, sizeof err);
  const char *state = run ? cJSON_GetObjectItem(run, "state")->valuestring : "";
  child_run *ending = run ? find_child(s, r->run_id_in) : NULL;
  char **args = NULL;
  r->status = 409;
  if (!run) {
    r->status = rc == DR_ENOENT ? 404 : rc == DR_EINVAL ? 400 : 500;
    snprintf(r->err, sizeof r->err, "%s", err);
  } else if (s->stopping) {
    r->status = 503;
    snprintf(r->err, sizeof r->err, "dagrun serve is shutting down");
  } else if (store_state_active(state)) {
    snprintf(r->err, sizeof r->err, "run %s is %s: not resuming it",
             r->run_id_in, state);
  } else if (ending && ending->then_resume) {
    snprintf(r->err, sizeof r->err,
             "run %s: a resume already waits for its dagrun to exit",
             r->run_id_in);
  } else if (strcmp(state, "success") == 0 && !cJSON_GetArraySize(r->params)) {
    snprintf(r->err, sizeof r->err,
             "run %s succeeded: nothing to resume (clear names tasks to run "
             "again)",
             r->run_id_in);
  } else if ((args = resume_args(s, run, r)) != NULL) {
    const char *dag = cJSON_GetObjectItem(run, "dag")->valuestring;
    r->status = 0;
    if (ending) {
      ending->then_resume = args;
      args = NULL;
    } else if (spawn_child(s, dag, args[2], 0, args, NULL, 0, NULL) != 0) {
      r->status = 500;
      snprintf(r->err, sizeof r->err, "cannot start dagrun resume");
    }
    if (r->status == 0) {
      snprintf(r->run_id, sizeof r->run_id, "%s", r->run_id_in);
      say("run %s: resume asked through the API%s%s", r->run_id_in,
          cJSON_GetArraySize(r->params) ? " (tasks cleared)" : "",
          ending ? "; it starts when the run's dagrun, still finishing, exits"
                 : "");
    }
  }
  strv_free(args);
  cJSON_Delete(run);
}

static void loop_cancel(server *s, api_request *r) {
  /* A queued run: dropped from its queue. */
  for (size_t i = 0; i < s->n_dags; i++) {
    dag_entry *e = s->dags[i];
    for (size_t k = 0; k < e->nq; k++)
      if (e->queue[k].run_id && strcmp(e->queue[k].run_id, r->run_id_in) == 0) {
        pending p = queue_take(s, e, k);
        pending_free(&p);
        say("queued run %s of %s cancelled", r->run_id_in, e->sp->dag);
        return;
      }
  }
  /* One of ours (its dagrun may not have recorded itself yet). */
  child_run *c = find_child(s, r->run_id_in);
  if (c) {
    if (c->then_resume) {
      strv_free(c->then_resume);
      c->then_resume = NULL;
      say("run %s: the resume waiting for its dagrun is cancelled",
          r->run_id_in);
    }
    uv_process_kill(&c->proc, SIGTERM);
    say("run %s: cancel asked through the API", r->run_id_in);
    return;
  }
  int rc, pid = 0;
  owner_state w = OWNER_GONE;
  cJSON *run = store_run(s->st, r->run_id_in, &rc, r->err, sizeof r->err);
  if (!run) {
    r->status = rc == DR_ENOENT ? 404 : rc == DR_EINVAL ? 400 : 500;
    return;
  }
  const cJSON *state = cJSON_GetObjectItemCaseSensitive(run, "state");
  if (run)
    w = owner_of_run_judge(run, &pid);
  if (cJSON_IsString(state) && store_state_active(state->valuestring) &&
      w == OWNER_ELSEWHERE) {
    /* Its pid names another process here, or none. */
    r->status = 409;
    snprintf(r->err, sizeof r->err, "run %s: %s; cancel it there", r->run_id_in,
             cJSON_GetStringValue(cJSON_GetObjectItem(run, "note")));
  } else if (!cJSON_IsString(state) ||
             !store_state_active(state->valuestring) || w != OWNER_ALIVE) {
    r->status = 409;
    snprintf(r->err, sizeof r->err, "run %s is not running (%s)",
             r->run_id_in,
             cJSON_IsString(state) ? state->valuestring : "unknown");
  } else if (kill(pid, SIGTERM) != 0) {
    r->status = 500;
    snprintf(r->err, sizeof r->err, "cannot stop run %s (pid %d): %s",
             r->run_id_in, pid, strerror(errno));
  } else {
    say("run %s: cancel asked through the API", r->run_id_in);
  }
  cJSON_Delete(run);
}

/* Sets e's paused state to p (a dag_pauses row, copied; NULL: going),
 * saying so when it changes. */
static void entry_set_paused(dag_entry *e, const cJSON *p) {
  if ((p != NULL) != (e->paused != NULL))
    say("%s: schedule %s", e->sp->dag,
        p ? "paused: no cron or data-triggered run starts until unpaused"
          : "unpaused");
  cJSON_Delete(e->paused);
  e->paused = p ? cJSON_Duplicate(p, 1) : NULL;
}

/* The paused DAGs from the store, where `dagrun pause` writes. A store
 * that cannot be read leaves the states as they were. */
static void read_paused(server *s) {
  char err[512];
  cJSON *list = pause_list(s->st, err, sizeof err);
  if (!list) {
    say("cannot read the paused DAGs: %s", err);
    return;
  }
  for (size_t i = 0; i < s->n_dags; i++)
    if (s->dags[i]->sp)
      entry_set_paused(s->dags[i], pause_find(list, s->dags[i]->sp->dag));
  cJSON_Delete(list);
}

/* A pause or unpause from the API: recorded in the store (as `dagrun
 * pause` does) and in force at once. r->result: {dag, paused, changed,
 * paused_since, paused_by}. */
static void loop_pause(server *s, api_request *r) {
  dag_entry *e = find_dag(s, r->dag);
  if (!e) {
    r->status = 404;
    snprintf(r->err, sizeof r->err, "no dag '%s' is loaded", r->dag);
    return;
  }
  int paused = r->pause == 1;
  pause_who who = {r->by, r->via};
  char err[512];
  int rc =
      pause_set(s->st, e->sp->dag, paused, &who, clock_wall(), err, sizeof err);
  cJSON *list = rc >= 0 ? pause_list(s->st, err, sizeof err) : NULL;
  if (!list) {
    r->status = 500;
    snprintf(r->err, sizeof r->err, "%s", err);
    return;
  }
  entry_set_paused(e, pause_find(list, e->sp->dag));
  cJSON_Delete(list);
  r->result = cJSON_CreateObject();
  cJSON_AddStringToObject(r->result, "dag", e->sp->dag);
  cJSON_AddBoolToObject(r->result, "changed", rc == 0);
  add_paused(r->result, e);
  /* Unpaused: what waited may go now, not at the next tick. */
  queue_pump(s, e);
  r->status = 0;
}

static void on_wake(uv_async_t *h) {
  server *s = h->data;
  pthread_mutex_lock(&s->mu);
  api_request *list = s->reqs;
  s->reqs = NULL;
  pthread_mutex_unlock(&s->mu);
  /* Oldest first. */
  api_request *rev = NULL;
  while (list) {
    api_request *n = list->next;
    list->next = rev;
    rev = list;
    list = n;
  }
  for (api_request *r = rev; r; r = r->next) {
    if (r->cancel)
      loop_cancel(s, r);
    else if (r->resume)
      loop_resume(s, r);
    else if (r->backfill)
      loop_backfill(s, r);
    else if (r->pause)
      loop_pause(s, r);
    else
      loop_trigger(s, r);
  }
  publish_dags(s);
  pthread_mutex_lock(&s->mu);
  while (rev) {
    api_request *n = rev->next;
    if (rev->waiting) {
      /* its child_run answers it */
    } else if (rev->abandoned) {
      request_free(rev);
    } else {
      rev->done = 1;
    }
    rev = n;
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* ---- the loop ---- */

/* The loaded DAG named dag, or NULL. */
static dag_entry *loaded_dag(server *s, const char *dag) {
  for (size_t i = 0; i < s->n_dags; i++)
    if (s->dags[i]->sp && strcmp(s->dags[i]->sp->dag, dag) == 0)
      return s->dags[i];
  return NULL;
}

/* params (an array of "NAME=VALUE") as queue_push takes them. */
static char **params_of(const cJSON *a) {
  if (!cJSON_IsArray(a))
    return NULL;
  int n = cJSON_GetArraySize(a), k = 0;
  char **out = xcalloc((size_t)n + 1, sizeof *out);
  const cJSON *v;
  cJSON_ArrayForEach(v, a) if (cJSON_IsString(v)) out[k++] =
      xstrdup(v->valuestring);
  return out;
}

/* Once, at the first tick (the DAGs scanned): the runs a previous serve
 * queued and did not start (runqueue.h) back in their DAGs' queues, in
 * their order, ahead of anything new. A run whose DAG is not loaded now
 * stays in the store for a later start, said once. */
static void restore_queue(server *s) {
  s->restored = 1;
  char err[512];
  cJSON *list = runqueue_list(s->st, err, sizeof err);
  if (!list) {
    say("the queued runs of the last serve cannot be read: %s", err);
    return;
  }
  size_t back = 0;
  const cJSON *q;
  cJSON_ArrayForEach(q, list) {
    const char *dag = cJSON_GetObjectItem(q, "dag")->valuestring;
    dag_entry *e = loaded_dag(s, dag);
    if (!e) {
      say("%s: a queued run waits in the store: no DAG of that name is "
          "loaded",
          dag);
      continue;
    }
    const cJSON *id = cJSON_GetObjectItem(q, "run_id");
    const cJSON *info = cJSON_GetObjectItem(q, "info");
    queue_push(s, e, (int64_t)cJSON_GetObjectItem(q, "at")->valuedouble,
               cJSON_IsString(id) ? id->valuestring : NULL,
               cJSON_GetObjectItem(q, "trigger")->valuestring,
               params_of(cJSON_GetObjectItem(q, "params")),
               cJSON_IsString(info) ? info->valuestring : NULL,
               (long long)cJSON_GetObjectItem(q, "seq")->valuedouble);
    back++;
  }
  if (back)
    say("%zu run%s queued before serve's last stop put back in their "
        "queues",
        back, back == 1 ? "" : "s");
  cJSON_Delete(list);
}

/* Answers the API triggers whose runs have not recorded themselves yet:
 * all of them when stopping, or those waiting over RECORD_WAIT_S. A run
 * whose line is there after all, or that goes on (stopping with
 * --on-shutdown finish, or not stopping: its id is answered and the log
 * says why), is answered with its id; one that the shutdown stops may
 * never be recorded: 503. */
static void answer_unrecorded(server *s, int stopping) {
  double now = clock_monotonic();
  for (child_run *c = s->children; c; c = c->next) {
    if (!c->req || (!stopping && now - c->req->queued_at < RECORD_WAIT_S))
      continue;
    ready_drain(c);
    if (c->recorded) {
      /* answered as recorded */
    } else if (stopping && s->stop_runs) {
      c->req->status = 503;
      snprintf(c->req->err, sizeof c->req->err,
               "dagrun serve is shutting down: run %s had started but not "
               "recorded itself yet; it is stopped, and if it records itself "
               "first, the next serve resumes it (GET /api/runs/%s says)",
               c->run_id, c->run_id);
    } else if (!stopping) {
      say("run %s of %s: not recorded after %d s; its id is answered all "
          "the same",
          c->run_id, c->dag, RECORD_WAIT_S);
    }
    request_answer(s, c->req);
    c->req = NULL;
  }
}

static void on_tick(uv_timer_t *t) {
  server *s = t->data;
  if (s->stopping)
    return;
  answer_unrecorded(s, 0);
  scan(s);
  read_paused(s);
  if (!s->restored)
    restore_queue(s);
  for (size_t i = 0; i < s->n_dags; i++) {
    dag_entry *e = s->dags[i];
    /* A file that does not load (its previous version kept for what the
     * API shows) starts nothing: its runs would load it as it is. Queued
     * runs wait and fire times are decided when it loads again, as after
     * serve's downtime (catchup). */
    if (!e->sp || e->error)
      continue;
    queue_pump(s, e); /* first: what waited goes before what is new */
    /* Paused: its schedule times and data changes wait, unhandled, as
     * while serve is down; the unpause handles them by catchup. */
    if (!s->no_cron && !e->paused) {
      fire_cron(s, e);
      fire_data(s, e);
    }
    queue_pump(s, e);
  }
  publish_dags(s);
}

/* Stops the API: no request waits for the loop from now on. */
static void close_api(server *s) {
  pthread_mutex_lock(&s->mu);
  s->closed = 1;
  pthread_mutex_unlock(&s->mu);
  on_wake(&s->wake); /* answers what was waiting */
  answer_unrecorded(s, 1);
  api_stop(s->api);
  s->api = NULL;
}

static void stop_children(server *s) {
  for (child_run *c = s->children; c; c = c->next) {
    say("stopping run %s of %s", c->run_id, c->dag);
    uv_process_kill(&c->proc, SIGTERM);
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  server *s = h->data;
  if (!s->stopping) {
    s->stopping = 1;
    int n = 0;
    for (child_run *c = s->children; c; c = c->next)
      n++;
    say("%s: shutting down (%d run%s going)",
        signum == SIGINT ? "interrupted" : "terminated", n, n == 1 ? "" : "s");
    close_api(s);
    for (size_t i = 0; i < s->n_dags; i++)
      if (s->dags[i]->nq)
        say("%s: %zu queued run%s kept for serve's next start",
            s->dags[i]->file, s->dags[i]->nq, s->dags[i]->nq == 1 ? "" : "s");
    if (s->stop_runs)
      stop_children(s);
    else if (s->children)
      say("waiting for the running runs to finish (signal again to stop "
          "them)");
  } else {
    /* Again: stop them now (their dagrun kills its tasks on a second
     * signal). */
    s->stop_runs = 1;
    stop_children(s);
  }
  if (!s->children) {
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->wake, NULL);
  }
}

/* Whether a run with this trigger is one `dagrun serve` starts. */
static int started_by_serve(const char *trigger) {
  static const char *const ours[] = {"cron", "api", "files", "dataset", NULL};
  for (size_t i = 0; ours[i]; i++)
    if (strcmp(trigger, ours[i]) == 0)
      return 1;
  return 0;
}

/* Runs this daemon (an earlier life of it) started that must go on: those
 * its shutdown interrupted and those whose dagrun died. */
static void recover(server *s) {
  char err[512];
  cJSON *runs = store_runs(s->st, NULL, NULL, 0, err, sizeof err);
  if (!runs) {
    say("cannot look for runs to resume: %s", err);
    return;
  }
  const cJSON *r;
  cJSON_ArrayForEach(r, runs) {
    const cJSON *trig = cJSON_GetObjectItemCaseSensitive(r, "trigger");
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(r, "state");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
    const cJSON *dag = cJSON_GetObjectItemCaseSensitive(r, "dag");
    if (!cJSON_IsString(trig) || !cJSON_IsString(state) ||
        !cJSON_IsString(id) || !cJSON_IsString(dag) ||
        !started_by_serve(trig->valuestring))
      continue;
    int pid;
    int interrupted = strcmp(state->valuestring, "interrupted") == 0;
    owner_state w = owner_of_run_judge(r, &pid);
    int orphaned = store_state_active(state->valuestring) &&
                   (w == OWNER_GONE || w == OWNER_STOPPING);
    if (!interrupted && !orphaned)
      continue;
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(r, "dag_file");
    if (!cJSON_IsString(file) || access(file->valuestring, R_OK) != 0) {
      say("not resuming run %s of %s: its DAG file %s is gone",
          id->valuestring, dag->valuestring,
          cJSON_IsString(file) ? file->valuestring : "(unknown)");
      continue;
    }
    say("resuming run %s of %s (%s)", id->valuestring, dag->valuestring,
        interrupted ? "interrupted by the last shutdown"
                    : "its dagrun died");
    char *args[] = {(char *)s->self_exe, "resume", id->valuestring, "-q",
                    NULL};
    spawn_child(s, dag->valuestring, id->valuestring, 0, args, NULL, 0, NULL);
  }
  cJSON_Delete(runs);
}

/* Shortest token or HMAC secret taken: a shorter one can be guessed. */
#define SECRET_MIN 16

/* Whether z is only spaces, tabs and newlines: twenty spaces pass the
 * length rule and are no secret. */
static int is_blank(const char *z) {
  for (; *z; z++)
    if (!isspace((unsigned char)*z))
      return 0;
  return 1;
}

static char *read_secret_file(const char *path, const char *what) {
  char *data;
  size_t n;
  struct stat sb;
  /* As ssh does for keys: a secret others can read is no secret. */
  if (stat(path, &sb) == 0 && (sb.st_mode & (S_IRWXG | S_IRWXO))) {
    fprintf(stderr,
            "dagrun serve: %s %s is readable by others (mode %04o): run "
            "`chmod 600 %s`\n",
            what, path, (unsigned)(sb.st_mode & 07777), path);
    return NULL;
  }
  int rc = fileio_read_file(path, &data, &n);
  if (rc != 0) {
    fprintf(stderr, "dagrun serve: cannot read %s %s: %s\n", what, path,
            strerror(-rc));
    return NULL;
  }
  while (n > 0 && (data[n - 1] == '\n' || data[n - 1] == '\r'))
    data[--n] = '\0';
  if (n == 0 || strlen(data) != n) {
    fprintf(stderr, "dagrun serve: %s %s is empty or not text\n", what, path);
    free(data);
    return NULL;
  }
  if (is_blank(data)) {
    fprintf(stderr,
            "dagrun serve: %s %s holds only whitespace: make one with "
            "`openssl rand -hex 32 > %s; chmod 600 %s`\n",
            what, path, path, path);
    free(data);
    return NULL;
  }
  if (n < SECRET_MIN) {
    fprintf(stderr,
            "dagrun serve: %s %s is too short (%zu bytes, at least %d): "
            "make one with `openssl rand -hex 32 > %s; chmod 600 %s`\n",
            what, path, n, SECRET_MIN, path, path);
    free(data);
    return NULL;
  }
  return data;
}

static int is_loopback(const char *host) {
  return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "::1") == 0 ||
         strncmp(host, "127.", 4) == 0;
}

static char *abs_path(const char *p) {
  if (p[0] == '/')
    return xstrdup(p);
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd))
    return xstrdup(p);
  return path_join(cwd, p);
}

/* What serve's command line gives, beyond what goes into the server. */
typedef struct serve_opts {
  const char *host, *token_file, *hmac_file, *read_token_file, *runs_dir;
  long port, request_timeout;
  const char **allow_hosts; /* NULL-terminated, argc + 1 long */
  int n_allow;
} serve_opts;

/* Reads the command line into o and s (paths, stop_runs, no_cron): 0, or
 * EXIT_USAGE after saying why. */
static int serve_parse_args(int argc, char **argv, serve_opts *o,
                            server *s) {
  const char *v;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if ((v = cli_value(argc, argv, &i, "--host"))) {
      o->host = v;
    } else if ((v = cli_value(argc, argv, &i, "--port"))) {
      if (cli_number(v, 0, 65535, &o->port) != 0) {
        fprintf(stderr, "dagrun serve: --port takes 0-65535, got '%s'\n", v);
        return EXIT_USAGE;
      }
    } else if ((v = cli_value(argc, argv, &i, "--allow-host"))) {
      o->allow_hosts[o->n_allow++] = v;
    } else if ((v = cli_value(argc, argv, &i, "--request-timeout"))) {
      if (cli_number(v, 1, 3600, &o->request_timeout) != 0) {
        fprintf(stderr,
                "dagrun serve: --request-timeout takes 1-3600 seconds, got "
                "'%s'\n",
                v);
        return EXIT_USAGE;
      }
    } else if ((v = cli_value(argc, argv, &i, "--token-file"))) {
      o->token_file = v;
    } else if ((v = cli_value(argc, argv, &i, "--hmac-secret-file"))) {
      o->hmac_file = v;
    } else if ((v = cli_value(argc, argv, &i, "--read-token-file"))) {
      o->read_token_file = v;
    } else if ((v = cli_value(argc, argv, &i, "--runs-dir"))) {
      o->runs_dir = v;
    } else if ((v = cli_value(argc, argv, &i, "--on-shutdown"))) {
      if (strcmp(v, "stop") != 0 && strcmp(v, "finish") != 0) {
        fprintf(stderr,
                "dagrun serve: --on-shutdown takes stop or finish, got "
                "'%s'\n",
                v);
        return EXIT_USAGE;
      }
      s->stop_runs = strcmp(v, "stop") == 0;
    } else if (strcmp(a, "--no-cron") == 0) {
      s->no_cron = 1;
    } else if (a[0] == '-') {
      fprintf(stderr, "dagrun serve: unknown option '%s'\n%s", a,
              serve_usage);
      return EXIT_USAGE;
    } else {
      struct stat sb;
      if (stat(a, &sb) != 0) {
        fprintf(stderr, "dagrun serve: %s: %s\n", a, strerror(errno));
        return EXIT_USAGE;
      }
      s->paths[s->n_paths++] = abs_path(a);
    }
  }
  if (!s->n_paths) {
    fprintf(stderr, "dagrun serve: no DAG file or directory given\n%s",
            serve_usage);
    return EXIT_USAGE;
  }
  return 0;
}

/* One credential (NULL when not given; caller frees) from its file or,
 * without one, the environment variable env: 0, or EXIT_USAGE after
 * saying why. */
static int serve_credential(const char *file, const char *what, const char *env,
                            char **out) {
  const char *v = getenv(env);
  *out = NULL;
  if (file)
    return (*out = read_secret_file(file, what)) ? 0 : EXIT_USAGE;
  if (v && *v && is_blank(v)) {
    fprintf(stderr,
            "dagrun serve: $%s holds only whitespace: set it to a secret "
            "(`openssl rand -hex 32`) or unset it\n",
            env);
    return EXIT_USAGE;
  }
  if (v && *v)
    *out = xstrdup(v);
  return 0;
}

/* The API's bearer token, HMAC key and read token (each NULL when not
 * given; caller frees), from their files or the environment: 0, or
 * EXIT_USAGE after saying why. */
static int serve_credentials(const serve_opts *o, char **token, char **hmac,
                             char **read_token) {
  if (serve_credential(o->token_file, "token file", "DAGRUN_API_TOKEN",
                       token) != 0 ||
      serve_credential(o->hmac_file, "HMAC secret file",
                       "DAGRUN_API_HMAC_SECRET", hmac) != 0 ||
      serve_credential(o->read_token_file, "read token file",
                       "DAGRUN_API_READ_TOKEN", read_token) != 0)
    return EXIT_USAGE;
  /* The runs this daemon starts inherit its environment: the API's
   * credentials must not reach their tasks (and their logs). */
  unsetenv("DAGRUN_API_TOKEN");
  unsetenv("DAGRUN_API_HMAC_SECRET");
  unsetenv("DAGRUN_API_READ_TOKEN");
  if (!is_loopback(o->host) && !*token && !*hmac) {
    fprintf(stderr,
            "dagrun serve: refusing to listen on %s without "
            "--token-file or --hmac-secret-file\n",
            o->host);
    return EXIT_USAGE;
  }
  /* Off loopback, open GETs would show every run's logs, reports and
   * params to the network. */
  if (!is_loopback(o->host) && !*read_token) {
    fprintf(stderr,
            "dagrun serve: refusing to listen on %s without "
            "--read-token-file: GETs would show every run's logs and "
            "reports to the network\n",
            o->host);
    return EXIT_USAGE;
  }
  return 0;
}

/* Takes the lock beside the store at db_path, so that one daemon per store
 * fires its schedules: the lock's descriptor (holding the lock until it is
 * closed, with this pid written in it for a second daemon's message), or
 * -1 after saying which daemon holds it. */
static int serve_lock(const char *db_path) {
  char *lock_path = xasprintf("%s.serve.lock", db_path);
  int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char other[32] = "";
    if (fd >= 0) {
      ssize_t n = pread(fd, other, sizeof other - 1, 0);
      other[n > 0 ? n : 0] = '\0';
      other[strcspn(other, "\n")] = '\0';
      close(fd);
    }
    fprintf(stderr,
            "dagrun serve: another dagrun serve (pid %s) uses the run store "
            "%s (lock %s)\n",
            other[0] ? other : "unknown", db_path, lock_path);
    free(lock_path);
    return -1;
  }
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) < 0) {
    /* Only the message of a second daemon loses the pid. */
  }
  free(lock_path);
  return fd;
}

/* Serves until a shutdown signal has stopped everything: the loop, the
 * API, the recovery of runs a previous daemon left, the tick and the
 * signal watchers. Returns the exit status. */
static int serve_loop(server *s, const api_config *cfg) {
  char err[1024];
  /* The cron code switches TZ while the API's threads run: with TZ set
   * from the start, each switch replaces the variable in place (glibc
   * setenv) instead of growing the environment under their feet. */
  if (!getenv("TZ"))
    setenv("TZ", ":/etc/localtime", 1);

  s->loop = uv_default_loop();
  s->started = clock_wall();
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  uv_async_init(s->loop, &s->wake, on_wake);
  s->wake.data = s;
  scan(s);
  read_paused(s);
  publish_dags(s);

  api_actions acts = {api_dags,   api_trigger, api_cancel, api_backfill,
                      api_resume, api_pause,   s};
  int code = EXIT_USAGE;
  if (api_start(cfg, &acts, &s->api, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun serve: %s\n", err);
    uv_close((uv_handle_t *)&s->wake, NULL);
    uv_run(s->loop, UV_RUN_DEFAULT);
    goto out;
  }
  const char *host = cfg->host;
  say("listening on http://%s%s%s:%d/ (%zu DAG file%s, runs in %s%s%s)",
      strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
      api_port(s->api), s->n_dags, s->n_dags == 1 ? "" : "s", s->runs_dir,
      s->clock_rate > 0 ? ", fake clock" : "",
      !cfg->token && !cfg->hmac_secret
          ? "; POSTs refused: no token or HMAC secret"
          : "");
  recover(s);

  uv_timer_init(s->loop, &s->tick);
  s->tick.data = s;
  uv_timer_start(&s->tick, on_tick, 0, TICK_MS);
  uv_signal_init(s->loop, &s->sigterm);
  uv_signal_init(s->loop, &s->sigint);
  s->sigterm.data = s->sigint.data = s;
  uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  uv_signal_start(&s->sigint, on_signal, SIGINT);
  uv_run(s->loop, UV_RUN_DEFAULT);
  say("stopped");
  code = 0;
out:
  uv_loop_close(s->loop);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  return code;
}

static void server_free(server *s) {
  for (size_t i = 0; i < s->n_dags; i++)
    entry_free(s->dags[i]);
  free(s->dags);
  for (int i = 0; i < s->n_paths; i++)
    free(s->paths[i]);
  free(s->paths);
  free(s->runs_dir);
  free(s->dags_json);
  store_close(s->st);
}

int serve_cmd_serve(int argc, char **argv) {
  server s = {0};
  serve_opts o = {.host = "127.0.0.1", .port = 8470};
  o.allow_hosts = xcalloc((size_t)argc + 1, sizeof *o.allow_hosts);
  s.stop_runs = 1;
  s.paths = xcalloc((size_t)argc + 1, sizeof(char *));
  int code = EXIT_USAGE;
  char *token = NULL, *hmac = NULL, *read_token = NULL, *db_path = NULL;
  char self_exe[4096], err[1024];
  int lock_fd = -1;
  if (serve_parse_args(argc, argv, &o, &s) != 0)
    goto out;
  /* The daemon checks every DAG it loads, and each again when its file
   * changes: the stages' descriptions are kept (describe.h). */
  describe_cache_keep();
  const char *fake = getenv("DAGRUN_FAKE_CLOCK");
  if (fake && *fake && parse_fake_clock(&s, fake) != 0) {
    fprintf(stderr,
            "dagrun serve: DAGRUN_FAKE_CLOCK takes EPOCH_SECONDS[*RATE], got "
            "'%s'\n",
            fake);
    goto out;
  }
  if (serve_credentials(&o, &token, &hmac, &read_token) != 0 ||
      cli_self_exe(self_exe, sizeof self_exe) != 0)
    goto out;
  s.runs_dir = abs_path(cli_runs_dir(o.runs_dir));
  s.self_exe = self_exe;
  db_path = store_default_path();
  if (store_open(db_path, 1, &s.st, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun serve: %s\n", err);
    goto out;
  }
  if ((lock_fd = serve_lock(db_path)) < 0)
    goto out;
  api_config cfg = {.host = o.host,
                    .port = (int)o.port,
                    .token = token,
                    .hmac_secret = hmac,
                    .read_token = read_token,
                    .store_path = db_path,
                    .allow_hosts = o.allow_hosts,
                    .request_timeout = (double)o.request_timeout};
  code = serve_loop(&s, &cfg);
out:
  if (lock_fd >= 0)
    close(lock_fd);
  server_free(&s);
  free(o.allow_hosts);
  free(db_path);
  free(token);
  free(hmac);
  free(read_token);
  return code;
}
