/*
 * fileio's copy and tree removal: a copy is byte for byte the source
 * (across block boundaries, over a longer file, empty), a copy that
 * cannot be made says which file and why (no destination directory, a
 * source that is missing, a directory or unreadable, a file size limit),
 * and a tree removal takes everything under a path but never follows a
 * symlink out of it. mkdir -p makes every missing parent (however the
 * path is written) and refuses a file in the way.
 */
#include "lib/fileio.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int exists(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0;
}

/* n bytes of a pattern that repeats only every 251 bytes, so a block
 * copied twice or skipped shows. */
static unsigned char *pattern(size_t n) {
  unsigned char *b = malloc(n ? n : 1);
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)((i * 31 + i / 251) % 251);
  return b;
}

/* 1 when path holds exactly the n bytes of want. */
static int same_bytes(const char *path, const unsigned char *want, size_t n) {
  char err[256];
  size_t got = 0;
  char *b = fileio_read_all(path, &got, err, sizeof err);
  int ok = b && got == n && memcmp(b, want, n) == 0;
  if (!ok)
    fprintf(stderr, "%s: %zu bytes, expected %zu (%s)\n", path, got, n,
            b ? "content differs or size" : err);
  free(b);
  return ok;
}

static void test_copy(void) {
  char err[1024] = "";
  /* 3 MiB + 17 bytes: three whole blocks and a partial one. */
  size_t n = (3u << 20) + 17;
  unsigned char *data = pattern(n);
  CHECK_INT(fileio_write_durable(test_path("big"), data, n), 0);
  CHECK_INT(fileio_copy_durable(test_path("big"), test_path("big.copy"), err,
                                sizeof err),
            0);
  CHECK(same_bytes(test_path("big.copy"), data, n));

  /* Over a longer file: the copy is truncated to the source's size. */
  CHECK_INT(fileio_write_durable(test_path("short"), "abc", 3), 0);
  CHECK_INT(fileio_copy_durable(test_path("short"), test_path("big.copy"), err,
                                sizeof err),
            0);
  CHECK(same_bytes(test_path("big.copy"), (const unsigned char *)"abc", 3));

  /* An empty file copies to an empty file. */
  CHECK_INT(fileio_write_durable(test_path("empty"), "", 0), 0);
  CHECK_INT(fileio_copy_durable(test_path("empty"), test_path("empty.copy"),
                                err, sizeof err),
            0);
  CHECK(same_bytes(test_path("empty.copy"), (const unsigned char *)"", 0));
  free(data);
}

static void test_copy_fails(void) {
  char err[1024];
  /* No destination directory: the destination is named. */
  err[0] = '\0';
  CHECK_INT(fileio_copy_durable(test_path("short"), test_path("nodir/x"), err,
                                sizeof err),
            -1);
  CHECK(strstr(err, test_path("nodir/x")) != NULL);
  CHECK(strstr(err, "No such file or directory") != NULL);
  CHECK(!exists(test_path("nodir")));

  /* A missing source: named, and no destination made. */
  err[0] = '\0';
  CHECK_INT(fileio_copy_durable(test_path("missing"), test_path("m.copy"), err,
                                sizeof err),
            -1);
  CHECK(strstr(err, "cannot open") != NULL);
  CHECK(strstr(err, test_path("missing")) != NULL);
  CHECK(!exists(test_path("m.copy")));

  /* A directory opens but cannot be read as a file. */
  mkdir(test_path("adir"), 0755);
  err[0] = '\0';
  CHECK_INT(fileio_copy_durable(test_path("adir"), test_path("d.copy"), err,
                                sizeof err),
            -1);
  CHECK(strstr(err, "cannot read") != NULL);
  CHECK(strstr(err, "Is a directory") != NULL);
  fprintf(stderr, "(as expected) %s\n", err);
}

/* A source without read permission, from a process that is not root
 * (root reads anything): its own child when the test runs as root. */
static void test_copy_unreadable(void) {
  CHECK_INT(fileio_write_durable(test_path("secret"), "xyz", 3), 0);
  CHECK_INT(chmod(test_path("secret"), 0000), 0);
  CHECK_INT(chmod(test_tmpdir(), 0777), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
      _exit(3);
    char err[1024] = "";
    int rc = fileio_copy_durable(test_path("secret"), test_path("s.copy"), err,
                                 sizeof err);
    fprintf(stderr, "(as expected) %s\n", err);
    _exit(rc == -1 && strstr(err, "Permission denied") &&
                  strstr(err, test_path("secret")) &&
                  !exists(test_path("s.copy"))
              ? 0
              : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_INT(chmod(test_tmpdir(), 0700), 0);
}

/* A file size limit (ulimit -f) under the copy's size: with SIGXFSZ
 * ignored, as the worker does, the write fails with EFBIG and the copy
 * says so. In a child: the limit stays there. */
static void test_copy_file_too_large(void) {
  size_t n = 3u << 20;
  unsigned char *data = pattern(n);
  CHECK_INT(fileio_write_durable(test_path("big3"), data, n), 0);
  free(data);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1u << 20, 1u << 20};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
      _exit(3);
    char err[1024] = "";
    int rc = fileio_copy_durable(test_path("big3"), test_path("big3.copy"), err,
                                 sizeof err);
    fprintf(stderr, "(as expected) %s\n", err);
    _exit(rc == -1 && strstr(err, "File too large") &&
                  strstr(err, test_path("big3.copy"))
              ? 0
              : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_remove_tree(void) {
  /* tree/a/b/c.txt, tree/top.txt, tree/link -> outside (a directory),
   * tree/dangling -> nowhere. */
  CHECK_INT(mkdir(test_path("tree"), 0755), 0);
  CHECK_INT(mkdir(test_path("tree/a"), 0755), 0);
  CHECK_INT(mkdir(test_path("tree/a/b"), 0755), 0);
  CHECK_INT(fileio_write_durable(test_path("tree/a/b/c.txt"), "c", 1), 0);
  CHECK_INT(fileio_write_durable(test_path("tree/top.txt"), "t", 1), 0);
  CHECK_INT(mkdir(test_path("outside"), 0755), 0);
  CHECK_INT(fileio_write_durable(test_path("outside/keep.txt"), "k", 1), 0);
  CHECK_INT(symlink(test_path("outside"), test_path("tree/link")), 0);
  CHECK_INT(symlink(test_path("nowhere"), test_path("tree/dangling")), 0);
  CHECK_INT(fileio_remove_tree(test_path("tree")), 0);
  CHECK(!exists(test_path("tree")));
  /* The symlink went, not what it pointed at. */
  CHECK(exists(test_path("outside/keep.txt")));

  /* A symlink named itself: the link goes, the directory stays. */
  CHECK_INT(symlink(test_path("outside"), test_path("link2")), 0);
  CHECK_INT(fileio_remove_tree(test_path("link2")), 0);
  CHECK(!exists(test_path("link2")));
  CHECK(exists(test_path("outside/keep.txt")));

  /* A plain file, and a path that is not there. */
  CHECK_INT(fileio_remove_tree(test_path("short")), 0);
  CHECK(!exists(test_path("short")));
  CHECK_INT(fileio_remove_tree(test_path("never-was")), 0);

  /* A path through a file cannot be looked at: the error comes back. */
  CHECK_INT(fileio_remove_tree(test_path("empty/x")), -ENOTDIR);
}

/* A tree in a directory the process may not write to: not removed, and
 * the error says why (as a user other than root, who may do anything). */
static void test_remove_tree_denied(void) {
  CHECK_INT(mkdir(test_path("locked"), 0755), 0);
  CHECK_INT(mkdir(test_path("locked/sub"), 0755), 0);
  CHECK_INT(chmod(test_path("locked/sub"), 0777), 0); /* past the umask */
  CHECK_INT(fileio_write_durable(test_path("locked/sub/f"), "f", 1), 0);
  CHECK_INT(chmod(test_path("locked/sub/f"), 0666), 0);
  CHECK_INT(chmod(test_tmpdir(), 0777), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
      _exit(3);
    /* sub's contents go (sub is writable), sub itself cannot (locked is
     * not). */
    int rc = fileio_remove_tree(test_path("locked/sub"));
    _exit(rc == -EACCES ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(exists(test_path("locked/sub")));
  CHECK(!exists(test_path("locked/sub/f")));
  CHECK_INT(chmod(test_tmpdir(), 0700), 0);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void test_mkdir_p(void) {
  CHECK_INT(fileio_mkdir_p(test_path("m/a/b/c"), 0755), 0);
  CHECK(is_dir(test_path("m/a/b/c")));
  CHECK_INT(fileio_mkdir_p(test_path("m/a/b/c"), 0755), 0); /* exists */
  CHECK_INT(fileio_mkdir_p(test_path("m/x//y/"), 0755), 0);
  CHECK(is_dir(test_path("m/x/y")));
  CHECK_INT(fileio_write_durable(test_path("m/file"), "f", 1), 0);
  CHECK_INT(fileio_mkdir_p(test_path("m/file"), 0755), -ENOTDIR);
  CHECK_INT(fileio_mkdir_p(test_path("m/file/sub/d"), 0755), -ENOTDIR);
  /* Relative to the working directory, parents included. */
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK_INT(chdir(test_path("m")), 0);
  CHECK_INT(fileio_mkdir_p("r/s", 0755), 0);
  CHECK_INT(chdir(cwd), 0);
  CHECK(is_dir(test_path("m/r/s")));
}

int main(void) {
  if (test_tmpdir_make("fileio") != 0)
    return 1;
  test_mkdir_p();
  test_copy();
  test_copy_fails();
  test_copy_unreadable();
  test_copy_file_too_large();
  test_remove_tree();
  test_remove_tree_denied();
  chmod(test_path("secret"), 0600);
  if (test_failures_ == 0)
    fileio_remove_tree(test_tmpdir());
  TEST_DONE();
}
