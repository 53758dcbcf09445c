/*
 * zslice: a flat array of n floats sharded over a group of D ranks, the
 * piece of ZeRO (zero.h) that the model-parallel engines share for the
 * data-parallel group beside them (tensor.h's tensor_options.dp,
 * pipeline.h's pipeline_options.dp): each rank of the group keeps and
 * updates the optimizer state of its slice only.
 *
 * Rank d of D owns [lo, lo + S) with S = ceil(n/D) and lo = d S: `own`
 * real floats (S but on the last ranks), the rest padding. The
 * collectives take a padded array of D S floats (the array, zeros past
 * n): the gradients are reduce-scattered into the ranks' slices and the
 * updated parameters all-gathered back in place, the bytes of one
 * all-reduce (ZeRO-1).
 *
 * With one rank (c NULL) each is the local part alone. Every function
 * but zslice_init, zslice_cut, zslice_take and zslice_state_take is
 * collective over
 * the group; 0, or -1 with err (a failed exchange leaves
 * the communicator unusable). Threads: the comm's.
 */
#ifndef DAGRUN_ZSLICE_H
#define DAGRUN_ZSLICE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "optim/optim.h"

typedef struct zslice {
  comm *c; /* the group (borrowed) */
  int D, d;
  size_t n, S, lo, own;
} zslice;

/* Whether a model-parallel engine (who, for the message) takes ZeRO
 * stage `stage` over its data-parallel group: 0, 1 or 2 (tensor.h's
 * stage 3 is its own: groups of zslices). 0, or -1 with err. */
int zslice_check_stage(int stage, const char *who, char *err, size_t errlen);

/* This rank's slice of n floats over c (NULL: one rank, the whole). */
void zslice_init(zslice *z, comm *c, size_t n);

/* The groups g (ng, in order, over an array) cut to [lo, lo + len): each
 * one's part there, at offsets from local, then, when pad > len, one
 * group of pad - len floats without decay at local + len. Into out (room
 * for ng + 1); the count. zero.c's ranges use it too. */
size_t zslice_cut(const optim_group *g, size_t ng, size_t lo, size_t len,
                  size_t local, size_t pad, optim_group *out);

/* An optimizer over this rank's S floats with g's groups (the whole
 * array's) cut to its slice. */
int zslice_optim(const zslice *z, const optim_config *oc, const optim_group *g,
                 size_t ng, optim **out, char *err, size_t errlen);

/* full (D S floats, the padding zero) summed over the group, this rank's
 * slice times scale into slice (S). */
int zslice_reduce(zslice *z, const float *full, float *slice, float scale,
                  char *err, size_t errlen);

/* Every rank's slice of full (D S floats: after each updated its own)
 * into full, in place. */
int zslice_gather(zslice *z, float *full, char *err, size_t errlen);

/* This rank's piece of an array of n floats (in) into piece (S floats:
 * its own real ones, then zeros). */
void zslice_take(const zslice *z, const float *in, float *piece);

/* Every rank's piece (piece: this rank's S floats) gathered into out,
 * the array's n floats; tmp is D S floats of scratch. */
int zslice_gather_to(zslice *z, const float *piece, float *out, float *tmp,
                     char *err, size_t errlen);

/* The optimizer state of every rank (o: this rank's, over S) into out,
 * k arrays of n floats (the whole array's state, as one optimizer over
 * the array has it). */
int zslice_state_gather(zslice *z, optim *o, float *out, char *err,
                        size_t errlen);

/* This rank's slice of state (k arrays of n floats, each stride floats
 * after the one before) into o's. */
void zslice_state_take(const zslice *z, const float *state, size_t stride,
                       optim *o);

/* A rank's bytes of a model-parallel engine beside the group (tensor.h,
 * pipeline.h): held between steps (params, grads, optim) and its
 * gradients' most during a step. Where the engine shards the parameters
 * too (zero_stage 3: tensor.h's and pipeline.h's engines, CPU and CUDA
 * (zslice_cuda.h's zslice_whole_memory); the train stage's memory log
 * reads them): their most during a step (peak_params: the slice and what is
 * gathered at once: tensor.h's groups, a pipeline stage whole), and
 * what a rank of the same layout holds at most in a step at zero_stage
 * 2 (stage2_params, stage2_grads), the lower stage stage 3 must beat. */
typedef struct zslice_memory {
  uint64_t params, grads, optim, peak_grads;
  uint64_t peak_params, stage2_params, stage2_grads;
} zslice_memory;

#endif /* DAGRUN_ZSLICE_H */
