/*
 * secrets: masking of whole strings and of streams (a secret split across
 * writes at every position), `secrets:` checks, and the redaction of
 * secret params. Masking in a real run (logs, store, events, alerts) is
 * tested in tests/integration/test_secrets.sh, in output keys and
 * report.html in test_secrets_leaks.sh.
 */
#include "run/secrets.h"

#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static sbuf sink_out;

static void sink(void *ud, const char *p, size_t n) {
  (void)ud;
  CHECK(n > 0);
  sbuf_add(&sink_out, p, n);
}

/* Streams text through a masker in chunks cut at the given offsets;
 * returns what came out (caller frees). */
static char *stream(const secrets *set, const char *text, const size_t *cuts,
                    size_t n_cuts) {
  sink_out = (sbuf){0};
  secrets_stream *m = secrets_stream_create(set, sink, NULL);
  size_t at = 0, len = strlen(text);
  for (size_t i = 0; i <= n_cuts; i++) {
    size_t end = i < n_cuts ? cuts[i] : len;
    secrets_stream_write(m, text + at, end - at);
    at = end;
  }
  secrets_stream_flush(m);
  secrets_stream_destroy(m);
  sbuf_putc(&sink_out, '\0');
  return sink_out.s;
}

static void test_mask(void) {
  secrets *set = secrets_create();
  secrets_add(set, "hunter22");
  secrets_add(set, "abc");         /* too short: not a secret */
  secrets_add(set, "hunter22");    /* a duplicate */
  secrets_add(set, "hunter22xyz"); /* longer, same start: longest wins */
  CHECK_INT(secrets_count(set), 2);
  CHECK_INT(secrets_max_len(set), 11);
  char *m = secrets_mask(set, "a hunter22 b hunter22xyz c abc hunter2");
  CHECK_STR(m, "a *** b *** c abc hunter2");
  free(m);
  m = secrets_mask(set, "hunter22hunter22");
  CHECK_STR(m, "******");
  free(m);
  m = secrets_mask(set, "");
  CHECK_STR(m, "");
  free(m);
  m = secrets_mask(NULL, "hunter22");
  CHECK_STR(m, "hunter22");
  free(m);
  cJSON *j = cJSON_Parse("{\"a\":\"x hunter22\",\"b\":[1,\"hunter22\"],"
                         "\"c\":{\"d\":\"ok\"}}");
  secrets_mask_json(set, j);
  char *t = cJSON_PrintUnformatted(j);
  CHECK_STR(t, "{\"a\":\"x ***\",\"b\":[1,\"***\"],\"c\":{\"d\":\"ok\"}}");
  cJSON_free(t);
  cJSON_Delete(j);
  /* Keys too, at any depth (an output named after a secret). */
  j = cJSON_Parse("{\"k_hunter22\":\"v\",\"o\":{\"hunter22\":1}}");
  secrets_mask_json(set, j);
  t = cJSON_PrintUnformatted(j);
  CHECK_STR(t, "{\"k_***\":\"v\",\"o\":{\"***\":1}}");
  cJSON_free(t);
  cJSON_Delete(j);
  secrets_destroy(set);
}

static char *shout(const char *z) {
  char *u = xstrdup(z);
  for (char *p = u; *p; p++)
    *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
  return u;
}

/* secrets_with_forms: each secret and its form (report.html masks secrets
 * as written and HTML-escaped). */
static void test_with_forms(void) {
  secrets *set = secrets_create();
  secrets_add(set, "hunter22");
  secrets *both = secrets_with_forms(set, shout);
  CHECK_INT(secrets_count(both), 2);
  char *m = secrets_mask(both, "hunter22 HUNTER22 Hunter22");
  CHECK_STR(m, "*** *** Hunter22");
  free(m);
  secrets_destroy(both);
  both = secrets_with_forms(NULL, shout);
  CHECK_INT(secrets_count(both), 0);
  secrets_destroy(both);
  secrets_destroy(set);
}

/* Every split of the secret across two writes, and every split into three
 * pieces, comes out masked; nothing else changes. */
static void test_stream_splits(void) {
  const char *secret = "s3cr3t-T0KEN-value";
  secrets *set = secrets_create();
  secrets_add(set, secret);
  secrets_add(set, "other-secret");
  char *text = xasprintf("line one\nthe token is %s; again:%s\nend s3cr3t\n",
                         secret, secret);
  const char *want = "line one\nthe token is ***; again:***\nend s3cr3t\n";
  size_t len = strlen(text);
  size_t first = (size_t)(strstr(text, secret) - text);
  size_t slen = strlen(secret);
  for (size_t cut = 0; cut <= len; cut++) {
    char *got = stream(set, text, &cut, 1);
    if (strcmp(got, want) != 0) {
      fprintf(stderr, "cut at %zu: got \"%s\"\n", cut, got);
      CHECK(0);
    }
    free(got);
  }
  for (size_t a = first; a <= first + slen; a++)
    for (size_t b = a; b <= first + slen; b++) {
      size_t cuts[2] = {a, b};
      char *got = stream(set, text, cuts, 2);
      if (strcmp(got, want) != 0) {
        fprintf(stderr, "cuts at %zu, %zu: got \"%s\"\n", a, b, got);
        CHECK(0);
      }
      free(got);
    }
  /* One byte per write. */
  size_t *cuts = xcalloc(len, sizeof(size_t));
  for (size_t i = 0; i < len; i++)
    cuts[i] = i;
  char *got = stream(set, text, cuts, len);
  CHECK_STR(got, want);
  free(got);
  free(cuts);
  free(text);
  secrets_destroy(set);
}

/* A prefix of a secret at the end of the input is written at the flush,
 * and an empty set passes everything through as it comes. */
static void test_stream_tail(void) {
  secrets *set = secrets_create();
  secrets_add(set, "password123");
  sink_out = (sbuf){0};
  secrets_stream *m = secrets_stream_create(set, sink, NULL);
  secrets_stream_write(m, "abc passw", 9);
  CHECK_INT(sink_out.n, 4); /* "passw" held back */
  secrets_stream_flush(m);
  CHECK_INT(sink_out.n, 9);
  secrets_stream_destroy(m);
  sbuf_free(&sink_out);

  secrets *empty = secrets_create();
  sink_out = (sbuf){0};
  m = secrets_stream_create(empty, sink, NULL);
  secrets_stream_write(m, "passw", 5);
  CHECK_INT(sink_out.n, 5);
  secrets_stream_destroy(m);
  sbuf_free(&sink_out);
  secrets_destroy(empty);
  secrets_destroy(set);
}

static spec *parse(const char *text, diags *d) {
  spec *s = NULL;
  (void)spec_parse("dag.yaml", text, strlen(text), &s, d);
  return s;
}

static void test_spec_secrets(void) {
  diags d = {0};
  spec *s = parse("dag: a\nparams: {token: x, other: y}\n"
                  "secrets: [token]\ntasks:\n  t: {stage: exec}\n",
                  &d);
  CHECK_INT(d.n, 0);
  CHECK_INT(s->n_secrets, 1);
  CHECK_STR(s->secrets[0], "token");
  spec_free(s);

  s = parse("dag: a\nparams: {token: x}\nsecrets: [tokn, 3]\n"
            "tasks:\n  t: {stage: exec}\n",
            &d);
  char *all = all_diags(&d);
  CHECK(strstr(all, "dag.yaml:3:11: error: 'secrets' names unknown param "
                    "'tokn'; did you mean 'token'?") != NULL);
  CHECK(strstr(all, "dag.yaml:3:17:") != NULL);
  free(all);
  diags_free(&d);
  spec_free(s);

  s = parse("dag: a\nparams: {token: x}\nsecrets: token\n"
            "tasks:\n  t: {stage: exec}\n",
            &d);
  all = all_diags(&d);
  CHECK(strstr(all, "dag.yaml:3:10: error:") != NULL);
  free(all);
  diags_free(&d);
  spec_free(s);
}

static void test_redact_params(void) {
  const char *text = "dag: a\nparams: {hook: x, tok: y, other: z, pw: p, "
                     "auth: q}\nsecrets: [pw]\n"
                     "alerts:\n  - {on: [failure], webhook: "
                     "'http://h/${params.hook}/${params.tok}'}\n"
                     "tasks:\n  t: {stage: exec}\n";
  diags d = {0};
  spec *s = parse(text, &d);
  CHECK_INT(d.n, 0);
  cJSON *p = cJSON_Parse("{\"hook\":\"SECRET\",\"tok\":7,\"other\":\"z\","
                         "\"pw\":\"letmein\",\"auth\":\"Basic letmein\"}");
  secrets_redact_params(s, p);
  char *out = cJSON_PrintUnformatted(p);
  CHECK_STR(out, "{\"hook\":\"(redacted)\",\"tok\":\"(redacted)\","
                 "\"other\":\"z\",\"pw\":\"(redacted)\",\"auth\":\"Basic "
                 "***\"}");
  cJSON_free(out);
  cJSON_Delete(p);

  /* The run's set: secret params, the webhook and its secret parts. */
  p = cJSON_Parse("{\"hook\":\"SECRET\",\"tok\":7,\"other\":\"z\","
                  "\"pw\":\"letmein\",\"auth\":\"q\"}");
  secrets *set = secrets_collect(s, p, NULL);
  char *m = secrets_mask(set, "letmein http://h/SECRET/7 /SECRET/7 h z");
  CHECK_STR(m, "*** *** *** h z");
  free(m);
  secrets_destroy(set);
  cJSON_Delete(p);
  spec_free(s);
}

int main(void) {
  test_mask();
  test_with_forms();
  test_stream_splits();
  test_stream_tail();
  test_spec_secrets();
  test_redact_params();
  TEST_DONE();
}
