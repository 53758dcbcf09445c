/*
 * bpe: the byte-level BPE model, GPT-2's: building one from its parts
 * (tokens, ranked merges, specials), encoding and decoding. bpe.h states
 * the contract; bpe_train.c learns a model, tokjson.c reads and writes
 * the files, pretok.c cuts text into pieces.
 *
 * A bpe is read-only once built, so threads share it; each thread
 * encodes through its own bpe_encoder, which holds the pre-tokenizer's
 * match state and a cache of pieces already encoded. The cache is why:
 * text repeats its words, and a piece found in the cache costs one hash
 * lookup instead of its merges. Short pieces are merged by scanning the
 * symbols, long ones with a heap of candidate pairs, so a long run of
 * one character is not quadratic.
 */
#include "bpe_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- GPT-2's byte <-> unicode map ---------------------------------- */

/* Bytes that stand for themselves in vocab files: the printable Latin-1
 * ones, except space and soft hyphen. The others get 256, 257, ... in
 * byte order, so every token string is printable. */
static int byte_printable(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
         (b >= 0xAE && b <= 0xFF);
}

uint32_t bpe_byte_to_cp(uint8_t b) {
  if (byte_printable(b))
    return b;
  uint32_t n = 0;
  for (unsigned c = 0; c < b; c++)
    n += !byte_printable(c);
  return 256 + n;
}

int bpe_cp_to_byte(uint32_t cp) {
  if (cp < 256)
    return byte_printable(cp) ? (int)cp : -1;
  uint32_t n = 0;
  for (unsigned c = 0; c < 256; c++)
    if (!byte_printable(c) && 256 + n++ == cp)
      return (int)c;
  return -1;
}

static uint8_t byte_order[256];
static int byte_order_done;

const uint8_t *bpe_byte_order(void) {
  /* Idempotent: racing threads write the same values. */
  if (!__atomic_load_n(&byte_order_done, __ATOMIC_ACQUIRE)) {
    uint8_t tmp[256];
    unsigned k = 0;
    for (unsigned c = 0; c < 256; c++)
      if (byte_printable(c))
        tmp[k++] = (uint8_t)c;
    for (unsigned c = 0; c < 256; c++)
      if (!byte_printable(c))
        tmp[k++] = (uint8_t)c;
    memcpy(byte_order, tmp, sizeof tmp);
    __atomic_store_n(&byte_order_done, 1, __ATOMIC_RELEASE);
  }
  return byte_order;
}

/* ---- the model ------------------------------------------------------ */

void bpe_ids_free(bpe_ids *ids) {
  if (!ids)
    return;
  free(ids->v);
  ids->v = NULL;
  ids->n = ids->cap = 0;
}

void bpe_destroy(bpe *b) {
  if (!b)
    return;
  free(b->tok_off);
  free(b->tok_len);
  free(b->blob);
  free(b->is_added);
  free(b->merges);
  free(b->mtab);
  free(b->added);
  free(b->added_flags);
  pretok_destroy(b->pt);
  free(b);
}

uint32_t bpe_vocab_size(const bpe *b) { return b->nvocab; }
size_t bpe_merge_count(const bpe *b) { return b->nmerges; }

int64_t bpe_special_id(const bpe *b, const char *content) {
  size_t n = strlen(content);
  for (size_t i = 0; i < b->nadded; i++) {
    uint32_t id = b->added[i];
    if (b->tok_len[id] == n &&
        memcmp(b->blob + b->tok_off[id], content, n) == 0)
      return id;
  }
  return -1;
}

int bpe_is_special(const bpe *b, uint32_t id) {
  for (size_t i = 0; id < b->nvocab && b->is_added[id] && i < b->nadded; i++)
    if (b->added[i] == id)
      return (b->added_flags[i] & BPE_ADDED_SPECIAL) != 0;
  return 0;
}

const char *bpe_token_bytes(const bpe *b, uint32_t id, size_t *len) {
  if (id >= b->nvocab || b->tok_len[id] == 0) {
    *len = 0;
    return NULL;
  }
  *len = b->tok_len[id];
  return b->blob + b->tok_off[id];
}

/* The flags of the added token id in b, or -1 when id is not one. */
static int added_flags_of(const bpe *b, uint32_t id) {
  for (size_t i = 0; i < b->nadded; i++)
    if (b->added[i] == id)
      return b->added_flags[i];
  return -1;
}

int bpe_same_ids(const bpe *a, const bpe *b) {
  if (a->nvocab != b->nvocab || a->nmerges != b->nmerges ||
      a->nadded != b->nadded ||
      pretok_get_digits(a->pt) != pretok_get_digits(b->pt))
    return 0;
  for (uint32_t i = 0; i < a->nvocab; i++)
    if (a->tok_len[i] != b->tok_len[i] ||
        memcmp(a->blob + a->tok_off[i], b->blob + b->tok_off[i],
               a->tok_len[i]) != 0)
      return 0;
  for (size_t i = 0; i < a->nmerges; i++)
    if (a->merges[i].left != b->merges[i].left ||
        a->merges[i].right != b->merges[i].right ||
        a->merges[i].result != b->merges[i].result)
      return 0;
  /* normalized is kept only to be saved again: the byte-level
   * tokenizers dagrun loads have no normalizer for it to choose. */
  const int decides = BPE_ADDED_SPECIAL | BPE_ADDED_LSTRIP | BPE_ADDED_RSTRIP;
  for (size_t i = 0; i < a->nadded; i++) {
    int f = added_flags_of(b, a->added[i]);
    if (f < 0 || (f & decides) != (a->added_flags[i] & decides))
      return 0;
  }
  return 1;
}

int bpe_build(bpe **out, uint32_t nvocab, const bpe_tokdef *toks,
              const bpe_merge *merges, size_t nmerges, const uint32_t *specials,
              size_t nspecials, char *err, size_t errlen) {
  *out = NULL;
  bpe *b = calloc(1, sizeof *b);
  if (!b)
    goto oom;
  b->nvocab = nvocab;
  size_t total = 0;
  for (uint32_t i = 0; i < nvocab; i++) {
    if (toks[i].len > UINT32_MAX) {
      snprintf(err, errlen, "token %u is too long", i);
      goto fail;
    }
    total += toks[i].len;
  }
  if (total > UINT32_MAX) {
    snprintf(err, errlen, "vocabulary too large (%zu bytes)", total);
    goto fail;
  }
  b->tok_off = malloc((nvocab + 1) * sizeof *b->tok_off);
  b->tok_len = malloc((nvocab + 1) * sizeof *b->tok_len);
  b->blob = malloc(total + 1);
  b->is_added = calloc(nvocab + 1, 1);
  b->merges = malloc((nmerges + 1) * sizeof *b->merges);
  b->added = malloc((nspecials + 1) * sizeof *b->added);
  b->added_flags = malloc(nspecials + 1);
  if (!b->tok_off || !b->tok_len || !b->blob || !b->is_added || !b->merges ||
      !b->added || !b->added_flags)
    goto oom;
  size_t off = 0;
  for (uint32_t i = 0; i < nvocab; i++) {
    b->tok_off[i] = (uint32_t)off;
    b->tok_len[i] = (uint32_t)toks[i].len;
    if (toks[i].len)
      memcpy(b->blob + off, toks[i].p, toks[i].len);
    off += toks[i].len;
  }
  for (size_t i = 0; i < nspecials; i++) {
    uint32_t id = specials[i];
    if (id >= nvocab || b->tok_len[id] == 0) {
      snprintf(err, errlen, "special token id %u has no content", id);
      goto fail;
    }
    b->is_added[id] = 1;
    b->added[i] = id;
    b->added_flags[i] = BPE_ADDED_SPECIAL;
  }
  b->nadded = nspecials;

  /* Byte tokens: the lowest non-special id whose bytes are that byte. */
  uint8_t have[256] = {0};
  for (uint32_t i = 0; i < nvocab; i++) {
    if (b->tok_len[i] != 1 || b->is_added[i])
      continue;
    uint8_t c = (uint8_t)b->blob[b->tok_off[i]];
    if (!have[c]) {
      have[c] = 1;
      b->byte_id[c] = i;
    }
  }
  for (unsigned c = 0; c < 256; c++)
    if (!have[c]) {
      snprintf(err, errlen,
               "the vocabulary has no token for byte 0x%02x (a byte-level "
               "BPE needs all 256)",
               c);
      goto fail;
    }

  /* Merges: checked, then indexed by (left, right). */
  size_t cap = 16;
  while (cap < 2 * nmerges + 2)
    cap *= 2;
  b->mtab = malloc(cap * sizeof *b->mtab);
  if (!b->mtab)
    goto oom;
  for (size_t i = 0; i < cap; i++)
    b->mtab[i].key = UINT64_MAX;
  b->mmask = cap - 1;
  for (size_t r = 0; r < nmerges; r++) {
    bpe_merge m = merges[r];
    if (m.left >= nvocab || m.right >= nvocab || m.result >= nvocab ||
        !b->tok_len[m.left] || !b->tok_len[m.right] || !b->tok_len[m.result]) {
      snprintf(err, errlen, "merge %zu names an id with no token", r);
      goto fail;
    }
    uint32_t ll = b->tok_len[m.left], rl = b->tok_len[m.right];
    if (b->tok_len[m.result] != ll + rl ||
        memcmp(b->blob + b->tok_off[m.result], b->blob + b->tok_off[m.left],
               ll) != 0 ||
        memcmp(b->blob + b->tok_off[m.result] + ll,
               b->blob + b->tok_off[m.right], rl) != 0) {
      snprintf(err, errlen,
               "merge %zu: token %u is not the concatenation of %u and %u", r,
               m.result, m.left, m.right);
      goto fail;
    }
    b->merges[r] = m;
    uint64_t key = ((uint64_t)m.left << 32) | m.right;
    size_t j = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & b->mmask;
    while (b->mtab[j].key != UINT64_MAX && b->mtab[j].key != key)
      j = (j + 1) & b->mmask;
    b->mtab[j].key = key;
    b->mtab[j].rank = (uint32_t)r;
    b->mtab[j].result = m.result;
  }
  b->nmerges = nmerges;
  if (nmerges >= UINT32_MAX) {
    snprintf(err, errlen, "too many merges");
    goto fail;
  }
  if (pretok_create(&b->pt, err, errlen) != 0)
    goto fail;
  *out = b;
  return 0;
oom:
  snprintf(err, errlen, "out of memory");
fail:
  bpe_destroy(b);
  return -1;
}

/* ---- encoding ------------------------------------------------------- */

/* Pieces longer than this are not cached: they are rare (long runs of
 * letters or spaces) and would crowd out the common ones. */
#define CACHE_MAX_PIECE 64
/* The cache starts over past this many pieces or bytes, so memory stays
 * bounded on text with endless distinct pieces (hex dumps, numbers). */
#define CACHE_MAX_ENTRIES (1u << 20)
#define CACHE_MAX_BYTES (48u << 20)
/* Pieces up to this many bytes merge by rescanning; longer ones with a
 * heap, so a megabyte of spaces costs n log n, not n^2. */
#define SHORT_PIECE 48

/* A cache slot: 32 bytes, so a hit on a short piece reads one cache
 * line. Pieces of up to 16 bytes are kept in the slot as two words (see
 * short_key), longer ones in keys; up to two ids in the slot, more in
 * ids. */
typedef struct cslot {
  uint32_t h;   /* the low bits of the piece's hash */
  uint8_t klen; /* 0 = empty slot */
  uint8_t nids; /* pieces of <= 64 bytes have <= 64 ids */
  uint16_t pad;
  uint32_t id[2];  /* the ids, or id[0] = their offset in ids */
  uint64_t k0, k1; /* short_key's words, or k0 = offset in keys */
} cslot;

static inline uint64_t load64(const char *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}

static inline uint32_t load32(const char *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  return w;
}

/* Two words that, with the length, identify a piece of 1..16 bytes:
 * overlapping loads that together cover every byte, without a loop. */
static inline void short_key(const char *p, size_t n, uint64_t *k0,
                             uint64_t *k1) {
  if (n >= 8) {
    *k0 = load64(p);
    *k1 = load64(p + n - 8);
  } else if (n >= 4) {
    *k0 = load32(p) | ((uint64_t)load32(p + n - 4) << 32);
    *k1 = 0;
  } else {
    *k0 = (uint64_t)(unsigned char)p[0] |
          ((uint64_t)(unsigned char)p[n / 2] << 8) |
          ((uint64_t)(unsigned char)p[n - 1] << 16);
    *k1 = 0;
  }
}

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

struct bpe_encoder {
  const bpe *b;
  pretok_matcher *m;
  cslot *tab;
  size_t mask, count;
  char *keys;
  size_t nkeys, capkeys;
  uint32_t *ids;
  size_t nids, capids;
  /* Scratch for long pieces. */
  uint32_t *sym, *next, *prev;
  uint64_t *heap;
  size_t capscratch;
};

bpe_encoder *bpe_encoder_create(const bpe *b) {
  bpe_encoder *e = calloc(1, sizeof *e);
  if (!e)
    return NULL;
  e->b = b;
  e->m = pretok_matcher_create(b->pt);
  e->mask = (1u << 14) - 1;
  e->tab = calloc(e->mask + 1, sizeof *e->tab);
  if (!e->m || !e->tab) {
    bpe_encoder_destroy(e);
    return NULL;
  }
  return e;
}

void bpe_encoder_destroy(bpe_encoder *e) {
  if (!e)
    return;
  pretok_matcher_destroy(e->m);
  free(e->tab);
  free(e->keys);
  free(e->ids);
  free(e->sym);
  free(e->next);
  free(e->prev);
  free(e->heap);
  free(e);
}

static inline int ids_reserve(bpe_ids *o, size_t extra) {
  if (o->n + extra <= o->cap)
    return 0;
  size_t cap = o->cap ? o->cap : 256;
  while (cap < o->n + extra)
    cap *= 2;
  uint32_t *v = realloc(o->v, cap * sizeof *v);
  if (!v)
    return -1;
  o->v = v;
  o->cap = cap;
  return 0;
}

/* Merges sym[0..n) in place for a short piece: repeatedly the lowest
 * rank pair, leftmost first (Hugging Face's order; for files where a
 * merge's parts come before it, the same as GPT-2's merge-all-occurrences
 * loop). Returns the new length. */
static size_t merge_short(const bpe *b, uint32_t *sym, size_t n) {
  uint32_t rank[SHORT_PIECE], res[SHORT_PIECE];
  if (n < 2)
    return n;
  for (size_t i = 0; i + 1 < n; i++)
    rank[i] = bpe_merge_lookup(b, sym[i], sym[i + 1], &res[i]);
  for (;;) {
    uint32_t best = UINT32_MAX;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < n; i++)
      if (rank[i] < best) {
        best = rank[i];
        bi = i;
      }
    if (best == UINT32_MAX)
      break;
    sym[bi] = res[bi];
    /* Drop symbol bi+1 and pair bi+1's entry (pair bi is recomputed). */
    memmove(sym + bi + 1, sym + bi + 2, (n - bi - 2) * sizeof *sym);
    memmove(rank + bi + 1, rank + bi + 2, (n - bi - 2) * sizeof *rank);
    memmove(res + bi + 1, res + bi + 2, (n - bi - 2) * sizeof *res);
    n--;
    if (n < 2)
      break;
    if (bi > 0)
      rank[bi - 1] = bpe_merge_lookup(b, sym[bi - 1], sym[bi], &res[bi - 1]);
    if (bi + 1 < n)
      rank[bi] = bpe_merge_lookup(b, sym[bi], sym[bi + 1], &res[bi]);
  }
  return n;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p] <= v)
      break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
  uint64_t top = h[0], v = h[--*n];
  size_t i = 0, m = *n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= m)
      break;
    if (c + 1 < m && h[c + 1] < h[c])
      c++;
    if (h[c] >= v)
      break;
    h[i] = h[c];
    i = c;
  }
  if (m)
    h[i] = v;
  return top;
}

#define NONE UINT32_MAX

/* The same merges as merge_short, for long pieces: a linked list of
 * symbols and a heap of (rank, position), lowest first, whose stale
 * entries are skipped when popped (the pair there no longer has that
 * rank). Appends the ids to out. */
static int encode_long(bpe_encoder *e, const unsigned char *p, size_t n,
                       bpe_ids *out) {
  const bpe *b = e->b;
  if (n >= UINT32_MAX)
    return -1;
  if (n > e->capscratch) {
    size_t cap = n;
    uint32_t *s = realloc(e->sym, cap * sizeof *s);
    if (s)
      e->sym = s;
    uint32_t *nx = realloc(e->next, cap * sizeof *nx);
    if (nx)
      e->next = nx;
    uint32_t *pv = realloc(e->prev, cap * sizeof *pv);
    if (pv)
      e->prev = pv;
    uint64_t *h = realloc(e->heap, 2 * cap * sizeof *h);
    if (h)
      e->heap = h;
    if (!s || !nx || !pv || !h)
      return -1;
    e->capscratch = cap;
  }
  uint32_t *sym = e->sym, *next = e->next, *prev = e->prev;
  uint64_t *heap = e->heap;
  size_t nh = 0;
  uint32_t res;
  for (size_t i = 0; i < n; i++) {
    sym[i] = b->byte_id[p[i]];
    next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
    prev[i] = i ? (uint32_t)(i - 1) : NONE;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    uint32_t r = bpe_merge_lookup(b, sym[i], sym[i + 1], &res);
    if (r != UINT32_MAX)
      heap_push(heap, &nh, ((uint64_t)r << 32) | i);
  }
  /* Each merge pushes at most two entries and removes a symbol, so the
   * heap never holds more than 2n. */
  while (nh) {
    uint64_t top = heap_pop(heap, &nh);
    uint32_t r = (uint32_t)(top >> 32), i = (uint32_t)top;
    if (sym[i] == NONE || next[i] == NONE)
      continue;
    uint32_t j = next[i];
    if (bpe_merge_lookup(b, sym[i], sym[j], &res) != r)
      continue;
    sym[i] = res;
    sym[j] = NONE;
    next[i] = next[j];
    if (next[j] != NONE)
      prev[next[j]] = i;
    if (prev[i] != NONE) {
      uint32_t r2 = bpe_merge_lookup(b, sym[prev[i]], sym[i], &res);
      if (r2 != UINT32_MAX)
        heap_push(heap, &nh, ((uint64_t)r2 << 32) | prev[i]);
    }
    if (next[i] != NONE) {
      uint32_t r2 = bpe_merge_lookup(b, sym[i], sym[next[i]], &res);
      if (r2 != UINT32_MAX)
        heap_push(heap, &nh, ((uint64_t)r2 << 32) | i);
    }
  }
  size_t k = 0;
  for (uint32_t i = 0; i != NONE; i = next[i])
    k++;
  if (ids_reserve(out, k))
    return -1;
  for (uint32_t i = 0; i != NONE; i = next[i])
    out->v[out->n++] = sym[i];
  return 0;
}

static void cache_reset(bpe_encoder *e) {
  memset(e->tab, 0, (e->mask + 1) * sizeof *e->tab);
  e->count = 0;
  e->nkeys = 0;
  e->nids = 0;
}

static int cache_grow(bpe_encoder *e) {
  size_t ncap = 2 * (e->mask + 1);
  cslot *t = calloc(ncap, sizeof *t);
  if (!t)
    return -1;
  for (size_t i = 0; i <= e->mask; i++) {
    cslot *s = &e->tab[i];
    if (!s->klen)
      continue;
    size_t j = s->h & (ncap - 1);
    while (t[j].klen)
      j = (j + 1) & (ncap - 1);
    t[j] = *s;
  }
  free(e->tab);
  e->tab = t;
  e->mask = ncap - 1;
  return 0;
}

/* Merges a piece of up to SHORT_PIECE bytes, appending its ids. */
static int encode_short(const bpe *b, const char *p, size_t n, bpe_ids *out) {
  uint32_t sym[SHORT_PIECE];
  for (size_t k = 0; k < n; k++)
    sym[k] = b->byte_id[(unsigned char)p[k]];
  size_t k = merge_short(b, sym, n);
  if (ids_reserve(out, k))
    return -1;
  memcpy(out->v + out->n, sym, k * sizeof *sym);
  out->n += k;
  return 0;
}

/* Remembers piece p (ids just appended to out from start). A failure to
 * grow only costs speed later, so it is not an error. */
static void cache_put(bpe_encoder *e, const char *p, size_t n, uint32_t h,
                      uint64_t k0, uint64_t k1, const uint32_t *ids, size_t k) {
  if (e->count >= CACHE_MAX_ENTRIES ||
      e->nkeys + n + (e->nids + k) * 4 > CACHE_MAX_BYTES)
    cache_reset(e);
  else if (2 * (e->count + 1) > e->mask + 1 && cache_grow(e))
    return;
  if (n > 16) {
    if (e->nkeys + n > e->capkeys) {
      size_t cap = e->capkeys ? 2 * e->capkeys : 1u << 16;
      while (cap < e->nkeys + n)
        cap *= 2;
      char *nk = realloc(e->keys, cap);
      if (!nk)
        return;
      e->keys = nk;
      e->capkeys = cap;
    }
    k0 = e->nkeys;
    memcpy(e->keys + e->nkeys, p, n);
    e->nkeys += n;
  }
  uint32_t id0 = k > 0 ? ids[0] : 0, id1 = k > 1 ? ids[1] : 0;
  if (k > 2) {
    if (e->nids + k > e->capids) {
      size_t cap = e->capids ? 2 * e->capids : 1u << 14;
      while (cap < e->nids + k)
        cap *= 2;
      uint32_t *ni = realloc(e->ids, cap * sizeof *ni);
      if (!ni)
        return;
      e->ids = ni;
      e->capids = cap;
    }
    id0 = (uint32_t)e->nids;
    memcpy(e->ids + e->nids, ids, k * sizeof *ids);
    e->nids += k;
  }
  size_t i = h & e->mask;
  while (e->tab[i].klen)
    i = (i + 1) & e->mask;
  e->tab[i] = (cslot){h, (uint8_t)n, (uint8_t)k, 0, {id0, id1}, k0, k1};
  e->count++;
}

/* Encodes one piece, through the cache when it is short. */
static int encode_piece(bpe_encoder *e, const char *p, size_t n, bpe_ids *out) {
  const bpe *b = e->b;
  if (n == 1) {
    if (ids_reserve(out, 1))
      return -1;
    out->v[out->n++] = b->byte_id[(unsigned char)p[0]];
    return 0;
  }
  if (n > CACHE_MAX_PIECE)
    return n <= SHORT_PIECE ? encode_short(b, p, n, out)
                            : encode_long(e, (const unsigned char *)p, n, out);
  uint64_t k0 = 0, k1 = 0, hh;
  if (n <= 16) {
    short_key(p, n, &k0, &k1);
    hh = mix64(k0 * 0x9E3779B97F4A7C15ull ^ (k1 + n) * 0xc4ceb9fe1a85ec53ull);
  } else {
    hh = bpe_hash_bytes(p, n);
  }
  uint32_t h = (uint32_t)hh;
  size_t i = h & e->mask;
  for (;;) {
    const cslot *s = &e->tab[i];
    if (!s->klen)
      break;
    if (s->h == h && s->klen == n &&
        (n <= 16 ? s->k0 == k0 && s->k1 == k1
                 : memcmp(e->keys + s->k0, p, n) == 0)) {
      if (ids_reserve(out, s->nids > 2 ? s->nids : 2))
        return -1;
      if (s->nids <= 2) {
        out->v[out->n] = s->id[0];
        out->v[out->n + 1] = s->id[1];
      } else {
        memcpy(out->v + out->n, e->ids + s->id[0], s->nids * sizeof(uint32_t));
      }
      out->n += s->nids;
      return 0;
    }
    i = (i + 1) & e->mask;
  }
  /* A miss: encode, append to out, then remember. */
  size_t start = out->n;
  int rc = n <= SHORT_PIECE ? encode_short(b, p, n, out)
                            : encode_long(e, (const unsigned char *)p, n, out);
  if (rc)
    return rc;
  cache_put(e, p, n, h, k0, k1, out->v + start, out->n - start);
  return 0;
}

/* The text without added tokens: the pre-tokenizer's pieces, each
 * through the merges. */
static int encode_plain(bpe_encoder *e, const char *text, size_t len,
                        bpe_ids *out) {
  if (len == 0)
    return 0;
  /* Most pieces are a few bytes and give a token or two. */
  if (ids_reserve(out, len / 4 + 16))
    return -1;
  pretok_begin(e->m, text, len);
  size_t s, n;
  int rc;
  while ((rc = pretok_next(e->m, &s, &n)) == 1)
    if (encode_piece(e, text + s, n, out))
      return -1;
  return rc < 0 ? -1 : 0;
}

/* Whether p[0..k) is one whitespace character in UTF-8: what Rust's
 * char::is_whitespace takes (Unicode White_Space), as Hugging Face's
 * lstrip and rstrip do. */
static int is_space_seq(const unsigned char *p, size_t k) {
  if (k == 1)
    return p[0] == ' ' || (p[0] >= '\t' && p[0] <= '\r');
  if (k == 2)
    return p[0] == 0xC2 && (p[1] == 0x85 || p[1] == 0xA0);
  if (p[0] == 0xE1)
    return p[1] == 0x9A && p[2] == 0x80; /* U+1680 */
  if (p[0] == 0xE3)
    return p[1] == 0x80 && p[2] == 0x80; /* U+3000 */
  if (p[0] != 0xE2)
    return 0;
  if (p[1] == 0x80) /* U+2000..200A, U+2028, U+2029, U+202F */
    return p[2] <= 0x8A || p[2] == 0xA8 || p[2] == 0xA9 || p[2] == 0xAF;
  return p[1] == 0x81 && p[2] == 0x9F; /* U+205F */
}

size_t bpe_space_run(const char *text, size_t n, int fwd) {
  const unsigned char *p = (const unsigned char *)text;
  size_t run = 0;
  for (;;) {
    size_t k = 1;
    while (k <= 3 && k <= n - run &&
           !is_space_seq(fwd ? p + run : p + n - run - k, k))
      k++;
    if (k > 3 || k > n - run)
      return run;
    run += k;
  }
}

/* Encodes text, cutting out the added tokens first as Hugging Face's
 * AddedVocabulary does. At each step the earliest match wins, the
 * longest at one position; an lstrip token takes the whitespace before it
 * (back to the previous token), an rstrip one the whitespace after it.
 * Without specials, a special's match stays text, joined to the text
 * around it, and no token is looked for inside it: HF's find_matches
 * with encode_special_tokens skips the match, not its bytes. */
static int encode_added(bpe_encoder *e, const char *text, size_t len,
                        bpe_ids *out, int specials) {
  const bpe *b = e->b;
  if (specials ? b->nadded == 0 : b->nplain == 0)
    return encode_plain(e, text, len, out);
  /* Where each added token next occurs at or after pos (len if
   * nowhere); recomputed only once pos passes it. */
  size_t stackbuf[8], *nextat = stackbuf;
  if (b->nadded > 8 && !(nextat = malloc(b->nadded * sizeof *nextat)))
    return -1;
  for (size_t k = 0; k < b->nadded; k++)
    nextat[k] = (size_t)-1; /* not yet searched */
  size_t pos = 0, seg = 0;  /* seg: where the text not yet encoded starts */
  int rc = 0;
  for (;;) { /* until the text after the last token is encoded */
    size_t best = len, bestlen = 0, bestk = 0;
    for (size_t k = 0; k < b->nadded; k++) {
      uint32_t id = b->added[k];
      size_t sl = b->tok_len[id];
      if (nextat[k] == (size_t)-1 || nextat[k] < pos) {
        const char *f = pos < len ? memmem(text + pos, len - pos,
                                           b->blob + b->tok_off[id], sl)
                                  : NULL;
        nextat[k] = f ? (size_t)(f - text) : len;
      }
      /* The earliest; at one position, the longest (as HF's matcher). */
      if (nextat[k] < best ||
          (nextat[k] == best && nextat[k] < len && sl > bestlen)) {
        best = nextat[k];
        bestlen = sl;
        bestk = k;
      }
    }
    uint8_t fl = best < len ? b->added_flags[bestk] : 0;
    if (!specials && (fl & BPE_ADDED_SPECIAL)) {
      pos = best + bestlen;
      continue;
    }
    size_t before = best - seg;
    if (fl & BPE_ADDED_LSTRIP)
      before -= bpe_space_run(text + seg, before, 0);
    if ((rc = encode_plain(e, text + seg, before, out)) != 0)
      break;
    if (best == len)
      break;
    if ((rc = ids_reserve(out, 1)) != 0)
      break;
    out->v[out->n++] = b->added[bestk];
    pos = best + bestlen;
    if (fl & BPE_ADDED_RSTRIP)
      pos += bpe_space_run(text + pos, len - pos, 1);
    seg = pos;
  }
  if (nextat != stackbuf)
    free(nextat);
  return rc;
}

int bpe_encode(bpe_encoder *e, const char *text, size_t len, bpe_ids *out) {
  return encode_added(e, text, len, out, 0);
}

int bpe_encode_with_specials(bpe_encoder *e, const char *text, size_t len,
                             bpe_ids *out) {
  return encode_added(e, text, len, out, 1);
}

/* ---- decoding ------------------------------------------------------- */

int bpe_decode(const bpe *b, const uint32_t *ids, size_t n, char **out,
               size_t *len, char *err, size_t errlen) {
  return bpe_decode_skip(b, ids, n, 0, out, len, err, errlen);
}

int bpe_decode_skip(const bpe *b, const uint32_t *ids, size_t n,
                    int skip_special, char **out, size_t *len, char *err,
                    size_t errlen) {
  *out = NULL;
  *len = 0;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] >= b->nvocab || b->tok_len[ids[i]] == 0) {
      snprintf(err, errlen,
               "token id %u at position %zu is not in the "
               "vocabulary (%u ids)",
               ids[i], i, b->nvocab);
      return -1;
    }
    total += b->tok_len[ids[i]];
  }
  char *s = malloc(total + 1);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (skip_special && b->is_added[ids[i]] && bpe_is_special(b, ids[i]))
      continue;
    memcpy(s + k, b->blob + b->tok_off[ids[i]], b->tok_len[ids[i]]);
    k += b->tok_len[ids[i]];
  }
  s[k] = '\0';
  *out = s;
  *len = k;
  return 0;
}
