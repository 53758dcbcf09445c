/*
 * dagrun plugin ABI.
 *
 * A stage plugin is a shared object that exports exactly one function,
 * DAGRUN_STAGE_ENTRY (dagrun_stage_entry), returning a pointer to a const
 * dagrun_stage descriptor with static storage duration. The host (a dagrun
 * worker process, one per task attempt) loads the plugin, reads the
 * descriptor and calls run() once, passing a host table of services.
 *
 * Compatibility rules (SQLite's sqlite3_api_routines, nginx's signature):
 * - Structs only grow at the end; each starts with its struct_size so the
 *   other side knows which members exist. A NULL method means "not
 *   supported".
 * - A plugin records DAGRUN_ABI_VERSION at build time. The host refuses a
 *   plugin whose major version differs from its own, or whose minor version
 *   is newer than its own, with a message naming the file and both versions.
 * - A member added at the end of a struct bumps the minor version. The host
 *   reads such a member of a plugin's descriptor only when the plugin's
 *   struct_size covers it, so a plugin built for an older minor loads
 *   unchanged and simply does not have it.
 *
 * Versions:
 *   1.0  the first.
 *   1.1  dagrun_stage.choices: the fixed set of values a param may take.
 *   1.2  dagrun_stage.check: a task's params checked together, by `dagrun
 *        check` (dagrun_check_task).
 *
 * Rules for plugins:
 * - Never call exit(), never print protocol to stdout. Return a status:
 *   0 for success, anything else (1..255) for failure; the status becomes
 *   the attempt's exit code (a task's `retry_on` matches against it). Say
 *   why with host->fail() before returning non-zero.
 * - stdout and stderr of the attempt go to its log file; host->log() is
 *   the structured way to log.
 * - Poll host->cancelled() in long loops: it turns true when the task is
 *   being stopped (timeout, Ctrl-C, cancel). The process group receives
 *   SIGKILL after a grace period regardless.
 * - Build with -fvisibility=hidden; DAGRUN_EXPORT marks the entry point.
 *
 * The run's facts are in the worker's environment, not in the host
 * table: DAGRUN_DAG, DAGRUN_RUN_ID, DAGRUN_RUN_DIR, DAGRUN_TASK,
 * DAGRUN_ATTEMPT, DAGRUN_OUT_DIR, DAGRUN_TRIGGER (manual, cron, api,
 * backfill), and the run's logical time, ISO 8601 with the DAG time
 * zone's offset: DAGRUN_LOGICAL_DATE, DAGRUN_DATA_INTERVAL_START,
 * DAGRUN_DATA_INTERVAL_END (docs/dag-files.md, "Logical time"). Read them
 * with getenv(). They are strings that every attempt has, plugin or
 * `exec` command alike; host-table members for them would bump the minor
 * ABI and give plugins built for 1.0 and 1.1 nothing they cannot already
 * read.
 *
 * Build out of tree:
 *   cc -shared -fPIC $(pkg-config --cflags dagrun-plugin) -o my.so my.c
 */
#ifndef DAGRUN_PLUGIN_H
#define DAGRUN_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DAGRUN_ABI_MAJOR 1
#define DAGRUN_ABI_MINOR 2
#define DAGRUN_ABI_VERSION ((uint32_t)((DAGRUN_ABI_MAJOR << 16) | DAGRUN_ABI_MINOR))
#define DAGRUN_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)
#define DAGRUN_ABI_MINOR_OF(v) ((uint32_t)(v) & 0xffffu)

/* The one symbol a plugin exports. */
#define DAGRUN_STAGE_ENTRY dagrun_stage_entry
#define DAGRUN_STAGE_ENTRY_NAME "dagrun_stage_entry"

#if defined(__GNUC__)
#define DAGRUN_EXPORT __attribute__((visibility("default")))
#define DAGRUN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DAGRUN_EXPORT
#define DAGRUN_PRINTF(f, a)
#endif

/* Types a stage parameter can have. YAML values are checked against these
 * by `dagrun check` and converted before run() is called. */
typedef enum dagrun_param_type {
  DAGRUN_PARAM_STRING = 1,
  DAGRUN_PARAM_INT = 2,   /* int64 */
  DAGRUN_PARAM_FLOAT = 3, /* double; an int is accepted */
  DAGRUN_PARAM_BOOL = 4,
  DAGRUN_PARAM_LIST = 5, /* list of strings; a scalar becomes a 1-item list */
  DAGRUN_PARAM_MAP = 6   /* map of string to string */
} dagrun_param_type;

/* One entry of a stage's parameter schema. The schema is an array
 * terminated by an entry whose name is NULL. */
typedef struct dagrun_param_spec {
  const char *name;
  dagrun_param_type type;
  /* Default as YAML scalar text ("8", "0.02", "true", "gpt-tiny"), or NULL
   * for none. Lists and maps have no default (absent means empty). */
  const char *default_value;
  int required; /* non-zero: the task must set it */
  const char *help;
} dagrun_param_spec;

/* ABI 1.1: the values one param may take, for params with a fixed set
 * (`device: cpu|cuda|auto`). `dagrun check` refuses any other value at its
 * position in the YAML, naming the choices, so that a typo fails before
 * the run rather than when the task's turn comes; `dagrun stages` lists
 * them. The param must be a STRING one (compared as written) or an INT one
 * (values are decimal integers, compared as numbers). Its default, if it
 * has one, must be among the values: the loader refuses the plugin
 * otherwise. Use the same array in run() to map the value to what it
 * means, so that the list and the code cannot drift apart:
 *
 *   static const char *const greetings[] = {"hello", "hi", NULL};
 *   static const dagrun_param_choice choices[] = {
 *       {"greeting", greetings}, {NULL, NULL}};
 */
typedef struct dagrun_param_choice {
  const char *param;         /* a param of the stage's schema */
  const char *const *values; /* NULL-terminated, at least one */
} dagrun_param_choice;

/* ABI 1.2: one task as `dagrun check` shows it to a stage's check (see
 * dagrun_stage.check). */
typedef struct dagrun_check_task {
  uint32_t struct_size; /* sizeof(dagrun_check_task) as built into the host */
  int world_size;       /* the task's ranks (1: not a gang) */
  /* The value of param name as text (an int in decimal, a float as
   * %.17g, true or false, a string as it is), its default when the task
   * does not set it; NULL for a list or a map, a param without a default
   * that the task does not set, and a value that waits for run time (a
   * template over an upstream's outputs), which *deferred (may be NULL)
   * then says with 1. Owned by the host, valid until check returns. */
  const char *(*param)(const struct dagrun_check_task *t, const char *name,
                       int *deferred);
  void *host; /* the host's own */
} dagrun_check_task;

/* Opaque per-attempt context owned by the host. */
typedef struct dagrun_ctx dagrun_ctx;

typedef enum dagrun_log_level {
  DAGRUN_LOG_DEBUG = 0,
  DAGRUN_LOG_INFO = 1,
  DAGRUN_LOG_WARN = 2,
  DAGRUN_LOG_ERROR = 3
} dagrun_log_level;

/* Directories the host gives a task. All exist when run() is called. */
typedef enum dagrun_dir {
  DAGRUN_DIR_OUT = 0,     /* <run>/<task>/out: outputs, stable across attempts */
  DAGRUN_DIR_TASK = 1,    /* <run>/<task> */
  DAGRUN_DIR_ATTEMPT = 2, /* <run>/<task>/attempt-<n>: scratch, log */
  DAGRUN_DIR_RUN = 3,     /* <run> */
  DAGRUN_DIR_DAG = 4      /* directory of the DAG's YAML file */
} dagrun_dir;

/* Facts about the attempt. */
typedef enum dagrun_info {
  DAGRUN_INFO_DAG = 0,     /* DAG name */
  DAGRUN_INFO_TASK = 1,    /* task name */
  DAGRUN_INFO_RUN_ID = 2,  /* run id */
  DAGRUN_INFO_ATTEMPT = 3  /* attempt number, 1-based, as a decimal string */
} dagrun_info;

/*
 * Services the host offers a running plugin. Every function is called on
 * the thread that called run(), or on threads the plugin starts, except
 * where noted; all strings returned are owned by the host and valid until
 * run() returns. Param getters return 0 on success and a negative value
 * if the param is absent (and has no default) or has another type.
 */
typedef struct dagrun_host {
  uint32_t struct_size; /* sizeof(dagrun_host) as built into the host */
  uint32_t abi_version; /* the host's DAGRUN_ABI_VERSION */

  int (*param_string)(dagrun_ctx *ctx, const char *name, const char **out);
  int (*param_int)(dagrun_ctx *ctx, const char *name, int64_t *out);
  int (*param_float)(dagrun_ctx *ctx, const char *name, double *out);
  int (*param_bool)(dagrun_ctx *ctx, const char *name, int *out);
  /* Lists: *n items, read with param_list_item. Absent list: n = 0. */
  int (*param_list_size)(dagrun_ctx *ctx, const char *name, size_t *n);
  int (*param_list_item)(dagrun_ctx *ctx, const char *name, size_t i,
                         const char **out);
  /* Maps: *n entries, read with param_map_entry in YAML order. */
  int (*param_map_size)(dagrun_ctx *ctx, const char *name, size_t *n);
  int (*param_map_entry)(dagrun_ctx *ctx, const char *name, size_t i,
                         const char **key, const char **value);

  /* Structured log line: written to the attempt log and sent to dagrun. */
  void (*log)(dagrun_ctx *ctx, dagrun_log_level level, const char *fmt, ...)
      DAGRUN_PRINTF(3, 4);
  /* Progress in [0,1] with an optional short message (may be NULL).
   * Also counts as a heartbeat. */
  void (*progress)(dagrun_ctx *ctx, double fraction, const char *message);
  /* A numeric metric at a step; appended to <task>/metrics.jsonl. */
  void (*metric)(dagrun_ctx *ctx, const char *name, double value,
                 int64_t step);
  /* A key/value output, visible downstream as ${tasks.T.outputs.KEY}.
   * Keys are [A-Za-z0-9_]+; a value is at most 16 MiB (a larger result
   * belongs in a file under the out directory, its path the output).
   * Returns 0, or negative for a bad key or a value too large. */
  int (*output)(dagrun_ctx *ctx, const char *key, const char *value);
  /* Tells dagrun the plugin is alive; needed only by plugins that run
   * longer than the task's heartbeat_timeout without calling progress(),
   * log() or metric(). Safe from any thread. */
  void (*heartbeat)(dagrun_ctx *ctx);
  /* Non-zero once the task is being stopped. Safe from any thread. */
  int (*cancelled)(dagrun_ctx *ctx);
  /* Records why the attempt fails; the last call wins. Shown to the user
   * next to the exit code. */
  void (*fail)(dagrun_ctx *ctx, const char *fmt, ...) DAGRUN_PRINTF(2, 3);
  const char *(*dir)(dagrun_ctx *ctx, dagrun_dir which);
  const char *(*info)(dagrun_ctx *ctx, dagrun_info which);
} dagrun_host;

/* What a plugin describes about itself. */
typedef struct dagrun_stage {
  uint32_t struct_size; /* sizeof(dagrun_stage) as built into the plugin */
  uint32_t abi_version; /* DAGRUN_ABI_VERSION the plugin was built with */
  /* Stage name, [a-z0-9_-]+. A DAG names a stage by its file (<name>.so
   * on the search path, or a path): build the plugin as name.so so that
   * the two agree (`dagrun stages` says where they do not). */
  const char *name;
  const char *version;  /* plugin version, free text ("1.2.0") */
  const char *summary;  /* one line for `dagrun stages` */
  const dagrun_param_spec *params; /* NULL-name terminated, or NULL */
  /* Runs the stage once. Returns 0 on success or an exit status 1..255. */
  int (*run)(dagrun_ctx *ctx, const dagrun_host *host);
  /* ABI 1.1: params with a fixed set of values (dagrun_param_choice); an
   * array terminated by an entry whose param is NULL, or NULL for none. */
  const dagrun_param_choice *choices;
  /* ABI 1.2: what the types and choices cannot say, checked before the
   * run starts anything (a shape that must divide the gang's size): 0,
   * or non-zero with the message in err (errlen bytes, without the
   * task's name: the host adds it) and in *param the param it is about
   * (one of the schema's, or "world_size"; NULL: the task), at whose
   * value the host reports it. It runs in a helper process of `dagrun
   * check` (and `run` and `serve`, which check first), not in dagrun,
   * once for each task of the stage whose params are otherwise right;
   * it must only read its arguments (no files, no output). A value that
   * waits for run time cannot be checked here: leave it to run(). NULL:
   * none. */
  int (*check)(const dagrun_check_task *t, const char **param, char *err,
               size_t errlen);
} dagrun_stage;

/* Fills in the two header fields; use it to define a descriptor:
 *   static const dagrun_stage stage = { DAGRUN_STAGE_HEADER, "hello", ... };
 */
#define DAGRUN_STAGE_HEADER sizeof(dagrun_stage), DAGRUN_ABI_VERSION

typedef const dagrun_stage *(*dagrun_stage_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* DAGRUN_PLUGIN_H */
