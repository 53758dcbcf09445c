/*
 * zslice_cuda: zslice.h's two collectives on the CUDA engine's own
 * device arrays, for the model-parallel engines whose data-parallel
 * group runs ZeRO-1 over a range at the start of a gpt_cuda's arrays
 * (gpu/pipeline/pipeline_cuda.c's stage, gpu/tensor/tensor_cuda.c's
 * shard): the range padded to D S floats, this rank's slice [lo, lo +
 * S), the group an NCCL communicator (device buffers).
 *
 * And for ZeRO stages 2-3 the whole arrays made for a step from the
 * slices (zslice_whole below).
 *
 * Header-only (static inline): both engines already link the engine and
 * the comm layer, and the emulator's build swaps both. The gathers and
 * reduces are collective over the group (zslice_whole's _make, _zero_grad,
 * _release and _memory are not); 0, or -1 with err.
 */
#ifndef DAGRUN_ZSLICE_CUDA_H
#define DAGRUN_ZSLICE_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "cuda/gpt_cuda.h"
#include "zslice.h"

/* The gradients' first D S floats summed over dp, this rank's slice
 * into gsl (device, S floats) and from there into its place (where
 * gpt_cuda_step reads it); then every gradient times scale. Returns
 * with g's stream synchronized. */
static inline int zslice_cuda_reduce(gpt_cuda *g, comm *dp, const zslice *zs,
                                     float *gsl, float scale, char *err,
                                     size_t errlen) {
  float *gr = gpt_cuda_grads_ptr(g);
  if (gpt_cuda_synchronize(g, err, errlen) != 0 ||
      comm_reduce_scatter_sum(dp, gr, gsl, zs->S, err, errlen) != 0)
    return -1;
  cudaError_t e = cudaMemcpyAsync(gr + zs->lo, gsl, zs->S * sizeof(float),
                                  cudaMemcpyDeviceToDevice,
                                  (cudaStream_t)gpt_cuda_stream(g));
  if (e != cudaSuccess) {
    snprintf(err, errlen, "placing the reduced ZeRO slice: %s",
             cudaGetErrorString(e));
    return -1;
  }
  return gpt_cuda_scale_grads(g, scale, err, errlen) != 0 ||
                 gpt_cuda_synchronize(g, err, errlen) != 0
             ? -1
             : 0;
}

/* Every rank's BF16 slice of the parameters' first D S, in place (after
 * each updated its own). */
static inline int zslice_cuda_gather(gpt_cuda *g, comm *dp, const zslice *zs,
                                     char *err, size_t errlen) {
  char *p = (char *)gpt_cuda_params_ptr(g);
  if (gpt_cuda_synchronize(g, err, errlen) != 0)
    return -1;
  return comm_allgather_bytes(dp, p + zs->lo * 2, p, zs->S * 2, err, errlen);
}

/* ZeRO stage 3 (params set: the parameters sharded too) or stage 2
 * (the gradients alone) beside a model-parallel engine. gpt_cuda's
 * arrays are one allocation (gpt_cuda.cu's carve), none of which can be
 * freed alone, so the engine's gpt_cuda is made over the slice (its
 * master weights, the optimizer state and the reduced gradient; at
 * stage 3 the BF16 copy too, S elements each), and the whole range's
 * arrays the passes read and add to are these: wp (BF16, stage 3) and
 * wg (FP32), n elements each (the D S of the slices, then whatever the
 * engine keeps beside them: a pipeline stage's tied copy), each its own
 * cudaMalloc. zslice_whole_gather (stage 3) or _make (stage 2) makes
 * them for a step, _reduce reduce-scatters wg straight into the
 * gpt_cuda's slice gradient, and _release frees them: between steps a
 * rank holds its slice alone. place (arg) points the engine's groups at
 * wp and wg after each make and release (NULL while they are not
 * there). */
typedef struct zslice_whole {
  size_t n;        /* elements of each array */
  int params;      /* stage 3: wp too */
  int device;      /* the gpt_cuda's */
  const char *who; /* for messages: "pipeline", "tensor_cuda" */
  void *wp;        /* while made: the BF16 parameters (stage 3), */
  float *wg;       /* and the FP32 gradients */
  void (*place)(void *arg);
  void *arg;
} zslice_whole;

/* The arrays made (those not there yet) and placed. */
static inline int zslice_whole_make(zslice_whole *w, char *err, size_t errlen) {
  if ((!w->params || w->wp) && w->wg)
    return 0;
  if (cudaSetDevice(w->device) != cudaSuccess ||
      (w->params && !w->wp && cudaMalloc(&w->wp, w->n * 2) != cudaSuccess) ||
      (!w->wg &&
       cudaMalloc((void **)&w->wg, w->n * sizeof(float)) != cudaSuccess)) {
    cudaGetLastError();
    snprintf(err, errlen,
             "%s: out of GPU memory for the whole %s (%zu floats; "
             "zero_stage %d makes them for the step from the slices)",
             w->who, w->params ? "parameters and gradients" : "gradients", w->n,
             w->params ? 3 : 2);
    return -1;
  }
  w->place(w->arg);
  return 0;
}

/* The arrays freed once g's kernels that read them are done, the groups
 * pointed nowhere. A no-op when they are not there. */
static inline void zslice_whole_release(zslice_whole *w, gpt_cuda *g) {
  if (!w->wp && !w->wg)
    return;
  char err[256];
  if (g)
    gpt_cuda_synchronize(g, err, sizeof err);
  cudaFree(w->wp);
  cudaFree(w->wg);
  w->wp = NULL;
  w->wg = NULL;
  if (g)
    w->place(w->arg);
}

/* Zeroes wg, in g's stream order (a step's first pass adds to it). */
static inline int zslice_whole_zero_grad(zslice_whole *w, gpt_cuda *g,
                                         char *err, size_t errlen) {
  cudaError_t e = w->wg ? cudaMemsetAsync(w->wg, 0, w->n * sizeof(float),
                                          (cudaStream_t)gpt_cuda_stream(g))
                        : cudaErrorInvalidValue;
  if (e != cudaSuccess) {
    snprintf(err, errlen, "%s: zeroing the whole gradients: %s", w->who,
             w->wg ? cudaGetErrorString(e) : "they are not there");
    return -1;
  }
  return 0;
}

/* Stage 3: the arrays made and every rank's BF16 slice (the gpt_cuda's
 * S elements) all-gathered into wp's first D S. */
static inline int zslice_whole_gather(zslice_whole *w, gpt_cuda *g, comm *dp,
                                      const zslice *zs, char *err,
                                      size_t errlen) {
  return zslice_whole_make(w, err, errlen) != 0 ||
                 gpt_cuda_synchronize(g, err, errlen) != 0 ||
                 comm_allgather_bytes(dp, gpt_cuda_params_ptr(g), w->wp,
                                      zs->S * 2, err, errlen) != 0
             ? -1
             : 0;
}

/* wg's first D S summed over dp, this rank's slice straight into the
 * gpt_cuda's gradients (its S floats), times scale. Returns with g's
 * stream synchronized; wg is left for the caller to release. */
static inline int zslice_whole_reduce(zslice_whole *w, gpt_cuda *g, comm *dp,
                                      const zslice *zs, float scale, char *err,
                                      size_t errlen) {
  if (!w->wg) {
    snprintf(err, errlen, "%s: the whole gradients are not there", w->who);
    return -1;
  }
  return gpt_cuda_synchronize(g, err, errlen) != 0 ||
                 comm_reduce_scatter_sum(dp, w->wg, gpt_cuda_grads_ptr(g),
                                         zs->S, err, errlen) != 0 ||
                 gpt_cuda_scale_grads(g, scale, err, errlen) != 0 ||
                 gpt_cuda_synchronize(g, err, errlen) != 0
             ? -1
             : 0;
}

/* The memory figures: part, the gpt_cuda's (its estimate, of the slice)
 * with the engine's own buffers added, becomes the step's most (the
 * whole arrays beside it); held the bytes now (the arrays counted while
 * they are there), and at stage 3 what zero_stage 2 would hold at most
 * in the step for the same layout (the slice's master weights beside
 * the whole BF16 copy, the whole gradients beside the slice's: S the
 * slice's floats, shared the bytes of the engine's gradient buffers that
 * stage 2 holds as well, such as a tied head's sum), the figure stage 3
 * must beat. */
static inline void zslice_whole_memory(const zslice_whole *w, size_t S,
                                       uint64_t shared, gpt_memory *part,
                                       zslice_memory *held) {
  uint64_t wp = w->params ? (uint64_t)w->n * 2 : 0, wg = (uint64_t)w->n * 4;
  *held = (zslice_memory){.params = part->params + (w->wp ? wp : 0),
                          .grads = part->grads + (w->wg ? wg : 0),
                          .optim = part->optim,
                          .peak_grads = part->grads + wg,
                          .peak_params = part->params + wp};
  if (w->params) {
    held->stage2_params = (uint64_t)S * 4 + wp;
    held->stage2_grads = wg + (uint64_t)S * 4 + shared;
  }
  part->params = held->peak_params;
  part->grads = held->peak_grads;
  part->total = part->params + part->grads + part->optim + part->acts;
}

#endif /* DAGRUN_ZSLICE_CUDA_H */
