/*
 * dagrun-generate: text from a model directory, streamed to stdout as it
 * is drawn. `dagrun generate ...` runs it (orchestrator/main.c), so that
 * the orchestrator itself does not link the engine.
 *
 * It is a program, not a stage: a person asks for text at a terminal,
 * and a DAG's tasks make their samples through the same library
 * (common/textgen.h) inside train and validate.
 *
 * Contract. Reads: MODEL_DIR (anything ckpt/modeldir.h opens: a
 * checkpoint, a directory of checkpoints and its latest valid one, a
 * promoted model, a Hugging Face GPT-2 directory) and its tokenizer, or
 * the one --tokenizer names. Writes nothing to disk. stdout gets the
 * prompt and the generated text only, flushed token by token so that a
 * pipe or a terminal sees it as it comes; stderr gets what was loaded,
 * the seed, and the speed, so that redirecting stdout keeps only text.
 *
 * Without --seed the seed is random and printed: every call gives new
 * text, and the printed seed gives that text again.
 *
 * Sampling (model/sampler.h): repetition penalty, temperature, top-k,
 * top-p, in Hugging Face's order; --stop strings end the text and are
 * cut from it (common/textgen.h).
 *
 * Exit status: 0; 1 (EXIT_FAILED) when the model, its tokenizer or the
 * generation fails, or stdout could not be written; 2 (EXIT_USAGE) for
 * bad usage, with a message and a pointer to --help; --help itself
 * exits 0.
 */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/modeldir.h"
#include "common/stagekit.h"
#include "common/textgen.h"
#include "lib/bpe/bpe.h"
#include "lib/clock.h"
#include "lib/exitcode.h"
#include "model/gpt.h"

static const char usage_text[] =
    "usage: dagrun generate MODEL_DIR [options]\n"
    "\n"
    "Writes text from a model to stdout, token by token. MODEL_DIR is a\n"
    "checkpoint, a directory of checkpoints (its latest valid one), a\n"
    "promoted model or a Hugging Face GPT-2 or Llama directory.\n"
    "\n"
    "  --prompt TEXT        text to continue (default: a new document)\n"
    "  --tokens N           new tokens at most (default 200)\n"
    "  --temperature T      sampling temperature (default 0.8; 0 = greedy,\n"
    "                       the likeliest token every time)\n"
    "  --top-k K            sample among the K likeliest (default 40; 0 = "
    "all)\n"
    "  --top-p P            nucleus sampling: among the likeliest ids up to\n"
    "                       probability mass P, in (0, 1] (default 1: off)\n"
    "  --repetition-penalty R\n"
    "                       divide the positive logits (multiply the\n"
    "                       negative ones) of ids already in the context by\n"
    "                       R > 0 (default 1: off; 1.2 is common)\n"
    "  --stop S             end the text where it contains S, S not written\n"
    "                       (repeatable: the first of them to appear)\n"
    "  --seed S             the draws' seed (default: random, printed on\n"
    "                       stderr, so that a text can be made again)\n"
    "  --tokenizer PATH     a tokenizer.json (default: the model's)\n"
    "  --no-stop            go on past the end of a document\n"
    "  --bos                put <|endoftext|> before the prompt (default:\n"
    "                       the prompt alone, as Hugging Face's GPT-2\n"
    "                       tokenizer gives it; an empty prompt always\n"
    "                       starts with it)\n"
    "  --ids                write the context's and the drawn token ids on\n"
    "                       stderr\n"
    "  --threads N          threads for loading the model (generation runs\n"
    "                       on one: one token is too little work to share)\n"
    "  -h, --help           this text\n";

/* A usage error: the message (printf's fmt and args) and where help
 * is, on stderr; returns EXIT_USAGE for main to exit with. */
static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "dagrun generate: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(see dagrun generate --help)\n");
  va_end(ap);
  return EXIT_USAGE;
}

/* A whole-string integer in [lo, hi]. */
static int parse_ll(const char *z, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(z, &end, 10);
  if (!*z || *end || errno || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* A seed for a run without --seed, from the kernel's entropy (the time
 * and pid where that fails: a seed needs to differ, not to be secret). */
static uint64_t random_seed(void) {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s)
    s = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
  /* Printable and typeable: 53 bits are plenty of seeds. */
  return s >> 11;
}

/* textgen_run's emit: each token's bytes to stdout at once (flushed:
 * stdout is fully buffered when it is a pipe, and the text should
 * stream). */
static void emit_stdout(void *arg, const char *bytes, size_t n) {
  (void)arg;
  fwrite(bytes, 1, n, stdout);
  fflush(stdout);
}

/* textgen's on_ids for --ids: the context's ids, then " |" and each drawn
 * id, on one stderr line that main ends. */
static void ids_stderr(void *arg, const uint32_t *ids, size_t n, int drawn) {
  int *bar = arg;
  if (drawn && !*bar) {
    fputs(" |", stderr);
    *bar = 1;
  }
  for (size_t i = 0; i < n; i++)
    fprintf(stderr, " %u", ids[i]);
}

/* The command line, parsed; strings point into argv. */
typedef struct args {
  const char *model_dir, *prompt, *tokenizer;
  long long tokens, top_k, threads;
  double temperature, top_p, penalty;
  const char **stop; /* nstop of argv's strings; main frees the array */
  size_t nstop;
  uint64_t seed;
  int have_seed, no_stop, bos, ids;
} args;

/* Fills a from argv; returns -1 (help printed: exit 0), 0, or
 * EXIT_USAGE after a message. */
static int parse_args(int argc, char **argv, args *a) {
  *a = (args){.prompt = "",
              .tokens = 200,
              .top_k = 40,
              .threads = 0,
              .temperature = 0.8,
              .top_p = 1.0,
              .penalty = 1.0,
              .stop = calloc((size_t)argc, sizeof(char *))};
  if (!a->stop) {
    fprintf(stderr, "dagrun generate: out of memory\n");
    return EXIT_FAILED;
  }
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
      fputs(usage_text, stdout);
      return -1;
    }
    int *flag = strcmp(o, "--no-stop") == 0 ? &a->no_stop
                : strcmp(o, "--bos") == 0   ? &a->bos
                : strcmp(o, "--ids") == 0   ? &a->ids
                                            : NULL;
    if (flag) {
      *flag = 1;
      continue;
    }
    if (strcmp(o, "--") == 0 && i + 1 < argc && !a->model_dir) {
      a->model_dir = argv[++i];
      continue;
    }
    if (o[0] != '-' || !o[1]) {
      if (a->model_dir)
        return usage_error("one MODEL_DIR only; got also '%s'", o);
      a->model_dir = o;
      continue;
    }
    /* --name VALUE or --name=VALUE */
    static const char *const with_value[] = {
        "--prompt",  "--tokens", "--temperature",
        "--top-k",   "--top-p",  "--repetition-penalty",
        "--stop",    "--seed",   "--tokenizer",
        "--threads", NULL};
    const char *name = NULL, *val = NULL;
    for (int k = 0; with_value[k]; k++) {
      size_t n = strlen(with_value[k]);
      if (strcmp(o, with_value[k]) == 0) {
        name = with_value[k];
        if (i + 1 >= argc)
          return usage_error("%s needs a value", name);
        val = argv[++i];
      } else if (strncmp(o, with_value[k], n) == 0 && o[n] == '=') {
        name = with_value[k];
        val = o + n + 1;
      }
      if (name)
        break;
    }
    if (!name)
      return usage_error("unknown option '%s'", o);
    long long v;
    double *num = strcmp(name, "--temperature") == 0          ? &a->temperature
                  : strcmp(name, "--top-p") == 0              ? &a->top_p
                  : strcmp(name, "--repetition-penalty") == 0 ? &a->penalty
                                                              : NULL;
    if (num) {
      /* Ranges are textgen_check's (main), so that the stages and this
       * program refuse the same values with the same words. */
      char *end;
      errno = 0;
      *num = strtod(val, &end);
      if (!*val || *end || errno || !isfinite(*num) ||
          (num == &a->temperature && *num < 0))
        return usage_error("%s needs a number%s, got '%s'", name,
                           num == &a->temperature ? " >= 0" : "", val);
    } else if (strcmp(name, "--prompt") == 0) {
      a->prompt = val;
    } else if (strcmp(name, "--stop") == 0) {
      a->stop[a->nstop++] = val;
    } else if (strcmp(name, "--tokenizer") == 0) {
      a->tokenizer = val;
    } else if (strcmp(name, "--tokens") == 0) {
      if (parse_ll(val, 0, INT_MAX, &v) != 0)
        return usage_error("--tokens needs a number >= 0, got '%s'", val);
      a->tokens = v;
    } else if (strcmp(name, "--top-k") == 0) {
      if (parse_ll(val, 0, INT_MAX, &v) != 0)
        return usage_error("--top-k needs a number >= 0, got '%s'", val);
      a->top_k = v;
    } else if (strcmp(name, "--threads") == 0) {
      if (parse_ll(val, 1, 4096, &v) != 0)
        return usage_error("--threads needs a number from 1 to 4096, got "
                           "'%s'",
                           val);
      a->threads = v;
    } else { /* --seed */
      char *end;
      errno = 0;
      unsigned long long s = strtoull(val, &end, 10);
      if (!*val || *end || errno || val[0] == '-')
        return usage_error("--seed needs a number >= 0, got '%s'", val);
      a->seed = s;
      a->have_seed = 1;
    }
  }
  if (!a->model_dir)
    return usage_error("%s", "needs a MODEL_DIR");
  return 0;
}

/* Check the options, load the model and tokenizer, say what was loaded on
 * stderr, then stream the text. A tokenizer with more ids than the model is a
 * warning, not an error: it is most likely another model's, but text
 * may still come out, and the user decides. */
static int generate_text(args a) {
  textgen_opts o = {.prompt = a.prompt,
                    .max_tokens = (int)a.tokens,
                    .sampling = {.temperature = a.temperature,
                                 .top_k = (int)a.top_k,
                                 .top_p = a.top_p,
                                 .repetition_penalty = a.penalty},
                    .stop = a.stop,
                    .nstop = a.nstop,
                    .stop_at_eot = !a.no_stop,
                    .bos = a.bos};
  char err[4096];
  if (textgen_check(&o, err, sizeof err) != 0)
    return usage_error("%s", err);
  int rc;
  int threads = a.threads ? (int)a.threads : (int)stagekit_cpu_count();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  modeldir_info *info = calloc(1, sizeof *info);
  gpt *m = NULL;
  bpe *tok = NULL;
  if (!info) {
    fprintf(stderr, "dagrun generate: out of memory\n");
    return EXIT_FAILED;
  }
  rc = EXIT_FAILED;
  if (modeldir_open(a.model_dir, info, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun generate: %s\n", err);
    goto done;
  }
  if (info->skipped[0])
    fprintf(stderr, "dagrun generate: warning: %s\n", info->skipped);
  if (modeldir_load(info, &m, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun generate: %s\n", err);
    goto done;
  }
  const char *tpath = a.tokenizer ? a.tokenizer : info->tokenizer;
  if (!tpath[0]) {
    fprintf(stderr,
            "dagrun generate: %s has no tokenizer (no tokenizer.json, and "
            "its checkpoint names none that exists); pass --tokenizer "
            "PATH/tokenizer.json\n",
            info->dir);
    goto done;
  }
  if (bpe_load_hf(tpath, &tok, err, sizeof err) != 0) {
    fprintf(stderr, "dagrun generate: tokenizer: %s\n", err);
    goto done;
  }
  const gpt_config *c = gpt_get_config(m);
  if (bpe_vocab_size(tok) > (uint32_t)c->vocab_size)
    fprintf(stderr,
            "dagrun generate: warning: the tokenizer %s has %u ids, the "
            "model %d: it is probably not this model's tokenizer\n",
            tpath, bpe_vocab_size(tok), c->vocab_size);
  char step[48] = "";
  if (info->kind == MODELDIR_CHECKPOINT)
    snprintf(step, sizeof step, ", step %lld", (long long)info->step);
  fprintf(stderr,
          "dagrun generate: %s (%s%s; %.2fM parameters: %d layers, %d "
          "heads, width %d, context %d, vocab %d); tokenizer %s\n",
          info->dir,
          info->kind != MODELDIR_HF       ? "checkpoint"
          : c->family == GPT_FAMILY_LLAMA ? "Hugging Face Llama"
                                          : "Hugging Face GPT-2",
          step, gpt_num_params(m) / 1e6, c->n_layer, c->n_head, c->n_embd,
          c->block_size, c->vocab_size, tpath);
  if (!a.have_seed)
    a.seed = random_seed();
  fprintf(stderr,
          "dagrun generate: seed %llu (--seed %llu gives this text "
          "again)\n",
          (unsigned long long)a.seed, (unsigned long long)a.seed);

  o.seed = a.seed;
  int bar = 0;
  if (a.ids) {
    o.on_ids = ids_stderr;
    o.ids_arg = &bar;
    fputs("dagrun generate: ids:", stderr);
  }
  fputs(a.prompt, stdout);
  fflush(stdout);
  double t0 = clock_monotonic();
  int n = textgen_run(m, tok, &o, emit_stdout, NULL, NULL, err, sizeof err);
  double dt = clock_monotonic() - t0;
  if (a.ids)
    fputc('\n', stderr);
  fputc('\n', stdout);
  fflush(stdout);
  if (n < 0) {
    fprintf(stderr, "dagrun generate: %s\n", err);
    goto done;
  }
  fprintf(stderr, "dagrun generate: %d tokens in %.2f s: %.1f tokens/s\n", n,
          dt, dt > 0 ? n / dt : 0.0);
  rc = ferror(stdout) ? EXIT_FAILED : 0;
done:
  bpe_destroy(tok);
  gpt_destroy(m);
  free(info);
  return rc;
}

int main(int argc, char **argv) {
  args a;
  int rc = parse_args(argc, argv, &a);
  if (rc == 0)
    rc = generate_text(a);
  free(a.stop);
  return rc < 0 ? 0 : rc;
}
