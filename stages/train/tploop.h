/*
 * tploop: the train stage's tensor-parallel loop (tensor_parallel: T
 * above 1), one shard of gpu/tensor/tensor.h per rank of a gang launched
 * by mpirun or srun on CPU ranks, driven by mploop.h's loop. A gang of
 * D x T ranks is D data-parallel replicas of a tensor group of T
 * consecutive ranks: rank r is shard r % T of replica r / T (so that
 * mpirun's by-slot placement keeps a group, and its two all-reduces a
 * block each way, on one node); batch_size is per replica, and each
 * shard's gradients are averaged over its D replicas once a step, after
 * the grad_accum micro-batches.
 *
 * On GPU ranks (device: cuda, or auto where every rank sees a GPU,
 * where the build has gpu/tensor/tensor_cuda.h): the same layouts, one
 * GPU a rank, the CUDA engine's shards (tensor_cuda.h) over NCCL splits
 * of the gang as tc's and pc's of the MPI one, the replicas' mean and
 * ZeRO 1-3 over mploop's NCCL ndc; the same checkpoints.
 *
 * Refused at start, before any collective, with the numbers: what
 * mploop_check refuses (world_size not a multiple of tensor_parallel,
 * device: cuda without tensor_cuda or where a rank sees no GPU, dropout,
 * overfit_one_batch, no launcher), n_head or the
 * padded vocabulary not divisible by tensor_parallel (the vocabulary is
 * padded to a multiple of 64 already, and that padding is what is split:
 * no more is added), a Llama's n_kv_head or intermediate_size not
 * divisible by it, recompute or autocast other than none.
 *
 * With pipeline_parallel P beside it (world_size D x P x T), each
 * replica is P stages of a tensor group each: rank r is shard r % T of
 * stage (r / T) % P of replica r / (T P), pipeline_schedule's order
 * (1F1B or GPipe) over the grad_accum micro-batches (tensor.h,
 * tensor_cuda.h), n_layer divisible by P.
 *
 * Checkpoints, validation and resume are mploop.h's: one process's
 * format, gathered to rank 0, and one process's validation windows.
 */
#ifndef DAGRUN_TRAIN_TPLOOP_H
#define DAGRUN_TRAIN_TPLOOP_H

#include "trainrun.h"

/* The tensor_parallel param into *T (1: none). 0, or -1 once the task
 * was failed. */
int tploop_param(trainrun *r, int *T);

/* Trains as shard r % T of replica r / T (trainrun_init done; the
 * caller frees r); N is gangloop_ranks() (0: not in a gang, refused).
 * Collective. Returns the exit status, or aborts the gang through the
 * communicator on a failure in the middle of the exchanges. */
int tploop_run(trainrun *r, int N, int T, int P);

#endif /* DAGRUN_TRAIN_TPLOOP_H */
