/*
 * weights: a gpt's parameters to and from a safetensors file with GPT-2's
 * tensor names and layouts (gpt.h lists them), the file a checkpoint, an
 * export and the Hugging Face Hub's GPT-2 all use.
 *
 * The token embedding is written without its padding rows, (V, C), as
 * GPT-2 has it; on load the padding rows are set to zero.
 */
#ifndef DAGRUN_WEIGHTS_H
#define DAGRUN_WEIGHTS_H

#include <stddef.h>

#include "model/gpt.h"
#include "safetensors.h"

/* Writes m's parameters to path atomically (safetensors.h: temporary
 * name, fsync, rename) in dtype (ST_F32, or ST_BF16 rounded to nearest
 * even), with metadata {"format": "pt"} plus the n_meta pairs given
 * (may be 0). 0, or -1 with err. */
int weights_save(const char *path, gpt *m, st_dtype dtype,
                 const char *const *meta_keys, const char *const *meta_values,
                 size_t n_meta, char *err, size_t errlen);

/* Reads path into m's parameters: a safetensors file, or a Hugging Face
 * model.safetensors.index.json whose "weight_map" names each tensor's
 * shard (.safetensors files beside it; each tensor must be in the shard
 * named). Every tensor of m must be there with m's shape (wte as (V, C) or
 * (Vp, C)); F32, BF16 and F16 are read (each widened exactly). Names may carry
 * the "transformer." prefix that GPT2LMHeadModel's state dict has. Tensors a
 * GPT-2 file holds besides the parameters are ignored: "lm_head.weight" (tied
 * to wte) and the attention masks "h.N.attn.bias" / "h.N.attn.masked_bias". Any
 * other tensor, a missing one or a wrong shape is an error naming the tensor,
 * both shapes and path: the file is another model. 0 or -1 with err. */
int weights_load(const char *path, gpt *m, char *err, size_t errlen);

/* Whether every parameter of m is a finite number. A model whose
 * training diverged holds NaN or infinities, with checksums as good as
 * any: it loads, and every number it gives is garbage. 0, or -1 with err
 * naming the first tensor that is not finite (its name as weights_save
 * writes it), the element and its value, prefixed with path. */
int weights_check_finite(gpt *m, const char *path, char *err, size_t errlen);

#endif /* DAGRUN_WEIGHTS_H */
