/*
 * The models/ registry: a promoted checkpoint is a verified copy with its
 * tokenizer and a promotion.json that says where it came from; list order
 * and seq follow promotions; latest and best point at the newest and the
 * lowest loss; retention keeps exactly the keep_last newest and the
 * keep_best lowest-loss entries (never one without a loss as best); a
 * corrupt source, a missing tokenizer, a name already there and a copy
 * past the file size limit are refused and leave the registry as it was;
 * a stale temporary goes with the next promotion.
 */
#include "common/registry.h"

#include "ckpt/ckpt.h"
#include "lib/fileio.h"
#include "lib/sha256.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p */
static int make_dirs(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

#include "testlib.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

static char tok_path[600];

static int exists(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0;
}

/* A checkpoint <top>/ckpts-<tag>/step-NNNNNNNN (model.safetensors of 5000
 * bytes and optim.bin of 700, both depending on step and tag) into path;
 * 0 or -1. */
static int make_ckpt(const char *tag, int64_t step, char *path, size_t len) {
  char err[512] = "";
  ckpt_writer *w = NULL;
  if (ckpt_begin(test_path("ckpts-%s", tag), step, &w, err, sizeof err) != 0) {
    fprintf(stderr, "ckpt_begin: %s\n", err);
    return -1;
  }
  static unsigned char model[5000], optim[700];
  for (size_t i = 0; i < sizeof model; i++)
    model[i] = (unsigned char)(i * 7 + (size_t)step + (size_t)tag[0]);
  for (size_t i = 0; i < sizeof optim; i++)
    optim[i] = (unsigned char)(i * 13 + (size_t)step);
  if (ckpt_add_file(w, "model.safetensors", model, sizeof model, err,
                    sizeof err) != 0 ||
      ckpt_add_file(w, "optim.bin", optim, sizeof optim, err, sizeof err) !=
          0 ||
      ckpt_commit(w, "{\"config\": {\"model\": \"test\"}}", path, len, err,
                  sizeof err) != 0) {
    fprintf(stderr, "checkpoint %lld: %s\n", (long long)step, err);
    return -1;
  }
  return 0;
}

/* Promotes a fresh checkpoint of run/step with loss into root: rc, with
 * the entry in *e and the error in err. */
static int promote(const char *root, const char *run, int64_t step, double loss,
                   registry_entry *e, char *err, size_t errlen) {
  char ck[1024];
  if (make_ckpt(run, step, ck, sizeof ck) != 0)
    return -2;
  registry_promotion p = {.checkpoint = ck,
                          .tokenizer = tok_path,
                          .dag = "testdag",
                          .run = run,
                          .task = "checkpoint",
                          .val_loss = loss,
                          .perplexity = isfinite(loss) ? exp(loss) : NAN,
                          .accuracy = isfinite(loss) ? 0.5 : NAN,
                          .validation_json = NULL};
  return registry_promote(root, &p, e, err, errlen);
}

static cJSON *read_json(const char *path) {
  char err[512];
  char *text = fileio_read_all(path, NULL, err, sizeof err);
  cJSON *o = text ? cJSON_Parse(text) : NULL;
  free(text);
  return o;
}

/* The name a link in root points at, or "" when there is no link. */
static const char *link_of(const char *root, const char *link) {
  static char buf[4][512];
  static int k;
  char *b = buf[k++ % 4];
  char *p = fileio_join(root, link);
  ssize_t n = readlink(p, b, 511);
  free(p);
  b[n > 0 ? n : 0] = '\0';
  return b;
}

/* Every name under root, sorted, with the size of each file beneath, as
 * one string: equal before and after means nothing was written. */
static char *snapshot(const char *root) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "cd '%s' 2>/dev/null && find . -printf '%%p %%y %%s %%l\\n' | "
           "sort",
           root);
  FILE *f = popen(cmd, "r");
  size_t cap = 1 << 16, n = 0;
  char *s = calloc(cap, 1);
  if (f) {
    n = fread(s, 1, cap - 1, f);
    pclose(f);
  }
  s[n] = '\0';
  return s;
}

static int has_temporaries(const char *root) {
  DIR *d = opendir(root);
  int found = 0;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL)
    if (strncmp(de->d_name, ".tmp-", 5) == 0)
      found = 1;
  if (d)
    closedir(d);
  return found;
}

static void test_default_root(void) {
  setenv("DAGRUN_MODELS_DIR", "/srv/models", 1);
  char *r = registry_default_root("/x/runs/mydag/run-1", "mydag");
  CHECK_STR(r, "/srv/models/mydag");
  free(r);
  unsetenv("DAGRUN_MODELS_DIR");
  /* A real runs directory: its parent, resolved. */
  CHECK_INT(make_dirs(test_path("area/runs/mydag/run-1")), 0);
  char real[PATH_MAX], want[PATH_MAX + 64];
  CHECK(realpath(test_path("area"), real) != NULL);
  snprintf(want, sizeof want, "%s/models/mydag", real);
  r = registry_default_root(test_path("area/runs/mydag/run-1/"), "mydag");
  CHECK_STR(r, want);
  free(r);
  /* One that does not exist (yet): said literally. */
  r = registry_default_root("some/runs/mydag/run-1", "mydag");
  CHECK_STR(r, "some/runs/../models/mydag");
  free(r);
  /* An empty DAGRUN_MODELS_DIR is not set. */
  setenv("DAGRUN_MODELS_DIR", "", 1);
  r = registry_default_root("some/runs/mydag/run-1", "mydag");
  CHECK_STR(r, "some/runs/../models/mydag");
  free(r);
  unsetenv("DAGRUN_MODELS_DIR");
}

static void test_promote(void) {
  const char *root = test_path("reg-one");
  char err[2048] = "";
  registry_entry *v = NULL;
  size_t n = 99;
  /* A registry that does not exist is empty. */
  CHECK_INT(registry_list(root, &v, &n, err, sizeof err), 0);
  CHECK_INT(n, 0);
  CHECK(v == NULL);

  char ck[1024];
  CHECK_INT(make_ckpt("runA", 100, ck, sizeof ck), 0);
  const char *validation =
      "{\"val_loss\": 2.5, \"perplexity\": 12.18, \"accuracy\": 0.41, "
      "\"tokens\": 4096, \"checkpoint\": \"/somewhere\"}";
  registry_promotion p = {.checkpoint = ck,
                          .tokenizer = tok_path,
                          .dag = "testdag",
                          .run = "runA",
                          .task = "promote",
                          .val_loss = 2.5,
                          .perplexity = 12.18,
                          .accuracy = 0.41,
                          .validation_json = validation};
  registry_entry e;
  memset(&e, 0, sizeof e);
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), 0);
  CHECK_STR(e.name, "runA-step-00000100");
  CHECK_STR(e.path, test_path("reg-one/runA-step-00000100"));
  CHECK_INT(e.seq, 1);
  CHECK_INT(e.step, 100);
  CHECK_NEAR(e.val_loss, 2.5, 0);
  CHECK_NEAR(e.perplexity, 12.18, 1e-12);
  CHECK_NEAR(e.accuracy, 0.41, 1e-12);
  CHECK_STR(e.dag, "testdag");
  CHECK_STR(e.run, "runA");

  /* The copy is a checkpoint that verifies, with the same bytes, plus
   * the tokenizer and promotion.json. */
  CHECK_INT(ckpt_verify(e.path, err, sizeof err), 0);
  const char *files[] = {"model.safetensors", "optim.bin", "manifest.json",
                         "tokenizer.json", "promotion.json"};
  for (size_t i = 0; i < 5; i++)
    CHECK(exists(test_path("reg-one/runA-step-00000100/%s", files[i])));
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cmp -s '%s/model.safetensors' '%s'", ck,
           test_path("reg-one/runA-step-00000100/model.safetensors"));
  CHECK_INT(system(cmd), 0);
  snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", tok_path,
           test_path("reg-one/runA-step-00000100/tokenizer.json"));
  CHECK_INT(system(cmd), 0);

  cJSON *o = read_json(test_path("reg-one/runA-step-00000100/promotion.json"));
  CHECK(cJSON_IsObject(o));
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "format")),
            "dagrun-model");
  CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "version")), 1);
  CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "seq")), 1);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")),
            "runA-step-00000100");
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "dag")), "testdag");
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "run")), "runA");
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "task")), "promote");
  CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "step")), 100);
  char real[PATH_MAX];
  CHECK(realpath(ck, real) != NULL);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "source")), real);
  const char *when =
      cJSON_GetStringValue(cJSON_GetObjectItem(o, "promoted_at"));
  CHECK(when && strlen(when) == 20 && when[4] == '-' && when[10] == 'T' &&
        when[19] == 'Z');
  CHECK_NEAR(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "val_loss")), 2.5, 0);
  CHECK_NEAR(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "accuracy")), 0.41,
             1e-12);
  char sha[65];
  CHECK_INT(sha256_file(tok_path, sha), 0);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "tokenizer_sha256")),
            sha);
  const cJSON *val = cJSON_GetObjectItem(o, "validation");
  CHECK(cJSON_IsObject(val));
  CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(val, "tokens")), 4096);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(val, "checkpoint")),
            "/somewhere");
  cJSON_Delete(o);
  CHECK_STR(link_of(root, "latest"), "runA-step-00000100");
  CHECK_STR(link_of(root, "best"), "runA-step-00000100");

  /* Not validated: null numbers and validation; newest, but not best. */
  CHECK_INT(promote(root, "runB", 50, NAN, &e, err, sizeof err), 0);
  CHECK_INT(e.seq, 2);
  CHECK(isnan(e.val_loss) && isnan(e.perplexity) && isnan(e.accuracy));
  o = read_json(test_path("reg-one/runB-step-00000050/promotion.json"));
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "val_loss")));
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "perplexity")));
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "accuracy")));
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "validation")));
  cJSON_Delete(o);
  CHECK_STR(link_of(root, "latest"), "runB-step-00000050");
  CHECK_STR(link_of(root, "best"), "runA-step-00000100");
  /* Reading through the link reaches the model. */
  CHECK(exists(test_path("reg-one/latest/model.safetensors")));

  /* A better one becomes best; list is by seq, whatever the names. */
  CHECK_INT(promote(root, "a-early-name", 7, 1.5, &e, err, sizeof err), 0);
  CHECK_STR(link_of(root, "best"), "a-early-name-step-00000007");
  CHECK_INT(registry_list(root, &v, &n, err, sizeof err), 0);
  CHECK_INT(n, 3);
  if (n == 3) {
    CHECK_STR(v[0].name, "runA-step-00000100");
    CHECK_STR(v[1].name, "runB-step-00000050");
    CHECK_STR(v[2].name, "a-early-name-step-00000007");
    CHECK_INT(v[2].seq, 3);
  }
  free(v);

  /* A directory that is not an entry is neither listed nor removed. */
  CHECK_INT(mkdir(test_path("reg-one/notes"), 0755), 0);
  CHECK_INT(registry_list(root, &v, &n, err, sizeof err), 0);
  CHECK_INT(n, 3);
  free(v);
  CHECK_INT(registry_retain(root, 1, 0, NULL, NULL, err, sizeof err), 2);
  CHECK(exists(test_path("reg-one/notes")));
}

/* on_removed: the names, one a line. */
static void note_removed(void *arg, const registry_entry *e) {
  char *s = arg;
  strcat(s, e->name);
  strcat(s, "\n");
}

static void test_retention(void) {
  const char *root = test_path("reg-ret");
  char err[2048] = "", removed[4096] = "";
  const double loss[6] = {5, 3, 4, 2.5, 6, 7};
  registry_entry e;
  for (int i = 0; i < 6; i++) {
    CHECK_INT(promote(root, "r", 100 * (i + 1), loss[i], &e, err, sizeof err),
              0);
    CHECK_INT(e.seq, i + 1);
  }
  /* keep_last 2: steps 500 and 600; keep_best 2: 2.5 (400) and 3 (200). */
  CHECK_INT(registry_retain(root, 2, 2, note_removed, removed, err, sizeof err),
            2);
  CHECK_STR(removed, "r-step-00000100\nr-step-00000300\n");
  registry_entry *v = NULL;
  size_t n = 0;
  CHECK_INT(registry_list(root, &v, &n, err, sizeof err), 0);
  CHECK_INT(n, 4);
  const char *want[4] = {"r-step-00000200", "r-step-00000400",
                         "r-step-00000500", "r-step-00000600"};
  for (size_t i = 0; i < n && i < 4; i++)
    CHECK_STR(v[i].name, want[i]);
  free(v);
  CHECK(!exists(test_path("reg-ret/r-step-00000100")));
  CHECK(!exists(test_path("reg-ret/r-step-00000300")));
  CHECK(!has_temporaries(root));
  CHECK_STR(link_of(root, "latest"), "r-step-00000600");
  CHECK_STR(link_of(root, "best"), "r-step-00000400");

  /* Again: nothing more to remove. */
  removed[0] = '\0';
  CHECK_INT(registry_retain(root, 2, 2, note_removed, removed, err, sizeof err),
            0);
  CHECK_STR(removed, "");

  /* keep_best 0, keep_last 1: only the newest; best is the best left. */
  CHECK_INT(registry_retain(root, 1, 0, note_removed, removed, err, sizeof err),
            3);
  CHECK_STR(link_of(root, "latest"), "r-step-00000600");
  CHECK_STR(link_of(root, "best"), "r-step-00000600");

  /* Bad arguments. */
  CHECK_INT(registry_retain(root, 0, 1, NULL, NULL, err, sizeof err), -1);
  CHECK(strstr(err, "keep_last") != NULL);
  CHECK_INT(registry_retain(root, 1, -1, NULL, NULL, err, sizeof err), -1);
  /* No registry at all: nothing removed, nothing created. */
  CHECK_INT(
      registry_retain(test_path("reg-none"), 1, 1, NULL, NULL, err, sizeof err),
      0);
  CHECK(!exists(test_path("reg-none")));
}

static void test_nan_never_best(void) {
  const char *root = test_path("reg-nan");
  char err[2048] = "", removed[4096] = "";
  registry_entry e;
  CHECK_INT(promote(root, "n", 1, NAN, &e, err, sizeof err), 0);
  CHECK_INT(promote(root, "n", 2, NAN, &e, err, sizeof err), 0);
  /* Nothing validated: no best link. */
  CHECK_STR(link_of(root, "latest"), "n-step-00000002");
  CHECK_STR(link_of(root, "best"), "");
  CHECK(!exists(test_path("reg-nan/best")));
  CHECK_INT(promote(root, "n", 3, 9.0, &e, err, sizeof err), 0);
  CHECK_INT(promote(root, "n", 4, NAN, &e, err, sizeof err), 0);
  CHECK_INT(promote(root, "n", 5, NAN, &e, err, sizeof err), 0);
  CHECK_STR(link_of(root, "best"), "n-step-00000003");
  /* keep_best 2 with one validated entry: the NAN ones do not fill the
   * second place. */
  CHECK_INT(registry_retain(root, 1, 2, note_removed, removed, err, sizeof err),
            3);
  CHECK_STR(removed, "n-step-00000001\nn-step-00000002\nn-step-00000004\n");
  CHECK_STR(link_of(root, "latest"), "n-step-00000005");
  CHECK_STR(link_of(root, "best"), "n-step-00000003");
  /* keep_best 0: the validated one goes, and best with it. */
  CHECK_INT(registry_retain(root, 1, 0, NULL, NULL, err, sizeof err), 1);
  CHECK_STR(link_of(root, "best"), "");
  CHECK(!exists(test_path("reg-nan/best")));
}

static void test_refusals(void) {
  const char *root = test_path("reg-refuse");
  char err[2048] = "";
  registry_entry e;
  CHECK_INT(promote(root, "ok", 10, 3.0, &e, err, sizeof err), 0);
  char *before = snapshot(root);

  /* A corrupt source: one flipped byte in model.safetensors. */
  char ck[1024];
  CHECK_INT(make_ckpt("bad", 20, ck, sizeof ck), 0);
  char *model = fileio_join(ck, "model.safetensors");
  int fd = open(model, O_RDWR);
  unsigned char b = 0;
  CHECK(fd >= 0 && pread(fd, &b, 1, 1234) == 1);
  b ^= 0x40;
  CHECK(pwrite(fd, &b, 1, 1234) == 1);
  close(fd);
  free(model);
  registry_promotion p = {.checkpoint = ck,
                          .tokenizer = tok_path,
                          .dag = "d",
                          .run = "bad",
                          .task = "t",
                          .val_loss = 1.0,
                          .perplexity = NAN,
                          .accuracy = NAN};
  err[0] = '\0';
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), -1);
  fprintf(stderr, "(as expected) %s\n", err);
  CHECK(strstr(err, "model.safetensors") != NULL);
  CHECK(strstr(err, "sha256 mismatch") != NULL);
  CHECK(strstr(err, ck) != NULL); /* the source, not a copy of it */
  char *after = snapshot(root);
  CHECK_STR(after, before);
  free(after);
  /* Into a registry not made yet: it is still not made. */
  CHECK_INT(registry_promote(test_path("reg-never"), &p, &e, err, sizeof err),
            -1);
  CHECK(!exists(test_path("reg-never")));

  /* A truncated one: the same. */
  CHECK_INT(make_ckpt("trunc", 30, ck, sizeof ck), 0);
  model = fileio_join(ck, "optim.bin");
  CHECK_INT(truncate(model, 100), 0);
  free(model);
  p.checkpoint = ck;
  p.run = "trunc";
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), -1);
  CHECK(strstr(err, "optim.bin: truncated") != NULL);
  after = snapshot(root);
  CHECK_STR(after, before);
  free(after);

  /* A missing tokenizer: named, nothing written. */
  CHECK_INT(make_ckpt("notok", 40, ck, sizeof ck), 0);
  p.checkpoint = ck;
  p.run = "notok";
  p.tokenizer = test_path("no-such-tokenizer.json");
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), -1);
  CHECK(strstr(err, "no-such-tokenizer.json") != NULL);
  after = snapshot(root);
  CHECK_STR(after, before);
  free(after);
  p.tokenizer = tok_path;

  /* Validation metrics that are not a JSON object. */
  p.validation_json = "[1, 2]";
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), -1);
  CHECK(strstr(err, "not a JSON object") != NULL);
  p.validation_json = NULL;

  /* A run id that would leave the registry. */
  p.run = "../escape";
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), -1);
  after = snapshot(root);
  CHECK_STR(after, before);
  free(after);

  /* The same name twice: refused, the first one untouched. */
  CHECK_INT(make_ckpt("ok", 10, ck, sizeof ck), 0); /* same bytes again */
  p.checkpoint = ck;
  p.run = "ok";
  p.val_loss = 0.1;
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), -1);
  CHECK(strstr(err, "ok-step-00000010 is already in the registry") != NULL);
  after = snapshot(root);
  CHECK_STR(after, before);
  free(after);
  CHECK_STR(link_of(root, "best"), "ok-step-00000010");

  /* A stale temporary (an interrupted promotion) goes with the next. */
  CHECK_INT(mkdir(test_path("reg-refuse/.tmp-x"), 0755), 0);
  CHECK_INT(fileio_write_durable(
                test_path("reg-refuse/.tmp-x/model.safetensors"), "half", 4),
            0);
  registry_entry *v = NULL;
  size_t n = 0;
  CHECK_INT(registry_list(root, &v, &n, err, sizeof err), 0);
  CHECK_INT(n, 1); /* not an entry */
  free(v);
  CHECK_INT(promote(root, "next", 11, 4.0, &e, err, sizeof err), 0);
  CHECK(!exists(test_path("reg-refuse/.tmp-x")));
  CHECK(!has_temporaries(root));
  free(before);
}

/* A copy that fails half-way (the file size limit, as `ulimit -f`): the
 * promotion says so, and no entry or temporary is left. */
static void test_copy_fails(void) {
  const char *root = test_path("reg-fsize");
  char err[2048] = "";
  registry_entry e;
  CHECK_INT(promote(root, "first", 1, 2.0, &e, err, sizeof err), 0);
  char ck[1024];
  CHECK_INT(make_ckpt("big", 2, ck, sizeof ck), 0);
  char *before = snapshot(root);
  int pipefd[2];
  CHECK_INT(pipe(pipefd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    signal(SIGXFSZ, SIG_IGN);
    /* model.safetensors is 5000 bytes: a 4096-byte limit stops it. */
    struct rlimit rl = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
      _exit(3);
    registry_promotion p = {.checkpoint = ck,
                            .tokenizer = tok_path,
                            .dag = "d",
                            .run = "big",
                            .task = "t",
                            .val_loss = 1.0,
                            .perplexity = NAN,
                            .accuracy = NAN};
    char cerr[2048] = "";
    int rc = registry_promote(root, &p, NULL, cerr, sizeof cerr);
    (void)!write(pipefd[1], cerr, strlen(cerr));
    _exit(rc == -1 ? 0 : 1);
  }
  close(pipefd[1]);
  char msg[2048] = "";
  ssize_t k = read(pipefd[0], msg, sizeof msg - 1);
  msg[k > 0 ? k : 0] = '\0';
  close(pipefd[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  fprintf(stderr, "(as expected) %s\n", msg);
  CHECK(strstr(msg, "File too large") != NULL);
  CHECK(strstr(msg, "model.safetensors") != NULL);
  char *after = snapshot(root);
  CHECK_STR(after, before);
  free(after);
  free(before);
  CHECK(!has_temporaries(root));
  /* Without the limit the same promotion goes through. */
  registry_promotion p = {.checkpoint = ck,
                          .tokenizer = tok_path,
                          .dag = "d",
                          .run = "big",
                          .task = "t",
                          .val_loss = 1.0,
                          .perplexity = NAN,
                          .accuracy = NAN};
  CHECK_INT(registry_promote(root, &p, &e, err, sizeof err), 0);
  CHECK_INT(e.seq, 2);
  CHECK_STR(link_of(root, "latest"), "big-step-00000002");
}

int main(void) {
  if (test_tmpdir_make("registry") != 0)
    return 1;
  unsetenv("DAGRUN_MODELS_DIR");
  snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", test_tmpdir());
  const char *tok = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}";
  if (fileio_write_durable(tok_path, tok, strlen(tok)) != 0)
    return 1;
  test_default_root();
  test_promote();
  test_retention();
  test_nan_never_best();
  test_refusals();
  test_copy_fails();
  if (test_failures_ == 0)
    fileio_remove_tree(test_tmpdir());
  TEST_DONE();
}
