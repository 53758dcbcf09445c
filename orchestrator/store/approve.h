/*
 * approve: a person's decision on an approval task (scheduler.h,
 * "Approval"), from `dagrun approve RUN TASK`, `dagrun reject RUN TASK
 * [--reason TEXT]` and the API's POST /api/runs/{id}/tasks/{task}/approve
 * and /reject (which the dashboard's buttons use). The decision goes into
 * the run store (store_approval_decide: who, when, how); the dagrun that
 * runs the run reads it from there (history_approval_poll), so the API, the
 * CLI and the run need no channel of their own, and a decision outlives a
 * restart of `dagrun serve`.
 *
 * What is refused, each with a message and no write: an unknown run or
 * task, a run that is not running (its dagrun is gone: nothing would act
 * on the decision), a task that is not waiting for approval, and a
 * decision against one already made for the same attempt. The same
 * decision again (a replay) changes nothing and is not an error.
 *
 * All functions run on the caller's thread with a store it owns.
 */
#ifndef DAGRUN_APPROVE_H
#define DAGRUN_APPROVE_H

#include "store.h"

/* Decides task of the run whose id is (or starts with) run_prefix:
 * a->decision is "approved" or "rejected". Returns 0 when recorded, 1 for
 * a replay (already so decided), or an error with err: DR_ENOENT (no such
 * run or task), DR_EINVAL (an ambiguous prefix, a run that is not running,
 * a task that is not waiting for approval), DR_EEXIST (decided the other
 * way), DR_ESTORE. *run_id: the run's full id when found (caller frees),
 * else NULL. */
int approve_decide(store *st, const char *run_prefix, const char *task,
                   const store_approval *a, char **run_id, char *err,
                   size_t errlen);

/* `dagrun approve RUN TASK` and `dagrun reject RUN TASK [--reason TEXT]`:
 * argv holds the arguments after the command's name. Records the
 * decision with the user's login name and "cli". Exit status: 0 recorded
 * (or already so), 1 refused or the store failed, 2 usage. */
int approve_cmd_approve(int argc, char **argv);
int approve_cmd_reject(int argc, char **argv);

#endif /* DAGRUN_APPROVE_H */
