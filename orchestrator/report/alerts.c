/*
 * alerts: delivery of the alerts that dagfile/alertspec.c parsed, through
 * curl's multi socket interface on the run's libuv loop (curl's documented libuv
 * pattern: CURLMOPT_SOCKETFUNCTION drives one uv_poll_t per socket,
 * CURLMOPT_TIMERFUNCTION one uv_timer_t).
 *
 * Every handle is unreferenced, so pending deliveries never keep the run's
 * loop alive; once the run has finished, one referenced timer (the grace)
 * keeps it alive until the last delivery ends or the grace passes.
 */
#include "alerts.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dagfile/alertspec.h"
#include "dagfile/template.h"
#include "lib/clock.h"
#include "run/secrets.h"
#include "store/store.h"

#define MAX_TRIES 3
#define LOG_TAIL_LINES 20
#define LOG_TAIL_BYTES 4096

void alerts_redact_url(const char *url, char *buf, size_t n) {
  CURLU *u = curl_url();
  char *scheme = NULL, *host = NULL, *port = NULL;
  if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
    (void)curl_url_get(u, CURLUPART_PORT, &port, 0);
    snprintf(buf, n, "%s://%s%s%s", scheme, host, port ? ":" : "",
             port ? port : "");
  } else {
    snprintf(buf, n, "(invalid URL)");
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
}

/* ---- delivery --------------------------------------------------------- */

typedef struct hook {
  struct alerts *a;
  char *url; /* resolved: a secret, never written or printed */
  char redacted[256];
  unsigned events;
  double deadline_s, timeout_s;
  uv_timer_t deadline_timer;            /* the run's deadline (no `tasks:`) */
  struct task_deadline *task_deadlines; /* per `tasks:` entry */
  size_t n_task_deadlines;
} hook;

/* A per-task deadline: started when the task first runs, stopped when it
 * ends. */
typedef struct task_deadline {
  hook *h;
  size_t task;
  int started;
  uv_timer_t timer;
} task_deadline;

typedef struct delivery {
  struct alerts *a;
  hook *h;
  const char *event; /* static */
  char *task;        /* NULL for run-level alerts */
  int task_attempt;
  char *body;
  int tries; /* attempts started */
  CURL *easy;
  struct curl_slist *headers;
  char errbuf[CURL_ERROR_SIZE];
  double started; /* monotonic, of the current attempt */
  uv_timer_t backoff;
  struct delivery *prev, *next;
} delivery;

typedef struct sock_ctx {
  uv_poll_t poll;
  curl_socket_t fd;
  struct alerts *a;
  struct sock_ctx *prev, *next;
} sock_ctx;

struct alerts {
  uv_loop_t *loop;
  const spec *s;
  const rundir *run;
  store *db;                   /* NULL: deliveries go to alerts.jsonl only */
  int db_failed;               /* a store write failed (said once) */
  secrets *secret;             /* masked in everything recorded or sent */
  int *attempt, *max_attempts; /* per task: latest, from the events */
  CURLM *multi;
  uv_timer_t curl_timer, grace;
  hook *hooks;
  size_t n_hooks;
  delivery *live;  /* deliveries not yet done */
  sock_ctx *socks; /* sockets being polled */
  size_t n_live;
  FILE *log;
  size_t n_open; /* handles not yet closed */
  int finished, shut;
};

static void on_handle_closed(uv_handle_t *h) {
  struct alerts *a = h->data;
  a->n_open--;
}

static void close_handle(struct alerts *a, uv_handle_t *h) {
  h->data = a;
  uv_close(h, on_handle_closed);
}

static void on_sock_closed(uv_handle_t *h) { free(h->data); }

static void on_poll(uv_poll_t *h, int status, int events);

static void sock_close(struct alerts *a, sock_ctx *c) {
  if (c->prev)
    c->prev->next = c->next;
  else
    a->socks = c->next;
  if (c->next)
    c->next->prev = c->prev;
  uv_poll_stop(&c->poll);
  c->poll.data = c;
  uv_close((uv_handle_t *)&c->poll, on_sock_closed);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
                          void *socketp) {
  struct alerts *a = userp;
  sock_ctx *c = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (c) {
      sock_close(a, c);
      curl_multi_assign(a->multi, fd, NULL);
    }
    return 0;
  }
  if (!c) {
    c = xcalloc(1, sizeof(*c));
    c->fd = fd;
    c->a = a;
    if (uv_poll_init_socket(a->loop, &c->poll, fd) != 0) {
      free(c);
      return -1;
    }
    c->poll.data = c;
    uv_unref((uv_handle_t *)&c->poll);
    c->next = a->socks;
    if (a->socks)
      a->socks->prev = c;
    a->socks = c;
    curl_multi_assign(a->multi, fd, c);
  }
  int ev = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
    ev |= UV_READABLE;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
    ev |= UV_WRITABLE;
  uv_poll_start(&c->poll, ev, on_poll);
  return 0;
}

static void record(delivery *dl, long status, const char *error,
                   const char *result, double duration) {
  struct alerts *a = dl->a;
  if (!a->log)
    return;
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof(ts));
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "time", ts);
  cJSON_AddStringToObject(j, "event", dl->event);
  if (dl->task) {
    cJSON_AddStringToObject(j, "task", dl->task);
    cJSON_AddNumberToObject(j, "task_attempt", dl->task_attempt);
  } else {
    cJSON_AddNullToObject(j, "task");
  }
  cJSON_AddNumberToObject(j, "attempt", dl->tries);
  cJSON_AddStringToObject(j, "webhook", dl->h->redacted);
  if (status > 0)
    cJSON_AddNumberToObject(j, "status", (double)status);
  else
    cJSON_AddNullToObject(j, "status");
  char *masked = secrets_mask(a->secret, error);
  if (masked)
    cJSON_AddStringToObject(j, "error", masked);
  else
    cJSON_AddNullToObject(j, "error");
  cJSON_AddNumberToObject(j, "duration_s", round(duration * 1000) / 1000);
  cJSON_AddStringToObject(j, "result", result);
  char *line = cJSON_PrintUnformatted(j);
  fprintf(a->log, "%s\n", line);
  fflush(a->log);
  cJSON_free(line);
  cJSON_Delete(j);
  if (a->db) {
    store_alert_delivery sd = {
        .time = clock_wall(),
        .event = dl->event,
        .task = dl->task,
        .attempt = dl->task ? dl->task_attempt : 0,
        .try_n = dl->tries,
        .http_status = status > 0 ? (int)status : 0,
        .error = masked,
        .duration_s = round(duration * 1000) / 1000,
        .result = result,
        .endpoint = dl->h->redacted,
    };
    char err[512];
    if (store_alert_record(a->db, a->run->id, &sd, err, sizeof(err)) != 0 &&
        !a->db_failed) {
      /* The delivery is in alerts.jsonl; the run goes on. */
      a->db_failed = 1;
      fprintf(stderr,
              "dagrun: alert deliveries are not recorded in the run store "
              "(see alerts.jsonl): %s\n",
              err);
    }
  }
  free(masked);
}

static void shutdown_all(struct alerts *a);

static void on_delivery_closed(uv_handle_t *h) {
  delivery *dl = h->data;
  dl->a->n_open--;
  free(dl->task);
  free(dl->body);
  free(dl);
}

/* The delivery is over (delivered, failed for good or abandoned). */
static void delivery_done(delivery *dl) {
  struct alerts *a = dl->a;
  if (dl->easy) {
    curl_multi_remove_handle(a->multi, dl->easy);
    curl_easy_cleanup(dl->easy);
    dl->easy = NULL;
  }
  curl_slist_free_all(dl->headers);
  dl->headers = NULL;
  if (dl->prev)
    dl->prev->next = dl->next;
  else
    a->live = dl->next;
  if (dl->next)
    dl->next->prev = dl->prev;
  a->n_live--;
  dl->backoff.data = dl;
  uv_close((uv_handle_t *)&dl->backoff, on_delivery_closed);
  if (a->finished && a->n_live == 0)
    shutdown_all(a);
}

static size_t discard_body(char *p, size_t size, size_t n, void *ud) {
  return size * n;
}

static void start_try(delivery *dl) {
  struct alerts *a = dl->a;
  CURL *e = curl_easy_init();
  dl->tries++;
  dl->started = clock_monotonic();
  dl->errbuf[0] = '\0';
  if (!e) {
    record(dl, 0, "cannot create a curl handle", "failed", 0);
    delivery_done(dl);
    return;
  }
  if (!dl->headers)
    dl->headers = curl_slist_append(NULL, "Content-Type: application/json");
  long ms = (long)(dl->h->timeout_s * 1000);
  int bad = 0;
  bad |= curl_easy_setopt(e, CURLOPT_URL, dl->h->url) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, dl->body) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, dl->headers) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "dagrun/" DAGRUN_VERSION) !=
         CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, ms) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ms) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard_body) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, dl->errbuf) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PRIVATE, dl) != CURLE_OK;
  if (bad || curl_multi_add_handle(a->multi, e) != CURLM_OK) {
    curl_easy_cleanup(e);
    record(dl, 0, "cannot set up the request", "failed", 0);
    delivery_done(dl);
    return;
  }
  dl->easy = e;
}

static void on_backoff(uv_timer_t *t) { start_try(t->data); }

/* curl's detailed message, else its generic one; record() masks the
 * URL and its secret parts in it. */
static const char *curl_error(delivery *dl, CURLcode res) {
  return dl->errbuf[0] ? dl->errbuf : curl_easy_strerror(res);
}

static void check_multi_info(struct alerts *a) {
  CURLMsg *m;
  int pending;
  while (!a->shut && (m = curl_multi_info_read(a->multi, &pending))) {
    if (m->msg != CURLMSG_DONE)
      continue;
    CURL *e = m->easy_handle;
    CURLcode res = m->data.result;
    delivery *dl = NULL;
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&dl);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(a->multi, e);
    curl_easy_cleanup(e);
    dl->easy = NULL;
    double dur = clock_monotonic() - dl->started;
    int ok = res == CURLE_OK && status >= 200 && status < 300;
    int retryable = res != CURLE_OK || status >= 500 || status == 429;
    const char *error = NULL;
    char buf[64];
    if (res != CURLE_OK) {
      error = curl_error(dl, res);
    } else if (!ok) {
      snprintf(buf, sizeof(buf), "HTTP status %ld", status);
      error = buf;
    }
    if (ok) {
      record(dl, status, NULL, "delivered", dur);
      delivery_done(dl);
    } else if (retryable && dl->tries < MAX_TRIES) {
      record(dl, status, error, "retrying", dur);
      /* 1 s, 2 s, 4 s, ... */
      uint64_t delay = 1000u << (dl->tries - 1);
      uv_timer_start(&dl->backoff, on_backoff, delay, 0);
    } else {
      record(dl, status, error, "failed", dur);
      delivery_done(dl);
    }
  }
}

static void on_poll(uv_poll_t *h, int status, int events) {
  sock_ctx *c = h->data;
  struct alerts *a = c->a;
  int flags = 0;
  if (status < 0)
    flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE)
    flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE)
    flags |= CURL_CSELECT_OUT;
  int running;
  curl_multi_socket_action(a->multi, c->fd, flags, &running);
  check_multi_info(a);
}

static void on_curl_timeout(uv_timer_t *t) {
  struct alerts *a = t->data;
  int running;
  curl_multi_socket_action(a->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_multi_info(a);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
  struct alerts *a = userp;
  if (a->shut)
    return 0;
  if (timeout_ms < 0)
    uv_timer_stop(&a->curl_timer);
  else
    uv_timer_start(&a->curl_timer, on_curl_timeout, (uint64_t)timeout_ms, 0);
  return 0;
}

static char *log_tail(const struct alerts *a, const char *task, int attempt) {
  if (attempt < 1)
    return NULL;
  char *dir = rundir_attempt(a->run, task, attempt);
  char *path = path_join(dir, "log");
  free(dir);
  FILE *f = fopen(path, "rb");
  free(path);
  if (!f)
    return NULL;
  char *buf = NULL;
  long start = 0;
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    start = size > LOG_TAIL_BYTES ? size - LOG_TAIL_BYTES : 0;
    fseek(f, start, SEEK_SET);
  }
  buf = xmalloc(LOG_TAIL_BYTES + 1);
  size_t n = fread(buf, 1, LOG_TAIL_BYTES, f);
  fclose(f);
  buf[n] = '\0';
  while (n && buf[n - 1] == '\n')
    buf[--n] = '\0';
  /* The last LOG_TAIL_LINES lines; a partial first line is dropped. */
  size_t lines = 0;
  char *p = buf + n;
  while (p > buf) {
    if (p[-1] == '\n' && ++lines == LOG_TAIL_LINES)
      break;
    p--;
  }
  if (p == buf && start > 0) {
    char *nl = strchr(buf, '\n');
    p = nl ? nl + 1 : buf + n;
  }
  char *out = xstrdup(p);
  free(buf);
  return out;
}

/* text for Slack's `text`: its markup starts with '<' (<!channel> pings
 * everyone, <https://x|label> shows a link under another name) and '&'
 * starts an entity, so & < > are written &amp; &lt; &gt;, the three
 * escapes Slack decodes (it would show &quot; as it is). The text is
 * dagrun's words around a task's error and names, which may quote a
 * param: dagrun writes no markup of its own in it (the run's link is the
 * `link` field). Caller frees. */
static char *slack_escape(const char *text) {
  sbuf b = {0};
  for (const char *p = text; *p; p++) {
    if (*p == '&')
      sbuf_puts(&b, "&amp;");
    else if (*p == '<')
      sbuf_puts(&b, "&lt;");
    else if (*p == '>')
      sbuf_puts(&b, "&gt;");
    else
      sbuf_putc(&b, *p);
  }
  return sbuf_take(&b);
}

static void send_alert(struct alerts *a, unsigned ev, const char *event,
                       hook *only, const char *task, int attempt,
                       int max_attempts, const char *state, const char *error,
                       const char *text) {
  cJSON *b = NULL;
  for (size_t i = 0; i < a->n_hooks; i++) {
    hook *h = &a->hooks[i];
    if (!(h->events & ev) || (only && h != only))
      continue;
    if (!b) {
      b = cJSON_CreateObject();
      /* Masked before it is escaped: a secret holding '&' would not be
       * found once written "&amp;". */
      char *masked = secrets_mask(a->secret, text);
      char *shown = slack_escape(masked);
      cJSON_AddStringToObject(b, "text", shown);
      free(shown);
      free(masked);
      cJSON_AddStringToObject(b, "event", event);
      cJSON_AddStringToObject(b, "dag", a->s->dag);
      cJSON_AddStringToObject(b, "run", a->run->id);
      if (task)
        cJSON_AddStringToObject(b, "task", task);
      else
        cJSON_AddNullToObject(b, "task");
      cJSON_AddStringToObject(b, "state", state);
      if (task) {
        cJSON_AddNumberToObject(b, "attempt", attempt);
        cJSON_AddNumberToObject(b, "max_attempts", max_attempts);
      } else {
        cJSON_AddNullToObject(b, "attempt");
      }
      if (error)
        cJSON_AddStringToObject(b, "error", error);
      else
        cJSON_AddNullToObject(b, "error");
      char *tail = task ? log_tail(a, task, attempt) : NULL;
      if (tail)
        cJSON_AddStringToObject(b, "log_tail", tail);
      else
        cJSON_AddNullToObject(b, "log_tail");
      free(tail);
      char *link = xasprintf("file://%s", a->run->path);
      cJSON_AddStringToObject(b, "link", link);
      free(link);
      /* The error and the log are the task's: they may quote a secret. */
      secrets_mask_json(a->secret, b);
    }
    delivery *dl = xcalloc(1, sizeof(*dl));
    dl->a = a;
    dl->h = h;
    dl->event = event;
    dl->task = task ? xstrdup(task) : NULL;
    dl->task_attempt = attempt;
    dl->body = cJSON_PrintUnformatted(b);
    uv_timer_init(a->loop, &dl->backoff);
    uv_unref((uv_handle_t *)&dl->backoff);
    dl->backoff.data = dl;
    a->n_open++;
    dl->next = a->live;
    if (a->live)
      a->live->prev = dl;
    a->live = dl;
    a->n_live++;
    start_try(dl);
  }
  cJSON_Delete(b);
}

static void on_task_deadline(uv_timer_t *t);

/* Starts the per-task deadlines of task i when it first runs, stops them
 * when it ends. */
static void task_deadlines(struct alerts *a, const sched_event *e) {
  int end = task_state_terminal(e->state);
  if (e->state != TASK_RUNNING && !end)
    return;
  for (size_t i = 0; i < a->n_hooks; i++) {
    hook *h = &a->hooks[i];
    for (size_t k = 0; k < h->n_task_deadlines; k++) {
      task_deadline *td = &h->task_deadlines[k];
      if (td->task != e->task)
        continue;
      if (end) {
        uv_timer_stop(&td->timer);
      } else if (!td->started && (h->events & ALERTSPEC_DEADLINE)) {
        td->started = 1;
        uv_timer_start(&td->timer, on_task_deadline,
                       (uint64_t)(h->deadline_s * 1000), 0);
      }
    }
  }
}

void alerts_task_event(alerts *a, const sched_event *e) {
  if (!a || a->shut)
    return;
  a->attempt[e->task] = e->attempt;
  a->max_attempts[e->task] = e->max_attempts;
  task_deadlines(a, e);
  const char *task = a->s->tasks[e->task].name;
  if (e->state == TASK_WAITING_APPROVAL) {
    char *text =
        xasprintf(":raised_hand: %s run %s: task %s waits for approval%s%s "
                  "(dagrun approve %s %s)",
                  a->s->dag, a->run->id, task, e->reason ? ": " : "",
                  e->reason ? e->reason : "", a->run->id, task);
    send_alert(a, ALERTSPEC_APPROVAL, "approval", NULL, task, e->attempt,
               e->max_attempts, "waiting_approval", NULL, text);
    free(text);
    return;
  }
  if (e->state != TASK_FAILED && e->state != TASK_RETRY_WAIT)
    return;
  const char *why = e->reason ? e->reason : "failed";
  char *text;
  if (e->state == TASK_FAILED) {
    text = xasprintf(":x: %s run %s: task %s failed (attempt %d/%d): %s",
                     a->s->dag, a->run->id, task, e->attempt, e->max_attempts,
                     why);
    send_alert(a, ALERTSPEC_FAILURE, "failure", NULL, task, e->attempt,
               e->max_attempts, "failed", why, text);
  } else {
    char d[32];
    format_duration(e->retry_in_s, d, sizeof(d));
    text = xasprintf(":warning: %s run %s: task %s failed (attempt %d/%d), "
                     "retrying in %s: %s",
                     a->s->dag, a->run->id, task, e->attempt, e->max_attempts,
                     d, why);
    send_alert(a, ALERTSPEC_RETRY, "retry", NULL, task, e->attempt, e->max_attempts,
               "retry_wait", why, text);
  }
  free(text);
}

static void on_deadline(uv_timer_t *t) {
  hook *h = t->data;
  struct alerts *a = h->a;
  char d[32];
  format_duration(h->deadline_s, d, sizeof(d));
  char *text = xasprintf(":alarm_clock: %s run %s still running after %s "
                         "(deadline)",
                         a->s->dag, a->run->id, d);
  char *error = xasprintf("not finished after %s", d);
  send_alert(a, ALERTSPEC_DEADLINE, "deadline", h, NULL, 0, 0, "running", error, text);
  free(error);
  free(text);
}

static void on_task_deadline(uv_timer_t *t) {
  task_deadline *td = t->data;
  hook *h = td->h;
  struct alerts *a = h->a;
  const char *task = a->s->tasks[td->task].name;
  char d[32];
  format_duration(h->deadline_s, d, sizeof(d));
  char *text = xasprintf(":alarm_clock: %s run %s: task %s still running "
                         "after %s (deadline)",
                         a->s->dag, a->run->id, task, d);
  char *error = xasprintf("task %s not finished %s after it started", task, d);
  send_alert(a, ALERTSPEC_DEADLINE, "deadline", h, task, a->attempt[td->task],
             a->max_attempts[td->task], "running", error, text);
  free(error);
  free(text);
}

static void abandon_all(struct alerts *a) {
  size_t n = a->n_live;
  char msg[128];
  snprintf(msg, sizeof(msg),
           "abandoned: still in flight %gs after the run ended",
           ALERTS_GRACE_S);
  while (a->live) {
    delivery *dl = a->live;
    if (!dl->easy)
      dl->tries++; /* the try that was waiting for its backoff */
    record(dl, 0, msg, "abandoned",
           dl->easy ? clock_monotonic() - dl->started : 0);
    delivery_done(dl);
  }
  if (n)
    fprintf(stderr,
            "dagrun: gave up on %zu alert deliver%s still in flight %gs "
            "after the run ended (see alerts.jsonl)\n",
            n, n == 1 ? "y" : "ies", ALERTS_GRACE_S);
}

static void on_grace(uv_timer_t *t) {
  struct alerts *a = t->data;
  abandon_all(a); /* ends in shutdown_all */
}

/* Closes every handle; the loop then has nothing of ours left. */
static void shutdown_all(struct alerts *a) {
  if (a->shut)
    return;
  a->shut = 1;
  curl_multi_cleanup(a->multi);
  a->multi = NULL;
  while (a->socks)
    sock_close(a, a->socks);
  uv_timer_stop(&a->grace);
  close_handle(a, (uv_handle_t *)&a->grace);
  close_handle(a, (uv_handle_t *)&a->curl_timer);
  for (size_t i = 0; i < a->n_hooks; i++) {
    hook *h = &a->hooks[i];
    close_handle(a, (uv_handle_t *)&h->deadline_timer);
    for (size_t k = 0; k < h->n_task_deadlines; k++)
      close_handle(a, (uv_handle_t *)&h->task_deadlines[k].timer);
  }
  if (a->log) {
    fclose(a->log);
    a->log = NULL;
  }
}

void alerts_tasks_added(alerts *a, size_t first, size_t n) {
  if (!a)
    return;
  a->attempt = xrealloc(a->attempt, (first + n) * sizeof(int));
  a->max_attempts = xrealloc(a->max_attempts, (first + n) * sizeof(int));
  memset(a->attempt + first, 0, n * sizeof(int));
  memset(a->max_attempts + first, 0, n * sizeof(int));
}

void alerts_run_finished(alerts *a, const char *state, size_t n_tasks,
                         double duration_s) {
  if (!a || a->finished)
    return;
  for (size_t i = 0; i < a->n_hooks; i++) {
    hook *h = &a->hooks[i];
    uv_timer_stop(&h->deadline_timer);
    for (size_t k = 0; k < h->n_task_deadlines; k++)
      uv_timer_stop(&h->task_deadlines[k].timer);
  }
  if (strcmp(state, "success") == 0) {
    char d[32];
    format_duration(duration_s, d, sizeof(d));
    char *text =
        xasprintf(":white_check_mark: %s run %s succeeded (%zu "
                  "task%s in %s)",
                  a->s->dag, a->run->id, n_tasks, n_tasks == 1 ? "" : "s", d);
    send_alert(a, ALERTSPEC_SUCCESS, "success", NULL, NULL, 0, 0, "success", NULL,
               text);
    free(text);
  }
  a->finished = 1;
  if (a->n_live == 0) {
    shutdown_all(a);
    return;
  }
  /* The one referenced handle: the loop runs until it stops. */
  a->grace.data = a;
  uv_ref((uv_handle_t *)&a->grace);
  uv_timer_start(&a->grace, on_grace, (uint64_t)(ALERTS_GRACE_S * 1000), 0);
}

static void free_hooks(struct alerts *a) {
  for (size_t i = 0; i < a->n_hooks; i++) {
    hook *h = &a->hooks[i];
    if (h->url) {
      /* It was a secret: do not leave it in freed memory. */
      memset(h->url, 0, strlen(h->url));
      free(h->url);
    }
    free(h->task_deadlines);
  }
  free(a->hooks);
  free(a->attempt);
  free(a->max_attempts);
  secrets_destroy(a->secret);
}

/* The hooks of a, one per parsed alert, with their webhooks resolved.
 * Returns 0, or DR_ETEMPLATE with a message in err that never shows the
 * webhook. */
static int make_hooks(struct alerts *a, const alertspec *v, size_t n,
                      const cJSON *params, char *err, size_t errlen) {
  const spec *s = a->s;
  diags d = {0};
  tmpl_env te = {0};
  te.s = s;
  te.params = params;
  rundir_tmpl(a->run, &te);
  int rc = 0;
  a->hooks = xcalloc(n, sizeof(hook));
  a->n_hooks = n;
  for (size_t i = 0; i < n && rc == 0; i++) {
    hook *h = &a->hooks[i];
    h->a = a;
    h->events = v[i].events;
    h->deadline_s = v[i].deadline_s;
    h->timeout_s = v[i].timeout_s;
    if (v[i].tasks) {
      h->task_deadlines =
          xcalloc(v[i].n_tasks ? v[i].n_tasks : 1, sizeof(task_deadline));
      h->n_task_deadlines = v[i].n_tasks;
      for (size_t k = 0; k < v[i].n_tasks; k++) {
        h->task_deadlines[k].h = h;
        h->task_deadlines[k].task = v[i].tasks[k];
      }
    }
    if (alertspec_webhook(s, &v[i], i, &te, &h->url, &d) != 0) {
      snprintf(err, errlen,
               "%s:%d:%d: alert %zu: the webhook does not resolve to an "
               "http(s) URL",
               s->path, v[i].webhook->line, v[i].webhook->col, i + 1);
      rc = DR_ETEMPLATE;
    } else if (!h->url) {
      h->events = 0;
      snprintf(h->redacted, sizeof(h->redacted), "(off)");
    } else {
      alerts_redact_url(h->url, h->redacted, sizeof(h->redacted));
    }
  }
  diags_free(&d);
  return rc;
}

/* Opens <run>/alerts.jsonl and the curl multi handle. Returns 0, or
 * DR_EIO with a message in err. */
static int open_outputs(struct alerts *a, char *err, size_t errlen) {
  char *path = path_join(a->run->path, "alerts.jsonl");
  a->log = fopen(path, "ae");
  if (!a->log) {
    snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    free(path);
    return DR_EIO;
  }
  free(path);
  a->multi = curl_multi_init();
  if (!a->multi) {
    snprintf(err, errlen, "cannot create a curl multi handle");
    return DR_EIO;
  }
  curl_multi_setopt(a->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  curl_multi_setopt(a->multi, CURLMOPT_SOCKETDATA, a);
  curl_multi_setopt(a->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(a->multi, CURLMOPT_TIMERDATA, a);
  return 0;
}

/* The loop's handles of a, none of them keeping the loop alive, and the
 * run's deadlines started. */
static void start_handles(struct alerts *a) {
  uv_loop_t *loop = a->loop;
  uv_timer_init(loop, &a->curl_timer);
  uv_timer_init(loop, &a->grace);
  a->curl_timer.data = a->grace.data = a;
  uv_unref((uv_handle_t *)&a->curl_timer);
  uv_unref((uv_handle_t *)&a->grace);
  a->n_open = 2;
  for (size_t i = 0; i < a->n_hooks; i++) {
    hook *h = &a->hooks[i];
    uv_timer_init(loop, &h->deadline_timer);
    uv_unref((uv_handle_t *)&h->deadline_timer);
    h->deadline_timer.data = h;
    a->n_open++;
    /* With `tasks:` the deadline is each task's, from its start. */
    if ((h->events & ALERTSPEC_DEADLINE) && h->deadline_s > 0 &&
        !h->task_deadlines)
      uv_timer_start(&h->deadline_timer, on_deadline,
                     (uint64_t)(h->deadline_s * 1000), 0);
    for (size_t k = 0; k < h->n_task_deadlines; k++) {
      uv_timer_t *t = &h->task_deadlines[k].timer;
      uv_timer_init(loop, t);
      uv_unref((uv_handle_t *)t);
      t->data = &h->task_deadlines[k];
      a->n_open++;
    }
  }
}

int alerts_create(uv_loop_t *loop, const spec *s, const rundir *run,
                  const cJSON *params, store *db, alerts **out, char *err,
                  size_t errlen) {
  *out = NULL;
  diags d = {0};
  alertspec *v;
  size_t n;
  if (alertspec_parse(s, &v, &n, &d) != 0 || n == 0) {
    int bad = d.n > 0;
    diags_free(&d);
    alertspec_free(v, n);
    if (bad)
      snprintf(err, errlen, "%s: invalid alerts", s->path);
    return bad ? DR_ESPEC : 0;
  }
  static int curl_ready;
  if (!curl_ready) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      alertspec_free(v, n);
      snprintf(err, errlen, "cannot initialise libcurl");
      return DR_EIO;
    }
    curl_ready = 1;
  }
  struct alerts *a = xcalloc(1, sizeof(*a));
  a->loop = loop;
  a->s = s;
  a->run = run;
  a->db = db;
  a->secret = secrets_collect(s, params, run);
  a->attempt = xcalloc(s->n_tasks ? s->n_tasks : 1, sizeof(int));
  a->max_attempts = xcalloc(s->n_tasks ? s->n_tasks : 1, sizeof(int));
  int rc = make_hooks(a, v, n, params, err, errlen);
  alertspec_free(v, n);
  if (rc == 0)
    rc = open_outputs(a, err, errlen);
  if (rc != 0) {
    if (a->log)
      fclose(a->log);
    free_hooks(a);
    free(a);
    return rc;
  }
  start_handles(a);
  *out = a;
  return 0;
}

void alerts_destroy(alerts *a) {
  if (!a)
    return;
  if (!a->shut) {
    /* Not finished through alerts_run_finished: drop what is left. */
    while (a->live)
      delivery_done(a->live);
    shutdown_all(a);
  }
  while (a->n_open)
    uv_run(a->loop, UV_RUN_ONCE);
  free_hooks(a);
  free(a);
}
