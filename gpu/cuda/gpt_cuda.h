/*
 * gpt_cuda: the CUDA backend of the models of gpu/model/gpt.h (both
 * families, GPT-2 and Llama) for training on one GPU in mixed precision:
 * the CPU engine's model, math, parameter layout and optimizer semantics
 * (gpu/cpu/gpt_cpu.c, llama_cpu.c, gpu/optim/optim.h), with
 *   - BF16 parameters and activations for the matrix products and the
 *     kernels (gpu/cuda/kernels.cuh),
 *   - FP32 master weights, FP32 gradients, FP32 optimizer state (AdamW:
 *     m then v; Lion: m; the layout of optim_state()),
 *   - global grad-norm clipping, gradient accumulation (backward adds),
 *   - activation recomputation (gpt_recompute),
 *   - a deterministic mode (two runs from one seed: the same bits).
 * Everything is allocated by gpt_cuda_create for the largest micro-batch
 * (B,T), so that an out-of-memory is found before training starts.
 *
 * Checkpoints stay the CPU engine's: gpt_cuda_download / _upload move the
 * FP32 master weights and the optimizer state to and from a host gpt and
 * optim, which gpu/ckpt and stages/train/trainstate.c write and read; a
 * checkpoint written on the GPU resumes on the CPU and the reverse.
 *
 * Errors: every function that can fail returns 0, or -1 with a message in
 * err (the CUDA or cuBLASLt error string and the file:line of the call);
 * nothing exits or aborts.
 *
 * Threads: one gpt_cuda is used by one host thread at a time. All work
 * runs on the gpt_cuda's own stream; functions that return host values
 * (the loss, the grad norm, downloads) synchronize it.
 *
 * The functions are plain C (extern "C") and can be called from C files.
 */
#ifndef DAGRUN_GPT_CUDA_H
#define DAGRUN_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation recomputation: gpt.h's gpt_recompute, on the GPU. */
/* "none", "gelu", "block" -> *out; 0, or -1 for another name. */
int gpt_recompute_parse(const char *name, gpt_recompute *out);
const char *gpt_recompute_name(gpt_recompute r);

/* A flat range of the parameter layout, [flat, flat + n), at offset
 * local of a ZeRO-3 shard (gpt_cuda_options' pieces). */
typedef struct gpt_cuda_piece {
  size_t flat, n, local;
} gpt_cuda_piece;

/* Tensor parallel (gpt_cuda_options.tp; gpu/tensor/tensor_cuda.h drives
 * it): this gpt_cuda is rank `rank` of a tensor group of `ranks` GPUs,
 * with Megatron-LM's shards of the model (gpu/tensor/tensor.h: GPT-2's
 * c_attn and c_fc by columns, attn.c_proj and mlp.c_proj by rows; a
 * Llama's q, k, v, gate and up by rows (heads, key/value heads, SwiGLU
 * columns), o_proj and down_proj by columns; the embedding and an untied
 * head by vocabulary rows; the rest replicated). The fused q|k|v and
 * gate|up products read adjacent shards, as tensor.h lays them out. Its
 * parameter layout is the shard's, n floats, tensor i (gpt.h's order) at
 * tensors[i]: the master weights, the BF16 copy, the gradients and the
 * optimizer state all cover the shard; they move with gpt_cuda_upload_shard /
 * _download_shard (zero after create). The passes run the same kernels on the
 * local widths (n_head / ranks heads, n_kv_head / ranks key/value heads, 4C or
 * intermediate_size / ranks MLP columns, padded_vocab / ranks vocabulary
 * rows); GPT-2's row-split products' biases are added by rank 0 alone. Between
 * kernels the engine calls the group's collectives on FP32 device buffers, its
 * stream synchronized first, and goes on when they return (complete): allreduce
 * sums n floats in place, allgather puts every rank's n floats into recv (rank
 * r's at r n). They are called, in the same order on every rank: after the
 * lookup and after each row-split product (the BF16 (B,T,C) summed in FP32 and
 * rounded once), between the vocabulary-parallel cross-entropy's kernels (the
 * row maxima gathered, the sums of exp and the target's logit summed),
 * and in backward after each column-split product's input gradient and
 * the head's. Hooks, not a comm handle: gpu/cuda does not link the comm
 * layer (the emulator's build swaps it), and a test can sum by hand.
 * What stays the caller's: the group's clipping norm (gpt_cuda_grad_sumsq
 * of the shard's ranges, summed; gpt_cuda_clip_grad_norm sees one
 * shard), keeping the replicated tensors' copies equal, and the hooks
 * (gpt_cuda_set_grad_hook's offsets are the shard layout's, not gpt.h's
 * flat one). ZeRO-1 over replicas of the shard (gpu/tensor/
 * tensor_cuda.c) is shard_lo, shard_n and padded in the shard's layout:
 * the master weights and optimizer state cover [shard_lo, shard_lo +
 * shard_n) of it, the BF16 copy and the gradients padded floats, and
 * upload_shard takes (download_shard writes) padded floats with the
 * master weights at shard_lo; download_shard writes the master weights
 * alone, [shard_lo, shard_lo + shard_n) of it. ZeRO-2 adds grad_shard
 * (the gradients the slice's shard_n floats; the groups' whole ones
 * where gpt_cuda_set_group_grads puts them: every group of a shard
 * starts at its float 0, so one pointer, the whole array's, serves
 * them all). ZeRO-3 is one piece, {shard_lo, own, 0} of the shard's
 * layout (own: the slice's floats short of the padding past the
 * shard's end), with shard_n the slice's floats: every array is the slice's,
 * upload_shard and download_shard move its shard_n floats, and the
 * groups' parameters and gradients are where the setters put them (the
 * same one pointer each). Not with master_n or recompute (refused by
 * gpt_cuda_create). */
typedef struct gpt_cuda_tp_tensor {
  size_t offset, numel;
} gpt_cuda_tp_tensor;

typedef struct gpt_cuda_tp {
  int ranks, rank;                   /* ranks 0 or 1: no tensor parallel */
  const gpt_cuda_tp_tensor *tensors; /* gpt_tensor_count's; copied */
  size_t n;
  int (*allreduce)(void *arg, float *buf, size_t n, char *err, size_t errlen);
  int (*allgather)(void *arg, const float *send, float *recv, size_t n,
                   char *err, size_t errlen);
  void *arg;
} gpt_cuda_tp;

typedef struct gpt_cuda_options {
  int B, T;             /* the largest micro-batch forward will see */
  optim_config opt;     /* as for optim_create (kind, betas, eps, decay) */
  gpt_recompute recompute;
  int deterministic;    /* non-zero: fixed-order reductions everywhere */
  int device;           /* CUDA device index */
  /* Activation slots (0 or 1: one): each keeps one forward for its
   * backward (gpt_cuda_set_slot), for a pipeline stage's micro-batches in
   * flight. The weights, gradients and backward buffers are shared. */
  int slots;
  /* A gang rank's part (gpu/zero/zero_cuda.h, ZeRO stages 1-2). shard_n
   * 0: the FP32 master weights and the optimizer state cover the whole
   * model. Else they cover only the flat range [shard_lo, shard_lo +
   * shard_n) of the layout (floats past the model's last are padding,
   * never updated), gpt_cuda_step updates that range alone (from the
   * gradients at the same flat offsets), gpt_cuda_download writes that
   * range of the host's parameters, and the optimizer given to upload and
   * download has shard_n floats per state array. padded: the elements of
   * the BF16 parameters and the FP32 gradients (at least the model's, 0
   * for that), so that a gang's in-place all-gather and reduce-scatter
   * of N equal slices fit. */
  size_t shard_lo, shard_n, padded;
  /* ZeRO stage 2 (with shard_n): the FP32 gradients are the shard's
   * alone, shard_n floats (gradient i is the flat shard_lo + i's), which
   * gpt_cuda_step reads. Backward adds each group's gradients where the
   * parameter hook places them (gpt_cuda_set_group_grads, as stage 3
   * does), and what fills the shard's from those is the caller's. */
  int grad_shard;
  /* ZeRO stage 3 (npieces > 0): the rank's shard is pieces of the
   * parameter groups (gpt.h: the embeddings, each layer, ln_f), piece j
   * the flat range [flat, flat + n) at shard offset local (zero.h's
   * stage-3 layout; the floats between pieces are padding). The master
   * weights, the optimizer state, the BF16 parameters and the FP32
   * gradients then all cover the shard alone (shard_n floats; shard_lo
   * and padded are not used): forward and backward find each group
   * where the parameter hook places it (gpt_cuda_set_param_hook),
   * gpt_cuda_step updates the shard from the shard's gradients (which a
   * reduce-scatter of the groups' gradients fills), and the weights move
   * to and from the host with gpt_cuda_upload_shard / _download_shard.
   * pieces is copied by gpt_cuda_create. */
  const gpt_cuda_piece *pieces;
  size_t npieces;
  /* With pieces, a ZeRO-1 slice of the shard (gpu/pipeline/
   * pipeline_cuda.c: a pipeline stage's data-parallel group): master_n
   * > 0 makes the FP32 master weights and the optimizer state cover the
   * shard's [master_lo, master_lo + master_n) alone (master_n floats a
   * state array), the BF16 parameters and the gradients still the whole
   * shard. gpt_cuda_step updates the pieces' floats in that window (and
   * their BF16 copy) from the gradients at the same shard offsets;
   * gpt_cuda_upload_shard takes the whole shard (the BF16 copy of all of
   * it, the window's master weights), gpt_cuda_download_shard writes the
   * window's master weights at shard + master_lo. 0: the whole shard. */
  size_t master_lo, master_n;
  gpt_cuda_tp tp; /* tensor parallel (above); zero: none */
  /* A pipeline stage's layers [layers_first, layers_last) (0, 0: all of
   * them): the activation slots keep the stream and the buffers of
   * those layers alone, and the head's (the final norm's output, the
   * logits) only when layers_last is n_layer; the forwards run that
   * range (gpt_cuda_set_stage may narrow it, not widen it). */
  int layers_first, layers_last;
} gpt_cuda_options;

typedef struct gpt_cuda gpt_cuda;

/* Non-zero when a CUDA driver and at least one device are usable; else 0
 * and why (no driver, no device, the runtime's error) in why. Never
 * fails otherwise. */
int gpt_cuda_available(char *why, size_t whylen);

/* A one-line description of device `device` ("NVIDIA H100 80GB HBM3, 132
 * SMs, 79.1 GiB"), for logs. 0, or -1 with err. */
int gpt_cuda_device_name(int device, char *out, size_t outlen, char *err,
                         size_t errlen);

/* The device memory training cfg (finished) on micro-batches of (B,T)
 * with o's optimizer and recompute mode takes, computed without
 * allocating: params = FP32 master + BF16 copy, grads (FP32), optim
 * (FP32 moments), acts (activations, backward and kernel scratch, token
 * ids, cuBLASLt's workspace); total is their sum, what gpt_cuda_create
 * asks the device for. o->B and o->T are ignored (B, T given). */
void gpt_cuda_memory_estimate(const gpt_config *cfg, int B, int T,
                              const gpt_cuda_options *o, gpt_memory *out);

/* Makes the GPU model of host's configuration on device o->device, its
 * FP32 master weights from gpt_params(host) (and their BF16 copy), zero
 * gradients, zero optimizer state with t = 0, and activations for
 * micro-batches up to (o->B, o->T). The optimizer's groups are host's
 * tensors, decayed as gpt_tensor.decay says (as trainkit_make_optim).
 * When the device has not the memory, fails with a message naming the
 * model's parameters, B, T, the bytes asked, the device's free and total
 * memory, and what to change. Caller destroys *out. host is only read. */
int gpt_cuda_create(const gpt *host, const gpt_cuda_options *o,
                    gpt_cuda **out, char *err, size_t errlen);
void gpt_cuda_destroy(gpt_cuda *g); /* NULL is a no-op */

/* Forward over inputs (B,T) host ids (< vocab_size), B <= o->B and
 * T <= o->T; with targets (host, B*T) the mean cross-entropy goes to
 * *loss when loss is not NULL (synchronizing; NULL: no wait, the loss is
 * read later with gpt_cuda_last_loss). 0, or -1 with err (bad ids, a
 * batch larger than created for, a CUDA error). */
int gpt_cuda_forward(gpt_cuda *g, const uint32_t *inputs,
                     const uint32_t *targets, int B, int T, float *loss,
                     char *err, size_t errlen);
/* gpt_cuda_forward for a training step, whose gpt_cuda_backward follows
 * (targets required): the classifier writes the gradient of the mean
 * loss in place of the logits in the same pass over them as the loss,
 * where gpt_cuda_forward keeps the logits and the backward reads them
 * again; backward applies its scale in the head's two products. One pass
 * fewer over the (B*T, Vp) logits a step (kernel_bench's loss-only
 * classifier: 0.92 ms at GPT-2 124M's B=8 on an H200); the logits are
 * not kept (gpt_cuda_logits fails). The gradients are the same bits
 * where the backward's scale is a power of 2. */
int gpt_cuda_forward_train(gpt_cuda *g, const uint32_t *inputs,
                           const uint32_t *targets, int B, int T, float *loss,
                           char *err, size_t errlen);
/* The mean loss of the last forward with targets (synchronizes). */
int gpt_cuda_last_loss(gpt_cuda *g, float *loss, char *err, size_t errlen);
/* Logits of the last gpt_cuda_forward, (B,T,Vp) as FP32 into host out
 * (B*T*Vp floats; columns >= vocab_size are not meaningful; a tensor
 * shard's (B,T,Vp/ranks), its vocabulary rows'). Valid only
 * before the backward of that forward (which turns them into their
 * gradient), and not after gpt_cuda_forward_train. 0, or -1 with err. */
int gpt_cuda_logits(gpt_cuda *g, float *out, char *err, size_t errlen);

/* Sets every gradient to zero. */
int gpt_cuda_zero_grad(gpt_cuda *g, char *err, size_t errlen);
/* Backward of the last forward (with targets): ADDS
 * d(scale * loss)/d(params) to the gradients, as gpt_backward. Once per
 * forward; without a forward with targets since, it does nothing. */
int gpt_cuda_backward(gpt_cuda *g, float scale, char *err, size_t errlen);
/* Calls hook(arg, final_from) during gpt_cuda_backward each time more
 * of the gradient is final, as gpt_set_grad_hook (gpt.h) does for the
 * CPU engine, with the same layout offsets: after ln_f's backward, after
 * each layer's (from the last), and with 0 at the end (after the
 * encoder's; also when a backward at scale 0 adds nothing). The hook
 * runs on the calling thread when those kernels have been queued, not
 * run: the gradients [final_from, ...) will not be written by this
 * backward's later work, but the stream may not have written them yet,
 * so the hook must order what reads them after the engine's stream
 * (gpt_cuda_synchronize, or work queued on gpt_cuda_stream). It must not
 * write gradients below final_from, and of the gpt_cuda's functions it
 * may call only gpt_cuda_synchronize and the accessors at the end of
 * this header. NULL: none. The hook stays set until changed. */
void gpt_cuda_set_grad_hook(gpt_cuda *g,
                            void (*hook)(void *arg, size_t final_from),
                            void *arg);

/* ---- Pipeline stages (gpu/pipeline/pipeline.h), as gpt.h's ----
 * A pipeline-parallel rank runs layers [first, last): the embeddings
 * with the stage that has layer 0, the final norm, the head and the loss
 * with the stage that has the last layer; both families. The kernels and
 * their order are gpt_cuda_forward_train's and gpt_cuda_backward's, so a
 * stage adds the bits the whole model adds into its layers' gradients
 * (the tied embeddings excepted: the lookups' and the head's parts land
 * on two stages and are summed there).
 *
 * The residual stream between stages and its gradient are device
 * buffers of BF16 (B,T,C), not FP32: the engine keeps both in BF16 (its
 * residual stream and dresid), so the exchange carries the exact bits
 * the next layer reads in the whole model (a chained pipeline is bitwise
 * the one-GPU step), at half the bytes on the link; FP32 would add a
 * conversion each way and nothing else.
 *
 * The activations stay allocated for all n_layer layers (as made by
 * gpt_cuda_create), and so do the weights, gradients and optimizer state
 * unless the options shard them (shard_lo / shard_n, or pieces). */

/* Makes g's forwards run layers [first, last), 0 <= first < last <=
 * n_layer (0, n_layer: the whole model again). Forgets the last forward.
 * While a stage is set gpt_cuda_forward, _forward_train and _backward
 * refuse. A tensor shard's stage (gpt_cuda_tp) runs its layers' shards,
 * the group's collectives in them as in the whole model (every rank of
 * the group in the same stage). 0, or -1 with err (a range out of
 * bounds). */
int gpt_cuda_set_stage(gpt_cuda *g, int first, int last, char *err,
                       size_t errlen);
/* A trainer's forward of the stage (gpt_cuda_forward_train's, on the
 * last stage): inputs (B,T) host ids on the first stage (x NULL), else x
 * the device BF16 (B,T,C) stream that enters layer first (inputs NULL;
 * copied in stream order, so x may be reused once the stream gets past
 * this call); targets (host, B*T) on the last stage, whose mean loss
 * goes into *loss (synchronizing; NULL: read later with
 * gpt_cuda_last_loss), else NULL. 0, or -1 with err. */
int gpt_cuda_forward_stage(gpt_cuda *g, const uint32_t *inputs, const void *x,
                           const uint32_t *targets, int B, int T, float *loss,
                           char *err, size_t errlen);
/* Makes slot (0 <= slot < the options' slots) the current one: the
 * forwards and backwards after this keep and read its activations, and
 * gpt_cuda_last_loss, _logits, _stage_output read its pass; another
 * slot's forward is kept until that slot's next forward. 0, or -1 with
 * err. */
int gpt_cuda_set_slot(gpt_cuda *g, int slot, char *err, size_t errlen);
/* The stage's output of the last forward: the device BF16 (B,T,C)
 * stream after layer last - 1, written in stream order; NULL on the last
 * stage or without a forward. Valid until g's next forward. */
const void *gpt_cuda_stage_output(const gpt_cuda *g);
/* The backward of the last gpt_cuda_forward_stage: ADDS d(scale *
 * loss)/d(params) of the stage's layers, from the loss on the last stage
 * (dy NULL), else from dy (device BF16 (B,T,C), the gradient of the
 * stage's output, with the loss's scale already in it; copied in stream
 * order, scale unused). Once per forward. 0, or -1 with err (no forward
 * to go back through, dy given to the last stage or missing elsewhere). */
int gpt_cuda_backward_stage(gpt_cuda *g, const void *dy, float scale, char *err,
                            size_t errlen);
/* The gradient of the stage's input after its backward: device BF16
 * (B,T,C), written in stream order; NULL on the first stage. Valid until
 * g's next backward. */
const void *gpt_cuda_stage_input_grad(const gpt_cuda *g);

/* ---- Parameter groups (ZeRO stages 2-3), as gpt.h's for the CPU ----
 * The engine reads group grp's BF16 parameters and adds its FP32
 * gradients through two device pointers (the group's first element).
 * Without pieces or grad_shard (gpt_cuda_options) they point into the
 * gpt_cuda's own arrays and nothing needs setting; with pieces both (with
 * grad_shard the gradients') are NULL until set, and forward and
 * backward fail on a group whose pointers are not set when they reach
 * it. Borrowed; the memory is the caller's. */
void gpt_cuda_set_group_params(gpt_cuda *g, size_t grp, void *bf16);
void gpt_cuda_set_group_grads(gpt_cuda *g, size_t grp, float *grads);
/* hook(arg, event, group, next) as gpt.h's gpt_set_param_hook, in the
 * same order of groups and events: GPT_PARAMS_NEED before forward or
 * backward queues the kernels that read group's parameters (the hook
 * places them, and in backward the group's gradients too, zeroed, before
 * it returns), GPT_PARAMS_DONE after the last of them is queued. As with
 * the grad hook, queued is not run: a buffer handed over on NEED may be
 * reused after DONE only in stream order (gpt_cuda_synchronize first),
 * and data the hook puts there must be complete before it returns (a
 * collective waited for). A non-zero return stops the pass with -1 ("a
 * parameter hook failed"). The hook may call gpt_cuda_synchronize, the
 * two setters above and the accessors at the end of this header. NULL:
 * none. */
void gpt_cuda_set_param_hook(gpt_cuda *g, gpt_param_hook_fn hook, void *arg);

/* Stage 3's weights, or a tensor shard's (tp.n floats in its layout):
 * the shard's master weights (shard_n floats, in zero.h's stage-3 layout) from
 * or to host floats, and with opt non-NULL the optimizer state and t (of
 * shard_n floats per state array). Upload makes the shard's BF16 copy too. 0,
 * or -1 with err (also for a gpt_cuda without pieces or tp: gpt_cuda_upload /
 * _download move those). Synchronize. */
int gpt_cuda_upload_shard(gpt_cuda *g, const float *shard, optim *opt,
                          char *err, size_t errlen);
int gpt_cuda_download_shard(gpt_cuda *g, float *shard, optim *opt, char *err,
                            size_t errlen);

/* Multiplies every gradient by s (the train stage's fault injection). */
int gpt_cuda_scale_grads(gpt_cuda *g, float s, char *err, size_t errlen);

/* Gradients [at, at + n) of the held array (gpt_cuda_grads_ptr's) +=
 * src (device floats, n of them; read in stream order): a pipeline's
 * tied embeddings, whose two stages' parts are summed on one. 0, or -1
 * with err (a range past the array). */
int gpt_cuda_add_grads(gpt_cuda *g, size_t at, const float *src, size_t n,
                       char *err, size_t errlen);
/* dst += src (device floats, n of each, in g's stream order): the same
 * sum on gradients the caller holds (a pipeline stage's at ZeRO stage 3,
 * gpu/pipeline/pipeline_cuda.c). 0, or -1 with err. */
int gpt_cuda_add_floats(gpt_cuda *g, float *dst, const float *src, size_t n,
                        char *err, size_t errlen);

/* Global L2 norm of the gradients into *norm (synchronizes). If max_norm
 * > 0 and the norm is finite and above it, the next gpt_cuda_step uses
 * the gradients times max_norm / (norm + 1e-6), as optim_clip_grad_norm
 * scales them (the scale is fused into the update instead of a pass over
 * the gradients). */
int gpt_cuda_clip_grad_norm(gpt_cuda *g, double max_norm, double *norm,
                            char *err, size_t errlen);
/* The two halves of gpt_cuda_clip_grad_norm, for a gang whose norm is
 * a sum over ranks: the sum of squares of the gradients [lo, lo + n) of
 * the (padded) array into *ss (synchronizes), and the clip scale the
 * next gpt_cuda_step uses for a global norm. */
int gpt_cuda_grad_sumsq(gpt_cuda *g, size_t lo, size_t n, double *ss,
                        char *err, size_t errlen);
void gpt_cuda_set_clip(gpt_cuda *g, double norm, double max_norm);
/* One optimizer update at lr (t advances by 1), then the clip scale is
 * forgotten. */
int gpt_cuda_step(gpt_cuda *g, float lr, char *err, size_t errlen);
/* Zeroes the optimizer state and t (optim_reset). */
int gpt_cuda_optim_reset(gpt_cuda *g, char *err, size_t errlen);

/* FP32 master weights -> gpt_params(host) (host of the same config);
 * with opt non-NULL also the optimizer's state and t -> opt (of the same
 * kind and size). Synchronizes. */
int gpt_cuda_download(gpt_cuda *g, gpt *host, optim *opt, char *err,
                      size_t errlen);
/* The reverse: gpt_params(host) -> master weights and their BF16 copy;
 * with opt non-NULL, its state and t -> the GPU's. */
int gpt_cuda_upload(gpt_cuda *g, const gpt *host, optim *opt, char *err,
                    size_t errlen);
/* The FP32 gradients -> host floats (gpt_num_params of them; a tensor
 * shard's tp.n). */
int gpt_cuda_download_grads(gpt_cuda *g, float *out, char *err,
                            size_t errlen);

/* Waits for the work queued on the gpt_cuda's stream (a phase's end, for
 * host clocks around it). */
int gpt_cuda_synchronize(gpt_cuda *g, char *err, size_t errlen);

/* Device memory beside the engine's, on g's device, for a caller's own
 * buffers (a pipeline's messages, a ZeRO slice's gradient): bytes of
 * it, or NULL when the device has none left. The caller frees it with
 * gpt_cuda_free (NULL is a no-op). */
void *gpt_cuda_alloc(gpt_cuda *g, size_t bytes);
void gpt_cuda_free(void *buf);
/* dst = src (bytes of device memory), in g's stream order, complete on
 * return. 0, or -1 with err. */
int gpt_cuda_copy(gpt_cuda *g, void *dst, const void *src, size_t bytes,
                  char *err, size_t errlen);

/* Device bytes this gpt_cuda allocated at create (all of it but what
 * cuDNN's attention takes: gpt_cuda_attention). */
uint64_t gpt_cuda_allocated_bytes(const gpt_cuda *g);
/* Which attention the steps' micro-batch (o->B, o->T) runs on, for logs:
 * cuDNN's fused attention (the default where libcudnn.so.9 loads, the
 * run is not deterministic and cuDNN takes the shape: kernels.cuh's
 * kern_attention_prepare) or dagrun's own kernels, with the reason; and
 * the device bytes cuDNN's plans took beside gpt_cuda_allocated_bytes
 * (extra_bytes may be NULL). Other shapes run on dagrun's kernels. */
const char *gpt_cuda_attention(const gpt_cuda *g, uint64_t *extra_bytes);
/* Device memory in use by this process and everything else on the
 * device now (total - free, cudaMemGetInfo): includes the CUDA context
 * and cuBLASLt's own. 0, or -1 with err. */
int gpt_cuda_device_used(gpt_cuda *g, uint64_t *used, uint64_t *total,
                         char *err, size_t errlen);
/* The optimizer step count. */
uint64_t gpt_cuda_get_t(const gpt_cuda *g);

/* Device memory for a gang's collectives (gpu/zero/zero_cuda.c): the
 * FP32 gradients (padded floats; with grad_shard the shard's shard_n),
 * the BF16 parameters (padded elements of 2 bytes), the FP32 master
 * weights (shard_n floats, or the model's); with pieces (stage 3) all
 * three are the shard's (shard_n).
 * The gpt_cuda's own work on them runs on its stream: synchronize it
 * (gpt_cuda_synchronize) before a collective reads them, and let the
 * collective complete before the next call here. */
float *gpt_cuda_grads_ptr(gpt_cuda *g);
void *gpt_cuda_params_ptr(gpt_cuda *g);
float *gpt_cuda_master_ptr(gpt_cuda *g);
/* The gpt_cuda's stream (a cudaStream_t), for work that must come after
 * the engine's on its gradients in stream order (zero_cuda's packing of
 * a bucket). Valid until gpt_cuda_destroy. */
void *gpt_cuda_stream(gpt_cuda *g);

#ifdef __cplusplus
}
#endif

#endif /* DAGRUN_GPT_CUDA_H */
