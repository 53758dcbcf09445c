/*
 * sentmetrics: the last metrics a worker sent (sentmetrics.h).
 */
#include "sentmetrics.h"

#include "base/util.h"
#include "proto.h"

#include "lib/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sent {
  char *name;
  double value;
  int64_t step;
} sent;

struct sentmetrics {
  sent *ring;
  size_t cap, n, head; /* head: the oldest, when n == cap */
};

sentmetrics *sentmetrics_create(size_t cap) {
  sentmetrics *m = xcalloc(1, sizeof *m);
  m->cap = cap ? cap : 1;
  m->ring = xcalloc(m->cap, sizeof *m->ring);
  return m;
}

static void forget(sentmetrics *m) {
  for (size_t i = 0; i < m->n; i++)
    free(m->ring[i].name);
  m->n = m->head = 0;
}

void sentmetrics_free(sentmetrics *m) {
  if (!m)
    return;
  forget(m);
  free(m->ring);
  free(m);
}

void sentmetrics_add(sentmetrics *m, const char *name, double value,
                     int64_t step) {
  size_t at = m->n < m->cap ? m->n++ : m->head;
  if (m->n == m->cap && at == m->head) {
    free(m->ring[at].name);
    m->head = (m->head + 1) % m->cap;
  }
  m->ring[at] = (sent){xstrdup(name), value, step};
}

/* "NAME\x1fSTEP", the key of a metric line. */
static char *key_of(const char *name, int64_t step) {
  return xasprintf("%s\x1f%lld", name, (long long)step);
}

/* The keys of path's lines of attempt. 0, or -1 when it cannot be read
 * (a missing file has none). */
static int written_keys(const char *path, int attempt, strmap *keys) {
  FILE *f = fopen(path, "r");
  if (!f)
    return errno == ENOENT ? 0 : -1;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "attempt");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
    if (cJSON_IsNumber(a) && a->valueint == attempt && cJSON_IsString(nm) &&
        cJSON_IsNumber(st)) {
      char *k = key_of(nm->valuestring, (int64_t)st->valuedouble);
      strmap_put(keys, k, 1);
      free(k);
    }
    cJSON_Delete(j);
  }
  free(line);
  fclose(f);
  return 0;
}

int sentmetrics_flush(sentmetrics *m, const char *path, int attempt) {
  strmap keys = {0};
  int added = 0;
  int fd = -1;
  if (written_keys(path, attempt, &keys) != 0) {
    added = -1;
    goto out;
  }
  for (size_t i = 0; i < m->n && added >= 0; i++) {
    const sent *s = &m->ring[(m->head + i) % m->cap];
    char *k = key_of(s->name, s->step);
    int have = strmap_get(&keys, k, NULL);
    free(k);
    if (have)
      continue;
    if (fd < 0)
      fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    char *line = fd < 0 ? NULL
                        : proto_metric_line(clock_wall(), attempt, s->name,
                                            s->value, s->step);
    if (!line || write(fd, line, strlen(line)) != (ssize_t)strlen(line))
      added = -1;
    else
      added++;
    free(line);
  }
out:
  if (fd >= 0)
    close(fd);
  strmap_free(&keys);
  forget(m);
  return added;
}
