/*
 * The NCCL API on the CPU, for the emulator: the calls gpu/comm/
 * comm_nccl.c and gpu/zero/zero_cuda.c make, under the names nccl.h
 * declares (programs built on the emulator link this instead of libnccl),
 * between real processes of one host (ranks launched by mpirun, or
 * started with a rendezvous directory).
 *
 * Transport: one POSIX shared-memory segment per communicator, named
 * /dagrun-nccl-[<DAGRUN_EMU_NCCL_SHM_TAG>-]<hex of the unique id's random
 * bytes>: a control block
 * (each rank's pid, state and two step counters, atomics that work across
 * processes) and one data slot per rank (DAGRUN_EMU_NCCL_SLOT_BYTES,
 * default 1 MiB). A collective runs in steps of at most a slot per rank:
 * each rank waits until every rank has read the previous step, copies
 * its part into its slot (from device memory, through the emulated
 * runtime, which checks that the buffers are device memory), raises its
 * "posted" counter, waits for every rank's, then reads what it needs from
 * the others' slots and raises its "consumed" counter. Waits poll with
 * short sleeps: ranks that share cores must leave them to each other.
 * The name is unlinked as soon as every rank has mapped the segment, so a
 * gang that is killed later leaves nothing in /dev/shm; a communicator
 * whose creation fails unlinks it when it gives up.
 *
 * What is modelled:
 * - ncclGetUniqueId: random bytes from /dev/urandom and a magic;
 *   ncclCommInitRankConfig with blocking = 0 returns ncclInProgress, and
 *   ncclCommGetAsyncError says ncclInProgress until every rank has
 *   joined (as NCCL's bootstrap does), or an error when a peer that had
 *   joined is gone or the rest do not come within the timeout.
 *   ncclCommFinalize on a non-blocking communicator returns
 *   ncclInProgress and settles at the next ncclCommGetAsyncError.
 * - AllReduce, ReduceScatter, Reduce (sum, prod, max, min of the integer
 *   and float32/float64 types), AllGather and Broadcast (any type), in
 *   place as NCCL defines it (AllGather: sendbuff == recvbuff +
 *   rank*count; ReduceScatter: sendbuff + rank*count == recvbuff;
 *   AllReduce, Reduce and Broadcast: sendbuff == recvbuff). Reduce's
 *   recvbuff is used (and checked) on the root only. Reductions add in
 *   rank order 0..N-1 on every rank, so every rank gets bitwise the same
 *   result, as NCCL's ring gives. count 0 returns at once, as NCCL does.
 * - On a non-blocking communicator the first collective returns
 *   ncclInProgress (NCCL's runtime connection setup) and
 *   ncclCommGetAsyncError settles it.
 * - Failure: a collective whose peer is gone (its pid no longer exists,
 *   or it left or aborted the communicator) or does not arrive within
 *   DAGRUN_EMU_NCCL_TIMEOUT_S (default 30 s) ends early; the
 *   communicator's asynchronous error becomes ncclRemoteError, every
 *   later call returns it, and ncclGetLastError says which rank, which
 *   collective and why. A blocking communicator's call returns the error
 *   too; a non-blocking one's returns as NCCL's enqueue does (ncclSuccess,
 *   or ncclInProgress for the first), and the error shows only in
 *   ncclCommGetAsyncError, while the stream's events complete (the
 *   "kernel" ended, as an aborted one does) with the receive buffer
 *   partly written. ncclCommAbort marks the communicator aborted
 *   for the peers (who then fail as NCCL's would, seeing the connection
 *   go) and unlinks the segment's name if it is still there. Collectives
 *   whose ranks disagree on the operation, type, count or root fail the
 *   same way with ncclInvalidUsage (NCCL would hang or corrupt memory).
 *   A buffer that is not device memory (or runs past its allocation)
 *   is refused by the call itself with ncclInvalidArgument, before any
 *   rank waits for this one.
 *
 * - Send and Recv (any type), and ncclGroupStart/ncclGroupEnd (nested;
 *   only sends and recvs inside: a collective there is refused with
 *   ncclInvalidUsage). Each ordered pair of ranks has a channel in the
 *   segment (its header and a buffer of a slot's size): the sender posts
 *   the message's count and type, the receiver its own; once both are
 *   there (a send is matched only by its recv posted, as NCCL's send
 *   kernel ends when the receiver has the data; NCCL can end one that
 *   fits in the peer's buffer sooner, which no caller may count on) each
 *   compares them, and counts or types that differ fail both with
 *   ncclInvalidUsage; then the data goes through the buffer in chunks.
 *   A pair's messages match in the order they were posted, per
 *   direction. A call outside a group is a group of its own. The
 *   operations of a group progress together until all are done (two
 *   ranks that send to each other and receive in one group do not
 *   deadlock; outside a group, or a second message to one peer that
 *   needs a recv the peer posts after its group, they do, and fail at
 *   the timeout as a hung NCCL would hang). A failed call inside a group
 *   makes ncclGroupEnd return its error and run nothing of the group. A
 *   peer gone, aborted or silent past the timeout fails the group with
 *   ncclRemoteError as the collectives do; buffers must be device
 *   memory; count 0 returns at once. On a non-blocking communicator the
 *   first send or recv with each peer returns ncclInProgress (NCCL's
 *   runtime connect), settled by ncclCommGetAsyncError.
 *
 * - ncclCommSplit: collective over the parent (an AllGather of each
 *   rank's color, key and a fresh id, which fails as the collectives do
 *   when a peer is gone or calls something else); the ranks of a color
 *   form a new communicator, ordered by key, then by rank in the parent,
 *   over a segment of its own named by its first rank's id, created as
 *   ncclCommInitRankConfig does (config NULL: the parent's blocking
 *   mode); NCCL_SPLIT_NOCOLOR gets NULL; other negative colors are
 *   refused with ncclInvalidArgument. ncclCommCount, ncclCommUserRank.
 *
 * Not modelled: GPU streams and their overlap (the stream is the host
 * thread: a collective has completed, or failed, when the call returns,
 * so a real NCCL's hung kernel that a caller's timeout must catch
 * appears here as a call that fails after the emulator's own timeout,
 * which is the one to set below the caller's), topology, channels, algorithms
 * and protocols, ranks on more than one host, collectives in groups,
 * splitShare (resources shared with the parent), user-registered buffers and
 * reduction ops, fp16/bf16/fp8 reductions (ncclInvalidArgument), ncclAvg;
 * ncclCommAbort from another thread while a collective of this process blocks
 * (NCCL's way to unblock it: here the blocked call ends at the timeout, or when
 * a peer fails). NCCL_* environment variables do nothing.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#define EMU_ID_MAGIC "DGEMUNCCL1"
#define EMU_ID_RANDOM 16                    /* random bytes after the magic */
#define EMU_SEG_MAGIC 0x4c43434e554d4544ULL /* "DEMUNCCL" */
#define EMU_SEG_VERSION 2u

enum { ST_ABSENT = 0, ST_JOINED = 1, ST_LEFT = 2, ST_ABORTED = 3 };

/* One rank's part of the control block. */
struct rank_hdr {
  std::atomic<uint64_t> posted;   /* steps whose data is in the slot */
  std::atomic<uint64_t> consumed; /* steps this rank has read */
  std::atomic<int32_t> state;     /* ST_* */
  std::atomic<int32_t> pid;
  /* The collective of the step being posted: every rank must agree. */
  uint64_t seq, count;
  int32_t op, dtype, redop, root;
};

/* One ordered pair's point-to-point channel (src to dst): the message
 * each side has posted (count and type, then the sequence number that
 * publishes them) and the chunks of the pair's buffer filled by src and
 * drained by dst, counted over the pair's whole life. */
struct pair_hdr {
  std::atomic<uint64_t> sseq, rseq; /* sends / recvs posted */
  std::atomic<uint64_t> filled, drained;
  uint64_t scount, rcount;
  int32_t stype, rtype;
};

struct ctrl {
  std::atomic<uint64_t> magic;
  std::atomic<uint32_t> version;
  std::atomic<int32_t> nranks;
  std::atomic<uint64_t> slot_bytes;
  std::atomic<int32_t> aborted_by; /* rank + 1 that aborted, or 0 */
  rank_hdr r[];                    /* nranks of them */
};

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the control block's atomics must work across processes");
static_assert(std::atomic<int32_t>::is_always_lock_free,
              "the control block's atomics must work across processes");

struct ncclComm {
  int rank, nranks, blocking;
  char name[80]; /* the segment's name */
  int unlinked;
  ctrl *c;
  unsigned char *slots; /* nranks slots of slot_bytes */
  pair_hdr *pairs;      /* nranks x nranks: [src * nranks + dst] */
  unsigned char *pbuf;  /* nranks x nranks buffers of slot_bytes */
  size_t map_bytes, slot_bytes;
  unsigned char *tmp; /* slot_bytes: a reduction's result before the copy */
  uint64_t step;      /* steps done */
  uint64_t seq;       /* collectives started */
  double timeout_s, t_init;
  ncclResult_t async; /* ncclCommGetAsyncError's answer */
  int ready;          /* every rank joined */
  int connected;      /* a collective has run */
  /* Point to point: messages posted to / from each peer, and the peers
   * connected (NCCL connects a pair at its first send or recv). */
  std::vector<uint64_t> nsend, nrecv;
  std::vector<char> p2p_connected;
  char last[512];
};

static thread_local char t_last[512]; /* ncclGetLastError(NULL) */

/* ---- helpers ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double env_double(const char *name, double dflt) {
  const char *s = getenv(name);
  if (!s || !*s)
    return dflt;
  double v = atof(s);
  return v > 0 ? v : dflt;
}

/* Records msg as comm's (or, without comm, the thread's) last error and
 * returns r. */
__attribute__((format(printf, 3, 4))) static ncclResult_t
fail(ncclComm *comm, ncclResult_t r, const char *fmt, ...) {
  char *buf = comm ? comm->last : t_last;
  size_t n = comm ? sizeof comm->last : sizeof t_last;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  if (comm != nullptr)
    snprintf(t_last, sizeof t_last, "%s", comm->last);
  return r;
}

/* A communicator-wide failure: sticky, as NCCL's asynchronous errors. */
__attribute__((format(printf, 3, 4))) static ncclResult_t
broke(ncclComm *comm, ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(comm->last, sizeof comm->last, fmt, ap);
  va_end(ap);
  snprintf(t_last, sizeof t_last, "%s", comm->last);
  comm->async = r;
  return r;
}

/* The pause between two polls: a few yields, then 10 us growing to 1 ms. */
static void backoff(unsigned *iter) {
  unsigned i = (*iter)++;
  if (i < 32) {
    sched_yield();
    return;
  }
  long ns = 10000L << ((i - 32) / 8 < 7 ? (i - 32) / 8 : 7);
  if (ns > 1000000L)
    ns = 1000000L;
  struct timespec ts = {0, ns};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Whether process pid still runs: kill(pid, 0) succeeds for a zombie too,
 * so /proc says whether it is one. */
static bool pid_alive(int pid) {
  if (pid <= 0)
    return false;
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return false;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return true; /* no /proc: trust kill */
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

static void unlink_name(ncclComm *comm) {
  if (!comm->unlinked) {
    shm_unlink(comm->name); /* ENOENT: a peer did it */
    comm->unlinked = 1;
  }
}

static const char *op_name(int op) {
  switch (op) {
  case 0:
    return "AllReduce";
  case 1:
    return "ReduceScatter";
  case 2:
    return "AllGather";
  case 3:
    return "Broadcast";
  case 4:
    return "Reduce";
  case 5:
    return "CommSplit";
  }
  return "?";
}
/* OP_SPLIT: ncclCommSplit's exchange of colors and keys, an AllGather of
 * host memory. */
enum {
  OP_ALLREDUCE,
  OP_REDUCESCATTER,
  OP_ALLGATHER,
  OP_BROADCAST,
  OP_REDUCE,
  OP_SPLIT
};

static bool reduces(int op) {
  return op == OP_ALLREDUCE || op == OP_REDUCESCATTER || op == OP_REDUCE;
}

/* Why rank *p cannot take part any more, or NULL while it may: checked
 * while waiting for it. A communicator aborted by any rank is broken for
 * all: *p becomes the first rank that aborted, so every survivor names
 * that rank, whichever peer it was waiting for (CI once saw rank 0 blame
 * rank 1, which was merely late, for rank 2's abort). */
static const char *peer_problem(ncclComm *comm, int *p) {
  ctrl *c = comm->c;
  int by = c->aborted_by.load();
  if (by > 0) {
    *p = by - 1;
    return "it aborted the communicator (ncclCommAbort)";
  }
  int st = c->r[*p].state.load();
  if (st == ST_LEFT)
    return "it left the communicator (ncclCommFinalize/ncclCommDestroy) "
           "with this collective not done: the ranks called different "
           "collectives";
  if (st == ST_JOINED && !pid_alive(c->r[*p].pid.load()))
    return "its process is gone (exited or killed)";
  return nullptr;
}

/* Waits until every rank's counter (posted or consumed) reaches target;
 * a peer gone or later than the timeout breaks the communicator. */
static ncclResult_t wait_all(ncclComm *comm, bool posted, uint64_t target,
                             int op) {
  double t0 = now_s();
  for (int p = 0; p < comm->nranks; p++) {
    rank_hdr *h = &comm->c->r[p];
    unsigned iter = 0;
    for (;;) {
      uint64_t v = posted ? h->posted.load(std::memory_order_acquire)
                          : h->consumed.load(std::memory_order_acquire);
      if (v >= target)
        break;
      if (iter >= 32 && iter % 8 == 0) {
        int culprit = p;
        const char *why = peer_problem(comm, &culprit);
        if (why) {
          unlink_name(comm);
          return broke(comm, ncclRemoteError,
                       "emulated NCCL: rank %d: %s #%llu: peer rank %d (pid "
                       "%d): %s",
                       comm->rank, op_name(op), (unsigned long long)comm->seq,
                       culprit, (int)comm->c->r[culprit].pid.load(), why);
        }
        if (now_s() - t0 > comm->timeout_s) {
          unlink_name(comm);
          return broke(comm, ncclRemoteError,
                       "emulated NCCL: rank %d: %s #%llu: peer rank %d (pid "
                       "%d) did not arrive within %g s "
                       "(DAGRUN_EMU_NCCL_TIMEOUT_S)",
                       comm->rank, op_name(op), (unsigned long long)comm->seq,
                       p, (int)h->pid.load(), comm->timeout_s);
        }
      }
      backoff(&iter);
    }
  }
  return ncclSuccess;
}

static size_t type_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

template <typename T> static T apply(ncclRedOp_t op, T a, T b) {
  switch (op) {
  case ncclProd:
    return (T)(a * b);
  case ncclMax:
    return a > b ? a : b;
  case ncclMin:
    return a < b ? a : b;
  default:
    return (T)(a + b);
  }
}

/* acc[0..n) = acc op src[0..n). */
template <typename T>
static void reduce_into(void *acc, const void *src, size_t n, ncclRedOp_t op) {
  T *a = (T *)acc;
  const T *s = (const T *)src;
  for (size_t i = 0; i < n; i++)
    a[i] = apply<T>(op, a[i], s[i]);
}

static bool reducible(ncclDataType_t t, ncclRedOp_t op) {
  if (op != ncclSum && op != ncclProd && op != ncclMax && op != ncclMin)
    return false;
  switch (t) {
  case ncclInt8:
  case ncclUint8:
  case ncclInt32:
  case ncclUint32:
  case ncclInt64:
  case ncclUint64:
  case ncclFloat32:
  case ncclFloat64:
    return true;
  default:
    return false;
  }
}

static void reduce(ncclDataType_t t, ncclRedOp_t op, void *acc, const void *src,
                   size_t n) {
  switch (t) {
  case ncclInt8:
    reduce_into<int8_t>(acc, src, n, op);
    break;
  case ncclUint8:
    reduce_into<uint8_t>(acc, src, n, op);
    break;
  case ncclInt32:
    reduce_into<int32_t>(acc, src, n, op);
    break;
  case ncclUint32:
    reduce_into<uint32_t>(acc, src, n, op);
    break;
  case ncclInt64:
    reduce_into<int64_t>(acc, src, n, op);
    break;
  case ncclUint64:
    reduce_into<uint64_t>(acc, src, n, op);
    break;
  case ncclFloat32:
    reduce_into<float>(acc, src, n, op);
    break;
  case ncclFloat64:
    reduce_into<double>(acc, src, n, op);
    break;
  default:
    break;
  }
}

/* ---- API: ids, errors, version ---- */

ncclResult_t ncclGetVersion(int *version) {
  if (!version)
    return fail(nullptr, ncclInvalidArgument, "ncclGetVersion: NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id)
    return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: NULL id");
  memset(id, 0, sizeof *id);
  memcpy(id->internal, EMU_ID_MAGIC, sizeof EMU_ID_MAGIC - 1);
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  unsigned char *rnd = (unsigned char *)id->internal + sizeof EMU_ID_MAGIC - 1;
  if (fd < 0 || read(fd, rnd, EMU_ID_RANDOM) != EMU_ID_RANDOM) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return fail(nullptr, ncclSystemError,
                "emulated NCCL: ncclGetUniqueId: /dev/urandom: %s",
                strerror(e));
  }
  close(fd);
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  /* NCCL's own texts, without its hints about NCCL_DEBUG, which does
   * nothing here: ncclGetLastError says what happened. */
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  return comm ? comm->last : t_last;
}

/* ---- communicators ---- */

/* Whether every rank has joined; a peer that joined and is gone, or the
 * timeout, breaks the communicator. Unlinks the name once all are in. */
static ncclResult_t poll_init(ncclComm *comm) {
  if (comm->ready || comm->async != ncclInProgress)
    return comm->async;
  for (int p = 0; p < comm->nranks; p++) {
    int st = comm->c->r[p].state.load();
    if (st == ST_ABSENT) {
      if (now_s() - comm->t_init > comm->timeout_s) {
        unlink_name(comm);
        return broke(comm, ncclSystemError,
                     "emulated NCCL: rank %d: init: rank %d of %d did not "
                     "join within %g s (DAGRUN_EMU_NCCL_TIMEOUT_S)",
                     comm->rank, p, comm->nranks, comm->timeout_s);
      }
      return ncclInProgress;
    }
    /* A rank that has left was there: it may have finished its work
     * before this one looked. */
    int culprit = p;
    const char *why = st == ST_LEFT ? nullptr : peer_problem(comm, &culprit);
    if (why) {
      unlink_name(comm);
      return broke(comm, ncclRemoteError,
                   "emulated NCCL: rank %d: init: rank %d (pid %d): %s",
                   comm->rank, culprit, (int)comm->c->r[culprit].pid.load(),
                   why);
    }
  }
  /* Everyone has the segment mapped: the name is no longer needed. */
  unlink_name(comm);
  comm->ready = 1;
  comm->async = ncclSuccess;
  return ncclSuccess;
}

static void comm_free(ncclComm *comm) {
  if (comm->c)
    munmap(comm->c, comm->map_bytes);
  free(comm->tmp);
  delete comm;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks,
                                    ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  if (!out)
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRankConfig: NULL comm");
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRankConfig: rank %d of %d", rank, nranks);
  if (memcmp(id.internal, EMU_ID_MAGIC, sizeof EMU_ID_MAGIC - 1) != 0)
    return fail(nullptr, ncclInvalidArgument,
                "emulated NCCL: the unique id is not one this emulator's "
                "ncclGetUniqueId made (not broadcast to this rank?)");
  ncclComm *comm = new ncclComm();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT ||
                   config->blocking != 0;
  comm->timeout_s = env_double("DAGRUN_EMU_NCCL_TIMEOUT_S", 30);
  comm->t_init = now_s();
  comm->async = ncclInProgress;
  size_t slot = (size_t)env_double("DAGRUN_EMU_NCCL_SLOT_BYTES", 1 << 20);
  slot = (slot + 255) / 256 * 256;
  if (slot < 256 * (size_t)nranks) /* a reduce-scatter step: nranks parts */
    slot = 256 * (size_t)nranks;
  comm->slot_bytes = slot;
  /* A test that checks /dev/shm for leftovers tags its gangs' segments,
   * so that other programs' gangs running at the same time (ctest -j)
   * are not taken for its own. */
  const char *tag = getenv("DAGRUN_EMU_NCCL_SHM_TAG");
  if (!tag)
    tag = "";
  size_t tag_len = strlen(tag);
  if (tag_len > 16 || strspn(tag, "abcdefghijklmnopqrstuvwxyz0123456789") !=
                          tag_len) {
    delete comm;
    return fail(nullptr, ncclInvalidArgument,
                "emulated NCCL: DAGRUN_EMU_NCCL_SHM_TAG must be at most 16 "
                "lower-case letters and digits, not \"%s\"",
                tag);
  }
  char *p = comm->name + snprintf(comm->name, sizeof comm->name,
                                  "/dagrun-nccl-%s%s", tag, *tag ? "-" : "");
  const unsigned char *rnd =
      (const unsigned char *)id.internal + sizeof EMU_ID_MAGIC - 1;
  for (int i = 0; i < EMU_ID_RANDOM; i++)
    p += sprintf(p, "%02x", rnd[i]);

  size_t npairs = (size_t)nranks * (size_t)nranks;
  size_t head = sizeof(ctrl) + (size_t)nranks * sizeof(rank_hdr) +
                npairs * sizeof(pair_hdr);
  head = (head + 4095) / 4096 * 4096;
  /* The pairs' buffers are pages nobody touches until a pair talks. */
  comm->map_bytes = head + ((size_t)nranks + npairs) * slot;
  int fd = shm_open(comm->name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    ncclResult_t r = fail(nullptr, ncclSystemError,
                          "emulated NCCL: shm_open(%s): %s", comm->name,
                          strerror(errno));
    delete comm;
    return r;
  }
  struct stat st;
  ncclResult_t r = ncclSuccess;
  if (fstat(fd, &st) != 0)
    r = fail(nullptr, ncclSystemError, "emulated NCCL: fstat(%s): %s",
             comm->name, strerror(errno));
  /* The first rank there sizes it (two at once size it the same); a
   * segment of another size was made for another gang size. */
  else if (st.st_size == 0 && ftruncate(fd, (off_t)comm->map_bytes) != 0)
    r = fail(nullptr, ncclSystemError, "emulated NCCL: ftruncate(%s): %s",
             comm->name, strerror(errno));
  else if (st.st_size != 0 && (size_t)st.st_size != comm->map_bytes)
    r = fail(nullptr, ncclInvalidUsage,
             "emulated NCCL: rank %d: %s is %lld bytes, this rank expects "
             "%zu: the ranks disagree on nranks (%d here) or "
             "DAGRUN_EMU_NCCL_SLOT_BYTES",
             rank, comm->name, (long long)st.st_size, comm->map_bytes, nranks);
  if (r == ncclSuccess) {
    void *m = mmap(nullptr, comm->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    if (m == MAP_FAILED)
      r = fail(nullptr, ncclSystemError, "emulated NCCL: mmap(%s): %s",
               comm->name, strerror(errno));
    else
      comm->c = (ctrl *)m;
  }
  close(fd);
  if (r == ncclSuccess) {
    comm->slots = (unsigned char *)comm->c + head;
    comm->pairs = (pair_hdr *)((unsigned char *)comm->c + sizeof(ctrl) +
                               (size_t)nranks * sizeof(rank_hdr));
    comm->pbuf = comm->slots + (size_t)nranks * slot;
    comm->nsend.assign((size_t)nranks, 0);
    comm->nrecv.assign((size_t)nranks, 0);
    comm->p2p_connected.assign((size_t)nranks, 0);
    comm->tmp = (unsigned char *)malloc(slot);
    if (!comm->tmp)
      r = fail(nullptr, ncclSystemError, "emulated NCCL: out of memory");
  }
  if (r == ncclSuccess) {
    ctrl *c = comm->c;
    /* Fresh pages are zeros: the first rank writes the geometry, the
     * others check it. */
    uint64_t zero64 = 0;
    int32_t zero32 = 0;
    c->nranks.compare_exchange_strong(zero32, nranks);
    c->slot_bytes.compare_exchange_strong(zero64, slot);
    zero64 = 0;
    c->magic.compare_exchange_strong(zero64, EMU_SEG_MAGIC);
    c->version.store(EMU_SEG_VERSION);
    int32_t absent = ST_ABSENT;
    if (c->magic.load() != EMU_SEG_MAGIC || c->nranks.load() != nranks ||
        c->slot_bytes.load() != slot)
      r = fail(nullptr, ncclInvalidUsage,
               "emulated NCCL: rank %d: %s holds a gang of %d ranks with "
               "%llu-byte slots; this rank has %d and %zu",
               rank, comm->name, (int)c->nranks.load(),
               (unsigned long long)c->slot_bytes.load(), nranks, slot);
    else if (c->aborted_by.load() != 0)
      r = fail(nullptr, ncclRemoteError,
               "emulated NCCL: rank %d: rank %d aborted the communicator "
               "before this rank joined",
               rank, c->aborted_by.load() - 1);
    else if (c->r[rank].pid.store(getpid()),
             !c->r[rank].state.compare_exchange_strong(absent, ST_JOINED))
      r = fail(nullptr, ncclInvalidUsage,
               "emulated NCCL: rank %d joined %s twice (two processes with "
               "the same rank?)",
               rank, comm->name);
  }
  if (r != ncclSuccess) {
    shm_unlink(comm->name);
    comm_free(comm);
    return r;
  }
  *out = comm;
  if (!comm->blocking)
    return poll_init(comm);
  unsigned iter = 0;
  while ((r = poll_init(comm)) == ncclInProgress)
    backoff(&iter);
  return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
  if (!comm || !err)
    return fail(comm, ncclInvalidArgument,
                "ncclCommGetAsyncError: NULL argument");
  if (!comm->ready && comm->async == ncclInProgress)
    *err = poll_init(comm);
  else if (comm->ready && comm->async == ncclInProgress)
    *err = comm->async = ncclSuccess; /* a finalize: nothing to flush */
  else
    *err = comm->async;
  return ncclSuccess;
}

/* Marks this rank gone from the segment. */
static void leave(ncclComm *comm, int state) {
  if (comm->c)
    comm->c->r[comm->rank].state.store(state);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!comm)
    return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: NULL comm");
  if (comm->async != ncclSuccess)
    return comm->async;
  /* Every collective has completed when its call returned: there is
   * nothing to flush. A non-blocking communicator says so through
   * ncclCommGetAsyncError, as NCCL's does. */
  leave(comm, ST_LEFT);
  if (comm->blocking)
    return ncclSuccess;
  comm->async = ncclInProgress;
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  if (comm->c && comm->c->r[comm->rank].state.load() == ST_JOINED)
    leave(comm, ST_LEFT);
  if (!comm->ready)
    unlink_name(comm);
  comm_free(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  if (comm->c) {
    int32_t none = 0;
    comm->c->aborted_by.compare_exchange_strong(none, comm->rank + 1);
    leave(comm, ST_ABORTED);
  }
  unlink_name(comm);
  comm_free(comm);
  return ncclSuccess;
}

/* ---- collectives ---- */

struct coll {
  int op;
  const unsigned char *send;
  unsigned char *recv;
  size_t count; /* NCCL's count: per rank for ReduceScatter/AllGather */
  ncclDataType_t type;
  ncclRedOp_t redop;
  int root;
  cudaStream_t stream;
  bool host = false; /* OP_SPLIT: the buffers are host memory */
};

/* A copy of one step, through the emulated runtime (which checks device
 * memory), or plainly for host buffers. */
static cudaError_t copy(const coll &k, void *dst, const void *src, size_t n,
                        cudaMemcpyKind kind) {
  if (k.host) {
    memcpy(dst, src, n);
    return cudaSuccess;
  }
  return cudaMemcpyAsync(dst, src, n, kind, k.stream);
}

/* One step: elements [off, off + len) of count. */
static ncclResult_t step(ncclComm *comm, const coll &k, size_t off,
                         size_t len) {
  const size_t es = type_size(k.type);
  const int N = comm->nranks, me = comm->rank;
  unsigned char *mine = comm->slots + (size_t)me * comm->slot_bytes;
  uint64_t s = ++comm->step;
  ncclResult_t r;
  /* Every rank has read what this one posted last. */
  if ((r = wait_all(comm, false, s - 1, k.op)) != ncclSuccess)
    return r;
  rank_hdr *h = &comm->c->r[me];
  h->seq = comm->seq;
  h->count = k.count;
  h->op = k.op;
  h->dtype = k.type;
  h->redop = reduces(k.op) ? k.redop : 0;
  h->root = k.op == OP_BROADCAST || k.op == OP_REDUCE ? k.root : 0;
  cudaError_t e = cudaSuccess;
  switch (k.op) {
  case OP_ALLREDUCE:
  case OP_REDUCE:
  case OP_ALLGATHER:
  case OP_SPLIT:
    e = copy(k, mine, k.send + off * es, len * es, cudaMemcpyDeviceToHost);
    break;
  case OP_REDUCESCATTER: /* rank q's part of this step at q * len */
    for (int q = 0; q < N && e == cudaSuccess; q++)
      e = cudaMemcpyAsync(mine + (size_t)q * len * es,
                          k.send + ((size_t)q * k.count + off) * es, len * es,
                          cudaMemcpyDeviceToHost, k.stream);
    break;
  case OP_BROADCAST:
    if (me == k.root)
      e = cudaMemcpyAsync(mine, k.send + off * es, len * es,
                          cudaMemcpyDeviceToHost, k.stream);
    break;
  }
  if (e != cudaSuccess)
    return broke(comm, ncclUnhandledCudaError,
                 "emulated NCCL: rank %d: %s #%llu: copy from the send "
                 "buffer: %s",
                 me, op_name(k.op), (unsigned long long)comm->seq,
                 cudaGetErrorString(e));
  h->posted.store(s, std::memory_order_release);
  if ((r = wait_all(comm, true, s, k.op)) != ncclSuccess)
    return r;
  for (int q = 0; q < N; q++) {
    rank_hdr *o = &comm->c->r[q];
    if (o->seq != h->seq || o->op != h->op || o->dtype != h->dtype ||
        o->count != h->count || o->redop != h->redop || o->root != h->root)
      return broke(comm, ncclInvalidUsage,
                   "emulated NCCL: rank %d: collective #%llu is %s of %llu "
                   "elements of type %d (op %d, root %d) here, %s of %llu "
                   "of type %d (op %d, root %d) on rank %d: every rank must "
                   "call the same collectives in the same order",
                   me, (unsigned long long)h->seq, op_name(h->op),
                   (unsigned long long)h->count, h->dtype, h->redop, h->root,
                   op_name(o->op), (unsigned long long)o->count, o->dtype,
                   o->redop, o->root, q);
  }
  const unsigned char *slot0 = comm->slots;
  const size_t sb = comm->slot_bytes;
  switch (k.op) {
  case OP_REDUCE:
  case OP_ALLREDUCE:
  case OP_REDUCESCATTER: {
    if (k.op == OP_REDUCE && me != k.root)
      break; /* only the root receives */
    /* In rank order 0..N-1 on every rank: the same bits everywhere. */
    size_t part = k.op == OP_REDUCESCATTER ? (size_t)me * len * es : 0;
    memcpy(comm->tmp, slot0 + part, len * es);
    for (int q = 1; q < N; q++)
      reduce(k.type, k.redop, comm->tmp, slot0 + (size_t)q * sb + part, len);
    e = cudaMemcpyAsync(k.recv + off * es, comm->tmp, len * es,
                        cudaMemcpyHostToDevice, k.stream);
    break;
  }
  case OP_ALLGATHER:
  case OP_SPLIT:
    for (int q = 0; q < N && e == cudaSuccess; q++)
      e = copy(k, k.recv + ((size_t)q * k.count + off) * es,
               slot0 + (size_t)q * sb, len * es, cudaMemcpyHostToDevice);
    break;
  case OP_BROADCAST:
    e = cudaMemcpyAsync(k.recv + off * es, slot0 + (size_t)k.root * sb,
                        len * es, cudaMemcpyHostToDevice, k.stream);
    break;
  }
  if (e != cudaSuccess)
    return broke(comm, ncclUnhandledCudaError,
                 "emulated NCCL: rank %d: %s #%llu: copy to the receive "
                 "buffer: %s",
                 me, op_name(k.op), (unsigned long long)comm->seq,
                 cudaGetErrorString(e));
  h->consumed.store(s, std::memory_order_release);
  return ncclSuccess;
}

/* [p, p + bytes) lies in device memory: the emulated runtime checks a copy
 * of the range onto itself (its EMU ERROR says what is wrong). */
static bool device_range(const void *p, size_t bytes) {
  return cudaMemcpy((void *)p, p, bytes, cudaMemcpyDeviceToDevice) ==
         cudaSuccess;
}

static thread_local int t_group; /* ncclGroupStart depth */

/* Whether comm may take an operation now: not NULL, ready, not broken,
 * not finalized. */
static ncclResult_t usable(ncclComm *comm, const char *what) {
  if (!comm)
    return fail(nullptr, ncclInvalidArgument, "%s: NULL comm", what);
  if (comm->async != ncclSuccess)
    return comm->async == ncclInProgress
               ? fail(comm, ncclInvalidUsage,
                      "emulated NCCL: %s on a communicator not ready "
                      "(ncclCommGetAsyncError says ncclInProgress)",
                      what)
               : comm->async;
  if (comm->c->r[comm->rank].state.load() != ST_JOINED)
    return fail(comm, ncclInvalidUsage,
                "emulated NCCL: %s after ncclCommFinalize", what);
  return ncclSuccess;
}

static ncclResult_t run(ncclComm *comm, const coll &k) {
  const char *what = op_name(k.op);
  ncclResult_t ur = usable(comm, what);
  if (ur != ncclSuccess)
    return ur;
  if (t_group > 0)
    return fail(comm, ncclInvalidUsage,
                "emulated NCCL: %s inside ncclGroupStart/ncclGroupEnd: "
                "only point to point is emulated in groups",
                what);
  size_t es = type_size(k.type);
  if (es == 0)
    return fail(comm, ncclInvalidArgument, "emulated NCCL: %s: datatype %d",
                what, (int)k.type);
  if (reduces(k.op) && !reducible(k.type, k.redop))
    return fail(comm, ncclInvalidArgument,
                "emulated NCCL: %s: reduction %d of datatype %d is not "
                "emulated (sum, prod, max, min of integers, float32, "
                "float64)",
                what, (int)k.redop, (int)k.type);
  if ((k.op == OP_BROADCAST || k.op == OP_REDUCE) &&
      (k.root < 0 || k.root >= comm->nranks))
    return fail(comm, ncclInvalidArgument, "emulated NCCL: %s: root %d of %d",
                what, k.root, comm->nranks);
  if (k.count == 0)
    return ncclSuccess;
  size_t N = (size_t)comm->nranks;
  size_t send_n = k.op == OP_REDUCESCATTER ? k.count * N : k.count;
  size_t recv_n =
      k.op == OP_ALLGATHER || k.op == OP_SPLIT ? k.count * N : k.count;
  bool uses_send = !k.host && (k.op != OP_BROADCAST || k.root == comm->rank);
  if (uses_send && !device_range(k.send, send_n * es))
    return fail(comm, ncclInvalidArgument,
                "emulated NCCL: %s: sendbuff %p (%zu elements) is not device "
                "memory (the emulated runtime's EMU ERROR says more)",
                what, (const void *)k.send, send_n);
  bool uses_recv = !k.host && (k.op != OP_REDUCE || k.root == comm->rank);
  if (uses_recv && !device_range(k.recv, recv_n * es))
    return fail(comm, ncclInvalidArgument,
                "emulated NCCL: %s: recvbuff %p (%zu elements) is not device "
                "memory (the emulated runtime's EMU ERROR says more)",
                what, (void *)k.recv, recv_n);
  comm->seq++;
  size_t per = comm->slot_bytes / es;
  if (k.op == OP_REDUCESCATTER)
    per /= N;
  ncclResult_t r = ncclSuccess;
  for (size_t off = 0; off < k.count && r == ncclSuccess; off += per) {
    size_t len = k.count - off < per ? k.count - off : per;
    r = step(comm, k, off, len);
  }
  if (comm->blocking || k.host)
    return r;
  /* Non-blocking: the call enqueued the work, and what became of it is
   * the communicator's asynchronous state, as with NCCL: a peer lost
   * while the "kernel" ran ended it early (its event completes, as an
   * aborted kernel's does) and shows in ncclCommGetAsyncError only. The
   * first collective sets up the connections (NCCL's runtime connect)
   * and returns ncclInProgress until ncclCommGetAsyncError settles. */
  if (!comm->connected) {
    comm->connected = 1;
    if (comm->async == ncclSuccess)
      comm->async = ncclInProgress;
    return ncclInProgress;
  }
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return run(comm, {OP_ALLREDUCE, (const unsigned char *)sendbuff,
                    (unsigned char *)recvbuff, count, datatype, op, 0, stream});
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return run(comm,
             {OP_REDUCESCATTER, (const unsigned char *)sendbuff,
              (unsigned char *)recvbuff, recvcount, datatype, op, 0, stream});
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return run(comm, {OP_REDUCE, (const unsigned char *)sendbuff,
                    (unsigned char *)recvbuff, count, datatype, op, root,
                    stream});
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return run(comm, {OP_ALLGATHER, (const unsigned char *)sendbuff,
                    (unsigned char *)recvbuff, sendcount, datatype, ncclSum, 0,
                    stream});
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return run(comm, {OP_BROADCAST, (const unsigned char *)sendbuff,
                    (unsigned char *)recvbuff, count, datatype, ncclSum, root,
                    stream});
}

/* ---- point to point and groups ---- */

/* A send or recv of a group, and how far it has come. */
struct p2p_op {
  ncclComm *comm;
  bool send;
  unsigned char *buf;
  size_t count;
  ncclDataType_t type;
  int peer;
  cudaStream_t stream;
  int phase;       /* 0: not posted, 1: posted, 2: matched, 3: done */
  uint64_t m;      /* the message's number on its pair, from 1 */
  uint64_t chunks; /* of the pair's buffer, moved */
};

static thread_local std::vector<p2p_op> t_ops; /* the group's, in order */
/* A call of the group that failed: NCCL's ncclGroupEnd then returns its
 * error and runs nothing of the group. */
static thread_local ncclResult_t t_group_error = ncclSuccess;

static pair_hdr *pair_of(const p2p_op &o) {
  ncclComm *c = o.comm;
  int src = o.send ? c->rank : o.peer, dst = o.send ? o.peer : c->rank;
  return &c->pairs[(size_t)src * c->nranks + dst];
}

static unsigned char *pair_buf(const p2p_op &o) {
  ncclComm *c = o.comm;
  int src = o.send ? c->rank : o.peer, dst = o.send ? o.peer : c->rank;
  return c->pbuf + ((size_t)src * c->nranks + dst) * c->slot_bytes;
}

static const char *p2p_name(const p2p_op &o) {
  return o.send ? "Send" : "Recv";
}

/* One move of o, as far as its peer lets it go without waiting: 1 when it
 * moved, 0 when it must wait for the peer, an error (o's communicator
 * broken) when the ranks' calls disagree. A send is matched only by its
 * recv posted (NCCL's send kernel ends when the receiver has the data, and
 * code that needs a buffered send deadlocks on a GPU with large
 * messages), and the chunks go through one buffer per pair. */
static ncclResult_t p2p_step(p2p_op &o, int *moved) {
  ncclComm *c = o.comm;
  pair_hdr *p = pair_of(o);
  const size_t es = type_size(o.type), bytes = o.count * es;
  const uint64_t nchunks = (bytes + c->slot_bytes - 1) / c->slot_bytes;
  *moved = 0;
  if (o.phase == 0) {
    /* A sender posts its next message once the receiver has drained the
     * last (it has compared that one's header: this may overwrite it). */
    if (o.send && p->drained.load(std::memory_order_acquire) !=
                      p->filled.load(std::memory_order_acquire))
      return ncclSuccess;
    if (o.send) {
      o.m = ++c->nsend[o.peer];
      p->scount = o.count;
      p->stype = o.type;
      p->sseq.store(o.m, std::memory_order_release);
    } else {
      o.m = ++c->nrecv[o.peer];
      p->rcount = o.count;
      p->rtype = o.type;
      p->rseq.store(o.m, std::memory_order_release);
    }
    o.phase = 1;
    *moved = 1;
  }
  if (o.phase == 1) {
    uint64_t theirs = o.send ? p->rseq.load(std::memory_order_acquire)
                             : p->sseq.load(std::memory_order_acquire);
    if (theirs < o.m)
      return ncclSuccess;
    uint64_t tc = o.send ? p->rcount : p->scount;
    int32_t tt = o.send ? p->rtype : p->stype;
    if (tc != o.count || tt != (int32_t)o.type)
      return broke(c, ncclInvalidUsage,
                   "emulated NCCL: rank %d: %s #%llu %s peer %d is %llu "
                   "elements of type %d here, its %s %llu of type %d: a "
                   "send and its recv must have the same count and type",
                   c->rank, p2p_name(o), (unsigned long long)o.m,
                   o.send ? "to" : "from", o.peer, (unsigned long long)o.count,
                   (int)o.type, o.send ? "Recv" : "Send",
                   (unsigned long long)tc, (int)tt);
    o.phase = 2;
    *moved = 1;
  }
  while (o.phase == 2 && o.chunks < nchunks) {
    uint64_t f = p->filled.load(std::memory_order_acquire),
             d = p->drained.load(std::memory_order_acquire);
    if (o.send ? f != d : f == d)
      return ncclSuccess;
    size_t off = (size_t)o.chunks * c->slot_bytes;
    size_t len = bytes - off < c->slot_bytes ? bytes - off : c->slot_bytes;
    cudaError_t e = o.send ? cudaMemcpyAsync(pair_buf(o), o.buf + off, len,
                                             cudaMemcpyDeviceToHost, o.stream)
                           : cudaMemcpyAsync(o.buf + off, pair_buf(o), len,
                                             cudaMemcpyHostToDevice, o.stream);
    if (e != cudaSuccess)
      return broke(c, ncclUnhandledCudaError,
                   "emulated NCCL: rank %d: %s #%llu: copy %s the buffer: %s",
                   c->rank, p2p_name(o), (unsigned long long)o.m,
                   o.send ? "from" : "to", cudaGetErrorString(e));
    (o.send ? p->filled : p->drained)
        .store(o.send ? f + 1 : d + 1, std::memory_order_release);
    o.chunks++;
    *moved = 1;
  }
  if (o.phase == 2) {
    o.phase = 3;
    *moved = 1;
  }
  return ncclSuccess;
}

/* Why o's peer cannot answer any more, or NULL: *who gets the rank to
 * blame. */
static const char *p2p_peer_problem(const p2p_op &o, int *who) {
  ctrl *c = o.comm->c;
  int by = c->aborted_by.load();
  *who = o.peer;
  if (by > 0) {
    *who = by - 1;
    return "it aborted the communicator (ncclCommAbort)";
  }
  int st = c->r[o.peer].state.load();
  if (st == ST_LEFT)
    return "it left the communicator (ncclCommFinalize/ncclCommDestroy) "
           "with this message not matched";
  if (st == ST_JOINED && !pid_alive(c->r[o.peer].pid.load()))
    return "its process is gone (exited or killed)";
  return nullptr;
}

/* Earlier operations of the group on the same pair and direction go
 * first: NCCL matches a pair's messages in the order they were posted. */
static bool blocked_by_earlier(size_t i) {
  for (size_t j = 0; j < i; j++) {
    const p2p_op &a = t_ops[j], &b = t_ops[i];
    if (a.comm == b.comm && a.send == b.send && a.peer == b.peer &&
        a.phase != 3)
      return true;
  }
  return false;
}

/* Runs the group's sends and recvs together until all are done; the
 * first failure breaks its communicator and ends the group. */
static ncclResult_t p2p_run(void) {
  double t_moved = now_s();
  unsigned iter = 0;
  for (;;) {
    bool all = true, moved = false;
    for (size_t i = 0; i < t_ops.size(); i++) {
      p2p_op &o = t_ops[i];
      if (o.phase == 3)
        continue;
      all = false;
      if (blocked_by_earlier(i))
        continue;
      int m = 0;
      ncclResult_t r = p2p_step(o, &m);
      if (r != ncclSuccess) {
        unlink_name(o.comm);
        return r;
      }
      moved |= m != 0;
    }
    if (all)
      return ncclSuccess;
    if (moved) {
      t_moved = now_s();
      iter = 0;
      continue;
    }
    if (iter >= 32 && iter % 8 == 0) {
      for (const p2p_op &o : t_ops) {
        if (o.phase == 3)
          continue;
        int who;
        const char *why = p2p_peer_problem(o, &who);
        bool late = !why && now_s() - t_moved > o.comm->timeout_s;
        if (!why && !late)
          continue;
        unlink_name(o.comm);
        if (late)
          return broke(o.comm, ncclRemoteError,
                       "emulated NCCL: rank %d: %s #%llu %s peer rank %d "
                       "(pid %d): it did not answer within %g s "
                       "(DAGRUN_EMU_NCCL_TIMEOUT_S)",
                       o.comm->rank, p2p_name(o), (unsigned long long)o.m,
                       o.send ? "to" : "from", o.peer,
                       (int)o.comm->c->r[o.peer].pid.load(), o.comm->timeout_s);
        return broke(o.comm, ncclRemoteError,
                     "emulated NCCL: rank %d: %s #%llu %s peer rank %d: peer "
                     "rank %d (pid %d): %s",
                     o.comm->rank, p2p_name(o), (unsigned long long)o.m,
                     o.send ? "to" : "from", o.peer, who,
                     (int)o.comm->c->r[who].pid.load(), why);
      }
    }
    backoff(&iter);
  }
}

ncclResult_t ncclGroupStart(void) {
  t_group++;
  return ncclSuccess;
}

/* The group's result as the caller sees it: a blocking communicator
 * returns its error; a non-blocking one's shows in ncclCommGetAsyncError
 * only, and a first send or recv with a peer connects it (ncclInProgress,
 * settled by ncclCommGetAsyncError), as NCCL's runtime connect does. */
static ncclResult_t group_result(ncclResult_t r) {
  ncclResult_t out = ncclSuccess;
  for (const p2p_op &o : t_ops) {
    ncclComm *c = o.comm;
    if (c->blocking) {
      if (r != ncclSuccess)
        out = r;
      continue;
    }
    if (!c->p2p_connected[o.peer]) {
      c->p2p_connected[o.peer] = 1;
      if (c->async == ncclSuccess) {
        c->async = ncclInProgress;
        out = out == ncclSuccess ? ncclInProgress : out;
      }
    }
  }
  return out;
}

ncclResult_t ncclGroupEnd(void) {
  if (t_group == 0)
    return fail(nullptr, ncclInvalidUsage,
                "ncclGroupEnd without ncclGroupStart");
  if (--t_group > 0)
    return ncclSuccess;
  ncclResult_t out = t_group_error;
  if (out == ncclSuccess)
    out = group_result(t_ops.empty() ? ncclSuccess : p2p_run());
  t_ops.clear();
  t_group_error = ncclSuccess;
  return out;
}

static ncclResult_t p2p_check(bool send, const void *buf, size_t count,
                              ncclDataType_t type, int peer, ncclComm *comm);

static ncclResult_t p2p_post(bool send, const void *buf, size_t count,
                             ncclDataType_t type, int peer, ncclComm *comm,
                             cudaStream_t stream) {
  ncclResult_t r = p2p_check(send, buf, count, type, peer, comm);
  if (r != ncclSuccess) {
    if (t_group > 0 && t_group_error == ncclSuccess)
      t_group_error = r;
    return r;
  }
  if (count == 0)
    return ncclSuccess;
  /* Outside a group, the call is a group of its own. */
  ncclGroupStart();
  t_ops.push_back(
      {comm, send, (unsigned char *)buf, count, type, peer, stream, 0, 0, 0});
  return ncclGroupEnd();
}

static ncclResult_t p2p_check(bool send, const void *buf, size_t count,
                              ncclDataType_t type, int peer, ncclComm *comm) {
  const char *what = send ? "Send" : "Recv";
  ncclResult_t r = usable(comm, what);
  if (r != ncclSuccess)
    return r;
  size_t es = type_size(type);
  if (es == 0)
    return fail(comm, ncclInvalidArgument, "emulated NCCL: %s: datatype %d",
                what, (int)type);
  if (peer < 0 || peer >= comm->nranks)
    return fail(comm, ncclInvalidArgument, "emulated NCCL: %s: peer %d of %d",
                what, peer, comm->nranks);
  if (count > 0 && !device_range(buf, count * es))
    return fail(comm, ncclInvalidArgument,
                "emulated NCCL: %s: %s %p (%zu elements) is not device "
                "memory (the emulated runtime's EMU ERROR says more)",
                what, send ? "sendbuff" : "recvbuff", buf, count);
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p_post(true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  return p2p_post(false, recvbuff, count, datatype, peer, comm, stream);
}

/* ---- split ---- */

struct split_info {
  int32_t color, key;
  unsigned char rnd[EMU_ID_RANDOM]; /* the new segment's name, if leader */
};

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config) {
  if (!newcomm)
    return fail(comm, ncclInvalidArgument, "ncclCommSplit: NULL newcomm");
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(comm, ncclInvalidArgument,
                "emulated NCCL: ncclCommSplit: color %d is negative and not "
                "NCCL_SPLIT_NOCOLOR",
                color);
  /* Every rank of comm takes part (NCCL's split is collective over the
   * parent): colors, keys and a fresh id from each, gathered. */
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return r;
  split_info mine = {color, key, {0}};
  memcpy(mine.rnd, id.internal + sizeof EMU_ID_MAGIC - 1, EMU_ID_RANDOM);
  std::vector<split_info> all(comm ? (size_t)comm->nranks : 0);
  r = run(comm,
          {OP_SPLIT, (const unsigned char *)&mine, (unsigned char *)all.data(),
           sizeof mine, ncclUint8, ncclSum, 0, nullptr, true});
  if (r != ncclSuccess)
    return r;
  if (color == NCCL_SPLIT_NOCOLOR)
    return ncclSuccess;
  /* The ranks of this color, ordered by key, then by rank in comm: the
   * first one's id names the new communicator. */
  std::vector<int> members;
  for (int q = 0; q < comm->nranks; q++)
    if (all[q].color == color)
      members.push_back(q);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key < all[b].key; });
  int newrank = 0;
  while (members[newrank] != comm->rank)
    newrank++;
  memcpy(id.internal + sizeof EMU_ID_MAGIC - 1, all[members[0]].rnd,
         EMU_ID_RANDOM);
  /* No config: the parent's (its blocking mode). */
  ncclConfig_t inherit = NCCL_CONFIG_INITIALIZER;
  inherit.blocking = comm->blocking;
  return ncclCommInitRankConfig(newcomm, (int)members.size(), id, newrank,
                                config ? config : &inherit);
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (!comm || !count)
    return fail(comm, ncclInvalidArgument, "ncclCommCount: NULL argument");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (!comm || !rank)
    return fail(comm, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
  *rank = comm->rank;
  return ncclSuccess;
}
