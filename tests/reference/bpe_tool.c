/*
 * bpe_tool: a command-line driver of the tokenizer library, for the
 * reference tests (which compare its output with gpt-3-encoder and
 * Hugging Face's tokenizers.js) and for benchmarks.
 *
 *   bpe_tool pretok CASES.json        pieces of each string in a JSON array
 *                                     of strings, as a JSON array of arrays
 *   bpe_tool train FILE VOCAB OUT.json [THREADS]
 *                                     trains on FILE (one document per
 *                                     line), adds <|endoftext|>, saves
 *   bpe_tool convert VOCAB.json MERGES.txt OUT.json
 *   bpe_tool encode TOK FILE          ids of FILE's bytes, one line
 *   bpe_tool encode-specials TOK FILE as encode, specials' text -> ids
 *   bpe_tool bench TOK FILE [REPEAT]  single-thread encode speed (stderr)
 *   bpe_tool decode TOK               ids on stdin -> bytes on stdout
 *   bpe_tool decode-skip TOK          as decode, special tokens dropped
 *
 * TOK is a tokenizer.json, or VOCAB.json,MERGES.txt for GPT-2's files.
 */
#include "lib/bpe/bpe.h"
#include "lib/bpe/pretok.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) {
    perror(path);
    return NULL;
  }
  size_t cap = 1 << 20, n = 0;
  char *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n, f);
    if (n < cap)
      break;
    char *nb = realloc(b, cap *= 2);
    if (!nb)
      free(b);
    b = nb;
  }
  if (f != stdin)
    fclose(f);
  *len = n;
  return b;
}

static bpe *load(const char *spec) {
  char err[512];
  bpe *b = NULL;
  const char *comma = strchr(spec, ',');
  int rc;
  if (comma) {
    char *v = strndup(spec, (size_t)(comma - spec));
    rc = bpe_load_gpt2(v, comma + 1, &b, err, sizeof err);
    free(v);
  } else {
    rc = bpe_load_hf(spec, &b, err, sizeof err);
  }
  if (rc) {
    fprintf(stderr, "bpe_tool: %s\n", err);
    return NULL;
  }
  return b;
}

static int cmd_pretok(const char *path) {
  size_t len;
  char *buf = slurp(path, &len);
  if (!buf)
    return 1;
  cJSON *cases = cJSON_ParseWithLength(buf, len);
  free(buf);
  if (!cJSON_IsArray(cases)) {
    fprintf(stderr, "bpe_tool: %s: not a JSON array\n", path);
    cJSON_Delete(cases);
    return 1;
  }
  char err[256];
  pretok *p;
  if (pretok_create(&p, err, sizeof err)) {
    fprintf(stderr, "bpe_tool: %s\n", err);
    return 1;
  }
  cJSON *outv = cJSON_CreateArray();
  const cJSON *c;
  cJSON_ArrayForEach(c, cases) {
    const char *s = cJSON_IsString(c) ? c->valuestring : "";
    size_t *offs, n;
    cJSON *pieces = cJSON_CreateArray();
    if (pretok_split(p, s, strlen(s), &offs, &n, err, sizeof err) == 0) {
      for (size_t i = 0; i < n; i++) {
        char *piece = strndup(s + offs[i], offs[i + 1] - offs[i]);
        cJSON_AddItemToArray(pieces, cJSON_CreateString(piece));
        free(piece);
      }
      free(offs);
    }
    cJSON_AddItemToArray(outv, pieces);
  }
  char *text = cJSON_PrintUnformatted(outv);
  puts(text);
  cJSON_free(text);
  cJSON_Delete(outv);
  cJSON_Delete(cases);
  pretok_destroy(p);
  return 0;
}

typedef struct job {
  bpe_trainer *t;
  const char *text;
  size_t len;
  int rc;
} job;

/* Feeds one slice of the file, line by line, to its own trainer. */
static void *train_slice(void *arg) {
  job *j = arg;
  const char *p = j->text, *end = j->text + j->len;
  while (p < end && !j->rc) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl + 1 : end;
    j->rc = bpe_trainer_add(j->t, p, (size_t)(le - p));
    p = le;
  }
  return NULL;
}

static int cmd_train(const char *path, const char *vocab, const char *out,
                     int threads) {
  size_t len;
  char *text = slurp(path, &len);
  if (!text)
    return 1;
  const char *specials[] = {"<|endoftext|>"};
  bpe_train_opts o = {.vocab_size = (uint32_t)atol(vocab),
                      .min_frequency = 2,
                      .specials = specials,
                      .nspecials = 1};
  if (threads < 1)
    threads = 1;
  double t0 = now();
  job *jobs = calloc((size_t)threads, sizeof *jobs);
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  size_t start = 0;
  for (int i = 0; i < threads; i++) {
    size_t end = i == threads - 1 ? len : len / (size_t)threads * (i + 1);
    while (end < len && end > start && text[end - 1] != '\n')
      end++;
    if (end < start)
      end = start;
    jobs[i] = (job){bpe_trainer_create(&o), text + start, end - start, 0};
    start = end;
    pthread_create(&tid[i], NULL, train_slice, &jobs[i]);
  }
  int rc = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(tid[i], NULL);
    rc |= jobs[i].rc;
    if (i > 0)
      rc |= bpe_trainer_merge(jobs[0].t, jobs[i].t);
  }
  double t1 = now();
  char err[512];
  bpe *b = NULL;
  if (!rc && bpe_trainer_finish(jobs[0].t, &b, err, sizeof err)) {
    fprintf(stderr, "bpe_tool: %s\n", err);
    rc = 1;
  }
  double t2 = now();
  for (int i = 0; i < threads; i++)
    bpe_trainer_destroy(jobs[i].t);
  free(jobs);
  free(tid);
  free(text);
  if (!rc && bpe_save_hf(b, out, err, sizeof err)) {
    fprintf(stderr, "bpe_tool: %s\n", err);
    rc = 1;
  }
  if (!rc)
    fprintf(stderr,
            "trained %u ids (%zu merges) on %.1f MB: count %.2f s, merges "
            "%.2f s, total %.2f s\n",
            bpe_vocab_size(b), bpe_merge_count(b), len / 1e6, t1 - t0, t2 - t1,
            t2 - t0);
  bpe_destroy(b);
  return rc ? 1 : 0;
}

static int cmd_convert(const char *v, const char *m, const char *out) {
  char err[512];
  bpe *b;
  if (bpe_load_gpt2(v, m, &b, err, sizeof err) ||
      bpe_save_hf(b, out, err, sizeof err)) {
    fprintf(stderr, "bpe_tool: %s\n", err);
    return 1;
  }
  bpe_destroy(b);
  return 0;
}

static int cmd_encode(const char *tok, const char *path, int specials) {
  bpe *b = load(tok);
  size_t len;
  char *text = b ? slurp(path, &len) : NULL;
  if (!text) {
    bpe_destroy(b);
    return 1;
  }
  bpe_encoder *e = bpe_encoder_create(b);
  bpe_ids ids = {0};
  int rc = specials ? bpe_encode_with_specials(e, text, len, &ids)
                    : bpe_encode(e, text, len, &ids);
  if (rc)
    fprintf(stderr, "bpe_tool: encode failed\n");
  for (size_t i = 0; i < ids.n; i++)
    printf(i ? " %u" : "%u", ids.v[i]);
  printf("\n");
  bpe_ids_free(&ids);
  bpe_encoder_destroy(e);
  bpe_destroy(b);
  free(text);
  return rc ? 1 : 0;
}

static int cmd_bench(const char *tok, const char *path, int repeat) {
  bpe *b = load(tok);
  size_t len;
  char *text = b ? slurp(path, &len) : NULL;
  if (!text) {
    bpe_destroy(b);
    return 1;
  }
  if (repeat < 1)
    repeat = 1;
  bpe_encoder *e = bpe_encoder_create(b);
  bpe_ids ids = {0};
  double best = 1e30;
  int rc = 0;
  for (int r = 0; r < repeat && !rc; r++) {
    ids.n = 0;
    double t0 = now();
    /* Line by line, as documents arrive in the stage, so the time
     * includes per-call costs. */
    const char *p = text, *end = text + len;
    while (p < end && !rc) {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      const char *le = nl ? nl + 1 : end;
      rc = bpe_encode(e, p, (size_t)(le - p), &ids);
      p = le;
    }
    double dt = now() - t0;
    if (dt < best)
      best = dt;
  }
  fprintf(stderr,
          "encoded %.1f MB into %zu tokens (%.3f bytes/token): best of %d "
          "%.3f s, %.1f MB/s\n",
          len / 1e6, ids.n, (double)len / (double)(ids.n ? ids.n : 1), repeat,
          best, len / 1e6 / best);
  bpe_ids_free(&ids);
  bpe_encoder_destroy(e);
  bpe_destroy(b);
  free(text);
  return rc ? 1 : 0;
}

static int cmd_decode(const char *tok, int skip_special) {
  bpe *b = load(tok);
  if (!b)
    return 1;
  bpe_ids ids = {0};
  unsigned long v;
  while (scanf("%lu", &v) == 1) {
    if (ids.n == ids.cap) {
      ids.cap = ids.cap ? 2 * ids.cap : 1024;
      ids.v = realloc(ids.v, ids.cap * sizeof *ids.v);
    }
    ids.v[ids.n++] = (uint32_t)v;
  }
  char *out, err[256];
  size_t len;
  int rc = bpe_decode_skip(b, ids.v, ids.n, skip_special, &out, &len, err,
                           sizeof err);
  if (rc)
    fprintf(stderr, "bpe_tool: %s\n", err);
  else
    fwrite(out, 1, len, stdout);
  free(out);
  bpe_ids_free(&ids);
  bpe_destroy(b);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "pretok") && argc == 3)
    return cmd_pretok(argv[2]);
  if (!strcmp(c, "train") && (argc == 5 || argc == 6))
    return cmd_train(argv[2], argv[3], argv[4], argc == 6 ? atoi(argv[5]) : 1);
  if (!strcmp(c, "convert") && argc == 5)
    return cmd_convert(argv[2], argv[3], argv[4]);
  if (!strcmp(c, "encode") && argc == 4)
    return cmd_encode(argv[2], argv[3], 0);
  if (!strcmp(c, "encode-specials") && argc == 4)
    return cmd_encode(argv[2], argv[3], 1);
  if (!strcmp(c, "bench") && (argc == 4 || argc == 5))
    return cmd_bench(argv[2], argv[3], argc == 5 ? atoi(argv[4]) : 1);
  if (!strcmp(c, "decode") && argc == 3)
    return cmd_decode(argv[2], 0);
  if (!strcmp(c, "decode-skip") && argc == 3)
    return cmd_decode(argv[2], 1);
  fprintf(stderr, "usage: see the comment at the top of bpe_tool.c\n");
  return 2;
}
