/*
 * llama_shape: the Llama shape of the PyTorch reference tests, shared by
 * gpt_dump and train_dump (tests/integration/test_llama_torch.sh): L2 H4
 * with KV key/value heads of HS channels (C = 4 HS; HS 6 or 10, so that
 * nothing is a power of two), SwiGLU width 12 HS + 2, context 16, vocab
 * 67, rope_theta 500 (so that the 16 positions turn far), norm_eps 1e-5,
 * the head untied or tied. llama.txt in the dump directory tells
 * tests/reference/torch_llama.py the knobs: "KV FF rope_theta norm_eps
 * untied".
 */
#ifndef DAGRUN_TEST_LLAMA_SHAPE_H
#define DAGRUN_TEST_LLAMA_SHAPE_H

#include <stdio.h>
#include <stdlib.h>

#include "model/gpt.h"

/* args: KV HS UNTIED as given on the command line. */
static inline gpt_config llama_shape(char **args) {
  int hs = atoi(args[1]);
  return (gpt_config){.n_layer = 2,
                      .n_head = 4,
                      .n_embd = 4 * hs,
                      .block_size = 16,
                      .vocab_size = 67,
                      .family = GPT_FAMILY_LLAMA,
                      .n_kv_head = atoi(args[0]),
                      .intermediate = 12 * hs + 2,
                      .rope_theta = 500.0f,
                      .untied_head = atoi(args[2])};
}

/* Writes dir/llama.txt for m's (finished) config; 0 or -1 (said on
 * stderr). */
static inline int llama_shape_write(const char *dir, const gpt_config *f) {
  char path[4096];
  snprintf(path, sizeof path, "%s/llama.txt", dir);
  FILE *o = fopen(path, "w");
  if (!o ||
      fprintf(o, "%d %d %.9g %.9g %d\n", f->n_kv_head, f->intermediate,
              (double)f->rope_theta, (double)f->norm_eps, f->untied_head) < 0 ||
      fclose(o) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    return -1;
  }
  return 0;
}

#endif /* DAGRUN_TEST_LLAMA_SHAPE_H */
