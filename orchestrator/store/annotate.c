/*
 * annotate: `dagrun tag` and `dagrun note` (annotate.h).
 */
#include "annotate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/util.h"
#include "lib/exitcode.h"
#include "store/history.h"
#include "store/store.h"

/* The store's status as the command's exit status, after saying why. */
static int exit_of(int rc, const char *err) {
  if (rc == 0)
    return 0;
  fprintf(stderr, "dagrun: %s\n", err);
  return rc == DR_EINVAL || rc == DR_ENOENT ? EXIT_USAGE : EXIT_FAILED;
}

/* Opens the store and finds run id_prefix (history_open_run); *id is its
 * full id (caller frees). 0 or the exit status. */
static int open_run(const char *id_prefix, store **st, char **id) {
  cJSON *run;
  int rc = history_open_run(id_prefix, st, &run);
  if (rc)
    return rc;
  *id = xstrdup(cJSON_GetObjectItem(run, "id")->valuestring);
  cJSON_Delete(run);
  return 0;
}

int annotate_cmd_tag(int argc, char **argv) {
  const char *run = NULL;
  const char **add = xcalloc((size_t)argc + 1, sizeof *add);
  const char **remove = xcalloc((size_t)argc + 1, sizeof *remove);
  size_t n_add = 0, n_remove = 0;
  int json = 0, rc = 0;
  for (int i = 0; i < argc && rc == 0; i++) {
    if (strcmp(argv[i], "--remove") == 0) {
      if (i + 1 >= argc)
        rc = cli_usage_error("%s needs a tag", "--remove");
      else
        remove[n_remove++] = argv[++i];
    } else if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (argv[i][0] == '-') {
      rc = cli_usage_error("unknown option '%s' for tag", argv[i]);
    } else if (!run) {
      run = argv[i];
    } else {
      add[n_add++] = argv[i];
    }
  }
  if (rc == 0 && !run)
    rc = cli_usage_error("%s", "tag needs a run id (see dagrun runs)");
  store *st = NULL;
  char *id = NULL;
  if (rc == 0)
    rc = open_run(run, &st, &id);
  if (rc == 0) {
    char err[1024];
    cJSON *tags = NULL;
    rc = exit_of(store_run_tag(st, id, add, n_add, remove, n_remove, &tags, err,
                               sizeof err),
                 err);
    if (rc == 0 && json) {
      char *s = cJSON_PrintUnformatted(tags);
      printf("%s\n", s);
      free(s);
    } else if (rc == 0) {
      for (const cJSON *t = tags->child; t; t = t->next)
        printf("%s\n", t->valuestring);
    }
    cJSON_Delete(tags);
  }
  store_close(st);
  free(id);
  free(add);
  free(remove);
  return rc;
}

/* A note from stdin, all of it but its last newlines, into *out (caller
 * frees): 0, or EXIT_USAGE after saying why. A NUL byte would end the note
 * where it stands and lose the rest without a word. */
static int read_note(char **out) {
  sbuf b = {0};
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
    sbuf_add(&b, chunk, n);
  const char *nul = b.n ? memchr(b.s, '\0', b.n) : NULL;
  if (nul) {
    size_t at = (size_t)(nul - b.s);
    sbuf_free(&b);
    fprintf(stderr,
            "dagrun: the note on stdin holds a NUL byte (at byte %zu): a "
            "note is text\n",
            at);
    return EXIT_USAGE;
  }
  while (b.n > 0 && b.s[b.n - 1] == '\n')
    b.s[--b.n] = '\0';
  *out = sbuf_take(&b);
  return 0;
}

int annotate_cmd_note(int argc, char **argv) {
  const char *run = NULL, *text = NULL;
  int clear = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--clear") == 0)
      clear = 1;
    else if (argv[i][0] == '-' && argv[i][1] != '\0')
      return cli_usage_error("unknown option '%s' for note", argv[i]);
    else if (!run)
      run = argv[i];
    else if (!text)
      text = argv[i];
    else
      return cli_usage_error("note takes one TEXT (quote it), got also '%s'",
                             argv[i]);
  }
  if (!run)
    return cli_usage_error("%s", "note needs a run id (see dagrun runs)");
  if (clear && text)
    return cli_usage_error("%s", "note takes TEXT or --clear, not both");
  store *st;
  char *id;
  int rc = open_run(run, &st, &id);
  if (rc)
    return rc;
  if (!text && !clear) { /* show it */
    cJSON *r = store_run(st, id, &rc, NULL, 0);
    const cJSON *n = cJSON_GetObjectItem(r, "user_note");
    if (cJSON_IsString(n))
      printf("%s\n", n->valuestring);
    cJSON_Delete(r);
    rc = 0;
  } else {
    char err[1024];
    /* "-" reads the note from stdin: a long one, or one with newlines. */
    char *in = NULL;
    rc = 0;
    if (text && strcmp(text, "-") == 0 && (rc = read_note(&in)) == 0)
      text = in;
    if (rc == 0)
      rc = exit_of(
          store_run_set_note(st, id, clear ? NULL : text, err, sizeof err),
          err);
    free(in);
  }
  store_close(st);
  free(id);
  return rc;
}
