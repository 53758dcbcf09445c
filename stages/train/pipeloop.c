/* The train stage's pipeline-parallel loop; see pipeloop.h. */
#include "pipeloop.h"
#include "mploop.h"

#include "common/stagekit.h"
#include "lib/exitcode.h"
#include "pipeline/pipeline.h"

#include <stdio.h>

/* The gang of N = D x P ranks (mploop.h): the rank at position p (on
 * one node, rank p) is stage p % P of data-parallel replica p / P. */
typedef struct pipe_run {
  mploop l;
  pipeline *pl;
  gpt *model; /* borrowed: the trainrun's */
  pipeline_schedule sched;
  double idle_sum; /* the bubble over the steps of this run */
} pipe_run;

int pipeloop_param(trainrun *r, int *P) {
  int64_t v;
  if (stagekit_param_int(r->ctx, r->h, "pipeline_parallel", 1, 1024, &v))
    return -1;
  *P = (int)v;
  return 0;
}

/* The engine's calls, as mploop_engine takes them. */
static int fb(void *e, const uint32_t *in, const uint32_t *tg, double *loss,
              char *err, size_t errlen) {
  return pipeline_forward_backward(e, in, tg, loss, err, errlen);
}
static int clip(void *e, double max_norm, double *norm, char *err,
                size_t errlen) {
  return pipeline_clip_grad_norm(e, max_norm, norm, err, errlen);
}
static void step(void *e, float lr) { pipeline_step(e, lr); }
static int gather(void *e, int with_state, optim *full, char *err,
                  size_t errlen) {
  return pipeline_gather(e, with_state, full, err, errlen);
}
static int load(void *e, optim *full, char *err, size_t errlen) {
  return pipeline_load(e, full, err, errlen);
}

/* pipeline_check, as mploop_open takes it. */
static int fits(void *arg, const gpt_config *cfg, int N, char *err,
                size_t errlen) {
  return pipeline_check(cfg, ((pipe_run *)arg)->l.K, N, err, errlen);
}

/* The stage's memory (mploop_engine.memory): on CPU ranks its ranges
 * are the model's arrays', on GPU ranks device memory beside them; the
 * first stage's step allocates the buffer of the tied embeddings'
 * gradient (pipeline.c's sum_tied). */
static void memory(void *arg, gpt_memory *part, int *in_model,
                   uint64_t *step_bytes) {
  pipe_run *p = arg;
  int first, last, s = pipeline_stage(p->pl, &first, &last);
  const gpt_config *cfg = gpt_get_config(p->model);
  pipeline_memory_get(p->pl, part);
  *in_model = 0; /* the stage's arrays are the engine's own */
  *step_bytes = 0;
  if (s == 0 && p->l.K > 1 && !cfg->untied_head) {
    size_t off, n;
    gpt_group_range(p->model, 0, &off, &n);
    *step_bytes = 4 * (uint64_t)n;
  }
}

/* The bubble line: this step's measured idle share beside the formula. */
static void log_bubble(trainrun *r, pipe_run *p, const char *when,
                       double idle) {
  pipeline_stats st;
  pipeline_get_stats(p->pl, &st);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "pipeline bubble (%s): %.1f%% of the stages' step time idle, "
            "measured; (p-1)/(m+p-1) = (%d-1)/(%d+%d-1) = %.1f%%",
            when, 100 * idle, p->l.K, p->l.m, p->l.K, 100 * st.formula);
}

/* After each step: the bubble's metric, and its line after the first;
 * after the first each rank's holdings too, as the step left them. */
static void stepped(void *arg, trainrun *r, int rank) {
  pipe_run *p = arg;
  pipeline_stats st;
  pipeline_get_stats(p->pl, &st);
  p->idle_sum += st.idle;
  if (p->l.nsteps == 1) {
    zslice_memory mem; /* on GPU ranks the device's */
    pipeline_memory(p->pl, &mem);
    mploop_log_memory(r, &p->l, &mem);
  }
  if (rank != 0)
    return;
  r->h->metric(r->ctx, "pipeline_idle", st.idle, r->st.step);
  if (p->l.nsteps == 1)
    log_bubble(r, p, "first step", st.idle);
}

static void summary(void *arg, trainrun *r, cJSON *s) {
  pipe_run *p = arg;
  cJSON_AddNumberToObject(s, "pipeline_parallel", p->l.K);
  if (p->l.nsteps)
    log_bubble(r, p, "mean over the steps", p->idle_sum / p->l.nsteps);
  cJSON_AddStringToObject(s, "pipeline_schedule",
                          pipeline_schedule_names[p->sched]);
  if (p->l.nsteps)
    cJSON_AddNumberToObject(s, "pipeline_idle", p->idle_sum / p->l.nsteps);
}

/* The pipeline over the gang mploop_open made, and its layout line. */
static void start(trainrun *r, pipe_run *p) {
  char err[2048];
  mploop *l = &p->l;
  pipeline_options o = {.micro = l->m,
                        .schedule = p->sched,
                        .B = r->c.B,
                        .T = r->c.m.T,
                        .opt = r->c.opt,
                        .recompute = (gpt_recompute)r->c.recompute,
                        .autocast = r->c.autocast,
                        .dp = l->dc,
                        .zero_stage = l->zero};
  comm *data = l->kc;
  if (l->gpu) {
    /* Device buffers over NCCL; the scalars and the gather over MPI. */
    o.cuda = 1;
    o.device = l->device;
    o.deterministic = r->c.deterministic;
    o.ctl = l->kc;
    o.dp_ctl = l->dc;
    data = l->nkc;
    o.dp = l->ndc;
  }
  if (pipeline_create(data, r->model, &o, &p->pl, err, sizeof err) != 0)
    mploop_abort(r, l, "pipeline", err);
  p->model = r->model;
  /* The stage's weights are the engine's own arrays (on GPU ranks the
   * device's): ranks other than 0 drop the model's parameter array after
   * resume, and none trains in its gradient array. */
  l->eng = (mploop_engine){p->pl,   fb,      clip, step,   gather, load,
                           stepped, summary, p,    memory, 1};
  gpt_release(r->model, GPT_BUF_GRADS);
  int first, last, s = pipeline_stage(p->pl, &first, &last);
  pipeline_stats st;
  pipeline_get_stats(p->pl, &st);
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "pipeline: rank %d is stage %d of %d (layers %d-%d%s%s), "
            "schedule %s, %d micro-batches (grad_accum) of %d x %d, the "
            "activations of %d of them kept at most; data-parallel replica "
            "%d of %d (global batch %d x %d x %d = %d sequences); %s",
            l->rank, s, l->K, first, last - 1, s == 0 ? ", embeddings" : "",
            s == l->K - 1 ? ", head and loss" : "",
            pipeline_schedule_names[p->sched], l->m, r->c.B, r->c.m.T, st.slots,
            l->pos / l->K, l->D, l->D, r->c.B, l->m, l->D * r->c.B * l->m,
            l->gpu ? "GPUs (BF16 streams), NCCL" : "CPUs, MPI");
}

int pipeloop_run(trainrun *r, int N, int P) {
  pipe_run p = {.l = {.param = "pipeline_parallel",
                      .part = "stages",
                      .what = "pipeline stages",
                      .N = N,
                      .K = P,
                      .T = 1,
                      .gpu_ok = 1,
                      .gpu_zero = 3,
                      .z3_in_step = "its stage's arrays, gathered whole "
                                    "for the step"}};
  int status = mploop_check(r, &p.l), sc = 0;
  if (status == 0 && stagekit_param_choice(r->ctx, r->h, "pipeline_schedule",
                                           pipeline_schedule_names, &sc))
    status = EXIT_BAD_PARAMS;
  p.sched = (pipeline_schedule)sc;
  if (status == 0)
    status = mploop_open(r, &p.l, fits, &p);
  if (status == 0) {
    start(r, &p);
    status = mploop_train(r, &p.l);
  }
  pipeline_destroy(p.pl);
  mploop_close(&p.l);
  return status;
}
