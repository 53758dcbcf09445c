/*
 * Crash-safe checkpoint directories; see ckpt.h.
 *
 * Names under parent:
 *   step-%08lld        complete checkpoints (or ones a check finds broken)
 *   .step-%08lld.tmp   one being built; never read, removed when stale
 *   .step-%08lld.old   a checkpoint of the same step being replaced, kept
 *                      until its successor is in place, then removed
 */
#include "ckpt.h"
#include "lib/fileio.h"
#include "lib/sha256.h"


#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "dagrun-checkpoint"
#define CKPT_VERSION 1
#define MANIFEST "manifest.json"

struct ckpt_writer {
  char *parent;
  int64_t step;
  char *tmp;   /* parent/.step-N.tmp */
  char *final; /* parent/step-N */
};

/* ---- Small file-system helpers ---- */

/* A plain file name: no directory part, not "." or "..". */
static int plain_name(const char *name) {
  return *name && !strchr(name, '/') && strcmp(name, ".") != 0 &&
         strcmp(name, "..") != 0;
}

/* "step-" followed by decimal digits only: *step, 1. */
static int parse_step_name(const char *name, int64_t *step) {
  if (strncmp(name, "step-", 5) != 0 || !name[5])
    return 0;
  int64_t v = 0;
  for (const char *s = name + 5; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10)
      return 0;
    v = v * 10 + (*s - '0');
  }
  *step = v;
  return 1;
}

/* ".step-<digits>.tmp" or ".step-<digits>.old". */
static int is_temporary(const char *name) {
  size_t n = strlen(name);
  if (strncmp(name, ".step-", 6) != 0 || n < 11)
    return 0;
  if (strcmp(name + n - 4, ".tmp") != 0 && strcmp(name + n - 4, ".old") != 0)
    return 0;
  for (size_t i = 6; i < n - 4; i++)
    if (name[i] < '0' || name[i] > '9')
      return 0;
  return 1;
}

/* The whole file, NUL-terminated, malloc'd; -errno. */
static int read_text(const char *path, char **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  size_t n = (size_t)st.st_size;
  char *b = malloc(n + 1);
  int rc = b ? fileio_pread_all(fd, b, n, 0) : -ENOMEM;
  close(fd);
  if (rc != 0) {
    free(b);
    return rc;
  }
  b[n] = '\0';
  *out = b;
  return 0;
}

/* ---- Writing ---- */

int ckpt_begin(const char *parent, int64_t step, ckpt_writer **out, char *err,
               size_t errlen) {
  *out = NULL;
  if (step < 0) {
    fileio_seterr(err, errlen, "checkpoint step %" PRId64 " is negative", step);
    return -1;
  }
  int rc = fileio_mkdir_p(parent, 0755);
  if (rc != 0) {
    fileio_seterr(err, errlen, "cannot create %s: %s", parent, strerror(-rc));
    return -1;
  }
  ckpt_writer *w = calloc(1, sizeof(*w));
  if (w) {
    w->parent = strdup(parent);
    w->step = step;
    w->tmp = fileio_xprintf("%s/.step-%08lld.tmp", parent, (long long)step);
    w->final = fileio_xprintf("%s/step-%08lld", parent, (long long)step);
  }
  if (!w || !w->parent || !w->tmp || !w->final) {
    fileio_seterr(err, errlen, "out of memory");
    ckpt_abort(w);
    return -1;
  }
  /* A temporary of the same step is a crashed attempt's: start afresh. */
  if (fileio_remove_tree(w->tmp) != 0 || mkdir(w->tmp, 0755) != 0) {
    fileio_seterr(err, errlen, "cannot create %s: %s", w->tmp, strerror(errno));
    free(w->parent);
    free(w->tmp);
    free(w->final);
    free(w);
    return -1;
  }
  *out = w;
  return 0;
}

const char *ckpt_writer_dir(const ckpt_writer *w) { return w->tmp; }

int ckpt_add_file(ckpt_writer *w, const char *name, const void *data, size_t n,
                  char *err, size_t errlen) {
  if (!plain_name(name) || strcmp(name, MANIFEST) == 0) {
    fileio_seterr(err, errlen, "checkpoint file name \"%s\" is not allowed",
                  name);
    return -1;
  }
  char *path = fileio_join(w->tmp, name);
  if (!path) {
    fileio_seterr(err, errlen, "out of memory");
    return -1;
  }
  int rc = fileio_write_durable(path, data, n);
  if (rc != 0)
    fileio_seterr(err, errlen, "cannot write %s: %s", path, strerror(-rc));
  free(path);
  return rc == 0 ? 0 : -1;
}

void ckpt_abort(ckpt_writer *w) {
  if (!w)
    return;
  if (w->tmp)
    fileio_remove_tree(w->tmp);
  free(w->parent);
  free(w->tmp);
  free(w->final);
  free(w);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files of dir but the manifest, sorted; -errno. */
static int list_files(const char *dir, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return -errno;
  char **v = NULL;
  size_t cap = 0;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        strcmp(e->d_name, MANIFEST) == 0)
      continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 8;
      char **nv = realloc(v, cap * sizeof(*v));
      if (!nv) {
        rc = -ENOMEM;
        break;
      }
      v = nv;
    }
    if (!(v[*n] = strdup(e->d_name)))
      rc = -ENOMEM;
    else
      (*n)++;
  }
  closedir(d);
  if (rc == 0)
    qsort(v, *n, sizeof(*v), cmp_str);
  *out = v;
  return rc;
}

static void free_list(char **v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

/* fsync of a file already written (by us or by st_write). */
static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  int rc = fsync(fd) == 0 ? 0 : -errno;
  close(fd);
  return rc;
}

/* Adds name's size and SHA-256 to files, after an fsync: files written
 * by other code (st_write) are made durable here too. */
static int add_entry(cJSON *files, const char *dir, const char *name, char *err,
                     size_t errlen) {
  char *path = fileio_join(dir, name);
  if (!path) {
    fileio_seterr(err, errlen, "out of memory");
    return -1;
  }
  int rc = -1, e;
  struct stat st;
  char hex[65];
  cJSON *o = NULL;
  if (lstat(path, &st) != 0) {
    fileio_seterr(err, errlen, "cannot stat %s: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    fileio_seterr(err, errlen,
                  "%s: not a regular file (a checkpoint holds only files)",
                  path);
  } else if ((e = fsync_path(path)) != 0 ||
             (e = sha256_file(path, hex)) != 0) {
    fileio_seterr(err, errlen, "cannot read %s: %s", path, strerror(-e));
  } else if (!(o = cJSON_AddObjectToObject(files, name)) ||
             !cJSON_AddNumberToObject(o, "bytes", (double)st.st_size) ||
             !cJSON_AddStringToObject(o, "sha256", hex)) {
    fileio_seterr(err, errlen, "out of memory");
  } else {
    rc = 0;
  }
  free(path);
  return rc;
}

/* The manifest's text for the files in w->tmp, malloc'd; NULL with err. */
static char *make_manifest(ckpt_writer *w, const char *state_json, char *err,
                           size_t errlen) {
  cJSON *state = cJSON_Parse(state_json ? state_json : "{}");
  if (!cJSON_IsObject(state)) {
    fileio_seterr(err, errlen, "checkpoint state is not a JSON object");
    cJSON_Delete(state);
    return NULL;
  }
  cJSON *root = cJSON_CreateObject(), *files = NULL;
  char **names = NULL, *text = NULL;
  size_t n = 0;
  if (!root || !cJSON_AddStringToObject(root, "format", CKPT_FORMAT) ||
      !cJSON_AddNumberToObject(root, "version", CKPT_VERSION) ||
      !cJSON_AddNumberToObject(root, "step", (double)w->step) ||
      !(files = cJSON_AddObjectToObject(root, "files"))) {
    fileio_seterr(err, errlen, "out of memory");
    goto done;
  }
  int rc = list_files(w->tmp, &names, &n);
  if (rc != 0) {
    fileio_seterr(err, errlen, "cannot list %s: %s", w->tmp, strerror(-rc));
    goto done;
  }
  for (size_t i = 0; i < n; i++)
    if (add_entry(files, w->tmp, names[i], err, errlen) != 0)
      goto done;
  cJSON_AddItemToObject(root, "state", state);
  state = NULL; /* root's now */
  text = cJSON_Print(root);
  if (!text)
    fileio_seterr(err, errlen, "out of memory");
done:
  free_list(names, n);
  cJSON_Delete(state);
  cJSON_Delete(root);
  return text;
}

int ckpt_commit(ckpt_writer *w, const char *state_json, char *final_path,
                size_t final_len, char *err, size_t errlen) {
  char *old = NULL, *mpath = NULL;
  char *text = make_manifest(w, state_json, err, errlen);
  if (!text)
    goto fail;
  mpath = fileio_join(w->tmp, MANIFEST);
  if (!mpath) {
    fileio_seterr(err, errlen, "out of memory");
    goto fail;
  }
  /* The manifest last: a directory with one has all its files. */
  if (fileio_write_atomic(mpath, text, strlen(text), err, errlen) != 0)
    goto fail;
  /* A checkpoint of this step already there (an earlier run's, perhaps a
   * broken one) steps aside first, and goes only once the new one is in
   * place: at every moment one of the two is under a name we read. */
  struct stat st;
  if (lstat(w->final, &st) == 0) {
    old = fileio_xprintf("%s/.step-%08lld.old", w->parent, (long long)w->step);
    if (!old || fileio_remove_tree(old) != 0 || rename(w->final, old) != 0) {
      fileio_seterr(err, errlen, "cannot move %s aside: %s", w->final,
                    strerror(errno));
      goto fail;
    }
  }
  if (rename(w->tmp, w->final) != 0) {
    fileio_seterr(err, errlen, "cannot rename %s to %s: %s", w->tmp, w->final,
                  strerror(errno));
    if (old)
      rename(old, w->final);
    goto fail;
  }
  int rc = fileio_fsync_dir(w->parent);
  if (rc != 0) {
    fileio_seterr(err, errlen, "cannot fsync %s: %s", w->parent, strerror(-rc));
    /* The rename happened; the checkpoint is complete but maybe not yet
     * durable. Leave it: a later check says whether it survived. */
    free(text);
    free(mpath);
    free(old);
    free(w->tmp);
    w->tmp = NULL;
    ckpt_abort(w);
    return -1;
  }
  if (old)
    fileio_remove_tree(old);
  if (final_path && final_len)
    snprintf(final_path, final_len, "%s", w->final);
  free(text);
  free(mpath);
  free(old);
  free(w->tmp);
  w->tmp = NULL; /* renamed: nothing for abort to remove */
  ckpt_abort(w);
  return 0;

fail:
  free(text);
  free(mpath);
  free(old);
  ckpt_abort(w);
  return -1;
}

/* ---- Reading ---- */

/* Parses dir's manifest; the message names the problem. */
static cJSON *load_manifest(const char *dir, char *err, size_t errlen) {
  char *path = fileio_join(dir, MANIFEST), *text = NULL;
  if (!path) {
    fileio_seterr(err, errlen, "out of memory");
    return NULL;
  }
  int rc = read_text(path, &text);
  free(path);
  if (rc == -ENOENT) {
    fileio_seterr(err, errlen,
                  "missing " MANIFEST " (an incomplete checkpoint?)");
    return NULL;
  }
  if (rc != 0) {
    fileio_seterr(err, errlen, MANIFEST ": %s", strerror(-rc));
    return NULL;
  }
  cJSON *m = cJSON_Parse(text);
  free(text);
  if (!cJSON_IsObject(m)) {
    fileio_seterr(err, errlen, MANIFEST ": not a JSON object");
    cJSON_Delete(m);
    return NULL;
  }
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "version");
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(m, "step");
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
  const cJSON *state = cJSON_GetObjectItemCaseSensitive(m, "state");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT) != 0) {
    fileio_seterr(err, errlen, MANIFEST ": format is not \"" CKPT_FORMAT "\"");
  } else if (!cJSON_IsNumber(ver) || ver->valuedouble != CKPT_VERSION) {
    fileio_seterr(err, errlen,
                  MANIFEST ": version %g, this dagrun reads version %d",
                  cJSON_IsNumber(ver) ? ver->valuedouble : 0.0, CKPT_VERSION);
  } else if (!cJSON_IsNumber(step) || step->valuedouble < 0 ||
             step->valuedouble != (double)(int64_t)step->valuedouble) {
    fileio_seterr(err, errlen, MANIFEST ": no \"step\" number");
  } else if (!cJSON_IsObject(files)) {
    fileio_seterr(err, errlen, MANIFEST ": no \"files\" object");
  } else if (!cJSON_IsObject(state)) {
    fileio_seterr(err, errlen, MANIFEST ": no \"state\" object");
  } else {
    return m;
  }
  cJSON_Delete(m);
  return NULL;
}

/* The checks of one listed file. */
static int verify_file(const char *dir, const cJSON *o, char *err,
                       size_t errlen) {
  const char *name = o->string;
  const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(o, "bytes");
  const cJSON *sha = cJSON_GetObjectItemCaseSensitive(o, "sha256");
  if (!plain_name(name) || !cJSON_IsNumber(bytes) || bytes->valuedouble < 0 ||
      !cJSON_IsString(sha) || strlen(sha->valuestring) != 64) {
    fileio_seterr(err, errlen, MANIFEST ": bad entry for \"%s\"", name);
    return -1;
  }
  char *path = fileio_join(dir, name);
  if (!path) {
    fileio_seterr(err, errlen, "out of memory");
    return -1;
  }
  int rc = -1;
  struct stat st;
  uint64_t want = (uint64_t)bytes->valuedouble;
  char hex[65];
  int e;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT)
      fileio_seterr(err, errlen, "%s: missing", name);
    else
      fileio_seterr(err, errlen, "%s: %s", name, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    fileio_seterr(err, errlen, "%s: not a regular file", name);
  } else if ((uint64_t)st.st_size < want) {
    fileio_seterr(err, errlen, "%s: truncated: %lld of %" PRIu64 " bytes", name,
                  (long long)st.st_size, want);
  } else if ((uint64_t)st.st_size > want) {
    fileio_seterr(err, errlen, "%s: %lld bytes, the manifest says %" PRIu64,
                  name, (long long)st.st_size, want);
  } else if ((e = sha256_file(path, hex)) != 0) {
    fileio_seterr(err, errlen, "%s: %s", name, strerror(-e));
  } else if (strcmp(hex, sha->valuestring) != 0) {
    fileio_seterr(err, errlen,
                  "%s: sha256 mismatch: the manifest says %s, the file "
                  "hashes to %s",
                  name, sha->valuestring, hex);
  } else {
    rc = 0;
  }
  free(path);
  return rc;
}

int ckpt_verify(const char *dir, char *err, size_t errlen) {
  cJSON *m = load_manifest(dir, err, errlen);
  if (!m)
    return -1;
  /* A step-N directory holds step N: a copied or renamed one does not
   * pass for another step. */
  const char *base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  int64_t dstep,
      mstep = (int64_t)cJSON_GetObjectItemCaseSensitive(m, "step")->valuedouble;
  if (parse_step_name(base, &dstep) && dstep != mstep) {
    fileio_seterr(err, errlen,
                  MANIFEST ": step %" PRId64 ", but the directory is %s", mstep,
                  base);
    cJSON_Delete(m);
    return -1;
  }
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
  for (const cJSON *o = files->child; o; o = o->next)
    if (verify_file(dir, o, err, errlen) != 0) {
      cJSON_Delete(m);
      return -1;
    }
  cJSON_Delete(m);
  return 0;
}

int ckpt_read_state(const char *dir, int64_t *step, char **state_json,
                    char *err, size_t errlen) {
  *state_json = NULL;
  char sub[512];
  cJSON *m = load_manifest(dir, sub, sizeof sub);
  if (!m) {
    fileio_seterr(err, errlen, "%s: %s", dir, sub);
    return -1;
  }
  *step = (int64_t)cJSON_GetObjectItemCaseSensitive(m, "step")->valuedouble;
  *state_json =
      cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(m, "state"));
  cJSON_Delete(m);
  if (!*state_json) {
    fileio_seterr(err, errlen, "out of memory");
    return -1;
  }
  return 0;
}

/* ---- Scanning ---- */

typedef struct entry {
  int64_t step;
  char *path;
} entry;

static int cmp_desc(const void *a, const void *b) {
  const entry *x = a, *y = b;
  return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

/* The step-N directories of parent, newest first; temporaries' paths to
 * *tmps when tmps is not NULL. -errno. */
static int scan(const char *parent, entry **out, size_t *n, char ***tmps,
                size_t *ntmp) {
  *out = NULL;
  *n = 0;
  if (tmps) {
    *tmps = NULL;
    *ntmp = 0;
  }
  DIR *d = opendir(parent);
  if (!d)
    return -errno;
  entry *v = NULL;
  size_t cap = 0, tcap = 0;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    int64_t step;
    if (parse_step_name(e->d_name, &step)) {
      if (*n == cap) {
        cap = cap ? 2 * cap : 8;
        entry *nv = realloc(v, cap * sizeof(*v));
        if (!nv) {
          rc = -ENOMEM;
          break;
        }
        v = nv;
      }
      v[*n].step = step;
      if (!(v[*n].path = fileio_join(parent, e->d_name)))
        rc = -ENOMEM;
      else
        (*n)++;
    } else if (tmps && is_temporary(e->d_name)) {
      if (*ntmp == tcap) {
        tcap = tcap ? 2 * tcap : 4;
        char **nt = realloc(*tmps, tcap * sizeof(char *));
        if (!nt) {
          rc = -ENOMEM;
          break;
        }
        *tmps = nt;
      }
      if (!((*tmps)[*ntmp] = fileio_join(parent, e->d_name)))
        rc = -ENOMEM;
      else
        (*ntmp)++;
    }
  }
  closedir(d);
  if (*n) /* qsort of NULL, even of 0 items, is undefined */
    qsort(v, *n, sizeof(*v), cmp_desc);
  *out = v;
  return rc;
}

static void free_entries(entry *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i].path);
  free(v);
}

int ckpt_find_latest(const char *parent, char **out,
                     void (*on_invalid)(void *arg, const char *dir,
                                        const char *why),
                     void *arg, char *err, size_t errlen) {
  *out = NULL;
  entry *v = NULL;
  size_t n = 0;
  int rc = scan(parent, &v, &n, NULL, NULL);
  if (rc == -ENOENT) /* no checkpoints yet */
    return 0;
  if (rc != 0) {
    fileio_seterr(err, errlen, "cannot read %s: %s", parent, strerror(-rc));
    free_entries(v, n);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    char why[1024];
    if (ckpt_verify(v[i].path, why, sizeof why) == 0) {
      *out = v[i].path;
      v[i].path = NULL;
      break;
    }
    if (on_invalid)
      on_invalid(arg, v[i].path, why);
  }
  free_entries(v, n);
  return 0;
}

int ckpt_prune(const char *parent, int keep) {
  if (keep < 1)
    keep = 1;
  entry *v = NULL;
  size_t n = 0;
  char **tmps = NULL;
  size_t ntmp = 0;
  int removed = 0;
  if (scan(parent, &v, &n, &tmps, &ntmp) == 0) {
    /* Newest first: the first `keep` that verify stay; once one has, the
     * older ones that do not verify go too. Broken ones newer than every
     * valid one stay, for someone to look at (find_latest reports them,
     * and a new checkpoint of their step replaces them). Past `keep`
     * valid ones nothing more needs checking. */
    int valid = 0;
    for (size_t i = 0; i < n; i++) {
      int ok = valid < keep && ckpt_verify(v[i].path, NULL, 0) == 0;
      if (ok) {
        valid++;
        continue;
      }
      if (valid > 0 && fileio_remove_tree(v[i].path) == 0)
        removed++;
    }
    for (size_t i = 0; i < ntmp; i++)
      if (fileio_remove_tree(tmps[i]) == 0)
        removed++;
    if (removed)
      fileio_fsync_dir(parent);
  }
  free_entries(v, n);
  for (size_t i = 0; i < ntmp; i++)
    free(tmps[i]);
  free(tmps);
  return removed;
}
