/*
 * trainstate: a training run's state as a checkpoint (trainstate.h has
 * the files). The container is ckpt.h's: a step-NNNNNNNN directory
 * written under a temporary name, every file checksummed in its
 * manifest and the directory renamed into place, so that a crash or a
 * kill leaves the last complete checkpoint and never half of one.
 *
 * Contract: trainstate_save writes what train_state points at (the
 * weights always; the optimizer, the spike guard and the loader's
 * position when given) and returns the checkpoint's path;
 * trainstate_load reads one back into a run made with the same model
 * shape and optimizer, refusing anything else by name. Both return 0 or
 * -1 with err; neither keeps state.
 *
 * Why each piece is in it: resuming must give the same bits as never
 * stopping, so the state is everything that a step reads: the weights,
 * the optimizer's moments and step count, the guard's window (a spike
 * is judged against it) and the loader's position and random state (the
 * next batch). The weights are model.safetensors in float32 with GPT-2's
 * names so that the same file also serves validate, export and
 * Hugging Face tools without a conversion.
 */
#include "trainstate.h"

#include <math.h>

#include "ckpt/ckpt.h"
#include "ckpt/modeldir.h"
#include "ckpt/safetensors.h"
#include "ckpt/weights.h"
#include "common/tokdata.h"
#include "lib/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* optim.bin: a 64-byte header, then the moments as float32. */
#define OPTIM_MAGIC "DROPTIM1"
#define OPTIM_HEADER 64u

typedef struct optim_header {
  char magic[8];
  uint32_t version, header_size;
  uint32_t kind, pad;
  uint64_t t, nfloats;
  uint8_t zero[24];
} optim_header;
_Static_assert(sizeof(optim_header) == OPTIM_HEADER, "optim.bin header");

/* Integers above 2^53 do not survive a JSON number, so 64-bit state goes
 * as decimal strings. */
static void add_u64(cJSON *o, const char *key, uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRIu64, v);
  cJSON_AddStringToObject(o, key, buf);
}

static int get_u64(const cJSON *o, const char *key, uint64_t *v) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsString(it))
    return -1;
  char *end;
  errno = 0;
  *v = strtoull(it->valuestring, &end, 10);
  return (errno || *end || end == it->valuestring) ? -1 : 0;
}

/* optim.bin: the header, then the optimizer's state floats. */
static int add_optim(ckpt_writer *w, optim *opt, char *err, size_t errlen) {
  size_t nf = optim_state_floats(opt);
  size_t bytes = OPTIM_HEADER + nf * sizeof(float);
  uint8_t *buf = malloc(bytes);
  if (!buf) {
    snprintf(err, errlen, "out of memory for optim.bin (%zu bytes)", bytes);
    return -1;
  }
  optim_header h = {.version = 1, .header_size = OPTIM_HEADER};
  memcpy(h.magic, OPTIM_MAGIC, 8);
  h.t = optim_get_t(opt);
  h.nfloats = nf;
  memcpy(buf, &h, sizeof h);
  memcpy(buf + OPTIM_HEADER, optim_state(opt), nf * sizeof(float));
  int rc = ckpt_add_file(w, "optim.bin", buf, bytes, err, errlen);
  free(buf);
  return rc;
}

/* The train loader's position into the state's "loader": batches, epoch,
 * the RNG, and with a mixture its sources' count and the rows each has
 * served (sources, rows0...). */
static void save_loader(cJSON *st, const loader *ld) {
  loader_pos pos;
  loader_get_pos(ld, &pos);
  cJSON *l = cJSON_AddObjectToObject(st, "loader");
  add_u64(l, "batches", pos.batches);
  add_u64(l, "epoch", pos.epoch);
  char key[32];
  for (int i = 0; i < 4; i++) {
    snprintf(key, sizeof key, "rng%d", i);
    add_u64(l, key, pos.rng[i]);
  }
  size_t n = loader_sources(ld);
  if (n < 2)
    return;
  add_u64(l, "sources", n);
  for (size_t i = 0; i < n; i++) {
    snprintf(key, sizeof key, "rows%zu", i);
    add_u64(l, key, pos.rows[i]);
  }
}

/* save_loader's position back into ld: 0, or -1 when it is missing or
 * not one ld can have (another mixture). A checkpoint without sources is
 * of one source, whose rows the loader derives. */
static int load_loader(const cJSON *st, loader *ld) {
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(st, "loader");
  loader_pos pos;
  memset(&pos, 0, sizeof pos);
  char key[32];
  int bad = get_u64(l, "batches", &pos.batches) != 0 ||
            get_u64(l, "epoch", &pos.epoch) != 0;
  for (int i = 0; i < 4 && !bad; i++) {
    snprintf(key, sizeof key, "rng%d", i);
    bad = get_u64(l, key, &pos.rng[i]) != 0;
  }
  uint64_t n = 1;
  if (cJSON_GetObjectItemCaseSensitive(l, "sources"))
    bad = bad || get_u64(l, "sources", &n) != 0;
  if (bad || n != loader_sources(ld))
    return -1;
  for (size_t i = 0; i < n && n > 1; i++) {
    snprintf(key, sizeof key, "rows%zu", i);
    if (get_u64(l, key, &pos.rows[i]) != 0)
      return -1;
  }
  return loader_set_pos(ld, &pos);
}

int trainstate_save(const char *parent, const train_state *s, char *path,
                    size_t pathlen, char *err, size_t errlen) {
  ckpt_writer *w = NULL;
  if (ckpt_begin(parent, s->step, &w, err, errlen) != 0)
    return -1;
  char *model_path = fileio_join(ckpt_writer_dir(w), "model.safetensors");
  if (!model_path || weights_save(model_path, s->model, ST_F32, NULL, NULL, 0,
                                  err, errlen) != 0) {
    free(model_path);
    ckpt_abort(w);
    return -1;
  }
  free(model_path);

  /* Weights only (no opt, no guard): the full model a gang writes at its
   * end. */
  if (s->opt && add_optim(w, s->opt, err, errlen) != 0) {
    ckpt_abort(w);
    return -1;
  }
  if (s->guard && ckpt_add_file(w, "guard.bin", s->guard, sizeof *s->guard,
                                err, errlen) != 0) {
    ckpt_abort(w);
    return -1;
  }

  cJSON *st = cJSON_CreateObject();
  add_u64(st, "step", (uint64_t)s->step);
  add_u64(st, "tokens", s->tokens);
  /* The model's shape and family: trainstate_load compares them before
   * reading a byte of weights, so that another model's checkpoint fails
   * with both shapes named instead of a size mismatch. */
  cJSON_AddItemToObject(st, "model",
                        modeldir_model_json(gpt_get_config(s->model)));
  if (isfinite(s->init_loss))
    cJSON_AddNumberToObject(st, "init_loss", s->init_loss);
  cJSON *config = s->config_json ? cJSON_Parse(s->config_json) : NULL;
  if (config)
    cJSON_AddItemToObject(st, "config", config);
  if (s->train)
    save_loader(st, s->train);
  char *text = cJSON_PrintUnformatted(st);
  cJSON_Delete(st);
  if (!text) {
    snprintf(err, errlen, "out of memory");
    ckpt_abort(w);
    return -1;
  }
  int rc = ckpt_commit(w, text, path, pathlen, err, errlen);
  free(text);
  return rc;
}

/* optim.bin's n bytes at ob against this run's optimizer of nf floats:
 * 0, or -1 with err saying which of its checks failed (a file cut short
 * is not another optimizer). */
static int check_optim(const uint8_t *ob, size_t n, size_t nf, const char *dir,
                       char *err, size_t errlen) {
  optim_header h;
  if (n < sizeof h) {
    snprintf(err, errlen,
             "%s/optim.bin: %zu bytes, shorter than its %u-byte header", dir, n,
             OPTIM_HEADER);
    return -1;
  }
  memcpy(&h, ob, sizeof h);
  if (memcmp(h.magic, OPTIM_MAGIC, 8) != 0 || h.header_size != OPTIM_HEADER) {
    snprintf(err, errlen,
             "%s/optim.bin: not an optimizer state file (its magic or header "
             "size is not %s's %u bytes)",
             dir, OPTIM_MAGIC, OPTIM_HEADER);
    return -1;
  }
  if (h.nfloats != nf) {
    snprintf(err, errlen,
             "%s/optim.bin: the state of another optimizer (%" PRIu64
             " floats; this run's has %zu)",
             dir, h.nfloats, nf);
    return -1;
  }
  size_t want = OPTIM_HEADER + nf * sizeof(float);
  if (n != want) {
    snprintf(err, errlen,
             "%s/optim.bin: %zu bytes, but its header's %" PRIu64
             " floats make %zu: %s",
             dir, n, h.nfloats, want,
             n < want ? "truncated" : "trailing bytes");
    return -1;
  }
  return 0;
}

/* The checkpoint's tokenizer (its manifest's state st) against the run's.
 * 0, or -1 with err. */
static int same_tokenizer(const char *dir, const cJSON *st,
                          const train_state *s, char *err, size_t errlen) {
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(st, "config");
  const char *path =
      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer"));
  const char *sha = cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer_sha256"));
  char owner[4200], sub[8192];
  snprintf(owner, sizeof owner, "the checkpoint %s", dir);
  tokdata_tokref ck = {owner, path ? path : "(not recorded)", sha};
  tokdata_tokref run = {"this run's data", s->tokenizer ? s->tokenizer : "",
                        s->tokenizer_sha256};
  if (tokdata_same_tokenizer(&ck, &run, sub, sizeof sub) == 0)
    return 0;
  snprintf(err, errlen,
           "%s: resuming needs the data tokenized with the checkpoint's own "
           "tokenizer",
           sub);
  return -1;
}

int trainstate_load(const char *dir, train_state *s, char *err, size_t errlen) {
  int64_t step = 0;
  char *text = NULL;
  if (ckpt_read_state(dir, &step, &text, err, errlen) != 0)
    return -1;
  cJSON *st = cJSON_Parse(text);
  free(text);
  int rc = -1;
  uint8_t *ob = NULL, *gb = NULL;
  const gpt_config *c = gpt_get_config(s->model);
  const cJSON *mj = cJSON_GetObjectItemCaseSensitive(st, "model");
  gpt_config ck;
  char sub[256];
  if (modeldir_model_from_json(mj, &ck, sub, sizeof sub) != 0) {
    snprintf(err, errlen, "%s: the manifest's model %s", dir, sub);
    goto done;
  }
  if (ck.family != c->family) {
    snprintf(err, errlen,
             "%s: a checkpoint of the %s family; this run's model is of the "
             "%s family",
             dir, modeldir_family_name(ck.family),
             modeldir_family_name(c->family));
    goto done;
  }
  const char *const dims[] = {"n_layer",   "n_head",           "n_embd",
                              "block_size", "vocab_size",       "n_kv_head",
                              "intermediate_size", "untied head"};
  const int have[] = {c->n_layer,    c->n_head,       c->n_embd,
                      c->block_size, c->vocab_size,   c->n_kv_head,
                      c->intermediate, c->untied_head};
  const int was[] = {ck.n_layer,    ck.n_head,       ck.n_embd,
                     ck.block_size, ck.vocab_size,   ck.n_kv_head,
                     ck.intermediate, ck.untied_head};
  for (int i = 0; i < 8; i++) {
    if (was[i] != have[i]) {
      snprintf(err, errlen,
               "%s: a checkpoint of another model (%s %d, this run has %d)",
               dir, dims[i], was[i], have[i]);
      goto done;
    }
  }
  if (ck.rope_theta != c->rope_theta || ck.norm_eps != c->norm_eps) {
    snprintf(err, errlen,
             "%s: a checkpoint of another model (rope_theta %g, norm_eps %g; "
             "this run has %g, %g)",
             dir, (double)ck.rope_theta, (double)ck.norm_eps,
             (double)c->rope_theta, (double)c->norm_eps);
    goto done;
  }
  if (same_tokenizer(dir, st, s, err, errlen) != 0)
    goto done;
  const cJSON *il = cJSON_GetObjectItemCaseSensitive(st, "init_loss");
  s->init_loss = cJSON_IsNumber(il) ? il->valuedouble : NAN;
  uint64_t tokens = 0;
  if (get_u64(st, "tokens", &tokens) != 0) {
    snprintf(err, errlen, "%s: manifest state has no tokens count", dir);
    goto done;
  }
  char *wpath = fileio_join(dir, "model.safetensors");
  if (!wpath)
    snprintf(err, errlen, "out of memory");
  if (!wpath || weights_load(wpath, s->model, err, errlen) != 0) {
    free(wpath);
    goto done;
  }
  free(wpath);

  size_t n = 0;
  char *path = fileio_join(dir, "optim.bin");
  if (path && access(path, F_OK) != 0) {
    snprintf(err, errlen,
             "%s: weights only, no optimizer state (the full model a gang "
             "writes at its end): use it as init_from, or resume the gang "
             "from its sharded checkpoints",
             dir);
    free(path);
    goto done;
  }
  ob = path ? (uint8_t *)fileio_read_all(path, &n, err, errlen) : NULL;
  free(path);
  if (!ob)
    goto done;
  size_t nf = optim_state_floats(s->opt);
  if (check_optim(ob, n, nf, dir, err, errlen) != 0)
    goto done;
  optim_header h;
  memcpy(&h, ob, sizeof h);
  memcpy(optim_state(s->opt), ob + OPTIM_HEADER, nf * sizeof(float));
  optim_set_t(s->opt, h.t);

  path = fileio_join(dir, "guard.bin");
  gb = path ? (uint8_t *)fileio_read_all(path, &n, err, errlen) : NULL;
  free(path);
  if (!gb)
    goto done;
  if (n != sizeof *s->guard) {
    snprintf(err, errlen, "%s/guard.bin: %zu bytes, expected %zu", dir, n,
             sizeof *s->guard);
    goto done;
  }
  /* The window and counters come from the checkpoint; the policy stays
   * what this run's params say. */
  spike_config cfg = s->guard->cfg;
  memcpy(s->guard, gb, n);
  s->guard->cfg = cfg;

  if (s->train && load_loader(st, s->train) != 0) {
    snprintf(err, errlen,
             "%s: no usable data loader position (a checkpoint of other data: "
             "another data_mix or batch_size?)",
             dir);
    goto done;
  }
  s->step = step;
  s->tokens = tokens;
  rc = 0;
done:
  free(ob);
  free(gb);
  cJSON_Delete(st);
  return rc;
}
