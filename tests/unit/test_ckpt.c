/*
 * Checkpoints: a committed one verifies and gives back its state; a
 * truncated, altered or half-written one is named and skipped; a crash in
 * the middle of writing one (a child that _exit()s) leaves the previous
 * one as the latest; pruning keeps the newest valid ones.
 */
#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "lib/fileio.h"
#include "lib/sha256.h"
#include "testlib.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int exists(const char *p) { return access(p, F_OK) == 0; }

/* A checkpoint of step under parent with model.safetensors (4096 bytes)
 * and optim.bin (1000 bytes); 0 or -1. */
static int make_ckpt(const char *parent, int64_t step) {
  char err[512] = "";
  ckpt_writer *w = NULL;
  if (ckpt_begin(parent, step, &w, err, sizeof err) != 0) {
    fprintf(stderr, "ckpt_begin: %s\n", err);
    return -1;
  }
  static unsigned char model[4096], optim[1000];
  for (size_t i = 0; i < sizeof model; i++)
    model[i] = (unsigned char)(i * 7 + (size_t)step);
  for (size_t i = 0; i < sizeof optim; i++)
    optim[i] = (unsigned char)(i * 13 + (size_t)step);
  char state[64];
  snprintf(state, sizeof state, "{\"step_seen\": %lld}", (long long)step);
  if (ckpt_add_file(w, "model.safetensors", model, sizeof model, err,
                    sizeof err) != 0 ||
      ckpt_add_file(w, "optim.bin", optim, sizeof optim, err, sizeof err) !=
          0 ||
      ckpt_commit(w, state, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "checkpoint %lld: %s\n", (long long)step, err);
    return -1;
  }
  return 0;
}

static void test_commit_verify(void) {
  char err[1024] = "", final[512] = "";
  char parent[512];
  snprintf(parent, sizeof parent, "%s",
           test_path("a/b/ckpts")); /* created as needed */
  ckpt_writer *w = NULL;
  CHECK_INT(ckpt_begin(parent, 100, &w, err, sizeof err), 0);
  if (!w)
    return;
  char *tmp = strdup(ckpt_writer_dir(w));
  CHECK_STR(tmp, test_path("a/b/ckpts/.step-00000100.tmp"));
  unsigned char model[4096];
  for (int i = 0; i < 4096; i++)
    model[i] = (unsigned char)i;
  CHECK_INT(ckpt_add_file(w, "model.safetensors", model, 4096, err, sizeof err),
            0);
  CHECK_INT(ckpt_add_file(w, "optim.bin", "optimizer", 9, err, sizeof err), 0);
  /* Names that are not plain file names, or the manifest's, are refused. */
  CHECK_INT(ckpt_add_file(w, "../x", "x", 1, err, sizeof err), -1);
  CHECK_STR(err, "checkpoint file name \"../x\" is not allowed");
  CHECK_INT(ckpt_add_file(w, "manifest.json", "x", 1, err, sizeof err), -1);
  /* A file written by other code into the temporary directory. */
  float wt[3] = {1, 2, 3};
  st_tensor t = {
      .name = "w", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = wt};
  char *stp = fileio_join(ckpt_writer_dir(w), "extra.safetensors");
  CHECK_INT(st_write(stp, &t, 1, 0, NULL, NULL, 0, err, sizeof err), 0);
  free(stp);
  CHECK_INT(ckpt_commit(w, "{\"lr\": 0.001, \"loader\": {\"batches\": 7}}",
                        final, sizeof final, err, sizeof err),
            0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", test_path("a/b/ckpts/step-00000100"));
  CHECK_STR(final, dir);
  CHECK(!exists(tmp));
  free(tmp);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), 0);

  int64_t step = 0;
  char *state = NULL;
  CHECK_INT(ckpt_read_state(dir, &step, &state, err, sizeof err), 0);
  CHECK_INT(step, 100);
  CHECK_STR(state, "{\"lr\":0.001,\"loader\":{\"batches\":7}}");
  free(state);

  /* The manifest lists every file with its size and checksum. */
  char *mpath = fileio_join(dir, "manifest.json");
  FILE *fp = fopen(mpath, "r");
  char text[4096] = "";
  size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
  text[n] = '\0';
  if (fp)
    fclose(fp);
  free(mpath);
  char hex[65], *mp = fileio_join(dir, "model.safetensors");
  CHECK_INT(sha256_file(mp, hex), 0);
  free(mp);
  CHECK(strstr(text, "\"format\":\t\"dagrun-checkpoint\"") != NULL);
  CHECK(strstr(text, "\"version\":\t1") != NULL);
  CHECK(strstr(text, hex) != NULL);
  CHECK(strstr(text, "\"bytes\":\t4096") != NULL);
  CHECK(strstr(text, "\"extra.safetensors\"") != NULL);
  CHECK(strstr(text, "\"optim.bin\"") != NULL);

  /* A state that is not a JSON object: refused, the temporary gone. */
  CHECK_INT(ckpt_begin(parent, 101, &w, err, sizeof err), 0);
  CHECK_INT(ckpt_commit(w, "[1, 2]", NULL, 0, err, sizeof err), -1);
  CHECK_STR(err, "checkpoint state is not a JSON object");
  CHECK(!exists(test_path("a/b/ckpts/.step-00000101.tmp")));
  CHECK(!exists(test_path("a/b/ckpts/step-00000101")));
  /* Abort removes the temporary. */
  CHECK_INT(ckpt_begin(parent, 102, &w, err, sizeof err), 0);
  CHECK(exists(test_path("a/b/ckpts/.step-00000102.tmp")));
  ckpt_abort(w);
  ckpt_abort(NULL);
  CHECK(!exists(test_path("a/b/ckpts/.step-00000102.tmp")));
}

static void flip_byte(const char *path, off_t at) {
  int fd = open(path, O_RDWR);
  unsigned char c = 0;
  CHECK(pread(fd, &c, 1, at) == 1);
  c ^= 0x20;
  CHECK(pwrite(fd, &c, 1, at) == 1);
  close(fd);
}

static void test_damage(void) {
  char err[1024] = "";
  char parent[512];
  snprintf(parent, sizeof parent, "%s", test_path("damage"));
  CHECK_INT(make_ckpt(parent, 5), 0);
  char dir[400], model[512], optim[512], manifest[512];
  snprintf(dir, sizeof dir, "%s", test_path("damage/step-00000005"));
  snprintf(model, sizeof model, "%s/model.safetensors", dir);
  snprintf(optim, sizeof optim, "%s/optim.bin", dir);
  snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), 0);

  /* One flipped byte: the checksum names the file. */
  char want_hex[65], got_hex[65], want[512];
  CHECK_INT(sha256_file(optim, want_hex), 0);
  flip_byte(optim, 500);
  CHECK_INT(sha256_file(optim, got_hex), 0);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), -1);
  snprintf(want, sizeof want,
           "optim.bin: sha256 mismatch: the manifest says %s, the file "
           "hashes to %s",
           want_hex, got_hex);
  CHECK_STR(err, want);
  flip_byte(optim, 500);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), 0);

  /* Truncated, grown, missing. */
  CHECK_INT(truncate(model, 100), 0);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), -1);
  CHECK_STR(err, "model.safetensors: truncated: 100 of 4096 bytes");
  CHECK_INT(truncate(model, 5000), 0);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), -1);
  CHECK_STR(err, "model.safetensors: 5000 bytes, the manifest says 4096");
  CHECK_INT(unlink(model), 0);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), -1);
  CHECK_STR(err, "model.safetensors: missing");

  /* The manifest itself: foreign version, not JSON, gone. */
  char *text = NULL;
  FILE *fp = fopen(manifest, "r");
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  buf[n] = '\0';
  fclose(fp);
  text = strdup(buf);
  char *v = strstr(text, "\"version\":\t1");
  if (v) {
    v[strlen("\"version\":\t")] = '2';
    CHECK_INT(fileio_write_atomic(manifest, text, n, err, sizeof err), 0);
    CHECK_INT(ckpt_verify(dir, err, sizeof err), -1);
    CHECK_STR(err, "manifest.json: version 2, this dagrun reads version 1");
  }
  free(text);
  CHECK_INT(fileio_write_atomic(manifest, "{\"format\"", 9, err, sizeof err),
            0);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), -1);
  CHECK_STR(err, "manifest.json: not a JSON object");
  int64_t step;
  char *state = (char *)1;
  CHECK_INT(ckpt_read_state(dir, &step, &state, err, sizeof err), -1);
  CHECK(state == NULL);
  CHECK_INT(unlink(manifest), 0);
  CHECK_INT(ckpt_verify(dir, err, sizeof err), -1);
  CHECK_STR(err, "missing manifest.json (an incomplete checkpoint?)");
}

typedef struct seen {
  int n;
  char dirs[8][512];
  char whys[8][512];
} seen;

static void on_invalid(void *arg, const char *dir, const char *why) {
  seen *s = arg;
  if (s->n < 8) {
    snprintf(s->dirs[s->n], 512, "%s", dir);
    snprintf(s->whys[s->n], 512, "%s", why);
  }
  s->n++;
}

static void test_find_latest(void) {
  char err[512] = "";
  char parent[512];
  snprintf(parent, sizeof parent, "%s", test_path("find"));
  char *out = (char *)1;
  /* No directory yet: no checkpoint, not an error. */
  CHECK_INT(ckpt_find_latest(parent, &out, NULL, NULL, err, sizeof err), 0);
  CHECK(out == NULL);

  CHECK_INT(make_ckpt(parent, 1), 0);
  CHECK_INT(make_ckpt(parent, 2), 0);
  /* A crashed attempt's temporary, a step directory without a manifest
   * and one with a truncated file, all newer than step 2. */
  CHECK_INT(mkdir(test_path("find/.step-00000003.tmp"), 0755), 0);
  CHECK_INT(make_ckpt(parent, 3), 0);
  CHECK_INT(rename(test_path("find/step-00000003"),
                   test_path("find/.step-00000009.tmp")),
            0);
  CHECK_INT(mkdir(test_path("find/step-00000004"), 0755), 0);
  CHECK_INT(make_ckpt(parent, 10), 0);
  CHECK_INT(truncate(test_path("find/step-00000010/optim.bin"), 10), 0);
  /* Names that are not checkpoints at all are ignored. */
  CHECK_INT(mkdir(test_path("find/step-x"), 0755), 0);
  CHECK_INT(mkdir(test_path("find/other"), 0755), 0);

  seen s = {0};
  CHECK_INT(ckpt_find_latest(parent, &out, on_invalid, &s, err, sizeof err), 0);
  CHECK_STR(out, test_path("find/step-00000002"));
  free(out);
  CHECK_INT(s.n, 2);
  CHECK_STR(s.dirs[0], test_path("find/step-00000010"));
  CHECK_STR(s.whys[0], "optim.bin: truncated: 10 of 1000 bytes");
  CHECK_STR(s.dirs[1], test_path("find/step-00000004"));
  CHECK_STR(s.whys[1], "missing manifest.json (an incomplete checkpoint?)");

  /* A checkpoint copied under another step's name does not pass. */
  CHECK_INT(
      rename(test_path("find/step-00000002"), test_path("find/step-00000007")),
      0);
  s.n = 0;
  CHECK_INT(ckpt_find_latest(parent, &out, on_invalid, &s, err, sizeof err), 0);
  CHECK_STR(out, test_path("find/step-00000001"));
  free(out);
  CHECK_INT(s.n, 3);
  CHECK_STR(s.whys[1], "manifest.json: step 2, but the directory is "
                       "step-00000007");

  /* Writing step 4 again replaces the broken one. */
  CHECK_INT(make_ckpt(parent, 4), 0);
  CHECK_INT(ckpt_verify(test_path("find/step-00000004"), err, sizeof err), 0);
  CHECK(!exists(test_path("find/.step-00000004.old")));

  /* A parent that is not a directory is an error. */
  CHECK_INT(ckpt_find_latest(test_path("find/step-00000004/optim.bin"), &out,
                             NULL, NULL, err, sizeof err),
            -1);
  CHECK(strstr(err, "cannot read ") != NULL);
}

static void test_prune(void) {
  char parent[512];
  snprintf(parent, sizeof parent, "%s", test_path("prune"));
  for (int s = 10; s <= 50; s += 10)
    CHECK_INT(make_ckpt(parent, s), 0);
  CHECK_INT(mkdir(test_path("prune/.step-00000060.tmp"), 0755), 0);
  CHECK_INT(ckpt_prune(parent, 2), 4);
  CHECK(!exists(test_path("prune/step-00000010")));
  CHECK(!exists(test_path("prune/step-00000020")));
  CHECK(!exists(test_path("prune/step-00000030")));
  CHECK(exists(test_path("prune/step-00000040")));
  CHECK(exists(test_path("prune/step-00000050")));
  CHECK(!exists(test_path("prune/.step-00000060.tmp")));
  CHECK_INT(ckpt_prune(parent, 2), 0);

  /* The newest is broken: it does not count, and the newest valid one is
   * never removed. The broken one stays (newer than any valid one). */
  CHECK_INT(make_ckpt(parent, 60), 0);
  CHECK_INT(truncate(test_path("prune/step-00000060/model.safetensors"), 1), 0);
  CHECK_INT(ckpt_prune(parent, 1), 1);
  CHECK(exists(test_path("prune/step-00000060")));
  CHECK(exists(test_path("prune/step-00000050")));
  CHECK(!exists(test_path("prune/step-00000040")));

  /* A broken one between valid ones goes. */
  CHECK_INT(make_ckpt(parent, 70), 0);
  CHECK_INT(ckpt_prune(parent, 2), 1);
  CHECK(!exists(test_path("prune/step-00000060")));
  CHECK(exists(test_path("prune/step-00000050")));
  CHECK(exists(test_path("prune/step-00000070")));
}

/* A child that begins checkpoint 200, writes one file and half of the
 * next, and dies: the latest is still 100, and 200 can be written after. */
static void test_crash(void) {
  char err[512] = "";
  char parent[512];
  snprintf(parent, sizeof parent, "%s", test_path("crash"));
  CHECK_INT(make_ckpt(parent, 100), 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    ckpt_writer *w = NULL;
    static unsigned char big[1 << 16];
    if (ckpt_begin(parent, 200, &w, err, sizeof err) != 0)
      _exit(3);
    ckpt_add_file(w, "model.safetensors", big, sizeof big, err, sizeof err);
    char *p = fileio_join(ckpt_writer_dir(w), "optim.bin");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, big, sizeof big / 2) < 0)
      _exit(4);
    _exit(9); /* no commit, no abort, no cleanup */
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 9);
  CHECK(exists(test_path("crash/.step-00000200.tmp/optim.bin")));

  /* Killed between the manifest and the rename: still a temporary. */
  CHECK_INT(make_ckpt(parent, 300), 0);
  CHECK_INT(rename(test_path("crash/step-00000300"),
                   test_path("crash/.step-00000300.tmp")),
            0);

  seen s = {0};
  char *out = NULL;
  CHECK_INT(ckpt_find_latest(parent, &out, on_invalid, &s, err, sizeof err), 0);
  CHECK_STR(out, test_path("crash/step-00000100"));
  CHECK_INT(s.n, 0);
  free(out);

  /* The run resumes from 100 and writes 200 over the stale temporary. */
  CHECK_INT(make_ckpt(parent, 200), 0);
  CHECK_INT(ckpt_find_latest(parent, &out, NULL, NULL, err, sizeof err), 0);
  CHECK_STR(out, test_path("crash/step-00000200"));
  free(out);
  CHECK_INT(ckpt_prune(parent, 5), 1); /* .step-00000300.tmp */
}

int main(void) {
  if (test_tmpdir_make("ckpt") != 0)
    return 1;
  test_commit_verify();
  test_damage();
  test_find_latest();
  test_prune();
  test_crash();
  test_tmpdir_remove();
  TEST_DONE();
}
