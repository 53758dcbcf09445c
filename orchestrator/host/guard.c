/* guard: see guard.h. */
#include "guard.h"

#include "base/util.h"
#include "lib/clock.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The groups listed: a small unordered set (a run has at most as many as
 * it runs tasks at once). */
typedef struct groups {
  long *ids;
  size_t n, cap;
} groups;

static void groups_add(groups *g, long id) {
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 16;
    g->ids = xrealloc(g->ids, g->cap * sizeof(long));
  }
  g->ids[g->n++] = id;
}

static void groups_remove(groups *g, long id) {
  for (size_t i = 0; i < g->n; i++) {
    if (g->ids[i] == id) {
      g->ids[i] = g->ids[--g->n];
      return;
    }
  }
}

/* One line of dagrun's: "+ PGID", "- PGID", "~ MS" (the longest goes to
 * *grace_ms) or "." (returns 1); anything else is ignored. */
static int apply(groups *g, long long *grace_ms, const char *line) {
  char *end;
  if (strcmp(line, ".") == 0)
    return 1;
  if (line[0] == '~' && line[1] == ' ') {
    long long ms = strtoll(line + 2, &end, 10);
    if (!*end && ms > *grace_ms)
      *grace_ms = ms;
    return 0;
  }
  if ((line[0] != '+' && line[0] != '-') || line[1] != ' ')
    return 0;
  long id = strtol(line + 2, &end, 10);
  if (id <= 1 || *end)
    return 0;
  if (line[0] == '+')
    groups_add(g, id);
  else
    groups_remove(g, id);
  return 0;
}

/* Signals every listed group, and its leader's id as a process (one
 * listed by add_run_processes may not lead a group); drops those that
 * are gone. */
static void signal_all(groups *g, int sig) {
  for (size_t i = 0; i < g->n;) {
    int group = kill((pid_t)-g->ids[i], sig);
    int proc = kill((pid_t)g->ids[i], sig);
    if (group != 0 && proc != 0 && errno == ESRCH)
      g->ids[i] = g->ids[--g->n];
    else
      i++;
  }
}

/* Lists every process of the run (DAGRUN_RUN_DIR=run_dir in its
 * environment), by its own pid: signal_all reaches its group, and it. */
static void add_run_processes(groups *g, const char *run_dir) {
  DIR *d = opendir("/proc");
  if (!d)
    return;
  char *entry = xasprintf("DAGRUN_RUN_DIR=%s", run_dir);
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (!*end && pid > 1 && pid != getpid() && proc_has_env(pid, entry))
      groups_add(g, pid);
  }
  closedir(d);
  free(entry);
}

/* Waits until every listed process is gone, or secs passed. */
static void wait_gone(groups *g, double secs) {
  double deadline = clock_monotonic() + secs;
  while (g->n > 0 && clock_monotonic() < deadline) {
    struct timespec nap = {0, 50 * 1000 * 1000};
    nanosleep(&nap, NULL);
    signal_all(g, 0);
  }
}

/* dagrun is gone: its attempts stop as a worker's would, within the
 * longest kill_grace of the run's attempts (grace_ms; < 0: none said). */
static void stop_orphans(groups *g, long long grace_ms, const char *run_dir) {
  if (run_dir)
    add_run_processes(g, run_dir);
  if (g->n == 0)
    return;
  signal_all(g, SIGTERM);
  wait_gone(g, grace_ms >= 0 ? grace_ms / 1000.0 : GUARD_GRACE_S);
  signal_all(g, SIGKILL);
  /* The run store holds the run's pools while this process lives
   * (store/owner.h): it exits once the killed are gone, not before. */
  wait_gone(g, GUARD_KILL_WAIT_S);
}

int guard_main(const char *run_dir) {
  /* The terminal's signals are dagrun's to act on, not the guard's: it
   * ends when dagrun's end of the pipe closes. */
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  groups g = {0};
  long long grace_ms = -1;
  char buf[4096], line[64];
  size_t n_line = 0;
  int ended = 0;
  while (!ended) {
    ssize_t n = read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (n_line < sizeof line - 1)
          line[n_line++] = buf[i];
        continue;
      }
      line[n_line] = '\0';
      ended |= apply(&g, &grace_ms, line);
      n_line = 0;
    }
  }
  if (!ended)
    stop_orphans(&g, grace_ms, run_dir);
  free(g.ids);
  return 0;
}
