/* worker/data/source.h - the bytes of a data URI: a local file (file:///a/b
 * or a bare path) or an S3 object (s3://bucket/key), pulled in order, read
 * ahead, surviving dropped connections; the whole of a small one; the
 * names under a prefix.
 *
 * Owns: telling the schemes apart; for files, reading in the caller's
 * thread (pread from the stream's position, the kernel's read-ahead asked
 * for with posix_fadvise); for S3 objects, one background thread per stream
 * that fetches ranged GETs of chunk_bytes into a ring of at most
 * max(ahead_bytes, chunk_bytes) bytes from the moment the stream is opened,
 * and resumes a GET whose connection dropped from the first byte it did not
 * receive; the retries (exponential backoff with full jitter) of every S3
 * request this module makes, since its lib/s3 clients make one attempt
 * each (lib/s3 would restart a dropped range from its first byte); a pool
 * of those clients (one per stream while it is open, kept for reuse, so
 * that streams opened one after another reuse their connections).
 * Must not: know what the bytes hold (tar.h, wds.h do), retry what retrying
 * cannot fix (404, 403, a missing bucket, a bad signature), or hold more
 * than max(ahead_bytes, chunk_bytes) bytes per stream.
 *
 * URIs: "s3://bucket/key"; "file:///abs/path" (no host, no %-decoding:
 * the path is the bytes after "file://"); anything without "://" is a path
 * as the OS reads it. Other schemes are refused.
 *
 * Errors: functions return 0 or -1 with one line in err that starts with
 * the URI ("s3://b/train-000003.tar: no such object", "file:///d/x.tar: is a
 * directory, not a regular file", "s3://b/k: at byte 8388608 of 20971520:
 * s3 GET ...: access denied (...)").
 *
 * Threads: a src_client may be shared by threads (its pool is locked);
 * different streams may be used from different threads at once; one stream
 * by one thread at a time (plus its own fetch thread). src_client_tune
 * before the first src_open.
 *
 * What is not checked: an object replaced between two of its ranged GETs
 * by one of the same size is read half old, half new (lib/s3 sends no
 * If-Match; a shorter or longer replacement is caught as a short read or
 * too many bytes). src_close waits for a GET in flight to notice the stop,
 * which it does at its next received bytes or at lib/s3's stall timeout
 * (timeout_s) when the server sends nothing.
 */
#ifndef VITJOB_SOURCE_H
#define VITJOB_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct src_client src_client;

/* Settings shared by the streams of one loader: endpoint is data's S3
 * endpoint ("" or NULL = AWS, else e.g. http://127.0.0.1:9000; path-style
 * as lib/s3 decides); credentials from the environment as lib/s3 reads them
 * (AWS_ACCESS_KEY_ID, ...; read when the first s3:// URI is opened, listed or
 * read, and only then needed: a client for file:// URIs needs none); CA
 * bundle from AWS_CA_BUNDLE (read here). chunk_bytes: the size of each
 * ranged GET (0 = 8 MiB); ahead_bytes: how far a stream may fetch ahead of
 * its reader (0 = 2 chunks; less than a chunk counts as one chunk). Returns
 * 0 with *out the caller's (src_client_free), or -1 with err. */
int src_client_new(src_client **out, const char *endpoint, size_t chunk_bytes, size_t ahead_bytes,
                   char *err, size_t errlen);
void src_client_free(src_client *c); /* accepts NULL; after every stream is closed */

/* How S3 requests are retried; every field 0 = its default. */
typedef struct {
    /* tries of one request: for a stream's range, failures in a row without
     * a byte received (a failure after some bytes starts the count again,
     * resuming after them; at most 4 x attempts failures per range in all);
     * 0 = 5 */
    int attempts;
    double backoff_s;   /* the wait before the first retry, doubled each time, full jitter; 0 = 0.5 */
    double timeout_s;   /* an attempt fails after this long without a byte moving; 0 = 30 */
    int list_page_size; /* ListObjectsV2 max-keys; 0 = 1000 */
} src_tuning;
/* Copies t (NULL: the defaults). Before the first src_open, src_read_all or
 * src_list on c. */
void src_client_tune(src_client *c, const src_tuning *t);

typedef struct src_stream src_stream;

/* Opens uri ("file:///a/b.tar", "/a/b.tar", "s3://bucket/key") at byte
 * offset (0 = the start; the size = nothing left to read; past it an
 * error). A file must be a regular file (a directory, FIFO or device is an
 * error here, and is never read). An S3 object's size is asked for (HEAD)
 * here, then its bytes are fetched by a background thread in ranged GETs
 * of chunk_bytes, up to ahead_bytes ahead of the reader, starting at once
 * (so that a loader can open the next shard early and find its first bytes
 * ready). A connection dropped mid-range is retried from the first byte not
 * yet received (src_tuning); what retrying cannot fix (404, 403, no bucket)
 * fails at once. A missing file or object is an error here, not at the
 * first read: "URI: no such object", "URI: no such bucket B",
 * "URI: No such file or directory". *out is the caller's (src_close). */
int src_open(src_client *c, const char *uri, uint64_t offset, src_stream **out, char *err,
             size_t errlen);
/* A tar_read_fn (tar.h): pass the src_stream* as ctx. Up to n bytes into
 * buf; returns how many (0 only at the object's end, and when n is 0), or
 * -1 with src_error saying why (URI, byte offset, the S3 or OS reason).
 * The bytes fetched before a failure are returned before the -1. A file
 * that shrank while read is an error at the byte where it ended. */
ssize_t src_read(void *stream, void *buf, size_t n);
/* The last failure's message (borrowed from s; "" when none). */
const char *src_error(const src_stream *s);
uint64_t src_size(const src_stream *s); /* the object's or file's size in bytes */
void src_close(src_stream *s);          /* accepts NULL; stops and joins the background fetch */

/* The whole file or object (at most max bytes; more is an error naming the
 * URI and both sizes) into *out (malloc'd with a NUL after *len bytes, the
 * caller frees), for small files (an image-folder JPEG, a JSON). */
int src_read_all(src_client *c, const char *uri, size_t max, unsigned char **out, size_t *len,
                 char *err, size_t errlen);

/* The URIs of the objects or regular files directly under a prefix URI
 * ("s3://b/imagenet/", "file:///data/shards/", "/data/shards"; a trailing
 * '/' optional) whose names end in suffix (".tar"; "" = all), sorted
 * bytewise, as full URIs written as the prefix was (scheme included).
 * Subdirectories (S3: keys past a further '/') are left out, and so are
 * entries that are not regular files (symbolic links to one count). *out is
 * an array of *n malloc'd strings (free each, then the array, or
 * src_names_free; NULL when n is 0). No match is not an error (n = 0); a
 * missing or unreadable directory or an S3 error is. */
int src_list(src_client *c, const char *uri, const char *suffix, char ***out, size_t *n,
             char *err, size_t errlen);
void src_names_free(char **names, size_t n); /* accepts NULL */

#endif
