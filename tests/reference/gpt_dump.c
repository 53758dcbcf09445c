/*
 * gpt_dump: the CPU GPT-2 engine on the command line, for the PyTorch
 * reference test (tests/integration/test_gpt_torch.sh) and benchmarks.
 *
 *   gpt_dump dump DIR [llama KV HS UNTIED]
 *     Tiny model (L2 H2 C32 T16 V67, padded to 128), B3 T16, fixed seed,
 *     parameters perturbed off GPT-2's init so that biases and LayerNorms
 *     matter. Writes into DIR: layout.txt (name offset numel d0 d1 per
 *     tensor, then the config), params.bin, inputs.bin, targets.bin
 *     (uint32 (B,T)), logits.bin ((B,T,Vp) float), loss.txt, grads.bin
 *     (the gradient of the loss after one backward, scale 1).
 *     With "llama": the Llama shape of llama_shape.h instead (KV
 *     key/value heads of HS channels, the head untied if UNTIED is 1),
 *     and llama.txt for the reference.
 *
 *   gpt_dump bench L H C T V B ITERS
 *     Times ITERS forward+backward passes (after one warm-up) and prints
 *     tokens/s. Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS.
 *   gpt_dump bench-preset PRESET V B ITERS
 *     The same for a preset (gpt-tiny, llama-tiny, ...) at vocabulary V
 *     and its block_size.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama_shape.h"
#include "model/gpt.h"

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int write_file(const char *dir, const char *name, const void *p,
                      size_t bytes) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "gpt_dump: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

static gpt *make_cfg(gpt_config cfg) {
  char err[256];
  gpt *m = NULL;
  if (gpt_config_finish(&cfg, err, sizeof err) != 0 ||
      gpt_create(&cfg, &m, err, sizeof err) != 0) {
    fprintf(stderr, "gpt_dump: %s\n", err);
    return NULL;
  }
  return m;
}

static gpt *make(int L, int H, int C, int T, int V) {
  return make_cfg((gpt_config){.n_layer = L,
                               .n_head = H,
                               .n_embd = C,
                               .block_size = T,
                               .vocab_size = V});
}

/* The model of `dump`: GPT-2, or with llama (argv: KV HS UNTIED) the
 * Llama shape of llama_shape.h, its knobs written to DIR/llama.txt. */
static gpt *dump_model(const char *dir, char **llama) {
  if (!llama)
    return make(2, 2, 32, 16, 67);
  gpt *m = make_cfg(llama_shape(llama));
  if (m && llama_shape_write(dir, gpt_get_config(m)) != 0) {
    gpt_destroy(m);
    return NULL;
  }
  return m;
}

static int dump(const char *dir, char **llama) {
  const int B = 3, T = 16;
  gpt *m = dump_model(dir, llama);
  if (!m)
    return 1;
  gpt_init(m, 1234);
  const gpt_config *cfg = gpt_get_config(m);
  const int L = cfg->n_layer, H = cfg->n_head, C = cfg->n_embd;
  const int Tm = cfg->block_size, V = cfg->vocab_size;
  /* Perturb every parameter (but the padding rows of wte and lm_head) by
   * up to +-0.2. */
  uint64_t s = 99;
  float *p = gpt_params(m);
  for (size_t k = 0; k < gpt_tensor_count(m); k++) {
    const gpt_tensor *t = gpt_tensor_at(m, k);
    size_t n = gpt_tensor_vocab_rows(t) ? (size_t)V * C : t->numel;
    for (size_t i = t->offset; i < t->offset + n; i++)
      p[i] += (float)((double)(rng_next(&s) >> 11) / 9007199254740992.0 - 0.5) *
              0.4f;
  }
  uint32_t in[3 * 16], tg[3 * 16];
  for (int i = 0; i < B * T; i++) {
    in[i] = (uint32_t)(rng_next(&s) % V);
    tg[i] = (uint32_t)(rng_next(&s) % V);
  }
  tg[5] = V - 1; /* the last real id is a target */
  char err[256];
  float loss = 0;
  if (gpt_forward(m, in, tg, B, T, &loss, err, sizeof err) != 0) {
    fprintf(stderr, "gpt_dump: %s\n", err);
    return 1;
  }
  gpt_zero_grad(m);
  gpt_backward(m, 1.0f);
  char path[4096];
  snprintf(path, sizeof path, "%s/layout.txt", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "gpt_dump: cannot write %s\n", path);
    return 1;
  }
  fprintf(f, "config %d %d %d %d %d %d %d %d\n", L, H, C, Tm, V,
          cfg->padded_vocab, B, T);
  for (size_t i = 0; i < gpt_tensor_count(m); i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    fprintf(f, "%s %zu %zu %d %d\n", t->name, t->offset, t->numel, t->shape[0],
            t->ndim == 2 ? t->shape[1] : 0);
  }
  fclose(f);
  snprintf(path, sizeof path, "%s/loss.txt", dir);
  f = fopen(path, "w");
  if (!f)
    return 1;
  fprintf(f, "%.9g\n", loss);
  fclose(f);
  size_t np = gpt_num_params(m) * sizeof(float);
  if (write_file(dir, "params.bin", p, np) ||
      write_file(dir, "grads.bin", gpt_grads(m), np) ||
      write_file(dir, "inputs.bin", in, sizeof in) ||
      write_file(dir, "targets.bin", tg, sizeof tg) ||
      write_file(dir, "logits.bin", gpt_logits(m),
                 (size_t)B * T * cfg->padded_vocab * sizeof(float)))
    return 1;
  gpt_destroy(m);
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Times m (consumed) at B x T; the model's name for the line. */
static int bench_model(gpt *m, const char *name, int B, int T, int iters) {
  if (!m)
    return 1;
  const gpt_config *c = gpt_get_config(m);
  int V = c->vocab_size;
  gpt_init(m, 1);
  uint32_t *in = malloc((size_t)B * T * sizeof *in);
  uint32_t *tg = malloc((size_t)B * T * sizeof *tg);
  if (!in || !tg)
    return 1;
  uint64_t s = 7;
  for (int i = 0; i < B * T; i++) {
    in[i] = (uint32_t)(rng_next(&s) % V);
    tg[i] = (uint32_t)(rng_next(&s) % V);
  }
  char err[256];
  float loss = 0;
  double tf = 0, tb = 0;
  for (int it = 0; it <= iters; it++) {
    double t0 = now();
    if (gpt_forward(m, in, tg, B, T, &loss, err, sizeof err) != 0) {
      fprintf(stderr, "gpt_dump: %s\n", err);
      return 1;
    }
    double t1 = now();
    gpt_zero_grad(m);
    gpt_backward(m, 1.0f);
    double t2 = now();
    if (it > 0) { /* the first is a warm-up */
      tf += t1 - t0;
      tb += t2 - t1;
    }
  }
  double tok = (double)B * T * iters;
  printf("%s L%d H%d C%d T%d V%d B%d (%zu params): %.0f tokens/s "
         "forward+backward (forward %.1f ms, backward %.1f ms per step), loss "
         "%.4f\n",
         name, c->n_layer, c->n_head, c->n_embd, T, V, B, gpt_num_params(m),
         tok / (tf + tb), 1e3 * tf / iters, 1e3 * tb / iters, loss);
  free(in);
  free(tg);
  gpt_destroy(m);
  return 0;
}

static int bench(int L, int H, int C, int T, int V, int B, int iters) {
  return bench_model(make(L, H, C, T, V), "gpt2", B, T, iters);
}

/* A preset (gpt-tiny, llama-tiny, ...) at vocabulary V. */
static int bench_preset(const char *name, int V, int B, int iters) {
  char err[512];
  gpt_config c = {.vocab_size = V};
  if (gpt_config_preset(name, &c, err, sizeof err) != 0) {
    fprintf(stderr, "gpt_dump: %s\n", err);
    return 1;
  }
  return bench_model(make_cfg(c), name, B, c.block_size, iters);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "dump") == 0)
    return dump(argv[2], NULL);
  if (argc == 7 && strcmp(argv[1], "dump") == 0 &&
      strcmp(argv[3], "llama") == 0)
    return dump(argv[2], argv + 4);
  if (argc == 9 && strcmp(argv[1], "bench") == 0)
    return bench(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                 atoi(argv[6]), atoi(argv[7]), atoi(argv[8]));
  if (argc == 6 && strcmp(argv[1], "bench-preset") == 0)
    return bench_preset(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  fprintf(stderr, "usage: gpt_dump dump DIR [llama KV HS UNTIED]\n"
                  "       gpt_dump bench L H C T V B ITERS\n"
                  "       gpt_dump bench-preset PRESET V B ITERS\n");
  return 2;
}
