/*
 * gpt_cuda: the models of gpu/model/gpt.h (GPT-2 and Llama families)
 * trained on one GPU in mixed precision (see gpt_cuda.h). The passes are
 * gpu/cpu/gpt_cpu.c's and llama_cpu.c's, op for op, through the
 * launchers of kernels.cuh; the output head's products (which need the
 * (Vp,C) head transposed, a shape kernels.cuh's matmuls do not take) go
 * through cuBLASLt here.
 *
 * Device memory is one cudaMalloc, carved (carve below) into:
 *   master (nm) f32, params (padded) bf16, grads (ngrads) f32, optimizer
 *   state (AdamW 2nm, Lion nm) f32, where nm is the model's np floats, or
 *   a gang rank's shard (gpt_cuda_options.shard_n), padded >= np, and
 *   ngrads = padded, or nm where the gradients are the shard's alone
 *   (grad_shard: ZeRO stage 2; backward adds each group's gradients where
 *   the parameter hook puts them). ZeRO stage 3's pieces: params and
 *   grads are the shard's nm too, and forward and backward read each
 *   group where the parameter hook puts it;
 *   resid (L+1) x (N,C) bf16: the residual stream at each block's input
 *   and the last block's output, kept in every recompute mode;
 *   layer sets (L of them; one with recompute: block), each
 *     ln1 (N,C) ln1_mean ln1_rstd (N) qkv (N,3C) atty (N,C)
 *     lse (B,NH,T) res2 (N,C) ln2 (N,C) ln2_mean ln2_rstd (N)
 *     fch_pre (N,4C) [fch_gelu (N,4C), per layer only with recompute none]
 *   fch_gelu (N,4C) shared (recompute gelu and block), proj (N,C),
 *   lnf (N,C) lnf_mean lnf_rstd (N), logits (N,Vp) bf16, losses (N),
 *   2 device scalars, dresid dbuf (N,C) dqkv (N,3C) d4c (N,4C), the
 *   kernels' scratch, the token ids (N) x 2.
 * with N = B*T of the largest micro-batch. With activation slots
 * (gpt_cuda_options.slots) each slot has its own resid, layer sets,
 * lnf, logits, losses, scalars and ids (act_slot); proj, the backward's
 * buffers and the scratch are shared. The Llama family (widths of
 * fw_of) has no LayerNorm means; its qkv is the attention's (N,3C) after
 * RoPE and GQA's layout step, fch_pre the (N,2I) gate and up products,
 * fch_gelu the (N,I) SwiGLU output, d4c (N, max(3I, C+2KVD)) the MLP's
 * and the q/k/v product's gradients, and RoPE's cos and sin tables
 * (T,hs/2) FP32 come last. A tensor shard (gpt_cuda_options.tp, GPT-2)
 * has the widths of its heads (3C, C and NH above divided by the
 * ranks), MLP columns (4C) and vocabulary rows (Vp), its parameters the
 * shard's, and the FP32 buffers of its collectives after the rest:
 * (N,C), the row maxima (N) and every rank's, their maximum (N) and the
 * cross-entropy's sums (2N).
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.cuh"

extern "C" {
#include "cpu/gpt_cpu.h" /* llama_cpu_rope_tables: the CPU's very angles */
#include "model/gpt.h"
#include "model/gpt_impl.h"
#include "optim/optim.h"
}
#include "gpt_cuda.h"

/* ---- Errors ---- */

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* A CUDA runtime call: on error, -1 with file:line, the call and CUDA's
 * message. */
#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess)                                                     \
      return fail(err, errlen, "gpt_cuda: %s:%d: %s: %s", __FILE__, __LINE__,  \
                  #call, cudaGetErrorString(e_));                              \
  } while (0)
/* A cuBLASLt call. */
#define LT(call)                                                               \
  do {                                                                         \
    cublasStatus_t s_ = (call);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                           \
      return fail(err, errlen, "gpt_cuda: %s:%d: %s: %s (%d)", __FILE__,       \
                  __LINE__, #call, cublasLtGetStatusString(s_), (int)s_);      \
  } while (0)
/* A kernels.cuh launcher: it wrote its own message into err. */
#define KK(call)                                                               \
  do {                                                                         \
    if ((call) != 0)                                                           \
      return -1;                                                               \
  } while (0)

/* ---- Names ---- */

extern "C" int gpt_recompute_parse(const char *name, gpt_recompute *out) {
  static const char *names[] = {"none", "gelu", "block"};
  for (int i = 0; i < 3; i++)
    if (name && strcmp(name, names[i]) == 0) {
      *out = (gpt_recompute)i;
      return 0;
    }
  return -1;
}

extern "C" const char *gpt_recompute_name(gpt_recompute r) {
  return r == GPT_RECOMPUTE_GELU    ? "gelu"
         : r == GPT_RECOMPUTE_BLOCK ? "block"
                                    : "none";
}

/* ---- The carved buffers ---- */

typedef struct layer_bufs {
  floatX *ln1, *qkv, *atty, *res2, *ln2, *fch_pre, *fch_gelu;
  float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;
} layer_bufs;

/* What one forward keeps for its backward (gpt_cuda_options.slots: a
 * pipeline stage's micro-batches in flight, each in its own slot): the
 * activations, the logits, the loss, the ids, and the pass's state. The
 * gpt_cuda's fields of these names are the current slot's; set_slot
 * swaps them. The backward's buffers (dresid, dbuf, dqkv, d4c), proj and
 * the scratch are shared: a pass uses them only while it runs. */
#define SLOT_FIELDS(X)                                                         \
  X(floatX *, resid)                                                           \
  X(layer_bufs *, layers)                                                      \
  X(floatX *, lnf)                                                             \
  X(float *, lnf_mean)                                                         \
  X(float *, lnf_rstd)                                                         \
  X(floatX *, logits)                                                          \
  X(float *, losses)                                                           \
  X(float *, scalars)                                                          \
  X(int *, ids)                                                                \
  X(int *, tgts)                                                               \
  X(int *, ids_host)                                                           \
  X(int, B)                                                                    \
  X(int, T)                                                                    \
  X(int, have_loss)                                                            \
  X(int, logits_valid)                                                         \
  X(int, stage_train)
typedef struct act_slot {
#define X(type, name) type name;
  SLOT_FIELDS(X)
#undef X
} act_slot;

/* A contiguous run of tensors with one decay flag: one optimizer launch. */
typedef struct opt_run {
  size_t offset, numel;
  int decay;
} opt_run;

struct gpt_cuda {
  gpt_config cfg;
  gpt_cuda_options o;
  size_t np;                /* floats of the parameter layout */
  size_t lo, nm;            /* the master weights and the optimizer state
                               are the flat range [lo, lo + nm): [0, np)
                               or a gang rank's shard */
  size_t mlo;               /* with pieces: the master weights are the
                               shard's [mlo, mlo + nm) (master_lo) */
  size_t padded;            /* elements of params (>= np) */
  size_t ngrads;            /* floats of grads: padded, or nm when they
                               are the shard's alone (grad_shard, pieces) */
  size_t *off;              /* each tensor's offset (gpt.h's order) */
  size_t ntensors;
  opt_run *runs;
  size_t nruns;
  kern_ctx k;
  int have_k;
  char attention[400]; /* which attention (o.B, o.T) runs on, and why */
  char *base;               /* the one allocation */
  uint64_t bytes;
  float *master, *grads, *ostate;
  floatX *params;
  floatX *resid;            /* (L+1) x Nmax*C */
  layer_bufs *layers;       /* L entries (all the same set with block) */
  floatX *proj, *lnf, *logits, *dresid, *dbuf, *dqkv, *d4c;
  float *lnf_mean, *lnf_rstd, *losses, *scalars;
  float *rope_cs, *rope_sn; /* (o.T, hs/2) each; Llama only */
  int llama;                /* the Llama family (else GPT-2) */
  size_t norm_t, head_t;    /* tensor indices of the final norm's weight
                               and of the head (tied: the embedding) */
  int head_grp;             /* the head's group: 0 tied, L + 1 untied */
  void *scratch;
  size_t scratch_bytes;
  int *ids, *tgts;          /* device (Nmax) */
  int *ids_host;            /* host copy of the last forward's inputs */
  int B, T;                 /* of the last forward; 0 before any */
  int have_loss;            /* the last forward had targets, not yet
                               backpropagated */
  int stage_first, stage_last; /* forward's layers (gpt_cuda_set_stage;
                                  0, L: the whole model) */
  int act_first, act_last;     /* the layers the slots keep activations of
                                  (gpt_cuda_options.layers_first / _last) */
  int stage_train;             /* the last pass was a gpt_cuda_forward_stage
                                  not yet backpropagated */
  int logits_valid;         /* logits hold the last forward's logits */
  float grad_scale;         /* clipping's, for the next step */
  uint64_t t;
  void (*grad_hook)(void *arg, size_t final_from);
  void *grad_hook_arg;
  act_slot *slots; /* o.slots of them (at least 1); the fields above */
  int nslots, cur; /* of the current one, cur, are its own */
  /* The parameter groups (gpt.h): each one's flat offset, and where the
   * engine reads its BF16 parameters and adds its gradients. */
  size_t ngroups;
  size_t *goff;
  floatX **gp;
  float **gg;
  gpt_cuda_piece *pieces; /* stage 3's (gpt_cuda_options); else NULL */
  size_t npieces;
  gpt_param_hook_fn param_hook;
  void *param_hook_arg;
  /* Tensor parallel (gpt_cuda_options.tp): rank tpk of tpr (1: none);
   * the local widths: the attention's Cl (NHl heads), the MLP's Fl, the
   * vocabulary rows Vl from id vlo, of which Vv are real; the FP32
   * buffers of the collectives: tpbuf (N,C), the row maxima (N) and
   * every rank's (tpr,N), their maximum (N), the sums (2N). */
  int tpr, tpk, Cl, NHl, Fl, Vl, vlo, Vv;
  int KVl; /* a Llama's key/value heads here */
  float *tpbuf, *tpmax, *tpmax_all, *tpgmax, *tpred;
};

/* The allocation is carved in this order; with base NULL only counted.
 * Every piece starts on a 256-byte boundary (cuBLASLt and vector loads
 * want 16; 256 keeps each on its own cache sectors). */
typedef struct carver {
  char *base;
  uint64_t off;
} carver;

static void *take(carver *c, uint64_t bytes) {
  c->off = (c->off + 255) & ~(uint64_t)255;
  void *p = c->base ? c->base + c->off : NULL;
  c->off += bytes;
  return p;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* A layer's activation widths, per row: fc the MLP's first product
 * (GPT-2 4C; Llama gate and up, 2I), hid its activation (4C; I), d4c
 * the backward's wide gradient buffer (4C; Llama the MLP's 2I gate and
 * up gradients and I hidden gradient, or the q/k/v product's C + 2KVD),
 * qkv_kv the q/k/v product (3C; C + 2KVD). */
typedef struct widths {
  size_t fc, hid, d4c, qkv_kv;
} widths;

static widths fw_of(const gpt_config *cfg) {
  size_t C = cfg->n_embd, I = cfg->intermediate;
  widths w = {4 * C, 4 * C, 4 * C, 3 * C};
  if (cfg->family == GPT_FAMILY_LLAMA) {
    w.qkv_kv = C + 2 * (size_t)cfg->n_kv_head * (C / cfg->n_head);
    w.fc = 2 * I;
    w.hid = I;
    w.d4c = max_sz(3 * I, w.qkv_kv);
  }
  return w;
}

/* Scratch the kernels want for (B,T): the largest of their asks, since
 * they run one after the other on one stream. */
static size_t scratch_need(const gpt_config *cfg, int B, int T, size_t np,
                           int sm) {
  int C = cfg->n_embd, NH = cfg->n_head, N = B * T;
  size_t s = kern_encoder_backward_scratch_bytes(B, T, C);
  s = max_sz(s, kern_layernorm_backward_scratch_bytes(N, C, sm));
  s = max_sz(s, kern_matmul_backward_scratch_bytes(N, C, sm));
  s = max_sz(s, kern_matmul_backward_scratch_bytes(N, 3 * C, sm));
  s = max_sz(s, kern_matmul_backward_scratch_bytes(N, 4 * C, sm));
  s = max_sz(s, kern_attention_backward_scratch_bytes(B, T, C, NH));
  s = max_sz(s, kern_norm_scratch_bytes(np, sm));
  s = max_sz(s, kern_norm_scratch_bytes((size_t)N, sm));
  return s;
}

/* A tensor shard's (a GPT-2's) activations are its heads', MLP
 * columns' and vocabulary rows': Ca, NHa, the widths and Vl of them
 * (tpr ranks; 1: the whole model's). */
static void shard_widths(const gpt_config *cfg, int tpr, widths *w, size_t *Ca,
                         size_t *NHa, size_t *Vl) {
  size_t R = tpr > 1 ? (size_t)tpr : 1;
  *w = fw_of(cfg);
  *Ca = (size_t)cfg->n_embd / R;
  *NHa = (size_t)cfg->n_head / R;
  *Vl = (size_t)cfg->padded_vocab / R;
  w->fc /= R;
  w->hid /= R;
  w->d4c /= R;
}

/* The layers whose activations the slots keep, [*first, *last)
 * (gpt_cuda_options.layers_first / _last; all of them unless set). */
static void act_layers(const gpt_config *cfg, const gpt_cuda_options *o,
                       int *first, int *last) {
  *first = o->layers_last ? o->layers_first : 0;
  *last = o->layers_last ? o->layers_last : cfg->n_layer;
}

/* Carves (or counts, sl NULL) one slot's activations for (B,T) into
 * sl (whose layers and ids_host are the caller's host arrays): the
 * stream and the layer buffers of layers [first, last), the head's
 * when last is the model's last. */
static void carve_slot(carver *c, const gpt_config *cfg, int B, int T,
                       gpt_recompute rc, int tpr, int first, int last,
                       act_slot *sl) {
  size_t C = cfg->n_embd, L = (size_t)(last - first), N = (size_t)B * T;
  const int head = last == cfg->n_layer;
  const int llama = cfg->family == GPT_FAMILY_LLAMA;
  widths w;
  size_t Ca, NHa, Vl;
  shard_widths(cfg, tpr, &w, &Ca, &NHa, &Vl);
  floatX *resid = (floatX *)take(c, (L + 1) * N * C * 2);
  size_t nsets = rc == GPT_RECOMPUTE_BLOCK ? 1 : L;
  floatX *shared_gelu = NULL;
  if (rc != GPT_RECOMPUTE_NONE)
    shared_gelu = (floatX *)take(c, N * w.hid * 2);
  for (size_t s = 0; s < nsets; s++) {
    layer_bufs lb;
    lb.ln1 = (floatX *)take(c, N * C * 2);
    lb.ln1_mean = llama ? NULL : (float *)take(c, N * 4);
    lb.ln1_rstd = (float *)take(c, N * 4);
    lb.qkv = (floatX *)take(c, N * 3 * Ca * 2);
    lb.atty = (floatX *)take(c, N * Ca * 2);
    lb.lse = (float *)take(c, (size_t)B * NHa * T * 4);
    lb.res2 = (floatX *)take(c, N * C * 2);
    lb.ln2 = (floatX *)take(c, N * C * 2);
    lb.ln2_mean = llama ? NULL : (float *)take(c, N * 4);
    lb.ln2_rstd = (float *)take(c, N * 4);
    lb.fch_pre = (floatX *)take(c, N * w.fc * 2);
    lb.fch_gelu = rc == GPT_RECOMPUTE_NONE ? (floatX *)take(c, N * w.hid * 2)
                                           : shared_gelu;
    if (sl) {
      if (rc == GPT_RECOMPUTE_BLOCK)
        for (size_t l = 0; l < L; l++)
          sl->layers[first + l] = lb;
      else
        sl->layers[first + s] = lb;
    }
  }
  floatX *lnf = head ? (floatX *)take(c, N * C * 2) : NULL;
  float *lnf_mean = llama || !head ? NULL : (float *)take(c, N * 4);
  float *lnf_rstd = head ? (float *)take(c, N * 4) : NULL;
  floatX *logits = head ? (floatX *)take(c, N * Vl * 2) : NULL;
  float *losses = (float *)take(c, N * 4);
  float *scalars = (float *)take(c, 2 * 4);
  int *ids = (int *)take(c, N * 4);
  int *tgts = (int *)take(c, N * 4);
  if (!sl)
    return;
  sl->resid = resid;
  sl->lnf = lnf;
  sl->lnf_mean = lnf_mean;
  sl->lnf_rstd = lnf_rstd;
  sl->logits = logits;
  sl->losses = losses;
  sl->scalars = scalars;
  sl->ids = ids;
  sl->tgts = tgts;
}

/* Activation slots of o: o->slots, at least one. */
static int slots_of(const gpt_cuda_options *o) {
  return o->slots > 1 ? o->slots : 1;
}

/* Slot i's fields become g's, the current slot's saved first (save 0:
 * g's are not a slot's yet, at create). */
static void load_slot(gpt_cuda *g, int i, int save) {
  act_slot *cur = &g->slots[g->cur], *to = &g->slots[i];
#define X(type, name) cur->name = g->name;
  if (save) {
    SLOT_FIELDS(X)
  }
#undef X
#define X(type, name) g->name = to->name;
  SLOT_FIELDS(X)
#undef X
  g->cur = i;
}

/* Every slot's pass forgotten (new weights, a new stage): nothing left
 * to backpropagate or read. */
static void forget_passes(gpt_cuda *g) {
  for (int i = 0; i < g->nslots; i++) {
    act_slot *sl = i == g->cur ? NULL : &g->slots[i];
    if (sl)
      sl->B = sl->T = sl->have_loss = sl->logits_valid = sl->stage_train = 0;
  }
  g->B = g->T = 0;
  g->have_loss = g->logits_valid = g->stage_train = 0;
}

/* Carves (or counts) everything for (B,T) with o's activation slots
 * (of its layers), recompute and optimizer; the part sizes go to mem
 * when not NULL. */
static uint64_t carve(const gpt_config *cfg, const gpt_cuda_options *o,
                      size_t np, size_t nm, size_t padded, size_t ngrads, int B,
                      int T, int sm, int tpr, struct gpt_cuda *g,
                      gpt_memory *mem) {
  carver c = {g ? g->base : NULL, 0};
  gpt_recompute rc = o->recompute;
  int nslots = slots_of(o), first, last;
  optim_kind kind = o->opt.kind;
  act_layers(cfg, o, &first, &last);
  size_t C = cfg->n_embd, NH = cfg->n_head, N = (size_t)B * T;
  const int llama = cfg->family == GPT_FAMILY_LLAMA;
  widths w;
  size_t Ca, NHa, Vl;
  shard_widths(cfg, tpr, &w, &Ca, &NHa, &Vl);
  float *master = (float *)take(&c, nm * 4);
  floatX *params = (floatX *)take(&c, padded * 2);
  uint64_t p_bytes = c.off;
  float *grads = (float *)take(&c, ngrads * 4);
  uint64_t g_bytes = c.off - p_bytes;
  size_t nst = optim_state_floats_for(kind, nm);
  float *ostate = (float *)take(&c, nst * 4);
  uint64_t o_bytes = c.off - p_bytes - g_bytes;
  uint64_t a_start = c.off;

  for (int sl = 0; sl < nslots; sl++)
    carve_slot(&c, cfg, B, T, rc, tpr, first, last, g ? &g->slots[sl] : NULL);
  floatX *proj = (floatX *)take(&c, N * C * 2);
  floatX *dresid = (floatX *)take(&c, N * C * 2);
  floatX *dbuf = (floatX *)take(&c, N * C * 2);
  floatX *dqkv = (floatX *)take(&c, N * 3 * Ca * 2);
  floatX *d4c = (floatX *)take(&c, N * w.d4c * 2);
  size_t sb = scratch_need(cfg, B, T, ngrads, sm);
  void *scratch = take(&c, sb);
  size_t rope_n = llama ? (size_t)T * (C / NH / 2) : 0;
  float *rope_cs = llama ? (float *)take(&c, rope_n * 4) : NULL;
  float *rope_sn = llama ? (float *)take(&c, rope_n * 4) : NULL;
  /* Tensor parallel's collectives' buffers (FP32). */
  size_t tn = tpr > 1 ? N : 0;
  float *tpbuf = (float *)take(&c, tn * C * 4);
  float *tpmax = (float *)take(&c, tn * 4);
  float *tpmax_all = (float *)take(&c, tn * tpr * 4);
  float *tpgmax = (float *)take(&c, tn * 4);
  float *tpred = (float *)take(&c, 2 * tn * 4);
  uint64_t total = (c.off + 255) & ~(uint64_t)255;
  if (g) {
    g->master = master;
    g->params = params;
    g->grads = grads;
    g->ostate = ostate;
    g->proj = proj;
    g->dresid = dresid;
    g->dbuf = dbuf;
    g->dqkv = dqkv;
    g->d4c = d4c;
    g->scratch = scratch;
    g->scratch_bytes = sb;
    g->rope_cs = rope_cs;
    g->rope_sn = rope_sn;
    g->tpbuf = tpbuf;
    g->tpmax = tpmax;
    g->tpmax_all = tpmax_all;
    g->tpgmax = tpgmax;
    g->tpred = tpred;
  }
  if (mem) {
    mem->params = p_bytes;
    mem->grads = g_bytes;
    mem->optim = o_bytes;
    mem->acts = total - a_start;
    mem->total = total;
  }
  return total;
}

/* cuBLASLt's workspace (kern_ctx_init's): part of what a run takes. */
#define LT_WORKSPACE_BYTES ((uint64_t)32 << 20)

/* SMs of the device, for the kernels' scratch sizes; H100 SXM's 132 when
 * it cannot be read (an estimate on a machine without the device). */
static int device_sms(int device) {
  int sm = 0;
  if (cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      sm <= 0) {
    cudaGetLastError();
    sm = 132;
  }
  return sm;
}

/* The master weights' floats, the BF16 parameters' padded size and the
 * gradients' floats for options o and a model of np parameters
 * (gpt_cuda_options.shard_n, padded, grad_shard; stage 3's pieces: the
 * shard's floats for all three, but for the master weights of a window,
 * master_n). */
static void shard_sizes(const gpt_cuda_options *o, size_t np, size_t *nm,
                        size_t *padded, size_t *ngrads) {
  *nm = o->npieces && o->master_n ? o->master_n : o->shard_n ? o->shard_n : np;
  *padded = o->npieces ? o->shard_n : o->padded > np ? o->padded : np;
  *ngrads = o->grad_shard && o->shard_n ? o->shard_n : *padded;
}

extern "C" void gpt_cuda_memory_estimate(const gpt_config *cfg, int B, int T,
                                         const gpt_cuda_options *o,
                                         gpt_memory *out) {
  size_t np = o->tp.ranks > 1 ? o->tp.n : gpt_config_num_params(cfg);
  size_t nm, padded, ngrads;
  shard_sizes(o, np, &nm, &padded, &ngrads);
  carve(cfg, o, np, nm, padded, ngrads, B, T, device_sms(o->device),
        o->tp.ranks, NULL, out);
  out->acts += LT_WORKSPACE_BYTES;
  out->total += LT_WORKSPACE_BYTES;
}

/* ---- Devices ---- */

extern "C" int gpt_cuda_available(char *why, size_t whylen) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorInsufficientDriver)
      snprintf(why, whylen,
               "no usable NVIDIA driver on this machine (libcuda.so.1 is "
               "missing or older than CUDA runtime %d.%d)",
               CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    else if (e == cudaErrorNoDevice)
      snprintf(why, whylen, "the NVIDIA driver sees no CUDA device");
    else
      snprintf(why, whylen, "CUDA reports no usable device: %s",
               cudaGetErrorString(e));
    return 0;
  }
  if (n < 1) {
    snprintf(why, whylen, "0 CUDA devices");
    return 0;
  }
  snprintf(why, whylen, "%d CUDA device%s", n, n == 1 ? "" : "s");
  return 1;
}

extern "C" int gpt_cuda_device_name(int device, char *out, size_t outlen,
                                    char *err, size_t errlen) {
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, device));
  snprintf(out, outlen, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major,
           p.minor, p.multiProcessorCount,
           (double)p.totalGlobalMem / (1 << 30));
  return 0;
}

/* ---- cuBLASLt for the tied head ----
 * Row-major C (M,N) = op(A) op(B) (+ beta C), A and B BF16, C BF16 or FP32,
 * FP32 accumulation. cuBLASLt is column-major, where a row-major X is X^T:
 * so it computes C^T = op(B)^T op(A)^T, i.e. with the operands swapped. */
static int gemm_rm(struct gpt_cuda *g, int ta, int tb, int M, int N, int K,
                   const floatX *A, int lda, const floatX *B, int ldb,
                   void *Cm, int ldc, int c_fp32, float alpha, float beta,
                   char *err, size_t errlen) {
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  int rc = -1;
  cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* on B */
  cublasOperation_t opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* on A */
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  cudaDataType_t ct = c_fp32 ? CUDA_R_32F : CUDA_R_16BF;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t ws = g->k.lt_workspace_bytes;
#define LTG(call)                                                              \
  do {                                                                         \
    cublasStatus_t s_ = (call);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      fail(err, errlen, "gpt_cuda: %s:%d: %s: %s (%d)", __FILE__, __LINE__,    \
           #call, cublasLtGetStatusString(s_), (int)s_);                       \
      goto out;                                                                \
    }                                                                          \
  } while (0)
  LTG(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LTG(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                     sizeof opa));
  LTG(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                     sizeof opb));
  /* Stored shapes, column-major: "A" is B ((N,K) after its op), "B" is A
   * ((K,M) after its op). */
  LTG(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, tb ? K : N, tb ? N : K,
                                 ldb));
  LTG(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, ta ? M : K, ta ? K : M,
                                 lda));
  LTG(cublasLtMatrixLayoutCreate(&lc, ct, N, M, ldc));
  LTG(cublasLtMatmulPreferenceCreate(&pref));
  LTG(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  /* Deterministic: no split-K reduction whose order could vary. */
  if (g->o.deterministic)
    LTG(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme,
        sizeof scheme));
  LTG(cublasLtMatmulAlgoGetHeuristic(g->k.lt, desc, la, lb, lc, lc, pref, 1,
                                     &heur, &found));
  if (found < 1) {
    fail(err, errlen,
         "gpt_cuda: cuBLASLt has no algorithm for the head's product (%d x "
         "%d x %d)",
         M, N, K);
    goto out;
  }
  LTG(cublasLtMatmul(g->k.lt, desc, &alpha, B, la, A, lb, &beta, Cm, lc, Cm,
                     lc, &heur.algo, g->k.lt_workspace, ws, g->k.stream));
#undef LTG
  rc = 0;
out:
  if (pref)
    cublasLtMatmulPreferenceDestroy(pref);
  if (lc)
    cublasLtMatrixLayoutDestroy(lc);
  if (lb)
    cublasLtMatrixLayoutDestroy(lb);
  if (la)
    cublasLtMatrixLayoutDestroy(la);
  if (desc)
    cublasLtMatmulDescDestroy(desc);
  return rc;
}

/* ---- Small kernels kernels.cuh does not have ---- */

__global__ void scale_kernel(float *x, size_t n, float s) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

/* x = y + x (a tied copy's gradient summed in: the CPU's order). */
__global__ void add_kernel(float *x, const float *y, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = y[i] + x[i];
}

/* ---- Create / destroy ---- */

extern "C" void gpt_cuda_destroy(gpt_cuda *g) {
  if (!g)
    return;
  /* The context's destroy waits for its stream: nothing still queued
   * may use the memory when it is freed. */
  if (g->have_k)
    kern_ctx_destroy(&g->k);
  if (g->base)
    cudaFree(g->base);
  free(g->off);
  free(g->goff);
  free(g->gp);
  free(g->gg);
  free(g->pieces);
  free(g->runs);
  for (int i = 0; g->slots && i < g->nslots; i++) {
    free(g->slots[i].layers);
    free(g->slots[i].ids_host);
  }
  free(g->slots);
  free(g);
}

/* Floats of device memory in words people read: "1.23 GiB". */
static const char *gib(uint64_t b, char *buf, size_t n) {
  snprintf(buf, n, "%.2f GiB", (double)b / (1 << 30));
  return buf;
}

/* The batch shape and optimizer of o against the model's config, checked
 * before anything is allocated: 0, or -1 with the reason in err. */
static int check_batch(const gpt_config *cfg, const gpt_cuda_options *o,
                       char *err, size_t errlen) {
  if (o->B < 1 || o->T < 1 || o->T > cfg->block_size)
    return fail(err, errlen,
                "gpt_cuda: batch B=%d T=%d; B must be >= 1 and T between 1 "
                "and block_size %d",
                o->B, o->T, cfg->block_size);
  /* The kernels index rows of (N, 4C) (Llama: up to (N, 3I)) with int;
   * the (N, Vp) logits by row, in size_t. */
  const widths w = fw_of(cfg);
  if ((double)o->B * o->T * max_sz(w.d4c, w.fc) > 2147483647.0)
    return fail(err, errlen, "gpt_cuda: batch B=%d T=%d is too large", o->B,
                o->T);
  /* The fixed-order column sums of the backward (bias and LayerNorm
   * gradients) take at most 65535 chunks of rows: refused here, not in
   * the first backward. */
  if ((size_t)o->B * o->T > kern_backward_max_rows())
    return fail(err, errlen,
                "gpt_cuda: batch B=%d T=%d has more than the %zu rows (B x "
                "T) that the backward's column sums take",
                o->B, o->T, kern_backward_max_rows());
  if (o->opt.kind != OPTIM_ADAMW && o->opt.kind != OPTIM_LION)
    return fail(err, errlen, "gpt_cuda: unknown optimizer kind %d",
                (int)o->opt.kind);
  return 0;
}

/* Makes o->device the calling thread's device: 0, or -1. */
static int use_device(const gpt_cuda_options *o, char *err, size_t errlen) {
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (o->device < 0 || o->device >= ndev)
    return fail(err, errlen, "gpt_cuda: device %d, but there are %d",
                o->device, ndev);
  CK(cudaSetDevice(o->device));
  return 0;
}

/* Tensor parallel's rank and local widths (the whole model's without
 * it), and what it does not run with. 0, or -1 with err. */
static int plan_tensor_parallel(gpt_cuda *g, const gpt_cuda_options *o,
                                char *err, size_t errlen) {
  const gpt_config *c = &g->cfg;
  const gpt_cuda_tp *tp = &o->tp;
  int R = tp->ranks > 1 ? tp->ranks : 1;
  g->tpr = R;
  g->tpk = R > 1 ? tp->rank : 0;
  if (R > 1) {
    /* A window of pieces would need the pieces' layout in the shard's:
     * tensor_cuda.c's stage 3 is one piece, all of it the master's. */
    const char *why = o->master_n ? "a master weights' window (master_n)"
                      : o->recompute != GPT_RECOMPUTE_NONE
                          ? "recompute (use recompute: none)"
                      : !tp->tensors || !tp->allreduce || !tp->allgather
                          ? "no shard layout or collectives"
                          : NULL;
    if (why)
      return fail(err, errlen, "gpt_cuda: tensor parallel runs without %s",
                  why);
    const int llama = c->family == GPT_FAMILY_LLAMA;
    if (tp->rank < 0 || tp->rank >= R || c->n_head % R != 0 ||
        c->padded_vocab % R != 0 ||
        (llama && (c->n_kv_head % R != 0 || c->intermediate % R != 0)))
      return fail(err, errlen,
                  "gpt_cuda: tensor-parallel rank %d of %d (n_head %d, "
                  "padded_vocab %d and a Llama's n_kv_head and "
                  "intermediate_size must divide by the ranks)",
                  tp->rank, R, c->n_head, c->padded_vocab);
  }
  g->Cl = c->n_embd / R;
  g->NHl = c->n_head / R;
  g->KVl = c->n_kv_head / R;
  g->Fl = (c->family == GPT_FAMILY_LLAMA ? c->intermediate : 4 * c->n_embd) / R;
  g->Vl = c->padded_vocab / R;
  g->vlo = g->tpk * g->Vl;
  int real = c->vocab_size - g->vlo;
  g->Vv = real < 0 ? 0 : real > g->Vl ? g->Vl : real;
  return 0;
}

/* The sizes of g's arrays from the model and o: the parameters, the
 * master shard [lo, lo + nm), the padded BF16 copy and the gradients.
 * 0, or -1 when the shard does not fit the layout. */
static int plan_sizes(gpt_cuda *g, const gpt *host, const gpt_cuda_options *o,
                      char *err, size_t errlen) {
  g->cfg = *gpt_get_config(host);
  g->o = *o;
  if (plan_tensor_parallel(g, o, err, errlen) != 0)
    return -1;
  g->np = g->tpr > 1 ? o->tp.n : gpt_num_params(host);
  shard_sizes(o, g->np, &g->nm, &g->padded, &g->ngrads);
  /* With stage 3's pieces every array covers the shard alone, so the
   * master weights start at its float 0 and shard_lo is not used. */
  g->lo = o->shard_n && !o->npieces ? o->shard_lo : 0;
  g->mlo = o->npieces && o->master_n ? o->master_lo : 0;
  if ((o->npieces || o->grad_shard) && !o->shard_n)
    return fail(err, errlen, "gpt_cuda: %s need shard_n",
                o->npieces ? "stage 3's pieces" : "sharded gradients");
  /* A window's gradients are the shard's whole (gpt_cuda_step reads
   * them at the shard's offsets): not with grad_shard. */
  if (o->master_n &&
      (!o->npieces || o->grad_shard || o->master_lo > o->shard_n ||
       o->master_n > o->shard_n - o->master_lo))
    return fail(err, errlen,
                "gpt_cuda: the master weights' window [%zu, +%zu) is not in "
                "a shard of pieces (%zu floats)",
                o->master_lo, o->master_n, o->npieces ? o->shard_n : 0);
  if (g->lo > g->padded || g->nm > g->padded - g->lo)
    return fail(err, errlen,
                "gpt_cuda: shard [%zu, %zu) does not fit in %zu padded "
                "parameters",
                o->shard_lo, o->shard_lo + o->shard_n, o->padded);
  g->ntensors = gpt_tensor_count(host);
  g->ngroups = gpt_group_count(host);
  /* The final norm and the head (gpt.h's layouts): GPT-2's ln_f comes
   * after the layers, its head is wte; Llama's model.norm is last or
   * before lm_head, whose group is the norm's. */
  g->llama = g->cfg.family == GPT_FAMILY_LLAMA;
  const int untied = g->llama && g->cfg.untied_head;
  g->norm_t =
      g->llama ? g->ntensors - 1 - (size_t)untied : gpt_ti(g->cfg.n_layer, 0);
  g->head_t = untied ? g->ntensors - 1 : 0;
  g->head_grp = untied ? g->cfg.n_layer + 1 : 0;
  g->npieces = o->npieces;
  g->grad_scale = 1.0f;
  act_layers(&g->cfg, o, &g->act_first, &g->act_last);
  if (g->act_first < 0 || g->act_first >= g->act_last ||
      g->act_last > g->cfg.n_layer)
    return fail(err, errlen,
                "gpt_cuda: layers [%d,%d) to keep activations of are not a "
                "range of the model's %d",
                o->layers_first, o->layers_last, g->cfg.n_layer);
  g->stage_first = g->act_first; /* the whole model, or the stage */
  g->stage_last = g->act_last;
  return 0;
}

/* The host-side tables: tensor offsets, the optimizer's runs, the
 * layers' buffers, the groups and stage 3's pieces (each checked against
 * the model and the shard). 0, or -1; g is the caller's to destroy. */
static int build_tables(gpt_cuda *g, const gpt *host, char *err,
                        size_t errlen) {
  const gpt_cuda_options *o = &g->o;
  g->off = (size_t *)calloc(g->ntensors, sizeof *g->off);
  g->runs = (opt_run *)calloc(g->ntensors, sizeof *g->runs);
  g->nslots = slots_of(o);
  g->slots = (act_slot *)calloc((size_t)g->nslots, sizeof *g->slots);
  for (int i = 0; g->slots && i < g->nslots; i++) {
    g->slots[i].layers =
        (layer_bufs *)calloc(g->cfg.n_layer, sizeof(layer_bufs));
    g->slots[i].ids_host = (int *)calloc((size_t)o->B * o->T, sizeof(int));
    if (!g->slots[i].layers || !g->slots[i].ids_host)
      return fail(err, errlen, "gpt_cuda: out of host memory");
  }
  g->goff = (size_t *)calloc(g->ngroups, sizeof *g->goff);
  g->gp = (floatX **)calloc(g->ngroups, sizeof *g->gp);
  g->gg = (float **)calloc(g->ngroups, sizeof *g->gg);
  if (o->npieces)
    g->pieces = (gpt_cuda_piece *)malloc(o->npieces * sizeof *g->pieces);
  if (!g->off || !g->runs || !g->slots || !g->goff || !g->gp || !g->gg ||
      (o->npieces && !g->pieces))
    return fail(err, errlen, "gpt_cuda: out of host memory");
  for (size_t j = 0; j < o->npieces; j++) {
    g->pieces[j] = o->pieces[j];
    if (o->pieces[j].flat + o->pieces[j].n > g->np ||
        o->pieces[j].local + o->pieces[j].n > o->shard_n)
      return fail(err, errlen,
                  "gpt_cuda: piece %zu ([%zu, +%zu) at %zu) is not in the "
                  "model's %zu parameters and the shard's %zu",
                  j, o->pieces[j].flat, o->pieces[j].n, o->pieces[j].local,
                  g->np, o->shard_n);
  }
  /* A tensor shard's tensors are where its layout says (tp.tensors):
   * every group starts at 0, so that a tensor's place is its offset. */
  for (size_t i = 0; i < g->ngroups && g->tpr == 1; i++) {
    size_t n;
    gpt_group_range(host, i, &g->goff[i], &n);
  }
  /* The optimizer's groups: runs of adjacent tensors that share the decay
   * flag, one launch each (trainkit_make_optim's groups, merged). */
  for (size_t i = 0; i < g->ntensors; i++) {
    const gpt_tensor *t = gpt_tensor_at(host, i);
    size_t at = t->offset, numel = t->numel;
    if (g->tpr > 1) {
      at = o->tp.tensors[i].offset;
      numel = o->tp.tensors[i].numel;
      if (at + numel > g->np)
        return fail(err, errlen,
                    "gpt_cuda: tensor %zu's shard [%zu, +%zu) is not in the "
                    "shard's %zu floats",
                    i, at, numel, g->np);
    }
    g->off[i] = at;
    if (g->nruns && g->runs[g->nruns - 1].decay == t->decay &&
        g->runs[g->nruns - 1].offset + g->runs[g->nruns - 1].numel == at)
      g->runs[g->nruns - 1].numel += numel;
    else
      g->runs[g->nruns++] = (opt_run){at, numel, t->decay};
  }
  return 0;
}

/* The kernels' context and the one device allocation, carved into g's
 * arrays. When the device is short, the message says what the memory was
 * for and which settings shrink it: the user reads it in a train stage's
 * log, far from this code. 0, or -1; g is the caller's to destroy. */
static int alloc_device(gpt_cuda *g, char *err, size_t errlen) {
  const gpt_cuda_options *o = &g->o;
  const gpt_config *cfg = &g->cfg;
  if (kern_ctx_init(&g->k, o->deterministic, err, errlen) != 0)
    return -1;
  g->have_k = 1;
  gpt_memory mem;
  g->bytes = carve(cfg, o, g->np, g->nm, g->padded, g->ngrads, o->B, o->T,
                   g->k.sm_count, g->tpr, NULL, &mem);
  cudaError_t e = cudaMalloc((void **)&g->base, g->bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    g->base = NULL;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    cudaGetLastError();
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    return fail(err, errlen,
                "out of GPU memory: training a %.1fM-parameter model (%d "
                "layers, width %d) on micro-batches of batch_size %d x "
                "seq_len %d with recompute: %s needs %s (weights + grads + "
                "optimizer %s, activations %s), but the device has %s free "
                "of %s (%s). Lower batch_size (and raise grad_accum to keep "
                "the global batch), set recompute: block, or shorten seq_len",
                g->np / 1e6, cfg->n_layer, cfg->n_embd, o->B, o->T,
                gpt_recompute_name(o->recompute),
                gib(g->bytes + LT_WORKSPACE_BYTES, b1, sizeof b1),
                gib(mem.params + mem.grads + mem.optim, b2, sizeof b2),
                gib(mem.acts + LT_WORKSPACE_BYTES, b3, sizeof b3),
                gib(fr, b4, sizeof b4), gib(tot, b5, sizeof b5),
                cudaGetErrorString(e));
  }
  carve(cfg, o, g->np, g->nm, g->padded, g->ngrads, o->B, o->T, g->k.sm_count,
        g->tpr, g, NULL);
  load_slot(g, 0, 0);
  /* The steps' shape on cuDNN's attention where it serves (its plans are
   * compiled now, not in the first step); never an error. */
  kern_attention_prepare(&g->k, o->B, o->T, g->Cl, g->NHl, g->attention,
                         sizeof g->attention);
  return 0;
}

/* RoPE's cos and sin tables for positions 0 .. o.T - 1, made on the host
 * by the CPU engine's function (so the angles are its bits) and copied
 * up (synchronously: the host arrays go). 0, or -1 with *e. */
static int upload_rope(gpt_cuda *g, cudaError_t *e) {
  int hs = g->cfg.n_embd / g->cfg.n_head;
  size_t n = (size_t)g->o.T * (hs / 2);
  float *t = (float *)malloc(2 * n * sizeof *t);
  if (!t) {
    *e = cudaErrorMemoryAllocation;
    return -1;
  }
  llama_cpu_rope_tables(t, t + n, 0, g->o.T, hs, g->cfg.rope_theta);
  *e = cudaMemcpy(g->rope_cs, t, n * 4, cudaMemcpyHostToDevice);
  if (*e == cudaSuccess)
    *e = cudaMemcpy(g->rope_sn, t + n, n * 4, cudaMemcpyHostToDevice);
  free(t);
  return *e == cudaSuccess ? 0 : -1;
}

/* The first state on the device: group pointers, the weights (or a
 * cleared stage-3 shard), zero gradients and a fresh optimizer. Returns
 * once the upload is done. 0, or -1; g is the caller's to destroy. */
static int init_device(gpt_cuda *g, const gpt *host, char *err, size_t errlen) {
  /* Every group in the gpt_cuda's own arrays; stage 3's are placed by
   * the parameter hook, and its weights come with gpt_cuda_upload_shard
   * (zero until then); sharded gradients' groups too (in backward). */
  for (size_t i = 0; i < g->ngroups && !g->npieces; i++) {
    g->gp[i] = g->params + g->goff[i];
    g->gg[i] = g->o.grad_shard ? NULL : g->grads + g->goff[i];
  }
  cudaError_t e = cudaSuccess;
  if (g->llama && upload_rope(g, &e) != 0)
    return fail(err, errlen, "gpt_cuda: %s:%d: RoPE's tables: %s", __FILE__,
                __LINE__, cudaGetErrorString(e));
  /* Stage 3's and a tensor shard's weights come with upload_shard. */
  const int later = g->npieces || g->tpr > 1;
  if (later)
    e = cudaMemsetAsync(g->master, 0, g->nm * 4, g->k.stream);
  if (e == cudaSuccess && later)
    e = cudaMemsetAsync(g->params, 0, g->padded * 2, g->k.stream);
  if (e != cudaSuccess)
    return fail(err, errlen, "gpt_cuda: %s:%d: clearing the shard: %s",
                __FILE__, __LINE__, cudaGetErrorString(e));
  if ((!later && gpt_cuda_upload(g, host, NULL, err, errlen) != 0) ||
      gpt_cuda_zero_grad(g, err, errlen) != 0 ||
      gpt_cuda_optim_reset(g, err, errlen) != 0)
    return -1;
  /* Nothing may be read before the upload is on the device: the host
   * array may go away. */
  e = cudaStreamSynchronize(g->k.stream);
  if (e != cudaSuccess)
    return fail(err, errlen, "gpt_cuda: %s:%d: uploading the weights: %s",
                __FILE__, __LINE__, cudaGetErrorString(e));
  return 0;
}

extern "C" int gpt_cuda_create(const gpt *host, const gpt_cuda_options *o,
                               gpt_cuda **out, char *err, size_t errlen) {
  *out = NULL;
  if (check_batch(gpt_get_config(host), o, err, errlen) != 0 ||
      use_device(o, err, errlen) != 0)
    return -1;
  gpt_cuda *g = (gpt_cuda *)calloc(1, sizeof *g);
  if (!g)
    return fail(err, errlen, "gpt_cuda: out of host memory");
  if (plan_sizes(g, host, o, err, errlen) != 0 ||
      build_tables(g, host, err, errlen) != 0 ||
      alloc_device(g, err, errlen) != 0 ||
      init_device(g, host, err, errlen) != 0) {
    gpt_cuda_destroy(g);
    return -1;
  }
  *out = g;
  return 0;
}

/* ---- Parameters and state ---- */

/* The master weights' floats that are parameters of the model (the rest
 * of a shard is padding). */
static size_t shard_real(const gpt_cuda *g) {
  return g->lo < g->np ? (g->nm < g->np - g->lo ? g->nm : g->np - g->lo) : 0;
}

/* opt (may be NULL) has this gpt_cuda's state size: 0, or -1. */
static int check_optim(const gpt_cuda *g, optim *opt, char *err,
                       size_t errlen) {
  size_t nst = optim_state_floats_for(g->o.opt.kind, g->nm);
  if (opt && optim_state_floats(opt) != nst)
    return fail(err, errlen,
                "gpt_cuda: the optimizer has %zu state floats, the GPU's %zu "
                "(another optimizer kind?)",
                optim_state_floats(opt), nst);
  return 0;
}

/* With opt non-NULL, its state and t to the GPU (up) or from it; then
 * the stream waited for: the host arrays may change as soon as the
 * caller returns. */
static int move_state(gpt_cuda *g, optim *opt, int up, char *err,
                      size_t errlen) {
  size_t bytes = optim_state_floats_for(g->o.opt.kind, g->nm) * 4;
  if (opt && up) {
    CK(cudaMemcpyAsync(g->ostate, optim_state(opt), bytes,
                       cudaMemcpyHostToDevice, g->k.stream));
    g->t = optim_get_t(opt);
  } else if (opt) {
    CK(cudaMemcpyAsync(optim_state(opt), g->ostate, bytes,
                       cudaMemcpyDeviceToHost, g->k.stream));
    optim_set_t(opt, g->t);
  }
  CK(cudaStreamSynchronize(g->k.stream));
  return 0;
}

/* host (and opt, may be NULL) have this gpt_cuda's sizes: 0, or -1. */
static int check_host(const gpt_cuda *g, const gpt *host, optim *opt,
                      char *err, size_t errlen) {
  if (g->npieces || g->tpr > 1)
    return fail(err, errlen,
                "gpt_cuda: a stage-3 or tensor shard's weights move with "
                "gpt_cuda_upload_shard / _download_shard");
  if (gpt_num_params(host) != g->np)
    return fail(err, errlen,
                "gpt_cuda: the host model has %zu parameters, the GPU's %zu",
                gpt_num_params(host), g->np);
  return check_optim(g, opt, err, errlen);
}

extern "C" int gpt_cuda_upload(gpt_cuda *g, const gpt *host, optim *opt,
                               char *err, size_t errlen) {
  if (check_host(g, host, opt, err, errlen) != 0)
    return -1;
  /* Activations of the old weights must not be backpropagated into the
   * new ones, nor their logits read. */
  forget_passes(g);
  if (g->o.shard_n == 0) {
    CK(cudaMemcpyAsync(g->master, gpt_params((gpt *)host), g->np * 4,
                       cudaMemcpyHostToDevice, g->k.stream));
    KK(kern_f32_to_bf16(&g->k, g->params, g->master, g->np, err, errlen));
  } else {
    /* A shard: the whole model goes up through the FP32 gradient array,
     * as much at a time as it holds (all of it, unless the gradients are
     * the shard's alone), which makes the BF16 copy of every parameter
     * and the shard's master weights (zero past the model's last), and
     * is zeroed after. Stream order keeps a chunk until its copies are
     * done. */
    const float *hp = gpt_params((gpt *)host);
    size_t mhi = g->lo + shard_real(g);
    CK(cudaMemsetAsync(g->master, 0, g->nm * 4, g->k.stream));
    for (size_t at = 0; at < g->np; at += g->ngrads) {
      size_t n = g->np - at < g->ngrads ? g->np - at : g->ngrads;
      CK(cudaMemcpyAsync(g->grads, hp + at, n * 4, cudaMemcpyHostToDevice,
                         g->k.stream));
      KK(kern_f32_to_bf16(&g->k, g->params + at, g->grads, n, err, errlen));
      size_t a = at > g->lo ? at : g->lo, b = at + n < mhi ? at + n : mhi;
      if (a < b)
        CK(cudaMemcpyAsync(g->master + (a - g->lo), g->grads + (a - at),
                           (b - a) * 4, cudaMemcpyDeviceToDevice,
                           g->k.stream));
    }
    if (g->padded > g->np)
      CK(cudaMemsetAsync(g->params + g->np, 0, (g->padded - g->np) * 2,
                         g->k.stream));
    CK(cudaMemsetAsync(g->grads, 0, g->ngrads * 4, g->k.stream));
  }
  return move_state(g, opt, 1, err, errlen);
}

extern "C" int gpt_cuda_download(gpt_cuda *g, gpt *host, optim *opt,
                                 char *err, size_t errlen) {
  if (check_host(g, host, opt, err, errlen) != 0)
    return -1;
  size_t have = shard_real(g);
  if (have)
    CK(cudaMemcpyAsync(gpt_params(host) + g->lo, g->master, have * 4,
                       cudaMemcpyDeviceToHost, g->k.stream));
  return move_state(g, opt, 0, err, errlen);
}

/* Where a shard's master weights start in it: a window's master_lo,
 * a tensor shard's shard_lo (0 without ZeRO). */
static size_t window_lo(const gpt_cuda *g) {
  return g->npieces ? g->mlo : g->lo;
}

/* A stage-3 shard, and its optimizer (may be NULL) of its size: 0, or
 * -1. */
static int check_shard(const gpt_cuda *g, optim *opt, char *err,
                       size_t errlen) {
  if (!g->npieces && g->tpr == 1)
    return fail(err, errlen,
                "gpt_cuda: not a stage-3 or tensor shard (gpt_cuda_upload / "
                "_download move these weights)");
  return check_optim(g, opt, err, errlen);
}

extern "C" int gpt_cuda_upload_shard(gpt_cuda *g, const float *shard,
                                     optim *opt, char *err, size_t errlen) {
  if (check_shard(g, opt, err, errlen) != 0)
    return -1;
  forget_passes(g);
  if (g->nm < g->padded) {
    /* A window (master_n, or a tensor shard's shard_lo / shard_n): the
     * whole shard goes up through the FP32 gradients, as much at a time
     * as they hold (all of it, unless they are the slice's alone:
     * grad_shard), which makes the BF16 copy of all of it and the
     * window's master weights, and is zeroed after. Stream order keeps
     * a chunk until its copies are done. */
    size_t wl = window_lo(g), wh = wl + g->nm;
    for (size_t at = 0; at < g->padded; at += g->ngrads) {
      size_t n = g->padded - at < g->ngrads ? g->padded - at : g->ngrads;
      CK(cudaMemcpyAsync(g->grads, shard + at, n * 4, cudaMemcpyHostToDevice,
                         g->k.stream));
      KK(kern_f32_to_bf16(&g->k, g->params + at, g->grads, n, err, errlen));
      size_t a = at > wl ? at : wl, b = at + n < wh ? at + n : wh;
      if (a < b)
        CK(cudaMemcpyAsync(g->master + (a - wl), g->grads + (a - at),
                           (b - a) * 4, cudaMemcpyDeviceToDevice, g->k.stream));
    }
    CK(cudaMemsetAsync(g->grads, 0, g->ngrads * 4, g->k.stream));
    return move_state(g, opt, 1, err, errlen);
  }
  CK(cudaMemcpyAsync(g->master, shard, g->nm * 4, cudaMemcpyHostToDevice,
                     g->k.stream));
  KK(kern_f32_to_bf16(&g->k, g->params, g->master, g->nm, err, errlen));
  return move_state(g, opt, 1, err, errlen);
}

extern "C" int gpt_cuda_download_shard(gpt_cuda *g, float *shard, optim *opt,
                                       char *err, size_t errlen) {
  if (check_shard(g, opt, err, errlen) != 0)
    return -1;
  CK(cudaMemcpyAsync(shard + window_lo(g), g->master, g->nm * 4,
                     cudaMemcpyDeviceToHost, g->k.stream));
  return move_state(g, opt, 0, err, errlen);
}

extern "C" int gpt_cuda_download_grads(gpt_cuda *g, float *out, char *err,
                                       size_t errlen) {
  if (g->ngrads < g->np)
    return fail(err, errlen,
                "gpt_cuda: a shard's gradients are all this gpt_cuda "
                "holds (ZeRO stages 2-3)");
  CK(cudaMemcpyAsync(out, g->grads, g->np * 4, cudaMemcpyDeviceToHost,
                     g->k.stream));
  CK(cudaStreamSynchronize(g->k.stream));
  return 0;
}

/* ---- Forward ---- */

/* Tensor t of group grp: its parameters and its gradients, where the
 * group is now (gpt_cuda_set_group_params / _grads). */
static floatX *param_of(const gpt_cuda *g, size_t grp, size_t t) {
  return g->gp[grp] + (g->off[t] - g->goff[grp]);
}
static float *grad_of(const gpt_cuda *g, size_t grp, size_t t) {
  return g->gg[grp] + (g->off[t] - g->goff[grp]);
}
/* Layer l is group 1 + l. */
#define P(l, kk) param_of(g, 1 + (size_t)(l), gpt_ti((l), (kk)))
#define G(l, kk) grad_of(g, 1 + (size_t)(l), gpt_ti((l), (kk)))

/* The parameter hook's calls (gpt_cuda_set_param_hook; the CPU engine's
 * order, gpt_cpu.c): NEED then a check that the group is placed (in
 * backward its gradients too), or DONE. 0, or -1 with err. */
static int params_need(gpt_cuda *g, int grp, int next, int bwd, char *err,
                       size_t errlen) {
  if (g->param_hook &&
      g->param_hook(g->param_hook_arg, GPT_PARAMS_NEED, grp, next) != 0)
    return fail(err, errlen, "gpt_cuda: a parameter hook failed");
  if (!g->gp[grp] || (bwd && !g->gg[grp]))
    return fail(err, errlen,
                "gpt_cuda: group %d's %s not placed (a gpt_cuda of ZeRO "
                "stage 2 or 3 needs a parameter hook that places them)",
                grp, g->gp[grp] ? "gradients are" : "parameters are");
  return 0;
}
static int params_done(gpt_cuda *g, int grp, int next, char *err,
                       size_t errlen) {
  if (g->param_hook &&
      g->param_hook(g->param_hook_arg, GPT_PARAMS_DONE, grp, next) != 0)
    return fail(err, errlen, "gpt_cuda: a parameter hook failed");
  return 0;
}

static floatX *resid_at(gpt_cuda *g, int l) {
  return g->resid +
         (size_t)(l - g->act_first) * g->o.B * g->o.T * g->cfg.n_embd;
}

/* ---- Tensor parallel's collectives (gpt_cuda_tp) ---- */

/* x (n BF16) summed over the tensor group: through FP32 (tpbuf), so
 * that the sum is rounded once, as one GPU's product is; nothing
 * without tensor parallel. */
static int tp_sum(gpt_cuda *g, floatX *x, size_t n, char *err, size_t errlen) {
  if (g->tpr == 1)
    return 0;
  KK(kern_bf16_to_f32(&g->k, g->tpbuf, x, n, err, errlen));
  CK(cudaStreamSynchronize(g->k.stream));
  if (g->o.tp.allreduce(g->o.tp.arg, g->tpbuf, n, err, errlen) != 0)
    return -1;
  KK(kern_f32_to_bf16(&g->k, x, g->tpbuf, n, err, errlen));
  return 0;
}

/* The vocabulary-parallel cross-entropy's statistics of the shard's
 * logits (N,Vl) (kernels.cuh): the row maxima gathered, the sums of exp
 * and the targets' logits summed over the group, into tpgmax and tpred
 * (kept for the backward's kern_vp_classifier). */
static int vp_stats(gpt_cuda *g, int N, char *err, size_t errlen) {
  const gpt_cuda_tp *tp = &g->o.tp;
  KK(kern_vp_row_max(&g->k, g->tpmax, g->logits, N, g->Vv, g->Vl, err, errlen));
  CK(cudaStreamSynchronize(g->k.stream));
  if (tp->allgather(tp->arg, g->tpmax, g->tpmax_all, (size_t)N, err, errlen) !=
      0)
    return -1;
  KK(kern_vp_row_sums(&g->k, g->tpgmax, g->tpred, g->tpmax_all, g->logits,
                      g->tgts, g->vlo, N, g->Vv, g->Vl, g->tpr, err, errlen));
  CK(cudaStreamSynchronize(g->k.stream));
  return tp->allreduce(tp->arg, g->tpred, 2 * (size_t)N, err, errlen);
}

/* The losses (N) of the last forward's logits and, with dloss != 0, the
 * logits' gradient in their place: kern_fused_classifier, or a tensor
 * shard's kern_vp_classifier from vp_stats' figures. */
static int classify(gpt_cuda *g, float dloss, int N, char *err, size_t errlen) {
  if (g->tpr == 1)
    return kern_fused_classifier(&g->k, g->logits, g->losses, g->tgts, dloss, N,
                                 g->cfg.vocab_size, g->cfg.padded_vocab, err,
                                 errlen);
  return kern_vp_classifier(&g->k, g->logits, g->losses, g->tpgmax, g->tpred,
                            g->tgts, g->vlo, dloss, N, g->Vv, g->Vl, err,
                            errlen);
}

/* Block l on in (B,T,C): its activations into la; out (B,T,C) = its
 * output. out NULL: stop after the MLP's GELU (the recomputation before
 * backward, which needs everything but the output). */
static int gpt2_layer_forward(gpt_cuda *g, int l, const layer_bufs *la,
                              const floatX *in, floatX *out, int B, int T,
                              char *err, size_t errlen) {
  const kern_ctx *k = &g->k;
  /* A tensor shard's widths (Cl = C, Fl = 4C without): its heads, its
   * MLP columns; the row-split products' partial sums are summed over
   * the group (tp_sum), their biases added once, by rank 0. */
  int C = g->cfg.n_embd, Cl = g->Cl, NHl = g->NHl, Fl = g->Fl, N = B * T;
  const int bias = g->tpk == 0;
  /* in -> ln1 (N,C) -> qkv (N,3Cl) -> atty (N,Cl) -> proj (N,C) */
  KK(kern_layernorm_forward(k, la->ln1, la->ln1_mean, la->ln1_rstd, in,
                            P(l, GPT_LN1_W), P(l, GPT_LN1_B), N, C, err,
                            errlen));
  KK(kern_matmul_forward(k, la->qkv, NULL, la->ln1, P(l, GPT_QKV_W),
                         P(l, GPT_QKV_B), N, C, 3 * Cl, err, errlen));
  KK(kern_attention_forward(k, la->atty, la->lse, la->qkv, B, T, Cl, NHl, err,
                            errlen));
  KK(kern_matmul_forward(k, g->proj, NULL, la->atty, P(l, GPT_ATTPROJ_W),
                         bias ? P(l, GPT_ATTPROJ_B) : NULL, N, Cl, C, err,
                         errlen));
  if (tp_sum(g, g->proj, (size_t)N * C, err, errlen) != 0)
    return -1;
  /* res2 = in + proj; ln2 = LayerNorm(res2) */
  KK(kern_residual_layernorm_forward(k, la->res2, la->ln2, la->ln2_mean,
                                     la->ln2_rstd, in, g->proj,
                                     P(l, GPT_LN2_W), P(l, GPT_LN2_B), N, C,
                                     err, errlen));
  /* ln2 -> fch_pre (N,Fl), fch_gelu = GELU(fch_pre) */
  KK(kern_matmul_forward(k, la->fch_gelu, la->fch_pre, la->ln2, P(l, GPT_FC_W),
                         P(l, GPT_FC_B), N, C, Fl, err, errlen));
  if (!out)
    return 0;
  /* out = res2 + fch_gelu c_proj + bias */
  KK(kern_matmul_forward(k, g->proj, NULL, la->fch_gelu, P(l, GPT_FCPROJ_W),
                         bias ? P(l, GPT_FCPROJ_B) : NULL, N, Fl, C, err,
                         errlen));
  if (tp_sum(g, g->proj, (size_t)N * C, err, errlen) != 0)
    return -1;
  KK(kern_residual_forward(k, out, la->res2, g->proj, (size_t)N * C, err,
                           errlen));
  return 0;
}

/* Llama layer l's tensor kk (LLAMA_*): its parameters and gradients. */
#define PL(l, kk) param_of(g, 1 + (size_t)(l), llama_ti((l), (kk)))
#define GL(l, kk) grad_of(g, 1 + (size_t)(l), llama_ti((l), (kk)))

/* The Llama block (llama_cpu.c's layer_forward), as gpt2_layer_forward:
 * out NULL stops after the SwiGLU. q_proj, k_proj and v_proj are adjacent
 * (nn.Linear rows), so one product makes the three; gate_proj and
 * up_proj too. The q/k/v product goes through dqkv (free in forward and
 * at a layer's start in backward) on its way to RoPE's layout step. */
static int llama_layer_forward(gpt_cuda *g, int l, const layer_bufs *la,
                               const floatX *in, floatX *out, int B, int T,
                               char *err, size_t errlen) {
  const kern_ctx *k = &g->k;
  const gpt_config *c = &g->cfg;
  /* A tensor shard's widths (gpt2_layer_forward): its query and
   * key/value heads, its SwiGLU columns; o_proj and down_proj are the
   * row-split products (no bias), summed over the group. */
  int C = c->n_embd, Cl = g->Cl, NH = g->NHl, KV = g->KVl, N = B * T;
  int I = g->Fl, QKV = Cl + 2 * KV * (C / c->n_head);
  float eps = c->norm_eps;
  /* in -> ln1 (N,C) -> q|k|v (N,Cl+2KVD) -> qkv (N,3Cl) -> atty (N,Cl) */
  KK(kern_rmsnorm_forward(k, NULL, la->ln1, la->ln1_rstd, in, NULL,
                          PL(l, LLAMA_LN1_W), eps, N, C, err, errlen));
  KK(kern_linear_forward(k, g->dqkv, la->ln1, PL(l, LLAMA_Q_W), N, C, QKV, err,
                         errlen));
  KK(kern_rope_qkv_forward(k, la->qkv, g->dqkv, g->rope_cs, g->rope_sn, B, T,
                           Cl, NH, KV, err, errlen));
  KK(kern_attention_forward(k, la->atty, la->lse, la->qkv, B, T, Cl, NH, err,
                            errlen));
  /* res2 = in + atty o_proj^T; ln2 = RMSNorm(res2) */
  KK(kern_linear_forward(k, g->proj, la->atty, PL(l, LLAMA_O_W), N, Cl, C, err,
                         errlen));
  if (tp_sum(g, g->proj, (size_t)N * C, err, errlen) != 0)
    return -1;
  KK(kern_rmsnorm_forward(k, la->res2, la->ln2, la->ln2_rstd, in, g->proj,
                          PL(l, LLAMA_LN2_W), eps, N, C, err, errlen));
  /* ln2 -> gate|up (N,2I) -> hid (N,I) = silu(gate) * up */
  KK(kern_linear_forward(k, la->fch_pre, la->ln2, PL(l, LLAMA_GATE_W), N, C,
                         2 * I, err, errlen));
  KK(kern_swiglu_forward(k, la->fch_gelu, la->fch_pre, N, I, err, errlen));
  if (!out)
    return 0;
  /* out = res2 + hid down_proj^T */
  KK(kern_linear_forward(k, g->proj, la->fch_gelu, PL(l, LLAMA_DOWN_W), N, I, C,
                         err, errlen));
  if (tp_sum(g, g->proj, (size_t)N * C, err, errlen) != 0)
    return -1;
  KK(kern_residual_forward(k, out, la->res2, g->proj, (size_t)N * C, err,
                           errlen));
  return 0;
}

static int layer_forward(gpt_cuda *g, int l, const layer_bufs *la,
                         const floatX *in, floatX *out, int B, int T, char *err,
                         size_t errlen) {
  return g->llama ? llama_layer_forward(g, l, la, in, out, B, T, err, errlen)
                  : gpt2_layer_forward(g, l, la, in, out, B, T, err, errlen);
}

/* The final norm: resid_at(L) -> lnf (LayerNorm, or Llama's RMSNorm). */
static int final_norm_forward(gpt_cuda *g, int N, char *err, size_t errlen) {
  int L = g->cfg.n_layer, C = g->cfg.n_embd;
  const floatX *w = param_of(g, L + 1, g->norm_t);
  if (g->llama)
    return kern_rmsnorm_forward(&g->k, NULL, g->lnf, g->lnf_rstd,
                                resid_at(g, L), NULL, w, g->cfg.norm_eps, N, C,
                                err, errlen);
  return kern_layernorm_forward(
      &g->k, g->lnf, g->lnf_mean, g->lnf_rstd, resid_at(g, L), w,
      param_of(g, L + 1, g->norm_t + 1), N, C, err, errlen);
}

static int check_ids(const uint32_t *ids, size_t n, int V, const char *what,
                     char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= (uint32_t)V)
      return fail(err, errlen,
                  "gpt: %s[%zu] is %u, not a token id (vocab_size is %d)",
                  what, i, ids[i], V);
  return 0;
}

/* The first stage's embeddings: ids -> resid_at(0). */
static int embed_forward(gpt_cuda *g, int B, int T, char *err, size_t errlen) {
  if (params_need(g, 0, 1, 0, err, errlen) != 0)
    return -1;
  /* wpe once: by rank 0 of a tensor group (x + 0 is x: the sum is one
   * GPU's lookup to the bit). */
  size_t NC = (size_t)B * T * g->cfg.n_embd;
  KK(kern_encoder_forward(&g->k, resid_at(g, 0), g->ids, param_of(g, 0, 0),
                          g->llama || g->tpk > 0 ? NULL : param_of(g, 0, 1), B,
                          T, g->cfg.n_embd, err, errlen));
  if (tp_sum(g, resid_at(g, 0), NC, err, errlen) != 0)
    return -1;
  return params_done(g, 0, 1, err, errlen);
}

/* The last stage's end: the final norm, the head and, with targets, the
 * loss (train: and its gradient in place of the logits). */
static int head_forward(gpt_cuda *g, const uint32_t *targets, int N,
                        float *loss, int train, char *err, size_t errlen) {
  const kern_ctx *k = &g->k;
  int C = g->cfg.n_embd, L = g->cfg.n_layer;
  /* After the head, a forward with targets is for training, and the
   * backward starts with the head's group again (the CPU engines' order:
   * a tied head is group 0, needed again after the norm's group; an
   * untied one is in the norm's group). */
  const int hg = g->head_grp, after = targets ? hg : -1;
  if (params_need(g, L + 1, hg == 0 ? 0 : after, 0, err, errlen) != 0 ||
      final_norm_forward(g, N, err, errlen) != 0)
    return -1;
  if (hg == 0 && (params_done(g, L + 1, 0, err, errlen) != 0 ||
                  params_need(g, 0, after, 0, err, errlen) != 0))
    return -1;
  /* lnf (N,C), head (Vl,C) -> logits (N,Vl) = lnf head^T (Vl = Vp
   * without tensor parallel); the padding rows of the head are zero, so
   * the padding columns are too. */
  if (gemm_rm(g, 0, 1, N, g->Vl, C, g->lnf, C, param_of(g, hg, g->head_t), C,
              g->logits, g->Vl, 0, 1.0f, 0.0f, err, errlen) != 0 ||
      params_done(g, hg, after, err, errlen) != 0)
    return -1;
  g->logits_valid = 1;
  if (!targets)
    return 0;
  /* dloss 0: losses only, the logits stay for backward (which runs the
   * classifier again with its scale). train: the gradient of the mean
   * loss too, in place of the logits (backward applies its scale in the
   * head's products). */
  if (g->tpr > 1 && vp_stats(g, N, err, errlen) != 0)
    return -1;
  KK(classify(g, train ? 1.0f / (float)N : 0.0f, N, err, errlen));
  if (train)
    g->logits_valid = 0;
  KK(kern_mean(k, g->scalars, g->scratch, g->losses, (size_t)N, err, errlen));
  g->have_loss = 1;
  return loss ? gpt_cuda_last_loss(g, loss, err, errlen) : 0;
}

/* The forward of layers [stage_first, stage_last) (all of them but in a
 * pipeline stage): from the embeddings of inputs on the first stage, else
 * from x (device BF16 (B,T,C)); through the head on the last.
 * gpt_cuda_forward, and with train gpt_cuda_forward_train. */
static int forward(gpt_cuda *g, const uint32_t *inputs, const void *x,
                   const uint32_t *targets, int B, int T, float *loss,
                   int train, char *err, size_t errlen) {
  const gpt_config *c = &g->cfg;
  int V = c->vocab_size;
  int first = g->stage_first, last = g->stage_last;
  g->B = g->T = 0;
  g->have_loss = g->logits_valid = g->stage_train = 0;
  if (B < 1 || T < 1 || B > g->o.B || T > g->o.T ||
      (size_t)B * T > (size_t)g->o.B * g->o.T)
    return fail(err, errlen,
                "gpt_cuda: batch B=%d T=%d, but the GPU model was made for "
                "at most B=%d T=%d",
                B, T, g->o.B, g->o.T);
  size_t N = (size_t)B * T;
  if ((inputs && check_ids(inputs, N, V, "inputs", err, errlen) != 0) ||
      (targets && check_ids(targets, N, V, "targets", err, errlen) != 0))
    return -1;
  if (inputs) {
    /* The ids are < V < 2^24, so they fit the kernels' int. A tensor
     * shard looks up its own vocabulary rows' (shifted to them), -1 the
     * others' (none: the group sums the lookups). */
    for (size_t i = 0; i < N; i++) {
      int id = (int)inputs[i] - g->vlo;
      g->ids_host[i] = id >= 0 && id < g->Vl ? id : -1;
    }
    CK(cudaMemcpyAsync(g->ids, g->ids_host, N * 4, cudaMemcpyHostToDevice,
                       g->k.stream));
  }
  if (targets)
    CK(cudaMemcpyAsync(g->tgts, targets, N * 4, cudaMemcpyHostToDevice,
                       g->k.stream));
  if (first == 0 && embed_forward(g, B, T, err, errlen) != 0)
    return -1;
  if (first > 0)
    CK(cudaMemcpyAsync(resid_at(g, first), x, N * c->n_embd * sizeof(floatX),
                       cudaMemcpyDeviceToDevice, g->k.stream));
  for (int l = first; l < last; l++)
    if (params_need(g, 1 + l, 2 + l, 0, err, errlen) != 0 ||
        layer_forward(g, l, &g->layers[l], resid_at(g, l), resid_at(g, l + 1),
                      B, T, err, errlen) != 0 ||
        params_done(g, 1 + l, 2 + l, err, errlen) != 0)
      return -1;
  g->B = B;
  g->T = T;
  if (last < c->n_layer)
    return 0;
  return head_forward(g, targets, (int)N, loss, train, err, errlen);
}

/* gpt_cuda_forward's refusal of a stage (gpt.h's gpt_forward's). */
static int whole_model(const gpt_cuda *g, char *err, size_t errlen) {
  if (g->stage_first == 0 && g->stage_last == g->cfg.n_layer)
    return 0;
  return fail(err, errlen,
              "gpt_cuda: this model runs layers [%d,%d) of %d, a pipeline "
              "stage: use gpt_cuda_forward_stage",
              g->stage_first, g->stage_last, g->cfg.n_layer);
}

extern "C" int gpt_cuda_forward(gpt_cuda *g, const uint32_t *inputs,
                                const uint32_t *targets, int B, int T,
                                float *loss, char *err, size_t errlen) {
  if (whole_model(g, err, errlen) != 0)
    return -1;
  return forward(g, inputs, NULL, targets, B, T, loss, 0, err, errlen);
}

extern "C" int gpt_cuda_forward_train(gpt_cuda *g, const uint32_t *inputs,
                                      const uint32_t *targets, int B, int T,
                                      float *loss, char *err, size_t errlen) {
  if (!targets)
    return fail(err, errlen, "gpt_cuda_forward_train: no targets");
  if (whole_model(g, err, errlen) != 0)
    return -1;
  return forward(g, inputs, NULL, targets, B, T, loss, 1, err, errlen);
}

extern "C" int gpt_cuda_last_loss(gpt_cuda *g, float *loss, char *err,
                                  size_t errlen) {
  CK(cudaMemcpyAsync(loss, g->scalars, 4, cudaMemcpyDeviceToHost,
                     g->k.stream));
  CK(cudaStreamSynchronize(g->k.stream));
  return 0;
}

extern "C" int gpt_cuda_logits(gpt_cuda *g, float *out, char *err,
                               size_t errlen) {
  if (!g->logits_valid)
    return fail(err, errlen,
                "gpt_cuda: no logits (no forward since the last backward)");
  size_t n = (size_t)g->B * g->T * g->Vl;
  floatX *tmp = (floatX *)malloc(n * sizeof *tmp);
  if (!tmp)
    return fail(err, errlen, "gpt_cuda: out of host memory for %zu logits",
                n);
  cudaError_t e = cudaMemcpyAsync(tmp, g->logits, n * sizeof *tmp,
                                  cudaMemcpyDeviceToHost, g->k.stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(g->k.stream);
  if (e != cudaSuccess) {
    free(tmp);
    return fail(err, errlen, "gpt_cuda: %s:%d: logits: %s", __FILE__,
                __LINE__, cudaGetErrorString(e));
  }
  for (size_t i = 0; i < n; i++)
    out[i] = __bfloat162float(tmp[i]);
  free(tmp);
  return 0;
}

/* ---- Backward ---- */

extern "C" int gpt_cuda_zero_grad(gpt_cuda *g, char *err, size_t errlen) {
  CK(cudaMemsetAsync(g->grads, 0, g->ngrads * 4, g->k.stream));
  return 0;
}

/* GPT-2 block l's backward: dresid holds d of its output in, d of its
 * input in out. Its activations are la's (recomputed here for
 * recompute modes gelu and block). */
static int gpt2_layer_backward(gpt_cuda *g, int l, const layer_bufs *la,
                               const floatX *in, int B, int T, char *err,
                               size_t errlen) {
  const kern_ctx *k = &g->k;
  /* A tensor shard's widths (gpt2_layer_forward); the column-split
   * products' input gradients are summed over the group. */
  int C = g->cfg.n_embd, Cl = g->Cl, NHl = g->NHl, Fl = g->Fl, N = B * T;
  if (g->o.recompute == GPT_RECOMPUTE_BLOCK) {
    if (layer_forward(g, l, la, in, NULL, B, T, err, errlen) != 0)
      return -1;
  } else if (g->o.recompute == GPT_RECOMPUTE_GELU) {
    KK(kern_gelu_forward(k, la->fch_gelu, la->fch_pre, (size_t)N * 4 * C, err,
                         errlen));
  }
  /* MLP. dresid = d out -> d4c (N,Fl) = d fch_pre (GELU' fused) */
  KK(kern_matmul_backward(
      k, g->d4c, G(l, GPT_FCPROJ_W), G(l, GPT_FCPROJ_B), g->scratch, g->dresid,
      la->fch_gelu, P(l, GPT_FCPROJ_W), la->fch_pre, N, Fl, C, err, errlen));
  /* d fch_pre -> dbuf (N,C) = d ln2 */
  KK(kern_matmul_backward(k, g->dbuf, G(l, GPT_FC_W), G(l, GPT_FC_B),
                          g->scratch, g->d4c, la->ln2, P(l, GPT_FC_W), NULL, N,
                          C, Fl, err, errlen));
  if (tp_sum(g, g->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  /* d ln2 -> dresid += (now d res2) */
  KK(kern_layernorm_backward(k, g->dresid, G(l, GPT_LN2_W), G(l, GPT_LN2_B),
                             g->scratch, g->dbuf, la->res2, P(l, GPT_LN2_W),
                             la->ln2_mean, la->ln2_rstd, N, C, err, errlen));
  /* Attention. dresid = d res2 -> dbuf (N,C) = d atty */
  KK(kern_matmul_backward(k, g->dbuf, G(l, GPT_ATTPROJ_W), G(l, GPT_ATTPROJ_B),
                          g->scratch, g->dresid, la->atty, P(l, GPT_ATTPROJ_W),
                          NULL, N, Cl, C, err, errlen));
  /* d atty -> dqkv (N,3Cl) */
  KK(kern_attention_backward(k, g->dqkv, g->scratch, g->dbuf, la->qkv, la->atty,
                             la->lse, B, T, Cl, NHl, err, errlen));
  /* dqkv -> dbuf (N,C) = d ln1 */
  KK(kern_matmul_backward(k, g->dbuf, G(l, GPT_QKV_W), G(l, GPT_QKV_B),
                          g->scratch, g->dqkv, la->ln1, P(l, GPT_QKV_W), NULL,
                          N, C, 3 * Cl, err, errlen));
  if (tp_sum(g, g->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  /* d ln1 -> dresid += (now d of the block's input) */
  KK(kern_layernorm_backward(k, g->dresid, G(l, GPT_LN1_W), G(l, GPT_LN1_B),
                             g->scratch, g->dbuf, in, P(l, GPT_LN1_W),
                             la->ln1_mean, la->ln1_rstd, N, C, err, errlen));
  return 0;
}

/* The Llama block's backward (llama_cpu.c's layer_backward), as
 * gpt2_layer_backward. recompute gelu keeps the gate and up products and
 * makes the SwiGLU output again; block the whole block. d4c holds the
 * gate and up gradients (N,2I) with the hidden gradient (N,I) after
 * them, then the q/k/v product's gradient (N,C+2KVD). */
static int llama_layer_backward(gpt_cuda *g, int l, const layer_bufs *la,
                                const floatX *in, int B, int T, char *err,
                                size_t errlen) {
  const kern_ctx *k = &g->k;
  const gpt_config *c = &g->cfg;
  /* A tensor shard's widths (llama_layer_forward); the column-split
   * products' input gradients summed over the group. */
  int C = c->n_embd, Cl = g->Cl, NH = g->NHl, KV = g->KVl, N = B * T;
  int I = g->Fl, QKV = Cl + 2 * KV * (C / c->n_head);
  if (g->o.recompute == GPT_RECOMPUTE_BLOCK) {
    if (layer_forward(g, l, la, in, NULL, B, T, err, errlen) != 0)
      return -1;
  } else if (g->o.recompute == GPT_RECOMPUTE_GELU) {
    KK(kern_swiglu_forward(k, la->fch_gelu, la->fch_pre, N, I, err, errlen));
  }
  /* MLP. dresid = d out -> dhid (N,I) -> dgu (N,2I) -> dbuf = d ln2 */
  floatX *dhid = g->d4c + (size_t)N * 2 * I;
  KK(kern_linear_backward(k, dhid, GL(l, LLAMA_DOWN_W), g->dresid, la->fch_gelu,
                          PL(l, LLAMA_DOWN_W), N, I, C, err, errlen));
  KK(kern_swiglu_backward(k, g->d4c, dhid, la->fch_pre, N, I, err, errlen));
  KK(kern_linear_backward(k, g->dbuf, GL(l, LLAMA_GATE_W), g->d4c, la->ln2,
                          PL(l, LLAMA_GATE_W), N, C, 2 * I, err, errlen));
  if (tp_sum(g, g->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  /* d ln2 -> dresid += (now d res2) */
  KK(kern_rmsnorm_backward(k, g->dresid, GL(l, LLAMA_LN2_W), g->scratch,
                           g->dbuf, la->res2, PL(l, LLAMA_LN2_W), la->ln2_rstd,
                           N, C, err, errlen));
  /* Attention. d res2 -> dbuf = d atty -> dqkv (N,3C) -> d4c
   * (N,C+2KVD): RoPE turned back, GQA's heads summed -> dbuf = d ln1 */
  KK(kern_linear_backward(k, g->dbuf, GL(l, LLAMA_O_W), g->dresid, la->atty,
                          PL(l, LLAMA_O_W), N, Cl, C, err, errlen));
  KK(kern_attention_backward(k, g->dqkv, g->scratch, g->dbuf, la->qkv, la->atty,
                             la->lse, B, T, Cl, NH, err, errlen));
  KK(kern_rope_qkv_backward(k, g->d4c, g->dqkv, g->rope_cs, g->rope_sn, B, T,
                            Cl, NH, KV, err, errlen));
  KK(kern_linear_backward(k, g->dbuf, GL(l, LLAMA_Q_W), g->d4c, la->ln1,
                          PL(l, LLAMA_Q_W), N, C, QKV, err, errlen));
  if (tp_sum(g, g->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  /* d ln1 -> dresid += (now d of the block's input) */
  KK(kern_rmsnorm_backward(k, g->dresid, GL(l, LLAMA_LN1_W), g->scratch,
                           g->dbuf, in, PL(l, LLAMA_LN1_W), la->ln1_rstd, N, C,
                           err, errlen));
  return 0;
}

/* The head and the final norm's backward: dlogits (in logits; alpha the
 * scale still to apply) -> dresid = d of the last block's output. The
 * parameter hook's order as the forward's, reversed (gpt_cpu.c's and
 * llama_cpu.c's): the head's group, then (tied) the norm's. */
static int head_backward(gpt_cuda *g, float alpha, int N, char *err,
                         size_t errlen) {
  const gpt_config *c = &g->cfg;
  int C = c->n_embd, L = c->n_layer, hg = g->head_grp;
  /* dlogits (N,Vp), head (Vp,C) -> dbuf (N,C) = dlogits head (d lnf);
   * dhead (Vp,C) += dlogits^T lnf. */
  if (params_need(g, hg, hg == 0 ? L + 1 : L, 1, err, errlen) != 0)
    return -1;
  const floatX *head = param_of(g, hg, g->head_t);
  int Vl = g->Vl; /* a tensor shard's rows; Vp without */
  if (gemm_rm(g, 0, 0, N, C, Vl, g->logits, Vl, head, C, g->dbuf, C, 0, alpha,
              0.0f, err, errlen) != 0 ||
      gemm_rm(g, 1, 0, Vl, C, N, g->logits, Vl, g->lnf, C,
              grad_of(g, hg, g->head_t), C, 1, alpha, 1.0f, err, errlen) != 0 ||
      tp_sum(g, g->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  if (hg == 0 && (params_done(g, 0, L + 1, err, errlen) != 0 ||
                  params_need(g, L + 1, L, 1, err, errlen) != 0))
    return -1;
  /* d lnf -> dresid (N,C), the residual stream's gradient. */
  CK(cudaMemsetAsync(g->dresid, 0, (size_t)N * C * sizeof(floatX),
                     g->k.stream));
  size_t lf = g->norm_t;
  if (g->llama)
    KK(kern_rmsnorm_backward(&g->k, g->dresid, grad_of(g, L + 1, lf),
                             g->scratch, g->dbuf, resid_at(g, L),
                             param_of(g, L + 1, lf), g->lnf_rstd, N, C, err,
                             errlen));
  else
    KK(kern_layernorm_backward(&g->k, g->dresid, grad_of(g, L + 1, lf),
                               grad_of(g, L + 1, lf + 1), g->scratch, g->dbuf,
                               resid_at(g, L), param_of(g, L + 1, lf),
                               g->lnf_mean, g->lnf_rstd, N, C, err, errlen));
  if (params_done(g, L + 1, L, err, errlen) != 0)
    return -1;
  if (g->grad_hook)
    g->grad_hook(g->grad_hook_arg, g->off[lf]);
  return 0;
}

/* The embeddings' gradients from dresid: with a tied head their DONE
 * came after the head (group 0 is still placed); an untied Llama's
 * embedding group is needed here, last, as llama_cpu.c does. */
static int embedding_backward(gpt_cuda *g, int B, int T, char *err,
                              size_t errlen) {
  int untied = g->head_grp != 0, C = g->cfg.n_embd;
  if (untied && params_need(g, 0, -1, 1, err, errlen) != 0)
    return -1;
  KK(kern_encoder_backward(
      &g->k, grad_of(g, 0, 0), g->llama ? NULL : grad_of(g, 0, 1), g->scratch,
      g->dresid, g->ids, g->ids_host, B, T, C, err, errlen));
  if (untied && params_done(g, 0, -1, err, errlen) != 0)
    return -1;
  if (g->grad_hook)
    g->grad_hook(g->grad_hook_arg, 0);
  return 0;
}

/* The backward of layers [first, last), from the top: dresid holds the
 * gradient of layer last - 1's output, and after the loop that of layer
 * first's input. */
static int layers_backward(gpt_cuda *g, int first, int last, char *err,
                           size_t errlen) {
  int B = g->B, T = g->T;
  for (int l = last - 1; l >= first; l--) {
    /* Layer l is group 1 + l; the next one needed is layer l - 1's (or,
     * after layer 0, an untied head's embedding). */
    int next = l > 0 ? l : (g->head_grp != 0 ? 0 : -1);
    if (params_need(g, 1 + l, next, 1, err, errlen) != 0)
      return -1;
    const layer_bufs *la = &g->layers[l];
    const floatX *in = resid_at(g, l);
    if ((g->llama ? llama_layer_backward(g, l, la, in, B, T, err, errlen)
                  : gpt2_layer_backward(g, l, la, in, B, T, err, errlen)) != 0)
      return -1;
    if (params_done(g, 1 + l, next, err, errlen) != 0)
      return -1;
    /* Layer l's tensors are contiguous and nothing after this writes
     * them: the gradient from layer l on is final (once the stream gets
     * here). */
    if (g->grad_hook)
      g->grad_hook(g->grad_hook_arg,
                   g->off[g->llama ? llama_ti(l, 0) : gpt_ti(l, 0)]);
  }
  return 0;
}

/* The backward of the last forward's layers [stage_first, stage_last):
 * from the loss at scale on the last stage (dy NULL), else from dy
 * (device BF16 (B,T,C), the gradient of the stage's output); down to the
 * embeddings' gradients on the first stage, else to the input's
 * gradient, left in dresid. */
static int backward(gpt_cuda *g, const void *dy, float scale, char *err,
                    size_t errlen) {
  const gpt_config *c = &g->cfg;
  int N = g->B * g->T;
  /* Logits gone with a loss: gpt_cuda_forward_train left their gradient
   * at scale 1 in their place. */
  const int have_dlogits = !g->logits_valid;
  g->have_loss = g->logits_valid = g->stage_train = 0;
  if (dy) {
    CK(cudaMemcpyAsync(g->dresid, dy, (size_t)N * c->n_embd * sizeof(floatX),
                       cudaMemcpyDeviceToDevice, g->k.stream));
  } else {
    /* logits -> dlogits (N,Vp) = d(scale * mean loss), in place; or the
     * forward's d(mean loss), times scale in the products below (the
     * same bits where scale is a power of 2: both scalings are exact). */
    float alpha = 1.0f;
    if (have_dlogits)
      alpha = scale;
    else
      KK(classify(g, scale / (float)N, N, err, errlen));
    if (head_backward(g, alpha, N, err, errlen) != 0)
      return -1;
  }
  if (layers_backward(g, g->stage_first, g->stage_last, err, errlen) != 0)
    return -1;
  return g->stage_first == 0 ? embedding_backward(g, g->B, g->T, err, errlen)
                             : 0;
}

extern "C" int gpt_cuda_backward(gpt_cuda *g, float scale, char *err,
                                 size_t errlen) {
  if (!g->have_loss)
    return 0;
  if (whole_model(g, err, errlen) != 0)
    return -1;
  /* d(0 * loss) adds nothing, as gpt_backward's zero dlogits add nothing;
   * and kern_fused_classifier with dloss 0 leaves the logits as they are
   * instead of writing a zero gradient, so going on would backpropagate
   * the logits themselves. */
  if (scale == 0.0f || scale / (float)(g->B * g->T) == 0.0f) {
    g->have_loss = g->logits_valid = 0;
    if (g->grad_hook)
      g->grad_hook(g->grad_hook_arg, 0);
    return 0;
  }
  return backward(g, NULL, scale, err, errlen);
}

/* ---- Pipeline stages ---- */

extern "C" int gpt_cuda_set_stage(gpt_cuda *g, int first, int last, char *err,
                                  size_t errlen) {
  forget_passes(g);
  if (first < g->act_first || first >= last || last > g->act_last)
    return fail(err, errlen,
                "gpt_cuda: stage [%d,%d) is not a range of the %d layers "
                "[%d,%d) this gpt_cuda keeps activations of",
                first, last, g->cfg.n_layer, g->act_first, g->act_last);
  g->stage_first = first;
  g->stage_last = last;
  return 0;
}

extern "C" int gpt_cuda_forward_stage(gpt_cuda *g, const uint32_t *inputs,
                                      const void *x, const uint32_t *targets,
                                      int B, int T, float *loss, char *err,
                                      size_t errlen) {
  int first = g->stage_first == 0, last = g->stage_last == g->cfg.n_layer;
  int has_ids = inputs != NULL, has_x = x != NULL, has_tg = targets != NULL;
  if (has_ids != first || has_x == first || has_tg != last)
    return fail(err, errlen,
                "gpt_cuda: stage [%d,%d) of %d layers takes %s and %s",
                g->stage_first, g->stage_last, g->cfg.n_layer,
                first ? "the ids (not a stream)" : "a stream (not the ids)",
                last ? "the targets" : "no targets");
  int rc = forward(g, inputs, x, targets, B, T, loss, 1, err, errlen);
  g->stage_train = rc == 0;
  return rc;
}

extern "C" int gpt_cuda_set_slot(gpt_cuda *g, int slot, char *err,
                                 size_t errlen) {
  if (slot < 0 || slot >= g->nslots)
    return fail(err, errlen, "gpt_cuda: slot %d, but there are %d", slot,
                g->nslots);
  load_slot(g, slot, 1);
  return 0;
}

extern "C" const void *gpt_cuda_stage_output(const gpt_cuda *g) {
  if (!g->B || g->stage_last == g->cfg.n_layer)
    return NULL;
  return resid_at((gpt_cuda *)g, g->stage_last);
}

extern "C" int gpt_cuda_backward_stage(gpt_cuda *g, const void *dy, float scale,
                                       char *err, size_t errlen) {
  int last = g->stage_last == g->cfg.n_layer, has_dy = dy != NULL;
  if (!g->stage_train || (last && !g->have_loss) || has_dy == last)
    return fail(err, errlen,
                "gpt_cuda: stage [%d,%d): no trainer's forward to go back "
                "through, or %s",
                g->stage_first, g->stage_last,
                last ? "a gradient given to the last stage"
                     : "no output gradient given");
  return backward(g, dy, scale, err, errlen);
}

extern "C" const void *gpt_cuda_stage_input_grad(const gpt_cuda *g) {
  return g->stage_first > 0 ? g->dresid : NULL;
}

extern "C" void gpt_cuda_set_grad_hook(gpt_cuda *g,
                                       void (*hook)(void *arg,
                                                    size_t final_from),
                                       void *arg) {
  g->grad_hook = hook;
  g->grad_hook_arg = arg;
}

extern "C" void *gpt_cuda_stream(gpt_cuda *g) { return (void *)g->k.stream; }

extern "C" void gpt_cuda_set_group_params(gpt_cuda *g, size_t grp, void *bf16) {
  g->gp[grp] = (floatX *)bf16;
}

extern "C" void gpt_cuda_set_group_grads(gpt_cuda *g, size_t grp,
                                         float *grads) {
  g->gg[grp] = grads;
}

extern "C" void gpt_cuda_set_param_hook(gpt_cuda *g, gpt_param_hook_fn hook,
                                        void *arg) {
  g->param_hook = hook;
  g->param_hook_arg = arg;
}

#undef P
#undef G
#undef PL
#undef GL

extern "C" int gpt_cuda_scale_grads(gpt_cuda *g, float s, char *err,
                                    size_t errlen) {
  int blocks = g->k.sm_count * 4;
  /* The padding (a gang's) is zero, and stays so. */
  scale_kernel<<<blocks, 256, 0, g->k.stream>>>(g->grads, g->ngrads, s);
  CK(cudaGetLastError());
  return 0;
}

extern "C" int gpt_cuda_add_floats(gpt_cuda *g, float *dst, const float *src,
                                   size_t n, char *err, size_t errlen) {
  if (n == 0)
    return 0;
  add_kernel<<<g->k.sm_count * 4, 256, 0, g->k.stream>>>(dst, src, n);
  CK(cudaGetLastError());
  return 0;
}

extern "C" int gpt_cuda_add_grads(gpt_cuda *g, size_t at, const float *src,
                                  size_t n, char *err, size_t errlen) {
  if (at > g->ngrads || n > g->ngrads - at)
    return fail(err, errlen,
                "gpt_cuda: gradients [%zu, %zu) are not in the %zu held", at,
                at + n, g->ngrads);
  return gpt_cuda_add_floats(g, g->grads + at, src, n, err, errlen);
}

/* ---- Optimizer ---- */

extern "C" int gpt_cuda_grad_sumsq(gpt_cuda *g, size_t lo, size_t n,
                                   double *ss, char *err, size_t errlen) {
  if (lo > g->ngrads || n > g->ngrads - lo)
    return fail(err, errlen,
                "gpt_cuda: gradient range [%zu, %zu) past the %zu there are",
                lo, lo + n, g->ngrads);
  float s = 0;
  KK(kern_sum_squares(&g->k, g->scalars + 1, g->scratch, g->grads + lo, n, err,
                      errlen));
  CK(cudaMemcpyAsync(&s, g->scalars + 1, 4, cudaMemcpyDeviceToHost,
                     g->k.stream));
  CK(cudaStreamSynchronize(g->k.stream));
  *ss = (double)s;
  return 0;
}

extern "C" void gpt_cuda_set_clip(gpt_cuda *g, double norm, double max_norm) {
  g->grad_scale = 1.0f;
  /* As optim_clip_grad_norm: a non-finite norm is left to the spike
   * guard. */
  if (max_norm > 0.0 && isfinite(norm)) {
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
      g->grad_scale = (float)coef;
  }
}

extern "C" int gpt_cuda_clip_grad_norm(gpt_cuda *g, double max_norm,
                                       double *norm, char *err,
                                       size_t errlen) {
  double ss;
  /* Every gradient: the model's, or a shard's. */
  if (gpt_cuda_grad_sumsq(g, 0, g->np < g->ngrads ? g->np : g->ngrads, &ss, err,
                          errlen) != 0)
    return -1;
  *norm = sqrt(ss);
  gpt_cuda_set_clip(g, *norm, max_norm);
  return 0;
}

extern "C" int gpt_cuda_step(gpt_cuda *g, float lr, char *err,
                             size_t errlen) {
  const optim_config *oc = &g->o.opt;
  g->t++;
  /* The betas as the user wrote them, in double, as optim.c does. */
  double b1 = optim_as_written(oc->beta1), b2 = optim_as_written(oc->beta2);
  double t = (double)g->t;
  float b1c = (float)(1.0 - pow(b1, t)), b2c = (float)(1.0 - pow(b2, t));
  /* The master weights and the moments are pieces of the flat layout:
   * one, [lo, lo + nm) (everything but for a gang rank's shard), or
   * stage 3's. Each optimizer run's part of a piece is at its offset in
   * the piece from the piece's local offset in the master weights and
   * the moments; in params at its flat offset, or with stage 3 at the
   * same place as in the master weights (but for a window's offset mlo);
   * in grads as in params, or where the gradients are the shard's alone
   * as in the master weights. */
  float *m = g->ostate, *v = g->ostate + g->nm;
  gpt_cuda_piece whole = {g->lo, g->nm, 0};
  size_t np1 = g->npieces ? g->npieces : 1;
  for (size_t j = 0; j < np1; j++) {
    const gpt_cuda_piece *pc = g->npieces ? &g->pieces[j] : &whole;
    size_t lo = pc->flat, hi = pc->flat + pc->n;
    size_t at = g->npieces ? pc->local : pc->flat;
    if (g->npieces) {
      /* The piece's part in the master weights' window, the shard's
       * [mlo, mlo + nm) (all of it without master_n). */
      size_t wa = pc->local > g->mlo ? pc->local : g->mlo;
      size_t wb = pc->local + pc->n < g->mlo + g->nm ? pc->local + pc->n
                                                     : g->mlo + g->nm;
      if (wa >= wb)
        continue;
      lo = pc->flat + (wa - pc->local);
      hi = pc->flat + (wb - pc->local);
    }
    for (size_t i = 0; i < g->nruns; i++) {
      const opt_run *r = &g->runs[i];
      size_t a = r->offset > lo ? r->offset : lo;
      size_t b = r->offset + r->numel < hi ? r->offset + r->numel : hi;
      if (a >= b)
        continue;
      size_t mi = pc->local + (a - pc->flat) - g->mlo;
      size_t pi = at + (a - pc->flat);
      size_t gi = g->o.grad_shard ? mi : pi;
      float wd = r->decay ? oc->weight_decay : 0.0f;
      if (oc->kind == OPTIM_ADAMW)
        KK(kern_adamw_update(&g->k, g->master + mi, g->params + pi, m + mi,
                             v + mi, g->grads + gi, b - a, lr, oc->beta1,
                             oc->beta2, b1c, b2c, oc->eps, wd, g->grad_scale,
                             err, errlen));
      else
        KK(kern_lion_update(&g->k, g->master + mi, g->params + pi, m + mi,
                            g->grads + gi, b - a, lr, oc->beta1, oc->beta2, wd,
                            g->grad_scale, err, errlen));
    }
  }
  g->grad_scale = 1.0f;
  return 0;
}

extern "C" int gpt_cuda_optim_reset(gpt_cuda *g, char *err, size_t errlen) {
  size_t nst = optim_state_floats_for(g->o.opt.kind, g->nm);
  CK(cudaMemsetAsync(g->ostate, 0, nst * 4, g->k.stream));
  g->t = 0;
  return 0;
}

/* ---- Memory ---- */

extern "C" int gpt_cuda_synchronize(gpt_cuda *g, char *err, size_t errlen) {
  CK(cudaStreamSynchronize(g->k.stream));
  return 0;
}

extern "C" void *gpt_cuda_alloc(gpt_cuda *g, size_t bytes) {
  void *p = NULL;
  if (cudaSetDevice(g->o.device) != cudaSuccess ||
      cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError(); /* not sticky: the next call must not see it */
    return NULL;
  }
  return p;
}

extern "C" void gpt_cuda_free(void *buf) {
  if (buf)
    cudaFree(buf);
}

extern "C" int gpt_cuda_copy(gpt_cuda *g, void *dst, const void *src,
                             size_t bytes, char *err, size_t errlen) {
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->k.stream));
  return gpt_cuda_synchronize(g, err, errlen);
}

extern "C" const char *gpt_cuda_attention(const gpt_cuda *g,
                                          uint64_t *extra_bytes) {
  if (extra_bytes)
    *extra_bytes = kern_attention_extra_bytes(&g->k);
  return g->attention;
}

extern "C" uint64_t gpt_cuda_allocated_bytes(const gpt_cuda *g) {
  return g->bytes + g->k.lt_workspace_bytes;
}

extern "C" int gpt_cuda_device_used(gpt_cuda *g, uint64_t *used,
                                    uint64_t *total, char *err,
                                    size_t errlen) {
  size_t fr = 0, tot = 0;
  CK(cudaSetDevice(g->o.device));
  CK(cudaMemGetInfo(&fr, &tot));
  *used = tot - fr;
  *total = tot;
  return 0;
}

extern "C" uint64_t gpt_cuda_get_t(const gpt_cuda *g) { return g->t; }

extern "C" float *gpt_cuda_grads_ptr(gpt_cuda *g) { return g->grads; }
extern "C" void *gpt_cuda_params_ptr(gpt_cuda *g) { return g->params; }
extern "C" float *gpt_cuda_master_ptr(gpt_cuda *g) { return g->master; }
