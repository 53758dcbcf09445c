/*
 * mploop: the train stage's model-parallel loop, which the pipeline
 * (pipeloop.h) and tensor-parallel (tploop.h) gangs share. A gang of
 * N = D x K ranks on CPU ranks, launched by mpirun or srun, is D
 * data-parallel replicas of a model cut over K ranks: the rank at
 * position p is part p % K of replica p / K. The positions are dealt by
 * node (mpplace.h), so that each tensor group is on one node and its
 * traffic off the network; on one node rank r is at position r.
 * batch_size is per replica: the loader draws D x batch_size rows a
 * micro-batch, as one process of that batch does, and replica d trains
 * rows [d B, (d + 1) B).
 *
 * The loop is the engine's calls (mploop_engine) between the stage's
 * common parts: the stop agreement, the spike guard (skip and lower_lr;
 * reset and rollback skip the update, as in a ZeRO gang), validation
 * and samples by rank 0 on the gathered model, one process's
 * checkpoints (the engine's gather brings every part's weights and
 * optimizer state to rank 0, which writes them, so validate, export and
 * a one-process resume read them as one process's), and resume from
 * one: every rank reads it whole and the engine keeps its part. Rank 0
 * alone reports; after the first step of a run, with every rank's
 * memory figures (mpmem.h). ZeRO (zero_stage 1 or 2) shards each part's
 * optimizer state (and at 2 its gradients) over its D replicas, and at 3
 * (tensor.h's shards, with or without pipeline stages; pipeline.h's
 * stages) their parameters too: the engine's gather is called on every
 * rank.
 *
 * Refused by mploop_check, before any collective, with the numbers: a
 * gang not started by a launcher, world_size not a multiple of K,
 * device: cuda (but where the engine runs on GPU ranks, mploop.gpu_ok),
 * dropout, overfit_one_batch; with gpu_ok, a zero_stage above gpu_zero
 * on GPU ranks beside replicas.
 *
 * GPU ranks (gpu_ok, and device cuda, or auto where every rank sees a
 * GPU: gangloop_pick_device): one GPU a rank (the local
 * rank's, as a ZeRO gang's), and beside the MPI communicators, which
 * keep the scalars and the gather, NCCL ones over the same ranks for
 * the engine's device buffers. Rank 0's pre-flight loss and validation
 * stay on its CPU, on the gathered model.
 */
#ifndef DAGRUN_TRAIN_MPLOOP_H
#define DAGRUN_TRAIN_MPLOOP_H

#include "trainrun.h"

#include "comm/comm.h"
#include "zero/zslice.h"

#include <cjson/cJSON.h>

/* One rank's part of the model, as the loop drives it: pipeline.h's or
 * tensor.h's calls (their contracts) on e. */
typedef struct mploop_engine {
  void *e;
  int (*fb)(void *e, const uint32_t *inputs, const uint32_t *targets,
            double *loss, char *err, size_t errlen);
  int (*clip)(void *e, double max_norm, double *norm, char *err, size_t errlen);
  void (*step)(void *e, float lr);
  int (*gather)(void *e, int with_state, optim *full, char *err, size_t errlen);
  int (*load)(void *e, optim *full, char *err, size_t errlen);
  /* After each step, on every rank (NULL: nothing): the engine's own
   * metrics and log lines (rank 0 reports). */
  void (*stepped)(void *arg, trainrun *r, int rank);
  /* On rank 0 at the end: its summary fields into s (the layout's
   * sizes among them; world_size and data_parallel are the loop's). */
  void (*summary)(void *arg, trainrun *r, cJSON *s);
  void *arg;
  /* For the memory report (mpmem.h): what the rank's part holds (its
   * engine's *_memory_get), with *in_model when its parameters and
   * gradients are ranges of the model's arrays, and *step_bytes what the
   * step allocates and frees on this rank besides. */
  void (*memory)(void *arg, gpt_memory *part, int *in_model,
                 uint64_t *step_bytes);
  /* The engine keeps its part's weights in arrays of its own: ranks
   * other than 0 drop the model's parameter array after resume. */
  int own_params;
} mploop_engine;

typedef struct mploop {
  /* Set by the caller before mploop_check: */
  const char *param; /* the param, "pipeline_parallel" */
  const char *part;  /* what a rank holds, plural: "stages" */
  const char *what;  /* the parts in words: "pipeline stages" */
  int N, K;          /* gang size (0: not in a gang), parts a replica */
  int T;             /* ranks of a tensor group (1: none), for mpplace */
  int gpu_ok;        /* the engine runs on GPU ranks, replicas too:
                        mploop_open opens the NCCL gang and its splits
                        (nc, nkc, ndc) */
  int gpu_zero;      /* with gpu_ok: the highest zero_stage the engine
                        runs over them on GPU ranks (0: none) */
  const char *z3_in_step; /* what a zero_stage 3 rank holds in a step
                             beside its slice, for mploop_log_memory
                             (NULL: "the groups in use at once") */
  /* Set by mploop_check and mploop_open: */
  int D, m, rank; /* replicas, micro-batches a step, this rank */
  int zero;       /* zero_stage over the D replicas: 0-3 (3 not with
                     both T and P) */
  int pos;        /* this rank's position in the layout (mpplace.h) */
  int gpu;        /* on GPU ranks (gpu_ok): device: cuda asked, then the
                     device the gang agreed on at open */
  comm *c;        /* the gang: the stop agreement */
  comm *kc;       /* this replica's K parts: the engine's */
  comm *dc;       /* this part's D replicas: the gradients' mean */
  /* GPU ranks: the NCCL gang and its splits as kc's and dc's,
   * and this rank's CUDA device; else 0 and NULL. */
  int device;
  comm *nc, *nkc, *ndc;
  /* Set by the caller after mploop_open: */
  mploop_engine eng;
  comm *more[2]; /* the engine's own splits (NULL: none), whose traffic
                    summary.json's comm counts with the loop's */
  /* The loop's own: */
  uint32_t *in, *tg; /* the step's m micro-batches of this replica */
  int64_t nsteps;
  comm_stats cs; /* this run's steps' communication, rank 0's */
  struct mpmem_rank *mem; /* N: every rank's memory figures, rank 0's */
  zslice_memory held;     /* this rank's, as mploop_log_memory logged them */
  int held_set;           /* whether it has */
} mploop;

/* What every model-parallel gang refuses, before any collective; sets D
 * and m (grad_accum), and the threads. 0 or EXIT_BAD_PARAMS. */
int mploop_check(trainrun *r, mploop *l);

/* The setup (the model, the loader of D x batch_size rows), fits (the
 * engine's shape check, with arg: 0, or -1 with err) against N, the
 * gang's communicator, the ranks' positions (mpplace.h: a refusal fails
 * every rank alike) and its splits, rank 0's one-process engine (the
 * pre-flight loss, validation) and the step's buffers. 0, or the exit
 * status (before the communicator: every rank fails alike); aborts the
 * gang after it. */
int mploop_open(trainrun *r, mploop *l,
                int (*fits)(void *arg, const gpt_config *cfg, int N, char *err,
                            size_t errlen),
                void *arg);

/* Fails the task and aborts the gang. */
_Noreturn void mploop_abort(trainrun *r, mploop *l, const char *what,
                            const char *err);

/* With l->eng set: resume, the pre-flight loss, the steps, the final
 * validation and checkpoint, rank 0's summary. The exit status. */
int mploop_train(trainrun *r, mploop *l);

/* The engine's memory (tensor_memory, pipeline_memory) in the log, one
 * line, on every rank that calls it; at zero_stage 3 with the
 * parameters' most in a step, and a warning for each of the parameters'
 * and gradients' most that is no better than stage 2's. */
void mploop_log_memory(trainrun *r, mploop *l, const zslice_memory *m);

/* Frees what mploop_open made (not the engine). */
void mploop_close(mploop *l);

#endif /* DAGRUN_TRAIN_MPLOOP_H */
