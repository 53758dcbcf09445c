/*
 * trainstate: the whole state of a training run as a checkpoint (ckpt.h):
 *   model.safetensors  the weights, fp32, GPT-2 names (wte without its
 *                      padding rows, which are always zero)
 *   optim.bin          the optimizer's step count and moments
 *   guard.bin          the loss-spike guard's window
 *   manifest.json      checksums, and "state": step, tokens seen, the
 *                      train loader's position (with a mixture, the
 *                      rows each source has served), the model's shape
 * Loading it back and training on gives the same bits as never stopping.
 */
#ifndef DAGRUN_TRAINSTATE_H
#define DAGRUN_TRAINSTATE_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataloader.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "optim/spike.h"

typedef struct train_state {
  gpt *model;
  /* opt and guard may be NULL for trainstate_save: a weights-only
   * checkpoint (no optim.bin, guard.bin; the full model a gang writes at
   * its end), which validate and export read and trainstate_load refuses
   * with a message saying so. */
  optim *opt;
  loader *train; /* may be NULL (position not saved / restored) */
  spike_guard *guard;
  int64_t step;    /* optimizer steps done */
  uint64_t tokens; /* training tokens consumed */
  /* The run's settings as a JSON object's text (borrowed; may be NULL),
   * kept in the manifest as "config" so a checkpoint says how it was
   * made. Not read back: the resuming run's params rule. */
  const char *config_json;
  /* The loss at initialization (the pre-flight's, step 0), or NAN when
   * not known. Kept in the manifest's state ("init_loss", left out when
   * NAN) so that a resumed run's summary still has it; a checkpoint
   * written before the field existed loads as NAN (the field is
   * optional: old readers ignore it, so the format's version stays). */
  double init_loss;
  /* The run's tokenizer.json and its identity (tokdata.h; borrowed, may
   * be NULL): trainstate_load refuses a checkpoint whose manifest records
   * another (state.config.tokenizer_sha256), as its weights learned other
   * ids for the same strings. Not saved from here: config_json has them. */
  const char *tokenizer, *tokenizer_sha256;
} train_state;

/* Writes checkpoint s->step under parent; its path goes to path (may be
 * NULL). 0 or -1 with err. */
int trainstate_save(const char *parent, const train_state *s, char *path,
                    size_t pathlen, char *err, size_t errlen);

/* Loads dir (which must pass ckpt_verify) into s, whose model, optimizer
 * and guard are already created with the run's config: a checkpoint of
 * another model shape, optimizer or tokenizer is refused, naming both.
 * 0 or -1. */
int trainstate_load(const char *dir, train_state *s, char *err,
                    size_t errlen);

#endif /* DAGRUN_TRAINSTATE_H */
