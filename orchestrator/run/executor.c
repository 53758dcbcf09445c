#include "executor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "lib/clock.h"

extern char **environ;

/* How long to wait for the rest of a worker's messages after it exited.
 * The pipe normally reports EOF at once; it stays open only when a
 * process that outlived the worker (and escaped its group) kept fd 3. */
#define DRAIN_TIMEOUT_MS 500
/* Handles per attempt: the exit watch, the pipe and four timers (and the
 * log pipe when the run has secrets). A launched rank has no exit watch. */
#define ATTEMPT_HANDLES 6
/* A launched rank's join line, "dagrun-join TOKEN RANK", is far shorter;
 * a connection that sends this much without a newline is not a rank. */
#define JOIN_LINE_MAX 256
/* A launcher signalled once its ranks are gone or their grace is over
 * gets this long to end them its own way and exit before SIGKILL (Open
 * MPI's mpirun kills its ranks 1 s after it forwards the SIGTERM). */
#define LAUNCHER_STOP_MS 5000
/* A launcher whose ranks have all ended gets this long to see it and exit
 * on its own before its SIGTERM. Open MPI 4.1's mpirun, signalled while it
 * aborts a job whose rank exited non-zero (as a stopped rank does), says
 * "abort is already in progress" and segfaults in PMIx_Finalize: a stack
 * trace in the attempt's log. Unsignalled it exits 2.1 s after its ranks
 * (measured), once its own SIGTERM-then-SIGKILL sweep is over. */
#define LAUNCHER_EXIT_MS 4000
/* On a forced stop the ranks are told to die at once; their launcher gets
 * SIGTERM and this long to see them go and end its job before SIGKILL:
 * srun, killed outright, leaves its Slurm job allocated (measured: still
 * running a minute later), where on SIGTERM it ends the job. A second
 * forced stop does not wait. */
#define LAUNCHER_FORCE_MS 2000
/* The per-attempt secret a launched rank proves itself with: random bytes,
 * sent as hex. */
#define TOKEN_BYTES 16
/* Where a worker finds its attempt description when the one on disk is
 * masked: a memfd, named to it as /dev/fd/4. */
#define ATTEMPT_FD 4

typedef struct attempt attempt;
typedef struct proc proc;

typedef struct joiner joiner;

/* One process of an attempt: rank `rank` of its gang (rank 0 alone when
 * the task is not a gang), or the launcher (rank -1) that started the
 * gang's ranks. A rank under a launcher is virtual: not our child, known
 * only by the connection it makes to the rendezvous; it has "exited" when
 * that closes, with the status of its result message. */
struct proc {
  attempt *at;
  int rank;
  int virt; /* a rank under a launcher: no process handle */
  int connected, got_result, result_status;
  int told_stop;     /* a launched rank: "stop" (1) or "kill" (2) sent on
                        its connection */
  int term_deferred; /* the launcher: its SIGTERM waits for its ranks */
  int forced;        /* the launcher: a forced stop signalled it */
  pid_t pid;         /* the worker, leader of its own session and group */
  int pidfd;         /* readable once the worker has exited */
  uv_poll_t exit_watch;
  uv_pipe_t pipe;
  uv_timer_t timeout_timer, heartbeat_timer, kill_timer, drain_timer;
  /* With secrets: stdout and stderr come through log_pipe, masked on
   * their way to log_fd. Without, the worker writes the log itself. */
  uv_pipe_t log_pipe;
  secrets_stream *masker;
  int log_fd; /* -1 when not ours */
  int open_handles;
  int exited, eof, log_eof, finished;
  exec_end stop_reason; /* why we stopped it; EXEC_EXITED if we did not */
  int64_t exit_status;
  int term_signal;
  uint64_t heartbeat_ms, grace_ms;
  sbuf line;   /* partial protocol line */
  int dropping; /* the line so far was over PROTO_LINE_MAX: skip to its end */
  char *error; /* from the result message */
  execdirect *direct; /* the command itself runs, not a worker */
};

/* One attempt: its processes, one per rank, and what became of them. It
 * lives until every rank has finished (exited, pipes drained); a proc
 * lives until its handles are closed, and the attempt no longer points
 * to it once it finished. */
struct attempt {
  executor *x;
  attempt *prev, *next;
  size_t task;
  char *dir; /* its directory (DAGRUN_ATTEMPT_DIR), whose orphans wait */
  int n;        /* world size */
  proc **procs; /* per rank; NULL once that rank finished */
  pid_t pid0;   /* rank 0's */
  int n_finished;
  /* Why the attempt ends early: EXEC_EXITED while nothing went wrong;
   * EXEC_TIMED_OUT or EXEC_CANCELLED for the whole gang; otherwise the
   * end of rank failed_rank, the first that failed. */
  exec_end cause;
  int ended;       /* cause is set */
  int failed_rank; /* -1: none */
  sbuf stopped;    /* "0, 1, 3": the ranks stopped because of it */
  exec_rank_end *ends;
  proc *launcher; /* mpirun or srun; NULL when none or finished */
  int has_launcher;
  exec_rank_end launcher_end;
  /* The rendezvous of a launched gang: the TCP listener (NULL once every
   * rank joined or the attempt is over), the connections that have not
   * said which rank they are yet, the token they must send, the address
   * the ranks were given ("host:port") and the launcher's log, where
   * refused connections are written. */
  uv_tcp_t *rdv;
  joiner *joiners;
  char token[2 * TOKEN_BYTES + 1];
  char *rdv_addr;
  char *log_path;
  char *error; /* the failed rank's (or rank 0's) result message */
  double started;
};

struct executor {
  uv_loop_t *loop;
  char *worker_exe;
  /* The guard of the run's attempts (host/guard.h): the write end of its
   * stdin (-1 when it could not start), and its pid. */
  int guard_fd;
  pid_t guard_pid;
  char *run_dir; /* the guard's: what it stops when dagrun dies */
  orphans *orphans;
  exec_callbacks cb;
  attempt *running; /* doubly linked list */
  size_t n_running;
};

/* ---- what orphans.h asks of the executor ---- */

static int started_here(void *ud, pid_t pid) {
  executor *x = ud;
  if (pid == x->guard_pid)
    return 1;
  for (const attempt *at = x->running; at; at = at->next) {
    if (at->launcher && at->launcher->pid == pid)
      return 1;
    for (int r = 0; r < at->n; r++)
      if (at->procs[r] && at->procs[r]->pid == pid)
        return 1;
  }
  return 0;
}

static int dir_running(void *ud, const char *dir) {
  executor *x = ud;
  for (const attempt *at = x->running; at; at = at->next)
    if (at->dir && strcmp(at->dir, dir) == 0)
      return 1;
  return 0;
}

static int any_running(void *ud) { return ((executor *)ud)->n_running > 0; }

static int guard_start(executor *x);

executor *executor_create(uv_loop_t *loop, const char *worker_exe,
                          const char *run_dir, const exec_callbacks *cb) {
  executor *x = xcalloc(1, sizeof(*x));
  x->loop = loop;
  x->worker_exe = xstrdup(worker_exe);
  x->run_dir = xstrdup(run_dir);
  x->guard_fd = -1;
  x->cb = *cb;
  /* Started now, not at the first attempt: the run store records it
   * before any attempt runs or pool slot is taken, so that what a killed
   * dagrun's attempts hold stays held while they stop (owner.h). */
  if (guard_start(x) != 0)
    x->guard_pid = -1; /* a run without it works on */
  orphans_owner owner = {started_here, dir_running, any_running, x};
  x->orphans = orphans_create(loop, &owner);
  return x;
}

void executor_destroy(executor *x) {
  if (!x)
    return;
  orphans_finish(x->orphans);
  if (x->guard_fd >= 0) {
    /* The run is over and its orphans were stopped: the guard may go. */
    (void)!write(x->guard_fd, ".\n", 2);
    close(x->guard_fd);
  }
  if (x->guard_pid > 0) {
    /* Every attempt is over: the guard sees the end of its input with
     * nothing listed and exits at once. */
    while (waitpid(x->guard_pid, NULL, 0) < 0 && errno == EINTR)
      ;
  }
  free(x->worker_exe);
  free(x->run_dir);
  free(x);
}

size_t executor_running(const executor *x) { return x->n_running; }

int executor_guard_pid(const executor *x) {
  return x->guard_pid > 0 ? (int)x->guard_pid : 0;
}

static void on_handle_closed(uv_handle_t *h) {
  proc *a = h->data;
  if (h == (uv_handle_t *)&a->exit_watch && a->pidfd >= 0) {
    close(a->pidfd); /* uv_poll never owns its fd */
    a->pidfd = -1;
  }
  if (--a->open_handles == 0) {
    secrets_stream_destroy(a->masker);
    if (a->log_fd >= 0)
      close(a->log_fd);
    sbuf_free(&a->line);
    free(a->error);
    execdirect_destroy(a->direct);
    free(a);
  }
}

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h))
    uv_close(h, on_handle_closed);
}

static void signal_group(proc *a, int sig) {
  /* spawn_worker starts the worker in a new session (POSIX_SPAWN_SETSID),
   * so it leads its own process group and its pid names the group of
   * everything it started. */
  if (a->pid > 0)
    kill(-a->pid, sig);
}

static void rdv_close(attempt *at);

/* Spawn attributes of every process the executor starts: a new session
 * (its own process group, signalled as a whole), no signal blocked, every
 * signal at its default (dagrun ignores SIGPIPE, and ignored signals
 * survive exec). 0 or an errno value. */
static int new_session(posix_spawnattr_t *attr) {
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  int rc = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSID |
                                              POSIX_SPAWN_SETSIGMASK |
                                              POSIX_SPAWN_SETSIGDEF);
  if (!rc)
    rc = posix_spawnattr_setsigmask(attr, &none);
  if (!rc)
    rc = posix_spawnattr_setsigdefault(attr, &all);
  return rc;
}

/* Starts the guard (host/guard.h) with its stdin a pipe of ours, in a
 * session of its own. 0, or -1 when it cannot run (the run goes on;
 * a worker-less attempt is then not stopped should dagrun die, as an
 * attempt started before the guard existed). */
static int guard_start(executor *x) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  int rc = posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
  if (!rc)
    rc = posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (!rc)
    rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (!rc)
    rc = new_session(&attr);
  char *argv[] = {"dagrun-worker", "__guard", x->run_dir, NULL};

  if (!rc)
    rc = posix_spawn(&x->guard_pid, x->worker_exe, &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[0]);
  if (rc != 0) {
    close(fds[1]);
    return -1;
  }
  x->guard_fd = fds[1];
  return 0;
}

/* Tells the guard that process group v began ('+') or is over ('-'), or
 * that an attempt began whose kill_grace is v ms ('~'). A line is far
 * below PIPE_BUF, and the guard reads as it comes: the write neither
 * splits nor, in practice, waits. */
static void guard_tell(executor *x, char what, long long v) {
  if (x->guard_fd < 0)
    return;
  char line[32];
  int n = snprintf(line, sizeof line, "%c %lld\n", what, v);
  if (write(x->guard_fd, line, (size_t)n) != n) {
    close(x->guard_fd); /* gone: nothing more to tell it */
    x->guard_fd = -1;
  }
}

static void attempt_free(attempt *at) {
  free(at->dir);
  free(at->rdv_addr);
  free(at->log_path);
  free(at->procs);
  free(at->ends);
  free(at->error);
  sbuf_free(&at->stopped);
  free(at);
}

/* Every rank has finished: the attempt's result goes to on_exit. */
static void attempt_finish(attempt *at) {
  executor *x = at->x;
  exec_result r = {0};
  r.duration_s = clock_monotonic() - at->started;
  r.error = at->error;
  r.n_ranks = at->n;
  r.failed_rank = at->failed_rank;
  r.stopped = at->stopped.s ? at->stopped.s : "";
  r.ranks = at->ends;
  r.rendezvous = at->rdv_addr;
  r.launcher = at->has_launcher ? &at->launcher_end : NULL;
  const exec_rank_end *e =
      &at->ends[at->failed_rank >= 0 ? at->failed_rank : 0];
  /* Every rank said it succeeded but the launcher failed: its status. */
  if (!at->ended && at->has_launcher &&
      (at->launcher_end.exit_code != 0 || at->launcher_end.term_signal))
    e = &at->launcher_end;
  if (at->cause == EXEC_EXITED || at->cause == EXEC_SIGNALED) {
    if (e->term_signal) {
      r.end = EXEC_SIGNALED;
      r.term_signal = e->term_signal;
    } else {
      r.end = EXEC_EXITED;
      r.exit_code = e->exit_code;
    }
  } else {
    r.end = at->cause;
    r.exit_code = e->exit_code < 0 ? 0 : e->exit_code;
    r.term_signal = e->term_signal;
  }
  rdv_close(at);
  /* Unlink before the callback: it may start the next attempt. */
  if (at->prev)
    at->prev->next = at->next;
  else
    x->running = at->next;
  if (at->next)
    at->next->prev = at->prev;
  x->n_running--;
  /* What it left running outside its group is now an orphan. */
  orphans_sweep(x->orphans);
  x->cb.on_exit(x->cb.ud, at->task, &r);
  attempt_free(at);
}

/* Rank a has exited and its pipes are drained. */
static void finish(proc *a) {
  if (a->finished || !a->exited || !a->eof || !a->log_eof)
    return;
  a->finished = 1;
  attempt *at = a->at;
  exec_rank_end *e = a->rank < 0 ? &at->launcher_end : &at->ends[a->rank];
  if (a->term_signal) {
    e->exit_code = -1;
    e->term_signal = a->term_signal;
  } else {
    e->exit_code = (int)a->exit_status;
  }
  if (a->rank < 0)
    e->stopped = a->stop_reason != EXEC_EXITED;
  if (a->rank >= 0 &&
      (a->rank == at->failed_rank || (at->failed_rank < 0 && a->rank == 0))) {
    free(at->error);
    at->error = a->error ? xstrdup(a->error) : NULL;
  }
  if (a->rank < 0)
    at->launcher = NULL;
  else
    at->procs[a->rank] = NULL;
  if (!a->virt)
    close_handle((uv_handle_t *)&a->exit_watch);
  close_handle((uv_handle_t *)&a->pipe);
  close_handle((uv_handle_t *)&a->timeout_timer);
  close_handle((uv_handle_t *)&a->heartbeat_timer);
  close_handle((uv_handle_t *)&a->kill_timer);
  close_handle((uv_handle_t *)&a->drain_timer);
  if (a->masker)
    close_handle((uv_handle_t *)&a->log_pipe);
  if (++at->n_finished == at->n + at->has_launcher)
    attempt_finish(at);
}

static void on_kill_timer(uv_timer_t *t) {
  proc *a = t->data;
  signal_group(a, SIGKILL);
}

/* Tells a launched rank, on its connection, to stop ("stop\n": its
 * worker cancels the stage as a SIGTERM would, worker.h) or, when force,
 * to die now ("kill\n": its worker SIGKILLs itself and what it started).
 * A launcher's own SIGTERM would give the rank only the launcher's grace,
 * not the task's: Open MPI's mpirun sends SIGKILL 1 s after it. And a
 * launcher killed by SIGKILL cannot end its ranks at all: only this
 * reaches them then. */
static void tell_stop(proc *a, int force) {
  uv_os_fd_t fd;
  int told = force ? 2 : 1;
  if (a->told_stop >= told || !a->connected || a->exited ||
      uv_fileno((uv_handle_t *)&a->pipe, &fd) != 0)
    return;
  a->told_stop = told;
  /* The only bytes sent on this connection besides "ok\n": they fit its
   * send buffer, so a plain write cannot block or be short. A rank that
   * is gone by now shows as the end of its stream. */
  (void)!write(fd, force ? "kill\n" : "stop\n", 5);
}

/* Whether a rank of the launched gang is connected and running: one that
 * can be told to stop, and that the launcher must not end before its
 * grace. */
static int ranks_listening(const attempt *at) {
  for (int r = 0; r < at->n; r++)
    if (at->procs[r] && at->procs[r]->connected && !at->procs[r]->exited)
      return 1;
  return 0;
}

/* SIGTERM to the launcher: it ends its remaining ranks; SIGKILL if it
 * has not exited LAUNCHER_STOP_MS later. */
static void launcher_term(proc *a) {
  a->term_deferred = 0;
  signal_group(a, SIGTERM);
  uv_timer_start(&a->kill_timer, on_kill_timer, LAUNCHER_STOP_MS, 0);
}

/* The launched ranks' grace is over and some still run. */
static void on_launcher_grace(uv_timer_t *t) { launcher_term(t->data); }

/* Stops one rank for a reason: SIGTERM now, SIGKILL after the grace
 * (force: SIGKILL now). A launched rank is told to stop instead (it is
 * not our child; force: to die now); its launcher is signalled once
 * every rank it started has ended or the grace is over, whichever comes
 * first (force: SIGTERM now, SIGKILL LAUNCHER_FORCE_MS later). */
static void stop(proc *a, exec_end reason, int force) {
  if (a->exited)
    return;
  if (a->stop_reason == EXEC_EXITED)
    a->stop_reason = reason;
  uv_timer_stop(&a->timeout_timer);
  uv_timer_stop(&a->heartbeat_timer);
  if (a->virt) {
    tell_stop(a, force);
    return;
  }
  if (force && a->rank < 0 && !a->forced) {
    a->forced = 1;
    a->term_deferred = 0;
    uv_timer_stop(&a->kill_timer);
    signal_group(a, SIGTERM);
    uv_timer_start(&a->kill_timer, on_kill_timer, LAUNCHER_FORCE_MS, 0);
    return;
  }
  if (force) {
    uv_timer_stop(&a->kill_timer);
    signal_group(a, SIGKILL);
    return;
  }
  if (uv_is_active((uv_handle_t *)&a->kill_timer))
    return; /* already on its way out */
  if (a->rank < 0 && ranks_listening(a->at)) {
    a->term_deferred = 1;
    uv_timer_start(&a->kill_timer, on_launcher_grace, a->grace_ms, 0);
    return;
  }
  signal_group(a, SIGTERM);
  uv_timer_start(&a->kill_timer, on_kill_timer, a->grace_ms, 0);
}

/* The attempt ends early for cause (a rank's failure when rank >= 0, else
 * a timeout or cancel of the whole gang): every rank still running is
 * stopped. The first cause is the one reported. */
static void attempt_stop(attempt *at, exec_end cause, int rank, int force) {
  if (!at->ended) {
    at->ended = 1;
    at->cause = cause;
    at->failed_rank = rank;
  }
  for (int r = 0; r < at->n; r++) {
    proc *p = at->procs[r];
    if (!p || p->exited)
      continue;
    int already = p->stop_reason != EXEC_EXITED;
    stop(p, r == rank || rank < 0 ? cause : EXEC_CANCELLED, force);
    if (r != rank && !already && !at->ends[r].stopped) {
      at->ends[r].stopped = 1;
      if (at->stopped.n)
        sbuf_puts(&at->stopped, ", ");
      sbuf_printf(&at->stopped, "%d", r);
    }
  }
  /* After its ranks: on a forced stop they are told to die before it is
   * signalled. */
  if (at->launcher)
    stop(at->launcher, rank < 0 ? cause : EXEC_CANCELLED, force);
}

static void on_timeout(uv_timer_t *t) {
  proc *a = t->data;
  attempt_stop(a->at, EXEC_TIMED_OUT, -1, 0);
}

static void on_heartbeat_missed(uv_timer_t *t) {
  proc *a = t->data;
  attempt_stop(a->at, EXEC_HUNG, a->rank, 0);
}

/* The log pipe is done: what the masker held back goes to the log. */
static void log_ended(proc *a) {
  if (a->log_eof)
    return;
  uv_read_stop((uv_stream_t *)&a->log_pipe);
  secrets_stream_flush(a->masker);
  a->log_eof = 1;
}

/* A virtual rank's socket closed (or never opened before its launcher
 * ended): it has exited, with the status it reported, or 255 when it
 * reported none (it crashed, or was killed). */
static void virt_exited(proc *a) {
  if (a->exited)
    return;
  a->exited = 1;
  a->exit_status = a->got_result ? a->result_status : 255;
  if (!a->connected)
    a->at->ends[a->rank].never_joined = 1;
  if (!a->got_result) {
    free(a->error);
    a->error = a->connected
                   ? xstrdup("ended without a result (crashed or killed)")
                   : xasprintf("never connected to dagrun's rendezvous at %s "
                               "(see the launcher's output in the attempt's "
                               "log)",
                               a->at->rdv_addr);
  }
  uv_timer_stop(&a->timeout_timer);
  uv_timer_stop(&a->heartbeat_timer);
  if (a->stop_reason == EXEC_EXITED && a->exit_status)
    attempt_stop(a->at, EXEC_EXITED, a->rank, 0);
  /* The last rank the launcher's SIGTERM waited for is gone: the
   * launcher normally exits on its own now, and is signalled only if it
   * has not LAUNCHER_EXIT_MS later. */
  proc *l = a->at->launcher;
  if (l && !l->exited && l->term_deferred && !ranks_listening(a->at)) {
    uv_timer_stop(&l->kill_timer);
    uv_timer_start(&l->kill_timer, on_launcher_grace, LAUNCHER_EXIT_MS, 0);
  }
}

static void on_drain_timeout(uv_timer_t *t) {
  proc *a = t->data;
  uv_read_stop((uv_stream_t *)&a->pipe);
  a->eof = 1;
  log_ended(a);
  if (a->virt)
    virt_exited(a);
  finish(a);
}

/* A worker-less exec attempt's messages, delivered as a worker's. */
static void direct_emit(void *ud, const proto_msg *m) {
  proc *a = ud;
  a->at->x->cb.on_message(a->at->x->cb.ud, a->at->task, m);
}

static void on_direct_poll(uv_timer_t *t) {
  proc *a = t->data;
  execdirect_poll(a->direct, direct_emit, a, 0);
}

/* The command of a worker-less attempt ended: its status is what its
 * worker would have exited with (a command killed by a signal it did
 * not get from dagrun is 128 + the signal, as a shell says), with the
 * reason as the worker's result would give it. */
static void direct_exited(proc *a, int wstatus) {
  int stopped = a->stop_reason != EXEC_EXITED;
  char *error = NULL;
  int status = execdirect_end(a->direct, wstatus, stopped, direct_emit, a,
                              &error);
  free(a->error);
  a->error = error;
  if (!stopped) {
    a->term_signal = 0;
    a->exit_status = status;
  }
}

/* The pidfd turned readable: the worker exited. Until it is reaped its
 * zombie keeps its pid, so its process group cannot be a stranger's yet:
 * kill what it left running in the group first, then reap. */
static void on_worker_exit(uv_poll_t *w, int status, int events) {
  proc *a = w->data;
  int wstatus;
  pid_t r;
  (void)status;
  (void)events;
  signal_group(a, SIGKILL);
  do
    r = waitpid(a->pid, &wstatus, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0)
    return; /* not yet: spurious wake-up */
  uv_poll_stop(w);
  a->exited = 1;
  if (r < 0) {
    a->exit_status = 255; /* reaped elsewhere: cannot tell; count a failure */
  } else if (WIFSIGNALED(wstatus)) {
    a->term_signal = WTERMSIG(wstatus);
  } else {
    a->exit_status = WEXITSTATUS(wstatus);
  }
  if (a->direct) {
    guard_tell(a->at->x, '-', a->pid);
    direct_exited(a, r < 0 ? 255 << 8 : wstatus);
  }
  uv_timer_stop(&a->timeout_timer);
  uv_timer_stop(&a->heartbeat_timer);
  uv_timer_stop(&a->kill_timer);
  /* A rank that failed on its own stops the rest of its gang. A launcher
   * stops its own ranks; those still connected say how they ended, and
   * those that do not by then are counted as killed. */
  if (a->rank < 0) {
    attempt *at = a->at;
    for (int k = 0; k < at->n; k++)
      if (at->procs[k] && !at->procs[k]->eof)
        uv_timer_start(&at->procs[k]->drain_timer, on_drain_timeout,
                       DRAIN_TIMEOUT_MS, 0);
  } else if (a->stop_reason == EXEC_EXITED &&
             (a->term_signal || a->exit_status)) {
    attempt_stop(a->at, a->term_signal ? EXEC_SIGNALED : EXEC_EXITED, a->rank,
                 0);
  }
  if (!a->eof || !a->log_eof)
    uv_timer_start(&a->drain_timer, on_drain_timeout, DRAIN_TIMEOUT_MS, 0);
  finish(a);
}

static void handle_line(proc *a, const char *s, size_t n) {
  if (n == 0)
    return;
  if (a->heartbeat_ms && !a->exited && a->stop_reason == EXEC_EXITED)
    uv_timer_again(&a->heartbeat_timer);
  proto_msg m;
  if (proto_parse(s, n, &m) != 0)
    return; /* a stray line is not worth failing the task over */
  if (m.type == PROTO_RESULT) {
    a->got_result = 1;
    a->result_status = m.status;
  }
  if (m.type == PROTO_RESULT && m.text) {
    free(a->error);
    a->error = xstrdup(m.text);
  }
  /* Progress, metrics and outputs are rank 0's; the other ranks' log
   * lines are in their own log files already (the worker writes both). */
  if (a->rank == 0)
    a->at->x->cb.on_message(a->at->x->cb.ud, a->at->task, &m);
  proto_msg_free(&m);
}

/* One buffer serves every read: the loop is single-threaded and on_read
 * consumes the data before returning. */
static char read_buffer[65536];

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  buf->base = read_buffer;
  buf->len = sizeof(read_buffer);
}

/* A message line over PROTO_LINE_MAX is not held: what came of it is
 * freed, the rest skipped, and the run's view told. */
static void drop_line(proc *a) {
  if (!a->dropping && a->rank == 0) {
    char *text = xasprintf("dagrun: a message of the worker's over %u bytes "
                           "was dropped (an output value may hold 16 MiB)",
                           PROTO_LINE_MAX);
    proto_msg m = {.type = PROTO_LOG, .level = 2, .text = text};
    a->at->x->cb.on_message(a->at->x->cb.ud, a->at->task, &m);
    free(text);
  }
  a->dropping = 1;
  sbuf_free(&a->line);
}

/* Message bytes from rank a, split into lines. */
static void consume(proc *a, const char *p, size_t n) {
  const char *end = p + n;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (a->dropping) { /* the rest of a line too long to keep */
      if (nl)
        a->dropping = 0;
      p = nl ? nl + 1 : end;
      continue;
    }
    size_t part = (size_t)((nl ? nl : end) - p);
    if (a->line.n + part > PROTO_LINE_MAX) {
      drop_line(a);
      continue;
    }
    if (!nl) {
      sbuf_add(&a->line, p, (size_t)(end - p));
      break;
    }
    if (a->line.n) {
      sbuf_add(&a->line, p, (size_t)(nl - p));
      handle_line(a, a->line.s, a->line.n);
      a->line.n = 0;
    } else {
      handle_line(a, p, (size_t)(nl - p));
    }
    p = nl + 1;
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  proc *a = s->data;
  if (nread > 0) {
    consume(a, buf->base, (size_t)nread);
  } else if (nread < 0) {
    if (a->line.n) {
      handle_line(a, a->line.s, a->line.n);
      a->line.n = 0;
    }
    uv_read_stop(s);
    a->eof = 1;
    if (a->log_eof)
      uv_timer_stop(&a->drain_timer);
    if (a->virt)
      virt_exited(a);
    finish(a);
  }
}

/* Writes masked log bytes. A full disk loses log lines, not the run. */
static void log_sink(void *ud, const char *p, size_t n) {
  proc *a = ud;
  while (n > 0) {
    ssize_t w = write(a->log_fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return;
    p += w;
    n -= (size_t)w;
  }
}

static void on_log_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  proc *a = s->data;
  if (nread > 0) {
    secrets_stream_write(a->masker, buf->base, (size_t)nread);
  } else if (nread < 0) {
    log_ended(a);
    if (a->eof)
      uv_timer_stop(&a->drain_timer);
    finish(a);
  }
}

static uint64_t to_ms(double s) { return s > 0 ? (uint64_t)(s * 1000.0) : 0; }

/* Starts `dagrun-worker __worker ATTEMPT_JSON` in a new session with stdin from
 * /dev/null, stdout and stderr on the log, fd 3 the message pipe, every
 * signal at its default and none blocked. posix_spawn (a vfork underneath)
 * rather than fork: fork copies the page tables of an orchestrator that
 * holds a 10,000-task DAG, once per task, and that was most of dagrun's
 * cost per task. Returns 0 or an errno value. */
static int spawn_worker(const char *exe, const exec_request *rq, char **env,
                        int log_fd, int pipe_fd, int attempt_fd, pid_t *pid) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (!rc)
    rc = posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  if (!rc)
    rc = posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  /* dup2 onto itself clears close-on-exec too (glibc >= 2.29). */
  /* A launcher gets no message pipe: its ranks connect to sockets. */
  if (!rc && pipe_fd >= 0)
    rc = posix_spawn_file_actions_adddup2(&fa, pipe_fd, PROTO_FD);
  if (!rc && attempt_fd >= 0)
    rc = posix_spawn_file_actions_adddup2(&fa, attempt_fd, ATTEMPT_FD);
  const char *cwd = rq->direct ? execdirect_cwd(rq->direct) : rq->cwd;
  if (!rc && cwd)
    rc = posix_spawn_file_actions_addchdir_np(&fa, cwd);
  if (!rc)
    rc = new_session(&attr);
  char fd_path[32];
  snprintf(fd_path, sizeof(fd_path), "/dev/fd/%d", ATTEMPT_FD);
  char *args[] = {"dagrun-worker", "__worker",
                  attempt_fd >= 0 ? fd_path : (char *)rq->attempt_json, NULL};
  char **argv = args;
  size_t n_pre = 0;
  while (rq->launcher_argv && rq->launcher_argv[n_pre])
    n_pre++;
  if (n_pre) {
    /* launcher ARGS... /path/to/dagrun-worker __worker ATTEMPT_JSON */
    argv = xcalloc(n_pre + 4, sizeof(*argv));
    memcpy(argv, rq->launcher_argv, n_pre * sizeof(*argv));
    argv[n_pre] = (char *)exe;
    argv[n_pre + 1] = args[1];
    argv[n_pre + 2] = args[2];
  }
  if (!rc && rq->direct) {
    const char *file = execdirect_file(rq->direct);
    char *const *cmd = execdirect_argv(rq->direct);
    char *const *cmd_env = execdirect_env(rq->direct);
    rc = file ? posix_spawn(pid, file, &fa, &attr, cmd, cmd_env)
              : posix_spawnp(pid, cmd[0], &fa, &attr, cmd, cmd_env);
  } else if (!rc && n_pre) {
    rc = posix_spawnp(pid, argv[0], &fa, &attr, argv, env);
  } else if (!rc) {
    rc = posix_spawn(pid, exe, &fa, &attr, argv, env);
  }
  if (argv != args)
    free(argv);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return rc;
}

/* A memfd holding text, at offset 0; -1 with errno on failure. */
static int memfd_with(const char *text) {
  int fd = memfd_create("dagrun-attempt", MFD_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t n = strlen(text);
  while (n > 0) {
    ssize_t w = write(fd, text, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int e = errno;
      close(fd);
      errno = w < 0 ? e : EIO;
      return -1;
    }
    text += w;
    n -= (size_t)w;
  }
  if (lseek(fd, 0, SEEK_SET) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* A worker started, before its handles exist. */
typedef struct spawned {
  pid_t pid;
  int pidfd, pipe_fd, log_pipe_fd, log_fd;
} spawned;

/* Starts one worker with env and its log at log_path. Returns 0 or
 * DR_ESPAWN/DR_EIO with a message in err. */
static int spawn_one(executor *x, const exec_request *rq, char **env,
                     const char *log_path, spawned *sp, char *err,
                     size_t errlen) {
  int masked = secrets_count(rq->secrets) > 0;
  int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    snprintf(err, errlen, "cannot open log %s: %s", log_path, strerror(errno));
    return DR_EIO;
  }
  int fds[2], lfds[2] = {-1, -1}, attempt_fd = -1;
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(err, errlen, "cannot create a pipe: %s", strerror(errno));
    close(log_fd);
    return DR_ESPAWN;
  }
  if ((masked && pipe2(lfds, O_CLOEXEC) != 0) ||
      (rq->attempt_text && (attempt_fd = memfd_with(rq->attempt_text)) < 0)) {
    snprintf(err, errlen, "cannot create a pipe: %s", strerror(errno));
    close(log_fd);
    close(fds[0]);
    close(fds[1]);
    if (lfds[0] >= 0) {
      close(lfds[0]);
      close(lfds[1]);
    }
    return DR_ESPAWN;
  }
  pid_t pid;
  int launcher = rq->launcher_argv != NULL;
  int rc = spawn_worker(x->worker_exe, rq, env, masked ? lfds[1] : log_fd,
                        launcher || rq->direct ? -1 : fds[1],
                        rq->direct ? -1 : attempt_fd, &pid);
  if (!masked) {
    close(log_fd);
    log_fd = -1;
  }
  close(fds[1]);
  if (lfds[1] >= 0)
    close(lfds[1]);
  if (attempt_fd >= 0)
    close(attempt_fd);
  int pidfd = rc == 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
  if (rc == 0 && pidfd < 0) {
    rc = errno;
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  if (rc != 0) {
    snprintf(err, errlen, "cannot start %s %s: %s",
             launcher ? "launcher" : rq->direct ? "command" : "worker",
             launcher ? rq->launcher_argv[0] : x->worker_exe, strerror(rc));
    close(fds[0]);
    if (lfds[0] >= 0)
      close(lfds[0]);
    if (log_fd >= 0)
      close(log_fd);
    return DR_ESPAWN;
  }
  sp->pid = pid;
  sp->pidfd = pidfd;
  sp->pipe_fd = fds[0];
  sp->log_pipe_fd = lfds[0];
  sp->log_fd = log_fd;
  return 0;
}

/* Undoes spawn_one: kills the worker's group and reaps it. */
static void unspawn(spawned *sp) {
  kill(-sp->pid, SIGKILL);
  while (waitpid(sp->pid, NULL, 0) < 0 && errno == EINTR)
    ;
  close(sp->pidfd);
  close(sp->pipe_fd);
  if (sp->log_pipe_fd >= 0)
    close(sp->log_pipe_fd);
  if (sp->log_fd >= 0)
    close(sp->log_fd);
}

/* The handles of rank `rank`, a worker spawned as sp. */
static proc *proc_start(attempt *at, int rank, const exec_request *rq,
                        const spawned *sp) {
  executor *x = at->x;
  proc *a = xcalloc(1, sizeof(*a));
  a->at = at;
  a->rank = rank;
  a->pid = sp->pid;
  a->pidfd = sp->pidfd;
  a->stop_reason = EXEC_EXITED;
  /* A launcher sends no messages: its ranks' heartbeats count. Nor does
   * a worker-less command: dagrun watches it itself. */
  a->direct = rq->direct;
  a->heartbeat_ms = rank < 0 || a->direct ? 0 : to_ms(rq->heartbeat_s);
  a->grace_ms = to_ms(rq->kill_grace_s);
  uv_pipe_init(x->loop, &a->pipe, 0);
  a->pipe.data = a;
  if (rank < 0 || a->direct) {
    close(sp->pipe_fd); /* nobody writes to it */
    a->eof = 1;
  } else {
    uv_pipe_open(&a->pipe, sp->pipe_fd);
  }
  uv_poll_init(x->loop, &a->exit_watch, sp->pidfd);
  a->exit_watch.data = a;
  uv_poll_start(&a->exit_watch, UV_READABLE, on_worker_exit);

  uv_timer_t *timers[] = {&a->timeout_timer, &a->heartbeat_timer,
                          &a->kill_timer, &a->drain_timer};
  for (size_t i = 0; i < 4; i++) {
    uv_timer_init(x->loop, timers[i]);
    timers[i]->data = a;
  }
  a->open_handles = ATTEMPT_HANDLES;
  a->log_fd = sp->log_fd;
  a->log_eof = sp->log_pipe_fd < 0;
  if (sp->log_pipe_fd >= 0) {
    a->masker = secrets_stream_create(rq->secrets, log_sink, a);
    uv_pipe_init(x->loop, &a->log_pipe, 0);
    uv_pipe_open(&a->log_pipe, sp->log_pipe_fd);
    a->log_pipe.data = a;
    a->open_handles++;
    uv_read_start((uv_stream_t *)&a->log_pipe, on_alloc, on_log_read);
  }
  if (rq->timeout_s > 0)
    uv_timer_start(&a->timeout_timer, on_timeout, to_ms(rq->timeout_s), 0);
  if (a->heartbeat_ms)
    uv_timer_start(&a->heartbeat_timer, on_heartbeat_missed, a->heartbeat_ms,
                   a->heartbeat_ms);
  if (a->direct) /* the heartbeat's timer polls the report files */
    uv_timer_start(&a->heartbeat_timer, on_direct_poll, EXECDIRECT_POLL_MS,
                   EXECDIRECT_POLL_MS);
  if (rank >= 0 && !a->direct)
    uv_read_start((uv_stream_t *)&a->pipe, on_alloc, on_read);
  return a;
}

/* The rendezvous of a launched gang. Every rank connects to one TCP
 * listener and sends "dagrun-join TOKEN RANK\n"; dagrun answers "ok\n"
 * and the connection becomes that rank's message stream, or, for a wrong
 * token, an unknown rank or one already joined, writes why to the
 * attempt's log and closes it. Ranks on other hosts can reach a TCP port
 * where they could not reach a Unix socket in the run directory, and the
 * token keeps out anyone else who can reach the port. */
struct joiner {
  uv_tcp_t tcp;
  attempt *at; /* NULL once it leaves the attempt's list */
  joiner *next;
  char buf[JOIN_LINE_MAX];
  size_t n;
  char peer[64]; /* "address:port", for the log */
};

static void on_joiner_closed(uv_handle_t *h) { free(h->data); }

static void joiner_close(joiner *j) {
  attempt *at = j->at;
  if (at) {
    joiner **pp = &at->joiners;
    while (*pp != j)
      pp = &(*pp)->next;
    *pp = j->next;
    j->at = NULL;
  }
  uv_close((uv_handle_t *)&j->tcp, on_joiner_closed);
}

static void on_rdv_closed(uv_handle_t *h) { free(h); }

/* Stops listening and drops the connections that have not joined. */
static void rdv_close(attempt *at) {
  while (at->joiners)
    joiner_close(at->joiners);
  if (at->rdv) {
    uv_close((uv_handle_t *)at->rdv, on_rdv_closed);
    at->rdv = NULL;
  }
}

/* Writes one line to the attempt's log (the launcher's output): a
 * refused connection is worth a trace where the user looks. */
static void attempt_log(attempt *at, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void attempt_log(attempt *at, const char *fmt, ...) {
  char ts[40];
  format_utc(clock_wall(), 1, ts, sizeof(ts));
  sbuf b = {0};
  sbuf_printf(&b, "%s WARN dagrun: ", ts);
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  sbuf_add(&b, "\n", 1);
  int fd = open(at->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    (void)!write(fd, b.s, b.n);
    close(fd);
  }
  sbuf_free(&b);
}

/* Compares n bytes in a time that does not depend on where they differ,
 * so that the token cannot be guessed a byte at a time. */
static int same_secret(const char *a, const char *b, size_t n) {
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++)
    d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

/* The joining rank of line "dagrun-join TOKEN RANK", or -1 with *why. */
static int join_rank(attempt *at, char *line, const char **why) {
  char *save = NULL;
  const char *word = strtok_r(line, " ", &save);
  const char *token = strtok_r(NULL, " ", &save);
  const char *rank = strtok_r(NULL, " ", &save);
  if (!word || strcmp(word, "dagrun-join") != 0 || !token || !rank) {
    *why = "not a dagrun rank (no join line)";
    return -1;
  }
  if (strlen(token) != 2 * TOKEN_BYTES ||
      !same_secret(token, at->token, 2 * TOKEN_BYTES)) {
    *why = "wrong token";
    return -1;
  }
  char *end;
  long r = strtol(rank, &end, 10);
  if (*end || end == rank || r < 0 || r >= at->n) {
    *why = "no such rank";
    return -1;
  }
  proc *p = at->procs[r];
  if (!p || p->connected || p->exited) {
    *why = "that rank has joined already";
    return -1;
  }
  return (int)r;
}

/* The joiner proved itself as rank `rank`: its connection becomes the
 * rank's message stream. The socket moves to the rank's uv_pipe_t (libuv
 * reads any stream socket through one) as a duplicate, since a handle
 * cannot change hands; bytes sent after the join line go first. */
static void join(joiner *j, int rank, const char *rest, size_t n_rest) {
  attempt *at = j->at;
  proc *p = at->procs[rank];
  uv_os_fd_t fd;
  int dup_fd = -1;
  if (uv_fileno((uv_handle_t *)&j->tcp, &fd) == 0)
    dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  char rest_copy[JOIN_LINE_MAX];
  memcpy(rest_copy, rest, n_rest);
  joiner_close(j);
  if (dup_fd < 0 || uv_pipe_open(&p->pipe, dup_fd) != 0) {
    attempt_log(at, "cannot take rank %d's connection: %s", rank,
                strerror(errno));
    if (dup_fd >= 0)
      close(dup_fd);
    return;
  }
  /* Three bytes on a socket that was just accepted fit its send buffer:
   * a plain write cannot block or be short. A rank that is gone by now
   * shows as the end of its stream. */
  (void)!write(dup_fd, "ok\n", 3);
  p->connected = 1;
  consume(p, rest_copy, n_rest);
  uv_read_start((uv_stream_t *)&p->pipe, on_alloc, on_read);
  int all = 1;
  for (int r = 0; r < at->n && all; r++)
    all = !at->procs[r] || at->procs[r]->connected;
  if (all && at->rdv) {
    /* Nobody else may join this attempt. */
    uv_close((uv_handle_t *)at->rdv, on_rdv_closed);
    at->rdv = NULL;
  }
}

static void on_join_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  joiner *j = h->data;
  (void)suggested;
  buf->base = j->buf + j->n;
  buf->len = sizeof(j->buf) - j->n;
}

static void on_join_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  joiner *j = s->data;
  (void)buf;
  if (!j->at)
    return;
  if (nread < 0) {
    attempt_log(j->at,
                "a connection to the gang's rendezvous from %s closed before "
                "it said which rank it is",
                j->peer);
    joiner_close(j);
    return;
  }
  j->n += (size_t)nread;
  char *nl = memchr(j->buf, '\n', j->n);
  if (!nl) {
    if (j->n == sizeof(j->buf)) {
      attempt_log(j->at,
                  "refused a connection to the gang's rendezvous "
                  "from %s: not a dagrun rank (no join line)",
                  j->peer);
      joiner_close(j);
    }
    return;
  }
  *nl = '\0';
  const char *why = NULL;
  int rank = join_rank(j->at, j->buf, &why);
  if (rank < 0) {
    attempt_log(j->at,
                "refused a connection to the gang's rendezvous from %s: %s",
                j->peer, why);
    joiner_close(j);
    return;
  }
  uv_read_stop(s);
  join(j, rank, nl + 1, (size_t)(j->buf + j->n - (nl + 1)));
}

/* "address:port" of a connected peer, for the log. */
static void peer_name(uv_tcp_t *t, char *out, size_t n) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  snprintf(out, n, "an unknown address");
  if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len) != 0)
    return;
  if (ss.ss_family == AF_INET) {
    uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
    port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  snprintf(out, n, "%s:%d", ip, port);
}

static void on_rdv_connection(uv_stream_t *server, int status) {
  attempt *at = server->data;
  if (status < 0)
    return;
  joiner *j = xcalloc(1, sizeof(*j));
  uv_tcp_init(at->x->loop, &j->tcp);
  j->tcp.data = j;
  if (uv_accept(server, (uv_stream_t *)&j->tcp) != 0) {
    uv_close((uv_handle_t *)&j->tcp, on_joiner_closed);
    return;
  }
  peer_name(&j->tcp, j->peer, sizeof(j->peer));
  j->at = at;
  j->next = at->joiners;
  at->joiners = j;
  uv_read_start((uv_stream_t *)&j->tcp, on_join_alloc, on_join_read);
}

/* Listens on rq->rdv_bind:rq->rdv_port (port 0: one the system picks)
 * and makes the token. Returns 0, or DR_EIO with err. */
static int rdv_open(attempt *at, const exec_request *rq, char *err,
                    size_t errlen) {
  unsigned char raw[TOKEN_BYTES];
  if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
    snprintf(err, errlen, "cannot make the gang's token: %s", strerror(errno));
    return DR_EIO;
  }
  for (size_t i = 0; i < sizeof(raw); i++)
    snprintf(at->token + 2 * i, 3, "%02x", raw[i]);
  struct sockaddr_storage ss;
  int v6 = strchr(rq->rdv_bind, ':') != NULL;
  int rc =
      v6 ? uv_ip6_addr(rq->rdv_bind, rq->rdv_port, (struct sockaddr_in6 *)&ss)
         : uv_ip4_addr(rq->rdv_bind, rq->rdv_port, (struct sockaddr_in *)&ss);
  at->rdv = xcalloc(1, sizeof(*at->rdv));
  uv_tcp_init(at->x->loop, at->rdv);
  at->rdv->data = at;
  if (rc == 0)
    rc = uv_tcp_bind(at->rdv, (const struct sockaddr *)&ss, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)at->rdv, 128, on_rdv_connection);
  int len = sizeof(ss);
  if (rc == 0)
    rc = uv_tcp_getsockname(at->rdv, (struct sockaddr *)&ss, &len);
  if (rc != 0) {
    snprintf(err, errlen, "cannot listen for the gang's ranks on %s%s%s:%d: %s",
             v6 ? "[" : "", rq->rdv_bind, v6 ? "]" : "", rq->rdv_port,
             uv_strerror(rc));
    return DR_EIO;
  }
  int port =
      ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
  int host_v6 = strchr(rq->rdv_host, ':') != NULL;
  at->rdv_addr = xasprintf("%s%s%s:%d", host_v6 ? "[" : "", rq->rdv_host,
                           host_v6 ? "]" : "", port);
  return 0;
}

/* Rank `rank` under a launcher: waits for its connection. */
static proc *virt_start(attempt *at, int rank, const exec_request *rq) {
  executor *x = at->x;
  proc *a = xcalloc(1, sizeof(*a));
  a->at = at;
  a->rank = rank;
  a->virt = 1;
  a->pidfd = -1;
  a->log_fd = -1;
  a->log_eof = 1;
  a->stop_reason = EXEC_EXITED;
  a->heartbeat_ms = to_ms(rq->heartbeat_s);
  a->grace_ms = to_ms(rq->kill_grace_s);
  uv_pipe_init(x->loop, &a->pipe, 0);
  a->pipe.data = a;
  uv_timer_t *timers[] = {&a->timeout_timer, &a->heartbeat_timer,
                          &a->kill_timer, &a->drain_timer};
  for (size_t i = 0; i < 4; i++) {
    uv_timer_init(x->loop, timers[i]);
    timers[i]->data = a;
  }
  a->open_handles = ATTEMPT_HANDLES - 1; /* no exit watch */
  if (a->heartbeat_ms)
    uv_timer_start(&a->heartbeat_timer, on_heartbeat_missed, a->heartbeat_ms,
                   a->heartbeat_ms);
  return a;
}

static attempt *attempt_new(executor *x, const exec_request *rq, int n) {
  attempt *at = xcalloc(1, sizeof(*at));
  at->x = x;
  at->task = rq->task;
  at->n = n;
  at->failed_rank = -1;
  at->cause = EXEC_EXITED;
  at->started = clock_monotonic();
  const char *log = rq->log_path ? rq->log_path
                    : rq->n_ranks > 1 ? rq->ranks[0].log_path
                                      : NULL;
  at->dir = log ? path_dirname(log) : NULL;
  at->procs = xcalloc((size_t)n, sizeof(*at->procs));
  at->ends = xcalloc((size_t)n, sizeof(*at->ends));
  return at;
}

static void attempt_link(executor *x, attempt *at) {
  at->next = x->running;
  if (x->running)
    x->running->prev = at;
  x->running = at;
  x->n_running++;
}

/* A gang started by a launcher (mpirun, srun): the rendezvous, then
 * the launcher, which starts the ranks; they are told where to join by
 * DAGRUN_GANG_ADDR and DAGRUN_GANG_TOKEN in its environment. */
static int start_launched(executor *x, const exec_request *rq, char *err,
                          size_t errlen) {
  int n = (int)rq->n_ranks;
  attempt *at = attempt_new(x, rq, n);
  at->log_path = xstrdup(rq->log_path);
  if (rdv_open(at, rq, err, errlen) != 0) {
    rdv_close(at);
    attempt_free(at);
    return DR_EIO;
  }
  size_t n_env = 0;
  while (rq->env[n_env])
    n_env++;
  char **env = xcalloc(n_env + 3, sizeof(*env));
  env[0] = xasprintf("DAGRUN_GANG_ADDR=%s", at->rdv_addr);
  env[1] = xasprintf("DAGRUN_GANG_TOKEN=%s", at->token);
  memcpy(env + 2, rq->env, n_env * sizeof(*env));
  spawned sp;
  int rc = spawn_one(x, rq, env, rq->log_path, &sp, err, errlen);
  free(env[0]);
  free(env[1]);
  free(env);
  if (rc != 0) {
    rdv_close(at);
    attempt_free(at);
    return rc;
  }
  for (int r = 0; r < n; r++)
    at->procs[r] = virt_start(at, r, rq);
  at->launcher = proc_start(at, -1, rq, &sp);
  at->has_launcher = 1;
  at->pid0 = sp.pid;
  attempt_link(x, at);
  return 0;
}

/* A worker-less exec attempt (execdirect.h); 0, or -1 when its command
 * could not be spawned (then it runs in a worker, which says why). */
static int start_direct(executor *x, const exec_request *rq) {
  spawned sp;
  char err[256];
  execdirect_started(rq->direct);
  if (spawn_one(x, rq, rq->env, rq->log_path, &sp, err, sizeof err) != 0)
    return -1;
  guard_tell(x, '+', sp.pid);
  attempt *at = attempt_new(x, rq, 1);
  at->pid0 = sp.pid;
  at->procs[0] = proc_start(at, 0, rq, &sp);
  attempt_link(x, at);
  return 0;
}

int executor_start(executor *x, const exec_request *rq, char *err,
                   size_t errlen) {
  /* Should dagrun die, the guard gives the run's attempts the longest
   * grace it was told of, as their workers give theirs. */
  guard_tell(x, '~', (long long)to_ms(rq->kill_grace_s));
  if (rq->direct) {
    if (start_direct(x, rq) == 0)
      return 0;
    exec_request worker = *rq;
    worker.direct = NULL;
    execdirect_destroy(rq->direct);
    return executor_start(x, &worker, err, errlen);
  }
  if (rq->launcher_argv)
    return start_launched(x, rq, err, errlen);
  int n = rq->n_ranks > 1 ? (int)rq->n_ranks : 1;
  spawned *sp = xcalloc((size_t)n, sizeof(*sp));
  /* All ranks are spawned before any handle is made, so that a rank that
   * cannot start undoes the others without the loop's help. */
  for (int r = 0; r < n; r++) {
    char **env = rq->n_ranks > 1 ? rq->ranks[r].env : rq->env;
    const char *log = rq->n_ranks > 1 ? rq->ranks[r].log_path : rq->log_path;
    int rc = spawn_one(x, rq, env, log, &sp[r], err, errlen);
    if (rc != 0) {
      while (r-- > 0)
        unspawn(&sp[r]);
      free(sp);
      return rc;
    }
  }
  attempt *at = attempt_new(x, rq, n);
  at->pid0 = sp[0].pid;
  for (int r = 0; r < n; r++)
    at->procs[r] = proc_start(at, r, rq, &sp[r]);
  free(sp);
  attempt_link(x, at);
  return 0;
}

int executor_pid(const executor *x, size_t task) {
  for (const attempt *a = x->running; a; a = a->next)
    if (a->task == task)
      return (int)a->pid0;
  return 0;
}

void executor_cancel(executor *x, size_t task, int force) {
  for (attempt *a = x->running; a; a = a->next) {
    if (a->task == task) {
      attempt_stop(a, EXEC_CANCELLED, -1, force);
      return;
    }
  }
}
