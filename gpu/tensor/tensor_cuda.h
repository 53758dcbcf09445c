/*
 * tensor_cuda: tensor-parallel training of a GPT-2 or a Llama on GPU
 * ranks, the
 * CUDA engine's version of tensor.h: a tensor group of T GPUs over an
 * NCCL communicator, each rank a gpt_cuda in its tensor-shard mode
 * (gpt_cuda.h's gpt_cuda_tp).
 *
 * The split, the passes' collectives and the loss are tensor.h's
 * (Megatron-LM's columns and rows, the vocabulary-parallel lookup and
 * cross-entropy that never gathers the logits, the LayerNorms and the
 * row-split products' biases replicated), run by gpt_cuda's own kernels
 * on the local widths; this module gives them the group: the shard
 * layout is tensor.h's tensor_layout (so a checkpoint is the same model
 * whichever engine wrote it), and the collectives gpt_cuda calls between
 * its kernels are comm_allreduce_sum and comm_allgather over the group
 * (device buffers, NCCL). After a step's micro-batches, rank 0's
 * replicated gradients are broadcast to the group, as tensor.c does (an
 * all-reduce need not give every rank the same bits), and counted once
 * in the clipping norm.
 *
 * Numerics: BF16 compute like one GPU's, with the row-split products'
 * partial outputs rounded to BF16 before they are summed (in FP32, then
 * rounded once more) and the softmax's denominator summed in another
 * order: the losses match one GPU's to BF16 rounding, not to the bit.
 *
 * Data parallel beside the group (tensor_cuda_options.dp: the D ranks
 * that hold the same shard in the gang's D replicas, over NCCL): the
 * gradients' mean over them before the replicated broadcast, as
 * tensor.c's dp_mean; the loss is the replicas' mean. With zero_stage 1
 * or 2 ZeRO-1 runs over dp (zslice.h's slices of the shard's floats):
 * each rank keeps the FP32 master weights and optimizer state of its
 * slice alone on its device (gpt_cuda_options' shard_lo / shard_n in the
 * shard's layout), the gradients are reduce-scattered into the slices,
 * each rank updates its slice and its BF16 copy, and the BF16 slices are
 * all-gathered before the next forward (2 bytes a parameter). At
 * zero_stage 2 the engine's gradient array is the slice's too
 * (gpt_cuda_options.grad_shard): the passes add into a whole gradient
 * array made for the step (zslice_cuda.h's zslice_whole), which the
 * reduce-scatter empties straight into the slice's and which is then
 * freed, so between steps a rank holds its slice's gradient alone. At
 * zero_stage 3 the parameters are sliced as well:
 * the engine is made over the slice alone (its master weights, BF16
 * copy, gradient and optimizer state S floats each; gpt_cuda.h's
 * ZeRO-3 piece), and the step's first call all-gathers the BF16 slices
 * into a whole parameter array made for it beside the whole gradients,
 * both freed after the reduce-scatter: between steps 10 bytes a float
 * of the slice and its optimizer state, in the step zero_stage 2's
 * (tensor_cuda_memory). The whole part at once, not a layer's group at
 * a time as tensor.c does: gpt_cuda's passes read the part's weights
 * through one pointer. A checkpoint's weights and state are the slices
 * gathered over dp_ctl (MPI, host memory), then replica 0's group's
 * shards to rank 0.
 *
 * Pipeline stages beside the group (tensor_cuda_options.pp: the P ranks
 * that hold the same shard in the replica's P stages, over NCCL): each
 * rank keeps only its stage's part of its shard (tensor_stage.h: its
 * layers, the embeddings on the first stage, the final norm and the
 * head on the last; the weights, gradients, optimizer state and BF16
 * copy on the device are the part's) and trains those layers
 * (gpt_cuda_set_stage), one activation slot per micro-batch in flight,
 * the micro-batches in the schedule's order (pipeline.h), the BF16
 * stream and its gradient sent between neighbours (pipestream.h). A
 * tied head's embedding is on the first and the last stage: their
 * gradients are summed over pp after the micro-batches, both copies
 * take the same update, and the clipping norm counts it once (the
 * first's). The loss is the last stage's. A checkpoint's gather adds
 * every stage's part into the first stage's shard over pp_ctl (MPI),
 * then goes to rank 0 as without stages. The engine's activation slots
 * are the stage's layers' (gpt_cuda_options.layers_first / _last).
 *
 * With stages too (T x P x D) everything above is of the rank's part of
 * its shard (zs and the whole arrays of the part's floats; the tied
 * embedding's gradient summed over pp inside the whole array).
 *
 * Not here: recompute (the engine runs without); with one replica any
 * zero_stage is 0 (nothing to shard over, as tensor_create has it); a
 * shape tensor_check or pipeline_check refuses is refused by
 * tensor_cuda_create with its message.
 *
 * tensor_cuda_forward_backward and _clip_grad_norm are collective over
 * the group and, with dp or pp, over the replicas and the stages; _gather over
 * the group, over pp_ctl with stages and over dp_ctl with ZeRO; _create, _step,
 * _load, _sizes, _slots, _memory and _destroy are not. 0, or -1 with err; a
 * failed collective leaves the communicator unusable (abort the gang). The
 * caller's thread only.
 */
#ifndef DAGRUN_TENSOR_CUDA_H
#define DAGRUN_TENSOR_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "pipeline/pipeline.h"
#include "zero/zslice.h"

typedef struct tensor_cuda_options {
  int micro; /* micro-batches a step (grad_accum), >= 1 */
  int B, T;  /* a micro-batch */
  optim_config opt;
  int deterministic; /* gpt_cuda_options.deterministic */
  /* The replicas of this shard (NULL, or one rank: none): dp over NCCL
   * (the gradients), dp_ctl the same ranks in the same order over MPI (a
   * checkpoint's gather, in host memory); zero_stage over them, 0-3. */
  comm *dp, *dp_ctl;
  int zero_stage;
  /* The shard's stages (NULL, or one rank: none), over NCCL, and their
   * schedule. */
  comm *pp, *pp_ctl; /* pp_ctl: the same over MPI (a gather's parts) */
  pipeline_schedule schedule;
} tensor_cuda_options;

typedef struct tensor_cuda tensor_cuda;

/* Rank comm_rank(c) of the tensor group c (an NCCL communicator of
 * comm_size(c) GPU ranks, on its device comm_device(c)): its shards of
 * model's weights (the same on every rank; only read), zero optimizer
 * state. */
int tensor_cuda_create(comm *c, const gpt *model, const tensor_cuda_options *o,
                       tensor_cuda **out, char *err, size_t errlen);
void tensor_cuda_destroy(tensor_cuda *t); /* NULL is a no-op */

/* Floats of this rank's shards and of the whole model. */
void tensor_cuda_sizes(const tensor_cuda *t, size_t *local, size_t *full);
/* The micro-batches whose activations a stage keeps at most (1 without
 * stages). */
int tensor_cuda_slots(const tensor_cuda *t);

/* This rank's device bytes in a step at most into part (what
 * gpt_cuda_create allocated, by its estimate, ZeRO-1's slice of the
 * gradient, and at zero_stage 2-3 the whole arrays made for the step);
 * into held zslice.h's figures: what the device holds now (between
 * steps at zero_stage 2-3 the slice's alone), the step's most and at
 * zero_stage 3 zero_stage 2's most for the same layout. */
void tensor_cuda_memory(const tensor_cuda *t, const gpt_config *cfg,
                        gpt_memory *part, zslice_memory *held);

/* tensor_forward_backward's contract: the gradients zeroed, the m
 * micro-batches (inputs and targets (m,B,T), the same on every rank)
 * trained, *loss their mean (rank 0's, on every rank). */
int tensor_cuda_forward_backward(tensor_cuda *t, const uint32_t *inputs,
                                 const uint32_t *targets, double *loss,
                                 char *err, size_t errlen);
/* tensor_clip_grad_norm's. */
int tensor_cuda_clip_grad_norm(tensor_cuda *t, double max_norm, double *norm,
                               char *err, size_t errlen);
/* The update at lr (not collective). 0, or -1 with err. */
int tensor_cuda_step(tensor_cuda *t, float lr, char *err, size_t errlen);

/* tensor_gather's: every rank's shards into rank 0's model (and with
 * with_state their optimizer state and step count into full, a
 * one-process optimizer over the whole model; NULL elsewhere). */
int tensor_cuda_gather(tensor_cuda *t, gpt *model, int with_state, optim *full,
                       char *err, size_t errlen);
/* tensor_load's: after every rank loaded the same whole checkpoint into
 * model and full, this rank takes its shards of both (not collective). */
int tensor_cuda_load(tensor_cuda *t, const gpt *model, optim *full, char *err,
                     size_t errlen);

#endif /* DAGRUN_TENSOR_CUDA_H */
