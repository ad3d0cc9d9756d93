/* operator/workqueue.h - the reconcile work queue, after client-go's
 * rate-limited delaying work queue.
 *
 * Owns: the set of keys waiting to be reconciled ("namespace/name" strings,
 * copied on add), the keys being processed, the delayed keys (a min-heap by due
 * time), and the per-key failure counts of the exponential rate limiter.
 * Must not: know what a key means, call out while holding its lock, or start
 * threads of its own (delayed keys are promoted by whichever caller looks next:
 * wq_get waits until the earliest due time, wq_len promotes what is due).
 *
 * Rules (those of client-go's workqueue):
 *   - A key is queued at most once: adding a key already waiting is a no-op.
 *   - A key is handed to at most one worker at a time. Adding a key while it is
 *     being processed marks it dirty; wq_done then queues it again, once.
 *   - wq_add_after(key, s) queues the key s seconds from now; if the key is
 *     already waiting for a later time, the earlier time wins.
 *   - wq_add_rate_limited waits base * 2^failures (failures counted per key,
 *     capped at `cap`); wq_forget resets the key's count. Call wq_forget after
 *     a reconcile that succeeded, or the next failure backs off further.
 *   - After wq_shutdown, adds are ignored and delayed keys are dropped; wq_get
 *     still hands out the keys already queued (and dirty keys re-queued by
 *     wq_done), then returns WQ_SHUTDOWN to every caller.
 * Every function is safe to call from any thread.
 */
#ifndef VITJOB_WORKQUEUE_H
#define VITJOB_WORKQUEUE_H

#include <stddef.h>

typedef struct wq wq;

enum wq_rc {
    WQ_OK = 0,
    WQ_ENOMEM = -1,   /* an allocation failed; the key was not added */
    WQ_EINVAL = -2,   /* NULL or empty key, or a bad argument */
    WQ_TIMEOUT = 1,   /* wq_get: nothing became ready in time */
    WQ_SHUTDOWN = 2,  /* wq_get: the queue is shut down and drained */
};

/* client-go's DefaultItemBasedRateLimiter: 5 ms, doubling, capped at 1000 s. */
#define WQ_BACKOFF_BASE_S 0.005
#define WQ_BACKOFF_CAP_S 1000.0

/* A new, empty queue with the default backoff; NULL if out of memory.
 * Caller frees with wq_free. */
wq *wq_new(void);
/* Frees the queue and every key in it. Accepts NULL. No thread may be inside
 * a wq_* call on `q` (shut down and join the workers first). */
void wq_free(wq *q);
/* Sets the rate limiter's base and cap (seconds, 0 < base <= cap). */
int wq_set_backoff(wq *q, double base_s, double cap_s);

/* Queues `key` now (copied). WQ_OK also when de-duplicated or shut down. */
int wq_add(wq *q, const char *key);
/* Queues `key` after `seconds` (<= 0: now). */
int wq_add_after(wq *q, const char *key, double seconds);
/* Queues `key` after the key's backoff, then counts one more failure for it.
 * The delay used is written to *delay_s when that is not NULL. */
int wq_add_rate_limited(wq *q, const char *key, double *delay_s);
/* Forgets the key's failures (the next wq_add_rate_limited waits `base`). */
void wq_forget(wq *q, const char *key);
/* Failures counted for `key` since the last wq_forget. */
int wq_num_requeues(wq *q, const char *key);
/* The delay for a key with `failures` failures: min(base * 2^failures, cap). */
double wq_backoff_delay(double base_s, double cap_s, int failures);

/* Waits up to `timeout_s` seconds (< 0: forever) for a ready key. On WQ_OK,
 * *key is a copy the caller frees with free(), and the key is "processing"
 * until wq_done(q, key). Returns WQ_TIMEOUT or WQ_SHUTDOWN otherwise, with
 * *key untouched. */
int wq_get(wq *q, char **key, double timeout_s);
/* Ends processing of `key` (the string from wq_get or an equal one); if it
 * was added meanwhile, queues it again. */
void wq_done(wq *q, const char *key);

/* Keys ready to be handed out now (due delayed keys included): the depth
 * gauge. Delayed keys not yet due and keys being processed are not counted. */
size_t wq_len(wq *q);
/* Delayed keys not yet due. */
size_t wq_len_delayed(wq *q);
/* Wakes every wq_get; see the shutdown rule above. */
void wq_shutdown(wq *q);
int wq_shutting_down(wq *q);

#endif
