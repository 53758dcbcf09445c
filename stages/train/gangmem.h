/*
 * gangmem: the memory figures of a gang's ranks, for the train stage's
 * log and summary.json (gangloop.c gathers them).
 *
 * Each rank's figures are zero_memory's (zero.h), or on GPU ranks
 * zero_cuda_memory_get's: what the rank holds between steps
 * (parameters, gradients, optimizer state, activations) and the most it
 * held inside the last step (the high-water mark of the buffers taken
 * and freed during it: stage 3's gathered groups, stages 2-3's group
 * gradients, a spare shard under grad_accum, the activations of the
 * forward), beside ZeRO's formulas for its layout. The formulas
 * between steps (f_params, f_grads, f_optim) are what ZeRO promises;
 * the in-step ones (f_peak_params, f_peak_grads) what the layout costs
 * while the step runs. For a small model the in-step peak of stages 2-3
 * can be above what a lower stage holds (the embeddings' gradient and
 * the layers in flight at stage 2, two gathered groups at stage 3,
 * against the shard they save): gangmem_worse names those.
 */
#ifndef DAGRUN_TRAIN_GANGMEM_H
#define DAGRUN_TRAIN_GANGMEM_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "trainrun.h"
#include "zero/zero.h"

typedef struct gangmem {
  int N, stage, gpu;       /* ranks, ZeRO stage, GPU ranks (1) or CPU (0) */
  uint64_t f_acts;         /* the engine's activations formula for (B,T)
                              (gpt_memory_estimate; CPU ranks) */
  const zero_memory *rank; /* N: rank q's figures */
} gangmem;

#define GANGMEM_LINE 384 /* bytes of one of gangmem_worse's sentences */

/* The sentences saying where this stage's in-step peak (the most of any
 * rank) is no better than a lower stage's whole array for this model:
 * stage 2-3's gradients against stage 1's (4 Psi), stage 3's parameters
 * against stage 2's (4 Psi). Up to 2 into out[i]; returns the count (0
 * on GPU ranks, whose layouts differ: BF16 copies, fixed buffers). */
int gangmem_worse(const gangmem *m, char out[2][GANGMEM_LINE]);

/* Rank 0's log lines: each rank's figures and the formulas, then
 * gangmem_worse's sentences as warnings. */
void gangmem_log(trainrun *r, const gangmem *m);

/* summary.json's "memory": {"formula": {...}, "ranks": [{"rank", "held":
 * {params, grads, optim, acts}, "peak": {...}}, ...], "worse_than_lower":
 * [sentences]}, in bytes. */
void gangmem_summary(const gangmem *m, cJSON *summary);

/* Rank 0's communication over the steps of this run (its communicators'
 * comm_stats summed, taken before the final checkpoint and validation):
 * a log line and summary.json's "comm": {"rank": 0, "steps",
 * "<kind>": {"calls", "bytes", "seconds"}, ...} for each kind it used.
 * The seconds are the rank's time inside the comm calls, waits for
 * slower peers included (a pipeline stage's bubble shows in its
 * send/recv). */
void gangmem_comm(trainrun *r, const comm_stats *cs, int64_t steps,
                  cJSON *summary);

#endif /* DAGRUN_TRAIN_GANGMEM_H */
