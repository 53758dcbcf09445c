/*
 * kernels: the CUDA kernels and cuBLASLt products of the GPU backend
 * (gpu/cuda/gpt_cuda.cu), one host launcher per op. The backend is the
 * CPU engine's model (gpu/model/gpt.h, gpu/cpu/gpt_cpu.c) in mixed
 * precision: activations and the parameters used for compute are BF16
 * (floatX); LayerNorm statistics, losses, gradients of parameters and
 * the optimizer's master weights and moments are FP32.
 *
 * Conventions for every launcher:
 * - Pointers are device pointers; shapes are row-major, named as in
 *   gpt_cpu.c: N = B*T rows, C channels, OC output channels, NH heads,
 *   hs = C/NH, V the vocabulary, Vp it padded to a multiple of 64.
 * - Weight matrices are (in, out) as the CPU engine keeps GPT-2's:
 *   y = x W + b; kern_linear_* take nn.Linear's (out, in), the Llama
 *   family's: y = x W^T.
 * - Every launcher runs on `stream`, checks its launch
 *   (cudaGetLastError) and returns 0, or -1 with a message in err naming
 *   the op and CUDA's error string. Kernels never allocate: scratch comes
 *   from the caller, with the size a *_scratch_bytes function gives.
 * - "+=" in a comment means the op adds into its output (gradient
 *   accumulation over micro-batches and over the residual stream);
 *   otherwise it overwrites.
 * - deterministic: where an op would use atomics across blocks, 1 picks a
 *   fixed-order reduction so that two runs give the same bits.
 */
#ifndef DAGRUN_CUDA_KERNELS_CUH
#define DAGRUN_CUDA_KERNELS_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>

typedef __nv_bfloat16 floatX;

/* The attention kernels a context runs (DAGRUN_CUDA_ATTENTION's values in
 * brackets). */
enum kern_attention {
  /* attention_tc.cu's tensor-core kernels for head sizes that are
   * multiples of 16 (else the FP32 ones), tiles loaded one iteration
   * ahead, the backward in two kernels (dq; dk and dv). The default. */
  KERN_ATT_TC = 0,
  /* The same, but outside deterministic mode the backward is one kernel
   * that adds dq with atomics ("tc-fused": measured slower on an H100,
   * kept to measure elsewhere). */
  KERN_ATT_TC_FUSED,
  /* The tensor-core kernels with each tile loaded when it is needed
   * ("tc-sync": those measured before the pipelined ones, kept to
   * compare). */
  KERN_ATT_TC_SYNC,
  /* attention.cu's FP32 kernels on the CUDA cores ("fp32"). */
  KERN_ATT_FP32,
  /* cuDNN's fused flash attention for every shape ("cudnn";
   * kern_attention_use_cudnn). Under KERN_ATT_TC, shapes readied by
   * kern_attention_prepare run on it too. */
  KERN_ATT_CUDNN,
};

typedef struct kern_ctx {
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void *lt_workspace; /* for cuBLASLt's algorithms */
  size_t lt_workspace_bytes;
  int deterministic;
  int sm_count; /* multiProcessorCount, for grid sizing */
  /* Which attention kernels run: a kern_attention (DAGRUN_CUDA_ATTENTION
   * at init; tests set it to compare them). */
  int attention;
  /* cuDNN's handle and plans (attention_cudnn.cu), NULL until
   * kern_attention_prepare or kern_attention_use_cudnn loads it. */
  struct att_cudnn *cudnn;
  /* DAGRUN_CUDA_ATTENTION=tc: kern_attention_prepare leaves cuDNN out. */
  int cudnn_off;
  /* The fixed-order column sums' counters of finished blocks (layernorm.cu;
   * zero between launches): device memory after the cuBLASLt workspace.
   * The context's, not the caller's scratch, because they must stay zero
   * from one call to the next, and the scratch is every op's. */
  unsigned *colsum_done;
} kern_ctx;

/* Makes lt, a 32 MiB workspace (and the column sums' counters after it),
 * the stream (non-blocking) and reads the device's SM count; on the
 * current device. 0, or -1 with err. */
int kern_ctx_init(kern_ctx *k, int deterministic, char *err, size_t errlen);
void kern_ctx_destroy(kern_ctx *k);

/* ---- Conversions ---- */
/* out[i] = (floatX)in[i] (round to nearest even), n floats. */
int kern_f32_to_bf16(const kern_ctx *k, floatX *out, const float *in, size_t n,
                     char *err, size_t errlen);
int kern_bf16_to_f32(const kern_ctx *k, float *out, const floatX *in, size_t n,
                     char *err, size_t errlen);

/* ---- Embedding ---- */
/* ids (N) < V, wte (Vp,C), wpe (T,C) -> out (B,T,C) = wte[id] + wpe[t]
 * (wpe NULL: wte[id] alone, the Llama family's). An id < 0 adds no row
 * (a tensor shard's wte has only its own ids: the others are -1, and
 * the shards' outputs are summed). */
int kern_encoder_forward(const kern_ctx *k, floatX *out, const int *ids,
                         const floatX *wte, const floatX *wpe, int B, int T,
                         int C, char *err, size_t errlen);
/* dout (B,T,C) -> dwte (Vp,C) += at ids (ids < 0 skipped, as in the
 * forward), dwpe (T,C) += summed over B (dwpe NULL: none).
 * Deterministic mode adds a token repeated in the batch in a fixed order
 * (scratch: kern_encoder_backward_scratch_bytes). */
size_t kern_encoder_backward_scratch_bytes(int B, int T, int C);
int kern_encoder_backward(const kern_ctx *k, float *dwte, float *dwpe,
                          void *scratch, const floatX *dout, const int *ids,
                          const int *ids_host, int B, int T, int C, char *err,
                          size_t errlen);

/* ---- LayerNorm (eps 1e-5) ---- */
/* inp (N,C), w (C), b (C) -> out (N,C), mean (N), rstd (N) */
int kern_layernorm_forward(const kern_ctx *k, floatX *out, float *mean,
                           float *rstd, const floatX *inp, const floatX *w,
                           const floatX *b, int N, int C, char *err,
                           size_t errlen);
/* residual = inp1 + inp2 (N,C), then out = LayerNorm(residual): the
 * residual add of a block fused with the next LayerNorm. */
int kern_residual_layernorm_forward(const kern_ctx *k, floatX *residual,
                                    floatX *out, float *mean, float *rstd,
                                    const floatX *inp1, const floatX *inp2,
                                    const floatX *w, const floatX *b, int N,
                                    int C, char *err, size_t errlen);
/* The most rows (N) the backward passes' fixed-order column sums (bias
 * and LayerNorm gradients) take; more are refused with -1, as are more
 * than 262144 columns (OC, C). */
size_t kern_backward_max_rows(void);
/* dout (N,C), inp (N,C), w, mean, rstd -> dinp (N,C) +=, dw (C) +=,
 * db (C) += (scratch: kern_layernorm_backward_scratch_bytes, for the
 * per-block partial sums of dw and db, reduced in a fixed order). */
size_t kern_layernorm_backward_scratch_bytes(int N, int C, int sm_count);
int kern_layernorm_backward(const kern_ctx *k, floatX *dinp, float *dw,
                            float *db, void *scratch, const floatX *dout,
                            const floatX *inp, const floatX *w,
                            const float *mean, const float *rstd, int N, int C,
                            char *err, size_t errlen);

/* ---- RMSNorm (the Llama family's) ---- */
/* inp1 (N,C), w (C) -> out (N,C) = x * rstd * w, rstd (N) = 1 / sqrt(
 * mean(x^2) + eps) (NULL: not kept), x = inp1; or with residual and inp2
 * (both or neither) x = residual = inp1 + inp2, the residual add fused
 * as kern_residual_layernorm_forward's. */
int kern_rmsnorm_forward(const kern_ctx *k, floatX *residual, floatX *out,
                         float *rstd, const floatX *inp1, const floatX *inp2,
                         const floatX *w, float eps, int N, int C, char *err,
                         size_t errlen);
/* dout, inp (N,C), w (C), rstd (N) -> dinp (N,C) +=, dw (C) += (fixed
 * order). scratch: kern_layernorm_backward_scratch_bytes(N, C, sm). */
int kern_rmsnorm_backward(const kern_ctx *k, floatX *dinp, float *dw,
                          void *scratch, const floatX *dout, const floatX *inp,
                          const floatX *w, const float *rstd, int N, int C,
                          char *err, size_t errlen);

/* ---- Residual ---- */
/* out = a + b, n elements */
int kern_residual_forward(const kern_ctx *k, floatX *out, const floatX *a,
                          const floatX *b, size_t n, char *err, size_t errlen);

/* ---- Matrix products (cuBLASLt, FP32 accumulation) ---- */
/* inp (N,C), w (C,OC), bias (OC) or NULL -> out (N,OC) = inp w + bias.
 * gelu_aux non-NULL: out = GELU(inp w + bias) (tanh approximation) and
 * gelu_aux (N,OC) keeps the pre-GELU values for the backward pass
 * (cuBLASLt's GELU_AUX_BIAS epilogue). */
int kern_matmul_forward(const kern_ctx *k, floatX *out, floatX *gelu_aux,
                        const floatX *inp, const floatX *w, const floatX *bias,
                        int N, int C, int OC, char *err, size_t errlen);
/* dout (N,OC), inp (N,C), w (C,OC) ->
 *   dinp (N,C) = dout w^T (overwritten), then, if gelu_aux is non-NULL,
 *   multiplied by GELU'(gelu_aux) (gelu_aux (N,C) is the pre-GELU input
 *   of the layer that made inp; cuBLASLt's DGELU epilogue);
 *   dw (C,OC) += inp^T dout; dbias (OC) += sum of dout's rows (NULL: none).
 * scratch: kern_matmul_backward_scratch_bytes (dbias partial sums). */
size_t kern_matmul_backward_scratch_bytes(int N, int OC, int sm_count);
int kern_matmul_backward(const kern_ctx *k, floatX *dinp, float *dw,
                         float *dbias, void *scratch, const floatX *dout,
                         const floatX *inp, const floatX *w,
                         const floatX *gelu_aux, int N, int C, int OC,
                         char *err, size_t errlen);

/* nn.Linear's layout (the Llama family's weights, (OC, C), no bias):
 * inp (N,C), w (OC,C) -> out (N,OC) = inp w^T. */
int kern_linear_forward(const kern_ctx *k, floatX *out, const floatX *inp,
                        const floatX *w, int N, int C, int OC, char *err,
                        size_t errlen);
/* dout (N,OC), inp (N,C), w (OC,C) -> dinp (N,C) = dout w (overwritten),
 * dw (OC,C) += dout^T inp (FP32). */
int kern_linear_backward(const kern_ctx *k, floatX *dinp, float *dw,
                         const floatX *dout, const floatX *inp, const floatX *w,
                         int N, int C, int OC, char *err, size_t errlen);

/* ---- SwiGLU (the Llama family's MLP activation) ----
 * gu (N,2I): each row gate_proj's I outputs then up_proj's ->
 * hid (N,I) = silu(gate) * up. */
int kern_swiglu_forward(const kern_ctx *k, floatX *hid, const floatX *gu, int N,
                        int I, char *err, size_t errlen);
/* dhid (N,I), gu (N,2I) -> dgu (N,2I) (d gate, d up; overwritten). */
int kern_swiglu_backward(const kern_ctx *k, floatX *dgu, const floatX *dhid,
                         const floatX *gu, int N, int I, char *err,
                         size_t errlen);

/* ---- RoPE and grouped-query attention's layout (the Llama family) ----
 * qkv_kv (B,T,C+2KVD), each row q (C) k (KVD) v (KVD) with KVD = KV*hs,
 * hs = C/NH even, KV dividing NH; cs, sn (T,hs/2) FP32, the rotation of
 * each position and pair (llama_cpu_rope_tables) -> qkv (B,T,3C), the
 * attention kernels' layout: q and k turned by RoPE (Hugging Face's
 * rotate_half: channel i with i + hs/2), query head h given key/value
 * head h / (NH/KV). */
int kern_rope_qkv_forward(const kern_ctx *k, floatX *qkv, const floatX *qkv_kv,
                          const float *cs, const float *sn, int B, int T, int C,
                          int NH, int KV, char *err, size_t errlen);
/* Its adjoint: dqkv (B,T,3C) -> dqkv_kv (B,T,C+2KVD) (overwritten): dq
 * and dk turned back, each key/value head's dk and dv summed over its
 * query heads in head order (deterministic in every mode). */
int kern_rope_qkv_backward(const kern_ctx *k, floatX *dqkv_kv,
                           const floatX *dqkv, const float *cs, const float *sn,
                           int B, int T, int C, int NH, int KV, char *err,
                           size_t errlen);

/* ---- GELU (tanh approximation), when not fused into a product ---- */
int kern_gelu_forward(const kern_ctx *k, floatX *out, const floatX *inp,
                      size_t n, char *err, size_t errlen);
/* dinout = dinout * GELU'(inp), in place */
int kern_gelu_backward(const kern_ctx *k, floatX *dinout, const floatX *inp,
                       size_t n, char *err, size_t errlen);

/* ---- Causal self-attention, fused (never a (B,NH,T,T) matrix) ---- */
/* Readies the attention of one shape before the steps that run it. Where
 * the context runs the default kernels (KERN_ATT_TC; DAGRUN_CUDA_ATTENTION
 * unset) and is not deterministic, it loads cuDNN (libcudnn.so.9, at run
 * time) and builds its fused attention for (B,T,C,NH) (cuDNN compiles the
 * kernels now: seconds, once), and that shape then runs on cuDNN, whose
 * kernels took 2.3 ms of a GPT-2 B=8 step on an H200 where ours took 5.5
 * (bench/README.md). Where cuDNN is missing or refuses the shape, or the
 * context is deterministic (cuDNN's backward adds dq with atomics), or
 * DAGRUN_CUDA_ATTENTION=tc, the shape stays on our kernels. Never an
 * error: 1 for cuDNN, 0 for ours, with why saying which and why. Its
 * device memory: kern_attention_extra_bytes. */
int kern_attention_prepare(kern_ctx *k, int B, int T, int C, int NH, char *why,
                           size_t whylen);
/* Device memory the context took for cuDNN's attention (its handle's
 * plans' workspace), beside the callers' scratch. */
size_t kern_attention_extra_bytes(const kern_ctx *k);
/* Runs every shape's attention on cuDNN (KERN_ATT_CUDNN, what
 * DAGRUN_CUDA_ATTENTION=cudnn asks): 0, or -1 with err where cuDNN cannot
 * be loaded or the context is deterministic. */
int kern_attention_use_cudnn(kern_ctx *k, char *err, size_t errlen);

/* qkv (B,T,3C) (q, k, v of head h at channels h*hs of each third) ->
 * out (B,T,C), lse (B,NH,T) = log-sum-exp of each query's scaled scores
 * (1/sqrt(hs)), kept for the backward pass. */
int kern_attention_forward(const kern_ctx *k, floatX *out, float *lse,
                           const floatX *qkv, int B, int T, int C, int NH,
                           char *err, size_t errlen);
/* dout (B,T,C), qkv, out, lse -> dqkv (B,T,3C) (overwritten).
 * scratch: kern_attention_backward_scratch_bytes. */
size_t kern_attention_backward_scratch_bytes(int B, int T, int C, int NH);
int kern_attention_backward(const kern_ctx *k, floatX *dqkv, void *scratch,
                            const floatX *dout, const floatX *qkv,
                            const floatX *out, const float *lse, int B, int T,
                            int C, int NH, char *err, size_t errlen);

/* ---- Classifier: softmax + cross-entropy + dlogits in one pass ---- */
/* logits (N,Vp) (columns >= V ignored), targets (N) < V ->
 * losses (N) = lse - logit[target]; if dloss != 0, logits is overwritten
 * with dlogits = dloss * (softmax - onehot) (padding columns 0), so the
 * full probabilities are never stored. */
int kern_fused_classifier(const kern_ctx *k, floatX *logits, float *losses,
                          const int *targets, float dloss, int N, int V,
                          int Vp, char *err, size_t errlen);

/* ---- The vocabulary-parallel cross-entropy (a tensor shard's) ----
 * A shard has the logits (N,Vl) of the vocabulary ids [lo, lo + Vl), of
 * which the first Vv are real (ids < V; the rest padding, ignored). The
 * caller all-gathers maxes between the first two kernels (every rank's
 * into maxes_all (ranks,N)) and all-reduces red (2N) between the last
 * two: the logits are never gathered (classifier_vp.cu).
 * maxes (N) = each row's maximum over its Vv columns (-inf where Vv 0). */
int kern_vp_row_max(const kern_ctx *k, float *maxes, const floatX *logits,
                    int N, int Vv, int Vl, char *err, size_t errlen);
/* gmax (N) = the maximum over the ranks' maxes; red (2N): red[i] = the
 * shard's sum of exp(logit - gmax), red[N + i] = the target's logit
 * where this shard has it, else 0 (both summed over the ranks next). */
int kern_vp_row_sums(const kern_ctx *k, float *gmax, float *red,
                     const float *maxes_all, const floatX *logits,
                     const int *targets, int lo, int N, int Vv, int Vl,
                     int ranks, char *err, size_t errlen);
/* With red summed: losses (N) = gmax + log(sum) - logit[target]; if
 * dloss != 0, logits is overwritten with dloss * (softmax - onehot) on
 * the shard's columns (padding 0), as kern_fused_classifier does. */
int kern_vp_classifier(const kern_ctx *k, floatX *logits, float *losses,
                       const float *gmax, const float *red, const int *targets,
                       int lo, float dloss, int N, int Vv, int Vl, char *err,
                       size_t errlen);

/* ---- Reductions ---- */
/* *out = sum of x[i]^2 over n floats, in a fixed order (deterministic in
 * every mode). scratch: kern_norm_scratch_bytes. out is device memory. */
size_t kern_norm_scratch_bytes(size_t n, int sm_count);
int kern_sum_squares(const kern_ctx *k, float *out, void *scratch,
                     const float *x, size_t n, char *err, size_t errlen);
/* *out = mean of x (n floats), fixed order. scratch as kern_sum_squares. */
int kern_mean(const kern_ctx *k, float *out, void *scratch, const float *x,
              size_t n, char *err, size_t errlen);

/* ---- Optimizers (fused: one kernel per group and step) ----
 * master (n) FP32 weights, updated; params (n) their BF16 copy, rewritten;
 * grads (n) FP32, each multiplied by grad_scale (clipping and, for FP16,
 * unscaling) before use; the same formulas as gpu/optim/optim.h. Adam's
 * bias corrections come as b1_corr = 1 - b1^t, b2_corr = 1 - b2^t. */
int kern_adamw_update(const kern_ctx *k, float *master, floatX *params,
                      float *m, float *v, const float *grads, size_t n,
                      float lr, float beta1, float beta2, float b1_corr,
                      float b2_corr, float eps, float weight_decay,
                      float grad_scale, char *err, size_t errlen);
int kern_lion_update(const kern_ctx *k, float *master, floatX *params,
                     float *m, const float *grads, size_t n, float lr,
                     float beta1, float beta2, float weight_decay,
                     float grad_scale, char *err, size_t errlen);

#endif /* DAGRUN_CUDA_KERNELS_CUH */
