/* The train stage's tensor-parallel loop; see tploop.h. */
#include "tploop.h"
#include "mploop.h"

#include "common/stagekit.h"
#include "lib/exitcode.h"
#include "tensor/tensor.h"

#include <stdio.h>

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

/* What the tensor-parallel engine does not have, beyond mploop_check's.
 * 0 or EXIT_BAD_PARAMS. */
static int check_params(trainrun *r, mploop *l) {
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
             l->K, why);
  return EXIT_BAD_PARAMS;
}

int tploop_run(trainrun *r, int N, int T) {
  mploop l = {.param = "tensor_parallel",
              .part = "ranks",
              .what = "tensor-parallel ranks",
              .N = N,
              .K = T};
  tensor_par *tp = NULL;
  char err[2048];
  int status = mploop_check(r, &l);
  if (status == 0)
    status = check_params(r, &l);
  if (status == 0)
    status = mploop_open(r, &l, tensor_check);
  if (status == 0) {
    tensor_options o = {
        .micro = l.m, .B = r->c.B, .T = r->c.m.T, .opt = r->c.opt, .dp = l.dc};
    if (tensor_create(l.kc, r->model, &o, &tp, err, sizeof err) != 0)
      mploop_abort(r, &l, "tensor parallel", err);
    /* The shards have gradients of their own: the model's full gradient
     * array is never written (rank 0's engine only evaluates). */
    gpt_release(r->model, GPT_BUF_GRADS);
    l.eng = (mploop_engine){tp, fb, clip, step, gather, load, NULL, NULL, NULL};
    size_t local, full;
    tensor_sizes(tp, &local, &full);
    const gpt_config *cfg = gpt_get_config(r->model);
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "tensor parallel: rank %d is shard %d of %d (heads %d-%d of "
              "%d, MLP columns %d-%d of %d, vocabulary rows %d-%d of %d; "
              "%zu of the model's %zu parameters), %d micro-batches "
              "(grad_accum) of %d x %d; data-parallel replica %d of %d "
              "(global batch %d x %d x %d = %d sequences); zero_stage "
              "ignored",
              l.rank, l.rank % T, T, l.rank % T * cfg->n_head / T,
              (l.rank % T + 1) * cfg->n_head / T - 1, cfg->n_head,
              l.rank % T * 4 * cfg->n_embd / T,
              (l.rank % T + 1) * 4 * cfg->n_embd / T - 1, 4 * cfg->n_embd,
              l.rank % T * cfg->padded_vocab / T,
              (l.rank % T + 1) * cfg->padded_vocab / T - 1, cfg->padded_vocab,
              local, full, l.m, r->c.B, r->c.m.T, l.rank / T, l.D, l.D, r->c.B,
              l.m, l.D * r->c.B * l.m);
    status = mploop_train(r, &l);
  }
  tensor_destroy(tp);
  mploop_close(&l);
  return status;
}
