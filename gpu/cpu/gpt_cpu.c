/*
 * gpt_cpu: the CPU backend of the GPT-2 model (gpu/model/gpt.h): forward
 * and backward by hand in fp32, matrix products through OpenBLAS's
 * cblas_sgemm, the rest in OpenMP loops.
 *
 * Determinism: every sum over the B*T positions (weight and bias
 * gradients, embedding gradients) is either one sgemm or a loop in which
 * each thread owns a fixed range of output columns and adds the rows in
 * order; no float is accumulated by two threads. With the same thread
 * count, the same inputs give the same bits.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_impl.h"
#include "gpt_cpu.h"
#include "model/gpt.h"
#include "model/gpt_impl.h"

#define LN_EPS 1e-5f

/*
 * Threads. OpenBLAS keeps its own thread pool; run beside OpenMP's on the
 * same cores, the two pools spin against each other. So during a pass
 * OpenBLAS is held to one thread and every product is cut by the OpenMP
 * threads into blocks of rows (or columns) of C, one sgemm each. Each
 * element of C is computed by one thread, whole, in an order that depends
 * only on the thread count: deterministic.
 */
static int blas_threads_begin(void) {
  int n = openblas_get_num_threads();
  openblas_set_num_threads(1);
  return n;
}
static void blas_threads_end(int n) { openblas_set_num_threads(n); }

/* C (M,N) = alpha op(A) op(B) + beta C, row-major, cut over the larger of
 * M and N among the OpenMP threads. */
static void gemm_fp32(int ta, int tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc) {
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
  int nt = omp_get_max_threads();
  if (nt <= 1 || (double)M * N * K < 1 << 18) {
    cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
    return;
  }
  int by_rows = M >= N;
  int D = by_rows ? M : N;
  int chunk = (D + nt - 1) / nt;
  chunk = (chunk + 15) / 16 * 16;
#pragma omp parallel for schedule(static, 1)
  for (int i = 0; i < nt; i++) {
    int d0 = i * chunk, d1 = d0 + chunk < D ? d0 + chunk : D;
    if (d0 >= d1)
      continue;
    if (by_rows) {
      /* rows d0..d1 of C: of op(A), rows of A or its columns */
      const float *a = ta ? A + d0 : A + (size_t)d0 * lda;
      cblas_sgemm(CblasRowMajor, TA, TB, d1 - d0, N, K, alpha, a, lda, B, ldb,
                  beta, C + (size_t)d0 * ldc, ldc);
    } else {
      /* columns d0..d1 of C: of op(B), columns of B or its rows */
      const float *b = tb ? B + (size_t)d0 * ldb : B + d0;
      cblas_sgemm(CblasRowMajor, TA, TB, M, d1 - d0, K, alpha, A, lda, b, ldb,
                  beta, C + d0, ldc);
    }
  }
}

/* gpt_set_autocast's BF16 for the pass this thread is in: gpt_forward
 * and gpt_backward set it around their pass, and gemm reads it on the
 * calling thread, before its own threads start. Thread-local, so that
 * models in other threads keep their own. */
static _Thread_local int pass_bf16;

/* x rounded to the nearest bfloat16 (ties to even), as an fp32; a NaN
 * stays a NaN, and a finite value past bf16's largest becomes inf, as a
 * conversion to bf16 makes it. */
static inline float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u)
    u = (u & 0xffff0000u) | ((u & 0x007fffffu) ? 0x00400000u : 0);
  else
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* rows x cols of X (leading dimension ld), rounded to bf16, into a new
 * array of leading dimension cols. Out of memory aborts: a pass cannot
 * fail halfway, and an fp32 product in its place would be silent. */
static float *bf16_copy(const float *X, int rows, int cols, int ld) {
  float *y = malloc((size_t)rows * cols * sizeof(float) + 1);
  if (!y) {
    fprintf(stderr, "gpt: out of memory for a bf16 operand (%d x %d)\n", rows,
            cols);
    abort();
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++)
      y[(size_t)i * cols + j] = bf16_round(X[(size_t)i * ld + j]);
  return y;
}

/* gemm_fp32, with BF16 autocast on its operands rounded first. */
static void gemm(int ta, int tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc) {
  if (!pass_bf16) {
    gemm_fp32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  /* op(A) is M x K: A is M x K, or K x M when transposed; B likewise. */
  int ac = ta ? M : K, bc = tb ? K : N;
  float *a = bf16_copy(A, ta ? K : M, ac, lda);
  float *b = bf16_copy(B, tb ? N : K, bc, ldb);
  gemm_fp32(ta, tb, M, N, K, alpha, a, ac, b, bc, beta, C, ldc);
  free(a);
  free(b);
}

void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
int cpu_blas_threads_begin(void) { return blas_threads_begin(); }
void cpu_blas_threads_end(int n) { blas_threads_end(n); }

/* ---------------------------------------------------------------------
 * Activations: one allocation carved for (B,T). Per layer (all kept for
 * the backward pass):
 *   ln1 (B,T,C)  ln1_mean (B,T)  ln1_rstd (B,T)  qkv (B,T,3C)
 *   att (B,NH,T,T)  atty (B,T,C)  res2 (B,T,C)
 *   ln2 (B,T,C)  ln2_mean (B,T)  ln2_rstd (B,T)
 *   fch (B,T,4C)  fch_gelu (B,T,4C)  res3 (B,T,C)
 * then encoded (B,T,C), lnf (B,T,C), lnf_mean, lnf_rstd (B,T),
 * logits (B,T,Vp), lse (B,T) (log-sum-exp of each row over [0,V)),
 * losses (B,T), and the backward scratch (one layer at a time):
 *   dres (B,T,C)  dbuf (B,T,C)  dqkv (B,T,3C)  d4c (B,T,4C)
 *   datt (B,NH,T,T)  dlogits (B,T,Vp) (the forward's probabilities
 *   until the backward turns them into the logits' gradient)
 * With recomputation (gpt_set_recompute) the layers keep less and one
 * shared block, after the backward scratch, holds the rest:
 *   GELU:  a layer keeps all but fch_gelu; the block is one fch_gelu
 *          (B,T,4C), which each layer's forward and backward fill.
 *   BLOCK: a layer keeps res3 alone (the next layer's input); the block
 *          is one layer's other activations, which the forward fills
 *          layer after layer and the backward refills for each layer
 *          from its input (the last layer's are still there).
 * --------------------------------------------------------------------- */
typedef struct layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *res2;
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
} layer_acts;

typedef struct acts {
  gpt_recompute rc;
  float *layers; /* base of layer 0 */
  size_t layer_size;
  float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *lse, *losses;
  float *dres, *dbuf, *dqkv, *d4c, *datt, *dlogits;
  float *shared; /* recomputation's block (NULL without) */
} acts;

static size_t layer_floats(size_t BT, size_t C, size_t NH, size_t B, size_t T) {
  return BT * C * 5 + BT * 4 + BT * 3 * C + B * NH * T * T + BT * 4 * C * 2;
}

/* The floats a layer keeps and the shared block's under rc. */
static void layer_split(gpt_recompute rc, size_t BT, size_t C, size_t NH,
                        size_t B, size_t T, size_t *kept, size_t *shared) {
  size_t all = layer_floats(BT, C, NH, B, T);
  size_t part = rc == GPT_RECOMPUTE_GELU ? BT * 4 * C : all - BT * C;
  *shared = rc == GPT_RECOMPUTE_NONE ? 0 : part;
  *kept = all - *shared;
}

/* Carves m->acts (which must hold acts_floats()) for (B,T) under rc,
 * with the activations of nl layers (a pipeline stage's, or all);
 * with base NULL only counts. Returns the floats used. */
static size_t carve(const gpt_config *cfg, gpt_recompute rc, int nl,
                    float *base, int B, int T, acts *a) {
  size_t C = cfg->n_embd, NH = cfg->n_head, Vp = cfg->padded_vocab;
  size_t BT = (size_t)B * T, L = (size_t)nl;
  size_t off = 0, shared;
  a->rc = rc;
#define TAKE(field, n)                                                         \
  do {                                                                         \
    if (base)                                                                  \
      a->field = base + off;                                                   \
    off += (n);                                                                \
  } while (0)
  TAKE(layers, 0);
  layer_split(rc, BT, C, NH, (size_t)B, (size_t)T, &a->layer_size, &shared);
  off += L * a->layer_size;
  TAKE(encoded, BT * C);
  TAKE(lnf, BT * C);
  TAKE(lnf_mean, BT);
  TAKE(lnf_rstd, BT);
  TAKE(logits, BT * Vp);
  TAKE(lse, BT);
  TAKE(losses, BT);
  TAKE(dres, BT * C);
  TAKE(dbuf, BT * C);
  TAKE(dqkv, BT * 3 * C);
  TAKE(d4c, BT * 4 * C);
  TAKE(datt, (size_t)B * NH * T * T);
  TAKE(dlogits, BT * Vp);
  a->shared = NULL;
  if (shared)
    TAKE(shared, shared);
#undef TAKE
  return off;
}

/* Bytes of the activations, backward scratch and input/target id copies
 * that a forward at (B,T) makes ensure_acts allocate, counted without
 * allocating. */
static uint64_t act_bytes(const gpt_config *cfg, gpt_recompute rc, int B,
                          int T) {
  acts a;
  size_t nids = (size_t)B * T;
  size_t floats = cfg->family == GPT_FAMILY_LLAMA
                      ? llama_cpu_act_floats(cfg, rc, B, T)
                      : carve(cfg, rc, cfg->n_layer, NULL, B, T, &a);
  return (uint64_t)floats * sizeof(float) +
         2 * (uint64_t)nids * sizeof(uint32_t);
}

/* Here, not in gpt.c: the activations are this backend's layout (carve
 * above), and the model layer calls no backend. */
void gpt_memory_estimate(const gpt_config *cfg, int B, int T,
                         int optim_floats_per_param, gpt_recompute rc,
                         gpt_memory *out) {
  uint64_t n = gpt_config_num_params(cfg);
  out->params = out->grads = n * sizeof(float);
  out->optim = n * (uint64_t)optim_floats_per_param * sizeof(float);
  out->acts = act_bytes(cfg, rc, B, T);
  out->total = out->params + out->grads + out->optim + out->acts;
}

/* Layer l's activations: its own, and under recomputation the shared
 * block's for what it does not keep. */
static layer_acts layer_at(const gpt *m, const acts *a, int l, int B, int T) {
  size_t C = m->cfg.n_embd, NH = m->cfg.n_head, BT = (size_t)B * T;
  float *own = a->layers + (size_t)(l - m->stage_first) * a->layer_size;
  float *p = a->rc == GPT_RECOMPUTE_BLOCK ? a->shared : own;
  layer_acts la;
#define TAKE(field, n)                                                         \
  do {                                                                         \
    la.field = p;                                                              \
    p += (n);                                                                  \
  } while (0)
  TAKE(ln1, BT * C);
  TAKE(ln1_mean, BT);
  TAKE(ln1_rstd, BT);
  TAKE(qkv, BT * 3 * C);
  TAKE(att, (size_t)B * NH * T * T);
  TAKE(atty, BT * C);
  TAKE(res2, BT * C);
  TAKE(ln2, BT * C);
  TAKE(ln2_mean, BT);
  TAKE(ln2_rstd, BT);
  TAKE(fch, BT * 4 * C);
  if (a->rc == GPT_RECOMPUTE_GELU)
    la.fch_gelu = a->shared;
  else
    TAKE(fch_gelu, BT * 4 * C);
  if (a->rc == GPT_RECOMPUTE_BLOCK)
    la.res3 = own;
  else
    TAKE(res3, BT * C);
#undef TAKE
  return la;
}

/* ---------------------------------------------------------------------
 * Kernels.
 * --------------------------------------------------------------------- */

/* ids (B,T), wte (Vp,C), wpe (T,C) -> out (B,T,C) */
static void encoder_forward(float *out, const uint32_t *ids, const float *wte,
                            const float *wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    const float *we = wte + (size_t)ids[bt] * C;
    const float *pe = wpe + (size_t)(bt % T) * C;
    float *o = out + (size_t)bt * C;
    for (int c = 0; c < C; c++)
      o[c] = we[c] + pe[c];
  }
}

/* dout (B,T,C) -> dwte (Vp,C) += at ids, dwpe (T,C) += summed over B.
 * Each thread owns a range of channels and walks the positions in order,
 * so a token repeated in the batch is added in a fixed order. */
static void encoder_backward(float *dwte, float *dwpe, const float *dout,
                             const uint32_t *ids, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += 16) {
    int c1 = c0 + 16 < C ? c0 + 16 : C;
    for (int bt = 0; bt < B * T; bt++) {
      const float *d = dout + (size_t)bt * C;
      float *we = dwte + (size_t)ids[bt] * C;
      for (int c = c0; c < c1; c++)
        we[c] += d[c];
    }
  }
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float *pe = dwpe + (size_t)t * C;
    for (int b = 0; b < B; b++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; c++)
        pe[c] += d[c];
    }
  }
}

/* inp (N,C), w (C), b (C) -> out (N,C), mean (N), rstd (N); see
 * gpt_cpu.h. */
void gpt_cpu_layernorm(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++)
      m += x[c];
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
      float d = x[c] - m;
      v += d * d;
    }
    v /= C;
    float s = 1.0f / sqrtf(v + LN_EPS);
    float *o = out + (size_t)i * C;
    for (int c = 0; c < C; c++)
      o[c] = (x[c] - m) * s * w[c] + b[c];
    if (mean)
      mean[i] = m;
    if (rstd)
      rstd[i] = s;
  }
}

/* dout (N,C), inp (N,C), mean, rstd (N), w (C) -> dinp (N,C) +=,
 * dw (C) +=, db (C) += */
static void layernorm_backward(float *dinp, float *dw, float *db,
                               const float *dout, const float *inp,
                               const float *w, const float *mean,
                               const float *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *d = dout + (size_t)i * C, *x = inp + (size_t)i * C;
    float m = mean[i], s = rstd[i];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = 0; c < C; c++) {
      float dn = w[c] * d[c];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * (x[c] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    float *di = dinp + (size_t)i * C;
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s;
      di[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  /* Weight and bias: each thread owns a range of channels. */
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += 16) {
    int c1 = c0 + 16 < C ? c0 + 16 : C;
    float aw[16] = {0}, ab[16] = {0};
    for (int i = 0; i < N; i++) {
      const float *d = dout + (size_t)i * C, *x = inp + (size_t)i * C;
      float m = mean[i], s = rstd[i];
      for (int c = c0; c < c1; c++) {
        aw[c - c0] += d[c] * (x[c] - m) * s;
        ab[c - c0] += d[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += aw[c - c0];
      db[c] += ab[c - c0];
    }
  }
}

/* inp (N,IC), w (IC,OC), b (OC) -> out (N,OC) = inp w + b */
static void matmul_forward(float *out, const float *inp, const float *w,
                           const float *b, int N, int IC, int OC) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++)
    memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof(float));
  gemm(0, 0, N, OC, IC, 1.0f, inp, IC, w, OC, 1.0f, out, OC);
}

/* Column sums: dout (N,OC) -> db (OC) +=, each thread a range of columns. */
static void bias_backward(float *db, const float *dout, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < OC; c0 += 64) {
    int c1 = c0 + 64 < OC ? c0 + 64 : OC;
    float acc[64] = {0};
    for (int i = 0; i < N; i++) {
      const float *d = dout + (size_t)i * OC;
      for (int c = c0; c < c1; c++)
        acc[c - c0] += d[c];
    }
    for (int c = c0; c < c1; c++)
      db[c] += acc[c - c0];
  }
}

/* dout (N,OC), inp (N,IC), w (IC,OC) -> dinp (N,IC) = dout w^T
 * (overwritten), dw (IC,OC) += inp^T dout, db (OC) += sum of dout */
static void matmul_backward(float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w,
                            int N, int IC, int OC) {
  gemm(0, 1, N, IC, OC, 1.0f, dout, OC, w, OC, 0.0f, dinp, IC);
  gemm(1, 0, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dw, OC);
  bias_backward(db, dout, N, OC);
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one expf: glibc's expf is several times faster than its
 * tanhf, and the absolute error (what GELU's 0.5 x (1 + tanh) feels) stays
 * at float rounding; exp overflowing to inf gives 1, as it should. */
static inline float fast_tanhf(float u) {
  return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

/* inp (N) -> out (N): GELU, tanh approximation; see gpt_cpu.h. */
void gpt_cpu_gelu(float *out, const float *inp, size_t N) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + fast_tanhf(u));
  }
}

/* inp (N), dout (N) -> dinout (N) = dout * gelu'(inp), in place */
static void gelu_backward(float *dinout, const float *inp, size_t N) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < N; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = fast_tanhf(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) +
              0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinout[i] *= g;
  }
}

void cpu_causal_softmax(float *a, int T) {
  for (int i = 0; i < T; i++) {
    float *r = a + (size_t)i * T;
    float mx = r[0];
    for (int j = 1; j <= i; j++)
      mx = r[j] > mx ? r[j] : mx;
    float sum = 0.0f;
    for (int j = 0; j <= i; j++) {
      r[j] = expf(r[j] - mx);
      sum += r[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= i; j++)
      r[j] *= inv;
    for (int j = i + 1; j < T; j++)
      r[j] = 0.0f;
  }
}

void cpu_causal_softmax_backward(float *da, const float *a, int T,
                                 float scale) {
  for (int i = 0; i < T; i++) {
    const float *ar = a + (size_t)i * T;
    float *dr = da + (size_t)i * T;
    float s = 0.0f;
    for (int j = 0; j <= i; j++)
      s += ar[j] * dr[j];
    for (int j = 0; j <= i; j++)
      dr[j] = scale * ar[j] * (dr[j] - s);
    for (int j = i + 1; j < T; j++)
      dr[j] = 0.0f;
  }
}

/* ---- Dropout (gpt_set_dropout): masks hashed, never stored ---- */

typedef struct dropout {
  float p;       /* 0: none */
  uint64_t base; /* the site's hash key */
} dropout;

static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Site 0 (the attention probabilities), 1 (attention's residual branch)
 * or 2 (the MLP's) of layer l, as the last forward dropped it. */
static dropout drop_at(const gpt *m, int l, int site) {
  dropout d = {m->fwd_drop, 0};
  if (d.p > 0)
    d.base =
        mix64(m->drop_seed ^
              mix64(m->fwd_key ^ mix64(((uint64_t)l << 2) | (uint64_t)site)));
  return d;
}

/* dst[i] = src[i] / (1-p) where element off + i of the site is kept, else
 * 0 (dst may be src): each element's fate a hash of its index alone, so
 * forward and backward agree whatever the threads. */
static void drop_copy(float *dst, const float *src, size_t n, size_t off,
                      dropout d) {
  uint32_t th = (uint32_t)((double)d.p * 4294967296.0);
  float s = 1.0f / (1.0f - d.p);
  for (size_t i = 0; i < n; i++) {
    uint64_t h = mix64(d.base + (off + i) * 0x9E3779B97F4A7C15ull);
    dst[i] = (uint32_t)(h >> 32) >= th ? src[i] * s : 0.0f;
  }
}

/* drop_copy over (N,C) rows, in parallel. */
static void drop_rows(float *dst, const float *src, int N, int C, dropout d) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++)
    drop_copy(dst + (size_t)i * C, src + (size_t)i * C, (size_t)C,
              (size_t)i * C, d);
}

/* qkv (B,T,3C) -> att (B,NH,T,T) softmax probabilities (zero above the
 * diagonal), out (B,T,C) = dropout(att) v; with dropout, adrop
 * (B,NH,T,T) holds the dropped probabilities (att keeps the softmax's,
 * which its backward needs). */
static void attention_forward(float *out, float *att, const float *qkv, int B,
                              int T, int C, int NH, float *adrop, dropout d) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
    const float *k = q + C, *v = q + 2 * C;
    float *a = att + (size_t)bh * T * T;
    /* q (T,hs), k (T,hs) -> a (T,T) = q k^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q,
                3 * C, k, 3 * C, 0.0f, a, T);
    cpu_causal_softmax(a, T);
    const float *ad = a;
    if (d.p > 0) {
      float *x = adrop + (size_t)bh * T * T;
      drop_copy(x, a, (size_t)T * T, (size_t)bh * T * T, d);
      ad = x;
    }
    /* ad (T,T), v (T,hs) -> out[b,:,h] (T,hs) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, ad,
                T, v, 3 * C, 0.0f, out + (size_t)b * T * C + (size_t)h * hs, C);
  }
}

/* dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) -> dqkv (B,T,3C)
 * (overwritten); datt (B,NH,T,T) is scratch; d the forward's dropout */
static void attention_backward(float *dqkv, float *datt, const float *dout,
                               const float *qkv, const float *att, int B, int T,
                               int C, int NH, dropout d) {
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    size_t qoff = (size_t)b * T * 3 * C + (size_t)h * hs;
    const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
    float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
    const float *a = att + (size_t)bh * T * T;
    float *da = datt + (size_t)bh * T * T;
    const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
    size_t off = (size_t)bh * T * T;
    if (d.p > 0) {
      /* dv = dropout(a)^T dy, the dropped a made again in da first; then
       * da = dropout'(dy v^T), the mask's own gradient. */
      drop_copy(da, a, (size_t)T * T, off, d);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, da,
                  T, dy, C, 0.0f, dv, 3 * C);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy,
                  C, v, 3 * C, 0.0f, da, T);
      drop_copy(da, da, (size_t)T * T, off, d);
    } else {
      /* dy (T,hs), v (T,hs) -> da (T,T) = dy v^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy,
                  C, v, 3 * C, 0.0f, da, T);
      /* a (T,T), dy (T,hs) -> dv (T,hs) = a^T dy */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T,
                  dy, C, 0.0f, dv, 3 * C);
    }
    /* Softmax backward, in place: da -> d(pre-softmax scores) * scale. */
    cpu_causal_softmax_backward(da, a, T, scale);
    /* da (T,T), k (T,hs) -> dq (T,hs) = da k */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, da,
                T, k, 3 * C, 0.0f, dq, 3 * C);
    /* da (T,T), q (T,hs) -> dk (T,hs) = da^T q */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, da, T,
                q, 3 * C, 0.0f, dk, 3 * C);
  }
}

/* logits (N,Vp), targets (N) -> lse (N), losses (N), probs (N,Vp):
 * softmax over [0,V), zero in the padding columns */
static void crossentropy_forward(float *lse, float *losses, float *probs,
                                 const float *logits, const uint32_t *targets,
                                 int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *r = logits + (size_t)i * Vp;
    float *pr = probs + (size_t)i * Vp;
    float mx = r[0];
    for (int j = 1; j < V; j++)
      mx = r[j] > mx ? r[j] : mx;
    float sum = 0.0f;
    for (int j = 0; j < V; j++) {
      pr[j] = expf(r[j] - mx);
      sum += pr[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < V; j++)
      pr[j] *= inv;
    for (int j = V; j < Vp; j++)
      pr[j] = 0.0f;
    lse[i] = mx + logf(sum);
    losses[i] = lse[i] - r[targets[i]];
  }
}

/* probs (N,Vp), targets (N) -> dlogits (N,Vp) = dloss * (probs - onehot),
 * in place (the padding columns stay zero) */
static void crossentropy_backward(float *probs_dlogits, const uint32_t *targets,
                                  float dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    float *d = probs_dlogits + (size_t)i * Vp;
    for (int j = 0; j < V; j++)
      d[j] *= dloss;
    d[targets[i]] -= dloss;
  }
}

/* The kernels above under gpt_cpu.h's names, for the CUDA kernels'
 * reference test (tests/gpu/kernel_check.cu). Wrappers rather than
 * renames, so that the passes below keep their short names. */
void gpt_cpu_encoder_forward(float *out, const uint32_t *ids, const float *wte,
                             const float *wpe, int B, int T, int C) {
  encoder_forward(out, ids, wte, wpe, B, T, C);
}
void gpt_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                              const uint32_t *ids, int B, int T, int C) {
  encoder_backward(dwte, dwpe, dout, ids, B, T, C);
}
void gpt_cpu_layernorm_backward(float *dinp, float *dw, float *db,
                                const float *dout, const float *inp,
                                const float *w, const float *mean,
                                const float *rstd, int N, int C) {
  layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void gpt_cpu_matmul_forward(float *out, const float *inp, const float *w,
                            const float *b, int N, int IC, int OC) {
  matmul_forward(out, inp, w, b, N, IC, OC);
}
void gpt_cpu_matmul_backward(float *dinp, float *dw, float *db,
                             const float *dout, const float *inp,
                             const float *w, int N, int IC, int OC) {
  matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
}
void gpt_cpu_gelu_backward(float *dinout, const float *inp, size_t N) {
  gelu_backward(dinout, inp, N);
}
/* out (N,C) = res + dropout(inp (N,K) w (K,C) + bias): a block's
 * projection back onto the residual stream; with dropout the branch is
 * made in scratch (N,C) first. */
static void proj_residual(float *out, const float *res, const float *inp,
                          const float *w, const float *bias, int N, int K,
                          int C, float *scratch, dropout d) {
  float *y = d.p > 0 ? scratch : out;
  if (d.p == 0)
    memcpy(out, res, (size_t)N * C * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++)
    for (int j = 0; j < C; j++) {
      if (d.p > 0)
        y[(size_t)i * C + j] = bias[j];
      else
        y[(size_t)i * C + j] += bias[j];
    }
  gemm(0, 0, N, C, K, 1.0f, inp, K, w, C, 1.0f, y, C);
  if (d.p == 0)
    return;
  drop_rows(y, y, N, C, d);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < (size_t)N * C; i++)
    out[i] = res[i] + y[i];
}

void gpt_cpu_attention_forward(float *out, float *att, const float *qkv, int B,
                               int T, int C, int NH) {
  attention_forward(out, att, qkv, B, T, C, NH, NULL, (dropout){0, 0});
}
void gpt_cpu_attention_backward(float *dqkv, float *datt, const float *dout,
                                const float *qkv, const float *att, int B,
                                int T, int C, int NH) {
  attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH, (dropout){0, 0});
}
void gpt_cpu_crossentropy_forward(float *lse, float *losses, float *probs,
                                  const float *logits, const uint32_t *targets,
                                  int N, int V, int Vp) {
  crossentropy_forward(lse, losses, probs, logits, targets, N, V, Vp);
}
void gpt_cpu_crossentropy_backward(float *probs_dlogits,
                                   const uint32_t *targets, float dloss, int N,
                                   int V, int Vp) {
  crossentropy_backward(probs_dlogits, targets, dloss, N, V, Vp);
}

/* ---------------------------------------------------------------------
 * The passes.
 * --------------------------------------------------------------------- */

static int cpu_ensure_acts(gpt *m, size_t need, int B, int T, char *err,
                           size_t errlen) {
  size_t nids = (size_t)B * T;
  if (need > m->acts_cap) {
    free(m->acts);
    m->acts = malloc(need * sizeof(float));
    m->acts_cap = m->acts ? need : 0;
    if (!m->acts) {
      snprintf(err, errlen,
               "gpt: out of memory: could not allocate %zu bytes of "
               "activations for B=%d T=%d",
               need * sizeof(float), B, T);
      return -1;
    }
  }
  if (nids > m->ids_cap) {
    free(m->inputs);
    free(m->targets);
    m->inputs = malloc(nids * sizeof(uint32_t));
    m->targets = malloc(nids * sizeof(uint32_t));
    m->ids_cap = (m->inputs && m->targets) ? nids : 0;
    if (!m->ids_cap) {
      snprintf(err, errlen, "gpt: out of memory for %zu token ids", nids);
      return -1;
    }
  }
  return 0;
}

static int cpu_check_ids(const uint32_t *ids, size_t n, int V, const char *what,
                         char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    if (ids[i] >= (uint32_t)V) {
      snprintf(err, errlen,
               "gpt: %s[%zu] is %u, not a token id (vocab_size is %d)", what, i,
               ids[i], V);
      return -1;
    }
  }
  return 0;
}

/* The parameter hook's calls (gpt.h's gpt_set_param_hook): 0 without a
 * hook. */
int cpu_params_need(gpt *m, int g, int next) {
  return m->param_hook ? m->param_hook(m->param_hook_arg, GPT_PARAMS_NEED, g,
                                       next)
                       : 0;
}
int cpu_params_done(gpt *m, int g, int next) {
  return m->param_hook ? m->param_hook(m->param_hook_arg, GPT_PARAMS_DONE, g,
                                       next)
                       : 0;
}

int cpu_stage_done(gpt *m, int B, int T) {
  if (m->stage_last == m->cfg.n_layer)
    return 0;
  m->B = B;
  m->T = T;
  return 1;
}

int cpu_hook_failed(gpt *m, char *err, size_t errlen) {
  m->B = m->T = 0;
  snprintf(err, errlen, "gpt: a parameter hook failed");
  return -1;
}

/* The layers whose activations m keeps: its stage's (gpt_set_stage). */
static int stage_layers(const gpt *m) { return m->stage_last - m->stage_first; }

/* m's activations in m->acts, carved for (B,T). */
static void carve_m(gpt *m, int B, int T, acts *a) {
  carve(&m->cfg, m->recompute, stage_layers(m), m->acts, B, T, a);
}

int cpu_forward_begin(gpt *m, const uint32_t *inputs, const uint32_t *targets,
                      int B, int T, size_t widest, size_t need, char *err,
                      size_t errlen) {
  const gpt_config *c = &m->cfg;
  int NH = c->n_head, V = c->vocab_size, Vp = c->padded_vocab;
  /* Whatever happens next, the last forward's results are gone. */
  m->B = m->T = 0;
  m->have_loss = 0;
  m->stage_train = 0;
  if (B < 1 || T < 1 || T > c->block_size) {
    snprintf(err, errlen,
             "gpt: batch B=%d T=%d; B must be >= 1 and T between 1 and "
             "block_size %d",
             B, T, c->block_size);
    return -1;
  }
  size_t N = (size_t)B * T;
  if ((double)N * widest > INT_MAX || (double)N * Vp > 9.0e15 ||
      (double)B * NH * T * T > 9.0e15) {
    snprintf(err, errlen, "gpt: batch B=%d T=%d is too large", B, T);
    return -1;
  }
  if ((inputs && cpu_check_ids(inputs, N, V, "inputs", err, errlen) != 0) ||
      (targets && cpu_check_ids(targets, N, V, "targets", err, errlen) != 0))
    return -1;
  if (cpu_ensure_acts(m, need, B, T, err, errlen) != 0)
    return -1;
  if (inputs)
    memcpy(m->inputs, inputs, N * sizeof(uint32_t));
  /* Dropout in a trainer's forwards only (gpt_dropout_key). */
  m->fwd_drop = targets && m->drop_active ? m->drop_p : 0.0f;
  m->fwd_key = m->drop_key;
  if (targets)
    memcpy(m->targets, targets, N * sizeof(uint32_t));
  return 0;
}

void cpu_forward_end(gpt *m, int B, int T, float *logits, float *lse,
                     float *losses, float *probs, const uint32_t *targets,
                     float *loss) {
  const gpt_config *c = &m->cfg;
  int V = c->vocab_size, Vp = c->padded_vocab;
  size_t N = (size_t)B * T;
  if (Vp > V) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++)
      memset(logits + i * Vp + V, 0, (size_t)(Vp - V) * sizeof(float));
  }
  m->B = B;
  m->T = T;
  if (!targets)
    return;
  crossentropy_forward(lse, losses, probs, logits, targets, (int)N, V, Vp);
  double sum = 0.0;
  for (size_t i = 0; i < N; i++)
    sum += losses[i];
  m->loss = (float)(sum / (double)N);
  m->have_loss = 1;
  *loss = m->loss;
}

/* Layer l's forward from its input res (B,T,C) into la, for N = B*T
 * positions: up to fch_gelu, then with whole the residual out, res3
 * (the backward's recomputation needs no res3: the next layer is done). */
static void layer_forward(gpt *m, const acts *a, const layer_acts *la,
                          const float *res, int l, int B, int T, int whole) {
  const gpt_config *c = &m->cfg;
  int C = c->n_embd, NH = c->n_head, N = B * T;
#define P(k) gpt_p(m, gpt_ti(l, k))
  /* res (B,T,C) -> ln1 (B,T,C) -> qkv (B,T,3C) -> atty (B,T,C) */
  gpt_cpu_layernorm(la->ln1, la->ln1_mean, la->ln1_rstd, res, P(GPT_LN1_W),
                    P(GPT_LN1_B), N, C);
  matmul_forward(la->qkv, la->ln1, P(GPT_QKV_W), P(GPT_QKV_B), N, C, 3 * C);
  attention_forward(la->atty, la->att, la->qkv, B, T, C, NH, a->datt,
                    drop_at(m, l, 0));
  /* res2 (B,T,C) = res + dropout(atty c_proj + bias) */
  proj_residual(la->res2, res, la->atty, P(GPT_ATTPROJ_W), P(GPT_ATTPROJ_B), N,
                C, C, a->dbuf, drop_at(m, l, 1));
  /* res2 -> ln2 (B,T,C) -> fch (B,T,4C) -> fch_gelu (B,T,4C) */
  gpt_cpu_layernorm(la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, P(GPT_LN2_W),
                    P(GPT_LN2_B), N, C);
  matmul_forward(la->fch, la->ln2, P(GPT_FC_W), P(GPT_FC_B), N, C, 4 * C);
  gpt_cpu_gelu(la->fch_gelu, la->fch, (size_t)N * 4 * C);
  /* res3 (B,T,C) = res2 + dropout(fch_gelu c_proj + bias) */
  if (whole)
    proj_residual(la->res3, la->res2, la->fch_gelu, P(GPT_FCPROJ_W),
                  P(GPT_FCPROJ_B), N, 4 * C, C, a->dbuf, drop_at(m, l, 2));
#undef P
}

/* The stage's input into a.encoded (B,T,C): the embeddings of inputs
 * on the first stage, else a copy of x, the stream that enters it. */
static int stage_input(gpt *m, const acts *a, const uint32_t *inputs,
                       const float *x, int B, int T) {
  int C = m->cfg.n_embd;
  if (m->stage_first > 0) {
    memcpy(a->encoded, x, (size_t)B * T * C * sizeof(float));
    return 0;
  }
  if (cpu_params_need(m, 0, 1) != 0)
    return -1;
  encoder_forward(a->encoded, inputs, gpt_p(m, 0), gpt_p(m, 1), B, T, C);
  return cpu_params_done(m, 0, 1);
}

/* The head: residual stream res -> ln_f -> logits (B,T,Vp) -> loss. */
static int head_forward(gpt *m, const acts *a, const float *res,
                        const uint32_t *targets, int B, int T, float *loss) {
  const gpt_config *c = &m->cfg;
  int C = c->n_embd, V = c->vocab_size, Vp = c->padded_vocab, L = c->n_layer;
  size_t N = (size_t)B * T;
  size_t lf = gpt_ti(L, 0);
  /* After the tied head, a forward with targets is for training: the
   * backward starts with the head again (group 0). */
  int after = targets ? 0 : -1;
  if (cpu_params_need(m, L + 1, 0) != 0)
    return -1;
  gpt_cpu_layernorm(a->lnf, a->lnf_mean, a->lnf_rstd, res, gpt_p(m, lf),
                    gpt_p(m, lf + 1), (int)N, C);
  if (cpu_params_done(m, L + 1, 0) != 0 || cpu_params_need(m, 0, after) != 0)
    return -1;
  /* lnf (B,T,C), wte (Vp,C) -> logits (B,T,Vp) = lnf wte^T; columns
   * [V,Vp) are set to zero rather than multiplied by the zero rows. */
  gemm(0, 1, (int)N, V, C, 1.0f, a->lnf, C, gpt_p(m, 0), C, 0.0f, a->logits,
       Vp);
  if (cpu_params_done(m, 0, after) != 0)
    return -1;
  cpu_forward_end(m, B, T, a->logits, a->lse, a->losses, a->dlogits, targets,
                  loss);
  return 0;
}

/* The forward of layers [stage_first, stage_last) (all of them but in a
 * pipeline stage), from inputs' embeddings or x, with the head when the
 * range ends with the last layer. */
static int forward(gpt *m, const uint32_t *inputs, const float *x,
                   const uint32_t *targets, int B, int T, float *loss,
                   char *err, size_t errlen) {
  const gpt_config *c = &m->cfg;
  int C = c->n_embd;
  acts a;
  if (cpu_forward_begin(m, inputs, targets, B, T, (size_t)4 * C,
                        carve(c, m->recompute, stage_layers(m), NULL, B, T, &a),
                        err, errlen) != 0)
    return -1;
  carve_m(m, B, T, &a);
  if (stage_input(m, &a, inputs, x, B, T) != 0)
    goto hook_failed;
  const float *res = a.encoded; /* residual stream (B,T,C) */
  for (int l = m->stage_first; l < m->stage_last; l++) {
    if (cpu_params_need(m, 1 + l, 2 + l) != 0)
      goto hook_failed;
    layer_acts la = layer_at(m, &a, l, B, T);
    layer_forward(m, &a, &la, res, l, B, T, 1);
    if (cpu_params_done(m, 1 + l, 2 + l) != 0)
      goto hook_failed;
    res = la.res3;
  }
  if (cpu_stage_done(m, B, T))
    return 0;
  if (head_forward(m, &a, res, targets, B, T, loss) != 0)
    goto hook_failed;
  return 0;
hook_failed:
  return cpu_hook_failed(m, err, errlen);
}

int gpt_forward(gpt *m, const uint32_t *inputs, const uint32_t *targets, int B,
                int T, float *loss, char *err, size_t errlen) {
  if (m->stage_first != 0 || m->stage_last != m->cfg.n_layer) {
    snprintf(err, errlen,
             "gpt: this model runs layers [%d,%d) of %d, a pipeline stage: "
             "use gpt_forward_stage",
             m->stage_first, m->stage_last, m->cfg.n_layer);
    return -1;
  }
  int nb = blas_threads_begin();
  pass_bf16 = m->autocast == GPT_AUTOCAST_BF16;
  int rc =
      m->cfg.family == GPT_FAMILY_LLAMA
          ? llama_cpu_forward(m, inputs, NULL, targets, B, T, loss, err, errlen)
          : forward(m, inputs, NULL, targets, B, T, loss, err, errlen);
  pass_bf16 = 0;
  blas_threads_end(nb);
  return rc;
}

int gpt_forward_stage(gpt *m, const uint32_t *inputs, const float *x,
                      const uint32_t *targets, int B, int T, float *loss,
                      char *err, size_t errlen) {
  int first = m->stage_first == 0, last = m->stage_last == m->cfg.n_layer;
  int has_ids = inputs != NULL, has_x = x != NULL, has_tg = targets != NULL;
  if (has_ids != first || has_x == first || has_tg != last) {
    snprintf(err, errlen, "gpt: stage [%d,%d) of %d layers takes %s and %s",
             m->stage_first, m->stage_last, m->cfg.n_layer,
             first ? "the ids (not a stream)" : "a stream (not the ids)",
             last ? "the targets" : "no targets");
    return -1;
  }
  int nb = blas_threads_begin();
  pass_bf16 = m->autocast == GPT_AUTOCAST_BF16;
  int rc =
      m->cfg.family == GPT_FAMILY_LLAMA
          ? llama_cpu_forward(m, inputs, x, targets, B, T, loss, err, errlen)
          : forward(m, inputs, x, targets, B, T, loss, err, errlen);
  pass_bf16 = 0;
  blas_threads_end(nb);
  m->stage_train = rc == 0;
  return rc;
}

const float *gpt_stage_output(const gpt *m) {
  if (!m->B || m->stage_last <= m->stage_first)
    return NULL;
  if (m->cfg.family == GPT_FAMILY_LLAMA)
    return llama_cpu_stage_output(m);
  acts a = {0};
  carve(&m->cfg, m->recompute, stage_layers(m), m->acts, m->B, m->T, &a);
  return layer_at(m, &a, m->stage_last - 1, m->B, m->T).res3;
}

const float *gpt_stage_input_grad(const gpt *m) {
  if (!m->B)
    return NULL;
  if (m->cfg.family == GPT_FAMILY_LLAMA)
    return llama_cpu_stage_input_grad(m);
  acts a = {0};
  carve(&m->cfg, m->recompute, stage_layers(m), m->acts, m->B, m->T, &a);
  return a.dres;
}

const float *gpt_logits(const gpt *m) {
  if (!m->B)
    return NULL;
  if (m->cfg.family == GPT_FAMILY_LLAMA)
    return llama_cpu_logits(m);
  acts a = {0};
  carve(&m->cfg, m->recompute, stage_layers(m), m->acts, m->B, m->T, &a);
  return a.logits;
}

void gpt_zero_grad(gpt *m) { memset(m->grads, 0, m->n_params * sizeof(float)); }

/* The gradient of a residual branch from the stream's, dres: dres itself
 * without dropout, else dres through the forward's mask into scratch. */
static const float *branch_grad(float *scratch, const float *dres, int N, int C,
                                dropout d) {
  if (d.p == 0)
    return dres;
  drop_rows(scratch, dres, N, C, d);
  return scratch;
}

/* The head's backward: loss -> dres (B,T,C), the gradient of the
 * residual stream that leaves the last layer. 0, or -1 when a parameter
 * hook failed. */
static int head_backward(gpt *m, const acts *a, float scale) {
  const gpt_config *c = &m->cfg;
  int B = m->B, T = m->T, C = c->n_embd, V = c->vocab_size;
  int Vp = c->padded_vocab, L = c->n_layer;
  int N = B * T;
  /* Loss -> dlogits (B,T,Vp): d(scale * mean loss), from the forward's
   * probabilities in place; so a second backward of the same forward
   * would be wrong, and gpt_backward allows one. */
  crossentropy_backward(a->dlogits, m->targets, scale / (float)N, N, V, Vp);
  /* dlogits (B,T,V) -> dbuf (B,T,C) = dlogits wte; dwte (V,C) +=
   * dlogits^T lnf. The padding rows of dwte are not touched. */
  if (cpu_params_need(m, 0, L + 1) != 0)
    return -1;
  gemm(0, 0, N, C, V, 1.0f, a->dlogits, Vp, gpt_p(m, 0), C, 0.0f, a->dbuf, C);
  gemm(1, 0, V, C, N, 1.0f, a->dlogits, Vp, a->lnf, C, 1.0f, gpt_g(m, 0), C);
  if (cpu_params_done(m, 0, L + 1) != 0 || cpu_params_need(m, L + 1, L) != 0)
    return -1;
  /* dbuf -> dres (B,T,C), the residual stream's gradient. */
  memset(a->dres, 0, (size_t)N * C * sizeof(float));
  size_t lf = gpt_ti(L, 0);
  const float *last =
      L > m->stage_first ? layer_at(m, a, L - 1, B, T).res3 : a->encoded;
  layernorm_backward(a->dres, gpt_g(m, lf), gpt_g(m, lf + 1), a->dbuf, last,
                     gpt_p(m, lf), a->lnf_mean, a->lnf_rstd, N, C);
  if (cpu_params_done(m, L + 1, L) != 0)
    return -1;
  if (m->grad_hook)
    m->grad_hook(m->grad_hook_arg, m->tensors[lf].offset);
  return 0;
}

/* The backward of the last forward's layers [stage_first, stage_last):
 * from the loss (dy NULL: the range has the head) or from dy, the
 * gradient of the stage's output; down to the embeddings' gradients on
 * the first stage, else to the input's gradient, left in dres. */
static void backward(gpt *m, float scale, const float *dy_out) {
  const gpt_config *c = &m->cfg;
  int B = m->B, T = m->T, C = c->n_embd, NH = c->n_head;
  int first = m->stage_first, last = m->stage_last;
  int N = B * T;
  acts a;
  carve_m(m, B, T, &a);
  if (!dy_out) {
    if (head_backward(m, &a, scale) != 0)
      return;
  } else {
    memcpy(a.dres, dy_out, (size_t)N * C * sizeof(float));
  }

  for (int l = last - 1; l >= first; l--) {
    /* Layer l is group 1 + l; the next one needed is layer l - 1's. */
    int next = l > first ? l : -1;
    if (cpu_params_need(m, 1 + l, next) != 0)
      return;
    layer_acts la = layer_at(m, &a, l, B, T);
    const float *res =
        l > first ? layer_at(m, &a, l - 1, B, T).res3 : a.encoded;
    /* Recomputation: the same kernels on the same inputs and masks give
     * the forward's very bits (the last layer's block is still there). */
    if (a.rc == GPT_RECOMPUTE_BLOCK && l < last - 1)
      layer_forward(m, &a, &la, res, l, B, T, 0);
    else if (a.rc == GPT_RECOMPUTE_GELU)
      gpt_cpu_gelu(la.fch_gelu, la.fch, (size_t)N * 4 * C);
#define P(k) gpt_p(m, gpt_ti(l, k))
#define G(k) gpt_g(m, gpt_ti(l, k))
    /* MLP. dres = d res3 (B,T,C) -> (through its dropout, into dbuf)
     * d4c (B,T,4C) = d fch_gelu -> d fch */
    const float *dy = branch_grad(a.dbuf, a.dres, N, C, drop_at(m, l, 2));
    matmul_backward(a.d4c, G(GPT_FCPROJ_W), G(GPT_FCPROJ_B), dy, la.fch_gelu,
                    P(GPT_FCPROJ_W), N, 4 * C, C);
    gelu_backward(a.d4c, la.fch, (size_t)N * 4 * C);
    /* d fch (B,T,4C) -> dbuf (B,T,C) = d ln2 */
    matmul_backward(a.dbuf, G(GPT_FC_W), G(GPT_FC_B), a.d4c, la.ln2,
                    P(GPT_FC_W), N, C, 4 * C);
    /* d ln2 -> dres += (now d res2) */
    layernorm_backward(a.dres, G(GPT_LN2_W), G(GPT_LN2_B), a.dbuf, la.res2,
                       P(GPT_LN2_W), la.ln2_mean, la.ln2_rstd, N, C);
    /* Attention. dres = d res2 -> (through its dropout, into dqkv, free
     * until attention_backward) dbuf (B,T,C) = d atty */
    dy = branch_grad(a.dqkv, a.dres, N, C, drop_at(m, l, 1));
    matmul_backward(a.dbuf, G(GPT_ATTPROJ_W), G(GPT_ATTPROJ_B), dy, la.atty,
                    P(GPT_ATTPROJ_W), N, C, C);
    /* d atty -> dqkv (B,T,3C) */
    attention_backward(a.dqkv, a.datt, a.dbuf, la.qkv, la.att, B, T, C, NH,
                       drop_at(m, l, 0));
    /* dqkv -> dbuf (B,T,C) = d ln1 */
    matmul_backward(a.dbuf, G(GPT_QKV_W), G(GPT_QKV_B), a.dqkv, la.ln1,
                    P(GPT_QKV_W), N, C, 3 * C);
    /* d ln1 -> dres += (now d of the layer's input) */
    layernorm_backward(a.dres, G(GPT_LN1_W), G(GPT_LN1_B), a.dbuf, res,
                       P(GPT_LN1_W), la.ln1_mean, la.ln1_rstd, N, C);
#undef P
#undef G
    if (cpu_params_done(m, 1 + l, next) != 0)
      return;
    /* Layer l's tensors are contiguous and nothing after this touches
     * them: the gradient from layer l on is final. */
    if (m->grad_hook)
      m->grad_hook(m->grad_hook_arg, m->tensors[gpt_ti(l, 0)].offset);
  }
  if (first > 0)
    return; /* dres is the gradient of the stage's input */
  encoder_backward(gpt_g(m, 0), gpt_g(m, 1), a.dres, m->inputs, B, T, C);
  if (m->grad_hook)
    m->grad_hook(m->grad_hook_arg, 0);
}

int gpt_set_recompute(gpt *m, gpt_recompute r, char *err, size_t errlen) {
  if (r != GPT_RECOMPUTE_NONE && r != GPT_RECOMPUTE_GELU &&
      r != GPT_RECOMPUTE_BLOCK) {
    snprintf(err, errlen,
             "recompute: %d is not one of none (0), gelu (1), block (2)",
             (int)r);
    return -1;
  }
  m->recompute = r;
  m->B = m->T = 0; /* the last forward's activations are laid out anew */
  m->have_loss = 0;
  return 0;
}

int gpt_set_autocast(gpt *m, gpt_autocast a, char *err, size_t errlen) {
  if (a != GPT_AUTOCAST_NONE && a != GPT_AUTOCAST_BF16) {
    snprintf(err, errlen, "autocast: %d is not one of none (0), bf16 (1)",
             (int)a);
    return -1;
  }
  m->autocast = a;
  return 0;
}

void gpt_backward(gpt *m, float scale) {
  if (!m->have_loss || m->stage_first != 0 || m->stage_last != m->cfg.n_layer)
    return;
  int nb = blas_threads_begin();
  pass_bf16 = m->autocast == GPT_AUTOCAST_BF16;
  if (m->cfg.family == GPT_FAMILY_LLAMA)
    llama_cpu_backward(m, scale, NULL);
  else
    backward(m, scale, NULL);
  pass_bf16 = 0;
  blas_threads_end(nb);
  m->have_loss = 0; /* the probabilities are spent */
  m->stage_train = 0;
}

int gpt_backward_stage(gpt *m, const float *dy, float scale, char *err,
                       size_t errlen) {
  int last = m->stage_last == m->cfg.n_layer;
  int has_dy = dy != NULL;
  if (!m->stage_train || (last ? !m->have_loss : !m->B) || has_dy == last) {
    snprintf(err, errlen,
             "gpt: stage [%d,%d): no trainer's forward to go back through, "
             "or %s",
             m->stage_first, m->stage_last,
             last ? "a gradient given to the last stage"
                  : "no output gradient given");
    return -1;
  }
  int nb = blas_threads_begin();
  pass_bf16 = m->autocast == GPT_AUTOCAST_BF16;
  if (m->cfg.family == GPT_FAMILY_LLAMA)
    llama_cpu_backward(m, scale, dy);
  else
    backward(m, scale, dy);
  pass_bf16 = 0;
  blas_threads_end(nb);
  m->have_loss = 0;
  m->stage_train = 0;
  return 0;
}
