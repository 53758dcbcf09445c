/* The fused classifier: softmax, cross-entropy and the logit gradient in
 * one kernel, never storing the probabilities (kernels.cuh).
 *
 * Two kernels, one block of CLS_BLOCK threads a row. Where rows are
 * 16-byte aligned and Vp % 8 == 0 (GPT-2's Vp = 50304), classifier_vec_
 * kernel moves 8 BF16 a load and a store and keeps the row in registers
 * between the statistics and the gradient: the row is read once and
 * written once. Elsewhere classifier_kernel reads one element a thread
 * at a time, twice (statistics, then gradient). */
#include "kernels_common.cuh"

#define CLS_BLOCK 1024
/* Vectors of 8 BF16 a thread keeps in registers: 7 x 1024 x 8 = 57344
 * columns, GPT-2's 50304 (6288 vectors: 6 or 7 a thread) among them.
 * 7 uint4 are 28 of the 64 registers a thread of a 1024-thread block can
 * have; a row wider than that reads its remaining vectors twice. */
#define CLS_HELD 7
/* exp(x - m) = exp2(x log2(e) - m log2(e)): one FFMA before the ex2,
 * where expf would scale and reduce its argument itself. */
#define CLS_LOG2E 1.4426950408889634f

/* Online softmax state: the running maximum and the sum of exp(x - max). */
struct cls_ms {
  float m, s;
};
__device__ __forceinline__ cls_ms cls_merge(cls_ms a, cls_ms b) {
  float m = fmaxf(a.m, b.m);
  /* A side with no values (m = -inf, s = 0) adds nothing: -inf - -inf
   * would be NaN. The test is on s, not on m: fmaxf drops a NaN m, so a
   * side holding a NaN logit can have m = -inf, and its NaN s must reach
   * the loss (a NaN s times anything stays NaN). */
  float sa = a.s == 0.0f ? 0.0f : a.s * expf(a.m - m);
  float sb = b.s == 0.0f ? 0.0f : b.s * expf(b.m - m);
  return {m, sa + sb};
}

__device__ __forceinline__ cls_ms cls_warp_merge(cls_ms st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    cls_ms other = {__shfl_xor_sync(0xffffffffu, st.m, o),
                    __shfl_xor_sync(0xffffffffu, st.s, o)};
    st = cls_merge(st, other);
  }
  return st;
}

/* exp(x - m) given mL = m * CLS_LOG2E. */
__device__ __forceinline__ float cls_exp(float x, float mL) {
  return exp2f(fmaf(x, CLS_LOG2E, -mL));
}

struct cls_shared {
  float m[32], s[32], lse;
};

/* The threads' states merged in a fixed tree (each warp's lanes, then
 * warp 0 over the warps: the same bits every run), the row's loss written
 * by thread 0, and lse = m + log(s) returned to every thread. An
 * out-of-range target gives a NaN loss (a kernel cannot return an error;
 * the loss shows it). The caller syncs before sh is used again. */
__device__ float cls_block_lse(cls_ms st, cls_shared *sh, float *loss,
                               int tgt_ok, float xt) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nwarps = blockDim.x / 32;
  st = cls_warp_merge(st);
  if (lane == 0) {
    sh->m[warp] = st.m;
    sh->s[warp] = st.s;
  }
  __syncthreads();
  if (warp == 0) {
    cls_ms w = {-INFINITY, 0.0f};
    if (lane < nwarps)
      w = {sh->m[lane], sh->s[lane]};
    w = cls_warp_merge(w);
    if (lane == 0) {
      float lse = w.m + logf(w.s);
      sh->lse = lse;
      *loss = tgt_ok ? lse - xt : NAN;
    }
  }
  __syncthreads();
  return sh->lse;
}

/* One block a row of logits (N,Vp), one element a thread at a time: a
 * pass for max and sum (online), then, with dloss != 0, a second pass
 * writing dlogits in place. The target's logit is read before the block
 * synchronizes, so before anything is overwritten. */
__global__ void __launch_bounds__(CLS_BLOCK)
    classifier_kernel(floatX *logits, float *losses, const int *targets,
                      float dloss, int N, int V, int Vp) {
  __shared__ cls_shared sh;
  for (long long row = blockIdx.x; row < N; row += gridDim.x) {
    floatX *x = logits + (size_t)row * Vp;
    const int tgt = targets[row];
    const int tgt_ok = tgt >= 0 && tgt < V;
    float xt = tgt_ok ? kc_f(x[tgt]) : 0.0f;
    cls_ms st = {-INFINITY, 0.0f};
    float mL = -INFINITY; /* st.m * CLS_LOG2E */
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      float v = kc_f(x[j]), vL = v * CLS_LOG2E;
      /* A NaN takes this branch and makes m and s NaN. */
      if (!(v <= st.m)) {
        st.s = st.s * exp2f(mL - vL) + 1.0f;
        st.m = v;
        mL = vL;
      } else {
        st.s += exp2f(vL - mL);
      }
    }
    const float lse = cls_block_lse(st, &sh, losses + row, tgt_ok, xt);
    const float lseL = lse * CLS_LOG2E;
    if (dloss != 0.0f) {
      for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float d = 0.0f;
        if (j < V) {
          float p = cls_exp(kc_f(x[j]), lseL);
          d = dloss * (p - (j == tgt ? 1.0f : 0.0f));
        }
        x[j] = kc_x(d);
      }
    }
    /* sh is rewritten by the next row. */
    __syncthreads();
  }
}

/* The vector kernel keeps each 16-byte vector as four 32-bit words of
 * two BF16 (column 2k in the low half): eight 16-bit values would take a
 * register each. */

/* A plain load, not kc_load8's __ldg: the kernel writes this memory, and
 * the read-only path is only for data that stays unchanged while the
 * kernel runs. */
__device__ __forceinline__ uint4 cls_load(const floatX *p) {
  return *reinterpret_cast<const uint4 *>(p);
}
__device__ __forceinline__ void cls_store(floatX *p, uint4 w) {
  *reinterpret_cast<uint4 *>(p) = w;
}

/* A BF16's bits are the upper half of the float's. */
__device__ __forceinline__ float cls_bits_f(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
__device__ __forceinline__ float cls_lo(uint32_t w) {
  return cls_bits_f(w << 16);
}
__device__ __forceinline__ float cls_hi(uint32_t w) {
  return cls_bits_f(w & 0xffff0000u);
}
__device__ __forceinline__ __nv_bfloat162 cls_bf2(uint32_t w) {
  __nv_bfloat162 b;
  /* Its bytes are the two BF16 (the cast: a host compiler warns of a
   * class without a trivial copy-assignment). */
  memcpy(static_cast<void *>(&b), &w, sizeof b);
  return b;
}

#define CLS_NEG_INF2 0xff80ff80u /* two BF16 -inf */

/* The word of columns j, j + 1 with the padding ones (>= V) set to -inf,
 * which adds nothing to the maximum or the sum. */
__device__ __forceinline__ uint32_t cls_pad2(uint32_t w, int j, int V) {
  if (j >= V)
    return CLS_NEG_INF2;
  if (j + 1 >= V)
    return (w & 0xffffu) | (CLS_NEG_INF2 & 0xffff0000u);
  return w;
}
/* The vector at column j0 padded so; a vector past the row (j0 >= Vp)
 * becomes all -inf. Only the vectors at the row's end have padding. */
__device__ __forceinline__ uint4 cls_pad(uint4 w, int j0, int V) {
  if (j0 + 8 <= V)
    return w;
  return make_uint4(cls_pad2(w.x, j0, V), cls_pad2(w.y, j0 + 2, V),
                    cls_pad2(w.z, j0 + 4, V), cls_pad2(w.w, j0 + 6, V));
}

/* The running maximum m (two BF16 lanes) with a vector's 8 values, NaN
 * where any is NaN. In BF16 (max.NaN.bf16x2, a pair an instruction), so
 * that no float conversion is shared with the sum: the compiler would
 * keep the 56 converted values live between the two loops and spill. */
__device__ __forceinline__ __nv_bfloat162 cls_max8(__nv_bfloat162 m, uint4 w) {
  m = __hmax2_nan(m, cls_bf2(w.x));
  m = __hmax2_nan(m, cls_bf2(w.y));
  m = __hmax2_nan(m, cls_bf2(w.z));
  return __hmax2_nan(m, cls_bf2(w.w));
}
__device__ __forceinline__ float cls_max_f(__nv_bfloat162 m) {
  return __bfloat162float(__hmax_nan(__low2bfloat16(m), __high2bfloat16(m)));
}

/* s plus exp(x - m) over a vector's 8 values; mL = m * CLS_LOG2E. */
__device__ __forceinline__ float cls_sum8(float s, uint4 w, float mL) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; k++)
    s += cls_exp(cls_lo(u[k]), mL) + cls_exp(cls_hi(u[k]), mL);
  return s;
}

/* m * CLS_LOG2E, but 0 for m = -inf: where a thread's values are all
 * padding (or -inf), x - m would be -inf - -inf = NaN; against 0 each
 * adds exp2(-inf) = 0, and the state {-inf, 0} is empty. */
__device__ __forceinline__ float cls_mlog2e(float m) {
  return m == -INFINITY ? 0.0f : m * CLS_LOG2E;
}

/* dloss * (p - onehot) of element e (value x) of a vector: n of its
 * columns are < V (the rest padding, 0), the target is its element t
 * (none where t is not in 0..7). */
__device__ __forceinline__ float cls_grad(float x, int e, int n, int t,
                                          float lseL, float dloss) {
  float p = cls_exp(x, lseL);
  return e < n ? dloss * (p - (e == t ? 1.0f : 0.0f)) : 0.0f;
}
/* The BF16 dlogits of the vector at column j0; lseL = lse * CLS_LOG2E. */
__device__ __forceinline__ uint4 cls_grad8(uint4 w, int j0, int V, int tgt,
                                           float lseL, float dloss) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
  const int n = V - j0, t = tgt - j0;
  uint32_t o[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    /* Both roundings in one instruction (cvt.rn.bf16x2.f32). */
    __nv_bfloat162 d = __floats2bfloat162_rn(
        cls_grad(cls_lo(u[k]), 2 * k, n, t, lseL, dloss),
        cls_grad(cls_hi(u[k]), 2 * k + 1, n, t, lseL, dloss));
    memcpy(&o[k], &d, sizeof o[k]);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

/* classifier_kernel's work with 8 BF16 a load (rows 16-byte aligned,
 * Vp % 8 == 0). Thread t holds vectors t, t + 1024, ... (CLS_HELD of
 * them) in registers: their maximum first, then one sum against it, so
 * one exp an element (the online update of classifier_kernel pays one
 * more each time the maximum grows); the gradient is computed from the
 * same registers. The vectors past CLS_HELD * 1024 (rows wider than
 * 57344 columns) are merged one at a time and read again for the
 * gradient. */
__global__ void __launch_bounds__(CLS_BLOCK)
    classifier_vec_kernel(floatX *logits, float *losses, const int *targets,
                          float dloss, int N, int V, int Vp) {
  __shared__ cls_shared sh;
  const int nvec = Vp / 8, tail = CLS_HELD * CLS_BLOCK;
  for (long long row = blockIdx.x; row < N; row += gridDim.x) {
    floatX *x = logits + (size_t)row * Vp;
    const int tgt = targets[row];
    const int tgt_ok = tgt >= 0 && tgt < V;
    const float xt = tgt_ok ? kc_f(x[tgt]) : 0.0f;
    uint4 r[CLS_HELD];
    __nv_bfloat162 mw = cls_bf2(CLS_NEG_INF2);
#pragma unroll
    for (int i = 0; i < CLS_HELD; i++) {
      const int vi = threadIdx.x + i * CLS_BLOCK;
      r[i] = cls_pad(vi < nvec ? cls_load(x + 8 * vi) : make_uint4(0, 0, 0, 0),
                     8 * vi, V);
    }
#pragma unroll
    for (int i = 0; i < CLS_HELD; i++)
      mw = cls_max8(mw, r[i]);
    const float m = cls_max_f(mw), mL = cls_mlog2e(m);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < CLS_HELD; i++)
      s = cls_sum8(s, r[i], mL);
    cls_ms st = {m, s};
    for (int vi = tail + threadIdx.x; vi < nvec; vi += CLS_BLOCK) {
      const uint4 w = cls_pad(cls_load(x + 8 * vi), 8 * vi, V);
      const float wm = cls_max_f(cls_max8(cls_bf2(CLS_NEG_INF2), w));
      st = cls_merge(st, {wm, cls_sum8(0.0f, w, cls_mlog2e(wm))});
    }
    const float lse = cls_block_lse(st, &sh, losses + row, tgt_ok, xt);
    const float lseL = lse * CLS_LOG2E;
    if (dloss != 0.0f) {
#pragma unroll
      for (int i = 0; i < CLS_HELD; i++) {
        const int vi = threadIdx.x + i * CLS_BLOCK;
        if (vi < nvec)
          cls_store(x + 8 * vi, cls_grad8(r[i], 8 * vi, V, tgt, lseL, dloss));
      }
      for (int vi = tail + threadIdx.x; vi < nvec; vi += CLS_BLOCK)
        cls_store(x + 8 * vi,
                  cls_grad8(cls_load(x + 8 * vi), 8 * vi, V, tgt, lseL, dloss));
    }
    /* sh is rewritten by the next row. */
    __syncthreads();
  }
}

int kern_fused_classifier(const kern_ctx *k, floatX *logits, float *losses,
                          const int *targets, float dloss, int N, int V, int Vp,
                          char *err, size_t errlen) {
  static const char op[] = "kern_fused_classifier";
  if (N < 0 || V <= 0 || Vp < V)
    return kc_fail(err, errlen, op, "bad shape N=%d V=%d Vp=%d", N, V, Vp);
  if (N == 0)
    return 0;
  unsigned grid = (unsigned)(N < 65535 * 16 ? N : 65535 * 16);
  /* Every row starts 16-byte aligned where the first does and Vp % 8 == 0
   * (a row is then a whole number of 16-byte vectors). */
  if (Vp % 8 == 0 && kc_aligned16(logits))
    classifier_vec_kernel<<<grid, CLS_BLOCK, 0, k->stream>>>(
        logits, losses, targets, dloss, N, V, Vp);
  else
    classifier_kernel<<<grid, CLS_BLOCK, 0, k->stream>>>(
        logits, losses, targets, dloss, N, V, Vp);
  return kc_check(op, err, errlen);
}
