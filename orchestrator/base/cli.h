/*
 * cli: the pieces every `dagrun COMMAND` uses to read its arguments and to
 * say what is wrong with them, so that each command's loop says only what
 * is its own (which options it takes) and every command words its errors
 * the same way.
 *
 * The command table itself (names, handlers, usage texts) is in main.c;
 * a handler gets the arguments after its command's name and returns the
 * exit status (lib/exitcode.h). `--help` is answered by main.c before a
 * handler runs, so handlers never see it.
 *
 * Everything here prints on stderr only and keeps no state; call from the
 * main thread (it may call getenv).
 */
#ifndef DAGRUN_CLI_H
#define DAGRUN_CLI_H

#include <stddef.h>

/* Prints "dagrun: " fmt (with arg for its one %s) and "(see dagrun
 * --help)" on stderr. Returns EXIT_USAGE, for `return cli_usage_error(...)`.
 */
int cli_usage_error(const char *fmt, const char *arg);

/* Parses s as a whole decimal number in [lo, hi]: 0 with *out, or -1
 * (nothing is printed: the caller knows what the number was for). */
int cli_number(const char *s, long lo, long hi, long *out);

/* The value of option name at argv[*i], given as "NAME VALUE" (then *i
 * moves onto the value) or "NAME=VALUE"; NULL when argv[*i] is not that
 * option, or is it with no value after it. */
const char *cli_value(int argc, char **argv, int *i, const char *name);

/* Where run directories go: given (an option's value) when not NULL, else
 * $DAGRUN_RUNS_DIR; "runs" (relative to the working directory) when that
 * is unset or empty. Borrowed. */
const char *cli_runs_dir(const char *given);

/* dagrun's own executable into buf (the runs, workers and dagrun-generate
 * are started from it): 0, or -1 after saying why on stderr. */
int cli_self_exe(char *buf, size_t len);

/* A helper program installed with dagrun (dagrun-worker, dagrun-generate),
 * DAGRUN_LIBEXEC_DIR_REL from dagrun's own directory, into buf: 0, or -1
 * after saying on stderr why (not there, not executable). */
int cli_helper_exe(const char *name, char *buf, size_t len);

#endif /* DAGRUN_CLI_H */
