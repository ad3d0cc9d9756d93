/* worker/ckpt/ckpt_store.h - where checkpoints live: named objects under one
 * root, on a file system (file://DIR) or in object storage
 * (s3://BUCKET/PREFIX, lib/s3.h).
 *
 * Owns: mapping checkpoint.uri to a backend, and the operations on
 * objects named relative to the root ("step-000000010/manifest.json"):
 * put (whole, atomically visible: a reader sees the old object, none, or
 * the whole new one), ranged get, list, delete. On file:// a put is a
 * temporary file, fsync, rename and fsync of the directory (lib/file.h).
 * Must not: know what a checkpoint holds (worker/ckpt/ckpt.h), or retry a
 * failure that cannot pass (s3's own retries cover the ones that can).
 *
 * Errors: functions return CKPT_OK or a ckpt_status with one line in err
 * naming the operation and the object. Thread safety: one store may be
 * used by one thread at a time.
 */
#ifndef VITJOB_CKPT_STORE_H
#define VITJOB_CKPT_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CKPT_OK = 0,
    CKPT_NOT_FOUND, /* no such object */
    CKPT_RETRY,     /* it may pass later: a full disk, an unreachable or failing server */
    CKPT_PERMANENT, /* it will not pass: bad URI, access denied, no such bucket */
    CKPT_FENCED,    /* a newer generation has taken the checkpoints over (ckpt_fence.h):
                     * this writer wrote and deleted nothing */
} ckpt_status;

typedef struct ckpt_store ckpt_store;

/* A store for uri (file:///abs/dir or s3://bucket[/prefix]); endpoint is
 * checkpoint.endpoint (S3-compatible servers; "" for AWS). *out is the
 * caller's (ckpt_store_free). A file:// root is created if missing. */
ckpt_status ckpt_store_open(ckpt_store **out, const char *uri, const char *endpoint, char *err,
                            size_t errlen);
void ckpt_store_free(ckpt_store *s); /* accepts NULL */

ckpt_status ckpt_store_put(ckpt_store *s, const char *name, const void *buf, size_t len,
                           char *err, size_t errlen);
/* A put whose guard is asked twice. Before: at the last moment before the
 * object becomes visible (on file:// after the bytes are written and
 * fsynced, with nothing that can block between its answer and the rename;
 * on S3 before the request); a refusal there is the put's status, with the
 * guard's message in err, and nothing is stored (the temporary is
 * removed). After (stored 1): once the object is visible; a refusal there
 * means the guard's condition changed while the put was in flight (a newer
 * generation's fence appeared between the check and the rename, or during
 * the request): the object just stored is deleted again, the put returns
 * the guard's status, and err says that it was stored and removed (or
 * could not be removed, and why). No check-then-act is atomic without
 * conditional writes; this one leaves an object only when the process
 * dies between the put and the second question. guard NULL:
 * ckpt_store_put. */
typedef ckpt_status (*ckpt_guard)(void *ctx, int stored, char *err, size_t errlen);
ckpt_status ckpt_store_put_guarded(ckpt_store *s, const char *name, const void *buf, size_t len,
                                   ckpt_guard guard, void *ctx, char *err, size_t errlen);
/* Exactly len bytes from offset off (a shorter object is an error). */
ckpt_status ckpt_store_get(ckpt_store *s, const char *name, uint64_t off, size_t len, void *out,
                           char *err, size_t errlen);
/* Receives a streamed read in order: n bytes at offset pos of the range;
 * a retried read starts again at pos 0. Returns 0, or nonzero to stop. */
typedef int (*ckpt_sink)(void *ctx, uint64_t pos, const void *data, size_t n);
/* Exactly len bytes from offset off, handed to sink as they arrive: one
 * request on S3; on file://, reads of CKPT_STREAM_CHUNK, the next one on a
 * thread while the sink takes this one (1 MiB: the chunk is still in the
 * CPU's cache when the sink reads it; 8 MiB chunks made a cold-cache
 * restore 2x slower than cat here). A sink's stop is CKPT_PERMANENT with
 * err saying so (the sink keeps its own reason). */
ckpt_status ckpt_store_stream(ckpt_store *s, const char *name, uint64_t off, uint64_t len,
                              ckpt_sink sink, void *ctx, char *err, size_t errlen);
#define CKPT_STREAM_CHUNK (1u << 20)
/* The whole object, at most max bytes: *out malloc'd (the caller frees). */
ckpt_status ckpt_store_read(ckpt_store *s, const char *name, size_t max, void **out,
                            size_t *len, char *err, size_t errlen);
/* Every object's name and size under the root, sorted by name: *names and
 * *sizes malloc'd arrays of *n (the caller frees each name, then both). */
ckpt_status ckpt_store_list(ckpt_store *s, char ***names, uint64_t **sizes, size_t *n,
                            char *err, size_t errlen);
/* The same for the objects directly in one folder under the root (dir: a
 * single name such as "step-000000010" or "fence"; names come back with
 * it, "fence/g3.json"). A folder that does not exist lists nothing. */
ckpt_status ckpt_store_list_dir(ckpt_store *s, const char *dir, char ***names, uint64_t **sizes,
                                size_t *n, char *err, size_t errlen);
/* Absent already is not an error. */
ckpt_status ckpt_store_delete(ckpt_store *s, const char *name, char *err, size_t errlen);

#endif
