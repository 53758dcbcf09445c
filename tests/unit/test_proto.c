/*
 * proto: every message type survives encode -> pipe -> parse; malformed
 * lines are refused; several threads writing at once produce whole lines.
 */
#include "base/util.h"
#include "host/proto.h"
#include "testlib.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads one line (without '\n') from fd; caller frees. NULL at EOF. */
static char *read_line(int fd) {
  sbuf b = {0};
  char c;
  for (;;) {
    ssize_t r = read(fd, &c, 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      if (b.n == 0) {
        sbuf_free(&b);
        return NULL;
      }
      break;
    }
    if (c == '\n')
      break;
    sbuf_putc(&b, c);
  }
  sbuf_puts(&b, "");
  return sbuf_take(&b);
}

/* Sends with send(), reads the line back and parses it into m. Returns
 * the parse result; *len gets the line's length. */
static int roundtrip_line(int fds[2], proto_msg *m, size_t *len) {
  char *line = read_line(fds[0]);
  if (!line)
    return -100;
  if (len)
    *len = strlen(line);
  int rc = proto_parse(line, strlen(line), m);
  free(line);
  return rc;
}

static void test_roundtrip(void) {
  int fds[2];
  CHECK_INT(pipe(fds), 0);
  proto_msg m;
  size_t len;

  CHECK_INT(proto_send_log(fds[1], 2, "disk \"almost\" full\nsecond line é"),
            0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.type, PROTO_LOG);
  CHECK_INT(m.level, 2);
  CHECK_STR(m.text, "disk \"almost\" full\nsecond line é");
  proto_msg_free(&m);

  CHECK_INT(proto_send_progress(fds[1], 0.25, "step 50/200"), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.type, PROTO_PROGRESS);
  CHECK_NEAR(m.number, 0.25, 0);
  CHECK_STR(m.text, "step 50/200");
  proto_msg_free(&m);

  CHECK_INT(proto_send_progress(fds[1], 1.0, NULL), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.type, PROTO_PROGRESS);
  CHECK_NEAR(m.number, 1.0, 0);
  CHECK(m.text == NULL);
  proto_msg_free(&m);

  CHECK_INT(proto_send_metric(fds[1], "loss", 2.3125, 50), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.type, PROTO_METRIC);
  CHECK_STR(m.text, "loss");
  CHECK_NEAR(m.number, 2.3125, 0);
  CHECK_INT(m.step, 50);
  proto_msg_free(&m);

  /* Every bit arrives, and metrics.jsonl keeps it: the mean of two FP32
   * losses at an FP32 tie, which cJSON's 15 digits moved below the tie
   * (a gang's FP32 loss then differed from one process's), and values
   * that need 16 and 17 digits. */
  const double exact[] = {5.0626962184906005859375, 0.1,    1.0 / 3.0,
                          5.7427535057067871,       1e-300, 123456789.0};
  for (size_t i = 0; i < sizeof exact / sizeof *exact; i++) {
    CHECK_INT(proto_send_metric(fds[1], "loss", exact[i], 60), 0);
    CHECK_INT(roundtrip_line(fds, &m, &len), 0);
    CHECK(m.number == exact[i]);
    proto_msg_free(&m);
    char *line = proto_metric_line(1.5, 1, "loss", exact[i], 60);
    cJSON *j = cJSON_Parse(line);
    CHECK(j && cJSON_GetObjectItem(j, "value")->valuedouble == exact[i]);
    cJSON_Delete(j);
    free(line);
  }
  char text[32];
  format_exact_double(0.1, text, sizeof text);
  CHECK_STR(text, "0.1"); /* the shortest: not 0.10000000000000001 */
  char *nan_line = proto_metric_line(1.5, 1, "loss", NAN, 61);
  CHECK(strstr(nan_line, "\"value\":null") != NULL);
  free(nan_line);

  /* A diverging loss must still arrive as what it is. */
  CHECK_INT(proto_send_metric(fds[1], "loss", NAN, 51), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK(isnan(m.number));
  proto_msg_free(&m);
  CHECK_INT(proto_send_metric(fds[1], "grad_norm", -INFINITY, 52), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK(isinf(m.number) && m.number < 0);
  CHECK_INT(m.step, 52);
  proto_msg_free(&m);

  CHECK_INT(proto_send_output(fds[1], "model_path", "/runs/a b/model"), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.type, PROTO_OUTPUT);
  CHECK_STR(m.text, "model_path");
  CHECK_STR(m.value, "/runs/a b/model");
  proto_msg_free(&m);

  CHECK_INT(proto_send_heartbeat(fds[1]), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.type, PROTO_HEARTBEAT);
  proto_msg_free(&m);

  CHECK_INT(proto_send_result(fds[1], 3, "flaky: failure 1 of 2"), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.type, PROTO_RESULT);
  CHECK_INT(m.status, 3);
  CHECK_STR(m.text, "flaky: failure 1 of 2");
  proto_msg_free(&m);

  CHECK_INT(proto_send_result(fds[1], 0, NULL), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_INT(m.status, 0);
  CHECK(m.text == NULL);
  proto_msg_free(&m);

  /* A long log line is cut to one PIPE_BUF write and says so. */
  size_t big = 3 * PIPE_BUF;
  char *msg = xmalloc(big + 1);
  for (size_t i = 0; i < big; i++)
    msg[i] = (i % 7 == 0) ? '"' : 'a' + (char)(i % 26); /* '"' escapes */
  msg[big] = '\0';
  CHECK_INT(proto_send_log(fds[1], 1, msg), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK(len + 1 <= PIPE_BUF);
  CHECK(len + 1 > PIPE_BUF - 64); /* cut, not emptied */
  size_t tl = m.text ? strlen(m.text) : 0;
  CHECK(tl > 14 && strcmp(m.text + tl - 14, "...[truncated]") == 0);
  CHECK(tl > 14 && strncmp(m.text, msg, tl - 14) == 0);
  proto_msg_free(&m);

  /* Multi-byte characters are not split by the cut. */
  for (size_t i = 0; i + 2 <= big; i += 2)
    memcpy(msg + i, "\xc3\xa9", 2); /* é */
  msg[big - (big % 2)] = '\0';
  CHECK_INT(proto_send_log(fds[1], 1, msg), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  tl = m.text ? strlen(m.text) : 0;
  CHECK(tl > 14 && (tl - 14) % 2 == 0);
  proto_msg_free(&m);

  /* An output value is data: it is never cut. */
  memset(msg, 'v', big);
  msg[big] = '\0';
  CHECK_INT(proto_send_output(fds[1], "blob", msg), 0);
  CHECK_INT(roundtrip_line(fds, &m, &len), 0);
  CHECK_STR(m.value, msg);
  proto_msg_free(&m);
  free(msg);

  close(fds[0]);
  close(fds[1]);
}

static void test_malformed(void) {
  static const char *const bad[] = {
      "",
      "not json",
      "[]",
      "{}",
      "{\"type\":42}",
      "{\"type\":\"nope\"}",
      "{\"type\":\"log\",\"msg\":\"no level\"}",
      "{\"type\":\"log\",\"level\":\"loud\",\"msg\":\"x\"}",
      "{\"type\":\"log\",\"level\":\"info\"}",
      "{\"type\":\"log\",\"level\":\"info\",\"msg\":\"cut off",
      "{\"type\":\"progress\"}",
      "{\"type\":\"progress\",\"fraction\":1.5}",
      "{\"type\":\"progress\",\"fraction\":\"half\"}",
      "{\"type\":\"metric\",\"name\":\"x\",\"value\":1,\"step\":1.5}",
      "{\"type\":\"metric\",\"value\":1,\"step\":1}",
      "{\"type\":\"output\",\"key\":\"k\"}",
      "{\"type\":\"output\",\"key\":\"k\",\"value\":3}",
      "{\"type\":\"result\"}",
      "{\"type\":\"result\",\"status\":\"0\"}",
      "{\"type\":\"heartbeat\"} trailing",
      "{\"type\":\"heartbeat\"}{\"type\":\"heartbeat\"}",
      NULL,
  };
  for (size_t i = 0; bad[i]; i++) {
    proto_msg m;
    int rc = proto_parse(bad[i], strlen(bad[i]), &m);
    if (rc != DR_EPROTO)
      fprintf(stderr, "accepted malformed line: %s\n", bad[i]);
    CHECK_INT(rc, DR_EPROTO);
    CHECK(m.text == NULL && m.value == NULL);
  }

  /* The length is honoured: what follows the line is not part of it. */
  const char *buf = "{\"type\":\"heartbeat\"}GARBAGE";
  proto_msg m;
  CHECK_INT(proto_parse(buf, strlen("{\"type\":\"heartbeat\"}"), &m), 0);
  CHECK_INT(m.type, PROTO_HEARTBEAT);
  proto_msg_free(&m);
  /* A "\r\n" line ending is tolerated. */
  const char *crlf = "{\"type\":\"heartbeat\"}\r";
  CHECK_INT(proto_parse(crlf, strlen(crlf), &m), 0);
  proto_msg_free(&m);
}

static void test_write_errors(void) {
  CHECK_INT(proto_send_heartbeat(-1), DR_EIO);
  int fds[2];
  CHECK_INT(pipe(fds), 0);
  close(fds[0]);
  /* The reader is gone: EPIPE gives DR_EIO (SIGPIPE is ignored in main,
   * as the worker does). */
  CHECK_INT(proto_send_log(fds[1], 1, "nobody listens"), DR_EIO);
  close(fds[1]);
}

/* Concurrent writers. */

#define NTHREADS 4
#define NMSGS 2000

typedef struct writer_arg {
  int fd;
  int id;
} writer_arg;

/* Message i of thread id: mostly short, some longer than PIPE_BUF (cut),
 * some outputs longer than PIPE_BUF (whole, under the lock). */
static void *writer(void *p) {
  writer_arg *a = p;
  char *buf = xmalloc(2 * PIPE_BUF);
  for (int i = 0; i < NMSGS; i++) {
    size_t fill = (i % 10 == 0) ? PIPE_BUF + 100 : (size_t)(i % 300);
    int n = snprintf(buf, 64, "t%d m%d ", a->id, i);
    memset(buf + n, 'a' + a->id, fill);
    buf[n + fill] = '\0';
    int rc = (i % 25 == 0) ? proto_send_output(a->fd, "k", buf)
                           : proto_send_log(a->fd, 1, buf);
    if (rc != 0) {
      fprintf(stderr, "writer %d: send failed at %d\n", a->id, i);
      break;
    }
  }
  free(buf);
  return NULL;
}

typedef struct reader_arg {
  int fd;
  int lines, bad;
  int next[NTHREADS]; /* next message expected from each thread */
} reader_arg;

static void *reader(void *p) {
  reader_arg *r = p;
  FILE *in = fdopen(r->fd, "r"); /* buffered: 8000 lines, not 4M reads */
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while (in && (len = getline(&line, &cap, in)) > 0) {
    proto_msg m;
    r->lines++;
    if (line[len - 1] == '\n')
      line[--len] = '\0';
    int t = -1, i = -1;
    if (proto_parse(line, strlen(line), &m) != 0) {
      r->bad++;
      fprintf(stderr, "not a whole message: %.80s\n", line);
      continue;
    }
    const char *text = m.type == PROTO_OUTPUT ? m.value : m.text;
    if (!text || sscanf(text, "t%d m%d ", &t, &i) != 2 || t < 0 ||
        t >= NTHREADS || i != r->next[t]) {
      r->bad++;
      fprintf(stderr, "unexpected message: %.80s\n", text ? text : "(null)");
    } else {
      /* The filler must be this thread's letter all the way. */
      const char *f = strchr(strchr(text, ' ') + 1, ' ') + 1;
      for (; *f && *f != '.'; f++)
        if (*f != 'a' + t) {
          r->bad++;
          fprintf(stderr, "mixed bytes in: %.80s\n", text);
          break;
        }
      r->next[t]++;
    }
    proto_msg_free(&m);
  }
  free(line);
  if (in)
    fclose(in);
  else
    r->bad++;
  return NULL;
}

static void test_concurrent(void) {
  int fds[2];
  CHECK_INT(pipe(fds), 0);
  reader_arg r = {.fd = fds[0]};
  pthread_t rt, wt[NTHREADS];
  writer_arg wa[NTHREADS];
  CHECK_INT(pthread_create(&rt, NULL, reader, &r), 0);
  for (int i = 0; i < NTHREADS; i++) {
    wa[i].fd = fds[1];
    wa[i].id = i;
    CHECK_INT(pthread_create(&wt[i], NULL, writer, &wa[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++)
    CHECK_INT(pthread_join(wt[i], NULL), 0);
  close(fds[1]);
  CHECK_INT(pthread_join(rt, NULL), 0); /* the reader closed fds[0] */
  CHECK_INT(r.lines, NTHREADS * NMSGS);
  CHECK_INT(r.bad, 0);
  for (int i = 0; i < NTHREADS; i++)
    CHECK_INT(r.next[i], NMSGS);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, NULL);

  test_roundtrip();
  test_malformed();
  test_write_errors();
  test_concurrent();
  TEST_DONE();
}
