/*
 * textgen: text from a model and its tokenizer, for the train and
 * validate stages' samples and for `dagrun generate`.
 *
 * The context is the prompt's ids, as Hugging Face's GPT-2 tokenizer
 * gives them (add_bos_token false, as the export's tokenizer_config.json
 * says) and nanoGPT's sample.py feeds them, so that a greedy text is the
 * one a Hugging Face user gets. <|endoftext|> comes first when bos is set
 * or the prompt is empty (the model saw it before every document, so it
 * is "the start of a document", and an empty context has no logits);
 * tokens are then drawn with
 * decode_sample (decode.h) at the temperature and top_k from a splitmix64
 * state seeded by seed, through a KV-cache decoder. Same model, prompt
 * and options: same text.
 */
#ifndef DAGRUN_TEXTGEN_H
#define DAGRUN_TEXTGEN_H

#include <stddef.h>
#include <stdint.h>

#include "lib/bpe/bpe.h"
#include "model/gpt.h"

typedef struct textgen_opts {
  const char *prompt;  /* may be "" */
  int max_tokens;      /* new tokens at most */
  double temperature;  /* <= 0: greedy */
  int top_k;           /* <= 0: all */
  uint64_t seed;
  int stop_at_eot;     /* stop when the model ends the document */
  int bos;             /* <|endoftext|> before the prompt */
  /* May be NULL: called with the context's ids (drawn 0), then with each
   * drawn id (drawn 1, <|endoftext|> included), so that a caller can show
   * exactly what the model was given and gave. */
  void (*on_ids)(void *arg, const uint32_t *ids, size_t n, int drawn);
  void *ids_arg;
} textgen_opts;

/* Generates after the prompt, calling emit with each new token's bytes
 * as soon as it is drawn (a token may end inside a UTF-8 character; the
 * next one completes it). The end-of-text token is not emitted. cancelled
 * (may be NULL) is polled per token with arg. Returns the number of new
 * tokens, or -1 with err. */
int textgen_run(gpt *m, const bpe *tok, const textgen_opts *o,
                void (*emit)(void *arg, const char *bytes, size_t n),
                int (*cancelled)(void *arg), void *arg, char *err,
                size_t errlen);

/* n samples into path (replaced atomically), sample i with seed o->seed
 * + i, each as
 *   === sample I (prompt: "P", temperature T, top_k K, seed S)
 *   P<generated text>
 *   <blank line>
 * 0, or -1 with err. */
int textgen_write_samples(gpt *m, const bpe *tok, const textgen_opts *o,
                          int n, const char *path, char *err, size_t errlen);

#endif /* DAGRUN_TEXTGEN_H */
