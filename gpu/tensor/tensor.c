/* Tensor-parallel training on CPU ranks; see tensor.h. Names: T is the
 * sequence length where it is a kernel's argument (B,T), as in the
 * engine; the group's size is ranks. */
#include "tensor.h"

#include "cpu/cpu_impl.h"
#include "cpu/gpt_cpu.h"
#include "model/gpt_impl.h"
#include "tensor_stage.h"
#include "zero/zslice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How a tensor is cut: whole on every rank, by rows (rank r has rows
 * [r rows/T, (r+1) rows/T)), or by columns in `blocks` equal blocks
 * (c_attn's q, k and v: rank r has the same slice of each). */
enum { SPLIT_NONE, SPLIT_ROWS, SPLIT_COLS };

/* One tensor of the model and this rank's shard of it: the full
 * (rows, cols) at foff in the model's arrays, the shard (lrows, lcols)
 * at loff in the rank's. */
typedef struct shard {
  size_t foff, loff, rows, cols, lrows, lcols;
  int kind, blocks, decay;
} shard;

/* ZeRO-3's groups (tensor_options.zero_stage 3): the shards' floats cut
 * into ranges, each gathered whole over the shard group at once, zero.c's
 * stage 3 over the shards: the replicated tensors (Z3_REPL, kept whole
 * through the step: small, and every layer and the head use them), the
 * embedding's rows (Z3_EMB, the tied head's too), each layer's split
 * tensors (Z3_LAYER + l), a Llama's untied head's (Z3_LAYER + n_layer). */
enum { Z3_REPL, Z3_EMB, Z3_LAYER };

/* One of them: [a, a + z.n) of the shards, its piece (z.S floats) at so
 * in the rank's slice; while in use its gathered parameters (D S floats)
 * and, in backward, its gradient. */
typedef struct zgroup {
  size_t a, so;
  zslice z;
  float *full, *grad;
} zgroup;

/* A layer's activations, kept from its forward for its backward. Sizes
 * for N = B*T positions, Cl = C/T, Fl = 4C/T, NHl = NH/T. A Llama's in
 * the same fields: ln1, ln1_rstd its RMSNorm's output and 1/rms, qkv
 * its q (N,Cl), k and v (N,KVl) after RoPE, fch the gate, fch_gelu the
 * SwiGLU output, up (N,Fl) the up projection (GPT-2: none), Fl = FF/T. */
typedef struct layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
  float *qkv;                       /* (N,QKl): this rank's heads */
  float *att;                       /* (B,NHl,T,T) */
  float *atty;                      /* (N,Cl) */
  float *res2;                      /* (N,C) */
  float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
  float *fch, *fch_gelu, *up;       /* (N,Fl) each */
  float *res3;                      /* (N,C) */
} layer_acts;

/* One micro-batch's activations (a slot): what its backward needs. The
 * layers of the stage only (the others NULL). */
typedef struct slot {
  layer_acts *la; /* n_layer */
  /* The streams this slot's micro-batch sent on and still in flight
   * (its last layer's output forward, its input's gradient back, from
   * encoded): waited for before the slot takes another micro-batch. */
  comm_req *sent[2];
  float *encoded; /* (N,C) the stream entering the stage's first layer */
  float *lnf, *lnf_mean, *lnf_rstd; /* the last stage's */
  float *logits; /* (N,Vl), then the softmax, then its gradient */
  uint32_t *ids; /* (N): the micro-batch's inputs (the first stage's) */
} slot;

struct tensor_par {
  comm *c;
  gpt *model;
  tensor_options o;
  int r, ranks;         /* rank r of the tensor group */
  int C, Cl, Fl, NHl;   /* widths: the model's, and a shard's */
  /* A Llama (llama): a shard's key/value heads KVHl of KVl floats, its
   * q, k and v's width QKl (GPT-2: 3 Cl), the head size hs; the shard
   * indices of the final norm and of the head (the embedding when
   * tied). */
  int llama, KVHl, KVl, QKl, hs;
  size_t nf, ht;
  int V, Vl, lo, Vv;    /* vocabulary; rows of wte here, from id lo, of
                           which Vv are ids < V (the rest padding) */
  shard *sh;            /* one per tensor of the model, in its order */
  size_t nsh, nshard, nrepl_shard; /* floats of the shards; the
                                      replicated ones come first */
  /* The part of the shards this rank keeps and trains: its stage's
   * (tensor_stage.h; without stages all of them), n floats, the
   * replicated ones first, [0, nrepl). */
  tensor_stage st;
  size_t n, nrepl;
  float *tied;           /* with a tied head over stages: its gradient's sum
                            (st.tied_n floats) */
  float *params, *grads; /* zs.D x zs.S floats (the padding zero); the
                            gradients NULL between steps at zero_stage 2 */
  optim *opt;            /* over zs's slice: all n without ZeRO */
  /* ZeRO over dp (tensor_options.zero_stage 1-2): this rank's slice of
   * the shards' n floats, its reduced gradient gsl (S), and whether the
   * parameters await the all-gather of the last update (stale). Without
   * it, one rank's slice: the whole. */
  zslice zs;
  float *gsl;
  int stale;
  /* ZeRO-3 (zero_stage 3, zgroup above): the nzg groups (NULL at the
   * other stages), each tensor's gof[i]; params is then this rank's
   * slice, S3 floats (piece d of every group in turn), grads stays NULL
   * and gsl is the slice's gradient, each group's reduction added into
   * it through spare (the largest piece). hg: the head's group. held,
   * most: the bytes of the groups' parameters [0] and gradients [1] in
   * use, now and at most (tensor_memory_get's in-step figures). */
  zgroup *zg;
  size_t nzg, *gof, S3, smax, hg;
  float *spare; /* smax floats, in a step of micro-batches (micro > 1) */
  int accum;    /* gsl holds this step's earlier micro-batches' */
  uint64_t held[2], most[2];
  /* Pipeline stages (tensor_options.pp): stage s of P, layers [first,
   * last). */
  int s, P, first, last;
  /* Activations: nslots micro-batches' (one, or with stages all m of a
   * step) and the backward's scratch, one allocation. */
  float *acts;
  slot *slots;
  int nslots;
  pipeline_op *ops;   /* the step's: each micro-batch's forward, backward */
  int nsent;          /* stream sends in flight (the slots') */
  float *red;         /* (2N): the sums of exp and the target logits */
  float *maxes;       /* (T,N) every rank's row maxima */
  float *dres, *dbuf; /* (N,C) */
  float *dqkv, *datt; /* (N,3Cl), (B,NHl,T,T) */
  float *dcl, *dfl;   /* (N,Cl), (N,Fl) */
  float *dup;         /* (N,Fl), a Llama's */
  float *cos, *sin;   /* (T,hs/2), a Llama's RoPE tables */
};

int tensor_check(const gpt_config *cfg, int T, int world, char *err,
                 size_t errlen) {
  if (T < 2 || cfg->n_head % T != 0) {
    snprintf(err, errlen,
             "tensor_parallel %d does not divide the model's %d heads (each "
             "rank gets n_head / tensor_parallel whole heads)",
             T, cfg->n_head);
    return -1;
  }
  if (cfg->family == GPT_FAMILY_LLAMA &&
      (cfg->n_kv_head % T != 0 || cfg->intermediate % T != 0)) {
    snprintf(err, errlen,
             "tensor_parallel %d does not divide the model's %d key/value "
             "heads and its intermediate_size %d (each rank gets "
             "n_kv_head / tensor_parallel whole key/value heads and "
             "intermediate_size / tensor_parallel SwiGLU columns)",
             T, cfg->n_kv_head, cfg->intermediate);
    return -1;
  }
  if (cfg->padded_vocab % T != 0) {
    snprintf(err, errlen,
             "tensor_parallel %d does not divide the padded vocabulary of "
             "%d rows (vocab_size %d rounded up to a multiple of 64; each "
             "rank gets padded_vocab / tensor_parallel of them)",
             T, cfg->padded_vocab, cfg->vocab_size);
    return -1;
  }
  if (world < T || world % T != 0) {
    snprintf(err, errlen,
             "world_size %d is not a multiple of tensor_parallel %d (the "
             "gang is data-parallel replicas of tensor_parallel ranks "
             "each)",
             world, T);
    return -1;
  }
  return 0;
}

/* ---- The shards ---- */

/* How tensor i (gpt.h's order) of a model of L layers is cut, and in
 * how many column blocks. */
static int split_of(size_t i, int L, int *blocks) {
  *blocks = 1;
  if (i == 0)
    return SPLIT_ROWS; /* wte: by vocabulary ids */
  if (i < 2 || i >= gpt_ti(L, 0))
    return SPLIT_NONE; /* wpe, ln_f */
  switch ((i - 2) % GPT_NLAYER_TENSORS) {
  case GPT_QKV_W:
  case GPT_QKV_B:
    *blocks = 3;
    return SPLIT_COLS;
  case GPT_FC_W:
  case GPT_FC_B:
    return SPLIT_COLS;
  case GPT_ATTPROJ_W:
  case GPT_FCPROJ_W:
    return SPLIT_ROWS;
  default:
    return SPLIT_NONE; /* LayerNorms, the row-split products' biases */
  }
}

/* How tensor i of a Llama's nt is cut (nn.Linear's (out,in) layout:
 * a column-split product's weight by rows, a row-split one's by
 * columns). */
static int split_of_llama(size_t i, size_t nt, int untied) {
  if (i == 0 || (untied && i == nt - 1))
    return SPLIT_ROWS; /* embed_tokens, lm_head: by vocabulary ids */
  if (i >= nt - 1 - (size_t)untied)
    return SPLIT_NONE; /* model.norm */
  switch ((i - 1) % LLAMA_NLAYER_TENSORS) {
  case LLAMA_Q_W:
  case LLAMA_K_W:
  case LLAMA_V_W:
  case LLAMA_GATE_W:
  case LLAMA_UP_W:
    return SPLIT_ROWS; /* their heads, their SwiGLU columns */
  case LLAMA_O_W:
  case LLAMA_DOWN_W:
    return SPLIT_COLS;
  default:
    return SPLIT_NONE; /* the RMSNorms */
  }
}

/* The shard layout (tensor.h): the shards of every tensor of a model
 * over `ranks` ranks, n floats of which the replicated [0, nrepl). */
struct tensor_layout {
  shard *sh;
  size_t nsh, n, nrepl;
};

/* The shards of every tensor, the replicated ones laid out first. */
static int layout_fill(tensor_layout *p, const gpt *model, int ranks) {
  size_t nt = gpt_tensor_count(model);
  const gpt_config *cfg = gpt_get_config(model);
  int L = cfg->n_layer, llama = cfg->family == GPT_FAMILY_LLAMA;
  if (!(p->sh = calloc(nt, sizeof *p->sh)))
    return -1;
  p->nsh = nt;
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(model, i);
    shard *s = &p->sh[i];
    s->foff = t->offset;
    s->rows = t->ndim == 2 ? (size_t)t->shape[0] : 1;
    s->cols = t->ndim == 2 ? (size_t)t->shape[1] : t->numel;
    s->blocks = 1;
    s->kind = llama ? split_of_llama(i, nt, cfg->untied_head)
                    : split_of(i, L, &s->blocks);
    s->decay = t->decay;
    s->lrows = s->kind == SPLIT_ROWS ? s->rows / (size_t)ranks : s->rows;
    s->lcols = s->kind == SPLIT_COLS ? s->cols / (size_t)ranks : s->cols;
  }
  for (int pass = 0; pass < 2; pass++) /* replicated, then split */
    for (size_t i = 0; i < nt; i++) {
      shard *s = &p->sh[i];
      if ((s->kind != SPLIT_NONE) != pass)
        continue;
      s->loff = p->n;
      p->n += s->lrows * s->lcols;
      if (pass == 0)
        p->nrepl = p->n;
    }
  return 0;
}

static int make_shards(tensor_par *p) {
  tensor_layout l = {0};
  int rc = layout_fill(&l, p->model, p->ranks);
  p->sh = l.sh;
  p->nsh = l.nsh;
  p->n = l.n;
  p->nrepl = l.nrepl;
  return rc;
}

/* Rank r's shard of s between full (the whole tensor's first float)
 * and loc (the shard's): into loc with to_loc, else into full. */
static void shard_copy(const shard *s, int r, float *full, float *loc,
                       int to_loc) {
  size_t row0 = s->kind == SPLIT_ROWS ? (size_t)r * s->lrows : 0;
  size_t bw = s->lcols / (size_t)s->blocks, fb = s->cols / (size_t)s->blocks;
  size_t c0 = s->kind == SPLIT_COLS ? (size_t)r * bw : 0;
  for (size_t i = 0; i < s->lrows; i++)
    for (int b = 0; b < s->blocks; b++) {
      float *f = full + (row0 + i) * s->cols + (size_t)b * fb + c0;
      float *l = loc + i * s->lcols + (size_t)b * bw;
      if (to_loc)
        memcpy(l, f, bw * sizeof(float));
      else
        memcpy(f, l, bw * sizeof(float));
    }
}

int tensor_layout_create(const gpt *model, int ranks, tensor_layout **out,
                         char *err, size_t errlen) {
  *out = NULL;
  const gpt_config *cfg = gpt_get_config(model);
  if (tensor_check(cfg, ranks, ranks, err, errlen) != 0)
    return -1;
  tensor_layout *l = calloc(1, sizeof *l);
  if (!l || layout_fill(l, model, ranks) != 0) {
    tensor_layout_destroy(l);
    snprintf(err, errlen, "tensor: out of memory for the shard layout");
    return -1;
  }
  *out = l;
  return 0;
}

void tensor_layout_destroy(tensor_layout *l) {
  if (!l)
    return;
  free(l->sh);
  free(l);
}

size_t tensor_layout_floats(const tensor_layout *l, size_t *nrepl) {
  if (nrepl)
    *nrepl = l->nrepl;
  return l->n;
}

void tensor_layout_tensor(const tensor_layout *l, size_t i, size_t *offset,
                          size_t *numel) {
  *offset = l->sh[i].loff;
  *numel = l->sh[i].lrows * l->sh[i].lcols;
}

void tensor_layout_take(const tensor_layout *l, int r, const float *full,
                        float *loc) {
  for (size_t i = 0; i < l->nsh; i++)
    shard_copy(&l->sh[i], r, (float *)full + l->sh[i].foff, loc + l->sh[i].loff,
               1);
}

void tensor_layout_place(const tensor_layout *l, int r, const float *loc,
                         float *full) {
  for (size_t i = 0; i < l->nsh; i++)
    if (r == 0 || l->sh[i].kind != SPLIT_NONE)
      shard_copy(&l->sh[i], r, full + l->sh[i].foff,
                 (float *)loc + l->sh[i].loff, 0);
}

/* tensor_par's shards as a layout (borrowed). */
static tensor_layout layout_of(const tensor_par *p) {
  return (tensor_layout){p->sh, p->nsh, p->nshard, p->nrepl_shard};
}

/* ---- ZeRO-3's groups ---- */

/* Tensor i's group (Z3_*) in a model of L layers. */
static size_t z3_group_of(const tensor_par *p, size_t i, int L) {
  if (p->sh[i].kind == SPLIT_NONE)
    return Z3_REPL;
  if (i == 0)
    return Z3_EMB;
  if (i == p->ht)
    return Z3_LAYER + (size_t)L; /* a Llama's untied head */
  return Z3_LAYER + (p->llama ? (i - 1) / LLAMA_NLAYER_TENSORS
                              : (i - 2) / GPT_NLAYER_TENSORS);
}

/* The groups over dp (zgroup), cut from this rank's part (tensor_stage.h:
 * its stage's tensors; without stages the whole shards): each one's range
 * of the part (the part keeps the replicated tensors first, then the
 * split ones in the model's order, so a group's tensors are one range),
 * its piece of it and where that lies in the slice. The groups of the
 * other stages' tensors are empty (n 0: never gathered). 0, or -1 out of
 * memory. */
static int make_groups(tensor_par *p, comm *dp) {
  int L = gpt_get_config(p->model)->n_layer;
  p->nzg = Z3_LAYER + (size_t)L + (p->ht != 0);
  p->zg = calloc(p->nzg, sizeof *p->zg);
  p->gof = calloc(p->nsh, sizeof *p->gof);
  size_t *end = calloc(p->nzg, sizeof *end);
  if (!p->zg || !p->gof || !end) {
    free(end);
    return -1;
  }
  for (size_t g = 0; g < p->nzg; g++)
    p->zg[g].a = p->n;
  for (size_t i = 0; i < p->nsh; i++) {
    size_t g = p->gof[i] = z3_group_of(p, i, L), at = p->st.at[i];
    if (!p->st.numel[i])
      continue; /* another stage's */
    p->zg[g].a = at < p->zg[g].a ? at : p->zg[g].a;
    end[g] = at + p->st.numel[i] > end[g] ? at + p->st.numel[i] : end[g];
  }
  for (size_t g = 0; g < p->nzg; g++) {
    zgroup *z = &p->zg[g];
    z->a = end[g] ? z->a : 0;
    zslice_init(&z->z, dp, end[g] - z->a);
    z->so = p->S3;
    p->S3 += z->z.S;
    p->smax = z->z.S > p->smax ? z->z.S : p->smax;
  }
  free(end);
  p->hg = p->gof[p->ht];
  return 0;
}

/* A tied head over stages: the floats of its gradient the stages sum
 * (sum_tied), the embedding's shard, or at zero_stage 3 its group's
 * piece, which the first and the last stage cut alike (the same floats
 * over the same replicas). */
static size_t tied_floats(const tensor_par *p) {
  size_t D = p->zg ? (size_t)p->zg[Z3_EMB].z.D : 1;
  return (p->st.tied_n + D - 1) / D;
}

/* zero_stage 3's slice (this rank's piece of each group in turn) of
 * the part's n floats (in); or back, every rank's pieces gathered over
 * dp into out (n floats), through tmp (D smax floats). */
static void z3_take(const tensor_par *p, const float *in, float *slice) {
  for (size_t g = 0; g < p->nzg; g++)
    zslice_take(&p->zg[g].z, in + p->zg[g].a, slice + p->zg[g].so);
}
static int z3_gather(tensor_par *p, const float *slice, float *out, float *tmp,
                     char *err, size_t errlen) {
  int rc = 0;
  for (size_t g = 0; g < p->nzg && rc == 0; g++) {
    zgroup *z = &p->zg[g];
    if (z->z.n) /* not another stage's */
      rc = zslice_gather_to(&z->z, slice + z->so, out + z->a, tmp, err, errlen);
  }
  return rc;
}

/* Rank r's shards of full (the model's layout) into the rank's
 * parameters: its part of them, or at zero_stage 3 its slice of that. 0,
 * or -1 out of memory. */
static int take_params(tensor_par *p, const float *full) {
  tensor_layout l = layout_of(p);
  float *loc = malloc(p->nshard * sizeof(float));
  float *part = p->zg ? malloc(p->n * sizeof(float) + 1) : p->params;
  int ok = loc && part;
  if (ok) {
    tensor_layout_take(&l, p->r, full, loc);
    tensor_stage_take(&p->st, loc, part);
    if (p->zg)
      z3_take(p, part, p->params);
  }
  if (part != p->params)
    free(part);
  free(loc);
  return ok ? 0 : -1;
}

/* The counts of the groups' buffers in use: kind 0 parameters, 1
 * gradients, bytes added (or, negative, freed). */
static void z3_count(tensor_par *p, int kind, int64_t bytes) {
  p->held[kind] = (uint64_t)((int64_t)p->held[kind] + bytes);
  if (p->held[kind] > p->most[kind])
    p->most[kind] = p->held[kind];
}

/* zero_stage 3: group g's parameters gathered whole for the pass about
 * to use them (a no-op where they are, for another pipeline stage's
 * group, and at the other ZeRO stages). */
static int group_use(tensor_par *p, size_t g, char *err, size_t errlen) {
  if (!p->zg || p->zg[g].full || !p->zg[g].z.n)
    return 0;
  zgroup *z = &p->zg[g];
  size_t DS = (size_t)z->z.D * z->z.S;
  if (!(z->full = malloc(DS * sizeof(float)))) {
    snprintf(err, errlen, "tensor: out of memory gathering a group");
    return -1;
  }
  z3_count(p, 0, 4 * (int64_t)DS);
  memcpy(z->full + z->z.lo, p->params + z->so, z->z.S * sizeof(float));
  return zslice_gather(&z->z, z->full, err, errlen);
}

/* Group g's gathered parameters released (a no-op without them). */
static void group_drop(tensor_par *p, size_t g) {
  if (!p->zg || !p->zg[g].full)
    return;
  zgroup *z = &p->zg[g];
  free(z->full);
  z->full = NULL;
  z3_count(p, 0, -4 * (int64_t)((size_t)z->z.D * z->z.S));
}

/* zero_stage 3: group g's gradient, zeroed, for the backward about to
 * add into it (a no-op where it is, for another pipeline stage's group,
 * and at the other ZeRO stages). */
static int grad_use(tensor_par *p, size_t g, char *err, size_t errlen) {
  if (!p->zg || p->zg[g].grad || !p->zg[g].z.n)
    return 0;
  zgroup *z = &p->zg[g];
  size_t DS = (size_t)z->z.D * z->z.S;
  if (!(z->grad = calloc(DS, sizeof(float)))) {
    snprintf(err, errlen, "tensor: out of memory for a group's gradient");
    return -1;
  }
  z3_count(p, 1, 4 * (int64_t)DS);
  return 0;
}

/* Group g's gradient final for this micro-batch (zero_stage 3; a no-op
 * else): reduce-scattered over dp, this rank's piece of the mean into
 * the slice's gradient (added after the step's first micro-batch), the
 * buffer released. */
static int grad_done(tensor_par *p, size_t g, char *err, size_t errlen) {
  if (!p->zg || !p->zg[g].grad)
    return 0;
  zgroup *z = &p->zg[g];
  float inv = 1.0f / (float)z->z.D, *to = p->gsl + z->so;
  int rc =
      zslice_reduce(&z->z, z->grad, p->accum ? p->spare : to, inv, err, errlen);
  for (size_t i = 0; rc == 0 && p->accum && i < z->z.S; i++)
    to[i] += p->spare[i];
  free(z->grad);
  z->grad = NULL;
  z3_count(p, 1, -4 * (int64_t)((size_t)z->z.D * z->z.S));
  return rc;
}

/* The optimizer over the shards, a group each (their decay flags). */
static int make_optim(tensor_par *p, char *err, size_t errlen) {
  optim_group *g = calloc(p->nsh, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "tensor: out of memory");
    return -1;
  }
  /* optim wants the groups in order of their offsets: the part's
   * tensors (the shards' order, the replicated first). */
  size_t k = 0;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < p->nsh; i++)
      if ((p->sh[i].kind != SPLIT_NONE) == pass && p->st.numel[i])
        g[k++] = (optim_group){p->st.at[i], p->st.numel[i], p->sh[i].decay};
  int rc = -1;
  optim_group *cut = p->zg ? calloc(p->nzg * (k + 1), sizeof *cut) : NULL;
  if (!p->zg) {
    rc = zslice_optim(&p->zs, &p->o.opt, g, k, &p->opt, err, errlen);
  } else if (!cut) {
    snprintf(err, errlen, "tensor: out of memory");
  } else {
    /* zero_stage 3: each group's piece, at its place in the slice. */
    size_t nc = 0;
    for (size_t i = 0; i < p->nzg; i++) {
      const zgroup *z = &p->zg[i];
      nc += zslice_cut(g, k, z->a + z->z.lo, z->z.own, z->so, z->z.S, cut + nc);
    }
    rc = optim_create(&p->o.opt, p->S3, cut, nc, &p->opt, err, errlen);
  }
  free(cut);
  free(g);
  return rc;
}

/* ---- Activations ---- */

/* Carves the activations from base (NULL: counts only); the float count.
 * The ids are kept as floats' room: a uint32_t is a float's size. */
static size_t carve(tensor_par *p, float *base) {
  size_t N = (size_t)p->o.B * p->o.T, C = (size_t)p->C,
         at = (size_t)p->o.B * p->NHl * p->o.T * p->o.T;
  size_t n = 0;
#define TAKE(x, k)                                                             \
  do {                                                                         \
    if (base)                                                                  \
      (x) = base + n;                                                          \
    n += (k);                                                                  \
  } while (0)
  for (int k = 0; k < p->nslots; k++) {
    slot *sl = &p->slots[k];
    for (int l = p->first; l < p->last; l++) {
      layer_acts *a = &sl->la[l];
      TAKE(a->ln1, N * C);
      TAKE(a->ln1_mean, N);
      TAKE(a->ln1_rstd, N);
      TAKE(a->qkv, N * p->QKl);
      TAKE(a->att, at);
      TAKE(a->atty, N * p->Cl);
      TAKE(a->res2, N * C);
      TAKE(a->ln2, N * C);
      TAKE(a->ln2_mean, N);
      TAKE(a->ln2_rstd, N);
      TAKE(a->fch, N * p->Fl);
      TAKE(a->fch_gelu, N * p->Fl);
      TAKE(a->up, p->llama ? N * p->Fl : 0);
      TAKE(a->res3, N * C);
    }
    TAKE(sl->encoded, N * C);
    TAKE(sl->lnf, N * C);
    TAKE(sl->lnf_mean, N);
    TAKE(sl->lnf_rstd, N);
    TAKE(sl->logits, N * p->Vl);
    if (base)
      sl->ids = (uint32_t *)(base + n);
    n += N;
  }
  TAKE(p->red, 2 * N);
  TAKE(p->maxes, N * p->ranks);
  TAKE(p->dres, N * C);
  TAKE(p->dbuf, N * C);
  TAKE(p->dqkv, N * p->QKl);
  TAKE(p->datt, at);
  TAKE(p->dcl, N * p->Cl);
  TAKE(p->dfl, N * p->Fl);
  TAKE(p->dup, p->llama ? N * p->Fl : 0);
  TAKE(p->cos, p->llama ? (size_t)p->o.T * p->hs / 2 : 0);
  TAKE(p->sin, p->llama ? (size_t)p->o.T * p->hs / 2 : 0);
#undef TAKE
  return n;
}

/* The slots, each with its table of layers, and their activations. */
static int make_slots(tensor_par *p) {
  int L = gpt_get_config(p->model)->n_layer;
  if (!(p->slots = calloc((size_t)p->nslots, sizeof *p->slots)))
    return -1;
  for (int k = 0; k < p->nslots; k++)
    if (!(p->slots[k].la = calloc((size_t)L, sizeof(layer_acts))))
      return -1;
  if (!(p->acts = malloc(carve(p, NULL) * sizeof(float))))
    return -1;
  carve(p, p->acts);
  return 0;
}

int tensor_create(comm *c, gpt *model, const tensor_options *o,
                  tensor_par **out, char *err, size_t errlen) {
  *out = NULL;
  const gpt_config *cfg = gpt_get_config(model);
  int ranks = comm_size(c);
  if (tensor_check(cfg, ranks, ranks, err, errlen) != 0)
    return -1;
  if (o->pp && (comm_size(o->pp) > cfg->n_layer ||
                cfg->n_layer % comm_size(o->pp) != 0)) {
    snprintf(err, errlen, "tensor: %d stages of %d layers", comm_size(o->pp),
             cfg->n_layer);
    return -1;
  }
  if (o->micro < 1 || o->B < 1 || o->T < 1 || o->T > cfg->block_size) {
    snprintf(err, errlen, "tensor: micro-batches %d of B=%d T=%d", o->micro,
             o->B, o->T);
    return -1;
  }
  if (o->zero_stage != 3 &&
      zslice_check_stage(o->zero_stage, "tensor", err, errlen) != 0)
    return -1;
  tensor_par *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "tensor: out of memory");
    return -1;
  }
  *out = p;
  p->c = c;
  p->model = model;
  p->o = *o;
  p->ranks = ranks;
  p->r = comm_rank(c);
  p->C = cfg->n_embd;
  p->Cl = cfg->n_embd / ranks;
  p->llama = cfg->family == GPT_FAMILY_LLAMA;
  p->Fl = (p->llama ? cfg->intermediate : 4 * cfg->n_embd) / ranks;
  p->NHl = cfg->n_head / ranks;
  p->hs = cfg->n_embd / cfg->n_head;
  p->KVHl = p->llama ? cfg->n_kv_head / ranks : p->NHl;
  p->KVl = p->KVHl * p->hs;
  p->QKl = p->Cl + 2 * p->KVl;
  size_t nt = gpt_tensor_count(model);
  p->ht = p->llama && cfg->untied_head ? nt - 1 : 0;
  p->nf = p->llama ? nt - 1 - (size_t)(cfg->untied_head != 0)
                   : gpt_ti(cfg->n_layer, 0);
  p->V = cfg->vocab_size;
  p->Vl = cfg->padded_vocab / ranks;
  p->lo = p->r * p->Vl;
  p->Vv = p->V - p->lo < 0 ? 0 : p->V - p->lo > p->Vl ? p->Vl : p->V - p->lo;
  p->P = o->pp ? comm_size(o->pp) : 1;
  p->s = o->pp ? comm_rank(o->pp) : 0;
  p->first = p->s * (cfg->n_layer / p->P);
  p->last = p->first + cfg->n_layer / p->P;
  /* The schedule's slots: GPipe's all m micro-batches, 1F1B's P - s at
   * most; alone, one (forward and backward in turn). */
  if (!(p->ops = malloc(2 * (size_t)o->micro * sizeof *p->ops))) {
    snprintf(err, errlen, "tensor: out of memory");
    return -1;
  }
  p->nslots = pipeline_schedule_ops(p->P > 1 ? o->schedule : PIPELINE_1F1B,
                                    p->P, p->s, o->micro, p->ops);
  int zs = o->zero_stage > 0 && o->dp && comm_size(o->dp) > 1;
  int z3 = zs && o->zero_stage == 3;
  if (!zs)
    p->o.zero_stage = 0; /* one replica: nothing to shard over */
  int ok = make_shards(p) == 0;
  p->nshard = p->n;
  p->nrepl_shard = p->nrepl;
  if (ok) {
    tensor_layout l = layout_of(p);
    if (tensor_stage_init(&p->st, model, &l, p->s, p->P, err, errlen) != 0)
      return -1;
    p->n = p->st.n; /* this rank's part: its stage's */
    p->nrepl = p->st.nrepl;
  }
  /* Stages 1-2 slice the part's array (zs); 3 slices each group of it. */
  ok = ok && (!z3 || make_groups(p, o->dp) == 0);
  if (ok && p->st.tied_n && !(p->tied = malloc(tied_floats(p) * sizeof(float))))
    ok = 0;
  zslice_init(&p->zs, zs && !z3 ? o->dp : NULL, p->n);
  size_t DS = (size_t)p->zs.D * p->zs.S, S = z3 ? p->S3 : p->zs.S;
  if (!ok || !(p->params = calloc(z3 ? S : DS, sizeof(float))) ||
      (p->o.zero_stage < 2 && !(p->grads = calloc(DS, sizeof(float)))) ||
      (zs && !(p->gsl = calloc(S, sizeof(float)))) || make_slots(p) != 0 ||
      take_params(p, gpt_params(model)) != 0) {
    snprintf(err, errlen, "tensor: out of memory for the shards of B=%d T=%d",
             o->B, o->T);
    return -1;
  }
  if (p->llama)
    llama_cpu_rope_tables(p->cos, p->sin, 0, o->T, p->hs, cfg->rope_theta);
  return make_optim(p, err, errlen);
}

void tensor_destroy(tensor_par *p) {
  if (!p)
    return;
  optim_destroy(p->opt);
  for (int k = 0; p->slots && k < p->nslots; k++)
    free(p->slots[k].la);
  free(p->slots);
  free(p->ops);
  for (size_t g = 0; p->zg && g < p->nzg; g++) {
    free(p->zg[g].full);
    free(p->zg[g].grad);
  }
  free(p->zg);
  free(p->gof);
  free(p->spare);
  free(p->sh);
  free(p->params);
  free(p->grads);
  free(p->gsl);
  free(p->acts);
  free(p->tied);
  tensor_stage_free(&p->st);
  free(p);
}

void tensor_sizes(const tensor_par *p, size_t *local, size_t *full) {
  *local = p->n;
  *full = gpt_num_params(p->model);
}

int tensor_slots(const tensor_par *p) { return p->nslots; }

/* A group's gathered bytes (D S floats). */
static uint64_t z3_bytes(const tensor_par *p, size_t g) {
  return 4 * (uint64_t)p->zg[g].z.D * p->zg[g].z.S;
}

/* zero_stage 3's bytes: between steps the slices of the parameters and
 * of their gradient; in a step beside them, the groups' in use at most
 * (group_use, grad_use), of this rank's part's groups (another stage's
 * are empty): of the parameters, the replicated tensors' through the
 * step and one group else (a layer's in each pass, the head's from its
 * forward to its backward); of the gradients, in a backward, the
 * replicated tensors', and on one stage a layer's at a time beside a
 * tied embedding's (kept to the lookup's backward), or else an untied
 * head's (or beside stages the tied copy's), a layer's and the
 * embedding's in turn; and with micro-batches the spare. */
static void z3_memory(const tensor_par *p, zslice_memory *m) {
  uint64_t one = 0, layer = 0, rep = z3_bytes(p, Z3_REPL);
  uint64_t emb = z3_bytes(p, Z3_EMB), head = z3_bytes(p, p->hg);
  for (size_t g = Z3_EMB; g < p->nzg; g++) {
    uint64_t b = z3_bytes(p, g);
    one = b > one ? b : one;
    if (g >= Z3_LAYER && g != p->hg)
      layer = b > layer ? b : layer;
  }
#define MAX(a, b) ((a) > (b) ? (a) : (b))
  uint64_t most =
      p->hg == Z3_EMB && p->P == 1 ? emb + layer : MAX(MAX(head, layer), emb);
#undef MAX
  m->params = m->grads = 4 * (uint64_t)p->S3;
  m->peak_params = m->params + rep + one;
  m->peak_grads = m->grads + rep + most +
                  (p->o.micro > 1 ? 4 * (uint64_t)p->smax : 0); /* spare */
}

void tensor_memory(const tensor_par *p, zslice_memory *m) {
  uint64_t DS = (uint64_t)p->zs.D * p->zs.S * 4, sl = p->gsl ? p->zs.S * 4 : 0;
  m->params = m->peak_params = DS;
  m->grads = (p->grads ? DS : 0) + sl;
  m->optim = (uint64_t)optim_state_floats(p->opt) * 4;
  m->peak_grads = DS + sl;
  if (p->zg)
    z3_memory(p, m);
  /* A tied head over stages: the buffer of its gradient's sum over them
   * (sum_tied), held through the run. */
  uint64_t tied = p->tied ? 4 * (uint64_t)tied_floats(p) : 0;
  m->grads += tied;
  m->peak_grads += tied;
  /* zero_stage 2 over the same group: the shards whole, their gradient
   * in the step beside its slice, the tied embedding's sum whole. */
  uint64_t D = p->o.dp ? (uint64_t)comm_size(p->o.dp) : 1;
  uint64_t S2 = (p->n + D - 1) / D;
  m->stage2_params = 4 * D * S2;
  m->stage2_grads = 4 * (D * S2 + (D > 1 ? S2 : 0) + (tied ? p->st.tied_n : 0));
}

/* ---- The passes ---- */

/* Tensor i's shard: its parameters and gradients (at zero_stage 3 in
 * its group's buffers, which group_use and grad_use made). */
static float *par(tensor_par *p, size_t i) {
  if (!p->zg)
    return p->params + p->st.at[i];
  const zgroup *z = &p->zg[p->gof[i]];
  return z->full + (p->st.at[i] - z->a);
}
static float *grd(tensor_par *p, size_t i) {
  if (!p->zg)
    return p->grads + p->st.at[i];
  const zgroup *z = &p->zg[p->gof[i]];
  return z->grad + (p->st.at[i] - z->a);
}

/* The shard of tensor k of layer l (gpt_impl.h's GPT_*): parameters
 * and gradients. */
static float *lp(tensor_par *p, int l, int k) { return par(p, gpt_ti(l, k)); }
static float *lg(tensor_par *p, int l, int k) { return grd(p, gpt_ti(l, k)); }

/* A sum over the group, in place. */
static int allreduce(tensor_par *p, float *x, size_t n, char *err,
                     size_t errlen) {
  return comm_allreduce_sum(p->c, x, n, err, errlen);
}

/* The vocabulary-parallel lookup: ids (N) -> out (N,C) = wte[id] +
 * wpe[t] (a Llama: embed_tokens[id] alone), each rank adding the rows of its
 * own ids (zeros for the others) and the group summing them: x + 0 is x, so the
 * stream is one process's to the bit. */
static int embed(tensor_par *p, slot *a, int N, int T, char *err,
                 size_t errlen) {
  const float *wte = par(p, 0);
  const float *wpe = p->llama ? NULL : par(p, 1);
  int C = p->C;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    int64_t id = (int64_t)a->ids[i] - p->lo;
    float *o = a->encoded + (size_t)i * C;
    if (id >= 0 && id < p->Vl)
      memcpy(o, wte + (size_t)id * C, (size_t)C * sizeof(float));
    else
      memset(o, 0, (size_t)C * sizeof(float));
  }
  if (allreduce(p, a->encoded, (size_t)N * C, err, errlen) != 0)
    return -1;
  if (p->llama)
    return 0;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++)
      a->encoded[(size_t)i * C + c] += wpe[(size_t)(i % T) * C + c];
  return 0;
}

/* The lookup's backward: dres (N,C) -> dwte += at this rank's ids, dwpe
 * += summed over the batch (each thread its channels, the positions in
 * order, as gpt_cpu_encoder_backward adds them). */
static void embed_backward(tensor_par *p, const slot *a, int B, int T) {
  float *dwte = grd(p, 0), *dwpe = p->llama ? NULL : grd(p, 1);
  int C = p->C, N = B * T;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += 16) {
    int c1 = c0 + 16 < C ? c0 + 16 : C;
    for (int i = 0; i < N; i++) {
      int64_t id = (int64_t)a->ids[i] - p->lo;
      if (id < 0 || id >= p->Vl)
        continue;
      const float *d = p->dres + (size_t)i * C;
      float *we = dwte + (size_t)id * C;
      for (int c = c0; c < c1; c++)
        we[c] += d[c];
    }
  }
  if (p->llama)
    return;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++)
    for (int b = 0; b < B; b++) {
      const float *d = p->dres + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; c++)
        dwpe[(size_t)t * C + c] += d[c];
    }
}

/* A row-split product back onto the stream: out (N,C) = res + (inp
 * (N,K) w (K,C), summed over the group) + bias, the bias added once
 * (after the sum), in one process's order: (res + bias) + product. */
static int row_product(tensor_par *p, float *out, const float *res,
                       const float *inp, const float *w, const float *bias,
                       int N, int K, char *err, size_t errlen) {
  int C = p->C;
  cpu_gemm(0, 0, N, C, K, 1.0f, inp, K, w, C, 0.0f, out, C);
  if (allreduce(p, out, (size_t)N * C, err, errlen) != 0)
    return -1;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++)
    for (int j = 0; j < C; j++) {
      size_t k = (size_t)i * C + j;
      out[k] = (res[k] + bias[j]) + out[k];
    }
  return 0;
}

/* Layer l's forward from res (N,C). */
static int layer_forward(tensor_par *p, slot *sl, int l, const float *res,
                         int B, int T, char *err, size_t errlen) {
  layer_acts *a = &sl->la[l];
  int N = B * T, C = p->C;
  gpt_cpu_layernorm(a->ln1, a->ln1_mean, a->ln1_rstd, res, lp(p, l, GPT_LN1_W),
                    lp(p, l, GPT_LN1_B), N, C);
  /* ln1 (N,C) -> qkv (N,3Cl), this rank's heads -> atty (N,Cl) */
  gpt_cpu_matmul_forward(a->qkv, a->ln1, lp(p, l, GPT_QKV_W),
                         lp(p, l, GPT_QKV_B), N, C, 3 * p->Cl);
  gpt_cpu_attention_forward(a->atty, a->att, a->qkv, B, T, p->Cl, p->NHl);
  if (row_product(p, a->res2, res, a->atty, lp(p, l, GPT_ATTPROJ_W),
                  lp(p, l, GPT_ATTPROJ_B), N, p->Cl, err, errlen) != 0)
    return -1;
  gpt_cpu_layernorm(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                    lp(p, l, GPT_LN2_W), lp(p, l, GPT_LN2_B), N, C);
  /* ln2 (N,C) -> fch (N,Fl) -> fch_gelu (N,Fl) */
  gpt_cpu_matmul_forward(a->fch, a->ln2, lp(p, l, GPT_FC_W), lp(p, l, GPT_FC_B),
                         N, C, p->Fl);
  gpt_cpu_gelu(a->fch_gelu, a->fch, (size_t)N * p->Fl);
  return row_product(p, a->res3, a->res2, a->fch_gelu, lp(p, l, GPT_FCPROJ_W),
                     lp(p, l, GPT_FCPROJ_B), N, p->Fl, err, errlen);
}

/* A Llama's layer tensor k (LLAMA_*) of layer l: parameters and
 * gradients. */
static float *llp(tensor_par *p, int l, int k) {
  return par(p, llama_ti(l, k));
}
static float *llg(tensor_par *p, int l, int k) {
  return grd(p, llama_ti(l, k));
}

/* A Llama's row-split product back onto the stream: out (N,C) = res +
 * (inp (N,K) w^T, w this rank's (C,K) columns, summed over the group). */
static int llama_rows(tensor_par *p, float *out, const float *res,
                      const float *inp, const float *w, int N, int K, char *err,
                      size_t errlen) {
  int C = p->C;
  cpu_gemm(0, 1, N, C, K, 1.0f, inp, K, w, K, 0.0f, out, C);
  if (allreduce(p, out, (size_t)N * C, err, errlen) != 0)
    return -1;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < (size_t)N * C; i++)
    out[i] = res[i] + out[i];
  return 0;
}

/* A Llama's layer l forward from res (N,C): RMSNorm (replicated), q, k,
 * v of this rank's heads, RoPE on them, attention, o_proj's rows (g);
 * RMSNorm, gate and up's columns, SwiGLU, down_proj's rows (g). */
static int llama_layer_forward(tensor_par *p, slot *sl, int l, const float *res,
                               int B, int T, char *err, size_t errlen) {
  layer_acts *a = &sl->la[l];
  int N = B * T, C = p->C, Cl = p->Cl, KVl = p->KVl, Fl = p->Fl;
  float eps = gpt_get_config(p->model)->norm_eps;
  float *q = a->qkv, *k = q + (size_t)N * Cl, *v = k + (size_t)N * KVl;
  llama_cpu_rmsnorm(a->ln1, a->ln1_rstd, res, llp(p, l, LLAMA_LN1_W), N, C,
                    eps);
  llama_cpu_linear_forward(q, a->ln1, llp(p, l, LLAMA_Q_W), N, C, Cl);
  llama_cpu_linear_forward(k, a->ln1, llp(p, l, LLAMA_K_W), N, C, KVl);
  llama_cpu_linear_forward(v, a->ln1, llp(p, l, LLAMA_V_W), N, C, KVl);
  llama_cpu_rope(q, p->cos, p->sin, B, T, p->NHl, p->hs, 1);
  llama_cpu_rope(k, p->cos, p->sin, B, T, p->KVHl, p->hs, 1);
  llama_cpu_attention_forward(a->atty, a->att, q, k, v, B, T, p->NHl, p->KVHl,
                              p->hs);
  if (llama_rows(p, a->res2, res, a->atty, llp(p, l, LLAMA_O_W), N, Cl, err,
                 errlen) != 0)
    return -1;
  llama_cpu_rmsnorm(a->ln2, a->ln2_rstd, a->res2, llp(p, l, LLAMA_LN2_W), N, C,
                    eps);
  llama_cpu_linear_forward(a->fch, a->ln2, llp(p, l, LLAMA_GATE_W), N, C, Fl);
  llama_cpu_linear_forward(a->up, a->ln2, llp(p, l, LLAMA_UP_W), N, C, Fl);
  llama_cpu_swiglu(a->fch_gelu, a->fch, a->up, (size_t)N * Fl);
  return llama_rows(p, a->res3, a->res2, a->fch_gelu, llp(p, l, LLAMA_DOWN_W),
                    N, Fl, err, errlen);
}

/* A Llama's layer l backward: dres = d res3 in, d of the layer's input
 * res out (in place); the column-split products' input gradients summed
 * over the group (f). */
static int llama_layer_backward(tensor_par *p, const slot *sl, int l,
                                const float *res, int B, int T, char *err,
                                size_t errlen) {
  layer_acts *a = &sl->la[l];
  int N = B * T, C = p->C, Cl = p->Cl, KVl = p->KVl, Fl = p->Fl;
  /* MLP: d res3 -> d hid (N,Fl) -> d gate, d up -> dbuf = d xn2 (f) */
  llama_cpu_linear_backward(p->dup, 0.0f, llg(p, l, LLAMA_DOWN_W), p->dres,
                            a->fch_gelu, llp(p, l, LLAMA_DOWN_W), N, Fl, C);
  llama_cpu_swiglu_backward(p->dfl, p->dup, p->dup, a->fch, a->up,
                            (size_t)N * Fl);
  llama_cpu_linear_backward(p->dbuf, 0.0f, llg(p, l, LLAMA_GATE_W), p->dfl,
                            a->ln2, llp(p, l, LLAMA_GATE_W), N, C, Fl);
  llama_cpu_linear_backward(p->dbuf, 1.0f, llg(p, l, LLAMA_UP_W), p->dup,
                            a->ln2, llp(p, l, LLAMA_UP_W), N, C, Fl);
  if (allreduce(p, p->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  llama_cpu_rmsnorm_backward(p->dres, llg(p, l, LLAMA_LN2_W), p->dbuf, a->res2,
                             llp(p, l, LLAMA_LN2_W), a->ln2_rstd, N, C);
  /* Attention: d res2 -> dcl = d y -> dq, dk, dv (before RoPE) -> dbuf =
   * d xn1 (f) */
  const float *q = a->qkv, *k = q + (size_t)N * Cl, *v = k + (size_t)N * KVl;
  float *dq = p->dqkv, *dk = dq + (size_t)N * Cl, *dv = dk + (size_t)N * KVl;
  llama_cpu_linear_backward(p->dcl, 0.0f, llg(p, l, LLAMA_O_W), p->dres,
                            a->atty, llp(p, l, LLAMA_O_W), N, Cl, C);
  llama_cpu_attention_backward(dq, dk, dv, p->datt, p->dcl, q, k, v, a->att, B,
                               T, p->NHl, p->KVHl, p->hs);
  llama_cpu_rope(dq, p->cos, p->sin, B, T, p->NHl, p->hs, -1);
  llama_cpu_rope(dk, p->cos, p->sin, B, T, p->KVHl, p->hs, -1);
  llama_cpu_linear_backward(p->dbuf, 0.0f, llg(p, l, LLAMA_Q_W), dq, a->ln1,
                            llp(p, l, LLAMA_Q_W), N, C, Cl);
  llama_cpu_linear_backward(p->dbuf, 1.0f, llg(p, l, LLAMA_K_W), dk, a->ln1,
                            llp(p, l, LLAMA_K_W), N, C, KVl);
  llama_cpu_linear_backward(p->dbuf, 1.0f, llg(p, l, LLAMA_V_W), dv, a->ln1,
                            llp(p, l, LLAMA_V_W), N, C, KVl);
  if (allreduce(p, p->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  llama_cpu_rmsnorm_backward(p->dres, llg(p, l, LLAMA_LN1_W), p->dbuf, res,
                             llp(p, l, LLAMA_LN1_W), a->ln1_rstd, N, C);
  return 0;
}

/* The vocabulary-parallel cross-entropy of logits (N,Vl), this rank's
 * Vv columns: every rank gets each row's loss, and its columns become
 * the softmax's probabilities. The mean loss into *loss. */
static int crossentropy(tensor_par *p, slot *a, const uint32_t *targets, int N,
                        float *loss, char *err, size_t errlen) {
  int Vv = p->Vv, Vl = p->Vl;
  float *red = p->red;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float *x = a->logits + (size_t)i * Vl;
    float mx = -INFINITY;
    for (int j = 0; j < Vv; j++)
      mx = x[j] > mx ? x[j] : mx;
    red[i] = mx;
  }
  if (comm_allgather(p->c, red, p->maxes, (size_t)N, err, errlen) != 0)
    return -1;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    float mx = p->maxes[i], *x = a->logits + (size_t)i * Vl;
    for (int r = 1; r < p->ranks; r++)
      mx = p->maxes[(size_t)r * N + i] > mx ? p->maxes[(size_t)r * N + i] : mx;
    p->maxes[i] = mx;
    int64_t t = (int64_t)targets[i] - p->lo;
    red[N + i] = t >= 0 && t < Vv ? x[t] : 0.0f;
    float sum = 0.0f;
    for (int j = 0; j < Vv; j++) {
      x[j] = expf(x[j] - mx);
      sum += x[j];
    }
    red[i] = sum;
  }
  if (allreduce(p, red, 2 * (size_t)N, err, errlen) != 0)
    return -1;
  double total = 0.0;
  for (int i = 0; i < N; i++) {
    float lse = p->maxes[i] + logf(red[i]);
    total += lse - red[N + i];
    float inv = 1.0f / red[i], *x = a->logits + (size_t)i * Vl;
    for (int j = 0; j < Vv; j++)
      x[j] *= inv;
  }
  *loss = (float)(total / (double)N);
  return 0;
}

/* Waits for slot a's sends in flight. */
static int slot_wait(tensor_par *p, slot *a, char *err, size_t errlen) {
  for (int i = 0; i < 2; i++)
    if (a->sent[i]) {
      comm_req *q = a->sent[i];
      a->sent[i] = NULL;
      p->nsent--;
      if (comm_wait(p->o.pp, q, err, errlen) != 0)
        return -1;
    }
  return 0;
}

/* The stream (N,C) between neighbouring stages (o.pp): this rank's
 * counterpart in the stage before or after sends what every rank of its
 * tensor group holds alike. Started (as pipeline.c's sends: 1F1B's
 * neighbours send to each other at once); x must stay as it is until
 * slot_wait(a). */
static int stream_send(tensor_par *p, slot *a, const float *x, int to,
                       char *err, size_t errlen) {
  /* Under the comm's limit of requests in flight: at 12, all waited for
   * (the neighbours receive in order, so they all complete). */
  for (int k = 0; p->nsent >= 12 && k < p->nslots; k++)
    if (slot_wait(p, &p->slots[k], err, errlen) != 0)
      return -1;
  comm_req **q = &a->sent[a->sent[0] != NULL];
  p->nsent++;
  return comm_isend(p->o.pp, x, (size_t)p->o.B * p->o.T * p->C * sizeof(float),
                    to, q, err, errlen);
}

static int stream_recv(tensor_par *p, float *x, int from, char *err,
                       size_t errlen) {
  return comm_recv(p->o.pp, x, (size_t)p->o.B * p->o.T * p->C * sizeof(float),
                   from, err, errlen);
}

/* The head of the last forward: res (N,C) -> ln_f (a Llama's
 * model.norm) -> this rank's logits (N,Vv) -> the loss into *loss. */
static int head(tensor_par *p, slot *a, const float *res,
                const uint32_t *targets, float *loss, char *err,
                size_t errlen) {
  int N = p->o.B * p->o.T, C = p->C;
  size_t lf = p->nf;
  if (p->llama)
    llama_cpu_rmsnorm(a->lnf, a->lnf_rstd, res, par(p, lf), N, C,
                      gpt_get_config(p->model)->norm_eps);
  else
    gpt_cpu_layernorm(a->lnf, a->lnf_mean, a->lnf_rstd, res, par(p, lf),
                      par(p, lf + 1), N, C);
  /* lnf (N,C), this rank's head rows (Vv,C) -> logits (N,Vv) */
  if (p->Vv > 0)
    cpu_gemm(0, 1, N, p->Vv, C, 1.0f, a->lnf, C, par(p, p->ht), C, 0.0f,
             a->logits, p->Vl);
  return crossentropy(p, a, targets, N, loss, err, errlen);
}

/* One micro-batch's forward of the stage's layers into slot a: from
 * inputs (B,T) on the first stage, else from the stream the stage
 * before sends; to the loss (targets (B,T)) into *loss on the last,
 * else the stream sent on. At zero_stage 3 each group is gathered for
 * its use and released after it, but the head's, which its backward
 * uses next (1F1B's last stage, and one stage, run it right after);
 * under GPipe the next forward comes first and releases it, so that one
 * group is gathered at a time (the head's backward gathers it again).
 *
 * Beside pipeline stages the schedule keeps several micro-batches in
 * flight on a stage, but each forward and backward runs through all
 * the stage's layers at once, so a layer's group is still gathered for
 * each pass and released after it: per micro-batch, as one stage with
 * grad_accum does. Keeping the stage's groups gathered for the step
 * instead would gather each once a step, not 2 m times, but hold the
 * stage's part whole through the step, as zero_stage 2 does: what stage
 * 3 is there to avoid. Measured (T=2 x P=2 x D=2 on 8 CPU
 * ranks, test_tensor_parallel's model, 40 steps, rank 0): 0.15, 0.29
 * and 0.57 MB all-gathered a step at grad_accum 2, 4 and 8, against
 * 0.05 at zero_stage 2 (its slices' one gather), in 0.3-2.4 ms a step;
 * the tokens a second of both within the noise of the shared cores. */
static int forward(tensor_par *p, slot *a, const uint32_t *inputs,
                   const uint32_t *targets, float *loss, char *err,
                   size_t errlen) {
  int B = p->o.B, T = p->o.T, N = B * T;
  if (slot_wait(p, a, err, errlen) != 0)
    return -1;
  group_drop(p, p->hg); /* GPipe's last stage: the last forward's head */
  if (p->s == 0) {
    memcpy(a->ids, inputs, (size_t)N * sizeof *a->ids);
    if (group_use(p, Z3_EMB, err, errlen) != 0 ||
        embed(p, a, N, T, err, errlen) != 0)
      return -1;
    group_drop(p, Z3_EMB);
  } else if (stream_recv(p, a->encoded, p->s - 1, err, errlen) != 0) {
    return -1;
  }
  const float *res = a->encoded;
  for (int l = p->first; l < p->last; l++) {
    if (group_use(p, Z3_LAYER + (size_t)l, err, errlen) != 0 ||
        (p->llama ? llama_layer_forward : layer_forward)(p, a, l, res, B, T,
                                                         err, errlen) != 0)
      return -1;
    group_drop(p, Z3_LAYER + (size_t)l);
    res = a->la[l].res3;
  }
  if (p->s < p->P - 1)
    return stream_send(p, a, res, p->s + 1, err, errlen);
  if (group_use(p, p->hg, err, errlen) != 0)
    return -1;
  return head(p, a, res, targets, loss, err, errlen);
}

/* The head's backward: the loss -> dres (N,C), the gradient of the
 * stream that leaves the last layer. */
static int head_backward(tensor_par *p, slot *a, const uint32_t *targets,
                         float scale, char *err, size_t errlen) {
  int N = p->o.B * p->o.T, C = p->C, Vl = p->Vl;
  float dloss = scale / (float)N;
  /* probs -> dlogits = dloss (probs - onehot), this rank's columns */
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    float *d = a->logits + (size_t)i * Vl;
    for (int j = 0; j < p->Vv; j++)
      d[j] *= dloss;
    int64_t t = (int64_t)targets[i] - p->lo;
    if (t >= 0 && t < p->Vv)
      d[t] -= dloss;
  }
  /* dlogits (N,Vv) -> dbuf (N,C) = dlogits wte, summed (f); dwte +=
   * dlogits^T lnf */
  float *wte = par(p, p->ht), *dwte = grd(p, p->ht);
  if (p->Vv > 0) {
    cpu_gemm(0, 0, N, C, p->Vv, 1.0f, a->logits, Vl, wte, C, 0.0f, p->dbuf, C);
    cpu_gemm(1, 0, p->Vv, C, N, 1.0f, a->logits, Vl, a->lnf, C, 1.0f, dwte, C);
  } else {
    memset(p->dbuf, 0, (size_t)N * C * sizeof(float));
  }
  if (allreduce(p, p->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  memset(p->dres, 0, (size_t)N * C * sizeof(float));
  size_t lf = p->nf;
  if (p->llama) {
    llama_cpu_rmsnorm_backward(p->dres, grd(p, lf), p->dbuf,
                               a->la[p->last - 1].res3, par(p, lf), a->lnf_rstd,
                               N, C);
    return 0;
  }
  gpt_cpu_layernorm_backward(p->dres, grd(p, lf), grd(p, lf + 1), p->dbuf,
                             a->la[p->last - 1].res3, par(p, lf), a->lnf_mean,
                             a->lnf_rstd, N, C);
  return 0;
}

/* Layer l's backward: dres = d res3 in, d of the layer's input res out
 * (in place). */
static int layer_backward(tensor_par *p, const slot *sl, int l,
                          const float *res, int B, int T, char *err,
                          size_t errlen) {
  layer_acts *a = &sl->la[l];
  int N = B * T, C = p->C;
  /* MLP: d res3 -> dfl (N,Fl) = d fch_gelu -> d fch; the bias's
   * gradient is the same on every rank (d res3 is). */
  gpt_cpu_matmul_backward(p->dfl, lg(p, l, GPT_FCPROJ_W),
                          lg(p, l, GPT_FCPROJ_B), p->dres, a->fch_gelu,
                          lp(p, l, GPT_FCPROJ_W), N, p->Fl, C);
  gpt_cpu_gelu_backward(p->dfl, a->fch, (size_t)N * p->Fl);
  /* d fch -> dbuf (N,C) = d ln2, this rank's part, summed (f) */
  gpt_cpu_matmul_backward(p->dbuf, lg(p, l, GPT_FC_W), lg(p, l, GPT_FC_B),
                          p->dfl, a->ln2, lp(p, l, GPT_FC_W), N, C, p->Fl);
  if (allreduce(p, p->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  gpt_cpu_layernorm_backward(p->dres, lg(p, l, GPT_LN2_W), lg(p, l, GPT_LN2_B),
                             p->dbuf, a->res2, lp(p, l, GPT_LN2_W), a->ln2_mean,
                             a->ln2_rstd, N, C);
  /* Attention: d res2 -> dcl (N,Cl) = d atty -> dqkv (N,3Cl) */
  gpt_cpu_matmul_backward(p->dcl, lg(p, l, GPT_ATTPROJ_W),
                          lg(p, l, GPT_ATTPROJ_B), p->dres, a->atty,
                          lp(p, l, GPT_ATTPROJ_W), N, p->Cl, C);
  gpt_cpu_attention_backward(p->dqkv, p->datt, p->dcl, a->qkv, a->att, B, T,
                             p->Cl, p->NHl);
  gpt_cpu_matmul_backward(p->dbuf, lg(p, l, GPT_QKV_W), lg(p, l, GPT_QKV_B),
                          p->dqkv, a->ln1, lp(p, l, GPT_QKV_W), N, C,
                          3 * p->Cl);
  if (allreduce(p, p->dbuf, (size_t)N * C, err, errlen) != 0)
    return -1;
  gpt_cpu_layernorm_backward(p->dres, lg(p, l, GPT_LN1_W), lg(p, l, GPT_LN1_B),
                             p->dbuf, res, lp(p, l, GPT_LN1_W), a->ln1_mean,
                             a->ln1_rstd, N, C);
  return 0;
}

/* The backward of slot a's forward: adds d(scale * loss)/d(shards) of
 * the stage's tensors into the gradients, from the loss on the last
 * stage, else from the gradient the stage after sends; the input's
 * gradient is sent back, or on the first stage goes to the embeddings.
 * At zero_stage 3 each group of the stage's part is gathered again for
 * its backward and released after it, and its gradient, once final,
 * goes to the slices (grad_done): a layer's after its backward, an
 * untied head's, or beside stages the last stage's tied copy's, after
 * the head's, the embedding's after the lookup's, the replicated
 * tensors' (every layer adds into these) at the end. */
static int backward(tensor_par *p, slot *a, const uint32_t *targets,
                    float scale, char *err, size_t errlen) {
  int B = p->o.B, T = p->o.T, rc = 0;
  if (grad_use(p, Z3_REPL, err, errlen) != 0)
    return -1;
  if (p->s == p->P - 1) {
    if (group_use(p, p->hg, err, errlen) != 0 ||
        grad_use(p, p->hg, err, errlen) != 0 ||
        head_backward(p, a, targets, scale, err, errlen) != 0)
      return -1;
    group_drop(p, p->hg);
    /* final, but a tied head's on one stage: the lookup adds to it */
    if ((p->hg != Z3_EMB || p->P > 1) && grad_done(p, p->hg, err, errlen) != 0)
      return -1;
  } else if (stream_recv(p, p->dres, p->s + 1, err, errlen) != 0) {
    return -1;
  }
  for (int l = p->last - 1; l >= p->first; l--) {
    size_t g = Z3_LAYER + (size_t)l;
    if (group_use(p, g, err, errlen) != 0 || grad_use(p, g, err, errlen) != 0 ||
        (p->llama ? llama_layer_backward : layer_backward)(
            p, a, l, l > p->first ? a->la[l - 1].res3 : a->encoded, B, T, err,
            errlen) != 0)
      return -1;
    group_drop(p, g);
    if (grad_done(p, g, err, errlen) != 0)
      return -1;
  }
  if (p->s > 0) {
    /* encoded is this micro-batch's no more: the gradient goes from it */
    memcpy(a->encoded, p->dres, (size_t)B * T * p->C * sizeof(float));
    rc = stream_send(p, a, a->encoded, p->s - 1, err, errlen);
  } else if ((rc = grad_use(p, Z3_EMB, err, errlen)) == 0) {
    embed_backward(p, a, B, T);
    rc = grad_done(p, Z3_EMB, err, errlen);
  }
  if (rc != 0 || grad_done(p, Z3_REPL, err, errlen) != 0)
    return -1;
  p->accum = 1; /* the next micro-batch's add into gsl */
  return 0;
}

/* The mean over the shard group (dp) of the gradients, into every
 * rank's whole array, or with ZeRO into its slice gsl (the full array
 * freed at zero_stage 2); then rank 0's replicated gradients for the
 * whole tensor group (tensor.h says why): all of them, or the part of
 * them in the slice, which is the same on every rank of the group. */
static int dp_mean(tensor_par *p, char *err, size_t errlen) {
  comm *dp = p->o.dp;
  int D = dp ? comm_size(dp) : 1;
  float inv = 1.0f / (float)D, *g = p->grads;
  size_t nr = p->nrepl;
  if (p->zg) {
    /* zero_stage 3: reduced group by group in backward; the replicated
     * tensors' piece leads the slice. */
    g = p->gsl;
    nr = p->zg[Z3_REPL].z.own;
  } else if (p->zs.D > 1) {
    if (zslice_reduce(&p->zs, p->grads, p->gsl, inv, err, errlen) != 0)
      return -1;
    if (p->o.zero_stage == 2) {
      free(p->grads);
      p->grads = NULL;
    }
    g = p->gsl;
    nr = p->zs.lo < nr ? nr - p->zs.lo : 0;
    nr = nr < p->zs.own ? nr : p->zs.own;
  } else if (D > 1) {
    if (comm_allreduce_sum(dp, p->grads, p->n, err, errlen) != 0)
      return -1;
    for (size_t i = 0; i < p->n; i++)
      p->grads[i] *= inv;
  }
  return nr ? comm_broadcast(p->c, g, nr * sizeof(float), 0, err, errlen) : 0;
}

/* A tied head over stages: the first stage's gradient of wte (the
 * lookups') and the last's (the head's) summed over pp into both (the
 * stages between add zeros), so that both copies take the same
 * update. */
static int sum_tied(tensor_par *p, char *err, size_t errlen) {
  size_t n = tied_floats(p), at = p->st.tied_at;
  float *g = p->grads;
  if (!n)
    return 0;
  if (p->zg) { /* zero_stage 3: the embedding group's piece of the slice */
    g = p->gsl;
    at = p->zg[Z3_EMB].so;
  }
  if (p->st.has_tied)
    memcpy(p->tied, g + at, n * sizeof(float));
  else
    memset(p->tied, 0, n * sizeof(float));
  if (comm_allreduce_sum(p->o.pp, p->tied, n, err, errlen) != 0)
    return -1;
  if (p->st.has_tied)
    memcpy(g + at, p->tied, n * sizeof(float));
  return 0;
}

/* After the micro-batches: with stages, the tied embedding's gradient
 * summed (sum_tied) and the last stage's loss for all; the mean over
 * the shard group (dp) of the gradients (dp_mean) and the loss; then
 * rank 0's loss for the whole tensor group. */
static int reduce_step(tensor_par *p, double *loss, char *err, size_t errlen) {
  comm *dp = p->o.dp;
  int D = dp ? comm_size(dp) : 1;
  if (p->P > 1 &&
      (sum_tied(p, err, errlen) != 0 ||
       comm_broadcast(p->o.pp, loss, sizeof *loss, p->P - 1, err, errlen)))
    return -1;
  if (D > 1) {
    if (comm_allreduce_sum_double(dp, loss, err, errlen) != 0)
      return -1;
    *loss /= D;
  }
  if (dp_mean(p, err, errlen) != 0)
    return -1;
  return comm_broadcast(p->c, loss, sizeof *loss, 0, err, errlen);
}

/* The parameters made whole after a ZeRO update (tensor_step updated
 * this rank's slice only): every rank's slice from the group. */
static int make_whole(tensor_par *p, char *err, size_t errlen) {
  if (!p->stale)
    return 0;
  p->stale = 0;
  return zslice_gather(&p->zs, p->params, err, errlen);
}

int tensor_forward_backward(tensor_par *p, const uint32_t *inputs,
                            const uint32_t *targets, double *loss, char *err,
                            size_t errlen) {
  size_t BT = (size_t)p->o.B * p->o.T;
  int m = p->o.micro, rc = 0;
  float scale = 1.0f / (float)m;
  if (make_whole(p, err, errlen) != 0)
    return -1;
  if (p->zg) {
    /* zero_stage 3: the replicated tensors whole for the step (they are
     * small, and every layer uses them); the gradients go to gsl. */
    p->accum = 0;
    if (p->o.micro > 1) {
      if (!(p->spare = malloc(p->smax * sizeof(float)))) {
        snprintf(err, errlen, "tensor: out of memory for the gradients");
        return -1;
      }
      z3_count(p, 1, 4 * (int64_t)p->smax);
    }
    if (group_use(p, Z3_REPL, err, errlen) != 0)
      return -1;
  } else if (!p->grads &&
             !(p->grads = calloc((size_t)p->zs.D * p->zs.S, sizeof(float)))) {
    snprintf(err, errlen, "tensor: out of memory for the gradients");
    return -1;
  }
  if (p->grads)
    memset(p->grads, 0, p->n * sizeof(float));
  *loss = 0;
  int nb = cpu_blas_threads_begin();
  /* Alone: each micro-batch's forward and backward in turn, in one slot.
   * With stages, the schedule's ops (tensor_options.schedule), the same
   * order of micro-batches on every stage (so each receive meets its
   * send). */
  for (int i = 0; i < 2 * m && rc == 0; i++) {
    const pipeline_op *op = &p->ops[i];
    size_t at = (size_t)op->mb * BT;
    slot *a = &p->slots[op->mb % p->nslots];
    float l = 0;
    if (op->backward) {
      rc = backward(p, a, targets + at, scale, err, errlen);
      continue;
    }
    rc = forward(p, a, inputs + at, targets + at, &l, err, errlen);
    *loss += l / m; /* as trainkit_forward_backward sums them */
  }
  for (int k = 0; k < p->nslots && rc == 0 && p->P > 1; k++)
    rc = slot_wait(p, &p->slots[k], err, errlen);
  group_drop(p, Z3_REPL);
  if (p->spare) {
    free(p->spare);
    p->spare = NULL;
    z3_count(p, 1, -4 * (int64_t)p->smax);
  }
  cpu_blas_threads_end(nb);
  return rc == 0 ? reduce_step(p, loss, err, errlen) : -1;
}

int tensor_clip_grad_norm(tensor_par *p, double max_norm, double *norm,
                          char *err, size_t errlen) {
  /* This rank's gradients: its slice of the shards' with ZeRO (from
   * flat index lo), else all of them. */
  int z = p->zs.D > 1 || p->zg;
  float *g = z ? p->gsl : p->grads;
  size_t lo = z ? p->zs.lo : 0, n = z ? p->zs.own : p->n;
  size_t from = p->r == 0 || p->nrepl <= lo ? 0 : p->nrepl - lo;
  if (p->zg) { /* the slice, led by the replicated tensors' piece */
    n = p->S3;
    from = p->r == 0 ? 0 : p->zg[Z3_REPL].z.own;
  }
  /* A tied embedding once, on the first stage (in the part's indices:
   * g[i] is float lo + i's; at zero_stage 3 the slice's, where the last
   * stage's copy is its embedding group's piece). */
  tensor_stage once = p->st;
  if (p->zg) {
    once.tied_at = p->zg[Z3_EMB].so;
    once.tied_n = p->zg[Z3_EMB].z.S;
  }
  size_t rg[2][2];
  int nr = tensor_stage_once(&once, p->P > 1 && p->s == p->P - 1, lo + from,
                             lo + n, rg);
  double sumsq = 0;
  for (int k = 0; k < nr; k++)
    for (size_t i = rg[k][0] - lo; i < rg[k][1] - lo; i++)
      sumsq += (double)g[i] * g[i];
  if (comm_allreduce_sum_double(p->c, &sumsq, err, errlen) != 0 ||
      (p->P > 1 &&
       comm_allreduce_sum_double(p->o.pp, &sumsq, err, errlen) != 0) ||
      (z && comm_allreduce_sum_double(p->o.dp, &sumsq, err, errlen) != 0))
    return -1;
  *norm = sqrt(sumsq);
  /* optim_clip_grad_norm's rule, on every rank's shards alike. */
  if (max_norm > 0.0 && isfinite(*norm)) {
    double coef = max_norm / (*norm + 1e-6);
    if (coef < 1.0)
      for (size_t i = 0; i < n; i++)
        g[i] *= (float)coef;
  }
  return 0;
}

void tensor_step(tensor_par *p, float lr) {
  if (p->zg) { /* the slice; the next step gathers the groups */
    optim_step(p->opt, p->params, p->gsl, lr);
    return;
  }
  if (p->zs.D == 1) {
    optim_step(p->opt, p->params, p->grads, lr);
    return;
  }
  optim_step(p->opt, p->params + p->zs.lo, p->gsl, lr);
  p->stale = 1; /* the next collective all-gathers the slices */
}

/* The state floats a parameter has in o (AdamW 2, Lion 1). */
static size_t per_param(optim *o, size_t n) {
  return n ? optim_state_floats(o) / n : 0;
}

/* Rank r's shards, params (n) then k state arrays (n each) in buf, into
 * the model and full's state fs (NULL: the weights only); the
 * replicated tensors from rank 0 only. */
static void place(tensor_par *p, int r, float *buf, float *fs, size_t k) {
  size_t N = gpt_num_params(p->model);
  tensor_layout l = layout_of(p);
  tensor_layout_place(&l, r, buf, gpt_params(p->model));
  for (size_t j = 0; fs && j < k; j++)
    tensor_layout_place(&l, r, buf + (1 + j) * p->nshard, fs + j * N);
}

/* This rank's shards (n floats) and, with k, their optimizer state (k
 * arrays of n) into buf, gathered over dp where they are sliced (the
 * state at zero_stage 1-2, everything at 3). Collective over dp there. */
static int collect(tensor_par *p, size_t k, float *buf, char *err,
                   size_t errlen) {
  size_t n = p->n;
  if (!p->zg) {
    memcpy(buf, p->params, n * sizeof(float));
    return k ? zslice_state_gather(&p->zs, p->opt, buf + n, err, errlen) : 0;
  }
  float *tmp = malloc((size_t)p->zg[0].z.D * p->smax * sizeof(float));
  if (!tmp) {
    snprintf(err, errlen, "tensor: out of memory gathering the slices");
    return -1;
  }
  int rc = 0;
  for (size_t j = 0; j <= k && rc == 0; j++)
    rc =
        z3_gather(p, j == 0 ? p->params : optim_state(p->opt) + (j - 1) * p->S3,
                  buf + j * n, tmp, err, errlen);
  free(tmp);
  return rc;
}

int tensor_gather(tensor_par *p, int with_state, optim *full, char *err,
                  size_t errlen) {
  /* Replica 0 has the whole state once its groups gathered the ZeRO
   * slices, and at zero_stage 3 the parameters too; its first stage's
   * group has every stage's part once they were joined. */
  int dpr = p->o.dp ? comm_rank(p->o.dp) : 0;
  int sliced = p->zg || (with_state && p->zs.D > 1);
  if (make_whole(p, err, errlen) != 0)
    return -1;
  if (dpr > 0 && !sliced)
    return 0;
  size_t S = p->zg ? p->S3 : p->zs.S, n = p->n, ns = p->nshard;
  size_t k = with_state ? per_param(p->opt, S) : 0;
  float *buf = malloc((1 + k) * n * sizeof(float));
  /* The join over the stages is replica 0's alone. */
  float *sbuf =
      p->P > 1 && dpr == 0 ? malloc((1 + k) * ns * sizeof(float)) : buf;
  int rc = buf && sbuf ? collect(p, k, buf, err, errlen) : -1;
  if (!buf || !sbuf)
    snprintf(err, errlen, "tensor: out of memory gathering the shards");
  if (rc == 0 && dpr == 0 && p->P > 1)
    rc = tensor_stage_join(&p->st, p->o.pp, buf, k, sbuf, err, errlen);
  if (sbuf != buf)
    free(buf);
  buf = sbuf;
  if (rc != 0 || dpr > 0 || p->s > 0) {
    /* done: another replica's slices went to replica 0, another stage's
     * part to the first */
  } else if (p->r > 0) {
    rc = comm_send(p->c, buf, (1 + k) * ns * sizeof(float), 0, err, errlen);
  } else if (with_state && !full) {
    snprintf(err, errlen, "tensor: gather: no optimizer for the state");
    rc = -1;
  } else {
    float *fs = with_state ? optim_state(full) : NULL;
    place(p, 0, buf, fs, k);
    for (int r = 1; r < p->ranks && rc == 0; r++) {
      rc = comm_recv(p->c, buf, (1 + k) * ns * sizeof(float), r, err, errlen);
      if (rc == 0)
        place(p, r, buf, fs, k);
    }
    if (fs)
      optim_set_t(full, optim_get_t(p->opt));
  }
  free(buf);
  return rc;
}

int tensor_load(tensor_par *p, optim *full, char *err, size_t errlen) {
  size_t S = p->zg ? p->S3 : p->zs.S;
  size_t N = gpt_num_params(p->model), k = per_param(p->opt, S);
  if (optim_state_floats(full) != k * N) {
    snprintf(err, errlen, "tensor: the optimizer is not the whole model's");
    return -1;
  }
  /* The part's state (k x n), of which the optimizer keeps its slice
   * (at zero_stage 3 its groups' pieces), through the shards' (ns). */
  size_t n = p->n, ns = p->nshard;
  float *fs = optim_state(full), *ls = malloc(k * n * sizeof(float) + 1);
  float *loc = malloc(ns * sizeof(float));
  if (!ls || !loc || take_params(p, gpt_params(p->model)) != 0) {
    free(ls);
    free(loc);
    snprintf(err, errlen, "tensor: out of memory loading the state");
    return -1;
  }
  tensor_layout l = layout_of(p);
  for (size_t j = 0; j < k; j++) {
    tensor_layout_take(&l, p->r, fs + j * N, loc);
    tensor_stage_take(&p->st, loc, ls + j * n);
  }
  for (size_t j = 0; p->zg && j < k; j++)
    z3_take(p, ls + j * n, optim_state(p->opt) + j * S);
  if (!p->zg)
    zslice_state_take(&p->zs, ls, n, p->opt);
  free(loc);
  free(ls);
  p->stale = 0;
  optim_set_t(p->opt, optim_get_t(full));
  return 0;
}

void tensor_memory_get(const tensor_par *p, gpt_memory *out) {
  tensor_par q = *p; /* carve with no base counts and writes nothing */
  zslice_memory z;    /* with ZeRO, the slices beside the shards */
  tensor_memory(p, &z);
  if (p->zg && (p->most[0] || p->most[1])) {
    /* zero_stage 3 after a step: its groups' buffers as they were */
    z.peak_params = z.params + p->most[0];
    z.peak_grads = z.grads + p->most[1]; /* the spare's among them */
  }
  out->params = z.peak_params; /* inside the step */
  out->grads = z.peak_grads;
  out->optim = z.optim;
  out->acts = 4 * (uint64_t)carve(&q, NULL);
  out->total = out->params + out->grads + out->optim + out->acts;
}
