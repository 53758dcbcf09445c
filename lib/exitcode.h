/*
 * exitcode: the exit statuses of dagrun's programs and of its built-in
 * stages, one set for both, because a user reads them side by side: a
 * stage's status becomes its attempt's exit code in `dagrun status`, and
 * dagrun's own status ends the script that ran it.
 *
 *   0    success
 *   1    failed: a task failed (dagrun), the work failed (a stage)
 *   2    bad usage, a bad DAG file, or a stage's params refused
 *   128+N  killed by signal N (130 after Ctrl-C, 143 after SIGTERM)
 */
#ifndef DAGRUN_EXITCODE_H
#define DAGRUN_EXITCODE_H

#define EXIT_FAILED 1
#define EXIT_USAGE 2
/* A stage's params are its usage. */
#define EXIT_BAD_PARAMS EXIT_USAGE

#endif /* DAGRUN_EXITCODE_H */
