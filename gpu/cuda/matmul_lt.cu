/*
 * Matrix products through cuBLASLt (kernels.cuh's kern_matmul_*).
 *
 * Layout. The engine keeps matrices row-major and weights (in, out):
 * y (N,OC) = x (N,C) W (C,OC). cuBLASLt is column-major, and a row-major
 * (R,K) array read column-major is its transpose (K,R) with ld K. So:
 *
 *   forward  y^T (OC,N) = W^T (OC,C) x^T (C,N):
 *            A = W as stored (OC x C, ld OC), op N; B = x (C x N, ld C),
 *            op N; D = y (OC x N, ld OC); m=OC n=N k=C. The bias epilogue
 *            adds a vector of D's m rows: one value per output channel.
 *   dinp     dx^T (C,N) = W (C,OC) dy^T (OC,N):
 *            A = W as stored (OC x C, ld OC), op T; B = dy (OC x N, ld OC),
 *            op N; D = dx (C x N, ld C); m=C n=N k=OC.
 *   dw       dW^T (OC,C) += dy^T (OC,N) x (N,C):
 *            A = dy (OC x N, ld OC), op N; B = x (C x N, ld C), op T;
 *            D = C = dW (OC x C, ld OC), FP32, beta 1; m=OC n=C k=N.
 *
 * Types: A/B BF16, compute CUBLAS_COMPUTE_32F with FP32 scale; D BF16
 * for y and dx, FP32 for dW (a combination cublasLtMatmul lists: A/B
 * CUDA_R_16BF, C/D CUDA_R_32F). Bias and the GELU aux matrix take D's
 * type (BF16), cuBLASLt's default, so their type attributes stay unset.
 * The GELU aux leading dimension must be a multiple of 8.
 *
 * Fallbacks: where the GELU aux leading dimension is not a multiple of 8,
 * or cuBLASLt has no algorithm for the GELU_AUX(_BIAS) or DGELU epilogue
 * (its heuristic finds none), the product runs without it and GELU (or its
 * gradient) runs as its own kernel: the same result, one more pass over memory.
 * The environment variable DAGRUN_CUDA_NO_GELU_EPILOGUE=1 forces that path
 * (tests).
 *
 * nn.Linear's weights (the Llama family's, stored (OC, C): y = x W^T),
 * kern_linear_*: the same products with W's op flipped:
 *   forward  y^T (OC,N) = W (OC,C) x^T: A = W (C x OC, ld C), op T.
 *   dinp     dx^T (C,N) = W^T (C,OC) dy^T: A = W (C x OC, ld C), op N.
 *   dw       dW^T (C,OC) += x^T (C,N) dy (N,OC): A = x (C x N, ld C),
 *            op N; B = dy (OC x N, ld OC), op T; D = dW (C x OC, ld C).
 *
 * The bias gradient is kc_colsum (layernorm.cu): FP32, fixed order.
 * Determinism: cuBLAS documents bit-wise identical results from run to
 * run for the same problem on the same architecture and SM count.
 */
#include <stdlib.h>

#include "kernels_common.cuh"

typedef struct lt_mm {
  int m, n, k;
  int ta, tb; /* op T on A, B */
  const floatX *A, *B;
  int lda, ldb;
  void *D; /* BF16, or FP32 when d_f32 */
  int ldd;
  int d_f32; /* D (and C) FP32, beta 1: accumulate */
  cublasLtEpilogue_t epi;
  const floatX *bias; /* BIAS epilogues */
  floatX *aux;        /* GELU_AUX / DGELU epilogues */
  int64_t aux_ld;
} lt_mm;

#define LT_TRY(call)                                                           \
  do {                                                                         \
    cublasStatus_t st_ = (call);                                               \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                        \
      kc_fail(err, errlen, op, "%s: %s", #call, cublasLtGetStatusName(st_));   \
      goto done;                                                               \
    }                                                                          \
  } while (0)

/* The alignment of p in bytes, up to cuBLASLt's default assumption of
 * 256: its heuristic would otherwise pick algorithms that need 256-byte
 * aligned matrices, and a caller may pass a slice of a larger buffer. */
static uint32_t lt_alignment(const void *p) {
  uint32_t a = 256;
  while (a > 1 && (uintptr_t)p % a != 0)
    a /= 2;
  return a;
}

/* One cublasLtMatmul. 0 done; 1 cuBLASLt has no algorithm for it (nothing
 * ran, err untouched: the caller may fall back); -1 error in err. */
static int lt_matmul(const kern_ctx *k, const lt_mm *p, const char *op,
                     char *err, size_t errlen) {
  int rc = -1;
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  const cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t dtype = p->d_f32 ? CUDA_R_32F : CUDA_R_16BF;
  const float alpha = 1.0f, beta = p->d_f32 ? 1.0f : 0.0f;
  const size_t ws = k->lt_workspace_bytes;
  const uint32_t align_a = lt_alignment(p->A), align_b = lt_alignment(p->B);
  const uint32_t align_d = lt_alignment(p->D);

  LT_TRY(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                        sizeof ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                        sizeof tb));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                        &p->epi, sizeof p->epi));
  if (p->bias)
    LT_TRY(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, sizeof p->bias));
  if (p->aux) {
    LT_TRY(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p->aux,
        sizeof p->aux));
    LT_TRY(cublasLtMatmulDescSetAttribute(desc,
                                          CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                          &p->aux_ld, sizeof p->aux_ld));
  }
  /* Stored shapes: op(A) is m x k, op(B) is k x n. */
  LT_TRY(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p->ta ? p->k : p->m,
                                    p->ta ? p->m : p->k, p->lda));
  LT_TRY(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p->tb ? p->n : p->k,
                                    p->tb ? p->k : p->n, p->ldb));
  LT_TRY(cublasLtMatrixLayoutCreate(&ld, dtype, p->m, p->n, p->ldd));
  LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
      sizeof align_a));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
      sizeof align_b));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
      sizeof align_d));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
      sizeof align_d));
  {
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        k->lt, desc, la, lb, ld, ld, pref, 1, &heur, &found);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
        (st == CUBLAS_STATUS_SUCCESS && found == 0)) {
      rc = 1;
      goto done;
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
      kc_fail(err, errlen, op, "cublasLtMatmulAlgoGetHeuristic: %s",
              cublasLtGetStatusName(st));
      goto done;
    }
  }
  LT_TRY(cublasLtMatmul(k->lt, desc, &alpha, p->A, la, p->B, lb, &beta, p->D,
                        ld, p->D, ld, &heur.algo, k->lt_workspace, ws,
                        k->stream));
  rc = kc_check(op, err, errlen);
done:
  /* Destroy calls only fail on invalid handles, which these are not. */
  if (pref)
    (void)cublasLtMatmulPreferenceDestroy(pref);
  if (ld)
    (void)cublasLtMatrixLayoutDestroy(ld);
  if (lb)
    (void)cublasLtMatrixLayoutDestroy(lb);
  if (la)
    (void)cublasLtMatrixLayoutDestroy(la);
  if (desc)
    (void)cublasLtMatmulDescDestroy(desc);
  return rc;
}

/* lt_matmul that treats "no algorithm" as an error. */
static int lt_matmul_must(const kern_ctx *k, const lt_mm *p, const char *op,
                          char *err, size_t errlen) {
  int rc = lt_matmul(k, p, op, err, errlen);
  if (rc == 1)
    return kc_fail(err, errlen, op,
                   "cuBLASLt has no algorithm for m=%d n=%d k=%d (epilogue "
                   "%d)",
                   p->m, p->n, p->k, (int)p->epi);
  return rc;
}

static int gelu_epilogue_allowed(void) {
  const char *e = getenv("DAGRUN_CUDA_NO_GELU_EPILOGUE");
  return !(e && *e && strcmp(e, "0") != 0);
}

static int check_shape(int N, int C, int OC, const char *op, char *err,
                       size_t errlen) {
  if (N <= 0 || C <= 0 || OC <= 0)
    return kc_fail(err, errlen, op, "bad shape N=%d C=%d OC=%d", N, C, OC);
  return 0;
}

int kern_matmul_forward(const kern_ctx *k, floatX *out, floatX *gelu_aux,
                        const floatX *inp, const floatX *w, const floatX *bias,
                        int N, int C, int OC, char *err, size_t errlen) {
  static const char op[] = "kern_matmul_forward";
  if (check_shape(N, C, OC, op, err, errlen))
    return -1;
  lt_mm p;
  memset(&p, 0, sizeof p);
  p.m = OC, p.n = N, p.k = C;
  p.A = w, p.lda = OC;
  p.B = inp, p.ldb = C;
  p.D = out, p.ldd = OC;
  p.bias = bias;
  p.epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu_aux && gelu_epilogue_allowed() && OC % 8 == 0) {
    p.epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    p.aux = gelu_aux, p.aux_ld = OC;
    int rc = lt_matmul(k, &p, op, err, errlen);
    if (rc != 1)
      return rc;
    p.epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    p.aux = NULL, p.aux_ld = 0;
  }
  if (!gelu_aux)
    return lt_matmul_must(k, &p, op, err, errlen);
  /* Fallback: the pre-GELU product into gelu_aux, then GELU. */
  p.D = gelu_aux;
  if (lt_matmul_must(k, &p, op, err, errlen))
    return -1;
  return kern_gelu_forward(k, out, gelu_aux, (size_t)N * OC, err, errlen);
}

size_t kern_matmul_backward_scratch_bytes(int N, int OC, int sm_count) {
  return kc_colsum_chunks(N) * (size_t)(OC > 0 ? OC : 0) * sizeof(float);
}

int kern_matmul_backward(const kern_ctx *k, floatX *dinp, float *dw,
                         float *dbias, void *scratch, const floatX *dout,
                         const floatX *inp, const floatX *w,
                         const floatX *gelu_aux, int N, int C, int OC,
                         char *err, size_t errlen) {
  static const char op[] = "kern_matmul_backward";
  if (check_shape(N, C, OC, op, err, errlen))
    return -1;
  if (dbias &&
      kc_colsum(k, dbias, (float *)scratch, dout, N, OC, op, err, errlen))
    return -1;
  /* dinp first: dout (OC x N) by W^T. */
  lt_mm p;
  memset(&p, 0, sizeof p);
  p.m = C, p.n = N, p.k = OC;
  p.A = w, p.lda = OC, p.ta = 1;
  p.B = dout, p.ldb = OC;
  p.D = dinp, p.ldd = C;
  p.epi = CUBLASLT_EPILOGUE_DEFAULT;
  int rc = 1;
  if (gelu_aux && gelu_epilogue_allowed() && C % 8 == 0) {
    p.epi = CUBLASLT_EPILOGUE_DGELU;
    p.aux = (floatX *)gelu_aux, p.aux_ld = C;
    rc = lt_matmul(k, &p, op, err, errlen);
    if (rc < 0)
      return -1;
    p.epi = CUBLASLT_EPILOGUE_DEFAULT;
    p.aux = NULL, p.aux_ld = 0;
  }
  if (rc == 1) {
    if (lt_matmul_must(k, &p, op, err, errlen))
      return -1;
    if (gelu_aux &&
        kern_gelu_backward(k, dinp, gelu_aux, (size_t)N * C, err, errlen))
      return -1;
  }
  /* dw += inp^T dout, FP32. */
  memset(&p, 0, sizeof p);
  p.m = OC, p.n = C, p.k = N;
  p.A = dout, p.lda = OC;
  p.B = inp, p.ldb = C, p.tb = 1;
  p.D = dw, p.ldd = OC, p.d_f32 = 1;
  p.epi = CUBLASLT_EPILOGUE_DEFAULT;
  return lt_matmul_must(k, &p, op, err, errlen);
}

/* One plain product (no epilogue) of lt_mm's fields; D FP32 (beta 1)
 * with d_f32. */
static int lt_plain(const kern_ctx *k, int m, int n, int kk, const floatX *A,
                    int lda, int ta, const floatX *B, int ldb, int tb, void *D,
                    int ldd, int d_f32, const char *op, char *err,
                    size_t errlen) {
  lt_mm p;
  memset(&p, 0, sizeof p);
  p.m = m, p.n = n, p.k = kk;
  p.A = A, p.lda = lda, p.ta = ta;
  p.B = B, p.ldb = ldb, p.tb = tb;
  p.D = D, p.ldd = ldd, p.d_f32 = d_f32;
  p.epi = CUBLASLT_EPILOGUE_DEFAULT;
  return lt_matmul_must(k, &p, op, err, errlen);
}

int kern_linear_forward(const kern_ctx *k, floatX *out, const floatX *inp,
                        const floatX *w, int N, int C, int OC, char *err,
                        size_t errlen) {
  static const char op[] = "kern_linear_forward";
  if (check_shape(N, C, OC, op, err, errlen))
    return -1;
  return lt_plain(k, OC, N, C, w, C, 1, inp, C, 0, out, OC, 0, op, err, errlen);
}

int kern_linear_backward(const kern_ctx *k, floatX *dinp, float *dw,
                         const floatX *dout, const floatX *inp, const floatX *w,
                         int N, int C, int OC, char *err, size_t errlen) {
  static const char op[] = "kern_linear_backward";
  if (check_shape(N, C, OC, op, err, errlen) ||
      lt_plain(k, C, N, OC, w, C, 0, dout, OC, 0, dinp, C, 0, op, err, errlen))
    return -1;
  return lt_plain(k, C, OC, N, inp, C, 0, dout, OC, 1, dw, C, 1, op, err,
                  errlen);
}
