/*
 * check_common.h: what tests/gpu/kernel_check.cu (the CUDA kernels on a
 * GPU) and tests/gpu/emu/kernels_emulated.cpp (the same kernels on the
 * CPU emulator) share: seeded random inputs, the comparison of a result
 * with the CPU engine's, the PASS/FAIL lines and their counts, the
 * tolerances with their reasons, and CPU reference computations both
 * compare against.
 *
 * Host-only C++17: no device code, no CUDA runtime call, only
 * cuda_bf16.h's host conversions; nvcc's host compiler and g++ both
 * compile it. Each program includes it once, from its one source file.
 *
 * The functions are templates on the host vector of float (Vec), since
 * the programs use different ones: kernel_check std::vector<float>, the
 * emulator a 64-byte aligned one. The program defines check_side, what
 * its FAIL lines call the side under test:
 *   extern const char check_side[] = "gpu";
 */
#ifndef DAGRUN_TESTS_GPU_CHECK_COMMON_H
#define DAGRUN_TESTS_GPU_CHECK_COMMON_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <cuda_bf16.h>

extern "C" {
#include "cpu/gpt_cpu.h"
#include "optim/optim.h"
}

extern const char check_side[];

static int g_fail, g_pass;
/* The launchers' error buffer: E passes it as their (err, errlen). */
static char g_err[512];
#define E g_err, sizeof g_err

/* ---- Random inputs (splitmix64, Box-Muller) ---- */

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

/* x rounded to nearest even BF16, back in float. */
static inline float bf16r(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

/* n values mean + std * N(0,1), rounded to BF16 (inputs of BF16 tensors)
 * or not. */
template <class Vec>
static Vec randn_as(Rng &r, size_t n, float mean, float std, bool round) {
  Vec v(n);
  for (size_t i = 0; i < n; i++) {
    float x = mean + std * r.normal();
    v[i] = round ? bf16r(x) : x;
  }
  return v;
}

/* ---- Checks ---- */

/* max|got - cpu| / max|cpu| <= tol; a non-finite value where the CPU has
 * a finite one fails (on the emulator: the NaN of poisoned shared
 * memory). */
template <class Vec>
static void cmp(const std::string &what, const Vec &got, const Vec &want,
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
    printf(" worst [%zu] %s %g cpu %g", worst, check_side, (double)got[worst],
           (double)want[worst]);
  printf("\n");
  ok ? g_pass++ : g_fail++;
}

static inline void check(const std::string &what, bool ok, const char *detail) {
  printf("%s %-58s %s\n", ok ? "PASS" : "FAIL", what.c_str(), detail);
  ok ? g_pass++ : g_fail++;
}

template <class Vec> static bool same_bits(const Vec &a, const Vec &b) {
  return a.size() == b.size() &&
         memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/* A launcher given bad input must return -1 with its name in err. */
static inline void expect_error(const std::string &what, int rc,
                                const char *op) {
  bool ok = rc == -1 && strstr(g_err, op) != NULL;
  std::string detail = "-> " + std::to_string(rc) + ": " + g_err;
  check(what, ok, detail.c_str());
  g_err[0] = 0;
}

static inline std::vector<uint32_t> to_u32(const std::vector<int> &v) {
  return std::vector<uint32_t>(v.begin(), v.end());
}

static inline std::string shape(const char *fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

/* Tolerances. BF16 output: one rounding (2^-9 relative, at most 2e-3 of
 * max|cpu|) plus FP32 differences, so 1e-2 leaves 5x room and still
 * catches any wrong index, scale or formula (those give O(1) errors).
 * Products (matmul, attention) get 2e-2: their BF16 outputs feed sums
 * whose terms cancel, so a small result can carry the rounding of large
 * terms. FP32 outputs on identical inputs differ only by the order of
 * FP32 sums: 1e-4 for sums of a few hundred terms, 1e-3 for sums over
 * many rows (cuBLASLt's dW: sums of N products, other blocking, FP32
 * accumulate; LayerNorm's dw, db and the bias gradient's column sums). */
static const double TOL_BF16 = 1e-2, TOL_PRODUCT = 2e-2, TOL_F32 = 1e-4,
                    TOL_F32_ROWS = 1e-3;

/* ---- CPU references ---- */

/* The reductions' input, n values around 0.25, and its sums in double:
 * of squares (ss), of the values (sum), of their magnitudes (sabs). */
template <class Vec> struct reduction_ref {
  Vec x;
  double ss, sum, sabs;
};

template <class Vec>
static reduction_ref<Vec> reduction_ref_make(Rng &r, size_t n) {
  reduction_ref<Vec> ref;
  ref.x = randn_as<Vec>(r, n, 0.25f, 1.0f, false);
  ref.ss = ref.sum = ref.sabs = 0.0;
  for (size_t i = 0; i < n; i++) {
    ref.ss += (double)ref.x[i] * ref.x[i];
    ref.sum += ref.x[i];
    ref.sabs += fabs(ref.x[i]);
  }
  return ref;
}

/* kern_mean's result against the double mean. The mean can be near 0:
 * its error relative to mean |x|. */
template <class Vec>
static void check_mean(const std::string &s, float got,
                       const reduction_ref<Vec> &ref) {
  size_t n = ref.x.size();
  double d = fabs((double)got - ref.sum / n) / (ref.sabs / n);
  char buf[96];
  snprintf(buf, sizeof buf, "|%s-cpu| / mean|x| %.2e (tol %.0e)", check_side, d,
           TOL_F32);
  check("mean " + s, d <= TOL_F32, buf);
}

/* The CPU's lse from its probabilities: lse_i = s_ij - log p_ij at the
 * row's largest p (>= 1/(i+1), so the log is accurate). */
template <class Vec>
static Vec cpu_lse(const Vec &qkv, const Vec &att, int B, int T, int C,
                   int NH) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  Vec lse((size_t)B * NH * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float *a = att.data() + (((size_t)b * NH + h) * T + i) * T;
        int j = (int)(std::max_element(a, a + i + 1) - a);
        const float *q = qkv.data() + ((size_t)b * T + i) * 3 * C + h * hs;
        const float *kk = qkv.data() + ((size_t)b * T + j) * 3 * C + C + h * hs;
        double s = 0.0;
        for (int d = 0; d < hs; d++)
          s += (double)q[d] * kk[d];
        lse[((size_t)b * NH + h) * T + i] =
            (float)(s * scale - log((double)a[j]));
      }
  return lse;
}

/* The encoder's inputs and the CPU's results: ids (B,T) drawn from the
 * first ntok tokens (many repeats, as real text has) and the last one,
 * V-1; wte (Vp,C), wpe (T,C); out (B,T,C). Backward: dout (B,T,C) and
 * gradients that already hold values (gwte0, gwpe0), which the CPU's
 * backward adds to (gwte, gwpe). */
template <class Vec> struct encoder_ref {
  std::vector<int> ids;
  Vec wte, wpe, out;
  Vec dout, gwte0, gwpe0, gwte, gwpe;
};

template <class Vec>
static encoder_ref<Vec> encoder_ref_make(Rng &r, int B, int T, int C, int V,
                                         int Vp, int ntok) {
  const size_t N = (size_t)B * T;
  encoder_ref<Vec> e;
  e.ids.resize(N);
  for (size_t i = 0; i < N; i++)
    e.ids[i] = (int)(r.next() % (uint64_t)std::min(V, ntok));
  e.ids[0] = V - 1;
  e.wte = randn_as<Vec>(r, (size_t)Vp * C, 0.0f, 0.02f, true);
  e.wpe = randn_as<Vec>(r, (size_t)T * C, 0.0f, 0.01f, true);
  std::vector<uint32_t> u = to_u32(e.ids);
  e.out.resize(N * C);
  gpt_cpu_encoder_forward(e.out.data(), u.data(), e.wte.data(), e.wpe.data(), B,
                          T, C);
  e.dout = randn_as<Vec>(r, N * C, 0.0f, 1.0f, true);
  e.gwte0 = randn_as<Vec>(r, (size_t)Vp * C, 0.0f, 0.1f, false);
  e.gwpe0 = randn_as<Vec>(r, (size_t)T * C, 0.0f, 0.1f, false);
  e.gwte = e.gwte0;
  e.gwpe = e.gwpe0;
  gpt_cpu_encoder_backward(e.gwte.data(), e.gwpe.data(), e.dout.data(),
                           u.data(), B, T, C);
  return e;
}

/* LayerNorm's inputs and the CPU's results. x (N,C): rows with an offset
 * and a scale of their own, as activations have; w, b (C). out (N,C),
 * mean, rstd (N). The fused residual: x2 (N,C), residual = BF16 of
 * x + x2 (res), LN(residual) (res_out, res_mean, res_rstd). Backward
 * from out's statistics, into gradients that already hold values (dinp0,
 * dw0, db0): dinp, dw, db. */
template <class Vec> struct layernorm_ref {
  Vec x, x2, w, b, out, mean, rstd;
  Vec res, res_out, res_mean, res_rstd;
  Vec dout, dinp0, dw0, db0, dinp, dw, db;
};

template <class Vec>
static layernorm_ref<Vec> layernorm_ref_make(Rng &r, int N, int C) {
  const size_t n = (size_t)N * C;
  layernorm_ref<Vec> l;
  l.x2 = randn_as<Vec>(r, n, 0.0f, 0.5f, true);
  l.x.resize(n);
  for (int i = 0; i < N; i++) {
    float off = r.normal(), sc = 0.5f + 2.0f * (float)r.uni();
    for (int c = 0; c < C; c++)
      l.x[(size_t)i * C + c] = bf16r(off + sc * r.normal());
  }
  l.w = randn_as<Vec>(r, C, 1.0f, 0.1f, true);
  l.b = randn_as<Vec>(r, C, 0.0f, 0.1f, true);
  l.out.resize(n);
  l.mean.resize(N);
  l.rstd.resize(N);
  gpt_cpu_layernorm(l.out.data(), l.mean.data(), l.rstd.data(), l.x.data(),
                    l.w.data(), l.b.data(), N, C);
  l.res.resize(n);
  for (size_t i = 0; i < n; i++)
    l.res[i] = bf16r(l.x[i] + l.x2[i]);
  l.res_out.resize(n);
  l.res_mean.resize(N);
  l.res_rstd.resize(N);
  gpt_cpu_layernorm(l.res_out.data(), l.res_mean.data(), l.res_rstd.data(),
                    l.res.data(), l.w.data(), l.b.data(), N, C);
  l.dout = randn_as<Vec>(r, n, 0.0f, 1.0f, true);
  l.dinp0 = randn_as<Vec>(r, n, 0.0f, 0.5f, true);
  l.dw0 = randn_as<Vec>(r, C, 0.0f, 1.0f, false);
  l.db0 = randn_as<Vec>(r, C, 0.0f, 1.0f, false);
  l.dinp = l.dinp0;
  l.dw = l.dw0;
  l.db = l.db0;
  gpt_cpu_layernorm_backward(l.dinp.data(), l.dw.data(), l.db.data(),
                             l.dout.data(), l.x.data(), l.w.data(),
                             l.mean.data(), l.rstd.data(), N, C);
  return l;
}

/* RMSNorm's (the Llama family's) inputs and the CPU's results
 * (llama_cpu.c): x (N,C) rows as layernorm_ref_make's, w (C), eps 1e-5;
 * out (N,C), rstd (N); the fused residual res = BF16 of x + x2 and its
 * RMSNorm (res_out, res_rstd); backward from out's rstd into gradients
 * that already hold values (dinp0, dw0): dinp, dw. */
template <class Vec> struct rmsnorm_ref {
  Vec x, x2, w, out, rstd, res, res_out, res_rstd;
  Vec dout, dinp0, dw0, dinp, dw;
};

static const float RMS_EPS = 1e-5f;

template <class Vec>
static rmsnorm_ref<Vec> rmsnorm_ref_make(Rng &r, int N, int C) {
  const size_t n = (size_t)N * C;
  layernorm_ref<Vec> l = layernorm_ref_make<Vec>(r, N, C);
  rmsnorm_ref<Vec> m;
  m.x = l.x, m.x2 = l.x2, m.w = l.w, m.res = l.res;
  m.out.resize(n), m.rstd.resize(N), m.res_out.resize(n), m.res_rstd.resize(N);
  llama_cpu_rmsnorm(m.out.data(), m.rstd.data(), m.x.data(), m.w.data(), N, C,
                    RMS_EPS);
  llama_cpu_rmsnorm(m.res_out.data(), m.res_rstd.data(), m.res.data(),
                    m.w.data(), N, C, RMS_EPS);
  m.dout = l.dout, m.dinp0 = l.dinp0, m.dw0 = l.dw0;
  m.dinp = m.dinp0, m.dw = m.dw0;
  llama_cpu_rmsnorm_backward(m.dinp.data(), m.dw.data(), m.dout.data(),
                             m.x.data(), m.w.data(), m.rstd.data(), N, C);
  return m;
}

/* SwiGLU's: gu (N,2I), each row the gate's I values then the up's;
 * hid (N,I) = silu(gate) * up; backward from dhid (N,I): dgu (N,2I). */
template <class Vec> struct swiglu_ref { Vec gu, hid, dhid, dgu; };

template <class Vec>
static swiglu_ref<Vec> swiglu_ref_make(Rng &r, int N, int I) {
  const size_t n = (size_t)N * I;
  swiglu_ref<Vec> s;
  s.gu = randn_as<Vec>(r, 2 * n, 0.0f, 2.0f, true);
  s.dhid = randn_as<Vec>(r, n, 0.0f, 1.0f, true);
  Vec gate(n), up(n), dgate(n), dup(n);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < I; c++) {
      gate[(size_t)i * I + c] = s.gu[(size_t)i * 2 * I + c];
      up[(size_t)i * I + c] = s.gu[(size_t)i * 2 * I + I + c];
    }
  s.hid.resize(n);
  llama_cpu_swiglu(s.hid.data(), gate.data(), up.data(), n);
  llama_cpu_swiglu_backward(dgate.data(), dup.data(), s.dhid.data(),
                            gate.data(), up.data(), n);
  s.dgu.resize(2 * n);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < I; c++) {
      s.dgu[(size_t)i * 2 * I + c] = dgate[(size_t)i * I + c];
      s.dgu[(size_t)i * 2 * I + I + c] = dup[(size_t)i * I + c];
    }
  return s;
}

/* RoPE and GQA's layout step: qkv_kv (B,T,C+2KVD) and the tables cs, sn
 * (T,hs/2) of theta 10000 -> qkv (B,T,3C): q and k turned by
 * llama_cpu_rope, key/value head h / (NH/KV) given to query head h.
 * Backward from dqkv (B,T,3C): dqkv_kv, dk and dv summed over each
 * key/value head's query heads, then dq and dk turned back. */
template <class Vec> struct rope_ref {
  Vec qkv_kv, cs, sn, qkv, dqkv, dqkv_kv;
};

template <class Vec>
static rope_ref<Vec> rope_ref_make(Rng &r, int B, int T, int C, int NH,
                                   int KV) {
  const int hs = C / NH, KVD = KV * hs, G = NH / KV, W = C + 2 * KVD;
  const size_t N = (size_t)B * T;
  rope_ref<Vec> p;
  p.qkv_kv = randn_as<Vec>(r, N * W, 0.0f, 1.0f, true);
  p.cs.resize((size_t)T * hs / 2), p.sn.resize((size_t)T * hs / 2);
  llama_cpu_rope_tables(p.cs.data(), p.sn.data(), 0, T, hs, 10000.0);
  Vec q(N * C), k(N * KVD);
  for (size_t i = 0; i < N; i++) {
    std::copy_n(&p.qkv_kv[i * W], C, &q[i * C]);
    std::copy_n(&p.qkv_kv[i * W + C], KVD, &k[i * KVD]);
  }
  llama_cpu_rope(q.data(), p.cs.data(), p.sn.data(), B, T, NH, hs, 1);
  llama_cpu_rope(k.data(), p.cs.data(), p.sn.data(), B, T, KV, hs, 1);
  p.qkv.resize(N * 3 * C);
  for (size_t i = 0; i < N; i++)
    for (int h = 0; h < NH; h++)
      for (int d = 0; d < hs; d++) {
        size_t o = i * 3 * C + (size_t)h * hs + d, kv = (size_t)(h / G) * hs;
        p.qkv[o] = q[i * C + (size_t)h * hs + d];
        p.qkv[o + C] = k[i * KVD + kv + d];
        p.qkv[o + 2 * C] = p.qkv_kv[i * W + C + KVD + kv + d];
      }
  p.dqkv = randn_as<Vec>(r, N * 3 * C, 0.0f, 1.0f, true);
  Vec dq(N * C), dk(N * KVD, 0.0f), dv(N * KVD, 0.0f);
  for (size_t i = 0; i < N; i++)
    for (int h = 0; h < NH; h++)
      for (int d = 0; d < hs; d++) {
        size_t o = i * 3 * C + (size_t)h * hs + d;
        size_t kv = i * KVD + (size_t)(h / G) * hs + d;
        dq[i * C + (size_t)h * hs + d] = p.dqkv[o];
        dk[kv] += p.dqkv[o + C];
        dv[kv] += p.dqkv[o + 2 * C];
      }
  llama_cpu_rope(dq.data(), p.cs.data(), p.sn.data(), B, T, NH, hs, -1);
  llama_cpu_rope(dk.data(), p.cs.data(), p.sn.data(), B, T, KV, hs, -1);
  p.dqkv_kv.resize(N * W);
  for (size_t i = 0; i < N; i++) {
    std::copy_n(&dq[i * C], C, &p.dqkv_kv[i * W]);
    std::copy_n(&dk[i * KVD], KVD, &p.dqkv_kv[i * W + C]);
    std::copy_n(&dv[i * KVD], KVD, &p.dqkv_kv[i * W + C + KVD]);
  }
  return p;
}

/* Attention's inputs and the CPU's results: qkv (B,T,3C); out (B,T,C),
 * the probabilities att (B,NH,T,T) and from them lse (B,NH,T); backward
 * from dout (B,T,C): dqkv (B,T,3C). */
template <class Vec> struct attention_ref {
  Vec qkv, out, att, lse, dout, dqkv;
};

template <class Vec>
static attention_ref<Vec> attention_ref_make(Rng &r, int B, int T, int C,
                                             int NH) {
  const size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C;
  attention_ref<Vec> a;
  a.qkv = randn_as<Vec>(r, n3, 0.0f, 1.0f, true);
  a.out.resize(n);
  a.att.resize((size_t)B * NH * T * T);
  gpt_cpu_attention_forward(a.out.data(), a.att.data(), a.qkv.data(), B, T, C,
                            NH);
  a.lse = cpu_lse(a.qkv, a.att, B, T, C, NH);
  a.dout = randn_as<Vec>(r, n, 0.0f, 1.0f, true);
  a.dqkv.resize(n3);
  Vec datt((size_t)B * NH * T * T);
  gpt_cpu_attention_backward(a.dqkv.data(), datt.data(), a.dout.data(),
                             a.qkv.data(), a.att.data(), B, T, C, NH);
  return a;
}

/* The attention kernels the checks run: each kern_attention (in its
 * order, named as below), tc-fused outside deterministic mode (the
 * one-kernel backward: contexts of both kinds are needed). */
enum { ATT_MODES = 4, ATT_MODE_CUDNN = 4 /* KERN_ATT_CUDNN */ };
static const char *const att_mode_names[ATT_MODES + 1] = {
    "tensor cores", "tensor cores, tc-fused", "tensor cores, tc-sync", "fp32",
    "cuDNN"};

/* The label of an attention check: its shape and which kernels k (a
 * kern_ctx, whose header this one does not include) runs it on; head
 * sizes that are not multiples of 16 always run on the FP32 ones. */
template <class Ctx>
static inline std::string attention_shape(int B, int T, int C, int NH,
                                          const Ctx *k) {
  const int m = k->attention == ATT_MODE_CUDNN ? ATT_MODE_CUDNN
                : (C / NH) % 16                ? ATT_MODES - 1
                                               : k->attention;
  return shape("B=%d T=%d C=%d NH=%d (hs=%d, %s%s)", B, T, C, NH, C / NH,
               att_mode_names[m],
               m == 1 && !k->deterministic ? ", one-kernel backward" : "");
}

/* Compares dqkv (B,T,3C) with the CPU's, each of dq, dk, dv separately:
 * their scales differ. */
template <class Vec>
static void cmp_dqkv(const std::string &s, const Vec &g, const Vec &dqkv_cpu,
                     int B, int T, int C) {
  for (int part = 0; part < 3; part++) {
    static const char *names[] = {"dq", "dk", "dv"};
    Vec gp, cp;
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
      for (int c = 0; c < C; c++) {
        gp.push_back(g[bt * 3 * C + part * C + c]);
        cp.push_back(dqkv_cpu[bt * 3 * C + part * C + c]);
      }
    cmp(std::string("attention_backward ") + names[part] + " " + s, gp, cp,
        TOL_PRODUCT);
  }
}

/* The fused classifier's inputs and the CPU's results on them: logits
 * (N,Vp) with padding columns past V that must be ignored, targets (one
 * of them V-1), and the CPU's losses and dlogits (probs) for dloss = 1/N. */
template <class Vec> struct classifier_ref {
  Vec logits, lse, losses, probs;
  std::vector<int> tg;
  float dloss;
};

template <class Vec>
static classifier_ref<Vec> classifier_ref_make(Rng &r, int N, int V, int Vp) {
  classifier_ref<Vec> c;
  c.logits = randn_as<Vec>(r, (size_t)N * Vp, 0.0f, 2.0f, true);
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++)
      c.logits[(size_t)i * Vp + j] = 7.0f; /* padding: must be ignored */
  c.tg.resize(N);
  for (int i = 0; i < N; i++)
    c.tg[i] = (int)(r.next() % (uint64_t)V);
  c.tg[0] = V - 1;
  std::vector<uint32_t> u = to_u32(c.tg);
  c.lse.resize(N);
  c.losses.resize(N);
  c.probs.resize((size_t)N * Vp);
  gpt_cpu_crossentropy_forward(c.lse.data(), c.losses.data(), c.probs.data(),
                               c.logits.data(), u.data(), N, V, Vp);
  c.dloss = 1.0f / N;
  gpt_cpu_crossentropy_backward(c.probs.data(), u.data(), c.dloss, N, V, Vp);
  return c;
}

/* dlogits (N,Vp) against the CPU's; the padding columns past V must
 * come out 0. */
template <class Vec>
static void cmp_dlogits(const std::string &s, const Vec &g, const Vec &probs,
                        int N, int V, int Vp) {
  cmp("fused_classifier dlogits " + s, g, probs, TOL_BF16);
  bool pad0 = true;
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++)
      pad0 = pad0 && g[(size_t)i * Vp + j] == 0.0f;
  check("fused_classifier padding columns " + s, pad0, "all 0");
}

/* The optimizers' setting: AdamW and Lion with their usual constants, at
 * a step past the first (t = 7: the moments matter); c1, c2: AdamW's bias
 * corrections at t, as a caller passes them to kern_adamw_update. */
struct optim_case {
  optim_config cfg;
  uint64_t t;
  float lr, gscale, c1, c2;
};

static inline optim_case optim_case_make(optim_kind kind) {
  optim_case oc;
  memset(&oc, 0, sizeof oc);
  oc.cfg.kind = kind;
  oc.cfg.beta1 = 0.9f;
  oc.cfg.beta2 = kind == OPTIM_ADAMW ? 0.95f : 0.99f;
  oc.cfg.eps = 1e-8f;
  oc.cfg.weight_decay = kind == OPTIM_ADAMW ? 0.1f : 1.0f;
  oc.t = 7;
  oc.lr = kind == OPTIM_ADAMW ? 6e-4f : 1e-4f;
  oc.gscale = 0.5f;
  oc.c1 = (float)(1.0 - pow(optim_as_written(oc.cfg.beta1), (double)oc.t));
  oc.c2 = (float)(1.0 - pow(optim_as_written(oc.cfg.beta2), (double)oc.t));
  return oc;
}

typedef std::unique_ptr<optim, void (*)(optim *)> optim_ptr;

/* An optimizer for oc.cfg over n values, one group with or without weight
 * decay; on failure empty, with the message in err. */
static inline optim_ptr optim_case_create(const optim_case &oc, size_t n,
                                          int decay, char *err, size_t errlen) {
  optim_group gr = {0, n, decay};
  optim *o = NULL;
  if (optim_create(&oc.cfg, n, &gr, 1, &o, err, errlen))
    o = NULL;
  return optim_ptr(o, optim_destroy);
}

/* An optimizer's state at step t-1, masters p, gradients g (unscaled),
 * moments m, v (n each); and after optim_step at t: pc, mc, vc (vc empty
 * for Lion). */
template <class Vec> struct optim_ref { Vec p, g, m, v, pc, mc, vc; };

template <class Vec> static optim_ref<Vec> optim_ref_inputs(Rng &r, size_t n) {
  optim_ref<Vec> o;
  o.p = randn_as<Vec>(r, n, 0.0f, 0.05f, false);
  o.g = randn_as<Vec>(r, n, 0.0f, 0.01f, false);
  o.m = randn_as<Vec>(r, n, 0.0f, 0.005f, false);
  o.v.resize(n);
  for (size_t i = 0; i < n; i++)
    o.v[i] = 1e-5f * (float)r.uni();
  return o;
}

/* optim_step on o (made from oc.cfg for n = p.size()) from ref's state:
 * the gradients pre-scaled by gscale (the kernels scale inside). */
template <class Vec>
static void optim_ref_step(optim *o, const optim_case &oc,
                           optim_ref<Vec> &ref) {
  const size_t n = ref.p.size();
  const bool adamw = oc.cfg.kind == OPTIM_ADAMW;
  Vec gs(n);
  ref.pc = ref.p;
  for (size_t i = 0; i < n; i++)
    gs[i] = ref.g[i] * oc.gscale;
  float *st = optim_state(o);
  memcpy(st, ref.m.data(), n * sizeof(float));
  if (adamw)
    memcpy(st + n, ref.v.data(), n * sizeof(float));
  optim_set_t(o, oc.t - 1);
  optim_step(o, ref.pc.data(), gs.data(), oc.lr);
  ref.mc = Vec(st, st + n);
  ref.vc = adamw ? Vec(st + n, st + 2 * n) : Vec();
}

/* An optimizer's update of the masters p (to got) against optim_step's
 * (to cpu). The update is ~lr of p: compare the change, not p, so that
 * the tolerance means something. AdamW: the bias corrections arrive
 * rounded to float (1 ulp of the step size, 1e-7), so 1e-6 of the update;
 * and that 1e-7 of the update can move the new master across a rounding
 * boundary, 1 ulp of p (up to max|p| 2^-23), which measured against the
 * largest update of a few thousand values (~1e-2) is itself ~1e-6: so 2
 * such ulps are allowed on top. A wrong formula or constant is off by far
 * more (>= 1e-3 of the update). Lion: the same IEEE-rounded operations
 * on both sides, exact. */
template <class Vec>
static void cmp_update(const std::string &what, const Vec &p, const Vec &got,
                       const Vec &cpu, bool adamw) {
  size_t n = p.size();
  Vec dgot(n), dcpu(n);
  double pmax = 0.0, umax = 0.0;
  for (size_t i = 0; i < n; i++) {
    dgot[i] = got[i] - p[i];
    dcpu[i] = cpu[i] - p[i];
    pmax = std::max(pmax, (double)fabsf(cpu[i]));
    umax = std::max(umax, (double)fabsf(dcpu[i]));
  }
  double tol =
      adamw ? 1e-6 + (umax > 0 ? 2.0 * pmax * ldexp(1.0, -23) / umax : 0) : 0.0;
  cmp(what, dgot, dcpu, tol);
}

#endif
