/* Tensor-parallel training on GPU ranks; see tensor_cuda.h. */
#include "tensor_cuda.h"

#include "cuda/gpt_cuda.h"
#include "pipeline/pipestream.h"
#include "tensor.h"
#include "tensor_stage.h"
#include "zero/zslice_cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tensor_cuda {
  comm *c;
  tensor_cuda_options o;
  int r, ranks;
  int D, d; /* the replicas of the shard (o.dp), this one */
  int P, s; /* the shard's stages (o.pp), this one */
  /* With stages: the step's ops in the schedule's order (2 micro), the
   * activation slots, the stream between neighbours. */
  pipeline_op *ops;
  int nslots;
  pipestream ps;
  tensor_layout *lay;
  /* The part of the shard this rank keeps: its stage's (tensor_stage.h;
   * without stages the shard). */
  tensor_stage st;
  size_t n, nrepl, full; /* the part's floats, its replicated ones, the
                            model's */
  float *tied;           /* with a tied head over stages: its gradient's sum
                            (device, st.tied_n floats) */
  /* The master weights' part of the shard: with ZeRO this rank's slice
   * over o.dp_ctl, else the whole shard (zs.D 1, zs.S n). */
  zslice zs;
  gpt_cuda *g;
  gpt_cuda_options go; /* as created (the memory estimate reads it) */
  /* A host optimizer of the master weights' size (zs.S): the staging of
   * its state for gpt_cuda_upload_shard and _download_shard. */
  optim *lopt;
  float *dev2; /* 2 device floats: a host double's sum over a group */
  float *gsl;  /* with ZeRO-1: the slice's reduced gradient (device) */
  int stale;   /* with ZeRO: the BF16 slices not gathered since the step */
  /* With ZeRO 2-3 (zg; z3: 3): the part's whole gradients (and at 3 its
   * BF16 parameters), made for a step and released after the
   * reduce-scatter (zslice_cuda.h); the gpt_cuda's are the slice's. */
  int zg, z3;
  zslice_whole zw;
  size_t ngroups; /* the model's parameter groups (gpt.h) */
};

/* gpt_cuda_tp's collectives: the group's, on device buffers. */
static int tp_allreduce(void *arg, float *buf, size_t n, char *err,
                        size_t errlen) {
  return comm_allreduce_sum(arg, buf, n, err, errlen);
}
static int tp_allgather(void *arg, const float *send, float *recv, size_t n,
                        char *err, size_t errlen) {
  return comm_allgather(arg, send, recv, n, err, errlen);
}

/* *x summed over c (the group or the replicas), as
 * comm_allreduce_sum_double carries it (two floats), through device
 * memory: NCCL moves no host memory. */
static int sum_double(tensor_cuda *t, comm *c, double *x, char *err,
                      size_t errlen) {
  float hl[2];
  hl[0] = (float)*x;
  hl[1] = (float)(*x - (double)hl[0]);
  cudaError_t e = cudaMemcpy(t->dev2, hl, sizeof hl, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    if (comm_allreduce_sum(c, t->dev2, 2, err, errlen) != 0)
      return -1;
    e = cudaMemcpy(hl, t->dev2, sizeof hl, cudaMemcpyDeviceToHost);
  }
  if (e != cudaSuccess) {
    snprintf(err, errlen, "tensor_cuda: a sum: %s", cudaGetErrorString(e));
    return -1;
  }
  *x = (double)hl[0] + (double)hl[1];
  return 0;
}

/* What the CUDA engine's tensor parallel takes: 0, or -1 with err. */
static int check(comm *c, const gpt_config *cfg, const tensor_cuda_options *o,
                 char *err, size_t errlen) {
  int ranks = comm_size(c), D = o->dp ? comm_size(o->dp) : 1;
  if (comm_backend_of(c) != COMM_NCCL ||
      (o->dp && comm_backend_of(o->dp) != COMM_NCCL)) {
    snprintf(err, errlen,
             "tensor parallel on GPUs needs NCCL communicators (the group "
             "and its replicas)");
    return -1;
  }
  if (D > 1 && o->zero_stage > 0 &&
      (!o->dp_ctl || comm_size(o->dp_ctl) != D ||
       comm_rank(o->dp_ctl) != comm_rank(o->dp))) {
    snprintf(err, errlen,
             "tensor_cuda: ZeRO over %d replicas needs their MPI "
             "communicator (dp_ctl) in the same order",
             D);
    return -1;
  }
  if (o->micro < 1) {
    snprintf(err, errlen, "tensor_cuda: %d micro-batches", o->micro);
    return -1;
  }
  /* One replica: nothing to shard over (tensor_create's rule). Stage 3:
   * the part's whole arrays made for each step (tensor_cuda.h). */
  if (D > 1 && o->zero_stage != 3 &&
      zslice_check_stage(o->zero_stage, "tensor parallel on GPUs", err,
                         errlen) != 0)
    return -1;
  int P = o->pp ? comm_size(o->pp) : 1;
  if (P > 1 &&
      (comm_backend_of(o->pp) != COMM_NCCL || !o->pp_ctl ||
       comm_size(o->pp_ctl) != P || comm_rank(o->pp_ctl) != comm_rank(o->pp))) {
    snprintf(err, errlen,
             "tensor parallel on GPUs: the stages need an NCCL communicator "
             "and its MPI twin (pp_ctl) in the same order");
    return -1;
  }
  if (tensor_check(cfg, ranks, ranks, err, errlen) != 0)
    return -1;
  return P > 1 ? pipeline_check(cfg, P, P, err, errlen) : 0;
}

/* The device's memory, as pipestream.h takes it. */
static void *dev_alloc(void *arg, size_t bytes) {
  return gpt_cuda_alloc(((tensor_cuda *)arg)->g, bytes);
}
static void dev_free(void *arg, void *buf) {
  (void)arg;
  gpt_cuda_free(buf);
}
static int dev_copy(void *arg, void *dst, const void *src, size_t bytes,
                    char *err, size_t errlen) {
  return gpt_cuda_copy(((tensor_cuda *)arg)->g, dst, src, bytes, err, errlen);
}

/* With stages: the schedule, the engine's stage and the exchange's
 * buffers. 0, or -1 with err. */
static int make_stages(tensor_cuda *t, const gpt_config *cfg, char *err,
                       size_t errlen) {
  int L = cfg->n_layer / t->P;
  pipestream_mem mem = {dev_alloc, dev_free, dev_copy, t};
  if (gpt_cuda_set_stage(t->g, t->s * L, (t->s + 1) * L, err, errlen) != 0)
    return -1;
  if (t->st.tied_n && !(t->tied = dev_alloc(t, t->st.tied_n * sizeof(float)))) {
    snprintf(err, errlen, "tensor_cuda: out of device memory");
    return -1;
  }
  return pipestream_init(&t->ps, t->o.pp,
                         (size_t)t->o.B * t->o.T * cfg->n_embd * 2, &mem, err,
                         errlen);
}

/* With ZeRO 2-3: every group where the whole arrays are (a shard's
 * groups all start at its float 0), or nowhere while they are not. */
static void place_whole(void *arg) {
  tensor_cuda *t = arg;
  for (size_t i = 0; i < t->ngroups; i++) {
    if (t->z3)
      gpt_cuda_set_group_params(t->g, i, t->zw.wp);
    gpt_cuda_set_group_grads(t->g, i, t->zw.wg);
  }
}

/* The engine in its tensor-shard mode over t's layout, and its weights.
 * 0, or -1 with err. */
static int make_engine(tensor_cuda *t, const gpt *model, char *err,
                       size_t errlen) {
  size_t nt = gpt_tensor_count(model);
  int L = gpt_get_config(model)->n_layer / t->P;
  gpt_cuda_tp_tensor *tt = calloc(nt, sizeof *tt);
  size_t DS = (size_t)t->zs.D * t->zs.S; /* the part, padded (ZeRO) */
  float *buf = calloc(DS, sizeof *buf);
  float *shard = malloc(t->st.nshard * sizeof *shard + 1);
  int rc = -1;
  if (!tt || !buf || !shard) {
    snprintf(err, errlen, "tensor_cuda: out of memory");
    goto out;
  }
  for (size_t i = 0; i < nt; i++) /* the stage's tensors; none elsewhere */
    tt[i] = (gpt_cuda_tp_tensor){t->st.at[i], t->st.numel[i]};
  gpt_cuda_options go = {.B = t->o.B,
                         .T = t->o.T,
                         .opt = t->o.opt,
                         .deterministic = t->o.deterministic,
                         .device = comm_device(t->c),
                         .slots = t->nslots,
                         /* With stages, the stage's layers' activations
                          * alone (0, 0: all). */
                         .layers_first = t->P > 1 ? t->s * L : 0,
                         .layers_last = t->P > 1 ? (t->s + 1) * L : 0,
                         .tp = {.ranks = t->ranks,
                                .rank = t->r,
                                .tensors = tt,
                                .n = t->n,
                                .allreduce = tp_allreduce,
                                .allgather = tp_allgather,
                                .arg = t->c}};
  gpt_cuda_piece pc = {t->zs.lo, t->zs.own, 0};
  if (t->z3) { /* every array the slice's (gpt_cuda.h's ZeRO-3) */
    go.pieces = &pc;
    go.npieces = 1;
    go.shard_n = t->zs.S;
  } else if (t->zs.D > 1) { /* the master weights of the slice alone, at
                               2 its gradients too */
    go.shard_lo = t->zs.lo;
    go.shard_n = t->zs.S;
    go.padded = DS;
    go.grad_shard = t->zg;
  }
  if (gpt_cuda_create(model, &go, &t->g, err, errlen) != 0)
    goto out;
  t->go = go;
  t->go.tp.tensors = NULL; /* tt and pc go; only the sizes are read again */
  t->go.pieces = NULL;
  if (!(t->dev2 = gpt_cuda_alloc(t->g, 2 * sizeof(float))) ||
      (t->zs.D > 1 && !t->zg &&
       !(t->gsl = gpt_cuda_alloc(t->g, t->zs.S * sizeof(float))))) {
    snprintf(err, errlen, "tensor_cuda: out of device memory");
    goto out;
  }
  tensor_layout_take(t->lay, t->r, gpt_params((gpt *)model), shard);
  tensor_stage_take(&t->st, shard, buf);
  rc = gpt_cuda_upload_shard(t->g, t->z3 ? buf + t->zs.lo : buf, NULL, err,
                             errlen);
  if (rc == 0 && t->P > 1)
    rc = make_stages(t, gpt_get_config(model), err, errlen);
out:
  free(tt);
  free(shard);
  free(buf);
  return rc;
}

int tensor_cuda_create(comm *c, const gpt *model, const tensor_cuda_options *o,
                       tensor_cuda **out, char *err, size_t errlen) {
  *out = NULL;
  int ranks = comm_size(c);
  if (check(c, gpt_get_config(model), o, err, errlen) != 0)
    return -1;
  tensor_cuda *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "tensor_cuda: out of memory");
    return -1;
  }
  t->c = c;
  t->o = *o;
  t->ranks = ranks;
  t->r = comm_rank(c);
  t->full = gpt_num_params(model);
  t->ngroups = gpt_group_count(model);
  t->D = o->dp ? comm_size(o->dp) : 1;
  t->d = o->dp ? comm_rank(o->dp) : 0;
  t->P = o->pp ? comm_size(o->pp) : 1;
  t->s = o->pp ? comm_rank(o->pp) : 0;
  t->nslots = 1;
  if (t->P > 1) {
    if (!(t->ops = malloc(2 * (size_t)o->micro * sizeof *t->ops))) {
      snprintf(err, errlen, "tensor_cuda: out of memory");
      goto fail;
    }
    t->nslots =
        pipeline_schedule_ops(o->schedule, t->P, t->s, o->micro, t->ops);
  }
  optim_group whole;
  if (tensor_layout_create(model, ranks, &t->lay, err, errlen) != 0)
    goto fail;
  if (tensor_stage_init(&t->st, model, t->lay, t->s, t->P, err, errlen) != 0)
    goto fail;
  t->n = t->st.n;
  t->nrepl = t->st.nrepl;
  zslice_init(&t->zs, t->D > 1 && o->zero_stage > 0 ? o->dp_ctl : NULL, t->n);
  t->zg = t->zs.D > 1 && o->zero_stage >= 2;
  t->z3 = t->zs.D > 1 && o->zero_stage == 3;
  t->zw = (zslice_whole){.n = (size_t)t->zs.D * t->zs.S,
                         .params = t->z3,
                         .device = comm_device(c),
                         .who = "tensor_cuda",
                         .place = place_whole,
                         .arg = t};
  whole = (optim_group){0, t->zs.S, 1};
  if (optim_create(&o->opt, t->zs.S, &whole, 1, &t->lopt, err, errlen) != 0 ||
      make_engine(t, model, err, errlen) != 0)
    goto fail;
  *out = t;
  return 0;
fail:
  tensor_cuda_destroy(t);
  return -1;
}

void tensor_cuda_destroy(tensor_cuda *t) {
  if (!t)
    return;
  pipestream_release(&t->ps);
  free(t->ops);
  zslice_whole_release(&t->zw, t->g);
  gpt_cuda_destroy(t->g);
  gpt_cuda_free(t->dev2);
  gpt_cuda_free(t->gsl);
  gpt_cuda_free(t->tied);
  optim_destroy(t->lopt);
  tensor_stage_free(&t->st);
  tensor_layout_destroy(t->lay);
  free(t);
}

void tensor_cuda_sizes(const tensor_cuda *t, size_t *local, size_t *full) {
  *local = t->n;
  *full = t->full;
}

int tensor_cuda_slots(const tensor_cuda *t) { return t->nslots; }

void tensor_cuda_memory(const tensor_cuda *t, const gpt_config *cfg,
                        gpt_memory *part, zslice_memory *held) {
  gpt_cuda_memory_estimate(cfg, t->go.B, t->go.T, &t->go, part);
  part->grads += t->gsl ? (uint64_t)t->zs.S * 4 : 0;
  part->grads += t->tied ? (uint64_t)t->st.tied_n * 4 : 0;
  part->acts += t->P > 1 ? (uint64_t)pipestream_bytes(&t->ps) : 0;
  if (t->zg) { /* the whole arrays beside the slice's in the step */
    zslice_whole_memory(&t->zw, t->zs.S,
                        t->tied ? (uint64_t)t->st.tied_n * 4 : 0, part, held);
    return;
  }
  part->total = part->params + part->grads + part->optim + part->acts;
  *held = (zslice_memory){.params = part->params,
                          .grads = part->grads,
                          .optim = part->optim,
                          .peak_grads = part->grads,
                          .peak_params = part->params};
}

/* Before a step's passes: with ZeRO 1-2 after an update every rank's
 * BF16 slice, in place (the next forward reads the whole part), and at
 * 2 the whole gradients made; at 3 both whole arrays made, the BF16
 * slices gathered into them. Then the gradients the passes add to
 * zeroed. */
static int make_whole(tensor_cuda *t, char *err, size_t errlen) {
  if (t->z3
          ? zslice_whole_gather(&t->zw, t->g, t->o.dp, &t->zs, err, errlen) != 0
          : t->stale &&
                zslice_cuda_gather(t->g, t->o.dp, &t->zs, err, errlen) != 0)
    return -1;
  t->stale = 0;
  if (!t->zg)
    return gpt_cuda_zero_grad(t->g, err, errlen);
  return zslice_whole_make(&t->zw, err, errlen) != 0 ||
                 zslice_whole_zero_grad(&t->zw, t->g, err, errlen) != 0
             ? -1
             : 0;
}

/* The part's gradients as the passes leave them: with ZeRO 2-3 the
 * whole array made for the step, else the gpt_cuda's. */
static float *part_grads(tensor_cuda *t) {
  return t->zg ? t->zw.wg : gpt_cuda_grads_ptr(t->g);
}

/* The mean over the replicas (o.dp) of the gradients: with ZeRO this
 * rank's slice of it, reduce-scattered into gsl and put at its place in
 * the gradients (where the update reads it), else all of them; then rank
 * 0's replicated gradients for the group (tensor.h says why): all of
 * them, or their part in the slice, the same on every rank of the
 * group. */
static int dp_mean(tensor_cuda *t, char *err, size_t errlen) {
  float *g = gpt_cuda_grads_ptr(t->g), inv = 1.0f / (float)t->D;
  size_t at = 0, nr = t->nrepl;
  if (t->zs.D > 1) {
    /* At 2-3 straight into the gpt_cuda's, the slice's own. */
    if (t->zg ? zslice_whole_reduce(&t->zw, t->g, t->o.dp, &t->zs, inv, err,
                                    errlen) != 0
              : zslice_cuda_reduce(t->g, t->o.dp, &t->zs, t->gsl, inv, err,
                                   errlen) != 0)
      return -1;
    at = t->zs.lo;
    nr = at < nr ? nr - at : 0;
    nr = nr < t->zs.own ? nr : t->zs.own;
    at = t->zg ? 0 : at; /* there the slice's lo is their float 0 */
  } else if (t->D > 1 &&
             (gpt_cuda_synchronize(t->g, err, errlen) != 0 ||
              comm_allreduce_sum(t->o.dp, g, t->n, err, errlen) != 0 ||
              gpt_cuda_scale_grads(t->g, inv, err, errlen) != 0 ||
              gpt_cuda_synchronize(t->g, err, errlen) != 0)) {
    return -1;
  }
  return nr ? comm_broadcast(t->c, g + at, nr * sizeof(float), 0, err, errlen)
            : 0;
}

/* One op of the stage's schedule: micro-batch o->mb's forward (from
 * the ids on the first stage, else the stream received; to the loss,
 * added to *sum, on the last, else the stream sent on) or its backward
 * (from the loss on the last stage, else the gradient received; the
 * input's gradient sent back but on the first). */
static int run_op(tensor_cuda *t, const pipeline_op *o, const uint32_t *inputs,
                  const uint32_t *targets, double *sum, char *err,
                  size_t errlen) {
  size_t at = (size_t)o->mb * t->o.B * t->o.T;
  int firsts = t->s == 0, lasts = t->s == t->P - 1, m = t->o.micro;
  if (!o->backward) {
    float l = 0;
    if ((!firsts && pipestream_recv(&t->ps, 0, err, errlen) != 0) ||
        gpt_cuda_set_slot(t->g, o->mb % t->nslots, err, errlen) != 0 ||
        gpt_cuda_forward_stage(t->g, firsts ? inputs + at : NULL,
                               firsts ? NULL : t->ps.xbuf,
                               lasts ? targets + at : NULL, t->o.B, t->o.T,
                               lasts ? &l : NULL, err, errlen) != 0 ||
        gpt_cuda_synchronize(t->g, err, errlen) != 0)
      return -1;
    *sum += l / m;
    return lasts ? 0
                 : pipestream_send(&t->ps, gpt_cuda_stage_output(t->g), 1, err,
                                   errlen);
  }
  if ((!lasts && pipestream_recv(&t->ps, 1, err, errlen) != 0) ||
      gpt_cuda_set_slot(t->g, o->mb % t->nslots, err, errlen) != 0 ||
      gpt_cuda_backward_stage(t->g, lasts ? NULL : t->ps.xbuf, 1.0f / (float)m,
                              err, errlen) != 0 ||
      gpt_cuda_synchronize(t->g, err, errlen) != 0)
    return -1;
  return firsts ? 0
                : pipestream_send(&t->ps, gpt_cuda_stage_input_grad(t->g), 0,
                                  err, errlen);
}

/* A tied head over stages: the first stage's gradient of the embedding
 * (the lookups') and the last's (the head's) summed over pp into both
 * (the stages between add zeros), so that both copies take the same
 * update. */
static int sum_tied(tensor_cuda *t, char *err, size_t errlen) {
  if (!t->st.tied_n)
    return 0;
  cudaStream_t cs = (cudaStream_t)gpt_cuda_stream(t->g);
  float *g = part_grads(t) + t->st.tied_at;
  size_t bytes = t->st.tied_n * sizeof(float);
  cudaError_t e = t->st.has_tied ? cudaMemcpyAsync(t->tied, g, bytes,
                                                   cudaMemcpyDeviceToDevice, cs)
                                 : cudaMemsetAsync(t->tied, 0, bytes, cs);
  if (e != cudaSuccess || gpt_cuda_synchronize(t->g, err, errlen) != 0 ||
      comm_allreduce_sum(t->o.pp, t->tied, t->st.tied_n, err, errlen) != 0)
    goto fail;
  if (t->st.has_tied)
    e = cudaMemcpyAsync(g, t->tied, bytes, cudaMemcpyDeviceToDevice, cs);
  if (e != cudaSuccess)
    goto fail;
  return gpt_cuda_synchronize(t->g, err, errlen);
fail:
  if (e != cudaSuccess)
    snprintf(err, errlen, "tensor_cuda: the tied gradient: %s",
             cudaGetErrorString(e));
  return -1;
}

/* The micro-batches through the stages (the schedule's ops), then the
 * tied embedding's gradient summed and the last stage's loss sum for
 * all. */
static int run_stages(tensor_cuda *t, const uint32_t *inputs,
                      const uint32_t *targets, double *sum, char *err,
                      size_t errlen) {
  for (int i = 0; i < 2 * t->o.micro; i++)
    if (run_op(t, &t->ops[i], inputs, targets, sum, err, errlen) != 0)
      return -1;
  if (t->s != t->P - 1)
    *sum = 0;
  return pipestream_drain(&t->ps, err, errlen) != 0 ||
                 sum_tied(t, err, errlen) != 0 ||
                 sum_double(t, t->o.pp, sum, err, errlen) != 0
             ? -1
             : 0;
}

int tensor_cuda_forward_backward(tensor_cuda *t, const uint32_t *inputs,
                                 const uint32_t *targets, double *loss,
                                 char *err, size_t errlen) {
  size_t BT = (size_t)t->o.B * t->o.T;
  int m = t->o.micro;
  double sum = 0;
  if (make_whole(t, err, errlen) != 0)
    return -1;
  if (t->P > 1 && run_stages(t, inputs, targets, &sum, err, errlen) != 0)
    return -1;
  for (int k = 0; k < m && t->P == 1; k++) {
    float l = 0;
    if (gpt_cuda_forward_train(t->g, inputs + k * BT, targets + k * BT, t->o.B,
                               t->o.T, &l, err, errlen) != 0 ||
        gpt_cuda_backward(t->g, 1.0f / (float)m, err, errlen) != 0)
      return -1;
    sum += l / m; /* as trainkit_forward_backward sums them */
  }
  /* The replicas' mean (after which ZeRO 2-3's whole arrays go); then
   * rank 0's loss for the group (as its replicated gradients). */
  int rc = dp_mean(t, err, errlen);
  /* Not after a failed collective: NCCL's kernel may still read the
   * arrays, and cudaFree would wait on it where the gang must abort;
   * tensor_cuda_destroy frees them. */
  if (rc == 0)
    zslice_whole_release(&t->zw, t->g);
  if (rc != 0 || (t->D > 1 && sum_double(t, t->o.dp, &sum, err, errlen) != 0))
    return -1;
  double x = t->r == 0 ? sum / t->D : 0.0;
  if (sum_double(t, t->c, &x, err, errlen) != 0)
    return -1;
  *loss = x;
  return 0;
}

/* The sum of squares of the gradients [a, b) of the part added to *ss
 * (with ZeRO 2-3 the gpt_cuda's are the slice's, from its lo). */
static int add_sumsq(tensor_cuda *t, size_t a, size_t b, double *ss, char *err,
                     size_t errlen) {
  double x = 0;
  size_t base = t->zg ? t->zs.lo : 0;
  if (a >= b)
    return 0;
  if (gpt_cuda_grad_sumsq(t->g, a - base, b - a, &x, err, errlen) != 0)
    return -1;
  *ss += x;
  return 0;
}

int tensor_cuda_clip_grad_norm(tensor_cuda *t, double max_norm, double *norm,
                               char *err, size_t errlen) {
  /* This rank's gradients, the slice's with ZeRO; the replicated ones
   * counted once, on rank 0 of the group, and a tied embedding once, on
   * the first stage. */
  size_t lo = t->zs.lo, hi = t->zs.lo + t->zs.own, r[2][2];
  size_t from = t->r == 0 || t->nrepl <= lo ? lo : t->nrepl;
  int nr = tensor_stage_once(&t->st, t->P > 1 && t->s == t->P - 1, from, hi, r);
  double ss = 0;
  for (int k = 0; k < nr; k++)
    if (add_sumsq(t, r[k][0], r[k][1], &ss, err, errlen) != 0)
      return -1;
  if (sum_double(t, t->c, &ss, err, errlen) != 0 ||
      (t->P > 1 && sum_double(t, t->o.pp, &ss, err, errlen) != 0) ||
      (t->zs.D > 1 && sum_double(t, t->o.dp, &ss, err, errlen) != 0))
    return -1;
  *norm = sqrt(ss);
  gpt_cuda_set_clip(t->g, *norm, max_norm);
  return 0;
}

int tensor_cuda_step(tensor_cuda *t, float lr, char *err, size_t errlen) {
  t->stale = t->zs.D > 1; /* the update wrote this rank's slice alone */
  return gpt_cuda_step(t->g, lr, err, errlen);
}

/* The state floats a parameter has (AdamW 2, Lion 1). */
static size_t per_param(const tensor_cuda *t) {
  return optim_state_floats(t->lopt) / t->zs.S;
}

/* Rank rr's shards, buf (1 + k arrays of n), into rank 0's model and
 * full's state (NULL: the weights alone). */
static void place(tensor_cuda *t, int rr, const float *buf, gpt *model,
                  optim *full, size_t k) {
  tensor_layout_place(t->lay, rr, buf, gpt_params(model));
  for (size_t j = 0; full && j < k; j++)
    tensor_layout_place(t->lay, rr, buf + (1 + j) * t->st.nshard,
                        optim_state(full) + j * t->full);
}

/* Each other rank's shards to rank 0 in turn through dev (device, bytes):
 * the group's NCCL communicator moves device memory only. */
static int collect(tensor_cuda *t, float *buf, void *dev, size_t bytes,
                   gpt *model, optim *full, size_t k, char *err,
                   size_t errlen) {
  for (int rr = 1; rr < t->ranks; rr++) {
    cudaError_t e = cudaSuccess;
    if (t->r == rr)
      e = cudaMemcpy(dev, buf, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      snprintf(err, errlen, "tensor_cuda: gather: %s", cudaGetErrorString(e));
      return -1;
    }
    if (comm_broadcast(t->c, dev, bytes, rr, err, errlen) != 0)
      return -1;
    if (t->r == 0) {
      e = cudaMemcpy(buf, dev, bytes, cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) {
        snprintf(err, errlen, "tensor_cuda: gather: %s", cudaGetErrorString(e));
        return -1;
      }
      place(t, rr, buf, model, full, k);
    }
  }
  return 0;
}

/* This rank's shards (n floats) and with k their optimizer state (k
 * arrays of n) into buf, gathered over the replicas (dp_ctl) where ZeRO
 * slices them: collective there. 0, or -1 with err. */
static int pull(tensor_cuda *t, float *buf, size_t k, char *err,
                size_t errlen) {
  optim *st = k ? t->lopt : NULL;
  if (t->zs.D == 1) {
    if (gpt_cuda_download_shard(t->g, buf, st, err, errlen) != 0)
      return -1;
    if (k)
      memcpy(buf + t->n, optim_state(t->lopt), k * t->n * sizeof(float));
    return 0;
  }
  /* The download's staging (the padded shard, the slice at lo) and the
   * gather's scratch, D S floats each. */
  size_t DS = (size_t)t->zs.D * t->zs.S;
  float *win = malloc(2 * DS * sizeof(float));
  if (!win) {
    snprintf(err, errlen, "tensor_cuda: out of memory gathering the slices");
    return -1;
  }
  int rc = gpt_cuda_download_shard(t->g, win, st, err, errlen);
  /* At 3 the gpt_cuda's shard is the slice: at win's float 0. */
  if (rc == 0)
    rc = zslice_gather_to(&t->zs, t->z3 ? win : win + t->zs.lo, buf, win + DS,
                          err, errlen);
  if (rc == 0 && k)
    rc = zslice_state_gather(&t->zs, t->lopt, buf + t->n, err, errlen);
  free(win);
  return rc;
}

int tensor_cuda_gather(tensor_cuda *t, gpt *model, int with_state, optim *full,
                       char *err, size_t errlen) {
  size_t k = with_state ? per_param(t) : 0, n = t->n, ns = t->st.nshard;
  size_t bytes = (1 + k) * ns * sizeof(float);
  /* Replica 0's group of the first stage gathers, after the other
   * stages sent it their parts; the other replicas hold the same weights
   * and state, or with ZeRO send their slices to their own first. */
  if (t->d > 0 && t->zs.D == 1)
    return 0;
  float *buf = malloc((1 + k) * n * sizeof(float) + 1);
  float *sbuf = t->P > 1 ? malloc(bytes) : buf;
  int rc = buf && sbuf ? 0 : -1;
  if (rc != 0)
    snprintf(err, errlen, "tensor_cuda: out of memory gathering the shards");
  if (rc == 0)
    rc = pull(t, buf, k, err, errlen);
  if (rc == 0 && t->d == 0 && t->P > 1)
    rc = tensor_stage_join(&t->st, t->o.pp_ctl, buf, k, sbuf, err, errlen);
  if (sbuf != buf)
    free(buf);
  if (rc != 0 || t->d > 0 || t->s > 0) {
    free(sbuf);
    return rc;
  }
  void *dev = NULL;
  if (t->r == 0 && with_state &&
      (!full || optim_state_floats(full) != k * t->full)) {
    snprintf(err, errlen,
             "tensor_cuda: gather: no optimizer of the whole "
             "model for the state");
    rc = -1;
  } else if (!(dev = gpt_cuda_alloc(t->g, bytes))) {
    snprintf(err, errlen, "tensor_cuda: out of memory gathering the shards");
    rc = -1;
  }
  if (rc == 0 && t->r == 0) {
    place(t, 0, sbuf, model, k ? full : NULL, k);
    if (k)
      optim_set_t(full, gpt_cuda_get_t(t->g));
  }
  if (rc == 0)
    rc = collect(t, sbuf, dev, bytes, model, k ? full : NULL, k, err, errlen);
  gpt_cuda_free(dev);
  free(sbuf);
  return rc;
}

int tensor_cuda_load(tensor_cuda *t, const gpt *model, optim *full, char *err,
                     size_t errlen) {
  size_t k = per_param(t), n = t->n;
  if (optim_state_floats(full) != k * t->full) {
    snprintf(err, errlen,
             "tensor_cuda: the optimizer is not the whole model's");
    return -1;
  }
  /* The padded part (zeros past n) and the part's state, of which the
   * optimizer keeps its slice (all of it without ZeRO), through the
   * shard's floats. */
  float *buf = calloc((size_t)t->zs.D * t->zs.S, sizeof *buf);
  float *ls = malloc(k * n * sizeof *ls + 1);
  float *shard = malloc(t->st.nshard * sizeof *shard + 1);
  int rc = -1;
  if (!buf || !ls || !shard) {
    snprintf(err, errlen, "tensor_cuda: out of memory");
    goto out;
  }
  tensor_layout_take(t->lay, t->r, gpt_params((gpt *)model), shard);
  tensor_stage_take(&t->st, shard, buf);
  for (size_t j = 0; j < k; j++) {
    tensor_layout_take(t->lay, t->r, optim_state(full) + j * t->full, shard);
    tensor_stage_take(&t->st, shard, ls + j * n);
  }
  zslice_state_take(&t->zs, ls, n, t->lopt);
  optim_set_t(t->lopt, optim_get_t(full));
  rc = gpt_cuda_upload_shard(t->g, t->z3 ? buf + t->zs.lo : buf, t->lopt, err,
                             errlen);
  t->stale = 0; /* the upload made the BF16 copy of the whole part */
out:
  free(shard);
  free(ls);
  free(buf);
  return rc;
}
