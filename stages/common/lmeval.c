/*
 * lmeval: perplexity and multiple-choice scoring (the contract is
 * lmeval.h). Inputs are read whole: a text to score or a task of a few
 * thousand items is megabytes, and token files are copied one at a time
 * into an id array for evaluate_tokens.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "data/tokfile.h"
#include "lib/fileio.h"
#include "lmeval.h"
#include "tokdata.h"

void lmeval_wilson(size_t k, size_t n, double *low, double *high) {
  const double z = 1.959963984540054; /* the normal's 97.5% quantile */
  double p = (double)k / (double)n, z2n = z * z / (double)n;
  double mid = (p + z2n / 2) / (1 + z2n);
  double half =
      z / (1 + z2n) * sqrt(p * (1 - p) / (double)n + z2n / (4 * (double)n));
  *low = mid - half > 0 ? mid - half : 0;
  *high = mid + half < 1 ? mid + half : 1;
}

static int window(gpt *m, const lmeval_opts *o) {
  int bs = gpt_get_config(m)->block_size;
  return o->T > 0 && o->T < bs ? o->T : bs;
}

static void finish(const eval_sum *s, lmeval_ppl *out) {
  out->tokens = s->tokens;
  out->loss = s->tokens ? s->loss_sum / (double)s->tokens : NAN;
  out->perplexity = exp(out->loss);
  out->accuracy = s->tokens ? (double)s->correct / (double)s->tokens : NAN;
}

/* Scores ids[0, n), at most o->max_tokens - s->tokens of them (max 0:
 * all), adding into s. */
static int score(gpt *m, const uint32_t *ids, size_t n, const lmeval_opts *o,
                 eval_sum *s, char *err, size_t errlen) {
  if (o->max_tokens) {
    uint64_t left = o->max_tokens > s->tokens ? o->max_tokens - s->tokens : 0;
    if (n > left + 1)
      n = left ? (size_t)left + 1 : 0;
  }
  return evaluate_tokens(m, ids, n, window(m, o), o->B > 0 ? o->B : 1,
                         o->cancelled, o->arg, s, err, errlen);
}

/* text -> ids with tok. 0, or -1 (out of memory). */
static int encode(const bpe *tok, const char *text, size_t len, bpe_ids *ids) {
  bpe_encoder *enc = bpe_encoder_create(tok);
  int rc = enc ? bpe_encode(enc, text, len, ids) : -1;
  bpe_encoder_destroy(enc);
  return rc;
}

int lmeval_text(gpt *m, const bpe *tok, const char *path, const lmeval_opts *o,
                lmeval_ppl *out, char *err, size_t errlen) {
  size_t len = 0;
  char *text = fileio_read_all(path, &len, err, errlen);
  if (!text)
    return -1;
  bpe_ids ids = {0};
  eval_sum s = {0};
  int rc = encode(tok, text, len, &ids);
  free(text);
  if (rc != 0)
    snprintf(err, errlen, "%s: out of memory tokenizing it", path);
  else if (ids.n < 2) {
    snprintf(err, errlen,
             "%s: %zu token%s: a perplexity needs at least 2 (the first is "
             "context only)",
             path, ids.n, ids.n == 1 ? "" : "s");
    rc = -1;
  } else if ((rc = score(m, ids.v, ids.n, o, &s, err, errlen)) == 0)
    finish(&s, out);
  bpe_ids_free(&ids);
  return rc;
}

/* Adds the tokens of one token file to s. */
static int score_file(gpt *m, const char *path, const lmeval_opts *o,
                      eval_sum *s, char *err, size_t errlen) {
  tokfile *f = NULL;
  if (tokfile_open(path, &f, err, errlen) != 0)
    return -1;
  const tokfile_info *h = tokfile_header(f);
  size_t n = (size_t)h->n_tokens;
  uint32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  int rc = -1;
  if (!ids)
    snprintf(err, errlen, "%s: out of memory for %zu ids", path, n);
  else {
    for (size_t i = 0; i < n; i++)
      ids[i] = tokfile_get(tokfile_tokens(f), h->token_bytes, i);
    rc = score(m, ids, n, o, s, err, errlen);
  }
  free(ids);
  tokfile_close(f);
  return rc;
}

int lmeval_tokens(gpt *m, const modeldir_info *md, const char *base,
                  const char *dir, const char *split, const lmeval_opts *o,
                  lmeval_ppl *out, char *err, size_t errlen) {
  tokdata td = {0};
  int V = gpt_get_config(m)->vocab_size;
  if (tokdata_open(base, dir, &td, err, errlen) != 0)
    return -1;
  int val = strcmp(split, "val") == 0;
  char **files = val ? td.val : td.train;
  size_t nf = val ? td.nval : td.ntrain;
  int rc = -1;
  eval_sum s = {0};
  if (!val && strcmp(split, "train") != 0)
    snprintf(err, errlen, "split must be val or train, not '%s'", split);
  else if (td.vocab_size != V)
    snprintf(err, errlen,
             "%s was tokenized into %d ids but the model has %d: they do "
             "not belong together",
             td.dir, td.vocab_size, V);
  else if (md && tokdata_fits_model(&td, md->dir, md->tokenizer,
                                    md->tokenizer_sha256, err, errlen) != 0)
    ;
  else if (nf == 0)
    snprintf(err, errlen, "%s has no %s files", td.dir, split);
  else {
    rc = 0;
    for (size_t i = 0; rc == 0 && i < nf; i++)
      rc = score_file(m, files[i], o, &s, err, errlen);
    if (rc == 0 && s.tokens == 0) {
      snprintf(err, errlen, "%s: no tokens to score in its %s files", td.dir,
               split);
      rc = -1;
    }
  }
  if (rc == 0)
    finish(&s, out);
  tokdata_free(&td);
  return rc;
}

/* One multiple-choice item, pointing into its parsed JSON. */
typedef struct mc_item {
  const char *ctx;
  const cJSON *endings;
  int k, label;
} mc_item;

/* Reads j into it; 0, or -1 with why (which field, what it must be). */
static int parse_item(const cJSON *j, mc_item *it, char *why, size_t n) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "ctx");
  if (!c)
    c = cJSON_GetObjectItemCaseSensitive(j, "context");
  if (!cJSON_IsString(c)) {
    snprintf(why, n, "needs \"ctx\" (or \"context\"), a string");
    return -1;
  }
  it->ctx = c->valuestring;
  it->endings = cJSON_GetObjectItemCaseSensitive(j, "endings");
  it->k = cJSON_IsArray(it->endings) ? cJSON_GetArraySize(it->endings) : 0;
  const cJSON *e;
  int strings = 1;
  cJSON_ArrayForEach(e, it->endings) strings &= cJSON_IsString(e) != 0;
  if (it->k < 2 || !strings) {
    snprintf(why, n, "needs \"endings\", an array of 2 or more strings");
    return -1;
  }
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "label");
  double v = NAN;
  if (cJSON_IsNumber(l))
    v = l->valuedouble;
  else if (cJSON_IsString(l) && l->valuestring[0]) {
    char *end;
    v = strtod(l->valuestring, &end);
    if (*end)
      v = NAN;
  }
  if (!(v >= 0 && v < it->k && v == floor(v))) {
    snprintf(why, n,
             "needs \"label\", the index of the right ending: an integer "
             "from 0 to %d (or a string of one)",
             it->k - 1);
    return -1;
  }
  it->label = (int)v;
  return 0;
}

/* The mean losses of it's endings into loss[0, k). */
static int score_item(gpt *m, bpe_encoder *enc, const mc_item *it, double *loss,
                      char *err, size_t errlen) {
  int k = it->k, rc = -1;
  bpe_ids ctx = {0};
  bpe_ids *ends = calloc((size_t)k, sizeof *ends);
  const uint32_t **pv = calloc((size_t)k, sizeof *pv);
  size_t *pn = calloc((size_t)k, sizeof *pn);
  size_t cl = strlen(it->ctx);
  int ctx_space = cl == 0 || isspace((unsigned char)it->ctx[cl - 1]);
  if (!ends || !pv || !pn || bpe_encode(enc, it->ctx, cl, &ctx) != 0)
    goto oom;
  for (int i = 0; i < k; i++) {
    const char *z = cJSON_GetArrayItem(it->endings, i)->valuestring;
    size_t zl = strlen(z);
    int space = !ctx_space && !isspace((unsigned char)z[0]);
    char *s = malloc(zl + 2);
    if (!s)
      goto oom;
    s[0] = ' ';
    memcpy(s + space, z, zl + 1);
    rc = bpe_encode(enc, s, zl + (size_t)space, &ends[i]);
    free(s);
    if (rc != 0)
      goto oom;
    pv[i] = ends[i].v;
    pn[i] = ends[i].n;
  }
  rc = evaluate_endings(m, ctx.v, ctx.n, pv, pn, k, loss, err, errlen);
  goto done;
oom:
  snprintf(err, errlen, "out of memory tokenizing the item");
  rc = -1;
done:
  for (int i = 0; ends && i < k; i++)
    bpe_ids_free(&ends[i]);
  bpe_ids_free(&ctx);
  free(ends);
  free(pv);
  free(pn);
  return rc;
}

/* One line of the per-item results. */
static void write_result(FILE *f, size_t index, const mc_item *it, int pred,
                         const double *loss) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "index", (double)index);
  cJSON_AddNumberToObject(o, "label", it->label);
  cJSON_AddNumberToObject(o, "predicted", pred);
  cJSON_AddBoolToObject(o, "correct", pred == it->label);
  cJSON_AddItemToObject(o, "losses", cJSON_CreateDoubleArray(loss, it->k));
  char *z = cJSON_PrintUnformatted(o);
  if (z)
    fprintf(f, "%s\n", z);
  else
    fputs("\n", f); /* out of memory: an empty line, and the error at
                       the end (the stream's size is checked) */
  free(z);
  cJSON_Delete(o);
}

/* Scores the items of text (path's contents), one a line. */
static int score_items(gpt *m, const bpe *tok, const char *path, char *text,
                       FILE *res, const lmeval_opts *o, lmeval_mc *out,
                       char *err, size_t errlen) {
  bpe_encoder *enc = bpe_encoder_create(tok);
  double chance = 0, *loss = NULL;
  int rc = enc ? 0 : -1, line = 0;
  if (!enc)
    snprintf(err, errlen, "out of memory for a tokenizer");
  for (char *p = text, *nl; rc == 0 && p && *p; p = nl ? nl + 1 : NULL) {
    nl = strchr(p, '\n');
    if (nl)
      *nl = '\0';
    line++;
    if (!p[strspn(p, " \t\r")])
      continue;
    if (o->cancelled && o->cancelled(o->arg)) {
      snprintf(err, errlen, "cancelled at %s:%d", path, line);
      rc = -1;
      break;
    }
    char why[256], e2[1024];
    mc_item it;
    cJSON *j = cJSON_Parse(p);
    double *nl2 = NULL;
    if (!cJSON_IsObject(j))
      snprintf(why, sizeof why, "not a JSON object");
    else if (parse_item(j, &it, why, sizeof why) == 0 &&
             !(nl2 = realloc(loss, (size_t)it.k * sizeof *loss)))
      snprintf(why, sizeof why, "out of memory");
    if (nl2)
      loss = nl2;
    if (!nl2 || score_item(m, enc, &it, loss, e2, sizeof e2) != 0) {
      snprintf(err, errlen, "%s:%d: %s", path, line, nl2 ? e2 : why);
      rc = -1;
    } else {
      int pred = 0;
      for (int i = 1; i < it.k; i++)
        pred = loss[i] < loss[pred] ? i : pred;
      write_result(res, out->items, &it, pred, loss);
      out->correct += pred == it.label;
      out->items++;
      chance += 1.0 / it.k;
    }
    cJSON_Delete(j);
  }
  if (rc == 0 && out->items == 0) {
    snprintf(err, errlen, "%s: no items (one JSON object a line)", path);
    rc = -1;
  }
  if (rc == 0) {
    out->accuracy = (double)out->correct / (double)out->items;
    out->chance = chance / (double)out->items;
    lmeval_wilson(out->correct, out->items, &out->ci_low, &out->ci_high);
  }
  free(loss);
  bpe_encoder_destroy(enc);
  return rc;
}

int lmeval_choices(gpt *m, const bpe *tok, const char *path,
                   const char *items_path, const lmeval_opts *o, lmeval_mc *out,
                   char *err, size_t errlen) {
  size_t len = 0, rlen = 0;
  char *text = fileio_read_all(path, &len, err, errlen), *rtext = NULL;
  if (!text)
    return -1;
  FILE *res = open_memstream(&rtext, &rlen);
  *out = (lmeval_mc){0};
  int rc = res ? score_items(m, tok, path, text, res, o, out, err, errlen) : -1;
  if (!res)
    snprintf(err, errlen, "out of memory for the results");
  if (res && fclose(res) != 0 && rc == 0) {
    snprintf(err, errlen, "out of memory for the results");
    rc = -1;
  }
  if (rc == 0 && items_path &&
      fileio_write_atomic(items_path, rtext, rlen, err, errlen) != 0)
    rc = -1;
  free(rtext);
  free(text);
  return rc;
}

char *lmeval_summary(const char *model, int64_t step, const lmeval_ppl *ppl,
                     const char *ppl_source, const lmeval_mc *mc,
                     const char *mc_source, const char *items_path) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "format", "dagrun-eval");
  cJSON_AddNumberToObject(o, "version", 1);
  cJSON_AddStringToObject(o, "model", model);
  cJSON_AddNumberToObject(o, "step", (double)step);
  if (ppl) {
    cJSON *p = cJSON_AddObjectToObject(o, "perplexity");
    cJSON_AddStringToObject(p, "source", ppl_source);
    cJSON_AddNumberToObject(p, "loss", ppl->loss);
    cJSON_AddNumberToObject(p, "perplexity", ppl->perplexity);
    cJSON_AddNumberToObject(p, "token_accuracy", ppl->accuracy);
    cJSON_AddNumberToObject(p, "tokens", (double)ppl->tokens);
  }
  if (mc) {
    cJSON *c = cJSON_AddObjectToObject(o, "choices");
    cJSON_AddStringToObject(c, "source", mc_source);
    cJSON_AddNumberToObject(c, "items", (double)mc->items);
    cJSON_AddNumberToObject(c, "correct", (double)mc->correct);
    cJSON_AddNumberToObject(c, "accuracy", mc->accuracy);
    double ci[2] = {mc->ci_low, mc->ci_high};
    cJSON_AddItemToObject(c, "ci95", cJSON_CreateDoubleArray(ci, 2));
    cJSON_AddNumberToObject(c, "chance", mc->chance);
    if (items_path)
      cJSON_AddStringToObject(c, "results", items_path);
    else
      cJSON_AddNullToObject(c, "results");
  }
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}

static int set(const char *z) { return z && z[0]; }

/* The model and, when needed, its tokenizer. */
static int load(lmeval_job *j, gpt **m, bpe **tok, char *err, size_t errlen) {
  if (modeldir_open(j->model, &j->md, err, errlen) != 0 ||
      modeldir_load(&j->md, m, err, errlen) != 0)
    return -1;
  if (!set(j->text) && !set(j->choices))
    return 0;
  const char *tp = set(j->tokenizer) ? j->tokenizer : j->md.tokenizer;
  if (!tp[0]) {
    snprintf(err, errlen,
             "%s has no tokenizer (no tokenizer.json, and its checkpoint "
             "names none that exists): give one (tokenizer)",
             j->md.dir);
    return -1;
  }
  char e2[1024];
  if (bpe_load_hf(tp, tok, e2, sizeof e2) != 0) {
    snprintf(err, errlen, "tokenizer: %s", e2);
    return -1;
  }
  if (set(j->tokenizer) &&
      tokdata_file_fits_model(tp, j->md.dir, j->md.tokenizer,
                              j->md.tokenizer_sha256, err, errlen) != 0)
    return -1;
  if (bpe_vocab_size(*tok) > (uint32_t)j->md.config.vocab_size) {
    snprintf(err, errlen,
             "the tokenizer %s has %u ids but the model %s has %d: it is "
             "not this model's",
             tp, bpe_vocab_size(*tok), j->md.dir, j->md.config.vocab_size);
    return -1;
  }
  return 0;
}

/* eval.json into out_dir. */
static int write_summary(lmeval_job *j, char *err, size_t errlen) {
  j->summary =
      lmeval_summary(j->md.dir, j->md.step, j->have_ppl ? &j->ppl : NULL,
                     set(j->text) ? j->text : j->data,
                     j->have_mc ? &j->mc : NULL, j->choices, j->items_path);
  if (!j->summary) {
    snprintf(err, errlen, "out of memory for the summary");
    return -1;
  }
  if (!set(j->out_dir))
    return 0;
  char *p = fileio_join(j->out_dir, "eval.json");
  int rc =
      p ? fileio_write_atomic(p, j->summary, strlen(j->summary), err, errlen)
        : -1;
  if (!p)
    snprintf(err, errlen, "out of memory");
  free(p);
  return rc;
}

int lmeval_run(lmeval_job *j, char *err, size_t errlen) {
  if (!set(j->text) && !set(j->data) && !set(j->choices)) {
    snprintf(err, errlen,
             "nothing to evaluate: give a text file or a tokenized "
             "directory (its perplexity) and/or a multiple-choice JSONL");
    return -1;
  }
  if (set(j->text) && set(j->data)) {
    snprintf(err, errlen,
             "a text file and a tokenized directory: one perplexity at a "
             "time, give one of them");
    return -1;
  }
  gpt *m = NULL;
  bpe *tok = NULL;
  int rc = load(j, &m, &tok, err, errlen);
  if (rc == 0 && set(j->text))
    rc = lmeval_text(m, tok, j->text, &j->o, &j->ppl, err, errlen);
  else if (rc == 0 && set(j->data))
    rc = lmeval_tokens(m, &j->md, j->base, j->data,
                       set(j->split) ? j->split : "val", &j->o, &j->ppl, err,
                       errlen);
  j->have_ppl = rc == 0 && (set(j->text) || set(j->data));
  if (rc == 0 && set(j->choices)) {
    if (set(j->out_dir) &&
        !(j->items_path = fileio_join(j->out_dir, "choices.jsonl"))) {
      snprintf(err, errlen, "out of memory");
      rc = -1;
    }
    if (rc == 0)
      rc = lmeval_choices(m, tok, j->choices, j->items_path, &j->o, &j->mc, err,
                          errlen);
    j->have_mc = rc == 0;
  }
  if (rc == 0)
    rc = write_summary(j, err, errlen);
  /* After the summary, so that it keeps the numbers: a loss that is no
   * number (a diverged model) is a failed evaluation, not a result. */
  if (rc == 0 && j->have_ppl && !isfinite(j->ppl.loss)) {
    snprintf(err, errlen,
             "the loss is %g over %llu tokens, not a finite number: the "
             "model's outputs are not numbers (did training diverge?)",
             fabs(j->ppl.loss), (unsigned long long)j->ppl.tokens);
    rc = -1;
  }
  bpe_destroy(tok);
  gpt_destroy(m);
  return rc;
}

void lmeval_job_free(lmeval_job *j) {
  free(j->items_path);
  free(j->summary);
  j->items_path = j->summary = NULL;
}
