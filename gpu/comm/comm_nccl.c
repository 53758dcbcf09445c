/*
 * comm_nccl.c: the NCCL backend: GPU ranks, buffers in device memory.
 * Plain C against NCCL and the CUDA runtime API; built only where CUDA
 * and NCCL are found (DAGRUN_COMM_HAVE_NCCL).
 *
 * The communicator is created non-blocking (config.blocking = 0) and its
 * state polled with ncclCommGetAsyncError up to the timeout, so that a
 * peer that never shows up or dies makes the call fail instead of hang.
 * Every operation is enqueued on the communicator's own CUDA stream and
 * followed by an event in the request's slot; comm.c's wait loop polls
 * the event (and NCCL's asynchronous error) with the same timeout.
 *
 * Point to point: ncclSend/ncclRecv of bytes (ncclUint8). NCCL runs a
 * communicator's kernels one after the other, and a send's kernel ends
 * only when the peer's recv takes the data: two ranks that each send to
 * the other before receiving would wait for each other forever (NCCL's
 * p2p documentation: calls that must progress together go in one group).
 * So comm_isend/comm_irecv are not enqueued at once: they wait in the
 * request's slot, and the next call on this communicator that needs them
 * (a blocking send or recv, a collective, comm_wait or comm_test of one
 * of them) enqueues them in issue order, in groups
 * (ncclGroupStart/ncclGroupEnd) that hold the first waiting operation of
 * each peer and direction, with the blocking call's own send or recv:
 * the neighbours of a pipeline that each send and then receive meet in
 * one group, and a rank's second message to a peer waits for the peer's
 * next group instead of holding this one. Messages between two ranks
 * keep their order (NCCL matches a pair's sends and recvs in the order
 * they were posted).
 *
 * Bootstrap (the unique id from rank 0 to the others):
 * - cfg->rendezvous_dir set: rank 0 writes <dir>/nccl-id atomically
 *   (temporary name, fsync, rename, fsync of the directory); the others
 *   poll for it up to the timeout. rank and size come from cfg. The
 *   directory must be fresh for each gang (a stale nccl-id from an
 *   earlier gang would be read as this one's).
 * - else: through MPI (ranks launched by mpirun or srun): an MPI
 *   communicator of this layer (initializing MPI if nobody did) gives
 *   rank and size and broadcasts the id; it lives as long as this one.
 * Device: cfg->device, or when negative the local rank (DAGRUN_LOCAL_RANK,
 * OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID) modulo the device count.
 */
#include "comm_impl.h"
#include "lib/clock.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct nccl_state {
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t ev[COMM_NSLOTS];
  int nev;        /* events created */
  float *scratch; /* one device float: the barrier's allreduce */
  comm *mpi;      /* the bootstrap communicator, when through MPI */
  int device;
  /* Async sends and recvs not enqueued yet: the slots, in issue order,
   * and what each moves. */
  int pend[COMM_NSLOTS], npend;
  struct p2p {
    comm_op op;
    void *buf;
    size_t n;
    int peer;
  } p2p[COMM_NSLOTS];
} nccl_state;

/* The rendezvous file: magic, version, header size, gang size, then the
 * unique id. Integers little-endian as the host writes them (x86-64 and
 * aarch64 gangs). */
#define NCCL_ID_MAGIC "DGNCCLID"
#define NCCL_ID_VERSION 1u
#define NCCL_ID_HEADER 24u


static int cuda_ok(cudaError_t e, const char *what, char *err, size_t errlen) {
  if (e == cudaSuccess)
    return 1;
  int nogpu = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
  comm_seterr(err, errlen, "comm nccl: %s: CUDA error %s: %s%s", what,
         cudaGetErrorName(e), cudaGetErrorString(e),
         nogpu ? " (no GPU or no NVIDIA driver on this machine?)" : "");
  return 0;
}

static void ncclerr(nccl_state *s, ncclResult_t r, const char *what, char *err,
                    size_t errlen) {
  const char *last = ncclGetLastError(s ? s->comm : NULL);
  comm_seterr(err, errlen, "comm nccl: %s: %s%s%s", what, ncclGetErrorString(r),
         last && *last ? ": " : "", last ? last : "");
}

/* Polls the communicator until NCCL has finished what it was doing
 * (ncclInProgress -> ncclSuccess), up to timeout_s. */
static int settle(nccl_state *s, const char *what, double timeout_s, char *err,
                  size_t errlen) {
  double t0 = clock_monotonic();
  unsigned iter = 0;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(s->comm, &st);
    if (r != ncclSuccess) {
      ncclerr(s, r, what, err, errlen);
      return -1;
    }
    if (st == ncclSuccess)
      return 0;
    if (st != ncclInProgress) {
      ncclerr(s, st, what, err, errlen);
      return -1;
    }
    if (clock_monotonic() - t0 > timeout_s) {
      comm_seterr(err, errlen,
             "comm nccl: %s: no answer from the other ranks in %g s (a rank "
             "died?)",
             what, timeout_s);
      return -1;
    }
    comm_backoff(&iter);
  }
}

/* One group of the pending sends and recvs: in issue order, the first
 * of each peer and direction (a later one to the same peer waits for the
 * next group: a group ends when all its operations have, and a second
 * message to a peer may need a recv the peer posts only after this
 * group). Each is followed by its slot's event (after the group: NCCL
 * enqueues a group's work as one). Zero bytes move nothing: the event
 * alone. */
static int flush_one(comm *c, const char *what, char *err, size_t errlen) {
  nccl_state *s = c->impl;
  int take[COMM_NSLOTS], ntake = 0, keep = 0;
  for (int i = 0; i < s->npend; i++) {
    struct p2p *p = &s->p2p[s->pend[i]];
    int first = 1;
    for (int j = 0; j < i && first; j++) {
      struct p2p *q = &s->p2p[s->pend[j]];
      first = q->peer != p->peer || q->op != p->op;
    }
    if (first)
      take[ntake++] = s->pend[i];
    else
      s->pend[keep++] = s->pend[i];
  }
  s->npend = keep;
  ncclResult_t r = ncclGroupStart(), r2;
  for (int i = 0; i < ntake && r == ncclSuccess; i++) {
    struct p2p *p = &s->p2p[take[i]];
    if (p->n == 0)
      continue;
    if (p->op == COMM_OP_SEND)
      r = ncclSend(p->buf, p->n, ncclUint8, p->peer, s->comm, s->stream);
    else
      r = ncclRecv(p->buf, p->n, ncclUint8, p->peer, s->comm, s->stream);
  }
  r2 = ncclGroupEnd(); /* always: it closes the group */
  if (r == ncclSuccess || r == ncclInProgress)
    r = r2;
  if (r != ncclSuccess && r != ncclInProgress) {
    ncclerr(s, r, what, err, errlen);
    return -1;
  }
  if (r == ncclInProgress && settle(s, what, c->timeout_s, err, errlen) != 0)
    return -1;
  for (int i = 0; i < ntake; i++)
    if (!cuda_ok(cudaEventRecord(s->ev[take[i]], s->stream), what, err, errlen))
      return -1;
  return 0;
}

/* Whether slot's send or recv waits to be enqueued (-1: any does). */
static int pending(const nccl_state *s, int slot) {
  for (int i = 0; i < s->npend; i++)
    if (slot < 0 || s->pend[i] == slot)
      return 1;
  return 0;
}

/* Enqueues groups of the pending sends and recvs until slot's is (-1:
 * all). */
static int flush(comm *c, int slot, const char *what, char *err,
                 size_t errlen) {
  while (pending(c->impl, slot))
    if (flush_one(c, what, err, errlen) != 0)
      return -1;
  return 0;
}

static int nccl_start(comm *c, int slot, comm_op op, const void *send,
                      void *recv, size_t n, int root, char *err,
                      size_t errlen) {
  nccl_state *s = c->impl;
  const char *what = comm_op_name(op);
  if (op == COMM_OP_SEND || op == COMM_OP_RECV) {
    struct p2p *p = &s->p2p[slot];
    p->op = op;
    p->buf = op == COMM_OP_SEND ? (void *)send : recv;
    p->n = n;
    p->peer = root;
    s->pend[s->npend++] = slot;
    /* Async: enqueued with the next call (above); blocking: now. */
    return slot == COMM_BLOCKING_SLOT ? flush(c, slot, what, err, errlen) : 0;
  }
  /* What was issued before goes first. */
  if (flush(c, -1, what, err, errlen) != 0)
    return -1;
  ncclResult_t r = ncclSuccess;
  switch (op) {
  case COMM_OP_ALLREDUCE:
    r = ncclAllReduce(recv, recv, n, ncclFloat32, ncclSum, s->comm, s->stream);
    break;
  case COMM_OP_REDUCE_SCATTER:
    r = ncclReduceScatter(send, recv, n, ncclFloat32, ncclSum, s->comm,
                          s->stream);
    break;
  case COMM_OP_REDUCE:
    /* recvbuff is read by NCCL on the root only; elsewhere the send
     * buffer stands in for the NULL the caller may give. */
    r = ncclReduce(send, c->rank == root ? recv : (void *)send, n,
                   ncclFloat32, ncclSum, root, s->comm, s->stream);
    break;
  case COMM_OP_ALLGATHER:
    /* NCCL itself takes send == recv + rank*n as in place. */
    r = ncclAllGather(send, recv, n, ncclFloat32, s->comm, s->stream);
    break;
  case COMM_OP_ALLGATHER_BYTES:
    r = ncclAllGather(send, recv, n, ncclUint8, s->comm, s->stream);
    break;
  case COMM_OP_BROADCAST:
    r = ncclBroadcast(recv, recv, n, ncclUint8, root, s->comm, s->stream);
    break;
  case COMM_OP_BARRIER:
    /* NCCL has no barrier: an allreduce of one float every rank must
     * join. */
    r = ncclAllReduce(s->scratch, s->scratch, 1, ncclFloat32, ncclSum, s->comm,
                      s->stream);
    break;
  case COMM_OP_SEND:
  case COMM_OP_RECV:
    break; /* above */
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    ncclerr(s, r, what, err, errlen);
    return -1;
  }
  if (r == ncclInProgress && settle(s, what, c->timeout_s, err, errlen) != 0)
    return -1;
  if (!cuda_ok(cudaEventRecord(s->ev[slot], s->stream), what, err, errlen))
    return -1;
  return 0;
}

static int nccl_test(comm *c, int slot, char *err, size_t errlen) {
  nccl_state *s = c->impl;
  const char *what = comm_op_name(c->req[slot].op);
  if (flush(c, slot, what, err, errlen) != 0)
    return -1;
  cudaError_t e = cudaEventQuery(s->ev[slot]);
  if (e != cudaSuccess && e != cudaErrorNotReady) {
    cuda_ok(e, what, err, errlen);
    return -1;
  }
  /* NCCL's asynchronous error even when the event has completed: a
   * kernel that ended on an error (a peer lost, the communicator
   * aborted) completes its event with the receive buffer partly written,
   * and only the communicator's state tells. */
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(s->comm, &st);
  if (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
    ncclerr(s, r != ncclSuccess ? r : st, what, err, errlen);
    return -1;
  }
  return e == cudaSuccess;
}

/* Frees what state holds. broken: abort the NCCL communicator instead of
 * finalizing it (finalize waits for the peers). */
static void state_free(nccl_state *s, int broken, double timeout_s) {
  if (!s)
    return;
  if (s->comm) {
    int aborted = broken;
    if (!broken) {
      char e[256];
      ncclResult_t r = ncclCommFinalize(s->comm);
      if ((r != ncclSuccess && r != ncclInProgress) ||
          settle(s, "finalize", timeout_s, e, sizeof e) != 0)
        aborted = 1;
    }
    if (aborted)
      ncclCommAbort(s->comm);
    else
      ncclCommDestroy(s->comm);
  }
  for (int i = 0; i < s->nev; i++)
    cudaEventDestroy(s->ev[i]);
  if (s->stream)
    cudaStreamDestroy(s->stream);
  if (s->scratch)
    cudaFree(s->scratch);
  if (s->mpi) {
    /* The bootstrap communicator has nothing in flight, but when this one
     * failed a peer may be gone: do not let MPI_Finalize wait for it. */
    if (broken)
      s->mpi->broken = 1;
    comm_destroy(s->mpi);
  }
  free(s);
}

__attribute__((noreturn)) static void nccl_abort(comm *c, int code) {
  nccl_state *s = c->impl;
  fflush(stdout);
  fflush(stderr);
  if (s && s->comm)
    ncclCommAbort(s->comm);
  if (s && s->mpi)
    comm_abort(s->mpi, code); /* stops the other ranks too */
  exit(code);
}

static void nccl_destroy(comm *c, int broken) {
  state_free(c->impl, broken, c->timeout_s);
  c->impl = NULL;
}

static const comm_ops nccl_ops = {nccl_start, nccl_test, nccl_abort,
                                  nccl_destroy};

/* ---- bootstrap through a rendezvous directory ---------------------------- */

static int write_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

static int id_write(const char *dir, int size, const ncclUniqueId *id,
                    char *err, size_t errlen) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/nccl-id", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  unsigned char buf[NCCL_ID_HEADER + sizeof *id];
  uint32_t h[4] = {NCCL_ID_VERSION, NCCL_ID_HEADER, (uint32_t)size, 0};
  memcpy(buf, NCCL_ID_MAGIC, 8);
  memcpy(buf + 8, h, sizeof h);
  memcpy(buf + NCCL_ID_HEADER, id, sizeof *id);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    comm_seterr(err, errlen, "comm nccl: rendezvous: cannot create %s: %s", tmp,
           strerror(errno));
    return -1;
  }
  if (write_all(fd, buf, sizeof buf) != 0 || fsync(fd) != 0) {
    comm_seterr(err, errlen, "comm nccl: rendezvous: cannot write %s: %s", tmp,
           strerror(errno));
    close(fd);
    unlink(tmp);
    return -1;
  }
  close(fd);
  if (rename(tmp, path) != 0) {
    comm_seterr(err, errlen, "comm nccl: rendezvous: cannot rename %s to %s: %s",
           tmp, path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

static int id_read(const char *dir, int size, double timeout_s,
                   ncclUniqueId *id, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/nccl-id", dir);
  double t0 = clock_monotonic();
  unsigned iter = 0;
  int fd;
  while ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    if (errno != ENOENT) {
      comm_seterr(err, errlen, "comm nccl: rendezvous: cannot open %s: %s", path,
             strerror(errno));
      return -1;
    }
    if (clock_monotonic() - t0 > timeout_s) {
      comm_seterr(err, errlen,
             "comm nccl: rendezvous: no %s from rank 0 in %g s (did rank 0 "
             "start?)",
             path, timeout_s);
      return -1;
    }
    iter = iter < 200 ? 200 : iter; /* a file: no need to spin */
    comm_backoff(&iter);
  }
  unsigned char buf[NCCL_ID_HEADER + sizeof *id];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t r = read(fd, buf + got, sizeof buf - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  close(fd);
  uint32_t h[4];
  memcpy(h, buf + 8, sizeof h);
  if (got < NCCL_ID_HEADER || memcmp(buf, NCCL_ID_MAGIC, 8) != 0) {
    comm_seterr(err, errlen, "comm nccl: rendezvous: %s is not an NCCL id file",
           path);
    return -1;
  }
  if (h[0] != NCCL_ID_VERSION || h[1] != NCCL_ID_HEADER || got != sizeof buf) {
    comm_seterr(err, errlen,
           "comm nccl: rendezvous: %s has version %u, header %u bytes, %zu "
           "bytes in all; this dagrun reads version %u, %u, %zu",
           path, h[0], h[1], got, NCCL_ID_VERSION, NCCL_ID_HEADER, sizeof buf);
    return -1;
  }
  if (h[2] != (uint32_t)size) {
    comm_seterr(err, errlen,
           "comm nccl: rendezvous: %s was written for a gang of %u ranks, "
           "this one has %d (a stale file from another gang?)",
           path, h[2], size);
    return -1;
  }
  memcpy(id, buf + NCCL_ID_HEADER, sizeof *id);
  return 0;
}

/* ---- create -------------------------------------------------------------- */

static int local_rank(void) {
  static const char *vars[] = {"DAGRUN_LOCAL_RANK",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v)
      return atoi(v);
  }
  return 0;
}

/* s's stream, scratch float and slot events on s->device. */
static int state_cuda(nccl_state *s, const char *what, char *err,
                      size_t errlen) {
  char w[64];
  snprintf(w, sizeof w, "%s: cudaSetDevice", what);
  if (!cuda_ok(cudaSetDevice(s->device), w, err, errlen))
    return -1;
  snprintf(w, sizeof w, "%s: cudaStreamCreate", what);
  if (!cuda_ok(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), w,
               err, errlen))
    return -1;
  snprintf(w, sizeof w, "%s: cudaMalloc", what);
  if (!cuda_ok(cudaMalloc((void **)&s->scratch, sizeof(float)), w, err,
               errlen) ||
      !cuda_ok(cudaMemset(s->scratch, 0, sizeof(float)), w, err, errlen))
    return -1;
  snprintf(w, sizeof w, "%s: cudaEventCreate", what);
  for (; s->nev < COMM_NSLOTS; s->nev++)
    if (!cuda_ok(
            cudaEventCreateWithFlags(&s->ev[s->nev], cudaEventDisableTiming), w,
            err, errlen))
      return -1;
  return 0;
}

/* Polls s->comm, just made (r: what the call that made it returned),
 * until it is ready; aborts and forgets it when it failed. */
static int comm_ready(nccl_state *s, ncclResult_t r, const char *what,
                      double timeout_s, char *err, size_t errlen) {
  if (r != ncclSuccess && r != ncclInProgress)
    ncclerr(s, r, what, err, errlen);
  else if (settle(s, what, timeout_s, err, errlen) == 0)
    return 0;
  if (s->comm) {
    ncclCommAbort(s->comm);
    s->comm = NULL;
  }
  return -1;
}

/* rc 0: s becomes c's state; else s is freed. Returns rc. */
static int install(comm *c, nccl_state *s, int rc) {
  if (rc != 0) {
    state_free(s, 1, c->timeout_s);
    return rc;
  }
  c->ops = &nccl_ops;
  c->impl = s;
  c->device = s->device;
  return 0;
}

int comm_nccl_create(comm *c, const comm_config *cfg, char *err,
                     size_t errlen) {
  nccl_state *s = calloc(1, sizeof *s);
  if (!s) {
    comm_seterr(err, errlen, "comm nccl: create: out of memory");
    return -1;
  }
  int ndev = 0;
  if (!cuda_ok(cudaGetDeviceCount(&ndev), "create: counting GPUs", err, errlen))
    goto fail;
  if (ndev < 1) {
    comm_seterr(err, errlen, "comm nccl: create: CUDA sees no GPU");
    goto fail;
  }
  s->device = cfg->device >= 0 ? cfg->device : local_rank() % ndev;
  if (s->device >= ndev) {
    comm_seterr(err, errlen, "comm nccl: create: device %d, but CUDA sees %d GPU%s",
           s->device, ndev, ndev == 1 ? "" : "s");
    goto fail;
  }
  if (state_cuda(s, "create", err, errlen) != 0)
    goto fail;

  /* Rank, size and the unique id. */
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t r;
  if (cfg->rendezvous_dir) {
    if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size) {
      comm_seterr(err, errlen,
             "comm nccl: create: rank %d of size %d is not a rank of a gang",
             cfg->rank, cfg->size);
      goto fail;
    }
    c->rank = cfg->rank;
    c->size = cfg->size;
    if (c->rank == 0) {
      if ((r = ncclGetUniqueId(&id)) != ncclSuccess) {
        ncclerr(NULL, r, "create: ncclGetUniqueId", err, errlen);
        goto fail;
      }
      if (c->size > 1 &&
          id_write(cfg->rendezvous_dir, c->size, &id, err, errlen) != 0)
        goto fail;
    } else if (id_read(cfg->rendezvous_dir, c->size, c->timeout_s, &id, err,
                       errlen) != 0) {
      goto fail;
    }
  } else {
    comm_config mc = {0};
    mc.backend = COMM_MPI;
    mc.timeout_s = c->timeout_s;
    if (comm_create(&mc, &s->mpi, err, errlen) != 0)
      goto fail;
    c->rank = comm_rank(s->mpi);
    c->size = comm_size(s->mpi);
    if (c->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
      ncclerr(NULL, r, "create: ncclGetUniqueId", err, errlen);
      goto fail;
    }
    if (comm_broadcast(s->mpi, &id, sizeof id, 0, err, errlen) != 0)
      goto fail;
  }

  /* Non-blocking: the call returns at once, the state says when the
   * communicator is ready or failed. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  r = ncclCommInitRankConfig(&s->comm, c->size, id, c->rank, &config);
  if (comm_ready(s, r,
                 r == ncclSuccess || r == ncclInProgress
                     ? "create"
                     : "create: ncclCommInitRankConfig",
                 c->timeout_s, err, errlen) != 0)
    goto fail;
  return install(c, s, 0);

fail:
  return install(c, s, -1);
}

int comm_nccl_split(comm *parent, int color, int key, comm *c, char *err,
                    size_t errlen) {
  nccl_state *ps = parent->impl;
  /* What the parent has queued was issued first. */
  if (flush(parent, -1, "split", err, errlen) != 0)
    return -1;
  nccl_state *s = calloc(1, sizeof *s);
  if (!s) {
    comm_seterr(err, errlen, "comm nccl: split: out of memory");
    return -1;
  }
  s->device = ps->device;
  if (state_cuda(s, "split", err, errlen) != 0)
    goto fail;
  /* Non-blocking as the parent; NCCL orders the new ranks by key, then
   * by rank in the parent, as comm.h says. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommSplit(ps->comm, color, key, &s->comm, &config);
  if (comm_ready(s, r, "split", c->timeout_s, err, errlen) != 0)
    goto fail;
  if ((r = ncclCommCount(s->comm, &c->size)) != ncclSuccess ||
      (r = ncclCommUserRank(s->comm, &c->rank)) != ncclSuccess) {
    ncclerr(s, r, "split: the new communicator's rank and size", err, errlen);
    goto fail;
  }
  return install(c, s, 0);

fail:
  return install(c, s, -1);
}
