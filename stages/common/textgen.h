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
 * tokens are then drawn by model/sampler.h (repetition penalty,
 * temperature, top-k, top-p, in Hugging Face's order) from a splitmix64
 * state seeded by seed, through a KV-cache decoder. Same model, prompt
 * and options: same text.
 *
 * The repetition penalty's context is every id the model was given: the
 * <|endoftext|> start when there is one, the prompt's ids and every id
 * drawn, as Hugging Face penalizes every id of input_ids.
 *
 * Stop strings: the text ends at the first place where the generated
 * text (the prompt is not searched) contains one of them; the stop
 * string and whatever came after it in the same token are not emitted,
 * as vLLM does by default (include_stop_str_in_output false) and as
 * Hugging Face's pipelines strip it. Bytes that could be the start of a
 * stop string are held back until the next token shows they are not, so
 * emit never sees part of a stop string; they are emitted at the end when
 * the text ends otherwise. Matching is on bytes, after the tokens'
 * bytes are joined, so a stop string that ends inside a token is found.
 */
#ifndef DAGRUN_TEXTGEN_H
#define DAGRUN_TEXTGEN_H

#include <stddef.h>
#include <stdint.h>

#include <dagrun/plugin.h>

#include "lib/bpe/bpe.h"
#include "model/gpt.h"
#include "model/sampler.h"

typedef struct textgen_opts {
  const char *prompt;  /* may be "" */
  int max_tokens;      /* new tokens at most */
  sampler_opts sampling;   /* temperature, top_k, top_p, penalty */
  const char *const *stop; /* nstop non-empty strings, borrowed */
  size_t nstop;
  uint64_t seed;
  int stop_at_eot;     /* stop when the model ends the document */
  int bos;             /* <|endoftext|> before the prompt */
  /* May be NULL: called with the context's ids (drawn 0), then with each
   * drawn id (drawn 1, <|endoftext|> included), so that a caller can show
   * exactly what the model was given and gave. */
  void (*on_ids)(void *arg, const uint32_t *ids, size_t n, int drawn);
  void *ids_arg;
} textgen_opts;

/* The sampling options and the stop strings in range (sampler_check; no
 * stop string is empty). 0, or -1 with err naming the option. */
int textgen_check(const textgen_opts *o, char *err, size_t errlen);

/* The params that the train and validate stages share for their
 * samples, beside their own temperature and top_k, as entries of a
 * stage's dagrun_param_spec array. */
#define TEXTGEN_PARAM_SPECS                                                    \
  {"top_p", DAGRUN_PARAM_FLOAT, "1.0", 0,                                      \
   "Samples: nucleus sampling, keep the likeliest ids up to this mass, in "    \
   "(0, 1] (1: off)"},                                                         \
      {"repetition_penalty", DAGRUN_PARAM_FLOAT, "1.0", 0,                     \
       "Samples: divide a positive logit (multiply a negative one) of an id "  \
       "already in the context by this (1: off; above 1: fewer repeats)"},     \
  {                                                                            \
    "stop", DAGRUN_PARAM_LIST, NULL, 0,                                        \
        "Samples: strings that end a sample where the text contains one (cut " \
        "from the sample)"                                                     \
  }

/* Reads TEXTGEN_PARAM_SPECS's params into o (o->stop points into an
 * array the caller frees with free(); the strings are the host's, valid
 * until run() returns) and checks all of o (textgen_check). 0, or -1
 * with the attempt failed (h->fail) naming the param. */
int textgen_read_params(dagrun_ctx *ctx, const dagrun_host *h, textgen_opts *o);

/* Generates after the prompt, calling emit with each new token's bytes
 * as soon as it is drawn (a token may end inside a UTF-8 character; the
 * next one completes it; bytes that may begin a stop string wait, see
 * above). The end-of-text token is not emitted. cancelled
 * (may be NULL) is polled per token with arg. Returns the number of new
 * tokens, or -1 with err. */
int textgen_run(gpt *m, const bpe *tok, const textgen_opts *o,
                void (*emit)(void *arg, const char *bytes, size_t n),
                int (*cancelled)(void *arg), void *arg, char *err,
                size_t errlen);

/* n samples into path (replaced atomically), sample i with seed o->seed
 * + i, each as
 *   === sample I (prompt: "P", temperature T, top_k K, top_p P,
 *       repetition_penalty R[, stop ["S1", ...]], seed S)   (one line)
 *   P<generated text>
 *   <blank line>
 * 0, or -1 with err. */
int textgen_write_samples(gpt *m, const bpe *tok, const textgen_opts *o,
                          int n, const char *path, char *err, size_t errlen);

#endif /* DAGRUN_TEXTGEN_H */
