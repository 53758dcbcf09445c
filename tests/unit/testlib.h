/*
 * Minimal unit-test helpers. Each test file is one executable run by ctest
 * in its own process with a timeout; a failed CHECK prints where and what
 * and makes main() return 1 at the end (TEST_DONE), so one run shows every
 * failure of the file.
 */
#ifndef DAGRUN_TESTLIB_H
#define DAGRUN_TESTLIB_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#include "base/util.h"

static int test_failures_;
static int test_checks_;

#define CHECK(cond)                                                            \
  do {                                                                         \
    test_checks_++;                                                            \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      test_failures_++;                                                        \
    }                                                                          \
  } while (0)

#define CHECK_INT(a, b)                                                        \
  do {                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                        \
    test_checks_++;                                                            \
    if (a_ != b_) {                                                            \
      fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__,    \
              __LINE__, #a, a_, #b, b_);                                       \
      test_failures_++;                                                        \
    }                                                                          \
  } while (0)

#define CHECK_STR(a, b)                                                        \
  do {                                                                         \
    const char *a_ = (a), *b_ = (b);                                           \
    test_checks_++;                                                            \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                   \
      fprintf(stderr, "%s:%d: %s is\n    \"%s\"\n  expected\n    \"%s\"\n",    \
              __FILE__, __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
      test_failures_++;                                                        \
    }                                                                          \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                  \
  do {                                                                         \
    double a_ = (a), b_ = (b);                                                 \
    test_checks_++;                                                            \
    if (!(a_ - b_ <= (tol) && b_ - a_ <= (tol))) {                             \
      fprintf(stderr, "%s:%d: %s == %g, expected %g (+-%g)\n", __FILE__,       \
              __LINE__, #a, a_, b_, (double)(tol));                            \
      test_failures_++;                                                        \
    }                                                                          \
  } while (0)

#define TEST_DONE()                                                            \
  do {                                                                         \
    fprintf(stderr, "%s: %d checks, %d failed\n", __FILE__, test_checks_,      \
            test_failures_);                                                   \
    return test_failures_ ? 1 : (test_checks_ ? 0 : 1);                        \
  } while (0)

/* "2026-03-08T07:00:00" (UTC) -> seconds since the epoch. */
static inline int64_t test_utc(const char *z) {
  struct tm tm = {0};
  if (sscanf(z, "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
             &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
    abort();
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return (int64_t)timegm(&tm);
}

/* Every diagnostic, formatted, one per line; caller frees. */
static inline char *all_diags(const diags *d) { return diags_text(d); }

/* A test's temporary directory: test_tmpdir_make("x") creates
 * /tmp/dagrun-x-XXXXXX (mkdtemp) and remembers it as test_tmpdir();
 * test_path formats a path under it, into one of 16 static buffers used
 * in turn (so a few results can be held at once); test_tmpdir_remove
 * takes the whole tree away (rm -rf). */
static inline char *test_tmpdir(void) {
  static char dir[256];
  return dir;
}

/* 0, or -1 after saying why. */
static inline int test_tmpdir_make(const char *name) {
  char *dir = test_tmpdir();
  snprintf(dir, 256, "/tmp/dagrun-%s-XXXXXX", name);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return -1;
  }
  return 0;
}

__attribute__((format(printf, 1, 2))) static inline char *
test_path(const char *fmt, ...) {
  static char buf[16][1024];
  static int k;
  char *p = buf[k++ % 16];
  char rel[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof rel, fmt, ap);
  va_end(ap);
  snprintf(p, 1024, "%s/%s", test_tmpdir(), rel);
  return p;
}

static inline void test_tmpdir_remove(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmpdir());
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", test_tmpdir());
}

#endif
