/*
 * kernel_check: every launcher of gpu/cuda/kernels.cuh against the CPU
 * engine's own op (gpt_impl.h's gpt_cpu_*, gpu/optim/optim.h's
 * optim_step) on seeded random inputs at GPT-2 shapes and odd ones.
 *
 * Both sides get the same inputs: values are drawn in FP32 and rounded
 * to BF16 first, and the CPU computes in FP32 on those rounded values.
 * So the measured difference is only the GPU's own rounding: BF16 outputs
 * (8 significant bits: one rounding is a relative error up to 2^-9 = 2e-3
 * of the value) and FP32 sums in another order.
 *
 * The error of an op is max |gpu - cpu| / max |cpu| over the tensor,
 * checked against a tolerance chosen per op below (the constants, with
 * why, in check_common.h, shared with emu/kernels_emulated.cpp). Each
 * backward pass also runs twice in deterministic mode and must give the
 * same bits. A few launchers get bad input on purpose and must return -1
 * with a message naming the op.
 *
 * Prints one line per check; exits 0 when all pass, 1 otherwise, 2 when
 * CUDA itself fails (no device, out of memory).
 *
 * Usage: kernel_check [--quick]  (--quick: skips the T=1024 attention)
 *        kernel_check --probe  (exits 0 if CUDA sees a device, else 3,
 *                               saying why: tests/gpu/run.sh's GPU check)
 */
#include <stdlib.h>

#include <functional>
#include <memory>
#include <stdexcept>

#include "check_common.h"
#include "cuda/kernels.cuh"
extern "C" {
#include "cpu/gpt_cpu.h"
#include "optim/optim.h"
}

typedef std::vector<float> vecf;
extern const char check_side[] = "gpu";

/* A failed CUDA call or launcher ends the current check (run() below
 * counts it as failed and goes on with the next one). */
struct check_abort : std::runtime_error {
  using std::runtime_error::runtime_error;
};

static std::string where(const char *file, int line, const char *call) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call;
}

#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess)                                                     \
      throw check_abort(where(__FILE__, __LINE__, #call) + ": " +              \
                        cudaGetErrorString(e_));                               \
  } while (0)

/* A launcher that must succeed; then the stream is synchronized so that
 * an error inside the kernel shows here, named. */
#define KR(k, call)                                                            \
  do {                                                                         \
    g_err[0] = 0;                                                              \
    if ((call) != 0)                                                           \
      throw check_abort(where(__FILE__, __LINE__, #call) +                     \
                        " failed: " + g_err);                                  \
    CK(cudaStreamSynchronize((k)->stream));                                    \
  } while (0)

static vecf randn(Rng &r, size_t n, float mean, float std, bool round) {
  return randn_as<vecf>(r, n, mean, std, round);
}

/* ---- Device buffers ----
 * The launchers run on kern_ctx's stream, which is non-blocking: it does
 * not wait for the legacy default stream that cudaMemset and cudaMemcpy
 * use. And those return early: cudaMemset on device memory is
 * asynchronous to the host, and a cudaMemcpy from pageable memory returns
 * once the data is staged, with the DMA to the device possibly still
 * going. So every upload or fill ends with a device synchronization
 * (sync_up), or a kernel launched next could read the old contents. */
static void sync_up() {
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    throw check_abort(std::string("cudaDeviceSynchronize after an upload: ") +
                      cudaGetErrorString(e));
}

template <typename T> struct Dev {
  T *p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    CK(cudaMalloc(&p, (count ? count : 1) * sizeof(T)));
    CK(cudaMemset(p, 0, (count ? count : 1) * sizeof(T)));
    sync_up();
  }
  /* Allocated and filled with h (float, or rounded to BF16). */
  explicit Dev(const vecf &h);
  ~Dev() { cudaFree(p); }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;
};

static void up(Dev<float> &d, const vecf &h) {
  CK(cudaMemcpy(d.p, h.data(), h.size() * sizeof(float),
                cudaMemcpyHostToDevice));
  sync_up();
}
static void up(Dev<floatX> &d, const vecf &h) {
  std::vector<floatX> t(h.size());
  for (size_t i = 0; i < h.size(); i++)
    t[i] = __float2bfloat16_rn(h[i]);
  CK(cudaMemcpy(d.p, t.data(), t.size() * sizeof(floatX),
                cudaMemcpyHostToDevice));
  sync_up();
}
static void up(Dev<int> &d, const std::vector<int> &h) {
  CK(cudaMemcpy(d.p, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
  sync_up();
}
template <typename T> Dev<T>::Dev(const vecf &h) : Dev(h.size()) {
  up(*this, h);
}
static vecf down(const Dev<float> &d) {
  vecf h(d.n);
  CK(cudaMemcpy(h.data(), d.p, d.n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}
static vecf down(const Dev<floatX> &d) {
  std::vector<floatX> t(d.n);
  CK(cudaMemcpy(t.data(), d.p, d.n * sizeof(floatX), cudaMemcpyDeviceToHost));
  vecf h(d.n);
  for (size_t i = 0; i < d.n; i++)
    h[i] = __bfloat162float(t[i]);
  return h;
}

/* ---- Ops ---- */

static void check_conversions(const kern_ctx *k, Rng &r) {
  const size_t n = 1000003;
  vecf x = randn(r, n, 0.0f, 3.0f, false), want(n);
  for (size_t i = 0; i < n; i++)
    want[i] = bf16r(x[i]);
  Dev<float> df(n), back(n);
  Dev<floatX> dx(n);
  up(df, x);
  KR(k, kern_f32_to_bf16(k, dx.p, df.p, n, E));
  KR(k, kern_bf16_to_f32(k, back.p, dx.p, n, E));
  /* Round to nearest even on both sides: exact. */
  check(shape("f32_to_bf16 + bf16_to_f32 n=%zu", n),
        same_bits(down(back), want), "bitwise equal to host rounding");
}

static void check_encoder(const kern_ctx *k, const kern_ctx *knd, Rng &r, int B,
                          int T, int C, int V, int Vp) {
  const size_t N = (size_t)B * T;
  std::string s = shape("B=%d T=%d C=%d", B, T, C);
  /* Tokens from the first 50: many repeats, as real text has. */
  const encoder_ref<vecf> ref = encoder_ref_make<vecf>(r, B, T, C, V, Vp, 50);
  Dev<int> dids(N);
  up(dids, ref.ids);
  Dev<floatX> dwte(ref.wte), dwpe(ref.wpe), out(N * C);
  KR(k, kern_encoder_forward(k, out.p, dids.p, dwte.p, dwpe.p, B, T, C, E));
  cmp("encoder_forward " + s, down(out), ref.out, TOL_BF16);
  Dev<floatX> ddout(ref.dout);
  Dev<float> gte(ref.gwte0), gpe(ref.gwpe0);
  Dev<char> scratch(kern_encoder_backward_scratch_bytes(B, T, C));
  KR(k, kern_encoder_backward(k, gte.p, gpe.p, scratch.p, ddout.p, dids.p,
                              ref.ids.data(), B, T, C, E));
  vecf first = down(gte);
  /* FP32 sums of a few BF16 values over the same inputs. */
  cmp("encoder_backward dwte (bucketed) " + s, first, ref.gwte, TOL_F32);
  cmp("encoder_backward dwpe " + s, down(gpe), ref.gwpe, TOL_F32);
  up(gte, ref.gwte0);
  up(gpe, ref.gwpe0);
  KR(k, kern_encoder_backward(k, gte.p, gpe.p, scratch.p, ddout.p, dids.p,
                              ref.ids.data(), B, T, C, E));
  check("encoder_backward deterministic " + s, same_bits(first, down(gte)),
        "two runs bitwise equal");
  /* Without host ids: atomics, allowed only outside deterministic mode. */
  up(gte, ref.gwte0);
  up(gpe, ref.gwpe0);
  KR(knd, kern_encoder_backward(knd, gte.p, gpe.p, scratch.p, ddout.p, dids.p,
                                NULL, B, T, C, E));
  CK(cudaDeviceSynchronize());
  cmp("encoder_backward dwte (atomic, non-deterministic) " + s, down(gte),
      ref.gwte, TOL_F32);
  expect_error("encoder_backward refuses atomics in deterministic mode",
               kern_encoder_backward(k, gte.p, gpe.p, scratch.p, ddout.p,
                                     dids.p, NULL, B, T, C, E),
               "kern_encoder_backward");
}

static void check_layernorm(const kern_ctx *k, Rng &r, int N, int C) {
  std::string s = shape("N=%d C=%d", N, C);
  const layernorm_ref<vecf> ref = layernorm_ref_make<vecf>(r, N, C);
  Dev<floatX> dx(ref.x), dx2(ref.x2), dw(ref.w), db(ref.b), out((size_t)N * C),
      res((size_t)N * C);
  Dev<float> mean(N), rstd(N);
  KR(k, kern_layernorm_forward(k, out.p, mean.p, rstd.p, dx.p, dw.p, db.p, N, C,
                               E));
  cmp("layernorm_forward out " + s, down(out), ref.out, TOL_BF16);
  /* Statistics: FP32 sums over C of the same values. */
  cmp("layernorm_forward mean " + s, down(mean), ref.mean, TOL_F32);
  cmp("layernorm_forward rstd " + s, down(rstd), ref.rstd, TOL_F32);
  /* Without statistics (a recomputing pass): the same out. */
  vecf out_first = down(out);
  CK(cudaMemset(out.p, 0, out.n * sizeof(floatX)));
  sync_up();
  KR(k,
     kern_layernorm_forward(k, out.p, NULL, NULL, dx.p, dw.p, db.p, N, C, E));
  check("layernorm_forward mean, rstd NULL " + s,
        same_bits(out_first, down(out)), "same out");

  /* Fused: residual = x + x2 (rounded to BF16), out = LN(residual). */
  KR(k, kern_residual_layernorm_forward(k, res.p, out.p, mean.p, rstd.p, dx.p,
                                        dx2.p, dw.p, db.p, N, C, E));
  cmp("residual_layernorm_forward residual " + s, down(res), ref.res, TOL_BF16);
  cmp("residual_layernorm_forward out " + s, down(out), ref.res_out, TOL_BF16);
  cmp("residual_layernorm_forward rstd " + s, down(rstd), ref.res_rstd,
      TOL_F32);

  /* Backward from the CPU's statistics (the same on both sides), into
   * gradients that already hold values. */
  Dev<floatX> ddout(ref.dout), ddinp(ref.dinp0);
  Dev<float> dgw(ref.dw0), dgb(ref.db0);
  Dev<float> dmean(ref.mean), drstd(ref.rstd);
  Dev<char> scratch(kern_layernorm_backward_scratch_bytes(N, C, k->sm_count));
  KR(k, kern_layernorm_backward(k, ddinp.p, dgw.p, dgb.p, scratch.p, ddout.p,
                                dx.p, dw.p, dmean.p, drstd.p, N, C, E));
  vecf gw_first = down(dgw), gb_first = down(dgb), dinp_first = down(ddinp);
  /* dinp: BF16 output of a sum with cancelling terms (w*d - means). */
  cmp("layernorm_backward dinp " + s, dinp_first, ref.dinp, TOL_PRODUCT);
  /* dw, db: FP32 sums over N rows in another order. */
  cmp("layernorm_backward dw " + s, gw_first, ref.dw, TOL_F32_ROWS);
  cmp("layernorm_backward db " + s, gb_first, ref.db, TOL_F32_ROWS);
  up(ddinp, ref.dinp0);
  up(dgw, ref.dw0);
  up(dgb, ref.db0);
  KR(k, kern_layernorm_backward(k, ddinp.p, dgw.p, dgb.p, scratch.p, ddout.p,
                                dx.p, dw.p, dmean.p, drstd.p, N, C, E));
  check("layernorm_backward deterministic " + s,
        same_bits(gw_first, down(dgw)) && same_bits(gb_first, down(dgb)) &&
            same_bits(dinp_first, down(ddinp)),
        "two runs bitwise equal");
}

/* RMSNorm (the Llama family's): LayerNorm's kernels with the mean 0;
 * the backward twice, bitwise the same. */
static void check_rmsnorm(const kern_ctx *k, Rng &r, int N, int C) {
  std::string s = shape("N=%d C=%d", N, C);
  const rmsnorm_ref<vecf> ref = rmsnorm_ref_make<vecf>(r, N, C);
  Dev<floatX> dx(ref.x), dx2(ref.x2), dw(ref.w), out((size_t)N * C),
      res((size_t)N * C);
  Dev<float> rstd(N);
  KR(k, kern_rmsnorm_forward(k, NULL, out.p, rstd.p, dx.p, NULL, dw.p, RMS_EPS,
                             N, C, E));
  cmp("rmsnorm_forward out " + s, down(out), ref.out, TOL_BF16);
  cmp("rmsnorm_forward rstd " + s, down(rstd), ref.rstd, TOL_F32);
  KR(k, kern_rmsnorm_forward(k, res.p, out.p, rstd.p, dx.p, dx2.p, dw.p,
                             RMS_EPS, N, C, E));
  cmp("residual_rmsnorm_forward residual " + s, down(res), ref.res, TOL_BF16);
  cmp("residual_rmsnorm_forward out " + s, down(out), ref.res_out, TOL_BF16);
  cmp("residual_rmsnorm_forward rstd " + s, down(rstd), ref.res_rstd, TOL_F32);
  Dev<floatX> ddout(ref.dout), ddinp(ref.dinp0);
  Dev<float> dgw(ref.dw0), drstd(ref.rstd);
  Dev<char> scratch(kern_layernorm_backward_scratch_bytes(N, C, k->sm_count));
  KR(k, kern_rmsnorm_backward(k, ddinp.p, dgw.p, scratch.p, ddout.p, dx.p, dw.p,
                              drstd.p, N, C, E));
  vecf gw_first = down(dgw), dinp_first = down(ddinp);
  cmp("rmsnorm_backward dinp " + s, dinp_first, ref.dinp, TOL_PRODUCT);
  cmp("rmsnorm_backward dw " + s, gw_first, ref.dw, TOL_F32_ROWS);
  up(ddinp, ref.dinp0);
  up(dgw, ref.dw0);
  KR(k, kern_rmsnorm_backward(k, ddinp.p, dgw.p, scratch.p, ddout.p, dx.p, dw.p,
                              drstd.p, N, C, E));
  check("rmsnorm_backward deterministic " + s,
        same_bits(gw_first, down(dgw)) && same_bits(dinp_first, down(ddinp)),
        "two runs bitwise equal");
}

/* SwiGLU, and RoPE with GQA's layout step (misc.cu), against llama_cpu.c. */
static void check_swiglu(const kern_ctx *k, Rng &r, int N, int I) {
  std::string s = shape("N=%d I=%d", N, I);
  const swiglu_ref<vecf> ref = swiglu_ref_make<vecf>(r, N, I);
  Dev<floatX> gu(ref.gu), dhid(ref.dhid), hid((size_t)N * I),
      dgu((size_t)N * 2 * I);
  KR(k, kern_swiglu_forward(k, hid.p, gu.p, N, I, E));
  cmp("swiglu_forward " + s, down(hid), ref.hid, TOL_BF16);
  KR(k, kern_swiglu_backward(k, dgu.p, dhid.p, gu.p, N, I, E));
  cmp("swiglu_backward " + s, down(dgu), ref.dgu, TOL_BF16);
}

static void check_rope(const kern_ctx *k, Rng &r, int B, int T, int C, int NH,
                       int KV) {
  std::string s = shape("B=%d T=%d C=%d NH=%d KV=%d", B, T, C, NH, KV);
  const rope_ref<vecf> ref = rope_ref_make<vecf>(r, B, T, C, NH, KV);
  Dev<floatX> in(ref.qkv_kv), dqkv(ref.dqkv), qkv(ref.qkv.size()),
      dqkv_kv(ref.dqkv_kv.size());
  Dev<float> cs(ref.cs), sn(ref.sn);
  KR(k, kern_rope_qkv_forward(k, qkv.p, in.p, cs.p, sn.p, B, T, C, NH, KV, E));
  cmp("rope_qkv_forward " + s, down(qkv), ref.qkv, TOL_BF16);
  KR(k, kern_rope_qkv_backward(k, dqkv_kv.p, dqkv.p, cs.p, sn.p, B, T, C, NH,
                               KV, E));
  cmp("rope_qkv_backward " + s, down(dqkv_kv), ref.dqkv_kv, TOL_BF16);
}

/* nn.Linear's products (kern_linear_*, w (OC,C)): the CPU's matmul on w
 * transposed. dw accumulates. */
static void check_linear(const kern_ctx *k, Rng &r, int N, int C, int OC) {
  std::string s = shape("N=%d C=%d OC=%d", N, C, OC);
  vecf x = randn(r, (size_t)N * C, 0.0f, 1.0f, true);
  vecf w = randn(r, (size_t)OC * C, 0.0f, 0.05f, true);
  vecf wt((size_t)C * OC), zero(OC, 0.0f), y((size_t)N * OC);
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++)
      wt[(size_t)c * OC + o] = w[(size_t)o * C + c];
  gpt_cpu_matmul_forward(y.data(), x.data(), wt.data(), zero.data(), N, C, OC);
  Dev<floatX> dx(x), dw(w), out((size_t)N * OC);
  KR(k, kern_linear_forward(k, out.p, dx.p, dw.p, N, C, OC, E));
  cmp("linear_forward out " + s, down(out), y, TOL_PRODUCT);
  vecf dout = randn(r, (size_t)N * OC, 0.0f, 1.0f, true);
  vecf gw0 = randn(r, (size_t)OC * C, 0.0f, 1.0f, false);
  vecf gwt((size_t)C * OC), db(OC, 0.0f), dinp((size_t)N * C), gw = gw0;
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++)
      gwt[(size_t)c * OC + o] = gw0[(size_t)o * C + c];
  gpt_cpu_matmul_backward(dinp.data(), gwt.data(), db.data(), dout.data(),
                          x.data(), wt.data(), N, C, OC);
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++)
      gw[(size_t)o * C + c] = gwt[(size_t)c * OC + o];
  Dev<floatX> ddout(dout), ddinp((size_t)N * C);
  Dev<float> dgw(gw0);
  KR(k,
     kern_linear_backward(k, ddinp.p, dgw.p, ddout.p, dx.p, dw.p, N, C, OC, E));
  cmp("linear_backward dinp " + s, down(ddinp), dinp, TOL_PRODUCT);
  cmp("linear_backward dw " + s, down(dgw), gw, TOL_F32_ROWS);
}

/* y = x W + b, optionally GELU'd, and its backward (optionally through
 * the GELU of the layer that made x). */
static void check_matmul(const kern_ctx *k, Rng &r, int N, int C, int OC,
                         bool bias, bool gelu, const char *tag) {
  std::string s = shape("N=%d C=%d OC=%d%s%s%s", N, C, OC, bias ? " bias" : "",
                        gelu ? " gelu" : "", tag);
  vecf x = randn(r, (size_t)N * C, 0.0f, 1.0f, true);
  vecf w = randn(r, (size_t)C * OC, 0.0f, 0.05f, true);
  vecf b = bias ? randn(r, OC, 0.0f, 0.5f, true) : vecf(OC, 0.0f);
  vecf pre((size_t)N * OC), y;
  gpt_cpu_matmul_forward(pre.data(), x.data(), w.data(), b.data(), N, C, OC);
  y = pre;
  if (gelu)
    gpt_cpu_gelu(y.data(), pre.data(), y.size());
  Dev<floatX> dx(x), dw(w), db(b);
  Dev<floatX> out((size_t)N * OC), aux((size_t)N * OC);
  KR(k, kern_matmul_forward(k, out.p, gelu ? aux.p : NULL, dx.p, dw.p,
                            bias ? db.p : NULL, N, C, OC, E));
  cmp("matmul_forward out " + s, down(out), y, TOL_PRODUCT);
  if (gelu)
    cmp("matmul_forward gelu_aux " + s, down(aux), pre, TOL_PRODUCT);

  /* Backward. gelu: x is taken as GELU(xpre) of an earlier layer and
   * dinp goes through GELU'(xpre). dw and dbias accumulate. */
  vecf xpre = randn(r, (size_t)N * C, 0.0f, 1.5f, true);
  vecf dout = randn(r, (size_t)N * OC, 0.0f, 1.0f, true);
  vecf gw0 = randn(r, (size_t)C * OC, 0.0f, 1.0f, false);
  vecf gb0 = randn(r, OC, 0.0f, 1.0f, false);
  vecf dinp((size_t)N * C), gw = gw0, gb = gb0;
  gpt_cpu_matmul_backward(dinp.data(), gw.data(), gb.data(), dout.data(),
                          x.data(), w.data(), N, C, OC);
  if (gelu)
    gpt_cpu_gelu_backward(dinp.data(), xpre.data(), dinp.size());
  Dev<floatX> ddout(dout), dxpre(xpre);
  Dev<floatX> ddinp((size_t)N * C);
  Dev<float> dgw(gw0), dgb(gb0);
  Dev<char> scratch(kern_matmul_backward_scratch_bytes(N, OC, k->sm_count));
  KR(k, kern_matmul_backward(k, ddinp.p, dgw.p, bias ? dgb.p : NULL, scratch.p,
                             ddout.p, dx.p, dw.p, gelu ? dxpre.p : NULL, N, C,
                             OC, E));
  vecf gw_first = down(dgw), gb_first = down(dgb), di_first = down(ddinp);
  cmp("matmul_backward dinp " + s, di_first, dinp, TOL_PRODUCT);
  cmp("matmul_backward dw " + s, gw_first, gw, TOL_F32_ROWS);
  if (bias)
    cmp("matmul_backward dbias " + s, gb_first, gb, TOL_F32_ROWS);
  else
    check("matmul_backward dbias NULL leaves it " + s, same_bits(gb_first, gb0),
          "untouched");
  up(dgw, gw0);
  up(dgb, gb0);
  KR(k, kern_matmul_backward(k, ddinp.p, dgw.p, bias ? dgb.p : NULL, scratch.p,
                             ddout.p, dx.p, dw.p, gelu ? dxpre.p : NULL, N, C,
                             OC, E));
  check("matmul_backward deterministic " + s,
        same_bits(gw_first, down(dgw)) && same_bits(gb_first, down(dgb)) &&
            same_bits(di_first, down(ddinp)),
        "two runs bitwise equal");
}

/* Operands that are slices of larger buffers, one row in (C=100: the
 * input starts 200 bytes in, 8-byte aligned): cuBLASLt must be told, or
 * it may pick an algorithm that needs 256-byte alignment. */
static void check_matmul_slices(const kern_ctx *k, Rng &r) {
  const int N = 64, C = 100, OC = 72;
  std::string s = shape("N=%d C=%d OC=%d at row 1 of their buffers", N, C, OC);
  vecf x = randn(r, (size_t)(N + 1) * C, 0.0f, 1.0f, true);
  vecf w = randn(r, (size_t)C * OC, 0.0f, 0.05f, true);
  vecf b = randn(r, OC, 0.0f, 0.5f, true), y((size_t)N * OC);
  gpt_cpu_matmul_forward(y.data(), x.data() + C, w.data(), b.data(), N, C, OC);
  Dev<floatX> dx(x), dw(w), db(b), out((size_t)(N + 1) * OC);
  KR(k, kern_matmul_forward(k, out.p + OC, NULL, dx.p + C, dw.p, db.p, N, C, OC,
                            E));
  vecf got = down(out);
  cmp("matmul_forward out " + s, vecf(got.begin() + OC, got.end()), y,
      TOL_PRODUCT);
}

static void check_elementwise(const kern_ctx *k, Rng &r, size_t n) {
  std::string s = shape("n=%zu", n);
  vecf a = randn(r, n, 0.0f, 2.0f, true), b = randn(r, n, 0.0f, 1.0f, true);
  Dev<floatX> da(a), dbb(b), out(n);
  vecf want(n);
  gpt_cpu_gelu(want.data(), a.data(), n);
  KR(k, kern_gelu_forward(k, out.p, da.p, n, E));
  cmp("gelu_forward " + s, down(out), want, TOL_BF16);
  want = b;
  gpt_cpu_gelu_backward(want.data(), a.data(), n);
  KR(k, kern_gelu_backward(k, dbb.p, da.p, n, E));
  cmp("gelu_backward " + s, down(dbb), want, TOL_BF16);
  up(dbb, b);
  for (size_t i = 0; i < n; i++)
    want[i] = a[i] + b[i];
  KR(k, kern_residual_forward(k, out.p, da.p, dbb.p, n, E));
  cmp("residual_forward " + s, down(out), want, TOL_BF16);
}

/* k's attention (kern_attention) and deterministic flag pick the
 * kernels; the label says which. */
static void check_attention(const kern_ctx *k, Rng &r, int B, int T, int C,
                            int NH) {
  std::string s = attention_shape(B, T, C, NH, k);
  const size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C;
  const attention_ref<vecf> ref = attention_ref_make<vecf>(r, B, T, C, NH);
  Dev<floatX> dqkv(ref.qkv), out(n), dq(n3), dq2(n3);
  Dev<float> lse((size_t)B * NH * T);
  KR(k, kern_attention_forward(k, out.p, lse.p, dqkv.p, B, T, C, NH, E));
  /* out: BF16 of an FP32 weighted mean of V rows. */
  cmp("attention_forward out " + s, down(out), ref.out, TOL_BF16);
  /* lse: FP32 on the same inputs (exp/log of another library). */
  cmp("attention_forward lse " + s, down(lse), ref.lse, TOL_F32);

  Dev<floatX> ddout(ref.dout);
  Dev<char> scratch(kern_attention_backward_scratch_bytes(B, T, C, NH));
  /* The GPU's own out and lse, as the backend passes them. D = rowsum(dout
   * * out) then comes from BF16 out: with the BF16 output rounding, a
   * product tolerance. */
  KR(k, kern_attention_backward(k, dq.p, scratch.p, ddout.p, dqkv.p, out.p,
                                lse.p, B, T, C, NH, E));
  vecf g = down(dq);
  cmp_dqkv(s, g, ref.dqkv, B, T, C);
  /* The one-kernel backward adds dq with atomics: no fixed order. */
  if (!k->deterministic)
    return;
  KR(k, kern_attention_backward(k, dq2.p, scratch.p, ddout.p, dqkv.p, out.p,
                                lse.p, B, T, C, NH, E));
  check("attention_backward deterministic " + s, same_bits(g, down(dq2)),
        "two runs bitwise equal");
}

static void check_classifier(const kern_ctx *k, Rng &r, int N, int V, int Vp) {
  std::string s = shape("N=%d V=%d Vp=%d", N, V, Vp);
  const classifier_ref<vecf> ref = classifier_ref_make<vecf>(r, N, V, Vp);
  Dev<floatX> dl(ref.logits);
  Dev<int> dt(N);
  up(dt, ref.tg);
  Dev<float> dloss_out(N);
  /* Loss only: logits untouched. */
  KR(k, kern_fused_classifier(k, dl.p, dloss_out.p, dt.p, 0.0f, N, V, Vp, E));
  cmp("fused_classifier losses (dloss=0) " + s, down(dloss_out), ref.losses,
      TOL_F32);
  check("fused_classifier dloss=0 leaves logits " + s,
        same_bits(down(dl), ref.logits), "bitwise unchanged");
  KR(k,
     kern_fused_classifier(k, dl.p, dloss_out.p, dt.p, ref.dloss, N, V, Vp, E));
  vecf g = down(dl);
  cmp("fused_classifier losses " + s, down(dloss_out), ref.losses, TOL_F32);
  /* dlogits: BF16 of dloss * (p - onehot). */
  cmp_dlogits(s, g, ref.probs, N, V, Vp);
}

static void check_classifier_errors(const kern_ctx *k) {
  Dev<floatX> l(64 * 2);
  Dev<float> loss(2);
  Dev<int> t(2);
  std::vector<int> bad = {3, 64}; /* 64 >= V */
  up(t, bad);
  expect_error("fused_classifier refuses Vp < V",
               kern_fused_classifier(k, l.p, loss.p, t.p, 1.0f, 2, 64, 32, E),
               "kern_fused_classifier");
  KR(k, kern_fused_classifier(k, l.p, loss.p, t.p, 0.0f, 2, 64, 64, E));
  vecf lv = down(loss);
  check("fused_classifier target >= V gives a NaN loss",
        std::isfinite(lv[0]) && std::isnan(lv[1]), "loss[1] is NaN");
  /* A NaN logit that is not the target: a NaN loss for its row, also
   * where the thread that reads it reads nothing else (V < the block;
   * Vp=63 and 9: one element a thread) and where the lanes its state
   * meets first in the warp's tree have no values (V <= 16); Vp=64 and 8:
   * the vector kernel. */
  static const int nan_v[] = {64, 63, 8, 9};
  for (int v : nan_v) {
    vecf lg(v * 2, 0.5f);
    lg[7] = NAN;
    Dev<floatX> ln(lg);
    std::vector<int> tg = {3, 3};
    up(t, tg);
    KR(k, kern_fused_classifier(k, ln.p, loss.p, t.p, 0.0f, 2, v, v, E));
    lv = down(loss);
    check(shape("fused_classifier: a NaN logit gives a NaN loss V=Vp=%d", v),
          std::isnan(lv[0]) && std::isfinite(lv[1]),
          "loss[0] is NaN, loss[1] finite");
  }
}

static void check_reductions(const kern_ctx *k, Rng &r, size_t n) {
  std::string s = shape("n=%zu", n);
  const reduction_ref<vecf> ref = reduction_ref_make<vecf>(r, n);
  Dev<float> dx(ref.x), out(1), out2(1);
  Dev<char> scratch(kern_norm_scratch_bytes(n, k->sm_count));
  KR(k, kern_sum_squares(k, out.p, scratch.p, dx.p, n, E));
  KR(k, kern_sum_squares(k, out2.p, scratch.p, dx.p, n, E));
  vecf a = down(out);
  /* Against a double sum: FP32 partial sums of ~n/2^18 terms each. */
  cmp("sum_squares " + s, a, vecf(1, (float)ref.ss), TOL_F32);
  check("sum_squares deterministic " + s, same_bits(a, down(out2)),
        "two runs bitwise equal");
  KR(k, kern_mean(k, out.p, scratch.p, dx.p, n, E));
  check_mean(s, down(out)[0], ref);
}

/* Optimizers against optim_step on the same state: the same formulas and
 * constants with IEEE-rounded operations on both sides, so equal up to
 * the rounding of the bias corrections the caller passes (AdamW) and
 * exactly equal for Lion. */
static void check_optim(const kern_ctx *k, Rng &r, optim_kind kind, int decay,
                        size_t n) {
  const char *name = kind == OPTIM_ADAMW ? "adamw_update" : "lion_update";
  std::string s = shape("n=%zu decay=%d", n, decay);
  const optim_case oc = optim_case_make(kind);
  char err[256];
  optim_ptr o = optim_case_create(oc, n, decay, err, sizeof err);
  if (!o)
    throw check_abort(err);
  optim_ref<vecf> ref = optim_ref_inputs<vecf>(r, n);
  optim_ref_step(o.get(), oc, ref);

  Dev<float> dp(ref.p), dg(ref.g), dm(ref.m), dv(ref.v);
  Dev<floatX> pb(n);
  const float wd = decay ? oc.cfg.weight_decay : 0.0f;
  if (kind == OPTIM_ADAMW) {
    KR(k, kern_adamw_update(k, dp.p, pb.p, dm.p, dv.p, dg.p, n, oc.lr,
                            oc.cfg.beta1, oc.cfg.beta2, oc.c1, oc.c2,
                            oc.cfg.eps, wd, oc.gscale, E));
  } else {
    KR(k, kern_lion_update(k, dp.p, pb.p, dm.p, dg.p, n, oc.lr, oc.cfg.beta1,
                           oc.cfg.beta2, wd, oc.gscale, E));
  }
  vecf pg = down(dp);
  cmp_update(std::string(name) + " update " + s, ref.p, pg, ref.pc,
             kind == OPTIM_ADAMW);
  cmp(std::string(name) + " m " + s, down(dm), ref.mc, 0.0);
  if (kind == OPTIM_ADAMW)
    cmp(std::string(name) + " v " + s, down(dv), ref.vc, 0.0);
  vecf want(n);
  for (size_t i = 0; i < n; i++)
    want[i] = bf16r(pg[i]);
  check(std::string(name) + " bf16 copy " + s, same_bits(down(pb), want),
        "round to nearest even of master");
  if (kind == OPTIM_ADAMW)
    expect_error("adamw_update refuses b1_corr = 0 (step 0)",
                 kern_adamw_update(k, dp.p, pb.p, dm.p, dv.p, dg.p, n, oc.lr,
                                   0.9f, 0.95f, 0.0f, 0.1f, 1e-8f, 0.0f, 1.0f,
                                   E),
                 "kern_adamw_update");
}

static void check_shape_errors(const kern_ctx *k) {
  Dev<floatX> a(4096);
  Dev<float> f(4096);
  expect_error("attention_forward refuses hs > 128",
               kern_attention_forward(k, a.p, f.p, a.p, 1, 4, 258, 1, E),
               "kern_attention_forward");
  expect_error("attention_forward refuses C % NH != 0",
               kern_attention_forward(k, a.p, f.p, a.p, 1, 4, 96, 5, E),
               "kern_attention_forward");
  expect_error("matmul_forward refuses N=0",
               kern_matmul_forward(k, a.p, NULL, a.p, a.p, NULL, 0, 8, 8, E),
               "kern_matmul_forward");
  expect_error(
      "layernorm_forward refuses C<0",
      kern_layernorm_forward(k, a.p, f.p, f.p, a.p, a.p, a.p, 4, -1, E),
      "kern_layernorm_forward");
  expect_error("layernorm_backward refuses N<0",
               kern_layernorm_backward(k, a.p, f.p, f.p, f.p, a.p, a.p, a.p,
                                       f.p, f.p, -1, 8, E),
               "kern_layernorm_backward");
  /* Refused before anything runs: the pointers are never used. */
  expect_error("attention_forward refuses T > 65535 tiles of 16 rows",
               kern_attention_forward(k, a.p, f.p, a.p, 1, 65535 * 16 + 1, 64,
                                      1, E),
               "kern_attention_forward");
  expect_error("matmul_backward refuses more than 65535 row chunks (dbias)",
               kern_matmul_backward(k, a.p, f.p, f.p, f.p, a.p, a.p, a.p, NULL,
                                    (int)kern_backward_max_rows() + 1, 8, 8, E),
               "kern_matmul_backward");
  static const int ids_host[4] = {0, 1, 2, 3};
  expect_error("encoder_backward refuses host ids without scratch",
               kern_encoder_backward(k, f.p, f.p, NULL, a.p, (const int *)f.p,
                                     ids_host, 1, 4, 8, E),
               "kern_encoder_backward");
  expect_error("mean refuses n=0", kern_mean(k, f.p, f.p, f.p, 0, E),
               "kern_mean");
  expect_error("rope_qkv_forward refuses KV not dividing NH",
               kern_rope_qkv_forward(k, a.p, a.p, f.p, f.p, 1, 4, 96, 4, 3, E),
               "kern_rope_qkv_forward");
  expect_error("linear_forward refuses N=0",
               kern_linear_forward(k, a.p, a.p, a.p, 0, 8, 8, E),
               "kern_linear_forward");
}

/* Runs one group of checks; an abort counts as one failure. After an
 * error inside a kernel the CUDA context is unusable, and nothing after
 * it could pass: then the program stops. */
static void run(const std::function<void()> &f) {
  try {
    f();
  } catch (const check_abort &e) {
    printf("FAIL %s\n", e.what());
    g_fail++;
    cudaError_t st = cudaDeviceSynchronize();
    if (st != cudaSuccess) {
      printf("kernel_check: the CUDA context is lost (%s); stopping: %d "
             "passed, %d failed\n",
             cudaGetErrorString(st), g_pass, g_fail);
      exit(1);
    }
  }
}

int main(int argc, char **argv) {
  bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  bool probe = argc > 1 && strcmp(argv[1], "--probe") == 0;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    fprintf(probe ? stdout : stderr, "kernel_check: no CUDA device (%s)\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return probe ? 3 : 2;
  }
  if (probe) {
    printf("kernel_check: %d CUDA device(s)\n", ndev);
    return 0;
  }
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
    fprintf(stderr, "kernel_check: %s\n", cudaGetErrorString(e));
    return 2;
  }
  printf("kernel_check on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major,
         prop.minor, prop.multiProcessorCount);
  kern_ctx k, knd;
  if (kern_ctx_init(&k, 1, E) || kern_ctx_init(&knd, 0, E)) {
    fprintf(stderr, "kernel_check: %s\n", g_err);
    return 2;
  }
  Rng r(20261121);

  run([&] { check_conversions(&k, r); });
  /* GPT-2 124M's shapes (B=4, T=64, C=768, NH=12, V=50257 padded to
   * 50304) and odd ones: C=96 and C=100 (not a multiple of 8: LayerNorm's
   * scalar path), T=77 and T=33 (not multiples of the attention tiles),
   * head sizes 32, 48 and 128. */
  run([&] { check_encoder(&k, &knd, r, 4, 64, 768, 50257, 50304); });
  run([&] { check_encoder(&k, &knd, r, 3, 77, 96, 1000, 1024); });
  run([&] { check_layernorm(&k, r, 4 * 64, 768); });
  run([&] { check_layernorm(&k, r, 3 * 77, 96); });
  run([&] { check_layernorm(&k, r, 37, 100); });
  /* The Llama family's: RMSNorm at SmolLM-135M's width (576) and odd
   * ones; SwiGLU at its 1536; RoPE/GQA at its 9 heads on 3 key/value
   * heads of 64, at 4 on 2 of 32 and at 4 on 1 of 24; its products
   * (q|k|v 576 -> 960, gate|up 576 -> 3072, down 1536 -> 576) and an
   * odd one. */
  run([&] { check_rmsnorm(&k, r, 4 * 64, 576); });
  run([&] { check_rmsnorm(&k, r, 3 * 77, 96); });
  run([&] { check_rmsnorm(&k, r, 37, 100); });
  run([&] { check_swiglu(&k, r, 4 * 64, 1536); });
  run([&] { check_swiglu(&k, r, 37, 100); });
  run([&] { check_rope(&k, r, 4, 64, 576, 9, 3); });
  run([&] { check_rope(&k, r, 2, 33, 128, 4, 2); });
  run([&] { check_rope(&k, r, 1, 40, 96, 4, 1); });
  run([&] { check_linear(&k, r, 256, 576, 960); });
  run([&] { check_linear(&k, r, 256, 576, 3072); });
  run([&] { check_linear(&k, r, 256, 1536, 576); });
  run([&] { check_linear(&k, r, 231, 96, 100); });
  /* A block's products (qkv, fc with GELU, fcproj; attproj is a smaller
   * one of the same kind), the LM head (no bias), and odd widths. */
  struct mm {
    int N, C, OC;
    bool bias, gelu;
  };
  static const mm mms[] = {
      {256, 768, 2304, true, false},
      {256, 768, 3072, true, true},
      {256, 3072, 768, true, false},
      {256, 768, 50304, false, false},
      {231, 96, 384, true, true},
      {231, 100, 100, true, true}, /* aux ld 100: no epilogue */
      {231, 96, 100, false, false}};
  for (const mm &m : mms)
    run([&] { check_matmul(&k, r, m.N, m.C, m.OC, m.bias, m.gelu, ""); });
  /* The GELU epilogues' fallback (separate GELU kernels). */
  setenv("DAGRUN_CUDA_NO_GELU_EPILOGUE", "1", 1);
  for (const mm &m : mms)
    if (m.gelu)
      run([&] {
        check_matmul(&k, r, m.N, m.C, m.OC, m.bias, true, " (no epilogue)");
      });
  unsetenv("DAGRUN_CUDA_NO_GELU_EPILOGUE");
  run([&] { check_matmul_slices(&k, r); });
  run([&] { check_elementwise(&k, r, 4 * 64 * 3072 + 5); });
  struct att {
    int B, T, C, NH;
  };
  static const att atts[] = {{4, 64, 768, 12}, {4, 128, 768, 12},
                             {2, 77, 96, 2},   {1, 100, 256, 2},
                             {2, 33, 96, 3},   {4, 1024, 768, 12},
                             /* B*NH = 65600 > 65535, the most a grid's y
                              * or z can have; hs = 16 < 32 lanes */
                             {16400, 4, 64, 4}};
  /* Each shape in each attention mode (check_common.h's ATT_MODES: every
   * head size here is a multiple of 16), then tc-fused outside
   * deterministic mode (the one-kernel backward). */
  for (int m = 0; m <= ATT_MODES; m++) {
    kern_ctx *c = m < ATT_MODES ? &k : &knd;
    c->attention = m < ATT_MODES ? m : KERN_ATT_TC_FUSED;
    for (const att &a : atts)
      if (!quick || a.T < 1024)
        run([&] { check_attention(c, r, a.B, a.T, a.C, a.NH); });
  }
  k.attention = KERN_ATT_TC;
  /* cuDNN's fused attention, outside deterministic mode (its backward
   * adds dq with atomics), on the shapes whose head size is a multiple of
   * 8, where cuDNN loads (the GPU machines'); where it does not, the
   * checks are named as not run, and nothing is counted. */
  {
    char why[600];
    if (kern_attention_use_cudnn(&knd, why, sizeof why) == 0) {
      for (const att &a : atts)
        if ((!quick || a.T < 1024) && (a.C / a.NH) % 8 == 0)
          run([&] { check_attention(&knd, r, a.B, a.T, a.C, a.NH); });
    } else {
      printf("NOT RUN: the attention checks on cuDNN: %s\n", why);
    }
    knd.attention = KERN_ATT_TC;
  }
  run([&] { check_classifier(&k, r, 4 * 64, 50257, 50304); });
  run([&] { check_classifier(&k, r, 37, 1000, 1024); });
  /* The one-element kernel (Vp odd), and a row wider than the vector
   * kernel holds in registers (60008 > 7 * 1024 * 8). */
  run([&] { check_classifier(&k, r, 37, 999, 1001); });
  run([&] { check_classifier(&k, r, 5, 60001, 60008); });
  run([&] { check_classifier_errors(&k); });
  /* Reductions up to GPT-2 124M's parameter count / 8. */
  for (size_t n : {(size_t)1, (size_t)1000, (size_t)15559495})
    run([&] { check_reductions(&k, r, n); });
  for (optim_kind kind : {OPTIM_ADAMW, OPTIM_LION}) {
    run([&] { check_optim(&k, r, kind, 1, 1000003); });
    run([&] { check_optim(&k, r, kind, 0, 4097); });
  }
  run([&] { check_shape_errors(&k); });

  kern_ctx_destroy(&knd);
  kern_ctx_destroy(&k);
  printf("kernel_check: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
