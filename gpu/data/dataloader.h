/*
 * dataloader: batches of (inputs, targets) for training and evaluation, cut
 * from memory-mapped token files (tokfile.h). A batch is B windows of T+1
 * consecutive tokens; inputs are the first T, targets the last T.
 *
 * Orders, both deterministic by seed:
 *   LOADER_RANDOM      every batch draws B window starts uniformly from all
 *                      files (weighted by their sizes) from a seeded RNG;
 *   LOADER_SEQUENTIAL  epochs of non-overlapping windows over all files;
 *                      each epoch visits them in an order shuffled by
 *                      (seed, epoch). Evaluation uses this with no shuffle.
 * A mixture (LOADER_RANDOM only) draws from several sources, each a set
 * of token files with a weight: each row of a batch first picks a source,
 * at random in proportion to the weights of the sources still in, then a
 * window of that source as above. A source may have a token budget (a
 * number of tokens, or of epochs: times its token count); once it has
 * served that many it drops out and the others' weights renormalize.
 * Budgets are counted in rows of T tokens (a row that starts below the
 * budget is served whole), so when every source has one the loader holds
 * a known number of batches (loader_max_batches) and then ends.
 * The position (batches served, RNG state, epoch) is plain data: saved in
 * a checkpoint and restored, the loader continues with the very batch it
 * would have served next.
 *
 * A prefetch thread prepares the next `prefetch` batches while the caller
 * trains on the current one; the batches are the same with or without it.
 * One loader belongs to one consumer thread.
 */
/* Named dataloader, not loader: orchestrator/host/loader.h is the plugin
 * loader. */
#ifndef DAGRUN_DATA_LOADER_H
#define DAGRUN_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

typedef enum loader_order {
  LOADER_RANDOM = 0,
  LOADER_SEQUENTIAL = 1
} loader_order;

/* At most this many sources in a mixture (the position is plain data). */
#define LOADER_MAX_SOURCES 16

typedef struct loader_source {
  const char *name;         /* for messages */
  const char *const *paths; /* its token files */
  size_t npaths;
  double weight;       /* > 0, relative to the others' */
  uint64_t max_tokens; /* the budget in tokens; 0: none */
  double epochs;       /* or in epochs of its tokens; 0: none */
} loader_source;

typedef struct loader_config {
  const char *const *paths; /* token files; all the same vocab_size */
  size_t npaths;
  /* LOADER_RANDOM: a mixture, used instead of paths when nsources > 0
   * (one source without a budget draws exactly as paths would). */
  const loader_source *sources;
  size_t nsources;
  int B, T;
  loader_order order;
  int shuffle; /* LOADER_SEQUENTIAL: shuffle windows each epoch */
  uint64_t seed;
  int prefetch; /* batches prepared ahead by a thread; 0 = none */
  /* Test hook: each batch takes this many more milliseconds to make (a
   * slow disk, for the train stage's data-wait warning; the train stage
   * sets it from DAGRUN_TEST_LOADER_DELAY_MS). 0 in real use. */
  int test_delay_ms;
} loader_config;

typedef struct loader_pos {
  uint64_t batches; /* batches served so far */
  uint64_t epoch;   /* LOADER_SEQUENTIAL: current epoch */
  uint64_t rng[4];  /* the RNG's state */
  /* LOADER_RANDOM: the rows (sequences of T tokens) served from each
   * source; they sum to batches x B. */
  uint64_t rows[LOADER_MAX_SOURCES];
} loader_pos;

typedef struct loader loader;

/* Opens and checks every file (tokfile_open + tokfile_verify), and that
 * there is at least one window of T+1 tokens. 0, or -1 with a message
 * naming the file. */
int loader_create(const loader_config *cfg, loader **out, char *err,
                  size_t errlen);
void loader_destroy(loader *l); /* NULL is a no-op; stops the thread */

/* A LOADER_SEQUENTIAL split that may hold less than one batch (a small
 * validation split): loader_create of cfg and, while it fails or the
 * files hold no whole batch, again with cfg->B halved down to min_B,
 * then cfg->T halved down to min_T, so that what there is gets scored
 * with fewer or shorter sequences rather than not at all. cfg keeps the
 * B and T taken; the caller says so when they changed. 0, or -1 with
 * the last err when even min_B x min_T does not fit. */
int loader_create_fitting(loader_config *cfg, int min_B, int min_T,
                          loader **out, char *err, size_t errlen);

/* The next batch into inputs[B*T] and targets[B*T]. Returns 0, or 1
 * when every source has used its budget (loader_max_batches served):
 * nothing is written and the position stays. */
int loader_next(loader *l, uint32_t *inputs, uint32_t *targets);

/* Where the loader is (the next batch to serve), and back there.
 * loader_set_pos refuses (-1) a position this loader cannot have made:
 * a sequential epoch that does not follow from the batches, rows that do
 * not sum to batches x B, or beyond a source's budget. */
void loader_get_pos(const loader *l, loader_pos *pos);
int loader_set_pos(loader *l, const loader_pos *pos);

/* The mixture: its sources (1 without one), the tokens served from
 * source i so far (rows x T, at the consumer's position), and the batches
 * the budgets hold (UINT64_MAX unless every source has a budget). */
size_t loader_sources(const loader *l);
uint64_t loader_source_tokens(const loader *l, size_t i);
uint64_t loader_max_batches(const loader *l);

uint32_t loader_vocab_size(const loader *l);
/* The batch's shape: B sequences of T tokens. */
void loader_shape(const loader *l, int *B, int *T);
uint64_t loader_tokens(const loader *l); /* in all files */
/* LOADER_SEQUENTIAL: batches in one epoch (floor). */
uint64_t loader_batches_per_epoch(const loader *l);
/* LOADER_SEQUENTIAL: windows in one epoch (the last batch of an epoch
 * holds the rest of them and then the next epoch's first). */
uint64_t loader_windows_per_epoch(const loader *l);

#endif /* DAGRUN_DATA_LOADER_H */
