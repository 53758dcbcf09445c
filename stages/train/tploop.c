/* The train stage's tensor-parallel loop; see tploop.h. */
#include "tploop.h"
#include "mploop.h"

#include "common/stagekit.h"
#include "lib/exitcode.h"
#include "pipeline/pipeline.h"
#include "tensor/tensor.h"
#ifdef DAGRUN_TRAIN_TENSOR_CUDA
#include "cuda/gpt_cuda.h"
#include "tensor/tensor_cuda.h"
#endif

#include <stdio.h>

/* The gang of N = D x P x T ranks (mploop.h, with K = P x T parts a
 * replica): the rank at position p (mpplace.h; on one node, rank p) is
 * shard p % T of stage (p / T) % P of replica p / (T P). */
typedef struct tp_run {
  mploop l;
  int T, P;
  pipeline_schedule sched; /* with P > 1 */
  comm *tc; /* this rank's tensor group: its stage's T shards */
  comm *pc; /* this shard's P stages */
  tensor_par *tp;
  /* On GPU ranks (mploop.gpu): tc's and pc's NCCL twins (splits of the
   * loop's nkc), the engine (tensor_cuda.h) over them, the run for its
   * calls' failures. */
  comm *ntc, *npc;
  struct tensor_cuda *tcu;
  trainrun *run;
} tp_run;

int tploop_param(trainrun *r, int *T) {
  int64_t v;
  if (stagekit_param_int(r->ctx, r->h, "tensor_parallel", 1, 1024, &v))
    return -1;
  *T = (int)v;
  return 0;
}

/* The engine's calls, as mploop_engine takes them. */
static int fb(void *e, const uint32_t *in, const uint32_t *tg, double *loss,
              char *err, size_t errlen) {
  return tensor_forward_backward(e, in, tg, loss, err, errlen);
}
static int clip(void *e, double max_norm, double *norm, char *err,
                size_t errlen) {
  return tensor_clip_grad_norm(e, max_norm, norm, err, errlen);
}
static void step(void *e, float lr) { tensor_step(e, lr); }
static int gather(void *e, int with_state, optim *full, char *err,
                  size_t errlen) {
  return tensor_gather(e, with_state, full, err, errlen);
}
static int load(void *e, optim *full, char *err, size_t errlen) {
  return tensor_load(e, full, err, errlen);
}

static void summary(void *arg, trainrun *r, cJSON *s) {
  tp_run *t = arg;
  (void)r;
  cJSON_AddNumberToObject(s, "tensor_parallel", t->T);
  cJSON_AddNumberToObject(s, "pipeline_parallel", t->P);
  if (t->P > 1)
    cJSON_AddStringToObject(s, "pipeline_schedule",
                            pipeline_schedule_names[t->sched]);
}

/* The rank's memory (mploop_engine.memory): shards of its own, nothing
 * allocated in the step. */
static void memory(void *arg, gpt_memory *part, int *in_model,
                   uint64_t *step_bytes) {
  tensor_memory_get(((tp_run *)arg)->tp, part);
  *in_model = 0;
  *step_bytes = 0;
}

#ifdef DAGRUN_TRAIN_TENSOR_CUDA
/* The GPU engine's calls (tensor_cuda.h), e the tp_run. */
static int fb_cuda(void *e, const uint32_t *in, const uint32_t *tg,
                   double *loss, char *err, size_t errlen) {
  return tensor_cuda_forward_backward(((tp_run *)e)->tcu, in, tg, loss, err,
                                      errlen);
}
static int clip_cuda(void *e, double max_norm, double *norm, char *err,
                     size_t errlen) {
  return tensor_cuda_clip_grad_norm(((tp_run *)e)->tcu, max_norm, norm, err,
                                    errlen);
}
static void step_cuda(void *e, float lr) {
  tp_run *t = e;
  char err[2048];
  if (tensor_cuda_step(t->tcu, lr, err, sizeof err) != 0)
    mploop_abort(t->run, &t->l, "step", err);
}
static int gather_cuda(void *e, int with_state, optim *full, char *err,
                       size_t errlen) {
  tp_run *t = e;
  return tensor_cuda_gather(t->tcu, t->run->model, with_state, full, err,
                            errlen);
}
static int load_cuda(void *e, optim *full, char *err, size_t errlen) {
  tp_run *t = e;
  return tensor_cuda_load(t->tcu, t->run->model, full, err, errlen);
}

/* The GPU rank's memory (mploop_engine.memory): the device's. */
static void memory_cuda(void *arg, gpt_memory *part, int *in_model,
                        uint64_t *step_bytes) {
  tp_run *t = arg;
  zslice_memory held;
  tensor_cuda_memory(t->tcu, gpt_get_config(t->run->model), part, &held);
  *in_model = 0;
  *step_bytes = 0;
}

/* After the first step (mploop_engine.stepped), the GPU rank's device
 * bytes as a step leaves them (the "between steps" line and
 * summary.json's): at zero_stage 2-3 the whole arrays made for the step
 * must be gone by then. */
static void stepped_cuda(void *arg, trainrun *r, int rank) {
  tp_run *t = arg;
  (void)rank;
  if (t->l.nsteps != 1)
    return;
  gpt_memory part;
  zslice_memory held;
  tensor_cuda_memory(t->tcu, gpt_get_config(r->model), &part, &held);
  mploop_log_memory(r, &t->l, &held);
}

/* The tensor groups on GPU ranks (mploop_open agreed on the device and
 * split the NCCL gang): the CUDA engine's shards over the stage's group,
 * its stages over the shard's (the same splits of nkc as tc and pc of
 * kc), the gradients' mean and ZeRO over the shard's replicas (ndc, and
 * dc for the checkpoints' host gathers). */
static void start_cuda(trainrun *r, tp_run *t, size_t *local, size_t *full) {
  char err[2048];
  mploop *l = &t->l;
  int pos = l->pos % l->K;
  if (comm_split(l->nkc, pos / t->T, pos, &t->ntc, err, sizeof err) ||
      comm_split(l->nkc, pos % t->T, pos, &t->npc, err, sizeof err))
    mploop_abort(r, l, "splitting the NCCL replica", err);
  l->more[0] = t->ntc; /* the engine's traffic, for summary.json */
  l->more[1] = t->npc;
  /* zero_stage 3's step makes the shard's arrays whole (tensor_cuda.h),
   * not a layer's group at a time as tensor.c's CPU engine does. */
  l->z3_in_step = "its shard's arrays, gathered whole for the step";
  tensor_cuda_options o = {.micro = l->m,
                           .B = r->c.B,
                           .T = r->c.m.T,
                           .opt = r->c.opt,
                           .deterministic = r->c.deterministic,
                           .dp = l->ndc,
                           .dp_ctl = l->dc,
                           .zero_stage = l->zero,
                           .pp = t->P > 1 ? t->npc : NULL,
                           .pp_ctl = t->pc,
                           .schedule = t->sched};
  if (tensor_cuda_create(t->ntc, r->model, &o, &t->tcu, err, sizeof err) != 0)
    mploop_abort(r, l, "tensor parallel on GPUs", err);
  t->run = r;
  l->eng = (mploop_engine){
      t,         fb_cuda,      clip_cuda, step_cuda, gather_cuda,
      load_cuda, stepped_cuda, summary,   t,         memory_cuda,
      1};
  tensor_cuda_sizes(t->tcu, local, full);
  if (l->rank != 0)
    return;
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "device: cuda: one GPU a rank, NCCL between them (the "
            "validation and the pre-flight loss on rank 0's CPU, over the "
            "gathered model)");
}
#endif

/* The shape against T and P (mploop_open's fits). */
static int fits(void *arg, const gpt_config *cfg, int N, char *err,
                size_t errlen) {
  tp_run *t = arg;
  if (tensor_check(cfg, t->T, N, err, errlen) != 0)
    return -1;
  return t->P > 1 ? pipeline_check(cfg, t->P, N / t->T, err, errlen) : 0;
}

/* What the tensor-parallel engine does not have, beyond mploop_check's.
 * 0 or EXIT_BAD_PARAMS. */
static int check_params(trainrun *r, tp_run *t) {
  const char *why = r->c.recompute != ENGINE_RECOMPUTE_NONE
                        ? "recompute (use recompute: none)"
                    : r->c.autocast != GPT_AUTOCAST_NONE
                        ? "autocast (use autocast: none)"
                        : NULL;
  if (!why)
    return 0;
  r->h->fail(r->ctx,
             "tensor_parallel %d runs without %s: its engine keeps every "
             "activation in fp32",
             t->T, why);
  return EXIT_BAD_PARAMS;
}

/* The activations of how many micro-batches a stage keeps at most. */
static int slots(const tp_run *t) {
#ifdef DAGRUN_TRAIN_TENSOR_CUDA
  if (t->l.gpu)
    return tensor_cuda_slots(t->tcu);
#endif
  return tensor_slots(t->tp);
}

/* The tensor group and the stages out of the replica, the engine over
 * them, and the layout's line. */
static void start(trainrun *r, tp_run *t) {
  char err[2048];
  mploop *l = &t->l;
  int T = t->T, pos = l->pos % l->K, sh = pos % T, s = pos / T;
  if (comm_split(l->kc, s, pos, &t->tc, err, sizeof err) ||
      comm_split(l->kc, sh, pos, &t->pc, err, sizeof err))
    mploop_abort(r, l, "splitting the replica", err);
  l->more[0] = t->tc;
  l->more[1] = t->pc;
  size_t local, full;
#ifdef DAGRUN_TRAIN_TENSOR_CUDA
  if (l->gpu)
    start_cuda(r, t, &local, &full);
#endif
  if (!l->gpu) {
    tensor_options o = {.micro = l->m,
                        .B = r->c.B,
                        .T = r->c.m.T,
                        .opt = r->c.opt,
                        .dp = l->dc,
                        .pp = t->P > 1 ? t->pc : NULL,
                        .schedule = t->sched,
                        .zero_stage = l->zero};
    if (tensor_create(t->tc, r->model, &o, &t->tp, err, sizeof err) != 0)
      mploop_abort(r, l, "tensor parallel", err);
    l->eng = (mploop_engine){t->tp, fb,      clip, step,   gather, load,
                             NULL,  summary, t,    memory, 1};
    tensor_sizes(t->tp, &local, &full);
  }
  /* The shards have gradients of their own: the model's full gradient
   * array is never written (rank 0's engine only evaluates). */
  gpt_release(r->model, GPT_BUF_GRADS);
  const gpt_config *cfg = gpt_get_config(r->model);
  /* The MLP's width: GPT-2's 4C, a Llama's SwiGLU intermediate_size. */
  int F = cfg->family == GPT_FAMILY_LLAMA ? cfg->intermediate : 4 * cfg->n_embd;
  int H = cfg->n_head, Vp = cfg->padded_vocab;
  int L = cfg->n_layer / t->P;
  char stage[128] = "";
  if (t->P > 1)
    snprintf(stage, sizeof stage,
             " of stage %d of %d (layers %d-%d, %s schedule, the "
             "activations of %d micro-batches kept at most)",
             s, t->P, s * L, (s + 1) * L - 1, pipeline_schedule_names[t->sched],
             slots(t));
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "tensor parallel: rank %d is shard %d of %d%s (heads %d-%d of "
            "%d, MLP columns %d-%d of %d, vocabulary rows %d-%d of %d; "
            "%zu of the model's %zu parameters), %d micro-batches "
            "(grad_accum) of %d x %d; data-parallel replica %d of %d "
            "(global batch %d x %d x %d = %d sequences)",
            l->rank, sh, T, stage, sh * H / T, (sh + 1) * H / T - 1, H,
            sh * F / T, (sh + 1) * F / T - 1, F, sh * Vp / T,
            (sh + 1) * Vp / T - 1, Vp, local, full, l->m, r->c.B, r->c.m.T,
            l->pos / l->K, l->D, l->D, r->c.B, l->m, l->D * r->c.B * l->m);
  zslice_memory mem; /* on GPU ranks after the first step (stepped_cuda) */
  if (!l->gpu) {
    tensor_memory(t->tp, &mem);
    mploop_log_memory(r, l, &mem);
  }
}

int tploop_run(trainrun *r, int N, int T, int P) {
  tp_run t = {.l = {.param = P > 1 ? "tensor_parallel x pipeline_parallel"
                                   : "tensor_parallel",
                    .part = "ranks",
                    .what = "tensor-parallel ranks",
                    .N = N,
                    .K = T * P,
                    .T = T},
              .T = T,
              .P = P};
#ifdef DAGRUN_TRAIN_TENSOR_CUDA
  /* Tensor groups on GPUs (tensor_cuda.h), with stages, replicas and
   * ZeRO 1-3 beside them (mploop_check has the layouts' own rules). */
  t.l.gpu_ok = 1;
  t.l.gpu_zero = 3;
#endif
  int status = mploop_check(r, &t.l), sc = 0;
  if (status == 0 && P > 1 &&
      stagekit_param_choice(r->ctx, r->h, "pipeline_schedule",
                            pipeline_schedule_names, &sc))
    status = EXIT_BAD_PARAMS;
  t.sched = (pipeline_schedule)sc;
  if (status == 0)
    status = check_params(r, &t);
  if (status == 0)
    status = mploop_open(r, &t.l, fits, &t);
  if (status == 0) {
    start(r, &t);
    status = mploop_train(r, &t.l);
  }
  tensor_destroy(t.tp);
#ifdef DAGRUN_TRAIN_TENSOR_CUDA
  tensor_cuda_destroy(t.tcu);
  comm_destroy(t.npc);
  comm_destroy(t.ntc);
#endif
  comm_destroy(t.pc);
  comm_destroy(t.tc);
  mploop_close(&t.l);
  return status;
}
