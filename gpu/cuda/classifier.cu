/* The fused classifier: softmax, cross-entropy and the logit gradient in
 * one kernel, never storing the probabilities (kernels.cuh). */
#include "kernels_common.cuh"

#define CLS_BLOCK 1024

/* Online softmax state: the running maximum and the sum of exp(x - max). */
struct cls_ms {
  float m, s;
};
__device__ __forceinline__ cls_ms cls_merge(cls_ms a, cls_ms b) {
  float m = fmaxf(a.m, b.m);
  /* -inf - -inf would be NaN: a side with no values adds nothing. */
  float sa = a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m);
  float sb = b.m == -INFINITY ? 0.0f : b.s * expf(b.m - m);
  return {m, sa + sb};
}

/* One block a row of logits (N,Vp): a pass for max and sum (online), the
 * states merged in a fixed tree, then, with dloss != 0, a second pass
 * writing dlogits in place. The target's logit is read before the block
 * synchronizes, so before anything is overwritten. An out-of-range target
 * gives a NaN loss (a kernel cannot return an error; the loss shows it). */
__global__ void __launch_bounds__(CLS_BLOCK)
    classifier_kernel(floatX *logits, float *losses, const int *targets,
                      float dloss, int N, int V, int Vp) {
  __shared__ float sh_m[32], sh_s[32];
  __shared__ float sh_lse;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int nwarps = blockDim.x / 32;
  for (long long row = blockIdx.x; row < N; row += gridDim.x) {
    floatX *x = logits + (size_t)row * Vp;
    const int tgt = targets[row];
    const int tgt_ok = tgt >= 0 && tgt < V;
    float xt = tgt_ok ? kc_f(x[tgt]) : 0.0f;
    cls_ms st = {-INFINITY, 0.0f};
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      float v = kc_f(x[j]);
      /* A NaN takes this branch and makes the state NaN: in the other, a
       * thread whose values are all NaN would keep m = -inf, and the
       * merge drops a side with m = -inf (a NaN logit lost, a finite
       * loss). */
      if (!(v <= st.m)) {
        st.s = st.s * expf(st.m - v) + 1.0f;
        st.m = v;
      } else {
        st.s += expf(v - st.m);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      cls_ms other = {__shfl_xor_sync(0xffffffffu, st.m, o),
                      __shfl_xor_sync(0xffffffffu, st.s, o)};
      st = cls_merge(st, other);
    }
    if (lane == 0) {
      sh_m[warp] = st.m;
      sh_s[warp] = st.s;
    }
    __syncthreads();
    if (warp == 0) {
      cls_ms w = {-INFINITY, 0.0f};
      if (lane < nwarps)
        w = {sh_m[lane], sh_s[lane]};
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        cls_ms other = {__shfl_xor_sync(0xffffffffu, w.m, o),
                        __shfl_xor_sync(0xffffffffu, w.s, o)};
        w = cls_merge(w, other);
      }
      if (lane == 0) {
        float lse = w.m + logf(w.s);
        sh_lse = lse;
        losses[row] = tgt_ok ? lse - xt : NAN;
      }
    }
    __syncthreads();
    const float lse = sh_lse;
    if (dloss != 0.0f) {
      for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float d = 0.0f;
        if (j < V) {
          float p = expf(kc_f(x[j]) - lse);
          d = dloss * (p - (j == tgt ? 1.0f : 0.0f));
        }
        x[j] = kc_x(d);
      }
    }
    /* sh_lse and sh_m/sh_s are rewritten by the next row. */
    __syncthreads();
  }
}

int kern_fused_classifier(const kern_ctx *k, floatX *logits, float *losses,
                          const int *targets, float dloss, int N, int V, int Vp,
                          char *err, size_t errlen) {
  static const char op[] = "kern_fused_classifier";
  if (N < 0 || V <= 0 || Vp < V)
    return kc_fail(err, errlen, op, "bad shape N=%d V=%d Vp=%d", N, V, Vp);
  if (N == 0)
    return 0;
  unsigned grid = (unsigned)(N < 65535 * 16 ? N : 65535 * 16);
  classifier_kernel<<<grid, CLS_BLOCK, 0, k->stream>>>(logits, losses, targets,
                                                       dloss, N, V, Vp);
  return kc_check(op, err, errlen);
}
