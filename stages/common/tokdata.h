/*
 * tokdata: the tokenize stage's output directory as the stages that read
 * it (train, validate) see it: its manifest.json (format "dagrun-tokens")
 * gives the train and validation token files, the tokenizer and the
 * vocabulary size.
 */
#ifndef DAGRUN_TOKDATA_H
#define DAGRUN_TOKDATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct tokdata {
  char *dir;            /* the directory, absolute when base was */
  char **train, **val;  /* token file paths, NULL-terminated */
  size_t ntrain, nval;
  char *tokenizer;      /* tokenizer.json */
  int vocab_size;
  uint32_t eot;         /* end-of-text id, or TOKFILE_NO_EOT */
} tokdata;

/* Reads dir/manifest.json (dir relative to base when not absolute).
 * 0, or -1 with err naming the manifest and saying what `data` must be
 * (the tokenize stage's "${tasks.tokenize.outputs.dir}"). A manifest
 * without train files or tokenizer is an error; one without validation
 * files is not (nval = 0). */
int tokdata_open(const char *base, const char *dir, tokdata *td, char *err,
                 size_t errlen);
void tokdata_free(tokdata *td);

#endif /* DAGRUN_TOKDATA_H */
