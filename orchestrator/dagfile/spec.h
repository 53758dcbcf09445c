/*
 * spec: a DAG file, parsed and checked for structure. spec_load() turns the
 * YAML tree into tasks with their settings (defaults applied), resolves
 * `needs` to task indices, and reports every structural error it finds, each
 * with file:line:col, what was found and what was expected: unknown keys
 * (with "did you mean"), wrong types, bad durations, duplicate task names,
 * unknown needs, unknown pools. Checks that need more than the file (cycles,
 * stage plugins and their params, templates) live in check.h.
 *
 * Top-level keys: dag (required, [A-Za-z0-9_.-]+), description, params (map),
 * defaults (map of task settings), max_parallel (int >= 1), max_active_runs
 * (int >= 1), pools (map of name to int >= 1), tasks (map, required, at least
 * one), the cron trigger (cron.h): schedule (a cron expression or macro, errors
 * pointing at the bad token), timezone (an IANA name, default UTC), catchup
 * (bool, default false), overlap (skip | queue | allow, default skip), secrets
 * (a list of names of declared params whose values are secrets, see secrets.h),
 * and alerts, which is kept as a node here.
 *
 * Task keys: stage (required), needs (list of task names or one name),
 * with (map), description, outputs (the list of output keys the task
 * produces, [A-Za-z0-9_]+, each once: when given, a ${tasks.T.outputs.KEY}
 * naming another key is an error of `dagrun check`, and the worker fails
 * an attempt that ends without one of them), branch (bool: the task
 * chooses which of its downstream tasks run, see scheduler.h; it needs
 * one downstream task at least, which `dagrun check` verifies), map (a
 * list, or ${params.NAME} of one: see below), and the settings that
 * `defaults` may also give:
 * retries (int >= 0), retry_delay (duration), retry_backoff (number >= 1),
 * retry_max_delay (duration), retry_jitter (number in [0,1]), retry_on (list
 * of exit codes 1..255), timeout (duration, 0 = none), heartbeat_timeout
 * (duration >= 1s, 0 = off), kill_grace (duration), pool (name), trigger
 * (a spec_trigger rule's name), env (map of string to string), world_size
 * (int >= 1, default 1: more makes the task a gang of that many ranks),
 * launcher (local, the default, mpirun or srun), hosts (list of host
 * names; not with launcher local), rendezvous (auto, the default, or the
 * IP address, with an optional port, that dagrun listens on for the ranks
 * of a launched gang; not with launcher local).
 *
 * `map:` (mapping.h) expands a task into one instance task per item of a
 * list known when the file is loaded: a literal list, or ${params.NAME}
 * naming a param whose value in the file is a list. Instance k of task T
 * is the task "T-k" (a name no other task may take); `needs: [T]` means
 * every instance, and an empty list makes no instance.
 * A list known only at run time, `map: ${tasks.U.outputs.KEY}`, makes one
 * placeholder task named T (item_index SPEC_ITEM_PENDING) that stands for
 * the mapped task until the run has the list: `needs: [T]` needs the
 * placeholder, and spec_map_expand, called by the scheduler when the
 * placeholder's turn comes, appends the instances at the end of tasks and
 * moves those needs onto them.
 * An approval task has `approval:` (a map: timeout, a duration >= 1s,
 * default none; message, a string) instead of `stage:` and has no `with`:
 * it waits for a person (scheduler.h, "Approval").
 *
 * Task, param and pool names are [A-Za-z0-9_-]+: they appear in ${...}
 * references and in directory names. A task listing the same need twice
 * needs it once. `with:`, `env:`, `params:` and `defaults:` may be left
 * empty (null), meaning none.
 *
 * Ownership: a spec owns its tree; nodes pointed to from tasks are borrowed
 * from spec->root. Single-threaded use.
 */
#ifndef DAGRUN_SPEC_H
#define DAGRUN_SPEC_H

#include <stddef.h>

#include "base/util.h"
#include "base/ydoc.h"
#include "ontrig.h"

/* A task's trigger rule: when it runs, given how its upstream tasks
 * ended (Airflow's rules and meanings; scheduler.h says when a task whose
 * rule can no longer be met is skipped or upstream_failed). "Failed"
 * counts upstream tasks that failed, were upstream_failed or cancelled;
 * "succeeded" those that succeeded or were cached. */
typedef enum spec_trigger {
  SPEC_TRIGGER_ALL_SUCCESS = 0, /* every upstream succeeded */
  SPEC_TRIGGER_ALL_DONE,        /* every upstream finished, however */
  SPEC_TRIGGER_ONE_FAILED,      /* one failed (need not wait for the rest) */
  SPEC_TRIGGER_ONE_SUCCESS,     /* one succeeded (need not wait) */
  SPEC_TRIGGER_NONE_FAILED,     /* all finished, each succeeded or skipped */
  SPEC_TRIGGER_NONE_FAILED_MIN_ONE_SUCCESS, /* and one succeeded */
  SPEC_TRIGGER_ALL_FAILED,                  /* every upstream failed */
  SPEC_TRIGGER_ALL_SKIPPED,                 /* every upstream was skipped */
  SPEC_TRIGGER_NONE_SKIPPED,                /* all finished, none skipped */
  SPEC_TRIGGER_COUNT
} spec_trigger;

/* The rule's name as written in a DAG file ("all_success", ...). */
const char *spec_trigger_name(spec_trigger t);

/* What a cron trigger does while the previous run is still going. */
typedef enum spec_overlap {
  SPEC_OVERLAP_SKIP = 0,  /* do not start another run */
  SPEC_OVERLAP_QUEUE = 1, /* start it when the previous one ends */
  SPEC_OVERLAP_ALLOW = 2  /* start it now, beside the previous one */
} spec_overlap;

/* How the ranks of a gang are started. */
typedef enum spec_launcher {
  SPEC_LAUNCHER_LOCAL = 0,  /* one worker per rank on this machine */
  SPEC_LAUNCHER_MPIRUN = 1, /* mpirun starts the ranks (Open MPI) */
  SPEC_LAUNCHER_SRUN = 2    /* srun starts the ranks (Slurm) */
} spec_launcher;

typedef struct spec_retry {
  int retries;        /* extra attempts after the first; default 0 */
  double delay_s;     /* first retry delay; default 10s */
  double backoff;     /* multiplier per retry; default 2 */
  double max_delay_s; /* cap; default 1h */
  double jitter;      /* fraction removed at random; default 0.1 */
  int *on;            /* exit codes worth retrying; NULL = any failure */
  size_t n_on;
} spec_retry;

typedef struct spec_task {
  char *name;
  const ynode *node; /* the task's map (for positions) */
  char *stage;       /* as written: a name or a path containing '/' */
  const ynode *stage_node;
  size_t *needs; /* indices into spec->tasks, in written order, no dups */
  size_t n_needs;
  const ynode *with; /* MAP or NULL */
  const ynode *env;  /* MAP or NULL (task env merged over defaults env) */
  char *description; /* NULL if none */
  spec_retry retry;
  double timeout_s;    /* 0 = none */
  double heartbeat_s;  /* 0 = off */
  double kill_grace_s; /* SIGTERM -> SIGKILL; default 10s */
  size_t pool;         /* index into spec->pools; SIZE_MAX = no pool */
  spec_trigger trigger;
  int cache; /* `cache:` 1: may be skipped by the fingerprint cache, 0: never;
                -1 not written: the stage decides (scheduler.h, "The
                fingerprint cache": every stage but exec) */
  const ynode **need_nodes; /* per needs[i]: the entry as written */
  const ynode *pool_node;   /* the pool name as written, or NULL */
  int world_size;           /* ranks; 1 = not a gang */
  spec_launcher launcher;
  const ynode *launcher_node; /* the launcher as written, or NULL */
  const ynode *hosts;         /* SEQ of host names as written, or NULL */
  /* rendezvous: the IP address to listen on ("" = auto: run/gang.c picks)
   * and the port (0 = any free one). */
  char rdv_bind[46];
  int rdv_port;
  const ynode *rendezvous_node; /* as written, or NULL */
  /* `outputs:`: a SEQ of the output keys the task declares (scalars, each
   * valid and once), or NULL when it declares none. */
  const ynode *outputs;
  /* `branch: true`: the task chooses which of its direct downstream tasks
   * run, by its output `branch` (scheduler.h, "Branching"). */
  int branch;
  const ynode *branch_node; /* as written, or NULL */
  /* An instance of a mapped task: the index of its spec_map and its item's
   * position in the list; map is SIZE_MAX for a task that is not one. The
   * placeholder of a list known at run time has its map and item_index
   * SPEC_ITEM_PENDING. */
  size_t map;
  size_t item_index;
  /* The name as written, for messages: an instance's is its mapped
   * task's (so that one mistake is one message), any other task's is
   * its name. */
  const char *label;
  /* `produces:`: the datasets a success of the task updates (ontrig.h). */
  char **produces;
  size_t n_produces;
  /* `approval:`: the task runs no stage (stage is NULL) but waits for a
   * person to approve or reject it (scheduler.h, "Approval"). NULL when
   * the task is not an approval task. */
  const ynode *approval_node;
  double approval_timeout_s; /* 0 = waits without end */
  char *approval_message;    /* shown to the approver, or NULL */
} spec_task;

/* The item_index of a runtime map's placeholder (spec_map.placeholder). */
#define SPEC_ITEM_PENDING SIZE_MAX

/* The most instances a list known at run time may make: a longer list
 * fails the mapped task (Airflow's max_map_length is the same). */
#define SPEC_MAP_MAX 1024

/* A task written with `map:` (mapping.h): its instances are the tasks
 * first .. first + n - 1, one per item, in item order. */
typedef struct spec_map {
  char *name;         /* the task's name as written */
  const ynode *node;  /* the `map:` value as written */
  const ynode *items; /* the list: map's own SEQ, or the param's default;
                         NULL for a list known at run time */
  char *param;        /* ${params.NAME}: NAME (items come from the run's
                         value of the param), or NULL for a literal list */
  size_t first, n;
  /* A list known at run time (`map: ${tasks.U.outputs.KEY}`, node): the
   * placeholder task, SIZE_MAX for the other maps. Until expanded, n is
   * 0; spec_map_expand sets first, n and run_items (the list, owned). */
  size_t placeholder;
  int expanded;
  struct cJSON *run_items;
} spec_map;

/* What a task runs, for people: its stage as written, "approval" for an
 * approval task, "?" for neither (a DAG file with errors). */
const char *spec_task_kind(const spec_task *t);

typedef struct spec_pool {
  char *name;
  int size;
} spec_pool;

typedef struct spec {
  char *path; /* as given */
  char *dir;  /* directory of path: relative plugin paths resolve here */
  ynode *root;
  char *dag;
  char *description;   /* NULL if none */
  const ynode *params; /* MAP or NULL */
  int max_parallel;    /* 0 = not set (the CLI decides) */
  /* At most this many runs of the DAG at once, machine-wide (all dagruns
   * sharing a run store); 0 = no limit. */
  int max_active_runs;
  spec_pool *pools;
  size_t n_pools;
  spec_task *tasks; /* in the order written */
  size_t n_tasks;
  strmap task_index;              /* name -> index */
  spec_map *maps;                 /* mapped tasks, in the order written */
  size_t n_maps;
  strmap map_index;               /* a mapped task's name -> index into maps */
  const ynode *schedule, *alerts; /* kept for later issues; may be NULL */
  /* `secrets:`: names of declared params (and their entries as written). */
  char **secrets;
  const ynode **secret_nodes;
  size_t n_secrets;
  /* `param_schema:` compiled and the params' places in shell scripts
   * (paramrule.h); never NULL after spec_parse's parse_root ran. */
  struct prules *rules;
  /* The cron trigger, valid when schedule is (a scalar whose expression
   * cron_parse accepts). */
  char *timezone;       /* IANA name; NULL = UTC */
  int catchup;          /* 1: every missed fire time; 0: only the latest */
  spec_overlap overlap; /* default SPEC_OVERLAP_SKIP */
  /* `on:`, the data triggers (ontrig.h); catchup and overlap apply to
   * them as to the schedule. */
  spec_on on;
  /* Cache of "is task A upstream of task B" answers (dag.h), created on
   * first use by the template checks, freed by spec_free. A cache only:
   * it does not change what the spec means, so it may be filled in
   * through a const spec. */
  struct dag_reach *reach;
} spec;

/* Loads and structurally validates a DAG file. Returns 0 with *out set,
 * or DR_ESPEC (or DR_ENOENT/DR_EIO for the file) with every error added to
 * d; *out is then still set when the YAML parsed (so more checks can run)
 * and NULL otherwise. Caller frees with spec_free. */
int spec_load(const char *path, spec **out, diags *d);
/* Same from memory; name is the file name used in messages and dir. */
int spec_parse(const char *name, const char *text, size_t len, spec **out,
               diags *d);
void spec_free(spec *s);
/* The DAG's cron trigger, compiled: 0 with *e and *z (free with
 * cron_destroy and cron_zone_close), DR_ENOENT when it has no schedule,
 * or another error with err (a spec that did not check). */
struct cron_expr;
struct cron_zone;
int spec_schedule_open(const spec *s, struct cron_expr **e,
                       struct cron_zone **z, char *err, size_t errlen);

/* How spec_duration refuses a node. */
enum {
  SPEC_DURATION_NOT_SCALAR = -1, /* null, a bool, a list or a map */
  SPEC_DURATION_NEGATIVE = -2,   /* a number below 0 (or not finite) */
  SPEC_DURATION_SYNTAX = -3,     /* a string parse_duration refuses */
  SPEC_DURATION_TOO_LONG = -4    /* over SPEC_DURATION_MAX_S */
};

/* The longest duration a DAG file may give: a year. Longer ones are
 * typos (1e20) that would overflow the loop's millisecond timers. */
#define SPEC_DURATION_MAX_S (365.0 * 86400.0)

/* The one reading of a duration in a DAG file, for task settings and
 * alerts alike: an integer or float scalar counts seconds, a string goes
 * through parse_duration ("90", "500ms", "30s", "5m", "1h30m"). Returns 0
 * with *out (0 to SPEC_DURATION_MAX_S), or a SPEC_DURATION_* code with *out
 * untouched. It adds no message: each caller says what the value was for
 * (file:line:col from v) and what range it needs beyond >= 0. */
int spec_duration(const ynode *v, double *out);

/* Whether param name's value is a secret (secrets.h): listed under
 * `secrets:` or used in an alert's webhook. */
int spec_param_secret(const spec *s, const char *name);
/* msg, an error message about a value of a secret param, into err (at
 * most errlen bytes) with each 'value' (as messages quote values) written
 * '***': no message may show a secret. An empty value is left alone. */
void spec_hide_value(const char *msg, const char *value, char *err,
                     size_t errlen);

/* Index of a task by name, or -1. */
long spec_task_find(const spec *s, const char *name);
/* The mapped task of that name (as written, not an instance), or NULL. */
const spec_map *spec_map_find(const spec *s, const char *name);

/* Expands map `map`, a list known at run time, over items (a JSON array of
 * at most SPEC_MAP_MAX items, copied): appends its instances "T-0" ...
 * (copies of the placeholder, with its needs) at the end of s->tasks,
 * and every task that needs the placeholder needs the instances instead
 * (when there are any; with none it keeps needing the placeholder, which
 * then counts as succeeded). Task indices below the old n_tasks keep their
 * meaning; pointers into s->tasks do not survive. A map already expanded
 * is left as it is. */
void spec_map_expand(spec *s, size_t map, const struct cJSON *items);

/* Whether task t declares output key (the first n bytes of key) in
 * `outputs:`; 1 too when t declares no outputs (anything may come), and
 * for a branch task's `branch`, which it always gives. */
int spec_task_may_output(const spec_task *t, const char *key, size_t n);

#endif /* DAGRUN_SPEC_H */
