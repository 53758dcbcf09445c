/*
 * optim: the optimizers (AdamW, Lion), the learning-rate schedule and
 * global grad-norm clipping of the training engine. Plain fp32 arrays: the
 * parameters and gradients of gpt.h, split into groups that do or do not
 * get weight decay.
 *
 * AdamW (Loshchilov & Hutter; torch.optim.AdamW): with t counting steps
 * from 1, m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr * wd * p (decoupled, decay groups only);
 * p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
 * Lion (Chen et al. 2023; lion-pytorch): c = b1 m + (1-b1) g;
 * p -= lr * wd * p (decay groups); p -= lr * sign(c); m = b2 m + (1-b2) g.
 *
 * Threads: one optim per thread at a time; steps use OpenMP inside.
 */
#ifndef DAGRUN_OPTIM_H
#define DAGRUN_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum optim_kind { OPTIM_ADAMW = 0, OPTIM_LION = 1 } optim_kind;

typedef struct optim_config {
  optim_kind kind;
  float beta1, beta2; /* AdamW: 0.9, 0.95 (GPT-2/3 training); Lion 0.9, 0.99 */
  float eps;          /* AdamW only: 1e-8 */
  float weight_decay; /* decoupled; AdamW 0.1, Lion typically 3-10x more */
} optim_config;

/* A contiguous range of the parameter array and whether it decays. */
typedef struct optim_group {
  size_t offset, numel;
  int decay;
} optim_group;

typedef struct optim optim;

/* Moments for n parameters (zeroed). Groups must cover [0, n) without
 * overlap. Returns 0 or -1 with err. */
int optim_create(const optim_config *cfg, size_t n, const optim_group *groups,
                 size_t ngroups, optim **out, char *err, size_t errlen);
void optim_destroy(optim *o); /* NULL is a no-op */

/* One update of params from grads at learning rate lr; t advances by 1. */
void optim_step(optim *o, float *params, const float *grads, float lr);
/* Zeroes the moments and the step count (the spike guard's "reset"). */
void optim_reset(optim *o);

/* The state, for checkpoints: t and the moment arrays (AdamW: m then v,
 * 2n floats; Lion: m, n floats). optim_state_floats says how many. */
uint64_t optim_get_t(const optim *o);
void optim_set_t(optim *o, uint64_t t);
size_t optim_state_floats(const optim *o);
/* The state floats an optimizer of that kind keeps for n parameters,
 * without making one (memory estimates). */
size_t optim_state_floats_for(optim_kind kind, size_t n);
float *optim_state(optim *o);

/* Global L2 norm of grads[0..n), computed in double. If max_norm > 0 and
 * the norm exceeds it, scales grads by max_norm / norm (as
 * torch.nn.utils.clip_grad_norm_, with its 1e-6). Returns the norm before
 * clipping. */
double optim_clip_grad_norm(float *grads, size_t n, double max_norm);

/*
 * The config holds fp32 hyperparameters, but a user writes 0.95 and
 * torch computes 1 - 0.95 in double: with the float as it is, 1 - beta2
 * would be off by up to 1e-5 relative. So the float is read back as the
 * shortest decimal that rounds to it (what the user wrote, as Python's
 * repr of a float32 gives), then used in double like Python does. Inline
 * here so that the CUDA optimizers (gpu/cuda/optim.cu) derive the same
 * constants, to the bit, without linking the engine.
 */
static inline double optim_as_written(float x) {
  char buf[32];
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
    double d = strtod(buf, NULL);
    if ((float)d == x)
      return d;
  }
  return (double)x;
}

/* ---- Learning rate ---- */
typedef enum lr_decay { LR_COSINE = 0, LR_LINEAR = 1, LR_CONSTANT = 2 } lr_decay;

typedef struct lr_schedule {
  double max_lr, min_lr;
  int64_t warmup_steps; /* linear from max_lr/warmup at step 0 to max_lr */
  int64_t total_steps;
  lr_decay decay;
  /* LR_CONSTANT: max_lr until total - cooldown_steps, then linear to
   * min_lr at the last step. */
  int64_t cooldown_steps;
} lr_schedule;

/* LR at step (0-based): warmup lr = max_lr * (step+1) / warmup; then
 * cosine: min + (max-min) * 0.5 * (1 + cos(pi * p)), linear: max - (max-
 * min) * p, with p = (step - warmup) / (total - warmup) in [0,1]. */
double lr_at(const lr_schedule *s, int64_t step);

#endif /* DAGRUN_OPTIM_H */
