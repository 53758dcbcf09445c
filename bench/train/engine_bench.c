/*
 * engine_bench: tokens per second of one training step of dagrun's CPU
 * engine (forward + backward + grad clipping + AdamW), on random tokens.
 *
 *   engine_bench L H C T V B STEPS THREADS [KV I UNTIED]
 *
 * With KV I UNTIED the model is a Llama (gpt.h's family: KV key/value
 * heads, SwiGLU width I, UNTIED 1 for an lm_head of its own, 0 for the
 * head tied to the embedding; rope_theta and norm_eps at their defaults),
 * else a GPT-2.
 * Prints one JSON line: {"tokens_per_s": ..., "params": ...,
 * "gflops_per_s": ..., ...}.
 * bench/train/run.py runs it next to the same model in PyTorch.
 */
#include "model/gpt.h"
#include "optim/optim.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 9 && argc != 12) {
    fprintf(stderr,
            "usage: engine_bench L H C T V B STEPS THREADS [KV I UNTIED]\n");
    return 2;
  }
  gpt_config c = {.n_layer = atoi(argv[1]), .n_head = atoi(argv[2]),
                  .n_embd = atoi(argv[3]), .block_size = atoi(argv[4]),
                  .vocab_size = atoi(argv[5])};
  if (argc == 12) {
    c.family = GPT_FAMILY_LLAMA;
    c.n_kv_head = atoi(argv[9]);
    c.intermediate = atoi(argv[10]);
    c.untied_head = atoi(argv[11]);
  }
  int B = atoi(argv[6]), steps = atoi(argv[7]), threads = atoi(argv[8]);
  int T = c.block_size;
  char err[512];
  gpt *m = NULL;
  optim *o = NULL;
  if (gpt_config_finish(&c, err, sizeof err) != 0 ||
      gpt_create(&c, &m, err, sizeof err) != 0) {
    fprintf(stderr, "engine_bench: %s\n", err);
    return 1;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  gpt_init(m, 1);
  size_t nt = gpt_tensor_count(m);
  optim_group *g = calloc(nt, sizeof *g);
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    g[i] = (optim_group){t->offset, t->numel, t->decay};
  }
  optim_config oc = {OPTIM_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
  if (optim_create(&oc, gpt_num_params(m), g, nt, &o, err, sizeof err) != 0) {
    fprintf(stderr, "engine_bench: %s\n", err);
    return 1;
  }
  uint32_t *in = malloc((size_t)B * T * sizeof *in);
  uint32_t *tg = malloc((size_t)B * T * sizeof *tg);
  uint64_t s = 42;
  for (int i = 0; i < B * T; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    in[i] = (uint32_t)((s >> 33) % (uint64_t)c.vocab_size);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tg[i] = (uint32_t)((s >> 33) % (uint64_t)c.vocab_size);
  }
  double t0 = 0;
  float loss = 0;
  /* Two warm-up steps: first-touch of activations, thread pools. */
  for (int step = -2; step < steps; step++) {
    if (step == 0)
      t0 = now();
    gpt_zero_grad(m);
    if (gpt_forward(m, in, tg, B, T, &loss, err, sizeof err) != 0) {
      fprintf(stderr, "engine_bench: %s\n", err);
      return 1;
    }
    gpt_backward(m, 1.0f);
    optim_clip_grad_norm(gpt_grads(m), gpt_num_params(m), 1.0);
    optim_step(o, gpt_params(m), gpt_grads(m), 3e-4f);
  }
  double dt = now() - t0;
  /* gflops_per_s: the model's FLOPs (gpt_flops_per_token: 6N plus
   * attention's full T x T products) a second, against the CPU's peak. */
  double tps = (double)steps * B * T / dt;
  printf("{\"tokens_per_s\": %.1f, \"seconds\": %.3f, \"steps\": %d, "
         "\"params\": %zu, \"loss\": %.4f, \"gflops_per_s\": %.1f}\n",
         tps, dt, steps, gpt_num_params(m), loss,
         tps * gpt_flops_per_token(m) / 1e9);
  optim_destroy(o);
  gpt_destroy(m);
  free(g);
  free(in);
  free(tg);
  return 0;
}
