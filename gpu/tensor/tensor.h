/*
 * tensor: tensor-parallel training of the CPU engine's models over the
 * comm layer (MPI), Megatron-LM's scheme, one shard per rank of a tensor
 * group of T ranks.
 *
 * The split (rank r of T; C the width, NH the heads, Vp the padded
 * vocabulary, all divided by T):
 *   attn.c_attn   (C,3C) by columns: rank r has heads [r NH/T, (r+1)
 *                 NH/T) of q, k and v, (C,3C/T) and its bias (3C/T)
 *   attn.c_proj   (C,C) by rows: the rows of its heads, (C/T,C)
 *   mlp.c_fc      (C,4C) by columns, (C,4C/T) and its bias (4C/T)
 *   mlp.c_proj    (4C,C) by rows, (4C/T,C)
 *   wte           (Vp,C) by rows, the vocabulary ids [r Vp/T, (r+1)
 *                 Vp/T): the lookup and the tied head
 *   wpe, the LayerNorms and the row-split products' biases: replicated.
 * A block's forward: LayerNorm (replicated input), the column-split
 * product and attention over the rank's heads (or GELU) on its own
 * columns, the row-split product into a partial (B,T,C), one all-reduce
 * of it (Megatron's g), then the bias, once, and the residual. Its
 * backward: the row-split product's input gradient needs no exchange
 * (the output gradient is the same on every rank), the column-split
 * product's input gradient is a partial (B,T,C) summed by one all-reduce
 * (Megatron's f). So two all-reduces of (B,T,C) a block in each
 * direction (attention and MLP), one for the lookup (each rank looks up
 * its own ids, zeros elsewhere) and one for the head's input gradient.
 *
 * A Llama (nn.Linear's (out,in) weights): q_proj, k_proj, v_proj by
 * their rows (n_head / T query heads, n_kv_head / T key/value heads,
 * so a rank's query heads read its own key/value heads), RoPE on the
 * rank's heads; gate_proj and up_proj by rows (intermediate_size / T
 * SwiGLU columns); o_proj and down_proj by columns (the row-split
 * products, no bias); the RMSNorms replicated; embed_tokens and an
 * untied lm_head by vocabulary rows, as wte.
 *
 * The loss never gathers the logits: each rank has (B,T,Vp/T) of them;
 * the row maxima are all-gathered (T x B x T floats) and their maximum
 * taken, then the sums of exp(logit - max) and the target's logit
 * (zero on the ranks without it) all-reduced; the loss and the
 * softmax's gradient follow on each rank for its own columns.
 *
 * The replicated tensors get the same gradient on every rank (their
 * inputs and output gradients are the all-reduced, replicated ones);
 * rank 0's is broadcast to the group once a step all the same, so that
 * the copies cannot drift apart through an all-reduce that gives ranks
 * different bits (MPI does not promise the same sum everywhere). They
 * are counted once in the clipping norm.
 *
 * The sums are one process's in another order (a row-split product is
 * T partial products added, the softmax's denominator T partial sums),
 * so the losses match one process's to float rounding, not bit for bit.
 *
 * Data parallel beside it (D x T ranks): the caller splits the gang
 * into D replicas of T ranks (the communicator given to tensor_create)
 * and T shard groups of D ranks (tensor_options.dp); each replica trains
 * its own rows of the global batch, and after a step's micro-batches
 * every shard's gradients and the loss are averaged over its group.
 * ZeRO over that group (tensor_options.zero_stage, zslice.h): at stage
 * 1 each of the D ranks keeps the optimizer state of 1/D of the shards'
 * floats (its slice), the gradients are reduce-scattered into the
 * slices, each rank updates its slice and the parameters are
 * all-gathered (at the next collective call: tensor_forward_backward or
 * tensor_gather); stage 2 also frees the shards' full gradient after
 * the reduction (the rank keeps its slice's between steps, and
 * allocates the full one again for the next backward). Stage 3 (FSDP,
 * zero.h's stage 3 over the shards; with pp over the stage's part of
 * them, below) shards the parameters too: the shards' floats are cut
 * into groups, the replicated tensors, wte's rows (a Llama's
 * embed_tokens'), each layer's split tensors and a Llama's untied
 * lm_head's, and rank d keeps piece d of each (1/D of it, its slice)
 * with its gradient and optimizer state. In the step a
 * group is all-gathered whole just before its use and released after:
 * the replicated tensors for the whole step (small, and every layer
 * uses them), wte's rows for the lookup and again for the head (kept to
 * the head's backward), a layer's for its forward and again for its
 * backward; a group's gradient, once final (a layer's after its
 * backward, an untied head's after the head's, wte's after the lookup's
 * backward, the replicated tensors' at the end of the backward), is
 * reduce-scattered into the slices and released, each micro-batch's
 * added up. So between steps a
 * rank holds its slices, and in the step beside them about one group's
 * parameters and gradients and the replicated tensors' (tensor_memory;
 * where that is no better than stage 2's, the train stage says so: a
 * model whose tied embedding outweighs its few layers).
 *
 * Ownership: each rank's shards (parameters, gradients, optimizer
 * state) are its own arrays. The gpt every rank passes keeps the full
 * parameter array while the shards are taken from it (tensor_create,
 * tensor_load); after, only the rank tensor_gather writes every rank's
 * into (rank 0 of the first stage's group) reads it, and the others may
 * release it (gpt_release, as the train stage does). Its gradient array
 * is never touched (the caller may release it).
 *
 * Pipeline stages beside it (T x P, tensor_options.pp): the replica's
 * layers are cut into P stages of n_layer / P, each a tensor group of T
 * ranks; the first has the lookup, the last ln_f, the head and the loss.
 * Rank t of stage s sends the stream (B,T,C), the same on every rank of
 * its group, to rank t of stage s + 1, and its gradient comes back, by
 * point to point (started, then waited for before the activations it
 * came from are used again); the micro-batches are scheduled by
 * pipeline.h's schedule code (pipeline_schedule_ops): 1F1B (at most
 * P - s micro-batches' activations on stage s) or GPipe (all m). Each
 * rank keeps only its stage's part of its shards (tensor_stage.h: its
 * layers, wte and wpe on the first stage, ln_f and the head on the last;
 * parameters, gradients and optimizer state), and with ZeRO its slice
 * of that part. A tied wte is on the first and the last stage: their
 * gradients (the lookups' and the head's) are summed once a step and
 * both copies take the same update; the clipping norm counts it once.
 * tensor_gather adds the stages' parts into the first stage's shards
 * (over pp), which then go to rank 0 as without stages. At zero_stage 3
 * the groups are cut from the stage's part (its layers', wte's on the
 * first stage, the last stage's head's, or its copy of a tied wte, the
 * part's replicated tensors; the other stages' groups empty), each
 * gathered for its pass as without stages: the schedule keeps several
 * micro-batches in flight, but each forward and backward runs through
 * all the stage's layers, so a layer's group is gathered for each
 * micro-batch's pass (not kept for the step: that would hold the whole
 * part, stage 2's parameters); under GPipe, whose forwards all come
 * first, the last stage's head group is released by the next forward
 * and gathered again for its backward. The tied wte's pieces on the
 * first and the last stage are cut alike: their gradients are summed
 * over pp as the whole copies' are at the other ZeRO stages.
 *
 * Not here (refused by tensor_check or the train stage): dropout, BF16
 * autocast, recomputation, GPUs (tensor_cuda.h is the CUDA engine's,
 * over this layout).
 *
 * Every function but tensor_check, tensor_sizes, tensor_slots, tensor_memory,
 * tensor_step, tensor_load and tensor_destroy is collective over the tensor
 * group (and over dp and pp where it says so): every rank calls it, in the same
 * order. They return 0, or -1 with err; a failed exchange leaves the
 * communicator unusable (abort the gang). Threads: the caller's thread only.
 */
#ifndef DAGRUN_TENSOR_H
#define DAGRUN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "pipeline/pipeline.h"
#include "zero/zslice.h"

typedef struct tensor_options {
  int micro; /* micro-batches a step (grad_accum), >= 1 */
  int B, T;  /* a micro-batch */
  optim_config opt;
  /* The shard group: this rank's shard in every replica (borrowed; NULL
   * or one rank: no data parallel). */
  comm *dp;
  /* Pipeline stages (T x P): this shard's ranks in every stage of the
   * replica, stage s being rank s (borrowed; NULL or one rank: none). */
  comm *pp;
  /* With pp: pipeline.h's schedule of the micro-batches over the
   * stages (1F1B or GPipe). */
  pipeline_schedule schedule;
  /* ZeRO over dp: 0 (every rank the whole optimizer state), 1, 2 or 3
   * (above); ignored without dp. */
  int zero_stage;
} tensor_options;

/* Whether a tensor group of T ranks fits cfg on world ranks: T >= 2, a
 * T divides n_head (heads are not cut), a Llama's n_kv_head and
 * intermediate_size, the padded vocabulary padded_vocab (the rows of
 * wte) and world. 0, or -1 with
 * err naming the numbers. Any thread. */
int tensor_check(const gpt_config *cfg, int T, int world, char *err,
                 size_t errlen);

typedef struct tensor_par tensor_par;

/* Rank comm_rank(c) of the tensor group c (comm_size(c) ranks) over
 * model (borrowed, the same weights on every rank; it must outlive the
 * tensor_par): its shards taken from model, its optimizer (zero state),
 * its activations for (B,T). */
int tensor_create(comm *c, gpt *model, const tensor_options *o,
                  tensor_par **out, char *err, size_t errlen);
void tensor_destroy(tensor_par *p); /* NULL is a no-op */

/* Floats of this rank's shards (its parameters, gradients and, times
 * the optimizer's floats a parameter, its state), and of the whole
 * model's. */
void tensor_sizes(const tensor_par *p, size_t *local, size_t *full);

/* The micro-batches whose activations this rank keeps at most (the
 * schedule's slots). Not collective. */
int tensor_slots(const tensor_par *p);

/* The bytes this rank holds between steps, and its gradients' most
 * during one (zslice.h); at zero_stage 3 also its parameters' most
 * during one, and stage 2's figures beside, all by the rule above (the
 * groups' sizes). Not collective. */
void tensor_memory(const tensor_par *p, zslice_memory *m);

/* Zeroes the gradients and trains the step's m micro-batches: inputs
 * and targets (m,B,T), the same on every rank of the group (the first
 * stage reads the inputs, the last the targets). With pp, exchanges the
 * streams and sums the gradients over it; with dp, averages the
 * gradients and the loss over it. *loss: the mean over the
 * micro-batches (and the replicas), on every rank. */
int tensor_forward_backward(tensor_par *p, const uint32_t *inputs,
                            const uint32_t *targets, double *loss, char *err,
                            size_t errlen);

/* The global L2 norm of the step's gradient (the shards' sums of squares
 * all-reduced over the group, the replicated tensors counted once), into
 * *norm; when max_norm > 0 and the norm is above it every rank scales
 * its gradients by max_norm / (norm + 1e-6), as optim_clip_grad_norm
 * does for one process. */
int tensor_clip_grad_norm(tensor_par *p, double max_norm, double *norm,
                          char *err, size_t errlen);

/* The update of this rank's shards (with ZeRO: of its slice of them) at
 * lr (not collective). */
void tensor_step(tensor_par *p, float lr);

/* Brings every rank's shards into rank 0's model and, with with_state
 * (the same on every rank), their optimizer state and step count into
 * full (rank 0's optimizer over the whole model, trainkit_make_optim's
 * layout; NULL elsewhere): rank 0 can then evaluate, save and export
 * the model as one process's. With pp, the first stage's group does it
 * (it holds every layer's shards); the other stages return 0. With ZeRO
 * (the state, with_state) and at zero_stage 3 (the parameters too),
 * every replica's ranks take part: the slices are gathered over dp. */
int tensor_gather(tensor_par *p, int with_state, optim *full, char *err,
                  size_t errlen);

/* After every rank loaded the same whole checkpoint into model and full
 * (a one-process optimizer): this rank takes its shards of the weights
 * and of full's state, and its step count. Not collective. */
int tensor_load(tensor_par *p, optim *full, char *err, size_t errlen);

/* What this rank holds of its own, in bytes (for the train stage's
 * memory report; the model's arrays are the caller's to count): params
 * and grads its shards (with ZeRO, tensor_memory's: the slices beside
 * them, and the gradients' most inside a step; at zero_stage 3 the
 * parameters' and gradients' most as the steps so far held them, the
 * groups' buffers counted as allocated), optim their optimizer state, acts its
 * activations and the backward's scratch (allocated at tensor_create),
 * total their sum. Not collective. */
void tensor_memory_get(const tensor_par *p, gpt_memory *out);

/* ---- The shard layout, alone ----
 * What tensor_par keeps of the split, for another engine's shards (the
 * CUDA engine's, tensor_cuda.h): one place says how a tensor is cut and
 * where its shard goes, so that both engines' checkpoints are the same
 * model. Rank r of T's shards of a model are n floats, the replicated
 * tensors first ([0, nrepl)), each tensor's shard contiguous (a
 * column-split tensor's rows of lcols floats, c_attn's q, k, v blocks
 * each cut alike). Not collective; any thread. */
typedef struct tensor_layout tensor_layout;

/* The layout of model's shards over T ranks (tensor_check's rules).
 * 0, or -1 with err. */
int tensor_layout_create(const gpt *model, int T, tensor_layout **out,
                         char *err, size_t errlen);
void tensor_layout_destroy(tensor_layout *l); /* NULL is a no-op */
/* Floats of a rank's shards (n), and in *nrepl (may be NULL) those of
 * the replicated tensors, which come first. */
size_t tensor_layout_floats(const tensor_layout *l, size_t *nrepl);
/* Tensor i's (gpt.h's order) shard: its offset in the n floats and its
 * floats. */
void tensor_layout_tensor(const tensor_layout *l, size_t i, size_t *offset,
                          size_t *numel);
/* Rank r's shards of full (an array in the model's layout: the
 * parameters, or one optimizer state array) into loc (n floats). */
void tensor_layout_take(const tensor_layout *l, int r, const float *full,
                        float *loc);
/* The reverse: rank r's shards loc into full; the replicated tensors
 * from rank 0 only (every rank has them alike). */
void tensor_layout_place(const tensor_layout *l, int r, const float *loc,
                         float *full);

#endif /* DAGRUN_TENSOR_H */
