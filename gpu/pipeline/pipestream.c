/* The exchange between neighbouring pipeline stages; see pipestream.h. */
#include "pipestream.h"

#include <stdio.h>
#include <string.h>

int pipestream_init(pipestream *ps, comm *c, size_t bytes,
                    const pipestream_mem *mem, char *err, size_t errlen) {
  memset(ps, 0, sizeof *ps);
  ps->c = c;
  ps->s = comm_rank(c);
  ps->bytes = bytes;
  ps->mem = *mem;
  int ok = (ps->xbuf = mem->alloc(mem->arg, bytes)) != NULL;
  for (int d = 0; d < 2; d++)
    for (int i = 0; ok && i < PIPESTREAM_SENDS; i++)
      ok = (ps->sendbuf[d][i] = mem->alloc(mem->arg, bytes)) != NULL;
  if (ok)
    return 0;
  pipestream_release(ps);
  snprintf(err, errlen,
           "pipeline: out of memory for the exchange's buffers (%d of %zu "
           "bytes)",
           1 + 2 * PIPESTREAM_SENDS, bytes);
  return -1;
}

void pipestream_release(pipestream *ps) {
  if (!ps->mem.free)
    return;
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < PIPESTREAM_SENDS; i++)
      if (ps->sendbuf[d][i])
        ps->mem.free(ps->mem.arg, ps->sendbuf[d][i]);
  if (ps->xbuf)
    ps->mem.free(ps->mem.arg, ps->xbuf);
  memset(ps, 0, sizeof *ps);
}

/* Waits for the oldest send in flight in direction d. */
static int wait_oldest(pipestream *ps, int d, char *err, size_t errlen) {
  comm_req *q = ps->q[d][ps->qhead[d]];
  int rc = comm_wait(ps->c, q, err, errlen);
  ps->qhead[d] = (ps->qhead[d] + 1) % PIPESTREAM_SENDS;
  ps->nq[d]--;
  return rc;
}

int pipestream_send(pipestream *ps, const void *x, int d, char *err,
                    size_t errlen) {
  if (ps->nq[d] == PIPESTREAM_SENDS && wait_oldest(ps, d, err, errlen) != 0)
    return -1;
  if (!x) {
    snprintf(err, errlen, "pipeline: stage %d has no stream to send", ps->s);
    return -1;
  }
  int i = (ps->qhead[d] + ps->nq[d]) % PIPESTREAM_SENDS;
  void *buf = ps->sendbuf[d][i];
  if (ps->mem.copy(ps->mem.arg, buf, x, ps->bytes, err, errlen) != 0 ||
      comm_isend(ps->c, buf, ps->bytes, d ? ps->s + 1 : ps->s - 1, &ps->q[d][i],
                 err, errlen) != 0)
    return -1;
  ps->nq[d]++;
  return 0;
}

/* Every send to the neighbour but the latest is waited for first: NCCL
 * runs a communicator's sends and receives one after the other,
 * starting a queued send only with the next call that needs it, grouped
 * with that call's receive (comm.h); GPipe's m sends before the first
 * receive would otherwise leave the later ones unstarted while the peer
 * waits for them. The peer takes them in order meanwhile (its own
 * receives), and the latest, grouped with this receive, is 1F1B's
 * pairing of a send with the receive after it (Megatron-LM's
 * send_forward_recv_backward). On MPI the sends have started: the waits
 * only come sooner. */
int pipestream_recv(pipestream *ps, int d, char *err, size_t errlen) {
  while (ps->nq[d] > 1)
    if (wait_oldest(ps, d, err, errlen) != 0)
      return -1;
  return comm_recv(ps->c, ps->xbuf, ps->bytes, d ? ps->s + 1 : ps->s - 1, err,
                   errlen);
}

int pipestream_drain(pipestream *ps, char *err, size_t errlen) {
  for (int d = 0; d < 2; d++)
    while (ps->nq[d] > 0)
      if (wait_oldest(ps, d, err, errlen) != 0)
        return -1;
  return 0;
}

size_t pipestream_bytes(const pipestream *ps) {
  return ps->bytes * (1 + 2 * PIPESTREAM_SENDS);
}
