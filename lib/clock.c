/* The clocks; see clock.h. */
#include "clock.h"

#include <time.h>

static double seconds(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double clock_monotonic(void) { return seconds(CLOCK_MONOTONIC); }

double clock_wall(void) { return seconds(CLOCK_REALTIME); }
