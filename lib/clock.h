/*
 * clock: the one pair of clocks every tree uses. The monotonic clock for
 * durations and deadlines (it never jumps when the wall clock is set), the
 * wall clock for timestamps people read and for schedules.
 *
 * Safe from any thread; the functions cannot fail on Linux.
 */
#ifndef DAGRUN_CLOCK_H
#define DAGRUN_CLOCK_H

/* Seconds on CLOCK_MONOTONIC: only differences mean anything. */
double clock_monotonic(void);
/* Seconds since the Unix epoch (CLOCK_REALTIME). */
double clock_wall(void);

#endif /* DAGRUN_CLOCK_H */
