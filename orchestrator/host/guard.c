/* guard: see guard.h. */
#include "guard.h"

#include "base/util.h"
#include "lib/clock.h"

#include <errno.h>
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

/* One line of dagrun's: "+ PGID" or "- PGID"; anything else is ignored. */
static void apply(groups *g, const char *line) {
  char *end;
  if ((line[0] != '+' && line[0] != '-') || line[1] != ' ')
    return;
  long id = strtol(line + 2, &end, 10);
  if (id <= 1 || *end)
    return;
  if (line[0] == '+')
    groups_add(g, id);
  else
    groups_remove(g, id);
}

/* Signals every listed group; drops those that are gone. */
static void signal_all(groups *g, int sig) {
  for (size_t i = 0; i < g->n;) {
    if (kill((pid_t)-g->ids[i], sig) != 0 && errno == ESRCH)
      g->ids[i] = g->ids[--g->n];
    else
      i++;
  }
}

/* dagrun is gone: its attempts stop as a worker's would. */
static void stop_orphans(groups *g) {
  if (g->n == 0)
    return;
  signal_all(g, SIGTERM);
  double deadline = clock_monotonic() + GUARD_GRACE_S;
  while (g->n > 0 && clock_monotonic() < deadline) {
    struct timespec nap = {0, 50 * 1000 * 1000};
    nanosleep(&nap, NULL);
    signal_all(g, 0);
  }
  signal_all(g, SIGKILL);
}

int guard_main(void) {
  /* The terminal's signals are dagrun's to act on, not the guard's: it
   * ends when dagrun's end of the pipe closes. */
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  groups g = {0};
  char buf[4096], line[64];
  size_t n_line = 0;
  for (;;) {
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
      apply(&g, line);
      n_line = 0;
    }
  }
  stop_orphans(&g);
  free(g.ids);
  return 0;
}
