/* LayerNorm forward (plain and fused with the residual add) and backward,
 * and the fixed-order column sums that its backward and the bias
 * gradient of matmul_lt.cu share. */
#include "kernels_common.cuh"

#define LN_EPS 1e-5f
#define LN_WARPS 8 /* rows per block: one warp a row */

/* Row statistics of x (C floats, this lane's share read by get(c)), over
 * the warp: mean and 1/std, two passes as the CPU engine (gpt_cpu.c). */
template <typename Get>
__device__ __forceinline__ void ln_stats(Get get, int C, float *mean,
                                         float *rstd) {
  const int lane = threadIdx.x % 32;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32)
    s += get(c);
  float m = kc_warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = get(c) - m;
    v += d * d;
  }
  v = kc_warp_sum(v) / C;
  *mean = m;
  *rstd = rsqrtf(v + LN_EPS);
}

/* inp (N,C) -> out (N,C), mean (N), rstd (N); one warp a row. mean or
 * rstd may be NULL, as in gpt_cpu_layernorm (a recomputing pass keeps
 * the first ones). VEC: C is a multiple of 8 and the arrays 16-byte
 * aligned, so the final pass moves 8 BF16 per 128-bit access.
 * residual/inp2 non-NULL: the row is first residual = inp + inp2 (rounded
 * to BF16, then normalized: the backward pass sees the same residual). */
template <bool VEC>
__global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd,
                                         floatX *residual, const floatX *inp,
                                         const floatX *inp2, const floatX *w,
                                         const floatX *b, int N, int C) {
  const int lane = threadIdx.x % 32;
  for (long long row = (long long)blockIdx.x * LN_WARPS + threadIdx.x / 32;
       row < N; row += (long long)gridDim.x * LN_WARPS) {
    const floatX *x = inp + (size_t)row * C;
    if (residual) {
      /* Each lane writes and later reads back only its own channels, so
       * no synchronization is needed between the passes. */
      const floatX *x2 = inp2 + (size_t)row * C;
      floatX *r = residual + (size_t)row * C;
      for (int c = lane; c < C; c += 32)
        r[c] = kc_x(kc_f(x[c]) + kc_f(x2[c]));
      x = r;
    }
    float m, s;
    ln_stats([&](int c) { return kc_f(x[c]); }, C, &m, &s);
    floatX *o = out + (size_t)row * C;
    if (VEC) {
      for (int c = lane * 8; c < C; c += 32 * 8) {
        kc_x8 xv = kc_load8(x + c), wv = kc_load8(w + c), bv = kc_load8(b + c);
        kc_x8 ov;
#pragma unroll
        for (int j = 0; j < 8; j++)
          ov.v[j] =
              kc_x((kc_f(xv.v[j]) - m) * s * kc_f(wv.v[j]) + kc_f(bv.v[j]));
        kc_store8(o + c, ov);
      }
    } else {
      for (int c = lane; c < C; c += 32)
        o[c] = kc_x((kc_f(x[c]) - m) * s * kc_f(w[c]) + kc_f(b[c]));
    }
    if (lane == 0 && mean)
      mean[row] = m;
    if (lane == 0 && rstd)
      rstd[row] = s;
  }
}

static int ln_forward(const kern_ctx *k, floatX *residual, floatX *out,
                      float *mean, float *rstd, const floatX *inp,
                      const floatX *inp2, const floatX *w, const floatX *b,
                      int N, int C, const char *op, char *err, size_t errlen) {
  if (N <= 0 || C <= 0)
    return N < 0 || C < 0
               ? kc_fail(err, errlen, op, "bad shape N=%d C=%d", N, C)
               : 0;
  /* The vector path's loads go through the read-only cache (__ldg),
   * which must not see data the kernel writes: the fused residual path
   * writes the row it normalizes, so it takes the scalar path. */
  int vec = !residual && C % 8 == 0 && kc_aligned16(inp) && kc_aligned16(out) &&
            kc_aligned16(w) && kc_aligned16(b);
  unsigned grid = kc_grid((size_t)N, LN_WARPS, k->sm_count);
  if (vec)
    layernorm_forward_kernel<true><<<grid, LN_WARPS * 32, 0, k->stream>>>(
        out, mean, rstd, residual, inp, inp2, w, b, N, C);
  else
    layernorm_forward_kernel<false><<<grid, LN_WARPS * 32, 0, k->stream>>>(
        out, mean, rstd, residual, inp, inp2, w, b, N, C);
  return kc_check(op, err, errlen);
}

int kern_layernorm_forward(const kern_ctx *k, floatX *out, float *mean,
                           float *rstd, const floatX *inp, const floatX *w,
                           const floatX *b, int N, int C, char *err,
                           size_t errlen) {
  return ln_forward(k, NULL, out, mean, rstd, inp, NULL, w, b, N, C,
                    "kern_layernorm_forward", err, errlen);
}

int kern_residual_layernorm_forward(const kern_ctx *k, floatX *residual,
                                    floatX *out, float *mean, float *rstd,
                                    const floatX *inp1, const floatX *inp2,
                                    const floatX *w, const floatX *b, int N,
                                    int C, char *err, size_t errlen) {
  return ln_forward(k, residual, out, mean, rstd, inp1, inp2, w, b, N, C,
                    "kern_residual_layernorm_forward", err, errlen);
}

/* ---- Fixed-order column sums ---- */

/* Column sums of one chunk of KC_COLSUM_ROWS rows: block (32, 8), blockIdx.x
 * picks 32 columns, blockIdx.y the chunk. Thread (lane, y) sums rows
 * y, y+8, ... of the chunk for column lane; the 8 partials are added in
 * order. part_a (chunks, OC) gets the sums of dout; with LN, part_b
 * (chunks, OC) gets those of dout * (inp - mean) * rstd (LayerNorm's dw). */
template <bool LN>
__global__ void colsum_partial_kernel(float *part_a, float *part_b,
                                      const floatX *dout, const floatX *inp,
                                      const float *mean, const float *rstd,
                                      int N, int OC) {
  __shared__ float sa[8][33], sb[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * KC_COLSUM_ROWS;
  const int r1 = min(N, r0 + KC_COLSUM_ROWS);
  float a = 0.0f, bb = 0.0f;
  if (c < OC) {
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float d = kc_f(dout[(size_t)r * OC + c]);
      a += d;
      if (LN)
        bb += d * (kc_f(inp[(size_t)r * OC + c]) - mean[r]) * rstd[r];
    }
  }
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = bb;
  __syncthreads();
  if (threadIdx.y == 0 && c < OC) {
    float ta = 0.0f, tb = 0.0f;
    for (int y = 0; y < 8; y++) {
      ta += sa[y][threadIdx.x];
      tb += sb[y][threadIdx.x];
    }
    part_a[(size_t)blockIdx.y * OC + c] = ta;
    if (LN)
      part_b[(size_t)blockIdx.y * OC + c] = tb;
  }
}

/* out_a (OC) += sum over chunks of part_a, in chunk order; same for b. */
__global__ void colsum_final_kernel(float *out_a, float *out_b,
                                    const float *part_a, const float *part_b,
                                    int nchunks, int OC) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < OC;
       c += gridDim.x * blockDim.x) {
    float a = 0.0f, bb = 0.0f;
    for (int i = 0; i < nchunks; i++) {
      a += part_a[(size_t)i * OC + c];
      if (out_b)
        bb += part_b[(size_t)i * OC + c];
    }
    out_a[c] += a;
    if (out_b)
      out_b[c] += bb;
  }
}

/* Both column sums; inp NULL: only out_a (plain column sums). scratch:
 * 2 * chunks * OC floats with inp, chunks * OC without. */
static int colsums(const kern_ctx *k, float *out_a, float *out_b,
                   float *scratch, const floatX *dout, const floatX *inp,
                   const float *mean, const float *rstd, int N, int OC,
                   const char *op, char *err, size_t errlen) {
  size_t chunks = kc_colsum_chunks(N);
  if (chunks > 65535)
    return kc_fail(err, errlen, op, "N=%d rows: more than %d row chunks", N,
                   65535);
  dim3 grid(kc_cdiv((size_t)OC, 32), (unsigned)chunks), block(32, 8);
  float *part_b = scratch + chunks * (size_t)OC;
  if (inp)
    colsum_partial_kernel<true><<<grid, block, 0, k->stream>>>(
        scratch, part_b, dout, inp, mean, rstd, N, OC);
  else
    colsum_partial_kernel<false><<<grid, block, 0, k->stream>>>(
        scratch, NULL, dout, NULL, NULL, NULL, N, OC);
  if (kc_check(op, err, errlen))
    return -1;
  colsum_final_kernel<<<kc_grid((size_t)OC, 256, k->sm_count), 256, 0,
                        k->stream>>>(out_a, inp ? out_b : NULL, scratch, part_b,
                                     (int)chunks, OC);
  return kc_check(op, err, errlen);
}

int kc_colsum(const kern_ctx *k, float *db, float *scratch, const floatX *dout,
              int N, int OC, const char *op, char *err, size_t errlen) {
  return colsums(k, db, NULL, scratch, dout, NULL, NULL, NULL, N, OC, op, err,
                 errlen);
}

/* ---- Backward ---- */

/* dinp (N,C) += LayerNorm's input gradient (gpt_cpu.c's formula); one
 * warp a row, no cross-row sums. NV = 0: any C, 2-byte accesses, the row
 * read in each of the two passes. NV > 0: C a multiple of 8 and at most
 * 256 NV, the arrays 16-byte aligned; the lane's share of the row (NV
 * vectors of 8 BF16, 128-bit accesses) read once into registers for both
 * passes. The scalar path alone took 0.26 ms a call in GPT-2 124M's step
 * on an H200 (B=8 T=1024: 50 MB, under 200 GB/s), 21% of the step; the
 * vector one 0.016 ms. */
template <int NV>
__global__ void layernorm_dinp_kernel(floatX *dinp, const floatX *dout,
                                      const floatX *inp, const floatX *w,
                                      const float *mean, const float *rstd,
                                      int N, int C) {
  const int lane = threadIdx.x % 32;
  for (long long row = (long long)blockIdx.x * LN_WARPS + threadIdx.x / 32;
       row < N; row += (long long)gridDim.x * LN_WARPS) {
    const floatX *d = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    floatX *di = dinp + (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    /* The two row sums of w*dout and w*dout*norm, then each element's
     * gradient from them. */
    float dm = 0.0f, dnm = 0.0f;
    auto sums = [&](floatX wc, floatX dc, floatX xc) {
      const float dn = kc_f(wc) * kc_f(dc);
      dm += dn;
      dnm += dn * (kc_f(xc) - m) * s;
    };
    auto grad = [&](floatX wc, floatX dc, floatX xc, floatX ic) {
      const float norm = (kc_f(xc) - m) * s;
      return kc_x(kc_f(ic) + (kc_f(wc) * kc_f(dc) - dm - norm * dnm) * s);
    };
    /* The vector path: f(i, c) for the lane's vectors i, at column c. */
    kc_x8 dv[NV > 0 ? NV : 1], xv[NV > 0 ? NV : 1];
    auto each_vector = [&](auto f) {
#pragma unroll
      for (int i = 0; i < NV; i++)
        if ((32 * i + lane) * 8 < C)
          f(i, (32 * i + lane) * 8);
    };
    if constexpr (NV == 0) {
      for (int c = lane; c < C; c += 32)
        sums(w[c], d[c], x[c]);
    } else {
      each_vector([&](int i, int c) {
        dv[i] = kc_load8(d + c);
        xv[i] = kc_load8(x + c);
        const kc_x8 wv = kc_load8(w + c);
#pragma unroll
        for (int j = 0; j < 8; j++)
          sums(wv.v[j], dv[i].v[j], xv[i].v[j]);
      });
    }
    dm = kc_warp_sum(dm) / C;
    dnm = kc_warp_sum(dnm) / C;
    if constexpr (NV == 0) {
      for (int c = lane; c < C; c += 32)
        di[c] = grad(w[c], d[c], x[c], di[c]);
    } else {
      each_vector([&](int i, int c) {
        const kc_x8 wv = kc_load8(w + c);
        /* dinp is read and written here: a plain load, not __ldg's. */
        kc_x8 ov = *reinterpret_cast<const kc_x8 *>(di + c);
#pragma unroll
        for (int j = 0; j < 8; j++)
          ov.v[j] = grad(wv.v[j], dv[i].v[j], xv[i].v[j], ov.v[j]);
        kc_store8(di + c, ov);
      });
    }
  }
}

/* The input gradient's kernel for C: the vector one where it applies. */
static void ln_dinp(const kern_ctx *k, floatX *dinp, const floatX *dout,
                    const floatX *inp, const floatX *w, const float *mean,
                    const float *rstd, int N, int C) {
  const unsigned grid = kc_grid((size_t)N, LN_WARPS, k->sm_count);
  const int nv = (C + 255) / 256;
  const bool vec = C % 8 == 0 && nv <= 8 && kc_aligned16(dinp) &&
                   kc_aligned16(dout) && kc_aligned16(inp) && kc_aligned16(w);
  switch (vec ? nv : 0) {
#define LN_DINP_CASE(n)                                                        \
  case n:                                                                      \
    layernorm_dinp_kernel<n><<<grid, LN_WARPS * 32, 0, k->stream>>>(           \
        dinp, dout, inp, w, mean, rstd, N, C);                                 \
    return;
    LN_DINP_CASE(0) LN_DINP_CASE(1) LN_DINP_CASE(2) LN_DINP_CASE(3)
    LN_DINP_CASE(4) LN_DINP_CASE(5) LN_DINP_CASE(6) LN_DINP_CASE(7)
    LN_DINP_CASE(8)
#undef LN_DINP_CASE
  }
}

size_t kern_backward_max_rows(void) {
  return (size_t)65535 * KC_COLSUM_ROWS;
}

size_t kern_layernorm_backward_scratch_bytes(int N, int C, int sm_count) {
  return 2 * kc_colsum_chunks(N) * (size_t)(C > 0 ? C : 0) * sizeof(float);
}

int kern_layernorm_backward(const kern_ctx *k, floatX *dinp, float *dw,
                            float *db, void *scratch, const floatX *dout,
                            const floatX *inp, const floatX *w,
                            const float *mean, const float *rstd, int N, int C,
                            char *err, size_t errlen) {
  static const char op[] = "kern_layernorm_backward";
  if (N < 0 || C < 0)
    return kc_fail(err, errlen, op, "bad shape N=%d C=%d", N, C);
  if (N == 0 || C == 0)
    return 0;
  ln_dinp(k, dinp, dout, inp, w, mean, rstd, N, C);
  if (kc_check(op, err, errlen))
    return -1;
  /* db is the column sum of dout, dw that of dout * normalized input. */
  return colsums(k, db, dw, (float *)scratch, dout, inp, mean, rstd, N, C, op,
                 err, errlen);
}
