/*
 * bpe_internal: what bpe.c, bpe_train.c and tokjson.c share and the
 * public header does not promise. Not for use outside stages/tokenize
 * (and the unit tests, which check the byte map and the builder's
 * checks directly).
 */
#ifndef DAGRUN_BPE_INTERNAL_H
#define DAGRUN_BPE_INTERNAL_H

#include "bpe.h"
#include "pretok.h"

/* One merge: left and right ids make result. */
typedef struct bpe_merge {
  uint32_t left, right, result;
} bpe_merge;

/* An entry of the (left, right) -> (rank, result) table; open addressing,
 * key UINT64_MAX marks an empty slot. */
typedef struct bpe_mslot {
  uint64_t key;
  uint32_t rank, result;
} bpe_mslot;

struct bpe {
  uint32_t nvocab;
  uint32_t *tok_off, *tok_len; /* bytes of id i: blob + tok_off[i] */
  char *blob;
  uint8_t *is_added;     /* per id: 1 for an added token (its own text) */
  uint32_t byte_id[256]; /* the token of each single byte */
  bpe_merge *merges;     /* by rank */
  size_t nmerges;
  bpe_mslot *mtab;
  size_t mmask;
  uint32_t *added;      /* ids of the added tokens, in the order given */
  uint8_t *added_flags; /* BPE_ADDED_* of each, by the same index */
  size_t nadded;
  size_t nplain; /* how many of them are not special */
  pretok *pt;
};

/* What an added token does, as Hugging Face's AddedToken flags. */
enum {
  BPE_ADDED_SPECIAL = 1,   /* special: true (bpe_encode leaves its text) */
  BPE_ADDED_LSTRIP = 2,    /* takes the whitespace before it */
  BPE_ADDED_RSTRIP = 4,    /* takes the whitespace after it */
  BPE_ADDED_NORMALIZED = 8 /* normalized: true (kept for saving) */
};

/* A token for bpe_build: its bytes, or len 0 for an id with no token
 * (ids need not be dense in a file). */
typedef struct bpe_tokdef {
  const char *p;
  size_t len;
} bpe_tokdef;

/* Builds a tokenizer from its parts, copying them: nvocab ids with their
 * bytes, merges by rank (a later duplicate of a pair takes that pair's
 * rank, as GPT-2's and Hugging Face's dict building does), and the ids
 * that are specials. Checks that every byte has a token, that each merge
 * names existing tokens and that result's bytes are left's then
 * right's. The specials become added tokens with BPE_ADDED_SPECIAL
 * alone (a loader then sets b->added_flags as its file says, and nplain).
 * Returns 0, or -1 with err. */
int bpe_build(bpe **out, uint32_t nvocab, const bpe_tokdef *toks,
              const bpe_merge *merges, size_t nmerges, const uint32_t *specials,
              size_t nspecials, char *err, size_t errlen);

/* Bytes of whitespace (Unicode White_Space, UTF-8) at the start of
 * p[0..n) with fwd, else at its end. */
size_t bpe_space_run(const char *p, size_t n, int fwd);

/* GPT-2's bytes_to_unicode: the code point that stands for byte b in
 * vocab files. */
uint32_t bpe_byte_to_cp(uint8_t b);
/* Its inverse: the byte for code point cp, or -1 if cp stands for none. */
int bpe_cp_to_byte(uint32_t cp);
/* The order GPT-2 numbers bytes in: bpe_byte_order()[i] is the byte of
 * id i in GPT-2's vocabulary (printable bytes first). */
const uint8_t *bpe_byte_order(void);

/* Looks up merge (left, right): its rank, or UINT32_MAX if none; sets
 * *result when there is one. */
static inline uint32_t bpe_merge_lookup(const bpe *b, uint32_t left,
                                        uint32_t right, uint32_t *result) {
  uint64_t key = ((uint64_t)left << 32) | right;
  size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & b->mmask;
  for (;;) {
    const bpe_mslot *s = &b->mtab[i];
    if (s->key == key) {
      *result = s->result;
      return s->rank;
    }
    if (s->key == UINT64_MAX)
      return UINT32_MAX;
    i = (i + 1) & b->mmask;
  }
}

/* A hash of a byte string, for the maps keyed by pieces. */
static inline uint64_t bpe_hash_bytes(const char *p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t w;
    __builtin_memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t w = 0;
    __builtin_memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  }
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return h;
}

#endif /* DAGRUN_BPE_INTERNAL_H */
