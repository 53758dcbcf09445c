/*
 * weights and modeldir: a model's weights go to safetensors and come back
 * exactly (F32) or rounded to nearest even (BF16); the names and extra
 * tensors of Hugging Face's GPT-2 files are read; a file of another model
 * (a wrong shape, an unknown tensor, a missing one) is refused naming the
 * tensor and leaves the model as it was. modeldir_open finds the model in
 * a checkpoint, a directory of checkpoints (skipping a corrupt newer one),
 * and a Hugging Face directory it wrote itself; it refuses a directory
 * with no model and a GPT-2 variant the engine would compute differently.
 */
#include "ckpt/ckpt.h"
#include "ckpt/modeldir.h"
#include "ckpt/safetensors.h"
#include "ckpt/weights.h"
#include "lib/fileio.h"
#include "model/gpt.h"
#include "testlib.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

/* L2 H2 C32 T16 V100 (padded to 128): wte has padding rows. */
static gpt_config small_config(void) {
  gpt_config c = {.n_layer = 2,
                  .n_head = 2,
                  .n_embd = 32,
                  .block_size = 16,
                  .vocab_size = 100};
  char err[256];
  if (gpt_config_finish(&c, err, sizeof err) != 0)
    fprintf(stderr, "config: %s\n", err);
  return c;
}

static gpt *make_model(uint64_t seed) {
  gpt_config c = small_config();
  gpt *m = NULL;
  char err[256];
  if (gpt_create(&c, &m, err, sizeof err) != 0) {
    fprintf(stderr, "gpt_create: %s\n", err);
    return NULL;
  }
  if (seed)
    gpt_init(m, seed);
  return m;
}

static int same_params(gpt *a, gpt *b) {
  return gpt_num_params(a) == gpt_num_params(b) &&
         memcmp(gpt_params(a), gpt_params(b),
                gpt_num_params(a) * sizeof(float)) == 0;
}

static float bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  memcpy(&f, &u, 4);
  return f;
}

static void test_round_trip(void) {
  char err[1024] = "";
  gpt *a = make_model(7), *b = make_model(0), *c = make_model(0);
  if (!a || !b || !c)
    return;
  const char *k[] = {"step"}, *v[] = {"12"};
  char p32[512], p16[512];
  snprintf(p32, sizeof p32, "%s", test_path("f32.safetensors"));
  snprintf(p16, sizeof p16, "%s", test_path("bf16.safetensors"));
  CHECK_INT(weights_save(p32, a, ST_F32, k, v, 1, err, sizeof err), 0);
  CHECK_INT(weights_save(p16, a, ST_BF16, NULL, NULL, 0, err, sizeof err), 0);

  /* The file is GPT-2's: wte without padding rows, metadata format pt. */
  st_file *f = NULL;
  CHECK_INT(st_open(p32, &f, err, sizeof err), 0);
  if (f) {
    const st_tensor *wte = st_find(f, "wte.weight");
    CHECK(wte && wte->ndim == 2 && wte->shape[0] == 100 && wte->shape[1] == 32);
    CHECK_STR(st_meta(f, "format"), "pt");
    CHECK_STR(st_meta(f, "step"), "12");
    CHECK_INT(st_count(f), gpt_tensor_count(a));
    st_close(f);
  }

  /* F32: the very same bits, padding rows zero. */
  float *pb = gpt_params(b);
  for (size_t i = 0; i < gpt_num_params(b); i++)
    pb[i] = 5.0f; /* loading must overwrite everything, padding included */
  CHECK_INT(weights_load(p32, b, err, sizeof err), 0);
  CHECK(same_params(a, b));

  /* BF16: every value rounded to nearest even, and nothing else. */
  CHECK_INT(weights_load(p16, c, err, sizeof err), 0);
  const float *pa = gpt_params(a), *pc = gpt_params(c);
  size_t bad = 0, changed = 0;
  for (size_t i = 0; i < gpt_num_params(a); i++) {
    if (pc[i] != bf16_round(pa[i]))
      bad++;
    if (pc[i] != pa[i])
      changed++;
  }
  CHECK_INT(bad, 0);
  CHECK(changed > 0); /* the values really went through bf16 */
  gpt_destroy(a);
  gpt_destroy(b);
  gpt_destroy(c);
}

/* Writes a to path as a Hugging Face state dict would have it, with the
 * tensors changed as asked: prefix on every name, extra tensors, one left
 * out, one renamed, one with another shape. */
typedef struct variant {
  const char *prefix;  /* "transformer." or "" */
  int hf_extras;       /* lm_head.weight and the attention masks */
  const char *omit;    /* a tensor left out, or NULL */
  const char *unknown; /* an extra tensor of this name, or NULL */
  const char *reshape; /* this tensor with its last dimension halved */
} variant;

static int write_variant(const char *path, gpt *a, const variant *vr) {
  const gpt_config *c = gpt_get_config(a);
  size_t n = gpt_tensor_count(a);
  st_tensor ts[64];
  char names[64][96];
  size_t k = 0;
  float *p = gpt_params(a);
  static float zeros[16 * 16 * 4];
  memset(zeros, 0, sizeof zeros);
  for (size_t i = 0; i < n && k < 60; i++) {
    const gpt_tensor *t = gpt_tensor_at(a, i);
    if (vr->omit && strcmp(t->name, vr->omit) == 0)
      continue;
    snprintf(names[k], sizeof names[k], "%s%s", vr->prefix, t->name);
    st_tensor *s = &ts[k];
    s->name = names[k];
    s->dtype = ST_F32;
    s->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++)
      s->shape[d] = t->shape[d];
    if (strcmp(t->name, "wte.weight") == 0)
      s->shape[0] = c->vocab_size;
    if (vr->reshape && strcmp(t->name, vr->reshape) == 0)
      s->shape[t->ndim - 1] /= 2;
    s->data = p + t->offset;
    k++;
  }
  if (vr->hf_extras) {
    const gpt_tensor *wte = gpt_tensor_find(a, "wte.weight");
    ts[k++] = (st_tensor){.name = "lm_head.weight",
                          .dtype = ST_F32,
                          .ndim = 2,
                          .shape = {c->vocab_size, c->n_embd},
                          .data = p + wte->offset};
    static char bias[2][64], masked[2][64];
    for (int l = 0; l < 2; l++) {
      snprintf(bias[l], sizeof bias[l], "%sh.%d.attn.bias", vr->prefix, l);
      snprintf(masked[l], sizeof masked[l], "%sh.%d.attn.masked_bias",
               vr->prefix, l);
      ts[k++] = (st_tensor){.name = bias[l],
                            .dtype = ST_F32,
                            .ndim = 4,
                            .shape = {1, 1, 16, 16},
                            .data = zeros};
      ts[k++] = (st_tensor){
          .name = masked[l], .dtype = ST_F32, .ndim = 0, .data = zeros};
    }
  }
  if (vr->unknown)
    ts[k++] = (st_tensor){.name = vr->unknown,
                          .dtype = ST_F32,
                          .ndim = 1,
                          .shape = {4},
                          .data = zeros};
  char err[512];
  if (st_write(path, ts, k, 0, NULL, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "st_write: %s\n", err);
    return -1;
  }
  return 0;
}

static void test_hf_names_and_refusals(void) {
  char err[1024] = "";
  gpt *a = make_model(11), *b = make_model(3), *keep = make_model(3);
  if (!a || !b || !keep)
    return;
  /* GPT2LMHeadModel's state dict: prefix, tied head, attention masks. */
  char p[512];
  snprintf(p, sizeof p, "%s", test_path("hf.safetensors"));
  CHECK_INT(
      write_variant(p, a, &(variant){"transformer.", 1, NULL, NULL, NULL}), 0);
  CHECK_INT(weights_load(p, b, err, sizeof err), 0);
  CHECK(same_params(a, b));
  /* GPT2Model's (the Hub's gpt2): no prefix, masks. */
  CHECK_INT(write_variant(p, a, &(variant){"", 1, NULL, NULL, NULL}), 0);
  CHECK_INT(weights_load(p, b, err, sizeof err), 0);
  CHECK(same_params(a, b));

  gpt_destroy(b);
  b = make_model(3);
  /* A wrong shape: named, with both shapes and the file. */
  CHECK_INT(
      write_variant(p, a, &(variant){"", 0, NULL, NULL, "h.1.mlp.c_fc.weight"}),
      0);
  err[0] = '\0';
  CHECK_INT(weights_load(p, b, err, sizeof err), -1);
  CHECK(strstr(err, "h.1.mlp.c_fc.weight") != NULL);
  CHECK(strstr(err, "(32 x 64)") != NULL);
  CHECK(strstr(err, "(32 x 128)") != NULL);
  CHECK(strstr(err, p) != NULL);
  CHECK(same_params(b, keep)); /* refused: the model is untouched */

  /* An unknown tensor. */
  CHECK_INT(write_variant(p, a,
                          &(variant){"transformer.", 1, NULL,
                                     "h.0.attn.rotary_emb", NULL}),
            0);
  err[0] = '\0';
  CHECK_INT(weights_load(p, b, err, sizeof err), -1);
  CHECK(strstr(err, "h.0.attn.rotary_emb") != NULL);
  CHECK(same_params(b, keep));

  /* A missing tensor. */
  CHECK_INT(write_variant(p, a, &(variant){"", 0, "ln_f.bias", NULL, NULL}), 0);
  err[0] = '\0';
  CHECK_INT(weights_load(p, b, err, sizeof err), -1);
  CHECK(strstr(err, "ln_f.bias") != NULL);
  CHECK(strstr(err, "missing") != NULL);
  CHECK(same_params(b, keep));

  /* A deeper model's file in a shallower model: h.2 is not ours. */
  gpt_config c3 = small_config();
  c3.n_layer = 3;
  gpt *deep = NULL;
  CHECK_INT(gpt_create(&c3, &deep, err, sizeof err), 0);
  if (deep) {
    gpt_init(deep, 5);
    CHECK_INT(weights_save(p, deep, ST_F32, NULL, NULL, 0, err, sizeof err), 0);
    err[0] = '\0';
    CHECK_INT(weights_load(p, b, err, sizeof err), -1);
    CHECK(strstr(err, "h.2.") != NULL);
    /* ...and the shallower file in the deeper model: h.2 is missing. */
    CHECK_INT(weights_save(p, a, ST_F32, NULL, NULL, 0, err, sizeof err), 0);
    err[0] = '\0';
    CHECK_INT(weights_load(p, deep, err, sizeof err), -1);
    CHECK(strstr(err, "h.2.") != NULL && strstr(err, "missing") != NULL);
    gpt_destroy(deep);
  }
  /* Not a file at all. */
  err[0] = '\0';
  CHECK_INT(weights_load(test_path("nope.safetensors"), b, err, sizeof err),
            -1);
  CHECK(strstr(err, "nope.safetensors") != NULL);
  gpt_destroy(a);
  gpt_destroy(b);
  gpt_destroy(keep);
}

/* A checkpoint of a under parent at step, as the train stage writes one:
 * state.model, state.config.tokenizer. */
static int make_ckpt(const char *parent, int64_t step, gpt *a,
                     const char *tokenizer) {
  char err[1024];
  ckpt_writer *w = NULL;
  if (ckpt_begin(parent, step, &w, err, sizeof err) != 0) {
    fprintf(stderr, "ckpt_begin: %s\n", err);
    return -1;
  }
  char *wp = fileio_join(ckpt_writer_dir(w), "model.safetensors");
  if (weights_save(wp, a, ST_F32, NULL, NULL, 0, err, sizeof err) != 0 ||
      ckpt_add_file(w, "optim.bin", "x", 1, err, sizeof err) != 0) {
    fprintf(stderr, "checkpoint: %s\n", err);
    free(wp);
    ckpt_abort(w);
    return -1;
  }
  free(wp);
  const gpt_config *c = gpt_get_config(a);
  char state[1024];
  snprintf(state, sizeof state,
           "{\"step\":\"%lld\",\"tokens\":\"0\",\"model\":{\"n_layer\":%d,"
           "\"n_head\":%d,\"n_embd\":%d,\"block_size\":%d,\"vocab_size\":%d},"
           "\"config\":{\"model\":\"custom\",\"tokenizer\":\"%s\"}}",
           (long long)step, c->n_layer, c->n_head, c->n_embd, c->block_size,
           c->vocab_size, tokenizer);
  if (ckpt_commit(w, state, NULL, 0, err, sizeof err) != 0) {
    fprintf(stderr, "ckpt_commit: %s\n", err);
    return -1;
  }
  return 0;
}

static int write_text(const char *path, const char *text) {
  char err[512];
  return fileio_write_atomic(path, text, strlen(text), err, sizeof err);
}

static int same_config(const gpt_config *a, const gpt_config *b) {
  return a->n_layer == b->n_layer && a->n_head == b->n_head &&
         a->n_embd == b->n_embd && a->block_size == b->block_size &&
         a->vocab_size == b->vocab_size && a->padded_vocab == b->padded_vocab;
}

static void test_open_checkpoints(void) {
  char err[1024] = "";
  gpt *a = make_model(21), *a2 = make_model(22), *a3 = make_model(23);
  if (!a || !a2 || !a3)
    return;
  char tok[512];
  snprintf(tok, sizeof tok, "%s", test_path("data/tokenizer.json"));
  mkdir(test_path("data"), 0755);
  CHECK_INT(write_text(tok, "{}"), 0);
  char parent[512];
  snprintf(parent, sizeof parent, "%s", test_path("train/checkpoints"));
  CHECK_INT(make_ckpt(parent, 100, a, tok), 0);
  CHECK_INT(make_ckpt(parent, 200, a2, tok), 0);

  /* One checkpoint. */
  modeldir_info info;
  char c100[512];
  snprintf(c100, sizeof c100, "%s",
           test_path("train/checkpoints/step-00000100"));
  CHECK_INT(modeldir_open(c100, &info, err, sizeof err), 0);
  CHECK_INT(info.kind, MODELDIR_CHECKPOINT);
  CHECK_INT(info.step, 100);
  CHECK_STR(info.dir, c100);
  CHECK_STR(info.weights, test_path("train/checkpoints/step-00000100/"
                                    "model.safetensors"));
  CHECK_STR(info.tokenizer, tok);
  gpt_config want = small_config();
  CHECK(same_config(&info.config, &want));
  gpt *m = NULL;
  CHECK_INT(modeldir_load(&info, &m, err, sizeof err), 0);
  CHECK(m && same_params(m, a));
  gpt_destroy(m);

  /* The directory of checkpoints: the latest valid one, past a corrupt
   * newer one. */
  CHECK_INT(make_ckpt(parent, 300, a3, tok), 0);
  CHECK_INT(truncate(test_path("train/checkpoints/step-00000300/"
                               "model.safetensors"),
                     100),
            0);
  CHECK_INT(modeldir_open(parent, &info, err, sizeof err), 0);
  CHECK_INT(info.step, 200);
  CHECK_STR(info.dir, test_path("train/checkpoints/step-00000200"));
  m = NULL;
  CHECK_INT(modeldir_load(&info, &m, err, sizeof err), 0);
  CHECK(m && same_params(m, a2));
  gpt_destroy(m);

  /* The corrupt one, named directly, is refused naming the file. */
  err[0] = '\0';
  CHECK_INT(modeldir_open(test_path("train/checkpoints/step-00000300"), &info,
                          err, sizeof err),
            -1);
  CHECK(strstr(err, "step-00000300") && strstr(err, "model.safetensors") &&
        strstr(err, "truncated"));

  /* A promoted model: a checkpoint with its own tokenizer.json, which
   * wins over the recorded one. */
  char promoted[512];
  snprintf(promoted, sizeof promoted, "%s",
           test_path("models/best/step-00000100"));
  CHECK_INT(make_ckpt(test_path("models/best"), 100, a, tok), 0);
  CHECK_INT(
      write_text(test_path("models/best/step-00000100/tokenizer.json"), "{}"),
      0);
  CHECK_INT(modeldir_open(promoted, &info, err, sizeof err), 0);
  CHECK_STR(info.tokenizer,
            test_path("models/best/step-00000100/tokenizer.json"));

  /* The recorded tokenizer gone: no tokenizer, the model still opens. */
  unlink(tok);
  CHECK_INT(modeldir_open(c100, &info, err, sizeof err), 0);
  CHECK_STR(info.tokenizer, "");

  /* A directory of only corrupt checkpoints: says so. */
  CHECK_INT(make_ckpt(test_path("allbad"), 5, a, tok), 0);
  CHECK_INT(truncate(test_path("allbad/step-00000005/model.safetensors"), 10),
            0);
  err[0] = '\0';
  CHECK_INT(modeldir_open(test_path("allbad"), &info, err, sizeof err), -1);
  CHECK(strstr(err, "allbad") && strstr(err, "no valid"));
  gpt_destroy(a);
  gpt_destroy(a2);
  gpt_destroy(a3);
}

/* An HF directory of a, with config.json edited by key = JSON value
 * pairs (NULL-terminated). */
static int make_hf(const char *dir, gpt *a, st_dtype dt, ...) {
  mkdir(dir, 0755);
  char *text = modeldir_hf_config_json(gpt_get_config(a), 99,
                                       dt == ST_BF16 ? "bfloat16" : "float32");
  cJSON *cfg = text ? cJSON_Parse(text) : NULL;
  free(text);
  if (!cfg)
    return -1;
  va_list ap;
  va_start(ap, dt);
  const char *key;
  while ((key = va_arg(ap, const char *)) != NULL) {
    const char *val = va_arg(ap, const char *);
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, key);
    cJSON_AddItemToObject(cfg, key, cJSON_Parse(val));
  }
  va_end(ap);
  text = cJSON_Print(cfg);
  cJSON_Delete(cfg);
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  int rc = write_text(path, text);
  free(text);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (rc == 0)
    rc = weights_save(path, a, dt, NULL, NULL, 0, err, sizeof err);
  return rc;
}

static void test_open_hf(void) {
  char err[1024] = "";
  gpt *a = make_model(31);
  if (!a)
    return;
  /* The config modeldir writes: GPT-2's fields. */
  char *text = modeldir_hf_config_json(gpt_get_config(a), 99, "float32");
  cJSON *cfg = text ? cJSON_Parse(text) : NULL;
  free(text);
  CHECK(cfg != NULL);
  if (cfg) {
    CHECK_STR(cJSON_GetObjectItem(cfg, "model_type")->valuestring, "gpt2");
    CHECK_STR(cJSON_GetArrayItem(cJSON_GetObjectItem(cfg, "architectures"), 0)
                  ->valuestring,
              "GPT2LMHeadModel");
    CHECK_STR(cJSON_GetObjectItem(cfg, "activation_function")->valuestring,
              "gelu_new");
    CHECK_INT(cJSON_GetObjectItem(cfg, "n_positions")->valueint, 16);
    CHECK_INT(cJSON_GetObjectItem(cfg, "vocab_size")->valueint, 100);
    CHECK_INT(cJSON_GetObjectItem(cfg, "eos_token_id")->valueint, 99);
    CHECK_NEAR(cJSON_GetObjectItem(cfg, "layer_norm_epsilon")->valuedouble,
               1e-5, 0);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "tie_word_embeddings")));
    CHECK_STR(cJSON_GetObjectItem(cfg, "torch_dtype")->valuestring, "float32");
    cJSON_Delete(cfg);
  }
  char hf[512];
  snprintf(hf, sizeof hf, "%s", test_path("hf"));
  CHECK_INT(make_hf(hf, a, ST_BF16, NULL), 0);
  CHECK_INT(write_text(test_path("hf/tokenizer.json"), "{}"), 0);
  modeldir_info info;
  CHECK_INT(modeldir_open(hf, &info, err, sizeof err), 0);
  CHECK_INT(info.kind, MODELDIR_HF);
  CHECK_INT(info.step, -1);
  CHECK_STR(info.weights, test_path("hf/model.safetensors"));
  CHECK_STR(info.tokenizer, test_path("hf/tokenizer.json"));
  gpt_config want = small_config();
  CHECK(same_config(&info.config, &want));
  gpt *m = NULL;
  CHECK_INT(modeldir_load(&info, &m, err, sizeof err), 0);
  if (m) {
    const float *pa = gpt_params(a), *pm = gpt_params(m);
    size_t bad = 0;
    for (size_t i = 0; i < gpt_num_params(a); i++)
      bad += pm[i] != bf16_round(pa[i]);
    CHECK_INT(bad, 0);
    gpt_destroy(m);
  }

  /* Variants the engine would compute differently are refused, naming
   * the setting. */
  static const struct {
    const char *key, *value, *says;
  } refused[] = {
      {"activation_function", "\"gelu\"", "activation_function"},
      {"layer_norm_epsilon", "1e-6", "layer_norm_epsilon"},
      {"scale_attn_by_inverse_layer_idx", "true",
       "scale_attn_by_inverse_layer_idx"},
      {"reorder_and_upcast_attn", "true", "reorder_and_upcast_attn"},
      {"n_inner", "64", "n_inner"},
      {"tie_word_embeddings", "false", "tie_word_embeddings"},
      {"model_type", "\"mistral\"", "mistral"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    const char *d = test_path("hfbad%zu", i);
    CHECK_INT(make_hf(d, a, ST_F32, refused[i].key, refused[i].value, NULL), 0);
    err[0] = '\0';
    CHECK_INT(modeldir_open(d, &info, err, sizeof err), -1);
    if (!strstr(err, refused[i].says) || !strstr(err, d)) {
      fprintf(stderr, "%s: %s\n", refused[i].key, err);
      CHECK(0);
    }
  }
  /* n_inner 4C is what we compute: accepted. */
  CHECK_INT(make_hf(test_path("hfinner"), a, ST_F32, "n_inner", "128", NULL),
            0);
  CHECK_INT(modeldir_open(test_path("hfinner"), &info, err, sizeof err), 0);
  /* config.json without weights. */
  unlink(test_path("hfinner/model.safetensors"));
  err[0] = '\0';
  CHECK_INT(modeldir_open(test_path("hfinner"), &info, err, sizeof err), -1);
  CHECK(strstr(err, "model.safetensors") != NULL);
  gpt_destroy(a);
}

static void test_not_a_model(void) {
  char err[1024] = "";
  modeldir_info info;
  const char *d = test_path("empty");
  mkdir(d, 0755);
  CHECK_INT(write_text(test_path("empty/notes.txt"), "hello"), 0);
  CHECK_INT(modeldir_open(d, &info, err, sizeof err), -1);
  CHECK(strstr(err, d) && strstr(err, "not a model directory"));
  /* The tokenize stage's output: a manifest.json, but not a checkpoint. */
  d = test_path("tokens");
  mkdir(d, 0755);
  CHECK_INT(write_text(test_path("tokens/manifest.json"),
                       "{\"format\": \"dagrun-tokens\"}"),
            0);
  err[0] = '\0';
  CHECK_INT(modeldir_open(d, &info, err, sizeof err), -1);
  CHECK(strstr(err, d) && strstr(err, "not a model directory"));
  d = test_path("missing/dir");
  err[0] = '\0';
  CHECK_INT(modeldir_open(d, &info, err, sizeof err), -1);
  CHECK(strstr(err, d) != NULL);
  d = test_path("empty/notes.txt");
  err[0] = '\0';
  CHECK_INT(modeldir_open(d, &info, err, sizeof err), -1);
  CHECK(strstr(err, d) && strstr(err, "not a directory"));
}

int main(void) {
  if (test_tmpdir_make("modeldir") != 0)
    return 1;
  test_round_trip();
  test_hf_names_and_refusals();
  test_open_checkpoints();
  test_open_hf();
  test_not_a_model();
  test_tmpdir_remove();
  TEST_DONE();
}
