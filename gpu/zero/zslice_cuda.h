/*
 * zslice_cuda: zslice.h's two collectives on the CUDA engine's own
 * device arrays, for the model-parallel engines whose data-parallel
 * group runs ZeRO-1 over a range at the start of a gpt_cuda's arrays
 * (gpu/pipeline/pipeline_cuda.c's stage, gpu/tensor/tensor_cuda.c's
 * shard): the range padded to D S floats, this rank's slice [lo, lo +
 * S), the group an NCCL communicator (device buffers).
 *
 * Header-only (static inline): both engines already link the engine and
 * the comm layer, and the emulator's build swaps both. Collective over
 * the group; 0, or -1 with err.
 */
#ifndef DAGRUN_ZSLICE_CUDA_H
#define DAGRUN_ZSLICE_CUDA_H

#include <cuda_runtime_api.h>
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

#endif /* DAGRUN_ZSLICE_CUDA_H */
