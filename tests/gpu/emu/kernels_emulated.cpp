/*
 * kernels_emulated: the CUDA kernels of gpu/cuda (attention, layernorm,
 * classifier, misc, optim) run on the CPU, without a GPU, and compared
 * with the CPU engine's own ops, as tests/gpu/kernel_check.cu compares
 * them on a GPU (gpt_impl.h's gpt_cpu_*, optim.h's optim_step), at small
 * and odd shapes.
 *
 * The kernels' source is compiled as host C++ (xform.py rewrites their
 * launches and shared memory at build time, emu.h supplies threadIdx,
 * __syncthreads, shuffles, atomics and intrinsics), each CUDA thread a
 * fiber. So this checks what the source says: indexing, bounds and
 * masks (the causal mask, rows past T, padding columns past V), formulas
 * and constants, grid-stride loops, the use of shared memory (poisoned
 * with NaN before every block, so reading an element no thread wrote
 * shows) and the placement of barriers (threads at different
 * __syncthreads, or a shuffle without all of its lanes, are reported by
 * the emulator and fail the test), and that each launch is one a GPU
 * accepts (block and grid sizes, dynamic shared memory limits).
 *
 * It does not check: GPU timing or performance, the GPU memory model
 * (a missing __threadfence or volatile), FMA contraction and the
 * precision of the GPU's fast math (host float arithmetic stands in,
 * within the same tolerances as kernel_check), or cuBLASLt's products
 * (cublaslt.cpp emulates them from its documentation; gpt_cuda_emulated
 * runs them inside the engine). tests/gpu/run.sh's kernel_check on a
 * real GPU remains the test of those.
 *
 * Prints one line per check; exits 0 when all pass, 1 otherwise.
 */
#include "emu.h"

#include <stdlib.h>

#include <memory>
#include <new>

#include "../check_common.h"
#include "cuda/kernels_common.cuh"
extern "C" {
#include "cpu/gpt_cpu.h"
#include "optim/optim.h"
}

/* Host buffers 64-byte aligned, so that the kernels' 128-bit paths
 * (kc_aligned16) are taken where the shape allows, under any malloc. */
template <class T> struct aligned_alloc64 {
  typedef T value_type;
  aligned_alloc64() = default;
  template <class U> aligned_alloc64(const aligned_alloc64<U> &) {}
  T *allocate(size_t n) {
    return static_cast<T *>(
        ::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U> bool operator==(const aligned_alloc64<U> &) const {
    return true;
  }
};
typedef std::vector<float, aligned_alloc64<float>> vecf;
typedef std::vector<floatX, aligned_alloc64<floatX>> vecx;
extern const char check_side[] = "emu";

static vecf randn(Rng &r, size_t n, float mean, float std, bool round) {
  return randn_as<vecf>(r, n, mean, std, round);
}

static vecx tox(const vecf &v) {
  vecx r(v.size());
  for (size_t i = 0; i < v.size(); i++)
    r[i] = __float2bfloat16_rn(v[i]);
  return r;
}
static vecf tof(const vecx &v) {
  vecf r(v.size());
  for (size_t i = 0; i < v.size(); i++)
    r[i] = __bfloat162float(v[i]);
  return r;
}

/* A launcher that must succeed (a launch the emulator refuses as a GPU
 * would makes it return -1). */
#define KR(call)                                                               \
  do {                                                                         \
    g_err[0] = 0;                                                              \
    if ((call) != 0) {                                                         \
      printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, g_err);        \
      g_fail++;                                                                \
    }                                                                          \
  } while (0)

/* ---- misc.cu ---- */

/* Both directions over n values that need several grid-stride rounds
 * (16 blocks of 256 threads at sm_count 1), with the values where
 * rounding to nearest even is decided: exact halves, their neighbours,
 * signed zeros, subnormals, infinities, NaN. The kernels and the host use
 * the same conversion functions here, so this checks the kernels'
 * indexing, not the rounding (kernel_check does on a GPU). */
static void check_conversions(const kern_ctx *k, Rng &r, size_t n) {
  vecf x = randn(r, n, 0.0f, 3.0f, false), want(n), back(n);
  const float special[] = {1.00390625f, 1.01171875f,   1.0039063f, -0.0f,
                           0.0f,        1e-40f,        -3e-39f,    INFINITY,
                           -INFINITY,   3.3961514e38f, 65535.0f,   -2.5f};
  for (size_t i = 0; i < sizeof special / sizeof *special && i < n; i++)
    x[i * 7 % n] = special[i];
  x[n - 1] = NAN;
  vecx mid(n);
  KR(kern_f32_to_bf16(k, mid.data(), x.data(), n, E));
  KR(kern_bf16_to_f32(k, back.data(), mid.data(), n, E));
  bool ok = true;
  for (size_t i = 0; i < n; i++) {
    want[i] = bf16r(x[i]);
    ok = ok && (memcmp(&want[i], &back[i], sizeof(float)) == 0 ||
                (std::isnan(want[i]) && std::isnan(back[i])));
  }
  check(shape("f32_to_bf16 + bf16_to_f32 n=%zu", n), ok,
        "every element converted once, as the host rounds");
}

static void check_encoder(const kern_ctx *k, const kern_ctx *knd, Rng &r, int B,
                          int T, int C, int V, int Vp) {
  const size_t N = (size_t)B * T;
  std::string s = shape("B=%d T=%d C=%d", B, T, C);
  /* Tokens from the first 13: many repeats, as real text has. */
  const encoder_ref<vecf> ref = encoder_ref_make<vecf>(r, B, T, C, V, Vp, 13);
  vecx xwte = tox(ref.wte), xwpe = tox(ref.wpe), out(N * C);
  KR(kern_encoder_forward(k, out.data(), ref.ids.data(), xwte.data(),
                          xwpe.data(), B, T, C, E));
  cmp("encoder_forward " + s, tof(out), ref.out, TOL_BF16);
  vecx xdout = tox(ref.dout);
  vecf te = ref.gwte0, pe = ref.gwpe0;
  std::vector<char> scratch(kern_encoder_backward_scratch_bytes(B, T, C));
  KR(kern_encoder_backward(k, te.data(), pe.data(), scratch.data(),
                           xdout.data(), ref.ids.data(), ref.ids.data(), B, T,
                           C, E));
  cmp("encoder_backward dwte (bucketed) " + s, te, ref.gwte, TOL_F32);
  cmp("encoder_backward dwpe " + s, pe, ref.gwpe, TOL_F32);
  vecf first = te;
  te = ref.gwte0;
  pe = ref.gwpe0;
  KR(kern_encoder_backward(k, te.data(), pe.data(), scratch.data(),
                           xdout.data(), ref.ids.data(), ref.ids.data(), B, T,
                           C, E));
  check("encoder_backward deterministic " + s, same_bits(first, te),
        "two runs bitwise equal");
  te = ref.gwte0;
  pe = ref.gwpe0;
  KR(kern_encoder_backward(knd, te.data(), pe.data(), scratch.data(),
                           xdout.data(), ref.ids.data(), NULL, B, T, C, E));
  cmp("encoder_backward dwte (atomic) " + s, te, ref.gwte, TOL_F32);
  expect_error("encoder_backward refuses atomics in deterministic mode",
               kern_encoder_backward(k, te.data(), pe.data(), scratch.data(),
                                     xdout.data(), ref.ids.data(), NULL, B, T,
                                     C, E),
               "kern_encoder_backward");
  expect_error("encoder_backward refuses host ids without scratch",
               kern_encoder_backward(k, te.data(), pe.data(), NULL,
                                     xdout.data(), ref.ids.data(),
                                     ref.ids.data(), B, T, C, E),
               "kern_encoder_backward");
}

static void check_elementwise(const kern_ctx *k, Rng &r, size_t n) {
  std::string s = shape("n=%zu", n);
  vecf a = randn(r, n, 0.0f, 2.0f, true), b = randn(r, n, 0.0f, 1.0f, true);
  vecx xa = tox(a), xb = tox(b), out(n);
  vecf want(n);
  gpt_cpu_gelu(want.data(), a.data(), n);
  KR(kern_gelu_forward(k, out.data(), xa.data(), n, E));
  cmp("gelu_forward " + s, tof(out), want, TOL_BF16);
  want = b;
  gpt_cpu_gelu_backward(want.data(), a.data(), n);
  KR(kern_gelu_backward(k, xb.data(), xa.data(), n, E));
  cmp("gelu_backward " + s, tof(xb), want, TOL_BF16);
  xb = tox(b);
  for (size_t i = 0; i < n; i++)
    want[i] = a[i] + b[i];
  KR(kern_residual_forward(k, out.data(), xa.data(), xb.data(), n, E));
  cmp("residual_forward " + s, tof(out), want, TOL_BF16);
}

static void check_reductions(const kern_ctx *k, Rng &r, size_t n) {
  std::string s = shape("n=%zu", n);
  const reduction_ref<vecf> ref = reduction_ref_make<vecf>(r, n);
  vecf scratch(kern_norm_scratch_bytes(n, k->sm_count) / sizeof(float));
  float a = NAN, b = NAN, m = NAN;
  KR(kern_sum_squares(k, &a, scratch.data(), ref.x.data(), n, E));
  KR(kern_sum_squares(k, &b, scratch.data(), ref.x.data(), n, E));
  cmp("sum_squares " + s, vecf(1, a), vecf(1, (float)ref.ss), TOL_F32);
  check("sum_squares deterministic " + s, memcmp(&a, &b, sizeof a) == 0,
        "two runs bitwise equal");
  KR(kern_mean(k, &m, scratch.data(), ref.x.data(), n, E));
  check_mean(s, m, ref);
}

/* ---- layernorm.cu ---- */

static void check_layernorm(const kern_ctx *k, Rng &r, int N, int C) {
  std::string s = shape("N=%d C=%d", N, C);
  const layernorm_ref<vecf> ref = layernorm_ref_make<vecf>(r, N, C);
  vecx xx = tox(ref.x), xx2 = tox(ref.x2), xw = tox(ref.w), xb = tox(ref.b);
  vecx out((size_t)N * C), res((size_t)N * C);
  vecf mean(N, NAN), rstd(N, NAN);
  KR(kern_layernorm_forward(k, out.data(), mean.data(), rstd.data(), xx.data(),
                            xw.data(), xb.data(), N, C, E));
  cmp("layernorm_forward out " + s, tof(out), ref.out, TOL_BF16);
  cmp("layernorm_forward mean " + s, mean, ref.mean, TOL_F32);
  cmp("layernorm_forward rstd " + s, rstd, ref.rstd, TOL_F32);
  vecf out_first = tof(out);
  out.assign(out.size(), __float2bfloat16_rn(0.0f));
  KR(kern_layernorm_forward(k, out.data(), NULL, NULL, xx.data(), xw.data(),
                            xb.data(), N, C, E));
  check("layernorm_forward mean, rstd NULL " + s,
        same_bits(out_first, tof(out)), "same out");

  KR(kern_residual_layernorm_forward(k, res.data(), out.data(), mean.data(),
                                     rstd.data(), xx.data(), xx2.data(),
                                     xw.data(), xb.data(), N, C, E));
  cmp("residual_layernorm_forward residual " + s, tof(res), ref.res, TOL_BF16);
  cmp("residual_layernorm_forward out " + s, tof(out), ref.res_out, TOL_BF16);
  cmp("residual_layernorm_forward mean " + s, mean, ref.res_mean, TOL_F32);
  cmp("residual_layernorm_forward rstd " + s, rstd, ref.res_rstd, TOL_F32);

  vecx xdout = tox(ref.dout), xdinp = tox(ref.dinp0);
  vecf ggw = ref.dw0, ggb = ref.db0;
  vecf scratch(kern_layernorm_backward_scratch_bytes(N, C, k->sm_count) /
               sizeof(float));
  KR(kern_layernorm_backward(k, xdinp.data(), ggw.data(), ggb.data(),
                             scratch.data(), xdout.data(), xx.data(), xw.data(),
                             ref.mean.data(), ref.rstd.data(), N, C, E));
  cmp("layernorm_backward dinp " + s, tof(xdinp), ref.dinp, TOL_PRODUCT);
  cmp("layernorm_backward dw " + s, ggw, ref.dw, TOL_F32_ROWS);
  cmp("layernorm_backward db " + s, ggb, ref.db, TOL_F32_ROWS);
}

/* RMSNorm (the Llama family's): LayerNorm's kernels with the mean 0. */
static void check_rmsnorm(const kern_ctx *k, Rng &r, int N, int C) {
  std::string s = shape("N=%d C=%d", N, C);
  const rmsnorm_ref<vecf> ref = rmsnorm_ref_make<vecf>(r, N, C);
  vecx xx = tox(ref.x), xx2 = tox(ref.x2), xw = tox(ref.w);
  vecx out((size_t)N * C), res((size_t)N * C);
  vecf rstd(N, NAN);
  KR(kern_rmsnorm_forward(k, NULL, out.data(), rstd.data(), xx.data(), NULL,
                          xw.data(), RMS_EPS, N, C, E));
  cmp("rmsnorm_forward out " + s, tof(out), ref.out, TOL_BF16);
  cmp("rmsnorm_forward rstd " + s, rstd, ref.rstd, TOL_F32);
  KR(kern_rmsnorm_forward(k, res.data(), out.data(), rstd.data(), xx.data(),
                          xx2.data(), xw.data(), RMS_EPS, N, C, E));
  cmp("residual_rmsnorm_forward residual " + s, tof(res), ref.res, TOL_BF16);
  cmp("residual_rmsnorm_forward out " + s, tof(out), ref.res_out, TOL_BF16);
  cmp("residual_rmsnorm_forward rstd " + s, rstd, ref.res_rstd, TOL_F32);
  vecx xdout = tox(ref.dout), xdinp = tox(ref.dinp0);
  vecf ggw = ref.dw0;
  vecf scratch(kern_layernorm_backward_scratch_bytes(N, C, k->sm_count) /
               sizeof(float));
  KR(kern_rmsnorm_backward(k, xdinp.data(), ggw.data(), scratch.data(),
                           xdout.data(), xx.data(), xw.data(), ref.rstd.data(),
                           N, C, E));
  cmp("rmsnorm_backward dinp " + s, tof(xdinp), ref.dinp, TOL_PRODUCT);
  cmp("rmsnorm_backward dw " + s, ggw, ref.dw, TOL_F32_ROWS);
}

/* SwiGLU forward and backward (misc.cu). */
static void check_swiglu(const kern_ctx *k, Rng &r, int N, int I) {
  std::string s = shape("N=%d I=%d", N, I);
  const swiglu_ref<vecf> ref = swiglu_ref_make<vecf>(r, N, I);
  vecx gu = tox(ref.gu), dhid = tox(ref.dhid);
  vecx hid((size_t)N * I), dgu((size_t)N * 2 * I);
  KR(kern_swiglu_forward(k, hid.data(), gu.data(), N, I, E));
  cmp("swiglu_forward " + s, tof(hid), ref.hid, TOL_BF16);
  KR(kern_swiglu_backward(k, dgu.data(), dhid.data(), gu.data(), N, I, E));
  cmp("swiglu_backward " + s, tof(dgu), ref.dgu, TOL_BF16);
}

/* RoPE and GQA's layout step, forward and its adjoint (misc.cu). */
static void check_rope(const kern_ctx *k, Rng &r, int B, int T, int C, int NH,
                       int KV) {
  std::string s = shape("B=%d T=%d C=%d NH=%d KV=%d", B, T, C, NH, KV);
  const rope_ref<vecf> ref = rope_ref_make<vecf>(r, B, T, C, NH, KV);
  vecx in = tox(ref.qkv_kv), dqkv = tox(ref.dqkv);
  vecx qkv(ref.qkv.size()), dqkv_kv(ref.dqkv_kv.size());
  KR(kern_rope_qkv_forward(k, qkv.data(), in.data(), ref.cs.data(),
                           ref.sn.data(), B, T, C, NH, KV, E));
  cmp("rope_qkv_forward " + s, tof(qkv), ref.qkv, TOL_BF16);
  KR(kern_rope_qkv_backward(k, dqkv_kv.data(), dqkv.data(), ref.cs.data(),
                            ref.sn.data(), B, T, C, NH, KV, E));
  cmp("rope_qkv_backward " + s, tof(dqkv_kv), ref.dqkv_kv, TOL_BF16);
}

/* kc_colsum (matmul_lt.cu's bias gradient): db (OC) += column sums of
 * dout (N,OC), against double sums. */
static void check_colsum(const kern_ctx *k, Rng &r, int N, int OC) {
  std::string s = shape("N=%d OC=%d", N, OC);
  vecf dout = randn(r, (size_t)N * OC, 0.0f, 1.0f, true);
  vecf db0 = randn(r, OC, 0.0f, 1.0f, false), want(OC);
  for (int c = 0; c < OC; c++) {
    double acc = db0[c];
    for (int i = 0; i < N; i++)
      acc += dout[(size_t)i * OC + c];
    want[c] = (float)acc;
  }
  vecx xdout = tox(dout);
  vecf db = db0, scratch(kc_colsum_chunks(N) * OC);
  KR(kc_colsum(k, db.data(), scratch.data(), xdout.data(), N, OC, "kc_colsum",
               E));
  cmp("kc_colsum " + s, db, want, TOL_F32_ROWS);
  /* Again: the last block of each column group reset its counter, so the
   * second call adds as the first did, to the same bits. */
  vecf db2 = db0;
  KR(kc_colsum(k, db2.data(), scratch.data(), xdout.data(), N, OC, "kc_colsum",
               E));
  check("kc_colsum twice " + s, same_bits(db, db2), "same bits");
}

/* ---- attention.cu ---- */

/* twice: run the backward pass again, which must give the same bits
 * (costly here: for one shape only). */
static void check_attention(const kern_ctx *k, Rng &r, int B, int T, int C,
                            int NH, bool twice) {
  /* k's attention (kern_attention) and deterministic flag pick the
   * kernels; the label says which. */
  std::string s = attention_shape(B, T, C, NH, k);
  const size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C;
  const attention_ref<vecf> ref = attention_ref_make<vecf>(r, B, T, C, NH);
  vecx xqkv = tox(ref.qkv), out(n), dq(n3), dq2(n3);
  vecf lse((size_t)B * NH * T, NAN);
  KR(kern_attention_forward(k, out.data(), lse.data(), xqkv.data(), B, T, C, NH,
                            E));
  cmp("attention_forward out " + s, tof(out), ref.out, TOL_BF16);
  cmp("attention_forward lse " + s, lse, ref.lse, TOL_F32);

  vecx xdout = tox(ref.dout);
  vecf scratch(kern_attention_backward_scratch_bytes(B, T, C, NH) /
               sizeof(float));
  KR(kern_attention_backward(k, dq.data(), scratch.data(), xdout.data(),
                             xqkv.data(), out.data(), lse.data(), B, T, C, NH,
                             E));
  vecf g = tof(dq);
  cmp_dqkv(s, g, ref.dqkv, B, T, C);
  /* The one-kernel backward adds dq with atomics: no fixed order. */
  if (!twice || !k->deterministic)
    return;
  KR(kern_attention_backward(k, dq2.data(), scratch.data(), xdout.data(),
                             xqkv.data(), out.data(), lse.data(), B, T, C, NH,
                             E));
  check("attention_backward deterministic " + s, same_bits(g, tof(dq2)),
        "two runs bitwise equal");
}

/* ---- classifier.cu ---- */

/* off > 0: the logits start off elements into their buffer (2 bytes
 * each), so not 16-byte aligned: the one-element kernel where Vp % 8 == 0
 * would take the vector one. */
static void check_classifier(const kern_ctx *k, Rng &r, int N, int V, int Vp,
                             int off = 0) {
  std::string s = shape("N=%d V=%d Vp=%d", N, V, Vp);
  if (off)
    s += shape(" at +%d", off);
  const classifier_ref<vecf> ref = classifier_ref_make<vecf>(r, N, V, Vp);
  const vecx x0 = tox(ref.logits);
  vecx buf(off + x0.size());
  floatX *xl = buf.data() + off;
  std::copy(x0.begin(), x0.end(), xl);
  const auto logits = [&] { return tof(vecx(xl, xl + x0.size())); };
  vecf got(N, NAN);
  KR(kern_fused_classifier(k, xl, got.data(), ref.tg.data(), 0.0f, N, V, Vp,
                           E));
  cmp("fused_classifier losses (dloss=0) " + s, got, ref.losses, TOL_F32);
  check("fused_classifier dloss=0 leaves logits " + s,
        same_bits(logits(), ref.logits), "bitwise unchanged");
  KR(kern_fused_classifier(k, xl, got.data(), ref.tg.data(), ref.dloss, N, V,
                           Vp, E));
  vecf g = logits();
  cmp("fused_classifier losses " + s, got, ref.losses, TOL_F32);
  cmp_dlogits(s, g, ref.probs, N, V, Vp);
  /* Again on the same logits: the same bits (the emulator runs the
   * threads in another order each time). */
  vecf got2(N, NAN);
  std::copy(x0.begin(), x0.end(), xl);
  KR(kern_fused_classifier(k, xl, got2.data(), ref.tg.data(), ref.dloss, N, V,
                           Vp, E));
  check("fused_classifier deterministic " + s,
        same_bits(got, got2) && same_bits(g, logits()),
        "two runs bitwise equal");
}

/* classifier_vp.cu: the vocabulary-parallel cross-entropy of R shards
 * of the logits (Vl = Vp / R columns each, rank r's from r Vl), the
 * gather and the sums done by hand between the kernels, against the
 * CPU's whole cross-entropy (as kern_fused_classifier is checked): the
 * losses on every rank, the shards' dlogits put together. With V well
 * under Vp the last ranks have padding only (Vv = 0). */
static void check_vp_classifier(const kern_ctx *k, Rng &r, int N, int V, int Vp,
                                int R) {
  std::string s = shape("N=%d V=%d Vp=%d ranks=%d", N, V, Vp, R);
  const classifier_ref<vecf> ref = classifier_ref_make<vecf>(r, N, V, Vp);
  const int Vl = Vp / R;
  std::vector<vecx> x(R, vecx((size_t)N * Vl));
  vecf maxes_all((size_t)R * N), gmax((size_t)R * N), red((size_t)R * 2 * N);
  vecf sum(2 * (size_t)N, 0.0f), got((size_t)N * Vp);
  for (int q = 0; q < R; q++) {
    for (int i = 0; i < N; i++)
      for (int j = 0; j < Vl; j++)
        x[q][(size_t)i * Vl + j] =
            __float2bfloat16_rn(ref.logits[(size_t)i * Vp + q * Vl + j]);
    int Vv = std::max(0, std::min(Vl, V - q * Vl));
    KR(kern_vp_row_max(k, maxes_all.data() + (size_t)q * N, x[q].data(), N, Vv,
                       Vl, E));
  }
  for (int q = 0; q < R; q++) {
    int Vv = std::max(0, std::min(Vl, V - q * Vl));
    float *rq = red.data() + (size_t)q * 2 * N;
    KR(kern_vp_row_sums(k, gmax.data() + (size_t)q * N, rq, maxes_all.data(),
                        x[q].data(), ref.tg.data(), q * Vl, N, Vv, Vl, R, E));
    for (size_t i = 0; i < 2 * (size_t)N; i++)
      sum[i] += rq[i];
  }
  bool same_loss = true;
  vecf loss0;
  for (int q = 0; q < R; q++) {
    int Vv = std::max(0, std::min(Vl, V - q * Vl));
    vecf loss(N, NAN);
    KR(kern_vp_classifier(k, x[q].data(), loss.data(),
                          gmax.data() + (size_t)q * N, sum.data(),
                          ref.tg.data(), q * Vl, ref.dloss, N, Vv, Vl, E));
    if (q == 0)
      loss0 = loss;
    same_loss = same_loss && same_bits(loss, loss0);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < Vl; j++)
        got[(size_t)i * Vp + q * Vl + j] =
            __bfloat162float(x[q][(size_t)i * Vl + j]);
  }
  cmp("vp_classifier losses " + s, loss0, ref.losses, TOL_F32);
  check("vp_classifier losses on every rank " + s, same_loss, "bitwise equal");
  cmp_dlogits("vp " + s, got, ref.probs, N, V, Vp);
}

/* A NaN logit (not the target) at column col of row 0 of (2,Vp) logits:
 * row 0's loss NaN, row 1's finite. With V <= 16 the lanes that the
 * NaN's state meets first in the warp's tree have no values. */
static void check_classifier_nan(const kern_ctx *k, int V, int Vp, int col) {
  vecx l(Vp * 2, __float2bfloat16_rn(0.5f));
  vecf loss(2);
  std::vector<int> t = {0, 0};
  l[col] = __float2bfloat16_rn(NAN);
  KR(kern_fused_classifier(k, l.data(), loss.data(), t.data(), 0.0f, 2, V, Vp,
                           E));
  check(shape("fused_classifier: a NaN logit gives a NaN loss V=%d Vp=%d "
              "col=%d",
              V, Vp, col),
        std::isnan(loss[0]) && std::isfinite(loss[1]),
        "loss[0] is NaN, loss[1] finite");
}

static void check_classifier_errors(const kern_ctx *k) {
  vecx l(64 * 2, __float2bfloat16_rn(0.5f));
  vecf loss(2);
  std::vector<int> t = {3, 64}; /* 64 >= V */
  expect_error("fused_classifier refuses Vp < V",
               kern_fused_classifier(k, l.data(), loss.data(), t.data(), 1.0f,
                                     2, 64, 32, E),
               "kern_fused_classifier");
  KR(kern_fused_classifier(k, l.data(), loss.data(), t.data(), 0.0f, 2, 64, 64,
                           E));
  check("fused_classifier target >= V gives a NaN loss",
        std::isfinite(loss[0]) && std::isnan(loss[1]), "loss[1] is NaN");
  /* kernel_check's: a NaN logit read by a thread that reads nothing else
   * (Vp=63: one element a thread), or among 7 finite ones in a thread's
   * vector (Vp=64, Vp=8). */
  check_classifier_nan(k, 64, 64, 7);
  check_classifier_nan(k, 63, 63, 7);
  check_classifier_nan(k, 8, 8, 7);
  check_classifier_nan(k, 9, 9, 7);
}

/* ---- optim.cu: against optim_step (kernel_check's check_optim) ---- */

static void check_optim(const kern_ctx *k, Rng &r, optim_kind kind, int decay,
                        size_t n) {
  const char *name = kind == OPTIM_ADAMW ? "adamw_update" : "lion_update";
  std::string s = shape("n=%zu decay=%d", n, decay);
  const optim_case oc = optim_case_make(kind);
  char err[256];
  optim_ptr o = optim_case_create(oc, n, decay, err, sizeof err);
  if (!o) {
    check(std::string(name) + " optim_create", false, err);
    return;
  }
  optim_ref<vecf> ref = optim_ref_inputs<vecf>(r, n);
  /* Lion's sign(0) = 0: some moments and gradients that cancel. */
  for (size_t i = 0; i < n; i += 97) {
    ref.m[i] = 0.0f;
    ref.g[i] = 0.0f;
  }
  optim_ref_step(o.get(), oc, ref);

  vecf pe = ref.p, me = ref.m, ve = ref.v;
  vecx pb(n);
  const float wd = decay ? oc.cfg.weight_decay : 0.0f;
  if (kind == OPTIM_ADAMW) {
    KR(kern_adamw_update(k, pe.data(), pb.data(), me.data(), ve.data(),
                         ref.g.data(), n, oc.lr, oc.cfg.beta1, oc.cfg.beta2,
                         oc.c1, oc.c2, oc.cfg.eps, wd, oc.gscale, E));
  } else {
    KR(kern_lion_update(k, pe.data(), pb.data(), me.data(), ref.g.data(), n,
                        oc.lr, oc.cfg.beta1, oc.cfg.beta2, wd, oc.gscale, E));
  }
  cmp_update(std::string(name) + " update " + s, ref.p, pe, ref.pc,
             kind == OPTIM_ADAMW);
  cmp(std::string(name) + " m " + s, me, ref.mc, 0.0);
  if (kind == OPTIM_ADAMW)
    cmp(std::string(name) + " v " + s, ve, ref.vc, 0.0);
  vecf want(n);
  for (size_t i = 0; i < n; i++)
    want[i] = bf16r(pe[i]);
  check(std::string(name) + " bf16 copy " + s, same_bits(tof(pb), want),
        "round to nearest even of master");
  if (kind == OPTIM_ADAMW)
    expect_error("adamw_update refuses b1_corr = 0 (step 0)",
                 kern_adamw_update(k, pe.data(), pb.data(), me.data(),
                                   ve.data(), ref.g.data(), n, oc.lr, 0.9f,
                                   0.95f, 0.0f, 0.1f, 1e-8f, 0.0f, 1.0f, E),
                 "kern_adamw_update");
}

static void check_shape_errors(const kern_ctx *k) {
  vecx a(4096);
  vecf f(4096);
  expect_error(
      "attention_forward refuses hs > 128",
      kern_attention_forward(k, a.data(), f.data(), a.data(), 1, 4, 258, 1, E),
      "kern_attention_forward");
  expect_error(
      "attention_forward refuses C % NH != 0",
      kern_attention_forward(k, a.data(), f.data(), a.data(), 1, 4, 96, 5, E),
      "kern_attention_forward");
  expect_error("layernorm_forward refuses C<0",
               kern_layernorm_forward(k, a.data(), f.data(), f.data(), a.data(),
                                      a.data(), a.data(), 4, -1, E),
               "kern_layernorm_forward");
  expect_error("mean refuses n=0",
               kern_mean(k, f.data(), f.data(), f.data(), 0, E), "kern_mean");
  expect_error("rope_qkv_forward refuses KV not dividing NH",
               kern_rope_qkv_forward(k, a.data(), a.data(), f.data(), f.data(),
                                     1, 4, 96, 4, 3, E),
               "kern_rope_qkv_forward");
  expect_error("rope_qkv_backward refuses an odd head size",
               kern_rope_qkv_backward(k, a.data(), a.data(), f.data(), f.data(),
                                      1, 4, 60, 4, 2, E),
               "kern_rope_qkv_backward");
  expect_error("rmsnorm_forward refuses a residual without inp2",
               kern_rmsnorm_forward(k, a.data(), a.data(), f.data(), a.data(),
                                    NULL, a.data(), 1e-5f, 4, 8, E),
               "kern_rmsnorm_forward");
}

int main(void) {
  /* The kernels' buffers here are host vectors. */
  emu_allow_host_pointers(true);
  /* One SM: grids of at most 16 blocks (kc_grid), so the grid-stride
   * loops go round more than once at these small sizes. */
  kern_ctx k, knd;
  memset(&k, 0, sizeof k);
  k.sm_count = 1;
  k.deterministic = 1;
  knd = k;
  knd.deterministic = 0;
  /* The column sums' counters, zero as kern_ctx_init leaves them. */
  std::vector<unsigned> done(KC_COLSUM_MAX_GROUPS, 0u),
      done_nd(KC_COLSUM_MAX_GROUPS, 0u);
  k.colsum_done = done.data();
  knd.colsum_done = done_nd.data();
  Rng r(20261122);

  check_conversions(&k, r, 10007);
  /* C=100 (blocks of 128 threads), C=300 (more channels than the
   * bucketed kernel's 256 threads), C=20 (fewer than a warp). */
  check_encoder(&k, &knd, r, 2, 37, 100, 50, 64);
  check_encoder(&k, &knd, r, 1, 9, 300, 1000, 1024);
  check_encoder(&k, &knd, r, 3, 5, 20, 7, 64);
  check_elementwise(&k, r, 10007);
  /* Reductions: one partial block, several (n/2048), and n=1. */
  for (size_t n : {(size_t)1, (size_t)1000, (size_t)20011})
    check_reductions(&k, r, n);
  /* C=100: the scalar path; C=96: the 128-bit path; N=300: more than one
   * chunk of 64 rows in the column sums and more rows than 16 blocks of
   * 8 warps take in one round; C=520: the backward's 128-bit path with
   * 3 vectors a lane, the last for lane 0 alone. */
  check_layernorm(&k, r, 37, 100);
  check_layernorm(&k, r, 21, 96);
  check_layernorm(&k, r, 300, 64);
  check_layernorm(&k, r, 9, 520);
  /* RMSNorm on the same paths: scalar (C=100), 128-bit (C=96), several
   * column-sum chunks (N=300), three vectors a lane (C=520). */
  check_rmsnorm(&k, r, 37, 100);
  check_rmsnorm(&k, r, 21, 96);
  check_rmsnorm(&k, r, 300, 64);
  check_rmsnorm(&k, r, 9, 520);
  check_swiglu(&k, r, 37, 100);
  /* GQA's groups of 2, 4 and 1 (plain MHA), head sizes 32, 24 and 16
   * (the pairs of RoPE), T past a grid-stride round. */
  check_rope(&k, r, 2, 33, 128, 4, 2);
  check_rope(&k, r, 1, 40, 96, 4, 1);
  check_rope(&k, r, 3, 7, 64, 4, 4);
  /* The column sums: N=300 and 700, 5 and 11 chunks of 64 rows (more
   * than the 8 warps of the block that adds them up); OC=100 and 300
   * (the 2-byte path; 300: two groups of 256 columns), OC=264 (the
   * 128-bit path, two groups, the second with one lane's 8 columns). */
  check_colsum(&k, r, 300, 100);
  check_colsum(&k, r, 700, 300);
  check_colsum(&k, r, 700, 264);
  check_colsum(&k, r, 1, 33);
  /* Head sizes 32, 16, 128, 64 at T not a multiple of the 16-row block
   * nor of the 32-row tile; T=4 less than either. */
  /* In each attention mode (check_common.h's ATT_MODES), then tc-fused
   * outside deterministic mode: the one-kernel backward. */
  for (int m = 0; m <= ATT_MODES; m++) {
    kern_ctx *c = m < ATT_MODES ? &k : &knd;
    c->attention = m < ATT_MODES ? m : KERN_ATT_TC_FUSED;
    check_attention(c, r, 1, 77, 96, 3, false);
    check_attention(c, r, 1, 40, 64, 4, false);
    check_attention(c, r, 1, 33, 256, 2, false);
    check_attention(c, r, 2, 33, 128, 2, true);
    check_attention(c, r, 3, 4, 64, 4, false);
  }
  /* The tensor-core kernels' 64-row tiles: T=150 takes three, the last
   * part padding, with GPT-2's head size 64 and hs=48; T=300 five, so
   * that the pipelined loops reuse each of their two buffers. */
  k.attention = KERN_ATT_TC;
  knd.attention = KERN_ATT_TC_FUSED;
  for (kern_ctx *c : {&k, &knd}) {
    check_attention(c, r, 1, 150, 128, 2, true);
    check_attention(c, r, 1, 70, 96, 2, false);
    check_attention(c, r, 1, 300, 64, 1, false);
  }
  k.attention = KERN_ATT_TC_SYNC;
  check_attention(&k, r, 1, 150, 128, 2, true);
  k.attention = KERN_ATT_TC;
  /* The vector kernel (Vp % 8 == 0, aligned): GPT-2's row (a vector
   * across V, 6 or 7 vectors a thread), a row wider than the registers
   * hold (60008 > 7 * 1024 * 8: vectors read twice, V inside the last),
   * rows shorter than the block. The one-element kernel: Vp odd, and
   * Vp % 8 == 0 but the logits not 16-byte aligned. */
  check_classifier(&k, r, 2, 50257, 50304);
  check_classifier(&k, r, 2, 60001, 60008);
  check_classifier(&k, r, 5, 1000, 1024);
  check_classifier(&k, r, 3, 2000, 2048);
  check_classifier(&k, r, 2, 64, 64);
  check_classifier(&k, r, 3, 999, 1001);
  check_classifier(&k, r, 3, 1000, 1024, 1);
  check_classifier_errors(&k);
  check_vp_classifier(&k, r, 3, 1000, 1024, 2);
  check_vp_classifier(&k, r, 2, 100, 256, 4);
  for (optim_kind kind : {OPTIM_ADAMW, OPTIM_LION}) {
    check_optim(&k, r, kind, 1, 10007);
    check_optim(&k, r, kind, 0, 333);
  }
  check_shape_errors(&k);

  int emu = emu_errors();
  check("emulator: barriers, shuffles and launches as a GPU needs", emu == 0,
        emu ? "see EMU ERROR above" : "no errors");
  printf("kernels_emulated: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
