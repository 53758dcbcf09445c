/* The CPU engine's side of a pipeline stage (pipeline_engine.h): gpt.h's
 * stage passes over host floats. The stage's parameters and gradients
 * are arrays of its own, its ranges alone (range 0 at offset 0, padded
 * to D S floats with ZeRO, the tied copy after it), not the host
 * model's: one activation slot a gpt whose groups point into them (the
 * groups the stage reaches; the others stay NULL, which the engine must
 * never reach), one optimizer a range, or with ZeRO one over range 0's
 * slice (zslice.h, over the stage group's MPI communicator). At
 * zero_stage 3 the two arrays exist only inside a step (and a gather):
 * between steps the rank keeps its slice of range 0's parameters (psl)
 * and of their gradient (gsl) alone. */
#include "pipeline_engine.h"

#include "zero/zslice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* With ZeRO: this rank's slice of range 0 (the tied copy has none: it
 * takes the first stage's parameters). */
typedef struct zrange {
  zslice zs;
  optim *opt; /* over the slice */
  float *gsl; /* its reduced gradient (S) */
  float *psl; /* zero_stage 3: its parameters (S), which the step updates */
} zrange;

struct pipe_eng {
  pipe_setup su;
  gpt *model;
  gpt **slot;      /* su.nslots of them */
  size_t local[2]; /* range r's offset in the stage's arrays */
  size_t nm;       /* their floats */
  float *params, *grads;
  optim *opt[2]; /* without ZeRO */
  zrange z;      /* with ZeRO */
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

/* An activation slot's groups on the stage's arrays (the groups the
 * stage reaches, each where its range has it: group 0 on the last stage
 * in the tied copy; the others stay NULL, which the engine must never
 * reach): at its making, and at zero_stage 3 whenever the arrays are
 * made anew. */
static void point_slot(pipe_eng *e, gpt *m) {
  const pipe_setup *su = &e->su;
  size_t ng = gpt_group_count(e->model);
  for (size_t g = 0; g < ng; g++) {
    size_t off, n;
    gpt_group_range(e->model, g, &off, &n);
    for (int r = su->nrg - 1; r >= 0; r--) {
      if (off < su->off[r] || off >= su->off[r] + su->n[r])
        continue;
      size_t at = e->local[r] + (off - su->off[r]);
      gpt_set_group_params(m, g, e->params + at);
      gpt_set_group_grads(m, g, e->grads + at);
      break;
    }
  }
}

/* An activation slot: a gpt of the stage's layers whose parameters and
 * gradients are the stage's arrays. */
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
  point_slot(e, m);
  return 0;
}

static void cpu_destroy(pipe_eng *e) {
  if (!e)
    return;
  for (int i = 0; i < e->su.nslots && e->slot; i++)
    gpt_destroy(e->slot[i]);
  for (int r = 0; r < 2; r++)
    optim_destroy(e->opt[r]);
  optim_destroy(e->z.opt);
  free(e->z.gsl);
  free(e->z.psl);
  free(e->params);
  free(e->grads);
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
  memset(e->grads, 0, e->nm * sizeof(float));
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
static float *cpu_grads(pipe_eng *e, int r) { return e->grads + e->local[r]; }
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
  const float *g = e->su.zero ? e->z.gsl : cpu_grads(e, r);
  size_t n = e->su.zero ? e->z.zs.own : e->su.n[r];
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += (double)g[i] * g[i];
  *ss = sum;
  return 0;
}

/* ---- ZeRO over the stage group ---- */

static int make_zero(pipe_eng *e, char *err, size_t errlen) {
  zrange *z = &e->z;
  if (pipe_range_optim(e->model, e->su.off[0], e->su.n[0], &z->zs,
                       &e->su.o->opt, &z->opt, err, errlen) != 0)
    return -1;
  if (!(z->gsl = calloc(z->zs.S, sizeof(float))))
    return oom(err, errlen);
  if (e->su.zero != 3)
    return 0;
  /* zero_stage 3: the slice of the weights create took (the arrays go
   * after, until the first step). */
  if (!(z->psl = calloc(z->zs.S, sizeof(float))))
    return oom(err, errlen);
  zslice_take(&z->zs, e->params + e->local[0], z->psl);
  return 0;
}

/* Range 0 is padded to D S floats in the stage's arrays (zeros past its
 * n[0]), so the collectives take it in place. */
static int cpu_reduce(pipe_eng *e, float s, char *err, size_t errlen) {
  zrange *z = &e->z;
  return zslice_reduce(&z->zs, cpu_grads(e, 0), z->gsl, s, err, errlen);
}

static int cpu_step(pipe_eng *e, float lr, char *err, size_t errlen) {
  zrange *z = &e->z;
  if (e->su.zero == 3) {
    optim_step(z->opt, z->psl, z->gsl, lr);
    return 0;
  }
  if (e->su.zero) {
    optim_step(z->opt, e->params + e->local[0] + z->zs.lo, z->gsl, lr);
    return 0;
  }
  for (int r = 0; r < e->su.nrg; r++)
    optim_step(e->opt[r], e->params + e->local[r], cpu_grads(e, r), lr);
  return 0;
}

/* zero_stage 3: the stage's two arrays anew (zeros), the slots on
 * them. 0, or -1 out of memory. */
static int acquire(pipe_eng *e, char *err, size_t errlen) {
  if (e->params && e->grads)
    return 0;
  if ((!e->params && !(e->params = calloc(e->nm, sizeof(float)))) ||
      (!e->grads && !(e->grads = calloc(e->nm, sizeof(float)))))
    return oom(err, errlen);
  for (int i = 0; i < e->su.nslots; i++)
    point_slot(e, e->slot[i]);
  return 0;
}

/* At zero_stage 3 range 0 is made from the slices (psl) into arrays
 * acquired for the step; below it, each rank's slice of the array is the
 * one its step updated in place. */
static int cpu_gather(pipe_eng *e, char *err, size_t errlen) {
  zrange *z = &e->z;
  if (e->su.zero == 3) {
    if (acquire(e, err, errlen) != 0)
      return -1;
    memcpy(e->params + e->local[0] + z->zs.lo, z->psl, z->zs.S * sizeof(float));
  }
  return zslice_gather(&z->zs, e->params + e->local[0], err, errlen);
}

/* zero_stage 3, after the step's reduce or a gather: the arrays go (the
 * slots' pointers into them dangle until acquire sets them again). */
static void cpu_release(pipe_eng *e) {
  if (e->su.zero != 3)
    return;
  free(e->params);
  free(e->grads);
  e->params = e->grads = NULL;
}

/* Group 0 where range r has it: the first stage's range 0, the last
 * stage's tied copy (range 1). */
static void *cpu_tied(pipe_eng *e, int r, size_t *bytes) {
  size_t off, n;
  gpt_group_range(e->model, 0, &off, &n);
  *bytes = n * sizeof(float);
  return e->params + e->local[r] + (off - e->su.off[r]);
}
static int cpu_pull(pipe_eng *e, float *params, float *state, uint64_t *t,
                    char *err, size_t errlen) {
  memcpy(params, e->params + e->local[0], e->su.n[0] * sizeof(float));
  if (state && e->su.zero) {
    if (zslice_state_gather(&e->z.zs, e->z.opt, state, err, errlen) != 0)
      return -1;
    *t = optim_get_t(e->z.opt);
  } else if (state) {
    memcpy(state, optim_state(e->opt[0]),
           optim_state_floats(e->opt[0]) * sizeof(float));
    *t = optim_get_t(e->opt[0]);
  }
  return 0;
}
/* The model's weights of the ranges into the stage's arrays. */
static void take_weights(pipe_eng *e) {
  const float *mp = gpt_params(e->model);
  for (int r = 0; r < e->su.nrg; r++)
    memcpy(e->params + e->local[r], mp + e->su.off[r],
           e->su.n[r] * sizeof(float));
}

static int cpu_load(pipe_eng *e, optim *full, char *err, size_t errlen) {
  size_t N = gpt_num_params(e->model);
  const float *fs = optim_state(full);
  size_t k = optim_state_floats_for(e->su.o->opt.kind, 1);
  if (e->su.zero == 3) {
    zslice_take(&e->z.zs, gpt_params(e->model) + e->su.off[0], e->z.psl);
    cpu_release(e);
  } else
    take_weights(e);
  if (e->su.zero) {
    zslice_state_take(&e->z.zs, fs + e->su.off[0], N, e->z.opt);
    optim_set_t(e->z.opt, optim_get_t(full));
    return 0;
  }
  for (int r = 0; r < e->su.nrg; r++) {
    size_t n = e->su.n[r];
    for (size_t j = 0; j < k; j++)
      memcpy(optim_state(e->opt[r]) + j * n, fs + j * N + e->su.off[r],
             n * sizeof(float));
    optim_set_t(e->opt[r], optim_get_t(full));
  }
  return 0;
}

/* The stage's arrays (its ranges, range 0 padded with ZeRO), the
 * optimizer state, with ZeRO the slice's gradient: all the engine's
 * own. */
static void cpu_memory(pipe_eng *e, zslice_memory *held, gpt_memory *part) {
  const zrange *z = &e->z;
  uint64_t arrays = (uint64_t)e->nm * 4, st = 0;
  for (int i = 0; i < e->su.nrg && !e->su.zero; i++)
    st += (uint64_t)optim_state_floats_for(e->su.o->opt.kind, e->su.n[i]) * 4;
  uint64_t S = e->su.zero ? (uint64_t)z->zs.S * 4 : 0;
  if (e->su.zero)
    st = (uint64_t)optim_state_floats(z->opt) * 4;
  /* zero_stage 2's, for stage 3 to beat: the arrays, beside them the
   * gradient's slice. zero_stage 3's: between steps the two slices; in
   * a step the arrays beside them (the whole stage gathered at once). */
  *held = (zslice_memory){.params = arrays,
                          .grads = arrays + S,
                          .optim = st,
                          .peak_grads = arrays + S,
                          .peak_params = arrays,
                          .stage2_params = arrays,
                          .stage2_grads = arrays + S};
  if (e->su.zero == 3) { /* the arrays where they are still there */
    held->params = S + (e->params ? arrays : 0);
    held->grads = S + (e->grads ? arrays : 0);
    held->peak_params = arrays + S;
  }
  *part = (gpt_memory){
      .params = held->peak_params, .grads = held->peak_grads, .optim = st};
  /* The slots' parameter and gradient arrays are released (they point
   * into the stage's): what they allocate is activations. */
  for (int i = 0; i < e->su.nslots; i++)
    part->acts += gpt_allocated_bytes(e->slot[i]);
}

/* Clipping scales the gradients now (optim_clip_grad_norm's way); with
 * ZeRO the slice's. */
static int cpu_clip(pipe_eng *e, double norm, double max_norm, char *err,
                    size_t errlen) {
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0)
    return 0;
  for (size_t i = 0; e->su.zero && i < e->z.zs.own; i++)
    e->z.gsl[i] *= (float)coef;
  return e->su.zero ? 0 : cpu_scale(e, (float)coef, err, errlen);
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
    .reduce = cpu_reduce,
    .sumsq = cpu_sumsq,
    .clip = cpu_clip,
    .step = cpu_step,
    .gather = cpu_gather,
    .release = cpu_release,
    .tied = cpu_tied,
    .pull = cpu_pull,
    .load = cpu_load,
    .memory = cpu_memory,
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
  /* Range 0 takes D S floats with ZeRO (its slices, the padding zero),
   * the tied copy after it. */
  zslice_init(&e->z.zs, su->zero ? su->dp : NULL, su->n[0]);
  for (int r = 0; r < su->nrg; r++) {
    e->local[r] = e->nm;
    e->nm += r == 0 ? (size_t)e->z.zs.D * e->z.zs.S : su->n[r];
  }
  if (!(e->params = calloc(e->nm, sizeof(float))) ||
      !(e->grads = calloc(e->nm, sizeof(float))))
    return oom(err, errlen);
  take_weights(e);
  for (int i = 0; i < su->nslots; i++)
    if (make_slot(e, &e->slot[i], err, errlen) != 0)
      return -1;
  if (su->zero) {
    if (make_zero(e, err, errlen) != 0)
      return -1;
    cpu_release(e);
    return 0;
  }
  for (int r = 0; r < su->nrg; r++)
    if (range_optim(e, r, err, errlen) != 0)
      return -1;
  return 0;
}
