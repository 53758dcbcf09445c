/*
 * Fused causal self-attention on the tensor cores (attention.cuh): the
 * same flash-attention-2 passes as attention.cu's FP32 kernels, with the
 * tile products (Q K^T, P V, dO V^T, dS K, P^T dO, dS^T Q) as BF16
 * mma.sync m16n8k16 products accumulated in FP32. For head sizes that
 * are multiples of 16 (GPT-2's 64); attention.cu's launchers choose.
 *
 * Work split. A block takes TC_ROWS = 64 rows (queries in the forward and
 * dq kernels, keys in the dk/dv kernel) of one (batch, head), 16 a warp,
 * and walks tiles of TC_COLS = 64 rows of the other side, loaded into
 * shared memory as BF16 (row stride hs + 8: the 8 put the 8 rows a
 * fragment load reads on different banks).
 *
 * Everything a warp computes stays in its registers: mma.sync's register
 * layout is specified (PTX ISA, "Matrix Fragments for mma.m16n8k16"), so
 * each lane knows the row and column of each score it holds: lane
 * (g = lane / 4, t = lane % 4) holds rows g and g + 8, columns 2t and
 * 2t + 1 of each 8-column piece of the accumulator. The causal mask, the
 * online softmax (row statistics reduced over the 4 lanes of a row with
 * two shuffles) and the gradient formulas apply there, and a score block
 * becomes the A operand of the next product without leaving the
 * registers (flash-attention-2's layout match: the accumulator of two
 * 8-column pieces is the A fragment of one 16-wide k step). An earlier
 * version used WMMA, whose layout is unspecified, and moved every score
 * block, probability block and output row through shared memory: on an
 * H200 it ran GPT-2's attention (B=8 T=1024) at 39 TFLOP/s forward.
 *
 * P (and dS) are rounded to BF16 for their products, as flash-attention
 * does; the softmax's sums use the FP32 values. No atomics, one writer
 * per output element, a fixed order: deterministic in every mode, but
 * for the opt-in one-kernel backward (tc-fused), which adds dq with
 * atomics and is never taken in deterministic mode.
 */
#include "attention.cuh"

#define TC_WARPS 4
#define TC_ROWS (TC_WARPS * 16) /* rows of a block: 16 a warp */
#define TC_COLS 64              /* rows of a tile of the other side */
#define TC_NT (TC_COLS / 8)     /* 8-column pieces of a score block */
/* The softmax runs in base 2, the scores scaled by log2(e) / sqrt(hs) in
 * one multiply: exp2f is the hardware's own exponential, where expf
 * multiplies by log2(e) first. */
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f

/* Bytes rounded up to 128 (each shared array starts 16-byte aligned for
 * the tiles' vector loads, with room to spare). */
__host__ __device__ __forceinline__ size_t tc_al(size_t b) {
  return (b + 127) & ~(size_t)127;
}

/* A kernel's shared memory: ntiles BF16 tiles (64, hs + 8), then `stats`
 * pairs of arrays of 64 floats (a tile's rows' lse and D), then with ds
 * the dS tile of the one-kernel backward. One
 * description for the launcher's size and the kernel's pointers. */
struct tc_layout {
  int hs, ntiles, stats, ds; /* ds: a (64, 72) BF16 tile of dS after all */
  __host__ __device__ size_t tile() const {
    return tc_al((size_t)TC_COLS * (hs + 8) * sizeof(floatX));
  }
  __host__ __device__ size_t ds_tile() const {
    return tc_al((size_t)TC_ROWS * (TC_COLS + 8) * sizeof(floatX));
  }
  __host__ __device__ size_t total() const {
    return ntiles * tile() + stats * 2 * TC_COLS * sizeof(float) +
           (ds ? ds_tile() : 0);
  }
  __device__ floatX *ds_at(unsigned char *sm) const {
    return (floatX *)(sm + ntiles * tile() +
                      stats * 2 * TC_COLS * sizeof(float));
  }
  __device__ floatX *tile_at(unsigned char *sm, int i) const {
    return (floatX *)(sm + i * tile());
  }
  /* Pair i's lse; its D follows at + TC_COLS. */
  __device__ float *stats_at(unsigned char *sm, int i) const {
    return (float *)(sm + ntiles * tile()) + 2 * TC_COLS * i;
  }
};

/* dst[r*ld + d] = src[(t0+r)*stride + d] for r < TC_COLS (or TC_ROWS,
 * both 64), d < hs, as BF16; rows at or past T are zero. The whole block
 * loads, 16 bytes at a time where the rows are 16-byte aligned (dst's
 * always are: 128-byte aligned, rows of (hs + 8) * 2 bytes). */
template <int hs>
__device__ __forceinline__ void tc_load(floatX *dst, int ld, const floatX *src,
                                        size_t stride, int t0, int T) {
  constexpr int V = 8, NV = hs / V; /* BF16 a 16-byte load; hs % 16 == 0 */
  if ((uintptr_t)src % 16 == 0 && stride % V == 0) {
    for (int idx = threadIdx.x; idx < TC_COLS * NV; idx += blockDim.x) {
      const int r = idx / NV, d = idx % NV * V, t = t0 + r;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (t < T)
        v = *(const uint4 *)(src + (size_t)t * stride + d);
      *(uint4 *)(dst + r * ld + d) = v;
    }
    return;
  }
  for (int idx = threadIdx.x; idx < TC_COLS * hs; idx += blockDim.x) {
    const int r = idx / hs, d = idx % hs, t = t0 + r;
    dst[r * ld + d] = t < T ? src[(size_t)t * stride + d] : kc_x(0.0f);
  }
}

/* lse and Dsum of rows t0 .. t0+63 of head bh into lse_s and D_s (64
 * each; rows at or past T 0). The whole block loads. */
__device__ __forceinline__ void tc_load_stats(float *lse_s, float *D_s,
                                              const float *lse,
                                              const float *Dsum, int bh,
                                              int t0, int T) {
  for (int i = threadIdx.x; i < TC_COLS; i += blockDim.x) {
    const int t = t0 + i;
    lse_s[i] = t < T ? lse[(size_t)bh * T + t] : 0.0f;
    D_s[i] = t < T ? Dsum[(size_t)bh * T + t] : 0.0f;
  }
}

/* ---- Asynchronous tile loads (cp.async), one iteration ahead ----
 * With PIPE, each loop of the three kernels keeps two buffers of its
 * pair of streamed tiles (K and V, or Q and dO with their stats): the
 * pair of the next iteration is copied into one (cp.async, 16 bytes a
 * thread, no registers held) while the warps compute on the other, so
 * the global loads' latency hides behind the products instead of every
 * warp of the block waiting at the barrier for them (flash-attention 2's
 * pipelining). Without PIPE (DAGRUN_CUDA_ATTENTION=tc-sync) each pair is
 * loaded when it is needed, as before. */
#ifndef DAGRUN_CUDA_EMULATED
/* 16 bytes from global src to shared dst; the bytes past src_bytes (0 or
 * 16) are zeros. The emulator (emu.h) gives its own. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src,
                                           int src_bytes) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a),
               "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until all but the newest n committed groups have landed. */
template <int n> __device__ __forceinline__ void cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}
#endif

/* tc_load's copy started asynchronously where the rows are 16-byte
 * aligned (rows at or past T zeros); else tc_load's own, done now. */
template <int hs>
__device__ __forceinline__ void tc_load_async(floatX *dst, int ld,
                                              const floatX *src, size_t stride,
                                              int t0, int T) {
  constexpr int V = 8, NV = hs / V;
  if ((uintptr_t)src % 16 != 0 || stride % V != 0) {
    tc_load<hs>(dst, ld, src, stride, t0, T);
    return;
  }
  for (int idx = threadIdx.x; idx < TC_COLS * NV; idx += blockDim.x) {
    const int r = idx / NV, d = idx % NV * V, t = t0 + r;
    cp_async16(dst + r * ld + d, src + (size_t)(t < T ? t : 0) * stride + d,
               t < T ? 16 : 0);
  }
}

/* The streamed pair of a kernel's loop: tiles a and b (rows r0 .. r0+63
 * of src_a and src_b), with stats (lse, Dsum of those rows) if lse_s is
 * set. Buffer 0's pointers and the distance to buffer 1 (0 without
 * PIPE): arithmetic, where an array of the two indexed by the iteration's
 * parity would sit in local memory (nvcc keeps register arrays in
 * registers only under compile-time indices). */
struct tc_stream {
  floatX *a, *b;
  float *lse_s; /* the lse of the tile's rows, D at + TC_COLS; or null */
  int tile_step, stats_step;
  const floatX *src_a, *src_b;
  size_t stride_a, stride_b;
  const float *lse, *Dsum;
  int bh, T;
  __device__ floatX *a_at(int buf) const { return a + buf * tile_step; }
  __device__ floatX *b_at(int buf) const { return b + buf * tile_step; }
  __device__ float *lse_at(int buf) const { return lse_s + buf * stats_step; }
  __device__ float *D_at(int buf) const { return lse_at(buf) + TC_COLS; }
};

template <int hs, bool async>
__device__ __forceinline__ void tc_stream_load(const tc_stream &S, int buf,
                                               int r0) {
  constexpr int ld = hs + 8;
  if (async) {
    tc_load_async<hs>(S.a_at(buf), ld, S.src_a, S.stride_a, r0, S.T);
    tc_load_async<hs>(S.b_at(buf), ld, S.src_b, S.stride_b, r0, S.T);
  } else {
    tc_load<hs>(S.a_at(buf), ld, S.src_a, S.stride_a, r0, S.T);
    tc_load<hs>(S.b_at(buf), ld, S.src_b, S.stride_b, r0, S.T);
  }
  if (S.lse_s)
    tc_load_stats(S.lse_at(buf), S.D_at(buf), S.lse, S.Dsum, S.bh, r0, S.T);
}

/* Makes iteration it's pair (rows r0 ..) ready for every thread of the
 * block and returns its buffer. With PIPE the pair was started one
 * iteration ahead (the first here, at it 0) and the next (rows r0 + 64,
 * when `more`) starts now, into the buffer the previous iteration read:
 * the barrier first lets every warp finish with it. */
template <int hs, bool PIPE>
__device__ __forceinline__ int tc_stream_next(const tc_stream &S, int it,
                                              int r0, bool more) {
  __syncthreads(); /* the previous iteration's reads are done */
  if constexpr (PIPE) {
    if (it == 0) {
      tc_stream_load<hs, true>(S, 0, r0);
      cp_async_commit();
    }
    if (more) {
      tc_stream_load<hs, true>(S, (it + 1) % 2, r0 + TC_COLS);
      cp_async_commit();
      cp_async_wait<1>(); /* this iteration's pair, not the next */
    } else {
      cp_async_wait<0>();
    }
  } else {
    tc_stream_load<hs, false>(S, 0, r0);
  }
  __syncthreads(); /* every thread's copies are in */
  return PIPE ? it % 2 : 0;
}

/* ---- Fragments of mma.m16n8k16 (BF16 A, B; FP32 C), per lane ----
 * A (16 x 16) in 4 registers, B (16 x 8) in 2, C (16 x 8) in 4 floats,
 * two BF16 a register, the lower column (A) or row (B) in the low half. */

__device__ __forceinline__ uint32_t tc_pack(floatX lo, floatX hi) {
  return (uint32_t)__bfloat16_as_ushort(lo) |
         (uint32_t)__bfloat16_as_ushort(hi) << 16;
}
__device__ __forceinline__ uint32_t tc_pack_f(float lo, float hi) {
  return tc_pack(kc_x(lo), kc_x(hi));
}

#ifndef DAGRUN_CUDA_EMULATED
/* ldmatrix .x4: four 8 x 8 BF16 matrices of shared memory, lanes 8i to
 * 8i + 7 giving the addresses of matrix i's rows (16-byte aligned);
 * register i of lane 4g + t gets matrix i's row g, columns 2t and 2t + 1,
 * or with trans its column g, rows 2t and 2t + 1. The emulator (emu.h)
 * gives its own. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const floatX *p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4],
                                                  const floatX *p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
#endif

/* Fragment loads from shared memory with ldmatrix (one instruction for
 * 4 registers); tc_frag_b2 without LDM in 16-bit loads, for the
 * one-kernel backward's dq. Once the backward held
 * whole tiles of S and dP, ldmatrix cost it registers and an SM a block
 * (H200: 0.585 ms against 0.516); going 16 columns at a time, with 4
 * blocks an SM, it is the faster (H100, GPT-2's attention, B=8 T=1024:
 * 0.355 ms against 0.395 with the 16-bit loads; 0.416 before the
 * chunks). */

/* A[r][k] = M[(r0 + r) * ld + k0 + k]: 16 rows of M from r0, columns
 * k0 .. k0+15 (a0 .. a3: rows 0-7 and 8-15 of columns 0-7, then of 8-15). */
__device__ __forceinline__ void tc_frag_a(uint32_t a[4], const floatX *M,
                                          int ld, int r0, int k0) {
  const int lane = threadIdx.x % 32;
  ldmatrix_x4(a, M + (size_t)(r0 + lane % 16) * ld + k0 + lane / 16 * 8);
}
/* The B fragments of two 8-column pieces (b[0], b[1] of columns n0 ..
 * n0+7; b[2], b[3] of n0+8 .. n0+15) of one 16-row k step from k0, where
 * B[k][n] = M[(n0 + n) * ld + k0 + k]: M's rows as B's columns (the
 * products with a tile transposed: Q K^T, dO V^T). */
__device__ __forceinline__ void tc_frag_b2_t(uint32_t b[4], const floatX *M,
                                             int ld, int n0, int k0) {
  const int lane = threadIdx.x % 32, i = lane / 8;
  ldmatrix_x4(b, M + (size_t)(n0 + 8 * (i / 2) + lane % 8) * ld + k0 +
                     8 * (i % 2));
}
/* The same where B[k][n] = M[(k0 + k) * ld + n0 + n]: M's rows k0 ..
 * k0+15 as they are (the products with a tile: P V, dS K, P^T dO). */
template <bool LDM>
__device__ __forceinline__ void tc_frag_b2(uint32_t b[4], const floatX *M,
                                           int ld, int k0, int n0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, i = lane / 8;
  if constexpr (LDM) {
    ldmatrix_x4_trans(b, M + (size_t)(k0 + 8 * (i % 2) + lane % 8) * ld +
                             n0 + 8 * (i / 2));
  } else {
    for (int h = 0; h < 2; h++) {
      const floatX *p = M + (size_t)(k0 + 2 * t) * ld + n0 + 8 * h + g;
      b[2 * h] = tc_pack(p[0], p[ld]);
      b[2 * h + 1] = tc_pack(p[8 * ld], p[9 * ld]);
    }
  }
}
/* The A fragment of k step kk (columns 16 kk .. 16 kk + 15) of a 16 x 64
 * block held as 8 accumulators of 8 columns, rounded to BF16. */
__device__ __forceinline__ void tc_frag_a_of(uint32_t a[4],
                                             const float (*s)[4], int kk) {
  a[0] = tc_pack_f(s[2 * kk][0], s[2 * kk][1]);
  a[1] = tc_pack_f(s[2 * kk][2], s[2 * kk][3]);
  a[2] = tc_pack_f(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  a[3] = tc_pack_f(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

#ifndef DAGRUN_CUDA_EMULATED
/* c += A B on the tensor cores (the emulator, emu.h, gives its own). */
__device__ __forceinline__ void mma_bf16_16816(float c[4], const uint32_t a[4],
                                               const uint32_t b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]));
}
#endif

/* The A fragments of rows r0 .. r0+15 of M (hs wide), each k step: a
 * warp's rows, which it multiplies against every tile of the other side,
 * loaded from shared memory once (16 registers at hs 64) instead of once
 * a tile. */
template <int hs>
__device__ __forceinline__ void tc_frags_rows(uint32_t (*fa)[4],
                                              const floatX *M, int ld, int r0) {
#pragma unroll
  for (int kk = 0; kk < hs / 16; kk++)
    tc_frag_a(fa[kk], M, ld, r0, 16 * kk);
}

/* s (16 x 16, two 8-column accumulators) = A (the warp's 16 rows, hs
 * wide, as fragments fa) times B^T, B the tile's rows n0 .. n0+15: the
 * scores of the warp's rows against 16 of the tile's. */
template <int hs>
__device__ __forceinline__ void tc_scores16(float (*s)[4],
                                            const uint32_t (*fa)[4],
                                            const floatX *B, int ld, int n0) {
#pragma unroll
  for (int j = 0; j < 2; j++)
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < hs / 16; kk++) {
    uint32_t b[4];
    tc_frag_b2_t(b, B, ld, n0, 16 * kk);
    mma_bf16_16816(s[0], fa[kk], b);
    mma_bf16_16816(s[1], fa[kk], b + 2);
  }
}

/* s (16 x 64) = the same against all 64 rows of the tile. */
template <int hs>
__device__ __forceinline__ void
tc_scores(float (*s)[4], const uint32_t (*fa)[4], const floatX *B, int ld) {
#pragma unroll
  for (int j = 0; j < TC_NT; j += 2)
    tc_scores16<hs>(s + j, fa, B, ld, 8 * j);
}

/* acc (16 x hs, hs/8 accumulators) += A (one 16-wide k step, in a)
 * times rows k0 .. k0+15 of M (hs wide). */
template <int hs, bool LDM>
__device__ __forceinline__ void tc_mma_rows(float (*acc)[4],
                                            const uint32_t a[4],
                                            const floatX *M, int ld, int k0) {
#pragma unroll
  for (int n = 0; n < hs / 8; n += 2) {
    uint32_t b[4];
    tc_frag_b2<LDM>(b, M, ld, k0, 8 * n);
    mma_bf16_16816(acc[n], a, b);
    mma_bf16_16816(acc[n + 1], a, b + 2);
  }
}

/* acc (16 x hs, hs/8 accumulators) += P (16 x 64 in accumulators) times
 * the tile M (64 rows of hs). */
template <int hs>
__device__ __forceinline__ void
tc_accumulate(float (*acc)[4], const float (*p)[4], const floatX *M, int ld) {
#pragma unroll
  for (int kk = 0; kk < TC_COLS / 16; kk++) {
    uint32_t a[4];
    tc_frag_a_of(a, p, kk);
    tc_mma_rows<hs, true>(acc, a, M, ld, 16 * kk);
  }
}

/* Rows row0 (accumulator elements 0, 1) and row0 + 8 (2, 3) of a warp's
 * 16 x hs result into dst (row r at dst + r * stride), times mul, as
 * BF16, where the row is below T. */
template <int hs>
__device__ __forceinline__ void tc_store(floatX *dst, size_t stride,
                                         const float (*acc)[4], float mul,
                                         int row0, int T) {
  const int t = threadIdx.x % 32 % 4;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    if (row0 + 8 * h >= T)
      continue;
    floatX *d = dst + (size_t)(8 * h) * stride + 2 * t;
#pragma unroll
    for (int n = 0; n < hs / 8; n++) {
      d[8 * n] = kc_x(mul * acc[n][2 * h]);
      d[8 * n + 1] = kc_x(mul * acc[n][2 * h + 1]);
    }
  }
}

/* ---- Forward ----
 * smem: Q rows, then K and V tiles (two of each with PIPE). */
/* The layouts of the three kernels, for the launchers and the kernels. */
template <int HS, bool PIPE> __host__ __device__ tc_layout tc_fwd_layout() {
  return tc_layout{HS, PIPE ? 5 : 3, 0, 0};
}
template <int HS, bool PIPE> __host__ __device__ tc_layout tc_dq_layout() {
  return tc_layout{HS, PIPE ? 6 : 4, 1, 0};
}
template <int HS, bool PIPE, bool DQ>
__host__ __device__ tc_layout tc_dkdv_layout() {
  return tc_layout{HS, PIPE ? 6 : 4, PIPE ? 2 : 1, DQ};
}

/* The pair of tiles a loop streams from tile index `first` of L: a at
 * first (and first + 2 with PIPE), b at first + 1 (first + 3); stats
 * from pair 0 of L's stats (and pair 1) where with_stats. */
template <bool PIPE>
__device__ __forceinline__ tc_stream tc_stream_at(const tc_layout &L,
                                                  unsigned char *sm, int first,
                                                  bool with_stats) {
  tc_stream S{};
  S.a = L.tile_at(sm, first);
  S.b = L.tile_at(sm, first + 1);
  S.tile_step = PIPE ? (int)(2 * L.tile() / sizeof(floatX)) : 0;
  S.lse_s = with_stats ? L.stats_at(sm, 0) : nullptr;
  S.stats_step = PIPE ? 2 * TC_COLS : 0;
  return S;
}

template <int HS, bool PIPE>
__global__ void __launch_bounds__(TC_WARPS * 32, HS <= 64 ? 4 : 1)
    attention_tc_forward_kernel(floatX *out, float *lse, const floatX *qkv,
                                int T, int C, int NH) {
  extern __shared__ __align__(128) unsigned char tc_sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  constexpr int hs = HS, ldh = hs + 8;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const tc_layout L = tc_fwd_layout<HS, PIPE>();
  floatX *Qs = L.tile_at(tc_sm, 0);
  tc_stream S = tc_stream_at<PIPE>(L, tc_sm, 1, false);
  S.src_a = a.qkv + C;
  S.src_b = a.qkv + 2 * C;
  S.stride_a = S.stride_b = a.C3;
  S.T = T;
  const int q0 = att_tile_rev() * TC_ROWS, wq0 = q0 + 16 * w;
  /* The lane's two rows: g and g + 8 of the warp's 16. */
  const int qi[2] = {wq0 + g, wq0 + g + 8};
  const float sl2 = a.scale * TC_LOG2E;

  tc_load<hs>(Qs, ldh, a.qkv, a.C3, q0, T);
  __syncthreads();
  uint32_t fq[hs / 16][4]; /* the warp's Q rows, for every tile */
  tc_frags_rows<hs>(fq, Qs, ldh, 16 * w);
  float o[hs / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < hs / 8; n++)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  const int qlast = min(q0 + TC_ROWS, T) - 1;
  for (int k0 = 0, it = 0; k0 <= qlast; k0 += TC_COLS, it++) {
    const int buf = tc_stream_next<hs, PIPE>(S, it, k0, k0 + TC_COLS <= qlast);
    const floatX *Ks = S.a_at(buf), *Vs = S.b_at(buf);
    /* Warp-uniform: rows past T, or a tile wholly after the warp's rows. */
    if (wq0 >= T || k0 > wq0 + 15)
      continue;
    float s[TC_NT][4];
    tc_scores<hs>(s, fq, Ks, ldh);
    /* Scale and mask (warp-uniform: only a tile that reaches past the
     * warp's first row, or rows past T, has pairs to mask); each row's
     * max over the tile (its 4 lanes). */
    const bool edge = k0 + TC_COLS - 1 > wq0 || wq0 + 15 >= T;
    float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < TC_NT; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int h = e / 2, key = k0 + 8 * j + 2 * t + e % 2;
        s[j][e] = edge && !(qi[h] < T && key <= qi[h]) ? -INFINITY
                                                        : sl2 * s[j][e];
        mt[h] = fmaxf(mt[h], s[j][e]);
      }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 1));
      mt[h] = fmaxf(mt[h], __shfl_xor_sync(0xffffffffu, mt[h], 2));
      const float m_new = fmaxf(m[h], mt[h]);
      /* m_new is -inf only for a row with no key yet (past T): nothing. */
      alpha[h] = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);
      m[h] = m_new;
      l[h] *= alpha[h];
    }
    /* p = 2^(s - m), the lane's part of each row's sum; a masked score
     * (-inf) gives 0, against 0 where the row has no key yet (past T:
     * -inf - -inf would be NaN). */
    const float mu[2] = {m[0] == -INFINITY ? 0.0f : m[0],
                         m[1] == -INFINITY ? 0.0f : m[1]};
#pragma unroll
    for (int j = 0; j < TC_NT; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int h = e / 2;
        s[j][e] = exp2f(s[j][e] - mu[h]);
        l[h] += s[j][e];
      }
#pragma unroll
    for (int n = 0; n < hs / 8; n++) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }
    tc_accumulate<hs>(o, s, Vs, ldh); /* O += P V */
  }
  /* Each row's sum over its 4 lanes; out = O / l, lse = m ln 2 + log l
   * (m in base 2). */
#pragma unroll
  for (int h = 0; h < 2; h++) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
  if (wq0 >= T)
    return;
  floatX *dst = out + ((size_t)a.b * T + qi[0]) * C + (size_t)a.h * hs;
#pragma unroll
  for (int n = 0; n < hs / 8; n++) {
    const float inv0 = 1.0f / l[0], inv1 = qi[1] < T ? 1.0f / l[1] : 0.0f;
    o[n][0] *= inv0;
    o[n][1] *= inv0;
    o[n][2] *= inv1;
    o[n][3] *= inv1;
  }
  tc_store<hs>(dst, C, o, 1.0f, qi[0], T);
  if (t == 0)
#pragma unroll
    for (int h = 0; h < 2; h++)
      if (qi[h] < T)
        lse[(size_t)a.bh * T + qi[h]] = m[h] * TC_LN2 + logf(l[h]);
}

/* The A fragment of rows r0 .. r0+15 and k step k0 of A = M^T: A[r][k] =
 * M[(k0 + k) * ld + r0 + r] (the dS tile, stored keys by queries, read
 * queries by keys for dq). */
__device__ __forceinline__ void tc_frag_a_t(uint32_t a[4], const floatX *M,
                                            int ld, int r0, int k0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const floatX *p = M + (size_t)(k0 + 2 * t) * ld + r0 + g;
  a[0] = tc_pack(p[0], p[ld]);
  a[1] = tc_pack(p[8], p[ld + 8]);
  a[2] = tc_pack(p[8 * ld], p[9 * ld]);
  a[3] = tc_pack(p[8 * ld + 8], p[9 * ld + 8]);
}

/* The one-kernel backward's dq: the block's dS (its 64 keys by the query
 * tile's 64, in dS_s) times its K rows, for the warp's 16 queries (rows
 * r0 .. r0+15 of the tile, which starts at query q0), added into dq
 * (FP32, this (batch, head)'s q at t=0 of a (B,T,C) array, unscaled) with
 * atomics: every key block adds to the same queries, in no fixed order. */
template <int hs>
__device__ __forceinline__ void tc_dq_add(float *dq, const floatX *dS_s,
                                          const floatX *Kr, int r0, int q0,
                                          int T, int C) {
  constexpr int ldh = hs + 8, lds = TC_COLS + 8;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float acc[hs / 8][4];
#pragma unroll
  for (int n = 0; n < hs / 8; n++)
    acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < TC_ROWS / 16; kk++) {
    uint32_t a[4];
    tc_frag_a_t(a, dS_s, lds, r0, 16 * kk);
    tc_mma_rows<hs, false>(acc, a, Kr, ldh, 16 * kk);
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int q = q0 + r0 + g + 8 * h;
    if (q >= T)
      continue;
    float *d = dq + (size_t)q * C + 2 * t;
#pragma unroll
    for (int n = 0; n < hs / 8; n++) {
      atomicAdd(d + 8 * n, acc[n][2 * h]);
      atomicAdd(d + 8 * n + 1, acc[n][2 * h + 1]);
    }
  }
}

/* ---- Backward ----
 * Both kernels recompute S (the warp's 16 rows against a tile) and dP
 * (dO V^T, or its transpose), then p = exp(scale s - lse) and ds = p (dp -
 * D) where the causal mask lets the pair in, else 0, and add their
 * products. They go 16 columns of the tile at a time: those columns' S
 * and dP are the k step of the products that follow, so a warp holds 16
 * columns of them (16 floats) where whole tiles took 64, and the
 * registers go to the warp's own rows' fragments instead (its Q and dO,
 * or K and V, loaded once). A chunk the mask leaves nothing of is
 * skipped. The sums are those of whole tiles, in the same order. */

/* dq: grid as the forward pass. smem: Q and dO rows, then K and V tiles
 * (two of each with PIPE); lse and D of the block's rows. */
template <int HS, bool PIPE>
/* Up to hs 64, 4 blocks an SM (128 registers); wider heads would
 * spill. */
__global__ void __launch_bounds__(TC_WARPS * 32, HS <= 64 ? 4 : 1)
    attention_tc_dq_kernel(floatX *dqkv, const float *Dsum, const floatX *dout,
                           const floatX *qkv, const float *lse, int T, int C,
                           int NH) {
  extern __shared__ __align__(128) unsigned char tc_sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  constexpr int hs = HS, ldh = hs + 8;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const tc_layout L = tc_dq_layout<HS, PIPE>();
  floatX *Qs = L.tile_at(tc_sm, 0), *dOs = L.tile_at(tc_sm, 1);
  float *lse_r = L.stats_at(tc_sm, 0), *D_r = lse_r + TC_ROWS;
  tc_stream S = tc_stream_at<PIPE>(L, tc_sm, 2, false);
  S.src_a = a.qkv + C;
  S.src_b = a.qkv + 2 * C;
  S.stride_a = S.stride_b = a.C3;
  S.T = T;
  const int q0 = att_tile_rev() * TC_ROWS, wq0 = q0 + 16 * w;
  const int qi[2] = {wq0 + g, wq0 + g + 8};
  const float sl2 = a.scale * TC_LOG2E;
  const floatX *dbase = dout + (size_t)a.b * T * C + (size_t)a.h * hs;

  tc_load<hs>(Qs, ldh, a.qkv, a.C3, q0, T);
  tc_load<hs>(dOs, ldh, dbase, C, q0, T);
  tc_load_stats(lse_r, D_r, lse, Dsum, a.bh, q0, T);
  __syncthreads();
  uint32_t fq[hs / 16][4], fo[hs / 16][4]; /* the warp's Q and dO rows */
  tc_frags_rows<hs>(fq, Qs, ldh, 16 * w);
  tc_frags_rows<hs>(fo, dOs, ldh, 16 * w);
  /* lse in base 2 */
  const float l_i[2] = {lse_r[16 * w + g] * TC_LOG2E,
                        lse_r[16 * w + g + 8] * TC_LOG2E};
  const float D_i[2] = {D_r[16 * w + g], D_r[16 * w + g + 8]};
  float dq[hs / 8][4];
#pragma unroll
  for (int n = 0; n < hs / 8; n++)
    dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
  const int qlast = min(q0 + TC_ROWS, T) - 1;
  for (int k0 = 0, it = 0; k0 <= qlast; k0 += TC_COLS, it++) {
    const int buf = tc_stream_next<hs, PIPE>(S, it, k0, k0 + TC_COLS <= qlast);
    const floatX *Ks = S.a_at(buf), *Vs = S.b_at(buf);
    if (wq0 >= T)
      continue;
#pragma unroll
    for (int c = 0; c < TC_COLS; c += 16) {
      const int kc = k0 + c; /* the chunk's first key */
      if (kc > wq0 + 15)     /* every key after every query (warp-uniform) */
        break;
      float s[2][4], dp[2][4];
      tc_scores16<hs>(s, fq, Ks, ldh, c);
      tc_scores16<hs>(dp, fo, Vs, ldh, c);
      /* A pair to mask only where the chunk reaches past the warp's
       * first row, or rows past T (warp-uniform). */
      const bool edge = kc + 15 > wq0 || wq0 + 15 >= T;
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int h = e / 2, key = kc + 8 * j + 2 * t + e % 2;
          float ds = 0.0f;
          if (!edge || (qi[h] < T && key <= qi[h]))
            ds = exp2f(sl2 * s[j][e] - l_i[h]) * (dp[j][e] - D_i[h]);
          s[j][e] = ds;
        }
      uint32_t fa[4];
      tc_frag_a_of(fa, s, 0);
      tc_mma_rows<hs, true>(dq, fa, Ks, ldh, c); /* dq += dS K */
    }
  }
  if (wq0 < T)
    tc_store<hs>(dqkv + ((size_t)a.b * T + qi[0]) * a.C3 + (size_t)a.h * hs,
                 a.C3, dq, a.scale, qi[0], T);
}

/* The warp's rows of a chunk of dS^T (16 keys by the 16 queries from
 * column c, BF16 as the products take it) into dS_s, for the one-kernel
 * backward's dq. */
__device__ __forceinline__ void tc_ds_store(floatX *dS_s, const float (*ds)[4],
                                            int c) {
  constexpr int lds = TC_COLS + 8;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < 2; j++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *(uint32_t *)(dS_s + (16 * w + g + 8 * h) * lds + c + 8 * j + 2 * t) =
          tc_pack_f(ds[j][2 * h], ds[j][2 * h + 1]);
}

/* One query tile of the dk/dv kernel for the warp's 16 keys (fragments
 * fk, fv of its K and V rows; the first wk0), 16 queries at a time: S^T
 * = K Q^T and dP^T = V dO^T, then p and dS^T, dv += P^T dO and dk +=
 * dS^T Q; with DQ, the warp's rows of dS^T into dS_s for the block's
 * dq. */
template <int hs, bool DQ>
__device__ __forceinline__ void
tc_dkdv_tile(float (*dk)[4], float (*dv)[4], const uint32_t (*fk)[4],
             const uint32_t (*fv)[4], const floatX *Qt, const floatX *dOt,
             const float *lse_t, const float *D_t, floatX *dS_s, int wk0,
             int q0, int T, float sl2) {
  constexpr int ldh = hs + 8;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int kj[2] = {wk0 + g, wk0 + g + 8};
#pragma unroll
  for (int c = 0; c < TC_COLS; c += 16) {
    const int qc = q0 + c; /* the chunk's first query */
    float p[2][4], ds[2][4];
    /* Every query before every key, or past T (warp-uniform): nothing,
     * but zeros in dS_s. */
    if (qc + 15 < wk0 || qc >= T) {
      if constexpr (DQ) {
        const float zero[2][4] = {};
        tc_ds_store(dS_s, zero, c);
      }
      continue;
    }
    tc_scores16<hs>(p, fk, Qt, ldh, c);
    tc_scores16<hs>(ds, fv, dOt, ldh, c);
    /* A pair to mask only where the chunk starts before the warp's last
     * key or reaches past T, or keys past T (warp-uniform). */
    const bool edge = qc < wk0 + 15 || qc + 16 > T || wk0 + 15 >= T;
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int h = e / 2, col = c + 8 * j + 2 * t + e % 2, q = q0 + col;
        float pe = 0.0f, dse = 0.0f;
        if (!edge || (kj[h] < T && q < T && q >= kj[h])) {
          pe = exp2f(sl2 * p[j][e] - lse_t[col] * TC_LOG2E);
          dse = pe * (ds[j][e] - D_t[col]);
        }
        p[j][e] = pe;
        ds[j][e] = dse;
      }
    uint32_t fa[4];
    tc_frag_a_of(fa, p, 0);
    tc_mma_rows<hs, true>(dv, fa, dOt, ldh, c); /* dv += P^T dO */
    tc_frag_a_of(fa, ds, 0);
    tc_mma_rows<hs, true>(dk, fa, Qt, ldh, c); /* dk += dS^T Q */
    if constexpr (DQ)
      tc_ds_store(dS_s, ds, c);
  }
}

/* The warp's 16 rows of dS_s zero: its keys pair with none of the tile's
 * queries (past T, or all after them). */
__device__ __forceinline__ void tc_ds_zero_rows(floatX *dS_s) {
  constexpr int lds = TC_COLS + 8;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  for (int i = lane; i < 16 * TC_COLS / 2; i += 32)
    *(uint32_t *)(dS_s + (16 * w + i / (TC_COLS / 2)) * lds +
                  2 * (i % (TC_COLS / 2))) = 0u;
}

/* dk, dv: a block takes 64 keys (16 a warp) and walks the query tiles
 * from its first key on (tc_dkdv_tile). smem: K and V rows, then Q and
 * dO tiles (two of each with PIPE) with each tile's lse and D; with DQ
 * the dS tile.
 *
 * DQ (the one-kernel backward, tc-fused outside deterministic mode):
 * the block also adds each query tile's dq = dS K into dq_acc (FP32,
 * (B,T,C), zeroed by the launcher, scaled and rounded after), instead of
 * the dq kernel computing S and dP a second time: 5 products a tile pair
 * in place of 7, at the price of atomics. */
template <int HS, bool PIPE, bool DQ>
/* Up to hs 64, 4 blocks an SM: 128 registers, a few bytes spilled, where
 * the compiler would take 168 for 3 (on an H100, GPT-2's backward in
 * 0.355 ms against 0.395; the one-kernel backward, whose dS tile needs
 * more, would spill 184 bytes, and takes what it needs). */
__global__ void __launch_bounds__(TC_WARPS * 32, HS <= 64 && !DQ ? 4 : 1)
    attention_tc_dkdv_kernel(floatX *dqkv, float *dq_acc, const float *Dsum,
                             const floatX *dout, const floatX *qkv,
                             const float *lse, int T, int C, int NH) {
  extern __shared__ __align__(128) unsigned char tc_sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  constexpr int hs = HS, ldh = hs + 8;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int g = lane / 4;
  const tc_layout L = tc_dkdv_layout<HS, PIPE, DQ>();
  floatX *Kr = L.tile_at(tc_sm, 0), *Vr = L.tile_at(tc_sm, 1);
  floatX *dS_s = DQ ? L.ds_at(tc_sm) : nullptr;
  float *dq_bh =
      DQ ? dq_acc + (size_t)a.b * T * C + (size_t)a.h * hs : nullptr;
  const floatX *dbase = dout + (size_t)a.b * T * C + (size_t)a.h * hs;
  tc_stream S = tc_stream_at<PIPE>(L, tc_sm, 2, true);
  S.src_a = a.qkv;
  S.src_b = dbase;
  S.stride_a = a.C3;
  S.stride_b = C;
  S.lse = lse;
  S.Dsum = Dsum;
  S.bh = a.bh;
  S.T = T;
  const int kb0 = blockIdx.y * TC_ROWS, wk0 = kb0 + 16 * w;
  const int kj[2] = {wk0 + g, wk0 + g + 8};
  const float sl2 = a.scale * TC_LOG2E;

  tc_load<hs>(Kr, ldh, a.qkv + C, a.C3, kb0, T);
  tc_load<hs>(Vr, ldh, a.qkv + 2 * C, a.C3, kb0, T);
  __syncthreads();
  uint32_t fk[hs / 16][4], fv[hs / 16][4]; /* the warp's K and V rows */
  tc_frags_rows<hs>(fk, Kr, ldh, 16 * w);
  tc_frags_rows<hs>(fv, Vr, ldh, 16 * w);
  float dk[hs / 8][4], dv[hs / 8][4];
#pragma unroll
  for (int n = 0; n < hs / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      dk[n][e] = dv[n][e] = 0.0f;
  for (int q0 = kb0, it = 0; q0 < T; q0 += TC_COLS, it++) {
    const int buf = tc_stream_next<hs, PIPE>(S, it, q0, q0 + TC_COLS < T);
    /* Warp-uniform: keys past T, or a query tile wholly before them. */
    if (wk0 < T && q0 + TC_COLS - 1 >= wk0)
      tc_dkdv_tile<hs, DQ>(dk, dv, fk, fv, S.a_at(buf), S.b_at(buf),
                           S.lse_at(buf), S.D_at(buf), dS_s, wk0, q0, T, sl2);
    else if (DQ)
      tc_ds_zero_rows(dS_s);
    if constexpr (DQ) {
      __syncthreads(); /* every warp's rows of dS are in */
      tc_dq_add<hs>(dq_bh, dS_s, Kr, 16 * w, q0, T, C);
    }
  }
  if (wk0 >= T)
    return;
  floatX *dst = dqkv + ((size_t)a.b * T + kj[0]) * a.C3 + (size_t)a.h * hs;
  tc_store<hs>(dst + C, a.C3, dk, a.scale, kj[0], T);
  tc_store<hs>(dst + 2 * C, a.C3, dv, 1.0f, kj[0], T);
}

/* ---- Launchers (attention.cu's, when att_use_tc says so) ---- */

/* The kernels for head size hs (a multiple of 16 up to ATT_HS_MAX), with
 * the pipelined tile loads unless the context asks for the others. */
template <int HS, bool PIPE>
static int tc_forward_as(const kern_ctx *k, dim3 grid, floatX *out, float *lse,
                         const floatX *qkv, int T, int C, int NH,
                         const char *op, char *err, size_t errlen) {
  return att_launch(attention_tc_forward_kernel<HS, PIPE>, grid, TC_WARPS * 32,
                    tc_fwd_layout<HS, PIPE>().total(), k, op, err, errlen, out,
                    lse, qkv, T, C, NH);
}
template <int HS> static int tc_forward(const kern_ctx *k, dim3 grid,
                                        floatX *out, float *lse,
                                        const floatX *qkv, int T, int C,
                                        int NH, const char *op, char *err,
                                        size_t errlen) {
  return k->attention == KERN_ATT_TC_SYNC
             ? tc_forward_as<HS, false>(k, grid, out, lse, qkv, T, C, NH, op,
                                        err, errlen)
             : tc_forward_as<HS, true>(k, grid, out, lse, qkv, T, C, NH, op,
                                       err, errlen);
}

/* dqkv's q part (row r of (B,T) at r * 3C) = scale * dq_acc, as BF16: the
 * one-kernel backward's dq, once every key block has added to it. */
__global__ void attention_tc_dq_store_kernel(floatX *dqkv, const float *dq_acc,
                                             size_t rows, int C, float scale) {
  const size_t n4 = rows * (size_t)(C / 4); /* C % 16 == 0 here */
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / (C / 4), c = i % (C / 4) * 4;
    const float4 v = *(const float4 *)(dq_acc + r * C + c);
    floatX *d = dqkv + r * 3 * (size_t)C + c;
    d[0] = kc_x(scale * v.x);
    d[1] = kc_x(scale * v.y);
    d[2] = kc_x(scale * v.z);
    d[3] = kc_x(scale * v.w);
  }
}

/* The backward for head size HS: with dq_acc (B*T*C floats), the one
 * kernel; else the dq and dk/dv kernels. */
template <int HS, bool PIPE>
static int tc_backward_as(const kern_ctx *k, dim3 grid, floatX *dqkv,
                          float *dq_acc, const float *Dsum, const floatX *dout,
                          const floatX *qkv, const float *lse, int T, int C,
                          int NH, const char *op, char *err, size_t errlen) {
  if (dq_acc) {
    const size_t rows = (size_t)grid.x / NH * T;
    if (kc_cuda(cudaMemsetAsync(dq_acc, 0, rows * C * sizeof(float),
                                k->stream),
                op, "cudaMemsetAsync of dq", err, errlen) ||
        att_launch(attention_tc_dkdv_kernel<HS, PIPE, true>, grid,
                   TC_WARPS * 32, tc_dkdv_layout<HS, PIPE, true>().total(), k,
                   op, err, errlen, dqkv, dq_acc, Dsum, dout, qkv, lse, T, C,
                   NH))
      return -1;
    attention_tc_dq_store_kernel<<<kc_grid(rows * C / 4, 256, k->sm_count),
                                   256, 0, k->stream>>>(
        dqkv, dq_acc, rows, C, 1.0f / sqrtf((float)(C / NH)));
    return kc_check(op, err, errlen);
  }
  if (att_launch(attention_tc_dq_kernel<HS, PIPE>, grid, TC_WARPS * 32,
                 tc_dq_layout<HS, PIPE>().total(), k, op, err, errlen, dqkv,
                 Dsum, dout, qkv, lse, T, C, NH))
    return -1;
  return att_launch(attention_tc_dkdv_kernel<HS, PIPE, false>, grid,
                    TC_WARPS * 32, tc_dkdv_layout<HS, PIPE, false>().total(), k,
                    op, err, errlen, dqkv, (float *)nullptr, Dsum, dout, qkv,
                    lse, T, C, NH);
}
/* Pipelined unless tc-sync; one kernel (dq_acc then given) where tc-fused
 * asks for it outside deterministic mode. On an H100 (GPT-2 124M, B=8)
 * the one kernel took 5.55 ms of the step where the two took 4.76: the
 * dq atomics cost more than the second pass over S and dP. */
template <int HS>
static int tc_backward(const kern_ctx *k, dim3 grid, floatX *dqkv,
                       float *dq_acc, const float *Dsum, const floatX *dout,
                       const floatX *qkv, const float *lse, int T, int C,
                       int NH, const char *op, char *err, size_t errlen) {
  if (k->attention == KERN_ATT_TC_SYNC)
    return tc_backward_as<HS, false>(k, grid, dqkv, nullptr, Dsum, dout, qkv,
                                     lse, T, C, NH, op, err, errlen);
  if (k->deterministic || k->attention != KERN_ATT_TC_FUSED)
    dq_acc = nullptr;
  return tc_backward_as<HS, true>(k, grid, dqkv, dq_acc, Dsum, dout, qkv, lse,
                                  T, C, NH, op, err, errlen);
}
int att_tc_forward(const kern_ctx *k, floatX *out, float *lse,
                   const floatX *qkv, int B, int T, int C, int NH,
                   const char *op, char *err, size_t errlen) {
  dim3 grid((unsigned)(B * NH), kc_cdiv((size_t)T, TC_ROWS));
  switch (C / NH) {
#define TC_CASE(h)                                                             \
  case h:                                                                      \
    return tc_forward<h>(k, grid, out, lse, qkv, T, C, NH, op, err, errlen);
    TC_CASE(16) TC_CASE(32) TC_CASE(48) TC_CASE(64)
    TC_CASE(80) TC_CASE(96) TC_CASE(112) TC_CASE(128)
#undef TC_CASE
  }
  return kc_fail(err, errlen, op, "no tensor-core kernel for head size %d",
                 C / NH);
}

int att_tc_backward(const kern_ctx *k, floatX *dqkv, float *dq_acc,
                    const float *Dsum, const floatX *dout, const floatX *qkv,
                    const float *lse, int B, int T, int C, int NH,
                    const char *op, char *err, size_t errlen) {
  dim3 grid((unsigned)(B * NH), kc_cdiv((size_t)T, TC_ROWS));
  switch (C / NH) {
#define TC_CASE(h)                                                             \
  case h:                                                                      \
    return tc_backward<h>(k, grid, dqkv, dq_acc, Dsum, dout, qkv, lse, T, C,   \
                          NH, op, err, errlen);
    TC_CASE(16) TC_CASE(32) TC_CASE(48) TC_CASE(64)
    TC_CASE(80) TC_CASE(96) TC_CASE(112) TC_CASE(128)
#undef TC_CASE
  }
  return kc_fail(err, errlen, op, "no tensor-core kernel for head size %d",
                 C / NH);
}
