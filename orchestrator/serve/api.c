/*
 * api: the HTTP API and dashboard of `dagrun serve` (api.h), on
 * libmicrohttpd with a thread per connection.
 *
 * Every request is handled start to end on its connection's thread: reads
 * open their own store handle (a handle is used by one thread at a time,
 * store.h), writes go to the daemon through api_actions. Nothing here is
 * shared between requests but the immutable api_server.
 */
#include "api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "lib/clock.h"
#include "lib/fileio.h"
#include "netguard.h"
#include "report/compare.h"
#include "store/approve.h"
#include "store/store.h"

/* The dashboard and the OpenAPI document, embedded at build time
 * (cmake/embed.cmake): the bytes, NUL-terminated, and their length. */
extern const unsigned char api_dashboard_html[];
extern const size_t api_dashboard_html_len;
extern const unsigned char api_openapi_json[];
extern const size_t api_openapi_json_len;

#define API_MAX_BODY (1u << 20)    /* POST bodies: 413 beyond */
#define API_LOG_CHUNK (256u << 10) /* most bytes of log per request */
#define API_METRICS_MAX 5000       /* points per series before thinning */
#define API_METRICS_NAMES 256      /* distinct metric names per task */
#define API_AUTH_SKEW 300          /* seconds an HMAC timestamp may be off */
/* Connections: a client address may hold API_CONN_PER_IP, so that one
 * slow or hostile client leaves the rest of API_CONN_LIMIT to others
 * (each is a thread; 256 of them are a few MiB of touched stack). */
#define API_CONN_LIMIT 256
#define API_CONN_PER_IP 16
#define API_CONN_TIMEOUT 10 /* seconds an idle connection is kept */
/* At api_stop, the seconds the requests in flight have to send their
 * answers (a trigger's 503 at shutdown among them) before the
 * connections are closed: a client that does not read gets no longer. */
#define API_DRAIN_S 5
/* Signatures remembered against replays: enough for 27 signed POSTs a
 * second over the 2 * API_AUTH_SKEW window a signature lives in, in
 * 320 KiB. */
#define API_REPLAY_MAX 8192
#define API_RUNS_DEFAULT 100 /* GET /api/runs without limit */
#define API_RUNS_MAX 10000
#define API_DAG_RUNS 20 /* recent runs in GET /api/dags/{dag} */
#define API_SEG_MAX 256 /* longest path segment routed */

struct api_server {
  struct MHD_Daemon *d;
  char *token, *secret, *read_token, *store_path;
  char **allow_hosts; /* NULL-terminated */
  /* The address listened on, for the Host check: its bytes (16 for IPv6,
   * 4 for IPv4), whether it is a loopback or a wildcard address. */
  int family;
  unsigned char addr[16];
  int loopback, wildcard;
  guard_replay *replay;
  guard_deadlines *deadlines;
  api_actions act;
  double started; /* monotonic */
  int port;
  /* libmicrohttpd's messages: kept while starting (to explain a failure),
   * printed to stderr afterwards. */
  pthread_mutex_t log_mu;
  int starting;
  char start_msg[512];
  /* Requests begun (on_uri) and not yet answered in full (on_completed),
   * for api_stop's drain. */
  pthread_mutex_t flight_mu;
  pthread_cond_t flight_done; /* on the monotonic clock */
  int in_flight;
};

/* One request's state across libmicrohttpd's calls, made when its
 * request line arrives (on_uri): the request target as sent (HMAC signs
 * it; libmicrohttpd hands on_request the path percent-decoded, where a
 * %00 ends the string), the method, and the body so far. */
typedef struct req {
  char *target;
  const char *method; /* libmicrohttpd's, valid for the request */
  int headers_seen;   /* on_request was called once */
  sbuf body;
  int too_big;
} req;

/* ---- Small helpers ---- */

static int name_ok(const char *s) {
  if (!*s)
    return 0;
  for (; *s; s++) {
    char c = *s;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

static cJSON *err_json(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static cJSON *err_json(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* A message may echo what the client sent (a run id from the path):
   * bytes that are not UTF-8, or a character cut at the end, would make
   * the answer invalid JSON text. */
  char *clean = utf8_clean(msg, strlen(msg));
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "error", clean);
  free(clean);
  return j;
}

/* A 500 whose detail goes to the server's stderr, not to the client: it
 * may name files of this machine (the run store, a log), which a client
 * has no business knowing. *out says what failed and where to look. */
static unsigned server_error(cJSON **out, const char *what,
                             const char *detail) {
  fprintf(stderr, "dagrun serve: http: %s: %s\n", what, detail);
  *out = err_json("%s (the reason is in the server's log)", what);
  return MHD_HTTP_INTERNAL_SERVER_ERROR;
}

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* A query argument as an integer in [lo, hi]: 0 with *v (def when the
 * argument is absent or empty), -1 when it is not such an integer. */
static int query_int(struct MHD_Connection *c, const char *k, long long def,
                     long long lo, long long hi, long long *v) {
  const char *z = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
  *v = def;
  if (!z || !*z)
    return 0;
  if (*z < '0' || *z > '9')
    return -1;
  char *end;
  errno = 0;
  long long x = strtoll(z, &end, 10);
  if (errno || *end || x < lo || x > hi)
    return -1;
  *v = x;
  return 0;
}

static const char *query_str(struct MHD_Connection *c, const char *k) {
  const char *z = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
  return z && *z ? z : NULL;
}

/* ---- Responses ---- */

static void common_headers(struct MHD_Response *resp, const char *ctype) {
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
}

static void free_cjson_text(void *p) { cJSON_free(p); }

/* Sends j (taken) with status; allow, when not NULL, is the Allow header
 * of a 405. A 401 says which scheme it wants. */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status,
                                 cJSON *j, const char *allow) {
  char *text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!text)
    return MHD_NO;
  struct MHD_Response *resp =
      MHD_create_response_from_buffer_with_free_callback(strlen(text), text,
                                                         free_cjson_text);
  if (!resp) {
    cJSON_free(text);
    return MHD_NO;
  }
  common_headers(resp, "application/json");
  if (allow)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
  if (status == MHD_HTTP_UNAUTHORIZED)
    MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                            "Bearer realm=\"dagrun\"");
  enum MHD_Result r = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return r;
}

static enum MHD_Result send_static(struct MHD_Connection *c,
                                   const unsigned char *data, size_t n,
                                   const char *ctype, int html) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(n, (void *)data, MHD_RESPMEM_PERSISTENT);
  if (!resp)
    return MHD_NO;
  common_headers(resp, ctype);
  if (html) {
    /* The dashboard is self-contained: inline script and style, requests
     * to this server only. */
    MHD_add_response_header(
        resp, "Content-Security-Policy",
        "default-src 'none'; script-src 'unsafe-inline'; "
        "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
  }
  enum MHD_Result r = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return r;
}

/* ---- The run store ---- */

/* Opens the store for one request: 0 with *st, 0 with *st NULL when there
 * is no store yet (no runs), or 500 with *out the error. */
static unsigned open_store(const api_server *s, store **st, cJSON **out) {
  char err[1024];
  *st = NULL;
  int rc = store_open(s->store_path, 0, st, err, sizeof err);
  if (rc == DR_ENOENT)
    return 0;
  if (rc)
    return server_error(out, "cannot open the run store", err);
  return 0;
}

/* The run whose id is id or starts with it: 0 with *st (open) and *run
 * (caller frees), else the status with *out the error (and *st NULL). */
static unsigned find_run(const api_server *s, const char *id, store **st,
                         cJSON **run, cJSON **out) {
  char err[1024];
  *run = NULL;
  if (!name_ok(id) || strlen(id) > 128) {
    *st = NULL;
    *out = err_json("invalid run id '%.128s': expected letters, digits, "
                    "'_' and '-'",
                    id);
    return MHD_HTTP_BAD_REQUEST;
  }
  unsigned status = open_store(s, st, out);
  if (status)
    return status;
  if (!*st) {
    *out = err_json("no run '%s' (no runs yet)", id);
    return MHD_HTTP_NOT_FOUND;
  }
  int rc = 0;
  *run = store_run(*st, id, &rc, err, sizeof err);
  if (*run)
    return 0;
  store_close(*st);
  *st = NULL;
  /* The store's own message for a missing run names its file. */
  if (rc == DR_ENOENT) {
    *out = err_json("no run '%s'", id);
    return MHD_HTTP_NOT_FOUND;
  }
  if (rc == DR_EINVAL) {
    *out = err_json("%s", err);
    return MHD_HTTP_BAD_REQUEST;
  }
  return server_error(out, "cannot read the run store", err);
}

/* ---- GET handlers: each returns the status with *out the body ---- */

static unsigned get_health(api_server *s, cJSON **out) {
  int n = 0;
  if (s->act.dags) {
    cJSON *d = s->act.dags(s->act.ud);
    n = cJSON_GetArraySize(d);
    cJSON_Delete(d);
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "status", "ok");
  cJSON_AddStringToObject(j, "version", DAGRUN_VERSION);
  cJSON_AddNumberToObject(j, "uptime_s",
                          floor((clock_monotonic() - s->started) * 1000) / 1000);
  cJSON_AddNumberToObject(j, "dags", n);
  *out = j;
  return MHD_HTTP_OK;
}

static cJSON *all_dags(api_server *s) {
  cJSON *d = s->act.dags ? s->act.dags(s->act.ud) : NULL;
  return d ? d : cJSON_CreateArray();
}

static unsigned get_dag(api_server *s, const char *name, cJSON **out) {
  cJSON *dags = all_dags(s), *found = NULL, *it;
  cJSON_ArrayForEach(it, dags) {
    const char *z = str_of(it, "name");
    if (z && !strcmp(z, name)) {
      found = cJSON_DetachItemViaPointer(dags, it);
      break;
    }
  }
  cJSON_Delete(dags);
  if (!found) {
    *out = err_json("no DAG named '%.200s'", name);
    return MHD_HTTP_NOT_FOUND;
  }
  store *st;
  unsigned status = open_store(s, &st, out);
  if (status) {
    cJSON_Delete(found);
    return status;
  }
  cJSON *runs = NULL;
  if (st) {
    char err[1024];
    runs = store_runs(st, name, NULL, API_DAG_RUNS, err, sizeof err);
    store_close(st);
    if (!runs) {
      cJSON_Delete(found);
      return server_error(out, "cannot read the run store", err);
    }
  }
  cJSON_AddItemToObject(found, "runs", runs ? runs : cJSON_CreateArray());
  *out = found;
  return MHD_HTTP_OK;
}

/* A run row for a run serve knows of and the store does not have yet. */
static cJSON *unrecorded_row(const char *id, const char *dag, const char *state,
                             const cJSON *trigger, const cJSON *logical_date,
                             const char *waiting) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", id);
  cJSON_AddStringToObject(o, "dag", dag);
  cJSON_AddStringToObject(o, "state", state);
  cJSON_AddItemToObject(
      o, "trigger", trigger ? cJSON_Duplicate(trigger, 1) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "logical_date",
                        logical_date ? cJSON_Duplicate(logical_date, 1)
                                     : cJSON_CreateNull());
  cJSON_AddStringToObject(o, "waiting", waiting);
  cJSON_AddItemToObject(o, "tags", cJSON_CreateArray());
  return o;
}

/* The runs of dag (NULL: every DAG) that have an id but are not in the
 * store yet, from serve's snapshot (api.h's dags: queue and starting):
 * "queued" in serve's queue (an API trigger's id was answered already),
 * or "starting" while their dagrun records them. */
static cJSON *unrecorded_runs(api_server *s, const char *dag) {
  cJSON *rows = cJSON_CreateArray(), *dags = all_dags(s), *d;
  cJSON_ArrayForEach(d, dags) {
    const char *name = str_of(d, "name");
    if (!name || (dag && strcmp(dag, name) != 0))
      continue;
    const cJSON *it;
    int ahead = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "queue")) {
      const char *id = str_of(it, "run_id");
      char why[160];
      snprintf(why, sizeof why,
               "in dagrun serve's queue behind a going run, %d queued ahead "
               "of it",
               ahead++);
      if (id)
        cJSON_AddItemToArray(
            rows,
            unrecorded_row(id, name, "queued",
                           cJSON_GetObjectItemCaseSensitive(it, "trigger"),
                           cJSON_GetObjectItemCaseSensitive(it, "logical_date"),
                           why));
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "starting")) {
      if (cJSON_IsString(it))
        cJSON_AddItemToArray(
            rows, unrecorded_row(it->valuestring, name, "starting", NULL, NULL,
                                 "started by dagrun serve; its dagrun is "
                                 "recording it"));
    }
  }
  cJSON_Delete(dags);
  return rows;
}

/* Whether runs has a row whose id is id. */
static int has_run(const cJSON *runs, const char *id) {
  const cJSON *it;
  cJSON_ArrayForEach(it, runs) {
    const char *z = str_of(it, "id");
    if (z && strcmp(z, id) == 0)
      return 1;
  }
  return 0;
}

/* runs (the store's, newest first) with those of rows (unrecorded_runs,
 * read before the store: a run that records itself in between is in one
 * of the two, and in both only once) that a listing of state shows put
 * first, as the newest, at most limit in all. Frees both. */
static cJSON *with_unrecorded(cJSON *rows, cJSON *runs, const char *state,
                              int limit) {
  cJSON *all = cJSON_CreateArray(), *it;
  int n = 0;
  while ((it = cJSON_DetachItemFromArray(rows, 0))) {
    const char *st = str_of(it, "state"), *id = str_of(it, "id");
    if ((!state || strcmp(state, st) == 0) && !has_run(runs, id) &&
        n < limit) {
      cJSON_AddItemToArray(all, it);
      n++;
    } else {
      cJSON_Delete(it);
    }
  }
  cJSON_Delete(rows);
  while ((it = cJSON_DetachItemFromArray(runs, 0))) {
    if (n++ < limit)
      cJSON_AddItemToArray(all, it);
    else
      cJSON_Delete(it);
  }
  cJSON_Delete(runs);
  return all;
}

/* The unrecorded run (unrecorded_runs) whose id is id or starts with it,
 * when exactly one is; else NULL. */
static cJSON *find_unrecorded(api_server *s, const char *id) {
  cJSON *rows = unrecorded_runs(s, NULL), *found = NULL, *it;
  int n = 0;
  cJSON_ArrayForEach(it, rows) {
    const char *z = str_of(it, "id");
    if (z && strncmp(z, id, strlen(id)) == 0 && n++ == 0)
      found = it;
  }
  found = n == 1 ? cJSON_DetachItemViaPointer(rows, found) : NULL;
  cJSON_Delete(rows);
  return found;
}

static unsigned get_runs(api_server *s, struct MHD_Connection *c, cJSON **out) {
  long long limit;
  if (query_int(c, "limit", API_RUNS_DEFAULT, 1, API_RUNS_MAX, &limit)) {
    *out = err_json("limit: expected an integer from 1 to %d", API_RUNS_MAX);
    return MHD_HTTP_BAD_REQUEST;
  }
  const char *dag = query_str(c, "dag"), *state = query_str(c, "state"),
             *tag = query_str(c, "tag");
  /* Unrecorded runs have no tags. */
  cJSON *rows = tag ? cJSON_CreateArray() : unrecorded_runs(s, dag);
  store *st;
  unsigned status = open_store(s, &st, out);
  cJSON *runs = NULL;
  if (!status && st) {
    char err[1024];
    runs = store_runs_tagged(st, dag, state, tag, (int)limit, err, sizeof err);
    store_close(st);
    if (!runs)
      status = server_error(out, "cannot read the run store", err);
  }
  if (status) {
    cJSON_Delete(rows);
    return status;
  }
  *out = with_unrecorded(rows, runs ? runs : cJSON_CreateArray(), state,
                         (int)limit);
  return MHD_HTTP_OK;
}

static unsigned get_run(api_server *s, const char *id, cJSON **out) {
  store *st;
  cJSON *run;
  unsigned status = find_run(s, id, &st, &run, out);
  /* Not in the store: serve's view, then the store once more, since a
   * run in serve's view may have recorded itself (and left the view)
   * since the first look. The store alone answers every recorded run. */
  cJSON *unrecorded = status == MHD_HTTP_NOT_FOUND ? find_unrecorded(s, id)
                                                   : NULL;
  if (status == MHD_HTTP_NOT_FOUND && !unrecorded) {
    cJSON_Delete(*out);
    status = find_run(s, id, &st, &run, out);
  } else if (unrecorded) {
    cJSON_Delete(*out);
    cJSON_AddItemToObject(unrecorded, "tasks", cJSON_CreateArray());
    *out = unrecorded;
    return MHD_HTTP_OK;
  }
  if (status)
    return status;
  store_close(st);
  *out = run;
  return MHD_HTTP_OK;
}

static unsigned get_alerts(api_server *s, const char *id, cJSON **out) {
  store *st;
  cJSON *run;
  unsigned status = find_run(s, id, &st, &run, out);
  if (status)
    return status;
  char err[1024];
  cJSON *alerts = store_alerts(st, str_of(run, "id"), err, sizeof err);
  store_close(st);
  cJSON_Delete(run);
  if (!alerts)
    return server_error(out, "cannot read the run store", err);
  *out = alerts;
  return MHD_HTTP_OK;
}

/* The length of p[0, n) without an incomplete UTF-8 sequence at its end
 * (a chunk boundary, or a writer in the middle of a character). */
static size_t utf8_whole(const unsigned char *p, size_t n) {
  size_t i = n, k = 0;
  while (i > 0 && k < 3 && (p[i - 1] & 0xC0) == 0x80) {
    i--;
    k++;
  }
  if (i == 0 || p[i - 1] < 0xC0)
    return n;
  unsigned char b = p[i - 1];
  size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  return need > k + 1 ? i - 1 : n;
}

/* Up to API_LOG_CHUNK bytes of a log, as GET .../log returns them. */
typedef struct log_chunk {
  long long offset; /* where it starts (the asked offset, at most size) */
  long long next;   /* where the next chunk starts */
  long long size;   /* of the whole file now */
  char *text;       /* the chunk as valid UTF-8; caller frees */
} log_chunk;

/* Reads the chunk of log at offset into *ck; a log that is not there yet
 * (an attempt that is starting), or none, reads as empty. running: the
 * attempt may still write. Returns 0, or -errno when log cannot be read. */
static int log_read_chunk(const char *log, long long offset, int running,
                          log_chunk *ck) {
  long long size = 0;
  unsigned char *buf = NULL;
  size_t got = 0;
  int fd = log ? open(log, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0 && log && errno != ENOENT)
    return -errno;
  if (fd >= 0) {
    struct stat sb;
    if (fstat(fd, &sb) == 0)
      size = (long long)sb.st_size;
    if (offset > size)
      offset = size;
    size_t want =
        (size_t)(size - offset < API_LOG_CHUNK ? size - offset : API_LOG_CHUNK);
    buf = xmalloc(want + 1);
    /* Logs only grow, so the bytes below the size just read are there; a
     * log truncated meanwhile gives what it still has, and its new size,
     * so that a finished attempt's reader still reaches eof. */
    while (got < want) {
      ssize_t r =
          pread(fd, buf + got, want - got, (off_t)(offset + (long long)got));
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        break;
      got += (size_t)r;
    }
    if (got < want)
      size = offset + (long long)got;
    close(fd);
  } else {
    offset = 0;
  }
  long long next = offset + (long long)got;
  /* Cut an incomplete character at the end unless nothing more will come:
   * the next chunk starts with all of it. */
  if (got > 0 && (running || next < size)) {
    size_t whole = utf8_whole(buf, got);
    if (whole > 0) {
      next -= (long long)(got - whole);
      got = whole;
    }
  }
  ck->text = utf8_clean(buf ? (const char *)buf : "", got);
  free(buf);
  ck->offset = offset;
  ck->next = next;
  ck->size = size;
  return 0;
}

static unsigned get_log(api_server *s, struct MHD_Connection *c, const char *id,
                        const char *task, cJSON **out) {
  long long attempt, offset;
  if (!name_ok(task)) {
    *out = err_json("invalid task name '%.128s': expected letters, digits, "
                    "'_' and '-'",
                    task);
    return MHD_HTTP_BAD_REQUEST;
  }
  if (query_int(c, "attempt", 0, 0, 1000000, &attempt)) {
    *out = err_json("attempt: expected a positive integer (0 or none: the "
                    "latest)");
    return MHD_HTTP_BAD_REQUEST;
  }
  if (query_int(c, "offset", 0, 0, INT64_MAX, &offset)) {
    *out = err_json("offset: expected a non-negative integer (bytes)");
    return MHD_HTTP_BAD_REQUEST;
  }
  store *st;
  cJSON *run;
  unsigned status = find_run(s, id, &st, &run, out);
  if (status)
    return status;
  char err[1024];
  int rc = 0;
  const char *run_id = str_of(run, "id");
  cJSON *a =
      store_attempt(st, run_id, task, (int)attempt, &rc, err, sizeof err);
  store_close(st);
  if (!a) {
    if (rc == DR_ENOENT && attempt > 0)
      *out = err_json("run %s: task '%s' has no attempt %lld", run_id, task,
                      attempt);
    else if (rc == DR_ENOENT)
      *out = err_json("run %s: task '%s' has no attempt yet", run_id, task);
    cJSON_Delete(run);
    return rc == DR_ENOENT
               ? MHD_HTTP_NOT_FOUND
               : server_error(out, "cannot read the run store", err);
  }
  cJSON_Delete(run);
  const char *state = str_of(a, "state");
  const char *log = str_of(a, "log");
  int running =
      !state || !strcmp(state, "starting") || !strcmp(state, "running");
  log_chunk ck = {0};
  if ((rc = log_read_chunk(log, offset, running, &ck)) != 0) {
    char detail[1024];
    snprintf(detail, sizeof detail, "%s: %s", log, strerror(-rc));
    cJSON_Delete(a);
    return server_error(out, "cannot read the attempt's log", detail);
  }
  cJSON *j = cJSON_CreateObject();
  cJSON *n = cJSON_GetObjectItemCaseSensitive(a, "n");
  cJSON_AddNumberToObject(j, "attempt", cJSON_IsNumber(n) ? n->valuedouble : 0);
  cJSON_AddStringToObject(j, "state", state ? state : "");
  cJSON_AddNumberToObject(j, "offset", (double)ck.offset);
  cJSON_AddNumberToObject(j, "next_offset", (double)ck.next);
  cJSON_AddNumberToObject(j, "size", (double)ck.size);
  cJSON_AddBoolToObject(j, "eof", !running && ck.next >= ck.size);
  cJSON_AddStringToObject(j, "text", ck.text);
  free(ck.text);
  cJSON_Delete(a);
  *out = j;
  return MHD_HTTP_OK;
}

/* One metric event of a metrics.jsonl, compactly. */
typedef struct mpoint {
  double time, attempt, value, step;
  unsigned name; /* index into the task's names */
  unsigned char has_time, has_attempt;
} mpoint;

/* Reads one task's metrics.jsonl into points (lines that are not metric
 * objects skipped), and adds them to tasks[task] as metric objects, each
 * series (metric name) thinned to about API_METRICS_MAX points: every
 * k-th kept, and the last; k goes into downsampled[task][name]. */
static void read_metrics(const char *path, const char *task, cJSON *tasks,
                         cJSON *downsampled) {
  FILE *f = fopen(path, "re");
  if (!f)
    return;
  char *names[API_METRICS_NAMES];
  size_t n_names = 0, counts[API_METRICS_NAMES] = {0};
  mpoint *pts = NULL;
  size_t n = 0, cap = 0;
  char *line = NULL;
  size_t line_cap = 0;
  ssize_t len;
  while ((len = getline(&line, &line_cap, f)) >= 0) {
    cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "value");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "time");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "attempt");
    if (!cJSON_IsObject(j) || !cJSON_IsString(nm) || !cJSON_IsNumber(v) ||
        !cJSON_IsNumber(step) || !isfinite(v->valuedouble)) {
      cJSON_Delete(j);
      continue;
    }
    size_t k = 0;
    while (k < n_names && strcmp(names[k], nm->valuestring))
      k++;
    if (k == n_names) {
      if (n_names == API_METRICS_NAMES) {
        cJSON_Delete(j);
        continue;
      }
      names[n_names++] = xstrdup(nm->valuestring);
    }
    mpoint p = {cJSON_IsNumber(t) ? t->valuedouble : 0,
                cJSON_IsNumber(at) ? at->valuedouble : 0,
                v->valuedouble,
                step->valuedouble,
                (unsigned)k,
                (unsigned char)cJSON_IsNumber(t),
                (unsigned char)cJSON_IsNumber(at)};
    VEC_PUSH(pts, n, cap, p);
    counts[k]++;
    cJSON_Delete(j);
  }
  free(line);
  fclose(f);
  if (n == 0) {
    free(pts);
    return;
  }
  size_t every[API_METRICS_NAMES], seen[API_METRICS_NAMES] = {0};
  cJSON *ds = NULL;
  for (size_t k = 0; k < n_names; k++) {
    every[k] = counts[k] > API_METRICS_MAX
                   ? (counts[k] + API_METRICS_MAX - 1) / API_METRICS_MAX
                   : 1;
    if (every[k] > 1) {
      if (!ds)
        ds = cJSON_AddObjectToObject(downsampled, task);
      cJSON_AddNumberToObject(ds, names[k], (double)every[k]);
    }
  }
  cJSON *arr = cJSON_AddArrayToObject(tasks, task);
  for (size_t i = 0; i < n; i++) {
    const mpoint *p = &pts[i];
    size_t idx = seen[p->name]++;
    if (idx % every[p->name] != 0 && idx + 1 != counts[p->name])
      continue;
    cJSON *o = cJSON_CreateObject();
    if (p->has_time)
      cJSON_AddNumberToObject(o, "time", p->time);
    if (p->has_attempt)
      cJSON_AddNumberToObject(o, "attempt", p->attempt);
    cJSON_AddStringToObject(o, "name", names[p->name]);
    cJSON_AddNumberToObject(o, "value", p->value);
    cJSON_AddNumberToObject(o, "step", p->step);
    cJSON_AddItemToArray(arr, o);
  }
  for (size_t k = 0; k < n_names; k++)
    free(names[k]);
  free(pts);
}

static unsigned get_metrics(api_server *s, const char *id, cJSON **out) {
  store *st;
  cJSON *run;
  unsigned status = find_run(s, id, &st, &run, out);
  if (status)
    return status;
  store_close(st);
  const char *run_dir = str_of(run, "run_dir");
  cJSON *j = cJSON_CreateObject();
  cJSON *tasks = cJSON_AddObjectToObject(j, "tasks");
  cJSON *downsampled = cJSON_AddObjectToObject(j, "downsampled");
  const cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(run, "tasks")) {
    const char *name = str_of(t, "name");
    /* Names come from DAG files, which allow no more than this; the check
     * keeps a path from ever leaving the run directory. */
    if (!run_dir || !name || !name_ok(name))
      continue;
    char *path = xasprintf("%s/%s/metrics.jsonl", run_dir, name);
    read_metrics(path, name, tasks, downsampled);
    free(path);
  }
  cJSON_Delete(run);
  *out = j;
  return MHD_HTTP_OK;
}

/* GET /api/compare?runs=A,B,...: compare.h's comparison of 2 to
 * COMPARE_MAX_RUNS runs (ids or unique prefixes, comma-separated). */
static unsigned get_compare(api_server *s, struct MHD_Connection *c,
                            cJSON **out) {
  const char *arg = query_str(c, "runs");
  if (!arg || strlen(arg) > COMPARE_MAX_RUNS * 130) {
    *out = err_json("compare needs runs=RUN,RUN,... (2 to %d run ids)",
                    COMPARE_MAX_RUNS);
    return MHD_HTTP_BAD_REQUEST;
  }
  char *list = xstrdup(arg), *save = NULL;
  cJSON *runs[COMPARE_MAX_RUNS];
  size_t n = 0;
  unsigned status = 0;
  for (char *id = strtok_r(list, ",", &save); id && !status;
       id = strtok_r(NULL, ",", &save)) {
    if (n == COMPARE_MAX_RUNS) {
      *out = err_json("compare takes at most %d runs", COMPARE_MAX_RUNS);
      status = MHD_HTTP_BAD_REQUEST;
      break;
    }
    store *st;
    if ((status = find_run(s, id, &st, &runs[n], out)) == 0) {
      store_close(st);
      n++;
    }
  }
  free(list);
  if (!status && n < 2) {
    *out = err_json("compare needs runs=RUN,RUN,... (2 to %d run ids)",
                    COMPARE_MAX_RUNS);
    status = MHD_HTTP_BAD_REQUEST;
  }
  if (!status) {
    *out = compare_runs(runs, n);
    status = MHD_HTTP_OK;
  }
  for (size_t i = 0; i < n; i++)
    cJSON_Delete(runs[i]);
  return status;
}

/* GET /api/runs/{run}/report: the run's report.html as written (report.h).
 * 0 with *html (caller frees) and *len, or a status with *out. */
static unsigned get_report(api_server *s, const char *id, char **html,
                           size_t *len, cJSON **out) {
  store *st;
  cJSON *run;
  unsigned status = find_run(s, id, &st, &run, out);
  if (status)
    return status;
  store_close(st);
  const char *run_dir = str_of(run, "run_dir");
  char *path = run_dir ? path_join(run_dir, "report.html") : NULL;
  if (!path || fileio_read_file(path, html, len) != 0) {
    *out = err_json("run %s has no report.html (written when a run ends; "
                    "`dagrun report RUN` writes it again)",
                    str_of(run, "id") ? str_of(run, "id") : id);
    status = MHD_HTTP_NOT_FOUND;
  }
  free(path);
  cJSON_Delete(run);
  return status;
}

/* Sends a report page (taken). It holds no script: the policy forbids
 * any, and anything fetched from anywhere. */
static enum MHD_Result send_report(struct MHD_Connection *c, char *html,
                                   size_t len) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer_with_free_callback(len, html, free);
  if (!resp) {
    free(html);
    return MHD_NO;
  }
  common_headers(resp, "text/html; charset=utf-8");
  MHD_add_response_header(resp, "Content-Security-Policy",
                          "default-src 'none'; style-src 'unsafe-inline'; "
                          "img-src data:; base-uri 'none'; "
                          "form-action 'none'; frame-ancestors 'none'");
  MHD_add_response_header(resp, "X-Frame-Options", "DENY");
  enum MHD_Result r = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return r;
}

/* ---- POST: authentication, bodies, actions ---- */

/* 1 with md, 0 when libcrypto fails (then nothing may compare equal). */
static int sha256(const void *p, size_t n, unsigned char md[32]) {
  unsigned len = 0;
  return EVP_Digest(p, n, md, &len, EVP_sha256(), NULL) == 1 && len == 32;
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* The HMAC signature of a request: hex(HMAC-SHA256(secret, canonical)),
 * canonical = METHOD "\n" TARGET "\n" TIMESTAMP "\n" BODY, TARGET the
 * path and query exactly as sent on the request line. Method and target
 * are signed so that a signature for one endpoint is worth nothing at
 * another (a signed {} for one DAG's runs once started any DAG, or
 * cancelled a run). 0 when it is valid and new (remembered from now on),
 * else 401 (or 503, the replay cache full) with *out the error. */
static unsigned check_hmac(const api_server *s, const req *r, const char *ts,
                           const char *sig, cJSON **out) {
  size_t nts = ts ? strlen(ts) : 0;
  int ts_ok = nts > 0 && nts <= 18;
  for (size_t i = 0; ts_ok && i < nts; i++)
    ts_ok = ts[i] >= '0' && ts[i] <= '9';
  if (!ts_ok) {
    *out = err_json("X-Dagrun-Timestamp: expected unix seconds");
    return MHD_HTTP_UNAUTHORIZED;
  }
  long long t = atoll(ts), now = (long long)time(NULL);
  if (t < now - API_AUTH_SKEW || t > now + API_AUTH_SKEW) {
    *out = err_json("X-Dagrun-Timestamp is more than %d s from the "
                    "server's clock",
                    API_AUTH_SKEW);
    return MHD_HTTP_UNAUTHORIZED;
  }
  unsigned char given[32];
  int sig_ok = !strncasecmp(sig, "sha256=", 7) && strlen(sig + 7) == 64;
  for (size_t i = 0; sig_ok && i < 32; i++) {
    int hi = hexval(sig[7 + 2 * i]), lo = hexval(sig[8 + 2 * i]);
    sig_ok = hi >= 0 && lo >= 0;
    given[i] = (unsigned char)(hi * 16 + lo);
  }
  if (!sig_ok) {
    *out = err_json("X-Dagrun-Signature: expected sha256=<64 hex digits>");
    return MHD_HTTP_UNAUTHORIZED;
  }
  sbuf msg = {0};
  sbuf_add(&msg, r->method, strlen(r->method));
  sbuf_putc(&msg, '\n');
  sbuf_add(&msg, r->target, strlen(r->target));
  sbuf_putc(&msg, '\n');
  sbuf_add(&msg, ts, nts);
  sbuf_putc(&msg, '\n');
  sbuf_add(&msg, r->body.s ? r->body.s : "", r->body.n);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned md_len = 0;
  int mac_ok = HMAC(EVP_sha256(), s->secret, (int)strlen(s->secret),
                    (const unsigned char *)msg.s, msg.n, md, &md_len) &&
               md_len == 32;
  sbuf_free(&msg);
  if (!mac_ok || CRYPTO_memcmp(md, given, 32) != 0) {
    *out = err_json("invalid HMAC signature (signed: METHOD\\nPATH?QUERY\\n"
                    "TIMESTAMP\\nBODY, see docs/serve.md)");
    return MHD_HTTP_UNAUTHORIZED;
  }
  /* Remembered until its timestamp leaves the window: after that the
   * timestamp check refuses it anyway. */
  int seen = guard_replay_add(s->replay, md, t + API_AUTH_SKEW + 1, now);
  if (seen == 1) {
    *out = err_json("this signature was already used (replay refused): sign "
                    "each request anew, with a new timestamp");
    return MHD_HTTP_UNAUTHORIZED;
  }
  if (seen == 2) {
    *out = err_json("too many signed requests in the last %d s: try again "
                    "later",
                    2 * API_AUTH_SKEW);
    return MHD_HTTP_SERVICE_UNAVAILABLE;
  }
  return 0;
}

/* Whether a token given matches the one wanted (NULL: none), in a time
 * that says nothing of either: their digests are compared. */
static int token_matches(const char *given, const char *want) {
  unsigned char a[32], b[32];
  return want && sha256(given, strlen(given), a) &&
         sha256(want, strlen(want), b) && CRYPTO_memcmp(a, b, 32) == 0;
}

/* The token of an Authorization: Bearer header (spaces skipped), or
 * NULL. */
static const char *bearer_of(struct MHD_Connection *c) {
  const char *authz = MHD_lookup_connection_value(
      c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!authz || strncasecmp(authz, "Bearer ", 7))
    return NULL;
  authz += 7;
  while (*authz == ' ')
    authz++;
  return authz;
}

/* 0 when a GET may read runs, logs and reports: no read token is set, or
 * the request carries it, or the POST token (in Authorization: Bearer,
 * or the dashboard's cookie dagrun_token, which its report links carry
 * where a header cannot go), else 401 with *out the error. */
static unsigned authorize_read(const api_server *s, struct MHD_Connection *c,
                               cJSON **out) {
  if (!s->read_token)
    return 0;
  const char *given = bearer_of(c);
  if (!given)
    given = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, "dagrun_token");
  if (!given) {
    *out = err_json("authentication required: this server's GETs take "
                    "Authorization: Bearer READ_TOKEN (serve "
                    "--read-token-file)");
    return MHD_HTTP_UNAUTHORIZED;
  }
  if (token_matches(given, s->read_token) || token_matches(given, s->token))
    return 0;
  *out = err_json("invalid read token");
  return MHD_HTTP_UNAUTHORIZED;
}

/* 0 when the request carries a valid bearer token or HMAC signature,
 * else 401 or 403 (503) with *out the error. */
static unsigned authorize(const api_server *s, struct MHD_Connection *c,
                          const req *r, cJSON **out) {
  if (!s->token && !s->secret) {
    *out = err_json("this server accepts no POST requests: start serve with "
                    "--token-file or --hmac-secret-file");
    return MHD_HTTP_FORBIDDEN;
  }
  const char *given = bearer_of(c);
  const char *sig =
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Dagrun-Signature");
  const char *ts =
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Dagrun-Timestamp");
  if (given) {
    if (s->token) {
      if (token_matches(given, s->token))
        return 0;
      *out = err_json("invalid bearer token");
      return MHD_HTTP_UNAUTHORIZED;
    }
    if (!sig) {
      *out = err_json("this server takes HMAC signatures "
                      "(X-Dagrun-Timestamp, X-Dagrun-Signature), not bearer "
                      "tokens");
      return MHD_HTTP_UNAUTHORIZED;
    }
  }
  if (sig) {
    if (!s->secret) {
      *out = err_json("this server takes bearer tokens, not HMAC signatures");
      return MHD_HTTP_UNAUTHORIZED;
    }
    return check_hmac(s, r, ts, sig, out);
  }
  *out = err_json("authentication required: Authorization: Bearer TOKEN, or "
                  "X-Dagrun-Timestamp and X-Dagrun-Signature");
  return MHD_HTTP_UNAUTHORIZED;
}

/* The offset of the first \u0000 escape in the strings of JSON text
 * p[0, n) (which cJSON has read), or n when there is none. */
static size_t escaped_nul_at(const char *p, size_t n) {
  int in_string = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '"') {
      in_string = !in_string;
    } else if (in_string && p[i] == '\\') {
      if (i + 6 <= n && memcmp(p + i + 1, "u0000", 5) == 0)
        return i;
      i++; /* the escaped character, a '"' or a '\\' among them */
    }
  }
  return n;
}

/* The body as a JSON object (NULL for an empty body): 0 with *body, or 400
 * with *out the error. */
static unsigned parse_body(const sbuf *b, cJSON **body, cJSON **out) {
  *body = NULL;
  if (b->n == 0)
    return 0;
  if (memchr(b->s, '\0', b->n)) {
    *out = err_json("malformed JSON body: a NUL byte");
    return MHD_HTTP_BAD_REQUEST;
  }
  /* JSON text is UTF-8 (RFC 8259): other bytes would be stored as sent
   * and make every answer that shows them invalid JSON. */
  size_t bad = utf8_bad_at(b->s, b->n);
  if (bad < b->n) {
    *out = err_json("malformed JSON body: invalid UTF-8 at byte %zu", bad);
    return MHD_HTTP_BAD_REQUEST;
  }
  const char *end = NULL;
  /* n + 1: the NUL after the body, so that trailing garbage is an error. */
  cJSON *j = cJSON_ParseWithLengthOpts(b->s, b->n + 1, &end, 1);
  if (!j) {
    size_t at = end && end >= b->s ? (size_t)(end - b->s) : 0;
    *out = err_json("malformed JSON body: syntax error at byte %zu", at);
    return MHD_HTTP_BAD_REQUEST;
  }
  /* cJSON ends a string at a \u0000 and keeps what came before: "ok" of
   * "ok\u0000\u001b]0;..." would pass every check of the rest. */
  if ((bad = escaped_nul_at(b->s, b->n)) < b->n) {
    cJSON_Delete(j);
    *out = err_json("malformed JSON body: a NUL character (\\u0000) in a "
                    "string at byte %zu: strings may not hold one",
                    bad);
    return MHD_HTTP_BAD_REQUEST;
  }
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    *out = err_json("the body must be a JSON object");
    return MHD_HTTP_BAD_REQUEST;
  }
  *body = j;
  return 0;
}

/* text as a JSON string ("[1, 2]" gives "\"[1, 2]\""). Caller frees. */
static char *json_quoted(const char *text) {
  cJSON *j = cJSON_CreateString(text);
  char *z = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  char *r = xstrdup(z ? z : "\"\"");
  cJSON_free(z);
  return r;
}

/* The answer to param value it, which is not a string, number or boolean.
 * A list or map param is given as `-p` takes it, JSON text in a string
 * (docs/serve.md): for one sent as JSON itself, the answer writes it so
 * (an example instead when it is long). */
static cJSON *param_value_error(const cJSON *it) {
  const char *what = cJSON_IsArray(it)    ? "list"
                     : cJSON_IsObject(it) ? "map"
                                          : NULL;
  if (!what)
    return err_json("params.%.100s: expected a string, number or boolean",
                    it->string);
  char *text = cJSON_PrintUnformatted(it);
  char *quoted = json_quoted(text ? text : "");
  cJSON_free(text);
  int long_one = strlen(quoted) > 200;
  if (long_one) {
    free(quoted);
    quoted = json_quoted(*what == 'l' ? "[1, 2]" : "{\"k\": 1}");
  }
  cJSON *e = err_json("params.%.100s: expected a string, number or boolean; "
                      "a %s param is given as a JSON string holding the %s: "
                      "%s%s",
                      it->string, what, what, long_one ? "e.g. " : "", quoted);
  free(quoted);
  return e;
}

static unsigned post_trigger(api_server *s, struct MHD_Connection *c,
                             const char *dag, const req *r, cJSON **out) {
  unsigned status = authorize(s, c, r, out);
  cJSON *body = NULL;
  if (!status)
    status = parse_body(&r->body, &body, out);
  if (status)
    return status;
  const cJSON *params = NULL, *it;
  cJSON_ArrayForEach(it, body) {
    if (strcmp(it->string, "params") != 0) {
      *out = err_json("unknown key '%.100s' in the body (expected: params)",
                      it->string);
      cJSON_Delete(body);
      return MHD_HTTP_BAD_REQUEST;
    }
    params = it;
  }
  if (params && !cJSON_IsObject(params)) {
    *out = err_json("params: expected an object of param overrides");
    cJSON_Delete(body);
    return MHD_HTTP_BAD_REQUEST;
  }
  cJSON_ArrayForEach(it, params) {
    if (!cJSON_IsString(it) && !cJSON_IsNumber(it) && !cJSON_IsBool(it)) {
      *out = param_value_error(it);
      cJSON_Delete(body);
      return MHD_HTTP_BAD_REQUEST;
    }
  }
  char run_id[256] = "", err[1024] = "";
  int rc = s->act.trigger ? s->act.trigger(s->act.ud, dag, params, run_id,
                                           sizeof run_id, err, sizeof err)
                          : MHD_HTTP_SERVICE_UNAVAILABLE;
  cJSON_Delete(body);
  if (rc != 0) {
    *out = err_json("%s", err[0] ? err : "cannot start a run");
    return rc >= 400 && rc <= 599 ? (unsigned)rc
                                  : MHD_HTTP_INTERNAL_SERVER_ERROR;
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "run_id", run_id);
  cJSON_AddStringToObject(j, "dag", dag);
  *out = j;
  return MHD_HTTP_CREATED;
}

static unsigned post_cancel(api_server *s, struct MHD_Connection *c,
                            const char *id, const req *r, cJSON **out) {
  unsigned status = authorize(s, c, r, out);
  cJSON *body = NULL;
  if (!status)
    status = parse_body(&r->body, &body, out);
  if (status)
    return status;
  cJSON_Delete(body);
  /* A unique prefix names its run, as everywhere else; an id the store
   * does not know goes to the daemon as it is, which has the last word. */
  store *st;
  cJSON *run;
  char full[256];
  snprintf(full, sizeof full, "%s", id);
  status = find_run(s, id, &st, &run, out);
  if (status == MHD_HTTP_BAD_REQUEST ||
      status == MHD_HTTP_INTERNAL_SERVER_ERROR)
    return status;
  if (status == 0) {
    snprintf(full, sizeof full, "%s", str_of(run, "id"));
    cJSON_Delete(run);
    store_close(st);
  } else {
    cJSON_Delete(*out);
    *out = NULL;
  }
  char err[1024] = "";
  int rc = s->act.cancel ? s->act.cancel(s->act.ud, full, err, sizeof err)
                         : MHD_HTTP_SERVICE_UNAVAILABLE;
  if (rc != 0) {
    *out = err_json("%s", err[0] ? err : "cannot cancel the run");
    return rc >= 400 && rc <= 599 ? (unsigned)rc
                                  : MHD_HTTP_INTERNAL_SERVER_ERROR;
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "run_id", full);
  *out = j;
  return MHD_HTTP_ACCEPTED;
}

/* A JSON array of strings as a C array (pointers into arr); NULL with
 * *bad set for an item that is not a string, or too many items. */
static const char **str_list(const cJSON *arr, size_t *n, int *bad) {
  *n = 0;
  *bad = arr && !cJSON_IsArray(arr);
  int k = cJSON_GetArraySize(arr);
  if (*bad || k > STORE_TAGS_MAX) {
    *bad = 1;
    return NULL;
  }
  const char **v = xcalloc((size_t)k + 1, sizeof *v);
  const cJSON *x;
  cJSON_ArrayForEach(x, arr) {
    if (!cJSON_IsString(x)) {
      *bad = 1;
      free(v);
      return NULL;
    }
    v[(*n)++] = x->valuestring;
  }
  return v;
}

/* The store's status of a tag or note write as an HTTP status. */
static unsigned annotate_status(int rc, const char *err, cJSON **out) {
  if (rc == DR_EINVAL) {
    *out = err_json("%s", err);
    return MHD_HTTP_BAD_REQUEST;
  }
  if (rc == DR_ENOENT) {
    *out = err_json("%s", err);
    return MHD_HTTP_NOT_FOUND;
  }
  return server_error(out, "cannot write the run store", err);
}

/* The answer to a POST the daemon acted on (api_actions): ok with result
 * when rc is 0, else rc's status (500 for one that is none) with err, or
 * what when err is empty. */
static unsigned action_answer(int rc, const char *err, const char *what,
                              cJSON *result, unsigned ok, cJSON **out) {
  if (rc != 0) {
    cJSON_Delete(result);
    *out = err_json("%s", err[0] ? err : what);
    return rc >= 400 && rc <= 599 ? (unsigned)rc
                                  : MHD_HTTP_INTERNAL_SERVER_ERROR;
  }
  *out = result;
  return ok;
}

/* POST /api/dags/{dag}/backfill {"from", "to", "rerun"}: the DAG's
 * schedule times in the range queued as backfill runs (api.h). */
static unsigned post_backfill(api_server *s, struct MHD_Connection *c,
                              const char *dag, const req *r, cJSON **out) {
  unsigned status = authorize(s, c, r, out);
  cJSON *body = NULL;
  if (!status)
    status = parse_body(&r->body, &body, out);
  if (status)
    return status;
  const cJSON *from = cJSON_GetObjectItemCaseSensitive(body, "from");
  const cJSON *to = cJSON_GetObjectItemCaseSensitive(body, "to");
  const cJSON *rerun = cJSON_GetObjectItemCaseSensitive(body, "rerun");
  const cJSON *it;
  int bad_key = 0;
  cJSON_ArrayForEach(it, body) bad_key |= strcmp(it->string, "from") &&
                                          strcmp(it->string, "to") &&
                                          strcmp(it->string, "rerun");
  if (bad_key || !cJSON_IsString(from) || !cJSON_IsString(to) ||
      strlen(from->valuestring) > 64 || strlen(to->valuestring) > 64 ||
      (rerun && !cJSON_IsBool(rerun))) {
    *out = err_json("expected {\"from\": TIME, \"to\": TIME, \"rerun\": "
                    "false} (times such as 2026-11-01 or "
                    "2026-11-01T02:30:00Z)");
    cJSON_Delete(body);
    return MHD_HTTP_BAD_REQUEST;
  }
  char err[1024] = "";
  cJSON *result = NULL;
  int rc =
      s->act.backfill
          ? s->act.backfill(s->act.ud, dag, from->valuestring, to->valuestring,
                            cJSON_IsTrue(rerun), &result, err, sizeof err)
          : MHD_HTTP_SERVICE_UNAVAILABLE;
  cJSON_Delete(body);
  return action_answer(rc, err, "cannot backfill", result, MHD_HTTP_ACCEPTED,
                       out);
}

static unsigned annotate_begin(api_server *s, struct MHD_Connection *c,
                               const char *id, const req *r, cJSON **body,
                               store **st, cJSON **run, cJSON **out);

/* POST /api/runs/{run}/resume {"clear": [TASK...], "downstream": bool}:
 * the run goes on (api.h's resume), the tasks of clear run again. */
static unsigned post_resume(api_server *s, struct MHD_Connection *c,
                            const char *id, const req *r, cJSON **out) {
  cJSON *body, *run;
  store *st;
  unsigned status = annotate_begin(s, c, id, r, &body, &st, &run, out);
  if (status)
    return status;
  store_close(st);
  const cJSON *clear = cJSON_GetObjectItemCaseSensitive(body, "clear");
  const cJSON *down = cJSON_GetObjectItemCaseSensitive(body, "downstream");
  const cJSON *it;
  int bad = (clear && !cJSON_IsArray(clear)) || (down && !cJSON_IsBool(down)) ||
            cJSON_GetArraySize(clear) > 256 ||
            (cJSON_IsTrue(down) && !cJSON_GetArraySize(clear));
  cJSON_ArrayForEach(it, clear) bad |=
      !cJSON_IsString(it) || !name_ok(it->valuestring);
  cJSON_ArrayForEach(it, body) bad |=
      strcmp(it->string, "clear") && strcmp(it->string, "downstream");
  char full[256], err[1024] = "";
  snprintf(full, sizeof full, "%s", str_of(run, "id"));
  cJSON_Delete(run);
  if (bad) {
    cJSON_Delete(body);
    *out = err_json("expected {\"clear\": [TASK...], \"downstream\": "
                    "false} (downstream only with tasks to clear)");
    return MHD_HTTP_BAD_REQUEST;
  }
  int rc = s->act.resume ? s->act.resume(s->act.ud, full, clear,
                                         cJSON_IsTrue(down), err, sizeof err)
                         : MHD_HTTP_SERVICE_UNAVAILABLE;
  cJSON_Delete(body);
  if (rc != 0) {
    *out = err_json("%s", err[0] ? err : "cannot resume the run");
    return rc >= 400 && rc <= 599 ? (unsigned)rc
                                  : MHD_HTTP_INTERNAL_SERVER_ERROR;
  }
  *out = cJSON_CreateObject();
  cJSON_AddStringToObject(*out, "run_id", full);
  return MHD_HTTP_ACCEPTED;
}

/* What a POST that writes on a run does first: the write credentials,
 * the body (*body, may be NULL) and the run (*st open, *run). 0, or the
 * status with *out and nothing left to free. */
static unsigned annotate_begin(api_server *s, struct MHD_Connection *c,
                               const char *id, const req *r, cJSON **body,
                               store **st, cJSON **run, cJSON **out) {
  *body = NULL, *st = NULL, *run = NULL;
  unsigned status = authorize(s, c, r, out);
  if (!status)
    status = parse_body(&r->body, body, out);
  if (!status)
    status = find_run(s, id, st, run, out);
  if (status) {
    cJSON_Delete(*body);
    *body = NULL;
  }
  return status;
}

/* POST /api/runs/{run}/tags {"add": [...], "remove": [...]}: the run's
 * tags after (store_run_tag). */
static unsigned post_tags(api_server *s, struct MHD_Connection *c,
                          const char *id, const req *r, cJSON **out) {
  cJSON *body, *run;
  store *st;
  unsigned status = annotate_begin(s, c, id, r, &body, &st, &run, out);
  if (status)
    return status;
  size_t n_add = 0, n_remove = 0;
  int bad_add, bad_remove;
  const char **add =
      str_list(cJSON_GetObjectItemCaseSensitive(body, "add"), &n_add, &bad_add);
  const char **remove = str_list(
      cJSON_GetObjectItemCaseSensitive(body, "remove"), &n_remove, &bad_remove);
  if (bad_add || bad_remove) {
    *out = err_json("expected {\"add\": [TAG...], \"remove\": [TAG...]} "
                    "(at most %d each)",
                    STORE_TAGS_MAX);
    status = MHD_HTTP_BAD_REQUEST;
  } else {
    char err[1024];
    cJSON *tags = NULL;
    int rc = store_run_tag(st, str_of(run, "id"), add, n_add, remove, n_remove,
                           &tags, err, sizeof err);
    if (rc) {
      status = annotate_status(rc, err, out);
    } else {
      *out = cJSON_CreateObject();
      cJSON_AddStringToObject(*out, "run_id", str_of(run, "id"));
      cJSON_AddItemToObject(*out, "tags", tags);
      status = MHD_HTTP_OK;
    }
  }
  free(add);
  free(remove);
  store_close(st);
  cJSON_Delete(run);
  cJSON_Delete(body);
  return status;
}

/* POST /api/runs/{run}/note {"note": TEXT or null}: sets or clears the
 * run's note (store_run_set_note). */
static unsigned post_note(api_server *s, struct MHD_Connection *c,
                          const char *id, const req *r, cJSON **out) {
  cJSON *body, *run;
  store *st;
  unsigned status = annotate_begin(s, c, id, r, &body, &st, &run, out);
  if (status)
    return status;
  const cJSON *note = cJSON_GetObjectItemCaseSensitive(body, "note");
  if (!cJSON_IsString(note) && !cJSON_IsNull(note)) {
    *out = err_json("expected {\"note\": TEXT} or {\"note\": null}");
    status = MHD_HTTP_BAD_REQUEST;
  } else {
    char err[1024];
    const char *text = cJSON_IsString(note) ? note->valuestring : NULL;
    int rc = store_run_set_note(st, str_of(run, "id"), text, err, sizeof err);
    if (rc) {
      status = annotate_status(rc, err, out);
    } else {
      *out = cJSON_CreateObject();
      cJSON_AddStringToObject(*out, "run_id", str_of(run, "id"));
      cJSON_AddItemToObject(*out, "note",
                            text && *text ? cJSON_CreateString(text)
                                          : cJSON_CreateNull());
      status = MHD_HTTP_OK;
    }
  }
  store_close(st);
  cJSON_Delete(run);
  cJSON_Delete(body);
  return status;
}

static int has_control(const char *z) {
  for (; *z; z++)
    if ((unsigned char)*z < 0x20 || *z == 0x7f)
      return 1;
  return 0;
}

/* The body of an approve or reject: {"by": WHO, "via": "dashboard",
 * "reason": TEXT (reject only)}, each optional. 0 with *a filled (its
 * strings borrowed from body), or 400 with *out the error. */
static unsigned approval_body(const cJSON *body, int reject, store_approval *a,
                              cJSON **out) {
  const cJSON *it;
  cJSON_ArrayForEach(it, body) {
    int known = !strcmp(it->string, "by") || !strcmp(it->string, "via") ||
                (reject && !strcmp(it->string, "reason"));
    if (!known) {
      *out = err_json("unknown key '%.100s' in the body (expected: by, "
                      "via%s)",
                      it->string, reject ? ", reason" : "");
      return MHD_HTTP_BAD_REQUEST;
    }
    if (!cJSON_IsString(it) || strlen(it->valuestring) > 200 ||
        has_control(it->valuestring)) {
      /* Control bytes would reach terminals through `dagrun status`. */
      *out = err_json("%.100s: expected a string of at most 200 bytes, "
                      "without control characters",
                      it->string);
      return MHD_HTTP_BAD_REQUEST;
    }
  }
  const char *by = str_of(body, "by"), *via = str_of(body, "via");
  if (via && strcmp(via, "api") != 0 && strcmp(via, "dashboard") != 0) {
    *out = err_json("via: expected \"api\" or \"dashboard\"");
    return MHD_HTTP_BAD_REQUEST;
  }
  /* The token proves the right to decide, not a name: "by" is what the
   * caller says, kept as said. */
  a->via = via ? via : "api";
  a->by = by && *by ? by : a->via;
  a->reason = str_of(body, "reason");
  return 0;
}

/* POST /api/runs/{run}/tasks/{task}/approve and /reject (approve.h). */
static unsigned post_decide(api_server *s, struct MHD_Connection *c,
                            const char *id, const char *task, int reject,
                            const req *r, cJSON **out) {
  unsigned status = authorize(s, c, r, out);
  cJSON *body = NULL;
  if (!status)
    status = parse_body(&r->body, &body, out);
  store_approval a = {reject ? "rejected" : "approved", NULL, NULL, NULL};
  if (!status)
    status = approval_body(body, reject, &a, out);
  if (!status && (!name_ok(id) || !name_ok(task) || strlen(id) > 128)) {
    *out = err_json("invalid run id or task name: expected letters, digits, "
                    "'_' and '-'");
    status = MHD_HTTP_BAD_REQUEST;
  }
  store *st = NULL;
  if (!status && !(status = open_store(s, &st, out)) && !st) {
    *out = err_json("no run '%s' (no runs yet)", id);
    status = MHD_HTTP_NOT_FOUND;
  }
  if (status) {
    cJSON_Delete(body);
    return status;
  }
  char err[1024] = "", *run_id = NULL;
  int rc = approve_decide(st, id, task, &a, &run_id, err, sizeof err);
  store_close(st);
  if (rc >= 0) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "run_id", run_id);
    cJSON_AddStringToObject(j, "task", task);
    cJSON_AddStringToObject(j, "decision", a.decision);
    cJSON_AddBoolToObject(j, "replay", rc == 1);
    *out = j;
    status = MHD_HTTP_OK;
  } else if (rc == DR_ENOENT) {
    *out = run_id ? err_json("run %s has no task '%s'", run_id, task)
                  : err_json("no run '%s'", id);
    status = MHD_HTTP_NOT_FOUND;
  } else if (rc == DR_EINVAL || rc == DR_EEXIST) {
    *out = err_json("%s", err);
    status = run_id ? MHD_HTTP_CONFLICT : MHD_HTTP_BAD_REQUEST;
  } else {
    status = server_error(out, "cannot record the decision", err);
  }
  free(run_id);
  cJSON_Delete(body);
  return status;
}

/* POST /api/dags/{dag}/pause and /unpause {"by", "via"} (both optional,
 * as an approval's): the DAG's schedule paused or going (api.h). */
static unsigned post_pause(api_server *s, struct MHD_Connection *c,
                           const char *dag, int paused, const req *r,
                           cJSON **out) {
  unsigned status = authorize(s, c, r, out);
  cJSON *body = NULL;
  if (!status)
    status = parse_body(&r->body, &body, out);
  /* Who and how, checked as an approval's are (the same keys). */
  store_approval who = {NULL, NULL, NULL, NULL};
  if (!status)
    status = approval_body(body, 0, &who, out);
  if (status) {
    cJSON_Delete(body);
    return status;
  }
  char err[1024] = "";
  cJSON *result = NULL;
  int rc = s->act.pause ? s->act.pause(s->act.ud, dag, paused, who.by, who.via,
                                       &result, err, sizeof err)
                        : MHD_HTTP_SERVICE_UNAVAILABLE;
  cJSON_Delete(body);
  return action_answer(rc, err, "cannot pause the DAG", result, MHD_HTTP_OK,
                       out);
}

/* ---- Routing ---- */

typedef enum {
  R_DASHBOARD,
  R_HEALTH,
  R_OPENAPI,
  R_DAGS,
  R_DAG,
  R_TRIGGER,
  R_RUNS,
  R_RUN,
  R_LOG,
  R_METRICS,
  R_ALERTS,
  R_CANCEL,
  R_REPORT,
  R_COMPARE,
  R_TAGS,
  R_NOTE,
  R_BACKFILL,
  R_RESUME,
  R_APPROVE,
  R_REJECT,
  R_PAUSE,
  R_UNPAUSE
} route_id;

/* Every route; '*' is one path segment. openapi.json describes each (a
 * unit test checks it names them all). */
static const struct route {
  const char *method, *pattern;
  route_id id;
} routes[] = {
    {"GET", "/", R_DASHBOARD},
    {"GET", "/api/health", R_HEALTH},
    {"GET", "/api/openapi.json", R_OPENAPI},
    {"GET", "/api/dags", R_DAGS},
    {"GET", "/api/dags/*", R_DAG},
    {"POST", "/api/dags/*/runs", R_TRIGGER},
    {"GET", "/api/runs", R_RUNS},
    {"GET", "/api/runs/*", R_RUN},
    {"GET", "/api/runs/*/tasks/*/log", R_LOG},
    {"GET", "/api/runs/*/metrics", R_METRICS},
    {"GET", "/api/runs/*/alerts", R_ALERTS},
    {"POST", "/api/runs/*/cancel", R_CANCEL},
    {"GET", "/api/runs/*/report", R_REPORT},
    {"GET", "/api/compare", R_COMPARE},
    {"POST", "/api/runs/*/tags", R_TAGS},
    {"POST", "/api/runs/*/note", R_NOTE},
    {"POST", "/api/dags/*/backfill", R_BACKFILL},
    {"POST", "/api/runs/*/resume", R_RESUME},
    {"POST", "/api/runs/*/tasks/*/approve", R_APPROVE},
    {"POST", "/api/runs/*/tasks/*/reject", R_REJECT},
    {"POST", "/api/dags/*/pause", R_PAUSE},
    {"POST", "/api/dags/*/unpause", R_UNPAUSE},
};

/* Whether url matches pattern; the segments that '*' matched go to caps. */
static int route_match(const char *pattern, const char *url,
                       char caps[2][API_SEG_MAX]) {
  int n_caps = 0;
  const char *p = pattern, *u = url;
  while (*p && *u) {
    if (*p == '*') {
      const char *e = strchr(u, '/');
      size_t len = e ? (size_t)(e - u) : strlen(u);
      if (len == 0 || len >= API_SEG_MAX || n_caps == 2)
        return 0;
      memcpy(caps[n_caps], u, len);
      caps[n_caps++][len] = '\0';
      p++;
      u += len;
    } else if (*p == *u) {
      p++;
      u++;
    } else {
      return 0;
    }
  }
  return !*p && !*u;
}

static enum MHD_Result dispatch(api_server *s, struct MHD_Connection *c,
                                const char *url, const char *method,
                                const req *r) {
  int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  char allow[64] = "";
  char caps[2][API_SEG_MAX];
  const struct route *rt = NULL;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    if (!route_match(routes[i].pattern, url, caps))
      continue;
    int get = !strcmp(routes[i].method, "GET");
    if (get ? is_get : !strcmp(method, routes[i].method)) {
      rt = &routes[i];
      break;
    }
    size_t len = strlen(allow);
    snprintf(allow + len, sizeof allow - len, "%s%s", len ? ", " : "",
             get ? "GET, HEAD" : routes[i].method);
  }
  if (!rt && allow[0])
    return send_json(c, MHD_HTTP_METHOD_NOT_ALLOWED,
                     err_json("method %.16s not allowed on %.200s (allowed: "
                              "%s)",
                              method, url, allow),
                     allow);
  if (!rt)
    return send_json(c, MHD_HTTP_NOT_FOUND,
                     err_json("no such endpoint: %.200s (see "
                              "/api/openapi.json)",
                              url),
                     NULL);
  cJSON *out = NULL;
  unsigned status = MHD_HTTP_INTERNAL_SERVER_ERROR;
  /* The dashboard's page, the health probe and the API's description
   * show no run: open to a load balancer and to the page that asks for
   * the token. */
  if (!strcmp(rt->method, "GET") && rt->id != R_DASHBOARD &&
      rt->id != R_HEALTH && rt->id != R_OPENAPI &&
      (status = authorize_read(s, c, &out)) != 0)
    return send_json(c, status, out, NULL);
  switch (rt->id) {
  case R_DASHBOARD:
    return send_static(c, api_dashboard_html, api_dashboard_html_len,
                       "text/html; charset=utf-8", 1);
  case R_OPENAPI:
    return send_static(c, api_openapi_json, api_openapi_json_len,
                       "application/json", 0);
  case R_HEALTH:
    status = get_health(s, &out);
    break;
  case R_DAGS:
    out = all_dags(s);
    status = MHD_HTTP_OK;
    break;
  case R_DAG:
    status = get_dag(s, caps[0], &out);
    break;
  case R_TRIGGER:
    status = post_trigger(s, c, caps[0], r, &out);
    break;
  case R_RUNS:
    status = get_runs(s, c, &out);
    break;
  case R_RUN:
    status = get_run(s, caps[0], &out);
    break;
  case R_LOG:
    status = get_log(s, c, caps[0], caps[1], &out);
    break;
  case R_METRICS:
    status = get_metrics(s, caps[0], &out);
    break;
  case R_ALERTS:
    status = get_alerts(s, caps[0], &out);
    break;
  case R_CANCEL:
    status = post_cancel(s, c, caps[0], r, &out);
    break;
  case R_COMPARE:
    status = get_compare(s, c, &out);
    break;
  case R_TAGS:
    status = post_tags(s, c, caps[0], r, &out);
    break;
  case R_NOTE:
    status = post_note(s, c, caps[0], r, &out);
    break;
  case R_BACKFILL:
    status = post_backfill(s, c, caps[0], r, &out);
    break;
  case R_RESUME:
    status = post_resume(s, c, caps[0], r, &out);
    break;
  case R_APPROVE:
  case R_REJECT:
    status = post_decide(s, c, caps[0], caps[1], rt->id == R_REJECT, r, &out);
    break;
  case R_PAUSE:
  case R_UNPAUSE:
    status = post_pause(s, c, caps[0], rt->id == R_PAUSE, r, &out);
    break;
  case R_REPORT: {
    char *html = NULL;
    size_t len = 0;
    status = get_report(s, caps[0], &html, &len, &out);
    if (!status)
      return send_report(c, html, len);
    break;
  }
  }
  if (!out)
    out = err_json("internal error");
  return send_json(c, status, out, NULL);
}

/* ---- Checks before a request is routed ---- */

/* The first control byte (0x00-0x1f, 0x7f) of target once
 * percent-decoded, as libmicrohttpd decodes it for on_request, or -1.
 * libmicrohttpd's decoded path is a C string: "%00" cuts it there, so
 * that "/api/runs/ID%00/report" would route as "/api/runs/ID". */
static int target_control_byte(const char *target) {
  for (const char *p = target; *p; p++) {
    int b = (unsigned char)*p;
    if (b == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
      b = hexval(p[1]) * 16 + hexval(p[2]);
      p += 2;
    }
    if (b < 0x20 || b == 0x7f)
      return b;
  }
  return -1;
}

/* Whether name (no port) is an IP literal; its bytes go to a. */
static int ip_literal(const char *name, int *family, unsigned char a[16]) {
  char buf[INET6_ADDRSTRLEN + 2];
  size_t n = strlen(name);
  if (n >= 2 && name[0] == '[' && name[n - 1] == ']' && n - 2 < sizeof buf) {
    snprintf(buf, sizeof buf, "%.*s", (int)(n - 2), name + 1);
    *family = AF_INET6;
    return inet_pton(AF_INET6, buf, a) == 1;
  }
  *family = AF_INET;
  return inet_pton(AF_INET, name, a) == 1;
}

/* Whether a Host header names this server: against DNS rebinding, where
 * a web page's own name is made to resolve to 127.0.0.1 and the browser,
 * seeing one origin, lets the page read the answers. Such a request
 * carries the page's name, never one of ours. Accepted: an --allow-host
 * name (any port: a reverse proxy's), or with the port served (80 when
 * none is given) the address listened on, localhost / 127.0.0.1 / [::1]
 * on a loopback address, and any IP literal on a wildcard one (an IP
 * literal cannot be rebound). */
static int host_ok(const api_server *s, const char *host) {
  if (!host || !*host)
    return 0;
  char name[256];
  const char *colon = host[0] == '[' ? strchr(host, ']') : host;
  colon = colon ? strchr(colon, ':') : NULL;
  size_t n = colon ? (size_t)(colon - host) : strlen(host);
  if (n == 0 || n >= sizeof name)
    return 0;
  snprintf(name, sizeof name, "%.*s", (int)n, host);
  for (char **a = s->allow_hosts; a && *a; a++)
    if (strcasecmp(*a, name) == 0)
      return 1;
  long port = 80;
  if (colon) {
    char *end;
    port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end)
      return 0;
  }
  if (port != s->port)
    return 0;
  int family;
  unsigned char a[16];
  if (!ip_literal(name, &family, a))
    return s->loopback && strcasecmp(name, "localhost") == 0;
  if (s->wildcard)
    return 1;
  if (family == s->family &&
      memcmp(a, s->addr, family == AF_INET6 ? 16 : 4) == 0)
    return 1;
  return s->loopback &&
         (strcmp(name, "127.0.0.1") == 0 || strcmp(name, "[::1]") == 0);
}

/* The connection's deadline handle (on_connection), or NULL. */
static guard_conn *conn_guard(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* The request is complete, or refused: the deadline stops. */
static void answering(api_server *s, struct MHD_Connection *c) {
  guard_conn *g = conn_guard(c);
  if (g)
    guard_conn_answering(s->deadlines, g);
}

static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind,
                                  const char *key, const char *value) {
  (void)kind;
  (void)value;
  if (key && strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
    (*(int *)cls)++;
  return MHD_YES;
}

/* The checks made once a request's headers are in, before its body is
 * read: 0, or the status with *out the error. */
static unsigned check_request(api_server *s, struct MHD_Connection *c,
                              const req *r, cJSON **out) {
  int b = target_control_byte(r->target);
  if (b >= 0) {
    *out = err_json("the request path holds a control character (byte "
                    "0x%02x, after percent-decoding): refused",
                    b);
    return MHD_HTTP_BAD_REQUEST;
  }
  /* libmicrohttpd answers the first of several: "Host: 127.0.0.1:P" then
   * "Host: evil.com" would pass the check, and a proxy in front may read
   * the other one (RFC 9112 3.2: a 400). */
  int n_host = 0;
  MHD_get_connection_values(c, MHD_HEADER_KIND, count_host, &n_host);
  if (n_host > 1) {
    *out = err_json("the request has %d Host headers: one is allowed", n_host);
    return MHD_HTTP_BAD_REQUEST;
  }
  const char *host =
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
  if (!host_ok(s, host)) {
    *out = err_json("Host '%.200s' is not a name of this server (start "
                    "serve with --allow-host NAME to accept it)",
                    host ? host : "");
    return MHD_HTTP_MISDIRECTED_REQUEST;
  }
  /* A body announced too big is refused before it is read. */
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                               MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (errno || *end || v > API_MAX_BODY) {
      *out = err_json("request body over %u bytes", API_MAX_BODY);
      return MHD_HTTP_CONTENT_TOO_LARGE;
    }
  }
  return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  api_server *s = cls;
  req *r = *con_cls;
  if (!r) /* on_uri always makes one; a library that did not call it */
    return MHD_NO;
  if (!r->headers_seen) {
    r->headers_seen = 1;
    r->method = method;
    cJSON *out = NULL;
    unsigned status = check_request(s, c, r, &out);
    if (!status)
      return MHD_YES;
    answering(s, c);
    return send_json(c, status, out, NULL);
  }
  if (*upload_size) {
    if (!r->too_big && r->body.n + *upload_size > API_MAX_BODY) {
      r->too_big = 1;
      sbuf_free(&r->body);
    }
    if (!r->too_big)
      sbuf_add(&r->body, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  answering(s, c);
  if (r->too_big)
    return send_json(c, MHD_HTTP_CONTENT_TOO_LARGE,
                     err_json("request body over %u bytes", API_MAX_BODY),
                     NULL);
  return dispatch(s, c, url, method, r);
}

/* The request line is in: the request's state starts, with the target
 * as sent. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
  api_server *s = cls;
  req *r = xcalloc(1, sizeof *r);
  r->target = xstrdup(uri ? uri : "");
  pthread_mutex_lock(&s->flight_mu);
  s->in_flight++;
  pthread_mutex_unlock(&s->flight_mu);
  return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  api_server *s = cls;
  req *r = *con_cls;
  if (r) {
    sbuf_free(&r->body);
    free(r->target);
    free(r);
    *con_cls = NULL;
    pthread_mutex_lock(&s->flight_mu);
    if (--s->in_flight == 0)
      pthread_cond_broadcast(&s->flight_done);
    pthread_mutex_unlock(&s->flight_mu);
  }
  /* Kept alive, the connection's next request has its own deadline. */
  guard_conn *g = conn_guard(c);
  if (g)
    guard_conn_idle(s->deadlines, g);
}

/* Connections come and go: their deadlines with them. */
static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  api_server *s = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    *socket_context =
        ci ? guard_conn_begin(s->deadlines, ci->connect_fd) : NULL;
  } else if (*socket_context) {
    guard_conn_end(s->deadlines, *socket_context);
    *socket_context = NULL;
  }
}

static void on_log(void *cls, const char *fmt, va_list ap) {
  api_server *s = cls;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
    msg[--n] = '\0';
  pthread_mutex_lock(&s->log_mu);
  if (s->starting) {
    if (!s->start_msg[0])
      snprintf(s->start_msg, sizeof s->start_msg, "%s", msg);
  } else {
    fprintf(stderr, "dagrun serve: http: %s\n", msg);
  }
  pthread_mutex_unlock(&s->log_mu);
}

/* Why the address sa cannot be bound, as an errno (0: it can). After
 * libmicrohttpd failed to start, this says whether the port is taken
 * without parsing its messages, whose wording changes between versions.
 * Binds as libmicrohttpd does (SO_REUSEADDR, an IPv6 socket IPv6 only). */
static int probe_bind(const struct sockaddr *sa) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return errno;
  int on = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (sa->sa_family == AF_INET6)
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  socklen_t len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                            : sizeof(struct sockaddr_in);
  int rc = bind(fd, sa, len) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

/* ---- Public ---- */

static void server_free(api_server *s) {
  guard_replay_destroy(s->replay);
  guard_deadlines_destroy(s->deadlines);
  for (char **a = s->allow_hosts; a && *a; a++)
    free(*a);
  free(s->allow_hosts);
  free(s->token);
  free(s->secret);
  free(s->read_token);
  free(s->store_path);
  pthread_mutex_destroy(&s->log_mu);
  pthread_mutex_destroy(&s->flight_mu);
  pthread_cond_destroy(&s->flight_done);
  free(s);
}

/* A server for cfg listening on sa (not started), or NULL when its
 * watchdog thread cannot start. */
static api_server *server_new(const api_config *cfg, const api_actions *actions,
                              const struct sockaddr *sa) {
  api_server *s = xcalloc(1, sizeof *s);
  s->token = cfg->token ? xstrdup(cfg->token) : NULL;
  s->secret = cfg->hmac_secret ? xstrdup(cfg->hmac_secret) : NULL;
  s->read_token = cfg->read_token ? xstrdup(cfg->read_token) : NULL;
  s->store_path =
      cfg->store_path ? xstrdup(cfg->store_path) : store_default_path();
  size_t n = 0;
  while (cfg->allow_hosts && cfg->allow_hosts[n])
    n++;
  s->allow_hosts = xcalloc(n + 1, sizeof *s->allow_hosts);
  for (size_t i = 0; i < n; i++)
    s->allow_hosts[i] = xstrdup(cfg->allow_hosts[i]);
  s->port = cfg->port; /* the Host check's, until the bound one is known */
  s->family = sa->sa_family;
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    memcpy(s->addr, a, 16);
    s->loopback = IN6_IS_ADDR_LOOPBACK(a);
    s->wildcard = IN6_IS_ADDR_UNSPECIFIED(a);
  } else {
    const struct in_addr *a = &((const struct sockaddr_in *)sa)->sin_addr;
    memcpy(s->addr, a, 4);
    s->loopback = (ntohl(a->s_addr) >> 24) == 127;
    s->wildcard = a->s_addr == htonl(INADDR_ANY);
  }
  if (actions)
    s->act = *actions;
  s->started = clock_monotonic();
  pthread_mutex_init(&s->log_mu, NULL);
  pthread_mutex_init(&s->flight_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->flight_done, &ca);
  pthread_condattr_destroy(&ca);
  s->replay = guard_replay_create(API_REPLAY_MAX);
  s->deadlines = guard_deadlines_create(
      cfg->request_timeout > 0 ? cfg->request_timeout : API_REQUEST_TIMEOUT);
  if (!s->deadlines) {
    server_free(s);
    return NULL;
  }
  return s;
}

int api_start(const api_config *cfg, const api_actions *actions,
              api_server **out, char *err, size_t errlen) {
  *out = NULL;
  const char *host = cfg->host && *cfg->host ? cfg->host : "127.0.0.1";
  if (cfg->port < 0 || cfg->port > 65535) {
    snprintf(err, errlen, "invalid port %d: expected 0 to 65535", cfg->port);
    return DR_EIO;
  }
  /* "[::1]" as in a URL is ::1. */
  char addr[INET6_ADDRSTRLEN + 8];
  size_t hn = strlen(host);
  if (hn >= 2 && host[0] == '[' && host[hn - 1] == ']')
    snprintf(addr, sizeof addr, "%.*s", (int)(hn - 2), host + 1);
  else
    snprintf(addr, sizeof addr, "%s", host);
  struct sockaddr_in a4;
  struct sockaddr_in6 a6;
  struct sockaddr *sa;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD |
                   MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG |
                   MHD_USE_ITC; /* ITC: api_stop's quiesce */
  memset(&a4, 0, sizeof a4);
  memset(&a6, 0, sizeof a6);
  if (hn < sizeof addr && inet_pton(AF_INET, addr, &a4.sin_addr) == 1) {
    a4.sin_family = AF_INET;
    a4.sin_port = htons((uint16_t)cfg->port);
    sa = (struct sockaddr *)&a4;
  } else if (hn < sizeof addr &&
             inet_pton(AF_INET6, addr, &a6.sin6_addr) == 1) {
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons((uint16_t)cfg->port);
    sa = (struct sockaddr *)&a6;
    flags |= MHD_USE_IPv6;
  } else {
    snprintf(err, errlen,
             "invalid listen address '%s': expected an IPv4 or IPv6 "
             "address, e.g. 127.0.0.1 or ::1",
             host);
    return DR_EIO;
  }
  api_server *s = server_new(cfg, actions, sa);
  if (!s) {
    snprintf(err, errlen, "cannot start the request watchdog thread");
    return DR_EIO;
  }
  s->starting = 1;
  errno = 0;
  /* The logger comes first: libmicrohttpd applies options in order and
   * says so, as its first message, when the logger is not the first. */
  s->d = MHD_start_daemon(
      flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
      MHD_OPTION_EXTERNAL_LOGGER, on_log, s, MHD_OPTION_SOCK_ADDR, sa,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)API_CONN_LIMIT,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)API_CONN_PER_IP,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)API_CONN_TIMEOUT,
      MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_NOTIFY_CONNECTION,
      on_connection, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
      MHD_OPTION_END);
  int saved = errno;
  pthread_mutex_lock(&s->log_mu);
  s->starting = 0;
  pthread_mutex_unlock(&s->log_mu);
  if (!s->d) {
    int bind_errno = probe_bind(sa);
    if (bind_errno == EADDRINUSE)
      snprintf(err, errlen,
               "cannot listen on %s port %d: address in use (another "
               "program listens there; choose another --port, or --port 0 "
               "for any free one)",
               host, cfg->port);
    else
      snprintf(err, errlen, "cannot listen on %s port %d: %s", host, cfg->port,
               bind_errno        ? strerror(bind_errno)
               : s->start_msg[0] ? s->start_msg
               : saved           ? strerror(saved)
                                 : "libmicrohttpd could not start");
    server_free(s);
    return DR_EIO;
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info && info->port ? info->port : cfg->port;
  *out = s;
  return 0;
}

int api_port(const api_server *s) { return s ? s->port : 0; }

/* Until the requests in flight are answered, or API_DRAIN_S. */
static void drain(api_server *s) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += API_DRAIN_S;
  pthread_mutex_lock(&s->flight_mu);
  while (s->in_flight > 0 &&
         pthread_cond_timedwait(&s->flight_done, &s->flight_mu, &until) == 0)
    ;
  pthread_mutex_unlock(&s->flight_mu);
}

void api_stop(api_server *s) {
  if (!s)
    return;
  /* No new connections; then those in flight send their answers, where
   * MHD_stop_daemon alone would close them mid-answer. */
  MHD_socket listener = MHD_quiesce_daemon(s->d);
  drain(s);
  MHD_stop_daemon(s->d);
  if (listener != MHD_INVALID_SOCKET)
    close(listener); /* ours after the quiesce, closed after the stop */
  server_free(s);
}
