/* Pipeline-parallel training on CPU ranks; see pipeline.h. */
#include "pipeline.h"

#include "lib/clock.h"
#include "zero/zslice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const pipeline_schedule_names[] = {"1f1b", "gpipe", NULL};

typedef pipeline_op op;

/* A send still in flight, with its own copy of the data (so that the
 * activation slot it came from can be used again). */
typedef struct pending {
  comm_req *req;
  float *buf;
} pending;

/* The most sends a stage keeps in flight, under COMM_MAX_INFLIGHT with
 * room to spare; at the limit the oldest is waited for (the peer
 * receives a neighbour's messages in the order they were sent). */
#define PIPE_MAX_SENDS 12

/* A contiguous part of the parameter array this stage updates. */
typedef struct range {
  size_t off, n;
  optim *opt;  /* over zs's slice (all n without ZeRO); with ZeRO NULL for
                  the tied copy, which the first stage's update overwrites */
  int counted; /* in the clipping norm (the tied copy on the last stage
                  is not: the first stage counts it) */
  /* ZeRO over dp (pipeline_options.zero_stage): this rank's slice of
   * the range, its reduced gradient (S), and where the range's padded
   * D x S floats would run past the model's arrays (the last stage's)
   * its parameters (S; NULL: the collectives work in the model's
   * arrays, the padding being later stages' floats, whose gradients are
   * zero here and whose parameters this stage never reads). */
  zslice zs;
  float *gsl, *psl;
} range;

struct pipeline {
  comm *c;
  gpt *model;
  pipeline_options o;
  int s, P, first, last; /* stage s of P: layers [first, last) */
  gpt **slot;            /* activation slots */
  int nslots;
  op *ops;
  int nops;
  range rg[2];
  int nrg;
  size_t BTC;  /* floats of a micro-batch's stream */
  float *xbuf; /* a received stream or its gradient */
  float *sendbuf[PIPE_MAX_SENDS];
  pending q[PIPE_MAX_SENDS]; /* FIFO: q[qhead .. qhead + nq) */
  int qhead, nq;
  pipeline_stats st;
  int zero;       /* ZeRO over dp (1 or 2), else 0 */
  float *scratch; /* with ZeRO: D x S of the larger range, the padded
                     array of its collectives */
  int stale;      /* with ZeRO: the slices are updated, the ranges not */
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

/* One optimizer over the tensors in [off, off + n) of the model. */
static int range_optim(pipeline *p, range *r, char *err, size_t errlen) {
  size_t nt = gpt_tensor_count(p->model), k = 0;
  optim_group *g = calloc(nt, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "pipeline: out of memory");
    return -1;
  }
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(p->model, i);
    if (t->offset >= r->off && t->offset < r->off + r->n)
      g[k++] = (optim_group){t->offset - r->off, t->numel, t->decay};
  }
  int rc = zslice_optim(&r->zs, &p->o.opt, g, k, &r->opt, err, errlen);
  free(g);
  return rc;
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

/* The stage's parameter ranges, each with its optimizer: its own
 * (stage_range), and with a tied head on the last stage its copy of
 * group 0 as a second one. */
static int make_ranges(pipeline *p, char *err, size_t errlen) {
  size_t off, n;
  stage_range(p, p->s, &off, &n);
  p->rg[0] = (range){.off = off, .n = n, .counted = 1};
  p->nrg = 1;
  if (p->s == p->P - 1 && tied_head(p)) {
    gpt_group_range(p->model, 0, &off, &n);
    p->rg[p->nrg++] = (range){.off = off, .n = n};
  }
  size_t most = 0;
  for (int i = 0; i < p->nrg; i++) {
    range *r = &p->rg[i];
    zslice_init(&r->zs, p->zero && r->counted ? p->o.dp : NULL, r->n);
    if (p->zero && !r->counted)
      continue; /* the tied copy: the first stage's update is sent to it */
    if (range_optim(p, r, err, errlen) != 0)
      return -1;
    if (!p->zero)
      continue;
    size_t DS = (size_t)r->zs.D * r->zs.S;
    if (!(r->gsl = calloc(r->zs.S, sizeof(float))) ||
        (r->off + DS > gpt_num_params(p->model) &&
         !(r->psl = calloc(r->zs.S, sizeof(float))))) {
      snprintf(err, errlen, "pipeline: out of memory for the ZeRO slices");
      return -1;
    }
    most = r->psl && DS > most ? DS : most;
  }
  if (most && !(p->scratch = calloc(most, sizeof(float)))) {
    snprintf(err, errlen, "pipeline: out of memory for the ZeRO slices");
    return -1;
  }
  return 0;
}

/* An activation slot: a gpt of the stage's layers whose parameters and
 * gradients are the model's own arrays (the groups the stage reaches;
 * the others stay NULL, which the engine must never reach). */
static int make_slot(pipeline *p, gpt **out, char *err, size_t errlen) {
  gpt *m = NULL;
  if (gpt_create(gpt_get_config(p->model), &m, err, errlen) != 0)
    return -1;
  *out = m;
  gpt_release(m, GPT_BUF_PARAMS | GPT_BUF_GRADS);
  if (gpt_set_stage(m, p->first, p->last, err, errlen) != 0 ||
      gpt_set_recompute(m, p->o.recompute, err, errlen) != 0 ||
      gpt_set_autocast(m, p->o.autocast, err, errlen) != 0)
    return -1;
  float *params = gpt_params(p->model), *grads = gpt_grads(p->model);
  size_t ng = gpt_group_count(p->model);
  for (size_t g = 0; g < ng; g++) {
    int layer = (int)g - 1;
    int used = (layer >= p->first && layer < p->last) ||
               (g == 0 && (p->s == 0 || (p->s == p->P - 1 && tied_head(p)))) ||
               (g == ng - 1 && p->s == p->P - 1);
    if (!used)
      continue;
    size_t off, n;
    gpt_group_range(p->model, g, &off, &n);
    gpt_set_group_params(m, g, params + off);
    gpt_set_group_grads(m, g, grads + off);
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
  if (!p) {
    snprintf(err, errlen, "pipeline: out of memory");
    return -1;
  }
  *out = p;
  p->c = c;
  p->model = model;
  p->o = *o;
  p->P = P;
  p->s = comm_rank(c);
  p->first = p->s * (cfg->n_layer / P);
  p->last = p->first + cfg->n_layer / P;
  p->BTC = (size_t)o->B * o->T * cfg->n_embd;
  if (zslice_check_stage(o->zero_stage, "pipeline", err, errlen) != 0)
    return -1;
  p->zero = o->dp && comm_size(o->dp) > 1 ? o->zero_stage : 0;
  if (make_ops(p) != 0 || !(p->xbuf = malloc(p->BTC * sizeof(float))) ||
      !(p->slot = calloc((size_t)p->nslots, sizeof *p->slot))) {
    snprintf(err, errlen, "pipeline: out of memory");
    return -1;
  }
  for (int i = 0; i < PIPE_MAX_SENDS; i++)
    if (!(p->sendbuf[i] = malloc(p->BTC * sizeof(float)))) {
      snprintf(err, errlen, "pipeline: out of memory for the send buffers");
      return -1;
    }
  for (int i = 0; i < p->nslots; i++)
    if (make_slot(p, &p->slot[i], err, errlen) != 0)
      return -1;
  if (make_ranges(p, err, errlen) != 0)
    return -1;
  p->st.slots = p->nslots;
  p->st.formula = (double)(P - 1) / (o->micro + P - 1);
  return 0;
}

void pipeline_destroy(pipeline *p) {
  if (!p)
    return;
  for (int i = 0; i < p->nslots && p->slot; i++)
    gpt_destroy(p->slot[i]);
  for (int i = 0; i < p->nrg; i++) {
    optim_destroy(p->rg[i].opt);
    free(p->rg[i].gsl);
    free(p->rg[i].psl);
  }
  free(p->scratch);
  for (int i = 0; i < PIPE_MAX_SENDS; i++)
    free(p->sendbuf[i]);
  free(p->slot);
  free(p->ops);
  free(p->xbuf);
  free(p);
}

int pipeline_stage(const pipeline *p, int *first, int *last) {
  *first = p->first;
  *last = p->last;
  return p->s;
}

/* Waits for the oldest send in flight. */
static int wait_oldest(pipeline *p, char *err, size_t errlen) {
  pending *q = &p->q[p->qhead];
  int rc = comm_wait(p->c, q->req, err, errlen);
  p->qhead = (p->qhead + 1) % PIPE_MAX_SENDS;
  p->nq--;
  return rc;
}

/* BTC floats of x to rank peer, from a copy of its own. */
static int send_stream(pipeline *p, const float *x, int peer, char *err,
                       size_t errlen) {
  if (p->nq == PIPE_MAX_SENDS && wait_oldest(p, err, errlen) != 0)
    return -1;
  int i = (p->qhead + p->nq) % PIPE_MAX_SENDS;
  memcpy(p->sendbuf[i], x, p->BTC * sizeof(float));
  p->q[i].buf = p->sendbuf[i];
  if (comm_isend(p->c, p->sendbuf[i], p->BTC * sizeof(float), peer,
                 &p->q[i].req, err, errlen) != 0)
    return -1;
  p->nq++;
  return 0;
}

/* One op; *busy gets the time in the engine. */
static int run_op(pipeline *p, const op *o, const uint32_t *inputs,
                  const uint32_t *targets, double *loss, double *busy,
                  char *err, size_t errlen) {
  int m = p->o.micro, firsts = p->s == 0, lasts = p->s == p->P - 1;
  size_t BT = (size_t)p->o.B * p->o.T;
  gpt *g = p->slot[o->mb % p->nslots];
  int rc;
  double t;
  if (!o->backward) {
    if (!firsts && comm_recv(p->c, p->xbuf, p->BTC * sizeof(float), p->s - 1,
                             err, errlen) != 0)
      return -1;
    float l = 0;
    t = clock_monotonic();
    rc = gpt_forward_stage(
        g, firsts ? inputs + o->mb * BT : NULL, firsts ? NULL : p->xbuf,
        lasts ? targets + o->mb * BT : NULL, p->o.B, p->o.T, &l, err, errlen);
    *busy += clock_monotonic() - t;
    if (rc != 0)
      return -1;
    if (lasts)
      *loss += l / m; /* as trainkit_forward_backward sums them */
    else if (send_stream(p, gpt_stage_output(g), p->s + 1, err, errlen) != 0)
      return -1;
    return 0;
  }
  if (!lasts && comm_recv(p->c, p->xbuf, p->BTC * sizeof(float), p->s + 1, err,
                          errlen) != 0)
    return -1;
  t = clock_monotonic();
  rc = gpt_backward_stage(g, lasts ? NULL : p->xbuf, 1.0f / (float)m, err,
                          errlen);
  *busy += clock_monotonic() - t;
  if (rc != 0)
    return -1;
  if (!firsts &&
      send_stream(p, gpt_stage_input_grad(g), p->s - 1, err, errlen) != 0)
    return -1;
  return 0;
}

/* The tied embeddings: the first stage's gradient (the lookups') and
 * the last's (the head's) summed on the first and sent back, so that
 * both copies take the same update. An untied head: nothing to sum. */
static int sum_tied(pipeline *p, char *err, size_t errlen) {
  if (!tied_head(p))
    return 0;
  size_t off, n;
  gpt_group_range(p->model, 0, &off, &n);
  float *g = gpt_grads(p->model) + off;
  int last = p->P - 1;
  if (p->s == last)
    return comm_send(p->c, g, n * sizeof(float), 0, err, errlen) != 0 ||
                   comm_recv(p->c, g, n * sizeof(float), 0, err, errlen) != 0
               ? -1
               : 0;
  if (p->s != 0)
    return 0;
  float *tmp = malloc(n * sizeof(float));
  if (!tmp) {
    snprintf(err, errlen, "pipeline: out of memory for the tied gradient");
    return -1;
  }
  int rc = comm_recv(p->c, tmp, n * sizeof(float), last, err, errlen);
  if (rc == 0) {
    for (size_t i = 0; i < n; i++)
      g[i] = tmp[i] + g[i];
    rc = comm_send(p->c, g, n * sizeof(float), last, err, errlen);
  }
  free(tmp);
  return rc;
}

/* Data parallel beside the pipeline: the mean over the stage group
 * (o.dp) of this stage's gradients, each range's (on the last stage its
 * copy of the embeddings holds the head's part, which sum_tied adds to
 * the first stage's after this, so both copies still get the same
 * bits), and of the last stage's loss. With ZeRO, after sum_tied: each
 * range's mean into this rank's slice of it (the tied copy not reduced:
 * the first stage's update is sent to it). */
static int dp_mean(pipeline *p, double *loss, char *err, size_t errlen) {
  comm *dp = p->o.dp;
  int D = dp ? comm_size(dp) : 1;
  if (D == 1)
    return 0;
  float *grads = gpt_grads(p->model), inv = 1.0f / (float)D;
  for (int r = 0; r < p->nrg; r++) {
    range *rg = &p->rg[r];
    float *g = grads + rg->off;
    if (p->zero) {
      if (!rg->opt)
        continue;
      if (rg->psl) {
        memset(p->scratch, 0, (size_t)D * rg->zs.S * sizeof(float));
        memcpy(p->scratch, g, rg->n * sizeof(float));
      }
      if (zslice_reduce(&rg->zs, rg->psl ? p->scratch : g, rg->gsl, inv, err,
                        errlen) != 0)
        return -1;
      continue;
    }
    if (comm_allreduce_sum(dp, g, rg->n, err, errlen) != 0)
      return -1;
    for (size_t i = 0; i < rg->n; i++)
      g[i] *= inv;
  }
  if (p->s != p->P - 1)
    return 0;
  if (comm_allreduce_sum_double(dp, loss, err, errlen) != 0)
    return -1;
  *loss /= D;
  return 0;
}

/* With ZeRO, after pipeline_step updated the slices: every rank's slice
 * of each range from the stage group into the parameters, and the first
 * stage's embeddings into the last stage's tied copy. */
static int make_whole(pipeline *p, char *err, size_t errlen) {
  if (!p->stale)
    return 0;
  p->stale = 0;
  float *params = gpt_params(p->model);
  for (int r = 0; r < p->nrg; r++) {
    range *rg = &p->rg[r];
    if (!rg->opt)
      continue;
    if (!rg->psl) {
      if (zslice_gather(&rg->zs, params + rg->off, err, errlen) != 0)
        return -1;
      continue;
    }
    memcpy(p->scratch + rg->zs.lo, rg->psl, rg->zs.S * sizeof(float));
    if (zslice_gather(&rg->zs, p->scratch, err, errlen) != 0)
      return -1;
    memcpy(params + rg->off, p->scratch, rg->n * sizeof(float));
  }
  if (!tied_head(p) || (p->s != 0 && p->s != p->P - 1))
    return 0;
  size_t off, n;
  gpt_group_range(p->model, 0, &off, &n);
  if (p->s == 0)
    return comm_send(p->c, params + off, n * sizeof(float), p->P - 1, err,
                     errlen);
  return comm_recv(p->c, params + off, n * sizeof(float), 0, err, errlen);
}

int pipeline_forward_backward(pipeline *p, const uint32_t *inputs,
                              const uint32_t *targets, double *loss, char *err,
                              size_t errlen) {
  double t0 = clock_monotonic(), busy = 0;
  if (make_whole(p, err, errlen) != 0)
    return -1;
  gpt_zero_grad(p->model);
  *loss = 0;
  for (int i = 0; i < p->nops; i++)
    if (run_op(p, &p->ops[i], inputs, targets, loss, &busy, err, errlen) != 0)
      return -1;
  while (p->nq > 0)
    if (wait_oldest(p, err, errlen) != 0)
      return -1;
  double step = clock_monotonic() - t0;
  /* With ZeRO the tied copies' sum comes first: the first stage's slices
   * then hold the whole gradient of the embeddings. */
  int rc = p->zero ? sum_tied(p, err, errlen) || dp_mean(p, loss, err, errlen)
                   : dp_mean(p, loss, err, errlen) || sum_tied(p, err, errlen);
  if (rc != 0 ||
      comm_broadcast(p->c, loss, sizeof *loss, p->P - 1, err, errlen) != 0)
    return -1;
  /* The bubble over all stages: the sum of their idle times over the
   * sum of their step times; and the mean of those step times. */
  float acc[2] = {(float)(step - busy), (float)step};
  if (comm_allreduce_sum(p->c, acc, 2, err, errlen) != 0)
    return -1;
  p->st.idle = acc[1] > 0 ? acc[0] / acc[1] : 0;
  p->st.step_s = acc[1] / p->P;
  return 0;
}

/* Range r's gradient as the step uses it, and its floats: with ZeRO
 * this rank's slice (NULL for the tied copy), else the model's. */
static float *range_grad(pipeline *p, const range *r, size_t *n) {
  if (!p->zero) {
    *n = r->n;
    return gpt_grads(p->model) + r->off;
  }
  *n = r->zs.own;
  return r->opt ? r->gsl : NULL;
}

int pipeline_clip_grad_norm(pipeline *p, double max_norm, double *norm,
                            char *err, size_t errlen) {
  double sumsq = 0;
  size_t n;
  for (int r = 0; r < p->nrg; r++) {
    const float *g = range_grad(p, &p->rg[r], &n);
    if (!p->rg[r].counted || !g)
      continue;
    for (size_t i = 0; i < n; i++)
      sumsq += (double)g[i] * g[i];
  }
  if (comm_allreduce_sum_double(p->c, &sumsq, err, errlen) != 0 ||
      (p->zero && comm_allreduce_sum_double(p->o.dp, &sumsq, err, errlen)))
    return -1;
  *norm = sqrt(sumsq);
  /* optim_clip_grad_norm's rule, on every stage's part alike. */
  if (max_norm > 0.0 && isfinite(*norm)) {
    double coef = max_norm / (*norm + 1e-6);
    if (coef < 1.0)
      for (int r = 0; r < p->nrg; r++) {
        float *g = range_grad(p, &p->rg[r], &n), s = (float)coef;
        for (size_t i = 0; g && i < n; i++)
          g[i] *= s;
      }
  }
  return 0;
}

void pipeline_step(pipeline *p, float lr) {
  float *params = gpt_params(p->model);
  for (int i = 0; i < p->nrg; i++) {
    range *r = &p->rg[i];
    if (!p->zero) {
      optim_step(r->opt, params + r->off, gpt_grads(p->model) + r->off, lr);
    } else if (r->opt) {
      /* This rank's slice; the next collective call makes it whole. */
      float *w = params + r->off + r->zs.lo;
      if (r->psl) {
        memcpy(r->psl, w, r->zs.own * sizeof(float));
        w = r->psl;
      }
      optim_step(r->opt, w, r->gsl, lr);
      p->stale = 1;
    }
  }
}

void pipeline_get_stats(const pipeline *p, pipeline_stats *s) { *s = p->st; }

void pipeline_memory(const pipeline *p, zslice_memory *m) {
  uint64_t all = (uint64_t)gpt_num_params(p->model) * 4, gs = 0, ps = 0, st = 0,
           most = 0;
  for (int i = 0; i < p->nrg; i++) {
    const range *r = &p->rg[i];
    st += r->opt ? (uint64_t)optim_state_floats(r->opt) * 4 : 0;
    gs += r->gsl ? (uint64_t)r->zs.S * 4 : 0;
    ps += r->psl ? (uint64_t)r->zs.S * 4 : 0;
    uint64_t ds = r->psl ? (uint64_t)r->zs.D * r->zs.S * 4 : 0;
    most = ds > most ? ds : most;
  }
  m->params = all + ps + most; /* the slices and the gathers' array */
  m->grads = all + gs;
  m->optim = st;
  m->peak_grads = m->grads;
}

/* The state floats a parameter has in o (AdamW 2, Lion 1). */
static size_t per_param(optim *o, size_t n) {
  return n ? optim_state_floats(o) / n : 0;
}

/* Rank 0's part of a gather: stage s's parameters into the model and,
 * with state, its optimizer state into fs (full's, N parameters). */
static int gather_stage(pipeline *p, int s, float *fs, size_t k, char *err,
                        size_t errlen) {
  size_t N = gpt_num_params(p->model), off, n;
  stage_range(p, s, &off, &n);
  if (comm_recv(p->c, gpt_params(p->model) + off, n * sizeof(float), s, err,
                errlen) != 0)
    return -1;
  if (!fs)
    return 0;
  float *st = malloc(k * n * sizeof(float) + 1);
  if (!st) {
    snprintf(err, errlen, "pipeline: out of memory gathering stage %d", s);
    return -1;
  }
  int rc = comm_recv(p->c, st, k * n * sizeof(float), s, err, errlen);
  for (size_t j = 0; rc == 0 && j < k; j++)
    memcpy(fs + j * N + off, st + j * n, n * sizeof(float));
  free(st);
  return rc;
}

int pipeline_gather(pipeline *p, int with_state, optim *full, char *err,
                    size_t errlen) {
  /* Replica 0 gathers; with ZeRO its stages take the state's slices
   * from their groups first. */
  int dpr = p->o.dp ? comm_rank(p->o.dp) : 0;
  if (make_whole(p, err, errlen) != 0)
    return -1;
  if (dpr > 0 && (!with_state || !p->zero))
    return 0;
  range *r = &p->rg[0];
  size_t k = per_param(r->opt, r->zs.S), N = gpt_num_params(p->model);
  float *st = with_state ? malloc(k * r->n * sizeof(float) + 1) : NULL;
  if (with_state && !st) {
    snprintf(err, errlen, "pipeline: out of memory gathering the state");
    return -1;
  }
  int rc = st ? zslice_state_gather(&r->zs, r->opt, st, err, errlen) : 0;
  if (rc != 0 || dpr > 0) {
    /* done: another replica's state went to replica 0 */
  } else if (p->s > 0) {
    rc = comm_send(p->c, gpt_params(p->model) + r->off, r->n * sizeof(float), 0,
                   err, errlen) != 0 ||
                 (st && comm_send(p->c, st, k * r->n * sizeof(float), 0, err,
                                  errlen) != 0)
             ? -1
             : 0;
  } else if (with_state && !full) {
    snprintf(err, errlen, "pipeline: gather: no optimizer for the state");
    rc = -1;
  } else {
    float *fs = with_state ? optim_state(full) : NULL;
    for (size_t j = 0; fs && j < k; j++)
      memcpy(fs + j * N + r->off, st + j * r->n, r->n * sizeof(float));
    for (int s = 1; s < p->P && rc == 0; s++)
      rc = gather_stage(p, s, fs, k, err, errlen);
    if (fs && rc == 0)
      optim_set_t(full, optim_get_t(r->opt));
  }
  free(st);
  return rc;
}

int pipeline_load(pipeline *p, optim *full, char *err, size_t errlen) {
  size_t N = gpt_num_params(p->model);
  const float *fs = optim_state(full);
  if (optim_state_floats(full) != per_param(full, N) * N) {
    snprintf(err, errlen, "pipeline: the optimizer is not the whole model's");
    return -1;
  }
  for (int i = 0; i < p->nrg; i++) {
    range *r = &p->rg[i];
    if (!r->opt)
      continue; /* ZeRO's tied copy */
    zslice_state_take(&r->zs, fs + r->off, N, r->opt);
    optim_set_t(r->opt, optim_get_t(full));
  }
  p->stale = 0;
  return 0;
}

void pipeline_memory_get(const pipeline *p, gpt_memory *out) {
  *out = (gpt_memory){0};
  zslice_memory z; /* the optimizer state and, with ZeRO, the slices */
  pipeline_memory(p, &z);
  uint64_t all = (uint64_t)gpt_num_params(p->model) * 4;
  for (int i = 0; i < p->nrg; i++)
    out->params += 4 * (uint64_t)p->rg[i].n;
  out->grads = out->params + (z.grads - all);
  out->params += z.params - all;
  out->optim = z.optim;
  /* The slots' parameter and gradient arrays are released (they point
   * into the model's): what they allocate is activations. */
  for (int i = 0; i < p->nslots; i++)
    out->acts += gpt_allocated_bytes(p->slot[i]);
  out->acts += 4 * (uint64_t)p->BTC * (1 + PIPE_MAX_SENDS);
  out->total = out->params + out->grads + out->optim + out->acts;
}
