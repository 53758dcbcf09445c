/*
 * attention_cudnn: causal attention on cuDNN's fused flash attention, for
 * the shapes attention.cu's launchers hand it (attention.cuh states when).
 *
 * Why cuDNN: PyTorch's compiled GPT-2 step on an H200 ran cuDNN's fused
 * SDPA kernels (wgmma, asynchronous loads) in 2.3 ms of a B=8 step where
 * ours took 5.5 (bench/README.md, 2026-11-28): the largest single gap to
 * PyTorch. Writing Hopper kernels of that level ourselves is the longer
 * road; cuDNN comes with the CUDA toolkit and with PyTorch's packages.
 *
 * How: the two graphs are those cuDNN's frontend builds for
 * scaled_dot_product_flash_attention (causal, no dropout, no bias; its
 * CompositeSDPANode and CompositeSDPABackwardNode), written here against
 * cuDNN's C backend API (cudnn_graph.h) so that no C++ frontend is needed:
 * the runtime fusion engine recognizes the pattern and compiles its
 * kernels once per shape (a plan), which later calls only execute.
 *
 * libcudnn.so.9 is loaded at run time (dlopen): the build needs only the
 * header (DAGRUN_HAVE_CUDNN, where CMake found it), no program links it,
 * and a machine without cuDNN runs our own kernels. The emulator builds
 * this file without the header: every entry then says cuDNN is not there.
 */
#include "attention.cuh"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#if DAGRUN_HAVE_CUDNN
#include <cudnn_graph.h>
#include <dlfcn.h>

/* The backend entry points used, from libcudnn.so.9. */
struct cudnn_api {
  void *lib;
  size_t (*GetVersion)(void);
  const char *(*GetErrorString)(cudnnStatus_t);
  void (*GetLastErrorString)(char *, size_t);
  cudnnStatus_t (*Create)(cudnnHandle_t *);
  cudnnStatus_t (*Destroy)(cudnnHandle_t);
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
  cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t,
                                           cudnnBackendDescriptor_t *);
  cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t,
                                       cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t,
                                       const void *);
  cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const,
                                       cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t,
                                       int64_t *, void *);
  cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t,
                                  cudnnBackendDescriptor_t);
};

/* The most descriptors one graph and its plan keep (the backward's
 * graph has 34 tensors and 19 operations, each operation with its own
 * pointwise, matmul or reduction descriptor). */
#define ACD_MAX_DESCS 160
#define ACD_MAX_SHAPES 8

/* One plan: its execution plan and every descriptor it was built from,
 * kept alive as long as it is. */
struct acd_plan {
  cudnnBackendDescriptor_t plan;
  cudnnBackendDescriptor_t descs[ACD_MAX_DESCS];
  int ndescs;
  int64_t workspace;
  int state; /* 0 not built, 1 built, -1 cuDNN refused the shape */
};

struct acd_shape {
  int B, T, C, NH;
  acd_plan fwd, bwd;
};

struct att_cudnn {
  cudnn_api api;
  cudnnHandle_t handle;
  cudaStream_t stream; /* the context's, which the handle runs on */
  size_t version;
  acd_shape shapes[ACD_MAX_SHAPES];
  int nshapes;
  void *workspace; /* device memory for the plans, the largest's size */
  size_t workspace_bytes;
};

/* The tensors' unique ids in both graphs: inputs and outputs first, then
 * the virtual intermediates from ACD_VIRTUAL up. */
enum {
  UID_Q = 1,
  UID_K,
  UID_V,
  UID_O,
  UID_STATS,
  UID_SCALE,
  UID_NEG_INF,
  UID_DO,
  UID_DQ,
  UID_DK,
  UID_DV,
  UID_ONE,
  UID_SOFTMAX_SUM,
  UID_DQ_ACCUM,
  ACD_VIRTUAL = 100
};

/* A graph being built: descriptors go into p as they are made, and the
 * first failing call is kept (the later ones are skipped). */
struct acd_builder {
  att_cudnn *c;
  acd_plan *p;
  int64_t next_uid;
  cudnnStatus_t st;
  char what[96];
};

static cudnnBackendDescriptor_t acd_new(acd_builder *g,
                                        cudnnBackendDescriptorType_t type) {
  if (g->st != CUDNN_STATUS_SUCCESS)
    return NULL;
  if (g->p->ndescs >= ACD_MAX_DESCS) {
    g->st = CUDNN_STATUS_INTERNAL_ERROR;
    snprintf(g->what, sizeof g->what, "more than %d descriptors",
             ACD_MAX_DESCS);
    return NULL;
  }
  cudnnBackendDescriptor_t d = NULL;
  g->st = g->c->api.BackendCreateDescriptor(type, &d);
  if (g->st != CUDNN_STATUS_SUCCESS) {
    snprintf(g->what, sizeof g->what, "creating descriptor type %d", (int)type);
    return NULL;
  }
  g->p->descs[g->p->ndescs++] = d;
  return d;
}

static void acd_set(acd_builder *g, cudnnBackendDescriptor_t d,
                    cudnnBackendAttributeName_t name,
                    cudnnBackendAttributeType_t type, int64_t n,
                    const void *v) {
  if (g->st != CUDNN_STATUS_SUCCESS)
    return;
  g->st = g->c->api.BackendSetAttribute(d, name, type, n, v);
  if (g->st != CUDNN_STATUS_SUCCESS)
    snprintf(g->what, sizeof g->what, "setting attribute %d", (int)name);
}

static void acd_finalize(acd_builder *g, cudnnBackendDescriptor_t d,
                         const char *what) {
  if (g->st != CUDNN_STATUS_SUCCESS)
    return;
  g->st = g->c->api.BackendFinalize(d);
  if (g->st != CUDNN_STATUS_SUCCESS)
    snprintf(g->what, sizeof g->what, "finalizing %s", what);
}

/* A tensor of 4 dimensions. uid 0: a virtual one, given the next id. */
static cudnnBackendDescriptor_t acd_tensor(acd_builder *g, int64_t uid,
                                           cudnnDataType_t type,
                                           const int64_t dim[4],
                                           const int64_t stride[4]) {
  cudnnBackendDescriptor_t t = acd_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const bool is_virtual = uid == 0;
  const int64_t id = is_virtual ? g->next_uid++ : uid;
  const int64_t align = 16;
  acd_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  acd_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
  acd_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
  acd_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
  acd_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  acd_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1,
          &is_virtual);
  acd_finalize(g, t, "a tensor");
  return t;
}

/* A float scalar passed by value in the variant pack (a host pointer). */
static cudnnBackendDescriptor_t acd_scalar(acd_builder *g, int64_t uid) {
  cudnnBackendDescriptor_t t = acd_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  static const int64_t one[4] = {1, 1, 1, 1};
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const int64_t align = 16;
  const bool yes = true, no = false;
  acd_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  acd_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one);
  acd_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one);
  acd_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  acd_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  acd_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &no);
  acd_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  acd_finalize(g, t, "a scalar");
  return t;
}

/* The operations, each appended to ops (their order is the graph's). */
struct acd_ops {
  cudnnBackendDescriptor_t d[32];
  int n;
};

static void acd_op(acd_builder *g, acd_ops *ops, cudnnBackendDescriptor_t op,
                   const char *what) {
  acd_finalize(g, op, what);
  if (g->st == CUDNN_STATUS_SUCCESS)
    ops->d[ops->n++] = op;
}

/* y = mode(x, b, t) (b, t NULL where the mode takes fewer inputs); axis
 * for GEN_INDEX, else -1. */
static void acd_pointwise(acd_builder *g, acd_ops *ops,
                          cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                          cudnnBackendDescriptor_t x,
                          cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t t,
                          cudnnBackendDescriptor_t y, int64_t axis) {
  cudnnBackendDescriptor_t pw = acd_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  acd_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1,
          &mode);
  acd_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
          &prec);
  if (axis >= 0)
    acd_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  acd_finalize(g, pw, "a pointwise descriptor");
  cudnnBackendDescriptor_t op =
      acd_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  acd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  acd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b)
    acd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  if (t)
    acd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
  acd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  /* y = mode(alpha1 x, alpha2 b): 1 and 1, set as the frontend sets them */
  const float alpha = 1.0f;
  acd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1,
          &alpha);
  acd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1,
          &alpha);
  acd_op(g, ops, op, "a pointwise operation");
}

/* c = a b over the last two dimensions, in FP32. */
static void acd_matmul(acd_builder *g, acd_ops *ops, cudnnBackendDescriptor_t a,
                       cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
  cudnnBackendDescriptor_t mm = acd_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  acd_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
  acd_finalize(g, mm, "a matmul descriptor");
  cudnnBackendDescriptor_t op =
      acd_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  acd_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
  acd_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  acd_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
  acd_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
  acd_op(g, ops, op, "a matmul operation");
}

/* y = x reduced (max or sum) over the dimensions where y has 1. */
static void acd_reduce(acd_builder *g, acd_ops *ops, cudnnReduceTensorOp_t how,
                       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t rd = acd_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  acd_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR,
          CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
  acd_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
  acd_finalize(g, rd, "a reduction descriptor");
  cudnnBackendDescriptor_t op =
      acd_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  acd_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  acd_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  acd_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
  acd_op(g, ops, op, "a reduction operation");
}

/* y = x seen with y's dimensions and strides (a transpose, for cuDNN). */
static void acd_reshape(acd_builder *g, acd_ops *ops,
                        cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t op =
      acd_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  acd_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  acd_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  acd_op(g, ops, op, "a reshape operation");
}

/* The shapes of one (B, T, C, NH): the (b, h, t, d) views of qkv's
 * thirds and of out (B,T,C), the scores (b, h, t, t) and the rows'
 * statistics (b, h, t, 1). */
struct acd_dims {
  int64_t qkv[4], qkv_st[4]; /* q, k, v (and dq, dk, dv in dqkv) */
  int64_t kt[4], kt_st[4];   /* k and v transposed: (b, h, d, t) */
  int64_t out[4], out_st[4]; /* out and dout */
  int64_t s[4], s_st[4];     /* scores, row-major */
  int64_t st[4], st_st[4];   /* per-row statistics */
  int64_t sT[4], sT_st[4];   /* scores transposed, (b, h, t_kv, t_q) */
  int64_t acc[4], acc_st[4]; /* dq's FP32 accumulator, (b, h, t, d) */
};

static acd_dims acd_dims_of(int B, int T, int C, int NH) {
  const int64_t b = B, t = T, c = C, h = NH, d = C / NH;
  acd_dims m = {{b, h, t, d}, {t * 3 * c, d, 3 * c, 1},
                {b, h, d, t}, {t * 3 * c, d, 1, 3 * c},
                {b, h, t, d}, {t * c, d, c, 1},
                {b, h, t, t}, {h * t * t, t * t, t, 1},
                {b, h, t, 1}, {h * t, t, 1, 1},
                {b, h, t, t}, {h * t * t, t * t, 1, t},
                {b, h, t, d}, {h * t * d, t * d, d, 1}};
  return m;
}

/* The causal mask on scores x: y = x where row >= column, else -inf
 * (neg_inf, a scalar), as cuDNN's frontend writes it. */
static cudnnBackendDescriptor_t acd_causal(acd_builder *g, acd_ops *ops,
                                           const acd_dims *m,
                                           cudnnBackendDescriptor_t x,
                                           cudnnBackendDescriptor_t neg_inf) {
  cudnnBackendDescriptor_t row =
      acd_tensor(g, 0, CUDNN_DATA_INT32, m->s, m->s_st);
  cudnnBackendDescriptor_t col =
      acd_tensor(g, 0, CUDNN_DATA_INT32, m->s, m->s_st);
  cudnnBackendDescriptor_t keep =
      acd_tensor(g, 0, CUDNN_DATA_BOOLEAN, m->s, m->s_st);
  cudnnBackendDescriptor_t y =
      acd_tensor(g, 0, CUDNN_DATA_FLOAT, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL,
                NULL, row, 2);
  acd_pointwise(g, ops, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL,
                NULL, col, 3);
  acd_pointwise(g, ops, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col,
                NULL, keep, -1);
  acd_pointwise(g, ops, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x,
                neg_inf, keep, y, -1);
  return y;
}

/* The forward: S = scale Q K^T, masked; stats = max + log(sum(exp(S -
 * max))) (natural log, as our lse); O = softmax(S) V. */
static void acd_forward_graph(acd_builder *g, acd_ops *ops, const acd_dims *m) {
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = acd_tensor(g, UID_Q, bf, m->qkv, m->qkv_st);
  cudnnBackendDescriptor_t kt = acd_tensor(g, UID_K, bf, m->kt, m->kt_st);
  cudnnBackendDescriptor_t v = acd_tensor(g, UID_V, bf, m->qkv, m->qkv_st);
  cudnnBackendDescriptor_t o = acd_tensor(g, UID_O, bf, m->out, m->out_st);
  cudnnBackendDescriptor_t stats =
      acd_tensor(g, UID_STATS, f32, m->st, m->st_st);
  cudnnBackendDescriptor_t scale = acd_scalar(g, UID_SCALE);
  cudnnBackendDescriptor_t neg_inf = acd_scalar(g, UID_NEG_INF);

  cudnnBackendDescriptor_t s = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_matmul(g, ops, q, kt, s);
  cudnnBackendDescriptor_t s1 = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, s1, -1);
  cudnnBackendDescriptor_t s2 = acd_causal(g, ops, m, s1, neg_inf);
  cudnnBackendDescriptor_t mx = acd_tensor(g, 0, f32, m->st, m->st_st);
  acd_reduce(g, ops, CUDNN_REDUCE_TENSOR_MAX, s2, mx);
  cudnnBackendDescriptor_t s3 = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_SUB, f32, s2, mx, NULL, s3, -1);
  cudnnBackendDescriptor_t e = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_EXP, f32, s3, NULL, NULL, e, -1);
  cudnnBackendDescriptor_t z = acd_tensor(g, 0, f32, m->st, m->st_st);
  acd_reduce(g, ops, CUDNN_REDUCE_TENSOR_ADD, e, z);
  cudnnBackendDescriptor_t lz = acd_tensor(g, 0, f32, m->st, m->st_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_LOG, f32, z, NULL, NULL, lz, -1);
  acd_pointwise(g, ops, CUDNN_POINTWISE_ADD, f32, mx, lz, NULL, stats, -1);
  /* P in the inputs' type, as the frontend gives it to the second product */
  cudnnBackendDescriptor_t p = acd_tensor(g, 0, bf, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_DIV, f32, e, z, NULL, p, -1);
  acd_matmul(g, ops, p, v, o);
}

/* The backward, with the forward's stats: P = exp(scale Q K^T - stats),
 * masked; dV = P^T dO; dS = scale P (dO V^T - rowsum(dO * O)); dK =
 * dS^T Q; dQ = dS K (accumulated in FP32 in the workspace, then
 * converted). */
static void acd_backward_graph(acd_builder *g, acd_ops *ops,
                               const acd_dims *m) {
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = acd_tensor(g, UID_Q, bf, m->qkv, m->qkv_st);
  cudnnBackendDescriptor_t kt = acd_tensor(g, UID_K, bf, m->kt, m->kt_st);
  cudnnBackendDescriptor_t vt = acd_tensor(g, UID_V, bf, m->kt, m->kt_st);
  cudnnBackendDescriptor_t o = acd_tensor(g, UID_O, bf, m->out, m->out_st);
  cudnnBackendDescriptor_t dout = acd_tensor(g, UID_DO, bf, m->out, m->out_st);
  cudnnBackendDescriptor_t stats =
      acd_tensor(g, UID_STATS, f32, m->st, m->st_st);
  cudnnBackendDescriptor_t dq = acd_tensor(g, UID_DQ, bf, m->qkv, m->qkv_st);
  cudnnBackendDescriptor_t dk = acd_tensor(g, UID_DK, bf, m->qkv, m->qkv_st);
  cudnnBackendDescriptor_t dv = acd_tensor(g, UID_DV, bf, m->qkv, m->qkv_st);
  cudnnBackendDescriptor_t scale = acd_scalar(g, UID_SCALE);
  cudnnBackendDescriptor_t neg_inf = acd_scalar(g, UID_NEG_INF);
  cudnnBackendDescriptor_t one = acd_scalar(g, UID_ONE);

  /* rowsum(dO * O), kept in the workspace (the frontend's softmax_sum) */
  const int64_t doo_st[4] = {m->out[1] * m->out[2] * m->out[3],
                             m->out[2] * m->out[3], m->out[1] * m->out[3], 1};
  cudnnBackendDescriptor_t doo = acd_tensor(g, 0, f32, m->out, doo_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_MUL, f32, dout, o, NULL, doo, -1);
  cudnnBackendDescriptor_t rs = acd_tensor(g, 0, f32, m->st, m->st_st);
  acd_reduce(g, ops, CUDNN_REDUCE_TENSOR_ADD, doo, rs);
  cudnnBackendDescriptor_t ssum =
      acd_tensor(g, UID_SOFTMAX_SUM, f32, m->st, m->st_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_MUL, f32, rs, one, NULL, ssum, -1);

  /* P, recomputed from the stats */
  cudnnBackendDescriptor_t s = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_matmul(g, ops, q, kt, s);
  cudnnBackendDescriptor_t s1 = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_MUL, f32, s, scale, NULL, s1, -1);
  cudnnBackendDescriptor_t s2 = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_SUB, f32, s1, stats, NULL, s2, -1);
  cudnnBackendDescriptor_t s3 = acd_causal(g, ops, m, s2, neg_inf);
  cudnnBackendDescriptor_t p = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_EXP, f32, s3, NULL, NULL, p, -1);

  /* dV = P^T dO */
  cudnnBackendDescriptor_t pt = acd_tensor(g, 0, bf, m->sT, m->sT_st);
  acd_reshape(g, ops, p, pt);
  acd_matmul(g, ops, pt, dout, dv);

  /* dS = scale * P * (dO V^T - softmax_sum) */
  cudnnBackendDescriptor_t dp = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_matmul(g, ops, dout, vt, dp);
  cudnnBackendDescriptor_t dp1 = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_SUB, f32, dp, ssum, NULL, dp1, -1);
  cudnnBackendDescriptor_t ds0 = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_MUL, f32, dp1, p, NULL, ds0, -1);
  cudnnBackendDescriptor_t ds = acd_tensor(g, 0, f32, m->s, m->s_st);
  acd_pointwise(g, ops, CUDNN_POINTWISE_MUL, f32, ds0, scale, NULL, ds, -1);

  /* dK = dS^T Q */
  cudnnBackendDescriptor_t dst = acd_tensor(g, 0, bf, m->sT, m->sT_st);
  acd_reshape(g, ops, ds, dst);
  acd_matmul(g, ops, dst, q, dk);

  /* dQ = dS K, through the FP32 accumulator */
  cudnnBackendDescriptor_t k = acd_tensor(g, 0, bf, m->qkv, m->qkv_st);
  acd_reshape(g, ops, kt, k);
  cudnnBackendDescriptor_t acc =
      acd_tensor(g, UID_DQ_ACCUM, f32, m->acc, m->acc_st);
  acd_matmul(g, ops, ds, k, acc);
  acd_pointwise(g, ops, CUDNN_POINTWISE_IDENTITY, f32, acc, NULL, NULL, dq, -1);
}

/* cuDNN's words for a failure: the status, then its last error message
 * (which names the attribute or the engine's reason). */
static void acd_why(const att_cudnn *c, cudnnStatus_t st, const char *what,
                    char *msg, size_t msglen) {
  char last[256] = "";
  if (c->api.GetLastErrorString)
    c->api.GetLastErrorString(last, sizeof last);
  snprintf(msg, msglen, "%s: %s%s%s", what, c->api.GetErrorString(st),
           last[0] ? ": " : "", last);
}

/* Builds p from the graph of one direction: the heuristics' engine
 * configurations in their order, the first that cuDNN finalizes into a
 * plan. 0, or -1 with msg. */
static int acd_build(att_cudnn *c, acd_plan *p, const acd_dims *m, int backward,
                     char *msg, size_t msglen) {
  acd_builder g = {c, p, ACD_VIRTUAL, CUDNN_STATUS_SUCCESS, ""};
  acd_ops ops;
  ops.n = 0;
  if (backward)
    acd_backward_graph(&g, &ops, m);
  else
    acd_forward_graph(&g, &ops, m);
  cudnnBackendDescriptor_t graph =
      acd_new(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  acd_set(&g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.n, ops.d);
  acd_set(&g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
          &c->handle);
  acd_finalize(&g, graph, "the operation graph");
  cudnnBackendDescriptor_t heur =
      acd_new(&g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  acd_set(&g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  acd_set(&g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  acd_finalize(&g, heur, "the heuristics");
  int64_t count = 0;
  if (g.st == CUDNN_STATUS_SUCCESS) {
    g.st = c->api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                      NULL);
    snprintf(g.what, sizeof g.what, "counting the heuristics' results");
  }
  if (count > 8)
    count = 8;
  cudnnBackendDescriptor_t cfgs[8];
  for (int64_t i = 0; i < count; i++)
    cfgs[i] = acd_new(&g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  if (g.st == CUDNN_STATUS_SUCCESS && count > 0) {
    g.st = c->api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                      &got, cfgs);
    snprintf(g.what, sizeof g.what, "reading the heuristics' results");
  }
  if (g.st != CUDNN_STATUS_SUCCESS) {
    acd_why(c, g.st, g.what, msg, msglen);
    return -1;
  }
  if (got <= 0) {
    snprintf(msg, msglen, "cuDNN's heuristics found no engine for the graph");
    return -1;
  }
  /* The first configuration that makes a plan: the others may need what
   * this device or this cuDNN does not have. */
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  for (int64_t i = 0; i < got; i++) {
    cudnnBackendDescriptor_t plan = NULL;
    st = c->api.BackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                                        &plan);
    if (st == CUDNN_STATUS_SUCCESS)
      st = c->api.BackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                      CUDNN_TYPE_HANDLE, 1, &c->handle);
    if (st == CUDNN_STATUS_SUCCESS)
      st = c->api.BackendSetAttribute(
          plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
    if (st == CUDNN_STATUS_SUCCESS)
      st = c->api.BackendFinalize(plan);
    int64_t ws = 0, n = 0;
    if (st == CUDNN_STATUS_SUCCESS)
      st = c->api.BackendGetAttribute(plan,
                                      CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                      CUDNN_TYPE_INT64, 1, &n, &ws);
    if (st == CUDNN_STATUS_SUCCESS) {
      p->plan = plan;
      p->workspace = ws;
      return 0;
    }
    if (plan)
      c->api.BackendDestroyDescriptor(plan);
  }
  acd_why(c, st, "no engine configuration made a plan", msg, msglen);
  return -1;
}

static void acd_plan_free(att_cudnn *c, acd_plan *p) {
  if (p->plan)
    c->api.BackendDestroyDescriptor(p->plan);
  for (int i = p->ndescs - 1; i >= 0; i--)
    c->api.BackendDestroyDescriptor(p->descs[i]);
  memset(p, 0, sizeof *p);
}

/* The shape's entry (made on first sight), or NULL when all are taken. */
static acd_shape *acd_shape_of(att_cudnn *c, int B, int T, int C, int NH) {
  for (int i = 0; i < c->nshapes; i++) {
    acd_shape *s = &c->shapes[i];
    if (s->B == B && s->T == T && s->C == C && s->NH == NH)
      return s;
  }
  if (c->nshapes == ACD_MAX_SHAPES)
    return NULL;
  acd_shape *s = &c->shapes[c->nshapes++];
  memset(s, 0, sizeof *s);
  s->B = B, s->T = T, s->C = C, s->NH = NH;
  return s;
}

/* The plan of one direction of a shape, built on first use (and the
 * workspace grown to it). NULL with err where cuDNN refuses it (and
 * refuses it again at once on later calls). */
static acd_plan *acd_plan_for(att_cudnn *c, int B, int T, int C, int NH,
                              int backward, const char *op, char *err,
                              size_t errlen) {
  acd_shape *s = acd_shape_of(c, B, T, C, NH);
  if (!s) {
    kc_fail(err, errlen, op, "cuDNN: more than %d attention shapes",
            ACD_MAX_SHAPES);
    return NULL;
  }
  acd_plan *p = backward ? &s->bwd : &s->fwd;
  if (p->state == 1)
    return p;
  char msg[512];
  if (p->state == 0) {
    const acd_dims m = acd_dims_of(B, T, C, NH);
    if (acd_build(c, p, &m, backward, msg, sizeof msg) == 0) {
      if ((size_t)p->workspace <= c->workspace_bytes) {
        p->state = 1;
        return p;
      }
      /* The new workspace before the old one goes, so that the plans
       * built before keep theirs if the device is short; cudaFree waits
       * for the device, so nothing queued still uses the old one. */
      void *ws = NULL;
      if (cudaMalloc(&ws, (size_t)p->workspace) == cudaSuccess) {
        if (c->workspace)
          cudaFree(c->workspace);
        c->workspace = ws;
        c->workspace_bytes = (size_t)p->workspace;
        p->state = 1;
        return p;
      }
      cudaGetLastError();
      snprintf(msg, sizeof msg, "no device memory for its %lld-byte workspace",
               (long long)p->workspace);
    }
    acd_plan_free(c, p);
    p->state = -1;
  } else {
    snprintf(msg, sizeof msg, "refused before");
  }
  kc_fail(err, errlen, op,
          "cuDNN's fused attention for B=%d T=%d C=%d NH=%d (%s): %s", B, T, C,
          NH, backward ? "backward" : "forward", msg);
  return NULL;
}

/* Runs plan p with the tensors of uids at ptrs. 0, or -1 with err. */
static int acd_execute(att_cudnn *c, acd_plan *p, int n, const int64_t *uids,
                       void **ptrs, const char *op, char *err, size_t errlen) {
  cudnnBackendDescriptor_t vp = NULL;
  cudnnStatus_t st = c->api.BackendCreateDescriptor(
      CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  void *ws = c->workspace;
  if (st == CUDNN_STATUS_SUCCESS)
    st = c->api.BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                    CUDNN_TYPE_INT64, n, uids);
  if (st == CUDNN_STATUS_SUCCESS)
    st = c->api.BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                    CUDNN_TYPE_VOID_PTR, n, ptrs);
  if (st == CUDNN_STATUS_SUCCESS)
    st = c->api.BackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                    CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS)
    st = c->api.BackendFinalize(vp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = c->api.BackendExecute(c->handle, p->plan, vp);
  if (vp)
    c->api.BackendDestroyDescriptor(vp);
  if (st == CUDNN_STATUS_SUCCESS)
    return kc_check(op, err, errlen);
  char msg[512];
  acd_why(c, st, "cudnnBackendExecute", msg, sizeof msg);
  return kc_fail(err, errlen, op, "cuDNN's fused attention: %s", msg);
}

int att_cudnn_open(att_cudnn **out, cudaStream_t stream, char *why,
                   size_t whylen) {
  *out = NULL;
  void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, whylen, "libcudnn.so.9 not loaded (%s)", dlerror());
    return -1;
  }
  att_cudnn *c = (att_cudnn *)calloc(1, sizeof *c);
  if (!c) {
    dlclose(lib);
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  cudnn_api *a = &c->api;
  a->lib = lib;
  /* Each entry by name; a missing one means a cuDNN older than 9. */
#define ACD_SYM(field, name)                                                   \
  if (!(*(void **)&a->field = dlsym(lib, name))) {                             \
    snprintf(why, whylen, "libcudnn.so.9 has no %s", name);                    \
    goto fail;                                                                 \
  }
  ACD_SYM(GetVersion, "cudnnGetVersion");
  ACD_SYM(GetErrorString, "cudnnGetErrorString");
  ACD_SYM(GetLastErrorString, "cudnnGetLastErrorString");
  ACD_SYM(Create, "cudnnCreate");
  ACD_SYM(Destroy, "cudnnDestroy");
  ACD_SYM(SetStream, "cudnnSetStream");
  ACD_SYM(BackendCreateDescriptor, "cudnnBackendCreateDescriptor");
  ACD_SYM(BackendDestroyDescriptor, "cudnnBackendDestroyDescriptor");
  ACD_SYM(BackendFinalize, "cudnnBackendFinalize");
  ACD_SYM(BackendSetAttribute, "cudnnBackendSetAttribute");
  ACD_SYM(BackendGetAttribute, "cudnnBackendGetAttribute");
  ACD_SYM(BackendExecute, "cudnnBackendExecute");
#undef ACD_SYM
  c->version = a->GetVersion();
  c->stream = stream;
  {
    cudnnStatus_t st = a->Create(&c->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
      c->handle = NULL;
      acd_why(c, st, "cudnnCreate", why, whylen);
      goto fail;
    }
    st = a->SetStream(c->handle, stream);
    if (st != CUDNN_STATUS_SUCCESS) {
      acd_why(c, st, "cudnnSetStream", why, whylen);
      goto fail;
    }
  }
  *out = c;
  return 0;
fail:
  att_cudnn_close(c);
  return -1;
}

void att_cudnn_close(att_cudnn *c) {
  if (!c)
    return;
  for (int i = 0; i < c->nshapes; i++) {
    acd_plan_free(c, &c->shapes[i].fwd);
    acd_plan_free(c, &c->shapes[i].bwd);
  }
  if (c->workspace)
    cudaFree(c->workspace);
  if (c->handle)
    c->api.Destroy(c->handle);
  /* libcudnn stays loaded: its sublibraries and NVRTC keep threads and
   * state that a dlclose would pull from under them. */
  free(c);
}

size_t att_cudnn_version(const att_cudnn *c) { return c ? c->version : 0; }

size_t att_cudnn_workspace_bytes(const att_cudnn *c) {
  return c ? c->workspace_bytes : 0;
}

int att_cudnn_ready(const att_cudnn *c, int B, int T, int C, int NH) {
  if (!c)
    return 0;
  for (int i = 0; i < c->nshapes; i++) {
    const acd_shape *s = &c->shapes[i];
    if (s->B == B && s->T == T && s->C == C && s->NH == NH)
      return s->fwd.state == 1 && s->bwd.state == 1;
  }
  return 0;
}

int att_cudnn_prepare(att_cudnn *c, int B, int T, int C, int NH, char *err,
                      size_t errlen) {
  static const char op[] = "att_cudnn_prepare";
  if ((C / NH) % 8)
    return kc_fail(err, errlen, op,
                   "head size %d is not a multiple of 8 (cuDNN's fused "
                   "attention needs that)",
                   C / NH);
  return acd_plan_for(c, B, T, C, NH, 0, op, err, errlen) &&
                 acd_plan_for(c, B, T, C, NH, 1, op, err, errlen)
             ? 0
             : -1;
}

int att_cudnn_forward(att_cudnn *c, floatX *out, float *lse, const floatX *qkv,
                      int B, int T, int C, int NH, const char *op, char *err,
                      size_t errlen) {
  acd_plan *p = acd_plan_for(c, B, T, C, NH, 0, op, err, errlen);
  if (!p)
    return -1;
  float scale = 1.0f / sqrtf((float)(C / NH)), neg_inf = -INFINITY;
  const int64_t uids[] = {UID_Q,     UID_K,     UID_V,      UID_O,
                          UID_STATS, UID_SCALE, UID_NEG_INF};
  void *ptrs[] = {
      (void *)qkv, (void *)(qkv + C), (void *)(qkv + 2 * C), out, lse,
      &scale,      &neg_inf};
  return acd_execute(c, p, 7, uids, ptrs, op, err, errlen);
}

int att_cudnn_backward(att_cudnn *c, floatX *dqkv, float *dq_acc,
                       float *softmax_sum, const floatX *dout,
                       const floatX *qkv, const floatX *out, const float *lse,
                       int B, int T, int C, int NH, const char *op, char *err,
                       size_t errlen) {
  acd_plan *p = acd_plan_for(c, B, T, C, NH, 1, op, err, errlen);
  if (!p)
    return -1;
  /* cuDNN before 9.6 left clearing dq's accumulator to its caller */
  if (c->version < 90600 &&
      kc_cuda(cudaMemsetAsync(dq_acc, 0, (size_t)B * T * C * sizeof(float),
                              c->stream),
              op, "cudaMemsetAsync of dq's accumulator", err, errlen))
    return -1;
  float scale = 1.0f / sqrtf((float)(C / NH)), neg_inf = -INFINITY, one = 1.0f;
  const int64_t uids[] = {UID_Q,           UID_K,       UID_V,       UID_O,
                          UID_DO,          UID_STATS,   UID_DQ,      UID_DK,
                          UID_DV,          UID_SCALE,   UID_NEG_INF, UID_ONE,
                          UID_SOFTMAX_SUM, UID_DQ_ACCUM};
  void *ptrs[] = {(void *)qkv,
                  (void *)(qkv + C),
                  (void *)(qkv + 2 * C),
                  (void *)out,
                  (void *)dout,
                  (void *)lse,
                  dqkv,
                  dqkv + C,
                  dqkv + 2 * C,
                  &scale,
                  &neg_inf,
                  &one,
                  softmax_sum,
                  dq_acc};
  return acd_execute(c, p, 14, uids, ptrs, op, err, errlen);
}

#else /* !DAGRUN_HAVE_CUDNN: built without cuDNN's header */

struct att_cudnn {
  int unused;
};

int att_cudnn_open(att_cudnn **out, cudaStream_t stream, char *why,
                   size_t whylen) {
  (void)stream;
  *out = NULL;
  snprintf(why, whylen,
           "this build has no cuDNN (built without cudnn_graph.h, or for the "
           "CPU emulator)");
  return -1;
}
void att_cudnn_close(att_cudnn *c) { (void)c; }
size_t att_cudnn_version(const att_cudnn *c) { return c ? 0 : 0; }
size_t att_cudnn_workspace_bytes(const att_cudnn *c) { return c ? 0 : 0; }
int att_cudnn_ready(const att_cudnn *c, int B, int T, int C, int NH) {
  (void)c, (void)B, (void)T, (void)C, (void)NH;
  return 0;
}
int att_cudnn_prepare(att_cudnn *c, int B, int T, int C, int NH, char *err,
                      size_t errlen) {
  (void)c, (void)B, (void)T, (void)C, (void)NH;
  return kc_fail(err, errlen, "att_cudnn_prepare", "no cuDNN in this build");
}
int att_cudnn_forward(att_cudnn *c, floatX *out, float *lse, const floatX *qkv,
                      int B, int T, int C, int NH, const char *op, char *err,
                      size_t errlen) {
  (void)c, (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)C, (void)NH;
  return kc_fail(err, errlen, op, "no cuDNN in this build");
}
int att_cudnn_backward(att_cudnn *c, floatX *dqkv, float *dq_acc,
                       float *softmax_sum, const floatX *dout,
                       const floatX *qkv, const floatX *out, const float *lse,
                       int B, int T, int C, int NH, const char *op, char *err,
                       size_t errlen) {
  (void)c, (void)dqkv, (void)dq_acc, (void)softmax_sum, (void)dout, (void)qkv,
      (void)out, (void)lse, (void)B, (void)T, (void)C, (void)NH;
  return kc_fail(err, errlen, op, "no cuDNN in this build");
}
#endif
