/* The tokenize stage's output directory; see tokdata.h. */
#include "tokdata.h"

#include "data/tokfile.h"
#include "lib/bpe/bpe.h"
#include "lib/fileio.h"
#include "lib/sha256.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether the token file at path is as long as the manifest's entry it
 * says (its tokens of width bytes after the header): a file copied over
 * it (a validation split over a train one) or cut short would otherwise
 * be read as data without a word. A stat, not a digest: gigabytes of
 * tokens are not read twice at every start. 0, or -1 with err; an entry
 * without a count, or a file not there, is left to the reader. */
static int shard_length_ok(const cJSON *entry, const char *path, int width,
                           char *err, size_t errlen) {
  const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(entry, "tokens");
  struct stat sb;
  if (!width || !cJSON_IsNumber(tokens) || tokens->valuedouble < 0 ||
      stat(path, &sb) != 0)
    return 0;
  double want = TOKFILE_HEADER_SIZE + tokens->valuedouble * width;
  if ((double)sb.st_size == want)
    return 0;
  snprintf(err, errlen,
           "%s holds %lld bytes, where the manifest's %.0f tokens of %d "
           "bytes make %.0f: it is not the file the tokenize stage wrote "
           "there (copied over, or cut short)",
           path, (long long)sb.st_size, tokens->valuedouble, width, want);
  return -1;
}

int tokdata_open(const char *base, const char *dir, tokdata *td, char *err,
                 size_t errlen) {
  memset(td, 0, sizeof *td);
  td->eot = TOKFILE_NO_EOT;
  td->dir = dir[0] == '/' ? strdup(dir) : fileio_join(base, dir);
  char *mpath = td->dir ? fileio_join(td->dir, "manifest.json") : NULL;
  char ignored[512];
  char *text =
      mpath ? fileio_read_all(mpath, NULL, ignored, sizeof ignored) : NULL;
  cJSON *m = text ? cJSON_Parse(text) : NULL;
  free(text);
  int rc = -1;
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
  const cJSON *shards = cJSON_GetObjectItemCaseSensitive(m, "shards");
  const cJSON *tok = cJSON_GetObjectItemCaseSensitive(m, "tokenizer");
  if (!m || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "dagrun-tokens") ||
      !cJSON_IsArray(shards) || !cJSON_IsObject(tok)) {
    snprintf(err, errlen,
             "%s: %s (data must be the tokenize stage's output directory, "
             "e.g. \"${tasks.tokenize.outputs.dir}\")",
             mpath ? mpath : dir,
             m ? "not a token manifest" : "missing or not JSON");
    goto done;
  }
  size_t n = (size_t)cJSON_GetArraySize(shards);
  td->train = calloc(n + 1, sizeof(char *));
  td->val = calloc(n + 1, sizeof(char *));
  if (!td->train || !td->val) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(m, "dtype");
  int width = !cJSON_IsString(dtype)                      ? 0
              : strcmp(dtype->valuestring, "uint16") == 0 ? 2
              : strcmp(dtype->valuestring, "uint32") == 0 ? 4
                                                          : 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, shards) {
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(it, "split");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(it, "path");
    if (!cJSON_IsString(split) || !cJSON_IsString(path))
      continue;
    char *p = fileio_join(td->dir, path->valuestring);
    if (shard_length_ok(it, p, width, err, errlen) != 0) {
      free(p);
      goto done;
    }
    if (strcmp(split->valuestring, "train") == 0)
      td->train[td->ntrain++] = p;
    else
      td->val[td->nval++] = p;
  }
  const cJSON *tpath = cJSON_GetObjectItemCaseSensitive(tok, "path");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(tok, "vocab_size");
  const cJSON *eot = cJSON_GetObjectItemCaseSensitive(tok, "eot_id");
  if (td->ntrain == 0 || !cJSON_IsString(tpath) || !cJSON_IsNumber(vocab)) {
    snprintf(err, errlen, "%s lists no train token files or no tokenizer",
             mpath);
    goto done;
  }
  td->tokenizer = fileio_join(td->dir, tpath->valuestring);
  td->vocab_size = vocab->valueint;
  /* A manifest written before the record: the file beside it is the one
   * that tokenized the data, so its digest is as good an identity. */
  const cJSON *sha = cJSON_GetObjectItemCaseSensitive(tok, "sha256");
  if (cJSON_IsString(sha) && strlen(sha->valuestring) == 64)
    memcpy(td->tokenizer_sha256, sha->valuestring, 65);
  else if (sha256_file(td->tokenizer, td->tokenizer_sha256) != 0)
    td->tokenizer_sha256[0] = '\0';
  if (cJSON_IsNumber(eot))
    td->eot = (uint32_t)eot->valueint;
  rc = 0;
done:
  cJSON_Delete(m);
  free(mpath);
  if (rc != 0)
    tokdata_free(td);
  return rc;
}

void tokdata_free(tokdata *td) {
  for (size_t i = 0; td->train && i < td->ntrain; i++)
    free(td->train[i]);
  for (size_t i = 0; td->val && i < td->nval; i++)
    free(td->val[i]);
  free(td->train);
  free(td->val);
  free(td->tokenizer);
  free(td->dir);
  memset(td, 0, sizeof *td);
  td->eot = TOKFILE_NO_EOT;
}

/* r's tokenizer.json loaded, when it is the file r's identity names (its
 * digest is r->sha256): a file at a recorded path that was written over
 * since is not the tokenizer the record names, and comparing it would
 * compare the wrong one. NULL when there is no such file or it does not
 * load. */
static bpe *load_identity(const tokdata_tokref *r) {
  char sha[65], err[512];
  bpe *tok = NULL;
  if (!r->path || !r->path[0] || sha256_file(r->path, sha) != 0 ||
      strcmp(sha, r->sha256) != 0 ||
      bpe_load_hf(r->path, &tok, err, sizeof err) != 0)
    return NULL;
  return tok;
}

/* Whether a's and b's tokenizer.json, of other digests, are one tokenizer
 * all the same: the same ids for every text (bpe_same_ids). The same
 * vocabulary and merges come in other bytes: another JSON layout or key
 * order, another Hugging Face version, or an older dagrun's tokenize,
 * which wrote a given tokenizer.json again in its own layout and
 * recorded that copy's digest. */
static int same_content(const tokdata_tokref *a, const tokdata_tokref *b) {
  bpe *ta = load_identity(a);
  bpe *tb = ta ? load_identity(b) : NULL;
  int same = ta && tb && bpe_same_ids(ta, tb);
  bpe_destroy(ta);
  bpe_destroy(tb);
  return same;
}

int tokdata_same_tokenizer(const tokdata_tokref *a, const tokdata_tokref *b,
                           char *err, size_t errlen) {
  /* Equal digests need no loading: the common case costs nothing. */
  if (!a->sha256 || !a->sha256[0] || !b->sha256 || !b->sha256[0] ||
      strcmp(a->sha256, b->sha256) == 0 || same_content(a, b))
    return 0;
  char bd[4200];
  if (b->owner)
    snprintf(bd, sizeof bd, "%s's tokenizer %s", b->owner, b->path);
  else
    snprintf(bd, sizeof bd, "the tokenizer %s", b->path);
  /* A model whose manifest records the identity of a tokenizer.json
   * that is no longer where it was. */
  const char *ap = a->path && a->path[0] ? a->path : "the one it recorded";
  if (a->owner)
    snprintf(err, errlen, "%s is not %s's (%s)", bd, a->owner, ap);
  else
    snprintf(err, errlen, "%s is not %s", bd, ap);
  return -1;
}

/* other's tokenizer against a model's (tokdata_fits_model's). */
static int fits_model(const tokdata_tokref *other, const char *model_dir,
                      const char *model_tok, const char *model_sha, char *err,
                      size_t errlen) {
  size_t n = strlen(model_dir) + 16;
  char *owner = malloc(n);
  if (!owner) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  snprintf(owner, n, "the model %s", model_dir);
  tokdata_tokref mt = {owner, model_tok, model_sha};
  int rc = tokdata_same_tokenizer(&mt, other, err, errlen);
  free(owner);
  return rc;
}

int tokdata_fits_model(const tokdata *td, const char *model_dir,
                       const char *model_tok, const char *model_sha, char *err,
                       size_t errlen) {
  tokdata_tokref dt = {"the data", td->tokenizer, td->tokenizer_sha256};
  return fits_model(&dt, model_dir, model_tok, model_sha, err, errlen);
}

int tokdata_file_fits_model(const char *path, const char *model_dir,
                            const char *model_tok, const char *model_sha,
                            char *err, size_t errlen) {
  char sha[65];
  if (sha256_file(path, sha) != 0)
    sha[0] = '\0'; /* what reads the file next says why it cannot */
  tokdata_tokref given = {NULL, path, sha};
  return fits_model(&given, model_dir, model_tok, model_sha, err, errlen);
}
