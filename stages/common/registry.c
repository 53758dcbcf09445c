/*
 * The models/ registry; see registry.h.
 *
 * Names under root besides the entries:
 *   .tmp-<name>       a promotion being copied (or an interrupted one)
 *   .tmp-del-<name>   an entry retention is removing: renamed out of the
 *                     entries' names first, so a crash in the middle of
 *                     the removal never leaves half an entry that lists
 *   .tmp-link-*       a symlink about to be renamed over latest or best
 *   .lock             flock'd by promote and retain: two runs promoting
 *                     into one registry at once take turns (the seq
 *                     numbers and the .tmp-* clean-up need it)
 */
#include "registry.h"

#include "ckpt/ckpt.h"
#include "lib/fileio.h"
#include "lib/sha256.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FORMAT "dagrun-model"
#define VERSION 1
#define PROMOTION "promotion.json"
#define TOKENIZER "tokenizer.json"
#define MANIFEST "manifest.json"
#define TMP_PREFIX ".tmp-"

/* ---- The default root ---- */

char *registry_default_root(const char *run_dir, const char *dag) {
  const char *env = getenv("DAGRUN_MODELS_DIR");
  if (env && *env)
    return fileio_xprintf("%s/%s", env, dag);
  /* <runs> is run_dir less its last two names (<dag>/<run id>). */
  char *runs = strdup(run_dir);
  if (!runs)
    return NULL;
  for (int k = 0; k < 2; k++) {
    size_t n = strlen(runs);
    while (n > 1 && runs[n - 1] == '/')
      runs[--n] = '\0';
    char *slash = strrchr(runs, '/');
    if (!slash)
      strcpy(runs, ".");
    else if (slash == runs)
      runs[1] = '\0';
    else
      *slash = '\0';
  }
  /* <runs>/.. as the file system has it (runs may be a symlink), when it
   * can be resolved; literally otherwise. */
  char *out = NULL, real[PATH_MAX];
  if (realpath(runs, real)) {
    char *slash = strrchr(real, '/');
    if (slash == real)
      out = fileio_xprintf("/models/%s", dag);
    else {
      *slash = '\0';
      out = fileio_xprintf("%s/models/%s", real, dag);
    }
  } else {
    out = fileio_xprintf("%s/../models/%s", runs, dag);
  }
  free(runs);
  return out;
}

/* ---- Reading ---- */

static double num_or_nan(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void copy_str(char *dst, size_t n, const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  snprintf(dst, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* The entry <root>/<name> from its promotion.json: 0, or -1 when it is
 * not a complete entry. */
static int read_entry(const char *root, const char *name, registry_entry *e) {
  char *path = fileio_xprintf("%s/%s/" PROMOTION, root, name);
  char ignored[256];
  char *text =
      path ? fileio_read_all(path, NULL, ignored, sizeof ignored) : NULL;
  free(path);
  cJSON *o = text ? cJSON_Parse(text) : NULL;
  free(text);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
  const cJSON *seq = cJSON_GetObjectItemCaseSensitive(o, "seq");
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
  int rc = -1;
  if (cJSON_IsObject(o) && cJSON_IsString(fmt) &&
      strcmp(fmt->valuestring, FORMAT) == 0 && cJSON_IsNumber(seq) &&
      cJSON_IsNumber(step) && strlen(name) < sizeof e->name) {
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->path, sizeof e->path, "%s/%s", root, name);
    e->seq = (int64_t)seq->valuedouble;
    e->step = (int64_t)step->valuedouble;
    e->val_loss = num_or_nan(o, "val_loss");
    e->perplexity = num_or_nan(o, "perplexity");
    e->accuracy = num_or_nan(o, "accuracy");
    copy_str(e->dag, sizeof e->dag, o, "dag");
    copy_str(e->run, sizeof e->run, o, "run");
    rc = 0;
  }
  cJSON_Delete(o);
  return rc;
}

static int cmp_seq(const void *a, const void *b) {
  const registry_entry *x = a, *y = b;
  if (x->seq != y->seq)
    return x->seq < y->seq ? -1 : 1;
  return strcmp(x->name, y->name);
}

int registry_list(const char *root, registry_entry **out, size_t *n, char *err,
                  size_t errlen) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(root);
  if (!d) {
    if (errno == ENOENT)
      return 0;
    fileio_seterr(err, errlen, "cannot read the registry %s: %s", root,
                  strerror(errno));
    return -1;
  }
  registry_entry *v = NULL;
  size_t cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    /* Dot names are temporaries and the lock; latest and best are
     * symlinks, which lstat tells apart from the entries. */
    if (de->d_name[0] == '.')
      continue;
    char *p = fileio_xprintf("%s/%s", root, de->d_name);
    struct stat st;
    int isdir = p && lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
    free(p);
    if (!isdir)
      continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      registry_entry *nv = realloc(v, cap * sizeof *v);
      if (!nv) {
        closedir(d);
        free(v);
        fileio_seterr(err, errlen, "out of memory");
        return -1;
      }
      v = nv;
    }
    if (read_entry(root, de->d_name, &v[*n]) == 0)
      (*n)++;
  }
  closedir(d);
  if (*n == 0) {
    free(v);
    return 0;
  }
  qsort(v, *n, sizeof *v, cmp_seq);
  *out = v;
  return 0;
}

/* ---- Locking and links ---- */

/* Takes root/.lock (waiting for another promotion or retention to end):
 * the fd, or -1 with err. */
static int lock_root(const char *root, char *err, size_t errlen) {
  char *p = fileio_xprintf("%s/.lock", root);
  int fd = p ? open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
  if (fd < 0) {
    fileio_seterr(err, errlen, "cannot open %s: %s", p ? p : root,
                  p ? strerror(errno) : "out of memory");
    free(p);
    return -1;
  }
  int rc;
  while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
    ;
  if (rc != 0) {
    fileio_seterr(err, errlen, "cannot lock %s: %s", p, strerror(errno));
    close(fd);
    fd = -1;
  }
  free(p);
  return fd;
}

static void unlock_root(int fd) {
  if (fd >= 0)
    close(fd); /* releases the flock */
}

/* Points root/<link> at target (an entry's name: the link is relative, so
 * the registry can move) by renaming a new symlink over it; target NULL
 * removes the link. 0 or -1 with err. */
static int set_link(const char *root, const char *link, const char *target,
                    char *err, size_t errlen) {
  char *path = fileio_xprintf("%s/%s", root, link);
  char *tmp = fileio_xprintf("%s/" TMP_PREFIX "link-%s", root, link);
  int rc = -1;
  if (!path || !tmp) {
    fileio_seterr(err, errlen, "out of memory");
  } else if (!target) {
    if (unlink(path) == 0 || errno == ENOENT)
      rc = 0;
    else
      fileio_seterr(err, errlen, "cannot remove %s: %s", path, strerror(errno));
  } else {
    unlink(tmp);
    if (symlink(target, tmp) != 0)
      fileio_seterr(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    else if (rename(tmp, path) != 0) {
      fileio_seterr(err, errlen, "cannot rename %s to %s: %s", tmp, path,
                    strerror(errno));
      unlink(tmp);
    } else
      rc = 0;
  }
  free(path);
  free(tmp);
  return rc;
}

const registry_entry *registry_best(const registry_entry *v, size_t n) {
  const registry_entry *best = NULL;
  for (size_t i = 0; i < n; i++)
    if (isfinite(v[i].val_loss) &&
        (!best || v[i].val_loss < best->val_loss ||
         (v[i].val_loss == best->val_loss && v[i].seq > best->seq)))
      best = &v[i];
  return best;
}

/* latest and best for the entries now in root, then an fsync of root. */
static int update_links(const char *root, char *err, size_t errlen) {
  registry_entry *v = NULL;
  size_t n = 0;
  if (registry_list(root, &v, &n, err, errlen) != 0)
    return -1;
  const registry_entry *best = registry_best(v, n);
  int rc = set_link(root, "latest", n ? v[n - 1].name : NULL, err, errlen);
  if (rc == 0)
    rc = set_link(root, "best", best ? best->name : NULL, err, errlen);
  free(v);
  int e;
  if (rc == 0 && (e = fileio_fsync_dir(root)) != 0) {
    fileio_seterr(err, errlen, "cannot fsync %s: %s", root, strerror(-e));
    rc = -1;
  }
  return rc;
}

/* Removes every .tmp-* under root (called under the lock: none is in
 * progress). 0 or -1 with err. */
static int remove_temporaries(const char *root, char *err, size_t errlen) {
  DIR *d = opendir(root);
  if (!d) {
    fileio_seterr(err, errlen, "cannot read %s: %s", root, strerror(errno));
    return -1;
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0)
      continue;
    char *p = fileio_xprintf("%s/%s", root, de->d_name);
    int e = p ? fileio_remove_tree(p) : -ENOMEM;
    if (e != 0) {
      fileio_seterr(err, errlen, "cannot remove the stale %s: %s",
                    p ? p : de->d_name, strerror(-e));
      rc = -1;
    }
    free(p);
  }
  closedir(d);
  return rc;
}

/* ---- Promotion ---- */

/* Names the checkpoint's manifest lists, plus the manifest itself, as a
 * NULL-terminated array (caller frees with free_names). NULL with err. */
static char **checkpoint_files(const char *dir, char *err, size_t errlen) {
  char *path = fileio_join(dir, MANIFEST);
  char sub[512];
  char *text = path ? fileio_read_all(path, NULL, sub, sizeof sub) : NULL;
  free(path);
  if (!text) {
    fileio_seterr(err, errlen, "%s", sub);
    return NULL;
  }
  cJSON *m = cJSON_Parse(text);
  free(text);
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
  size_t n = cJSON_IsObject(files) ? (size_t)cJSON_GetArraySize(files) : 0;
  char **v = calloc(n + 2, sizeof *v);
  if (!v) {
    cJSON_Delete(m);
    fileio_seterr(err, errlen, "out of memory");
    return NULL;
  }
  size_t k = 0;
  int ok = 1;
  for (const cJSON *f = cJSON_IsObject(files) ? files->child : NULL; f && ok;
       f = f->next) {
    /* The registry's own files beside a checkpoint's: a checkpoint that
     * has one of them is not one we can promote without losing it. */
    if (strcmp(f->string, TOKENIZER) == 0 ||
        strcmp(f->string, PROMOTION) == 0) {
      fileio_seterr(err, errlen,
                    "%s/" MANIFEST
                    " lists %s, a name the registry keeps for its "
                    "own file",
                    dir, f->string);
      ok = 0;
    } else if (!(v[k++] = strdup(f->string))) {
      fileio_seterr(err, errlen, "out of memory");
      ok = 0;
    }
  }
  if (ok && !(v[k++] = strdup(MANIFEST))) {
    fileio_seterr(err, errlen, "out of memory");
    ok = 0;
  }
  cJSON_Delete(m);
  if (!ok) {
    for (size_t i = 0; v[i]; i++)
      free(v[i]);
    free(v);
    return NULL;
  }
  return v;
}

static void free_names(char **v) {
  if (!v)
    return;
  for (size_t i = 0; v[i]; i++)
    free(v[i]);
  free(v);
}

static cJSON *number_or_null(double x) {
  return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull();
}

/* promotion.json's text, malloc'd; NULL when out of memory. */
static char *promotion_json(const registry_promotion *p, const char *name,
                            int64_t seq, int64_t step, const char *source,
                            const char *tok_sha, cJSON *validation) {
  char when[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "format", FORMAT);
  cJSON_AddNumberToObject(o, "version", VERSION);
  cJSON_AddNumberToObject(o, "seq", (double)seq);
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddStringToObject(o, "dag", p->dag ? p->dag : "");
  cJSON_AddStringToObject(o, "run", p->run);
  cJSON_AddStringToObject(o, "task", p->task ? p->task : "");
  cJSON_AddNumberToObject(o, "step", (double)step);
  cJSON_AddStringToObject(o, "source", source);
  cJSON_AddStringToObject(o, "promoted_at", when);
  cJSON_AddItemToObject(o, "val_loss", number_or_null(p->val_loss));
  cJSON_AddItemToObject(o, "perplexity", number_or_null(p->perplexity));
  cJSON_AddItemToObject(o, "accuracy", number_or_null(p->accuracy));
  cJSON_AddStringToObject(o, "tokenizer_sha256", tok_sha);
  cJSON_AddItemToObject(o, "validation",
                        validation ? validation : cJSON_CreateNull());
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}

/* The run id goes into a directory name: a plain name, nothing that would
 * climb out of root or hide as a temporary. */
static int plain_run_id(const char *z) {
  return z && *z && z[0] != '.' && !strchr(z, '/') && strlen(z) < 200;
}

/* Copies the verified checkpoint src and the tokenizer into tmp, checks
 * the copy, writes promotion.json. 0 or -1 with err. */
static int build_entry(const char *tmp, const char *src,
                       const registry_promotion *p, const char *name,
                       int64_t seq, int64_t step, const char *tok_sha,
                       cJSON *validation, char *err, size_t errlen) {
  if (mkdir(tmp, 0755) != 0) {
    fileio_seterr(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    cJSON_Delete(validation);
    return -1;
  }
  char **files = checkpoint_files(src, err, errlen);
  int rc = files ? 0 : -1;
  for (size_t i = 0; rc == 0 && files[i]; i++) {
    char *from = fileio_join(src, files[i]), *to = fileio_join(tmp, files[i]);
    rc = from && to ? fileio_copy_durable(from, to, err, errlen) : -1;
    if (!from || !to)
      fileio_seterr(err, errlen, "out of memory");
    free(from);
    free(to);
  }
  free_names(files);
  char *tok_to = fileio_join(tmp, TOKENIZER);
  if (rc == 0 && !tok_to) {
    fileio_seterr(err, errlen, "out of memory");
    rc = -1;
  }
  if (rc == 0)
    rc = fileio_copy_durable(p->tokenizer, tok_to, err, errlen);
  /* The copy checked against the manifest and the tokenizer's hash: what
   * the disk gave back is what was verified. */
  char sub[1024], hex[65];
  int e;
  if (rc == 0 && ckpt_verify(tmp, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen, "the copy in %s does not verify: %s", tmp, sub);
    rc = -1;
  }
  if (rc == 0 && (e = sha256_file(tok_to, hex)) != 0) {
    fileio_seterr(err, errlen, "cannot read %s: %s", tok_to, strerror(-e));
    rc = -1;
  } else if (rc == 0 && strcmp(hex, tok_sha) != 0) {
    fileio_seterr(err, errlen, "the copy %s differs from %s", tok_to,
                  p->tokenizer);
    rc = -1;
  }
  free(tok_to);
  if (rc != 0) {
    cJSON_Delete(validation);
    return -1;
  }
  char *text = promotion_json(p, name, seq, step, src, tok_sha, validation);
  char *ppath = fileio_join(tmp, PROMOTION);
  if (!text || !ppath) {
    fileio_seterr(err, errlen, "out of memory");
    rc = -1;
  } else if ((e = fileio_write_durable(ppath, text, strlen(text))) != 0) {
    fileio_seterr(err, errlen, "cannot write %s: %s", ppath, strerror(-e));
    rc = -1;
  } else if ((e = fileio_fsync_dir(tmp)) != 0) {
    fileio_seterr(err, errlen, "cannot fsync %s: %s", tmp, strerror(-e));
    rc = -1;
  }
  free(text);
  free(ppath);
  return rc;
}

int registry_promote(const char *root, const registry_promotion *p,
                     registry_entry *out, char *err, size_t errlen) {
  if (!p->checkpoint || !p->tokenizer || !plain_run_id(p->run)) {
    fileio_seterr(
        err, errlen,
        "a promotion needs a checkpoint, a tokenizer and a run id that "
        "is a plain name");
    return -1;
  }
  /* Everything about the source is checked before anything is written. */
  char sub[1024];
  if (ckpt_verify(p->checkpoint, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen, "checkpoint %s is corrupt: %s", p->checkpoint,
                  sub);
    return -1;
  }
  int64_t step;
  char *state = NULL;
  if (ckpt_read_state(p->checkpoint, &step, &state, err, errlen) != 0)
    return -1;
  free(state);
  struct stat st;
  char tok_sha[65];
  int e;
  if (stat(p->tokenizer, &st) != 0) {
    fileio_seterr(err, errlen, "tokenizer %s: %s", p->tokenizer,
                  strerror(errno));
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    fileio_seterr(err, errlen, "tokenizer %s: not a regular file",
                  p->tokenizer);
    return -1;
  }
  if ((e = sha256_file(p->tokenizer, tok_sha)) != 0) {
    fileio_seterr(err, errlen, "tokenizer %s: %s", p->tokenizer, strerror(-e));
    return -1;
  }
  cJSON *validation = NULL;
  if (p->validation_json) {
    validation = cJSON_Parse(p->validation_json);
    if (!cJSON_IsObject(validation)) {
      cJSON_Delete(validation);
      fileio_seterr(err, errlen,
                    "the validation metrics are not a JSON object");
      return -1;
    }
  }
  char source[PATH_MAX];
  if (!realpath(p->checkpoint, source))
    snprintf(source, sizeof source, "%s", p->checkpoint);

  char name[256];
  snprintf(name, sizeof name, "%s-step-%08lld", p->run, (long long)step);
  char *final = fileio_xprintf("%s/%s", root, name);
  char *tmp = fileio_xprintf("%s/" TMP_PREFIX "%s", root, name);
  int lock = -1, rc = -1;
  registry_entry *v = NULL;
  size_t n = 0;
  if (!final || !tmp) {
    fileio_seterr(err, errlen, "out of memory");
    goto done;
  }
  if ((e = fileio_mkdir_p(root, 0755)) != 0) {
    fileio_seterr(err, errlen, "cannot create the registry %s: %s", root,
                  strerror(-e));
    goto done;
  }
  if ((lock = lock_root(root, err, errlen)) < 0 ||
      remove_temporaries(root, err, errlen) != 0)
    goto done;
  if (lstat(final, &st) == 0) {
    fileio_seterr(err, errlen, "%s is already in the registry (%s)", name,
                  final);
    goto done;
  }
  if (registry_list(root, &v, &n, err, errlen) != 0)
    goto done;
  int64_t seq = n ? v[n - 1].seq + 1 : 1;
  rc = build_entry(tmp, source, p, name, seq, step, tok_sha, validation, err,
                   errlen);
  validation = NULL; /* build_entry's */
  if (rc == 0 && rename(tmp, final) != 0) {
    fileio_seterr(err, errlen, "cannot rename %s to %s: %s", tmp, final,
                  strerror(errno));
    rc = -1;
  }
  if (rc != 0) {
    fileio_remove_tree(tmp);
    goto done;
  }
  if ((e = fileio_fsync_dir(root)) != 0) {
    fileio_seterr(err, errlen, "cannot fsync %s: %s", root, strerror(-e));
    rc = -1;
    goto done;
  }
  if (out && read_entry(root, name, out) != 0) {
    fileio_seterr(err, errlen, "%s: cannot read back its " PROMOTION, final);
    rc = -1;
    goto done;
  }
  rc = update_links(root, err, errlen);
done:
  cJSON_Delete(validation);
  unlock_root(lock);
  free(v);
  free(final);
  free(tmp);
  return rc;
}

/* ---- Retention ---- */

static int cmp_loss(const void *a, const void *b) {
  const registry_entry *x = *(const registry_entry *const *)a;
  const registry_entry *y = *(const registry_entry *const *)b;
  if (x->val_loss != y->val_loss)
    return x->val_loss < y->val_loss ? -1 : 1;
  return x->seq > y->seq ? -1 : x->seq < y->seq; /* the newer first */
}

int registry_retain(const char *root, int keep_last, int keep_best,
                    void (*on_removed)(void *arg, const registry_entry *e),
                    void *arg, char *err, size_t errlen) {
  if (keep_last < 1 || keep_best < 0) {
    fileio_seterr(err, errlen,
                  "keep_last must be at least 1 and keep_best at "
                  "least 0");
    return -1;
  }
  struct stat st;
  if (stat(root, &st) != 0 && errno == ENOENT)
    return 0; /* no registry: nothing to keep or remove */
  int lock = lock_root(root, err, errlen);
  if (lock < 0)
    return -1;
  registry_entry *v = NULL, **by_loss = NULL;
  size_t n = 0, nl = 0;
  char *keep = NULL;
  int removed = -1;
  if (registry_list(root, &v, &n, err, errlen) != 0)
    goto done;
  keep = calloc(n ? n : 1, 1);
  by_loss = calloc(n ? n : 1, sizeof *by_loss);
  if (!keep || !by_loss) {
    fileio_seterr(err, errlen, "out of memory");
    goto done;
  }
  /* v is by seq ascending: the newest are at the end. */
  for (size_t i = n > (size_t)keep_last ? n - (size_t)keep_last : 0; i < n; i++)
    keep[i] = 1;
  for (size_t i = 0; i < n; i++)
    if (isfinite(v[i].val_loss))
      by_loss[nl++] = &v[i];
  qsort(by_loss, nl, sizeof *by_loss, cmp_loss);
  for (size_t i = 0; i < nl && i < (size_t)keep_best; i++)
    keep[by_loss[i] - v] = 1;

  removed = 0;
  for (size_t i = 0; i < n && removed >= 0; i++) {
    if (keep[i])
      continue;
    /* Out of the entries' names in one rename, then removed at leisure:
     * a crash between the two leaves a .tmp-* the next promotion
     * removes. */
    char *gone = fileio_xprintf("%s/" TMP_PREFIX "del-%s", root, v[i].name);
    int e = 0;
    if (!gone)
      e = -ENOMEM;
    else if ((e = fileio_remove_tree(gone)) == 0 &&
             rename(v[i].path, gone) != 0)
      e = -errno;
    if (e != 0) {
      fileio_seterr(err, errlen, "cannot remove %s: %s", v[i].path,
                    strerror(-e));
      removed = -1;
    } else {
      /* Should this fail, the .tmp-del-* goes with the next promotion. */
      (void)fileio_remove_tree(gone);
      removed++;
      if (on_removed)
        on_removed(arg, &v[i]);
    }
    free(gone);
  }
  /* The links, also after a failed removal: they must not point at an
   * entry that went. */
  if (removed >= 0) {
    if (update_links(root, err, errlen) != 0)
      removed = -1;
  } else {
    char ignored[256];
    update_links(root, ignored, sizeof ignored);
  }
done:
  unlock_root(lock);
  free(keep);
  free(by_loss);
  free(v);
  return removed;
}
