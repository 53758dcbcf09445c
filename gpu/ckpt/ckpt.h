/*
 * ckpt: checkpoint directories that survive a crash at any moment.
 *
 *   <parent>/step-00000100/
 *     model.safetensors, optim.bin, ...   files the trainer adds
 *     manifest.json   {"format": "dagrun-checkpoint", "version": 1,
 *                      "step": 100, "files": {"model.safetensors":
 *                      {"bytes": N, "sha256": "..."}, ...},
 *                      "state": {... the trainer's JSON ...}}
 *
 * A checkpoint is built in <parent>/.step-00000100.tmp/, every file
 * fsynced, manifest.json written last, then the directory is renamed to
 * its final name and the parent fsynced: a directory named step-* is
 * complete, or a later check of its checksums says it is not.
 */
#ifndef DAGRUN_CKPT_H
#define DAGRUN_CKPT_H

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt_writer ckpt_writer;

/* Starts checkpoint `step` under parent (created if missing; a stale
 * temporary of the same step is removed). 0 or -1 with err. */
int ckpt_begin(const char *parent, int64_t step, ckpt_writer **out, char *err,
               size_t errlen);
/* The temporary directory: files written there by other code (e.g.
 * st_write) are part of the checkpoint. */
const char *ckpt_writer_dir(const ckpt_writer *w);
/* Writes name (a plain file name) with data, fsynced. 0 or -1 with err. */
int ckpt_add_file(ckpt_writer *w, const char *name, const void *data,
                  size_t n, char *err, size_t errlen);
/* Hashes every file in the temporary directory, writes manifest.json
 * with state_json (a JSON object's text) as "state", fsyncs and renames.
 * The final directory's path goes to final_path (if not NULL). Frees w,
 * also on failure (which removes the temporary). */
int ckpt_commit(ckpt_writer *w, const char *state_json, char *final_path,
                size_t final_len, char *err, size_t errlen);
/* Gives up: removes the temporary directory and frees w. NULL: no-op. */
void ckpt_abort(ckpt_writer *w);

/* Checks dir: manifest.json parses, has the format and version, and every
 * listed file exists with its size and SHA-256. 0, or -1 with a message
 * that names the file and what is wrong ("truncated: 1000 of 4096 bytes",
 * "sha256 mismatch", ...). */
int ckpt_verify(const char *dir, char *err, size_t errlen);

/* The valid checkpoint with the highest step under parent, as a malloc'd
 * path (caller frees) in *out, or NULL when there is none (returns 0).
 * Invalid ones are passed to on_invalid (may be NULL) with the reason,
 * newest first, and skipped. -1 only when parent cannot be read. */
int ckpt_find_latest(const char *parent, char **out,
                     void (*on_invalid)(void *arg, const char *dir,
                                        const char *why),
                     void *arg, char *err, size_t errlen);

/* The step and the "state" object's text (malloc'd, caller frees) of a
 * checkpoint that passed ckpt_verify. 0 or -1 with err. */
int ckpt_read_state(const char *dir, int64_t *step, char **state_json,
                    char *err, size_t errlen);

/* Removes all but the keep newest complete checkpoints under parent
 * (keep >= 1), and any stale temporaries. Returns how many it removed. */
int ckpt_prune(const char *parent, int keep);

#endif /* DAGRUN_CKPT_H */
