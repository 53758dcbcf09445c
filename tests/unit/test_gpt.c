/*
 * test_gpt: the GPT-2 model's configuration, layout, initialization and
 * CPU forward/backward (gpu/model/gpt.h). The math itself is checked
 * against PyTorch in tests/integration/test_gpt_torch.sh; here: what the
 * contract promises (presets, counts, init statistics, gradient
 * accumulation, determinism, activation recomputation, refusals) and a
 * finite-difference check.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt.h"
#include "optim/optim.h"
#include "testlib.h"
#include "testllama.h"

static char err[512];

static gpt *make(int L, int H, int C, int T, int V) {
  gpt_config cfg = {
      .n_layer = L, .n_head = H, .n_embd = C, .block_size = T, .vocab_size = V};
  gpt *m = NULL;
  if (gpt_config_finish(&cfg, err, sizeof err) != 0 ||
      gpt_create(&cfg, &m, err, sizeof err) != 0) {
    fprintf(stderr, "make: %s\n", err);
    return NULL;
  }
  return m;
}

static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static void random_ids(uint32_t *ids, int n, int V, uint64_t seed) {
  for (int i = 0; i < n; i++)
    ids[i] = (uint32_t)(rng(&seed) % (uint64_t)V);
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
      p[i] +=
          amp *
          (float)((double)(rng(&seed) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double tensor_std(gpt *m, const char *name, size_t n) {
  const gpt_tensor *t = gpt_tensor_find(m, name);
  const float *p = gpt_params(m) + t->offset;
  if (!n)
    n = t->numel;
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n; i++) {
    s += p[i];
    s2 += (double)p[i] * p[i];
  }
  double mean = s / n;
  return sqrt(s2 / n - mean * mean);
}

/* The Llama family's presets, defaults and refusals (gpt.h). */
static void test_llama_config(void) {
  gpt_config c = {.vocab_size = 49152};
  CHECK_INT(gpt_config_preset("smollm-135m-shape", &c, err, sizeof err), 0);
  CHECK_INT(gpt_config_finish(&c, err, sizeof err), 0);
  CHECK(c.family == GPT_FAMILY_LLAMA && c.n_layer == 30 && c.n_head == 9 &&
        c.n_kv_head == 3 && c.n_embd == 576 && c.intermediate == 1536 &&
        c.block_size == 2048 && !c.untied_head);
  CHECK(c.rope_theta == 10000.0f && c.norm_eps == 1e-5f);
  /* SmolLM-135M's 134,515,008 parameters (vocab 49152 is a multiple of
   * 64, so no padding rows). */
  CHECK(gpt_config_num_params(&c) == 134515008);
  /* llama-tiny's blocks have gpt-tiny's parameter count, to the matrix
   * (the norms and biases aside): both 4 x 196,608. */
  gpt_config g = {.vocab_size = 100}, l = {.vocab_size = 100};
  CHECK_INT(gpt_config_preset("gpt-tiny", &g, err, sizeof err), 0);
  CHECK_INT(gpt_config_preset("llama-tiny", &l, err, sizeof err), 0);
  CHECK_INT(gpt_config_finish(&g, err, sizeof err), 0);
  CHECK_INT(gpt_config_finish(&l, err, sizeof err), 0);
  size_t emb = (size_t)128 * 128, gb = gpt_config_num_params(&g) - emb;
  gb -= (size_t)128 * 128 + 4 * 13 * 128 + 2 * 128; /* wpe, biases, LNs */
  size_t lb = gpt_config_num_params(&l) - emb - 4 * 2 * 128 - 128;
  CHECK(gb == 4 * 196608 && lb == 4 * 196608);
  /* The model made has the counted parameters and the HF names. */
  gpt *m = NULL;
  l.untied_head = 1;
  CHECK_INT(gpt_create(&l, &m, err, sizeof err), 0);
  CHECK(gpt_num_params(m) == gpt_config_num_params(&l));
  CHECK_INT((int)gpt_tensor_count(m), 1 + 9 * 4 + 2);
  const gpt_tensor *k =
      gpt_tensor_find(m, "model.layers.3.self_attn.k_proj.weight");
  CHECK(k && k->shape[0] == 64 && k->shape[1] == 128 && k->decay);
  CHECK(gpt_tensor_find(m, "lm_head.weight") != NULL);
  CHECK(!gpt_tensor_find(m, "model.embed_tokens.weight")->decay);
  CHECK_INT((int)gpt_group_count(m), 6);
  gpt_init(m, 1);
  const gpt_tensor *nw = gpt_tensor_find(m, "model.norm.weight");
  CHECK(gpt_params(m)[nw->offset] == 1.0f);
  const gpt_tensor *lm = gpt_tensor_find(m, "lm_head.weight");
  CHECK(gpt_params(m)[lm->offset + (size_t)lm->numel - 1] == 0.0f);
  gpt_destroy(m);

  /* Defaults of the zero knobs. */
  gpt_config d = {.n_layer = 1,
                  .n_head = 4,
                  .n_embd = 48,
                  .block_size = 8,
                  .vocab_size = 10,
                  .family = GPT_FAMILY_LLAMA};
  CHECK_INT(gpt_config_finish(&d, err, sizeof err), 0);
  CHECK(d.n_kv_head == 4 && d.intermediate == 128);
  /* Refusals, each naming its numbers. */
  gpt_config b = d;
  b.n_kv_head = 3;
  CHECK_INT(gpt_config_finish(&b, err, sizeof err), -1);
  CHECK(strstr(err, "n_kv_head (3) must divide n_head (4)"));
  b = d;
  b.n_embd = 20; /* head size 5 */
  CHECK_INT(gpt_config_finish(&b, err, sizeof err), -1);
  CHECK(strstr(err, "head size n_embd/n_head (20/4 = 5) must be even"));
  b = d;
  b.rope_theta = -1.0f;
  CHECK_INT(gpt_config_finish(&b, err, sizeof err), -1);
  CHECK(strstr(err, "rope_theta is -1"));
  b = d;
  b.norm_eps = 2.0f;
  CHECK_INT(gpt_config_finish(&b, err, sizeof err), -1);
  CHECK(strstr(err, "norm_eps is 2"));
  b = d;
  b.family = 7;
  CHECK_INT(gpt_config_finish(&b, err, sizeof err), -1);
  CHECK(strstr(err, "unknown model family 7"));
  /* GPT-2 takes none of the Llama knobs. */
  gpt_config g2 = {.n_layer = 1,
                   .n_head = 4,
                   .n_embd = 48,
                   .block_size = 8,
                   .vocab_size = 10,
                   .n_kv_head = 2};
  CHECK_INT(gpt_config_finish(&g2, err, sizeof err), -1);
  CHECK(strstr(err, "n_kv_head (2)") && strstr(err, "GPT-2 family takes none"));
}

static void test_presets(void) {
  gpt_config c = {0};
  c.vocab_size = 50257;
  CHECK_INT(gpt_config_preset("gpt-tiny", &c, err, sizeof err), 0);
  CHECK(c.n_layer == 4 && c.n_head == 4 && c.n_embd == 128 &&
        c.block_size == 128);
  CHECK_INT(gpt_config_preset("gpt-small", &c, err, sizeof err), 0);
  CHECK(c.n_layer == 6 && c.n_head == 6 && c.n_embd == 384 &&
        c.block_size == 256);
  CHECK_INT(gpt_config_preset("gpt2-124M", &c, err, sizeof err), 0);
  CHECK(c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 &&
        c.block_size == 1024);
  CHECK_INT(gpt_config_preset("gpt2-350M", &c, err, sizeof err), 0);
  CHECK(c.n_layer == 24 && c.n_head == 16 && c.n_embd == 1024 &&
        c.block_size == 1024);
  CHECK_INT(c.vocab_size, 50257); /* left as it was */
  CHECK_INT(gpt_config_preset("gpt-huge", &c, err, sizeof err), -1);
  CHECK_STR(err, "gpt: unknown model preset \"gpt-huge\" (presets: "
                 "gpt-tiny, gpt-small, gpt2-124M, gpt2-350M, llama-tiny, "
                 "llama-small, smollm-135m-shape)");
  /* The names the train stages declare as their model param's choices. */
  for (size_t i = 0; gpt_preset_names[i]; i++)
    CHECK_INT(gpt_config_preset(gpt_preset_names[i], &c, err, sizeof err), 0);

  CHECK_INT(gpt_config_finish(&c, err, sizeof err), 0);
  CHECK_INT(c.padded_vocab, 50304);
  gpt_config d = {.n_layer = 2,
                  .n_head = 2,
                  .n_embd = 32,
                  .block_size = 16,
                  .vocab_size = 64};
  CHECK_INT(gpt_config_finish(&d, err, sizeof err), 0);
  CHECK_INT(d.padded_vocab, 64);
  d.vocab_size = 67;
  CHECK_INT(gpt_config_finish(&d, err, sizeof err), 0);
  CHECK_INT(d.padded_vocab, 128);
  d.vocab_size = 1;
  CHECK_INT(gpt_config_finish(&d, err, sizeof err), 0);
  CHECK_INT(d.padded_vocab, 64);

  gpt_config bad = {.n_layer = 2,
                    .n_head = 3,
                    .n_embd = 32,
                    .block_size = 16,
                    .vocab_size = 67};
  CHECK_INT(gpt_config_finish(&bad, err, sizeof err), -1);
  CHECK(strstr(err, "n_embd (32) must be a multiple of n_head (3)"));
  bad = (gpt_config){.n_layer = 0,
                     .n_head = 2,
                     .n_embd = 32,
                     .block_size = 16,
                     .vocab_size = 67};
  CHECK_INT(gpt_config_finish(&bad, err, sizeof err), -1);
  CHECK(strstr(err, "n_layer is 0"));
  bad = (gpt_config){.n_layer = 2,
                     .n_head = 2,
                     .n_embd = 32,
                     .block_size = 16,
                     .vocab_size = 0};
  CHECK_INT(gpt_config_finish(&bad, err, sizeof err), -1);
  CHECK(strstr(err, "vocab_size is 0"));
  bad = (gpt_config){.n_layer = 2,
                     .n_head = 2,
                     .n_embd = 32,
                     .block_size = -1,
                     .vocab_size = 67};
  CHECK_INT(gpt_config_finish(&bad, err, sizeof err), -1);
  CHECK(strstr(err, "block_size is -1"));
  /* gpt_create refuses a config that was not finished. */
  gpt_config raw = {.n_layer = 2,
                    .n_head = 2,
                    .n_embd = 32,
                    .block_size = 16,
                    .vocab_size = 67};
  gpt *m = (gpt *)1;
  CHECK_INT(gpt_create(&raw, &m, err, sizeof err), -1);
  CHECK(m == NULL);
  CHECK(strstr(err, "gpt_config_finish"));
  gpt_destroy(NULL);
}

/* Hugging Face's gpt2 has 124,439,808 parameters: wte 50257 x 768 and
 * the rest. Ours hold wte with 50304 rows, the 47 padding rows are not
 * parameters of the model, so they are subtracted. */
static void test_param_count(void) {
  gpt_config c = {0};
  c.vocab_size = 50257;
  gpt_config_preset("gpt2-124M", &c, err, sizeof err);
  gpt_config_finish(&c, err, sizeof err);
  gpt *m = NULL;
  CHECK_INT(gpt_create(&c, &m, err, sizeof err), 0);
  if (!m)
    return;
  size_t padding = (size_t)(c.padded_vocab - c.vocab_size) * c.n_embd;
  CHECK_INT(gpt_num_params(m) - padding, 124439808);
  CHECK_INT(gpt_tensor_count(m), 2 + 12 * 12 + 2);
  size_t sum = 0;
  for (size_t i = 0; i < gpt_tensor_count(m); i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    CHECK_INT(t->offset, sum); /* packed, in order */
    sum += t->numel;
  }
  CHECK_INT(sum, gpt_num_params(m));
  CHECK(gpt_tensor_at(m, gpt_tensor_count(m)) == NULL);
  const gpt_tensor *t = gpt_tensor_find(m, "wte.weight");
  CHECK(t && t->offset == 0 && t->shape[0] == 50304 && t->shape[1] == 768 &&
        t->decay == 0);
  t = gpt_tensor_find(m, "h.11.mlp.c_fc.weight");
  CHECK(t && t->ndim == 2 && t->shape[0] == 768 && t->shape[1] == 3072 &&
        t->decay == 1);
  t = gpt_tensor_find(m, "h.3.attn.c_attn.bias");
  CHECK(t && t->ndim == 1 && t->shape[0] == 2304 && t->decay == 0);
  t = gpt_tensor_find(m, "ln_f.bias");
  CHECK(t && t->offset + t->numel == gpt_num_params(m));
  CHECK(gpt_tensor_find(m, "h.12.ln_1.weight") == NULL);
  /* FLOPs: 6N + 12 L C T with N the layers' weights and biases and the
   * V x C head. */
  double N = 12.0 * (12.0 * 768 * 768 + 9.0 * 768) + 50257.0 * 768;
  CHECK_NEAR(gpt_flops_per_token(m), 6 * N + 12.0 * 12 * 768 * 1024, 1.0);
  gpt_destroy(m);
}

static void test_init(void) {
  gpt *m = make(4, 4, 128, 128, 1000), *m2 = make(4, 4, 128, 128, 1000);
  if (!m || !m2)
    return;
  /* Zeroed at creation, as gpt.h says. */
  float *p = gpt_params(m);
  int zero = 1;
  for (size_t i = 0; i < gpt_num_params(m); i++)
    zero &= p[i] == 0.0f;
  CHECK(zero);
  gpt_init(m, 42);
  double want_proj = 0.02 / sqrt(2.0 * 4);
  CHECK_NEAR(tensor_std(m, "wte.weight", 1000 * 128), 0.02, 0.0005);
  CHECK_NEAR(tensor_std(m, "wpe.weight", 0), 0.02, 0.0005);
  CHECK_NEAR(tensor_std(m, "h.0.attn.c_attn.weight", 0), 0.02, 0.0005);
  CHECK_NEAR(tensor_std(m, "h.3.mlp.c_fc.weight", 0), 0.02, 0.0005);
  CHECK_NEAR(tensor_std(m, "h.1.attn.c_proj.weight", 0), want_proj, 0.0003);
  CHECK_NEAR(tensor_std(m, "h.2.mlp.c_proj.weight", 0), want_proj, 0.0003);
  for (size_t i = 0; i < gpt_tensor_count(m); i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    const float *q = p + t->offset;
    if (t->ndim == 2)
      continue;
    float want =
        strstr(t->name, "ln_") && strstr(t->name, ".weight") ? 1.0f : 0.0f;
    int ok = 1;
    for (size_t j = 0; j < t->numel; j++)
      ok &= q[j] == want;
    if (!ok)
      fprintf(stderr, "tensor %s is not all %g\n", t->name, want);
    CHECK(ok);
  }
  const gpt_tensor *wte = gpt_tensor_find(m, "wte.weight");
  int padzero = 1;
  for (size_t j = 1000 * 128; j < wte->numel; j++)
    padzero &= p[j] == 0.0f;
  CHECK(padzero);
  /* The same seed gives the same bits, another seed other ones. */
  gpt_init(m2, 42);
  CHECK(memcmp(p, gpt_params(m2), gpt_num_params(m) * sizeof(float)) == 0);
  gpt_init(m2, 43);
  CHECK(memcmp(p, gpt_params(m2), gpt_num_params(m) * sizeof(float)) != 0);
  /* Re-init resets a model that has been changed. */
  perturb(m2, 0.1f, 5);
  gpt_init(m2, 42);
  CHECK(memcmp(p, gpt_params(m2), gpt_num_params(m) * sizeof(float)) == 0);
  /* A few fixed values: the stream must not change between versions or
   * machines (checkpoints and runs are reproduced by seed). */
  CHECK_NEAR(p[0], 0.0269027483, 1e-10);
  CHECK_NEAR(p[1], 0.0183219146, 1e-10);
  gpt_destroy(m);
  gpt_destroy(m2);
}

static void test_loss_at_init(void) {
  const int V = 500, B = 4, T = 32;
  gpt *m = make(2, 2, 64, 32, V);
  if (!m)
    return;
  gpt_init(m, 1);
  uint32_t in[4 * 32], tg[4 * 32];
  random_ids(in, B * T, V, 1);
  random_ids(tg, B * T, V, 2);
  float loss = -1;
  CHECK_INT(gpt_forward(m, in, tg, B, T, &loss, err, sizeof err), 0);
  CHECK_NEAR(loss, log((double)V), 0.1);
  /* Logits over the padding columns are zero (wte's rows are). */
  const gpt_config *c = gpt_get_config(m);
  const float *lg = gpt_logits(m);
  int ok = 1;
  for (int i = 0; i < B * T; i++)
    for (int j = V; j < c->padded_vocab; j++)
      ok &= lg[(size_t)i * c->padded_vocab + j] == 0.0f;
  CHECK(ok);
  /* Without targets: logits only, the same, and *loss untouched. */
  float keep = 123.0f;
  float l0 = lg[7];
  CHECK_INT(gpt_forward(m, in, NULL, B, T, &keep, err, sizeof err), 0);
  CHECK(keep == 123.0f);
  CHECK(gpt_logits(m)[7] == l0);
  /* Backward after a forward without targets does nothing. */
  gpt_zero_grad(m);
  gpt_backward(m, 1.0f);
  int allzero = 1;
  for (size_t i = 0; i < gpt_num_params(m); i++)
    allzero &= gpt_grads(m)[i] == 0.0f;
  CHECK(allzero);
  gpt_destroy(m);
}

/* Central differences in float on the loss, eps 1e-2, for the entry of
 * largest gradient of each of a handful of tensors. The loss is ~4 and
 * float-exact to ~1e-6, so the difference quotient is good to ~1e-4
 * absolute: the check is |fd - g| <= 2e-4 + 2% |g|. The exact comparison
 * of every gradient is the PyTorch test's. */
static void test_grad_fd(float dropout) {
  const int V = 67, B = 2, T = 8;
  gpt *m = make(2, 2, 16, 8, V);
  if (!m)
    return;
  gpt_init(m, 3);
  perturb(m, 0.3f, 9);
  /* With dropout: one key, so every forward below drops the same
   * elements and the loss is a smooth function of the weights. */
  gpt_set_dropout(m, dropout, 21);
  gpt_dropout_key(m, 7, 1);
  fprintf(stderr, "finite differences, dropout %g:\n", dropout);
  uint32_t in[16], tg[16];
  random_ids(in, B * T, V, 3);
  random_ids(tg, B * T, V, 4);
  float loss;
  CHECK_INT(gpt_forward(m, in, tg, B, T, &loss, err, sizeof err), 0);
  gpt_zero_grad(m);
  gpt_backward(m, 1.0f);
  const char *names[] = {"wte.weight",           "wpe.weight",
                         "h.0.ln_1.weight",      "h.0.attn.c_attn.weight",
                         "h.0.attn.c_attn.bias", "h.1.attn.c_proj.weight",
                         "h.1.ln_2.bias",        "h.1.mlp.c_fc.weight",
                         "h.0.mlp.c_proj.bias",  "ln_f.weight"};
  float *p = gpt_params(m), *g = gpt_grads(m);
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    const gpt_tensor *t = gpt_tensor_find(m, names[k]);
    size_t best = t->offset;
    for (size_t j = t->offset; j < t->offset + t->numel; j++)
      if (fabsf(g[j]) > fabsf(g[best]))
        best = j;
    const float eps = 1e-2f;
    float keep = p[best], lp, lm;
    p[best] = keep + eps;
    gpt_forward(m, in, tg, B, T, &lp, err, sizeof err);
    p[best] = keep - eps;
    gpt_forward(m, in, tg, B, T, &lm, err, sizeof err);
    p[best] = keep;
    double fd = ((double)lp - lm) / (2.0 * eps);
    double an = g[best];
    int ok = fabs(fd - an) <= 2e-4 + 0.02 * fabs(an);
    fprintf(stderr, "fd %-24s grad %+.6f fd %+.6f %s\n", names[k], an, fd,
            ok ? "ok" : "FAIL");
    CHECK(ok);
    CHECK(fabs(an) > 1e-3); /* a real gradient, not a trivial 0 == 0 */
  }
  gpt_destroy(m);
}

static void run_step(gpt *m, const uint32_t *in, const uint32_t *tg, int B,
                     int T, float *loss) {
  gpt_zero_grad(m);
  if (gpt_forward(m, in, tg, B, T, loss, err, sizeof err) != 0)
    fprintf(stderr, "forward: %s\n", err);
  gpt_backward(m, 1.0f);
}

/* Dropout 0 is no dropout, bit for bit; above 0 it changes the loss and
 * the gradients, the same again for the same seed and key, otherwise for
 * another key or seed; a forward it is not active for (evaluation) is
 * the exact one. */
static void test_dropout(void) {
  const int V = 300, B = 4, T = 32;
  gpt *m[5];
  for (int i = 0; i < 5; i++) {
    m[i] = make(2, 4, 64, 32, V);
    if (!m[i])
      return;
    gpt_init(m[i], 11);
  }
  uint32_t in[4 * 32], tg[4 * 32];
  random_ids(in, B * T, V, 5);
  random_ids(tg, B * T, V, 6);
  gpt_set_dropout(m[1], 0, 5);
  gpt_dropout_key(m[1], 1, 1);
  for (int i = 2; i < 5; i++) {
    gpt_set_dropout(m[i], 0.2f, i == 4 ? 6 : 5);
    gpt_dropout_key(m[i], 1, 1);
  }
  float loss[5];
  for (int i = 0; i < 5; i++)
    run_step(m[i], in, tg, B, T, &loss[i]);
  size_t bytes = gpt_num_params(m[0]) * sizeof(float);
  CHECK(memcmp(&loss[0], &loss[1], sizeof(float)) == 0);
  CHECK(memcmp(gpt_grads(m[0]), gpt_grads(m[1]), bytes) == 0);
  fprintf(stderr, "loss without dropout %.6f, with 0.2: %.6f (seed 6: %.6f)\n",
          loss[0], loss[2], loss[4]);
  CHECK(fabsf(loss[2] - loss[0]) > 1e-3f);
  CHECK(memcmp(&loss[2], &loss[3], sizeof(float)) == 0);
  CHECK(memcmp(gpt_grads(m[2]), gpt_grads(m[3]), bytes) == 0);
  CHECK(memcmp(gpt_grads(m[0]), gpt_grads(m[2]), bytes) != 0);
  CHECK(fabsf(loss[4] - loss[2]) > 1e-4f);
  float again, exact;
  gpt_dropout_key(m[3], 2, 1);
  run_step(m[3], in, tg, B, T, &again);
  CHECK(fabsf(again - loss[2]) > 1e-4f);
  gpt_dropout_key(m[3], 0, 0);
  CHECK_INT(gpt_forward(m[3], in, tg, B, T, &exact, err, sizeof err), 0);
  CHECK(memcmp(&exact, &loss[0], sizeof(float)) == 0);
  for (int i = 0; i < 5; i++)
    gpt_destroy(m[i]);
}

static void test_determinism(void) {
  const int V = 300, B = 4, T = 32;
  gpt *a = make(2, 4, 64, 32, V), *b = make(2, 4, 64, 32, V);
  if (!a || !b)
    return;
  gpt_init(a, 11);
  gpt_init(b, 11);
  uint32_t in[4 * 32], tg[4 * 32];
  random_ids(in, B * T, V, 5);
  random_ids(tg, B * T, V, 6);
  float la, lb, lc;
  run_step(a, in, tg, B, T, &la);
  run_step(b, in, tg, B, T, &lb);
  size_t bytes = gpt_num_params(a) * sizeof(float);
  CHECK(memcmp(&la, &lb, sizeof la) == 0);
  CHECK(memcmp(gpt_grads(a), gpt_grads(b), bytes) == 0);
  /* The same model again, after a bigger batch has regrown its
   * activations and a smaller one has used part of them. */
  uint32_t big_in[8 * 32], big_tg[8 * 32];
  random_ids(big_in, 8 * T, V, 7);
  random_ids(big_tg, 8 * T, V, 8);
  run_step(b, big_in, big_tg, 8, T, &lc);
  run_step(b, in, tg, 2, 16, &lc);
  run_step(b, in, tg, B, T, &lc);
  CHECK(memcmp(&la, &lc, sizeof la) == 0);
  CHECK(memcmp(gpt_grads(a), gpt_grads(b), bytes) == 0);
  gpt_destroy(a);
  gpt_destroy(b);
}

/* Two half batches with scale 0.5 give the gradient of the whole batch
 * (its mean loss): within 1e-6 of each tensor's largest value. */
static void test_accumulation(void) {
  const int V = 200, B = 4, T = 16;
  gpt *m = make(2, 2, 32, 16, V);
  if (!m)
    return;
  gpt_init(m, 21);
  perturb(m, 0.1f, 22);
  uint32_t in[4 * 16], tg[4 * 16];
  random_ids(in, B * T, V, 23);
  random_ids(tg, B * T, V, 24);
  float full, h1, h2;
  run_step(m, in, tg, B, T, &full);
  size_t n = gpt_num_params(m);
  float *want = malloc(n * sizeof(float));
  if (!want)
    return;
  memcpy(want, gpt_grads(m), n * sizeof(float));
  gpt_zero_grad(m);
  CHECK_INT(gpt_forward(m, in, tg, B / 2, T, &h1, err, sizeof err), 0);
  gpt_backward(m, 0.5f);
  CHECK_INT(gpt_forward(m, in + B / 2 * T, tg + B / 2 * T, B / 2, T, &h2, err,
                        sizeof err),
            0);
  gpt_backward(m, 0.5f);
  CHECK_NEAR(0.5 * (h1 + h2), full, 1e-6 * full);
  /* A second backward of the same forward adds nothing. */
  float g0 = gpt_grads(m)[5];
  gpt_backward(m, 0.5f);
  CHECK(gpt_grads(m)[5] == g0);
  const float *g = gpt_grads(m);
  double worst = 0;
  for (size_t i = 0; i < gpt_tensor_count(m); i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    double mx = 0, d = 0;
    for (size_t j = t->offset; j < t->offset + t->numel; j++) {
      mx = fmax(mx, fabs(want[j]));
      d = fmax(d, fabs(want[j] - g[j]));
    }
    if (mx > 0)
      worst = fmax(worst, d / mx);
  }
  fprintf(stderr, "accumulation: worst relative difference %.3g\n", worst);
  CHECK(worst < 1e-6);
  free(want);
  gpt_destroy(m);
}

static void test_refusals(void) {
  const int V = 67;
  gpt *m = make(1, 1, 8, 8, V);
  if (!m)
    return;
  gpt_init(m, 1);
  uint32_t in[8] = {0, 1, 2, 3, 4, 5, 6, 66}, tg[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  float loss = 7.0f;
  CHECK_INT(gpt_forward(m, in, tg, 1, 8, &loss, err, sizeof err), 0);
  in[3] = 67; /* in the padding, not a token */
  err[0] = 0;
  CHECK_INT(gpt_forward(m, in, tg, 1, 8, &loss, err, sizeof err), -1);
  CHECK(strstr(err, "inputs[3] is 67") && strstr(err, "vocab_size is 67"));
  in[3] = 3;
  tg[7] = 0xffffffffu;
  CHECK_INT(gpt_forward(m, in, tg, 1, 8, &loss, err, sizeof err), -1);
  CHECK(strstr(err, "targets[7] is 4294967295"));
  tg[7] = 8;
  CHECK_INT(gpt_forward(m, in, tg, 1, 9, &loss, err, sizeof err), -1);
  CHECK(strstr(err, "block_size 8"));
  CHECK_INT(gpt_forward(m, in, tg, 0, 8, &loss, err, sizeof err), -1);
  /* A refused forward leaves nothing for backward to use. */
  gpt_zero_grad(m);
  gpt_backward(m, 1.0f);
  CHECK(gpt_grads(m)[0] == 0.0f);
  CHECK(gpt_logits(m) == NULL);
  gpt_destroy(m);
}

/* ---- Parameter groups and the parameter hook (ZeRO-3's seam) ---- */

#define HK_MAX 64
typedef struct hook_state {
  gpt *m;
  const float *src; /* the full parameters, where NEED copies from */
  float *pbuf[HK_MAX], *gbuf[HK_MAX];
  int in_bwd, fail_at, fail_bwd; /* fail NEED of group fail_at (-1 never) */
  int log[4 * HK_MAX][3], n; /* event, group, next */
} hook_state;

/* As ZeRO-3 does it: a group's parameters copied into a buffer of their
 * own on NEED, freed on DONE (the engine's pointer to them NULL, so a use
 * after DONE crashes), and its gradient made on NEED in backward. */
static int test_hook(void *arg, int event, int g, int next) {
  hook_state *h = arg;
  if (h->n < 4 * HK_MAX) {
    h->log[h->n][0] = event;
    h->log[h->n][1] = g;
    h->log[h->n][2] = next;
    h->n++;
  }
  size_t off, n;
  gpt_group_range(h->m, (size_t)g, &off, &n);
  if (event == GPT_PARAMS_DONE) {
    if (next != g) {
      free(h->pbuf[g]);
      h->pbuf[g] = NULL;
      gpt_set_group_params(h->m, (size_t)g, NULL);
    }
    return 0;
  }
  if (g == h->fail_at && h->in_bwd == h->fail_bwd)
    return -1;
  if (!h->pbuf[g]) {
    h->pbuf[g] = malloc(n * sizeof(float));
    memcpy(h->pbuf[g], h->src + off, n * sizeof(float));
  }
  gpt_set_group_params(h->m, (size_t)g, h->pbuf[g]);
  if (h->in_bwd && !h->gbuf[g]) {
    h->gbuf[g] = calloc(n, sizeof(float));
    gpt_set_group_grads(h->m, (size_t)g, h->gbuf[g]);
  }
  return 0;
}

static void test_param_groups(void) {
  int L = 3, B = 2, T = 8, V = 50;
  gpt *ref = make(L, 2, 16, T, V), *m = make(L, 2, 16, T, V);
  if (!ref || !m)
    return;
  gpt_init(ref, 7);
  gpt_init(m, 7);
  size_t P = gpt_num_params(m), ng = gpt_group_count(m), off, n, at = 0;
  CHECK(ng == (size_t)L + 2);
  for (size_t g = 0; g < ng; g++) {
    gpt_group_range(m, g, &off, &n);
    CHECK(off == at && n > 0);
    at += n;
  }
  CHECK(at == P);
  gpt_group_range(m, 1, &off, &n);
  CHECK(off == gpt_tensor_find(m, "h.0.ln_1.weight")->offset);
  gpt_group_range(m, ng - 1, &off, &n);
  CHECK(off == gpt_tensor_find(m, "ln_f.weight")->offset && n == 32);

  uint32_t in[16], tg[16];
  random_ids(in, B * T, V, 1);
  random_ids(tg, B * T, V, 2);
  float lr = 0, lm = 0;
  gpt_zero_grad(ref);
  CHECK(gpt_forward(ref, in, tg, B, T, &lr, err, sizeof err) == 0);
  gpt_backward(ref, 1.0f);

  /* The engine reads and writes only where the hook puts each group:
   * its full arrays are gone. */
  hook_state h = {.m = m, .src = gpt_params(ref), .fail_at = -1};
  gpt_release(m, GPT_BUF_PARAMS | GPT_BUF_GRADS);
  gpt_set_param_hook(m, test_hook, &h);
  CHECK(gpt_forward(m, in, tg, B, T, &lm, err, sizeof err) == 0);
  CHECK(lm == lr);
  h.in_bwd = 1;
  gpt_backward(m, 1.0f);
  int same = 1;
  for (size_t g = 0; g < ng; g++) {
    gpt_group_range(m, g, &off, &n);
    same &= h.gbuf[g] &&
            memcmp(h.gbuf[g], gpt_grads(ref) + off, n * sizeof(float)) == 0;
    CHECK(h.pbuf[g] == NULL); /* every group given back */
  }
  CHECK(same);
  /* The order gpt.h documents: forward 0, 1 .. L, L+1, 0 (next 0: the
   * backward's first); backward 0, L+1, L .. 1; each NEED then DONE. */
  int want[2 * (2 * HK_MAX)][2], k = 0;
  int order[] = {0, 1, 2, 3, 4, 0, 0, 4, 3, 2, 1};
  int next[] = {1, 2, 3, 4, 0, 0, 4, 3, 2, 1, -1};
  for (int i = 0; i < 11; i++) {
    want[k][0] = order[i], want[k++][1] = next[i];
    want[k][0] = order[i], want[k++][1] = next[i];
  }
  int ok = h.n == k;
  for (int i = 0; ok && i < k; i++)
    ok = h.log[i][0] == (i % 2 ? GPT_PARAMS_DONE : GPT_PARAMS_NEED) &&
         h.log[i][1] == want[i][0] && h.log[i][2] == want[i][1];
  CHECK(ok);
  for (size_t g = 0; g < ng; g++) {
    free(h.gbuf[g]);
    h.gbuf[g] = NULL;
  }

  /* A hook that fails stops the pass: forward says so, and backward
   * returns at once (the groups after the failure get no gradient). */
  h.n = 0;
  h.in_bwd = 0;
  h.fail_at = 2;
  h.fail_bwd = 0;
  CHECK(gpt_forward(m, in, tg, B, T, &lm, err, sizeof err) == -1);
  CHECK(strstr(err, "a parameter hook failed"));
  for (size_t g = 0; g < ng; g++) { /* what the failed pass left */
    free(h.pbuf[g]);
    h.pbuf[g] = NULL;
  }
  h.fail_bwd = 1;
  CHECK(gpt_forward(m, in, tg, B, T, &lm, err, sizeof err) == 0);
  h.in_bwd = 1;
  gpt_backward(m, 1.0f); /* fails at layer 1's NEED (group 2) */
  CHECK(h.gbuf[3] && !h.gbuf[2] && !h.gbuf[1]);
  for (size_t g = 0; g < ng; g++) {
    free(h.pbuf[g]);
    free(h.gbuf[g]);
  }
  gpt_destroy(ref);
  gpt_destroy(m);
}

/* decay_tensors: all_2d (gpt_decay_all_2d): every 2-D tensor decays, the
 * embeddings too; 1-D ones still do not. Seen through an AdamW step with
 * zero gradients, where only the decay moves a weight: wte shrinks by
 * exactly lr x wd with all_2d and stays put by default. */
static void decay_step(gpt *m, float *wte0, float *bias0) {
  optim_config oc = {OPTIM_ADAMW, 0.9f, 0.95f, 1e-8f, 0.5f};
  size_t nt = gpt_tensor_count(m);
  optim_group *g = calloc(nt, sizeof *g);
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    g[i] = (optim_group){t->offset, t->numel, t->decay};
  }
  optim *o = NULL;
  CHECK_INT(optim_create(&oc, gpt_num_params(m), g, nt, &o, err, sizeof err),
            0);
  free(g);
  if (!o)
    return;
  const gpt_tensor *wte = gpt_tensor_find(m, "wte.weight");
  const gpt_tensor *bias = gpt_tensor_find(m, "h.0.attn.c_attn.bias");
  *wte0 = gpt_params(m)[wte->offset + 5];
  *bias0 = gpt_params(m)[bias->offset + 1];
  gpt_zero_grad(m);
  optim_step(o, gpt_params(m), gpt_grads(m), 0.1f);
  optim_destroy(o);
}

static void test_decay_all_2d(void) {
  gpt *m = make(2, 2, 16, 8, 50), *d = make(2, 2, 16, 8, 50);
  if (!m || !d)
    return;
  gpt_init(m, 3);
  gpt_init(d, 3);
  gpt_params(m)[gpt_tensor_find(m, "h.0.attn.c_attn.bias")->offset + 1] = 0.25f;
  gpt_params(d)[gpt_tensor_find(d, "h.0.attn.c_attn.bias")->offset + 1] = 0.25f;
  gpt_decay_all_2d(d);
  for (size_t i = 0; i < gpt_tensor_count(d); i++) {
    const gpt_tensor *t = gpt_tensor_at(d, i), *u = gpt_tensor_at(m, i);
    CHECK_INT(t->decay, t->ndim == 2);
    /* the default: 2-D, and not an embedding */
    CHECK_INT(u->decay, u->ndim == 2 && strcmp(u->name, "wte.weight") != 0 &&
                            strcmp(u->name, "wpe.weight") != 0);
  }
  float w_m, b_m, w_d, b_d;
  decay_step(m, &w_m, &b_m);
  decay_step(d, &w_d, &b_d);
  const gpt_tensor *wte = gpt_tensor_find(m, "wte.weight");
  const gpt_tensor *bias = gpt_tensor_find(m, "h.0.attn.c_attn.bias");
  CHECK(w_m != 0 && w_d == w_m);
  CHECK(gpt_params(m)[wte->offset + 5] == w_m); /* not decayed */
  CHECK_NEAR(gpt_params(d)[wte->offset + 5], w_d * (1 - 0.1 * 0.5), 1e-7);
  CHECK(gpt_params(m)[bias->offset + 1] == 0.25f); /* 1-D: never */
  CHECK(gpt_params(d)[bias->offset + 1] == 0.25f);
  gpt_destroy(m);
  gpt_destroy(d);
}

/* A Llama model (testllama.h's knobs). */
static gpt *make_llama(int L, int H, int KV, int C, int FF, int T, int V,
                       int untied) {
  gpt_config cfg = testllama_config(L, H, KV, C, FF, T, V, untied);
  gpt *m = NULL;
  if (gpt_config_finish(&cfg, err, sizeof err) != 0 ||
      gpt_create(&cfg, &m, err, sizeof err) != 0) {
    fprintf(stderr, "make_llama: %s\n", err);
    return NULL;
  }
  return m;
}

/* Activation recomputation (gpt_set_recompute): gelu and block give the
 * very losses, gradients and, after plain SGD steps, weights of none,
 * bit for bit (with BF16 autocast too), over steps with other batches (and
 * dropout masks), with three layers so that block recomputes a layer between
 * two others. llama: a Llama model (GQA, head size 10; its head untied
 * for llama 2) in place of GPT-2's, without dropout (it has none). */
static void test_recompute(float dropout, gpt_autocast ac, int llama) {
  const int V = 200, B = 3, T = 16, STEPS = 4;
  gpt *m[3];
  for (int r = 0; r < 3; r++) {
    m[r] =
        llama ? make_llama(3, 4, llama == 2 ? 1 : 2, 40, 100, 16, V, llama == 2)
              : make(3, 2, 32, 16, V);
    if (!m[r])
      return;
    gpt_init(m[r], 11);
    perturb(m[r], 0.05f, 3);
    gpt_set_dropout(m[r], dropout, 9);
    CHECK_INT(gpt_set_recompute(m[r], (gpt_recompute)r, err, sizeof err), 0);
    CHECK_INT(gpt_set_autocast(m[r], ac, err, sizeof err), 0);
  }
  size_t n = gpt_num_params(m[0]);
  uint32_t in[3 * 16], tg[3 * 16];
  for (int step = 0; step < STEPS; step++) {
    random_ids(in, B * T, V, 100 + (uint64_t)step);
    random_ids(tg, B * T, V, 200 + (uint64_t)step);
    float loss[3];
    for (int r = 0; r < 3; r++) {
      gpt_dropout_key(m[r], (uint64_t)step, 1);
      run_step(m[r], in, tg, B, T, &loss[r]);
      float *p = gpt_params(m[r]);
      const float *g = gpt_grads(m[r]);
      for (size_t i = 0; i < n; i++)
        p[i] -= 0.05f * g[i];
    }
    for (int r = 1; r < 3; r++) {
      CHECK(memcmp(&loss[0], &loss[r], sizeof(float)) == 0);
      CHECK(memcmp(gpt_grads(m[0]), gpt_grads(m[r]), n * sizeof(float)) == 0);
      CHECK(memcmp(gpt_params(m[0]), gpt_params(m[r]), n * sizeof(float)) == 0);
    }
    if (step == STEPS - 1)
      fprintf(stderr,
              "recompute, %s, dropout %g, autocast %d: step %d loss %.6f "
              "(none; the others checked bitwise)\n",
              llama == 2 ? "llama (1 kv head, untied)"
              : llama    ? "llama (2 kv heads, tied)"
                         : "gpt2",
              dropout, (int)ac, step + 1, loss[0]);
  }
  /* A real difference would show: the gradients are not all zero. */
  double gsum = 0;
  for (size_t i = 0; i < n; i++)
    gsum += fabsf(gpt_grads(m[2])[i]);
  CHECK(gsum > 1e-3);
  for (int r = 0; r < 3; r++)
    gpt_destroy(m[r]);
}

/* Refused: a value that is not a gpt_recompute; changing it forgets the
 * last forward (no backward). */
static void test_recompute_refusals(void) {
  gpt *m = make(2, 2, 16, 8, 50);
  if (!m)
    return;
  CHECK_INT(gpt_set_recompute(m, (gpt_recompute)3, err, sizeof err), -1);
  CHECK(strstr(err, "not one of none (0), gelu (1), block (2)") != NULL);
  uint32_t ids[2 * 8] = {1, 2, 3};
  float loss;
  gpt_zero_grad(m);
  CHECK_INT(gpt_forward(m, ids, ids, 2, 8, &loss, err, sizeof err), 0);
  CHECK_INT(gpt_set_recompute(m, GPT_RECOMPUTE_BLOCK, err, sizeof err), 0);
  CHECK(gpt_logits(m) == NULL);
  gpt_backward(m, 1.0f);
  double gsum = 0;
  for (size_t i = 0; i < gpt_num_params(m); i++)
    gsum += fabsf(gpt_grads(m)[i]);
  CHECK(gsum == 0);
  gpt_destroy(m);
}

/* BF16 autocast: the loss and gradients move off fp32's by about BF16's
 * rounding (2^-9 relative on each operand), not more and not nothing; a
 * second model gives the same bits; a bad value is refused. */
static void test_autocast(void) {
  const int V = 200, B = 3, T = 16;
  gpt *m[3];
  for (int i = 0; i < 3; i++) {
    m[i] = make(2, 2, 32, 16, V);
    if (!m[i])
      return;
    gpt_init(m[i], 11);
    perturb(m[i], 0.05f, 3);
  }
  CHECK_INT(gpt_set_autocast(m[1], GPT_AUTOCAST_BF16, err, sizeof err), 0);
  CHECK_INT(gpt_set_autocast(m[2], GPT_AUTOCAST_BF16, err, sizeof err), 0);
  uint32_t in[3 * 16], tg[3 * 16];
  random_ids(in, B * T, V, 5);
  random_ids(tg, B * T, V, 6);
  float loss[3];
  for (int i = 0; i < 3; i++)
    run_step(m[i], in, tg, B, T, &loss[i]);
  size_t n = gpt_num_params(m[0]);
  double d2 = 0, g2 = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)gpt_grads(m[1])[i] - gpt_grads(m[0])[i];
    d2 += d * d;
    g2 += (double)gpt_grads(m[0])[i] * gpt_grads(m[0])[i];
  }
  double rel = sqrt(d2 / g2), lrel = fabs(loss[1] - loss[0]) / loss[0];
  fprintf(stderr,
          "autocast bf16: loss %.6f (fp32 %.6f, relative %.2g), gradients "
          "relative %.2g\n",
          loss[1], loss[0], lrel, rel);
  CHECK(loss[1] != loss[0] && lrel < 1e-2);
  CHECK(rel > 1e-4 && rel < 5e-2);
  CHECK(memcmp(&loss[1], &loss[2], sizeof(float)) == 0);
  CHECK(memcmp(gpt_grads(m[1]), gpt_grads(m[2]), n * sizeof(float)) == 0);
  CHECK_INT(gpt_set_autocast(m[0], (gpt_autocast)2, err, sizeof err), -1);
  CHECK(strstr(err, "autocast: 2 is not one of none (0), bf16 (1)") != NULL);
  for (int i = 0; i < 3; i++)
    gpt_destroy(m[i]);
}

/* Pipeline stages (gpt_set_stage): a 4-layer model cut into layers [0,2)
 * and [2,4), the first's output the second's input and the second's input
 * gradient the first's output gradient, gives the whole model's loss and
 * the gradients of every tensor but wte to the bit (wte's two parts, the
 * lookup's on the first stage and the tied head's on the last, summed in
 * another order: within 1e-6 of the largest), with recomputation rc.
 * llama: a Llama with GQA in place of GPT-2 (its head untied for llama
 * 2: the embedding's gradient is then the first stage's alone). */
static void test_stages(gpt_recompute rc, int llama) {
  enum { L = 4, B = 2, T = 16, V = 100 };
  gpt *m[3];
  for (int i = 0; i < 3; i++) {
    m[i] = llama ? make_llama(L, 4, 2, 40, 100, T, V, llama == 2)
                 : make(L, 2, 32, T, V);
    gpt_init(m[i], 7);
    perturb(m[i], 0.05f, 11);
    CHECK_INT(gpt_set_recompute(m[i], rc, err, sizeof err), 0);
  }
  uint32_t in[B * T], tg[B * T];
  random_ids(in, B * T, V, 1);
  random_ids(tg, B * T, V, 2);
  float full = 0, staged = 0;
  CHECK_INT(gpt_forward(m[0], in, tg, B, T, &full, err, sizeof err), 0);
  gpt_backward(m[0], 0.5f);
  CHECK_INT(gpt_set_stage(m[1], 0, 2, err, sizeof err), 0);
  CHECK_INT(gpt_set_stage(m[2], 2, L, err, sizeof err), 0);
  CHECK_INT(
      gpt_forward_stage(m[1], in, NULL, NULL, B, T, NULL, err, sizeof err), 0);
  CHECK_INT(gpt_forward_stage(m[2], NULL, gpt_stage_output(m[1]), tg, B, T,
                              &staged, err, sizeof err),
            0);
  CHECK_INT(gpt_backward_stage(m[2], NULL, 0.5f, err, sizeof err), 0);
  CHECK_INT(gpt_backward_stage(m[1], gpt_stage_input_grad(m[2]), 0.5f, err,
                               sizeof err),
            0);
  CHECK(memcmp(&full, &staged, sizeof full) == 0);
  const gpt_tensor *wte = gpt_tensor_at(m[0], 0); /* wte, embed_tokens */
  size_t n = gpt_num_params(m[0]), diff = 0;
  double big = 0, worst = 0;
  for (size_t i = 0; i < n; i++) {
    float g0 = gpt_grads(m[0])[i], g1 = gpt_grads(m[1])[i];
    float g2 = gpt_grads(m[2])[i];
    big = fmax(big, fabs(g0));
    if (i >= wte->offset && i < wte->offset + wte->numel) {
      worst = fmax(worst, fabs((double)g0 - ((double)g1 + g2)));
      continue;
    }
    /* Every other gradient is one stage's alone. */
    float g = g1 != 0 ? g1 : g2;
    diff += memcmp(&g, &g0, sizeof g) != 0 || (g1 != 0 && g2 != 0);
  }
  fprintf(
      stderr,
      "stages, llama %d, recompute %d: loss %.6f; %zu gradients off the whole "
      "model's bits; wte within %.2g of the largest gradient %.3g\n",
      llama, (int)rc, staged, diff, worst / big, big);
  CHECK(diff == 0);
  CHECK(worst <= 1e-6 * big);
  for (int i = 0; i < 3; i++)
    gpt_destroy(m[i]);
}

/* The stage calls' refusals: a range out of bounds, the whole-model calls
 * on a stage, the ids or the stream where the stage takes the other, a
 * backward with nothing to go back through. */
static void test_stage_refusals(void) {
  gpt *m = make(4, 2, 32, 16, 100);
  gpt_init(m, 1);
  uint32_t ids[16] = {0};
  float x[16 * 32] = {0}, loss = 0;
  CHECK_INT(gpt_set_stage(m, 2, 2, err, sizeof err), -1);
  CHECK(strstr(err, "stage layers [2,2) is not a non-empty range of the "
                    "model's 4 layers") != NULL);
  CHECK_INT(gpt_set_stage(m, 0, 5, err, sizeof err), -1);
  CHECK_INT(gpt_set_stage(m, 1, 3, err, sizeof err), 0);
  CHECK_INT(gpt_forward(m, ids, ids, 1, 16, &loss, err, sizeof err), -1);
  CHECK(strstr(err, "runs layers [1,3) of 4, a pipeline stage") != NULL);
  CHECK_INT(gpt_backward_stage(m, x, 1.0f, err, sizeof err), -1);
  CHECK(strstr(err, "no trainer's forward to go back through") != NULL);
  CHECK_INT(gpt_forward_stage(m, ids, NULL, NULL, 1, 16, NULL, err, sizeof err),
            -1);
  CHECK(strstr(err, "stage [1,3) of 4 layers takes a stream (not the ids) "
                    "and no targets") != NULL);
  CHECK_INT(gpt_forward_stage(m, NULL, x, NULL, 1, 16, NULL, err, sizeof err),
            0);
  CHECK_INT(gpt_backward_stage(m, NULL, 1.0f, err, sizeof err), -1);
  CHECK(strstr(err, "no output gradient given") != NULL);
  gpt_destroy(m);
}

int main(void) {
  test_presets();
  test_llama_config();
  test_param_count();
  test_init();
  test_loss_at_init();
  test_grad_fd(0);
  test_grad_fd(0.3f);
  test_dropout();
  test_determinism();
  test_accumulation();
  test_refusals();
  test_param_groups();
  test_decay_all_2d();
  test_recompute(0, GPT_AUTOCAST_NONE, 0);
  test_recompute(0.2f, GPT_AUTOCAST_NONE, 0);
  test_recompute(0.2f, GPT_AUTOCAST_BF16, 0);
  test_recompute(0, GPT_AUTOCAST_NONE, 1);
  test_recompute(0, GPT_AUTOCAST_NONE, 2);
  test_recompute(0, GPT_AUTOCAST_BF16, 1);
  test_recompute_refusals();
  test_autocast();
  for (int llama = 0; llama <= 2; llama++) {
    test_stages(GPT_RECOMPUTE_NONE, llama);
    test_stages(GPT_RECOMPUTE_BLOCK, llama);
  }
  test_stage_refusals();
  TEST_DONE();
}
