/*
 * sampler: repetition penalty, temperature, top-k and top-p over one
 * row of logits, then one seeded draw (the contract is sampler.h).
 *
 * The top k are found with a heap of k candidates in O(V log k), then
 * sorted; top-p walks that ranking. With top_k 0 the heap holds the
 * whole vocabulary: a sort of V per token, which at GPT-2's 50257 ids
 * is still far below the cost of the forward pass that made the logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "data/rng.h"
#include "sampler.h"

int sampler_check(const sampler_opts *o, char *err, size_t errlen) {
  if (!isfinite(o->temperature)) {
    snprintf(err, errlen, "temperature must be a finite number, got %g",
             o->temperature);
    return -1;
  }
  if (!(o->top_p > 0 && o->top_p <= 1)) {
    snprintf(err, errlen,
             "top_p must be above 0 and at most 1 (1: off), got %g", o->top_p);
    return -1;
  }
  if (!(o->repetition_penalty > 0 && isfinite(o->repetition_penalty))) {
    snprintf(err, errlen,
             "repetition_penalty must be a number above 0 (1: off, above "
             "1: fewer repeats), got %g",
             o->repetition_penalty);
    return -1;
  }
  return 0;
}

typedef struct cand {
  float logit;
  uint32_t id;
} cand;

/* a ranks before b: the higher logit, the lower id on ties. */
static int before(const cand *a, const cand *b) {
  return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_rank(const void *pa, const void *pb) {
  const cand *a = pa, *b = pb;
  return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* A heap of k candidates whose root is the one ranked last, so a better
 * candidate replaces it: the top k of V in O(V log k). */
static void sift_down(cand *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, w = i;
    if (l < n && before(&h[w], &h[l]))
      w = l;
    if (r < n && before(&h[w], &h[r]))
      w = r;
    if (w == i)
      return;
    cand t = h[i];
    h[i] = h[w];
    h[w] = t;
    i = w;
  }
}

static void sift_up(cand *h, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(&h[p], &h[i]))
      return;
    cand t = h[i];
    h[i] = h[p];
    h[p] = t;
    i = p;
  }
}

/* The logit of v after the repetition penalty; a NaN is -inf, never
 * picked over a number. The penalty is applied in float, as Hugging
 * Face applies it to its float32 scores. */
static float logit_of(const float *logits, int v, const uint8_t *seen,
                      float penalty) {
  float x = logits[v];
  if (isnan(x))
    return -INFINITY;
  if (seen && seen[v] && penalty != 1.0f)
    x = x > 0 ? x / penalty : x * penalty;
  return x;
}

static uint32_t argmax(const float *logits, int V, const uint8_t *seen,
                       float penalty) {
  int best = 0;
  float bl = logit_of(logits, 0, seen, penalty);
  for (int v = 1; v < V; v++) {
    float x = logit_of(logits, v, seen, penalty);
    if (x > bl) {
      bl = x;
      best = v;
    }
  }
  return (uint32_t)best;
}

/* How many of the n ranked candidates top-p keeps: the shortest prefix
 * whose weight reaches top_p of the total (weights exp((l - mx) / t),
 * the softmax's numerators), then the ids tied with its last one. The
 * kept weight goes to *sum. top_p 1 keeps all n and leaves *sum, summed
 * in the same order, as it was: the draw is then the old one, bit for
 * bit. */
static size_t nucleus(const cand *h, size_t n, double mx, double t,
                      double top_p, double *sum) {
  if (top_p >= 1)
    return n;
  double target = top_p * *sum, cum = 0;
  size_t m = 0;
  while (m < n) {
    cum += exp((h[m].logit - mx) / t);
    m++;
    if (cum >= target)
      break;
  }
  while (m < n && h[m].logit == h[m - 1].logit)
    cum += exp((h[m++].logit - mx) / t);
  *sum = cum;
  return m;
}

uint32_t sampler_pick(const sampler_opts *o, const float *logits,
                      int vocab_size, const uint8_t *seen, uint64_t *rng) {
  int V = vocab_size;
  float pen = (float)o->repetition_penalty;
  if (V <= 1 || o->temperature <= 0)
    return V <= 1 ? 0 : argmax(logits, V, seen, pen);
  size_t K = o->top_k > 0 && o->top_k < V ? (size_t)o->top_k : (size_t)V;
  cand small[256];
  cand *h = K <= 256 ? small : malloc(K * sizeof *h);
  /* No memory for the candidates: the likeliest token is still a token,
   * and the state advances as a draw would have advanced it. */
  uint64_t u64 = rng_splitmix64(rng);
  if (!h)
    return argmax(logits, V, seen, pen);
  size_t n = 0;
  for (int v = 0; v < V; v++) {
    cand c = {logit_of(logits, v, seen, pen), (uint32_t)v};
    if (n < K) {
      h[n] = c;
      sift_up(h, n++);
    } else if (before(&c, &h[0])) {
      h[0] = c;
      sift_down(h, n, 0);
    }
  }
  qsort(h, n, sizeof *h, cmp_rank);
  /* Softmax at the temperature over the kept ids, then one uniform draw
   * scaled to their sum, spent in descending-logit order (train.c's
   * samplers have always drawn this way). */
  double t = o->temperature, mx = h[0].logit, sum = 0;
  uint32_t pick = h[0].id;
  if (isfinite(mx)) {
    for (size_t a = 0; a < n; a++)
      sum += exp((h[a].logit - mx) / t);
    size_t m = nucleus(h, n, mx, t, o->top_p, &sum);
    double u = (double)(u64 >> 11) / 9007199254740992.0 * sum;
    pick = h[m - 1].id;
    for (size_t a = 0; a < m; a++) {
      u -= exp((h[a].logit - mx) / t);
      if (u <= 0) {
        pick = h[a].id;
        break;
      }
    }
  }
  if (h != small)
    free(h);
  return pick;
}
