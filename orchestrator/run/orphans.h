/*
 * orphans: what an attempt left running outside its process group, found
 * and stopped when the attempt ends.
 *
 * The executor stops an attempt by its process group. A process that left
 * the group (setsid, a daemon that double-forked) escapes that: data
 * loaders, launchers and servers a training script starts do this. So
 * dagrun makes itself a child subreaper (PR_SET_CHILD_SUBREAPER): a
 * process of the run whose parent exits becomes dagrun's child instead of
 * init's. Every attempt's environment names its directory
 * (DAGRUN_ATTEMPT_DIR, inherited by what it starts), which says whose it
 * is. When an attempt ends, orphans_sweep looks at dagrun's children:
 * one that the executor did not start and whose attempt is over gets
 * SIGTERM (its process group and itself), SIGKILL ORPHANS_GRACE_S later
 * if it is still there, and is reaped; each is logged in its attempt's
 * log by pid and command line. One with no DAGRUN_ATTEMPT_DIR (it cleared
 * its environment) is stopped when no attempt runs any more. Children
 * that exited are reaped.
 *
 * A process that left the group while its parent lives is found once the
 * parent ends: at a later sweep (each attempt end, and every
 * ORPHANS_POLL_MS while any orphan is being stopped) or at the last one,
 * orphans_finish, when the run is over.
 *
 * On the loop's thread.
 */
#ifndef DAGRUN_ORPHANS_H
#define DAGRUN_ORPHANS_H

#include <sys/types.h>
#include <uv.h>

/* How long an orphan has between SIGTERM and SIGKILL. Shorter than a
 * task's kill_grace: its attempt is over, and nobody waits for it. */
#define ORPHANS_GRACE_S 2
#define ORPHANS_POLL_MS 100

typedef struct orphans orphans;

/* What the executor knows: whether pid is a process it started (a worker,
 * a command, the guard), and whether the attempt of a directory still
 * runs. */
typedef struct orphans_owner {
  int (*started)(void *ud, pid_t pid);
  int (*running)(void *ud, const char *attempt_dir);
  int (*any_running)(void *ud);
  void *ud;
} orphans_owner;

/* Makes dagrun the subreaper of what it starts. NULL is never returned;
 * when the kernel refuses, sweeps find nothing (and say so once). */
orphans *orphans_create(uv_loop_t *loop, const orphans_owner *owner);

/* Looks at dagrun's children now (above). */
void orphans_sweep(orphans *o);

/* The run is over: every remaining orphan is stopped and reaped (this
 * waits, up to ORPHANS_GRACE_S). Frees o; NULL is a no-op. */
void orphans_finish(orphans *o);

#endif /* DAGRUN_ORPHANS_H */
