/* Pipeline-parallel training over either engine; see pipeline.h. The
 * schedules, exchanges and the step's collectives are here; the stage's
 * passes and parameters are the engine's (pipeline_engine.h). */
#include "pipeline.h"
#include "pipeline_engine.h"
#include "pipestream.h"

#include "lib/clock.h"
#include "zero/zslice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const pipeline_schedule_names[] = {"1f1b", "gpipe", NULL};

typedef pipeline_op op;

struct pipeline {
  comm *c, *ctl; /* the stages: the data (streams, gradients), the scalars */
  comm *dp, *dp_ctl; /* the stage group (o.dp): the same two; NULL: none */
  gpt *model;
  pipeline_options o;
  int s, P, first, last; /* stage s of P: layers [first, last) */
  int nslots;            /* activation slots */
  op *ops;
  int nops;
  pipe_setup su; /* the ranges (su.off, su.n, su.nrg) */
  const pipe_ops *eo;
  pipe_eng *e;
  pipestream ps; /* the streams and their gradients, over c */
  float *tied;   /* the first stage's receive buffer for the tied sum */
  pipeline_stats st;
  int step_failed; /* pipeline_step's error, for the next call to say */
  char step_err[512];
  int zero;  /* ZeRO over dp (1-3; the engine keeps the slices), else 0 */
  int stale; /* with ZeRO: the slices are updated, the ranges not (at
              * zero_stage 3: the ranges are not there) */
};

int pipeline_check(const gpt_config *cfg, int P, int world, char *err,
                   size_t errlen) {
  if (P < 2 || cfg->n_layer % P != 0) {
    snprintf(err, errlen,
             "pipeline_parallel %d does not divide the model's %d layers "
             "(each stage gets n_layer / pipeline_parallel contiguous "
             "layers)",
             P, cfg->n_layer);
    return -1;
  }
  if (world < P || world % P != 0) {
    snprintf(err, errlen,
             "world_size %d is not a multiple of pipeline_parallel %d (the "
             "gang is data-parallel replicas of pipeline_parallel stages "
             "each)",
             world, P);
    return -1;
  }
  return 0;
}

int pipeline_schedule_ops(pipeline_schedule sched, int P, int s, int m,
                          pipeline_op *ops) {
  int n = 0, warm = sched == PIPELINE_GPIPE ? m : P - s - 1;
  if (warm > m)
    warm = m;
  int f = 0, b = 0;
  for (; f < warm; f++)
    ops[n++] = (op){0, f};
  for (; f < m; f++) {
    ops[n++] = (op){0, f};
    ops[n++] = (op){1, b++};
  }
  for (; b < m; b++)
    ops[n++] = (op){1, b};
  /* In flight on this stage: warm + 1 micro-batches (all m in GPipe). */
  return warm + 1 < m ? warm + 1 : m;
}

/* Stage s's ops under the schedule (pipeline.h). */
static int make_ops(pipeline *p) {
  int m = p->o.micro;
  p->ops = malloc(2 * (size_t)m * sizeof *p->ops);
  if (!p->ops)
    return -1;
  p->nops = 2 * m;
  p->nslots = pipeline_schedule_ops(p->o.schedule, p->P, p->s, m, p->ops);
  return 0;
}

/* Stage s's own parameters, one contiguous range: the groups of its
 * layers, with group 0 (the embeddings) on the first stage and group
 * n_layer + 1 (ln_f) on the last. */
static void stage_range(const pipeline *p, int s, size_t *off, size_t *n) {
  int L = gpt_get_config(p->model)->n_layer, per = L / p->P;
  size_t g0 = s == 0 ? 0 : (size_t)(1 + s * per);
  size_t g1 = s == p->P - 1 ? (size_t)L + 1 : (size_t)((s + 1) * per);
  size_t off0, n0, off1, n1;
  gpt_group_range(p->model, g0, &off0, &n0);
  gpt_group_range(p->model, g1, &off1, &n1);
  *off = off0;
  *n = off1 + n1 - off0;
}

/* Whether the head is the embedding (GPT-2's, a tied Llama's): then the
 * last stage keeps a copy of group 0. */
static int tied_head(const pipeline *p) {
  return !gpt_get_config(p->model)->untied_head;
}

static int oom(const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "pipeline: out of memory for %s", what);
  return -1;
}

/* The stage's parameter ranges (pipeline_engine.h): its own
 * (stage_range), and with a tied head on the last stage its copy of
 * group 0 as a second one. */
static void make_ranges(pipeline *p) {
  pipe_setup *su = &p->su;
  stage_range(p, p->s, &su->off[0], &su->n[0]);
  su->nrg = 1;
  if (p->s == p->P - 1 && tied_head(p)) {
    gpt_group_range(p->model, 0, &su->off[1], &su->n[1]);
    su->nrg = 2;
  }
  su->zero = p->zero;
  su->dp = p->zero ? p->dp : NULL;
  su->dp_ctl = p->zero ? p->dp_ctl : NULL;
}

/* The engine's memory, as pipestream.h takes it. */
static void *mem_alloc(void *arg, size_t bytes) {
  pipeline *p = arg;
  return p->eo->alloc(p->e, bytes);
}
static void mem_free(void *arg, void *buf) {
  pipeline *p = arg;
  p->eo->free(p->e, buf);
}
static int mem_copy(void *arg, void *dst, const void *src, size_t bytes,
                    char *err, size_t errlen) {
  pipeline *p = arg;
  return p->eo->copy(p->e, dst, src, bytes, err, errlen);
}

/* The engine of o (pipeline_engine.h) for this stage, and the buffers
 * of the exchanges in its memory. */
static int make_engine(pipeline *p, char *err, size_t errlen) {
  pipe_setup *su = &p->su;
  su->model = p->model;
  su->o = &p->o;
  su->s = p->s;
  su->P = p->P;
  su->first = p->first;
  su->last = p->last;
  su->nslots = p->nslots;
  int rc = p->o.cuda ? pipe_cuda_create(su, &p->eo, &p->e, err, errlen)
                     : pipe_cpu_create(su, &p->eo, &p->e, err, errlen);
  if (rc != 0)
    return -1;
  size_t C = (size_t)gpt_get_config(p->model)->n_embd;
  pipestream_mem mem = {mem_alloc, mem_free, mem_copy, p};
  if (pipestream_init(&p->ps, p->c, (size_t)p->o.B * p->o.T * C * p->eo->elem,
                      &mem, err, errlen) != 0)
    return -1;
  if (p->s == 0 && tied_head(p)) {
    size_t off, n;
    gpt_group_range(p->model, 0, &off, &n);
    if (!(p->tied = p->eo->alloc(p->e, n * sizeof(float) + 1)))
      return oom("the tied gradient", err, errlen);
  }
  return 0;
}

int pipeline_create(comm *c, gpt *model, const pipeline_options *o,
                    pipeline **out, char *err, size_t errlen) {
  *out = NULL;
  const gpt_config *cfg = gpt_get_config(model);
  int P = comm_size(c);
  if (pipeline_check(cfg, P, P, err, errlen) != 0)
    return -1;
  if (o->micro < 1 || o->B < 1 || o->T < 1) {
    snprintf(err, errlen, "pipeline: micro-batches %d of B=%d T=%d", o->micro,
             o->B, o->T);
    return -1;
  }
  pipeline *p = calloc(1, sizeof *p);
  if (!p)
    return oom("the pipeline", err, errlen);
  *out = p;
  p->c = c;
  p->ctl = o->ctl ? o->ctl : c;
  p->dp = o->dp && comm_size(o->dp) > 1 ? o->dp : NULL;
  p->dp_ctl = o->dp_ctl ? o->dp_ctl : p->dp;
  p->model = model;
  p->o = *o;
  p->P = P;
  p->s = comm_rank(c);
  p->first = p->s * (cfg->n_layer / P);
  p->last = p->first + cfg->n_layer / P;
  /* zero_stage 3: the stage's arrays made for each step from the slices
   * (pipeline_engine.h), on either engine. */
  if (o->zero_stage != 3 &&
      zslice_check_stage(o->zero_stage, "pipeline", err, errlen) != 0)
    return -1;
  p->zero = p->dp ? o->zero_stage : 0;
  p->stale = p->zero == 3;
  if (make_ops(p) != 0)
    return oom("the schedule", err, errlen);
  make_ranges(p);
  if (make_engine(p, err, errlen) != 0)
    return -1;
  p->st.slots = p->nslots;
  p->st.formula = (double)(P - 1) / (o->micro + P - 1);
  return 0;
}

void pipeline_destroy(pipeline *p) {
  if (!p)
    return;
  if (p->eo) {
    pipestream_release(&p->ps);
    if (p->tied)
      p->eo->free(p->e, p->tied);
    p->eo->destroy(p->e);
  }
  free(p->ops);
  free(p);
}

int pipeline_stage(const pipeline *p, int *first, int *last) {
  *first = p->first;
  *last = p->last;
  return p->s;
}

/* One op; *busy gets the time in the engine. */
static int run_op(pipeline *p, const op *o, const uint32_t *inputs,
                  const uint32_t *targets, double *loss, double *busy,
                  char *err, size_t errlen) {
  int m = p->o.micro, firsts = p->s == 0, lasts = p->s == p->P - 1;
  size_t BT = (size_t)p->o.B * p->o.T;
  int slot = o->mb % p->nslots, rc;
  double t;
  if (!o->backward) {
    if (!firsts && pipestream_recv(&p->ps, 0, err, errlen) != 0)
      return -1;
    float l = 0;
    t = clock_monotonic();
    rc = p->eo->forward(p->e, slot, firsts ? inputs + o->mb * BT : NULL,
                        firsts ? NULL : p->ps.xbuf,
                        lasts ? targets + o->mb * BT : NULL, &l, err, errlen);
    *busy += clock_monotonic() - t;
    if (rc != 0)
      return -1;
    if (lasts)
      *loss += l / m; /* as trainkit_forward_backward sums them */
    else if (pipestream_send(&p->ps, p->eo->output(p->e, slot), 1, err,
                             errlen) != 0)
      return -1;
    return 0;
  }
  if (!lasts && pipestream_recv(&p->ps, 1, err, errlen) != 0)
    return -1;
  t = clock_monotonic();
  rc = p->eo->backward(p->e, slot, lasts ? NULL : p->ps.xbuf, 1.0f / (float)m,
                       err, errlen);
  *busy += clock_monotonic() - t;
  if (rc != 0)
    return -1;
  if (!firsts && pipestream_send(&p->ps, p->eo->input_grad(p->e, slot), 0, err,
                                 errlen) != 0)
    return -1;
  return 0;
}

/* The tied embeddings: the first stage's gradient (the lookups') and
 * the last's (the head's) summed on the first and sent back, so that
 * both copies take the same update (with ZeRO not sent back: the last
 * stage's copy takes the first's parameters instead, make_whole). An
 * untied head: nothing to sum. */
static int sum_tied(pipeline *p, char *err, size_t errlen) {
  if (!tied_head(p) || (p->s != 0 && p->s != p->P - 1))
    return 0;
  int last = p->P - 1, r = p->s == last ? 1 : 0;
  size_t off, n;
  gpt_group_range(p->model, 0, &off, &n);
  size_t bytes = n * sizeof(float);
  float *g = p->eo->grads(p->e, r);
  if (!g) {
    snprintf(err, errlen, "pipeline: the engine's gradients failed");
    return -1;
  }
  if (p->s == last)
    return comm_send(p->c, g, bytes, 0, err, errlen) != 0 ||
                   (!p->zero && comm_recv(p->c, g, bytes, 0, err, errlen) != 0)
               ? -1
               : 0;
  /* Range 0 of the first stage starts with group 0. */
  return comm_recv(p->c, p->tied, bytes, last, err, errlen) != 0 ||
                 p->eo->add(p->e, 0, p->tied, n, err, errlen) != 0 ||
                 (!p->zero && comm_send(p->c, g, bytes, last, err, errlen) != 0)
             ? -1
             : 0;
}

/* Data parallel beside the pipeline: the mean over the stage group
 * (o.dp) of this stage's gradients, each range's (on the last stage its
 * copy of the embeddings holds the head's part, which sum_tied adds to
 * the first stage's after this, so both copies still get the same
 * bits), and of the last stage's loss. With ZeRO, after sum_tied: range
 * 0's mean into this rank's slice of it (the engine's reduce; the tied
 * copy not reduced: the first stage's update is sent to it). */
static int dp_mean(pipeline *p, double *loss, char *err, size_t errlen) {
  if (!p->dp)
    return 0;
  int D = comm_size(p->dp);
  for (int r = 0; r < p->su.nrg && !p->zero; r++) {
    float *g = p->eo->grads(p->e, r);
    if (!g) {
      snprintf(err, errlen, "pipeline: the engine's gradients failed");
      return -1;
    }
    if (comm_allreduce_sum(p->dp, g, p->su.n[r], err, errlen) != 0)
      return -1;
  }
  float mean = 1.0f / (float)D;
  if (p->zero ? p->eo->reduce(p->e, mean, err, errlen)
              : p->eo->scale(p->e, mean, err, errlen))
    return -1;
  if (p->s != p->P - 1)
    return 0;
  if (comm_allreduce_sum_double(p->dp_ctl, loss, err, errlen) != 0)
    return -1;
  *loss /= D;
  return 0;
}

/* zero_stage 3, once the slices have what the step or the gather took
 * from the stage's arrays: the arrays go, and the next collective call
 * makes them again. */
static void release(pipeline *p) {
  if (p->zero != 3)
    return;
  p->eo->release(p->e);
  p->stale = 1;
}

/* With ZeRO, after pipeline_step updated the slices: every rank's slice
 * of each range from the stage group into the parameters, and the first
 * stage's embeddings into the last stage's tied copy (at zero_stage 3 into
 * the arrays the engine makes for it). */
static int make_whole(pipeline *p, char *err, size_t errlen) {
  if (!p->stale)
    return 0;
  p->stale = 0;
  /* The tied copy has no slice: sent below. */
  if (p->eo->gather(p->e, err, errlen) != 0)
    return -1;
  if (!tied_head(p) || (p->s != 0 && p->s != p->P - 1))
    return 0;
  size_t bytes;
  void *w = p->eo->tied(p->e, p->s == 0 ? 0 : 1, &bytes);
  if (p->s == 0)
    return comm_send(p->c, w, bytes, p->P - 1, err, errlen);
  return comm_recv(p->c, w, bytes, 0, err, errlen);
}

int pipeline_forward_backward(pipeline *p, const uint32_t *inputs,
                              const uint32_t *targets, double *loss, char *err,
                              size_t errlen) {
  if (p->step_failed) {
    snprintf(err, errlen, "%s", p->step_err);
    return -1;
  }
  double t0 = clock_monotonic(), busy = 0;
  if (make_whole(p, err, errlen) != 0 ||
      p->eo->zero_grad(p->e, err, errlen) != 0)
    return -1;
  *loss = 0;
  for (int i = 0; i < p->nops; i++)
    if (run_op(p, &p->ops[i], inputs, targets, loss, &busy, err, errlen) != 0)
      return -1;
  if (pipestream_drain(&p->ps, err, errlen) != 0)
    return -1;
  double step = clock_monotonic() - t0;
  /* With ZeRO the tied copies' sum comes first: the first stage's slices
   * then hold the whole gradient of the embeddings. */
  int rc = p->zero ? sum_tied(p, err, errlen) || dp_mean(p, loss, err, errlen)
                   : dp_mean(p, loss, err, errlen) || sum_tied(p, err, errlen);
  /* Not after a failed collective: on GPU ranks NCCL's kernel may still
   * read the arrays (cudaFree would wait on it where the gang must
   * abort); the engine's destroy frees them. */
  if (rc == 0)
    release(p);
  if (rc != 0 ||
      comm_broadcast(p->ctl, loss, sizeof *loss, p->P - 1, err, errlen) != 0)
    return -1;
  /* The bubble over all stages: the sum of their idle times over the
   * sum of their step times; and the mean of those step times. */
  float acc[2] = {(float)(step - busy), (float)step};
  if (comm_allreduce_sum(p->ctl, acc, 2, err, errlen) != 0)
    return -1;
  p->st.idle = acc[1] > 0 ? acc[0] / acc[1] : 0;
  p->st.step_s = acc[1] / p->P;
  return 0;
}

int pipeline_clip_grad_norm(pipeline *p, double max_norm, double *norm,
                            char *err, size_t errlen) {
  double sumsq = 0;
  /* The tied copy on the last stage (range 1) is not counted: the first
   * stage counts it. With ZeRO each rank has its slice's part: the sum
   * goes over the stage group too. */
  if (p->eo->sumsq(p->e, 0, &sumsq, err, errlen) != 0 ||
      comm_allreduce_sum_double(p->ctl, &sumsq, err, errlen) != 0 ||
      (p->zero &&
       comm_allreduce_sum_double(p->dp_ctl, &sumsq, err, errlen) != 0))
    return -1;
  *norm = sqrt(sumsq);
  /* optim_clip_grad_norm's rule, on every stage's part alike. */
  if (max_norm > 0.0 && isfinite(*norm))
    return p->eo->clip(p->e, *norm, max_norm, err, errlen);
  return 0;
}

void pipeline_step(pipeline *p, float lr) {
  if (!p->step_failed &&
      p->eo->step(p->e, lr, p->step_err, sizeof p->step_err) != 0)
    p->step_failed = 1;
  /* With ZeRO this rank's slice of range 0 (the tied copy takes the first
   * stage's update): the next collective call makes it whole. */
  p->stale = p->zero != 0;
}

void pipeline_get_stats(const pipeline *p, pipeline_stats *s) { *s = p->st; }

void pipeline_memory(const pipeline *p, zslice_memory *m) {
  gpt_memory part;
  p->eo->memory(p->e, m, &part);
}

/* Rank 0's part of a gather: stage s's parameters into the model and,
 * with state, its optimizer state into fs (full's, N parameters). */
static int gather_stage(pipeline *p, int s, float *fs, size_t k, char *err,
                        size_t errlen) {
  size_t N = gpt_num_params(p->model), off, n;
  stage_range(p, s, &off, &n);
  if (comm_recv(p->ctl, gpt_params(p->model) + off, n * sizeof(float), s, err,
                errlen) != 0)
    return -1;
  if (!fs)
    return 0;
  float *st = malloc(k * n * sizeof(float) + 1);
  if (!st)
    return oom("a stage's optimizer state", err, errlen);
  int rc = comm_recv(p->ctl, st, k * n * sizeof(float), s, err, errlen);
  for (size_t j = 0; rc == 0 && j < k; j++)
    memcpy(fs + j * N + off, st + j * n, n * sizeof(float));
  free(st);
  return rc;
}

/* A stage > 0's part of a gather: its range's parameters and, with
 * state, its optimizer state to rank 0 (host memory: over ctl); on
 * other replicas (send 0: ZeRO's slices) only the pull. */
static int send_stage(pipeline *p, int with_state, size_t k, int send,
                      char *err, size_t errlen) {
  size_t n = p->su.n[0];
  float *buf = malloc((1 + (with_state ? k : 0)) * n * sizeof(float) + 1);
  uint64_t t = 0;
  if (!buf)
    return oom("the gather", err, errlen);
  int rc = p->eo->pull(p->e, buf, with_state ? buf + n : NULL, &t, err, errlen);
  if (rc == 0 && send)
    rc = comm_send(p->ctl, buf, n * sizeof(float), 0, err, errlen);
  if (rc == 0 && send && with_state)
    rc = comm_send(p->ctl, buf + n, k * n * sizeof(float), 0, err, errlen);
  free(buf);
  return rc;
}

int pipeline_gather(pipeline *p, int with_state, optim *full, char *err,
                    size_t errlen) {
  /* Replica 0 gathers; with ZeRO its stages take the slices from their
   * groups first (every replica's pull). */
  int dpr = p->dp ? comm_rank(p->dp) : 0;
  if (make_whole(p, err, errlen) != 0)
    return -1;
  if (dpr > 0 && !p->zero)
    return 0;
  size_t k = optim_state_floats_for(p->o.opt.kind, 1);
  if (p->s > 0 || dpr > 0) {
    int rc = send_stage(p, with_state, k, dpr == 0, err, errlen);
    release(p);
    return rc;
  }
  if (with_state && !full) {
    snprintf(err, errlen, "pipeline: gather: no optimizer for the state");
    return -1;
  }
  size_t N = gpt_num_params(p->model), off = p->su.off[0], n = p->su.n[0];
  float *fs = with_state ? optim_state(full) : NULL;
  float *st = with_state ? malloc(k * n * sizeof(float) + 1) : NULL;
  uint64_t t = 0;
  if (with_state && !st)
    return oom("the gather", err, errlen);
  int rc = p->eo->pull(p->e, gpt_params(p->model) + off, st, &t, err, errlen);
  for (size_t j = 0; rc == 0 && fs && j < k; j++)
    memcpy(fs + j * N + off, st + j * n, n * sizeof(float));
  free(st);
  for (int s = 1; rc == 0 && s < p->P; s++)
    rc = gather_stage(p, s, fs, k, err, errlen);
  if (rc == 0 && fs)
    optim_set_t(full, t);
  release(p);
  return rc;
}

int pipeline_load(pipeline *p, optim *full, char *err, size_t errlen) {
  size_t N = gpt_num_params(p->model);
  if (optim_state_floats(full) != optim_state_floats_for(p->o.opt.kind, N)) {
    snprintf(err, errlen, "pipeline: the optimizer is not the whole model's");
    return -1;
  }
  p->stale = p->zero == 3; /* the engine keeps the slices alone */
  return p->eo->load(p->e, full, err, errlen);
}

void pipeline_memory_get(const pipeline *p, gpt_memory *out) {
  zslice_memory held;
  p->eo->memory(p->e, &held, out);
  /* The engine's activation slots, the received stream and the sends'
   * buffers. */
  out->acts += (uint64_t)pipestream_bytes(&p->ps);
  out->total = out->params + out->grads + out->optim + out->acts;
}
