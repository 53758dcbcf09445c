/* execcmd: see execcmd.h. */

#include "execcmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int has_space(const char *s) {
  for (; *s; s++)
    if (*s == ' ' || *s == '\t' || *s == '\n')
      return 1;
  return 0;
}

const char **execcmd_argv(const char *const *items, size_t n, int shell,
                          char *msg, size_t msglen) {
  if (n == 0) {
    snprintf(msg, msglen,
             "command is empty; give an argv list ([prog, arg, ...])");
    return NULL;
  }
  if (shell && n != 1) {
    snprintf(msg, msglen,
             "shell: true needs command as one string, got a list of %zu "
             "items",
             n);
    return NULL;
  }
  if (!shell && n == 1 && has_space(items[0])) {
    snprintf(msg, msglen,
             "command is one string with spaces; give an argv list "
             "([prog, arg, ...]) or set shell: true");
    return NULL;
  }
  const char **argv = calloc(n + 3, sizeof(char *));
  if (!argv) {
    snprintf(msg, msglen, "out of memory");
    return NULL;
  }
  if (shell) {
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[2] = items[0];
  } else {
    memcpy(argv, items, n * sizeof(char *));
  }
  return argv;
}

int execcmd_sets(const char *entry, const char *name, size_t klen) {
  return strncmp(entry, name, klen) == 0 && entry[klen] == '=';
}

/* Whether any of the n entries sets the name of entry (its klen bytes). */
static int set_by(const char *const *entries, size_t n, const char *name,
                  size_t klen) {
  for (size_t i = 0; i < n; i++)
    if (execcmd_sets(entries[i], name, klen))
      return 1;
  return 0;
}

char **execcmd_env(char *const *base, char *const *extra, size_t n_extra,
                   const char *const *vars) {
  size_t n_base = 0, n_vars = 0;
  while (base && base[n_base])
    n_base++;
  while (vars[n_vars])
    n_vars++;
  char **env = calloc(n_base + n_extra + n_vars + 1, sizeof(char *));
  if (!env)
    return NULL;
  size_t n = 0;
  for (size_t i = 0; i < n_base; i++) {
    const char *eq = strchr(base[i], '=');
    size_t klen = eq ? (size_t)(eq - base[i]) : strlen(base[i]);
    if (!set_by((const char *const *)extra, n_extra, base[i], klen) &&
        !set_by(vars, n_vars, base[i], klen))
      env[n++] = base[i];
  }
  for (size_t j = 0; j < n_extra; j++)
    if (!set_by(vars, n_vars, extra[j], strcspn(extra[j], "=")))
      env[n++] = extra[j];
  for (size_t d = 0; d < n_vars; d++)
    env[n++] = (char *)vars[d];
  env[n] = NULL;
  return env;
}

const char *execcmd_path_of(char *const *entries, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strncmp(entries[i], "PATH=", 5) == 0)
      return entries[i] + 5;
  return NULL;
}

char *execcmd_search_path(const char *prog, const char *path) {
  const char *p = path;
  while (p) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    size_t n = len + strlen(prog) + 2;
    char *cand = malloc(n);
    if (!cand)
      return NULL;
    if (len == 0)
      snprintf(cand, n, "%s", prog); /* empty entry: current directory */
    else
      snprintf(cand, n, "%.*s/%s", (int)len, p, prog);
    struct stat st;
    if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
      return cand;
    free(cand);
    p = end ? end + 1 : NULL;
  }
  return NULL;
}

int execcmd_cwd(const char *dag_dir, const char *cwd, char **out, char *msg,
                size_t msglen) {
  *out = NULL;
  if (!cwd || !*cwd)
    return 0;
  char *dir;
  if (cwd[0] == '/' || !dag_dir || !*dag_dir) {
    dir = strdup(cwd);
  } else {
    size_t len = strlen(dag_dir) + strlen(cwd) + 2;
    dir = malloc(len);
    if (dir)
      snprintf(dir, len, "%s/%s", dag_dir, cwd);
  }
  if (!dir) {
    snprintf(msg, msglen, "out of memory");
    return EXECCMD_CANNOT_RUN;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(msg, msglen, "cwd is not a directory: %s", dir);
    free(dir);
    return EXECCMD_BAD_PARAMS;
  }
  *out = dir;
  return 0;
}

char *execcmd_join(const char *const *argv) {
  size_t need = 1;
  for (size_t i = 0; argv[i]; i++)
    need += strlen(argv[i]) + 1;
  char *buf = malloc(need), *at = buf;
  for (size_t i = 0; buf && argv[i]; i++) {
    size_t n = strlen(argv[i]);
    if (i)
      *at++ = ' ';
    memcpy(at, argv[i], n);
    at += n;
  }
  if (buf)
    *at = '\0';
  return buf;
}

int execcmd_spawn_failed(const char *prog, int rc, char *msg, size_t msglen) {
  if (rc == ENOENT) {
    snprintf(msg, msglen, "command not found: %s", prog);
    return EXECCMD_NOT_FOUND;
  }
  if (rc == EACCES || rc == ENOEXEC)
    snprintf(msg, msglen, "command cannot be run: %s: %s", prog, strerror(rc));
  else
    snprintf(msg, msglen, "cannot start %s: %s", prog, strerror(rc));
  return EXECCMD_CANNOT_RUN;
}

int execcmd_status(const char *prog, int wstatus, char *msg, size_t msglen) {
  msg[0] = '\0';
  if (WIFEXITED(wstatus)) {
    int code = WEXITSTATUS(wstatus);
    if (code != 0)
      snprintf(msg, msglen, "command %s exited with status %d", prog, code);
    return code;
  }
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    const char *abbrev = sigabbrev_np(sig);
    snprintf(msg, msglen, "command killed by signal %d (SIG%s)%s", sig,
             abbrev ? abbrev : "?", WCOREDUMP(wstatus) ? ", core dumped" : "");
    return 128 + sig;
  }
  snprintf(msg, msglen, "command ended with wait status %#x",
           (unsigned)wstatus);
  return 1;
}
