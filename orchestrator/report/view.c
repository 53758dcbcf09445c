#include "view.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/util.h"
#include "lib/clock.h"

/* Small DAGs get a line per task; bigger ones only running tasks. */
#define VIEW_ALL_TASKS_MAX 20
#define VIEW_REDRAW_MS 100
#define VIEW_BAR_WIDTH 20

typedef struct task_view {
  task_state state;
  int attempt, max_attempts;
  double fraction; /* < 0: no progress reported */
  char *msg;
  double started; /* monotonic, of the current attempt */
  double took;    /* duration of the last finished attempt */
  char *reason;   /* why it failed for good */
  char *waiting;  /* queued: the machine-wide pool it waits for, or NULL */
  char *cached_from; /* cached: the run its outputs came from */
} task_view;

struct view {
  uv_loop_t *loop;
  view_mode mode;
  const spec *s;
  FILE *out;
  task_view *t;
  const rundir *run;
  double started;
  size_t counts[TASK_STATE_COUNT];
  int lines_drawn;
  int dirty;
  uv_timer_t redraw;
  int timer_on;
};

static const char *symbol(task_state s) {
  switch (s) {
  case TASK_WAITING:
    return "\033[2m·\033[0m";
  case TASK_QUEUED:
    return "\033[2m○\033[0m";
  case TASK_RUNNING:
    return "\033[36m▶\033[0m";
  case TASK_RETRY_WAIT:
    return "\033[33m↻\033[0m";
  case TASK_WAITING_APPROVAL:
    return "\033[35m?\033[0m";
  case TASK_SUCCESS:
    return "\033[32m✓\033[0m";
  case TASK_CACHED:
    return "\033[32m≡\033[0m";
  case TASK_FAILED:
    return "\033[31m✗\033[0m";
  case TASK_UPSTREAM_FAILED:
  case TASK_CANCELLED:
    return "\033[2m⊘\033[0m";
  case TASK_SKIPPED:
    return "\033[2m↷\033[0m";
  case TASK_STATE_COUNT:
    break;
  }
  return "?";
}

static int term_width(FILE *f) {
  struct winsize ws;
  if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
    return ws.ws_col;
  return 80;
}

static void clear_block(view *v) {
  if (v->lines_drawn > 0)
    fprintf(v->out, "\033[%dA\r\033[J", v->lines_drawn);
  else
    fprintf(v->out, "\r\033[J");
  v->lines_drawn = 0;
}

/* Prints a line of at most width visible columns; escapes do not count. */
static void put_line(view *v, const char *s, int width) {
  int cols = 0;
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    if (*p == '\033') {
      while (*p && *p != 'm')
        fputc(*p++, v->out);
      if (*p)
        fputc(*p++, v->out);
      continue;
    }
    if ((*p & 0xc0) != 0x80) {
      if (cols >= width - 1)
        break;
      cols++;
    }
    fputc(*p++, v->out);
  }
  fputs("\033[0m\n", v->out);
  v->lines_drawn++;
}

static void task_line(view *v, size_t i, sbuf *b) {
  const task_view *t = &v->t[i];
  char dur[32] = "";
  sbuf_printf(b, "  %s %-20s", symbol(t->state), v->s->tasks[i].name);
  if (t->state == TASK_RUNNING) {
    format_duration(clock_monotonic() - t->started, dur, sizeof(dur));
    if (t->fraction >= 0) {
      int fill = (int)(t->fraction * VIEW_BAR_WIDTH + 0.5);
      if (fill > VIEW_BAR_WIDTH)
        fill = VIEW_BAR_WIDTH;
      sbuf_puts(b, " [");
      for (int k = 0; k < VIEW_BAR_WIDTH; k++)
        sbuf_puts(b, k < fill ? "█" : "░");
      sbuf_printf(b, "] %3d%%", (int)(t->fraction * 100 + 0.5));
    }
    sbuf_printf(b, " %s", dur);
    if (t->max_attempts > 1)
      sbuf_printf(b, " (attempt %d/%d)", t->attempt, t->max_attempts);
    if (t->msg)
      sbuf_printf(b, "  %s", t->msg);
  } else if (t->state == TASK_QUEUED && t->waiting) {
    sbuf_printf(b, " waiting for %s", t->waiting);
  } else if (t->state == TASK_WAITING_APPROVAL) {
    sbuf_printf(b, " waiting for approval (dagrun approve RUN %s)",
                v->s->tasks[i].name);
  } else if (t->state == TASK_RETRY_WAIT) {
    sbuf_printf(b, " retrying (attempt %d/%d next)", t->attempt + 1,
                t->max_attempts);
  } else if (t->state == TASK_SUCCESS) {
    format_duration(t->took, dur, sizeof(dur));
    sbuf_printf(b, " %s", dur);
  } else if (t->state == TASK_CACHED) {
    /* Not run: say so, and where its outputs came from. */
    sbuf_printf(b, " cached from run %s",
                t->cached_from ? t->cached_from : "?");
  } else if (task_state_terminal(t->state)) {
    sbuf_printf(b, " %s", task_state_name(t->state));
  }
}

static void redraw(view *v) {
  if (v->mode != VIEW_TTY)
    return;
  int width = term_width(v->out);
  clear_block(v);
  char el[32];
  format_duration(clock_monotonic() - v->started, el, sizeof(el));
  size_t done = v->counts[TASK_SUCCESS] + v->counts[TASK_CACHED] +
                v->counts[TASK_FAILED] + v->counts[TASK_UPSTREAM_FAILED] +
                v->counts[TASK_CANCELLED] + v->counts[TASK_SKIPPED];
  sbuf b = {0};
  sbuf_printf(&b, "\033[1m%s\033[0m  %zu/%zu done  %zu running", v->s->dag,
              done, v->s->n_tasks, v->counts[TASK_RUNNING]);
  if (v->counts[TASK_FAILED])
    sbuf_printf(&b, "  \033[31m%zu failed\033[0m", v->counts[TASK_FAILED]);
  if (v->counts[TASK_RETRY_WAIT])
    sbuf_printf(&b, "  %zu retrying", v->counts[TASK_RETRY_WAIT]);
  sbuf_printf(&b, "  %s", el);
  put_line(v, b.s, width);
  int all = v->s->n_tasks <= VIEW_ALL_TASKS_MAX;
  for (size_t i = 0; i < v->s->n_tasks; i++) {
    task_state st = v->t[i].state;
    if (!all && st != TASK_RUNNING && st != TASK_RETRY_WAIT &&
        st != TASK_WAITING_APPROVAL)
      continue;
    b.n = 0;
    task_line(v, i, &b);
    put_line(v, b.s, width);
  }
  sbuf_free(&b);
  fflush(v->out);
  v->dirty = 0;
}

static void on_redraw(uv_timer_t *t) {
  view *v = t->data;
  size_t running = v->counts[TASK_RUNNING];
  /* Elapsed times move even when nothing else does. */
  if (v->dirty || running)
    redraw(v);
}

view *view_create(uv_loop_t *loop, view_mode mode, const spec *s, FILE *out) {
  view *v = xcalloc(1, sizeof(*v));
  v->loop = loop;
  v->mode = mode;
  v->s = s;
  v->out = out;
  v->t = xcalloc(s->n_tasks ? s->n_tasks : 1, sizeof(task_view));
  for (size_t i = 0; i < s->n_tasks; i++)
    v->t[i].fraction = -1;
  v->counts[TASK_WAITING] = s->n_tasks;
  uv_timer_init(loop, &v->redraw);
  v->redraw.data = v;
  return v;
}

void view_tasks_added(view *v, size_t first, size_t n) {
  v->t = xrealloc(v->t, (first + n) * sizeof(task_view));
  memset(v->t + first, 0, n * sizeof(task_view));
  for (size_t i = first; i < first + n; i++)
    v->t[i].fraction = -1;
  v->counts[TASK_WAITING] += n;
  v->dirty = 1;
}

static void stamp(view *v) {
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof(ts));
  fprintf(v->out, "%s  ", ts);
}

void view_run_started(view *v, const rundir *run, int max_parallel) {
  v->run = run;
  v->started = clock_monotonic();
  switch (v->mode) {
  case VIEW_TTY:
    fprintf(v->out, "run %s  (%zu tasks, up to %d at once)\n  %s\n", run->id,
            v->s->n_tasks, max_parallel, run->path);
    uv_timer_start(&v->redraw, on_redraw, VIEW_REDRAW_MS, VIEW_REDRAW_MS);
    /* Redrawing alone must not keep the loop (and so the run) alive. */
    uv_unref((uv_handle_t *)&v->redraw);
    v->timer_on = 1;
    redraw(v);
    break;
  case VIEW_PLAIN:
    stamp(v);
    fprintf(v->out, "run %s of %s started: %zu tasks, up to %d at once, in %s\n",
            run->id, v->s->dag, v->s->n_tasks, max_parallel, run->path);
    break;
  case VIEW_JSON: {
    cJSON *j = cJSON_CreateObject();
    char ts[40];
    format_utc(clock_wall(), 1, ts, sizeof(ts));
    cJSON_AddStringToObject(j, "time", ts);
    cJSON_AddStringToObject(j, "event", "run");
    cJSON_AddStringToObject(j, "state", "running");
    cJSON_AddStringToObject(j, "dag", v->s->dag);
    cJSON_AddStringToObject(j, "run_id", run->id);
    cJSON_AddStringToObject(j, "dir", run->path);
    cJSON_AddNumberToObject(j, "tasks", (double)v->s->n_tasks);
    char *line = cJSON_PrintUnformatted(j);
    fprintf(v->out, "%s\n", line);
    cJSON_free(line);
    cJSON_Delete(j);
    break;
  }
  case VIEW_QUIET:
    break;
  }
  fflush(v->out);
}

static void plain_event(view *v, const sched_event *e) {
  const char *name = v->s->tasks[e->task].name;
  char dur[32];
  format_duration(e->duration_s, dur, sizeof(dur));
  switch (e->state) {
  case TASK_WAITING:
  case TASK_QUEUED:
    return;
  case TASK_RUNNING:
    stamp(v);
    if (e->max_attempts > 1)
      fprintf(v->out, "%s: running (attempt %d/%d)\n", name, e->attempt,
              e->max_attempts);
    else
      fprintf(v->out, "%s: running\n", name);
    break;
  case TASK_WAITING_APPROVAL:
    stamp(v);
    fprintf(v->out, "%s: waiting for approval%s%s (dagrun approve %s %s)\n",
            name, e->reason ? ": " : "", e->reason ? e->reason : "",
            v->run && v->run->id ? v->run->id : "RUN", name);
    /* A person waits on this line: it must not sit in a buffer. */
    fflush(v->out);
    break;
  case TASK_SUCCESS:
    stamp(v);
    if (v->s->tasks[e->task].item_index == SPEC_ITEM_PENDING)
      /* A map's placeholder ran nothing: it expanded. */
      fprintf(v->out, "%s: mapped into %zu instances\n", name,
              v->s->maps[v->s->tasks[e->task].map].n);
    else
      fprintf(v->out, "%s: success in %s\n", name, dur);
    break;
  case TASK_CACHED:
    stamp(v);
    fprintf(v->out, "%s: cached (from run %s)\n", name,
            e->cached_from ? e->cached_from : "?");
    break;
  case TASK_RETRY_WAIT: {
    char in[32];
    format_duration(e->retry_in_s, in, sizeof(in));
    stamp(v);
    fprintf(v->out, "%s: attempt %d/%d failed (%s) after %s; retrying in %s\n",
            name, e->attempt, e->max_attempts, e->reason ? e->reason : "?",
            dur, in);
    break;
  }
  case TASK_FAILED:
    stamp(v);
    if (e->attempt > 0)
      fprintf(v->out, "%s: failed (%s) after %s, attempt %d/%d\n", name,
              e->reason ? e->reason : "?", dur, e->attempt, e->max_attempts);
    else
      fprintf(v->out, "%s: failed (%s)\n", name, e->reason ? e->reason : "?");
    break;
  case TASK_UPSTREAM_FAILED:
  case TASK_CANCELLED:
  case TASK_SKIPPED:
    stamp(v);
    fprintf(v->out, "%s: %s (%s)\n", name, task_state_name(e->state),
            e->reason ? e->reason : "-");
    break;
  case TASK_STATE_COUNT:
    break;
  }
}

static void json_event(view *v, const sched_event *e) {
  cJSON *j = cJSON_CreateObject();
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof(ts));
  cJSON_AddStringToObject(j, "time", ts);
  cJSON_AddStringToObject(j, "event", "task");
  cJSON_AddStringToObject(j, "task", v->s->tasks[e->task].name);
  cJSON_AddStringToObject(j, "state", task_state_name(e->state));
  cJSON_AddNumberToObject(j, "attempt", e->attempt);
  cJSON_AddNumberToObject(j, "max_attempts", e->max_attempts);
  if (e->exit_code >= 0)
    cJSON_AddNumberToObject(j, "exit_code", e->exit_code);
  if (e->state == TASK_SUCCESS || e->state == TASK_FAILED ||
      e->state == TASK_RETRY_WAIT)
    cJSON_AddNumberToObject(j, "duration_s", e->duration_s);
  if (e->state == TASK_RETRY_WAIT)
    cJSON_AddNumberToObject(j, "retry_in_s", e->retry_in_s);
  if (e->reason)
    cJSON_AddStringToObject(j, "reason", e->reason);
  if (e->cached_from)
    cJSON_AddStringToObject(j, "cached_from", e->cached_from);
  char *line = cJSON_PrintUnformatted(j);
  fprintf(v->out, "%s\n", line);
  cJSON_free(line);
  cJSON_Delete(j);
}

/* e as it came, and shown: e with its reason as the console shows it. */
static void view_event(view *v, const sched_event *e,
                       const sched_event *shown) {
  task_view *t = &v->t[e->task];
  v->counts[t->state]--;
  v->counts[e->state]++;
  t->state = e->state;
  t->attempt = e->attempt;
  t->max_attempts = e->max_attempts;
  if (e->state == TASK_SUCCESS || e->state == TASK_FAILED)
    t->took = e->duration_s;
  if (e->state == TASK_FAILED && e->reason) {
    free(t->reason);
    t->reason = xstrdup(shown->reason);
  }
  if (e->state != TASK_QUEUED) {
    free(t->waiting);
    t->waiting = NULL;
  }
  if (e->state == TASK_CACHED && e->cached_from) {
    free(t->cached_from);
    t->cached_from = xstrdup(e->cached_from);
  }
  if (e->state == TASK_RUNNING) {
    t->started = clock_monotonic();
    t->fraction = -1;
    free(t->msg);
    t->msg = NULL;
  }
  switch (v->mode) {
  case VIEW_TTY:
    /* Failures stay on screen above the live block. */
    if (e->state == TASK_FAILED || e->state == TASK_RETRY_WAIT ||
        e->state == TASK_WAITING_APPROVAL) {
      clear_block(v);
      plain_event(v, shown);
    }
    v->dirty = 1;
    break;
  case VIEW_PLAIN:
    plain_event(v, shown);
    break;
  case VIEW_JSON:
    if (e->state != TASK_WAITING)
      json_event(v, e);
    break;
  case VIEW_QUIET:
    break;
  }
  /* Each line as it happens, also into a pipe or a file (`>> nightly.log`,
   * `| tee`, a program reading --events json), where stdio would hold it
   * until the run ends, or lose it with a killed dagrun. */
  if (v->mode == VIEW_PLAIN || v->mode == VIEW_JSON)
    fflush(v->out);
}

void view_task_event(view *v, const sched_event *e) {
  /* Why a task failed quotes what it was given (a param, a path, a
   * plugin's message): on the console its control bytes are shown, not
   * obeyed, so that it cannot clear the screen or forge a line. The JSON
   * events keep it as it is (JSON escapes it). */
  char *why = xstrdup_shown(e->reason);
  sched_event shown = *e;
  shown.reason = why;
  view_event(v, e, &shown);
  free(why);
}

void view_task_progress(view *v, size_t task, double fraction,
                        const char *msg) {
  task_view *t = &v->t[task];
  t->fraction = fraction < 0 ? 0 : fraction > 1 ? 1 : fraction;
  free(t->msg);
  /* The plugin's words: put_line passes its own color escapes through,
   * so any other must be shown, not obeyed. */
  t->msg = xstrdup_shown(msg);
  v->dirty = 1;
}

void view_task_log(view *v, size_t task, int level, const char *msg) {
  /* Warnings and errors reach the console; everything is in the log. */
  if (level < 2 || v->mode == VIEW_JSON || v->mode == VIEW_QUIET)
    return;
  if (v->mode == VIEW_TTY)
    clear_block(v);
  stamp(v);
  char *shown = xstrdup_shown(msg);
  fprintf(v->out, "%s: %s: %s\n", v->s->tasks[task].name,
          level >= 3 ? "ERROR" : "WARN", shown);
  free(shown);
  v->dirty = 1;
}

void view_task_waiting(view *v, size_t task, const char *what) {
  task_view *t = &v->t[task];
  free(t->waiting);
  t->waiting = xstrdup(what);
  v->dirty = 1;
  const char *name = v->s->tasks[task].name;
  if (v->mode == VIEW_PLAIN) {
    stamp(v);
    fprintf(v->out, "%s: waiting for %s\n", name, what);
    fflush(v->out);
  } else if (v->mode == VIEW_JSON) {
    cJSON *j = cJSON_CreateObject();
    char ts[40];
    format_utc(clock_wall(), 1, ts, sizeof(ts));
    cJSON_AddStringToObject(j, "time", ts);
    cJSON_AddStringToObject(j, "event", "task");
    cJSON_AddStringToObject(j, "task", name);
    cJSON_AddStringToObject(j, "state", "queued");
    cJSON_AddStringToObject(j, "waiting", what);
    char *line = cJSON_PrintUnformatted(j);
    fprintf(v->out, "%s\n", line);
    fflush(v->out);
    cJSON_free(line);
    cJSON_Delete(j);
  }
}

void view_notice(view *v, const char *msg) {
  if (v->mode == VIEW_JSON)
    return;
  if (v->mode == VIEW_TTY)
    clear_block(v);
  stamp(v);
  fprintf(v->out, "%s\n", msg);
  fflush(v->out);
  v->dirty = 1;
}

void view_run_finished(view *v, const char *state, const sched *s) {
  if (v->timer_on) {
    uv_timer_stop(&v->redraw);
    v->timer_on = 0;
  }
  if (v->mode == VIEW_TTY)
    redraw(v);
  char el[32];
  format_duration(clock_monotonic() - v->started, el, sizeof(el));
  if (v->mode == VIEW_JSON) {
    cJSON *j = cJSON_CreateObject();
    char ts[40];
    format_utc(clock_wall(), 1, ts, sizeof(ts));
    cJSON_AddStringToObject(j, "time", ts);
    cJSON_AddStringToObject(j, "event", "run");
    cJSON_AddStringToObject(j, "state", state);
    cJSON_AddStringToObject(j, "run_id", v->run->id);
    cJSON_AddNumberToObject(j, "duration_s", clock_monotonic() - v->started);
    cJSON *counts = cJSON_AddObjectToObject(j, "counts");
    for (int k = TASK_SUCCESS; k < TASK_STATE_COUNT; k++)
      cJSON_AddNumberToObject(counts, task_state_name((task_state)k),
                              (double)v->counts[k]);
    char *line = cJSON_PrintUnformatted(j);
    fprintf(v->out, "%s\n", line);
    cJSON_free(line);
    cJSON_Delete(j);
    fflush(v->out);
    return;
  }
  fprintf(v->out, "run %s %s in %s: %zu succeeded", v->run->id, state, el,
          v->counts[TASK_SUCCESS]);
  if (v->counts[TASK_CACHED])
    fprintf(v->out, ", %zu cached", v->counts[TASK_CACHED]);
  if (v->counts[TASK_FAILED])
    fprintf(v->out, ", %zu failed", v->counts[TASK_FAILED]);
  if (v->counts[TASK_UPSTREAM_FAILED])
    fprintf(v->out, ", %zu upstream_failed", v->counts[TASK_UPSTREAM_FAILED]);
  if (v->counts[TASK_CANCELLED])
    fprintf(v->out, ", %zu cancelled", v->counts[TASK_CANCELLED]);
  if (v->counts[TASK_SKIPPED])
    fprintf(v->out, ", %zu skipped", v->counts[TASK_SKIPPED]);
  fputc('\n', v->out);
  /* Where to look next: each failed task's reason and last log. */
  for (size_t i = 0; i < v->s->n_tasks; i++) {
    if (sched_task_state(s, i) != TASK_FAILED || v->t[i].attempt < 1)
      continue;
    char *dir = rundir_attempt(v->run, v->s->tasks[i].name, v->t[i].attempt);
    char *log = path_join(dir, "log");
    fprintf(v->out, "  %s failed: %s\n", v->s->tasks[i].name,
            v->t[i].reason ? v->t[i].reason : "?");
    if (access(log, F_OK) == 0)
      fprintf(v->out, "    log: %s\n", log);
    free(log);
    free(dir);
  }
  fflush(v->out);
}

static void on_view_closed(uv_handle_t *h) {
  view *v = h->data;
  for (size_t i = 0; i < v->s->n_tasks; i++) {
    free(v->t[i].msg);
    free(v->t[i].reason);
    free(v->t[i].waiting);
    free(v->t[i].cached_from);
  }
  free(v->t);
  free(v);
}

void view_destroy(view *v) {
  if (!v)
    return;
  uv_close((uv_handle_t *)&v->redraw, on_view_closed);
}
