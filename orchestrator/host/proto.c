/*
 * proto: JSON-lines messages from a worker to the orchestrator.
 */
#include "proto.h"

#include "base/util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const level_names[] = {"debug", "info", "warn", "error"};

/* Appended to a message text cut short to fit in one PIPE_BUF write. */
static const char trunc_marker[] = "...[truncated]";

/* Serialises writers: one message's bytes are never mixed with another's,
 * even for lines longer than PIPE_BUF or when fd is a regular file. */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

static int write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return DR_EIO;
    }
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Bytes cJSON writes for c inside a string. */
static size_t encoded_size(unsigned char c) {
  if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
      c == '\r' || c == '\t')
    return 2;
  return c < 32 ? 6 : 1; /* \u00XX */
}

/* Cuts the string member key of o so that the encoded line, n bytes now,
 * fits in limit bytes. Returns 0, or -1 when there is nothing to cut. */
static int shorten(cJSON *o, const char *key, size_t n, size_t limit) {
  cJSON *t = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsString(t) || !t->valuestring)
    return -1;
  const char *text = t->valuestring;
  size_t len = strlen(text), enc = 0;
  if (len <= sizeof(trunc_marker) - 1)
    return -1;
  for (size_t i = 0; i < len; i++)
    enc += encoded_size((unsigned char)text[i]);
  size_t fixed = n - enc; /* the rest of the line */
  size_t room = limit > fixed + sizeof(trunc_marker) - 1
                    ? limit - fixed - (sizeof(trunc_marker) - 1)
                    : 0;
  size_t keep = 0, used = 0;
  while (keep < len && used + encoded_size((unsigned char)text[keep]) <= room)
    used += encoded_size((unsigned char)text[keep++]);
  if (keep >= len) /* already fits: nothing to cut */
    return -1;
  /* Do not split a UTF-8 sequence. */
  while (keep > 0 && ((unsigned char)text[keep] & 0xC0) == 0x80)
    keep--;
  char *shorter = xasprintf("%.*s%s", (int)keep, text, trunc_marker);
  cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateString(shorter));
  free(shorter);
  return 0;
}

/* Encodes o (consumed) as one line and writes it with one write(2) where
 * possible. trunc_key, if not NULL, names a string member that may be cut
 * to fit the line in PIPE_BUF bytes. */
static int send_obj(int fd, cJSON *o, const char *trunc_key) {
  if (!o)
    return DR_EIO;
  if (fd < 0) {
    cJSON_Delete(o);
    return DR_EIO;
  }
  char *s = NULL;
  size_t n = 0;
  for (;;) {
    s = cJSON_PrintUnformatted(o);
    if (!s) {
      cJSON_Delete(o);
      return DR_EIO;
    }
    n = strlen(s);
    if (n + 1 <= PIPE_BUF || !trunc_key)
      break;
    cJSON_free(s);
    s = NULL;
    if (shorten(o, trunc_key, n, PIPE_BUF - 1) != 0) {
      s = cJSON_PrintUnformatted(o);
      if (!s) {
        cJSON_Delete(o);
        return DR_EIO;
      }
      n = strlen(s);
      break;
    }
  }
  cJSON_Delete(o);
  if (n + 1 > PROTO_LINE_MAX) {
    cJSON_free(s);
    return DR_EINVAL;
  }
  char *line = xmalloc(n + 1);
  memcpy(line, s, n);
  line[n] = '\n';
  cJSON_free(s);

  int rc = pthread_mutex_lock(&write_lock);
  if (rc == 0) {
    rc = write_all(fd, line, n + 1);
    pthread_mutex_unlock(&write_lock);
  } else {
    rc = DR_EIO;
  }
  free(line);
  return rc;
}

static cJSON *new_msg(const char *type) {
  cJSON *o = cJSON_CreateObject();
  if (o && !cJSON_AddStringToObject(o, "type", type)) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* JSON has no NaN or infinity; a diverging loss must still arrive. A
 * finite value arrives bit for bit (format_exact_double): a stage's
 * metric is what metrics.jsonl, the store and the comparisons read. */
static cJSON *add_number(cJSON *o, const char *key, double v) {
  if (isnan(v))
    return cJSON_AddStringToObject(o, key, "NaN");
  if (isinf(v))
    return cJSON_AddStringToObject(o, key, v > 0 ? "Infinity" : "-Infinity");
  char text[32];
  format_exact_double(v, text, sizeof text);
  return cJSON_AddRawToObject(o, key, text);
}

int proto_send_log(int fd, int level, const char *msg) {
  if (level < 0 || level > 3)
    level = 1;
  cJSON *o = new_msg("log");
  if (!o || !cJSON_AddStringToObject(o, "level", level_names[level]) ||
      !cJSON_AddStringToObject(o, "msg", msg ? msg : "")) {
    cJSON_Delete(o);
    return DR_EIO;
  }
  return send_obj(fd, o, "msg");
}

int proto_send_progress(int fd, double fraction, const char *msg) {
  cJSON *o = new_msg("progress");
  if (!o || !add_number(o, "fraction", fraction) ||
      (msg && !cJSON_AddStringToObject(o, "msg", msg))) {
    cJSON_Delete(o);
    return DR_EIO;
  }
  return send_obj(fd, o, msg ? "msg" : NULL);
}

int proto_send_metric(int fd, const char *name, double value, int64_t step) {
  cJSON *o = new_msg("metric");
  if (!o || !name || !cJSON_AddStringToObject(o, "name", name) ||
      !add_number(o, "value", value) ||
      !cJSON_AddNumberToObject(o, "step", (double)step)) {
    cJSON_Delete(o);
    return DR_EIO;
  }
  return send_obj(fd, o, NULL);
}

int proto_send_output(int fd, const char *key, const char *value) {
  cJSON *o = new_msg("output");
  if (!o || !key || !value || !cJSON_AddStringToObject(o, "key", key) ||
      !cJSON_AddStringToObject(o, "value", value)) {
    cJSON_Delete(o);
    return DR_EIO;
  }
  return send_obj(fd, o, NULL);
}

int proto_send_heartbeat(int fd) {
  return send_obj(fd, new_msg("heartbeat"), NULL);
}

int proto_send_result(int fd, int status, const char *error) {
  cJSON *o = new_msg("result");
  if (!o || !cJSON_AddNumberToObject(o, "status", status) ||
      (error && !cJSON_AddStringToObject(o, "error", error))) {
    cJSON_Delete(o);
    return DR_EIO;
  }
  return send_obj(fd, o, "error");
}

char *proto_metric_line(double time, int attempt, const char *name,
                        double value, int64_t step) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "time", time);
  cJSON_AddNumberToObject(j, "attempt", attempt);
  cJSON_AddStringToObject(j, "name", name);
  /* A non-finite value as cJSON writes one (null), as readers expect. */
  if (isfinite(value))
    add_number(j, "value", value);
  else
    cJSON_AddNumberToObject(j, "value", value);
  cJSON_AddNumberToObject(j, "step", (double)step);
  char *line = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  char *out = xasprintf("%s\n", line ? line : "{}");
  cJSON_free(line);
  return out;
}

/* Parsing. */

static const cJSON *member(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key);
}

static int get_string(const cJSON *o, const char *key, int optional,
                      char **out) {
  const cJSON *v = member(o, key);
  if (!v && optional) {
    *out = NULL;
    return 0;
  }
  if (!cJSON_IsString(v) || !v->valuestring)
    return DR_EPROTO;
  *out = xstrdup(v->valuestring);
  return 0;
}

static int get_number(const cJSON *o, const char *key, double *out) {
  const cJSON *v = member(o, key);
  if (cJSON_IsNumber(v)) {
    *out = v->valuedouble;
    return 0;
  }
  if (cJSON_IsString(v) && v->valuestring) {
    if (strcmp(v->valuestring, "NaN") == 0)
      *out = NAN;
    else if (strcmp(v->valuestring, "Infinity") == 0)
      *out = INFINITY;
    else if (strcmp(v->valuestring, "-Infinity") == 0)
      *out = -INFINITY;
    else
      return DR_EPROTO;
    return 0;
  }
  return DR_EPROTO;
}

/* An integer-valued JSON number within [lo, hi]. */
static int get_integer(const cJSON *o, const char *key, double lo, double hi,
                       double *out) {
  const cJSON *v = member(o, key);
  if (!cJSON_IsNumber(v))
    return DR_EPROTO;
  double d = v->valuedouble;
  if (!(d >= lo && d <= hi) || d != floor(d))
    return DR_EPROTO;
  *out = d;
  return 0;
}

static int parse_fields(const cJSON *o, proto_msg *m) {
  const cJSON *t = member(o, "type");
  if (!cJSON_IsString(t) || !t->valuestring)
    return DR_EPROTO;
  const char *type = t->valuestring;
  double d;
  if (strcmp(type, "log") == 0) {
    m->type = PROTO_LOG;
    const cJSON *lv = member(o, "level");
    if (!cJSON_IsString(lv) || !lv->valuestring)
      return DR_EPROTO;
    m->level = -1;
    for (int i = 0; i < 4; i++)
      if (strcmp(lv->valuestring, level_names[i]) == 0)
        m->level = i;
    if (m->level < 0)
      return DR_EPROTO;
    return get_string(o, "msg", 0, &m->text);
  }
  if (strcmp(type, "progress") == 0) {
    m->type = PROTO_PROGRESS;
    if (get_number(o, "fraction", &m->number) != 0 || !(m->number >= 0) ||
        m->number > 1)
      return DR_EPROTO;
    return get_string(o, "msg", 1, &m->text);
  }
  if (strcmp(type, "metric") == 0) {
    m->type = PROTO_METRIC;
    /* 2^53: the largest step a JSON number carries exactly. */
    if (get_string(o, "name", 0, &m->text) != 0 ||
        get_number(o, "value", &m->number) != 0 ||
        get_integer(o, "step", -9007199254740992.0, 9007199254740992.0, &d) !=
            0)
      return DR_EPROTO;
    m->step = (int64_t)d;
    return 0;
  }
  if (strcmp(type, "output") == 0) {
    m->type = PROTO_OUTPUT;
    if (get_string(o, "key", 0, &m->text) != 0)
      return DR_EPROTO;
    return get_string(o, "value", 0, &m->value);
  }
  if (strcmp(type, "heartbeat") == 0) {
    m->type = PROTO_HEARTBEAT;
    return 0;
  }
  if (strcmp(type, "result") == 0) {
    m->type = PROTO_RESULT;
    if (get_integer(o, "status", INT_MIN, INT_MAX, &d) != 0)
      return DR_EPROTO;
    m->status = (int)d;
    return get_string(o, "error", 1, &m->text);
  }
  return DR_EPROTO;
}

int proto_parse(const char *line, size_t n, proto_msg *m) {
  memset(m, 0, sizeof(*m));
  if (!line)
    return DR_EPROTO;
  const char *end = NULL;
  cJSON *o = cJSON_ParseWithLengthOpts(line, n, &end, 0);
  if (!o)
    return DR_EPROTO;
  /* One message per line: anything but whitespace after it is garbage. */
  for (const char *p = end; p && p < line + n; p++) {
    if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
      cJSON_Delete(o);
      return DR_EPROTO;
    }
  }
  int rc = cJSON_IsObject(o) ? parse_fields(o, m) : DR_EPROTO;
  cJSON_Delete(o);
  if (rc != 0)
    proto_msg_free(m);
  return rc;
}

void proto_msg_free(proto_msg *m) {
  if (!m)
    return;
  free(m->text);
  free(m->value);
  m->text = NULL;
  m->value = NULL;
}

int proto_output_key_valid(const char *k) {
  if (!k || !*k)
    return 0;
  for (; *k; k++)
    if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
          (*k >= '0' && *k <= '9') || *k == '_'))
      return 0;
  return 1;
}
