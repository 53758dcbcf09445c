/*
 * util: the small pieces every layer of the dagrun program shares (error
 * codes, allocation, strings, diagnostics, a string map, "did you mean",
 * durations, UTC times, processes, paths). What each function promises
 * is in util.h; this file holds the reasons behind the choices.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *dr_strerror(int err) {
  switch (err) {
  case DR_OK:
    return "success";
#define DR_XX(code, val, msg)                                                  \
  case DR_##code:                                                              \
    return msg;
    DR_ERRNO_MAP(DR_XX)
#undef DR_XX
  }
  return "unknown error";
}

/* dagrun has no useful way to go on without memory, and a NULL checked at
 * every call site would be code that never runs: abort with the size, so
 * that a core dump and the message say what was asked. */
static void out_of_memory(size_t n) {
  fprintf(stderr, "dagrun: out of memory allocating %zu bytes\n", n);
  abort();
}

/* The allocators ask for at least one byte: malloc(0) may return NULL,
 * which would read as out of memory. */
void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p)
    out_of_memory(n);
  return p;
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    out_of_memory(n * size);
  return p;
}

void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q)
    out_of_memory(n);
  return q;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

char *xstrndup(const char *s, size_t n) {
  char *p = xmalloc(n + 1);
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *xasprintf(const char *fmt, ...) {
  sbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(&b, fmt, ap);
  va_end(ap);
  return sbuf_take(&b);
}

void sbuf_add(sbuf *b, const char *s, size_t n) {
  VEC_RESERVE(b->s, b->cap, b->n + n + 1);
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = '\0';
}

void sbuf_puts(sbuf *b, const char *s) { sbuf_add(b, s, strlen(s)); }

void sbuf_putc(sbuf *b, char c) { sbuf_add(b, &c, 1); }

void sbuf_vprintf(sbuf *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0)
    return;
  VEC_RESERVE(b->s, b->cap, b->n + (size_t)n + 1);
  vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
  b->n += (size_t)n;
}

void sbuf_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sbuf_vprintf(b, fmt, ap);
  va_end(ap);
}

char *sbuf_take(sbuf *b) {
  char *s = b->s ? b->s : xstrdup("");
  b->s = NULL;
  b->n = b->cap = 0;
  return s;
}

void sbuf_free(sbuf *b) {
  free(b->s);
  b->s = NULL;
  b->n = b->cap = 0;
}

void sbuf_base64(sbuf *b, const void *data, size_t n) {
  static const char digit[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i += 3) {
    /* Three bytes (zeros past the end) make four digits; '=' stands for
     * the digits of bytes that are not there. */
    unsigned w = (unsigned)p[i] << 16;
    if (i + 1 < n)
      w |= (unsigned)p[i + 1] << 8;
    if (i + 2 < n)
      w |= p[i + 2];
    char q[4] = {digit[w >> 18], digit[(w >> 12) & 63],
                 i + 1 < n ? digit[(w >> 6) & 63] : '=',
                 i + 2 < n ? digit[w & 63] : '='};
    sbuf_add(b, q, 4);
  }
}

void diags_vadd(diags *d, const char *file, int line, int col,
                const char *fmt, va_list ap) {
  sbuf b = {0};
  sbuf_vprintf(&b, fmt, ap);
  diag g = {file ? xstrdup(file) : NULL, line, col, sbuf_take(&b)};
  VEC_PUSH(d->v, d->n, d->cap, g);
}

void diags_add(diags *d, const char *file, int line, int col, const char *fmt,
               ...) {
  va_list ap;
  va_start(ap, fmt);
  diags_vadd(d, file, line, col, fmt, ap);
  va_end(ap);
}

char *diag_format(const diag *g) {
  sbuf b = {0};
  if (g->file) {
    sbuf_puts(&b, g->file);
    if (g->line > 0) {
      sbuf_printf(&b, ":%d", g->line);
      if (g->col > 0)
        sbuf_printf(&b, ":%d", g->col);
    }
    sbuf_puts(&b, ": ");
  }
  sbuf_printf(&b, "error: %s", g->msg);
  return sbuf_take(&b);
}

char *diags_text(const diags *d) {
  sbuf b = {0};
  for (size_t i = 0; i < d->n; i++) {
    char *s = diag_format(&d->v[i]);
    sbuf_printf(&b, "%s\n", s);
    free(s);
  }
  return sbuf_take(&b);
}

void diags_print(const diags *d, FILE *f) {
  char *text = diags_text(d);
  fputs(text, f);
  free(text);
}

void diags_free(diags *d) {
  for (size_t i = 0; i < d->n; i++) {
    free(d->v[i].file);
    free(d->v[i].msg);
  }
  free(d->v);
  d->v = NULL;
  d->n = d->cap = 0;
}

/* FNV-1a: short keys, no adversarial input worth a keyed hash. */
static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

/* Open addressing with linear probing: the slot of key, or the empty slot
 * where it would go. strmap_put keeps the table at most half full, so a
 * probe ends soon and always finds an empty slot. */
static size_t strmap_slot(char **keys, size_t cap, const char *key) {
  size_t i = (size_t)hash_str(key) & (cap - 1);
  while (keys[i] && strcmp(keys[i], key) != 0)
    i = (i + 1) & (cap - 1);
  return i;
}

void strmap_put(strmap *m, const char *key, size_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 16;
    char **nk = xcalloc(nc, sizeof(char *));
    size_t *nv = xcalloc(nc, sizeof(size_t));
    for (size_t i = 0; i < m->cap; i++) {
      if (m->keys[i]) {
        size_t j = strmap_slot(nk, nc, m->keys[i]);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
      }
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = nc;
  }
  size_t i = strmap_slot(m->keys, m->cap, key);
  if (!m->keys[i]) {
    m->keys[i] = xstrdup(key);
    m->n++;
  }
  m->vals[i] = val;
}

int strmap_get(const strmap *m, const char *key, size_t *val) {
  if (!m->cap)
    return 0;
  size_t i = strmap_slot(m->keys, m->cap, key);
  if (!m->keys[i])
    return 0;
  if (val)
    *val = m->vals[i];
  return 1;
}

void strmap_free(strmap *m) {
  for (size_t i = 0; i < m->cap; i++)
    free(m->keys[i]);
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof(*m));
}

/* Optimal string alignment distance: Levenshtein plus transpositions of
 * neighbouring characters, the commonest typo. Stops early (returning
 * limit + 1) once every cell of a row exceeds limit. */
size_t edit_distance(const char *a, const char *b, size_t limit) {
  size_t la = strlen(a), lb = strlen(b);
  if ((la > lb ? la - lb : lb - la) > limit)
    return limit + 1;
  size_t *rows = xmalloc(3 * (lb + 1) * sizeof(size_t));
  size_t *prev2 = rows, *prev = rows + lb + 1, *cur = rows + 2 * (lb + 1);
  for (size_t j = 0; j <= lb; j++)
    prev[j] = j;
  size_t d = 0;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    size_t row_min = cur[0];
    for (size_t j = 1; j <= lb; j++) {
      size_t cost = a[i - 1] != b[j - 1];
      size_t best = prev[j - 1] + cost;
      if (prev[j] + 1 < best)
        best = prev[j] + 1;
      if (cur[j - 1] + 1 < best)
        best = cur[j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          prev2[j - 2] + 1 < best)
        best = prev2[j - 2] + 1;
      cur[j] = best;
      if (best < row_min)
        row_min = best;
    }
    if (row_min > limit) {
      free(rows);
      return limit + 1;
    }
    size_t *t = prev2;
    prev2 = prev;
    prev = cur;
    cur = t;
  }
  d = prev[lb];
  free(rows);
  return d;
}

/* The limit grows with the word (a third of its length): one slip in a
 * short name, more in a long one, without suggesting unrelated names. Each
 * candidate is measured only up to the best distance so far. */
const char *closest_match(const char *word, const char *const *candidates) {
  size_t limit = strlen(word) / 3;
  if (limit < 1)
    limit = 1;
  const char *best = NULL;
  size_t best_d = limit + 1;
  for (; *candidates; candidates++) {
    size_t d = edit_distance(word, *candidates, best_d - 1);
    if (d < best_d) {
      best_d = d;
      best = *candidates;
    }
  }
  return best;
}

/* Parts are summed ("1h30m"), each a number with a unit; a bare number is
 * seconds only when it is the whole string. */
/* A duration's number at p: digits with an optional fraction (no sign,
 * exponent or hex, which strtod would take); the end, or NULL. */
static const char *duration_number(const char *p, double *v) {
  const char *q = p;
  while (*q >= '0' && *q <= '9')
    q++;
  if (*q == '.')
    for (q++; *q >= '0' && *q <= '9'; q++)
      ;
  char num[64];
  size_t n = (size_t)(q - p);
  if (n == 0 || (n == 1 && *p == '.') || n >= sizeof num)
    return NULL;
  memcpy(num, p, n);
  num[n] = '\0';
  *v = strtod(num, NULL);
  return q;
}

int parse_duration(const char *s, double *out) {
  /* The units, largest first: each at most once, in this order ("1m1h"
   * and "1d1d" are typos, not 61 minutes and two days). */
  static const struct {
    const char *name;
    double seconds;
    int rank; /* the order they come in: ms (matched before m) last */
  } units[] = {{"d", 86400, 0},
               {"h", 3600, 1},
               {"ms", 0.001, 4},
               {"m", 60, 2},
               {"s", 1, 3}};
  if (!s || !*s)
    return DR_EINVAL;
  double total = 0;
  const char *p = s;
  int last = -1; /* the rank of the last unit */
  while (*p) {
    double v;
    if (!(p = duration_number(p, &v)))
      return DR_EINVAL;
    if (*p == '\0') {
      if (last >= 0)
        return DR_EINVAL; /* "1h30" is ambiguous */
      total = v;
      break;
    }
    size_t u = 0;
    while (u < sizeof units / sizeof *units &&
           strncmp(p, units[u].name, strlen(units[u].name)) != 0)
      u++;
    if (u == sizeof units / sizeof *units || units[u].rank <= last)
      return DR_EINVAL;
    last = units[u].rank;
    p += strlen(units[u].name);
    total += v * units[u].seconds;
  }
  if (!isfinite(total))
    return DR_EINVAL;
  *out = total;
  return 0;
}

/* Two units at most: a duration in a table column is read at a glance,
 * not to the second. */
void format_duration(double s, char *buf, size_t n) {
  if (s < 0)
    s = 0;
  if (s < 1)
    snprintf(buf, n, "%.0fms", s * 1000);
  else if (s < 60)
    snprintf(buf, n, "%.1fs", s);
  else if (s < 3600)
    snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else
    snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* A pid alone can name another process after a restart or a long uptime:
 * the store records (pid, start time) so that a "running" run whose dagrun
 * died is never taken for a live one. */
long long proc_start_time(int pid) {
  char path[64], buf[1024];
  if (pid <= 0)
    return 0;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* The command name (field 2) may hold spaces and parentheses: fields
   * are counted from the last ')'. A zombie is gone for our purposes. */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || p[2] == 'Z')
    return 0;
  p += 2;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p)
      return 0;
    p++;
  }
  return strtoll(p, NULL, 10);
}

int proc_alive(int pid, long long start) {
  long long t = proc_start_time(pid);
  return t > 0 && (start <= 0 || t == start);
}

void format_exact_double(double v, char *buf, size_t n) {
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(buf, n, "%.*g", digits, v);
    if (strtod(buf, NULL) == v)
      return;
  }
}

void format_utc(double t, int millis, char *buf, size_t n) {
  time_t sec = (time_t)t;
  struct tm tm;
  gmtime_r(&sec, &tm);
  if (millis)
    snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)((t - (double)sec) * 1000));
  else
    snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

char *path_dirname(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return xstrdup(".");
  if (slash == path)
    return xstrdup("/");
  return xstrndup(path, (size_t)(slash - path));
}

char *path_join(const char *a, const char *b) {
  if (b[0] == '/' || !a || !*a)
    return xstrdup(b);
  size_t la = strlen(a);
  if (a[la - 1] == '/')
    return xasprintf("%s%s", a, b);
  return xasprintf("%s/%s", a, b);
}

int proc_has_env(long pid, const char *entry) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/environ", pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return 0;
  size_t len = strlen(entry), at = 0;
  int found = 0, c;
  while (!found && (c = getc(f)) != EOF) {
    if (c == '\0') {
      found = at == len;
      at = 0;
    } else if (at != SIZE_MAX) {
      at = at < len && entry[at] == c ? at + 1 : SIZE_MAX;
    }
  }
  fclose(f);
  return found;
}

/* The length of the valid UTF-8 sequence at p[i] (n bytes in all): 1 to
 * 4, or 0 for a NUL byte, a stray or cut sequence, an overlong form or a
 * surrogate. */
static size_t utf8_len_at(const unsigned char *p, size_t i, size_t n) {
  unsigned char c = p[i];
  size_t len = c == 0                   ? 0
               : c < 0x80               ? 1
               : c >= 0xC2 && c <= 0xDF ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
  if (len == 0 || i + len > n)
    return 0;
  uint32_t cp = len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (size_t k = 1; k < len; k++) {
    if ((p[i + k] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i + k] & 0x3F);
  }
  if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)))
    return 0;
  if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))
    return 0;
  return len;
}

size_t utf8_bad_at(const char *z, size_t n) {
  const unsigned char *p = (const unsigned char *)z;
  size_t i = 0, len;
  while (i < n && (len = utf8_len_at(p, i, n)) > 0)
    i += len;
  return i;
}

char *utf8_clean(const char *z, size_t n) {
  const unsigned char *p = (const unsigned char *)z;
  sbuf b = {0};
  size_t i = 0, run = 0; /* p[run, i) is valid and not yet copied */
  sbuf_add(&b, "", 0);
  while (i < n) {
    size_t len = utf8_len_at(p, i, n);
    if (len) {
      i += len;
      continue;
    }
    sbuf_add(&b, z + run, i - run);
    sbuf_add(&b, "\xEF\xBF\xBD", 3);
    i++;
    run = i;
  }
  sbuf_add(&b, z + run, i - run);
  return sbuf_take(&b);
}

void sbuf_put_shown(sbuf *b, const char *z, size_t n, const char *nl) {
  const unsigned char *p = (const unsigned char *)z;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    if (c == '\n' && nl)
      sbuf_puts(b, nl);
    else if ((c < 0x20 && c != '\t') || c == 0x7f)
      sbuf_printf(b, "\\x%02x", c);
    else if (c == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
      sbuf_printf(b, "\\x%02x\\x%02x", c, p[++i]);
    else
      sbuf_putc(b, (char)c);
  }
}

char *xstrdup_shown(const char *z) {
  if (!z)
    return NULL;
  sbuf b = {0};
  sbuf_put_shown(&b, z, strlen(z), NULL);
  return sbuf_take(&b);
}
