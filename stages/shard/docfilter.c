/*
 * docfilter: UTF-8 validation and quality filters. See docfilter.h.
 */
#include "docfilter.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

size_t docfilter_utf8_check(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      /* Most text is ASCII: test eight bytes at a time. */
      while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
          break;
        i += 8;
      }
      while (i < n && s[i] < 0x80)
        i++;
      continue;
    }
    /* Table 3-7 of the Unicode standard: the second byte's range depends
     * on the lead byte; that rules out overlongs (E0, F0), surrogates (ED)
     * and code points above U+10FFFF (F4). C0, C1 and F5..FF never lead. */
    unsigned c = s[i];
    size_t more;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
      more = 1;
    else if (c == 0xE0)
      more = 2, lo = 0xA0;
    else if (c == 0xED)
      more = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF)
      more = 2;
    else if (c == 0xF0)
      more = 3, lo = 0x90;
    else if (c == 0xF4)
      more = 3, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3)
      more = 3;
    else
      return i;
    if (n - i - 1 < more)
      return i; /* cut short by the end of the document */
    if (s[i + 1] < lo || s[i + 1] > hi)
      return i;
    for (size_t k = 2; k <= more; k++)
      if ((s[i + k] & 0xC0) != 0x80)
        return i;
    i += more + 1;
  }
  return n;
}

double docfilter_alpha_ratio(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t total = 0, alpha = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned c = s[i];
    if ((c & 0xC0) == 0x80)
      continue; /* continuation byte: part of the code point before */
    total++;
    if (c >= 0x80 || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
      alpha++;
  }
  return total ? (double)alpha / (double)total : 0.0;
}

static const char *const verdict_names[] = {
#define X(name, text) text,
    DOCFILTER_VERDICTS(X)
#undef X
};

const char *docfilter_verdict_name(docfilter_verdict v) {
  if ((int)v < 0 || v >= DOCFILTER_NVERDICTS)
    return "unknown";
  return verdict_names[v];
}

struct docfilter {
  docfilter_opts o;
  uint64_t *hashes; /* line hashes of the document being checked */
  size_t cap;
};

docfilter *docfilter_create(const docfilter_opts *opts) {
  docfilter *f = calloc(1, sizeof(*f));
  if (f && opts)
    f->o = *opts;
  return f;
}

void docfilter_destroy(docfilter *f) {
  if (!f)
    return;
  free(f->hashes);
  free(f);
}

/* In-place heapsort of 64-bit values: no extra memory (glibc's qsort
 * may allocate a copy of the array), and documents are small. */
static void sift_down(uint64_t *a, size_t root, size_t n) {
  for (;;) {
    size_t child = 2 * root + 1;
    if (child >= n)
      return;
    if (child + 1 < n && a[child + 1] > a[child])
      child++;
    if (a[root] >= a[child])
      return;
    uint64_t t = a[root];
    a[root] = a[child];
    a[child] = t;
    root = child;
  }
}

static void sort_u64(uint64_t *a, size_t n) {
  for (size_t i = n / 2; i-- > 0;)
    sift_down(a, i, n);
  for (size_t end = n; end-- > 1;) {
    uint64_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift_down(a, 0, end);
  }
}

int docfilter_repeated_line_ratio(docfilter *f, const char *s, size_t n,
                                  double *ratio) {
  size_t nlines = 0;
  const char *p = s, *end = s + n;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *stop = nl ? nl : end;
    size_t len = (size_t)(stop - p);
    if (len > 0 && p[len - 1] == '\r')
      len--;
    if (len > 0) {
      if (nlines == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 256;
        uint64_t *h = realloc(f->hashes, cap * sizeof(*h));
        if (!h)
          return DOCFILTER_ENOMEM;
        f->hashes = h;
        f->cap = cap;
      }
      f->hashes[nlines++] = XXH3_64bits(p, len);
    }
    p = nl ? nl + 1 : end;
  }
  if (nlines == 0) {
    *ratio = 0.0;
    return 0;
  }
  /* Repeats = lines - distinct lines: each distinct line's first
   * occurrence is the one that is not a repeat. */
  sort_u64(f->hashes, nlines);
  size_t distinct = 1;
  for (size_t i = 1; i < nlines; i++)
    distinct += f->hashes[i] != f->hashes[i - 1];
  *ratio = (double)(nlines - distinct) / (double)nlines;
  return 0;
}

int docfilter_check(docfilter *f, const char *s, size_t n,
                    docfilter_verdict *verdict) {
  const docfilter_opts *o = &f->o;
  if (o->min_bytes && n < o->min_bytes) {
    *verdict = DOCFILTER_TOO_SHORT;
    return 0;
  }
  if (o->max_bytes && n > o->max_bytes) {
    *verdict = DOCFILTER_TOO_LONG;
    return 0;
  }
  if (o->min_alpha_ratio > 0 &&
      docfilter_alpha_ratio(s, n) < o->min_alpha_ratio) {
    *verdict = DOCFILTER_LOW_ALPHA;
    return 0;
  }
  if (o->max_repeated_line_ratio < 1) {
    double r;
    int rc = docfilter_repeated_line_ratio(f, s, n, &r);
    if (rc != 0)
      return rc;
    if (r > o->max_repeated_line_ratio) {
      *verdict = DOCFILTER_REPEATED_LINES;
      return 0;
    }
  }
  *verdict = DOCFILTER_KEEP;
  return 0;
}
