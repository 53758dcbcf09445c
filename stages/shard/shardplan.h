/*
 * shardplan: the shard stage's in-memory plan. One compact record per
 * accepted document; from them, the duplicates to drop, the seeded
 * shuffle, and which shard each document goes to.
 *
 * Memory is the point of this module: a record is 40 bytes and nothing
 * else grows with the corpus. Records are gathered in mmap'ed chunks
 * (freed back to the system as they are merged, unlike malloc'ed ones
 * that may stay in the heap) and sorted in place (glibc's qsort may
 * allocate a copy of the array).
 */
#ifndef DAGRUN_SHARDPLAN_H
#define DAGRUN_SHARDPLAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct shard_rec {
  uint64_t hash_hi, hash_lo; /* XXH3-128 of the document's text */
  uint32_t file;             /* index of its file in canonical order */
  uint32_t doc;              /* index of the document within its file */
  uint64_t off;              /* offset of its serialized line in the spool */
  uint32_t len;              /* bytes of the serialized line */
  uint16_t spool;            /* which spool file holds the line */
  uint16_t dest;             /* shard it goes to (shardplan_assign) */
} shard_rec;

#define SHARDPLAN_ENOMEM (-12)

/* An append-only list of records in fixed-size chunks; one per thread. */
typedef struct shard_recs {
  struct rec_chunk *head, *tail;
  size_t n;
} shard_recs;

/* Bytes of memory a list of n records takes, chunk slack included. */
uint64_t shard_recs_bytes(size_t n);

/* Appends a copy of *r. Returns 0 or SHARDPLAN_ENOMEM. Zeroed lists are
 * empty lists. One thread at a time per list. */
int shard_recs_push(shard_recs *l, const shard_rec *r);

/* Drops the last k records (k <= l->n): the records of a file that turned
 * out unreadable halfway. */
void shard_recs_pop(shard_recs *l, size_t k);

/* Frees the list's chunks and zeroes it. */
void shard_recs_free(shard_recs *l);

/* Moves the records of the lists, in list order, into one array of
 * *n records, freeing each chunk as soon as it is copied, so the peak is
 * the array plus one chunk. The lists are left empty. The array is
 * released with shardplan_free_array. Returns 0 or SHARDPLAN_ENOMEM
 * (then the lists are freed too). */
int shardplan_gather(shard_recs *lists, size_t nlists, shard_rec **out,
                     size_t *n);
void shardplan_free_array(shard_rec *v, size_t n);

/* Sorts v by (file, doc): the corpus's canonical order. */
void shardplan_sort_canonical(shard_rec *v, size_t n);

/* Removes documents whose hash an earlier document (canonical order)
 * has, keeping the first occurrence; returns how many remain, in
 * canonical order at the front of v. */
size_t shardplan_dedup(shard_rec *v, size_t n);

/* Shuffles v (Fisher-Yates, xoshiro256** seeded through splitmix64):
 * the same seed and input give the same order on every machine. */
void shardplan_shuffle(shard_rec *v, size_t n, uint64_t seed);

/* How many of n documents go to validation: round(fraction * n), at
 * least 1 when fraction > 0 and n >= 2, and never all of them when
 * n >= 2 (training needs one). */
size_t shardplan_val_count(size_t n, double fraction);

/*
 * Sets dest of each record: the first nval records go to validation
 * shards ntrain .. ntrain+nvalshards-1, the rest to training shards
 * 0 .. ntrain-1. Each record goes, in order, to the shard of its group
 * with the fewest bytes so far (ties: lowest index), so no shard is more
 * than one record's len away from its group's mean. bytes[] (ntrain +
 * nvalshards entries) and docs[] receive each shard's totals. Needs
 * ntrain >= 1, nvalshards >= 1 when nval > 0, ntrain + nvalshards <=
 * 65536. Returns 0 or SHARDPLAN_ENOMEM.
 */
int shardplan_assign(shard_rec *v, size_t n, size_t nval, unsigned ntrain,
                     unsigned nvalshards, uint64_t *bytes, uint64_t *docs);

/* Sorts v by dest, keeping the current order of the records of each
 * shard, so a shard's records are one run. It overwrites doc with the
 * record's current position: call it once the canonical positions have
 * served (after the shuffle). n must be below 2^32. */
void shardplan_group(shard_rec *v, size_t n);

#endif
