/*
 * train_dump: ten training steps of the CPU engine (model, clipping,
 * schedule, optimizer) for tests/reference/torch_train.py to repeat in
 * PyTorch (tests/integration/test_train_torch.sh).
 *
 *   train_dump adamw|lion DIR [llama KV HS UNTIED]
 *
 * With "llama", the Llama shape of llama_shape.h (and DIR/llama.txt)
 * instead of GPT-2's.
 *
 * Tiny model (L2 H2 C32 T16, vocab 67 padded to 128), gpt_init with a
 * fixed seed, B3 T16, ten different fixed random batches. Each step makes
 * the train stage's calls in the train stage's order (stages/train/
 * single.c): gpt_zero_grad, gpt_forward, gpt_backward(1.0),
 * optim_clip_grad_norm(MAX_NORM, 1.5), optim_step at lr_at(step).
 * Schedule: warmup 3, total 10, cosine, min_lr = max_lr / 10. Groups are
 * the tensors of gpt_tensor_at with their decay flags. AdamW: max_lr 1e-2,
 * betas (0.9, 0.95), eps 1e-8, weight decay 0.1; Lion: max_lr 1e-3, betas
 * (0.9, 0.99), weight decay 0.1.
 *
 * Writes into DIR:
 *   layout.txt   "config L H C T V Vp B T steps", then per tensor
 *                "name offset numel d0 d1 decay" (d1 0 for vectors)
 *   params0.bin  the initial parameters (float, gpt_params' layout)
 *   inputs.bin, targets.bin   uint32 (steps,B,T)
 *   steps.txt    per step "step lr loss grad_norm" (norm before clipping)
 *   params.bin   the parameters after the last step
 * All little-endian as in memory.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_shape.h"
#include "model/gpt.h"
#include "optim/optim.h"

#define L 2
#define H 2
#define C 32
#define TMAX 16
#define V 67
#define B 3
#define T 16
#define STEPS 10
/* The gradient norms of this model and data lie between 1.1 and 1.9 over
 * the ten steps, so clipping at 1.5 (not 1.0, which would clip every
 * step) acts on some steps and not on others; the check insists on
 * both. */
#define MAX_NORM 1.5
/* The Llama shapes' (llama_shape.h) norms lie between 0.97 and 1.76. */
#define MAX_NORM_LLAMA 1.2

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
    fprintf(stderr, "train_dump: cannot write %s\n", path);
    if (f)
      fclose(f);
    return -1;
  }
  return 0;
}

static int write_layout(const char *dir, gpt *m) {
  const gpt_config *cfg = gpt_get_config(m);
  char path[4096];
  snprintf(path, sizeof path, "%s/layout.txt", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "train_dump: cannot write %s\n", path);
    return -1;
  }
  fprintf(f, "config %d %d %d %d %d %d %d %d %d\n", cfg->n_layer, cfg->n_head,
          cfg->n_embd, cfg->block_size, cfg->vocab_size, cfg->padded_vocab, B,
          T, STEPS);
  for (size_t i = 0; i < gpt_tensor_count(m); i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    fprintf(f, "%s %zu %zu %d %d %d\n", t->name, t->offset, t->numel,
            t->shape[0], t->ndim == 2 ? t->shape[1] : 0, t->decay);
  }
  return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  int llama = argc == 7 && strcmp(argv[3], "llama") == 0;
  if ((argc != 3 && !llama) ||
      (strcmp(argv[1], "adamw") && strcmp(argv[1], "lion"))) {
    fprintf(stderr, "usage: train_dump adamw|lion DIR [llama KV HS UNTIED]\n");
    return 2;
  }
  const int lion = strcmp(argv[1], "lion") == 0;
  const char *dir = argv[2];
  char err[512];

  gpt_config cfg = {.n_layer = L,
                    .n_head = H,
                    .n_embd = C,
                    .block_size = TMAX,
                    .vocab_size = V};
  if (llama)
    cfg = llama_shape(argv + 4);
  gpt *m = NULL;
  if (gpt_config_finish(&cfg, err, sizeof err) != 0 ||
      gpt_create(&cfg, &m, err, sizeof err) != 0) {
    fprintf(stderr, "train_dump: %s\n", err);
    return 1;
  }
  if (llama && llama_shape_write(dir, gpt_get_config(m)) != 0)
    return 1;
  gpt_init(m, 1234);

  /* The optimizer groups as the train stage makes them. */
  const size_t nt = gpt_tensor_count(m), np = gpt_num_params(m);
  optim_group *groups = calloc(nt, sizeof *groups);
  if (!groups)
    return 1;
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    groups[i] = (optim_group){t->offset, t->numel, t->decay};
  }
  const optim_config oc =
      lion ? (optim_config){OPTIM_LION, 0.9f, 0.99f, 0.0f, 0.1f}
           : (optim_config){OPTIM_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
  const lr_schedule sched = {.max_lr = lion ? 1e-3 : 1e-2,
                             .min_lr = lion ? 1e-4 : 1e-3,
                             .warmup_steps = 3,
                             .total_steps = STEPS,
                             .decay = LR_COSINE};
  optim *o = NULL;
  if (optim_create(&oc, np, groups, nt, &o, err, sizeof err) != 0) {
    fprintf(stderr, "train_dump: %s\n", err);
    return 1;
  }
  free(groups);

  /* Ten batches of random ids < V, the last real id among the targets. */
  static uint32_t in[STEPS][B * T], tg[STEPS][B * T];
  uint64_t s = 4321;
  for (int k = 0; k < STEPS; k++) {
    for (int i = 0; i < B * T; i++) {
      in[k][i] = (uint32_t)(rng_next(&s) % V);
      tg[k][i] = (uint32_t)(rng_next(&s) % V);
    }
    tg[k][k] = V - 1;
  }

  float *params = gpt_params(m), *grads = gpt_grads(m);
  if (write_layout(dir, m) != 0 ||
      write_file(dir, "params0.bin", params, np * sizeof(float)) != 0 ||
      write_file(dir, "inputs.bin", in, sizeof in) != 0 ||
      write_file(dir, "targets.bin", tg, sizeof tg) != 0)
    return 1;

  char path[4096];
  snprintf(path, sizeof path, "%s/steps.txt", dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "train_dump: cannot write %s\n", path);
    return 1;
  }
  for (int step = 0; step < STEPS; step++) {
    float loss = 0;
    gpt_zero_grad(m);
    if (gpt_forward(m, in[step], tg[step], B, T, &loss, err, sizeof err) != 0) {
      fprintf(stderr, "train_dump: step %d: %s\n", step, err);
      return 1;
    }
    gpt_backward(m, 1.0f);
    const double norm =
        optim_clip_grad_norm(grads, np, llama ? MAX_NORM_LLAMA : MAX_NORM);
    const double lr = lr_at(&sched, step);
    optim_step(o, params, grads, (float)lr);
    fprintf(f, "%d %.17g %.9g %.17g\n", step, lr, loss, norm);
  }
  if (fclose(f) != 0 ||
      write_file(dir, "params.bin", params, np * sizeof(float)) != 0)
    return 1;
  optim_destroy(o);
  gpt_destroy(m);
  return 0;
}
