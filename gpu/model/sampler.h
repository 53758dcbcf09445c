/*
 * sampler: picks the next token from a model's logits, the one sampling
 * rule of `dagrun generate` and of the train and validate stages'
 * samples (stages/common/textgen.h drives it token by token).
 *
 * The logits go through, in Hugging Face's order (its LogitsProcessor
 * list in generate(): repetition penalty, then temperature, top-k and
 * top-p warpers):
 *   1. repetition penalty (CTRL, Keskar et al. 2019, as Hugging Face's
 *      RepetitionPenaltyLogitsProcessor): the logit of every id already
 *      in the context is divided by the penalty when it is above 0 and
 *      multiplied by it otherwise, so a penalty above 1 makes a repeat
 *      less likely whatever the logit's sign;
 *   2. temperature: softmax(logits / temperature); <= 0 is greedy, the
 *      argmax (of the penalized logits), lowest id on ties;
 *   3. top-k: only the k likeliest ids (ties in logit ranked by id);
 *   4. top-p (nucleus, Holtzman et al. 2019): of those, the smallest
 *      prefix of the ranking whose probability mass is >= top_p, and
 *      every id tied in logit with its last member (so that which of two
 *      equal ids survives never depends on their ids; Hugging Face keeps
 *      an arbitrary one);
 * then one uniform draw from *rng (data/rng.h's splitmix64 state),
 * scaled to the kept ids' mass and spent in ranking order.
 *
 * With top_p 1 and repetition_penalty 1 the arithmetic is the exact one
 * of the sampler before those two existed (temperature and top_k only):
 * the same seed gives the same tokens, bit for bit (test_sampler checks
 * it against an independent reference).
 *
 * A NaN logit counts as -inf: never picked over a number. Same logits,
 * options, context and state: same token. Pure functions; any thread.
 */
#ifndef DAGRUN_SAMPLER_H
#define DAGRUN_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct sampler_opts {
  double temperature;        /* <= 0: greedy */
  int top_k;                 /* <= 0 or >= vocab_size: all */
  double top_p;              /* (0, 1]; 1: off */
  double repetition_penalty; /* > 0; 1: off */
} sampler_opts;

/* Defaults that change nothing: temperature 1, every id, no penalty. */
#define SAMPLER_OPTS_INIT                                                      \
  { 1.0, 0, 1.0, 1.0 }

/* 0, or -1 with err naming the option out of range: temperature NaN or
 * infinite; top_p not in (0, 1]; repetition_penalty not above 0 and
 * finite. The messages use the stage params' names (top_p,
 * repetition_penalty). */
int sampler_check(const sampler_opts *o, char *err, size_t errlen);

/* The next token from logits over vocab_size ids (o checked). seen: NULL
 * (no penalty) or vocab_size flags, non-zero for the ids in the context,
 * whose logits the penalty applies to. Greedy leaves *rng as it is; a
 * draw advances it by one step, also when memory for the candidates
 * fails (the argmax is then returned). */
uint32_t sampler_pick(const sampler_opts *o, const float *logits,
                      int vocab_size, const uint8_t *seen, uint64_t *rng);

#endif /* DAGRUN_SAMPLER_H */
