/*
 * optim: AdamW, Lion, the learning-rate schedule and grad-norm clipping
 * (optim.h). The updates follow torch.optim.AdamW and lion-pytorch step
 * for step, so that tests/reference/torch_optim.py can compare them to
 * PyTorch to float precision.
 *
 * Determinism: every update is elementwise, so the OpenMP split does not
 * change a single bit. The only reduction, the grad norm, sums fixed
 * chunks in double and combines the chunk sums in chunk order, so its
 * result does not depend on the number of threads either.
 */
#include "optim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

struct optim {
  optim_config cfg;
  double b1, b2, wd; /* cfg's, as written (optim_as_written) */
  size_t n;
  optim_group *groups; /* sorted by offset */
  size_t ngroups;
  uint64_t t;
  float *state; /* AdamW: m[n] then v[n]; Lion: m[n] */
  size_t nstate;
};

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int group_cmp(const void *a, const void *b) {
  const optim_group *x = a, *y = b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int beta_ok(float b) { return b >= 0.0f && b < 1.0f; }

int optim_create(const optim_config *cfg, size_t n, const optim_group *groups,
                 size_t ngroups, optim **out, char *err, size_t errlen) {
  *out = NULL;
  if (!cfg)
    return fail(err, errlen, "optim: no configuration");
  if (cfg->kind != OPTIM_ADAMW && cfg->kind != OPTIM_LION)
    return fail(err, errlen, "optim: unknown optimizer kind %d",
                (int)cfg->kind);
  if (!beta_ok(cfg->beta1) || !beta_ok(cfg->beta2))
    return fail(err, errlen,
                "optim: beta1 and beta2 must lie in [0, 1), got %g and %g",
                (double)cfg->beta1, (double)cfg->beta2);
  if (cfg->kind == OPTIM_ADAMW && !(cfg->eps > 0.0f && isfinite(cfg->eps)))
    return fail(err, errlen, "optim: AdamW eps must be > 0, got %g",
                (double)cfg->eps);
  if (!(cfg->weight_decay >= 0.0f && isfinite(cfg->weight_decay)))
    return fail(err, errlen, "optim: weight_decay must be >= 0, got %g",
                (double)cfg->weight_decay);
  if (ngroups == 0 && n > 0)
    return fail(err, errlen, "optim: %zu parameters but no groups", n);

  optim *o = calloc(1, sizeof *o);
  if (!o)
    return fail(err, errlen, "optim: out of memory");
  o->cfg = *cfg;
  o->b1 = optim_as_written(cfg->beta1);
  o->b2 = optim_as_written(cfg->beta2);
  o->wd = optim_as_written(cfg->weight_decay);
  o->n = n;
  o->ngroups = ngroups;
  o->groups = malloc((ngroups ? ngroups : 1) * sizeof *o->groups);
  if (!o->groups) {
    optim_destroy(o);
    return fail(err, errlen, "optim: out of memory");
  }
  if (ngroups)
    memcpy(o->groups, groups, ngroups * sizeof *groups);
  qsort(o->groups, ngroups, sizeof *o->groups, group_cmp);
  /* Sorted by offset, the groups cover [0, n) without overlap exactly
   * when each one starts where the previous one ended. */
  size_t end = 0;
  for (size_t i = 0; i < ngroups; i++) {
    const optim_group *gr = &o->groups[i];
    if (gr->offset != end || gr->numel > n - end) {
      fail(err, errlen,
           "optim: groups must cover [0, %zu) without overlap; "
           "group [%zu, +%zu) %s",
           n, gr->offset, gr->numel,
           gr->offset < end   ? "overlaps the one before it"
           : gr->offset > end ? "leaves a gap before it"
                              : "runs past the end");
      optim_destroy(o);
      return -1;
    }
    end += gr->numel;
  }
  if (end != n) {
    optim_destroy(o);
    return fail(err, errlen, "optim: groups cover [0, %zu) of %zu parameters",
                end, n);
  }
  o->nstate = optim_state_floats_for(cfg->kind, n);
  o->state = calloc(o->nstate ? o->nstate : 1, sizeof *o->state);
  if (!o->state) {
    fail(err, errlen, "optim: out of memory for %zu moment floats", o->nstate);
    optim_destroy(o);
    return -1;
  }
  *out = o;
  return 0;
}

void optim_destroy(optim *o) {
  if (!o)
    return;
  free(o->groups);
  free(o->state);
  free(o);
}

/*
 * torch.optim.AdamW (_single_tensor_adamw, torch 1.13), elementwise:
 *   p *= 1 - lr*wd
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g g
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p -= (lr / (1 - b1^t)) * m / denom
 * The scalars are computed in double, as Python computes them, and applied
 * in float, as torch's CPU kernels apply them to fp32 tensors.
 */
static void adamw_step(optim *o, float *params, const float *grads, float lr) {
  const double b1 = o->b1, b2 = o->b2;
  const double t = (double)o->t;
  const float c1 = (float)b1, c1m = (float)(1.0 - b1);
  const float c2 = (float)b2, c2m = (float)(1.0 - b2);
  const float step_size = (float)((double)lr / (1.0 - pow(b1, t)));
  const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, t));
  const float eps = o->cfg.eps;
  const float keep = (float)(1.0 - (double)lr * o->wd);
  float *m = o->state, *v = o->state + o->n;

#pragma omp parallel
  for (size_t gi = 0; gi < o->ngroups; gi++) {
    const optim_group gr = o->groups[gi];
    const long long lo = (long long)gr.offset;
    const long long hi = lo + (long long)gr.numel;
    const int decay = gr.decay && o->cfg.weight_decay != 0.0f;
#pragma omp for schedule(static) nowait
    for (long long i = lo; i < hi; i++) {
      float p = params[i];
      const float g = grads[i];
      if (decay)
        p *= keep;
      m[i] = c1 * m[i] + c1m * g;
      v[i] = c2 * v[i] + c2m * g * g; /* addcmul's order */
      const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
      params[i] = p - step_size * m[i] / denom; /* addcdiv's order */
    }
  }
}

/* sign() with sign(0) = 0, as torch.sign. */
static float signf_(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }

/*
 * lion-pytorch (Lion.step, update_fn), elementwise:
 *   p *= 1 - lr*wd
 *   p -= lr * sign(b1 m + (1-b1) g)
 *   m = b2 m + (1-b2) g
 */
static void lion_step(optim *o, float *params, const float *grads, float lr) {
  const double b1 = o->b1, b2 = o->b2;
  const float c1 = (float)b1, c1m = (float)(1.0 - b1);
  const float c2 = (float)b2, c2m = (float)(1.0 - b2);
  const float keep = (float)(1.0 - (double)lr * o->wd);
  float *m = o->state;

#pragma omp parallel
  for (size_t gi = 0; gi < o->ngroups; gi++) {
    const optim_group gr = o->groups[gi];
    const long long lo = (long long)gr.offset;
    const long long hi = lo + (long long)gr.numel;
    const int decay = gr.decay && o->cfg.weight_decay != 0.0f;
#pragma omp for schedule(static) nowait
    for (long long i = lo; i < hi; i++) {
      float p = params[i];
      const float g = grads[i];
      if (decay)
        p *= keep;
      const float c = c1 * m[i] + c1m * g;
      params[i] = p - lr * signf_(c);
      m[i] = c2 * m[i] + c2m * g;
    }
  }
}

void optim_step(optim *o, float *params, const float *grads, float lr) {
  o->t++;
  if (o->cfg.kind == OPTIM_ADAMW)
    adamw_step(o, params, grads, lr);
  else
    lion_step(o, params, grads, lr);
}

void optim_reset(optim *o) {
  o->t = 0;
  memset(o->state, 0, o->nstate * sizeof *o->state);
}

uint64_t optim_get_t(const optim *o) { return o->t; }
void optim_set_t(optim *o, uint64_t t) { o->t = t; }
size_t optim_state_floats(const optim *o) { return o->nstate; }
size_t optim_state_floats_for(optim_kind kind, size_t n) {
  return (kind == OPTIM_ADAMW ? 2 : 1) * n;
}
float *optim_state(optim *o) { return o->state; }

/* ---- Grad-norm clipping ---- */

/* Elements per partial sum. Fixed, so the order of additions (and the
 * norm to the last bit) is the same for any number of threads. */
#define CLIP_CHUNK ((size_t)1 << 15)

static double chunk_sumsq(const float *x, size_t lo, size_t hi) {
  double s = 0.0;
  for (size_t i = lo; i < hi; i++)
    s += (double)x[i] * (double)x[i];
  return s;
}

double optim_clip_grad_norm(float *grads, size_t n, double max_norm) {
  const size_t nchunks = (n + CLIP_CHUNK - 1) / CLIP_CHUNK;
  double sumsq = 0.0;
  double *part = nchunks > 1 ? malloc(nchunks * sizeof *part) : NULL;
  if (part) {
#pragma omp parallel for schedule(static)
    for (long long c = 0; c < (long long)nchunks; c++) {
      size_t lo = (size_t)c * CLIP_CHUNK;
      size_t hi = lo + CLIP_CHUNK < n ? lo + CLIP_CHUNK : n;
      part[c] = chunk_sumsq(grads, lo, hi);
    }
    for (size_t c = 0; c < nchunks; c++)
      sumsq += part[c];
    free(part);
  } else {
    /* One chunk, or no memory for the partial sums: the same chunks in
     * the same order on this thread give the same sum. */
    for (size_t c = 0; c < nchunks; c++) {
      size_t lo = c * CLIP_CHUNK;
      size_t hi = lo + CLIP_CHUNK < n ? lo + CLIP_CHUNK : n;
      sumsq += chunk_sumsq(grads, lo, hi);
    }
  }
  const double norm = sqrt(sumsq);
  /* A NaN or infinite norm is left to the spike guard: scaling by 0 or
   * NaN would only hide where the trouble came from. */
  if (max_norm > 0.0 && isfinite(norm)) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      const float s = (float)coef;
#pragma omp parallel for schedule(static)
      for (long long i = 0; i < (long long)n; i++)
        grads[i] *= s;
    }
  }
  return norm;
}

/* ---- Learning rate ---- */

double lr_at(const lr_schedule *s, int64_t step) {
  if (step < 0)
    step = 0;
  if (s->warmup_steps > 0 && step < s->warmup_steps)
    return s->max_lr * (double)(step + 1) / (double)s->warmup_steps;
  const int64_t warmup = s->warmup_steps > 0 ? s->warmup_steps : 0;
  double p;
  switch (s->decay) {
  case LR_CONSTANT: {
    if (s->cooldown_steps <= 0)
      return s->max_lr;
    const int64_t start = s->total_steps - s->cooldown_steps;
    if (step < start)
      return s->max_lr;
    /* The first cooldown step is already below max_lr and the last one,
     * total - 1, is at min_lr. */
    p = (double)(step - start + 1) / (double)s->cooldown_steps;
    if (p > 1.0)
      p = 1.0;
    return s->max_lr - (s->max_lr - s->min_lr) * p;
  }
  case LR_LINEAR:
  case LR_COSINE:
  default: {
    int64_t span = s->total_steps - warmup;
    if (span < 1)
      span = 1;
    p = (double)(step - warmup) / (double)span;
    if (p < 0.0)
      p = 0.0;
    if (p > 1.0)
      p = 1.0;
    if (s->decay == LR_LINEAR)
      return s->max_lr - (s->max_lr - s->min_lr) * p;
    return s->min_lr + (s->max_lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
  }
  }
}
