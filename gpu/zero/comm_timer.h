/*
 * comm_timer: the seconds a ZeRO step spends in communication calls
 * (zero_step_result.t_comm), kept the same way by the CPU step (zero.c)
 * and the GPU step (zero_cuda.c). Not part of zero.h's API.
 */
#ifndef DAGRUN_COMM_TIMER_H
#define DAGRUN_COMM_TIMER_H

#include "lib/clock.h"

typedef struct comm_timer {
  double total; /* seconds in comm calls since the step began */
  double start; /* when the call under way began */
} comm_timer;

static inline int comm_timer_end(comm_timer *t, int rc) {
  t->total += clock_monotonic() - t->start;
  return rc;
}

/* A comm call of the step, its time counted as communication: the rank
 * waits in it (or starts an async one) instead of computing. The comma
 * sequences the clock before the call. */
#define TIMED(t, call)                                                         \
  ((t)->start = clock_monotonic(), comm_timer_end((t), (call)))

#endif /* DAGRUN_COMM_TIMER_H */
