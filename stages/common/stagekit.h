/*
 * stagekit: small helpers the built-in stages share for reading their
 * params and timing their work. Safe from any thread.
 */
#ifndef DAGRUN_STAGEKIT_H
#define DAGRUN_STAGEKIT_H

#include <stdint.h>

#include <dagrun/plugin.h>

/* A byte size as users write it: "123", "64KiB", "200MiB", "1.5GiB",
 * "10MB" (binary KiB/MiB/GiB/TiB or K/M/G/T; decimal KB/MB/GB/TB; any
 * case). Returns 0 and *out, or -1 for anything else. */
int stagekit_parse_size(const char *z, uint64_t *out);

/* CPUs this process may run on (its affinity mask), at least 1. */
unsigned stagekit_cpu_count(void);

/* The process's peak resident memory so far, in bytes. */
uint64_t stagekit_peak_rss(void);

/* Seconds from *t to now, and *t moved to now: consecutive phases of a
 * piece of work timed with one clock. */
double stagekit_lap(double *t);

/* The int param name into *out when it lies in [lo, hi]; otherwise fails
 * the attempt with "NAME must be an integer from LO to HI" and returns
 * -1. */
int stagekit_param_int(dagrun_ctx *ctx, const dagrun_host *h,
                       const char *name, int64_t lo, int64_t hi,
                       int64_t *out);

/* The param name as an index into values, the NULL-terminated array the
 * stage also declares as the param's choices (plugin.h), so that what
 * dagrun checks and what the stage understands are one list. A STRING
 * param is compared as written, an INT one by its decimal text. dagrun
 * refuses other values before run() is called; should one still arrive,
 * this fails the attempt with "NAME must be one of A, B, C, not 'Z'" and
 * returns -1. */
int stagekit_param_choice(dagrun_ctx *ctx, const dagrun_host *h,
                          const char *name, const char *const *values,
                          int *out);

#endif /* DAGRUN_STAGEKIT_H */
