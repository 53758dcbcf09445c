/* The fused optimizer updates (kernels.cuh): one grid-stride kernel per
 * step of a group, FP32 master weights and moments, the BF16 copy written
 * in the same pass. Formulas and their order of operations are
 * gpu/optim/optim.c's (adamw_step, lion_step). */
#include <math.h>

#include "kernels_common.cuh"

#define OPT_BLOCK 256

/* keep = 1 - lr*wd (1: no decay), step = lr / (1 - b1^t),
 * bc2_sqrt = sqrt(1 - b2^t). */
__global__ void adamw_kernel(float *master, floatX *params, float *m, float *v,
                             const float *grads, size_t n, float b1, float b1m,
                             float b2, float b2m, float step, float bc2_sqrt,
                             float eps, float keep, float grad_scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float g = grads[i] * grad_scale;
    const float p = master[i] * keep;
    const float mi = b1 * m[i] + b1m * g;
    const float vi = b2 * v[i] + b2m * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    const float np = p - step * mi / denom;
    master[i] = np;
    params[i] = kc_x(np);
  }
}

__global__ void lion_kernel(float *master, floatX *params, float *m,
                            const float *grads, size_t n, float lr, float b1,
                            float b1m, float b2, float b2m, float keep,
                            float grad_scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float g = grads[i] * grad_scale;
    const float p = master[i] * keep;
    const float c = b1 * m[i] + b1m * g;
    const float sgn = (float)((c > 0.0f) - (c < 0.0f)); /* sign(0) = 0 */
    const float np = p - lr * sgn;
    m[i] = b2 * m[i] + b2m * g;
    master[i] = np;
    params[i] = kc_x(np);
  }
}

int kern_adamw_update(const kern_ctx *k, float *master, floatX *params,
                      float *m, float *v, const float *grads, size_t n,
                      float lr, float beta1, float beta2, float b1_corr,
                      float b2_corr, float eps, float weight_decay,
                      float grad_scale, char *err, size_t errlen) {
  static const char op[] = "kern_adamw_update";
  if (!(b1_corr > 0.0f) || !(b2_corr > 0.0f))
    return kc_fail(err, errlen, op,
                   "bias corrections must be > 0 (b1_corr=%g b2_corr=%g: "
                   "step t starts at 1)",
                   (double)b1_corr, (double)b2_corr);
  if (n == 0)
    return 0;
  /* The host-side constants in double, then float, as optim.c does. */
  const float b1m = (float)(1.0 - (double)beta1);
  const float b2m = (float)(1.0 - (double)beta2);
  const float step = (float)((double)lr / (double)b1_corr);
  const float bc2_sqrt = (float)sqrt((double)b2_corr);
  const float keep = (float)(1.0 - (double)lr * (double)weight_decay);
  adamw_kernel<<<kc_grid(n, OPT_BLOCK, k->sm_count), OPT_BLOCK, 0,
                 k->stream>>>(master, params, m, v, grads, n, beta1, b1m,
                              beta2, b2m, step, bc2_sqrt, eps, keep,
                              grad_scale);
  return kc_check(op, err, errlen);
}

int kern_lion_update(const kern_ctx *k, float *master, floatX *params,
                     float *m, const float *grads, size_t n, float lr,
                     float beta1, float beta2, float weight_decay,
                     float grad_scale, char *err, size_t errlen) {
  if (n == 0)
    return 0;
  const float b1m = (float)(1.0 - (double)beta1);
  const float b2m = (float)(1.0 - (double)beta2);
  const float keep = (float)(1.0 - (double)lr * (double)weight_decay);
  lion_kernel<<<kc_grid(n, OPT_BLOCK, k->sm_count), OPT_BLOCK, 0, k->stream>>>(
      master, params, m, grads, n, lr, beta1, b1m, beta2, b2m, keep,
      grad_scale);
  return kc_check("kern_lion_update", err, errlen);
}
