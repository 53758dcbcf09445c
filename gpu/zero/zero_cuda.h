/*
 * zero_cuda: ZeRO data parallelism (zero.h) with each rank's model on its
 * GPU (gpu/cuda/gpt_cuda.h) and the gradients and parameters moved by
 * NCCL (comm.h's NCCL backend): stages 0, 1, 2 and 3.
 *
 * The host zero (zero_create over the host model, on the gang's MPI
 * communicator) stays the state of record, as the host model does for
 * one process's engine (stages/train/engine.h): it cuts the shards, and
 * its checkpoints (zero_save, zero_load, any world size and stage),
 * resume paths and memory formulas are used as they are. zero_cuda_pull
 * brings its host arrays up to date from the GPU before a save, and
 * zero_cuda_push sends them back after a load (stage 3: the host zero's
 * parameter shard, zero_param_shard, not the host model's parameters,
 * which stage 3 frees).
 *
 * On the GPU (gpt_cuda_options' shard fields):
 *   stage 0  every rank holds and updates everything; the gradients are
 *            all-reduced.
 *   stage 1  the FP32 master weights and the optimizer moments of the
 *            rank's slice [lo, lo + S) only; the gradients all-reduced,
 *            the rank updates its slice (and the slice's BF16 copy), then
 *            the BF16 parameters are all-gathered (2 bytes a parameter).
 *   stage 2  as stage 1, but the rank keeps the FP32 gradients of its
 *            slice alone (gpt_cuda_options' grad_shard), and receives
 *            only its slice's sum (half the traffic of stage 1's
 *            all-reduce). The engine's parameter hook gives each group
 *            (the embeddings, each layer, ln_f) a zeroed FP32 gradient
 *            buffer in backward, in turn from the same buffers as stage
 *            3's below, of the group's own length; once the group is
 *            final the grad hook reduces each part of it that a rank's
 *            slice [q*S, (q+1)*S) holds to rank q (comm_ireduce_sum,
 *            one to a few a group), into that rank's slice of gradients.
 *            So a rank holds 4S bytes of gradients and the buffers
 *            (group 0's, and ZERO_INFLIGHT + 1 of the largest layer's)
 *            instead of 4P.
 *   stage 3  the parameters sharded too, in zero.h's stage-3 layout (the
 *            rank's piece of every group: the embeddings, each layer,
 *            ln_f): the engine holds the shard alone (FP32 master
 *            weights, BF16 copy, moments and FP32 gradients:
 *            gpt_cuda_options' pieces). Its parameter hook
 *            (gpt_cuda_set_param_hook) all-gathers a group's BF16 pieces
 *            into one of two slots (each N pieces of the largest group)
 *            just before the engine queues the group's kernels, unless a
 *            slot still holds it this step (ln_f and the head, where
 *            forward ends and backward starts), and starts the next
 *            group's all-gather into the other slot, so that it moves
 *            while the group computes; a slot is written only after the
 *            engine's stream is done with it (gpt_cuda_synchronize). In
 *            backward the hook gives the group a zeroed FP32 gradient
 *            buffer (group 0's, final only at the end, its own; the
 *            others ZERO_INFLIGHT + 1 in turn), and the grad hook
 *            reduce-scatters it into the rank's piece of the shard's
 *            gradients once the group is final: all but the
 *            embeddings' during backward. zero_config's no_overlap: no
 *            prefetch, and each group's reduction (stage 2 too) waited
 *            for at once. bucket_floats is not used (stage 2 neither).
 *            A forward needs every rank's layers, so zero_cuda_loss (one
 *            rank's) is refused.
 * The gradients are averaged over ranks (backward scaled by 1/N) and
 * clipped to the global norm, as zero_step does; the loss is the mean
 * over ranks.
 *
 * At stages 0-1 the gradients are all-reduced in buckets (zero_config's
 * bucket_floats, zero_shape's bf and nbuckets): bucket b is the flat
 * range [b*bf, (b+1)*bf) of the gradient array, all-reduced in place.
 * The engine's grad hook (gpt_cuda_set_grad_hook: after ln_f, after
 * each layer, from the last) starts every bucket (stages 2-3: every
 * group) that has become final, so that its collective, on the NCCL
 * communicator's stream, runs while the engine's stream computes the
 * layers below; the buckets holding the embeddings (wte comes first in
 * the layout and is final only at the end) start after backward.
 * zero_config's no_overlap starts stages 0-1's buckets all after
 * backward. Ordering: the hook runs when the host has queued a layer's
 * kernels, not when they ran, so a collective waits for the engine's
 * stream (gpt_cuda_synchronize) before it is started, and every one is
 * waited for (comm_wait) before the norm reads the sums. At most
 * ZERO_INFLIGHT buckets (stage 2: COMM_MAX_INFLIGHT reduces) are in
 * flight: a new one waits for the oldest. Each element's sum is the one
 * a single collective over the whole array takes (on the emulated NCCL
 * bitwise; real NCCL may order a sum over more than two ranks
 * differently for another message size or collective). The norm, the
 * update and the parameters' all-gather come after backward, without
 * overlap.
 *
 * GPU memory: the engine's (zero_cuda_memory_get), at stages 2-3 the
 * gradient buffers (counted as gradients), at stage 3 the two slots (as
 * parameters); all allocated at create.
 *
 * Every build has these functions; one without CUDA and NCCL (or with
 * -DDAGRUN_CUDA=OFF) says so from zero_cuda_available and
 * zero_cuda_create, so that callers need no conditional code.
 *
 * Collective unless said otherwise: every rank calls in the same order.
 * Functions return 0, or -1 with a message in err; a -1 from a
 * collective leaves the gang out of step (comm_abort).
 */
#ifndef DAGRUN_ZERO_CUDA_H
#define DAGRUN_ZERO_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "zero.h"

typedef struct zero_cuda zero_cuda;

/* The GPU engine's settings (gpu/cuda/gpt_cuda.h's gpt_cuda_options). */
typedef struct zero_cuda_options {
  int B, T;          /* the micro-batch */
  optim_config opt;  /* the optimizer */
  int recompute;     /* gpt_recompute: 0 none, 1 gelu, 2 block */
  int deterministic; /* fixed-order reductions */
} zero_cuda_options;

/* Non-zero when this build has GPU ranks (CUDA and NCCL) and this process
 * sees a usable GPU; else 0 and why in why. Not collective. */
int zero_cuda_available(char *why, size_t whylen);

/* The GPU side of z (stage 0-3, made by zero_create over model with the
 * communicator ctl: MPI or self, host memory). nccl is the gang's NCCL
 * communicator (the same ranks as ctl); the GPU is its device
 * (comm_device). The model's parameters and z's optimizer state are
 * uploaded. model, z, ctl and nccl are borrowed (nccl only by the
 * collective calls: step and gather; it may go before the rest, e.g.
 * zero_cuda_loss). Not collective (nothing is exchanged). An out-of-memory
 * names what to change (gpt_cuda's). */
int zero_cuda_create(zero *z, gpt *model, comm *ctl, comm *nccl,
                     const zero_cuda_options *o, zero_cuda **out, char *err,
                     size_t errlen);
void zero_cuda_destroy(zero_cuda *zc); /* NULL is a no-op */

/* zero_step on the GPUs: this rank's micro-batch (B,T) forward and
 * backward, the gradients averaged (in buckets, overlapped with
 * backward: above), clipped to the global norm max_norm (0: no
 * clipping), one update at lr, the parameters made whole. res as
 * zero_step's; buckets and buckets_early count stages 0-1's all-reduces
 * too, and t_backward leaves out the time the hook spent in comm calls. */
int zero_cuda_step(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float lr,
                   double max_norm, zero_step_result *res, char *err,
                   size_t errlen);
/* zero_cuda_step over accum micro-batches (inputs, targets: accum x (B,T)
 * one after the other), the gradients added up on the GPU and reduced
 * once, from the last micro-batch's backward, as zero_step_accum's stages
 * 0-1; the loss their mean. Stages 2-3 (whose gradient buffers are
 * reduced group by group as backward ends) take accum 1 only: -1 saying
 * so. */
int zero_cuda_step_accum(zero_cuda *zc, const uint32_t *inputs,
                         const uint32_t *targets, int B, int T, int accum,
                         float lr, double max_norm, zero_step_result *res,
                         char *err, size_t errlen);

/* The GPU's master weights of the rank's part and its optimizer state
 * (and step count) into the host model's parameters and zero_optim(z):
 * what zero_save writes. Not collective. */
int zero_cuda_pull(zero_cuda *zc, char *err, size_t errlen);
/* The reverse, after zero_load or zero_set_optim_state (the host model
 * holds every parameter then). Not collective. */
int zero_cuda_push(zero_cuda *zc, char *err, size_t errlen);

/* Every parameter's FP32 master weight into the host model's parameters
 * on every rank (stages 1-2 pull the rank's slice into its place there
 * and all-gather the slices over ctl, in host memory; stage 3 pulls the
 * shard and has the host zero gather it, over ctl, into a parameter
 * array it gives the host model). */
int zero_cuda_gather_params(zero_cuda *zc, char *err, size_t errlen);

/* The mean loss of one batch (inputs, targets: B*T host ids) on this
 * rank's GPU, no backward (validation, on one rank). Not collective.
 * Stages 0-2 only: at stage 3, -1 saying why. */
int zero_cuda_loss(zero_cuda *zc, const uint32_t *inputs,
                   const uint32_t *targets, int B, int T, float *loss,
                   char *err, size_t errlen);

/* The GPU bytes the rank holds for parameters (the master weights and
 * the BF16 copy; stage 3 its slots), gradients (stages 2-3 their
 * buffers) and optimizer state (comm: 0, no send buffers; all allocated
 * at create: peak = held), beside zero_memory_get(z)'s
 * formulas (f_mixed is the one for mixed precision; the others are the
 * FP32 host engine's); activations in acts. Not collective. */
void zero_cuda_memory_get(const zero_cuda *zc, zero_memory *out,
                          uint64_t *acts);

/* The GPU's one-line description ("NVIDIA H100 ..., 132 SMs, 79.1
 * GiB"). */
const char *zero_cuda_describe(const zero_cuda *zc);

#endif /* DAGRUN_ZERO_CUDA_H */
