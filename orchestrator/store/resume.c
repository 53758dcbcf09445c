#include "resume.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "host/guard.h"
#include "lib/clock.h"
#include "lib/fileio.h"

/* How long an orphaned worker's group gets after SIGKILL to be gone
 * (after SIGTERM: its task's kill_grace, as dagrun alive gives it). */
#define ORPHAN_KILL_WAIT_S 5.0

cJSON *resume_runs_going(store *st, const char *dag, char *err, size_t errlen) {
  static const char *const active[] = {"running", "queued"};
  cJSON *going = cJSON_CreateArray();
  for (int k = 0; k < 2; k++) {
    cJSON *runs = store_runs(st, dag, active[k], 0, err, errlen);
    if (!runs) {
      cJSON_Delete(going);
      return NULL;
    }
    cJSON *r = runs->child;
    while (r) {
      cJSON *next = r->next;
      int pid;
      owner_state w = owner_of_run_judge(r, &pid);
      /* One elsewhere may be going: not started beside on a guess. */
      if (w == OWNER_ALIVE || w == OWNER_ELSEWHERE)
        cJSON_AddItemToArray(going, cJSON_DetachItemViaPointer(runs, r));
      r = next;
    }
    cJSON_Delete(runs);
  }
  return going;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Waits up to secs for process group pgid to be empty. */
static int group_gone(int pgid, double secs) {
  double end = clock_monotonic() + secs;
  for (;;) {
    if (kill(-pgid, 0) != 0 && errno == ESRCH)
      return 1;
    if (clock_monotonic() >= end)
      return 0;
    nap_ms(50);
  }
}

/* Whether process pid leads its process group and has entry (a full
 * "NAME=value") in its environment: an attempt's command run without a
 * worker (run/execdirect.h), recognised by its DAGRUN_ATTEMPT_DIR. */
static int leads_with_env(long pid, const char *entry) {
  return getpgid((pid_t)pid) == (pid_t)pid && proc_has_env(pid, entry);
}

/* The process running attempt_json's attempt, for an attempt whose pid
 * was never recorded (dagrun died between the spawn and that commit):
 * its worker ("dagrun __worker PATH", either program), or its command
 * when it ran without one; 0 when there is none. */
static int find_worker(const char *attempt_json) {
  DIR *d = opendir("/proc");
  if (!d)
    return 0;
  char *dir = path_dirname(attempt_json);
  char *marker = xasprintf("DAGRUN_ATTEMPT_DIR=%s", dir);
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0)
      continue;
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    FILE *f = fopen(path, "re");
    if (!f)
      continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* argv[0] NUL argv[1] NUL argv[2] NUL */
    size_t a0 = strlen(buf);
    const char *a2 = buf + a0 + 1 + sizeof("__worker");
    if (a0 + 1 < n && strcmp(buf + a0 + 1, "__worker") == 0 &&
        a2 < buf + n && strcmp(a2, attempt_json) == 0)
      found = (int)pid;
    else if (leads_with_env(pid, marker))
      found = (int)pid;
  }
  closedir(d);
  free(marker);
  free(dir);
  return found;
}

/* Ends an orphaned attempt (n of task, whose kill_grace is grace_s) of
 * run_id: stops its worker if it lives on and says why in a new string
 * (caller frees). An owner
 * elsewhere (resumed with --force) ran its workers where their pids mean
 * nothing here: they are not looked for. */
static char *orphan(const cJSON *a, const owner *o, const char *run_id,
                    const char *task, double grace_s) {
  int pid = (int)store_num(a, "pid", 0);
  long long start = (long long)store_num(a, "pid_start", 0);
  char who[48] = "its dagrun";
  if (o->pid > 0)
    snprintf(who, sizeof who, "its dagrun (pid %d)", o->pid);
  if (owner_judge(o) == OWNER_ELSEWHERE) {
    char where[320];
    owner_where(o, where, sizeof where);
    return xasprintf("orphaned: %s ran %s; its worker could not be "
                     "checked from here",
                     who, where);
  }
  if (pid <= 0) {
    const char *log = store_str(a, "log", NULL);
    char *dir = log ? path_dirname(log) : NULL;
    char *json = dir ? path_join(dir, "attempt.json") : NULL;
    pid = json ? find_worker(json) : 0;
    start = proc_start_time(pid);
    free(json);
    free(dir);
    if (pid <= 0 || start <= 0)
      return xasprintf("orphaned: %s died before the worker's pid was "
                       "recorded; no worker left",
                       who);
  }
  if (start <= 0 || !proc_alive(pid, start))
    return xasprintf("orphaned: %s died; worker (pid %d) gone", who, pid);
  /* The wait can take seconds (a command that ignores SIGTERM): said, so
   * that a silent resume is not taken for a hung one. */
  fprintf(stderr,
          "dagrun: run %s: stopping task %s's attempt %d (worker pid %d), "
          "which %s left running; waiting up to %.0fs for it to end\n",
          run_id, task, (int)store_num(a, "n", 0), pid, who,
          grace_s + ORPHAN_KILL_WAIT_S);
  /* The worker leads its own process group (executor.c). */
  kill(-pid, SIGTERM);
  if (group_gone(pid, grace_s))
    return xasprintf("orphaned: %s died; worker (pid %d) was still running "
                     "and was stopped",
                     who, pid);
  kill(-pid, SIGKILL);
  group_gone(pid, ORPHAN_KILL_WAIT_S);
  return xasprintf("orphaned: %s died; worker (pid %d) was still running "
                   "and was killed",
                   who, pid);
}

/* Waits for the guard of o, a dead dagrun (host/guard.h), to end: it
 * stops what the run's attempts left outside their process groups, and
 * the run goes on in the same directory. It ends once they are gone, and
 * within the longest kill_grace of the run's tasks (grace_s) in any case. */
static void old_guard_wait(const owner *o, const char *run_id, double grace_s) {
  if (owner_judge(o) != OWNER_STOPPING)
    return;
  double most = grace_s + GUARD_KILL_WAIT_S + 1;
  fprintf(stderr,
          "dagrun: run %s: waiting for the guard (pid %d) of its dead dagrun "
          "to stop what its attempts left running (at most %.0fs)\n",
          run_id, o->guard, most);
  double end = clock_monotonic() + most;
  while (proc_alive(o->guard, o->guard_start) && clock_monotonic() < end)
    nap_ms(50);
}

/* Outputs of a succeeded task: the recorded ones, else outputs.json in
 * its directory (attached to t so that they live as long as run). */
static const cJSON *task_outputs(cJSON *t, const char *run_dir,
                                 const char *name) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "outputs");
  if (cJSON_IsObject(o))
    return o;
  char *path = xasprintf("%s/%s/outputs.json", run_dir, name);
  char *text = NULL;
  size_t n = 0;
  cJSON *j = NULL;
  if (fileio_read_file(path, &text, &n) == 0)
    j = cJSON_ParseWithLength(text, n);
  free(text);
  free(path);
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return NULL;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(t, "outputs");
  cJSON_AddItemToObject(t, "outputs", j);
  return j;
}

static cJSON *find_task(cJSON *tasks, const char *name) {
  cJSON *t;
  cJSON_ArrayForEach(t, tasks) {
    const char *n = store_str(t, "name", NULL);
    if (n && strcmp(n, name) == 0)
      return t;
  }
  return NULL;
}

sched_preset *resume_prepare(store *st, cJSON *run, const spec *sp, char *err,
                             size_t errlen) {
  cJSON *tasks = cJSON_GetObjectItemCaseSensitive(run, "tasks");
  const char *run_id = store_str(run, "id", NULL);
  const char *run_dir = store_str(run, "run_dir", NULL);
  int n_rec = cJSON_GetArraySize(tasks);
  if (!run_id || !run_dir) {
    snprintf(err, errlen, "the run's record has no id or run directory");
    return NULL;
  }
  for (size_t i = 0; i < sp->n_tasks; i++)
    if (!find_task(tasks, sp->tasks[i].name)) {
      snprintf(err, errlen,
               "task '%s' of %s is not in run %s: the DAG file changed "
               "since the run started",
               sp->tasks[i].name, sp->path, run_id);
      return NULL;
    }
  if ((size_t)n_rec != sp->n_tasks) {
    snprintf(err, errlen,
             "run %s has %d tasks, %s has %zu: the DAG file changed since "
             "the run started",
             run_id, n_rec, sp->path, sp->n_tasks);
    return NULL;
  }
  owner o;
  owner_of_run(run, &o);
  sched_preset *pre = xcalloc(sp->n_tasks ? sp->n_tasks : 1, sizeof(*pre));
  for (size_t i = 0; i < sp->n_tasks; i++) {
    const char *name = sp->tasks[i].name;
    cJSON *t = find_task(tasks, name);
    int attempts = (int)store_num(t, "attempts", 0);
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(t, "attempt_list")) {
      int an = (int)store_num(a, "n", 0);
      if (an > attempts)
        attempts = an;
      const char *ast = store_str(a, "state", NULL);
      if (!ast || (strcmp(ast, "starting") != 0 && strcmp(ast, "running") != 0))
        continue;
      char *why = orphan(a, &o, run_id, name, sp->tasks[i].kill_grace_s);
      int rc = store_attempt_end(st, run_id, name, an, "orphaned", -1, why,
                                 clock_wall(), NULL, err, errlen);
      free(why);
      if (rc != 0) {
        free(pre);
        return NULL;
      }
    }
    pre[i].attempts = attempts;
    pre[i].started = store_num(t, "started", 0);
    const char *state = store_str(t, "state", NULL);
    if (state && strcmp(state, "success") == 0) {
      pre[i].succeeded = 1;
      pre[i].ended = store_num(t, "finished", 0);
      pre[i].outputs = task_outputs(t, run_dir, name);
      pre[i].fingerprint = store_str(t, "fingerprint", NULL);
    }
  }
  double grace_s = 0;
  for (size_t i = 0; i < sp->n_tasks; i++)
    if (sp->tasks[i].kill_grace_s > grace_s)
      grace_s = sp->tasks[i].kill_grace_s;
  old_guard_wait(&o, run_id, grace_s);
  return pre;
}

void resume_expand_maps(cJSON *run, checked *ck) {
  const spec *sp = ck->s;
  cJSON *tasks = cJSON_GetObjectItemCaseSensitive(run, "tasks");
  const char *run_dir = store_str(run, "run_dir", NULL);
  for (size_t i = 0; run_dir && i < sp->n_maps; i++) {
    const spec_map *m = &sp->maps[i];
    if (m->placeholder == SIZE_MAX || m->expanded)
      continue;
    cJSON *t = find_task(tasks, m->name);
    const char *state = t ? store_str(t, "state", NULL) : NULL;
    if (!state || strcmp(state, "success") != 0)
      continue;
    const cJSON *o = task_outputs(t, run_dir, m->name);
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(o, "items");
    if (cJSON_IsArray(items) && cJSON_GetArraySize(items) <= SPEC_MAP_MAX)
      checked_expand(ck, i, items);
  }
}
