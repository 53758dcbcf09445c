/*
 * mpmem: the memory figures of a model-parallel gang's ranks (mploop.h:
 * pipeline stages, tensor shards and their data-parallel replicas), for
 * the train stage's log and summary.json, as gangmem.h gives a ZeRO
 * gang's.
 *
 * Each rank's figures, by kind, in bytes, what it holds inside a step:
 *   params  its part's parameters (a tensor rank's shards, a pipeline
 *           stage's ranges, in arrays of their own; on GPU ranks the
 *           device's bytes) and the whole model's parameter array where
 *           the rank keeps it: rank 0 always (validation, samples and
 *           checkpoints run on it), the others only until the start
 *   grads   likewise, its part's: every rank releases the whole model's
 *           gradient array
 *   optim   its part's optimizer state, and on rank 0 the whole model's
 *           one-process optimizer the checkpoints are gathered into
 *   acts    the engine's activations (tensor: its slots and the
 *           backward's scratch; pipeline: its slots, the received stream
 *           and the send buffers) and on rank 0 the whole model's, of
 *           validation over the global batch
 * Nothing of these is allocated or freed inside a step once the first
 * has run (a pipeline's slots allocate in it) but the first pipeline
 * stage's buffer of the tied embeddings' gradient, which peak_grads
 * counts; so the figures taken after the first step are the step's. The
 * process's peak resident memory over that step (Linux's VmHWM, reset
 * before the step) is measured beside them: it covers what the
 * bookkeeping does not see (MPI's buffers, the C library's overhead).
 *
 * The formula for the layout is what a rank of it would hold if it kept
 * only its part: params and grads 4 bytes a float of its part, optim
 * the optimizer's state floats a parameter times that, acts the
 * engine's own (the micro-batches in flight on the stage, or the
 * shard's). Where a rank's figures are no better than one process's
 * training the same micro-batch, mpmem_worse says so.
 */
#ifndef DAGRUN_TRAIN_MPMEM_H
#define DAGRUN_TRAIN_MPMEM_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "trainrun.h"
#include "zero/zslice.h"

typedef struct mpmem_rank {
  gpt_memory held;     /* inside the step, by kind (above) */
  gpt_memory between;  /* between steps: params, grads, optim (acts 0) */
  int has_between;     /* whether the engine said (mpmem_measure) */
  gpt_memory formula;  /* the layout's, for this rank's part */
  uint64_t whole[2];   /* of held: the model's parameter, gradient arrays */
  uint64_t peak_grads; /* held.grads and the step's own buffers */
  uint64_t rss_peak;   /* measured: VmHWM over the step (0: unknown) */
} mpmem_rank;

/* Before the step measured: resets the process's peak resident memory
 * (Linux: /proc/self/clear_refs), so that mpmem_rss_peak reads the
 * step's. Any thread. */
void mpmem_step_start(void);
/* VmHWM in bytes (0 where /proc cannot say). Any thread. */
uint64_t mpmem_rss_peak(void);

/* This rank's figures: model the whole model (its arrays and on rank 0
 * validation's activations), full rank 0's one-process optimizer (NULL
 * elsewhere), part the engine's (pipeline_memory_get,
 * tensor_memory_get) with in_model when its params and grads are the
 * model's arrays' ranges, first_stage_tied the bytes of the tied
 * gradient's buffer the first pipeline stage allocates in the step,
 * between the engine's holdings between steps (pipeline_memory,
 * tensor_memory; NULL: not known), to which the whole model's arrays
 * and rank 0's one-process optimizer are added as to held. */
void mpmem_measure(const gpt *model, const optim *full, const gpt_memory *part,
                   int in_model, uint64_t first_stage_tied,
                   const zslice_memory *between, mpmem_rank *out);

/* Every rank's figures into all[N] on rank 0 of c (each broadcasting
 * its own in turn). Collective. 0, or -1 with err. */
int mpmem_gather(comm *c, const mpmem_rank *mine, mpmem_rank *all, char *err,
                 size_t errlen);

#define MPMEM_LINE 512 /* bytes of one of mpmem_worse's sentences */

/* For each of parameters, gradients and optimizer state where some
 * ranks hold no less than one process training the same micro-batch
 * (one: gpt_memory_estimate's), the sentence naming those ranks and
 * what makes it so, into out[i]; returns the count (0-3). */
int mpmem_worse(const mpmem_rank *all, int N, const gpt_memory *one,
                char out[3][MPMEM_LINE]);

/* Rank 0's log lines: each rank's figures beside its formula, then
 * mpmem_worse's sentences as warnings. */
void mpmem_log(trainrun *r, const mpmem_rank *all, int N,
               const gpt_memory *one);

/* summary.json's "memory": {"one_process": {params, grads, optim, acts},
 * "ranks": [{"rank", "peak": {...}, "formula": {...}, "whole_model":
 * {"params", "grads"}, "rss_peak"}, ...], "worse_than_one_process":
 * [sentences]}, in bytes; with the engine's figures between steps, each
 * rank's "between_steps": {params, grads, optim} too (zero_stage 3's
 * slices: below "peak"). */
void mpmem_summary(const mpmem_rank *all, int N, const gpt_memory *one,
                   cJSON *summary);

#endif /* DAGRUN_TRAIN_MPMEM_H */
