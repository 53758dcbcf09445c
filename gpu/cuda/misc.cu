/* The element-wise and small ops of kernels.cuh: conversions, the
 * embedding, the residual add, GELU, SwiGLU, RoPE's layout step, and the
 * fixed-order reductions. */
#include <algorithm>
#include <vector>

#include "kernels_common.cuh"

#define BLOCK 256

/* ---- Conversions ---- */

__global__ void f32_to_bf16_kernel(floatX *out, const float *in, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = kc_x(in[i]);
}

__global__ void bf16_to_f32_kernel(float *out, const floatX *in, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = kc_f(in[i]);
}

int kern_f32_to_bf16(const kern_ctx *k, floatX *out, const float *in, size_t n,
                     char *err, size_t errlen) {
  if (n == 0)
    return 0;
  f32_to_bf16_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0, k->stream>>>(
      out, in, n);
  return kc_check("kern_f32_to_bf16", err, errlen);
}

int kern_bf16_to_f32(const kern_ctx *k, float *out, const floatX *in, size_t n,
                     char *err, size_t errlen) {
  if (n == 0)
    return 0;
  bf16_to_f32_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0, k->stream>>>(
      out, in, n);
  return kc_check("kern_bf16_to_f32", err, errlen);
}

/* ---- Embedding ---- */

/* ids (B,T), wte (Vp,C), wpe (T,C) or NULL (none: the Llama family)
 * -> out (B,T,C); an id < 0 (another tensor shard's) adds no row. */
__global__ void encoder_forward_kernel(floatX *out, const int *ids,
                                       const floatX *wte, const floatX *wpe,
                                       int T, int C, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / (size_t)C;
    int c = (int)(i % (size_t)C), t = (int)(bt % (size_t)T);
    float pos = wpe ? kc_f(wpe[(size_t)t * C + c]) : 0.0f;
    float tok = ids[bt] < 0 ? 0.0f : kc_f(wte[(size_t)ids[bt] * C + c]);
    out[i] = kc_x(tok + pos);
  }
}

int kern_encoder_forward(const kern_ctx *k, floatX *out, const int *ids,
                         const floatX *wte, const floatX *wpe, int B, int T,
                         int C, char *err, size_t errlen) {
  size_t n = (size_t)B * T * C;
  if (n == 0)
    return 0;
  encoder_forward_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0,
                           k->stream>>>(out, ids, wte, wpe, T, C, n);
  return kc_check("kern_encoder_forward", err, errlen);
}

/* dwpe (T,C) += sum over b of dout (B,T,C): one thread per (t,c), b in
 * order. */
__global__ void wpe_backward_kernel(float *dwpe, const floatX *dout, int B,
                                    int T, int C) {
  size_t n = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int b = 0; b < B; b++)
      acc += kc_f(dout[(size_t)b * n + i]);
    dwpe[i] += acc;
  }
}

/* Bucketed dwte: bucket u has token tok[u] and the positions
 * pos[start[u] .. start[u+1]) in increasing order. One block per bucket,
 * threads over channels: each row of dwte is written by one thread per
 * channel, positions added in order, so no atomics and the same bits
 * every run. */
__global__ void wte_backward_bucketed_kernel(float *dwte, const floatX *dout,
                                             const int *tok, const int *start,
                                             const int *pos, int nbuckets,
                                             int C) {
  for (int u = blockIdx.x; u < nbuckets; u += gridDim.x) {
    if (tok[u] < 0)
      continue; /* another tensor shard's ids */
    float *row = dwte + (size_t)tok[u] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int p = start[u]; p < start[u + 1]; p++)
        acc += kc_f(dout[(size_t)pos[p] * C + c]);
      row[c] += acc;
    }
  }
}

/* Without the ids on the host: float atomics (the order of a repeated
 * token's additions varies between runs). */
__global__ void wte_backward_atomic_kernel(float *dwte, const floatX *dout,
                                           const int *ids, int C, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / (size_t)C;
    int c = (int)(i % (size_t)C);
    if (ids[bt] < 0)
      continue;
    atomicAdd(dwte + (size_t)ids[bt] * C + c, kc_f(dout[i]));
  }
}

/* Scratch: the buckets, as ints: tok (N), start (N+1), pos (N). */
size_t kern_encoder_backward_scratch_bytes(int B, int T, int C) {
  size_t N = (size_t)B * T;
  return (3 * N + 1) * sizeof(int);
}

int kern_encoder_backward(const kern_ctx *k, float *dwte, float *dwpe,
                          void *scratch, const floatX *dout, const int *ids,
                          const int *ids_host, int B, int T, int C, char *err,
                          size_t errlen) {
  static const char op[] = "kern_encoder_backward";
  size_t N = (size_t)B * T, n = N * C;
  if (n == 0)
    return 0;
  /* Refused before anything runs, so that an error leaves the gradients
   * as they were. */
  if (!ids_host && k->deterministic)
    return kc_fail(err, errlen, op,
                   "deterministic mode needs the token ids on the host "
                   "(ids_host) to add repeated tokens in a fixed order");
  if (ids_host && !scratch)
    return kc_fail(err, errlen, op, "no scratch for the token buckets");
  if (dwpe) {
    wpe_backward_kernel<<<kc_grid((size_t)T * C, BLOCK, k->sm_count), BLOCK, 0,
                          k->stream>>>(dwpe, dout, B, T, C);
    if (kc_check(op, err, errlen))
      return -1;
  }
  if (!ids_host) {
    wte_backward_atomic_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0,
                                 k->stream>>>(dwte, dout, ids, C, n);
    return kc_check(op, err, errlen);
  }
  /* Buckets on the host: positions sorted by (token, position). */
  std::vector<int> order(N);
  for (size_t i = 0; i < N; i++)
    order[i] = (int)i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return ids_host[a] < ids_host[b]; });
  std::vector<int> buf(3 * N + 1);
  int *tok = buf.data(), *start = tok + N, *pos = start + N + 1;
  int nb = 0;
  for (size_t i = 0; i < N; i++) {
    if (i == 0 || ids_host[order[i]] != ids_host[order[i - 1]]) {
      tok[nb] = ids_host[order[i]];
      start[nb++] = (int)i;
    }
    pos[i] = order[i];
  }
  start[nb] = (int)N;
  /* One copy of the three arrays, laid out in scratch as in buf. From
   * pageable memory, cudaMemcpyAsync returns once buf is staged, so buf
   * may go when this returns. */
  int *dtok = (int *)scratch, *dstart = dtok + N, *dpos = dstart + N + 1;
  if (kc_cuda(cudaMemcpyAsync(scratch, buf.data(), buf.size() * sizeof(int),
                              cudaMemcpyHostToDevice, k->stream),
              op, "cudaMemcpyAsync of the token buckets", err, errlen))
    return -1;
  int block = C < 32 ? 32 : (C < BLOCK ? ((C + 31) / 32) * 32 : BLOCK);
  unsigned grid = (unsigned)std::min(nb, 65535);
  wte_backward_bucketed_kernel<<<grid, block, 0, k->stream>>>(
      dwte, dout, dtok, dstart, dpos, nb, C);
  return kc_check(op, err, errlen);
}

/* ---- Residual and GELU ---- */

__global__ void residual_kernel(floatX *out, const floatX *a, const floatX *b,
                                size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = kc_x(kc_f(a[i]) + kc_f(b[i]));
}

int kern_residual_forward(const kern_ctx *k, floatX *out, const floatX *a,
                          const floatX *b, size_t n, char *err, size_t errlen) {
  if (n == 0)
    return 0;
  residual_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0, k->stream>>>(
      out, a, b, n);
  return kc_check("kern_residual_forward", err, errlen);
}

__global__ void gelu_forward_kernel(floatX *out, const floatX *inp, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = kc_x(kc_gelu(kc_f(inp[i])));
}

__global__ void gelu_backward_kernel(floatX *dinout, const floatX *inp,
                                     size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dinout[i] = kc_x(kc_f(dinout[i]) * kc_gelu_grad(kc_f(inp[i])));
}

int kern_gelu_forward(const kern_ctx *k, floatX *out, const floatX *inp,
                      size_t n, char *err, size_t errlen) {
  if (n == 0)
    return 0;
  gelu_forward_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0, k->stream>>>(
      out, inp, n);
  return kc_check("kern_gelu_forward", err, errlen);
}

int kern_gelu_backward(const kern_ctx *k, floatX *dinout, const floatX *inp,
                       size_t n, char *err, size_t errlen) {
  if (n == 0)
    return 0;
  gelu_backward_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0, k->stream>>>(
      dinout, inp, n);
  return kc_check("kern_gelu_backward", err, errlen);
}

/* ---- SwiGLU (the Llama family's MLP) ----
 * gu (N, 2I): each row the gate_proj then the up_proj outputs (one
 * product over the two adjacent weights). hid = silu(gate) * up, as
 * llama_cpu.c's llama_cpu_swiglu, in FP32 from the BF16 inputs. */
__device__ __forceinline__ float kc_sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__global__ void swiglu_forward_kernel(floatX *hid, const floatX *gu, int I,
                                      size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / (size_t)I, c = i % (size_t)I;
    const floatX *r = gu + row * 2 * (size_t)I;
    float g = kc_f(r[c]), u = kc_f(r[I + c]);
    hid[i] = kc_x(g * kc_sigmoid(g) * u);
  }
}

/* dhid (N,I), gu (N,2I) -> dgu (N,2I): d gate then d up of each row. */
__global__ void swiglu_backward_kernel(floatX *dgu, const floatX *dhid,
                                       const floatX *gu, int I, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / (size_t)I, c = i % (size_t)I;
    const floatX *r = gu + row * 2 * (size_t)I;
    floatX *d = dgu + row * 2 * (size_t)I;
    float g = kc_f(r[c]), u = kc_f(r[I + c]), s = kc_sigmoid(g);
    float dh = kc_f(dhid[i]);
    d[I + c] = kc_x(dh * g * s);
    d[c] = kc_x(dh * u * s * (1.0f + g * (1.0f - s)));
  }
}

int kern_swiglu_forward(const kern_ctx *k, floatX *hid, const floatX *gu, int N,
                        int I, char *err, size_t errlen) {
  size_t n = (size_t)N * I;
  if (N < 0 || I < 0)
    return kc_fail(err, errlen, "kern_swiglu_forward", "bad shape N=%d I=%d", N,
                   I);
  if (n == 0)
    return 0;
  swiglu_forward_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0,
                          k->stream>>>(hid, gu, I, n);
  return kc_check("kern_swiglu_forward", err, errlen);
}

int kern_swiglu_backward(const kern_ctx *k, floatX *dgu, const floatX *dhid,
                         const floatX *gu, int N, int I, char *err,
                         size_t errlen) {
  size_t n = (size_t)N * I;
  if (N < 0 || I < 0)
    return kc_fail(err, errlen, "kern_swiglu_backward", "bad shape N=%d I=%d",
                   N, I);
  if (n == 0)
    return 0;
  swiglu_backward_kernel<<<kc_grid(n, BLOCK, k->sm_count), BLOCK, 0,
                           k->stream>>>(dgu, dhid, gu, I, n);
  return kc_check("kern_swiglu_backward", err, errlen);
}

/* ---- RoPE and GQA: the Llama attention's layout step ----
 * The q, k, v products come out as one row of C + 2 KVD per position
 * (q_proj, k_proj, v_proj are adjacent in the layout: one product).
 * The attention kernels (ours and cuDNN's) take GPT-2's (B,T,3C) with a
 * q, k and v for every head: this step writes that, turning q and k by
 * RoPE (Hugging Face's rotate_half: channel i with i + hs/2, the angles
 * of the tables cs, sn (T, hs/2)) and giving query head h key/value head
 * h / (NH/KV). Its backward is the adjoint: the inverse turn, and each
 * key/value head's gradient the sum over its query heads, in head order
 * (fixed: no atomics). One thread per (position, head, pair i). */
struct rope_dims {
  int T, NH, KV, hs, h2, C, KVD;
};

static rope_dims rope_dims_of(int T, int C, int NH, int KV) {
  rope_dims d;
  d.T = T, d.NH = NH, d.KV = KV, d.C = C;
  d.hs = C / NH, d.h2 = d.hs / 2, d.KVD = KV * d.hs;
  return d;
}

__global__ void rope_qkv_forward_kernel(floatX *qkv, const floatX *qkv_kv,
                                        const float *cs, const float *sn,
                                        rope_dims d, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int p = (int)(i % (size_t)d.h2);
    int h = (int)(i / (size_t)d.h2 % (size_t)d.NH);
    size_t bt = i / ((size_t)d.h2 * d.NH);
    int t = (int)(bt % (size_t)d.T), kh = h / (d.NH / d.KV);
    float c = cs[(size_t)t * d.h2 + p], s = sn[(size_t)t * d.h2 + p];
    const floatX *src = qkv_kv + bt * (size_t)(d.C + 2 * d.KVD);
    floatX *dst = qkv + bt * 3 * (size_t)d.C + (size_t)h * d.hs;
    const floatX *q = src + (size_t)h * d.hs;
    const floatX *kk = src + d.C + (size_t)kh * d.hs;
    const floatX *v = kk + d.KVD;
    float a = kc_f(q[p]), b = kc_f(q[p + d.h2]);
    dst[p] = kc_x(a * c - b * s);
    dst[p + d.h2] = kc_x(b * c + a * s);
    a = kc_f(kk[p]), b = kc_f(kk[p + d.h2]);
    dst[d.C + p] = kc_x(a * c - b * s);
    dst[d.C + p + d.h2] = kc_x(b * c + a * s);
    dst[2 * d.C + p] = v[p];
    dst[2 * d.C + p + d.h2] = v[p + d.h2];
  }
}

/* Thread (position, head h, pair p) turns back dq of head h; the
 * threads of heads h < KV also make key/value head h's dk, dv. */
__global__ void rope_qkv_backward_kernel(floatX *dqkv_kv, const floatX *dqkv,
                                         const float *cs, const float *sn,
                                         rope_dims d, size_t n) {
  const int G = d.NH / d.KV;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int p = (int)(i % (size_t)d.h2);
    int h = (int)(i / (size_t)d.h2 % (size_t)d.NH);
    size_t bt = i / ((size_t)d.h2 * d.NH);
    int t = (int)(bt % (size_t)d.T);
    float c = cs[(size_t)t * d.h2 + p], s = sn[(size_t)t * d.h2 + p];
    const floatX *src = dqkv + bt * 3 * (size_t)d.C;
    floatX *dst = dqkv_kv + bt * (size_t)(d.C + 2 * d.KVD);
    const floatX *dq = src + (size_t)h * d.hs;
    float a = kc_f(dq[p]), b = kc_f(dq[p + d.h2]);
    dst[(size_t)h * d.hs + p] = kc_x(a * c + b * s);
    dst[(size_t)h * d.hs + p + d.h2] = kc_x(b * c - a * s);
    if (h >= d.KV)
      continue;
    float ka = 0.0f, kb = 0.0f, va = 0.0f, vb = 0.0f;
    for (int g = 0; g < G; g++) {
      const floatX *dk = src + d.C + (size_t)(h * G + g) * d.hs;
      ka += kc_f(dk[p]), kb += kc_f(dk[p + d.h2]);
      va += kc_f(dk[d.C + p]), vb += kc_f(dk[d.C + p + d.h2]);
    }
    floatX *ok = dst + d.C + (size_t)h * d.hs, *ov = ok + d.KVD;
    ok[p] = kc_x(ka * c + kb * s);
    ok[p + d.h2] = kc_x(kb * c - ka * s);
    ov[p] = kc_x(va);
    ov[p + d.h2] = kc_x(vb);
  }
}

static int rope_check(int B, int T, int C, int NH, int KV, const char *op,
                      char *err, size_t errlen) {
  if (B < 0 || T < 0 || C < 1 || NH < 1 || KV < 1 || NH % KV != 0 ||
      C % NH != 0 || (C / NH) % 2 != 0)
    return kc_fail(err, errlen, op,
                   "bad shape B=%d T=%d C=%d NH=%d KV=%d (KV must divide NH, "
                   "the head size C/NH be even)",
                   B, T, C, NH, KV);
  return 0;
}

/* Either direction: out and in as the launchers below take them. */
static int rope_launch(const kern_ctx *k, bool fwd, floatX *out,
                       const floatX *in, const float *cs, const float *sn,
                       int B, int T, int C, int NH, int KV, const char *op,
                       char *err, size_t errlen) {
  if (rope_check(B, T, C, NH, KV, op, err, errlen))
    return -1;
  rope_dims d = rope_dims_of(T, C, NH, KV);
  size_t n = (size_t)B * T * NH * d.h2;
  if (n == 0)
    return 0;
  unsigned grid = kc_grid(n, BLOCK, k->sm_count);
  if (fwd)
    rope_qkv_forward_kernel<<<grid, BLOCK, 0, k->stream>>>(out, in, cs, sn, d,
                                                           n);
  else
    rope_qkv_backward_kernel<<<grid, BLOCK, 0, k->stream>>>(out, in, cs, sn, d,
                                                            n);
  return kc_check(op, err, errlen);
}

int kern_rope_qkv_forward(const kern_ctx *k, floatX *qkv, const floatX *qkv_kv,
                          const float *cs, const float *sn, int B, int T, int C,
                          int NH, int KV, char *err, size_t errlen) {
  return rope_launch(k, true, qkv, qkv_kv, cs, sn, B, T, C, NH, KV,
                     "kern_rope_qkv_forward", err, errlen);
}

int kern_rope_qkv_backward(const kern_ctx *k, floatX *dqkv_kv,
                           const floatX *dqkv, const float *cs, const float *sn,
                           int B, int T, int C, int NH, int KV, char *err,
                           size_t errlen) {
  return rope_launch(k, false, dqkv_kv, dqkv, cs, sn, B, T, C, NH, KV,
                     "kern_rope_qkv_backward", err, errlen);
}

/* ---- Reductions ----
 * Two stages: RED_BLOCKS(n) blocks each sum a strided share of x into
 * one partial (scratch), then one block adds the partials. The number of
 * blocks depends on n only, not on the device, so the order of the
 * additions (and the bits of the result) is the same everywhere. */
#define RED_THREADS 256
#define RED_MAX_BLOCKS 1024

static unsigned red_blocks(size_t n) {
  size_t g = (n + 2047) / 2048;
  if (g > RED_MAX_BLOCKS)
    g = RED_MAX_BLOCKS;
  return g ? (unsigned)g : 1u;
}

size_t kern_norm_scratch_bytes(size_t n, int sm_count) {
  return (size_t)red_blocks(n) * sizeof(float);
}

template <bool SQUARE>
__global__ void reduce_partial_kernel(float *partial, const float *x,
                                      size_t n) {
  __shared__ float sh[32];
  float acc = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    acc += SQUARE ? v * v : v;
  }
  acc = kc_block_sum(acc, sh);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}

/* One block of RED_MAX_BLOCKS threads: *out = scale * sum of partial. */
__global__ void reduce_final_kernel(float *out, const float *partial,
                                    unsigned nparts, float scale) {
  __shared__ float sh[32];
  float v = threadIdx.x < nparts ? partial[threadIdx.x] : 0.0f;
  v = kc_block_sum(v, sh);
  if (threadIdx.x == 0)
    *out = v * scale;
}

template <bool SQUARE>
static int reduce(const kern_ctx *k, float *out, void *scratch, const float *x,
                  size_t n, float scale, const char *op, char *err,
                  size_t errlen) {
  unsigned g = red_blocks(n);
  float *partial = (float *)scratch;
  reduce_partial_kernel<SQUARE>
      <<<g, RED_THREADS, 0, k->stream>>>(partial, x, n);
  if (kc_check(op, err, errlen))
    return -1;
  reduce_final_kernel<<<1, RED_MAX_BLOCKS, 0, k->stream>>>(out, partial, g,
                                                           scale);
  return kc_check(op, err, errlen);
}

int kern_sum_squares(const kern_ctx *k, float *out, void *scratch,
                     const float *x, size_t n, char *err, size_t errlen) {
  return reduce<true>(k, out, scratch, x, n, 1.0f, "kern_sum_squares", err,
                      errlen);
}

int kern_mean(const kern_ctx *k, float *out, void *scratch, const float *x,
              size_t n, char *err, size_t errlen) {
  if (n == 0)
    return kc_fail(err, errlen, "kern_mean", "mean of 0 elements");
  return reduce<false>(k, out, scratch, x, n, (float)(1.0 / (double)n),
                       "kern_mean", err, errlen);
}
