/* Tensor-parallel training on GPU ranks; see tensor_cuda.h. */
#include "tensor_cuda.h"

#include "cuda/gpt_cuda.h"
#include "tensor.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tensor_cuda {
  comm *c;
  tensor_cuda_options o;
  int r, ranks;
  tensor_layout *lay;
  size_t n, nrepl, full; /* the shard's floats, its replicated ones, the
                            model's */
  gpt_cuda *g;
  /* A host optimizer of the shard's size: the staging of its state for
   * gpt_cuda_upload_shard and _download_shard. */
  optim *lopt;
  float *dev2; /* 2 device floats: a host double's sum over the group */
};

/* gpt_cuda_tp's collectives: the group's, on device buffers. */
static int tp_allreduce(void *arg, float *buf, size_t n, char *err,
                        size_t errlen) {
  return comm_allreduce_sum(arg, buf, n, err, errlen);
}
static int tp_allgather(void *arg, const float *send, float *recv, size_t n,
                        char *err, size_t errlen) {
  return comm_allgather(arg, send, recv, n, err, errlen);
}

/* *x summed over the group, as comm_allreduce_sum_double carries it (two
 * floats), through device memory: NCCL moves no host memory. */
static int sum_double(tensor_cuda *t, double *x, char *err, size_t errlen) {
  float hl[2];
  hl[0] = (float)*x;
  hl[1] = (float)(*x - (double)hl[0]);
  cudaError_t e = cudaMemcpy(t->dev2, hl, sizeof hl, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    if (comm_allreduce_sum(t->c, t->dev2, 2, err, errlen) != 0)
      return -1;
    e = cudaMemcpy(hl, t->dev2, sizeof hl, cudaMemcpyDeviceToHost);
  }
  if (e != cudaSuccess) {
    snprintf(err, errlen, "tensor_cuda: a sum: %s", cudaGetErrorString(e));
    return -1;
  }
  *x = (double)hl[0] + (double)hl[1];
  return 0;
}

/* What the CUDA engine's tensor parallel takes: 0, or -1 with err. */
static int check(comm *c, const gpt_config *cfg, int ranks, char *err,
                 size_t errlen) {
  if (comm_backend_of(c) != COMM_NCCL) {
    snprintf(err, errlen, "tensor parallel on GPUs needs an NCCL communicator");
    return -1;
  }
  return tensor_check(cfg, ranks, ranks, err, errlen);
}

/* The engine in its tensor-shard mode over t's layout, and its weights.
 * 0, or -1 with err. */
static int make_engine(tensor_cuda *t, const gpt *model, char *err,
                       size_t errlen) {
  size_t nt = gpt_tensor_count(model);
  gpt_cuda_tp_tensor *tt = calloc(nt, sizeof *tt);
  float *buf = malloc(t->n * sizeof *buf);
  int rc = -1;
  if (!tt || !buf) {
    snprintf(err, errlen, "tensor_cuda: out of memory");
    goto out;
  }
  for (size_t i = 0; i < nt; i++)
    tensor_layout_tensor(t->lay, i, &tt[i].offset, &tt[i].numel);
  gpt_cuda_options go = {.B = t->o.B,
                         .T = t->o.T,
                         .opt = t->o.opt,
                         .deterministic = t->o.deterministic,
                         .device = comm_device(t->c),
                         .tp = {.ranks = t->ranks,
                                .rank = t->r,
                                .tensors = tt,
                                .n = t->n,
                                .allreduce = tp_allreduce,
                                .allgather = tp_allgather,
                                .arg = t->c}};
  if (gpt_cuda_create(model, &go, &t->g, err, errlen) != 0)
    goto out;
  /* On the engine's device (gpt_cuda_create made it the thread's). */
  if (cudaMalloc((void **)&t->dev2, 2 * sizeof(float)) != cudaSuccess) {
    cudaGetLastError();
    snprintf(err, errlen, "tensor_cuda: out of device memory");
    goto out;
  }
  tensor_layout_take(t->lay, t->r, gpt_params((gpt *)model), buf);
  rc = gpt_cuda_upload_shard(t->g, buf, NULL, err, errlen);
out:
  free(tt);
  free(buf);
  return rc;
}

int tensor_cuda_create(comm *c, const gpt *model, const tensor_cuda_options *o,
                       tensor_cuda **out, char *err, size_t errlen) {
  *out = NULL;
  int ranks = comm_size(c);
  if (check(c, gpt_get_config(model), ranks, err, errlen) != 0)
    return -1;
  if (o->micro < 1) {
    snprintf(err, errlen, "tensor_cuda: %d micro-batches", o->micro);
    return -1;
  }
  tensor_cuda *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, errlen, "tensor_cuda: out of memory");
    return -1;
  }
  t->c = c;
  t->o = *o;
  t->ranks = ranks;
  t->r = comm_rank(c);
  t->full = gpt_num_params(model);
  optim_group whole;
  if (tensor_layout_create(model, ranks, &t->lay, err, errlen) != 0)
    goto fail;
  t->n = tensor_layout_floats(t->lay, &t->nrepl);
  whole = (optim_group){0, t->n, 1};
  if (optim_create(&o->opt, t->n, &whole, 1, &t->lopt, err, errlen) != 0 ||
      make_engine(t, model, err, errlen) != 0)
    goto fail;
  *out = t;
  return 0;
fail:
  tensor_cuda_destroy(t);
  return -1;
}

void tensor_cuda_destroy(tensor_cuda *t) {
  if (!t)
    return;
  gpt_cuda_destroy(t->g);
  if (t->dev2)
    cudaFree(t->dev2);
  optim_destroy(t->lopt);
  tensor_layout_destroy(t->lay);
  free(t);
}

void tensor_cuda_sizes(const tensor_cuda *t, size_t *local, size_t *full) {
  *local = t->n;
  *full = t->full;
}

int tensor_cuda_forward_backward(tensor_cuda *t, const uint32_t *inputs,
                                 const uint32_t *targets, double *loss,
                                 char *err, size_t errlen) {
  size_t BT = (size_t)t->o.B * t->o.T;
  int m = t->o.micro;
  double sum = 0;
  if (gpt_cuda_zero_grad(t->g, err, errlen) != 0)
    return -1;
  for (int k = 0; k < m; k++) {
    float l = 0;
    if (gpt_cuda_forward_train(t->g, inputs + k * BT, targets + k * BT, t->o.B,
                               t->o.T, &l, err, errlen) != 0 ||
        gpt_cuda_backward(t->g, 1.0f / (float)m, err, errlen) != 0)
      return -1;
    sum += l / m; /* as trainkit_forward_backward sums them */
  }
  /* Rank 0's replicated gradients and loss for the group (tensor.h
   * says why). */
  double x = t->r == 0 ? sum : 0.0;
  if (gpt_cuda_synchronize(t->g, err, errlen) != 0 ||
      comm_broadcast(t->c, gpt_cuda_grads_ptr(t->g), t->nrepl * sizeof(float),
                     0, err, errlen) != 0 ||
      sum_double(t, &x, err, errlen) != 0)
    return -1;
  *loss = x;
  return 0;
}

int tensor_cuda_clip_grad_norm(tensor_cuda *t, double max_norm, double *norm,
                               char *err, size_t errlen) {
  size_t lo = t->r == 0 ? 0 : t->nrepl;
  double ss = 0;
  if (gpt_cuda_grad_sumsq(t->g, lo, t->n - lo, &ss, err, errlen) != 0 ||
      sum_double(t, &ss, err, errlen) != 0)
    return -1;
  *norm = sqrt(ss);
  gpt_cuda_set_clip(t->g, *norm, max_norm);
  return 0;
}

int tensor_cuda_step(tensor_cuda *t, float lr, char *err, size_t errlen) {
  return gpt_cuda_step(t->g, lr, err, errlen);
}

/* The state floats a parameter has (AdamW 2, Lion 1). */
static size_t per_param(const tensor_cuda *t) {
  return optim_state_floats(t->lopt) / t->n;
}

/* Rank rr's shards, buf (1 + k arrays of n), into rank 0's model and
 * full's state (NULL: the weights alone). */
static void place(tensor_cuda *t, int rr, const float *buf, gpt *model,
                  optim *full, size_t k) {
  tensor_layout_place(t->lay, rr, buf, gpt_params(model));
  for (size_t j = 0; full && j < k; j++)
    tensor_layout_place(t->lay, rr, buf + (1 + j) * t->n,
                        optim_state(full) + j * t->full);
}

/* Each other rank's shards to rank 0 in turn through dev (device, bytes):
 * the group's NCCL communicator moves device memory only. */
static int collect(tensor_cuda *t, float *buf, void *dev, size_t bytes,
                   gpt *model, optim *full, size_t k, char *err,
                   size_t errlen) {
  for (int rr = 1; rr < t->ranks; rr++) {
    cudaError_t e = cudaSuccess;
    if (t->r == rr)
      e = cudaMemcpy(dev, buf, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
      snprintf(err, errlen, "tensor_cuda: gather: %s", cudaGetErrorString(e));
      return -1;
    }
    if (comm_broadcast(t->c, dev, bytes, rr, err, errlen) != 0)
      return -1;
    if (t->r == 0) {
      e = cudaMemcpy(buf, dev, bytes, cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) {
        snprintf(err, errlen, "tensor_cuda: gather: %s", cudaGetErrorString(e));
        return -1;
      }
      place(t, rr, buf, model, full, k);
    }
  }
  return 0;
}

int tensor_cuda_gather(tensor_cuda *t, gpt *model, int with_state, optim *full,
                       char *err, size_t errlen) {
  size_t k = with_state ? per_param(t) : 0, n = t->n;
  size_t bytes = (1 + k) * n * sizeof(float);
  if (t->r == 0 && with_state &&
      (!full || optim_state_floats(full) != k * t->full)) {
    snprintf(err, errlen,
             "tensor_cuda: gather: no optimizer of the whole "
             "model for the state");
    return -1;
  }
  float *buf = malloc(bytes);
  void *dev = NULL;
  if (!buf || cudaMalloc(&dev, bytes) != cudaSuccess) {
    cudaGetLastError();
    free(buf);
    snprintf(err, errlen, "tensor_cuda: out of memory gathering the shards");
    return -1;
  }
  int rc = gpt_cuda_download_shard(t->g, buf, k ? t->lopt : NULL, err, errlen);
  if (rc == 0 && k)
    memcpy(buf + n, optim_state(t->lopt), k * n * sizeof(float));
  if (rc == 0 && t->r == 0) {
    place(t, 0, buf, model, k ? full : NULL, k);
    if (k)
      optim_set_t(full, gpt_cuda_get_t(t->g));
  }
  if (rc == 0)
    rc = collect(t, buf, dev, bytes, model, k ? full : NULL, k, err, errlen);
  cudaFree(dev);
  free(buf);
  return rc;
}

int tensor_cuda_load(tensor_cuda *t, const gpt *model, optim *full, char *err,
                     size_t errlen) {
  size_t k = per_param(t);
  if (optim_state_floats(full) != k * t->full) {
    snprintf(err, errlen,
             "tensor_cuda: the optimizer is not the whole model's");
    return -1;
  }
  float *buf = malloc(t->n * sizeof *buf);
  if (!buf) {
    snprintf(err, errlen, "tensor_cuda: out of memory");
    return -1;
  }
  tensor_layout_take(t->lay, t->r, gpt_params((gpt *)model), buf);
  for (size_t j = 0; j < k; j++)
    tensor_layout_take(t->lay, t->r, optim_state(full) + j * t->full,
                       optim_state(t->lopt) + j * t->n);
  optim_set_t(t->lopt, optim_get_t(full));
  int rc = gpt_cuda_upload_shard(t->g, buf, t->lopt, err, errlen);
  free(buf);
  return rc;
}
