#include "rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static unsigned random_suffix(void) {
  unsigned v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
    v = (unsigned)getpid() ^ (unsigned)time(NULL);
  return v & 0xffff;
}

int rundir_create(const char *base, const char *dag, rundir **out, char *err,
                  size_t errlen) {
  char *abs_base;
  if (base[0] == '/') {
    abs_base = xstrdup(base);
  } else {
    char cwd[4096];
    if (!getcwd(cwd, sizeof(cwd))) {
      snprintf(err, errlen, "cannot read the working directory: %s",
               strerror(errno));
      return DR_EIO;
    }
    abs_base = path_join(cwd, base);
  }
  char *dag_dir = path_join(abs_base, dag);
  free(abs_base);
  if (mkdir_p(dag_dir, 0755) != 0) {
    snprintf(err, errlen, "cannot create %s: %s", dag_dir, strerror(errno));
    free(dag_dir);
    return DR_EIO;
  }
  double t = now_wall();
  time_t sec = (time_t)t;
  struct tm tm;
  gmtime_r(&sec, &tm);
  char stamp[32], date[16];
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  /* The random suffix keeps two runs started in the same second apart;
   * mkdir (not mkdir -p) makes the claim atomic. */
  for (int tries = 0; tries < 64; tries++) {
    char *id = xasprintf("%s-%04x", stamp, random_suffix());
    char *path = path_join(dag_dir, id);
    if (mkdir(path, 0755) == 0) {
      rundir *r = xcalloc(1, sizeof(*r));
      r->path = path;
      r->id = id;
      r->date = xstrdup(date);
      r->started = t;
      free(dag_dir);
      *out = r;
      return 0;
    }
    int e = errno;
    free(id);
    free(path);
    if (e != EEXIST) {
      snprintf(err, errlen, "cannot create a run directory in %s: %s",
               dag_dir, strerror(e));
      free(dag_dir);
      return DR_EIO;
    }
  }
  snprintf(err, errlen, "cannot find a free run id in %s", dag_dir);
  free(dag_dir);
  return DR_EIO;
}

int rundir_open(const char *path, const char *id, double started,
                rundir **out, char *err, size_t errlen) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    snprintf(err, errlen, "run directory %s is gone", path);
    return DR_ENOENT;
  }
  time_t sec = (time_t)started;
  struct tm tm;
  char date[16];
  gmtime_r(&sec, &tm);
  strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  rundir *r = xcalloc(1, sizeof(*r));
  r->path = xstrdup(path);
  r->id = xstrdup(id);
  r->date = xstrdup(date);
  r->started = started;
  *out = r;
  return 0;
}

void rundir_destroy(rundir *r) {
  if (!r)
    return;
  free(r->path);
  free(r->id);
  free(r->date);
  free(r);
}

char *rundir_task(const rundir *r, const char *task) {
  return path_join(r->path, task);
}

char *rundir_out(const rundir *r, const char *task) {
  return xasprintf("%s/%s/out", r->path, task);
}

char *rundir_attempt(const rundir *r, const char *task, int attempt) {
  return xasprintf("%s/%s/attempt-%d", r->path, task, attempt);
}
