/*
 * lmeval: a language model's evaluations for the eval stage, `dagrun
 * eval` and the train stage's periodic eval: perplexity on a text file
 * or on a tokenize stage's directory, and multiple-choice accuracy on a
 * JSONL task in HellaSwag's layout. The numbers come from
 * model/evaluate.h; this module reads the inputs, tokenizes them and
 * writes the per-item results.
 *
 * Perplexity: every token but the first of each text (a text file is
 * one text, a token file one stream of documents) scored once, in
 * windows of T + 1 tokens (evaluate_tokens), so that loss is the mean
 * nats per token and perplexity exp(loss).
 *
 * Multiple choice, one JSON object a line (empty lines skipped), with
 * Hugging Face's and llm.c's HellaSwag field names:
 *   {"ctx": "A man is sitting on a roof. he",
 *    "endings": ["is using wrap ...", "...", "...", "..."], "label": 3}
 * "context" is accepted for "ctx"; label is an integer or a string of
 * one (Hugging Face's HellaSwag has "3"); 2 or more endings (HellaSwag
 * has 4). Tokens: the context's, and each ending's with a space before
 * it (as llm.c's hellaswag.py encodes " " + ending), unless the context
 * ends or the ending starts with whitespace. The prediction is the
 * ending of the lowest mean loss per token given the context
 * (evaluate_endings; llm.c's acc_norm); ties go to the lowest index.
 * Accuracy has a 95% Wilson score interval (Wilson 1927), which stays
 * inside [0, 1] and is right at small n where the normal one is not;
 * chance is the mean over items of 1 / endings.
 *
 * One thread; the model is borrowed and only read.
 */
#ifndef DAGRUN_LMEVAL_H
#define DAGRUN_LMEVAL_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/modeldir.h"
#include "lib/bpe/bpe.h"
#include "model/evaluate.h"
#include "model/gpt.h"

typedef struct lmeval_ppl {
  double loss;       /* mean nats per token scored */
  double perplexity; /* exp(loss) */
  double accuracy;   /* tokens that were the model's likeliest */
  uint64_t tokens;   /* tokens scored */
} lmeval_ppl;

typedef struct lmeval_mc {
  size_t items, correct;
  double accuracy;        /* correct / items */
  double ci_low, ci_high; /* 95% Wilson interval of accuracy */
  double chance;          /* mean of 1 / endings */
} lmeval_mc;

/* How the perplexity is taken: windows of T tokens of context (0: the
 * model's block_size), B windows a forward, at most max_tokens scored
 * (0: all); cancelled (may be NULL) polled with arg between forwards. */
typedef struct lmeval_opts {
  int T, B;
  uint64_t max_tokens;
  int (*cancelled)(void *arg);
  void *arg;
} lmeval_opts;

/* The perplexity of m on the text file at path, tokenized by tok. 0, or
 * -1 with err naming the file (unreadable, under 2 tokens). */
int lmeval_text(gpt *m, const bpe *tok, const char *path, const lmeval_opts *o,
                lmeval_ppl *out, char *err, size_t errlen);

/* The perplexity of m on the token files of split ("val" or "train") of
 * the tokenize stage's directory dir (relative to base when not
 * absolute; common/tokdata.h), whose vocabulary must be the model's and,
 * when md (m's directory) is not NULL, whose tokenizer must be md's
 * (tokdata_fits_model). 0, or -1 with err. */
int lmeval_tokens(gpt *m, const modeldir_info *md, const char *base,
                  const char *dir, const char *split, const lmeval_opts *o,
                  lmeval_ppl *out, char *err, size_t errlen);

/* Scores the multiple-choice JSONL at path (format above) and writes one
 * JSON object a line per item to items_path (NULL: none; replaced
 * atomically): {"index": I, "label": L, "predicted": P, "correct": B,
 * "losses": [mean loss of each ending]}. 0, or -1 with err, which for a
 * bad item names path:line and the field. */
int lmeval_choices(gpt *m, const bpe *tok, const char *path,
                   const char *items_path, const lmeval_opts *o, lmeval_mc *out,
                   char *err, size_t errlen);

/* The summary of an evaluation as eval.json holds it (format
 * "dagrun-eval", version 1): "model", "step", then "perplexity": {source,
 * loss, perplexity, token_accuracy, tokens} when ppl is not NULL and
 * "choices": {source, items, correct, accuracy, ci95: [low, high],
 * chance, results} when mc is not NULL (results: items_path or null).
 * Pretty-printed JSON text (caller frees), or NULL out of memory. */
char *lmeval_summary(const char *model, int64_t step, const lmeval_ppl *ppl,
                     const char *ppl_source, const lmeval_mc *mc,
                     const char *mc_source, const char *items_path);

/* One evaluation as the eval stage and `dagrun eval` run it: the inputs
 * (strings borrowed; NULL or "" for one not asked for) and what came of
 * it. */
typedef struct lmeval_job {
  const char *model;     /* anything ckpt/modeldir.h opens */
  const char *tokenizer; /* a tokenizer.json; "": the model's */
  const char *text;      /* a text file to take the perplexity of */
  const char *data;      /* or a tokenize stage's directory ... */
  const char *split;     /* ... and its split, "val" or "train" */
  const char *choices;   /* a multiple-choice JSONL */
  const char *base;      /* what relative data paths are relative to */
  const char *out_dir;   /* eval.json and choices.jsonl go here; "": no
                            files */
  lmeval_opts o;
  /* Results: */
  modeldir_info md; /* the model opened; its skipped, for the caller to
                       warn, is set also when lmeval_run then fails */
  int have_ppl, have_mc;
  lmeval_ppl ppl;
  lmeval_mc mc;
  char *items_path; /* out_dir/choices.jsonl, or NULL */
  char *summary;    /* lmeval_summary's text */
} lmeval_job;

/* Opens and loads the model (and its tokenizer when text or choices
 * need it), takes the perplexity and scores the choices asked for, and
 * with an out_dir writes eval.json (the summary, atomically) and
 * choices.jsonl there. At least one of text, data and choices must be
 * set, and not both text and data. 0, or -1 with err; a bad input is
 * named in it (the model's path, the file's path:line), and a loss that
 * is not a finite number is an error too (after eval.json). Free with
 * lmeval_job_free either way. */
int lmeval_run(lmeval_job *j, char *err, size_t errlen);
void lmeval_job_free(lmeval_job *j);

/* The 95% Wilson score interval of k successes in n > 0 trials. */
void lmeval_wilson(size_t k, size_t n, double *low, double *high);

#endif /* DAGRUN_LMEVAL_H */
