/*
 * alerts: the checks of `alerts:` (alertspec.h: messages and positions)
 * and URL redaction (alerts.h) (params are redacted by secrets: test_secrets.c). Delivery is
 * tested over real HTTP in tests/integration/test_alerts.sh.
 */
#include "dagfile/alertspec.h"
#include "report/alerts.h"

#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* Checks the alerts of a DAG with the given alerts block; returns every
 * diagnostic as one string (caller frees). */
static char *check(const char *alerts_yaml) {
  char *text = xasprintf("dag: a\nparams: {hook: 'http://h/p/secret'}\n"
                         "%s\ntasks:\n  t: {stage: exec}\n",
                         alerts_yaml);
  spec *s = NULL;
  diags d = {0};
  int rc = spec_parse("dag.yaml", text, strlen(text), &s, &d);
  CHECK_INT(rc, 0);
  if (s)
    (void)alertspec_check(s, NULL, &d);
  char *all = all_diags(&d);
  diags_free(&d);
  spec_free(s);
  free(text);
  return all;
}

static void expect_diag(const char *yaml, const char *want) {
  char *got = check(yaml);
  if (!strstr(got, want)) {
    fprintf(stderr, "expected a diagnostic containing:\n  %s\ngot:\n%s\n", want,
            got);
    CHECK(0);
  }
  free(got);
}

static void test_checks(void) {
  char *ok = check("alerts:\n  - on: [failure, retry, success]\n"
                   "    webhook: https://hooks.example.com/x\n"
                   "  - {on: deadline, webhook: 'http://h/', deadline: 2h,"
                   " timeout: 3s}");
  CHECK_STR(ok, "");
  free(ok);
  char *none = check("alerts:");
  CHECK_STR(none, "");
  free(none);
  expect_diag("alerts:\n  - on: [sucess]\n    webhook: http://h/",
              "dag.yaml:4:10: error: alert 1: unknown event 'sucess'; did "
              "you mean 'success'?");
  expect_diag("alerts:\n  - on: [failure]",
              "dag.yaml:4:5: error: alert 1: missing 'webhook'");
  expect_diag("alerts:\n  - webhook: http://h/",
              "dag.yaml:4:5: error: alert 1: missing 'on'");
  expect_diag("alerts:\n  - {on: [deadline], webhook: 'http://h/'}",
              "alert 1: the 'deadline' event needs 'deadline: DURATION'");
  expect_diag("alerts:\n  - {on: [failure], webhook: 'http://h/', "
              "deadline: 1h}",
              "dag.yaml:4:53: error: alert 1: 'deadline' without the "
              "'deadline' event");
  expect_diag("alerts:\n  - {on: [deadline], webhook: 'http://h/', "
              "deadline: soon}",
              "alert 1: 'deadline' expects a positive duration");
  expect_diag("alerts:\n  - {on: [failure], webhok: 'http://h/'}",
              "unknown key 'webhok'; did you mean 'webhook'?");
  expect_diag("alerts: {on: failure}", "'alerts' expects a list");
  /* A bad URL is reported without showing it: it may be a secret. */
  char *got = check("alerts:\n  - {on: [failure], webhook: 'ftp://h/tok'}");
  CHECK(strstr(got, "must resolve to an http:// or https:// URL") != NULL);
  CHECK(strstr(got, "tok") == NULL);
  free(got);
  /* "" turns the alert off. */
  char *off = check("alerts:\n  - {on: [failure], webhook: ''}");
  CHECK_STR(off, "");
  free(off);
}

static void test_redact_url(void) {
  char b[256];
  alerts_redact_url("https://hooks.slack.com/services/T0/B0/XYZ?x=1", b,
                    sizeof(b));
  CHECK_STR(b, "https://hooks.slack.com");
  alerts_redact_url("http://user:pw@127.0.0.1:8080/a/b#f", b, sizeof(b));
  CHECK_STR(b, "http://127.0.0.1:8080");
  alerts_redact_url("not a url", b, sizeof(b));
  CHECK_STR(b, "(invalid URL)");
}

int main(void) {
  test_checks();
  test_redact_url();
  TEST_DONE();
}
