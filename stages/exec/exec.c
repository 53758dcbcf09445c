/*
 * exec: the built-in stage that runs a command.
 *
 *   stage: exec
 *   with: {command: [python, prep.py, --out, out/], cwd: data, env: {A: b}}
 *
 * The command is an argv list run without a shell (no quoting surprises),
 * unless shell: true, where it is one string for /bin/sh -c. It inherits
 * the attempt's stdout and stderr (the log) and its process group, so a
 * timeout or cancel that signals the group reaches the command too. The
 * attempt's exit status is the command's.
 *
 * The command reports as a plugin stage does, through files named in its
 * environment (channels.h): DAGRUN_OUTPUTS (outputs for downstream
 * tasks), DAGRUN_METRICS (JSON lines of metrics, read as they are
 * written) and DAGRUN_PROGRESS. Bad outputs fail the task; bad metrics or
 * progress lines are warnings.
 */
#define _GNU_SOURCE /* posix_spawn_file_actions_addchdir_np, sigabbrev_np */

#include "channels.h"

#include <dagrun/plugin.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Exit statuses for failures before the command runs, as shells use
 * them: 127 command not found, 126 found but cannot run; 2 for a task
 * whose params make no sense. */
#define EXEC_NOT_FOUND 127
#define EXEC_CANNOT_RUN 126
#define EXEC_BAD_PARAMS 2

static const dagrun_param_spec params[] = {
    {"command", DAGRUN_PARAM_LIST, NULL, 1,
     "Program and arguments, e.g. [python, train.py, --lr, \"3e-4\"]; "
     "one string when shell is true"},
    {"shell", DAGRUN_PARAM_BOOL, "false", 0,
     "Run command (one string) with /bin/sh -c"},
    {"cwd", DAGRUN_PARAM_STRING, NULL, 0,
     "Working directory; relative to the DAG file's directory "
     "(default: dagrun's own)"},
    {"env", DAGRUN_PARAM_MAP, NULL, 0,
     "Extra environment variables, on top of the inherited ones"},
    {NULL, 0, NULL, 0, NULL},
};

static int has_space(const char *s) {
  for (; *s; s++)
    if (*s == ' ' || *s == '\t' || *s == '\n')
      return 1;
  return 0;
}

/* Whether entry ("NAME=value") sets the variable named by the klen bytes
 * of name. */
static int sets(const char *entry, const char *name, size_t klen) {
  return strncmp(entry, name, klen) == 0 && entry[klen] == '=';
}

/* environ with the task's env map applied, then the channels' variables
 * (dagrun_vars, "NAME=path", NULL-terminated: they win over both); the
 * strings it adds are in *owned. Returns NULL on a bad entry (message via
 * host->fail). */
static char **build_env(dagrun_ctx *ctx, const dagrun_host *host,
                        const char *const *dagrun_vars, char ***owned,
                        size_t *nowned) {
  size_t nextra = 0;
  *owned = NULL;
  *nowned = 0;
  if (host->param_map_size(ctx, "env", &nextra) != 0) {
    host->fail(ctx, "env must be a map of NAME: value");
    return NULL;
  }
  size_t nenv = 0, nvars = 0;
  while (environ[nenv])
    nenv++;
  while (dagrun_vars[nvars])
    nvars++;
  char **env = calloc(nenv + nextra + nvars + 1, sizeof(char *));
  char **extra = calloc(nextra + 1, sizeof(char *));
  if (!env || !extra) {
    free(env);
    free(extra);
    host->fail(ctx, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < nextra; i++) {
    const char *k = NULL, *v = NULL;
    int rc = host->param_map_entry(ctx, "env", i, &k, &v);
    if (rc != 0 || !*k || strchr(k, '=')) {
      host->fail(ctx, "env: bad variable name '%s'", rc == 0 ? k : "?");
      goto fail;
    }
    for (size_t d = 0; dagrun_vars[d]; d++)
      if (sets(dagrun_vars[d], k, strlen(k)))
        host->log(ctx, DAGRUN_LOG_WARN,
                  "env: %s is set by dagrun (the exec stage's report "
                  "files); the task's value is ignored",
                  k);
    size_t len = strlen(k) + strlen(v) + 2;
    extra[i] = malloc(len);
    if (!extra[i]) {
      host->fail(ctx, "out of memory");
      goto fail;
    }
    snprintf(extra[i], len, "%s=%s", k, v);
    (*nowned)++;
  }
  /* Inherited variables first, minus those the task or dagrun override;
   * then the task's, minus dagrun's; then dagrun's. */
  size_t n = 0;
  for (size_t i = 0; i < nenv; i++) {
    const char *eq = strchr(environ[i], '=');
    size_t klen = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
    int overridden = 0;
    for (size_t j = 0; j < nextra && !overridden; j++)
      overridden = sets(extra[j], environ[i], klen);
    for (size_t d = 0; d < nvars && !overridden; d++)
      overridden = sets(dagrun_vars[d], environ[i], klen);
    if (!overridden)
      env[n++] = environ[i];
  }
  for (size_t j = 0; j < nextra; j++) {
    size_t klen = strcspn(extra[j], "=");
    int overridden = 0;
    for (size_t d = 0; d < nvars && !overridden; d++)
      overridden = sets(dagrun_vars[d], extra[j], klen);
    if (!overridden)
      env[n++] = extra[j];
  }
  for (size_t d = 0; d < nvars; d++)
    env[n++] = (char *)dagrun_vars[d];
  env[n] = NULL;
  *owned = extra;
  return env;
fail:
  for (size_t j = 0; j < nextra; j++)
    free(extra[j]);
  free(extra);
  free(env);
  *nowned = 0;
  return NULL;
}

/* PATH as set by the task's env map, or NULL when it sets none. */
static const char *task_path(char **owned, size_t nowned) {
  for (size_t i = 0; i < nowned; i++)
    if (strncmp(owned[i], "PATH=", 5) == 0)
      return owned[i] + 5;
  return NULL;
}

/* "prog arg1 arg2" for the log, cut to fit buf. */
static void join_argv(const char **argv, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; argv[i] && used + 1 < n; i++) {
    int w = snprintf(buf + used, n - used, "%s%s", i ? " " : "", argv[i]);
    if (w < 0)
      break;
    used += (size_t)w;
  }
  if (used >= n && n > 4)
    memcpy(buf + n - 4, "...", 4);
}

/* Looks prog up in path like execvp. Returns a malloc'd path or NULL. */
static char *search_path(const char *prog, const char *path) {
  const char *p = path;
  while (p) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    size_t n = len + strlen(prog) + 2;
    char *cand = malloc(n);
    if (!cand)
      return NULL;
    if (len == 0)
      snprintf(cand, n, "%s", prog); /* empty entry: current directory */
    else
      snprintf(cand, n, "%.*s/%s", (int)len, p, prog);
    struct stat st;
    if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
      return cand;
    free(cand);
    p = end ? end + 1 : NULL;
  }
  return NULL;
}

/* Waits for pid while forwarding what it reports (ch) and sending a
 * heartbeat every CHAN_POLL_NS. SIGCHLD is blocked by the caller, so an
 * exit between waitpid and sigtimedwait stays pending and wakes the wait
 * at once: a quick command costs no sleep. */
/* 5 reads a second: a killed run loses at most the last 0.2 s of its
 * curve, and a read of files that did not change costs two open(2)s. */
#define CHAN_POLL_NS 200000000L
static int wait_child(dagrun_ctx *ctx, const dagrun_host *host, pid_t pid,
                      const sigset_t *chld, chan *ch, int *wstatus) {
  int told_cancel = 0;
  for (;;) {
    pid_t r = waitpid(pid, wstatus, WNOHANG);
    if (r == pid)
      return 0;
    if (r < 0 && errno != EINTR) {
      host->fail(ctx, "waitpid: %s", strerror(errno));
      return -1;
    }
    chan_poll(ch, ctx, host, 0);
    struct timespec tick = {0, CHAN_POLL_NS};
    int sig = sigtimedwait(chld, NULL, &tick);
    if (sig < 0 && errno == EAGAIN)
      host->heartbeat(ctx);
    else if (sig < 0 && errno != EINTR) {
      host->fail(ctx, "sigtimedwait: %s", strerror(errno));
      return -1;
    }
    /* The group got the same SIGTERM; the command decides when to go. */
    if (!told_cancel && host->cancelled(ctx)) {
      told_cancel = 1;
      host->log(ctx, DAGRUN_LOG_WARN,
                "cancel requested; waiting for the command to exit");
    }
  }
}

static int exit_status_of(dagrun_ctx *ctx, const dagrun_host *host,
                          const char *prog, int wstatus) {
  if (WIFEXITED(wstatus)) {
    int code = WEXITSTATUS(wstatus);
    if (code != 0)
      host->fail(ctx, "command %s exited with status %d", prog, code);
    return code;
  }
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    const char *abbrev = sigabbrev_np(sig);
    host->fail(ctx, "command killed by signal %d (SIG%s)%s", sig,
               abbrev ? abbrev : "?",
               WCOREDUMP(wstatus) ? ", core dumped" : "");
    return 128 + sig;
  }
  host->fail(ctx, "command ended with wait status %#x", (unsigned)wstatus);
  return 1;
}

/* Gathers argv from the params; the strings belong to the host. */
static const char **build_argv(dagrun_ctx *ctx, const dagrun_host *host) {
  size_t n = 0;
  int shell = 0;
  if (host->param_list_size(ctx, "command", &n) != 0 || n == 0) {
    host->fail(ctx, "command is empty; give an argv list ([prog, arg, ...])");
    return NULL;
  }
  if (host->param_bool(ctx, "shell", &shell) != 0)
    shell = 0;
  const char **argv = calloc(n + 3, sizeof(char *));
  if (!argv) {
    host->fail(ctx, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    if (host->param_list_item(ctx, "command", i, &argv[i]) != 0) {
      host->fail(ctx, "command item %zu is not a string", i);
      free(argv);
      return NULL;
    }
  }
  if (shell) {
    if (n != 1) {
      host->fail(ctx,
                 "shell: true needs command as one string, got a list "
                 "of %zu items",
                 n);
      free(argv);
      return NULL;
    }
    argv[2] = argv[0];
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[3] = NULL;
  } else if (n == 1 && has_space(argv[0])) {
    host->fail(ctx, "command is one string with spaces; give an argv list "
                    "([prog, arg, ...]) or set shell: true");
    free(argv);
    return NULL;
  }
  return argv;
}

/* The command's working directory from the cwd param, relative to the DAG
 * file's folder, into *out (caller frees; NULL when the param is unset).
 * 0, or the exit status that fails the attempt. */
static int resolve_cwd(dagrun_ctx *ctx, const dagrun_host *host, char **out) {
  const char *cwd_param = NULL;
  *out = NULL;
  if (host->param_string(ctx, "cwd", &cwd_param) != 0 || !*cwd_param)
    return 0;
  const char *dag_dir = host->dir(ctx, DAGRUN_DIR_DAG);
  char *cwd;
  if (cwd_param[0] == '/' || !dag_dir || !*dag_dir) {
    cwd = strdup(cwd_param);
  } else {
    size_t len = strlen(dag_dir) + strlen(cwd_param) + 2;
    cwd = malloc(len);
    if (cwd)
      snprintf(cwd, len, "%s/%s", dag_dir, cwd_param);
  }
  if (!cwd) {
    host->fail(ctx, "out of memory");
    return EXEC_CANNOT_RUN;
  }
  /* Checked here because a failed chdir in the child reports ENOENT,
   * which would read as "command not found". */
  struct stat st;
  if (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    host->fail(ctx, "cwd is not a directory: %s", cwd);
    free(cwd);
    return EXEC_BAD_PARAMS;
  }
  *out = cwd;
  return 0;
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  const char **argv = build_argv(ctx, host);
  if (!argv)
    return EXEC_BAD_PARAMS;

  int status = EXEC_CANNOT_RUN;
  char **owned = NULL, **env = NULL, *cwd = NULL, *resolved = NULL;
  size_t nowned = 0;
  int have_actions = 0, have_attr = 0, masked = 0;
  chan *ch = NULL;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  sigset_t chld, old;

  const char *rank = getenv("DAGRUN_RANK");
  ch = chan_create(host->dir(ctx, DAGRUN_DIR_ATTEMPT), rank ? atoi(rank) : 0);
  if (!ch) {
    host->fail(ctx, "out of memory");
    goto out;
  }
  env = build_env(ctx, host, chan_environ(ch), &owned, &nowned);
  if (!env) {
    status = EXEC_BAD_PARAMS;
    goto out;
  }

  if ((status = resolve_cwd(ctx, host, &cwd)) != 0)
    goto out;
  status = EXEC_CANNOT_RUN;

  /* posix_spawnp searches the worker's PATH; a PATH set in env wins. */
  const char *prog = argv[0];
  const char *path = task_path(owned, nowned);
  if (!strchr(prog, '/') && path) {
    resolved = search_path(prog, path);
    if (!resolved) {
      host->fail(ctx, "command not found: %s", prog);
      status = EXEC_NOT_FOUND;
      goto out;
    }
  }

  int rc = posix_spawn_file_actions_init(&actions);
  if (rc == 0) {
    have_actions = 1;
    if (cwd)
      rc = posix_spawn_file_actions_addchdir_np(&actions, cwd);
  }
  if (rc == 0 && (rc = posix_spawnattr_init(&attr)) == 0)
    have_attr = 1;
  /* The child starts with an empty signal mask and default dispositions:
   * the worker ignores SIGPIPE, and ignored signals survive exec. */
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  if (rc == 0)
    rc = posix_spawnattr_setsigdefault(&attr, &all);
  if (rc == 0)
    rc = posix_spawnattr_setsigmask(&attr, &none);
  if (rc == 0)
    rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF |
                                             POSIX_SPAWN_SETSIGMASK);
  if (rc != 0) {
    host->fail(ctx, "cannot prepare posix_spawn: %s", strerror(rc));
    goto out;
  }

  /* Block SIGCHLD before the child exists, so its exit cannot be missed. */
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if ((rc = pthread_sigmask(SIG_BLOCK, &chld, &old)) != 0) {
    host->fail(ctx, "pthread_sigmask: %s", strerror(rc));
    goto out;
  }
  masked = 1;

  char shown[512];
  join_argv(argv, shown, sizeof(shown));
  host->log(ctx, DAGRUN_LOG_INFO, "running: %s", shown);
  pid_t pid;
  char *const *cargv = (char *const *)argv;
  if (resolved)
    rc = posix_spawn(&pid, resolved, &actions, &attr, cargv, env);
  else
    rc = posix_spawnp(&pid, prog, &actions, &attr, cargv, env);
  if (rc != 0) {
    if (rc == ENOENT) {
      host->fail(ctx, "command not found: %s", prog);
      status = EXEC_NOT_FOUND;
    } else if (rc == EACCES || rc == ENOEXEC) {
      host->fail(ctx, "command cannot be run: %s: %s", prog, strerror(rc));
      status = EXEC_CANNOT_RUN;
    } else {
      host->fail(ctx, "cannot start %s: %s", prog, strerror(rc));
      status = EXEC_CANNOT_RUN;
    }
    goto out;
  }

  int wstatus = 0;
  int waited = wait_child(ctx, host, pid, &chld, ch, &wstatus);
  /* Whatever the end, the curve up to it is kept. */
  chan_poll(ch, ctx, host, 1);
  if (waited != 0) {
    status = 1;
    goto out;
  }
  status = exit_status_of(ctx, host, prog, wstatus);
  /* Outputs are what a command that succeeded leaves for downstream. */
  if (status == 0 && chan_outputs(ch, ctx, host) != 0)
    status = 1;

out:
  if (masked)
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (have_attr)
    (void)posix_spawnattr_destroy(&attr);
  if (have_actions)
    (void)posix_spawn_file_actions_destroy(&actions);
  for (size_t i = 0; i < nowned; i++)
    free(owned[i]);
  free(owned);
  free(env);
  chan_destroy(ch);
  free(cwd);
  free(resolved);
  free(argv);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "exec",
    "1.0.0",
    "Runs a command (argv list, no shell unless shell: true).",
    params,
    run,
    NULL, /* no choices */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
