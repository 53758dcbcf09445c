/*
 * gpt_impl: the inside of a gpt, shared by gpu/model/gpt.c (configuration,
 * layout, initialization) and its backends (gpu/cpu/gpt_cpu.c: forward and
 * backward; gpu/cuda/gpt_cuda.cu: the tensor indices). Not part of the
 * engine's API: code outside gpu/ uses gpt.h only.
 *
 * Data flows one way: the backends include this header, and nothing here
 * names a backend. What a backend exports for others (the CPU kernels the
 * decoder and the CUDA tests reuse) is in that backend's own header,
 * gpu/cpu/gpt_cpu.h.
 */
#ifndef DAGRUN_GPT_IMPL_H
#define DAGRUN_GPT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"

/* Tensors of one layer, in layout order (gpt.h). */
enum {
  GPT_LN1_W,
  GPT_LN1_B,
  GPT_QKV_W,
  GPT_QKV_B,
  GPT_ATTPROJ_W,
  GPT_ATTPROJ_B,
  GPT_LN2_W,
  GPT_LN2_B,
  GPT_FC_W,
  GPT_FC_B,
  GPT_FCPROJ_W,
  GPT_FCPROJ_B,
  GPT_NLAYER_TENSORS
};

/* Tensors of one Llama layer, in layout order (gpt.h). */
enum {
  LLAMA_LN1_W,
  LLAMA_Q_W,
  LLAMA_K_W,
  LLAMA_V_W,
  LLAMA_O_W,
  LLAMA_LN2_W,
  LLAMA_GATE_W,
  LLAMA_UP_W,
  LLAMA_DOWN_W,
  LLAMA_NLAYER_TENSORS
};

struct gpt {
  gpt_config cfg;
  size_t n_params;     /* floats in params and grads */
  float *params;       /* one allocation, layout of gpt.h */
  float *grads;        /* same layout */
  size_t params_cap, grads_cap; /* floats allocated (>= n_params; 0 while
                                   released, gpt_acquire) */
  /* gpt_set_grad_hook's callback, called by backward. */
  void (*grad_hook)(void *arg, size_t final_from);
  void *grad_hook_arg;
  /* gpt_set_param_hook's callback, called by forward and backward. */
  gpt_param_hook_fn param_hook;
  void *param_hook_arg;
  gpt_tensor *tensors; /* GPT-2: 2 + 12 n_layer + 2; Llama: 1 + 9 n_layer
                         + 1 or 2 */
  size_t n_tensors;
  size_t layer_tensors;      /* per layer: GPT_ or LLAMA_NLAYER_TENSORS */
  size_t first_layer_tensor; /* index of layer 0's first: 2 or 1 */
  /* Parameter groups (gpt.h): group g is the flat range [group_off[g],
   * group_off[g+1]). The kernels find a tensor through its group's base
   * pointers, gp[g] and gg[g] (the group's first float), which are the
   * full arrays' (params + group_off[g]) unless gpt_set_group_params /
   * _grads moved them; tloc[i] is tensor i's group and offset in it. */
  size_t n_groups;  /* n_layer + 2 */
  size_t *group_off; /* n_groups + 1 */
  float **gp, **gg;  /* n_groups each */
  struct gpt_tloc {
    size_t group, local;
  } *tloc; /* n_tensors */

  /* Activations and backward scratch: one allocation, carved for the
   * (B,T) of the last forward; regrown only when a bigger one comes. */
  float *acts;
  size_t acts_cap;            /* floats */
  uint32_t *inputs, *targets; /* (B,T) copies of the last forward's ids */
  size_t ids_cap;
  int B, T;      /* of the last forward; 0 before any */
  int have_loss; /* the last forward had targets */
  float loss;    /* its mean loss */

  /* Dropout (gpt_set_dropout, gpt_dropout_key); fwd_drop and fwd_key are
   * the last forward's (0: none), which its backward uses. */
  float drop_p;
  uint64_t drop_seed, drop_key;
  int drop_active;
  float fwd_drop;
  uint64_t fwd_key;

  /* gpt_set_recompute's: the CPU activations' layout (gpt_cpu.c). */
  gpt_recompute recompute;
  gpt_autocast autocast; /* gpt_set_autocast's */

  /* gpt_set_stage's: the layers [stage_first, stage_last) a forward
   * runs (0, n_layer: the whole model); the embeddings with layer 0, the
   * head with the last layer. A stage without the head keeps the
   * activations of its layers only, and stage_train says its last
   * forward was a trainer's (gpt_forward_stage), whose backward may run. */
  int stage_first, stage_last;
  int stage_train;
};

/* The first float of the tensor with index i (gpt.h's order), wherever
 * its group is: one more load than a flat array's offset, nothing a
 * kernel notices. */
static inline float *gpt_p(struct gpt *m, size_t i) {
  return m->gp[m->tloc[i].group] + m->tloc[i].local;
}
static inline float *gpt_g(struct gpt *m, size_t i) {
  return m->gg[m->tloc[i].group] + m->tloc[i].local;
}
/* Index of tensor k (GPT_LN1_W...) of GPT-2 layer l; 0 is wte, 1 wpe,
 * and ln_f's weight and bias come last. */
static inline size_t gpt_ti(int l, int k) {
  return 2 + (size_t)l * GPT_NLAYER_TENSORS + (size_t)k;
}

/* Index of tensor k (LLAMA_LN1_W...) of Llama layer l; 0 is the
 * embedding, then the layers, model.norm and (untied) lm_head. */
static inline size_t llama_ti(int l, int k) {
  return 1 + (size_t)l * LLAMA_NLAYER_TENSORS + (size_t)k;
}

#endif /* DAGRUN_GPT_IMPL_H */
