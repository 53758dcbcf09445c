/*
 * test_decode: the KV-cache decoder (gpu/cpu/decode.h) against the
 * training engine's forward pass on the same tokens, across the sliding
 * window's rebuilds (the sampler's tests are test_sampler's).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "data/rng.h"
#include "cpu/decode.h"
#include "model/gpt.h"
#include "testlib.h"

static char err[512];

static gpt *make_cfg(gpt_config cfg) {
  gpt *m = NULL;
  if (gpt_config_finish(&cfg, err, sizeof err) != 0 ||
      gpt_create(&cfg, &m, err, sizeof err) != 0) {
    fprintf(stderr, "make: %s\n", err);
    return NULL;
  }
  return m;
}

static gpt *make(int L, int H, int C, int T, int V) {
  gpt_config cfg = {
      .n_layer = L, .n_head = H, .n_embd = C, .block_size = T, .vocab_size = V};
  return make_cfg(cfg);
}

static double uniform(uint64_t *s) {
  return (double)(rng_splitmix64(s) >> 11) / 9007199254740992.0;
}

/* Moves every parameter but wte's padding rows by up to +-amp, so that
 * biases and LayerNorms are not at their trivial init values. */
static void perturb(gpt *m, float amp, uint64_t seed) {
  const gpt_config *c = gpt_get_config(m);
  float *p = gpt_params(m);
  size_t pad0 = (size_t)c->vocab_size * c->n_embd;
  size_t pad1 = (size_t)c->padded_vocab * c->n_embd;
  for (size_t i = 0; i < gpt_num_params(m); i++)
    if (i < pad0 || i >= pad1)
      p[i] += amp * (float)(uniform(&seed) * 2.0 - 1.0);
}

/* max |a - b| / max |b| over the first V entries */
static double rel_err(const float *a, const float *b, int V) {
  double dmax = 0, bmax = 0;
  for (int v = 0; v < V; v++) {
    double dd = fabs((double)a[v] - b[v]);
    dmax = dd > dmax ? dd : dmax;
    bmax = fabs(b[v]) > bmax ? fabs(b[v]) : bmax;
  }
  return bmax > 0 ? dmax / bmax : dmax;
}

/* Every push's logits equal gpt_forward's on the tokens the window holds,
 * over 3.5 windows (so the window slides several times), and reset gives
 * the same logits again. A Llama's cached steps need RoPE at their
 * positions in the window; its tolerance is 1e-5. */
static void test_matches(gpt_config cfg, double tol) {
  int L = cfg.n_layer, C = cfg.n_embd, T = cfg.block_size, V = cfg.vocab_size;
  gpt *m = make_cfg(cfg);
  CHECK(m != NULL);
  if (!m)
    return;
  gpt_init(m, 7);
  perturb(m, 0.05f, 99);
  const gpt_config *c = gpt_get_config(m);
  decoder *d = NULL;
  CHECK_INT(decoder_create(m, &d, err, sizeof err), 0);
  if (!d) {
    fprintf(stderr, "decoder_create: %s\n", err);
    gpt_destroy(m);
    return;
  }
  int n = T * 7 / 2;
  uint32_t *seq = malloc((size_t)n * sizeof *seq);
  uint32_t *win = malloc((size_t)T * sizeof *win);
  float *first = malloc((size_t)c->padded_vocab * sizeof *first);
  uint64_t s = 2024;
  for (int i = 0; i < n; i++)
    seq[i] = (uint32_t)(rng_splitmix64(&s) % (uint64_t)V);
  /* The window as decode.h describes it: full at T tokens, then the last
   * T/2 (the new one included). */
  size_t w = 0;
  int keep = T / 2 > 0 ? T / 2 : 1, slides = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    if (w == (size_t)T) {
      memmove(win, win + T - (keep - 1), (size_t)(keep - 1) * sizeof *win);
      w = (size_t)keep - 1;
      slides++;
    }
    win[w++] = seq[i];
    const float *lg = decoder_push(d, seq[i], err, sizeof err);
    CHECK(lg != NULL);
    if (!lg)
      break;
    CHECK_INT(decoder_length(d), w);
    float loss;
    CHECK_INT(gpt_forward(m, win, NULL, 1, (int)w, &loss, err, sizeof err), 0);
    const float *ref = gpt_logits(m) + (w - 1) * (size_t)c->padded_vocab;
    double e = rel_err(lg, ref, V);
    worst = e > worst ? e : worst;
    if (e >= tol)
      fprintf(stderr, "position %d (window %zu): relative error %g\n", i, w, e);
    CHECK(e < tol);
    for (int v = V; v < c->padded_vocab; v++)
      CHECK(lg[v] == 0.0f);
    if (i == 0)
      memcpy(first, lg, (size_t)c->padded_vocab * sizeof *first);
  }
  CHECK_INT(slides, 5); /* 56 tokens, T 16: at 17, 25, 33, 41, 49 */
  fprintf(stderr, "%s L%d C%d T%d V%d: worst relative error %g, %d slides\n",
          cfg.family ? "llama" : "gpt2", L, C, T, V, worst, slides);
  decoder_reset(d);
  CHECK_INT(decoder_length(d), 0);
  const float *again = decoder_push(d, seq[0], err, sizeof err);
  CHECK(again && memcmp(again, first, (size_t)V * sizeof(float)) == 0);
  free(seq);
  free(win);
  free(first);
  decoder_destroy(d);
  gpt_destroy(m);
}

static void test_bad_token(void) {
  gpt *m = make(1, 2, 16, 8, 50);
  gpt_init(m, 1);
  decoder *d = NULL;
  CHECK_INT(decoder_create(m, &d, err, sizeof err), 0);
  err[0] = '\0';
  CHECK(decoder_push(d, 50, err, sizeof err) == NULL);
  CHECK(strstr(err, "50") != NULL && strstr(err, "vocab_size") != NULL);
  CHECK_INT(decoder_length(d), 0);
  CHECK(decoder_push(d, 49, err, sizeof err) != NULL);
  CHECK_INT(decoder_length(d), 1);
  decoder_destroy(d);
  decoder_destroy(NULL);
  gpt_destroy(m);
}

static void test_matches_forward(int L, int H, int C, int T, int V) {
  gpt_config cfg = {
      .n_layer = L, .n_head = H, .n_embd = C, .block_size = T, .vocab_size = V};
  test_matches(cfg, 1e-4);
}

/* A Llama: grouped-query (KV heads < heads), head size 10, tied or
 * untied, another RoPE base. */
static void test_llama(int H, int KV, int C, int untied, float theta) {
  gpt_config cfg = {.n_layer = 2,
                    .n_head = H,
                    .n_embd = C,
                    .block_size = 16,
                    .vocab_size = 97,
                    .family = GPT_FAMILY_LLAMA,
                    .n_kv_head = KV,
                    .intermediate = 56,
                    .rope_theta = theta,
                    .untied_head = untied};
  test_matches(cfg, 1e-5);
}

int main(void) {
  test_matches_forward(2, 2, 32, 16, 100);
  test_matches_forward(3, 4, 64, 16, 321);
  test_llama(4, 2, 40, 0, 10000.0f);
  test_llama(4, 1, 40, 1, 500000.0f);
  test_llama(2, 2, 32, 1, 10000.0f);
  test_bad_token();
  TEST_DONE();
}
