/*
 * datatrig: a DAG's file and dataset triggers under `dagrun serve`; the
 * rules are in datatrig.h.
 */
#include "datatrig.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "store/datastate.h"

/* Versions of a dataset one poll turns into runs with catchup: the rest
 * on the next poll. */
#define DATASET_CATCHUP_MAX 100

/* Seconds between two scans of a watched glob with nothing pending: what
 * inotify cannot see (another machine writing to NFS) is noticed then. */
#define RESCAN_S 30.0

struct datatrig {
  char *dag;      /* the DAG the state below belongs to (NULL: not read) */
  cJSON *known;   /* path -> {size, mtime}, as recorded in the store */
  cJSON *pending; /* path -> {size, mtime, since}: changed, not settled */
  /* inotify on the glob's directory, or -1 (none: scan on every poll). */
  int ino_fd;
  char *watched;    /* the glob the watch is for */
  double last_scan; /* when the glob was last matched; 0: never */
};

datatrig *datatrig_create(void) {
  datatrig *t = xcalloc(1, sizeof(datatrig));
  t->ino_fd = -1;
  return t;
}

static void unwatch(datatrig *t) {
  if (t->ino_fd >= 0)
    close(t->ino_fd);
  t->ino_fd = -1;
  free(t->watched);
  t->watched = NULL;
}

/* Watches the directory of pattern with inotify, when its directory part
 * has no wildcard (data/in/x-*.txt: data/in; data/[ab]/x.txt: none) and
 * inotify works there. Without a watch every poll scans. Returns 1 when
 * the watch is new: what happened before it began was not seen, so the
 * glob must be scanned once. */
static int watch(datatrig *t, const char *pattern) {
  if (t->watched && strcmp(t->watched, pattern) == 0)
    return 0;
  unwatch(t);
  const char *slash = strrchr(pattern, '/');
  if (!slash || strcspn(pattern, "*?[") < (size_t)(slash - pattern))
    return 0;
  char *dir = slash == pattern ? xstrdup("/")
                               : xstrndup(pattern, (size_t)(slash - pattern));
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd >= 0 &&
      inotify_add_watch(fd, dir,
                        IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB |
                            IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                            IN_DELETE_SELF | IN_MOVE_SELF) >= 0) {
    t->ino_fd = fd;
    t->watched = xstrdup(pattern);
  } else if (fd >= 0) {
    close(fd); /* no such directory yet, or no inotify: scan */
  }
  free(dir);
  return t->ino_fd >= 0;
}

/* Whether the watch saw anything since the last call (its events
 * drained). The directory itself gone or moved ends the watch: the next
 * poll watches again. */
static int watch_saw(datatrig *t) {
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  int saw = 0;
  ssize_t n;
  while ((n = read(t->ino_fd, buf, sizeof buf)) > 0) {
    saw = 1;
    for (char *p = buf; p < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      if (ev->mask &
          (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_Q_OVERFLOW)) {
        unwatch(t);
        return 1;
      }
      p += sizeof *ev + ev->len;
    }
  }
  return saw;
}

static void forget(datatrig *t) {
  free(t->dag);
  cJSON_Delete(t->known);
  cJSON_Delete(t->pending);
  t->dag = NULL;
  t->known = t->pending = NULL;
}

void datatrig_destroy(datatrig *t) {
  if (!t)
    return;
  forget(t);
  unwatch(t);
  free(t);
}

void datatrig_event_free(datatrig_event *e) {
  free(e->info);
  free(e->what);
}

static datatrig_event *add_event(datatrig_event **ev, size_t *n,
                                 const char *trigger, cJSON *info) {
  *ev = xrealloc(*ev, (*n + 1) * sizeof **ev);
  datatrig_event *e = &(*ev)[(*n)++];
  e->trigger = trigger;
  e->info = cJSON_PrintUnformatted(info);
  e->what = NULL;
  return e;
}

/* The regular files the glob matches now: path -> {size, mtime}, in
 * glob's (sorted) order. */
static cJSON *match_files(const char *pattern) {
  cJSON *cur = cJSON_CreateObject();
  glob_t g;
  if (glob(pattern, 0, NULL, &g) != 0)
    return cur; /* no match, or an unreadable directory: nothing there */
  for (size_t i = 0; i < g.gl_pathc; i++) {
    struct stat sb;
    if (stat(g.gl_pathv[i], &sb) != 0 || !S_ISREG(sb.st_mode))
      continue;
    cJSON *f = cJSON_AddObjectToObject(cur, g.gl_pathv[i]);
    cJSON_AddNumberToObject(f, "size", (double)sb.st_size);
    cJSON_AddNumberToObject(
        f, "mtime", (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec / 1e9);
  }
  globfree(&g);
  return cur;
}

static int same_file(const cJSON *a, const cJSON *b) {
  return a && b &&
         cJSON_GetNumberValue(cJSON_GetObjectItem(a, "size")) ==
             cJSON_GetNumberValue(cJSON_GetObjectItem(b, "size")) &&
         cJSON_GetNumberValue(cJSON_GetObjectItem(a, "mtime")) ==
             cJSON_GetNumberValue(cJSON_GetObjectItem(b, "mtime"));
}

/* The recorded files of sp's DAG, read once (and again when the entry
 * now holds another DAG). A first sight records cur as seen, unless
 * catchup. Returns 0, or DR_ESTORE. */
static int load_known(datatrig *t, store *st, const spec *sp, const cJSON *cur,
                      char *err, size_t errlen) {
  if (t->dag && strcmp(t->dag, sp->dag) == 0)
    return 0;
  forget(t);
  int seen;
  cJSON *known = store_files_get(st, sp->dag, &seen, err, errlen);
  if (!known)
    return DR_ESTORE;
  if (!seen && !sp->catchup) {
    cJSON_Delete(known);
    if (store_files_set(st, sp->dag, cur, err, errlen) != 0)
      return DR_ESTORE;
    known = cJSON_Duplicate(cur, 1);
  }
  t->dag = xstrdup(sp->dag);
  t->known = known;
  t->pending = cJSON_CreateObject();
  return 0;
}

/* Moves cur's new and changed files into pending (keeping the time each
 * last changed), and drops from pending the files that are gone or back
 * to what was recorded. */
static void note_changes(datatrig *t, const cJSON *cur, double now) {
  for (const cJSON *f = cur->child; f; f = f->next) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(t->pending, f->string);
    if (same_file(f, cJSON_GetObjectItemCaseSensitive(t->known, f->string))) {
      cJSON_DeleteItemFromObjectCaseSensitive(t->pending, f->string);
    } else if (!same_file(f, p)) {
      cJSON_DeleteItemFromObjectCaseSensitive(t->pending, f->string);
      cJSON *n = cJSON_Duplicate(f, 1);
      cJSON_AddNumberToObject(n, "since", now);
      cJSON_AddItemToObject(t->pending, f->string, n);
    }
  }
  for (cJSON *p = t->pending->child, *next; p; p = next) {
    next = p->next;
    if (!cJSON_GetObjectItemCaseSensitive(cur, p->string))
      cJSON_Delete(cJSON_DetachItemViaPointer(t->pending, p));
  }
}

/* Whether every pending file has been as it is for settle seconds. */
static int settled(const datatrig *t, double settle, double now) {
  if (!t->pending->child)
    return 0;
  for (const cJSON *p = t->pending->child; p; p = p->next)
    if (cJSON_GetNumberValue(cJSON_GetObjectItem(p, "since")) + settle > now)
      return 0;
  return 1;
}

static int poll_files(datatrig *t, store *st, const spec *sp, double now,
                      datatrig_event **ev, size_t *n, char *err,
                      size_t errlen) {
  int fresh = watch(t, sp->on.glob);
  /* Watched, nothing seen, nothing settling: no scan needed yet. */
  int quiet = t->ino_fd >= 0 && !watch_saw(t) && !fresh;
  if (quiet && t->dag && strcmp(t->dag, sp->dag) == 0 && !t->pending->child &&
      now - t->last_scan < RESCAN_S)
    return 0;
  t->last_scan = now;
  cJSON *cur = match_files(sp->on.glob);
  int rc = load_known(t, st, sp, cur, err, errlen);
  if (rc == 0)
    note_changes(t, cur, now);
  if (rc != 0 || !settled(t, sp->on.settle_s, now)) {
    cJSON_Delete(cur);
    return rc;
  }
  /* Recorded before the run starts: a crash from here on loses it
   * rather than running the batch twice. */
  if (store_files_set(st, sp->dag, cur, err, errlen) != 0) {
    cJSON_Delete(cur);
    return DR_ESTORE;
  }
  cJSON *info = cJSON_CreateObject();
  cJSON *files = cJSON_AddArrayToObject(info, "files");
  for (const cJSON *f = cur->child; f; f = f->next) /* sorted, as cur */
    if (cJSON_GetObjectItemCaseSensitive(t->pending, f->string))
      cJSON_AddItemToArray(files, cJSON_CreateString(f->string));
  int nf = cJSON_GetArraySize(files);
  datatrig_event *e = add_event(ev, n, "files", info);
  e->what = xasprintf("%d new or changed file%s", nf, nf == 1 ? "" : "s");
  cJSON_Delete(info);
  cJSON_Delete(t->known);
  t->known = cur;
  cJSON_Delete(t->pending);
  t->pending = cJSON_CreateObject();
  return 0;
}

/* The newest version of dataset, 0 when it has none. */
static int newest_version(store *st, const char *dataset, long long *v,
                          char *err, size_t errlen) {
  cJSON *all = store_dataset_versions(st, NULL, 0, 0, err, errlen);
  if (!all)
    return DR_ESTORE;
  *v = 0;
  for (const cJSON *d = all->child; d; d = d->next) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(d, "dataset"));
    if (name && strcmp(name, dataset) == 0)
      *v = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(d, "version"));
  }
  cJSON_Delete(all);
  return 0;
}

static int poll_dataset(store *st, const spec *sp, const char *ds,
                        datatrig_event **ev, size_t *n, size_t *coalesced,
                        char *err, size_t errlen) {
  long long seen;
  int rc = store_dataset_seen_get(st, sp->dag, ds, &seen, err, errlen);
  if (rc == DR_ENOENT) {
    long long v;
    if (newest_version(st, ds, &v, err, errlen) != 0)
      return DR_ESTORE;
    return store_dataset_seen_set(st, sp->dag, ds, v, err, errlen);
  }
  if (rc != 0)
    return rc;
  cJSON *vs = store_dataset_versions(
      st, ds, seen, sp->catchup ? DATASET_CATCHUP_MAX : 0, err, errlen);
  if (!vs)
    return DR_ESTORE;
  int nv = cJSON_GetArraySize(vs);
  if (nv == 0) {
    cJSON_Delete(vs);
    return 0;
  }
  const cJSON *last = cJSON_GetArrayItem(vs, nv - 1);
  long long newest =
      (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(last, "version"));
  /* Recorded before the runs start, as for a schedule. */
  if (store_dataset_seen_set(st, sp->dag, ds, newest, err, errlen) != 0) {
    cJSON_Delete(vs);
    return DR_ESTORE;
  }
  if (!sp->catchup)
    *coalesced += (size_t)nv - 1;
  for (const cJSON *v = sp->catchup ? vs->child : last; v; v = v->next) {
    datatrig_event *e = add_event(ev, n, "dataset", (cJSON *)v);
    e->what = xasprintf(
        "dataset %s v%lld", ds,
        (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(v, "version")));
  }
  cJSON_Delete(vs);
  return 0;
}

int datatrig_poll(datatrig *t, store *st, const spec *sp, double now,
                  datatrig_event **ev, size_t *n, size_t *coalesced, char *err,
                  size_t errlen) {
  *ev = NULL;
  *n = 0;
  *coalesced = 0;
  int rc = 0;
  if (sp->on.glob)
    rc = poll_files(t, st, sp, now, ev, n, err, errlen);
  for (size_t i = 0; rc == 0 && i < sp->on.n_datasets; i++)
    rc =
        poll_dataset(st, sp, sp->on.datasets[i], ev, n, coalesced, err, errlen);
  return rc;
}

cJSON *datatrig_json(const spec *sp) {
  if (!sp->on.glob && !sp->on.n_datasets)
    return NULL;
  cJSON *on = cJSON_CreateObject();
  if (sp->on.glob) {
    cJSON *f = cJSON_AddObjectToObject(on, "files");
    cJSON_AddStringToObject(f, "glob", sp->on.glob);
    cJSON_AddNumberToObject(f, "settle_s", sp->on.settle_s);
  }
  if (sp->on.n_datasets) {
    cJSON *d = cJSON_AddArrayToObject(on, "datasets");
    for (size_t i = 0; i < sp->on.n_datasets; i++)
      cJSON_AddItemToArray(d, cJSON_CreateString(sp->on.datasets[i]));
  }
  return on;
}
