/*
 * kernels_emulated: the CUDA kernels of gpu/cuda (attention, layernorm,
 * classifier, misc, optim) run on the CPU, without a GPU, and compared
 * with the CPU engine's own ops, as tests/gpu/kernel_check.cu compares
 * them on a GPU (gpt_impl.h's gpt_cpu_*, optim.h's optim_step), at small
 * and odd shapes.
 *
 * The kernels' source is compiled as host C++ (xform.py rewrites their
 * launches and shared memory at build time, emu.h supplies threadIdx,
 * __syncthreads, shuffles, atomics and intrinsics), each CUDA thread an OS
 * thread. So this checks what the source says: indexing, bounds and
 * masks (the causal mask, rows past T, padding columns past V), formulas
 * and constants, grid-stride loops, the use of shared memory (poisoned
 * with NaN before every block, so reading an element no thread wrote
 * shows) and the placement of barriers (threads at different
 * __syncthreads, or a shuffle without all of its lanes, are reported by
 * the emulator and fail the test), and that each launch is one a GPU
 * accepts (block and grid sizes, dynamic shared memory limits).
 *
 * It does not check: GPU timing or performance, the GPU memory model
 * (a missing __threadfence or volatile, races the host's interleaving
 * does not happen to show), FMA contraction and the precision of the
 * GPU's fast math (host float arithmetic stands in, within the same
 * tolerances as kernel_check), anything cuBLASLt does (matmul_lt.cu is
 * not built here: its products need a GPU; its bias gradient's column
 * sums, kc_colsum in layernorm.cu, are checked), or gpt_cuda.cu.
 * tests/gpu/run.sh's kernel_check on a real GPU remains the test of
 * those.
 *
 * Prints one line per check; exits 0 when all pass, 1 otherwise.
 */
#include "emu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels_common.cuh"
extern "C" {
#include "gpt_impl.h"
#include "optim.h"
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

static int g_fail, g_pass;
static char g_err[512];
#define E g_err, sizeof g_err

/* ---- Random inputs (kernel_check's: splitmix64, Box-Muller) ---- */
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uni() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
  float normal() {
    double u1 = uni(), u2 = uni();
    if (u1 < 1e-300)
      u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
};

static float bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

static vecf randn(Rng &r, size_t n, float mean, float std, bool round) {
  vecf v(n);
  for (size_t i = 0; i < n; i++) {
    float x = mean + std * r.normal();
    v[i] = round ? bf16r(x) : x;
  }
  return v;
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

/* ---- Checks (kernel_check's) ---- */

/* max|emu - cpu| / max|cpu| <= tol; a non-finite value where the CPU
 * has a finite one fails (the NaN of poisoned shared memory). */
static void cmp(const std::string &what, const vecf &got, const vecf &want,
                double tol) {
  double md = 0.0, mc = 0.0;
  size_t worst = 0, bad = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); i++) {
    if (!std::isfinite(got[i]) && std::isfinite(want[i]))
      bad++;
    double d = fabs((double)got[i] - (double)want[i]);
    if (d > md) {
      md = d;
      worst = i;
    }
    mc = std::max(mc, fabs((double)want[i]));
  }
  double rel = mc > 0 ? md / mc : md;
  bool ok = got.size() == want.size() && bad == 0 && rel <= tol;
  printf("%s %-58s rel err %.2e (tol %.0e)", ok ? "PASS" : "FAIL", what.c_str(),
         rel, tol);
  if (bad)
    printf(" %zu non-finite", bad);
  if (!ok && md > 0)
    printf(" worst [%zu] emu %g cpu %g", worst, (double)got[worst],
           (double)want[worst]);
  printf("\n");
  ok ? g_pass++ : g_fail++;
}

static void check(const std::string &what, bool ok, const char *detail) {
  printf("%s %-58s %s\n", ok ? "PASS" : "FAIL", what.c_str(), detail);
  ok ? g_pass++ : g_fail++;
}

static bool same_bits(const vecf &a, const vecf &b) {
  return a.size() == b.size() &&
         memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
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

/* A launcher given bad input must return -1 with its name in err. */
static void expect_error(const std::string &what, int rc, const char *op) {
  bool ok = rc == -1 && strstr(g_err, op) != NULL;
  std::string detail = "-> " + std::to_string(rc) + ": " + g_err;
  check(what, ok, detail.c_str());
  g_err[0] = 0;
}

static std::string shape(const char *fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

static std::vector<uint32_t> to_u32(const std::vector<int> &v) {
  return std::vector<uint32_t>(v.begin(), v.end());
}

/* kernel_check's tolerances, with its reasons: one BF16 rounding is at
 * most 2e-3 of max|cpu| (1e-2: 5x room; a wrong index or formula gives
 * O(1)); BF16 results of sums with cancelling terms 2e-2; FP32 results
 * on the same inputs in another order 1e-4, over many rows 1e-3. */
static const double TOL_BF16 = 1e-2, TOL_PRODUCT = 2e-2, TOL_F32 = 1e-4,
                    TOL_F32_ROWS = 1e-3;

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
  /* Tokens from a small range: many repeats, as real text has. */
  std::vector<int> ids(N);
  for (size_t i = 0; i < N; i++)
    ids[i] = (int)(r.next() % (uint64_t)std::min(V, 13));
  ids[0] = V - 1;
  vecf wte = randn(r, (size_t)Vp * C, 0.0f, 0.02f, true);
  vecf wpe = randn(r, (size_t)T * C, 0.0f, 0.01f, true);
  std::string s = shape("B=%d T=%d C=%d", B, T, C);
  std::vector<uint32_t> u = to_u32(ids);

  vecf out_cpu(N * C);
  gpt_cpu_encoder_forward(out_cpu.data(), u.data(), wte.data(), wpe.data(), B,
                          T, C);
  vecx xwte = tox(wte), xwpe = tox(wpe), out(N * C);
  KR(kern_encoder_forward(k, out.data(), ids.data(), xwte.data(), xwpe.data(),
                          B, T, C, E));
  cmp("encoder_forward " + s, tof(out), out_cpu, TOL_BF16);

  vecf dout = randn(r, N * C, 0.0f, 1.0f, true);
  vecf gwte0 = randn(r, (size_t)Vp * C, 0.0f, 0.1f, false);
  vecf gwpe0 = randn(r, (size_t)T * C, 0.0f, 0.1f, false);
  vecf gwte = gwte0, gwpe = gwpe0;
  gpt_cpu_encoder_backward(gwte.data(), gwpe.data(), dout.data(), u.data(), B,
                           T, C);
  vecx xdout = tox(dout);
  vecf te = gwte0, pe = gwpe0;
  std::vector<char> scratch(kern_encoder_backward_scratch_bytes(B, T, C));
  KR(kern_encoder_backward(k, te.data(), pe.data(), scratch.data(),
                           xdout.data(), ids.data(), ids.data(), B, T, C, E));
  cmp("encoder_backward dwte (bucketed) " + s, te, gwte, TOL_F32);
  cmp("encoder_backward dwpe " + s, pe, gwpe, TOL_F32);
  vecf first = te;
  te = gwte0;
  pe = gwpe0;
  KR(kern_encoder_backward(k, te.data(), pe.data(), scratch.data(),
                           xdout.data(), ids.data(), ids.data(), B, T, C, E));
  check("encoder_backward deterministic " + s, same_bits(first, te),
        "two runs bitwise equal");
  te = gwte0;
  pe = gwpe0;
  KR(kern_encoder_backward(knd, te.data(), pe.data(), scratch.data(),
                           xdout.data(), ids.data(), NULL, B, T, C, E));
  cmp("encoder_backward dwte (atomic) " + s, te, gwte, TOL_F32);
  expect_error("encoder_backward refuses atomics in deterministic mode",
               kern_encoder_backward(k, te.data(), pe.data(), scratch.data(),
                                     xdout.data(), ids.data(), NULL, B, T, C,
                                     E),
               "kern_encoder_backward");
  expect_error("encoder_backward refuses host ids without scratch",
               kern_encoder_backward(k, te.data(), pe.data(), NULL,
                                     xdout.data(), ids.data(), ids.data(), B, T,
                                     C, E),
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
  vecf x = randn(r, n, 0.25f, 1.0f, false);
  double ss = 0.0, sum = 0.0, sabs = 0.0;
  for (size_t i = 0; i < n; i++) {
    ss += (double)x[i] * x[i];
    sum += x[i];
    sabs += fabs(x[i]);
  }
  vecf scratch(kern_norm_scratch_bytes(n, k->sm_count) / sizeof(float));
  float a = NAN, b = NAN, m = NAN;
  KR(kern_sum_squares(k, &a, scratch.data(), x.data(), n, E));
  KR(kern_sum_squares(k, &b, scratch.data(), x.data(), n, E));
  cmp("sum_squares " + s, vecf(1, a), vecf(1, (float)ss), TOL_F32);
  check("sum_squares deterministic " + s, memcmp(&a, &b, sizeof a) == 0,
        "two runs bitwise equal");
  KR(kern_mean(k, &m, scratch.data(), x.data(), n, E));
  /* The mean can be near 0: its error relative to mean |x|. */
  double d = fabs((double)m - sum / n) / (sabs / n);
  char buf[96];
  snprintf(buf, sizeof buf, "|emu-cpu| / mean|x| %.2e (tol %.0e)", d, TOL_F32);
  check("mean " + s, d <= TOL_F32, buf);
}

/* ---- layernorm.cu ---- */

static void check_layernorm(const kern_ctx *k, Rng &r, int N, int C) {
  std::string s = shape("N=%d C=%d", N, C);
  vecf x((size_t)N * C), x2 = randn(r, (size_t)N * C, 0.0f, 0.5f, true);
  for (int i = 0; i < N; i++) {
    float off = r.normal(), sc = 0.5f + 2.0f * (float)r.uni();
    for (int c = 0; c < C; c++)
      x[(size_t)i * C + c] = bf16r(off + sc * r.normal());
  }
  vecf w = randn(r, C, 1.0f, 0.1f, true), b = randn(r, C, 0.0f, 0.1f, true);
  vecf out_cpu((size_t)N * C), mean_cpu(N), rstd_cpu(N);
  gpt_cpu_layernorm(out_cpu.data(), mean_cpu.data(), rstd_cpu.data(), x.data(),
                    w.data(), b.data(), N, C);
  vecx xx = tox(x), xx2 = tox(x2), xw = tox(w), xb = tox(b);
  vecx out((size_t)N * C), res((size_t)N * C);
  vecf mean(N, NAN), rstd(N, NAN);
  KR(kern_layernorm_forward(k, out.data(), mean.data(), rstd.data(), xx.data(),
                            xw.data(), xb.data(), N, C, E));
  cmp("layernorm_forward out " + s, tof(out), out_cpu, TOL_BF16);
  cmp("layernorm_forward mean " + s, mean, mean_cpu, TOL_F32);
  cmp("layernorm_forward rstd " + s, rstd, rstd_cpu, TOL_F32);
  vecf out_first = tof(out);
  out.assign(out.size(), __float2bfloat16_rn(0.0f));
  KR(kern_layernorm_forward(k, out.data(), NULL, NULL, xx.data(), xw.data(),
                            xb.data(), N, C, E));
  check("layernorm_forward mean, rstd NULL " + s,
        same_bits(out_first, tof(out)), "same out");

  vecf rcpu((size_t)N * C), out2((size_t)N * C), m2(N), s2(N);
  for (size_t i = 0; i < rcpu.size(); i++)
    rcpu[i] = bf16r(x[i] + x2[i]);
  gpt_cpu_layernorm(out2.data(), m2.data(), s2.data(), rcpu.data(), w.data(),
                    b.data(), N, C);
  KR(kern_residual_layernorm_forward(k, res.data(), out.data(), mean.data(),
                                     rstd.data(), xx.data(), xx2.data(),
                                     xw.data(), xb.data(), N, C, E));
  cmp("residual_layernorm_forward residual " + s, tof(res), rcpu, TOL_BF16);
  cmp("residual_layernorm_forward out " + s, tof(out), out2, TOL_BF16);
  cmp("residual_layernorm_forward mean " + s, mean, m2, TOL_F32);
  cmp("residual_layernorm_forward rstd " + s, rstd, s2, TOL_F32);

  vecf dout = randn(r, (size_t)N * C, 0.0f, 1.0f, true);
  vecf dinp0 = randn(r, (size_t)N * C, 0.0f, 0.5f, true);
  vecf gw0 = randn(r, C, 0.0f, 1.0f, false),
       gb0 = randn(r, C, 0.0f, 1.0f, false);
  vecf dinp = dinp0, gw = gw0, gb = gb0;
  gpt_cpu_layernorm_backward(dinp.data(), gw.data(), gb.data(), dout.data(),
                             x.data(), w.data(), mean_cpu.data(),
                             rstd_cpu.data(), N, C);
  vecx xdout = tox(dout), xdinp = tox(dinp0);
  vecf ggw = gw0, ggb = gb0;
  vecf scratch(kern_layernorm_backward_scratch_bytes(N, C, k->sm_count) /
               sizeof(float));
  KR(kern_layernorm_backward(k, xdinp.data(), ggw.data(), ggb.data(),
                             scratch.data(), xdout.data(), xx.data(), xw.data(),
                             mean_cpu.data(), rstd_cpu.data(), N, C, E));
  cmp("layernorm_backward dinp " + s, tof(xdinp), dinp, TOL_PRODUCT);
  cmp("layernorm_backward dw " + s, ggw, gw, TOL_F32_ROWS);
  cmp("layernorm_backward db " + s, ggb, gb, TOL_F32_ROWS);
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
}

/* ---- attention.cu ---- */

/* The CPU's lse from its probabilities: lse_i = s_ij - log p_ij at the
 * row's largest p (kernel_check's cpu_lse). */
static vecf cpu_lse(const vecf &qkv, const vecf &att, int B, int T, int C,
                    int NH) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  vecf lse((size_t)B * NH * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float *a = att.data() + (((size_t)b * NH + h) * T + i) * T;
        int j = (int)(std::max_element(a, a + i + 1) - a);
        const float *q = qkv.data() + ((size_t)b * T + i) * 3 * C + h * hs;
        const float *kk = qkv.data() + ((size_t)b * T + j) * 3 * C + C + h * hs;
        double sc = 0.0;
        for (int d = 0; d < hs; d++)
          sc += (double)q[d] * kk[d];
        lse[((size_t)b * NH + h) * T + i] =
            (float)(sc * scale - log((double)a[j]));
      }
  return lse;
}

/* twice: run the backward pass again, which must give the same bits
 * (costly here: for one shape only). */
static void check_attention(const kern_ctx *k, Rng &r, int B, int T, int C,
                            int NH, bool twice) {
  /* k's attention_fp32 picks attention.cu's FP32 kernels or
   * attention_tc.cu's (head sizes that are multiples of 16). */
  std::string s = shape("B=%d T=%d C=%d NH=%d (hs=%d, %s)", B, T, C, NH,
                        C / NH,
                        k->attention_fp32 || (C / NH) % 16 ? "fp32"
                                                           : "tensor cores");
  const size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C;
  vecf qkv = randn(r, n3, 0.0f, 1.0f, true);
  vecf out_cpu(n), att((size_t)B * NH * T * T);
  gpt_cpu_attention_forward(out_cpu.data(), att.data(), qkv.data(), B, T, C,
                            NH);
  vecf lse_cpu = cpu_lse(qkv, att, B, T, C, NH);
  vecx xqkv = tox(qkv), out(n), dq(n3), dq2(n3);
  vecf lse((size_t)B * NH * T, NAN);
  KR(kern_attention_forward(k, out.data(), lse.data(), xqkv.data(), B, T, C, NH,
                            E));
  cmp("attention_forward out " + s, tof(out), out_cpu, TOL_BF16);
  cmp("attention_forward lse " + s, lse, lse_cpu, TOL_F32);

  vecf dout = randn(r, n, 0.0f, 1.0f, true), dqkv_cpu(n3);
  vecf datt((size_t)B * NH * T * T);
  gpt_cpu_attention_backward(dqkv_cpu.data(), datt.data(), dout.data(),
                             qkv.data(), att.data(), B, T, C, NH);
  vecx xdout = tox(dout);
  vecf scratch(kern_attention_backward_scratch_bytes(B, T, C, NH) /
               sizeof(float));
  KR(kern_attention_backward(k, dq.data(), scratch.data(), xdout.data(),
                             xqkv.data(), out.data(), lse.data(), B, T, C, NH,
                             E));
  vecf g = tof(dq);
  for (int part = 0; part < 3; part++) {
    static const char *names[] = {"dq", "dk", "dv"};
    vecf gp, cp;
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
      for (int c = 0; c < C; c++) {
        gp.push_back(g[bt * 3 * C + part * C + c]);
        cp.push_back(dqkv_cpu[bt * 3 * C + part * C + c]);
      }
    cmp(std::string("attention_backward ") + names[part] + " " + s, gp, cp,
        TOL_PRODUCT);
  }
  if (!twice)
    return;
  KR(kern_attention_backward(k, dq2.data(), scratch.data(), xdout.data(),
                             xqkv.data(), out.data(), lse.data(), B, T, C, NH,
                             E));
  check("attention_backward deterministic " + s, same_bits(g, tof(dq2)),
        "two runs bitwise equal");
}

/* ---- classifier.cu ---- */

static void check_classifier(const kern_ctx *k, Rng &r, int N, int V, int Vp) {
  std::string s = shape("N=%d V=%d Vp=%d", N, V, Vp);
  vecf logits = randn(r, (size_t)N * Vp, 0.0f, 2.0f, true);
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++)
      logits[(size_t)i * Vp + j] = 7.0f; /* padding: must be ignored */
  std::vector<int> tg(N);
  for (int i = 0; i < N; i++)
    tg[i] = (int)(r.next() % (uint64_t)V);
  tg[0] = V - 1;
  std::vector<uint32_t> u = to_u32(tg);
  vecf lse(N), losses(N), probs((size_t)N * Vp);
  gpt_cpu_crossentropy_forward(lse.data(), losses.data(), probs.data(),
                               logits.data(), u.data(), N, V, Vp);
  const float dloss = 1.0f / N;
  gpt_cpu_crossentropy_backward(probs.data(), u.data(), dloss, N, V, Vp);
  vecx xl = tox(logits);
  vecf got(N, NAN);
  KR(kern_fused_classifier(k, xl.data(), got.data(), tg.data(), 0.0f, N, V, Vp,
                           E));
  cmp("fused_classifier losses (dloss=0) " + s, got, losses, TOL_F32);
  check("fused_classifier dloss=0 leaves logits " + s,
        same_bits(tof(xl), logits), "bitwise unchanged");
  KR(kern_fused_classifier(k, xl.data(), got.data(), tg.data(), dloss, N, V, Vp,
                           E));
  vecf g = tof(xl);
  cmp("fused_classifier losses " + s, got, losses, TOL_F32);
  cmp("fused_classifier dlogits " + s, g, probs, TOL_BF16);
  bool pad0 = true;
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++)
      pad0 = pad0 && g[(size_t)i * Vp + j] == 0.0f;
  check("fused_classifier padding columns " + s, pad0, "all 0");
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
}

/* ---- optim.cu: against optim_step (kernel_check's check_optim) ---- */

static void check_optim(const kern_ctx *k, Rng &r, optim_kind kind, int decay,
                        size_t n) {
  const char *name = kind == OPTIM_ADAMW ? "adamw_update" : "lion_update";
  std::string s = shape("n=%zu decay=%d", n, decay);
  optim_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.kind = kind;
  cfg.beta1 = 0.9f;
  cfg.beta2 = kind == OPTIM_ADAMW ? 0.95f : 0.99f;
  cfg.eps = 1e-8f;
  cfg.weight_decay = kind == OPTIM_ADAMW ? 0.1f : 1.0f;
  optim_group gr = {0, n, decay};
  optim *o = NULL;
  char err[256];
  if (optim_create(&cfg, n, &gr, 1, &o, err, sizeof err)) {
    check(std::string(name) + " optim_create", false, err);
    return;
  }
  std::unique_ptr<optim, void (*)(optim *)> own(o, optim_destroy);
  const uint64_t t = 7; /* a step past the first: moments matter */
  const float lr = kind == OPTIM_ADAMW ? 6e-4f : 1e-4f, gscale = 0.5f;
  vecf p = randn(r, n, 0.0f, 0.05f, false), g = randn(r, n, 0.0f, 0.01f, false);
  vecf m = randn(r, n, 0.0f, 0.005f, false), v(n);
  for (size_t i = 0; i < n; i++)
    v[i] = 1e-5f * (float)r.uni();
  /* Lion's sign(0) = 0: some moments and gradients that cancel. */
  for (size_t i = 0; i < n; i += 97) {
    m[i] = 0.0f;
    g[i] = 0.0f;
  }
  vecf gs(n), pc = p;
  for (size_t i = 0; i < n; i++)
    gs[i] = g[i] * gscale;
  float *st = optim_state(o);
  memcpy(st, m.data(), n * sizeof(float));
  if (kind == OPTIM_ADAMW)
    memcpy(st + n, v.data(), n * sizeof(float));
  optim_set_t(o, t - 1);
  optim_step(o, pc.data(), gs.data(), lr);
  vecf mc(st, st + n),
      vc = kind == OPTIM_ADAMW ? vecf(st + n, st + 2 * n) : vecf();

  vecf pe = p, me = m, ve = v;
  vecx pb(n);
  const float wd = decay ? cfg.weight_decay : 0.0f;
  if (kind == OPTIM_ADAMW) {
    float c1 = (float)(1.0 - pow(optim_as_written(cfg.beta1), (double)t));
    float c2 = (float)(1.0 - pow(optim_as_written(cfg.beta2), (double)t));
    KR(kern_adamw_update(k, pe.data(), pb.data(), me.data(), ve.data(),
                         g.data(), n, lr, cfg.beta1, cfg.beta2, c1, c2, cfg.eps,
                         wd, gscale, E));
  } else {
    KR(kern_lion_update(k, pe.data(), pb.data(), me.data(), g.data(), n, lr,
                        cfg.beta1, cfg.beta2, wd, gscale, E));
  }
  /* kernel_check's tolerance: the change compared, not p; AdamW within
   * 1e-6 of the update plus 2 ulps of max|p| (its bias corrections
   * arrive rounded to float), Lion exact. */
  vecf dgot(n), dcpu(n);
  double pmax = 0.0, umax = 0.0;
  for (size_t i = 0; i < n; i++) {
    dgot[i] = pe[i] - p[i];
    dcpu[i] = pc[i] - p[i];
    pmax = std::max(pmax, (double)fabsf(pc[i]));
    umax = std::max(umax, (double)fabsf(dcpu[i]));
  }
  double tol = kind == OPTIM_ADAMW
                   ? 1e-6 + (umax > 0 ? 2.0 * pmax * ldexp(1.0, -23) / umax : 0)
                   : 0.0;
  cmp(std::string(name) + " update " + s, dgot, dcpu, tol);
  cmp(std::string(name) + " m " + s, me, mc, 0.0);
  if (kind == OPTIM_ADAMW)
    cmp(std::string(name) + " v " + s, ve, vc, 0.0);
  vecf want(n);
  for (size_t i = 0; i < n; i++)
    want[i] = bf16r(pe[i]);
  check(std::string(name) + " bf16 copy " + s, same_bits(tof(pb), want),
        "round to nearest even of master");
  if (kind == OPTIM_ADAMW)
    expect_error("adamw_update refuses b1_corr = 0 (step 0)",
                 kern_adamw_update(k, pe.data(), pb.data(), me.data(),
                                   ve.data(), g.data(), n, lr, 0.9f, 0.95f,
                                   0.0f, 0.1f, 1e-8f, 0.0f, 1.0f, E),
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
}

int main(void) {
  /* One SM: grids of at most 16 blocks (kc_grid), so the grid-stride
   * loops go round more than once at these small sizes. */
  kern_ctx k, knd;
  memset(&k, 0, sizeof k);
  k.sm_count = 1;
  k.deterministic = 1;
  knd = k;
  knd.deterministic = 0;
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
   * chunk of 128 rows in the column sums and more rows than 16 blocks of
   * 8 warps take in one round. */
  check_layernorm(&k, r, 37, 100);
  check_layernorm(&k, r, 21, 96);
  check_layernorm(&k, r, 300, 64);
  check_colsum(&k, r, 300, 100);
  check_colsum(&k, r, 1, 33);
  /* Head sizes 32, 16, 128, 64 at T not a multiple of the 16-row block
   * nor of the 32-row tile; T=4 less than either. */
  for (int fp32 = 0; fp32 < 2; fp32++) {
    k.attention_fp32 = fp32;
    check_attention(&k, r, 1, 77, 96, 3, false);
    check_attention(&k, r, 1, 40, 64, 4, false);
    check_attention(&k, r, 1, 33, 256, 2, false);
    check_attention(&k, r, 2, 33, 128, 2, true);
    check_attention(&k, r, 3, 4, 64, 4, false);
  }
  /* The tensor-core kernels' 64-row tiles: T=150 takes three, the last
   * part padding, with GPT-2's head size 64 and hs=48. */
  k.attention_fp32 = 0;
  check_attention(&k, r, 1, 150, 128, 2, true);
  check_attention(&k, r, 1, 70, 96, 2, false);
  check_classifier(&k, r, 5, 1000, 1024);
  check_classifier(&k, r, 3, 2000, 2048);
  check_classifier(&k, r, 2, 64, 64);
  check_classifier_errors(&k);
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
