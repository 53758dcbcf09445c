/*
 * pipeline: pipeline-parallel training of the engines' models (GPT-2
 * and Llama) over the comm layer's point to point, one stage per rank:
 * on the CPU engine (gpt.h's stage passes, host floats, MPI) or the CUDA
 * engine (gpt_cuda.h's, pipeline_options.cuda: device memory, the
 * stream and its gradient in BF16, NCCL; an MPI communicator beside it
 * for the scalars). One schedule code drives either through a table of
 * stage operations (pipeline_engine.h) chosen at create.
 *
 * The model's n_layer blocks are cut into P contiguous stages of
 * n_layer / P layers (P must divide n_layer: pipeline_check says so
 * with the numbers); stage s is rank s. The first stage also has the
 * embeddings (wte, wpe; a Llama's embed_tokens), the last the final
 * LayerNorm (a Llama's RMSNorm), the head and the loss. GPT-2's head is
 * tied to the embeddings (a Llama's may be), so the last stage keeps a copy of
 * group 0 (the embeddings) too, as Megatron-LM does: after a step's
 * backward the two copies' gradients are summed between the first and
 * the last rank and both apply the same update, so the copies stay the
 * same bits. An untied Llama's lm_head is the last stage's alone.
 *
 * A step trains m micro-batches of (B,T) (the step's batch, m x B
 * sequences, as one process with grad_accum m and batch_size B draws
 * it), scheduled by one of:
 *   1F1B   (the default, PipeDream-Flush / Megatron-LM): stage s runs
 *          P - s - 1 forwards, then one forward and one backward in turn,
 *          then the remaining backwards; at most P - s micro-batches'
 *          activations are kept on stage s.
 *   GPipe  all m forwards, then all m backwards: m micro-batches'
 *          activations kept on every stage (the simple reference).
 * Each micro-batch's residual stream (B,T,C) goes forward from stage s
 * to s + 1, and its gradient back, by comm_isend / comm_recv. The loss
 * scale 1/m is the last stage's, so the gradients are those of one
 * process with grad_accum m (and the same bits but for the order of
 * the sums of wte's two parts and of the clipping norm's partial sums).
 *
 * Ownership: each stage's optimizer state covers only its own
 * parameters (its layers, plus the embeddings on the first and last
 * stage); it updates only those, once per step after all micro-batches.
 * The gpt every rank passes keeps the full parameter array (this
 * increment does not shrink it): its other stages' parts are stale
 * until pipeline_gather brings them to rank 0. On the CUDA engine the
 * device holds the stage's parts alone (master weights, BF16 copy,
 * gradients, optimizer state: gpt_cuda_options' pieces) and one
 * activation slot per micro-batch in flight (gpt_cuda_set_slot); the
 * host gpt's are updated by pipeline_gather (rank 0) and read by
 * pipeline_create and pipeline_load.
 *
 * The bubble: each stage's idle time in a step is the step's time minus
 * the time in its own forwards and backwards (waiting for a neighbour,
 * and sending); pipeline_stats gives it as a fraction over all stages,
 * beside the schedule's ideal (P - 1) / (m + P - 1).
 *
 * Data parallel beside it (D x P ranks): the caller splits the gang
 * into D replicas of P stages (the communicator given to
 * pipeline_create, one replica's) and P stage groups of D ranks
 * (pipeline_options.dp); each replica trains its own rows of the global
 * batch, and the stage groups average the gradients after the
 * micro-batches. The clipping norm sums over one replica's stages: after
 * the average every replica holds the same gradient, so it is counted
 * once, not D times.
 *
 * ZeRO over the stage group (pipeline_options.zero_stage 1 or 2,
 * zslice.h), in either engine: each of its D ranks keeps the optimizer
 * state of 1/D of the stage's range (on the CUDA engine the FP32 master
 * weights too: gpt_cuda_options' master window), the tied embeddings'
 * two gradients are summed first (on the first stage, not sent back),
 * then the range's gradient is reduce-scattered into the ranks' slices
 * (over dp: NCCL on the CUDA engine), each updates its slice, and the
 * next collective call (pipeline_forward_backward, pipeline_gather)
 * all-gathers them (the CUDA engine its BF16 copies, in place) and
 * sends the first stage's embeddings to the last stage's tied copy
 * (which has no optimizer of its own). A gather brings the slices'
 * state (and the CUDA engine's master weights) to replica 0 over
 * dp_ctl; a load takes each rank's slice of the one-process state.
 * Stage 2 is stage 1 here: the stage's gradients are whole during the
 * micro-batches (the CPU engine's in the model's gradient array, which
 * the activation slots share; the CUDA engine's in its shard's), so
 * the full gradient is still held (pipeline_memory says so).
 *
 * Stage 3 (either engine): the parameters sharded too. Between steps
 * each rank of the stage group keeps its slice of the stage's range
 * alone, of the parameters and of their reduced gradient (and the
 * optimizer state's); the next collective call all-gathers the whole
 * stage's parameters into arrays
 * made for the step (the whole stage at once, not a layer at a time:
 * the schedule runs every layer of the stage for each micro-batch, in
 * and out of order with the others), the micro-batches run as at stage
 * 2, and after the reduce-scatter the arrays go. So between steps a
 * rank holds 1/D of its stage's parameters; inside the step as much as
 * stage 2 and the slice beside it (pipeline_memory's peak_params, no
 * better than stage 2's stage2_params). On the CUDA engine the slice is
 * the FP32 master weights, their BF16 copy and the reduced gradient
 * (pipeline_cuda.c: gpt_cuda's one allocation is the slice's), the
 * stage's BF16 parameters and FP32 gradients the arrays made per step.
 *
 * Not here (refused by the train stage): dropout. GPU ranks need
 * NCCL's point to point in comm (comm_send, comm_recv, comm_isend on
 * device buffers).
 *
 * Every function but pipeline_check and pipeline_destroy is collective:
 * every rank calls it, in the same order. They return 0, or -1 with err;
 * a failed exchange leaves the communicator unusable (abort the gang).
 * Threads: the caller's thread only.
 */
#ifndef DAGRUN_PIPELINE_H
#define DAGRUN_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "zero/zslice.h"

typedef enum pipeline_schedule {
  PIPELINE_1F1B = 0,
  PIPELINE_GPIPE = 1
} pipeline_schedule;

/* "1f1b", "gpipe", NULL: indexed by pipeline_schedule. */
extern const char *const pipeline_schedule_names[];

/* One op of a stage's schedule: the forward or backward of micro-batch
 * mb. */
typedef struct pipeline_op {
  int backward, mb;
} pipeline_op;

/* Stage s of P's 2 m ops for m micro-batches under sched (above), in
 * order, into ops (room for 2 m); returns how many micro-batches'
 * activations the stage keeps at most (its slots: micro-batch mb's in
 * slot mb % slots). The tensor-parallel stages (tensor.h) run the same
 * schedule. Any thread. */
int pipeline_schedule_ops(pipeline_schedule sched, int P, int s, int m,
                          pipeline_op *ops);

typedef struct pipeline_options {
  int micro; /* m: micro-batches a step, >= 1 */
  pipeline_schedule schedule;
  int B, T; /* a micro-batch */
  optim_config opt;
  gpt_recompute recompute; /* the stage models' (gpt_set_recompute) */
  gpt_autocast autocast;   /* and gpt_set_autocast */
  /* Data parallel beside the pipeline: the stage group, this stage's
   * ranks in every replica (borrowed; NULL or one rank: none). After a
   * step's micro-batches the stage's gradients and the loss are averaged
   * over it; each replica trains its own share of the global batch. */
  comm *dp;
  /* The engine: 0 the CPU engine (gpt.h, host floats); non-zero the CUDA
   * engine (gpt_cuda.h) on CUDA device `device`, with gpt_cuda_options'
   * deterministic. Its streams (BF16), gradients and exchanges are in
   * device memory: the communicator given to pipeline_create and dp
   * must take device buffers (NCCL's; on the emulator, whose device
   * memory is host memory, MPI's do too). */
  int cuda, device, deterministic;
  /* Host-memory communicators over the same ranks as pipeline_create's
   * and dp, for the scalars (the loss, the norm, the bubble) and the
   * gather (MPI beside NCCL); NULL: those two themselves (the CPU
   * engine's). */
  comm *ctl, *dp_ctl;
  /* ZeRO over dp: 0-3 (above), either engine; ignored without dp (or
   * with dp of one rank). */
  int zero_stage;
} pipeline_options;

/* Whether P stages fit cfg on world ranks: P >= 2, P divides n_layer
 * and world is a multiple of P (world / P data-parallel replicas). 0, or -1
 * with err naming the numbers. Any thread. */
int pipeline_check(const gpt_config *cfg, int P, int world, char *err,
                   size_t errlen);

typedef struct pipeline pipeline;

/* The stage of rank comm_rank(c) of comm_size(c) over model (borrowed,
 * the same weights on every rank; it must outlive the pipeline): its
 * activation slots (gpt models that share model's arrays), its
 * optimizer state (zero), its send buffers. */
int pipeline_create(comm *c, gpt *model, const pipeline_options *o,
                    pipeline **out, char *err, size_t errlen);
void pipeline_destroy(pipeline *p); /* NULL is a no-op */

/* This rank's stage and its layers [first, last). */
int pipeline_stage(const pipeline *p, int *first, int *last);

/* Zeroes the gradients and trains the step's m micro-batches: inputs
 * and targets (m,B,T), the same on every rank (the first stage reads
 * the inputs, the last the targets). *loss: the mean over the
 * micro-batches of the last stage's losses, on every rank. */
int pipeline_forward_backward(pipeline *p, const uint32_t *inputs,
                              const uint32_t *targets, double *loss, char *err,
                              size_t errlen);

/* The global L2 norm of the step's gradient over all stages (an
 * all-reduce of the stages' sums of squares; the tied embeddings
 * counted once), into *norm, and when max_norm > 0 and the norm is above
 * it every stage scales its gradients by max_norm / (norm + 1e-6), as
 * optim_clip_grad_norm does for one process. */
int pipeline_clip_grad_norm(pipeline *p, double max_norm, double *norm,
                            char *err, size_t errlen);

/* The update of this stage's parameters (with ZeRO: of its slices) at
 * lr (not collective). An engine's failure here (a CUDA error) is the
 * next pipeline_forward_backward's error. */
void pipeline_step(pipeline *p, float lr);

/* The last pipeline_forward_backward's account, the same on every rank. */
typedef struct pipeline_stats {
  double idle;    /* the stages' idle time over their step time, summed */
  double formula; /* (P - 1) / (m + P - 1) */
  double step_s;  /* the mean of the stages' step times */
  int slots;      /* micro-batches' activations this rank keeps */
} pipeline_stats;
void pipeline_get_stats(const pipeline *p, pipeline_stats *s);

/* The bytes this rank holds between steps (the model's whole parameter
 * and gradient arrays among them; on the CUDA engine the device's
 * alone; at zero_stage 3 the stage's arrays only while they are there,
 * which after a step they are not), and its gradients' most during a
 * step (zslice.h). Not collective. */
void pipeline_memory(const pipeline *p, zslice_memory *m);

/* Brings every stage's parameters into rank 0's model and, with
 * with_state (the same on every rank), their optimizer state and step
 * count into full (rank 0's optimizer over the whole model,
 * trainkit_make_optim's layout; NULL elsewhere): rank 0 can then
 * evaluate (without state), save and export the model as one
 * process's. */
int pipeline_gather(pipeline *p, int with_state, optim *full, char *err,
                    size_t errlen);

/* After every rank loaded the same whole checkpoint into model and
 * full (a one-process optimizer): this stage takes its part of full's
 * state and step count. */
int pipeline_load(pipeline *p, optim *full, char *err, size_t errlen);

/* What this stage trains and holds, in bytes (for the train stage's
 * memory report): params and grads the floats of its ranges (its own
 * parameters, and the last stage's tied copy of the embeddings), which
 * live in the model's arrays (the model's whole arrays are the
 * caller's to count), and with ZeRO the slices and the gather's array
 * of pipeline_memory; optim its ranges' optimizer state; acts its own
 * allocations for the activations: the slots' (after a first step),
 * the received stream and the send buffers; total their sum. On the
 * CUDA engine the device's (gpt_cuda_memory_estimate's figures for
 * what the stage allocated: params the master weights and the BF16
 * copy, acts with cuBLASLt's workspace; and the exchanges' buffers).
 * Not collective. */
void pipeline_memory_get(const pipeline *p, gpt_memory *out);

#endif /* DAGRUN_PIPELINE_H */
