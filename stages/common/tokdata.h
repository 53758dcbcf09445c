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
  /* The tokenizer's identity: the sha256 of tokenizer.json that the
   * manifest records, else (a manifest from before the record) of the
   * file itself; "" when neither can be had. */
  char tokenizer_sha256[65];
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

/* A tokenizer as a model or a token directory names it, for
 * tokdata_same_tokenizer. Strings borrowed. */
typedef struct tokdata_tokref {
  const char *owner;  /* whose it is, for the message ("the model X"), or
                         NULL for a tokenizer.json given on its own */
  const char *path;   /* its tokenizer.json, for the message */
  const char *sha256; /* its identity; "" or NULL when not known */
} tokdata_tokref;

/* Whether b's tokenizer is a's, by identity (the sha256 of their
 * tokenizer.json): a vocabulary of the same size is not enough, as two
 * tokenizers trained on other text to one vocab_size give the same ids
 * to other strings. 0 when the identities are equal or either is not
 * known (a checkpoint or token directory from before dagrun recorded it
 * is accepted, as it was then). Identities that differ are one tokenizer
 * all the same (0) when both paths hold the files they name (each file's
 * digest is its identity) and these load (lib/bpe) into tokenizers that
 * give the same ids (bpe_same_ids: vocabulary, merges, added tokens):
 * the same tokenizer.json in another layout, key order or Hugging Face
 * version. Else -1 with err
 * "B's tokenizer PATH_B is not A's (PATH_A)" ("the tokenizer PATH_B" for
 * B without an owner), to which the caller adds what it was doing. */
int tokdata_same_tokenizer(const tokdata_tokref *a, const tokdata_tokref *b,
                           char *err, size_t errlen);

/* tokdata_same_tokenizer of td's tokenizer against a model's: its
 * directory, its tokenizer.json ("" when not found) and its identity, as
 * ckpt/modeldir.h gives them. err "the data's tokenizer ... is not the
 * model DIR's (...)". */
int tokdata_fits_model(const tokdata *td, const char *model_dir,
                       const char *model_tok, const char *model_sha, char *err,
                       size_t errlen);
/* The same for a tokenizer.json given on its own (a stage's tokenizer
 * param): its identity is the file's sha256; err "the tokenizer PATH is
 * not the model DIR's (...)". */
int tokdata_file_fits_model(const char *path, const char *model_dir,
                            const char *model_tok, const char *model_sha,
                            char *err, size_t errlen);

#endif /* DAGRUN_TOKDATA_H */
