/*
 * pipestream: the exchange between neighbouring pipeline stages, which
 * pipeline.c (a stage of the whole model's layers) and tensor_cuda.c (a
 * tensor shard's stage) share: a micro-batch's stream (B,T,C) sent on
 * to stage s + 1, its gradient back to s - 1, over the stages'
 * communicator (MPI or NCCL), in buffers of the engine's memory.
 *
 * A send copies its data into a buffer of its own (the activation slot
 * it came from may be used again at once) and starts; at most
 * PIPESTREAM_SENDS are in flight a direction, the oldest waited for at
 * the limit (the peer receives a neighbour's messages in their order).
 * A receive lands in the one receive buffer, xbuf, valid until the next
 * receive.
 *
 * The owner's thread only; every int function returns 0, or -1 with err
 * (a failed exchange leaves the communicator unusable).
 */
#ifndef DAGRUN_PIPESTREAM_H
#define DAGRUN_PIPESTREAM_H

#include <stddef.h>

#include "comm/comm.h"

/* Sends in flight to each neighbour at most: two of them under
 * COMM_MAX_INFLIGHT with room to spare. */
#define PIPESTREAM_SENDS 6

/* The engine's memory: a buffer of bytes (NULL: none), its release, and
 * a copy between two of its buffers, complete on return. */
typedef struct pipestream_mem {
  void *(*alloc)(void *arg, size_t bytes);
  void (*free)(void *arg, void *buf);
  int (*copy)(void *arg, void *dst, const void *src, size_t bytes, char *err,
              size_t errlen);
  void *arg;
} pipestream_mem;

typedef struct pipestream {
  comm *c;
  int s;        /* this stage's rank in c */
  size_t bytes; /* of a message */
  pipestream_mem mem;
  void *xbuf; /* the latest message received */
  /* The sends in flight, one FIFO a direction (0: to stage s - 1, the
   * gradients; 1: to s + 1, the streams): q[d][qhead[d] .. + nq[d]). */
  void *sendbuf[2][PIPESTREAM_SENDS];
  comm_req *q[2][PIPESTREAM_SENDS];
  int qhead[2], nq[2];
} pipestream;

/* Stage comm_rank(c)'s exchange of messages of bytes, its buffers from
 * mem. On failure what was allocated is released. */
int pipestream_init(pipestream *ps, comm *c, size_t bytes,
                    const pipestream_mem *mem, char *err, size_t errlen);
void pipestream_release(pipestream *ps); /* zeroed, or after init */

/* x (bytes) to the neighbour in direction d (1: s + 1, 0: s - 1), from
 * a copy of its own. */
int pipestream_send(pipestream *ps, const void *x, int d, char *err,
                    size_t errlen);

/* The next message from the neighbour in direction d, into xbuf. */
int pipestream_recv(pipestream *ps, int d, char *err, size_t errlen);

/* Every send in flight, waited for (the end of a step). */
int pipestream_drain(pipestream *ps, char *err, size_t errlen);

/* The bytes of the buffers (the receive buffer and the sends'). */
size_t pipestream_bytes(const pipestream *ps);

#endif /* DAGRUN_PIPESTREAM_H */
