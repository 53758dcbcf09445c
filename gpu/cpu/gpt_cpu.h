/*
 * gpt_cpu: the CPU backend of the GPT-2 model. Its forward and backward
 * are gpt.h's (gpt_forward, gpt_backward, gpt_logits) and its memory
 * estimate is gpt.h's gpt_memory_estimate; this header adds the kernels
 * that others reuse as they are: the CPU decoder (gpu/cpu/decode.c) runs
 * LayerNorm and GELU with them, and the CUDA kernels' tests
 * (tests/gpu/kernel_check.cu, tests/gpu/emu) take them as the reference.
 *
 * They live here, not in gpu/model/gpt_impl.h, so that the model layer
 * names no backend: gpu/cpu/ depends on gpu/model/, never the reverse.
 *
 * Every kernel is plain fp32 on arrays the caller owns, runs OpenMP
 * threads inside, and gives the same bits for the same inputs and thread
 * count (gpt_cpu.c says how).
 */
#ifndef DAGRUN_GPT_CPU_H
#define DAGRUN_GPT_CPU_H

#include <stddef.h>
#include <stdint.h>

/* LayerNorm (eps 1e-5, as GPT-2) of N rows of C: inp (N,C), w (C), b (C)
 * -> out (N,C), and each row's mean and 1/std into mean (N) and rstd (N)
 * for the backward pass (either may be NULL). */
void gpt_cpu_layernorm(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C);

/* GELU, tanh approximation (GPT-2's gelu_new), of N floats: inp -> out
 * (may be the same array). */
void gpt_cpu_gelu(float *out, const float *inp, size_t N);

/* More of the CPU engine's kernels, exported as the reference of the
 * CUDA kernels' test (tests/gpu/kernel_check.cu). Shapes as in
 * gpt_cpu.c; "+=" adds into the output.
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

/* The Llama family's kernels (llama_cpu.c), which the decoder reuses so
 * that its logits are the training forward's:
 *   rmsnorm:     x (N,C), w (C) -> out (N,C) = x / rms(x) * w, with
 *                rms(x) = sqrt(mean(x^2) + eps); rs (N) = 1 / rms(x)
 *                (may be NULL)
 *   rope_tables: the rotation of positions t0 .. t0+T-1, pair i (channels
 *                i and i + hs/2, Hugging Face's rotate_half): angle
 *                t / theta^(2i/hs), computed in double -> cs, sn (T,hs/2)
 *   rope:        every head of x (B,T,nh*hs) turned in place by the
 *                tables' row t (B of T rows); dir 1 forward, -1 back
 *   swiglu:      gate, up (n) -> hid = silu(gate) * up
 * and, the reference of the CUDA kernels' test (kernel_check.cu):
 *   rmsnorm_backward: dout, x (N,C), w (C), rs (N) -> dx (N,C) +=,
 *                dw (C) += (fixed order)
 *   swiglu_backward:  dhid, gate, up (n) -> dgate, dup (n), overwritten
 *                (dhid may be dup or dgate) */
void llama_cpu_rmsnorm(float *out, float *rs, const float *x, const float *w,
                       int N, int C, float eps);
void llama_cpu_rmsnorm_backward(float *dx, float *dw, const float *dout,
                                const float *x, const float *w, const float *rs,
                                int N, int C);
void llama_cpu_swiglu_backward(float *dgate, float *dup, const float *dhid,
                               const float *gate, const float *up, size_t n);
void llama_cpu_rope_tables(float *cs, float *sn, int t0, int T, int hs,
                           double theta);
void llama_cpu_rope(float *x, const float *cs, const float *sn, int B, int T,
                    int nh, int hs, int dir);
void llama_cpu_swiglu(float *hid, const float *gate, const float *up, size_t n);
/* And the tensor-parallel ranks' (gpu/tensor), on their own heads:
 *   attention_forward:  q (B,T,H*hs), k, v (B,T,KV*hs) -> att (B,H,T,T),
 *                y (B,T,H*hs); query head h reads key/value head
 *                h / (H/KV), causal
 *   attention_backward: dy (B,T,H*hs) -> dq (B,T,H*hs), dk, dv
 *                (B,T,KV*hs), overwritten; datt (B,H,T,T) scratch
 *   linear_forward:  x (N,IC), w (OC,IC) (nn.Linear's layout) -> out
 *                (N,OC) = x w^T
 *   linear_backward: dout (N,OC), x (N,IC), w (OC,IC) -> dx (N,IC) =
 *                dout w, overwritten (beta 0) or added (beta 1); dw
 *                (OC,IC) += dout^T x */
void llama_cpu_attention_forward(float *y, float *att, const float *q,
                                 const float *k, const float *v, int B, int T,
                                 int H, int KV, int hs);
void llama_cpu_attention_backward(float *dq, float *dk, float *dv, float *datt,
                                  const float *dy, const float *q,
                                  const float *k, const float *v,
                                  const float *att, int B, int T, int H, int KV,
                                  int hs);
void llama_cpu_linear_forward(float *out, const float *x, const float *w, int N,
                              int IC, int OC);
void llama_cpu_linear_backward(float *dx, float beta, float *dw,
                               const float *dout, const float *x,
                               const float *w, int N, int IC, int OC);

#endif /* DAGRUN_GPT_CPU_H */
