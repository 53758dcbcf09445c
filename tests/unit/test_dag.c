/* dag: stable topological order, cycle messages, upstream queries. */
#include <stdlib.h>
#include <string.h>

#include "dagfile/dag.h"
#include "lib/clock.h"
#include "testlib.h"

static spec *parse(const char *text) {
  diags d = {0};
  spec *s = NULL;
  CHECK_INT(spec_parse("dag.yaml", text, strlen(text), &s, &d), 0);
  CHECK_INT(d.n, 0);
  diags_free(&d);
  return s;
}

/* Task names in order, space-separated; caller frees. */
static char *order_names(const spec *s, const size_t *order) {
  sbuf b = {0};
  for (size_t i = 0; i < s->n_tasks; i++)
    sbuf_printf(&b, "%s%s", i ? " " : "", s->tasks[order[i]].name);
  return sbuf_take(&b);
}

static void test_stable_order(void) {
  /* Written order wins among ready tasks: c before b, though b is
   * needed by nothing and c is needed by e. */
  spec *s = parse("dag: d\ntasks:\n"
                  "  e: {stage: x, needs: [c, d]}\n"
                  "  c: {stage: x}\n"
                  "  b: {stage: x}\n"
                  "  a: {stage: x, needs: [b]}\n"
                  "  d: {stage: x, needs: [b]}\n");
  size_t order[5];
  diags d = {0};
  CHECK_INT(dag_toposort(s, order, &d), 0);
  char *names = order_names(s, order);
  CHECK_STR(names, "c b a d e");
  free(names);
  CHECK_INT(d.n, 0);
  CHECK_INT(dag_toposort(s, NULL, &d), 0);
  spec_free(s);
}

static void test_cycles(void) {
  spec *s = parse("dag: d\ntasks:\n"
                  "  a: {stage: x, needs: [c]}\n"
                  "  b: {stage: x, needs: [a]}\n"
                  "  c: {stage: x, needs: [b, ok]}\n"
                  "  ok: {stage: x}\n"
                  "  after: {stage: x, needs: [c]}\n"
                  "  self:\n"
                  "    stage: x\n"
                  "    needs: [ok, self]\n"
                  "  p: {stage: x, needs: [q]}\n"
                  "  q: {stage: x, needs: [p]}\n");
  size_t order[9];
  diags d = {0};
  CHECK_INT(dag_toposort(s, order, &d), DR_ECYCLE);
  char *e = all_diags(&d);
  CHECK_STR(e,
            "dag.yaml:3:25: error: dependency cycle: a -> b -> c -> a (each "
            "task needs the one before it)\n"
            "dag.yaml:10:17: error: dependency cycle: self -> self (task "
            "'self' needs itself)\n"
            "dag.yaml:11:25: error: dependency cycle: p -> q -> p (each task "
            "needs the one before it)\n");
  free(e);
  diags_free(&d);
  /* Without diags, only the code. */
  CHECK_INT(dag_toposort(s, NULL, NULL), DR_ECYCLE);
  spec_free(s);
}

static void test_shortest_cycle(void) {
  /* a is in a big component; the shortest way back is reported. */
  spec *s = parse("dag: d\ntasks:\n"
                  "  a: {stage: x, needs: [d, b]}\n"
                  "  b: {stage: x, needs: [a]}\n"
                  "  c: {stage: x, needs: [b]}\n"
                  "  d: {stage: x, needs: [c]}\n");
  diags d = {0};
  CHECK_INT(dag_toposort(s, NULL, &d), DR_ECYCLE);
  char *e = all_diags(&d);
  CHECK_STR(e, "dag.yaml:3:28: error: dependency cycle: a -> b -> a (each "
               "task needs the one before it)\n");
  free(e);
  diags_free(&d);
  spec_free(s);
}

static void test_long_cycle(void) {
  /* A ring of 20: both ends shown, the middle counted. */
  sbuf b = {0};
  sbuf_puts(&b, "dag: d\ntasks:\n");
  for (int i = 0; i < 20; i++)
    sbuf_printf(&b, "  r%d: {stage: x, needs: [r%d]}\n", i, (i + 19) % 20);
  spec *s = parse(b.s);
  sbuf_free(&b);
  diags d = {0};
  CHECK_INT(dag_toposort(s, NULL, &d), DR_ECYCLE);
  char *e = all_diags(&d);
  CHECK_STR(e, "dag.yaml:3:26: error: dependency cycle: r0 -> r1 -> r2 -> r3 "
               "-> r4 -> r5 -> ... (8 more) -> r14 -> r15 -> r16 -> r17 -> "
               "r18 -> r19 -> r0 (each task needs the one before it)\n");
  free(e);
  diags_free(&d);
  spec_free(s);
}

static void test_upstream(void) {
  spec *s = parse("dag: d\ntasks:\n"
                  "  a: {stage: x}\n"
                  "  b: {stage: x, needs: [a]}\n"
                  "  c: {stage: x, needs: [b]}\n"
                  "  d: {stage: x, needs: [a]}\n"
                  "  e: {stage: x, needs: [c, d]}\n"
                  "  f: {stage: x}\n");
  dag_reach *r = dag_reach_create(s);
  CHECK_INT(dag_is_upstream(r, 1, 0), 1); /* direct */
  CHECK_INT(dag_is_upstream(r, 2, 0), 1); /* through b */
  CHECK_INT(dag_is_upstream(r, 4, 0), 1);
  CHECK_INT(dag_is_upstream(r, 4, 0), 1); /* again, from the memo */
  CHECK_INT(dag_is_upstream(r, 4, 1), 1);
  CHECK_INT(dag_is_upstream(r, 4, 5), 0); /* unrelated */
  CHECK_INT(dag_is_upstream(r, 0, 4), 0); /* downstream, not upstream */
  CHECK_INT(dag_is_upstream(r, 3, 1), 0); /* sibling branch */
  CHECK_INT(dag_is_upstream(r, 2, 2), 0); /* itself */
  CHECK_INT(dag_is_upstream(r, 2, 99), 0);
  dag_reach_destroy(r);
  dag_reach_destroy(NULL);
  spec_free(s);
}

static void test_upstream_with_cycle(void) {
  /* Queries still terminate and answer when the graph has a cycle. */
  diags d = {0};
  spec *s = parse("dag: d\ntasks:\n"
                  "  a: {stage: x, needs: [b]}\n"
                  "  b: {stage: x, needs: [a, c]}\n"
                  "  c: {stage: x}\n"
                  "  z: {stage: x}\n");
  dag_reach *r = dag_reach_create(s);
  CHECK_INT(dag_is_upstream(r, 0, 2), 1);
  CHECK_INT(dag_is_upstream(r, 0, 3), 0);
  CHECK_INT(dag_is_upstream(r, 2, 0), 0);
  dag_reach_destroy(r);
  spec_free(s);
  diags_free(&d);
}

/* A chain of 100,000 tasks; every task asks about the first one, the
 * pattern of "${tasks.prepare.dir}" everywhere. Quadratic would be 5e9
 * steps. */
static void test_scale(void) {
  enum { N = 100000 };
  sbuf b = {0};
  sbuf_puts(&b, "dag: big\ntasks:\n  t0: {stage: x}\n");
  for (int i = 1; i < N; i++)
    sbuf_printf(&b, "  t%d: {stage: x, needs: [t%d]}\n", i, i - 1);
  spec *s = parse(b.s);
  sbuf_free(&b);
  double t0 = clock_monotonic();
  size_t *order = malloc(N * sizeof(size_t));
  CHECK_INT(dag_toposort(s, order, NULL), 0);
  CHECK_INT(order[N - 1], N - 1);
  dag_reach *r = dag_reach_create(s);
  int all = 1;
  for (size_t i = 1; i < N; i++)
    all &= dag_is_upstream(r, i, 0);
  CHECK_INT(all, 1);
  /* And the other way round: nobody downstream is upstream. */
  int none = 0;
  for (size_t i = 1; i < N; i++)
    none |= dag_is_upstream(r, 0, i);
  CHECK_INT(none, 0);
  double dt = clock_monotonic() - t0;
  fprintf(stderr, "toposort + %d upstream queries: %.3fs\n", 2 * (N - 1), dt);
  CHECK(dt < 2.0);
  dag_reach_destroy(r);
  free(order);
  spec_free(s);
}

int main(void) {
  test_stable_order();
  test_cycles();
  test_shortest_cycle();
  test_long_cycle();
  test_upstream();
  test_upstream_with_cycle();
  test_scale();
  TEST_DONE();
}
