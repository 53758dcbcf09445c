/*
 * comm_check: every collective of gpu/comm/comm.h checked against values
 * each rank computes alone. Run under mpirun (tests/integration/
 * test_comm.sh) or alone:
 *
 *   comm_check mpi|self [all|die-kill|die-exit|hang]
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
 * (hang), while the others enter an allreduce. A survivor that sees the
 * call fail prints "comm_check: rank R: <error>" and aborts the gang
 * (comm_abort, exit code 3).
 */
#include "comm.h"

#include <signal.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void check_allreduce(size_t n, int tag) {
  float *b = xmalloc(n * sizeof *b);
  fill(b, R, tag, n);
  CALL("allreduce", comm_allreduce_sum(C, b, n, err, sizeof err));
  for (size_t i = 0; i < n; i++)
    expect("allreduce", n, i, b[i], sum(tag, i));
  free(b);
}

static void check_reduce_scatter(size_t n, int tag) {
  float *s = xmalloc(n * N * sizeof *s), *r = xmalloc(n * sizeof *r);
  fill(s, R, tag, n * N);
  for (size_t i = 0; i < n; i++)
    r[i] = -999;
  CALL("reduce_scatter", comm_reduce_scatter_sum(C, s, r, n, err, sizeof err));
  for (size_t i = 0; i < n; i++)
    expect("reduce_scatter", n, i, r[i], sum(tag, (size_t)R * n + i));
  free(s);
  free(r);
}

static void check_allgather(size_t n, int tag, int inplace) {
  float *r = xmalloc(n * N * sizeof *r), *s = NULL;
  for (size_t i = 0; i < n * N; i++)
    r[i] = -999;
  if (inplace) {
    s = r + (size_t)R * n;
    fill(s, R, tag, n);
  } else {
    s = xmalloc(n * sizeof *s);
    fill(s, R, tag, n);
  }
  const char *what = inplace ? "allgather in place" : "allgather";
  CALL(what, comm_allgather(C, s, r, n, err, sizeof err));
  for (int q = 0; q < N; q++)
    for (size_t i = 0; i < n; i++)
      expect(what, n, (size_t)q * n + i, r[(size_t)q * n + i], val(q, tag, i));
  if (!inplace)
    free(s);
  free(r);
}

/* Bytes of an odd count (BF16 parameters are 2 bytes each; any count
 * must work), in place or not. */
static void check_allgather_bytes(size_t nbytes, int tag, int inplace) {
  unsigned char *r = xmalloc(nbytes * N), *s;
  memset(r, 0xEE, nbytes * N);
  s = inplace ? r + (size_t)R * nbytes : xmalloc(nbytes);
  for (size_t i = 0; i < nbytes; i++)
    s[i] = (unsigned char)splitmix((uint64_t)(tag * 64 + R) * 1000003 + i);
  const char *what = inplace ? "allgather_bytes in place" : "allgather_bytes";
  CALL(what, comm_allgather_bytes(C, s, r, nbytes, err, sizeof err));
  for (int q = 0; q < N; q++)
    for (size_t i = 0; i < nbytes; i++)
      expect(what, nbytes, (size_t)q * nbytes + i, r[(size_t)q * nbytes + i],
             (unsigned char)splitmix((uint64_t)(tag * 64 + q) * 1000003 + i));
  if (!inplace)
    free(s);
  free(r);
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
  unsigned char *b = xmalloc(nbytes);
  for (size_t i = 0; i < nbytes; i++)
    b[i] =
        R == root ? (unsigned char)splitmix((uint64_t)tag * 1000003 + i) : 0xEE;
  CALL("broadcast", comm_broadcast(C, b, nbytes, root, err, sizeof err));
  for (size_t i = 0; i < nbytes; i++)
    expect("broadcast", nbytes, i, b[i],
           (unsigned char)splitmix((uint64_t)tag * 1000003 + i));
  free(b);
}

/* Six requests of three kinds in flight at once, waited for in an order
 * that differs from rank to rank. */
static void check_async(size_t n, int tag) {
  enum { K = 6 };
  float *buf[K], *out[K];
  comm_req *req[K];
  for (int k = 0; k < K; k++) {
    int t = tag + k;
    switch (k % 3) {
    case 0: /* allreduce */
      buf[k] = xmalloc(n * sizeof(float));
      fill(buf[k], R, t, n);
      out[k] = NULL;
      CALL("iallreduce",
           comm_iallreduce_sum(C, buf[k], n, &req[k], err, sizeof err));
      break;
    case 1: /* reduce-scatter */
      buf[k] = xmalloc(n * N * sizeof(float));
      out[k] = xmalloc(n * sizeof(float));
      fill(buf[k], R, t, n * N);
      CALL("ireduce_scatter",
           comm_ireduce_scatter_sum(C, buf[k], out[k], n, &req[k], err,
                                    sizeof err));
      break;
    default: /* allgather, in place for odd k/3 */
      out[k] = xmalloc(n * N * sizeof(float));
      if (k / 3) {
        buf[k] = out[k] + (size_t)R * n;
      } else {
        buf[k] = xmalloc(n * sizeof(float));
      }
      fill(buf[k], R, t, n);
      CALL("iallgather",
           comm_iallgather(C, buf[k], out[k], n, &req[k], err, sizeof err));
      break;
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
    case 0:
      for (size_t i = 0; i < n; i++)
        expect("iallreduce", n, i, buf[k][i], sum(t, i));
      free(buf[k]);
      break;
    case 1:
      for (size_t i = 0; i < n; i++)
        expect("ireduce_scatter", n, i, out[k][i], sum(t, (size_t)R * n + i));
      free(buf[k]);
      free(out[k]);
      break;
    default:
      for (int q = 0; q < N; q++)
        for (size_t i = 0; i < n; i++)
          expect("iallgather", n, i, out[k][(size_t)q * n + i], val(q, t, i));
      if (!(k / 3))
        free(buf[k]);
      free(out[k]);
      break;
    }
  }
}

/* comm_test: an allreduce polled to completion while this rank "computes"
 * (ZeRO's overlap), and a reduce-scatter polled once, then waited for. */
static void check_test(size_t n, int tag) {
  float *a = xmalloc(n * sizeof *a), *s = xmalloc(n * N * sizeof *s),
        *r = xmalloc(n * sizeof *r);
  fill(a, R, tag, n);
  fill(s, R, tag + 1, n * N);
  comm_req *ra, *rs;
  CALL("iallreduce", comm_iallreduce_sum(C, a, n, &ra, err, sizeof err));
  CALL("ireduce_scatter",
       comm_ireduce_scatter_sum(C, s, r, n, &rs, err, sizeof err));
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
  for (size_t i = 0; i < n; i++)
    expect("iallreduce polled with comm_test", n, i, a[i], sum(tag, i));
  for (size_t i = 0; i < n; i++)
    expect("ireduce_scatter after comm_test", n, i, r[i],
           sum(tag + 1, (size_t)R * n + i));
  free(a);
  free(s);
  free(r);
}

/* COMM_MAX_INFLIGHT requests in flight: one more is refused with a clear
 * message (and the communicator stays usable), a blocking call still
 * works, and all of them complete. */
static void check_inflight_limit(int tag) {
  float v[COMM_MAX_INFLIGHT];
  comm_req *req[COMM_MAX_INFLIGHT], *extra = NULL;
  for (int k = 0; k < COMM_MAX_INFLIGHT; k++) {
    v[k] = val(R, tag + k, 0);
    CALL("iallreduce",
         comm_iallreduce_sum(C, &v[k], 1, &req[k], err, sizeof err));
  }
  float w = 1;
  if (comm_iallreduce_sum(C, &w, 1, &extra, err, sizeof err) == 0 ||
      !strstr(err, "in flight")) {
    fprintf(stderr,
            "comm_check: rank %d: request %d of %d was not refused (%s)\n", R,
            COMM_MAX_INFLIGHT + 1, COMM_MAX_INFLIGHT, err);
    comm_abort(C, 1);
  }
  nchecks++;
  float b = val(R, tag + 100, 0);
  CALL("allreduce with requests in flight",
       comm_allreduce_sum(C, &b, 1, err, sizeof err));
  expect("allreduce with requests in flight", 1, 0, b, sum(tag + 100, 0));
  for (int j = 0; j < COMM_MAX_INFLIGHT; j++) {
    int k = (j * 7 + R) % COMM_MAX_INFLIGHT; /* 7 is prime to 16 */
    CALL("wait", comm_wait(C, req[k], err, sizeof err));
  }
  for (int k = 0; k < COMM_MAX_INFLIGHT; k++)
    expect("iallreduce (16 in flight)", 1, (size_t)k, v[k], sum(tag + k, 0));
}

static int failure_mode(const char *mode) {
  CALL("barrier", comm_barrier(C, err, sizeof err));
  if (R == N - 1 && N > 1) {
    if (!strcmp(mode, "die-kill"))
      raise(SIGKILL);
    else if (!strcmp(mode, "die-exit"))
      _exit(0);
    else
      sleep(60);
  }
  float b[1000];
  fill(b, R, 1, 1000);
  if (comm_allreduce_sum(C, b, 1000, err, sizeof err) != 0)
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
  if (!strcmp(backend, "mpi"))
    cfg.backend = COMM_MPI;
  else if (!strcmp(backend, "self"))
    cfg.backend = COMM_SELF;
  else {
    fprintf(stderr,
            "usage: comm_check mpi|self [all|die-kill|die-exit|hang]\n");
    return 2;
  }
  const char *t = getenv("COMM_CHECK_TIMEOUT");
  cfg.timeout_s = t ? atof(t) : 60;
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
    check_allgather(n, tag++, 0);
    check_allgather(n, tag++, 1);
    check_broadcast(n * sizeof(float) + 3, tag++);
    check_allgather_bytes(n * 2 + 1, tag++, 0);
    check_allgather_bytes(n * 2 + 1, tag++, 1);
    CALL("barrier", comm_barrier(C, err, sizeof err));
    check_async(n, tag);
    tag += 6;
    check_test(n, tag);
    tag += 2;
  }
  check_allreduce(0, tag++); /* nothing to do, but it must work */
  check_allreduce_double();
  check_inflight_limit(tag);
  tag += 200;
  CALL("barrier", comm_barrier(C, err, sizeof err));

  /* Every rank did the same checks: sum their counts as a last check. */
  float mine = (float)(nchecks % 4096), all = mine; /* exact in float */
  CALL("allreduce", comm_allreduce_sum(C, &all, 1, err, sizeof err));
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
