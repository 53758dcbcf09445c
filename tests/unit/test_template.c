/* template: every reference form, types, escapes, errors and deferral. */
#include <stdlib.h>
#include <string.h>

#include "dagfile/dag.h"
#include "dagfile/template.h"
#include "testlib.h"

static const char dag_text[] =
    "dag: pretrain\n"
    "params:\n"
    "  corpus: /data/${env:TEST_CORPUS_SUBDIR:-fortunes}\n"
    "  vocab: 4096\n"
    "  lr: 0.02\n"
    "  layers: [a, b]\n"
    "  tag: run-${run.id}\n"
    "tasks:\n"
    "  shard: {stage: shard}\n"
    "  tokenize: {stage: tokenize, needs: [shard]}\n"
    "  train: {stage: train, needs: [tokenize]}\n"
    "  eval: {stage: eval, needs: [shard]}\n"
    "values:\n"
    "  whole: ${params.vocab}\n"
    "  quoted: \"${params.vocab}\"\n"
    "  list: ${params.layers}\n"
    "  mixed: data/${params.corpus}/v${params.vocab}-lr${params.lr}\n"
    "  spaced: ${ params.vocab }\n"
    "  escaped: $${params.vocab} costs $$5 and $5\n"
    "  plain: [1, 2.5, true, ~, text, \"7\"]\n"
    "  env_set: ${env:TEST_TMPL_SET}\n"
    "  env_default: ${env:TEST_TMPL_UNSET:-fallback}\n"
    "  env_empty: ${env:TEST_TMPL_EMPTY:-was-empty}\n"
    "  run: ${run.dag}/${run.id}/${run.date}\n"
    "  upstream: ${tasks.shard.outputs.n_shards}\n"
    "  updir: ${tasks.shard.dir}/x\n"
    "  direct: ${tasks.tokenize.outputs.vocab_file}\n"
    "  nested: {a: [x, \"${params.lr}\"]}\n";

static spec *S;

/* The "values" map is not a spec key, so the test parses the text a second
 * time as plain YAML to get at it. */
static ynode *ROOT;
static const ynode *V;

static const ynode *val(const char *key) { return ynode_get(V, key); }

static char *json(const cJSON *j) {
  return j ? cJSON_PrintUnformatted(j) : strdup("(null)");
}

static void setup(void) {
  diags d = {0};
  /* spec_parse rejects the unknown key "values": give it what precedes. */
  const char *cut = strstr(dag_text, "values:");
  CHECK_INT(spec_parse("dag.yaml", dag_text, (size_t)(cut - dag_text), &S, &d),
            0);
  CHECK_INT(ydoc_parse("dag.yaml", dag_text, strlen(dag_text), &ROOT, &d), 0);
  V = ynode_get(ROOT, "values");
  CHECK_INT(d.n, 0);
  diags_free(&d);
  setenv("TEST_TMPL_SET", "from-env", 1);
  setenv("TEST_TMPL_EMPTY", "", 1);
  unsetenv("TEST_TMPL_UNSET");
  unsetenv("TEST_CORPUS_SUBDIR");
}

/* Resolves values.key for task (SIZE_MAX: DAG level) and returns the JSON
 * text, or "DEFERRED", or the diagnostics. */
static char *resolve(const tmpl_env *e, size_t task, const char *key) {
  diags d = {0};
  cJSON *out = NULL;
  int rc = tmpl_resolve(e, task, val(key), &out, &d);
  char *r;
  if (rc == 0) {
    CHECK_INT(d.n, 0);
    r = json(out);
  } else if (rc == DR_EDEFERRED) {
    CHECK(out == NULL);
    CHECK_INT(d.n, 0);
    r = strdup("DEFERRED");
  } else {
    CHECK_INT(rc, DR_ETEMPLATE);
    CHECK(out == NULL);
    r = all_diags(&d);
  }
  cJSON_Delete(out);
  diags_free(&d);
  return r;
}

#define EXPECT(e, task, key, want)                                             \
  do {                                                                         \
    char *got_ = resolve(e, task, key);                                        \
    CHECK_STR(got_, want);                                                     \
    free(got_);                                                                \
  } while (0)

/* Run-time lookups. */
static const char *task_dir(void *ud, size_t task) {
  (void)ud;
  static char buf[64];
  snprintf(buf, sizeof(buf), "/runs/pretrain/r1/%s/out", S->tasks[task].name);
  return buf;
}

static cJSON *OUTPUTS;
static const cJSON *task_outputs(void *ud, size_t task) {
  (void)ud;
  return cJSON_GetObjectItemCaseSensitive(OUTPUTS, S->tasks[task].name);
}

static void test_params_resolution(void) {
  diags d = {0};
  tmpl_env e = {.s = S};
  cJSON *params = NULL;
  /* Check time: tag uses ${run.id} and is left out. */
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), 0);
  char *j = json(params);
  CHECK_STR(j, "{\"corpus\":\"/data/fortunes\",\"vocab\":4096,\"lr\":0.02,"
               "\"layers\":[\"a\",\"b\"]}");
  free(j);
  cJSON_Delete(params);
  /* Run time. */
  e.run_id = "r1";
  e.run_date = "2026-11-21";
  setenv("TEST_CORPUS_SUBDIR", "wiki", 1);
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), 0);
  CHECK_STR(cJSON_GetObjectItem(params, "tag")->valuestring, "run-r1");
  CHECK_STR(cJSON_GetObjectItem(params, "corpus")->valuestring, "/data/wiki");
  cJSON_Delete(params);
  unsetenv("TEST_CORPUS_SUBDIR");
  CHECK_INT(d.n, 0);
  diags_free(&d);
}

static void test_params_errors(void) {
  const char *text = "dag: d\n"
                     "params:\n"
                     "  a: 1\n"
                     "  b: ${params.a}\n"
                     "  c: x${tasks.t.dir}\n"
                     "  d: ${env:TEST_TMPL_UNSET}\n"
                     "  e: ok\n"
                     "tasks: {t: {stage: x}}\n";
  diags d = {0};
  spec *s;
  CHECK_INT(spec_parse("p.yaml", text, strlen(text), &s, &d), 0);
  tmpl_env e = {.s = s};
  cJSON *params = NULL;
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), DR_ETEMPLATE);
  char *errs = all_diags(&d);
  CHECK_STR(errs,
            "p.yaml:4:6: error: ${params.a} cannot be used in params: a param "
            "may use only ${env:...} and ${run...}\n"
            "p.yaml:5:7: error: ${tasks.t.dir} cannot be used in params: a "
            "param may use only ${env:...} and ${run...}\n"
            "p.yaml:6:6: error: environment variable 'TEST_TMPL_UNSET' is not "
            "set (${env:TEST_TMPL_UNSET}); set it, or give a default: "
            "${env:TEST_TMPL_UNSET:-VALUE}\n");
  free(errs);
  /* What did resolve is kept, so later checks do not cascade. */
  char *j = json(params);
  CHECK_STR(j, "{\"a\":1,\"e\":\"ok\"}");
  free(j);
  cJSON_Delete(params);
  diags_free(&d);
  spec_free(s);
}

static void test_values_check_time(void) {
  diags d = {0};
  tmpl_env e = {.s = S};
  cJSON *params;
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), 0);
  e.params = params;
  size_t train = 2;
  EXPECT(&e, train, "whole", "4096");
  EXPECT(&e, train, "quoted", "4096");
  EXPECT(&e, train, "list", "[\"a\",\"b\"]");
  EXPECT(&e, train, "mixed", "\"data//data/fortunes/v4096-lr0.02\"");
  EXPECT(&e, train, "spaced", "4096");
  EXPECT(&e, train, "escaped", "\"${params.vocab} costs $$5 and $5\"");
  EXPECT(&e, train, "plain", "[1,2.5,true,null,\"text\",\"7\"]");
  EXPECT(&e, train, "env_set", "\"from-env\"");
  EXPECT(&e, train, "env_default", "\"fallback\"");
  EXPECT(&e, train, "env_empty", "\"was-empty\"");
  EXPECT(&e, train, "nested", "{\"a\":[\"x\",0.02]}");
  /* Valid but known only at run time. */
  EXPECT(&e, train, "run", "DEFERRED");
  EXPECT(&e, train, "upstream", "DEFERRED"); /* transitive: shard */
  EXPECT(&e, train, "direct", "DEFERRED");
  EXPECT(&e, train, "updir", "DEFERRED");
  /* eval needs shard only: tokenize is not upstream of it. */
  size_t eval = 3;
  EXPECT(&e, eval, "upstream", "DEFERRED");
  EXPECT(&e, eval, "direct",
         "dag.yaml:27:11: error: task 'eval' refers to task 'tokenize' in "
         "${tasks.tokenize.outputs.vocab_file}, but 'tokenize' is not "
         "upstream of 'eval'; add 'tokenize' to the needs of 'eval' "
         "(directly or through a task it needs)\n");
  /* shard is upstream of nobody's upstream: itself. */
  EXPECT(&e, 0, "updir",
         "dag.yaml:26:10: error: task 'shard' refers to itself in "
         "${tasks.shard.dir}; a task can use only the outputs of tasks it "
         "needs\n");
  /* DAG-level values cannot use tasks. */
  EXPECT(&e, SIZE_MAX, "updir",
         "dag.yaml:26:10: error: ${tasks.shard.dir} can be used only in a "
         "task's values\n");
  /* The answers were cached in the spec, and stay the same. */
  CHECK(S->reach != NULL);
  EXPECT(&e, train, "upstream", "DEFERRED");
  EXPECT(&e, eval, "direct",
         "dag.yaml:27:11: error: task 'eval' refers to task 'tokenize' in "
         "${tasks.tokenize.outputs.vocab_file}, but 'tokenize' is not "
         "upstream of 'eval'; add 'tokenize' to the needs of 'eval' "
         "(directly or through a task it needs)\n");
  cJSON_Delete(params);
  diags_free(&d);
}

static void test_values_run_time(void) {
  diags d = {0};
  tmpl_env e = {.s = S, .run_id = "r1", .run_date = "2026-11-21"};
  cJSON *params;
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), 0);
  e.params = params;
  e.task_dir = task_dir;
  e.task_outputs = task_outputs;
  OUTPUTS = cJSON_Parse("{\"shard\":{\"n_shards\":\"8\"}}");
  EXPECT(&e, 2, "run", "\"pretrain/r1/2026-11-21\"");
  EXPECT(&e, 2, "upstream", "\"8\"");
  EXPECT(&e, 2, "updir", "\"/runs/pretrain/r1/shard/out/x\"");
  /* tokenize has not produced its output. */
  EXPECT(&e, 2, "direct",
         "dag.yaml:27:11: error: task 'tokenize' produced no output "
         "'vocab_file' (${tasks.tokenize.outputs.vocab_file})\n");
  cJSON_Delete(OUTPUTS);
  cJSON_Delete(params);
  diags_free(&d);
}

/* Errors in values parsed on their own, with exact columns. */
static char *errors_in(const char *yaml, size_t task) {
  diags d = {0};
  ynode *root;
  CHECK_INT(ydoc_parse("v.yaml", yaml, strlen(yaml), &root, &d), 0);
  tmpl_env e = {.s = S};
  cJSON *params;
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), 0);
  e.params = params;
  cJSON *out = NULL;
  int rc = tmpl_resolve(&e, task, ynode_get(root, "v"), &out, &d);
  CHECK_INT(rc, DR_ETEMPLATE);
  CHECK(out == NULL);
  /* Positions are in v.yaml's lines but the spec's file name. */
  char *r = all_diags(&d);
  cJSON_Delete(params);
  ynode_free(root);
  diags_free(&d);
  return r;
}

static void test_errors(void) {
  char *e;
  e = errors_in("v: x-${params.vocb}\n", 2);
  CHECK_STR(e, "dag.yaml:1:6: error: unknown param 'vocb' in ${params.vocb}; "
               "did you mean 'vocab'?\n");
  free(e);
  /* Quoted: the column counts the quote. */
  e = errors_in("v: \"ab ${params.zzzzzz}\"\n", 2);
  CHECK_STR(e, "dag.yaml:1:8: error: unknown param 'zzzzzz' in "
               "${params.zzzzzz}; the params are: corpus, vocab, lr, layers, "
               "tag\n");
  free(e);
  /* All errors of one value, in order. */
  e = errors_in("v:\n"
                "  - ${run.ids}\n"
                "  - ${run.start_time}\n"
                "  - ${tasks.tokenise.dir}\n"
                "  - ${tasks.shard}\n"
                "  - ${foo}\n"
                "  - ${env.HOME}\n"
                "  - a ${params.layers}\n"
                "  - ${params.vocab\n"
                "  - ${}\n"
                "  - ${env:1X}\n"
                "  - |\n"
                "    multi ${params.nope}\n",
                2);
  CHECK_STR(e,
            "dag.yaml:2:5: error: unknown run field 'ids' in ${run.ids}; did "
            "you mean ${run.id}?\n"
            "dag.yaml:3:5: error: unknown run field 'start_time' in "
            "${run.start_time}; expected ${run.id}, ${run.date}, "
            "${run.logical_date}, ${run.data_interval_start}, "
            "${run.data_interval_end} or ${run.dag}\n"
            "dag.yaml:4:5: error: unknown task 'tokenise' in "
            "${tasks.tokenise.dir}; did you mean 'tokenize'?\n"
            "dag.yaml:5:5: error: bad task reference ${tasks.shard}: expected "
            "${tasks.TASK.dir} or ${tasks.TASK.outputs.KEY}\n"
            "dag.yaml:6:5: error: unknown reference ${foo}: expected "
            "${params.NAME}, ${env:NAME}, ${env:NAME:-default}, ${run.id}, "
            "${run.date}, ${run.logical_date}, ${run.data_interval_start}, "
            "${run.data_interval_end}, ${run.dag}, ${tasks.TASK.dir}, "
            "${tasks.TASK.outputs.KEY}, or in a mapped task ${item}, "
            "${item.KEY} and ${item_index} (write $${ for a literal ${)\n"
            "dag.yaml:7:5: error: unknown reference ${env.HOME}; did you mean "
            "${env:HOME}?\n"
            "dag.yaml:8:7: error: ${params.layers} is a list and cannot be "
            "part of a string; use it as the whole value\n"
            "dag.yaml:9:5: error: unterminated reference '${params.vocab': "
            "missing '}' (write $${ for a literal ${)\n"
            "dag.yaml:10:5: error: empty reference ${}: expected "
            "${params.NAME}, ${env:NAME}, ${env:NAME:-default}, ${run.id}, "
            "${run.date}, ${run.logical_date}, ${run.data_interval_start}, "
            "${run.data_interval_end}, ${run.dag}, ${tasks.TASK.dir}, "
            "${tasks.TASK.outputs.KEY}, or in a mapped task ${item}, "
            "${item.KEY} and ${item_index}\n"
            "dag.yaml:11:5: error: bad environment reference ${env:1X}: "
            "expected ${env:NAME} or ${env:NAME:-default}\n"
            "dag.yaml:12:5: error: unknown param 'nope' in ${params.nope}; "
            "the params are: corpus, vocab, lr, layers, tag\n");
  free(e);
}

static void test_mentions_and_text(void) {
  CHECK_INT(tmpl_mentions_tasks(val("upstream")), 1);
  CHECK_INT(tmpl_mentions_tasks(val("mixed")), 0);
  CHECK_INT(tmpl_mentions_tasks(V), 1); /* somewhere inside */
  CHECK_INT(tmpl_mentions_tasks(NULL), 0);
  diags d = {0};
  ynode *root;
  const char *y = "a: $${tasks.x.dir}\nb: [1, {c: \"${ tasks.t.dir}\"}]\n";
  CHECK_INT(ydoc_parse("m.yaml", y, strlen(y), &root, &d), 0);
  CHECK_INT(tmpl_mentions_tasks(ynode_get(root, "a")), 0);
  CHECK_INT(tmpl_mentions_tasks(ynode_get(root, "b")), 1);
  ynode_free(root);

  cJSON *n = cJSON_CreateNumber(0.1);
  char *t = tmpl_scalar_text(n);
  CHECK_STR(t, "0.1");
  free(t);
  cJSON_SetNumberValue(n, 1e20);
  t = tmpl_scalar_text(n);
  CHECK_STR(t, "1e+20");
  free(t);
  cJSON_SetNumberValue(n, -42);
  t = tmpl_scalar_text(n);
  CHECK_STR(t, "-42");
  free(t);
  cJSON_Delete(n);
  cJSON *arr = cJSON_CreateArray();
  CHECK(tmpl_scalar_text(arr) == NULL);
  cJSON_Delete(arr);
}

/* |sh: one POSIX shell word, whatever the value holds; a list refused; an
 * unknown filter named. */
static void test_sh_filter(void) {
  char *q = tmpl_sh_quote("a'b\"c$d`e`;f\ng");
  CHECK_STR(q, "'a'\\''b\"c$d`e`;f\ng'");
  free(q);
  q = tmpl_sh_quote("");
  CHECK_STR(q, "''");
  free(q);
  const char *text = "dag: d\n"
                     "params: {m: \"it's\", n: 4, l: [a]}\n"
                     "tasks: {t: {stage: x}}\n"
                     "v: [\"${params.m|sh}\", \"x ${ params.n | sh }\", "
                     "\"${params.l|sh}\", \"${params.m|quote}\", "
                     "\"${env:TEST_TMPL_UNSET:-a|b}\", "
                     "\"${env:TEST_TMPL_UNSET:-a|b|sh}\"]\n";
  diags d = {0};
  spec *s;
  ynode *root;
  const char *cut = strstr(text, "v:");
  CHECK_INT(spec_parse("q.yaml", text, (size_t)(cut - text), &s, &d), 0);
  CHECK_INT(ydoc_parse("q.yaml", text, strlen(text), &root, &d), 0);
  tmpl_env e = {.s = s};
  cJSON *params, *out;
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), 0);
  e.params = params;
  const ynode *v = ynode_get(root, "v");
  CHECK_INT(tmpl_resolve(&e, SIZE_MAX, v->items[0], &out, &d), 0);
  CHECK_STR(out->valuestring, "'it'\\''s'");
  cJSON_Delete(out);
  CHECK_INT(tmpl_resolve(&e, SIZE_MAX, v->items[1], &out, &d), 0);
  CHECK_STR(out->valuestring, "x '4'");
  cJSON_Delete(out);
  /* A '|' in an env default stays the default's, but for a final |sh. */
  CHECK_INT(tmpl_resolve(&e, SIZE_MAX, v->items[4], &out, &d), 0);
  CHECK_STR(out->valuestring, "a|b");
  cJSON_Delete(out);
  CHECK_INT(tmpl_resolve(&e, SIZE_MAX, v->items[5], &out, &d), 0);
  CHECK_STR(out->valuestring, "'a|b'");
  cJSON_Delete(out);
  CHECK_INT(d.n, 0);
  CHECK_INT(tmpl_resolve(&e, SIZE_MAX, v->items[2], &out, &d), DR_ETEMPLATE);
  CHECK_INT(tmpl_resolve(&e, SIZE_MAX, v->items[3], &out, &d), DR_ETEMPLATE);
  char *errs = all_diags(&d);
  CHECK_STR(errs, "q.yaml:4:48: error: ${params.l|sh} is a list or a map: |sh "
                  "quotes one value\n"
                  "q.yaml:4:66: error: unknown filter 'quote' in "
                  "${params.m|quote}: the filters are |sh (the value as one "
                  "quoted shell word) and |json (the value as JSON text)\n");
  free(errs);
  cJSON_Delete(params);
  diags_free(&d);
  ynode_free(root);
  spec_free(s);
}

int main(void) {
  setup();
  test_sh_filter();
  test_params_resolution();
  test_params_errors();
  test_values_check_time();
  test_values_run_time();
  test_errors();
  test_mentions_and_text();
  spec_free(S);
  ynode_free(ROOT);
  TEST_DONE();
}
