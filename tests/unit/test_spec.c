/* spec: structure, defaults, needs, pools, and every error's exact text. */
#include <stdlib.h>
#include <string.h>

#include "dagfile/spec.h"
#include "lib/clock.h"
#include "testlib.h"

/* Parses text that must fail; returns the diagnostics. */
static char *errors_of(const char *text) {
  diags d = {0};
  spec *s = NULL;
  int rc = spec_parse("dag.yaml", text, strlen(text), &s, &d);
  CHECK_INT(rc, DR_ESPEC);
  CHECK(d.n > 0);
  char *out = all_diags(&d);
  spec_free(s);
  diags_free(&d);
  return out;
}

static spec *parse_ok(const char *text) {
  diags d = {0};
  spec *s = NULL;
  int rc = spec_parse("dags/dag.yaml", text, strlen(text), &s, &d);
  CHECK_INT(rc, 0);
  if (d.n) {
    char *e = all_diags(&d);
    fprintf(stderr, "unexpected errors:\n%s", e);
    free(e);
  }
  diags_free(&d);
  return s;
}

static void test_valid(void) {
  spec *s = parse_ok("dag: pretrain\n"
                     "description: nightly run\n"
                     "max_parallel: 4\n"
                     "pools: {gpu: 1, cpu: 8}\n"
                     "params: {corpus: /data, vocab: 4096}\n"
                     "schedule: \"0 2 * * *\"\n"
                     "alerts: [{on: [failure], webhook: x}]\n"
                     "defaults:\n"
                     "  retries: 2\n"
                     "  retry_delay: 30s\n"
                     "  timeout: 2h\n"
                     "  pool: cpu\n"
                     "  retry_on: [75, 137]\n"
                     "  env: {A: from-defaults, B: b}\n"
                     "tasks:\n"
                     "  shard: {stage: shard, with: {shards: 8}}\n"
                     "  tokenize:\n"
                     "    stage: tokenize\n"
                     "    needs: shard\n"
                     "    env: {A: own, C: 3}\n"
                     "  train:\n"
                     "    stage: ./plugins/train.so\n"
                     "    needs: [tokenize, shard, tokenize]\n"
                     "    pool: gpu\n"
                     "    retries: 0\n"
                     "    timeout: 12h\n"
                     "    heartbeat_timeout: 90\n"
                     "    kill_grace: 1.5\n"
                     "    retry_backoff: 1.5\n"
                     "    retry_jitter: 0\n"
                     "    retry_max_delay: 10m\n"
                     "    trigger: all_done\n"
                     "    description: the big one\n");
  CHECK(s != NULL);
  if (!s)
    return;
  CHECK_STR(s->path, "dags/dag.yaml");
  CHECK_STR(s->dir, "dags");
  CHECK_STR(s->dag, "pretrain");
  CHECK_STR(s->description, "nightly run");
  CHECK_INT(s->max_parallel, 4);
  CHECK_INT(s->n_pools, 2);
  CHECK_STR(s->pools[1].name, "cpu");
  CHECK_INT(s->pools[1].size, 8);
  CHECK(s->params && s->params->n == 2);
  CHECK(s->schedule && s->alerts);
  CHECK_INT(s->n_tasks, 3);
  CHECK_INT(spec_task_find(s, "train"), 2);
  CHECK_INT(spec_task_find(s, "nope"), -1);

  const spec_task *t = &s->tasks[0];
  CHECK_STR(t->name, "shard");
  CHECK_STR(t->stage, "shard");
  CHECK_INT(t->stage_node->line, 16);
  CHECK_INT(t->n_needs, 0);
  CHECK_STR(ynode_get(t->with, "shards")->str, "8");
  /* From defaults. */
  CHECK_INT(t->retry.retries, 2);
  CHECK_NEAR(t->retry.delay_s, 30, 0);
  CHECK_NEAR(t->retry.backoff, 2, 0);
  CHECK_NEAR(t->retry.max_delay_s, 3600, 0);
  CHECK_NEAR(t->retry.jitter, 0.1, 0);
  CHECK_INT(t->retry.n_on, 2);
  CHECK_INT(t->retry.on[1], 137);
  CHECK_NEAR(t->timeout_s, 7200, 0);
  CHECK_NEAR(t->heartbeat_s, 0, 0);
  CHECK_NEAR(t->kill_grace_s, 10, 0);
  CHECK_INT(t->pool, 1);
  CHECK_INT(t->trigger, SPEC_TRIGGER_ALL_SUCCESS);
  CHECK(t->description == NULL);
  CHECK_INT(t->env->n, 2);

  t = &s->tasks[1];
  CHECK_INT(t->n_needs, 1);
  CHECK_INT(t->needs[0], 0);
  CHECK_INT(t->need_nodes[0]->line, 19);
  /* env: the task's own values over the defaults'. */
  CHECK_INT(t->env->n, 3);
  CHECK_STR(ynode_get(t->env, "A")->str, "own");
  CHECK_STR(ynode_get(t->env, "B")->str, "b");
  CHECK_STR(ynode_get(t->env, "C")->str, "3");

  t = &s->tasks[2];
  CHECK_STR(t->stage, "./plugins/train.so");
  CHECK_INT(t->n_needs, 2); /* the repeated need counts once */
  CHECK_INT(t->needs[0], 1);
  CHECK_INT(t->needs[1], 0);
  CHECK_INT(t->pool, 0);
  CHECK_INT(t->retry.retries, 0);
  CHECK_NEAR(t->timeout_s, 43200, 0);
  CHECK_NEAR(t->heartbeat_s, 90, 0);
  CHECK_NEAR(t->kill_grace_s, 1.5, 0);
  CHECK_NEAR(t->retry.backoff, 1.5, 0);
  CHECK_NEAR(t->retry.jitter, 0, 0);
  CHECK_NEAR(t->retry.max_delay_s, 600, 0);
  CHECK_INT(t->trigger, SPEC_TRIGGER_ALL_DONE);
  CHECK_STR(t->description, "the big one");
  spec_free(s);
  spec_free(NULL);
}

static void test_builtin_defaults(void) {
  spec *s = parse_ok("dag: d\ntasks:\n  a:\n    stage: exec\n");
  const spec_task *t = &s->tasks[0];
  CHECK_INT(t->retry.retries, 0);
  CHECK_NEAR(t->retry.delay_s, 10, 0);
  CHECK(t->retry.on == NULL);
  CHECK_NEAR(t->timeout_s, 0, 0);
  CHECK_INT(t->pool, (long long)SIZE_MAX);
  CHECK(t->with == NULL && t->env == NULL);
  CHECK(s->params == NULL);
  CHECK_INT(s->max_parallel, 0);
  spec_free(s);
}

static void test_unknown_keys(void) {
  char *e = errors_of("dag: d\n"
                      "tasks:\n"
                      "  a:\n"
                      "    retires: 3\n"
                      "    stage: exec\n"
                      "    colour: red\n"
                      "taks: {}\n"
                      "defaults: {timeuot: 1h, stage: exec}\n");
  CHECK_STR(e,
            "dag.yaml:7:1: error: unknown key 'taks' at the top level; did "
            "you mean 'tasks'?\n"
            "dag.yaml:8:12: error: unknown key 'timeuot' in defaults; did "
            "you mean 'timeout'?\n"
            "dag.yaml:8:25: error: 'stage' cannot be set in defaults, only in "
            "each task; defaults may set: retries, retry_delay, "
            "retry_backoff, retry_max_delay, retry_jitter, retry_on, "
            "timeout, heartbeat_timeout, kill_grace, pool, trigger, env, "
            "cache, world_size, launcher, hosts, rendezvous\n"
            "dag.yaml:4:5: error: unknown key 'retires' in task 'a'; did you "
            "mean 'retries'?\n"
            "dag.yaml:6:5: error: unknown key 'colour' in task 'a'; expected "
            "one of: stage, needs, with, description, outputs, branch, map, "
            "approval, retries, retry_delay, retry_backoff, retry_max_delay, "
            "retry_jitter, "
            "retry_on, timeout, heartbeat_timeout, kill_grace, pool, "
            "trigger, env, cache, world_size, launcher, hosts, rendezvous\n");
  free(e);
}

static void test_types(void) {
  char *e = errors_of("dag: d\n"
                      "max_parallel: 0\n"
                      "pools: {gpu: two}\n"
                      "tasks:\n"
                      "  a:\n"
                      "    stage: exec\n"
                      "    retries: three\n"
                      "    retry_backoff: 0.5\n"
                      "    retry_jitter: [1]\n"
                      "    retry_on: [0, 1, x]\n"
                      "    trigger: all_sucess\n"
                      "    with: [1, 2]\n"
                      "    needs: {a: 1}\n"
                      "    env: {A: [1], 9B: x}\n"
                      "    description: {}\n"
                      "  b: exec\n"
                      "  c:\n"
                      "    stage: [exec]\n");
  CHECK_STR(e,
            "dag.yaml:2:15: error: 'max_parallel': expected an integer from 1 "
            "to 1000000, found 0\n"
            "dag.yaml:3:14: error: 'gpu' in 'pools': expected a pool size (an "
            "integer from 1 to 1000000), found a string (\"two\")\n"
            "dag.yaml:7:14: error: 'retries' in task 'a': expected an integer "
            "from 0 to 1000000, found a string (\"three\")\n"
            "dag.yaml:8:20: error: 'retry_backoff' in task 'a': expected a "
            "number from 1 to 1000000, found 0.5\n"
            "dag.yaml:9:19: error: 'retry_jitter' in task 'a': expected a "
            "number from 0 to 1, found a list\n"
            "dag.yaml:10:16: error: 'retry_on' in task 'a': expected an exit "
            "code from 1 to 255, found 0\n"
            "dag.yaml:10:22: error: 'retry_on' in task 'a': expected an exit "
            "code from 1 to 255, found a string (\"x\")\n"
            "dag.yaml:11:14: error: 'trigger' in task 'a': unknown trigger "
            "rule \"all_sucess\" (did you mean 'all_success'?); the rules "
            "are: all_success, all_done, one_failed, one_success, "
            "none_failed, none_failed_min_one_success, all_failed, "
            "all_skipped, none_skipped\n"
            "dag.yaml:14:14: error: environment variable 'A' in task 'a': "
            "expected a string, found a list\n"
            "dag.yaml:14:19: error: invalid environment variable name '9B' in "
            "'env' in task 'a': use letters, digits and '_', not starting "
            "with a digit\n"
            "dag.yaml:12:11: error: 'with' in task 'a': expected a map of "
            "stage params, found a list\n"
            "dag.yaml:13:12: error: 'needs' in task 'a': expected a list of "
            "task names, found a map\n"
            "dag.yaml:15:18: error: 'description' in task 'a': expected a "
            "string, found a map\n"
            "dag.yaml:16:6: error: task 'b' must be a map of settings (stage: "
            "..., needs: ..., with: ...), found a string (\"exec\")\n"
            "dag.yaml:18:12: error: 'stage' in task 'c': expected a stage "
            "name (e.g. exec) or a path to a stage plugin (.so), found a "
            "list\n");
  free(e);
}

static void test_durations(void) {
  char *e = errors_of(
      "dag: d\n"
      "defaults: {retry_delay: soon}\n"
      "tasks:\n"
      "  a:\n"
      "    stage: exec\n"
      "    timeout: 2x\n"
      "    kill_grace: -1\n"
      "    heartbeat_timeout: 500ms\n"
      "    retry_max_delay: true\n"
      "  b: {stage: exec, timeout: 1e20, retry_delay: 400d}\n"
      "  c: {stage: exec, timeout: 1e400, retry_delay: 0x2}\n"
      "  d: {stage: exec, timeout: 1m1h, retry_delay: 1d1d}\n"
      "  e: {stage: exec, timeout: 1h30m, retry_delay: 1.5m30s500ms}\n");
  CHECK_STR(e,
            "dag.yaml:2:25: error: 'retry_delay' in defaults: \"soon\" is not "
            "a duration; expected a number of seconds, or numbers with units "
            "ms, s, m, h, d (e.g. 90, 500ms, 30s, 5m, 1h30m)\n"
            "dag.yaml:6:14: error: 'timeout' in task 'a': \"2x\" is not a "
            "duration; expected a number of seconds, or numbers with units "
            "ms, s, m, h, d (e.g. 90, 500ms, 30s, 5m, 1h30m)\n"
            "dag.yaml:7:17: error: 'kill_grace' in task 'a': a duration "
            "cannot be negative, found -1\n"
            "dag.yaml:8:24: error: 'heartbeat_timeout' in task 'a': expected "
            "0 (off) or at least 1.0s, found 500ms\n"
            "dag.yaml:9:22: error: 'retry_max_delay' in task 'a': expected a "
            "duration: a number of seconds, or numbers with units ms, s, m, "
            "h, d (e.g. 90, 500ms, 30s, 5m, 1h30m); found a boolean "
            "(true)\n"
            "dag.yaml:10:29: error: 'timeout' in task 'b': expected a "
            "duration from 0 to 365d, found 1e20\n"
            "dag.yaml:10:48: error: 'retry_delay' in task 'b': expected a "
            "duration from 0 to 365d, found 400d\n"
            "dag.yaml:11:29: error: 'timeout' in task 'c': expected a "
            "duration from 0 to 365d, found 1e400\n"
            "dag.yaml:11:49: error: 'retry_delay' in task 'c': \"0x2\" is not "
            "a duration; expected a number of seconds, or numbers with units "
            "ms, s, m, h, d (e.g. 90, 500ms, 30s, 5m, 1h30m)\n"
            "dag.yaml:12:29: error: 'timeout' in task 'd': \"1m1h\" is not a "
            "duration; expected a number of seconds, or numbers with units "
            "ms, s, m, h, d (e.g. 90, 500ms, 30s, 5m, 1h30m)\n"
            "dag.yaml:12:48: error: 'retry_delay' in task 'd': \"1d1d\" is not "
            "a duration; expected a number of seconds, or numbers with units "
            "ms, s, m, h, d (e.g. 90, 500ms, 30s, 5m, 1h30m)\n");
  free(e);
}

static void test_names_and_needs(void) {
  char *e = errors_of("dag: my dag\n"
                      "tasks:\n"
                      "  tokenize: {stage: exec}\n"
                      "  train:\n"
                      "    stage: exec\n"
                      "    needs: [tokenise, evaluate, [x]]\n"
                      "  tokenize:\n"
                      "    stage: exec\n"
                      "  bad.name: {stage: exec}\n"
                      "  nostage: {needs: train}\n"
                      "  t123456789t123456789t123456789t123456789t123456789"
                      "t123456789t123456789t123456789t123456789t123456789"
                      "t123456789t123456789t123456789: {stage: exec}\n");
  CHECK_STR(e,
            "dag.yaml:1:6: error: invalid DAG name 'my dag': use at most 128 "
            "letters, digits, '_', '-' and '.'\n"
            "dag.yaml:7:3: error: duplicate task name 'tokenize' (first "
            "defined at line 3)\n"
            "dag.yaml:9:3: error: invalid task name 'bad.name': use at most "
            "128 letters, digits, '_' and '-' (it is referred to as "
            "${tasks.NAME...} and names a directory)\n"

            "dag.yaml:10:3: error: task 'nostage' has no 'stage'; expected "
            "the name of a stage (e.g. stage: exec) or a path to a stage "
            "plugin, or 'approval' for a task that waits for a person\n"
            "dag.yaml:11:3: error: invalid task name "
            "'t123456789t123456789t123456789t123456789t123456789"
            "t123456789t123456789t123456789t123456789t123456789"
            "t123456789t123456789t123456789': use at most 128 letters, "
            "digits, '_' and '-' (it is referred to as ${tasks.NAME...} and "
            "names a directory)\n"
            "dag.yaml:6:13: error: task 'train' needs unknown task "
            "'tokenise'; did you mean 'tokenize'?\n"
            "dag.yaml:6:23: error: task 'train' needs unknown task "
            "'evaluate'\n"
            "dag.yaml:6:33: error: 'needs' in task 'train': expected a task "
            "name, found a list\n");
  free(e);
}

static void test_pools(void) {
  char *e = errors_of("dag: d\n"
                      "pools: {gpu: 1, cpu: 4}\n"
                      "defaults: {pool: cpus}\n"
                      "tasks:\n"
                      "  a: {stage: exec, pool: gpus}\n"
                      "  b: {stage: exec, pool: storage}\n"
                      "  c: {stage: exec}\n");
  CHECK_STR(
      e, "dag.yaml:3:18: error: unknown pool 'cpus' in defaults; did you "
         "mean 'cpu'?\n"
         "dag.yaml:5:26: error: unknown pool 'gpus' in task 'a'; did you "
         "mean 'gpu'?\n"
         "dag.yaml:6:26: error: unknown pool 'storage' in task 'b'; the pools "
         "are: gpu, cpu\n");
  free(e);
  e = errors_of("dag: d\ntasks:\n  a: {stage: exec, pool: gpu}\n");
  CHECK_STR(e, "dag.yaml:3:26: error: unknown pool 'gpu' in task 'a': no "
               "pools are defined (add them at the top level, e.g. pools: "
               "{gpu: 1})\n");
  free(e);
}

static void test_missing_and_duplicates(void) {
  char *e = errors_of("description: x\n"
                      "description: y\n");
  CHECK_STR(e,
            "dag.yaml:2:1: error: duplicate key 'description' at the top "
            "level (first set at line 1)\n"
            "dag.yaml:1:1: error: missing required key 'dag': the DAG's name "
            "(e.g. dag: pretrain)\n"
            "dag.yaml:1:1: error: missing required key 'tasks': a map of task "
            "names to tasks (e.g. tasks: {train: {stage: train}})\n");
  free(e);
  e = errors_of("dag: d\ntasks: {}\n");
  CHECK_STR(e, "dag.yaml:2:8: error: 'tasks' is empty; expected at least one "
               "task\n");
  free(e);
  e = errors_of("- a\n- b\n");
  CHECK_STR(e, "dag.yaml:1:1: error: expected a map at the top level (dag: "
               "NAME, tasks: ...), found a list\n");
  free(e);
  e = errors_of("dag: d\n"
                "tasks:\n"
                "  a:\n"
                "    stage: exec\n"
                "    timeout: 1h\n"
                "    timeout: 2h\n");
  CHECK_STR(e, "dag.yaml:6:5: error: duplicate key 'timeout' in task 'a' "
               "(first set at line 5)\n");
  free(e);
  /* A stage param set twice, in a flow map too: YAML would keep one. */
  e = errors_of("dag: d\n"
                "tasks:\n"
                "  a: {stage: exec, with: {steps: 20, steps: 100000}}\n");
  CHECK_STR(e, "dag.yaml:3:38: error: duplicate key 'steps' in 'with' in "
               "task 'a' (first set at line 3)\n");
  free(e);
}

static void test_syntax_error_no_spec(void) {
  diags d = {0};
  spec *s = (spec *)1;
  CHECK_INT(spec_parse("dag.yaml", "a: [", 4, &s, &d), DR_ESPEC);
  CHECK(s == NULL);
  CHECK_INT(d.n, 1);
  diags_free(&d);
  CHECK_INT(spec_load("/nonexistent.yaml", &s, &d), DR_ENOENT);
  CHECK(s == NULL);
  diags_free(&d);
}

static void test_partial_spec_kept(void) {
  /* With errors, the spec is still returned so that check can go on. */
  diags d = {0};
  spec *s = NULL;
  const char *text = "dag: d\ntasks:\n  a: {stage: exec, retries: x}\n"
                     "  b: {stage: exec, needs: [a]}\n";
  CHECK_INT(spec_parse("dag.yaml", text, strlen(text), &s, &d), DR_ESPEC);
  CHECK(s != NULL);
  CHECK_INT(s->n_tasks, 2);
  CHECK_INT(s->tasks[1].n_needs, 1);
  spec_free(s);
  diags_free(&d);
}

static void test_load_file(void) {
  diags d = {0};
  spec *s = NULL;
  CHECK_INT(
      spec_load(TEST_SOURCE_DIR "/tests/unit/fixtures/small.yaml", &s, &d), 0);
  CHECK_STR(s->dag, "small");
  CHECK_STR(s->dir, TEST_SOURCE_DIR "/tests/unit/fixtures");
  spec_free(s);
  diags_free(&d);
}

/* 100,000 tasks in a chain with a fan-in every 100: must be quick and
 * linear (a quadratic step would take minutes here). */
static void test_scale(void) {
  enum { N = 100000 };
  sbuf b = {0};
  sbuf_puts(&b, "dag: big\ndefaults: {retries: 1}\ntasks:\n");
  for (int i = 0; i < N; i++) {
    sbuf_printf(&b, "  t%d:\n    stage: exec\n", i);
    if (i > 0 && i % 100 == 0)
      sbuf_printf(&b, "    needs: [t%d, t%d]\n", i - 1, i / 2);
    else if (i > 0)
      sbuf_printf(&b, "    needs: [t%d]\n", i - 1);
    sbuf_printf(&b, "    with: {cmd: \"echo %d\"}\n", i);
  }
  double t0 = clock_monotonic();
  diags d = {0};
  spec *s = NULL;
  int rc = spec_parse("big.yaml", b.s, b.n, &s, &d);
  double dt = clock_monotonic() - t0;
  CHECK_INT(rc, 0);
  CHECK_INT(d.n, 0);
  CHECK_INT(s->n_tasks, N);
  CHECK_INT(s->tasks[N - 1].n_needs, 1);
  CHECK_INT(s->tasks[200].n_needs, 2);
  CHECK_INT(s->tasks[200].needs[1], 100);
  fprintf(stderr, "spec_parse of %d tasks: %.3fs\n", N, dt);
  CHECK(dt < 5.0);
  spec_free(s);
  diags_free(&d);
  sbuf_free(&b);
}

static void test_closest(void) {
  const char *const keys[] = {"retries", "steps", "timeout", "cwd", NULL};
  CHECK_STR(closest_match("retires", keys), "retries"); /* a swap */
  CHECK_STR(closest_match("stpes", keys), "steps");     /* a swap, short */
  CHECK_STR(closest_match("timeuot", keys), "timeout");
  CHECK_STR(closest_match("tiemout", keys), "timeout");
  CHECK_STR(closest_match("cdw", keys), "cwd");
  CHECK(closest_match("colour", keys) == NULL);
  CHECK(closest_match("cwdir", keys) == NULL); /* two edits on 5 letters */
  const char *const none[] = {NULL};
  CHECK(closest_match("x", none) == NULL);
}

/* Every trigger rule by name; `branch` is a bool, and a branch task needs
 * a downstream task to choose from. */
static void test_trigger_and_branch(void) {
  static const char *const rules[] = {
      "all_success", "all_done",    "one_failed",
      "one_success", "none_failed", "none_failed_min_one_success",
      "all_failed",  "all_skipped", "none_skipped"};
  for (int i = 0; i < (int)(sizeof rules / sizeof rules[0]); i++) {
    char *text = xasprintf("dag: d\n"
                           "tasks:\n"
                           "  a: {stage: exec}\n"
                           "  b: {stage: exec, needs: [a], trigger: %s}\n",
                           rules[i]);
    spec *s = parse_ok(text);
    CHECK_INT((int)s->tasks[1].trigger, i);
    CHECK_STR(spec_trigger_name(s->tasks[1].trigger), rules[i]);
    spec_free(s);
    free(text);
  }
  spec *s = parse_ok("dag: d\n"
                     "tasks:\n"
                     "  gate: {stage: exec, branch: true, outputs: [x]}\n"
                     "  b: {stage: exec, needs: [gate]}\n");
  CHECK_INT(s->tasks[0].branch, 1);
  CHECK_INT(s->tasks[1].branch, 0);
  /* `branch` is an output a branch task always gives. */
  CHECK_INT(spec_task_may_output(&s->tasks[0], "branch", 6), 1);
  CHECK_INT(spec_task_may_output(&s->tasks[0], "y", 1), 0);
  spec_free(s);
  char *e = errors_of("dag: d\n"
                      "tasks:\n"
                      "  gate: {stage: exec, branch: yes please}\n"
                      "  lone: {stage: exec, branch: true}\n"
                      "  c: {stage: exec, needs: [gate], trigger: one_fail}\n"
                      "  d: {stage: exec, branch: true, trigger: [x]}\n");
  CHECK_STR(e,
            "dag.yaml:3:31: error: 'branch' in task 'gate': expected true "
            "or false, found a string (\"yes please\")\n"
            "dag.yaml:5:44: error: 'trigger' in task 'c': unknown trigger "
            "rule \"one_fail\" (did you mean 'one_failed'?); the rules are: "
            "all_success, all_done, one_failed, one_success, none_failed, "
            "none_failed_min_one_success, all_failed, all_skipped, "
            "none_skipped\n"
            "dag.yaml:6:43: error: 'trigger' in task 'd': expected a trigger "
            "rule, found a list\n"
            "dag.yaml:4:31: error: 'branch' in task 'lone': a branch task "
            "chooses which of its downstream tasks run, and no task needs "
            "'lone'\n"
            "dag.yaml:6:28: error: 'branch' in task 'd': a branch task "
            "chooses which of its downstream tasks run, and no task needs "
            "'d'\n");
  free(e);
}

/* Which params are secret, and their values hidden in messages. */
static void test_secret_params(void) {
  spec *s = parse_ok("dag: d\nparams: {tok: x, url: y, tokens: z, n: 1}\n"
                     "secrets: [tok]\n"
                     "alerts: [{on: failure, webhook: "
                     "'https://h/${params.url}?q=${params.tok}'}]\n"
                     "tasks: {a: {stage: noop}}\n");
  CHECK(spec_param_secret(s, "tok"));
  CHECK(spec_param_secret(s, "url"));     /* in a webhook */
  CHECK(!spec_param_secret(s, "tokens")); /* not ${params.tok}'s prefix */
  CHECK(!spec_param_secret(s, "n"));
  spec_free(s);
  char err[64];
  /* Each quoted occurrence (the name's too, being the same text), not a
   * longer quoted text that holds it. */
  spec_hide_value("param 'tok': 'tok' is not 'tok2'", "tok", err, sizeof err);
  CHECK_STR(err, "param '***': '***' is not 'tok2'");
  spec_hide_value("param 'p': 'a'b' is bad", "a'b", err, sizeof err);
  CHECK_STR(err, "param 'p': '***' is bad");
  /* The message is cut after the value is hidden, not before. */
  spec_hide_value(
      "param 'p': 'SECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRET' "
      "is bad",
      "SECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRETSECRET", err, 16);
  CHECK_STR(err, "param 'p': '***");
  spec_hide_value("param 'p': '' is bad", "", err, sizeof err);
  CHECK_STR(err, "param 'p': '' is bad");
}

int main(void) {
  test_closest();
  test_secret_params();
  test_valid();
  test_builtin_defaults();
  test_unknown_keys();
  test_types();
  test_durations();
  test_names_and_needs();
  test_pools();
  test_missing_and_duplicates();
  test_syntax_error_no_spec();
  test_partial_spec_kept();
  test_load_file();
  test_scale();
  test_trigger_and_branch();
  TEST_DONE();
}
