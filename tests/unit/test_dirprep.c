/*
 * dirprep: a queued task's directories made on the preparing thread, and
 * the cases where launch must make them itself (not asked, attempt-1/
 * already there, a directory that cannot be made).
 */
#include "lib/fileio.h"
#include "run/dirprep.h"
#include "testlib.h"

#include <sys/stat.h>
#include <unistd.h>

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_empty_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0;
}

/* dirprep borrows the run's path: test_path's buffers are reused. */
static char run_path[1024];

/* Waits (5000 polls, at least 5 s) for task's directories to be made,
 * then claims it. Made means marked ready, which comes just after the
 * log file: under a loaded machine's scheduling the file alone was seen
 * before the mark. */
static int claim_when_made(dirprep *d, size_t task, const char *name) {
  for (int i = 0; i < 5000; i++) {
    if (is_empty_file(test_path("run/%s/attempt-1/log", name)) &&
        dirprep_ready(d, task))
      break;
    usleep(1000);
  }
  return dirprep_claim(d, task);
}

static void test_made_ahead(void) {
  const char *names[] = {"a", "b", "c"};
  dirprep *d = dirprep_create(run_path, 3);
  CHECK(d != NULL);
  for (size_t i = 0; i < 3; i++)
    dirprep_push(d, i, names[i]);
  for (size_t i = 0; i < 3; i++) {
    CHECK_INT(claim_when_made(d, i, names[i]), 1);
    CHECK(is_dir(test_path("run/%s/out", names[i])));
    CHECK(is_dir(test_path("run/%s/attempt-1", names[i])));
    CHECK(is_empty_file(test_path("run/%s/attempt-1/log", names[i])));
  }
  dirprep_destroy(d);
}

/* Claimed before it was asked for: never made. Claimed as soon as asked:
 * made or not (a race with the thread), but only the first claim may say
 * made. */
static void test_not_asked(void) {
  dirprep *d = dirprep_create(run_path, 2);
  CHECK_INT(dirprep_claim(d, 0), 0);
  dirprep_push(d, 1, "late");
  (void)dirprep_claim(d, 1);
  CHECK_INT(dirprep_claim(d, 1), 0);
  dirprep_destroy(d);
}

/* Task `name` under run, asked for and given the thread 200 ms: never
 * claimed as made. */
static void expect_not_made(const char *run, const char *name) {
  dirprep *d = dirprep_create(run, 1);
  CHECK(d != NULL);
  dirprep_push(d, 0, name);
  usleep(200 * 1000);
  CHECK_INT(dirprep_claim(d, 0), 0);
  dirprep_destroy(d);
}

/* attempt-1/ exists (an earlier execution's): not new, so the caller
 * makes what is missing and clears what is in it. */
static void test_attempt_dir_exists(void) {
  CHECK_INT(fileio_mkdir_p(test_path("run/old/attempt-1"), 0755), 0);
  expect_not_made(run_path, "old");
}

/* A run directory that cannot be written: nothing claimed as made. */
static void test_cannot_make(void) {
  if (geteuid() == 0) {
    /* root writes anywhere: a file where the run directory should be. */
    FILE *f = fopen(test_path("notadir"), "w");
    CHECK(f != NULL);
    if (f)
      fclose(f);
  } else {
    CHECK_INT(fileio_mkdir_p(test_path("notadir"), 0555), 0);
  }
  char bad[1024];
  snprintf(bad, sizeof bad, "%s", test_path("notadir"));
  expect_not_made(bad, "t");
}

/* NULL (no thread) is accepted everywhere. */
static void test_null(void) {
  dirprep_push(NULL, 0, "x");
  CHECK_INT(dirprep_claim(NULL, 0), 0);
  dirprep_destroy(NULL);
}

int main(void) {
  if (test_tmpdir_make("dirprep") != 0)
    return 1;
  snprintf(run_path, sizeof run_path, "%s", test_path("run"));
  CHECK_INT(fileio_mkdir_p(run_path, 0755), 0);
  test_made_ahead();
  test_not_asked();
  test_attempt_dir_exists();
  test_cannot_make();
  test_null();
  if (test_failures_ == 0)
    fileio_remove_tree(test_tmpdir());
  TEST_DONE();
}
