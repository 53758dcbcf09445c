/*
 * annotate: what people write on a recorded run, from the command line:
 * `dagrun tag RUN [TAG...] [--remove TAG...]` and `dagrun note RUN [TEXT |
 * --clear]` (main.c's table). The rules for tags and notes and where they
 * show are store.h's (store_run_tag, store_run_set_note); the API's POST
 * /api/runs/{run}/tags and /note write the same.
 */
#ifndef DAGRUN_STORE_ANNOTATE_H
#define DAGRUN_STORE_ANNOTATE_H

/* argv holds the arguments after the command's name. Return the exit
 * status: 0; 1 (the store cannot be read or written); 2 (bad usage, a bad
 * tag or note, an unknown or ambiguous run). */
int annotate_cmd_tag(int argc, char **argv);
int annotate_cmd_note(int argc, char **argv);

#endif
