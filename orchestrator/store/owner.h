/*
 * owner: the dagrun that runs a run (`dagrun run` or `dagrun resume`),
 * as the run store records it, and whether a reader can tell that it is
 * alive. Every decision that depends on a run's dagrun being alive goes
 * through owner_judge: a reader marking a run interrupted, a pool lease or
 * a max_active_runs place being held, `dagrun resume` refusing a run,
 * `dagrun cancel` signalling it.
 *
 * A dagrun is named by its pid and its process start time
 * (proc_start_time), so that a pid reused since is not taken for it. A
 * pid means something only in its PID namespace on its kernel: a reader
 * in another container or on another host sharing the store would find
 * no such process, or a stranger, and take a live run for a dead one. So
 * the owner is recorded with where its pid means something:
 *
 *   host   the hostname: for messages, and to tell a reboot of this host
 *          from another host
 *   boot   the kernel's boot id (/proc/sys/kernel/random/boot_id): new at
 *          each boot, different on each host, shared by a host's
 *          containers
 *   pidns  the PID namespace ("pid:[INODE]", readlink /proc/self/ns/pid):
 *          different in each container of a host
 *
 * The pid is judged only by a reader with the same boot and pidns. From
 * anywhere else the owner is judged by its heartbeat: a running dagrun
 * records the time every OWNER_BEAT_S (store_run_beat), and one silent
 * for OWNER_BEAT_STALE_S is gone (a container killed or restarted, whose
 * new PID namespace cannot see the old one's pids; a host that died).
 * Until then it is elsewhere: alive, as far as can be told. The hostname
 * alone proves nothing about pids (two hosts may share a name, `unshare
 * --uts` gives one PID namespace two): it only names where the owner runs.
 * A record without a heartbeat from elsewhere is judged as before it had
 * one: gone when the boot differs and the host name is the same (a
 * reboot), elsewhere otherwise. A record without a boot or pidns (schema
 * 8 and older, or a kernel that hides them) is judged here, as before.
 *
 * The guard (host/guard.h): when a dagrun dies, its attempts do not stop
 * at once: each is given a grace after SIGTERM (GUARD_GRACE_S), and the
 * guard process, which outlives the dagrun, exits once they are gone. A
 * dagrun that is gone while its guard lives is "stopping": its run is
 * over for readers (interrupted, resumable), but the pool slots and the
 * max_active_runs place it held stay held, since its attempts still run.
 *
 * Thread-safe: owner_here computes this process's identity once.
 */
#ifndef DAGRUN_OWNER_H
#define DAGRUN_OWNER_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* A run's dagrun as recorded. The strings are borrowed (from the record
 * read, or owner_here's static ones); NULL or "" where not recorded. */
typedef struct owner {
  int pid;
  long long start;
  const char *host, *boot, *pidns;
  int guard; /* its guard's pid, 0 when none was recorded */
  long long guard_start;
  double beat; /* when it last said it lived (wall clock); 0: never */
} owner;

/* How often a running dagrun records that it lives, and the silence after
 * which one that cannot be seen from here is taken for gone: long enough
 * for a store lock held a while, or a loaded machine, not to pass for a
 * death. */
#define OWNER_BEAT_S 30
#define OWNER_BEAT_STALE_S 180

typedef enum owner_state {
  OWNER_ALIVE,     /* the dagrun is alive, and visible from here */
  OWNER_STOPPING,  /* the dagrun is gone, its guard still stops attempts */
  OWNER_GONE,      /* the dagrun and its guard are gone */
  OWNER_ELSEWHERE, /* on another host or in another PID namespace: its
                      pid cannot be judged from here */
} owner_state;

/* This process as an owner (pid, start time, host, boot, pidns; no
 * guard). Static, valid for the life of the process. */
const owner *owner_here(void);

/* What a reader here can tell of o. A record with no pid, or a pid and no
 * start time (schema 1), is gone: it cannot be told from a stranger. */
owner_state owner_judge(const owner *o);

/* The owner recorded in a run object (store_run, store_runs: orch_pid,
 * orch_start, orch_host, orch_boot, orch_pidns, orch_guard,
 * orch_guard_start, orch_beat); strings borrowed from run. */
void owner_of_run(const cJSON *run, owner *o);

/* owner_judge of a run object's owner, with its pid in *pid (0: none). */
owner_state owner_of_run_judge(const cJSON *run, int *pid);

/* "host NAME" (or "another host or PID namespace" when no name was
 * recorded) into buf: where an OWNER_ELSEWHERE owner runs. */
void owner_where(const owner *o, char *buf, size_t n);

#endif /* DAGRUN_OWNER_H */
