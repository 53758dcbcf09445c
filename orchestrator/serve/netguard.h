/*
 * netguard: the parts of `dagrun serve`'s HTTP API that keep it safe on a
 * network and do not depend on HTTP itself (api.c uses them):
 *
 * - a replay cache: each HMAC signature accepted is remembered until its
 *   timestamp leaves the accepted window, so that a captured request
 *   cannot be sent again; its size is fixed, and when it is full of live
 *   signatures new ones are refused rather than old ones forgotten (a
 *   forgotten signature could be replayed);
 * - request deadlines: each connection must deliver a whole request
 *   (headers and body) within a fixed time of its start (or of the end of
 *   its previous answer); a watchdog thread shuts down the socket of one
 *   that does not. libmicrohttpd's own timeout restarts at every byte, so
 *   a client sending one byte every few seconds would hold its
 *   connection (and, with a thread per connection, a thread) for ever.
 *
 * Every function may be called from any thread.
 */
#ifndef DAGRUN_NETGUARD_H
#define DAGRUN_NETGUARD_H

#include <stdint.h>

/* ---- Replay cache ---- */

typedef struct guard_replay guard_replay;

/* A cache for up to n signatures. Caller frees with guard_replay_destroy. */
guard_replay *guard_replay_create(unsigned n);
void guard_replay_destroy(guard_replay *r);

/* Records mac (32 bytes), valid until unix time `until`, at time now.
 * Returns 0 when it is new (and now remembered), 1 when it was seen
 * before and is still live (a replay), 2 when the cache is full of live
 * signatures (nothing recorded). */
int guard_replay_add(guard_replay *r, const unsigned char mac[32],
                     int64_t until, int64_t now);

/* ---- Request deadlines ---- */

typedef struct guard_deadlines guard_deadlines;
typedef struct guard_conn guard_conn;

/* Starts the watchdog: a connection that has not delivered its request
 * within seconds is shut down (shutdown(2) on its socket; libmicrohttpd
 * then closes it as it would a client that hung up). NULL when the
 * thread cannot start. Caller frees with guard_deadlines_destroy, after
 * every connection has ended. */
guard_deadlines *guard_deadlines_create(double seconds);
void guard_deadlines_destroy(guard_deadlines *d);

/* A new connection on socket fd: its clock starts now. Returns the
 * handle, to be passed to the functions below until guard_conn_end. */
guard_conn *guard_conn_begin(guard_deadlines *d, int fd);
/* Its request is complete: no deadline while it is answered. */
void guard_conn_answering(guard_deadlines *d, guard_conn *c);
/* Its answer is sent: the clock starts again for the next request. */
void guard_conn_idle(guard_deadlines *d, guard_conn *c);
/* The connection is closing (before its socket is closed): forgets c. */
void guard_conn_end(guard_deadlines *d, guard_conn *c);

#endif /* DAGRUN_NETGUARD_H */
