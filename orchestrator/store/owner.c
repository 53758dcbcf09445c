/* owner: see owner.h. */
#include "owner.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "lib/clock.h"
#include "store.h"

static owner here;
static char here_host[256], here_boot[64], here_pidns[64];
static pthread_once_t here_once = PTHREAD_ONCE_INIT;

/* The first line of path into buf ("" when it cannot be read). */
static void read_line(const char *path, char *buf, size_t n) {
  buf[0] = '\0';
  FILE *f = fopen(path, "re");
  if (!f)
    return;
  if (!fgets(buf, (int)n, f))
    buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
}

static void here_init(void) {
  here.pid = (int)getpid();
  here.start = proc_start_time(here.pid);
  if (gethostname(here_host, sizeof here_host) != 0)
    here_host[0] = '\0';
  here_host[sizeof here_host - 1] = '\0';
  read_line("/proc/sys/kernel/random/boot_id", here_boot, sizeof here_boot);
  ssize_t k = readlink("/proc/self/ns/pid", here_pidns, sizeof here_pidns - 1);
  here_pidns[k > 0 ? k : 0] = '\0';
  here.host = here_host;
  here.boot = here_boot;
  here.pidns = here_pidns;
}

const owner *owner_here(void) {
  pthread_once(&here_once, here_init);
  return &here;
}

static int blank(const char *z) { return !z || !*z; }

static int same(const char *a, const char *b) {
  return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Whether o's pid means the same process here as where it was recorded.
 * 1: judge it; 0: not visible from here; -1: recorded before this host's
 * last boot (same host name, another boot id), so certainly gone. */
static int visible(const owner *o) {
  const owner *me = owner_here();
  if (blank(o->boot) && blank(o->pidns))
    return 1; /* recorded before schema 9: judged here, as then */
  if (same(o->boot, me->boot) && same(o->pidns, me->pidns))
    return 1;
  if (!blank(o->boot) && !blank(me->boot) && !same(o->boot, me->boot) &&
      !blank(o->host) && same(o->host, me->host))
    return -1;
  return 0;
}

owner_state owner_judge(const owner *o) {
  if (o->pid <= 0 || o->start <= 0)
    return OWNER_GONE;
  int v = visible(o);
  if (v <= 0 && o->beat > 0)
    return clock_wall() - o->beat > OWNER_BEAT_STALE_S ? OWNER_GONE
                                                       : OWNER_ELSEWHERE;
  if (v < 0)
    return OWNER_GONE;
  if (v == 0)
    return OWNER_ELSEWHERE;
  if (proc_alive(o->pid, o->start))
    return OWNER_ALIVE;
  if (o->guard > 0 && o->guard_start > 0 &&
      proc_alive(o->guard, o->guard_start))
    return OWNER_STOPPING;
  return OWNER_GONE;
}

void owner_of_run(const cJSON *run, owner *o) {
  o->pid = (int)store_num(run, "orch_pid", 0);
  o->start = (long long)store_num(run, "orch_start", 0);
  o->host = store_str(run, "orch_host", NULL);
  o->boot = store_str(run, "orch_boot", NULL);
  o->pidns = store_str(run, "orch_pidns", NULL);
  o->guard = (int)store_num(run, "orch_guard", 0);
  o->guard_start = (long long)store_num(run, "orch_guard_start", 0);
  o->beat = store_num(run, "orch_beat", 0);
}

owner_state owner_of_run_judge(const cJSON *run, int *pid) {
  owner o;
  owner_of_run(run, &o);
  *pid = o.pid > 0 ? o.pid : 0;
  return owner_judge(&o);
}

void owner_where(const owner *o, char *buf, size_t n) {
  if (blank(o->host))
    snprintf(buf, n, "on another host or in another PID namespace");
  else if (same(o->host, owner_here()->host))
    snprintf(buf, n, "in another PID namespace of host %s", o->host);
  else
    snprintf(buf, n, "on host %s", o->host);
}
