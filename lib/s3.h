/* lib/s3.h - an S3 client on libcurl with its SigV4 signing
 * (CURLOPT_AWS_SIGV4): AWS and any S3-compatible store (MinIO, Ceph, moto).
 *
 * Owns: building and signing requests (path-style or virtual-hosted URLs,
 * query strings sorted and encoded the way SigV4 wants, the payload's
 * SHA-256 in x-amz-content-sha256), PUT (multipart with parts in parallel
 * above a threshold, aborted on failure), ranged GET, HEAD, ListObjectsV2
 * with pagination (parsed with libxml2), DELETE; retries with exponential
 * backoff and full jitter on 5xx, 429, resets and timeouts, within a
 * deadline; mapping S3's error codes to s3_status with a message that says
 * what went wrong.
 * Must not: log secrets (the secret key and session token never reach a log
 * or an err buffer), know what the objects hold, or retry errors that cannot
 * pass (403, 404, bad requests).
 *
 * Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN
 * from the environment when s3_new is called (the operator mounts them from
 * checkpoint.credentialsSecret). TLS verification is always on for https.
 *
 * Threads: one s3_client may be used by one thread at a time; s3_put's
 * parallel parts use their own handles inside the call. Programs using this
 * module ignore SIGPIPE (see lib/http.h).
 */
#ifndef VITJOB_S3_H
#define VITJOB_S3_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    S3_OK = 0,
    S3_NOT_FOUND,     /* no such key (404 NoSuchKey) */
    S3_NO_BUCKET,     /* NoSuchBucket */
    S3_DENIED,        /* 403: access denied, unknown key id, expired token */
    S3_BAD_SIGNATURE, /* SignatureDoesNotMatch: usually a wrong secret */
    S3_UNREACHABLE,   /* could not connect or resolve (after retries) */
    S3_TRANSIENT,     /* 5xx, 429, reset, timeout still failing at the deadline */
    S3_INVALID,       /* a bad argument, URI or request the server refused (4xx) */
    S3_NOMEM,
} s3_status;

const char *s3_status_name(s3_status st); /* static string, e.g. "no_bucket" */
/* 1 when the same call may pass later (unreachable, transient, nomem). */
int s3_status_retryable(s3_status st);

typedef struct {
    const char *endpoint;  /* "http://127.0.0.1:9000", "https://minio.x:9000"; NULL/"" = AWS */
    const char *region;    /* NULL/"" = $AWS_REGION, $AWS_DEFAULT_REGION, else "us-east-1" */
    int path_style;        /* 0 = auto (path-style on a custom endpoint, virtual on AWS),
                            * 1 = path-style, 2 = virtual-hosted */
    const char *ca_bundle; /* a PEM file to trust instead of the system store; NULL = system */
    int max_attempts;      /* per request; 0 = 5 */
    double timeout_s;      /* per attempt, while no byte moves; 0 = 30 */
    double deadline_s;     /* per call, all attempts; 0 = 900 */
    double backoff_s;      /* first backoff; doubles per attempt, full jitter; 0 = 0.5 */
    int parallel;          /* multipart parts in flight; 0 = 4 */
    size_t multipart_threshold; /* objects this large or more go multipart; 0 = 64 MiB */
    size_t part_size;      /* 0 = 16 MiB (at least 5 MiB as S3 demands) */
    int list_page_size;    /* ListObjectsV2 max-keys; 0 = 1000 */
} s3_options;

typedef struct s3_client s3_client;

/* opts copied (may be NULL: all defaults). *out owned by the caller
 * (s3_free). Fails (S3_INVALID) without credentials in the environment. */
s3_status s3_new(const s3_options *opts, s3_client **out, char *err, size_t errlen);
void s3_free(s3_client *c); /* accepts NULL */

/* Writes len bytes of buf (borrowed) as bucket/key; multipart at or above
 * the threshold. An object is visible whole or not at all. */
s3_status s3_put(s3_client *c, const char *bucket, const char *key, const void *buf, size_t len,
                 char *err, size_t errlen);
/* Up to len bytes from offset off into out; *got the bytes read (fewer
 * only at the object's end). len 0 reads nothing and checks existence. */
s3_status s3_get(s3_client *c, const char *bucket, const char *key, uint64_t off, size_t len,
                 void *out, size_t *got, char *err, size_t errlen);
/* Receives a streamed GET's bytes in order: data is n bytes at offset pos
 * of the requested range. A retried request starts again at pos 0, so a
 * sink must accept a restart. Returns 0, or nonzero to stop the transfer. */
typedef int (*s3_sink)(void *ctx, uint64_t pos, const void *data, size_t n);
/* Up to len bytes from offset off, handed to sink as they arrive (one
 * request, retried whole); *got the bytes of the attempt that succeeded
 * (fewer only at the object's end). A sink's stop is S3_INVALID with err
 * saying so; the sink keeps its own reason. */
s3_status s3_get_stream(s3_client *c, const char *bucket, const char *key, uint64_t off,
                        size_t len, s3_sink sink, void *ctx, size_t *got, char *err,
                        size_t errlen);
/* The whole object, at most max bytes (more is S3_INVALID): *out malloc'd
 * with a NUL after *len bytes; the caller frees. */
s3_status s3_get_all(s3_client *c, const char *bucket, const char *key, size_t max, void **out,
                     size_t *len, char *err, size_t errlen);
/* The object's size. */
s3_status s3_head(s3_client *c, const char *bucket, const char *key, uint64_t *size, char *err,
                  size_t errlen);

typedef struct {
    char *key;     /* the full key (or common prefix, ending in the delimiter) */
    uint64_t size; /* 0 for prefixes */
    int is_prefix;
} s3_item;

typedef struct {
    s3_item *items; /* sorted by key */
    size_t n;
} s3_listing;

/* Every key under prefix (all pages); with a delimiter ("/"), keys past it
 * are folded into common prefixes. *out filled; free with s3_listing_free. */
s3_status s3_list(s3_client *c, const char *bucket, const char *prefix, const char *delimiter,
                  s3_listing *out, char *err, size_t errlen);
void s3_listing_free(s3_listing *l); /* frees the items, zeroes *l; accepts NULL */

/* Deleting an absent key is not an error (as S3 says). */
s3_status s3_delete(s3_client *c, const char *bucket, const char *key, char *err, size_t errlen);

/* "s3://bucket/some/prefix" -> bucket and prefix ("" or without a leading
 * '/', trailing '/' kept as written). 0, or -1 with err naming the URI. */
int s3_parse_uri(const char *uri, char *bucket, size_t bucket_len, char *prefix,
                 size_t prefix_len, char *err, size_t errlen);

/* SigV4's URI encoding: unreserved characters (A-Z a-z 0-9 - _ . ~) kept,
 * every other byte as %XX with uppercase hex; '/' kept when keep_slash.
 * Returns a malloc'd string (the caller frees) or NULL. */
char *s3_uri_encode(const char *s, int keep_slash);

#endif
