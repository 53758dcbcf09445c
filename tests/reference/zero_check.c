/*
 * zero_check: a tiny GPT trained for a few steps with ZeRO data
 * parallelism (gpu/zero/zero.h) under mpirun, for
 * tests/integration/test_zero.sh.
 *
 *   mpirun -np N zero_check --stage S --micro B [--steps 20]
 *       [--bucket FLOATS] [--no-overlap] [--save-at K --ckpt PARENT]
 *       [--load DIR] [--dump FILE] [--layers L --width C]
 *       [--skip-at K] [--nan-at K]
 *   zero_check [--layers L --width C] --compare A B
 *       (two dumps of that model: max abs and relative diff)
 *
 * Model (--layers and --width change it, for timings): 2 layers, 4 heads, width
 * 32, context 16, vocab 64, gpt_init seed 1234; AdamW (0.9, 0.95, eps 1e-8,
 * decay 0.1), LR 1e-2 with 2 warmup steps then cosine to 1e-3 over 20 steps,
 * clipping at global norm 1.5 (some steps are cut, some not: AdamW hardly
 * notices a scale applied to every step). Data: step s's global batch is
 * sequences j = 0..N*B-1, each drawn from (seed, s, j) alone; rank r takes j in
 * [r*B, (r+1)*B). So N ranks of micro-batch B see exactly what one rank of
 * micro-batch N*B sees.
 *
 * --skip-at K: an update guard (zero_set_guard) that stops step K's
 * update (factor 0) and lets the others through. --nan-at K: step K runs
 * with one weight NaN (every rank's copy of parameter 0, or at stage 3
 * the first of rank 0's shard; put back after the step), so its loss and
 * norm are not finite: zero_step must move nothing, which makes the run
 * end on --skip-at K's weights.
 *
 * Rank 0 prints "step <s> loss <l> norm <n> buckets <b> early <e>
 * factor <f>" per step (s from 1; b the buckets of stages 0-1 or the
 * groups of stages 2-3 whose gradients were reduced, e of them started
 * during backward, f zero_step_result's lr_factor), a "mem"
 * line (its bytes and the formulas, zero.h's zero_memory), "step_ms" (mean
 * time of the steps after the first), "phases_ms" (its split: forward,
 * backward, comm not hidden, optimizer) and "hash" of the final weights;
 * --dump writes them as raw little-endian floats.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "zero/zero.h"

#define SEED 1234
#define VOCAB 64
#define CTX 16

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Sequence j of step s: T+1 tokens of a noisy affine walk, so there is
 * something to learn. */
static void draw(uint64_t s, uint64_t j, uint32_t *tok, int T) {
  uint64_t h = mix(mix((uint64_t)SEED) ^ mix(s * 1000003ULL + j));
  uint32_t x = (uint32_t)(h % VOCAB);
  for (int t = 0; t <= T; t++) {
    tok[t] = x;
    h = mix(h);
    x = (h % 10 == 0) ? (uint32_t)((h >> 8) % VOCAB) : (x * 5 + 3) % VOCAB;
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static float *read_dump(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *p = malloc((size_t)sz + 4);
  *n = (size_t)sz / sizeof(float);
  if (p && fread(p, sizeof(float), *n, f) != *n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  return p;
}

/* The model every run trains. */
static int n_layer = 2, n_embd = 32;

/* --skip-at's guard: factor 0 at step *arg (from 1), else 1. */
static int64_t guard_step; /* the step zero_step is in (from 1) */
static double skip_guard(void *arg, float loss, double norm) {
  (void)loss, (void)norm;
  return guard_step == *(const int64_t *)arg ? 0.0 : 1.0;
}
static int make_model(gpt **m, char *err, size_t errlen) {
  gpt_config cfg = {.n_layer = n_layer,
                    .n_head = 4,
                    .n_embd = n_embd,
                    .block_size = CTX,
                    .vocab_size = VOCAB};
  if (gpt_config_finish(&cfg, err, errlen) != 0 ||
      gpt_create(&cfg, m, err, errlen) != 0)
    return -1;
  gpt_init(*m, SEED);
  return 0;
}

/* Prints the largest difference of two dumps relative to the largest
 * weight, over all weights but the attention key biases (the middle third
 * of each c_attn.bias), and separately the largest difference of those.
 * A key bias adds q.b_k to every score of a softmax row, which the
 * softmax ignores: its gradient is 0 in exact arithmetic, and in fp32 it
 * is rounding noise that AdamW's normalization turns into steps of up to
 * lr. Any two summation orders (world sizes, a reduce-scatter instead of
 * an all-reduce, thread counts) move these weights differently. */
static int compare(const char *a, const char *b) {
  size_t na, nb;
  char err[256];
  gpt *m = NULL;
  float *x = read_dump(a, &na), *y = read_dump(b, &nb);
  char *kb = NULL;
  if (!x || !y || na != nb || make_model(&m, err, sizeof err) != 0 ||
      na != gpt_num_params(m) || !(kb = calloc(na, 1))) {
    fprintf(stderr, "zero_check: cannot compare %s and %s\n", a, b);
    free(x);
    free(y);
    gpt_destroy(m);
    return 1;
  }
  int C = gpt_get_config(m)->n_embd;
  for (int l = 0; l < gpt_get_config(m)->n_layer; l++) {
    char name[64];
    snprintf(name, sizeof name, "h.%d.attn.c_attn.bias", l);
    const gpt_tensor *t = gpt_tensor_find(m, name);
    memset(kb + t->offset + C, 1, (size_t)C);
  }
  double mad = 0, mx = 0, kmad = 0;
  for (size_t i = 0; i < na; i++) {
    double d = x[i] > y[i] ? x[i] - y[i] : y[i] - x[i];
    double v = x[i] > 0 ? x[i] : -x[i];
    if (kb[i])
      kmad = d > kmad ? d : kmad;
    else
      mad = d > mad ? d : mad;
    mx = v > mx ? v : mx;
  }
  printf("max_abs_diff %.9g rel %.9g key_bias_max_abs_diff %.9g\n", mad,
         mx > 0 ? mad / mx : mad, kmad);
  free(kb);
  free(x);
  free(y);
  gpt_destroy(m);
  return 0;
}

/* The command line (the usage at the top of this file). */
typedef struct options {
  zero_config zc;
  int B, steps, save_at;
  int64_t skip_at, nan_at;
  const char *ckdir, *load, *dump;
  const char *cmp_a, *cmp_b; /* --compare's two dumps, else NULL */
} options;

/* Reads argv into *o (the model's --layers and --width into n_layer and
 * n_embd): 0, or 2 (the exit status) after saying what is wrong. */
static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.steps = 20, .save_at = -1, .skip_at = -1, .nan_at = -1};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--compare") == 0 && i + 2 < argc) {
      o->cmp_a = argv[++i];
      o->cmp_b = argv[++i];
      continue;
    }
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--no-overlap") == 0) {
      o->zc.no_overlap = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "zero_check: %s wants a value\n", a);
      return 2;
    }
    i++;
    if (strcmp(a, "--stage") == 0)
      o->zc.stage = atoi(v);
    else if (strcmp(a, "--micro") == 0)
      o->B = atoi(v);
    else if (strcmp(a, "--steps") == 0)
      o->steps = atoi(v);
    else if (strcmp(a, "--bucket") == 0)
      o->zc.bucket_floats = (size_t)atol(v);
    else if (strcmp(a, "--save-at") == 0)
      o->save_at = atoi(v);
    else if (strcmp(a, "--ckpt") == 0)
      o->ckdir = v;
    else if (strcmp(a, "--load") == 0)
      o->load = v;
    else if (strcmp(a, "--dump") == 0)
      o->dump = v;
    else if (strcmp(a, "--skip-at") == 0)
      o->skip_at = atoll(v);
    else if (strcmp(a, "--nan-at") == 0)
      o->nan_at = atoll(v);
    else if (strcmp(a, "--layers") == 0)
      n_layer = atoi(v);
    else if (strcmp(a, "--width") == 0)
      n_embd = atoi(v);
    else {
      fprintf(stderr, "zero_check: unknown option %s\n", a);
      return 2;
    }
  }
  return 0;
}

/* The steps after the first (which pays for warm-up): their count, total
 * wall time and zero_step_result's split, summed. */
typedef struct timing {
  double t_sum, ph[4]; /* ms; s of forward, backward, comm, optimizer */
  int t_n;
} timing;

/* Rank r's micro-batch of step s: sequences [r*B, (r+1)*B) of the global
 * batch, as inputs in and targets tg (B, T); tok has room for T+1. */
static void fill_batch(int64_t s, int r, int B, int T, uint32_t *tok,
                       uint32_t *in, uint32_t *tg) {
  for (int b = 0; b < B; b++) {
    draw((uint64_t)s, (uint64_t)r * B + b, tok, T);
    memcpy(in + (size_t)b * T, tok, (size_t)T * sizeof *tok);
    memcpy(tg + (size_t)b * T, tok + 1, (size_t)T * sizeof *tok);
  }
}

/* Steps [start, o->steps) of z, rank 0 printing each, with --nan-at's
 * poisoned weight and --save-at's checkpoint. 0, or -1 with err set. */
static int train(zero *z, gpt *m, const options *o, int r, int64_t start,
                 timing *tm, char *err, size_t errlen) {
  lr_schedule ls = {1e-2, 1e-3, 2, 20, LR_COSINE, 0};
  int B = o->B, T = CTX, rc = -1;
  uint32_t *tok = malloc((size_t)(T + 1) * sizeof *tok);
  uint32_t *in = malloc((size_t)B * T * sizeof *in);
  uint32_t *tg = malloc((size_t)B * T * sizeof *tg);
  if (!tok || !in || !tg) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  for (int64_t s = start; s < o->steps; s++) {
    fill_batch(s, r, B, T, tok, in, tg);
    zero_step_result res;
    guard_step = s + 1;
    /* --nan-at: the weight every rank's forward reads from this one. */
    float *poison = s + 1 != o->nan_at ? NULL
                    : o->zc.stage < 3  ? gpt_params(m)
                    : r == 0           ? zero_param_shard(z)
                                       : NULL;
    float kept = poison ? poison[0] : 0.0f;
    if (poison)
      poison[0] = NAN;
    double t0 = now_ms();
    if (zero_step(z, in, tg, B, T, (float)lr_at(&ls, s), 1.5, &res, err,
                  errlen) != 0)
      goto done;
    if (poison)
      poison[0] = kept;
    if (s > start) {
      tm->t_sum += now_ms() - t0;
      tm->t_n++;
      tm->ph[0] += res.t_forward;
      tm->ph[1] += res.t_backward;
      tm->ph[2] += res.t_comm;
      tm->ph[3] += res.t_optimizer;
    }
    if (r == 0)
      printf("step %" PRId64 " loss %.9g norm %.9g buckets %d early %d "
             "factor %g\n",
             s + 1, res.loss, res.norm, res.buckets, res.buckets_early,
             res.lr_factor);
    if (s + 1 == o->save_at &&
        zero_save(z, o->ckdir, o->save_at, err, errlen) != 0)
      goto done;
  }
  rc = 0;
done:
  free(tok);
  free(in);
  free(tg);
  return rc;
}

/* Rank 0's closing lines: "mem", "step_ms", "phases_ms" and the "hash"
 * of the P final weights w, and --dump's file. 0, or -1 with err set. */
static int report(zero *z, const float *w, size_t P, const timing *tm,
                  const char *dump, char *err, size_t errlen) {
  zero_memory zm;
  zero_memory_get(z, &zm);
  printf("mem stage %d world %d psi %" PRIu64 " params %" PRIu64
         " grads %" PRIu64 " optim %" PRIu64 " peak_params %" PRIu64
         " peak_grads %" PRIu64 " f_params %" PRIu64 " f_grads %" PRIu64
         " f_optim %" PRIu64 " f_mixed %" PRIu64 " f_peak_params %" PRIu64
         " f_peak_grads %" PRIu64 "\n",
         zm.stage, zm.world, zm.n_params, zm.params, zm.grads, zm.optim,
         zm.peak_params, zm.peak_grads, zm.f_params, zm.f_grads, zm.f_optim,
         zm.f_mixed, zm.f_peak_params, zm.f_peak_grads);
  int n = tm->t_n;
  printf("step_ms %.3f\n", n ? tm->t_sum / n : 0.0);
  /* Where it went (zero_step_result's split, rank 0), ms a step. */
  printf("phases_ms forward %.3f backward %.3f comm %.3f optimizer %.3f\n",
         n ? 1e3 * tm->ph[0] / n : 0.0, n ? 1e3 * tm->ph[1] / n : 0.0,
         n ? 1e3 * tm->ph[2] / n : 0.0, n ? 1e3 * tm->ph[3] / n : 0.0);
  /* FNV-1a over the bytes: equal runs print equal hashes. */
  uint64_t h = 1469598103934665603ULL;
  const unsigned char *p = (const unsigned char *)w;
  for (size_t i = 0; i < P * sizeof *w; i++)
    h = (h ^ p[i]) * 1099511628211ULL;
  printf("hash %016" PRIx64 "\n", h);
  if (dump) {
    FILE *f = fopen(dump, "wb");
    if (!f || fwrite(w, sizeof *w, P, f) != P || fclose(f) != 0) {
      snprintf(err, errlen, "cannot write %s", dump);
      return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  options o;
  int rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return rc;
  if (o.cmp_a)
    return compare(o.cmp_a, o.cmp_b);
  if (o.B < 1 || (o.save_at >= 0 && !o.ckdir)) {
    fprintf(stderr, "zero_check: --micro B >= 1 needed (and --ckpt with "
                    "--save-at)\n");
    return 2;
  }

  char err[512];
  comm_config cc = {.backend = COMM_MPI, .timeout_s = 60};
  comm *c = NULL;
  if (comm_create(&cc, &c, err, sizeof err) != 0) {
    fprintf(stderr, "zero_check: %s\n", err);
    return 1;
  }
  int r = comm_rank(c);
  gpt *m = NULL;
  zero *z = NULL;
  float *w = NULL;
  timing tm = {0};
  if (make_model(&m, err, sizeof err) != 0)
    goto fail;
  optim_config oc = {OPTIM_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
  if (zero_create(&o.zc, m, &oc, c, &z, err, sizeof err) != 0)
    goto fail;
  int64_t start = 0;
  if (o.load && zero_load(z, o.load, &start, err, sizeof err) != 0)
    goto fail;
  if (o.skip_at >= 0)
    zero_set_guard(z, skip_guard, &o.skip_at);
  if (train(z, m, &o, r, start, &tm, err, sizeof err) != 0)
    goto fail;
  size_t P = gpt_num_params(m);
  w = malloc(P * sizeof *w);
  if (!w || zero_gather_params(z, w, err, sizeof err) != 0)
    goto fail;
  if (r == 0 && report(z, w, P, &tm, o.dump, err, sizeof err) != 0)
    goto fail;
  free(w);
  zero_destroy(z);
  gpt_destroy(m);
  comm_destroy(c);
  return 0;
fail:
  fprintf(stderr, "zero_check: rank %d: %s\n", r, err);
  comm_abort(c, 1);
}
