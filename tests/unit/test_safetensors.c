/*
 * safetensors: what st_write writes, st_open reads back, byte for byte as
 * the format says (header length, padding, offsets); f32 -> bf16 rounds to
 * nearest even; files with a broken header or offsets are refused with a
 * message naming the file. (Python reading our files:
 * tests/integration/test_safetensors.sh.)
 */
#include "ckpt/safetensors.h"
#include "testlib.h"

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The whole file, malloc'd; *n its size. */
static char *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return NULL;
  fseek(fp, 0, SEEK_END);
  long sz = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *b = malloc((size_t)sz + 1);
  *n = fread(b, 1, (size_t)sz, fp);
  b[*n] = '\0';
  fclose(fp);
  return b;
}

static void test_exact_bytes(void) {
  char err[512] = "";
  float a[2] = {1.0f, -2.0f};
  st_tensor t = {
      .name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = a};
  const char *k[] = {"format"}, *v[] = {"pt"};
  const char *p = test_path("exact.safetensors");
  CHECK_INT(st_write(p, &t, 1, 0, k, v, 1, err, sizeof err), 0);
  CHECK(access(test_path("exact.safetensors.tmp"), F_OK) != 0);
  size_t n = 0;
  char *b = slurp(p, &n);
  if (!b)
    return;
  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":"
                     "\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t jl = strlen(json), hl = (jl + 7) / 8 * 8;
  CHECK_INT(n, 8 + hl + 8);
  uint64_t len = 0;
  for (int i = 0; i < 8; i++)
    len |= (uint64_t)(unsigned char)b[i] << (8 * i);
  CHECK_INT(len, hl);
  CHECK(hl % 8 == 0 && hl > jl);
  CHECK(memcmp(b + 8, json, jl) == 0);
  int spaces = 1;
  for (size_t i = 8 + jl; i < 8 + hl; i++)
    spaces &= b[i] == ' ';
  CHECK(spaces);
  CHECK(memcmp(b + 8 + hl, a, 8) == 0);
  free(b);
}

static void test_round_trip(void) {
  char err[512] = "";
  float w[12], s = 3.25f;
  for (int i = 0; i < 12; i++)
    w[i] = (float)i * 0.5f - 1.0f;
  uint16_t raw[3] = {0x3F80, 0xC020, 0x7FC0};
  st_tensor ts[5] = {
      {.name = "wte", .dtype = ST_F32, .ndim = 2, .shape = {4, 3}, .data = w},
      {.name = "scalar", .dtype = ST_F32, .ndim = 0, .data = &s},
      {.name = "empty", .dtype = ST_F32, .ndim = 2, .shape = {0, 3}},
      {.name = "h.0/\"odd\" name",
       .dtype = ST_F32,
       .ndim = 4,
       .shape = {1, 2, 1, 3},
       .data = w + 6},
      {.name = "w4", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = w},
  };
  const char *p = test_path("rt.safetensors");
  CHECK_INT(st_write(p, ts, 5, 0, NULL, NULL, 0, err, sizeof err), 0);
  st_file *f = NULL;
  CHECK_INT(st_open(p, &f, err, sizeof err), 0);
  if (!f) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  CHECK_INT(st_count(f), 5);
  for (size_t i = 0; i < 5; i++) {
    const st_tensor *t = st_at(f, i);
    CHECK_STR(t->name, ts[i].name);
    CHECK_INT(t->dtype, ST_F32);
    CHECK_INT(t->ndim, ts[i].ndim);
    long long numel = 1;
    for (int d = 0; d < t->ndim; d++) {
      CHECK_INT(t->shape[d], ts[i].shape[d]);
      numel *= t->shape[d];
    }
    if (numel)
      CHECK(memcmp(t->data, ts[i].data, (size_t)numel * 4) == 0);
  }
  CHECK(st_at(f, 5) == NULL);
  CHECK(st_find(f, "scalar") == st_at(f, 1));
  CHECK(st_find(f, "nope") == NULL);
  CHECK(st_meta(f, "format") == NULL);
  st_close(f);
  st_close(NULL);

  /* BF16 given as bf16 bits: written as they are. */
  st_tensor b = {
      .name = "b", .dtype = ST_BF16, .ndim = 1, .shape = {3}, .data = raw};
  const char *k[] = {"format", "step"}, *v[] = {"pt", "12"};
  CHECK_INT(st_write(p, &b, 1, 0, k, v, 2, err, sizeof err), 0);
  CHECK_INT(st_open(p, &f, err, sizeof err), 0);
  if (!f)
    return;
  CHECK_INT(st_count(f), 1);
  CHECK_INT(st_at(f, 0)->dtype, ST_BF16);
  CHECK(memcmp(st_at(f, 0)->data, raw, 6) == 0);
  CHECK_STR(st_meta(f, "format"), "pt");
  CHECK_STR(st_meta(f, "step"), "12");
  CHECK(st_meta(f, "other") == NULL);
  st_close(f);
}

/* f32 -> bf16, round to nearest even. */
static void test_bf16_rounding(void) {
  static const struct {
    uint32_t f32;
    uint16_t bf16;
  } cases[] = {
      {0x3F800000, 0x3F80}, /* 1 */
      {0x3F808000, 0x3F80}, /* 1 + 2^-8: a tie, to even (down) */
      {0x3F818000, 0x3F82}, /* 1 + 3 * 2^-8: a tie, to even (up) */
      {0x3F808001, 0x3F81}, /* just above the tie: up */
      {0x3F807FFF, 0x3F80}, /* just below: down */
      {0xBF808000, 0xBF80}, /* -(1 + 2^-8): ties to even too */
      {0xC0200000, 0xC020}, /* -2.5 */
      {0x00000000, 0x0000}, {0x80000000, 0x8000}, /* +-0 */
      {0x00008000, 0x0000},                       /* subnormal tie: to even */
      {0x00018000, 0x0002}, /* subnormal tie: to even (up) */
      {0x7F800000, 0x7F80}, {0xFF800000, 0xFF80}, /* +-inf */
      {0x7F7FFFFF, 0x7F80},                       /* FLT_MAX rounds to inf */
      {0x7F7F0000, 0x7F7F},                       /* the largest bf16 */
      {0x7FC00000, 0x7FC0},                       /* NaN stays NaN */
      {0x7F800001, 0x7FC0}, /* a NaN that would round to inf */
      {0xFFFFFFFF, 0xFFFF}, /* a NaN that would carry out */
      {0xFF800001, 0xFFC0}, /* negative signalling NaN */
  };
  enum { N = sizeof cases / sizeof *cases };
  float src[N];
  for (int i = 0; i < N; i++)
    src[i] = from_bits(cases[i].f32);
  st_tensor t = {
      .name = "x", .dtype = ST_BF16, .ndim = 1, .shape = {N}, .data = src};
  char err[512];
  const char *p = test_path("bf16.safetensors");
  CHECK_INT(st_write(p, &t, 1, 1, NULL, NULL, 0, err, sizeof err), 0);
  st_file *f = NULL;
  CHECK_INT(st_open(p, &f, err, sizeof err), 0);
  if (!f)
    return;
  const uint16_t *got = st_at(f, 0)->data;
  for (int i = 0; i < N; i++) {
    if (got[i] != cases[i].bf16)
      fprintf(stderr, "  f32 0x%08X -> bf16 0x%04X, expected 0x%04X\n",
              cases[i].f32, got[i], cases[i].bf16);
    CHECK_INT(got[i], cases[i].bf16);
  }
  /* Every bf16 result is a NaN exactly when its f32 was. */
  for (int i = 0; i < N; i++) {
    float back = from_bits((uint32_t)got[i] << 16);
    CHECK(isnan(back) == isnan(src[i]));
  }
  st_close(f);

  /* A large tensor, converted in blocks: every value checked. */
  enum { M = 200003 };
  float *big = malloc(M * sizeof(float));
  for (int i = 0; i < M; i++)
    big[i] = (float)i * 1.0001f;
  st_tensor bt = {
      .name = "big", .dtype = ST_BF16, .ndim = 1, .shape = {M}, .data = big};
  CHECK_INT(st_write(p, &bt, 1, 1, NULL, NULL, 0, err, sizeof err), 0);
  CHECK_INT(st_open(p, &f, err, sizeof err), 0);
  if (f) {
    const uint16_t *h = st_at(f, 0)->data;
    int bad = 0;
    for (int i = 0; i < M; i++) {
      float back = from_bits((uint32_t)h[i] << 16);
      /* Within half a bf16 ulp (2^-8 relative). */
      if (fabsf(back - big[i]) > fabsf(big[i]) * (1.0f / 256))
        bad++;
    }
    CHECK_INT(bad, 0);
    st_close(f);
  }
  free(big);
}

/* A file with the given header text (not padded) and n data bytes. */
static const char *raw_file(const char *name, const char *json, size_t n,
                            long long hlen_override) {
  const char *p = test_path("%s", name);
  FILE *fp = fopen(p, "wb");
  uint64_t hl = hlen_override >= 0 ? (uint64_t)hlen_override : strlen(json);
  for (int i = 0; i < 8; i++)
    fputc((int)((hl >> (8 * i)) & 0xFF), fp);
  fputs(json, fp);
  for (size_t i = 0; i < n; i++)
    fputc(0, fp);
  fclose(fp);
  return p;
}

static void refused(const char *p, const char *want) {
  char err[1024] = "";
  st_file *f = (st_file *)1;
  CHECK_INT(st_open(p, &f, err, sizeof err), -1);
  CHECK(f == NULL);
  char full[1200];
  snprintf(full, sizeof full, "%s: %s", p, want);
  CHECK_STR(err, full);
}

#define T1(off)                                                                \
  "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" off "}}"

static void test_refused(void) {
  /* A good one first, so the ones below fail for their reason only. */
  char err[512];
  st_file *f = NULL;
  CHECK_INT(st_open(raw_file("ok", T1("[0,8]"), 8, -1), &f, err, sizeof err),
            0);
  st_close(f);

  refused(raw_file("short", "", 0, 4), "header length 4 beyond the file's 8 "
                                       "bytes");
  /* raw_file writes the 8-byte prefix; make it 5 bytes long. */
  const char *tiny = test_path("tiny");
  FILE *fp = fopen(tiny, "wb");
  fputs("abcde", fp);
  fclose(fp);
  refused(tiny, "5 bytes, too short for a safetensors file");
  refused(raw_file("hlen", T1("[0,8]"), 8, 1000),
          "header length 1000 beyond the file's 70 bytes");
  refused(raw_file("hlen2", T1("[0,8]"), 8, (long long)1 << 62),
          "header length 4611686018427387904 beyond the file's 70 bytes");
  refused(raw_file("badjson", "{\"t\": [", 8, -1),
          "header is not a JSON object");
  refused(raw_file("notobj", "[1,2]   ", 8, -1), "header is not a JSON object");
  refused(raw_file("range", T1("[0,16]"), 8, -1),
          "tensor \"t\": data_offsets [0, 16] beyond the data section's 8 "
          "bytes");
  refused(raw_file("size", T1("[0,4]"), 8, -1),
          "tensor \"t\": 4 bytes in data_offsets, but F32 x 2 elements is 8");
  refused(raw_file("reversed", T1("[8,0]"), 8, -1),
          "tensor \"t\": data_offsets must be [begin, end] with begin <= end");
  refused(raw_file("negative", T1("[-8,0]"), 8, -1),
          "tensor \"t\": data_offsets must be [begin, end] with begin <= end");
  refused(raw_file("gap", T1("[4,12]"), 12, -1),
          "tensor \"t\": data_offsets leave a gap of 4 bytes before it");
  refused(raw_file("trailing", T1("[0,8]"), 12, -1),
          "4 bytes of data after the last tensor (the data section has 12, "
          "the tensors cover 8)");
  refused(raw_file("overlap",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
                   "[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                   "\"data_offsets\":[4,12]}}",
                   12, -1),
          "tensor \"b\": data_offsets overlap another tensor's");
  refused(raw_file("dtype",
                   "{\"t\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":"
                   "[0,2]}}",
                   2, -1),
          "tensor \"t\": dtype \"I8\" is not supported (F32, BF16 and F16 "
          "are)");
  /* F16 is read (two bytes an element) but never written. */
  refused(raw_file("f16size",
                   "{\"t\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":"
                   "[0,8]}}",
                   8, -1),
          "tensor \"t\": 8 bytes in data_offsets, but F16 x 2 elements is 4");
  refused(raw_file("dims",
                   "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],"
                   "\"data_offsets\":[0,8]}}",
                   8, -1),
          "tensor \"t\": 5 dimensions, at most 4 supported");
  refused(raw_file("shape",
                   "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],"
                   "\"data_offsets\":[0,8]}}",
                   8, -1),
          "tensor \"t\": shape[0] is not a size");
  refused(
      raw_file("fields", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, -1),
      "tensor \"t\": needs \"dtype\" (a string), \"shape\" and "
      "\"data_offsets\" (arrays)");
  refused(raw_file("meta", "{\"__metadata__\":{\"a\":1}}", 0, -1),
          "__metadata__ \"a\" is not a string");
  refused(raw_file("dup",
                   "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":"
                   "[0,4]},\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                   "\"data_offsets\":[4,8]}}",
                   8, -1),
          "tensor \"t\" listed twice");
  refused(raw_file("junk", T1("[0,8]") " x", 8, -1),
          "header is not a JSON object");
  refused(test_path("missing"), "No such file or directory");

  /* A file we wrote, then truncated or with its prefix bumped. */
  float d[2] = {1, 2};
  st_tensor t = {
      .name = "t", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = d};
  const char *p = test_path("cut.safetensors");
  CHECK_INT(st_write(p, &t, 1, 0, NULL, NULL, 0, err, sizeof err), 0);
  size_t full = 0;
  free(slurp(p, &full));
  CHECK_INT(truncate(p, (off_t)full - 4), 0);
  refused(p, "tensor \"t\": data_offsets [0, 8] beyond the data section's 4 "
             "bytes");

  /* Writing: names that cannot be written. */
  st_tensor two[2] = {t, t};
  CHECK_INT(st_write(p, two, 2, 0, NULL, NULL, 0, err, sizeof err), -1);
  char want[600];
  snprintf(want, sizeof want, "%s: tensor \"t\" given twice", p);
  CHECK_STR(err, want);
  two[1].name = "__metadata__";
  CHECK_INT(st_write(p, two, 2, 0, NULL, NULL, 0, err, sizeof err), -1);
  two[1].name = "u";
  two[1].ndim = 5;
  CHECK_INT(st_write(p, two, 2, 0, NULL, NULL, 0, err, sizeof err), -1);
  CHECK_INT(st_write("/nonexistent-dir/x.safetensors", &t, 1, 0, NULL, NULL, 0,
                     err, sizeof err),
            -1);
  CHECK_STR(err, "cannot write /nonexistent-dir/x.safetensors: No such file "
                 "or directory");
}

/* F16 is read, never written: st_write refuses it, naming the tensor. */
static void test_f16_not_written(void) {
  char err[512] = "";
  const uint16_t h[2] = {0x3c00, 0xc000};
  st_tensor t = {
      .name = "h", .dtype = ST_F16, .ndim = 1, .shape = {2}, .data = h};
  CHECK_INT(st_write(test_path("f16.safetensors"), &t, 1, 0, NULL, NULL, 0, err,
                     sizeof err),
            -1);
  CHECK(strstr(err, "tensor \"h\": dtype 2 is not written (F32 and BF16 "
                    "are)") != NULL);
  /* And the conversion itself, at its edges. */
  CHECK(st_f16_to_f32(0x3c00) == 1.0f && st_f16_to_f32(0xc000) == -2.0f);
  CHECK(st_f16_to_f32(0x0001) == 0x1p-24f &&
        st_f16_to_f32(0x03ff) == 0x3ffp-24f);
  CHECK(st_f16_to_f32(0x7bff) == 65504.0f && st_f16_to_f32(0x7c00) > 1e38f);
  float nan = st_f16_to_f32(0x7e00);
  CHECK(nan != nan);
}

int main(void) {
  if (test_tmpdir_make("safetensors") != 0)
    return 1;
  test_exact_bytes();
  test_round_trip();
  test_bf16_rounding();
  test_refused();
  test_f16_not_written();
  test_tmpdir_remove();
  TEST_DONE();
}
