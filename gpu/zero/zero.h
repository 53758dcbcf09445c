/*
 * zero: data-parallel training of the GPT engine (gpt.h) over the comm
 * layer (comm.h), with ZeRO's sharding of optimizer state (stage 1),
 * gradients (stage 2) and parameters (stage 3); stage 0 is plain data
 * parallelism.
 *
 * Every rank holds a gpt of the same configuration and the same initial
 * weights (gpt_init with the same seed) and runs its own micro-batch; the
 * step's gradient is the mean over ranks, so N ranks of micro-batch B
 * train exactly as one rank of micro-batch N*B.
 *
 * Shards. With P = gpt_num_params and N ranks, stages 1-2 cut the flat
 * parameter (and gradient) vector in N slices of S = ceil(P/N): rank r
 * owns [r*S, (r+1)*S), padded with zeros past P so that every rank has
 * S. Stage 3 cuts each of the engine's parameter groups (gpt.h: the
 * embeddings, each layer, ln_f) in N pieces of S_g = ceil(n_g/N): rank r
 * owns piece r of every group, and its shard is those pieces one after
 * the other (S = the sum of the S_g). So one all-gather of S_g floats
 * per rank makes a group whole, and one reduce-scatter of its gradient
 * leaves each rank its piece: the same equal-slice collectives as the
 * other stages, per layer.
 *   stage 0  all-reduce of the gradients; every rank updates everything.
 *            The gradients go in buckets of bucket_floats (bucket b is
 *            the flat range [b*bf, (b+1)*bf)), each all-reduced in place
 *            as soon as the engine's grad hook (gpt_set_grad_hook) says
 *            it is final, while backward goes on; the buckets holding
 *            the embeddings (first in the layout, final last) go after
 *            backward.
 *   stage 1  as stage 0, but optimizer state for the shard only; each
 *            rank updates its shard; all-gather of parameters.
 *   stage 2  the gradients are reduced to the ranks that own them, a
 *            group (gpt.h: the embeddings, each layer, ln_f) at a time,
 *            while backward goes on: the engine's parameter hook
 *            (gpt_set_param_hook) gives each group's gradient a buffer
 *            of its own in backward (n_g floats, zeroed), and when the
 *            engine says it is final (gpt_set_grad_hook: after each
 *            layer, ln_f first, the embeddings last) each part of it
 *            that lies in rank q's slice is reduced to rank q
 *            (comm_ireduce_sum) into its gradient shard: the bytes of a
 *            reduce-scatter. The buffer is freed when its last part is
 *            done (at most ZERO_INFLIGHT groups in flight). So a rank
 *            holds its gradient shard and, during backward, the
 *            embeddings' gradient plus a few layers', never the full
 *            gradient. bucket_floats is not used: a group is a bucket.
 *   stage 3  the parameters are sharded too, and gathered per layer:
 *            the engine's parameter hook (gpt_set_param_hook) gathers a
 *            group into a buffer of its own just before forward or
 *            backward uses it, and frees it right after (the tied head,
 *            group 0, is kept from the end of forward to the start of
 *            backward, which uses it next). With overlap on, the next
 *            group's all-gather (comm_iallgather) is started when a
 *            group is taken into use, so it moves while that one
 *            computes. The gradients go as stage 2's, each group's in
 *            a buffer of N*S_g floats that one reduce-scatter leaves
 *            each rank its piece of.
 *            Between steps a rank holds only its shards; during a step,
 *            about two groups' parameters at once (the one in use and
 *            the next; zero_memory's f_peak_params says exactly) and the
 *            embeddings' gradient plus a few layers'. Nothing is kept
 *            resident beyond that: the embeddings are gathered for the
 *            lookup and again for the head.
 * Gradient clipping uses the global norm (shard sums of squares summed
 * over ranks), so every stage clips identically.
 * Gradient accumulation (zero_step_accum): stages 0-1 add every
 * micro-batch's gradient into the full local gradient and reduce it
 * once, from the last micro-batch's backward; stages 2-3 keep no full
 * gradient, so they reduce each micro-batch's groups as above (one
 * reduce-scatter's bytes per micro-batch, not per step) and add the
 * result into the gradient shard, through a spare shard of S floats
 * held during the step.
 *
 * Threads: the thread that owns the comm (comm.h: one at a time) calls
 * every function; all but zero_memory_get are collective: every rank
 * calls them in the same order. A -1 from a collective leaves the gang
 * out of step: the caller aborts it (comm_abort).
 */
#ifndef DAGRUN_ZERO_H
#define DAGRUN_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"

typedef struct zero_config {
  int stage;            /* 0, 1, 2 or 3 */
  size_t bucket_floats; /* stages 0-1: floats in a gradient bucket;
                           0: 1<<20 */
  int no_overlap;       /* no communication beside compute: stages 0-1's
                           buckets all started after backward, stages
                           2-3's group reductions each waited for as
                           soon as it is started, and at stage 3 each
                           group gathered only when it is needed (no
                           prefetch) */
} zero_config;

/* Groups' gradient reductions (stages 2-3) and the GPU ranks' buckets
 * in flight at once: double buffering. */
#define ZERO_INFLIGHT 2

typedef struct zero zero;

/* Takes over model (borrowed: it must outlive the zero; its parameters
 * must be the same on every rank) and makes the optimizer for this rank's
 * part. Stage 3 frees the model's full parameter array, keeping the
 * shard; stages 2-3 free its gradient array. Collective. 0 or -1 with err. */
int zero_create(const zero_config *zc, gpt *model, const optim_config *oc,
                comm *c, zero **out, char *err, size_t errlen);
void zero_destroy(zero *z); /* NULL is a no-op; not collective */

typedef struct zero_step_result {
  float loss;  /* this step's loss, mean over ranks (before the update) */
  double norm; /* the global gradient norm before clipping */
  int buckets, buckets_early; /* the buckets (stages 0-1) or groups
                                 (stages 2-3) whose gradients were
                                 reduced, and those started from the
                                 backward hook, before backward was
                                 over */
  /* Where the step's time went, in seconds, adding up to zero_step's
   * wall time: forward and backward computing, the comm calls the rank
   * spent waiting in (or starting) that compute did not hide (the hooks'
   * waits inside forward and backward included, the async transfers that
   * went on meanwhile not), and the rest (clipping, the update,
   * zeroing). */
  double t_forward, t_backward, t_comm, t_optimizer;
  /* What the step's lr was multiplied by (zero_update_factor): 1 as a
   * rule, 0 when the update was skipped. */
  double lr_factor;
} zero_step_result;

/* The update's guard: called on every rank inside zero_step (and
 * zero_cuda_step) once the step's loss (the mean over ranks) and global
 * gradient norm are known, before any weight moves. It returns the
 * factor the step's lr is multiplied by, 0 for no update this step (the
 * train stage's loss-spike guard: skip, lower_lr). The factor rank 0's
 * guard returns is the one every rank applies (a broadcast: the ranks'
 * own views of the loss may differ in the last bit). NULL: none. */
typedef double (*zero_guard_fn)(void *arg, float loss, double norm);
void zero_set_guard(zero *z, zero_guard_fn fn, void *arg);
/* The factor a step applies: the guard's (1 without one), and 0 whatever
 * it says when the loss or the norm is not finite, so that a NaN or an
 * overflow never reaches the weights (as in one process's training);
 * with a guard, rank 0's factor, which every rank receives. Collective
 * with a guard. 0, or -1 with err. */
int zero_update_factor(zero *z, float loss, double norm, double *factor,
                       char *err, size_t errlen);

/* zero_step_accum over one micro-batch. */
int zero_step(zero *z, const uint32_t *inputs, const uint32_t *targets, int B,
              int T, float lr, double max_norm, zero_step_result *res,
              char *err, size_t errlen);
/* One training step: forward and backward of this rank's accum
 * micro-batches (accum >= 1), inputs/targets holding accum x (B,T) one
 * after the other, gradients averaged over ranks and micro-batches (so
 * N ranks of accum micro-batches of B train as one rank of one
 * micro-batch of N x accum x B), clipped to the
 * global norm max_norm (0: no clipping), one optimizer update at lr times
 * zero_update_factor's factor (none when it is 0: the weights, the
 * optimizer state and its step count stay as they were), the parameters
 * made whole again (stages 1-2). Collective. */
int zero_step_accum(zero *z, const uint32_t *inputs, const uint32_t *targets,
                    int B, int T, int accum, float lr, double max_norm,
                    zero_step_result *res, char *err, size_t errlen);

/* Per-rank bytes: what the rank holds between steps and the most it held
 * during a step, next to ZeRO's formulas with Psi = P parameters. */
typedef struct zero_memory {
  int stage, world;
  uint64_t n_params;                /* Psi */
  uint64_t params, grads, optim;    /* held now (after a step) */
  uint64_t peak_params, peak_grads; /* most held during the last step */
  /* The engine's activations, backward scratch and id buffers (gpt.h's
   * gpt_allocated_bytes less the parameter and gradient arrays): held
   * now (kept between steps for the next) and the most during the last
   * step. */
  uint64_t acts, peak_acts;
  /* fp32 training: params 4Psi, grads 4Psi, optimizer 4Psi per state
   * float (AdamW 8Psi), each divided by N where the stage shards it. */
  uint64_t f_params, f_grads, f_optim;
  /* The mixed-precision Adam formula, for reference: 16Psi,
   * 4Psi + 12Psi/N, 2Psi + 14Psi/N, 16Psi/N. */
  uint64_t f_mixed;
  /* The most parameter bytes held during a step, by the formula: stage 3
   * the shard and the most gathered groups at once (zero.c's
   * peak_groups: the group in use and the next, prefetched), stages 0-2
   * f_params. Compare peak_params. */
  uint64_t f_peak_params;
  /* The most gradient bytes held during a step, by the formula: stages
   * 2-3 the shard, the embeddings' gradient and the few layers' whose
   * reductions may be in flight at once (zero.c's peak_grad_groups),
   * stages 0-1 f_grads. Compare peak_grads. */
  uint64_t f_peak_grads;
} zero_memory;
void zero_memory_get(const zero *z, zero_memory *out);

/* The full parameters (n_params floats) into out on every rank (stage 3
 * gathers them). Collective. */
int zero_gather_params(zero *z, float *out, char *err, size_t errlen);

/* Sharded checkpoint under parent/step-<step>/ (ckpt.h: built under a
 * temporary name, fsynced, renamed): one safetensors file per rank,
 * zero-rank-<r>.safetensors, with "params" (n) and "optim" (k,n) (k state
 * floats per parameter) for the flat ranges the rank owns, one after the
 * other: at stages 1-2 its slice [r*S, min((r+1)*S, P)), at stage 3 its
 * piece of every group, at stage 0 everything (every rank writes the
 * same). ckpt's manifest.json (sha256 of every file) holds in its state
 * the world size, stage, P, S, optimizer, step count and each file's
 * "ranges" ([[begin, end], ...], flat; checkpoints made before stage 3
 * was per layer say "begin" and "end", and load too). Collective. */
int zero_save(zero *z, const char *parent, int64_t step, char *err,
              size_t errlen);
/* Loads a checkpoint directory written by zero_save with any world size
 * and stage: the shards are re-cut for this gang's size and stage (each
 * rank reads the intersection of the saved ranges with its own). The
 * model configuration and optimizer kind must match. *step gets its step.
 * Collective. */
int zero_load(zero *z, const char *dir, int64_t *step, char *err,
              size_t errlen);

/* The rank's part as zero_create cut it, for a device engine that
 * trains the same part (gpu/zero/zero_cuda.h): stages 1-2 own the flat
 * range [lo, lo + S) (padded: N*S floats cover the model), stage 0 all
 * of it (lo 0, S = P), stage 3 a piece of every group. */
typedef struct zero_shape {
  int stage, world, rank;
  size_t n_params, lo, S;
  /* Stages 0-1: the gradient's buckets, as zero_config's bucket_floats
   * and no_overlap ask: bucket b is the flat range [b*bf, min((b+1)*bf,
   * n_params)). Stages 2-3: 0 (a group is a bucket). */
  size_t bf, nbuckets;
  int no_overlap;
} zero_shape;
void zero_shape_get(const zero *z, zero_shape *out);
/* Bucket b's lowest gradient float is at flat offset b*bf: when the
 * engine says the gradient is final from final_from on
 * (gpt_set_grad_hook), buckets [first, nbuckets) are all final, where
 * first is what this returns (0 when nbuckets is 0). Any thread. */
size_t zero_bucket_first_final(size_t bf, size_t nbuckets, size_t final_from);
/* Stage 3 (NULL or nothing below it): the rank's parameter shard, S
 * floats in the layout above (what zero_save writes and zero_load
 * reads), and this rank's piece of group g (gpt.h's groups): the flat
 * range [flat, flat + n) of the model at offset local of the shard,
 * followed by S - n floats of padding there, S each rank's piece size
 * (N*S floats make the group whole, padding last). For a device engine
 * that trains the shard (zero_cuda.h). */
typedef struct zero_piece {
  size_t flat, n, local, S;
} zero_piece;
float *zero_param_shard(zero *z);
size_t zero_group_count(const zero *z); /* 0 below stage 3 */
void zero_group_piece(const zero *z, size_t g, zero_piece *out);
/* The rank's optimizer on the host: over S floats at stages 1-3, P at
 * stage 0 (its state is what zero_save writes and zero_load reads). The
 * parameters zero_save writes at stages 0-2 are the model's
 * (gpt_params), at [lo, lo + S) of them. */
optim *zero_optim(zero *z);

/* Between one process and a gang. A one-process run keeps the whole
 * model and an optimizer over all P parameters in layout order (its
 * state k arrays of P floats: trainkit's optimizer); these move that
 * state into and out of the sharded form. */

/* 1 if dir's manifest is zero_save's (its state has "zero"), else 0
 * (also when the manifest cannot be read: the loader that follows says
 * why). Reads one file; any thread. */
int zero_is_sharded(const char *dir);
/* Reads the sharded checkpoint dir (any world size and stage) whole:
 * the weights into model's parameter array, the optimizer state and step
 * count into opt (of that kind, over all of model's parameters, as
 * above); *step gets the checkpoint's step. No comm, not collective. 0,
 * or -1 with err (a damaged file, another model or optimizer). */
int zero_read_whole(const char *dir, gpt *model, optim *opt, optim_kind kind,
                    int64_t *step, char *err, size_t errlen);
/* This rank's optimizer state taken from a whole-model optimizer's state
 * (k arrays of P floats, as above) and step count t; the parameters are
 * those zero_create took from the model. For a gang resuming one
 * process's checkpoint: load it into the model and an optimizer first,
 * then zero_create, then this. Not collective. */
void zero_set_optim_state(zero *z, const float *state, uint64_t t);

#endif /* DAGRUN_ZERO_H */
