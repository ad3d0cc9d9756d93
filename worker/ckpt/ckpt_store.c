/* worker/ckpt/ckpt_store.c - see ckpt_store.h. */
#include "ckpt_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "s3.h"

typedef enum { STORE_FILE, STORE_S3 } store_kind;

struct ckpt_store {
    store_kind kind;
    char root[4096]; /* file: the directory; s3: the key prefix ("" or ending in '/') */
    char bucket[256];
    s3_client *s3;   /* s3 only */
};

/* What a failed S3 call means for a checkpoint. */
static ckpt_status s3_to_ckpt(s3_status st)
{
    if (st == S3_OK) return CKPT_OK;
    if (st == S3_NOT_FOUND) return CKPT_NOT_FOUND;
    return s3_status_retryable(st) ? CKPT_RETRY : CKPT_PERMANENT;
}

static ckpt_status errno_status(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EIO || e == EAGAIN || e == EINTR || e == ENOMEM
               ? CKPT_RETRY
               : CKPT_PERMANENT;
}

/* mkdir -p for dir (absolute). */
static int make_dirs(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *c = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* A name is relative, without "." or ".." segments or empty ones. */
static int name_ok(const char *name)
{
    if (!name[0] || name[0] == '/') return 0;
    for (const char *seg = name; seg;) {
        const char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return 0;
        seg = end ? end + 1 : NULL;
    }
    return 1;
}

ckpt_status ckpt_store_open(ckpt_store **out, const char *uri, const char *endpoint, char *err,
                            size_t errlen)
{
    ckpt_store *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "checkpoint store: out of memory");
        return CKPT_RETRY;
    }
    if (strncmp(uri, "file://", 7) == 0) {
        s->kind = STORE_FILE;
        const char *path = uri + 7;
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') n--;
        if (path[0] != '/' || n >= sizeof s->root) {
            snprintf(err, errlen, "checkpoint.uri=%s: a file:// URI needs an absolute path", uri);
            free(s);
            return CKPT_PERMANENT;
        }
        memcpy(s->root, path, n);
        s->root[n] = '\0';
        if (make_dirs(s->root) != 0) {
            int e = errno;
            snprintf(err, errlen, "checkpoint.uri=%s: cannot create %s: %s", uri, s->root,
                     strerror(e));
            free(s);
            return errno_status(e);
        }
        *out = s;
        return CKPT_OK;
    }
    if (strncmp(uri, "s3://", 5) == 0) {
        s->kind = STORE_S3;
        char why[512];
        if (s3_parse_uri(uri, s->bucket, sizeof s->bucket, s->root, sizeof s->root - 1, why,
                         sizeof why) != 0) {
            snprintf(err, errlen, "checkpoint.uri: %s", why);
            free(s);
            return CKPT_PERMANENT;
        }
        size_t n = strlen(s->root); /* "runs/a" must not also match "runs/ab/..." */
        if (n > 0 && s->root[n - 1] != '/') strcat(s->root, "/");
        /* AWS_CA_BUNDLE and AWS_MAX_ATTEMPTS as the AWS command line reads them */
        s3_options o = {.endpoint = endpoint, .ca_bundle = getenv("AWS_CA_BUNDLE")};
        const char *ma = getenv("AWS_MAX_ATTEMPTS");
        if (ma && *ma) {
            char *end;
            long v = strtol(ma, &end, 10);
            if (*end || v < 1 || v > 100) {
                snprintf(err, errlen, "AWS_MAX_ATTEMPTS=%s must be a whole number from 1 to 100",
                         ma);
                free(s);
                return CKPT_PERMANENT;
            }
            o.max_attempts = (int)v;
        }
        s3_status st = s3_new(&o, &s->s3, why, sizeof why);
        if (st != S3_OK) {
            snprintf(err, errlen, "checkpoint.uri=%s: %s", uri, why);
            free(s);
            return s3_to_ckpt(st);
        }
        *out = s;
        return CKPT_OK;
    }
    snprintf(err, errlen, "checkpoint.uri=%s must start with s3:// or file://", uri);
    free(s);
    return CKPT_PERMANENT;
}

void ckpt_store_free(ckpt_store *s)
{
    if (!s) return;
    s3_free(s->s3);
    free(s);
}

/* The S3 key of name; -1 with err filled for a bad name. */
static int key_of(const ckpt_store *s, const char *name, char *out, size_t len, char *err,
                  size_t errlen)
{
    if (!name_ok(name)) {
        snprintf(err, errlen, "checkpoint store: bad object name '%s'", name);
        return -1;
    }
    if ((size_t)snprintf(out, len, "%s%s", s->root, name) >= len) {
        snprintf(err, errlen, "checkpoint store: key %s%s too long", s->root, name);
        return -1;
    }
    return 0;
}

static ckpt_status s3_failed(s3_status st, const char *why, char *err, size_t errlen)
{
    snprintf(err, errlen, "checkpoint: %s%s", why,
             s3_status_retryable(st) ? " (retryable)" : "");
    return s3_to_ckpt(st);
}

static int path_of(const ckpt_store *s, const char *name, char *out, size_t len, char *err,
                   size_t errlen)
{
    if (!name_ok(name)) {
        snprintf(err, errlen, "checkpoint store: bad object name '%s'", name);
        return -1;
    }
    if ((size_t)snprintf(out, len, "%s/%s", s->root, name) >= len) {
        snprintf(err, errlen, "checkpoint store: %s/%s: path too long", s->root, name);
        return -1;
    }
    return 0;
}

/* A guarded put on file://: a temporary (".vitjob-tmp.*", never listed),
 * its bytes written and fsynced, then the guard, then at once the rename
 * and the directory's fsync. Nothing that can block lies between the
 * guard and the rename (lib/file.h's commit fsyncs again first: a process
 * stopped there with SIGSTOP renames after SIGCONT without asking again),
 * so a process frozen at any moment either made the object visible before
 * it froze or asks the guard again after it is let go, except for the few
 * instructions between the guard's return and the rename. */
static ckpt_status file_put_guarded(const char *path, const char *dir, const void *buf,
                                    size_t len, ckpt_guard guard, void *ctx, char *err,
                                    size_t errlen)
{
    char tmp[4700];
    snprintf(tmp, sizeof tmp, "%s/.vitjob-tmp.ckpt.XXXXXX", dir);
    int fd = mkstemp(tmp);
    if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: cannot create a temporary file in %s: %s; the "
                 "previous checkpoints are untouched", dir, strerror(e));
        return errno_status(e);
    }
    const char *what = "writing";
    ckpt_status st = CKPT_OK;
    if (fchmod(fd, 0644) != 0 || file_write_all(fd, buf, len) != 0 ||
        (what = "fsync of", fsync(fd)) != 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: %s %s (%zu bytes) failed: %s; the previous "
                 "checkpoints are untouched", what, path, len, strerror(e));
        st = errno_status(e);
    } else if ((st = guard(ctx, 0, err, errlen)) == CKPT_OK && rename(tmp, path) != 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: cannot rename %s over %s: %s", tmp, path,
                 strerror(e));
        st = errno_status(e);
    }
    close(fd);
    if (st) {
        unlink(tmp);
        return st;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* some file systems cannot fsync a directory (EINVAL) */
        if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS) {
            int e = errno;
            snprintf(err, errlen, "checkpoint: fsync of directory %s failed: %s", dir,
                     strerror(e));
            st = errno_status(e);
        }
        close(dfd);
    }
    return st;
}

/* A guarded put's second question, once name is visible: CKPT_OK, or the
 * guard's refusal with name deleted again (it is the writer's own object:
 * the guard's condition changed while the put was in flight). */
static ckpt_status take_back(ckpt_store *s, const char *name, ckpt_guard guard, void *ctx,
                             char *err, size_t errlen)
{
    ckpt_status gst = guard(ctx, 1, err, errlen);
    if (gst == CKPT_OK) return CKPT_OK;
    char why[1024];
    size_t used = strlen(err);
    if (ckpt_store_delete(s, name, why, sizeof why) == CKPT_OK)
        snprintf(err + used, errlen - used, "; %s was stored just as that happened and has "
                 "been removed again", name);
    else
        snprintf(err + used, errlen - used, "; %s was stored just as that happened and could "
                 "not be removed again (%s)", name, why);
    return gst;
}

ckpt_status ckpt_store_put(ckpt_store *s, const char *name, const void *buf, size_t len,
                           char *err, size_t errlen)
{
    return ckpt_store_put_guarded(s, name, buf, len, NULL, NULL, err, errlen);
}

ckpt_status ckpt_store_put_guarded(ckpt_store *s, const char *name, const void *buf, size_t len,
                                   ckpt_guard guard, void *ctx, char *err, size_t errlen)
{
    char path[4600], dir[4600];
    ckpt_status gst;
    if (s->kind == STORE_S3) { /* the request cannot be called back: the guard before it */
        char why[1024];
        if (key_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
        if (guard && (gst = guard(ctx, 0, err, errlen)) != CKPT_OK) return gst;
        s3_status st = s3_put(s->s3, s->bucket, path, buf, len, why, sizeof why);
        if (st != S3_OK) return s3_failed(st, why, err, errlen);
        return guard ? take_back(s, name, guard, ctx, err, errlen) : CKPT_OK;
    }
    if (path_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    if (make_dirs(dir) != 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: cannot create %s: %s", dir, strerror(e));
        return errno_status(e);
    }
    if (guard) {
        if ((gst = file_put_guarded(path, dir, buf, len, guard, ctx, err, errlen)) != CKPT_OK)
            return gst;
        return take_back(s, name, guard, ctx, err, errlen);
    }
    file_atomic *a = NULL;
    char why[1024];
    if (file_atomic_begin(&a, path, why, sizeof why) != 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: %s", why);
        return errno_status(e);
    }
    if (file_write_all(file_atomic_fd(a), buf, len) != 0) {
        int e = errno;
        file_atomic_abort(a);
        snprintf(err, errlen, "checkpoint: writing %s (%zu bytes) failed: %s; the previous "
                 "checkpoints are untouched", path, len, strerror(e));
        return errno_status(e);
    }
    if (file_atomic_commit(a, why, sizeof why) != 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: %s", why);
        return errno_status(e);
    }
    return CKPT_OK;
}

/* The outcome of an S3 read of len bytes at off of key path that got got:
 * fewer is a truncated object. */
static ckpt_status s3_read_result(const ckpt_store *s, const char *path, s3_status st,
                                  const char *why, uint64_t got, uint64_t off, uint64_t len,
                                  char *err, size_t errlen)
{
    if (st != S3_OK) return s3_failed(st, why, err, errlen);
    if (got < len) {
        snprintf(err, errlen, "checkpoint: s3://%s/%s is shorter than %llu bytes (truncated)",
                 s->bucket, path, (unsigned long long)(off + len));
        return CKPT_PERMANENT;
    }
    return CKPT_OK;
}

/* The file of name opened for reading: *fd, and its path in path. */
static ckpt_status open_read(const ckpt_store *s, const char *name, int *fd, char *path,
                             size_t len, char *err, size_t errlen)
{
    if (path_of(s, name, path, len, err, errlen)) return CKPT_PERMANENT;
    if ((*fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: %s: %s", path, strerror(e));
        return e == ENOENT ? CKPT_NOT_FOUND : errno_status(e);
    }
    return CKPT_OK;
}

/* Exactly len bytes from offset off of the open file path. */
static ckpt_status pread_exact(int fd, const char *path, uint64_t off, size_t len, void *out,
                               char *err, size_t errlen)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (char *)out + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            if (e)
                snprintf(err, errlen, "checkpoint: reading %s failed: %s", path, strerror(e));
            else
                snprintf(err, errlen, "checkpoint: %s is shorter than %llu bytes (truncated)",
                         path, (unsigned long long)(off + len));
            return e ? errno_status(e) : CKPT_PERMANENT;
        }
        done += (size_t)r;
    }
    return CKPT_OK;
}

/* One chunk of a streamed file read, read on a thread of its own. */
typedef struct {
    int fd;
    const char *path;
    uint64_t off, pos; /* the file offset of the stream, and this chunk's offset in it */
    size_t k;
    unsigned char *buf;
    pthread_t thread;
    int running;
    ckpt_status st;
    char err[600];
} chunk_read;

static void *chunk_body(void *arg)
{
    chunk_read *c = arg;
    c->st = pread_exact(c->fd, c->path, c->off + c->pos, c->k, c->buf, c->err, sizeof c->err);
    return NULL;
}

/* Starts reading chunk i of a stream of len bytes at off (cap a chunk); on
 * the caller's thread when no thread can be had. */
static void chunk_start(chunk_read *c, uint64_t off, uint64_t len, size_t cap, size_t i)
{
    c->off = off;
    c->pos = (uint64_t)i * cap;
    c->k = len - c->pos < cap ? (size_t)(len - c->pos) : cap;
    c->running = pthread_create(&c->thread, NULL, chunk_body, c) == 0;
    if (!c->running) chunk_body(c);
}

static void chunk_wait(chunk_read *c)
{
    if (c->running) pthread_join(c->thread, NULL);
    c->running = 0;
}

ckpt_status ckpt_store_get(ckpt_store *s, const char *name, uint64_t off, size_t len, void *out,
                           char *err, size_t errlen)
{
    char path[4600];
    if (s->kind == STORE_S3) {
        char why[1024];
        size_t got = 0;
        if (key_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
        s3_status st = s3_get(s->s3, s->bucket, path, off, len, out, &got, why, sizeof why);
        return s3_read_result(s, path, st, why, got, off, len, err, errlen);
    }
    int fd;
    ckpt_status st = open_read(s, name, &fd, path, sizeof path, err, errlen);
    if (st) return st;
    st = pread_exact(fd, path, off, len, out, err, errlen);
    close(fd);
    return st;
}

ckpt_status ckpt_store_stream(ckpt_store *s, const char *name, uint64_t off, uint64_t len,
                              ckpt_sink sink, void *ctx, char *err, size_t errlen)
{
    char path[4600];
    if (s->kind == STORE_S3) {
        char why[1024];
        size_t got = 0;
        if (key_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
        s3_status st = s3_get_stream(s->s3, s->bucket, path, off, (size_t)len, sink, ctx, &got,
                                     why, sizeof why);
        return s3_read_result(s, path, st, why, got, off, len, err, errlen);
    }
    int fd;
    ckpt_status st = open_read(s, name, &fd, path, sizeof path, err, errlen);
    if (st) return st;
    /* two chunk buffers: a thread reads the next chunk while the sink takes
     * this one, so the disk and the checking overlap */
    size_t cap = len < CKPT_STREAM_CHUNK ? (size_t)len : CKPT_STREAM_CHUNK;
    chunk_read rd[2] = {{.fd = fd, .path = path}, {.fd = fd, .path = path}};
    rd[0].buf = malloc(cap ? cap : 1);
    rd[1].buf = malloc(cap ? cap : 1);
    if (!rd[0].buf || !rd[1].buf) {
        free(rd[0].buf);
        free(rd[1].buf);
        close(fd);
        snprintf(err, errlen, "checkpoint: out of memory reading %s", name);
        return CKPT_RETRY;
    }
    size_t nchunks = cap ? (size_t)((len + cap - 1) / cap) : 0;
    if (nchunks) chunk_start(&rd[0], off, len, cap, 0);
    for (size_t i = 0; i < nchunks && !st; i++) {
        chunk_read *c = &rd[i % 2];
        chunk_wait(c);
        if (i + 1 < nchunks) chunk_start(&rd[(i + 1) % 2], off, len, cap, i + 1);
        if ((st = c->st) != CKPT_OK) {
            snprintf(err, errlen, "%s", c->err);
        } else if (sink(ctx, c->pos, c->buf, c->k)) {
            snprintf(err, errlen, "checkpoint: reading %s stopped by the reader", name);
            st = CKPT_PERMANENT;
        }
    }
    chunk_wait(&rd[0]);
    chunk_wait(&rd[1]);
    free(rd[0].buf);
    free(rd[1].buf);
    close(fd);
    return st;
}

ckpt_status ckpt_store_read(ckpt_store *s, const char *name, size_t max, void **out,
                            size_t *len, char *err, size_t errlen)
{
    char path[4600];
    if (s->kind == STORE_S3) {
        char why[1024];
        if (key_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
        s3_status st = s3_get_all(s->s3, s->bucket, path, max, out, len, why, sizeof why);
        return st == S3_OK ? CKPT_OK : s3_failed(st, why, err, errlen);
    }
    if (path_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: %s: %s", path, strerror(e));
        return e == ENOENT ? CKPT_NOT_FOUND : errno_status(e);
    }
    if ((uint64_t)st.st_size > max) {
        snprintf(err, errlen, "checkpoint: %s is %lld bytes, more than %zu", path,
                 (long long)st.st_size, max);
        return CKPT_PERMANENT;
    }
    size_t n = (size_t)st.st_size;
    char *b = malloc(n + 1);
    if (!b) {
        snprintf(err, errlen, "checkpoint: out of memory reading %s", path);
        return CKPT_RETRY;
    }
    ckpt_status rc = ckpt_store_get(s, name, 0, n, b, err, errlen);
    if (rc) {
        free(b);
        return rc;
    }
    b[n] = '\0';
    *out = b;
    *len = n;
    return CKPT_OK;
}

/* The objects found: names and sizes together, until handed out. */
typedef struct {
    char *name;
    uint64_t size;
} object;

typedef struct {
    object *items;
    size_t n, cap;
} listing;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const object *)a)->name, ((const object *)b)->name);
}

static int add(listing *l, const char *name, uint64_t size)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        object *items = realloc(l->items, cap * sizeof *items);
        if (!items) return -1;
        l->items = items;
        l->cap = cap;
    }
    if (!(l->items[l->n].name = strdup(name))) return -1;
    l->items[l->n++].size = size;
    return 0;
}

/* Regular files under dir (relative names from rel), two levels deep;
 * temporaries of lib/file.h are not objects. */
static int walk(const char *dir, const char *rel, int depth, listing *l)
{
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* ., .., and .vitjob-tmp.* */
        char path[4600], name[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue; /* deleted meanwhile */
        if (S_ISDIR(st.st_mode) && depth > 0)
            rc = walk(path, name, depth - 1, l);
        else if (S_ISREG(st.st_mode))
            rc = add(l, name, (uint64_t)st.st_size);
    }
    closedir(d);
    return rc;
}

/* ckpt_store_list (dir NULL) and ckpt_store_list_dir. */
static ckpt_status list_objects(ckpt_store *s, const char *dir, char ***names, uint64_t **sizes,
                                size_t *n, char *err, size_t errlen)
{
    listing l = {0};
    int e = 0;
    char sub[4600];
    if (dir && (!name_ok(dir) || strchr(dir, '/'))) {
        snprintf(err, errlen, "checkpoint store: bad folder name '%s'", dir);
        return CKPT_PERMANENT;
    }
    if (s->kind == STORE_S3) {
        s3_listing sl = {0};
        char why[1024];
        snprintf(sub, sizeof sub, "%s%s%s", s->root, dir ? dir : "", dir ? "/" : "");
        s3_status st = s3_list(s->s3, s->bucket, sub, NULL, &sl, why, sizeof why);
        if (st != S3_OK) return s3_failed(st, why, err, errlen);
        size_t plen = strlen(s->root);
        for (size_t i = 0; i < sl.n && !e; i++)
            if (!sl.items[i].is_prefix && name_ok(sl.items[i].key + plen) &&
                add(&l, sl.items[i].key + plen, sl.items[i].size) != 0)
                e = ENOMEM;
        s3_listing_free(&sl);
    } else if (dir) {
        snprintf(sub, sizeof sub, "%s/%s", s->root, dir);
        if (walk(sub, dir, 0, &l) != 0) e = errno;
    } else if (walk(s->root, "", 1, &l) != 0) {
        e = errno;
    }
    char **nm = NULL;
    uint64_t *sz = NULL;
    if (!e && !((nm = malloc((l.n + 1) * sizeof *nm)) && (sz = malloc((l.n + 1) * sizeof *sz))))
        e = ENOMEM;
    if (e) {
        for (size_t i = 0; i < l.n; i++) free(l.items[i].name);
        free(l.items);
        free(nm);
        snprintf(err, errlen, "checkpoint: listing %s%s%s failed: %s",
                 s->kind == STORE_S3 ? "s3://" : "", s->kind == STORE_S3 ? s->bucket : "",
                 s->root, strerror(e));
        return errno_status(e);
    }
    if (l.n > 1) qsort(l.items, l.n, sizeof *l.items, cmp_name);
    for (size_t i = 0; i < l.n; i++) {
        nm[i] = l.items[i].name;
        sz[i] = l.items[i].size;
    }
    free(l.items);
    *names = nm;
    *sizes = sz;
    *n = l.n;
    return CKPT_OK;
}

ckpt_status ckpt_store_list(ckpt_store *s, char ***names, uint64_t **sizes, size_t *n,
                            char *err, size_t errlen)
{
    return list_objects(s, NULL, names, sizes, n, err, errlen);
}

ckpt_status ckpt_store_list_dir(ckpt_store *s, const char *dir, char ***names, uint64_t **sizes,
                                size_t *n, char *err, size_t errlen)
{
    return list_objects(s, dir, names, sizes, n, err, errlen);
}

ckpt_status ckpt_store_delete(ckpt_store *s, const char *name, char *err, size_t errlen)
{
    char path[4600];
    if (s->kind == STORE_S3) {
        char why[1024];
        if (key_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
        s3_status st = s3_delete(s->s3, s->bucket, path, why, sizeof why);
        return st == S3_OK ? CKPT_OK : s3_failed(st, why, err, errlen);
    }
    if (path_of(s, name, path, sizeof path, err, errlen)) return CKPT_PERMANENT;
    if (unlink(path) != 0 && errno != ENOENT) {
        int e = errno;
        snprintf(err, errlen, "checkpoint: deleting %s failed: %s", path, strerror(e));
        return errno_status(e);
    }
    char *slash = strrchr(path, '/');
    *slash = '\0';
    if (strcmp(path, s->root) != 0) rmdir(path); /* the step's directory, once empty */
    return CKPT_OK;
}
