/*
 * The BPE trainer. See bpe.h.
 *
 * Counting: each document is cut at the specials' text (which never
 * takes part in merges, as in Hugging Face's trainer) and pre-tokenized;
 * distinct pieces are counted in a hash map.
 *
 * Learning: the standard incremental algorithm. Each distinct piece is a
 * word of symbols with a count. Pair counts live in a hash map, with the
 * list of words each pair occurs in; a max-heap of (count, pair) gives
 * the next merge. Heap entries are snapshots: an entry whose count is no
 * longer the pair's is skipped when popped, and a pair whose count grows
 * is pushed again, so only the words a merge touches are revisited.
 */
#include "bpe_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- piece counts ---------------------------------------------------- */

typedef struct pslot {
  uint64_t h;
  uint64_t count; /* 0 = empty slot */
  size_t koff;
  uint32_t klen;
} pslot;

struct bpe_trainer {
  uint32_t vocab_size;
  uint64_t min_frequency;
  char **specials;
  size_t *speclen;
  size_t nspecials;
  pretok *pt;
  pretok_matcher *m;
  pslot *tab;
  size_t mask, count;
  char *keys;
  size_t nkeys, capkeys;
};

void bpe_trainer_destroy(bpe_trainer *t) {
  if (!t)
    return;
  for (size_t i = 0; i < t->nspecials; i++)
    free(t->specials[i]);
  free(t->specials);
  free(t->speclen);
  pretok_matcher_destroy(t->m);
  pretok_destroy(t->pt);
  free(t->tab);
  free(t->keys);
  free(t);
}

bpe_trainer *bpe_trainer_create(const bpe_train_opts *opts) {
  bpe_trainer *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  t->vocab_size = opts->vocab_size;
  t->min_frequency = opts->min_frequency ? opts->min_frequency : 1;
  t->specials = calloc(opts->nspecials + 1, sizeof *t->specials);
  t->speclen = calloc(opts->nspecials + 1, sizeof *t->speclen);
  if (!t->specials || !t->speclen)
    goto fail;
  for (size_t i = 0; i < opts->nspecials; i++) {
    if (!(t->specials[i] = strdup(opts->specials[i])))
      goto fail;
    t->speclen[i] = strlen(t->specials[i]);
    t->nspecials = i + 1;
  }
  char err[256];
  if (pretok_create(&t->pt, err, sizeof err) != 0)
    goto fail;
  if (!(t->m = pretok_matcher_create(t->pt)))
    goto fail;
  t->mask = (1u << 12) - 1;
  if (!(t->tab = calloc(t->mask + 1, sizeof *t->tab)))
    goto fail;
  return t;
fail:
  bpe_trainer_destroy(t);
  return NULL;
}

static int piece_grow(bpe_trainer *t) {
  size_t ncap = 2 * (t->mask + 1);
  pslot *nt = calloc(ncap, sizeof *nt);
  if (!nt)
    return -1;
  for (size_t i = 0; i <= t->mask; i++) {
    if (!t->tab[i].count)
      continue;
    size_t j = t->tab[i].h & (ncap - 1);
    while (nt[j].count)
      j = (j + 1) & (ncap - 1);
    nt[j] = t->tab[i];
  }
  free(t->tab);
  t->tab = nt;
  t->mask = ncap - 1;
  return 0;
}

static int piece_add(bpe_trainer *t, const char *p, size_t n, uint64_t c) {
  if (n > UINT32_MAX)
    return -1;
  uint64_t h = bpe_hash_bytes(p, n);
  size_t i = h & t->mask;
  while (t->tab[i].count) {
    pslot *s = &t->tab[i];
    if (s->h == h && s->klen == n && memcmp(t->keys + s->koff, p, n) == 0) {
      s->count += c;
      return 0;
    }
    i = (i + 1) & t->mask;
  }
  if (2 * (t->count + 1) > t->mask + 1) {
    if (piece_grow(t))
      return -1;
    i = h & t->mask;
    while (t->tab[i].count)
      i = (i + 1) & t->mask;
  }
  if (t->nkeys + n > t->capkeys) {
    size_t cap = t->capkeys ? 2 * t->capkeys : 1u << 16;
    while (cap < t->nkeys + n)
      cap *= 2;
    char *k = realloc(t->keys, cap);
    if (!k)
      return -1;
    t->keys = k;
    t->capkeys = cap;
  }
  memcpy(t->keys + t->nkeys, p, n);
  pslot *s = &t->tab[i];
  s->h = h;
  s->count = c;
  s->koff = t->nkeys;
  s->klen = (uint32_t)n;
  t->nkeys += n;
  t->count++;
  return 0;
}

static int count_text(bpe_trainer *t, const char *text, size_t len) {
  size_t s, n;
  int rc;
  pretok_begin(t->m, text, len);
  while ((rc = pretok_next(t->m, &s, &n)) == 1)
    if (piece_add(t, text + s, n, 1))
      return -1;
  return rc < 0 ? -1 : 0;
}

int bpe_trainer_add(bpe_trainer *t, const char *text, size_t len) {
  size_t pos = 0;
  while (pos < len) {
    /* The earliest special (the longest at one position) ends the run
     * of ordinary text. */
    size_t best = len, bestlen = 0;
    for (size_t k = 0; k < t->nspecials; k++) {
      if (!t->speclen[k])
        continue;
      const char *f =
          memmem(text + pos, len - pos, t->specials[k], t->speclen[k]);
      size_t at = f ? (size_t)(f - text) : len;
      if (at < best || (at == best && at < len && t->speclen[k] > bestlen)) {
        best = at;
        bestlen = t->speclen[k];
      }
    }
    if (count_text(t, text + pos, best - pos))
      return -1;
    pos = best + bestlen;
  }
  return 0;
}

int bpe_trainer_merge(bpe_trainer *dst, const bpe_trainer *src) {
  for (size_t i = 0; i <= src->mask; i++) {
    const pslot *s = &src->tab[i];
    if (s->count && piece_add(dst, src->keys + s->koff, s->klen, s->count))
      return -1;
  }
  return 0;
}

/* ---- learning -------------------------------------------------------- */

typedef struct wlist {
  uint32_t *v;
  uint32_t n, cap;
} wlist;

typedef struct learn {
  /* Tokens: bytes of id i at tblob + toff[i]. */
  char *tblob;
  size_t ntblob, captblob;
  size_t *toff;
  uint32_t *tlen;
  uint32_t ntok, captok;
  /* Token bytes -> id, to reuse the id of a string made twice. */
  uint32_t *tmap; /* id + 1; 0 empty */
  size_t tmask;
  /* Words. */
  uint32_t *syms;
  size_t *woff;
  uint32_t *wlen;
  uint64_t *wcnt;
  uint32_t *wstamp;
  size_t nwords;
  /* Pairs. */
  uint64_t *pkey; /* left << 32 | right */
  int64_t *pcnt;
  wlist *pwords;
  uint32_t *pstamp;
  size_t npairs, cappairs;
  uint32_t *pmap; /* pair index + 1; 0 empty */
  size_t pmask;
  /* Heap of (count, pair). */
  struct hent {
    int64_t cnt;
    uint32_t pair;
  } * heap;
  size_t nheap, capheap;
  /* Pairs whose count went up during one merge. */
  uint32_t *up;
  size_t nup, capup;
  /* The merges made, in order (room for every token past the bytes). */
  bpe_merge *merges;
  size_t nmerges;
  int oom;
} learn;

static void learn_free(learn *L) {
  free(L->tblob);
  free(L->toff);
  free(L->tlen);
  free(L->tmap);
  free(L->syms);
  free(L->woff);
  free(L->wlen);
  free(L->wcnt);
  free(L->wstamp);
  free(L->pkey);
  free(L->pcnt);
  if (L->pwords)
    for (size_t i = 0; i < L->npairs; i++)
      free(L->pwords[i].v);
  free(L->pwords);
  free(L->pstamp);
  free(L->pmap);
  free(L->heap);
  free(L->up);
  free(L->merges);
}

static uint32_t tok_find(const learn *L, const char *p, size_t n) {
  size_t i = bpe_hash_bytes(p, n) & L->tmask;
  while (L->tmap[i]) {
    uint32_t id = L->tmap[i] - 1;
    if (L->tlen[id] == n && memcmp(L->tblob + L->toff[id], p, n) == 0)
      return id;
    i = (i + 1) & L->tmask;
  }
  return UINT32_MAX;
}

/* Adds a token with the n bytes at p; the id table has room for the
 * whole vocabulary, sized up front, so only the byte blob grows. */
static uint32_t tok_add(learn *L, const char *p, size_t n) {
  if (L->ntblob + n > L->captblob) {
    size_t cap = L->captblob * 2;
    while (cap < L->ntblob + n)
      cap *= 2;
    char *nb = realloc(L->tblob, cap);
    if (!nb) {
      L->oom = 1;
      return UINT32_MAX;
    }
    L->tblob = nb;
    L->captblob = cap;
  }
  uint32_t id = L->ntok++;
  memmove(L->tblob + L->ntblob, p, n); /* p may point into tblob */
  L->toff[id] = L->ntblob;
  L->tlen[id] = (uint32_t)n;
  L->ntblob += n;
  size_t i = bpe_hash_bytes(L->tblob + L->toff[id], n) & L->tmask;
  while (L->tmap[i])
    i = (i + 1) & L->tmask;
  L->tmap[i] = id + 1;
  return id;
}

static size_t pair_slot(const learn *L, uint64_t key) {
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & L->pmask;
}

static int pair_grow(learn *L) {
  size_t ncap = 2 * (L->pmask + 1);
  uint32_t *nm = calloc(ncap, sizeof *nm);
  if (!nm)
    return -1;
  free(L->pmap);
  L->pmap = nm;
  L->pmask = ncap - 1;
  for (size_t p = 0; p < L->npairs; p++) {
    size_t i = pair_slot(L, L->pkey[p]);
    while (L->pmap[i])
      i = (i + 1) & L->pmask;
    L->pmap[i] = (uint32_t)p + 1;
  }
  return 0;
}

/* The index of pair (a, b), made with count 0 if new; UINT32_MAX when
 * out of memory. */
static uint32_t pair_get(learn *L, uint32_t a, uint32_t b) {
  uint64_t key = ((uint64_t)a << 32) | b;
  size_t i = pair_slot(L, key);
  while (L->pmap[i]) {
    uint32_t p = L->pmap[i] - 1;
    if (L->pkey[p] == key)
      return p;
    i = (i + 1) & L->pmask;
  }
  if (L->npairs == L->cappairs) {
    size_t cap = L->cappairs ? 2 * L->cappairs : 1024;
    uint64_t *k = realloc(L->pkey, cap * sizeof *k);
    if (k)
      L->pkey = k;
    int64_t *c = realloc(L->pcnt, cap * sizeof *c);
    if (c)
      L->pcnt = c;
    wlist *w = realloc(L->pwords, cap * sizeof *w);
    if (w)
      L->pwords = w;
    uint32_t *s = realloc(L->pstamp, cap * sizeof *s);
    if (s)
      L->pstamp = s;
    if (!k || !c || !w || !s || cap >= UINT32_MAX) {
      L->oom = 1;
      return UINT32_MAX;
    }
    L->cappairs = cap;
  }
  uint32_t p = (uint32_t)L->npairs++;
  L->pkey[p] = key;
  L->pcnt[p] = 0;
  L->pwords[p] = (wlist){0};
  L->pstamp[p] = 0;
  L->pmap[i] = p + 1;
  if (2 * L->npairs > L->pmask + 1 && pair_grow(L)) {
    L->oom = 1;
    return UINT32_MAX;
  }
  return p;
}

static void pair_add_word(learn *L, uint32_t p, uint32_t w) {
  wlist *l = &L->pwords[p];
  if (l->n && l->v[l->n - 1] == w)
    return;
  if (l->n == l->cap) {
    uint32_t cap = l->cap ? 2 * l->cap : 4;
    uint32_t *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      L->oom = 1;
      return;
    }
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = w;
}

/* Changes pair (a, b)'s count by d for word w. A pair that gains is
 * noted for a fresh heap entry after the merge. */
static void pair_delta(learn *L, uint32_t a, uint32_t b, int64_t d, uint32_t w,
                       uint32_t stamp) {
  uint32_t p = pair_get(L, a, b);
  if (p == UINT32_MAX)
    return;
  L->pcnt[p] += d;
  if (d > 0) {
    pair_add_word(L, p, w);
    if (L->pstamp[p] != stamp) {
      L->pstamp[p] = stamp;
      if (L->nup == L->capup) {
        size_t cap = L->capup ? 2 * L->capup : 256;
        uint32_t *u = realloc(L->up, cap * sizeof *u);
        if (!u) {
          L->oom = 1;
          return;
        }
        L->up = u;
        L->capup = cap;
      }
      L->up[L->nup++] = p;
    }
  }
}

/* 1 when pair x ranks before pair y: higher count; on a tie, the lower
 * (left bytes, right bytes), each compared by memcmp then length. */
static int tok_cmp(const learn *L, uint32_t a, uint32_t b) {
  uint32_t la = L->tlen[a], lb = L->tlen[b];
  int c =
      memcmp(L->tblob + L->toff[a], L->tblob + L->toff[b], la < lb ? la : lb);
  if (c)
    return c;
  return (la > lb) - (la < lb);
}

static int hent_before(const learn *L, struct hent x, struct hent y) {
  if (x.cnt != y.cnt)
    return x.cnt > y.cnt;
  uint64_t kx = L->pkey[x.pair], ky = L->pkey[y.pair];
  int c = tok_cmp(L, (uint32_t)(kx >> 32), (uint32_t)(ky >> 32));
  if (!c)
    c = tok_cmp(L, (uint32_t)kx, (uint32_t)ky);
  return c < 0;
}

static void hpush(learn *L, int64_t cnt, uint32_t pair) {
  if (L->nheap == L->capheap) {
    size_t cap = L->capheap ? 2 * L->capheap : 1024;
    struct hent *h = realloc(L->heap, cap * sizeof *h);
    if (!h) {
      L->oom = 1;
      return;
    }
    L->heap = h;
    L->capheap = cap;
  }
  struct hent v = {cnt, pair};
  size_t i = L->nheap++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!hent_before(L, v, L->heap[p]))
      break;
    L->heap[i] = L->heap[p];
    i = p;
  }
  L->heap[i] = v;
}

static struct hent hpop(learn *L) {
  struct hent top = L->heap[0], v = L->heap[--L->nheap];
  size_t i = 0, n = L->nheap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n)
      break;
    if (c + 1 < n && hent_before(L, L->heap[c + 1], L->heap[c]))
      c++;
    if (!hent_before(L, L->heap[c], v))
      break;
    L->heap[i] = L->heap[c];
    i = c;
  }
  if (n)
    L->heap[i] = v;
  return top;
}

/* The trainer's options make a valid tokenizer: specials non-empty and
 * distinct, and room in vocab_size for them and the 256 byte tokens.
 * 0, or -1 with the reason in err. */
static int check_vocab(const bpe_trainer *t, char *err, size_t errlen) {
  for (size_t i = 0; i < t->nspecials; i++) {
    if (!t->speclen[i]) {
      snprintf(err, errlen, "special token %zu is empty", i);
      return -1;
    }
    for (size_t j = 0; j < i; j++)
      if (strcmp(t->specials[i], t->specials[j]) == 0) {
        snprintf(err, errlen, "special token \"%s\" is given twice",
                 t->specials[i]);
        return -1;
      }
  }
  if ((uint64_t)t->vocab_size < 256 + (uint64_t)t->nspecials) {
    snprintf(err, errlen,
             "vocab_size %u is below 256 byte tokens + %zu specials",
             t->vocab_size, t->nspecials);
    return -1;
  }
  return 0;
}

/* The token tables, sized for maxtok tokens up front, holding the 256
 * byte tokens in GPT-2's order; byte_sym[b] is byte b's token. 0, or -1
 * when out of memory. */
static int learn_bytes(learn *L, uint32_t maxtok, uint32_t byte_sym[256]) {
  L->captok = maxtok;
  L->captblob = 4096;
  L->toff = malloc(maxtok * sizeof *L->toff);
  L->tlen = malloc(maxtok * sizeof *L->tlen);
  L->tblob = malloc(L->captblob);
  size_t tcap = 16;
  while (tcap < 2 * (size_t)maxtok)
    tcap *= 2;
  L->tmap = calloc(tcap, sizeof *L->tmap);
  L->tmask = tcap - 1;
  L->merges = malloc((maxtok - 256 + 1) * sizeof *L->merges);
  if (!L->toff || !L->tlen || !L->tblob || !L->tmap || !L->merges)
    return -1;
  const uint8_t *order = bpe_byte_order();
  for (uint32_t i = 0; i < 256; i++) {
    char c = (char)order[i];
    byte_sym[order[i]] = tok_add(L, &c, 1);
  }
  return 0;
}

/* The words: each distinct piece counted by t, spelled in byte tokens.
 * 0, or -1 when out of memory. */
static int learn_words(learn *L, const bpe_trainer *t,
                       const uint32_t byte_sym[256]) {
  size_t nsyms = 0;
  for (size_t i = 0; i <= t->mask; i++)
    if (t->tab[i].count)
      nsyms += t->tab[i].klen;
  L->nwords = t->count;
  /* Word indices are stored as uint32_t in the pairs' word lists. */
  if (L->nwords >= UINT32_MAX)
    return -1;
  L->syms = malloc((nsyms + 1) * sizeof *L->syms);
  L->woff = malloc((L->nwords + 1) * sizeof *L->woff);
  L->wlen = malloc((L->nwords + 1) * sizeof *L->wlen);
  L->wcnt = malloc((L->nwords + 1) * sizeof *L->wcnt);
  L->wstamp = calloc(L->nwords + 1, sizeof *L->wstamp);
  L->pmask = (1u << 16) - 1;
  L->pmap = calloc(L->pmask + 1, sizeof *L->pmap);
  if (!L->syms || !L->woff || !L->wlen || !L->wcnt || !L->wstamp || !L->pmap)
    return -1;
  size_t w = 0, off = 0;
  for (size_t i = 0; i <= t->mask; i++) {
    const pslot *s = &t->tab[i];
    if (!s->count)
      continue;
    L->woff[w] = off;
    L->wlen[w] = s->klen;
    L->wcnt[w] = s->count;
    const unsigned char *k = (const unsigned char *)t->keys + s->koff;
    for (uint32_t j = 0; j < s->klen; j++)
      L->syms[off + j] = byte_sym[k[j]];
    off += s->klen;
    w++;
  }
  return 0;
}

/* Every adjacent pair's count over the words, each pair's word list, and
 * one heap entry per pair. 0, or -1 when out of memory. */
static int learn_pairs(learn *L) {
  for (size_t w = 0; w < L->nwords; w++) {
    const uint32_t *s = L->syms + L->woff[w];
    for (uint32_t j = 0; j + 1 < L->wlen[w]; j++) {
      uint32_t p = pair_get(L, s[j], s[j + 1]);
      if (p == UINT32_MAX)
        return -1;
      L->pcnt[p] += (int64_t)L->wcnt[w];
      pair_add_word(L, p, (uint32_t)w);
    }
  }
  if (L->oom)
    return -1;
  for (size_t p = 0; p < L->npairs; p++)
    hpush(L, L->pcnt[p], (uint32_t)p);
  return 0;
}

/* The token for the bytes of a then b: the id of an equal string made
 * before (two merges may spell the same bytes), else a new one.
 * UINT32_MAX when out of memory. */
static uint32_t tok_join(learn *L, uint32_t a, uint32_t b) {
  size_t la = L->tlen[a], lb = L->tlen[b];
  char stackb[256], *nb = la + lb <= sizeof stackb ? stackb : malloc(la + lb);
  if (!nb)
    return UINT32_MAX;
  memcpy(nb, L->tblob + L->toff[a], la);
  memcpy(nb + la, L->tblob + L->toff[b], lb);
  uint32_t x = tok_find(L, nb, la + lb);
  if (x == UINT32_MAX)
    x = tok_add(L, nb, la + lb);
  if (nb != stackb)
    free(nb);
  return x;
}

/* Rewrites every word that holds pair p = (a, b) with x in its place,
 * moving the counts of the neighbouring pairs; the pairs that gained are
 * left in L->up (stamp marks what this merge has seen). */
static void merge_words(learn *L, uint32_t p, uint32_t a, uint32_t b,
                        uint32_t x, uint32_t stamp) {
  L->nup = 0;
  for (uint32_t k = 0; k < L->pwords[p].n; k++) {
    uint32_t wi = L->pwords[p].v[k];
    /* A word may be listed more than once (pair_add_word skips only a
     * repeat of the last entry); its first visit merges it whole. */
    if (L->wstamp[wi] == stamp)
      continue;
    L->wstamp[wi] = stamp;
    uint32_t *s = L->syms + L->woff[wi];
    uint32_t n = L->wlen[wi], i = 0, j = 0;
    int64_t c = (int64_t)L->wcnt[wi];
    while (i < n) {
      if (i + 1 < n && s[i] == a && s[i + 1] == b) {
        if (j > 0) {
          pair_delta(L, s[j - 1], a, -c, wi, stamp);
          pair_delta(L, s[j - 1], x, c, wi, stamp);
        }
        if (i + 2 < n) {
          pair_delta(L, b, s[i + 2], -c, wi, stamp);
          pair_delta(L, x, s[i + 2], c, wi, stamp);
        }
        L->pcnt[p] -= c;
        s[j++] = x;
        i += 2;
      } else {
        s[j++] = s[i++];
      }
    }
    L->wlen[wi] = j;
  }
}

/* Merges the most frequent pair until there are maxtok tokens, the heap
 * is empty or the best pair is below min_frequency; the merges go to
 * L->merges in order. 0, or -1 when out of memory. */
static int learn_merges(learn *L, uint32_t maxtok, uint64_t min_frequency) {
  uint32_t stamp = 0;
  while (L->ntok < maxtok && L->nheap) {
    struct hent top = hpop(L);
    uint32_t p = top.pair;
    if (top.cnt != L->pcnt[p]) {
      /* Stale: counts only fall, except for pairs pushed anew when they
       * rose, so a lower current count goes back in. */
      if (top.cnt > L->pcnt[p] && L->pcnt[p] > 0)
        hpush(L, L->pcnt[p], p);
      continue;
    }
    if (top.cnt <= 0 || (uint64_t)top.cnt < min_frequency)
      break;
    uint32_t a = (uint32_t)(L->pkey[p] >> 32), b = (uint32_t)L->pkey[p];
    uint32_t x = tok_join(L, a, b);
    if (x == UINT32_MAX)
      return -1;
    L->merges[L->nmerges++] = (bpe_merge){a, b, x};
    merge_words(L, p, a, b, x, ++stamp);
    if (L->oom)
      return -1;
    /* Every occurrence is merged, so the pair is gone; its word list is
     * no longer needed. */
    free(L->pwords[p].v);
    L->pwords[p] = (wlist){0};
    for (size_t k = 0; k < L->nup; k++)
      if (L->pcnt[L->up[k]] > 0)
        hpush(L, L->pcnt[L->up[k]], L->up[k]);
    if (L->oom)
      return -1;
  }
  return 0;
}

/* The tokenizer from what L learned: its tokens, then t's specials.
 * 0, or -1 with the reason in err (*out is the caller's). */
static int learn_build(const learn *L, const bpe_trainer *t, bpe **out,
                       char *err, size_t errlen) {
  uint32_t nvocab = L->ntok + (uint32_t)t->nspecials;
  bpe_tokdef *defs = calloc(nvocab, sizeof *defs);
  uint32_t *specids = malloc((t->nspecials + 1) * sizeof *specids);
  int rc = -1;
  if (!defs || !specids) {
    snprintf(err, errlen, "out of memory while training");
  } else {
    for (uint32_t i = 0; i < L->ntok; i++)
      defs[i] = (bpe_tokdef){L->tblob + L->toff[i], L->tlen[i]};
    for (size_t i = 0; i < t->nspecials; i++) {
      defs[L->ntok + i] = (bpe_tokdef){t->specials[i], t->speclen[i]};
      specids[i] = L->ntok + (uint32_t)i;
    }
    rc = bpe_build(out, nvocab, defs, L->merges, L->nmerges, specids,
                   t->nspecials, err, errlen);
  }
  free(defs);
  free(specids);
  return rc;
}

int bpe_trainer_finish(bpe_trainer *t, bpe **out, char *err, size_t errlen) {
  *out = NULL;
  if (check_vocab(t, err, errlen) != 0)
    return -1;
  uint32_t maxtok = t->vocab_size - (uint32_t)t->nspecials;
  learn L = {0};
  uint32_t byte_sym[256];
  int rc;
  if (learn_bytes(&L, maxtok, byte_sym) != 0 ||
      learn_words(&L, t, byte_sym) != 0 || learn_pairs(&L) != 0 ||
      learn_merges(&L, maxtok, t->min_frequency) != 0) {
    snprintf(err, errlen, "out of memory while training");
    rc = -1;
  } else {
    rc = learn_build(&L, t, out, err, errlen);
  }
  learn_free(&L);
  return rc;
}
