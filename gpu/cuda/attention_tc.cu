/*
 * Fused causal self-attention on the tensor cores (attention.cuh): the
 * same flash-attention-2 passes as attention.cu's FP32 kernels, with the
 * tile products (Q K^T, P V, dO V^T, dS K, P^T dO, dS^T Q) as BF16 WMMA
 * products accumulated in FP32. For head sizes that are multiples of 16
 * (GPT-2's 64); attention.cu's launchers choose.
 *
 * Work split. A block takes TC_ROWS = 64 rows (queries in the forward and
 * dq kernels, keys in the dk/dv kernel) of one (batch, head), 16 a warp,
 * and walks tiles of TC_COLS = 64 rows of the other side. The tiles live
 * in shared memory as BF16 (row stride hs + 8: WMMA wants a multiple of 8
 * elements and 32-byte aligned 16-row steps; the 8 spread the rows over
 * the banks). Each warp multiplies its 16 rows by the tile into a 16 x 64
 * FP32 score block in its own shared memory, where its lanes (two a row,
 * 32 columns each) apply the causal mask, the softmax and the gradient
 * formulas elementwise, knowing each element's row and column: WMMA's
 * register layout is not specified, so nothing elementwise touches a
 * fragment. The forward pass rescales its output rows in shared memory
 * for the same reason; the backward accumulators (dq; dk and dv) need no
 * rescaling and stay in fragments.
 *
 * P (and dS) are rounded to BF16 for their products, as flash-attention
 * does; the softmax's sums use the FP32 values. No atomics, one writer
 * per output element, a fixed order: deterministic in every mode.
 */
#include <mma.h>

#include "attention.cuh"

using namespace nvcuda;

#define TC_WARPS 4
#define TC_ROWS (TC_WARPS * 16) /* rows of a block: 16 a warp */
#define TC_COLS 64              /* rows of a tile of the other side */
#define TC_LDS (TC_COLS + 4)    /* FP32 score blocks' row stride */
#define TC_LDP (TC_COLS + 8)    /* BF16 P / dS blocks' row stride */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, floatX, wmma::row_major>
    frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, floatX, wmma::row_major>
    frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, floatX, wmma::col_major>
    frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* The BF16 tiles' row stride for head size hs. */

/* Bytes rounded up to 128 (every shared array starts 32-byte aligned, as
 * WMMA's loads and stores want, with room to spare). */
__host__ __device__ __forceinline__ size_t tc_al(size_t b) {
  return (b + 127) & ~(size_t)127;
}

/* A kernel's shared memory, one description for the launcher's size and
 * the kernel's pointers: ntiles BF16 tiles (64, hs + 8); nstats arrays of
 * 64 floats (row statistics); then per warp nscore FP32 score blocks (16,
 * TC_LDS), nbf BF16 blocks (16, TC_LDP) and, with rows, FP32 rows (16,
 * hs + 4) and 32 floats (the forward's running max and sum). Every piece
 * starts 128-byte aligned. */
struct tc_layout {
  int hs, ntiles, nstats, nscore, nbf, rows;
  __host__ __device__ size_t tile() const {
    return tc_al((size_t)TC_COLS * (hs + 8) * sizeof(floatX));
  }
  __host__ __device__ size_t stats() const {
    return tc_al((size_t)nstats * TC_COLS * sizeof(float));
  }
  __host__ __device__ size_t score() const {
    return tc_al(16 * TC_LDS * sizeof(float));
  }
  __host__ __device__ size_t bf() const {
    return tc_al(16 * TC_LDP * sizeof(floatX));
  }
  __host__ __device__ size_t row_block() const {
    return tc_al(16 * (size_t)(hs + 4) * sizeof(float));
  }
  __host__ __device__ size_t warp() const {
    return nscore * score() + nbf * bf() +
           (rows ? row_block() + tc_al(32 * sizeof(float)) : 0);
  }
  __host__ __device__ size_t total() const {
    return ntiles * tile() + stats() + TC_WARPS * warp();
  }
  __device__ floatX *tile_at(unsigned char *sm, int i) const {
    return (floatX *)(sm + i * tile());
  }
  __device__ float *stats_at(unsigned char *sm) const {
    return (float *)(sm + ntiles * tile());
  }
  __device__ unsigned char *warp_at(unsigned char *sm, int w) const {
    return sm + ntiles * tile() + stats() + w * warp();
  }
  __device__ float *score_at(unsigned char *sm, int w, int i) const {
    return (float *)(warp_at(sm, w) + i * score());
  }
  __device__ floatX *bf_at(unsigned char *sm, int w, int i) const {
    return (floatX *)(warp_at(sm, w) + nscore * score() + i * bf());
  }
  __device__ float *rows_at(unsigned char *sm, int w) const {
    return (float *)(warp_at(sm, w) + nscore * score() + nbf * bf());
  }
  __device__ float *rowstats_at(unsigned char *sm, int w) const {
    return (float *)((unsigned char *)rows_at(sm, w) + row_block());
  }
};

/* The three kernels' layouts. */
__host__ __device__ __forceinline__ tc_layout tc_forward_layout(int hs) {
  return tc_layout{hs, 3, 0, 1, 1, 1};
}
__host__ __device__ __forceinline__ tc_layout tc_dq_layout(int hs) {
  return tc_layout{hs, 4, 2, 2, 1, 0};
}
__host__ __device__ __forceinline__ tc_layout tc_dkdv_layout(int hs) {
  return tc_layout{hs, 4, 2, 2, 2, 0};
}

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

/* out (16 x 64, FP32, row stride TC_LDS) = A (16 x hs, row-major BF16,
 * stride lda) times B^T, B being 64 rows of hs (stride ldb): the score
 * block of this warp's 16 rows against a tile. */
template <int hs>
__device__ __forceinline__ void tc_scores(float *out, const floatX *A, int lda,
                                          const floatX *B, int ldb) {
#pragma unroll
  for (int n = 0; n < TC_COLS / 16; n++) {
    frag_c c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int kk = 0; kk < hs; kk += 16) {
      frag_a a;
      frag_b_col b; /* B^T: element (d, j) is B[j][d] */
      wmma::load_matrix_sync(a, A + kk, lda);
      wmma::load_matrix_sync(b, B + (size_t)(16 * n) * ldb + kk, ldb);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(out + 16 * n, c, TC_LDS, wmma::mem_row_major);
  }
}

/* acc[nb] (16 x 16 block nb of a 16 x hs result) += P (16 x 64, BF16,
 * stride TC_LDP) times V (64 rows of hs, stride ldv). */
template <int hs>
__device__ __forceinline__ void tc_accumulate(frag_c *acc, const floatX *P,
                                              const floatX *V, int ldv) {
#pragma unroll
  for (int nb = 0; nb < hs / 16; nb++)
#pragma unroll
    for (int kk = 0; kk < TC_COLS; kk += 16) {
      frag_a a;
      frag_b_row b;
      wmma::load_matrix_sync(a, P + kk, TC_LDP);
      wmma::load_matrix_sync(b, V + (size_t)kk * ldv + 16 * nb, ldv);
      wmma::mma_sync(acc[nb], a, b, acc[nb]);
    }
}

/* ---- Forward ----
 * smem (tc_forward_layout): Q, K, V tiles; per warp a score block, its P,
 * its output rows and their running max and sum (16 each). */
template <int HS>
__global__ void __launch_bounds__(TC_WARPS * 32)
    attention_tc_forward_kernel(floatX *out, float *lse, const floatX *qkv,
                                int T, int C, int NH) {
  extern __shared__ __align__(128) unsigned char tc_sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  constexpr int hs = HS, ldh = hs + 8, ldo = hs + 4;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const tc_layout L = tc_forward_layout(hs);
  floatX *Qs = L.tile_at(tc_sm, 0), *Ks = L.tile_at(tc_sm, 1),
         *Vs = L.tile_at(tc_sm, 2);
  float *S = L.score_at(tc_sm, w, 0), *O = L.rows_at(tc_sm, w),
        *ML = L.rowstats_at(tc_sm, w);
  floatX *P = L.bf_at(tc_sm, w, 0);
  const int q0 = att_tile_rev() * TC_ROWS, wq0 = q0 + 16 * w;
  /* Lane's row of the warp's 16, and its half of the tile's columns. */
  const int r = lane / 2, half = lane % 2, qi = wq0 + r;

  tc_load<hs>(Qs, ldh, a.qkv, a.C3, q0, T);
  for (int d = half; d < hs; d += 2)
    O[r * ldo + d] = 0.0f;
  if (half == 0) {
    ML[r] = -INFINITY;
    ML[16 + r] = 0.0f;
  }
  const int qlast = min(q0 + TC_ROWS, T) - 1;
  for (int k0 = 0; k0 <= qlast; k0 += TC_COLS) {
    __syncthreads(); /* the previous tile is consumed (Q is loaded) */
    tc_load<hs>(Ks, ldh, a.qkv + C, a.C3, k0, T);
    tc_load<hs>(Vs, ldh, a.qkv + 2 * C, a.C3, k0, T);
    __syncthreads();
    /* Warp-uniform: rows past T, or a tile wholly after the warp's rows. */
    if (wq0 >= T || k0 > wq0 + 15)
      continue;
    tc_scores<hs>(S, Qs + (size_t)16 * w * ldh, ldh, Ks, ldh);
    __syncwarp();
    /* The online softmax of the lane's row over its 32 columns, the
     * other half's through the partner lane. Key k0 <= qi is in for every
     * row that has keys here; rows with none keep their max and sum. */
    const float m_old = ML[r], l_old = ML[16 + r];
    float s[32], mt = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; c++) {
      const int j = k0 + 32 * half + c;
      s[c] = qi < T && j <= qi ? a.scale * S[r * TC_LDS + 32 * half + c]
                               : -INFINITY;
      mt = fmaxf(mt, s[c]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    const float m_new = fmaxf(m_old, mt);
    /* m_new is -inf only for a row with no key yet (past T): nothing. */
    const float alpha = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 32; c++) {
      const float p = s[c] == -INFINITY ? 0.0f : expf(s[c] - m_new);
      sum += p;
      P[r * TC_LDP + 32 * half + c] = kc_x(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    for (int d = half; d < hs; d += 2)
      O[r * ldo + d] *= alpha;
    __syncwarp(); /* the rescaled rows and P are written */
    if (half == 0) {
      ML[r] = m_new;
      ML[16 + r] = l_old * alpha + sum;
    }
    /* O (16 x hs) += P V, block by block through the fragments. */
#pragma unroll
    for (int nb = 0; nb < hs / 16; nb++) {
      frag_c c;
      wmma::load_matrix_sync(c, O + 16 * nb, ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < TC_COLS; kk += 16) {
        frag_a fa;
        frag_b_row fb;
        wmma::load_matrix_sync(fa, P + kk, TC_LDP);
        wmma::load_matrix_sync(fb, Vs + (size_t)kk * ldh + 16 * nb, ldh);
        wmma::mma_sync(c, fa, fb, c);
      }
      wmma::store_matrix_sync(O + 16 * nb, c, ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncwarp();
  if (qi < T) {
    const float m = ML[r], l = ML[16 + r], inv = 1.0f / l;
    floatX *dst = out + ((size_t)a.b * T + qi) * C + (size_t)a.h * hs;
    for (int d = half; d < hs; d += 2)
      dst[d] = kc_x(O[r * ldo + d] * inv);
    if (half == 0)
      lse[(size_t)a.bh * T + qi] = m + logf(l);
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

/* A warp's 16 x hs accumulator fragments through its rows R (16, hs + 4)
 * of shared memory into dst (row r of the lane at dst + r * stride, when
 * row_ok), times mul, as BF16: the lane writes its row's half of the
 * columns. */
template <int hs>
__device__ __forceinline__ void tc_store_rows(float *R, const frag_c *acc,
                                              floatX *dst, float mul,
                                              bool row_ok) {
  constexpr int ldr = hs + 4;
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
#pragma unroll
  for (int nb = 0; nb < hs / 16; nb++)
    wmma::store_matrix_sync(R + 16 * nb, acc[nb], ldr, wmma::mem_row_major);
  __syncwarp();
  if (row_ok)
    for (int d = half; d < hs; d += 2)
      dst[d] = kc_x(mul * R[r * ldr + d]);
}

/* ---- Backward ----
 * The two kernels share one elementwise step: from a score block S (the
 * warp's 16 rows against a tile, before the scale) and dP (dO V^T, or
 * its transpose), p = exp(scale s - lse) and ds = p (dp - D) where the
 * causal mask lets the pair in, else 0. */

/* dq: grid as the forward pass. smem (tc_dq_layout): Q and dO rows, K
 * and V tiles; lse and D of the block's rows; per warp S and dP (FP32)
 * and dS (BF16). At the end the warps' results (16, hs + 4) FP32 go
 * through the K and V tiles' space. */
template <int HS>
__global__ void __launch_bounds__(TC_WARPS * 32)
    attention_tc_dq_kernel(floatX *dqkv, const float *Dsum, const floatX *dout,
                           const floatX *qkv, const float *lse, int T, int C,
                           int NH) {
  extern __shared__ __align__(128) unsigned char tc_sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  constexpr int hs = HS, ldh = hs + 8, ldr = hs + 4;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const tc_layout L = tc_dq_layout(hs);
  floatX *Qs = L.tile_at(tc_sm, 0), *dOs = L.tile_at(tc_sm, 1),
         *Ks = L.tile_at(tc_sm, 2), *Vs = L.tile_at(tc_sm, 3);
  float *lse_r = L.stats_at(tc_sm), *D_r = lse_r + TC_ROWS;
  float *S = L.score_at(tc_sm, w, 0), *dP = L.score_at(tc_sm, w, 1);
  floatX *dS = L.bf_at(tc_sm, w, 0);
  const int q0 = att_tile_rev() * TC_ROWS, wq0 = q0 + 16 * w;
  const int r = lane / 2, half = lane % 2, qi = wq0 + r;
  const floatX *dbase = dout + (size_t)a.b * T * C + (size_t)a.h * hs;

  tc_load<hs>(Qs, ldh, a.qkv, a.C3, q0, T);
  tc_load<hs>(dOs, ldh, dbase, C, q0, T);
  tc_load_stats(lse_r, D_r, lse, Dsum, a.bh, q0, T);
  frag_c acc[hs / 16];
#pragma unroll
  for (int nb = 0; nb < hs / 16; nb++)
    wmma::fill_fragment(acc[nb], 0.0f);
  const int qlast = min(q0 + TC_ROWS, T) - 1;
  for (int k0 = 0; k0 <= qlast; k0 += TC_COLS) {
    __syncthreads();
    tc_load<hs>(Ks, ldh, a.qkv + C, a.C3, k0, T);
    tc_load<hs>(Vs, ldh, a.qkv + 2 * C, a.C3, k0, T);
    __syncthreads();
    if (wq0 >= T || k0 > wq0 + 15)
      continue;
    tc_scores<hs>(S, Qs + (size_t)16 * w * ldh, ldh, Ks, ldh);
    tc_scores<hs>(dP, dOs + (size_t)16 * w * ldh, ldh, Vs, ldh);
    __syncwarp();
    const float l_i = lse_r[16 * w + r], D_i = D_r[16 * w + r];
#pragma unroll 4
    for (int c = 32 * half; c < 32 * half + 32; c++) {
      const int j = k0 + c;
      float ds = 0.0f;
      if (qi < T && j <= qi) {
        const float p = expf(a.scale * S[r * TC_LDS + c] - l_i);
        ds = p * (dP[r * TC_LDS + c] - D_i);
      }
      dS[r * TC_LDP + c] = kc_x(ds);
    }
    __syncwarp();
    tc_accumulate<hs>(acc, dS, Ks, ldh); /* dq += dS K */
    __syncwarp();
  }
  /* The warps' dq through shared memory (the K and V tiles' space,
   * 2 * tile >= 4 warps x 16 x (hs + 4) floats), scaled, as BF16. */
  __syncthreads();
  tc_store_rows<hs>((float *)L.tile_at(tc_sm, 2) + (size_t)w * 16 * ldr, acc,
                    dqkv + ((size_t)a.b * T + wq0 + r) * a.C3 +
                        (size_t)a.h * hs,
                    a.scale, qi < T);
}

/* dk, dv: a block takes 64 keys (16 a warp) and walks the query tiles
 * from its first key on. S^T = K Q^T and dP^T = V dO^T per warp; then
 * dv += P^T dO and dk += dS^T Q. smem (tc_dkdv_layout): K and V rows, Q
 * and dO tiles; the tile's lse and D; per warp S^T and dP^T (FP32), P^T
 * and dS^T (BF16). */
template <int HS>
__global__ void __launch_bounds__(TC_WARPS * 32)
    attention_tc_dkdv_kernel(floatX *dqkv, const float *Dsum,
                             const floatX *dout, const floatX *qkv,
                             const float *lse, int T, int C, int NH) {
  extern __shared__ __align__(128) unsigned char tc_sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  constexpr int hs = HS, ldh = hs + 8, ldr = hs + 4;
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const tc_layout L = tc_dkdv_layout(hs);
  floatX *Kr = L.tile_at(tc_sm, 0), *Vr = L.tile_at(tc_sm, 1),
         *Qt = L.tile_at(tc_sm, 2), *dOt = L.tile_at(tc_sm, 3);
  float *lse_t = L.stats_at(tc_sm), *D_t = lse_t + TC_COLS;
  float *St = L.score_at(tc_sm, w, 0), *dPt = L.score_at(tc_sm, w, 1);
  floatX *Pt = L.bf_at(tc_sm, w, 0), *dSt = L.bf_at(tc_sm, w, 1);
  const int kb0 = blockIdx.y * TC_ROWS, wk0 = kb0 + 16 * w;
  const int r = lane / 2, half = lane % 2, kj = wk0 + r;
  const floatX *dbase = dout + (size_t)a.b * T * C + (size_t)a.h * hs;

  tc_load<hs>(Kr, ldh, a.qkv + C, a.C3, kb0, T);
  tc_load<hs>(Vr, ldh, a.qkv + 2 * C, a.C3, kb0, T);
  frag_c dk[hs / 16], dv[hs / 16];
#pragma unroll
  for (int nb = 0; nb < hs / 16; nb++) {
    wmma::fill_fragment(dk[nb], 0.0f);
    wmma::fill_fragment(dv[nb], 0.0f);
  }
  for (int q0 = kb0; q0 < T; q0 += TC_COLS) {
    __syncthreads();
    tc_load<hs>(Qt, ldh, a.qkv, a.C3, q0, T);
    tc_load<hs>(dOt, ldh, dbase, C, q0, T);
    tc_load_stats(lse_t, D_t, lse, Dsum, a.bh, q0, T);
    __syncthreads();
    /* Warp-uniform: keys past T, or a query tile wholly before them. */
    if (wk0 >= T || q0 + TC_COLS - 1 < wk0)
      continue;
    tc_scores<hs>(St, Kr + (size_t)16 * w * ldh, ldh, Qt, ldh);
    tc_scores<hs>(dPt, Vr + (size_t)16 * w * ldh, ldh, dOt, ldh);
    __syncwarp();
#pragma unroll 4
    for (int c = 32 * half; c < 32 * half + 32; c++) {
      const int qi = q0 + c;
      float p = 0.0f, ds = 0.0f;
      if (kj < T && qi < T && qi >= kj) {
        p = expf(a.scale * St[r * TC_LDS + c] - lse_t[c]);
        ds = p * (dPt[r * TC_LDS + c] - D_t[c]);
      }
      Pt[r * TC_LDP + c] = kc_x(p);
      dSt[r * TC_LDP + c] = kc_x(ds);
    }
    __syncwarp();
    tc_accumulate<hs>(dv, Pt, dOt, ldh);  /* dv += P^T dO */
    tc_accumulate<hs>(dk, dSt, Qt, ldh);  /* dk += dS^T Q */
    __syncwarp();
  }
  /* The warps' dk, then dv, through shared memory (the Q and dO tiles'
   * space), as BF16: dk scaled, dv not. */
  float *R = (float *)L.tile_at(tc_sm, 2) + (size_t)w * 16 * ldr;
  floatX *dst = dqkv + ((size_t)a.b * T + kj) * a.C3 + (size_t)a.h * hs;
  __syncthreads();
  tc_store_rows<hs>(R, dk, dst + C, a.scale, kj < T);
  __syncwarp(); /* the warp's rows are read before dv overwrites them */
  tc_store_rows<hs>(R, dv, dst + 2 * C, 1.0f, kj < T);
}

/* ---- Launchers (attention.cu's, when att_use_tc says so) ---- */

/* The kernels for head size hs (a multiple of 16 up to ATT_HS_MAX). */
template <int HS> static int tc_forward(const kern_ctx *k, dim3 grid,
                                        floatX *out, float *lse,
                                        const floatX *qkv, int T, int C,
                                        int NH, const char *op, char *err,
                                        size_t errlen) {
  return att_launch(attention_tc_forward_kernel<HS>, grid, TC_WARPS * 32,
                    tc_forward_layout(HS).total(), k, op, err, errlen, out, lse, qkv, T,
                    C, NH);
}

template <int HS>
static int tc_backward(const kern_ctx *k, dim3 grid, floatX *dqkv,
                       const float *Dsum, const floatX *dout,
                       const floatX *qkv, const float *lse, int T, int C,
                       int NH, const char *op, char *err, size_t errlen) {
  if (att_launch(attention_tc_dq_kernel<HS>, grid, TC_WARPS * 32,
                 tc_dq_layout(HS).total(), k, op, err, errlen, dqkv, Dsum, dout, qkv,
                 lse, T, C, NH))
    return -1;
  return att_launch(attention_tc_dkdv_kernel<HS>, grid, TC_WARPS * 32,
                    tc_dkdv_layout(HS).total(), k, op, err, errlen, dqkv, Dsum, dout,
                    qkv, lse, T, C, NH);
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

int att_tc_backward(const kern_ctx *k, floatX *dqkv, const float *Dsum,
                    const floatX *dout, const floatX *qkv, const float *lse,
                    int B, int T, int C, int NH, const char *op, char *err,
                    size_t errlen) {
  dim3 grid((unsigned)(B * NH), kc_cdiv((size_t)T, TC_ROWS));
  switch (C / NH) {
#define TC_CASE(h)                                                             \
  case h:                                                                      \
    return tc_backward<h>(k, grid, dqkv, Dsum, dout, qkv, lse, T, C, NH, op,   \
                          err, errlen);
    TC_CASE(16) TC_CASE(32) TC_CASE(48) TC_CASE(64)
    TC_CASE(80) TC_CASE(96) TC_CASE(112) TC_CASE(128)
#undef TC_CASE
  }
  return kc_fail(err, errlen, op, "no tensor-core kernel for head size %d",
                 C / NH);
}
