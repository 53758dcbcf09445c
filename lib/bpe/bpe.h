/*
 * bpe: a GPT-2 style byte-level BPE tokenizer.
 *
 * Text is split by the GPT-2 pre-tokenizer (pretok.h; Hugging Face's
 * Digits first when a loaded tokenizer.json asks); each piece's bytes
 * are mapped to tokens of one byte each, and merges are applied in rank
 * order, lowest first, as GPT-2 and Hugging Face tokenizers do. Every byte
 * string has an encoding, so decode(encode(x)) == x for any bytes,
 * invalid UTF-8 included.
 *
 * Added tokens (Hugging Face's added_tokens) are whole tokens that merges
 * never produce; their text is cut out of the input before the
 * pre-tokenizer runs, as Hugging Face's encode() does. Each is special
 * (e.g. "<|endoftext|>", "<|im_end|>") or not (a chat template's marker
 * some files leave non-special): bpe_encode leaves specials' text as text
 * but still cuts out the non-special ones; bpe_encode_with_specials cuts
 * out both; bpe_decode_skip can drop the specials. A token with lstrip
 * takes the whitespace before it into itself (that whitespace gives no
 * ids), one with rstrip the whitespace after it; whitespace is Unicode's
 * White_Space, as Rust's char::is_whitespace (Hugging Face's tokenizers;
 * tokenizers.js also strips U+FEFF and not U+0085). Where the input has
 * two added tokens at one place, the earliest wins, then the longest.
 *
 * Ids: the 256 byte tokens, merged tokens and added tokens share one id
 * space [0, bpe_vocab_size). Loaded tokenizers keep the ids of their
 * files; trained ones number bytes 0..255 in GPT-2's byte-to-unicode
 * order, then merges in rank order, then specials.
 *
 * Threads: a bpe is immutable once built and may be shared by threads.
 * A bpe_encoder holds a cache and belongs to one thread at a time.
 */
#ifndef DAGRUN_BPE_H
#define DAGRUN_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe bpe;
typedef struct bpe_encoder bpe_encoder;

/* A growable array of token ids. Zero-initialize; free with
 * bpe_ids_free. */
typedef struct bpe_ids {
  uint32_t *v;
  size_t n, cap;
} bpe_ids;
void bpe_ids_free(bpe_ids *ids);

/* Frees a tokenizer; NULL is a no-op. */
void bpe_destroy(bpe *b);

/* Number of ids, added tokens included (max id + 1). */
uint32_t bpe_vocab_size(const bpe *b);
/* Number of merges (ranks 0..n-1). */
size_t bpe_merge_count(const bpe *b);
/* Id of the added token (special or not) whose text is content, or -1
 * if the tokenizer has none. */
int64_t bpe_special_id(const bpe *b, const char *content);
/* 1 if id is an added token marked special, else 0 (any id). */
int bpe_is_special(const bpe *b, uint32_t id);
/* The token's bytes (not NUL-terminated); *len set. NULL for a bad id.
 * Valid while b lives. */
const char *bpe_token_bytes(const bpe *b, uint32_t id, size_t *len);

/* 1 when a and b give every text the same ids, else 0: the same ids
 * with the same bytes, the same merges by rank, the same added tokens
 * with the same special, lstrip and rstrip flags, and the same
 * pre-tokenizer (Digits or not). Two tokenizer.json files that differ
 * only in their bytes (layout, key order, the writer's version) load
 * into tokenizers that compare equal. */
int bpe_same_ids(const bpe *a, const bpe *b);

/* Per-thread encoder with a cache of pieces already encoded. Returns NULL
 * when out of memory. */
bpe_encoder *bpe_encoder_create(const bpe *b);
void bpe_encoder_destroy(bpe_encoder *e);

/* Appends the ids of text[0..len) to out. Special tokens' text in the
 * input is encoded as ordinary text (a document that quotes
 * "<|endoftext|>" does not end there), as tiktoken's encode_ordinary and
 * Hugging Face's encode() with encode_special_tokens set (transformers'
 * split_special_tokens=True): non-special added tokens still become their
 * ids, lstrip and rstrip honoured, but none inside a special's text (HF
 * skips the special's match, not its bytes). Returns 0, or a negative
 * value when out of memory. */
int bpe_encode(bpe_encoder *e, const char *text, size_t len, bpe_ids *out);
/* As bpe_encode, but the text of special tokens becomes their ids too, as
 * Hugging Face tokenizers' encode() does. */
int bpe_encode_with_specials(bpe_encoder *e, const char *text, size_t len,
                             bpe_ids *out);

/* Writes the bytes of ids to *out (malloc'd, caller frees; *len set).
 * Returns 0, or -1 for an id out of range (message in err). */
int bpe_decode(const bpe *b, const uint32_t *ids, size_t n, char **out,
               size_t *len, char *err, size_t errlen);
/* As bpe_decode; with skip_special, special tokens give no bytes (non-
 * special added tokens still do), as Hugging Face's
 * decode(skip_special_tokens=True). */
int bpe_decode_skip(const bpe *b, const uint32_t *ids, size_t n,
                    int skip_special, char **out, size_t *len, char *err,
                    size_t errlen);

/* Loading and saving (tokjson.c). Errors name the file and, for JSON,
 * what was wrong; they return -1 with the message in err. */

/* A Hugging Face tokenizer.json with a BPE model and ByteLevel
 * pre-tokenizer (GPT-2's own, or one we wrote), alone or after Digits in
 * a Sequence (SmolLM's). Merges as "a b" strings or ["a", "b"] pairs.
 * added_tokens keep their special, lstrip, rstrip and normalized flags
 * (absent: special, lstrip and rstrip false, normalized not special,
 * as tokenizers.js reads them). Refused, naming the token and the flag,
 * because dagrun would give other ids than Hugging Face: single_word
 * true; lstrip or rstrip while some added token starts or ends with
 * whitespace (its strip could eat into that token); and a token
 * with normalized true that can overlap one with normalized false in a
 * text (Hugging Face's tokenizers matches the normalized: false ones
 * first, tokenizers.js all at once). */
int bpe_load_hf(const char *path, bpe **out, char *err, size_t errlen);
/* GPT-2's vocab.json (or encoder.json) + merges.txt (or vocab.bpe).
 * "<|endoftext|>" is a special (an added token, special) if the
 * vocabulary has it. */
int bpe_load_gpt2(const char *vocab_path, const char *merges_path, bpe **out,
                  char *err, size_t errlen);
/* Writes a tokenizer.json that Hugging Face tokenizers loads (BPE model;
 * ByteLevel pre-tokenizer, after Digits if b was loaded with them;
 * ByteLevel decoder and post-processor; added_tokens with each one's
 * flags as loaded, single_word false) and that encodes text to the same
 * ids as bpe_encode_with_specials.
 * Written to a temporary name, fsynced and renamed. */
int bpe_save_hf(const bpe *b, const char *path, char *err, size_t errlen);

/* Training (bpe_train.c). Feed text with bpe_trainer_add (any thread, but
 * one call at a time per trainer; or one trainer per thread, combined
 * with bpe_trainer_merge), then bpe_trainer_finish builds the tokenizer. */
typedef struct bpe_trainer bpe_trainer;
typedef struct bpe_train_opts {
  uint32_t vocab_size;     /* total ids: 256 bytes + merges + specials */
  uint64_t min_frequency;  /* a pair seen fewer times is never merged (>=1) */
  const char *const *specials; /* e.g. {"<|endoftext|>"} */
  size_t nspecials;
} bpe_train_opts;
bpe_trainer *bpe_trainer_create(const bpe_train_opts *opts);
void bpe_trainer_destroy(bpe_trainer *t);
/* Counts the pre-tokenized pieces of one document. The specials' text is
 * cut out first and never counted (as Hugging Face's trainer does), so
 * documents may be joined with "<|endoftext|>". 0, or -1 out of memory. */
int bpe_trainer_add(bpe_trainer *t, const char *text, size_t len);
/* Adds src's counts into dst (src is left unchanged). 0 or -1. */
int bpe_trainer_merge(bpe_trainer *dst, const bpe_trainer *src);
/* Learns merges until vocab_size ids or no pair has min_frequency: the
 * most frequent pair wins; ties go to the pair whose (left, right) token
 * bytes compare lowest (memcmp, then length), so training is
 * deterministic. Returns 0 and a new tokenizer, or -1 with err. */
int bpe_trainer_finish(bpe_trainer *t, bpe **out, char *err, size_t errlen);

#endif /* DAGRUN_BPE_H */
