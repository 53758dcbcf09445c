/*
 * single: the train stage's one-process loop, on the CPU or one GPU
 * through the engine seam (engine.h), which picks the device
 * (engine_pick). It trains r->c.steps optimizer steps of grad_accum
 * micro-batches each, with the loss-spike guard's every policy (skip,
 * lower_lr, reset, rollback to the last checkpoint), validation every
 * eval_every steps, checkpoints (trainstate.h) every checkpoint_every
 * steps, at the end and when the task is stopped, and the
 * overfit_one_batch check.
 *
 * Resume: a checkpoint of this task or a named one (resume param)
 * continues exactly, the same bits as if the run had never stopped; a
 * gang's sharded checkpoint is read whole and the loader replayed.
 *
 * Files: checkpoints in <task>/checkpoints (keep_checkpoints of them),
 * out/samples.txt and out/summary.json. Outputs: device, checkpoint,
 * checkpoints, tokenizer, summary, val_loss and samples.
 */
#ifndef DAGRUN_TRAIN_SINGLE_H
#define DAGRUN_TRAIN_SINGLE_H

#include "trainrun.h"

/* Runs the one-process loop on r (trainrun_init done; the caller frees
 * r). Returns the stage's exit status: 0, EXIT_BAD_PARAMS (device: cuda
 * where there is none) or EXIT_FAILED, the task failed through the host
 * with the reason. */
int singleloop_run(trainrun *r);

#endif /* DAGRUN_TRAIN_SINGLE_H */
