/*
 * executor: runs task attempts as worker processes on a libuv loop.
 *
 * Each attempt is `dagrun __worker ATTEMPT_JSON` started with posix_spawn
 * in a new session
 * (so its own process group, which the executor kills as a whole), with
 * stdin from /dev/null, stdout and stderr appended to the attempt's log
 * file, and fd 3 the protocol pipe (proto.h). When the run has secrets
 * (secrets.h), stdout and stderr are a pipe instead, read here and
 * written to the log masked (a secret split across two reads included),
 * and the attempt description the worker reads is the unmasked
 * attempt_text, given as a memfd named /dev/fd/4, while the file on disk
 * is masked. Messages are parsed as they
 * arrive and handed to on_message; any message resets the heartbeat timer.
 *
 * Stopping an attempt (timeout, missed heartbeat, cancel): SIGTERM to the
 * process group, SIGKILL after the grace period. When the worker exits,
 * whatever it left in its group (grandchildren, daemons) gets SIGKILL: an
 * attempt owns everything it started.
 *
 * Gangs: an attempt with n_ranks > 1 starts that many workers together,
 * each as above (its own session, log and message pipe), rank r with the
 * environment and log of ranks[r]. Only rank 0's messages reach
 * on_message (the others' still count as heartbeats). The attempt is over
 * when every rank has finished. It succeeds when every rank exited 0; the
 * first rank that fails (non-zero exit, crash, missed heartbeat) stops the
 * others at once (SIGTERM to their groups, SIGKILL after the grace), and
 * the attempt's result is that rank's. A timeout or cancel stops every
 * rank.
 *
 * All functions run on the loop's thread; callbacks are called from it.
 */
#ifndef DAGRUN_EXECUTOR_H
#define DAGRUN_EXECUTOR_H

#include <stddef.h>
#include <uv.h>

#include "execdirect.h"
#include "host/proto.h"
#include "orphans.h"
#include "secrets.h"

typedef enum exec_end {
  EXEC_EXITED,    /* exited on its own; exit_code holds the status */
  EXEC_SIGNALED,  /* died of a signal it did not ask for (crash) */
  EXEC_TIMED_OUT, /* stopped because the task's timeout passed */
  EXEC_HUNG,      /* stopped because no heartbeat came in time */
  EXEC_CANCELLED  /* stopped by executor_cancel */
} exec_end;

/* How one rank of an attempt ended. */
typedef struct exec_rank_end {
  int exit_code;    /* exited: 0..255; -1 when killed by a signal */
  int term_signal;  /* killed by a signal: the signal; else 0 */
  int stopped;      /* 1: stopped by the executor (another rank failed,
                       timeout, cancel) */
  int never_joined; /* 1: a launched rank that never connected to the
                       rendezvous */
} exec_rank_end;

typedef struct exec_result {
  exec_end end;
  int exit_code;     /* EXEC_EXITED: 0..255 */
  int term_signal;   /* EXEC_SIGNALED: the signal */
  const char *error; /* the worker's own reason (its result message), or
                        NULL. Valid during on_exit. */
  double duration_s;
  /* The gang: world size, the rank whose failure ended the attempt (-1:
   * none, or the whole gang was stopped), the ranks stopped because of
   * it as text ("0, 1, 3", "" when none), and how each rank ended
   * (n_ranks entries). Valid during on_exit. */
  int n_ranks;
  int failed_rank;
  const char *stopped;
  const exec_rank_end *ranks;
  /* A launched gang: the rendezvous address its ranks were given
   * ("host:port"), and how its launcher (mpirun, srun) ended (stopped: by
   * the executor); else NULL. Valid during on_exit. */
  const char *rendezvous;
  const exec_rank_end *launcher;
} exec_result;

typedef struct exec_callbacks {
  void (*on_message)(void *ud, size_t task, const proto_msg *m);
  /* The attempt is over and all its messages were delivered. */
  void (*on_exit)(void *ud, size_t task, const exec_result *r);
  void *ud;
} exec_callbacks;

/* One rank of a gang. */
typedef struct exec_rank {
  char **env;           /* full environment, NULL-terminated */
  const char *log_path; /* created/appended */
} exec_rank;

typedef struct exec_request {
  size_t task;              /* caller's id, passed back in callbacks */
  const char *attempt_json; /* path given to the worker */
  const char *log_path;     /* created/appended */
  const char *cwd;          /* NULL: inherit */
  char **env;               /* full environment, NULL-terminated */
  double timeout_s;         /* 0: none */
  double heartbeat_s;       /* 0: off */
  double kill_grace_s;
  /* The run's secrets, masked in the log (borrowed: must outlive the
   * attempt); NULL or empty: the worker writes the log directly. */
  const secrets *secrets;
  /* The attempt description to give the worker instead of the file at
   * attempt_json (which is then a masked copy), or NULL. */
  const char *attempt_text;
  /* A one-process exec attempt run without a worker (execdirect.h):
   * the executor spawns its command instead of a worker, with no message
   * pipe and no heartbeat, reads its report files every
   * EXECDIRECT_POLL_MS and, when it ends, takes its status and error
   * from execdirect_end. Taken over by executor_start, which destroys it
   * (also when it fails). A command that cannot be spawned runs in a
   * worker after all (attempt_json), which says why. NULL: a worker. */
  execdirect *direct;
  /* A gang: n_ranks > 1 workers, rank r with ranks[r]'s env and log
   * (borrowed), instead of env and log_path. 0 or 1: one worker. */
  size_t n_ranks;
  const exec_rank *ranks;
  /* A gang started by a launcher: its argv (NULL-terminated, e.g.
   * mpirun -np N ...), to which `dagrun __worker ATTEMPT_JSON` is
   * appended; the launcher runs with env, its output goes to log_path,
   * and it gets no message pipe: its ranks join the gang's rendezvous
   * instead, a TCP listener on rdv_bind (an IP address) port rdv_port
   * (0: any free one). The launcher's environment gets
   * DAGRUN_GANG_ADDR=rdv_host:PORT, where the ranks connect, and
   * DAGRUN_GANG_TOKEN, a random secret made for this attempt that each
   * rank sends with its rank ("dagrun-join TOKEN RANK\n"; answered "ok\n").
   * A connection with a wrong token, an unknown rank or a rank that
   * joined already is closed and written to log_path. A joined rank's
   * connection carries its messages; the rank has ended when it closes,
   * with the status of its result message (none: 255). When a rank
   * fails, on timeout and on cancel, each joined rank is told "stop\n" on
   * its connection (its worker cancels as on SIGTERM) and has the grace
   * to end; once every rank has ended, or the grace is over, the
   * launcher gets SIGTERM (it ends what is left of its ranks), SIGKILL
   * LAUNCHER_STOP_MS later. NULL: the ranks are started here.
   * attempt_text is not supported with a launcher. */
  char *const *launcher_argv;
  const char *rdv_bind;
  int rdv_port;
  const char *rdv_host;
} exec_request;

typedef struct executor executor;

/* worker_exe: the dagrun-worker program (host/worker.h), run as
 * `WORKER_EXE __worker ATTEMPT_JSON`. run_dir: the run's directory, for
 * the guard (host/guard.h). The executor makes dagrun the subreaper of
 * its attempts (orphans.h): what an attempt leaves running outside its
 * process group is stopped when the attempt ends. */
executor *executor_create(uv_loop_t *loop, const char *worker_exe,
                          const char *run_dir,
                          const exec_callbacks *cb);
/* Starts an attempt. Returns 0, or DR_ESPAWN/DR_EIO with a message in err
 * (on_exit is then not called). One attempt per task id at a time. */
int executor_start(executor *x, const exec_request *rq, char *err,
                   size_t errlen);
/* Stops a running attempt: SIGTERM now, SIGKILL after its grace; with
 * force, SIGKILL now. No-op if the task is not running. */
void executor_cancel(executor *x, size_t task, int force);
/* The worker pid of the task's running attempt (rank 0's for a gang), or
 * 0 when none. */
int executor_pid(const executor *x, size_t task);
/* The pid of the run's guard (host/guard.h), started with the executor so
 * that it can be recorded before any attempt starts (owner.h); 0 when it
 * could not be started. */
int executor_guard_pid(const executor *x);
/* Number of attempts still running (or draining their pipe). */
size_t executor_running(const executor *x);
/* Frees the executor; only once executor_running() is 0. */
void executor_destroy(executor *x);

#endif /* DAGRUN_EXECUTOR_H */
