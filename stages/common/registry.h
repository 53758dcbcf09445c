/*
 * registry: the durable models/ directory that the checkpoint stage
 * promotes validated checkpoints into, and that validate reads the
 * previous model's numbers from.
 *
 *   <root>/<name>/        a promoted model, name "<run id>-step-NNNNNNNN":
 *                           the checkpoint's files as they were
 *                           (model.safetensors, optim.bin, ...,
 *                           manifest.json: ckpt_verify passes on it, and
 *                           train's resume / init_from take it),
 *                           tokenizer.json, and promotion.json
 *   <root>/latest, best   symlinks to the newest and to the lowest
 *                         validation loss model, replaced atomically
 *   <root>/.tmp-*         promotions in progress or interrupted; not
 *                         models; removed by the next promotion
 *
 * promotion.json: {"format": "dagrun-model", "version": 1, "seq": N,
 *   "name", "dag", "run", "task", "step", "source" (the checkpoint's path),
 *   "promoted_at" (ISO 8601 UTC), "val_loss", "perplexity", "accuracy"
 *   (null when not validated), "tokenizer_sha256", "validation" (the
 *   validate stage's metrics object, or null)}.
 * seq grows by one per promotion: "newest" is the highest seq.
 *
 * A promotion copies into <root>/.tmp-<name>/, fsyncs every file,
 * verifies the copy's checksums, writes promotion.json last, renames the
 * directory to <name> and fsyncs root: <name> exists complete or not at
 * all, whatever fails or is killed.
 */
#ifndef DAGRUN_REGISTRY_H
#define DAGRUN_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

typedef struct registry_entry {
  char name[256];
  char path[4096];
  int64_t seq;
  int64_t step;
  double val_loss; /* NAN when not validated */
  double perplexity, accuracy; /* NAN when not known */
  char dag[128], run[128];
} registry_entry;

/* The registry root when a DAG names none, malloc'd: $DAGRUN_MODELS_DIR/
 * <dag> when that is set, else models/<dag> beside the runs directory
 * (run_dir is <runs>/<dag>/<run id>, so <runs>/../models/<dag>). */
char *registry_default_root(const char *run_dir, const char *dag);

/* The complete entries under root (a readable promotion.json), by seq
 * ascending, malloc'd into *out (caller frees; NULL when none). A missing
 * root is an empty registry. 0, or -1 with err. */
int registry_list(const char *root, registry_entry **out, size_t *n,
                  char *err, size_t errlen);

typedef struct registry_promotion {
  const char *checkpoint;  /* a checkpoint directory (ckpt.h) */
  const char *tokenizer;   /* tokenizer.json to keep beside it */
  const char *dag, *run, *task;
  double val_loss, perplexity, accuracy; /* NAN: not validated */
  const char *validation_json; /* the validate stage's metrics (a JSON
                                  object's text), or NULL */
} registry_promotion;

/* Promotes p->checkpoint into root (created if missing), as described
 * above, after ckpt_verify of the source: a corrupt source is refused
 * with the reason and nothing is written. Stale .tmp-* directories are
 * removed first. An entry of the same name already there is an error.
 * The new entry goes to out (may be NULL). 0, or -1 with err. */
int registry_promote(const char *root, const registry_promotion *p,
                     registry_entry *out, char *err, size_t errlen);

/* Of v[0..n) (registry_list's order), the entry with the lowest finite
 * val_loss, the newest of equals; NULL when none has one. */
const registry_entry *registry_best(const registry_entry *v, size_t n);

/* Retention: keeps the keep_last newest entries and the keep_best with
 * the lowest validation loss (entries without one never count as best),
 * removes every other entry (each passed to on_removed, which may be
 * NULL), then points latest and best at the newest and the best entry
 * left (removing a link that has nothing to point at). keep_last >= 1,
 * keep_best >= 0. Returns the number removed, or -1 with err. */
int registry_retain(const char *root, int keep_last, int keep_best,
                    void (*on_removed)(void *arg, const registry_entry *e),
                    void *arg, char *err, size_t errlen);

#endif /* DAGRUN_REGISTRY_H */
