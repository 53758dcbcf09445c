/* Test plugin: sets one output (key=value), one metric and progress.
 * repeat: the value is value repeated that many times (an output too
 * large to give); raw_line: first writes a line of that many bytes
 * straight to the message pipe (a message too large to hold). */
#include <dagrun/plugin.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const dagrun_param_spec params[] = {
    {"key", DAGRUN_PARAM_STRING, "answer", 0, "Output key"},
    {"value", DAGRUN_PARAM_STRING, "42", 0, "Output value"},
    {"repeat", DAGRUN_PARAM_INT, "1", 0, "Times the value is repeated"},
    {"raw_line", DAGRUN_PARAM_INT, "0", 0,
     "Bytes of a line written to fd 3 first"},
    {NULL, 0, NULL, 0, NULL},
};

/* A line of n bytes ('x', then a newline) on fd 3, in pieces. */
static void write_raw_line(int64_t n) {
  static char chunk[1 << 16];
  memset(chunk, 'x', sizeof chunk);
  while (n > 0) {
    size_t k = n < (int64_t)sizeof chunk ? (size_t)n : sizeof chunk;
    if (write(3, chunk, k) != (ssize_t)k)
      return;
    n -= (int64_t)k;
  }
  (void)!write(3, "\n", 1);
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  const char *key = "answer", *value = "42";
  int64_t repeat = 1, raw = 0;
  host->param_string(ctx, "key", &key);
  host->param_string(ctx, "value", &value);
  host->param_int(ctx, "repeat", &repeat);
  host->param_int(ctx, "raw_line", &raw);
  if (raw > 0)
    write_raw_line(raw);
  char *big = NULL;
  if (repeat > 1) {
    size_t n = strlen(value);
    big = malloc(n * (size_t)repeat + 1);
    if (!big)
      return 1;
    for (int64_t i = 0; i < repeat; i++)
      memcpy(big + (size_t)i * n, value, n);
    big[n * (size_t)repeat] = '\0';
    value = big;
  }
  host->progress(ctx, 0.5, "half way");
  host->metric(ctx, "loss", 2.5, 7);
  int rc = host->output(ctx, key, value);
  free(big);
  if (rc != 0) {
    host->fail(ctx, "outputs: key '%s' refused", key);
    return 1;
  }
  host->progress(ctx, 1.0, NULL);
  return 0;
}

static const dagrun_stage stage = {DAGRUN_STAGE_HEADER,
                                   "outputs",
                                   "1.0",
                                   "Sets an output, a metric, progress (tests)",
                                   params,
                                   run,
                                   NULL,
                                   NULL};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
