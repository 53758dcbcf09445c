/*
 * tokenize: the built-in stage that turns the shard stage's JSONL shards
 * into token shard files (gpu/data/tokfile.h) the training engine reads.
 *
 *   tokenize:
 *     stage: tokenize
 *     needs: [shard]
 *     with: {shards: "${tasks.shard.outputs.dir}", vocab_size: 4096}
 *
 * The tokenizer is trained on the train shards (or a sample of them), or
 * loaded from a Hugging Face tokenizer.json or GPT-2's vocab.json +
 * merges.txt. Either way it is in out/tokenizer.json (a loaded
 * tokenizer.json byte for byte: write_tokenizer says why), and every
 * shard, train and validation, is encoded in parallel into out/<name>.tok,
 * each document led by <|endoftext|>. out/manifest.json records the
 * tokenizer, each token file's counts and SHA-256, and the timings.
 */
#include <dagrun/plugin.h>

#include "common/stagekit.h"
#include "data/tokfile.h"
#include "lib/bpe/bpe.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "lib/sha256.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EOT_TEXT "<|endoftext|>"

static const dagrun_param_spec params[] = {
    {"shards", DAGRUN_PARAM_STRING, NULL, 1,
     "The shard stage's output directory (or its manifest.json), e.g. "
     "\"${tasks.shard.outputs.dir}\""},
    {"vocab_size", DAGRUN_PARAM_INT, "4096", 0,
     "Ids of a trained tokenizer: 256 bytes + merges + special tokens"},
    {"min_frequency", DAGRUN_PARAM_INT, "2", 0,
     "Training never merges a pair seen fewer times than this"},
    {"train_sample", DAGRUN_PARAM_STRING, "0", 0,
     "Bytes of train shards to train on, e.g. 200MiB, taken evenly from "
     "every shard (shards are already shuffled); 0 = all of them"},
    {"special_tokens", DAGRUN_PARAM_LIST, NULL, 0,
     "Special tokens of a trained tokenizer (default [\"<|endoftext|>\"]); "
     "<|endoftext|> is written before every document"},
    {"tokenizer", DAGRUN_PARAM_STRING, NULL, 0,
     "Load this Hugging Face tokenizer.json instead of training"},
    {"vocab", DAGRUN_PARAM_STRING, NULL, 0,
     "Load GPT-2's vocab.json (with merges) instead of training"},
    {"merges", DAGRUN_PARAM_STRING, NULL, 0,
     "GPT-2's merges.txt, with vocab"},
    {"threads", DAGRUN_PARAM_INT, "0", 0,
     "Threads for training and encoding; 0 = one per CPU"},
    {NULL, 0, NULL, 0, NULL},
};

/* One input shard and, once encoded, its token file. */
typedef struct shard {
  char *split;       /* "train" or "val" */
  char *src;         /* JSONL path */
  char *name;        /* JSONL base name, e.g. train-00000.jsonl */
  char *dst;         /* token file path */
  char sha256[65];   /* as the shard manifest says; "" if not given */
  uint64_t bytes;    /* JSONL file size */
  /* Filled by the encoder. */
  uint64_t docs, tokens, text_bytes;
  char tok_sha256[65];
} shard;

typedef struct job {
  dagrun_ctx *ctx;
  const dagrun_host *host;
  shard *shards;
  size_t nshards;
  int threads;
  bpe *tok;
  uint32_t eot_id;
  uint64_t total_bytes;
  /* Training: bytes to read from each train shard (0 = all). */
  uint64_t sample_per_shard;
  bpe_train_opts topts;
  /* Shared between worker threads. */
  atomic_size_t next;
  atomic_uint_fast64_t done_bytes;
  atomic_int failed;
  pthread_mutex_t lock;
  char err[1024]; /* first failure, under lock */
} job;

/* Records the first failure of any worker and tells the others to stop. */
static void job_fail(job *j, const char *msg) {
  pthread_mutex_lock(&j->lock);
  if (!atomic_load(&j->failed))
    snprintf(j->err, sizeof j->err, "%s", msg);
  atomic_store(&j->failed, 1);
  pthread_mutex_unlock(&j->lock);
}

/* ---- Reading the shard stage's JSONL lines ----
 * Each line is a flat JSON object of strings, {"id":"…","text":"…"}.
 * cJSON would stop a string at an escaped NUL ("\u0000"), which is valid
 * text, so the text field is decoded here, byte-exactly. */

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static int read_hex4(const char *p, const char *end, unsigned *out) {
  if (end - p < 4)
    return -1;
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(p[i]);
    if (h < 0)
      return -1;
    v = v * 16 + (unsigned)h;
  }
  *out = v;
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Decodes the JSON string starting after its opening quote at *pp into
 * out (which has room: decoded text is never longer than its JSON form),
 * or skips it when out is NULL. Leaves *pp after the closing quote. */
static int json_string(const char **pp, const char *end, char *out,
                       size_t *outlen) {
  const char *p = *pp;
  size_t n = 0;
  while (p < end && *p != '"') {
    if (*p != '\\') {
      if (out)
        out[n] = *p;
      n++;
      p++;
      continue;
    }
    if (++p >= end)
      return -1;
    char c = *p++, lit;
    switch (c) {
    case '"': lit = '"'; break;
    case '\\': lit = '\\'; break;
    case '/': lit = '/'; break;
    case 'b': lit = '\b'; break;
    case 'f': lit = '\f'; break;
    case 'n': lit = '\n'; break;
    case 'r': lit = '\r'; break;
    case 't': lit = '\t'; break;
    case 'u': {
      unsigned cp, lo;
      if (read_hex4(p, end, &cp) != 0)
        return -1;
      p += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (end - p < 6 || p[0] != '\\' || p[1] != 'u' ||
            read_hex4(p + 2, end, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
          return -1;
        p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return -1;
      }
      char tmp[4];
      size_t k = put_utf8(tmp, cp);
      if (out)
        memcpy(out + n, tmp, k);
      n += k;
      continue;
    }
    default:
      return -1;
    }
    if (out)
      out[n] = lit;
    n++;
  }
  if (p >= end)
    return -1;
  *pp = p + 1;
  *outlen = n;
  return 0;
}

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
    p++;
  return p;
}

/* Finds the "text" member of one shard line and decodes it into out
 * (room for len bytes). Returns 0, or -1 for a line that is not a flat
 * object of strings with a text member. */
static int shard_line_text(const char *line, size_t len, char *out,
                           size_t *outlen) {
  const char *p = line, *end = line + len;
  int found = 0;
  p = skip_ws(p, end);
  if (p >= end || *p++ != '{')
    return -1;
  for (;;) {
    p = skip_ws(p, end);
    if (p < end && *p == '}' && !found)
      return -1;
    if (p >= end || *p++ != '"')
      return -1;
    char key[8];
    size_t klen = 0;
    const char *kstart = p;
    if (json_string(&p, end, NULL, &klen) != 0)
      return -1;
    int is_text = 0;
    if (klen == 4) {
      const char *q = kstart;
      json_string(&q, end, key, &klen);
      is_text = memcmp(key, "text", 4) == 0;
    }
    p = skip_ws(p, end);
    if (p >= end || *p++ != ':')
      return -1;
    p = skip_ws(p, end);
    if (p >= end || *p++ != '"')
      return -1;
    if (json_string(&p, end, is_text ? out : NULL, is_text ? outlen : &klen) !=
        0)
      return -1;
    found |= is_text;
    p = skip_ws(p, end);
    if (p < end && *p == ',') {
      p++;
      continue;
    }
    if (p < end && *p == '}')
      return found ? 0 : -1;
    return -1;
  }
}

/* ---- Workers ---- */

/* Reads src line by line, hashing every byte so a shard changed since the
 * shard stage wrote it is noticed, and calls doc() on each text. Stops
 * after max_bytes of lines when max_bytes > 0. */
typedef int (*doc_fn)(void *arg, const char *text, size_t len, char *err,
                      size_t errlen);

static int read_shard(job *j, shard *s, uint64_t max_bytes, doc_fn doc,
                      void *arg, char *err, size_t errlen) {
  FILE *fp = fopen(s->src, "rb");
  if (!fp) {
    snprintf(err, errlen, "%s: %s", s->src, strerror(errno));
    return -1;
  }
  EVP_MD_CTX *sha = EVP_MD_CTX_new();
  EVP_DigestInit_ex(sha, EVP_sha256(), NULL);
  char *line = NULL, *text = NULL;
  size_t cap = 0, tcap = 0, lineno = 0;
  uint64_t read_bytes = 0;
  ssize_t n;
  int rc = 0;
  while ((n = getline(&line, &cap, fp)) > 0) {
    lineno++;
    EVP_DigestUpdate(sha, line, (size_t)n);
    read_bytes += (uint64_t)n;
    if ((size_t)n > tcap) {
      free(text);
      tcap = (size_t)n;
      text = malloc(tcap);
      if (!text) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
        break;
      }
    }
    size_t tlen = 0;
    if (shard_line_text(line, (size_t)n, text, &tlen) != 0) {
      snprintf(err, errlen,
               "%s:%zu: not a shard line (a JSON object with a \"text\" "
               "string)", s->src, lineno);
      rc = -1;
      break;
    }
    if ((rc = doc(arg, text, tlen, err, errlen)) != 0)
      break;
    atomic_fetch_add(&j->done_bytes, (uint64_t)n);
    if (atomic_load(&j->failed) || j->host->cancelled(j->ctx)) {
      rc = 1; /* stopped; the caller says why */
      break;
    }
    if (max_bytes && read_bytes >= max_bytes)
      break;
  }
  if (rc == 0 && ferror(fp)) {
    snprintf(err, errlen, "%s: read error", s->src);
    rc = -1;
  }
  /* The checksum covers the whole file, so it is checked only when the
   * whole file was read. */
  if (rc == 0 && !max_bytes && s->sha256[0]) {
    uint8_t d[32];
    unsigned dl = 0;
    char hex[65];
    EVP_DigestFinal_ex(sha, d, &dl);
    fileio_hex(d, 32, hex);
    if (strcmp(hex, s->sha256) != 0) {
      snprintf(err, errlen,
               "%s: sha256 %s, but the shard manifest says %s: the shard "
               "changed after the shard stage wrote it; run shard again",
               s->src, hex, s->sha256);
      rc = -1;
    }
  }
  EVP_MD_CTX_free(sha);
  free(line);
  free(text);
  fclose(fp);
  return rc;
}

static int train_doc(void *arg, const char *text, size_t len, char *err,
                     size_t errlen) {
  if (bpe_trainer_add(arg, text, len) != 0) {
    snprintf(err, errlen, "out of memory while counting pieces");
    return -1;
  }
  return 0;
}

typedef struct train_worker {
  job *j;
  bpe_trainer *trainer;
} train_worker;

static void *train_thread(void *arg) {
  train_worker *tw = arg;
  job *j = tw->j;
  char err[1024];
  for (;;) {
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->nshards || atomic_load(&j->failed))
      break;
    shard *s = &j->shards[i];
    if (strcmp(s->split, "train") != 0)
      continue;
    int rc = read_shard(j, s, j->sample_per_shard, train_doc, tw->trainer,
                        err, sizeof err);
    if (rc < 0)
      job_fail(j, err);
    if (rc != 0)
      break;
  }
  return NULL;
}

typedef struct encode_state {
  bpe_encoder *enc;
  bpe_ids ids;
  tokfile_writer *w;
  shard *s;
} encode_state;

static int encode_doc(void *arg, const char *text, size_t len, char *err,
                      size_t errlen) {
  encode_state *es = arg;
  es->ids.n = 0;
  if (bpe_encode(es->enc, text, len, &es->ids) != 0) {
    snprintf(err, errlen, "out of memory while encoding");
    return -1;
  }
  if (tokfile_writer_add_doc(es->w, es->ids.v, es->ids.n, err, errlen) != 0)
    return -1;
  es->s->text_bytes += len;
  return 0;
}

static void *encode_thread(void *arg) {
  job *j = arg;
  char err[1024];
  encode_state es = {.enc = bpe_encoder_create(j->tok)};
  if (!es.enc) {
    job_fail(j, "out of memory creating an encoder");
    return NULL;
  }
  for (;;) {
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->nshards || atomic_load(&j->failed))
      break;
    shard *s = &j->shards[i];
    es.s = s;
    if (tokfile_writer_create(s->dst, bpe_vocab_size(j->tok), j->eot_id,
                              &es.w, err, sizeof err) != 0) {
      job_fail(j, err);
      break;
    }
    int rc = read_shard(j, s, 0, encode_doc, &es, err, sizeof err);
    if (rc != 0) {
      tokfile_writer_abort(es.w);
      if (rc < 0)
        job_fail(j, err);
      break;
    }
    tokfile_info info;
    if (tokfile_writer_finish(es.w, &info, err, sizeof err) != 0) {
      job_fail(j, err);
      break;
    }
    s->docs = info.n_docs;
    s->tokens = info.n_tokens;
    /* The manifest lists what sha256sum prints for the whole file; the
     * header's checksum covers the tokens only. */
    if (sha256_file(s->dst, s->tok_sha256) != 0) {
      snprintf(err, sizeof err, "%s: cannot read it back", s->dst);
      job_fail(j, err);
      break;
    }
  }
  bpe_ids_free(&es.ids);
  bpe_encoder_destroy(es.enc);
  return NULL;
}

/* Runs fn on j->threads threads (arg i of args, or j itself when args is
 * NULL) while reporting progress from this thread, as the host wants. */
static void run_workers(job *j, void *(*fn)(void *), void **args,
                        const char *what) {
  pthread_t *tids = calloc((size_t)j->threads, sizeof *tids);
  int started = 0;
  atomic_store(&j->next, 0);
  atomic_store(&j->done_bytes, 0);
  for (int i = 0; tids && i < j->threads; i++, started++)
    if (pthread_create(&tids[i], NULL, fn, args ? args[i] : j) != 0)
      break;
  if (started == 0)
    job_fail(j, "could not start worker threads");
  /* Progress twice a second until every worker has taken its last shard
   * and finished it. */
  for (int live = started; live > 0;) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 500000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    if (pthread_timedjoin_np(tids[live - 1], NULL, &ts) == 0) {
      live--;
      continue;
    }
    char msg[128];
    uint64_t done = atomic_load(&j->done_bytes);
    snprintf(msg, sizeof msg, "%s %.1f of %.1f MB", what, done / 1e6,
             j->total_bytes / 1e6);
    j->host->progress(j->ctx,
                      j->total_bytes ? (double)done / j->total_bytes : 0, msg);
  }
  free(tids);
}

/* ---- The shard manifest ---- */

static void free_shards(shard *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(v[i].split);
    free(v[i].src);
    free(v[i].name);
    free(v[i].dst);
  }
  free(v);
}

/* Reads the shard stage's manifest.json in dir: the shards, train first.
 * Names a missing or foreign manifest clearly. */
static int load_shard_manifest(const char *shards_param, const char *dag_dir,
                               const char *out_dir, shard **out, size_t *nout,
                               char *err, size_t errlen) {
  char *base = shards_param[0] == '/' ? strdup(shards_param)
                                      : fileio_join(dag_dir, shards_param);
  struct stat st;
  char *manifest = NULL, *dir = NULL;
  if (base && stat(base, &st) == 0 && S_ISDIR(st.st_mode)) {
    dir = strdup(base);
    manifest = fileio_join(base, "manifest.json");
  } else if (base) {
    manifest = strdup(base);
    char *slash = strrchr(base, '/');
    dir = slash ? strndup(base, (size_t)(slash - base)) : strdup(".");
  }
  free(base);
  int rc = -1;
  cJSON *root = NULL;
  char *text = manifest && dir ? fileio_read_all(manifest, NULL, err, errlen) : NULL;
  if (!text)
    goto done;
  root = cJSON_Parse(text);
  free(text);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "shards");
  if (!root || !cJSON_IsString(fmt) ||
      strcmp(fmt->valuestring, "dagrun-shards") != 0 || !cJSON_IsArray(arr)) {
    snprintf(err, errlen,
             "%s: not a shard manifest (expected JSON with \"format\": "
             "\"dagrun-shards\" and a \"shards\" list, as the shard stage "
             "writes)", manifest);
    goto done;
  }
  size_t n = (size_t)cJSON_GetArraySize(arr), k = 0;
  shard *v = calloc(n ? n : 1, sizeof *v);
  if (!v) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  /* Train shards first, so training can start on them in order. */
  for (int pass = 0; pass < 2; pass++) {
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
      const cJSON *split = cJSON_GetObjectItemCaseSensitive(it, "split");
      const cJSON *path = cJSON_GetObjectItemCaseSensitive(it, "path");
      const cJSON *sha = cJSON_GetObjectItemCaseSensitive(it, "sha256");
      if (!cJSON_IsString(split) || !cJSON_IsString(path) ||
          strchr(path->valuestring, '/') ||
          (strcmp(split->valuestring, "train") != 0 &&
           strcmp(split->valuestring, "val") != 0)) {
        snprintf(err, errlen,
                 "%s: a shard entry without a train/val split or with a bad "
                 "path", manifest);
        free_shards(v, k);
        goto done;
      }
      if ((strcmp(split->valuestring, "train") == 0) != (pass == 0))
        continue;
      shard *s = &v[k++];
      s->split = strdup(split->valuestring);
      s->name = strdup(path->valuestring);
      s->src = fileio_join(dir, path->valuestring);
      char *dot = strrchr(s->name, '.');
      size_t stem = dot ? (size_t)(dot - s->name) : strlen(s->name);
      char tokname[512];
      snprintf(tokname, sizeof tokname, "%.*s.tok", (int)stem, s->name);
      s->dst = fileio_join(out_dir, tokname);
      if (cJSON_IsString(sha) && strlen(sha->valuestring) == 64)
        memcpy(s->sha256, sha->valuestring, 65);
      struct stat sst;
      if (!s->split || !s->name || !s->src || !s->dst) {
        snprintf(err, errlen, "out of memory");
        free_shards(v, k);
        goto done;
      }
      if (stat(s->src, &sst) != 0) {
        snprintf(err, errlen, "%s lists %s, which is missing: %s", manifest,
                 s->src, strerror(errno));
        free_shards(v, k);
        goto done;
      }
      s->bytes = (uint64_t)sst.st_size;
    }
  }
  if (k == 0 || strcmp(v[0].split, "train") != 0) {
    snprintf(err, errlen, "%s lists no train shards", manifest);
    free_shards(v, k);
    goto done;
  }
  *out = v;
  *nout = k;
  rc = 0;
done:
  cJSON_Delete(root);
  free(manifest);
  free(dir);
  return rc;
}

/* ---- Output ---- */

/* Removes token files of an earlier attempt, so out/ lists only this
 * attempt's shards. */
static void remove_stale_tok_files(const char *out_dir) {
  DIR *d = opendir(out_dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if ((n > 4 && strcmp(e->d_name + n - 4, ".tok") == 0) ||
        (n > 8 && strcmp(e->d_name + n - 8, ".tok.tmp") == 0)) {
      char *p = fileio_join(out_dir, e->d_name);
      if (p)
        unlink(p);
      free(p);
    }
  }
  closedir(d);
}

/* ---- The stage ---- */

typedef struct settings {
  const char *shards, *tokenizer, *vocab, *merges;
  int64_t vocab_size, min_frequency, threads;
  uint64_t train_sample;
  const char **specials;
  size_t nspecials;
} settings;

static int read_settings(dagrun_ctx *ctx, const dagrun_host *host,
                         settings *st) {
  const char *sample = "0";
  memset(st, 0, sizeof *st);
  host->param_string(ctx, "shards", &st->shards);
  host->param_int(ctx, "vocab_size", &st->vocab_size);
  host->param_int(ctx, "min_frequency", &st->min_frequency);
  host->param_int(ctx, "threads", &st->threads);
  host->param_string(ctx, "train_sample", &sample);
  if (host->param_string(ctx, "tokenizer", &st->tokenizer) != 0)
    st->tokenizer = NULL;
  if (host->param_string(ctx, "vocab", &st->vocab) != 0)
    st->vocab = NULL;
  if (host->param_string(ctx, "merges", &st->merges) != 0)
    st->merges = NULL;
  if (stagekit_parse_size(sample, &st->train_sample) != 0) {
    host->fail(ctx, "train_sample: '%s' is not a size (e.g. 0, 200MiB, 1GB)",
               sample);
    return -1;
  }
  if (!st->shards || !*st->shards) {
    host->fail(ctx, "shards is empty; give the shard task's output "
                    "directory, e.g. \"${tasks.shard.outputs.dir}\"");
    return -1;
  }
  if (!!st->vocab != !!st->merges) {
    host->fail(ctx, "vocab and merges go together: GPT-2's vocab.json and "
                    "merges.txt");
    return -1;
  }
  if (st->tokenizer && st->vocab) {
    host->fail(ctx, "give either tokenizer (a tokenizer.json) or vocab + "
                    "merges, not both");
    return -1;
  }
  size_t n = 0;
  host->param_list_size(ctx, "special_tokens", &n);
  st->specials = calloc(n ? n : 1, sizeof *st->specials);
  if (!st->specials) {
    host->fail(ctx, "out of memory");
    return -1;
  }
  if (n == 0) {
    st->specials[st->nspecials++] = EOT_TEXT;
  }
  for (size_t i = 0; i < n; i++) {
    const char *z = NULL;
    host->param_list_item(ctx, "special_tokens", i, &z);
    if (!z || !*z) {
      host->fail(ctx, "special_tokens item %zu is empty", i);
      return -1;
    }
    st->specials[st->nspecials++] = z;
  }
  if (st->threads < 0 || st->threads > 1024) {
    host->fail(ctx, "threads must be 0 (one per CPU) to 1024, not %lld",
               (long long)st->threads);
    return -1;
  }
  if (st->threads == 0) {
    st->threads = stagekit_cpu_count();
  }
  if (!st->tokenizer && !st->vocab) {
    if (st->vocab_size < 256 + (int64_t)st->nspecials ||
        st->vocab_size > 0x7fffffff) {
      host->fail(ctx,
                 "vocab_size %lld is too small: a byte-level tokenizer needs "
                 "256 byte tokens plus %zu special token(s)",
                 (long long)st->vocab_size, st->nspecials);
      return -1;
    }
    if (st->min_frequency < 1) {
      host->fail(ctx, "min_frequency must be at least 1");
      return -1;
    }
  }
  return 0;
}

/* Trains a tokenizer on the train shards, one trainer per thread, their
 * counts combined in thread order (the sums are the same whichever thread
 * read which shard, so the result is deterministic). */
static int train_tokenizer(job *j, const settings *st, char *err,
                           size_t errlen) {
  size_t ntrain = 0;
  uint64_t train_bytes = 0;
  for (size_t i = 0; i < j->nshards; i++)
    if (strcmp(j->shards[i].split, "train") == 0) {
      ntrain++;
      train_bytes += j->shards[i].bytes;
    }
  j->sample_per_shard =
      st->train_sample > 0 ? (st->train_sample + ntrain - 1) / ntrain : 0;
  j->total_bytes = st->train_sample > 0 && st->train_sample < train_bytes
                       ? st->train_sample
                       : train_bytes;
  j->topts = (bpe_train_opts){
      .vocab_size = (uint32_t)st->vocab_size,
      .min_frequency = (uint64_t)st->min_frequency,
      .specials = st->specials,
      .nspecials = st->nspecials,
  };
  int nt = j->threads;
  train_worker *tw = calloc((size_t)nt, sizeof *tw);
  void **args = calloc((size_t)nt, sizeof *args);
  int rc = -1;
  if (!tw || !args) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  for (int i = 0; i < nt; i++) {
    tw[i].j = j;
    tw[i].trainer = bpe_trainer_create(&j->topts);
    args[i] = &tw[i];
    if (!tw[i].trainer) {
      snprintf(err, errlen, "out of memory");
      goto done;
    }
  }
  run_workers(j, train_thread, args, "counting pieces in");
  if (atomic_load(&j->failed)) {
    snprintf(err, errlen, "%s", j->err);
    goto done;
  }
  if (j->host->cancelled(j->ctx)) {
    snprintf(err, errlen, "cancelled");
    goto done;
  }
  for (int i = 1; i < nt; i++)
    if (bpe_trainer_merge(tw[0].trainer, tw[i].trainer) != 0) {
      snprintf(err, errlen, "out of memory combining counts");
      goto done;
    }
  j->host->progress(j->ctx, 1.0, "learning merges");
  rc = bpe_trainer_finish(tw[0].trainer, &j->tok, err, errlen);
done:
  for (int i = 0; tw && i < nt; i++)
    bpe_trainer_destroy(tw[i].trainer);
  free(tw);
  free(args);
  return rc;
}

static char *manifest_json(const job *j, const settings *st,
                           const char *source, const char *tok_sha,
                           double train_s, double encode_s) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", "dagrun-tokens");
  cJSON_AddNumberToObject(m, "version", 1);
  cJSON *t = cJSON_AddObjectToObject(m, "tokenizer");
  cJSON_AddStringToObject(t, "path", "tokenizer.json");
  cJSON_AddStringToObject(t, "sha256", tok_sha);
  cJSON_AddStringToObject(t, "source", source);
  cJSON_AddNumberToObject(t, "vocab_size", bpe_vocab_size(j->tok));
  cJSON_AddNumberToObject(t, "merges", (double)bpe_merge_count(j->tok));
  if (j->eot_id != TOKFILE_NO_EOT)
    cJSON_AddNumberToObject(t, "eot_id", j->eot_id);
  else
    cJSON_AddNullToObject(t, "eot_id");
  if (!st->tokenizer && !st->vocab) {
    cJSON_AddNumberToObject(t, "min_frequency", (double)st->min_frequency);
    cJSON_AddNumberToObject(t, "train_sample_bytes", (double)st->train_sample);
  }
  cJSON_AddStringToObject(m, "dtype",
                          bpe_vocab_size(j->tok) <= 65536 ? "uint16" : "uint32");
  cJSON *arr = cJSON_AddArrayToObject(m, "shards");
  uint64_t tot[2][3] = {{0}}; /* [train|val][docs, tokens, text bytes] */
  for (size_t i = 0; i < j->nshards; i++) {
    const shard *s = &j->shards[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "split", s->split);
    const char *slash = strrchr(s->dst, '/');
    cJSON_AddStringToObject(o, "path", slash ? slash + 1 : s->dst);
    cJSON_AddStringToObject(o, "source", s->name);
    cJSON_AddNumberToObject(o, "documents", (double)s->docs);
    cJSON_AddNumberToObject(o, "tokens", (double)s->tokens);
    cJSON_AddNumberToObject(o, "text_bytes", (double)s->text_bytes);
    cJSON_AddStringToObject(o, "sha256", s->tok_sha256);
    cJSON_AddItemToArray(arr, o);
    int k = strcmp(s->split, "train") == 0 ? 0 : 1;
    tot[k][0] += s->docs;
    tot[k][1] += s->tokens;
    tot[k][2] += s->text_bytes;
  }
  cJSON *sum = cJSON_AddObjectToObject(m, "totals");
  cJSON_AddNumberToObject(sum, "train_documents", (double)tot[0][0]);
  cJSON_AddNumberToObject(sum, "train_tokens", (double)tot[0][1]);
  cJSON_AddNumberToObject(sum, "val_documents", (double)tot[1][0]);
  cJSON_AddNumberToObject(sum, "val_tokens", (double)tot[1][1]);
  uint64_t text = tot[0][2] + tot[1][2];
  cJSON_AddNumberToObject(sum, "text_bytes", (double)text);
  /* Compression without the <|endoftext|> markers, which are ours, not
   * the text's. */
  uint64_t marks = j->eot_id != TOKFILE_NO_EOT ? tot[0][0] + tot[1][0] : 0;
  cJSON_AddNumberToObject(sum, "tokens_per_byte",
                          text ? (double)(tot[0][1] + tot[1][1] - marks) / text
                               : 0);
  cJSON *tm = cJSON_AddObjectToObject(m, "timing");
  cJSON_AddNumberToObject(tm, "threads", j->threads);
  cJSON_AddNumberToObject(tm, "train_seconds", train_s);
  cJSON_AddNumberToObject(tm, "encode_seconds", encode_s);
  cJSON_AddNumberToObject(tm, "encode_mb_per_s",
                          encode_s > 0 ? text / 1e6 / encode_s : 0);
  char *out = cJSON_Print(m);
  cJSON_Delete(m);
  return out;
}

/* out/tokenizer.json: a given tokenizer.json byte for byte (src), else
 * tok as bpe_save_hf writes it. A given file is copied, not written
 * again, because a tokenizer's identity is its file's sha256 (the
 * manifest's, which train records in its checkpoints and every stage
 * that puts a model with data compares): a model trained elsewhere with
 * that file, such as a Hugging Face directory's, must match the data
 * tokenized with it. 0, or -1 with err. */
static int write_tokenizer(const bpe *tok, const char *src, const char *dst,
                           char *err, size_t errlen) {
  if (!src)
    return bpe_save_hf(tok, dst, err, errlen);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", dst);
  if (fileio_copy_durable(src, tmp, err, errlen) != 0)
    return -1;
  if (rename(tmp, dst) != 0) {
    snprintf(err, errlen, "%s: %s", dst, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  settings st;
  if (read_settings(ctx, host, &st) != 0) {
    free(st.specials);
    return EXIT_BAD_PARAMS;
  }
  const char *out_dir = host->dir(ctx, DAGRUN_DIR_OUT);
  const char *dag_dir = host->dir(ctx, DAGRUN_DIR_DAG);
  char err[2048] = "";
  int status = EXIT_FAILED;
  job j = {.ctx = ctx, .host = host, .threads = (int)st.threads};
  pthread_mutex_init(&j.lock, NULL);
  char *manifest = NULL, *src_tok = NULL;
  if (load_shard_manifest(st.shards, dag_dir, out_dir, &j.shards, &j.nshards,
                          err, sizeof err) != 0) {
    host->fail(ctx, "%s", err);
    goto done;
  }

  /* The tokenizer: loaded, or trained on the train shards. */
  double t0 = clock_monotonic(), train_s = 0;
  const char *source;
  if (st.tokenizer || st.vocab) {
    char *paths[3] = {NULL, NULL, NULL};
    const char *given[3] = {st.tokenizer, st.vocab, st.merges};
    for (int i = 0; i < 3; i++)
      if (given[i])
        paths[i] = given[i][0] == '/' ? strdup(given[i]) : fileio_join(dag_dir, given[i]);
    int rc = st.tokenizer
                 ? bpe_load_hf(paths[0], &j.tok, err, sizeof err)
                 : bpe_load_gpt2(paths[1], paths[2], &j.tok, err, sizeof err);
    src_tok = paths[0];
    for (int i = 1; i < 3; i++)
      free(paths[i]);
    if (rc != 0) {
      host->fail(ctx, "%s", err);
      goto done;
    }
    source = st.tokenizer ? "tokenizer.json" : "gpt2";
    host->log(ctx, DAGRUN_LOG_INFO, "loaded a tokenizer of %u ids (%zu merges)",
              bpe_vocab_size(j.tok), bpe_merge_count(j.tok));
  } else {
    host->log(ctx, DAGRUN_LOG_INFO,
              "training a %lld-id BPE tokenizer on %s of the train shards "
              "with %d threads",
              (long long)st.vocab_size,
              st.train_sample ? "a sample" : "all", j.threads);
    if (train_tokenizer(&j, &st, err, sizeof err) != 0) {
      host->fail(ctx, "training the tokenizer: %s", err);
      goto done;
    }
    train_s = clock_monotonic() - t0;
    source = "trained";
    host->log(ctx, DAGRUN_LOG_INFO,
              "trained %zu merges in %.2f s (%u ids)", bpe_merge_count(j.tok),
              train_s, bpe_vocab_size(j.tok));
    /* The corpus ran out of pairs to merge: the model downstream gets
     * fewer ids than the DAG asked for, which deserves more than INFO. */
    if ((int64_t)bpe_vocab_size(j.tok) < st.vocab_size)
      host->log(ctx, DAGRUN_LOG_WARN,
                "the tokenizer has %u ids, not the vocab_size %lld asked "
                "for: the train shards hold no more pairs to merge (a "
                "corpus too small for that vocabulary)",
                bpe_vocab_size(j.tok), (long long)st.vocab_size);
    host->metric(ctx, "tokenizer_train_seconds", train_s, 0);
  }
  int64_t eot = bpe_special_id(j.tok, EOT_TEXT);
  j.eot_id = eot >= 0 ? (uint32_t)eot : TOKFILE_NO_EOT;
  if (eot < 0)
    host->log(ctx, DAGRUN_LOG_WARN,
              "the tokenizer has no %s token: documents in the token files "
              "are not separated", EOT_TEXT);

  char *tok_path = fileio_join(out_dir, "tokenizer.json");
  char tok_sha[65] = "";
  if (!tok_path ||
      write_tokenizer(j.tok, src_tok, tok_path, err, sizeof err) != 0 ||
      sha256_file(tok_path, tok_sha) != 0) {
    host->fail(ctx, "writing tokenizer.json: %s", err);
    free(tok_path);
    goto done;
  }

  /* Encode every shard, train and validation. */
  remove_stale_tok_files(out_dir);
  j.total_bytes = 0;
  for (size_t i = 0; i < j.nshards; i++)
    j.total_bytes += j.shards[i].bytes;
  double t1 = clock_monotonic();
  run_workers(&j, encode_thread, NULL, "encoded");
  double encode_s = clock_monotonic() - t1;
  if (atomic_load(&j.failed) || host->cancelled(ctx)) {
    host->fail(ctx, "%s", atomic_load(&j.failed) ? j.err : "cancelled");
    remove_stale_tok_files(out_dir);
    free(tok_path);
    goto done;
  }

  manifest = manifest_json(&j, &st, source, tok_sha, train_s, encode_s);
  char *mpath = fileio_join(out_dir, "manifest.json");
  if (!manifest || !mpath || fileio_write_atomic(mpath, manifest, strlen(manifest), err,
                                     sizeof err) != 0) {
    host->fail(ctx, "writing manifest.json: %s", err);
    free(mpath);
    free(tok_path);
    goto done;
  }
  uint64_t train_tokens = 0, text = 0;
  for (size_t i = 0; i < j.nshards; i++) {
    text += j.shards[i].text_bytes;
    if (strcmp(j.shards[i].split, "train") == 0)
      train_tokens += j.shards[i].tokens;
  }
  host->metric(ctx, "encode_seconds", encode_s, 0);
  host->metric(ctx, "encode_mb_per_s", encode_s > 0 ? text / 1e6 / encode_s : 0,
               0);
  host->metric(ctx, "train_tokens", (double)train_tokens, 0);
  host->log(ctx, DAGRUN_LOG_INFO,
            "encoded %zu shards, %.1f MB of text, in %.2f s (%.1f MB/s); "
            "%llu train tokens",
            j.nshards, text / 1e6, encode_s,
            encode_s > 0 ? text / 1e6 / encode_s : 0,
            (unsigned long long)train_tokens);
  char num[32];
  host->output(ctx, "dir", out_dir);
  host->output(ctx, "tokenizer", tok_path);
  host->output(ctx, "manifest", mpath);
  snprintf(num, sizeof num, "%u", bpe_vocab_size(j.tok));
  host->output(ctx, "vocab_size", num);
  snprintf(num, sizeof num, "%llu", (unsigned long long)train_tokens);
  host->output(ctx, "train_tokens", num);
  free(mpath);
  free(tok_path);
  status = 0;
done:
  free(manifest);
  free(src_tok);
  bpe_destroy(j.tok);
  free_shards(j.shards, j.nshards);
  free(st.specials);
  pthread_mutex_destroy(&j.lock);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "tokenize",
    "1.0.0",
    "Trains or loads a GPT-2 style byte-level BPE tokenizer and encodes the "
    "shards into token files.",
    params,
    run,
    NULL, /* no choices */
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
