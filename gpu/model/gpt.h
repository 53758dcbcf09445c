/*
 * gpt: the GPT-2 family model of the training engine: configuration,
 * presets, the parameter layout, initialization, and (through the CPU
 * backend, gpu/cpu/) forward and backward passes.
 *
 * Model: token + learned position embeddings; n_layer pre-LayerNorm
 * blocks of causal multi-head self-attention and a GELU (tanh
 * approximation, as GPT-2) MLP of width 4C; a final LayerNorm; the output
 * head tied to the token embedding; mean cross-entropy loss.
 *
 * Parameters live in one contiguous float array, gradients in another of
 * the same layout, activations in a third (sized for the largest B x T
 * seen). The tensors, in this order, with GPT-2's Hugging Face names
 * (h.N. repeated per layer; the token embedding has padded_vocab rows,
 * rows >= vocab_size are zero and never trained into):
 *   wte.weight (Vp,C)  wpe.weight (T,C)
 *   h.N.ln_1.weight (C)  h.N.ln_1.bias (C)
 *   h.N.attn.c_attn.weight (C,3C)  h.N.attn.c_attn.bias (3C)
 *   h.N.attn.c_proj.weight (C,C)   h.N.attn.c_proj.bias (C)
 *   h.N.ln_2.weight (C)  h.N.ln_2.bias (C)
 *   h.N.mlp.c_fc.weight (C,4C)     h.N.mlp.c_fc.bias (4C)
 *   h.N.mlp.c_proj.weight (4C,C)   h.N.mlp.c_proj.bias (C)
 *   ln_f.weight (C)  ln_f.bias (C)
 * Weight matrices are stored as Hugging Face's Conv1D keeps them,
 * (in, out), so y = x W + b and the tensors export as they are.
 *
 * Threads: one gpt is used by one thread at a time; the backend uses
 * OpenMP and OpenBLAS threads inside a call.
 */
#ifndef DAGRUN_GPT_H
#define DAGRUN_GPT_H

#include <stddef.h>
#include <stdint.h>

/* The model families: GPT-2 (the layout above) and Llama (gpt_llama
 * below). 0 is GPT-2, so a config written field by field without a family
 * is the GPT-2 it always was. */
enum { GPT_FAMILY_GPT2 = 0, GPT_FAMILY_LLAMA = 1 };

/*
 * The Llama family (Llama, Mistral, Qwen, SmolLM share it): token
 * embedding (no positions); n_layer pre-RMSNorm blocks of causal
 * grouped-query attention with rotary position embeddings (RoPE, Hugging
 * Face's rotate_half layout: channel i of a head turns with channel
 * i + hs/2) and a SwiGLU MLP (down(silu(gate x) * up x)); a final
 * RMSNorm; the head untied (lm_head) or tied to the embedding; no
 * biases. Tensors, with Hugging Face LlamaForCausalLM's names and
 * nn.Linear's (out, in) storage, so that y = x W^T and they export as
 * they are (KVD = n_kv_head * hs, I = intermediate):
 *   model.embed_tokens.weight (Vp,C)
 *   model.layers.N.input_layernorm.weight (C)
 *   model.layers.N.self_attn.q_proj.weight (C,C)
 *   model.layers.N.self_attn.k_proj.weight (KVD,C)
 *   model.layers.N.self_attn.v_proj.weight (KVD,C)
 *   model.layers.N.self_attn.o_proj.weight (C,C)
 *   model.layers.N.post_attention_layernorm.weight (C)
 *   model.layers.N.mlp.gate_proj.weight (I,C)
 *   model.layers.N.mlp.up_proj.weight (I,C)
 *   model.layers.N.mlp.down_proj.weight (C,I)
 *   model.norm.weight (C)
 *   lm_head.weight (Vp,C)   (untied only; padding rows zero)
 * Groups (ZeRO-3, below): 0 the embedding, 1 + l layer l, n_layer + 1
 * model.norm and lm_head.
 */
typedef struct gpt_config {
  int n_layer;
  int n_head;
  int n_embd;      /* C; a multiple of n_head */
  int block_size;  /* T_max: context length, rows of wpe */
  int vocab_size;  /* V: ids the tokenizer makes */
  int padded_vocab; /* Vp: V rounded up to a multiple of 64 (gpt_config_finish) */
  /* The family and its knobs; GPT-2 has none of the knobs (they must be
   * 0 there). For Llama, 0 means the default gpt_config_finish fills in. */
  int family;       /* GPT_FAMILY_* */
  int n_kv_head;    /* key/value heads, dividing n_head (0: n_head) */
  int intermediate; /* SwiGLU width (0: 8C/3 rounded up to 64) */
  float rope_theta; /* RoPE base (0: 10000) */
  float norm_eps;   /* RMSNorm epsilon (0: 1e-5) */
  int untied_head;  /* 1: lm_head of its own; 0: tied to the embedding */
} gpt_config;

/* The preset names, NULL-terminated (the train stages' choices for their
 * model param). */
extern const char *const gpt_preset_names[];

/* Fills cfg from a preset name (every field but vocab_size, which stays
 * as it was):
 *   gpt-tiny   L4  H4  C128 T128   (about 0.8M parameters + embeddings)
 *   gpt-small  L6  H6  C384 T256
 *   gpt2-124M  L12 H12 C768 T1024
 *   gpt2-350M  L24 H16 C1024 T1024
 *   llama-tiny         L4  H4 KV2 C128 I384  T128, tied: gpt-tiny's
 *                      block parameters exactly (0.79M + embedding)
 *   llama-small        L6  H6 KV2 C384 I1152 T256, untied
 *   smollm-135m-shape  L30 H9 KV3 C576 I1536 T2048, tied (SmolLM-135M's
 *                      shape; its vocabulary is the tokenizer's)
 * (Llama presets: rope_theta 10000, norm_eps 1e-5.)
 * Returns 0, or -1 for an unknown name (message lists the presets). */
int gpt_config_preset(const char *name, gpt_config *cfg, char *err,
                      size_t errlen);
/* Checks every field, fills the Llama knobs' defaults and sets
 * padded_vocab. 0, or -1 with err naming the field and its value. */
int gpt_config_finish(gpt_config *cfg, char *err, size_t errlen);

/* One parameter tensor of the layout above. */
typedef struct gpt_tensor {
  char name[64];   /* model.layers.1023.post_attention_layernorm.weight fits */
  size_t offset;   /* into gpt_params() / gpt_grads(), in floats */
  size_t numel;
  int ndim;
  int shape[2];
  int decay; /* 1 for weight matrices (c_attn, c_proj, c_fc); 0 for
                biases, LayerNorms and embeddings, as AdamW's
                default is to exclude them (gpt_decay_all_2d) */
} gpt_tensor;

typedef struct gpt gpt;

/* Allocates parameters and gradients (zeroed) for cfg (finished). Returns
 * 0, or -1 with a message naming the bytes it could not get. */
int gpt_create(const gpt_config *cfg, gpt **out, char *err, size_t errlen);
void gpt_destroy(gpt *m); /* NULL is a no-op */

const gpt_config *gpt_get_config(const gpt *m);
size_t gpt_num_params(const gpt *m); /* floats in params (incl. padding rows) */
float *gpt_params(gpt *m);
float *gpt_grads(gpt *m);
size_t gpt_tensor_count(const gpt *m);
const gpt_tensor *gpt_tensor_at(const gpt *m, size_t i);
/* Makes every 2-D tensor decay, the token and position embeddings too
 * (nanoGPT's and llm.c's choice), where the default is the weight
 * matrices only. Every engine reads the flags (the CPU optimizer's groups,
 * ZeRO's shards, the CUDA optimizer's runs): call before making them. */
void gpt_decay_all_2d(gpt *m);
/* The tensor of that name, or NULL. */
const gpt_tensor *gpt_tensor_find(const gpt *m, const char *name);
/* 1 for the tensors with a row per padded vocabulary id (wte.weight,
 * model.embed_tokens.weight, lm_head.weight), whose rows >= vocab_size
 * are padding: zero, never trained, not saved. */
int gpt_tensor_vocab_rows(const gpt_tensor *t);

/* GPT-2's initialization, reproducible by seed: N(0, 0.02) for wte, wpe
 * and weight matrices; N(0, 0.02/sqrt(2*n_layer)) for attn.c_proj.weight
 * and mlp.c_proj.weight; zero biases; LayerNorm weight 1, bias 0; padding
 * rows of wte zero. Same seed, same bits, on every machine. */
void gpt_init(gpt *m, uint64_t seed);

/* Forward pass over inputs (B,T) of ids < vocab_size, T <= block_size.
 * With targets (B,T) also computes the mean cross-entropy loss into
 * *loss (targets may be NULL: logits only, *loss untouched). Returns 0,
 * or -1 with err (bad ids, out of memory for activations). */
int gpt_forward(gpt *m, const uint32_t *inputs, const uint32_t *targets,
                int B, int T, float *loss, char *err, size_t errlen);
/* Logits of the last forward, (B,T,Vp); columns >= vocab_size are not
 * meaningful. Valid until the next forward. */
const float *gpt_logits(const gpt *m);
/* Sets every gradient to zero. */
void gpt_zero_grad(gpt *m);
/* Backward pass of the last forward (which had targets): ADDS
 * d(scale * loss)/d(params) into gpt_grads(), so gradient accumulation
 * over k micro-batches calls it with scale 1/k. Once per forward: without
 * a forward with targets since the last backward, it does nothing. */
void gpt_backward(gpt *m, float scale);

/* Dropout (CPU engine): with probability p in [0,1) (0, the default: none)
 * on the attention probabilities and on each block's two residual
 * branches before they are added (nanoGPT's attn_dropout and
 * resid_dropout), the kept values scaled by 1/(1-p). It applies only to
 * forwards with targets made while gpt_dropout_key has it active (a
 * trainer's forwards; evaluation's are exact), and their backward. Each
 * mask is a hash of (seed, key, layer, site, element): nothing to store
 * or checkpoint, the same on any thread count, and a given key (a
 * trainer passes the batch's number) gives the same masks again. */
void gpt_set_dropout(gpt *m, float p, uint64_t seed);
void gpt_dropout_key(gpt *m, uint64_t key, int active);

/* Activation recomputation: what the forward pass keeps for backward.
 *   NONE:  every activation of every layer (fastest, most memory).
 *   GELU:  not the GELU output (B,T,4C) of each layer (a Llama's: the
 *          SwiGLU output (B,T,I)): backward recomputes it from the kept
 *          pre-activation (one elementwise pass a layer).
 *   BLOCK: only each block's input residual (B,T,C); backward runs the
 *          block's forward again before its backward (about one more
 *          forward pass of compute; activations of one layer at a time).
 * The GPU engine takes it in gpt_cuda_options (every mode, both
 * families); the CPU engine from gpt_set_recompute. Either way the
 * gradients are those of NONE. */
typedef enum gpt_recompute {
  GPT_RECOMPUTE_NONE = 0,
  GPT_RECOMPUTE_GELU = 1,
  GPT_RECOMPUTE_BLOCK = 2
} gpt_recompute;

/* The CPU engine's recomputation for m's next forwards (the default:
 * NONE). The recomputed values are made by the very kernels, inputs and
 * dropout masks of the forward, so the gradients are bitwise those of
 * NONE. Forgets the last forward (its activations' layout changes).
 * Both families. 0, or -1 with err for a value that is not a
 * gpt_recompute. */
int gpt_set_recompute(gpt *m, gpt_recompute r, char *err, size_t errlen);

/* BF16 autocast (CPU engine): with BF16, the operands of the linear
 * layers' and the head's matrix products, forward and backward, are
 * rounded to bfloat16 (to nearest, ties to even) and the products summed
 * and kept in fp32, as AVX-512 BF16's VDPBF16PS and AMX compute them;
 * weights, gradients, optimizer state, attention's own products,
 * LayerNorm, GELU, softmax and the loss stay fp32. It is an emulation:
 * the rounding is done in software before the fp32 GEMM (transient
 * rounded copies of the two operands, not in gpt_memory_estimate), so it
 * gives BF16's numerics on any CPU, not its speed. NONE (the default) is
 * fp32 throughout. 0, or -1 with err for a value that is neither. */
typedef enum gpt_autocast {
  GPT_AUTOCAST_NONE = 0,
  GPT_AUTOCAST_BF16 = 1
} gpt_autocast;
int gpt_set_autocast(gpt *m, gpt_autocast a, char *err, size_t errlen);

/* The memory the engine takes to train a model, in bytes. */
typedef struct gpt_memory {
  uint64_t params, grads; /* the parameter and gradient arrays */
  uint64_t optim;         /* the optimizer's moments */
  uint64_t acts;          /* activations, backward scratch, id copies */
  uint64_t total;         /* the sum */
} gpt_memory;

/* What training cfg (finished) on micro-batches of (B,T) takes, computed
 * without allocating anything: parameters, gradients,
 * optim_floats_per_param floats of optimizer state per parameter (optim.h's
 * optim_state_floats_for(kind, 1): 2 for AdamW, 1 for Lion) and the
 * backend's activations for (B,T) with recomputation rc. It is exactly
 * what gpt_allocated_bytes plus the optimizer's optim_state_floats * 4
 * come to after a first forward at (B,T); the small tensor table and the
 * C library's own overhead are left out. */
void gpt_memory_estimate(const gpt_config *cfg, int B, int T,
                         int optim_floats_per_param, gpt_recompute rc,
                         gpt_memory *out);

/* The bytes m holds now: parameters, gradients, and the activations and
 * id buffers of the largest batch it has run (none before a forward). */
uint64_t gpt_allocated_bytes(const gpt *m);

/* ---- For data-parallel training (gpu/zero/zero.h) ----
 * ZeRO drops the full parameter and gradient arrays between steps and
 * wants them longer than n_params, so that a collective over N equal
 * slices can write straight into them. */
enum { GPT_BUF_PARAMS = 1, GPT_BUF_GRADS = 2 };
/* Frees the arrays named by what (GPT_BUF_* or'ed): gpt_params /
 * gpt_grads return NULL and forward / backward must not run until
 * gpt_acquire makes them again. */
void gpt_release(gpt *m, int what);
/* Makes the arrays named by what hold cap floats (at least n_params):
 * kept contents are kept, new floats (all of a released array) are zero;
 * floats past n_params are not part of the model and the engine never
 * touches them. 0, or -1 with err (an array that was grown stays so). */
int gpt_acquire(gpt *m, int what, size_t cap, char *err, size_t errlen);
/* Floats allocated for GPT_BUF_PARAMS or GPT_BUF_GRADS (0 if released). */
size_t gpt_capacity(const gpt *m, int what);
/* Calls hook(arg, final_from) during gpt_backward each time more of the
 * gradient is final: after it, gpt_grads()[final_from, n_params) will not
 * change in this backward. The CPU backend calls it after ln_f, after
 * each layer (from the last), and with 0 at the end. The hook runs on the
 * calling thread between kernels and may start communication (ZeRO-2
 * buckets) but must not write the gradients below final_from. NULL: none.
 * The hook stays set until changed. */
void gpt_set_grad_hook(gpt *m, void (*hook)(void *arg, size_t final_from),
                       void *arg);

/* ---- Parameter groups, for ZeRO stage 3 (gpu/zero/zero.h) ----
 * The layout (above) falls into n_layer + 2 groups, each a contiguous
 * range: group 0 the embeddings (wte, wpe), group 1 + l layer l's twelve
 * tensors, group n_layer + 1 ln_f. Forward and backward read a group's
 * parameters and add its gradients through two base pointers (the
 * group's first float), which are the full arrays' (gpt_params() +
 * offset) unless moved: so ZeRO-3 can gather one group into a buffer of
 * its own just before the engine uses it, and free it after. */
size_t gpt_group_count(const gpt *m);
/* Group g's flat range: *offset (floats into gpt_params()) and *n. */
void gpt_group_range(const gpt *m, size_t g, size_t *offset, size_t *n);
/* Where the engine reads group g's parameters (p) or adds its gradients
 * (gr) from now on: p[0] / gr[0] is the group's first float, borrowed
 * (NULL: none; the engine must not reach that group until it is set).
 * gpt_acquire and gpt_release put every group of the arrays they touch
 * back on the full array (NULL when released). gpt_zero_grad and
 * gpt_params / gpt_grads see only the full arrays. */
void gpt_set_group_params(gpt *m, size_t g, float *p);
void gpt_set_group_grads(gpt *m, size_t g, float *gr);

/* Events of the parameter hook. */
enum { GPT_PARAMS_NEED = 1, GPT_PARAMS_DONE = 2 };
/* hook(arg, event, group, next), called on the calling thread between
 * kernels: GPT_PARAMS_NEED before forward or backward reads group's
 * parameters (the hook places them, gpt_set_group_params, and in
 * backward the gradients too, zeroed, before it returns), GPT_PARAMS_DONE
 * after the pass is done with them. next is the group the engine will
 * need after this one (-1: none), a hint for prefetching, and on DONE
 * whether the parameters are wanted again at once (next == group): the
 * CPU backend's order is, in forward, 0, 1 .. n_layer, n_layer + 1, 0
 * (the tied head), with next 0 after the last when the forward has
 * targets (the backward starts with group 0); in backward 0, n_layer + 1,
 * n_layer .. 1. The embeddings' gradients keep growing after their DONE
 * in backward (the token and position lookups come last): the gradient
 * hook's final_from 0 says when they are final. A non-zero return stops
 * the pass: forward returns -1 ("a parameter hook failed"), backward
 * returns at once with partial gradients (the caller that set the hook
 * knows why). The hook stays set until changed; NULL: none. */
typedef int (*gpt_param_hook_fn)(void *arg, int event, int group, int next);
void gpt_set_param_hook(gpt *m, gpt_param_hook_fn hook, void *arg);

/* ---- Pipeline stages (gpu/pipeline/pipeline.h) ----
 * A pipeline-parallel rank runs a contiguous range of the layers, layers
 * [first, last): the embeddings with the stage that has layer 0, the
 * final LayerNorm, the tied head and the loss with the stage that has
 * the last layer. A stage's forward takes the residual stream (B,T,C)
 * its neighbour before it made (or the ids, on the first stage) and
 * gives its own (or the loss, on the last); its backward takes the
 * gradient of its output (or the loss's, on the last) and gives its
 * input's. The kernels are gpt_forward's and gpt_backward's, in their
 * order, so a stage's gradients are the bits the whole model's forward
 * and backward add into those layers (the tied wte excepted: the head's
 * and the lookup's parts land on two ranks and are summed there).
 * Both families (a Llama's final RMSNorm, head, tied or untied, with
 * the last stage), CPU engine. */

/* Makes m's forwards run layers [first, last), 0 <= first < last <=
 * n_layer (0, n_layer: the whole model again, gpt_forward's). Forgets
 * the last forward. The activations kept are those of the range's
 * layers only. 0, or -1 with err (a range out of bounds). */
int gpt_set_stage(gpt *m, int first, int last, char *err, size_t errlen);
/* A trainer's forward of the stage: inputs (B,T) ids on the first
 * stage (x NULL), else x (B,T,C) the residual stream that enters layer
 * first (inputs NULL, x borrowed for the call); targets (B,T) on the
 * last stage, whose mean loss goes into *loss (else NULL: *loss
 * untouched). No dropout (refused by the pipeline). 0, or -1 with err.
 * gpt_forward refuses a model with a stage set to less than the whole
 * model; this runs the whole range too. */
int gpt_forward_stage(gpt *m, const uint32_t *inputs, const float *x,
                      const uint32_t *targets, int B, int T, float *loss,
                      char *err, size_t errlen);
/* The stage's output of the last forward, the residual stream (B,T,C)
 * after layer last - 1 (not meaningful on the last stage); valid until
 * m's next forward. */
const float *gpt_stage_output(const gpt *m);
/* The backward of the last gpt_forward_stage: ADDS d(scale *
 * loss)/d(params) of the range into gpt_grads(), from the loss on the
 * last stage (dy NULL), else from dy (B,T,C), the gradient of the
 * stage's output (borrowed for the call; the loss's scale is already in
 * it). Once per forward. 0, or -1 with err (no forward to go back
 * through). */
int gpt_backward_stage(gpt *m, const float *dy, float scale, char *err,
                       size_t errlen);
/* The gradient (B,T,C) of the stage's input x after its backward (not
 * meaningful on the first stage); valid until m's next forward. */
const float *gpt_stage_input_grad(const gpt *m);

/* Parameters (floats, with wte's padding rows) of cfg (finished), as
 * gpt_num_params counts them for the model gpt_create would make. */
size_t gpt_config_num_params(const gpt_config *cfg);

/* FLOPs of one forward+backward per token (6N + attention), for MFU and
 * the tokens/s comparison. */
double gpt_flops_per_token(const gpt *m);

#endif /* DAGRUN_GPT_H */
