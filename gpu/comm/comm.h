/*
 * comm: the collectives distributed training needs, behind one small
 * interface, with the backends that really move the bytes: MPI (Open MPI,
 * CPU ranks), NCCL (GPU ranks; built where CUDA and NCCL are found) and
 * "self" (one rank, no library: what a plain single-process run uses).
 * No home-made transport.
 *
 * Buffers are host memory for MPI and self, device memory for NCCL. Sums
 * are of float32. Every function returns 0, or -1 with a message in err
 * that names the operation, the backend and the library's error text; a
 * failed collective leaves the communicator unusable (abort it).
 *
 * Async variants return a request that comm_wait completes; at most
 * COMM_MAX_INFLIGHT requests may be outstanding per communicator, and
 * requests complete in any order. Overlap with compute is the point:
 * ZeRO-2 reduce-scatters gradient buckets while backward goes on.
 *
 * Failure of a peer: MPI runs with MPI_ERRORS_RETURN and a timeout
 * (comm_config.timeout_s) on waits, NCCL communicators are created
 * non-blocking and polled with the same timeout; when it passes, the call
 * fails and comm_abort stops every rank instead of hanging.
 *
 * Threads: one thread uses a communicator at a time.
 */
#ifndef DAGRUN_COMM_H
#define DAGRUN_COMM_H

#include <stddef.h>

#define COMM_MAX_INFLIGHT 16

typedef enum comm_backend {
  COMM_SELF = 0, /* one rank */
  COMM_MPI = 1,  /* ranks launched by mpirun/srun (or a singleton) */
  COMM_NCCL = 2  /* GPU ranks; bootstrap through MPI or a rendezvous */
} comm_backend;

typedef struct comm_config {
  comm_backend backend;
  double timeout_s; /* a collective not done by then fails; 0: 300 s */
  /* NCCL only: how ranks find each other when they were not launched by
   * MPI: a directory shared by the gang (dagrun's rendezvous, one file
   * with the unique id written by rank 0), with rank and size given. */
  const char *rendezvous_dir;
  int rank, size, device;
} comm_config;

typedef struct comm comm;
typedef struct comm_req comm_req;

/* Creates the communicator of this process's gang. For MPI, initializes
 * MPI (MPI_Init_thread, funneled) if nobody did. Returns 0 with *out, or
 * -1 with err. */
int comm_create(const comm_config *cfg, comm **out, char *err,
                size_t errlen);
int comm_rank(const comm *c);
int comm_size(const comm *c);
comm_backend comm_backend_of(const comm *c);
const char *comm_backend_name(comm_backend b); /* "self", "mpi", "nccl" */
/* 1 if this build has backend b (self and MPI always; NCCL where CUDA and
 * NCCL were found at build time), else 0. Any thread. */
int comm_backend_available(comm_backend b);

/* buf[0..n) summed over ranks, in place, on every rank. */
int comm_allreduce_sum(comm *c, float *buf, size_t n, char *err,
                       size_t errlen);
/* send[0..n*size) summed over ranks; rank r gets the sum's slice
 * [r*n, (r+1)*n) in recv[0..n). */
int comm_reduce_scatter_sum(comm *c, const float *send, float *recv, size_t n,
                            char *err, size_t errlen);
/* send[0..n) summed over ranks into root's recv[0..n) (recv is not used
 * on the other ranks and may be NULL there): ZeRO-2's gradient pieces
 * sent to the rank that owns them, where a group of the model's layout
 * straddles the ranks' unequal parts of it. */
int comm_reduce_sum(comm *c, const float *send, float *recv, size_t n,
                    int root, char *err, size_t errlen);
/* Each rank's send[0..n) into recv[r*n .. (r+1)*n) on every rank. send
 * may be recv + rank*n (in place). */
int comm_allgather(comm *c, const float *send, float *recv, size_t n,
                   char *err, size_t errlen);
/* Each rank's send[0..bytes) into recv[r*bytes .. (r+1)*bytes) on every
 * rank, the bytes as they are: for elements that are not float32 (the
 * GPU ranks' BF16 parameters). send may be recv + rank*bytes (in place). */
int comm_allgather_bytes(comm *c, const void *send, void *recv, size_t bytes,
                         char *err, size_t errlen);
/* bytes of buf from root to every rank. */
int comm_broadcast(comm *c, void *buf, size_t bytes, int root, char *err,
                   size_t errlen);
int comm_barrier(comm *c, char *err, size_t errlen);
/* *x summed over ranks, carried as two floats (its float value and the
 * rest), so that what float32 drops of each rank's term is kept: the
 * global sums of squares of sharded gradients. Host memory: MPI and self,
 * not NCCL. */
int comm_allreduce_sum_double(comm *c, double *x, char *err, size_t errlen);
/* The CUDA device this rank's NCCL communicator runs on (comm_config's
 * device, or the one picked from the local rank); -1 for MPI and self. */
int comm_device(const comm *c);

/* The same, started; *req completes in comm_wait. */
int comm_iallreduce_sum(comm *c, float *buf, size_t n, comm_req **req,
                        char *err, size_t errlen);
int comm_ireduce_scatter_sum(comm *c, const float *send, float *recv,
                             size_t n, comm_req **req, char *err,
                             size_t errlen);
int comm_ireduce_sum(comm *c, const float *send, float *recv, size_t n,
                     int root, comm_req **req, char *err, size_t errlen);
int comm_iallgather(comm *c, const float *send, float *recv, size_t n,
                    comm_req **req, char *err, size_t errlen);
int comm_iallgather_bytes(comm *c, const void *send, void *recv, size_t bytes,
                          comm_req **req, char *err, size_t errlen);
/* Point to point, for pipeline parallelism (gpu/pipeline/pipeline.h):
 * bytes of send to rank peer, and bytes from rank peer into recv. Every
 * send has its matching recv on the peer, of the same size; between two
 * ranks, messages arrive in the order they were sent (MPI's
 * non-overtaking rule), so no tags. peer must be another rank (so the
 * self backend has none to give). The blocking ones wait up to the
 * timeout; comm_isend lets a rank go on while its message waits for the
 * peer's recv (send must stay valid until comm_wait). NCCL (device
 * buffers): ncclSend/ncclRecv, whose kernels a communicator runs one
 * after the other, so comm_isend/comm_irecv are enqueued only at the
 * rank's next call on the communicator that needs them (a blocking send
 * or recv, a collective, comm_wait/comm_test of one of them), grouped
 * with that call's send or recv so that neighbours that each send and
 * then receive do not deadlock (comm_nccl.c says how); a peer that
 * never posts the matching call fails the wait at the timeout. A rank
 * that waits on another communicator must first start what it has
 * queued here (comm_test) if the peer needs it to get there. */
int comm_send(comm *c, const void *send, size_t bytes, int peer, char *err,
              size_t errlen);
int comm_recv(comm *c, void *recv, size_t bytes, int peer, char *err,
              size_t errlen);
int comm_isend(comm *c, const void *send, size_t bytes, int peer,
               comm_req **req, char *err, size_t errlen);
int comm_irecv(comm *c, void *recv, size_t bytes, int peer, comm_req **req,
               char *err, size_t errlen);

/* Waits for req (freed), up to the timeout. */
int comm_wait(comm *c, comm_req *req, char *err, size_t errlen);
/* Added to the contract: polls req without waiting. *done = 1: it
 * completed (req freed, as by comm_wait); *done = 0: not yet (req still
 * in flight). -1 with err (req freed) when it failed. MPI moves
 * nonblocking collectives along only inside MPI calls: to overlap a
 * request with compute, call this now and then (between layers). */
int comm_test(comm *c, comm_req *req, int *done, char *err, size_t errlen);

/* A communicator over a subset of c's ranks (collective over c): the
 * ranks that pass the same color (>= 0) form one, ordered by key (ties:
 * by rank in c), as MPI_Comm_split does. The new one has c's backend and
 * timeout, and its own request slots, so both can be used in turn by the
 * same thread. Pipeline parallel with data parallel beside it uses two:
 * a replica's stages and a stage's replicas. self: a one-rank
 * communicator. NCCL: ncclCommSplit, non-blocking and polled up to the
 * timeout (c's queued sends and recvs are enqueued first); the new one
 * has its own CUDA stream on c's device. Destroy it before c (the last
 * MPI communicator destroyed finalizes MPI). */
int comm_split(comm *c, int color, int key, comm **out, char *err,
               size_t errlen);

/* What a communicator has spent, per kind of operation, since it was
 * created (or comm_stats_reset): for a benchmark's split of a step's
 * communication. seconds is the time the caller spent inside the comm
 * calls (starting, waiting, testing), not the operations' latency: an
 * asynchronous operation that overlaps compute costs only its start and
 * its wait. bytes is each operation's buffer as the caller sees it:
 * allreduce and reduce n floats, reduce-scatter its input (n x size),
 * allgather its output (n x size), broadcast, send and recv their bytes.
 * Counted in start and wait: two clock reads a call. */
typedef enum comm_kind {
  COMM_KIND_ALLREDUCE, /* with comm_allreduce_sum_double's */
  COMM_KIND_REDUCE,
  COMM_KIND_REDUCE_SCATTER,
  COMM_KIND_ALLGATHER, /* float and bytes */
  COMM_KIND_BROADCAST,
  COMM_KIND_BARRIER,
  COMM_KIND_SEND,
  COMM_KIND_RECV,
  COMM_NKINDS
} comm_kind;
typedef struct comm_stats {
  double seconds[COMM_NKINDS];
  double bytes[COMM_NKINDS];
  unsigned long long calls[COMM_NKINDS];
} comm_stats;
/* "allreduce", "reduce", "reduce_scatter", "allgather", "broadcast",
 * "barrier", "send", "recv". */
const char *comm_kind_name(comm_kind k);
/* c's figures added to *sum (so that a caller adds up its split
 * communicators'). */
void comm_stats_add(const comm *c, comm_stats *sum);
void comm_stats_reset(comm *c);

/* Stops every rank of the gang (MPI_Abort / ncclCommAbort + exit code):
 * for a rank that found a peer gone or a collective timed out. Does not
 * return. */
void comm_abort(comm *c, int code) __attribute__((noreturn));
/* Frees the communicator (and finalizes MPI when comm_create initialized
 * it). NULL: no-op. */
void comm_destroy(comm *c);

#endif /* DAGRUN_COMM_H */
