/*
 * llama_cpu: the CPU backend of the Llama family (gpu/model/gpt.h's
 * second list): RMSNorm, rotary position embeddings in Hugging Face's
 * rotate_half layout, grouped-query causal attention, a SwiGLU MLP, no
 * biases, the head tied or not. fp32 by hand, matrix products through
 * cpu_gemm (gpt_cpu.c's), the rest in OpenMP loops.
 *
 * Determinism, as gpt_cpu.c: every sum over positions is one sgemm or a
 * loop in which each thread owns a fixed range of outputs; a key/value
 * head's gradient is summed over its query heads by one thread, in order.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cpu_impl.h"
#include "gpt_cpu.h"

/* ---------------------------------------------------------------------
 * Activations: one allocation carved for (B,T). Per layer (N = B*T, KVD
 * the key/value width, FF the SwiGLU width), all kept for the backward:
 *   xn1 (N,C) rs1 (N) q (N,C) k (N,KVD) v (N,KVD) (q, k after RoPE)
 *   att (B,H,T,T) y (N,C) res2 (N,C) xn2 (N,C) rs2 (N)
 *   gate (N,FF) up (N,FF) hid (N,FF) res3 (N,C)
 * then encoded (N,C), xf (N,C), rsf (N), logits (N,Vp), lse (N),
 * losses (N), the rotation cos, sin (T,hs/2), and the backward scratch:
 *   dres (N,C) dbuf (N,C) dq (N,C) dk (N,KVD) dv (N,KVD)
 *   dgate (N,FF) dup (N,FF) datt (B,H,T,T) dlogits (N,Vp) (the forward's
 *   probabilities until the backward turns them into the gradient)
 * With recomputation (gpt_set_recompute) the layers keep less and one
 * shared block, after the backward scratch, holds the rest, as GPT-2's:
 *   GELU:  a layer keeps all but hid, the SwiGLU output; the block is one
 *          hid (N,FF), which each layer's forward fills and its backward
 *          refills from the kept gate and up.
 *   BLOCK: a layer keeps res3 alone (the next layer's input); the block
 *          is one layer's other activations, which the forward fills
 *          layer after layer and the backward refills for each layer
 *          from its input (the last layer's are still there).
 * --------------------------------------------------------------------- */
typedef struct layer_acts {
  float *xn1, *rs1, *q, *k, *v, *att, *y, *res2, *xn2, *rs2, *gate, *up, *hid,
      *res3;
} layer_acts;

typedef struct acts {
  gpt_recompute rc;
  float *layers;
  size_t layer_size; /* the floats each layer keeps */
  float *encoded, *xf, *rsf, *logits, *lse, *losses, *cos, *sin;
  float *dres, *dbuf, *dq, *dk, *dv, *dgate, *dup, *datt, *dlogits;
  float *shared; /* recomputation's block (NULL without) */
} acts;

/* The widths of cfg: C, KVD, FF, head size. */
typedef struct dims {
  size_t C, KVD, FF, hs, H, KV;
} dims;

static dims dims_of(const gpt_config *c) {
  dims d;
  d.C = (size_t)c->n_embd;
  d.H = (size_t)c->n_head;
  d.KV = (size_t)c->n_kv_head;
  d.hs = d.C / d.H;
  d.KVD = d.KV * d.hs;
  d.FF = (size_t)c->intermediate;
  return d;
}

/* Points la at a layer's activations under rc: own, the layer's kept
 * floats, and shared, recomputation's block (either NULL: counts only).
 * Returns the floats the layer keeps; *nshared gets the block's. */
static size_t carve_layer(const gpt_config *cfg, gpt_recompute rc, float *own,
                          float *shared, int B, int T, layer_acts *la,
                          size_t *nshared) {
  dims d = dims_of(cfg);
  size_t N = (size_t)B * T, kept = 0, sh = 0;
  /* Each field from the layer's own floats or the shared block's. */
#define TAKE(field, n, in_shared)                                              \
  do {                                                                         \
    if (in_shared) {                                                           \
      la->field = shared ? shared + sh : NULL;                                 \
      sh += (n);                                                               \
    } else {                                                                   \
      la->field = own ? own + kept : NULL;                                     \
      kept += (n);                                                             \
    }                                                                          \
  } while (0)
  int blk = rc == GPT_RECOMPUTE_BLOCK;
  TAKE(xn1, N * d.C, blk);
  TAKE(rs1, N, blk);
  TAKE(q, N * d.C, blk);
  TAKE(k, N * d.KVD, blk);
  TAKE(v, N * d.KVD, blk);
  TAKE(att, (size_t)B * d.H * T * T, blk);
  TAKE(y, N * d.C, blk);
  TAKE(res2, N * d.C, blk);
  TAKE(xn2, N * d.C, blk);
  TAKE(rs2, N, blk);
  TAKE(gate, N * d.FF, blk);
  TAKE(up, N * d.FF, blk);
  TAKE(hid, N * d.FF, blk || rc == GPT_RECOMPUTE_GELU);
  TAKE(res3, N * d.C, 0);
#undef TAKE
  *nshared = sh;
  return kept;
}

/* m->acts carved for (B,T) under rc with nl layers' activations (a
 * pipeline stage's, or all); base NULL: counts only. */
static size_t carve(const gpt_config *cfg, gpt_recompute rc, int nl,
                    float *base, int B, int T, acts *a) {
  dims d = dims_of(cfg);
  size_t N = (size_t)B * T, Vp = (size_t)cfg->padded_vocab, nshared;
  layer_acts la;
  a->rc = rc;
  a->layer_size = carve_layer(cfg, rc, NULL, NULL, B, T, &la, &nshared);
  size_t off = 0;
#define TAKE(field, n)                                                         \
  do {                                                                         \
    if (base)                                                                  \
      a->field = base + off;                                                   \
    off += (n);                                                                \
  } while (0)
  TAKE(layers, (size_t)nl * a->layer_size);
  TAKE(encoded, N * d.C);
  TAKE(xf, N * d.C);
  TAKE(rsf, N);
  TAKE(logits, N * Vp);
  TAKE(lse, N);
  TAKE(losses, N);
  TAKE(cos, (size_t)T * d.hs / 2);
  TAKE(sin, (size_t)T * d.hs / 2);
  TAKE(dres, N * d.C);
  TAKE(dbuf, N * d.C);
  TAKE(dq, N * d.C);
  TAKE(dk, N * d.KVD);
  TAKE(dv, N * d.KVD);
  TAKE(dgate, N * d.FF);
  TAKE(dup, N * d.FF);
  TAKE(datt, (size_t)B * d.H * T * T);
  TAKE(dlogits, N * Vp);
  a->shared = NULL;
  if (nshared)
    TAKE(shared, nshared);
#undef TAKE
  return off;
}

size_t llama_cpu_act_floats(const gpt_config *cfg, gpt_recompute rc, int B,
                            int T) {
  acts a;
  return carve(cfg, rc, cfg->n_layer, NULL, B, T, &a);
}

/* The layers whose activations m keeps: its stage's (gpt_set_stage). */
static int stage_layers(const gpt *m) { return m->stage_last - m->stage_first; }

/* m's activations in m->acts, carved for (B,T). */
static void carve_m(const gpt *m, int B, int T, acts *a) {
  carve(&m->cfg, m->recompute, stage_layers(m), m->acts, B, T, a);
}

static layer_acts layer_at(const gpt *m, const acts *a, int l, int B, int T) {
  layer_acts la;
  size_t nshared;
  carve_layer(&m->cfg, a->rc,
              a->layers + (size_t)(l - m->stage_first) * a->layer_size,
              a->shared, B, T, &la, &nshared);
  return la;
}

/* ---------------------------------------------------------------------
 * Kernels.
 * --------------------------------------------------------------------- */

/* x (N,C), w (C) -> out (N,C) = x / rms(x) * w, rs (N) = 1 / rms(x),
 * rms(x) = sqrt(mean(x^2) + eps) */
void llama_cpu_rmsnorm(float *out, float *rs, const float *x, const float *w,
                       int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *xi = x + (size_t)i * C;
    float ss = 0.0f;
    for (int c = 0; c < C; c++)
      ss += xi[c] * xi[c];
    float r = 1.0f / sqrtf(ss / C + eps);
    float *o = out + (size_t)i * C;
    for (int c = 0; c < C; c++)
      o[c] = xi[c] * r * w[c];
    if (rs)
      rs[i] = r;
  }
}

/* dout (N,C), x (N,C), w (C), rs (N) -> dx (N,C) +=, dw (C) +=.
 * With g = dout * w: dx = r g - x r^3 mean(g x). */
void llama_cpu_rmsnorm_backward(float *dx, float *dw, const float *dout,
                                const float *x, const float *w, const float *rs,
                                int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *d = dout + (size_t)i * C, *xi = x + (size_t)i * C;
    float r = rs[i], gx = 0.0f;
    for (int c = 0; c < C; c++)
      gx += d[c] * w[c] * xi[c];
    float k = r * r * r * gx / C;
    float *o = dx + (size_t)i * C;
    for (int c = 0; c < C; c++)
      o[c] += r * d[c] * w[c] - k * xi[c];
  }
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += 16) {
    int c1 = c0 + 16 < C ? c0 + 16 : C;
    float acc[16] = {0};
    for (int i = 0; i < N; i++) {
      const float *d = dout + (size_t)i * C, *xi = x + (size_t)i * C;
      for (int c = c0; c < c1; c++)
        acc[c - c0] += d[c] * xi[c] * rs[i];
    }
    for (int c = c0; c < c1; c++)
      dw[c] += acc[c - c0];
  }
}

void llama_cpu_rope_tables(float *cs, float *sn, int t0, int T, int hs,
                           double theta) {
  int h2 = hs / 2;
  for (int t = 0; t < T; t++)
    for (int i = 0; i < h2; i++) {
      double ang = (double)(t0 + t) * pow(theta, -2.0 * i / hs);
      cs[(size_t)t * h2 + i] = (float)cos(ang);
      sn[(size_t)t * h2 + i] = (float)sin(ang);
    }
}

void llama_cpu_rope(float *x, const float *cs, const float *sn, int B, int T,
                    int nh, int hs, int dir) {
  int h2 = hs / 2;
  float sg = (float)dir;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    int t = bt % T;
    const float *c = cs + (size_t)t * h2, *s = sn + (size_t)t * h2;
    for (int h = 0; h < nh; h++) {
      float *p = x + ((size_t)bt * nh + h) * hs;
      for (int i = 0; i < h2; i++) {
        float a = p[i], b = p[i + h2];
        p[i] = a * c[i] - sg * b * s[i];
        p[i + h2] = b * c[i] + sg * a * s[i];
      }
    }
  }
}

void llama_cpu_attention_forward(float *y, float *att, const float *q,
                                 const float *k, const float *v, int B, int T,
                                 int H, int KV, int hs) {
  int G = H / KV, C = H * hs, KVD = KV * hs;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; bh++) {
    int b = bh / H, h = bh % H, kh = h / G;
    const float *qh = q + (size_t)b * T * C + (size_t)h * hs;
    const float *kh_ = k + (size_t)b * T * KVD + (size_t)kh * hs;
    const float *vh = v + (size_t)b * T * KVD + (size_t)kh * hs;
    float *a = att + (size_t)bh * T * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, qh, C,
                kh_, KVD, 0.0f, a, T);
    cpu_causal_softmax(a, T);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T,
                vh, KVD, 0.0f, y + (size_t)b * T * C + (size_t)h * hs, C);
  }
}

/* One thread per (b, key/value head) sums its query heads'
 * contributions in order. */
void llama_cpu_attention_backward(float *dq, float *dk, float *dv, float *datt,
                                  const float *dy, const float *q,
                                  const float *k, const float *v,
                                  const float *att, int B, int T, int H, int KV,
                                  int hs) {
  int G = H / KV, C = H * hs, KVD = KV * hs;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < B * KV; bk++) {
    int b = bk / KV, kh = bk % KV;
    size_t koff = (size_t)b * T * KVD + (size_t)kh * hs;
    const float *kk = k + koff, *vv = v + koff;
    float *dkk = dk + koff, *dvv = dv + koff;
    for (int g = 0; g < G; g++) {
      int h = kh * G + g;
      float beta = g ? 1.0f : 0.0f;
      size_t qoff = (size_t)b * T * C + (size_t)h * hs;
      const float *a = att + ((size_t)b * H + h) * T * T;
      float *da = datt + ((size_t)b * H + h) * T * T;
      const float *dyh = dy + qoff;
      /* da = dy v^T; dv (+)= a^T dy */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dyh,
                  C, vv, KVD, 0.0f, da, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T,
                  dyh, C, beta, dvv, KVD);
      cpu_causal_softmax_backward(da, a, T, scale);
      /* dq = da k; dk (+)= da^T q */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, da,
                  T, kk, KVD, 0.0f, dq + qoff, C);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, da,
                  T, q + qoff, C, beta, dkk, KVD);
    }
  }
}

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void llama_cpu_swiglu(float *hid, const float *gate, const float *up,
                      size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++)
    hid[i] = gate[i] * sigmoidf(gate[i]) * up[i];
}

/* dhid, gate, up (n) -> dgate, dup (n); dhid may be dup or dgate. */
void llama_cpu_swiglu_backward(float *dgate, float *dup, const float *dhid,
                               const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float g = gate[i], s = sigmoidf(g), dh = dhid[i];
    dup[i] = dh * g * s;
    dgate[i] = dh * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

void llama_cpu_linear_forward(float *out, const float *x, const float *w, int N,
                              int IC, int OC) {
  cpu_gemm(0, 1, N, OC, IC, 1.0f, x, IC, w, IC, 0.0f, out, OC);
}

void llama_cpu_linear_backward(float *dx, float beta, float *dw,
                               const float *dout, const float *x,
                               const float *w, int N, int IC, int OC) {
  cpu_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, beta, dx, IC);
  cpu_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, x, IC, 1.0f, dw, IC);
}

/* ---------------------------------------------------------------------
 * The passes. Parameter groups (gpt.h): 0 the embedding, 1 + l layer l,
 * L + 1 model.norm and lm_head. Forward order 0, 1..L, L + 1 (and 0
 * again for a tied head); backward the reverse, with the tied head's 0
 * first, as GPT-2's.
 * --------------------------------------------------------------------- */

/* Index of the head's tensor: lm_head (last) or the embedding. */
static size_t head_tensor(const gpt *m) {
  return m->cfg.untied_head ? m->n_tensors - 1 : 0;
}
/* Index of model.norm.weight: last, or before lm_head. */
static size_t norm_tensor(const gpt *m) {
  return m->n_tensors - 1 - (size_t)(m->cfg.untied_head != 0);
}

/* Layer l forward, res (N,C) -> la.res3; whole 0: all but res3 (the
 * backward's recomputation needs no res3: the next layer is done). */
static void layer_forward(gpt *m, const layer_acts *la, const float *res,
                          const acts *a, int l, int B, int T, int whole) {
  dims d = dims_of(&m->cfg);
  int N = B * T, C = (int)d.C, KVD = (int)d.KVD, FF = (int)d.FF;
  float eps = m->cfg.norm_eps;
#define P(k) gpt_p(m, llama_ti(l, k))
  llama_cpu_rmsnorm(la->xn1, la->rs1, res, P(LLAMA_LN1_W), N, C, eps);
  llama_cpu_linear_forward(la->q, la->xn1, P(LLAMA_Q_W), N, C, C);
  llama_cpu_linear_forward(la->k, la->xn1, P(LLAMA_K_W), N, C, KVD);
  llama_cpu_linear_forward(la->v, la->xn1, P(LLAMA_V_W), N, C, KVD);
  llama_cpu_rope(la->q, a->cos, a->sin, B, T, (int)d.H, (int)d.hs, 1);
  llama_cpu_rope(la->k, a->cos, a->sin, B, T, (int)d.KV, (int)d.hs, 1);
  llama_cpu_attention_forward(la->y, la->att, la->q, la->k, la->v, B, T,
                              (int)d.H, (int)d.KV, (int)d.hs);
  /* res2 = res + y o_proj^T */
  memcpy(la->res2, res, (size_t)N * C * sizeof(float));
  cpu_gemm(0, 1, N, C, C, 1.0f, la->y, C, P(LLAMA_O_W), C, 1.0f, la->res2, C);
  llama_cpu_rmsnorm(la->xn2, la->rs2, la->res2, P(LLAMA_LN2_W), N, C, eps);
  llama_cpu_linear_forward(la->gate, la->xn2, P(LLAMA_GATE_W), N, C, FF);
  llama_cpu_linear_forward(la->up, la->xn2, P(LLAMA_UP_W), N, C, FF);
  llama_cpu_swiglu(la->hid, la->gate, la->up, (size_t)N * FF);
  if (!whole)
    return;
  /* res3 = res2 + hid down_proj^T */
  memcpy(la->res3, la->res2, (size_t)N * C * sizeof(float));
  cpu_gemm(0, 1, N, C, FF, 1.0f, la->hid, FF, P(LLAMA_DOWN_W), FF, 1.0f,
           la->res3, C);
#undef P
}

/* Layer l backward: a->dres holds d res3 in, d of the layer's input
 * (res) out. */
static void layer_backward(gpt *m, const layer_acts *la, const float *res,
                           const acts *a, int l, int B, int T) {
  dims d = dims_of(&m->cfg);
  int N = B * T, C = (int)d.C, KVD = (int)d.KVD, FF = (int)d.FF;
#define P(k) gpt_p(m, llama_ti(l, k))
#define G(k) gpt_g(m, llama_ti(l, k))
  /* MLP: d res3 -> d hid (into dgate's room, then split) */
  llama_cpu_linear_backward(a->dup, 0.0f, G(LLAMA_DOWN_W), a->dres, la->hid,
                            P(LLAMA_DOWN_W), N, FF, C);
  llama_cpu_swiglu_backward(a->dgate, a->dup, a->dup, la->gate, la->up,
                            (size_t)N * FF);
  llama_cpu_linear_backward(a->dbuf, 0.0f, G(LLAMA_GATE_W), a->dgate, la->xn2,
                            P(LLAMA_GATE_W), N, C, FF);
  llama_cpu_linear_backward(a->dbuf, 1.0f, G(LLAMA_UP_W), a->dup, la->xn2,
                            P(LLAMA_UP_W), N, C, FF);
  llama_cpu_rmsnorm_backward(a->dres, G(LLAMA_LN2_W), a->dbuf, la->res2,
                             P(LLAMA_LN2_W), la->rs2, N, C);
  /* Attention: d res2 -> d y -> dq, dk, dv (before RoPE) -> d xn1 */
  llama_cpu_linear_backward(a->dbuf, 0.0f, G(LLAMA_O_W), a->dres, la->y,
                            P(LLAMA_O_W), N, C, C);
  llama_cpu_attention_backward(a->dq, a->dk, a->dv, a->datt, a->dbuf, la->q,
                               la->k, la->v, la->att, B, T, (int)d.H, (int)d.KV,
                               (int)d.hs);
  llama_cpu_rope(a->dq, a->cos, a->sin, B, T, (int)d.H, (int)d.hs, -1);
  llama_cpu_rope(a->dk, a->cos, a->sin, B, T, (int)d.KV, (int)d.hs, -1);
  llama_cpu_linear_backward(a->dbuf, 0.0f, G(LLAMA_Q_W), a->dq, la->xn1,
                            P(LLAMA_Q_W), N, C, C);
  llama_cpu_linear_backward(a->dbuf, 1.0f, G(LLAMA_K_W), a->dk, la->xn1,
                            P(LLAMA_K_W), N, C, KVD);
  llama_cpu_linear_backward(a->dbuf, 1.0f, G(LLAMA_V_W), a->dv, la->xn1,
                            P(LLAMA_V_W), N, C, KVD);
  llama_cpu_rmsnorm_backward(a->dres, G(LLAMA_LN1_W), a->dbuf, res,
                             P(LLAMA_LN1_W), la->rs1, N, C);
#undef P
#undef G
}

/* The hook calls of one step; a non-zero return stops the pass. */
#define NEED(g, next)                                                          \
  if (cpu_params_need(m, (g), (next)) != 0)                                    \
  return -1
#define DONE(g, next)                                                          \
  if (cpu_params_done(m, (g), (next)) != 0)                                    \
  return -1

/* The stage's input into a->encoded (N,C): the embedding's rows at
 * inputs on the first stage, else a copy of x, the stream that enters
 * it from the stage before. */
static int stage_input(gpt *m, const acts *a, const uint32_t *inputs,
                       const float *x, int N, int C) {
  if (m->stage_first > 0) {
    memcpy(a->encoded, x, (size_t)N * C * sizeof(float));
    return 0;
  }
  NEED(0, 1);
  const float *emb = gpt_p(m, 0);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++)
    memcpy(a->encoded + (size_t)i * C, emb + (size_t)inputs[i] * C,
           (size_t)C * sizeof(float));
  DONE(0, 1);
  return 0;
}

/* The head: res -> model.norm -> logits (N,Vp) -> with targets, the
 * loss. */
static int head_forward(gpt *m, const acts *a, const float *res,
                        const uint32_t *targets, int B, int T, float *loss) {
  const gpt_config *c = &m->cfg;
  int N = B * T, C = c->n_embd, L = c->n_layer;
  int V = c->vocab_size, Vp = c->padded_vocab, tied = !c->untied_head;
  /* After the head, a forward with targets is for training: the
   * backward starts with the head's group again. */
  int after = targets ? (tied ? 0 : L + 1) : -1;
  NEED(L + 1, tied ? 0 : after);
  llama_cpu_rmsnorm(a->xf, a->rsf, res, gpt_p(m, norm_tensor(m)), N, C,
                    c->norm_eps);
  if (tied) {
    DONE(L + 1, 0);
    NEED(0, after);
  }
  /* xf (N,C), head (Vp,C) -> logits (N,Vp) over the real columns; the
   * padding columns are zero. */
  cpu_gemm(0, 1, N, V, C, 1.0f, a->xf, C, gpt_p(m, head_tensor(m)), C, 0.0f,
           a->logits, Vp);
  DONE(tied ? 0 : L + 1, after);
  cpu_forward_end(m, B, T, a->logits, a->lse, a->losses, a->dlogits, targets,
                  loss);
  return 0;
}

/* The forward of layers [stage_first, stage_last) (all of them but in a
 * pipeline stage) from inputs' embeddings or x, with the head when the
 * range ends with the last layer. */
int llama_cpu_forward(gpt *m, const uint32_t *inputs, const float *x,
                      const uint32_t *targets, int B, int T, float *loss,
                      char *err, size_t errlen) {
  const gpt_config *c = &m->cfg;
  dims d = dims_of(c);
  size_t widest = d.FF > d.C ? d.FF : d.C;
  acts a;
  if (cpu_forward_begin(m, inputs, targets, B, T, widest,
                        carve(c, m->recompute, stage_layers(m), NULL, B, T, &a),
                        err, errlen) != 0)
    return -1;
  carve_m(m, B, T, &a);
  llama_cpu_rope_tables(a.cos, a.sin, 0, T, (int)d.hs, c->rope_theta);
  if (stage_input(m, &a, inputs, x, B * T, (int)d.C) != 0)
    goto hook_failed;
  const float *res = a.encoded;
  for (int l = m->stage_first; l < m->stage_last; l++) {
    if (cpu_params_need(m, 1 + l, 2 + l) != 0)
      goto hook_failed;
    layer_acts la = layer_at(m, &a, l, B, T);
    layer_forward(m, &la, res, &a, l, B, T, 1);
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

const float *llama_cpu_logits(const gpt *m) {
  acts a = {0};
  carve_m(m, m->B, m->T, &a);
  return a.logits;
}

const float *llama_cpu_stage_output(const gpt *m) {
  acts a = {0};
  carve_m(m, m->B, m->T, &a);
  return layer_at(m, &a, m->stage_last - 1, m->B, m->T).res3;
}

const float *llama_cpu_stage_input_grad(const gpt *m) {
  acts a = {0};
  carve_m(m, m->B, m->T, &a);
  return a.dres;
}

/* The head's backward: loss -> a->dres, the gradient of the stream that
 * leaves the last layer. */
static int head_backward(gpt *m, const acts *a, float scale) {
  const gpt_config *c = &m->cfg;
  int B = m->B, T = m->T, C = c->n_embd, V = c->vocab_size;
  int Vp = c->padded_vocab, L = c->n_layer, N = B * T, tied = !c->untied_head;
  size_t nf = norm_tensor(m);
  /* loss -> dlogits, in place of the probabilities (one backward per
   * forward, gpt_backward's rule) */
  gpt_cpu_crossentropy_backward(a->dlogits, m->targets, scale / (float)N, N, V,
                                Vp);
  /* dlogits -> dbuf = dlogits head; dhead (V,C) += dlogits^T xf */
  int hg = tied ? 0 : L + 1;
  NEED(hg, tied ? L + 1 : L);
  size_t ht = head_tensor(m);
  cpu_gemm(0, 0, N, C, V, 1.0f, a->dlogits, Vp, gpt_p(m, ht), C, 0.0f, a->dbuf,
           C);
  cpu_gemm(1, 0, V, C, N, 1.0f, a->dlogits, Vp, a->xf, C, 1.0f, gpt_g(m, ht),
           C);
  if (tied) {
    DONE(0, L + 1);
    NEED(L + 1, L);
  }
  memset(a->dres, 0, (size_t)N * C * sizeof(float));
  const float *last =
      L > m->stage_first ? layer_at(m, a, L - 1, B, T).res3 : a->encoded;
  llama_cpu_rmsnorm_backward(a->dres, gpt_g(m, nf), a->dbuf, last, gpt_p(m, nf),
                             a->rsf, N, C);
  DONE(L + 1, L);
  if (m->grad_hook)
    m->grad_hook(m->grad_hook_arg, m->tensors[nf].offset);
  return 0;
}

/* The embedding's rows at the ids += dres; each thread owns a range of
 * channels and walks the positions in order. */
static int embedding_backward(gpt *m, const acts *a) {
  int N = m->B * m->T, C = m->cfg.n_embd, tied = !m->cfg.untied_head;
  if (!tied)
    NEED(0, -1);
  float *demb = gpt_g(m, 0);
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += 16) {
    int c1 = c0 + 16 < C ? c0 + 16 : C;
    for (int i = 0; i < N; i++) {
      const float *dr = a->dres + (size_t)i * C;
      float *we = demb + (size_t)m->inputs[i] * C;
      for (int cc = c0; cc < c1; cc++)
        we[cc] += dr[cc];
    }
  }
  if (!tied)
    DONE(0, -1);
  if (m->grad_hook)
    m->grad_hook(m->grad_hook_arg, 0);
  return 0;
}

/* The backward of the last forward's layers [stage_first, stage_last):
 * from the loss (dy NULL: the range has the head) or from dy, the
 * gradient of the stage's output; down to the embedding's gradient on
 * the first stage, else to the input's gradient, left in dres. */
void llama_cpu_backward(gpt *m, float scale, const float *dy) {
  const gpt_config *c = &m->cfg;
  int B = m->B, T = m->T, N = B * T, tied = !c->untied_head;
  int first = m->stage_first, last = m->stage_last;
  acts a;
  carve_m(m, B, T, &a);
  if (!dy) {
    if (head_backward(m, &a, scale) != 0)
      return;
  } else {
    memcpy(a.dres, dy, (size_t)N * c->n_embd * sizeof(float));
  }
  for (int l = last - 1; l >= first; l--) {
    int next = l > first ? l : (first > 0 || tied ? -1 : 0);
    if (cpu_params_need(m, 1 + l, next) != 0)
      return;
    layer_acts la = layer_at(m, &a, l, B, T);
    const float *res =
        l > first ? layer_at(m, &a, l - 1, B, T).res3 : a.encoded;
    /* Recomputation: the same kernels on the same inputs give the
     * forward's very bits (the last layer's block is still there). */
    if (a.rc == GPT_RECOMPUTE_BLOCK && l < last - 1)
      layer_forward(m, &la, res, &a, l, B, T, 0);
    else if (a.rc == GPT_RECOMPUTE_GELU)
      llama_cpu_swiglu(la.hid, la.gate, la.up, (size_t)N * c->intermediate);
    layer_backward(m, &la, res, &a, l, B, T);
    if (cpu_params_done(m, 1 + l, next) != 0)
      return;
    if (m->grad_hook)
      m->grad_hook(m->grad_hook_arg, m->tensors[llama_ti(l, 0)].offset);
  }
  if (first == 0)
    embedding_backward(m, &a);
}
