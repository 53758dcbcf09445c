/* The CPU engine's side of a pipeline stage (pipeline_engine.h): gpt.h's
 * stage passes over host floats, one activation slot a gpt that shares
 * the host model's parameters and gradients, one optimizer a range. */
#include "pipeline_engine.h"

#include "zero/zslice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pipe_eng {
  pipe_setup su;
  gpt *model;
  gpt **slot; /* su.nslots of them */
  optim *opt[2];
};

static int oom(char *err, size_t errlen) {
  snprintf(err, errlen, "pipeline: out of memory");
  return -1;
}

int pipe_range_optim(gpt *model, size_t off, size_t n, const zslice *z,
                     const optim_config *oc, optim **out, char *err,
                     size_t errlen) {
  size_t nt = gpt_tensor_count(model), k = 0;
  optim_group *g = calloc(nt, sizeof *g);
  if (!g)
    return oom(err, errlen);
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(model, i);
    if (t->offset >= off && t->offset < off + n)
      g[k++] = (optim_group){t->offset - off, t->numel, t->decay};
  }
  int rc = zslice_optim(z, oc, g, k, out, err, errlen);
  free(g);
  return rc;
}

/* The range's optimizer, over all of it. */
static int range_optim(pipe_eng *e, int r, char *err, size_t errlen) {
  zslice whole;
  zslice_init(&whole, NULL, e->su.n[r]);
  return pipe_range_optim(e->model, e->su.off[r], e->su.n[r], &whole,
                          &e->su.o->opt, &e->opt[r], err, errlen);
}

/* An activation slot: a gpt of the stage's layers whose parameters and
 * gradients are the model's own arrays (the groups the stage reaches;
 * the others stay NULL, which the engine must never reach). */
static int make_slot(pipe_eng *e, gpt **out, char *err, size_t errlen) {
  const pipe_setup *su = &e->su;
  gpt *m = NULL;
  if (gpt_create(gpt_get_config(e->model), &m, err, errlen) != 0)
    return -1;
  *out = m;
  gpt_release(m, GPT_BUF_PARAMS | GPT_BUF_GRADS);
  if (gpt_set_stage(m, su->first, su->last, err, errlen) != 0 ||
      gpt_set_recompute(m, su->o->recompute, err, errlen) != 0 ||
      gpt_set_autocast(m, su->o->autocast, err, errlen) != 0)
    return -1;
  float *params = gpt_params(e->model), *grads = gpt_grads(e->model);
  size_t ng = gpt_group_count(e->model);
  for (size_t g = 0; g < ng; g++) {
    int layer = (int)g - 1;
    int used = (layer >= su->first && layer < su->last) ||
               (g == 0 && (su->s == 0 || su->nrg == 2)) ||
               (g == ng - 1 && su->s == su->P - 1);
    if (!used)
      continue;
    size_t off, n;
    gpt_group_range(e->model, g, &off, &n);
    gpt_set_group_params(m, g, params + off);
    gpt_set_group_grads(m, g, grads + off);
  }
  return 0;
}

static void cpu_destroy(pipe_eng *e) {
  if (!e)
    return;
  for (int i = 0; i < e->su.nslots && e->slot; i++)
    gpt_destroy(e->slot[i]);
  for (int r = 0; r < 2; r++)
    optim_destroy(e->opt[r]);
  free(e->slot);
  free(e);
}

static void *cpu_alloc(pipe_eng *e, size_t bytes) { return malloc(bytes); }
static void cpu_free(pipe_eng *e, void *buf) { free(buf); }
static int cpu_copy(pipe_eng *e, void *dst, const void *src, size_t bytes,
                    char *err, size_t errlen) {
  memcpy(dst, src, bytes);
  return 0;
}
static int cpu_zero_grad(pipe_eng *e, char *err, size_t errlen) {
  gpt_zero_grad(e->model);
  return 0;
}
static int cpu_forward(pipe_eng *e, int slot, const uint32_t *inputs,
                       const void *x, const uint32_t *targets, float *loss,
                       char *err, size_t errlen) {
  return gpt_forward_stage(e->slot[slot], inputs, x, targets, e->su.o->B,
                           e->su.o->T, loss, err, errlen);
}
static int cpu_backward(pipe_eng *e, int slot, const void *dy, float scale,
                        char *err, size_t errlen) {
  return gpt_backward_stage(e->slot[slot], dy, scale, err, errlen);
}
static const void *cpu_output(pipe_eng *e, int slot) {
  return gpt_stage_output(e->slot[slot]);
}
static const void *cpu_input_grad(pipe_eng *e, int slot) {
  return gpt_stage_input_grad(e->slot[slot]);
}
static float *cpu_grads(pipe_eng *e, int r) {
  return gpt_grads(e->model) + e->su.off[r];
}
static int cpu_add(pipe_eng *e, int r, const float *src, size_t n, char *err,
                   size_t errlen) {
  float *g = cpu_grads(e, r);
  for (size_t i = 0; i < n; i++)
    g[i] = src[i] + g[i];
  return 0;
}
static int cpu_scale(pipe_eng *e, float s, char *err, size_t errlen) {
  for (int r = 0; r < e->su.nrg; r++) {
    float *g = cpu_grads(e, r);
    for (size_t i = 0; i < e->su.n[r]; i++)
      g[i] *= s;
  }
  return 0;
}
static int cpu_sumsq(pipe_eng *e, int r, double *ss, char *err, size_t errlen) {
  const float *g = cpu_grads(e, r);
  double sum = 0;
  for (size_t i = 0; i < e->su.n[r]; i++)
    sum += (double)g[i] * g[i];
  *ss = sum;
  return 0;
}
static int cpu_step(pipe_eng *e, float lr, char *err, size_t errlen) {
  for (int r = 0; r < e->su.nrg; r++)
    optim_step(e->opt[r], gpt_params(e->model) + e->su.off[r], cpu_grads(e, r),
               lr);
  return 0;
}
static int cpu_pull(pipe_eng *e, float *params, float *state, uint64_t *t,
                    char *err, size_t errlen) {
  size_t n = e->su.n[0];
  const float *own = gpt_params(e->model) + e->su.off[0];
  if (params != own) /* rank 0 gathers into the model itself */
    memcpy(params, own, n * sizeof(float));
  if (state) {
    memcpy(state, optim_state(e->opt[0]),
           optim_state_floats(e->opt[0]) * sizeof(float));
    *t = optim_get_t(e->opt[0]);
  }
  return 0;
}
static int cpu_load(pipe_eng *e, optim *full, char *err, size_t errlen) {
  size_t N = gpt_num_params(e->model);
  const float *fs = optim_state(full);
  size_t k = optim_state_floats_for(e->su.o->opt.kind, 1);
  for (int r = 0; r < e->su.nrg; r++) {
    size_t n = e->su.n[r];
    for (size_t j = 0; j < k; j++)
      memcpy(optim_state(e->opt[r]) + j * n, fs + j * N + e->su.off[r],
             n * sizeof(float));
    optim_set_t(e->opt[r], optim_get_t(full));
  }
  return 0;
}

static uint64_t cpu_act_bytes(pipe_eng *e) {
  /* The slots' parameter and gradient arrays are released (they point
   * into the model's): what they allocate is activations. */
  uint64_t b = 0;
  for (int i = 0; i < e->su.nslots; i++)
    b += gpt_allocated_bytes(e->slot[i]);
  return b;
}

/* Clipping scales the gradients now (optim_clip_grad_norm's way). */
static int cpu_clip(pipe_eng *e, double norm, double max_norm, char *err,
                    size_t errlen) {
  double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? cpu_scale(e, (float)coef, err, errlen) : 0;
}

static const pipe_ops cpu_ops = {
    .elem = sizeof(float),
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .zero_grad = cpu_zero_grad,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .output = cpu_output,
    .input_grad = cpu_input_grad,
    .grads = cpu_grads,
    .add = cpu_add,
    .scale = cpu_scale,
    .sumsq = cpu_sumsq,
    .clip = cpu_clip,
    .step = cpu_step,
    .pull = cpu_pull,
    .load = cpu_load,
    .act_bytes = cpu_act_bytes,
};

int pipe_cpu_create(const pipe_setup *su, const pipe_ops **ops, pipe_eng **out,
                    char *err, size_t errlen) {
  *ops = &cpu_ops;
  pipe_eng *e = calloc(1, sizeof *e);
  *out = e;
  if (!e || !(e->slot = calloc((size_t)su->nslots, sizeof *e->slot)))
    return oom(err, errlen);
  e->su = *su;
  e->model = su->model;
  for (int i = 0; i < su->nslots; i++)
    if (make_slot(e, &e->slot[i], err, errlen) != 0)
      return -1;
  for (int r = 0; r < su->nrg && !su->zero; r++)
    if (range_optim(e, r, err, errlen) != 0)
      return -1;
  return 0;
}
