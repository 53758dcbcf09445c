/*
 * Minimal unit-test helpers. Each test file is one executable run by ctest
 * in its own process with a timeout; a failed CHECK prints where and what
 * and makes main() return 1 at the end (TEST_DONE), so one run shows every
 * failure of the file.
 */
#ifndef DAGRUN_TESTLIB_H
#define DAGRUN_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

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

/* Every diagnostic, formatted, one per line; caller frees. */
static inline char *all_diags(const diags *d) {
  sbuf b = {0};
  for (size_t i = 0; i < d->n; i++) {
    char *s = diag_format(&d->v[i]);
    sbuf_printf(&b, "%s\n", s);
    free(s);
  }
  return sbuf_take(&b);
}

#endif
