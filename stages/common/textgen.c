/*
 * textgen: text from a model and its tokenizer (see textgen.h), drawn
 * token by token through a KV-cache decoder (decode.h).
 *
 * Contract (textgen.h has it in full): textgen_run streams one text to
 * an emit callback and returns the tokens drawn, or -1 with err;
 * textgen_write_samples writes n of them, seeds seed .. seed + n - 1,
 * to one file, atomically (lib/fileio.h), so that a crash leaves the
 * last complete samples or none. The model is borrowed and only read;
 * nothing is kept between calls.
 *
 * Determinism: the sampler's state comes from the seed alone, so the
 * same model, prompt and options give the same text; the train and
 * validate stages rely on it to make their samples comparable between
 * runs.
 */
#include <cblas.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/fileio.h"
#include "cpu/decode.h"
#include "textgen.h"

/* The context: the prompt's ids, after <|endoftext|> (a document's start,
 * as in training) when asked for or when the prompt is empty and the
 * model has that id; then up to max_tokens draws, each pushed back into
 * the decoder but the last. */
int textgen_run(gpt *m, const bpe *tok, const textgen_opts *o,
                void (*emit)(void *arg, const char *bytes, size_t n),
                int (*cancelled)(void *arg), void *arg, char *err,
                size_t errlen) {
  int V = gpt_get_config(m)->vocab_size;
  int64_t eot = bpe_special_id(tok, "<|endoftext|>");
  if (eot >= V)
    eot = -1; /* not an id of this model: no start token, no stop */
  decoder *d = NULL;
  bpe_encoder *enc = bpe_encoder_create(tok);
  bpe_ids ids = {0};
  const char *prompt = o->prompt ? o->prompt : "";
  if (!enc || bpe_encode(enc, prompt, strlen(prompt), &ids) != 0) {
    snprintf(err, errlen, "textgen: out of memory encoding the prompt");
    bpe_encoder_destroy(enc);
    bpe_ids_free(&ids);
    return -1;
  }
  bpe_encoder_destroy(enc);
  if (eot < 0 && ids.n == 0) {
    snprintf(err, errlen,
             "textgen: nothing to start from: the prompt is empty and the "
             "tokenizer has no <|endoftext|> token; give a prompt");
    bpe_ids_free(&ids);
    return -1;
  }
  if (decoder_create(m, &d, err, errlen) != 0) {
    bpe_ids_free(&ids);
    return -1;
  }
  /* One token of work per call is too little for threads to pay, and on
   * a busy machine their barriers cost a time slice each. */
  int omp_prev = omp_get_max_threads();
  int blas_prev = openblas_get_num_threads();
  omp_set_num_threads(1);
  openblas_set_num_threads(1);

  const float *logits = NULL;
  int bos = eot >= 0 && (o->bos || ids.n == 0);
  if (bos)
    logits = decoder_push(d, (uint32_t)eot, err, errlen);
  for (size_t i = 0; i < ids.n && (logits || (i == 0 && !bos)); i++)
    logits = decoder_push(d, ids.v[i], err, errlen);
  if (o->on_ids) {
    uint32_t start = (uint32_t)eot;
    if (bos)
      o->on_ids(o->ids_arg, &start, 1, 0);
    o->on_ids(o->ids_arg, ids.v, ids.n, 0);
  }
  bpe_ids_free(&ids);

  int n = 0, rc = logits ? 0 : -1;
  uint64_t rng = o->seed;
  for (int k = 0; rc == 0 && k < o->max_tokens; k++) {
    if (cancelled && cancelled(arg)) {
      snprintf(err, errlen, "textgen: cancelled after %d tokens", n);
      rc = -1;
      break;
    }
    uint32_t id = decode_sample(logits, V, o->temperature, o->top_k, &rng);
    if (o->on_ids)
      o->on_ids(o->ids_arg, &id, 1, 1);
    if (eot >= 0 && id == (uint32_t)eot) {
      if (o->stop_at_eot)
        break;
    } else {
      size_t len = 0;
      const char *bytes = bpe_token_bytes(tok, id, &len);
      if (bytes && len)
        emit(arg, bytes, len);
    }
    n++;
    if (k + 1 < o->max_tokens && !(logits = decoder_push(d, id, err, errlen)))
      rc = -1;
  }
  omp_set_num_threads(omp_prev);
  openblas_set_num_threads(blas_prev);
  decoder_destroy(d);
  return rc == 0 ? n : -1;
}

/* A growing text buffer; a failed allocation is remembered, not fatal
 * at once (emit cannot fail). */
typedef struct textbuf {
  char *p;
  size_t n, cap;
  int oom;
} textbuf;

static void buf_add(textbuf *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void buf_printf(textbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void buf_printf(textbuf *b, const char *fmt, ...) {
  char small[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    buf_add(b, small, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    b->oom = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  buf_add(b, big, (size_t)n);
  free(big);
}

static void emit_to_buf(void *arg, const char *bytes, size_t n) {
  buf_add(arg, bytes, n);
}

/* Each sample is headed by its prompt and settings, so that a reader of
 * samples.txt can reproduce one with `dagrun generate --seed`. The text
 * is collected in memory and written at once: samples are small, and a
 * single atomic write never leaves half a file. */
int textgen_write_samples(gpt *m, const bpe *tok, const textgen_opts *o, int n,
                          const char *path, char *err, size_t errlen) {
  textbuf b = {0};
  const char *prompt = o->prompt ? o->prompt : "";
  for (int i = 0; i < n; i++) {
    textgen_opts so = *o;
    so.seed = o->seed + (uint64_t)i;
    buf_printf(&b,
               "=== sample %d (prompt: \"%s\", temperature %g, top_k %d, "
               "seed %llu)\n%s",
               i + 1, prompt, o->temperature, o->top_k,
               (unsigned long long)so.seed, prompt);
    if (textgen_run(m, tok, &so, emit_to_buf, NULL, &b, err, errlen) < 0) {
      free(b.p);
      return -1;
    }
    buf_add(&b, "\n\n", 2);
  }
  if (b.oom) {
    snprintf(err, errlen, "%s: out of memory for the samples' text", path);
    free(b.p);
    return -1;
  }
  int rc = fileio_write_atomic(path, b.p ? b.p : "", b.n, err, errlen);
  free(b.p);
  return rc == 0 ? 0 : -1;
}
