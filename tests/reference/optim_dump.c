/*
 * optim_dump: a short training run of the optimizer alone, for
 * tests/reference/torch_optim.py to repeat in PyTorch.
 *
 *   optim_dump adamw|lion OUTDIR
 *
 * Three parameter groups (decay, no decay, decay) of random values, ten
 * sets of random gradients of very different sizes (so that clipping at
 * 1.0 acts on some steps and not on others), warmup + cosine learning
 * rate from lr_at. Writes into OUTDIR:
 *   meta.json    sizes, groups, hyperparameters, schedule, and per step
 *                the lr used and the grad norm before clipping
 *   params0.f32  the initial parameters (n floats)
 *   grads.f32    the gradients before clipping (steps x n floats)
 *   params.f32   the parameters after each step (steps x n floats)
 *   state.f32    the optimizer state after the last step
 * All little-endian fp32 as in memory.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

#define N 1000
#define STEPS 10

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1) (xorshift64*: fixed, so every run sees the same). */
static float urand(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  uint64_t r = rng * 2685821657736338717ull;
  return (float)((double)(r >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static int write_floats(const char *dir, const char *name, const float *x,
                        size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(x, sizeof *x, n, f) != n || fclose(f) != 0) {
    perror(path);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "adamw") && strcmp(argv[1], "lion"))) {
    fprintf(stderr, "usage: optim_dump adamw|lion OUTDIR\n");
    return 2;
  }
  const char *dir = argv[2];
  const int lion = strcmp(argv[1], "lion") == 0;
  optim_config cfg =
      lion ? (optim_config){OPTIM_LION, 0.9f, 0.99f, 0, 1.0f}
           : (optim_config){OPTIM_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
  const optim_group groups[3] = {{0, 600, 1}, {600, 100, 0}, {700, 300, 1}};
  lr_schedule sched = {.max_lr = lion ? 1e-3 : 1e-2,
                       .min_lr = lion ? 1e-4 : 1e-3,
                       .warmup_steps = 3,
                       .total_steps = STEPS,
                       .decay = LR_COSINE};
  const double max_norm = 1.0;
  /* Gradient scales: the norm of N uniform values is about 18 x scale,
   * so steps 2, 4, 5 and 7 get clipped and the others do not. */
  const float scale[STEPS] = {0.01f, 0.04f, 3.0f, 0.02f, 10.0f,
                              0.5f,  0.03f, 2.0f, 0.01f, 0.04f};

  static float p[N], p0[N], g[STEPS][N], gc[N], after[STEPS][N];
  double lrs[STEPS], norms[STEPS];
  for (int i = 0; i < N; i++)
    p[i] = p0[i] = urand();
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < N; i++)
      g[s][i] = urand() * scale[s];

  optim *o = NULL;
  char err[256];
  if (optim_create(&cfg, N, groups, 3, &o, err, sizeof err) != 0) {
    fprintf(stderr, "optim_dump: %s\n", err);
    return 1;
  }
  for (int s = 0; s < STEPS; s++) {
    memcpy(gc, g[s], sizeof gc);
    norms[s] = optim_clip_grad_norm(gc, N, max_norm);
    lrs[s] = lr_at(&sched, s);
    optim_step(o, p, gc, (float)lrs[s]);
    memcpy(after[s], p, sizeof p);
  }

  if (write_floats(dir, "params0.f32", p0, N) ||
      write_floats(dir, "grads.f32", &g[0][0], (size_t)STEPS * N) ||
      write_floats(dir, "params.f32", &after[0][0], (size_t)STEPS * N) ||
      write_floats(dir, "state.f32", optim_state(o), optim_state_floats(o)))
    return 1;

  char path[4096];
  snprintf(path, sizeof path, "%s/meta.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return 1;
  }
  fprintf(f,
          "{\"kind\": \"%s\", \"n\": %d, \"steps\": %d,\n"
          " \"groups\": [[0, 600, 1], [600, 100, 0], [700, 300, 1]],\n"
          " \"beta1\": %.9g, \"beta2\": %.9g, \"eps\": %.9g, "
          "\"weight_decay\": %.9g,\n"
          " \"max_lr\": %.17g, \"min_lr\": %.17g, \"warmup\": %lld, "
          "\"total\": %lld, \"max_norm\": %.17g,\n",
          argv[1], N, STEPS, (double)cfg.beta1, (double)cfg.beta2,
          (double)cfg.eps, (double)cfg.weight_decay, sched.max_lr, sched.min_lr,
          (long long)sched.warmup_steps, (long long)sched.total_steps,
          max_norm);
  fprintf(f, " \"lr\": [");
  for (int s = 0; s < STEPS; s++)
    fprintf(f, "%s%.17g", s ? ", " : "", lrs[s]);
  fprintf(f, "],\n \"norm\": [");
  for (int s = 0; s < STEPS; s++)
    fprintf(f, "%s%.17g", s ? ", " : "", norms[s]);
  fprintf(f, "]}\n");
  if (fclose(f) != 0) {
    perror(path);
    return 1;
  }
  optim_destroy(o);
  return 0;
}
