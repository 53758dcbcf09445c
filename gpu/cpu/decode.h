/*
 * decode: generation's forward pass on the CPU, one token at a time with
 * a key/value cache, so that n new tokens cost n single-token passes
 * instead of n passes over the whole window. The logits equal
 * gpt_forward's on the same prefix to float rounding (a test checks it).
 *
 * When the context is full (block_size tokens), the cache is rebuilt from
 * the last block_size/2 tokens: a sliding window that re-reads half a
 * window once every block_size/2 tokens.
 *
 * One decoder is used by one thread; it borrows the model, which must not
 * change (no training step) while the decoder is used.
 *
 * The CPU backend implements it (gpu/cpu/decode.c), as it implements
 * gpt.h's forward pass.
 */
#ifndef DAGRUN_DECODE_H
#define DAGRUN_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

typedef struct decoder decoder;

/* A decoder for m (borrowed; it must outlive the decoder). 0, or -1 with
 * a message naming the bytes it could not get. */
int decoder_create(gpt *m, decoder **out, char *err, size_t errlen);
void decoder_destroy(decoder *d); /* NULL is a no-op */

/* Empties the context. */
void decoder_reset(decoder *d);

/* Appends token to the context and returns the logits of the next token
 * given the whole context: padded_vocab floats, of which the first
 * vocab_size mean something; valid until the next call. NULL with err for
 * an id >= vocab_size. */
const float *decoder_push(decoder *d, uint32_t token, char *err,
                          size_t errlen);

/* Tokens in the context now (at most block_size). */
size_t decoder_length(const decoder *d);

#endif /* DAGRUN_DECODE_H */
