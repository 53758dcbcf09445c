/*
 * kernel_bench: the time of each launcher of gpu/cuda/kernels.cuh at GPT-2
 * 124M training shapes (T=1024, C=768, NH=12, Vp=50304), for tuning on a
 * GPU. Not a test: it checks nothing but that the launchers succeed
 * (kernel_check checks their results).
 *
 * Each op runs 3 times to warm up, then 20 times between CUDA events; the
 * median time is printed with the op's rate: TFLOP/s for products and
 * attention (causal attention counted as half the full T x T work),
 * GB/s of the bytes it must move for the others.
 *
 * Usage: kernel_bench [B]   (micro-batch, default 8)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cuda/kernels.cuh"

static char g_err[512];
#define E g_err, sizeof g_err

#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "kernel_bench: %s: %s\n", #call,                         \
              cudaGetErrorString(e_));                                         \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

/* Device memory that lives until the program ends (one arena, freed by
 * the process's exit), filled with small pseudo-random values so that no
 * op sees infinities. */
template <typename T> static T *dev(size_t n) {
  T *p = NULL;
  CK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
  std::vector<T> h(n);
  uint32_t s = 12345;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    float v = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
    h[i] = (T)v;
  }
  CK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

/* Median ms of f over 20 runs on k's stream; f returns a launcher's
 * status, and a failure ends the program with its message. */
static float time_op(const kern_ctx *k, const std::function<int()> &f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 23; i++) {
    CK(cudaEventRecord(a, k->stream));
    if (f() != 0) {
      fprintf(stderr, "kernel_bench: %s\n", g_err);
      exit(1);
    }
    CK(cudaEventRecord(b, k->stream));
    CK(cudaEventSynchronize(b));
    float t = 0.0f;
    CK(cudaEventElapsedTime(&t, a, b));
    if (i >= 3)
      ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

static void report(const char *op, float ms, double flops, double bytes) {
  if (flops > 0)
    printf("%-44s %9.3f ms %9.1f TFLOP/s\n", op, ms, flops / ms / 1e9);
  else
    printf("%-44s %9.3f ms %9.1f GB/s\n", op, ms, bytes / ms / 1e6);
}

int main(int argc, char **argv) {
  const int B = argc > 1 ? atoi(argv[1]) : 8;
  if (B <= 0) {
    fprintf(stderr, "usage: kernel_bench [B]  (B > 0)\n");
    return 2;
  }
  const int T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
  const size_t N = (size_t)B * T, P = 124475904; /* GPT-2 124M's params */
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("kernel_bench on %s: B=%d T=%d C=%d NH=%d Vp=%d\n", prop.name, B, T, C,
         NH, Vp);
  kern_ctx k;
  /* Deterministic, as the kernels' fixed-order sums are timed; but cuDNN's
   * attention (DAGRUN_CUDA_ATTENTION=cudnn) runs only outside that mode. */
  const char *att_env = getenv("DAGRUN_CUDA_ATTENTION");
  const int det = !(att_env && strcmp(att_env, "cudnn") == 0);
  if (kern_ctx_init(&k, det, E)) {
    fprintf(stderr, "kernel_bench: %s\n", g_err);
    return 2;
  }
  floatX *x = dev<floatX>(N * C), *y = dev<floatX>(N * C);
  floatX *x4 = dev<floatX>(N * 4 * C), *aux = dev<floatX>(N * 4 * C);
  floatX *qkv = dev<floatX>(N * 3 * C), *dqkv = dev<floatX>(N * 3 * C);
  floatX *w = dev<floatX>((size_t)C * 4 * C), *bias = dev<floatX>(4 * C);
  floatX *lnw = dev<floatX>(C), *lnb = dev<floatX>(C);
  float *dw = dev<float>((size_t)C * 4 * C), *db = dev<float>(4 * C);
  float *mean = dev<float>(N), *rstd = dev<float>(N);
  float *lse = dev<float>(N * NH), *losses = dev<float>(N);
  floatX *logits = dev<floatX>(N * Vp);
  int *targets = NULL;
  CK(cudaMalloc(&targets, N * sizeof(int)));
  CK(cudaMemset(targets, 0, N * sizeof(int)));
  size_t scratch_bytes =
      std::max({kern_layernorm_backward_scratch_bytes((int)N, C, k.sm_count),
                kern_matmul_backward_scratch_bytes((int)N, 4 * C, k.sm_count),
                kern_attention_backward_scratch_bytes(B, T, C, NH),
                kern_norm_scratch_bytes(P, k.sm_count)});
  void *scratch = NULL;
  CK(cudaMalloc(&scratch, scratch_bytes));
  float *master = dev<float>(P), *m = dev<float>(P), *v = dev<float>(P);
  float *grads = dev<float>(P), *out1 = dev<float>(1);
  floatX *params = dev<floatX>(P);
  CK(cudaMemset(v, 0, P * sizeof(float)));

  const double nc = (double)N * C;
  report("layernorm_forward",
         time_op(&k,
                 [&] {
                   return kern_layernorm_forward(&k, y, mean, rstd, x, lnw, lnb,
                                                 (int)N, C, E);
                 }),
         0, nc * 2 * 2);
  report("layernorm_backward",
         time_op(&k,
                 [&] {
                   return kern_layernorm_backward(&k, y, dw, db, scratch, x, x,
                                                  lnw, mean, rstd, (int)N, C,
                                                  E);
                 }),
         0, nc * 2 * 3);
  const double fc = 2.0 * N * C * 4 * C;
  report("matmul_forward fc (bias+gelu)",
         time_op(&k,
                 [&] {
                   return kern_matmul_forward(&k, x4, aux, x, w, bias, (int)N,
                                              C, 4 * C, E);
                 }),
         fc, 0);
  report("matmul_backward fc (dgelu, dw, dbias)",
         time_op(&k,
                 [&] {
                   return kern_matmul_backward(&k, y, dw, db, scratch, x4, x, w,
                                               aux, (int)N, C, 4 * C, E);
                 }),
         2 * fc, 0);
  /* Causal: QK^T and PV over half the T x T scores. */
  const double att = 2.0 * 2.0 * B * NH * (double)T * T * (C / NH) / 2;
  report("attention_forward",
         time_op(&k,
                 [&] {
                   return kern_attention_forward(&k, y, lse, qkv, B, T, C, NH,
                                                 E);
                 }),
         att, 0);
  report("attention_backward",
         time_op(&k,
                 [&] {
                   return kern_attention_backward(&k, dqkv, scratch, x, qkv, y,
                                                  lse, B, T, C, NH, E);
                 }),
         2.5 * att, 0);
  /* The Llama family's kernels at this width: SwiGLU of I = 2C (its
   * (N,2I) gate|up rows fit x4), GQA of 12 query heads on 4 key/value
   * heads (the (N, C + 2KVD) q|k|v rows in x4 too). */
  const int I = 2 * C, KV = 4, KVD = KV * (C / NH);
  float *cs = dev<float>((size_t)T * (C / NH) / 2);
  float *sn = dev<float>((size_t)T * (C / NH) / 2);
  report("rmsnorm_forward (residual fused)",
         time_op(&k,
                 [&] {
                   return kern_rmsnorm_forward(&k, y, x4, rstd, x, qkv, lnw,
                                               1e-5f, (int)N, C, E);
                 }),
         0, nc * 2 * 4);
  report("rmsnorm_backward",
         time_op(&k,
                 [&] {
                   return kern_rmsnorm_backward(&k, y, dw, scratch, x, x, lnw,
                                                rstd, (int)N, C, E);
                 }),
         0, nc * 2 * 3);
  report("linear_forward gate|up (C -> 2I)",
         time_op(&k,
                 [&] {
                   return kern_linear_forward(&k, aux, x, w, (int)N, C, 2 * I,
                                              E);
                 }),
         2.0 * N * C * 2 * I, 0);
  report(
      "swiglu_forward",
      time_op(&k,
              [&] { return kern_swiglu_forward(&k, qkv, x4, (int)N, I, E); }),
      0, (double)N * I * 2 * 3);
  report("swiglu_backward",
         time_op(&k,
                 [&] {
                   return kern_swiglu_backward(&k, aux, qkv, x4, (int)N, I, E);
                 }),
         0, (double)N * I * 2 * 5);
  report("rope_qkv_forward (GQA 12 on 4)",
         time_op(&k,
                 [&] {
                   return kern_rope_qkv_forward(&k, qkv, x4, cs, sn, B, T, C,
                                                NH, KV, E);
                 }),
         0, (double)N * (C + 2 * KVD + 3 * C) * 2);
  report("rope_qkv_backward (GQA 12 on 4)",
         time_op(&k,
                 [&] {
                   return kern_rope_qkv_backward(&k, x4, dqkv, cs, sn, B, T, C,
                                                 NH, KV, E);
                 }),
         0, (double)N * (C + 2 * KVD + 3 * C) * 2);
  report("fused_classifier (loss only)",
         time_op(&k,
                 [&] {
                   return kern_fused_classifier(&k, logits, losses, targets,
                                                0.0f, (int)N, V, Vp, E);
                 }),
         0, (double)N * Vp * 2);
  /* dloss tiny: the logits stay finite run after run. */
  report("fused_classifier (loss + dlogits)",
         time_op(&k,
                 [&] {
                   return kern_fused_classifier(&k, logits, losses, targets,
                                                1e-30f, (int)N, V, Vp, E);
                 }),
         0, (double)N * Vp * 2 * 2);
  report("adamw_update (124M)",
         time_op(&k,
                 [&] {
                   return kern_adamw_update(&k, master, params, m, v, grads, P,
                                            1e-4f, 0.9f, 0.95f, 0.1f, 0.05f,
                                            1e-8f, 0.1f, 1.0f, E);
                 }),
         0, (double)P * (4 * 4 + 4 * 3 + 2));
  report("lion_update (124M)",
         time_op(&k,
                 [&] {
                   return kern_lion_update(&k, master, params, m, grads, P,
                                           1e-5f, 0.9f, 0.99f, 0.1f, 1.0f, E);
                 }),
         0, (double)P * (3 * 4 + 2 * 4 + 2));
  report(
      "sum_squares (124M)",
      time_op(&k,
              [&] { return kern_sum_squares(&k, out1, scratch, grads, P, E); }),
      0, (double)P * 4);
  kern_ctx_destroy(&k);
  return 0;
}
