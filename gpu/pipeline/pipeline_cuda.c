/* The CUDA engine's side of a pipeline stage (pipeline_engine.h):
 * gpt_cuda.h's stage passes over device memory, on device o->device.
 * One gpt_cuda with an activation slot per micro-batch in flight; its
 * master weights, BF16 copy, gradients and optimizer state cover the
 * stage's ranges alone (gpt_cuda_options' pieces: range 0 at shard
 * offset 0, the tied copy of group 0 after it), so a stage holds its
 * part of the model, not all of it. The stream and its gradient are BF16
 * (gpt_cuda.h says why).
 *
 * ZeRO over the stage group (pipeline_engine.h): range 0 is padded to
 * D S floats in the shard (the tied copy after them), the master weights
 * and the optimizer state are this rank's slice [d S, d S + S) alone
 * (gpt_cuda_options' master window), the gradients are reduce-scattered
 * over dp (NCCL) into a buffer of the slice and copied to its place,
 * the update writes the slice's BF16 copy, and gather all-gathers the
 * BF16 slices in place (2 bytes a parameter, as zero_cuda.c's stage 1).
 * A checkpoint's master weights and state are the slices gathered over
 * dp_ctl (MPI, host memory).
 *
 * ZeRO stage 3: gpt_cuda's arrays are one allocation (gpt_cuda.cu's
 * carve), none of which can be freed alone, so the gpt_cuda is made of
 * the slice alone (its shard one piece, range 0's [d S, d S + own), S
 * floats: the master weights, their BF16 copy, the reduced gradient and
 * the optimizer state), and the stage's BF16 parameters and FP32
 * gradients (range 0 padded to D S, the tied copy after) are this
 * engine's own device arrays (zslice_cuda.h's zslice_whole, wp and wg),
 * which the groups point into: gather makes them (the BF16 slices
 * all-gathered into wp), release frees them after the reduce-scatter has
 * put the slice's gradient into the gpt_cuda's. Between steps a rank
 * holds 10 bytes a float of its slice (and the optimizer state); in a
 * step 6 of the stage's besides.
 * DAGRUN_PIPELINE_CUDA_GPU: this build has the CUDA engine; without it,
 * pipe_cuda_create says so (at the end of the file). */
#include "pipeline_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DAGRUN_PIPELINE_CUDA_GPU
#include <cuda_runtime_api.h>

#include "cuda/gpt_cuda.h"
#include "zero/zslice_cuda.h"

struct pipe_eng {
  pipe_setup su;
  gpt_cuda *g;
  gpt_cuda_options go;
  size_t local[2]; /* range r's offset in the shard */
  size_t nm;       /* the shard's floats */
  float *shard;    /* host: the shard's weights, on their way */
  optim *hopt;     /* host: the master weights' optimizer state (the
                      shard's, or with ZeRO the slice's), on its way */
  zslice zs;       /* with ZeRO: range 0's slice, over dp_ctl */
  float *gsl;      /* with ZeRO 1-2: the slice's reduced gradient (device) */
  zslice_whole zw; /* zero_stage 3: the stage's BF16 parameters and
                      gradients (nm each), from gather to release */
};

static int z3(const pipe_eng *e) { return e->su.zero == 3; }

static int sync_g(pipe_eng *e, char *err, size_t errlen) {
  return gpt_cuda_synchronize(e->g, err, errlen);
}

static void cuda_release(pipe_eng *e);

static void cuda_destroy(pipe_eng *e) {
  if (!e)
    return;
  cuda_release(e);
  gpt_cuda_destroy(e->g);
  gpt_cuda_free(e->gsl);
  optim_destroy(e->hopt);
  free(e->shard);
  free(e);
}

static void *cuda_alloc(pipe_eng *e, size_t bytes) {
  return gpt_cuda_alloc(e->g, bytes);
}
static void cuda_free(pipe_eng *e, void *buf) {
  (void)e;
  gpt_cuda_free(buf);
}
static int cuda_copy(pipe_eng *e, void *dst, const void *src, size_t bytes,
                     char *err, size_t errlen) {
  return gpt_cuda_copy(e->g, dst, src, bytes, err, errlen);
}
static int cuda_zero_grad(pipe_eng *e, char *err, size_t errlen) {
  return z3(e) ? zslice_whole_zero_grad(&e->zw, e->g, err, errlen)
               : gpt_cuda_zero_grad(e->g, err, errlen);
}
/* The passes end synchronized: the received buffer they copied from may
 * take the next message, and the bubble's busy time is the GPU's. */
static int cuda_forward(pipe_eng *e, int slot, const uint32_t *inputs,
                        const void *x, const uint32_t *targets, float *loss,
                        char *err, size_t errlen) {
  return gpt_cuda_set_slot(e->g, slot, err, errlen) != 0 ||
                 gpt_cuda_forward_stage(e->g, inputs, x, targets, e->su.o->B,
                                        e->su.o->T, targets ? loss : NULL, err,
                                        errlen) != 0 ||
                 sync_g(e, err, errlen) != 0
             ? -1
             : 0;
}
static int cuda_backward(pipe_eng *e, int slot, const void *dy, float scale,
                         char *err, size_t errlen) {
  return gpt_cuda_set_slot(e->g, slot, err, errlen) != 0 ||
                 gpt_cuda_backward_stage(e->g, dy, scale, err, errlen) != 0 ||
                 sync_g(e, err, errlen) != 0
             ? -1
             : 0;
}
static const void *cuda_output(pipe_eng *e, int slot) {
  char err[256];
  if (gpt_cuda_set_slot(e->g, slot, err, sizeof err) != 0)
    return NULL;
  return gpt_cuda_stage_output(e->g);
}
static const void *cuda_input_grad(pipe_eng *e, int slot) {
  return gpt_cuda_stage_input_grad(e->g);
}
static float *cuda_grads(pipe_eng *e, int r) {
  char err[256];
  if (sync_g(e, err, sizeof err) != 0 || (z3(e) && !e->zw.wg))
    return NULL;
  return (z3(e) ? e->zw.wg : gpt_cuda_grads_ptr(e->g)) + e->local[r];
}
static int cuda_add(pipe_eng *e, int r, const float *src, size_t n, char *err,
                    size_t errlen) {
  float *to = cuda_grads(e, r);
  if (!to || n > e->nm - e->local[r]) {
    snprintf(err, errlen, "pipeline: no gradients [%zu, +%zu) to add to",
             e->local[r], n);
    return -1;
  }
  return gpt_cuda_add_floats(e->g, to, src, n, err, errlen) != 0 ||
                 sync_g(e, err, errlen) != 0
             ? -1
             : 0;
}
static int cuda_scale(pipe_eng *e, float s, char *err, size_t errlen) {
  return gpt_cuda_scale_grads(e->g, s, err, errlen) != 0 ||
                 sync_g(e, err, errlen) != 0
             ? -1
             : 0;
}
static int cuda_sumsq(pipe_eng *e, int r, double *ss, char *err,
                      size_t errlen) {
  if (e->su.zero) /* at stage 3 the gpt_cuda's are the slice's */
    return gpt_cuda_grad_sumsq(e->g, z3(e) ? 0 : e->zs.lo, e->zs.own, ss, err,
                               errlen);
  return gpt_cuda_grad_sumsq(e->g, e->local[r], e->su.n[r], ss, err, errlen);
}
/* The slice's sum over dp into gsl, then into its place in the
 * gradients (where the update reads it), all times s; at stage 3 from
 * the stage's gradients into the gpt_cuda's (the slice's). */
static int cuda_reduce(pipe_eng *e, float s, char *err, size_t errlen) {
  if (!z3(e))
    return zslice_cuda_reduce(e->g, e->su.dp, &e->zs, e->gsl, s, err, errlen);
  return zslice_whole_reduce(&e->zw, e->g, e->su.dp, &e->zs, s, err, errlen);
}

/* Each group the stage reaches, where it lies in the stage's arrays (the
 * gpt_cuda's own, or at stage 3 wp and wg; NULL while they are not
 * there). */
static void place_groups(void *arg) {
  pipe_eng *e = arg;
  const pipe_setup *su = &e->su;
  size_t ng = gpt_group_count(su->model);
  char *params = z3(e) ? e->zw.wp : gpt_cuda_params_ptr(e->g);
  float *grads = z3(e) ? e->zw.wg : gpt_cuda_grads_ptr(e->g);
  for (size_t g = 0; g < ng; g++) {
    size_t off, n;
    gpt_group_range(su->model, g, &off, &n);
    for (int r = su->nrg - 1; r >= 0; r--) {
      /* The tied copy (range 1) is the one the last stage reads. */
      if (off < su->off[r] || off >= su->off[r] + su->n[r])
        continue;
      size_t at = e->local[r] + (off - su->off[r]);
      gpt_cuda_set_group_params(e->g, g, params ? params + 2 * at : NULL);
      gpt_cuda_set_group_grads(e->g, g, grads ? grads + at : NULL);
      break;
    }
  }
}

/* zero_stage 3, after the reduce or a gather: the arrays go (the groups
 * point nowhere until the next gather places them again). A no-op below
 * it. */
static void cuda_release(pipe_eng *e) { zslice_whole_release(&e->zw, e->g); }

/* Every rank's BF16 slice of range 0, in place; at stage 3 from the
 * gpt_cuda's (the slice's) into the stage's arrays, made for it. */
static int cuda_gather(pipe_eng *e, char *err, size_t errlen) {
  if (!z3(e))
    return zslice_cuda_gather(e->g, e->su.dp, &e->zs, err, errlen);
  return zslice_whole_gather(&e->zw, e->g, e->su.dp, &e->zs, err, errlen);
}
static void *cuda_tied(pipe_eng *e, int r, size_t *bytes) {
  size_t off, n;
  gpt_group_range(e->su.model, 0, &off, &n);
  *bytes = n * 2;
  char *params = z3(e) ? e->zw.wp : gpt_cuda_params_ptr(e->g);
  return params ? params + e->local[r] * 2 : NULL;
}
/* Clipping's scale goes into the next step's update (gpt_cuda_set_clip),
 * not a pass over the gradients. */
static int cuda_clip(pipe_eng *e, double norm, double max_norm, char *err,
                     size_t errlen) {
  gpt_cuda_set_clip(e->g, norm, max_norm);
  return 0;
}
static int cuda_step(pipe_eng *e, float lr, char *err, size_t errlen) {
  return gpt_cuda_step(e->g, lr, err, errlen);
}
/* With ZeRO: the slices' master weights (downloaded to their place in
 * the shard) and with state their state gathered over dp_ctl. */
static int zero_pull(pipe_eng *e, float *params, float *state, char *err,
                     size_t errlen) {
  size_t DS = (size_t)e->zs.D * e->zs.S;
  float *tmp = malloc(DS * sizeof(float));
  if (!tmp) {
    snprintf(err, errlen, "pipeline: out of host memory for the gather");
    return -1;
  }
  /* At stage 3 the shard is the slice alone. */
  float *mine = z3(e) ? e->shard : e->shard + e->zs.lo;
  int rc = zslice_gather_to(&e->zs, mine, params, tmp, err, errlen);
  free(tmp);
  if (rc != 0 || !state)
    return rc;
  return zslice_state_gather(&e->zs, e->hopt, state, err, errlen);
}
static int cuda_pull(pipe_eng *e, float *params, float *state, uint64_t *t,
                     char *err, size_t errlen) {
  if (gpt_cuda_download_shard(e->g, e->shard, state ? e->hopt : NULL, err,
                              errlen) != 0)
    return -1;
  if (state)
    *t = optim_get_t(e->hopt);
  if (e->su.zero)
    return zero_pull(e, params, state, err, errlen);
  size_t n = e->su.n[0], k = optim_state_floats_for(e->su.o->opt.kind, 1);
  memcpy(params, e->shard, n * sizeof(float));
  for (size_t j = 0; state && j < k; j++)
    memcpy(state + j * n, optim_state(e->hopt) + j * e->nm, n * sizeof(float));
  return 0;
}
/* The model's ranges into the shard's host copy; with full, its state
 * (with ZeRO the slice's) and t into the host optimizer's; then both
 * up. */
static int cuda_push(pipe_eng *e, optim *full, char *err, size_t errlen) {
  const float *mp = gpt_params(e->su.model);
  size_t N = gpt_num_params(e->su.model);
  size_t k = optim_state_floats_for(e->su.o->opt.kind, 1);
  if (z3(e)) /* the slice alone; the tied copy comes with make_whole */
    memcpy(e->shard, mp + e->su.off[0] + e->zs.lo, e->zs.own * sizeof(float));
  for (int r = 0; r < e->su.nrg && !z3(e); r++) {
    size_t n = e->su.n[r], at = e->local[r];
    memcpy(e->shard + at, mp + e->su.off[r], n * sizeof(float));
    for (size_t j = 0; full && !e->su.zero && j < k; j++)
      memcpy(optim_state(e->hopt) + j * e->nm + at,
             optim_state(full) + j * N + e->su.off[r], n * sizeof(float));
  }
  if (full && e->su.zero)
    zslice_state_take(&e->zs, optim_state(full) + e->su.off[0], N, e->hopt);
  if (full)
    optim_set_t(e->hopt, optim_get_t(full));
  return gpt_cuda_upload_shard(e->g, e->shard, full ? e->hopt : NULL, err,
                               errlen);
}
static int cuda_load(pipe_eng *e, optim *full, char *err, size_t errlen) {
  return cuda_push(e, full, err, errlen);
}
/* The device's bytes (gpt_cuda_memory_estimate of the options it was
 * made with: what gpt_cuda_create allocated) and the slice's gradient;
 * at stage 3 the stage's arrays beside them (zslice_whole_memory). */
static void cuda_memory(pipe_eng *e, zslice_memory *held, gpt_memory *part) {
  gpt_cuda_memory_estimate(gpt_get_config(e->su.model), e->go.B, e->go.T,
                           &e->go, part);
  if (z3(e)) {
    zslice_whole_memory(&e->zw, e->zs.S, 0, part, held);
    return;
  }
  part->grads += e->su.zero ? (uint64_t)e->zs.S * 4 : 0;
  part->total = part->params + part->grads + part->optim + part->acts;
  *held = (zslice_memory){.params = part->params,
                          .grads = part->grads,
                          .optim = part->optim,
                          .peak_grads = part->grads,
                          .peak_params = part->params};
}

static const pipe_ops cuda_ops = {
    .elem = 2, /* BF16 */
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .zero_grad = cuda_zero_grad,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .output = cuda_output,
    .input_grad = cuda_input_grad,
    .grads = cuda_grads,
    .add = cuda_add,
    .scale = cuda_scale,
    .reduce = cuda_reduce,
    .sumsq = cuda_sumsq,
    .clip = cuda_clip,
    .step = cuda_step,
    .gather = cuda_gather,
    .release = cuda_release,
    .tied = cuda_tied,
    .pull = cuda_pull,
    .load = cuda_load,
    .memory = cuda_memory,
};

int pipe_cuda_create(const pipe_setup *su, const pipe_ops **ops, pipe_eng **out,
                     char *err, size_t errlen) {
  *ops = &cuda_ops;
  pipe_eng *e = calloc(1, sizeof *e);
  *out = e;
  if (!e) {
    snprintf(err, errlen, "pipeline: out of memory");
    return -1;
  }
  e->su = *su;
  e->zw = (zslice_whole){.params = 1,
                         .device = su->o->device,
                         .who = "pipeline",
                         .place = place_groups,
                         .arg = e};
  /* With ZeRO range 0 takes D S floats (its slices), the padding zero. */
  zslice_init(&e->zs, su->zero ? su->dp_ctl : NULL, su->n[0]);
  gpt_cuda_piece pc[2];
  for (int r = 0; r < su->nrg; r++) {
    e->local[r] = e->nm;
    pc[r] = (gpt_cuda_piece){su->off[r], su->n[r], e->nm};
    e->nm += r == 0 ? (size_t)e->zs.D * e->zs.S : su->n[r];
  }
  e->zw.n = e->nm;
  const pipeline_options *o = su->o;
  e->go = (gpt_cuda_options){.B = o->B,
                             .T = o->T,
                             .opt = o->opt,
                             .recompute = o->recompute,
                             .deterministic = o->deterministic,
                             .device = o->device,
                             .slots = su->nslots,
                             .layers_first = su->first,
                             .layers_last = su->last,
                             .shard_n = e->nm,
                             .pieces = pc,
                             .npieces = (size_t)su->nrg};
  if (z3(e)) { /* the gpt_cuda the slice's alone (above) */
    pc[0] = (gpt_cuda_piece){su->off[0] + e->zs.lo, e->zs.own, 0};
    e->go.shard_n = e->zs.S;
    e->go.npieces = 1;
  } else if (su->zero) {
    e->go.master_lo = e->zs.lo;
    e->go.master_n = e->zs.S;
  }
  size_t nst = su->zero ? e->zs.S : e->nm; /* the master weights' */
  optim_group whole = {0, nst, 0};
  if (!(e->shard = calloc(z3(e) ? nst : e->nm, sizeof(float)))) {
    snprintf(err, errlen, "pipeline: out of host memory for the shard");
    return -1;
  }
  if (optim_create(&o->opt, nst, &whole, 1, &e->hopt, err, errlen) != 0 ||
      gpt_cuda_create(su->model, &e->go, &e->g, err, errlen) != 0 ||
      gpt_cuda_set_stage(e->g, su->first, su->last, err, errlen) != 0)
    return -1;
  e->go.pieces = NULL; /* pc goes; only the sizes are read again */
  if (su->zero && !z3(e) &&
      !(e->gsl = cuda_alloc(e, e->zs.S * sizeof(float)))) {
    snprintf(err, errlen,
             "pipeline: out of GPU memory for the ZeRO slice's gradient "
             "(%zu floats)",
             e->zs.S);
    return -1;
  }
  place_groups(e); /* at stage 3 nowhere until the first gather */
  return cuda_push(e, NULL, err, errlen);
}

#else

int pipe_cuda_create(const pipe_setup *su, const pipe_ops **ops, pipe_eng **out,
                     char *err, size_t errlen) {
  *ops = NULL;
  *out = NULL;
  snprintf(err, errlen,
           "pipeline: this build has no CUDA engine (built without CUDA)");
  return -1;
}

#endif
