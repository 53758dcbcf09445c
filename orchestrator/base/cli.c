/*
 * cli: argument helpers shared by the dagrun commands; the contract is in
 * cli.h.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/exitcode.h"

int cli_usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "dagrun: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see dagrun --help)\n");
  return EXIT_USAGE;
}

int cli_number(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

const char *cli_value(int argc, char **argv, int *i, const char *name) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0)
    return NULL;
  if (a[n] == '=')
    return a + n + 1;
  if (a[n] != '\0' || *i + 1 >= argc)
    return NULL;
  return argv[++*i];
}

const char *cli_runs_dir(const char *given) {
  const char *dir = given ? given : getenv("DAGRUN_RUNS_DIR");
  return dir && *dir ? dir : "runs";
}

int cli_self_exe(char *buf, size_t len) {
  /* Linux only, as the rest of dagrun: argv[0] would need a PATH search
   * and may name a different file than the one running. */
  ssize_t n = readlink("/proc/self/exe", buf, len - 1);
  if (n <= 0) {
    fprintf(stderr, "dagrun: cannot find its own executable: %s\n",
            strerror(errno));
    return -1;
  }
  buf[n] = '\0';
  return 0;
}

int cli_helper_exe(const char *name, char *buf, size_t len) {
  char self[4096];
  if (cli_self_exe(self, sizeof self) != 0)
    return -1;
  char *slash = strrchr(self, '/');
  if (slash)
    *slash = '\0';
  int n = snprintf(buf, len, "%s/%s/%s", self, DAGRUN_LIBEXEC_DIR_REL, name);
  if (n < 0 || (size_t)n >= len) {
    fprintf(stderr, "dagrun: the path of %s is too long\n", name);
    return -1;
  }
  if (access(buf, X_OK) != 0) {
    fprintf(stderr,
            "dagrun: cannot run %s: %s (it is installed with dagrun, in "
            "%s from dagrun's directory)\n",
            buf, strerror(errno), DAGRUN_LIBEXEC_DIR_REL);
    return -1;
  }
  return 0;
}
