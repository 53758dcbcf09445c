/*
 * evaluate: loss, perplexity and next-token accuracy of a model on a
 * loader's batches (see evaluate.h), through gpt_forward and gpt_logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "evaluate.h"

/* Positions of one batch whose argmax over [0,V) is the target; ties go
 * to the lowest id, as decode_sample's greedy pick. */
static uint64_t count_correct(const float *logits, const uint32_t *targets,
                              size_t N, int V, int Vp) {
  uint64_t ok = 0;
  for (size_t i = 0; i < N; i++) {
    const float *r = logits + i * (size_t)Vp;
    int best = 0;
    for (int v = 1; v < V; v++)
      if (r[v] > r[best])
        best = v;
    ok += (uint32_t)best == targets[i];
  }
  return ok;
}

int evaluate_model(gpt *m, loader *ld, int B, int T, uint64_t max_batches,
                   int (*cancelled)(void *arg), void *arg, eval_result *out,
                   char *err, size_t errlen) {
  const gpt_config *c = gpt_get_config(m);
  uint64_t nb = loader_batches_per_epoch(ld);
  /* The windows of a last, partial batch: without them a split of 146
   * windows in batches of 8 is scored on 144. */
  int tail = max_batches == 0 && B > 0
                 ? (int)(loader_windows_per_epoch(ld) % (uint64_t)B)
                 : 0;
  if (max_batches && max_batches < nb)
    nb = max_batches;
  if ((nb == 0 && tail == 0) || B < 1 || T < 1) {
    snprintf(err, errlen,
             "evaluate: no batches of B=%d T=%d in the data (%llu tokens)", B,
             T, (unsigned long long)loader_tokens(ld));
    return -1;
  }
  size_t N = (size_t)B * (size_t)T;
  uint32_t *inputs = malloc(N * sizeof *inputs);
  uint32_t *targets = malloc(N * sizeof *targets);
  if (!inputs || !targets) {
    snprintf(err, errlen, "evaluate: out of memory for %zu token ids", 2 * N);
    free(inputs);
    free(targets);
    return -1;
  }
  /* Each batch's mean loss weighted by its positions, so that this is the
   * mean over every position evaluated, the partial batch's included. */
  double loss_sum = 0;
  uint64_t correct = 0, tokens = 0, windows = 0, b;
  int rc = 0;
  uint64_t total = nb + (tail > 0);
  for (b = 0; b < total; b++) {
    if (cancelled && cancelled(arg)) {
      snprintf(err, errlen, "evaluate: cancelled after %llu of %llu batches",
               (unsigned long long)b, (unsigned long long)total);
      rc = -1;
      break;
    }
    float loss = 0;
    /* Rows are row-major: the partial batch's windows are its first
     * tail rows, run as a batch of their own. */
    int rows = b < nb ? B : tail;
    size_t n = (size_t)rows * (size_t)T;
    loader_next(ld, inputs, targets);
    if (gpt_forward(m, inputs, targets, rows, T, &loss, err, errlen) != 0) {
      rc = -1;
      break;
    }
    loss_sum += (double)loss * (double)n;
    tokens += n;
    windows += (uint64_t)rows;
    correct += count_correct(gpt_logits(m), targets, n, c->vocab_size,
                             c->padded_vocab);
  }
  free(inputs);
  free(targets);
  if (rc != 0)
    return -1;
  out->loss = loss_sum / (double)tokens;
  out->perplexity = exp(out->loss);
  out->accuracy = (double)correct / (double)tokens;
  out->tokens = tokens;
  out->batches = b;
  out->windows = windows;
  return 0;
}
