/*
 * modeldir: opens any directory that holds a model dagrun wrote or can
 * read, so that validate, export, `dagrun generate` and train's init_from
 * take the same paths:
 *   - a dagrun checkpoint (ckpt.h: manifest.json of format
 *     "dagrun-checkpoint"): verified, its shape from the manifest's
 *     state.model, its step from the manifest;
 *   - a directory of checkpoints (the train stage's <task>/checkpoints):
 *     its latest valid checkpoint;
 *   - a promoted model (the checkpoint stage's models/<name>): a
 *     checkpoint plus tokenizer.json and promotion.json;
 *   - a Hugging Face GPT-2 or Llama directory (config.json with
 *     model_type "gpt2" or "llama", plus model.safetensors, or shards with
 *     model.safetensors.index.json; F32, BF16 or F16), as the export stage
 *     writes it and as the Hub has GPT-2 and LlamaForCausalLM models (a
 *     Llama's grouped-query heads, RoPE base, RMSNorm epsilon and tied or
 *     untied head are read from config.json; rope_scaling, biases and
 *     activations other than silu are refused).
 * The tokenizer is the directory's tokenizer.json when there is one, else
 * (a checkpoint) the "tokenizer" path in the manifest's state.config, as
 * the train stage records it, if that file exists. Its identity, the
 * sha256 of the tokenizer.json the model was trained with, is the one
 * the manifest's state.config records ("tokenizer_sha256"), else that of
 * the tokenizer.json beside the weights; a checkpoint from before the
 * record, with no tokenizer beside it, has none ("").
 */
#ifndef DAGRUN_MODELDIR_H
#define DAGRUN_MODELDIR_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

typedef enum modeldir_kind {
  MODELDIR_CHECKPOINT = 0, /* a dagrun checkpoint (also a promoted one) */
  MODELDIR_HF = 1          /* a Hugging Face GPT-2 or Llama directory */
} modeldir_kind;

typedef struct modeldir_info {
  modeldir_kind kind;
  char dir[4096];       /* the model's directory (the checkpoint chosen) */
  char weights[4096];   /* its model.safetensors, or the shards' index */
  char tokenizer[4096]; /* its tokenizer.json, or "" when none was found */
  char tokenizer_sha256[65]; /* its identity (above), or "" */
  gpt_config config;    /* finished (gpt_config_finish) */
  int64_t step;         /* a checkpoint's step; -1 for HF */
  /* In a directory of checkpoints, the newer ones skipped as invalid and
   * why, as a sentence for the caller to show as a warning ("skipped the
   * newest checkpoint .../step-00000030, which does not verify (...):
   * using .../step-00000020 instead"); "" when none was. */
  char skipped[4096];
} modeldir_info;

/* Resolves path (a directory of one of the kinds above) into info.
 * Verifies a checkpoint's checksums (a corrupt one is refused naming the
 * file; in a directory of checkpoints the latest valid one is taken, and
 * info->skipped says which newer ones were not, for the caller to warn).
 * 0, or -1 with err naming path and what it expected to find. */
int modeldir_open(const char *path, modeldir_info *info, char *err,
                  size_t errlen);

/* Creates the model of info->config and reads info->weights into it;
 * weights that are not all finite numbers (weights_check_finite: a
 * diverged model) are refused, naming the tensor, so that nothing reads
 * garbage from them. 0, or -1 with err (*out untouched). */
int modeldir_load(const modeldir_info *info, gpt **out, char *err,
                  size_t errlen);

struct cJSON;

/* The model's config as the train stage's checkpoint manifest records it
 * (state.model): n_layer, n_head, n_embd, block_size, vocab_size, the
 * family ("gpt2" or "llama") and, for Llama, n_kv_head,
 * intermediate_size, rope_theta, norm_eps and tie_word_embeddings. NULL
 * when out of memory. */
struct cJSON *modeldir_model_json(const gpt_config *c);
/* Reads such an object into *out (not finished: gpt_config_finish
 * checks it); a manifest without a family is GPT-2's (it predates
 * Llama). 0, or -1 with err naming the missing or bad field. */
int modeldir_model_from_json(const struct cJSON *mj, gpt_config *out,
                             char *err, size_t errlen);
/* The family's name as the manifest writes it: "gpt2" or "llama". */
const char *modeldir_family_name(int family);

/* The Hugging Face config.json of a GPT-2 of cfg (GPT2LMHeadModel,
 * model_type gpt2, gelu_new, layer_norm_epsilon 1e-5, no dropout, tied
 * embeddings, n_positions = block_size), with bos/eos_token_id eot_id when
 * eot_id >= 0, and torch_dtype "float32" or "bfloat16". malloc'd JSON
 * text (caller frees), NULL when out of memory. modeldir_open reads it
 * back. For a Llama (cfg->family), a LlamaForCausalLM's instead
 * (model_type llama, hidden_act silu, num_key_value_heads, head_dim,
 * rms_norm_eps, rope_theta, tie_word_embeddings as the head is), which
 * modeldir_open does not read yet. */
char *modeldir_hf_config_json(const gpt_config *cfg, int64_t eot_id,
                              const char *torch_dtype);

#endif /* DAGRUN_MODELDIR_H */
