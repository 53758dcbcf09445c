/*
 * pipeloop: the train stage's pipeline-parallel loop (pipeline_parallel:
 * P above 1), one stage of gpu/pipeline/pipeline.h per rank of a gang
 * launched by mpirun or srun on CPU ranks. A gang of D x P ranks is D
 * data-parallel replicas of the pipeline: rank r is stage r % P of
 * replica r / P; batch_size is per replica (the loader draws D x
 * batch_size rows a micro-batch, as one process of that batch does, and
 * replica d trains rows [d B, (d + 1) B)), and each stage's gradients
 * are averaged over its D replicas after the micro-batches.
 *
 * The step is one process's with grad_accum m: m micro-batches of
 * batch_size sequences, drawn by every rank from the same loader (the
 * first stage uses the ids, the last the targets), scheduled by
 * pipeline_schedule (1f1b, the default, or gpipe). grad_accum is the
 * micro-batch count m; the bubble (measured idle share of the stages'
 * step time, and (P - 1) / (m + P - 1)) is logged at the first and the
 * last step and is the metric pipeline_idle at every step.
 *
 * Refused at start, before any collective, with a message that says so:
 * a world_size that is not a multiple of pipeline_parallel, n_layer not
 * divisible by it, a Llama model, device: cuda, dropout,
 * overfit_one_batch, a gang not started by a launcher. zero_stage is
 * ignored (said in the log): sharding the optimizer over a stage's
 * replicas is not built yet. The spike guard's skip and lower_lr
 * work; reset and rollback skip the update, as in a ZeRO gang.
 *
 * Checkpoints are one process's (trainstate.h): at checkpoint_every, on a
 * stop request and at the end, pipeline_gather brings every stage's
 * weights and optimizer state to rank 0, which writes them in
 * <task>/checkpoints; validate, export and a one-process resume read
 * them as they read one process's, and a pipeline run resumes from one
 * (its own, or one process's): every rank reads it whole and keeps its
 * stage's part. Validation and samples are rank 0's, on the gathered
 * model (replica 0's stages send theirs; the replicas hold the same
 * weights). Rank 0 alone reports.
 */
#ifndef DAGRUN_TRAIN_PIPELOOP_H
#define DAGRUN_TRAIN_PIPELOOP_H

#include "trainrun.h"

/* The pipeline_parallel param into *P (1: no pipeline). 0, or -1 once
 * the task was failed. */
int pipeloop_param(trainrun *r, int *P);

/* Trains as a stage of a pipeline of P stages on r (trainrun_init
 * done; the caller frees r); N is gangloop_ranks() (0: not in a gang,
 * refused). Collective. Returns the exit status, or aborts the gang
 * through the communicator on a failure in the middle of the exchanges. */
int pipeloop_run(trainrun *r, int N, int P);

#endif /* DAGRUN_TRAIN_PIPELOOP_H */
