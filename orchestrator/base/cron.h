/*
 * cron: the time logic of cron triggers. Parses 5-field cron expressions,
 * opens IANA time zones, and answers "when does this fire next" and "which
 * fire times were missed". No clock, no loop: callers pass the times, so a
 * daemon (dagrun serve) and tests with a fake clock use the same code.
 *
 * Syntax: "minute hour day-of-month month day-of-week", fields separated
 * by blanks. Each field is a comma list of items; an item is `*`, `N`,
 * `N-M`, each optionally followed by `/STEP` (`*` / `N-M` every STEP; `N/STEP`
 * means N-max/STEP). Ranges: minute 0-59, hour 0-23, day-of-month 1-31,
 * month 1-12 or JAN-DEC, day-of-week 0-7 or SUN-SAT (0 and 7 are Sunday);
 * names are case-insensitive and may be range ends. Macros: @hourly
 * (0 * * * *), @daily and @midnight (0 0 * * *), @weekly (0 0 * * 0),
 * @monthly (0 0 1 * *), @yearly and @annually (0 0 1 1 *).
 * Day matching is Vixie cron's: when both day fields are restricted (neither
 * starts with `*`), a day matches if EITHER matches; otherwise both must.
 * An expression that can never fire is refused when parsed: `0 0 30 2 *`
 * and `0 0 31 4,6,9,11 *` are errors, `0 0 29 2 *` (leap years) and
 * `0 0 30 2 1` (every Monday of February, by the EITHER rule) are not.
 *
 * Time zones: IANA names from the system tz database ($TZDIR or
 * /usr/share/zoneinfo); "UTC" is the default. Times are UTC seconds since
 * the epoch; fire times fall on whole local minutes.
 *
 * Daylight saving time, explicitly:
 * - Spring forward (local times that do not exist, e.g. 02:00-02:59 in
 *   America/New_York on 2026-03-08): a job due at any local time in the
 *   gap fires once, at the first valid local time after the gap (02:30
 *   fires at 03:00 EDT). A job that also matches 03:00 still fires once.
 * - Fall back (local times that happen twice, e.g. 01:00-01:59 on
 *   2026-11-01 in New York): a fixed-time job fires once, at the first
 *   occurrence (EDT). A job whose minute or hour field starts with `*`
 *   (`*`, a star with a step such as every 15
 *   minutes, @hourly) runs in real elapsed
 *   time: it fires at every real instant whose local time matches, so
 *   `0 * * * *` fires at 01:00 EDT and again at 01:00 EST, as Vixie cron
 *   does. Fire times are always strictly increasing in UTC.
 *
 * Threads: the zone code switches the process's TZ variable (setenv,
 * tzset, localtime_r) and puts the previous value back before returning.
 * That is not thread-safe; dagrun's orchestrator is single-threaded, and
 * every function here must be called from its one thread.
 */
#ifndef DAGRUN_CRON_H
#define DAGRUN_CRON_H

#include <stddef.h>
#include <stdint.h>

/* How far cron_next searches before it gives up. An expression that
 * parses fires at least this often: the rarest are a Feb 29 that must
 * also be one weekday (day-of-week a star with a step, so both day fields
 * must match), up to 40 years apart: Sundays 2088, then 2128, as 2100 is
 * no leap year. */
#define CRON_SEARCH_YEARS 41
/* The most fire times cron_due returns with catch-up. */
#define CRON_CATCHUP_MAX 1000

typedef struct cron_expr cron_expr;
typedef struct cron_zone cron_zone;

/* Parses an expression. Returns 0 with *out (free with cron_destroy), or
 * DR_EINVAL with *out NULL, the first error's message in err (e.g. "hour:
 * 24 is out of range 0-23", or for one that never fires "day-of-month:
 * '30' never falls in month '2' (at most 29 days): the schedule never
 * fires") and *col set to the 1-based column in z of the bad token (col
 * may be NULL). */
int cron_parse(const char *z, cron_expr **out, int *col, char *err,
               size_t nerr);

/* Called once per error, with its 1-based column in the expression and
 * its message (borrowed: valid until the callback returns). */
typedef void (*cron_report_fn)(void *ctx, int col, const char *msg);

/* cron_parse for a checker that reports every error: each bad item of
 * each field goes to fn (`61 25 * * *` gives two), in column order. The
 * never-fires check runs only when every field parsed. Returns as
 * cron_parse. */
int cron_parse_each(const char *z, cron_expr **out, cron_report_fn fn,
                    void *ctx);
void cron_destroy(cron_expr *e); /* NULL is a no-op */

/* Opens a zone by IANA name; NULL or "" means UTC. Returns 0 with *out
 * (free with cron_zone_close), or DR_ENOENT with "unknown time zone
 * 'Mars/Base'" in err. */
int cron_zone_open(const char *name, cron_zone **out, char *err, size_t nerr);
void cron_zone_close(cron_zone *z);             /* NULL is a no-op */
const char *cron_zone_name(const cron_zone *z); /* borrowed */

/* The first fire time strictly after `after` (UTC seconds) into *out.
 * Returns 0, or DR_ENOENT with "no fire time in 41 years" in err when the
 * expression does not fire within CRON_SEARCH_YEARS (a safety net:
 * cron_parse refuses the expressions that never fire), or
 * DR_EINVAL for a time outside the years 1900-9999. Bounded:
 * it skips whole months, days and hours that cannot match. */
int cron_next(const cron_expr *e, const cron_zone *z, int64_t after,
              int64_t *out, char *err, size_t nerr);

/* The last fire time strictly before `before` (UTC seconds) into *out:
 * the start of the data interval of a run scheduled at `before`. It is
 * always one of cron_next's fire times (DST rules included), so
 * cron_next(cron_prev(t)) == t for every fire time t. Returns 0,
 * DR_ENOENT with "no fire time in 41 years" in err when there is none in
 * CRON_SEARCH_YEARS, or DR_EINVAL for a time outside 1900-9999. */
int cron_prev(const cron_expr *e, const cron_zone *z, int64_t before,
              int64_t *out, char *err, size_t nerr);

/* The fire times missed in (last_fire, now], for a daemon that was down or
 * busy. With catchup, all of them in increasing order, at most max (at most
 * CRON_CATCHUP_MAX: the earliest ones; *capped is then set to 1 and the
 * caller records the last one as its new last_fire and asks again later).
 * Without catchup, only the latest one (n is 0 or 1). out has room for max
 * entries (max >= 1). Returns 0 with *n, or a negative DR_ code with err. */
int cron_due(const cron_expr *e, const cron_zone *z, int64_t last_fire,
             int64_t now, int catchup, int64_t *out, size_t max, size_t *n,
             int *capped, char *err, size_t nerr);

/* Converts a local wall time in z, given as seconds since the epoch as if
 * the wall time were UTC, to UTC seconds. A wall time that happens twice
 * gives the first instant; one in a spring-forward gap gives the instant
 * the same distance after the transition (02:30 -> 03:30 local). */
int64_t cron_zone_to_utc(const cron_zone *z, int64_t local);

/* Parses a time given by a user: "2026-03-08T01:30[:00]" (a local time in
 * z, as cron_zone_to_utc takes it), the same with "Z" or an offset such as
 * "+01:00" (an absolute time), or a date alone (local midnight), in the
 * years 1900-9999. Returns 0 with UTC seconds in *out, or -1 (a day the
 * month lacks, such as 2025-02-30, too). */
int cron_parse_time(const char *s, const cron_zone *z, int64_t *out);

/* Formats t as "2026-03-08T03:00:00-04:00 EDT  (2026-03-08T07:00:00Z)"
 * into buf (64 bytes are enough). */
void cron_format(const cron_zone *z, int64_t t, char *buf, size_t n);

/* Formats t as ISO 8601 with z's offset at t, "2026-11-01T00:30:00+01:00"
 * (UTC: "+00:00"), into buf (32 bytes are enough). Its first 10 bytes are
 * the local date. */
void cron_format_iso(const cron_zone *z, int64_t t, char *buf, size_t n);

#endif /* DAGRUN_CRON_H */
