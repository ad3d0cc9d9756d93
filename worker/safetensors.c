/* worker/safetensors.c - see safetensors.h. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const dtype_names[] = {"F32", "I64", "I32", "BF16"};
static const size_t dtype_sizes[] = {4, 8, 4, 2};

size_t st_dtype_size(st_dtype t) { return dtype_sizes[t]; }

static size_t numel(const st_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int st_write(const char *path, const st_tensor *tensors, int n, const char *const *meta_kv,
             int n_meta, char *err, size_t errlen)
{
    int rc = -1, fd = -1;
    char *header = NULL;
    char tmp[4096];
    cJSON *root = cJSON_CreateObject();
    if (!root) goto oom;
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        if (!meta) goto oom;
        for (int i = 0; i < n_meta; i++)
            if (!cJSON_AddStringToObject(meta, meta_kv[2 * i], meta_kv[2 * i + 1])) goto oom;
    }
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &tensors[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", dtype_names[t->dtype])) goto oom;
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        if (!shape || !offs) goto oom;
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        size_t bytes = numel(t) * dtype_sizes[t->dtype];
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(offset + bytes)));
        offset += bytes;
    }
    header = cJSON_PrintUnformatted(root);
    if (!header) goto oom;
    size_t hlen = strlen(header), padded = (hlen + 7) & ~(size_t)7;

    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    if (write_all(fd, len8, 8) || write_all(fd, header, hlen) ||
        write_all(fd, spaces, padded - hlen))
        goto io_error;
    for (int i = 0; i < n; i++) /* little-endian host assumed (x86-64, aarch64) */
        if (write_all(fd, tensors[i].data, numel(&tensors[i]) * dtype_sizes[tensors[i].dtype]))
            goto io_error;
    if (fsync(fd) != 0) goto io_error;
    if (close(fd) != 0) {
        fd = -1;
        goto io_error;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    rc = 0;
    goto out;
io_error:
    snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
    fd = -1;
    unlink(tmp);
    goto out;
oom:
    snprintf(err, errlen, "%s: out of memory building the header", path);
out:
    cJSON_Delete(root);
    free(header);
    return rc;
}

struct st_file {
    unsigned char *buf; /* the whole file */
    size_t size;
    st_tensor *tensors;
    int n;
    cJSON *meta;        /* detached __metadata__ object, or NULL */
};

void st_close(st_file *f)
{
    if (!f) return;
    if (f->tensors)
        for (int i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    cJSON_Delete(f->meta);
    free(f->buf);
    free(f);
}

static int cmp_offset(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    return (x->data > y->data) - (x->data < y->data);
}

int st_open(st_file **out, const char *path, char *err, size_t errlen)
{
    cJSON *root = NULL;
    st_file *f = calloc(1, sizeof *f);
    FILE *fp = NULL;
    if (!f) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (fseek(fp, 0, SEEK_END) != 0) goto read_error;
    long size = ftell(fp);
    if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) goto read_error;
    f->size = (size_t)size;
    f->buf = malloc(f->size ? f->size : 1);
    if (!f->buf) {
        snprintf(err, errlen, "%s: out of memory for %ld bytes", path, size);
        goto fail;
    }
    if (fread(f->buf, 1, f->size, fp) != f->size) goto read_error;
    fclose(fp);
    fp = NULL;
    if (f->size < 8) {
        snprintf(err, errlen, "%s: not a safetensors file (%zu bytes)", path, f->size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)f->buf[i] << (8 * i);
    if (hlen > f->size - 8) {
        snprintf(err, errlen, "%s: header length %llu exceeds the file", path,
                 (unsigned long long)hlen);
        goto fail;
    }
    root = cJSON_ParseWithLength((const char *)f->buf + 8, (size_t)hlen);
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: header is not a JSON object", path);
        goto fail;
    }
    const unsigned char *data = f->buf + 8 + hlen;
    size_t data_len = f->size - 8 - (size_t)hlen;
    int count = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)count + 1, sizeof *f->tensors);
    if (!f->tensors) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    for (cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        st_tensor *t = &f->tensors[f->n];
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
            cJSON_GetArraySize(offs) != 2 || cJSON_GetArraySize(shape) > 8) {
            snprintf(err, errlen, "%s: tensor '%s': malformed header entry", path, e->string);
            goto fail;
        }
        int d = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(dt->valuestring, dtype_names[i]) == 0) d = i;
        if (d < 0) {
            snprintf(err, errlen, "%s: tensor '%s': unsupported dtype %s", path, e->string,
                     dt->valuestring);
            goto fail;
        }
        t->dtype = (st_dtype)d;
        t->ndim = 0;
        double elems = 1;
        for (cJSON *s = shape->child; s; s = s->next) {
            /* integral, and small enough that the element count cannot wrap */
            if (!cJSON_IsNumber(s) || s->valuedouble < 0 || s->valuedouble > 9007199254740992.0 ||
                s->valuedouble != (double)(int64_t)s->valuedouble) {
                snprintf(err, errlen, "%s: tensor '%s': bad shape", path, e->string);
                goto fail;
            }
            t->shape[t->ndim++] = (int64_t)s->valuedouble;
            elems *= s->valuedouble;
        }
        if (elems * (double)dtype_sizes[t->dtype] > (double)data_len) {
            snprintf(err, errlen, "%s: tensor '%s': shape larger than the file", path, e->string);
            goto fail;
        }
        const cJSON *ob = cJSON_GetArrayItem(offs, 0), *oe = cJSON_GetArrayItem(offs, 1);
        if (!cJSON_IsNumber(ob) || !cJSON_IsNumber(oe) ||
            ob->valuedouble != (double)(int64_t)ob->valuedouble ||
            oe->valuedouble != (double)(int64_t)oe->valuedouble) {
            snprintf(err, errlen, "%s: tensor '%s': data_offsets must be integers", path, e->string);
            goto fail;
        }
        double b = ob->valuedouble, en = oe->valuedouble;
        if (b < 0 || en < b || en > (double)data_len ||
            (size_t)(en - b) != numel(t) * dtype_sizes[t->dtype]) {
            snprintf(err, errlen, "%s: tensor '%s': data_offsets [%.0f, %.0f] do not fit its "
                     "shape or the file (%zu data bytes)", path, e->string, b, en, data_len);
            goto fail;
        }
        t->data = data + (size_t)b;
        t->name = strdup(e->string);
        if (!t->name) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        f->n++;
    }
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_offset);
    f->meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
    cJSON_Delete(root);
    *out = f;
    return 0;
read_error:
    snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno));
fail:
    if (fp) fclose(fp);
    cJSON_Delete(root);
    st_close(f);
    return -1;
}

int st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, int i) { return &f->tensors[i]; }

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
