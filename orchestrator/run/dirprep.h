/*
 * dirprep: a task's directories made ahead of its launch, on a thread of
 * their own.
 *
 * Launching an attempt makes <run>/<task>/, its out/ and attempt-1/ and
 * the attempt's log: four inodes, which on ext4 were the largest part of
 * the scheduler's own time per task, spent on the loop's thread while a
 * slot stood empty (bench/README.md). A task queued behind others (a fan's
 * 10,000 middle tasks, -j 2) has them made here meanwhile; launch then
 * only claims them. Only first attempts are prepared; a task whose
 * directories are not ready when it launches makes them itself, as
 * before, so nothing waits on this thread.
 *
 * The loop's thread calls dirprep_push and dirprep_claim; the preparing
 * thread touches nothing but the file system and this module's own state.
 */
#ifndef DAGRUN_DIRPREP_H
#define DAGRUN_DIRPREP_H

#include <stddef.h>

typedef struct dirprep dirprep;

/* Starts the thread for a run at run_path (borrowed: must outlive the
 * dirprep) of n_tasks tasks. NULL when the thread cannot be started:
 * every call below accepts NULL (nothing is prepared). */
dirprep *dirprep_create(const char *run_path, size_t n_tasks);

/* Asks for task's out/, attempt-1/ and attempt-1/log to be made, under
 * <run_path>/<name>. name is borrowed: it must outlive the dirprep. At
 * most once per task. */
void dirprep_push(dirprep *d, size_t task, const char *name);

/* Before task's first attempt starts: 1 when its directories and log were
 * made (the caller need not make them, and attempt-1/ was new: it holds
 * nothing), 0 when they were not (not asked for, not reached yet, or
 * failed: the caller makes them, and reports what fails). After this call
 * the thread no longer touches the task. */
int dirprep_claim(dirprep *d, size_t task);

/* Whether task's directories are made and not yet claimed: what a claim
 * now would answer, without claiming (for tests, which must not take
 * "the log file exists" for "made": the thread marks a task made just
 * after its last file). */
int dirprep_ready(dirprep *d, size_t task);

/* Stops the thread (what was not reached is left undone) and frees d.
 * NULL is a no-op. */
void dirprep_destroy(dirprep *d);

#endif /* DAGRUN_DIRPREP_H */
