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

#include "lib/channels.h"
#include "lib/execcmd.h"

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
  char **env = NULL;
  char **extra = calloc(nextra + 1, sizeof(char *));
  if (!extra) {
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
      if (execcmd_sets(dagrun_vars[d], k, strlen(k)))
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
  free(env);
  env = execcmd_env(environ, extra, nextra, dagrun_vars);
  if (!env) {
    host->fail(ctx, "out of memory");
    goto fail;
  }
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

/* Waits for pid while forwarding what it reports (ch) and sending a
 * heartbeat every CHAN_POLL_NS. SIGCHLD is blocked by the caller, so an
 * exit between waitpid and sigtimedwait stays pending and wakes the wait
 * at once: a quick command costs no sleep. */
/* 5 reads a second: a killed run loses at most the last 0.2 s of its
 * curve, and a read of files that did not change costs two open(2)s. */
#define CHAN_POLL_NS 200000000L

/* The group got the same SIGTERM; the command decides when to go. Said
 * once. */
static void tell_cancel(dagrun_ctx *ctx, const dagrun_host *host, int *told) {
  if (*told)
    return;
  *told = 1;
  host->log(ctx, DAGRUN_LOG_WARN,
            "cancel requested; waiting for the command to exit");
}

static int wait_child(dagrun_ctx *ctx, const dagrun_host *host, pid_t pid,
                      const sigset_t *chld, chan *ch, int *wstatus) {
  int told_cancel = 0;
  for (;;) {
    pid_t r = waitpid(pid, wstatus, WNOHANG);
    if (r == pid) {
      /* The group's SIGTERM reached this thread before the command's exit
       * could be seen (its handler ran on the way out of the syscall). */
      if (host->cancelled(ctx))
        tell_cancel(ctx, host, &told_cancel);
      return 0;
    }
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
    if (host->cancelled(ctx))
      tell_cancel(ctx, host, &told_cancel);
  }
}

/* Gathers argv from the params (execcmd_argv); the strings belong to the
 * host. */
static const char **build_argv(dagrun_ctx *ctx, const dagrun_host *host) {
  size_t n = 0;
  int shell = 0;
  if (host->param_list_size(ctx, "command", &n) != 0)
    n = 0;
  if (host->param_bool(ctx, "shell", &shell) != 0)
    shell = 0;
  const char **items = calloc(n + 1, sizeof(char *));
  if (!items) {
    host->fail(ctx, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    if (host->param_list_item(ctx, "command", i, &items[i]) != 0) {
      host->fail(ctx, "command item %zu is not a string", i);
      free(items);
      return NULL;
    }
  }
  char msg[256];
  const char **argv = execcmd_argv(items, n, shell, msg, sizeof msg);
  free(items);
  if (!argv)
    host->fail(ctx, "%s", msg);
  return argv;
}

/* The "running:" line, whole: its secrets are masked downstream (the
 * worker's log goes through the run's masker), and a cut through one
 * would leave its first part unmatched, and so shown. */
static void log_command(dagrun_ctx *ctx, const dagrun_host *host,
                        const char *const *argv) {
  char *line = execcmd_join(argv);
  if (!line)
    return; /* the line is a courtesy; the run goes on */
  host->log(ctx, DAGRUN_LOG_INFO, "running: %s", line);
  free(line);
}

/* Sets up the child's attributes: an empty signal mask and default
 * dispositions (the worker ignores SIGPIPE, and ignored signals survive
 * exec), and the working directory. 0 or an errno value. */
static int spawn_setup(posix_spawn_file_actions_t *actions,
                       posix_spawnattr_t *attr, const char *cwd) {
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  int rc = 0;
  if (cwd)
    rc = posix_spawn_file_actions_addchdir_np(actions, cwd);
  if (rc == 0)
    rc = posix_spawnattr_setsigdefault(attr, &all);
  if (rc == 0)
    rc = posix_spawnattr_setsigmask(attr, &none);
  if (rc == 0)
    rc = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGDEF |
                                            POSIX_SPAWN_SETSIGMASK);
  return rc;
}

/* Runs argv with env in cwd, forwarding its report files (ch) until it
 * ends: the attempt's exit status. */
static int run_command(dagrun_ctx *ctx, const dagrun_host *host,
                       const char **argv, char **env, const char *cwd,
                       const char *resolved, chan *ch) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  char msg[512];
  if (posix_spawn_file_actions_init(&actions) != 0 ||
      posix_spawnattr_init(&attr) != 0) {
    host->fail(ctx, "cannot prepare posix_spawn: out of memory");
    return EXECCMD_CANNOT_RUN;
  }
  int status = EXECCMD_CANNOT_RUN;
  int rc = spawn_setup(&actions, &attr, cwd);
  /* Block SIGCHLD before the child exists, so its exit cannot be missed. */
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (rc != 0) {
    host->fail(ctx, "cannot prepare posix_spawn: %s", strerror(rc));
    goto out;
  }
  if ((rc = pthread_sigmask(SIG_BLOCK, &chld, &old)) != 0) {
    host->fail(ctx, "pthread_sigmask: %s", strerror(rc));
    goto out;
  }
  log_command(ctx, host, argv);
  pid_t pid;
  char *const *cargv = (char *const *)argv;
  if (resolved)
    rc = posix_spawn(&pid, resolved, &actions, &attr, cargv, env);
  else
    rc = posix_spawnp(&pid, argv[0], &actions, &attr, cargv, env);
  if (rc != 0) {
    status = execcmd_spawn_failed(argv[0], rc, msg, sizeof msg);
    host->fail(ctx, "%s", msg);
  } else {
    int wstatus = 0;
    int waited = wait_child(ctx, host, pid, &chld, ch, &wstatus);
    /* Whatever the end, the curve up to it is kept. */
    chan_poll(ch, ctx, host, 1);
    status = waited != 0 ? 1 : execcmd_status(argv[0], wstatus, msg,
                                              sizeof msg);
    if (waited == 0 && status != 0)
      host->fail(ctx, "%s", msg);
    /* Outputs are what a command that succeeded leaves for downstream. */
    if (status == 0 && chan_outputs(ch, ctx, host) != 0)
      status = 1;
  }
  (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
out:
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return status;
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  const char **argv = build_argv(ctx, host);
  if (!argv)
    return EXECCMD_BAD_PARAMS;
  int status = EXECCMD_CANNOT_RUN;
  char **owned = NULL, **env = NULL, *cwd = NULL, *resolved = NULL;
  size_t nowned = 0;
  char msg[512];
  const char *rank = getenv("DAGRUN_RANK");
  chan *ch =
      chan_create(host->dir(ctx, DAGRUN_DIR_ATTEMPT), rank ? atoi(rank) : 0);
  if (!ch) {
    host->fail(ctx, "out of memory");
    goto out;
  }
  env = build_env(ctx, host, chan_environ(ch), &owned, &nowned);
  if (!env) {
    status = EXECCMD_BAD_PARAMS;
    goto out;
  }
  const char *cwd_param = NULL;
  if (host->param_string(ctx, "cwd", &cwd_param) != 0)
    cwd_param = NULL;
  status = execcmd_cwd(host->dir(ctx, DAGRUN_DIR_DAG), cwd_param, &cwd, msg,
                       sizeof msg);
  if (status != 0) {
    host->fail(ctx, "%s", msg);
    goto out;
  }
  /* posix_spawnp searches the worker's PATH; a PATH set in env wins. */
  const char *path = execcmd_path_of(owned, nowned);
  if (!strchr(argv[0], '/') && path &&
      !(resolved = execcmd_search_path(argv[0], path))) {
    host->fail(ctx, "command not found: %s", argv[0]);
    status = EXECCMD_NOT_FOUND;
    goto out;
  }
  status = run_command(ctx, host, argv, env, cwd, resolved, ch);
out:
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
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
