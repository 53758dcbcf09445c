/*
 * comm.c: the communicator, argument checks, request slots and the wait
 * loop with its timeout, shared by every backend; and the "self" backend
 * (one rank, no library).
 */
#include "comm_impl.h"
#include "lib/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void comm_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

const char *comm_backend_name(comm_backend b) {
  switch (b) {
  case COMM_SELF:
    return "self";
  case COMM_MPI:
    return "mpi";
  case COMM_NCCL:
    return "nccl";
  }
  return "unknown";
}

int comm_backend_available(comm_backend b) {
  switch (b) {
  case COMM_SELF:
  case COMM_MPI:
    return 1;
  case COMM_NCCL:
#ifdef DAGRUN_COMM_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
  }
  return 0;
}

const char *comm_op_name(comm_op op) {
  switch (op) {
  case COMM_OP_ALLREDUCE:
    return "allreduce";
  case COMM_OP_REDUCE_SCATTER:
    return "reduce_scatter";
  case COMM_OP_REDUCE:
    return "reduce";
  case COMM_OP_ALLGATHER:
    return "allgather";
  case COMM_OP_ALLGATHER_BYTES:
    return "allgather_bytes";
  case COMM_OP_BROADCAST:
    return "broadcast";
  case COMM_OP_BARRIER:
    return "barrier";
  case COMM_OP_SEND:
    return "send";
  case COMM_OP_RECV:
    return "recv";
  }
  return "?";
}

static const char *const kind_names[COMM_NKINDS] = {
    "allreduce", "reduce",  "reduce_scatter", "allgather",
    "broadcast", "barrier", "send",           "recv"};

const char *comm_kind_name(comm_kind k) {
  return k >= 0 && k < COMM_NKINDS ? kind_names[k] : "?";
}

static comm_kind kind_of(comm_op op) {
  switch (op) {
  case COMM_OP_ALLREDUCE:
    return COMM_KIND_ALLREDUCE;
  case COMM_OP_REDUCE:
    return COMM_KIND_REDUCE;
  case COMM_OP_REDUCE_SCATTER:
    return COMM_KIND_REDUCE_SCATTER;
  case COMM_OP_ALLGATHER:
  case COMM_OP_ALLGATHER_BYTES:
    return COMM_KIND_ALLGATHER;
  case COMM_OP_BROADCAST:
    return COMM_KIND_BROADCAST;
  case COMM_OP_BARRIER:
    return COMM_KIND_BARRIER;
  case COMM_OP_SEND:
    return COMM_KIND_SEND;
  case COMM_OP_RECV:
    break;
  }
  return COMM_KIND_RECV;
}

/* The operation's buffer as its caller sees it (comm.h's comm_stats). */
static double op_bytes(const comm *c, comm_op op, size_t n) {
  switch (op) {
  case COMM_OP_ALLREDUCE:
  case COMM_OP_REDUCE:
    return 4.0 * (double)n;
  case COMM_OP_REDUCE_SCATTER:
  case COMM_OP_ALLGATHER:
    return 4.0 * (double)n * c->size;
  case COMM_OP_ALLGATHER_BYTES:
    return (double)n * c->size;
  default:
    return (double)n;
  }
}

void comm_stats_add(const comm *c, comm_stats *sum) {
  if (!c)
    return;
  for (int k = 0; k < COMM_NKINDS; k++) {
    sum->seconds[k] += c->stats.seconds[k];
    sum->bytes[k] += c->stats.bytes[k];
    sum->calls[k] += c->stats.calls[k];
  }
}

void comm_stats_reset(comm *c) { memset(&c->stats, 0, sizeof c->stats); }

void comm_backoff(unsigned *iter) {
  /* Poll without pausing for a short while (small messages finish in
   * microseconds), then sleep 10 us, 20 us, ... up to 1 ms: ranks that
   * share cores with each other (oversubscribed CPU runs) must leave the
   * core to the rank that has work. */
  unsigned i = (*iter)++;
  if (i < 64)
    return;
  long ns = 10000L << ((i - 64) / 16 < 7 ? (i - 64) / 16 : 7);
  if (ns > 1000000L)
    ns = 1000000L;
  struct timespec ts = {0, ns};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- self: one rank ---------------------------------------------------- */

static int self_start(comm *c, int slot, comm_op op, const void *send,
                      void *recv, size_t n, int root, char *err,
                      size_t errlen) {
  (void)c, (void)slot, (void)root, (void)err, (void)errlen;
  switch (op) {
  case COMM_OP_REDUCE_SCATTER:
  case COMM_OP_REDUCE:
  case COMM_OP_ALLGATHER:
    /* One rank: the sum and the gather are the rank's own data. */
    if (send != recv && n > 0)
      memmove(recv, send, n * sizeof(float));
    break;
  case COMM_OP_ALLGATHER_BYTES:
    if (send != recv && n > 0)
      memmove(recv, send, n);
    break;
  case COMM_OP_ALLREDUCE:
  case COMM_OP_BROADCAST:
  case COMM_OP_BARRIER:
    break;
  case COMM_OP_SEND:
  case COMM_OP_RECV:
    break; /* start() refused them: one rank has no peer */
  }
  return 0;
}

static int self_test(comm *c, int slot, char *err, size_t errlen) {
  (void)c, (void)slot, (void)err, (void)errlen;
  return 1;
}

__attribute__((noreturn)) static void self_abort(comm *c, int code) {
  (void)c;
  exit(code);
}

static void self_destroy(comm *c, int broken) { (void)c, (void)broken; }

static const comm_ops self_ops = {self_start, self_test, self_abort,
                                  self_destroy};

/* ---- the communicator --------------------------------------------------- */

/* A communicator of backend b with its request slots, the self backend's
 * ops until the backend's constructor sets its own. NULL with err. */
static comm *comm_alloc(comm_backend b, double timeout_s, char *err,
                        size_t errlen) {
  comm *c = calloc(1, sizeof *c);
  if (!c) {
    comm_seterr(err, errlen, "comm %s: out of memory", comm_backend_name(b));
    return NULL;
  }
  c->backend = b;
  c->device = -1;
  c->timeout_s = timeout_s > 0 ? timeout_s : 300.0;
  c->ops = &self_ops;
  c->rank = 0;
  c->size = 1;
  for (int i = 0; i < COMM_NSLOTS; i++) {
    c->req[i].c = c;
    c->req[i].slot = i;
  }
  return c;
}

int comm_create(const comm_config *cfg, comm **out, char *err, size_t errlen) {
  *out = NULL;
  if (!cfg) {
    comm_seterr(err, errlen, "comm: no configuration");
    return -1;
  }
  if (cfg->timeout_s < 0) {
    comm_seterr(err, errlen, "comm %s: timeout_s %g is negative",
           comm_backend_name(cfg->backend), cfg->timeout_s);
    return -1;
  }
  comm *c = comm_alloc(cfg->backend, cfg->timeout_s, err, errlen);
  if (!c)
    return -1;
  int rc = -1;
  switch (cfg->backend) {
  case COMM_SELF:
    rc = 0;
    break;
  case COMM_MPI:
    rc = comm_mpi_create(c, cfg, err, errlen);
    break;
  case COMM_NCCL:
#ifdef DAGRUN_COMM_HAVE_NCCL
    rc = comm_nccl_create(c, cfg, err, errlen);
#else
    comm_seterr(err, errlen,
           "comm nccl: this dagrun was built without NCCL (no CUDA toolkit "
           "or no nccl.h/libnccl found at build time, or DAGRUN_NCCL=OFF); "
           "use the mpi or self backend, or rebuild where CUDA and NCCL are "
           "installed");
#endif
    break;
  default:
    comm_seterr(err, errlen, "comm: unknown backend %d", (int)cfg->backend);
    break;
  }
  if (rc != 0) {
    free(c);
    return -1;
  }
  *out = c;
  return 0;
}

int comm_split(comm *c, int color, int key, comm **out, char *err,
               size_t errlen) {
  *out = NULL;
  const char *bn = comm_backend_name(c->backend);
  if (color < 0) {
    comm_seterr(err, errlen, "comm %s: split: color %d is negative", bn, color);
    return -1;
  }
  if (c->broken) {
    comm_seterr(err, errlen,
                "comm %s: split: the communicator is unusable after an "
                "earlier failure (abort it)",
                bn);
    return -1;
  }
  comm *n = comm_alloc(c->backend, c->timeout_s, err, errlen);
  if (!n)
    return -1;
  int rc = 0;
  if (c->backend == COMM_MPI)
    rc = comm_mpi_split(c, color, key, n, err, errlen);
#ifdef DAGRUN_COMM_HAVE_NCCL
  else if (c->backend == COMM_NCCL)
    rc = comm_nccl_split(c, color, key, n, err, errlen);
#endif
  if (rc != 0) {
    free(n);
    c->broken = 1;
    return -1;
  }
  *out = n;
  return 0;
}

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->size; }
comm_backend comm_backend_of(const comm *c) { return c->backend; }

/* Checks the arguments and the communicator's state, then starts op in a
 * slot: a free async slot when async, else the blocking one. */
static int start(comm *c, int async, comm_op op, const void *send, void *recv,
                 size_t n, int root, comm_req **req, char *err, size_t errlen) {
  const char *bn = comm_backend_name(c->backend), *on = comm_op_name(op);
  if (c->broken) {
    comm_seterr(err, errlen,
           "comm %s: %s: the communicator is unusable after an earlier "
           "failure (abort it)",
           bn, on);
    return -1;
  }
  /* A reduce writes recv on its root only; a send has no recv, a recv
   * no send. */
  int p2p = op == COMM_OP_SEND || op == COMM_OP_RECV;
  int recv_used =
      op != COMM_OP_SEND && (op != COMM_OP_REDUCE || root == c->rank);
  int send_used = op != COMM_OP_BROADCAST && op != COMM_OP_RECV;
  if (n > 0 && ((recv_used && !recv) || (send_used && !send))) {
    comm_seterr(err, errlen, "comm %s: %s: NULL buffer for %zu elements", bn, on, n);
    return -1;
  }
  if (p2p && (root < 0 || root >= c->size || root == c->rank)) {
    comm_seterr(err, errlen,
                "comm %s: %s: peer %d is not another rank (rank %d of %d)", bn,
                on, root, c->rank, c->size);
    return -1;
  }
  if ((op == COMM_OP_BROADCAST || op == COMM_OP_REDUCE) &&
      (root < 0 || root >= c->size)) {
    comm_seterr(err, errlen, "comm %s: %s: root %d is not a rank (size %d)",
           bn, on, root, c->size);
    return -1;
  }
  double t0 = clock_monotonic();
  int slot = COMM_BLOCKING_SLOT;
  if (async) {
    for (slot = 0; slot < COMM_MAX_INFLIGHT && c->req[slot].used; slot++) {
    }
    if (slot == COMM_MAX_INFLIGHT) {
      comm_seterr(err, errlen,
             "comm %s: %s: %d requests already in flight (the most there may "
             "be; comm_wait some first)",
             bn, on, COMM_MAX_INFLIGHT);
      return -1;
    }
  }
  int rc = c->ops->start(c, slot, op, send, recv, n, root, err, errlen);
  if (rc != 0) {
    if (rc == -1) /* the library failed; -2: arguments refused */
      c->broken = 1;
    return -1;
  }
  c->req[slot].op = op;
  c->req[slot].used = 1;
  comm_kind k = kind_of(op);
  c->stats.calls[k]++;
  c->stats.bytes[k] += op_bytes(c, op, n);
  c->stats.seconds[k] += clock_monotonic() - t0;
  if (async)
    c->ninflight++;
  if (req)
    *req = &c->req[slot];
  return 0;
}

int comm_wait(comm *c, comm_req *req, char *err, size_t errlen) {
  if (!req || req->c != c || !req->used) {
    comm_seterr(err, errlen,
           "comm %s: wait: not a request in flight on this "
           "communicator",
           comm_backend_name(c->backend));
    return -1;
  }
  if (req->slot != COMM_BLOCKING_SLOT)
    c->ninflight--;
  req->used = 0;
  if (c->broken) {
    comm_seterr(err, errlen,
           "comm %s: %s: the communicator is unusable after an earlier "
           "failure (abort it)",
           comm_backend_name(c->backend), comm_op_name(req->op));
    return -1;
  }
  double t0 = clock_monotonic();
  unsigned iter = 0;
  for (;;) {
    int rc = c->ops->test(c, req->slot, err, errlen);
    if (rc == 1) {
      c->stats.seconds[kind_of(req->op)] += clock_monotonic() - t0;
      return 0;
    }
    if (rc < 0) {
      c->broken = 1;
      return -1;
    }
    if (clock_monotonic() - t0 > c->timeout_s) {
      c->broken = 1;
      comm_seterr(err, errlen,
             "comm %s: %s: no answer from the other ranks in %g s (a rank "
             "died?)",
             comm_backend_name(c->backend), comm_op_name(req->op),
             c->timeout_s);
      return -1;
    }
    comm_backoff(&iter);
  }
}

int comm_test(comm *c, comm_req *req, int *done, char *err, size_t errlen) {
  *done = 0;
  if (!req || req->c != c || !req->used) {
    comm_seterr(err, errlen,
           "comm %s: test: not a request in flight on this communicator",
           comm_backend_name(c->backend));
    return -1;
  }
  int rc = -1;
  if (c->broken)
    comm_seterr(err, errlen,
           "comm %s: %s: the communicator is unusable after an earlier "
           "failure (abort it)",
           comm_backend_name(c->backend), comm_op_name(req->op));
  else {
    double t0 = clock_monotonic();
    rc = c->ops->test(c, req->slot, err, errlen);
    c->stats.seconds[kind_of(req->op)] += clock_monotonic() - t0;
  }
  if (rc == 0)
    return 0;
  if (req->slot != COMM_BLOCKING_SLOT)
    c->ninflight--;
  req->used = 0;
  if (rc < 0) {
    c->broken = 1;
    return -1;
  }
  *done = 1;
  return 0;
}

static int blocking(comm *c, comm_op op, const void *send, void *recv, size_t n,
                    int root, char *err, size_t errlen) {
  comm_req *r;
  if (start(c, 0, op, send, recv, n, root, &r, err, errlen) != 0)
    return -1;
  return comm_wait(c, r, err, errlen);
}

int comm_allreduce_sum(comm *c, float *buf, size_t n, char *err,
                       size_t errlen) {
  return blocking(c, COMM_OP_ALLREDUCE, buf, buf, n, 0, err, errlen);
}

int comm_reduce_scatter_sum(comm *c, const float *send, float *recv, size_t n,
                            char *err, size_t errlen) {
  return blocking(c, COMM_OP_REDUCE_SCATTER, send, recv, n, 0, err, errlen);
}

int comm_reduce_sum(comm *c, const float *send, float *recv, size_t n,
                    int root, char *err, size_t errlen) {
  return blocking(c, COMM_OP_REDUCE, send, recv, n, root, err, errlen);
}

int comm_allgather(comm *c, const float *send, float *recv, size_t n, char *err,
                   size_t errlen) {
  return blocking(c, COMM_OP_ALLGATHER, send, recv, n, 0, err, errlen);
}

int comm_allgather_bytes(comm *c, const void *send, void *recv, size_t bytes,
                         char *err, size_t errlen) {
  return blocking(c, COMM_OP_ALLGATHER_BYTES, send, recv, bytes, 0, err,
                  errlen);
}

int comm_allreduce_sum_double(comm *c, double *x, char *err, size_t errlen) {
  float hl[2];
  hl[0] = (float)*x;
  hl[1] = (float)(*x - (double)hl[0]);
  if (comm_allreduce_sum(c, hl, 2, err, errlen) != 0)
    return -1;
  *x = (double)hl[0] + (double)hl[1];
  return 0;
}

int comm_device(const comm *c) { return c->device; }

int comm_broadcast(comm *c, void *buf, size_t bytes, int root, char *err,
                   size_t errlen) {
  return blocking(c, COMM_OP_BROADCAST, buf, buf, bytes, root, err, errlen);
}

int comm_barrier(comm *c, char *err, size_t errlen) {
  return blocking(c, COMM_OP_BARRIER, NULL, NULL, 0, 0, err, errlen);
}

int comm_iallreduce_sum(comm *c, float *buf, size_t n, comm_req **req,
                        char *err, size_t errlen) {
  return start(c, 1, COMM_OP_ALLREDUCE, buf, buf, n, 0, req, err, errlen);
}

int comm_ireduce_scatter_sum(comm *c, const float *send, float *recv, size_t n,
                             comm_req **req, char *err, size_t errlen) {
  return start(c, 1, COMM_OP_REDUCE_SCATTER, send, recv, n, 0, req, err,
               errlen);
}

int comm_ireduce_sum(comm *c, const float *send, float *recv, size_t n,
                     int root, comm_req **req, char *err, size_t errlen) {
  return start(c, 1, COMM_OP_REDUCE, send, recv, n, root, req, err, errlen);
}

int comm_iallgather(comm *c, const float *send, float *recv, size_t n,
                    comm_req **req, char *err, size_t errlen) {
  return start(c, 1, COMM_OP_ALLGATHER, send, recv, n, 0, req, err, errlen);
}

int comm_iallgather_bytes(comm *c, const void *send, void *recv, size_t bytes,
                          comm_req **req, char *err, size_t errlen) {
  return start(c, 1, COMM_OP_ALLGATHER_BYTES, send, recv, bytes, 0, req, err,
               errlen);
}

int comm_send(comm *c, const void *send, size_t bytes, int peer, char *err,
              size_t errlen) {
  return blocking(c, COMM_OP_SEND, send, NULL, bytes, peer, err, errlen);
}

int comm_recv(comm *c, void *recv, size_t bytes, int peer, char *err,
              size_t errlen) {
  return blocking(c, COMM_OP_RECV, NULL, recv, bytes, peer, err, errlen);
}

int comm_isend(comm *c, const void *send, size_t bytes, int peer,
               comm_req **req, char *err, size_t errlen) {
  return start(c, 1, COMM_OP_SEND, send, NULL, bytes, peer, req, err, errlen);
}

int comm_irecv(comm *c, void *recv, size_t bytes, int peer, comm_req **req,
               char *err, size_t errlen) {
  return start(c, 1, COMM_OP_RECV, NULL, recv, bytes, peer, req, err, errlen);
}

void comm_abort(comm *c, int code) {
  if (!c)
    exit(code);
  c->ops->abort(c, code);
}

void comm_destroy(comm *c) {
  if (!c)
    return;
  c->ops->destroy(c, c->broken || c->ninflight > 0);
  free(c);
}
