/*
 * gpt: configuration, presets, the parameter layout, GPT-2's
 * initialization and the FLOP count. The forward and backward passes,
 * and the memory estimate that counts their activations, are the
 * backend's (gpu/cpu/gpt_cpu.c): this layer calls no backend.
 */
#include "gpt.h"

#include "data/rng.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_impl.h"

const char *const gpt_preset_names[] = {
    "gpt-tiny",   "gpt-small",   "gpt2-124M",         "gpt2-350M",
    "llama-tiny", "llama-small", "smollm-135m-shape", NULL};

/* The shapes of gpt_preset_names, in its order (gpt.h's list): the
 * config but vocab_size and padded_vocab, and for Llama rope_theta and
 * norm_eps, which gpt_config_finish defaults. */
static const gpt_config presets[] = {
    {.n_layer = 4, .n_head = 4, .n_embd = 128, .block_size = 128},
    {.n_layer = 6, .n_head = 6, .n_embd = 384, .block_size = 256},
    {.n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024},
    {.n_layer = 24, .n_head = 16, .n_embd = 1024, .block_size = 1024},
    {.n_layer = 4,
     .n_head = 4,
     .n_embd = 128,
     .block_size = 128,
     .family = GPT_FAMILY_LLAMA,
     .n_kv_head = 2,
     .intermediate = 384},
    {.n_layer = 6,
     .n_head = 6,
     .n_embd = 384,
     .block_size = 256,
     .family = GPT_FAMILY_LLAMA,
     .n_kv_head = 2,
     .intermediate = 1152,
     .untied_head = 1},
    {.n_layer = 30,
     .n_head = 9,
     .n_embd = 576,
     .block_size = 2048,
     .family = GPT_FAMILY_LLAMA,
     .n_kv_head = 3,
     .intermediate = 1536},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])
_Static_assert(N_PRESETS + 1 ==
                   sizeof gpt_preset_names / sizeof gpt_preset_names[0],
               "a preset's name without its shape, or the reverse");

int gpt_config_preset(const char *name, gpt_config *cfg, char *err,
                      size_t errlen) {
  for (size_t i = 0; i < N_PRESETS; i++) {
    if (name && strcmp(name, gpt_preset_names[i]) == 0) {
      int vocab = cfg->vocab_size;
      *cfg = presets[i];
      cfg->vocab_size = vocab;
      return 0;
    }
  }
  int n = snprintf(err, errlen, "gpt: unknown model preset \"%s\" (presets: ",
                   name ? name : "(null)");
  for (size_t i = 0; i < N_PRESETS && n >= 0 && (size_t)n < errlen; i++)
    n += snprintf(err + n, errlen - (size_t)n, "%s%s", i ? ", " : "",
                  gpt_preset_names[i]);
  if (n >= 0 && (size_t)n < errlen)
    snprintf(err + n, errlen - (size_t)n, ")");
  return -1;
}

/* Upper bounds that keep every size below in int and size_t arithmetic
 * with room to spare; far above anything the engine trains. */
#define GPT_MAX_DIM 65536
#define GPT_MAX_LAYERS 1024
#define GPT_MAX_VOCAB (1 << 24)

/* The Llama knobs of cfg: defaults for the zeros, then the checks that
 * the shapes need (GQA's grouping, RoPE's pairs). */
static int llama_finish(gpt_config *cfg, char *err, size_t errlen) {
  if (cfg->n_kv_head == 0)
    cfg->n_kv_head = cfg->n_head;
  if (cfg->intermediate == 0)
    cfg->intermediate = ((8 * cfg->n_embd + 2) / 3 + 63) / 64 * 64;
  if (cfg->rope_theta == 0)
    cfg->rope_theta = 10000.0f;
  if (cfg->norm_eps == 0)
    cfg->norm_eps = 1e-5f;
  if (cfg->n_kv_head < 1 || cfg->n_kv_head > cfg->n_head ||
      cfg->n_head % cfg->n_kv_head != 0) {
    snprintf(err, errlen,
             "gpt: n_kv_head (%d) must divide n_head (%d): each key/value "
             "head serves n_head/n_kv_head query heads",
             cfg->n_kv_head, cfg->n_head);
    return -1;
  }
  int hs = cfg->n_embd / cfg->n_head;
  if (hs % 2 != 0) {
    snprintf(err, errlen,
             "gpt: the head size n_embd/n_head (%d/%d = %d) must be even: "
             "RoPE turns its channels in pairs",
             cfg->n_embd, cfg->n_head, hs);
    return -1;
  }
  if (cfg->intermediate < 1 || cfg->intermediate > 4 * GPT_MAX_DIM) {
    snprintf(err, errlen,
             "gpt: intermediate_size is %d; it must be between 1 and %d",
             cfg->intermediate, 4 * GPT_MAX_DIM);
    return -1;
  }
  if (!(cfg->rope_theta > 1.0f) || !isfinite(cfg->rope_theta)) {
    snprintf(err, errlen, "gpt: rope_theta is %g; it must be above 1",
             (double)cfg->rope_theta);
    return -1;
  }
  if (!(cfg->norm_eps > 0.0f) || !(cfg->norm_eps < 1.0f)) {
    snprintf(err, errlen, "gpt: norm_eps is %g; it must be in (0, 1)",
             (double)cfg->norm_eps);
    return -1;
  }
  if (cfg->untied_head != 0 && cfg->untied_head != 1) {
    snprintf(err, errlen, "gpt: untied_head is %d; it must be 0 or 1",
             cfg->untied_head);
    return -1;
  }
  return 0;
}

int gpt_config_finish(gpt_config *cfg, char *err, size_t errlen) {
  const struct {
    const char *name;
    int v, max;
  } f[] = {
      {"n_layer", cfg->n_layer, GPT_MAX_LAYERS},
      {"n_head", cfg->n_head, GPT_MAX_DIM},
      {"n_embd", cfg->n_embd, GPT_MAX_DIM},
      {"block_size", cfg->block_size, GPT_MAX_DIM},
      {"vocab_size", cfg->vocab_size, GPT_MAX_VOCAB},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    if (f[i].v < 1 || f[i].v > f[i].max) {
      snprintf(err, errlen, "gpt: %s is %d; it must be between 1 and %d",
               f[i].name, f[i].v, f[i].max);
      return -1;
    }
  }
  if (cfg->n_embd % cfg->n_head != 0) {
    snprintf(err, errlen,
             "gpt: n_embd (%d) must be a multiple of n_head (%d), so that "
             "every head has n_embd/n_head channels",
             cfg->n_embd, cfg->n_head);
    return -1;
  }
  if (cfg->family == GPT_FAMILY_LLAMA) {
    if (llama_finish(cfg, err, errlen) != 0)
      return -1;
  } else if (cfg->family != GPT_FAMILY_GPT2) {
    snprintf(err, errlen, "gpt: unknown model family %d", cfg->family);
    return -1;
  } else if (cfg->n_kv_head || cfg->intermediate || cfg->rope_theta != 0 ||
             cfg->norm_eps != 0 || cfg->untied_head) {
    snprintf(err, errlen,
             "gpt: n_kv_head (%d), intermediate_size (%d), rope_theta (%g), "
             "norm_eps (%g) and an untied head (%d) are Llama knobs; the "
             "GPT-2 family takes none of them (all must be 0)",
             cfg->n_kv_head, cfg->intermediate, (double)cfg->rope_theta,
             (double)cfg->norm_eps, cfg->untied_head);
    return -1;
  }
  cfg->padded_vocab = (cfg->vocab_size + 63) / 64 * 64;
  return 0;
}

static void add_tensor(gpt_tensor *t, size_t *n, size_t *off, const char *name,
                       int d0, int d1, int decay) {
  gpt_tensor *p = &t[(*n)++];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->offset = *off;
  p->ndim = d1 ? 2 : 1;
  p->shape[0] = d0;
  p->shape[1] = d1;
  p->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
  p->decay = decay;
  *off += p->numel;
}

/* Every group of the arrays named by what back on the full array (NULL
 * while it is released). */
static void groups_reset(gpt *m, int what) {
  for (size_t g = 0; g < m->n_groups; g++) {
    if (what & GPT_BUF_PARAMS)
      m->gp[g] = m->params ? m->params + m->group_off[g] : NULL;
    if (what & GPT_BUF_GRADS)
      m->gg[g] = m->grads ? m->grads + m->group_off[g] : NULL;
  }
}

/* GPT-2's tensors, gpt.h's first list. */
static void add_gpt2_tensors(gpt_tensor *t, size_t *np, size_t *offp,
                             const gpt_config *c) {
  size_t n = *np, off = *offp;
  int C = c->n_embd;
  add_tensor(t, &n, &off, "wte.weight", c->padded_vocab, C, 0);
  add_tensor(t, &n, &off, "wpe.weight", c->block_size, C, 0);
  for (int l = 0; l < c->n_layer; l++) {
    char z[64];
#define T_(suffix, d0, d1, decay)                                              \
  snprintf(z, sizeof z, "h.%d.%s", l, suffix);                                 \
  add_tensor(t, &n, &off, z, d0, d1, decay)
    T_("ln_1.weight", C, 0, 0);
    T_("ln_1.bias", C, 0, 0);
    T_("attn.c_attn.weight", C, 3 * C, 1);
    T_("attn.c_attn.bias", 3 * C, 0, 0);
    T_("attn.c_proj.weight", C, C, 1);
    T_("attn.c_proj.bias", C, 0, 0);
    T_("ln_2.weight", C, 0, 0);
    T_("ln_2.bias", C, 0, 0);
    T_("mlp.c_fc.weight", C, 4 * C, 1);
    T_("mlp.c_fc.bias", 4 * C, 0, 0);
    T_("mlp.c_proj.weight", 4 * C, C, 1);
    T_("mlp.c_proj.bias", C, 0, 0);
#undef T_
  }
  add_tensor(t, &n, &off, "ln_f.weight", C, 0, 0);
  add_tensor(t, &n, &off, "ln_f.bias", C, 0, 0);
  *np = n;
  *offp = off;
}

/* Llama's tensors, gpt.h's second list (in LLAMA_* order). */
static void add_llama_tensors(gpt_tensor *t, size_t *np, size_t *offp,
                              const gpt_config *c) {
  size_t n = *np, off = *offp;
  int C = c->n_embd, I = c->intermediate;
  int KVD = c->n_kv_head * (C / c->n_head);
  add_tensor(t, &n, &off, "model.embed_tokens.weight", c->padded_vocab, C, 0);
  for (int l = 0; l < c->n_layer; l++) {
    char z[64];
#define T_(suffix, d0, d1, decay)                                              \
  snprintf(z, sizeof z, "model.layers.%d.%s", l, suffix);                      \
  add_tensor(t, &n, &off, z, d0, d1, decay)
    T_("input_layernorm.weight", C, 0, 0);
    T_("self_attn.q_proj.weight", C, C, 1);
    T_("self_attn.k_proj.weight", KVD, C, 1);
    T_("self_attn.v_proj.weight", KVD, C, 1);
    T_("self_attn.o_proj.weight", C, C, 1);
    T_("post_attention_layernorm.weight", C, 0, 0);
    T_("mlp.gate_proj.weight", I, C, 1);
    T_("mlp.up_proj.weight", I, C, 1);
    T_("mlp.down_proj.weight", C, I, 1);
#undef T_
  }
  add_tensor(t, &n, &off, "model.norm.weight", C, 0, 0);
  /* The head is a matrix of the model like any other, and decays as
   * one; the tied embedding does not (as GPT-2's wte). */
  if (c->untied_head)
    add_tensor(t, &n, &off, "lm_head.weight", c->padded_vocab, C, 1);
  *np = n;
  *offp = off;
}

int gpt_create(const gpt_config *cfg, gpt **out, char *err, size_t errlen) {
  *out = NULL;
  gpt_config c = *cfg;
  if (gpt_config_finish(&c, err, errlen) != 0)
    return -1;
  if (c.padded_vocab != cfg->padded_vocab) {
    snprintf(err, errlen,
             "gpt: padded_vocab is %d, expected %d (call gpt_config_finish "
             "first)",
             cfg->padded_vocab, c.padded_vocab);
    return -1;
  }
  gpt *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "gpt: out of memory (%zu bytes)", sizeof *m);
    return -1;
  }
  m->cfg = c;
  int L = c.n_layer;
  m->stage_last = L;
  m->layer_tensors =
      c.family == GPT_FAMILY_LLAMA ? LLAMA_NLAYER_TENSORS : GPT_NLAYER_TENSORS;
  m->first_layer_tensor = c.family == GPT_FAMILY_LLAMA ? 1 : 2;
  m->tensors = calloc(4 + (size_t)L * m->layer_tensors, sizeof *m->tensors);
  if (!m->tensors) {
    snprintf(err, errlen, "gpt: out of memory for the tensor table");
    gpt_destroy(m);
    return -1;
  }
  size_t n = 0, off = 0;
  if (c.family == GPT_FAMILY_LLAMA)
    add_llama_tensors(m->tensors, &n, &off, &c);
  else
    add_gpt2_tensors(m->tensors, &n, &off, &c);
  gpt_tensor *t = m->tensors;
  m->n_tensors = n;
  m->n_params = off;
  /* Groups: the embeddings (the tensors before layer 0), each layer, the
   * final norm (and Llama's lm_head). */
  m->n_groups = (size_t)L + 2;
  m->group_off = calloc(m->n_groups + 1, sizeof *m->group_off);
  m->gp = calloc(m->n_groups, sizeof *m->gp);
  m->gg = calloc(m->n_groups, sizeof *m->gg);
  m->tloc = calloc(n, sizeof *m->tloc);
  if (!m->group_off || !m->gp || !m->gg || !m->tloc) {
    snprintf(err, errlen, "gpt: out of memory for the tensor table");
    gpt_destroy(m);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    size_t f = m->first_layer_tensor, lt = m->layer_tensors;
    size_t g = i < f                    ? 0
               : i < f + (size_t)L * lt ? 1 + (i - f) / lt
                                        : (size_t)L + 1;
    if (i == 0 || g != m->tloc[i - 1].group)
      m->group_off[g] = t[i].offset;
    m->tloc[i].group = g;
    m->tloc[i].local = t[i].offset - m->group_off[g];
  }
  m->group_off[m->n_groups] = off;
  size_t bytes = off * sizeof(float);
  m->params = calloc(off, sizeof(float));
  m->grads = calloc(off, sizeof(float));
  if (!m->params || !m->grads) {
    snprintf(err, errlen,
             "gpt: out of memory: could not allocate %zu bytes for the "
             "parameters and %zu for their gradients",
             bytes, bytes);
    gpt_destroy(m);
    return -1;
  }
  m->params_cap = m->grads_cap = off;
  groups_reset(m, GPT_BUF_PARAMS | GPT_BUF_GRADS);
  *out = m;
  return 0;
}

int gpt_set_stage(gpt *m, int first, int last, char *err, size_t errlen) {
  int L = m->cfg.n_layer;
  if (first < 0 || last > L || first >= last) {
    snprintf(err, errlen,
             "gpt: stage layers [%d,%d) is not a non-empty range of the "
             "model's %d layers",
             first, last, L);
    return -1;
  }
  m->stage_first = first;
  m->stage_last = last;
  m->B = m->T = 0; /* the activations are laid out anew */
  m->have_loss = m->stage_train = 0;
  return 0;
}

void gpt_destroy(gpt *m) {
  if (!m)
    return;
  free(m->params);
  free(m->grads);
  free(m->tensors);
  free(m->group_off);
  free(m->gp);
  free(m->gg);
  free(m->tloc);
  free(m->acts);
  free(m->inputs);
  free(m->targets);
  free(m);
}

const gpt_config *gpt_get_config(const gpt *m) { return &m->cfg; }
size_t gpt_num_params(const gpt *m) { return m->n_params; }
float *gpt_params(gpt *m) { return m->params; }
float *gpt_grads(gpt *m) { return m->grads; }
size_t gpt_tensor_count(const gpt *m) { return m->n_tensors; }
const gpt_tensor *gpt_tensor_at(const gpt *m, size_t i) {
  return i < m->n_tensors ? &m->tensors[i] : NULL;
}
void gpt_decay_all_2d(gpt *m) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].ndim == 2)
      m->tensors[i].decay = 1;
}
int gpt_tensor_vocab_rows(const gpt_tensor *t) {
  return strcmp(t->name, "wte.weight") == 0 ||
         strcmp(t->name, "model.embed_tokens.weight") == 0 ||
         strcmp(t->name, "lm_head.weight") == 0;
}
const gpt_tensor *gpt_tensor_find(const gpt *m, const char *name) {
  for (size_t i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0)
      return &m->tensors[i];
  return NULL;
}

void gpt_release(gpt *m, int what) {
  if (what & GPT_BUF_PARAMS) {
    free(m->params);
    m->params = NULL;
    m->params_cap = 0;
  }
  if (what & GPT_BUF_GRADS) {
    free(m->grads);
    m->grads = NULL;
    m->grads_cap = 0;
  }
  groups_reset(m, what);
}

/* *buf (cap floats) grown or made to hold want floats, the old contents
 * kept and the rest zero. */
static int regrow(float **buf, size_t *cap, size_t want) {
  if (*buf && *cap == want)
    return 0;
  float *p = realloc(*buf, want * sizeof(float));
  if (!p)
    return -1;
  if (want > *cap)
    memset(p + *cap, 0, (want - *cap) * sizeof(float));
  *buf = p;
  *cap = want;
  return 0;
}

int gpt_acquire(gpt *m, int what, size_t cap, char *err, size_t errlen) {
  if (cap < m->n_params)
    cap = m->n_params;
  if (((what & GPT_BUF_PARAMS) &&
       regrow(&m->params, &m->params_cap, cap) != 0) ||
      ((what & GPT_BUF_GRADS) && regrow(&m->grads, &m->grads_cap, cap) != 0)) {
    snprintf(err, errlen,
             "gpt: out of memory: could not allocate %zu bytes of %s", cap * 4,
             (what & GPT_BUF_GRADS) ? "parameters or gradients" : "parameters");
    groups_reset(m, what);
    return -1;
  }
  groups_reset(m, what);
  return 0;
}

size_t gpt_capacity(const gpt *m, int what) {
  return what == GPT_BUF_PARAMS ? m->params_cap : m->grads_cap;
}

void gpt_set_dropout(gpt *m, float p, uint64_t seed) {
  m->drop_p = p > 0 && p < 1 ? p : 0;
  m->drop_seed = seed;
}

void gpt_dropout_key(gpt *m, uint64_t key, int active) {
  m->drop_key = key;
  m->drop_active = active;
}

void gpt_set_grad_hook(gpt *m, void (*hook)(void *arg, size_t final_from),
                       void *arg) {
  m->grad_hook = hook;
  m->grad_hook_arg = arg;
}

size_t gpt_group_count(const gpt *m) { return m->n_groups; }

void gpt_group_range(const gpt *m, size_t g, size_t *offset, size_t *n) {
  *offset = m->group_off[g];
  *n = m->group_off[g + 1] - m->group_off[g];
}

void gpt_set_group_params(gpt *m, size_t g, float *p) { m->gp[g] = p; }
void gpt_set_group_grads(gpt *m, size_t g, float *gr) { m->gg[g] = gr; }

void gpt_set_param_hook(gpt *m, gpt_param_hook_fn hook, void *arg) {
  m->param_hook = hook;
  m->param_hook_arg = arg;
}

size_t gpt_config_num_params(const gpt_config *cfg) {
  size_t C = cfg->n_embd, L = cfg->n_layer;
  if (cfg->family == GPT_FAMILY_LLAMA) {
    /* embed_tokens (Vp,C); per layer q, o (C,C), k, v (KVD,C), gate, up,
     * down (I,C) and two norms; model.norm; lm_head (Vp,C) if untied */
    size_t KVD = (size_t)cfg->n_kv_head * (C / cfg->n_head);
    size_t I = cfg->intermediate;
    size_t emb = (size_t)cfg->padded_vocab * C;
    return emb * (cfg->untied_head ? 2 : 1) +
           L * (2 * C * C + 2 * KVD * C + 3 * I * C + 2 * C) + C;
  }
  /* wte (Vp,C), wpe (T,C), per layer 12C^2 + 13C (gpt.h's list), ln_f */
  return (size_t)cfg->padded_vocab * C + (size_t)cfg->block_size * C +
         L * (12 * C * C + 13 * C) + 2 * C;
}

uint64_t gpt_allocated_bytes(const gpt *m) {
  return ((uint64_t)m->params_cap + m->grads_cap) * sizeof(float) +
         (uint64_t)m->acts_cap * sizeof(float) +
         2 * (uint64_t)m->ids_cap * sizeof(uint32_t);
}

/* Uniform in (0,1]: 53 random bits, never 0, so log() is finite. */
static double uniform01(uint64_t *s) {
  return ((double)(rng_splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

/* Fills n floats with N(0, std) by Box-Muller, both values of each pair
 * used, in order. Double precision until the final rounding, so the
 * floats are the same wherever libm's log/cos/sin round alike. */
static void fill_normal(float *p, size_t n, double std, uint64_t *s) {
  const double two_pi = 6.283185307179586476925286766559;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = uniform01(s), u2 = uniform01(s);
    double r = sqrt(-2.0 * log(u1));
    p[i] = (float)(std * r * cos(two_pi * u2));
    if (i + 1 < n)
      p[i + 1] = (float)(std * r * sin(two_pi * u2));
  }
}

void gpt_init(gpt *m, uint64_t seed) {
  const gpt_config *c = &m->cfg;
  uint64_t s = seed ^ 0x6770742d696e6974ULL; /* "gpt-init" */
  double std = 0.02;
  double proj_std = 0.02 / sqrt(2.0 * c->n_layer);
  memset(m->params, 0, m->n_params * sizeof(float));
  for (size_t i = 0; i < m->n_tensors; i++) {
    const gpt_tensor *t = &m->tensors[i];
    float *p = m->params + t->offset;
    /* The embeddings (wte, Llama's embed_tokens and lm_head) have
     * padding rows: real rows only, the padding stays zero. */
    if (gpt_tensor_vocab_rows(t)) {
      fill_normal(p, (size_t)c->vocab_size * c->n_embd, std, &s);
    } else if (t->ndim == 2) {
      /* The matrices that write into the residual stream: GPT-2's
       * c_proj, Llama's o_proj and down_proj. */
      int is_proj = strstr(t->name, "c_proj.weight") != NULL ||
                    strstr(t->name, "o_proj.weight") != NULL ||
                    strstr(t->name, "down_proj.weight") != NULL;
      fill_normal(p, t->numel, is_proj ? proj_std : std, &s);
    } else if ((strstr(t->name, "ln_") || strstr(t->name, "norm")) &&
               strstr(t->name, ".weight")) {
      for (size_t j = 0; j < t->numel; j++)
        p[j] = 1.0f;
    }
  }
}

/*
 * FLOPs per token of one forward+backward, as PaLM (appendix B) and
 * llm.c count them: 6N for the matrix products of the N parameters that
 * take part in one (per token: 2N forward, 4N backward), plus attention's
 * two T x T products, 12 L C T (forward 2*2*C*T per layer, backward twice
 * that). N counts the layers' weights and biases and the tied head
 * (vocab_size x C, used once as the output matrix); position embeddings,
 * the token lookup and the LayerNorms are left out as they do no matrix
 * product. T is block_size, the context the model is trained at.
 */
double gpt_flops_per_token(const gpt *m) {
  const gpt_config *c = &m->cfg;
  double C = c->n_embd, L = c->n_layer, T = c->block_size;
  double per_layer = 12.0 * C * C + 9.0 * C; /* the 4 matrices + biases */
  if (c->family == GPT_FAMILY_LLAMA) {
    /* q, o, k, v and the three SwiGLU matrices, no biases; the head
     * (tied or not) once. RoPE, SiLU and the norms do no product. */
    double KVD = (double)c->n_kv_head * (c->n_embd / c->n_head);
    per_layer = 2.0 * C * C + 2.0 * KVD * C + 3.0 * c->intermediate * C;
  }
  double N = L * per_layer + (double)c->vocab_size * C;
  return 6.0 * N + 12.0 * L * C * T;
}
