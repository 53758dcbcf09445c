/*
 * st_dump: safetensors files from the command line, for
 * tests/integration/test_safetensors.sh, where Python (json + numpy, no
 * safetensors package) is the independent reader and writer.
 *
 *   st_dump write PATH   writes the fixed tensors below
 *   st_dump read PATH    prints "meta KEY=VALUE" per metadata entry, then
 *                        per tensor "NAME DTYPE [d0,d1,...] v0 v1 ..."
 *                        with the values as float, %.9g
 */
#include "ckpt/safetensors.h"

#include <stdio.h>
#include <string.h>

static int do_write(const char *path) {
  /* wte (4,3) F32: i / 2 - 1; ln (6,) BF16 converted from f32, with
   * ties that round to even; scalar () F32; empty (0,3) F32. */
  float wte[12], ln[6] = {1.0f,
                          1.00390625f /* 1 + 2^-8 */,
                          1.01171875f /* 1 + 3 * 2^-8 */,
                          -2.5f,
                          1e30f,
                          3.14159265f};
  float scalar = 3.25f;
  for (int i = 0; i < 12; i++)
    wte[i] = (float)i / 2 - 1;
  st_tensor t[4] = {
      {.name = "wte", .dtype = ST_F32, .ndim = 2, .shape = {4, 3}, .data = wte},
      {.name = "ln", .dtype = ST_BF16, .ndim = 1, .shape = {6}, .data = ln},
      {.name = "scalar", .dtype = ST_F32, .ndim = 0, .data = &scalar},
      {.name = "empty", .dtype = ST_F32, .ndim = 2, .shape = {0, 3}},
  };
  const char *k[] = {"format", "step"}, *v[] = {"pt", "12"};
  char err[512];
  if (st_write(path, t, 4, 1, k, v, 2, err, sizeof err) != 0) {
    fprintf(stderr, "st_dump: %s\n", err);
    return 1;
  }
  return 0;
}

static int do_read(const char *path) {
  char err[512];
  st_file *f = NULL;
  if (st_open(path, &f, err, sizeof err) != 0) {
    fprintf(stderr, "st_dump: %s\n", err);
    return 1;
  }
  const char *keys[] = {"format", "step", "note"};
  for (int i = 0; i < 3; i++)
    if (st_meta(f, keys[i]))
      printf("meta %s=%s\n", keys[i], st_meta(f, keys[i]));
  for (size_t i = 0; i < st_count(f); i++) {
    const st_tensor *t = st_at(f, i);
    printf("%s %s [", t->name,
           t->dtype == ST_BF16  ? "BF16"
           : t->dtype == ST_F16 ? "F16"
                                : "F32");
    long long n = 1;
    for (int d = 0; d < t->ndim; d++) {
      printf("%s%lld", d ? "," : "", (long long)t->shape[d]);
      n *= t->shape[d];
    }
    printf("]");
    for (long long j = 0; j < n; j++) {
      float x;
      if (t->dtype == ST_BF16) {
        uint16_t h;
        memcpy(&h, (const char *)t->data + 2 * j, 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&x, &u, 4);
      } else if (t->dtype == ST_F16) {
        uint16_t h;
        memcpy(&h, (const char *)t->data + 2 * j, 2);
        x = st_f16_to_f32(h);
      } else {
        memcpy(&x, (const char *)t->data + 4 * j, 4);
      }
      printf(" %.9g", x);
    }
    printf("\n");
  }
  st_close(f);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "write") == 0)
    return do_write(argv[2]);
  if (argc == 3 && strcmp(argv[1], "read") == 0)
    return do_read(argv[2]);
  fprintf(stderr, "usage: st_dump write|read PATH\n");
  return 2;
}
