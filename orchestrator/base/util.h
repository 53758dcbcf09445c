/*
 * Small shared pieces of the dagrun program: error codes, diagnostics
 * (file:line:col messages), a growable string, a string hash map, duration
 * parsing, paths, processes. Nothing here knows about DAGs. Files and
 * clocks are lib/fileio.h and lib/clock.h, shared with every tree.
 *
 * All functions are safe to call from any thread on distinct objects.
 * Allocation failure aborts the process (xmalloc): the orchestrator cannot
 * do anything useful without memory, and plugins never use this module.
 */
#ifndef DAGRUN_UTIL_H
#define DAGRUN_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Error codes: 0 is success, every error is negative. */
#define DR_ERRNO_MAP(XX)                                                       \
  XX(EINVAL, -1, "invalid argument")                                           \
  XX(ENOENT, -2, "no such file or directory")                                  \
  XX(EIO, -3, "input/output error")                                            \
  XX(ESPEC, -4, "invalid DAG file")                                            \
  XX(ECYCLE, -5, "dependency cycle")                                           \
  XX(ETEMPLATE, -6, "unresolvable template")                                   \
  XX(EDEFERRED, -7, "value known only when an upstream task finishes")         \
  XX(EPLUGIN, -8, "not a loadable dagrun stage plugin")                        \
  XX(EABI, -9, "plugin built for an incompatible ABI")                         \
  XX(ESTAGE, -10, "unknown stage")                                             \
  XX(EPARAM, -11, "invalid stage parameter")                                   \
  XX(ESPAWN, -12, "cannot start process")                                      \
  XX(EPROTO, -13, "malformed worker message")                                 \
  XX(ESTORE, -14, "run store error")                                           \
  XX(EVERSION, -15, "run store written by a newer dagrun")                   \
  XX(EBUSY, -16, "in use by another process")                                 \
  XX(EEXIST, -17, "already exists")

typedef enum {
  DR_OK = 0,
#define DR_XX(code, val, _) DR_##code = (val),
  DR_ERRNO_MAP(DR_XX)
#undef DR_XX
} dr_err;

/* Static description of an error code, never NULL. */
const char *dr_strerror(int err);

/* Memory: abort with a message when the system is out of memory. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a new string; caller frees. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Grows a dynamic array: ensures cap >= need, doubling. */
#define VEC_RESERVE(ptr, cap, need)                                            \
  do {                                                                         \
    if ((need) > (cap)) {                                                      \
      size_t nc_ = (cap) ? (cap) * 2 : 8;                                      \
      while (nc_ < (need))                                                     \
        nc_ *= 2;                                                              \
      (ptr) = xrealloc((ptr), nc_ * sizeof(*(ptr)));                           \
      (cap) = nc_;                                                             \
    }                                                                          \
  } while (0)
#define VEC_PUSH(ptr, n, cap, val)                                             \
  do {                                                                         \
    VEC_RESERVE(ptr, cap, (n) + 1);                                            \
    (ptr)[(n)++] = (val);                                                      \
  } while (0)

/* Growable NUL-terminated string. Zero-initialise to start empty. */
typedef struct sbuf {
  char *s;
  size_t n, cap;
} sbuf;
void sbuf_add(sbuf *b, const char *s, size_t n);
void sbuf_puts(sbuf *b, const char *s);
void sbuf_putc(sbuf *b, char c);
void sbuf_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sbuf_vprintf(sbuf *b, const char *fmt, va_list ap);
/* Returns the string (never NULL, "" when empty) and hands it to the caller;
 * the buffer is left empty. */
char *sbuf_take(sbuf *b);
void sbuf_free(sbuf *b);
/* Appends the n bytes at data in base64 (RFC 4648, with padding). */
void sbuf_base64(sbuf *b, const void *data, size_t n);

/* Diagnostics: user-facing errors with a position. Kept in the order they
 * were added; printed as "file:line:col: error: message". line/col are
 * 1-based; 0 means unknown (then omitted). */
typedef struct diag {
  char *file;
  int line, col;
  char *msg;
} diag;
typedef struct diags {
  diag *v;
  size_t n, cap;
} diags;
void diags_add(diags *d, const char *file, int line, int col, const char *fmt,
               ...) __attribute__((format(printf, 5, 6)));
void diags_vadd(diags *d, const char *file, int line, int col,
                const char *fmt, va_list ap);
/* One diagnostic as "file:line:col: error: msg"; caller frees. */
char *diag_format(const diag *g);
/* Every diagnostic formatted, one a line (each ending in '\n'); caller
 * frees. */
char *diags_text(const diags *d);
void diags_print(const diags *d, FILE *f);
void diags_free(diags *d);

/* String-keyed hash map to a size_t value. Keys are copied. */
typedef struct strmap {
  char **keys;
  size_t *vals;
  size_t n, cap; /* cap is a power of two or 0 */
} strmap;
void strmap_put(strmap *m, const char *key, size_t val);
/* Returns 1 and sets *val when found, 0 otherwise. val may be NULL. */
int strmap_get(const strmap *m, const char *key, size_t *val);
void strmap_free(strmap *m);

/* Edit distance for "did you mean": Levenshtein plus swaps of two
 * neighbouring letters, the commonest typo ("retires" is one edit from
 * "retries"). Returns limit + 1 as soon as the distance exceeds limit. */
size_t edit_distance(const char *a, const char *b, size_t limit);
/* The candidate closest to word, or NULL when none is close enough
 * (distance <= max(1, strlen(word)/3)). candidates is NULL-terminated;
 * the result is one of them. */
const char *closest_match(const char *word, const char *const *candidates);

/* Parses a duration: "500ms", "30s", "5m", "2h", "1d", "1h30m" (each unit
 * at most once, largest first), or a plain non-negative number of seconds
 * ("90", "1.5"); numbers are digits with an optional fraction (no sign,
 * exponent or hex). Returns 0 and seconds in *out, or DR_EINVAL. */
int parse_duration(const char *s, double *out);
/* Formats seconds compactly: "850ms", "12.3s", "4m05s", "2h03m". */
void format_duration(double s, char *buf, size_t n);

/* The shortest decimal text of a finite v that strtod reads back as v,
 * bit for bit ("5.0626962184906006", "0.1", "3"), into buf (25 bytes
 * hold any). cJSON's own printing stops at 15 digits when they come
 * within DBL_EPSILON of v, which moved a loss written to metrics.jsonl
 * by one FP64 unit, and a loss at an FP32 tie to the other float. */
void format_exact_double(double v, char *buf, size_t n);

/* UTC timestamp "2026-11-21T13:53:27Z" (with .mmm if millis) into buf. */
void format_utc(double t, int millis, char *buf, size_t n);

/* The start time of process pid (/proc/PID/stat field 22, clock ticks
 * since boot): with the pid, it names one process even after the pid is
 * reused. 0 when there is no such process. */
long long proc_start_time(int pid);
/* Whether process pid exists and started at start (start 0: any). */
int proc_alive(int pid, long long start);

/* Whether process pid has entry (a whole "NAME=value") in its
 * environment (/proc/PID/environ; 0 when it cannot be read). */
int proc_has_env(long pid, const char *entry);

/* The offset of the first byte of z[0, n) that is not valid UTF-8 (a NUL
 * byte counts as not valid), or n when all of it is. */
size_t utf8_bad_at(const char *z, size_t n);
/* z[0, n) as valid UTF-8 for JSON: invalid sequences and NUL bytes become
 * U+FFFD. Caller frees. */
char *utf8_clean(const char *z, size_t n);

/* Appends z[0, n) to b as a terminal may show it: the bytes a terminal
 * acts on are written \xNN (C0 control characters but tab, DEL, and the C1
 * controls U+0080..U+009F in their UTF-8 form, which some terminals take
 * as ESC sequences), so that text from outside (a task's error, which may
 * quote a param; a file's name) cannot set the window title, clear the
 * screen, move the cursor or forge a line of dagrun's own. A '\n' is
 * written nl, or \x0a when nl is NULL (one line). Anything else is
 * copied as it is. */
void sbuf_put_shown(sbuf *b, const char *z, size_t n, const char *nl);
/* z written as sbuf_put_shown writes it on one line (nl NULL); NULL for
 * NULL. Caller frees. For text printed to a terminal; JSON output has its
 * own escapes and keeps the text as it is. */
char *xstrdup_shown(const char *z);

/* Directory part of a path ("." when none); caller frees. */
char *path_dirname(const char *path);
/* Joins a and b with one '/'; b absolute returns a copy of b. Caller frees. */
char *path_join(const char *a, const char *b);

#endif /* DAGRUN_UTIL_H */
