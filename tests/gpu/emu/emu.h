/*
 * emu: runs the CUDA C++ of the .cu files of gpu/cuda on the CPU
 * (kernels_emulated.cpp, emu_selftest.cu, and with runtime.cpp,
 * cublaslt.cpp and nccl.cpp the whole engine: gpt_cuda_emulated).
 * xform.py rewrites a .cu at build time (launches, shared memory) and
 * puts `#include "emu.h"` first; everything else of the source compiles
 * unchanged as host C++ against the real CUDA headers (types, BF16
 * conversions), with the device-side names defined here.
 *
 * Model: a launch runs its blocks one after another on the launching
 * thread; each CUDA thread of a block is a fiber (emu.cpp) that runs
 * until it reaches a __syncthreads, a warp operation or its end. A warp
 * operation (shuffle, __syncwarp) waits for every live lane of its warp,
 * each lane getting its source lane's value; __syncthreads for every
 * live thread of the block. The fibers that can run are run in an order
 * shuffled every time (DAGRUN_EMU_SEED), so results that depend on the
 * order of threads between two barriers vary. Shared memory, static and
 * dynamic, is filled with NaN bytes before each block, so that a read of
 * an element no thread of the block wrote shows up in the results.
 *
 * What the emulator reports as an error (printed with "EMU ERROR"):
 * threads of a block at different __syncthreads (a barrier in divergent
 * code), lanes at a warp operation beside threads at a __syncthreads (they
 * would wait for each other for ever), a shuffle whose mask names a lane
 * that has exited or is at another shuffle (these stop the program with
 * status 1, at once: the block cannot go on); a launch the GPU would
 * refuse (block over 1024 threads, grid y or z over 65535, dynamic shared
 * memory over 48 KiB without cudaFuncSetAttribute, or over 227 KiB:
 * counted in emu_errors(), and the launcher sees
 * cudaErrorInvalidConfiguration as on the GPU).
 *
 * Not modelled: the memory model (memory is the host's, and one fiber
 * runs at a time: a race between threads of a block shows only as a
 * result that depends on their order), timing, FMA contraction (the host
 * computes a*b+c in two roundings where nvcc may fuse them), and the
 * precision of the fast intrinsics (rsqrtf here is 1/sqrtf).
 */
#ifndef DAGRUN_TESTS_EMU_H
#define DAGRUN_TESTS_EMU_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

using std::max;
using std::min;

/* The CUDA headers, compiled by a host compiler, give these as
 * attributes the host compiler ignores with a warning. */
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)

/* ---- Thread and block indices ---- */
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim
#define warpSize 32
/* The initial-exec TLS model: an offset from the thread pointer, where
 * the default model of a shared object (the emulated train.so, which
 * dagrun loads with dlopen) calls __tls_get_addr at every use of
 * threadIdx and the rest: 6% of an emulated training step. These few
 * bytes fit in the static TLS space glibc keeps for modules loaded
 * later. */
#define EMU_TLS thread_local __attribute__((tls_model("initial-exec")))
extern EMU_TLS uint3 emu_threadIdx, emu_blockIdx;
extern EMU_TLS dim3 emu_blockDim, emu_gridDim;

/* ---- Barriers, shuffles, atomics ---- */
void emu_syncthreads(int line);
#define __syncthreads() emu_syncthreads(__LINE__)

/* The value `bits` (up to 8 bytes) of lane src of this warp, after every
 * lane of the warp gave its own. */
uint64_t emu_shfl_bits(unsigned mask, uint64_t bits, int src, int line);
int emu_lane(void);
/* line: the shuffle's place in the source; the lanes of the mask must be
 * at the same one. */
template <class T>
static inline T emu_shfl(unsigned mask, T v, int src, int line) {
  static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
  uint64_t raw = 0;
  memcpy(&raw, &v, sizeof v);
  raw = emu_shfl_bits(mask, raw, src, line);
  T r;
  memcpy(&r, &raw, sizeof r);
  return r;
}
#define __shfl_sync(m, v, s, ...) emu_shfl((m), (v), (s), __LINE__)
#define __shfl_xor_sync(m, v, o, ...)                                          \
  emu_shfl((m), (v), emu_lane() ^ (o), __LINE__)
/* Lanes past the end read their own value, as on the GPU. */
#define __shfl_down_sync(m, v, d, ...)                                         \
  emu_shfl((m), (v), emu_lane() + (d) < 32 ? emu_lane() + (d) : emu_lane(),    \
           __LINE__)

/* The warp's lanes meet (all 32: the kernels pass the full mask). */
#define __syncwarp(...) ((void)emu_shfl_bits(0xffffffffu, 0, emu_lane(), __LINE__))

/* Float atomics as the GPU's: one indivisible read-add-write. */
static inline float emu_atomic_add(float *p, float v) {
  return std::atomic_ref<float>(*p).fetch_add(v);
}
/* Counters (layernorm.cu's column sums count their finished blocks). */
static inline unsigned emu_atomic_add(unsigned *p, unsigned v) {
  return std::atomic_ref<unsigned>(*p).fetch_add(v);
}
#define atomicAdd(p, v) emu_atomic_add((p), (v))
/* The GPU's fence orders the thread's memory accesses for the whole
 * device; the host's sequentially consistent fence is the same promise
 * (and one fiber runs at a time here: it never shows). */
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)

template <class T> static inline T emu_ldg(const T *p) { return *p; }
#define __ldg(p) emu_ldg(p)
/* A load through L2 only, not the SM's L1 (which does not see other
 * SMs' writes): what another block wrote in this launch. Host memory is
 * coherent, so a plain load. */
#define __ldcg(p) emu_ldg(p)

/* IEEE-rounded single operations: the host's, with contraction off for
 * the test (-ffp-contract=off). */
static inline float emu_fadd_rn(float a, float b) { return a + b; }
static inline float emu_fsub_rn(float a, float b) { return a - b; }
static inline float emu_fmul_rn(float a, float b) { return a * b; }
static inline float emu_fdiv_rn(float a, float b) { return a / b; }
static inline float emu_fsqrt_rn(float a) { return std::sqrt(a); }
#define __fadd_rn(a, b) emu_fadd_rn((a), (b))
#define __fsub_rn(a, b) emu_fsub_rn((a), (b))
#define __fmul_rn(a, b) emu_fmul_rn((a), (b))
#define __fdiv_rn(a, b) emu_fdiv_rn((a), (b))
#define __fsqrt_rn(a) emu_fsqrt_rn(a)
/* The GPU's rsqrtf is within 2 ulps; the test's tolerances cover it. */
static inline float emu_rsqrtf(float x) { return 1.0f / std::sqrt(x); }
#define rsqrtf(x) emu_rsqrtf(x)

/* ---- Shared memory ---- */
/* `extern __shared__ float sm[];` becomes `float *sm = emu_dyn_smem();` */
float *emu_dyn_smem(void);
/* `__shared__ T a[n];` becomes `static T a[n]; EMU_SHARED(a);`: the
 * array is registered once (poisoned then) and poisoned again before
 * every block. */
struct emu_shared_reg {
  emu_shared_reg(void *p, size_t n);
};
#define EMU_SHARED(x) static emu_shared_reg emu_shared_##x(&(x), sizeof(x))

/* ---- mma.sync m16n8k16, BF16 inputs, FP32 accumulators ----
 * attention_tc.cu's tile products (PTX inline assembly on the GPU, which
 * the host compiler cannot take: the .cu leaves its own definition out
 * where DAGRUN_CUDA_EMULATED is defined). A warp operation, as on the
 * GPU: each lane hands in its registers in the layout PTX specifies
 * (lane = 4 g + t holds A rows g and g + 8, columns 2t, 2t + 1 and
 * 2t + 8, 2t + 9; B columns g, rows 2t, 2t + 1 and 2t + 8, 2t + 9; C
 * rows g and g + 8, columns 2t, 2t + 1), the lanes meet, and each
 * computes its own four results from every lane's registers: a kernel
 * that puts a value in the wrong register gets the wrong product here as
 * on the GPU. Products in float, summed in the order k = 0..15 after c
 * (the tensor cores' order is their own: tolerances, not bits, compare
 * them). */
#define DAGRUN_CUDA_EMULATED 1
void emu_mma_bf16_16816(float c[4], const uint32_t a[4], const uint32_t b[2],
                        int line);
#define mma_bf16_16816(c, a, b) emu_mma_bf16_16816((c), (a), (b), __LINE__)

/* ---- ldmatrix .x4 (attention_tc.cu's fragment loads) ----
 * A warp operation as on the GPU: lanes 8i .. 8i + 7 give the addresses
 * of the rows of 8 x 8 BF16 matrix i; register i of lane 4g + t gets its
 * row g, columns 2t and 2t + 1 (with trans, its column g, rows 2t and
 * 2t + 1), the lower in the low half. An address the GPU would refuse
 * (not 16-byte aligned, counted from the start of the block's dynamic
 * shared memory, which the GPU aligns to 128) is an EMU ERROR. */
void emu_ldmatrix_x4(uint32_t r[4], const void *p, bool trans, int line);
#define ldmatrix_x4(r, p) emu_ldmatrix_x4((r), (p), false, __LINE__)
#define ldmatrix_x4_trans(r, p) emu_ldmatrix_x4((r), (p), true, __LINE__)

/* ---- cp.async (attention_tc.cu's pipelined tile loads) ----
 * 16 bytes from global to shared memory (the bytes past src_bytes, 0 or
 * 16, zeros), landing only when the issuing thread waits for its group:
 * cp_async_wait<n>() lands all but the newest n committed groups. So a
 * read of a buffer whose copy was not waited for (and made visible to the
 * block by a barrier) finds the poison or the previous tile, as it can on
 * the GPU, instead of the data. */
void emu_cp_async16(void *dst, const void *src, int src_bytes);
void emu_cp_async_commit(void);
void emu_cp_async_wait(int n);
#define cp_async16(d, s, n) emu_cp_async16((d), (s), (n))
#define cp_async_commit() emu_cp_async_commit()
template <int n> static inline void cp_async_wait(void) {
  emu_cp_async_wait(n);
}

/* ---- Host side: launches and the runtime calls the launchers make ---- */
struct emu_cfg_t {
  dim3 g, b;
  size_t smem;
};
static inline emu_cfg_t emu_cfg(dim3 g, dim3 b, size_t smem = 0,
                                cudaStream_t = 0) {
  return {g, b, smem};
}
/* Runs body as kernel fn (for its shared memory attribute) over c's grid.
 * A configuration the GPU would refuse runs nothing and sets the error
 * cudaGetLastError returns. */
void emu_run(const void *fn, emu_cfg_t c, const std::function<void()> &body);
template <class... A> auto emu_launcher(void (*f)(A...), emu_cfg_t c) {
  return [=](A... args) {
    emu_run(reinterpret_cast<const void *>(f), c, [&] { f(args...); });
  };
}

cudaError_t emu_func_set_attribute(const void *fn, cudaFuncAttribute attr,
                                   int value);
/* The runtime's C function takes const void *; the template overload that
 * takes the kernel itself is nvcc's only. */
#define cudaFuncSetAttribute(f, a, v)                                          \
  emu_func_set_attribute(reinterpret_cast<const void *>(f), (a), (v))
/* runtime.cpp: the CUDA runtime API under its own names (cudaMalloc,
 * cudaMemcpyAsync, cudaGetLastError, ...). A launch the GPU would refuse
 * sets the error cudaGetLastError returns. */
void emu_set_last_error(cudaError_t e);
/* Lets copies and memsets take host memory as device memory (kernels_
 * emulated's buffers are host vectors); off by default: a device pointer
 * must lie in an allocation of cudaMalloc. */
void emu_allow_host_pointers(bool allow);
/* [p, p + n) inside one allocation of cudaMalloc (or, with
 * emu_allow_host_pointers, in none); false after an EMU ERROR naming
 * call otherwise. */
bool emu_device_range(const void *p, size_t n, const char *call);

/* Prints "EMU ERROR: " and the message (flushed at once: the program may
 * be stopped by a sanitizer before its buffers are), and counts it. */
void emu_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Problems the emulator found (see the top of this file) since the
 * program started. */
int emu_errors(void);

#endif /* DAGRUN_TESTS_EMU_H */
