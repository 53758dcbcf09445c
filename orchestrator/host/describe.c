/*
 * describe: a stage plugin's descriptor read by `dagrun-worker
 * __describe FILE` (the helper's side: describe_main) and turned back
 * into a descriptor in dagrun (the parent's side: describe_files).
 */
#include "describe.h"

#include "base/cli.h"
#include "base/util.h"
#include "lib/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- the helper's side ---- */

static cJSON *str_or_null(const char *s) {
  return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

static cJSON *params_json(const dagrun_param_spec *params) {
  if (!params)
    return cJSON_CreateNull();
  cJSON *a = cJSON_CreateArray();
  for (const dagrun_param_spec *p = params; p->name; p++) {
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "name", p->name);
    cJSON_AddNumberToObject(q, "type", (double)p->type);
    cJSON_AddItemToObject(q, "default", str_or_null(p->default_value));
    cJSON_AddNumberToObject(q, "required", p->required != 0);
    cJSON_AddItemToObject(q, "help", str_or_null(p->help));
    cJSON_AddItemToArray(a, q);
  }
  return a;
}

static cJSON *choices_json(const dagrun_param_choice *choices) {
  if (!choices)
    return cJSON_CreateNull();
  cJSON *a = cJSON_CreateArray();
  for (const dagrun_param_choice *c = choices; c->param; c++) {
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "param", c->param);
    cJSON *v = cJSON_AddArrayToObject(q, "values");
    for (size_t i = 0; c->values[i]; i++)
      cJSON_AddItemToArray(v, cJSON_CreateString(c->values[i]));
    cJSON_AddItemToArray(a, q);
  }
  return a;
}

/* What a checked descriptor says, as describe.h shows it. */
static cJSON *stage_json(const dagrun_stage *st) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "struct_size", st->struct_size);
  cJSON_AddNumberToObject(j, "abi_version", st->abi_version);
  cJSON_AddStringToObject(j, "name", st->name);
  cJSON_AddItemToObject(j, "version", str_or_null(st->version));
  cJSON_AddItemToObject(j, "summary", str_or_null(st->summary));
  cJSON_AddItemToObject(j, "params", params_json(st->params));
  cJSON_AddItemToObject(j, "choices", choices_json(loader_choices(st)));
  if (loader_check(st))
    cJSON_AddTrueToObject(j, "check");
  return j;
}

static int write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

/* One line: path's description, or the loader's refusal. 0, or -1 when
 * it cannot be written. */
static int describe_one(int out, const char *path) {
  char err[1024];
  loader_plugin *p = NULL;
  int rc = loader_open(path, &p, err, sizeof err);
  cJSON *j;
  if (rc == 0) {
    j = stage_json(p->stage);
  } else {
    j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", err);
    cJSON_AddNumberToObject(j, "code", rc);
  }
  /* Unformatted JSON has no newline: it ends the line. */
  char *text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  fflush(NULL);
  int ok = text && write_all(out, text, strlen(text)) == 0 &&
           write_all(out, "\n", 1) == 0;
  cJSON_free(text);
  /* The plugin stays loaded: the process ends soon (describe.h). */
  return ok ? 0 : -1;
}

int describe_main(int n, char **paths) {
  /* A dagrun that dies (or is killed) while a constructor hangs must not
   * leave this process behind. */
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  /* The description goes to the pipe that is stdout now; what the plugin
   * prints goes to stderr, so that it cannot mix with it. */
  int out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  if (out < 0 || dup2(2, 1) < 0) {
    perror("dagrun-worker __describe: cannot set up stdout");
    return 1;
  }
  for (int i = 0; i < n; i++)
    if (describe_one(out, paths[i]) != 0)
      return 1;
  return 0;
}

/* ---- the parent's side: the description back into a descriptor ---- */

/* A described stage: the descriptor and everything it points to. */
typedef struct described {
  dagrun_stage stage;
  cJSON *json; /* owns every string the descriptor points to */
  dagrun_param_spec *params;
  dagrun_param_choice *choices;
  const char ***values; /* one NULL-terminated array per choice */
  size_t n_choices;
} described;

static void described_free(void *storage) {
  described *d = storage;
  if (!d)
    return;
  for (size_t i = 0; i < d->n_choices; i++)
    free(d->values[i]);
  free(d->values);
  free(d->choices);
  free(d->params);
  cJSON_Delete(d->json);
  free(d);
}

/* A string member, or NULL for null (when allowed): 0, or -1. */
static int get_str(const cJSON *o, const char *key, int nullable,
                   const char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  *out = cJSON_IsString(v) ? v->valuestring : NULL;
  return *out || (nullable && cJSON_IsNull(v)) ? 0 : -1;
}

static int get_uint(const cJSON *o, const char *key, uint32_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > UINT32_MAX ||
      v->valuedouble != floor(v->valuedouble))
    return -1;
  *out = (uint32_t)v->valuedouble;
  return 0;
}

static int take_params(described *d, const cJSON *a) {
  if (cJSON_IsNull(a))
    return 0;
  if (!cJSON_IsArray(a))
    return -1;
  size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
  d->params = xcalloc(n + 1, sizeof *d->params);
  d->stage.params = d->params;
  const cJSON *q;
  cJSON_ArrayForEach(q, a) {
    dagrun_param_spec *p = &d->params[i++];
    uint32_t type, required;
    if (get_str(q, "name", 0, &p->name) || get_uint(q, "type", &type) ||
        get_str(q, "default", 1, &p->default_value) ||
        get_uint(q, "required", &required) || get_str(q, "help", 1, &p->help))
      return -1;
    p->type = (dagrun_param_type)type;
    p->required = required != 0;
  }
  return 0;
}

static int take_choices(described *d, const cJSON *a) {
  if (cJSON_IsNull(a))
    return 0;
  if (!cJSON_IsArray(a))
    return -1;
  size_t n = (size_t)cJSON_GetArraySize(a);
  d->choices = xcalloc(n + 1, sizeof *d->choices);
  d->values = xcalloc(n + 1, sizeof *d->values);
  d->stage.choices = d->choices;
  const cJSON *q;
  cJSON_ArrayForEach(q, a) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, "values");
    if (!cJSON_IsArray(v))
      return -1;
    size_t i = d->n_choices++, k = 0;
    const char **values =
        xcalloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *values);
    d->values[i] = values;
    d->choices[i].values = values;
    if (get_str(q, "param", 0, &d->choices[i].param))
      return -1;
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
      if (!cJSON_IsString(s))
        return -1;
      values[k++] = s->valuestring;
    }
  }
  return 0;
}

/* A described stage's check: the stand-in that says it has one (the
 * helper runs the real one, checkhook.h). */
static int described_check(const dagrun_check_task *t, const char **param,
                           char *err, size_t errlen) {
  (void)t;
  *param = NULL;
  snprintf(err, errlen, "a described stage's check runs in a helper");
  return -1;
}

/* The description text into *out: 0; a loader refusal: its code with
 * its message in err; or DR_EPROTO with what is wrong with the text. */
static int from_json(const char *path, const char *text, size_t len,
                     loader_plugin **out, char *err, size_t errlen) {
  *out = NULL;
  described *d = xcalloc(1, sizeof *d);
  d->json = cJSON_ParseWithLength(text, len);
  const cJSON *j = d->json;
  const char *msg;
  int rc = DR_EPROTO;
  if (!cJSON_IsObject(j)) {
    snprintf(err, errlen, "%s", len ? "not a JSON object" : "no output");
  } else if (get_str(j, "error", 0, &msg) == 0) {
    /* A refusal carries the (negative) code as a number. */
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "code");
    rc = cJSON_IsNumber(c) && (c->valueint == DR_EABI) ? DR_EABI : DR_EPLUGIN;
    snprintf(err, errlen, "%s", msg);
  } else if (get_uint(j, "struct_size", &d->stage.struct_size) ||
             get_uint(j, "abi_version", &d->stage.abi_version) ||
             get_str(j, "name", 0, &d->stage.name) ||
             get_str(j, "version", 1, &d->stage.version) ||
             get_str(j, "summary", 1, &d->stage.summary) ||
             take_params(d, cJSON_GetObjectItemCaseSensitive(j, "params")) ||
             take_choices(d, cJSON_GetObjectItemCaseSensitive(j, "choices"))) {
    snprintf(err, errlen, "a member is missing or of the wrong type");
  } else {
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "check")))
      d->stage.check = described_check;
    loader_plugin *p = xcalloc(1, sizeof *p);
    p->path = xstrdup(path);
    p->stage = &d->stage;
    p->storage = d;
    p->release = described_free;
    *out = p;
    return 0;
  }
  described_free(d);
  return rc;
}

/* ---- the parent's side: the helpers ---- */

/* One helper at work. */
typedef struct job {
  size_t *idx; /* the files it describes: indices into paths and res */
  size_t n_idx;
  pid_t pid;       /* 0 until started and once done; it leads its group */
  int fd;          /* its stdout; -1 once at EOF (or given up) */
  int pidfd;       /* readable once it has exited; -1 once reaped */
  int status;      /* waitpid's, once reaped */
  int timed_out;   /* killed at the deadline */
  int too_big;     /* killed for writing more than DESCRIBE_MAX_BYTES */
  double deadline; /* clock_monotonic() */
  sbuf out;
} job;

int describe_spawn(char *const *argv, int in, pid_t *pid, int *out) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return errno;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  int rc = in >= 0 ? posix_spawn_file_actions_adddup2(&fa, in, 0)
                   : posix_spawn_file_actions_addopen(&fa, 0, "/dev/null",
                                                      O_RDONLY, 0);
  if (rc == 0)
    rc = posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  if (rc == 0)
    rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                             POSIX_SPAWN_SETSIGMASK |
                                             POSIX_SPAWN_SETSIGDEF);
  if (rc == 0)
    rc = posix_spawnattr_setpgroup(&attr, 0);
  if (rc == 0)
    rc = posix_spawnattr_setsigmask(&attr, &none);
  if (rc == 0)
    rc = posix_spawnattr_setsigdefault(&attr, &all);
  if (rc == 0)
    rc = posix_spawn(pid, argv[0], &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    *pid = 0;
    return rc;
  }
  *out = fds[0];
  return 0;
}

/* Starts `helper __describe PATH...` for the job's files
 * (describe_spawn). 0, or an errno value. */
static int job_start(job *jb, const char *helper, const char *const *paths,
                     double limit) {
  char **argv = xcalloc(jb->n_idx + 3, sizeof *argv);
  argv[0] = (char *)helper;
  argv[1] = "__describe";
  for (size_t i = 0; i < jb->n_idx; i++)
    argv[2 + i] = (char *)paths[jb->idx[i]];
  int rc = describe_spawn(argv, -1, &jb->pid, &jb->fd);
  free(argv);
  if (rc != 0)
    return rc;
  jb->pidfd = (int)syscall(SYS_pidfd_open, jb->pid, 0);
  if (jb->pidfd < 0) {
    rc = errno;
    kill(-jb->pid, SIGKILL);
    while (waitpid(jb->pid, NULL, 0) < 0 && errno == EINTR)
      ;
    close(jb->fd);
    jb->fd = -1;
    return rc;
  }
  jb->deadline = clock_monotonic() + limit;
  return 0;
}

static void job_reap(job *jb) {
  while (waitpid(jb->pid, &jb->status, 0) < 0 && errno == EINTR)
    ;
  close(jb->pidfd);
  jb->pidfd = -1;
}

/* Kills the helper's group (anything its plugin started in it too) and
 * stops reading. */
static void job_kill(job *jb) {
  kill(-jb->pid, SIGKILL);
  if (jb->fd >= 0)
    close(jb->fd);
  jb->fd = -1;
}

static void job_read(job *jb) {
  char buf[65536];
  ssize_t r = read(jb->fd, buf, sizeof buf);
  if (r < 0 && (errno == EINTR || errno == EAGAIN))
    return;
  if (r <= 0) {
    close(jb->fd);
    jb->fd = -1;
    return;
  }
  sbuf_add(&jb->out, buf, (size_t)r);
  if (jb->out.n > DESCRIBE_MAX_BYTES) {
    jb->too_big = 1;
    job_kill(jb);
  }
}

static const char *signal_name(int sig, char *buf, size_t len) {
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev)
    snprintf(buf, len, "SIG%s", abbrev);
  else
    snprintf(buf, len, "signal %d", sig);
  return buf;
}

/* What the ended helper of path says: into r. */
static void job_result(job *jb, const char *path, double limit,
                       describe_result *r) {
  char why[1024], sig[32];
  int st = jb->status;
  r->rc = DR_EPLUGIN;
  if (jb->timed_out) {
    r->error = xasprintf("%s: did not describe itself within %g s (killed: "
                         "its constructor or %s() hangs?; "
                         "DAGRUN_DESCRIBE_TIMEOUT sets the limit)",
                         path, limit, DAGRUN_STAGE_ENTRY_NAME);
  } else if (jb->too_big) {
    r->error = xasprintf("%s: cannot be described: its description is not "
                         "readable (more than %u bytes)",
                         path, DESCRIBE_MAX_BYTES);
  } else if (WIFSIGNALED(st)) {
    r->error = xasprintf("%s: crashed while being loaded (%s in its "
                         "constructor or %s())",
                         path, signal_name(WTERMSIG(st), sig, sizeof sig),
                         DAGRUN_STAGE_ENTRY_NAME);
  } else if (WEXITSTATUS(st) != 0 || jb->out.n == 0) {
    r->error = xasprintf("%s: exited with status %d while being loaded, "
                         "before describing itself (a plugin must not call "
                         "exit())",
                         path, WEXITSTATUS(st));
  } else if ((r->rc = from_json(path, jb->out.s, jb->out.n, &r->plugin, why,
                                sizeof why)) == DR_EPROTO) {
    r->rc = DR_EPLUGIN;
    r->error = xasprintf("%s: cannot be described: its description is not "
                         "readable (%s)",
                         path, why);
  } else if (r->rc != 0) {
    r->error = xstrdup(why);
  }
}

/* Waits for events of the running jobs, at most until the nearest
 * deadline, and handles them: output read, exits reaped, helpers past
 * their deadline killed. */
static void jobs_wait(job *jobs, size_t n) {
  struct pollfd pfd[2 * DESCRIBE_PARALLEL];
  job *owner[2 * DESCRIBE_PARALLEL];
  size_t np = 0;
  double now = clock_monotonic(), first = INFINITY;
  for (size_t i = 0; i < n; i++) {
    job *jb = &jobs[i];
    if (jb->pid == 0 || (jb->fd < 0 && jb->pidfd < 0))
      continue;
    first = jb->deadline < first ? jb->deadline : first;
    if (jb->fd >= 0) {
      pfd[np] = (struct pollfd){.fd = jb->fd, .events = POLLIN};
      owner[np++] = jb;
    }
    if (jb->pidfd >= 0) {
      pfd[np] = (struct pollfd){.fd = jb->pidfd, .events = POLLIN};
      owner[np++] = jb;
    }
  }
  if (np == 0)
    return;
  double ms = ceil((first - now) * 1000);
  int got = poll(pfd, np, ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms);
  for (size_t k = 0; got > 0 && k < np; k++) {
    if (!pfd[k].revents)
      continue;
    if (pfd[k].fd == owner[k]->fd)
      job_read(owner[k]);
    else if (pfd[k].fd == owner[k]->pidfd)
      job_reap(owner[k]);
  }
  now = clock_monotonic();
  for (size_t i = 0; i < n; i++) {
    job *jb = &jobs[i];
    if (jb->pid == 0 || (jb->fd < 0 && jb->pidfd < 0) || now < jb->deadline)
      continue;
    jb->timed_out = 1;
    job_kill(jb);
    if (jb->pidfd >= 0)
      job_reap(jb);
  }
}

/* The helpers to run: started in order, DESCRIBE_PARALLEL at a time. */
typedef struct work {
  job *v;
  size_t n, cap;
} work;

static void work_add(work *w, size_t *idx, size_t n_idx) {
  job jb = {.idx = idx, .n_idx = n_idx, .fd = -1, .pidfd = -1};
  VEC_PUSH(w->v, w->n, w->cap, jb);
}

static void work_add_one(work *w, size_t i) {
  size_t *idx = xmalloc(sizeof *idx);
  *idx = i;
  work_add(w, idx, 1);
}

/* The ended helper's results, one line per file in order. The files a
 * shared helper did not reach are queued again, each for a helper of its
 * own, so that what happened is said of the file it happened to. */
static void job_results(work *w, size_t j, const char *const *paths,
                        double limit, describe_result *res) {
  job *jb = &w->v[j];
  if (jb->n_idx == 1) {
    job_result(jb, paths[jb->idx[0]], limit, &res[jb->idx[0]]);
    return;
  }
  const char *line = jb->out.s, *end = jb->out.s + jb->out.n;
  size_t k = 0;
  for (; k < jb->n_idx && line < end; k++) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    size_t i = jb->idx[k];
    char why[1024];
    int rc = nl ? from_json(paths[i], line, (size_t)(nl - line), &res[i].plugin,
                            why, sizeof why)
                : DR_EPROTO;
    if (rc == DR_EPROTO)
      break;
    res[i].rc = rc;
    res[i].error = rc ? xstrdup(why) : NULL;
    line = nl + 1;
  }
  size_t n = jb->n_idx, *idx = jb->idx; /* w->v may move */
  for (; k < n; k++)
    work_add_one(w, idx[k]);
}

void describe_files_with(const char *helper, double limit,
                         const char *const *paths, const int *shared, size_t n,
                         describe_result *res) {
  memset(res, 0, n * sizeof *res);
  work w = {0};
  size_t *together = xmalloc((n ? n : 1) * sizeof *together), n_together = 0;
  for (size_t i = 0; i < n; i++) {
    if (shared && shared[i])
      together[n_together++] = i;
    else
      work_add_one(&w, i);
  }
  if (n_together)
    work_add(&w, together, n_together);
  else
    free(together);
  size_t next = 0, running = 0;
  while (next < w.n || running > 0) {
    for (; running < DESCRIBE_PARALLEL && next < w.n; next++) {
      job *jb = &w.v[next];
      int e = job_start(jb, helper, paths, limit);
      for (size_t k = 0; e != 0 && k < jb->n_idx; k++) {
        res[jb->idx[k]].rc = DR_ESPAWN;
        res[jb->idx[k]].error =
            xasprintf("%s: cannot be described: cannot start %s: %s",
                      paths[jb->idx[k]], helper, strerror(e));
      }
      running += e == 0;
    }
    jobs_wait(w.v, next);
    for (size_t j = 0; j < next; j++) {
      job *jb = &w.v[j];
      if (jb->pid == 0 || jb->fd >= 0 || jb->pidfd >= 0)
        continue;
      jb->pid = 0;
      running--;
      job_results(&w, j, paths, limit, res);
      sbuf_free(&w.v[j].out);
    }
  }
  for (size_t j = 0; j < w.n; j++)
    free(w.v[j].idx);
  free(w.v);
}

int describe_limit(double *limit, char *err, size_t errlen) {
  const char *z = getenv("DAGRUN_DESCRIBE_TIMEOUT");
  *limit = DESCRIBE_TIMEOUT_S;
  if (!z || !*z)
    return 0;
  char *end;
  errno = 0;
  double v = strtod(z, &end);
  if (*end || errno || !(v > 0 && v <= 3600)) {
    snprintf(err, errlen,
             "DAGRUN_DESCRIBE_TIMEOUT='%s' is not a number of seconds in "
             "(0, 3600]",
             z);
    return -1;
  }
  *limit = v;
  return 0;
}

/* ---- the cache (describe_cache_keep) ---- */

typedef struct cached {
  char *path;
  struct stat id; /* st_dev, st_ino, st_size, st_mtim compared */
  char *text;     /* the helper's line */
} cached;

static struct {
  int on;
  cached *v;
  size_t n;
} cache;

void describe_cache_keep(void) { cache.on = 1; }

static int same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
         a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
         a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static cached *cache_slot(const char *path) {
  for (size_t i = 0; i < cache.n; i++)
    if (strcmp(cache.v[i].path, path) == 0)
      return &cache.v[i];
  return NULL;
}

/* path's description from the cache into *r when its file is as it was
 * (id: its identity now): 1, else 0. */
static int cache_answer(const char *path, const struct stat *id,
                        describe_result *r) {
  cached *c = cache_slot(path);
  char why[1024];
  if (!c || !same_file(&c->id, id) ||
      from_json(path, c->text, strlen(c->text), &r->plugin, why, sizeof why) !=
          0)
    return 0;
  r->rc = 0;
  r->error = NULL;
  return 1;
}

/* r's description, got for path while its file was id, into the cache. */
static void cache_store(const char *path, const struct stat *id,
                        const describe_result *r) {
  if (r->rc != 0 || !r->plugin || r->plugin->release != described_free)
    return;
  cached *c = cache_slot(path);
  if (!c) {
    cache.v = xrealloc(cache.v, (cache.n + 1) * sizeof *cache.v);
    c = &cache.v[cache.n++];
    c->path = xstrdup(path);
  } else {
    free(c->text);
  }
  c->id = *id;
  c->text = cJSON_PrintUnformatted(((described *)r->plugin->storage)->json);
}

/* describe_files_with for the files the cache cannot answer; what they
 * get goes into it. The identity is taken before the helper reads the
 * file, so a file changed meanwhile is described again next time. */
static void describe_cached(const char *helper, double limit,
                            const char *const *paths, const int *shared,
                            size_t n, describe_result *res) {
  struct stat *ids = xcalloc(n, sizeof *ids);
  size_t *miss = xcalloc(n, sizeof *miss), n_miss = 0;
  memset(res, 0, n * sizeof *res);
  for (size_t i = 0; i < n; i++)
    if (stat(paths[i], &ids[i]) != 0 ||
        !cache_answer(paths[i], &ids[i], &res[i]))
      miss[n_miss++] = i;
  const char **mpaths = xcalloc(n_miss + 1, sizeof *mpaths);
  int *mshared = xcalloc(n_miss + 1, sizeof *mshared);
  describe_result *mres = xcalloc(n_miss + 1, sizeof *mres);
  for (size_t k = 0; k < n_miss; k++) {
    mpaths[k] = paths[miss[k]];
    mshared[k] = shared[miss[k]];
  }
  if (n_miss)
    describe_files_with(helper, limit, mpaths, mshared, n_miss, mres);
  for (size_t k = 0; k < n_miss; k++) {
    res[miss[k]] = mres[k];
    cache_store(paths[miss[k]], &ids[miss[k]], &mres[k]);
  }
  free(mres);
  free(mshared);
  free(mpaths);
  free(miss);
  free(ids);
}

void describe_files(const char *const *paths, size_t n, describe_result *res) {
  if (n == 0)
    return; /* and no word about a missing helper */
  char helper[PATH_MAX], why[256];
  double limit;
  int bad_limit = describe_limit(&limit, why, sizeof why) != 0;
  /* cli_helper_exe says on stderr why it cannot be found. */
  if (!bad_limit &&
      cli_helper_exe("dagrun-worker", helper, sizeof helper) == 0) {
    int *shared = xcalloc(n ? n : 1, sizeof *shared);
    for (size_t i = 0; i < n; i++)
      shared[i] = loader_is_builtin_file(paths[i]);
    if (cache.on)
      describe_cached(helper, limit, paths, shared, n, res);
    else
      describe_files_with(helper, limit, paths, shared, n, res);
    free(shared);
    return;
  }
  if (!bad_limit)
    snprintf(why, sizeof why, "dagrun-worker, its helper, is missing");
  memset(res, 0, n * sizeof *res);
  for (size_t i = 0; i < n; i++) {
    res[i].rc = bad_limit ? DR_EINVAL : DR_ESPAWN;
    res[i].error = xasprintf("%s: cannot be described: %s", paths[i], why);
  }
}
