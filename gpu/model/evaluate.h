/*
 * evaluate: a model's loss, perplexity and next-token accuracy on
 * held-out token files, deterministic (the loader's sequential order, a
 * fixed number of batches).
 */
#ifndef DAGRUN_EVALUATE_H
#define DAGRUN_EVALUATE_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataloader.h"
#include "gpt.h"

typedef struct eval_result {
  double loss;       /* mean cross-entropy per token (nats) */
  double perplexity; /* exp(loss) */
  double accuracy;   /* fraction of positions whose likeliest id (the
                        argmax over the real vocabulary) is the target */
  uint64_t tokens;   /* positions evaluated */
  uint64_t batches;  /* the last one partial when windows % B != 0 */
  uint64_t windows;  /* windows (rows of T positions) evaluated */
} eval_result;

/* Runs ld's batches of (B, T) through m from ld's current position.
 * max_batches 0: every window of one epoch once (the whole split), the
 * last batch holding only the epoch's remaining windows when their
 * number is no multiple of B (the rest of its rows, the next epoch's
 * first windows, are not scored). Otherwise max_batches full batches, at
 * most an epoch's (loader_batches_per_epoch), as the train stage's
 * eval_batches and a device evaluating fixed-size batches count them.
 * B and T must be ld's.
 * cancelled (may be NULL) is polled between batches with arg; when it
 * returns non-zero, evaluation stops with -1 and "cancelled" in err.
 * 0, or -1 with err (a forward failed, out of memory, no batches). */
int evaluate_model(gpt *m, loader *ld, int B, int T, uint64_t max_batches,
                   int (*cancelled)(void *arg), void *arg, eval_result *out,
                   char *err, size_t errlen);

#endif /* DAGRUN_EVALUATE_H */
