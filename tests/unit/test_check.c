/* check: cycles, stages, params against schemas and templates, all
 * reported at once; a large DAG checked quickly. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/check.h"
#include "lib/clock.h"
#include "testlib.h"

static int starts_with(const char *s, const char *p) {
  return s && strncmp(s, p, strlen(p)) == 0;
}

static void test_all_errors_at_once(void) {
  sbuf y = {0};
  sbuf_printf(&y,
              "dag: broken\n"
              "params:\n"
              "  vocab: 4096\n"
              "  home: ${env:DAGRUN_TEST_UNSET_VAR}\n"
              "tasks:\n"
              "  prepare:\n"
              "    stage: exec\n"
              "    with:\n"
              "      command: [echo, \"${params.vocab}\"]\n"
              "      shell: maybe\n"
              "      cwdir: /tmp\n"
              "  train:\n"
              "    stage: exce\n"
              "    needs: [prepare]\n"
              "    with:\n"
              "      steps: ${params.vocb}\n"
              "  report:\n"
              "    stage: exec\n"
              "    needs: [prepare]\n"
              "    env:\n"
              "      LOSS: ${tasks.train.outputs.loss}\n"
              "    with: {command: [true]}\n"
              "  lonely:\n"
              "    stage: exec\n"
              "  old:\n"
              "    stage: %s/abi2.so\n"
              "    with: {x: \"${run.dte}\"}\n"
              "  old2: {stage: %s/abi2.so}\n"
              "  a:\n"
              "    stage: exec\n"
              "    needs: [c]\n"
              "    with: {command: [\"true\"]}\n"
              "  b: {stage: exec, needs: [a], with: {command: [\"true\"]}}\n"
              "  c: {stage: exec, needs: [b], with: {command: [\"true\"]}}\n",
              TEST_PLUGIN_DIR, TEST_PLUGIN_DIR);
  diags d = {0};
  spec *s;
  CHECK_INT(spec_parse("dag.yaml", y.s, y.n, &s, &d), 0);
  checked *c = NULL;
  CHECK_INT(check_spec(s, &c, &d), DR_ESPEC);
  CHECK(c != NULL);
  CHECK_INT(d.n, 10);
  char *got = all_diags(&d);
  fprintf(stderr, "--- check output:\n%s---\n", got);
  free(got);
  char *m[12] = {0};
  for (size_t i = 0; i < d.n && i < 12; i++)
    m[i] = diag_format(&d.v[i]);
  /* Cycles first, then params, then each task in order. */
  CHECK_STR(m[0], "dag.yaml:31:13: error: dependency cycle: a -> b -> c -> a "
                  "(each task needs the one before it)");
  CHECK_STR(m[1], "dag.yaml:4:9: error: environment variable "
                  "'DAGRUN_TEST_UNSET_VAR' is not set "
                  "(${env:DAGRUN_TEST_UNSET_VAR}); set it, or give a default: "
                  "${env:DAGRUN_TEST_UNSET_VAR:-VALUE}");
  CHECK_STR(m[2], "dag.yaml:10:14: error: param 'shell' of stage 'exec' in "
                  "task 'prepare': expected true or false, found a string "
                  "(\"maybe\")");
  CHECK_STR(m[3], "dag.yaml:11:7: error: unknown param 'cwdir' for stage "
                  "'exec' in task 'prepare'; it takes: command, shell, cwd, "
                  "env");
  /* The unknown stage names the directories searched; those depend on
   * the build tree, so only the start and the first directory are fixed
   * here (the rest is the loader's, tested in test_loader). */
  CHECK(starts_with(m[4], "dag.yaml:13:12: error: task 'train': unknown "
                          "stage 'exce': no exce.so in " TEST_PLUGIN_DIR));
  /* With the stage unknown, its params cannot be checked, but their
   * templates still are. */
  CHECK_STR(m[5], "dag.yaml:16:14: error: unknown param 'vocb' in "
                  "${params.vocb}; did you mean 'vocab'?");
  CHECK_STR(m[6], "dag.yaml:21:13: error: task 'report' refers to task "
                  "'train' in ${tasks.train.outputs.loss}, but 'train' is not "
                  "upstream of 'report'; add 'train' to the needs of 'report' "
                  "(directly or through a task it needs)");
  CHECK_STR(m[7], "dag.yaml:24:12: error: task 'lonely' is missing required "
                  "param 'command' of stage 'exec' (list: Program and "
                  "arguments, e.g. [python, train.py, --lr, \"3e-4\"]; one "
                  "string when shell is true); add it under 'with'");
  /* A plugin that cannot load is reported once, not per task. */
  CHECK(starts_with(m[8], "dag.yaml:26:12: error: cannot load stage '"));
  CHECK(strstr(m[8] ? m[8] : "", "abi2.so") != NULL);
  CHECK(strstr(m[8] ? m[8] : "", "ABI") != NULL);
  CHECK_STR(m[9], "dag.yaml:27:16: error: unknown run field 'dte' in "
                  "${run.dte}; did you mean ${run.date}?");
  for (size_t i = 0; i < 12; i++)
    free(m[i]);

  /* Each distinct stage file opened once. */
  CHECK_INT(c->n_plugins, 1);
  CHECK_INT(c->task_plugin[0], 0);
  CHECK_INT(c->task_plugin[1], (long long)SIZE_MAX);
  CHECK_INT(c->task_plugin[4], (long long)SIZE_MAX);
  CHECK_INT(c->task_plugin[6], 0);
  checked_free(c);
  checked_free(NULL);
  spec_free(s);
  diags_free(&d);
  sbuf_free(&y);
}

static void test_ok(void) {
  diags d = {0};
  spec *s;
  unsetenv("DAGRUN_TEST_UNSET_VAR");
  CHECK_INT(
      spec_load(TEST_SOURCE_DIR "/tests/unit/fixtures/check/ok.yaml", &s, &d),
      0);
  CHECK(s != NULL);
  if (!s)
    return;
  checked *c = NULL;
  int rc = check_spec(s, &c, &d);
  CHECK_INT(rc, 0);
  if (d.n) {
    char *e = all_diags(&d);
    fprintf(stderr, "unexpected:\n%s", e);
    free(e);
  }
  CHECK_INT(c->n_plugins, 2);
  CHECK_INT(c->task_plugin[0], 0);
  CHECK_INT(c->task_plugin[1], 0);
  CHECK_INT(c->task_plugin[2], 1);
  CHECK_INT(c->task_plugin[3], 1);
  CHECK_STR(c->plugins[1]->stage->name, "echo_params");
  char *p = cJSON_PrintUnformatted(c->params);
  CHECK_STR(p, "{\"words\":3,\"greeting\":\"hello-world\"}");
  free(p);
  checked_free(c);
  spec_free(s);
  diags_free(&d);
}

static void test_repo_dags(void) {
  /* The DAGs shipped with dagrun must pass their own check. */
  const char *files[] = {TEST_SOURCE_DIR "/dags/smoke.yaml"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    diags d = {0};
    spec *s;
    CHECK_INT(spec_load(files[i], &s, &d), 0);
    checked *c = NULL;
    CHECK(s != NULL);
    if (s)
      CHECK_INT(check_spec(s, &c, &d), 0);
    if (d.n) {
      char *e = all_diags(&d);
      fprintf(stderr, "%s:\n%s", files[i], e);
      free(e);
    }
    checked_free(c);
    spec_free(s);
    diags_free(&d);
  }
}

/* `dagrun check` (check_load) reports the alerts' errors along with the
 * others: check.c asks dagfile/alertspec.c, and a DAG whose only problem is
 * an alert does not pass. */
static void test_load_reports_alerts(void) {
  char path[] = "/tmp/test_check_alerts_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0)
    return;
  const char *y = "dag: a\n"
                  "alerts:\n"
                  "  - {on: [deadline], webhook: 'ftp://h/tok', deadline: 0}\n"
                  "tasks:\n"
                  "  t: {stage: exec, with: {command: [\"true\"]}}\n";
  CHECK_INT(write(fd, y, strlen(y)), (long long)strlen(y));
  close(fd);
  diags d = {0};
  spec *s = NULL;
  checked *c = NULL;
  CHECK_INT(check_load(path, &s, &c, &d), DR_ESPEC);
  CHECK(s == NULL && c == NULL);
  char *got = all_diags(&d);
  CHECK(strstr(got, ":3:56: error: alert 1: 'deadline' expects a positive "
                    "duration") != NULL);
  CHECK(strstr(got, ":3:31: error: alert 1: 'webhook' must resolve to an "
                    "http:// or https:// URL") != NULL);
  CHECK(strstr(got, "tok") == NULL);
  CHECK_INT(d.n, 2);
  free(got);
  diags_free(&d);
  unlink(path);
}

/* Peak resident memory in MiB, from /proc. */
static long peak_rss_mib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "VmHWM:", 6) == 0)
      kb = strtol(line + 6, NULL, 10);
  if (f)
    fclose(f);
  return kb < 0 ? -1 : kb / 1024;
}

/* 100,000 tasks: a chain with fan-ins, each referencing the first task's
 * directory and a param. Quadratic work anywhere would take minutes. */
static void test_scale(void) {
  enum { N = 100000 };
  sbuf y = {0};
  sbuf_puts(&y, "dag: big\nparams: {n: 3}\ndefaults: {retries: 1}\n"
                "tasks:\n  t0: {stage: exec, with: {command: [\"true\"]}}\n");
  for (int i = 1; i < N; i++) {
    sbuf_printf(&y, "  t%d:\n    stage: exec\n    needs: [t%d", i, i - 1);
    if (i % 100 == 0)
      sbuf_printf(&y, ", t%d", i / 2);
    sbuf_printf(&y,
                "]\n    with:\n      command: [cat, "
                "\"${tasks.t0.dir}/x\", \"${params.n}\", \"%d\"]\n",
                i);
  }
  double t0 = clock_monotonic();
  diags d = {0};
  spec *s;
  CHECK_INT(spec_parse("big.yaml", y.s, y.n, &s, &d), 0);
  sbuf_free(&y);
  double t1 = clock_monotonic();
  checked *c = NULL;
  CHECK_INT(check_spec(s, &c, &d), 0);
  double t2 = clock_monotonic();
  CHECK_INT(d.n, 0);
  CHECK_INT(c->n_plugins, 1);
  fprintf(stderr, "%d tasks: parse %.2fs, check %.2fs, peak RSS %ld MiB\n", N,
          t1 - t0, t2 - t1, peak_rss_mib());
  /* Generous for sanitizer builds; linear code takes about a second. */
  CHECK(t2 - t0 < 30.0);
  checked_free(c);
  spec_free(s);
  diags_free(&d);
}

/* A stage's own check (plugin.h's check, ABI 1.2; tests/plugins/
 * checked.c): run for each task whose params are otherwise right, in a
 * helper, its refusals reported at the param it names (or world_size,
 * or the stage); a value of run time left to the start; a check that
 * crashes or hangs is an error of its stage. 1.1 s. */
static void test_stage_check(void) {
  const char *y = "dag: hooked\n"
                  "tasks:\n"
                  "  up: {stage: exec, with: {command: [\"true\"]}}\n"
                  "  ok: {stage: checked, world_size: 4, with: {n: 2}}\n"
                  "  bad:\n"
                  "    stage: checked\n"
                  "    world_size: 3\n"
                  "    with: {n: 2}\n"
                  "  ws: {stage: checked, world_size: 2, with: {n: 7}}\n"
                  "  whole: {stage: checked, with: {n: 9}}\n"
                  "  later:\n"
                  "    stage: checked\n"
                  "    needs: [up]\n"
                  "    with: {n: \"${tasks.up.outputs.n}\"}\n"
                  "  typo: {stage: checked, world_size: 3, with: {n: x}}\n";
  diags d = {0};
  spec *s;
  CHECK_INT(spec_parse("dag.yaml", y, strlen(y), &s, &d), 0);
  checked *c = NULL;
  CHECK_INT(check_spec(s, &c, &d), DR_ESPEC);
  CHECK_INT(d.n, 4);
  char *m[4] = {0};
  for (size_t i = 0; i < d.n && i < 4; i++)
    m[i] = diag_format(&d.v[i]);
  CHECK_STR(m[0], "dag.yaml:15:51: error: param 'n' of stage 'checked' in "
                  "task 'typo': expected an integer, found a string (\"x\")");
  CHECK_STR(m[1], "dag.yaml:8:15: error: task 'bad': n 2 does not divide "
                  "world_size 3");
  CHECK_STR(m[2], "dag.yaml:9:36: error: task 'ws': n 7 is refused "
                  "(world_size 2)");
  CHECK_STR(m[3], "dag.yaml:10:18: error: task 'whole': n 9 is refused "
                  "(world_size 1)");
  for (size_t i = 0; i < 4; i++)
    free(m[i]);
  checked_free(c);
  spec_free(s);
  diags_free(&d);

  const char *crash = "dag: crash\n"
                      "tasks:\n"
                      "  a: {stage: checked, with: {crash: true}}\n";
  diags d2 = {0};
  CHECK_INT(spec_parse("crash.yaml", crash, strlen(crash), &s, &d2), 0);
  CHECK_INT(check_spec(s, &c, &d2), DR_ESPEC);
  CHECK_INT(d2.n, 1);
  char *got = d2.n ? diag_format(&d2.v[0]) : NULL;
  CHECK(starts_with(got, "crash.yaml:3:14: error: stage 'checked': "));
  CHECK(got && strstr(got, "checked.so: its check crashed (signal 11)"));
  free(got);
  checked_free(c);
  spec_free(s);
  diags_free(&d2);

  /* A check that hangs is killed at the describe limit. */
  const char *hang = "dag: hang\n"
                     "tasks:\n"
                     "  a: {stage: checked, with: {hang: true}}\n";
  setenv("DAGRUN_DESCRIBE_TIMEOUT", "1", 1);
  diags d3 = {0};
  CHECK_INT(spec_parse("hang.yaml", hang, strlen(hang), &s, &d3), 0);
  double t0 = clock_monotonic();
  CHECK_INT(check_spec(s, &c, &d3), DR_ESPEC);
  CHECK(clock_monotonic() - t0 < 5);
  unsetenv("DAGRUN_DESCRIBE_TIMEOUT");
  CHECK_INT(d3.n, 1);
  got = d3.n ? diag_format(&d3.v[0]) : NULL;
  CHECK(got && strstr(got, "checked.so: its check did not answer within 1 s "
                           "(DAGRUN_DESCRIBE_TIMEOUT sets the limit)"));
  free(got);
  checked_free(c);
  spec_free(s);
  diags_free(&d3);
}

int main(void) {
  setenv("DAGRUN_PLUGIN_PATH", TEST_PLUGIN_DIR, 1);
  test_all_errors_at_once();
  test_ok();
  test_repo_dags();
  test_load_reports_alerts();
  test_scale();
  test_stage_check();
  TEST_DONE();
}
