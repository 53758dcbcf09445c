/*
 * kern_ctx: the stream, cuBLASLt handle and workspace every launcher uses;
 * kernels.cuh states the contract.
 *
 * One context per engine, made once: the stream is non-blocking so the
 * engine's work never waits on the legacy default stream, and the
 * cuBLASLt workspace is allocated here once rather than per product.
 * The environment variable DAGRUN_CUDA_ATTENTION (tc, cudnn, fp32,
 * tc-sync, tc-fused: kern_attention) is read here, once, so that every launch of
 * one engine takes the same attention path.
 */
#include "attention.cuh"
#include "kernels_common.cuh"

#include <stdlib.h>

#define KC_LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define KC_COLSUM_DONE_BYTES (KC_COLSUM_MAX_GROUPS * sizeof(unsigned))

int kern_ctx_init(kern_ctx *k, int deterministic, char *err, size_t errlen) {
  static const char op[] = "kern_ctx_init";
  memset(k, 0, sizeof *k);
  k->deterministic = deterministic;
  const char *att = getenv("DAGRUN_CUDA_ATTENTION");
  int want_cudnn = 0;
  if (!att || !*att)
    k->attention = KERN_ATT_TC;
  else if (strcmp(att, "tc") == 0)
    k->attention = KERN_ATT_TC, k->cudnn_off = 1;
  else if (strcmp(att, "cudnn") == 0)
    want_cudnn = 1;
  else if (strcmp(att, "fp32") == 0)
    k->attention = KERN_ATT_FP32;
  else if (strcmp(att, "tc-sync") == 0)
    k->attention = KERN_ATT_TC_SYNC;
  else if (strcmp(att, "tc-fused") == 0)
    k->attention = KERN_ATT_TC_FUSED;
  else /* a misspelt name would otherwise time the default kernels */
    return kc_fail(err, errlen, op,
                   "DAGRUN_CUDA_ATTENTION=%s: not one of tc, cudnn, fp32, "
                   "tc-sync, tc-fused (unset: the default: tc, and cuDNN "
                   "for the shapes an engine readies)",
                   att);
  int dev = 0;
  if (kc_cuda(cudaGetDevice(&dev), op, "cudaGetDevice", err, errlen) ||
      kc_cuda(cudaDeviceGetAttribute(&k->sm_count,
                                     cudaDevAttrMultiProcessorCount, dev),
              op, "cudaDeviceGetAttribute", err, errlen) ||
      kc_cuda(cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking), op,
              "cudaStreamCreateWithFlags", err, errlen))
    goto fail;
  {
    cublasStatus_t st = cublasLtCreate(&k->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
      k->lt = NULL;
      kc_fail(err, errlen, op, "cublasLtCreate: %s", cublasLtGetStatusName(st));
      goto fail;
    }
  }
  /* One allocation for both: a second would take a 2 MiB page of its own
   * for 4 KiB. */
  if (kc_cuda(cudaMalloc(&k->lt_workspace,
                         KC_LT_WORKSPACE_BYTES + KC_COLSUM_DONE_BYTES),
              op, "cudaMalloc of the 32 MiB cuBLASLt workspace", err, errlen)) {
    k->lt_workspace = NULL;
    goto fail;
  }
  k->lt_workspace_bytes = KC_LT_WORKSPACE_BYTES;
  k->colsum_done =
      (unsigned *)((char *)k->lt_workspace + KC_LT_WORKSPACE_BYTES);
  /* On the stream: the first column sums are queued after it. */
  if (kc_cuda(
          cudaMemsetAsync(k->colsum_done, 0, KC_COLSUM_DONE_BYTES, k->stream),
          op, "cudaMemsetAsync of the column sums' counters", err, errlen))
    goto fail;
  if (want_cudnn && kern_attention_use_cudnn(k, err, errlen))
    goto fail;
  return 0;
fail:
  kern_ctx_destroy(k);
  return -1;
}

void kern_ctx_destroy(kern_ctx *k) {
  if (!k)
    return;
  /* Errors are ignored here: a destroy has nobody to report to, and the
   * process is usually ending. */
  if (k->stream)
    (void)cudaStreamSynchronize(k->stream);
  att_cudnn_close(k->cudnn);
  if (k->lt_workspace)
    (void)cudaFree(k->lt_workspace);
  if (k->lt)
    (void)cublasLtDestroy(k->lt);
  if (k->stream)
    (void)cudaStreamDestroy(k->stream);
  int det = k->deterministic;
  memset(k, 0, sizeof *k);
  k->deterministic = det;
}
