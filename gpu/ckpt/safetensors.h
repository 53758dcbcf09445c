/*
 * safetensors: reading and writing the safetensors format
 * (https://huggingface.co/docs/safetensors): an 8-byte little-endian
 * header length N, N bytes of JSON {"name": {"dtype", "shape",
 * "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
 * data. Tensors are written in the given order, contiguous, and the JSON
 * header is padded with spaces to a multiple of 8 bytes.
 */
#ifndef DAGRUN_SAFETENSORS_H
#define DAGRUN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* F16 is read only (Hugging Face checkpoints published in half
 * precision); st_write refuses it. */
typedef enum st_dtype { ST_F32 = 0, ST_BF16 = 1, ST_F16 = 2 } st_dtype;

typedef struct st_tensor {
  const char *name;
  st_dtype dtype;
  int ndim;
  int64_t shape[4];
  const void *data; /* writing: the bytes; reading: points into the map */
} st_tensor;

/* Writes path atomically (temporary name, fsync, rename). F32 data given
 * as BF16 is converted with round-to-nearest-even: pass F32 source data
 * with dtype ST_BF16 and convert_from_f32 = 1. Metadata: n_meta key/value
 * pairs (may be 0). 0, or -1 with err. */
int st_write(const char *path, const st_tensor *tensors, size_t n,
             int convert_from_f32, const char *const *meta_keys,
             const char *const *meta_values, size_t n_meta, char *err,
             size_t errlen);

typedef struct st_file st_file;
/* Maps path and parses its header, checking every offset lies inside the
 * file and matches dtype x shape. 0, or -1 with a message naming path. */
int st_open(const char *path, st_file **out, char *err, size_t errlen);
void st_close(st_file *f);
size_t st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, size_t i);
const st_tensor *st_find(const st_file *f, const char *name);
/* A metadata value, or NULL. */
const char *st_meta(const st_file *f, const char *key);

/* An IEEE 754 half (F16) as float32: exact, subnormals, infinities and
 * NaN included. */
float st_f16_to_f32(uint16_t h);

#endif /* DAGRUN_SAFETENSORS_H */
