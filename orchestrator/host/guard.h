/*
 * guard: stops the attempts of a dagrun that died: those that run without
 * a worker (run/execdirect.h), and whatever any attempt left running
 * outside its process group; and by living until they are gone, tells
 * the run store's readers that they are not gone yet.
 *
 * A worker watches its message pipe and, when dagrun dies (kill -9, a
 * crash), stops its attempt: SIGTERM to its process group, SIGKILL after
 * a grace (worker.h). A worker-less command has no such watcher, so one
 * process per run watches them all: `dagrun-worker __guard RUN_DIR`,
 * started by the executor when it is created, in a session of
 * its own, with its stdin the read end of a pipe only dagrun writes to.
 * dagrun writes a line per process group started and one per group
 * reaped:
 *
 *   + PGID\n     a command now leads process group PGID
 *   ~ MS\n       an attempt began whose task's kill_grace is MS ms
 *   - PGID\n     that group is over (dagrun killed what was left, reaped)
 *   .\n          the run is over: dagrun is about to exit normally
 *
 * At the end of its stdin without the last line (dagrun died), the guard
 * sends SIGTERM to every group still listed, and to every process whose
 * environment has DAGRUN_RUN_DIR=RUN_DIR (what the run's attempts started
 * and left outside their groups: with dagrun gone, nobody else stops
 * them, run/orphans.h), waits until they are gone or the longest grace
 * of the attempts it was told of passed (GUARD_GRACE_S when none was),
 * sends SIGKILL to those left, waits for them (GUARD_KILL_WAIT_S at most:
 * a zombie nobody reaps still answers kill(pid, 0)) and exits 0. After
 * "." it exits at once: dagrun stopped its attempts and their orphans
 * itself.
 *
 * The guard is started with the executor, before any attempt, and the
 * run store records it beside its dagrun: while it lives after dagrun
 * died, the pool slots and the max_active_runs place of the run stay
 * held (store/owner.h), since its attempts are not gone yet.
 *
 * Pid reuse: a process group's id cannot be reused while any process is
 * in the group, and dagrun writes "-" right after it reaped the leader of
 * an emptied group; only a dagrun killed between the two could leave a
 * stale id, for the guard to signal a group made since with that id.
 */
#ifndef DAGRUN_GUARD_H
#define DAGRUN_GUARD_H

/* kill_grace's default, which a worker run by hand (no
 * DAGRUN_KILL_GRACE_MS) and a guard told of no group also give. */
#define GUARD_GRACE_S 10
/* How long the guard waits, after SIGKILL, for them to be gone. */
#define GUARD_KILL_WAIT_S 2

/* The guard's main loop on fd 0; returns the process's exit status.
 * run_dir may be NULL (then only the listed groups are stopped). */
int guard_main(const char *run_dir);

#endif /* DAGRUN_GUARD_H */
