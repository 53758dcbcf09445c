/*
 * dagrun-eval: `dagrun eval MODEL [options]` (orchestrator/main.c runs
 * it), the eval stage's measurements at a terminal: a model's perplexity
 * on a text file or a tokenize stage's directory and its accuracy on a
 * multiple-choice JSONL (common/lmeval.h has the formats and the
 * scoring; the stage is stages/eval/eval.c).
 *
 * Contract. stdout: one line per measurement, or with --json the
 * summary (eval.json's format) alone. stderr: the model loaded and any
 * error. --out DIR writes eval.json and choices.jsonl (the per-item
 * results) into DIR, made if missing. Exit status: 0; 1 (EXIT_FAILED)
 * when the model or an input cannot be used; 2 (EXIT_USAGE) for bad
 * usage, with a message and a pointer to --help; --help exits 0.
 */
#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/lmeval.h"
#include "common/stagekit.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"

static const char usage_text[] =
    "usage: dagrun eval MODEL [options]\n"
    "\n"
    "Measures a model: its perplexity on a text or on token files, its\n"
    "accuracy on a multiple-choice task. MODEL is a checkpoint, a directory\n"
    "of checkpoints (its latest valid one), a promoted model or a Hugging\n"
    "Face GPT-2 or Llama directory.\n"
    "\n"
    "  --text FILE          perplexity of a text file (the model's tokenizer)\n"
    "  --data DIR           or of a tokenize stage's output directory ...\n"
    "  --split val|train    ... its split (default val)\n"
    "  --choices FILE       accuracy on a JSONL of {\"ctx\", \"endings\",\n"
    "                       \"label\"} items (HellaSwag's layout): the ending\n"
    "                       of the lowest mean loss per token is the answer\n"
    "  --out DIR            write eval.json and choices.jsonl (per item) here\n"
    "  --json               print the summary as JSON instead of text\n"
    "  --tokenizer PATH     a tokenizer.json (default: the model's)\n"
    "  --seq-len N          perplexity: context tokens at most (default: the\n"
    "                       model's context)\n"
    "  --batch-size N       perplexity: windows per forward (default 8)\n"
    "  --max-tokens N       perplexity: tokens scored at most (default: all)\n"
    "  --threads N          CPU threads (default: one per CPU)\n"
    "  -h, --help           this text\n";

static int usage_error(const char *what, const char *arg) {
  fprintf(stderr, "dagrun eval: %s%s%s\n(see dagrun eval --help)\n", what,
          arg ? " " : "", arg ? arg : "");
  return EXIT_USAGE;
}

/* The command line. */
typedef struct cli {
  lmeval_job j;
  const char *out;
  long long seq_len, batch, max_tokens, threads;
  int json;
} cli;

/* --NAME VALUE options: where each goes. */
typedef struct opt {
  const char *name;
  const char **str;       /* a string option, or */
  long long *num, lo, hi; /* an integer one */
} opt;

static int set_value(const opt *o, const char *val) {
  if (o->str) {
    *o->str = val;
    return 0;
  }
  char *end;
  errno = 0;
  long long v = strtoll(val, &end, 10);
  if (!*val || *end || errno || v < o->lo || v > o->hi) {
    fprintf(stderr,
            "dagrun eval: %s needs an integer from %lld to %lld, got '%s'\n"
            "(see dagrun eval --help)\n",
            o->name, o->lo, o->hi, val);
    return EXIT_USAGE;
  }
  *o->num = v;
  return 0;
}

/* Fills c from argv: 0, -1 (help printed), or EXIT_USAGE. */
static int parse(int argc, char **argv, cli *c) {
  c->batch = 8;
  c->j.split = "val";
  const opt opts[] = {
      {"--text", &c->j.text, NULL, 0, 0},
      {"--data", &c->j.data, NULL, 0, 0},
      {"--split", &c->j.split, NULL, 0, 0},
      {"--choices", &c->j.choices, NULL, 0, 0},
      {"--out", &c->out, NULL, 0, 0},
      {"--tokenizer", &c->j.tokenizer, NULL, 0, 0},
      {"--seq-len", NULL, &c->seq_len, 1, 1 << 20},
      {"--batch-size", NULL, &c->batch, 1, 1 << 16},
      {"--max-tokens", NULL, &c->max_tokens, 0, (long long)1 << 62},
      {"--threads", NULL, &c->threads, 1, 4096},
  };
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage_text, stdout);
      return -1;
    }
    if (strcmp(a, "--json") == 0) {
      c->json = 1;
      continue;
    }
    if (a[0] != '-' || !a[1]) {
      if (c->j.model)
        return usage_error("one MODEL only; got also", a);
      c->j.model = a;
      continue;
    }
    const opt *o = NULL;
    const char *val = NULL;
    for (size_t k = 0; k < sizeof opts / sizeof *opts && !o; k++) {
      size_t n = strlen(opts[k].name);
      if (strncmp(a, opts[k].name, n) == 0 && (!a[n] || a[n] == '=')) {
        o = &opts[k];
        val = a[n] ? a + n + 1 : i + 1 < argc ? argv[++i] : NULL;
      }
    }
    if (!o)
      return usage_error("unknown option", a);
    if (!val)
      return usage_error("a value is missing after", a);
    int rc = set_value(o, val);
    if (rc)
      return rc;
  }
  if (!c->j.model)
    return usage_error("needs a MODEL", NULL);
  if (strcmp(c->j.split, "val") != 0 && strcmp(c->j.split, "train") != 0)
    return usage_error("--split is val or train, not", c->j.split);
  return 0;
}

/* The measurements, one line each. */
static void print_text(const lmeval_job *j) {
  if (j->have_ppl)
    printf("perplexity %.4f (loss %.4f nats/token, next-token accuracy "
           "%.4f) over %llu tokens of %s\n",
           j->ppl.perplexity, j->ppl.loss, j->ppl.accuracy,
           (unsigned long long)j->ppl.tokens, j->text ? j->text : j->data);
  if (j->have_mc)
    printf("multiple choice: accuracy %.4f (%zu of %zu), 95%% interval "
           "[%.4f, %.4f], chance %.4f, on %s\n",
           j->mc.accuracy, j->mc.correct, j->mc.items, j->mc.ci_low,
           j->mc.ci_high, j->mc.chance, j->choices);
  if (j->items_path)
    printf("per item: %s\n", j->items_path);
}

int main(int argc, char **argv) {
  cli c = {0};
  int rc = parse(argc, argv, &c);
  if (rc != 0)
    return rc < 0 ? 0 : rc;
  int threads = c.threads ? (int)c.threads : (int)stagekit_cpu_count();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  c.j.base = ".";
  c.j.out_dir = c.out ? c.out : "";
  c.j.o.T = (int)c.seq_len;
  c.j.o.B = (int)c.batch;
  c.j.o.max_tokens = (uint64_t)c.max_tokens;
  char err[4096];
  if (c.out && fileio_mkdir_p(c.out, 0755) != 0) {
    fprintf(stderr, "dagrun eval: --out %s: %s\n", c.out, strerror(errno));
    return EXIT_FAILED;
  }
  rc = lmeval_run(&c.j, err, sizeof err);
  if (c.j.md.skipped[0])
    fprintf(stderr, "dagrun eval: warning: %s\n", c.j.md.skipped);
  if (rc != 0) {
    fprintf(stderr, "dagrun eval: %s\n", err);
    /* Nothing to evaluate, or two perplexities: the command line's
     * fault. */
    int usage = strncmp(err, "nothing to evaluate", 19) == 0 ||
                strncmp(err, "a text file and", 15) == 0;
    lmeval_job_free(&c.j);
    return usage ? EXIT_USAGE : EXIT_FAILED;
  }
  fprintf(stderr,
          "dagrun eval: %s (step %lld, %d layers, width %d, vocab %d)\n",
          c.j.md.dir, (long long)c.j.md.step, c.j.md.config.n_layer,
          c.j.md.config.n_embd, c.j.md.config.vocab_size);
  if (c.json)
    printf("%s\n", c.j.summary);
  else
    print_text(&c.j);
  fflush(stdout);
  lmeval_job_free(&c.j);
  return ferror(stdout) ? EXIT_FAILED : 0;
}
