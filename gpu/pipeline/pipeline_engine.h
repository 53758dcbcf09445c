/*
 * pipeline_engine: what a pipeline stage asks of the engine that runs
 * its layers (internal to gpu/pipeline). pipeline.c has the schedules,
 * the exchanges, the bubble, the data-parallel mean, the tied sum,
 * clipping's norm, gather and load once, and calls one of these tables,
 * chosen at pipeline_create: the CPU engine's (pipeline_cpu.c, gpt.h's
 * stage passes over host floats) or the CUDA engine's (pipeline_cuda.c,
 * gpt_cuda.h's, over device memory).
 *
 * Ranges: range 0 is the stage's own parameters (stage_range: its
 * layers, the embeddings on the first stage, the final norm on the last;
 * contiguous in the layout), range 1 (the last stage with a tied head)
 * its copy of group 0. Their gradients are the engine's memory (device
 * memory on the CUDA engine), handed to the comm layer as they are.
 *
 * ZeRO over the stage group (pipe_setup.zero, pipeline.h): the engine
 * keeps the optimizer state of its slice of range 0 alone (zslice.h:
 * rank d of the D ranks of dp has [d S, d S + S) of the range's n[0]
 * floats, S = ceil(n[0] / D)) and range 1 none (pipeline.c sends it the
 * first stage's parameters). Then reduce sums range 0's gradients into
 * the slice, sumsq, clip and step work on the slice, gather makes range
 * 0's parameters whole again, pull gathers the slices and load takes
 * the slice's state. At zero_stage 3 (either engine) the
 * stage's parameter and gradient arrays are there only from gather to
 * release: between steps the engine keeps its slice of range 0's
 * parameters and of their reduced gradient, the step updates the
 * parameters' slice, and gather makes the arrays anew (the whole stage
 * at once) from every rank's slice.
 *
 * Every int function returns 0, or -1 with err.
 */
#ifndef DAGRUN_PIPELINE_ENGINE_H
#define DAGRUN_PIPELINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"
#include "optim/optim.h"
#include "pipeline.h"
#include "zero/zslice.h"

/* What an engine is made for. */
typedef struct pipe_setup {
  gpt *model; /* the host model (pipeline_create's) */
  const pipeline_options *o;
  int s, P, first, last; /* stage s of P: layers [first, last) */
  int nslots;            /* micro-batches in flight */
  size_t off[2], n[2];   /* the ranges: [off, off + n) of the layout */
  int nrg;               /* 1, or 2 with the tied copy */
  /* ZeRO over the stage group (above): 1 or 2 (the same here), or 3
   * (its parameters sharded too), with dp
   * (the engine's memory) and dp_ctl (host memory) its communicators
   * over the same D > 1 ranks; 0: none. */
  int zero;
  comm *dp, *dp_ctl;
} pipe_setup;

typedef struct pipe_eng pipe_eng;

typedef struct pipe_ops {
  size_t elem; /* bytes of an element of the stream and its gradient */
  void (*destroy)(pipe_eng *e);
  /* A buffer of bytes for the stream (the engine's memory), or NULL. */
  void *(*alloc)(pipe_eng *e, size_t bytes);
  void (*free)(pipe_eng *e, void *buf);
  /* dst = src (bytes), done when it returns: a send may read dst, and
   * the slot src came from may run again. */
  int (*copy)(pipe_eng *e, void *dst, const void *src, size_t bytes, char *err,
              size_t errlen);
  int (*zero_grad)(pipe_eng *e, char *err, size_t errlen);
  /* The stage passes (gpt.h's, gpt_cuda.h's) on activation slot slot:
   * inputs on the first stage, else x; targets and *loss on the last. */
  int (*forward)(pipe_eng *e, int slot, const uint32_t *inputs, const void *x,
                 const uint32_t *targets, float *loss, char *err,
                 size_t errlen);
  int (*backward)(pipe_eng *e, int slot, const void *dy, float scale, char *err,
                  size_t errlen);
  /* The slot's output, and its input's gradient after its backward,
   * complete (the engine has finished writing them). */
  const void *(*output)(pipe_eng *e, int slot);
  const void *(*input_grad)(pipe_eng *e, int slot);
  /* Range r's gradients, done being written (a collective may read and
   * write them). */
  float *(*grads)(pipe_eng *e, int r);
  /* Range r's first n gradients = src + themselves (src: n floats of
   * the engine's memory): the tied embeddings' two parts. */
  int (*add)(pipe_eng *e, int r, const float *src, size_t n, char *err,
             size_t errlen);
  /* Every range's gradients times s. */
  int (*scale)(pipe_eng *e, float s, char *err, size_t errlen);
  /* With ZeRO, after the tied sum: range 0's gradients summed over dp,
   * this rank's slice of the sum times s kept (collective over dp). */
  int (*reduce)(pipe_eng *e, float s, char *err, size_t errlen);
  /* Range r's sum of squares of its gradients (ZeRO: its slice's). */
  int (*sumsq)(pipe_eng *e, int r, double *ss, char *err, size_t errlen);
  /* Clipping to max_norm (> 0) of a finite global norm: the next step's
   * gradients times max_norm / (norm + 1e-6) where that is below 1
   * (optim_clip_grad_norm's rule). */
  int (*clip)(pipe_eng *e, double norm, double max_norm, char *err,
              size_t errlen);
  int (*step)(pipe_eng *e, float lr, char *err, size_t errlen);
  /* With ZeRO, after a step: every rank's slice into range 0's
   * parameters (collective over dp). */
  int (*gather)(pipe_eng *e, char *err, size_t errlen);
  /* At zero_stage 3, once the slices have taken what they need from the
   * arrays (after reduce, after pull): the arrays freed until the next
   * gather. A no-op below it. */
  void (*release)(pipe_eng *e);
  /* Group 0's parameters in range r as the passes read them (the
   * engine's memory, *bytes of it): the tied copy's, which the first
   * stage sends the last after a ZeRO step. */
  void *(*tied)(pipe_eng *e, int r, size_t *bytes);
  /* Range 0's parameters (n[0] floats) into host params and, with state
   * non-NULL, its optimizer state (k arrays of n[0] floats: AdamW m then
   * v, Lion m) into state and the step count into *t. With ZeRO every
   * replica calls it with the same state (NULL or not): the slices are
   * gathered over dp_ctl (the CPU engine's state; the CUDA engine's
   * master weights and state). */
  int (*pull)(pipe_eng *e, float *params, float *state, uint64_t *t, char *err,
              size_t errlen);
  /* After the host model and full (a one-process optimizer) were loaded:
   * the ranges' parameters from the model, their state and t from full. */
  int (*load)(pipe_eng *e, optim *full, char *err, size_t errlen);
  /* What the stage holds: held as pipeline_memory gives it, part as
   * pipeline_memory_get (acts the engine's alone: its slots). */
  void (*memory)(pipe_eng *e, zslice_memory *held, gpt_memory *part);
} pipe_ops;

/* One optimizer over z's slice of the tensors in [off, off + n) of
 * model (z over no group: the whole range). */
int pipe_range_optim(gpt *model, size_t off, size_t n, const zslice *z,
                     const optim_config *oc, optim **out, char *err,
                     size_t errlen);

/* The CPU engine (pipeline_cpu.c). */
int pipe_cpu_create(const pipe_setup *su, const pipe_ops **ops, pipe_eng **out,
                    char *err, size_t errlen);
/* The CUDA engine on device su->o->device (pipeline_cuda.c); in a build
 * without it, -1 saying so. */
int pipe_cuda_create(const pipe_setup *su, const pipe_ops **ops, pipe_eng **out,
                     char *err, size_t errlen);

#endif /* DAGRUN_PIPELINE_ENGINE_H */
