/* worker/data/tar.c - the tar reader over a byte stream and the
 * deterministic tar writer (tar.h says what each accepts and refuses, and
 * why this is not libarchive).
 *
 * Owns: the header layout (POSIX.1-1988 ustar, GNU's 'L' and base-256
 * sizes, POSIX.1-2001 pax records), checksums, and the reader's one
 * member's worth of buffers.
 * Must not: seek, read past the end-of-archive blocks, or trust a size
 * field before checking it against its limit.
 */
#include "tar.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* header field offsets and widths (POSIX ustar) */
enum {
    H_NAME = 0, H_NAME_W = 100, H_MODE = 100, H_UID = 108, H_GID = 116, H_SIZE = 124,
    H_MTIME = 136, H_CHKSUM = 148, H_TYPE = 156, H_MAGIC = 257, H_VERSION = 263,
    H_UNAME = 265, H_GNAME = 297, H_DEVMAJOR = 329, H_DEVMINOR = 337, H_PREFIX = 345,
    H_PREFIX_W = 155
};

ssize_t tar_mem_read(void *ctx, void *buf, size_t n)
{
    tar_mem *m = ctx;
    size_t left = m->len - m->pos;
    if (n > left)
        n = left;
    if (n)
        memcpy(buf, m->data + m->pos, n);
    m->pos += n;
    return (ssize_t)n;
}

struct tar_reader {
    char *shard;
    tar_read_fn fn;
    void *ctx;
    uint64_t max_member;
    uint64_t off;
    int state;          /* 0 reading, 1 ended, -1 failed */
    char *msg;          /* the failure, repeated by later calls */
    unsigned char *data; /* the current member's data */
    size_t data_cap;
    char *name;         /* the current member's name */
    char *pax_path;     /* pending for the next member */
    char *long_name;
    int has_pax_size;
    uint64_t pax_size;
};

tar_reader *tar_reader_new(const char *shard, tar_read_fn fn, void *ctx, uint64_t max_member)
{
    tar_reader *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->shard = strdup(shard ? shard : "(stream)");
    if (!r->shard) {
        free(r);
        return NULL;
    }
    r->fn = fn;
    r->ctx = ctx;
    r->max_member = max_member;
    return r;
}

static void clear_pending(tar_reader *r)
{
    free(r->pax_path);
    free(r->long_name);
    r->pax_path = r->long_name = NULL;
    r->has_pax_size = 0;
    r->pax_size = 0;
}

void tar_reader_free(tar_reader *r)
{
    if (!r)
        return;
    clear_pending(r);
    free(r->shard);
    free(r->msg);
    free(r->data);
    free(r->name);
    free(r);
}

void tar_reader_start_at(tar_reader *r, uint64_t off) { r->off = off; }

uint64_t tar_reader_offset(const tar_reader *r) { return r->off; }

static int copy_msg(const tar_reader *r, char *err, size_t errlen)
{
    return err_fail(err, errlen, "%s", r->msg ? r->msg : "tar: out of memory");
}

/* Fails the reader: "shard S: <message>" in err, and kept for later calls. */
__attribute__((format(printf, 4, 5)))
static int fail(tar_reader *r, char *err, size_t errlen, const char *fmt, ...)
{
    char body[768], full[1024];
    va_list ap;
    va_start(ap, fmt);
    err_vprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    err_printf(full, sizeof full, "shard %s: %s", r->shard, body);
    r->state = -1;
    free(r->msg);
    r->msg = strdup(full);
    return copy_msg(r, err, errlen);
}

/* Reads n bytes: returns how many came (fewer only at the end of the
 * stream), or -1 when the callback failed or misbehaved. */
static ssize_t read_full(tar_reader *r, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = r->fn(r->ctx, (char *)buf + got, n - got);
        if (k < 0 || (size_t)k > n - got)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
        r->off += (uint64_t)k;
    }
    return (ssize_t)got;
}

/* Reads and drops n bytes: returns how many came, or -1. */
static int64_t skip(tar_reader *r, uint64_t n)
{
    unsigned char junk[4096];
    uint64_t done = 0;
    while (done < n) {
        size_t want = n - done < sizeof junk ? (size_t)(n - done) : sizeof junk;
        ssize_t k = read_full(r, junk, want);
        if (k < 0)
            return -1;
        done += (uint64_t)k;
        if ((size_t)k < want)
            break;
    }
    return (int64_t)done;
}

static uint64_t padding(uint64_t size) { return (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK; }

/* An octal field (leading spaces, digits, then NULs or spaces), or GNU's
 * base-256 (first byte's high bit set; negative values refused). */
static int parse_num(const unsigned char *f, size_t w, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] & 0x40)
            return -1; /* negative */
        v = f[0] & 0x3f;
        for (size_t i = 1; i < w; i++) {
            if (v > (UINT64_MAX >> 8))
                return -1;
            v = v << 8 | f[i];
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < w && f[i] == ' ')
        i++;
    for (; i < w && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > (UINT64_MAX >> 3))
            return -1;
        v = v << 3 | (uint64_t)(f[i] - '0');
    }
    for (; i < w; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    *out = v;
    return 0;
}

static int all_zero(const unsigned char *b)
{
    for (int i = 0; i < TAR_BLOCK; i++)
        if (b[i])
            return 0;
    return 1;
}

static char *strndup_(const void *p, size_t n)
{
    size_t len = strnlen(p, n);
    char *s = malloc(len + 1);
    if (s) {
        memcpy(s, p, len);
        s[len] = '\0';
    }
    return s;
}

/* The pax records "LEN KEY=VALUE\n" of p[0..n): path and size kept for the
 * next member. Returns 0, or -1 with the byte where the bad record starts
 * in *at (or -2 when out of memory). */
static int parse_pax(tar_reader *r, const unsigned char *p, size_t n, size_t *at)
{
    size_t pos = 0;
    while (pos < n) {
        *at = pos;
        if (p[pos] == '\0') { /* NUL padding after the last record */
            while (pos < n && p[pos] == '\0')
                pos++;
            if (pos < n)
                return -1;
            break;
        }
        size_t len = 0, i = pos;
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
            if (len > n)
                return -1;
            len = len * 10 + (size_t)(p[i] - '0');
        }
        if (i == pos || i >= n || p[i] != ' ' || len > n - pos || len < i - pos + 3 ||
            p[pos + len - 1] != '\n')
            return -1;
        const unsigned char *key = p + i + 1, *end = p + pos + len - 1;
        const unsigned char *eq = memchr(key, '=', (size_t)(end - key));
        if (!eq || eq == key)
            return -1;
        size_t klen = (size_t)(eq - key), vlen = (size_t)(end - eq - 1);
        const unsigned char *val = eq + 1;
        if (klen == 4 && !memcmp(key, "path", 4)) {
            free(r->pax_path);
            r->pax_path = strndup_(val, vlen);
            if (!r->pax_path)
                return -2;
        } else if (klen == 4 && !memcmp(key, "size", 4)) {
            uint64_t v = 0;
            if (vlen == 0)
                return -1;
            for (size_t k = 0; k < vlen; k++) {
                if (val[k] < '0' || val[k] > '9' || v > (UINT64_MAX - 9) / 10)
                    return -1;
                v = v * 10 + (uint64_t)(val[k] - '0');
            }
            r->has_pax_size = 1;
            r->pax_size = v;
        }
        pos += len;
    }
    return 0;
}

/* Makes room for n bytes of data. */
static int reserve(tar_reader *r, size_t n)
{
    if (n <= r->data_cap)
        return 0;
    unsigned char *d = realloc(r->data, n);
    if (!d)
        return -1;
    r->data = d;
    r->data_cap = n;
    return 0;
}

int tar_reader_next(tar_reader *r, tar_member *m, char *err, size_t errlen)
{
    if (r->state == 1)
        return 0;
    if (r->state == -1)
        return copy_msg(r, err, errlen);
    clear_pending(r);
    uint64_t first = r->off;
    const char *pending = NULL; /* which extension header is waiting for its member */
    for (;;) {
        unsigned char b[TAR_BLOCK];
        uint64_t h = r->off;
        ssize_t got = read_full(r, b, TAR_BLOCK);
        if (got < 0)
            return fail(r, err, errlen, "read error at offset %llu", (unsigned long long)r->off);
        if (got == 0 && pending)
            return fail(r, err, errlen,
                        "truncated at offset %llu: the archive ends after the %s header at offset "
                        "%llu, with no member for it", (unsigned long long)r->off, pending,
                        (unsigned long long)first);
        if (got == 0)
            return fail(r, err, errlen,
                        "truncated at offset %llu: the archive ends without its end-of-archive "
                        "blocks", (unsigned long long)r->off);
        if (got < TAR_BLOCK)
            return fail(r, err, errlen,
                        "truncated at offset %llu: inside the header at offset %llu (%zd of %d "
                        "bytes)", (unsigned long long)r->off, (unsigned long long)h, got, TAR_BLOCK);
        if (all_zero(b)) {
            if (pending)
                return fail(r, err, errlen,
                            "zero block at offset %llu where the member of the %s header at "
                            "offset %llu should be", (unsigned long long)h, pending,
                            (unsigned long long)first);
            got = read_full(r, b, TAR_BLOCK);
            if (got < 0)
                return fail(r, err, errlen, "read error at offset %llu",
                            (unsigned long long)r->off);
            if (got < TAR_BLOCK)
                return fail(r, err, errlen,
                            "truncated at offset %llu: inside the end-of-archive blocks at offset "
                            "%llu", (unsigned long long)r->off, (unsigned long long)h);
            if (!all_zero(b))
                return fail(r, err, errlen,
                            "corrupt archive: a single zero block at offset %llu, then a header "
                            "at offset %llu", (unsigned long long)h,
                            (unsigned long long)(h + TAR_BLOCK));
            r->state = 1;
            return 0;
        }
        uint64_t stored, usum = 0;
        int64_t ssum = 0;
        for (int i = 0; i < TAR_BLOCK; i++) {
            unsigned char c = (i >= H_CHKSUM && i < H_CHKSUM + 8) ? ' ' : b[i];
            usum += c;
            ssum += (signed char)c;
        }
        if (parse_num(b + H_CHKSUM, 8, &stored) < 0)
            return fail(r, err, errlen, "header at offset %llu: the checksum field is not octal",
                        (unsigned long long)h);
        if (stored != usum && (int64_t)stored != ssum)
            return fail(r, err, errlen,
                        "header at offset %llu: checksum mismatch (stored %llo, computed %llo): "
                        "a corrupt archive, or not a tar archive", (unsigned long long)h,
                        (unsigned long long)stored, (unsigned long long)usum);
        if (memcmp(b + H_MAGIC, "ustar", 5))
            return fail(r, err, errlen,
                        "header at offset %llu: no ustar magic (an old or foreign tar format)",
                        (unsigned long long)h);
        uint64_t size;
        if (parse_num(b + H_SIZE, 12, &size) < 0)
            return fail(r, err, errlen, "header at offset %llu: the size field is not a number "
                        "below 2^64",
                        (unsigned long long)h);
        char type = (char)b[H_TYPE];
        if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
            const char *what = type == 'x' ? "pax" : type == 'g' ? "pax global" : "GNU long name";
            if (size > TAR_MAX_META)
                return fail(r, err, errlen,
                            "%s header at offset %llu: %llu bytes, more than the limit of %u",
                            what, (unsigned long long)h, (unsigned long long)size, TAR_MAX_META);
            if (reserve(r, (size_t)size + 1) < 0)
                return fail(r, err, errlen, "out of memory at offset %llu",
                            (unsigned long long)h);
            got = read_full(r, r->data, (size_t)size);
            if (got < 0)
                return fail(r, err, errlen, "read error at offset %llu",
                            (unsigned long long)r->off);
            int64_t pad = skip(r, padding(size));
            if (pad < 0) /* a read error in its padding is one, not a cut */
                return fail(r, err, errlen, "read error at offset %llu",
                            (unsigned long long)r->off);
            if ((uint64_t)got < size || (uint64_t)pad < padding(size))
                return fail(r, err, errlen,
                            "truncated at offset %llu: inside the %s header at offset %llu",
                            (unsigned long long)r->off, what, (unsigned long long)h);
            if (type == 'x') {
                size_t at = 0;
                int rc = parse_pax(r, r->data, (size_t)size, &at);
                if (rc == -2)
                    return fail(r, err, errlen, "out of memory at offset %llu",
                                (unsigned long long)h);
                if (rc < 0)
                    return fail(r, err, errlen,
                                "pax header at offset %llu: malformed record at its byte %zu",
                                (unsigned long long)h, at);
                pending = what;
            } else if (type == 'L') {
                free(r->long_name);
                r->long_name = strndup_(r->data, (size_t)size);
                if (!r->long_name)
                    return fail(r, err, errlen, "out of memory at offset %llu",
                                (unsigned long long)h);
                pending = what;
            }
            continue; /* 'g' (global) and 'K' (long link name): read and ignored */
        }
        if (r->has_pax_size)
            size = r->pax_size;
        free(r->name);
        if (r->pax_path)
            r->name = strdup(r->pax_path);
        else if (r->long_name)
            r->name = strdup(r->long_name);
        else if (!memcmp(b + H_MAGIC, "ustar\0", 6) && b[H_PREFIX]) {
            char *pre = strndup_(b + H_PREFIX, H_PREFIX_W), *nm = strndup_(b + H_NAME, H_NAME_W);
            r->name = pre && nm ? malloc(strlen(pre) + strlen(nm) + 2) : NULL;
            if (r->name)
                sprintf(r->name, "%s/%s", pre, nm);
            free(pre);
            free(nm);
        } else
            r->name = strndup_(b + H_NAME, H_NAME_W);
        if (!r->name)
            return fail(r, err, errlen, "out of memory at offset %llu", (unsigned long long)h);
        if (size > r->max_member)
            return fail(r, err, errlen,
                        "member '%s' at offset %llu: %llu bytes, more than the limit of %llu",
                        r->name, (unsigned long long)h, (unsigned long long)size,
                        (unsigned long long)r->max_member);
        int regular = type == '0' || type == '\0' || type == '7';
        if (regular) {
            if (reserve(r, size ? (size_t)size : 1) < 0)
                return fail(r, err, errlen, "out of memory for member '%s' at offset %llu",
                            r->name, (unsigned long long)h);
            got = read_full(r, r->data, (size_t)size);
        } else {
            int64_t k = skip(r, size);
            got = k < 0 ? -1 : (ssize_t)k;
        }
        if (got < 0)
            return fail(r, err, errlen, "read error at offset %llu", (unsigned long long)r->off);
        if ((uint64_t)got < size)
            return fail(r, err, errlen,
                        "truncated at offset %llu: member '%s' (header at offset %llu) has %zd of "
                        "its %llu bytes", (unsigned long long)r->off, r->name,
                        (unsigned long long)h, got, (unsigned long long)size);
        int64_t pad = skip(r, padding(size));
        if (pad < 0)
            return fail(r, err, errlen, "read error at offset %llu", (unsigned long long)r->off);
        if ((uint64_t)pad < padding(size))
            return fail(r, err, errlen,
                        "truncated at offset %llu: in the padding after member '%s' (header at "
                        "offset %llu)", (unsigned long long)r->off, r->name,
                        (unsigned long long)h);
        if (!regular) { /* directories, links, devices: skipped */
            clear_pending(r);
            pending = NULL;
            first = r->off;
            continue;
        }
        m->name = r->name;
        m->data = size ? r->data : NULL;
        m->size = size;
        m->offset = first;
        return 1;
    }
}

/* ---- the writer ---- */

struct tar_writer {
    tar_write_fn fn;
    void *ctx;
    int failed;
};

tar_writer *tar_writer_new(tar_write_fn fn, void *ctx)
{
    tar_writer *w = calloc(1, sizeof *w);
    if (w) {
        w->fn = fn;
        w->ctx = ctx;
    }
    return w;
}

void tar_writer_free(tar_writer *w) { free(w); }

static int put(tar_writer *w, const void *p, size_t n)
{
    if (w->failed || (n && w->fn(w->ctx, p, n) < 0)) {
        w->failed = 1;
        return -1;
    }
    return 0;
}

static int put_pad(tar_writer *w, uint64_t size)
{
    static const unsigned char zero[TAR_BLOCK];
    return put(w, zero, (size_t)padding(size));
}

/* One ustar header: name[0..nlen) (and prefix[0..plen)), type, size. */
static int put_header(tar_writer *w, const char *prefix, size_t plen, const char *name,
                      size_t nlen, char type, uint64_t size)
{
    unsigned char b[TAR_BLOCK];
    memset(b, 0, sizeof b);
    memcpy(b + H_NAME, name, nlen);
    if (plen)
        memcpy(b + H_PREFIX, prefix, plen);
    snprintf((char *)b + H_MODE, 8, "%07o", TAR_WRITER_MODE);
    snprintf((char *)b + H_UID, 8, "%07o", 0);
    snprintf((char *)b + H_GID, 8, "%07o", 0);
    snprintf((char *)b + H_SIZE, 12, "%011llo", (unsigned long long)size);
    snprintf((char *)b + H_MTIME, 12, "%011llo", (unsigned long long)TAR_WRITER_MTIME);
    b[H_TYPE] = (unsigned char)type;
    memcpy(b + H_MAGIC, "ustar", 6);
    memcpy(b + H_VERSION, "00", 2);
    snprintf((char *)b + H_DEVMAJOR, 8, "%07o", 0);
    snprintf((char *)b + H_DEVMINOR, 8, "%07o", 0);
    memset(b + H_CHKSUM, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += b[i];
    snprintf((char *)b + H_CHKSUM, 8, "%06o", sum); /* then NUL, and the space left */
    b[H_CHKSUM + 7] = ' ';
    return put(w, b, sizeof b);
}

int tar_writer_add(tar_writer *w, const char *name, const void *data, size_t n, char *err,
                   size_t errlen)
{
    size_t len = strlen(name);
    if (len == 0) {
        snprintf(err, errlen, "tar: a member with an empty name");
        return -1;
    }
    if ((uint64_t)n > 077777777777ull) {
        snprintf(err, errlen, "tar: member '%s': %zu bytes, more than ustar's 8 GiB", name, n);
        return -1;
    }
    int rc;
    if (len <= H_NAME_W) {
        rc = put_header(w, NULL, 0, name, len, '0', n);
    } else {
        size_t cut = 0; /* the last '/' that leaves both parts in their fields */
        for (size_t i = 1; i <= H_PREFIX_W && i < len; i++)
            if (name[i] == '/' && len - i - 1 <= H_NAME_W && len - i - 1 > 0)
                cut = i;
        if (cut) {
            rc = put_header(w, name, cut, name + cut + 1, len - cut - 1, '0', n);
        } else { /* pax: "LEN path=NAME\n", LEN counting its own digits */
            size_t body = len + 7, total = body + 1;
            while (snprintf(NULL, 0, "%zu", total) + body != total)
                total++;
            char *rec = malloc(total + 1);
            if (!rec) {
                snprintf(err, errlen, "tar: member '%s': out of memory", name);
                return -1;
            }
            snprintf(rec, total + 1, "%zu path=%s\n", total, name);
            rc = put_header(w, NULL, 0, "././@PaxHeader", 14, 'x', total);
            if (rc == 0)
                rc = put(w, rec, total);
            if (rc == 0)
                rc = put_pad(w, total);
            free(rec);
            if (rc == 0)
                rc = put_header(w, NULL, 0, name, H_NAME_W, '0', n);
        }
    }
    if (rc == 0)
        rc = put(w, data, n);
    if (rc == 0)
        rc = put_pad(w, n);
    if (rc < 0)
        snprintf(err, errlen, "tar: member '%s': write failed", name);
    return rc;
}

int tar_writer_finish(tar_writer *w, char *err, size_t errlen)
{
    static const unsigned char zero[2 * TAR_BLOCK];
    if (put(w, zero, sizeof zero) < 0) {
        snprintf(err, errlen, "tar: writing the end of the archive failed");
        return -1;
    }
    return 0;
}
