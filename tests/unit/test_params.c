/* params: a task's `with` against a stage schema, with exact errors. */
#include <stdlib.h>
#include <string.h>

#include "dagfile/dag.h"
#include "host/params.h"
#include "testlib.h"

static const dagrun_param_spec schema[] = {
    {"model", DAGRUN_PARAM_STRING, NULL, 1, "model preset, e.g. gpt-tiny"},
    {"steps", DAGRUN_PARAM_INT, "1000", 0, "optimizer steps"},
    {"lr", DAGRUN_PARAM_FLOAT, "3e-4", 0, "peak learning rate"},
    {"compile", DAGRUN_PARAM_BOOL, "false", 0, NULL},
    {"files", DAGRUN_PARAM_LIST, NULL, 0, NULL},
    {"tags", DAGRUN_PARAM_MAP, NULL, 0, NULL},
    {"version", DAGRUN_PARAM_STRING, "v1", 0, NULL},
    {"seed", DAGRUN_PARAM_INT, NULL, 1, NULL},
    {NULL, 0, NULL, 0, NULL},
};

/* Builds params for the last task of a DAG made of `tasks` (YAML lines
 * under "tasks:"); returns the JSON or the diagnostics. */
static char *build_with(const dagrun_param_spec *sch,
                        const dagrun_param_choice *choices, const char *tasks,
                        int run_time) {
  sbuf y = {0};
  sbuf_puts(&y, "dag: d\n"
                "params: {steps: \"12\", word: abc, list: [a, b]}\n"
                "tasks:\n"
                "  up: {stage: shard}\n");
  sbuf_puts(&y, tasks);
  diags d = {0};
  spec *s = NULL;
  CHECK_INT(spec_parse("dag.yaml", y.s, y.n, &s, &d), 0);
  char *r;
  if (d.n) {
    r = all_diags(&d);
  } else {
    tmpl_env e = {.s = s};
    if (run_time)
      e.run_id = "r1";
    cJSON *params, *out = NULL;
    CHECK_INT(tmpl_resolve_params(&e, &params, &d), 0);
    e.params = params;
    int rc = params_build(sch, choices, &e, s->n_tasks - 1, &out, &d);
    if (rc == 0) {
      CHECK_INT(d.n, 0);
      r = cJSON_PrintUnformatted(out);
    } else {
      CHECK(out == NULL);
      CHECK(rc == DR_EPARAM || rc == DR_ETEMPLATE);
      CHECK(d.n > 0);
      r = all_diags(&d);
    }
    cJSON_Delete(out);
    cJSON_Delete(params);
  }
  spec_free(s);
  diags_free(&d);
  sbuf_free(&y);
  return r;
}

static char *build(const dagrun_param_spec *sch, const char *tasks,
                   int run_time) {
  return build_with(sch, NULL, tasks, run_time);
}

#define EXPECT(sch, tasks, want)                                               \
  do {                                                                         \
    char *got_ = build(sch, tasks, 0);                                         \
    CHECK_STR(got_, want);                                                     \
    free(got_);                                                                \
  } while (0)

static void test_conversions(void) {
  /* Each type from its natural YAML, defaults for the rest. */
  EXPECT(schema,
         "  t:\n"
         "    stage: train\n"
         "    with:\n"
         "      model: gpt-tiny\n"
         "      seed: 7\n",
         "{\"model\":\"gpt-tiny\",\"seed\":7,\"steps\":1000,\"lr\":0.0003,"
         "\"compile\":false,\"version\":\"v1\"}");
  /* Conversions between forms. */
  EXPECT(schema,
         "  t:\n"
         "    stage: train\n"
         "    with:\n"
         "      model: 124\n"
         "      seed: \"-3\"\n"
         "      steps: ${params.steps}\n"
         "      lr: 1\n"
         "      compile: \"true\"\n"
         "      files: one.txt\n"
         "      tags: {owner: me, n: 2, f: 1.50}\n"
         "      version: 1.10\n",
         "{\"model\":\"124\",\"seed\":-3,\"steps\":12,\"lr\":1,"
         "\"compile\":true,\"files\":[\"one.txt\"],"
         "\"tags\":{\"owner\":\"me\",\"n\":\"2\",\"f\":\"1.50\"},"
         "\"version\":\"1.10\"}");
  EXPECT(schema,
         "  t:\n"
         "    stage: train\n"
         "    with:\n"
         "      model: m\n"
         "      seed: 1\n"
         "      lr: \"2.5e-3\"\n"
         "      files: [a, 2, true, \"x${params.word}\"]\n",
         "{\"model\":\"m\",\"seed\":1,\"lr\":0.0025,"
         "\"files\":[\"a\",\"2\",\"true\",\"xabc\"],\"steps\":1000,"
         "\"compile\":false,\"version\":\"v1\"}");
  /* A whole-scalar list template into a list param. */
  EXPECT(schema,
         "  t: {stage: train, with: {model: m, seed: 1, files: "
         "\"${params.list}\"}}\n",
         "{\"model\":\"m\",\"seed\":1,\"files\":[\"a\",\"b\"],\"steps\":1000,"
         "\"lr\":0.0003,\"compile\":false,\"version\":\"v1\"}");
  /* `key:` with nothing means "not set": the default applies. */
  EXPECT(schema, "  t: {stage: train, with: {model: m, seed: 1, steps: ~}}\n",
         "{\"model\":\"m\",\"seed\":1,\"steps\":1000,\"lr\":0.0003,"
         "\"compile\":false,\"version\":\"v1\"}");
}

static void test_errors(void) {
  EXPECT(schema,
         "  t:\n"
         "    stage: train\n"
         "    with:\n"
         "      stpes: 10\n"
         "      colour: red\n"
         "      lr: fast\n"
         "      seed: 1.5\n"
         "      compile: yes\n"
         "      files: [a, [b]]\n"
         "      tags: {a: {b: c}}\n"
         "      version: [1]\n",
         "dag.yaml:8:7: error: unknown param 'stpes' for stage 'train' in "
         "task 't'; did you mean 'steps'?\n"
         "dag.yaml:9:7: error: unknown param 'colour' for stage 'train' in "
         "task 't'; it takes: model, steps, lr, compile, files, tags, "
         "version, seed\n"
         "dag.yaml:10:11: error: param 'lr' of stage 'train' in task 't': "
         "expected a number, found a string (\"fast\")\n"
         "dag.yaml:11:13: error: param 'seed' of stage 'train' in task 't': "
         "expected an integer, found a number (1.5)\n"
         "dag.yaml:12:16: error: param 'compile' of stage 'train' in task "
         "'t': expected true or false, found a string (\"yes\")\n"
         "dag.yaml:13:18: error: param 'files' of stage 'train' in task 't': "
         "item 2 must be a string, found a list\n"
         "dag.yaml:14:17: error: param 'tags' of stage 'train' in task 't': "
         "value of 'a' must be a string, found a map\n"
         "dag.yaml:15:16: error: param 'version' of stage 'train' in task "
         "'t': expected a string, found a list\n"
         "dag.yaml:6:12: error: task 't' is missing required param 'model' "
         "of stage 'train' (string: model preset, e.g. gpt-tiny); add it "
         "under 'with'\n");
  /* The value a template gives is what is checked; a required param set
   * to null is reported as such. */
  EXPECT(schema,
         "  t:\n"
         "    stage: train\n"
         "    with: {model: ~, seed: \"${params.word}\", steps: "
         "\"${params.nope}\"}\n",
         "dag.yaml:7:19: error: param 'model' of stage 'train' in task 't' "
         "is required, found null\n"
         "dag.yaml:7:28: error: param 'seed' of stage 'train' in task 't': "
         "expected an integer, found a string (\"abc\")\n"
         "dag.yaml:7:54: error: unknown param 'nope' in ${params.nope}; the "
         "params are: steps, word, list\n");
  /* Numbers no double or int64 holds: an error, not "not set" (1e400
   * became JSON's null, and the default applied unsaid). */
  EXPECT(schema,
         "  t:\n"
         "    stage: train\n"
         "    with: {model: m, lr: 1e400, seed: 99999999999999999999}\n",
         "dag.yaml:7:26: error: param 'lr' of stage 'train' in task 't': "
         "expected a number, found a number beyond a double's range "
         "(1e400)\n"
         "dag.yaml:7:39: error: param 'seed' of stage 'train' in task 't': "
         "expected an integer, found an integer beyond 64 bits (1e+20)\n");
  /* No with at all: the required params are named at the stage. */
  EXPECT(schema, "  t: {stage: train}\n",
         "dag.yaml:5:14: error: task 't' is missing required param 'model' "
         "of stage 'train' (string: model preset, e.g. gpt-tiny); add it "
         "under 'with'\n"
         "dag.yaml:5:14: error: task 't' is missing required param 'seed' of "
         "stage 'train' (int); add it under 'with'\n");
  /* A stage without params. */
  EXPECT(NULL, "  t: {stage: noop, with: {x: 1}}\n",
         "dag.yaml:5:27: error: unknown param 'x' in task 't': stage 'noop' "
         "takes no params\n");
  /* Templates of unknown params are still checked. */
  EXPECT(NULL, "  t: {stage: noop, with: {x: \"${params.nope}\"}}\n",
         "dag.yaml:5:27: error: unknown param 'x' in task 't': stage 'noop' "
         "takes no params\n"
         "dag.yaml:5:31: error: unknown param 'nope' in ${params.nope}; the "
         "params are: steps, word, list\n");
  EXPECT(NULL, "  t: {stage: noop}\n", "{}");
}

static const dagrun_param_spec choice_schema[] = {
    {"device", DAGRUN_PARAM_STRING, "auto", 0, NULL},
    {"zero_stage", DAGRUN_PARAM_INT, "1", 0, NULL},
    {"note", DAGRUN_PARAM_STRING, NULL, 0, NULL},
    {NULL, 0, NULL, 0, NULL},
};
static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
static const char *const zero_stages[] = {"0", "1", "2", "3", NULL};
static const dagrun_param_choice choices[] = {
    {"device", devices}, {"zero_stage", zero_stages}, {NULL, NULL}};

#define EXPECT_CHOICES(tasks, run_time, want)                                  \
  do {                                                                         \
    char *got_ = build_with(choice_schema, choices, tasks, run_time);          \
    CHECK_STR(got_, want);                                                     \
    free(got_);                                                                \
  } while (0)

static void test_choices(void) {
  /* Values among the choices pass as written (an INT one as the number it
   * is); defaults apply; a param without choices takes anything. */
  EXPECT_CHOICES("  t: {stage: train, with: {device: cuda, zero_stage: "
                 "\"+2\", note: gpu}}\n",
                 0, "{\"device\":\"cuda\",\"zero_stage\":2,\"note\":\"gpu\"}");
  EXPECT_CHOICES("  t: {stage: train}\n", 0,
                 "{\"device\":\"auto\",\"zero_stage\":1}");
  /* Others are refused at the value, with the choices and, for a word, the
   * nearest one; a number gets no guess. */
  EXPECT_CHOICES("  t:\n"
                 "    stage: train\n"
                 "    with:\n"
                 "      device: gpu\n"
                 "      zero_stage: 4\n",
                 0,
                 "dag.yaml:8:15: error: task 't': stage 'train' param "
                 "'device': 'gpu' is not one of auto, cpu, cuda; did you "
                 "mean 'cpu'?\n"
                 "dag.yaml:9:19: error: task 't': stage 'train' param "
                 "'zero_stage': '4' is not one of 0, 1, 2, 3\n");
  /* Nothing near: the choices alone. */
  EXPECT_CHOICES(
      "  t: {stage: train, with: {device: tensor-processing-unit}}\n", 0,
      "dag.yaml:5:36: error: task 't': stage 'train' param "
      "'device': 'tensor-processing-unit' is not one of auto, "
      "cpu, cuda\n");
  /* The value a template gives is what is checked... */
  EXPECT_CHOICES("  t: {stage: train, with: {device: \"${params.word}\"}}\n", 0,
                 "dag.yaml:5:36: error: task 't': stage 'train' param "
                 "'device': 'abc' is not one of auto, cpu, cuda\n");
  /* ...and one that waits for an upstream output passes check, to be
   * checked when the task starts, as a run field is here. */
  EXPECT_CHOICES("  t: {stage: train, needs: [up], with: {device: "
                 "\"${tasks.up.outputs.dev}\"}}\n",
                 0, "{\"zero_stage\":1}");
  EXPECT_CHOICES("  t: {stage: train, with: {device: \"${run.id}\"}}\n", 1,
                 "dag.yaml:5:36: error: task 't': stage 'train' param "
                 "'device': 'r1' is not one of auto, cpu, cuda\n");
}

static void test_deferred(void) {
  /* Check time: values waiting for upstream or run fields are valid but
   * left out, and count as set for "required". */
  EXPECT(schema,
         "  t:\n"
         "    stage: train\n"
         "    needs: [up]\n"
         "    with:\n"
         "      model: ${tasks.up.outputs.model}\n"
         "      seed: ${tasks.up.outputs.seed}\n"
         "      version: v-${run.id}\n",
         "{\"steps\":1000,\"lr\":0.0003,\"compile\":false}");
  char *got = build(schema,
                    "  t: {stage: train, with: {model: \"${run.id}\", seed: "
                    "1}}\n",
                    1);
  CHECK_STR(got, "{\"model\":\"r1\",\"seed\":1,\"steps\":1000,\"lr\":0.0003,"
                 "\"compile\":false,\"version\":\"v1\"}");
  free(got);
}

static void test_bad_default(void) {
  static const dagrun_param_spec bad[] = {
      {"n", DAGRUN_PARAM_INT, "eight", 0, NULL},
      {NULL, 0, NULL, 0, NULL},
  };
  EXPECT(bad, "  t: {stage: broken}\n",
         "dag.yaml:5:14: error: stage 'broken' declares an invalid default "
         "\"eight\" for its int param 'n' (a bug in the plugin); set 'n' in "
         "task 't'\n");
  EXPECT(bad, "  t: {stage: broken, with: {n: 8}}\n", "{\"n\":8}");
}

static void test_type_names(void) {
  CHECK_STR(params_type_name(DAGRUN_PARAM_STRING), "string");
  CHECK_STR(params_type_name(DAGRUN_PARAM_INT), "int");
  CHECK_STR(params_type_name(DAGRUN_PARAM_FLOAT), "float");
  CHECK_STR(params_type_name(DAGRUN_PARAM_BOOL), "bool");
  CHECK_STR(params_type_name(DAGRUN_PARAM_LIST), "list");
  CHECK_STR(params_type_name(DAGRUN_PARAM_MAP), "map");
}

int main(void) {
  test_conversions();
  test_errors();
  test_deferred();
  test_choices();
  test_bad_default();
  test_type_names();
  TEST_DONE();
}
