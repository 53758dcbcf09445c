/*
 * guard: stops the attempts of a dagrun that died, for the attempts that
 * run without a worker (run/execdirect.h).
 *
 * A worker watches its message pipe and, when dagrun dies (kill -9, a
 * crash), stops its attempt: SIGTERM to its process group, SIGKILL after
 * a grace (worker.h). A worker-less command has no such watcher, so one
 * process per run watches them all: `dagrun-worker __guard`, started by
 * the executor at the run's first worker-less attempt, in a session of
 * its own, with its stdin the read end of a pipe only dagrun writes to.
 * dagrun writes a line per process group started and one per group
 * reaped:
 *
 *   + PGID\n     a command now leads process group PGID
 *   - PGID\n     that group is over (dagrun killed what was left, reaped)
 *
 * At the end of its stdin (dagrun exited or died), the guard sends
 * SIGTERM to every group still listed, waits until they are gone or
 * GUARD_GRACE_S passed, sends SIGKILL to those left, and exits 0. A
 * dagrun that ends normally has no group listed by then, so its guard
 * exits at once.
 *
 * Pid reuse: a process group's id cannot be reused while any process is
 * in the group, and dagrun writes "-" right after it reaped the leader of
 * an emptied group; only a dagrun killed between the two could leave a
 * stale id, for the guard to signal a group made since with that id.
 */
#ifndef DAGRUN_GUARD_H
#define DAGRUN_GUARD_H

/* As long as a worker waits for its orphaned group (worker.c). */
#define GUARD_GRACE_S 10

/* The guard's main loop on fd 0; returns the process's exit status. */
int guard_main(void);

#endif /* DAGRUN_GUARD_H */
