/*
 * gpt_cuda_check: the CUDA backend (gpu/cuda/gpt_cuda.h) against the CPU
 * engine (gpu/cpu/gpt_cpu.c, gpu/optim/optim.c) from the same weights and
 * batch, for tests/gpu/test_gpt_cuda.sh.
 *
 *   gpt_cuda_check available   exit 0 with a GPU, 77 (skip) without
 *   gpt_cuda_check estimate    the memory estimate (no GPU needed)
 *   gpt_cuda_check step        one training step, loss / grads / update;
 *                              then weight decay alone (zero gradients),
 *                              bitwise the CPU's, tensor by tensor
 *   gpt_cuda_check recompute   none | gelu | block: same numbers, less
 *                              memory; in each, two micro-batches at
 *                              scale 0.5 against the CPU's one at 1, a
 *                              backward at scale 0 adding nothing, and a
 *                              micro-batch smaller than made for against
 *                              the CPU
 *   gpt_cuda_check oom         a batch too big for the card: a clear
 *                              error, no crash
 *   gpt_cuda_check logits MODEL_DIR IDS OUT
 *                              model_logits (tests/reference) on the GPU
 *   gpt_cuda_check nccl-version  the NCCL this program loads ("2.28.3"; no
 *                              GPU needed)
 *   gpt_cuda_check zero        ZeRO stages 0-3 on the GPU over NCCL
 *                              (gpu/zero/zero_cuda.h): one rank, or the
 *                              ranks of mpirun; see cmd_zero
 *   gpt_cuda_check shards      a gang's shards (lo > 0, the last one part
 *                              padding) on one GPU, the collectives by
 *                              hand; see cmd_shards
 *   gpt_cuda_check zero-oom    stages 2-3's buffers out of GPU memory:
 *                              a clear error, nothing kept; see
 *                              cmd_zero_oom
 *   gpt_cuda_check llama       step on two Llama shapes (GQA, an untied
 *                              head, a head size for the FP32 attention);
 *                              see cmd_llama
 *   gpt_cuda_check llama-recompute  recompute on a Llama shape
 *   gpt_cuda_check stages      pipeline stages chained against the whole
 *                              model (GPT-2, both Llama heads); see
 *                              check_stages
 *   gpt_cuda_check pipeline    pipeline.h over the CUDA engine on 2 ranks
 *                              (mpirun) against one GPU; see pipe_run
 *   gpt_cuda_check tensor      tensor parallel over the ranks of mpirun
 *                              against one GPU; see cmd_tensor (built
 *                              where gpu/tensor/tensor_cuda.c is)
 *
 * GPT_CUDA_CHECK_MODEL=llama in the environment makes every command's
 * test model the first Llama shape of cmd_llama instead of the GPT-2
 * (test_zero_cuda.sh runs zero so: ZeRO's stages on a Llama).
 *
 * Tolerances (BF16 compute against FP32): BF16 keeps 8 significant bits,
 * a relative rounding error of 2^-9 = 2e-3 per stored activation; a
 * forward pass stores each activation a few times per layer and the
 * errors, independent, add up like a random walk over the ops, so the
 * loss (a mean over B*T positions, which averages them further) is held
 * to 1e-2 relative. Gradients go through the BF16 residual-stream
 * gradient of every layer above: per tensor, cosine similarity > 0.99
 * and ||g_gpu - g_cpu|| / ||g_cpu|| < 5e-2 (llm.c's test_gpt2.cu holds
 * its BF16 gradients to a similar few percent). The first AdamW or Lion
 * update moves each weight by about +-lr (the sign of its gradient), so
 * an element whose gradient is within BF16 noise of zero may move the
 * other way: the updated master weights must agree within lr/10 on at
 * least 95% of the elements that moved, and nowhere differ by more than
 * 2 lr (+ float rounding).
 */
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "ckpt/modeldir.h"
#include "comm/comm.h"
#include "cuda/gpt_cuda.h"
#include "data/rng.h"
#include "lib/fileio.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "pipeline/pipeline.h"
#include "zero/zero.h"
#include "zero/zero_cuda.h"

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      printf("FAIL: ");                                                        \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
      failures++;                                                              \
    }                                                                          \
  } while (0)

static void die(const char *what, const char *err) {
  fprintf(stderr, "gpt_cuda_check: %s: %s\n", what, err);
  exit(1);
}

/* The test model: 2 layers, 4 heads, width 128, context 64, vocabulary
 * 1000 (padded to 1024: the padding rows are exercised). A GPT-2 unless
 * a command (cmd_llama) sets another. */
static gpt_config test_cfg = {.n_layer = 2,
                              .n_head = 4,
                              .n_embd = 128,
                              .block_size = 64,
                              .vocab_size = 1000};

static gpt *make_model(uint64_t seed) {
  gpt_config c = test_cfg;
  char err[512];
  gpt *m = NULL;
  if (gpt_config_finish(&c, err, sizeof err) != 0 ||
      gpt_create(&c, &m, err, sizeof err) != 0)
    die("model", err);
  gpt_init(m, seed);
  /* GPT-2's initialization leaves every bias at 0 and every LayerNorm
   * weight at 1, where a bias the GPU forgot to add or a LayerNorm weight
   * it read from the wrong place changes nothing: every parameter moves
   * by a uniform +-0.05 so that all of them count. */
  uint64_t s[4];
  rng_seed(s, seed ^ 0x5eedb1a5u);
  float *p = gpt_params(m);
  for (size_t i = 0; i < gpt_num_params(m); i++)
    p[i] += (float)((double)(rng_next(s) >> 11) * 0x1p-53 - 0.5) * 0.1f;
  return m;
}

/* Random ids (a fixed stream): targets are the inputs shifted by one, as
 * the loader makes them. */
static void make_batch(uint32_t *in, uint32_t *tg, int B, int T, int V,
                       uint64_t seed) {
  uint64_t s[4];
  rng_seed(s, seed);
  for (int b = 0; b < B; b++) {
    uint32_t prev = (uint32_t)rng_below(s, (uint64_t)V);
    for (int t = 0; t < T; t++) {
      uint32_t next = (uint32_t)rng_below(s, (uint64_t)V);
      in[b * T + t] = prev;
      tg[b * T + t] = next;
      prev = next;
    }
  }
}

static optim *make_optim(gpt *m, optim_kind kind) {
  size_t n = gpt_tensor_count(m);
  optim_group *g = calloc(n, sizeof *g);
  for (size_t i = 0; i < n; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    g[i] = (optim_group){t->offset, t->numel, t->decay};
  }
  optim_config oc = {.kind = kind,
                     .beta1 = 0.9f,
                     .beta2 = kind == OPTIM_ADAMW ? 0.95f : 0.99f,
                     .eps = 1e-8f,
                     .weight_decay = 0.1f};
  optim *o = NULL;
  char err[512];
  if (optim_create(&oc, gpt_num_params(m), g, n, &o, err, sizeof err) != 0)
    die("optimizer", err);
  free(g);
  return o;
}

static optim_config optim_cfg(optim_kind kind) {
  return (optim_config){.kind = kind,
                        .beta1 = 0.9f,
                        .beta2 = kind == OPTIM_ADAMW ? 0.95f : 0.99f,
                        .eps = 1e-8f,
                        .weight_decay = 0.1f};
}

/* cosine similarity and relative error of a against the reference b */
static void compare(const float *a, const float *b, size_t n, double *cos,
                    double *rel) {
  double ab = 0, aa = 0, bb = 0, dd = 0;
  for (size_t i = 0; i < n; i++) {
    ab += (double)a[i] * b[i];
    aa += (double)a[i] * a[i];
    bb += (double)b[i] * b[i];
    dd += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  }
  *cos = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1 : 0);
  *rel = bb > 0 ? sqrt(dd / bb) : sqrt(dd);
}

static void compare_grads(const gpt *m, const float *gpu, const float *cpu,
                          const char *label) {
  for (size_t i = 0; i < gpt_tensor_count(m); i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    double cos, rel;
    compare(gpu + t->offset, cpu + t->offset, t->numel, &cos, &rel);
    CHECK(cos > 0.99 && rel < 5e-2,
          "%s: gradient of %s: cosine %.5f (> 0.99), relative error %.4f "
          "(< 0.05)",
          label, t->name, cos, rel);
  }
}

enum { B_ = 4, T_ = 64 };

static int cmd_step(void) {
  char err[2048];
  const float lr = 1e-3f;
  for (int kind = 0; kind < 2; kind++) {
    const char *kname = kind == OPTIM_ADAMW ? "adamw" : "lion";
    gpt *cpu = make_model(7);
    const gpt_config *c = gpt_get_config(cpu);
    size_t np = gpt_num_params(cpu);
    uint32_t in[B_ * T_], tg[B_ * T_];
    make_batch(in, tg, B_, T_, c->vocab_size, 99);
    float *w0 = malloc(np * 4), *ggpu = malloc(np * 4), *wgpu = malloc(np * 4);
    memcpy(w0, gpt_params(cpu), np * 4);

    gpt_cuda_options o = {.B = B_, .T = T_, .opt = optim_cfg(kind)};
    gpt_cuda *g = NULL;
    if (gpt_cuda_create(cpu, &o, &g, err, sizeof err) != 0)
      die("gpt_cuda_create", err);

    /* CPU step */
    float lc = 0, lg = 0;
    optim *oc = make_optim(cpu, kind);
    gpt_zero_grad(cpu);
    if (gpt_forward(cpu, in, tg, B_, T_, &lc, err, sizeof err) != 0)
      die("cpu forward", err);
    gpt_backward(cpu, 1.0f);
    float *gcpu = malloc(np * 4); /* before clipping, which scales them */
    memcpy(gcpu, gpt_grads(cpu), np * 4);
    double ncpu = optim_clip_grad_norm(gpt_grads(cpu), np, 1.0);
    /* GPU step: the same. */
    double ngpu = 0;
    if (gpt_cuda_zero_grad(g, err, sizeof err) != 0 ||
        gpt_cuda_forward(g, in, tg, B_, T_, &lg, err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 1.0f, err, sizeof err) != 0 ||
        gpt_cuda_download_grads(g, ggpu, err, sizeof err) != 0 ||
        gpt_cuda_clip_grad_norm(g, 1.0, &ngpu, err, sizeof err) != 0)
      die("gpu step", err);
    printf("%s: loss cpu %.6f gpu %.6f; grad norm cpu %.6f gpu %.6f\n", kname,
           lc, lg, ncpu, ngpu);
    CHECK(fabs(lg - lc) / lc < 1e-2, "%s: loss gpu %.6f vs cpu %.6f", kname,
          lg, lc);
    CHECK(fabs(ngpu - ncpu) / ncpu < 5e-2, "%s: grad norm gpu %.6f vs cpu %.6f",
          kname, ngpu, ncpu);
    compare_grads(cpu, ggpu, gcpu, kname);
    free(gcpu);
    optim_step(oc, gpt_params(cpu), gpt_grads(cpu), lr);
    gpt *host = make_model(7);
    optim *ohost = make_optim(host, kind);
    if (gpt_cuda_step(g, lr, err, sizeof err) != 0 ||
        gpt_cuda_download(g, host, ohost, err, sizeof err) != 0)
      die("gpu update", err);
    memcpy(wgpu, gpt_params(host), np * 4);
    size_t moved = 0, agree = 0;
    double worst = 0;
    for (size_t i = 0; i < np; i++) {
      double dc = (double)gpt_params(cpu)[i] - w0[i];
      double dg = (double)wgpu[i] - w0[i];
      double d = fabs(dc - dg);
      if (d > worst)
        worst = d;
      if (fabs(dc) > 0 || fabs(dg) > 0) {
        moved++;
        agree += d <= 0.1 * lr;
      }
    }
    printf("%s: update: %zu of %zu weights moved, %.4f%% agree within lr/10, "
           "largest difference %.3g (lr %g)\n",
           kname, moved, np, moved ? 100.0 * agree / moved : 0, worst, lr);
    CHECK(moved > np / 2, "%s: only %zu of %zu weights moved", kname, moved, np);
    CHECK(agree >= 0.95 * moved, "%s: %zu of %zu moved weights agree", kname,
          agree, moved);
    CHECK(worst <= 2.0 * lr * 1.01 + 1e-6, "%s: a weight differs by %g",
          kname, worst);
    CHECK(gpt_cuda_get_t(g) == 1 && optim_get_t(ohost) == 1,
          "%s: step count %llu after one step", kname,
          (unsigned long long)gpt_cuda_get_t(g));
    /* The optimizer state went down with the weights: its moments are
     * the CPU's within the gradients' tolerance. */
    double cos, rel;
    compare(optim_state(ohost), optim_state(oc), np, &cos, &rel);
    CHECK(cos > 0.99 && rel < 5e-2, "%s: first moment: cosine %.5f, rel %.4f",
          kname, cos, rel);
    /* Upload then download is the identity (checkpoint transfer). */
    gpt *back = make_model(1);
    optim *oback = make_optim(back, kind);
    if (gpt_cuda_upload(g, cpu, oc, err, sizeof err) != 0 ||
        gpt_cuda_download(g, back, oback, err, sizeof err) != 0)
      die("upload / download", err);
    CHECK(memcmp(gpt_params(back), gpt_params(cpu), np * 4) == 0 &&
              memcmp(optim_state(oback), optim_state(oc),
                     optim_state_floats(oc) * 4) == 0 &&
              optim_get_t(oback) == optim_get_t(oc),
          "%s: upload + download changed the weights or optimizer state",
          kname);
    /* Weight decay alone, tensor by tensor: with zero gradients and zero
     * moments an update is p *= 1 - lr*wd on the decayed tensors and
     * nothing on the others, one float multiplication on either side, so
     * the weights must be bitwise the CPU's. (The first step above cannot
     * see decay: lr*wd*|p| is far below its lr/10 tolerance.) */
    optim_reset(oc);
    gpt_zero_grad(cpu);
    optim_step(oc, gpt_params(cpu), gpt_grads(cpu), 0.5f);
    if (gpt_cuda_optim_reset(g, err, sizeof err) != 0 ||
        gpt_cuda_zero_grad(g, err, sizeof err) != 0 ||
        gpt_cuda_step(g, 0.5f, err, sizeof err) != 0 ||
        gpt_cuda_download(g, back, NULL, err, sizeof err) != 0)
      die("gpu decay step", err);
    for (size_t i = 0; i < gpt_tensor_count(cpu); i++) {
      const gpt_tensor *t = gpt_tensor_at(cpu, i);
      CHECK(memcmp(gpt_params(back) + t->offset, gpt_params(cpu) + t->offset,
                   t->numel * 4) == 0,
            "%s: weight decay of %s (decay %d) differs from the CPU's", kname,
            t->name, t->decay);
    }
    /* Bad ids are refused as on the CPU. */
    in[5] = (uint32_t)c->vocab_size;
    CHECK(gpt_cuda_forward(g, in, tg, B_, T_, &lg, err, sizeof err) != 0 &&
              strstr(err, "not a token id"),
          "%s: an id >= vocab_size was accepted (%s)", kname, err);
    CHECK(gpt_cuda_forward(g, in, tg, B_ * 2, T_, &lg, err, sizeof err) != 0 &&
              strstr(err, "at most B=4"),
          "%s: a batch larger than made for was accepted (%s)", kname, err);
    gpt_cuda_destroy(g);
    gpt_destroy(cpu);
    gpt_destroy(host);
    gpt_destroy(back);
    optim_destroy(oc);
    optim_destroy(ohost);
    optim_destroy(oback);
    free(w0);
    free(ggpu);
    free(wgpu);
  }
  printf("%s\n", failures ? "step: FAILED" : "step: ok");
  return failures ? 1 : 0;
}

static int cmd_recompute(void) {
  char err[2048];
  gpt *m = make_model(11);
  size_t np = gpt_num_params(m);
  uint32_t in[B_ * T_], tg[B_ * T_];
  make_batch(in, tg, B_, T_, gpt_get_config(m)->vocab_size, 5);
  float loss[3];
  uint64_t bytes[3];
  float *grads[3];
  /* The CPU's references: one backward of the batch at scale 1 (what two
   * micro-batches at 0.5 must add up to), and a smaller micro-batch
   * (B/2, T/2) than the GPU model is made for (its activations are then
   * read at the strides of (B/2, T/2) inside buffers carved for (B, T)). */
  enum { B2 = B_ / 2, T2 = T_ / 2 };
  uint32_t in2[B2 * T2], tg2[B2 * T2];
  make_batch(in2, tg2, B2, T2, gpt_get_config(m)->vocab_size, 6);
  float *gref = malloc(np * 4), *gref2 = malloc(np * 4), *gtmp = malloc(np * 4);
  float lref = 0, lref2 = 0;
  gpt_zero_grad(m);
  if (gpt_forward(m, in, tg, B_, T_, &lref, err, sizeof err) != 0)
    die("cpu forward", err);
  gpt_backward(m, 1.0f);
  memcpy(gref, gpt_grads(m), np * 4);
  gpt_zero_grad(m);
  if (gpt_forward(m, in2, tg2, B2, T2, &lref2, err, sizeof err) != 0)
    die("cpu forward", err);
  gpt_backward(m, 1.0f);
  memcpy(gref2, gpt_grads(m), np * 4);
  for (int r = 0; r < 3; r++) {
    const char *rname = gpt_recompute_name((gpt_recompute)r);
    char label[64];
    gpt_cuda_options o = {.B = B_, .T = T_, .opt = optim_cfg(OPTIM_ADAMW),
                          .recompute = (gpt_recompute)r};
    gpt_cuda *g = NULL;
    grads[r] = malloc(np * 4);
    /* Two micro-batches of accumulation, the second on the same batch:
     * the gradient is the mean of two equal ones. */
    if (gpt_cuda_create(m, &o, &g, err, sizeof err) != 0 ||
        gpt_cuda_zero_grad(g, err, sizeof err) != 0 ||
        gpt_cuda_forward(g, in, tg, B_, T_, &loss[r], err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 0.5f, err, sizeof err) != 0 ||
        gpt_cuda_forward(g, in, tg, B_, T_, &loss[r], err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 0.5f, err, sizeof err) != 0 ||
        gpt_cuda_download_grads(g, grads[r], err, sizeof err) != 0)
      die(gpt_recompute_name((gpt_recompute)r), err);
    /* Accumulation and the backward's scale: 0.5 + 0.5 is the CPU's 1. */
    CHECK(fabsf(loss[r] - lref) / lref < 1e-2, "recompute %s: loss %.6f vs "
          "cpu %.6f", rname, loss[r], lref);
    snprintf(label, sizeof label, "recompute %s, 2 x 0.5 vs cpu", rname);
    compare_grads(m, grads[r], gref, label);
    /* The same through gpt_cuda_forward_train (the logits' gradient made
     * in the forward, the scale applied in the head's products): the
     * same bits, 0.5 being a power of 2; and no logits after it. */
    float lt = 0;
    if (gpt_cuda_zero_grad(g, err, sizeof err) != 0 ||
        gpt_cuda_forward_train(g, in, tg, B_, T_, &lt, err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 0.5f, err, sizeof err) != 0 ||
        gpt_cuda_forward_train(g, in, tg, B_, T_, &lt, err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 0.5f, err, sizeof err) != 0 ||
        gpt_cuda_download_grads(g, gtmp, err, sizeof err) != 0)
      die(rname, err);
    CHECK(lt == loss[r] && memcmp(gtmp, grads[r], np * 4) == 0,
          "recompute %s: gpt_cuda_forward_train's loss %.9g or gradients "
          "differ from gpt_cuda_forward's (%.9g)",
          rname, lt, loss[r]);
    float *lg = malloc((size_t)B_ * T_ * gpt_get_config(m)->padded_vocab * 4);
    CHECK(lg && gpt_cuda_forward_train(g, in, tg, B_, T_, &lt, err,
                                       sizeof err) == 0 &&
              gpt_cuda_logits(g, lg, err, sizeof err) != 0,
          "recompute %s: gpt_cuda_logits after gpt_cuda_forward_train did "
          "not fail", rname);
    free(lg);
    /* A backward at scale 0 adds nothing. */
    float l0 = 0;
    if (gpt_cuda_forward(g, in, tg, B_, T_, &l0, err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 0.0f, err, sizeof err) != 0 ||
        gpt_cuda_download_grads(g, gtmp, err, sizeof err) != 0)
      die(rname, err);
    CHECK(memcmp(gtmp, grads[r], np * 4) == 0,
          "recompute %s: a backward at scale 0 changed the gradients", rname);
    /* A smaller micro-batch than made for. */
    float l2 = 0;
    if (gpt_cuda_zero_grad(g, err, sizeof err) != 0 ||
        gpt_cuda_forward(g, in2, tg2, B2, T2, &l2, err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 1.0f, err, sizeof err) != 0 ||
        gpt_cuda_download_grads(g, gtmp, err, sizeof err) != 0)
      die(rname, err);
    CHECK(fabsf(l2 - lref2) / lref2 < 1e-2, "recompute %s: loss at B=%d "
          "T=%d %.6f vs cpu %.6f", rname, B2, T2, l2, lref2);
    snprintf(label, sizeof label, "recompute %s, B=%d T=%d vs cpu", rname, B2,
             T2);
    compare_grads(m, gtmp, gref2, label);
    bytes[r] = gpt_cuda_allocated_bytes(g);
    gpt_memory est;
    gpt_cuda_memory_estimate(gpt_get_config(m), B_, T_, &o, &est);
    printf("recompute %s: loss %.6f, %.2f MiB allocated (estimate %.2f)\n",
           gpt_recompute_name((gpt_recompute)r), loss[r], bytes[r] / 1048576.0,
           est.total / 1048576.0);
    CHECK(est.total == bytes[r], "recompute %s: estimate %llu != allocated %llu",
          gpt_recompute_name((gpt_recompute)r), (unsigned long long)est.total,
          (unsigned long long)bytes[r]);
    gpt_cuda_destroy(g);
  }
  /* The forward pass is the same in every mode (the same kernels on the
   * same weights): the same loss (to 1e-5, in case cuBLASLt picks another
   * algorithm for buffers at other addresses); the recomputed activations are the
   * kept ones again (GELU by another kernel than the product's epilogue:
   * within BF16 rounding). */
  for (int r = 1; r < 3; r++) {
    double cos, rel;
    compare(grads[r], grads[0], np, &cos, &rel);
    CHECK(fabsf(loss[r] - loss[0]) <= 1e-5f * loss[0],
          "recompute %s: loss %.7f vs none %.7f",
          gpt_recompute_name((gpt_recompute)r), loss[r], loss[0]);
    CHECK(cos > 0.999 && rel < 2e-2,
          "recompute %s: gradients vs none: cosine %.6f rel %.4f",
          gpt_recompute_name((gpt_recompute)r), cos, rel);
  }
  CHECK(bytes[1] < bytes[0] && bytes[2] < bytes[1],
        "memory: none %llu, gelu %llu, block %llu: not decreasing",
        (unsigned long long)bytes[0], (unsigned long long)bytes[1],
        (unsigned long long)bytes[2]);
  for (int r = 0; r < 3; r++)
    free(grads[r]);
  free(gref);
  free(gref2);
  free(gtmp);
  gpt_destroy(m);
  printf("%s\n", failures ? "recompute: FAILED" : "recompute: ok");
  return failures ? 1 : 0;
}

/* gpt2-350M at 256 x 1024: some 250 GiB of activations, more than an
 * H200 has (and under the kernels' int limit on B*T*4C, so that it is
 * the memory that fails). */
static int cmd_oom(void) {
  char err[4096];
  gpt_config c;
  if (gpt_config_preset("gpt2-350M", &c, err, sizeof err) != 0)
    die("preset", err);
  c.vocab_size = 50257;
  gpt *m = NULL;
  if (gpt_config_finish(&c, err, sizeof err) != 0 ||
      gpt_create(&c, &m, err, sizeof err) != 0)
    die("model", err);
  gpt_cuda_options o = {.B = 256, .T = 1024, .opt = optim_cfg(OPTIM_ADAMW)};
  gpt_cuda *g = NULL;
  int rc = gpt_cuda_create(m, &o, &g, err, sizeof err);
  printf("oom: rc %d: %s\n", rc, rc ? err : "(created!)");
  CHECK(rc != 0 && g == NULL, "a 256 x 1024 batch of gpt2-350M was created");
  CHECK(strstr(err, "out of GPU memory") && strstr(err, "batch_size 256") &&
            strstr(err, "seq_len 1024") && strstr(err, "recompute: block") &&
            strstr(err, "free of"),
        "the message does not name the problem, the batch and the remedy");
  /* The device is still usable after the failure. */
  gpt_cuda_destroy(g);
  gpt_destroy(m);
  gpt *small = make_model(3);
  gpt_cuda_options os = {.B = 2, .T = 16, .opt = optim_cfg(OPTIM_ADAMW)};
  CHECK(gpt_cuda_create(small, &os, &g, err, sizeof err) == 0,
        "after the out-of-memory, a small model fails: %s", err);
  gpt_cuda_destroy(g);
  gpt_destroy(small);
  printf("%s\n", failures ? "oom: FAILED" : "oom: ok");
  return failures ? 1 : 0;
}

/* The Llama shapes of cmd_llama, each 2 layers at context 64 (the
 * step's B_ x T_): (a) 4 query heads on 2 key/value heads of 32 channels
 * (the tensor-core attention), SwiGLU width 384, an untied head; (b) 4
 * query heads on 1 key/value head of 24 channels (not a multiple of 16:
 * the FP32 attention), width 96, the head tied. */
static gpt_config llama_cfg(int which) {
  gpt_config c = {.n_layer = 2,
                  .n_head = 4,
                  .n_embd = 128,
                  .block_size = 64,
                  .vocab_size = 1000,
                  .family = GPT_FAMILY_LLAMA,
                  .n_kv_head = 2,
                  .untied_head = 1};
  if (which == 1) {
    c.n_embd = 96;
    c.n_kv_head = 1;
    c.untied_head = 0;
  }
  return c;
}

/* Two steps of a deterministic gpt_cuda from one state: the same bits
 * (loss and every gradient). */
static void check_deterministic(const char *label) {
  char err[2048];
  gpt *m = make_model(5);
  size_t np = gpt_num_params(m);
  uint32_t in[B_ * T_], tg[B_ * T_];
  make_batch(in, tg, B_, T_, gpt_get_config(m)->vocab_size, 17);
  gpt_cuda_options o = {
      .B = B_, .T = T_, .opt = optim_cfg(OPTIM_ADAMW), .deterministic = 1};
  float loss[2];
  float *gr[2] = {malloc(np * 4), malloc(np * 4)};
  for (int r = 0; r < 2; r++) {
    gpt_cuda *g = NULL;
    if (gpt_cuda_create(m, &o, &g, err, sizeof err) != 0 ||
        gpt_cuda_forward(g, in, tg, B_, T_, &loss[r], err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 1.0f, err, sizeof err) != 0 ||
        gpt_cuda_download_grads(g, gr[r], err, sizeof err) != 0)
      die("deterministic", err);
    gpt_cuda_destroy(g);
  }
  printf("%s: deterministic: losses %.9g %.9g\n", label, loss[0], loss[1]);
  CHECK(loss[0] == loss[1] && memcmp(gr[0], gr[1], np * 4) == 0,
        "%s: two deterministic runs differ", label);
  free(gr[0]);
  free(gr[1]);
  gpt_destroy(m);
}

/* The Llama family on the GPU: cmd_step's checks (loss, every tensor's
 * gradient, the AdamW and Lion updates, upload and download, decay, bad
 * ids) against llama_cpu.c on both llama_cfg shapes, and two
 * deterministic runs bitwise the same on the first. */
static int cmd_llama(void) {
  for (int which = 0; which < 2; which++) {
    test_cfg = llama_cfg(which);
    printf("llama shape %c: C=%d NH=%d KV=%d, %s head\n", 'a' + which,
           test_cfg.n_embd, test_cfg.n_head, test_cfg.n_kv_head,
           test_cfg.untied_head ? "untied" : "tied");
    cmd_step();
    if (which == 0)
      check_deterministic("llama shape a");
  }
  printf("%s\n", failures ? "llama: FAILED" : "llama: ok");
  return failures ? 1 : 0;
}

/* ---- Pipeline stages (gpt_cuda_set_stage and the stage passes) ---- */

/* The stage passes' refusals: a range out of bounds, the wrong inputs
 * for a stage, a backward without a forward, the whole-model calls
 * under a stage. */
static void stage_refusals(gpt_cuda *g, const uint32_t *in, const uint32_t *tg,
                           int L) {
  char err[2048];
  float l;
  CHECK(gpt_cuda_set_stage(g, 1, 1, err, sizeof err) != 0 &&
            strstr(err, "not a range"),
        "stage [1,1) accepted (%s)", err);
  CHECK(gpt_cuda_set_stage(g, 0, L + 1, err, sizeof err) != 0,
        "stage [0,L+1) accepted");
  if (gpt_cuda_set_stage(g, 0, 1, err, sizeof err) != 0)
    die("set_stage", err);
  CHECK(gpt_cuda_forward(g, in, tg, B_, T_, &l, err, sizeof err) != 0 &&
            strstr(err, "use gpt_cuda_forward_stage"),
        "gpt_cuda_forward under a stage: '%s'", err);
  CHECK(gpt_cuda_forward_stage(g, in, NULL, tg, B_, T_, &l, err, sizeof err) !=
                0 &&
            strstr(err, "no targets"),
        "targets to the first of two stages: '%s'", err);
  CHECK(gpt_cuda_backward_stage(g, gpt_cuda_params_ptr(g), 1.0f, err,
                                sizeof err) != 0 &&
            strstr(err, "no trainer's forward"),
        "backward without a forward: '%s'", err);
  if (gpt_cuda_set_stage(g, 1, L, err, sizeof err) != 0)
    die("set_stage", err);
  CHECK(gpt_cuda_forward_stage(g, in, NULL, tg, B_, T_, &l, err, sizeof err) !=
                0 &&
            strstr(err, "a stream (not the ids)"),
        "ids to a later stage: '%s'", err);
}

/* The whole model's gradients and loss (deterministic) against S stages
 * chained (bounds[s], bounds[s+1]): on each of two micro-batches at
 * scale 0.5, every stage's forward from the one before's output, then
 * every backward from the one after's input gradient, as pipeline.c
 * does over NCCL; with 2 activation slots, both forwards before the
 * backwards. Each stage's groups must be the whole model's bits;
 * the embeddings' too when only the first stage has them (an untied
 * Llama head); with a tied head, group 0 is the first stage's part plus
 * the last's, whose sum the whole model makes in another order over two
 * micro-batches (head 1, lookups 1, head 2, lookups 2), so it is held to
 * float rounding, 1e-6 relative. */
static void check_stages(const int *bounds, int S, int slots,
                         const char *label) {
  char err[2048];
  gpt *m = make_model(11);
  const gpt_config *c = gpt_get_config(m);
  size_t np = gpt_num_params(m), ng = gpt_group_count(m);
  uint32_t in[2][B_ * T_], tg[2][B_ * T_];
  for (int k = 0; k < 2; k++)
    make_batch(in[k], tg[k], B_, T_, c->vocab_size, 31 + (uint64_t)k);
  gpt_cuda_options o = {
      .B = B_, .T = T_, .opt = optim_cfg(OPTIM_ADAMW), .deterministic = 1};
  gpt_cuda *whole = NULL, *st[4] = {0};
  float lw[2], ls[2];
  float *gw = malloc(np * 4), *gs = malloc(np * 4), *gt = calloc(np, 4);
  if (gpt_cuda_create(m, &o, &whole, err, sizeof err) != 0)
    die("create", err);
  for (int k = 0; k < 2; k++)
    if (gpt_cuda_forward_train(whole, in[k], tg[k], B_, T_, &lw[k], err,
                               sizeof err) != 0 ||
        gpt_cuda_backward(whole, 0.5f, err, sizeof err) != 0)
      die("whole", err);
  if (gpt_cuda_download_grads(whole, gw, err, sizeof err) != 0)
    die("whole grads", err);
  o.slots = slots;
  for (int s = 0; s < S; s++)
    if (gpt_cuda_create(m, &o, &st[s], err, sizeof err) != 0 ||
        gpt_cuda_set_stage(st[s], bounds[s], bounds[s + 1], err, sizeof err))
      die("stage create", err);
  /* One slot: each micro-batch forward then backward; two: both
   * forwards (slots 0 and 1), then both backwards (GPipe's order). */
  for (int k0 = 0; k0 < 2; k0 += slots) {
    for (int k = k0; k < k0 + slots; k++)
      for (int s = 0; s < S; s++) {
        const void *x = s ? gpt_cuda_stage_output(st[s - 1]) : NULL;
        /* Another stream: the one before must have written x. */
        if (gpt_cuda_set_slot(st[s], k % slots, err, sizeof err) != 0 ||
            (s && gpt_cuda_synchronize(st[s - 1], err, sizeof err) != 0) ||
            gpt_cuda_forward_stage(st[s], s ? NULL : in[k], x,
                                   s == S - 1 ? tg[k] : NULL, B_, T_, &ls[k],
                                   err, sizeof err) != 0)
          die("stage forward", err);
      }
    for (int k = k0; k < k0 + slots; k++)
      for (int s = S - 1; s >= 0; s--) {
        const void *dy =
            s < S - 1 ? gpt_cuda_stage_input_grad(st[s + 1]) : NULL;
        if (gpt_cuda_set_slot(st[s], k % slots, err, sizeof err) != 0 ||
            (dy && gpt_cuda_synchronize(st[s + 1], err, sizeof err) != 0) ||
            gpt_cuda_backward_stage(st[s], dy, 0.5f, err, sizeof err) != 0)
          die("stage backward", err);
      }
  }
  /* Each group from the stage that has it; group 0 from the first, plus
   * the last's with a tied head. */
  for (int s = 0; s < S; s++) {
    if (gpt_cuda_download_grads(st[s], gs, err, sizeof err) != 0)
      die("stage grads", err);
    for (size_t grp = 0; grp < ng; grp++) {
      int layer = (int)grp - 1;
      int mine = (layer >= bounds[s] && layer < bounds[s + 1]) ||
                 (grp == 0 && s == 0) || (grp == ng - 1 && s == S - 1);
      int tied = grp == 0 && s == S - 1 && !c->untied_head;
      size_t off, n;
      gpt_group_range(m, grp, &off, &n);
      for (size_t i = off; (mine || tied) && i < off + n; i++)
        gt[i] += gs[i];
    }
  }
  size_t off0, n0;
  gpt_group_range(m, 0, &off0, &n0);
  double cos, rel;
  compare(gt, gw, n0, &cos, &rel);
  int same = memcmp(gt + n0, gw + n0, (np - n0) * 4) == 0;
  int same0 = memcmp(gt, gw, n0 * 4) == 0;
  printf("%s: losses whole %.9g %.9g, stages %.9g %.9g; gradients past the "
         "embeddings %s; embeddings %s (relative %.3g)\n",
         label, lw[0], lw[1], ls[0], ls[1], same ? "bitwise" : "DIFFER",
         same0 ? "bitwise" : "differ", rel);
  CHECK(lw[0] == ls[0] && lw[1] == ls[1], "%s: the stages' losses differ",
        label);
  CHECK(same, "%s: the stages' layer gradients are not the whole model's",
        label);
  CHECK(c->untied_head ? same0 : rel < 1e-6,
        "%s: the embeddings' gradient, relative %.3g", label, rel);
  if (S == 2 && slots == 1)
    stage_refusals(st[0], in[0], tg[0], c->n_layer);
  if (slots == 2)
    CHECK(gpt_cuda_set_slot(st[0], 2, err, sizeof err) != 0 &&
              strstr(err, "slot 2, but there are 2"),
          "slot 2 of 2 accepted: '%s'", err);
  for (int s = 0; s < S; s++)
    gpt_cuda_destroy(st[s]);
  gpt_cuda_destroy(whole);
  free(gw);
  free(gs);
  free(gt);
  gpt_destroy(m);
}

/* GPT-2 in 2 and 3 stages (a middle stage: neither the embeddings nor
 * the head), and both Llama shapes (untied and tied heads) in 2; one
 * and two activation slots. */
static int cmd_stages(void) {
  gpt_config keep = test_cfg;
  int two[] = {0, 1, 2}, three[] = {0, 1, 3, 4};
  check_stages(two, 2, 1, "gpt2 2 stages");
  check_stages(two, 2, 2, "gpt2 2 stages, 2 slots");
  test_cfg.n_layer = 4;
  check_stages(three, 3, 2, "gpt2 3 stages, 2 slots");
  for (int which = 0; which < 2; which++) {
    test_cfg = llama_cfg(which);
    check_stages(two, 2, 1 + which,
                 which ? "llama tied 2 stages, 2 slots" : "llama 2 stages");
  }
  test_cfg = keep;
  printf("%s\n", failures ? "stages: FAILED" : "stages: ok");
  return failures ? 1 : 0;
}

/* The memory estimate, which needs no GPU (CI runs this): GPT-2 124M at
 * 16 x 1024 takes FP32 master + BF16 weights (6 bytes a parameter), FP32
 * gradients (4), AdamW's two FP32 moments (8) or Lion's one (4), each
 * rounded up to 256 bytes; the activations shrink with each recompute
 * mode, block's to under half of none's; the parts add up to the total. */
/* The preset's config (finished) with vocabulary V. */
static gpt_config preset_cfg(const char *name, int V) {
  char err[512];
  gpt_config c;
  if (gpt_config_preset(name, &c, err, sizeof err) != 0)
    die("preset", err);
  c.vocab_size = V;
  if (gpt_config_finish(&c, err, sizeof err) != 0)
    die("config", err);
  return c;
}

/* c's estimate at 16 x 1024 for AdamW and Lion in each recompute mode:
 * 6 bytes a parameter of weights, 4 of gradients, 8 or 4 of optimizer
 * state (each rounded up to 256 bytes), the parts adding up to the
 * total, and activations shrinking with each mode, block's under half of
 * none's. */
static void estimate_modes(const gpt_config *cfg, const char *label) {
  gpt_config c = *cfg;
  uint64_t np = gpt_config_num_params(&c), acts[3];
  printf("%s:\n", label);
  for (int kind = 0; kind < 2; kind++)
    for (int r = 0; r < 3; r++) {
      gpt_cuda_options o = {.B = 16, .T = 1024, .opt = optim_cfg(kind),
                            .recompute = (gpt_recompute)r};
      gpt_memory m;
      gpt_cuda_memory_estimate(&c, 16, 1024, &o, &m);
      uint64_t want_o = (kind == OPTIM_ADAMW ? 8 : 4) * np;
      printf("%s recompute %-5s: params %.1f MiB grads %.1f optim %.1f acts "
             "%.1f total %.1f\n",
             kind == OPTIM_ADAMW ? "adamw" : "lion ",
             gpt_recompute_name((gpt_recompute)r), m.params / 1048576.0,
             m.grads / 1048576.0, m.optim / 1048576.0, m.acts / 1048576.0,
             m.total / 1048576.0);
      CHECK(m.params >= 6 * np && m.params < 6 * np + 512,
            "params %llu for %llu parameters", (unsigned long long)m.params,
            (unsigned long long)np);
      CHECK(m.grads >= 4 * np && m.grads < 4 * np + 512, "grads %llu",
            (unsigned long long)m.grads);
      CHECK(m.optim >= want_o && m.optim < want_o + 512, "optim %llu",
            (unsigned long long)m.optim);
      CHECK(m.total == m.params + m.grads + m.optim + m.acts,
            "the parts do not add up to the total");
      acts[r] = m.acts;
    }
  CHECK(acts[1] < acts[0] && acts[2] < acts[1] && 2 * acts[2] < acts[0],
        "%s: activations none %llu gelu %llu block %llu", label,
        (unsigned long long)acts[0], (unsigned long long)acts[1],
        (unsigned long long)acts[2]);
}

/* A pipeline stage's activation slots (gpt_cuda_options.layers_first /
 * _last) at 16 x 1024: the first half of c's layers saves at least the
 * head's logits (16 x 1024 x padded_vocab BF16) against the whole
 * model's, the second half saves something too, and the two together
 * hold more than the whole (the backward's buffers are each stage's). */
static void estimate_stages(const gpt_config *c) {
  gpt_cuda_options o = {.B = 16, .T = 1024, .opt = optim_cfg(OPTIM_ADAMW)};
  gpt_memory all, first, last;
  gpt_cuda_memory_estimate(c, 16, 1024, &o, &all);
  o.layers_last = c->n_layer / 2;
  gpt_cuda_memory_estimate(c, 16, 1024, &o, &first);
  o.layers_first = c->n_layer / 2;
  o.layers_last = c->n_layer;
  gpt_cuda_memory_estimate(c, 16, 1024, &o, &last);
  uint64_t logits = 16ull * 1024 * (uint64_t)c->padded_vocab * 2;
  printf("stages' activations : all %.1f MiB, layers [0,%d) %.1f, [%d,%d) "
         "%.1f\n",
         all.acts / 1048576.0, c->n_layer / 2, first.acts / 1048576.0,
         c->n_layer / 2, c->n_layer, last.acts / 1048576.0);
  CHECK(all.acts > first.acts + logits && last.acts < all.acts &&
            first.acts + last.acts > all.acts,
        "stages' activations: all %llu, first half %llu, second %llu",
        (unsigned long long)all.acts, (unsigned long long)first.acts,
        (unsigned long long)last.acts);
}

static int cmd_estimate(void) {
  gpt_config c = preset_cfg("gpt2-124M", 50257);
  uint64_t np = gpt_config_num_params(&c);
  estimate_modes(&c, "gpt2-124M");
  /* The Llama family's layout (GQA 9 on 3 heads, SwiGLU 1536, tied). */
  gpt_config l = preset_cfg("smollm-135m-shape", 49152);
  estimate_modes(&l, "smollm-135m-shape");
  /* A gang rank's shard (ZeRO stages 1-2, 8 ranks): the FP32 master
   * weights and the moments of S = ceil(np/8) parameters, the BF16 copy
   * and the FP32 gradients of all 8 S. */
  {
    uint64_t S = (np + 7) / 8;
    gpt_cuda_options o = {.B = 16, .T = 1024, .opt = optim_cfg(OPTIM_ADAMW),
                          .shard_lo = 3 * S, .shard_n = S, .padded = 8 * S};
    gpt_memory m;
    gpt_cuda_memory_estimate(&c, 16, 1024, &o, &m);
    printf("adamw shard 1/8     : params %.1f MiB grads %.1f optim %.1f\n",
           m.params / 1048576.0, m.grads / 1048576.0, m.optim / 1048576.0);
    CHECK(m.params >= 4 * S + 2 * 8 * S && m.params < 4 * S + 2 * 8 * S + 512,
          "shard: params %llu, want 4S + 16S with S %llu",
          (unsigned long long)m.params, (unsigned long long)S);
    CHECK(m.grads >= 4 * 8 * S && m.grads < 4 * 8 * S + 512,
          "shard: grads %llu", (unsigned long long)m.grads);
    CHECK(m.optim >= 8 * S && m.optim < 8 * S + 512, "shard: optim %llu",
          (unsigned long long)m.optim);
    /* Stage 2's: the FP32 gradients of the slice alone. */
    uint64_t grads_all = m.grads;
    o.grad_shard = 1;
    gpt_cuda_memory_estimate(&c, 16, 1024, &o, &m);
    printf("adamw stage-2 1/8   : params %.1f MiB grads %.1f optim %.1f\n",
           m.params / 1048576.0, m.grads / 1048576.0, m.optim / 1048576.0);
    CHECK(m.grads >= 4 * S && m.grads < 4 * S + 512 && m.grads < grads_all,
          "stage-2 shard: grads %llu, want 4S with S %llu",
          (unsigned long long)m.grads, (unsigned long long)S);
  }
  estimate_stages(&c);
  gpt_recompute rc;
  CHECK(gpt_recompute_parse("block", &rc) == 0 && rc == GPT_RECOMPUTE_BLOCK &&
            gpt_recompute_parse("all", &rc) != 0,
        "gpt_recompute_parse");
  printf("%s\n", failures ? "estimate: FAILED" : "estimate: ok");
  return failures ? 1 : 0;
}

/* model_logits (tests/reference/model_logits.c) on the GPU: the logits
 * (T, V) as float32 of the ids in IDS. */
static int cmd_logits(const char *dir, const char *ids_path, const char *out) {
  char err[2048];
  modeldir_info info;
  gpt *m = NULL;
  if (modeldir_open(dir, &info, err, sizeof err) != 0 ||
      modeldir_load(&info, &m, err, sizeof err) != 0)
    die(dir, err);
  const gpt_config *c = gpt_get_config(m);
  FILE *f = fopen(ids_path, "r");
  if (!f)
    die(ids_path, "cannot open");
  uint32_t *ids = calloc((size_t)c->block_size, sizeof *ids);
  int T = 0;
  unsigned long v;
  while (T < c->block_size && fscanf(f, "%lu", &v) == 1)
    ids[T++] = (uint32_t)v;
  fclose(f);
  if (T == 0)
    die(ids_path, "no ids");
  gpt_cuda_options o = {.B = 1, .T = T, .opt = optim_cfg(OPTIM_ADAMW)};
  gpt_cuda *g = NULL;
  float *lg = malloc((size_t)T * c->padded_vocab * sizeof *lg);
  if (gpt_cuda_create(m, &o, &g, err, sizeof err) != 0 ||
      gpt_cuda_forward(g, ids, NULL, 1, T, NULL, err, sizeof err) != 0 ||
      gpt_cuda_logits(g, lg, err, sizeof err) != 0)
    die("gpu logits", err);
  FILE *o_ = fopen(out, "wb");
  for (int t = 0; t < T && o_; t++)
    fwrite(lg + (size_t)t * c->padded_vocab, sizeof(float),
           (size_t)c->vocab_size, o_);
  if (!o_ || fclose(o_) != 0)
    die(out, "cannot write");
  printf("T %d V %d\n", T, c->vocab_size);
  gpt_cuda_destroy(g);
  gpt_destroy(m);
  free(ids);
  free(lg);
  return 0;
}

/* ---- ZeRO on the GPU (gpu/zero/zero_cuda.h) ----
 *
 * Run alone: one rank, its NCCL communicator made through a rendezvous
 * directory, the host side on the self communicator. Under mpirun: the
 * ranks of MPI_COMM_WORLD, NCCL bootstrapped through MPI (each rank on
 * the GPU of its local rank; two ranks on one GPU need NCCL >= 2.30 and
 * NCCL_MULTI_RANK_GPU_ENABLE=1).
 *
 * The reference is one gpt_cuda (deterministic) trained on the global
 * batch (N ranks x B sequences). For each stage 0, 1, 2, 3, 20 steps of
 * zero_cuda_step (deterministic) on each rank's rows of it:
 *   - one rank: every loss and the final weights bitwise the reference's
 *     (the same kernels in the same order; the NCCL collectives of one
 *     rank copy);
 *   - N ranks: losses within 1e-3 relative, weights within 1e-2 in
 *     relative L2 and no element further than 2.5 lr a step (the sum over
 *     ranks is taken in another order, and BF16 rounds the rest: see
 *     cmd_zero);
 *   - zero_cuda_gather_params gives every rank the weights;
 *   - the GPU memory: master weights and moments of S = ceil(P/N)
 *     parameters (stage 3: the shard's S), within 512 bytes; stage 3's
 *     parameters also the shard's BF16 copy and two gather slots of the
 *     largest group's N pieces;
 *   - stage 3: zero_cuda_loss (one rank's forward) refused, saying why.
 * Those runs reduce the gradients from the engine's grad hook: stages
 * 0-1 in small buckets (ZBUCKET floats), every step reporting the number
 * of buckets that the bucket size makes (ceil(P/ZBUCKET)), more than one,
 * and some but not all of them started before backward was over (the
 * ones holding the embeddings can only start at its end); stages 2-3 a
 * group at a time, all but the embeddings' during backward. Stages 2 and
 * 3 again for 3 steps without overlap (each group's reduction waited for
 * at once; stage 3: no prefetch)
 * must give the overlapped run's losses bitwise, on any number of ranks:
 * the collectives take the same sums.
 * At stages 2 and 3 a step that the update guard (zero_set_guard) stops
 * leaves the weights of the step before, bit for bit, where an unstopped
 * one moves them; at every stage a step with a NaN weight reports factor
 * 0 and moves no weight nor the optimizer (nan_step).
 * Then the sharded checkpoints of step 10 (zero_cuda_pull, zero_save),
 * stage 2's loaded at stage 1 and at stage 3 and stage 3's at stage 1
 * (zero_load, then zero_cuda_create uploads it), continue with the
 * uninterrupted run's losses of steps 11-20 (relative 1e-5).
 * Those are the numbers of ZSTEPS_MAX steps; DAGRUN_CHECK_ZERO_STEPS
 * (zero_steps_from_env) runs fewer, checkpointed at the middle step. */
enum { ZB = 4, ZT = 64, ZSTEPS_MAX = 20, ZBUCKET = 1 << 15 };
/* The steps of cmd_zero's and cmd_shards's runs, and the step of the
 * sharded checkpoints that the resumes load: 20 and 10 on a GPU. */
static int zsteps = ZSTEPS_MAX, zmid = ZSTEPS_MAX / 2;

/* DAGRUN_CHECK_ZERO_STEPS, an even number from 6 to 20: the emulator's
 * ctests set 8 (a step there takes most of a second, and the checks
 * are the same over 8 steps: every stage's path, the buckets, a
 * checkpoint and its resumes). */
static void zero_steps_from_env(void) {
  const char *v = getenv("DAGRUN_CHECK_ZERO_STEPS");
  if (!v)
    return;
  char *end;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end || n < 6 || n > ZSTEPS_MAX || n % 2) {
    fprintf(stderr,
            "gpt_cuda_check: DAGRUN_CHECK_ZERO_STEPS=%s: an even number "
            "from 6 to %d\n",
            v, ZSTEPS_MAX);
    exit(2);
  }
  zsteps = (int)n;
  zmid = zsteps / 2;
}

typedef struct zrun {
  float loss[ZSTEPS_MAX];
  float *w; /* the final weights (P) */
  /* zero_step_result's over the steps: the fewest and most buckets, the
   * fewest and most started early */
  int bmin, bmax, emin, emax;
} zrun;

/* The global batch of step k (N*ZB rows). */
/* Step k's global batch. Rank 0's first input is token 0, whose
 * embedding row holds parameter 0, which nan_step poisons: a tied head
 * reads it at every position anyway, an untied Llama's forward only
 * through the lookup. */
static void zero_batch(uint32_t *in, uint32_t *tg, int N, int V, int k) {
  make_batch(in, tg, N * ZB, ZT, V, 1000 + (uint64_t)k);
  in[0] = 0;
}

static void zero_reference(int N, int device, zrun *out) {
  char err[2048];
  gpt *m = make_model(7);
  int V = gpt_get_config(m)->vocab_size;
  gpt_cuda *g;
  gpt_cuda_options o = {.B = N * ZB, .T = ZT, .opt = optim_cfg(OPTIM_ADAMW),
                        .deterministic = 1, .device = device};
  if (gpt_cuda_create(m, &o, &g, err, sizeof err) != 0)
    die("reference", err);
  uint32_t *in = malloc((size_t)N * ZB * ZT * 4), *tg = malloc((size_t)N * ZB * ZT * 4);
  for (int k = 0; k < zsteps; k++) {
    double norm;
    zero_batch(in, tg, N, V, k);
    if (gpt_cuda_zero_grad(g, err, sizeof err) != 0 ||
        gpt_cuda_forward(g, in, tg, N * ZB, ZT, &out->loss[k], err,
                         sizeof err) != 0 ||
        gpt_cuda_backward(g, 1.0f, err, sizeof err) != 0 ||
        gpt_cuda_clip_grad_norm(g, 1.0, &norm, err, sizeof err) != 0 ||
        gpt_cuda_step(g, 1e-3f, err, sizeof err) != 0)
      die("reference step", err);
  }
  if (gpt_cuda_download(g, m, NULL, err, sizeof err) != 0)
    die("reference download", err);
  out->w = malloc(gpt_num_params(m) * 4);
  memcpy(out->w, gpt_params(m), gpt_num_params(m) * 4);
  gpt_cuda_destroy(g);
  gpt_destroy(m);
  free(in);
  free(tg);
}

/* Stages 2-3's buffers beside the engine, as zero_cuda.h describes
 * them: group 0's FP32 gradient and ZERO_INFLIGHT + 1 buffers of the
 * largest other group's, a group's being its N pieces at stage 3 and
 * itself at stage 2; stage 3's two BF16 gather slots of N pieces of the
 * largest group. */
static void group_buffers(const zero *z, const gpt *m, int st, int N,
                          uint64_t *slots, uint64_t *grads) {
  uint64_t most = 0, most_layer = 0, s0 = 0;
  for (size_t gi = 0; gi < gpt_group_count(m); gi++) {
    zero_piece pc = {0};
    size_t off, n;
    if (st == 3)
      zero_group_piece(z, gi, &pc);
    gpt_group_range(m, gi, &off, &n);
    uint64_t f = st == 3 ? pc.S * (uint64_t)N : n;
    most = pc.S > most ? pc.S : most;
    if (gi == 0)
      s0 = f;
    else if (f > most_layer)
      most_layer = f;
  }
  *slots = st == 3 ? 2 * (2 * most * (uint64_t)N) : 0;
  *grads = 4 * s0 + (ZERO_INFLIGHT + 1) * 4 * most_layer;
}

/* zero_train's update guard (zero.h): factor 0 at step zskip_at (from
 * 0; -1: no guard), 1 at the others. */
static int zskip_at = -1, zstep_now;
static double zskip_guard(void *arg, float loss, double norm) {
  (void)arg, (void)loss, (void)norm;
  return zstep_now == zskip_at ? 0.0 : 1.0;
}

/* zero_train's NaN step: at step znan_at (from 0; -1: none) one weight
 * on the GPUs is NaN (parameter 0 of every rank's model, at stage 3 the
 * first of rank 0's shard), so that the step's loss and norm are not
 * finite. The step must report factor 0 and move nothing: every rank's
 * weights (gathered) or shard and its optimizer state and step count are
 * compared before and after, then the weight is put back. */
static int znan_at = -1;

/* The host copy of what the GPUs hold (made current: stages 0-2 gather
 * the weights, stage 3 pulls the shard; the optimizer state pulled), and
 * its length. */
static float *nan_host(zero *z, zero_cuda *zg, gpt *m, int st, size_t *n) {
  char err[2048];
  if ((st < 3 && zero_cuda_gather_params(zg, err, sizeof err) != 0) ||
      zero_cuda_pull(zg, err, sizeof err) != 0)
    die("NaN step: pull", err);
  zero_shape sh;
  zero_shape_get(z, &sh);
  *n = st < 3 ? gpt_num_params(m) : sh.S;
  return st < 3 ? gpt_params(m) : zero_param_shard(z);
}

static void nan_step(zero *z, zero_cuda *zg, gpt *m, int st, int r,
                     const uint32_t *in, const uint32_t *tg) {
  char err[2048];
  size_t n;
  float *w = nan_host(z, zg, m, st, &n);
  optim *o = zero_optim(z);
  size_t no = optim_state_floats(o);
  uint64_t t = optim_get_t(o);
  float *w0 = malloc(n * 4), *o0 = malloc(no * 4);
  memcpy(w0, w, n * 4);
  memcpy(o0, optim_state(o), no * 4);
  int poison = st < 3 || r == 0;
  if (poison)
    w[0] = NAN;
  if (zero_cuda_push(zg, err, sizeof err) != 0)
    die("NaN step: push", err);
  zero_step_result res;
  if (zero_cuda_step(zg, in, tg, ZB, ZT, 1e-3f, 1.0, &res, err, sizeof err) !=
      0)
    die("NaN step", err);
  CHECK(res.lr_factor == 0.0 && !isfinite(res.loss) && !isfinite(res.norm),
        "stage %d: a step with a NaN weight: loss %g norm %g factor %g", st,
        res.loss, res.norm, res.lr_factor);
  w = nan_host(z, zg, m, st, &n);
  size_t moved = 0;
  for (size_t i = poison ? 1 : 0; i < n; i++)
    moved += memcmp(&w[i], &w0[i], 4) != 0;
  moved += memcmp(optim_state(o), o0, no * 4) != 0 || optim_get_t(o) != t;
  CHECK(moved == 0, "stage %d: the NaN step moved %zu weights (or the "
        "optimizer)", st, moved);
  w[0] = w0[0];
  if (zero_cuda_push(zg, err, sizeof err) != 0)
    die("NaN step: push", err);
  free(w0);
  free(o0);
}

/* A rank's zero as zc says over a fresh model (loading ckpt when given)
 * and its GPU side; steps [from, to) of the global batches. */
static void zero_train(comm *ctl, comm *nc, zero_config zc, const char *ckpt,
                       int from, int to, const char *save_dir, zrun *out) {
  char err[2048];
  int N = comm_size(ctl), r = comm_rank(ctl), st = zc.stage;
  gpt *m = make_model(7);
  int V = gpt_get_config(m)->vocab_size;
  optim_config oc = optim_cfg(OPTIM_ADAMW);
  zero *z;
  zero_cuda *zg;
  if (zero_create(&zc, m, &oc, ctl, &z, err, sizeof err) != 0)
    die("zero_create", err);
  int64_t step;
  if (ckpt && zero_load(z, ckpt, &step, err, sizeof err) != 0)
    die("zero_load", err);
  if (zskip_at >= 0)
    zero_set_guard(z, zskip_guard, NULL);
  zero_cuda_options zo = {.B = ZB, .T = ZT, .opt = oc, .deterministic = 1};
  if (zero_cuda_create(z, m, ctl, nc, &zo, &zg, err, sizeof err) != 0)
    die("zero_cuda_create", err);
  size_t bt = (size_t)ZB * ZT;
  uint32_t *in = malloc(N * bt * 4), *tg = malloc(N * bt * 4);
  out->bmin = out->emin = INT_MAX;
  out->bmax = out->emax = 0;
  for (int k = from; k < to; k++) {
    zero_step_result res;
    zero_batch(in, tg, N, V, k);
    zstep_now = k;
    if (k == znan_at) {
      nan_step(z, zg, m, st, r, in + r * bt, tg + r * bt);
      continue;
    }
    if (zero_cuda_step(zg, in + r * bt, tg + r * bt, ZB, ZT, 1e-3f, 1.0, &res,
                       err, sizeof err) != 0)
      die("zero_cuda_step", err);
    out->loss[k] = res.loss;
    out->bmin = res.buckets < out->bmin ? res.buckets : out->bmin;
    out->bmax = res.buckets > out->bmax ? res.buckets : out->bmax;
    out->emin = res.buckets_early < out->emin ? res.buckets_early : out->emin;
    out->emax = res.buckets_early > out->emax ? res.buckets_early : out->emax;
    if (save_dir && k + 1 == zmid &&
        (zero_cuda_pull(zg, err, sizeof err) != 0 ||
         zero_save(z, save_dir, zmid, err, sizeof err) != 0))
      die("sharded checkpoint", err);
  }
  if (st == 3) {
    /* A forward of one rank alone would wait for the others' layers. */
    float l;
    int rc = zero_cuda_loss(zg, in, tg, ZB, ZT, &l, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "stage 3") && strstr(err, "gathered model"),
          "stage 3: zero_cuda_loss rc %d, message '%s'", rc, err);
  }
  if (zero_cuda_gather_params(zg, err, sizeof err) != 0)
    die("gather", err);
  size_t P = gpt_num_params(m);
  out->w = malloc(P * 4);
  memcpy(out->w, gpt_params(m), P * 4);
  zero_memory zm;
  uint64_t acts;
  zero_cuda_memory_get(zg, &zm, &acts);
  zero_shape sh;
  zero_shape_get(z, &sh);
  uint64_t S = st == 0 ? P : (P + N - 1) / N, pad = st == 0 ? P : S * N;
  /* Stages 0-1: FP32 master weights of the slice, the whole BF16 copy
   * and FP32 gradients; stage 2 the slice's gradients alone and the
   * groups' buffers; stage 3 the shard's everything and its buffers. */
  uint64_t want_p = 4 * S + 2 * pad, want_g = 4 * pad;
  if (st >= 2) {
    uint64_t slots, gbufs;
    group_buffers(z, m, st, N, &slots, &gbufs);
    if (st == 3) {
      S = sh.S;
      want_p = 6 * S + slots;
    }
    want_g = 4 * S + gbufs;
  }
  CHECK(zm.optim >= 8 * S && zm.optim < 8 * S + 512,
        "stage %d: optimizer bytes %llu, want 8 x %llu", st,
        (unsigned long long)zm.optim, (unsigned long long)S);
  CHECK(zm.params >= want_p && zm.params < want_p + 512,
        "stage %d: parameter bytes %llu, want %llu (S %llu)", st,
        (unsigned long long)zm.params, (unsigned long long)want_p,
        (unsigned long long)S);
  /* Each group's buffer a few 256-byte roundings over. */
  CHECK(zm.grads >= want_g && zm.grads < want_g + 2048,
        "stage %d: gradient bytes %llu, want %llu (S %llu)", st,
        (unsigned long long)zm.grads, (unsigned long long)want_g,
        (unsigned long long)S);
  if (r == 0)
    printf("stage %d on %d rank%s: GPU params %.3f MiB grads %.3f optim "
           "%.3f, total %.3f MiB; mixed-precision formula "
           "%.3f MiB (P %zu, S %llu)\n",
           st, N, N > 1 ? "s" : "", zm.params / 1048576.0, zm.grads / 1048576.0,
           zm.optim / 1048576.0,
           (zm.params + zm.grads + zm.optim) / 1048576.0,
           zm.f_mixed / 1048576.0, P, (unsigned long long)S);
  zero_cuda_destroy(zg);
  zero_destroy(z);
  gpt_destroy(m);
  free(in);
  free(tg);
}

static double rel_diff(float a, float b) {
  return fabs((double)a - (double)b) / fmax(fabs((double)b), 1e-30);
}

/* ---- A gang's shards on one GPU (gpt_cuda_options' shard fields) ----
 *
 * NCCL puts no two ranks of a communicator on one GPU, so cmd_zero's
 * ranks other than 0 (lo > 0) need a GPU each. Here N ranks' gpt_cuda
 * shards (stage 2's: master weights and moments of [r*S, r*S + S), the
 * last slice part padding) live in one process on one GPU, and the
 * collectives are done by hand as zero_cuda_step does them: the
 * gradients' sum over ranks on the host into each rank's own slice,
 * the norm from each slice's gpt_cuda_grad_sumsq, each rank's BF16 slice
 * copied into the others. Against one gpt_cuda on the global batch
 * (zero_reference): losses within 1e-2 relative, and the weights (each
 * rank's gpt_cuda_download of its slice) finite and within 1e-2 in
 * relative L2 norm, slice by slice. Not bitwise: the sum over ranks is
 * taken in another order, and an element whose gradient is within BF16
 * noise of zero may move the other way (see the tolerances above); a
 * wrong offset moves whole slices. */
static void cuda_ck(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    die(what, cudaGetErrorString(e));
}

static double rel_l2(const float *a, const float *b, size_t n) {
  double dd = 0, bb = 0;
  for (size_t i = 0; i < n; i++) {
    dd += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    bb += (double)b[i] * b[i];
  }
  return sqrt(dd / fmax(bb, 1e-30));
}

static int cmd_shards(void) {
  enum { NMAX = 8 };
  char err[2048];
  zero_steps_from_env();
  gpt *host = make_model(7);
  size_t P = gpt_num_params(host);
  int V = gpt_get_config(host)->vocab_size, N = 3;
  while (N < NMAX && P % (size_t)N == 0)
    N++; /* the last rank's slice part padding */
  size_t S = (P + (size_t)N - 1) / (size_t)N, pad = S * (size_t)N;
  zrun ref;
  zero_reference(N, 0, &ref);
  gpt_cuda *g[NMAX];
  for (int r = 0; r < N; r++) {
    gpt_cuda_options o = {.B = ZB, .T = ZT, .opt = optim_cfg(OPTIM_ADAMW),
                          .deterministic = 1, .device = 0,
                          .shard_lo = (size_t)r * S, .shard_n = S,
                          .padded = pad};
    if (gpt_cuda_create(host, &o, &g[r], err, sizeof err) != 0)
      die("shard create", err);
  }
  size_t bt = (size_t)ZB * ZT;
  uint32_t *in = malloc(N * bt * 4), *tg = malloc(N * bt * 4);
  float *sum = malloc(pad * 4), *tmp = malloc(pad * 4);
  double worst = 0;
  for (int k = 0; k < zsteps; k++) {
    zero_batch(in, tg, N, V, k);
    float loss = 0;
    for (int r = 0; r < N; r++) {
      float l = 0;
      if (gpt_cuda_zero_grad(g[r], err, sizeof err) != 0 ||
          gpt_cuda_forward(g[r], in + r * bt, tg + r * bt, ZB, ZT, &l, err,
                           sizeof err) != 0 ||
          gpt_cuda_backward(g[r], 1.0f / (float)N, err, sizeof err) != 0 ||
          gpt_cuda_synchronize(g[r], err, sizeof err) != 0)
        die("shard forward/backward", err);
      loss += l;
    }
    /* The reduce-scatter: rank r gets the sum's [r*S, r*S + S) in place
     * (the padding past P is zero on every rank). The legacy stream's
     * copies are waited for before the engines' streams go on. */
    memset(sum, 0, pad * 4);
    for (int r = 0; r < N; r++) {
      cuda_ck(cudaMemcpy(tmp, gpt_cuda_grads_ptr(g[r]), pad * 4,
                         cudaMemcpyDeviceToHost),
              "gradients down");
      for (size_t i = 0; i < pad; i++)
        sum[i] += tmp[i];
    }
    for (int r = 0; r < N; r++)
      cuda_ck(cudaMemcpy(gpt_cuda_grads_ptr(g[r]) + (size_t)r * S,
                         sum + (size_t)r * S, S * 4, cudaMemcpyHostToDevice),
              "gradient slice up");
    cuda_ck(cudaDeviceSynchronize(), "gradient slices");
    double ss = 0;
    for (int r = 0; r < N; r++) {
      double s;
      if (gpt_cuda_grad_sumsq(g[r], (size_t)r * S, S, &s, err, sizeof err) !=
          0)
        die("shard sumsq", err);
      ss += s;
    }
    for (int r = 0; r < N; r++) {
      gpt_cuda_set_clip(g[r], sqrt(ss), 1.0);
      if (gpt_cuda_step(g[r], 1e-3f, err, sizeof err) != 0 ||
          gpt_cuda_synchronize(g[r], err, sizeof err) != 0)
        die("shard step", err);
    }
    /* The all-gather of the BF16 slices. */
    for (int r = 0; r < N; r++)
      for (int q = 0; q < N; q++)
        if (q != r)
          cuda_ck(cudaMemcpy((char *)gpt_cuda_params_ptr(g[q]) + r * S * 2,
                             (char *)gpt_cuda_params_ptr(g[r]) + r * S * 2,
                             S * 2, cudaMemcpyDeviceToDevice),
                  "parameter slice");
    cuda_ck(cudaDeviceSynchronize(), "parameter slices");
    worst = fmax(worst, rel_diff(loss / (float)N, ref.loss[k]));
  }
  /* Each rank's download writes its slice alone: NAN elsewhere shows a
   * slice that was not written. */
  float *w = gpt_params(host);
  for (size_t i = 0; i < P; i++)
    w[i] = NAN;
  for (int r = 0; r < N; r++)
    if (gpt_cuda_download(g[r], host, NULL, err, sizeof err) != 0)
      die("shard download", err);
  size_t bad = 0;
  for (size_t i = 0; i < P; i++)
    bad += !isfinite(w[i]);
  CHECK(bad == 0, "shards: %zu of %zu weights not finite after the "
                  "downloads", bad, P);
  CHECK(worst < 1e-2, "shards: losses %.3g relative from one GPU's", worst);
  for (int r = 0; r < N; r++) {
    size_t lo = (size_t)r * S, n = lo < P ? (P - lo < S ? P - lo : S) : 0;
    double d = rel_l2(w + lo, ref.w + lo, n);
    CHECK(d < 1e-2, "shards: rank %d of %d, [%zu, %zu): weights %.3g "
                    "relative (L2) from one GPU's", r, N, lo, lo + n, d);
    printf("shard %d of %d [%zu, %zu): weights %.3g relative (L2)\n", r, N,
           lo, lo + n, d);
  }
  printf("shards: %d ranks on one GPU, S %zu (P %zu), losses at worst %.3g "
         "relative: %s\n", N, S, P, worst, failures ? "FAILED" : "ok");
  for (int r = 0; r < N; r++)
    gpt_cuda_destroy(g[r]);
  gpt_destroy(host);
  free(ref.w);
  free(in);
  free(tg);
  free(sum);
  free(tmp);
  return failures ? 1 : 0;
}

/* The ranks' communicators: under mpirun MPI_COMM_WORLD's and NCCL
 * bootstrapped through MPI; alone the self communicator and NCCL through
 * a rendezvous directory made in rdv (a mkdtemp template; "" under
 * mpirun), which the caller removes. 0, or 77 (skip, saying why) in a
 * build or on a machine without GPU ranks. */
static int zero_comms(comm **ctl, comm **nc, char *rdv) {
  char err[2048], why[512];
  if (!zero_cuda_available(why, sizeof why)) {
    printf("skip: %s\n", why);
    return 77;
  }
  int mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
  comm_config cc = {.backend = mpi ? COMM_MPI : COMM_SELF, .timeout_s = 120};
  if (comm_create(&cc, ctl, err, sizeof err) != 0)
    die("control communicator", err);
  comm_config nccfg = {.backend = COMM_NCCL, .timeout_s = 120, .device = -1};
  if (mpi) {
    rdv[0] = 0;
  } else {
    if (!mkdtemp(rdv))
      die("mkdtemp", rdv);
    nccfg.rendezvous_dir = rdv;
    nccfg.rank = 0;
    nccfg.size = 1;
  }
  if (comm_create(&nccfg, nc, err, sizeof err) != 0)
    die("NCCL communicator", err);
  return 0;
}

/* ---- Pipeline parallel on the CUDA engine (gpu/pipeline) ----
 *
 * pipeline.h over the CUDA engine on 2 ranks (mpirun; one stage each,
 * a GPT-2 of 4 layers, 2 a stage), both schedules, PSTEPS steps of PM
 * micro-batches with clipping at 1 and AdamW, against one gpt_cuda
 * (rank 0's, deterministic) on the same global batch with grad_accum PM.
 * The stage passes give the whole model's bits (cmd_stages) but for the
 * tied embeddings' two parts, summed in another order (2e-8 relative),
 * and the clipping norm is summed from the stages' partial sums. So:
 *   - step 1's loss is the one GPU's bits;
 *   - the weights after it (gathered to rank 0) within 1e-7 in relative
 *     L2 norm (measured 6e-9: the clip scale's last bits; a stage that
 *     did not train, or trained on the wrong stream, is off by 1e-2);
 *   - later, those last bits flip a few BF16 copies of the weights, and
 *     the runs drift apart by BF16 noise: each later loss within 1e-4
 *     relative (measured 2e-5) and the final weights within 2e-3
 *     (measured 5e-4), where a broken exchange is off by 1e-2 and more.
 * Then the gathered checkpoint (weights and optimizer state) loads into
 * a new pipeline (pipeline_load), whose next step's loss is within 1e-4
 * of the one GPU's. GPT_CUDA_CHECK_MODEL=llama: the first Llama shape
 * (an untied head: no tied sum; on the emulator every loss is the one
 * GPU's bits). The streams go over NCCL; with PIPE_DATA=mpi in
 * the environment over MPI (on the emulator only, whose device memory is
 * host memory: a check of the pipeline apart from NCCL's point to
 * point). */
enum { PSTEPS = 4, PM = 4, PB = 2, PT = 32 };

/* The reference: one gpt_cuda's step of PM micro-batches, as one
 * process with grad_accum PM does it (and the pipeline: the loss a mean
 * in double). */
static double ref_step(gpt_cuda *g, const uint32_t *in, const uint32_t *tg,
                       float lr) {
  char err[2048];
  double sum = 0, norm;
  float l;
  size_t BT = (size_t)PB * PT;
  if (gpt_cuda_zero_grad(g, err, sizeof err) != 0)
    die("ref", err);
  for (int k = 0; k < PM; k++) {
    if (gpt_cuda_forward_train(g, in + k * BT, tg + k * BT, PB, PT, &l, err,
                               sizeof err) != 0 ||
        gpt_cuda_backward(g, 1.0f / PM, err, sizeof err) != 0)
      die("ref", err);
    sum += l / PM;
  }
  if (gpt_cuda_clip_grad_norm(g, 1.0, &norm, err, sizeof err) != 0 ||
      gpt_cuda_step(g, lr, err, sizeof err) != 0)
    die("ref", err);
  return sum;
}

static double pipe_step(pipeline *pl, const uint32_t *in, const uint32_t *tg,
                        float lr) {
  char err[2048];
  double loss, norm;
  if (pipeline_forward_backward(pl, in, tg, &loss, err, sizeof err) != 0 ||
      pipeline_clip_grad_norm(pl, 1.0, &norm, err, sizeof err) != 0)
    die("pipeline", err);
  pipeline_step(pl, lr);
  return loss;
}

/* Rank 0: the gathered weights in m against the one GPU's, within tol
 * in relative L2 norm. */
static void check_weights(gpt *m, gpt_cuda *ref, gpt *ref_m, double tol,
                          const char *when, const char *sn) {
  char err[2048];
  double cos, rel;
  if (gpt_cuda_download(ref, ref_m, NULL, err, sizeof err) != 0)
    die("ref download", err);
  compare(gpt_params(m), gpt_params(ref_m), gpt_num_params(m), &cos, &rel);
  printf("%s: gathered weights %s vs one GPU's: relative L2 %.3g\n", sn, when,
         rel);
  CHECK(rel < tol, "%s: weights %s off by %.3g relative (< %.0e)", sn, when,
        rel, tol);
}

/* ---- A master window (gpt_cuda_options' master_lo, master_n) ----
 *
 * A pipeline stage's ZeRO-1 slice (gpu/pipeline/pipeline_cuda.c): one
 * shard of pieces (here the whole model at local 0, padded to 2 S
 * floats as a stage's range over 2 ranks), two gpt_cudas whose master
 * weights and moments are the halves [r S, r S + S), against one without
 * a window. The same batches' 2 steps (the windows' BF16 copies
 * exchanged by hand between them, so that each forward reads the whole
 * one's weights): each window's master weights, moments and
 * BF16 copy are the whole one's bits there, download_shard writes the
 * window alone (the rest of the buffer untouched), and a window outside
 * the shard is refused. A few seconds on the emulator. */
static void place_whole(gpt_cuda *g, const gpt *host) {
  for (size_t i = 0; i < gpt_group_count(host); i++) {
    size_t off, n;
    gpt_group_range(host, i, &off, &n);
    gpt_cuda_set_group_params(g, i, (char *)gpt_cuda_params_ptr(g) + 2 * off);
    gpt_cuda_set_group_grads(g, i, gpt_cuda_grads_ptr(g) + off);
  }
}

static int cmd_window(void) {
  char err[2048];
  gpt *host = make_model(7);
  size_t P = gpt_num_params(host), S = P / 2 + 1, n = 2 * S;
  int V = gpt_get_config(host)->vocab_size;
  gpt_cuda_piece pc = {0, P, 0};
  gpt_cuda_options o = {.B = ZB,
                        .T = ZT,
                        .opt = optim_cfg(OPTIM_ADAMW),
                        .deterministic = 1,
                        .shard_n = n,
                        .pieces = &pc,
                        .npieces = 1};
  float *shard = calloc(n, 4), *w = malloc(n * 4), *h = malloc(n * 4);
  uint16_t *bw = malloc(n * 2), *bh = malloc(n * 2);
  memcpy(shard, gpt_params(host), P * 4);
  gpt_cuda *g[3];
  optim *st[3];
  for (int r = 0; r < 3; r++) {
    o.master_lo = r < 2 ? (size_t)r * S : 0;
    o.master_n = r < 2 ? S : 0;
    optim_group all = {0, r < 2 ? S : n, 0};
    if (gpt_cuda_create(host, &o, &g[r], err, sizeof err) != 0 ||
        gpt_cuda_upload_shard(g[r], shard, NULL, err, sizeof err) != 0 ||
        optim_create(&o.opt, all.numel, &all, 1, &st[r], err, sizeof err))
      die("window create", err);
    place_whole(g[r], host);
  }
  uint32_t *in = malloc(ZB * ZT * 4), *tg = malloc(ZB * ZT * 4);
  for (int k = 0; k < 2; k++) {
    zero_batch(in, tg, 1, V, k);
    for (int r = 0; r < 3; r++) {
      float l;
      if (gpt_cuda_zero_grad(g[r], err, sizeof err) != 0 ||
          gpt_cuda_forward(g[r], in, tg, ZB, ZT, &l, err, sizeof err) != 0 ||
          gpt_cuda_backward(g[r], 1.0f, err, sizeof err) != 0 ||
          gpt_cuda_step(g[r], 1e-3f, err, sizeof err) != 0)
        die("window step", err);
    }
    /* The all-gather of the windows' BF16 copies, by hand. */
    for (int r = 0; r < 2; r++)
      cuda_ck(cudaMemcpy((char *)gpt_cuda_params_ptr(g[1 - r]) + r * S * 2,
                         (char *)gpt_cuda_params_ptr(g[r]) + r * S * 2, S * 2,
                         cudaMemcpyDeviceToDevice),
              "window slice");
  }
  if (gpt_cuda_download_shard(g[2], w, st[2], err, sizeof err) != 0)
    die("window download", err);
  cuda_ck(
      cudaMemcpy(bw, gpt_cuda_params_ptr(g[2]), n * 2, cudaMemcpyDeviceToHost),
      "BF16 down");
  for (int r = 0; r < 2; r++) {
    size_t lo = (size_t)r * S, own = r ? P - S : S, diff = 0, out = 0;
    for (size_t i = 0; i < n; i++)
      h[i] = NAN;
    if (gpt_cuda_download_shard(g[r], h, st[r], err, sizeof err) != 0)
      die("window download", err);
    cuda_ck(cudaMemcpy(bh, gpt_cuda_params_ptr(g[r]), n * 2,
                       cudaMemcpyDeviceToHost),
            "BF16 down");
    const float *mw = optim_state(st[2]), *mh = optim_state(st[r]);
    for (size_t i = 0; i < own; i++)
      diff += memcmp(&h[lo + i], &w[lo + i], 4) != 0 ||
              bh[lo + i] != bw[lo + i] || mh[i] != mw[lo + i] ||
              mh[S + i] != mw[n + lo + i];
    for (size_t i = 0; i < n; i++)
      out += (i < lo || i >= lo + S) && !isnan(h[i]);
    CHECK(diff == 0,
          "window: rank %d: %zu of %zu floats not the whole "
          "shard's bits",
          r, diff, own);
    CHECK(out == 0,
          "window: rank %d: the download wrote %zu floats "
          "outside its window",
          r, out);
    CHECK(optim_get_t(st[r]) == 2, "window: rank %d: t %llu", r,
          (unsigned long long)optim_get_t(st[r]));
  }
  gpt_cuda *bad = NULL;
  o.master_lo = n - 1;
  o.master_n = 2;
  int rc = gpt_cuda_create(host, &o, &bad, err, sizeof err);
  CHECK(rc != 0 && strstr(err, "window [") != NULL,
        "window: one past the shard was not refused (%s)", rc ? err : "ok");
  gpt_cuda_destroy(bad);
  for (int r = 0; r < 3; r++) {
    gpt_cuda_destroy(g[r]);
    optim_destroy(st[r]);
  }
  gpt_destroy(host);
  free(shard), free(w), free(h), free(bw), free(bh), free(in), free(tg);
  printf("window: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

/* The weights gathered (every rank), and on rank 0 (ref non-NULL)
 * checked. */
static void pipe_weights(pipeline *pl, gpt *m, gpt_cuda *ref, gpt *ref_m,
                         double tol, const char *when, const char *sn) {
  char err[2048];
  if (pipeline_gather(pl, 0, NULL, err, sizeof err) != 0)
    die("gather", err);
  if (ref)
    check_weights(m, ref, ref_m, tol, when, sn);
}

static void pipe_run(comm *data, comm *ctl, pipeline_schedule sched) {
  char err[2048];
  const float lr = 1e-3f;
  int r = comm_rank(ctl);
  gpt_config keep = test_cfg;
  test_cfg.n_layer = 4;
  gpt *m = make_model(21), *ref_m = make_model(21);
  test_cfg = keep;
  size_t np = gpt_num_params(m), BT = (size_t)PB * PT;
  uint32_t *in = malloc(PM * BT * 4 * (PSTEPS + 1));
  uint32_t *tg = malloc(PM * BT * 4 * (PSTEPS + 1));
  for (int k = 0; k < PM * (PSTEPS + 1); k++)
    make_batch(in + k * BT, tg + k * BT, PB, PT, gpt_get_config(m)->vocab_size,
               50 + (uint64_t)k);
  pipeline_options po = {.micro = PM,
                         .schedule = sched,
                         .B = PB,
                         .T = PT,
                         .opt = optim_cfg(OPTIM_ADAMW),
                         .cuda = 1,
                         .deterministic = 1,
                         .ctl = ctl};
  gpt_cuda_options go = {.B = PB, .T = PT, .opt = po.opt, .deterministic = 1};
  pipeline *pl = NULL;
  gpt_cuda *ref = NULL;
  if (pipeline_create(data, m, &po, &pl, err, sizeof err) != 0 ||
      (r == 0 && gpt_cuda_create(ref_m, &go, &ref, err, sizeof err) != 0))
    die("pipeline create", err);
  const char *sn = pipeline_schedule_names[sched];
  double worst = 0;
  for (int st = 0; st < PSTEPS; st++) {
    double lp = pipe_step(pl, in + st * PM * BT, tg + st * PM * BT, lr);
    if (r != 0) {
      if (st == 0)
        pipe_weights(pl, m, NULL, NULL, 0, NULL, NULL);
      continue;
    }
    double lr1 = ref_step(ref, in + st * PM * BT, tg + st * PM * BT, lr);
    double d = fabs(lp - lr1) / lr1;
    worst = fmax(worst, d);
    printf("%s step %d: loss pipeline %.9g one GPU %.9g\n", sn, st + 1, lp,
           lr1);
    CHECK(st > 0 ? d < 1e-4 : lp == lr1,
          "%s step %d: loss %.9g, one GPU's %.9g", sn, st + 1, lp, lr1);
    if (st == 0)
      pipe_weights(pl, m, ref, ref_m, 1e-7, "after step 1", sn);
  }
  pipeline_stats ps;
  pipeline_get_stats(pl, &ps);
  if (r == 0)
    printf("%s: losses at worst %.3g relative; bubble %.1f%% measured, %.1f%% "
           "the formula; %d slots\n",
           sn, worst, 100 * ps.idle, 100 * ps.formula, ps.slots);
  /* The checkpoint: gathered on rank 0, every rank loads it. */
  optim *full = make_optim(m, OPTIM_ADAMW);
  if (pipeline_gather(pl, 1, r == 0 ? full : NULL, err, sizeof err) != 0)
    die("gather", err);
  if (r == 0)
    check_weights(m, ref, ref_m, 2e-3, "at the end", sn);
  uint64_t t = optim_get_t(full);
  if (comm_broadcast(ctl, gpt_params(m), np * 4, 0, err, sizeof err) != 0 ||
      comm_broadcast(ctl, optim_state(full), optim_state_floats(full) * 4, 0,
                     err, sizeof err) != 0 ||
      comm_broadcast(ctl, &t, sizeof t, 0, err, sizeof err) != 0)
    die("broadcast", err);
  optim_set_t(full, t);
  pipeline *p2 = NULL;
  if (pipeline_create(data, m, &po, &p2, err, sizeof err) != 0 ||
      pipeline_load(p2, full, err, sizeof err) != 0)
    die("resume", err);
  const uint32_t *i5 = in + PSTEPS * PM * BT, *t5 = tg + PSTEPS * PM * BT;
  double lp = pipe_step(p2, i5, t5, lr);
  if (r == 0) {
    double lr1 = ref_step(ref, i5, t5, lr);
    printf("%s: resumed step %d: loss %.9g, one GPU %.9g\n", sn, PSTEPS + 1, lp,
           lr1);
    CHECK(fabs(lp - lr1) / lr1 < 1e-4, "%s: resumed loss %.9g vs %.9g", sn, lp,
          lr1);
  }
  pipeline_destroy(p2);
  pipeline_destroy(pl);
  gpt_cuda_destroy(ref);
  optim_destroy(full);
  gpt_destroy(m);
  gpt_destroy(ref_m);
  free(in);
  free(tg);
}

static int cmd_pipeline(void) {
  char rdv[64] = "/tmp/gpt_cuda_check.XXXXXX";
  comm *ctl = NULL, *nc = NULL;
  if (zero_comms(&ctl, &nc, rdv) != 0)
    return 77;
  if (comm_size(ctl) != 2) {
    printf("skip: pipeline needs 2 ranks (mpirun -np 2)\n");
    return 77;
  }
  const char *pd = getenv("PIPE_DATA");
  comm *data = pd && strcmp(pd, "mpi") == 0 ? ctl : nc;
  printf("pipeline: streams over %s\n",
         comm_backend_name(comm_backend_of(data)));
  for (int sc = 0; sc < 2; sc++)
    pipe_run(data, ctl, (pipeline_schedule)sc);
  int r = comm_rank(ctl);
  comm_destroy(nc);
  comm_destroy(ctl);
  if (rdv[0])
    rmdir(rdv);
  if (r == 0)
    printf("%s\n", failures ? "pipeline: FAILED" : "pipeline: ok");
  return failures ? 1 : 0;
}

/* What cmd_zero's checks share: the communicators, this rank's place,
 * the model's sizes, one GPU's run (ref), each stage's run of zsteps and
 * the directories of stage 2's and stage 3's checkpoints of step zmid. */
typedef struct zcheck {
  comm *ctl, *nc;
  int N, r;
  size_t P;
  int ngroups;
  zrun ref, run[4];
  char ck[64], ck3[64];
} zcheck;

/* Stage st's reductions in run[st]: buckets (stages 0-1) or groups
 * (2-3) a step, and how many started while backward was still going. */
static void zero_check_overlap(const zcheck *z, int st) {
  const zrun *run = &z->run[st];
  int want = (int)((z->P + ZBUCKET - 1) / ZBUCKET);
  if (st < 2) {
    CHECK(want > 1 && run->bmin == want && run->bmax == want && run->emin > 0 &&
              run->emax < want,
          "stage %d, buckets of %d floats: %d-%d buckets a step (want "
          "%d), %d-%d of them started during backward (want some, not "
          "all)",
          st, ZBUCKET, run->bmin, run->bmax, want, run->emin, run->emax);
    if (z->r == 0)
      printf("stage %d: %d buckets of %d floats a step, %d-%d started "
             "during backward\n",
             st, want, ZBUCKET, run->emin, run->emax);
  } else {
    /* A group at a time (the embeddings, each layer, ln_f), all but
     * the embeddings' (final at the very end) during backward. */
    want = z->ngroups;
    CHECK(run->bmin == want && run->bmax == want && run->emin == want - 1 &&
              run->emax == want - 1,
          "stage %d: %d-%d groups reduced a step (want %d), %d-%d of them "
          "during backward (want %d)",
          st, run->bmin, run->bmax, want, run->emin, run->emax, want - 1);
    if (z->r == 0)
      printf("stage %d: %d groups reduced a step, %d started during "
             "backward\n",
             st, want, run->emin);
  }
}

/* Stage st's losses and final weights against one GPU's. */
static void zero_check_vs_reference(const zcheck *z, int st) {
  const zrun *run = &z->run[st], *ref = &z->ref;
  double worst = 0, wdiff = 0, d2 = 0, r2 = 0;
  for (int k = 0; k < zsteps; k++)
    worst = fmax(worst, rel_diff(run->loss[k], ref->loss[k]));
  for (size_t i = 0; i < z->P; i++) {
    double d = (double)run->w[i] - ref->w[i];
    wdiff = fmax(wdiff, fabs(d));
    d2 += d * d;
    r2 += (double)ref->w[i] * ref->w[i];
  }
  double wrel = sqrt(d2 / r2);
  /* N ranks sum the gradients in another order than one GPU's batch,
   * and the clip scale comes from per-rank sums of squares: the last
   * bits differ, which flips some BF16 roundings, after which an
   * element whose gradient is within noise of zero may move the other
   * way each step (the tolerances above). So: the losses, the weights
   * in relative L2 (a stale or misplaced group or slice moves whole
   * tensors), and no element further than AdamW's steps can take it
   * (about lr a step each way). */
  if (z->N == 1)
    CHECK(worst == 0 && wdiff == 0,
          "stage %d, one rank: not the reference's bits (loss %.3g, "
          "weights %.3g)",
          st, worst, wdiff);
  else
    CHECK(worst < 1e-3 && wrel < 1e-2 && wdiff < 2.5 * 1e-3 * zsteps,
          "stage %d, %d ranks: loss %.3g relative (< 1e-3), weights %.3g "
          "relative L2 (< 1e-2), at most %.3g apart (< %.3g)",
          st, z->N, worst, wrel, wdiff, 2.5 * 1e-3 * zsteps);
  if (z->r == 0)
    printf("stage %d: losses vs one GPU's at worst %.3g relative, weights "
           "%.3g relative L2, at most %.3g apart\n",
           st, worst, wrel, wdiff);
}

/* Stages 2-3 without overlap (each group's reduction waited for at
 * once; stage 3: each group gathered when needed): the overlapped
 * run's bits. */
static void zero_check_no_overlap(const zcheck *z) {
  for (int st = 2; st < 4; st++) {
    zero_config zc = {.stage = st, .no_overlap = 1};
    zrun one;
    memset(&one, 0, sizeof one);
    zero_train(z->ctl, z->nc, zc, NULL, 0, 3, NULL, &one);
    int want = z->ngroups;
    CHECK(one.bmin == want && one.bmax == want && one.emax == 0,
          "stage %d, no overlap: %d-%d groups reduced, %d early "
          "(want %d, 0)",
          st, one.bmin, one.bmax, one.emax, want);
    const zrun *run = &z->run[st];
    int same = 1;
    for (int k = 0; k < 3; k++)
      same &= memcmp(&one.loss[k], &run->loss[k], sizeof(float)) == 0;
    CHECK(same,
          "stage %d: losses without overlap %.9g %.9g %.9g, with "
          "%.9g %.9g %.9g: not the same bits",
          st, one.loss[0], one.loss[1], one.loss[2], run->loss[0], run->loss[1],
          run->loss[2]);
    if (z->r == 0)
      printf("stage %d: no overlap, steps 1-3: %s\n", st,
             same ? "the overlapped run's bits" : "DIFFERENT");
    free(one.w);
  }
}

/* A step the update guard stops moves nothing on the GPUs: stage 2's
 * (sharded gradients) and stage 3's (sharded everything) weights after
 * steps 1-2 with step 2 stopped are the bits of a run of step 1. Nor
 * does a step whose loss is not finite (nan_step), at any stage. */
static void zero_check_skipped_steps(const zcheck *z) {
  comm *ctl = z->ctl, *nc = z->nc;
  size_t P = z->P;
  for (int st = 0; st < 4; st++) {
    zrun a, b, c, d;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    memset(&d, 0, sizeof d);
    zero_train(ctl, nc, (zero_config){.stage = st}, NULL, 0, 1, NULL, &a);
    zero_train(ctl, nc, (zero_config){.stage = st}, NULL, 0, 2, NULL, &c);
    if (st >= 2) {
      zskip_at = 1;
      zero_train(ctl, nc, (zero_config){.stage = st}, NULL, 0, 2, NULL, &b);
      zskip_at = -1;
      CHECK(memcmp(a.w, b.w, P * 4) == 0 && memcmp(b.w, c.w, P * 4) != 0,
            "stage %d: a stopped step 2 moved the weights (or an unstopped "
            "one did not)", st);
      if (z->r == 0)
        printf("stage %d: step 2 stopped by the update guard: the weights "
               "of step 1, bit for bit\n", st);
      free(b.w);
    }
    znan_at = 1;
    zero_train(ctl, nc, (zero_config){.stage = st}, NULL, 0, 2, NULL, &d);
    znan_at = -1;
    CHECK(memcmp(a.w, d.w, P * 4) == 0,
          "stage %d: after a NaN step 2, not the weights of step 1", st);
    if (z->r == 0)
      printf("stage %d: step 2 with a NaN weight: skipped, the weights of "
             "step 1, bit for bit\n", st);
    free(a.w);
    free(c.w);
    free(d.w);
  }
}

/* The checkpoints of step zmid continued at another stage: stage 2's
 * at stage 1 and at stage 3, stage 3's at stage 1. */
static void zero_check_resumes(const zcheck *z) {
  static const struct { int from, to; } resumes[] = {{2, 1}, {2, 3}, {3, 1}};
  for (size_t i = 0; i < sizeof resumes / sizeof *resumes; i++) {
    int from = resumes[i].from, to = resumes[i].to;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/step-%08d", from == 2 ? z->ck : z->ck3, zmid);
    zrun res;
    memset(&res, 0, sizeof res);
    zero_train(z->ctl, z->nc, (zero_config){.stage = to}, dir, zmid, zsteps,
               NULL, &res);
    double worst = 0;
    for (int k = zmid; k < zsteps; k++)
      worst = fmax(worst, rel_diff(res.loss[k], z->run[from].loss[k]));
    CHECK(worst < 1e-5,
          "resumed at stage %d from stage %d's step %d: "
          "losses %.3g relative from the uninterrupted run's",
          to, from, zmid, worst);
    if (z->r == 0)
      printf("resume (stage %d -> %d, step %d): steps %d-%d at worst %.3g "
             "relative\n",
             from, to, zmid, zmid + 1, zsteps, worst);
    free(res.w);
  }
}

static int cmd_zero(void) {
  char err[2048];
  zero_steps_from_env();
  zcheck z;
  memset(&z, 0, sizeof z);
  char rdv[] = "/tmp/gpt_cuda_check-nccl-XXXXXX";
  if (zero_comms(&z.ctl, &z.nc, rdv) != 0)
    return 77;
  z.N = comm_size(z.ctl);
  z.r = comm_rank(z.ctl);
  zero_reference(z.N, comm_device(z.nc), &z.ref);
  gpt *m0 = make_model(7);
  z.P = gpt_num_params(m0);
  z.ngroups = (int)gpt_group_count(m0);
  gpt_destroy(m0);
  /* Stage 2's and stage 3's checkpoints of step zmid, in directories rank
   * 0 makes and broadcasts. */
  snprintf(z.ck, sizeof z.ck, "%s", "/tmp/gpt_cuda_check-ckpt-XXXXXX");
  snprintf(z.ck3, sizeof z.ck3, "%s", "/tmp/gpt_cuda_check-ckpt3-XXXXXX");
  if (z.r == 0 && (!mkdtemp(z.ck) || !mkdtemp(z.ck3)))
    die("mkdtemp", z.ck);
  if (comm_broadcast(z.ctl, z.ck, sizeof z.ck, 0, err, sizeof err) != 0 ||
      comm_broadcast(z.ctl, z.ck3, sizeof z.ck3, 0, err, sizeof err) != 0)
    die("broadcast", err);
  for (int st = 0; st < 4; st++) {
    zero_config zc = {.stage = st, .bucket_floats = ZBUCKET};
    zero_train(z.ctl, z.nc, zc, NULL, 0, zsteps,
               st == 2   ? z.ck
               : st == 3 ? z.ck3
                         : NULL,
               &z.run[st]);
    zero_check_overlap(&z, st);
    zero_check_vs_reference(&z, st);
  }
  zero_check_no_overlap(&z);
  zero_check_skipped_steps(&z);
  zero_check_resumes(&z);
  float bad = (float)failures;
  if (comm_allreduce_sum(z.ctl, &bad, 1, err, sizeof err) != 0)
    die("allreduce", err);
  if (z.r == 0)
    printf("%s\n", bad > 0 ? "zero: FAILED" : "zero: ok");
  /* Every rank is past its last load (the all-reduce above). */
  if (z.r == 0 &&
      (fileio_remove_tree(z.ck) != 0 || fileio_remove_tree(z.ck3) != 0))
    fprintf(stderr, "gpt_cuda_check: could not remove %s or %s\n", z.ck, z.ck3);
  comm_destroy(z.nc);
  comm_destroy(z.ctl);
  if (rdv[0])
    rmdir(rdv);
  return bad > 0 ? 1 : 0;
}

/* ---- Stages 2-3's buffers out of GPU memory ----
 * zero_cuda_create allocates the groups' gradient buffers (and stage
 * 3's gather slots: X bytes, group_buffers) after the engine. For each
 * of stages 2 and 3, a probe measures what a rank takes (C bytes, X
 * among them); then ballast leaves C - X/2 free, so that the engine fits
 * and the buffers do not: zero_cuda_create must fail naming what ran
 * out and what to change, and give back all it took (the free memory as
 * before the call). One rank. The emulator counts bytes exactly; a real
 * GPU's allocator rounds to pages that X/2 of this small model (under 2
 * MiB) does not clear reliably, so this runs in CI on the emulator
 * (gpu/gpt_cuda_emulated_zero-oom) and is not part of test_zero_cuda.sh.
 * The emulator's device memory is host memory, ballast included: ctest
 * gives it a 256 MiB device (DAGRUN_EMU_DEVICE_MIB), not the default 16
 * GiB. */
static void zero_oom(comm *ctl, comm *nc, int st) {
  static const char *const want[4] = {
      NULL, NULL,
      "out of GPU memory for stage 2's layers' gradients",
      "out of GPU memory for stage 3's gathered layers"};
  static const char *const change[4] = {NULL, NULL, "more ranks need less",
                                        "more ranks, or stage 2, need less"};
  char err[2048];
  gpt *m = make_model(7);
  optim_config oc = optim_cfg(OPTIM_ADAMW);
  zero_config zc = {.stage = st};
  zero *z;
  zero_cuda *zg = NULL;
  zero_cuda_options zo = {.B = ZB, .T = ZT, .opt = oc};
  if (zero_create(&zc, m, &oc, ctl, &z, err, sizeof err) != 0)
    die("zero_create", err);
  size_t f0, f1, f2, f3, total;
  cuda_ck(cudaMemGetInfo(&f0, &total), "cudaMemGetInfo");
  if (zero_cuda_create(z, m, ctl, nc, &zo, &zg, err, sizeof err) != 0)
    die("zero_cuda_create (probe)", err);
  cuda_ck(cudaMemGetInfo(&f1, &total), "cudaMemGetInfo");
  zero_cuda_destroy(zg);
  zg = NULL;
  uint64_t slots, gbufs;
  group_buffers(z, m, st, 1, &slots, &gbufs);
  size_t C = f0 - f1, X = slots + gbufs, ballast_bytes = f0 - (C - X / 2);
  void *ballast;
  cuda_ck(cudaMalloc(&ballast, ballast_bytes), "cudaMalloc (ballast)");
  cuda_ck(cudaMemGetInfo(&f2, &total), "cudaMemGetInfo");
  int rc = zero_cuda_create(z, m, ctl, nc, &zo, &zg, err, sizeof err);
  cuda_ck(cudaMemGetInfo(&f3, &total), "cudaMemGetInfo");
  printf("zero-oom: a stage-%d rank takes %zu bytes, %llu of them its "
         "buffers; with %zu free: rc %d: %s\n",
         st, C, (unsigned long long)X, f2, rc, rc ? err : "(created!)");
  CHECK(rc != 0 && zg == NULL, "stage %d was created in %zu free bytes", st,
        f2);
  CHECK(strstr(err, want[st]) && strstr(err, change[st]),
        "stage %d: the message does not say what ran out and what to "
        "change: %s",
        st, err);
  CHECK(f3 == f2, "stage %d: the failed create kept %zd bytes", st,
        (ssize_t)(f2 - f3));
  cudaFree(ballast);
  zero_cuda_destroy(zg);
  zero_destroy(z);
  gpt_destroy(m);
}

static int cmd_zero_oom(void) {
  comm *ctl, *nc;
  char rdv[] = "/tmp/gpt_cuda_check-nccl-XXXXXX";
  if (zero_comms(&ctl, &nc, rdv) != 0)
    return 77;
  for (int st = 2; st < 4; st++)
    zero_oom(ctl, nc, st);
  comm_destroy(nc);
  comm_destroy(ctl);
  rmdir(rdv);
  printf("%s\n", failures ? "zero-oom: FAILED" : "zero-oom: ok");
  return failures ? 1 : 0;
}

/* The NCCL that the comm layer loaded (libnccl.so.2, found on the library
 * path): its version from ncclGetVersion. */
static int cmd_nccl_version(void) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW);
  int (*get)(int *) = h ? (int (*)(int *))dlsym(h, "ncclGetVersion") : NULL;
  int v = 0;
  if (!get || get(&v) != 0) {
    printf("none\n");
    return 1;
  }
  /* NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch. */
  printf("%d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
  return 0;
}

#ifdef DAGRUN_CHECK_TENSOR
/* ---- Tensor parallel (gpu/tensor/tensor_cuda.h) ----
 * Under mpirun -np R (R dividing the test model's 4 heads): the R ranks
 * train TP_STEPS AdamW steps of TP_MICRO micro-batches as one tensor
 * group, rank 0 the same steps as one GPU (the reference), on the same
 * batches. Checked: each step's loss and gradient norm against the
 * reference's; at step TP_MID the gathered checkpoint (weights and
 * optimizer state, tensor_cuda_gather) goes to every rank, which loads
 * its shards back (tensor_cuda_load) and goes on, while rank 0 resumes
 * it as one GPU too (gpt_cuda_upload): that one GPU's losses and final
 * weights against the reference's; the group's final weights, gathered,
 * against the reference's. And the refusals: heads that R does not
 * divide, recompute, a master weights' window.
 * GPT_CUDA_CHECK_MODEL=llama: the same on the first
 * Llama shape of cmd_llama (GQA, an untied head).
 *
 * Tolerances: both runs are BF16 (gpt_cuda.h); the group's adds
 * roundings one GPU does not (each row-split product's partial output
 * is rounded to BF16 before the sum, and the sum rounded again), about
 * 2^-9 relative each, independent, so the loss (a mean over 2 x 64
 * positions) moves by far less: measured within 5.3e-5 relative on the
 * emulator (2 ranks, 6 steps; the Llama 8.1e-5), held to 5e-4; the
 * norm, a sum over every gradient, measured within 8.8e-4 (the Llama
 * 1.5e-3), held to 5e-3. Each
 * collective broken fails it at the first step: without the
 * activations' all-reduces the losses are 4e-3 off and the norms 5e-2,
 * without the cross-entropy's sums 1e-1, with each rank's own row
 * maxima 2.7e-3. The weights: AdamW moves each by about lr a step
 * whatever the gradient's size, so a gradient within BF16 noise of zero
 * may move the other way; the change from the start (TP_STEPS x lr) is
 * held to 0.1 in relative L2 norm against the reference's: measured
 * 4.1e-2 for the group and 4.1e-2 for the one GPU resumed from its
 * checkpoint (so that figure is BF16's sign flips, not the group's; the
 * Llama 4.5e-2 and 4.5e-2). */
#include "tensor/tensor.h"
#include "tensor/tensor_cuda.h"

enum { TP_B = 2, TP_T = 32, TP_MICRO = 2, TP_STEPS = 6, TP_MID = 3 };
#define TP_LR 1e-3f

/* Step s's TP_MICRO micro-batches. */
static void tp_batch(uint32_t *in, uint32_t *tg, int s) {
  for (int k = 0; k < TP_MICRO; k++)
    make_batch(in + k * TP_B * TP_T, tg + k * TP_B * TP_T, TP_B, TP_T,
               test_cfg.vocab_size, 1000 + 10 * (uint64_t)s + k);
}

/* One GPU's step of the reference: loss and norm. */
static void tp_ref_step(gpt_cuda *g, int s, double *loss, double *norm) {
  char err[2048];
  uint32_t in[TP_MICRO * TP_B * TP_T], tg[TP_MICRO * TP_B * TP_T];
  tp_batch(in, tg, s);
  *loss = 0;
  if (gpt_cuda_zero_grad(g, err, sizeof err) != 0)
    die("zero_grad", err);
  for (int k = 0; k < TP_MICRO; k++) {
    float l;
    if (gpt_cuda_forward_train(g, in + k * TP_B * TP_T, tg + k * TP_B * TP_T,
                               TP_B, TP_T, &l, err, sizeof err) != 0 ||
        gpt_cuda_backward(g, 1.0f / TP_MICRO, err, sizeof err) != 0)
      die("reference step", err);
    *loss += l / TP_MICRO;
  }
  if (gpt_cuda_clip_grad_norm(g, 1.0, norm, err, sizeof err) != 0 ||
      gpt_cuda_step(g, TP_LR, err, sizeof err) != 0)
    die("reference step", err);
}

static void tp_group_step(tensor_cuda *t, int s, double *loss, double *norm) {
  char err[2048];
  uint32_t in[TP_MICRO * TP_B * TP_T], tg[TP_MICRO * TP_B * TP_T];
  tp_batch(in, tg, s);
  if (tensor_cuda_forward_backward(t, in, tg, loss, err, sizeof err) != 0 ||
      tensor_cuda_clip_grad_norm(t, 1.0, norm, err, sizeof err) != 0 ||
      tensor_cuda_step(t, TP_LR, err, sizeof err) != 0)
    die("tensor-parallel step", err);
}

static void tp_close(const char *what, int s, double got, double want,
                     double tol) {
  double rel = fabs(got - want) / fmax(fabs(want), 1e-30);
  printf("tensor: step %d %s %.7f, one GPU's %.7f (relative %.2e)\n", s, what,
         got, want, rel);
  CHECK(rel < tol,
        "tensor: step %d: %s %.7f against one GPU's %.7f: "
        "relative %.2e (< %.0e)",
        s, what, got, want, rel, tol);
}

/* The change of w from w0 against the reference's (ref from w0). */
static void tp_weights(const char *what, const float *w, const float *ref,
                       const float *w0, size_t n) {
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  for (size_t i = 0; i < n; i++) {
    a[i] = w[i] - w0[i];
    b[i] = ref[i] - w0[i];
  }
  double rel = rel_l2(a, b, n);
  printf("tensor: %s: change from the start within %.2e of one GPU's\n", what,
         rel);
  CHECK(isfinite(rel) && rel < 0.1,
        "tensor: %s: the weights' change %.2e (relative L2) from one GPU's "
        "(< 0.1)",
        what, rel);
  free(a);
  free(b);
}

/* What tensor parallel on GPUs refuses, before any collective: heads
 * that do not divide (tensor_check's message), recompute. */
static void tp_refusals(comm *nc) {
  char err[2048];
  tensor_cuda_options to = {
      .micro = 1, .B = 2, .T = 16, .opt = optim_cfg(OPTIM_ADAMW)};
  tensor_cuda *t = NULL;
  gpt_config keep = test_cfg;
  test_cfg = (gpt_config){.n_layer = 1,
                          .n_head = 3,
                          .n_embd = 96,
                          .block_size = 64,
                          .vocab_size = 1000};
  gpt *m = make_model(1);
  CHECK(tensor_cuda_create(nc, m, &to, &t, err, sizeof err) != 0 &&
            strstr(err, "does not divide the model's 3 heads"),
        "tensor: 3 heads: %s", err);
  gpt_destroy(m);
  test_cfg = keep;
  m = make_model(1);
  gpt_cuda_tp_tensor one = {0, 1};
  gpt_cuda_options o = {.B = 2,
                        .T = 16,
                        .opt = optim_cfg(OPTIM_ADAMW),
                        .recompute = GPT_RECOMPUTE_BLOCK,
                        .tp = {.ranks = 2, .tensors = &one, .n = 1}};
  gpt_cuda *g = NULL;
  CHECK(gpt_cuda_create(m, &o, &g, err, sizeof err) != 0 &&
            strstr(err, "tensor parallel runs without recompute"),
        "tensor: recompute: %s", err);
  o.recompute = GPT_RECOMPUTE_NONE;
  o.master_n = 1;
  CHECK(gpt_cuda_create(m, &o, &g, err, sizeof err) != 0 &&
            strstr(err, "tensor parallel runs without a master weights' "
                        "window"),
        "tensor: master_n: %s", err);
  gpt_destroy(m);
  printf("tensor: refusals checked: %s\n", err);
}

/* A shard's device memory (gpt_cuda_memory_estimate) against one GPU's:
 * its parameters, gradients and optimizer state are its layout's n
 * floats, and its activations less (its heads', MLP columns' and
 * vocabulary rows'; the residual stream and the collectives' buffers
 * are whole). */
static void tp_memory(const gpt *m, int R) {
  char err[2048];
  tensor_layout *lay = NULL;
  if (tensor_layout_create(m, R, &lay, err, sizeof err) != 0)
    die("tensor_layout_create", err);
  size_t n = tensor_layout_floats(lay, NULL), P = gpt_num_params(m);
  tensor_layout_destroy(lay);
  gpt_cuda_options o = {.opt = optim_cfg(OPTIM_ADAMW),
                        .tp = {.ranks = R, .n = n}};
  gpt_memory sh, one;
  gpt_cuda_memory_estimate(gpt_get_config(m), TP_B, TP_T, &o, &sh);
  o.tp.ranks = 0;
  gpt_cuda_memory_estimate(gpt_get_config(m), TP_B, TP_T, &o, &one);
  printf("tensor: a shard of %d: %zu of %zu parameters; device bytes: "
         "params %llu of %llu, grads %llu of %llu, activations %llu of %llu\n",
         R, n, P, (unsigned long long)sh.params, (unsigned long long)one.params,
         (unsigned long long)sh.grads, (unsigned long long)one.grads,
         (unsigned long long)sh.acts, (unsigned long long)one.acts);
  CHECK(n < P && sh.grads < one.grads && sh.optim < one.optim &&
            sh.acts < one.acts,
        "tensor: a shard's memory is not below one GPU's");
}

/* The gathered checkpoint (rank 0's model and optimizer) to every rank,
 * which loads its shards from it. */
static void tp_reload(comm *ctl, tensor_cuda *t, gpt *m, optim *o) {
  char err[2048];
  if (comm_broadcast(ctl, gpt_params(m), gpt_num_params(m) * 4, 0, err,
                     sizeof err) != 0 ||
      comm_broadcast(ctl, optim_state(o), optim_state_floats(o) * 4, 0, err,
                     sizeof err) != 0)
    die("broadcast", err);
  uint64_t step = optim_get_t(o);
  if (comm_broadcast(ctl, &step, sizeof step, 0, err, sizeof err) != 0)
    die("broadcast", err);
  optim_set_t(o, step);
  if (tensor_cuda_load(t, m, o, err, sizeof err) != 0)
    die("tensor_cuda_load", err);
}

static int cmd_tensor(void) {
  char err[2048], rdv[] = "/tmp/gpt_cuda_check-nccl-XXXXXX";
  comm *ctl, *nc;
  if (zero_comms(&ctl, &nc, rdv) != 0)
    return 77;
  int R = comm_size(nc), r = comm_rank(nc);
  if (R < 2) {
    fprintf(stderr, "gpt_cuda_check tensor: run it under mpirun -np 2\n");
    return 2;
  }
  tp_refusals(nc);
  gpt *m = make_model(7), *w0 = make_model(7);
  optim *full = make_optim(m, OPTIM_ADAMW);
  size_t P = gpt_num_params(m);
  if (r == 0)
    tp_memory(m, R);
  tensor_cuda_options to = {
      .micro = TP_MICRO, .B = TP_B, .T = TP_T, .opt = optim_cfg(OPTIM_ADAMW)};
  gpt_cuda_options go = {.B = TP_B,
                         .T = TP_T,
                         .opt = optim_cfg(OPTIM_ADAMW),
                         .device = comm_device(nc)};
  tensor_cuda *t = NULL;
  gpt_cuda *ref = NULL, *res = NULL;
  if (tensor_cuda_create(nc, m, &to, &t, err, sizeof err) != 0 ||
      (r == 0 && gpt_cuda_create(m, &go, &ref, err, sizeof err) != 0))
    die("create", err);
  for (int s = 0; s < TP_STEPS; s++) {
    double l, n, rl, rn, ql, qn;
    tp_group_step(t, s, &l, &n);
    if (r == 0) {
      tp_ref_step(ref, s, &rl, &rn);
      tp_close("loss", s, l, rl, 5e-4);
      tp_close("grad norm", s, n, rn, 5e-3);
      if (res) {
        tp_ref_step(res, s, &ql, &qn);
        tp_close("resumed one GPU's loss", s, ql, rl, 5e-4);
      }
    }
    if (s + 1 != TP_MID)
      continue;
    if (tensor_cuda_gather(t, m, 1, r == 0 ? full : NULL, err, sizeof err))
      die("tensor_cuda_gather", err);
    if (r == 0 && (gpt_cuda_create(m, &go, &res, err, sizeof err) != 0 ||
                   gpt_cuda_upload(res, m, full, err, sizeof err) != 0))
      die("resume as one GPU", err);
    tp_reload(ctl, t, m, full);
  }
  if (tensor_cuda_gather(t, m, 0, NULL, err, sizeof err) != 0)
    die("tensor_cuda_gather", err);
  if (r == 0) {
    gpt *rm = make_model(7), *qm = make_model(7);
    if (gpt_cuda_download(ref, rm, NULL, err, sizeof err) != 0 ||
        gpt_cuda_download(res, qm, NULL, err, sizeof err) != 0)
      die("download", err);
    tp_weights("the group's gathered weights", gpt_params(m), gpt_params(rm),
               gpt_params(w0), P);
    tp_weights("the resumed one GPU's weights", gpt_params(qm), gpt_params(rm),
               gpt_params(w0), P);
    gpt_destroy(rm);
    gpt_destroy(qm);
  }
  float bad = (float)failures;
  if (comm_allreduce_sum(ctl, &bad, 1, err, sizeof err) != 0)
    die("allreduce", err);
  if (r == 0)
    printf("%s\n", bad > 0 ? "tensor: FAILED" : "tensor: ok");
  tensor_cuda_destroy(t);
  gpt_cuda_destroy(ref);
  gpt_cuda_destroy(res);
  optim_destroy(full);
  gpt_destroy(m);
  gpt_destroy(w0);
  comm_destroy(nc);
  comm_destroy(ctl);
  if (rdv[0])
    rmdir(rdv);
  return bad > 0 ? 1 : 0;
}
#endif

int main(int argc, char **argv) {
  char why[512];
  const char *model = getenv("GPT_CUDA_CHECK_MODEL");
  if (model && strcmp(model, "llama") == 0)
    test_cfg = llama_cfg(0);
  else if (model && *model && strcmp(model, "gpt2") != 0) {
    fprintf(stderr,
            "gpt_cuda_check: GPT_CUDA_CHECK_MODEL=%s: not llama or "
            "gpt2\n",
            model);
    return 2;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: gpt_cuda_check available|step|recompute|oom|"
                    "llama|llama-recompute|stages|pipeline|window|"
                    "logits MODEL_DIR IDS OUT\n");
    return 2;
  }
  if (strcmp(argv[1], "estimate") == 0)
    return cmd_estimate();
  if (strcmp(argv[1], "nccl-version") == 0)
    return cmd_nccl_version();
  int have = gpt_cuda_available(why, sizeof why);
  if (strcmp(argv[1], "available") == 0) {
    printf("%s\n", why);
    return have ? 0 : 77;
  }
  if (!have) {
    printf("skip: %s\n", why);
    return 77;
  }
  if (strcmp(argv[1], "step") == 0)
    return cmd_step();
  if (strcmp(argv[1], "recompute") == 0)
    return cmd_recompute();
  if (strcmp(argv[1], "oom") == 0)
    return cmd_oom();
  if (strcmp(argv[1], "logits") == 0 && argc == 5)
    return cmd_logits(argv[2], argv[3], argv[4]);
  if (strcmp(argv[1], "zero") == 0)
    return cmd_zero();
  if (strcmp(argv[1], "shards") == 0)
    return cmd_shards();
  if (strcmp(argv[1], "window") == 0)
    return cmd_window();
  if (strcmp(argv[1], "zero-oom") == 0)
    return cmd_zero_oom();
#ifdef DAGRUN_CHECK_TENSOR
  if (strcmp(argv[1], "tensor") == 0)
    return cmd_tensor();
#endif
  if (strcmp(argv[1], "llama") == 0)
    return cmd_llama();
  if (strcmp(argv[1], "stages") == 0)
    return cmd_stages();
  if (strcmp(argv[1], "pipeline") == 0)
    return cmd_pipeline();
  if (strcmp(argv[1], "llama-recompute") == 0) {
    test_cfg = llama_cfg(0);
    int rc = cmd_recompute();
    printf("%s\n", rc ? "llama-recompute: FAILED" : "llama-recompute: ok");
    return rc;
  }
  fprintf(stderr, "gpt_cuda_check: unknown command %s\n", argv[1]);
  return 2;
}
