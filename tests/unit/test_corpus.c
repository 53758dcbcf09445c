/*
 * The shard stage's building blocks: input expansion, document splitting
 * (text separators, JSONL, gzip), UTF-8 validation, quality filters, JSON
 * escaping, and the plan (dedup, shuffle, balanced assignment).
 */
#include "testlib.h"

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "shard/corpus.h"
#include "shard/docfilter.h"
#include "shard/shardplan.h"

static char tmpdir[] = "/tmp/test_corpus.XXXXXX";

static char *tpath(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static void put_file(const char *name, const char *data, size_t n) {
  FILE *f = fopen(tpath(name), "wb");
  if (!f) {
    perror(name);
    exit(2);
  }
  fwrite(data, 1, n, f);
  fclose(f);
}

static void put_str(const char *name, const char *data) {
  put_file(name, data, strlen(data));
}

static void write_gz(const char *name, const char *data, size_t n) {
  gzFile g = gzopen(tpath(name), "wb");
  if (!g || gzwrite(g, data, (unsigned)n) != (int)n) {
    fprintf(stderr, "gzwrite %s failed\n", name);
    exit(2);
  }
  gzclose(g);
}

/* The documents of a file, as "status|line|text" lines: easy to compare
 * whole. Read errors appear as "ERROR|reason". */
static char *read_docs(const char *name, const corpus_opts *o) {
  corpus_reader *r = corpus_reader_create(o);
  sbuf b = {0};
  char err[256];
  if (corpus_reader_open(r, tpath(name), err, sizeof(err)) != 0) {
    sbuf_printf(&b, "OPEN|%s\n", err);
  } else {
    corpus_doc d;
    int rc;
    while ((rc = corpus_reader_next(r, &d, err, sizeof(err))) == 1) {
      static const char *st[] = {"ok",       "empty",     "too_large",
                                 "too_long", "malformed", "missing"};
      sbuf_printf(&b, "%s|%llu|", st[d.status], (unsigned long long)d.line);
      if (d.status == CORPUS_DOC_OK)
        for (size_t i = 0; i < d.len; i++) {
          if (d.text[i] == '\n')
            sbuf_puts(&b, "\\n");
          else if (d.text[i] == '\r')
            sbuf_puts(&b, "\\r");
          else
            sbuf_printf(&b, "%c", d.text[i]);
        }
      else if (d.why[0])
        sbuf_puts(&b, d.why);
      sbuf_puts(&b, "\n");
    }
    if (rc < 0)
      sbuf_printf(&b, "ERROR|%s\n", err);
  }
  corpus_reader_destroy(r);
  sbuf_puts(&b, "");
  return sbuf_take(&b);
}

#define CHECK_DOCS(name, opts, want)                                           \
  do {                                                                         \
    char *got_ = read_docs(name, opts);                                        \
    CHECK_STR(got_, want);                                                     \
    free(got_);                                                                \
  } while (0)

static corpus_opts text_opts(corpus_sep sep, const char *line) {
  corpus_opts o = {.format = CORPUS_TEXT,
                   .sep = sep,
                   .sep_line = line,
                   .text_field = "text",
                   .max_doc = 1 << 20};
  return o;
}

static void test_separators(void) {
  corpus_opts pct = text_opts(CORPUS_SEP_LINE, "%");
  /* Separator lines with LF or CRLF; CRLF inside a document is kept. */
  const char a[] = "one\n%\ntwo\r\nlines\r\n%\r\nthree";
  put_file("a.txt", a, sizeof(a) - 1);
  CHECK_DOCS("a.txt", &pct, "ok|1|one\nok|3|two\\r\\nlines\nok|6|three\n");
  /* A trailing separator opens no document; "a" and "a\n" end alike. */
  put_str("b.txt", "one\n%\n");
  CHECK_DOCS("b.txt", &pct, "ok|1|one\n");
  put_str("b2.txt", "one\n%\n\n");
  CHECK_DOCS("b2.txt", &pct, "ok|1|one\nempty|3|\n");
  /* Two separators in a row, or one first: an empty document each, with
   * the line of the separator that ends it. */
  put_str("c.txt", "%\none\n%\n%\ntwo\n");
  CHECK_DOCS("c.txt", &pct, "empty|1|\nok|2|one\nempty|4|\nok|5|two\n");
  /* Only a line of exactly the separator separates. */
  put_str("d.txt", "a\n%%\n % \n%x\nb\n");
  CHECK_DOCS("d.txt", &pct, "ok|1|a\\n%%\\n % \\n%x\\nb\n");
  /* A longer separator. */
  corpus_opts eod = text_opts(CORPUS_SEP_LINE, "<|endoftext|>");
  put_str("e.txt", "x\n<|endoftext|>\ny");
  CHECK_DOCS("e.txt", &eod, "ok|1|x\nok|3|y\n");

  corpus_opts blank = text_opts(CORPUS_SEP_BLANK, NULL);
  /* Runs of blank lines (also spaces, tabs, CR) are one separator, and
   * never make empty documents, at the start or the end either. */
  const char f[] =
      "\n\npara one\nstill one\n\n \t\n\r\npara two\r\n\r\nthree\n\n";
  put_file("f.txt", f, sizeof(f) - 1);
  CHECK_DOCS("f.txt", &blank,
             "ok|3|para one\\nstill one\nok|8|para two\nok|10|three\n");

  corpus_opts none = text_opts(CORPUS_SEP_NONE, NULL);
  put_str("g.txt", "whole\n%\nfile\n");
  CHECK_DOCS("g.txt", &none, "ok|1|whole\\n%\\nfile\n");
  put_str("g2.txt", "whole file");
  CHECK_DOCS("g2.txt", &none, "ok|1|whole file\n");
  /* A file of one newline is an empty document; a file of no bytes has
   * no document, and says so by its byte count. */
  put_str("h.txt", "\n");
  CHECK_DOCS("h.txt", &none, "empty|1|\n");
  put_str("empty.txt", "");
  CHECK_DOCS("empty.txt", &none, "");
  corpus_reader *r = corpus_reader_create(&none);
  char err[128];
  corpus_doc d;
  CHECK_INT(corpus_reader_open(r, tpath("empty.txt"), err, sizeof(err)), 0);
  CHECK_INT(corpus_reader_next(r, &d, err, sizeof(err)), 0);
  CHECK_INT(corpus_reader_bytes(r), 0);
  corpus_reader_destroy(r);
  /* A byte order mark is not text. */
  put_str("bom.txt", "\xEF\xBB\xBFhi\n%\nyo\n");
  CHECK_DOCS("bom.txt", &pct, "ok|1|hi\nok|3|yo\n");
  /* A missing file fails to open with the reason. */
  CHECK_DOCS("nope.txt", &none, "OPEN|No such file or directory\n");
}

static void test_too_large(void) {
  /* Documents over max_doc are reported without being kept, and the
   * documents after them are read as usual. */
  corpus_opts o = text_opts(CORPUS_SEP_LINE, "%");
  o.max_doc = 10;
  put_str("big.txt", "short\n%\n0123456789\n%\n0123456789ABC\nmore\n%\nend");
  CHECK_DOCS("big.txt", &o,
             "ok|1|short\nok|3|0123456789\ntoo_large|5|\nok|8|end\n");
  /* A lower max_bytes caps it first, as too_long. */
  o.max_bytes = 5;
  CHECK_DOCS("big.txt", &o, "ok|1|short\ntoo_long|3|\ntoo_long|5|\nok|8|end\n");
  corpus_opts j = {.format = CORPUS_JSONL,
                   .sep = CORPUS_SEP_NONE,
                   .sep_line = NULL,
                   .text_field = "text",
                   .max_doc = 20};
  put_str(
      "big.jsonl",
      "{\"text\":\"a\"}\n{\"text\":\"0123456789abcdef\"}\n{\"text\":\"b\"}\n");
  CHECK_DOCS("big.jsonl", &j, "ok|1|a\ntoo_large|2|\nok|3|b\n");
}

static const char jsonl[] =
    "{\"text\":\"hello\",\"n\":1}\n"                /* 1 */
    "\n"                                            /* 2: blank, skipped */
    "{\"text\": \"two\\nlines \\u00e9\"}\r\n"       /* 3 */
    "{\"txt\":\"no\"}\n"                            /* 4 */
    "{\"text\":5}\n"                                /* 5 */
    "{\"text\":\"oops\"\n"                          /* 6 */
    "[1,2]\n"                                       /* 7 */
    "{\"text\":\"\"}\n"                             /* 8 */
    "{\"text\":\"end\"} x\n"                        /* 9: trailing garbage */
    "{\"text\":\"nul \\u0000 here\"}\n"             /* 10: NUL */
    "{\"text\":\"not nul \\\\u0000\"}\n"            /* 11: \\ then u0000 */
    "  {\"other\":{\"text\":1},\"text\":\"last\"}"; /* 12, no newline */

static const char jsonl_want[] =
    "ok|1|hello\n"
    "ok|3|two\\nlines \xc3\xa9\n"
    "missing|4|no field \"text\"\n"
    "missing|5|not a string: field \"text\"\n"
    "malformed|6|malformed JSON: unexpected end of line\n"
    "missing|7|line is not a JSON object\n"
    "empty|8|\n"
    "malformed|9|malformed JSON at column 16\n"
    "malformed|10|\\u0000 (NUL) in the line: not supported, the text would "
    "be cut short\n"
    "ok|11|not nul \\u0000\n"
    "ok|12|last\n";

static void test_jsonl(void) {
  corpus_opts o = {.format = CORPUS_JSONL,
                   .sep = CORPUS_SEP_NONE,
                   .sep_line = NULL,
                   .text_field = "text",
                   .max_doc = 1 << 20};
  put_file("a.jsonl", jsonl, sizeof(jsonl) - 1);
  CHECK_DOCS("a.jsonl", &o, jsonl_want);
  /* Another field name. */
  corpus_opts o2 = o;
  o2.text_field = "txt";
  CHECK_DOCS("a.jsonl", &o2,
             "missing|1|no field \"txt\"\nmissing|3|no field \"txt\"\n"
             "ok|4|no\nmissing|5|no field \"txt\"\n"
             "malformed|6|malformed JSON: unexpected end of line\n"
             "missing|7|line is not a JSON object\n"
             "missing|8|no field \"txt\"\n"
             "malformed|9|malformed JSON at column 16\n"
             "missing|10|no field \"txt\"\n"
             "missing|11|no field \"txt\"\n"
             "missing|12|no field \"txt\"\n");
}

static void test_gzip(void) {
  /* A .gz reads exactly as its plain content, for both formats. */
  corpus_opts o = {.format = CORPUS_JSONL,
                   .sep = CORPUS_SEP_NONE,
                   .sep_line = NULL,
                   .text_field = "text",
                   .max_doc = 1 << 20};
  write_gz("a.jsonl.gz", jsonl, sizeof(jsonl) - 1);
  CHECK_DOCS("a.jsonl.gz", &o, jsonl_want);
  corpus_opts pct = text_opts(CORPUS_SEP_LINE, "%");
  const char t[] = "one\n%\ntwo\r\n%\r\nthree\n";
  write_gz("t.gz", t, sizeof(t) - 1);
  CHECK_DOCS("t.gz", &pct, "ok|1|one\nok|3|two\nok|5|three\n");
  /* An empty gzip stream is an empty file. */
  write_gz("e.gz", "", 0);
  CHECK_DOCS("e.gz", &pct, "");

  /* Incompressible-ish content so the stream is long enough to cut. */
  size_t n = 200000;
  char *big = malloc(n);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    big[i] = (char)('a' + x % 26);
    if (i % 61 == 60)
      big[i] = '\n';
  }
  write_gz("big.gz", big, n);
  free(big);
  FILE *f = fopen(tpath("big.gz"), "rb");
  fseek(f, 0, SEEK_END);
  long gzn = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *gz = malloc((size_t)gzn);
  CHECK_INT(fread(gz, 1, (size_t)gzn, f), gzn);
  fclose(f);
  corpus_opts none = text_opts(CORPUS_SEP_NONE, NULL);
  /* Cut in half: an error that says truncated, not a short document. */
  put_file("cut.gz", gz, (size_t)gzn / 2);
  char *got = read_docs("cut.gz", &none);
  CHECK(strstr(got, "ERROR|truncated gzip data") != NULL);
  CHECK(strstr(got, "ok|") == NULL);
  free(got);
  /* Garbage in the middle: an error too. */
  memset(gz + gzn / 2, 0x55, 64);
  put_file("bad.gz", gz, (size_t)gzn);
  got = read_docs("bad.gz", &none);
  CHECK(strncmp(got, "ERROR|", 6) == 0);
  CHECK(strstr(got, "ok|") == NULL);
  free(got);
  free(gz);
}

/* A NUL byte makes a file binary, wherever it is and whatever the format;
 * a FIFO is refused at open without blocking on it. */
static void test_binary(void) {
  corpus_opts none = text_opts(CORPUS_SEP_NONE, NULL);
  corpus_opts pct = text_opts(CORPUS_SEP_LINE, "%");
  char *zeros = calloc(20000, 1);
  put_file("nul.txt", zeros, 20000);
  CHECK_DOCS("nul.txt", &none, "ERROR|binary data: a NUL byte at byte 0\n");
  /* Text first, the NUL in a later chunk: the error still comes, after
   * documents the caller must then drop with the file. */
  char *late = malloc(70000);
  memset(late, 'a', 70000);
  memcpy(late, "doc\n%\n", 6);
  late[69000] = '\0';
  put_file("late.txt", late, 70000);
  char *got = read_docs("late.txt", &pct);
  CHECK(strstr(got, "ERROR|binary data: a NUL byte at byte 69000\n") != NULL);
  free(got);
  write_gz("nul.gz", zeros, 100);
  CHECK_DOCS("nul.gz", &pct, "ERROR|binary data: a NUL byte at byte 0\n");
  free(late);
  free(zeros);
  /* A FIFO nobody writes to: a blocking open would never return. */
  CHECK_INT(mkfifo(tpath("fifo"), 0600), 0);
  char want[600];
  snprintf(want, sizeof(want), "OPEN|%s is a FIFO, not a regular file\n",
           tpath("fifo"));
  CHECK_DOCS("fifo", &none, want);
  unlink(tpath("fifo"));
}

static void test_utf8(void) {
  static const struct {
    const char *s;
    size_t n, want;
  } cases[] = {
      {"", 0, 0},
      {"plain ascii text!", 17, 17},
      {"caf\xc3\xa9", 5, 5},
      {"\xe2\x82\xac", 3, 3},     /* U+20AC */
      {"\xf0\x9f\x98\x80", 4, 4}, /* U+1F600 */
      {"\xf4\x8f\xbf\xbf", 4, 4}, /* U+10FFFF, the last */
      {"\xed\x9f\xbf", 3, 3},     /* U+D7FF, before surrogates */
      {"\xee\x80\x80", 3, 3},     /* U+E000, after them */
      {"a\0b", 3, 3},             /* NUL is a character */
      {"ab\xc0\xaf", 4, 2},       /* overlong '/' */
      {"\xc1\xbf", 2, 0},         /* overlong */
      {"\xe0\x80\xaf", 3, 0},     /* overlong 3-byte */
      {"\xe0\x9f\xbf", 3, 0},     /* overlong 3-byte, top */
      {"\xf0\x8f\xbf\xbf", 4, 0}, /* overlong 4-byte */
      {"x\xed\xa0\x80", 4, 1},    /* U+D800 surrogate */
      {"\xed\xbf\xbf", 3, 0},     /* U+DFFF surrogate */
      {"\xf4\x90\x80\x80", 4, 0}, /* U+110000 */
      {"\xf5\x80\x80\x80", 4, 0}, /* lead byte past F4 */
      {"\xff", 1, 0},
      {"\x80", 1, 0},         /* lone continuation */
      {"abc\xc3", 4, 3},      /* truncated at the end */
      {"\xe2\x82", 2, 0},     /* truncated 3-byte */
      {"\xf0\x9f\x98", 3, 0}, /* truncated 4-byte */
      {"\xe2\x82z", 3, 0},    /* continuation missing */
      {"\xc3\xa9\xc3(", 4, 2},
      {"12345678\xc3\xa9"
       "12345678\xff",
       19, 18}, /* past the fast path */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t got = docfilter_utf8_check(cases[i].s, cases[i].n);
    if (got != cases[i].want)
      fprintf(stderr, "utf8 case %zu: got %zu, want %zu\n", i, got,
              cases[i].want);
    CHECK_INT(got, cases[i].want);
  }
  /* Every single byte: ASCII valid, the rest not alone. */
  for (int c = 0; c < 256; c++) {
    char b = (char)c;
    CHECK_INT(docfilter_utf8_check(&b, 1), c < 0x80 ? 1 : 0);
  }
}

static void test_filters(void) {
  CHECK_NEAR(docfilter_alpha_ratio("abcd", 4), 1.0, 1e-12);
  CHECK_NEAR(docfilter_alpha_ratio("ab12", 4), 0.5, 1e-12);
  CHECK_NEAR(docfilter_alpha_ratio("a b ", 4), 0.5, 1e-12);
  /* Non-ASCII counts as one letter per code point, not per byte. */
  CHECK_NEAR(docfilter_alpha_ratio("\xc3\xa9\xe2\x82\xac"
                                   "1",
                                   6),
             2.0 / 3, 1e-12);
  CHECK_NEAR(docfilter_alpha_ratio("", 0), 0.0, 0);

  docfilter *f = docfilter_create(&(docfilter_opts){0, 0, 0, 1});
  double r = -1;
  CHECK_INT(docfilter_repeated_line_ratio(f, "a\nb\nc\n", 6, &r), 0);
  CHECK_NEAR(r, 0.0, 0);
  /* 5 non-empty lines, "a" twice more and "b" once more: 3 repeats. */
  const char *rep = "a\nb\n\na\r\nb\na\n\n";
  CHECK_INT(docfilter_repeated_line_ratio(f, rep, strlen(rep), &r), 0);
  CHECK_NEAR(r, 3.0 / 5, 1e-12);
  CHECK_INT(docfilter_repeated_line_ratio(f, "\n\n", 2, &r), 0);
  CHECK_NEAR(r, 0.0, 0);
  docfilter_destroy(f);
  docfilter_destroy(NULL);

  /* Each filter on its own, and off by default. */
  struct {
    docfilter_opts o;
    const char *doc;
    docfilter_verdict want;
  } cases[] = {
      {{0, 0, 0, 1}, "x", DOCFILTER_KEEP},
      {{5, 0, 0, 1}, "abcd", DOCFILTER_TOO_SHORT},
      {{5, 0, 0, 1}, "abcde", DOCFILTER_KEEP},
      {{0, 5, 0, 1}, "abcde", DOCFILTER_KEEP},
      {{0, 5, 0, 1}, "abcdef", DOCFILTER_TOO_LONG},
      {{0, 0, 0.5, 1}, "ab12", DOCFILTER_KEEP},
      {{0, 0, 0.5, 1}, "a123", DOCFILTER_LOW_ALPHA},
      {{0, 0, 0, 0.3}, "x\ny\nx\nz\n", DOCFILTER_KEEP},           /* 1/4 */
      {{0, 0, 0, 0.3}, "x\ny\nx\nx\n", DOCFILTER_REPEATED_LINES}, /* 2/4 */
      {{0, 0, 0, 0}, "x\nx", DOCFILTER_REPEATED_LINES},
      /* The first failing filter names the drop. */
      {{10, 0, 0.9, 0}, "1\n1", DOCFILTER_TOO_SHORT},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    docfilter *g = docfilter_create(&cases[i].o);
    docfilter_verdict v = DOCFILTER_NVERDICTS;
    CHECK_INT(docfilter_check(g, cases[i].doc, strlen(cases[i].doc), &v), 0);
    if (v != cases[i].want)
      fprintf(stderr, "filter case %zu: %s, want %s\n", i,
              docfilter_verdict_name(v), docfilter_verdict_name(cases[i].want));
    CHECK_INT(v, cases[i].want);
    docfilter_destroy(g);
  }
  CHECK_STR(docfilter_verdict_name(DOCFILTER_REPEATED_LINES), "repeated_lines");
}

static void test_escape(void) {
  /* Every byte from 0 to 127 plus UTF-8, escaped, parses back (cJSON is
   * the independent reader) to exactly the same bytes. NUL is left out:
   * cJSON strings end at it. */
  char in[200];
  size_t n = 0;
  for (int c = 1; c < 128; c++)
    in[n++] = (char)c;
  memcpy(in + n, "\xc3\xa9\xf0\x9f\x98\x80\xe2\x80\xa8", 9);
  n += 9;
  char out[2048];
  size_t used = 0;
  size_t w = corpus_json_escape(in, n, out + 1, sizeof(out) - 3, &used);
  CHECK_INT(used, n);
  out[0] = '"';
  out[w + 1] = '"';
  out[w + 2] = '\0';
  cJSON *s = cJSON_Parse(out);
  CHECK(cJSON_IsString(s));
  if (cJSON_IsString(s)) {
    CHECK_INT(strlen(s->valuestring), n);
    CHECK(memcmp(s->valuestring, in, n) == 0);
  }
  cJSON_Delete(s);
  /* Named escapes where JSON has them, \u00XX for the other controls. */
  char e[64];
  w = corpus_json_escape("a\"\\\n\t\x01\x7f", 7, e, sizeof(e), &used);
  e[w] = '\0';
  CHECK_STR(e, "a\\\"\\\\\\n\\t\\u0001\x7f");
  CHECK_INT(corpus_json_escape("\0", 1, e, sizeof(e), &used), 6);
  /* Streamed through a tiny buffer: an escape is never split, and the
   * pieces add up to the one-shot result. */
  sbuf b = {0};
  const char *src = "ab\"cd\n\x02"
                    "ef";
  size_t done = 0, len = strlen(src);
  while (done < len) {
    char tiny[7];
    size_t k =
        corpus_json_escape(src + done, len - done, tiny, sizeof(tiny), &used);
    CHECK(k > 0);
    sbuf_printf(&b, "%.*s", (int)k, tiny);
    done += used;
  }
  char *whole = sbuf_take(&b);
  CHECK_STR(whole, "ab\\\"cd\\n\\u0002ef");
  free(whole);
}

static void test_expand(void) {
  char d[600];
  snprintf(d, sizeof(d), "%s/corpus", tmpdir);
  mkdir(d, 0755);
  mkdir(tpath("corpus/sub"), 0755);
  mkdir(tpath("corpus/sub/deeper"), 0755);
  mkdir(tpath("corpus/skipdir"), 0755);
  put_str("corpus/b.txt", "b");
  put_str("corpus/a.txt", "aa");
  put_str("corpus/a.dat", "x");
  put_str("corpus/.hidden", "x");
  put_str("corpus/sub/c.txt", "c");
  put_str("corpus/sub/deeper/d.txt.gz", "d");
  put_str("corpus/skipdir/e.txt", "e");
  CHECK_INT(symlink("nowhere", tpath("corpus/dangling")), 0);
  /* A loop back to the top is walked once, and listed as one. A FIFO is
   * listed as what it is, not left out unsaid. */
  CHECK_INT(symlink("..", tpath("corpus/sub/up")), 0);
  CHECK_INT(mkfifo(tpath("corpus/sub/pipe"), 0600), 0);

  const char *in[] = {"corpus"};
  const char *ex[] = {"*.dat", "skip*"};
  corpus_files fl = {0};
  char err[512];
  CHECK_INT(corpus_expand(in, 1, tmpdir, ex, 2, &fl, err, sizeof(err)), 0);
  sbuf b = {0};
  for (size_t i = 0; i < fl.n; i++)
    sbuf_printf(&b, "%s %llu %d %s\n", fl.v[i].path + strlen(tmpdir) + 1,
                (unsigned long long)fl.v[i].size, fl.v[i].stat_errno,
                fl.v[i].not_regular ? fl.v[i].not_regular : "-");
  char *got = sbuf_take(&b);
  CHECK_STR(got, "corpus/a.txt 2 0 -\n"
                 "corpus/b.txt 1 0 -\n"
                 "corpus/dangling 0 2 -\n"
                 "corpus/sub/c.txt 1 0 -\n"
                 "corpus/sub/deeper/d.txt.gz 1 0 -\n"
                 "corpus/sub/pipe 0 0 a FIFO\n"
                 "corpus/sub/up 0 0 a symlink loop\n");
  free(got);
  corpus_files_free(&fl);

  /* Globs; an overlap with another input is read once; a file named
   * outright is not excluded. */
  char g1[600], g2[600];
  snprintf(g1, sizeof(g1), "%s/corpus/*.txt", tmpdir);
  snprintf(g2, sizeof(g2), "%s/corpus/a.dat", tmpdir);
  const char *in2[] = {g1, "corpus/a.txt", g2};
  CHECK_INT(corpus_expand(in2, 3, tmpdir, ex, 2, &fl, err, sizeof(err)), 0);
  CHECK_INT(fl.n, 3);
  if (fl.n == 3) {
    CHECK(strstr(fl.v[0].path, "corpus/a.dat") != NULL);
    CHECK(strstr(fl.v[1].path, "corpus/a.txt") != NULL);
    CHECK(strstr(fl.v[2].path, "corpus/b.txt") != NULL);
  }
  corpus_files_free(&fl);

  /* A FIFO named outright is listed as a FIFO (it was EINVAL: the user
   * read "Invalid argument"). */
  const char *fifo[] = {"corpus/sub/pipe"};
  CHECK_INT(corpus_expand(fifo, 1, tmpdir, NULL, 0, &fl, err, sizeof(err)), 0);
  CHECK_INT(fl.n, 1);
  if (fl.n == 1) {
    CHECK_INT(fl.v[0].stat_errno, 0);
    CHECK_STR(fl.v[0].not_regular ? fl.v[0].not_regular : "-", "a FIFO");
  }
  corpus_files_free(&fl);

  /* Inputs that yield nothing are errors that name them. */
  const char *none1[] = {"corpus/*.nothing"};
  CHECK_INT(corpus_expand(none1, 1, tmpdir, NULL, 0, &fl, err, sizeof(err)),
            CORPUS_ENOMATCH);
  CHECK(strstr(err, "corpus/*.nothing matched no files") != NULL);
  const char *none2[] = {"missing-dir"};
  CHECK_INT(corpus_expand(none2, 1, tmpdir, NULL, 0, &fl, err, sizeof(err)),
            CORPUS_ENOMATCH);
  CHECK(strstr(err, "missing-dir matched no files") != NULL);
  mkdir(tpath("emptydir"), 0755);
  const char *none3[] = {"corpus", "emptydir"};
  CHECK_INT(corpus_expand(none3, 2, tmpdir, NULL, 0, &fl, err, sizeof(err)),
            CORPUS_ENOMATCH);
  CHECK(strstr(err, "emptydir matched no files") != NULL);
  CHECK_INT(fl.n, 0);
}

static shard_rec rec(uint64_t h, uint32_t file, uint32_t doc, uint32_t len) {
  shard_rec r = {h * 7919, h, file, doc, (uint64_t)file * 1000 + doc,
                 len,      0, 0};
  return r;
}

static void test_plan(void) {
  /* Records from two "threads" in any order; duplicates keep the first
   * in (file, doc) order. */
  shard_recs l[2] = {{0}};
  shard_rec a[] = {rec(5, 2, 0, 10), rec(1, 0, 1, 10), rec(5, 1, 3, 10),
                   rec(9, 1, 0, 10), rec(1, 0, 0, 10), rec(5, 1, 2, 10)};
  for (int i = 0; i < 6; i++)
    CHECK_INT(shard_recs_push(&l[i % 2], &a[i]), 0);
  /* pop drops the most recent ones, as for a file that failed halfway. */
  shard_rec extra = rec(77, 3, 0, 1);
  shard_recs_push(&l[0], &extra);
  shard_recs_pop(&l[0], 1);
  CHECK_INT(l[0].n, 3);
  shard_rec *v;
  size_t n;
  CHECK_INT(shardplan_gather(l, 2, &v, &n), 0);
  CHECK_INT(n, 6);
  CHECK_INT(l[0].n + l[1].n, 0);
  size_t k = shardplan_dedup(v, n);
  CHECK_INT(k, 3);
  /* Kept: hash 1 at (0,0), hash 9 at (1,0), hash 5 at (1,2). */
  CHECK(v[0].file == 0 && v[0].doc == 0 && v[0].hash_lo == 1);
  CHECK(v[1].file == 1 && v[1].doc == 0 && v[1].hash_lo == 9);
  CHECK(v[2].file == 1 && v[2].doc == 2 && v[2].hash_lo == 5);
  shardplan_free_array(v, n);

  /* Many records across many chunks: gather keeps them all, dedup finds
   * exactly the planted duplicates, shuffle is a seeded permutation. */
  size_t big = 100000;
  shard_recs one = {0};
  for (size_t i = 0; i < big; i++) {
    shard_rec r = rec(i % 90000, (uint32_t)(i / 1000), (uint32_t)(i % 1000),
                      (uint32_t)(1 + (i * 2654435761u) % 5000));
    shard_recs_push(&one, &r);
  }
  CHECK_INT(shardplan_gather(&one, 1, &v, &n), 0);
  CHECK_INT(n, big);
  k = shardplan_dedup(v, n);
  CHECK_INT(k, 90000);
  int sorted = 1;
  for (size_t i = 1; i < k; i++)
    sorted &= v[i - 1].file < v[i].file ||
              (v[i - 1].file == v[i].file && v[i - 1].doc < v[i].doc);
  CHECK(sorted);
  /* The same seed gives the same order; another seed another. */
  shard_rec *w = malloc(k * sizeof(*w)), *u = malloc(k * sizeof(*u));
  memcpy(w, v, k * sizeof(*w));
  memcpy(u, v, k * sizeof(*u));
  shardplan_shuffle(v, k, 42);
  shardplan_shuffle(w, k, 42);
  shardplan_shuffle(u, k, 43);
  CHECK(memcmp(v, w, k * sizeof(*v)) == 0);
  CHECK(memcmp(v, u, k * sizeof(*v)) != 0);
  size_t moved = 0;
  uint64_t sum = 0;
  for (size_t i = 0; i < k; i++) {
    moved += v[i].hash_lo != i;
    sum += v[i].hash_lo;
  }
  CHECK(moved > k * 9 / 10);
  CHECK_INT(sum, (uint64_t)k * (k - 1) / 2); /* still a permutation */
  free(w);
  free(u);

  /* Balance: every shard within one record of its group's mean. */
  size_t nval = shardplan_val_count(k, 0.05);
  CHECK_INT(nval, 4500);
  unsigned ntrain = 7, nvs = 3;
  uint64_t bytes[10], docs[10];
  CHECK_INT(shardplan_assign(v, k, nval, ntrain, nvs, bytes, docs), 0);
  uint64_t maxlen = 0, tb = 0, vb = 0, td = 0, vd = 0;
  for (size_t i = 0; i < k; i++) {
    if (v[i].len > maxlen)
      maxlen = v[i].len;
    CHECK(i < nval ? v[i].dest >= ntrain : v[i].dest < ntrain);
  }
  for (unsigned s = 0; s < ntrain; s++)
    tb += bytes[s], td += docs[s];
  for (unsigned s = ntrain; s < ntrain + nvs; s++)
    vb += bytes[s], vd += docs[s];
  CHECK_INT(td, k - nval);
  CHECK_INT(vd, nval);
  for (unsigned s = 0; s < ntrain + nvs; s++) {
    double mean = s < ntrain ? (double)tb / ntrain : (double)vb / nvs;
    double off = (double)bytes[s] - mean;
    CHECK(off <= (double)maxlen && -off <= (double)maxlen);
  }
  /* group: shard by shard, the shuffled order kept inside each. */
  shard_rec *before = malloc(k * sizeof(*before));
  memcpy(before, v, k * sizeof(*v));
  shardplan_group(v, k);
  int grouped = 1;
  for (size_t i = 1; i < k; i++)
    grouped &= v[i - 1].dest < v[i].dest ||
               (v[i - 1].dest == v[i].dest && v[i - 1].doc < v[i].doc);
  CHECK(grouped);
  CHECK(v[0].hash_lo == before[v[0].doc].hash_lo);
  free(before);
  shardplan_free_array(v, n);

  /* pop across chunk boundaries (a chunk holds ~6,500 records). */
  shard_recs c = {0};
  for (uint32_t i = 0; i < 20000; i++) {
    shard_rec r = rec(i, 0, i, 1);
    shard_recs_push(&c, &r);
  }
  shard_recs_pop(&c, 12345);
  CHECK_INT(c.n, 7655);
  shard_rec more = rec(99999, 1, 0, 1);
  CHECK_INT(shard_recs_push(&c, &more), 0);
  CHECK_INT(shardplan_gather(&c, 1, &v, &n), 0);
  CHECK_INT(n, 7656);
  int in_order = 1;
  for (size_t i = 0; i + 1 < n; i++)
    in_order &= v[i].doc == i;
  CHECK(in_order);
  CHECK_INT(v[n - 1].hash_lo, 99999);
  shardplan_free_array(v, n);
  shard_recs_push(&c, &more);
  shard_recs_pop(&c, 5); /* more than there are: empties the list */
  CHECK_INT(c.n, 0);
  CHECK(c.head == NULL && c.tail == NULL);
  shard_recs_free(&c);

  CHECK_INT(shardplan_val_count(1, 0.5), 0);
  CHECK_INT(shardplan_val_count(2, 0.001), 1);
  CHECK_INT(shardplan_val_count(10, 0.99), 9);
  CHECK_INT(shardplan_val_count(1000, 0), 0);
  CHECK_INT(shardplan_val_count(1000, 0.0104), 10);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 2;
  }
  test_separators();
  test_too_large();
  test_jsonl();
  test_gzip();
  test_binary();
  test_utf8();
  test_filters();
  test_escape();
  test_expand();
  test_plan();
  if (!test_failures_) {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", tmpdir);
  }
  TEST_DONE();
}
