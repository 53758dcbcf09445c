/* The fused optimizer updates (kernels.cuh): one grid-stride kernel per
 * step of a group, FP32 master weights and moments, the BF16 copy written
 * in the same pass.
 *
 * Formulas, constants and order of operations are gpu/optim/optim.c's
 * (adamw_step, lion_step), and every operation is spelled as an
 * IEEE-rounded intrinsic (__fmul_rn, ...) so that nvcc does not contract
 * them into FMAs: the GPU update is the CPU's to the bit (AdamW up to the
 * caller's rounding of b1_corr, b2_corr). That matters most for Lion,
 * whose sign(c) would otherwise flip where c is near 0, and for a run
 * that resumes on the other backend. */
#include <math.h>

#include "kernels_common.cuh"
#include "optim/optim.h"

#define OPT_BLOCK 256

/* keep = 1 - lr*wd (1: no decay), step = lr / (1 - b1^t),
 * bc2_sqrt = sqrt(1 - b2^t). */
__global__ void adamw_kernel(float *master, floatX *params, float *m, float *v,
                             const float *grads, size_t n, float b1, float b1m,
                             float b2, float b2m, float step, float bc2_sqrt,
                             float eps, float keep, int decay,
                             float grad_scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float g = __fmul_rn(grads[i], grad_scale);
    const float p = decay ? __fmul_rn(master[i], keep) : master[i];
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(b1m, g));
    const float vi =
        __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(b2m, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    const float np = __fsub_rn(p, __fdiv_rn(__fmul_rn(step, mi), denom));
    master[i] = np;
    params[i] = kc_x(np);
  }
}

__global__ void lion_kernel(float *master, floatX *params, float *m,
                            const float *grads, size_t n, float lr, float b1,
                            float b1m, float b2, float b2m, float keep,
                            int decay, float grad_scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float g = __fmul_rn(grads[i], grad_scale);
    const float p = decay ? __fmul_rn(master[i], keep) : master[i];
    const float c = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(b1m, g));
    const float sgn = (float)((c > 0.0f) - (c < 0.0f)); /* sign(0) = 0 */
    const float np = __fsub_rn(p, __fmul_rn(lr, sgn));
    m[i] = __fadd_rn(__fmul_rn(b2, m[i]), __fmul_rn(b2m, g));
    master[i] = np;
    params[i] = kc_x(np);
  }
}

/* optim.c's host-side constants: the hyperparameters as written, in
 * double, then rounded once to float. */
struct opt_consts {
  float b1, b1m, b2, b2m, keep;
  int decay;
};
static opt_consts opt_constants(float lr, float beta1, float beta2,
                                float weight_decay) {
  const double b1 = optim_as_written(beta1), b2 = optim_as_written(beta2);
  const double wd = optim_as_written(weight_decay);
  opt_consts c;
  c.b1 = (float)b1;
  c.b1m = (float)(1.0 - b1);
  c.b2 = (float)b2;
  c.b2m = (float)(1.0 - b2);
  c.keep = (float)(1.0 - (double)lr * wd);
  c.decay = weight_decay != 0.0f;
  return c;
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
                   "the step count t starts at 1)",
                   (double)b1_corr, (double)b2_corr);
  if (n == 0)
    return 0;
  const opt_consts c = opt_constants(lr, beta1, beta2, weight_decay);
  const float step = (float)((double)lr / (double)b1_corr);
  const float bc2_sqrt = (float)sqrt((double)b2_corr);
  adamw_kernel<<<kc_grid(n, OPT_BLOCK, k->sm_count), OPT_BLOCK, 0, k->stream>>>(
      master, params, m, v, grads, n, c.b1, c.b1m, c.b2, c.b2m, step, bc2_sqrt,
      eps, c.keep, c.decay, grad_scale);
  return kc_check(op, err, errlen);
}

int kern_lion_update(const kern_ctx *k, float *master, floatX *params, float *m,
                     const float *grads, size_t n, float lr, float beta1,
                     float beta2, float weight_decay, float grad_scale,
                     char *err, size_t errlen) {
  if (n == 0)
    return 0;
  const opt_consts c = opt_constants(lr, beta1, beta2, weight_decay);
  lion_kernel<<<kc_grid(n, OPT_BLOCK, k->sm_count), OPT_BLOCK, 0, k->stream>>>(
      master, params, m, grads, n, lr, c.b1, c.b1m, c.b2, c.b2m, c.keep,
      c.decay, grad_scale);
  return kc_check("kern_lion_update", err, errlen);
}
