/*
 * evaluate: a model's loss, perplexity and next-token accuracy on
 * held-out token files, deterministic (the loader's sequential order, a
 * fixed number of batches); the same on a token sequence in memory; and
 * the mean loss of each of several endings after a context, for
 * multiple-choice tasks (HellaSwag's scoring in llm.c).
 *
 * Like gpt.h, one model is used by one thread at a time.
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

/* The sums of evaluate_tokens, added to across calls (start from {0}). */
typedef struct eval_sum {
  double loss_sum;  /* nats over every token scored */
  uint64_t tokens;  /* tokens scored */
  uint64_t correct; /* of them, those that were the argmax */
} eval_sum;

/* Scores ids[1..n) each given the ones before it, in windows of up to
 * T + 1 tokens that share their edge token (window w scores ids
 * [wT + 1, wT + T] given ids [wT, wT + T - 1] before each): every token
 * but the first is scored once, with between 1 and T tokens of context,
 * as nanoGPT and llm.c evaluate a split. B windows run in one forward;
 * the last, shorter one alone. Losses are computed from the logits in
 * double (log-sum-exp over the vocabulary), not from gpt_forward's float
 * mean. Adds into *sum. T in [1, block_size], B >= 1; n < 2 adds nothing.
 * cancelled (may be NULL) is polled between forwards. 0, or -1 with err
 * (an id >= vocab_size, out of memory, cancelled). */
int evaluate_tokens(gpt *m, const uint32_t *ids, size_t n, int T, int B,
                    int (*cancelled)(void *arg), void *arg, eval_sum *sum,
                    char *err, size_t errlen);

/* The mean loss per token of each of k endings after one context:
 * mean_loss[i] = the mean over the tokens of ending i of -log p(token |
 * context, the ending's tokens before it). The k sequences context +
 * ending run as one batch of k rows (shorter ones padded at the end,
 * which a causal model never looks back at). When context + ending is
 * longer than the model's context, the context loses tokens from its
 * start (the ending is kept whole). The context must have at least one
 * token and every ending at least one, and an ending fewer than
 * block_size. 0, or -1 with err. */
int evaluate_endings(gpt *m, const uint32_t *ctx, size_t nctx,
                     const uint32_t *const *ends, const size_t *nends, int k,
                     double *mean_loss, char *err, size_t errlen);

#endif /* DAGRUN_EVALUATE_H */
