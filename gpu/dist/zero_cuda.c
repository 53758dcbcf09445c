/*
 * zero_cuda: ZeRO stages 0-2 on GPU ranks over NCCL (zero_cuda.h).
 * DAGRUN_ZERO_CUDA_GPU: this build has the CUDA engine and NCCL; without
 * it, the functions say so (at the end of the file).
 */
#include "zero_cuda.h"

#include "comm_timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DAGRUN_ZERO_CUDA_GPU
#include <cuda_runtime_api.h>

#include "gpt_cuda.h"

struct zero_cuda {
  zero *z;
  gpt *model;
  comm *ctl, *nccl;
  gpt_cuda *g;
  gpt_cuda_options o;
  zero_shape sh;
  gpt_memory mem;
  char name[256];
  comm_timer tm; /* the step's time in comm calls */
  /* The gradient's buckets (zero_shape's bf, nbuckets), as zero.c's. */
  float *send[ZERO_INFLIGHT]; /* stage 2: N*bf device floats each */
  comm_req *req[ZERO_INFLIGHT];
  int nio, cur; /* in flight; the next slot */
  size_t next;  /* buckets >= next have been started (counting down) */
  int synced;   /* the engine's stream was waited for since its last
                   gradient writes were queued */
  int in_hook, early, hook_rc;
  char hook_err[256];
};


int zero_cuda_available(char *why, size_t whylen) {
  return gpt_cuda_available(why, whylen);
}

int zero_cuda_create(zero *z, gpt *model, comm *ctl, comm *nccl,
                     const zero_cuda_options *o, zero_cuda **out, char *err,
                     size_t errlen) {
  *out = NULL;
  zero_shape sh;
  zero_shape_get(z, &sh);
  if (sh.stage > 2) {
    snprintf(err, errlen,
             "zero: stage 3 on GPUs is not built (the CUDA engine cannot "
             "gather a layer's parameters inside forward and backward yet); "
             "use zero_stage 0, 1 or 2 with device: cuda, or stage 3 on CPU "
             "ranks (device: cpu)");
    return -1;
  }
  if (comm_backend_of(nccl) != COMM_NCCL || comm_size(nccl) != sh.world ||
      comm_rank(nccl) != sh.rank) {
    snprintf(err, errlen,
             "zero: the GPU ranks need an NCCL communicator of the gang's "
             "%d ranks (got %s, rank %d of %d)",
             sh.world, comm_backend_name(comm_backend_of(nccl)),
             comm_rank(nccl), comm_size(nccl));
    return -1;
  }
  zero_cuda *zc = calloc(1, sizeof *zc);
  if (!zc) {
    snprintf(err, errlen, "zero: out of memory");
    return -1;
  }
  zc->z = z;
  zc->model = model;
  zc->ctl = ctl;
  zc->nccl = nccl;
  zc->sh = sh;
  zc->o = (gpt_cuda_options){.B = o->B,
                             .T = o->T,
                             .opt = o->opt,
                             .recompute = (gpt_recompute)o->recompute,
                             .deterministic = o->deterministic,
                             .device = comm_device(nccl)};
  /* Stage 0 keeps everything whole; stages 1-2 the slice, with room for
   * the N slices of the in-place collectives. */
  zc->o.shard_lo = sh.stage == 0 ? 0 : sh.lo;
  zc->o.shard_n = sh.stage == 0 ? 0 : sh.S;
  zc->o.padded = sh.stage == 0 ? sh.n_params : sh.S * (size_t)sh.world;
  gpt_cuda_memory_estimate(gpt_get_config(model), zc->o.B, zc->o.T, &zc->o,
                           &zc->mem);
  char e2[256];
  if (gpt_cuda_device_name(zc->o.device, zc->name, sizeof zc->name, e2,
                           sizeof e2) != 0)
    snprintf(zc->name, sizeof zc->name, "GPU %d", zc->o.device);
  if (gpt_cuda_create(model, &zc->o, &zc->g, err, errlen) != 0 ||
      gpt_cuda_upload(zc->g, model, zero_optim(z), err, errlen) != 0) {
    zero_cuda_destroy(zc);
    return -1;
  }
  /* Stage 2 packs a bucket's N pieces into a send buffer of its own;
   * stages 0-1 all-reduce the gradient array in place. */
  for (int i = 0; sh.stage == 2 && i < ZERO_INFLIGHT; i++) {
    size_t bytes = sh.bf * (size_t)sh.world * sizeof(float);
    cudaError_t e = cudaMalloc((void **)&zc->send[i], bytes);
    if (e != cudaSuccess) {
      zc->send[i] = NULL;
      snprintf(err, errlen,
               "zero: %s: out of GPU memory for the gradient buckets (%d x "
               "%zu bytes: %s); a smaller bucket_floats needs less",
               zc->name, ZERO_INFLIGHT, bytes, cudaGetErrorString(e));
      zero_cuda_destroy(zc);
      return -1;
    }
  }
  *out = zc;
  return 0;
}

void zero_cuda_destroy(zero_cuda *zc) {
  if (!zc)
    return;
  for (int i = 0; i < ZERO_INFLIGHT; i++)
    if (zc->send[i])
      cudaFree(zc->send[i]);
  gpt_cuda_destroy(zc->g);
  free(zc);
}

/* ---- Buckets (zero.h: zero_shape's bf and nbuckets) ----
 * Started from the engine's grad hook as soon as they are final, in
 * zero.c's order (from the last); the collectives run on the NCCL
 * communicator's stream while the engine's computes the rest of
 * backward. A collective reads gradients the engine's stream wrote: the
 * bucket waits for that stream first (gpt_cuda_synchronize); the engine
 * reads what a collective wrote only after zero_cuda_step has waited for
 * every bucket. */

/* Waits for the oldest bucket in flight. */
static int bucket_wait_one(zero_cuda *zc, char *err, size_t errlen) {
  int slot = (zc->cur - zc->nio + ZERO_INFLIGHT) % ZERO_INFLIGHT;
  comm_req *req = zc->req[slot];
  zc->req[slot] = NULL;
  zc->nio--;
  return TIMED(&zc->tm, comm_wait(zc->nccl, req, err, errlen));
}

/* Starts bucket b: stage 2 packs shard-local [b*bf, ...) of every rank's
 * shard (on the engine's stream, after the gradients it packs) and
 * reduce-scatters it into the rank's own slice of the gradient array;
 * stages 0-1 all-reduce the flat range [b*bf, ...) in place. */
static int bucket_start(zero_cuda *zc, size_t b, char *err, size_t errlen) {
  const zero_shape *sh = &zc->sh;
  if (zc->nio == ZERO_INFLIGHT && bucket_wait_one(zc, err, errlen) != 0)
    return -1;
  int slot = zc->cur;
  float *grads = gpt_cuda_grads_ptr(zc->g);
  size_t off = b * sh->bf;
  size_t n = (sh->stage == 2 ? sh->S : sh->n_params) - off;
  if (n > sh->bf)
    n = sh->bf;
  if (sh->stage == 2) {
    /* The padding past the model is zero (gpt_cuda_zero_grad clears the
     * padded array), so every piece is n floats of the array. */
    cudaStream_t st = (cudaStream_t)gpt_cuda_stream(zc->g);
    for (int q = 0; q < sh->world; q++) {
      cudaError_t e = cudaMemcpyAsync(
          zc->send[slot] + (size_t)q * n, grads + (size_t)q * sh->S + off,
          n * sizeof(float), cudaMemcpyDeviceToDevice, st);
      if (e != cudaSuccess) {
        snprintf(err, errlen, "zero: packing gradient bucket %zu: %s", b,
                 cudaGetErrorString(e));
        return -1;
      }
    }
    zc->synced = 0;
  }
  if (!zc->synced && gpt_cuda_synchronize(zc->g, err, errlen) != 0)
    return -1;
  zc->synced = 1;
  int rc;
  if (sh->stage == 2)
    rc = TIMED(&zc->tm, comm_ireduce_scatter_sum(zc->nccl, zc->send[slot],
                                                 grads + sh->lo + off, n,
                                                 &zc->req[slot], err, errlen));
  else
    rc = TIMED(&zc->tm, comm_iallreduce_sum(zc->nccl, grads + off, n,
                                            &zc->req[slot], err, errlen));
  if (rc != 0)
    return -1;
  zc->cur = (zc->cur + 1) % ZERO_INFLIGHT;
  zc->nio++;
  zc->early += zc->in_hook;
  return 0;
}

/* Starts every bucket not yet started that is final from final_from. */
static int buckets_ready(zero_cuda *zc, size_t final_from, char *err,
                         size_t errlen) {
  size_t first =
      zero_bucket_first_final(zc->sh.bf, zc->sh.nbuckets, final_from);
  while (zc->next > first) {
    if (bucket_start(zc, zc->next - 1, err, errlen) != 0)
      return -1;
    zc->next--;
  }
  return 0;
}

static void grad_hook(void *arg, size_t final_from) {
  zero_cuda *zc = arg;
  /* The engine queued more gradient writes since the last call. */
  zc->synced = 0;
  /* The last call (final_from 0) comes when backward is queued whole:
   * those buckets overlap nothing. */
  zc->in_hook = final_from > 0;
  if (zc->hook_rc == 0 &&
      buckets_ready(zc, final_from, zc->hook_err, sizeof zc->hook_err) != 0)
    zc->hook_rc = -1;
  zc->in_hook = 0;
}

int zero_cuda_step(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float lr,
                   double max_norm, zero_step_result *res, char *err,
                   size_t errlen) {
  gpt_cuda *g = zc->g;
  const zero_shape *sh = &zc->sh;
  memset(res, 0, sizeof *res);
  zc->tm.total = 0;
  double t0 = comm_timer_now();
  float loss = 0;
  /* The forward's loss read back synchronizes its stream. */
  if (gpt_cuda_zero_grad(g, err, errlen) != 0 ||
      gpt_cuda_forward(g, inputs, targets, B, T, &loss, err, errlen) != 0)
    return -1;
  double tb = comm_timer_now();
  zc->next = sh->nbuckets;
  zc->early = 0;
  zc->hook_rc = 0;
  zc->synced = 0;
  if (!sh->no_overlap)
    gpt_cuda_set_grad_hook(g, grad_hook, zc);
  /* The mean over ranks of each rank's mean: 1/N in the backward. */
  int rc = gpt_cuda_backward(g, 1.0f / (float)sh->world, err, errlen);
  gpt_cuda_set_grad_hook(g, NULL, NULL);
  if (rc != 0 || gpt_cuda_synchronize(g, err, errlen) != 0)
    return -1;
  if (zc->hook_rc != 0) {
    snprintf(err, errlen, "%s", zc->hook_err);
    return -1;
  }
  /* Backward's own time: its wall time less the comm calls in the hook. */
  double tc = comm_timer_now(), c_bwd = zc->tm.total;
  /* The rest (all of them without overlap), then every bucket waited
   * for before the norm reads the sums. */
  zc->synced = 1;
  if (buckets_ready(zc, 0, err, errlen) != 0)
    return -1;
  while (zc->nio > 0)
    if (bucket_wait_one(zc, err, errlen) != 0)
      return -1;
  double ss;
  if (sh->stage < 2) {
    /* Every rank has the whole sum: its norm needs no more exchange. */
    if (gpt_cuda_grad_sumsq(g, 0, sh->n_params, &ss, err, errlen) != 0)
      return -1;
  } else {
    /* The rank's slice of the sum is at its own offset. */
    if (gpt_cuda_grad_sumsq(g, sh->lo, sh->S, &ss, err, errlen) != 0 ||
        TIMED(&zc->tm,
              comm_allreduce_sum_double(zc->ctl, &ss, err, errlen)) != 0)
      return -1;
  }
  double norm = sqrt(ss);
  gpt_cuda_set_clip(g, norm, max_norm);
  if (gpt_cuda_step(g, lr, err, errlen) != 0)
    return -1;
  if (sh->stage >= 1) {
    /* Each rank updated its slice's BF16 copy: all-gather the copies. */
    char *p = gpt_cuda_params_ptr(g);
    if (gpt_cuda_synchronize(g, err, errlen) != 0 ||
        TIMED(&zc->tm, comm_allgather_bytes(zc->nccl, p + sh->lo * 2, p,
                                            sh->S * 2, err, errlen)) != 0)
      return -1;
  } else if (gpt_cuda_synchronize(g, err, errlen) != 0) {
    return -1;
  }
  if (TIMED(&zc->tm, comm_allreduce_sum(zc->ctl, &loss, 1, err, errlen)) != 0)
    return -1;
  double t_end = comm_timer_now();
  res->loss = loss / (float)sh->world;
  res->norm = norm;
  res->buckets = (int)sh->nbuckets;
  res->buckets_early = zc->early;
  res->t_forward = tb - t0;
  res->t_backward = tc - tb - c_bwd;
  res->t_comm = zc->tm.total;
  res->t_optimizer = t_end - tc - (zc->tm.total - c_bwd);
  return 0;
}

int zero_cuda_pull(zero_cuda *zc, char *err, size_t errlen) {
  return gpt_cuda_download(zc->g, zc->model, zero_optim(zc->z), err, errlen);
}

int zero_cuda_push(zero_cuda *zc, char *err, size_t errlen) {
  return gpt_cuda_upload(zc->g, zc->model, zero_optim(zc->z), err, errlen);
}

int zero_cuda_gather_params(zero_cuda *zc, char *err, size_t errlen) {
  if (zc->sh.stage == 0)
    return gpt_cuda_download(zc->g, zc->model, NULL, err, errlen);
  /* The master slices are S floats each; the gradient array has room for
   * N of them. */
  float *grads = gpt_cuda_grads_ptr(zc->g);
  if (gpt_cuda_synchronize(zc->g, err, errlen) != 0 ||
      comm_allgather(zc->nccl, gpt_cuda_master_ptr(zc->g), grads, zc->sh.S,
                     err, errlen) != 0)
    return -1;
  return gpt_cuda_download_grads(zc->g, gpt_params(zc->model), err, errlen);
}

int zero_cuda_loss(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float *loss,
                   char *err, size_t errlen) {
  return gpt_cuda_forward(zc->g, inputs, targets, B, T, loss, err, errlen);
}

void zero_cuda_memory_get(const zero_cuda *zc, zero_memory *out,
                          uint64_t *acts) {
  zero_memory_get(zc->z, out);
  out->params = out->peak_params = zc->mem.params;
  out->grads = out->peak_grads = zc->mem.grads;
  out->optim = zc->mem.optim;
  out->comm = zc->sh.stage == 2 ? (uint64_t)ZERO_INFLIGHT * zc->sh.bf *
                                      (uint64_t)zc->sh.world * 4
                                : 0;
  if (acts)
    *acts = zc->mem.acts;
}

const char *zero_cuda_describe(const zero_cuda *zc) { return zc->name; }

#else /* no CUDA engine or no NCCL in this build */

#define NOT_BUILT                                                              \
  "this dagrun was built without GPU ranks (no CUDA toolkit or NCCL found "   \
  "at build time, or -DDAGRUN_CUDA=OFF)"

int zero_cuda_available(char *why, size_t whylen) {
  snprintf(why, whylen, NOT_BUILT);
  return 0;
}

int zero_cuda_create(zero *z, gpt *model, comm *ctl, comm *nccl,
                     const zero_cuda_options *o, zero_cuda **out, char *err,
                     size_t errlen) {
  (void)z, (void)model, (void)ctl, (void)nccl, (void)o;
  *out = NULL;
  snprintf(err, errlen, "zero: %s", NOT_BUILT);
  return -1;
}

/* No zero_cuda can exist in this build: the rest is never reached with
 * one. */
void zero_cuda_destroy(zero_cuda *zc) { (void)zc; }

int zero_cuda_step(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float lr,
                   double max_norm, zero_step_result *res, char *err,
                   size_t errlen) {
  (void)zc, (void)inputs, (void)targets, (void)B, (void)T, (void)lr,
      (void)max_norm, (void)res;
  snprintf(err, errlen, "zero: %s", NOT_BUILT);
  return -1;
}

int zero_cuda_pull(zero_cuda *zc, char *err, size_t errlen) {
  (void)zc;
  snprintf(err, errlen, "zero: %s", NOT_BUILT);
  return -1;
}

int zero_cuda_push(zero_cuda *zc, char *err, size_t errlen) {
  return zero_cuda_pull(zc, err, errlen);
}

int zero_cuda_gather_params(zero_cuda *zc, char *err, size_t errlen) {
  return zero_cuda_pull(zc, err, errlen);
}

int zero_cuda_loss(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float *loss,
                   char *err, size_t errlen) {
  (void)inputs, (void)targets, (void)B, (void)T, (void)loss;
  return zero_cuda_pull(zc, err, errlen);
}

void zero_cuda_memory_get(const zero_cuda *zc, zero_memory *out,
                          uint64_t *acts) {
  (void)zc;
  memset(out, 0, sizeof *out);
  if (acts)
    *acts = 0;
}

const char *zero_cuda_describe(const zero_cuda *zc) {
  (void)zc;
  return "no GPU";
}

#endif
