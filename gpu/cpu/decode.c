/*
 * decode: the GPT of gpt.h run forward one token at a time with a
 * key/value cache (the contract is gpu/cpu/decode.h). For GPT-2 the math
 * is gpt_cpu.c's (pre-LN blocks, LayerNorm eps 1e-5, tanh GELU, causal
 * attention scaled by 1/sqrt(head size), the head tied to wte), with its
 * LayerNorm and GELU kernels (gpt_cpu.h); for a Llama it is llama_cpu.c's
 * (RMSNorm, RoPE at each row's position in the context, grouped-query
 * attention whose cache holds the KV heads only, SwiGLU), with its
 * kernels (gpt_cpu.h) too. Both on the public parameter layout:
 * each tensor is found by name (gpt_tensor_find), never through
 * gpt_impl.h. It sits with the CPU backend because it is CPU code; the
 * model layer (gpu/model/) calls no backend.
 *
 * A single token's products are matrix-vector ones (cblas_sgemv); the
 * rebuild of the sliding window runs its rows together (cblas_sgemm), so
 * the weights are read once for the half window, not once per token.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "gpt_cpu.h"
#include "model/gpt.h"

/* The tensors of one layer, as pointers into the model's parameters:
 * GPT-2's twelve, or a Llama's nine (llama_names' order). */
typedef struct layer_w {
  const float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  const float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
} layer_w;

/* Offsets (in floats) of those tensors, resolved once by name. */
typedef struct layer_off {
  size_t o[12];
} layer_off;

struct decoder {
  gpt *m;
  int llama; /* the family: 1 Llama, 0 GPT-2 */
  int L, NH, C, hs, T, V, Vp;
  int KV, KVD; /* key/value heads and their width (GPT-2: NH and C) */
  int QW, FW;  /* widths of a qkv row and of an MLP row */
  float eps;   /* Llama: RMSNorm's */
  /* GPT-2: wte, wpe, ln_f (the head is wte); Llama: the embedding,
   * model.norm.weight and the head (lm_head or the embedding) */
  size_t wte, wpe, lnf_w, lnf_b, head;
  layer_off *lo;          /* (L) */
  float *kcache, *vcache; /* (L,T,KVD) each */
  uint32_t *tokens;       /* (T): the context */
  size_t n;               /* tokens in the context */
  /* Scratch for up to T rows at once (the rebuild). */
  float *x;       /* (T,C) residual stream */
  float *ln;      /* (T,C) */
  float *qkv;     /* (T,QW): q, k, v of each row */
  float *atty;    /* (T,C) */
  float *fch;     /* (T,FW): GPT-2's 4C; a Llama's gate and up (2 FF) */
  float *att;     /* (T) scores of one row and head */
  float *cs, *sn; /* (T,hs/2) RoPE of the rows' positions (Llama) */
  float *logits;  /* (Vp) */
};

static const char *const layer_names[12] = {
    "ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
    "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/* A Llama layer's tensors (gpt.h), in the order its o[] holds them. */
enum { LQ, LK, LV, LO, LGATE, LUP, LDOWN, LN1, LN2, LLAMA_N };
static const char *const llama_names[LLAMA_N] = {
    "self_attn.q_proj.weight",        "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",        "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",           "mlp.up_proj.weight",
    "mlp.down_proj.weight",           "input_layernorm.weight",
    "post_attention_layernorm.weight"};

static int find_offset(gpt *m, const char *name, size_t numel, size_t *off,
                       char *err, size_t errlen) {
  const gpt_tensor *t = gpt_tensor_find(m, name);
  if (!t || t->numel != numel) {
    snprintf(err, errlen, "decode: the model has no tensor %s of %zu floats",
             name, numel);
    return -1;
  }
  *off = t->offset;
  return 0;
}

/* The offsets of every tensor the decoder reads, by name. */
static int find_tensors(decoder *d, char *err, size_t errlen) {
  size_t C = (size_t)d->C, T = (size_t)d->T, Vp = (size_t)d->Vp;
  size_t KVD = (size_t)d->KVD, FF = (size_t)d->FW / 2;
  if (d->llama) {
    const gpt_config *c = gpt_get_config(d->m);
    if (find_offset(d->m, "model.embed_tokens.weight", Vp * C, &d->wte, err,
                    errlen) ||
        find_offset(d->m, "model.norm.weight", C, &d->lnf_w, err, errlen) ||
        find_offset(d->m,
                    c->untied_head ? "lm_head.weight"
                                   : "model.embed_tokens.weight",
                    Vp * C, &d->head, err, errlen))
      return -1;
    size_t numel[LLAMA_N] = {C * C,  KVD * C, KVD * C, C * C, FF * C,
                             FF * C, C * FF,  C,       C};
    for (int l = 0; l < d->L; l++)
      for (int k = 0; k < LLAMA_N; k++) {
        char name[80];
        snprintf(name, sizeof name, "model.layers.%d.%s", l, llama_names[k]);
        if (find_offset(d->m, name, numel[k], &d->lo[l].o[k], err, errlen))
          return -1;
      }
    return 0;
  }
  /* Shapes as gpt.h lists them: (in, out) weights, per-layer vectors. */
  size_t numel[12] = {C, C, C * 3 * C, 3 * C, C * C,     C,
                      C, C, C * 4 * C, 4 * C, 4 * C * C, C};
  if (find_offset(d->m, "wte.weight", Vp * C, &d->wte, err, errlen) ||
      find_offset(d->m, "wpe.weight", T * C, &d->wpe, err, errlen) ||
      find_offset(d->m, "ln_f.weight", C, &d->lnf_w, err, errlen) ||
      find_offset(d->m, "ln_f.bias", C, &d->lnf_b, err, errlen))
    return -1;
  for (int l = 0; l < d->L; l++)
    for (int k = 0; k < 12; k++) {
      char name[48];
      snprintf(name, sizeof name, "h.%d.%s", l, layer_names[k]);
      if (find_offset(d->m, name, numel[k], &d->lo[l].o[k], err, errlen) != 0)
        return -1;
    }
  return 0;
}

/* The shape fields of d from the model's config. */
static void set_dims(decoder *d, const gpt_config *c) {
  d->llama = c->family == GPT_FAMILY_LLAMA;
  d->L = c->n_layer;
  d->NH = c->n_head;
  d->C = c->n_embd;
  d->hs = c->n_embd / c->n_head;
  d->T = c->block_size;
  d->V = c->vocab_size;
  d->Vp = c->padded_vocab;
  d->KV = d->llama ? c->n_kv_head : c->n_head;
  d->KVD = d->KV * d->hs;
  d->QW = d->C + 2 * d->KVD;
  d->FW = d->llama ? 2 * c->intermediate : 4 * d->C;
  d->eps = c->norm_eps;
}

int decoder_create(gpt *m, decoder **out, char *err, size_t errlen) {
  decoder *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, errlen, "decode: out of memory (%zu bytes)", sizeof *d);
    return -1;
  }
  d->m = m;
  set_dims(d, gpt_get_config(m));
  size_t C = (size_t)d->C, T = (size_t)d->T, L = (size_t)d->L;
  size_t cache = L * T * (size_t)d->KVD;
  size_t scratch = T * C * 3 + T * (size_t)d->QW + T * (size_t)d->FW + T +
                   T * (size_t)d->hs + (size_t)d->Vp;
  size_t bytes = L * sizeof(layer_off) + 2 * cache * sizeof(float) +
                 T * sizeof(uint32_t) + scratch * sizeof(float);
  d->lo = calloc(L ? L : 1, sizeof *d->lo);
  d->kcache = malloc(cache * sizeof(float));
  d->vcache = malloc(cache * sizeof(float));
  d->tokens = malloc(T * sizeof(uint32_t));
  d->x = malloc(scratch * sizeof(float));
  if (!d->lo || !d->kcache || !d->vcache || !d->tokens || !d->x) {
    snprintf(err, errlen,
             "decode: out of memory: could not allocate %zu bytes for the "
             "key/value cache and scratch",
             bytes);
    decoder_destroy(d);
    return -1;
  }
  d->ln = d->x + T * C;
  d->qkv = d->ln + T * C;
  d->atty = d->qkv + T * (size_t)d->QW;
  d->fch = d->atty + T * C;
  d->att = d->fch + T * (size_t)d->FW;
  d->cs = d->att + T;
  d->sn = d->cs + T * (size_t)(d->hs / 2);
  d->logits = d->sn + T * (size_t)(d->hs / 2);
  if (find_tensors(d, err, errlen) != 0) {
    decoder_destroy(d);
    return -1;
  }
  *out = d;
  return 0;
}

void decoder_destroy(decoder *d) {
  if (!d)
    return;
  free(d->lo);
  free(d->kcache);
  free(d->vcache);
  free(d->tokens);
  free(d->x);
  free(d);
}

void decoder_reset(decoder *d) { d->n = 0; }

size_t decoder_length(const decoder *d) { return d->n; }

static layer_w layer_at(const decoder *d, int l) {
  const float *p = gpt_params(d->m);
  const size_t *o = d->lo[l].o;
  layer_w w = {p + o[0], p + o[1], p + o[2], p + o[3], p + o[4],  p + o[5],
               p + o[6], p + o[7], p + o[8], p + o[9], p + o[10], p + o[11]};
  return w;
}

/* inp (N,IC), w (IC,OC), b (OC) -> out (N,OC) = inp w + b, or out += that
 * when accumulate (the residual stream) */
static void linear(float *out, const float *inp, const float *w, const float *b,
                   int N, int IC, int OC, int accumulate) {
  for (int i = 0; i < N; i++) {
    float *o = out + (size_t)i * OC;
    if (accumulate)
      for (int j = 0; j < OC; j++)
        o[j] += b[j];
    else
      memcpy(o, b, (size_t)OC * sizeof(float));
  }
  if (N == 1)
    /* out (OC) += w^T inp: w is (IC,OC) row-major */
    cblas_sgemv(CblasRowMajor, CblasTrans, IC, OC, 1.0f, w, OC, inp, 1, 1.0f,
                out, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, IC, 1.0f, inp,
                IC, w, OC, 1.0f, out, OC);
}

/* nn.Linear's layout (a Llama's): inp (N,IC), w (OC,IC) -> out (N,OC),
 * row stride ldo, = inp w^T (beta 0) or += that (beta 1). */
static void linear_t(float *out, int ldo, const float *inp, const float *w,
                     int N, int IC, int OC, float beta) {
  if (N == 1)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, w, IC, inp, 1, beta,
                out, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp,
                IC, w, IC, beta, out, ldo);
}

/* Causal attention of the N new rows (positions p0..) over layer l's
 * cache: row i's query heads (in d->qkv, row stride QW) attend to
 * positions 0 .. p0+i, query head h reading key/value head h / (NH/KV);
 * q . k_j * 1/sqrt(hs), softmax, then atty (hs) = sum_j a_j v_j. */
static void attend(decoder *d, int l, size_t p0, int N) {
  int C = d->C, hs = d->hs, KVD = d->KVD, G = d->NH / d->KV;
  const float *kc = d->kcache + (size_t)l * d->T * KVD;
  const float *vc = d->vcache + (size_t)l * d->T * KVD;
  float scale = 1.0f / sqrtf((float)hs);
  for (int i = 0; i < N; i++) {
    size_t np = p0 + (size_t)i + 1;
    for (int h = 0; h < d->NH; h++) {
      const float *q = d->qkv + (size_t)i * d->QW + (size_t)h * hs;
      size_t kvo = (size_t)(h / G) * hs;
      float *a = d->att;
      float mx = -INFINITY;
      for (size_t j = 0; j < np; j++) {
        const float *k = kc + j * KVD + kvo;
        float s = 0.0f;
        for (int e = 0; e < hs; e++)
          s += q[e] * k[e];
        s *= scale;
        a[j] = s;
        mx = s > mx ? s : mx;
      }
      float sum = 0.0f;
      for (size_t j = 0; j < np; j++) {
        a[j] = expf(a[j] - mx);
        sum += a[j];
      }
      float inv = 1.0f / sum;
      float *y = d->atty + (size_t)i * C + (size_t)h * hs;
      memset(y, 0, (size_t)hs * sizeof(float));
      for (size_t j = 0; j < np; j++) {
        const float *v = vc + j * KVD + kvo;
        float p = a[j] * inv;
        for (int e = 0; e < hs; e++)
          y[e] += p * v[e];
      }
    }
  }
}

/* The keys and values of the N new rows (at qkv + C and + C + KVD of each
 * row) into layer l's cache at positions p0.. */
static void cache_rows(decoder *d, int l, size_t p0, int N) {
  size_t KVD = (size_t)d->KVD;
  float *kc = d->kcache + (size_t)l * d->T * KVD;
  float *vc = d->vcache + (size_t)l * d->T * KVD;
  for (int i = 0; i < N; i++) {
    const float *r = d->qkv + (size_t)i * d->QW + d->C;
    memcpy(kc + (p0 + i) * KVD, r, KVD * sizeof(float));
    memcpy(vc + (p0 + i) * KVD, r + KVD, KVD * sizeof(float));
  }
}

/* GPT-2's layer l on the N rows of d->x at positions p0.. */
static void gpt2_layer(decoder *d, int l, size_t p0, int N) {
  int C = d->C;
  layer_w w = layer_at(d, l);
  /* x (N,C) -> ln (N,C) -> qkv (N,3C) */
  gpt_cpu_layernorm(d->ln, NULL, NULL, d->x, w.ln1_w, w.ln1_b, N, C);
  linear(d->qkv, d->ln, w.qkv_w, w.qkv_b, N, C, 3 * C, 0);
  cache_rows(d, l, p0, N);
  attend(d, l, p0, N);
  /* x += atty c_proj + b */
  linear(d->x, d->atty, w.proj_w, w.proj_b, N, C, C, 1);
  /* x (N,C) -> ln (N,C) -> fch (N,4C) -> gelu -> x += fch c_proj + b */
  gpt_cpu_layernorm(d->ln, NULL, NULL, d->x, w.ln2_w, w.ln2_b, N, C);
  linear(d->fch, d->ln, w.fc_w, w.fc_b, N, C, 4 * C, 0);
  gpt_cpu_gelu(d->fch, d->fch, (size_t)N * 4 * C);
  linear(d->x, d->fch, w.fcproj_w, w.fcproj_b, N, 4 * C, C, 1);
}

/* A Llama's layer l on the N rows of d->x at positions p0.., whose RoPE
 * tables are in d->cs, d->sn: llama_cpu.c's layer, row by row. */
static void llama_layer(decoder *d, int l, int N) {
  int C = d->C, KVD = d->KVD, QW = d->QW, FF = d->FW / 2, hs = d->hs;
  const float *p = gpt_params(d->m);
  const size_t *o = d->lo[l].o;
  llama_cpu_rmsnorm(d->ln, NULL, d->x, p + o[LN1], N, C, d->eps);
  linear_t(d->qkv, QW, d->ln, p + o[LQ], N, C, C, 0.0f);
  linear_t(d->qkv + C, QW, d->ln, p + o[LK], N, C, KVD, 0.0f);
  linear_t(d->qkv + C + KVD, QW, d->ln, p + o[LV], N, C, KVD, 0.0f);
  for (int i = 0; i < N; i++) {
    float *r = d->qkv + (size_t)i * QW;
    size_t t = (size_t)i * (hs / 2);
    llama_cpu_rope(r, d->cs + t, d->sn + t, 1, 1, d->NH, hs, 1);
    llama_cpu_rope(r + C, d->cs + t, d->sn + t, 1, 1, d->KV, hs, 1);
  }
  cache_rows(d, l, d->n, N);
  attend(d, l, d->n, N);
  linear_t(d->x, C, d->atty, p + o[LO], N, C, C, 1.0f);
  llama_cpu_rmsnorm(d->ln, NULL, d->x, p + o[LN2], N, C, d->eps);
  /* fch's rows: gate (FF) then up (FF); hid = silu(gate) * up over the
   * gate half, then x += hid down_proj^T. */
  linear_t(d->fch, 2 * FF, d->ln, p + o[LGATE], N, C, FF, 0.0f);
  linear_t(d->fch + FF, 2 * FF, d->ln, p + o[LUP], N, C, FF, 0.0f);
  for (int i = 0; i < N; i++) {
    float *r = d->fch + (size_t)i * 2 * FF;
    llama_cpu_swiglu(r, r, r + FF, (size_t)FF);
  }
  for (int i = 0; i < N; i++)
    linear_t(d->x + (size_t)i * C, C, d->fch + (size_t)i * 2 * FF, p + o[LDOWN],
             1, FF, C, 1.0f);
}

/* Runs the N tokens ids at positions d->n .. d->n+N-1 through the model,
 * appending their keys and values to the cache; with want_logits, the
 * last row's logits go to d->logits. The caller made room (d->n + N <=
 * T) and checked the ids. */
static void forward_rows(decoder *d, const uint32_t *ids, int N,
                         int want_logits) {
  int C = d->C;
  size_t p0 = d->n;
  const float *params = gpt_params(d->m);
  const float *wte = params + d->wte;

  /* ids (N) -> x (N,C) = wte[id] (+ wpe[pos], GPT-2) */
  for (int i = 0; i < N; i++) {
    const float *we = wte + (size_t)ids[i] * C;
    float *o = d->x + (size_t)i * C;
    if (d->llama) {
      memcpy(o, we, (size_t)C * sizeof(float));
      continue;
    }
    const float *pe = params + d->wpe + (p0 + i) * C;
    for (int c = 0; c < C; c++)
      o[c] = we[c] + pe[c];
  }
  if (d->llama)
    llama_cpu_rope_tables(d->cs, d->sn, (int)p0, N, d->hs,
                          gpt_get_config(d->m)->rope_theta);
  for (int l = 0; l < d->L; l++) {
    if (d->llama)
      llama_layer(d, l, N);
    else
      gpt2_layer(d, l, p0, N);
  }
  d->n += (size_t)N;
  if (!want_logits)
    return;
  /* Last row: x (C) -> final norm (C) -> logits (Vp) = head[:V] x,
   * padding 0; the head is wte (GPT-2), or a Llama's lm_head or
   * embedding. */
  const float *last = d->x + (size_t)(N - 1) * C;
  const float *head = wte;
  if (d->llama) {
    llama_cpu_rmsnorm(d->ln, NULL, last, params + d->lnf_w, 1, C, d->eps);
    head = params + d->head;
  } else {
    gpt_cpu_layernorm(d->ln, NULL, NULL, last, params + d->lnf_w,
                      params + d->lnf_b, 1, C);
  }
  cblas_sgemv(CblasRowMajor, CblasNoTrans, d->V, C, 1.0f, head, C, d->ln, 1,
              0.0f, d->logits, 1);
  for (int v = d->V; v < d->Vp; v++)
    d->logits[v] = 0.0f;
}

const float *decoder_push(decoder *d, uint32_t token, char *err,
                          size_t errlen) {
  if (token >= (uint32_t)d->V) {
    snprintf(err, errlen,
             "decode: token %u is not a token id (vocab_size is %d)", token,
             d->V);
    return NULL;
  }
  if (d->n == (size_t)d->T) {
    /* The window is full: it slides to the last T/2 tokens, this one
     * included. The T/2 - 1 kept ones are read again, as one batch, at
     * their new positions. */
    size_t keep = (size_t)d->T / 2 > 0 ? (size_t)d->T / 2 : 1;
    size_t old = keep - 1;
    memmove(d->tokens, d->tokens + d->n - old, old * sizeof(uint32_t));
    d->n = 0;
    if (old)
      forward_rows(d, d->tokens, (int)old, 0);
  }
  d->tokens[d->n] = token;
  forward_rows(d, &token, 1, 1);
  return d->logits;
}
