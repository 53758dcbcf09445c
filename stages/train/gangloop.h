/*
 * gang: the train stage's data-parallel loop, one rank of a gang of N
 * (gpu/zero/zero.h; on GPU ranks gpu/zero/zero_cuda.h).
 *
 * A task with a launcher (mpirun or srun) and world_size N (1 too) runs
 * the stage in N ranks; each makes the same model (the same seed), draws
 * the same global batch of N x batch_size sequences (the order one
 * process with that batch size would see) and trains on its own
 * batch_size rows of it, and ZeRO (zero_stage) averages the gradients
 * over the ranks, shards what the stage shards and updates. N ranks of
 * batch_size B therefore train as one process of batch size N*B. Every
 * collective is called by every rank in the same order: the stop
 * request is agreed on by an all-reduce each step, evaluation at stage 3
 * gathers the parameters on all ranks. Rank 0 alone reports (metrics,
 * progress, outputs, samples, the final model); the others' host calls
 * would be ignored by dagrun.
 *
 * The device (device: cpu|cuda|auto) is agreed on by all ranks, by
 * engine_choose's rule (engine.h), the one process's too: the GPU when
 * this build has GPU ranks and every rank sees a GPU (auto falls back
 * to the CPU otherwise; cuda fails). On GPUs the step is zero_cuda's
 * (NCCL for the gradients and parameters); the MPI communicator stays
 * for everything else (the stop agreement, checkpoints, the loss), with
 * the host model (stage 3: the host zero's parameter shard) and the host
 * zero as the state of record that checkpoints read (zero_cuda_pull
 * before a save). Validation runs on rank 0's GPU at stages 0-2; at
 * stage 3, where a GPU forward needs every rank's layers, the pre-flight
 * loss is taken on the CPU before ZeRO shards the model, and validation
 * on rank 0's CPU over the gathered parameters, as on CPU ranks.
 *
 * Checkpoints are ZeRO's sharded ones (zero_save: one file per rank and
 * a manifest) in <task>/checkpoints, so that a retried attempt with
 * resume: auto continues from the newest (re-cut if the world size
 * changed); one process's checkpoint resumes a gang too. The loader's
 * position is not in them: the resumed run replays the loader's batches
 * up to the step (cheap: a batch is a copy of B*N*T tokens). At the end
 * rank 0 also writes the full weights as a train checkpoint without
 * optimizer state into <task>/model (trainstate.h): the outputs
 * checkpoint and checkpoints point there, so that validate and export
 * read it as they read one process's; sharded_checkpoints names the
 * sharded ones. summary.json and samples.txt go to out/ as in one
 * process.
 *
 * Gradient accumulation (grad_accum A) on CPU ranks: each optimizer
 * step draws A global batches of N x batch_size (one after the other, as
 * one process of batch size N x A x batch_size draws its one), each rank
 * keeps its rows of each, and zero_step_accum trains the A micro-batches
 * (zero.h: stages 0-1 reduce the gradient once a step, stages 2-3 every
 * micro-batch into the shard). The loss reported is the mean over the
 * micro-batches and ranks, one process's loss of that global batch. GPU
 * ranks refuse grad_accum above 1 (zero_cuda takes one micro-batch).
 *
 * Not in a gang: overfit_one_batch (refused), the loss-spike
 * guard's reset and rollback (ZeRO updates inside its step: the gang
 * skips the update instead, said in the log; skip and lower_lr work, and
 * a non-finite loss or norm never reaches the weights).
 *
 * Errors: a bad param or device fails the task before any collective. A
 * failure in the middle of the collectives fails the task and aborts the
 * whole gang through the communicator (comm_abort, EXIT_FAILED): the
 * other ranks would wait forever otherwise. This is the one place the
 * stage does not return.
 *
 * Test hook: DAGRUN_TEST_KILL_RANK_AT_STEP=R:S makes rank R raise SIGKILL
 * when it is about to train step S+1 (S steps done), once per task: it
 * leaves <task>/test-kill-rank.done first, and a rank that finds that
 * file does not do it again (the retried attempt runs through).
 */
#ifndef DAGRUN_TRAIN_GANG_H
#define DAGRUN_TRAIN_GANG_H

#include "comm/comm.h"
#include "trainrun.h"

/* The ranks of the gang this process belongs to: DAGRUN_WORLD_SIZE
 * (dagrun sets it for a task with world_size > 1 or a launcher) when it
 * is above 1, or is 1 and mpirun or srun with PMI started the process;
 * else 0: one process (singleloop.h). */
int gangloop_ranks(void);

/* Whether mpirun, or srun with PMI, started this process. */
int gangloop_launched_by_mpi(void);

/* The gang's MPI communicator into *c and this process's rank: 0, or -1
 * once the task was failed (MPI would not start); MPI's world of another
 * size than N fails the task and aborts every rank. */
int gangloop_open_mpi(trainrun *r, int N, comm **c, int *rank);

/* The threads param for a rank of a gang of N on one host: 0 gives each
 * rank its share of the CPUs. 0, or EXIT_BAD_PARAMS once the task was
 * failed. */
int gangloop_threads(trainrun *r, int N);

/* The gang's device, the same on every rank (collective over c, rank
 * of N): whether every rank has a GPU (zero_cuda_available: also that
 * this build has GPU ranks) is summed over the ranks, and engine_choose
 * decides, as it does for one process; rank 0 logs the choice. cuda
 * without one fails the task on every rank, saying why. 0 with *dev, or
 * -1. */
int gangloop_pick_device(trainrun *r, comm *c, int N, int rank,
                         engine_device *dev);

/* A failure in the middle of the exchanges of rank's gang on c: fails
 * the task, logs it, and stops every rank (comm_abort, EXIT_FAILED).
 * Does not return. */
_Noreturn void gangloop_abort(trainrun *r, comm *c, int rank, const char *what,
                              const char *err);

/* Trains as rank of a gang of N on r (trainrun_init done; the caller
 * frees r). Collective: every rank calls it. Returns the stage's exit
 * status (0, EXIT_BAD_PARAMS, EXIT_FAILED), or aborts the gang (above). */
int gangloop_run(trainrun *r, int N);

#endif /* DAGRUN_TRAIN_GANG_H */
