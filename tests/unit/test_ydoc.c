/* ydoc: positions, scalar types, anchors and merges, syntax errors. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/ydoc.h"
#include "testlib.h"

static ynode *parse(const char *text, diags *d) {
  ynode *root = NULL;
  int rc = ydoc_parse("dag.yaml", text, strlen(text), &root, d);
  CHECK_INT(rc, root ? 0 : DR_ESPEC);
  return root;
}

/* The one diagnostic a bad document gives, formatted; caller frees. */
static char *parse_error(const char *text) {
  diags d = {0};
  ynode *root = NULL;
  int rc = ydoc_parse("dag.yaml", text, strlen(text), &root, &d);
  CHECK_INT(rc, DR_ESPEC);
  CHECK(root == NULL);
  CHECK_INT(d.n, 1);
  char *s = d.n ? diag_format(&d.v[0]) : strdup("(none)");
  diags_free(&d);
  return s;
}

static void test_positions(void) {
  diags d = {0};
  ynode *root = parse("dag: demo\n"
                      "tasks:\n"
                      "  a:\n"
                      "    stage: exec\n"
                      "    needs: [b, \"c\"]\n",
                      &d);
  CHECK_INT(d.n, 0);
  CHECK_INT(root->kind, YNODE_MAP);
  CHECK_INT(root->n, 2);
  CHECK_INT(root->line, 1);
  CHECK_INT(root->col, 1);
  const ynode *tasks = ynode_get(root, "tasks");
  CHECK(tasks && tasks->kind == YNODE_MAP);
  CHECK_INT(tasks->line, 3); /* a block map starts at its first key */
  CHECK_INT(tasks->col, 3);
  const ynode *a = ynode_get(tasks, "a");
  const ynode *stage = ynode_get(a, "stage");
  CHECK_STR(stage->str, "exec");
  CHECK_INT(stage->line, 4);
  CHECK_INT(stage->col, 12);
  CHECK_INT(a->items[0]->line, 4); /* the key "stage" */
  CHECK_INT(a->items[0]->col, 5);
  const ynode *needs = ynode_get(a, "needs");
  CHECK_INT(needs->kind, YNODE_SEQ);
  CHECK_INT(needs->n, 2);
  CHECK_INT(needs->line, 5);
  CHECK_INT(needs->col, 12);
  CHECK_INT(needs->items[1]->col, 16);
  CHECK_INT(needs->items[1]->quoted, 1);
  CHECK_INT(needs->items[1]->style, YSTYLE_DOUBLE);
  CHECK_INT(needs->items[0]->quoted, 0);
  CHECK(ynode_get(a, "nope") == NULL);
  CHECK(ynode_get(stage, "x") == NULL);
  ynode_free(root);
  diags_free(&d);
}

static void test_utf8_columns(void) {
  /* Columns count characters, as an editor shows them. */
  diags d = {0};
  ynode *root = parse("name: \"h\xc3\xa9llo\"\nx: 1\n"
                      "\xc3\xa9t\xc3\xa9: v\n",
                      &d);
  const ynode *v = ynode_get(root, "\xc3\xa9t\xc3\xa9");
  CHECK(v != NULL);
  CHECK_INT(v->col, 6);
  ynode_free(root);
  diags_free(&d);
}

static void test_scalar_types(void) {
  diags d = {0};
  ynode *root = parse("i: 42\n"
                      "neg: -7\n"
                      "f: 0.02\n"
                      "e: 1e3\n"
                      "t: true\n"
                      "F: False\n"
                      "no: no\n"
                      "on: on\n"
                      "n1: ~\n"
                      "n2: null\n"
                      "n3:\n"
                      "q: \"5\"\n"
                      "sq: 'true'\n"
                      "hex: 0x10\n"
                      "inf: .inf\n"
                      "big: 99999999999999999999\n"
                      "tagged: !!str 12\n"
                      "block: |\n  text\n"
                      "s: hello\n",
                      &d);
  struct {
    const char *key;
    yscalar_type type;
    const char *name, *a;
  } cases[] = {
      {"i", YSCALAR_INT, "integer", "an integer"},
      {"neg", YSCALAR_INT, "integer", "an integer"},
      {"f", YSCALAR_FLOAT, "number", "a number"},
      {"e", YSCALAR_FLOAT, "number", "a number"},
      {"t", YSCALAR_BOOL, "boolean", "a boolean"},
      {"F", YSCALAR_BOOL, "boolean", "a boolean"},
      {"no", YSCALAR_STRING, "string", "a string"},
      {"on", YSCALAR_STRING, "string", "a string"},
      {"n1", YSCALAR_NULL, "null", "null"},
      {"n2", YSCALAR_NULL, "null", "null"},
      {"n3", YSCALAR_NULL, "null", "null"},
      {"q", YSCALAR_STRING, "string", "a string"},
      {"sq", YSCALAR_STRING, "string", "a string"},
      {"hex", YSCALAR_STRING, "string", "a string"},
      {"inf", YSCALAR_STRING, "string", "a string"},
      {"big", YSCALAR_FLOAT, "number", "a number"},
      {"tagged", YSCALAR_STRING, "string", "a string"},
      {"block", YSCALAR_STRING, "string", "a string"},
      {"s", YSCALAR_STRING, "string", "a string"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const ynode *v = ynode_get(root, cases[i].key);
    CHECK(v != NULL);
    if (!v)
      continue;
    if (ynode_scalar_type(v) != cases[i].type)
      fprintf(stderr, "  (key %s)\n", cases[i].key);
    CHECK_INT(ynode_scalar_type(v), cases[i].type);
    CHECK_STR(ynode_type_name(v), cases[i].name);
    CHECK_STR(ynode_a_type(v), cases[i].a);
  }
  int64_t x;
  double f;
  int b;
  CHECK_INT(ynode_int(ynode_get(root, "neg"), &x), 0);
  CHECK_INT(x, -7);
  CHECK_INT(ynode_int(ynode_get(root, "q"), &x), DR_EINVAL);
  CHECK_INT(ynode_int(ynode_get(root, "f"), &x), DR_EINVAL);
  CHECK_INT(ynode_float(ynode_get(root, "f"), &f), 0);
  CHECK_NEAR(f, 0.02, 1e-15);
  CHECK_INT(ynode_float(ynode_get(root, "i"), &f), 0);
  CHECK_NEAR(f, 42, 0);
  CHECK_INT(ynode_float(ynode_get(root, "s"), &f), DR_EINVAL);
  CHECK_INT(ynode_bool(ynode_get(root, "F"), &b), 0);
  CHECK_INT(b, 0);
  CHECK_INT(ynode_bool(ynode_get(root, "t"), &b), 0);
  CHECK_INT(b, 1);
  CHECK_INT(ynode_bool(ynode_get(root, "sq"), &b), DR_EINVAL);
  CHECK_STR(ynode_get(root, "block")->str, "text\n");
  CHECK_INT(ynode_get(root, "block")->style, YSTYLE_LITERAL);
  CHECK_STR(ynode_type_name(root), "map");
  CHECK_STR(ynode_kind_name(YNODE_SEQ), "list");
  ynode_free(root);
  diags_free(&d);
}

static void test_anchors_and_merge(void) {
  diags d = {0};
  ynode *root = parse("base: &base\n"
                      "  retries: 2\n"
                      "  timeout: 1h\n"
                      "extra: &extra {pool: gpu, retries: 9}\n"
                      "task:\n"
                      "  <<: [*base, *extra]\n"
                      "  timeout: 5m\n"
                      "copy: *base\n"
                      "quoted:\n"
                      "  \"<<\": not a merge\n",
                      &d);
  CHECK_INT(d.n, 0);
  const ynode *task = ynode_get(root, "task");
  /* Written keys win, then the first merged map, then the next. */
  CHECK_INT(task->n, 3);
  CHECK_STR(task->items[0]->str, "retries");
  CHECK_STR(task->items[1]->str, "2");
  CHECK_STR(task->items[2]->str, "pool");
  CHECK_STR(task->items[4]->str, "timeout");
  CHECK_STR(ynode_get(task, "timeout")->str, "5m");
  const ynode *copy = ynode_get(root, "copy");
  CHECK_INT(copy->kind, YNODE_MAP);
  CHECK_INT(copy->line, 8); /* the alias's own position */
  CHECK_INT(copy->col, 7);
  CHECK_STR(ynode_get(copy, "timeout")->str, "1h");
  CHECK_STR(ynode_get(ynode_get(root, "quoted"), "<<")->str, "not a merge");
  ynode_free(root);
  diags_free(&d);
}

static void test_errors(void) {
  char *s;
  s = parse_error("dag: x\ntasks:\n  a: 1\n b: 2\n");
  CHECK_STR(s, "dag.yaml:4:2: error: did not find expected key (while "
               "parsing a block mapping that started at line 1, column 1)");
  free(s);
  s = parse_error("tasks:\n\ta: 1\n");
  CHECK_STR(s, "dag.yaml:2:1: error: found character that cannot start any "
               "token (while scanning for the next token); YAML does not "
               "allow tabs for indentation, use spaces");
  free(s);
  s = parse_error("t: {stage: x, with: {input: ${params.corpus}}}\n");
  CHECK_STR(s, "dag.yaml:1:30: error: did not find expected ',' or '}' "
               "(while parsing a flow mapping that started at line 1, "
               "column 21); inside { } or [ ], a value containing ${...} "
               "must be quoted, as in \"${params.x}\"");
  free(s);
  s = parse_error("a: *nope\n");
  CHECK_STR(s, "dag.yaml:1:4: error: unknown anchor 'nope' in alias '*nope' "
               "(an anchor must be defined with '&nope' before it is used)");
  free(s);
  s = parse_error("a: 1\n---\nb: 2\n");
  CHECK_STR(s, "dag.yaml:2:1: error: found a second YAML document; a DAG "
               "file holds exactly one (remove the '---' line or split the "
               "file)");
  free(s);
  s = parse_error("a: &a [1]\nb:\n  <<: *a\n");
  CHECK_STR(s, "dag.yaml:3:7: error: the merge key '<<' expects a map or a "
               "list of maps (usually an alias such as *defaults), found a "
               "list");
  free(s);
  s = parse_error("a: \"\xff\"\n");
  CHECK_STR(s, "dag.yaml:1:5: error: invalid leading UTF-8 octet (byte "
               "0xff)");
  free(s);
}

static void test_alias_bomb(void) {
  /* Nine levels of ten: 10^9 values once expanded. */
  sbuf b = {0};
  sbuf_puts(&b, "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
  for (int i = 1; i <= 9; i++) {
    sbuf_printf(&b, "l%d: &l%d [", i, i);
    for (int j = 0; j < 10; j++)
      sbuf_printf(&b, "%s*l%d", j ? ", " : "", i - 1);
    sbuf_puts(&b, "]\n");
  }
  char *s = parse_error(b.s);
  CHECK_STR(s, "dag.yaml:10:10: error: aliases expand this document to more "
               "than 1000000 values (a string counts one more per 16 bytes; "
               "this alias alone stands for 1111111111); refusing to expand "
               "it (is an alias referring to an alias many times over?)");
  free(s);
  sbuf_free(&b);
}

/* A string's bytes count: 100 aliases of a 1 MiB string were 100 values,
 * and took gigabytes downstream. Ten of a 64 KiB one are fine. */
static void test_alias_string_bomb(void) {
  sbuf b = {0};
  sbuf_puts(&b, "s: &s \"");
  for (int i = 0; i < (1 << 20); i++)
    sbuf_putc(&b, 'A');
  sbuf_puts(&b, "\"\nl: [");
  for (int j = 0; j < 100; j++)
    sbuf_printf(&b, "%s*s", j ? ", " : "");
  sbuf_puts(&b, "]\n");
  char *s = parse_error(b.s);
  CHECK_STR(s, "dag.yaml:2:5: error: aliases expand this document to more "
               "than 1000000 values (a string counts one more per 16 bytes; "
               "this alias alone stands for 65537); refusing to expand it "
               "(is an alias referring to an alias many times over?)");
  free(s);
  sbuf_free(&b);
  sbuf_puts(&b, "s: &s \"");
  for (int i = 0; i < (1 << 16); i++)
    sbuf_putc(&b, 'A');
  sbuf_puts(&b, "\"\nl: [*s, *s, *s, *s, *s, *s, *s, *s, *s, *s]\n");
  diags d = {0};
  ynode *root = parse(b.s, &d);
  CHECK_INT(d.n, 0);
  const ynode *l = root ? ynode_get(root, "l") : NULL;
  CHECK(l && l->n == 10);
  ynode_free(root);
  diags_free(&d);
  sbuf_free(&b);
}

static void test_depth_limit(void) {
  sbuf b = {0};
  sbuf_puts(&b, "a: ");
  for (int i = 0; i < 100000; i++)
    sbuf_putc(&b, '[');
  for (int i = 0; i < 100000; i++)
    sbuf_putc(&b, ']');
  char *s = parse_error(b.s);
  CHECK_STR(s, "dag.yaml:1:259: error: lists and maps nested more than 256 "
               "levels deep");
  free(s);
  sbuf_free(&b);
}

static void test_empty_and_files(void) {
  diags d = {0};
  ynode *root = parse("# only a comment\n", &d);
  CHECK_INT(root->kind, YNODE_MAP);
  CHECK_INT(root->n, 0);
  ynode_free(root);
  root = parse("", &d);
  CHECK_INT(root->kind, YNODE_MAP);
  ynode_free(root);
  root = parse("[1, 2]", &d);
  CHECK_INT(root->kind, YNODE_SEQ);
  ynode_free(root);
  CHECK_INT(d.n, 0);
  ynode_free(NULL);

  CHECK_INT(ydoc_load("/nonexistent/dag.yaml", &root, &d), DR_ENOENT);
  CHECK(root == NULL);
  CHECK_INT(d.n, 1);
  char *s = diag_format(&d.v[0]);
  CHECK_STR(s, "/nonexistent/dag.yaml: error: cannot read the DAG file: no "
               "such file");
  free(s);
  diags_free(&d);

  /* A directory was "input/output error"; a FIFO blocked until written. */
  char dir[] = "/tmp/dagrun-ydoc.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char fifo[64];
  snprintf(fifo, sizeof fifo, "%s/f.yaml", dir);
  CHECK(mkfifo(fifo, 0600) == 0);
  const char *const paths[] = {dir, fifo};
  const char *const what[] = {"a directory", "a FIFO"};
  for (int i = 0; i < 2; i++) {
    CHECK_INT(ydoc_load(paths[i], &root, &d), DR_EIO);
    char want[256];
    snprintf(want, sizeof want,
             "%s: error: cannot read the DAG file: it is %s, not a file "
             "(expected a DAG file such as dags/pretrain.yaml)",
             paths[i], what[i]);
    s = diag_format(&d.v[0]);
    CHECK_STR(s, want);
    free(s);
    diags_free(&d);
  }
  unlink(fifo);
  rmdir(dir);

  CHECK_INT(
      ydoc_load(TEST_SOURCE_DIR "/tests/unit/fixtures/small.yaml", &root, &d),
      0);
  CHECK_INT(d.n, 0);
  CHECK_STR(ynode_get(root, "dag")->str, "small");
  ynode_free(root);
  diags_free(&d);
}

static void test_alloc(void) {
  diags d = {0};
  ynode *root = parse("a: 1\n", &d);
  ynode *m = ynode_alloc(root, YNODE_MAP, 2, 3, 4);
  CHECK_INT(m->kind, YNODE_MAP);
  CHECK_INT(m->n, 2);
  CHECK(m->items[3] == NULL);
  CHECK_INT(m->line, 3);
  ynode_free(root); /* frees m too (ASan would tell) */
  diags_free(&d);
}

int main(void) {
  test_positions();
  test_utf8_columns();
  test_scalar_types();
  test_anchors_and_merge();
  test_errors();
  test_alias_bomb();
  test_alias_string_bomb();
  test_depth_limit();
  test_empty_and_files();
  test_alloc();
  TEST_DONE();
}
