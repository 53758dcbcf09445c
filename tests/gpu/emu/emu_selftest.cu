/*
 * emu_selftest: the emulator (emu.h, runtime.cpp, cublaslt.cpp) finds
 * what a GPU would fault or hang on, and runs correct code correctly.
 * Rewritten by xform.py like gpu/cuda's files, never compiled by nvcc.
 *
 *   emu_selftest ok              a block reduction through shared memory,
 *                                __syncthreads and shuffles, over many
 *                                blocks: the exact sum; exit 0
 *   emu_selftest divergent-sync  one warp at the __syncthreads of an if,
 *                                the other at its else's
 *   emu_selftest sync-vs-shuffle half a warp at a shuffle, the other half
 *                                at a __syncthreads
 *   emu_selftest shuffle-exited  a shuffle naming lanes that returned
 *   emu_selftest unwritten-smem  shared memory read before any write:
 *                                NaN, as the poisoning promises; exit 0
 *   emu_selftest bad-launch      a 2048-thread block: refused with
 *                                cudaErrorInvalidConfiguration
 *   emu_selftest copy-overrun    cudaMemcpy past an allocation's end
 *   emu_selftest lt-aux-ld       a GELU epilogue with aux ld 12
 * Each of the broken ones prints EMU ERROR (tests/gpu/emu/CMakeLists.txt
 * holds them to it) and exits non-zero.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

__global__ void block_sum(const float *x, float *out, int n) {
  __shared__ float part[8];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x)
    v += x[i];
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x / 32) ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2)
      v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0)
      out[blockIdx.x] = v;
  }
}

__global__ void divergent_sync(float *out) {
  if (threadIdx.x < 32) {
    __syncthreads();
    out[threadIdx.x] = 1.0f;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2.0f;
  }
}

__global__ void sync_vs_shuffle(float *out) {
  float v = (float)threadIdx.x;
  if (threadIdx.x < 16)
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  else
    __syncthreads();
  out[threadIdx.x] = v;
}

__global__ void shuffle_exited(float *out) {
  if (threadIdx.x % 32 >= 16)
    return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

__global__ void unwritten_smem(float *out) {
  __shared__ float s[64];
  if (threadIdx.x < 32)
    s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

static int check_ok(void) {
  const int n = 100003, blocks = 13;
  float *x, *out;
  if (cudaMalloc((void **)&x, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc((void **)&out, blocks * sizeof(float)) != cudaSuccess)
    return 1;
  /* Small integers: every order of adding them gives the same float. */
  static float h[100003];
  double want = 0;
  for (int i = 0; i < n; i++) {
    h[i] = (float)(i % 17) - 8.0f;
    want += h[i];
  }
  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
  block_sum<<<blocks, 256>>>(x, out, n);
  float part[blocks];
  cudaMemcpy(part, out, sizeof part, cudaMemcpyDeviceToHost);
  double got = 0;
  for (int b = 0; b < blocks; b++)
    got += part[b];
  printf("block_sum: %.1f (want %.1f)\n", got, want);
  return cudaGetLastError() != cudaSuccess || got != want;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  const char *c = argv[1];
  float *out;
  if (cudaMalloc((void **)&out, 1024 * sizeof(float)) != cudaSuccess)
    return 1;
  if (!strcmp(c, "ok"))
    return check_ok();
  if (!strcmp(c, "divergent-sync"))
    divergent_sync<<<1, 64>>>(out);
  else if (!strcmp(c, "sync-vs-shuffle"))
    sync_vs_shuffle<<<1, 64>>>(out);
  else if (!strcmp(c, "shuffle-exited"))
    shuffle_exited<<<1, 32>>>(out);
  else if (!strcmp(c, "unwritten-smem")) {
    unwritten_smem<<<1, 64>>>(out);
    float h[64];
    cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
    printf("unwritten shared memory reads %g, written reads %g\n", h[40], h[0]);
    return !(isnan(h[40]) && h[0] == 1.0f);
  } else if (!strcmp(c, "bad-launch")) {
    divergent_sync<<<1, 2048>>>(out);
    cudaError_t e = cudaGetLastError();
    printf("launch: %s\n", cudaGetErrorName(e));
    return e == cudaErrorInvalidConfiguration ? 3 : 0;
  } else if (!strcmp(c, "copy-overrun")) {
    float h[1025] = {0};
    cudaError_t e = cudaMemcpy(out, h, sizeof h, cudaMemcpyHostToDevice);
    printf("copy: %s\n", cudaGetErrorName(e));
    return e == cudaErrorInvalidValue ? 3 : 0;
  } else if (!strcmp(c, "lt-aux-ld")) {
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t a, b, dd;
    cublasLtMatmulPreference_t p;
    cublasLtHandle_t h;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_AUX;
    const int64_t ld = 12;
    void *aux = out;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                   sizeof epi);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                   &aux, sizeof aux);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                   sizeof ld);
    cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, 12, 8, 12);
    cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, 8, 4, 8);
    cublasLtMatrixLayoutCreate(&dd, CUDA_R_16BF, 12, 4, 12);
    cublasLtMatmulPreferenceCreate(&p);
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, d, a, b, dd, dd, p, 1,
                                                      &r, &found);
    printf("heuristic: %s\n", cublasLtGetStatusName(s));
    cublasLtMatmulPreferenceDestroy(p);
    cublasLtMatrixLayoutDestroy(dd);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
    return s == CUBLAS_STATUS_INVALID_VALUE ? 3 : 0;
  } else {
    return 2;
  }
  cudaDeviceSynchronize();
  printf("no error seen\n");
  return 0;
}
