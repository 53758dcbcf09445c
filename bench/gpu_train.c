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
 *   gpu_train zero  -z STAGE [same options]: the step of ZeRO stage 0, 1,
 *                   2 or 3 on the GPU (gpu/zero/zero_cuda.h, NCCL): one
 *                   rank alone (NCCL through a rendezvous directory), or
 *                   the ranks of mpirun, each on its own -B x -T
 *                   (bench/zero_cuda.sh)
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
#include <unistd.h>

#include "comm/comm.h"
#include "cuda/gpt_cuda.h"
#include "data/rng.h"
#include "model/gpt.h"
#include "zero/zero.h"
#include "zero/zero_cuda.h"

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
  int stage; /* zero: the ZeRO stage; -1: the engine alone */
} opts;

/* What trains: the engine alone, or a rank of a gang through zero_cuda. */
typedef struct trainer {
  gpt_cuda *g;
  comm *ctl, *nc;
  zero *z;
  zero_cuda *zc;
  int rank, N;
  char rdv[64];
} trainer;

static optim_config adamw(void) {
  return (optim_config){.kind = OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.95f,
                        .eps = 1e-8f, .weight_decay = 0.1f};
}

static void trainer_free(trainer *t) {
  zero_cuda_destroy(t->zc);
  zero_destroy(t->z);
  comm_destroy(t->nc);
  comm_destroy(t->ctl);
  gpt_cuda_destroy(t->g);
  if (t->rdv[0])
    rmdir(t->rdv);
  memset(t, 0, sizeof *t);
}

/* The engine at batch B, or (o->stage >= 0) a zero_cuda rank: MPI's
 * ranks under mpirun, else one rank alone. 0, or -1 with err. */
static int trainer_make(const opts *o, gpt *m, int B, trainer *t, char *err,
                        size_t errlen) {
  memset(t, 0, sizeof *t);
  t->N = 1;
  if (o->stage < 0) {
    gpt_cuda_options go = {.B = B, .T = o->T, .recompute = o->rc,
                           .opt = adamw()};
    return gpt_cuda_create(m, &go, &t->g, err, errlen);
  }
  int mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
  comm_config cc = {.backend = mpi ? COMM_MPI : COMM_SELF};
  comm_config nc = {.backend = COMM_NCCL, .device = -1};
  if (!mpi) {
    snprintf(t->rdv, sizeof t->rdv, "/tmp/gpu_train-nccl-XXXXXX");
    if (!mkdtemp(t->rdv)) {
      snprintf(err, errlen, "mkdtemp %s failed", t->rdv);
      t->rdv[0] = 0;
      return -1;
    }
    nc.rendezvous_dir = t->rdv;
    nc.size = 1;
  }
  optim_config oc = adamw();
  zero_config zc = {.stage = o->stage};
  zero_cuda_options zo = {.B = B, .T = o->T, .opt = oc,
                          .recompute = (int)o->rc};
  if (comm_create(&cc, &t->ctl, err, errlen) != 0 ||
      comm_create(&nc, &t->nc, err, errlen) != 0 ||
      zero_create(&zc, m, &oc, t->ctl, &t->z, err, errlen) != 0 ||
      zero_cuda_create(t->z, m, t->ctl, t->nc, &zo, &t->zc, err, errlen) != 0)
    return -1;
  t->rank = comm_rank(t->ctl);
  t->N = comm_size(t->ctl);
  return 0;
}

/* One step as the train stage takes it; *loss only from zero_cuda (the
 * engine's is read at the end). */
static int trainer_step(trainer *t, const uint32_t *in, const uint32_t *tg,
                        int B, int T, float *loss, char *err, size_t errlen) {
  if (t->zc) {
    zero_step_result res;
    int rc = zero_cuda_step(t->zc, in, tg, B, T, 6e-4f, 1.0, &res, err,
                            errlen);
    *loss = res.loss;
    return rc;
  }
  double norm;
  return gpt_cuda_zero_grad(t->g, err, errlen) ||
         gpt_cuda_forward_train(t->g, in, tg, B, T, NULL, err, errlen) ||
         gpt_cuda_backward(t->g, 1.0f, err, errlen) ||
         gpt_cuda_clip_grad_norm(t->g, 1.0, &norm, err, errlen) ||
         gpt_cuda_step(t->g, 6e-4f, err, errlen);
}

/* 6N + 6*L*C*T, N the weights of the products and the head (GPT-2's:
 * with its biases and LayerNorms; a Llama's: q, k, v, o, gate, up, down
 * and its RMSNorms). */
static double flops_per_token(const gpt_config *c, int T) {
  double C = c->n_embd, L = c->n_layer;
  double N = (double)c->vocab_size * C + L * (12 * C * C + 13 * C) + 2 * C;
  if (c->family == GPT_FAMILY_LLAMA) {
    double KVD = (double)c->n_kv_head * (c->n_embd / c->n_head);
    N = (double)c->vocab_size * C +
        L * (2 * C * C + 2 * KVD * C + 3.0 * c->intermediate * C + 2 * C) + C;
  }
  return 6 * N + 6 * L * C * T;
}

/* One run at batch B: 0, 1 on an error, 2 when out of memory. */
static int run_one(const opts *o, gpt *m, int B, int quiet_oom) {
  const gpt_config *c = gpt_get_config(m);
  char err[4096];
  int T = o->T;
  trainer t;
  if (trainer_make(o, m, B, &t, err, sizeof err) != 0) {
    trainer_free(&t);
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
  rng_seed(s, 1234 + (uint64_t)t.rank);
  for (size_t i = 0; i < n; i++) {
    in[i] = (uint32_t)rng_below(s, (uint64_t)c->vocab_size);
    tg[i] = (uint32_t)rng_below(s, (uint64_t)c->vocab_size);
  }
  double t0 = 0, norm = 0;
  float loss = 0;
  int rc = 0;
  /* zero_cuda_step waits for its collectives, so the step ends on the
   * host; the engine alone is synchronized around the timed steps. */
  for (int k = 0; k < o->warmup + o->steps && rc == 0; k++) {
    if (k == o->warmup) {
      rc = t.g ? gpt_cuda_synchronize(t.g, err, sizeof err) : 0;
      t0 = now();
    }
    if (rc == 0)
      rc = trainer_step(&t, in, tg, B, T, &loss, err, sizeof err);
  }
  if (rc == 0 && t.g)
    rc = gpt_cuda_synchronize(t.g, err, sizeof err) ||
         gpt_cuda_last_loss(t.g, &loss, err, sizeof err);
  double el = now() - t0;
  uint64_t used = 0, total = 0, alloc = 0;
  if (rc == 0 && t.g) {
    rc = gpt_cuda_device_used(t.g, &used, &total, err, sizeof err);
    alloc = gpt_cuda_allocated_bytes(t.g);
  }
  zero_memory zm = {0};
  uint64_t acts = 0;
  if (t.zc) {
    zero_cuda_memory_get(t.zc, &zm, &acts);
    alloc = zm.params + zm.grads + zm.optim + acts;
  }
  (void)norm;
  if (rc != 0) {
    fprintf(stderr, "gpu_train: %s\n", err);
    trainer_free(&t);
    free(in);
    free(tg);
    return 1;
  }
  double tps = (double)n * t.N * o->steps / el;
  double fpt = flops_per_token(c, T);
  double mfu = o->peak > 0 ? fpt * tps / (t.N * o->peak * 1e12) : 0;
  if (t.rank == 0) {
    char zs[32] = "";
    if (t.zc)
      snprintf(zs, sizeof zs, ", ZeRO stage %d", o->stage);
    printf("B=%d T=%d recompute %s%s: %.0f tokens/s, %.2f ms/step, "
           "allocated %.2f GiB, MFU %.1f%%, last loss %.4f\n",
           B, T, gpt_recompute_name(o->rc), zs, tps, 1e3 * el / o->steps,
           alloc / 1073741824.0, 100 * mfu, loss);
    if (t.g) {
      uint64_t extra = 0;
      const char *att = gpt_cuda_attention(t.g, &extra);
      printf("attention: %s; %.1f MiB beside the allocation\n", att,
             extra / 1048576.0);
    }
    if (t.zc)
      printf("rank 0's GPU: params %.1f MiB, grads %.1f MiB, optimizer %.1f "
             "MiB, activations %.1f MiB (ZeRO's mixed-precision formula "
             "for the first three: %.1f MiB)\n",
             zm.params / 1048576.0, zm.grads / 1048576.0, zm.optim / 1048576.0,
             acts / 1048576.0, zm.f_mixed / 1048576.0);
    printf("RESULT engine=dagrun stage=%d ranks=%d B=%d T=%d steps=%d "
           "tokens_per_s=%.1f ms_per_step=%.3f peak_alloc_bytes=%llu "
           "device_used_bytes=%llu flops_per_token=%.6g mfu=%.4f "
           "loss=%.4f\n",
           t.zc ? o->stage : -1, t.N, B, T, o->steps, tps,
           1e3 * el / o->steps, (unsigned long long)alloc,
           (unsigned long long)used, fpt, mfu, loss);
    fflush(stdout);
  }
  trainer_free(&t);
  free(in);
  free(tg);
  return 0;
}

int main(int argc, char **argv) {
  char why[512], err[1024];
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_train available|run|sweep|zero [-m MODEL] "
                    "[-B n] [-T n] [-s steps] [-w warmup] [-r recompute] [-p "
                    "peak_tflops] [-z zero_stage]\n");
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
  opts o = {"gpt2-124M", 16, 1024, 20, 3, GPT_RECOMPUTE_NONE, 989, -1};
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
    else if (!strcmp(f, "-z"))
      o.stage = atoi(v);
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
  int zmode = strcmp(argv[1], "zero") == 0;
  if (zmode != (o.stage >= 0) || o.stage > 3) {
    fprintf(stderr,
            "gpu_train: zero takes -z 0, 1, 2 or 3 (the others no -z)\n");
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
  const char *mpi_rank = getenv("OMPI_COMM_WORLD_RANK");
  if (mpi_rank && strcmp(mpi_rank, "0") != 0)
    (void)!freopen("/dev/null", "w", stdout); /* one rank reports */
  gpt_cuda_device_name(0, why, sizeof why, err, sizeof err);
  printf("dagrun CUDA engine on %s: %s (%.1fM parameters), FLOPs per token "
         "= 6N + 6*L*C*T = %.4g (N = %.2fM), peak %.0f TFLOP/s\n",
         why, o.model, gpt_num_params(m) / 1e6, flops_per_token(&c, o.T),
         (flops_per_token(&c, o.T) - 6.0 * c.n_layer * c.n_embd * o.T) / 6e6,
         o.peak);
  int rc = 0;
  if (strcmp(argv[1], "run") == 0 || zmode) {
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
