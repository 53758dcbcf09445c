/*
 * gang: the ranks of a gang's attempt, prepared for the executor, and how
 * they ended, in words.
 */
#include "gang.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "lib/fileio.h"
#include "workerenv.h"

int gang_wanted(const spec_task *st) {
  return st->world_size > 1 || st->launcher != SPEC_LAUNCHER_LOCAL;
}

/* Rank r's CUDA device in a local gang: the r-th of dagrun's own
 * CUDA_VISIBLE_DEVICES when that list has one, else r. Set but empty
 * (dagrun was started with its GPUs hidden): empty, so the ranks are
 * hidden from them too. Caller frees. */
static char *rank_device(int r) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (v && !*v)
    return xasprintf("%s", "");
  for (int k = 0; v && *v; k++) {
    size_t len = strcspn(v, ",");
    if (k == r)
      return xasprintf("%.*s", (int)len, v);
    v += len;
    if (*v == ',')
      v++;
  }
  return xasprintf("%d", r);
}

/* Rank r's environment in a local gang: the rank's variables, then the
 * attempt's facts, then the task's env and dagrun's (workerenv_build). */
static char **rank_env(const spec_task *st, int r, const char *rdv,
                       const cJSON *facts, const cJSON *task_env) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddNumberToObject(f, "DAGRUN_RANK", r);
  cJSON_AddNumberToObject(f, "DAGRUN_WORLD_SIZE", st->world_size);
  cJSON_AddNumberToObject(f, "DAGRUN_LOCAL_RANK", r);
  cJSON_AddStringToObject(f, "DAGRUN_RENDEZVOUS", rdv);
  if (!cJSON_GetObjectItemCaseSensitive(task_env, "CUDA_VISIBLE_DEVICES")) {
    char *dev = rank_device(r);
    cJSON_AddStringToObject(f, "CUDA_VISIBLE_DEVICES", dev);
    free(dev);
  }
  for (const cJSON *it = facts ? facts->child : NULL; it; it = it->next)
    cJSON_AddItemToObject(f, it->string, cJSON_Duplicate(it, 1));
  char **env = workerenv_build(f, task_env);
  cJSON_Delete(f);
  return env;
}

/* rendezvous/ made empty, rank-<r>/ for each rank with its log (rank 0's
 * is the attempt's log, which rank-0/log links to), and, for a local
 * gang, each rank's environment. Returns 0, or -1 with *reason. */
static int make_ranks(const spec_task *st, const char *attempt_dir,
                      const char *log_path, const cJSON *facts,
                      const cJSON *task_env, gang *g, char **reason) {
  char *rdv = path_join(attempt_dir, "rendezvous");
  int rc = 0;
  g->n = st->world_size;
  g->ranks = xcalloc((size_t)g->n, sizeof(*g->ranks));
  int mrc = fileio_mkdir_p(rdv, 0755);
  if (mrc != 0) {
    *reason = xasprintf("cannot create %s: %s", rdv, strerror(-mrc));
    rc = -1;
  }
  for (int r = 0; r < g->n && rc == 0; r++) {
    char name[32];
    snprintf(name, sizeof name, "rank-%d", r);
    char *dir = path_join(attempt_dir, name);
    char *log = path_join(dir, "log");
    int drc = fileio_mkdir_p(dir, 0755);
    if (drc == 0 && r == 0 && symlink("../log", log) != 0 && errno != EEXIST)
      drc = -errno;
    if (drc != 0) {
      *reason = xasprintf("cannot create %s: %s", log, strerror(-drc));
      rc = -1;
    }
    g->ranks[r].log_path = r == 0 ? xstrdup(log_path) : xstrdup(log);
    if (st->launcher == SPEC_LAUNCHER_LOCAL)
      g->ranks[r].env = rank_env(st, r, rdv, facts, task_env);
    free(log);
    free(dir);
  }
  free(rdv);
  return rc;
}

/* hosts as one comma-separated list (caller frees), and their number. */
static char *hosts_list(const spec_task *st, size_t *n) {
  sbuf h = {0};
  for (size_t k = 0; k < st->hosts->n; k++)
    sbuf_printf(&h, "%s%s", k ? "," : "", st->hosts->items[k]->str);
  *n = st->hosts->n;
  return sbuf_take(&h);
}

/* srun's argv (see gang.h). hosts: taken over, or NULL. */
static char **srun_argv(const spec_task *st, char *hosts, size_t n_hosts) {
  char **argv = NULL;
  size_t n = 0, cap = 0;
  VEC_PUSH(argv, n, cap, xstrdup("srun"));
  VEC_PUSH(argv, n, cap, xasprintf("--ntasks=%d", st->world_size));
  VEC_PUSH(argv, n, cap, xstrdup("--kill-on-bad-exit=1"));
  VEC_PUSH(argv, n, cap, xasprintf("--job-name=dagrun-%s", st->name));
  if (hosts) {
    VEC_PUSH(argv, n, cap, xasprintf("--nodes=%zu", n_hosts));
    VEC_PUSH(argv, n, cap, xasprintf("--nodelist=%s", hosts));
  }
  free(hosts);
  VEC_PUSH(argv, n, cap, NULL);
  return argv;
}

/* mpirun's argv (see gang.h). hosts: taken over, or NULL. */
static char **mpirun_argv(const spec_task *st, char *hosts,
                          const cJSON *task_env) {
  char **argv = NULL;
  size_t n = 0, cap = 0;
  VEC_PUSH(argv, n, cap, xstrdup("mpirun"));
  VEC_PUSH(argv, n, cap, xstrdup("-np"));
  VEC_PUSH(argv, n, cap, xasprintf("%d", st->world_size));
  VEC_PUSH(argv, n, cap, xstrdup("--oversubscribe"));
  VEC_PUSH(argv, n, cap, xstrdup("--bind-to"));
  VEC_PUSH(argv, n, cap, xstrdup("none"));
  if (hosts) {
    VEC_PUSH(argv, n, cap, xstrdup("--host"));
    VEC_PUSH(argv, n, cap, hosts);
  }
  static const char *const passed[] = {
      "DAGRUN_GANG_DIR",   "DAGRUN_RENDEZVOUS",  "DAGRUN_GANG_ADDR",
      "DAGRUN_GANG_TOKEN", "DAGRUN_DAG",         "DAGRUN_RUN_ID",
      "DAGRUN_RUN_DIR",    "DAGRUN_TASK",        "DAGRUN_ATTEMPT",
      "DAGRUN_OUT_DIR",    "DAGRUN_PLUGIN_PATH", "DAGRUN_TRIGGER",
      "DAGRUN_LOGICAL_DATE", "DAGRUN_DATA_INTERVAL_START",
      "DAGRUN_DATA_INTERVAL_END", NULL};
  for (size_t k = 0; passed[k]; k++) {
    if (strcmp(passed[k], "DAGRUN_PLUGIN_PATH") == 0 && !getenv(passed[k]))
      continue;
    VEC_PUSH(argv, n, cap, xstrdup("-x"));
    VEC_PUSH(argv, n, cap, xstrdup(passed[k]));
  }
  for (const cJSON *it = task_env ? task_env->child : NULL; it; it = it->next) {
    VEC_PUSH(argv, n, cap, xstrdup("-x"));
    VEC_PUSH(argv, n, cap, xstrdup(it->string));
  }
  VEC_PUSH(argv, n, cap, NULL);
  return argv;
}

/* The argv of a gang's launcher, and its environment (env plus what the
 * ranks need to join the gang: worker.h). Inside a Slurm allocation
 * (sbatch, salloc) srun starts a step of that job, else a job of its
 * own. */
static char **launcher_setup(const spec_task *st, const cJSON *task_env,
                             const char *attempt_dir, char ***env) {
  char *rdv = path_join(attempt_dir, "rendezvous");
  *env = workerenv_prepend(*env, xasprintf("DAGRUN_GANG_DIR=%s", attempt_dir));
  *env = workerenv_prepend(*env, xasprintf("DAGRUN_RENDEZVOUS=%s", rdv));
  free(rdv);
  size_t n_hosts = 0;
  char *hosts = st->hosts && st->hosts->n ? hosts_list(st, &n_hosts) : NULL;
  if (st->launcher == SPEC_LAUNCHER_SRUN)
    return srun_argv(st, hosts, n_hosts);
  /* Open MPI refuses to run as root unless told twice. */
  if (geteuid() == 0) {
    *env = workerenv_prepend(*env, xstrdup("OMPI_ALLOW_RUN_AS_ROOT=1"));
    *env = workerenv_prepend(*env, xstrdup("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"));
  }
  return mpirun_argv(st, hosts, task_env);
}

/* Whether host names this machine: localhost, a loopback address, or
 * this machine's name, short or full. */
static int host_is_local(const char *host) {
  char me[256];
  if (strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
      strcmp(host, "::1") == 0)
    return 1;
  if (gethostname(me, sizeof(me)) != 0)
    return 0;
  me[sizeof(me) - 1] = '\0';
  size_t n_me = strcspn(me, "."), n_host = strcspn(host, ".");
  return strcmp(host, me) == 0 ||
         (n_me == n_host && strncmp(host, me, n_me) == 0 &&
          (!host[n_host] || !me[n_me]));
}

/* Where a launched gang's rendezvous listens (an IP address) and the
 * name its ranks connect to (executor.h), in host (n bytes): the task's
 * `rendezvous` address when it gives one (a wildcard one reached by this
 * machine's name); else loopback when every rank runs here (mpirun
 * without hosts, or hosts that all name this machine), and every
 * interface, reached by this machine's name, when not: srun without hosts
 * may put ranks on any node of its allocation. */
static const char *rdv_where(const spec_task *st, char *host, size_t n) {
  const char *bind = st->rdv_bind;
  if (!*bind) {
    int local = st->launcher == SPEC_LAUNCHER_MPIRUN;
    if (st->hosts && st->hosts->n) {
      local = 1;
      for (size_t k = 0; k < st->hosts->n && local; k++)
        local = host_is_local(st->hosts->items[k]->str);
    }
    bind = local ? "127.0.0.1" : "0.0.0.0";
  }
  if (strcmp(bind, "0.0.0.0") != 0 && strcmp(bind, "::") != 0) {
    snprintf(host, n, "%s", bind);
  } else if (gethostname(host, n) != 0) {
    snprintf(host, n, "localhost");
  } else {
    host[n - 1] = '\0';
  }
  return bind;
}

int gang_prepare(const spec_task *st, const char *attempt_dir,
                 const char *log_path, const cJSON *facts,
                 const cJSON *task_env, int has_secrets, char ***env, gang *g,
                 char **reason) {
  memset(g, 0, sizeof(*g));
  if (st->launcher != SPEC_LAUNCHER_LOCAL && has_secrets) {
    *reason = xasprintf("launcher %s cannot run a task of a run with "
                        "secrets yet: its ranks would see them masked",
                        st->launcher == SPEC_LAUNCHER_SRUN ? "srun" : "mpirun");
    return -1;
  }
  if (make_ranks(st, attempt_dir, log_path, facts, task_env, g, reason) != 0)
    return -1;
  if (st->launcher != SPEC_LAUNCHER_LOCAL) {
    g->launcher_argv = launcher_setup(st, task_env, attempt_dir, env);
    g->rdv_bind = rdv_where(st, g->rdv_host, sizeof(g->rdv_host));
    g->rdv_port = st->rdv_port;
  }
  return 0;
}

void gang_request(const gang *g, exec_request *rq) {
  rq->n_ranks = g->ranks ? (size_t)g->n : 0;
  rq->ranks = g->ranks;
  rq->launcher_argv = g->launcher_argv;
  rq->rdv_bind = g->rdv_bind;
  rq->rdv_port = g->rdv_port;
  rq->rdv_host = g->rdv_host;
}

void gang_free(gang *g) {
  for (int r = 0; g->ranks && r < g->n; r++) {
    free((char *)g->ranks[r].log_path);
    workerenv_free(g->ranks[r].env);
  }
  free(g->ranks);
  workerenv_free(g->launcher_argv);
  memset(g, 0, sizeof(*g));
}

char *gang_failure_reason(const exec_result *r, const char *one) {
  sbuf b = {0};
  if (r->failed_rank >= 0 && r->end == EXEC_EXITED)
    sbuf_printf(&b, "rank %d exited %d%s%s", r->failed_rank, r->exit_code,
                r->error ? ": " : "", r->error ? r->error : "");
  else if (r->failed_rank >= 0)
    sbuf_printf(&b, "rank %d %s", r->failed_rank, one);
  else
    sbuf_printf(&b, "%s", one);
  if (*r->stopped)
    sbuf_printf(&b, "; stopped rank%s %s", strchr(r->stopped, ',') ? "s" : "",
                r->stopped);
  /* Killed by someone else (kill -9, the OOM killer): likely the cause,
   * which the ranks, cut off from it, cannot tell. */
  if (r->launcher && r->launcher->term_signal && !r->launcher->stopped) {
    const char *abbrev = sigabbrev_np(r->launcher->term_signal);
    sbuf_printf(&b,
                "; its launcher was killed by signal %d (SIG%s), not by "
                "dagrun",
                r->launcher->term_signal, abbrev ? abbrev : "?");
  }
  /* A launched rank that never joined is likely the cause, whatever
   * ended the gang first (a timeout, or the launcher stopping the other
   * ranks when it failed): name it. The failed rank's own error says so
   * already. */
  if (r->rendezvous) {
    sbuf late = {0};
    int n_late = 0;
    for (int k = 0; k < r->n_ranks; k++)
      if (r->ranks[k].never_joined && k != r->failed_rank)
        sbuf_printf(&late, "%s%d", n_late++ ? ", " : "", k);
    if (n_late)
      sbuf_printf(&b,
                  "; rank%s %s never connected to dagrun's rendezvous at %s",
                  n_late > 1 ? "s" : "", late.s, r->rendezvous);
    sbuf_free(&late);
  }
  return sbuf_take(&b);
}

cJSON *gang_ranks_json(const exec_result *r) {
  cJSON *arr = cJSON_CreateArray();
  for (int k = 0; k < r->n_ranks; k++) {
    const exec_rank_end *e = &r->ranks[k];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "rank", k);
    if (e->term_signal)
      cJSON_AddNumberToObject(j, "signal", e->term_signal);
    else
      cJSON_AddNumberToObject(j, "exit_code", e->exit_code);
    if (e->stopped)
      cJSON_AddBoolToObject(j, "stopped", 1);
    cJSON_AddItemToArray(arr, j);
  }
  return arr;
}
