/* worker/ckpt/safetensors.c - see safetensors.h. Files are opened and replaced
 * only through lib/file.h (never fopen/open here), so that an input that is
 * not a regular file is refused without blocking and an output is replaced
 * atomically. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "file.h"
#include "util.h"

#define N_DTYPES 4
static const char *const dtype_names[N_DTYPES] = {"F32", "I64", "I32", "BF16"};
static const size_t dtype_sizes[N_DTYPES] = {4, 8, 4, 2};

/* integers above this lose precision as cJSON's doubles */
#define MAX_EXACT 9007199254740992.0

size_t st_dtype_size(st_dtype t) { return dtype_sizes[t]; }
const char *st_dtype_name(st_dtype t) { return dtype_names[t]; }

/* The tensor's byte size, or -1 when it overflows (checked in dimension
 * order, as the reference does). */
static int tensor_bytes(const st_tensor *t, uint64_t *bytes)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)t->shape[i], &n)) return -1;
    return __builtin_mul_overflow(n, (uint64_t)dtype_sizes[t->dtype], bytes) ? -1 : 0;
}

/* ---- writing ---- */

int st_write(const char *path, const st_tensor *tensors, int n, const char *const *meta_kv,
             int n_meta, char *err, size_t errlen)
{
    int rc = -1;
    char *header = NULL;
    file_atomic *a = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root) goto oom;
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        if (!meta) goto oom;
        for (int i = 0; i < n_meta; i++)
            if (!cJSON_AddStringToObject(meta, meta_kv[2 * i], meta_kv[2 * i + 1])) goto oom;
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &tensors[i];
        uint64_t bytes;
        if ((unsigned)t->dtype >= N_DTYPES || t->ndim < 0 || t->ndim > 8 ||
            tensor_bytes(t, &bytes) != 0) {
            err_printf(err, errlen, "%s: tensor '%s': bad dtype or shape", path, t->name);
            goto out;
        }
        /* the reader refuses these; never write them */
        if (strcmp(t->name, "__metadata__") == 0 || cJSON_GetObjectItemCaseSensitive(root, t->name)) {
            err_printf(err, errlen, "%s: tensor '%s' is named twice or is reserved", path,
                       t->name);
            goto out;
        }
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", dtype_names[t->dtype])) goto oom;
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        if (!shape || !offs) goto oom;
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(offset + bytes)));
        offset += bytes;
    }
    header = cJSON_PrintUnformatted(root);
    if (!header) goto oom;
    size_t hlen = strlen(header), padded = (hlen + 7) & ~(size_t)7;

    if (file_atomic_begin(&a, path, err, errlen) != 0) goto out;
    int fd = file_atomic_fd(a);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    if (file_write_all(fd, len8, 8) || file_write_all(fd, header, hlen) ||
        file_write_all(fd, spaces, padded - hlen))
        goto io_error;
    for (int i = 0; i < n; i++) { /* little-endian host assumed (x86-64, aarch64) */
        uint64_t bytes = 0;
        tensor_bytes(&tensors[i], &bytes);
        if (file_write_all(fd, tensors[i].data, (size_t)bytes)) goto io_error;
    }
    rc = file_atomic_commit(a, err, errlen);
    a = NULL;
    goto out;
io_error:
    err_printf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    goto out;
oom:
    err_printf(err, errlen, "%s: out of memory building the header", path);
out:
    file_atomic_abort(a);
    cJSON_Delete(root);
    free(header);
    return rc;
}

/* ---- reading ---- */

typedef struct {
    st_tensor t;         /* first: st_at hands out &entries[i].t */
    uint64_t begin, end; /* data_offsets */
} entry;

struct st_file {
    unsigned char *data; /* the data region */
    entry *entries;
    int n;
    cJSON *meta;         /* detached __metadata__ object, or NULL */
};

void st_close(st_file *f)
{
    if (!f) return;
    if (f->entries)
        for (int i = 0; i < f->n; i++) free((char *)f->entries[i].t.name);
    free(f->entries);
    cJSON_Delete(f->meta);
    free(f->data);
    free(f);
}

/* Reads exactly len bytes. Returns 0, 1 at an early end of file, -1 (errno). */
static int read_exact(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t got = read(fd, p, len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) return 1;
        p += got;
        len -= (size_t)got;
    }
    return 0;
}

/* Strict UTF-8 (as Rust's str::from_utf8: no overlong forms, no surrogates,
 * nothing past U+10FFFF), and, inside JSON strings, no raw control
 * characters and no escaped NUL (which would cut a C string short, so that
 * two different names read the same). Returns the offset of the first bad
 * byte with what is wrong in *why, or -1 when all is well. */
static long check_header_text(const unsigned char *s, size_t n, const char **why)
{
    int in_string = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if (in_string && c < 0x20) {
                *why = "a control character inside a string";
                return (long)i;
            }
            if (c == '"') in_string = !in_string;
            if (in_string && c == '\\' && i + 1 < n) {
                if (s[i + 1] == 'u' && i + 6 <= n && memcmp(s + i + 2, "0000", 4) == 0) {
                    *why = "an escaped NUL (\\u0000) inside a string";
                    return (long)i;
                }
                if (s[i + 1] < 0x80) { /* escapes are ASCII in valid JSON */
                    i += 2;
                    continue;
                }
            }
            i++;
            continue;
        }
        size_t len;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) len = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else {
            *why = "not valid UTF-8";
            return (long)i;
        }
        if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) {
            *why = "not valid UTF-8";
            return (long)i;
        }
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf) {
                *why = "not valid UTF-8";
                return (long)i;
            }
        i += len;
    }
    return -1;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_count(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= MAX_EXACT) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}


/* One tensor's header entry, checked against the data's length. */
static int parse_entry(entry *en, const cJSON *e, uint64_t data_len, const char *path,
                       char *err, size_t errlen)
{
    const char *name = e->string;
    if (!cJSON_IsObject(e)) {
        err_printf(err, errlen, "%s: tensor '%s': its entry is not a JSON object", path, name);
        return -1;
    }
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    const cJSON *field[3] = {NULL, NULL, NULL};
    for (const cJSON *c = e->child; c; c = c->next)
        for (int k = 0; k < 3; k++)
            if (strcmp(c->string, fields[k]) == 0) {
                if (field[k]) {
                    err_printf(err, errlen, "%s: tensor '%s': '%s' is given twice", path, name,
                               fields[k]);
                    return -1;
                }
                field[k] = c;
            }
    for (int k = 0; k < 3; k++)
        if (!field[k]) {
            err_printf(err, errlen, "%s: tensor '%s': malformed header entry: no '%s'", path,
                       name, fields[k]);
            return -1;
        }
    const cJSON *dt = field[0], *shape = field[1], *offs = field[2];
    st_tensor *t = &en->t;

    if (!cJSON_IsString(dt)) {
        err_printf(err, errlen, "%s: tensor '%s': malformed header entry: dtype is not a string",
                   path, name);
        return -1;
    }
    int d = -1;
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dt->valuestring, dtype_names[i]) == 0) d = i;
    if (d < 0) {
        err_printf(err, errlen, "%s: tensor '%s': unsupported dtype %s (this reader knows F32, "
                   "I64, I32, BF16)", path, name, dt->valuestring);
        return -1;
    }
    t->dtype = (st_dtype)d;

    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > 8) {
        err_printf(err, errlen, "%s: tensor '%s': malformed header entry: shape is not an array "
                   "of at most 8 dimensions", path, name);
        return -1;
    }
    t->ndim = 0;
    for (const cJSON *s = shape->child; s; s = s->next) {
        uint64_t v;
        if (json_count(s, &v) != 0) {
            err_printf(err, errlen, "%s: tensor '%s': bad shape: dimension %d is not a "
                       "non-negative integer below 2^53", path, name, t->ndim);
            return -1;
        }
        t->shape[t->ndim++] = (int64_t)v;
    }
    uint64_t bytes;
    if (tensor_bytes(t, &bytes) != 0) {
        err_printf(err, errlen, "%s: tensor '%s': bad shape: its byte size overflows 64 bits",
                   path, name);
        return -1;
    }

    uint64_t b, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        json_count(cJSON_GetArrayItem(offs, 0), &b) != 0 ||
        json_count(cJSON_GetArrayItem(offs, 1), &end) != 0) {
        err_printf(err, errlen, "%s: tensor '%s': data_offsets must be two non-negative "
                   "integers", path, name);
        return -1;
    }
    if (end < b) {
        err_printf(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] end before they "
                   "begin", path, name, (unsigned long long)b, (unsigned long long)end);
        return -1;
    }
    if (end > data_len) {
        err_printf(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] end past the %llu "
                   "bytes of data", path, name, (unsigned long long)b, (unsigned long long)end,
                   (unsigned long long)data_len);
        return -1;
    }
    if (end - b != bytes) {
        char dims[8 * 21 + 1] = "";
        for (int i = 0; i < t->ndim; i++)
            snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", i ? "," : "",
                     (long long)t->shape[i]);
        err_printf(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
                   "its %s shape [%s] needs %llu (the offsets do not fit its shape)", path, name,
                   (unsigned long long)b, (unsigned long long)end,
                   (unsigned long long)(end - b), dtype_names[d], dims,
                   (unsigned long long)bytes);
        return -1;
    }
    en->begin = b;
    en->end = end;
    return 0;
}

/* Every key of the object (the header, or __metadata__ when meta) once:
 * sorted, neighbours differ (O(n log n): a header may hold millions). */
static int check_unique_keys(const cJSON *obj, int meta, const char *path, char *err,
                             size_t errlen)
{
    int count = cJSON_GetArraySize(obj);
    const char **names = malloc(sizeof *names * (size_t)(count ? count : 1));
    if (!names) {
        err_printf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    int k = 0, rc = 0;
    for (const cJSON *e = obj->child; e; e = e->next) names[k++] = e->string;
    qsort(names, (size_t)k, sizeof *names, cmp_name);
    for (int i = 1; i < k; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            if (meta)
                err_printf(err, errlen, "%s: __metadata__ key '%s' is given twice", path,
                           names[i]);
            else
                err_printf(err, errlen, "%s: tensor '%s' is named twice in the header", path,
                           names[i]);
            rc = -1;
            break;
        }
    free(names);
    return rc;
}

/* __metadata__: an object whose values are all strings, each key once. */
static int check_metadata(const cJSON *m, const char *path, char *err, size_t errlen)
{
    if (!cJSON_IsObject(m)) {
        err_printf(err, errlen, "%s: __metadata__ is not a JSON object", path);
        return -1;
    }
    for (const cJSON *v = m->child; v; v = v->next)
        if (!cJSON_IsString(v)) {
            err_printf(err, errlen, "%s: __metadata__ value of '%s' is not a string", path,
                       v->string);
            return -1;
        }
    return check_unique_keys(m, 1, path, err, errlen);
}

/* Sorted by offset, each range starts where the previous ended and the last
 * ends where the data does: no overlap, no hole, nothing outside. */
static int check_coverage(const entry *es, int n, uint64_t data_len, const char *path,
                          char *err, size_t errlen)
{
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (es[i].begin < at) {
            err_printf(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] overlap "
                       "tensor '%s' [%llu, %llu]", path, es[i].t.name,
                       (unsigned long long)es[i].begin, (unsigned long long)es[i].end,
                       es[i - 1].t.name, (unsigned long long)es[i - 1].begin,
                       (unsigned long long)es[i - 1].end);
            return -1;
        }
        if (es[i].begin > at) {
            err_printf(err, errlen, "%s: bytes [%llu, %llu) of the data belong to no tensor "
                       "(a hole before tensor '%s')", path, (unsigned long long)at,
                       (unsigned long long)es[i].begin, es[i].t.name);
            return -1;
        }
        at = es[i].end;
    }
    if (at != data_len) {
        err_printf(err, errlen, "%s: the tensors' data ends at byte %llu of a %llu-byte data "
                   "region: every byte must belong to exactly one tensor", path,
                   (unsigned long long)at, (unsigned long long)data_len);
        return -1;
    }
    return 0;
}

/* The header's checks and its tensors into f (their data not yet
 * pointed at): 0, or -1 with the message in err. */
static int parse_header(st_file *f, const unsigned char *header, uint64_t hlen,
                        uint64_t data_len, const char *path, char *err, size_t errlen)
{
    const char *why = NULL;
    long bad = check_header_text(header, (size_t)hlen, &why);
    if (bad >= 0) {
        err_printf(err, errlen, "%s: header holds %s at byte %ld", path, why, bad);
        return -1;
    }
    if (hlen == 0 || header[0] != '{') {
        err_printf(err, errlen, "%s: header is not a JSON object: it must start with '{'",
                   path);
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)header, (size_t)hlen, &end, 0);
    if (!cJSON_IsObject(root)) {
        err_printf(err, errlen, "%s: header is not a JSON object (invalid JSON at byte %ld)",
                   path, end ? (long)(end - (const char *)header) : 0L);
        goto fail;
    }
    for (const char *p = end; p < (const char *)header + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            err_printf(err, errlen, "%s: header is not a JSON object: text follows it at "
                       "byte %ld", path, (long)(p - (const char *)header));
            goto fail;
        }

    int count = cJSON_GetArraySize(root);
    if (check_unique_keys(root, 0, path, err, errlen) != 0) goto fail;
    f->entries = calloc((size_t)count + 1, sizeof *f->entries);
    if (!f->entries) {
        err_printf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    for (cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (check_metadata(e, path, err, errlen) != 0) goto fail;
            continue;
        }
        entry *en = &f->entries[f->n];
        if (parse_entry(en, e, data_len, path, err, errlen) != 0) goto fail;
        if (!(en->t.name = strdup(e->string))) {
            err_printf(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        f->n++;
    }
    qsort(f->entries, (size_t)f->n, sizeof *f->entries, cmp_entry);
    if (check_coverage(f->entries, f->n, data_len, path, err, errlen) != 0) goto fail;
    f->meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    return -1;
}

/* The header length of a file or buffer of size bytes from its first 8
 * bytes, checked against the limit and the size: 0, or -1 with err. */
static int header_length(const unsigned char len8[8], uint64_t size, uint64_t *hlen,
                         const char *path, char *err, size_t errlen)
{
    *hlen = 0;
    for (int i = 0; i < 8; i++) *hlen |= (uint64_t)len8[i] << (8 * i);
    if (*hlen > ST_MAX_HEADER) {
        err_printf(err, errlen, "%s: header length %llu exceeds the limit of %u bytes", path,
                   (unsigned long long)*hlen, ST_MAX_HEADER);
        return -1;
    }
    if (*hlen > size - 8) {
        err_printf(err, errlen, "%s: header length %llu exceeds the file (%lld bytes)", path,
                   (unsigned long long)*hlen, (long long)size);
        return -1;
    }
    return 0;
}

int st_open(st_file **out, const char *path, char *err, size_t errlen)
{
    unsigned char *header = NULL;
    int fd = -1;
    off_t size = 0;
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) {
        err_printf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    fd = file_open_regular(path, &size, err, errlen);
    if (fd < 0) goto fail;
    if (size < 8) {
        err_printf(err, errlen, "%s: not a safetensors file (%lld bytes, shorter than the "
                   "8-byte header length)", path, (long long)size);
        goto fail;
    }
    unsigned char len8[8];
    int r = read_exact(fd, len8, 8);
    if (r != 0) goto read_error;
    uint64_t hlen;
    if (header_length(len8, (uint64_t)size, &hlen, path, err, errlen) != 0) goto fail;
    uint64_t data_len = (uint64_t)size - 8 - hlen;
    header = malloc((size_t)hlen + 1);
    if (!header) {
        err_printf(err, errlen, "%s: out of memory for a %llu-byte header", path,
                   (unsigned long long)hlen);
        goto fail;
    }
    if ((r = read_exact(fd, header, (size_t)hlen)) != 0) goto read_error;
    if (parse_header(f, header, hlen, data_len, path, err, errlen) != 0) goto fail;

    /* the header holds: only now is the data read */
    f->data = malloc(data_len ? (size_t)data_len : 1);
    if (!f->data) {
        err_printf(err, errlen, "%s: out of memory for %llu bytes of tensor data", path,
                   (unsigned long long)data_len);
        goto fail;
    }
    if ((r = read_exact(fd, f->data, (size_t)data_len)) != 0) goto read_error;
    unsigned char extra;
    if ((r = read_exact(fd, &extra, 1)) != 1) {
        if (r == 0) err_printf(err, errlen, "%s: the file grew while it was read", path);
        else goto read_error;
        goto fail;
    }
    for (int i = 0; i < f->n; i++) f->entries[i].t.data = f->data + f->entries[i].begin;
    free(header);
    close(fd);
    *out = f;
    return 0;
read_error:
    if (r > 0) err_printf(err, errlen, "%s: the file shrank while it was read", path);
    else err_printf(err, errlen, "%s: read failed: %s", path, strerror(errno));
fail:
    if (fd >= 0) close(fd);
    free(header);
    st_close(f);
    return -1;
}

int st_open_mem(st_file **out, void *buf, size_t len, const char *name, char *err,
                size_t errlen)
{
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) {
        free(buf);
        err_printf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    f->data = buf; /* freed with f from now on */
    if (len < 8) {
        err_printf(err, errlen, "%s: not a safetensors file (%zu bytes, shorter than the "
                   "8-byte header length)", name, len);
        goto fail;
    }
    uint64_t hlen;
    if (header_length(buf, len, &hlen, name, err, errlen) != 0) goto fail;
    const unsigned char *data = (const unsigned char *)buf + 8 + hlen;
    if (parse_header(f, (const unsigned char *)buf + 8, hlen, len - 8 - hlen, name, err,
                     errlen) != 0)
        goto fail;
    for (int i = 0; i < f->n; i++) f->entries[i].t.data = data + f->entries[i].begin;
    *out = f;
    return 0;
fail:
    st_close(f);
    return -1;
}

int st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, int i) { return &f->entries[i].t; }

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->entries[i].t.name, name) == 0) return &f->entries[i].t;
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
