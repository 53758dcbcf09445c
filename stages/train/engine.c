/* The train stage's CPU / GPU seam; see engine.h. */
#include "engine.h"

#include "common/stagekit.h"
#include "model/evaluate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DAGRUN_HAVE_CUDA
#include "cuda/gpt_cuda.h"
#include "lib/clock.h"
#endif

struct engine {
  engine_device dev;
  gpt *model;
  optim *opt;
  engine_options o;
  char desc[768];
#ifdef DAGRUN_HAVE_CUDA
  gpt_cuda *g;
#endif
};

const char *const engine_device_names[] = {[ENGINE_WANT_AUTO] = "auto",
                                           [ENGINE_WANT_CPU] = "cpu",
                                           [ENGINE_WANT_CUDA] = "cuda",
                                           [ENGINE_WANT_CUDA + 1] = NULL};
const char *const engine_recompute_names[] = {
    [ENGINE_RECOMPUTE_NONE] = "none",
    [ENGINE_RECOMPUTE_GELU] = "gelu",
    [ENGINE_RECOMPUTE_BLOCK] = "block",
    [ENGINE_RECOMPUTE_BLOCK + 1] = NULL};

const char *engine_recompute_name(engine_recompute r) {
  return engine_recompute_names[r >= 0 && r <= 2 ? r : 0];
}

int engine_built_with_cuda(void) {
#ifdef DAGRUN_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

/* One rule for both loops, so that one process and a gang cannot come to
 * different answers for the same param and hardware. */
int engine_choose(engine_want want, int have_gpu, engine_device *out) {
  if (want == ENGINE_WANT_CPU || (want == ENGINE_WANT_AUTO && !have_gpu)) {
    *out = ENGINE_CPU;
    return 0;
  }
  if (!have_gpu)
    return -1; /* cuda asked for, and none */
  *out = ENGINE_CUDA;
  return 0;
}

int engine_pick(engine_want want, engine_device *out, char *why, size_t whylen,
                char *err, size_t errlen) {
  /* Before looking for a GPU: that loads and starts the CUDA driver
   * (cudaGetDeviceCount), which device: cpu has no use for. */
  if (want == ENGINE_WANT_CPU) {
    engine_choose(want, 0, out);
    snprintf(why, whylen, "device: cpu was asked for");
    return 0;
  }
  char gpu[512] = "";
  int have_gpu = 0;
#ifdef DAGRUN_HAVE_CUDA
  have_gpu = gpt_cuda_available(gpu, sizeof gpu);
#else
  snprintf(gpu, sizeof gpu,
           "this dagrun was built without CUDA (no nvcc, "
           "or -DDAGRUN_CUDA=OFF)");
#endif
  if (engine_choose(want, have_gpu, out) != 0) {
    snprintf(err, errlen,
             "device: cuda, but %s; use device: cpu or auto (auto trains on "
             "the GPU where there is one, else on the CPU)",
             gpu);
    return -1;
  }
  if (*out == ENGINE_CUDA)
    snprintf(why, whylen, "device: %s, and %s",
             want == ENGINE_WANT_AUTO ? "auto" : "cuda", gpu);
  else
    snprintf(why, whylen, "device: auto, and no GPU: %s", gpu);
  return 0;
}

int engine_create(engine_device dev, gpt *model, optim *opt,
                  const engine_options *o, engine **out, char *err,
                  size_t errlen) {
  *out = NULL;
  engine *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  e->dev = dev;
  e->model = model;
  e->opt = opt;
  e->o = *o;
  snprintf(e->desc, sizeof e->desc, "cpu");
  if (dev == ENGINE_CUDA) {
#ifdef DAGRUN_HAVE_CUDA
    gpt_cuda_options go = {.B = o->B,
                           .T = o->T,
                           .opt = o->opt,
                           .recompute = (gpt_recompute)o->recompute,
                           .deterministic = o->deterministic,
                           .device = 0};
    char name[200];
    if (gpt_cuda_device_name(0, name, sizeof name, err, errlen) != 0 ||
        gpt_cuda_create(model, &go, &e->g, err, errlen) != 0 ||
        gpt_cuda_upload(e->g, model, opt, err, errlen) != 0) {
      engine_destroy(e);
      return -1;
    }
    snprintf(e->desc, sizeof e->desc, "cuda: %s; attention: %s", name,
             gpt_cuda_attention(e->g, NULL));
#else
    snprintf(err, errlen, "this dagrun was built without CUDA; use device: "
                          "cpu or auto");
    engine_destroy(e);
    return -1;
#endif
  }
  *out = e;
  return 0;
}

void engine_destroy(engine *e) {
  if (!e)
    return;
#ifdef DAGRUN_HAVE_CUDA
  gpt_cuda_destroy(e->g);
#endif
  free(e);
}

engine_device engine_get_device(const engine *e) { return e->dev; }
const char *engine_describe(const engine *e) { return e->desc; }

/* Each branch below is the CPU engine's call or the GPU's; the CPU's are
 * the ones the stage made before the seam, unchanged. */

int engine_forward_backward(engine *e, loader *ld, uint32_t *inputs,
                            uint32_t *targets, int accum, double *loss,
                            trainkit_times *times, char *err, size_t errlen) {
  int B = e->o.B, T = e->o.T;
  if (e->dev == ENGINE_CPU)
    return trainkit_forward_backward(e->model, ld, inputs, targets, B, T,
                                     accum, loss, times, err, errlen);
#ifdef DAGRUN_HAVE_CUDA
  /* The GPU runs asynchronously: each phase ends with a wait on the
   * stream, so that the host clock around it measures the GPU's work
   * (trainkit.h); the wait costs the GPU a few microseconds of idle time
   * per phase. */
  trainkit_times t = {0};
  double tk = clock_monotonic();
  if (gpt_cuda_zero_grad(e->g, err, errlen) != 0 ||
      gpt_cuda_synchronize(e->g, err, errlen) != 0)
    return -1;
  t.zero = stagekit_lap(&tk);
  *loss = 0;
  for (int k = 0; k < accum; k++) {
    float l = 0;
    if (ld)
      loader_next(ld, inputs, targets);
    t.data += stagekit_lap(&tk);
    if (gpt_cuda_forward_train(e->g, inputs, targets, B, T, &l, err, errlen) !=
        0)
      return -1;
    t.forward += stagekit_lap(&tk);
    if (gpt_cuda_backward(e->g, 1.0f / (float)accum, err, errlen) != 0 ||
        gpt_cuda_synchronize(e->g, err, errlen) != 0)
      return -1;
    t.backward += stagekit_lap(&tk);
    *loss += (double)l / accum;
  }
  if (times)
    *times = t;
  return 0;
#else
  return -1;
#endif
}

int engine_loss(engine *e, const uint32_t *inputs, const uint32_t *targets,
                double *loss, char *err, size_t errlen) {
  float l = 0;
  int rc = -1;
  if (e->dev == ENGINE_CPU)
    rc = gpt_forward(e->model, inputs, targets, e->o.B, e->o.T, &l, err,
                     errlen);
#ifdef DAGRUN_HAVE_CUDA
  else
    rc = gpt_cuda_forward(e->g, inputs, targets, e->o.B, e->o.T, &l, err,
                          errlen);
#endif
  *loss = l;
  return rc;
}

int engine_scale_grads(engine *e, float s, char *err, size_t errlen) {
  if (e->dev == ENGINE_CPU) {
    float *g = gpt_grads(e->model);
    size_t n = gpt_num_params(e->model);
    for (size_t i = 0; i < n; i++)
      g[i] *= s;
    return 0;
  }
#ifdef DAGRUN_HAVE_CUDA
  return gpt_cuda_scale_grads(e->g, s, err, errlen);
#else
  return -1;
#endif
}

int engine_clip_grad_norm(engine *e, double max_norm, double *norm, char *err,
                          size_t errlen) {
  if (e->dev == ENGINE_CPU) {
    *norm = optim_clip_grad_norm(gpt_grads(e->model), gpt_num_params(e->model),
                                 max_norm);
    return 0;
  }
#ifdef DAGRUN_HAVE_CUDA
  return gpt_cuda_clip_grad_norm(e->g, max_norm, norm, err, errlen);
#else
  return -1;
#endif
}

int engine_step(engine *e, float lr, char *err, size_t errlen) {
  if (e->dev == ENGINE_CPU) {
    optim_step(e->opt, gpt_params(e->model), gpt_grads(e->model), lr);
    return 0;
  }
#ifdef DAGRUN_HAVE_CUDA
  return gpt_cuda_step(e->g, lr, err, errlen);
#else
  return -1;
#endif
}

int engine_optim_reset(engine *e, char *err, size_t errlen) {
  if (e->dev == ENGINE_CPU) {
    optim_reset(e->opt);
    return 0;
  }
#ifdef DAGRUN_HAVE_CUDA
  return gpt_cuda_optim_reset(e->g, err, errlen);
#else
  return -1;
#endif
}

int engine_sync_to_host(engine *e, char *err, size_t errlen) {
#ifdef DAGRUN_HAVE_CUDA
  if (e->dev == ENGINE_CUDA)
    return gpt_cuda_download(e->g, e->model, e->opt, err, errlen);
#endif
  return 0;
}

int engine_load_from_host(engine *e, char *err, size_t errlen) {
#ifdef DAGRUN_HAVE_CUDA
  if (e->dev == ENGINE_CUDA)
    return gpt_cuda_upload(e->g, e->model, e->opt, err, errlen);
#endif
  return 0;
}

int engine_eval_batches(loader *ld, int B, int T, uint64_t nb,
                        engine_batch_loss fn, void *arg, double *loss,
                        char *err, size_t errlen) {
  uint64_t n = loader_batches_per_epoch(ld);
  if (nb && nb < n)
    n = nb;
  if (n == 0) {
    snprintf(err, errlen, "evaluate: no batches of B=%d T=%d in the data", B,
             T);
    return -1;
  }
  size_t bt = (size_t)B * T;
  uint32_t *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg);
  int rc = in && tg ? 0 : -1;
  if (rc)
    snprintf(err, errlen, "evaluate: out of memory for %zu token ids", 2 * bt);
  double sum = 0;
  for (uint64_t b = 0; rc == 0 && b < n; b++) {
    float l = 0;
    loader_next(ld, in, tg);
    rc = fn(arg, in, tg, &l, err, errlen);
    sum += l;
  }
  free(in);
  free(tg);
  if (rc == 0)
    *loss = sum / (double)n;
  return rc;
}

#ifdef DAGRUN_HAVE_CUDA
/* The engine and the batch's shape: the loader's, which may be smaller
 * than the training batch the engine was made for (e->o.B x e->o.T), and
 * the buffers engine_eval_batches hands over hold that many ids only. */
typedef struct cuda_eval {
  engine *e;
  int B, T;
} cuda_eval;

static int cuda_batch_loss(void *arg, const uint32_t *in, const uint32_t *tg,
                           float *loss, char *err, size_t errlen) {
  const cuda_eval *c = arg;
  return gpt_cuda_forward(c->e->g, in, tg, c->B, c->T, loss, err, errlen);
}
#endif

int engine_eval_loss(engine *e, loader *ld, uint64_t nb, double *loss,
                     char *err, size_t errlen) {
  /* The loader's batches, which a small validation split makes smaller
   * than the training ones (loader_create_fitting). */
  int B, T;
  loader_shape(ld, &B, &T);
  if (e->dev == ENGINE_CPU) {
    eval_result er;
    if (evaluate_model(e->model, ld, B, T, nb, NULL, NULL, &er, err,
                       errlen) != 0)
      return -1;
    *loss = er.loss;
    return 0;
  }
#ifdef DAGRUN_HAVE_CUDA
  cuda_eval c = {e, B, T};
  return engine_eval_batches(ld, B, T, nb, cuda_batch_loss, &c, loss, err,
                             errlen);
#else
  return -1;
#endif
}

int engine_memory_get(engine *e, engine_memory *m, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
#ifdef DAGRUN_HAVE_CUDA
  if (e->dev == ENGINE_CUDA) {
    m->allocated = gpt_cuda_allocated_bytes(e->g);
    return gpt_cuda_device_used(e->g, &m->device_used, &m->device_total, err,
                                errlen);
  }
#endif
  return 0;
}
