/* The train stage's one-process loop; see singleloop.h. */
#include "singleloop.h"

#include "ckpt/ckpt.h"
#include "common/stagekit.h"
#include "data/tokfile.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "zero/zero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Before the loop ---- */

/* The CPU engine's recompute and autocast, and its activations at
 * (batch_size, seq_len) under that recompute beside what no
 * recomputation takes (gpt_memory_estimate). */
static void log_cpu_memory(trainrun *r) {
  gpt_memory with, none;
  const gpt_config *cfg = gpt_get_config(r->model);
  gpt_memory_estimate(cfg, r->c.B, r->c.m.T, 0, (gpt_recompute)r->c.recompute,
                      &with);
  gpt_memory_estimate(cfg, r->c.B, r->c.m.T, 0, GPT_RECOMPUTE_NONE, &none);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "recompute: %s; autocast: %s; activations %.2f MiB a "
            "micro-batch (%.2f MiB with recompute: none)",
            engine_recompute_name(r->c.recompute),
            trainrun_autocast_names[r->c.autocast], with.acts / 1048576.0,
            none.acts / 1048576.0);
}

/* Picks the device, sets up the run and makes the engine on it.
 * why gets the device's reason for the summary. Returns 0 or the exit
 * status. */
static int start_engine(trainrun *r, engine_device *dev, char *why,
                        size_t whylen) {
  dagrun_ctx *ctx = r->ctx;
  const dagrun_host *h = r->h;
  char err[2048];
  if (engine_pick(r->c.device, dev, why, whylen, err, sizeof err) != 0) {
    h->fail(ctx, "%s", err);
    return EXIT_BAD_PARAMS;
  }
  h->log(ctx, DAGRUN_LOG_INFO, "device: %s (%s)",
         *dev == ENGINE_CUDA ? "cuda" : "cpu", why);
  if (trainrun_setup(r, 1, 0) != 0)
    return EXIT_FAILED;
  if (*dev == ENGINE_CPU)
    log_cpu_memory(r);
  engine_options eo = {.B = r->c.B,
                       .T = r->c.m.T,
                       .opt = r->c.opt,
                       .recompute = r->c.recompute,
                       .deterministic = r->c.deterministic};
  if (engine_create(*dev, r->model, r->opt, &eo, &r->eng, err, sizeof err) !=
      0) {
    h->fail(ctx, "%s", err);
    return EXIT_FAILED;
  }
  h->output(ctx, "device", *dev == ENGINE_CUDA ? "cuda" : "cpu");
  if (*dev == ENGINE_CUDA) {
    engine_memory em = {0};
    engine_memory_get(r->eng, &em, err, sizeof err);
    h->log(ctx, DAGRUN_LOG_INFO,
           "training on %s; recompute: %s; "
           "deterministic: %s; %.1f MiB of device memory allocated, %.1f of "
           "%.1f MiB in use on the device",
           engine_describe(r->eng), engine_recompute_name(r->c.recompute),
           r->c.deterministic ? "true" : "false", em.allocated / 1048576.0,
           em.device_used / 1048576.0, em.device_total / 1048576.0);
    h->metric(ctx, "gpu_allocated_bytes", (double)em.allocated, 0);
    h->metric(ctx, "gpu_device_used_bytes", (double)em.device_used, 0);
  }
  return 0;
}

/* Unigram entropy (nats) of the train tokens: the loss of a model that
 * knows only token frequencies. The trained model must end well below. */
static double unigram_entropy(trainrun *r, uint64_t *ntokens) {
  uint32_t V = (uint32_t)r->c.m.cfg.vocab_size;
  uint64_t *count = calloc(V, sizeof *count), total = 0;
  if (!count)
    return NAN;
  for (size_t i = 0; i < r->data.ntrain; i++) {
    tokfile *f = NULL;
    char err[512];
    if (tokfile_open(r->data.train[i], &f, err, sizeof err) != 0)
      continue;
    const tokfile_info *in = tokfile_header(f);
    const void *t = tokfile_tokens(f);
    for (uint64_t k = 0; k < in->n_tokens; k++) {
      uint32_t id = tokfile_get(t, in->token_bytes, k);
      if (id < V) {
        count[id]++;
        total++;
      }
    }
    tokfile_close(f);
  }
  double H = 0;
  for (uint32_t v = 0; v < V; v++)
    if (count[v]) {
      double p = (double)count[v] / (double)total;
      H -= p * log(p);
    }
  free(count);
  *ntokens = total;
  return H;
}

/* The model's shape and memory and the corpus's unigram entropy, in the
 * log; returns the entropy. */
static double log_model(trainrun *r) {
  const dagrun_host *h = r->h;
  const gpt_config *mc = gpt_get_config(r->model);
  size_t np = gpt_num_params(r->model);
  size_t opt_bytes = optim_state_floats(r->opt) * sizeof(float);
  h->log(r->ctx, DAGRUN_LOG_INFO,
         "model %s: %d layers, %d heads, width %d, context %d, vocab %d "
         "(padded %d): %.2fM parameters; params + grads + optimizer %.1f MiB",
         r->c.m.name, mc->n_layer, mc->n_head, mc->n_embd, mc->block_size,
         mc->vocab_size, mc->padded_vocab, np / 1e6,
         (2.0 * np * sizeof(float) + opt_bytes) / 1048576.0);
  h->metric(r->ctx, "parameters", (double)np, 0);
  uint64_t corpus_tokens = 0;
  double H1 = unigram_entropy(r, &corpus_tokens);
  h->log(r->ctx, DAGRUN_LOG_INFO,
         "%llu train tokens; unigram entropy %.4f nats (the loss of a model "
         "that knows only token frequencies)",
         (unsigned long long)corpus_tokens, H1);
  return H1;
}

/* A gang's sharded checkpoint (zero.h) resumed by one process: read
 * whole into the model and optimizer. It holds no loader position: the
 * batches of the steps done are replayed, which continues the gang's data
 * order exactly when this run's batch is the gang's global batch
 * (batch_size = world_size x the gang's, grad_accum the gang's, or 1 with
 * grad_accum x that batch_size). The spike guard's
 * window starts empty (a gang keeps none). */
static int resume_sharded(trainrun *r, const char *dir, char *err,
                          size_t errlen) {
  int64_t step = 0;
  if (zero_read_whole(dir, r->model, r->opt, r->c.opt.kind, &step, err,
                      errlen) != 0)
    return -1;
  for (int64_t k = 0; k < step * r->c.accum; k++)
    loader_next(r->train, r->inputs, r->targets);
  r->st.step = step;
  r->st.tokens = (uint64_t)step * r->c.B * r->c.m.T * r->c.accum;
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "%s is a gang's sharded checkpoint: read whole, the data "
            "loader replayed to step %lld",
            dir, (long long)step);
  return 0;
}

/* resume: auto / never / a directory, loaded into the host model and
 * optimizer and then the engine's device. 0 (resumed or fresh), or -1
 * when the checkpoint cannot be used. */
static int resume(trainrun *r) {
  char err[1024];
  char *dir = trainrun_resume_dir(r);
  if (!dir)
    return 0;
  /* A checkpoint found by auto passed ckpt_find_latest's checks. */
  if (strcmp(r->c.resume, "auto") != 0 &&
      trainrun_verify_resume(dir, err, sizeof err) != 0) {
    r->h->fail(r->ctx, "resume: %s", err);
    free(dir);
    return -1;
  }
  if ((zero_is_sharded(dir)
           ? resume_sharded(r, dir, err, sizeof err)
           : trainstate_load(dir, &r->st, err, sizeof err)) != 0) {
    r->h->fail(r->ctx, "resume from %s: %s", dir, err);
    free(dir);
    return -1;
  }
  if (trainrun_check_resumed(r, dir, err, sizeof err) != 0) {
    r->h->fail(r->ctx, "resume: %s", err);
    free(dir);
    return -1;
  }
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "resumed from %s at step %lld%s", dir,
            (long long)r->st.step,
            r->init_dir ? " (a checkpoint of this task comes before "
                          "init_from)"
                        : "");
  snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", dir);
  free(dir);
  /* Whatever the step of the checkpoint (a run cancelled before its
   * first step saves one at step 0), its weights are now the host's:
   * the device gets them too. */
  if (engine_load_from_host(r->eng, err, sizeof err) != 0) {
    r->h->fail(r->ctx, "resume: %s", err);
    return -1;
  }
  return 0;
}

/* Pre-flight: at initialization every token is about equally likely, so
 * the loss is close to ln(vocab); far off means a broken model or data.
 * The batch is peeked with a copy of the loader position. */
static int preflight(trainrun *r) {
  const dagrun_host *h = r->h;
  char err[2048];
  double loss = 0;
  trainrun_peek_batch(r);
  if (engine_loss(r->eng, r->inputs, r->targets, &loss, err, sizeof err) != 0) {
    h->fail(r->ctx, "first forward pass: %s", err);
    return -1;
  }
  trainrun_report_init_loss(r, loss);
  if (!isfinite(loss)) {
    h->fail(r->ctx, "loss at initialization is %g", loss);
    return -1;
  }
  /* A model from init_from has learned: its loss is meant to be far
   * below ln(vocab). */
  if (fabs(loss - r->lnV) > 0.5 && !r->init_dir)
    h->log(r->ctx, DAGRUN_LOG_WARN,
           "loss at initialization %.3f is far from ln(vocab) %.3f", loss,
           r->lnV);
  return 0;
}

/* ---- The loop ---- */

/* The data-wait watch: data wait as a share of step time, summed over
 * windows of DW_WINDOW steps (and the last, shorter one when it has at
 * least DW_MIN steps); above DW_SHARE it warns, at most once every
 * DW_QUIET steps. */
#define DW_WINDOW 50
#define DW_MIN 10
#define DW_SHARE 0.05
#define DW_QUIET 1000

typedef struct data_watch {
  double data, total; /* seconds in the window */
  int n;              /* steps in the window */
  int64_t next_warn;  /* no warning before this step */
} data_watch;

static void watch_data(trainrun *r, data_watch *w, int64_t step, double data_s,
                       double step_s) {
  w->data += data_s;
  w->total += step_s;
  w->n++;
  if (w->n < DW_WINDOW && !(step == r->c.steps && w->n >= DW_MIN))
    return;
  double share = w->total > 0 ? w->data / w->total : 0;
  if (share > DW_SHARE && step >= w->next_warn) {
    char advice[400];
    if (r->c.prefetch == 0)
      snprintf(advice, sizeof advice,
               "the batches are made on the training thread (train param "
               "prefetch is 0): set prefetch: 2 so that the loader's thread "
               "prepares them ahead");
    else
      snprintf(advice, sizeof advice,
               "raise the loader's prefetch depth (train param prefetch, now "
               "%d) if the wait comes in bursts; if it is steady, the "
               "loader's thread makes batches slower than the model trains "
               "on them: put the token files on faster storage (local disk, "
               "page cache) or use fewer, larger shards",
               r->c.prefetch);
    r->h->log(r->ctx, DAGRUN_LOG_WARN,
              "data wait is %.0f%% of step time (steps %lld-%lld: %.2f ms of "
              "%.2f ms a step): %s",
              100 * share, (long long)(step - w->n + 1), (long long)step,
              1e3 * w->data / w->n, 1e3 * w->total / w->n, advice);
    w->next_warn = step + DW_QUIET;
  }
  w->data = w->total = 0;
  w->n = 0;
}

/* The checkpoint of r->st: on the GPU the host model and optimizer are
 * brought up to date first, since the checkpoint is the CPU engine's
 * format whatever the device. 0 or -1 with err. */
static int save_checkpoint(trainrun *r, char *err, size_t errlen) {
  if (r->eng && engine_sync_to_host(r->eng, err, errlen) != 0)
    return -1;
  if (trainstate_save(r->ckpt_dir, &r->st, r->last_ckpt, sizeof r->last_ckpt,
                      err, errlen) != 0)
    return -1;
  int removed = ckpt_prune(r->ckpt_dir, (int)r->c.keep);
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "checkpoint step %lld: %s%s",
            (long long)r->st.step, r->last_ckpt,
            removed > 0 ? " (older ones pruned)" : "");
  return 0;
}

/* trainrun_validate's fn: ld's batches on the engine's device. */
static int engine_score(void *arg, trainrun *r, loader *ld, double *loss,
                        char *err, size_t errlen) {
  (void)arg;
  return engine_eval_loss(r->eng, ld, (uint64_t)r->c.eval_batches, loss, err,
                          errlen);
}

/* Validation on the engine's device; NAN without validation. */
static double evaluate(trainrun *r, int64_t step) {
  trainrun_lm_eval(
      r, engine_get_device(r->eng) == ENGINE_CPU ? r->model : NULL, step);
  return trainrun_validate(r, step, 1, engine_score, NULL);
}

/* What a step does after its gradients. */
enum { STEP_FAILED = -1, STEP_SKIP = 0, STEP_APPLY = 1, STEP_ROLLED_BACK = 2 };

/* Back to the last checkpoint's weights and optimizer, but the data
 * stays where it is: the batches since are skipped. STEP_SKIP when
 * there is no checkpoint yet. */
static int rollback(trainrun *r) {
  char err[2048];
  if (!r->last_ckpt[0]) {
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "no checkpoint yet: update skipped");
    return STEP_SKIP;
  }
  loader *keep = r->st.train;
  uint64_t events = r->guard.events;
  r->st.train = NULL;
  if (trainstate_load(r->last_ckpt, &r->st, err, sizeof err) != 0 ||
      engine_load_from_host(r->eng, err, sizeof err) != 0) {
    r->h->fail(r->ctx, "rollback to %s: %s", r->last_ckpt, err);
    return STEP_FAILED;
  }
  r->st.train = keep;
  r->guard.events = events;
  r->h->log(r->ctx, DAGRUN_LOG_INFO, "rolled back to step %lld",
            (long long)r->st.step);
  return STEP_ROLLED_BACK;
}

/* The loss-spike guard on this step's loss and norm, and its policy. */
static int guard_step(trainrun *r, int64_t step, double loss, double gnorm) {
  char err[2048];
  double z = 0;
  if (!r->c.spike_on || !spike_check(&r->guard, loss, gnorm, &z))
    return STEP_APPLY;
  trainrun_spike_report(r, step, loss, gnorm, z, 0);
  switch (r->c.spike.policy) {
  case SPIKE_SKIP:
    return STEP_SKIP;
  case SPIKE_RESET:
    if (engine_optim_reset(r->eng, err, sizeof err) != 0) {
      r->h->fail(r->ctx, "step %lld: %s", (long long)step, err);
      return STEP_FAILED;
    }
    spike_forget(&r->guard);
    return STEP_SKIP;
  case SPIKE_ROLLBACK:
    return rollback(r);
  default:
    return STEP_APPLY; /* lower_lr: spike_lr_factor lowers it */
  }
}

/* The optimizer phase: clipping, the guard, the update. STEP_APPLY (or
 * STEP_SKIP) with *lr and *gnorm as reported, STEP_ROLLED_BACK or
 * STEP_FAILED. */
static int update(trainrun *r, int64_t step, double loss, double *lr,
                  double *gnorm) {
  const dagrun_host *h = r->h;
  char err[2048];
  if (engine_clip_grad_norm(r->eng, r->c.grad_clip, gnorm, err, sizeof err) !=
      0) {
    h->fail(r->ctx, "step %lld: %s", (long long)step, err);
    return STEP_FAILED;
  }
  *lr = lr_at(&r->c.sched, step);
  int apply = guard_step(r, step, loss, *gnorm);
  if (apply == STEP_FAILED || apply == STEP_ROLLED_BACK)
    return apply;
  /* A non-finite loss or gradient never reaches the weights, whatever
   * the policy (lower_lr would apply it, none would not look). */
  if (trainrun_count_step(r, step + 1, loss, *gnorm, 1, err, sizeof err)) {
    h->fail(r->ctx, "%s", err);
    return STEP_FAILED;
  }
  if (!isfinite(loss) || !isfinite(*gnorm))
    apply = STEP_SKIP;
  if (apply) {
    *lr *= spike_lr_factor(&r->guard);
    if (engine_step(r->eng, (float)*lr, err, sizeof err) != 0) {
      h->fail(r->ctx, "step %lld: %s", (long long)step, err);
      return STEP_FAILED;
    }
  }
  return apply;
}

/* One optimizer step and its metrics. Where its time goes: data wait
 * (blocked on the loader), forward, backward (trainkit_forward_backward
 * measures them; see trainkit.h for why host clocks are right on the
 * CPU and CUDA events on the GPU), optimizer (zeroing the gradients,
 * clipping, the spike guard, the update) and communication (none in one
 * process). 0, 1 when rolled back (no step done), or -1. */
static int train_step(trainrun *r, trainrun_faults *fault,
                      trainrun_faults *nan_fault, data_watch *dw) {
  const dagrun_host *h = r->h;
  char err[2048];
  int64_t step = r->st.step;
  double t_step = clock_monotonic();
  trainkit_times tt;
  double loss = 0;
  if (engine_forward_backward(r->eng, r->c.overfit ? NULL : r->train, r->inputs,
                              r->targets, r->c.accum, &loss, &tt, err,
                              sizeof err) != 0) {
    h->fail(r->ctx, "step %lld: %s", (long long)step, err);
    return -1;
  }
  double tk = clock_monotonic();
  if (trainrun_faults_take(fault, step + 1)) {
    h->log(r->ctx, DAGRUN_LOG_WARN,
           "step %lld: injected bad batch "
           "(DAGRUN_FAULT_SPIKE_STEPS)",
           (long long)(step + 1));
    loss *= 20;
    if (engine_scale_grads(r->eng, 100, err, sizeof err) != 0) {
      h->fail(r->ctx, "step %lld: %s", (long long)step, err);
      return -1;
    }
    stagekit_lap(&tk); /* fault injection is no phase of a real step */
  }
  if (trainrun_faults_take(nan_fault, step + 1))
    loss = NAN;
  double lr = 0, gnorm = 0;
  int rc = update(r, step, loss, &lr, &gnorm);
  if (rc == STEP_FAILED)
    return -1;
  if (rc == STEP_ROLLED_BACK)
    return 1;
  double t_opt = tt.zero + stagekit_lap(&tk);
  double step_s = tk - t_step;
  r->st.step++;
  r->st.tokens += r->tokens_per_step;
  r->last_loss = loss;
  trainrun_times times = {tt.data, tt.forward, tt.backward, t_opt, 0, step_s};
  trainrun_report_step(r, loss, lr, gnorm, &times, 1);
  watch_data(r, dw, r->st.step, tt.data, step_s);
  trainrun_progress(r, loss, 1);
  return 0;
}

/* The steps to r->c.steps, with validation and checkpoints on their
 * cadences; a stop request checkpoints and fails the task. 0 or -1. */
static int train_loop(trainrun *r) {
  const dagrun_host *h = r->h;
  char err[2048];
  data_watch dwatch = {0};
  trainrun_faults fault, nan_fault;
  trainrun_faults_read(&fault);
  trainrun_faults_read_nan(&nan_fault);
  trainrun_loop_start(r, (size_t)r->c.B * r->c.m.T * r->c.accum);
  while (r->st.step < r->c.steps) {
    int64_t step = r->st.step;
    if (h->cancelled(r->ctx)) {
      if (save_checkpoint(r, err, sizeof err) != 0)
        h->fail(r->ctx, "stopped at step %lld, and the checkpoint failed: %s",
                (long long)step, err);
      else
        h->fail(r->ctx,
                "stopped at step %lld; checkpoint %s (resume: auto "
                "continues from it)",
                (long long)step, r->last_ckpt);
      return -1;
    }
    int rc = train_step(r, &fault, &nan_fault, &dwatch);
    if (rc < 0)
      return -1;
    if (rc > 0)
      continue; /* rolled back */
    if (!r->c.overfit && r->c.eval_every && r->st.step % r->c.eval_every == 0 &&
        r->st.step < r->c.steps) {
      r->val_loss = evaluate(r, r->st.step);
      if (r->val_failed)
        return -1;
      h->log(r->ctx, DAGRUN_LOG_INFO, "step %lld: loss %.4f, val loss %.4f",
             (long long)r->st.step, r->last_loss, r->val_loss);
    }
    if (r->c.ckpt_every && r->st.step % r->c.ckpt_every == 0 &&
        r->st.step < r->c.steps && save_checkpoint(r, err, sizeof err) != 0) {
      h->fail(r->ctx, "checkpoint: %s", err);
      return -1;
    }
  }
  return 0;
}

/* ---- After the loop ---- */

/* overfit_one_batch: the one batch's loss must have fallen below the
 * target. 0, or -1 (failed). */
static int check_overfit(trainrun *r) {
  char err[2048];
  double l = NAN;
  if (engine_loss(r->eng, r->inputs, r->targets, &l, err, sizeof err) != 0)
    l = NAN;
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "overfit_one_batch: loss %.4f after "
            "%lld steps (target %g)",
            l, (long long)r->c.steps, r->c.overfit_target);
  if (!(l < r->c.overfit_target)) {
    r->h->fail(r->ctx,
               "overfit_one_batch: loss %.4f did not fall below %g "
               "in %lld steps: the model, data or learning rate is "
               "broken",
               l, r->c.overfit_target, (long long)r->c.steps);
    return -1;
  }
  r->last_loss = l;
  return 0;
}

/* The final checkpoint, samples, the log's last line, summary.json and
 * the outputs. 0 or -1. */
static int finish(trainrun *r, engine_device dev, const char *why, double H1,
                  double train_s) {
  const dagrun_host *h = r->h;
  char err[2048];
  if (save_checkpoint(r, err, sizeof err) != 0) {
    h->fail(r->ctx, "final checkpoint: %s", err);
    return -1;
  }
  if (trainrun_check_end(r) != 0)
    return -1;
  trainrun_samples(r, r->model);
  double tps = trainrun_tokens_per_s(r, train_s);
  h->log(r->ctx, DAGRUN_LOG_INFO,
         "done: %lld steps, %.0f tokens/s; loss %.4f, val loss %.4f, unigram "
         "entropy %.4f; %llu loss spikes; peak RSS %.0f MiB",
         (long long)r->st.step, tps, r->last_loss, r->val_loss, H1,
         (unsigned long long)r->guard.events, stagekit_peak_rss() / 1048576.0);
  cJSON *s = trainrun_summary_start(r, gpt_num_params(r->model));
  trainrun_summary_losses(r, s);
  cJSON_AddNumberToObject(s, "unigram_entropy", H1);
  trainrun_summary_rates(r, s, tps);
  cJSON_AddNumberToObject(s, "peak_rss_bytes", (double)stagekit_peak_rss());
  cJSON_AddStringToObject(s, "device", dev == ENGINE_CUDA ? "cuda" : "cpu");
  cJSON_AddStringToObject(s, "device_reason", why);
  engine_memory em;
  if (dev == ENGINE_CUDA &&
      engine_memory_get(r->eng, &em, err, sizeof err) == 0) {
    cJSON_AddNumberToObject(s, "gpu_allocated_bytes", (double)em.allocated);
    cJSON_AddNumberToObject(s, "gpu_device_used_bytes", (double)em.device_used);
  }
  return trainrun_finish(r, s, r->last_ckpt, r->ckpt_dir, NULL, NULL);
}

int singleloop_run(trainrun *r) {
  engine_device dev;
  char why[768];
  int status = start_engine(r, &dev, why, sizeof why);
  if (status != 0)
    return status;
  trainrun_set_config(r);
  double H1 = log_model(r);
  r->lnV = log((double)gpt_get_config(r->model)->vocab_size);
  if (resume(r) != 0 || (r->st.step == 0 && preflight(r) != 0))
    return EXIT_FAILED;
  if (r->c.overfit)
    loader_next(r->train, r->inputs, r->targets); /* the one batch */
  if (train_loop(r) != 0)
    return EXIT_FAILED;
  double train_s = clock_monotonic() - r->t_start;
  if (!r->c.overfit)
    r->val_loss = evaluate(r, r->st.step);
  else if (check_overfit(r) != 0)
    return EXIT_FAILED;
  if (r->val_failed)
    return EXIT_FAILED;
  return finish(r, dev, why, H1, train_s) == 0 ? 0 : EXIT_FAILED;
}
