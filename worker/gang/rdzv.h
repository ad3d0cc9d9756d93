/* worker/gang/rdzv.h - rendezvous: the small TCP key-value store every rank of a
 * job meets at.
 *
 * Owns: rank 0's store server (a thread of rank 0's process, listening on
 * the port of VITJOB_RDZV_ENDPOINT), every rank's client connection to it
 * (connect with retries and backoff while rank 0's pod is still starting),
 * the join of all ranks of one restart generation, and the store operations
 * (set, get-with-wait, add, compare-and-set, barrier) that the collective
 * backends rendezvous through (the NCCL unique id, gloo's Store).
 * Must not: know about training, models or collectives; block without a
 * deadline; log secrets.
 *
 * Keys are namespaced by the generation on the server: a client of another
 * generation is refused at its hello ("this store serves generation 4; this
 * process is of generation 3 (stale: exit)"); a client of a NEWER
 * generation keeps retrying (it reached an old rank 0 still terminating).
 *
 * Errors: functions return 0 or -1 with one line in err; *kind (may be
 * NULL) says which: RDZV_TIMEOUT (a deadline passed: names what was missing,
 * e.g. "ranks 2, 3 never arrived within 300 s"; a rank that never joined
 * names the strongest cause it met while retrying, not merely the last: an
 * old store's answer, then a refused or failed connection, then a connect
 * that timed out, with the last one after it where it differs), RDZV_STALE (this process's
 * generation is older than the store's), RDZV_LOST (the connection broke),
 * RDZV_INVALID (bad endpoint, rank, world size, key or value), RDZV_STOPPED
 * (rdzv_options.stop was set while connecting or joining).
 */
#ifndef VITJOB_RDZV_H
#define VITJOB_RDZV_H

#include <signal.h>
#include <stddef.h>

typedef enum { RDZV_OK = 0, RDZV_TIMEOUT, RDZV_STALE, RDZV_LOST, RDZV_INVALID,
               RDZV_STOPPED } rdzv_error;

typedef struct {
    const char *endpoint; /* "host:port" (host may be a DNS name, IPv4 or [IPv6]) */
    int rank, world_size; /* 0 <= rank < world_size */
    long generation;      /* VITJOB_RESTART */
    double timeout_s;     /* for connecting and for the join of all ranks */
    const volatile sig_atomic_t *stop; /* set (by a SIGTERM handler): the connect and the
                                        * join give up within 0.2 s with RDZV_STOPPED, as
                                        * a pod being deleted must; NULL: never. Only
                                        * rdzv_new reads it: the store operations after
                                        * the join ignore it (a stopping run agrees on its
                                        * last step and checkpoints through them) */
} rdzv_options;

typedef struct rdzv rdzv;

/* Rank 0 starts the server (bound to the endpoint's port on all
 * addresses), then every rank connects and joins: returns once all
 * world_size ranks of this generation joined, or fails after timeout_s
 * naming the ranks that did not. A rank joining twice (the same rank
 * number from two processes) fails both with RDZV_INVALID. *out is the
 * caller's, freed with rdzv_free. */
int rdzv_new(rdzv **out, const rdzv_options *o, rdzv_error *kind, char *err, size_t errlen);
/* Closes the connection; on rank 0 stops the server once every other
 * rank has closed or after a short grace (so that late readers of a key
 * are not cut off). Accepts NULL. */
void rdzv_free(rdzv *r);

/* Store operations; keys are at most 512 bytes of printable ASCII, values
 * at most 64 MiB. timeout_s bounds the wait. */
int rdzv_set(rdzv *r, const char *key, const void *val, size_t len, rdzv_error *kind, char *err,
             size_t errlen);
/* Waits until key exists; *val (malloc'd, the caller frees) and *len. */
int rdzv_get(rdzv *r, const char *key, double timeout_s, void **val, size_t *len,
             rdzv_error *kind, char *err, size_t errlen);
/* Adds delta to the integer at key (absent = 0); *result the new value. */
int rdzv_add(rdzv *r, const char *key, long delta, long *result, rdzv_error *kind, char *err,
             size_t errlen);
/* Sets key to desired if its value equals expected (expected NULL: if it is
 * absent). *swapped says whether it did. */
int rdzv_cas(rdzv *r, const char *key, const void *expected, size_t elen, const void *desired,
             size_t dlen, int *swapped, rdzv_error *kind, char *err, size_t errlen);
/* Returns once all world_size ranks reached the barrier called name (names
 * may be reused: each use is counted apart), or fails after timeout_s
 * naming the ranks that did not arrive. */
int rdzv_barrier(rdzv *r, const char *name, double timeout_s, rdzv_error *kind, char *err,
                 size_t errlen);

/* Every rank posts one value, and (where vals is non-NULL) reads every
 * rank's: sets "<prefix>/<rank>" to val, then waits at most timeout_s for
 * "<prefix>/<q>" of every rank q and stores each in vals[q] (malloc'd,
 * NUL-terminated; this rank's own copied without a round trip; the caller
 * frees each with rdzv_exchange_free). A rank that never posts fails the
 * call naming it. With vals NULL it only posts. */
int rdzv_exchange(rdzv *r, const char *prefix, const void *val, size_t len, double timeout_s,
                  char **vals, rdzv_error *kind, char *err, size_t errlen);
/* Frees what rdzv_exchange stored in vals (world_size entries); accepts NULL. */
void rdzv_exchange_free(rdzv *r, char **vals);

/* After a collective failed: the rank the store saw lost first (its
 * connection dropped without a goodbye; the store keeps it under the key
 * "rdzv/lost"), waiting at most timeout_s for it; 0 when the store itself
 * is gone (it is rank 0's); -1 when no rank was seen lost. */
int rdzv_lost_rank(rdzv *r, double timeout_s);

/* Other services on the store's port (worker/gang/heartbeat.c): a fresh
 * connection that opens with a handoff request leaves the store and is
 * given to fn with the request's payload, on the store's thread and under
 * its lock (fn only takes fd and answers the request itself, in the
 * store's response format: u32 length | u8 status | text; it owns fd from
 * then on). Until a handler is set, a handoff is answered RDZV_TIMEOUT
 * (not ready) and rdzv_handoff_connect tries again. Rank 0 only (-1
 * elsewhere); fn NULL unsets it (no call of fn after this returns). */
typedef void (*rdzv_handoff_fn)(void *ctx, int fd, const void *payload, size_t len);
int rdzv_set_handoff(rdzv *r, rdzv_handoff_fn fn, void *ctx);
/* A fresh connection to r's store asking to be handed off with payload (at
 * most 4096 bytes), within timeout_s: on the handler's OK answer, *fd is
 * the connection (non-blocking; the caller closes it). A refusal fails
 * with the handler's status and text. */
int rdzv_handoff_connect(const rdzv *r, const void *payload, size_t len, double timeout_s,
                         int *fd, rdzv_error *kind, char *err, size_t errlen);

int rdzv_rank(const rdzv *r);
int rdzv_world_size(const rdzv *r);

#endif
