/*
 * cpu_impl: the inside of the CPU backend, shared by its two families'
 * passes: gpt_cpu.c (GPT-2, and the helpers below) and llama_cpu.c
 * (Llama). gpt.h's gpt_forward, gpt_backward, gpt_logits and
 * gpt_memory_estimate are gpt_cpu.c's, which hand a Llama model to the
 * llama_cpu_* functions. Not part of the engine's API.
 */
#ifndef DAGRUN_CPU_IMPL_H
#define DAGRUN_CPU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"
#include "model/gpt_impl.h"

/* C (M,N) = alpha op(A) op(B) + beta C, row-major, cut among the OpenMP
 * threads (each element computed whole by one thread: deterministic). */
void cpu_gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* OpenBLAS held to one thread for a pass; returns what to restore. */
int cpu_blas_threads_begin(void);
void cpu_blas_threads_end(int n);

/* Attention's causal softmax of the rows of a (T,T), in place (zero above
 * the diagonal), and its backward: da (T,T), the probabilities' gradient,
 * becomes scale times the scores' gradient, in place. One thread each. */
void cpu_causal_softmax(float *a, int T);
void cpu_causal_softmax_backward(float *da, const float *a, int T,
                                 float scale);

/* The start of every forward: forgets the last one, checks (B,T) (widest:
 * the widest activation row, for the int range of the products) and the
 * ids, makes m->acts hold need floats (the backend's count for (B,T),
 * computed before the check: plain arithmetic, used only after it) and
 * copies the ids. inputs NULL: a pipeline stage after the first, which
 * has none. 0, or -1 with err. */
int cpu_forward_begin(gpt *m, const uint32_t *inputs, const uint32_t *targets,
                      int B, int T, size_t widest, size_t need, char *err,
                      size_t errlen);
/* The end of every forward that got its logits (B*T,Vp): zeroes their
 * padding columns, records (B,T) as the last forward's, and with targets
 * computes the cross-entropy into lse, losses and probs (the backward's
 * dlogits), the mean into m->loss and *loss. */
void cpu_forward_end(gpt *m, int B, int T, float *logits, float *lse,
                     float *losses, float *probs, const uint32_t *targets,
                     float *loss);
/* After a forward's layers: on a pipeline stage before the last,
 * records (B,T) as the last forward's and returns 1 (the forward is
 * done: no head); else 0. */
int cpu_stage_done(gpt *m, int B, int T);
/* A parameter hook stopped a forward: forgets it, says so in err;
 * returns -1. */
int cpu_hook_failed(gpt *m, char *err, size_t errlen);
/* The parameter hook's calls (gpt.h's gpt_set_param_hook): 0 without a
 * hook. */
int cpu_params_need(gpt *m, int g, int next);
int cpu_params_done(gpt *m, int g, int next);

/* The Llama family's passes (llama_cpu.c), as gpt.h's for GPT-2, over
 * the model's stage (gpt_set_stage; all layers but in a pipeline): the
 * forward from inputs on the first stage, else from x (the stream that
 * enters it), the backward from the loss on the last stage (dy NULL),
 * else from dy (the gradient of the stage's output). */
int llama_cpu_forward(gpt *m, const uint32_t *inputs, const float *x,
                      const uint32_t *targets, int B, int T, float *loss,
                      char *err, size_t errlen);
void llama_cpu_backward(gpt *m, float scale, const float *dy);
const float *llama_cpu_logits(const gpt *m);
/* gpt_stage_output's and gpt_stage_input_grad's, after a forward. */
const float *llama_cpu_stage_output(const gpt *m);
const float *llama_cpu_stage_input_grad(const gpt *m);
/* Floats of activations and backward scratch at (B,T) under rc. */
size_t llama_cpu_act_floats(const gpt_config *cfg, gpt_recompute rc, int B,
                            int T);

#endif /* DAGRUN_CPU_IMPL_H */
