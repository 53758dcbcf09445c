/*
 * pause: a DAG's schedule paused or going, as Airflow's pause. The state
 * is a row of the run store's dag_pauses table (schema 7) per paused DAG,
 * written by `dagrun pause DAG` / `dagrun unpause DAG` and by the API's
 * POST /api/dags/{dag}/pause and /unpause (which the dashboard's button
 * uses); `dagrun serve` reads it on every tick, so the CLI needs no channel
 * to the daemon and the state outlives a restart of serve.
 *
 * What pausing means is serve's (docs/serve.md, "Pausing a schedule"):
 * while paused its cron times and data triggers start no run, and runs of
 * theirs that wait in its queue stay there; a manual run (`dagrun run`,
 * POST .../runs, Run now) and a backfill still start. On unpause, the
 * schedule times that passed meanwhile are handled as those of serve's
 * downtime: `catchup: false` runs the latest, `catchup: true` each.
 *
 * Also here: `dagrun dags`, the DAGs the store knows with their paused
 * state and latest run.
 *
 * All functions run on the caller's thread with a store it owns.
 */
#ifndef DAGRUN_STORE_PAUSE_H
#define DAGRUN_STORE_PAUSE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "store.h"

/* Who paused: by (a login name, or what an API caller said), via ("cli",
 * "api", "dashboard"). Ignored when unpausing. */
typedef struct pause_who {
  const char *by, *via;
} pause_who;

/* Pauses (paused 1) or unpauses (0) dag's schedule. Returns 0 when it
 * changed, 1 when it was so already (nothing written), or DR_ESTORE with
 * err. */
int pause_set(store *st, const char *dag, int paused, const pause_who *who,
              double now, char *err, size_t errlen);

/* The paused DAGs, by name: [{dag, since (UTC seconds), by, via}], or
 * NULL with err. */
cJSON *pause_list(store *st, char *err, size_t errlen);

/* The entry of dag in list (pause_list's), or NULL when not paused. */
const cJSON *pause_find(const cJSON *list, const char *dag);

/* "dag D is paused since TIME by WHO (dagrun unpause D)" in buf when dag
 * is paused, else "" (and when the store cannot be read): a line for
 * `dagrun status`. */
void pause_say(store *st, const char *dag, char *buf, size_t n);

/* `dagrun pause DAG|FILE`, `dagrun unpause DAG|FILE` and `dagrun dags
 * [--json]`; argv holds the arguments after the command's name. Exit
 * status: 0 done (or so already); 1 the store cannot be read or written;
 * 2 bad usage, a DAG the store does not know (give its file), a file that
 * does not load. */
int pause_cmd_pause(int argc, char **argv);
int pause_cmd_unpause(int argc, char **argv);
int pause_cmd_dags(int argc, char **argv);

#endif /* DAGRUN_STORE_PAUSE_H */
