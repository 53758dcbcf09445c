/*
 * zero: ZeRO data parallelism over the comm layer (zero.h).
 */
#include "zero.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "safetensors.h"

/* Buckets in flight at once (stage 2/3): double buffering. */
#define ZERO_INFLIGHT 2

typedef struct bucket_io {
  comm_req *req;
  float *send; /* N * bucket_floats */
} bucket_io;

struct zero {
  zero_config cfg;
  gpt *m;
  comm *c;
  optim_config oc;
  optim *opt;
  int N, r;
  size_t P, S, lo; /* lo = r*S */
  size_t k;        /* optimizer state floats per parameter */
  float *pshard;   /* stage 3: the parameter shard (S) */
  float *gshard;   /* stage 2/3: the gradient shard (S) */
  /* stage 2/3 buckets */
  size_t bf, nbuckets;
  size_t next; /* buckets >= next have been started (counting down) */
  bucket_io io[ZERO_INFLIGHT];
  int nio;     /* in flight */
  int cur;     /* next io slot */
  int hook_rc; /* a failure inside the backward hook */
  int in_hook; /* buckets started now count as early */
  int early;   /* buckets started from the hook this step */
  char hook_err[256];
  uint64_t peak_params, peak_grads;
};

static size_t minz(size_t a, size_t b) { return a < b ? a : b; }

/* ---- Helpers ---- */

/* Optimizer groups for the flat range [lo, lo+n) of m, with offsets
 * relative to lo; floats past P (padding) are a group without decay. */
static int make_groups(gpt *m, size_t lo, size_t n, optim_group **out,
                       size_t *ng) {
  size_t nt = gpt_tensor_count(m), P = gpt_num_params(m);
  optim_group *g = calloc(nt + 1, sizeof *g);
  if (!g)
    return -1;
  size_t k = 0, hi = lo + n;
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    size_t a = t->offset > lo ? t->offset : lo;
    size_t b = minz(t->offset + t->numel, hi);
    if (a < b)
      g[k++] = (optim_group){a - lo, b - a, t->decay};
  }
  if (hi > P) {
    size_t a = P > lo ? P : lo;
    g[k++] = (optim_group){a - lo, hi - a, 0};
  }
  *out = g;
  *ng = k;
  return 0;
}

static void track_peak(zero *z) {
  uint64_t p = (uint64_t)gpt_capacity(z->m, GPT_BUF_PARAMS) * 4 +
               (z->pshard ? (uint64_t)z->S * 4 : 0);
  uint64_t g = (uint64_t)gpt_capacity(z->m, GPT_BUF_GRADS) * 4 +
               (z->gshard ? (uint64_t)z->S * 4 : 0);
  if (p > z->peak_params)
    z->peak_params = p;
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
  size_t padded = z->S * (size_t)z->N;
  int st = zc->stage;
  optim_group *groups = NULL;
  size_t ng = 0;
  size_t on = st == 0 ? z->P : z->S, olo = st == 0 ? 0 : z->lo;

  /* Room for the all-gather of N slices of S into the engine's arrays. */
  if (st >= 1 &&
      gpt_acquire(model,
                  st == 1 ? GPT_BUF_PARAMS | GPT_BUF_GRADS : GPT_BUF_PARAMS,
                  padded, err, errlen) != 0)
    goto fail;
  if (st >= 2) {
    z->bf = zc->bucket_floats ? zc->bucket_floats : (size_t)1 << 20;
    if (z->bf > z->S)
      z->bf = z->S;
    z->nbuckets = (z->S + z->bf - 1) / z->bf;
    z->gshard = calloc(z->S, sizeof(float));
    for (int i = 0; i < ZERO_INFLIGHT; i++) {
      z->io[i].send = malloc(z->bf * (size_t)z->N * sizeof(float));
      if (!z->io[i].send)
        z->gshard = (free(z->gshard), NULL);
    }
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
    memcpy(z->pshard, gpt_params(model) + z->lo,
           (z->lo < z->P ? minz(z->S, z->P - z->lo) : 0) * sizeof(float));
    gpt_release(model, GPT_BUF_PARAMS);
  }
  if (make_groups(model, olo, on, &groups, &ng) != 0) {
    snprintf(err, errlen, "zero: out of memory");
    goto fail;
  }
  int rc = optim_create(oc, on, groups, ng, &z->opt, err, errlen);
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
  for (int i = 0; i < ZERO_INFLIGHT; i++)
    free(z->io[i].send);
  free(z);
}

/* ---- Stage 2/3 buckets ---- */

static int bucket_wait_one(zero *z, char *err, size_t errlen) {
  int slot = (z->cur - z->nio + ZERO_INFLIGHT) % ZERO_INFLIGHT;
  comm_req *req = z->io[slot].req;
  z->io[slot].req = NULL;
  z->nio--;
  return comm_wait(z->c, req, err, errlen);
}

/* Packs bucket b (shard-local [b*bf, ...) of every rank's shard) and
 * starts its reduce-scatter into the gradient shard. */
static int bucket_start(zero *z, size_t b, char *err, size_t errlen) {
  if (z->nio == ZERO_INFLIGHT && bucket_wait_one(z, err, errlen) != 0)
    return -1;
  size_t off = b * z->bf, n = minz(z->bf, z->S - off);
  bucket_io *io = &z->io[z->cur];
  const float *g = gpt_grads(z->m);
  for (int q = 0; q < z->N; q++) {
    size_t a = (size_t)q * z->S + off;
    size_t have = a < z->P ? minz(n, z->P - a) : 0;
    float *dst = io->send + (size_t)q * n;
    memcpy(dst, g + a, have * sizeof(float));
    memset(dst + have, 0, (n - have) * sizeof(float));
  }
  if (comm_ireduce_scatter_sum(z->c, io->send, z->gshard + off, n, &io->req,
                               err, errlen) != 0)
    return -1;
  z->cur = (z->cur + 1) % ZERO_INFLIGHT;
  z->nio++;
  z->early += z->in_hook;
  return 0;
}

/* Starts every bucket not yet started whose lowest piece (rank 0's, at
 * flat offset b*bf) lies in the final part [final_from, P). */
static int buckets_ready(zero *z, size_t final_from, char *err, size_t errlen) {
  while (z->next > 0) {
    size_t b = z->next - 1;
    if (b * z->bf < final_from)
      break;
    if (bucket_start(z, b, err, errlen) != 0)
      return -1;
    z->next = b;
  }
  return 0;
}

static void grad_hook(void *arg, size_t final_from) {
  zero *z = arg;
  /* The engine's last call (final_from 0) comes when backward is done:
   * those buckets are not overlapped with anything. */
  z->in_hook = final_from > 0;
  if (z->hook_rc == 0 &&
      buckets_ready(z, final_from, z->hook_err, sizeof z->hook_err) != 0)
    z->hook_rc = -1;
  z->in_hook = 0;
}

/* ---- The step ---- */

/* Sum over ranks of a double, carried as two floats (high part and the
 * rest) so the sum keeps about 14 digits. */
static int allreduce_double(zero *z, double *x, char *err, size_t errlen) {
  float hl[2];
  hl[0] = (float)*x;
  hl[1] = (float)(*x - (double)hl[0]);
  if (comm_allreduce_sum(z->c, hl, 2, err, errlen) != 0)
    return -1;
  *x = (double)hl[0] + (double)hl[1];
  return 0;
}

static double sumsq(const float *x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)x[i] * (double)x[i];
  return s;
}

int zero_step(zero *z, const uint32_t *inputs, const uint32_t *targets, int B,
              int T, float lr, double max_norm, zero_step_result *res,
              char *err, size_t errlen) {
  gpt *m = z->m;
  int st = z->cfg.stage;
  size_t padded = z->S * (size_t)z->N;
  z->peak_params = z->peak_grads = 0;
  track_peak(z);
  /* Stage 3: the whole model for this forward and backward. */
  if (st == 3) {
    if (gpt_acquire(m, GPT_BUF_PARAMS, padded, err, errlen) != 0)
      return -1;
    if (comm_allgather(z->c, z->pshard, gpt_params(m), z->S, err, errlen) != 0)
      return -1;
  }
  if (st >= 2 && gpt_acquire(m, GPT_BUF_GRADS, z->P, err, errlen) != 0)
    return -1;
  if (st < 2)
    gpt_zero_grad(m);
  track_peak(z);
  float loss = 0.0f;
  if (gpt_forward(m, inputs, targets, B, T, &loss, err, errlen) != 0)
    return -1;
  /* The mean over ranks of each rank's mean: 1/N in the backward. */
  if (st >= 2) {
    z->next = z->nbuckets;
    z->hook_rc = 0;
    z->early = 0;
    if (!z->cfg.no_overlap)
      gpt_set_grad_hook(m, grad_hook, z);
  }
  gpt_backward(m, 1.0f / (float)z->N);
  gpt_set_grad_hook(m, NULL, NULL);
  float *g; /* this rank's gradient slice [lo, lo+S) or all of it */
  size_t gn;
  double norm;
  if (st < 2) {
    if (z->N > 1 &&
        comm_allreduce_sum(z->c, gpt_grads(m), z->P, err, errlen) != 0)
      return -1;
    /* Every rank has the whole reduced gradient: its norm needs no
     * communication. */
    norm = optim_clip_grad_norm(gpt_grads(m), z->P, 0.0);
    g = st == 0 ? gpt_grads(m) : gpt_grads(m) + z->lo;
    gn = st == 0 ? z->P : z->S;
  } else {
    if (z->hook_rc != 0) {
      snprintf(err, errlen, "%s", z->hook_err);
      return -1;
    }
    if (buckets_ready(z, 0, err, errlen) != 0)
      return -1;
    while (z->nio > 0)
      if (bucket_wait_one(z, err, errlen) != 0)
        return -1;
    /* Only the shard is kept. */
    gpt_release(m, GPT_BUF_GRADS);
    g = z->gshard;
    gn = z->S;
    norm = sumsq(g, gn);
    if (allreduce_double(z, &norm, err, errlen) != 0)
      return -1;
    norm = sqrt(norm);
  }
  /* Clipping, as optim_clip_grad_norm does it, with the global norm. */
  if (max_norm > 0.0 && isfinite(norm)) {
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      float s = (float)coef;
      for (size_t i = 0; i < gn; i++)
        g[i] *= s;
    }
  }
  if (st == 0) {
    optim_step(z->opt, gpt_params(m), g, lr);
  } else if (st < 3) {
    float *p = gpt_params(m);
    optim_step(z->opt, p + z->lo, g, lr);
    if (comm_allgather(z->c, p + z->lo, p, z->S, err, errlen) != 0)
      return -1;
  } else {
    optim_step(z->opt, z->pshard, g, lr);
    gpt_release(m, GPT_BUF_PARAMS);
  }
  float l = loss;
  if (z->N > 1 && comm_allreduce_sum(z->c, &l, 1, err, errlen) != 0)
    return -1;
  res->loss = l / (float)z->N;
  res->norm = norm;
  res->buckets = st >= 2 ? (int)z->nbuckets : 0;
  res->buckets_early = st >= 2 ? z->early : 0;
  return 0;
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
  o->comm = z->gshard ? (uint64_t)ZERO_INFLIGHT * z->bf * N * 4 : 0;
  o->f_params = st == 3 ? 4 * Psi / N : 4 * Psi;
  o->f_grads = st >= 2 ? 4 * Psi / N : 4 * Psi;
  o->f_optim = st >= 1 ? 4 * z->k * Psi / N : 4 * z->k * Psi;
  static const uint64_t rep[4] = {16, 4, 2, 0}; /* replicated bytes/param */
  o->f_mixed = rep[st] * Psi + (16 - rep[st]) * Psi / (st == 0 ? 1 : N);
}

int zero_gather_params(zero *z, float *out, char *err, size_t errlen) {
  if (z->cfg.stage < 3) {
    memcpy(out, gpt_params(z->m), z->P * sizeof(float));
    return 0;
  }
  float *all = malloc(z->S * (size_t)z->N * sizeof(float));
  if (!all) {
    snprintf(err, errlen, "zero: out of memory");
    return -1;
  }
  int rc = comm_allgather(z->c, z->pshard, all, z->S, err, errlen);
  if (rc == 0)
    memcpy(out, all, z->P * sizeof(float));
  free(all);
  return rc;
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

/* The optimizer state of this rank, as k arrays: base pointer and the
 * distance between arrays, and the flat offset of its first float. */
static void state_view(zero *z, float **base, size_t *stride, size_t *flo) {
  *base = optim_state(z->opt);
  *stride = z->cfg.stage == 0 ? z->P : z->S;
  *flo = z->cfg.stage == 0 ? 0 : z->lo;
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
  /* This rank's range of the real parameters. */
  size_t a = minz(z->lo, z->P), n = minz(z->S, z->P - a);
  float *params = malloc((n + 1) * sizeof(float));
  float *state = malloc((z->k * n + 1) * sizeof(float));
  rc = -1;
  if (!params || !state) {
    snprintf(err, errlen, "zero: out of memory for the checkpoint");
  } else {
    if (z->cfg.stage == 3)
      memcpy(params, z->pshard, n * sizeof(float));
    else
      memcpy(params, gpt_params(z->m) + a, n * sizeof(float));
    float *base;
    size_t stride, flo;
    state_view(z, &base, &stride, &flo);
    for (size_t j = 0; j < z->k; j++)
      memcpy(state + j * n, base + j * stride + (a - flo), n * sizeof(float));
    char path[4200], zr[16], zw[16], zs[16], zlo[32];
    snprintf(path, sizeof path, "%s/zero-rank-%05d.safetensors", dir, z->r);
    snprintf(zr, sizeof zr, "%d", z->r);
    snprintf(zw, sizeof zw, "%d", z->N);
    snprintf(zs, sizeof zs, "%d", z->cfg.stage);
    snprintf(zlo, sizeof zlo, "%zu", a);
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
    for (int q = 0; q < z->N; q++) {
      char f[64];
      size_t qa = minz((size_t)q * z->S, z->P);
      snprintf(f, sizeof f, "zero-rank-%05d.safetensors", q);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "file", f);
      cJSON_AddNumberToObject(o, "begin", (double)qa);
      cJSON_AddNumberToObject(o, "end", (double)(qa + minz(z->S, z->P - qa)));
      cJSON_AddItemToArray(ranks, o);
    }
    cJSON_AddItemToObject(zo, "ranks", ranks);
    char *txt = cJSON_PrintUnformatted(root);
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

/* Copies the intersection of [a, b) with each saved range from the saved
 * files: params into pdst (flat offset pa), state arrays into sdst (flat
 * offset sa, stride sstride) when sdst is set. */
static int load_ranges(const char *dir, cJSON *ranks, size_t k, float *pdst,
                       size_t pa, size_t pb, float *sdst, size_t sa, size_t sb,
                       size_t sstride, char *err, size_t errlen) {
  cJSON *o;
  cJSON_ArrayForEach(o, ranks) {
    cJSON *f = cJSON_GetObjectItem(o, "file");
    cJSON *jb = cJSON_GetObjectItem(o, "begin"),
          *je = cJSON_GetObjectItem(o, "end");
    if (!cJSON_IsString(f) || !cJSON_IsNumber(jb) || !cJSON_IsNumber(je) ||
        strchr(f->valuestring, '/')) {
      snprintf(err, errlen, "zero: %s: a bad entry in the manifest's ranks",
               dir);
      return -1;
    }
    size_t qb = (size_t)jb->valuedouble, qe = (size_t)je->valuedouble;
    int want_p = pdst && qb < pb && pa < qe;
    int want_s = sdst && qb < sb && sa < qe;
    if (!want_p && !want_s)
      continue;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, f->valuestring);
    st_file *sf;
    if (st_open(path, &sf, err, errlen) != 0)
      return -1;
    const st_tensor *tp = st_find(sf, "params"), *ts = st_find(sf, "optim");
    size_t n = qe - qb;
    if (!tp || !ts || tp->dtype != ST_F32 || ts->dtype != ST_F32 ||
        tp->ndim != 1 || (size_t)tp->shape[0] != n || ts->ndim != 2 ||
        (size_t)ts->shape[0] != k || (size_t)ts->shape[1] != n) {
      snprintf(err, errlen,
               "zero: %s: params (%zu) and optim (%zu,%zu) expected", path, n,
               k, n);
      st_close(sf);
      return -1;
    }
    if (want_p) {
      size_t a = qb > pa ? qb : pa, b = minz(qe, pb);
      memcpy(pdst + (a - pa), (const float *)tp->data + (a - qb),
             (b - a) * sizeof(float));
    }
    if (want_s) {
      size_t a = qb > sa ? qb : sa, b = minz(qe, sb);
      for (size_t j = 0; j < k; j++)
        memcpy(sdst + j * sstride + (a - sa),
               (const float *)ts->data + j * n + (a - qb),
               (b - a) * sizeof(float));
    }
    st_close(sf);
  }
  return 0;
}

int zero_load(zero *z, const char *dir, int64_t *step, char *err,
              size_t errlen) {
  int rc = 0;
  if (z->r == 0)
    rc = ckpt_verify(dir, err, errlen);
  if (!all_ok(z, rc, err, errlen))
    return -1;
  char *txt = NULL;
  cJSON *root = NULL;
  rc = ckpt_read_state(dir, step, &txt, err, errlen);
  if (rc == 0) {
    root = cJSON_Parse(txt);
    cJSON *zo = cJSON_GetObjectItem(root, "zero");
    cJSON *P = cJSON_GetObjectItem(zo, "n_params");
    cJSON *on = cJSON_GetObjectItem(zo, "optim");
    cJSON *t = cJSON_GetObjectItem(zo, "t");
    cJSON *ranks = cJSON_GetObjectItem(zo, "ranks");
    if (!cJSON_IsNumber(P) || !cJSON_IsString(on) || !cJSON_IsNumber(t) ||
        !cJSON_IsArray(ranks)) {
      snprintf(err, errlen, "zero: %s is not a ZeRO checkpoint", dir);
      rc = -1;
    } else if ((size_t)P->valuedouble != z->P ||
               strcmp(on->valuestring, optim_name(z->oc.kind)) != 0) {
      snprintf(err, errlen,
               "zero: %s holds %.0f parameters and %s state; this model has "
               "%zu and %s",
               dir, P->valuedouble, on->valuestring, z->P,
               optim_name(z->oc.kind));
      rc = -1;
    } else {
      float *base;
      size_t stride, flo;
      state_view(z, &base, &stride, &flo);
      size_t sb = minz(flo + stride, z->P);
      /* Stages 0-2 hold every parameter, stage 3 its shard. */
      float *pdst = z->cfg.stage == 3 ? z->pshard : gpt_params(z->m);
      size_t pa = z->cfg.stage == 3 ? z->lo : 0;
      size_t pb = z->cfg.stage == 3 ? minz(z->lo + z->S, z->P) : z->P;
      rc = load_ranges(dir, ranks, z->k, pdst, pa, pb, base, flo, sb, stride,
                       err, errlen);
      if (rc == 0)
        optim_set_t(z->opt, (uint64_t)t->valuedouble);
    }
  }
  cJSON_Delete(root);
  free(txt);
  return all_ok(z, rc, err, errlen) ? 0 : -1;
}
