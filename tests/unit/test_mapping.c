/* mapping: `map:` expanded into instance tasks (names, needs, items), the
 * mapped task's outputs as a list downstream, and every error `dagrun
 * check` gives for a bad `map:` or a misplaced ${item}, with its exact
 * file:line:col. */
#include <stdlib.h>
#include <string.h>

#include "dagfile/mapping.h"
#include "dagfile/template.h"
#include "testlib.h"

static const char sweep[] =
    "dag: sweep\n"
    "params:\n"
    "  lrs: [0.1, 0.3, 1.0]\n"
    "tasks:\n"
    "  prep: {stage: exec}\n"
    "  train:\n"
    "    stage: exec\n"
    "    map: ${params.lrs}\n"
    "    needs: prep\n"
    "    retries: 2\n"
    "    with: {lr: '${item}', i: '${item_index}', tag: 'lr-${item}'}\n"
    "  grid:\n"
    "    stage: exec\n"
    "    map: [{a: 1, b: x}, {a: 2, b: y}]\n"
    "    with: {a: '${item.a}', b: '${item.b}'}\n"
    "  none: {stage: exec, map: []}\n"
    "  pick:\n"
    "    stage: exec\n"
    "    needs: [train, grid, none]\n"
    "    with: {losses: '${tasks.train.outputs.val_loss}',\n"
    "           empty: '${tasks.none.outputs.x}',\n"
    "           text: 'l=${tasks.train.outputs.val_loss|json}'}\n";

static spec *parse(const char *text, diags *d) {
  spec *s = NULL;
  (void)spec_parse("dag.yaml", text, strlen(text), &s, d);
  return s;
}

static const cJSON *fake_outputs(void *ud, size_t task) {
  return cJSON_GetArrayItem((const cJSON *)ud, (int)task);
}

/* Resolves task name's `with:` under e into JSON text, or the errors. */
static char *with_of(const tmpl_env *e, const char *name) {
  long i = spec_task_find(e->s, name);
  CHECK(i >= 0);
  diags d = {0};
  cJSON *out = NULL;
  int rc = tmpl_resolve(e, (size_t)i, e->s->tasks[i].with, &out, &d);
  char *r = rc == 0              ? cJSON_PrintUnformatted(out)
            : rc == DR_EDEFERRED ? strdup("DEFERRED")
                                 : all_diags(&d);
  cJSON_Delete(out);
  diags_free(&d);
  return r;
}

static void test_expansion(void) {
  diags d = {0};
  spec *s = parse(sweep, &d);
  CHECK_INT(d.n, 0);
  /* prep, train-0..2, grid-0..1, pick: `none` has no instance. */
  CHECK_INT(s->n_tasks, 7);
  CHECK_STR(s->tasks[1].name, "train-0");
  CHECK_STR(s->tasks[3].name, "train-2");
  CHECK_STR(s->tasks[5].name, "grid-1");
  CHECK(spec_task_find(s, "train") < 0);
  const spec_map *m = spec_map_find(s, "train");
  CHECK(m != NULL);
  CHECK_INT(m->first, 1);
  CHECK_INT(m->n, 3);
  CHECK_STR(m->param, "lrs");
  CHECK_INT(spec_map_find(s, "none")->n, 0);
  /* Each instance keeps the task's settings and its needs. */
  for (size_t i = 1; i <= 3; i++) {
    CHECK_INT(s->tasks[i].retry.retries, 2);
    CHECK_INT(s->tasks[i].n_needs, 1);
    CHECK_INT(s->tasks[i].needs[0], 0);
    CHECK_INT(s->tasks[i].item_index, i - 1);
  }
  /* needs: [train, grid, none] is every instance of train and grid. */
  const spec_task *pick = &s->tasks[6];
  CHECK_INT(pick->n_needs, 5);
  for (size_t i = 0; i < 5; i++)
    CHECK_INT(pick->needs[i], i + 1);

  cJSON *params = cJSON_Parse("{\"lrs\": [0.1, 0.3, 1.0]}");
  tmpl_env e = {.s = s, .params = params};
  char *r = with_of(&e, "train-1");
  CHECK_STR(r, "{\"lr\":0.3,\"i\":1,\"tag\":\"lr-0.3\"}");
  free(r);
  r = with_of(&e, "grid-1");
  CHECK_STR(r, "{\"a\":2,\"b\":\"y\"}");
  free(r);
  /* Downstream: deferred at check time, then the instances' outputs in
   * item order (and [] for the mapped task without instances). */
  r = with_of(&e, "pick");
  CHECK_STR(r, "DEFERRED");
  free(r);
  cJSON *outs = cJSON_Parse("[{}, {\"val_loss\": 2.5}, {\"val_loss\": 1.5},"
                            " {\"val_loss\": 3}, {}, {}, {}]");
  e.task_outputs = fake_outputs;
  e.task_dir = NULL;
  e.ud = outs;
  r = with_of(&e, "pick");
  CHECK_STR(r, "{\"losses\":[2.5,1.5,3],\"empty\":[],"
               "\"text\":\"l=[2.5,1.5,3]\"}");
  free(r);
  /* The run's value of the param gives the items; a different count is
   * refused when it is set. */
  char err[512];
  CHECK_INT(
      tmpl_override_param(s, params, "lrs", "[0.5, 0.6, 0.7]", err, sizeof err),
      0);
  e.task_outputs = NULL;
  r = with_of(&e, "train-2");
  CHECK_STR(r, "{\"lr\":0.7,\"i\":2,\"tag\":\"lr-0.7\"}");
  free(r);
  CHECK_INT(tmpl_override_param(s, params, "lrs", "[0.5]", err, sizeof err),
            DR_EINVAL);
  CHECK_STR(err, "task 'train' maps over param 'lrs', and its 3 instances "
                 "are fixed when the DAG file is loaded: give a list of 3 "
                 "items (or change the list in the file)");
  cJSON_Delete(outs);
  cJSON_Delete(params);
  diags_free(&d);
  spec_free(s);
}

/* A list known at run time: a placeholder until spec_map_expand, which
 * appends the instances and moves the needs on the placeholder onto
 * them; mapping_items says what is no list. */
static void test_runtime(void) {
  diags d = {0};
  spec *s = parse("dag: x\n"
                  "tasks:\n"
                  "  gen: {stage: exec}\n"
                  "  work:\n"
                  "    stage: exec\n"
                  "    needs: gen\n"
                  "    map: ${tasks.gen.outputs.lrs}\n"
                  "    retries: 1\n"
                  "    with: {lr: '${item}', i: '${item_index}'}\n"
                  "  join: {stage: exec, needs: [gen, work],\n"
                  "         with: {w: '${tasks.work.outputs.w}'}}\n",
                  &d);
  CHECK_INT(d.n, 0);
  CHECK_INT(s->n_tasks, 3);
  const spec_map *m = spec_map_find(s, "work");
  CHECK_INT(m->placeholder, 1);
  CHECK_INT(m->n, 0);
  CHECK_INT(s->tasks[1].item_index, SPEC_ITEM_PENDING);
  CHECK_INT(s->tasks[2].n_needs, 2);
  CHECK_INT(s->tasks[2].needs[1], 1);
  tmpl_env e = {.s = s};
  char *r = with_of(&e, "work");
  CHECK_STR(r, "DEFERRED");
  free(r);
  r = with_of(&e, "join");
  CHECK_STR(r, "DEFERRED");
  free(r);

  char err[512];
  cJSON *items = NULL;
  cJSON *v = cJSON_CreateString("[0.1, 0.2, 0.3]");
  CHECK_INT(mapping_items(m, v, &items, err, sizeof err), 0);
  cJSON_Delete(v);
  v = cJSON_CreateNumber(4);
  cJSON *none = NULL;
  CHECK_INT(mapping_items(m, v, &none, err, sizeof err), DR_EINVAL);
  CHECK_STR(err, "task 'work' maps over ${tasks.gen.outputs.lrs}, which is "
                 "a number (4), not a JSON list");
  cJSON_Delete(v);

  spec_map_expand(s, 0, items);
  cJSON_Delete(items);
  CHECK_INT(s->n_tasks, 6);
  CHECK_INT(m->first, 3);
  CHECK_INT(m->n, 3);
  CHECK_STR(s->tasks[5].name, "work-2");
  CHECK_INT(s->tasks[5].retry.retries, 1);
  CHECK_INT(s->tasks[5].n_needs, 1);
  CHECK_INT(s->tasks[5].needs[0], 0);
  /* join needs gen and the three instances, no longer the placeholder. */
  const spec_task *join = &s->tasks[2];
  CHECK_INT(join->n_needs, 4);
  CHECK_INT(join->needs[0], 0);
  for (size_t i = 0; i < 3; i++)
    CHECK_INT(join->needs[i + 1], i + 3);
  r = with_of(&e, "work-1");
  CHECK_STR(r, "{\"lr\":0.2,\"i\":1}");
  free(r);
  cJSON *outs = cJSON_Parse("[{}, {}, {}, {\"w\": 1}, {\"w\": 2},"
                            " {\"w\": 3}]");
  e.task_outputs = fake_outputs;
  e.ud = outs;
  r = with_of(&e, "join");
  CHECK_STR(r, "{\"w\":[1,2,3]}");
  free(r);
  cJSON_Delete(outs);
  diags_free(&d);
  spec_free(s);
}

/* The spec's errors for text, all of them. */
static char *spec_errors(const char *text) {
  diags d = {0};
  spec *s = parse(text, &d);
  CHECK(d.n > 0);
  char *e = all_diags(&d);
  diags_free(&d);
  spec_free(s);
  return e;
}

static void test_bad_map(void) {
  char *e =
      spec_errors("dag: x\n"
                  "params: {lr: 0.1, lrs: [1, 2]}\n"
                  "tasks:\n"
                  "  a: {stage: exec, map: 5}\n"
                  "  b: {stage: exec, map: '${params.lr}'}\n"
                  "  c: {stage: exec, map: '${params.nope}'}\n"
                  "  d: {stage: exec, map: {x: 1}}\n"
                  "  e: {stage: exec, map: 'lr-${params.lrs}'}\n"
                  "  f: {stage: exec, needs: a, map: '${tasks.a.dir}'}\n");
  CHECK_STR(e,
            "dag.yaml:4:25: error: 'map' in task 'a': expected a list ([a, b, "
            "c]), ${params.NAME} naming a param whose value is a list, or "
            "${tasks.TASK.outputs.KEY} naming an upstream task's output that "
            "is a JSON list, "
            "found an integer\n"
            "dag.yaml:5:25: error: 'map' in task 'b': param 'lr' is a number "
            "at line 2, not a list; the number of instances is fixed when "
            "the file is loaded, so the param's value in the file must be a "
            "list\n"
            "dag.yaml:6:25: error: 'map' in task 'c' names unknown param "
            "'nope' (declare it under 'params' as a list)\n"
            "dag.yaml:7:25: error: 'map' in task 'd': expected a list ([a, b, "
            "c]), ${params.NAME} naming a param whose value is a list, or "
            "${tasks.TASK.outputs.KEY} naming an upstream task's output that "
            "is a JSON list, "
            "found a map\n"
            "dag.yaml:8:25: error: 'map' in task 'e': expected a list ([a, b, "
            "c]), ${params.NAME} naming a param whose value is a list, or "
            "${tasks.TASK.outputs.KEY} naming an upstream task's output that "
            "is a JSON list, "
            "found a string\n"
            "dag.yaml:9:35: error: 'map' in task 'f': ${tasks.a.dir} is not "
            "a task's output; expected a list ([a, b, c]), ${params.NAME} "
            "naming a param whose value is a list, or "
            "${tasks.TASK.outputs.KEY} naming an upstream task's output that "
            "is a JSON list\n");
  free(e);
}

static void test_names(void) {
  /* An instance name is nobody else's, whichever comes first. */
  char *e = spec_errors("dag: x\n"
                        "tasks:\n"
                        "  t: {stage: exec, map: [1, 2]}\n"
                        "  t-1: {stage: exec}\n"
                        "  u-0: {stage: exec}\n"
                        "  u: {stage: exec, map: [1]}\n"
                        "  t: {stage: exec}\n");
  CHECK_STR(e, "dag.yaml:4:3: error: task name 't-1' is taken by instance 1 "
               "of mapped task 't' (line 3); rename the task\n"
               "dag.yaml:6:25: error: instance 0 of mapped task 'u' would be "
               "named 'u-0', which is the name of another task; rename that "
               "task\n"
               "dag.yaml:7:3: error: duplicate task name 't' (first defined "
               "at line 3)\n");
  free(e);
  /* A bad need is reported once, under the name as written. */
  e = spec_errors("dag: x\n"
                  "tasks:\n"
                  "  t: {stage: exec, map: [1, 2, 3], needs: [nope]}\n");
  CHECK_STR(e, "dag.yaml:3:44: error: task 't' needs unknown task 'nope'\n");
  free(e);
}

/* ${item} outside a mapped task, a bad item key, a self reference, a
 * mapped task that is not upstream: each at its place. */
static void test_item_errors(void) {
  diags d = {0};
  spec *s =
      parse("dag: x\n"
            "params: {p: '${item}'}\n"
            "tasks:\n"
            "  a: {stage: exec, with: {v: 'x-${item}'}}\n"
            "  m: {stage: exec, map: [{k: 1}, 2], with: {v: '${item.k}'}}\n"
            "  n: {stage: exec, map: [1], with: {v: '${tasks.n.dir}', w: "
            "'${item.}'}}\n"
            "  b: {stage: exec, with: {v: '${tasks.m.outputs.loss}'}}\n",
            &d);
  CHECK_INT(d.n, 0);
  tmpl_env e = {.s = s};
  cJSON *params = NULL;
  CHECK_INT(tmpl_resolve_params(&e, &params, &d), DR_ETEMPLATE);
  e.params = params;
  char *r = all_diags(&d);
  CHECK_STR(r, "dag.yaml:2:14: error: ${item} is used outside a mapped task: "
               "${item}, ${item.KEY} and ${item_index} name the item of a "
               "task with 'map:'\n");
  free(r);
  r = with_of(&e, "a");
  CHECK_STR(r, "dag.yaml:4:33: error: ${item} is used outside a mapped task: "
               "${item}, ${item.KEY} and ${item_index} name the item of a "
               "task with 'map:' (task 'a' has no 'map:')\n");
  free(r);
  r = with_of(&e, "m-0");
  CHECK_STR(r, "{\"v\":1}");
  free(r);
  r = with_of(&e, "m-1");
  CHECK_STR(r, "dag.yaml:5:49: error: item 1 of mapped task 'm' is not a map "
               "with a key 'k' (${item.k})\n");
  free(r);
  r = with_of(&e, "n-0");
  CHECK_STR(r, "dag.yaml:6:41: error: mapped task 'n' refers to itself in "
               "${tasks.n.dir}; a task can use only the outputs of tasks it "
               "needs\n"
               "dag.yaml:6:62: error: bad item reference ${item.}: expected "
               "${item}, ${item.KEY} or ${item_index}\n");
  free(r);
  r = with_of(&e, "b");
  CHECK_STR(r, "dag.yaml:7:31: error: task 'b' refers to task 'm' in "
               "${tasks.m.outputs.loss}, but 'm' is not upstream of 'b'; add "
               "'m' to the needs of 'b' (directly or through a task it "
               "needs)\n");
  free(r);
  cJSON_Delete(params);
  diags_free(&d);
  spec_free(s);
}

int main(void) {
  test_expansion();
  test_bad_map();
  test_runtime();
  test_names();
  test_item_errors();
  TEST_DONE();
}
