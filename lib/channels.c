/*
 * channels: the exec command's outputs, metrics and progress files,
 * forwarded through the host table (channels.h).
 */

#include "channels.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bad metrics lines logged one by one; later ones are only counted. */
#define CHAN_MAX_WARNINGS 10
/* A metrics line longer than this is not one a training script writes:
 * it is skipped rather than held in memory. */
#define CHAN_MAX_LINE (1 << 20)
/* How much of the progress file's end is read for its last line. */
#define CHAN_PROGRESS_TAIL 4096

enum { CH_OUTPUTS, CH_METRICS, CH_PROGRESS, CH_N };

static const char *const var_names[CH_N] = {"DAGRUN_OUTPUTS", "DAGRUN_METRICS",
                                            "DAGRUN_PROGRESS"};
static const char *const file_stems[CH_N] = {
    "command-outputs", "command-metrics", "command-progress"};
static const char *const file_exts[CH_N] = {".json", ".jsonl", ".txt"};

struct chan {
  char *path[CH_N];
  char *env[CH_N + 1]; /* "NAME=path", NULL */
  /* Metrics: bytes consumed, the line being read, lines seen. */
  off_t off;
  char *part;
  size_t npart, cap;
  long line;
  long bad;     /* skipped lines */
  int skipping; /* the current line is over CHAN_MAX_LINE: drop it */
  /* Progress: what the file looked like when last read, the last line. */
  off_t psize;
  struct timespec pmtime;
  char *plast;
  unsigned warned_irregular; /* bit per channel: said it is no file */
};

static char *str_printf(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0)
    s = NULL;
  va_end(ap);
  return s;
}

chan *chan_create(const char *dir, int rank) {
  chan *c = calloc(1, sizeof(*c));
  if (!c)
    return NULL;
  for (int k = 0; k < CH_N; k++) {
    char rk[32] = "";
    if (rank > 0)
      snprintf(rk, sizeof(rk), ".rank-%d", rank);
    c->path[k] = str_printf("%s/%s%s%s", dir, file_stems[k], rk, file_exts[k]);
    c->env[k] =
        c->path[k] ? str_printf("%s=%s", var_names[k], c->path[k]) : NULL;
    if (!c->env[k]) {
      chan_destroy(c);
      return NULL;
    }
    /* An attempt's directory is new; a worker run by hand may reuse one. */
    (void)unlink(c->path[k]);
  }
  return c;
}

void chan_destroy(chan *c) {
  if (!c)
    return;
  for (int k = 0; k < CH_N; k++) {
    free(c->path[k]);
    free(c->env[k]);
  }
  free(c->part);
  free(c->plast);
  free(c);
}

const char *const *chan_environ(const chan *c) {
  return (const char *const *)c->env;
}

/* One bad metrics line (what: "line", or "metric" when only one member
 * of it is bad): a warning while there are few, a count after. */
static void metric_warn(chan *c, dagrun_ctx *ctx, const dagrun_host *host,
                        const char *what, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void metric_warn(chan *c, dagrun_ctx *ctx, const dagrun_host *host,
                        const char *what, const char *fmt, ...) {
  if (c->bad++ >= CHAN_MAX_WARNINGS)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  host->log(ctx, DAGRUN_LOG_WARN, "DAGRUN_METRICS file %s:%ld: %s; %s skipped",
            c->path[CH_METRICS], c->line, msg, what);
}

/* A step: an integer >= 0, written as a JSON number. */
static int get_step(const cJSON *v, int64_t *step) {
  if (!cJSON_IsNumber(v))
    return -1;
  double d = v->valuedouble;
  if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d))
    return -1;
  *step = (int64_t)d;
  return 0;
}

/* One complete metrics line (n bytes, no newline). */
static void metric_line(chan *c, dagrun_ctx *ctx, const dagrun_host *host,
                        const char *s, size_t n) {
  c->line++;
  while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  size_t i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\t'))
    i++;
  if (i == n)
    return; /* blank lines are allowed */
  cJSON *j = cJSON_ParseWithLength(s + i, n - i);
  if (!cJSON_IsObject(j)) {
    metric_warn(c, ctx, host, "line", "%s (%.*s%s)",
                j ? "not a JSON object" : "not JSON",
                (int)(n - i > 60 ? 60 : n - i), s + i, n - i > 60 ? "..." : "");
    cJSON_Delete(j);
    return;
  }
  int64_t step;
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
  if (!st) {
    metric_warn(c, ctx, host, "line",
                "no \"step\" (write {\"step\": N, \"loss\": ...})");
  } else if (get_step(st, &step) != 0) {
    metric_warn(c, ctx, host, "line", "\"step\" must be an integer >= 0");
  } else {
    const cJSON *m;
    cJSON_ArrayForEach(m, j) {
      if (m == st)
        continue;
      if (!m->string || !*m->string) {
        metric_warn(c, ctx, host, "metric", "a metric with an empty name");
      } else if (!cJSON_IsNumber(m)) {
        metric_warn(c, ctx, host, "metric", "metric '%s' is not a number",
                    m->string);
      } else {
        host->metric(ctx, m->string, m->valuedouble, step);
      }
    }
  }
  cJSON_Delete(j);
}

/* Appends bytes to the line being read; CHAN_MAX_LINE and beyond drop it. */
static void part_add(chan *c, dagrun_ctx *ctx, const dagrun_host *host,
                     const char *s, size_t n) {
  if (c->skipping)
    return;
  if (c->npart + n > CHAN_MAX_LINE) {
    c->line++;
    metric_warn(c, ctx, host, "line", "a line longer than %d bytes",
                CHAN_MAX_LINE);
    c->line--; /* metric_line counts it when its newline comes */
    c->skipping = 1;
    c->npart = 0;
    return;
  }
  if (c->npart + n > c->cap) {
    size_t cap = c->cap ? c->cap : 256;
    while (cap < c->npart + n)
      cap *= 2;
    char *p = realloc(c->part, cap);
    if (!p) {
      c->skipping = 1;
      c->npart = 0;
      return;
    }
    c->part = p;
    c->cap = cap;
  }
  memcpy(c->part + c->npart, s, n);
  c->npart += n;
}

/* The line being read is complete. */
static void part_end(chan *c, dagrun_ctx *ctx, const dagrun_host *host) {
  if (c->skipping)
    c->line++;
  else
    metric_line(c, ctx, host, c->part ? c->part : "", c->npart);
  c->skipping = 0;
  c->npart = 0;
}

/* Opens a report file the command wrote: never blocking (a FIFO left at
 * the path must not stop the wait loop and its heartbeats) and only a
 * regular file (not /dev/zero, not a directory). fd, or -errno; -EINVAL
 * for something that is not a regular file. */
static int open_report(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return -EINVAL;
  }
  return fd;
}

/* Warns once that the report file at path is not a regular file. */
static void warn_not_regular(chan *c, dagrun_ctx *ctx, const dagrun_host *host,
                             int which, const char *name) {
  if (c->warned_irregular & (1u << which))
    return;
  c->warned_irregular |= 1u << which;
  host->log(ctx, DAGRUN_LOG_WARN,
            "%s %s is not a regular file; it is not read (write a plain "
            "file there)",
            name, c->path[which]);
}

static void poll_metrics(chan *c, dagrun_ctx *ctx, const dagrun_host *host,
                         int final) {
  int fd = open_report(c->path[CH_METRICS]);
  if (fd == -EINVAL)
    warn_not_regular(c, ctx, host, CH_METRICS, "DAGRUN_METRICS");
  if (fd < 0)
    return; /* not written (yet) */
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_size < c->off) {
    host->log(ctx, DAGRUN_LOG_WARN,
              "DAGRUN_METRICS file %s was truncated or replaced; reading it "
              "from its start (append to it instead)",
              c->path[CH_METRICS]);
    c->off = 0;
    c->npart = 0;
    c->skipping = 0;
  }
  char buf[65536];
  for (;;) {
    ssize_t r = pread(fd, buf, sizeof(buf), c->off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    c->off += r;
    const char *p = buf, *end = buf + r;
    while (p < end) {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      part_add(c, ctx, host, p, (size_t)((nl ? nl : end) - p));
      if (!nl)
        break;
      part_end(c, ctx, host);
      p = nl + 1;
    }
  }
  close(fd);
  if (final && (c->npart > 0 || c->skipping))
    part_end(c, ctx, host);
  if (final && c->bad > 0)
    host->log(ctx, DAGRUN_LOG_WARN,
              "DAGRUN_METRICS file %s: %ld bad line%s or metric%s skipped "
              "(the first %d are named above)",
              c->path[CH_METRICS], c->bad, c->bad == 1 ? "" : "s",
              c->bad == 1 ? "" : "s", CHAN_MAX_WARNINGS);
}

/* "DONE TOTAL [message]" or "FRACTION [message]": 0 with *fraction and
 * *msg (into s, or NULL), else -1. */
static int parse_progress(char *s, double *fraction, const char **msg) {
  char *end;
  errno = 0;
  double a = strtod(s, &end);
  if (end == s || errno || !isfinite(a) || a < 0 ||
      (*end && *end != ' ' && *end != '\t'))
    return -1;
  char *rest = end;
  while (*rest == ' ' || *rest == '\t')
    rest++;
  double b = strtod(rest, &end);
  if (end != rest && (!*end || *end == ' ' || *end == '\t')) {
    if (!isfinite(b) || b <= 0)
      return -1;
    a /= b;
    rest = end;
    while (*rest == ' ' || *rest == '\t')
      rest++;
  } else if (a > 1) {
    return -1;
  }
  *fraction = a > 1 ? 1 : a;
  *msg = *rest ? rest : NULL;
  return 0;
}

static void poll_progress(chan *c, dagrun_ctx *ctx, const dagrun_host *host,
                          int final) {
  int fd = open_report(c->path[CH_PROGRESS]);
  if (fd == -EINVAL)
    warn_not_regular(c, ctx, host, CH_PROGRESS, "DAGRUN_PROGRESS");
  if (fd < 0)
    return;
  struct stat st;
  if (fstat(fd, &st) != 0 || (!final && st.st_size == c->psize &&
                              st.st_mtim.tv_sec == c->pmtime.tv_sec &&
                              st.st_mtim.tv_nsec == c->pmtime.tv_nsec)) {
    close(fd);
    return;
  }
  c->psize = st.st_size;
  c->pmtime = st.st_mtim;
  off_t from =
      st.st_size > CHAN_PROGRESS_TAIL ? st.st_size - CHAN_PROGRESS_TAIL : 0;
  char buf[CHAN_PROGRESS_TAIL + 1];
  ssize_t n;
  do
    n = pread(fd, buf, CHAN_PROGRESS_TAIL, from);
  while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0)
    return;
  buf[n] = '\0';
  /* The last complete line; at the end, the last line at all. */
  size_t len = (size_t)n;
  if (!final || buf[len - 1] == '\n') {
    char *nl = memrchr(buf, '\n', len);
    if (!nl)
      return;
    len = (size_t)(nl - buf);
  }
  buf[len] = '\0';
  char *line = memrchr(buf, '\n', len);
  line = line ? line + 1 : buf;
  size_t ll = strlen(line);
  while (ll > 0 && (line[ll - 1] == '\r' || line[ll - 1] == ' '))
    line[--ll] = '\0';
  while (*line == ' ' || *line == '\t')
    line++;
  if (!*line || (c->plast && strcmp(c->plast, line) == 0))
    return;
  free(c->plast);
  c->plast = strdup(line);
  double f;
  const char *msg;
  char *copy = strdup(line);
  if (copy && parse_progress(copy, &f, &msg) == 0)
    host->progress(ctx, f, msg);
  else
    host->log(ctx, DAGRUN_LOG_WARN,
              "DAGRUN_PROGRESS file %s: last line \"%.80s\" is neither DONE "
              "TOTAL (37 1000) nor a fraction in [0,1] (0.037); ignored",
              c->path[CH_PROGRESS], line);
  free(copy);
}

void chan_poll(chan *c, dagrun_ctx *ctx, const dagrun_host *host, int final) {
  poll_metrics(c, ctx, host, final);
  poll_progress(c, ctx, host, final);
}

/* Line and column (1-based) of byte off of text. */
static void line_col(const char *text, size_t off, long *line, long *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

/* Outputs are a handful of keys: a file larger than this is a mistake
 * (or /dev/zero behind a link), not something to hold in memory. */
#define OUTPUTS_MAX_BYTES (16u << 20)

/* The regular file at path, NUL-terminated: 0, -ENOENT, -EINVAL (not a
 * regular file), -EFBIG (over OUTPUTS_MAX_BYTES) or another -errno. */
static int slurp(const char *path, char **out, size_t *n) {
  *out = NULL;
  *n = 0;
  int fd = open_report(path);
  if (fd < 0)
    return fd;
  size_t cap = 4096, len = 0;
  char *b = malloc(cap);
  int rc = b ? 0 : -ENOMEM;
  while (rc == 0) {
    ssize_t r = read(fd, b + len, cap - len - 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      rc = -errno;
      break;
    }
    if (r == 0)
      break;
    len += (size_t)r;
    if (len > OUTPUTS_MAX_BYTES) {
      rc = -EFBIG;
      break;
    }
    if (len + 1 == cap) {
      char *nb = realloc(b, cap * 2);
      if (!nb) {
        rc = -ENOMEM;
        break;
      }
      b = nb;
      cap *= 2;
    }
  }
  close(fd);
  if (rc != 0) {
    free(b);
    return rc;
  }
  b[len] = '\0';
  *out = b;
  *n = len;
  return 0;
}

int chan_outputs(chan *c, dagrun_ctx *ctx, const dagrun_host *host) {
  const char *path = c->path[CH_OUTPUTS];
  char *text;
  size_t n;
  int rc = slurp(path, &text, &n);
  if (rc == -ENOENT)
    return 0;
  if (rc != 0) {
    host->fail(ctx, "DAGRUN_OUTPUTS file %s: cannot read it: %s", path,
               rc == -EINVAL  ? "not a regular file"
               : rc == -EFBIG ? "larger than 16 MiB"
                              : strerror(-rc));
    return -1;
  }
  const char *at = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, n, &at, 0);
  int ok = 0;
  if (!j) {
    long line, col;
    size_t off = at && at >= text && at <= text + n ? (size_t)(at - text) : 0;
    line_col(text, off, &line, &col);
    host->fail(ctx,
               "DAGRUN_OUTPUTS file %s:%ld:%ld: not JSON; expected an object "
               "of outputs, e.g. {\"model_dir\": \"/path\", \"val_loss\": "
               "2.1}",
               path, line, col);
  } else if (!cJSON_IsObject(j)) {
    host->fail(ctx,
               "DAGRUN_OUTPUTS file %s: expected a JSON object of outputs "
               "({\"key\": value, ...}), found %s",
               path,
               cJSON_IsArray(j)    ? "a list"
               : cJSON_IsString(j) ? "a string"
                                   : "another value");
  } else {
    ok = 1;
    const cJSON *m;
    cJSON_ArrayForEach(m, j) {
      char *printed = NULL;
      const char *val = NULL;
      if (cJSON_IsString(m))
        val = m->valuestring;
      else if (cJSON_IsNumber(m) || cJSON_IsBool(m) || cJSON_IsArray(m))
        /* A list stays JSON text: a branch task's choice of tasks
         * (scheduler.h), a list a downstream task parses. */
        val = printed = cJSON_PrintUnformatted(m);
      if (!val) {
        host->fail(ctx,
                   "DAGRUN_OUTPUTS file %s: output '%s' must be a string, a "
                   "number, a boolean or a list",
                   path, m->string);
        ok = 0;
        break;
      }
      int orc = host->output(ctx, m->string, val);
      cJSON_free(printed);
      if (orc != 0) {
        host->fail(ctx,
                   "DAGRUN_OUTPUTS file %s: '%s' is not an output key "
                   "(letters, digits and '_')",
                   path, m->string);
        ok = 0;
        break;
      }
    }
  }
  cJSON_Delete(j);
  free(text);
  return ok ? 0 : -1;
}
