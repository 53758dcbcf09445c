/*
 * pretok: GPT-2's pre-tokenizer, which cuts text into the pieces that BPE
 * merges within; pretok.h states the contract.
 *
 * The pattern is GPT-2's own (openai's encoder.py), run by PCRE2 with
 * Unicode properties and JIT compilation rather than rewritten by hand,
 * so that text is cut as GPT-2 cuts it. Most text is ASCII, and one
 * PCRE2 call a piece costs more than the rest of encoding, so an ASCII
 * fast path decides the pieces it can from a class table that PCRE2
 * itself filled in, and hands every other case back to PCRE2.
 *
 * With Hugging Face's Digits (SmolLM's tokenizer), the matcher first cuts
 * the text at numeric characters and runs the same code on each stretch
 * between them, its end standing for the end of the text; GPT-2's path
 * runs the same instructions as without it (but for one compare).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretok.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>

/* GPT-2's pattern (openai/gpt-2 encoder.py), unchanged. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
    "|\\s+(?!\\S)|\\s+";

/* The JIT stack grows from 32 KiB up to this. The pattern's repeats are
 * single-character ones, which the JIT runs without a frame per
 * character, so long whitespace or letter runs stay far below it; the
 * ceiling only matters if that ever changes. */
#define JIT_STACK_MAX (8u << 20)

/* Classes of ASCII characters for the fast path. */
enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

struct pretok {
  pcre2_code *code;
  int jit; /* 1 when JIT compilation succeeded */
  /* Hugging Face's Digits before the pattern (pretok_set_digits): \p{N},
   * which is Rust's char::is_numeric, finds the numeric characters. */
  pretok_digits digits;
  pcre2_code *num;
  /* The class of each ASCII character, as PCRE2 itself sees \p{L},
   * \p{N} and \s with UCP (asked once at creation, so the fast path
   * cannot disagree with the pattern about, say, \v or \x1c). */
  unsigned char cls[128];
};

struct pretok_matcher {
  const pretok *p;
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *stack;
  const char *text;
  size_t len, pos;
  /* With Digits, len is the end of the stretch without numeric
   * characters that the pattern now splits; total is the text's end. */
  size_t total;
  /* A match found past uncovered bytes, returned on the next call. */
  size_t pend_start, pend_end;
  int has_pend;
  int fast; /* 1: the ASCII fast path is on (the default) */
};

int pretok_create(pretok **out, char *err, size_t errlen) {
  *out = NULL;
  pretok *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "pretok: out of memory");
    return -1;
  }
  int ec;
  PCRE2_SIZE eo;
  p->code = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec,
                          &eo, NULL);
  if (!p->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    snprintf(err, errlen, "pretok: pattern does not compile at %zu: %s",
             (size_t)eo, (char *)msg);
    free(p);
    return -1;
  }
  /* Without JIT (a platform PCRE2 lacks it for) the interpreter gives the
   * same pieces, only slower. */
  p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
  static const struct {
    const char *re;
    unsigned char cls;
  } classes[] = {{"\\p{L}", C_LETTER}, {"\\p{N}", C_NUMBER}, {"\\s", C_SPACE}};
  for (int k = 0; k < 3; k++) {
    pcre2_code *c =
        pcre2_compile((PCRE2_SPTR)classes[k].re, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    pcre2_match_data *md = c ? pcre2_match_data_create(1, NULL) : NULL;
    if (!md) {
      pcre2_code_free(c);
      pretok_destroy(p);
      snprintf(err, errlen, "pretok: cannot compile the ASCII classes");
      return -1;
    }
    for (unsigned ch = 0; ch < 128; ch++) {
      unsigned char b = (unsigned char)ch;
      if (pcre2_match(c, &b, 1, 0, PCRE2_ANCHORED, md, NULL) >= 0)
        p->cls[ch] = classes[k].cls;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(c);
  }
  *out = p;
  return 0;
}

void pretok_destroy(pretok *p) {
  if (!p)
    return;
  pcre2_code_free(p->code);
  pcre2_code_free(p->num);
  free(p);
}

int pretok_set_digits(pretok *p, pretok_digits mode, char *err, size_t errlen) {
  if (mode != PRETOK_DIGITS_NONE && !p->num) {
    int ec;
    PCRE2_SIZE eo;
    p->num = pcre2_compile((PCRE2_SPTR) "\\p{N}", PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
                               PCRE2_ANCHORED,
                           &ec, &eo, NULL);
    if (!p->num) {
      snprintf(err, errlen, "pretok: cannot compile \\p{N}");
      return -1;
    }
    /* pcre2_match uses the JIT code when there is some. */
    pcre2_jit_compile(p->num, PCRE2_JIT_COMPLETE);
  }
  p->digits = mode;
  return 0;
}

pretok_digits pretok_get_digits(const pretok *p) { return p->digits; }

pretok_matcher *pretok_matcher_create(const pretok *p) {
  pretok_matcher *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->p = p;
  m->fast = 1;
  /* The pattern's match data has room for \p{N}'s one pair too. */
  m->md = pcre2_match_data_create_from_pattern(p->code, NULL);
  m->mctx = pcre2_match_context_create(NULL);
  if (!m->md || !m->mctx)
    goto fail;
  if (p->jit) {
    m->stack = pcre2_jit_stack_create(32 * 1024, JIT_STACK_MAX, NULL);
    if (!m->stack)
      goto fail;
    pcre2_jit_stack_assign(m->mctx, NULL, m->stack);
  }
  return m;
fail:
  pretok_matcher_destroy(m);
  return NULL;
}

void pretok_matcher_destroy(pretok_matcher *m) {
  if (!m)
    return;
  pcre2_jit_stack_free(m->stack);
  pcre2_match_context_free(m->mctx);
  pcre2_match_data_free(m->md);
  free(m);
}

void pretok_begin(pretok_matcher *m, const char *text, size_t len) {
  m->text = text;
  /* With Digits, the first stretch is found by the first pretok_next. */
  m->len = m->p->digits ? 0 : len;
  m->total = len;
  m->pos = 0;
  m->has_pend = 0;
}

void pretok_matcher_set_fast(pretok_matcher *m, int on) { m->fast = on; }

/* The piece at i decided on ASCII alone, exactly as the pattern would:
 * returns 1 and its end, or 0 when a byte >= 0x80 matters (a letter run
 * may go on with an accented letter, a space may be NBSP, ...) and PCRE2
 * must decide. Most text is mostly ASCII, and one PCRE2 call per piece
 * costs more than the rest of encoding. */
static int fast_piece(const unsigned char *cls, const unsigned char *t,
                      size_t len, size_t i, size_t *end) {
  unsigned c = t[i];
  if (c >= 0x80)
    return 0;
  /* 's|'t|'re|'ve|'m|'ll|'d */
  if (c == '\'' && i + 1 < len) {
    unsigned d = t[i + 1];
    if (d == 's' || d == 't' || d == 'm' || d == 'd') {
      *end = i + 2;
      return 1;
    }
    if (i + 2 < len) {
      unsigned e = t[i + 2];
      if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') ||
          (d == 'l' && e == 'l')) {
        *end = i + 3;
        return 1;
      }
    }
  }
  /* " ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+": an optional space, then a
   * run of one class. */
  size_t j = i;
  if (c == ' ' && i + 1 < len) {
    unsigned d = t[i + 1];
    if (d >= 0x80)
      return 0;
    if (cls[d] != C_SPACE) {
      j = i + 1;
      c = d;
    }
  }
  unsigned k0 = cls[c];
  size_t k = j + 1;
  if (k0 != C_SPACE) {
    while (k < len && t[k] < 0x80 && cls[t[k]] == k0)
      k++;
    if (k < len && t[k] >= 0x80)
      return 0;
    *end = k;
    return 1;
  }
  /* "\s+(?!\S)|\s+": a whitespace run; before a non-space, all but its
   * last character (which goes with what follows), or the one. */
  while (k < len && t[k] < 0x80 && cls[t[k]] == C_SPACE)
    k++;
  if (k < len && t[k] >= 0x80)
    return 0;
  if (k == len || k - i == 1)
    *end = k;
  else
    *end = k - 1;
  return 1;
}

/* The length of the numeric character at i, or 0 if there is none. The
 * subject PCRE2 is given ends a character's most (4 bytes) on: with
 * invalid UTF-8 allowed, its interpreter checks the UTF-8 of all the
 * subject it is given, which on the whole text would be quadratic. */
static size_t numeric_at(pretok_matcher *m, size_t i) {
  const unsigned char *t = (const unsigned char *)m->text;
  if (t[i] < 0x80)
    return m->p->cls[t[i]] == C_NUMBER;
  size_t end = m->total - i > 4 ? i + 4 : m->total;
  if (pcre2_match(m->p->num, t, end, i, 0, m->md, NULL) < 0)
    return 0; /* no match; \p{N} of one character hits no limit */
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
  return ov[1] - ov[0];
}

/* Where the next numeric character at or after i starts (total if
 * none): ASCII from the class table, other characters one by one at
 * their first byte. */
static size_t next_numeric(pretok_matcher *m, size_t i) {
  const unsigned char *t = (const unsigned char *)m->text;
  for (; i < m->total; i++) {
    if (t[i] < 0x80 ? m->p->cls[t[i]] == C_NUMBER
                    : (t[i] & 0xC0) != 0x80 && numeric_at(m, i))
      return i;
  }
  return m->total;
}

/* Hugging Face's Digits, at the end of a stretch: returns 1 with the
 * next piece when it is numeric (one character, or with contiguous
 * digits the run), 0 when the text is done, or 2 after setting len to
 * the end of the stretch of other text that starts at pos, which the
 * pattern then splits on its own (as Sequence runs ByteLevel on each of
 * Digits' pieces). */
static int digits_next(pretok_matcher *m, size_t *start, size_t *n) {
  if (m->pos >= m->total)
    return 0;
  size_t k = numeric_at(m, m->pos);
  if (!k) {
    m->len = next_numeric(m, m->pos);
    return 2;
  }
  size_t e = m->pos + k;
  if (m->p->digits == PRETOK_DIGITS_CONTIGUOUS)
    while (e < m->total && (k = numeric_at(m, e)))
      e += k;
  *start = m->pos;
  *n = e - m->pos;
  m->pos = m->len = e;
  return 1;
}

int pretok_next(pretok_matcher *m, size_t *start, size_t *n) {
  /* Without Digits, pos reaches len only at the end of the text, so
   * GPT-2's path pays one compare a piece for Digits. */
  if (m->pos >= m->len && m->p->digits && !m->has_pend) {
    int rc = digits_next(m, start, n);
    if (rc != 2)
      return rc;
  }
  if (m->has_pend) {
    m->has_pend = 0;
    *start = m->pend_start;
    *n = m->pend_end - m->pend_start;
    m->pos = m->pend_end;
    return 1;
  }
  if (m->pos >= m->len)
    return 0;
  size_t fe;
  if (m->fast && fast_piece(m->p->cls, (const unsigned char *)m->text, m->len,
                            m->pos, &fe)) {
    *start = m->pos;
    *n = fe - m->pos;
    m->pos = fe;
    return 1;
  }
  int rc;
  /* PCRE2 wants a non-NULL subject even when it is empty. */
  PCRE2_SPTR subj = (PCRE2_SPTR)m->text;
  if (m->p->jit)
    rc = pcre2_jit_match(m->p->code, subj, m->len, m->pos, 0, m->md, m->mctx);
  else
    rc = pcre2_match(m->p->code, subj, m->len, m->pos, 0, m->md, m->mctx);
  if (rc == PCRE2_ERROR_NOMATCH) {
    /* Only invalid UTF-8 is left: one piece of its own. */
    *start = m->pos;
    *n = m->len - m->pos;
    m->pos = m->len;
    return 1;
  }
  if (rc < 0)
    return -1;
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
  size_t s = ov[0], e = ov[1];
  if (e <= s) /* the pattern cannot match empty; be safe anyway */
    return -1;
  if (s > m->pos) {
    /* Bytes before the match are invalid UTF-8 no match covers. */
    *start = m->pos;
    *n = s - m->pos;
    m->pend_start = s;
    m->pend_end = e;
    m->has_pend = 1;
    m->pos = s;
    return 1;
  }
  *start = s;
  *n = e - s;
  m->pos = e;
  return 1;
}

int pretok_split(const pretok *p, const char *text, size_t len, size_t **offs,
                 size_t *npieces, char *err, size_t errlen) {
  *offs = NULL;
  *npieces = 0;
  pretok_matcher *m = pretok_matcher_create(p);
  size_t cap = 16, n = 0;
  size_t *v = malloc(cap * sizeof *v);
  if (!m || !v)
    goto oom;
  pretok_begin(m, text, len);
  size_t s, k;
  int rc;
  while ((rc = pretok_next(m, &s, &k)) == 1) {
    if (n + 2 > cap) {
      size_t *nv = realloc(v, 2 * cap * sizeof *v);
      if (!nv)
        goto oom;
      v = nv;
      cap *= 2;
    }
    v[n++] = s;
  }
  if (rc < 0) {
    snprintf(err, errlen, "pretok: PCRE2 match failed");
    free(v);
    pretok_matcher_destroy(m);
    return -1;
  }
  v[n] = len;
  *offs = v;
  *npieces = n;
  pretok_matcher_destroy(m);
  return 0;
oom:
  snprintf(err, errlen, "pretok: out of memory");
  free(v);
  pretok_matcher_destroy(m);
  return -1;
}
