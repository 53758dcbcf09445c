/* The comm layer without a gang: the self backend's collectives and
 * argument checks, and the NCCL backend where it cannot run: built without
 * NCCL it says so; built with NCCL on a machine without a GPU, creating it
 * fails with a CUDA error, not a crash. (Collectives over MPI:
 * tests/integration/test_comm.sh.) */
#include "comm/comm.h"
#include "testlib.h"

#include <unistd.h>

static int has(const char *s, const char *sub) {
  return s && strstr(s, sub) != NULL;
}

/* The per-kind accounting (comm_stats) counts each started operation once,
 * with its buffer's bytes, and not a refused one; the seconds of a wait
 * go to the waited operation's kind. */
static void check_stats(comm *c) {
  char err[256];
  float a[4] = {1, 2, 3, 4}, b[4] = {0};
  comm_stats_reset(c);
  comm_stats s;
  memset(&s, 0, sizeof s);
  comm_stats_add(c, &s);
  for (int k = 0; k < COMM_NKINDS; k++)
    CHECK(s.calls[k] == 0 && s.bytes[k] == 0 && s.seconds[k] == 0);
  CHECK_INT(comm_allreduce_sum(c, a, 4, err, sizeof err), 0);
  CHECK_INT(comm_allreduce_sum(c, a, 2, err, sizeof err), 0);
  CHECK_INT(comm_allreduce_sum(c, NULL, 3, err, sizeof err), -1); /* refused */
  CHECK_INT(comm_reduce_scatter_sum(c, a, b, 3, err, sizeof err), 0);
  CHECK_INT(comm_allgather_bytes(c, a, b, 5, err, sizeof err), 0);
  comm_req *r;
  CHECK_INT(comm_iallgather(c, a, b, 4, &r, err, sizeof err), 0);
  CHECK_INT(comm_wait(c, r, err, sizeof err), 0);
  CHECK_INT(comm_broadcast(c, a, 7, 0, err, sizeof err), 0);
  memset(&s, 0, sizeof s);
  comm_stats_add(c, &s);
  comm_stats_add(c, &s); /* adds: two communicators' sum */
  CHECK(s.calls[COMM_KIND_ALLREDUCE] == 4 &&
        s.bytes[COMM_KIND_ALLREDUCE] == 48);
  CHECK(s.calls[COMM_KIND_REDUCE_SCATTER] == 2 &&
        s.bytes[COMM_KIND_REDUCE_SCATTER] == 24);
  CHECK(s.calls[COMM_KIND_ALLGATHER] == 4 &&
        s.bytes[COMM_KIND_ALLGATHER] == 42);
  CHECK(s.calls[COMM_KIND_BROADCAST] == 2 &&
        s.bytes[COMM_KIND_BROADCAST] == 14);
  CHECK(s.calls[COMM_KIND_SEND] == 0 && s.calls[COMM_KIND_RECV] == 0);
  for (int k = 0; k < COMM_NKINDS; k++)
    CHECK(s.seconds[k] >= 0 && s.seconds[k] < 1);
  CHECK(s.seconds[COMM_KIND_ALLGATHER] > 0); /* a start and a wait timed */
  CHECK_STR(comm_kind_name(COMM_KIND_REDUCE_SCATTER), "reduce_scatter");
  CHECK_STR(comm_kind_name(COMM_KIND_RECV), "recv");
  CHECK_STR(comm_kind_name(COMM_NKINDS), "?");
  comm_stats_reset(c);
  memset(&s, 0, sizeof s);
  comm_stats_add(c, &s);
  CHECK(s.calls[COMM_KIND_ALLREDUCE] == 0 && s.bytes[COMM_KIND_ALLGATHER] == 0);
  comm_stats_add(NULL, &s); /* no communicator: nothing */
}

int main(void) {
  char err[512] = "";
  comm *c = NULL;
  comm_config cfg = {0};

  /* self: one rank; allreduce and broadcast leave the data, reduce-scatter
   * and allgather copy it. */
  cfg.backend = COMM_SELF;
  CHECK_INT(comm_create(&cfg, &c, err, sizeof err), 0);
  CHECK_INT(comm_rank(c), 0);
  CHECK_INT(comm_size(c), 1);
  CHECK_STR(comm_backend_name(comm_backend_of(c)), "self");
  float a[3] = {1.5f, -2, 3}, b[3] = {0};
  CHECK_INT(comm_allreduce_sum(c, a, 3, err, sizeof err), 0);
  CHECK(a[0] == 1.5f && a[1] == -2 && a[2] == 3);
  CHECK_INT(comm_reduce_scatter_sum(c, a, b, 3, err, sizeof err), 0);
  CHECK(b[0] == 1.5f && b[1] == -2 && b[2] == 3);
  b[0] = 0;
  CHECK_INT(comm_reduce_sum(c, a, b, 3, 0, err, sizeof err), 0);
  CHECK(b[0] == 1.5f && b[1] == -2 && b[2] == 3);
  CHECK_INT(comm_reduce_sum(c, a, b, 3, 1, err, sizeof err), -1);
  CHECK(has(err, "comm self: reduce: root 1 is not a rank (size 1)"));
  b[1] = 7;
  CHECK_INT(comm_allgather(c, b, a, 3, err, sizeof err), 0);
  CHECK(a[1] == 7);
  CHECK_INT(comm_allgather(c, a, a, 3, err, sizeof err), 0); /* in place */
  CHECK(a[1] == 7);
  CHECK_INT(comm_broadcast(c, a, sizeof a, 0, err, sizeof err), 0);
  CHECK_INT(comm_barrier(c, err, sizeof err), 0);

  /* Requests: COMM_MAX_INFLIGHT at most, waited in any order. */
  comm_req *r[COMM_MAX_INFLIGHT + 1];
  for (int k = 0; k < COMM_MAX_INFLIGHT; k++)
    CHECK_INT(comm_iallreduce_sum(c, a, 3, &r[k], err, sizeof err), 0);
  CHECK_INT(comm_iallgather(c, b, a, 3, &r[COMM_MAX_INFLIGHT], err, sizeof err),
            -1);
  CHECK(has(err, "comm self: allgather: 16 requests already in flight"));
  CHECK_INT(comm_barrier(c, err, sizeof err), 0); /* still usable */
  for (int k = COMM_MAX_INFLIGHT - 1; k >= 0; k--)
    CHECK_INT(comm_wait(c, r[k], err, sizeof err), 0);
  CHECK_INT(comm_wait(c, r[0], err, sizeof err), -1); /* already waited */
  CHECK(has(err, "not a request in flight"));
  int done = 0;
  CHECK_INT(comm_iallgather(c, b, a, 3, &r[0], err, sizeof err), 0);
  CHECK_INT(comm_test(c, r[0], &done, err, sizeof err), 0);
  CHECK_INT(done, 1);
  CHECK_INT(comm_test(c, r[0], &done, err, sizeof err), -1); /* freed */
  CHECK_INT(done, 0);

  /* Bad arguments are refused with the operation's name. */
  CHECK_INT(comm_broadcast(c, a, 4, 1, err, sizeof err), -1);
  CHECK(has(err, "comm self: broadcast: root 1 is not a rank (size 1)"));
  CHECK_INT(comm_allreduce_sum(c, NULL, 3, err, sizeof err), -1);
  CHECK(has(err, "comm self: allreduce: NULL buffer"));
  CHECK_INT(comm_allreduce_sum(c, NULL, 0, err, sizeof err), 0);
  check_stats(c);
  comm_destroy(c);
  comm_destroy(NULL);

  cfg.timeout_s = -1;
  CHECK_INT(comm_create(&cfg, &c, err, sizeof err), -1);
  CHECK(has(err, "negative"));
  CHECK(c == NULL);
  cfg.timeout_s = 0;

  /* NCCL where it cannot run. */
  cfg.backend = COMM_NCCL;
  cfg.size = 1;
  cfg.rank = 0;
  cfg.device = 0;
  char dir[] = "/tmp/dagrun-test-comm.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  cfg.rendezvous_dir = dir;
  c = NULL;
  int rc = comm_create(&cfg, &c, err, sizeof err);
  if (!comm_backend_available(COMM_NCCL)) {
    CHECK_INT(rc, -1);
    CHECK(has(err, "comm nccl: this dagrun was built without NCCL"));
    printf("nccl: not in this build: %s\n", err);
  } else if (rc != 0) {
    /* No GPU or no driver here: the CUDA runtime's own words. */
    CHECK(has(err, "comm nccl: "));
    CHECK(has(err, "CUDA") || has(err, "cuda"));
    printf("nccl: built in, no GPU here: %s\n", err);
  } else {
    printf("nccl: a GPU is here: world size 1 created\n");
    CHECK_INT(comm_size(c), 1);
    comm_destroy(c);
  }
  char z[600];
  snprintf(z, sizeof z, "%s/nccl-id", dir);
  remove(z);
  rmdir(dir);
  TEST_DONE();
}
