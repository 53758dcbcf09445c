/*
 * attention.cuh: what the two causal-attention implementations share:
 * attention.cu (FP32 math on CUDA cores, any head size up to
 * ATT_HS_MAX; the launchers of kernels.cuh) and attention_tc.cu (BF16
 * products on the tensor cores, head sizes that are multiples of 16),
 * which the launchers choose (att_use_tc). Not part of kernels.cuh's API.
 */
#ifndef DAGRUN_CUDA_ATTENTION_CUH
#define DAGRUN_CUDA_ATTENTION_CUH

#include "kernels_common.cuh"

#define ATT_HS_MAX 128

/* Grid: x = (batch, head), B*NH blocks (gridDim.x allows 2^31-1, where y
 * and z stop at 65535); y = the block's tile of rows. Blocks go to the
 * SMs in linear order, x fastest: the forward and dq kernels take their
 * tiles last-first (att_tile_rev) so that the long causal rows start
 * first and the short ones fill the tail; in dk/dv the first key tiles are
 * the long ones already. */
__device__ __forceinline__ int att_tile_rev(void) {
  return (int)(gridDim.y - 1 - blockIdx.y);
}

/* What each kernel derives from its block's (batch, head). */
struct att_head {
  int hs, ld, b, h, bh;
  size_t C3;
  const floatX *qkv; /* this (b, h)'s q at t=0; k at +C, v at +2C */
  float scale;       /* 1/sqrt(hs), as gpt_cpu.c */
};
__device__ __forceinline__ att_head att_head_of(const floatX *qkv, int T, int C,
                                                int NH) {
  att_head a;
  a.hs = C / NH;
  a.ld = a.hs + 1;
  a.bh = blockIdx.x;
  a.b = a.bh / NH;
  a.h = a.bh % NH;
  a.C3 = 3 * (size_t)C;
  a.qkv = qkv + (size_t)a.b * T * a.C3 + (size_t)a.h * a.hs;
  a.scale = 1.0f / sqrtf((float)a.hs);
  return a;
}

/* Launches kern with threads a block and smem bytes of dynamic shared
 * memory, raising the kernel's limit first where it needs more than the
 * default 48 KiB. */
template <typename... Args>
static int att_launch(void (*kern)(Args...), dim3 grid, int threads,
                      size_t smem, const kern_ctx *k, const char *op,
                      char *err, size_t errlen, Args... args) {
  if (smem > 48 * 1024 &&
      kc_cuda(cudaFuncSetAttribute(
                  kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              op, "cudaFuncSetAttribute (shared memory)", err, errlen))
    return -1;
  kern<<<grid, threads, smem, k->stream>>>(args...);
  return kc_check(op, err, errlen);
}

/* attention_tc.cu's passes, for head sizes that are multiples of 16
 * (shapes checked by the caller). The backward takes Dsum (B,NH,T) =
 * rowsum(dout * out), made by the caller, and dq_acc, B*T*C floats of
 * scratch for the one-kernel backward (kern_attention). 0, or -1 with
 * err. */
int att_tc_forward(const kern_ctx *k, floatX *out, float *lse,
                   const floatX *qkv, int B, int T, int C, int NH,
                   const char *op, char *err, size_t errlen);
int att_tc_backward(const kern_ctx *k, floatX *dqkv, float *dq_acc,
                    const float *Dsum, const floatX *dout, const floatX *qkv,
                    const float *lse, int B, int T, int C, int NH,
                    const char *op, char *err, size_t errlen);

/* attention_cudnn.cu: cuDNN's fused flash attention (kernels.cuh's
 * KERN_ATT_CUDNN, and the default's prepared shapes), on the same
 * tensors as ours: qkv (B,T,3C), out (B,T,C), lse (B,NH,T) natural-log
 * log-sum-exp of the scaled scores, dqkv (B,T,3C). Head sizes that are
 * multiples of 8. */
struct att_cudnn;
/* Loads libcudnn.so.9 and makes its handle on stream. 0, or -1 with why
 * (no cuDNN on the machine or in the build, no device). */
int att_cudnn_open(struct att_cudnn **out, cudaStream_t stream, char *why,
                   size_t whylen);
void att_cudnn_close(struct att_cudnn *c); /* NULL is a no-op */
size_t att_cudnn_version(const struct att_cudnn *c); /* e.g. 91900 */
/* The device memory its plans took (beside the caller's scratch). */
size_t att_cudnn_workspace_bytes(const struct att_cudnn *c);
/* Builds both plans of a shape (cuDNN compiles their kernels: seconds).
 * 0, or -1 with err where cuDNN refuses the shape. */
int att_cudnn_prepare(struct att_cudnn *c, int B, int T, int C, int NH,
                      char *err, size_t errlen);
/* 1 if both plans of the shape are built. */
int att_cudnn_ready(const struct att_cudnn *c, int B, int T, int C, int NH);
/* The passes, building the plan on first use. The backward takes the
 * caller's scratch for its two FP32 buffers: dq_acc (B*T*C floats, dq
 * accumulated with atomics: not deterministic) and softmax_sum (B*NH*T
 * floats, rowsum(dout * out)). */
int att_cudnn_forward(struct att_cudnn *c, floatX *out, float *lse,
                      const floatX *qkv, int B, int T, int C, int NH,
                      const char *op, char *err, size_t errlen);
int att_cudnn_backward(struct att_cudnn *c, floatX *dqkv, float *dq_acc,
                       float *softmax_sum, const floatX *dout,
                       const floatX *qkv, const floatX *out, const float *lse,
                       int B, int T, int C, int NH, const char *op, char *err,
                       size_t errlen);

#endif /* DAGRUN_CUDA_ATTENTION_CUH */
