/*
 * model_logits: the logits dagrun's engine computes for a model directory
 * (anything modeldir_open takes: a checkpoint, a directory of them, a
 * promoted model, a Hugging Face GPT-2 directory), for the reference
 * tests of exported models (tests/integration/test_export.sh,
 * tests/reference/hf_check.py).
 *
 *   model_logits MODEL_DIR IDS OUT
 *     IDS: a text file of token ids (whitespace-separated), one sequence
 *     of at most block_size. Writes to OUT the logits (T, V) as float32,
 *     row-major, real vocabulary columns only, and prints one line:
 *     "kind checkpoint|hf step S T t V v tokenizer PATH".
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/modeldir.h"
#include "model/gpt.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: model_logits MODEL_DIR IDS OUT\n");
    return 2;
  }
  char err[2048];
  modeldir_info info;
  gpt *m = NULL;
  if (modeldir_open(argv[1], &info, err, sizeof err) != 0 ||
      modeldir_load(&info, &m, err, sizeof err) != 0) {
    fprintf(stderr, "model_logits: %s\n", err);
    return 1;
  }
  const gpt_config *c = gpt_get_config(m);
  FILE *f = fopen(argv[2], "r");
  if (!f) {
    perror(argv[2]);
    return 1;
  }
  uint32_t *ids = malloc((size_t)c->block_size * sizeof *ids);
  int T = 0;
  unsigned long v;
  while (ids && T < c->block_size && fscanf(f, "%lu", &v) == 1)
    ids[T++] = (uint32_t)v;
  int more = fscanf(f, "%lu", &v) == 1;
  fclose(f);
  if (!ids || T == 0 || more) {
    fprintf(stderr, "model_logits: %s: 1 to %d ids expected\n", argv[2],
            c->block_size);
    return 1;
  }
  if (gpt_forward(m, ids, NULL, 1, T, NULL, err, sizeof err) != 0) {
    fprintf(stderr, "model_logits: %s\n", err);
    return 1;
  }
  const float *lg = gpt_logits(m);
  FILE *out = fopen(argv[3], "wb");
  int ok = out != NULL;
  for (int t = 0; ok && t < T; t++)
    ok = fwrite(lg + (size_t)t * (size_t)c->padded_vocab, sizeof(float),
                (size_t)c->vocab_size, out) == (size_t)c->vocab_size;
  if (!out || fclose(out) != 0 || !ok) {
    fprintf(stderr, "model_logits: cannot write %s\n", argv[3]);
    return 1;
  }
  printf("kind %s step %" PRId64 " T %d V %d tokenizer %s\n",
         info.kind == MODELDIR_HF ? "hf" : "checkpoint", info.step, T,
         c->vocab_size, info.tokenizer[0] ? info.tokenizer : "-");
  free(ids);
  gpt_destroy(m);
  return 0;
}
