/*
 * kernels_common: what the kernel files of gpu/cuda share (not part of
 * kernels.cuh's interface): error reporting, grid sizing, warp and block
 * reductions, BF16 loads and stores. Internal names carry kc_.
 */
#ifndef DAGRUN_CUDA_KERNELS_COMMON_CUH
#define DAGRUN_CUDA_KERNELS_COMMON_CUH

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels.cuh"

/* Writes "op: message" into err (if any) and returns -1. */
static inline int kc_fail(char *err, size_t errlen, const char *op,
                          const char *fmt, ...) {
  if (err && errlen) {
    int n = snprintf(err, errlen, "%s: ", op);
    if (n < 0 || (size_t)n >= errlen)
      return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* After a launch: 0, or -1 with "op: <CUDA's error string>". A launch
 * error (bad configuration, too much shared memory) shows here; an error
 * while the kernel runs shows at the caller's next synchronizing call. */
static inline int kc_check(const char *op, char *err, size_t errlen) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return kc_fail(err, errlen, op, "%s (%s)", cudaGetErrorString(e),
                   cudaGetErrorName(e));
  return 0;
}

/* Same for a CUDA runtime call's status. */
static inline int kc_cuda(cudaError_t e, const char *op, const char *what,
                          char *err, size_t errlen) {
  if (e != cudaSuccess)
    return kc_fail(err, errlen, op, "%s: %s (%s)", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
  return 0;
}

/* Blocks for a grid-stride loop over n items, block threads each: enough
 * to fill the device (sm_count * 16 blocks), never more than the items
 * need, at least 1. The kernels loop with size_t indices, so any n works. */
static inline unsigned kc_grid(size_t n, int block, int sm_count) {
  size_t need = (n + (size_t)block - 1) / (size_t)block;
  size_t cap = (size_t)(sm_count > 0 ? sm_count : 1) * 16;
  size_t g = need < cap ? need : cap;
  return g ? (unsigned)g : 1u;
}

static inline unsigned kc_cdiv(size_t a, size_t b) {
  return (unsigned)((a + b - 1) / b);
}

/* ---- Device helpers ---- */

__device__ __forceinline__ float kc_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float kc_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* A reduction over the block (blockDim.x a multiple of 32, at most
 * 1024) by warp (kc_warp_sum or kc_warp_max; empty its identity), the
 * same tree every time: each warp's, then warp 0 over those. Every
 * thread gets the result. shared: 32 floats. Callers sync before reusing
 * it. */
template <float (*warp_op)(float)>
__device__ __forceinline__ float kc_block_reduce(float v, float *shared,
                                                 float empty) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nwarps = blockDim.x / 32;
  v = warp_op(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shared[lane] : empty;
  r = warp_op(r);
  __syncthreads();
  return r;
}
__device__ __forceinline__ float kc_block_sum(float v, float *shared) {
  return kc_block_reduce<kc_warp_sum>(v, shared, 0.0f);
}
__device__ __forceinline__ float kc_block_max(float v, float *shared) {
  return kc_block_reduce<kc_warp_max>(v, shared, -INFINITY);
}

__device__ __forceinline__ float kc_f(floatX x) { return __bfloat162float(x); }
/* Round to nearest even, as kern_f32_to_bf16 promises. */
__device__ __forceinline__ floatX kc_x(float x) {
  return __float2bfloat16_rn(x);
}

/* GELU, tanh approximation (gpt_cpu.c's gpt_cpu_gelu / gelu_backward). */
#define KC_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
__device__ __forceinline__ float kc_gelu(float x) {
  float u = KC_GELU_SCALE * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float kc_gelu_grad(float x) {
  float u = KC_GELU_SCALE * (x + 0.044715f * x * x * x);
  float th = tanhf(u);
  float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) +
         0.5f * x * sech2 * KC_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

/* 8 BF16 in one 128-bit load or store (p 16-byte aligned). */
struct alignas(16) kc_x8 {
  floatX v[8];
};
__device__ __forceinline__ kc_x8 kc_load8(const floatX *p) {
  kc_x8 r;
  *reinterpret_cast<int4 *>(&r) = __ldg(reinterpret_cast<const int4 *>(p));
  return r;
}
__device__ __forceinline__ void kc_store8(floatX *p, const kc_x8 &r) {
  *reinterpret_cast<int4 *>(p) = *reinterpret_cast<const int4 *>(&r);
}
static inline int kc_aligned16(const void *p) {
  return ((uintptr_t)p % 16) == 0;
}

/* ---- Column sums in a fixed order (layernorm.cu; used by matmul_lt.cu
 * for the bias gradient) ----
 * Rows are cut into chunks of KC_COLSUM_ROWS, columns into groups of
 * KC_COLSUM_COLS; each chunk's column sums go to scratch, and the last
 * block of a group to finish adds the group's chunks in a fixed order
 * (warp y chunks y, y + 8, ..., then the warps in order) into the FP32
 * output. Chunks and groups depend on N and OC only, so the
 * order of the additions, and the bits, are the same on every run and
 * every device. 64 rows: 384 blocks of 256 threads for GPT-2's
 * N=8192, C=768 (132 SMs on an H100), partial sums 3% of dout's bytes. */
#define KC_COLSUM_ROWS 64
#define KC_COLSUM_COLS 256
/* The counters kern_ctx_init makes (k->colsum_done), one per group: OC up
 * to 1024 * 256 columns. */
#define KC_COLSUM_MAX_GROUPS 1024
static inline size_t kc_colsum_chunks(int N) {
  return (size_t)kc_cdiv((size_t)(N > 0 ? N : 1), KC_COLSUM_ROWS);
}
/* db (OC) += sum of dout's rows; scratch: kc_colsum_chunks(N) * OC floats.
 * Uses k->colsum_done: calls on one context run one at a time (its
 * stream). */
int kc_colsum(const kern_ctx *k, float *db, float *scratch, const floatX *dout,
              int N, int OC, const char *op, char *err, size_t errlen);

#endif /* DAGRUN_CUDA_KERNELS_COMMON_CUH */
