/*
 * Fused causal self-attention (kernels.cuh), flash-attention-2 style in
 * plain CUDA with FP32 math on BF16 data: the forward pass tiles over keys
 * with an online softmax and keeps only out and the log-sum-exp (B,NH,T);
 * the backward pass recomputes the probabilities from lse. No (B,NH,T,T)
 * matrix, no atomics: every output element is written by one warp that
 * adds in a fixed order, so the backward pass is deterministic in every
 * mode.
 *
 * Work split. A block takes ATT_ROWS rows (queries in the forward and dq
 * kernels, keys in the dk/dv kernel) of one (batch, head), ATT_RPW rows
 * per warp, and walks tiles of ATT_TILE rows of the other side through
 * shared memory. Inside a tile, lane j owns tile row j for the dot
 * products (a score each), and lane l owns head dims l, l+32, ... for
 * the accumulations, the per-row weights passed with shuffles. Tiles are
 * stored with a row stride of hs+1 floats so that the lanes' dot products
 * (stride across rows) hit different banks.
 *
 * These are the reference path: FP32 math on the CUDA cores, any head
 * size up to ATT_HS_MAX. Head sizes that are multiples of 16 go to
 * attention_tc.cu's tensor-core kernels instead (att_use_tc), unless
 * the context asks for these (kern_ctx.attention, KERN_ATT_FP32).
 */
#include "attention.cuh"

#define ATT_WARPS 4
#define ATT_RPW 4
#define ATT_ROWS (ATT_WARPS * ATT_RPW) /* 16 rows a block */
#define ATT_TILE 32                    /* one row per lane */
#define ATT_DPL (ATT_HS_MAX / 32) /* head dims per lane */

/* dst[r*ld + d] = src[(t0+r)*stride + d] for r < rows, d < hs; rows at or
 * past T read as 0. The whole block loads. */
__device__ __forceinline__ void att_load(float *dst, int ld, const floatX *src,
                                         size_t stride, int t0, int rows, int T,
                                         int hs) {
  for (int idx = threadIdx.x; idx < rows * hs; idx += blockDim.x) {
    int r = idx / hs, d = idx % hs, t = t0 + r;
    dst[r * ld + d] = t < T ? kc_f(src[(size_t)t * stride + d]) : 0.0f;
  }
}

/* a (hs, same for every lane) . b (hs, this lane's tile row) */
__device__ __forceinline__ float att_dot(const float *a, const float *b,
                                         int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; d++)
    s += a[d] * b[d];
  return s;
}

/* acc[i] (dims lane+32i) += w * tile[row][dim] */
__device__ __forceinline__ void att_axpy(float acc[ATT_DPL], float w,
                                         const float *row, int hs) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < ATT_DPL; i++) {
    int d = lane + 32 * i;
    if (d < hs)
      acc[i] += w * row[d];
  }
}

/* acc += sum over tile rows j < n of w_j tile[j], w_j being lane j's w. */
__device__ __forceinline__ void att_accumulate(float acc[ATT_DPL], float w,
                                               const float *tile, int ld, int n,
                                               int hs) {
  for (int j = 0; j < n; j++)
    att_axpy(acc, __shfl_sync(0xffffffffu, w, j), tile + j * ld, hs);
}

/* Row rr of this warp within the block: interleaved, so that the causal
 * work (row-dependent) is spread over the warps. */
__device__ __forceinline__ int att_row(int rr) {
  return rr * ATT_WARPS + (int)threadIdx.x / 32;
}

/* dst[d] = BF16(mul * acc[i]) for this lane's dims d = lane + 32i < hs. */
__device__ __forceinline__ void att_store(floatX *dst, const float acc[ATT_DPL],
                                          float mul, int hs) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < ATT_DPL; i++) {
    int d = lane + 32 * i;
    if (d < hs)
      dst[d] = kc_x(mul * acc[i]);
  }
}

/* ---- Forward ---- */

/* grid (B*NH, ceil(T/ATT_ROWS)). smem: Q rows (ATT_ROWS, hs), K and V
 * tiles (ATT_TILE, hs+1). */
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_forward_kernel(floatX *out, float *lse, const floatX *qkv, int T,
                             int C, int NH) {
  extern __shared__ float sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  const int hs = a.hs, ld = a.ld, lane = threadIdx.x % 32;
  const size_t C3 = a.C3;
  const floatX *base = a.qkv;
  const float scale = a.scale;
  float *Qs = sm, *Ks = Qs + ATT_ROWS * hs, *Vs = Ks + ATT_TILE * ld;
  const int q0 = att_tile_rev() * ATT_ROWS;

  att_load(Qs, hs, base, C3, q0, ATT_ROWS, T, hs);
  float o[ATT_RPW][ATT_DPL], mrow[ATT_RPW], lrow[ATT_RPW];
#pragma unroll
  for (int rr = 0; rr < ATT_RPW; rr++) {
    mrow[rr] = -INFINITY;
    lrow[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < ATT_DPL; i++)
      o[rr][i] = 0.0f;
  }
  const int qlast = min(q0 + ATT_ROWS, T) - 1;
  for (int k0 = 0; k0 <= qlast; k0 += ATT_TILE) {
    __syncthreads(); /* the previous tile is consumed (Q is loaded) */
    att_load(Ks, ld, base + C, C3, k0, ATT_TILE, T, hs);
    att_load(Vs, ld, base + 2 * C, C3, k0, ATT_TILE, T, hs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) {
      const int r = att_row(rr), qi = q0 + r;
      if (qi >= T || k0 > qi) /* the same for the whole warp */
        continue;
      const int j = k0 + lane;
      const bool ok = j <= qi;
      const float s =
          ok ? scale * att_dot(Qs + r * hs, Ks + lane * ld, hs) : -INFINITY;
      /* Key k0 <= qi is always in: the tile's maximum is finite. */
      const float mnew = fmaxf(mrow[rr], kc_warp_max(s));
      const float p = ok ? expf(s - mnew) : 0.0f;
      const float corr = expf(mrow[rr] - mnew); /* first tile: exp(-inf)=0 */
      lrow[rr] = lrow[rr] * corr + kc_warp_sum(p);
      mrow[rr] = mnew;
#pragma unroll
      for (int i = 0; i < ATT_DPL; i++)
        o[rr][i] *= corr;
      att_accumulate(o[rr], p, Vs, ld, min(ATT_TILE, qi - k0 + 1), hs);
    }
  }
#pragma unroll
  for (int rr = 0; rr < ATT_RPW; rr++) {
    const int qi = q0 + att_row(rr);
    if (qi >= T)
      continue;
    att_store(out + ((size_t)a.b * T + qi) * C + (size_t)a.h * hs, o[rr],
              1.0f / lrow[rr], hs);
    if (lane == 0)
      lse[(size_t)a.bh * T + qi] = mrow[rr] + logf(lrow[rr]);
  }
}

/* ---- Backward ---- */

/* Dsum (B,NH,T) = rowsum(dout * out) per head: one warp a row. */
__global__ void attention_dsum_kernel(float *Dsum, const floatX *dout,
                                      const floatX *out, int B, int T, int C,
                                      int NH) {
  const int hs = C / NH, lane = threadIdx.x % 32;
  const long long rows = (long long)B * NH * T;
  for (long long r =
           (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
       r < rows; r += (long long)gridDim.x * (blockDim.x / 32)) {
    const int t = (int)(r % T), bh = (int)(r / T), b = bh / NH, h = bh % NH;
    const size_t off = ((size_t)b * T + t) * C + (size_t)h * hs;
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32)
      s += kc_f(dout[off + d]) * kc_f(out[off + d]);
    s = kc_warp_sum(s);
    if (lane == 0)
      Dsum[r] = s;
  }
}

/* dq: grid as the forward pass; each warp's queries walk the key tiles.
 * ds_ij = p_ij (dout_i . v_j - D_i), p_ij = exp(scale q_i.k_j - lse_i);
 * dq_i = scale sum_j ds_ij k_j. smem: Q and dout rows (ATT_ROWS, hs), K
 * and V tiles (ATT_TILE, hs+1). */
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_dq_kernel(floatX *dqkv, const float *Dsum, const floatX *dout,
                        const floatX *qkv, const float *lse, int T, int C,
                        int NH) {
  extern __shared__ float sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  const int hs = a.hs, ld = a.ld, lane = threadIdx.x % 32;
  const size_t C3 = a.C3;
  const floatX *base = a.qkv;
  const int b = a.b, h = a.h, bh = a.bh;
  float *Qs = sm, *dOs = Qs + ATT_ROWS * hs, *Ks = dOs + ATT_ROWS * hs,
        *Vs = Ks + ATT_TILE * ld;
  const int q0 = att_tile_rev() * ATT_ROWS;

  att_load(Qs, hs, base, C3, q0, ATT_ROWS, T, hs);
  att_load(dOs, hs, dout + (size_t)b * T * C + (size_t)h * hs, C, q0, ATT_ROWS,
           T, hs);
  float dq[ATT_RPW][ATT_DPL], lse_r[ATT_RPW], D_r[ATT_RPW];
#pragma unroll
  for (int rr = 0; rr < ATT_RPW; rr++) {
    const int qi = q0 + att_row(rr);
    lse_r[rr] = qi < T ? lse[(size_t)bh * T + qi] : 0.0f;
    D_r[rr] = qi < T ? Dsum[(size_t)bh * T + qi] : 0.0f;
#pragma unroll
    for (int i = 0; i < ATT_DPL; i++)
      dq[rr][i] = 0.0f;
  }
  const int qlast = min(q0 + ATT_ROWS, T) - 1;
  for (int k0 = 0; k0 <= qlast; k0 += ATT_TILE) {
    __syncthreads();
    att_load(Ks, ld, base + C, C3, k0, ATT_TILE, T, hs);
    att_load(Vs, ld, base + 2 * C, C3, k0, ATT_TILE, T, hs);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) {
      const int r = att_row(rr), qi = q0 + r;
      if (qi >= T || k0 > qi)
        continue;
      const bool ok = k0 + lane <= qi;
      float ds = 0.0f;
      if (ok) {
        float p = expf(a.scale * att_dot(Qs + r * hs, Ks + lane * ld, hs) -
                       lse_r[rr]);
        float dp = att_dot(dOs + r * hs, Vs + lane * ld, hs);
        ds = p * (dp - D_r[rr]);
      }
      att_accumulate(dq[rr], ds, Ks, ld, min(ATT_TILE, qi - k0 + 1), hs);
    }
  }
#pragma unroll
  for (int rr = 0; rr < ATT_RPW; rr++) {
    const int qi = q0 + att_row(rr);
    if (qi >= T)
      continue;
    att_store(dqkv + ((size_t)b * T + qi) * C3 + (size_t)h * hs, dq[rr],
              a.scale, hs);
  }
}

/* dk, dv: a block takes ATT_ROWS keys and walks the query tiles from its
 * first key on (earlier queries do not see these keys).
 * dv_j = sum_i p_ij dout_i; dk_j = scale sum_i ds_ij q_i. smem: K and V
 * rows (ATT_ROWS, hs), Q and dout tiles (ATT_TILE, hs+1), and the tile's
 * lse and D (ATT_TILE each). */
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_dkdv_kernel(floatX *dqkv, const float *Dsum, const floatX *dout,
                          const floatX *qkv, const float *lse, int T, int C,
                          int NH) {
  extern __shared__ float sm[];
  const att_head a = att_head_of(qkv, T, C, NH);
  const int hs = a.hs, ld = a.ld, lane = threadIdx.x % 32;
  const size_t C3 = a.C3;
  const floatX *base = a.qkv;
  const int b = a.b, h = a.h, bh = a.bh;
  const floatX *dbase = dout + (size_t)b * T * C + (size_t)h * hs;
  float *Kr = sm, *Vr = Kr + ATT_ROWS * hs, *Qt = Vr + ATT_ROWS * hs,
        *dOt = Qt + ATT_TILE * ld, *lse_t = dOt + ATT_TILE * ld,
        *D_t = lse_t + ATT_TILE;
  const int kb0 = blockIdx.y * ATT_ROWS;

  att_load(Kr, hs, base + C, C3, kb0, ATT_ROWS, T, hs);
  att_load(Vr, hs, base + 2 * C, C3, kb0, ATT_ROWS, T, hs);
  float dk[ATT_RPW][ATT_DPL], dv[ATT_RPW][ATT_DPL];
#pragma unroll
  for (int rr = 0; rr < ATT_RPW; rr++)
#pragma unroll
    for (int i = 0; i < ATT_DPL; i++)
      dk[rr][i] = dv[rr][i] = 0.0f;
  for (int q0 = kb0; q0 < T; q0 += ATT_TILE) {
    __syncthreads();
    att_load(Qt, ld, base, C3, q0, ATT_TILE, T, hs);
    att_load(dOt, ld, dbase, C, q0, ATT_TILE, T, hs);
    for (int i = threadIdx.x; i < ATT_TILE; i += blockDim.x) {
      const int t = q0 + i;
      lse_t[i] = t < T ? lse[(size_t)bh * T + t] : 0.0f;
      D_t[i] = t < T ? Dsum[(size_t)bh * T + t] : 0.0f;
    }
    __syncthreads();
    const int ni = min(ATT_TILE, T - q0);
#pragma unroll
    for (int rr = 0; rr < ATT_RPW; rr++) {
      const int r = att_row(rr), kj = kb0 + r;
      if (kj >= T)
        continue;
      const int qi = q0 + lane;
      const bool ok = qi >= kj && qi < T;
      float p = 0.0f, ds = 0.0f;
      if (ok) {
        p = expf(a.scale * att_dot(Kr + r * hs, Qt + lane * ld, hs) -
                 lse_t[lane]);
        float dp = att_dot(Vr + r * hs, dOt + lane * ld, hs);
        ds = p * (dp - D_t[lane]);
      }
      att_accumulate(dv[rr], p, dOt, ld, ni, hs);
      att_accumulate(dk[rr], ds, Qt, ld, ni, hs);
    }
  }
#pragma unroll
  for (int rr = 0; rr < ATT_RPW; rr++) {
    const int kj = kb0 + att_row(rr);
    if (kj >= T)
      continue;
    floatX *dst = dqkv + ((size_t)b * T + kj) * C3 + (size_t)h * hs;
    att_store(dst + C, dk[rr], a.scale, hs);
    att_store(dst + 2 * C, dv[rr], 1.0f, hs);
  }
}

/* ---- Launchers ---- */

static int att_check(int B, int T, int C, int NH, const char *op, char *err,
                     size_t errlen) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH != 0)
    return kc_fail(err, errlen, op, "bad shape B=%d T=%d C=%d NH=%d", B, T, C,
                   NH);
  if (C / NH > ATT_HS_MAX)
    return kc_fail(err, errlen, op,
                   "head size %d (C=%d / NH=%d) is more than the %d this "
                   "kernel supports",
                   C / NH, C, NH, ATT_HS_MAX);
  if ((long long)B * NH > 0x7fffffffLL)
    return kc_fail(err, errlen, op, "B*NH=%lld is more than 2^31-1",
                   (long long)B * NH);
  if (kc_cdiv((size_t)T, ATT_ROWS) > 65535)
    return kc_fail(err, errlen, op,
                   "T=%d is more than %d (65535 tiles of %d rows)", T,
                   65535 * ATT_ROWS, ATT_ROWS);
  return 0;
}

/* The tensor-core kernels take head sizes that are multiples of 16; the
 * context can ask for the FP32 ones (DAGRUN_CUDA_ATTENTION=fp32). */
static int att_use_tc(const kern_ctx *k, int hs) {
  return k->attention != KERN_ATT_FP32 && hs % 16 == 0;
}

/* Loads cuDNN into k once. 0, or -1 with why. */
static int att_cudnn_load(kern_ctx *k, char *why, size_t whylen) {
  if (k->cudnn)
    return 0;
  return att_cudnn_open(&k->cudnn, k->stream, why, whylen);
}

int kern_attention_use_cudnn(kern_ctx *k, char *err, size_t errlen) {
  static const char op[] = "kern_attention_use_cudnn";
  char why[400];
  if (k->deterministic)
    return kc_fail(err, errlen, op,
                   "cuDNN's fused attention adds dq with atomics: not in "
                   "deterministic mode");
  if (att_cudnn_load(k, why, sizeof why))
    return kc_fail(err, errlen, op, "cuDNN's fused attention: %s", why);
  k->attention = KERN_ATT_CUDNN;
  return 0;
}

int kern_attention_prepare(kern_ctx *k, int B, int T, int C, int NH, char *why,
                           size_t whylen) {
  char msg[600];
  const char *no = NULL;
  if (k->attention != KERN_ATT_TC && k->attention != KERN_ATT_CUDNN)
    no = "another attention was asked for (DAGRUN_CUDA_ATTENTION)";
  else if (k->cudnn_off)
    no = "another attention was asked for (DAGRUN_CUDA_ATTENTION)";
  else if (k->deterministic)
    no = "deterministic: cuDNN's backward adds dq with atomics";
  else if (att_check(B, T, C, NH, "kern_attention_prepare", msg, sizeof msg) ||
           att_cudnn_load(k, msg, sizeof msg) ||
           att_cudnn_prepare(k->cudnn, B, T, C, NH, msg, sizeof msg))
    no = msg;
  if (no) {
    snprintf(why, whylen, "dagrun's tensor-core attention (not cuDNN's: %s)",
             no);
    return 0;
  }
  snprintf(why, whylen, "cuDNN's fused attention (cuDNN %zu)",
           att_cudnn_version(k->cudnn));
  return 1;
}

size_t kern_attention_extra_bytes(const kern_ctx *k) {
  return att_cudnn_workspace_bytes(k->cudnn);
}

/* cuDNN's attention: every shape under KERN_ATT_CUDNN (head sizes it
 * cannot take are refused), the readied ones under KERN_ATT_TC. */
static int att_use_cudnn(const kern_ctx *k, int B, int T, int C, int NH) {
  return k->attention == KERN_ATT_CUDNN ||
         (k->attention == KERN_ATT_TC &&
          att_cudnn_ready(k->cudnn, B, T, C, NH));
}

static int att_cudnn_check(int C, int NH, const char *op, char *err,
                           size_t errlen) {
  if ((C / NH) % 8)
    return kc_fail(err, errlen, op,
                   "head size %d: cuDNN's fused attention takes multiples "
                   "of 8 (DAGRUN_CUDA_ATTENTION=cudnn)",
                   C / NH);
  return 0;
}

int kern_attention_forward(const kern_ctx *k, floatX *out, float *lse,
                           const floatX *qkv, int B, int T, int C, int NH,
                           char *err, size_t errlen) {
  static const char op[] = "kern_attention_forward";
  if (att_check(B, T, C, NH, op, err, errlen))
    return -1;
  if (att_use_cudnn(k, B, T, C, NH))
    return att_cudnn_check(C, NH, op, err, errlen)
               ? -1
               : att_cudnn_forward(k->cudnn, out, lse, qkv, B, T, C, NH, op,
                                   err, errlen);
  const int hs = C / NH;
  if (att_use_tc(k, hs))
    return att_tc_forward(k, out, lse, qkv, B, T, C, NH, op, err, errlen);
  const size_t smem =
      ((size_t)ATT_ROWS * hs + 2 * (size_t)ATT_TILE * (hs + 1)) * sizeof(float);
  dim3 grid((unsigned)(B * NH), kc_cdiv((size_t)T, ATT_ROWS));
  return att_launch(attention_forward_kernel, grid, ATT_WARPS * 32, smem, k,
                    op, err, errlen, out, lse, qkv, T, C, NH);
}

/* Dsum (B,NH,T), then, 16-byte aligned, the one-kernel backward's FP32 dq
 * (B,T,C); cuDNN's backward takes the same two for its softmax_sum and
 * its dq accumulator. */
static size_t att_dsum_bytes(int B, int T, int NH) {
  return ((size_t)B * NH * T * sizeof(float) + 15) & ~(size_t)15;
}

size_t kern_attention_backward_scratch_bytes(int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || NH <= 0 || C <= 0)
    return 0;
  return att_dsum_bytes(B, T, NH) + (size_t)B * T * C * sizeof(float);
}

int kern_attention_backward(const kern_ctx *k, floatX *dqkv, void *scratch,
                            const floatX *dout, const floatX *qkv,
                            const floatX *out, const float *lse, int B, int T,
                            int C, int NH, char *err, size_t errlen) {
  static const char op[] = "kern_attention_backward";
  if (att_check(B, T, C, NH, op, err, errlen))
    return -1;
  float *Dsum = (float *)scratch;
  float *dq_acc = (float *)((char *)scratch + att_dsum_bytes(B, T, NH));
  if (att_use_cudnn(k, B, T, C, NH))
    return att_cudnn_check(C, NH, op, err, errlen)
               ? -1
               : att_cudnn_backward(k->cudnn, dqkv, dq_acc, Dsum, dout, qkv,
                                    out, lse, B, T, C, NH, op, err, errlen);
  const int hs = C / NH;
  const size_t rows = (size_t)B * NH * T;
  attention_dsum_kernel<<<kc_grid(rows, 8, k->sm_count), 256, 0, k->stream>>>(
      Dsum, dout, out, B, T, C, NH);
  if (kc_check(op, err, errlen))
    return -1;
  if (att_use_tc(k, hs))
    return att_tc_backward(k, dqkv, dq_acc, Dsum, dout, qkv, lse, B, T, C, NH,
                           op, err, errlen);
  const size_t rows_smem = 2 * (size_t)ATT_ROWS * hs;
  const size_t tiles_smem = 2 * (size_t)ATT_TILE * (hs + 1);
  dim3 grid((unsigned)(B * NH), kc_cdiv((size_t)T, ATT_ROWS));
  if (att_launch(attention_dq_kernel, grid, ATT_WARPS * 32,
                 (rows_smem + tiles_smem) * sizeof(float), k, op, err, errlen,
                 dqkv, (const float *)Dsum, dout, qkv, lse, T, C, NH))
    return -1;
  return att_launch(attention_dkdv_kernel, grid, ATT_WARPS * 32,
                    (rows_smem + tiles_smem + 2 * ATT_TILE) * sizeof(float), k,
                    op, err, errlen, dqkv, (const float *)Dsum, dout, qkv, lse,
                    T, C, NH);
}
