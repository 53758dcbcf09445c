/*
 * train: the built-in stage that trains a GPT on the tokenize stage's
 * token files with dagrun's engine (gpu/), on the CPU or, with device:
 * cuda (or auto where there is a GPU), on one GPU (engine.h).
 *
 *   train:
 *     stage: train
 *     needs: [tokenize]
 *     with: {data: "${tasks.tokenize.outputs.dir}", model: gpt-tiny,
 *            steps: 2000}
 *
 * Checkpoints go to <task>/checkpoints/ every checkpoint_every steps, at
 * the end, and when the task is stopped (timeout, Ctrl-C: SIGTERM), so
 * that a retried attempt with resume: auto continues where the last one
 * stopped: the same bits as if it had never stopped. Validation runs
 * every eval_every steps; samples of generated text go to out/.
 *
 * This file is the plugin: its params and run(), which reads them
 * (trainrun.h, the run context both loops share) and hands the run to
 * one of its loops: one process (singleloop.h), or, in a gang (launcher:
 * mpirun or srun), a rank training data-parallel with ZeRO (gangloop.h),
 * a pipeline stage (pipeloop.h, pipeline_parallel) or a tensor-parallel
 * shard (tploop.h, tensor_parallel) on CPU ranks. The first two choose
 * the device by one rule (engine_choose, engine.h).
 */
#include <dagrun/plugin.h>

#include "common/textgen.h"

#include "datamix.h"
#include "engine.h"
#include "gangloop.h"
#include "lib/exitcode.h"
#include "pipeline/pipeline.h"
#include "pipeloop.h"
#include "singleloop.h"
#include "tploop.h"
#include "trainrun.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static const dagrun_param_spec params[] = {
    DATAMIX_PARAMS,
    TRAINKIT_SHAPE_PARAMS,
    {"batch_size", DAGRUN_PARAM_INT, "16", 0, "Sequences per micro-batch"},
    {"grad_accum", DAGRUN_PARAM_INT, "1", 0,
     "Micro-batches per optimizer step (global batch = batch_size x this; "
     "in a gang x world_size too, CPU ranks only)"},
    {"steps", DAGRUN_PARAM_INT, "1000", 0, "Optimizer steps"},
    TRAINKIT_OPTIM_PARAMS,
    {"lr", DAGRUN_PARAM_FLOAT, "0", 0,
     "Peak learning rate (0: 1e-3 for adamw, 1e-4 for lion)"},
    {"min_lr", DAGRUN_PARAM_FLOAT, "-1", 0,
     "Final learning rate (-1: lr / 10)"},
    {"warmup", DAGRUN_PARAM_INT, "-1", 0,
     "Linear warmup steps (-1: 5% of steps)"},
    {"schedule", DAGRUN_PARAM_STRING, "cosine", 0,
     "After warmup: cosine, linear, or constant (with cooldown)"},
    {"cooldown", DAGRUN_PARAM_INT, "0", 0,
     "schedule constant: final steps decaying linearly to min_lr"},
    {"seed", DAGRUN_PARAM_INT, "1234", 0,
     "Seed of the initial weights, the data order and the samples"},
    {"eval_every", DAGRUN_PARAM_INT, "100", 0,
     "Validation every this many steps (0: only at the end)"},
    {"eval_batches", DAGRUN_PARAM_INT, "20", 0,
     "Validation batches of batch_size windows (with data_mix, each "
     "source's own: val_loss/<name>; in a gang world_size x "
     "batch_size, shared by the ranks; at most one pass over the "
     "validation shards)"},
    {"eval_text", DAGRUN_PARAM_STRING, "", 0,
     "With each validation: the perplexity of this text file "
     "(eval_perplexity; CPU engine)"},
    {"eval_choices", DAGRUN_PARAM_STRING, "", 0,
     "With each validation: the accuracy on this multiple-choice JSONL "
     "(mc_accuracy; the eval stage's format; CPU engine)"},
    {"checkpoint_every", DAGRUN_PARAM_INT, "500", 0,
     "Checkpoint every this many steps (0: only at the end and on stop)"},
    {"keep_checkpoints", DAGRUN_PARAM_INT, "3", 0,
     "Checkpoints kept in <task>/checkpoints"},
    {"resume", DAGRUN_PARAM_STRING, "auto", 0,
     "auto (latest valid checkpoint of this task, if any), never, or a "
     "checkpoint directory"},
    {"spike_policy", DAGRUN_PARAM_STRING, "skip", 0,
     "Loss-spike guard: none, skip, lower_lr, reset or rollback"},
    {"spike_threshold", DAGRUN_PARAM_FLOAT, "6", 0,
     "z-score of loss or grad norm over the recent window that is a spike"},
    {"spike_window", DAGRUN_PARAM_INT, "50", 0, "Steps in that window"},
    {"spike_min_rise", DAGRUN_PARAM_FLOAT, "0.3", 0,
     "...and at least this fraction above the window's mean (0.3 = 30%)"},
    {"overfit_one_batch", DAGRUN_PARAM_BOOL, "false", 0,
     "Sanity check: train on one batch; fail unless its loss falls below "
     "overfit_target"},
    {"overfit_target", DAGRUN_PARAM_FLOAT, "0.1", 0,
     "overfit_one_batch: the loss to reach"},
    {"threads", DAGRUN_PARAM_INT, "0", 0, "CPU threads (0: one per CPU)"},
    {"prefetch", DAGRUN_PARAM_INT, "2", 0,
     "Train batches the loader's thread prepares ahead (0: made on the "
     "training thread)"},
    {"peak_tflops", DAGRUN_PARAM_FLOAT, "0", 0,
     "The hardware's peak TFLOP/s, for the mfu metric (0: unknown, no mfu); "
     "in a gang, one rank's"},
    {"samples", DAGRUN_PARAM_INT, "3", 0,
     "Texts generated at the end, into out/samples.txt"},
    {"sample_prompt", DAGRUN_PARAM_STRING, "", 0,
     "Prompt of the samples (empty: start of a document)"},
    {"sample_tokens", DAGRUN_PARAM_INT, "64", 0, "Tokens per sample"},
    {"temperature", DAGRUN_PARAM_FLOAT, "0.8", 0, "Sampling temperature"},
    {"top_k", DAGRUN_PARAM_INT, "40", 0, "Sample among the k likeliest"},
    TEXTGEN_PARAM_SPECS,
    {"device", DAGRUN_PARAM_STRING, "auto", 0,
     "cpu, cuda (BF16 compute, FP32 master weights and optimizer state; in "
     "a gang, one GPU per rank over NCCL), or auto (cuda when dagrun has "
     "CUDA and a GPU is present, in a gang on every rank, else cpu)"},
    {"recompute", DAGRUN_PARAM_STRING, "none", 0,
     "Activation recomputation to save memory: none, gelu (the MLP's GELU "
     "output; a Llama's SwiGLU output) or block (each block's forward again "
     "in backward); the same gradients (on the CPU bit for bit), for both "
     "model families"},
    {"autocast", DAGRUN_PARAM_STRING, "none", 0,
     "CPU engine: none (fp32) or bf16 (the linear layers' and the head's "
     "matrix products on operands rounded to bfloat16, fp32 accumulation: "
     "an emulation of "
     "AVX-512 BF16's numerics, not its speed); the GPU engine computes in "
     "BF16 already"},
    {"dropout", DAGRUN_PARAM_FLOAT, "0", 0,
     "Dropout probability on the attention probabilities and the residual "
     "branches, in training steps only (CPU engine: device auto means cpu "
     "with it; not in a gang)"},
    {"deterministic", DAGRUN_PARAM_BOOL, "false", 0,
     "device cuda: fixed-order reductions, so that two runs with one seed "
     "give the same bits (the CPU engine always is)"},
    {"zero_stage", DAGRUN_PARAM_INT, "1", 0,
     "In a gang (launcher: mpirun or srun): ZeRO stage 0 (plain data "
     "parallel), 1 (optimizer state sharded), 2 (+ gradients), 3 (+ "
     "parameters, gathered a layer at a time); ignored by one process. "
     "With tensor_parallel or pipeline_parallel, over the data-parallel "
     "replicas: 0, 1, 2 or 3 (each rank keeps 1/D of its part's "
     "parameters between steps: beside tensor_parallel its shards', or "
     "with pipeline_parallel too its stage's part of them, gathered a "
     "layer at a time on CPU ranks, whole for the step on GPU ranks; "
     "beside pipeline_parallel alone its stage's, gathered whole for the "
     "step, on CPU or GPU ranks)"},
    {"pipeline_parallel", DAGRUN_PARAM_INT, "1", 0,
     "Pipeline stages (CPU or GPU ranks, GPT-2 and Llama models): the "
     "layers cut "
     "into this many contiguous stages, one a rank; world_size must be a "
     "multiple of it (world_size / pipeline_parallel data-parallel "
     "replicas of the pipeline) and it must divide n_layer; grad_accum is "
     "the micro-batch count. 1: no pipeline"},
    {"pipeline_schedule", DAGRUN_PARAM_STRING, "1f1b", 0,
     "With pipeline_parallel: 1f1b (one forward, one backward; at most "
     "P - s micro-batches' activations on stage s) or gpipe (all forwards, "
     "then all backwards)"},
    {"tensor_parallel", DAGRUN_PARAM_INT, "1", 0,
     "Tensor-parallel ranks (CPU ranks, GPT-2 and Llama models; with "
     "device: cuda one group of GPU ranks, world_size = "
     "tensor_parallel; Megatron-LM's split): each block's heads and MLP "
     "columns, and the "
     "vocabulary, cut over this many ranks of one node; it must divide "
     "n_head (a Llama's n_kv_head and intermediate_size too) and the "
     "vocabulary padded to a multiple of 64, and world_size must be a "
     "multiple of it (of it x pipeline_parallel with pipeline stages of "
     "tensor groups, scheduled by pipeline_schedule): the rest are "
     "data-parallel "
     "replicas. 1: none"},
    {"zero_bucket", DAGRUN_PARAM_INT, "0", 0,
     "In a gang at stages 0-1: floats in a gradient bucket, all-reduced "
     "while backward goes on (0: 1048576). Stages 2-3 reduce a layer "
     "(group) at a time"},
    {NULL, 0, NULL, 0, NULL},
};

/* The params with a fixed set of values: trainrun.h's arrays, which
 * trainrun_init maps the values with, so the check and the meaning
 * cannot drift. */
/* clang-format off */
static const dagrun_param_choice choices[] = {
    TRAINKIT_MODEL_CHOICES,
    TRAINKIT_OPTIM_CHOICES,
    {"schedule", trainrun_schedule_names},
    {"spike_policy", trainrun_spike_policy_names},
    {"device", engine_device_names},
    {"recompute", engine_recompute_names},
    {"autocast", trainrun_autocast_names},
    {"zero_stage", trainrun_zero_stage_names},
    {"pipeline_schedule", pipeline_schedule_names},
    {NULL, NULL},
};
/* clang-format on */

/* An int param's value at check time into *v: 1, or 0 when it is not
 * known (a value of run time). */
static int known_int(const dagrun_check_task *t, const char *name, int64_t *v) {
  const char *z = t->param(t, name, NULL);
  char *end;
  if (!z)
    return 0;
  long long x = strtoll(z, &end, 10);
  if (*end)
    return 0;
  *v = x;
  return 1;
}

/* The model's shape as the check can know it: the preset with the
 * task's overrides, each field -1 where a value of run time sets it.
 * 0, or -1 when the shape is the run's to find (init_from, a model of
 * run time). */
static int known_shape(const dagrun_check_task *t, gpt_config *cfg) {
  int deferred = 0;
  const char *from = t->param(t, "init_from", &deferred);
  const char *model = t->param(t, "model", NULL);
  char err[512];
  if (deferred || (from && *from) || !model ||
      gpt_config_preset(model, cfg, err, sizeof err) != 0)
    return -1;
  static const char *const names[] = {"n_layer", "n_head", "n_kv_head",
                                      "intermediate_size"};
  int *fields[] = {&cfg->n_layer, &cfg->n_head, &cfg->n_kv_head,
                   &cfg->intermediate};
  for (int i = 0; i < 4; i++) {
    int64_t v = 0;
    if (!known_int(t, names[i], &v))
      *fields[i] = -1;
    else if (v > 0)
      *fields[i] = (int)v;
  }
  if (cfg->n_kv_head == 0)
    cfg->n_kv_head = cfg->n_head;
  return 0;
}

/* The model-parallel shape against T and P at check time, in
 * tensor_check's, pipeline_check's and mploop_check's words (plugin.h's
 * check). A value of run time (a template) is left to the start, which
 * checks every one of these again on the shape it loads, the padded
 * vocabulary (the tokenizer's) among them. */
static int check(const dagrun_check_task *t, const char **param, char *err,
                 size_t errlen) {
  int64_t T = 1, P = 1;
  gpt_config cfg;
  if (!known_int(t, "tensor_parallel", &T) ||
      !known_int(t, "pipeline_parallel", &P) || T < 1 || P < 1 ||
      (T == 1 && P == 1))
    return 0;
  /* mploop_check's words: the layout's param and its parts. */
  const char *name = T > 1 && P > 1 ? "tensor_parallel x pipeline_parallel"
                     : T > 1        ? "tensor_parallel"
                                    : "pipeline_parallel";
  long long K = (long long)(T * P);
  if (t->world_size == 1 || t->world_size % K != 0) {
    *param = t->world_size == 1
                 ? (T > 1 ? "tensor_parallel" : "pipeline_parallel")
                 : "world_size";
    if (t->world_size == 1)
      snprintf(err, errlen,
               "%s %lld needs a gang of %lld CPU ranks: set world_size: %lld "
               "and launcher: mpirun (or srun) on this task",
               name, K, K, K);
    else
      snprintf(err, errlen,
               "world_size %d is not a multiple of %s %lld (the gang is "
               "data-parallel replicas of %s %s each)",
               t->world_size, name, K, name, T > 1 ? "ranks" : "stages");
    return 1;
  }
  if (known_shape(t, &cfg) != 0)
    return 0;
  int llama = cfg.family == GPT_FAMILY_LLAMA, tp = T > 1;
  if (tp && cfg.n_head > 0 && cfg.n_head % T != 0) {
    *param = "tensor_parallel";
    snprintf(err, errlen,
             "tensor_parallel %lld does not divide the model's %d heads "
             "(each rank gets n_head / tensor_parallel whole heads)",
             (long long)T, cfg.n_head);
    return 1;
  }
  if (tp && llama &&
      ((cfg.n_kv_head > 0 && cfg.n_kv_head % T != 0) ||
       (cfg.intermediate > 0 && cfg.intermediate % T != 0))) {
    *param = "tensor_parallel";
    snprintf(err, errlen,
             "tensor_parallel %lld does not divide the model's %d key/value "
             "heads and its intermediate_size %d (each rank gets "
             "n_kv_head / tensor_parallel whole key/value heads and "
             "intermediate_size / tensor_parallel SwiGLU columns)",
             (long long)T, cfg.n_kv_head, cfg.intermediate);
    return 1;
  }
  if (P > 1 && cfg.n_layer > 0 && cfg.n_layer % P != 0) {
    *param = "pipeline_parallel";
    snprintf(err, errlen,
             "pipeline_parallel %lld does not divide the model's %d layers "
             "(each stage gets n_layer / pipeline_parallel contiguous "
             "layers)",
             (long long)P, cfg.n_layer);
    return 1;
  }
  return 0;
}

static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  trainrun r = {.ctx = ctx, .h = h};
  if (trainrun_init(&r) != 0)
    return EXIT_BAD_PARAMS;
  /* A gang of any size, 1 included, once a launcher started it. */
  int nranks = gangloop_ranks(), P = 1, T = 1;
  if (pipeloop_param(&r, &P) != 0 || tploop_param(&r, &T) != 0) {
    trainrun_free(&r);
    return EXIT_BAD_PARAMS;
  }
  int status = T > 1    ? tploop_run(&r, nranks, T, P)
               : P > 1  ? pipeloop_run(&r, nranks, P)
               : nranks ? gangloop_run(&r, nranks)
                        : singleloop_run(&r);
  trainrun_free(&r);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "train",
    "1.0.0",
    "Trains a GPT on token files with dagrun's engine (CPU or one GPU): "
    "AdamW or Lion, "
    "warmup + cosine, clipping, spike guard, exact resume; data-parallel "
    "with ZeRO in a gang.",
    params,
    run,
    choices,
    check,
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
