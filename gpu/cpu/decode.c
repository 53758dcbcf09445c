/*
 * decode: the GPT of gpt.h run forward one token at a time with a
 * key/value cache (the contract is gpu/cpu/decode.h). The math is
 * gpt_cpu.c's (pre-LN blocks, LayerNorm eps 1e-5, tanh GELU, causal
 * attention scaled by 1/sqrt(head size), the head tied to wte), with its
 * LayerNorm and GELU kernels (gpt_cpu.h), on the public parameter layout:
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

/* The tensors of one layer, as pointers into the model's parameters. */
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
  int L, NH, C, hs, T, V, Vp;
  size_t wte, wpe, lnf_w, lnf_b; /* offsets */
  layer_off *lo;                 /* (L) */
  float *kcache, *vcache;        /* (L,T,C) each */
  uint32_t *tokens;              /* (T): the context */
  size_t n;                      /* tokens in the context */
  /* Scratch for up to T rows at once (the rebuild). */
  float *x;      /* (T,C) residual stream */
  float *ln;     /* (T,C) */
  float *qkv;    /* (T,3C) */
  float *atty;   /* (T,C) */
  float *fch;    /* (T,4C) */
  float *att;    /* (T) scores of one row and head */
  float *logits; /* (Vp) */
};

static const char *const layer_names[12] = {
    "ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
    "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

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

int decoder_create(gpt *m, decoder **out, char *err, size_t errlen) {
  const gpt_config *c = gpt_get_config(m);
  size_t C = (size_t)c->n_embd, T = (size_t)c->block_size;
  size_t L = (size_t)c->n_layer, Vp = (size_t)c->padded_vocab;
  if (c->family != GPT_FAMILY_GPT2) {
    /* Its KV cache and layers are GPT-2's (learned positions, LayerNorm,
     * GELU): a Llama is refused by name, not read as one. */
    snprintf(err, errlen,
             "decode: the decoder (generate, samples) runs the GPT-2 family "
             "only; this model is a Llama");
    return -1;
  }
  decoder *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, errlen, "decode: out of memory (%zu bytes)", sizeof *d);
    return -1;
  }
  d->m = m;
  d->L = c->n_layer;
  d->NH = c->n_head;
  d->C = c->n_embd;
  d->hs = c->n_embd / c->n_head;
  d->T = c->block_size;
  d->V = c->vocab_size;
  d->Vp = c->padded_vocab;
  size_t cache = L * T * C;
  size_t scratch = T * C * 3 + T * 3 * C + T * 4 * C + T + Vp;
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
  d->atty = d->qkv + T * 3 * C;
  d->fch = d->atty + T * C;
  d->att = d->fch + T * 4 * C;
  d->logits = d->att + T;

  /* Shapes as gpt.h lists them: (in, out) weights, per-layer vectors. */
  size_t numel[12] = {C, C, C * 3 * C, 3 * C, C * C,     C,
                      C, C, C * 4 * C, 4 * C, 4 * C * C, C};
  if (find_offset(m, "wte.weight", Vp * C, &d->wte, err, errlen) ||
      find_offset(m, "wpe.weight", T * C, &d->wpe, err, errlen) ||
      find_offset(m, "ln_f.weight", C, &d->lnf_w, err, errlen) ||
      find_offset(m, "ln_f.bias", C, &d->lnf_b, err, errlen)) {
    decoder_destroy(d);
    return -1;
  }
  for (size_t l = 0; l < L; l++)
    for (int k = 0; k < 12; k++) {
      char name[48];
      snprintf(name, sizeof name, "h.%zu.%s", l, layer_names[k]);
      if (find_offset(m, name, numel[k], &d->lo[l].o[k], err, errlen) != 0) {
        decoder_destroy(d);
        return -1;
      }
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

/* Runs the N tokens ids at positions d->n .. d->n+N-1 through the model,
 * appending their keys and values to the cache; with want_logits, the
 * last row's logits go to d->logits. The caller made room (d->n + N <=
 * T) and checked the ids. */
static void forward_rows(decoder *d, const uint32_t *ids, int N,
                         int want_logits) {
  int C = d->C, NH = d->NH, hs = d->hs, T = d->T;
  size_t p0 = d->n;
  const float *params = gpt_params(d->m);
  const float *wte = params + d->wte, *wpe = params + d->wpe;
  float scale = 1.0f / sqrtf((float)hs);

  /* ids (N) -> x (N,C) = wte[id] + wpe[pos] */
  for (int i = 0; i < N; i++) {
    const float *we = wte + (size_t)ids[i] * C;
    const float *pe = wpe + (p0 + i) * C;
    float *o = d->x + (size_t)i * C;
    for (int c = 0; c < C; c++)
      o[c] = we[c] + pe[c];
  }
  for (int l = 0; l < d->L; l++) {
    layer_w w = layer_at(d, l);
    float *kc = d->kcache + (size_t)l * T * C;
    float *vc = d->vcache + (size_t)l * T * C;
    /* x (N,C) -> ln (N,C) -> qkv (N,3C) */
    gpt_cpu_layernorm(d->ln, NULL, NULL, d->x, w.ln1_w, w.ln1_b, N, C);
    linear(d->qkv, d->ln, w.qkv_w, w.qkv_b, N, C, 3 * C, 0);
    /* Keys and values of the new rows into the cache (positions p0..). */
    for (int i = 0; i < N; i++) {
      const float *r = d->qkv + (size_t)i * 3 * C;
      memcpy(kc + (p0 + i) * C, r + C, (size_t)C * sizeof(float));
      memcpy(vc + (p0 + i) * C, r + 2 * C, (size_t)C * sizeof(float));
    }
    /* Row i attends to positions 0 .. p0+i: q (hs) . k_j (hs) * scale,
     * softmax, then atty (hs) = sum_j a_j v_j. */
    for (int i = 0; i < N; i++) {
      size_t np = p0 + (size_t)i + 1;
      for (int h = 0; h < NH; h++) {
        const float *q = d->qkv + (size_t)i * 3 * C + (size_t)h * hs;
        float *a = d->att;
        float mx = -INFINITY;
        for (size_t j = 0; j < np; j++) {
          const float *k = kc + j * C + (size_t)h * hs;
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
          const float *v = vc + j * C + (size_t)h * hs;
          float p = a[j] * inv;
          for (int e = 0; e < hs; e++)
            y[e] += p * v[e];
        }
      }
    }
    /* x += atty c_proj + b */
    linear(d->x, d->atty, w.proj_w, w.proj_b, N, C, C, 1);
    /* x (N,C) -> ln (N,C) -> fch (N,4C) -> gelu -> x += fch c_proj + b */
    gpt_cpu_layernorm(d->ln, NULL, NULL, d->x, w.ln2_w, w.ln2_b, N, C);
    linear(d->fch, d->ln, w.fc_w, w.fc_b, N, C, 4 * C, 0);
    gpt_cpu_gelu(d->fch, d->fch, (size_t)N * 4 * C);
    linear(d->x, d->fch, w.fcproj_w, w.fcproj_b, N, 4 * C, C, 1);
  }
  d->n += (size_t)N;
  if (!want_logits)
    return;
  /* Last row: x (C) -> ln_f (C) -> logits (Vp) = wte[:V] x, padding 0 */
  const float *last = d->x + (size_t)(N - 1) * C;
  gpt_cpu_layernorm(d->ln, NULL, NULL, last, params + d->lnf_w,
                    params + d->lnf_b, 1, C);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, d->V, C, 1.0f, wte, C, d->ln, 1,
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
