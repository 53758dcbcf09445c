/*
 * hello: a complete, small dagrun stage plugin, to copy from.
 *
 * It writes "Hello, <name>!" <times> times into greeting.txt in the task's
 * out directory, logs what it does, reports progress, and publishes the
 * file's path as the output `greeting_file`, which downstream tasks read
 * as ${tasks.<task>.outputs.greeting_file}.
 *
 * Build (see docs/writing-a-stage.md):
 *   cc -shared -fPIC $(pkg-config --cflags dagrun-plugin) -o hello.so hello.c
 */
#include <dagrun/plugin.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The params this stage takes. `dagrun check` validates a DAG's `with:`
 * against this table (unknown names, types, required ones) before anything
 * runs, and `dagrun stages` prints it. Defaults are written as YAML text. */
static const dagrun_param_spec params[] = {
    {"name", DAGRUN_PARAM_STRING, "world", 0, "Who to greet"},
    {"times", DAGRUN_PARAM_INT, "1", 0, "How many lines to write (1-1000)"},
    {"greeting", DAGRUN_PARAM_STRING, "Hello", 0, "The word to greet with"},
    {NULL, 0, NULL, 0, NULL}, /* end of the table */
};

/* A param that takes one of a fixed set of values says which (ABI 1.1):
 * `dagrun check` then refuses `greeting: Howdy` at its line and column,
 * before anything runs, and `dagrun stages` lists the choices. run() uses
 * the same array, so the two cannot disagree. */
static const char *const greetings[] = {"Hello", "Hi", "Hey", NULL};
static const dagrun_param_choice choices[] = {
    {"greeting", greetings}, /* param, its values */
    {NULL, NULL},            /* end of the table */
};

/* Called once per attempt, in a worker process of its own: a crash here
 * fails this attempt only. Return 0 for success, or 1..255 after saying
 * why with host->fail(). Never call exit(). */
static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  /* The getters fill in the defaults above, so these cannot fail for
   * declared params; checking costs nothing and guards against typos. */
  const char *name, *greeting;
  int64_t times;
  if (host->param_string(ctx, "name", &name) != 0 ||
      host->param_int(ctx, "times", &times) != 0 ||
      host->param_string(ctx, "greeting", &greeting) != 0) {
    host->fail(ctx, "hello: cannot read params");
    return 2;
  }
  /* dagrun has checked it against greetings already; a plugin still
   * trusts nothing it did not check itself. */
  int known = 0;
  for (size_t i = 0; greetings[i]; i++)
    known |= strcmp(greeting, greetings[i]) == 0;
  if (!known) {
    host->fail(ctx, "hello: greeting must be Hello, Hi or Hey");
    return 2;
  }
  if (times < 1 || times > 1000) {
    host->fail(ctx, "hello: times must be 1 to 1000, got %" PRId64, times);
    return 2;
  }

  /* out/ is kept across attempts (scratch space is DAGRUN_DIR_ATTEMPT).
   * Write under a temporary name and rename, so that a killed attempt
   * never leaves a half-written greeting.txt behind. */
  const char *out = host->dir(ctx, DAGRUN_DIR_OUT);
  char path[4096], tmp[4096];
  snprintf(path, sizeof(path), "%s/greeting.txt", out);
  snprintf(tmp, sizeof(tmp), "%s/.greeting.txt.tmp", out);

  FILE *f = fopen(tmp, "w");
  if (!f) {
    host->fail(ctx, "hello: cannot create %s: %s", tmp, strerror(errno));
    return 1;
  }
  host->log(ctx, DAGRUN_LOG_INFO, "greeting %s %" PRId64 " time(s)", name,
            times);
  for (int64_t i = 0; i < times; i++) {
    /* Long loops poll cancelled(): a timeout or Ctrl-C sets it, and a
     * stage that stops cleanly gets to say so. */
    if (host->cancelled(ctx)) {
      fclose(f);
      remove(tmp);
      host->fail(ctx, "hello: cancelled");
      return 1;
    }
    fprintf(f, "%s, %s!\n", greeting, name);
    /* Progress shows in the live view, and counts as a heartbeat. */
    host->progress(ctx, (double)(i + 1) / (double)times, NULL);
  }
  int write_failed = ferror(f);
  if (fclose(f) != 0) /* a full disk often shows only here */
    write_failed = 1;
  if (write_failed || rename(tmp, path) != 0) {
    host->fail(ctx, "hello: cannot write %s: %s", path, strerror(errno));
    remove(tmp);
    return 1;
  }

  /* A metric goes to <task>/metrics.jsonl; an output to downstream. */
  host->metric(ctx, "lines", (double)times, 0);
  if (host->output(ctx, "greeting_file", path) != 0) {
    host->fail(ctx, "hello: output refused");
    return 1;
  }
  /* Plain stdout works too: it goes to the attempt's log file. */
  printf("wrote %s\n", path);
  return 0;
}

/* The descriptor: DAGRUN_STAGE_HEADER records the struct size and the ABI
 * version this file was compiled against, so that dagrun can refuse it
 * with a clear message if the two ever stop matching. */
static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "hello",                                  /* name, [a-z0-9_-]+ */
    "1.0.0",                                  /* your version */
    "Writes a greeting to out/greeting.txt.", /* for `dagrun stages` */
    params,
    run,
    choices, /* ABI 1.1: params with a fixed set of values, or NULL */
    NULL,    /* ABI 1.2: no check */
};

/* The one exported symbol (pkg-config's flags hide everything else). */
DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
