#include "rundir.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/cron.h"
#include "base/util.h"
#include "lib/clock.h"
#include "lib/fileio.h"

static unsigned random_suffix(void) {
  unsigned v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
    v = (unsigned)getpid() ^ (unsigned)time(NULL);
  return v & 0xffff;
}

char *rundir_new_id(double t) {
  time_t sec = (time_t)t;
  struct tm tm;
  gmtime_r(&sec, &tm);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  return xasprintf("%s-%04x", stamp, random_suffix());
}

int rundir_id_valid(const char *id) {
  if (!id[0] || id[0] == '.' || strlen(id) > 128)
    return 0;
  for (const char *p = id; *p; p++)
    if (!isalnum((unsigned char)*p) && !strchr("_.-", *p))
      return 0;
  return 1;
}

static char *iso(const cron_zone *z, double t) {
  char buf[48];
  cron_format_iso(z, (int64_t)t, buf, sizeof buf);
  return xstrdup(buf);
}

int rundir_set_time(rundir *r, const char *trigger, const char *tz,
                    double logical_date, double interval_start, char *err,
                    size_t errlen) {
  cron_zone *z;
  int rc = cron_zone_open(tz, &z, err, errlen);
  if (rc != 0)
    return rc;
  free(r->logical_iso);
  free(r->interval_start_iso);
  free(r->interval_end_iso);
  free(r->date);
  free(r->trigger);
  r->trigger = xstrdup(trigger ? trigger : "manual");
  r->logical_date = logical_date > 0 ? logical_date : r->started;
  r->has_interval = interval_start > 0;
  r->interval_start = r->has_interval ? interval_start : r->logical_date;
  r->interval_end = r->logical_date;
  r->logical_iso = iso(z, r->logical_date);
  r->interval_start_iso = iso(z, r->interval_start);
  r->interval_end_iso = iso(z, r->interval_end);
  r->date = xstrndup(r->logical_iso, 10);
  cron_zone_close(z);
  return 0;
}

/* The outermost directory of path that does not exist (path itself when
 * only it is missing), or NULL when path exists. Caller frees. */
static char *outermost_missing(const char *path) {
  char *missing = NULL, *p = xstrdup(path);
  struct stat st;
  while (stat(p, &st) != 0 && errno == ENOENT) {
    char *up = path_dirname(p);
    free(missing);
    missing = p;
    if (strcmp(up, p) == 0) {
      free(up);
      return missing;
    }
    p = up;
  }
  free(p);
  return missing;
}

int rundir_create(const char *base, const char *dag, const char *id,
                  double logical_date, rundir **out, char *err,
                  size_t errlen) {
  if (id && !rundir_id_valid(id)) {
    snprintf(err, errlen,
             "bad run id '%s': expected letters, digits, '_', '.' and '-', "
             "not starting with '.'",
             id);
    return DR_EINVAL;
  }
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
  char *made = outermost_missing(dag_dir);
  int mrc = fileio_mkdir_p(dag_dir, 0755);
  if (mrc != 0) {
    snprintf(err, errlen, "cannot create %s: %s", dag_dir, strerror(-mrc));
    free(dag_dir);
    free(made);
    return DR_EIO;
  }
  double t = clock_wall();
  /* The random suffix keeps two runs started in the same second apart;
   * mkdir (not mkdir -p) makes the claim atomic. A given id is tried
   * once. */
  int freed = 0, remade = 0;
  for (int tries = 0; tries < (id ? 1 : 64); tries++) {
    char *rid = id ? xstrdup(id) : rundir_new_id(t);
    char *path = path_join(dag_dir, rid);
    if (mkdir(path, 0755) == 0) {
      rundir *r = xcalloc(1, sizeof(*r));
      r->path = path;
      r->id = rid;
      r->started = t;
      r->made = made;
      rundir_set_time(r, NULL, NULL, logical_date, 0, err, errlen);
      free(dag_dir);
      *out = r;
      return 0;
    }
    int e = errno;
    /* Another dagrun's refused run (rundir_discard) took away the DAG's
     * directory it had made, between our mkdir -p and this mkdir. */
    if (e == ENOENT && !remade && fileio_mkdir_p(dag_dir, 0755) == 0) {
      remade = 1;
      free(rid);
      free(path);
      tries--;
      continue;
    }
    /* A given id whose directory is empty names a run that never began
     * (dagrun killed between this mkdir and recording the run): nothing
     * was recorded or written, so the id is free again. */
    if (id && e == EEXIST && !freed && rmdir(path) == 0) {
      freed = 1;
      free(rid);
      free(path);
      tries--; /* the same id, once more */
      continue;
    }
    free(rid);
    free(path);
    if (e != EEXIST) {
      snprintf(err, errlen, "cannot create a run directory in %s: %s",
               dag_dir, strerror(e));
      free(dag_dir);
      free(made);
      return DR_EIO;
    }
  }
  if (id)
    snprintf(err, errlen, "run %s already exists in %s", id, dag_dir);
  else
    snprintf(err, errlen, "cannot find a free run id in %s", dag_dir);
  free(dag_dir);
  free(made);
  return id ? DR_EEXIST : DR_EIO;
}

int rundir_open(const char *path, const char *id, double started,
                double logical_date, rundir **out, char *err, size_t errlen) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    snprintf(err, errlen, "run directory %s is gone", path);
    return DR_ENOENT;
  }
  rundir *r = xcalloc(1, sizeof(*r));
  r->path = xstrdup(path);
  r->id = xstrdup(id);
  r->started = started;
  rundir_set_time(r, NULL, NULL, logical_date, 0, err, errlen);
  *out = r;
  return 0;
}

static const char *or_empty(const char *s) { return s ? s : ""; }

void rundir_tmpl(const rundir *r, tmpl_env *te) {
  te->run_id = r ? r->id : NULL;
  te->run_date = r ? r->date : NULL;
  te->run_logical_date = r ? r->logical_iso : NULL;
  te->run_interval_start = r ? r->interval_start_iso : NULL;
  te->run_interval_end = r ? r->interval_end_iso : NULL;
  te->run_trigger = r ? (r->trigger ? r->trigger : "manual") : NULL;
  te->run_trigger_files = r ? or_empty(r->trigger_files) : NULL;
  te->run_trigger_dataset = r ? or_empty(r->trigger_dataset) : NULL;
  te->run_trigger_dataset_version =
      r ? or_empty(r->trigger_dataset_version) : NULL;
  te->run_trigger_dataset_outputs =
      r ? or_empty(r->trigger_dataset_outputs) : NULL;
}

void rundir_set_trigger_info(rundir *r, const cJSON *info) {
  free(r->trigger_files);
  free(r->trigger_dataset);
  free(r->trigger_dataset_version);
  free(r->trigger_dataset_outputs);
  r->trigger_files = r->trigger_dataset = NULL;
  r->trigger_dataset_version = r->trigger_dataset_outputs = NULL;
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(info, "files");
  if (cJSON_IsArray(files)) {
    sbuf b = {0};
    const cJSON *f;
    cJSON_ArrayForEach(f, files) if (cJSON_IsString(f))
        sbuf_printf(&b, "%s%s", b.n ? "\n" : "", f->valuestring);
    r->trigger_files = b.s ? b.s : xstrdup("");
  }
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(info, "dataset");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(info, "version");
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(info, "outputs");
  if (cJSON_IsString(ds))
    r->trigger_dataset = xstrdup(ds->valuestring);
  if (cJSON_IsNumber(v))
    r->trigger_dataset_version = xasprintf("%lld", (long long)v->valuedouble);
  if (o)
    r->trigger_dataset_outputs = cJSON_PrintUnformatted(o);
}

void rundir_destroy(rundir *r) {
  if (!r)
    return;
  free(r->path);
  free(r->id);
  free(r->date);
  free(r->logical_iso);
  free(r->interval_start_iso);
  free(r->interval_end_iso);
  free(r->trigger);
  free(r->trigger_files);
  free(r->trigger_dataset);
  free(r->trigger_dataset_version);
  free(r->trigger_dataset_outputs);
  free(r->made);
  free(r);
}

void rundir_discard(const rundir *r) {
  /* Something was written in it: it stays, and so do its parents. */
  if (rmdir(r->path) != 0 || !r->made)
    return;
  /* Then each parent up to the outermost one made; one that is not empty
   * (another run of the DAG began in it since) stops the walk. */
  char *d = path_dirname(r->path);
  while (rmdir(d) == 0 && strcmp(d, r->made) != 0) {
    char *up = path_dirname(d);
    free(d);
    d = up;
  }
  free(d);
}

int rundir_reserve(const rundir *r) {
  char *path = path_join(r->path, ".reserve");
  int rc = fileio_reserve(path, RUNDIR_RESERVE_BYTES);
  free(path);
  return rc;
}

void rundir_release_reserve(const rundir *r) {
  char *path = path_join(r->path, ".reserve");
  unlink(path);
  free(path);
}

int rundir_disk_short(const rundir *r) {
  struct statvfs v;
  return statvfs(r->path, &v) == 0 &&
         (unsigned long long)v.f_bavail * v.f_frsize < RUNDIR_RESERVE_BYTES;
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
