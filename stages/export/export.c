/*
 * export: the built-in stage that turns a model dagrun made into a
 * directory others can use.
 *
 *   export:
 *     stage: export
 *     needs: [checkpoint]
 *     with: {model: "${tasks.checkpoint.outputs.model}", dtype: bfloat16}
 *
 * format safetensors (the default) writes a Hugging Face GPT-2 directory:
 * model.safetensors (GPT-2's names, float32 or bfloat16), config.json,
 * generation_config.json, tokenizer.json (the source's, byte for byte),
 * tokenizer_config.json, special_tokens_map.json, vocab.json +
 * merges.txt, and a README.md model card; GPT2LMHeadModel and
 * AutoTokenizer load it with from_pretrained. format dagrun copies the
 * checkpoint as it is (weights, optimizer state, manifest) plus
 * tokenizer.json, for train's resume / init_from elsewhere.
 *
 * The directory is built in a temporary sibling, every file fsynced, and
 * renamed into place only when complete; an export already there is
 * replaced then, not before. A failed export leaves nothing behind.
 * Why so careful: other programs load an export, and a half-written
 * directory would load as a broken model instead of failing.
 *
 * Replacing is what makes dir dangerous: a dir that names the user's
 * project would take it along. So every export carries a marker,
 * .dagrun-export.json, listing its files, and only a directory with
 * that marker and nothing it does not list is replaced (or an empty
 * one, or an export of a dagrun from before the marker: only files such
 * an export wrote, model.safetensors among them; is_replaceable).
 * Anything else at dir, or at the hidden siblings, is refused
 * before anything moves, naming what is in the way; so is a dir that is
 * or holds the DAG's directory, the runs directory or the state store.
 *
 * Contract. Reads: the model param (anything ckpt/modeldir.h opens) and
 * its tokenizer (the tokenizer param, else the model's own or the one
 * its training recorded), which must have the model's vocabulary and an
 * <|endoftext|> token. Writes: dir (default out/model), through the
 * hidden siblings .<name>.tmp (the new export while it is built) and
 * .<name>.old (the previous one while the new one moves in), both
 * removed at the end and, when a killed attempt left them, at the next
 * start (a .old then goes back to dir when dir is gone). dir is the real
 * path of its parent plus its name. Outputs: dir, format, and model
 * (dir/model.safetensors, the
 * weights, which a train checkpoint copied by format dagrun has too).
 * Exit status: EXIT_BAD_PARAMS for a
 * param that makes no sense (no model, a dtype with format dagrun),
 * EXIT_FAILED for everything else, with the reason through host->fail.
 */
#include <dagrun/plugin.h>

#include "ckpt/ckpt.h"
#include "ckpt/modeldir.h"
#include "ckpt/weights.h"
#include "common/stagekit.h"
#include "common/tokdata.h"
#include "lib/bpe/bpe.h"
#include "lib/exitcode.h"
#include "lib/fileio.h"
#include "model/gpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#define EOT "<|endoftext|>"

static const dagrun_param_spec params[] = {
    {"model", DAGRUN_PARAM_STRING, NULL, 1,
     "The model: a checkpoint, a directory of checkpoints, a promoted model "
     "or a Hugging Face GPT-2 or Llama directory, e.g. "
     "\"${tasks.checkpoint.outputs.model}\" (relative: to the DAG file)"},
    {"tokenizer", DAGRUN_PARAM_STRING, "", 0,
     "tokenizer.json (empty: the model's own, or the one its training "
     "recorded)"},
    {"format", DAGRUN_PARAM_STRING, "safetensors", 0,
     "safetensors (a Hugging Face GPT-2 or Llama directory) or dagrun (the "
     "checkpoint as it is, for resume / init_from)"},
    {"dtype", DAGRUN_PARAM_STRING, "float32", 0,
     "Weights of format safetensors: float32 or bfloat16"},
    {"dir", DAGRUN_PARAM_STRING, "", 0,
     "Where to write it (empty: <task>/out/model; relative: to the DAG "
     "file); an earlier export there (or an empty directory) is replaced "
     "once the new one is complete, anything else there is refused"},
    {"name", DAGRUN_PARAM_STRING, "", 0,
     "The model's name in its model card (empty: <dag>-<task>)"},
    {NULL, 0, NULL, 0, NULL},
};

typedef enum export_format { FORMAT_SAFETENSORS, FORMAT_DAGRUN } export_format;
/* The format and dtype params' values, also what run maps them with. */
static const char *const format_names[] = {[FORMAT_SAFETENSORS] = "safetensors",
                                           [FORMAT_DAGRUN] = "dagrun",
                                           [FORMAT_DAGRUN + 1] = NULL};
static const char *const dtype_names[] = {
    [ST_F32] = "float32", [ST_BF16] = "bfloat16", [ST_BF16 + 1] = NULL};
static const dagrun_param_choice choices[] = {
    {"format", format_names},
    {"dtype", dtype_names},
    {NULL, NULL},
};

/* One export: the params resolved, the source opened, the paths of the
 * destination and its two hidden siblings (all owned, freed by run). */
typedef struct exporter {
  dagrun_ctx *ctx;
  const dagrun_host *h;
  export_format format;
  st_dtype dtype;
  const char *name_param;
  char *source;    /* the model param, resolved */
  char *tokenizer; /* the tokenizer used, resolved */
  char *dest, *tmp, *old;
  char *parent; /* dest's directory, a real path */
  modeldir_info info;
  gpt *model; /* the weights, loaded (and found finite) by open_source */
  bpe *tok;
  int64_t eot;
} exporter;

/* ---- Small helpers ---- */

/* z against the DAG file's directory unless absolute; malloc'd. */
static char *resolve(exporter *x, const char *z) {
  return z[0] == '/' ? strdup(z)
                     : fileio_join(x->h->dir(x->ctx, DAGRUN_DIR_DAG), z);
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Whether inner is outer or lies under it (both existing paths). */
static int is_within(const char *inner, const char *outer) {
  char a[PATH_MAX], b[PATH_MAX];
  if (!realpath(inner, a) || !realpath(outer, b))
    return 0;
  size_t n = strlen(b);
  return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

/* Writes text as dir/name (atomic, fsynced). 0 or -1 with the reason
 * given to host->fail. */
static int put_text(exporter *x, const char *name, const char *text) {
  char err[1024];
  char *path = fileio_join(x->tmp, name);
  int rc = path ? fileio_write_atomic(path, text, strlen(text), err, sizeof err)
                : -ENOMEM;
  if (rc != 0)
    x->h->fail(x->ctx, "%s", path ? err : "out of memory");
  free(path);
  return rc == 0 ? 0 : -1;
}

/* cJSON_Print of o as Hugging Face's files have JSON (two-space indent,
 * "key": value) plus a newline, written as name; deletes o. cJSON
 * escapes tabs inside strings, so every literal tab is its layout. */
static int put_json(exporter *x, const char *name, cJSON *o) {
  char *text = o ? cJSON_Print(o) : NULL;
  cJSON_Delete(o);
  size_t n = text ? strlen(text) : 0;
  char *out = text ? malloc(2 * n + 2) : NULL;
  if (!out) {
    free(text);
    x->h->fail(x->ctx, "%s: out of memory", name);
    return -1;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (text[i] != '\t') {
      out[k++] = text[i];
    } else if (i > 0 && text[i - 1] == ':') {
      out[k++] = ' ';
    } else {
      out[k++] = ' ';
      out[k++] = ' ';
    }
  }
  out[k++] = '\n';
  out[k] = '\0';
  free(text);
  int rc = put_text(x, name, out);
  free(out);
  return rc;
}

/* src copied durably into the export as name. 0, or -1 with the task
 * failed. */
static int copy_in(exporter *x, const char *src, const char *name) {
  char err[1024];
  char *dst = fileio_join(x->tmp, name);
  int rc = dst ? fileio_copy_durable(src, dst, err, sizeof err) : -1;
  if (rc != 0)
    x->h->fail(x->ctx, "copying %s: %s", src, dst ? err : "out of memory");
  free(dst);
  return rc == 0 ? 0 : -1;
}

/* ---- The Hugging Face files ---- */

/* model.safetensors in the dtype asked for, with GPT-2's tensor names
 * (ckpt/weights.h), so that GPT2LMHeadModel finds every tensor. */
static int write_weights(exporter *x) {
  char err[1024];
  char *path = fileio_join(x->tmp, "model.safetensors");
  int rc = path ? weights_save(path, x->model, x->dtype, NULL, NULL, 0, err,
                               sizeof err)
                : -1;
  if (rc != 0)
    x->h->fail(x->ctx, "%s", path ? err : "out of memory");
  free(path);
  return rc;
}

/* config.json and generation_config.json, and the tokenizer's configs:
 * what from_pretrained reads beside the weights. */
static int write_configs(exporter *x) {
  const gpt_config *c = &x->info.config;
  const char *dt = dtype_names[x->dtype];
  char *text = modeldir_hf_config_json(c, x->eot, dt);
  cJSON *cfg = text ? cJSON_Parse(text) : NULL;
  free(text);
  if (put_json(x, "config.json", cfg) != 0)
    return -1;

  /* Sampling as the train stage's samples do it. */
  cJSON *g = cJSON_CreateObject();
  cJSON_AddNumberToObject(g, "bos_token_id", (double)x->eot);
  cJSON_AddNumberToObject(g, "eos_token_id", (double)x->eot);
  cJSON_AddNumberToObject(g, "pad_token_id", (double)x->eot);
  cJSON_AddNumberToObject(g, "max_length", c->block_size);
  cJSON_AddBoolToObject(g, "do_sample", 1);
  cJSON_AddNumberToObject(g, "temperature", 0.8);
  cJSON_AddNumberToObject(g, "top_k", 40);
  if (put_json(x, "generation_config.json", g) != 0)
    return -1;

  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "tokenizer_class", "GPT2TokenizerFast");
  cJSON_AddNumberToObject(t, "model_max_length", c->block_size);
  cJSON_AddStringToObject(t, "bos_token", EOT);
  cJSON_AddStringToObject(t, "eos_token", EOT);
  cJSON_AddStringToObject(t, "unk_token", EOT);
  cJSON_AddBoolToObject(t, "add_prefix_space", 0);
  cJSON_AddBoolToObject(t, "add_bos_token", 0);
  cJSON_AddBoolToObject(t, "clean_up_tokenization_spaces", 0);
  cJSON_AddStringToObject(t, "errors", "replace");
  if (put_json(x, "tokenizer_config.json", t) != 0)
    return -1;

  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "bos_token", EOT);
  cJSON_AddStringToObject(s, "eos_token", EOT);
  cJSON_AddStringToObject(s, "unk_token", EOT);
  return put_json(x, "special_tokens_map.json", s);
}

/* vocab.json and merges.txt, GPT-2's original tokenizer files, from
 * tokenizer.json's model.vocab (plus the added tokens, as GPT-2's
 * vocab.json has <|endoftext|>) and model.merges ("a b" strings or
 * ["a", "b"] pairs). */
static int write_vocab_merges(exporter *x) {
  char err[1024];
  char *text = fileio_read_all(x->tokenizer, NULL, err, sizeof err);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  int read_ok = text != NULL;
  free(text);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  int rc = -1;
  FILE *mf = NULL;
  char *mtext = NULL;
  size_t mlen = 0;
  if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0 ||
      !cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
    x->h->fail(x->ctx, "%s: no BPE model with vocab and merges%s%s",
               x->tokenizer, read_ok ? "" : ": ", read_ok ? "" : err);
    goto done;
  }
  cJSON *v = cJSON_Duplicate(vocab, 1);
  const cJSON *a;
  cJSON_ArrayForEach(a, added) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
    if (v && cJSON_IsString(content) && cJSON_IsNumber(id) &&
        !cJSON_GetObjectItemCaseSensitive(v, content->valuestring))
      cJSON_AddNumberToObject(v, content->valuestring, id->valuedouble);
  }
  char *vtext = v ? cJSON_PrintUnformatted(v) : NULL;
  cJSON_Delete(v);
  if (!vtext) {
    x->h->fail(x->ctx, "vocab.json: out of memory");
    goto done;
  }
  rc = put_text(x, "vocab.json", vtext);
  free(vtext);
  if (rc != 0)
    goto done;
  rc = -1;
  mf = open_memstream(&mtext, &mlen);
  if (!mf) {
    x->h->fail(x->ctx, "merges.txt: out of memory");
    goto done;
  }
  fputs("#version: 0.2\n", mf);
  const cJSON *m;
  cJSON_ArrayForEach(m, merges) {
    const cJSON *l = cJSON_GetArrayItem(m, 0), *r = cJSON_GetArrayItem(m, 1);
    if (cJSON_IsString(m)) {
      fprintf(mf, "%s\n", m->valuestring);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
               cJSON_IsString(l) && cJSON_IsString(r)) {
      fprintf(mf, "%s %s\n", l->valuestring, r->valuestring);
    } else {
      x->h->fail(x->ctx, "%s: a merge is neither \"a b\" nor [\"a\", \"b\"]",
                 x->tokenizer);
      goto done;
    }
  }
  if (fclose(mf) != 0) {
    mf = NULL;
    x->h->fail(x->ctx, "merges.txt: out of memory");
    goto done;
  }
  mf = NULL;
  rc = put_text(x, "merges.txt", mtext);
done:
  if (mf)
    fclose(mf);
  free(mtext);
  cJSON_Delete(root);
  return rc;
}

/* A number of promotion.json, or NAN. */
static double json_number(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* README.md: a short model card. */
static int write_card(exporter *x) {
  const gpt_config *c = &x->info.config;
  const char *dag = x->h->info(x->ctx, DAGRUN_INFO_DAG);
  const char *task = x->h->info(x->ctx, DAGRUN_INFO_TASK);
  char *card = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&card, &len);
  if (!f) {
    x->h->fail(x->ctx, "README.md: out of memory");
    return -1;
  }
  /* Parameters without the padding rows (of wte, or of Llama's embedding
   * and untied head), as Hugging Face counts them. */
  int llama = c->family == GPT_FAMILY_LLAMA;
  double pad = (double)(c->padded_vocab - c->vocab_size) * c->n_embd;
  double nparams = (double)gpt_config_num_params(c) -
                   pad * (llama && c->untied_head ? 2 : 1);
  const char *arch = llama ? "LlamaForCausalLM" : "GPT2LMHeadModel";
  fprintf(f, "---\nlibrary_name: transformers\ntags:\n- %s\n- dagrun\n---\n\n",
          llama ? "llama" : "gpt2");
  if (x->name_param[0])
    fprintf(f, "# %s\n\n", x->name_param);
  else
    fprintf(f, "# %s-%s\n\n", dag, task);
  fprintf(f,
          "A %s model trained with dagrun: %d layers, %d heads, width %d, "
          "context %d tokens, vocabulary %d (%.2fM parameters), weights in "
          "%s.\n\n",
          llama ? "Llama" : "GPT-2", c->n_layer, c->n_head, c->n_embd,
          c->block_size, c->vocab_size,
          nparams / 1e6, x->dtype == ST_BF16 ? "bfloat16" : "float32");
  fprintf(f, "## Where it came from\n\n");
  fprintf(f, "- Source: `%s` (%s", x->info.dir,
          x->info.kind != MODELDIR_HF ? "a dagrun checkpoint"
          : llama                     ? "a Hugging Face Llama directory"
                                      : "a Hugging Face GPT-2 directory");
  if (x->info.step >= 0)
    fprintf(f, ", step %lld", (long long)x->info.step);
  fprintf(f, ")\n");
  fprintf(f, "- Exported by the DAG `%s`, task `%s`, run `%s`\n", dag, task,
          x->h->info(x->ctx, DAGRUN_INFO_RUN_ID));
  fprintf(f, "- Tokenizer: byte-level BPE, %d ids, `%s` = %lld\n",
          c->vocab_size, EOT, (long long)x->eot);
  char err[256];
  char *ppath = fileio_join(x->info.dir, "promotion.json");
  char *ptext = ppath && exists(ppath)
                    ? fileio_read_all(ppath, NULL, err, sizeof err)
                    : NULL;
  cJSON *prom = ptext ? cJSON_Parse(ptext) : NULL;
  free(ptext);
  free(ppath);
  double vl = json_number(prom, "val_loss"),
         ppl = json_number(prom, "perplexity"),
         acc = json_number(prom, "accuracy");
  if (!isnan(vl) || !isnan(ppl) || !isnan(acc)) {
    fprintf(f, "- Validation (promotion.json):");
    if (!isnan(vl))
      fprintf(f, " loss %.4f", vl);
    if (!isnan(ppl))
      fprintf(f, ", perplexity %.2f", ppl);
    if (!isnan(acc))
      fprintf(f, ", next-token accuracy %.2f%%", 100 * acc);
    fprintf(f, "\n");
  }
  cJSON_Delete(prom);
  fprintf(f,
          "\n## Use it\n\n"
          "With transformers:\n\n"
          "```python\n"
          "from transformers import AutoTokenizer, %s\n\n"
          "tok = AutoTokenizer.from_pretrained(\"%s\")\n"
          "model = %s.from_pretrained(\"%s\")\n"
          "ids = tok(\"Once upon a time\", return_tensors=\"pt\").input_ids\n"
          "out = model.generate(ids, max_new_tokens=50, do_sample=True, "
          "top_k=40)\n"
          "print(tok.decode(out[0]))\n"
          "```\n\n",
          arch, x->dest, arch, x->dest);
  /* dagrun's decoder is GPT-2's (a Llama it refuses). */
  if (!llama)
    fprintf(f,
            "With dagrun:\n\n"
            "```sh\n"
            "dagrun generate %s --prompt \"Once upon a time\"\n"
            "```\n\n",
            x->dest);
  fprintf(f,
          "The context is %d tokens: longer inputs must be cut to the last "
          "%d.\n",
          c->block_size, c->block_size);
  if (fclose(f) != 0) {
    x->h->fail(x->ctx, "README.md: out of memory");
    free(card);
    return -1;
  }
  int rc = put_text(x, "README.md", card);
  free(card);
  return rc;
}

/* format safetensors: every file of a Hugging Face GPT-2 directory into
 * x->tmp. The weights come first, the bulk of the work, and a stop
 * request is honoured after them. */
static int export_safetensors(exporter *x) {
  if (write_weights(x) != 0 || x->h->cancelled(x->ctx))
    return -1;
  x->h->progress(x->ctx, 0.6, "weights written");
  if (write_configs(x) != 0 ||
      copy_in(x, x->tokenizer, "tokenizer.json") != 0 ||
      write_vocab_merges(x) != 0 || write_card(x) != 0)
    return -1;
  return 0;
}

/* ---- format dagrun ---- */

/* format dagrun: the checkpoint's files copied as they are, with the
 * tokenizer used, and the copy verified against its manifest. */
static int export_dagrun(exporter *x) {
  if (x->info.kind != MODELDIR_CHECKPOINT) {
    x->h->fail(x->ctx,
               "format dagrun: %s is a Hugging Face directory, and a dagrun "
               "checkpoint needs what it lacks (the optimizer state, the "
               "training position); export it with format safetensors, or "
               "train from it with init_from",
               x->info.dir);
    return -1;
  }
  DIR *d = opendir(x->info.dir);
  if (!d) {
    x->h->fail(x->ctx, "%s: %s", x->info.dir, strerror(errno));
    return -1;
  }
  struct dirent *e;
  int rc = 0;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    /* The tokenizer goes in below, whichever it is. */
    if (e->d_name[0] == '.' || strcmp(e->d_name, "tokenizer.json") == 0)
      continue;
    char *src = fileio_join(x->info.dir, e->d_name);
    struct stat st;
    if (src && stat(src, &st) == 0 && S_ISREG(st.st_mode))
      rc = copy_in(x, src, e->d_name);
    free(src);
    if (rc == 0 && x->h->cancelled(x->ctx))
      rc = -1;
  }
  closedir(d);
  if (rc != 0)
    return -1;
  if (copy_in(x, x->tokenizer, "tokenizer.json") != 0)
    return -1;
  /* The copy must be the checkpoint it was: checksums and all. A
   * checkpoint whose manifest lists its own tokenizer.json, exported with
   * another tokenizer, fails here. */
  char err[1024];
  if (ckpt_verify(x->tmp, err, sizeof err) != 0) {
    x->h->fail(x->ctx, "the copy of %s does not verify: %s", x->info.dir, err);
    return -1;
  }
  return 0;
}

/* ---- Where it goes ---- */

/* Every export's marker: written first into the temporary directory,
 * {"format": "dagrun-export", "version": 1} (an export being built),
 * and last with "files", the names of everything else in it (a complete
 * export). Hidden, as format dagrun skips hidden files when it copies a
 * checkpoint, so an export of an export does not take the old marker. */
#define MARKER ".dagrun-export.json"
#define MARKER_FORMAT "dagrun-export"

/* Writes the marker into x->tmp: with complete, listing every file
 * there. 0 or -1 with the task failed. */
static int put_marker(exporter *x, int complete) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "format", MARKER_FORMAT);
  cJSON_AddNumberToObject(o, "version", 1);
  struct dirent **v = NULL;
  int n = complete ? scandir(x->tmp, &v, NULL, alphasort) : 0;
  if (n < 0) {
    cJSON_Delete(o);
    x->h->fail(x->ctx, "%s: %s", x->tmp, strerror(errno));
    return -1;
  }
  cJSON *files = complete ? cJSON_AddArrayToObject(o, "files") : NULL;
  for (int i = 0; i < n; i++) {
    const char *name = v[i]->d_name;
    if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
        strcmp(name, MARKER) != 0)
      cJSON_AddItemToArray(files, cJSON_CreateString(name));
    free(v[i]);
  }
  free(v);
  return put_json(x, MARKER, o);
}

/* Whether the complete marker m lists name. */
static int marker_lists(const cJSON *m, const char *name) {
  const cJSON *f;
  cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(m, "files")) {
    if (cJSON_IsString(f) && strcmp(f->valuestring, name) == 0)
      return 1;
  }
  return 0;
}

/* dir/name parsed, when it is a JSON object whose "format" is format
 * (NULL otherwise). */
static cJSON *read_format(const char *dir, const char *name,
                          const char *format) {
  char err[256];
  char *path = fileio_join(dir, name);
  char *text = path && exists(path)
                   ? fileio_read_all(path, NULL, err, sizeof err)
                   : NULL;
  free(path);
  cJSON *m = text ? cJSON_Parse(text) : NULL;
  free(text);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, format) != 0) {
    cJSON_Delete(m);
    return NULL;
  }
  return m;
}

/* An export from before the marker (dagrun before 2026-11-29): a
 * nightly DAG's fixed dir holds one after the upgrade, and refusing it
 * would fail that DAG's first run. Without a list of its own, such a
 * directory is recognised by its names: all are files an export of
 * then wrote, and model.safetensors is there. These lists are what
 * those versions wrote, not what this one writes: they do not grow.
 * Format safetensors (either dtype) wrote these. */
static const char *const legacy_hf_files[] = {"model.safetensors",
                                              "config.json",
                                              "generation_config.json",
                                              "tokenizer.json",
                                              "tokenizer_config.json",
                                              "special_tokens_map.json",
                                              "vocab.json",
                                              "merges.txt",
                                              "README.md",
                                              NULL};
/* format dagrun copied a checkpoint: the files its manifest.json (of
 * format "dagrun-checkpoint") lists, the manifest, the tokenizer, and a
 * promoted model's promotion.json. */
#define LEGACY_CKPT_MANIFEST "manifest.json"
static const char *const legacy_ckpt_extra[] = {
    LEGACY_CKPT_MANIFEST, "tokenizer.json", "promotion.json", NULL};

static int in_list(const char *const *list, const char *name) {
  for (; *list; list++)
    if (strcmp(*list, name) == 0)
      return 1;
  return 0;
}

/* Whether a legacy export wrote name: of format dagrun when manifest
 * (the directory's checkpoint manifest) is not NULL, else of format
 * safetensors. */
static int legacy_lists(const cJSON *manifest, const char *name) {
  if (!manifest)
    return in_list(legacy_hf_files, name);
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(manifest, "files");
  return in_list(legacy_ckpt_extra, name) ||
         cJSON_GetObjectItemCaseSensitive(files, name) != NULL;
}

/* Whether export may replace or remove path: it is absent, an empty
 * directory, or an export's (its marker, complete, and only files the
 * marker lists; with building, a marker without the list will do: the
 * temporary of an export killed while it wrote), or, without a marker,
 * a legacy export (legacy_lists: only files such an export wrote, and
 * model.safetensors, which a killed one's temporary may lack). 1 when
 * it may, else 0 with why saying what is there. */
static int is_replaceable(const char *path, int building, char *why, size_t n) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    int e = errno;
    snprintf(why, n, "%s", strerror(e));
    return e == ENOENT;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, n, "%s", S_ISLNK(st.st_mode) ? "a symbolic link" : "a file");
    return 0;
  }
  DIR *d = opendir(path);
  if (!d) {
    snprintf(why, n, "%s", strerror(errno));
    return 0;
  }
  cJSON *m = read_format(path, MARKER, MARKER_FORMAT);
  int complete = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "files"));
  cJSON *manifest =
      m ? NULL : read_format(path, LEGACY_CKPT_MANIFEST, "dagrun-checkpoint");
  int ok = 1, nlegacy = 0, weights = 0;
  struct dirent *e;
  while (ok && (e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, MARKER))
      continue;
    char *sub = fileio_join(path, name);
    int file = sub && lstat(sub, &st) == 0 && S_ISREG(st.st_mode);
    free(sub);
    if (m && (building || (complete && file && marker_lists(m, name))))
      continue;
    if (!m && file && legacy_lists(manifest, name)) {
      nlegacy++;
      weights |= strcmp(name, "model.safetensors") == 0;
      continue;
    }
    snprintf(why, n, "a directory that holds %s, which %s", name,
             m ? "its export did not write" : "no export wrote");
    ok = 0;
  }
  closedir(d);
  /* Names alone, without the weights, are too little to go by: a
   * README.md and a config.json may well be the user's. */
  if (ok && nlegacy && !weights && !building) {
    snprintf(why, n,
             "a directory without " MARKER " or model.safetensors, which "
             "every export has");
    ok = 0;
  }
  cJSON_Delete(manifest);
  cJSON_Delete(m);
  return ok;
}

/* The directories no dir may be or hold, since replacing dir would take
 * them along: the DAG's, the runs directory (<runs>/<dag>/<run>) and the
 * state store's ($DAGRUN_HOME, else .dagrun where dagrun runs). 0, or -1
 * with the task failed naming the one in the way. */
static int check_keeps(exporter *x) {
  const char *home = getenv("DAGRUN_HOME");
  char *runs = fileio_join(x->h->dir(x->ctx, DAGRUN_DIR_RUN), "../..");
  const struct {
    const char *what, *path;
  } keep[] = {
      {"the DAG's directory", x->h->dir(x->ctx, DAGRUN_DIR_DAG)},
      {"the runs directory", runs},
      {"the state store's directory", home && *home ? home : ".dagrun"},
  };
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof keep / sizeof *keep; i++) {
    char real[PATH_MAX];
    if (keep[i].path && is_within(keep[i].path, x->dest)) {
      int is = is_within(x->dest, keep[i].path);
      x->h->fail(x->ctx,
                 "dir %s %s %s%s%s: an export replaces its dir whole; "
                 "choose a directory of the export's own",
                 x->dest, is ? "is" : "holds", keep[i].what, is ? "" : " ",
                 is                             ? ""
                 : realpath(keep[i].path, real) ? real
                                                : keep[i].path);
      rc = -1;
    }
  }
  free(runs);
  return rc;
}

/* dest made the real path of its parent (created when missing) plus its
 * name, so that the renames below act on what the user named even
 * through "..", and its siblings' names; then everything in the way is
 * refused before anything moves. 0, or -1 with the task failed. */
static int place(exporter *x) {
  const dagrun_host *h = x->h;
  char *slash = strrchr(x->dest, '/');
  const char *base = slash ? slash + 1 : x->dest;
  /* "." and ".." name a directory that exists: its real name it is. */
  if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
    char *real = realpath(x->dest, NULL);
    if (!real) {
      h->fail(x->ctx, "dir %s: %s", x->dest, strerror(errno));
      return -1;
    }
    free(x->dest);
    x->dest = real;
    slash = strrchr(x->dest, '/');
    base = slash + 1;
    if (!*base) {
      h->fail(x->ctx, "dir %s: an export cannot replace /", x->dest);
      return -1;
    }
  }
  char *parent = !slash ? strdup(".")
                 : slash == x->dest
                     ? strdup("/")
                     : strndup(x->dest, (size_t)(slash - x->dest));
  char *name = strdup(base), real[PATH_MAX];
  int rc = parent && name ? fileio_mkdir_p(parent, 0755) : -ENOMEM;
  if (rc == 0 && !realpath(parent, real))
    rc = -errno;
  if (rc != 0) {
    h->fail(x->ctx, "cannot create %s: %s", parent ? parent : x->dest,
            strerror(-rc));
    free(parent);
    free(name);
    return -1;
  }
  const char *sep = strcmp(real, "/") == 0 ? "" : "/";
  free(x->dest);
  x->dest = fileio_xprintf("%s%s%s", real, sep, name);
  x->tmp = fileio_xprintf("%s%s.%s.tmp", real, sep, name);
  x->old = fileio_xprintf("%s%s.%s.old", real, sep, name);
  x->parent = strdup(real);
  free(parent);
  free(name);
  if (!x->dest || !x->tmp || !x->old || !x->parent) {
    h->fail(x->ctx, "out of memory");
    return -1;
  }
  if (check_keeps(x) != 0)
    return -1;
  char why[PATH_MAX + 128];
  if (!is_replaceable(x->dest, 0, why, sizeof why)) {
    h->fail(x->ctx,
            "dir %s is in the way: %s; an export replaces only an earlier "
            "export (a directory with its " MARKER " and the files that "
            "lists, or an older dagrun's export: only the files it wrote) "
            "or an empty directory: remove it or choose another dir",
            x->dest, why);
    return -1;
  }
  /* A failed or killed export of an older dagrun may have left the
   * user's directory at either sibling: never removed unless an
   * export's. */
  const char *sibling[] = {x->old, x->tmp};
  for (int i = 0; i < 2; i++)
    if (!is_replaceable(sibling[i], i == 1, why, sizeof why)) {
      h->fail(x->ctx,
              "%s is in the way: %s, and not an export's, which export "
              "would remove; it may be a directory an earlier export moved "
              "aside: look inside, then move it back or remove it",
              sibling[i], why);
      return -1;
    }
  return 0;
}

/* ---- The stage ---- */

/* Puts the finished temporary directory in place of dest: the old export
 * is moved aside, the new one renamed in, the parent fsynced, the old one
 * removed. A failure on the way puts the old one back (the new one goes
 * back to x->tmp, which run removes). */
static int swap_in(exporter *x) {
  int rc = fileio_fsync_dir(x->tmp);
  int had_old = 0, moved_in = 0;
  if (rc == 0 && exists(x->dest)) {
    rc = rename(x->dest, x->old) == 0 ? 0 : -errno;
    had_old = rc == 0;
  }
  if (rc == 0) {
    rc = rename(x->tmp, x->dest) == 0 ? 0 : -errno;
    moved_in = rc == 0;
  }
  if (rc == 0)
    rc = fileio_fsync_dir(x->parent);
  if (rc == 0) {
    if (had_old && fileio_remove_tree(x->old) != 0)
      x->h->log(x->ctx, DAGRUN_LOG_WARN, "could not remove the old export %s",
                x->old);
    return 0;
  }
  int back = (!moved_in || rename(x->dest, x->tmp) == 0) &&
             (!had_old || rename(x->old, x->dest) == 0);
  x->h->fail(x->ctx, "cannot put %s in place: %s%s%s", x->dest, strerror(-rc),
             back || !had_old ? "" : "; the previous export is ",
             back || !had_old ? "" : x->old);
  return -1;
}

/* Reads the params; exit status 0 or EXIT_BAD_PARAMS. */
static int read_params(exporter *x) {
  const dagrun_host *h = x->h;
  const char *model = "", *tok = "", *dir = "";
  h->param_string(x->ctx, "model", &model);
  h->param_string(x->ctx, "tokenizer", &tok);
  h->param_string(x->ctx, "dir", &dir);
  h->param_string(x->ctx, "name", &x->name_param);
  if (!x->name_param)
    x->name_param = "";
  if (!model || !*model) {
    h->fail(x->ctx, "model must name a model directory, e.g. "
                    "\"${tasks.checkpoint.outputs.model}\"");
    return EXIT_BAD_PARAMS;
  }
  int k;
  if (stagekit_param_choice(x->ctx, h, "format", format_names, &k))
    return EXIT_BAD_PARAMS;
  x->format = (export_format)k;
  if (stagekit_param_choice(x->ctx, h, "dtype", dtype_names, &k))
    return EXIT_BAD_PARAMS;
  x->dtype = (st_dtype)k;
  if (x->format == FORMAT_DAGRUN && x->dtype != ST_F32) {
    h->fail(x->ctx,
            "dtype %s is for format safetensors: format dagrun "
            "copies the checkpoint as it is (float32)",
            dtype_names[x->dtype]);
    return EXIT_BAD_PARAMS;
  }
  x->source = resolve(x, model);
  x->tokenizer = *tok ? resolve(x, tok) : NULL;
  x->dest = *dir ? resolve(x, dir)
                 : fileio_join(h->dir(x->ctx, DAGRUN_DIR_OUT), "model");
  if (!x->source || (*tok && !x->tokenizer) || !x->dest) {
    h->fail(x->ctx, "out of memory");
    return EXIT_FAILED;
  }
  /* No trailing slashes: the temporary sibling is named after the last
   * component. */
  size_t n = strlen(x->dest);
  while (n > 1 && x->dest[n - 1] == '/')
    x->dest[--n] = '\0';
  return 0;
}

/* The model and tokenizer, and whether they belong together. */
static int open_source(exporter *x) {
  const dagrun_host *h = x->h;
  char err[2048];
  /* Loaded for format dagrun too, which copies the files as they are:
   * a diverged model (NaN weights, checksums and all good) must not go
   * out as a model others load. */
  if (modeldir_open(x->source, &x->info, err, sizeof err) != 0) {
    h->fail(x->ctx, "model: %s", err);
    return -1;
  }
  if (x->info.skipped[0])
    h->log(x->ctx, DAGRUN_LOG_WARN, "model: %s", x->info.skipped);
  if (modeldir_load(&x->info, &x->model, err, sizeof err) != 0) {
    h->fail(x->ctx, "model: %s", err);
    return -1;
  }
  if (!x->tokenizer) {
    if (!x->info.tokenizer[0]) {
      h->fail(x->ctx,
              "model %s has no tokenizer.json beside it, and its checkpoint "
              "records none that still exists: set tokenizer",
              x->info.dir);
      return -1;
    }
    x->tokenizer = strdup(x->info.tokenizer);
  }
  if (!x->tokenizer ||
      bpe_load_hf(x->tokenizer, &x->tok, err, sizeof err) != 0) {
    h->fail(x->ctx, "tokenizer: %s", x->tokenizer ? err : "out of memory");
    return -1;
  }
  uint32_t tv = bpe_vocab_size(x->tok);
  if ((int64_t)tv != x->info.config.vocab_size) {
    h->fail(x->ctx,
            "the tokenizer %s has %u ids but the model %s has a vocabulary "
            "of %d: they do not belong together",
            x->tokenizer, tv, x->info.dir, x->info.config.vocab_size);
    return -1;
  }
  x->eot = bpe_special_id(x->tok, EOT);
  if (x->eot < 0) {
    h->fail(x->ctx,
            "the tokenizer %s has no %s token, which GPT-2's configs name "
            "as bos/eos/unk",
            x->tokenizer, EOT);
    return -1;
  }
  /* One vocabulary size is not one tokenizer (tokdata.h). */
  if (tokdata_file_fits_model(x->tokenizer, x->info.dir, x->info.tokenizer,
                              x->info.tokenizer_sha256, err, sizeof err) != 0) {
    h->fail(x->ctx, "%s: they do not belong together", err);
    return -1;
  }
  if (exists(x->dest) && is_within(x->info.dir, x->dest)) {
    h->fail(x->ctx,
            "dir %s holds the model being exported (%s): choose "
            "another dir",
            x->dest, x->info.dir);
    return -1;
  }
  return 0;
}

/* The temporary directory, made afresh with its marker. What a killed
 * attempt left goes first (place checked that both are an export's):
 * its temporary, and its old export, which goes back to dest when dest
 * is gone (killed between swap_in's two renames). 0, or -1 with the
 * task failed. */
static int begin_tmp(exporter *x) {
  int rc = fileio_remove_tree(x->tmp);
  if (rc == 0 && exists(x->old))
    rc = exists(x->dest)                ? fileio_remove_tree(x->old)
         : rename(x->old, x->dest) == 0 ? 0
                                        : -errno;
  if (rc == 0 && mkdir(x->tmp, 0755) != 0)
    rc = -errno;
  if (rc != 0) {
    x->h->fail(x->ctx, "cannot create %s: %s", x->tmp, strerror(-rc));
    return -1;
  }
  return put_marker(x, 0);
}

/* The stage: params, where it goes (refusing what is in the way), the
 * source, the temporary sibling, the export into it, its marker, then
 * swap_in. Any failure before swap_in removes the temporary and leaves
 * dest as it was. */
static int run(dagrun_ctx *ctx, const dagrun_host *h) {
  exporter x = {.ctx = ctx, .h = h};
  int status = read_params(&x);
  if (status != 0)
    goto done;
  status = EXIT_FAILED;
  if (place(&x) != 0 || open_source(&x) != 0)
    goto done;
  h->log(ctx, DAGRUN_LOG_INFO,
         "exporting %s (%s, step %lld: %d layers, %d heads, width %d, "
         "context %d, vocab %d) with tokenizer %s as %s%s to %s",
         x.info.dir, x.info.kind == MODELDIR_HF ? "Hugging Face" : "checkpoint",
         (long long)x.info.step, x.info.config.n_layer, x.info.config.n_head,
         x.info.config.n_embd, x.info.config.block_size,
         x.info.config.vocab_size, x.tokenizer,
         x.format == FORMAT_DAGRUN ? "dagrun" : "safetensors",
         x.format == FORMAT_DAGRUN ? ""
         : x.dtype == ST_BF16      ? " bfloat16"
                                   : " float32",
         x.dest);

  if (begin_tmp(&x) != 0)
    goto done;
  h->progress(ctx, 0.1, "writing");
  int rc =
      x.format == FORMAT_DAGRUN ? export_dagrun(&x) : export_safetensors(&x);
  if (rc == 0 && h->cancelled(ctx)) {
    h->fail(ctx, "stopped before the export was complete; nothing written");
    rc = -1;
  }
  if (rc != 0 || put_marker(&x, 1) != 0 || swap_in(&x) != 0) {
    fileio_remove_tree(x.tmp);
    goto done;
  }
  char *weights = fileio_join(x.dest, "model.safetensors");
  h->output(ctx, "dir", x.dest);
  h->output(ctx, "format",
            x.format == FORMAT_DAGRUN ? "dagrun" : "safetensors");
  h->output(ctx, "model", weights ? weights : "");
  h->log(ctx, DAGRUN_LOG_INFO, "exported to %s", x.dest);
  h->progress(ctx, 1.0, "done");
  free(weights);
  status = 0;
done:
  gpt_destroy(x.model);
  bpe_destroy(x.tok);
  free(x.source);
  free(x.tokenizer);
  free(x.dest);
  free(x.tmp);
  free(x.old);
  free(x.parent);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "export",
    "1.0.0",
    "Exports a model as a Hugging Face directory (GPT2LMHeadModel or "
    "LlamaForCausalLM: safetensors, config, tokenizer files, model card) or "
    "as a dagrun checkpoint.",
    params,
    run,
    choices,
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
