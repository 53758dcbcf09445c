/* The vocabulary-parallel cross-entropy of a tensor shard's logits
 * (kernels.cuh; gpu/tensor/tensor.h has the scheme): the three kernels
 * between which the caller all-gathers the row maxima and all-reduces
 * the sums, so that the (N, Vp) logits are never gathered. One block of
 * VP_BLOCK threads a row, the same reduction tree every run (kc_block_
 * sum), so the ranks' figures are deterministic. */
#include "kernels_common.cuh"

#define VP_BLOCK 256

__global__ void __launch_bounds__(VP_BLOCK)
    vp_row_max_kernel(float *maxes, const floatX *logits, int N, int Vv,
                      int Vl) {
  __shared__ float sh[32];
  for (int row = blockIdx.x; row < N; row += gridDim.x) {
    const floatX *x = logits + (size_t)row * Vl;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < Vv; j += blockDim.x)
      m = fmaxf(m, kc_f(x[j]));
    m = kc_block_max(m, sh);
    if (threadIdx.x == 0)
      maxes[row] = m;
  }
}

__global__ void __launch_bounds__(VP_BLOCK)
    vp_row_sums_kernel(float *gmax, float *red, const float *maxes_all,
                       const floatX *logits, const int *targets, int lo, int N,
                       int Vv, int Vl, int ranks) {
  __shared__ float sh[32];
  for (int row = blockIdx.x; row < N; row += gridDim.x) {
    const floatX *x = logits + (size_t)row * Vl;
    float m = maxes_all[row];
    for (int r = 1; r < ranks; r++)
      m = fmaxf(m, maxes_all[(size_t)r * N + row]);
    float s = 0.0f;
    for (int j = threadIdx.x; j < Vv; j += blockDim.x)
      s += expf(kc_f(x[j]) - m);
    s = kc_block_sum(s, sh);
    if (threadIdx.x == 0) {
      const int t = targets[row] - lo;
      gmax[row] = m;
      red[row] = s;
      red[N + row] = t >= 0 && t < Vv ? kc_f(x[t]) : 0.0f;
    }
  }
}

__global__ void vp_classifier_kernel(floatX *logits, float *losses,
                                     const float *gmax, const float *red,
                                     const int *targets, int lo, float dloss,
                                     int N, int Vv, int Vl) {
  for (int row = blockIdx.x; row < N; row += gridDim.x) {
    const float lse = gmax[row] + logf(red[row]);
    if (threadIdx.x == 0)
      losses[row] = lse - red[N + row];
    if (dloss == 0.0f)
      continue;
    floatX *x = logits + (size_t)row * Vl;
    const int t = targets[row] - lo;
    for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
      float d = 0.0f;
      if (j < Vv)
        d = dloss * (expf(kc_f(x[j]) - lse) - (j == t ? 1.0f : 0.0f));
      x[j] = kc_x(d);
    }
  }
}

static int vp_shape(const char *op, int N, int Vv, int Vl, char *err,
                    size_t errlen) {
  if (N < 0 || Vv < 0 || Vl < Vv || Vl < 1)
    return kc_fail(err, errlen, op, "bad shape N=%d Vv=%d Vl=%d", N, Vv, Vl);
  return 0;
}

static unsigned vp_grid(int N) {
  return (unsigned)(N < 65535 * 16 ? N : 65535 * 16);
}

int kern_vp_row_max(const kern_ctx *k, float *maxes, const floatX *logits,
                    int N, int Vv, int Vl, char *err, size_t errlen) {
  static const char op[] = "kern_vp_row_max";
  if (vp_shape(op, N, Vv, Vl, err, errlen) != 0)
    return -1;
  if (N == 0)
    return 0;
  vp_row_max_kernel<<<vp_grid(N), VP_BLOCK, 0, k->stream>>>(maxes, logits, N,
                                                            Vv, Vl);
  return kc_check(op, err, errlen);
}

int kern_vp_row_sums(const kern_ctx *k, float *gmax, float *red,
                     const float *maxes_all, const floatX *logits,
                     const int *targets, int lo, int N, int Vv, int Vl,
                     int ranks, char *err, size_t errlen) {
  static const char op[] = "kern_vp_row_sums";
  if (vp_shape(op, N, Vv, Vl, err, errlen) != 0)
    return -1;
  if (ranks < 1)
    return kc_fail(err, errlen, op, "%d ranks", ranks);
  if (N == 0)
    return 0;
  vp_row_sums_kernel<<<vp_grid(N), VP_BLOCK, 0, k->stream>>>(
      gmax, red, maxes_all, logits, targets, lo, N, Vv, Vl, ranks);
  return kc_check(op, err, errlen);
}

int kern_vp_classifier(const kern_ctx *k, floatX *logits, float *losses,
                       const float *gmax, const float *red, const int *targets,
                       int lo, float dloss, int N, int Vv, int Vl, char *err,
                       size_t errlen) {
  static const char op[] = "kern_vp_classifier";
  if (vp_shape(op, N, Vv, Vl, err, errlen) != 0)
    return -1;
  if (N == 0)
    return 0;
  vp_classifier_kernel<<<vp_grid(N), VP_BLOCK, 0, k->stream>>>(
      logits, losses, gmax, red, targets, lo, dloss, N, Vv, Vl);
  return kc_check(op, err, errlen);
}
