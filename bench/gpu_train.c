/*
 * gpu_train: dagrun's CUDA backend (gpu/cuda/gpt_cuda.h) training a
 * GPT-2 for a fixed number of steps on random token ids, timed; the
 * engine half of bench/gpu_train.sh (bench/torch_gpt2.py is the PyTorch
 * half, on the same shapes and the same FLOP formula).
 *
 *   gpu_train available
 *   gpu_train run   [-m gpt2-124M] [-B 16] [-T 1024] [-s 20] [-w 3]
 *                   [-r none|gelu|block] [-p 989]
 *   gpu_train sweep [same options; -B is ignored]: B = 1, 2, 4, ... until
 *                   the device has not the memory
 *
 * A step is what the train stage does: zero the gradients, forward,
 * backward, clip to norm 1 (which reads the norm back: a synchronization
 * per step), AdamW. The data are uniform random ids (seeded): the work of
 * a step does not depend on them. Timing: a host clock around the timed
 * steps, after -w warmup steps, with the stream synchronized before and
 * after.
 *
 * FLOPs per token = 6N + 6*L*C*T, N the parameters of the matrix products
 * (the layers' weights and biases, the LayerNorms, and the tied head as
 * vocab_size x C; not the position embeddings), the formula of issue 7
 * and of the train stage's mfu metric. MFU = FLOPs per token x tokens/s /
 * the peak (-p, TFLOP/s; 989: an H100 SXM's dense BF16).
 *
 * Output: human lines, and one "RESULT key=value ..." line per run that
 * bench/gpu_train.sh reads.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpt.h"
#include "gpt_cuda.h"
#include "rng.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct opts {
  const char *model;
  int B, T, steps, warmup;
  gpt_recompute rc;
  double peak;
} opts;

static double flops_per_token(const gpt_config *c, int T) {
  double C = c->n_embd, L = c->n_layer;
  double N = (double)c->vocab_size * C + L * (12 * C * C + 13 * C) + 2 * C;
  return 6 * N + 6 * L * C * T;
}

/* One run at batch B: 0, 1 on an error, 2 when out of memory. */
static int run_one(const opts *o, gpt *m, int B, int quiet_oom) {
  const gpt_config *c = gpt_get_config(m);
  char err[4096];
  int T = o->T;
  gpt_cuda_options go = {.B = B, .T = T, .recompute = o->rc};
  go.opt = (optim_config){.kind = OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.95f,
                          .eps = 1e-8f, .weight_decay = 0.1f};
  gpt_cuda *g = NULL;
  if (gpt_cuda_create(m, &go, &g, err, sizeof err) != 0) {
    if (strstr(err, "out of GPU memory") || strstr(err, "too large")) {
      if (!quiet_oom)
        fprintf(stderr, "gpu_train: %s\n", err);
      printf("B=%d: %s\n", B,
             strstr(err, "too large") ? "too large a batch for the kernels"
                                      : "out of memory");
      return 2;
    }
    fprintf(stderr, "gpu_train: %s\n", err);
    return 1;
  }
  size_t n = (size_t)B * T;
  uint32_t *in = malloc(n * 4), *tg = malloc(n * 4);
  uint64_t s[4];
  rng_seed(s, 1234);
  for (size_t i = 0; i < n; i++) {
    in[i] = (uint32_t)rng_below(s, (uint64_t)c->vocab_size);
    tg[i] = (uint32_t)rng_below(s, (uint64_t)c->vocab_size);
  }
  double t0 = 0, norm = 0;
  float loss = 0;
  int rc = 0;
  for (int k = 0; k < o->warmup + o->steps && rc == 0; k++) {
    if (k == o->warmup) {
      rc = gpt_cuda_synchronize(g, err, sizeof err);
      t0 = now();
    }
    if (rc == 0)
      rc = gpt_cuda_zero_grad(g, err, sizeof err) ||
           gpt_cuda_forward(g, in, tg, B, T, NULL, err, sizeof err) ||
           gpt_cuda_backward(g, 1.0f, err, sizeof err) ||
           gpt_cuda_clip_grad_norm(g, 1.0, &norm, err, sizeof err) ||
           gpt_cuda_step(g, 6e-4f, err, sizeof err);
  }
  if (rc == 0)
    rc = gpt_cuda_synchronize(g, err, sizeof err) ||
         gpt_cuda_last_loss(g, &loss, err, sizeof err);
  double el = now() - t0;
  uint64_t used = 0, total = 0;
  if (rc == 0)
    rc = gpt_cuda_device_used(g, &used, &total, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "gpu_train: %s\n", err);
    gpt_cuda_destroy(g);
    free(in);
    free(tg);
    return 1;
  }
  double tps = (double)n * o->steps / el;
  double fpt = flops_per_token(c, T);
  double mfu = o->peak > 0 ? fpt * tps / (o->peak * 1e12) : 0;
  uint64_t alloc = gpt_cuda_allocated_bytes(g);
  printf("B=%d T=%d recompute %s: %.0f tokens/s, %.2f ms/step, allocated "
         "%.2f GiB, device in use %.2f GiB, MFU %.1f%%, last loss %.4f\n",
         B, T, gpt_recompute_name(o->rc), tps, 1e3 * el / o->steps,
         alloc / 1073741824.0, used / 1073741824.0, 100 * mfu, loss);
  printf("RESULT engine=dagrun B=%d T=%d steps=%d tokens_per_s=%.1f "
         "ms_per_step=%.3f peak_alloc_bytes=%llu device_used_bytes=%llu "
         "flops_per_token=%.6g mfu=%.4f loss=%.4f\n",
         B, T, o->steps, tps, 1e3 * el / o->steps, (unsigned long long)alloc,
         (unsigned long long)used, fpt, mfu, loss);
  fflush(stdout);
  gpt_cuda_destroy(g);
  free(in);
  free(tg);
  return 0;
}

int main(int argc, char **argv) {
  char why[512], err[1024];
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_train available|run|sweep [-m MODEL] [-B n] "
                    "[-T n] [-s steps] [-w warmup] [-r recompute] [-p "
                    "peak_tflops]\n");
    return 2;
  }
  int have = gpt_cuda_available(why, sizeof why);
  if (strcmp(argv[1], "available") == 0) {
    printf("%s\n", why);
    return have ? 0 : 1;
  }
  if (!have) {
    printf("no GPU: %s\n", why);
    return 1;
  }
  opts o = {"gpt2-124M", 16, 1024, 20, 3, GPT_RECOMPUTE_NONE, 989};
  for (int i = 2; i + 1 < argc; i += 2) {
    const char *f = argv[i], *v = argv[i + 1];
    if (!strcmp(f, "-m"))
      o.model = v;
    else if (!strcmp(f, "-B"))
      o.B = atoi(v);
    else if (!strcmp(f, "-T"))
      o.T = atoi(v);
    else if (!strcmp(f, "-s"))
      o.steps = atoi(v);
    else if (!strcmp(f, "-w"))
      o.warmup = atoi(v);
    else if (!strcmp(f, "-p"))
      o.peak = atof(v);
    else if (!strcmp(f, "-r")) {
      if (gpt_recompute_parse(v, &o.rc) != 0) {
        fprintf(stderr, "gpu_train: -r must be none, gelu or block\n");
        return 2;
      }
    } else {
      fprintf(stderr, "gpu_train: unknown option %s\n", f);
      return 2;
    }
  }
  if (o.B < 1 || o.T < 1 || o.steps < 1 || o.warmup < 0) {
    fprintf(stderr, "gpu_train: -B, -T, -s must be >= 1, -w >= 0\n");
    return 2;
  }
  gpt_config c;
  gpt *m = NULL;
  if (gpt_config_preset(o.model, &c, err, sizeof err) != 0) {
    fprintf(stderr, "gpu_train: %s\n", err);
    return 2;
  }
  c.vocab_size = 50257; /* GPT-2's */
  if (o.T > c.block_size) {
    fprintf(stderr, "gpu_train: -T %d is above %s's block_size %d\n", o.T,
            o.model, c.block_size);
    return 2;
  }
  if (gpt_config_finish(&c, err, sizeof err) != 0 ||
      gpt_create(&c, &m, err, sizeof err) != 0) {
    fprintf(stderr, "gpu_train: %s\n", err);
    return 1;
  }
  gpt_init(m, 1);
  gpt_cuda_device_name(0, why, sizeof why, err, sizeof err);
  printf("dagrun CUDA engine on %s: %s (%.1fM parameters), FLOPs per token "
         "= 6N + 6*L*C*T = %.4g (N = %.2fM), peak %.0f TFLOP/s\n",
         why, o.model, gpt_num_params(m) / 1e6, flops_per_token(&c, o.T),
         (flops_per_token(&c, o.T) - 6.0 * c.n_layer * c.n_embd * o.T) / 6e6,
         o.peak);
  int rc = 0;
  if (strcmp(argv[1], "run") == 0) {
    rc = run_one(&o, m, o.B, 0) ? 1 : 0;
  } else if (strcmp(argv[1], "sweep") == 0) {
    for (int B = 1; B <= 4096; B *= 2) {
      int r = run_one(&o, m, B, 1);
      if (r == 2)
        break;
      if (r != 0) {
        rc = 1;
        break;
      }
    }
  } else {
    fprintf(stderr, "gpu_train: unknown command %s\n", argv[1]);
    rc = 2;
  }
  gpt_destroy(m);
  return rc;
}
