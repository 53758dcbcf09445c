/*
 * testllama: the unfinished config of a Llama model for the engine's unit
 * tests (test_gpt, test_memest): L layers, H query and KV key/value heads,
 * width C, SwiGLU width FF, context T, vocabulary V, the head untied or
 * tied; rope_theta and norm_eps left to gpt_config_finish's defaults.
 */
#ifndef DAGRUN_TESTLLAMA_H
#define DAGRUN_TESTLLAMA_H

#include "model/gpt.h"

static inline gpt_config testllama_config(int L, int H, int KV, int C, int FF,
                                          int T, int V, int untied) {
  return (gpt_config){.family = GPT_FAMILY_LLAMA,
                      .n_layer = L,
                      .n_head = H,
                      .n_kv_head = KV,
                      .n_embd = C,
                      .intermediate = FF,
                      .block_size = T,
                      .vocab_size = V,
                      .untied_head = untied};
}

#endif /* DAGRUN_TESTLLAMA_H */
