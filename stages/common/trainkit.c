/*
 * trainkit: what train, batch_sweep and lr_find share (trainkit.h).
 *
 * Contract (trainkit.h has each function's): the params of the model
 * and the optimizer read and checked, the token files opened, the model
 * made from a preset and a seed or from init_from's model directory,
 * the optimizer over the model's tensors, the train loader, one step's
 * forward and backward passes, and the stages' result files written
 * into out/ atomically. Functions that take (ctx, h) fail the task
 * through the host with the reason; the others fill err. Nothing here
 * keeps state between calls but the engine's thread count.
 *
 * Why a shared kit rather than each stage's own: batch_sweep and
 * lr_find measure what train will do, so they must build the very
 * model, optimizer and loader train builds from the same params, or
 * their numbers would not carry over.
 */
#include "trainkit.h"

#include "ckpt/modeldir.h"
#include "lib/clock.h"
#include "lib/fileio.h"
#include "stagekit.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const trainkit_head_names[] = {"preset", "tied", "untied", NULL};

/* The Llama knobs (TRAINKIT_MODEL_PARAMS) over the preset's; a GPT-2
 * preset given one is refused by gpt_config_finish, naming it. */
static int read_llama_knobs(dagrun_ctx *ctx, const dagrun_host *h,
                            gpt_config *c) {
  int64_t kv, ff;
  double theta = 0, eps = 0;
  int head = 0;
  if (stagekit_param_int(ctx, h, "n_kv_head", 0, 1000, &kv) ||
      stagekit_param_int(ctx, h, "intermediate_size", 0, 1 << 18, &ff) ||
      stagekit_param_choice(ctx, h, "head", trainkit_head_names, &head))
    return -1;
  h->param_float(ctx, "rope_theta", &theta);
  h->param_float(ctx, "norm_eps", &eps);
  if (kv)
    c->n_kv_head = (int)kv;
  if (ff)
    c->intermediate = (int)ff;
  if (theta != 0)
    c->rope_theta = (float)theta;
  if (eps != 0)
    c->norm_eps = (float)eps;
  if (head)
    c->untied_head = head == 2;
  return 0;
}

int trainkit_read_model(dagrun_ctx *ctx, const dagrun_host *h,
                        trainkit_model *m) {
  char err[512];
  int64_t nl, nh, ne, bs, seq;
  memset(m, 0, sizeof *m);
  h->param_string(ctx, "data", &m->data);
  h->param_string(ctx, "model", &m->name);
  h->param_string(ctx, "init_from", &m->init_from);
  if (gpt_config_preset(m->name, &m->cfg, err, sizeof err) != 0) {
    h->fail(ctx, "model: %s", err);
    return -1;
  }
  if (stagekit_param_int(ctx, h, "n_layer", 0, 1000, &nl) ||
      stagekit_param_int(ctx, h, "n_head", 0, 1000, &nh) ||
      stagekit_param_int(ctx, h, "n_embd", 0, 1 << 16, &ne) ||
      stagekit_param_int(ctx, h, "block_size", 0, 1 << 20, &bs) ||
      stagekit_param_int(ctx, h, "seq_len", 0, 1 << 20, &seq))
    return -1;
  if (nl)
    m->cfg.n_layer = (int)nl;
  if (nh)
    m->cfg.n_head = (int)nh;
  if (ne)
    m->cfg.n_embd = (int)ne;
  if (bs)
    m->cfg.block_size = (int)bs;
  if (read_llama_knobs(ctx, h, &m->cfg) != 0)
    return -1;
  m->seq_len = (int)seq;
  m->T = seq ? (int)seq : m->cfg.block_size;
  /* With init_from the model's own block_size rules (trainkit_make_model). */
  if (m->T > m->cfg.block_size && !m->init_from[0]) {
    h->fail(ctx, "seq_len %d is longer than the model's block_size %d", m->T,
            m->cfg.block_size);
    return -1;
  }
  return 0;
}

/* The two optimizers want learning rates an order of magnitude apart
 * (Lion's sign update moves every weight by lr), so lr: 0 means the
 * usual one for the optimizer chosen. */
double trainkit_default_lr(optim_kind kind) {
  return kind == OPTIM_LION ? 1e-4 : 1e-3;
}

const char *const trainkit_optimizer_names[] = {
    [OPTIM_ADAMW] = "adamw", [OPTIM_LION] = "lion", [OPTIM_LION + 1] = NULL};
const char *const trainkit_decay_names[] = {"matrices", "all_2d", NULL};

int trainkit_read_optim(dagrun_ctx *ctx, const dagrun_host *h, optim_config *o,
                        double *grad_clip) {
  double beta1, beta2, eps, wd;
  int k;
  memset(o, 0, sizeof *o);
  h->param_float(ctx, "beta1", &beta1);
  h->param_float(ctx, "beta2", &beta2);
  h->param_float(ctx, "eps", &eps);
  h->param_float(ctx, "weight_decay", &wd);
  h->param_float(ctx, "grad_clip", grad_clip);
  if (stagekit_param_choice(ctx, h, "optimizer", trainkit_optimizer_names, &k))
    return -1;
  o->kind = (optim_kind)k;
  if (beta2 == 0)
    beta2 = o->kind == OPTIM_ADAMW ? 0.95 : 0.99;
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 > 0 && beta2 < 1) || !(eps > 0) ||
      !(wd >= 0) || !(*grad_clip >= 0)) {
    h->fail(ctx, "beta1 must be in [0,1), beta2 in (0,1), eps > 0, "
                 "weight_decay and grad_clip >= 0");
    return -1;
  }
  o->beta1 = (float)beta1;
  o->beta2 = (float)beta2;
  o->eps = (float)eps;
  o->weight_decay = (float)wd;
  return 0;
}

int trainkit_open_data(dagrun_ctx *ctx, const dagrun_host *h, trainkit_model *m,
                       tokdata *td) {
  char err[1024];
  if (tokdata_open(h->dir(ctx, DAGRUN_DIR_DAG), m->data, td, err, sizeof err) !=
      0) {
    h->fail(ctx, "%s", err);
    return -1;
  }
  m->cfg.vocab_size = td->vocab_size;
  return 0;
}

/* init_from: the model, its shape and its weights from a model directory
 * (modeldir.h), instead of a preset and gpt_init. The data (td) must be
 * tokenized with the model's tokenizer. The directory is only read. */
static int init_from_model(dagrun_ctx *ctx, const dagrun_host *h,
                           trainkit_model *m, const tokdata *td, gpt **out,
                           char **init_dir) {
  char err[2048];
  const char *z = m->init_from;
  char *path =
      z[0] == '/' ? strdup(z) : fileio_join(h->dir(ctx, DAGRUN_DIR_DAG), z);
  modeldir_info *info = calloc(1, sizeof *info);
  if (!path || !info) {
    h->fail(ctx, "out of memory");
    free(path);
    free(info);
    return -1;
  }
  int rc = -1;
  if (modeldir_open(path, info, err, sizeof err) != 0) {
    h->fail(ctx, "init_from: %s", err);
    goto done;
  }
  if (info->skipped[0])
    h->log(ctx, DAGRUN_LOG_WARN, "init_from: %s", info->skipped);
  const gpt_config *mc = &info->config;
  if (mc->vocab_size != m->cfg.vocab_size) {
    h->fail(ctx,
            "init_from: %s has a vocabulary of %d tokens, but the data's "
            "tokenizer has %d: fine-tuning needs the data tokenized with "
            "the model's own tokenizer",
            info->dir, mc->vocab_size, m->cfg.vocab_size);
    goto done;
  }
  if (tokdata_fits_model(td, info->dir, info->tokenizer, info->tokenizer_sha256,
                         err, sizeof err) != 0) {
    h->fail(ctx,
            "init_from: %s: fine-tuning needs the data tokenized with the "
            "model's own tokenizer",
            err);
    goto done;
  }
  m->T = m->seq_len ? m->seq_len : mc->block_size;
  if (m->T > mc->block_size) {
    h->fail(ctx,
            "seq_len %d is longer than the init_from model's "
            "block_size %d",
            m->T, mc->block_size);
    goto done;
  }
  if (modeldir_load(info, out, err, sizeof err) != 0) {
    h->fail(ctx, "init_from: %s", err);
    goto done;
  }
  m->cfg = *mc;
  m->name = "init_from";
  *init_dir = strdup(info->dir);
  char what[64];
  if (info->kind == MODELDIR_HF)
    snprintf(what, sizeof what, "Hugging Face %s",
             mc->family == GPT_FAMILY_LLAMA ? "Llama" : "GPT-2");
  else
    snprintf(what, sizeof what, "checkpoint of step %lld",
             (long long)info->step);
  h->log(ctx, DAGRUN_LOG_INFO,
         "init_from %s (%s): its weights start the run, with its shape "
         "(%d layers, %d heads, width %d, context %d); the model, n_layer, "
         "n_head, n_embd and block_size params are ignored; optimizer and "
         "schedule start fresh",
         info->dir, what, mc->n_layer, mc->n_head, mc->n_embd, mc->block_size);
  rc = 0;
done:
  free(path);
  free(info);
  return rc;
}

int trainkit_make_model(dagrun_ctx *ctx, const dagrun_host *h,
                        trainkit_model *m, const tokdata *td, uint64_t seed,
                        gpt **out, char **init_dir) {
  char err[1024];
  *out = NULL;
  *init_dir = NULL;
  int all_2d;
  if (stagekit_param_choice(ctx, h, "decay_tensors", trainkit_decay_names,
                            &all_2d) != 0)
    return -1;
  if (m->init_from[0]) {
    if (init_from_model(ctx, h, m, td, out, init_dir) != 0)
      return -1;
  } else {
    if (gpt_config_finish(&m->cfg, err, sizeof err) != 0 ||
        gpt_create(&m->cfg, out, err, sizeof err) != 0) {
      h->fail(ctx, "model: %s", err);
      return -1;
    }
    gpt_init(*out, seed);
  }
  /* Before any optimizer, ZeRO shard or device copy reads the flags. */
  if (all_2d) {
    gpt_decay_all_2d(*out);
    h->log(ctx, DAGRUN_LOG_INFO,
           "weight decay on every 2-D tensor, the embeddings too "
           "(decay_tensors: all_2d)");
  }
  return 0;
}

/* One optimizer group per tensor, so that weight decay follows the
 * tensors' own flags (gpt_tensor.decay: the matrices, or with
 * decay_tensors: all_2d every 2-D tensor). */
int trainkit_make_optim(const gpt *model, const optim_config *oc, optim **out,
                        char *err, size_t errlen) {
  size_t nt = gpt_tensor_count(model);
  optim_group *groups = calloc(nt, sizeof *groups);
  if (!groups) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(model, i);
    groups[i] = (optim_group){t->offset, t->numel, t->decay};
  }
  int rc =
      optim_create(oc, gpt_num_params(model), groups, nt, out, err, errlen);
  free(groups);
  return rc;
}

/* DAGRUN_TEST_LOADER_DELAY_MS slows every batch down, so that tests can
 * provoke the train stage's data-wait warning on purpose. */
int trainkit_train_loader(const tokdata *td, const loader_source *sources,
                          size_t nsources, int B, int T, uint64_t seed,
                          int prefetch, loader **out, char *err,
                          size_t errlen) {
  const char *delay = getenv("DAGRUN_TEST_LOADER_DELAY_MS");
  loader_config lc = {
      .paths = (const char *const *)td->train,
      .npaths = td->ntrain,
      .sources = sources,
      .nsources = nsources,
      .B = B,
      .T = T,
      .order = LOADER_RANDOM,
      .seed = seed,
      .prefetch = prefetch,
      .test_delay_ms = delay ? atoi(delay) : 0,
  };
  return loader_create(&lc, out, err, errlen);
}

/* Each phase is timed with the host clock between the calls: the CPU
 * engine is synchronous, so the clock reads when the work is done. */
int trainkit_forward_backward(gpt *model, loader *ld, uint32_t *inputs,
                              uint32_t *targets, int B, int T, int accum,
                              double *loss, trainkit_times *times, char *err,
                              size_t errlen) {
  trainkit_times t = {0};
  double tk = clock_monotonic();
  gpt_zero_grad(model);
  t.zero = stagekit_lap(&tk);
  *loss = 0;
  for (int k = 0; k < accum; k++) {
    float l = 0;
    /* Dropout's masks (when the model has it) are keyed by the batch's
     * number, which a checkpoint's loader position restores. */
    uint64_t key = (uint64_t)k + 1;
    if (ld) {
      loader_pos pos;
      loader_get_pos(ld, &pos);
      key = pos.batches + 1;
      loader_next(ld, inputs, targets);
    }
    t.data += stagekit_lap(&tk);
    gpt_dropout_key(model, key, 1);
    int rc = gpt_forward(model, inputs, targets, B, T, &l, err, errlen);
    t.forward += stagekit_lap(&tk);
    if (rc == 0)
      gpt_backward(model, 1.0f / (float)accum);
    gpt_dropout_key(model, 0, 0);
    if (rc != 0)
      return -1;
    t.backward += stagekit_lap(&tk);
    *loss += l / accum;
  }
  if (times)
    *times = t;
  return 0;
}

void trainkit_stepper_free(trainkit_stepper *s) {
  optim_destroy(s->opt);
  loader_destroy(s->ld);
  free(s->inputs);
  free(s->targets);
  memset(s, 0, sizeof *s);
}

int trainkit_stepper_init(trainkit_stepper *s, gpt *model,
                          const optim_config *oc, const tokdata *td, int B,
                          int T, uint64_t seed, char *err, size_t errlen) {
  size_t n = (size_t)B * T;
  memset(s, 0, sizeof *s);
  s->model = model;
  s->B = B;
  s->T = T;
  s->accum = 1;
  s->inputs = malloc(n * sizeof(uint32_t));
  s->targets = malloc(n * sizeof(uint32_t));
  if (!s->inputs || !s->targets) {
    snprintf(err, errlen, "out of memory for a batch of %d x %d", B, T);
    trainkit_stepper_free(s);
    return -1;
  }
  if (trainkit_make_optim(model, oc, &s->opt, err, errlen) != 0 ||
      trainkit_train_loader(td, NULL, 0, B, T, seed, 2, &s->ld, err, errlen) !=
          0) {
    trainkit_stepper_free(s);
    return -1;
  }
  return 0;
}

/* A step with a non-finite loss or norm leaves the weights as they were,
 * as train's does, so that a sweep past the edge of stability reports
 * the divergence instead of carrying NaN weights into its next step. */
int trainkit_stepper_step(trainkit_stepper *s, double lr, double grad_clip,
                          double *loss, double *norm, char *err,
                          size_t errlen) {
  if (trainkit_forward_backward(s->model, s->ld, s->inputs, s->targets, s->B,
                                s->T, s->accum, loss, NULL, err, errlen) != 0)
    return -1;
  float *grads = gpt_grads(s->model);
  *norm = optim_clip_grad_norm(grads, gpt_num_params(s->model), grad_clip);
  if (isfinite(*loss) && isfinite(*norm))
    optim_step(s->opt, gpt_params(s->model), grads, (float)lr);
  return 0;
}

/* OpenMP and OpenBLAS keep separate pools: both are set, or a matrix
 * product would run on every core beside n threads of the rest. */
void trainkit_set_threads(int n) {
  if (n <= 0)
    n = (int)stagekit_cpu_count();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int trainkit_write_out(dagrun_ctx *ctx, const dagrun_host *h, const char *name,
                       const char *text, char **path) {
  char err[1024] = "out of memory";
  char *p = fileio_join(h->dir(ctx, DAGRUN_DIR_OUT), name);
  if (!p || !text ||
      fileio_write_atomic(p, text, strlen(text), err, sizeof err) != 0) {
    h->fail(ctx, "%s: %s", name, err);
    free(p);
    return -1;
  }
  if (path)
    *path = p;
  else
    free(p);
  return 0;
}

int trainkit_write_results(dagrun_ctx *ctx, const dagrun_host *h,
                           const char *stem, const char *json, const char *csv,
                           const char *svg, char **json_path) {
  const char *ext[3] = {"json", "csv", "svg"}, *text[3] = {json, csv, svg};
  *json_path = NULL;
  for (int i = 0; i < 3; i++) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", stem, ext[i]);
    if (trainkit_write_out(ctx, h, name, text[i], i ? NULL : json_path) != 0) {
      free(*json_path);
      *json_path = NULL;
      return -1;
    }
  }
  return 0;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double trainkit_median(double *v, size_t n) {
  if (n == 0)
    return NAN;
  qsort(v, n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int trainkit_pick_batch(const double *tokens_per_s, const int *eligible, int n,
                        double margin) {
  int pick = -1;
  for (int i = 0; i < n; i++)
    if (eligible[i] &&
        (pick < 0 || tokens_per_s[i] > (1 + margin) * tokens_per_s[pick]))
      pick = i;
  return pick;
}

void trainkit_smooth_unlagged(const double *y, int n, double beta,
                              double *out) {
  int h = (int)lround(beta / (1 - beta) / 2);
  /* Running sums over the window as it slides: O(n). */
  double sum = 0;
  int lo = 0, hi = 0; /* the window is y[lo..hi) */
  for (int i = 0; i < n; i++) {
    int want_lo = i - h > 0 ? i - h : 0,
        want_hi = i + h + 1 < n ? i + h + 1 : n;
    while (hi < want_hi)
      sum += y[hi++];
    while (lo < want_lo)
      sum -= y[lo++];
    out[i] = sum / (double)(hi - lo);
  }
}
