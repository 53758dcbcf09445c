/* A stage's own check of its tasks, in a helper; see checkhook.h. */
#include "checkhook.h"

#include "base/cli.h"
#include "base/util.h"
#include "describe.h"
#include "lib/clock.h"
#include "loader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the helper's side ---- */

/* dagrun_check_task.host: the task's params, and the texts handed out
 * (freed once its check returns). */
typedef struct hook_task {
  const cJSON *params, *deferred;
  char **texts;
  size_t n_texts, cap_texts;
} hook_task;

static const char *task_param(const dagrun_check_task *t, const char *name,
                              int *deferred) {
  hook_task *h = t->host;
  const cJSON *d;
  if (deferred)
    *deferred = 0;
  cJSON_ArrayForEach(d, h->deferred) {
    if (cJSON_IsString(d) && strcmp(d->valuestring, name) == 0) {
      if (deferred)
        *deferred = 1;
      return NULL;
    }
  }
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->params, name);
  char *z = NULL;
  if (cJSON_IsString(v))
    return v->valuestring;
  if (cJSON_IsBool(v))
    return cJSON_IsTrue(v) ? "true" : "false";
  if (!cJSON_IsNumber(v))
    return NULL;
  double x = v->valuedouble;
  z = x == floor(x) && fabs(x) < 9.2e18 ? xasprintf("%lld", (long long)x)
                                        : xasprintf("%.17g", x);
  VEC_PUSH(h->texts, h->n_texts, h->cap_texts, z);
  return z;
}

/* One task's answer. */
static cJSON *check_one(dagrun_check_fn check, const cJSON *task) {
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(task, "world_size");
  hook_task h = {cJSON_GetObjectItemCaseSensitive(task, "params"),
                 cJSON_GetObjectItemCaseSensitive(task, "deferred"), NULL, 0,
                 0};
  dagrun_check_task t = {sizeof t, cJSON_IsNumber(ws) ? ws->valueint : 1,
                         task_param, &h};
  char err[2048] = "";
  const char *param = NULL;
  int rc = check(&t, &param, err, sizeof err);
  cJSON *a = cJSON_CreateObject();
  if (rc != 0) {
    cJSON_AddStringToObject(a, "error", err[0] ? err : "refused (no reason)");
    if (param)
      cJSON_AddStringToObject(a, "param", param);
  }
  for (size_t i = 0; i < h.n_texts; i++)
    free(h.texts[i]);
  free(h.texts);
  return a;
}

int checkhook_main(const char *path) {
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  /* The answer goes to the pipe that is stdout now; what the plugin
   * prints goes to stderr. */
  int out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (out < 0 || dup2(2, 1) < 0) {
    perror("dagrun-worker __check: cannot set up stdout");
    return 1;
  }
  sbuf in = {0};
  char buf[65536];
  ssize_t r;
  while ((r = read(0, buf, sizeof buf)) != 0) {
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return 1;
    sbuf_add(&in, buf, (size_t)r);
  }
  cJSON *tasks = cJSON_ParseWithLength(in.s ? in.s : "", in.n);
  sbuf_free(&in);
  char err[1024];
  loader_plugin *p = NULL;
  if (!cJSON_IsArray(tasks) || loader_open(path, &p, err, sizeof err) != 0 ||
      !loader_check(p->stage))
    return 1;
  cJSON *answers = cJSON_CreateArray();
  const cJSON *t;
  cJSON_ArrayForEach(t, tasks) {
    cJSON_AddItemToArray(answers, check_one(loader_check(p->stage), t));
  }
  char *text = cJSON_PrintUnformatted(answers);
  fflush(NULL);
  size_t n = text ? strlen(text) : 0, done = 0;
  while (done < n) {
    ssize_t w = write(out, text + done, n - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return 1;
    done += (size_t)w;
  }
  return text ? 0 : 1;
}

/* ---- the parent's side ---- */

/* The tasks as the helper reads them, in a memory file at offset 0:
 * its stdin (no pipe to keep fed). The fd, or -1 with errno. */
static int tasks_file(const checkhook_task *tasks, size_t n) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "world_size", tasks[i].world_size);
    cJSON_AddItemToObject(t, "params", cJSON_Duplicate(tasks[i].params, 1));
    if (tasks[i].deferred)
      cJSON_AddItemToObject(t, "deferred",
                            cJSON_Duplicate(tasks[i].deferred, 1));
    cJSON_AddItemToArray(a, t);
  }
  char *text = cJSON_PrintUnformatted(a);
  cJSON_Delete(a);
  int fd = memfd_create("dagrun-check", MFD_CLOEXEC);
  size_t len = strlen(text), done = 0;
  while (fd >= 0 && done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      close(fd);
      fd = -1;
    } else {
      done += (size_t)w;
    }
  }
  cJSON_free(text);
  if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* The helper's whole stdout into o, until EOF or the deadline (then
 * *late). */
static void read_all(int fd, double deadline, sbuf *o, int *late) {
  char buf[65536];
  for (;;) {
    double ms = ceil((deadline - clock_monotonic()) * 1000);
    if (ms <= 0) {
      *late = 1;
      return;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int got = poll(&pfd, 1, ms > INT_MAX ? INT_MAX : (int)ms);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      continue; /* the deadline, at the top */
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0 || o->n > DESCRIBE_MAX_BYTES)
      return;
    sbuf_add(o, buf, (size_t)r);
  }
}

/* The answers in text into res[0..n): 0, or -1. */
static int take_answers(const sbuf *o, size_t n, checkhook_answer *res) {
  cJSON *a = cJSON_ParseWithLength(o->s ? o->s : "", o->n);
  int rc = cJSON_IsArray(a) && (size_t)cJSON_GetArraySize(a) == n ? 0 : -1;
  size_t i = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, a) {
    if (rc != 0)
      break;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(x, "error");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(x, "param");
    res[i].error = cJSON_IsString(e) ? xstrdup(e->valuestring) : NULL;
    res[i].param = cJSON_IsString(p) ? xstrdup(p->valuestring) : NULL;
    i++;
  }
  cJSON_Delete(a);
  return rc;
}

int checkhook_run_with(const char *helper, double limit, const char *path,
                       const checkhook_task *tasks, size_t n,
                       checkhook_answer *res, char *err, size_t errlen) {
  memset(res, 0, n * sizeof *res);
  int in = tasks_file(tasks, n), out = -1, late = 0, status = 0;
  pid_t pid = 0;
  char *argv[] = {(char *)helper, "__check", (char *)path, NULL};
  int e = in < 0 ? errno : describe_spawn(argv, in, &pid, &out);
  if (in >= 0)
    close(in);
  if (e != 0) {
    snprintf(err, errlen, "%s: cannot start %s: %s", path, helper, strerror(e));
    return -1;
  }
  sbuf o = {0};
  read_all(out, clock_monotonic() + limit, &o, &late);
  close(out);
  if (late)
    kill(-pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  int rc = -1;
  if (late)
    snprintf(err, errlen,
             "%s: its check did not answer within %g s "
             "(DAGRUN_DESCRIBE_TIMEOUT sets the limit)",
             path, limit);
  else if (WIFSIGNALED(status))
    snprintf(err, errlen, "%s: its check crashed (signal %d)", path,
             WTERMSIG(status));
  else if (WEXITSTATUS(status) != 0)
    snprintf(err, errlen, "%s: its check exited with status %d", path,
             WEXITSTATUS(status));
  else if (take_answers(&o, n, res) != 0)
    snprintf(err, errlen, "%s: its check's answer is not readable", path);
  else
    rc = 0;
  sbuf_free(&o);
  return rc;
}

int checkhook_run(const char *path, const checkhook_task *tasks, size_t n,
                  checkhook_answer *res, char *err, size_t errlen) {
  char helper[PATH_MAX];
  double limit;
  if (describe_limit(&limit, err, errlen) != 0)
    return -1;
  if (cli_helper_exe("dagrun-worker", helper, sizeof helper) != 0) {
    memset(res, 0, n * sizeof *res);
    snprintf(err, errlen,
             "%s: cannot be checked: dagrun-worker, its helper, is missing",
             path);
    return -1;
  }
  return checkhook_run_with(helper, limit, path, tasks, n, res, err, errlen);
}
