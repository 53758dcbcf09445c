/*
 * modeldir: opening a model directory of any kind dagrun reads, so that
 * every command and stage that takes "a model" accepts the same paths.
 * modeldir.h lists the kinds and states the contract.
 *
 * The kind is decided from what the directory holds, in this order: a
 * checkpoint manifest, then step-* entries (a directory of checkpoints,
 * whose latest valid one is taken, ckpt.h's rule), then a Hugging Face
 * config.json (GPT2LMHeadModel or LlamaForCausalLM). A Hugging Face
 * config is refused, with the key named, when it asks for a variant that
 * gpt.h does not compute, rather than loaded into a model that would give
 * other logits.
 */
#include "modeldir.h"

#include "ckpt.h"
#include "lib/fileio.h"
#include "lib/sha256.h"
#include "weights.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "dagrun-checkpoint"

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/name into out (size n); -1 when it does not fit. */
static int join_into(char *out, size_t n, const char *dir, const char *name) {
  int k = snprintf(out, n, "%s/%s", dir, name);
  return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* dir/name parsed as JSON, or NULL when the file is not there or is not
 * JSON (*exists says which). */
static cJSON *read_json(const char *dir, const char *name, int *exists) {
  char path[4096], ignored[256];
  *exists = 0;
  if (join_into(path, sizeof path, dir, name) != 0 || !is_file(path))
    return NULL;
  *exists = 1;
  char *text = fileio_read_all(path, NULL, ignored, sizeof ignored);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  free(text);
  return j;
}

/* ---- The manifest's model ---- */

/* f as the shortest decimal that reads back as f: 1e-05 for 1e-5f, not
 * the double 9.99999974737875e-06 that a plain widening writes. */
static double float_json(float f) {
  char b[32];
  for (int p = 6; p < 10; p++) {
    snprintf(b, sizeof b, "%.*g", p, (double)f);
    if ((float)strtod(b, NULL) == f)
      break;
  }
  return strtod(b, NULL);
}

const char *modeldir_family_name(int family) {
  return family == GPT_FAMILY_LLAMA ? "llama" : "gpt2";
}

cJSON *modeldir_model_json(const gpt_config *c) {
  cJSON *m = cJSON_CreateObject();
  if (!m)
    return NULL;
  cJSON_AddNumberToObject(m, "n_layer", c->n_layer);
  cJSON_AddNumberToObject(m, "n_head", c->n_head);
  cJSON_AddNumberToObject(m, "n_embd", c->n_embd);
  cJSON_AddNumberToObject(m, "block_size", c->block_size);
  cJSON_AddNumberToObject(m, "vocab_size", c->vocab_size);
  cJSON_AddStringToObject(m, "family", modeldir_family_name(c->family));
  if (c->family == GPT_FAMILY_LLAMA) {
    cJSON_AddNumberToObject(m, "n_kv_head", c->n_kv_head);
    cJSON_AddNumberToObject(m, "intermediate_size", c->intermediate);
    cJSON_AddNumberToObject(m, "rope_theta", float_json(c->rope_theta));
    cJSON_AddNumberToObject(m, "norm_eps", float_json(c->norm_eps));
    cJSON_AddBoolToObject(m, "tie_word_embeddings", !c->untied_head);
  }
  return m;
}

/* The positive integer field key of o into *v; -1 when absent or not
 * one. */
static int json_dim(const cJSON *o, const char *key, int *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) ||
      x->valuedouble < 1 || x->valuedouble > 1e9)
    return -1;
  *v = (int)x->valuedouble;
  return 0;
}

int modeldir_model_from_json(const cJSON *mj, gpt_config *out, char *err,
                             size_t errlen) {
  memset(out, 0, sizeof *out);
  static const char *const dims[] = {"n_layer", "n_head", "n_embd",
                                     "block_size", "vocab_size"};
  int *dst[] = {&out->n_layer, &out->n_head, &out->n_embd, &out->block_size,
                &out->vocab_size};
  for (int i = 0; i < 5; i++)
    if (json_dim(mj, dims[i], dst[i]) != 0) {
      snprintf(err, errlen, "has no %s", dims[i]);
      return -1;
    }
  const cJSON *fam = cJSON_GetObjectItemCaseSensitive(mj, "family");
  if (!fam || (cJSON_IsString(fam) && strcmp(fam->valuestring, "gpt2") == 0))
    return 0;
  if (!cJSON_IsString(fam) || strcmp(fam->valuestring, "llama") != 0) {
    snprintf(err, errlen,
             "has family %s, which this dagrun does not know (gpt2, llama)",
             cJSON_IsString(fam) ? fam->valuestring : "(not a string)");
    return -1;
  }
  out->family = GPT_FAMILY_LLAMA;
  const cJSON *th = cJSON_GetObjectItemCaseSensitive(mj, "rope_theta");
  const cJSON *ep = cJSON_GetObjectItemCaseSensitive(mj, "norm_eps");
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(mj, "tie_word_embeddings");
  if (json_dim(mj, "n_kv_head", &out->n_kv_head) != 0 ||
      json_dim(mj, "intermediate_size", &out->intermediate) != 0 ||
      !cJSON_IsNumber(th) || !cJSON_IsNumber(ep) || !cJSON_IsBool(tie)) {
    snprintf(err, errlen,
             "is a Llama's without all of n_kv_head, intermediate_size, "
             "rope_theta, norm_eps and tie_word_embeddings");
    return -1;
  }
  out->rope_theta = (float)th->valuedouble;
  out->norm_eps = (float)ep->valuedouble;
  out->untied_head = cJSON_IsFalse(tie);
  return 0;
}

/* The tokenizer.json beside a model's weights, and its identity. */
static void tokenizer_beside(modeldir_info *info, const char *tok) {
  snprintf(info->tokenizer, sizeof info->tokenizer, "%s", tok);
  if (sha256_file(tok, info->tokenizer_sha256) != 0)
    info->tokenizer_sha256[0] = '\0';
}

/* ---- A dagrun checkpoint ---- */

static int open_checkpoint(const char *dir, modeldir_info *info, char *err,
                           size_t errlen) {
  char sub[1024];
  if (ckpt_verify(dir, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen, "%s: a corrupt checkpoint: %s", dir, sub);
    return -1;
  }
  int64_t step = 0;
  char *text = NULL;
  if (ckpt_read_state(dir, &step, &text, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen, "%s", sub);
    return -1;
  }
  cJSON *st = cJSON_Parse(text);
  free(text);
  const cJSON *mj = cJSON_GetObjectItemCaseSensitive(st, "model");
  gpt_config mc;
  if (modeldir_model_from_json(mj, &mc, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen,
                  "%s: the manifest's state.model %s: not a checkpoint of "
                  "the train stage",
                  dir, sub);
    cJSON_Delete(st);
    return -1;
  }
  memset(info, 0, sizeof *info);
  info->kind = MODELDIR_CHECKPOINT;
  info->step = step;
  info->config = mc;
  if (gpt_config_finish(&info->config, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen, "%s: the manifest's model: %s", dir, sub);
    cJSON_Delete(st);
    return -1;
  }
  if (snprintf(info->dir, sizeof info->dir, "%s", dir) >=
          (int)sizeof info->dir ||
      join_into(info->weights, sizeof info->weights, dir,
                "model.safetensors") != 0) {
    fileio_seterr(err, errlen, "%s: path too long", dir);
    cJSON_Delete(st);
    return -1;
  }
  if (!is_file(info->weights)) {
    fileio_seterr(err, errlen, "%s: a checkpoint without model.safetensors",
                  dir);
    cJSON_Delete(st);
    return -1;
  }
  /* The tokenizer: one beside the weights (a promoted model, an export),
   * else the one the train stage recorded, if it is still there. */
  char tok[4096];
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(st, "config");
  const cJSON *tp = cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer");
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer_sha256");
  if (join_into(tok, sizeof tok, dir, "tokenizer.json") == 0 && is_file(tok))
    tokenizer_beside(info, tok);
  else if (cJSON_IsString(tp) && is_file(tp->valuestring) &&
           strlen(tp->valuestring) < sizeof info->tokenizer)
    snprintf(info->tokenizer, sizeof info->tokenizer, "%s", tp->valuestring);
  /* What it was trained with rules over what was put beside it later. */
  if (cJSON_IsString(ts) && strlen(ts->valuestring) == 64)
    memcpy(info->tokenizer_sha256, ts->valuestring, 65);
  cJSON_Delete(st);
  return 0;
}

/* ---- A Hugging Face GPT-2 or Llama directory ---- */

/* An integer field of config.json, or dflt when it is absent (as
 * GPT2Config's defaults); -1 with err when it is not a positive integer. */
static int hf_int(const cJSON *cfg, const char *key, int dflt, int *out,
                  const char *path, char *err, size_t errlen) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (!x || cJSON_IsNull(x)) {
    *out = dflt;
    return 0;
  }
  if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) ||
      x->valuedouble < 1 || x->valuedouble > 1e9) {
    fileio_seterr(err, errlen, "%s: \"%s\" is not a positive integer", path,
                  key);
    return -1;
  }
  *out = (int)x->valuedouble;
  return 0;
}

/* A boolean field: 1, 0, or dflt when absent. */
static int hf_bool(const cJSON *cfg, const char *key, int dflt) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
  return cJSON_IsBool(x) ? cJSON_IsTrue(x) : dflt;
}

/* Refuses a GPT-2 variant this engine would compute differently: what
 * transformers would run is not what we would, and the logits would
 * silently differ. */
static int hf_check_variant(const cJSON *cfg, int n_embd, const char *path,
                            char *err, size_t errlen) {
  const cJSON *act =
      cJSON_GetObjectItemCaseSensitive(cfg, "activation_function");
  if (act &&
      !(cJSON_IsString(act) && strcmp(act->valuestring, "gelu_new") == 0)) {
    fileio_seterr(err, errlen,
                  "%s: activation_function \"%s\": dagrun's engine computes "
                  "\"gelu_new\" (GELU, tanh approximation) only",
                  path,
                  cJSON_IsString(act) ? act->valuestring : "(not a string)");
    return -1;
  }
  const cJSON *eps =
      cJSON_GetObjectItemCaseSensitive(cfg, "layer_norm_epsilon");
  if (eps && !(cJSON_IsNumber(eps) && fabs(eps->valuedouble - 1e-5) <= 1e-12)) {
    fileio_seterr(err, errlen,
                  "%s: layer_norm_epsilon %g: dagrun's engine uses 1e-05 only",
                  path, cJSON_IsNumber(eps) ? eps->valuedouble : NAN);
    return -1;
  }
  static const char *const off[] = {"scale_attn_by_inverse_layer_idx",
                                    "reorder_and_upcast_attn"};
  for (int i = 0; i < 2; i++)
    if (hf_bool(cfg, off[i], 0)) {
      fileio_seterr(err, errlen,
                    "%s: %s is true: dagrun's engine does not do that", path,
                    off[i]);
      return -1;
    }
  if (!hf_bool(cfg, "scale_attn_weights", 1)) {
    fileio_seterr(
        err, errlen,
        "%s: scale_attn_weights is false: dagrun's engine always scales "
        "attention by 1/sqrt(head size)",
        path);
    return -1;
  }
  if (!hf_bool(cfg, "tie_word_embeddings", 1)) {
    fileio_seterr(err, errlen,
                  "%s: tie_word_embeddings is false: dagrun's engine ties the "
                  "output head to the token embedding",
                  path);
    return -1;
  }
  const cJSON *inner = cJSON_GetObjectItemCaseSensitive(cfg, "n_inner");
  if (inner && !cJSON_IsNull(inner) &&
      !(cJSON_IsNumber(inner) && inner->valuedouble == 4.0 * n_embd)) {
    fileio_seterr(
        err, errlen,
        "%s: n_inner %g: dagrun's engine has an MLP of width 4 x n_embd "
        "(%d)",
        path, cJSON_IsNumber(inner) ? inner->valuedouble : NAN, 4 * n_embd);
    return -1;
  }
  return 0;
}

/* A positive number field of config.json, or dflt when absent. */
static int hf_num(const cJSON *cfg, const char *key, double dflt, double *out,
                  const char *path, char *err, size_t errlen) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (!x || cJSON_IsNull(x)) {
    *out = dflt;
    return 0;
  }
  if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) ||
      !isfinite(x->valuedouble)) {
    fileio_seterr(err, errlen, "%s: \"%s\" is not a positive number", path,
                  key);
    return -1;
  }
  *out = x->valuedouble;
  return 0;
}

/* Refuses a LlamaForCausalLM that gpt.h's Llama would compute otherwise:
 * another activation, biases, scaled RoPE, a head size of its own. */
static int hf_llama_variant(const cJSON *cfg, const gpt_config *c,
                            const char *path, char *err, size_t errlen) {
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
  if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0)) {
    fileio_seterr(err, errlen,
                  "%s: hidden_act \"%s\": dagrun's Llama computes \"silu\" "
                  "(SwiGLU) only",
                  path,
                  cJSON_IsString(act) ? act->valuestring : "(not a string)");
    return -1;
  }
  static const char *const off[] = {"attention_bias", "mlp_bias"};
  for (int i = 0; i < 2; i++)
    if (hf_bool(cfg, off[i], 0)) {
      fileio_seterr(err, errlen, "%s: %s is true: dagrun's Llama has no biases",
                    path, off[i]);
      return -1;
    }
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
  if (rs && !cJSON_IsNull(rs)) {
    fileio_seterr(err, errlen,
                  "%s: rope_scaling is set: dagrun's Llama computes plain "
                  "RoPE (rope_scaling null) only",
                  path);
    return -1;
  }
  const cJSON *hd = cJSON_GetObjectItemCaseSensitive(cfg, "head_dim");
  if (hd && !cJSON_IsNull(hd) &&
      !(cJSON_IsNumber(hd) && c->n_head > 0 &&
        hd->valuedouble * c->n_head == c->n_embd)) {
    fileio_seterr(err, errlen,
                  "%s: head_dim %g: dagrun's Llama has heads of "
                  "hidden_size / num_attention_heads (%d / %d)",
                  path, cJSON_IsNumber(hd) ? hd->valuedouble : NAN, c->n_embd,
                  c->n_head);
    return -1;
  }
  return 0;
}

/* The Llama of config.json cfg (at path) into *c, unfinished;
 * LlamaConfig's defaults stand in for absent fields, as transformers
 * reads the file (num_key_value_heads: num_attention_heads; the head
 * untied; rms_norm_eps 1e-6). */
static int hf_llama_config(const cJSON *cfg, const char *path, gpt_config *c,
                           char *err, size_t errlen) {
  double theta = 0, eps = 0;
  c->family = GPT_FAMILY_LLAMA;
  if (hf_int(cfg, "num_hidden_layers", 32, &c->n_layer, path, err, errlen) ||
      hf_int(cfg, "num_attention_heads", 32, &c->n_head, path, err, errlen) ||
      hf_int(cfg, "hidden_size", 4096, &c->n_embd, path, err, errlen) ||
      hf_int(cfg, "vocab_size", 32000, &c->vocab_size, path, err, errlen) ||
      hf_int(cfg, "max_position_embeddings", 2048, &c->block_size, path, err,
             errlen) ||
      hf_int(cfg, "num_key_value_heads", c->n_head, &c->n_kv_head, path, err,
             errlen) ||
      hf_int(cfg, "intermediate_size", 11008, &c->intermediate, path, err,
             errlen) ||
      hf_num(cfg, "rope_theta", 10000.0, &theta, path, err, errlen) ||
      hf_num(cfg, "rms_norm_eps", 1e-6, &eps, path, err, errlen))
    return -1;
  c->rope_theta = (float)theta;
  c->norm_eps = (float)eps;
  c->untied_head = !hf_bool(cfg, "tie_word_embeddings", 0);
  return hf_llama_variant(cfg, c, path, err, errlen);
}

/* The GPT-2 of config.json cfg (at path) into *c, unfinished. */
static int hf_gpt2_config(const cJSON *cfg, const char *path, gpt_config *c,
                          char *err, size_t errlen) {
  /* GPT2Config's defaults stand in for absent fields, as transformers
   * reads the file. */
  int n_ctx = 0;
  if (hf_int(cfg, "n_layer", 12, &c->n_layer, path, err, errlen) ||
      hf_int(cfg, "n_head", 12, &c->n_head, path, err, errlen) ||
      hf_int(cfg, "n_embd", 768, &c->n_embd, path, err, errlen) ||
      hf_int(cfg, "vocab_size", 50257, &c->vocab_size, path, err, errlen) ||
      hf_int(cfg, "n_ctx", 1024, &n_ctx, path, err, errlen) ||
      hf_int(cfg, "n_positions", n_ctx, &c->block_size, path, err, errlen))
    return -1;
  return hf_check_variant(cfg, c->n_embd, path, err, errlen);
}

static int open_hf(const char *dir, const cJSON *cfg, modeldir_info *info,
                   char *err, size_t errlen) {
  char path[4096];
  if (join_into(path, sizeof path, dir, "config.json") != 0) {
    fileio_seterr(err, errlen, "%s: path too long", dir);
    return -1;
  }
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  const char *type = cJSON_IsString(mt) ? mt->valuestring : "(none)";
  gpt_config c = {0};
  if (strcmp(type, "gpt2") == 0) {
    if (hf_gpt2_config(cfg, path, &c, err, errlen) != 0)
      return -1;
  } else if (strcmp(type, "llama") == 0) {
    if (hf_llama_config(cfg, path, &c, err, errlen) != 0)
      return -1;
  } else {
    fileio_seterr(err, errlen,
                  "%s: model_type \"%s\": dagrun reads Hugging Face GPT-2 "
                  "(\"gpt2\") and Llama (\"llama\") directories only",
                  path, type);
    return -1;
  }
  char sub[512];
  if (gpt_config_finish(&c, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen, "%s: %s", path, sub);
    return -1;
  }
  memset(info, 0, sizeof *info);
  info->kind = MODELDIR_HF;
  info->step = -1;
  info->config = c;
  snprintf(info->dir, sizeof info->dir, "%s", dir);
  /* One file, or shards with their index (weights_load reads both). */
  if ((join_into(info->weights, sizeof info->weights, dir,
                 "model.safetensors") != 0 ||
       !is_file(info->weights)) &&
      (join_into(info->weights, sizeof info->weights, dir,
                 "model.safetensors.index.json") != 0 ||
       !is_file(info->weights))) {
    fileio_seterr(err, errlen,
                  "%s: a %s config.json without model.safetensors (or the "
                  "shards' model.safetensors.index.json) beside it (dagrun "
                  "reads safetensors weights, not pytorch_model.bin)",
                  dir, type);
    return -1;
  }
  char tok[4096];
  if (join_into(tok, sizeof tok, dir, "tokenizer.json") == 0 && is_file(tok))
    tokenizer_beside(info, tok);
  return 0;
}

/* ---- Any of them ---- */

/* Whether dir has an entry named step-*: a directory of checkpoints.
 * Asked before ckpt_find_latest, so that any other directory gets the
 * "not a model directory" answer without a scan for checkpoints. */
static int has_step_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  struct dirent *e;
  int found = 0;
  while (!found && (e = readdir(d)) != NULL)
    found = strncmp(e->d_name, "step-", 5) == 0;
  closedir(d);
  return found;
}

typedef struct skipped {
  char first[1024]; /* the newest invalid checkpoint */
  char why[1024];   /* and why */
  int n;            /* how many were skipped */
} skipped;

static void note_invalid(void *arg, const char *dir, const char *why) {
  skipped *s = arg;
  if (!s->n++) {
    snprintf(s->first, sizeof s->first, "%s", dir);
    snprintf(s->why, sizeof s->why, "%s", why);
  }
}

int modeldir_open(const char *path, modeldir_info *info, char *err,
                  size_t errlen) {
  if (!path || !*path) {
    fileio_seterr(err, errlen, "no model directory given");
    return -1;
  }
  if (!is_dir(path)) {
    fileio_seterr(err, errlen, "%s: %s", path,
                  access(path, F_OK) == 0 ? "not a directory"
                                          : strerror(errno));
    return -1;
  }
  if (strlen(path) > 4000) {
    fileio_seterr(err, errlen, "%s: path too long", path);
    return -1;
  }
  int exists = 0;
  cJSON *m = read_json(path, "manifest.json", &exists);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
  int is_ckpt =
      cJSON_IsString(fmt) && strcmp(fmt->valuestring, CKPT_FORMAT) == 0;
  int unreadable = exists && !m;
  cJSON_Delete(m);
  if (is_ckpt)
    return open_checkpoint(path, info, err, errlen);
  if (unreadable) {
    fileio_seterr(err, errlen,
                  "%s/manifest.json: not JSON (a corrupt checkpoint?)", path);
    return -1;
  }

  cJSON *cfg = read_json(path, "config.json", &exists);
  if (exists) {
    int rc = -1;
    if (!cJSON_IsObject(cfg))
      fileio_seterr(err, errlen, "%s/config.json: not a JSON object", path);
    else
      rc = open_hf(path, cfg, info, err, errlen);
    cJSON_Delete(cfg);
    return rc;
  }

  skipped sk = {.n = 0};
  char *latest = NULL, sub[1024];
  if (has_step_entries(path) &&
      ckpt_find_latest(path, &latest, note_invalid, &sk, sub, sizeof sub) ==
          0 &&
      latest) {
    int rc = open_checkpoint(latest, info, err, errlen);
    free(latest);
    /* Taking an older step than the newest is the user's to know: that
     * step's weights are not what training ended with. */
    if (rc == 0 && sk.n)
      fileio_seterr(info->skipped, sizeof info->skipped,
                    "skipped the newest checkpoint %s, which does not "
                    "verify (%s)%s: using %s instead",
                    sk.first, sk.why,
                    sk.n > 1 ? ", and older ones that do not either" : "",
                    info->dir);
    return rc;
  }
  if (sk.n)
    fileio_seterr(
        err, errlen,
        "%s: a directory of checkpoints with no valid one (newest: %s: %s)",
        path, sk.first, sk.why);
  else
    fileio_seterr(err, errlen,
                  "%s: not a model directory: expected a dagrun checkpoint "
                  "(manifest.json), a directory of checkpoints (step-*), or a "
                  "Hugging Face GPT-2 or Llama directory (config.json + "
                  "model.safetensors)",
                  path);
  return -1;
}

int modeldir_load(const modeldir_info *info, gpt **out, char *err,
                  size_t errlen) {
  gpt_config c = info->config;
  gpt *m = NULL;
  char sub[1024];
  if (gpt_config_finish(&c, sub, sizeof sub) != 0 ||
      gpt_create(&c, &m, sub, sizeof sub) != 0) {
    fileio_seterr(err, errlen, "%s: %s", info->dir, sub);
    return -1;
  }
  if (weights_load(info->weights, m, err, errlen) != 0 ||
      weights_check_finite(m, info->weights, err, errlen) != 0) {
    gpt_destroy(m);
    return -1;
  }
  *out = m;
  return 0;
}

static char *finish_config_json(cJSON *o, int64_t eot_id,
                                const char *torch_dtype);

/* config.json's fields of a LlamaForCausalLM of cfg, into o. */
static void llama_config_json(cJSON *o, const gpt_config *cfg) {
  cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
  cJSON_AddStringToObject(o, "model_type", "llama");
  cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
  cJSON_AddNumberToObject(o, "hidden_size", cfg->n_embd);
  cJSON_AddNumberToObject(o, "intermediate_size", cfg->intermediate);
  cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->n_layer);
  cJSON_AddNumberToObject(o, "num_attention_heads", cfg->n_head);
  cJSON_AddNumberToObject(o, "num_key_value_heads", cfg->n_kv_head);
  cJSON_AddNumberToObject(o, "head_dim", cfg->n_embd / cfg->n_head);
  cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->block_size);
  cJSON_AddStringToObject(o, "hidden_act", "silu");
  cJSON_AddNumberToObject(o, "rms_norm_eps", float_json(cfg->norm_eps));
  cJSON_AddNumberToObject(o, "rope_theta", float_json(cfg->rope_theta));
  cJSON_AddNullToObject(o, "rope_scaling");
  cJSON_AddBoolToObject(o, "attention_bias", 0);
  cJSON_AddBoolToObject(o, "mlp_bias", 0);
  cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
  cJSON_AddNumberToObject(o, "initializer_range", 0.02);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", !cfg->untied_head);
  cJSON_AddBoolToObject(o, "use_cache", 1);
}

char *modeldir_hf_config_json(const gpt_config *cfg, int64_t eot_id,
                              const char *torch_dtype) {
  cJSON *o = cJSON_CreateObject();
  if (o && cfg->family == GPT_FAMILY_LLAMA) {
    llama_config_json(o, cfg);
    return finish_config_json(o, eot_id, torch_dtype);
  }
  cJSON *arch = cJSON_CreateArray();
  if (!o || !arch) {
    cJSON_Delete(o);
    cJSON_Delete(arch);
    return NULL;
  }
  cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
  cJSON_AddItemToObject(o, "architectures", arch);
  cJSON_AddStringToObject(o, "model_type", "gpt2");
  cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
  cJSON_AddNumberToObject(o, "n_positions", cfg->block_size);
  cJSON_AddNumberToObject(o, "n_ctx", cfg->block_size);
  cJSON_AddNumberToObject(o, "n_embd", cfg->n_embd);
  cJSON_AddNumberToObject(o, "n_layer", cfg->n_layer);
  cJSON_AddNumberToObject(o, "n_head", cfg->n_head);
  cJSON_AddNullToObject(o, "n_inner");
  cJSON_AddStringToObject(o, "activation_function", "gelu_new");
  cJSON_AddNumberToObject(o, "resid_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "embd_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "attn_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
  cJSON_AddNumberToObject(o, "initializer_range", 0.02);
  cJSON_AddBoolToObject(o, "scale_attn_weights", 1);
  cJSON_AddBoolToObject(o, "scale_attn_by_inverse_layer_idx", 0);
  cJSON_AddBoolToObject(o, "reorder_and_upcast_attn", 0);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
  cJSON_AddBoolToObject(o, "use_cache", 1);
  return finish_config_json(o, eot_id, torch_dtype);
}

/* The fields both families' config.json end with; o consumed. */
static char *finish_config_json(cJSON *o, int64_t eot_id,
                                const char *torch_dtype) {
  if (eot_id >= 0) {
    cJSON_AddNumberToObject(o, "bos_token_id", (double)eot_id);
    cJSON_AddNumberToObject(o, "eos_token_id", (double)eot_id);
  }
  cJSON_AddStringToObject(o, "torch_dtype",
                          torch_dtype ? torch_dtype : "float32");
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}
