/*
 * trainrun: the run context the train stage's two loops share, the
 * one-process loop (singleloop.h) and the gang's (gangloop.h). It holds what a
 * run is made of before and after its steps: the params resolved, the
 * token files, the model, the loaders, the checkpoint directory, the
 * loss-spike guard and the training state that checkpoints save; and
 * the pieces both loops report through (validation, step times,
 * progress, samples, summary.json, the task's outputs), so that a gang's
 * rank 0 and one process report alike.
 *
 * Lifetime: trainrun_init reads the params (a bad one fails the task
 * through the host, and the stage exits EXIT_BAD_PARAMS); the loop then
 * calls trainrun_setup, trains, and the stage calls trainrun_free on
 * every path. Everything here is called from the stage's thread.
 *
 * Files: <task>/checkpoints (ckpt_dir) holds the run's checkpoints;
 * trainrun_samples writes out/samples.txt and trainrun_write_summary
 * out/summary.json (atomically: a crash leaves the old one or none).
 *
 * Errors: functions that return int give 0, or -1 once they have failed
 * the task through the host (h->fail) with the reason, unless their
 * comment says they fill an err buffer instead.
 */
#ifndef DAGRUN_TRAIN_TRAINRUN_H
#define DAGRUN_TRAIN_TRAINRUN_H

#include <dagrun/plugin.h>

#include "common/textgen.h"
#include "common/tokdata.h"
#include "common/trainkit.h"
#include "data/dataloader.h"
#include "datamix.h"
#include "engine.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "optim/spike.h"
#include "trainstate.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* The values of the params with a fixed set of them, NULL-terminated.
 * The stage's choices (train.c) and trainrun_init's parsing both use
 * these arrays, so that the check and the meaning cannot drift. */
extern const char *const trainrun_schedule_names[];     /* lr_decay's */
extern const char *const trainrun_spike_policy_names[]; /* "none", then
                                                           spike_policy + 1 */
extern const char *const trainrun_zero_stage_names[];   /* "0" to "3" */
extern const char *const trainrun_autocast_names[];     /* gpt_autocast's */

/* The params, resolved (defaults applied, ranges checked). */
typedef struct trainrun_cfg {
  trainkit_model m; /* data, model, shape, seq_len, init_from */
  const char *resume, *prompt;
  int B, accum, threads, nsamples, sample_tokens;
  int prefetch;
  double peak_tflops;
  int64_t steps, eval_every, eval_batches, ckpt_every, keep;
  optim_config opt;
  lr_schedule sched;
  double grad_clip, overfit_target;
  textgen_opts gen; /* the samples' sampling and stop strings (stop freed
                       by trainrun_free) */
  uint64_t seed;
  int spike_on, overfit;
  spike_config spike;
  engine_want device; /* auto becomes cpu with dropout */
  engine_recompute recompute;
  gpt_autocast autocast; /* the CPU engine's */
  double dropout;
  int deterministic;
} trainrun_cfg;

typedef struct trainrun {
  dagrun_ctx *ctx;
  const dagrun_host *h;
  trainrun_cfg c;
  tokdata data;   /* the token files and the tokenizer (with data_mix,
                     every source's, merged) */
  datamix mix;    /* data_mix's sources; mix.n 0: data's files */
  char *init_dir; /* init_from's model directory, resolved; NULL if none */
  gpt *model;
  optim *opt;  /* one process's; NULL in a gang (ZeRO makes its own) */
  engine *eng; /* one process: the step on the CPU or the GPU (engine.h) */
  loader *train, *val;
  loader_pos val_start;
  /* With two or more data_mix sources, validation is per source: each
   * source's own validation files (NULL: it has none), its loader's
   * start, and its last loss (NAN until scored); r->val is then NULL. */
  loader *src_val[LOADER_MAX_SOURCES];
  loader_pos src_val_start[LOADER_MAX_SOURCES];
  double src_val_loss[LOADER_MAX_SOURCES];
  spike_guard guard;
  train_state st;
  char *config_text; /* config_json's, kept by st; owned */
  char ckpt_dir[4096];
  char last_ckpt[4096];
  uint32_t *inputs, *targets;

  /* The loop's running account, for progress, metrics and the summary
   * (trainrun_loop_start sets it). */
  size_t tokens_per_step; /* the global batch's tokens */
  double fpt;             /* model FLOPs per token (trainrun_flops) */
  double t_start, t_last; /* the loop's start, the last progress */
  int64_t first_step;     /* the step the loop started at (resume) */
  double last_loss, val_loss, lnV; /* init_loss: in st */
  /* Steps whose loss or grad norm was not finite (their updates
   * skipped): in all, and in a row up to the last step. */
  int64_t nonfinite_steps, nonfinite_run;
  /* A validation failed (the task is failed with its message): the loop
   * stops where it can (one process), or at its end (a gang). */
  int val_failed;

  /* eval_text and eval_choices (common/lmeval.h) resolved, NULL when not
   * asked for; lm_tok the data's tokenizer, loaded at their first use;
   * lm_warned once they were found not measurable here. */
  char *lm_text, *lm_choices;
  bpe *lm_tok;
  int lm_warned;
} trainrun;

/* Reads the params into r->c (r->ctx and r->h set by the caller), sets
 * the engine's CPU threads and r->ckpt_dir. */
int trainrun_init(trainrun *r);

/* Opens the token files (data's, or data_mix's sources: then, when
 * every source has a budget, steps is cut to the steps they hold, with
 * a warning), makes the model (init_from's weights or the
 * seed's), the optimizer (one process only, gang 0: a gang's ZeRO makes its
 * own), the spike guard, the train loader over the global batch (nranks x
 * batch_size sequences: in a gang each rank trains on its own rows of it), the
 * validation loader (batches of nranks x batch_size windows, the ones one
 * process of that batch scores: in a gang each rank scores its rows; in
 * one process a split too small for one batch in fewer or shorter ones,
 * as the validate stage; none, with a warning, in a gang then or when
 * there is no validation split; validation files that cannot be read
 * fail) and the batch buffers, and points r->st at them. */
int trainrun_setup(trainrun *r, int nranks, int gang);

/* With each validation: the perplexity of eval_text and the accuracy
 * on eval_choices of model (lmeval.h), as metrics eval_loss,
 * eval_perplexity, mc_accuracy, mc_accuracy_low and mc_accuracy_high at
 * step. model NULL: it is not on the CPU here (a GPU), and a warning
 * says once that they are not measured. A failure is a warning. */
void trainrun_lm_eval(trainrun *r, gpt *model, int64_t step);

/* Frees what setup made (every path; fields NULL or zero are skipped). */
void trainrun_free(trainrun *r);

/* The settings that shape the run, as a JSON object's text for the
 * checkpoints' manifest, into r->config_text and r->st.config_json. */
void trainrun_set_config(trainrun *r);

/* The checkpoint resume asks for, as a path (caller frees), or NULL
 * when there is none: resume: never, or auto and this task has no valid
 * checkpoint (invalid ones and a failed search are warnings). A named
 * one is joined to the DAG's directory when relative, not checked. */
char *trainrun_resume_dir(trainrun *r);
/* A checkpoint that resume names (not auto's, which are checked as they
 * are found): 0, or -1 with err naming dir and what is wrong (not a
 * directory: resume is auto, never or a checkpoint directory; or
 * ckpt_verify's finding). */
int trainrun_verify_resume(const char *dir, char *err, size_t errlen);
/* After resuming from dir at r->st.step: 0, or -1 with err when that is
 * past steps (the run would train nothing and report no loss: steps is
 * the run's total, not the steps to add). */
int trainrun_check_resumed(const trainrun *r, const char *dir, char *err,
                           size_t errlen);

/* The next train batch into r->inputs and r->targets with the loader's
 * position kept, so that training still starts with it (pre-flight). */
void trainrun_peek_batch(trainrun *r);
/* The loss at initialization: logged beside ln(vocab), a metric at step
 * 0 and r->st.init_loss. */
void trainrun_report_init_loss(trainrun *r, double loss);

/* Scores one validation loader: the mean loss of r->c.eval_batches
 * batches of ld from where it is (trainrun_validate sets it to its
 * split's start) into *loss. 0, or -1 with err. In a gang it is
 * collective, and every rank must get the same answer. */
typedef int (*trainrun_score_fn)(void *arg, trainrun *r, loader *ld,
                                 double *loss, char *err, size_t errlen);

/* Validation at step through fn, from each split's start, so that every
 * validation (and a resumed run's) scores the same windows. One source:
 * the val split's windows, as the metric val_loss. Two or more data_mix
 * sources: each source's own windows (the first eval_batches batches of
 * its validation files) as val_loss/<name>, and val_loss their mean
 * weighted by data_weights (the loss on data drawn as training draws
 * it), over the sources that have validation files; the log says each.
 * report 0 (a gang's other ranks): fn runs, nothing is reported, NAN.
 * A failed score fails the task (h->fail, r->val_failed set: the
 * caller stops) and gives NAN, as does nothing scored. */
double trainrun_validate(trainrun *r, int64_t step, int report,
                         trainrun_score_fn fn, void *arg);

/* Fault injection: DAGRUN_FAULT_SPIKE_STEPS="80,120" turns the batches
 * of those steps into bad ones (loss x20, gradients x100), once each, so
 * that tests can provoke the loss-spike guard's policies, as SQLite's
 * fault tests do. Steps are numbered as the metrics number them: step N
 * is the one whose loss is reported at N (the N-th step, 1-based). */
#define TRAINRUN_MAX_FAULTS 16
typedef struct trainrun_faults {
  int64_t step[TRAINRUN_MAX_FAULTS];
  int n;
} trainrun_faults;
void trainrun_faults_read(trainrun_faults *f);
/* The same for DAGRUN_FAULT_NAN_STEPS="5,6" (one process): those steps'
 * losses become NaN, a step whose loss is not finite (the tests' way to
 * one, as a diverging run's steps are). */
void trainrun_faults_read_nan(trainrun_faults *f);
/* Whether step (numbered as the metrics are) is a listed one not yet
 * used; uses it. */
int trainrun_faults_take(trainrun_faults *f, int64_t step);

/* A loss spike the guard found in step (0-based: the steps done before
 * it): logged with what its policy does (in a gang, in_gang, reset and
 * rollback skip the update) and counted in the metrics, all at step + 1,
 * the step its loss is reported at. */
void trainrun_spike_report(trainrun *r, int64_t step, double loss, double gnorm,
                           double z, int in_gang);

/* Skipped non-finite steps in a row after which the run fails: a loss
 * that stays NaN or infinite this long does not come back (its weights
 * or moments are broken), and training on would only burn the budget. */
#define TRAINRUN_MAX_NONFINITE_RUN 10

/* The account of non-finite steps, on every rank with the step's
 * (global) loss and grad norm, after the step numbered step (as its
 * metrics are): a step with either not finite, whose update was skipped,
 * is counted and, when report, warned about. 0, or -1 with err when it
 * is the TRAINRUN_MAX_NONFINITE_RUN-th such step in a row (the caller
 * fails the task). */
int trainrun_count_step(trainrun *r, int64_t step, double loss, double gnorm,
                        int report, char *err, size_t errlen);

/* The end of the loop, before the samples and summary.json (rank 0):
 * fails the task (h->fail, -1) when the final loss, or the last
 * validation's loss when there was validation, is not finite, so that
 * nothing downstream takes its checkpoint; warns when the final loss is
 * above the loss at initialization (the run diverged), without failing.
 * 0 otherwise. */
int trainrun_check_end(trainrun *r);

/* Where a step's time went (seconds), as both loops report it. */
typedef struct trainrun_times {
  double data, forward, backward, optimizer, comm, step;
} trainrun_times;

/* Starts the loop's account at r->st.step: tokens_per_step is the
 * global batch's tokens. */
void trainrun_loop_start(trainrun *r, size_t tokens_per_step);
/* The step's loss, lr, grad norm and time metrics at r->st.step (done),
 * tokens seen (with data_mix, each source's: mix_tokens_<name>) and the
 * achieved model FLOP/s (and MFU when peak_tflops,
 * one device's, is known: against ranks devices' peak). */
void trainrun_report_step(trainrun *r, double loss, double lr, double gnorm,
                          const trainrun_times *t, int ranks);
/* The progress line and tokens_per_s, at most twice a second and at the
 * last step; eta adds the time left to the line. */
void trainrun_progress(trainrun *r, double loss, int eta);
/* The run's tokens a second over train_s seconds of the loop. */
double trainrun_tokens_per_s(const trainrun *r, double train_s);

/* Samples of model's text (textgen.h, seeded by the run's seed) into
 * out/samples.txt and the samples output; a failure is a warning. */
void trainrun_samples(trainrun *r, gpt *model);

/* summary.json's entries, in the order both loops write them: start
 * (steps, tokens, parameters: np, data_mix: datamix_json's), the loop's
 * own, the losses (loss and
 * val_loss, null when there was no validation), then the rates (ln_vocab,
 * init_loss when taken, tokens_per_s: tps, spike_events, nonfinite_steps:
 * the steps skipped for a loss or grad norm that was not finite). */
cJSON *trainrun_summary_start(const trainrun *r, size_t np);
void trainrun_summary_losses(const trainrun *r, cJSON *s);
void trainrun_summary_rates(const trainrun *r, cJSON *s, double tps);

/* Ends the run: adds checkpoint (ckpt), sharded_checkpoint (a gang's:
 * when sharded is not NULL) and tokenizer to s, writes s (then deleted)
 * to out/summary.json atomically and sets the outputs: checkpoint,
 * checkpoints (ckpts), sharded_checkpoints (sharded_dir, a gang's),
 * tokenizer, summary and val_loss. */
int trainrun_finish(trainrun *r, cJSON *s, const char *ckpt, const char *ckpts,
                    const char *sharded, const char *sharded_dir);

#endif /* DAGRUN_TRAIN_TRAINRUN_H */
