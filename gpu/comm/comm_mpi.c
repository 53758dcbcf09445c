/*
 * comm_mpi.c: the MPI backend (Open MPI): CPU ranks launched by mpirun or
 * srun, or a singleton. Works on a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN; every operation is MPI's nonblocking collective,
 * tested by comm.c's wait loop, so that a peer that died makes the wait
 * fail after the timeout instead of hanging.
 */
#include "comm_impl.h"

#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct mpi_state {
  MPI_Comm comm;
  int owns_init; /* this communicator holds a reference on MPI_Init */
  MPI_Request req[COMM_NSLOTS];
} mpi_state;

/* Communicators that initialized MPI (or inherited the duty to finalize
 * it): the last one destroyed finalizes. One thread uses MPI (funneled). */
static int mpi_owned_refs;


/* "comm mpi: <what>: <MPI's error text>". */
static void mpierr(char *err, size_t errlen, const char *what, int rc) {
  char z[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(rc, z, &len) != MPI_SUCCESS)
    snprintf(z, sizeof z, "MPI error %d", rc);
  else
    z[len] = 0;
  comm_seterr(err, errlen, "comm mpi: %s: %s", what, z);
}

static int mpi_start(comm *c, int slot, comm_op op, const void *send,
                     void *recv, size_t n, int root, char *err, size_t errlen) {
  mpi_state *s = c->impl;
  if (n > (size_t)INT_MAX) {
    comm_seterr(err, errlen,
           "comm mpi: %s: %zu elements is more than MPI's int count takes "
           "(%d); split the buffer",
           comm_op_name(op), n, INT_MAX);
    return -2;
  }
  int cnt = (int)n, rc = MPI_SUCCESS;
  MPI_Request *r = &s->req[slot];
  switch (op) {
  case COMM_OP_ALLREDUCE:
    rc =
        MPI_Iallreduce(MPI_IN_PLACE, recv, cnt, MPI_FLOAT, MPI_SUM, s->comm, r);
    break;
  case COMM_OP_REDUCE_SCATTER:
    rc = MPI_Ireduce_scatter_block(send, recv, cnt, MPI_FLOAT, MPI_SUM, s->comm,
                                   r);
    break;
  case COMM_OP_REDUCE:
    rc = MPI_Ireduce(send, recv, cnt, MPI_FLOAT, MPI_SUM, root, s->comm, r);
    break;
  case COMM_OP_ALLGATHER: {
    /* In place when this rank's part already sits at its place in recv. */
    const float *mine = (const float *)recv + (size_t)c->rank * n;
    rc = MPI_Iallgather(send == mine ? MPI_IN_PLACE : send, cnt, MPI_FLOAT,
                        recv, cnt, MPI_FLOAT, s->comm, r);
    break;
  }
  case COMM_OP_ALLGATHER_BYTES: {
    const char *mine = (const char *)recv + (size_t)c->rank * n;
    rc = MPI_Iallgather(send == mine ? MPI_IN_PLACE : send, cnt, MPI_BYTE,
                        recv, cnt, MPI_BYTE, s->comm, r);
    break;
  }
  case COMM_OP_BROADCAST:
    rc = MPI_Ibcast(recv, cnt, MPI_BYTE, root, s->comm, r);
    break;
  case COMM_OP_BARRIER:
    rc = MPI_Ibarrier(s->comm, r);
    break;
  case COMM_OP_SEND:
    rc = MPI_Isend(send, cnt, MPI_BYTE, root, 0, s->comm, r);
    break;
  case COMM_OP_RECV:
    rc = MPI_Irecv(recv, cnt, MPI_BYTE, root, 0, s->comm, r);
    break;
  }
  if (rc != MPI_SUCCESS) {
    mpierr(err, errlen, comm_op_name(op), rc);
    return -1;
  }
  return 0;
}

static int mpi_test(comm *c, int slot, char *err, size_t errlen) {
  mpi_state *s = c->impl;
  int done = 0;
  int rc = MPI_Test(&s->req[slot], &done, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    mpierr(err, errlen, comm_op_name(c->req[slot].op), rc);
    return -1;
  }
  return done ? 1 : 0;
}

__attribute__((noreturn)) static void mpi_abort(comm *c, int code) {
  mpi_state *s = c->impl;
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(s->comm, code);
  exit(code); /* MPI_Abort does not return; in case it does */
}

static void mpi_destroy(comm *c, int broken) {
  mpi_state *s = c->impl;
  if (!s)
    return;
  /* A collective still pending (a peer gone, a wait that timed out) would
   * make MPI_Comm_free and MPI_Finalize wait for it forever: leave MPI as
   * it is then; the process is about to end anyway. */
  if (!broken) {
    MPI_Comm_free(&s->comm);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (s->owns_init && --mpi_owned_refs == 0 && !finalized)
      MPI_Finalize();
  }
  free(s);
  c->impl = NULL;
}

static const comm_ops mpi_ops = {mpi_start, mpi_test, mpi_abort, mpi_destroy};

/* A backend state with no request in flight; NULL with err. */
static mpi_state *state_new(const char *what, char *err, size_t errlen) {
  mpi_state *s = calloc(1, sizeof *s);
  if (!s) {
    comm_seterr(err, errlen, "comm mpi: %s: out of memory", what);
    return NULL;
  }
  for (int i = 0; i < COMM_NSLOTS; i++)
    s->req[i] = MPI_REQUEST_NULL;
  return s;
}

/* After s->comm was made (rc: how that went): errors returned, not
 * fatal, and c's rank and size from it; c takes s. MPI's code. */
static int attach(comm *c, mpi_state *s, int rc) {
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_rank(s->comm, &c->rank);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_size(s->comm, &c->size);
  if (rc == MPI_SUCCESS) {
    c->ops = &mpi_ops;
    c->impl = s;
  }
  return rc;
}

int comm_mpi_create(comm *c, const comm_config *cfg, char *err, size_t errlen) {
  (void)cfg;
  int inited = 0, finalized = 0, rc;
  MPI_Finalized(&finalized);
  if (finalized) {
    comm_seterr(err, errlen, "comm mpi: create: MPI was already finalized");
    return -1;
  }
  mpi_state *s = state_new("create", err, errlen);
  if (!s)
    return -1;
  MPI_Initialized(&inited);
  if (!inited) {
    /* Open MPI's nonblocking reduce (libnbc) cuts a large message into a
     * chain of small segments, each advanced by one MPI call; a rank that
     * tests its requests between layers and backs off while it waits
     * (comm_backoff) then takes a pause per segment. Measured: ZeRO
     * stage 2 (a reduce per group), 8 layers of width 256 on 2 ranks,
     * 1452 ms a step with the chain, 62 ms with the binomial tree. So
     * the tree, unless the user chose (MCA parameters are read at
     * MPI_Init; other MPIs ignore the variable). */
    setenv("OMPI_MCA_coll_libnbc_ireduce_algorithm", "2", 0);
    int provided = 0;
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
      mpierr(err, errlen, "MPI_Init_thread", rc);
      free(s);
      return -1;
    }
    if (provided < MPI_THREAD_FUNNELED) {
      comm_seterr(err, errlen,
             "comm mpi: create: this MPI gives thread level %d, less than "
             "MPI_THREAD_FUNNELED",
             provided);
      MPI_Finalize();
      free(s);
      return -1;
    }
  }
  if (!inited || mpi_owned_refs > 0) {
    s->owns_init = 1;
    mpi_owned_refs++;
  }
  rc = attach(c, s, MPI_Comm_dup(MPI_COMM_WORLD, &s->comm));
  if (rc != MPI_SUCCESS) {
    mpierr(err, errlen, "create", rc);
    if (s->owns_init && --mpi_owned_refs == 0)
      MPI_Finalize();
    free(s);
    return -1;
  }
  return 0;
}

int comm_mpi_split(const comm *parent, int color, int key, comm *c, char *err,
                   size_t errlen) {
  const mpi_state *ps = parent->impl;
  mpi_state *s = state_new("split", err, errlen);
  if (!s)
    return -1;
  /* MPI_Comm_split is blocking: a peer that died makes it hang (no
   * timeout); it runs once, at the start, right after comm_create. The
   * new communicator holds no reference on MPI_Init: the parent's
   * destruction finalizes. */
  int rc = attach(c, s, MPI_Comm_split(ps->comm, color, key, &s->comm));
  if (rc != MPI_SUCCESS) {
    mpierr(err, errlen, "split", rc);
    free(s);
    return -1;
  }
  return 0;
}
