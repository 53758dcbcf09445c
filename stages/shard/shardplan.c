/*
 * shardplan: records, dedup, shuffle, assignment. See shardplan.h.
 */
#include "shardplan.h"

#include "data/rng.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* 256 KiB chunks: small next to any sensible memory limit, large enough
 * that a million documents take 160 mappings. */
#define CHUNK_BYTES (256 * 1024)
#define CHUNK_RECS ((CHUNK_BYTES - 64) / sizeof(shard_rec))

struct rec_chunk {
  struct rec_chunk *next;
  size_t n;
  shard_rec v[];
};

_Static_assert(sizeof(shard_rec) == 40, "a record is 40 bytes");

uint64_t shard_recs_bytes(size_t n) {
  return (uint64_t)((n + CHUNK_RECS - 1) / CHUNK_RECS) * CHUNK_BYTES;
}

static void *map_bytes(size_t n) {
  void *p =
      mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

int shard_recs_push(shard_recs *l, const shard_rec *r) {
  if (!l->tail || l->tail->n == CHUNK_RECS) {
    struct rec_chunk *c = map_bytes(CHUNK_BYTES);
    if (!c)
      return SHARDPLAN_ENOMEM;
    c->next = NULL;
    c->n = 0;
    if (l->tail)
      l->tail->next = c;
    else
      l->head = c;
    l->tail = c;
  }
  l->tail->v[l->tail->n++] = *r;
  l->n++;
  return 0;
}

void shard_recs_pop(shard_recs *l, size_t k) {
  if (k > l->n)
    k = l->n;
  size_t keep = l->n - k;
  /* Walk to the chunk holding the last kept record; free the rest. */
  struct rec_chunk *c = l->head, *last = NULL;
  size_t seen = 0;
  while (c && seen + c->n <= keep) {
    seen += c->n;
    last = c;
    c = c->next;
  }
  if (c && seen < keep) {
    c->n = keep - seen;
    last = c;
    c = c->next;
  }
  while (c) {
    struct rec_chunk *next = c->next;
    munmap(c, CHUNK_BYTES);
    c = next;
  }
  if (last)
    last->next = NULL;
  else
    l->head = NULL;
  l->tail = last;
  l->n = keep;
}

void shard_recs_free(shard_recs *l) { shard_recs_pop(l, l->n); }

int shardplan_gather(shard_recs *lists, size_t nlists, shard_rec **out,
                     size_t *n) {
  size_t total = 0;
  for (size_t i = 0; i < nlists; i++)
    total += lists[i].n;
  *out = NULL;
  *n = total;
  shard_rec *v = total ? map_bytes(total * sizeof(shard_rec)) : NULL;
  if (total && !v) {
    for (size_t i = 0; i < nlists; i++)
      shard_recs_free(&lists[i]);
    return SHARDPLAN_ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < nlists; i++) {
    struct rec_chunk *c = lists[i].head;
    while (c) {
      struct rec_chunk *next = c->next;
      memcpy(v + k, c->v, c->n * sizeof(shard_rec));
      k += c->n;
      munmap(c, CHUNK_BYTES);
      c = next;
    }
    memset(&lists[i], 0, sizeof(lists[i]));
  }
  *out = v;
  return 0;
}

void shardplan_free_array(shard_rec *v, size_t n) {
  if (v && n)
    munmap(v, n * sizeof(shard_rec));
}

/* ------------------------------------------------------------------ */
/* In-place introsort: quicksort with median of three, insertion sort
 * for short runs, heapsort when the recursion gets too deep. Keys are
 * unique (file, doc) in both orders, so stability does not matter. */

typedef int (*rec_cmp)(const shard_rec *, const shard_rec *);

static int cmp_pos(const shard_rec *a, const shard_rec *b) {
  if (a->file != b->file)
    return a->file < b->file ? -1 : 1;
  if (a->doc != b->doc)
    return a->doc < b->doc ? -1 : 1;
  return 0;
}

static int cmp_dest_doc(const shard_rec *a, const shard_rec *b) {
  if (a->dest != b->dest)
    return a->dest < b->dest ? -1 : 1;
  if (a->doc != b->doc)
    return a->doc < b->doc ? -1 : 1;
  return 0;
}

static int cmp_hash_pos(const shard_rec *a, const shard_rec *b) {
  if (a->hash_hi != b->hash_hi)
    return a->hash_hi < b->hash_hi ? -1 : 1;
  if (a->hash_lo != b->hash_lo)
    return a->hash_lo < b->hash_lo ? -1 : 1;
  return cmp_pos(a, b);
}

static void swap_rec(shard_rec *a, shard_rec *b) {
  shard_rec t = *a;
  *a = *b;
  *b = t;
}

static void heap_sift(shard_rec *v, size_t root, size_t n, rec_cmp cmp) {
  for (;;) {
    size_t child = 2 * root + 1;
    if (child >= n)
      return;
    if (child + 1 < n && cmp(&v[child + 1], &v[child]) > 0)
      child++;
    if (cmp(&v[root], &v[child]) >= 0)
      return;
    swap_rec(&v[root], &v[child]);
    root = child;
  }
}

static void heap_sort(shard_rec *v, size_t n, rec_cmp cmp) {
  for (size_t i = n / 2; i-- > 0;)
    heap_sift(v, i, n, cmp);
  for (size_t end = n; end-- > 1;) {
    swap_rec(&v[0], &v[end]);
    heap_sift(v, 0, end, cmp);
  }
}

static void insertion_sort(shard_rec *v, size_t n, rec_cmp cmp) {
  for (size_t i = 1; i < n; i++) {
    shard_rec t = v[i];
    size_t j = i;
    while (j > 0 && cmp(&v[j - 1], &t) > 0) {
      v[j] = v[j - 1];
      j--;
    }
    v[j] = t;
  }
}

static void intro_sort(shard_rec *v, size_t n, rec_cmp cmp, int depth) {
  while (n > 16) {
    if (depth-- == 0) {
      heap_sort(v, n, cmp);
      return;
    }
    /* Median of three to v[n-1], then a Lomuto partition around it. */
    size_t mid = n / 2;
    if (cmp(&v[mid], &v[0]) < 0)
      swap_rec(&v[mid], &v[0]);
    if (cmp(&v[n - 1], &v[0]) < 0)
      swap_rec(&v[n - 1], &v[0]);
    if (cmp(&v[mid], &v[n - 1]) < 0)
      swap_rec(&v[mid], &v[n - 1]);
    size_t store = 0;
    for (size_t i = 0; i < n - 1; i++)
      if (cmp(&v[i], &v[n - 1]) < 0)
        swap_rec(&v[i], &v[store++]);
    swap_rec(&v[store], &v[n - 1]);
    /* Recurse into the smaller side, loop on the larger: O(log n) stack. */
    if (store < n - store - 1) {
      intro_sort(v, store, cmp, depth);
      v += store + 1;
      n -= store + 1;
    } else {
      intro_sort(v + store + 1, n - store - 1, cmp, depth);
      n = store;
    }
  }
  insertion_sort(v, n, cmp);
}

static void sort_recs(shard_rec *v, size_t n, rec_cmp cmp) {
  int depth = 0;
  for (size_t k = n; k > 1; k >>= 1)
    depth += 2;
  intro_sort(v, n, cmp, depth);
}

void shardplan_sort_canonical(shard_rec *v, size_t n) {
  sort_recs(v, n, cmp_pos);
}

void shardplan_group(shard_rec *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    v[i].doc = (uint32_t)i;
  sort_recs(v, n, cmp_dest_doc);
}

size_t shardplan_dedup(shard_rec *v, size_t n) {
  if (n == 0)
    return 0;
  /* Sorted by hash then position, each hash's first record is its first
   * occurrence in canonical order. */
  sort_recs(v, n, cmp_hash_pos);
  size_t k = 1;
  for (size_t i = 1; i < n; i++)
    if (v[i].hash_hi != v[k - 1].hash_hi || v[i].hash_lo != v[k - 1].hash_lo)
      v[k++] = v[i];
  sort_recs(v, k, cmp_pos);
  return k;
}

/* ------------------------------------------------------------------ */
/* Shuffle */

void shardplan_shuffle(shard_rec *v, size_t n, uint64_t seed) {
  uint64_t s[4];
  rng_seed(s, seed);
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)rng_below(s, i);
    swap_rec(&v[i - 1], &v[j]);
  }
}

size_t shardplan_val_count(size_t n, double fraction) {
  if (n < 2 || !(fraction > 0))
    return 0;
  double want = fraction * (double)n + 0.5;
  size_t k = want >= (double)n ? n : (size_t)want;
  if (k < 1)
    k = 1;
  if (k > n - 1)
    k = n - 1;
  return k;
}

/* ------------------------------------------------------------------ */
/* Assignment: a binary min-heap of shards keyed by (bytes, index). */

typedef struct shard_heap {
  uint32_t *v; /* shard indices */
  size_t n;
  const uint64_t *bytes;
} shard_heap;

static int heap_less(const shard_heap *h, uint32_t a, uint32_t b) {
  if (h->bytes[a] != h->bytes[b])
    return h->bytes[a] < h->bytes[b];
  return a < b;
}

static void heap_down(shard_heap *h, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    if (l < h->n && heap_less(h, h->v[l], h->v[m]))
      m = l;
    if (l + 1 < h->n && heap_less(h, h->v[l + 1], h->v[m]))
      m = l + 1;
    if (m == i)
      return;
    uint32_t t = h->v[i];
    h->v[i] = h->v[m];
    h->v[m] = t;
    i = m;
  }
}

/* Assigns v[0..n) to shards first .. first+count-1. */
static void assign_group(shard_rec *v, size_t n, uint32_t first, uint32_t count,
                         uint32_t *heapv, uint64_t *bytes, uint64_t *docs) {
  shard_heap h = {heapv, count, bytes};
  /* All shards start at 0 bytes, so index order is already a heap. */
  for (uint32_t i = 0; i < count; i++)
    heapv[i] = first + i;
  for (size_t i = 0; i < n; i++) {
    uint32_t s = h.v[0];
    v[i].dest = (uint16_t)s;
    bytes[s] += v[i].len;
    docs[s]++;
    heap_down(&h, 0);
  }
}

int shardplan_assign(shard_rec *v, size_t n, size_t nval, unsigned ntrain,
                     unsigned nvalshards, uint64_t *bytes, uint64_t *docs) {
  size_t nshards = (size_t)ntrain + nvalshards;
  memset(bytes, 0, nshards * sizeof(*bytes));
  memset(docs, 0, nshards * sizeof(*docs));
  uint32_t *heapv = malloc((nshards ? nshards : 1) * sizeof(*heapv));
  if (!heapv)
    return SHARDPLAN_ENOMEM;
  if (nval > n)
    nval = n;
  if (nval > 0)
    assign_group(v, nval, ntrain, nvalshards, heapv, bytes, docs);
  assign_group(v + nval, n - nval, 0, ntrain, heapv, bytes, docs);
  free(heapv);
  return 0;
}
