/* The HTTP API of `dagrun serve` (api.h), through real HTTP requests
 * (libcurl) to a server on 127.0.0.1: reads from a run store written here
 * (runs, logs in chunks, metrics, alerts), the daemon's actions (recorded
 * by a stand-in for serve.c) behind bearer and HMAC authentication,
 * refused bodies, unknown paths and methods, the dashboard and the OpenAPI
 * document. */
#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <time.h>

#include "lib/fileio.h"
#include "serve/api.h"
#include "store/store.h"
#include "testlib.h"

#define RUN_A "20261121T100000Z-aaaa" /* nightly, finished */
#define RUN_B "20261121T110000Z-bbbb" /* nightly, running */
#define TOKEN "s3cret-token"
#define SECRET "hmac-key"

/* ---- The daemon's side of the contract: records what it was asked ---- */

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static int n_triggers, n_cancels;
static char last_dag[128], last_params[512], last_cancel[128];

static cJSON *t_dags(void *ud) {
  return cJSON_Parse(
      "[{\"name\":\"nightly\",\"file\":\"/dags/nightly.yaml\","
      "\"schedule\":\"0 2 * * *\",\"timezone\":\"UTC\",\"next_fire\":2e9,"
      "\"tasks\":[{\"name\":\"train\",\"stage\":\"train\",\"needs\":[]},"
      "{\"name\":\"eval\",\"stage\":\"validate\",\"needs\":[\"train\"]}]},"
      "{\"name\":\"broken\",\"file\":\"/dags/broken.yaml\","
      "\"error\":\"/dags/broken.yaml:3:1: unknown key 'taks'\"}]");
}

static int t_trigger(void *ud, const char *dag, const cJSON *params,
                     char *run_id, size_t run_id_len, char *err,
                     size_t errlen) {
  if (strcmp(dag, "nightly") != 0) {
    snprintf(err, errlen, "no DAG named '%s'", dag);
    return 404;
  }
  pthread_mutex_lock(&rec_mu);
  n_triggers++;
  snprintf(last_dag, sizeof last_dag, "%s", dag);
  char *p = params ? cJSON_PrintUnformatted(params) : NULL;
  snprintf(last_params, sizeof last_params, "%s", p ? p : "(none)");
  cJSON_free(p);
  pthread_mutex_unlock(&rec_mu);
  snprintf(run_id, run_id_len, "20261121T120000Z-cccc");
  return 0;
}

static int t_cancel(void *ud, const char *run_id, char *err, size_t errlen) {
  pthread_mutex_lock(&rec_mu);
  n_cancels++;
  snprintf(last_cancel, sizeof last_cancel, "%s", run_id);
  pthread_mutex_unlock(&rec_mu);
  if (strcmp(run_id, RUN_B) != 0) {
    snprintf(err, errlen, "daemon: no running run '%s'", run_id);
    return 404;
  }
  return 0;
}

static int triggers(void) {
  pthread_mutex_lock(&rec_mu);
  int n = n_triggers;
  pthread_mutex_unlock(&rec_mu);
  return n;
}

static const api_actions actions = {t_dags, t_trigger, t_cancel, NULL,
                                    NULL,   NULL,      NULL};

/* ---- HTTP with libcurl ---- */

typedef struct resp {
  long status;
  sbuf body, headers;
  cJSON *json; /* the body parsed, or NULL */
} resp;

static size_t on_data(char *p, size_t size, size_t n, void *ud) {
  sbuf_add(ud, p, size * n);
  return size * n;
}

static int port_;

/* method path [body] with extra headers (NULL-terminated), to port_. */
static resp http(const char *method, const char *path, const char *body,
                 size_t n, const char *const *headers) {
  resp r = {0};
  sbuf_add(&r.body, "", 0);
  sbuf_add(&r.headers, "", 0);
  char url[2048];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port_, path);
  CURL *h = curl_easy_init();
  struct curl_slist *hl = NULL;
  for (size_t i = 0; headers && headers[i]; i++)
    hl = curl_slist_append(hl, headers[i]);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &r.headers);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
  if (body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
  }
  CURLcode rc = curl_easy_perform(h);
  if (rc != CURLE_OK)
    fprintf(stderr, "%s %s: %s\n", method, path, curl_easy_strerror(rc));
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(hl);
  curl_easy_cleanup(h);
  r.json = cJSON_Parse(r.body.s);
  return r;
}

static resp get(const char *path) { return http("GET", path, NULL, 0, NULL); }

static void resp_free(resp *r) {
  sbuf_free(&r->body);
  sbuf_free(&r->headers);
  cJSON_Delete(r->json);
}

/* Whether the response has header "name: value" (value: a prefix). */
static int has_header(const resp *r, const char *name, const char *value) {
  char want[256];
  snprintf(want, sizeof want, "\n%s: %s", name, value);
  /* Header names are case-insensitive. */
  return strcasestr(r->headers.s, want) != NULL;
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *k) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(j) ? j->valuedouble : -1;
}

/* "X-Dagrun-Timestamp: ts" and "X-Dagrun-Signature: sha256=..." of a
 * POST of body to target with key, into h[0] and h[1] (h[2] = NULL). */
static void sign(const char *key, const char *target, long long ts,
                 const char *body, char h[2][128], const char **hv) {
  char msg[4096];
  int n = snprintf(msg, sizeof msg, "POST\n%s\n%lld\n%s", target, ts, body);
  unsigned char md[32];
  unsigned len = 0;
  HMAC(EVP_sha256(), key, (int)strlen(key), (unsigned char *)msg, (size_t)n, md,
       &len);
  char hex[65];
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  snprintf(h[0], 128, "X-Dagrun-Timestamp: %lld", ts);
  snprintf(h[1], 128, "X-Dagrun-Signature: sha256=%s", hex);
  hv[0] = h[0];
  hv[1] = h[1];
  hv[2] = NULL;
}

/* ---- The run store and run directories the server reads ---- */

static char big_log[300001];

static void write_text(const char *path, const char *s, size_t n) {
  char *dir = path_dirname(path);
  CHECK_INT(fileio_mkdir_p(dir, 0755), 0);
  free(dir);
  CHECK_INT(fileio_write_file(path, s, n), 0);
}

static void make_store(const char *db) {
  char err[1024];
  store *st = NULL;
  CHECK_INT(store_open(db, 1, &st, err, sizeof err), 0);
  if (!st) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  const char *tasks[] = {"train", "eval"};
  const char *dir_a = test_path("runs/nightly/" RUN_A);
  const char *dir_b = test_path("runs/nightly/" RUN_B);
  CHECK_INT(store_run_begin(st, RUN_A, "nightly", "/dags/nightly.yaml", dir_a,
                            1000.0, "{\"steps\":5}", "cron", 960.0, NULL, tasks, 2,
                            err, sizeof err),
            0);
  const char *log_a = test_path("runs/nightly/" RUN_A "/train/attempt-1/log");
  const char *text = "step 1 loss 4.2\nstep 2 w\xc3\xb6rld\n";
  write_text(log_a, text, strlen(text));
  CHECK_INT(store_attempt_begin(st, RUN_A, "train", 1, log_a, 1001.0, err,
                                sizeof err),
            0);
  CHECK_INT(store_attempt_pid(st, RUN_A, "train", 1, 4242, 0, err, sizeof err),
            0);
  store_task_update u = {"success", 1, 0, NULL, 0, 1010.0, NULL, NULL, NULL};
  CHECK_INT(store_attempt_end(st, RUN_A, "train", 1, "success", 0, NULL, 1010.0,
                              &u, err, sizeof err),
            0);
  CHECK_INT(store_run_finish(st, RUN_A, "failed", 1020.0, err, sizeof err), 0);
  store_alert_delivery d = {
      1020.5, "failure", NULL, 0,           1,
      200,    NULL,      0.05, "delivered", "https://hooks.example.com"};
  CHECK_INT(store_alert_record(st, RUN_A, &d, err, sizeof err), 0);

  /* Metrics: three series and lines that are not metrics. */
  const char *m =
      "{\"time\":1002,\"attempt\":1,\"name\":\"loss\",\"value\":4.2,\"step\":1}"
      "\n"
      "{\"time\":1003,\"attempt\":1,\"name\":\"tokens_per_s\",\"value\":900,"
      "\"step\":1}\n"
      "not json at all\n"
      "{\"name\":\"loss\",\"step\":2}\n"
      "[1,2,3]\n"
      "{\"time\":1004,\"attempt\":1,\"name\":\"loss\",\"value\":3.9,\"step\":2}"
      "\n"
      "{\"time\":1005,\"attempt\":1,\"name\":\"val_loss\",\"value\":4.0,"
      "\"step\":2}\n"
      "{\"time\":1006,\"attempt\":1,\"name\":\"loss\",\"value\":3.7,"; /* cut */
  write_text(test_path("runs/nightly/" RUN_A "/train/metrics.jsonl"), m,
             strlen(m));
  /* A long series, to be thinned: 12000 points of acc. */
  sbuf big = {0};
  for (int i = 0; i < 12000; i++)
    sbuf_printf(&big, "{\"name\":\"acc\",\"value\":%d,\"step\":%d}\n", i, i);
  write_text(test_path("runs/nightly/" RUN_A "/eval/metrics.jsonl"), big.s,
             big.n);
  sbuf_free(&big);

  /* A running run whose attempt 2 writes a log of 300,000 bytes: 'x', then
   * two-byte characters, so that the 256 KiB chunk boundary falls inside
   * one, and the last byte is the first half of one. */
  CHECK_INT(store_run_begin(st, RUN_B, "nightly", "/dags/nightly.yaml", dir_b,
                            2000.0, NULL, "api", 0, NULL, tasks, 2, err, sizeof err),
            0);
  const char *log_b1 = test_path("runs/nightly/" RUN_B "/train/attempt-1/log");
  const char *log_b2 = test_path("runs/nightly/" RUN_B "/train/attempt-2/log");
  write_text(log_b1, "first attempt\n", 14);
  big_log[0] = 'x';
  for (size_t i = 1; i + 1 < sizeof big_log; i += 2) {
    big_log[i] = '\xc3';
    big_log[i + 1] = '\xa9';
  }
  big_log[sizeof big_log - 1] = '\0';
  write_text(log_b2, big_log, sizeof big_log - 1);
  CHECK_INT(store_attempt_begin(st, RUN_B, "train", 1, log_b1, 2001.0, err,
                                sizeof err),
            0);
  store_task_update u1 = {"retry_wait", 1, 1, "exit 1", 0, 0, NULL, NULL, NULL};
  CHECK_INT(store_attempt_end(st, RUN_B, "train", 1, "failed", 1, "exit 1",
                              2002.0, &u1, err, sizeof err),
            0);
  CHECK_INT(store_attempt_begin(st, RUN_B, "train", 2, log_b2, 2003.0, err,
                                sizeof err),
            0);
  CHECK_INT(store_attempt_pid(st, RUN_B, "train", 2, 4343, 0, err, sizeof err),
            0);
  store_close(st);
}

/* ---- Reads ---- */

static void test_reads(void) {
  resp r = get("/api/health");
  CHECK_INT(r.status, 200);
  CHECK(has_header(&r, "Content-Type", "application/json"));
  CHECK(has_header(&r, "Cache-Control", "no-store"));
  CHECK_STR(jstr(r.json, "status"), "ok");
  CHECK_STR(jstr(r.json, "version"), DAGRUN_VERSION);
  CHECK_INT(jnum(r.json, "dags"), 2);
  CHECK(jnum(r.json, "uptime_s") >= 0);
  resp_free(&r);

  r = get("/api/dags");
  CHECK_INT(r.status, 200);
  CHECK_INT(cJSON_GetArraySize(r.json), 2);
  CHECK_STR(jstr(cJSON_GetArrayItem(r.json, 1), "error"),
            "/dags/broken.yaml:3:1: unknown key 'taks'");
  resp_free(&r);

  /* One DAG, with its runs from the store. */
  r = get("/api/dags/nightly");
  CHECK_INT(r.status, 200);
  CHECK_STR(jstr(r.json, "schedule"), "0 2 * * *");
  CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "runs")), 2);
  resp_free(&r);
  r = get("/api/dags/nope");
  CHECK_INT(r.status, 404);
  CHECK(jstr(r.json, "error") != NULL);
  resp_free(&r);

  /* Runs: newest first, filtered, limited. */
  r = get("/api/runs");
  CHECK_INT(r.status, 200);
  CHECK_INT(cJSON_GetArraySize(r.json), 2);
  CHECK_STR(jstr(cJSON_GetArrayItem(r.json, 0), "id"), RUN_B);
  CHECK_STR(jstr(cJSON_GetArrayItem(r.json, 1), "trigger"), "cron");
  resp_free(&r);
  r = get("/api/runs?dag=nightly&state=failed");
  CHECK_INT(cJSON_GetArraySize(r.json), 1);
  CHECK_STR(jstr(cJSON_GetArrayItem(r.json, 0), "id"), RUN_A);
  resp_free(&r);
  r = get("/api/runs?dag=other");
  CHECK_INT(r.status, 200);
  CHECK_INT(cJSON_GetArraySize(r.json), 0);
  resp_free(&r);
  r = get("/api/runs?limit=1");
  CHECK_INT(cJSON_GetArraySize(r.json), 1);
  resp_free(&r);
  r = get("/api/runs?limit=abc");
  CHECK_INT(r.status, 400);
  resp_free(&r);

  /* One run by a unique prefix; an ambiguous one and an unknown one. */
  r = get("/api/runs/20261121T10");
  CHECK_INT(r.status, 200);
  CHECK_STR(jstr(r.json, "id"), RUN_A);
  const cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "tasks"), 0);
  CHECK_STR(jstr(t0, "name"), "train");
  CHECK_STR(jstr(t0, "state"), "success");
  resp_free(&r);
  r = get("/api/runs/20261121T1");
  CHECK_INT(r.status, 400);
  resp_free(&r);
  r = get("/api/runs/zzz");
  CHECK_INT(r.status, 404);
  resp_free(&r);

  r = get("/api/runs/" RUN_A "/alerts");
  CHECK_INT(r.status, 200);
  CHECK_INT(cJSON_GetArraySize(r.json), 1);
  CHECK_STR(jstr(cJSON_GetArrayItem(r.json, 0), "event"), "failure");
  CHECK_STR(jstr(cJSON_GetArrayItem(r.json, 0), "result"), "delivered");
  resp_free(&r);
}

static void test_logs(void) {
  /* A finished attempt, whole, then from an offset. */
  const char *text = "step 1 loss 4.2\nstep 2 w\xc3\xb6rld\n";
  resp r = get("/api/runs/20261121T10/tasks/train/log");
  CHECK_INT(r.status, 200);
  CHECK_INT(jnum(r.json, "attempt"), 1);
  CHECK_INT(jnum(r.json, "offset"), 0);
  CHECK_INT(jnum(r.json, "size"), strlen(text));
  CHECK_INT(jnum(r.json, "next_offset"), strlen(text));
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "eof")));
  CHECK_STR(jstr(r.json, "text"), text);
  resp_free(&r);
  r = get("/api/runs/" RUN_A "/tasks/train/log?offset=16");
  CHECK_INT(jnum(r.json, "offset"), 16);
  CHECK_STR(jstr(r.json, "text"), "step 2 w\xc3\xb6rld\n");
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "eof")));
  resp_free(&r);

  /* A running attempt's long log, in chunks of at most 256 KiB, cut
   * before a character that the chunk would split. */
  r = get("/api/runs/" RUN_B "/tasks/train/log");
  CHECK_INT(r.status, 200);
  CHECK_INT(jnum(r.json, "attempt"), 2);
  CHECK_INT(jnum(r.json, "size"), 300000);
  CHECK_INT(jnum(r.json, "next_offset"), 262143);
  CHECK(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "eof")));
  const char *t = jstr(r.json, "text");
  CHECK(t && strlen(t) == 262143 && memcmp(t, big_log, 262143) == 0);
  resp_free(&r);
  /* The log ends in the first byte of a character (the writer is in the
   * middle of it): that byte waits for the next read. */
  r = get("/api/runs/" RUN_B "/tasks/train/log?offset=262143");
  CHECK_INT(jnum(r.json, "offset"), 262143);
  CHECK_INT(jnum(r.json, "next_offset"), 299999);
  t = jstr(r.json, "text");
  CHECK(t && strlen(t) == 299999 - 262143 &&
        memcmp(t, big_log + 262143, 299999 - 262143) == 0);
  /* At the end, but the attempt is running: more may come. */
  CHECK(cJSON_IsFalse(cJSON_GetObjectItem(r.json, "eof")));
  resp_free(&r);
  /* An earlier attempt by number; one that does not exist; a task that
   * has not started. */
  r = get("/api/runs/" RUN_B "/tasks/train/log?attempt=1");
  CHECK_INT(jnum(r.json, "attempt"), 1);
  CHECK_STR(jstr(r.json, "text"), "first attempt\n");
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(r.json, "eof")));
  resp_free(&r);
  r = get("/api/runs/" RUN_B "/tasks/train/log?attempt=9");
  CHECK_INT(r.status, 404);
  resp_free(&r);
  r = get("/api/runs/" RUN_B "/tasks/eval/log");
  CHECK_INT(r.status, 404);
  resp_free(&r);
  r = get("/api/runs/" RUN_B "/tasks/train/log?offset=-1");
  CHECK_INT(r.status, 400);
  resp_free(&r);
  /* Task names that could leave the run directory. */
  r = get("/api/runs/" RUN_B "/tasks/../log");
  CHECK_INT(r.status, 400);
  CHECK(strstr(r.body.s, "invalid task name") != NULL);
  resp_free(&r);
  r = get("/api/runs/" RUN_B "/tasks/%2e%2e/log");
  CHECK_INT(r.status, 400);
  resp_free(&r);
}

static void test_metrics(void) {
  resp r = get("/api/runs/" RUN_A "/metrics");
  CHECK_INT(r.status, 200);
  const cJSON *tasks = cJSON_GetObjectItem(r.json, "tasks");
  const cJSON *train = cJSON_GetObjectItem(tasks, "train");
  /* Four metric lines; the other four are not metrics. */
  CHECK_INT(cJSON_GetArraySize(train), 4);
  const cJSON *p = cJSON_GetArrayItem(train, 2);
  CHECK_STR(jstr(p, "name"), "loss");
  CHECK_NEAR(jnum(p, "value"), 3.9, 1e-12);
  CHECK_INT(jnum(p, "step"), 2);
  CHECK_INT(jnum(p, "attempt"), 1);
  CHECK_INT(jnum(p, "time"), 1004);
  /* 12000 points of one series: every 3rd kept, and the last. */
  const cJSON *ev = cJSON_GetObjectItem(tasks, "eval");
  int n = cJSON_GetArraySize(ev);
  CHECK(n > 0 && n <= 5001);
  CHECK_INT(n, 4001);
  CHECK_INT(jnum(cJSON_GetArrayItem(ev, 1), "step"), 3);
  CHECK_INT(jnum(cJSON_GetArrayItem(ev, n - 1), "step"), 11999);
  const cJSON *ds = cJSON_GetObjectItem(r.json, "downsampled");
  CHECK_INT(jnum(cJSON_GetObjectItem(ds, "eval"), "acc"), 3);
  CHECK(cJSON_GetObjectItem(ds, "train") == NULL);
  resp_free(&r);
  /* A run without metrics. */
  r = get("/api/runs/" RUN_B "/metrics");
  CHECK_INT(r.status, 200);
  CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItem(r.json, "tasks")), 0);
  resp_free(&r);
}

static void test_report(void) {
  /* A run's report.html, served as the page it is, under a policy that
   * lets no script run. */
  const char *page = "<!DOCTYPE html>\n<title>report</title><p>run A</p>\n";
  write_text(test_path("runs/nightly/" RUN_A "/report.html"), page,
             strlen(page));
  resp r = get("/api/runs/" RUN_A "/report");
  CHECK_INT(r.status, 200);
  CHECK(has_header(&r, "Content-Type", "text/html"));
  CHECK(has_header(&r, "Content-Security-Policy", "default-src 'none'"));
  CHECK_STR(r.body.s, page);
  resp_free(&r);
  /* A unique prefix finds it too. */
  r = get("/api/runs/20261121T10/report");
  CHECK_INT(r.status, 200);
  resp_free(&r);
  /* No report yet: 404 as JSON. */
  r = get("/api/runs/" RUN_B "/report");
  CHECK_INT(r.status, 404);
  CHECK(has_header(&r, "Content-Type", "application/json"));
  CHECK(jstr(r.json, "error") && strstr(jstr(r.json, "error"), "report.html"));
  resp_free(&r);
  r = get("/api/runs/nosuchrun/report");
  CHECK_INT(r.status, 404);
  resp_free(&r);
}

/* ---- Writes ---- */

static void test_trigger(void) {
  const char *body = "{\"params\":{\"steps\":10,\"model\":\"gpt-tiny\"}}";
  size_t n = strlen(body);
  const char *path = "/api/dags/nightly/runs";
  int before = triggers();

  resp r = http("POST", path, body, n, NULL);
  CHECK_INT(r.status, 401);
  CHECK(has_header(&r, "WWW-Authenticate", "Bearer"));
  CHECK(jstr(r.json, "error") != NULL);
  resp_free(&r);
  const char *wrong[] = {"Authorization: Bearer s3cret-tokem", NULL};
  r = http("POST", path, body, n, wrong);
  CHECK_INT(r.status, 401);
  resp_free(&r);
  const char *prefix[] = {"Authorization: Bearer s3cret", NULL};
  r = http("POST", path, body, n, prefix);
  CHECK_INT(r.status, 401);
  resp_free(&r);
  CHECK_INT(triggers(), before);

  const char *right[] = {"Authorization: Bearer " TOKEN, NULL};
  r = http("POST", path, body, n, right);
  CHECK_INT(r.status, 201);
  CHECK_STR(jstr(r.json, "run_id"), "20261121T120000Z-cccc");
  CHECK_STR(jstr(r.json, "dag"), "nightly");
  CHECK_INT(triggers(), before + 1);
  CHECK_STR(last_dag, "nightly");
  CHECK_STR(last_params, "{\"steps\":10,\"model\":\"gpt-tiny\"}");
  resp_free(&r);
  /* No body: no params. */
  r = http("POST", path, "", 0, right);
  CHECK_INT(r.status, 201);
  CHECK_STR(last_params, "(none)");
  resp_free(&r);

  /* HMAC: right, wrong signature, wrong key, stale. */
  char h[2][128];
  const char *hv[3];
  long long now = (long long)time(NULL);
  sign(SECRET, path, now, body, h, hv);
  r = http("POST", path, body, n, hv);
  CHECK_INT(r.status, 201);
  CHECK_INT(triggers(), before + 3);
  resp_free(&r);
  /* The same signature again, or at another endpoint: refused. */
  r = http("POST", path, body, n, hv);
  CHECK_INT(r.status, 401);
  CHECK(strstr(r.body.s, "replay refused") != NULL);
  resp_free(&r);
  r = http("POST", "/api/runs/" RUN_B "/cancel", body, n, hv);
  CHECK_INT(r.status, 401);
  resp_free(&r);
  sign(SECRET, path, now, "{\"params\":{\"steps\":11}}", h, hv);
  r = http("POST", path, body, n, hv); /* signed another body */
  CHECK_INT(r.status, 401);
  resp_free(&r);
  sign("other-key", path, now, body, h, hv);
  r = http("POST", path, body, n, hv);
  CHECK_INT(r.status, 401);
  resp_free(&r);
  sign(SECRET, path, now - 400, body, h, hv);
  r = http("POST", path, body, n, hv);
  CHECK_INT(r.status, 401);
  CHECK(strstr(r.body.s, "X-Dagrun-Timestamp") != NULL);
  resp_free(&r);
  sign(SECRET, path, now + 400, body, h, hv);
  r = http("POST", path, body, n, hv);
  CHECK_INT(r.status, 401);
  resp_free(&r);
  CHECK_INT(triggers(), before + 3);

  /* Bodies the action never sees. */
  const char *bad[] = {
      "{\"params\": {\"steps\": 10}",      /* malformed */
      "{\"params\": [1, 2]}",              /* params not an object */
      "{\"params\": {\"a\": {\"b\": 1}}}", /* not a scalar */
      "{\"parms\": {}}",                   /* unknown key */
      "[1]",                               /* not an object */
      "{} trailing",                       /* garbage after the object */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r = http("POST", path, bad[i], strlen(bad[i]), right);
    CHECK_INT(r.status, 400);
    CHECK(jstr(r.json, "error") != NULL);
    if (i == 0)
      CHECK(strncmp(jstr(r.json, "error") ? jstr(r.json, "error") : "",
                    "malformed JSON body: ", 21) == 0);
    resp_free(&r);
  }
  CHECK_INT(triggers(), before + 3);

  /* A list or map param sent as JSON: the answer says how to send it, a
   * JSON string holding it (what `-p` takes), written out. */
  const char *as_json[][2] = {
      {"{\"params\": {\"cfgs\": [1, \"a\"]}}",
       "params.cfgs: expected a string, number or boolean; a list param is "
       "given as a JSON string holding the list: \"[1,\\\"a\\\"]\""},
      {"{\"params\": {\"opts\": {\"k\": 2}}}",
       "params.opts: expected a string, number or boolean; a map param is "
       "given as a JSON string holding the map: \"{\\\"k\\\":2}\""},
      {"{\"params\": {\"x\": null}}",
       "params.x: expected a string, number or boolean"},
  };
  for (size_t i = 0; i < sizeof as_json / sizeof as_json[0]; i++) {
    r = http("POST", path, as_json[i][0], strlen(as_json[i][0]), right);
    CHECK_INT(r.status, 400);
    CHECK_STR(jstr(r.json, "error"), as_json[i][1]);
    resp_free(&r);
  }
  /* A long one gets an example instead of itself. */
  sbuf longer = {0};
  sbuf_puts(&longer, "{\"params\": {\"cfgs\": [0");
  for (int k = 1; k < 100; k++)
    sbuf_printf(&longer, ", %d", k);
  sbuf_puts(&longer, "]}}");
  r = http("POST", path, longer.s, longer.n, right);
  CHECK_INT(r.status, 400);
  CHECK_STR(jstr(r.json, "error"),
            "params.cfgs: expected a string, number or boolean; a list param "
            "is given as a JSON string holding the list: e.g. \"[1, 2]\"");
  resp_free(&r);
  sbuf_free(&longer);
  CHECK_INT(triggers(), before + 3);

  /* Over 1 MiB: 413. */
  size_t big_n = (1u << 20) + 100;
  char *big = xmalloc(big_n + 1);
  memset(big, ' ', big_n);
  big[0] = '{';
  big[big_n - 1] = '}';
  big[big_n] = '\0';
  r = http("POST", path, big, big_n, right);
  CHECK_INT(r.status, 413);
  resp_free(&r);
  /* The same without a Content-Length (chunked): refused as it comes. */
  const char *chunked[] = {"Authorization: Bearer " TOKEN,
                           "Transfer-Encoding: chunked", NULL};
  r = http("POST", path, big, big_n, chunked);
  CHECK_INT(r.status, 413);
  resp_free(&r);
  /* Just under: accepted. */
  big_n = (1u << 20) - 10;
  big[big_n - 1] = '}';
  r = http("POST", path, big, big_n, right);
  CHECK_INT(r.status, 201);
  resp_free(&r);
  free(big);
  CHECK_INT(triggers(), before + 4);

  /* The action's refusal goes through with its status and message. */
  r = http("POST", "/api/dags/nope/runs", "", 0, right);
  CHECK_INT(r.status, 404);
  CHECK_STR(jstr(r.json, "error"), "no DAG named 'nope'");
  resp_free(&r);
}

static void test_cancel(void) {
  const char *right[] = {"Authorization: Bearer " TOKEN, NULL};
  resp r = http("POST", "/api/runs/20261121T11/cancel", "", 0, NULL);
  CHECK_INT(r.status, 401);
  resp_free(&r);
  CHECK_INT(n_cancels, 0);
  /* A prefix goes to the daemon as the full id. */
  r = http("POST", "/api/runs/20261121T11/cancel", "", 0, right);
  CHECK_INT(r.status, 202);
  CHECK_STR(jstr(r.json, "run_id"), RUN_B);
  CHECK_STR(last_cancel, RUN_B);
  resp_free(&r);
  /* The daemon's 404. */
  r = http("POST", "/api/runs/" RUN_A "/cancel", "", 0, right);
  CHECK_INT(r.status, 404);
  CHECK_STR(jstr(r.json, "error"), "daemon: no running run '" RUN_A "'");
  resp_free(&r);
  r = http("POST", "/api/runs/unknown/cancel", "", 0, right);
  CHECK_INT(r.status, 404);
  CHECK_STR(last_cancel, "unknown");
  resp_free(&r);
  CHECK_INT(n_cancels, 3);
}

static void test_routing(void) {
  resp r = get("/api/nope");
  CHECK_INT(r.status, 404);
  CHECK(has_header(&r, "Content-Type", "application/json"));
  CHECK(jstr(r.json, "error") != NULL);
  resp_free(&r);
  r = get("/api/runs/" RUN_A "/tasks");
  CHECK_INT(r.status, 404);
  resp_free(&r);
  /* The path exists, the method does not. */
  r = get("/api/dags/nightly/runs");
  CHECK_INT(r.status, 405);
  CHECK(has_header(&r, "Allow", "POST"));
  CHECK(jstr(r.json, "error") != NULL);
  resp_free(&r);
  r = http("DELETE", "/api/health", NULL, 0, NULL);
  CHECK_INT(r.status, 405);
  CHECK(has_header(&r, "Allow", "GET"));
  resp_free(&r);
  r = http("POST", "/api/runs", "{}", 2, NULL);
  CHECK_INT(r.status, 405);
  resp_free(&r);
}

static void test_dashboard(void) {
  resp r = get("/");
  CHECK_INT(r.status, 200);
  CHECK(has_header(&r, "Content-Type", "text/html; charset=utf-8"));
  CHECK(has_header(&r, "Cache-Control", "no-store"));
  CHECK(strstr(r.body.s, "<!doctype html>") == r.body.s);
  /* The app: it polls the API and draws SVG. */
  CHECK(strstr(r.body.s, "/api/dags") != NULL);
  CHECK(strstr(r.body.s, "/metrics") != NULL);
  CHECK(strstr(r.body.s, "/report`") != NULL); /* a link to each report */
  CHECK(strstr(r.body.s, "createElementNS") != NULL);
  /* Self-contained, and never puts data in innerHTML. */
  CHECK(strstr(r.body.s, "<script src") == NULL);
  CHECK(strstr(r.body.s, "<link") == NULL);
  CHECK(strstr(r.body.s, "innerHTML") == NULL);
  resp_free(&r);
}

static void test_openapi(void) {
  resp r = get("/api/openapi.json");
  CHECK_INT(r.status, 200);
  CHECK(has_header(&r, "Content-Type", "application/json"));
  CHECK(r.json != NULL);
  CHECK(strncmp(jstr(r.json, "openapi") ? jstr(r.json, "openapi") : "", "3.0.",
                4) == 0);
  const cJSON *paths = cJSON_GetObjectItem(r.json, "paths");
  /* Every path the server routes, with its method. */
  static const char *const routed[][2] = {
      {"/", "get"},
      {"/api/health", "get"},
      {"/api/openapi.json", "get"},
      {"/api/dags", "get"},
      {"/api/dags/{dag}", "get"},
      {"/api/dags/{dag}/runs", "post"},
      {"/api/runs", "get"},
      {"/api/runs/{run}", "get"},
      {"/api/runs/{run}/tasks/{task}/log", "get"},
      {"/api/runs/{run}/metrics", "get"},
      {"/api/runs/{run}/alerts", "get"},
      {"/api/runs/{run}/cancel", "post"},
      {"/api/runs/{run}/report", "get"},
      {"/api/compare", "get"},
      {"/api/runs/{run}/tags", "post"},
      {"/api/runs/{run}/note", "post"},
      {"/api/dags/{dag}/backfill", "post"},
      {"/api/runs/{run}/resume", "post"},
      {"/api/runs/{run}/tasks/{task}/approve", "post"},
      {"/api/runs/{run}/tasks/{task}/reject", "post"},
      {"/api/dags/{dag}/pause", "post"},
      {"/api/dags/{dag}/unpause", "post"},
  };
  size_t n = sizeof routed / sizeof routed[0];
  for (size_t i = 0; i < n; i++) {
    const cJSON *p = cJSON_GetObjectItem(paths, routed[i][0]);
    if (!p || !cJSON_GetObjectItem(p, routed[i][1]))
      fprintf(stderr, "openapi.json: no %s %s\n", routed[i][1], routed[i][0]);
    CHECK(p && cJSON_GetObjectItem(p, routed[i][1]));
  }
  CHECK_INT(cJSON_GetArraySize(paths), n);
  /* The list above is the server's: each entry of api.c's route table
   * ({"GET", pattern, R_...}, a star in the pattern standing for one
   * {parameter}) is in it. A route added without its documentation fails
   * here. */
  char *src = NULL;
  size_t src_n = 0;
  CHECK_INT(fileio_read_file(TEST_SOURCE_DIR "/orchestrator/serve/api.c", &src, &src_n), 0);
  size_t n_routes = 0;
  for (const char *z = src ? strstr(src, "routes[] = {") : NULL;
       z && (z = strstr(z, "{\"")) && strncmp(z, "{\"", 2) == 0; z++) {
    char method[8], pattern[128];
    if (sscanf(z, "{\"%7[A-Z]\", \"%127[^\"]\", R_", method, pattern) != 2)
      break;
    n_routes++;
    int found = 0;
    for (size_t i = 0; i < n && !found; i++) {
      /* Compare with each {parameter} read as '*'. */
      char templ[128];
      size_t k = 0;
      for (const char *c = routed[i][0]; *c && k + 1 < sizeof templ; c++) {
        templ[k++] = *c == '{' ? '*' : *c;
        if (*c == '{')
          while (*c && *c != '}')
            c++;
      }
      templ[k] = '\0';
      found = !strcmp(templ, pattern) && !strcasecmp(routed[i][1], method);
    }
    if (!found)
      fprintf(stderr, "api.c routes %s %s: not in openapi.json\n", method,
              pattern);
    CHECK(found);
  }
  CHECK_INT(n_routes, n);
  free(src);
  /* And every documented path is routed. */
  const cJSON *p;
  cJSON_ArrayForEach(p, paths) {
    char path[256];
    size_t k = 0;
    for (const char *z = p->string; *z && k + 2 < sizeof path; z++) {
      if (*z == '{') {
        path[k++] = 'x';
        while (*z && *z != '}')
          z++;
      } else {
        path[k++] = *z;
      }
    }
    path[k] = '\0';
    int post = cJSON_GetObjectItem(p, "post") != NULL;
    resp q = http(post ? "POST" : "GET", path, post ? "" : NULL, 0, NULL);
    CHECK(!strstr(q.body.s, "no such endpoint"));
    resp_free(&q);
  }
  const cJSON *schemes = cJSON_GetObjectItem(
      cJSON_GetObjectItem(r.json, "components"), "securitySchemes");
  CHECK_INT(cJSON_GetArraySize(schemes), 2);
  resp_free(&r);
}

/* Requests at once, as the dashboard makes them: each on its own
 * connection and thread, each with its own store handle. 12: below the
 * 16 connections a client address may hold (api.c), with room for the
 * earlier tests' connections that the server is still closing. */
static void test_concurrent(void) {
  enum { N = 12 };
  static const char *const paths[] = {"/api/health",
                                      "/api/runs",
                                      "/api/runs/" RUN_A,
                                      "/api/runs/" RUN_A "/metrics",
                                      "/api/runs/" RUN_B "/tasks/train/log",
                                      "/api/dags/nightly"};
  CURLM *m = curl_multi_init();
  CURL *h[N];
  sbuf body[N];
  for (int i = 0; i < N; i++) {
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port_, paths[i % 6]);
    memset(&body[i], 0, sizeof body[i]);
    h[i] = curl_easy_init();
    curl_easy_setopt(h[i], CURLOPT_URL, url);
    curl_easy_setopt(h[i], CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &body[i]);
    curl_multi_add_handle(m, h[i]);
  }
  int running = 1;
  while (running) {
    CHECK_INT(curl_multi_perform(m, &running), CURLM_OK);
    if (running)
      curl_multi_poll(m, NULL, 0, 1000, NULL);
  }
  for (int i = 0; i < N; i++) {
    long status = 0;
    curl_easy_getinfo(h[i], CURLINFO_RESPONSE_CODE, &status);
    CHECK_INT(status, 200);
    cJSON *j = cJSON_ParseWithLength(body[i].s ? body[i].s : "", body[i].n);
    CHECK(j != NULL);
    cJSON_Delete(j);
    curl_multi_remove_handle(m, h[i]);
    curl_easy_cleanup(h[i]);
    sbuf_free(&body[i]);
  }
  curl_multi_cleanup(m);
}

/* ---- Servers configured otherwise ---- */

static void test_no_credentials(const char *db) {
  api_config cfg = {.host = "127.0.0.1", .store_path = db};
  api_server *s = NULL;
  char err[512];
  CHECK_INT(api_start(&cfg, &actions, &s, err, sizeof err), 0);
  if (!s)
    return;
  int saved = port_;
  port_ = api_port(s);
  const char *hdr[] = {"Authorization: Bearer " TOKEN, NULL};
  int before = triggers();
  resp r = http("POST", "/api/dags/nightly/runs", "", 0, hdr);
  CHECK_INT(r.status, 403);
  CHECK(strstr(r.body.s, "--token-file") != NULL);
  CHECK(strstr(r.body.s, "--hmac-secret-file") != NULL);
  resp_free(&r);
  CHECK_INT(triggers(), before);
  /* Reads stay open. */
  r = get("/api/runs");
  CHECK_INT(r.status, 200);
  resp_free(&r);
  api_stop(s);
  port_ = saved;
}

static void test_start_errors(const char *db) {
  char err[512];
  api_server *s = NULL;
  api_config bad = {.host = "localhost:80", .token = TOKEN, .store_path = db};
  CHECK_INT(api_start(&bad, &actions, &s, err, sizeof err), DR_EIO);
  CHECK(s == NULL);
  CHECK(strstr(err, "invalid listen address 'localhost:80'") != NULL);
  /* The port in use. */
  api_config dup = {
      .host = "127.0.0.1", .port = port_, .token = TOKEN, .store_path = db};
  CHECK_INT(api_start(&dup, &actions, &s, err, sizeof err), DR_EIO);
  CHECK(strstr(err, "cannot listen on 127.0.0.1") != NULL);
  /* IPv6, where the machine has it. */
  api_config v6 = {.host = "::1", .token = TOKEN, .store_path = db};
  int rc = api_start(&v6, &actions, &s, err, sizeof err);
  if (rc == 0) {
    CHECK(api_port(s) > 0);
    api_stop(s);
  } else {
    CHECK(strstr(err, "cannot listen on ::1") != NULL);
    fprintf(stderr, "note: no IPv6 here: %s\n", err);
  }
  api_stop(NULL);
  /* No store yet: no runs, not an error. */
  api_config empty = {.host = "127.0.0.1",
                      .store_path = test_path("none/state.db")};
  CHECK_INT(api_start(&empty, &actions, &s, err, sizeof err), 0);
  if (s) {
    int saved = port_;
    port_ = api_port(s);
    resp r = get("/api/runs");
    CHECK_INT(r.status, 200);
    CHECK_STR(r.body.s, "[]");
    resp_free(&r);
    r = get("/api/runs/" RUN_A);
    CHECK_INT(r.status, 404);
    resp_free(&r);
    api_stop(s);
    port_ = saved;
  }
}

int main(void) {
  if (test_tmpdir_make("api"))
    return 1;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const char *db = test_path("state.db");
  make_store(db);

  api_config cfg = {.host = "127.0.0.1",
                    .token = TOKEN,
                    .hmac_secret = SECRET,
                    .store_path = db};
  api_server *s = NULL;
  char err[512];
  CHECK_INT(api_start(&cfg, &actions, &s, err, sizeof err), 0);
  if (!s) {
    fprintf(stderr, "api_start: %s\n", err);
    TEST_DONE();
  }
  port_ = api_port(s);
  CHECK(port_ > 0);

  test_reads();
  test_logs();
  test_metrics();
  test_report();
  test_trigger();
  test_cancel();
  test_routing();
  test_dashboard();
  test_openapi();
  test_concurrent();
  test_no_credentials(db);
  test_start_errors(db);

  api_stop(s);
  curl_global_cleanup();
  test_tmpdir_remove();
  TEST_DONE();
}
