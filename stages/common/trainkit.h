/*
 * trainkit: the pieces of a training run that the stages which train
 * (train, batch_sweep, lr_find) share: the model and optimizer params and
 * their parsing, the model from a preset or from init_from, the optimizer
 * over the model's tensors, the train data loader, and one optimizer
 * step's forward and backward passes with gradient accumulation.
 *
 * Functions taking (ctx, h) report what is wrong with h->fail and return
 * -1; the others return -1 with err. Call them from the stage's thread.
 */
#ifndef DAGRUN_TRAINKIT_H
#define DAGRUN_TRAINKIT_H

#include <stddef.h>
#include <stdint.h>

#include <dagrun/plugin.h>

#include "data/dataloader.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "tokdata.h"

/* clang-format off */
/* Param spec entries for a stage's params array: the data, the model
 * (preset, overrides, seq_len) and init_from. */
#define TRAINKIT_MODEL_PARAMS                                                  \
  {"data", DAGRUN_PARAM_STRING, NULL, 1,                                       \
   "The tokenize stage's output directory, e.g. "                              \
   "\"${tasks.tokenize.outputs.dir}\""},                                       \
      TRAINKIT_SHAPE_PARAMS

/* ...the same without data (train has its own, beside data_mix). */
#define TRAINKIT_SHAPE_PARAMS                                                  \
      {"model", DAGRUN_PARAM_STRING, "gpt-tiny", 0,                            \
       "Preset: gpt-tiny, gpt-small, gpt2-124M, gpt2-350M (GPT-2); "           \
       "llama-tiny, llama-small, smollm-135m-shape (Llama: RoPE, RMSNorm, "    \
       "SwiGLU, grouped-query attention, no biases; CPU only for now)"},       \
      {"n_layer", DAGRUN_PARAM_INT, "0", 0, "Layers (0: the preset's)"},       \
      {"n_head", DAGRUN_PARAM_INT, "0", 0,                                     \
       "Attention heads (0: the preset's)"},                                   \
      {"n_embd", DAGRUN_PARAM_INT, "0", 0, "Width (0: the preset's)"},         \
      {"block_size", DAGRUN_PARAM_INT, "0", 0,                                 \
       "Context length (0: the preset's)"},                                    \
      {"n_kv_head", DAGRUN_PARAM_INT, "0", 0,                                  \
       "Llama: key/value heads, dividing n_head (0: the preset's)"},           \
      {"intermediate_size", DAGRUN_PARAM_INT, "0", 0,                          \
       "Llama: SwiGLU width (0: the preset's)"},                               \
      {"rope_theta", DAGRUN_PARAM_FLOAT, "0", 0,                               \
       "Llama: RoPE base (0: the preset's, 10000)"},                           \
      {"norm_eps", DAGRUN_PARAM_FLOAT, "0", 0,                                 \
       "Llama: RMSNorm epsilon (0: the preset's, 1e-5)"},                      \
      {"head", DAGRUN_PARAM_STRING, "preset", 0,                               \
       "Llama: the output head tied to the embedding or untied "               \
       "(lm_head); preset: the preset's"},                                     \
      {"seq_len", DAGRUN_PARAM_INT, "0", 0,                                    \
       "Tokens per training sequence (0: block_size)"},                        \
      {"init_from", DAGRUN_PARAM_STRING, "", 0,                                \
       "A model directory (a checkpoint, a checkpoints dir, a promoted "       \
       "model, a Hugging Face GPT-2 or Llama) whose weights and shape start the run "   \
       "(model and shape params ignored; optimizer fresh)"}

/* ...the optimizer (not its learning rate) and gradient clipping. */
#define TRAINKIT_OPTIM_PARAMS                                                  \
  {"optimizer", DAGRUN_PARAM_STRING, "adamw", 0, "adamw or lion"},             \
      {"beta1", DAGRUN_PARAM_FLOAT, "0.9", 0, "First-moment decay"},           \
      {"beta2", DAGRUN_PARAM_FLOAT, "0", 0,                                    \
       "Second-moment decay (0: 0.95 for adamw, 0.99 for lion)"},              \
      {"eps", DAGRUN_PARAM_FLOAT, "1e-8", 0, "AdamW epsilon"},                 \
      {"weight_decay", DAGRUN_PARAM_FLOAT, "0.1", 0,                           \
       "Decoupled weight decay (of the tensors decay_tensors names)"},         \
      {"decay_tensors", DAGRUN_PARAM_STRING, "matrices", 0,                    \
       "Which tensors decay: matrices (the blocks' weight matrices; not "      \
       "biases, LayerNorms, embeddings) or all_2d (every 2-D tensor, the "     \
       "embeddings too, as nanoGPT and llm.c)"},                               \
      {"grad_clip", DAGRUN_PARAM_FLOAT, "1.0", 0,                              \
       "Global gradient-norm clip (0: off)"}
/* clang-format on */

/* The optimizer param's values, indexed by optim_kind, and decay_tensors'
 * (matrices, all_2d), NULL-terminated. */
extern const char *const trainkit_optimizer_names[];
/* The head param's values: preset, tied, untied. */
extern const char *const trainkit_head_names[];
extern const char *const trainkit_decay_names[];

/* dagrun_param_choice entries for a stage's choices array, beside the
 * param spec entries above: the model presets and the optimizers. */
/* clang-format off */
#define TRAINKIT_MODEL_CHOICES {"model", gpt_preset_names}, \
    {"head", trainkit_head_names}
#define TRAINKIT_OPTIM_CHOICES {"optimizer", trainkit_optimizer_names}, \
    {"decay_tensors", trainkit_decay_names}
/* clang-format on */

typedef struct trainkit_model {
  const char *data;      /* borrowed from the host's params */
  const char *name;      /* preset, or "init_from" once loaded from one */
  const char *init_from; /* "" when none */
  gpt_config cfg;        /* the preset with the overrides; vocab_size and
                            padded_vocab set by trainkit_make_model */
  int seq_len;           /* as given; 0: block_size */
  int T;                 /* tokens per sequence */
} trainkit_model;

/* Reads TRAINKIT_MODEL_PARAMS into m. */
int trainkit_read_model(dagrun_ctx *ctx, const dagrun_host *h,
                        trainkit_model *m);

/* Reads TRAINKIT_OPTIM_PARAMS into o (beta2 defaulted by the kind) and
 * *grad_clip. */
int trainkit_read_optim(dagrun_ctx *ctx, const dagrun_host *h, optim_config *o,
                        double *grad_clip);

/* The learning rate an lr param of 0 means: 1e-3 for AdamW, 1e-4 for
 * Lion. */
double trainkit_default_lr(optim_kind kind);

/* Opens m->data (the tokenize stage's output, relative to the DAG's
 * directory) into td, and sets m->cfg.vocab_size from it. */
int trainkit_open_data(dagrun_ctx *ctx, const dagrun_host *h, trainkit_model *m,
                       tokdata *td);

/* The model to train: with init_from, that directory's weights and shape
 * (m->cfg, m->T and m->name follow it; *init_dir, caller frees, is the
 * resolved directory, which is only read), refused when the data td
 * (borrowed) was tokenized with another tokenizer (tokdata_same_tokenizer);
 * without, a preset's model initialized by seed (*init_dir NULL). Its
 * tensors decay as the decay_tensors param says (gpt_decay_all_2d). Call
 * after trainkit_open_data.
 * Caller destroys *out. */
int trainkit_make_model(dagrun_ctx *ctx, const dagrun_host *h,
                        trainkit_model *m, const tokdata *td, uint64_t seed,
                        gpt **out, char **init_dir);

/* An optimizer over model's tensors, weight decay on those that take it.
 * Caller destroys *out. */
int trainkit_make_optim(const gpt *model, const optim_config *oc, optim **out,
                        char *err, size_t errlen);

/* The train files of td in the random order of seed, batches of (B,T),
 * prefetch of them prepared ahead by the loader's thread; with nsources >
 * 0, the mixture of those sources (dataloader.h) instead of td's files.
 * The test hook DAGRUN_TEST_LOADER_DELAY_MS (dataloader.h: a slow loader)
 * applies. Caller destroys *out. */
int trainkit_train_loader(const tokdata *td, const loader_source *sources,
                          size_t nsources, int B, int T, uint64_t seed,
                          int prefetch, loader **out, char *err, size_t errlen);

/* Where a step's time went, in seconds, summed over its micro-batches:
 * zeroing the gradients, waiting for the loader, forward, backward. The
 * CPU engine is synchronous, so a monotonic clock around each phase
 * measures the work itself; the GPU backend's kernels are asynchronous,
 * and there each phase is to be timed with CUDA events recorded on the
 * stream around it (cudaEventElapsedTime after the step's
 * synchronization), not with host clocks. */
typedef struct trainkit_times {
  double zero, data, forward, backward;
} trainkit_times;

/* One optimizer step's gradients: zeroes them, then for each of accum
 * micro-batches takes the next batch of ld into inputs and targets (B*T
 * each; ld NULL: the batch already there, again), runs the forward and
 * backward passes (scaled 1/accum), and leaves the mean loss in *loss and,
 * when times is not NULL, the time of each phase in *times. 0, or -1 with
 * err (a forward failed: bad ids, out of memory). */
int trainkit_forward_backward(gpt *model, loader *ld, uint32_t *inputs,
                              uint32_t *targets, int B, int T, int accum,
                              double *loss, trainkit_times *times, char *err,
                              size_t errlen);

/* What plain training steps on a model need besides it: an optimizer,
 * the train loader and a batch's buffers (the stages that take a few
 * steps to measure something: batch_sweep, lr_find). */
typedef struct trainkit_stepper {
  gpt *model; /* borrowed */
  optim *opt;
  loader *ld;
  uint32_t *inputs, *targets; /* (B,T) */
  int B, T;
  int accum; /* micro-batches per step (train's grad_accum); init sets 1 */
} trainkit_stepper;

/* Makes s's optimizer (oc), loader (td's train files, seed) and buffers
 * for model. 0, or -1 with err (s freed). */
int trainkit_stepper_init(trainkit_stepper *s, gpt *model,
                          const optim_config *oc, const tokdata *td, int B,
                          int T, uint64_t seed, char *err, size_t errlen);
/* One step on the next accum batches (their mean loss and gradient, as
 * train's grad_accum): forward, backward, clip to grad_clip (0:
 * no clipping), and the update at lr, which is skipped when the loss or
 * the grad norm is not finite. *loss and *norm (before clipping) are
 * set. 0, or -1 with err (a forward failed: out of memory). */
int trainkit_stepper_step(trainkit_stepper *s, double lr, double grad_clip,
                          double *loss, double *norm, char *err, size_t errlen);
void trainkit_stepper_free(trainkit_stepper *s); /* not the model */

/* OpenMP's and OpenBLAS's threads: n (0: one per CPU this process may
 * use). */
void trainkit_set_threads(int n);

/* Writes text to the task's out/<name> (atomically: a temporary name,
 * fsync, rename); *path (caller frees; may be NULL) gets its path. 0, or
 * -1 after failing the attempt, naming the file. */
int trainkit_write_out(dagrun_ctx *ctx, const dagrun_host *h, const char *name,
                       const char *text, char **path);

/* A finder's results: out/<stem>.json, .csv and .svg (trainkit_write_out
 * each; a NULL text is an out-of-memory failure), then *json_path (caller
 * frees) is the JSON's path. */
int trainkit_write_results(dagrun_ctx *ctx, const dagrun_host *h,
                           const char *stem, const char *json, const char *csv,
                           const char *svg, char **json_path);

/* The median of v[0..n) (v is sorted in place); NAN when n is 0. A
 * timing's median over repeats shrugs off the one slow repeat a busy
 * machine gives, where the mean takes it in. */
double trainkit_median(double *v, size_t n);

/* The margin by which a larger micro-batch must beat a smaller one's
 * throughput to be picked: 5%, above the run-to-run noise of a timing on
 * a shared machine. */
#define TRAINKIT_PICK_MARGIN 0.05

/* The micro-batch a throughput sweep picks, from n rows in ascending
 * size: tokens_per_s[i], and eligible[i] (stable, within the target
 * batch). The smallest eligible size, replaced by a larger one only when
 * that one is faster than the pick so far by more than margin (a
 * fraction, TRAINKIT_PICK_MARGIN): a larger batch costs memory for
 * nothing when it is not clearly faster, and two sizes within the noise
 * of each other must not flip the pick from run to run. The index, or -1
 * when no row is eligible. */
int trainkit_pick_batch(const double *tokens_per_s, const int *eligible, int n,
                        double margin);

/* y[0..n) smoothed without lag into out[0..n): a centered moving
 * average, out[i] the mean of y[i-h..i+h] (cut short at the ends), h =
 * half the lag of the exponential moving average of decay beta, i.e.
 * round(beta / (1 - beta) / 2) (24 at 0.98). That forward average trails
 * the data by beta / (1 - beta) points (49 at 0.98): over a learning-rate
 * range test a factor of ~100 in lr, so its minimum sits where the raw
 * loss already diverges. A centered window has no lag; a forward-backward
 * pass of the average (filtfilt) was tried and kept a few points of lag
 * from its end transient. beta 0: out is y. */
void trainkit_smooth_unlagged(const double *y, int n, double beta, double *out);

#endif /* DAGRUN_TRAINKIT_H */
