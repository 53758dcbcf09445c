/*
 * pretok: the GPT-2 pre-tokenizer.
 *
 * Splits text into the pieces that byte-level BPE encodes one at a time,
 * with GPT-2's pattern
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * compiled by PCRE2 (UTF, UCP, JIT). The input is bytes, not necessarily
 * UTF-8: PCRE2_MATCH_INVALID_UTF keeps invalid sequences from being an
 * error, and the bytes that no match covers become pieces of their own
 * (a run of such bytes is one piece). So every input byte lies in exactly
 * one piece, and the pieces, in order, concatenate to the input.
 *
 * Optionally (pretok_set_digits) Hugging Face's Digits pre-tokenizer runs
 * first, as in a Sequence of [Digits, ByteLevel] (SmolLM's tokenizer):
 * numeric characters (\p{N}, Rust's char::is_numeric) become pieces of
 * their own, each one or each run, and the pattern splits the stretches
 * between them, each on its own (so " 42" is " ", "4", "2", where GPT-2
 * has " 42").
 *
 * Threads: a pretok (the compiled pattern) is immutable and may be shared
 * by any number of threads. A pretok_matcher holds PCRE2's match data and
 * JIT stack and belongs to one thread at a time.
 */
#ifndef DAGRUN_PRETOK_H
#define DAGRUN_PRETOK_H

#include <stddef.h>

typedef struct pretok pretok;
typedef struct pretok_matcher pretok_matcher;

/* Compiles the pattern (JIT where the platform has it). Returns 0 and a
 * new pretok in *out, or -1 with a message in err. */
int pretok_create(pretok **out, char *err, size_t errlen);
/* Hugging Face's Digits before the pattern: off (GPT-2), each numeric
 * character a piece (individual_digits true), or each run of them. */
typedef enum pretok_digits {
  PRETOK_DIGITS_NONE,
  PRETOK_DIGITS_INDIVIDUAL,
  PRETOK_DIGITS_CONTIGUOUS
} pretok_digits;
/* Sets Digits; before any matcher is made from p (it is not immutable
 * until then). Returns 0, or -1 with err. */
int pretok_set_digits(pretok *p, pretok_digits mode, char *err, size_t errlen);
pretok_digits pretok_get_digits(const pretok *p);

/* Frees the compiled pattern; NULL is a no-op. Every matcher made from it
 * must be destroyed first. */
void pretok_destroy(pretok *p);

/* A matcher for one thread. Borrows p, which must outlive it. Returns
 * NULL when out of memory. */
pretok_matcher *pretok_matcher_create(const pretok *p);
void pretok_matcher_destroy(pretok_matcher *m);

/* Starts splitting text[0..len). The matcher borrows text until the last
 * pretok_next call. */
void pretok_begin(pretok_matcher *m, const char *text, size_t len);
/* The next piece: returns 1 and sets *start (offset into the text) and
 * *n (its length, >= 1); 0 when the text is done; -1 if PCRE2 failed
 * (out of memory or match limits; the text cannot be split further). */
int pretok_next(pretok_matcher *m, size_t *start, size_t *n);

/* Pieces made of ASCII are found without PCRE2, by code that follows
 * the pattern exactly; 0 turns that off so every piece comes from PCRE2
 * (the tests compare the two). */
void pretok_matcher_set_fast(pretok_matcher *m, int on);

/* Convenience for tests and tools: the pieces of text as offsets, in
 * order. *offs (malloc'd, caller frees) gets npieces + 1 entries, piece i
 * being [offs[i], offs[i+1]). Returns 0, or -1 (message in err). */
int pretok_split(const pretok *p, const char *text, size_t len, size_t **offs,
                 size_t *npieces, char *err, size_t errlen);

#endif /* DAGRUN_PRETOK_H */
