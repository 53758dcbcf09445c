/*
 * cron: cron expressions, zones and fire times. The search works on local
 * wall time, written as seconds since the epoch as if it were UTC
 * ("local seconds"), inside stretches of real time where the zone's UTC
 * offset is constant; the DST rules of cron.h apply where two stretches
 * meet.
 */
#include "cron.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

struct cron_expr {
  uint64_t minute; /* bit i: minute i matches */
  uint32_t hour;   /* bits 0..23 */
  uint32_t dom;    /* bits 1..31 */
  uint32_t month;  /* bits 1..12 */
  uint32_t dow;    /* bits 0..6, 0 = Sunday */
  /* The field was written starting with '*': decides the day-matching
   * rule (dom, dow) and the fall-back rule (minute, hour). */
  unsigned char min_star, hour_star, dom_star, dow_star;
};

struct cron_zone {
  char *name;
  int utc; /* offset always 0: no TZ switching needed */
};

/* ---- parsing ----------------------------------------------------------- */

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY",
                                          "JUN", "JUL", "AUG", "SEP", "OCT",
                                          "NOV", "DEC", NULL};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED",
                                        "THU", "FRI", "SAT", NULL};

typedef struct field_def {
  const char *name;
  int lo, hi;
  const char *const *names; /* names[i] means lo_name + i */
  int name_base;
  const char *names_hint;
} field_def;

static const field_def fields[5] = {
    {"minute", 0, 59, NULL, 0, NULL},
    {"hour", 0, 23, NULL, 0, NULL},
    {"day-of-month", 1, 31, NULL, 0, NULL},
    {"month", 1, 12, month_names, 1, " or a month name (JAN-DEC)"},
    {"day-of-week", 0, 7, day_names, 0, " or a day name (SUN-SAT)"},
};

/* Where parse errors go: to fn, each of them, when it is set; otherwise
 * the first one into err and *col. */
typedef struct perr {
  char *err;
  size_t nerr;
  int *col;
  cron_report_fn fn;
  void *ctx;
  int n; /* errors so far */
} perr;

static int fail(perr *p, int col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(perr *p, int col, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p->fn) {
    p->fn(p->ctx, col, msg);
  } else if (p->n == 0) {
    if (p->err && p->nerr)
      snprintf(p->err, p->nerr, "%s", msg);
    if (p->col)
      *p->col = col;
  }
  p->n++;
  return DR_EINVAL;
}

/* A number or a name, s[0..n), at column col. */
static int parse_value(perr *p, const field_def *f, const char *s, size_t n,
                       int col, int *out) {
  if (n == 0)
    return fail(p, col, "%s: missing value", f->name);
  if (isdigit((unsigned char)s[0])) {
    long v = 0;
    for (size_t i = 0; i < n; i++) {
      if (!isdigit((unsigned char)s[i]))
        return fail(p, col, "%s: '%.*s' is not a number%s", f->name, (int)n, s,
                    f->names_hint ? f->names_hint : "");
      if (v < 1000000)
        v = v * 10 + (s[i] - '0');
    }
    if (v < f->lo || v > f->hi)
      return fail(p, col, "%s: %.*s is out of range %d-%d", f->name, (int)n, s,
                  f->lo, f->hi);
    *out = (int)v;
    return 0;
  }
  if (f->names && n == 3) {
    for (int i = 0; f->names[i]; i++)
      if (strncasecmp(s, f->names[i], 3) == 0) {
        *out = f->name_base + i;
        return 0;
      }
  }
  return fail(p, col, "%s: '%.*s' is not a number%s", f->name, (int)n, s,
              f->names_hint ? f->names_hint : "");
}

/* One list item s[0..n) of field f at column col; sets bits in *bits. */
static int parse_item(perr *p, const field_def *f, const char *s, size_t n,
                      int col, uint64_t *bits) {
  if (n == 0)
    return fail(p, col, "%s: empty item in list", f->name);
  const char *slash = memchr(s, '/', n);
  size_t head = slash ? (size_t)(slash - s) : n;
  int lo, hi, step = 1, rc;
  if (head == 1 && s[0] == '*') {
    lo = f->lo;
    hi = f->hi == 7 ? 6 : f->hi;
  } else {
    const char *dash = memchr(s, '-', head);
    size_t a = dash ? (size_t)(dash - s) : head;
    if ((rc = parse_value(p, f, s, a, col, &lo)) != 0)
      return rc;
    if (dash) {
      if ((rc = parse_value(p, f, dash + 1, head - a - 1, col + (int)a + 1,
                            &hi)) != 0)
        return rc;
      if (hi < lo)
        return fail(p, col,
                    "%s: range %.*s goes backwards (wrap-around is not "
                    "supported: write it as a list, e.g. 22-23,0-2)",
                    f->name, (int)head, s);
    } else {
      hi = slash ? (f->hi == 7 ? 6 : f->hi) : lo;
    }
  }
  if (slash) {
    const char *z = slash + 1;
    size_t zn = n - head - 1;
    int zcol = col + (int)head + 1;
    long v = 0;
    if (zn == 0)
      return fail(p, zcol, "%s: missing step after '/'", f->name);
    for (size_t i = 0; i < zn; i++) {
      if (!isdigit((unsigned char)z[i]))
        return fail(p, zcol, "%s: step '%.*s' is not a number", f->name,
                    (int)zn, z);
      if (v < 1000000)
        v = v * 10 + (z[i] - '0');
    }
    int span = f->hi - f->lo + 1;
    if (v < 1 || v > span)
      return fail(p, zcol, "%s: step %.*s is out of range 1-%d", f->name,
                  (int)zn, z, span);
    step = (int)v;
  }
  for (int v = lo; v <= hi; v += step)
    *bits |= 1ull << (f->hi == 7 && v == 7 ? 0 : v);
  return 0;
}

/* The fields as written: start offsets and lengths in the expression. */
typedef struct token {
  size_t at, n;
} token;

/* Every list item of every field is parsed, so that each bad one is
 * reported, not only the first. */
static int parse_fields(perr *p, const char *z, const token *tok,
                        cron_expr *e) {
  uint64_t bits[5] = {0};
  int rc = 0;
  for (int k = 0; k < 5; k++) {
    const char *s = z + tok[k].at;
    size_t n = tok[k].n, i = 0;
    while (i <= n) {
      size_t j = i;
      while (j < n && s[j] != ',')
        j++;
      if (parse_item(p, &fields[k], s + i, j - i, (int)(tok[k].at + i) + 1,
                     &bits[k]) != 0)
        rc = DR_EINVAL;
      i = j + 1;
    }
  }
  if (rc != 0)
    return rc;
  e->minute = bits[0];
  e->hour = (uint32_t)bits[1];
  e->dom = (uint32_t)bits[2];
  e->month = (uint32_t)bits[3];
  e->dow = (uint32_t)bits[4];
  e->min_star = z[tok[0].at] == '*';
  e->hour_star = z[tok[1].at] == '*';
  e->dom_star = z[tok[2].at] == '*';
  e->dow_star = z[tok[4].at] == '*';
  return 0;
}

/* The most days month m (1-12) has in any year: February's 29th is a
 * day that exists, in leap years. */
static const int month_days_max[13] = {0,  31, 29, 31, 30, 31, 30,
                                       31, 31, 30, 31, 30, 31};

/* Refuses an expression that never fires, at its day-of-month field.
 * Every field has at least one value, so e fires unless no day ever
 * matches. When both day fields are restricted, a day matches if either
 * does, and every month has every weekday: it fires. Otherwise both must
 * match, and it fires exactly when some chosen day-of-month exists in
 * some chosen month, i.e. the smallest chosen day is at most the longest
 * chosen month: each such date falls on every weekday in some year (Feb
 * 29 too, at most 40 years apart; CRON_SEARCH_YEARS covers that). */
static int check_fires(perr *p, const char *z, const token *tok,
                       const cron_expr *e) {
  if (!e->dom_star && !e->dow_star)
    return 0;
  int first = 1, longest = 0;
  while (!((e->dom >> first) & 1))
    first++;
  for (int m = 1; m <= 12; m++)
    if (((e->month >> m) & 1) && month_days_max[m] > longest)
      longest = month_days_max[m];
  if (first <= longest)
    return 0;
  return fail(p, (int)tok[2].at + 1,
              "day-of-month: '%.*s' never falls in month '%.*s' (at most %d "
              "days): the schedule never fires",
              (int)tok[2].n, z + tok[2].at, (int)tok[3].n, z + tok[3].at,
              longest);
}

static const struct {
  const char *name, *expr;
} macros[] = {{"@hourly", "0 * * * *"},   {"@daily", "0 0 * * *"},
              {"@midnight", "0 0 * * *"}, {"@weekly", "0 0 * * 0"},
              {"@monthly", "0 0 1 * *"},  {"@yearly", "0 0 1 1 *"},
              {"@annually", "0 0 1 1 *"}};

static void tokenize(const char *z, token *tok, size_t *n) {
  size_t i = 0;
  *n = 0;
  for (;;) {
    while (z[i] == ' ' || z[i] == '\t')
      i++;
    if (!z[i])
      break;
    size_t at = i;
    while (z[i] && z[i] != ' ' && z[i] != '\t')
      i++;
    if (*n < 6)
      tok[*n] = (token){at, i - at};
    ++*n;
  }
}

static int parse(perr *p, const char *z, cron_expr **out) {
  token tok[6];
  size_t n;
  *out = NULL;
  if (!z)
    z = "";
  tokenize(z, tok, &n);
  if (n == 0)
    return fail(p, 1,
                "empty schedule: expected 5 fields (minute hour "
                "day-of-month month day-of-week) or a macro like @daily");
  cron_expr e = {0};
  int rc;
  if (z[tok[0].at] == '@') {
    const char *m = z + tok[0].at;
    size_t mn = tok[0].n;
    const char *expr = NULL;
    for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
      if (strlen(macros[i].name) == mn &&
          strncasecmp(m, macros[i].name, mn) == 0)
        expr = macros[i].expr;
    if (!expr)
      return fail(p, (int)tok[0].at + 1,
                  "unknown macro '%.*s' (expected @hourly, @daily, "
                  "@midnight, @weekly, @monthly, @yearly or @annually)",
                  (int)mn, m);
    if (n > 1)
      return fail(p, (int)tok[1].at + 1, "unexpected '%.*s' after %.*s",
                  (int)tok[1].n, z + tok[1].at, (int)mn, m);
    token mt[6];
    size_t k;
    tokenize(expr, mt, &k);
    perr none = {NULL, 0, NULL, NULL, NULL, 0};
    rc = parse_fields(&none, expr, mt, &e);
  } else {
    if (n < 5)
      return fail(p, (int)strlen(z) + 1,
                  "expected 5 fields (minute hour day-of-month month "
                  "day-of-week), found %zu",
                  n);
    if (n > 5)
      return fail(p, (int)tok[5].at + 1,
                  "unexpected 6th field '%.*s': expected 5 fields (minute "
                  "hour day-of-month month day-of-week)",
                  (int)tok[5].n, z + tok[5].at);
    rc = parse_fields(p, z, tok, &e);
    if (rc == 0)
      rc = check_fires(p, z, tok, &e);
  }
  if (rc != 0)
    return rc;
  *out = xmalloc(sizeof e);
  **out = e;
  return 0;
}

int cron_parse(const char *z, cron_expr **out, int *col, char *err,
               size_t nerr) {
  perr p = {err, nerr, col, NULL, NULL, 0};
  if (col)
    *col = 0;
  return parse(&p, z, out);
}

int cron_parse_each(const char *z, cron_expr **out, cron_report_fn fn,
                    void *ctx) {
  perr p = {NULL, 0, NULL, fn, ctx, 0};
  return parse(&p, z, out);
}

void cron_destroy(cron_expr *e) { free(e); }

/* ---- zones ------------------------------------------------------------- */

int cron_zone_open(const char *name, cron_zone **out, char *err, size_t nerr) {
  *out = NULL;
  if (!name || !*name)
    name = "UTC";
  int utc = strcmp(name, "UTC") == 0;
  if (!utc) {
    /* glibc quietly falls back to UTC for a TZ it cannot find, so check
     * that the name is a TZif file of the tz database ourselves. */
    int ok = name[0] != '/' && !strstr(name, "..");
    for (const char *c = name; ok && *c; c++)
      ok = isalnum((unsigned char)*c) || strchr("/_+-.", *c);
    if (ok) {
      const char *dir = getenv("TZDIR");
      char *path =
          xasprintf("%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", name);
      struct stat st;
      char magic[4] = {0};
      FILE *f = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? fopen(path, "rb")
                                                            : NULL;
      ok = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "TZif", 4) == 0;
      if (f)
        fclose(f);
      free(path);
    }
    if (!ok) {
      snprintf(err, nerr,
               "unknown time zone '%s' (expected an IANA name such as "
               "Europe/Berlin or America/New_York)",
               name);
      return DR_ENOENT;
    }
  }
  cron_zone *z = xcalloc(1, sizeof *z);
  z->name = xstrdup(name);
  z->utc = utc;
  *out = z;
  return 0;
}

void cron_zone_close(cron_zone *z) {
  if (!z)
    return;
  free(z->name);
  free(z);
}

const char *cron_zone_name(const cron_zone *z) { return z->name; }

/* The zone is made the process's local time zone between tz_enter and
 * tz_leave, so that localtime_r uses it; tz_leave puts TZ back as it was.
 * Not thread-safe (setenv, tzset): the orchestrator is single-threaded. */
typedef struct tzsave {
  char *old;
  int had;
} tzsave;

static void tz_enter(const cron_zone *z, tzsave *s) {
  s->old = NULL;
  s->had = 0;
  if (z->utc)
    return;
  const char *o = getenv("TZ");
  s->had = o != NULL;
  s->old = o ? xstrdup(o) : NULL;
  setenv("TZ", z->name, 1);
  tzset();
}

static void tz_leave(const cron_zone *z, tzsave *s) {
  if (z->utc)
    return;
  if (s->had)
    setenv("TZ", s->old, 1);
  else
    unsetenv("TZ");
  tzset();
  free(s->old);
}

/* UTC offset in seconds at t; only between tz_enter and tz_leave. */
static long gmtoff(const cron_zone *z, int64_t t) {
  if (z->utc)
    return 0;
  time_t tt = (time_t)t;
  struct tm tm;
  if (!localtime_r(&tt, &tm))
    return 0;
  return tm.tm_gmtoff;
}

/* The first instant in (t, u] whose offset is not off, into *tr; 0 if
 * none. Samples a day apart, then bisects: zones change offset at most a
 * few times a year. */
static int first_change(const cron_zone *z, int64_t t, int64_t u, long off,
                        int64_t *tr) {
  if (z->utc)
    return 0;
  int64_t lo = t;
  while (lo < u) {
    int64_t hi = u - lo > 86400 ? lo + 86400 : u;
    if (gmtoff(z, hi) != off) {
      while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (gmtoff(z, mid) != off)
          hi = mid;
        else
          lo = mid;
      }
      *tr = hi;
      return 1;
    }
    lo = hi;
  }
  return 0;
}

/* The start of t's stretch of constant offset off, if it began in the
 * last two days, and the offset before it; else an earlier start and
 * *prev = off (which makes the DST rules a no-op). */
static void stretch_start(const cron_zone *z, int64_t t, long off,
                          int64_t *start, long *prev) {
  int64_t lo = t - 2 * 86400, hi = t;
  if (z->utc || gmtoff(z, lo) == off) {
    *start = lo;
    *prev = off;
    return;
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (gmtoff(z, mid) == off)
      hi = mid;
    else
      lo = mid;
  }
  *start = hi;
  *prev = gmtoff(z, hi - 1);
}

/* ---- calendar arithmetic (proleptic Gregorian, days since 1970-01-01) --- */

static int64_t floordiv(int64_t a, int64_t b) {
  return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = floordiv(y, 400);
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d) {
  z += 719468;
  int64_t era = floordiv(z, 146097);
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  *d = (int)(doy - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = yoe + era * 400 + (*m <= 2);
}

static int day_matches(const cron_expr *e, int d, int64_t days) {
  int wd = (int)(((days % 7) + 11) % 7); /* 1970-01-01 was a Thursday */
  int dom = (e->dom >> d) & 1, dow = (e->dow >> wd) & 1;
  if (e->dom_star || e->dow_star)
    return dom && dow;
  return dom || dow;
}

/* The first local minute >= from (local seconds) matching e, and < lim,
 * into *out; -1 if none. Skips whole months, days and hours. */
static int local_next(const cron_expr *e, int64_t from, int64_t lim,
                      int64_t *out) {
  from = floordiv(from + 59, 60) * 60;
  int64_t day = floordiv(from, 86400);
  int sec = (int)(from - day * 86400);
  int h = sec / 3600, mi = sec % 3600 / 60;
  while (day * 86400 < lim) {
    int64_t y;
    int m, d;
    civil_from_days(day, &y, &m, &d);
    if (!((e->month >> m) & 1)) {
      day =
          m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1);
      h = mi = 0;
      continue;
    }
    if (day_matches(e, d, day)) {
      for (; h < 24; h++, mi = 0) {
        if (!((e->hour >> h) & 1))
          continue;
        for (; mi < 60; mi++)
          if ((e->minute >> mi) & 1) {
            int64_t t = day * 86400 + h * 3600 + mi * 60;
            if (t >= lim)
              return -1;
            *out = t;
            return 0;
          }
      }
    }
    day++;
    h = mi = 0;
  }
  return -1;
}

/* ---- fire times -------------------------------------------------------- */

static const int64_t search_span = (int64_t)CRON_SEARCH_YEARS * 366 * 86400;

/* cron_next between tz_enter and tz_leave. */
static int next_fire(const cron_expr *e, const cron_zone *z, int64_t after,
                     int64_t *out) {
  int64_t lim = after + search_span;
  /* Fixed-time jobs fire once in a fall-back repeat; `*` jobs follow
   * real time (cron.h). */
  int fixed = !e->min_star && !e->hour_star;
  int64_t t = after + 1, start;
  long off = gmtoff(z, t), prev;
  stretch_start(z, t, off, &start, &prev);
  /* Each pass covers one stretch of constant offset; a pass ends with a
   * fire time or moves t to the next offset change, of which there are a
   * few a year. */
  for (;;) {
    if (start == t && off > prev) {
      /* Just after a spring-forward: local [t+prev, t+off) never
       * happened; a job due in it fires now, once. */
      int64_t g;
      if (local_next(e, t + prev, t + off, &g) == 0) {
        *out = t;
        return 0;
      }
    }
    int64_t from = t + off, local;
    if (fixed && prev > off && from < start + prev)
      from = start + prev; /* skip the second pass over local times */
    if (local_next(e, from, lim + off, &local) != 0)
      return DR_ENOENT;
    int64_t u = local - off, tr;
    if (u > lim)
      return DR_ENOENT;
    if (!first_change(z, t, u, off, &tr)) {
      *out = u;
      return 0;
    }
    prev = off;
    off = gmtoff(z, tr);
    start = t = tr;
  }
}

static int no_fire(char *err, size_t nerr) {
  snprintf(err, nerr, "no fire time in %d years", CRON_SEARCH_YEARS);
  return DR_ENOENT;
}

/* Years 1900-9999: far from time_t's limits, so the search's arithmetic
 * cannot overflow. */
static const int64_t time_min = -2208988800LL, time_max = 253402300799LL;

static int out_of_range(int64_t t, char *err, size_t nerr) {
  if (t >= time_min && t <= time_max)
    return 0;
  snprintf(err, nerr, "time %lld is out of range (years 1900-9999)",
           (long long)t);
  return DR_EINVAL;
}

int cron_next(const cron_expr *e, const cron_zone *z, int64_t after,
              int64_t *out, char *err, size_t nerr) {
  if (out_of_range(after, err, nerr))
    return DR_EINVAL;
  tzsave s;
  tz_enter(z, &s);
  int rc = next_fire(e, z, after, out);
  tz_leave(z, &s);
  return rc == 0 ? 0 : no_fire(err, nerr);
}

int cron_prev(const cron_expr *e, const cron_zone *z, int64_t before,
              int64_t *out, char *err, size_t nerr) {
  if (out_of_range(before, err, nerr))
    return DR_EINVAL;
  /* Searching backwards would need a mirror of next_fire and its DST
   * rules; instead the window before `before` doubles until next_fire
   * finds a fire time in it, then steps forward to the last one. The
   * answer is then by construction one of cron_next's fire times, DST
   * included. A window (before-2w, before-w] holds at most w/60 fire
   * times, so the steps stay few. */
  tzsave s;
  tz_enter(z, &s);
  int rc = DR_ENOENT;
  for (int64_t w = 60; w <= search_span; w *= 2) {
    int64_t from = before - w, t;
    if (from < time_min)
      break;
    if (next_fire(e, z, from, &t) != 0)
      break;
    if (t >= before)
      continue;
    for (;;) {
      int64_t u;
      if (next_fire(e, z, t, &u) != 0 || u >= before)
        break;
      t = u;
    }
    *out = t;
    rc = 0;
    break;
  }
  tz_leave(z, &s);
  return rc == 0 ? 0 : no_fire(err, nerr);
}

int cron_due(const cron_expr *e, const cron_zone *z, int64_t last_fire,
             int64_t now, int catchup, int64_t *out, size_t max, size_t *n,
             int *capped, char *err, size_t nerr) {
  *n = 0;
  *capped = 0;
  if (out_of_range(last_fire, err, nerr) || out_of_range(now, err, nerr))
    return DR_EINVAL;
  if (max == 0 || now <= last_fire)
    return 0;
  if (max > CRON_CATCHUP_MAX)
    max = CRON_CATCHUP_MAX;
  tzsave s;
  tz_enter(z, &s);
  int64_t f;
  if (catchup) {
    int64_t t = last_fire;
    while (next_fire(e, z, t, &f) == 0 && f <= now) {
      if (*n == max) {
        *capped = 1;
        break;
      }
      out[(*n)++] = f;
      t = f;
    }
  } else {
    /* Only the latest: look back from now over a window that grows until
     * it holds a fire time (or reaches last_fire), then walk forward in
     * it; the walk is short because the window is at most four times as
     * long as needed. */
    for (int64_t w = 3600;; w *= 4) {
      int64_t from = now - w < last_fire ? last_fire : now - w;
      if (next_fire(e, z, from, &f) == 0 && f <= now) {
        int64_t g;
        while (next_fire(e, z, f, &g) == 0 && g <= now)
          f = g;
        out[0] = f;
        *n = 1;
        break;
      }
      if (from == last_fire)
        break;
    }
  }
  tz_leave(z, &s);
  return 0;
}

int64_t cron_zone_to_utc(const cron_zone *z, int64_t local) {
  tzsave s;
  tz_enter(z, &s);
  long a = gmtoff(z, local - 86400), b = gmtoff(z, local + 86400);
  int64_t u = local - a;
  if (gmtoff(z, u) != a) {
    if (gmtoff(z, local - b) == b)
      u = local - b;
  }
  tz_leave(z, &s);
  return u;
}

void cron_format(const cron_zone *z, int64_t t, char *buf, size_t n) {
  tzsave s;
  tz_enter(z, &s);
  time_t tt = (time_t)t;
  struct tm lt, ut;
  char abbr[16] = "UTC", lbuf[32], ubuf[32];
  memset(&lt, 0, sizeof lt);
  memset(&ut, 0, sizeof ut);
  if (z->utc)
    gmtime_r(&tt, &lt);
  else if (localtime_r(&tt, &lt) && lt.tm_zone)
    snprintf(abbr, sizeof abbr, "%s", lt.tm_zone);
  long off = z->utc ? 0 : lt.tm_gmtoff;
  tz_leave(z, &s);
  gmtime_r(&tt, &ut);
  strftime(lbuf, sizeof lbuf, "%Y-%m-%dT%H:%M:%S", &lt);
  strftime(ubuf, sizeof ubuf, "%Y-%m-%dT%H:%M:%SZ", &ut);
  long a = off < 0 ? -off : off;
  snprintf(buf, n, "%s%c%02ld:%02ld %s  (%s)", lbuf, off < 0 ? '-' : '+',
           a / 3600, a % 3600 / 60, abbr, ubuf);
}

void cron_format_iso(const cron_zone *z, int64_t t, char *buf, size_t n) {
  tzsave s;
  tz_enter(z, &s);
  time_t tt = (time_t)t;
  struct tm lt;
  char lbuf[32];
  memset(&lt, 0, sizeof lt);
  if (z->utc)
    gmtime_r(&tt, &lt);
  else
    localtime_r(&tt, &lt);
  long off = z->utc ? 0 : lt.tm_gmtoff;
  tz_leave(z, &s);
  strftime(lbuf, sizeof lbuf, "%Y-%m-%dT%H:%M:%S", &lt);
  long a = off < 0 ? -off : off;
  snprintf(buf, n, "%s%c%02ld:%02ld", lbuf, off < 0 ? '-' : '+', a / 3600,
           a % 3600 / 60);
}

int cron_parse_time(const char *s, const cron_zone *z, int64_t *out) {
  int y, mo, d, h = 0, mi = 0, sec = 0, n = 0, k = 0;
  if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3)
    return -1;
  const char *p = s + n;
  if (*p == 'T' || *p == ' ') {
    if (sscanf(p + 1, "%2d:%2d%n", &h, &mi, &k) != 2)
      return -1;
    p += 1 + k;
    if (*p == ':') {
      if (sscanf(p + 1, "%2d%n", &sec, &k) != 1)
        return -1;
      p += 1 + k;
    }
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 59 ||
      h < 0 || mi < 0 || sec < 0)
    return -1;
  struct tm tm = {0};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  int64_t local = (int64_t)timegm(&tm);
  /* timegm takes 2025-02-30 as March 2: a day the month lacks is a typo.
   * Years as cron_format has them. */
  if (tm.tm_mday != d || tm.tm_mon != mo - 1 || y < 1900 || y > 9999)
    return -1;
  if (*p == 0) {
    *out = cron_zone_to_utc(z, local);
    return 0;
  }
  if (strcmp(p, "Z") == 0) {
    *out = local;
    return 0;
  }
  int oh, om = 0;
  if ((*p == '+' || *p == '-') &&
      (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) == 2 ||
       sscanf(p + 1, "%2d%2d%n", &oh, &om, &k) == 2) &&
      p[1 + k] == 0 && oh <= 14 && om <= 59) {
    *out = local - (*p == '-' ? -1 : 1) * (int64_t)(oh * 3600 + om * 60);
    return 0;
  }
  return -1;
}
