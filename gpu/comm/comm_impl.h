/*
 * comm_impl.h: what comm.c shares with its backends (comm_mpi.c,
 * comm_nccl.c). Not part of the API: only gpu/comm/ includes it.
 *
 * comm.c owns the communicator, the request slots, the in-flight count and
 * the wait loop with its timeout; a backend starts an operation in a slot
 * and tests it. Slot COMM_MAX_INFLIGHT is kept for the blocking calls, so
 * a blocking call works while COMM_MAX_INFLIGHT requests are in flight.
 */
#ifndef DAGRUN_COMM_IMPL_H
#define DAGRUN_COMM_IMPL_H

#include "comm.h"

#define COMM_NSLOTS (COMM_MAX_INFLIGHT + 1)
#define COMM_BLOCKING_SLOT COMM_MAX_INFLIGHT

typedef enum comm_op {
  COMM_OP_ALLREDUCE,
  COMM_OP_REDUCE_SCATTER,
  COMM_OP_REDUCE,
  COMM_OP_ALLGATHER,
  COMM_OP_ALLGATHER_BYTES,
  COMM_OP_BROADCAST,
  COMM_OP_BARRIER,
  COMM_OP_SEND, /* n bytes of send to rank root (the peer) */
  COMM_OP_RECV  /* n bytes from rank root into recv */
} comm_op;

/* "allreduce", "reduce_scatter", ...: the operation's name in messages. */
const char *comm_op_name(comm_op op);

struct comm_req {
  comm *c;
  comm_op op;
  int slot;
  int used;
};

typedef struct comm_ops {
  /* Starts op in slot: n floats (allreduce: buf = recv; reduce_scatter:
   * send has n*size, recv n; reduce: send n, recv n on root, NULL
   * allowed elsewhere; allgather: send n, recv n*size), or n bytes for
   * broadcast (buf = recv, root), or n bytes to or from the peer root for
   * send (send) and recv (recv). 0; -1 with err when the library
   * failed (the communicator is then unusable); -2 with err for arguments
   * the backend cannot take (nothing was started). */
  int (*start)(comm *c, int slot, comm_op op, const void *send, void *recv,
               size_t n, int root, char *err, size_t errlen);
  /* 1: the operation in slot is done (and the slot free for the backend),
   * 0: not yet, -1: failed, with err. Never blocks for long. */
  int (*test)(comm *c, int slot, char *err, size_t errlen);
  void (*abort)(comm *c, int code) __attribute__((noreturn));
  /* Frees the backend's state. broken: an operation failed or timed out,
   * or requests are still in flight: free only what cannot hang. */
  void (*destroy)(comm *c, int broken);
} comm_ops;

struct comm {
  comm_backend backend;
  const comm_ops *ops;
  int rank, size;
  double timeout_s;
  int broken; /* a collective failed: the communicator is unusable */
  int device; /* NCCL: the rank's CUDA device; else -1 */
  int ninflight;
  struct comm_req req[COMM_NSLOTS];
  comm_stats stats;
  void *impl; /* the backend's state */
};

/* Backends' constructors: fill c->ops, c->impl, c->rank, c->size. */
int comm_mpi_create(comm *c, const comm_config *cfg, char *err, size_t errlen);
/* parent's ranks of the same color into c (comm_split). */
int comm_mpi_split(const comm *parent, int color, int key, comm *c, char *err,
                   size_t errlen);
#ifdef DAGRUN_COMM_HAVE_NCCL
int comm_nccl_create(comm *c, const comm_config *cfg, char *err, size_t errlen);
/* parent's ranks of the same color into c (comm_split); parent's queued
 * sends and recvs are enqueued first. */
int comm_nccl_split(comm *parent, int color, int key, comm *c, char *err,
                    size_t errlen);
#endif

/* Sleeps a little longer each call (from 0 up to about 1 ms): the wait
 * loops' pause between two polls. *iter counts the calls. */
void comm_backoff(unsigned *iter);

/* printf into err (when err is not NULL): the one way every backend
 * writes its messages. */
void comm_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* DAGRUN_COMM_IMPL_H */
