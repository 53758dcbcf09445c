/*
 * dagrun-worker: the program every task attempt runs in (worker.h).
 *
 * `dagrun __worker` runs the same code, but starting dagrun costs about
 * 7 ms of dynamic linking (libcurl, libmicrohttpd, SQLite, libyaml,
 * libcrypto and theirs: about 40 libraries), paid once per task; this
 * program links the host layer only (libc, cJSON) and starts in about
 * 1 ms. It is installed beside the stage plugins (DAGRUN_LIBEXEC_SUBDIR)
 * and takes the same arguments as `dagrun __worker`, so that anything
 * that recognises a worker by its command line (resume.c's find_worker,
 * launch wrappers) sees one shape whichever program runs it.
 *
 * `dagrun-worker __guard` is the guard of a run's worker-less attempts
 * (guard.h), which the executor starts once per run.
 *
 * `dagrun-worker __describe PLUGIN...` writes what a stage plugin describes
 * itself as, for dagrun, which never loads a plugin itself (describe.h).
 * It ends with _exit: a plugin's destructors and atexit handlers do not
 * run, and cannot change its exit status. `dagrun-worker __check PLUGIN`
 * runs the stage's check of the tasks given on stdin (checkhook.h), in
 * the same way.
 */
#include "checkhook.h"
#include "describe.h"
#include "guard.h"
#include "worker.h"

#include "lib/exitcode.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc >= 2 && argc <= 3 && strcmp(argv[1], "__guard") == 0)
    return guard_main(argc == 3 ? argv[2] : NULL);
  if (argc >= 3 && strcmp(argv[1], "__describe") == 0)
    _exit(describe_main(argc - 2, argv + 2));
  if (argc == 3 && strcmp(argv[1], "__check") == 0)
    _exit(checkhook_main(argv[2]));
  if (argc != 3 || strcmp(argv[1], "__worker") != 0) {
    fprintf(stderr, "usage: dagrun-worker __worker ATTEMPT_JSON (internal: "
                    "dagrun starts it for each task attempt)\n");
    return EXIT_USAGE;
  }
  return worker_main(argv[2]);
}
