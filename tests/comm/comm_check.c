/*
 * comm_check: every collective of gpu/comm/comm.h checked against values
 * each rank computes alone. Run under mpirun (tests/integration/
 * test_comm.sh) or alone:
 *
 *   comm_check mpi|self|nccl [all|die-kill|die-exit|hang|abort|leave|
 *              mismatch|host-buffer|recv-kill|p2p-mismatch|split-kill]
 *
 * nccl: the buffers the comm layer gets are device memory (cudaMalloc,
 * filled and read back with cudaMemcpy), so that the program is the same
 * on a GPU and on the CPU emulator (tests/gpu/emu: comm_check_emulated,
 * the ctest gpu/comm_emulated); built with DAGRUN_COMM_CHECK_CUDA only,
 * so the plain comm_check needs no CUDA. The ranks find each other
 * through MPI (mpirun), or, with COMM_CHECK_RENDEZVOUS=dir,
 * COMM_CHECK_RANK and COMM_CHECK_SIZE, through comm_nccl.c's rendezvous
 * directory (ranks started by hand, no MPI). comm_allreduce_sum_double
 * takes host memory, which NCCL does not: it is checked with mpi and self
 * only.
 *
 * Rank r's data is pseudo-random, from a fixed seed, r and the buffer's
 * tag, in steps of 1/8 between -125 and 125: any rank can compute any
 * other rank's data, and sums of up to thousands of ranks are exact in
 * float32 whatever order the library adds them in, so results are
 * compared exactly.
 *
 * Failure modes (with COMM_CHECK_TIMEOUT=seconds, the communicator's
 * timeout_s): after a good barrier the last rank SIGKILLs itself
 * (die-kill), exits without a word (die-exit) or sleeps a minute
 * (hang), aborts the communicator (abort: comm_abort, exit code 4),
 * destroys it and exits 0 (leave), or enters the allreduce with a
 * different count (mismatch), while the others enter an allreduce. A
 * survivor that sees the call fail prints "comm_check: rank R: <error>"
 * and aborts the gang (comm_abort, exit code 3). host-buffer (nccl
 * only): every rank hands the comm layer host memory, which must be
 * refused ("comm_check: rank R: host buffer refused: <error>", exit 0):
 * what shows that the other modes' buffers really are device memory.
 * Point to point: recv-kill: the last rank SIGKILLs itself while every
 * other rank receives from it (comm_recv), which must fail;
 * p2p-mismatch: rank 0 sends 1000 bytes to rank 1, which receives 999,
 * and both calls fail (the other ranks wait in a barrier for them);
 * split-kill: the last rank SIGKILLs itself while the others split.
 */
#include "comm/comm.h"

#include <signal.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef DAGRUN_COMM_CHECK_CUDA
#include <cuda_runtime_api.h>
#endif

static comm *C;
static int R, N;
static long nchecks;
static char err[512];

static uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Rank r's element i of the buffer tagged tag. */
static float val(int r, int tag, size_t i) {
  uint64_t h =
      splitmix(splitmix(splitmix(20260421u + (uint64_t)r) ^ (uint64_t)tag) ^
               (uint64_t)i);
  return (float)((int)(h % 2001) - 1000) / 8.0f;
}

static void fill(float *p, int r, int tag, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = val(r, tag, i);
}

/* The sum over ranks of element i of the buffers tagged tag. */
static float sum(int tag, size_t i) {
  float s = 0;
  for (int r = 0; r < N; r++)
    s += val(r, tag, i);
  return s;
}

static void die(const char *what) {
  fprintf(stderr, "comm_check: rank %d: %s: %s\n", R, what, err);
  fflush(stderr);
  comm_abort(C, 3);
}

#define CALL(what, x)                                                          \
  do {                                                                         \
    if ((x) != 0)                                                              \
      die(what);                                                               \
  } while (0)

static void expect(const char *what, size_t n, size_t i, float got,
                   float want) {
  nchecks++;
  if (got != want) {
    fprintf(stderr,
            "comm_check: rank %d: %s (n=%zu): element %zu is %.9g, want "
            "%.9g\n",
            R, what, n, i, (double)got, (double)want);
    fflush(stderr);
    comm_abort(C, 1);
  }
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "comm_check: out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

/* The buffers the comm layer gets: host memory for mpi and self, device
 * memory for nccl (DEV), each with its host copy, which the checks fill
 * and read: h is the host copy, d what the comm layer gets (h itself
 * without DEV). */
static int DEV;

typedef struct buf {
  unsigned char *h, *d;
  size_t bytes;
} buf;

#ifdef DAGRUN_COMM_CHECK_CUDA
static void cuda_check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "comm_check: rank %d: %s: %s\n", R, what,
            cudaGetErrorString(e));
    exit(2);
  }
}
#endif

static buf balloc(size_t bytes) {
  buf b = {xmalloc(bytes), NULL, bytes};
  b.d = b.h;
#ifdef DAGRUN_COMM_CHECK_CUDA
  if (DEV)
    cuda_check(cudaMalloc((void **)&b.d, bytes ? bytes : 1), "cudaMalloc");
#endif
  return b;
}

/* The host copy to the device, and back. */
static void bput(buf *b) {
#ifdef DAGRUN_COMM_CHECK_CUDA
  if (DEV)
    cuda_check(cudaMemcpy(b->d, b->h, b->bytes, cudaMemcpyHostToDevice),
               "cudaMemcpy to the device");
#else
  (void)b;
#endif
}

static void bget(buf *b) {
#ifdef DAGRUN_COMM_CHECK_CUDA
  if (DEV)
    cuda_check(cudaMemcpy(b->h, b->d, b->bytes, cudaMemcpyDeviceToHost),
               "cudaMemcpy from the device");
#else
  (void)b;
#endif
}

static void bfree(buf *b) {
#ifdef DAGRUN_COMM_CHECK_CUDA
  if (DEV)
    cuda_check(cudaFree(b->d), "cudaFree");
#endif
  free(b->h);
  b->h = b->d = NULL;
}

static void check_allreduce(size_t n, int tag) {
  buf B = balloc(n * sizeof(float));
  float *b = (float *)B.h;
  fill(b, R, tag, n);
  bput(&B);
  CALL("allreduce", comm_allreduce_sum(C, (float *)B.d, n, err, sizeof err));
  bget(&B);
  for (size_t i = 0; i < n; i++)
    expect("allreduce", n, i, b[i], sum(tag, i));
  bfree(&B);
}

static void check_reduce_scatter(size_t n, int tag) {
  buf S = balloc(n * N * sizeof(float)), Rb = balloc(n * sizeof(float));
  float *s = (float *)S.h, *r = (float *)Rb.h;
  fill(s, R, tag, n * N);
  for (size_t i = 0; i < n; i++)
    r[i] = -999;
  bput(&S);
  bput(&Rb);
  CALL("reduce_scatter", comm_reduce_scatter_sum(C, (float *)S.d, (float *)Rb.d,
                                                 n, err, sizeof err));
  bget(&Rb);
  for (size_t i = 0; i < n; i++)
    expect("reduce_scatter", n, i, r[i], sum(tag, (size_t)R * n + i));
  bfree(&S);
  bfree(&Rb);
}

/* A reduce to every root in turn (blocking for even roots, started and
 * waited for for odd ones): the root gets the sum; the others give no
 * receive buffer (NULL) for even roots, and one that must stay as it was
 * for odd ones. A root that is no rank is refused, and the
 * communicator stays usable. */
static void check_reduce(size_t n, int tag) {
  buf S = balloc(n * sizeof(float)), Rb = balloc(n * sizeof(float));
  float *r = (float *)Rb.h;
  for (int root = 0; root < N; root++, tag++) {
    fill((float *)S.h, R, tag, n);
    for (size_t i = 0; i < n; i++)
      r[i] = -999;
    bput(&S);
    bput(&Rb);
    float *recv = R == root || root % 2 ? (float *)Rb.d : NULL;
    if (root % 2 == 0) {
      CALL("reduce", comm_reduce_sum(C, (float *)S.d, recv, n, root, err,
                                     sizeof err));
    } else {
      comm_req *q;
      CALL("ireduce", comm_ireduce_sum(C, (float *)S.d, recv, n, root, &q, err,
                                       sizeof err));
      CALL("wait", comm_wait(C, q, err, sizeof err));
    }
    bget(&Rb);
    for (size_t i = 0; i < n; i++)
      expect(R == root ? "reduce (root)" : "reduce (receive buffer of a rank "
                                           "that is not the root)",
             n, i, r[i], R == root ? sum(tag, i) : -999.0f);
  }
  nchecks++;
  if (comm_reduce_sum(C, (float *)S.d, (float *)Rb.d, n, N, err, sizeof err) ==
          0 ||
      !strstr(err, "root") || !strstr(err, "is not a rank")) {
    fprintf(stderr, "comm_check: rank %d: reduce to root %d: %s\n", R, N,
            err);
    comm_abort(C, 1);
  }
  bfree(&S);
  bfree(&Rb);
}

static void check_allgather(size_t n, int tag, int inplace) {
  buf Rb = balloc(n * N * sizeof(float)), S = {0};
  float *r = (float *)Rb.h, *sd;
  for (size_t i = 0; i < n * N; i++)
    r[i] = -999;
  if (inplace) {
    fill(r + (size_t)R * n, R, tag, n);
    sd = (float *)Rb.d + (size_t)R * n;
  } else {
    S = balloc(n * sizeof(float));
    fill((float *)S.h, R, tag, n);
    bput(&S);
    sd = (float *)S.d;
  }
  bput(&Rb);
  const char *what = inplace ? "allgather in place" : "allgather";
  CALL(what, comm_allgather(C, sd, (float *)Rb.d, n, err, sizeof err));
  bget(&Rb);
  for (int q = 0; q < N; q++)
    for (size_t i = 0; i < n; i++)
      expect(what, n, (size_t)q * n + i, r[(size_t)q * n + i], val(q, tag, i));
  if (!inplace)
    bfree(&S);
  bfree(&Rb);
}

/* Bytes of an odd count (BF16 parameters are 2 bytes each; any count
 * must work), in place or not, blocking or started and waited for
 * (async: ZeRO-3's prefetch of a layer's BF16 parameters). */
static void check_allgather_bytes(size_t nbytes, int tag, int inplace,
                                  int async) {
  buf Rb = balloc(nbytes * N), S = {0};
  unsigned char *r = Rb.h, *s, *sd;
  memset(r, 0xEE, nbytes * N);
  if (inplace) {
    s = r + (size_t)R * nbytes;
    sd = Rb.d + (size_t)R * nbytes;
  } else {
    S = balloc(nbytes);
    s = S.h;
    sd = S.d;
  }
  for (size_t i = 0; i < nbytes; i++)
    s[i] = (unsigned char)splitmix((uint64_t)(tag * 64 + R) * 1000003 + i);
  if (!inplace)
    bput(&S);
  bput(&Rb);
  const char *what =
      async     ? (inplace ? "iallgather_bytes in place" : "iallgather_bytes")
      : inplace ? "allgather_bytes in place"
                : "allgather_bytes";
  if (async) {
    comm_req *req;
    CALL(what,
         comm_iallgather_bytes(C, sd, Rb.d, nbytes, &req, err, sizeof err));
    CALL(what, comm_wait(C, req, err, sizeof err));
  } else {
    CALL(what, comm_allgather_bytes(C, sd, Rb.d, nbytes, err, sizeof err));
  }
  bget(&Rb);
  for (int q = 0; q < N; q++)
    for (size_t i = 0; i < nbytes; i++)
      expect(what, nbytes, (size_t)q * nbytes + i, r[(size_t)q * nbytes + i],
             (unsigned char)splitmix((uint64_t)(tag * 64 + q) * 1000003 + i));
  if (!inplace)
    bfree(&S);
  bfree(&Rb);
}

/* A sum of doubles whose small parts float32 would drop: 1 + r/1024
 * (exact in float) plus 1e-9 (r + 1), far below float32's resolution at
 * 1. A float sum is off by about 1e-9 per rank; the two-float carry is
 * not. */
static void check_allreduce_double(void) {
  double x = 1.0 + R / 1024.0 + 1e-9 * (R + 1), want = 0;
  for (int q = 0; q < N; q++)
    want += 1.0 + q / 1024.0 + 1e-9 * (q + 1);
  CALL("allreduce_double", comm_allreduce_sum_double(C, &x, err, sizeof err));
  nchecks++;
  if (fabs(x - want) > 1e-13) {
    fprintf(stderr,
            "comm_check: rank %d: allreduce_double %.15f, want %.15f\n", R,
            x, want);
    comm_abort(C, 1);
  }
}

static void check_broadcast(size_t nbytes, int tag) {
  int root = N - 1; /* not rank 0 as soon as there are two */
  buf B = balloc(nbytes);
  unsigned char *b = B.h;
  for (size_t i = 0; i < nbytes; i++)
    b[i] =
        R == root ? (unsigned char)splitmix((uint64_t)tag * 1000003 + i) : 0xEE;
  bput(&B);
  CALL("broadcast", comm_broadcast(C, B.d, nbytes, root, err, sizeof err));
  bget(&B);
  for (size_t i = 0; i < nbytes; i++)
    expect("broadcast", nbytes, i, b[i],
           (unsigned char)splitmix((uint64_t)tag * 1000003 + i));
  bfree(&B);
}

/* Six requests of three kinds in flight at once, waited for in an order
 * that differs from rank to rank. */
static void check_async(size_t n, int tag) {
  enum { K = 6 };
  buf in[K], out[K];
  comm_req *req[K];
  for (int k = 0; k < K; k++) {
    int t = tag + k;
    switch (k % 3) {
    case 0: /* allreduce */
      in[k] = balloc(n * sizeof(float));
      fill((float *)in[k].h, R, t, n);
      bput(&in[k]);
      CALL("iallreduce", comm_iallreduce_sum(C, (float *)in[k].d, n, &req[k],
                                             err, sizeof err));
      break;
    case 1: /* reduce-scatter */
      in[k] = balloc(n * N * sizeof(float));
      out[k] = balloc(n * sizeof(float));
      fill((float *)in[k].h, R, t, n * N);
      bput(&in[k]);
      CALL("ireduce_scatter",
           comm_ireduce_scatter_sum(C, (float *)in[k].d, (float *)out[k].d, n,
                                    &req[k], err, sizeof err));
      break;
    default: { /* allgather, in place for odd k/3 */
      float *sd;
      out[k] = balloc(n * N * sizeof(float));
      if (k / 3) {
        fill((float *)out[k].h + (size_t)R * n, R, t, n);
        bput(&out[k]);
        sd = (float *)out[k].d + (size_t)R * n;
      } else {
        in[k] = balloc(n * sizeof(float));
        fill((float *)in[k].h, R, t, n);
        bput(&in[k]);
        sd = (float *)in[k].d;
      }
      CALL("iallgather", comm_iallgather(C, sd, (float *)out[k].d, n, &req[k],
                                         err, sizeof err));
      break;
    }
    }
  }
  /* Rank-dependent order: a rotation, reversed on odd ranks. */
  for (int j = 0; j < K; j++) {
    int k = (R % 2 ? K - 1 - j : j);
    k = (k + R) % K;
    CALL("wait", comm_wait(C, req[k], err, sizeof err));
  }
  for (int k = 0; k < K; k++) {
    int t = tag + k;
    switch (k % 3) {
    case 0: {
      bget(&in[k]);
      float *b = (float *)in[k].h;
      for (size_t i = 0; i < n; i++)
        expect("iallreduce", n, i, b[i], sum(t, i));
      bfree(&in[k]);
      break;
    }
    case 1: {
      bget(&out[k]);
      float *o = (float *)out[k].h;
      for (size_t i = 0; i < n; i++)
        expect("ireduce_scatter", n, i, o[i], sum(t, (size_t)R * n + i));
      bfree(&in[k]);
      bfree(&out[k]);
      break;
    }
    default: {
      bget(&out[k]);
      float *o = (float *)out[k].h;
      for (int q = 0; q < N; q++)
        for (size_t i = 0; i < n; i++)
          expect("iallgather", n, i, o[(size_t)q * n + i], val(q, t, i));
      if (!(k / 3))
        bfree(&in[k]);
      bfree(&out[k]);
      break;
    }
    }
  }
}

/* comm_test: an allreduce polled to completion while this rank "computes"
 * (ZeRO's overlap), and a reduce-scatter polled once, then waited for. */
static void check_test(size_t n, int tag) {
  buf A = balloc(n * sizeof(float)), S = balloc(n * N * sizeof(float)),
      Rb = balloc(n * sizeof(float));
  float *a = (float *)A.h, *r = (float *)Rb.h;
  fill(a, R, tag, n);
  fill((float *)S.h, R, tag + 1, n * N);
  bput(&A);
  bput(&S);
  comm_req *ra, *rs;
  CALL("iallreduce",
       comm_iallreduce_sum(C, (float *)A.d, n, &ra, err, sizeof err));
  CALL("ireduce_scatter",
       comm_ireduce_scatter_sum(C, (float *)S.d, (float *)Rb.d, n, &rs, err,
                                sizeof err));
  int done = 0;
  long polls = 0;
  volatile double work = 0;
  while (!done) {
    for (int i = 0; i < 1000; i++)
      work += i * 0.5;
    CALL("test", comm_test(C, ra, &done, err, sizeof err));
    polls++;
  }
  CALL("test", comm_test(C, rs, &done, err, sizeof err));
  if (!done)
    CALL("wait", comm_wait(C, rs, err, sizeof err));
  bget(&A);
  bget(&Rb);
  for (size_t i = 0; i < n; i++)
    expect("iallreduce polled with comm_test", n, i, a[i], sum(tag, i));
  for (size_t i = 0; i < n; i++)
    expect("ireduce_scatter after comm_test", n, i, r[i],
           sum(tag + 1, (size_t)R * n + i));
  bfree(&A);
  bfree(&S);
  bfree(&Rb);
}

/* COMM_MAX_INFLIGHT requests in flight: one more is refused with a clear
 * message (and the communicator stays usable), a blocking call still
 * works, and all of them complete. */
static void check_inflight_limit(int tag) {
  /* v[0..K) the requests' floats, v[K] the refused one's, v[K+1] the
   * blocking call's. */
  enum { K = COMM_MAX_INFLIGHT };
  buf V = balloc((K + 2) * sizeof(float));
  float *v = (float *)V.h, *vd = (float *)V.d;
  comm_req *req[K], *extra = NULL;
  for (int k = 0; k < K; k++)
    v[k] = val(R, tag + k, 0);
  v[K] = 1;
  v[K + 1] = val(R, tag + 100, 0);
  bput(&V);
  for (int k = 0; k < K; k++)
    CALL("iallreduce",
         comm_iallreduce_sum(C, vd + k, 1, &req[k], err, sizeof err));
  if (comm_iallreduce_sum(C, vd + K, 1, &extra, err, sizeof err) == 0 ||
      !strstr(err, "in flight")) {
    fprintf(stderr,
            "comm_check: rank %d: request %d of %d was not refused (%s)\n", R,
            K + 1, K, err);
    comm_abort(C, 1);
  }
  nchecks++;
  CALL("allreduce with requests in flight",
       comm_allreduce_sum(C, vd + K + 1, 1, err, sizeof err));
  for (int j = 0; j < K; j++) {
    int k = (j * 7 + R) % K; /* 7 is prime to 16 */
    CALL("wait", comm_wait(C, req[k], err, sizeof err));
  }
  bget(&V);
  expect("allreduce with requests in flight", 1, 0, v[K + 1],
         sum(tag + 100, 0));
  for (int k = 0; k < K; k++)
    expect("iallreduce (16 in flight)", 1, (size_t)k, v[k], sum(tag + k, 0));
  bfree(&V);
}

/* Byte i of rank r's message tag: what any rank can compute. */
static unsigned char pbyte(int r, int tag, size_t i) {
  return (unsigned char)splitmix((uint64_t)(tag * 64 + r) * 1000003 + i);
}

static buf pfill(size_t bytes, int r, int tag) {
  buf b = balloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    b.h[i] = pbyte(r, tag, i);
  bput(&b);
  return b;
}

/* b holds rank r's message tag (b's device copy read back first). */
static void pexpect(const char *what, buf *b, int r, int tag) {
  bget(b);
  for (size_t i = 0; i < b->bytes; i++)
    expect(what, b->bytes, i, b->h[i], pbyte(r, tag, i));
}

/* Point to point, nbytes a message: around a ring, each rank sends two
 * messages to the next (isend, both in flight) and receives two from the
 * one before, in order (the isends cross the neighbours' on their way:
 * NCCL must not deadlock); then the recvs posted first (irecv) and the
 * sends after, completed by polling (comm_test); then once more with the
 * blocking calls. One rank: the clear refusal instead, and the
 * communicator stays usable. */
static void check_p2p(size_t nbytes, int tag) {
  if (N == 1) {
    float x = 0;
    if (comm_send(C, &x, sizeof x, 0, err, sizeof err) == 0 ||
        !strstr(err, "peer 0 is not another rank")) {
      fprintf(stderr, "comm_check: rank %d: send to itself not refused (%s)\n",
              R, err);
      comm_abort(C, 1);
    }
    nchecks++;
    CALL("barrier after a refused send", comm_barrier(C, err, sizeof err));
    return;
  }
  int next = (R + 1) % N, prev = (R + N - 1) % N;
  comm_stats_reset(C);
  buf s0 = pfill(nbytes, R, tag), s1 = pfill(nbytes, R, tag + 1),
      r0 = balloc(nbytes), r1 = balloc(nbytes);
  comm_req *q[4];
  CALL("isend", comm_isend(C, s0.d, nbytes, next, &q[0], err, sizeof err));
  CALL("isend", comm_isend(C, s1.d, nbytes, next, &q[1], err, sizeof err));
  CALL("recv", comm_recv(C, r0.d, nbytes, prev, err, sizeof err));
  CALL("recv", comm_recv(C, r1.d, nbytes, prev, err, sizeof err));
  CALL("wait", comm_wait(C, q[1], err, sizeof err));
  CALL("wait", comm_wait(C, q[0], err, sizeof err));
  pexpect("recv (first of two)", &r0, prev, tag);
  pexpect("recv (second of two)", &r1, prev, tag + 1);

  CALL("irecv", comm_irecv(C, r1.d, nbytes, prev, &q[0], err, sizeof err));
  CALL("irecv", comm_irecv(C, r0.d, nbytes, prev, &q[1], err, sizeof err));
  CALL("isend", comm_isend(C, s1.d, nbytes, next, &q[2], err, sizeof err));
  CALL("isend", comm_isend(C, s0.d, nbytes, next, &q[3], err, sizeof err));
  for (int left = 4; left > 0;)
    for (int k = 0; k < 4; k++) {
      int done = 0;
      if (q[k] && comm_test(C, q[k], &done, err, sizeof err) != 0)
        die("test of a send or recv");
      if (done)
        q[k] = NULL, left--;
    }
  pexpect("irecv (first of two)", &r1, prev, tag + 1);
  pexpect("irecv (second of two)", &r0, prev, tag);

  /* Blocking, around the ring: even ranks send first, odd ones receive
   * first, so that every send meets its recv. */
  if (R % 2 == 0)
    CALL("send", comm_send(C, s1.d, nbytes, next, err, sizeof err));
  CALL("recv", comm_recv(C, r0.d, nbytes, prev, err, sizeof err));
  if (R % 2 == 1)
    CALL("send", comm_send(C, s1.d, nbytes, next, err, sizeof err));
  pexpect("blocking recv", &r0, prev, tag + 1);
  /* Per kind: five sends and five recvs of nbytes each. */
  comm_stats st;
  memset(&st, 0, sizeof st);
  comm_stats_add(C, &st);
  for (int k = COMM_KIND_SEND; k <= COMM_KIND_RECV; k++) {
    expect("comm_stats calls", 1, (size_t)k, (float)st.calls[k], 5);
    expect("comm_stats bytes", 1, (size_t)k, (float)st.bytes[k],
           (float)(5.0 * (double)nbytes));
  }
  bfree(&s0);
  bfree(&s1);
  bfree(&r0);
  bfree(&r1);
}

/* x summed over c's ranks, through a buffer of the backend's memory. */
static float allreduce1(comm *c, float x, const char *what) {
  buf B = balloc(sizeof x);
  memcpy(B.h, &x, sizeof x);
  bput(&B);
  if (comm_allreduce_sum(c, (float *)B.d, 1, err, sizeof err) != 0)
    die(what);
  bget(&B);
  memcpy(&x, B.h, sizeof x);
  bfree(&B);
  return x;
}

/* comm_split: the ranks of each parity, ordered backwards (key -R):
 * each sub-communicator's size, this rank's place in it, a sum over it
 * only, a sum over the parent while it exists, and a message around its
 * ring (isend crossing the neighbours', then recv); then the parent still
 * works. A negative color is refused. */
static void check_split(int tag) {
  comm *sub = NULL;
  if (comm_split(C, -1, 0, &sub, err, sizeof err) == 0 ||
      !strstr(err, "color -1 is negative")) {
    fprintf(stderr, "comm_check: rank %d: split color -1 not refused (%s)\n", R,
            err);
    comm_abort(C, 1);
  }
  nchecks++;
  CALL("split", comm_split(C, R % 2, -R, &sub, err, sizeof err));
  int size = (N - R % 2 + 1) / 2, want = (N - 1 - R) / 2;
  if (comm_size(sub) != size || comm_rank(sub) != want) {
    fprintf(stderr,
            "comm_check: rank %d: split gave rank %d of %d, not %d of %d\n", R,
            comm_rank(sub), comm_size(sub), want, size);
    comm_abort(C, 1);
  }
  float half = 0, all = (float)N * (float)(N - 1) / 2;
  for (int r = R % 2; r < N; r += 2)
    half += (float)r;
  expect("allreduce on the split", 1, 0,
         allreduce1(sub, (float)R, "allreduce on the split"), half);
  expect("allreduce on the parent beside the split", 1, 0,
         allreduce1(C, (float)R, "allreduce on the parent"), all);
  if (size > 1) {
    /* sub's rank k is parent rank N-1-... of this parity: the message's
     * sender is named by its parent rank, which the data encodes. */
    int sr = comm_rank(sub), next = (sr + 1) % size,
        prev = (sr + size - 1) % size;
    int prev_parent = R + 2 * (sr - prev); /* ranks backwards: -2 per step */
    buf S = pfill(1001, R, tag), Rv = balloc(1001);
    comm_req *q;
    CALL("isend on the split",
         comm_isend(sub, S.d, 1001, next, &q, err, sizeof err));
    CALL("recv on the split",
         comm_recv(sub, Rv.d, 1001, prev, err, sizeof err));
    CALL("wait on the split", comm_wait(sub, q, err, sizeof err));
    pexpect("recv on the split", &Rv, prev_parent, tag);
    bfree(&S);
    bfree(&Rv);
  } else {
    nchecks += 1001; /* the byte checks the others did: equal counts */
  }
  comm_destroy(sub);
  CALL("barrier after the split", comm_barrier(C, err, sizeof err));
}

/* failure_mode's point-to-point and split part: the call that must
 * fail, and the message if it returned. */
static int p2p_split_failure(const char *mode) {
  buf B = pfill(1000, R, 1);
  const char *what = "recv";
  int rc;
  if (!strcmp(mode, "split-kill")) {
    if (R == N - 1)
      raise(SIGKILL);
    comm *sub = NULL;
    what = "split";
    rc = comm_split(C, R % 2, R, &sub, err, sizeof err);
  } else if (!strcmp(mode, "recv-kill")) {
    if (R == N - 1)
      raise(SIGKILL);
    rc = comm_recv(C, B.d, 1000, N - 1, err, sizeof err);
  } else if (R < 2) {
    what = R == 0 ? "send" : "recv";
    rc = R == 0 ? comm_send(C, B.d, 1000, 1, err, sizeof err)
                : comm_recv(C, B.d, 999, 0, err, sizeof err);
  } else {
    what = "barrier";
    rc = comm_barrier(C, err, sizeof err);
  }
  if (rc != 0)
    die(what);
  fprintf(stderr,
          "comm_check: rank %d: the %s returned, with a rank gone or sizes "
          "that differ\n",
          R, what);
  return 1;
}

static int failure_mode(const char *mode) {
  CALL("barrier", comm_barrier(C, err, sizeof err));
  size_t n = 1000;
  if (!strcmp(mode, "host-buffer")) {
    float *h = xmalloc(n * sizeof *h);
    fill(h, R, 1, n);
    int rc = comm_allreduce_sum(C, h, n, err, sizeof err);
    free(h);
    if (rc == 0 || !DEV) {
      fprintf(stderr, "comm_check: rank %d: host buffer taken\n", R);
      return 1;
    }
    fprintf(stderr, "comm_check: rank %d: host buffer refused: %s\n", R, err);
    comm_destroy(C); /* broken: aborted, not finalized */
    return 0;
  }
  if (!strcmp(mode, "recv-kill") || !strcmp(mode, "p2p-mismatch") ||
      !strcmp(mode, "split-kill"))
    return p2p_split_failure(mode);
  if (R == N - 1 && N > 1) {
    if (!strcmp(mode, "die-kill"))
      raise(SIGKILL);
    else if (!strcmp(mode, "die-exit"))
      _exit(0);
    else if (!strcmp(mode, "abort"))
      comm_abort(C, 4);
    else if (!strcmp(mode, "leave")) {
      comm_destroy(C);
      exit(0);
    } else if (!strcmp(mode, "mismatch"))
      n = 999;
    else
      sleep(60);
  }
  buf B = balloc(1000 * sizeof(float));
  fill((float *)B.h, R, 1, 1000);
  bput(&B);
  if (comm_allreduce_sum(C, (float *)B.d, n, err, sizeof err) != 0)
    die("allreduce");
  fprintf(stderr,
          "comm_check: rank %d: the allreduce returned, with a rank "
          "gone\n",
          R);
  return 1;
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "mpi";
  const char *mode = argc > 2 ? argv[2] : "all";
  comm_config cfg = {0};
  int known = 1;
  if (!strcmp(backend, "mpi"))
    cfg.backend = COMM_MPI;
  else if (!strcmp(backend, "self"))
    cfg.backend = COMM_SELF;
#ifdef DAGRUN_COMM_CHECK_CUDA
  else if (!strcmp(backend, "nccl"))
    cfg.backend = COMM_NCCL;
#endif
  else
    known = 0;
  static const char *modes[] = {"all",          "die-kill",    "die-exit",
                                "hang",         "abort",       "leave",
                                "mismatch",     "host-buffer", "recv-kill",
                                "p2p-mismatch", "split-kill"};
  int known_mode = 0;
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    known_mode |= !strcmp(mode, modes[i]);
  if (!known || !known_mode) {
    fprintf(stderr,
            "usage: comm_check mpi|self%s [all|die-kill|die-exit|hang|abort|"
            "leave|mismatch|host-buffer|recv-kill|p2p-mismatch|split-kill]\n",
#ifdef DAGRUN_COMM_CHECK_CUDA
            "|nccl"
#else
            " (this build has no nccl: comm_check_emulated or a CUDA "
            "build's has)"
#endif
    );
    return 2;
  }
  DEV = cfg.backend == COMM_NCCL;
  const char *t = getenv("COMM_CHECK_TIMEOUT");
  cfg.timeout_s = t ? atof(t) : 60;
  /* nccl without mpirun: the rendezvous directory, rank and size given. */
  cfg.device = -1;
  const char *rdv = getenv("COMM_CHECK_RENDEZVOUS");
  if (DEV && rdv && *rdv) {
    const char *rk = getenv("COMM_CHECK_RANK"), *sz = getenv("COMM_CHECK_SIZE");
    cfg.rendezvous_dir = rdv;
    cfg.rank = rk ? atoi(rk) : -1;
    cfg.size = sz ? atoi(sz) : 0;
  }
  if (comm_create(&cfg, &C, err, sizeof err) != 0) {
    fprintf(stderr, "comm_check: %s\n", err);
    return 2;
  }
  R = comm_rank(C);
  N = comm_size(C);
  if (strcmp(mode, "all") != 0)
    return failure_mode(mode);

  static const size_t sizes[] = {1, 7, 1000, 1000003};
  int tag = 1;
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k];
    check_allreduce(n, tag++);
    check_reduce_scatter(n, tag++);
    check_reduce(n, tag);
    tag += N;
    check_allgather(n, tag++, 0);
    check_allgather(n, tag++, 1);
    check_broadcast(n * sizeof(float) + 3, tag++);
    for (int async = 0; async < 2; async++) {
      check_allgather_bytes(n * 2 + 1, tag++, 0, async);
      check_allgather_bytes(n * 2 + 1, tag++, 1, async);
    }
    CALL("barrier", comm_barrier(C, err, sizeof err));
    check_async(n, tag);
    tag += 6;
    check_test(n, tag);
    tag += 2;
    /* 1 byte, then odd sizes up to 4 MB (more than one of the emulated
     * NCCL's 1 MiB slots). */
    check_p2p(k == 0 ? 1 : n * sizeof(float) + 3, tag);
    tag += 2;
  }
  check_allreduce(0, tag++); /* nothing to do, but it must work */
  /* comm_allreduce_sum_double takes host memory: not for NCCL. */
  if (!DEV)
    check_allreduce_double();
  check_inflight_limit(tag);
  tag += 200;
  check_split(tag++);
  CALL("barrier", comm_barrier(C, err, sizeof err));

  /* Every rank did the same checks: sum their counts as a last check. */
  float mine = (float)(nchecks % 4096); /* exact in float */
  buf All = balloc(sizeof(float));
  memcpy(All.h, &mine, sizeof mine);
  bput(&All);
  CALL("allreduce", comm_allreduce_sum(C, (float *)All.d, 1, err, sizeof err));
  bget(&All);
  float all;
  memcpy(&all, All.h, sizeof all);
  bfree(&All);
  if (all != mine * (float)N) {
    fprintf(stderr, "comm_check: rank %d: ranks did unequal work\n", R);
    comm_abort(C, 1);
  }
  if (R == 0)
    printf("comm_check: %s size %d: ok (%ld checks per rank)\n",
           comm_backend_name(comm_backend_of(C)), N, nchecks);
  comm_destroy(C);
  return 0;
}
