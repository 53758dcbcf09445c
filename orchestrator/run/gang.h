/*
 * gang: what the scheduler does for a task that runs as a gang, i.e. with
 * world_size N > 1 or a launcher (mpirun, srun): the ranks' directories
 * and environments before an attempt starts, and the words for how the
 * gang ended after. Starting, watching and stopping the ranks is the
 * executor's (executor.h, "Gangs"); choosing when is the scheduler's.
 *
 * One attempt's gang, on disk, under the attempt's directory:
 *
 *   rendezvous/     made empty: where the ranks of a local gang meet
 *   rank-<r>/log    rank r's log; rank-0/log links to the attempt's log
 *
 * Each rank of a local gang gets the task's environment plus
 * DAGRUN_RANK, DAGRUN_WORLD_SIZE, DAGRUN_LOCAL_RANK (= the rank),
 * DAGRUN_RENDEZVOUS (the rendezvous/ directory) and, unless the task's
 * env sets it, CUDA_VISIBLE_DEVICES: the r-th entry of dagrun's own list
 * when it has one, empty when dagrun's is set but empty (its GPUs are
 * hidden), else r.
 *
 * A launched gang runs one launcher process with the attempt's
 * environment plus DAGRUN_GANG_DIR and DAGRUN_RENDEZVOUS:
 * - mpirun: `mpirun -np N --oversubscribe --bind-to none [--host H,...]
 *   -x NAME...`: Open MPI passes on only the variables named with -x to
 *   ranks on other hosts (the DAGRUN_* ones and the task's env); as root,
 *   with OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)=1.
 * - srun: `srun --ntasks=N --kill-on-bad-exit=1 --job-name=dagrun-TASK
 *   [--nodes=K --nodelist=H,...]`: srun passes on the whole environment
 *   and --kill-on-bad-exit makes one failing rank end the step.
 * Its rendezvous (a TCP listener of the executor's) listens on the task's
 * `rendezvous` address; by default on loopback when every rank runs here
 * (mpirun without hosts, or hosts that all name this machine), else on
 * every interface, reached by this machine's name. A run with secrets
 * cannot use a launcher yet: its ranks would read the attempt masked.
 *
 * Data flows one way: the scheduler gives the task and the attempt's
 * facts, gets a gang to hand the executor (gang_request), and gives the
 * executor's result back for words. All on the loop's thread.
 */
#ifndef DAGRUN_GANG_H
#define DAGRUN_GANG_H

#include <cjson/cJSON.h>

#include "dagfile/spec.h"
#include "executor.h"

/* One attempt's gang, made by gang_prepare, freed by gang_free. */
typedef struct gang {
  int n;                /* ranks: the task's world_size */
  exec_rank *ranks;     /* n entries: each rank's log and, local, env */
  char **launcher_argv; /* a launched gang's argv (workerenv_free), or NULL */
  const char *rdv_bind; /* launched: the IP address to listen on; static
                           or the task's, never freed */
  int rdv_port;         /* launched: the port, 0 = any free one */
  char rdv_host[256];   /* launched: the name the ranks connect to */
} gang;

/* Whether task st runs as a gang: world_size > 1, or a launcher other
 * than local (even with world_size 1). */
int gang_wanted(const spec_task *st);

/* Prepares the gang of an attempt of st: attempt_dir exists, log_path is
 * the attempt's log, facts the DAGRUN_* variables of the attempt and
 * task_env its resolved `env:` (both borrowed, may be NULL), has_secrets
 * whether the run has any. A launched gang's variables are put in front
 * of *env (the attempt's environment, workerenv.h; it may move). Returns
 * 0 with *g, or -1 with *reason (caller frees), the attempt's failure,
 * e.g. "cannot create DIR: why"; *g must be freed with gang_free in both
 * cases. */
int gang_prepare(const spec_task *st, const char *attempt_dir,
                 const char *log_path, const cJSON *facts,
                 const cJSON *task_env, int has_secrets, char ***env, gang *g,
                 char **reason);

/* Fills the gang's fields of rq (n_ranks, ranks, launcher_argv, rdv_*);
 * they borrow from g, which must outlive executor_start. */
void gang_request(const gang *g, exec_request *rq);

/* Frees what gang_prepare made; a zeroed gang is a no-op. */
void gang_free(gang *g);

/* Why a gang's attempt failed, from r (r->n_ranks > 1) and one, the
 * reason as one process would give it ("exit 3", "timed out after 5m"):
 * which rank failed first and which were stopped because of it, and the
 * launched ranks that never joined, e.g. "rank 2 exited 3; stopped ranks
 * 0, 1, 3". Caller frees. */
char *gang_failure_reason(const exec_result *r, const char *one);

/* How each rank of r ended, for run.json: [{"rank", "exit_code" or
 * "signal", "stopped"?}, ...]. Caller frees. */
cJSON *gang_ranks_json(const exec_result *r);

#endif /* DAGRUN_GANG_H */
