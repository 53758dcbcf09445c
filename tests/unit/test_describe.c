/*
 * describe: a plugin described by the helper (dagrun-worker __describe)
 * is the descriptor loader_open gives in-process, member for member; a
 * refusal keeps the loader's code and words; and every way a helper can
 * go wrong (missing, exits, dies by a signal, hangs, leaves a child
 * holding its stdout, writes something that is not a description, or
 * too much) is that file's error, in time, with the helper's group gone.
 */
#include "base/util.h"
#include "host/describe.h"
#include "host/loader.h"
#include "lib/clock.h"
#include "testlib.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char plugin_dir[PATH_MAX]; /* realpath(TEST_PLUGIN_DIR) */
static char stage_dir[PATH_MAX];  /* realpath(TEST_STAGE_DIR) */

static int same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Every member dagrun reads of a descriptor, equal in a and b. */
static void same_stage(const dagrun_stage *a, const dagrun_stage *b) {
  CHECK(a->struct_size == b->struct_size);
  CHECK(a->abi_version == b->abi_version);
  CHECK_STR(a->name, b->name);
  CHECK(same_str(a->version, b->version));
  CHECK(same_str(a->summary, b->summary));
  CHECK((a->params == NULL) == (b->params == NULL));
  size_t i = 0;
  for (; a->params && a->params[i].name && b->params[i].name; i++) {
    const dagrun_param_spec *p = &a->params[i], *q = &b->params[i];
    CHECK_STR(p->name, q->name);
    CHECK_INT(p->type, q->type);
    CHECK(same_str(p->default_value, q->default_value));
    CHECK_INT(p->required != 0, q->required != 0);
    CHECK(same_str(p->help, q->help));
  }
  CHECK(!a->params || (!a->params[i].name && !b->params[i].name));
  const dagrun_param_choice *ca = loader_choices(a), *cb = loader_choices(b);
  CHECK((ca == NULL) == (cb == NULL));
  for (i = 0; ca && cb && ca[i].param && cb[i].param; i++) {
    CHECK_STR(ca[i].param, cb[i].param);
    sbuf x = {0}, y = {0};
    loader_choices_join(&x, ca[i].values);
    loader_choices_join(&y, cb[i].values);
    CHECK_STR(x.s, y.s);
    sbuf_free(&x);
    sbuf_free(&y);
  }
  CHECK(!ca || (!ca[i].param && !cb[i].param));
  CHECK(b->run == NULL); /* only a worker runs a stage */
}

static void test_same_as_loader(void) {
  /* train: choices; abi_1_0: an older, smaller descriptor; echo_params:
   * every param type; exec: the built-in dagrun runs itself. */
  char *paths[] = {
      path_join(stage_dir, "train.so"), path_join(plugin_dir, "abi_1_0.so"),
      path_join(plugin_dir, "echo_params.so"), path_join(stage_dir, "exec.so")};
  size_t n = sizeof paths / sizeof *paths;
  describe_result res[4];
  describe_files((const char *const *)paths, n, res);
  for (size_t i = 0; i < n; i++) {
    char err[1024];
    loader_plugin *p = NULL;
    CHECK_INT(loader_open(paths[i], &p, err, sizeof err), 0);
    CHECK_INT(res[i].rc, 0);
    CHECK(res[i].error == NULL);
    if (p && res[i].plugin) {
      same_stage(p->stage, res[i].plugin->stage);
      CHECK_STR(res[i].plugin->path, paths[i]);
      CHECK(res[i].plugin->handle == NULL);
    }
    /* A described exec is the built-in one, as the executor asks. */
    if (i == 3)
      CHECK(res[i].plugin && loader_builtin(res[i].plugin, "exec"));
    loader_close(p);
    loader_close(res[i].plugin);
    free(paths[i]);
  }
}

/* The loader's refusals, through the helper: same code, same words. */
static void test_refusals(void) {
  char *paths[] = {path_join(plugin_dir, "abi2.so"),
                   path_join(plugin_dir, "noentry.so"),
                   path_join(plugin_dir, "no-such.so")};
  describe_result res[3];
  describe_files((const char *const *)paths, 3, res);
  for (size_t i = 0; i < 3; i++) {
    char err[1024];
    loader_plugin *p = NULL;
    int rc = loader_open(paths[i], &p, err, sizeof err);
    CHECK(rc != 0);
    CHECK_INT(res[i].rc, rc);
    CHECK(res[i].plugin == NULL);
    CHECK_STR(res[i].error, err);
    free(res[i].error);
    free(paths[i]);
  }
}

/* More files than DESCRIBE_PARALLEL: each gets its own description. */
static void test_many(void) {
  enum { N = 3 * DESCRIBE_PARALLEL + 1 };
  char *a = path_join(plugin_dir, "echo_params.so");
  char *b = path_join(plugin_dir, "abi2.so");
  const char *paths[N];
  for (size_t i = 0; i < N; i++)
    paths[i] = i % 3 == 2 ? b : a;
  describe_result res[N];
  describe_files(paths, N, res);
  for (size_t i = 0; i < N; i++) {
    CHECK_INT(res[i].rc, i % 3 == 2 ? DR_EABI : 0);
    if (res[i].plugin)
      CHECK_STR(res[i].plugin->stage->name, "echo_params");
    loader_close(res[i].plugin);
    free(res[i].error);
  }
  free(a);
  free(b);
}

/* Files that share a helper (as the built-in stages do) with bad ones
 * among them: each bad one is named with what happened to it, described
 * by a helper of its own, and the good ones after it are described too. */
static void test_shared(void) {
  char ctor[PATH_MAX + 32];
  snprintf(ctor, sizeof ctor, "%s/../plugins-ctor", plugin_dir);
  char *paths[] = {
      path_join(plugin_dir, "echo_params.so"), path_join(ctor, "ctor_segv.so"),
      path_join(plugin_dir, "abi_1_0.so"),     path_join(ctor, "ctor_exit.so"),
      path_join(plugin_dir, "abi2.so"),        path_join(ctor, "ctor_hang.so"),
      path_join(stage_dir, "exec.so")};
  enum { N = sizeof paths / sizeof *paths };
  int shared[N] = {1, 1, 1, 1, 1, 1, 1};
  char helper[PATH_MAX + 32];
  snprintf(helper, sizeof helper, "%s/dagrun-worker", stage_dir);
  char *slash = strstr(helper, "/stages/dagrun-worker");
  if (slash)
    memmove(slash, "/dagrun-worker", strlen("/dagrun-worker") + 1);
  describe_result res[N];
  double t0 = clock_monotonic();
  describe_files_with(helper, 0.5, (const char *const *)paths, shared, N, res);
  double secs = clock_monotonic() - t0;
  /* The crash ended the shared helper before the hang: the hang is met
   * alone, once. */
  CHECK(secs >= 0.5 && secs < 3);
  const char *ok[] = {"echo_params", NULL, "abi_1_0", NULL, NULL, NULL, "exec"};
  for (size_t i = 0; i < N; i++) {
    if (ok[i]) {
      CHECK_INT(res[i].rc, 0);
      CHECK(res[i].plugin && strcmp(res[i].plugin->stage->name, ok[i]) == 0);
    } else {
      CHECK(res[i].rc != 0 && res[i].plugin == NULL);
      CHECK(res[i].error &&
            strncmp(res[i].error, paths[i], strlen(paths[i])) == 0);
    }
  }
  CHECK(res[1].error && strstr(res[1].error, "crashed while being loaded "
                                             "(SIGSEGV"));
  CHECK(res[3].error && strstr(res[3].error, "exited with status 0"));
  CHECK_INT(res[4].rc, DR_EABI);
  CHECK(res[5].error && strstr(res[5].error, "within 0.5 s (killed"));
  for (size_t i = 0; i < N; i++) {
    loader_close(res[i].plugin);
    free(res[i].error);
  }

  /* A hang met by the shared helper: the limit twice (shared, then
   * alone), and the file after it described. */
  const char *two[] = {paths[5], paths[0]};
  t0 = clock_monotonic();
  describe_files_with(helper, 0.5, two, shared, 2, res);
  secs = clock_monotonic() - t0;
  CHECK(secs >= 1.0 && secs < 3);
  CHECK(res[0].error && strstr(res[0].error, "within 0.5 s (killed"));
  CHECK_INT(res[1].rc, 0);
  for (size_t i = 0; i < 2; i++) {
    loader_close(res[i].plugin);
    free(res[i].error);
  }
  for (size_t i = 0; i < N; i++)
    free(paths[i]);
}

/* A stand-in helper: a shell script that does what body says. */
static char *fake_helper(const char *name, const char *body) {
  char *path = xstrdup(test_path("%s", name));
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
  }
  chmod(path, 0755);
  return path;
}

/* One file described by helper with limit: its error (caller frees), the
 * code in *rc, the seconds it took in *secs. */
static char *describe_one(const char *helper, double limit, int *rc,
                          double *secs) {
  const char *paths[] = {"/some/stage.so"};
  describe_result r;
  double t0 = clock_monotonic();
  describe_files_with(helper, limit, paths, NULL, 1, &r);
  *secs = clock_monotonic() - t0;
  *rc = r.rc;
  CHECK(r.plugin == NULL);
  loader_close(r.plugin);
  return r.error;
}

static void helper_says(const char *name, const char *body, int want_rc,
                        const char *want) {
  char *helper = fake_helper(name, body);
  int rc;
  double secs;
  char *err = describe_one(helper, 5, &rc, &secs);
  CHECK_INT(rc, want_rc);
  CHECK_STR(err, want);
  CHECK(secs < 4);
  free(err);
  free(helper);
}

static void test_helper_faults(void) {
  int rc;
  double secs;
  char *err = describe_one("/no/such/helper", 5, &rc, &secs);
  CHECK_INT(rc, DR_ESPAWN);
  CHECK_STR(err, "/some/stage.so: cannot be described: cannot start "
                 "/no/such/helper: No such file or directory");
  free(err);

  helper_says("exits3", "exit 3", DR_EPLUGIN,
              "/some/stage.so: exited with status 3 while being loaded, "
              "before describing itself (a plugin must not call exit())");
  helper_says("segv", "kill -SEGV $$", DR_EPLUGIN,
              "/some/stage.so: crashed while being loaded (SIGSEGV in its "
              "constructor or dagrun_stage_entry())");
  helper_says("garbage", "echo garbage", DR_EPLUGIN,
              "/some/stage.so: cannot be described: its description is "
              "not readable (not a JSON object)");
  helper_says("wrongtype", "echo '{\"struct_size\": 64, \"name\": 3}'",
              DR_EPLUGIN,
              "/some/stage.so: cannot be described: its description is "
              "not readable (a member is missing or of the wrong type)");
  char *big = xasprintf("/some/stage.so: cannot be described: its "
                        "description is not readable (more than %u bytes)",
                        DESCRIBE_MAX_BYTES);
  helper_says("big", "head -c 17000000 /dev/zero; sleep 30", DR_EPLUGIN, big);
  free(big);

  /* A helper that hangs, and one that exits but leaves a child holding
   * its stdout: both cut at the limit, their group killed. */
  const char *hangs[] = {"echo $$ > \"$0.pid\"; exec sleep 30",
                         "sleep 30 & echo $! > \"$0.pid\"; exit 0"};
  for (size_t i = 0; i < 2; i++) {
    char *helper = fake_helper(i ? "leaves" : "hangs", hangs[i]);
    err = describe_one(helper, 0.3, &rc, &secs);
    CHECK_INT(rc, DR_EPLUGIN);
    CHECK_STR(err, "/some/stage.so: did not describe itself within 0.3 s "
                   "(killed: its constructor or dagrun_stage_entry() "
                   "hangs?; DAGRUN_DESCRIBE_TIMEOUT sets the limit)");
    CHECK(secs >= 0.3 && secs < 2);
    char *pidfile = xasprintf("%s.pid", helper);
    FILE *f = fopen(pidfile, "r");
    int pid = 0;
    CHECK(f && fscanf(f, "%d", &pid) == 1);
    if (f)
      fclose(f);
    /* The sleep of "leaves" is reparented, so it may stay a zombie for
     * a moment: alive means still running. */
    for (int k = 0; k < 100 && pid > 0 && proc_start_time(pid) > 0; k++) {
      char st[64];
      snprintf(st, sizeof st, "/proc/%d/stat", pid);
      FILE *s = fopen(st, "r");
      char state = 'Z';
      if (s) {
        (void)!fscanf(s, "%*d %*s %c", &state);
        fclose(s);
      }
      if (state == 'Z')
        break;
      usleep(10000);
      if (k == 99)
        CHECK(!"the helper's group outlived its limit");
    }
    free(pidfile);
    free(err);
    free(helper);
  }
}

int main(void) {
  setenv("DAGRUN_PLUGIN_PATH", TEST_PLUGIN_DIR, 1);
  unsetenv("DAGRUN_DESCRIBE_TIMEOUT");
  if (!realpath(TEST_PLUGIN_DIR, plugin_dir) ||
      !realpath(TEST_STAGE_DIR, stage_dir)) {
    fprintf(stderr, "test_describe: build the test plugins and stages\n");
    return 1;
  }
  if (test_tmpdir_make("describe") != 0)
    return 1;
  test_same_as_loader();
  test_refusals();
  test_many();
  test_shared();
  test_helper_faults();
  int failed = test_failures_;
  if (!failed)
    test_tmpdir_remove();
  TEST_DONE();
}
