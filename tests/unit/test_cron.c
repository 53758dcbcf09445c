/*
 * cron: next fire times on a table of expressions x zones x start times
 * (both DST transitions in Europe/Berlin and America/New_York, Feb 29,
 * day-of-month/day-of-week OR), every parse error with its column, the
 * bounded search for impossible expressions, and cron_due's catch-up.
 * The expected times were checked independently with Python's zoneinfo
 * (e.g. 2026-03-08T07:00:00Z is 03:00 EDT, 2026-10-25T01:00:00Z is 02:00
 * CET), not taken from this code.
 */
#include <stdint.h>
#include <time.h>

#include "base/cron.h"
#include "dagfile/spec.h"
#include "testlib.h"

static char *iso(int64_t t) {
  static char buf[8][32];
  static int k;
  char *b = buf[k++ % 8];
  time_t tt = (time_t)t;
  struct tm tm;
  gmtime_r(&tt, &tm);
  strftime(b, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

typedef struct next_case {
  const char *expr, *zone, *after;
  const char *want[6]; /* the next fire times in order, NULL-terminated */
} next_case;

static const next_case next_cases[] = {
    /* America/New_York, spring forward 2026-03-08: 02:00 EST -> 03:00 EDT
     * at 07:00Z. A fixed job inside the gap fires once at 03:00 EDT. */
    {"30 2 * * *",
     "America/New_York",
     "2026-03-07T12:00:00Z",
     {"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
    {"0 2 * * *",
     "America/New_York",
     "2026-03-07T12:00:00Z",
     {"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
    /* 03:00 exists and is also where the gap lands: once. */
    {"0 3 * * *",
     "America/New_York",
     "2026-03-07T12:00:00Z",
     {"2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z"}},
    /* From exactly the second before the transition. */
    {"30 2 * * *",
     "America/New_York",
     "2026-03-08T06:59:59Z",
     {"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
    {"*/15 * * * *",
     "America/New_York",
     "2026-03-08T06:40:00Z",
     {"2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"}},
    {"@hourly",
     "America/New_York",
     "2026-03-08T05:30:00Z",
     {"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
    /* Fall back 2026-11-01: 02:00 EDT -> 01:00 EST at 06:00Z. A fixed job
     * in the repeated hour fires once, at the first (EDT) pass. */
    {"30 1 * * *",
     "America/New_York",
     "2026-10-31T12:00:00Z",
     {"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
    /* ... also when the search starts inside the second pass. */
    {"30 1 * * *",
     "America/New_York",
     "2026-11-01T06:10:00Z",
     {"2026-11-02T06:30:00Z"}},
    {"0 1 * * *",
     "America/New_York",
     "2026-10-31T12:00:00Z",
     {"2026-11-01T05:00:00Z", "2026-11-02T06:00:00Z"}},
    /* Star jobs follow real time through the repeat. */
    {"*/15 * * * *",
     "America/New_York",
     "2026-11-01T05:40:00Z",
     {"2026-11-01T05:45:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:15:00Z",
      "2026-11-01T06:30:00Z", "2026-11-01T06:45:00Z", "2026-11-01T07:00:00Z"}},
    {"@hourly",
     "America/New_York",
     "2026-11-01T04:30:00Z",
     {"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
    /* Europe/Berlin, spring forward 2026-03-29: 02:00 CET -> 03:00 CEST at
     * 01:00Z. */
    {"30 2 * * *",
     "Europe/Berlin",
     "2026-03-28T12:00:00Z",
     {"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
    {"@hourly",
     "Europe/Berlin",
     "2026-03-29T00:30:00Z",
     {"2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
    {"*/15 * * * *",
     "Europe/Berlin",
     "2026-03-29T00:40:00Z",
     {"2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"}},
    /* Fall back 2026-10-25: 03:00 CEST -> 02:00 CET at 01:00Z. */
    {"30 2 * * *",
     "Europe/Berlin",
     "2026-10-24T12:00:00Z",
     {"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
    {"*/30 * * * *",
     "Europe/Berlin",
     "2026-10-25T00:10:00Z",
     {"2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z",
      "2026-10-25T02:00:00Z"}},
    {"@hourly",
     "Europe/Berlin",
     "2026-10-25T00:30:00Z",
     {"2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
    /* Ordinary days in a zone: 09:00 CET/CEST. */
    {"0 9 * * MON-FRI",
     "Europe/Berlin",
     "2026-11-20T12:00:00Z",
     {"2026-11-23T08:00:00Z", "2026-11-24T08:00:00Z"}},
    /* Feb 29 only in leap years. */
    {"0 0 29 2 *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
    {"0 0 29 2 *", "UTC", "2028-02-29T00:00:00Z", {"2032-02-29T00:00:00Z"}},
    /* Both day fields restricted: the 1st OR a Monday. */
    {"0 0 1 * MON",
     "UTC",
     "2026-10-31T12:00:00Z",
     {"2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", "2026-11-09T00:00:00Z",
      "2026-11-16T00:00:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}},
    /* A star-led day field: both must match (odd days that are Mondays). */
    {"0 0 */2 * MON",
     "UTC",
     "2026-10-31T12:00:00Z",
     {"2026-11-09T00:00:00Z", "2026-11-23T00:00:00Z"}},
    {"0 0 * * MON", "UTC", "2026-10-31T12:00:00Z", {"2026-11-02T00:00:00Z"}},
    /* Names, any case; 7 is Sunday. */
    {"0 12 * jan,Dec Sat,SUN",
     "UTC",
     "2026-11-21T00:00:00Z",
     {"2026-12-05T12:00:00Z", "2026-12-06T12:00:00Z", "2026-12-12T12:00:00Z"}},
    {"0 0 * * 7", "UTC", "2026-11-21T00:00:00Z", {"2026-11-22T00:00:00Z"}},
    {"0 0 * * 0", "UTC", "2026-11-21T00:00:00Z", {"2026-11-22T00:00:00Z"}},
    /* Lists, ranges, steps. */
    {"1-10/3 * * * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-01T00:01:00Z", "2026-01-01T00:04:00Z", "2026-01-01T00:07:00Z",
      "2026-01-01T00:10:00Z", "2026-01-01T01:01:00Z"}},
    {"5/20 1,3 * * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-01T01:05:00Z", "2026-01-01T01:25:00Z", "2026-01-01T01:45:00Z",
      "2026-01-01T03:05:00Z"}},
    /* Strictly after. */
    {"* * * * *", "UTC", "2026-01-01T00:00:00Z", {"2026-01-01T00:01:00Z"}},
    {"* * * * *", "UTC", "2026-01-01T00:00:30Z", {"2026-01-01T00:01:00Z"}},
    /* Macros. */
    {"@daily", "UTC", "2026-11-21T10:00:00Z", {"2026-11-22T00:00:00Z"}},
    {"@midnight", "UTC", "2026-11-21T10:00:00Z", {"2026-11-22T00:00:00Z"}},
    {"@weekly", "UTC", "2026-11-21T10:00:00Z", {"2026-11-22T00:00:00Z"}},
    {"@monthly", "UTC", "2026-11-21T10:00:00Z", {"2026-12-01T00:00:00Z"}},
    {"@yearly", "UTC", "2026-11-21T10:00:00Z", {"2027-01-01T00:00:00Z"}},
    {"@ANNUALLY", "UTC", "2026-11-21T10:00:00Z", {"2027-01-01T00:00:00Z"}},
    {"@daily",
     "America/New_York",
     "2026-11-21T10:00:00Z",
     {"2026-11-22T05:00:00Z"}},
};

static void test_next(void) {
  char err[256];
  for (size_t i = 0; i < sizeof next_cases / sizeof next_cases[0]; i++) {
    const next_case *c = &next_cases[i];
    cron_expr *e;
    cron_zone *z;
    int col;
    CHECK_INT(cron_parse(c->expr, &e, &col, err, sizeof err), 0);
    CHECK_INT(cron_zone_open(c->zone, &z, err, sizeof err), 0);
    if (!e || !z) {
      cron_destroy(e);
      cron_zone_close(z);
      continue;
    }
    int64_t t = test_utc(c->after), f;
    for (int k = 0; k < 6 && c->want[k]; k++) {
      if (cron_next(e, z, t, &f, err, sizeof err) != 0) {
        fprintf(stderr, "%s in %s: %s\n", c->expr, c->zone, err);
        CHECK(0);
        break;
      }
      if (f != test_utc(c->want[k]))
        fprintf(stderr, "case %zu: %s in %s after %s\n", i, c->expr, c->zone,
                iso(t));
      CHECK_STR(iso(f), c->want[k]);
      t = f;
    }
    cron_destroy(e);
    cron_zone_close(z);
  }
}

typedef struct err_case {
  const char *expr;
  int col;
  const char *msg;
} err_case;

static const err_case err_cases[] = {
    {"0 24 * * *", 3, "hour: 24 is out of range 0-23"},
    {"60 * * * *", 1, "minute: 60 is out of range 0-59"},
    {"* * 0 * *", 5, "day-of-month: 0 is out of range 1-31"},
    {"* * 32 * *", 5, "day-of-month: 32 is out of range 1-31"},
    {"* * * 13 *", 7, "month: 13 is out of range 1-12"},
    {"* * * * 8", 9, "day-of-week: 8 is out of range 0-7"},
    {"  0 24 * * *", 5, "hour: 24 is out of range 0-23"},
    {"0 1,2,99 * * *", 7, "hour: 99 is out of range 0-23"},
    {"* * * FOO *", 7,
     "month: 'FOO' is not a number or a month name (JAN-DEC)"},
    {"* * * * MON-FUN", 13,
     "day-of-week: 'FUN' is not a number or a day name (SUN-SAT)"},
    {"x * * * *", 1, "minute: 'x' is not a number"},
    {"1-x * * * *", 3, "minute: 'x' is not a number"},
    {"1x * * * *", 1, "minute: '1x' is not a number"},
    {"*/0 * * * *", 3, "minute: step 0 is out of range 1-60"},
    {"* */25 * * *", 5, "hour: step 25 is out of range 1-24"},
    {"*/ * * * *", 3, "minute: missing step after '/'"},
    {"*/a * * * *", 3, "minute: step 'a' is not a number"},
    {"1,,2 * * * *", 3, "minute: empty item in list"},
    {"1, * * * *", 3, "minute: empty item in list"},
    {"-5 * * * *", 1, "minute: missing value"},
    {"5-2 * * * *", 1,
     "minute: range 5-2 goes backwards (wrap-around is not supported: write "
     "it as a list, e.g. 22-23,0-2)"},
    {"* * * *", 8,
     "expected 5 fields (minute hour day-of-month month day-of-week), found "
     "4"},
    {"* * * * * *", 11,
     "unexpected 6th field '*': expected 5 fields (minute hour day-of-month "
     "month day-of-week)"},
    {"", 1,
     "empty schedule: expected 5 fields (minute hour day-of-month month "
     "day-of-week) or a macro like @daily"},
    {"@fortnightly", 1,
     "unknown macro '@fortnightly' (expected @hourly, @daily, @midnight, "
     "@weekly, @monthly, @yearly or @annually)"},
    {"@daily 5", 8, "unexpected '5' after @daily"},
};

static void test_parse_errors(void) {
  char err[256];
  for (size_t i = 0; i < sizeof err_cases / sizeof err_cases[0]; i++) {
    const err_case *c = &err_cases[i];
    cron_expr *e = (cron_expr *)1;
    int col = -1;
    err[0] = 0;
    CHECK_INT(cron_parse(c->expr, &e, &col, err, sizeof err), DR_EINVAL);
    CHECK(e == NULL);
    CHECK_STR(err, c->msg);
    if (col != c->col)
      fprintf(stderr, "for '%s':\n", c->expr);
    CHECK_INT(col, c->col);
  }
}

static void test_zones(void) {
  char err[256];
  cron_zone *z = (cron_zone *)1;
  CHECK_INT(cron_zone_open("Mars/Base", &z, err, sizeof err), DR_ENOENT);
  CHECK(z == NULL);
  CHECK(strstr(err, "unknown time zone 'Mars/Base'") != NULL);
  CHECK_INT(cron_zone_open("../../etc/passwd", &z, err, sizeof err), DR_ENOENT);
  CHECK_INT(cron_zone_open("zone.tab", &z, err, sizeof err), DR_ENOENT);
  CHECK_INT(cron_zone_open(NULL, &z, err, sizeof err), 0);
  CHECK_STR(cron_zone_name(z), "UTC");
  cron_zone_close(z);
  cron_zone_close(NULL);
  cron_destroy(NULL);

  /* The zone code leaves the process's TZ as it found it. */
  setenv("TZ", "Asia/Tokyo", 1);
  CHECK_INT(cron_zone_open("America/New_York", &z, err, sizeof err), 0);
  char buf[96];
  cron_format(z, test_utc("2026-03-08T07:00:00Z"), buf, sizeof buf);
  CHECK_STR(buf, "2026-03-08T03:00:00-04:00 EDT  (2026-03-08T07:00:00Z)");
  cron_format(z, test_utc("2026-11-01T06:00:00Z"), buf, sizeof buf);
  CHECK_STR(buf, "2026-11-01T01:00:00-05:00 EST  (2026-11-01T06:00:00Z)");
  CHECK_STR(getenv("TZ"), "Asia/Tokyo");
  unsetenv("TZ");
  cron_format(z, test_utc("2026-06-01T12:00:00Z"), buf, sizeof buf);
  CHECK(getenv("TZ") == NULL);
  /* Local wall time -> UTC: ordinary, repeated (first), in the gap. */
  CHECK_STR(iso(cron_zone_to_utc(z, test_utc("2026-06-01T08:00:00Z"))),
            "2026-06-01T12:00:00Z");
  CHECK_STR(iso(cron_zone_to_utc(z, test_utc("2026-11-01T01:30:00Z"))),
            "2026-11-01T05:30:00Z");
  CHECK_STR(iso(cron_zone_to_utc(z, test_utc("2026-03-08T02:30:00Z"))),
            "2026-03-08T07:30:00Z");
  cron_zone_close(z);
  CHECK_INT(cron_zone_open("UTC", &z, err, sizeof err), 0);
  cron_format(z, test_utc("2026-03-08T07:00:00Z"), buf, sizeof buf);
  CHECK_STR(buf, "2026-03-08T07:00:00+00:00 UTC  (2026-03-08T07:00:00Z)");
  cron_zone_close(z);
}

/* An expression that never fires is refused when parsed, at its
 * day-of-month; the edge cases that do fire parse, and fire. */
static void test_impossible(void) {
  static const struct {
    const char *expr, *msg;
  } never[] = {
      {"0 0 30 2 *", "day-of-month: '30' never falls in month '2' (at most "
                     "29 days): the schedule never fires"},
      {"0 0 31 4,6,9,11 *", "day-of-month: '31' never falls in month "
                            "'4,6,9,11' (at most 30 days): the schedule "
                            "never fires"},
      {"0 0 30-31 FEB *", "day-of-month: '30-31' never falls in month 'FEB' "
                          "(at most 29 days): the schedule never fires"},
      /* A day-of-week that starts with '*' must match as well: no help. */
      {"0 0 30 2 */2", "day-of-month: '30' never falls in month '2' (at "
                       "most 29 days): the schedule never fires"},
  };
  char err[256];
  for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
    cron_expr *e = (cron_expr *)1;
    int col = -1;
    CHECK_INT(cron_parse(never[i].expr, &e, &col, err, sizeof err), DR_EINVAL);
    CHECK(e == NULL);
    CHECK_STR(err, never[i].msg);
    CHECK_INT(col, 5);
  }
  /* Feb 29 (leap years), and day 30 of February OR any Monday of it. */
  static const struct {
    const char *expr, *after, *want;
  } fire[] = {
      {"0 0 29 2 *", "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z"},
      {"0 0 30 2 1", "2026-01-01T00:00:00Z", "2026-02-02T00:00:00Z"},
      {"0 0 31 1-4 *", "2026-02-01T00:00:00Z", "2026-03-31T00:00:00Z"},
      /* The rarest: a Feb 29 that is a Sunday, 40 years after the last
       * (2100 is no leap year), found within CRON_SEARCH_YEARS. */
      {"0 0 29 2 */7", "2089-01-01T00:00:00Z", "2128-02-29T00:00:00Z"},
  };
  cron_zone *z;
  CHECK_INT(cron_zone_open("UTC", &z, err, sizeof err), 0);
  for (size_t i = 0; i < sizeof fire / sizeof fire[0]; i++) {
    cron_expr *e;
    int col;
    int64_t f;
    CHECK_INT(cron_parse(fire[i].expr, &e, &col, err, sizeof err), 0);
    CHECK_INT(cron_next(e, z, test_utc(fire[i].after), &f, err, sizeof err), 0);
    CHECK_STR(iso(f), fire[i].want);
    cron_destroy(e);
  }

  /* The parser's verdict against the search's, day-of-month and month
   * lists drawn at random, with each kind of day-of-week: an expression
   * parses exactly when cron_next finds a fire time. */
  static const char *const dows[] = {"*", "*/7", "*/3", "1", "MON-FRI"};
  unsigned seed = 7;
  int ok = 1, fires = 0, refused = 0;
  for (int i = 0; i < 3000; i++) {
    char dom[64] = "", mon[64] = "", expr[160];
    int nd = 1 + i % 3, nm = 1 + i % 2;
    for (int k = 0; k < nd; k++) {
      seed = seed * 1103515245u + 12345u;
      int d = 26 + (int)((seed >> 16) % 6); /* 26-31: the days at stake */
      snprintf(dom + strlen(dom), sizeof dom - strlen(dom), "%s%d",
               k ? "," : "", d);
    }
    for (int k = 0; k < nm; k++) {
      seed = seed * 1103515245u + 12345u;
      int m = 1 + (int)((seed >> 16) % 12);
      snprintf(mon + strlen(mon), sizeof mon - strlen(mon), "%s%d",
               k ? "," : "", m);
    }
    snprintf(expr, sizeof expr, "0 0 %s %s %s", dom, mon, dows[i % 5]);
    cron_expr *e;
    int col;
    int64_t f;
    int parsed = cron_parse(expr, &e, &col, err, sizeof err) == 0;
    int found = parsed && cron_next(e, z, test_utc("2026-01-01T00:00:00Z"), &f,
                                    err, sizeof err) == 0;
    if (parsed != found || (!parsed && !strstr(err, "never fires"))) {
      fprintf(stderr, "'%s': parsed %d, fire time found %d (%s)\n", expr,
              parsed, found, err);
      ok = 0;
    }
    fires += found;
    refused += !parsed;
    if (parsed)
      cron_destroy(e);
  }
  CHECK(ok);
  CHECK(fires > 0 && refused > 0);
  cron_zone_close(z);
}

/* Every bad item of every field is reported, in column order. */
typedef struct collected {
  int n, col[8];
  char msg[8][128];
} collected;

static void collect(void *ctx, int col, const char *msg) {
  collected *c = ctx;
  if (c->n < 8) {
    c->col[c->n] = col;
    snprintf(c->msg[c->n], sizeof c->msg[0], "%s", msg);
  }
  c->n++;
}

static void test_parse_each(void) {
  collected c = {0};
  cron_expr *e = (cron_expr *)1;
  CHECK_INT(cron_parse_each("61 25 * 13,0 *", &e, collect, &c), DR_EINVAL);
  CHECK(e == NULL);
  CHECK_INT(c.n, 4);
  CHECK_INT(c.col[0], 1);
  CHECK_STR(c.msg[0], "minute: 61 is out of range 0-59");
  CHECK_INT(c.col[1], 4);
  CHECK_STR(c.msg[1], "hour: 25 is out of range 0-23");
  CHECK_INT(c.col[2], 9);
  CHECK_STR(c.msg[2], "month: 13 is out of range 1-12");
  CHECK_INT(c.col[3], 12);
  CHECK_STR(c.msg[3], "month: 0 is out of range 1-12");
  /* cron_parse gives the first of them. */
  char err[256];
  int col;
  CHECK_INT(cron_parse("61 25 * 13,0 *", &e, &col, err, sizeof err), DR_EINVAL);
  CHECK_STR(err, "minute: 61 is out of range 0-59");
  CHECK_INT(col, 1);
  /* A good expression reports nothing. */
  c.n = 0;
  CHECK_INT(cron_parse_each("0 0 29 2 *", &e, collect, &c), 0);
  CHECK_INT(c.n, 0);
  cron_destroy(e);
}

static void test_due(void) {
  char err[256];
  cron_expr *e;
  cron_zone *z;
  int col, capped;
  size_t n;
  int64_t out[CRON_CATCHUP_MAX];
  CHECK_INT(cron_zone_open("UTC", &z, err, sizeof err), 0);
  CHECK_INT(cron_parse("0 * * * *", &e, &col, err, sizeof err), 0);
  int64_t last = test_utc("2026-01-01T00:00:00Z"), now = test_utc("2026-01-01T05:30:00Z");
  /* With catch-up: every missed hour, in order. */
  CHECK_INT(
      cron_due(e, z, last, now, 1, out, 100, &n, &capped, err, sizeof err), 0);
  CHECK_INT(n, 5);
  CHECK_INT(capped, 0);
  CHECK_STR(iso(out[0]), "2026-01-01T01:00:00Z");
  CHECK_STR(iso(out[4]), "2026-01-01T05:00:00Z");
  /* Without: only the latest. */
  CHECK_INT(
      cron_due(e, z, last, now, 0, out, 100, &n, &capped, err, sizeof err), 0);
  CHECK_INT(n, 1);
  CHECK_STR(iso(out[0]), "2026-01-01T05:00:00Z");
  /* A fire exactly at now is due; one at last_fire is not. */
  CHECK_INT(cron_due(e, z, last, test_utc("2026-01-01T01:00:00Z"), 1, out, 100, &n,
                     &capped, err, sizeof err),
            0);
  CHECK_INT(n, 1);
  CHECK_STR(iso(out[0]), "2026-01-01T01:00:00Z");
  /* Nothing due. */
  CHECK_INT(cron_due(e, z, last, test_utc("2026-01-01T00:59:00Z"), 0, out, 100, &n,
                     &capped, err, sizeof err),
            0);
  CHECK_INT(n, 0);
  CHECK_INT(
      cron_due(e, z, last, last, 1, out, 100, &n, &capped, err, sizeof err), 0);
  CHECK_INT(n, 0);
  /* The cap: the earliest max, and capped set. */
  CHECK_INT(cron_due(e, z, last, now, 1, out, 3, &n, &capped, err, sizeof err),
            0);
  CHECK_INT(n, 3);
  CHECK_INT(capped, 1);
  CHECK_STR(iso(out[2]), "2026-01-01T03:00:00Z");
  /* Exactly max missed: not capped. */
  CHECK_INT(cron_due(e, z, last, now, 1, out, 5, &n, &capped, err, sizeof err),
            0);
  CHECK_INT(n, 5);
  CHECK_INT(capped, 0);
  cron_destroy(e);

  /* A month of missed minutes: catch-up stops at CRON_CATCHUP_MAX. */
  CHECK_INT(cron_parse("* * * * *", &e, &col, err, sizeof err), 0);
  now = test_utc("2026-02-01T00:00:00Z");
  CHECK_INT(
      cron_due(e, z, last, now, 1, out, 100000, &n, &capped, err, sizeof err),
      0);
  CHECK_INT(n, CRON_CATCHUP_MAX);
  CHECK_INT(capped, 1);
  CHECK_STR(iso(out[0]), "2026-01-01T00:01:00Z");
  CHECK_STR(iso(out[999]), "2026-01-01T16:40:00Z");
  CHECK_INT(
      cron_due(e, z, last, now + 30, 0, out, 1, &n, &capped, err, sizeof err),
      0);
  CHECK_INT(n, 1);
  CHECK_STR(iso(out[0]), "2026-02-01T00:00:00Z");
  cron_destroy(e);

  /* Without catch-up, long downtime, a rare job: found by widening. */
  CHECK_INT(cron_parse("0 0 29 2 *", &e, &col, err, sizeof err), 0);
  CHECK_INT(cron_due(e, z, test_utc("2020-01-01T00:00:00Z"),
                     test_utc("2026-06-01T00:00:00Z"), 0, out, 1, &n, &capped, err,
                     sizeof err),
            0);
  CHECK_INT(n, 1);
  CHECK_STR(iso(out[0]), "2024-02-29T00:00:00Z");
  cron_destroy(e);
  cron_zone_close(z);

  /* Across the New York fall-back, catch-up keeps both 01:00s of an
   * hourly job and one of a daily 01:30. */
  CHECK_INT(cron_zone_open("America/New_York", &z, err, sizeof err), 0);
  CHECK_INT(cron_parse("@hourly", &e, &col, err, sizeof err), 0);
  CHECK_INT(cron_due(e, z, test_utc("2026-11-01T04:00:00Z"),
                     test_utc("2026-11-01T07:00:00Z"), 1, out, 100, &n, &capped, err,
                     sizeof err),
            0);
  CHECK_INT(n, 3);
  CHECK_STR(iso(out[1]), "2026-11-01T06:00:00Z");
  cron_destroy(e);
  CHECK_INT(cron_parse("30 1 * * *", &e, &col, err, sizeof err), 0);
  CHECK_INT(cron_due(e, z, test_utc("2026-10-31T12:00:00Z"),
                     test_utc("2026-11-01T12:00:00Z"), 1, out, 100, &n, &capped, err,
                     sizeof err),
            0);
  CHECK_INT(n, 1);
  CHECK_STR(iso(out[0]), "2026-11-01T05:30:00Z");
  cron_destroy(e);
  cron_zone_close(z);
}

/* A DAG file's trigger keys: parsed into the spec, errors at file:line:col
 * (the column of the bad token inside the expression). */
static void test_spec_keys(void) {
  const char *good = "dag: d\n"
                     "schedule: \"*/15 2 * * *\"\n"
                     "timezone: Europe/Berlin\n"
                     "catchup: true\n"
                     "overlap: queue\n"
                     "tasks: {a: {stage: exec}}\n";
  diags d = {0};
  spec *s;
  CHECK_INT(spec_parse("good.yaml", good, strlen(good), &s, &d), 0);
  CHECK_INT(d.n, 0);
  CHECK(s && s->schedule);
  CHECK_STR(s ? s->timezone : NULL, "Europe/Berlin");
  CHECK_INT(s ? s->catchup : -1, 1);
  CHECK_INT(s ? (int)s->overlap : -1, SPEC_OVERLAP_QUEUE);
  spec_free(s);
  diags_free(&d);

  const char *defaults =
      "dag: d\nschedule: '@daily'\ntasks: {a: {stage: exec}}\n";
  d = (diags){0};
  CHECK_INT(spec_parse("def.yaml", defaults, strlen(defaults), &s, &d), 0);
  CHECK(s && s->timezone == NULL && s->catchup == 0 &&
        s->overlap == SPEC_OVERLAP_SKIP);
  spec_free(s);
  diags_free(&d);

  const char *bad = "dag: d\n"
                    "schedule: \"0 24 * * *\"\n"
                    "timezone: Mars/Base\n"
                    "catchup: maybe\n"
                    "overlap: skp\n"
                    "tasks: {a: {stage: exec}}\n";
  d = (diags){0};
  CHECK_INT(spec_parse("bad.yaml", bad, strlen(bad), &s, &d), DR_ESPEC);
  char *all = all_diags(&d);
  CHECK_STR(all,
            "bad.yaml:2:14: error: 'schedule': hour: 24 is out of range "
            "0-23\n"
            "bad.yaml:3:11: error: 'timezone': unknown time zone 'Mars/Base' "
            "(expected an IANA name such as Europe/Berlin or "
            "America/New_York)\n"
            "bad.yaml:4:10: error: 'catchup': expected true or false, found a "
            "string (\"maybe\")\n"
            "bad.yaml:5:10: error: 'overlap': expected skip, queue or allow, "
            "found \"skp\"; did you mean 'skip'?\n");
  free(all);
  spec_free(s);
  diags_free(&d);

  const char *plain =
      "dag: d\nschedule: 0 2 * * MON-FUN\ntasks: {a: {stage: exec}}\n";
  d = (diags){0};
  CHECK_INT(spec_parse("plain.yaml", plain, strlen(plain), &s, &d), DR_ESPEC);
  all = all_diags(&d);
  CHECK_STR(all, "plain.yaml:2:23: error: 'schedule': day-of-week: 'FUN' is "
                 "not a number or a day name (SUN-SAT)\n");
  free(all);
  spec_free(s);
  diags_free(&d);

  /* Every error of the expression, and one that never fires, at their
   * columns, with the file's other errors. */
  const char *many = "dag: d\n"
                     "schedule: \"61 25 * * *\"\n"
                     "overlap: skp\n"
                     "tasks: {a: {stage: exec}}\n";
  d = (diags){0};
  CHECK_INT(spec_parse("many.yaml", many, strlen(many), &s, &d), DR_ESPEC);
  all = all_diags(&d);
  CHECK_STR(all,
            "many.yaml:2:12: error: 'schedule': minute: 61 is out of range "
            "0-59\n"
            "many.yaml:2:15: error: 'schedule': hour: 25 is out of range "
            "0-23\n"
            "many.yaml:3:10: error: 'overlap': expected skip, queue or allow, "
            "found \"skp\"; did you mean 'skip'?\n");
  free(all);
  spec_free(s);
  diags_free(&d);
  const char *never = "dag: d\n"
                      "schedule: \"0 0 30 2 *\"\n"
                      "tasks: {a: {stage: exec}}\n";
  d = (diags){0};
  CHECK_INT(spec_parse("never.yaml", never, strlen(never), &s, &d), DR_ESPEC);
  all = all_diags(&d);
  CHECK_STR(all, "never.yaml:2:16: error: 'schedule': day-of-month: '30' "
                 "never falls in month '2' (at most 29 days): the schedule "
                 "never fires\n");
  free(all);
  spec_free(s);
  diags_free(&d);
}

/* Random input never crashes the parser (ASan in CI), and an error
 * always points inside the expression or just past its end. Times far out
 * are refused, not overflowed. */
static void test_fuzz(void) {
  /* Half random characters, half random fields (mostly valid ones). */
  static const char alphabet[] = "0123456789*/-, @\tJANmonSunxX7";
  static const char *const parts[] = {"*", "*/5", "1-3",    "JAN", "mon-fri",
                                      "7", "1,2", "0-59/7", "2/9", "60",
                                      "x", "5/",  "@daily", ""};
  char z[64], err[256];
  unsigned seed = 12345;
  int ok = 1, parsed = 0;
  for (int i = 0; i < 20000; i++) {
    size_t n = 0;
    if (i % 2) {
      n = (size_t)(i % 23);
      for (size_t k = 0; k < n; k++) {
        seed = seed * 1103515245u + 12345u;
        z[k] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
      }
    } else {
      int nf = 4 + i % 3;
      for (int k = 0; k < nf; k++) {
        seed = seed * 1103515245u + 12345u;
        const char *p =
            parts[(seed >> 16) % 14 < 8 ? (seed >> 16) % 4 : (seed >> 16) % 14];
        n += (size_t)snprintf(z + n, sizeof z - n, "%s%s", k ? " " : "", p);
      }
    }
    z[n] = 0;
    cron_expr *e;
    int col = 0;
    int rc = cron_parse(z, &e, &col, err, sizeof err);
    if (rc == 0) {
      parsed++;
      cron_destroy(e);
    } else if (rc != DR_EINVAL || col < 1 || col > (int)n + 1 || !err[0]) {
      fprintf(stderr, "fuzz: '%s' -> %d at column %d\n", z, rc, col);
      ok = 0;
    }
  }
  CHECK(ok);
  CHECK(parsed > 0);

  cron_expr *e;
  cron_zone *z0;
  int col, capped;
  int64_t f, out[4];
  size_t n;
  CHECK_INT(cron_parse("* * * * *", &e, &col, err, sizeof err), 0);
  CHECK_INT(cron_zone_open("Europe/Berlin", &z0, err, sizeof err), 0);
  CHECK_INT(cron_next(e, z0, INT64_MAX, &f, err, sizeof err), DR_EINVAL);
  CHECK_INT(cron_next(e, z0, INT64_MIN, &f, err, sizeof err), DR_EINVAL);
  CHECK_INT(
      cron_due(e, z0, 0, INT64_MAX, 1, out, 4, &n, &capped, err, sizeof err),
      DR_EINVAL);
  CHECK_INT(cron_next(e, z0, test_utc("9999-12-31T23:58:00Z"), &f, err, sizeof err),
            0);
  cron_destroy(e);
  cron_zone_close(z0);
}

int main(void) {
  test_next();
  test_parse_errors();
  test_zones();
  test_impossible();
  test_parse_each();
  test_due();
  test_spec_keys();
  test_fuzz();
  TEST_DONE();
}
