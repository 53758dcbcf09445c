/* orphans: see orphans.h. */
#include "orphans.h"

#include "base/util.h"
#include "lib/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* An orphan being stopped. */
typedef struct stopping {
  pid_t pid;
  double deadline; /* monotonic: SIGKILL then */
  int killed;
} stopping;

struct orphans {
  uv_loop_t *loop;
  orphans_owner owner;
  int subreaper; /* the kernel took PR_SET_CHILD_SUBREAPER */
  uv_timer_t *timer; /* while any is being stopped; NULL when none */
  stopping *list;
  size_t n, cap;
};

static const char marker[] = "DAGRUN_ATTEMPT_DIR=";

/* A /proc file of pid, whole (up to 1 MiB), NUL-terminated; NULL when it
 * cannot be read (the process is gone, or not ours to read). */
static char *proc_file(pid_t pid, const char *name, size_t *n) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  size_t cap = 4096, len = 0;
  char *buf = xmalloc(cap + 1);
  ssize_t r;
  while ((r = read(fd, buf + len, cap - len)) > 0) {
    len += (size_t)r;
    if (len == cap && cap < (1u << 20))
      buf = xrealloc(buf, (cap *= 2) + 1);
    else if (len == cap)
      break;
  }
  close(fd);
  buf[len] = '\0';
  *n = len;
  return buf;
}

/* The attempt directory in pid's environment (caller frees), or NULL. */
static char *attempt_of(pid_t pid) {
  size_t n = 0;
  char *env = proc_file(pid, "environ", &n);
  char *dir = NULL;
  for (size_t at = 0; env && at < n && !dir; at += strlen(env + at) + 1)
    if (strncmp(env + at, marker, sizeof marker - 1) == 0)
      dir = xstrdup(env + at + sizeof marker - 1);
  free(env);
  return dir;
}

/* "pid N (its command line)" for the log. */
static char *describe(pid_t pid) {
  size_t n = 0;
  char *cmd = proc_file(pid, "cmdline", &n);
  for (size_t i = 0; cmd && i + 1 < n; i++)
    if (cmd[i] == '\0')
      cmd[i] = ' ';
  char *s = xasprintf("pid %d (%.200s)", (int)pid, cmd && *cmd ? cmd : "?");
  free(cmd);
  return s;
}

/* Says in the attempt's log (or on stderr, for one of no attempt) what
 * was stopped. */
static void report(pid_t pid, const char *dir) {
  char *who = describe(pid);
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof ts);
  char *line = xasprintf("%s WARN dagrun: %s was left running by this "
                         "attempt outside its process group; stopping it\n",
                         ts, who);
  char *log = dir ? xasprintf("%s/log", dir) : NULL;
  int fd = log ? open(log, O_WRONLY | O_APPEND | O_CLOEXEC) : -1;
  if (fd >= 0) {
    (void)!write(fd, line, strlen(line));
    close(fd);
  } else {
    fprintf(stderr, "dagrun: %s was left running by an attempt; stopping it\n",
            who);
  }
  free(log);
  free(line);
  free(who);
}

/* Signals an orphan and, when it leads one, its process group (what it
 * started with it). */
static void signal_orphan(pid_t pid, int sig) {
  if (getpgid(pid) == pid)
    kill(-pid, sig);
  kill(pid, sig);
}

static int tracked(const orphans *o, pid_t pid) {
  for (size_t i = 0; i < o->n; i++)
    if (o->list[i].pid == pid)
      return 1;
  return 0;
}

static void on_tick(uv_timer_t *t);

static void track(orphans *o, pid_t pid, const char *dir) {
  report(pid, dir);
  signal_orphan(pid, SIGTERM);
  if (o->n == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 8;
    o->list = xrealloc(o->list, o->cap * sizeof(stopping));
  }
  o->list[o->n++] = (stopping){pid, clock_monotonic() + ORPHANS_GRACE_S, 0};
  if (o->loop && !o->timer) {
    o->timer = xcalloc(1, sizeof(uv_timer_t));
    uv_timer_init(o->loop, o->timer);
    o->timer->data = o;
    uv_timer_start(o->timer, on_tick, ORPHANS_POLL_MS, ORPHANS_POLL_MS);
  }
}

/* Whether pid, a child of dagrun, is a zombie: reaped here. */
static int reaped(pid_t pid) {
  int st;
  return waitpid(pid, &st, WNOHANG) == pid;
}

/* One child of dagrun's that the executor did not start. */
static void look_at(orphans *o, pid_t pid) {
  if (tracked(o, pid) || reaped(pid))
    return;
  char *dir = attempt_of(pid);
  int keep = dir ? o->owner.running(o->owner.ud, dir)
                 : o->owner.any_running(o->owner.ud);
  if (!keep)
    track(o, pid, dir);
  free(dir);
}

void orphans_sweep(orphans *o) {
  if (!o || !o->subreaper)
    return;
  /* Children are listed by the thread that is their parent: dagrun
   * spawns from its loop's thread, the main one, and the kernel gives
   * orphans to the main thread too. */
  char name[64];
  snprintf(name, sizeof name, "task/%d/children", (int)getpid());
  size_t n = 0;
  char *list = proc_file(getpid(), name, &n);
  for (char *p = list, *end; p && *p; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p)
      break;
    if (pid > 1 && !o->owner.started(o->owner.ud, (pid_t)pid))
      look_at(o, (pid_t)pid);
  }
  free(list);
}

/* Reaps the stopped and kills those past their grace; 1 when none is
 * left. */
static int step(orphans *o) {
  double now = clock_monotonic();
  for (size_t i = 0; i < o->n;) {
    stopping *s = &o->list[i];
    if (reaped(s->pid) || (kill(s->pid, 0) != 0 && errno == ESRCH)) {
      *s = o->list[--o->n];
      continue;
    }
    if (!s->killed && now >= s->deadline) {
      signal_orphan(s->pid, SIGKILL);
      s->killed = 1;
    }
    i++;
  }
  return o->n == 0;
}

static void on_timer_closed(uv_handle_t *h) { free(h); }

static void on_tick(uv_timer_t *t) {
  orphans *o = t->data;
  orphans_sweep(o); /* those whose parent was stopped meanwhile */
  if (step(o)) {
    uv_close((uv_handle_t *)o->timer, on_timer_closed);
    o->timer = NULL;
  }
}

orphans *orphans_create(uv_loop_t *loop, const orphans_owner *owner) {
  orphans *o = xcalloc(1, sizeof(*o));
  o->loop = loop;
  o->owner = *owner;
  o->subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  if (!o->subreaper)
    fprintf(stderr, "dagrun: cannot become the subreaper of its tasks (%s): "
                    "a process a task starts outside its process group may "
                    "outlive the task\n",
            strerror(errno));
  return o;
}

void orphans_finish(orphans *o) {
  if (!o)
    return;
  if (o->timer) {
    uv_close((uv_handle_t *)o->timer, on_timer_closed);
    o->timer = NULL;
  }
  o->loop = NULL; /* from here on, this function waits itself */
  double until = clock_monotonic() + 2 * ORPHANS_GRACE_S;
  orphans_sweep(o);
  while (!step(o) && clock_monotonic() < until) {
    struct timespec nap = {0, ORPHANS_POLL_MS * 1000000L};
    nanosleep(&nap, NULL);
    orphans_sweep(o);
  }
  free(o->list);
  free(o);
}
