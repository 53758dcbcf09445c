/*
 * api: the HTTP API and dashboard of `dagrun serve`, on libmicrohttpd.
 *
 * The server runs on libmicrohttpd's own threads. What it reads (runs,
 * tasks, attempts, logs, metrics, alert deliveries) it reads itself: from
 * the run store (a store handle per request, store.h) and the run
 * directories the store names. What it needs from the daemon (the loaded
 * DAGs, starting and cancelling runs) it asks through api_actions, whose
 * functions are called on the server's threads and must be thread-safe.
 *
 * Endpoints (JSON everywhere, errors as {"error": "..."}; the OpenAPI
 * document at /api/openapi.json is the reference):
 *   GET  /                                   the dashboard (HTML)
 *   GET  /api/health                         {status, version, uptime_s, dags}
 *   GET  /api/openapi.json                   the OpenAPI 3 document
 *   GET  /api/dags                           actions->dags
 *   GET  /api/dags/{dag}                     one DAG, with its recent runs
 *   GET  /api/runs?dag=&state=&limit=        store_runs
 *   GET  /api/runs/{run}                     store_run (id or unique prefix)
 *   GET  /api/runs/{run}/tasks/{task}/log?attempt=N&offset=B
 *                                            {attempt, state, offset,
 *                                             next_offset, size, eof, text}
 *   GET  /api/runs/{run}/metrics             {tasks: {task: [metric
 *                                            objects]}, downsampled: {task:
 *                                            {name: k}}} from
 *                                            <run_dir>/<task>/metrics.jsonl
 *   GET  /api/runs/{run}/alerts              store_alerts
 *   POST /api/dags/{dag}/runs                trigger: body {"params": {...}}
 *                                            (optional); 201 {run_id, dag}
 *   POST /api/dags/{dag}/pause
 *   POST /api/dags/{dag}/unpause             the DAG's schedule paused or
 *                                            going (pause.h): body {by,
 *                                            via}, optional; 200 {dag,
 *                                            paused, changed}; 404 no such
 *                                            DAG
 *   POST /api/runs/{run}/cancel              202 {run_id}
 *   POST /api/runs/{run}/tasks/{task}/approve
 *   POST /api/runs/{run}/tasks/{task}/reject  an approval task's decision
 *                                            (approve.h): body {by, via,
 *                                            reason (reject)}, all
 *                                            optional; 200 {run_id, task,
 *                                            decision, replay}; 404 no such
 *                                            run or task, 409 the run or
 *                                            task does not wait, or was
 *                                            decided the other way
 *
 * The metrics are wrapped in "tasks" (not {task: [...]} at the top, as
 * first planned) so that "downsampled" (the series thinned to every k-th
 * point, above 5000 points) cannot collide with a task of that name.
 *
 * Authentication: GETs are open unless a read token is configured (it
 * must be off loopback: serve refuses to start without one); then every
 * GET but the dashboard's page, /api/health and /api/openapi.json needs
 * Authorization: Bearer T, or the cookie dagrun_token=T that the
 * dashboard sets (so that its report links carry it), T the read token
 * or the POST token. POSTs need a bearer token (Authorization: Bearer T) or
 * an HMAC-SHA256 signature (X-Dagrun-Timestamp: unix seconds,
 * X-Dagrun-Signature: sha256=hex(HMAC(secret, METHOD "\n" TARGET "\n"
 * TIMESTAMP "\n" BODY)), TARGET the path and query exactly as sent on the
 * request line, the timestamp within 5 minutes of now, each signature
 * accepted once); both compared in constant time. A server with neither
 * configured refuses every POST (403).
 *
 * On a network (docs/serve.md, "On a network"): a Host header that names
 * none of the addresses served nor an --allow-host name is refused (421,
 * against DNS rebinding); a request target with a control byte, after
 * percent-decoding, is refused (400); at most API_CONN_PER_IP connections
 * per client address, and each must deliver its request within
 * request_timeout; error bodies name no file of the machine.
 */
#ifndef DAGRUN_API_H
#define DAGRUN_API_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* What the daemon does for the API. Called on the server's threads. */
typedef struct api_actions {
  /* The loaded DAGs: [{name, file, description, schedule, timezone,
   * catchup, overlap, next_fire (UTC seconds) , error (a DAG file that does
   * not load: its message with file:line:col; the other keys may then be
   * missing), tasks: [{name, stage, needs: [names]}]}]. Caller frees. */
  cJSON *(*dags)(void *ud);
  /* Starts a run of dag now, with params (an object of param overrides, or
   * NULL). Returns 0 with the new run's id in run_id once the run is
   * recorded in the store (or queued behind a going run), else an HTTP
   * status with a message in err: 404 (no such DAG), 400 (bad params, a
   * DAG that does not load), 409 (overlap: skip and a run is going), 503
   * (shutting down), 500 (among others: its dagrun exited before it
   * recorded the run). */
  int (*trigger)(void *ud, const char *dag, const cJSON *params, char *run_id,
                 size_t run_id_len, char *err, size_t errlen);
  /* Stops a run (full id). Returns 0, or an HTTP status with err: 404 (no
   * such run), 409 (already finished), 500. */
  int (*cancel)(void *ud, const char *run_id, char *err, size_t errlen);
  /* Queues a backfill of dag's schedule times from from to to (backfill.h's
   * backfill_plan), skipping those with a successful run unless rerun.
   * Returns 0 with *result {dag, queued: [times], skipped: [{at, run}]}
   * (caller frees), else an HTTP status with err: 404 (no such DAG), 400
   * (no schedule, a bad or empty range, too many times), 503, 500. */
  int (*backfill)(void *ud, const char *dag, const char *from, const char *to,
                  int rerun, cJSON **result, char *err, size_t errlen);
  /* Goes on with a finished run (full id): `dagrun resume`, the tasks of
   * clear (an array of task names, or NULL) run again, with downstream
   * every task after them. 0, or an HTTP status with err: 404 (no such
   * run), 409 (going, or succeeded with nothing to clear), 400 (a task
   * the run does not have), 503, 500. */
  int (*resume)(void *ud, const char *run_id, const cJSON *clear,
                int downstream, char *err, size_t errlen);
  /* Pauses (paused 1) or unpauses (0) dag's schedule (pause.h), by and via
   * saying who (NULL: "api"). Returns 0 with *result {dag, paused,
   * changed, paused_since, paused_by} (caller frees), else an HTTP status
   * with err: 404 (no such DAG), 503, 500. */
  int (*pause)(void *ud, const char *dag, int paused, const char *by,
               const char *via, cJSON **result, char *err, size_t errlen);
  void *ud;
} api_actions;

/* Seconds a connection has by default to deliver a whole request. */
#define API_REQUEST_TIMEOUT 30

typedef struct api_config {
  const char *host;        /* address to listen on, e.g. "127.0.0.1" */
  int port;                /* 0: any free port (see api_port) */
  const char *token;       /* bearer token, or NULL */
  const char *hmac_secret; /* HMAC key, or NULL */
  const char *store_path;  /* the run store */
  /* Host header names accepted besides the addresses served (a reverse
   * proxy's name), NULL-terminated, or NULL. */
  const char *const *allow_hosts;
  /* Seconds a connection has to deliver a whole request (headers and
   * body); 0: API_REQUEST_TIMEOUT. */
  double request_timeout;
  const char *read_token; /* bearer token for GETs, or NULL: GETs open */
} api_config;

typedef struct api_server api_server;

/* Starts serving. Strings in cfg are copied. Returns 0 with *out, or
 * DR_EIO with a message in err: "cannot listen on HOST port P: address
 * in use (...)" for a port another program listens on, or a bad host. */
int api_start(const api_config *cfg, const api_actions *actions,
              api_server **out, char *err, size_t errlen);
/* The port it listens on. */
int api_port(const api_server *s);
/* Stops accepting, waits for requests in progress, frees s. NULL: no-op. */
void api_stop(api_server *s);

#endif /* DAGRUN_API_H */
