/*
 * zero_cuda: ZeRO stages 0-3 on GPU ranks over NCCL (zero_cuda.h).
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

#include "cuda/gpt_cuda.h"
#include "lib/clock.h"

/* Room for the collectives in flight: the comm layer's limit. */
#define ZC_RING COMM_MAX_INFLIGHT

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
  /* The collectives in flight, oldest first (a ring of ZC_RING): stages
   * 0-1's buckets (zero_shape's bf, nbuckets, as zero.c's), stage 3's
   * reduce-scatters, stage 2's reduces (one per rank a group's gradient
   * reaches); at most cap at once. */
  comm_req *req[ZC_RING];
  int nio, cur, cap; /* in flight; the next slot; the most */
  size_t next;  /* buckets >= next have been started (counting down) */
  int synced;   /* the engine's stream was waited for since its last
                   gradient writes were queued */
  int in_hook, early, hook_rc;
  char hook_err[256];
  /* Stages 2-3 (zero_cuda.h): the groups' FP32 gradients, group 0's
   * (final only at the end of backward) in a buffer of its own, the
   * others' in turn in ZERO_INFLIGHT + 1 buffers (one being written, the
   * rest being reduced); stage 3: the rank's piece of each group and
   * the two slots the groups' BF16 parameters are gathered into. */
  size_t ng;
  size_t *goff, *glen; /* each group's flat offset and length */
  zero_piece *pc;
  gpt_cuda_piece *gpc;
  struct pslot {
    void *buf;    /* N x the largest piece, BF16 */
    int group;    /* the group it holds (valid), or -1 */
    comm_req *ag; /* its all-gather, not yet waited for */
  } ps[2];
  int last_slot; /* the slot of the group in use */
  uint64_t slot_bytes;
  float *gbuf0; /* group 0's gradient (N x S_0) */
  float *gbuf[ZERO_INFLIGHT + 1];
  int gbusy[ZERO_INFLIGHT + 1]; /* the group whose gradient it holds, or
                                   -1 */
  uint64_t gbuf_bytes;
  int rs_buf[ZC_RING]; /* the gbuf the collective in flight sends (freed
                          when it is done: a group's last), or -1 */
  size_t rs_next;            /* groups >= rs_next have been started */
  int in_bwd;
};


int zero_cuda_available(char *why, size_t whylen) {
  return gpt_cuda_available(why, whylen);
}

/* ---- Stages 2-3: the groups and their buffers ---- */

/* The model's groups (gpt.h), and at stage 3 the rank's pieces of them,
 * as the host zero cut them (zero_group_piece), for the engine
 * (gpt_cuda_options' pieces). */
static int group_layout(zero_cuda *zc, char *err, size_t errlen) {
  size_t ng = gpt_group_count(zc->model);
  zc->ng = ng;
  zc->goff = calloc(ng, sizeof *zc->goff);
  zc->glen = calloc(ng, sizeof *zc->glen);
  if (!zc->goff || !zc->glen) {
    snprintf(err, errlen, "zero: out of memory");
    return -1;
  }
  for (size_t g = 0; g < ng; g++)
    gpt_group_range(zc->model, g, &zc->goff[g], &zc->glen[g]);
  if (zc->sh.stage == 2)
    return 0;
  zc->pc = calloc(ng, sizeof *zc->pc);
  zc->gpc = calloc(ng, sizeof *zc->gpc);
  if (!zc->pc || !zc->gpc) {
    snprintf(err, errlen, "zero: out of memory");
    return -1;
  }
  for (size_t g = 0; g < ng; g++) {
    zero_group_piece(zc->z, g, &zc->pc[g]);
    zc->gpc[g] = (gpt_cuda_piece){zc->pc[g].flat, zc->pc[g].n, zc->pc[g].local};
  }
  zc->o.shard_lo = 0;
  zc->o.shard_n = zc->sh.S;
  zc->o.padded = 0;
  zc->o.pieces = zc->gpc;
  zc->o.npieces = ng;
  return 0;
}

/* Floats of group g's gradient buffer: at stage 3 N pieces of S_g (what
 * the reduce-scatter sends), at stage 2 the group itself. */
static size_t group_floats(const zero_cuda *zc, size_t g) {
  return zc->sh.stage == 3 ? zc->pc[g].S * (size_t)zc->sh.world : zc->glen[g];
}

/* The gradient buffers and stage 3's gather slots, all at create, so
 * that an out-of-memory is found before training starts. */
static int group_alloc(zero_cuda *zc, char *err, size_t errlen) {
  int st = zc->sh.stage;
  size_t N = (size_t)zc->sh.world, most = 0, most_layer = 0;
  for (size_t g = 0; g < zc->ng; g++) {
    if (st == 3 && zc->pc[g].S > most)
      most = zc->pc[g].S;
    if (g > 0 && group_floats(zc, g) > most_layer)
      most_layer = group_floats(zc, g);
  }
  zc->slot_bytes = (uint64_t)most * N * 2;
  zc->gbuf_bytes = (uint64_t)most_layer * 4;
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < 2 && st == 3 && e == cudaSuccess; i++) {
    zc->ps[i].group = -1;
    e = cudaMalloc(&zc->ps[i].buf, zc->slot_bytes);
    if (e != cudaSuccess)
      zc->ps[i].buf = NULL;
  }
  if (e == cudaSuccess) {
    e = cudaMalloc((void **)&zc->gbuf0, group_floats(zc, 0) * 4);
    if (e != cudaSuccess)
      zc->gbuf0 = NULL;
  }
  for (int i = 0; i < ZERO_INFLIGHT + 1 && e == cudaSuccess; i++) {
    zc->gbusy[i] = -1;
    e = cudaMalloc((void **)&zc->gbuf[i], zc->gbuf_bytes);
    if (e != cudaSuccess)
      zc->gbuf[i] = NULL;
  }
  if (e != cudaSuccess) {
    /* Not left for the next launch's error check to find. */
    cudaGetLastError();
    char slots[128] = "";
    if (st == 3)
      snprintf(slots, sizeof slots, "2 x %llu bytes of BF16 parameters, ",
               (unsigned long long)zc->slot_bytes);
    snprintf(err, errlen,
             "zero: %s: out of GPU memory for stage %d's %s (%s%llu + %d x "
             "%llu bytes of FP32 gradients: %s); %s",
             zc->name, st, st == 3 ? "gathered layers" : "layers' gradients",
             slots, (unsigned long long)(group_floats(zc, 0) * 4),
             ZERO_INFLIGHT + 1, (unsigned long long)zc->gbuf_bytes,
             cudaGetErrorString(e),
             st == 3 ? "more ranks, or stage 2, need less"
                     : "more ranks need less");
    return -1;
  }
  return 0;
}

int zero_cuda_create(zero *z, gpt *model, comm *ctl, comm *nccl,
                     const zero_cuda_options *o, zero_cuda **out, char *err,
                     size_t errlen) {
  *out = NULL;
  zero_shape sh;
  zero_shape_get(z, &sh);
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
   * the N slices of the BF16 parameters' in-place all-gather (stage 1:
   * and of the gradients' all-reduce; stage 2 keeps the slice's
   * gradients alone). */
  zc->o.shard_lo = sh.stage == 0 ? 0 : sh.lo;
  zc->o.shard_n = sh.stage == 0 ? 0 : sh.S;
  zc->o.padded = sh.stage == 0 ? sh.n_params : sh.S * (size_t)sh.world;
  zc->o.grad_shard = sh.stage == 2;
  /* Stage 2's groups take a reduce per rank they reach: more in flight
   * than one a bucket. */
  zc->cap = sh.stage == 2 ? ZC_RING : ZERO_INFLIGHT;
  for (int i = 0; i < ZC_RING; i++)
    zc->rs_buf[i] = -1;
  if (sh.stage >= 2 && group_layout(zc, err, errlen) != 0) {
    zero_cuda_destroy(zc);
    return -1;
  }
  gpt_cuda_memory_estimate(gpt_get_config(model), zc->o.B, zc->o.T, &zc->o,
                           &zc->mem);
  char e2[256];
  if (gpt_cuda_device_name(zc->o.device, zc->name, sizeof zc->name, e2,
                           sizeof e2) != 0)
    snprintf(zc->name, sizeof zc->name, "GPU %d", zc->o.device);
  if (gpt_cuda_create(model, &zc->o, &zc->g, err, errlen) != 0 ||
      zero_cuda_push(zc, err, errlen) != 0 ||
      (sh.stage >= 2 && group_alloc(zc, err, errlen) != 0)) {
    zero_cuda_destroy(zc);
    return -1;
  }
  *out = zc;
  return 0;
}

void zero_cuda_destroy(zero_cuda *zc) {
  if (!zc)
    return;
  for (int i = 0; i < 2; i++)
    if (zc->ps[i].buf)
      cudaFree(zc->ps[i].buf);
  for (int i = 0; i < ZERO_INFLIGHT + 1; i++)
    if (zc->gbuf[i])
      cudaFree(zc->gbuf[i]);
  if (zc->gbuf0)
    cudaFree(zc->gbuf0);
  gpt_cuda_destroy(zc->g);
  free(zc->pc);
  free(zc->gpc);
  free(zc->goff);
  free(zc->glen);
  free(zc);
}

/* ---- Collectives in flight ----
 * Stages 0-1's buckets (zero.h: zero_shape's bf and nbuckets) and stages
 * 2-3's groups are started from the engine's grad hook as soon as they
 * are final, in zero.c's order (from the last); the collectives run on
 * the NCCL communicator's stream while the engine's computes the rest of
 * backward. A collective reads gradients the engine's stream wrote: it
 * waits for that stream first (gpt_cuda_synchronize); the engine reads
 * what a collective wrote only after zero_cuda_step has waited for every
 * one. */

/* Waits for the oldest collective in flight. */
static int bucket_wait_one(zero_cuda *zc, char *err, size_t errlen) {
  int slot = (zc->cur - zc->nio + ZC_RING) % ZC_RING;
  comm_req *req = zc->req[slot];
  zc->req[slot] = NULL;
  zc->nio--;
  int rc = TIMED(&zc->tm, comm_wait(zc->nccl, req, err, errlen));
  /* A group's last: the gradient buffer it sent is free again. */
  if (zc->rs_buf[slot] >= 0)
    zc->gbusy[zc->rs_buf[slot]] = -1;
  zc->rs_buf[slot] = -1;
  return rc;
}

/* Room for one more collective (in slot cur): the oldest waited for
 * when cap are in flight. */
static int ring_room(zero_cuda *zc, char *err, size_t errlen) {
  return zc->nio == zc->cap ? bucket_wait_one(zc, err, errlen) : 0;
}

/* The collective just started in slot cur is in flight; which: the
 * gradient buffer its completion frees, or -1. */
static void ring_push(zero_cuda *zc, int which) {
  zc->rs_buf[zc->cur] = which;
  zc->cur = (zc->cur + 1) % ZC_RING;
  zc->nio++;
}

/* The engine's stream waited for, when it queued gradient writes since
 * the last wait: a collective may read them then. */
static int engine_synced(zero_cuda *zc, char *err, size_t errlen) {
  if (!zc->synced && gpt_cuda_synchronize(zc->g, err, errlen) != 0)
    return -1;
  zc->synced = 1;
  return 0;
}

/* Stages 0-1: starts bucket b, the all-reduce of the flat range [b*bf,
 * ...) of the gradient array in place. */
static int bucket_start(zero_cuda *zc, size_t b, char *err, size_t errlen) {
  const zero_shape *sh = &zc->sh;
  if (ring_room(zc, err, errlen) != 0 || engine_synced(zc, err, errlen) != 0)
    return -1;
  float *grads = gpt_cuda_grads_ptr(zc->g);
  size_t off = b * sh->bf;
  size_t n = sh->n_params - off < sh->bf ? sh->n_params - off : sh->bf;
  if (TIMED(&zc->tm, comm_iallreduce_sum(zc->nccl, grads + off, n,
                                         &zc->req[zc->cur], err, errlen)) != 0)
    return -1;
  ring_push(zc, -1);
  zc->early += zc->in_hook;
  return 0;
}

/* Stages 2-3: the buffer group g's gradient is added into (zeroed on the
 * engine's stream, ahead of the group's backward). Group 0 has its own;
 * the others take a free one of the ring, waiting for the oldest
 * collective when none is. */
static float *group_grads(zero_cuda *zc, size_t g, char *err, size_t errlen) {
  size_t bytes = group_floats(zc, g) * 4;
  float *buf = NULL;
  if (g == 0) {
    buf = zc->gbuf0;
  } else {
    for (;;) {
      for (int i = 0; i < ZERO_INFLIGHT + 1 && !buf; i++)
        if (zc->gbusy[i] < 0) {
          zc->gbusy[i] = (int)g;
          buf = zc->gbuf[i];
        }
      if (buf)
        break;
      if (zc->nio == 0) { /* cannot happen: one is written at a time */
        snprintf(err, errlen, "zero: no free gradient buffer for group %zu", g);
        return NULL;
      }
      if (bucket_wait_one(zc, err, errlen) != 0)
        return NULL;
    }
  }
  cudaError_t e =
      cudaMemsetAsync(buf, 0, bytes, (cudaStream_t)gpt_cuda_stream(zc->g));
  if (e != cudaSuccess) {
    snprintf(err, errlen, "zero: clearing group %zu's gradient: %s", g,
             cudaGetErrorString(e));
    return NULL;
  }
  return buf;
}

/* Stages 2-3: starts the sum over ranks of group g's gradient (final;
 * the engine no longer has it) into the shard's gradients. Stage 3
 * reduce-scatters its N pieces, each rank's into its piece of the
 * group. At stage 2 the group is a flat range that rank q's slice [q*S,
 * (q+1)*S) cuts where it overlaps it (a layer is rarely all one rank's):
 * each part is reduced to its rank, into its slice's gradients, so the
 * bytes sent are a reduce-scatter's. The buffer is free again when the
 * last is done. Without overlap they are waited for at once. */
static int group_reduce_start(zero_cuda *zc, size_t g, char *err,
                              size_t errlen) {
  if (engine_synced(zc, err, errlen) != 0)
    return -1;
  int which = -1;
  float *buf = zc->gbuf0;
  for (int i = 0; g > 0 && i < ZERO_INFLIGHT + 1; i++)
    if (zc->gbusy[i] == (int)g) {
      which = i;
      buf = zc->gbuf[i];
    }
  gpt_cuda_set_group_grads(zc->g, g, NULL);
  float *grads = gpt_cuda_grads_ptr(zc->g);
  if (zc->sh.stage == 3) {
    if (ring_room(zc, err, errlen) != 0 ||
        TIMED(&zc->tm, comm_ireduce_scatter_sum(
                           zc->nccl, buf, grads + zc->pc[g].local, zc->pc[g].S,
                           &zc->req[zc->cur], err, errlen)) != 0)
      return -1;
    ring_push(zc, which);
  } else {
    size_t S = zc->sh.S, a = zc->goff[g], end = a + zc->glen[g];
    for (size_t lo = a; lo < end;) {
      int q = (int)(lo / S);
      size_t hi = (size_t)(q + 1) * S < end ? (size_t)(q + 1) * S : end;
      float *dst = q == zc->sh.rank ? grads + (lo - (size_t)q * S) : NULL;
      if (ring_room(zc, err, errlen) != 0 ||
          TIMED(&zc->tm,
                comm_ireduce_sum(zc->nccl, buf + (lo - a), dst, hi - lo, q,
                                 &zc->req[zc->cur], err, errlen)) != 0)
        return -1;
      ring_push(zc, hi == end ? which : -1);
      lo = hi;
    }
  }
  /* Early: overlapped with the rest of backward (not so when waited for
   * here). */
  zc->early += zc->in_hook && !zc->sh.no_overlap;
  while (zc->sh.no_overlap && zc->nio > 0)
    if (bucket_wait_one(zc, err, errlen) != 0)
      return -1;
  return 0;
}

/* Starts every bucket not yet started that is final from final_from. */
static int buckets_ready(zero_cuda *zc, size_t final_from, char *err,
                         size_t errlen) {
  /* Stages 2-3: every group that lies in the final part. */
  while (zc->ng && zc->rs_next > 0 && zc->goff[zc->rs_next - 1] >= final_from) {
    if (group_reduce_start(zc, zc->rs_next - 1, err, errlen) != 0)
      return -1;
    zc->rs_next--;
  }
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

/* ---- Stage 3: the parameters, a group at a time ----
 * Group g is gathered (its N BF16 pieces, all-gather over NCCL) into a
 * slot just before the engine queues its kernels, unless a slot still
 * holds it from this step (ln_f and the head, which forward ends with
 * and backward starts with); the next group's all-gather is started
 * into the other slot, so that it runs while the engine computes g.
 * A slot is written only after the engine's stream has done with what
 * it held (gpt_cuda_synchronize), and read by the engine only after
 * its all-gather was waited for. */

/* The slot that holds group g this step, or -1. */
static int slot_of(const zero_cuda *zc, int g) {
  for (int i = 0; i < 2; i++)
    if (zc->ps[i].group == g)
      return i;
  return -1;
}

/* Waits for slot s's all-gather, when one is in flight. */
static int slot_wait(zero_cuda *zc, int s, char *err, size_t errlen) {
  comm_req *req = zc->ps[s].ag;
  zc->ps[s].ag = NULL;
  return req ? TIMED(&zc->tm, comm_wait(zc->nccl, req, err, errlen)) : 0;
}

/* Gathers group g into slot s: started (async) or done. */
static int slot_gather(zero_cuda *zc, int s, int g, int async, char *err,
                       size_t errlen) {
  if (slot_wait(zc, s, err, errlen) != 0 ||
      gpt_cuda_synchronize(zc->g, err, errlen) != 0)
    return -1;
  zc->ps[s].group = g;
  const char *piece =
      (const char *)gpt_cuda_params_ptr(zc->g) + zc->pc[g].local * 2;
  size_t bytes = zc->pc[g].S * 2;
  if (async)
    return TIMED(&zc->tm,
                 comm_iallgather_bytes(zc->nccl, piece, zc->ps[s].buf, bytes,
                                       &zc->ps[s].ag, err, errlen));
  return TIMED(&zc->tm, comm_allgather_bytes(zc->nccl, piece, zc->ps[s].buf,
                                             bytes, err, errlen));
}

/* The engine's parameter hook (gpt_cuda_set_param_hook). */
static int param_hook(void *arg, int event, int g, int next) {
  zero_cuda *zc = arg;
  char *err = zc->hook_err;
  size_t errlen = sizeof zc->hook_err;
  if (zc->hook_rc != 0)
    return -1;
  /* DONE: the slot keeps the group until another is gathered into it. */
  if (event == GPT_PARAMS_DONE)
    return 0;
  /* Stage 2's parameters are whole: only backward's gradients are
   * placed. */
  int stage3 = zc->sh.stage == 3, s = stage3 ? slot_of(zc, g) : 0;
  if (stage3 && s < 0) {
    s = 1 - zc->last_slot;
    if (slot_gather(zc, s, g, 0, err, errlen) != 0)
      goto fail;
  } else if (stage3 && slot_wait(zc, s, err, errlen) != 0) {
    goto fail;
  }
  if (stage3) {
    zc->last_slot = s;
    gpt_cuda_set_group_params(zc->g, (size_t)g, zc->ps[s].buf);
  }
  if (zc->in_bwd) {
    float *gr = group_grads(zc, (size_t)g, err, errlen);
    if (!gr)
      goto fail;
    gpt_cuda_set_group_grads(zc->g, (size_t)g, gr);
    zc->synced = 0;
  }
  if (stage3 && !zc->sh.no_overlap && next >= 0 && next != g &&
      slot_of(zc, next) < 0 &&
      slot_gather(zc, 1 - s, next, 1, err, errlen) != 0)
    goto fail;
  return 0;
fail:
  zc->hook_rc = -1;
  return -1;
}

/* A failed pass: the hooks unset, and a hook's own message when one
 * failed. -1. */
static int pass_failed(zero_cuda *zc, char *err, size_t errlen) {
  gpt_cuda_set_grad_hook(zc->g, NULL, NULL);
  gpt_cuda_set_param_hook(zc->g, NULL, NULL);
  zc->in_bwd = 0;
  if (zc->hook_rc != 0)
    snprintf(err, errlen, "%s", zc->hook_err);
  return -1;
}

/* The step's passes: accum micro-batches (inputs, targets: accum x (B,T)
 * ids) forward and backward, their gradients added up at 1/(world x
 * accum) each, the hooks on the last micro-batch only (stages 0-1: the
 * gradients are whole only then; stages 2-3 take one micro-batch). *loss:
 * the micro-batches' mean; t_fwd, t_bwd: the passes' wall time less the
 * comm calls made in them (zc->tm). 0, or -1 with err. */
static int step_passes(zero_cuda *zc, const uint32_t *inputs,
                       const uint32_t *targets, int B, int T, int accum,
                       float *loss, double *t_fwd, double *t_bwd, char *err,
                       size_t errlen) {
  gpt_cuda *g = zc->g;
  const zero_shape *sh = &zc->sh;
  const int st = sh->stage;
  const size_t bt = (size_t)B * T;
  double sum = 0;
  *t_fwd = *t_bwd = 0;
  if (st >= 2) {
    /* The slots hold the last step's parameters: stale. */
    for (int i = 0; i < 2; i++)
      zc->ps[i].group = -1;
    zc->rs_next = zc->ng;
    gpt_cuda_set_param_hook(g, param_hook, zc);
  }
  if (gpt_cuda_zero_grad(g, err, errlen) != 0)
    return pass_failed(zc, err, errlen);
  for (int m = 0; m < accum; m++) {
    const int last = m == accum - 1;
    double t = clock_monotonic(), c = zc->tm.total;
    float l = 0;
    /* The forward's loss read back synchronizes its stream. */
    if (gpt_cuda_forward_train(g, inputs + m * bt, targets + m * bt, B, T, &l,
                               err, errlen) != 0)
      return pass_failed(zc, err, errlen);
    sum += (double)l / accum;
    double tb = clock_monotonic(), cb = zc->tm.total;
    *t_fwd += tb - t - (cb - c);
    if (last) {
      zc->next = st < 2 ? sh->nbuckets : 0;
      zc->in_bwd = 1;
      /* Stages 2-3 take each group's gradient from its buffer when it is
       * final, overlap or not (without, waited for at once). */
      if (!sh->no_overlap || st >= 2)
        gpt_cuda_set_grad_hook(g, grad_hook, zc);
    }
    /* The mean over ranks and micro-batches of each one's mean. */
    int rc =
        gpt_cuda_backward(g, 1.0f / ((float)sh->world * accum), err, errlen);
    for (int i = 0; i < 2 && rc == 0 && st == 3; i++)
      rc = slot_wait(zc, i, err, errlen);
    if (rc != 0 || zc->hook_rc != 0 ||
        gpt_cuda_synchronize(g, err, errlen) != 0)
      return pass_failed(zc, err, errlen);
    *t_bwd += clock_monotonic() - tb - (zc->tm.total - cb);
  }
  gpt_cuda_set_grad_hook(g, NULL, NULL);
  gpt_cuda_set_param_hook(g, NULL, NULL);
  zc->in_bwd = 0;
  /* Stage 3: the slots are stale once the shards are updated; a forward
   * outside a step fails on an unplaced group rather than read them. */
  for (size_t i = 0; st == 3 && i < zc->ng; i++)
    gpt_cuda_set_group_params(g, i, NULL);
  *loss = (float)sum;
  return 0;
}

int zero_cuda_step(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float lr,
                   double max_norm, zero_step_result *res, char *err,
                   size_t errlen) {
  return zero_cuda_step_accum(zc, inputs, targets, B, T, 1, lr, max_norm, res,
                              err, errlen);
}

int zero_cuda_step_accum(zero_cuda *zc, const uint32_t *inputs,
                         const uint32_t *targets, int B, int T, int accum,
                         float lr, double max_norm, zero_step_result *res,
                         char *err, size_t errlen) {
  gpt_cuda *g = zc->g;
  const zero_shape *sh = &zc->sh;
  int st = sh->stage;
  memset(res, 0, sizeof *res);
  if (accum < 1 || (accum > 1 && st >= 2)) {
    snprintf(err, errlen,
             "zero_cuda: grad_accum %d at ZeRO stage %d: GPU ranks accumulate "
             "micro-batches at stages 0 and 1 only",
             accum, st);
    return -1;
  }
  zc->tm.total = 0;
  zc->early = 0;
  zc->hook_rc = 0;
  zc->synced = 0;
  zc->in_bwd = 0;
  float loss = 0;
  double t_fwd, t_bwd;
  if (step_passes(zc, inputs, targets, B, T, accum, &loss, &t_fwd, &t_bwd,
                  err, errlen) != 0)
    return -1;
  double tc = clock_monotonic(), c_bwd = zc->tm.total;
  /* The rest (all of them without overlap), then every bucket waited
   * for before the norm reads the sums. */
  zc->synced = 1;
  if (buckets_ready(zc, 0, err, errlen) != 0)
    return -1;
  while (zc->nio > 0)
    if (bucket_wait_one(zc, err, errlen) != 0)
      return -1;
  double ss;
  if (st < 2) {
    /* Every rank has the whole sum: its norm needs no more exchange. */
    if (gpt_cuda_grad_sumsq(g, 0, sh->n_params, &ss, err, errlen) != 0)
      return -1;
  } else {
    /* The rank's slice of the sum: the shard's gradients. */
    if (gpt_cuda_grad_sumsq(g, 0, sh->S, &ss, err, errlen) != 0 ||
        TIMED(&zc->tm, comm_allreduce_sum_double(zc->ctl, &ss, err, errlen)) !=
            0)
      return -1;
  }
  double norm = sqrt(ss);
  if (TIMED(&zc->tm, comm_allreduce_sum(zc->ctl, &loss, 1, err, errlen)) != 0)
    return -1;
  res->loss = loss / (float)sh->world;
  res->norm = norm;
  /* zero.h's rule: the guard's factor, none for a non-finite step (the
   * weights, the optimizer and its count stay as they are). */
  if (zero_update_factor(zc->z, res->loss, norm, &res->lr_factor, err,
                         errlen) != 0)
    return -1;
  int update = res->lr_factor > 0.0;
  if (update) {
    gpt_cuda_set_clip(g, norm, max_norm);
    if (gpt_cuda_step(g, lr * (float)res->lr_factor, err, errlen) != 0)
      return -1;
  }
  if (update && (st == 1 || st == 2)) {
    /* Each rank updated its slice's BF16 copy: all-gather the copies. */
    char *p = gpt_cuda_params_ptr(g);
    if (gpt_cuda_synchronize(g, err, errlen) != 0 ||
        TIMED(&zc->tm, comm_allgather_bytes(zc->nccl, p + sh->lo * 2, p,
                                            sh->S * 2, err, errlen)) != 0)
      return -1;
  } else if (gpt_cuda_synchronize(g, err, errlen) != 0) {
    /* Stage 3's next step gathers the updated shards group by group. */
    return -1;
  }
  double t_end = clock_monotonic();
  res->buckets = st >= 2 ? (int)zc->ng : (int)sh->nbuckets;
  res->buckets_early = zc->early;
  res->t_forward = t_fwd;
  res->t_backward = t_bwd;
  res->t_comm = zc->tm.total;
  res->t_optimizer = t_end - tc - (zc->tm.total - c_bwd);
  return 0;
}

/* Stage 3's host state is the zero's parameter shard; the others' the
 * model's parameters. */
int zero_cuda_pull(zero_cuda *zc, char *err, size_t errlen) {
  if (zc->sh.stage == 3)
    return gpt_cuda_download_shard(zc->g, zero_param_shard(zc->z),
                                   zero_optim(zc->z), err, errlen);
  return gpt_cuda_download(zc->g, zc->model, zero_optim(zc->z), err, errlen);
}

int zero_cuda_push(zero_cuda *zc, char *err, size_t errlen) {
  if (zc->sh.stage == 3)
    return gpt_cuda_upload_shard(zc->g, zero_param_shard(zc->z),
                                 zero_optim(zc->z), err, errlen);
  return gpt_cuda_upload(zc->g, zc->model, zero_optim(zc->z), err, errlen);
}

int zero_cuda_gather_params(zero_cuda *zc, char *err, size_t errlen) {
  if (zc->sh.stage == 3) {
    /* The host zero gathers its shards (over the host communicator) into
     * the host model, which stage 3 left without a parameter array. */
    gpt *m = zc->model;
    if (zero_cuda_pull(zc, err, errlen) != 0 ||
        (!gpt_params(m) &&
         gpt_acquire(m, GPT_BUF_PARAMS, gpt_num_params(m), err, errlen) != 0))
      return -1;
    return zero_gather_params(zc->z, gpt_params(m), err, errlen);
  }
  if (zc->sh.stage == 0)
    return gpt_cuda_download(zc->g, zc->model, NULL, err, errlen);
  /* Stages 1-2: the rank's slice of the master weights into its place in
   * the host model, and the slices all-gathered there, over the host
   * communicator, as stage 3's are (stage 2's GPU has no array of N
   * slices to gather them in). */
  size_t S = zc->sh.S, P = zc->sh.n_params, lo = zc->sh.lo;
  size_t have = lo < P ? (P - lo < S ? P - lo : S) : 0;
  float *all = calloc(S * (size_t)zc->sh.world, sizeof(float));
  float *p = gpt_params(zc->model);
  if (!all) {
    snprintf(err, errlen, "zero: out of memory gathering the parameters");
    return -1;
  }
  int rc = gpt_cuda_download(zc->g, zc->model, NULL, err, errlen);
  if (rc == 0) {
    memcpy(all + lo, p + lo, have * sizeof(float));
    rc = comm_allgather(zc->ctl, all + lo, all, S, err, errlen);
  }
  if (rc == 0)
    memcpy(p, all, P * sizeof(float));
  free(all);
  return rc;
}

int zero_cuda_loss(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float *loss,
                   char *err, size_t errlen) {
  if (zc->sh.stage == 3) {
    snprintf(err, errlen,
             "zero: at stage 3 a forward pass gathers every layer from all "
             "ranks: evaluate the gathered model (zero_cuda_gather_params) "
             "instead");
    return -1;
  }
  return gpt_cuda_forward(zc->g, inputs, targets, B, T, loss, err, errlen);
}

void zero_cuda_memory_get(const zero_cuda *zc, zero_memory *out,
                          uint64_t *acts) {
  zero_memory_get(zc->z, out);
  /* Stage 3's two gather slots are parameters, stages 2-3's groups'
   * gradient buffers gradients, as zero.c counts them; all held from
   * create. */
  uint64_t slots = 2 * zc->slot_bytes;
  uint64_t gbufs =
      zc->ng ? group_floats(zc, 0) * 4 + (ZERO_INFLIGHT + 1) * zc->gbuf_bytes
             : 0;
  out->params = out->peak_params = zc->mem.params + slots;
  out->grads = out->peak_grads = zc->mem.grads + gbufs;
  out->optim = zc->mem.optim;
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

int zero_cuda_step_accum(zero_cuda *zc, const uint32_t *inputs,
                         const uint32_t *targets, int B, int T, int accum,
                         float lr, double max_norm, zero_step_result *res,
                         char *err, size_t errlen) {
  (void)accum;
  return zero_cuda_step(zc, inputs, targets, B, T, lr, max_norm, res, err,
                        errlen);
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
