/*
 * evaluate: loss, perplexity and next-token accuracy of a model on a
 * loader's batches or a token sequence, and the mean loss of endings
 * (see evaluate.h), through gpt_forward and gpt_logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* -log softmax(r)[target] over r[0, V), in double; *top set when target
 * is the argmax (lowest id on ties, as count_correct). */
static double row_loss(const float *r, int V, uint32_t target, int *top) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (r[v] > r[best])
      best = v;
  double mx = r[best], s = 0;
  for (int v = 0; v < V; v++)
    s += exp((double)r[v] - mx);
  *top = (uint32_t)best == target;
  return mx + log(s) - (double)r[target];
}

/* Fails with err when an id of ids[0, n) is no id of the model. */
static int check_ids(const uint32_t *ids, size_t n, int V, char *err,
                     size_t errlen) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= (uint32_t)V) {
      snprintf(err, errlen,
               "evaluate: token %zu is id %u, not below the model's "
               "vocab_size %d",
               i, ids[i], V);
      return -1;
    }
  return 0;
}

int evaluate_tokens(gpt *m, const uint32_t *ids, size_t n, int T, int B,
                    int (*cancelled)(void *arg), void *arg, eval_sum *sum,
                    char *err, size_t errlen) {
  const gpt_config *c = gpt_get_config(m);
  if (T < 1 || T > c->block_size || B < 1) {
    snprintf(err, errlen,
             "evaluate: windows of %d tokens in batches of %d: need 1 to %d "
             "tokens and at least 1 window",
             T, B, c->block_size);
    return -1;
  }
  if (n < 2)
    return 0;
  if (check_ids(ids, n, c->vocab_size, err, errlen) != 0)
    return -1;
  size_t full = (n - 1) / (size_t)T, rest = (n - 1) % (size_t)T, w = 0;
  uint32_t *in = malloc((size_t)B * (size_t)T * sizeof *in);
  if (!in) {
    snprintf(err, errlen, "evaluate: out of memory for %d x %d ids", B, T);
    return -1;
  }
  int rc = 0;
  while (w < full || rest) {
    if (cancelled && cancelled(arg)) {
      snprintf(err, errlen, "evaluate: cancelled after %llu tokens",
               (unsigned long long)sum->tokens);
      rc = -1;
      break;
    }
    /* Full windows B at a time, then the short last one alone. */
    int last = w >= full;
    size_t rows = last ? 1 : full - w < (size_t)B ? full - w : (size_t)B;
    size_t len = last ? rest : (size_t)T;
    for (size_t r = 0; r < rows; r++)
      memcpy(in + r * len, ids + (w + r) * (size_t)T, len * sizeof *in);
    float unused;
    if (gpt_forward(m, in, NULL, (int)rows, (int)len, &unused, err, errlen)) {
      rc = -1;
      break;
    }
    const float *lg = gpt_logits(m);
    for (size_t r = 0; r < rows; r++)
      for (size_t t = 0; t < len; t++) {
        int top;
        sum->loss_sum +=
            row_loss(lg + (r * len + t) * (size_t)c->padded_vocab,
                     c->vocab_size, ids[(w + r) * (size_t)T + t + 1], &top);
        sum->correct += (uint64_t)top;
        sum->tokens++;
      }
    if (last)
      rest = 0;
    else
      w += rows;
  }
  free(in);
  return rc;
}

int evaluate_endings(gpt *m, const uint32_t *ctx, size_t nctx,
                     const uint32_t *const *ends, const size_t *nends, int k,
                     double *mean_loss, char *err, size_t errlen) {
  const gpt_config *c = gpt_get_config(m);
  size_t Tm = (size_t)c->block_size, T = 0;
  if (nctx == 0 || k < 1) {
    snprintf(err, errlen, "evaluate: %s", nctx ? "no endings" : "no context");
    return -1;
  }
  for (int i = 0; i < k; i++) {
    if (nends[i] == 0 || nends[i] >= Tm) {
      snprintf(err, errlen,
               "evaluate: ending %d has %zu tokens: it needs 1 to %zu (the "
               "model's context %zu, less one for the context)",
               i, nends[i], Tm - 1, Tm);
      return -1;
    }
    size_t keep = nctx < Tm - nends[i] ? nctx : Tm - nends[i];
    T = keep + nends[i] > T ? keep + nends[i] : T;
  }
  if (check_ids(ctx, nctx, c->vocab_size, err, errlen) != 0)
    return -1;
  for (int i = 0; i < k; i++)
    if (check_ids(ends[i], nends[i], c->vocab_size, err, errlen) != 0)
      return -1;
  uint32_t *in = calloc((size_t)k * T, sizeof *in); /* padding: id 0 */
  if (!in) {
    snprintf(err, errlen, "evaluate: out of memory for %d x %zu ids", k, T);
    return -1;
  }
  for (int i = 0; i < k; i++) {
    size_t keep = nctx < Tm - nends[i] ? nctx : Tm - nends[i];
    memcpy(in + (size_t)i * T, ctx + nctx - keep, keep * sizeof *in);
    memcpy(in + (size_t)i * T + keep, ends[i], nends[i] * sizeof *in);
  }
  float unused;
  int rc = gpt_forward(m, in, NULL, k, (int)T, &unused, err, errlen);
  const float *lg = gpt_logits(m);
  for (int i = 0; rc == 0 && i < k; i++) {
    size_t keep = nctx < Tm - nends[i] ? nctx : Tm - nends[i];
    double s = 0;
    int top;
    /* Ending token j sits at keep + j; the logits one before predict it. */
    for (size_t j = 0; j < nends[i]; j++)
      s += row_loss(lg + ((size_t)i * T + keep + j - 1) * c->padded_vocab,
                    c->vocab_size, ends[i][j], &top);
    mean_loss[i] = s / (double)nends[i];
  }
  free(in);
  return rc;
}
