/*
 * engine: the train stage's one-process training step behind one seam,
 * run on the CPU engine (gpt + optim, in place on the host model) or on
 * the GPU (gpu/cuda/gpt_cuda.h), chosen by the stage's `device` param.
 *
 * The host gpt and optim stay the run's state of record for everything
 * that is not a step: checkpoints (trainstate.h), resume, rollback,
 * samples. On the GPU they are brought up to date by engine_sync_to_host
 * before such a use, and engine_load_from_host pushes them to the GPU
 * after a load. On the CPU both are no-ops.
 *
 * The gang path of the train stage (gangloop.h) trains through ZeRO instead
 * (gpu/zero/zero.h on CPU ranks, zero_cuda.h on GPU ranks), but chooses
 * its device by the same rule, engine_choose.
 *
 * Functions return 0, or -1 with a message in err; call them from the
 * stage's thread.
 */
#ifndef DAGRUN_TRAIN_ENGINE_H
#define DAGRUN_TRAIN_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/trainkit.h"
#include "data/dataloader.h"
#include "model/gpt.h"
#include "optim/optim.h"

typedef enum engine_device { ENGINE_CPU = 0, ENGINE_CUDA = 1 } engine_device;

/* What the device param asks for. */
typedef enum engine_want {
  ENGINE_WANT_AUTO = 0,
  ENGINE_WANT_CPU = 1,
  ENGINE_WANT_CUDA = 2
} engine_want;

/* Activation recomputation (gpt_cuda.h's gpt_recompute, by value, so that
 * this header needs no CUDA). */
typedef enum engine_recompute {
  ENGINE_RECOMPUTE_NONE = 0,
  ENGINE_RECOMPUTE_GELU = 1,
  ENGINE_RECOMPUTE_BLOCK = 2
} engine_recompute;

/* The device and recompute params' values, indexed by engine_want and
 * engine_recompute, NULL-terminated: the stage's choices for them and
 * its parsing of them (stagekit_param_choice). */
extern const char *const engine_device_names[];
extern const char *const engine_recompute_names[];
const char *engine_recompute_name(engine_recompute r);

/* Non-zero when this build has the CUDA backend. */
int engine_built_with_cuda(void);

/* The device for want, the one rule of both loops: cpu is the CPU; auto
 * is the GPU when have_gpu, else the CPU; cuda is the GPU when have_gpu,
 * else -1 (the caller says why, in its words). have_gpu is what the
 * caller found: one process, that this build has CUDA and sees a GPU
 * (engine_pick); a gang, that it has GPU ranks and every rank sees one
 * (gangloop.c). */
int engine_choose(engine_want want, int have_gpu, engine_device *out);

/* Resolves want to a device for one process (engine_choose): auto is cuda when
 * built with CUDA and a GPU is present, else cpu; why gets the reason in words
 * either way (for the log and the summary). cuda without the build or the GPU:
 * -1 with err saying what is missing and to use device: cpu or auto. (Both
 * model families train on either engine.) */
int engine_pick(engine_want want, engine_device *out, char *why, size_t whylen,
                char *err, size_t errlen);

typedef struct engine_options {
  int B, T;                /* the micro-batch */
  optim_config opt;        /* the optimizer's config (for the GPU's) */
  engine_recompute recompute;
  int deterministic;
} engine_options;

typedef struct engine engine;

/* An engine on dev for model and opt (borrowed: they must outlive it; on
 * the GPU, their current contents are uploaded). On the GPU an
 * out-of-memory fails here, with gpt_cuda's message. Caller destroys. */
int engine_create(engine_device dev, gpt *model, optim *opt,
                  const engine_options *o, engine **out, char *err,
                  size_t errlen);
void engine_destroy(engine *e); /* NULL is a no-op */
engine_device engine_get_device(const engine *e);

/* trainkit_forward_backward on the engine's device: zeroes the
 * gradients, runs accum micro-batches of ld (NULL: the batch in
 * inputs/targets again) forward and backward (scaled 1/accum), the mean
 * loss into *loss and the phases' times into *times (may be NULL). */
int engine_forward_backward(engine *e, loader *ld, uint32_t *inputs,
                            uint32_t *targets, int accum, double *loss,
                            trainkit_times *times, char *err, size_t errlen);
/* The mean loss of one batch (inputs, targets: B*T ids) with no backward
 * (the stage's pre-flight and overfit checks). */
int engine_loss(engine *e, const uint32_t *inputs, const uint32_t *targets,
                double *loss, char *err, size_t errlen);
/* Multiplies the gradients by s (fault injection). */
int engine_scale_grads(engine *e, float s, char *err, size_t errlen);
/* optim_clip_grad_norm's semantics: the norm before clipping. */
int engine_clip_grad_norm(engine *e, double max_norm, double *norm, char *err,
                          size_t errlen);
/* One optimizer update at lr. */
int engine_step(engine *e, float lr, char *err, size_t errlen);
/* optim_reset. */
int engine_optim_reset(engine *e, char *err, size_t errlen);

/* The device's weights and optimizer state -> model and opt. */
int engine_sync_to_host(engine *e, char *err, size_t errlen);
/* model and opt (after trainstate_load) -> the device. */
int engine_load_from_host(engine *e, char *err, size_t errlen);

/* Mean loss of nb batches of ld, of ld's shape (at most the engine's B
 * x T), on the engine's device (validation; on the CPU, evaluate_model's
 * loss). */
int engine_eval_loss(engine *e, loader *ld, uint64_t nb, double *loss,
                     char *err, size_t errlen);

/* The mean of fn's loss over nb batches of ld (B,T) (max nb, at most an
 * epoch, as evaluate_model counts them; every batch has B*T positions):
 * validation on a device that computes one batch's loss, as the GPU
 * engine's and a GPU gang's rank (gpu/zero/zero_cuda.h). */
typedef int (*engine_batch_loss)(void *arg, const uint32_t *inputs,
                                 const uint32_t *targets, float *loss,
                                 char *err, size_t errlen);
int engine_eval_batches(loader *ld, int B, int T, uint64_t nb,
                        engine_batch_loss fn, void *arg, double *loss,
                        char *err, size_t errlen);

/* Device memory: what the engine allocated, and what the device has in
 * use in all (both 0 on the CPU). */
typedef struct engine_memory {
  uint64_t allocated, device_used, device_total;
} engine_memory;
int engine_memory_get(engine *e, engine_memory *m, char *err, size_t errlen);

/* A line for the log: "cpu" or the GPU's name and memory. */
const char *engine_describe(const engine *e);

#endif /* DAGRUN_TRAIN_ENGINE_H */
