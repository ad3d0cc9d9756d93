/* worker/data/wds.c - webdataset sample grouping over the tar reader
 * (wds.h says what makes a sample good or bad).
 *
 * Owns: the key of a member name, the one sample being gathered (its key,
 * image bytes copied out of the tar reader's buffer, label) and the member
 * read ahead that starts the next sample.
 * Must not: read the tar itself (tar.c does), or keep members it does not
 * use.
 */
#include "wds.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wds_reader {
    char *shard;
    tar_reader *tar;
    int ahead;          /* the tar reader's current member starts the next sample */
    tar_member next;
    int done;           /* 1: the shard ended, 2: the stream failed */
    /* the sample being gathered */
    char *key;
    uint64_t offset;
    unsigned char *image;
    size_t image_size, image_cap;
    char image_ext[8];
    int n_images, has_cls, has_json, label_ok, json_label_ok;
    int32_t label, json_label;
    char problem[256];  /* the first fault found, empty when none */
    char exts[256];     /* the extensions seen, for messages */
};

wds_reader *wds_reader_new(const char *shard, tar_read_fn fn, void *ctx, uint64_t max_member)
{
    wds_reader *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->shard = strdup(shard ? shard : "(stream)");
    w->tar = tar_reader_new(shard, fn, ctx, max_member);
    if (!w->shard || !w->tar) {
        wds_reader_free(w);
        return NULL;
    }
    return w;
}

void wds_reader_start_at(wds_reader *w, uint64_t off) { tar_reader_start_at(w->tar, off); }

void wds_reader_free(wds_reader *w)
{
    if (!w)
        return;
    tar_reader_free(w->tar);
    free(w->shard);
    free(w->key);
    free(w->image);
    free(w);
}

/* The length of name's key: up to the first dot of the basename. */
static size_t key_len(const char *name)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    return dot ? (size_t)(dot - name) : strlen(name);
}

static int ext_is(const char *ext, const char *want)
{
    for (; *ext && *want; ext++, want++)
        if (tolower((unsigned char)*ext) != *want)
            return 0;
    return *ext == *want;
}

static void problem(wds_reader *w, const char *fmt, const char *a)
{
    if (!w->problem[0])
        snprintf(w->problem, sizeof w->problem, fmt, a);
}

/* A label in [0, 2^31) from ".cls": decimal, whitespace around it. */
static int parse_cls(const unsigned char *p, size_t n, int32_t *out)
{
    size_t i = 0;
    long long v = 0;
    while (i < n && isspace(p[i]))
        i++;
    if (i < n && p[i] == '+')
        i++;
    size_t d = i;
    for (; i < n && isdigit(p[i]); i++) {
        v = v * 10 + (p[i] - '0');
        if (v > INT32_MAX)
            return -1;
    }
    if (i == d)
        return -1;
    while (i < n && isspace(p[i]))
        i++;
    if (i != n)
        return -1;
    *out = (int32_t)v;
    return 0;
}

/* "label" of a ".json" object: an integer in [0, 2^31). */
static int parse_json(const unsigned char *p, size_t n, int32_t *out)
{
    cJSON *j = cJSON_ParseWithLength((const char *)p, n);
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "label");
    int rc = -1;
    if (cJSON_IsObject(j) && cJSON_IsNumber(l)) {
        double v = l->valuedouble;
        if (v >= 0 && v <= INT32_MAX && v == (double)(int32_t)v) {
            *out = (int32_t)v;
            rc = 0;
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* Adds member m (whose key is the sample's) to the sample. */
static void absorb(wds_reader *w, const tar_member *m)
{
    const char *ext = m->name + key_len(m->name);
    ext = *ext == '.' ? ext + 1 : ext;
    size_t el = strlen(w->exts);
    if (el + strlen(ext) + 3 < sizeof w->exts)
        snprintf(w->exts + el, sizeof w->exts - el, "%s%s", el ? ", " : "", *ext ? ext : "(none)");
    int img = ext_is(ext, "jpg") || ext_is(ext, "jpeg") || ext_is(ext, "png");
    if (img) {
        if (++w->n_images > 1) {
            problem(w, "two images (the second: .%s)", ext);
            return;
        }
        if (m->size > w->image_cap) {
            unsigned char *t = realloc(w->image, (size_t)m->size);
            if (!t) {
                problem(w, "out of memory for its .%s", ext);
                return;
            }
            w->image = t;
            w->image_cap = (size_t)m->size;
        }
        if (m->size)
            memcpy(w->image, m->data, (size_t)m->size);
        w->image_size = (size_t)m->size;
        snprintf(w->image_ext, sizeof w->image_ext, "%s", ext);
    } else if (ext_is(ext, "cls")) {
        if (w->has_cls++) {
            problem(w, "the extension %s given twice", ext);
            return;
        }
        w->label_ok = parse_cls(m->data, (size_t)m->size, &w->label) == 0;
        if (!w->label_ok)
            problem(w, "its .%s is not a decimal integer in [0, 2^31)", ext);
    } else if (ext_is(ext, "json")) {
        if (w->has_json++) {
            problem(w, "the extension %s given twice", ext);
            return;
        }
        w->json_label_ok = parse_json(m->data, (size_t)m->size, &w->json_label) == 0;
    }
}

/* Starts a sample with member m. Returns 0, or -1 when out of memory. */
static int start(wds_reader *w, const tar_member *m)
{
    size_t kl = key_len(m->name);
    free(w->key);
    w->key = malloc(kl + 1);
    if (!w->key)
        return -1;
    memcpy(w->key, m->name, kl);
    w->key[kl] = '\0';
    w->offset = m->offset;
    w->image_size = 0;
    w->image_ext[0] = '\0';
    w->n_images = w->has_cls = w->has_json = w->label_ok = w->json_label_ok = 0;
    w->problem[0] = w->exts[0] = '\0';
    absorb(w, m);
    return 0;
}

/* The gathered sample: WDS_SAMPLE in *s, or WDS_BAD with err. */
static wds_status finish(wds_reader *w, wds_sample *s, char *err, size_t errlen)
{
    if (!w->problem[0]) {
        if (w->n_images == 0 && !w->has_cls && !w->has_json)
            snprintf(w->problem, sizeof w->problem, "no member this reader knows");
        else if (w->n_images == 0)
            snprintf(w->problem, sizeof w->problem, "no image (.jpg, .jpeg or .png)");
        else if (!w->has_cls && !w->json_label_ok)
            snprintf(w->problem, sizeof w->problem,
                     w->has_json ? "no label (its .json has no integer \"label\" in [0, 2^31))"
                                 : "no label (.cls, or .json with \"label\")");
    }
    s->key = w->key; /* a bad sample's too: where it was */
    s->offset = w->offset;
    if (w->problem[0]) {
        snprintf(err, errlen, "shard %s: sample '%s' at offset %llu: %s (members: %s); skipped",
                 w->shard, w->key, (unsigned long long)w->offset, w->problem, w->exts);
        return WDS_BAD;
    }
    s->image_ext = w->image_ext;
    s->image = w->image_size ? w->image : (const unsigned char *)"";
    s->image_size = w->image_size;
    s->label = w->has_cls ? w->label : w->json_label;
    return WDS_SAMPLE;
}

wds_status wds_next(wds_reader *w, wds_sample *s, char *err, size_t errlen)
{
    tar_member m;
    if (w->done == 1)
        return WDS_END;
    if (w->done == 2) { /* failed: the tar reader's own fault, or memory */
        if (tar_reader_next(w->tar, &m, err, errlen) >= 0)
            snprintf(err, errlen, "shard %s: out of memory earlier in the shard", w->shard);
        return WDS_ERROR;
    }
    if (!w->ahead) {
        int rc = tar_reader_next(w->tar, &m, err, errlen);
        if (rc <= 0) {
            w->done = rc < 0 ? 2 : 1;
            return (wds_status)rc;
        }
        w->next = m;
    }
    w->ahead = 0;
    if (start(w, &w->next) < 0) {
        snprintf(err, errlen, "shard %s: out of memory at offset %llu", w->shard,
                 (unsigned long long)w->next.offset);
        w->done = 2;
        return WDS_ERROR;
    }
    for (;;) {
        int rc = tar_reader_next(w->tar, &m, err, errlen);
        if (rc < 0) { /* the sample gathered so far is lost with the stream */
            w->done = 2;
            return WDS_ERROR;
        }
        if (rc == 0) {
            w->done = 1;
            return finish(w, s, err, errlen);
        }
        size_t kl = key_len(m.name);
        if (kl != strlen(w->key) || memcmp(m.name, w->key, kl)) {
            w->next = m;
            w->ahead = 1;
            return finish(w, s, err, errlen);
        }
        absorb(w, &m);
    }
}
