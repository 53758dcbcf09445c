/*
 * report: report.html from a run directory alone (no store: attempts from
 * the attempt directories), with what the train stage does not record
 * yet: the per-step time split, MFU, a `tokens` metric, `spike` events, a
 * resumed attempt repeating steps; and a finder task's results and
 * figures, a figure with a script left out. Every text escaped.
 */
#include "base/util.h"
#include "lib/fileio.h"
#include "report/report.h"
#include "testlib.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void put(const char *rel, const char *text) {
  char *p = path_join(dir, rel);
  char *d = path_dirname(p);
  CHECK_INT(fileio_mkdir_p(d, 0755), 0);
  CHECK_INT(fileio_write_file(p, text, strlen(text)), 0);
  free(d);
  free(p);
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* data-points of series label in the chart titled title, or -1. */
static int points(const char *html, const char *title, const char *label) {
  char key[256];
  snprintf(key, sizeof key, "data-title=\"%s\"", title);
  const char *c = strstr(html, key);
  if (!c)
    return -1;
  const char *end = strstr(c, "</svg>");
  snprintf(key, sizeof key, "data-label=\"%s\" data-points=\"", label);
  const char *s = strstr(c, key);
  return s && s < end ? atoi(s + strlen(key)) : -1;
}

static void make_run(void) {
  put("run.json",
      "{\"dag\":\"fit<&>\",\"run_id\":\"R1\",\"state\":\"failed\","
      "\"started\":\"2026-11-21T10:00:00.000Z\","
      "\"ended\":\"2026-11-21T10:05:00.500Z\",\"duration_s\":300.5,"
      "\"params\":{\"lr\":0.001,\"token\":\"***\"},"
      "\"tasks\":["
      "{\"name\":\"lr_find\",\"stage\":\"lr_find\",\"needs\":[],"
      "\"state\":\"success\",\"attempts\":1,\"exit_code\":0,"
      "\"started\":\"2026-11-21T10:00:00.100Z\","
      "\"ended\":\"2026-11-21T10:00:30.000Z\"},"
      "{\"name\":\"train\",\"stage\":\"train\",\"needs\":[\"lr_find\"],"
      "\"state\":\"success\",\"attempts\":2,\"exit_code\":0,"
      "\"started\":\"2026-11-21T10:00:31.000Z\","
      "\"ended\":\"2026-11-21T10:04:00.000Z\"},"
      "{\"name\":\"export\",\"stage\":\"export\",\"needs\":[\"train\"],"
      "\"state\":\"failed\",\"attempts\":1,\"exit_code\":2,"
      "\"reason\":\"bad <model> & \\\"dir\\\"\","
      "\"started\":\"2026-11-21T10:04:01.000Z\","
      "\"ended\":\"2026-11-21T10:05:00.000Z\"}]}");
  put("lr_find/attempt-1/attempt.json",
      "{\"params\":{\"min_lr\":1e-7,\"max_lr\":10}}");
  put("lr_find/attempt-1/log", "");
  put("lr_find/out/lr_find.json",
      "{\"suggested_lr\":0.00316,\"steps\":100,\"curve\":[1,2,3]}");
  put("lr_find/out/lr_find.svg",
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" "
      "data-title=\"LR range test\" viewBox=\"0 0 10 10\">"
      "<text>figure-from-lr-find</text></svg>\n");
  put("lr_find/out/evil.svg",
      "<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script>"
      "<text>evil-figure</text></svg>");
  put("lr_find/out/handler.svg",
      "<svg xmlns=\"http://www.w3.org/2000/svg\"><rect onload =\"x()\"/>"
      "<text>handler-figure</text></svg>");
  put("train/attempt-1/attempt.json",
      "{\"params\":{\"batch_size\":4,\"seq_len\":0,\"block_size\":16}}");
  put("train/attempt-1/log", "");
  put("train/attempt-2/attempt.json",
      "{\"params\":{\"batch_size\":4,\"seq_len\":0,\"block_size\":16,"
      "\"api_key\":\"***\"}}");
  put("train/attempt-2/log", "");
  put("export/attempt-1/attempt.json", "{\"params\":{}}");
  put("export/attempt-1/log", "");

  /* Attempt 1: steps 1..120, then a crash; attempt 2 resumed from the
   * checkpoint at 100: steps 101..200. Every step: loss, lr, grad_norm,
   * tokens, mfu, the time split; val_loss every 50; a spike at 150. */
  sbuf m = {0};
  for (int a = 1; a <= 2; a++) {
    int from = a == 1 ? 1 : 101, to = a == 1 ? 120 : 200;
    for (int s = from; s <= to; s++) {
      double loss = 5 * exp(-s / 80.0) + 2 + (a == 1 ? 0.5 : 0);
      const char *names[] = {"loss",
                             "lr",
                             "grad_norm",
                             "tokens",
                             "mfu",
                             "time_data_s",
                             "time_forward_s",
                             "time_backward_s",
                             "time_optimizer_s",
                             "time_comm_s"};
      double vals[] = {loss,  1e-3, 0.8,  64.0 * s, 0.31,
                       0.004, 0.02, 0.04, 0.006,    0};
      for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
        sbuf_printf(&m,
                    "{\"time\":%d,\"attempt\":%d,\"name\":\"%s\","
                    "\"value\":%.17g,\"step\":%d}\n",
                    1000 + s, a, names[k], vals[k], s);
      if (s % 50 == 0)
        sbuf_printf(&m,
                    "{\"time\":%d,\"attempt\":%d,\"name\":\"val_loss\","
                    "\"value\":%g,\"step\":%d}\n",
                    1000 + s, a, loss + 0.1, s);
      if (s == 150)
        sbuf_printf(&m, "{\"time\":1,\"attempt\":2,\"name\":\"spike\","
                        "\"value\":1,\"step\":150}\n");
    }
  }
  sbuf_puts(&m, "not json\n{\"name\":\"loss\"}\n");
  put("train/metrics.jsonl", m.s);
  sbuf_free(&m);
  put("train/out/samples.txt", "=== sample 1\n<b>bold</b> & more\n");
}

/* The figures' encoder against RFC 4648's own examples (section 10). */
static void check_base64(void) {
  static const char *const plain[] = {"",     "f",     "fo",    "foo",
                                      "foob", "fooba", "foobar"};
  static const char *const coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
    sbuf b = {0};
    sbuf_base64(&b, plain[i], strlen(plain[i]));
    CHECK(strcmp(b.s ? b.s : "", coded[i]) == 0);
    sbuf_free(&b);
  }
}

int main(void) {
  check_base64();
  snprintf(dir, sizeof dir, "%s/dagrun-report-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(dir))
    return 1;
  make_run();

  char err[512], *path = NULL;
  CHECK_INT(report_write(NULL, dir, "R1", NULL, &path, err, sizeof err), 0);
  char *html = NULL;
  size_t n = 0;
  CHECK(path && fileio_read_file(path, &html, &n) == 0);
  if (!html)
    TEST_DONE();

  CHECK(strncmp(html, "<!DOCTYPE html>", 15) == 0);
  CHECK(strstr(html, "<script") == NULL);
  CHECK(strstr(html, "alert(1)") == NULL);
  /* Text escaped everywhere: the DAG's name, an error, the samples. */
  CHECK(strstr(html, "fit<&>") == NULL);
  CHECK(strstr(html, "fit&lt;&amp;&gt;") != NULL);
  CHECK(strstr(html, "bad &lt;model&gt; &amp; &quot;dir&quot;") != NULL);
  CHECK(strstr(html, "&lt;b&gt;bold&lt;/b&gt; &amp; more") != NULL);
  /* No store: the trigger is unknown, the attempts come from their
   * directories: two bars for train. */
  CHECK(strstr(html, "manual (not recorded)") != NULL);
  CHECK_INT(points(html, "Attempts of every task", "train"), 2);
  CHECK_INT(points(html, "Attempts of every task", "export"), 1);
  CHECK(strstr(html, "data-task=\"export\" data-state=\"failed\"") != NULL);

  /* One value per step: attempt 2's for 101..120. */
  CHECK_INT(points(html, "train: loss", "loss (train)"), 200);
  CHECK_INT(points(html, "train: loss", "val_loss"), 4);
  CHECK_INT(points(html, "train: loss against tokens", "loss (train)"), 200);
  CHECK(strstr(html, "tokens seen</text>") != NULL); /* the metric's */
  CHECK_INT(points(html, "train: model FLOPs utilization", "mfu"), 200);
  CHECK(strstr(html, "MFU (% of peak FLOP/s)") != NULL);
  /* The time split: 200 steps in 60 bars, each part a stack. */
  const char *tt = "train: where the time goes (mean per step, 4 steps a bar)";
  CHECK_INT(points(html, tt, "data wait"), 60);
  CHECK_INT(points(html, tt, "forward"), 60);
  CHECK_INT(points(html, tt, "communication"), 60);
  CHECK(strstr(html, "time per step (ms)") != NULL);
  /* 0.004 of 0.07 s is data wait: 5.7%, above 5%: the advice. */
  CHECK(strstr(html, "data wait 5.7%") != NULL);
  CHECK(strstr(html, "raise the prefetch depth") != NULL);
  /* The spike, on both loss charts. */
  CHECK_INT(count(html, "loss-spike guard fired at step 150"), 2);

  /* The finder: its results and its figures, each an image of the file
   * (base64 by Python's encoder), so that one holding a script or a
   * handler is shown and never runs; none of their markup is in the page,
   * whose policy lets nothing run or be fetched. */
  CHECK(strstr(html, "suggested_lr") != NULL);
  CHECK(strstr(html, "0.00316") != NULL);
  CHECK(
      strstr(
          html,
          "<img alt=\"lr_find.svg\" src=\"data:image/svg+xml;base64,"
          "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIGNsYXNzPSJj"
          "aGFydCIgZGF0YS10aXRsZT0iTFIgcmFuZ2UgdGVzdCIgdmlld0JveD0iMCAwIDEw"
          "IDEwIj48dGV4dD5maWd1cmUtZnJvbS1sci1maW5kPC90ZXh0Pjwvc3ZnPgo=\">") !=
      NULL);
  CHECK(
      strstr(html,
             "<img alt=\"evil.svg\" src=\"data:image/svg+xml;base64,"
             "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciPjxzY3JpcHQ+"
             "YWxlcnQoMSk8L3NjcmlwdD48dGV4dD5ldmlsLWZpZ3VyZTwvdGV4dD48L3N2Zz4="
             "\">") != NULL);
  CHECK(strstr(html, "<img alt=\"handler.svg\"") != NULL);
  CHECK(strstr(html, "figure-from-lr-find") == NULL);
  CHECK(strstr(html, "evil-figure") == NULL);
  CHECK(strstr(html, "handler-figure") == NULL);
  CHECK(strstr(html, "<meta http-equiv=\"Content-Security-Policy\" "
                     "content=\"default-src 'none'; style-src 'unsafe-inline'; "
                     "img-src data:; base-uri 'none'; form-action 'none'\">") !=
        NULL);

  /* The contents name the sections there are. */
  CHECK(strstr(html, "<a href=\"#finders\">") != NULL);
  CHECK(strstr(html, "<a href=\"#validation\">") != NULL);
  CHECK(strstr(html, "id=\"finders\"") != NULL);

  /* Params: the run's as recorded, a task's from its latest attempt. */
  CHECK(strstr(html, "(attempt 2, secrets masked)") != NULL);
  CHECK(strstr(html, "api_key") != NULL);

  /* No run.json and no store: nothing to report. */
  char *rj = path_join(dir, "run.json");
  unlink(rj);
  free(rj);
  CHECK_INT(report_write(NULL, dir, "R1", NULL, NULL, err, sizeof err),
            DR_ENOENT);
  CHECK(strstr(err, "R1") != NULL);

  free(html);
  free(path);
  char *cmd = xasprintf("rm -rf '%s'", dir);
  CHECK_INT(system(cmd), 0);
  free(cmd);
  TEST_DONE();
}
