/* Test plugin: writes every param it received, with its type, to
 * <out>/params.txt, one per line:
 *   s string hello        i int 42        f float 2.5      b bool true
 *   l list 2 / l[0] a / l[1] b            m map 1 / m[k] v
 *   x absent              (getter returned an error)
 * Integration tests compare it with what the YAML said. */
#include <dagrun/plugin.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dagrun_param_spec params[] = {
    {"s", DAGRUN_PARAM_STRING, "default-s", 0, "a string"},
    {"i", DAGRUN_PARAM_INT, "7", 0, "an int"},
    {"f", DAGRUN_PARAM_FLOAT, "0.5", 0, "a float"},
    {"b", DAGRUN_PARAM_BOOL, "false", 0, "a bool"},
    {"l", DAGRUN_PARAM_LIST, NULL, 0, "a list"},
    {"m", DAGRUN_PARAM_MAP, NULL, 0, "a map"},
    {NULL, 0, NULL, 0, NULL},
};

static void put_float(FILE *f, double d) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.15g", d);
  if (strtod(buf, NULL) != d)
    snprintf(buf, sizeof(buf), "%.17g", d);
  fprintf(f, "%s", buf);
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  const char *dir = host->dir(ctx, DAGRUN_DIR_OUT);
  char path[4096];
  snprintf(path, sizeof(path), "%s/params.txt", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    host->fail(ctx, "echo_params: cannot write %s", path);
    return 1;
  }
  const char *s;
  int64_t i;
  double d;
  int b;
  size_t n;
  if (host->param_string(ctx, "s", &s) == 0)
    fprintf(f, "s string %s\n", s);
  else
    fprintf(f, "s absent\n");
  if (host->param_int(ctx, "i", &i) == 0)
    fprintf(f, "i int %" PRId64 "\n", i);
  else
    fprintf(f, "i absent\n");
  if (host->param_float(ctx, "f", &d) == 0) {
    fprintf(f, "f float ");
    put_float(f, d);
    fprintf(f, "\n");
  } else {
    fprintf(f, "f absent\n");
  }
  if (host->param_bool(ctx, "b", &b) == 0)
    fprintf(f, "b bool %s\n", b ? "true" : "false");
  else
    fprintf(f, "b absent\n");
  if (host->param_list_size(ctx, "l", &n) == 0) {
    fprintf(f, "l list %zu\n", n);
    for (size_t k = 0; k < n; k++)
      if (host->param_list_item(ctx, "l", k, &s) == 0)
        fprintf(f, "l[%zu] %s\n", k, s);
  } else {
    fprintf(f, "l absent\n");
  }
  if (host->param_map_size(ctx, "m", &n) == 0) {
    fprintf(f, "m map %zu\n", n);
    for (size_t k = 0; k < n; k++) {
      const char *key, *value;
      if (host->param_map_entry(ctx, "m", k, &key, &value) == 0)
        fprintf(f, "m[%s] %s\n", key, value);
    }
  } else {
    fprintf(f, "m absent\n");
  }
  if (fclose(f) != 0) {
    host->fail(ctx, "echo_params: cannot write %s", path);
    return 1;
  }
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "echo_params",
                                   "1.0",
                                   "Writes the params it got to out/params.txt "
                                   "(tests)",
                                   params,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
