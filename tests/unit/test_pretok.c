/*
 * The GPT-2 pre-tokenizer: the table of tricky splits in
 * tests/reference/pretok_cases.json (which the reference test also runs
 * through gpt-3-encoder's own regex), invalid UTF-8, and long runs; and
 * the same with Hugging Face's Digits first (SmolLM's Sequence).
 */
#include "testlib.h"

#include "lib/bpe/pretok.h"

#include <cjson/cJSON.h>
#include <stdint.h>

static pretok *P;

/* Pieces of text joined as "[a][b]..." for readable failures. */
static char *pieces_str(const char *text, size_t len) {
  size_t *offs, n;
  char err[256];
  if (pretok_split(P, text, len, &offs, &n, err, sizeof err) != 0)
    return strdup(err);
  sbuf b = {0};
  for (size_t i = 0; i < n; i++)
    sbuf_printf(&b, "[%.*s]", (int)(offs[i + 1] - offs[i]), text + offs[i]);
  free(offs);
  char *s = sbuf_take(&b);
  return s ? s : strdup("");
}

static void test_table(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/reference/pretok_cases.json",
           TEST_SOURCE_DIR);
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f)
    return;
  char *buf = malloc(1 << 20);
  size_t len = fread(buf, 1, 1 << 20, f);
  fclose(f);
  cJSON *cases = cJSON_ParseWithLength(buf, len);
  free(buf);
  CHECK(cJSON_IsArray(cases));
  CHECK(cJSON_GetArraySize(cases) >= 30);
  const cJSON *c;
  cJSON_ArrayForEach(c, cases) {
    const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
    sbuf want = {0};
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(c, "pieces"))
        sbuf_printf(&want, "[%s]", p->valuestring);
    char *w = sbuf_take(&want);
    char *got = pieces_str(text, strlen(text));
    CHECK_STR(got, w ? w : "");
    free(got);
    free(w);
  }
  cJSON_Delete(cases);
}

/* Checks the pieces tile text: each non-empty, in order, no gaps. */
static int tiles(const char *text, size_t len) {
  size_t *offs, n;
  char err[256];
  if (pretok_split(P, text, len, &offs, &n, err, sizeof err) != 0)
    return 0;
  int ok = offs[0] == 0 || n == 0;
  for (size_t i = 0; i < n; i++)
    ok &= offs[i + 1] > offs[i];
  ok &= offs[n] == len;
  free(offs);
  return ok;
}

static void test_invalid_utf8(void) {
  /* Bytes no match covers are pieces of their own. */
  char *s = pieces_str("abc\xff\xfe"
                       "def \xe4\xbd",
                       11);
  CHECK_STR(s, "[abc][\xff\xfe][def][ ][\xe4\xbd]");
  free(s);
  s = pieces_str(" \xff", 2);
  CHECK_STR(s, "[ ][\xff]");
  free(s);
  /* An overlong encoding and a lone continuation byte. */
  s = pieces_str("x\xc0\xafy\x80", 5);
  CHECK_STR(s, "[x][\xc0\xaf][y][\x80]");
  free(s);
  /* NUL is an ordinary (punctuation-class) character. */
  size_t *offs, n;
  char err[256];
  CHECK_INT(pretok_split(P, "a\0b", 3, &offs, &n, err, sizeof err), 0);
  CHECK_INT(n, 3);
  free(offs);

  /* Random bytes, any values: every byte in exactly one piece. */
  uint64_t x = 88172645463325252ull;
  char buf[4096];
  int ok = 1;
  for (int seed = 0; seed < 300; seed++) {
    size_t len = (size_t)(seed * 13) % sizeof buf;
    for (size_t i = 0; i < len; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[i] = (char)(x >> 24);
    }
    ok &= tiles(buf, len);
  }
  CHECK(ok);
}

static void test_long_runs(void) {
  /* A megabyte of spaces before a word: one piece of all but the last
   * space, then " x". No JIT stack trouble. */
  size_t n = 1 << 20;
  char *t = malloc(n + 2);
  memset(t, ' ', n);
  t[n] = 'x';
  size_t *offs, np;
  char err[256];
  CHECK_INT(pretok_split(P, t, n + 1, &offs, &np, err, sizeof err), 0);
  CHECK_INT(np, 2);
  if (np == 2) {
    CHECK_INT(offs[1], n - 1);
    CHECK_INT(offs[2], n + 1);
  }
  free(offs);
  /* A megabyte of letters, and of newlines alternating with tabs. */
  memset(t, 'a', n + 1);
  CHECK_INT(pretok_split(P, t, n + 1, &offs, &np, err, sizeof err), 0);
  CHECK_INT(np, 1);
  free(offs);
  for (size_t i = 0; i < n; i++)
    t[i] = i % 2 ? '\t' : '\n';
  CHECK_INT(pretok_split(P, t, n, &offs, &np, err, sizeof err), 0);
  CHECK_INT(np, 1);
  free(offs);
  free(t);
}

/* The pieces' ends, with or without the ASCII fast path. */
static size_t ends(pretok_matcher *m, const char *t, size_t len, size_t *out,
                   size_t cap) {
  size_t s, n, k = 0;
  pretok_begin(m, t, len);
  while (k < cap && pretok_next(m, &s, &n) == 1)
    out[k++] = s + n;
  return k;
}

static void test_fast_path(void) {
  /* Random text from pieces that exercise every rule of the pattern at
   * ASCII / non-ASCII borders: both ways must split identically. */
  static const char *const bits[] = {"a",
                                     "Z",
                                     "7",
                                     " ",
                                     "  ",
                                     "\t",
                                     "\n",
                                     "\r\n",
                                     "\v",
                                     "\f",
                                     "\x1c",
                                     "'",
                                     "'s",
                                     "'re",
                                     "'ll",
                                     "'ve",
                                     "'d",
                                     "'m",
                                     "'t",
                                     "'r",
                                     "'x",
                                     "!",
                                     "..",
                                     "\0",
                                     "\x7f",
                                     "\xc3\xa9",
                                     "\xc2\xa0",
                                     "\xe4\xb8\xad",
                                     "\xd9\xa3",
                                     "\xcc\x81",
                                     "\xff",
                                     "\xe2\x80\x83",
                                     "\xf0\x9f\xa4\x96",
                                     "_",
                                     "-"};
  size_t nb = sizeof bits / sizeof *bits;
  pretok_matcher *fast = pretok_matcher_create(P);
  pretok_matcher *slow = pretok_matcher_create(P);
  pretok_matcher_set_fast(slow, 0);
  char buf[512];
  size_t ef[600], es[600];
  uint64_t x = 0x2545F4914F6CDD1Dull;
  int ok = 1;
  for (int iter = 0; iter < 20000; iter++) {
    size_t len = 0, want = (size_t)(iter % 60);
    while (len < want) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      size_t b = x % nb;
      size_t bl = b == 23 ? 1 : strlen(bits[b]); /* "\0" */
      memcpy(buf + len, bits[b], bl);
      len += bl;
    }
    size_t nf = ends(fast, buf, len, ef, 600);
    size_t ns = ends(slow, buf, len, es, 600);
    if (nf != ns || memcmp(ef, es, nf * sizeof *ef) != 0) {
      if (ok) {
        fprintf(stderr, "fast and PCRE2 splits differ on:");
        for (size_t i = 0; i < len; i++)
          fprintf(stderr, " %02x", (unsigned char)buf[i]);
        fprintf(stderr, "\n");
      }
      ok = 0;
    }
  }
  CHECK(ok);
  pretok_matcher_destroy(fast);
  pretok_matcher_destroy(slow);
}

/* Digits as Hugging Face's Rust tokenizers has it: char::is_numeric
 * (\p{N}, so "²" and Arabic-Indic digits too), each one a piece or each
 * run; the pattern then splits what lies between, each stretch alone. */
static void test_digits(void) {
  char err[256];
  CHECK_INT(pretok_get_digits(P), PRETOK_DIGITS_NONE);
  CHECK_INT(pretok_set_digits(P, PRETOK_DIGITS_INDIVIDUAL, err, sizeof err), 0);
  CHECK_INT(pretok_get_digits(P), PRETOK_DIGITS_INDIVIDUAL);
  static const char *const cases[][3] = {
      {"On 2024-03, pi 3.14",
       "[On][ ][2][0][2][4][-][0][3][,][ pi][ ][3][.][1][4]",
       "[On][ ][2024][-][03][,][ pi][ ][3][.][14]"},
      {"x\xc2\xb2"
       "3\xc2\xbd \xd9\xa3\xd9\xa4",
       "[x][\xc2\xb2][3][\xc2\xbd][ ][\xd9\xa3][\xd9\xa4]",
       "[x][\xc2\xb2"
       "3\xc2\xbd][ ][\xd9\xa3\xd9\xa4]"},
      {"a\xff"
       "1  b 22",
       "[a][\xff][1][ ][ b][ ][2][2]", "[a][\xff][1][ ][ b][ ][22]"},
      {"", "", ""},
      {"9", "[9]", "[9]"},
      {"abc def", "[abc][ def]", "[abc][ def]"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    for (int c = 0; c < 2; c++) {
      pretok_set_digits(P,
                        c ? PRETOK_DIGITS_CONTIGUOUS : PRETOK_DIGITS_INDIVIDUAL,
                        err, sizeof err);
      char *s = pieces_str(cases[i][0], strlen(cases[i][0]));
      CHECK_STR(s, cases[i][1 + c]);
      free(s);
    }
  }
}

int main(void) {
  char err[256];
  CHECK_INT(pretok_create(&P, err, sizeof err), 0);
  test_table();
  test_invalid_utf8();
  test_long_runs();
  test_fast_path();
  pretok_destroy(P);
  /* The same splitter after Digits: the ASCII fast path still agrees
   * with PCRE2, and invalid UTF-8 and long runs still tile the text. */
  CHECK_INT(pretok_create(&P, err, sizeof err), 0);
  test_digits();
  for (int c = 0; c < 2; c++) {
    CHECK_INT(pretok_set_digits(
                  P, c ? PRETOK_DIGITS_CONTIGUOUS : PRETOK_DIGITS_INDIVIDUAL,
                  err, sizeof err),
              0);
    test_long_runs();
    test_fast_path();
  }
  pretok_destroy(P);
  pretok_destroy(NULL);
  TEST_DONE();
}
