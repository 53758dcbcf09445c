/* graph: text, DOT and Mermaid output, byte for byte. */
#include <stdlib.h>
#include <string.h>

#include "dagfile/graph.h"
#include "testlib.h"

static spec *parse(const char *text) {
  diags d = {0};
  spec *s = NULL;
  CHECK_INT(spec_parse("dag.yaml", text, strlen(text), &s, &d), 0);
  diags_free(&d);
  return s;
}

/* graph_print into a string; returns the code in *rc. Caller frees. */
static char *render(const spec *s, const char *format, int *rc) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  *rc = graph_print(s, format, f);
  fclose(f);
  return buf;
}

static const char dag_text[] = "dag: pretrain\n"
                               "tasks:\n"
                               "  train: {stage: train, needs: [tokenize]}\n"
                               "  shard: {stage: shard}\n"
                               "  tokenize: {stage: tokenize, needs: [shard]}\n"
                               "  export:\n"
                               "    stage: ./my \"export\".so\n"
                               "    needs: [train, shard]\n"
                               "  end: {stage: exec}\n";

static void test_formats(void) {
  spec *s = parse(dag_text);
  int rc;
  char *out = render(s, "text", &rc);
  CHECK_INT(rc, 0);
  CHECK_STR(out, "shard (shard)\n"
                 "tokenize (tokenize) <- shard\n"
                 "train (train) <- tokenize\n"
                 "export (./my \"export\".so) <- train, shard\n"
                 "end (exec)\n");
  free(out);
  out = render(s, NULL, &rc); /* text is the default */
  CHECK_INT(rc, 0);
  CHECK(out && strncmp(out, "shard (shard)\n", 14) == 0);
  free(out);

  out = render(s, "dot", &rc);
  CHECK_INT(rc, 0);
  CHECK_STR(out, "digraph \"pretrain\" {\n"
                 "  rankdir=LR;\n"
                 "  node [shape=box];\n"
                 "  \"shard\" [label=\"shard\\n(shard)\"];\n"
                 "  \"tokenize\" [label=\"tokenize\\n(tokenize)\"];\n"
                 "  \"train\" [label=\"train\\n(train)\"];\n"
                 "  \"export\" [label=\"export\\n(./my \\\"export\\\".so)\"];\n"
                 "  \"end\" [label=\"end\\n(exec)\"];\n"
                 "  \"shard\" -> \"tokenize\";\n"
                 "  \"tokenize\" -> \"train\";\n"
                 "  \"train\" -> \"export\";\n"
                 "  \"shard\" -> \"export\";\n"
                 "}\n");
  free(out);

  out = render(s, "mermaid", &rc);
  CHECK_INT(rc, 0);
  CHECK_STR(out, "flowchart TD\n"
                 "  t1[\"shard (shard)\"]\n"
                 "  t2[\"tokenize (tokenize)\"]\n"
                 "  t0[\"train (train)\"]\n"
                 "  t3[\"export (./my #quot;export#quot;.so)\"]\n"
                 "  t4[\"end (exec)\"]\n"
                 "  t1 --> t2\n"
                 "  t2 --> t0\n"
                 "  t0 --> t3\n"
                 "  t1 --> t3\n");
  free(out);

  out = render(s, "svg", &rc);
  CHECK_INT(rc, DR_EINVAL);
  CHECK_STR(out, "");
  free(out);
  spec_free(s);
}

static void test_cycle(void) {
  spec *s = parse("dag: d\ntasks:\n  a: {stage: x, needs: [b]}\n"
                  "  b: {stage: x, needs: [a]}\n");
  int rc;
  char *out = render(s, "dot", &rc);
  CHECK_INT(rc, DR_ECYCLE);
  CHECK_STR(out, "");
  free(out);
  spec_free(s);
}

int main(void) {
  test_formats();
  test_cycle();
  TEST_DONE();
}
