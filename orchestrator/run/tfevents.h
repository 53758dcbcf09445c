/*
 * tfevents: TensorBoard event files of scalars, written without a protobuf
 * library, so that `tensorboard --logdir runs/` shows every metric a stage
 * reports (scheduler.c writes one file per task attempt beside metrics.jsonl).
 *
 * A file is a sequence of TFRecords:
 *
 *   uint64 length (little-endian)
 *   uint32 masked_crc32c(length bytes)
 *   byte   data[length]           one serialized tensorflow.Event
 *   uint32 masked_crc32c(data)
 *
 * where masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with
 * c = CRC-32C (Castagnoli) of x. The first record is an Event with
 * file_version "brain.Event:2"; each scalar is an Event
 *
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *
 * encoded as proto3 does (fields at their default value, 0, are left out,
 * except simple_value: it is a member of `oneof value` in summary.proto,
 * and a oneof member is written whenever it is set, 0.0 included), so the
 * bytes are those TensorFlow's own writer makes.
 *
 * The file is named events.out.tfevents.<unix seconds>.<hostname>.<pid>,
 * as TensorFlow names it; when that name exists already (a retry in the
 * same second) a suffix .1, .2, ... follows. Each record goes out in one
 * write(2): a killed orchestrator leaves every record it wrote readable.
 * After a failed or short write the file is cut back to its last whole
 * record and the writer stops: a full disk loses TensorBoard records,
 * never the run.
 *
 * A writer belongs to one thread (the scheduler's loop thread in dagrun).
 * The encoding functions are pure and may be called from any thread.
 */
#ifndef DAGRUN_TFEVENTS_H
#define DAGRUN_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes,
 * continuing from crc (0 to start): tfevents_crc32c(0, "123456789", 9)
 * is 0xE3069283. Table-driven, 8 bytes at a time. */
uint32_t tfevents_crc32c(uint32_t crc, const void *data, size_t n);

/* TFRecord's mask of a CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tfevents_mask(uint32_t crc);

/* Serialized Event of one scalar into buf (cap bytes). Returns its length,
 * or the length it needs when that is above cap (nothing written beyond
 * cap). tag is a NUL-terminated string. */
size_t tfevents_encode_scalar(uint8_t *buf, size_t cap, double wall_time,
                              int64_t step, const char *tag, float value);

/* Serialized Event of the file header (file_version "brain.Event:2"),
 * as tfevents_encode_scalar. */
size_t tfevents_encode_version(uint8_t *buf, size_t cap, double wall_time);

/* The TFRecord framing of n bytes of data: 12 header bytes into hdr and 4
 * footer bytes into ftr. */
void tfevents_frame(const uint8_t *data, size_t n, uint8_t hdr[12],
                    uint8_t ftr[4]);

typedef struct tfevents tfevents;

/* Creates dir/events.out.tfevents.<wall_time>.<hostname>.<pid> (dir must
 * exist) and writes its header record. Returns 0 and a writer in *out
 * (caller destroys), or DR_EIO with the reason in err. */
int tfevents_create(const char *dir, double wall_time, tfevents **out,
                    char *err, size_t errlen);

/* Appends one scalar. Returns 0, or DR_EIO when the record is lost (the
 * writer is then broken: the file ends at its last whole record and every
 * later call returns DR_EIO at once). */
int tfevents_scalar(tfevents *w, double wall_time, int64_t step,
                    const char *tag, float value);

/* The file's path; valid until tfevents_destroy. */
const char *tfevents_path(const tfevents *w);

/* Closes the file and frees the writer. NULL is a no-op. */
void tfevents_destroy(tfevents *w);

#endif /* DAGRUN_TFEVENTS_H */
