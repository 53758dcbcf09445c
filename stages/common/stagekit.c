/* Param and timing helpers of the built-in stages; see stagekit.h. */
#include "stagekit.h"
#include "lib/clock.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int stagekit_parse_size(const char *z, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(z, &end);
  if (end == z || errno || !(v >= 0) || !isfinite(v))
    return -1;
  while (*end == ' ')
    end++;
  static const struct {
    const char *unit;
    double mult;
  } units[] = {
      {"", 1},           {"b", 1},
      {"k", 1024.0},     {"kib", 1024.0},          {"kb", 1e3},
      {"m", 1048576.0},  {"mib", 1048576.0},       {"mb", 1e6},
      {"g", 1073741824.0}, {"gib", 1073741824.0},  {"gb", 1e9},
      {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12},
  };
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    if (strcasecmp(end, units[i].unit) == 0) {
      double b = v * units[i].mult;
      /* The largest double below 2^64: anything above does not fit. */
      if (b >= 18446744073709549568.0)
        return -1;
      *out = (uint64_t)b;
      return 0;
    }
  }
  return -1;
}

unsigned stagekit_cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    return (unsigned)CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1;
}

uint64_t stagekit_peak_rss(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (uint64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

double stagekit_lap(double *t) {
  double now = clock_monotonic(), d = now - *t;
  *t = now;
  return d;
}

int stagekit_param_int(dagrun_ctx *ctx, const dagrun_host *h,
                       const char *name, int64_t lo, int64_t hi,
                       int64_t *out) {
  if (h->param_int(ctx, name, out) != 0 || *out < lo || *out > hi) {
    h->fail(ctx, "%s must be an integer from %lld to %lld", name,
            (long long)lo, (long long)hi);
    return -1;
  }
  return 0;
}

int stagekit_param_choice(dagrun_ctx *ctx, const dagrun_host *h,
                          const char *name, const char *const *values,
                          int *out) {
  char num[32] = "";
  const char *z = NULL;
  int64_t v;
  if (h->param_string(ctx, name, &z) != 0) {
    z = num;
    if (h->param_int(ctx, name, &v) == 0)
      snprintf(num, sizeof num, "%lld", (long long)v);
  }
  for (int i = 0; values[i]; i++) {
    if (strcmp(z, values[i]) == 0) {
      *out = i;
      return 0;
    }
  }
  char list[512] = "";
  size_t n = 0;
  for (int i = 0; values[i] && n < sizeof list; i++)
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                          values[i]);
  h->fail(ctx, "%s must be one of %s, not '%s'", name, list, z);
  return -1;
}
