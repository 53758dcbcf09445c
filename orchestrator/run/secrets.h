/*
 * secrets: the secret values of a run, and their masking.
 *
 * A run's secrets are the resolved values of the params listed in the
 * DAG's top-level `secrets:` and of the params an alert webhook uses, the
 * values of the ${env:NAME} references in webhooks, and every resolved
 * webhook URL with its user, password, path and query. Wherever dagrun
 * writes or prints what a run produced (the attempt logs, attempt.json,
 * outputs.json, metrics, run.json, the run store, events, alerts) every
 * occurrence of a secret is replaced by "***", as GitHub Actions masks
 * its secrets. A value shorter than SECRETS_MIN_LEN bytes is not masked:
 * masking "1" or "ab" would wreck the log (`dagrun check` warns).
 *
 * Where several secrets match at one place the longest wins; matching is
 * leftmost first, byte for byte.
 *
 * A set is built once and then only read: any thread may read it while
 * nobody changes it.
 */
#ifndef DAGRUN_SECRETS_H
#define DAGRUN_SECRETS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

#include "dagfile/spec.h"
#include "rundir.h"

#define SECRETS_MIN_LEN 4
#define SECRETS_MASK "***"
/* What a secret param's value becomes in run.json and the store's params
 * (`dagrun resume` then takes the value from the DAG again). */
#define SECRETS_REDACTED "(redacted)"

typedef struct secrets secrets;

/* An empty set; free with secrets_destroy (NULL is a no-op). */
secrets *secrets_create(void);
void secrets_destroy(secrets *set);
/* Adds a copy of z; values shorter than SECRETS_MIN_LEN and duplicates are
 * ignored. */
void secrets_add(secrets *set, const char *z);
/* Number of secrets in the set (0 for NULL), and the longest's length. */
size_t secrets_count(const secrets *set);
size_t secrets_max_len(const secrets *set);

/* text with every secret replaced by SECRETS_MASK. Caller frees. A NULL
 * or empty set returns a copy; NULL text returns NULL. */
char *secrets_mask(const secrets *set, const char *text);
/* Masks, in place, every string value and every key in j (recursively). */
void secrets_mask_json(const secrets *set, cJSON *j);

/* A new set: every secret of set (may be NULL) and form(secret) (caller
 * frees the result of form; NULL is skipped), for a text that writes
 * secrets transformed, as HTML escapes them. Caller frees. */
secrets *secrets_with_forms(const secrets *set, char *(*form)(const char *));

/* The set of a run: spec s, its resolved DAG params (borrowed) and its run
 * directory (for ${run.*} in webhooks; may be NULL). A secret param's
 * value comes with the forms templates write it in where they differ from
 * it: ${params.K|sh}'s quoted word, ${params.K|json}'s text and that text
 * without its quotes (a JSON string holding the value). Webhooks that do not
 * resolve are left out (alerts_create reports them). Caller frees. */
secrets *secrets_collect(const spec *s, const cJSON *params, const rundir *run);

/* In a copy of the DAG params meant for a file (run.json, the store):
 * replaces the value of every secret param (listed in `secrets:` or used
 * in a webhook) by SECRETS_REDACTED and masks their values inside the
 * other params. */
void secrets_redact_params(const spec *s, cJSON *params);

/* `dagrun check`: writes to f a warning, with file:line:col, for each
 * secret param whose resolved value (params, borrowed, may be NULL) is too
 * short to be masked. */
void secrets_warn(const spec *s, const cJSON *params, FILE *f);

/* Streaming masking, for pipes: what is written comes out masked, even a
 * secret split across two writes. Up to secrets_max_len() - 1 bytes are
 * held back while they may still begin a secret; secrets_stream_flush
 * writes them at the end of the input. */
typedef void (*secrets_sink)(void *ud, const char *p, size_t n);
typedef struct secrets_stream secrets_stream;
/* set is borrowed and must outlive the stream; sink gets the masked bytes
 * (called from secrets_stream_write/flush, never with n == 0). */
secrets_stream *secrets_stream_create(const secrets *set, secrets_sink sink,
                                      void *ud);
void secrets_stream_write(secrets_stream *m, const char *p, size_t n);
void secrets_stream_flush(secrets_stream *m);
/* Frees the stream without writing what it holds back. NULL: no-op. */
void secrets_stream_destroy(secrets_stream *m);

#endif /* DAGRUN_SECRETS_H */
