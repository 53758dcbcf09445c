/*
 * tensor_stage: the part of a tensor shard (tensor.h's tensor_layout)
 * that one pipeline stage keeps, for an engine whose stages hold their
 * own layers alone (tensor_cuda.h's T x P): stage s of P keeps the
 * tensors of its groups (gpt.h's parameter groups: the embeddings on
 * the first stage, layers [s L/P, (s+1) L/P), the final norm, and a
 * Llama's untied head, on the last) and, on the last with a tied head,
 * its copy of the embedding (wte, embed_tokens), whose gradient the
 * first and last stages sum and whose update both apply alike.
 *
 * The part is those tensors' shards in the shard's order, packed: n
 * floats, the replicated ones first ([0, nrepl), as in the shard), so
 * that a broadcast of a prefix and a slice over replicas work on it as
 * on the whole shard. With one stage the part is the shard.
 */
#ifndef DAGRUN_TENSOR_STAGE_H
#define DAGRUN_TENSOR_STAGE_H

#include <stddef.h>

#include "comm/comm.h"
#include "model/gpt.h"
#include "tensor.h"

typedef struct tensor_stage {
  size_t nt;       /* gpt_tensor_count's */
  size_t *at;      /* tensor i's offset in the part */
  size_t *numel;   /* its floats there (0: not this stage's) */
  size_t *sh;      /* its offset in the shard */
  size_t n, nrepl; /* the part's floats, its replicated ones */
  size_t nshard;   /* the shard's floats */
  /* A tied head over several stages: the embedding shard's floats
   * (tied_n, on every stage), and on the first and the last stage
   * (has_tied) where it lies in the part (tied_at). */
  size_t tied_n, tied_at;
  int has_tied;
} tensor_stage;

/* Stage s of P's part of lay's shards of model. 0, or -1 with err (out
 * of memory). */
int tensor_stage_init(tensor_stage *st, const gpt *model,
                      const tensor_layout *lay, int s, int P, char *err,
                      size_t errlen);
void tensor_stage_free(tensor_stage *st); /* zeroed, or after init */

/* The part's floats of shard (nshard) into part (n). */
void tensor_stage_take(const tensor_stage *st, const float *shard, float *part);

/* The part's tensors from part into their places in shard (the others
 * left as they are). skip_tied, on the last of several stages: not its
 * copy of a tied embedding (the first stage's is the one a checkpoint
 * keeps). */
void tensor_stage_put(const tensor_stage *st, const float *part, float *shard,
                      int skip_tied);

/* [from, hi) of the part without the last stage's copy of a tied
 * embedding (last: this is the last of several stages), which the
 * clipping norm counts on the first: at most two ranges, r[k] = {a, b}.
 * Their count. */
int tensor_stage_once(const tensor_stage *st, int last, size_t from, size_t hi,
                      size_t r[2][2]);

/* Every stage's part (k + 1 arrays of n: the weights, then k optimizer
 * state arrays) into shard (k + 1 arrays of nshard) on every stage of
 * pp (the shard's stages, comm_rank(pp) this one's; host memory, MPI),
 * summed: each float is one stage's, the others add zeros (the last
 * stage's tied copy left out). Collective over pp. 0, or -1 with err. */
int tensor_stage_join(const tensor_stage *st, comm *pp, const float *part,
                      size_t k, float *shard, char *err, size_t errlen);

#endif /* DAGRUN_TENSOR_STAGE_H */
