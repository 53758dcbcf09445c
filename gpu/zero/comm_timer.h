/*
 * comm_timer: the seconds a ZeRO step spends in communication calls
 * (zero_step_result.t_comm), kept the same way by the CPU step (zero.c)
 * and the GPU step (zero_cuda.c). Not part of zero.h's API.
 */
#ifndef DAGRUN_COMM_TIMER_H
#define DAGRUN_COMM_TIMER_H

#include <time.h>

typedef struct comm_timer {
  double total; /* seconds in comm calls since the step began */
  double start; /* when the call under way began */
} comm_timer;

/* Seconds on the monotonic clock. */
static inline double comm_timer_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int comm_timer_end(comm_timer *t, int rc) {
  t->total += comm_timer_now() - t->start;
  return rc;
}

/* A comm call of the step, its time counted as communication: the rank
 * waits in it (or starts an async one) instead of computing. The comma
 * sequences the clock before the call. */
#define TIMED(t, call)                                                         \
  ((t)->start = comm_timer_now(), comm_timer_end((t), (call)))

#endif /* DAGRUN_COMM_TIMER_H */
