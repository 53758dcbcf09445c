/*
 * cuBLASLt on the CPU, for the emulator (emu.h): the calls of
 * gpu/cuda/matmul_lt.cu and gpt_cuda.cu's tied head, under their real
 * names, so that those files run unchanged on runtime.cpp's device.
 *
 * What it computes is cublasLtMatmul as NVIDIA's documentation gives it:
 * column-major matrices, D = alpha op(A) op(B) + beta C, then the
 * epilogue: BIAS adds a vector of D's rows to every column; GELU_AUX
 * (_BIAS) stores the GELU input (after the bias) into the aux matrix, in
 * D's type, and GELU (tanh approximation) into D; DGELU multiplies the
 * product by GELU's derivative at the aux matrix's values. The product
 * in FP32 (OpenBLAS's sgemm on the BF16 inputs widened), the epilogue in
 * FP32, rounded to D's type once at the end. The arguments are held to what the library demands, each failure
 * returning its documented status: A and B BF16, C and D of one type
 * (BF16 or FP32), FP32 compute and scale; shapes that agree; leading
 * dimensions no less than the rows; the aux leading dimension a multiple
 * of 8, no less than D's rows; and each matrix, the bias and the aux
 * matrix inside one device allocation (runtime.cpp), so an overrun of a
 * carved buffer shows as an error, as an illegal address would.
 *
 * So the emulated engine tests everything around the products (shapes,
 * strides, offsets, which epilogue, the fallbacks), against this reading
 * of the documentation; the real library's own behaviour is tested only
 * by kernel_check on a GPU. Not modelled: algorithms and their
 * alignment rules, workspace use, split-K, batched layouts.
 */
#include "emu.h"

#include <cublasLt.h>

#include <cblas.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <vector>

struct emu_lt_desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  void *aux = nullptr;
  int64_t aux_ld = 0;
};
struct emu_lt_layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct emu_lt_pref {
  int unused;
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new char[1]);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete[] reinterpret_cast<char *>(h);
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
const char *cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
  default: return "an internal operation failed";
  }
}

/* An argument the library refuses: an EMU ERROR (the real library would
 * only return the status) so that the test sees which. */
#define invalid(...) (emu_error("cuBLASLt: " __VA_ARGS__), CUBLAS_STATUS_INVALID_VALUE)

/* ---- Descriptors ---- */
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
                                        cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  auto *p = new emu_lt_desc;
  p->compute = compute;
  p->scale = scale;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<emu_lt_desc *>(d);
  return CUBLAS_STATUS_SUCCESS;
}

/* Copies the attribute's value when its size is the one documented. */
template <class T>
static cublasStatus_t set(T *dst, const void *buf, size_t n) {
  if (!buf || n != sizeof(T))
    return invalid("attribute of %zu bytes where %zu are expected", n,
                   sizeof(T));
  memcpy(dst, buf, n);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t n) {
  auto *p = reinterpret_cast<emu_lt_desc *>(d);
  switch (a) {
  case CUBLASLT_MATMUL_DESC_TRANSA: return set(&p->ta, buf, n);
  case CUBLASLT_MATMUL_DESC_TRANSB: return set(&p->tb, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&p->epi, buf, n);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(&p->bias, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(&p->aux, buf, n);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(&p->aux_ld, buf, n);
  default:
    return invalid("matmul descriptor attribute %d is not emulated", (int)a);
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  auto *p = new emu_lt_layout{type, rows, cols, ld};
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<emu_lt_layout *>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(new emu_lt_pref{});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete reinterpret_cast<emu_lt_pref *>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                     cublasLtMatmulPreferenceAttributes_t a,
                                     const void *buf, size_t n) {
  switch (a) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: {
    uint64_t v;
    return set(&v, buf, n);
  }
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: {
    uint32_t v;
    return set(&v, buf, n);
  }
  default:
    return invalid("preference attribute %d is not emulated", (int)a);
  }
}

/* ---- The product ---- */
static const emu_lt_desc *D_(cublasLtMatmulDesc_t d) {
  return reinterpret_cast<const emu_lt_desc *>(d);
}
static const emu_lt_layout *L_(cublasLtMatrixLayout_t l) {
  return reinterpret_cast<const emu_lt_layout *>(l);
}

static bool epilogue_known(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
static bool epilogue_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static bool epilogue_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

static size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* Bytes a column-major rows x cols matrix with leading dimension ld
 * spans. */
static size_t extent(const emu_lt_layout *l, size_t elem) {
  return ((size_t)l->ld * (l->cols - 1) + l->rows) * elem;
}

/* The problem's m, n, k when the descriptors agree; a status otherwise. */
static cublasStatus_t check(const emu_lt_desc *d, const emu_lt_layout *a,
                            const emu_lt_layout *b, const emu_lt_layout *c,
                            const emu_lt_layout *dd, uint64_t *m, uint64_t *n,
                            uint64_t *k) {
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
    return invalid("compute type %d, scale type %d: only FP32 is emulated",
                   (int)d->compute, (int)d->scale);
  if (!epilogue_known(d->epi))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (a->type != CUDA_R_16BF || b->type != CUDA_R_16BF ||
      (dd->type != CUDA_R_16BF && dd->type != CUDA_R_32F) ||
      c->type != dd->type)
    return invalid("types A %d B %d C %d D %d: A and B BF16, C and D BF16 or "
                   "FP32 alike",
                   (int)a->type, (int)b->type, (int)c->type, (int)dd->type);
  for (const emu_lt_layout *l : {a, b, c, dd})
    if (l->rows == 0 || l->cols == 0 || l->ld < (int64_t)l->rows)
      return invalid("layout %llu x %llu with leading dimension %lld",
                     (unsigned long long)l->rows, (unsigned long long)l->cols,
                     (long long)l->ld);
  *m = dd->rows;
  *n = dd->cols;
  uint64_t am = d->ta == CUBLAS_OP_T ? a->cols : a->rows;
  *k = d->ta == CUBLAS_OP_T ? a->rows : a->cols;
  uint64_t bk = d->tb == CUBLAS_OP_T ? b->cols : b->rows;
  uint64_t bn = d->tb == CUBLAS_OP_T ? b->rows : b->cols;
  if (am != *m || bn != *n || bk != *k || c->rows != *m || c->cols != *n)
    return invalid("shapes: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x "
                   "%llu, D %llu x %llu do not agree",
                   (unsigned long long)am, (unsigned long long)*k,
                   (unsigned long long)bk, (unsigned long long)bn,
                   (unsigned long long)c->rows, (unsigned long long)c->cols,
                   (unsigned long long)*m, (unsigned long long)*n);
  if (epilogue_bias(d->epi) && !d->bias)
    return invalid("bias epilogue without a bias pointer");
  if (epilogue_aux(d->epi) &&
      (!d->aux || d->aux_ld < (int64_t)*m || d->aux_ld % 8 != 0))
    return invalid("GELU aux pointer %p with leading dimension %lld (must be "
                   "a multiple of 8, >= %llu rows)",
                   d->aux, (long long)d->aux_ld, (unsigned long long)*m);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
    cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t results[], int *count) {
  if (requested <= 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m, n, k;
  cublasStatus_t s = check(D_(desc), L_(a), L_(b), L_(c), L_(d), &m, &n, &k);
  if (s != CUBLAS_STATUS_SUCCESS)
    return s;
  memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* GELU, tanh approximation, and its derivative. */
static float gelu(float x) {
  const float s = 0.7978845608028654f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + std::tanh(s * (x + 0.044715f * x * x * x)));
}
static float gelu_grad(float x) {
  const float s = 0.7978845608028654f;
  float t = std::tanh(s * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * s * (1.0f + 3.0f * 0.044715f * x * x);
}

static float load(const void *p, cudaDataType_t t, size_t i) {
  return t == CUDA_R_32F ? static_cast<const float *>(p)[i]
                         : __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
}
static void store(void *p, cudaDataType_t t, size_t i, float v) {
  if (t == CUDA_R_32F)
    static_cast<float *>(p)[i] = v;
  else
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                              const void *alpha_p, const void *A,
                              cublasLtMatrixLayout_t al, const void *B,
                              cublasLtMatrixLayout_t bl, const void *beta_p,
                              const void *C, cublasLtMatrixLayout_t cl, void *D,
                              cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *, void *, size_t,
                              cudaStream_t) {
  const emu_lt_desc *d = D_(desc);
  const emu_lt_layout *a = L_(al), *b = L_(bl), *c = L_(cl), *dd = L_(dl);
  uint64_t m, n, k;
  cublasStatus_t s = check(d, a, b, c, dd, &m, &n, &k);
  if (s != CUBLAS_STATUS_SUCCESS)
    return s;
  const size_t ed = type_bytes(dd->type);
  if (!emu_device_range(A, extent(a, 2), "cublasLtMatmul A") ||
      !emu_device_range(B, extent(b, 2), "cublasLtMatmul B") ||
      !emu_device_range(C, extent(c, ed), "cublasLtMatmul C") ||
      !emu_device_range(D, extent(dd, ed), "cublasLtMatmul D") ||
      (epilogue_bias(d->epi) &&
       !emu_device_range(d->bias, m * ed, "cublasLtMatmul bias")) ||
      (epilogue_aux(d->epi) &&
       !emu_device_range(d->aux, ((size_t)d->aux_ld * (n - 1) + m) * ed,
                         "cublasLtMatmul GELU aux")))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  const float alpha = *static_cast<const float *>(alpha_p);
  const float beta = *static_cast<const float *>(beta_p);
  /* op(A) and op(B) in FP32 as OpenBLAS takes them (column-major, with
   * their own leading dimensions), the product P = op(A) op(B) in FP32. */
  std::vector<float> Af(extent(a, 1)), Bf(extent(b, 1)), P(m * n);
  const auto *Ab = static_cast<const __nv_bfloat16 *>(A);
  const auto *Bb = static_cast<const __nv_bfloat16 *>(B);
  for (size_t i = 0; i < Af.size(); i++)
    Af[i] = __bfloat162float(Ab[i]);
  for (size_t i = 0; i < Bf.size(); i++)
    Bf[i] = __bfloat162float(Bb[i]);
  /* On one OpenBLAS thread, whatever the host program set (the train
   * stage sets one per CPU for its CPU engine): the emulator is one
   * thread, and a second OpenBLAS thread did little of these small
   * products but spun on sched_yield between them, a quarter of the
   * emulated train tests' CPU time, taken from the test beside them. */
  const int blas_threads = openblas_get_num_threads();
  if (blas_threads != 1)
    openblas_set_num_threads(1);
  cblas_sgemm(CblasColMajor, d->ta == CUBLAS_OP_T ? CblasTrans : CblasNoTrans,
              d->tb == CUBLAS_OP_T ? CblasTrans : CblasNoTrans, (int)m, (int)n,
              (int)k, alpha, Af.data(), (int)a->ld, Bf.data(), (int)b->ld, 0.0f,
              P.data(), (int)m);
  if (blas_threads != 1)
    openblas_set_num_threads(blas_threads);
  /* D may be C: each element of C is read once, before its D is written. */
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      float v = P[i + j * m];
      if (beta != 0.0f)
        v += beta * load(C, c->type, i + j * c->ld);
      if (epilogue_bias(d->epi))
        v += load(d->bias, dd->type, i);
      size_t x = i + j * (size_t)d->aux_ld;
      if (d->epi == CUBLASLT_EPILOGUE_GELU_AUX ||
          d->epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        store(d->aux, dd->type, x, v);
        v = gelu(v);
      } else if (d->epi == CUBLASLT_EPILOGUE_DGELU) {
        v *= gelu_grad(load(d->aux, dd->type, x));
      }
      store(D, dd->type, i + j * dd->ld, v);
    }
  return CUBLAS_STATUS_SUCCESS;
}
