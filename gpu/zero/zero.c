/*
 * zero: ZeRO data parallelism over the comm layer (zero.h).
 */
#include "zero.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "comm_timer.h"
#include "lib/clock.h"
#include "zslice.h"

/* Room for the reductions in flight: the comm layer's limit (a stage-2
 * group takes one per rank whose slice it reaches). */
#define ZERO_RING COMM_MAX_INFLIGHT

/* A gradient reduction in flight. */
typedef struct grad_io {
  comm_req *req;
  int group; /* the group whose gradient buffer is freed when this is
                done (its last), or -1 */
} grad_io;

/* A flat range of the model that a rank owns: [flat, flat + n) real
 * floats at local (in its shard, or in the full vector at stage 0),
 * followed by pad - n floats of padding there. */
typedef struct zrange {
  size_t flat, n, local, pad;
} zrange;

/* Stages 2-3: one of the engine's parameter groups (gpt.h). */
typedef struct zgroup {
  size_t off, n; /* flat range */
  size_t S;      /* stage 3: each rank's piece, ceil(n/N) floats */
  size_t so;     /* stage 3: where this rank's piece starts in its shard */
  float *full;   /* stage 3: the gathered parameters (N*S) while resident */
  comm_req *ag;  /* the all-gather into full still in flight (prefetch) */
  float *grad;   /* backward: the group's gradient (stage 2: n floats;
                    stage 3: N*S, zero past n) until its reduction is
                    done */
} zgroup;

struct zero {
  zero_config cfg;
  gpt *m;
  comm *c;
  optim_config oc;
  optim *opt;
  int N, r;
  size_t P, S, lo; /* lo = r*S (stages 0-2) */
  size_t k;        /* optimizer state floats per parameter */
  float *pshard;   /* stage 3: the parameter shard (S) */
  float *gshard;   /* stage 2/3: the gradient shard (S) */
  float *gspare;   /* stage 2/3 with accumulation: micro-batch k > 0's
                      reduced gradient (S), added into gshard; only
                      during a step */
  float *gdst;     /* where the reductions write: gshard, or gspare */
  zero_guard_fn guard; /* zero_set_guard's, or NULL */
  void *guard_arg;
  zrange *rg;      /* this rank's ranges (optimizer state, checkpoint) */
  size_t nrg;
  /* stages 2-3 */
  zgroup *grp;
  size_t ng;
  int in_bwd;        /* the engine is in backward (its hook needs grads) */
  size_t rs_next;    /* groups >= rs_next have their reduction started
                        (counting down) */
  uint64_t gathered, gradbytes; /* bytes of group buffers held now */
  /* stages 0-1: the gradient's buckets (zero_shape's bf, nbuckets) */
  size_t bf, nbuckets;
  size_t next; /* buckets >= next have been started (counting down) */
  grad_io io[ZERO_RING]; /* the reductions in flight, oldest first */
  int nio;     /* in flight */
  int cur;     /* next io slot */
  int gflight; /* groups whose reductions are in flight */
  int hook_rc; /* a failure inside the backward hook */
  int in_hook; /* buckets or groups started now count as early */
  int early;   /* buckets or groups started from the hook this step */
  char hook_err[256];
  uint64_t peak_params, peak_grads, peak_acts; /* the step's most held */
  comm_timer tm; /* the step's time in comm calls */
};


/* The flat ranges rank q owns and where they sit in its shard (stage 0:
 * everything, in the full vector): stages 1-2 one contiguous slice of S,
 * stage 3 one piece of every group. out holds ng + 1; returns the count. */
static size_t ranges_of(const zero *z, int q, zrange *out) {
  size_t P = z->P;
  if (z->cfg.stage == 0) {
    out[0] = (zrange){0, P, 0, P};
    return 1;
  }
  if (z->cfg.stage < 3) {
    size_t a = (size_t)q * z->S;
    size_t n = a < P ? (P - a < z->S ? P - a : z->S) : 0;
    out[0] = (zrange){a < P ? a : P, n, 0, z->S};
    return 1;
  }
  for (size_t g = 0; g < z->ng; g++) {
    const zgroup *gr = &z->grp[g];
    size_t a = (size_t)q * gr->S;
    size_t n = a < gr->n ? (gr->n - a < gr->S ? gr->n - a : gr->S) : 0;
    out[g] = (zrange){gr->off + (a < gr->n ? a : gr->n), n, gr->so, gr->S};
  }
  return z->ng;
}

static size_t minz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- Helpers ---- */

/* Optimizer groups for the ranges rg of m, at their local offsets:
 * each tensor's part of a range, and its padding, without decay. */
static int make_groups(gpt *m, const zrange *rg, size_t nrg,
                       optim_group **out, size_t *ng) {
  size_t nt = gpt_tensor_count(m);
  optim_group *g = calloc(nrg * (nt + 1), sizeof *g);
  optim_group *t = calloc(nt, sizeof *t);
  if (!g || !t) {
    free(g);
    free(t);
    return -1;
  }
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *x = gpt_tensor_at(m, i);
    t[i] = (optim_group){x->offset, x->numel, x->decay};
  }
  size_t k = 0;
  for (size_t j = 0; j < nrg; j++)
    k += zslice_cut(t, nt, rg[j].flat, rg[j].n, rg[j].local, rg[j].pad, g + k);
  free(t);
  *out = g;
  *ng = k;
  return 0;
}

/* The engine's activations, backward scratch and id buffers: what it
 * holds beside the parameter and gradient arrays. */
static uint64_t acts_bytes(const gpt *m) {
  uint64_t arrays = ((uint64_t)gpt_capacity(m, GPT_BUF_PARAMS) +
                     gpt_capacity(m, GPT_BUF_GRADS)) *
                    4;
  uint64_t all = gpt_allocated_bytes(m);
  return all > arrays ? all - arrays : 0;
}

/* The bytes held now, each kind's high-water mark for the step: called
 * wherever a buffer is taken (a gathered group, a group's gradient, the
 * spare shard) and after each micro-batch, whose forward sizes the
 * activations. */
static void track_peak(zero *z) {
  uint64_t p = (uint64_t)gpt_capacity(z->m, GPT_BUF_PARAMS) * 4 +
               (z->pshard ? (uint64_t)z->S * 4 : 0) + z->gathered;
  uint64_t g = (uint64_t)gpt_capacity(z->m, GPT_BUF_GRADS) * 4 +
               (z->gshard ? (uint64_t)z->S * 4 : 0) +
               (z->gspare ? (uint64_t)z->S * 4 : 0) + z->gradbytes;
  uint64_t a = acts_bytes(z->m);
  if (p > z->peak_params)
    z->peak_params = p;
  if (a > z->peak_acts)
    z->peak_acts = a;
  if (g > z->peak_grads)
    z->peak_grads = g;
}

int zero_create(const zero_config *zc, gpt *model, const optim_config *oc,
                comm *c, zero **out, char *err, size_t errlen) {
  *out = NULL;
  if (zc->stage < 0 || zc->stage > 3) {
    snprintf(err, errlen, "zero: stage %d; it must be 0, 1, 2 or 3", zc->stage);
    return -1;
  }
  zero *z = calloc(1, sizeof *z);
  if (!z) {
    snprintf(err, errlen, "zero: out of memory");
    return -1;
  }
  z->cfg = *zc;
  z->m = model;
  z->c = c;
  z->oc = *oc;
  z->N = comm_size(c);
  z->r = comm_rank(c);
  z->P = gpt_num_params(model);
  z->S = (z->P + (size_t)z->N - 1) / (size_t)z->N;
  z->lo = (size_t)z->r * z->S;
  z->k = optim_state_floats_for(oc->kind, 1);
  for (int i = 0; i < ZERO_RING; i++)
    z->io[i].group = -1;
  size_t padded = z->S * (size_t)z->N;
  int st = zc->stage;
  if (st < 2) {
    /* Buckets of the config's size (at most P) over the P gradients. */
    z->bf = zc->bucket_floats ? zc->bucket_floats : (size_t)1 << 20;
    z->bf = minz(z->bf, z->P);
    z->nbuckets = (z->P + z->bf - 1) / z->bf;
  }
  optim_group *groups = NULL;
  size_t ng = 0;

  if (st >= 2) {
    /* The engine's groups: stage 2 reduces each group's gradient to the
     * ranks whose slices it reaches; stage 3 cuts each in N pieces, and
     * the shard is this rank's piece of every group, one after the
     * other. */
    z->ng = gpt_group_count(model);
    z->grp = calloc(z->ng, sizeof *z->grp);
    if (!z->grp) {
      snprintf(err, errlen, "zero: out of memory");
      goto fail;
    }
    if (st == 3)
      z->S = 0;
    for (size_t g = 0; g < z->ng; g++) {
      zgroup *gr = &z->grp[g];
      gpt_group_range(model, g, &gr->off, &gr->n);
      if (st == 3) {
        gr->S = (gr->n + (size_t)z->N - 1) / (size_t)z->N;
        gr->so = z->S;
        z->S += gr->S;
      }
    }
  }
  z->rg = calloc(z->ng + 1, sizeof *z->rg);
  if (!z->rg) {
    snprintf(err, errlen, "zero: out of memory");
    goto fail;
  }
  z->nrg = ranges_of(z, z->r, z->rg);
  /* Room for the all-gather of N slices of S into the engine's arrays. */
  if ((st == 1 || st == 2) &&
      gpt_acquire(model,
                  st == 1 ? GPT_BUF_PARAMS | GPT_BUF_GRADS : GPT_BUF_PARAMS,
                  padded, err, errlen) != 0)
    goto fail;
  if (st >= 2) {
    z->gshard = calloc(z->S, sizeof(float));
    if (!z->gshard) {
      snprintf(err, errlen, "zero: out of memory for the gradient shard");
      goto fail;
    }
    gpt_release(model, GPT_BUF_GRADS);
  }
  if (st == 3) {
    z->pshard = calloc(z->S, sizeof(float));
    if (!z->pshard) {
      snprintf(err, errlen, "zero: out of memory for the parameter shard");
      goto fail;
    }
    const float *p = gpt_params(model);
    for (size_t j = 0; j < z->nrg; j++)
      memcpy(z->pshard + z->rg[j].local, p + z->rg[j].flat,
             z->rg[j].n * sizeof(float));
    /* The engine finds each group where the parameter hook puts it. */
    gpt_release(model, GPT_BUF_PARAMS);
  }
  if (make_groups(model, z->rg, z->nrg, &groups, &ng) != 0) {
    snprintf(err, errlen, "zero: out of memory");
    goto fail;
  }
  int rc = optim_create(oc, st == 0 ? z->P : z->S, groups, ng, &z->opt, err,
                        errlen);
  free(groups);
  if (rc != 0)
    goto fail;
  *out = z;
  return 0;
fail:
  zero_destroy(z);
  return -1;
}

void zero_destroy(zero *z) {
  if (!z)
    return;
  optim_destroy(z->opt);
  free(z->pshard);
  free(z->gshard);
  free(z->gspare);
  free(z->rg);
  for (size_t g = 0; g < z->ng; g++) {
    /* Only after a failed step, which leaves the gang to be aborted:
     * requests still in flight are MPI's to drop. */
    free(z->grp[g].full);
    free(z->grp[g].grad);
  }
  free(z->grp);
  free(z);
}

/* ---- Stages 2-3: each group's gradient, reduced as it is final ---- */

/* Floats in group g's gradient buffer: stage 2 the group's own, stage 3
 * N pieces (the group, then padding), for the reduce-scatter. */
static size_t group_grad_floats(const zero *z, size_t g) {
  const zgroup *gr = &z->grp[g];
  return z->cfg.stage == 3 ? gr->S * (size_t)z->N : gr->n;
}

/* Waits for the oldest reduction in flight (with test_only, only checks
 * whether it is done: *done); a group's last frees its gradient. */
static int grad_wait_oldest(zero *z, int test_only, int *done, char *err,
                            size_t errlen) {
  int slot = (z->cur - z->nio + ZERO_RING) % ZERO_RING;
  grad_io *io = &z->io[slot];
  int rc, ok = 1;
  if (test_only)
    rc = TIMED(&z->tm, comm_test(z->c, io->req, &ok, err, errlen));
  else
    rc = TIMED(&z->tm, comm_wait(z->c, io->req, err, errlen));
  if (done)
    *done = ok;
  if (rc == 0 && !ok)
    return 0;
  io->req = NULL;
  z->nio--;
  if (io->group >= 0) {
    zgroup *gr = &z->grp[io->group];
    z->gradbytes -= (uint64_t)group_grad_floats(z, (size_t)io->group) * 4;
    free(gr->grad);
    gr->grad = NULL;
    io->group = -1;
    z->gflight--;
  }
  return rc;
}

static int grad_wait_one(zero *z, char *err, size_t errlen) {
  return grad_wait_oldest(z, 0, NULL, err, errlen);
}

/* The ring's next slot, once there is room (the oldest waited for when
 * ZERO_RING are in flight); NULL on a failed wait. */
static grad_io *grad_slot(zero *z, char *err, size_t errlen) {
  if (z->nio == ZERO_RING && grad_wait_one(z, err, errlen) != 0)
    return NULL;
  return &z->io[z->cur];
}

/* The reduction just started in grad_slot's slot is in flight; group:
 * the group whose buffer its end frees, or -1. */
static void grad_started(zero *z, int group) {
  z->io[z->cur].group = group;
  z->cur = (z->cur + 1) % ZERO_RING;
  z->nio++;
}

/* Starts the reduction of group g's gradient (final; the engine no longer
 * has it) into the gradient shard, once fewer than ZERO_INFLIGHT groups
 * are in flight (so a step holds the group being written and at most
 * ZERO_INFLIGHT more, besides the embeddings'); without overlap, waited
 * for at once. Stage 3 reduce-scatters its N pieces, each rank's into
 * its piece of the shard. At stage 2 the group is a flat range that rank
 * q's slice [q*S, (q+1)*S) cuts where it overlaps it: each part is
 * reduced to rank q, into its slice's gradients, so the bytes sent are a
 * reduce-scatter's. The buffer is freed when the last is done. */
static int group_reduce_start(zero *z, size_t g, char *err, size_t errlen) {
  while (z->gflight == ZERO_INFLIGHT)
    if (grad_wait_one(z, err, errlen) != 0)
      return -1;
  zgroup *gr = &z->grp[g];
  gpt_set_group_grads(z->m, g, NULL);
  size_t lo = gr->off, end = lo + gr->n, S = z->S;
  do {
    grad_io *io = grad_slot(z, err, errlen);
    if (!io)
      return -1;
    size_t hi = end;
    if (z->cfg.stage == 3) {
      if (TIMED(&z->tm,
                comm_ireduce_scatter_sum(z->c, gr->grad, z->gdst + gr->so,
                                         gr->S, &io->req, err, errlen)) != 0)
        return -1;
    } else {
      int q = (int)(lo / S);
      hi = (size_t)(q + 1) * S < end ? (size_t)(q + 1) * S : end;
      float *dst = q == z->r ? z->gdst + (lo - (size_t)q * S) : NULL;
      if (TIMED(&z->tm, comm_ireduce_sum(z->c, gr->grad + (lo - gr->off), dst,
                                         hi - lo, q, &io->req, err,
                                         errlen)) != 0)
        return -1;
    }
    grad_started(z, hi == end ? (int)g : -1);
    lo = hi;
  } while (lo < end);
  z->gflight++;
  /* Early: overlapped with the rest of backward (not so when waited for
   * here). */
  z->early += z->in_hook && !z->cfg.no_overlap;
  while (z->cfg.no_overlap && z->nio > 0)
    if (grad_wait_one(z, err, errlen) != 0)
      return -1;
  return 0;
}

/* Stages 0-1: starts the all-reduce of bucket b, the flat range [b*bf,
 * ...) of the engine's gradient array, in place. */
static int bucket_start(zero *z, size_t b, char *err, size_t errlen) {
  grad_io *io = grad_slot(z, err, errlen);
  if (!io)
    return -1;
  size_t off = b * z->bf, n = minz(z->bf, z->P - off);
  if (TIMED(&z->tm, comm_iallreduce_sum(z->c, gpt_grads(z->m) + off, n,
                                        &io->req, err, errlen)) != 0)
    return -1;
  grad_started(z, -1);
  z->early += z->in_hook;
  return 0;
}

/* Starts the reduction of every group (stages 2-3) or bucket (stages
 * 0-1) not yet started that lies in the final part [final_from, P) (the
 * gradient is final from the last float down). */
static int grads_ready(zero *z, size_t final_from, char *err,
                       size_t errlen) {
  while (z->rs_next > 0 && z->grp[z->rs_next - 1].off >= final_from) {
    if (group_reduce_start(z, z->rs_next - 1, err, errlen) != 0)
      return -1;
    z->rs_next--;
  }
  size_t first = zero_bucket_first_final(z->bf, z->nbuckets, final_from);
  while (z->next > first) {
    if (bucket_start(z, z->next - 1, err, errlen) != 0)
      return -1;
    z->next--;
  }
  return 0;
}

static int progress(zero *z, char *err, size_t errlen);

/* The engine's grad hook (gpt_set_grad_hook): what became final is sent,
 * and what is in flight moved along. */
static void grad_hook(void *arg, size_t final_from) {
  zero *z = arg;
  /* The engine's last call (final_from 0) comes when backward is done:
   * those are not overlapped with anything. */
  z->in_hook = final_from > 0;
  if (z->hook_rc == 0 &&
      (grads_ready(z, final_from, z->hook_err, sizeof z->hook_err) != 0 ||
       progress(z, z->hook_err, sizeof z->hook_err) != 0))
    z->hook_rc = -1;
  z->in_hook = 0;
}

/* ---- Stage 3: the parameters, one group at a time ---- */

/* Starts (async) or does the all-gather of group g's pieces into a new
 * buffer of N*S floats (the group's n, then padding). */
static int group_gather(zero *z, size_t g, int async, char *err,
                        size_t errlen) {
  zgroup *gr = &z->grp[g];
  size_t nf = gr->S * (size_t)z->N;
  gr->full = malloc(nf * sizeof(float));
  if (!gr->full) {
    snprintf(err, errlen, "zero: out of memory for %zu parameters of group %zu",
             nf, g);
    return -1;
  }
  z->gathered += (uint64_t)nf * 4;
  track_peak(z);
  if (async)
    return TIMED(&z->tm, comm_iallgather(z->c, z->pshard + gr->so, gr->full, gr->S,
                                    &gr->ag, err, errlen));
  return TIMED(&z->tm, comm_allgather(z->c, z->pshard + gr->so, gr->full, gr->S,
                                 err, errlen));
}

static void group_drop(zero *z, size_t g) {
  zgroup *gr = &z->grp[g];
  free(gr->full);
  gr->full = NULL;
  z->gathered -= (uint64_t)gr->S * (size_t)z->N * 4;
  gpt_set_group_params(z->m, g, NULL);
}

/* MPI moves a nonblocking collective along only inside MPI calls: a look
 * at the requests in flight between layers lets the prefetch and the
 * gradients' reductions progress while the engine computes. */
static int progress(zero *z, char *err, size_t errlen) {
  for (size_t g = 0; g < z->ng; g++) {
    zgroup *gr = &z->grp[g];
    int done;
    if (gr->ag && TIMED(&z->tm, comm_test(z->c, gr->ag, &done, err, errlen)) != 0) {
      gr->ag = NULL;
      return -1;
    }
    if (gr->ag && done)
      gr->ag = NULL;
  }
  int done = 1;
  while (z->nio > 0 && done)
    if (grad_wait_oldest(z, 1, &done, err, errlen) != 0)
      return -1;
  return 0;
}

/* The engine's parameter hook (gpt_set_param_hook). Stage 3: group g's
 * parameters gathered before use (or the prefetch waited for), the next
 * group's all-gather started, and g's freed after use unless it is
 * needed again at once (stage 2's stay on the model's full array). At
 * both, in backward, g's gradient made (zeroed). */
static int param_hook(void *arg, int event, int g, int next) {
  zero *z = arg;
  char *err = z->hook_err;
  size_t errlen = sizeof z->hook_err;
  zgroup *gr = &z->grp[g];
  int s3 = z->cfg.stage == 3;
  if (z->hook_rc != 0)
    return -1;
  if (event == GPT_PARAMS_DONE) {
    if (s3 && next != g)
      group_drop(z, (size_t)g);
    if (progress(z, err, errlen) != 0)
      goto fail;
    return 0;
  }
  if (s3 && !gr->full && group_gather(z, (size_t)g, 0, err, errlen) != 0)
    goto fail;
  if (gr->ag) {
    comm_req *req = gr->ag;
    gr->ag = NULL;
    if (TIMED(&z->tm, comm_wait(z->c, req, err, errlen)) != 0)
      goto fail;
  }
  if (s3)
    gpt_set_group_params(z->m, (size_t)g, gr->full);
  if (z->in_bwd && !gr->grad) {
    size_t nf = group_grad_floats(z, (size_t)g);
    gr->grad = calloc(nf, sizeof(float));
    if (!gr->grad) {
      snprintf(err, errlen,
               "zero: out of memory for %zu gradients of group %zu", nf,
               (size_t)g);
      goto fail;
    }
    z->gradbytes += (uint64_t)nf * 4;
    gpt_set_group_grads(z->m, (size_t)g, gr->grad);
    track_peak(z);
  }
  if (s3 && !z->cfg.no_overlap && next >= 0 && next != g &&
      !z->grp[next].full &&
      group_gather(z, (size_t)next, 1, err, errlen) != 0)
    goto fail;
  return 0;
fail:
  z->hook_rc = -1;
  return -1;
}

/* ---- The step ---- */

static double sumsq(const float *x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)x[i] * (double)x[i];
  return s;
}

/* Micro-batch in/tg (B,T) of a step: forward, and backward at scale
 * (1/(N x accum): the step's gradient is the mean over ranks and
 * micro-batches), adding into the gradient; *loss gets its loss; its
 * forward and backward time is added into res.
 * Stages 0-1 accumulate in the engine's full gradient array and send it
 * only from the last micro-batch's backward (last): one all-reduce of
 * each bucket per optimizer step, however many micro-batches.
 * Stages 2-3 reduce every micro-batch's groups as they become final, as
 * without accumulation: a rank keeps no full gradient (that is what
 * stage 2 saves), so holding one until the last micro-batch would cost
 * stage 1's memory. Micro-batch 0's reductions write the gradient shard,
 * a later one's a spare shard (z->gdst) that is then added into it: one
 * reduce-scatter's bytes per micro-batch, S more floats held. */
static int micro_step(zero *z, const uint32_t *in, const uint32_t *tg, int B,
                      int T, int last, float scale, float *loss,
                      zero_step_result *res, char *err, size_t errlen) {
  gpt *m = z->m;
  int st = z->cfg.stage;
  /* Stages 2-3: each group's gradient made by the parameter hook in
   * backward, just before the engine adds into it; stage 3: each group's
   * parameters gathered there before the engine uses them. */
  z->in_bwd = 0;
  if (st >= 2)
    gpt_set_param_hook(m, param_hook, z);
  double tf = clock_monotonic(), c0 = z->tm.total;
  if (gpt_forward(m, in, tg, B, T, loss, err, errlen) != 0) {
    gpt_set_param_hook(m, NULL, NULL);
    if (z->hook_rc != 0)
      snprintf(err, errlen, "%s", z->hook_err);
    return -1;
  }
  /* The gradients are sent from the grad hook as they become final:
   * stages 2-3 a group at a time, stages 0-1 in buckets (without overlap,
   * all after backward; before the last micro-batch, none). */
  z->rs_next = z->ng;
  z->next = last ? z->nbuckets : 0;
  z->in_bwd = 1;
  if (st >= 2 || (last && !z->cfg.no_overlap))
    gpt_set_grad_hook(m, grad_hook, z);
  /* Forward's and backward's own time: their wall time less the comm
   * waits inside them (the hooks'). */
  double tb = clock_monotonic(), c_fwd = z->tm.total;
  res->t_forward += tb - tf - (c_fwd - c0);
  gpt_backward(m, scale);
  gpt_set_grad_hook(m, NULL, NULL);
  gpt_set_param_hook(m, NULL, NULL);
  res->t_backward += clock_monotonic() - tb - (z->tm.total - c_fwd);
  if (z->hook_rc != 0) {
    snprintf(err, errlen, "%s", z->hook_err);
    return -1;
  }
  if (grads_ready(z, 0, err, errlen) != 0)
    return -1;
  while (z->nio > 0)
    if (grad_wait_one(z, err, errlen) != 0)
      return -1;
  if (z->gdst != z->gshard)
    for (size_t i = 0; i < z->S; i++)
      z->gshard[i] += z->gspare[i];
  return 0;
}

/* The step's end, once every micro-batch's gradient is reduced (loss:
 * this rank's mean over its micro-batches): the global norm, the loss's
 * mean over ranks, the guard, clipping, the update, the parameters made
 * whole again (stages 1-2), and the step's times. */
static int finish_step(zero *z, float loss, float lr, double max_norm,
                       double t0, zero_step_result *res, char *err,
                       size_t errlen) {
  gpt *m = z->m;
  int st = z->cfg.stage;
  float *g; /* this rank's gradient slice [lo, lo+S) or all of it */
  size_t gn;
  double norm;
  if (st < 2) {
    /* Every rank has the whole reduced gradient: its norm needs no
     * communication. */
    norm = optim_clip_grad_norm(gpt_grads(m), z->P, 0.0);
    g = st == 0 ? gpt_grads(m) : gpt_grads(m) + z->lo;
    gn = st == 0 ? z->P : z->S;
  } else {
    g = z->gshard;
    gn = z->S;
    norm = sumsq(g, gn);
    if (TIMED(&z->tm, comm_allreduce_sum_double(z->c, &norm, err, errlen)) != 0)
      return -1;
    norm = sqrt(norm);
  }
  float l = loss;
  if (z->N > 1 && TIMED(&z->tm, comm_allreduce_sum(z->c, &l, 1, err, errlen)) != 0)
    return -1;
  res->loss = l / (float)z->N;
  res->norm = norm;
  if (zero_update_factor(z, res->loss, norm, &res->lr_factor, err, errlen) !=
      0)
    return -1;
  lr *= (float)res->lr_factor;
  /* Clipping, as optim_clip_grad_norm does it, with the global norm. */
  if (max_norm > 0.0 && isfinite(norm)) {
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      float s = (float)coef;
      for (size_t i = 0; i < gn; i++)
        g[i] *= s;
    }
  }
  if (res->lr_factor == 0.0) {
    /* No update: the weights are as every rank has them. */
  } else if (st == 0) {
    optim_step(z->opt, gpt_params(m), g, lr);
  } else if (st < 3) {
    float *p = gpt_params(m);
    optim_step(z->opt, p + z->lo, g, lr);
    if (TIMED(&z->tm, comm_allgather(z->c, p + z->lo, p, z->S, err, errlen)) != 0)
      return -1;
  } else {
    optim_step(z->opt, z->pshard, g, lr);
  }
  res->t_comm = z->tm.total;
  res->t_optimizer =
      clock_monotonic() - t0 - res->t_forward - res->t_backward - z->tm.total;
  return 0;
}

int zero_step(zero *z, const uint32_t *inputs, const uint32_t *targets, int B,
              int T, float lr, double max_norm, zero_step_result *res,
              char *err, size_t errlen) {
  return zero_step_accum(z, inputs, targets, B, T, 1, lr, max_norm, res, err,
                         errlen);
}

int zero_step_accum(zero *z, const uint32_t *inputs, const uint32_t *targets,
                    int B, int T, int accum, float lr, double max_norm,
                    zero_step_result *res, char *err, size_t errlen) {
  int st = z->cfg.stage;
  double t0 = clock_monotonic();
  if (accum < 1) {
    snprintf(err, errlen, "zero: %d micro-batches; at least 1", accum);
    return -1;
  }
  z->tm.total = 0;
  z->peak_params = z->peak_grads = z->peak_acts = 0;
  z->hook_rc = 0;
  z->early = 0;
  res->t_forward = res->t_backward = 0;
  track_peak(z);
  if (st < 2)
    gpt_zero_grad(z->m);
  if (st >= 2 && accum > 1 && !z->gspare &&
      !(z->gspare = calloc(z->S, sizeof(float)))) {
    snprintf(err, errlen, "zero: out of memory for a gradient shard");
    return -1;
  }
  track_peak(z);
  double lsum = 0;
  size_t bt = (size_t)B * (size_t)T;
  for (int k = 0; k < accum; k++) {
    float l = 0.0f;
    z->gdst = k == 0 ? z->gshard : z->gspare;
    if (micro_step(z, inputs + (size_t)k * bt, targets + (size_t)k * bt, B, T,
                   k == accum - 1, 1.0f / ((float)z->N * (float)accum), &l, res,
                   err, errlen) != 0)
      return -1;
    lsum += l;
    track_peak(z);
  }
  free(z->gspare);
  z->gspare = NULL;
  z->gdst = z->gshard;
  res->buckets = st >= 2 ? (int)z->ng * accum : (int)z->nbuckets;
  res->buckets_early = z->early;
  return finish_step(z, (float)(lsum / accum), lr, max_norm, t0, res, err,
                     errlen);
}

void zero_set_guard(zero *z, zero_guard_fn fn, void *arg) {
  z->guard = fn;
  z->guard_arg = arg;
}

int zero_update_factor(zero *z, float loss, double norm, double *factor,
                       char *err, size_t errlen) {
  double f = z->guard ? z->guard(z->guard_arg, loss, norm) : 1.0;
  if (!isfinite(loss) || !isfinite(norm) || !(f > 0.0))
    f = 0.0;
  if (z->guard && z->N > 1 &&
      TIMED(&z->tm, comm_broadcast(z->c, &f, sizeof f, 0, err, errlen)) != 0)
    return -1;
  *factor = f;
  return 0;
}

/* Stage 3's most gathered floats at once, from the engine's order of
 * groups (gpt.h's gpt_set_param_hook: forward 0, 1 .. L, L+1, 0; backward
 * 0, L+1, L .. 1): the group in use and the next one, prefetched during
 * it (without overlap, the group in use alone). A formula, not a
 * measurement: zero_memory's peak_params is measured. */
static uint64_t peak_groups(const zero *z) {
  size_t L = z->ng - 2, n = 0, order[2 * 1024 + 8];
  order[n++] = 0;
  for (size_t l = 1; l <= L + 1; l++)
    order[n++] = l;
  order[n++] = 0;
  order[n++] = L + 1;
  for (size_t l = L; l >= 1; l--)
    order[n++] = l;
  uint64_t most = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t f = (uint64_t)z->grp[order[i]].S * (size_t)z->N;
    if (!z->cfg.no_overlap && i + 1 < n && order[i + 1] != order[i])
      f += (uint64_t)z->grp[order[i + 1]].S * (size_t)z->N;
    most = f > most ? f : most;
  }
  return most;
}

/* Stages 2-3's most gradient-buffer floats at once: the embeddings'
 * (group 0: made first in backward, final last) and, of the others in
 * backward's order (L+1, L .. 1), the one being written and the
 * ZERO_INFLIGHT before it whose reductions may still be in flight
 * (without overlap, the one being written alone). A formula, not a
 * measurement: zero_memory's peak_grads is measured. */
static uint64_t peak_grad_groups(const zero *z) {
  size_t w = z->cfg.no_overlap ? 1 : ZERO_INFLIGHT + 1;
  uint64_t most = 0;
  for (size_t i = z->ng - 1; i >= 1; i--) {
    uint64_t f = 0;
    for (size_t j = i; j < z->ng && j < i + w; j++)
      f += group_grad_floats(z, j);
    most = f > most ? f : most;
  }
  return group_grad_floats(z, 0) + most;
}

void zero_memory_get(const zero *z, zero_memory *o) {
  memset(o, 0, sizeof *o);
  uint64_t Psi = z->P, N = (uint64_t)z->N;
  int st = z->cfg.stage;
  o->stage = st;
  o->world = z->N;
  o->n_params = Psi;
  o->params = (uint64_t)gpt_capacity(z->m, GPT_BUF_PARAMS) * 4 +
              (z->pshard ? (uint64_t)z->S * 4 : 0);
  o->grads = (uint64_t)gpt_capacity(z->m, GPT_BUF_GRADS) * 4 +
             (z->gshard ? (uint64_t)z->S * 4 : 0);
  o->optim = (uint64_t)optim_state_floats(z->opt) * 4;
  o->peak_params = z->peak_params > o->params ? z->peak_params : o->params;
  o->peak_grads = z->peak_grads > o->grads ? z->peak_grads : o->grads;
  o->acts = acts_bytes(z->m);
  o->peak_acts = z->peak_acts > o->acts ? z->peak_acts : o->acts;
  o->f_params = st == 3 ? 4 * Psi / N : 4 * Psi;
  o->f_grads = st >= 2 ? 4 * Psi / N : 4 * Psi;
  o->f_optim = st >= 1 ? 4 * z->k * Psi / N : 4 * z->k * Psi;
  static const uint64_t rep[4] = {16, 4, 2, 0}; /* replicated bytes/param */
  o->f_mixed = rep[st] * Psi + (16 - rep[st]) * Psi / (st == 0 ? 1 : N);
  o->f_peak_params = st == 3 ? 4 * Psi / N + 4 * peak_groups(z) : o->f_params;
  o->f_peak_grads = st >= 2 ? 4 * (uint64_t)z->S + 4 * peak_grad_groups(z)
                            : o->f_grads;
}

int zero_gather_params(zero *z, float *out, char *err, size_t errlen) {
  if (z->cfg.stage < 3) {
    memcpy(out, gpt_params(z->m), z->P * sizeof(float));
    return 0;
  }
  /* Group by group, through one buffer of the largest. */
  size_t most = 0;
  for (size_t g = 0; g < z->ng; g++)
    most = z->grp[g].S > most ? z->grp[g].S : most;
  float *all = malloc(most * (size_t)z->N * sizeof(float));
  if (!all) {
    snprintf(err, errlen, "zero: out of memory");
    return -1;
  }
  int rc = 0;
  for (size_t g = 0; g < z->ng && rc == 0; g++) {
    const zgroup *gr = &z->grp[g];
    rc = comm_allgather(z->c, z->pshard + gr->so, all, gr->S, err, errlen);
    if (rc == 0)
      memcpy(out + gr->off, all, gr->n * sizeof(float));
  }
  free(all);
  return rc;
}

void zero_shape_get(const zero *z, zero_shape *o) {
  int st = z->cfg.stage;
  *o = (zero_shape){st, z->N, z->r, z->P, st == 0 ? 0 : z->lo,
                    st == 0 ? z->P : z->S, z->bf, z->nbuckets,
                    z->cfg.no_overlap};
}

size_t zero_bucket_first_final(size_t bf, size_t nbuckets,
                               size_t final_from) {
  if (nbuckets == 0)
    return 0;
  size_t first = (final_from + bf - 1) / bf;
  return first < nbuckets ? first : nbuckets;
}

optim *zero_optim(zero *z) { return z->opt; }

float *zero_param_shard(zero *z) { return z->pshard; }

size_t zero_group_count(const zero *z) {
  return z->cfg.stage == 3 ? z->ng : 0;
}

void zero_group_piece(const zero *z, size_t g, zero_piece *out) {
  const zrange *rg = &z->rg[g];
  *out = (zero_piece){rg->flat, rg->n, rg->local, rg->pad};
}

/* ---- Checkpoints ---- */

/* Whether every rank got rc == 0 (collective); a comm failure is a
 * failure too. */
static int all_ok(zero *z, int rc, char *err, size_t errlen) {
  float bad = rc != 0 ? 1.0f : 0.0f;
  char e2[256];
  if (comm_allreduce_sum(z->c, &bad, 1, e2, sizeof e2) != 0) {
    snprintf(err, errlen, "%s", e2);
    return 0;
  }
  if (bad != 0.0f && rc == 0)
    snprintf(err, errlen, "zero: another rank failed (see its log)");
  return bad == 0.0f;
}

static const char *optim_name(optim_kind k) {
  return k == OPTIM_LION ? "lion" : "adamw";
}

/* The optimizer state: k arrays of stride floats from base, laid out as
 * the rank's ranges' local offsets say. */
static void state_view(zero *z, float **base, size_t *stride) {
  *base = optim_state(z->opt);
  *stride = z->cfg.stage == 0 ? z->P : z->S;
}

/* Where the rank's parameters are for its ranges' local offsets. */
static float *param_base(zero *z) {
  return z->cfg.stage == 3 ? z->pshard : gpt_params(z->m);
}

/* Stage 0-2 ranges hold their parameters at their flat offset. */
static size_t param_at(const zero *z, const zrange *rg) {
  return z->cfg.stage == 3 ? rg->local : rg->flat;
}

int zero_save(zero *z, const char *parent, int64_t step, char *err,
              size_t errlen) {
  ckpt_writer *w = NULL;
  char dir[4096] = {0};
  int rc = 0;
  if (z->r == 0) {
    rc = ckpt_begin(parent, step, &w, err, errlen);
    if (rc == 0)
      snprintf(dir, sizeof dir, "%s", ckpt_writer_dir(w));
  }
  if (!all_ok(z, rc, err, errlen) ||
      comm_broadcast(z->c, dir, sizeof dir, 0, err, errlen) != 0) {
    ckpt_abort(w);
    return -1;
  }
  /* This rank's real parameters, its ranges one after the other. */
  size_t n = 0;
  for (size_t j = 0; j < z->nrg; j++)
    n += z->rg[j].n;
  float *params = malloc((n + 1) * sizeof(float));
  float *state = malloc((z->k * n + 1) * sizeof(float));
  rc = -1;
  if (!params || !state) {
    snprintf(err, errlen, "zero: out of memory for the checkpoint");
  } else {
    float *base, *pb = param_base(z);
    size_t stride, at = 0;
    state_view(z, &base, &stride);
    for (size_t i = 0; i < z->nrg; i++) {
      const zrange *q = &z->rg[i];
      memcpy(params + at, pb + param_at(z, q), q->n * sizeof(float));
      for (size_t j = 0; j < z->k; j++)
        memcpy(state + j * n + at, base + j * stride + q->local,
               q->n * sizeof(float));
      at += q->n;
    }
    char path[4200], zr[16], zw[16], zs[16], zlo[32];
    snprintf(path, sizeof path, "%s/zero-rank-%05d.safetensors", dir, z->r);
    snprintf(zr, sizeof zr, "%d", z->r);
    snprintf(zw, sizeof zw, "%d", z->N);
    snprintf(zs, sizeof zs, "%d", z->cfg.stage);
    snprintf(zlo, sizeof zlo, "%zu", z->rg[0].flat);
    const char *keys[] = {"rank", "world_size", "stage", "offset"};
    const char *vals[] = {zr, zw, zs, zlo};
    st_tensor t[2] = {
        {"params", ST_F32, 1, {(int64_t)n}, params},
        {"optim", ST_F32, 2, {(int64_t)z->k, (int64_t)n}, state},
    };
    rc = st_write(path, t, 2, 0, keys, vals, 4, err, errlen);
  }
  free(params);
  free(state);
  if (!all_ok(z, rc, err, errlen)) {
    ckpt_abort(w);
    return -1;
  }
  rc = 0;
  if (z->r == 0) {
    cJSON *root = cJSON_CreateObject(), *zo = cJSON_CreateObject();
    cJSON *ranks = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "zero", zo);
    cJSON_AddNumberToObject(zo, "world_size", z->N);
    cJSON_AddNumberToObject(zo, "stage", z->cfg.stage);
    cJSON_AddNumberToObject(zo, "n_params", (double)z->P);
    cJSON_AddNumberToObject(zo, "shard", (double)z->S);
    cJSON_AddStringToObject(zo, "optim", optim_name(z->oc.kind));
    cJSON_AddNumberToObject(zo, "optim_floats", (double)z->k);
    cJSON_AddNumberToObject(zo, "t", (double)optim_get_t(z->opt));
    zrange *qr = calloc(z->ng + 1, sizeof *qr);
    for (int q = 0; q < z->N && qr; q++) {
      char f[64];
      size_t nq = ranges_of(z, q, qr);
      snprintf(f, sizeof f, "zero-rank-%05d.safetensors", q);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "file", f);
      /* The file's params are these flat ranges, one after the other. */
      cJSON *ra = cJSON_AddArrayToObject(o, "ranges");
      for (size_t j = 0; j < nq; j++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)qr[j].flat));
        cJSON_AddItemToArray(
            pair, cJSON_CreateNumber((double)(qr[j].flat + qr[j].n)));
        cJSON_AddItemToArray(ra, pair);
      }
      cJSON_AddItemToArray(ranks, o);
    }
    cJSON_AddItemToObject(zo, "ranks", ranks);
    char *txt = qr ? cJSON_PrintUnformatted(root) : NULL;
    free(qr);
    cJSON_Delete(root);
    if (!txt) {
      snprintf(err, errlen, "zero: out of memory for the manifest");
      ckpt_abort(w);
      rc = -1;
    } else {
      rc = ckpt_commit(w, txt, NULL, 0, err, errlen);
      free(txt);
    }
  }
  return all_ok(z, rc, err, errlen) ? 0 : -1;
}

/* The flat ranges of a manifest's rank entry ("ranges": [[begin, end],
 * ...], or one "begin" and "end"), into *out (caller frees). 0, or -1
 * for a malformed entry. */
static int saved_ranges(cJSON *o, size_t P, zrange **out, size_t *n) {
  cJSON *ra = cJSON_GetObjectItem(o, "ranges"), *e;
  cJSON *jb = cJSON_GetObjectItem(o, "begin"),
        *je = cJSON_GetObjectItem(o, "end");
  size_t cnt = cJSON_IsArray(ra) ? (size_t)cJSON_GetArraySize(ra) : 1;
  zrange *r = calloc(cnt + 1, sizeof *r);
  if (!r)
    return -1;
  size_t k = 0, at = 0;
  if (cJSON_IsArray(ra)) {
    cJSON_ArrayForEach(e, ra) {
      cJSON *b = cJSON_GetArrayItem(e, 0), *x = cJSON_GetArrayItem(e, 1);
      if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 ||
          !cJSON_IsNumber(b) || !cJSON_IsNumber(x))
        goto bad;
      r[k++] = (zrange){(size_t)b->valuedouble,
                        (size_t)x->valuedouble - (size_t)b->valuedouble, at, 0};
      at += r[k - 1].n;
    }
  } else if (cJSON_IsNumber(jb) && cJSON_IsNumber(je)) {
    r[k++] = (zrange){(size_t)jb->valuedouble,
                      (size_t)je->valuedouble - (size_t)jb->valuedouble, 0, 0};
  } else {
    goto bad;
  }
  for (size_t j = 0; j < k; j++)
    if (r[j].flat > P || r[j].n > P - r[j].flat)
      goto bad;
  *out = r;
  *n = k;
  return 0;
bad:
  free(r);
  return -1;
}

/* Copies the intersection of every range saved in dir's files with the
 * wanted ranges: parameters into pdst (range pr[j]'s flat floats at
 * pdst + pr[j].local) and, when sdst is set, the optimizer state into
 * its k arrays (sdst + x*sstride + sr[j].local). */
static int load_ranges(const char *dir, cJSON *ranks, size_t k, size_t P,
                       float *pdst, const zrange *pr, size_t npr, float *sdst, const zrange *sr, size_t nsr,
                       size_t sstride, char *err, size_t errlen) {
  cJSON *o;
  cJSON_ArrayForEach(o, ranks) {
    cJSON *f = cJSON_GetObjectItem(o, "file");
    zrange *q = NULL;
    size_t nq = 0;
    if (!cJSON_IsString(f) || strchr(f->valuestring, '/') ||
        saved_ranges(o, P, &q, &nq) != 0) {
      snprintf(err, errlen, "zero: %s: a bad entry in the manifest's ranks",
               dir);
      return -1;
    }
    /* Does any saved range meet a wanted one? */
    size_t n = 0;
    int want = 0;
    for (size_t i = 0; i < nq; i++) {
      n += q[i].n;
      for (size_t j = 0; j < npr; j++)
        want |= q[i].flat < pr[j].flat + pr[j].n &&
                pr[j].flat < q[i].flat + q[i].n;
      for (size_t j = 0; sdst && j < nsr; j++)
        want |= q[i].flat < sr[j].flat + sr[j].n &&
                sr[j].flat < q[i].flat + q[i].n;
    }
    if (!want) {
      free(q);
      continue;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, f->valuestring);
    st_file *sf;
    if (st_open(path, &sf, err, errlen) != 0) {
      free(q);
      return -1;
    }
    const st_tensor *tp = st_find(sf, "params"), *ts = st_find(sf, "optim");
    if (!tp || !ts || tp->dtype != ST_F32 || ts->dtype != ST_F32 ||
        tp->ndim != 1 || (size_t)tp->shape[0] != n || ts->ndim != 2 ||
        (size_t)ts->shape[0] != k || (size_t)ts->shape[1] != n) {
      snprintf(err, errlen,
               "zero: %s: params (%zu) and optim (%zu,%zu) expected", path, n,
               k, n);
      st_close(sf);
      free(q);
      return -1;
    }
    const float *fp = tp->data, *fs = ts->data;
    for (size_t i = 0; i < nq; i++) {
      size_t qb = q[i].flat, qe = qb + q[i].n;
      for (size_t j = 0; j < npr; j++) {
        size_t a = qb > pr[j].flat ? qb : pr[j].flat;
        size_t b = minz(qe, pr[j].flat + pr[j].n);
        if (a < b)
          memcpy(pdst + pr[j].local + (a - pr[j].flat), fp + q[i].local + (a - qb),
                 (b - a) * sizeof(float));
      }
      for (size_t j = 0; sdst && j < nsr; j++) {
        size_t a = qb > sr[j].flat ? qb : sr[j].flat;
        size_t b = minz(qe, sr[j].flat + sr[j].n);
        for (size_t x = 0; a < b && x < k; x++)
          memcpy(sdst + x * sstride + sr[j].local + (a - sr[j].flat),
                 fs + x * n + q[i].local + (a - qb), (b - a) * sizeof(float));
      }
    }
    st_close(sf);
    free(q);
  }
  return 0;
}

/* The manifest of the sharded checkpoint dir, checked against a model of
 * P parameters and an optimizer of that kind: *root (caller deletes)
 * holds *ranks, *t the optimizer's step count, *step the checkpoint's. */
static int read_manifest(const char *dir, size_t P, optim_kind kind,
                         cJSON **root, cJSON **ranks, uint64_t *t,
                         int64_t *step, char *err, size_t errlen) {
  char *txt = NULL;
  *root = NULL;
  if (ckpt_read_state(dir, step, &txt, err, errlen) != 0)
    return -1;
  *root = cJSON_Parse(txt);
  free(txt);
  cJSON *zo = cJSON_GetObjectItem(*root, "zero");
  cJSON *jP = cJSON_GetObjectItem(zo, "n_params");
  cJSON *on = cJSON_GetObjectItem(zo, "optim");
  cJSON *jt = cJSON_GetObjectItem(zo, "t");
  *ranks = cJSON_GetObjectItem(zo, "ranks");
  if (!cJSON_IsNumber(jP) || !cJSON_IsString(on) || !cJSON_IsNumber(jt) ||
      !cJSON_IsArray(*ranks)) {
    snprintf(err, errlen, "zero: %s is not a ZeRO checkpoint", dir);
    return -1;
  }
  if ((size_t)jP->valuedouble != P || strcmp(on->valuestring, optim_name(kind)) != 0) {
    snprintf(err, errlen,
             "zero: %s holds %.0f parameters and %s state; this model has "
             "%zu and %s",
             dir, jP->valuedouble, on->valuestring, P, optim_name(kind));
    return -1;
  }
  *t = (uint64_t)jt->valuedouble;
  return 0;
}

int zero_load(zero *z, const char *dir, int64_t *step, char *err,
              size_t errlen) {
  int rc = 0;
  if (z->r == 0)
    rc = ckpt_verify(dir, err, errlen);
  if (!all_ok(z, rc, err, errlen))
    return -1;
  cJSON *root, *ranks;
  uint64_t t;
  rc = read_manifest(dir, z->P, z->oc.kind, &root, &ranks, &t, step, err,
                     errlen);
  if (rc == 0) {
    float *base;
    size_t stride;
    state_view(z, &base, &stride);
    /* Stages 0-2 hold every parameter, stage 3 its pieces. */
    zrange all = {0, z->P, 0, z->P};
    int s3 = z->cfg.stage == 3;
    rc = load_ranges(dir, ranks, z->k, z->P, param_base(z), s3 ? z->rg : &all,
                     s3 ? z->nrg : 1, base, z->rg, z->nrg, stride, err,
                     errlen);
    if (rc == 0)
      optim_set_t(z->opt, t);
  }
  cJSON_Delete(root);
  return all_ok(z, rc, err, errlen) ? 0 : -1;
}

int zero_is_sharded(const char *dir) {
  char *txt = NULL, err[256];
  int64_t step;
  if (ckpt_read_state(dir, &step, &txt, err, sizeof err) != 0)
    return 0;
  cJSON *root = cJSON_Parse(txt);
  free(txt);
  int yes = cJSON_IsObject(cJSON_GetObjectItem(root, "zero"));
  cJSON_Delete(root);
  return yes;
}

int zero_read_whole(const char *dir, gpt *model, optim *opt, optim_kind kind,
                    int64_t *step, char *err, size_t errlen) {
  size_t P = gpt_num_params(model), k = optim_state_floats_for(kind, 1);
  if (optim_state_floats(opt) != optim_state_floats_for(kind, P)) {
    snprintf(err, errlen, "zero: the optimizer is not over the whole model");
    return -1;
  }
  if (ckpt_verify(dir, err, errlen) != 0)
    return -1;
  cJSON *root, *ranks;
  uint64_t t;
  int rc = read_manifest(dir, P, kind, &root, &ranks, &t, step, err, errlen);
  if (rc == 0) {
    zrange all = {0, P, 0, P};
    rc = load_ranges(dir, ranks, k, P, gpt_params(model), &all, 1,
                     optim_state(opt), &all, 1, P, err, errlen);
  }
  if (rc == 0)
    optim_set_t(opt, t);
  cJSON_Delete(root);
  return rc;
}

void zero_set_optim_state(zero *z, const float *state, uint64_t t) {
  float *base;
  size_t stride;
  state_view(z, &base, &stride);
  for (size_t j = 0; j < z->nrg; j++)
    for (size_t x = 0; x < z->k; x++)
      memcpy(base + x * stride + z->rg[j].local,
             state + x * z->P + z->rg[j].flat, z->rg[j].n * sizeof(float));
  optim_set_t(z->opt, t);
}
