/*
 * docfilter: UTF-8 validation and the optional quality filters of the
 * shard stage.
 *
 * All functions work on a document's bytes as given (no NUL terminator
 * needed). The pure functions are safe from any thread; a docfilter handle
 * holds scratch memory and belongs to one thread at a time.
 */
#ifndef DAGRUN_DOCFILTER_H
#define DAGRUN_DOCFILTER_H

#include <stddef.h>
#include <stdint.h>

/* Offset of the first byte of the first ill-formed UTF-8 sequence in s,
 * or n when all n bytes are well-formed UTF-8 (RFC 3629: no overlong
 * forms, no surrogates U+D800..U+DFFF, nothing above U+10FFFF, no
 * sequence cut short by the end of the buffer). U+0000 is well-formed. */
size_t docfilter_utf8_check(const char *s, size_t n);

/* Share of "alphabetic" code points among all code points of s, in [0,1];
 * 0 for an empty s. Alphabetic is approximated as ASCII letters plus every
 * non-ASCII code point (letters of other scripts, without a Unicode
 * table). s must be valid UTF-8 for the count to mean code points. */
double docfilter_alpha_ratio(const char *s, size_t n);

/* Verdicts, in the order the filters are applied: a document is counted
 * under the first filter it fails. */
#define DOCFILTER_VERDICTS(X)                                                  \
  X(KEEP, "kept")                                                              \
  X(TOO_SHORT, "too_short")                                                    \
  X(TOO_LONG, "too_long")                                                      \
  X(LOW_ALPHA, "low_alpha")                                                    \
  X(REPEATED_LINES, "repeated_lines")

typedef enum docfilter_verdict {
#define X(name, text) DOCFILTER_##name,
  DOCFILTER_VERDICTS(X)
#undef X
      DOCFILTER_NVERDICTS
} docfilter_verdict;

/* The manifest's name of a verdict ("too_short"); static storage. */
const char *docfilter_verdict_name(docfilter_verdict v);

/* Filter settings; a zero (or, for the repeated-line ratio, a value >= 1)
 * turns a filter off. */
typedef struct docfilter_opts {
  uint64_t min_bytes;             /* drop documents shorter than this */
  uint64_t max_bytes;             /* drop documents longer than this */
  double min_alpha_ratio;         /* drop below this docfilter_alpha_ratio */
  double max_repeated_line_ratio; /* drop above this repeated-line ratio */
} docfilter_opts;

typedef struct docfilter docfilter;

/* A filter with the given settings (copied). Returns NULL when out of
 * memory. Caller frees with docfilter_destroy; destroy(NULL) is a no-op. */
docfilter *docfilter_create(const docfilter_opts *opts);
void docfilter_destroy(docfilter *f);

/* Share, in [0,1], of the non-empty lines of s that repeat an earlier line
 * of s exactly (a trailing '\r' is ignored, so CRLF and LF lines compare
 * equal); 0 when s has no non-empty line. Lines are compared by 64-bit
 * hash, so two different lines compare equal with probability ~2^-64.
 * Uses f's scratch memory, about 8 bytes per line. Returns 0, or
 * DOCFILTER_ENOMEM. */
int docfilter_repeated_line_ratio(docfilter *f, const char *s, size_t n,
                                  double *ratio);

/* Applies the filters to a document and stores the verdict. Returns 0, or
 * DOCFILTER_ENOMEM (then *verdict is unset). */
int docfilter_check(docfilter *f, const char *s, size_t n,
                    docfilter_verdict *verdict);

#define DOCFILTER_ENOMEM (-12)

#endif
