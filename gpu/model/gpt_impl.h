/*
 * gpt_impl: the inside of a gpt, shared by gpu/model/gpt.c (configuration,
 * layout, initialization), its backends (gpu/cpu/gpt_cpu.c: forward and
 * backward) and the CPU decoder (gpu/model/decode.c). Not part of the
 * engine's API: code outside gpu/ uses gpt.h only.
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
  gpt_tensor *tensors; /* 2 + 12 n_layer + 2 */
  size_t n_tensors;
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
/* Index of tensor k (GPT_LN1_W...) of layer l; 0 is wte, 1 wpe, and
 * ln_f's weight and bias come last. */
static inline size_t gpt_ti(int l, int k) {
  return 2 + (size_t)l * GPT_NLAYER_TENSORS + (size_t)k;
}

/* LayerNorm (eps 1e-5, as GPT-2) of N rows of C: inp (N,C), w (C), b (C)
 * -> out (N,C), and each row's mean and 1/std into mean (N) and rstd (N)
 * for the backward pass (either may be NULL). Rows run on OpenMP threads.
 * gpu/cpu/gpt_cpu.c. */
void gpt_cpu_layernorm(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C);

/* GELU, tanh approximation (GPT-2's gelu_new), of N floats: inp -> out
 * (may be the same array). OpenMP threads. gpu/cpu/gpt_cpu.c. */
void gpt_cpu_gelu(float *out, const float *inp, size_t N);

/* More of the CPU engine's kernels (gpu/cpu/gpt_cpu.c), exported as the
 * reference of the CUDA kernels' test (tests/gpu/kernel_check.cu). Shapes
 * as in gpt_cpu.c; "+=" adds into the output. OpenMP threads inside.
 *   encoder:      ids (B,T), wte (Vp,C), wpe (T,C) -> out (B,T,C);
 *                 backward dout -> dwte +=, dwpe += (fixed order)
 *   layernorm:    dout, inp (N,C), w (C), mean, rstd (N) -> dinp (N,C) +=,
 *                 dw (C) +=, db (C) +=
 *   matmul:       inp (N,IC), w (IC,OC), b (OC, not NULL) -> out (N,OC);
 *                 backward -> dinp (N,IC) = (overwritten), dw +=, db +=
 *   gelu:         dinout (N) *= gelu'(inp), in place
 *   attention:    qkv (B,T,3C) -> att (B,NH,T,T) probabilities, out (B,T,C);
 *                 backward dout, qkv, att -> dqkv (B,T,3C) (overwritten),
 *                 datt (B,NH,T,T) scratch
 *   crossentropy: logits (N,Vp), targets (N) -> lse, losses (N), probs
 *                 (N,Vp); backward: probs -> dloss * (probs - onehot) in
 *                 place */
void gpt_cpu_encoder_forward(float *out, const uint32_t *ids, const float *wte,
                             const float *wpe, int B, int T, int C);
void gpt_cpu_encoder_backward(float *dwte, float *dwpe, const float *dout,
                              const uint32_t *ids, int B, int T, int C);
void gpt_cpu_layernorm_backward(float *dinp, float *dw, float *db,
                                const float *dout, const float *inp,
                                const float *w, const float *mean,
                                const float *rstd, int N, int C);
void gpt_cpu_matmul_forward(float *out, const float *inp, const float *w,
                            const float *b, int N, int IC, int OC);
void gpt_cpu_matmul_backward(float *dinp, float *dw, float *db,
                             const float *dout, const float *inp,
                             const float *w, int N, int IC, int OC);
void gpt_cpu_gelu_backward(float *dinout, const float *inp, size_t N);
void gpt_cpu_attention_forward(float *out, float *att, const float *qkv, int B,
                               int T, int C, int NH);
void gpt_cpu_attention_backward(float *dqkv, float *datt, const float *dout,
                                const float *qkv, const float *att, int B,
                                int T, int C, int NH);
void gpt_cpu_crossentropy_forward(float *lse, float *losses, float *probs,
                                  const float *logits, const uint32_t *targets,
                                  int N, int V, int Vp);
void gpt_cpu_crossentropy_backward(float *probs_dlogits,
                                   const uint32_t *targets, float dloss, int N,
                                   int V, int Vp);

/* Bytes of the activations, backward scratch and input/target id copies
 * that a forward at (B,T) makes the CPU backend allocate (ensure_acts),
 * computed without allocating. gpu/cpu/gpt_cpu.c. */
uint64_t gpt_cpu_act_bytes(const gpt_config *cfg, int B, int T);

#endif /* DAGRUN_GPT_IMPL_H */
