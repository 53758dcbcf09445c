/*
 * proto: messages from a worker to the orchestrator, one JSON object per
 * line on a dedicated pipe (fd DAGRUN_PROTO_FD, 3), never on stdout.
 *
 *   {"type":"log","level":"info","msg":"..."}
 *   {"type":"progress","fraction":0.25,"msg":"step 50/200"}   msg optional
 *   {"type":"metric","name":"loss","value":2.31,"step":50}
 *   {"type":"output","key":"path","value":"/runs/.../model"}
 *   {"type":"heartbeat"}
 *   {"type":"result","status":0,"error":"..."}   last message; error optional
 *
 * The other way, dagrun says one thing, and only to a rank started by a
 * launcher, on its socket: "stop\n" (executor.h, worker.c), after the
 * "ok\n" that answered its join.
 *
 * Writers (worker side) are thread-safe: each message is one write(2) of at
 * most PIPE_BUF bytes where possible (long log lines are truncated to fit),
 * so lines from several threads never interleave.
 *
 * Details:
 * - JSON has no NaN or infinity: a non-finite metric value is sent as the
 *   string "NaN", "Infinity" or "-Infinity", and parsed back.
 * - Only texts are cut to fit PIPE_BUF (log msg, progress msg, result
 *   error; they end in "...[truncated]"); an output value is never cut, its
 *   line is written whole under the writers' lock instead.
 * - A progress fraction must be in [0,1]; a metric step and a result status
 *   must be integers. Anything else fails proto_parse.
 * - Writers return DR_EIO for fd < 0 without a system call, and never raise
 *   SIGPIPE themselves: the worker ignores it (EPIPE gives DR_EIO).
 */
#ifndef DAGRUN_PROTO_H
#define DAGRUN_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_FD 3

/* The largest output value (plugin.h): 16 MiB. */
#define PROTO_OUTPUT_MAX (16u << 20)
/* No message line is longer: dagrun drops a longer one rather than hold
 * it, and the writers refuse to send one (DR_EINVAL; an output whose
 * value is mostly bytes JSON escapes can pass 16 MiB and still be too
 * long once escaped). */
#define PROTO_LINE_MAX (PROTO_OUTPUT_MAX + (1u << 20))

typedef enum proto_type {
  PROTO_LOG,
  PROTO_PROGRESS,
  PROTO_METRIC,
  PROTO_OUTPUT,
  PROTO_HEARTBEAT,
  PROTO_RESULT
} proto_type;

/* A parsed message. Strings point into storage owned by the message;
 * release with proto_msg_free. */
typedef struct proto_msg {
  proto_type type;
  int level;     /* LOG: dagrun_log_level */
  char *text;    /* LOG msg, PROGRESS msg (may be NULL), RESULT error
                    (may be NULL), METRIC name, OUTPUT key */
  char *value;   /* OUTPUT value */
  double number; /* PROGRESS fraction, METRIC value */
  int64_t step;  /* METRIC step */
  int status;    /* RESULT status */
} proto_msg;

/* Whether k may name an output: [A-Za-z0-9_]+ (what ${tasks.T.outputs.K}
 * can refer to). Both producers of outputs, the worker and a worker-less
 * exec task (run/execdirect.h), refuse other keys. */
int proto_output_key_valid(const char *k);

/* Parses one line (without the newline). Returns 0 or DR_EPROTO. */
int proto_parse(const char *line, size_t n, proto_msg *m);
void proto_msg_free(proto_msg *m);

/* Worker side: encode and write one message to fd. Return 0 or DR_EIO.
 * Thread-safe. */
int proto_send_log(int fd, int level, const char *msg);
int proto_send_progress(int fd, double fraction, const char *msg);
int proto_send_metric(int fd, const char *name, double value, int64_t step);
int proto_send_output(int fd, const char *key, const char *value);
int proto_send_heartbeat(int fd);
int proto_send_result(int fd, int status, const char *error);

/* One line of a task's metrics.jsonl (run/rundir.h), newline included:
 * {"time":T,"attempt":A,"name":N,"value":V,"step":S}. The scheduler
 * writes the metrics it receives with it, and a worker whose dagrun is
 * gone (worker.h) the metrics it could not send. Caller frees. */
char *proto_metric_line(double time, int attempt, const char *name,
                        double value, int64_t step);

#endif /* DAGRUN_PROTO_H */
