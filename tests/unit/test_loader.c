/*
 * loader: finding stages by name and by path, and refusing files that are
 * not usable plugins with a message that names the file and the reason.
 */
#include "base/util.h"
#include "host/loader.h"
#include "lib/fileio.h"
#include "testlib.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char plugin_dir[PATH_MAX]; /* realpath(TEST_PLUGIN_DIR) */
static char stage_dir[PATH_MAX];  /* realpath(TEST_STAGE_DIR) */

/* loader_open on a file that must be refused: checks rc and message. */
static void refused(const char *path, int want_rc, const char *want_msg) {
  char err[1024] = "";
  loader_plugin *p = (loader_plugin *)1;
  int rc = loader_open(path, &p, err, sizeof(err));
  CHECK_INT(rc, want_rc);
  CHECK(p == NULL);
  CHECK_STR(err, want_msg);
}

static void test_refusals(void) {
  char *abi2 = path_join(plugin_dir, "abi2.so");
  char *want = xasprintf(
      "%s: built for dagrun plugin ABI 2.0, this dagrun supports ABI 1.2 "
      "(rebuild the plugin against this dagrun's <dagrun/plugin.h>)",
      abi2);
  refused(abi2, DR_EABI, want);
  free(want);
  free(abi2);

  char *minor = path_join(plugin_dir, "abi_newer_minor.so");
  want = xasprintf(
      "%s: built for dagrun plugin ABI 1.99, this dagrun supports ABI 1.2 "
      "(rebuild the plugin against this dagrun's <dagrun/plugin.h>)",
      minor);
  refused(minor, DR_EABI, want);
  free(want);
  free(minor);

  char *noentry = path_join(plugin_dir, "noentry.so");
  want = xasprintf("%s: not a dagrun stage plugin: no symbol "
                   "'dagrun_stage_entry' (export it with DAGRUN_EXPORT)",
                   noentry);
  refused(noentry, DR_EPLUGIN, want);
  free(want);
  free(noentry);

  char *missing = path_join(plugin_dir, "missing.so");
  want = xasprintf("%s: no such file", missing);
  refused(missing, DR_EPLUGIN, want);
  free(want);
  free(missing);

  refused(plugin_dir, DR_EPLUGIN,
          (want = xasprintf("%s: not a regular file", plugin_dir)));
  free(want);

  /* A text file named .so: dlopen's reason, the path said once. */
  char tmp[] = "/tmp/test_loader.XXXXXX";
  CHECK(mkdtemp(tmp) != NULL);
  char *notelf = path_join(tmp, "notelf.so");
  const char *text = "This is a text file, not a shared object; it is long "
                     "enough that the dynamic loader reads its header.\n";
  CHECK_INT(fileio_write_atomic(notelf, text, strlen(text), NULL, 0), 0);
  want =
      xasprintf("%s: not a loadable shared object: invalid ELF header", notelf);
  refused(notelf, DR_EPLUGIN, want);
  free(want);
  unlink(notelf);
  free(notelf);
  rmdir(tmp);

  /* The message names the file as the user gave it, relative too; and a
   * bare file name is opened from the current directory, not searched
   * for on the library path. */
  char cwd[PATH_MAX];
  CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
  CHECK_INT(chdir(plugin_dir), 0);
  refused("abi2.so", DR_EABI,
          "abi2.so: built for dagrun plugin ABI 2.0, this dagrun supports "
          "ABI 1.2 (rebuild the plugin against this dagrun's "
          "<dagrun/plugin.h>)");
  char err[1024];
  loader_plugin *p = NULL;
  CHECK_INT(loader_open("flaky.so", &p, err, sizeof(err)), 0);
  loader_close(p);
  CHECK_INT(chdir(cwd), 0);
}

static void test_open_good(void) {
  char err[1024] = "";
  loader_plugin *p = NULL;
  char *flaky = path_join(plugin_dir, "flaky.so");
  CHECK_INT(loader_open(flaky, &p, err, sizeof(err)), 0);
  CHECK(p != NULL);
  if (p) {
    CHECK_STR(p->path, flaky);
    CHECK_STR(p->stage->name, "flaky");
    CHECK_STR(p->stage->params[0].name, "counter_file");
    CHECK_INT(p->stage->params[0].required, 1);
    CHECK_STR(p->stage->params[1].default_value, "2");
  }
  loader_close(p);
  free(flaky);

  char *exec = path_join(stage_dir, "exec.so");
  p = NULL;
  CHECK_INT(loader_open(exec, &p, err, sizeof(err)), 0);
  if (p) {
    CHECK_STR(p->stage->name, "exec");
    CHECK(p->stage->abi_version == DAGRUN_ABI_VERSION);
  }
  loader_close(p);
  free(exec);
  loader_close(NULL); /* a no-op */
}

static int run(dagrun_ctx *ctx, const dagrun_host *h);

/* A descriptor checked in-process: the message loader_check_stage gives. */
static void check_desc(const dagrun_param_spec *params,
                       const dagrun_param_choice *choices, int want_rc,
                       const char *want_msg) {
  dagrun_stage st = {
      DAGRUN_STAGE_HEADER, "s", "1", "", params, run, choices, NULL};
  char err[512] = "";
  CHECK_INT(loader_check_stage(&st, err, sizeof err), want_rc);
  CHECK_STR(err, want_msg);
}
static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  (void)ctx;
  (void)h;
  return 0;
}

static void test_choices(void) {
  char err[1024] = "";
  loader_plugin *p = NULL;

  /* A plugin built for ABI 1.0 loads, and has no choices: its descriptor
   * ends before them, and the pointer that follows it there is not taken
   * for them. */
  char *old = path_join(plugin_dir, "abi_1_0.so");
  CHECK_INT(loader_open(old, &p, err, sizeof err), 0);
  if (p) {
    CHECK(p->stage->abi_version == ((1u << 16) | 0u));
    CHECK(loader_choices(p->stage) == NULL);
    CHECK(loader_param_choices(loader_choices(p->stage), "mode") == NULL);
    CHECK_STR(p->stage->params[0].default_value, "fast");
  }
  loader_close(p);
  free(old);

  /* The train stage's choices, as dagrun check and `dagrun stages` see
   * them. */
  char *train = path_join(stage_dir, "train.so");
  p = NULL;
  CHECK_INT(loader_open(train, &p, err, sizeof err), 0);
  if (p) {
    const char *const *v =
        loader_param_choices(loader_choices(p->stage), "device");
    CHECK(v != NULL);
    sbuf b = {0};
    loader_choices_join(&b, v);
    CHECK_STR(b.s, "auto, cpu, cuda");
    sbuf_free(&b);
    CHECK(loader_param_choices(loader_choices(p->stage), "steps") == NULL);
  }
  loader_close(p);
  free(train);

  /* A default outside its choices: refused, naming file, stage, param. */
  char *bad = path_join(plugin_dir, "bad_choice_default.so");
  char *want = xasprintf("%s: stage 'bad_choice_default' param 'device': its "
                         "default 'gpu' is not one of cpu, cuda, auto",
                         bad);
  refused(bad, DR_EPLUGIN, want);
  free(want);
  free(bad);

  /* Every other mistake a choices array can hold. */
  static const dagrun_param_spec ps[] = {
      {"mode", DAGRUN_PARAM_STRING, "a", 0, NULL},
      {"level", DAGRUN_PARAM_INT, "+2", 0, NULL},
      {"rate", DAGRUN_PARAM_FLOAT, "1", 0, NULL},
      {"free", DAGRUN_PARAM_STRING, NULL, 0, NULL},
      {NULL, 0, NULL, 0, NULL},
  };
  static const char *const ab[] = {"a", "b", NULL};
  static const char *const levels[] = {"1", "2", NULL};
  static const char *const notint[] = {"2", "two", NULL};
  static const char *const none[] = {NULL};
  check_desc(ps, (const dagrun_param_choice[]){{"mode", ab}, {NULL, NULL}}, 0,
             "");
  check_desc(ps, NULL, 0, "");
  /* An INT default is compared as a number: "+2" is 2. A param without a
   * default needs none among its choices. */
  check_desc(ps,
             (const dagrun_param_choice[]){
                 {"level", levels}, {"free", ab}, {NULL, NULL}},
             0, "");
  check_desc(ps, (const dagrun_param_choice[]){{"modes", ab}, {NULL, NULL}},
             DR_EPLUGIN,
             "stage 's' lists choices for param 'modes', which it does not "
             "declare");
  check_desc(
      ps,
      (const dagrun_param_choice[]){{"mode", ab}, {"mode", ab}, {NULL, NULL}},
      DR_EPLUGIN, "stage 's' lists choices for param 'mode' twice");
  check_desc(ps, (const dagrun_param_choice[]){{"rate", levels}, {NULL, NULL}},
             DR_EPLUGIN,
             "stage 's' param 'rate': choices are for string and int params, "
             "not float ones");
  check_desc(ps, (const dagrun_param_choice[]){{"mode", none}, {NULL, NULL}},
             DR_EPLUGIN, "stage 's' param 'mode' has an empty list of choices");
  check_desc(ps, (const dagrun_param_choice[]){{"mode", NULL}, {NULL, NULL}},
             DR_EPLUGIN, "stage 's' param 'mode' has an empty list of choices");
  check_desc(ps, (const dagrun_param_choice[]){{"level", notint}, {NULL, NULL}},
             DR_EPLUGIN,
             "stage 's' param 'level': choice 'two' is not an "
             "integer");
  check_desc(ps, (const dagrun_param_choice[]){{"level", ab}, {NULL, NULL}},
             DR_EPLUGIN,
             "stage 's' param 'level': choice 'a' is not an "
             "integer");

  /* Matching: strings exactly, ints as numbers. */
  CHECK_INT(loader_choice_index(ab, DAGRUN_PARAM_STRING, "b"), 1);
  CHECK_INT(loader_choice_index(ab, DAGRUN_PARAM_STRING, "B"), -1);
  CHECK_INT(loader_choice_index(levels, DAGRUN_PARAM_INT, "+1"), 0);
  CHECK_INT(loader_choice_index(levels, DAGRUN_PARAM_INT, "3"), -1);
  CHECK_INT(loader_choice_index(levels, DAGRUN_PARAM_STRING, "+1"), -1);
}

static int a_check(const dagrun_check_task *t, const char **param, char *err,
                   size_t errlen) {
  (void)t;
  (void)param;
  (void)err;
  (void)errlen;
  return 0;
}

/* The check (ABI 1.2) is read only from a descriptor whose struct_size
 * covers it: one built for 1.1 ends before it. */
static void test_check_member(void) {
  dagrun_stage st = {
      DAGRUN_STAGE_HEADER, "s", "1", "", NULL, run, NULL, a_check};
  CHECK(loader_check(&st) == a_check);
  st.struct_size = (uint32_t)offsetof(dagrun_stage, check);
  CHECK(loader_check(&st) == NULL);
}

static void test_search_path(void) {
  const char *const *dirs = loader_search_path();
  CHECK_STR(dirs[0], plugin_dir);
  CHECK_STR(dirs[1], stage_dir);
  CHECK(dirs[2] == NULL);
  CHECK(loader_search_path() == dirs);
}

static void test_find(void) {
  char err[1024] = "";
  char *path = NULL;

  /* By name: DAGRUN_PLUGIN_PATH first, then the built-in directory. */
  CHECK_INT(loader_find("flaky", NULL, &path, err, sizeof(err)), 0);
  char *want = path_join(plugin_dir, "flaky.so");
  CHECK_STR(path, want);
  free(want);
  free(path);

  CHECK_INT(loader_find("exec", NULL, &path, err, sizeof(err)), 0);
  want = path_join(stage_dir, "exec.so");
  CHECK_STR(path, want);
  free(want);
  free(path);

  /* A typo: where we looked, and the closest name found there. */
  path = (char *)1;
  CHECK_INT(loader_find("flakey", NULL, &path, err, sizeof(err)), DR_ESTAGE);
  CHECK(path == NULL);
  want = xasprintf("unknown stage 'flakey': no flakey.so in %s, %s; did you "
                   "mean 'flaky'?",
                   plugin_dir, stage_dir);
  CHECK_STR(err, want);
  free(want);

  CHECK_INT(loader_find("exc", NULL, &path, err, sizeof(err)), DR_ESTAGE);
  CHECK(strstr(err, "did you mean 'exec'?") != NULL);

  /* Nothing close: no suggestion rather than a wild one. */
  CHECK_INT(loader_find("tokenizer_v9000", NULL, &path, err, sizeof(err)),
            DR_ESTAGE);
  want = xasprintf("unknown stage 'tokenizer_v9000': no tokenizer_v9000.so "
                   "in %s, %s",
                   plugin_dir, stage_dir);
  CHECK_STR(err, want);
  free(want);

  /* By path, relative to the DAG's directory. */
  char *base = path_dirname(plugin_dir);
  CHECK_INT(loader_find("./plugins/flaky.so", base, &path, err, sizeof(err)),
            0);
  want = path_join(plugin_dir, "flaky.so");
  CHECK_STR(path, want);
  free(path);
  CHECK_INT(
      loader_find("plugins/../plugins/flaky.so", base, &path, err, sizeof(err)),
      0);
  CHECK_STR(path, want); /* normalised */
  free(path);
  CHECK_INT(loader_find(want, "/nonexistent", &path, err, sizeof(err)), 0);
  CHECK_STR(path, want); /* absolute: base ignored */
  free(path);
  free(want);

  CHECK_INT(loader_find("./plugins/nothere.so", base, &path, err, sizeof(err)),
            DR_ESTAGE);
  want = xasprintf("stage file not found: ./plugins/nothere.so (looked for "
                   "%s/./plugins/nothere.so)",
                   base);
  CHECK_STR(err, want);
  free(want);
  free(base);

  /* "flaky.so" is a name (no '/'); the user meant the file next to the
   * DAG, so the message says how to name it. */
  CHECK_INT(loader_find("flaky.so", plugin_dir, &path, err, sizeof(err)),
            DR_ESTAGE);
  want = xasprintf("; to use the file %s/flaky.so, write stage: ./flaky.so",
                   plugin_dir);
  CHECK(strstr(err, want) != NULL);
  free(want);

  CHECK_INT(loader_find("", NULL, &path, err, sizeof(err)), DR_ESTAGE);
}

int main(void) {
  /* The ctest environment sets this too; set it here so that running the
   * binary by hand tests the same thing. It must precede the first
   * loader_search_path(), which reads it once. */
  setenv("DAGRUN_PLUGIN_PATH", TEST_PLUGIN_DIR, 1);
  if (!realpath(TEST_PLUGIN_DIR, plugin_dir) ||
      !realpath(TEST_STAGE_DIR, stage_dir)) {
    fprintf(stderr, "test_loader: build the test plugins and stages first\n");
    return 1;
  }
  test_search_path();
  test_refusals();
  test_open_good();
  test_find();
  test_choices();
  test_check_member();
  TEST_DONE();
}
