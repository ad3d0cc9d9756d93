/* worker/data/shardwriter.c - webdataset shards from an image folder or
 * Fashion-MNIST IDX files (see shardwriter.h).
 *
 * Owns: the source listing, the permutation, the cutting into shards and
 * the shard sinks (local file, S3). Must not: include the worker outside
 * worker/data, decode images, or hold more than one shard in memory.
 */
#include "shardwriter.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "data.h"
#include "decode.h"
#include "exitcode.h"
#include "file.h"
#include "log.h"
#include "rng.h"
#include "s3.h"
#include "shards.h"
#include "tar.h"
#include "util.h"

/* the most bytes one image file of a folder may have */
#define MAX_IMAGE_BYTES (1ull << 30)
/* a local shard's bytes are written out in pieces of this size */
#define FLUSH_BYTES (4u << 20)
/* directories below a class folder followed at most this deep */
#define MAX_DEPTH 64

/* ---- sizes and patterns ------------------------------------------------ */

int shardwriter_parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s)) return -1;
    uint64_t v = 0;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++) {
        if (v > (UINT64_MAX - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    static const struct {
        const char *suffix;
        uint64_t mul;
    } units[] = {{"", 1},
                 {"k", 1000ull}, {"K", 1000ull}, {"M", 1000000ull}, {"G", 1000000000ull},
                 {"T", 1000000000000ull},
                 {"Ki", 1ull << 10}, {"Mi", 1ull << 20}, {"Gi", 1ull << 30}, {"Ti", 1ull << 40}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].suffix) != 0) continue;
        if (v == 0 || v > UINT64_MAX / units[i].mul) return -1;
        *out = v * units[i].mul;
        return 0;
    }
    return -1;
}

int shardwriter_pattern_parse(shardwriter_pattern *p, const char *pattern, char *err,
                              size_t errlen)
{
    memset(p, 0, sizeof *p);
    int found = 0;
    size_t hn = 0, tn = 0;
    for (const char *c = pattern; *c; c++) {
        char lit = *c;
        if (*c == '{' || *c == '}') {
            err_printf(err, errlen, "--out %s: '%c' is not allowed (data.uri's brace pattern "
                       "could not hold it)", pattern, *c);
            return -1;
        }
        if (*c == '%') {
            if (c[1] == '%') {
                c++; /* a literal '%' */
            } else {
                const char *q = c + 1;
                int width = 0;
                if (*q == '0') {
                    q++;
                    if (!isdigit((unsigned char)*q)) goto bad;
                    while (isdigit((unsigned char)*q) && width <= 18)
                        width = width * 10 + (*q++ - '0');
                    if (width < 1 || width > 18) goto bad;
                }
                if (*q != 'd') goto bad;
                if (found) {
                    err_printf(err, errlen, "--out %s: more than one %%d (one shard number "
                               "only)", pattern);
                    return -1;
                }
                found = 1;
                p->width = width;
                c = q;
                continue;
            }
        }
        char *dst = found ? p->tail : p->head;
        size_t *n = found ? &tn : &hn;
        size_t cap = found ? sizeof p->tail : sizeof p->head;
        if (*n + 1 >= cap) {
            err_printf(err, errlen, "--out %.200s...: too long", pattern);
            return -1;
        }
        dst[(*n)++] = lit;
    }
    if (!found) {
        err_printf(err, errlen, "--out %s: no shard number in the pattern: put %%06d where it "
                   "goes, e.g. train-%%06d.tar", pattern);
        return -1;
    }
    if (strncmp(p->head, "s3://", 5) == 0 && !strchr(p->head + 5, '/')) {
        err_printf(err, errlen, "--out %s: the shard number must be in the key, not the "
                   "bucket", pattern);
        return -1;
    }
    return 0;
bad:
    err_printf(err, errlen, "--out %s: a '%%' must be %%d, %%0Nd (N from 1 to 18) or %%%%",
               pattern);
    return -1;
}

int shardwriter_pattern_name(const shardwriter_pattern *p, long i, char *out, size_t len)
{
    char num[32];
    if (i < 0 || p->width > 18) return -1;
    int n = snprintf(num, sizeof num, "%0*ld", p->width, i);
    if (p->width && n > p->width) return -1;
    return (size_t)snprintf(out, len, "%s%s%s", p->head, num, p->tail) < len ? 0 : -1;
}

int shardwriter_pattern_braces(const shardwriter_pattern *p, long n, char *out, size_t len)
{
    char first[32], last[32];
    if (n < 1 || p->width > 18) return -1;
    snprintf(first, sizeof first, "%0*d", p->width, 0);
    snprintf(last, sizeof last, "%0*ld", p->width, n - 1);
    return (size_t)snprintf(out, len, "%s{%s..%s}%s", p->head, first, last, p->tail) < len ? 0
                                                                                         : -1;
}

/* ---- the source --------------------------------------------------------- */

typedef struct {
    char *rel;   /* the path under SRC */
    char *key;   /* the sample's key */
    char ext[8]; /* "jpg", "jpeg" or "png" */
    int cls;
} item;

typedef struct {
    const char *dir; /* SRC without file:// */
    int is_idx;
    dataset *idx;
    encode_format format;
    int quality;
    /* an image folder */
    char **classes;
    int nclasses;
    item *items;
    size_t nitems, capitems;
    long skipped;
    int skip_bad;     /* shardwriter_options.skip_bad */
    long undecodable; /* images skipped because they could not be decoded */
} source;

static void source_free(source *s)
{
    dataset_free(s->idx);
    for (int i = 0; i < s->nclasses; i++)
        free(s->classes[i]);
    free(s->classes);
    for (size_t i = 0; i < s->nitems; i++) {
        free(s->items[i].rel);
        free(s->items[i].key);
    }
    free(s->items);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in dir ("." and ".." left out); *out (each and the
 * array free()) and *n. 0, or a vj_err with err naming dir. */
static int list_dir(const char *dir, char ***out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        err_printf(err, errlen, "%s: cannot open the directory: %s", dir, strerror(errno));
        return VJ_ERR_DATA;
    }
    char **names = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    int rc = VJ_OK;
    errno = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **g = realloc(names, nc * sizeof *g);
            if (!g) {
                rc = VJ_ERR_OUT_OF_MEMORY;
                break;
            }
            names = g;
            cap = nc;
        }
        if (!(names[cnt] = strdup(e->d_name))) {
            rc = VJ_ERR_OUT_OF_MEMORY;
            break;
        }
        cnt++;
        errno = 0;
    }
    if (rc == VJ_OK && errno) {
        err_printf(err, errlen, "%s: reading the directory failed: %s", dir, strerror(errno));
        rc = VJ_ERR_DATA;
    }
    closedir(d);
    if (rc == VJ_ERR_OUT_OF_MEMORY) err_printf(err, errlen, "%s: out of memory listing it", dir);
    if (rc != VJ_OK) {
        for (size_t i = 0; i < cnt; i++)
            free(names[i]);
        free(names);
        return rc;
    }
    if (cnt) qsort(names, cnt, sizeof *names, cmp_str);
    *out = names;
    *n = cnt;
    return VJ_OK;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* "jpg", "jpeg" or "png" for a name that ends so (any case) and has a
 * stem, else NULL */
static const char *image_ext(const char *name, char lower[8])
{
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return NULL;
    size_t n = strlen(dot + 1);
    if (n < 3 || n > 4) return NULL;
    for (size_t i = 0; i <= n; i++)
        lower[i] = (char)tolower((unsigned char)dot[1 + i]);
    if (strcmp(lower, "jpg") && strcmp(lower, "jpeg") && strcmp(lower, "png")) return NULL;
    return lower;
}

static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    s[la] = '/';
    memcpy(s + la + 1, b, lb + 1);
    return s;
}

typedef struct chain {
    dev_t dev;
    ino_t ino;
    const struct chain *up;
} chain;

/* Every image under SRC/rel (a class folder or below), class cls. */
static int walk(source *s, const char *rel, int cls, int depth, const chain *up, char *err,
                size_t errlen)
{
    char *full = join(s->dir, rel);
    if (!full) {
        err_printf(err, errlen, "out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    char **names;
    size_t n;
    int rc = list_dir(full, &names, &n, err, errlen);
    if (rc) {
        free(full);
        return rc;
    }
    for (size_t i = 0; rc == VJ_OK && i < n; i++) {
        char *r = join(rel, names[i]), *path = join(full, names[i]);
        struct stat st;
        char lower[8];
        if (!r || !path) {
            err_printf(err, errlen, "out of memory");
            rc = VJ_ERR_OUT_OF_MEMORY;
        } else if (stat(path, &st) != 0) {
            err_printf(err, errlen, "%s: %s", path, strerror(errno));
            rc = VJ_ERR_DATA;
        } else if (S_ISDIR(st.st_mode)) {
            int loop = 0;
            for (const chain *c = up; c; c = c->up)
                loop |= c->dev == st.st_dev && c->ino == st.st_ino;
            if (loop || depth >= MAX_DEPTH) {
                err_printf(err, errlen, "%s: %s", path,
                           loop ? "a directory inside itself (a symbolic link loop)"
                                : "directories nested too deep");
                rc = VJ_ERR_DATA;
            } else {
                chain here = {st.st_dev, st.st_ino, up};
                rc = walk(s, r, cls, depth + 1, &here, err, errlen);
            }
        } else if (S_ISREG(st.st_mode) && image_ext(names[i], lower)) {
            if (s->nitems == s->capitems) {
                size_t nc = s->capitems ? s->capitems * 2 : 1024;
                item *g = realloc(s->items, nc * sizeof *g);
                if (g) {
                    s->items = g;
                    s->capitems = nc;
                }
            }
            if (s->nitems == s->capitems) {
                err_printf(err, errlen, "out of memory listing %s", s->dir);
                rc = VJ_ERR_OUT_OF_MEMORY;
            } else {
                item *it = &s->items[s->nitems++];
                *it = (item){.rel = r, .cls = cls};
                snprintf(it->ext, sizeof it->ext, "%s", lower);
                r = NULL;
            }
        } else {
            LOG_DEBUG("shards", "event=skipped path=%s reason=%s", LOGV(path),
                      LOGV(S_ISREG(st.st_mode) ? "not .jpg, .jpeg or .png" : file_kind(st.st_mode)));
            s->skipped++;
        }
        free(r);
        free(path);
    }
    free_names(names, n);
    free(full);
    return rc;
}

/* the key of a file: its path under SRC without the extension, the dots of
 * its stem made '_' */
static char *key_of(const char *rel)
{
    char *k = strdup(rel);
    if (!k) return NULL;
    *strrchr(k, '.') = '\0';
    char *base = strrchr(k, '/');
    for (char *c = base ? base + 1 : k; *c; c++)
        if (*c == '.') *c = '_';
    return k;
}

static int cmp_item(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->cls != y->cls) return x->cls < y->cls ? -1 : 1;
    return strcmp(x->rel, y->rel);
}

static int cmp_item_key(const void *a, const void *b)
{
    return strcmp((*(item *const *)a)->key, (*(item *const *)b)->key);
}

static int folder_load(source *s, char *err, size_t errlen)
{
    char **names;
    size_t n;
    int rc = list_dir(s->dir, &names, &n, err, errlen);
    if (rc) return rc;
    struct stat top;
    stat(s->dir, &top);
    chain root = {top.st_dev, top.st_ino, NULL};
    s->classes = calloc(n ? n : 1, sizeof *s->classes);
    if (!s->classes) {
        free_names(names, n);
        err_printf(err, errlen, "out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; rc == VJ_OK && i < n; i++) {
        char *path = join(s->dir, names[i]);
        struct stat st;
        if (!path) {
            err_printf(err, errlen, "out of memory");
            rc = VJ_ERR_OUT_OF_MEMORY;
        } else if (stat(path, &st) != 0) {
            err_printf(err, errlen, "%s: %s", path, strerror(errno));
            rc = VJ_ERR_DATA;
        } else if (!S_ISDIR(st.st_mode)) {
            LOG_DEBUG("shards", "event=skipped path=%s reason=%s", LOGV(path),
                      LOGV("beside the class folders"));
            s->skipped++;
        } else {
            int cls = s->nclasses;
            s->classes[s->nclasses++] = names[i];
            names[i] = NULL;
            size_t before = s->nitems;
            chain here = {st.st_dev, st.st_ino, &root};
            rc = walk(s, s->classes[cls], cls, 1, &here, err, errlen);
            if (rc == VJ_OK && s->nitems == before) {
                err_printf(err, errlen, "%s: a class folder with no .jpg, .jpeg or .png files",
                           path);
                rc = VJ_ERR_DATA;
            }
        }
        free(path);
    }
    free_names(names, n);
    if (rc) return rc;
    if (s->nitems == 0) {
        err_printf(err, errlen, "%s: an empty data set: no class folders (only %ld other "
                   "files)", s->dir, s->skipped);
        return VJ_ERR_DATA;
    }
    qsort(s->items, s->nitems, sizeof *s->items, cmp_item);
    item **byk = malloc(s->nitems * sizeof *byk);
    if (!byk) {
        err_printf(err, errlen, "out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < s->nitems; i++) {
        if (!(s->items[i].key = key_of(s->items[i].rel))) {
            free(byk);
            err_printf(err, errlen, "out of memory");
            return VJ_ERR_OUT_OF_MEMORY;
        }
        byk[i] = &s->items[i];
    }
    qsort(byk, s->nitems, sizeof *byk, cmp_item_key);
    for (size_t i = 1; i < s->nitems; i++) {
        if (strcmp(byk[i - 1]->key, byk[i]->key) == 0) {
            const char *a = byk[i - 1]->rel, *b = byk[i]->rel;
            if (strcmp(a, b) > 0) {
                const char *t = a;
                a = b;
                b = t;
            }
            err_printf(err, errlen, "%s: %s and %s would both be the sample \"%s\" (webdataset "
                       "keys end at the first dot of the name): rename one", s->dir, a, b,
                       byk[i]->key);
            free(byk);
            return VJ_ERR_DATA;
        }
    }
    free(byk);
    return VJ_OK;
}

/* Whether dir holds a Fashion-MNIST images file of any split. */
static int has_idx(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        const char *m = strstr(e->d_name, "-images-idx3-ubyte");
        found = m && m != e->d_name && (strcmp(m, "-images-idx3-ubyte") == 0 ||
                                        strcmp(m, "-images-idx3-ubyte.gz") == 0);
    }
    closedir(d);
    return found;
}

/* SRC is a directory, and which kind: 0 or a vj_err. */
static int source_kind(source *s, char *err, size_t errlen)
{
    struct stat st;
    if (stat(s->dir, &st) != 0) {
        err_printf(err, errlen, "--from %s: %s", s->dir, strerror(errno));
        return VJ_ERR_DATA;
    }
    if (!S_ISDIR(st.st_mode)) {
        err_printf(err, errlen, "--from %s: is %s, not a directory of IDX files or class "
                   "folders", s->dir, file_kind(st.st_mode));
        return VJ_ERR_DATA;
    }
    if (access(s->dir, R_OK | X_OK) != 0) {
        err_printf(err, errlen, "--from %s: cannot read the directory: %s", s->dir,
                   strerror(errno));
        return VJ_ERR_DATA;
    }
    s->is_idx = has_idx(s->dir);
    return VJ_OK;
}

/* ---- the sinks ---------------------------------------------------------- */

typedef struct {
    shardwriter_pattern pat;
    shards_list *names; /* a brace pattern's names, else NULL (pat's printf names) */
    int s3;
    s3_client *cli;
    const char *endpoint;
    /* the shard being written */
    char name[6000];
    file_atomic *fa;
    buf pending; /* bytes not yet written out (all of them, on S3) */
    uint64_t size;
    long samples;
    int open;
} sink;

static int mkdirs_for(const char *path, char *err, size_t errlen)
{
    char dir[6000];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
            err_printf(err, errlen, "%s: cannot create the directory %s: %s", path, dir,
                       strerror(errno));
            return -1;
        }
        *p = c;
        if (!c) break;
    }
    return 0;
}

static const char *local_path(const char *name)
{
    return strncmp(name, "file://", 7) == 0 ? name + 7 : name;
}

static int io_class(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EIO ? VJ_ERR_IO : VJ_ERR_OUTPUT;
}

/* The name of shard i: the brace pattern's i-th, else pat's; -1 when it
 * does not fit out or pat's width. */
static int sink_name(const sink *k, long i, char *out, size_t len)
{
    if (!k->names) return shardwriter_pattern_name(&k->pat, i, out, len);
    if (i < 0 || (size_t)i >= shards_count(k->names)) return -1;
    return (size_t)snprintf(out, len, "%s", shards_at(k->names, (size_t)i)) < len ? 0 : -1;
}

/* Checks where shard i goes before it is written (a local directory that
 * takes files; S3 credentials once). */
static int sink_check(sink *k, long i, char *err, size_t errlen)
{
    char name[6000];
    if (k->names && sink_name(k, i, name, sizeof name) != 0) {
        err_printf(err, errlen, "--out: shard %ld's name is too long", i);
        return VJ_ERR_OUTPUT;
    }
    if (!k->names && shardwriter_pattern_name(&k->pat, i, name, sizeof name) != 0) {
        err_printf(err, errlen, "--out %s%%0%dd%s: shard %ld has more digits than the "
                   "pattern's %d", k->pat.head, k->pat.width, k->pat.tail, i, k->pat.width);
        return VJ_ERR_OUTPUT;
    }
    if (k->s3) {
        if (k->cli) return VJ_OK;
        s3_options o = {.endpoint = k->endpoint, .ca_bundle = getenv("AWS_CA_BUNDLE")};
        const char *ma = getenv("AWS_MAX_ATTEMPTS");
        if (ma && *ma) {
            char *end;
            long v = strtol(ma, &end, 10);
            if (*end || v < 1 || v > 100) {
                err_printf(err, errlen, "AWS_MAX_ATTEMPTS=%s must be a whole number from 1 to "
                           "100", ma);
                return VJ_ERR_OUTPUT;
            }
            o.max_attempts = (int)v;
        }
        char why[512];
        if (s3_new(&o, &k->cli, why, sizeof why) != S3_OK) {
            err_printf(err, errlen, "--out %s: %s", name, why);
            return VJ_ERR_OUTPUT;
        }
        return VJ_OK;
    }
    const char *path = local_path(name);
    char why[900];
    int removed = 0;
    if (mkdirs_for(path, err, errlen) != 0) return VJ_ERR_OUTPUT;
    if (file_check_output(path, &removed, why, sizeof why) != 0) {
        err_printf(err, errlen, "--out: %s", why);
        return VJ_ERR_OUTPUT;
    }
    if (removed)
        LOG_INFO("shards", "event=removed_temporaries path=%s count=%d reason=\"left by a "
                 "writer that died\"", LOGV(path), removed);
    return VJ_OK;
}

static int sink_open(sink *k, long i, char *err, size_t errlen)
{
    int rc = sink_check(k, i, err, errlen);
    if (rc) return rc;
    sink_name(k, i, k->name, sizeof k->name);
    buf_clear(&k->pending);
    k->size = 0;
    k->samples = 0;
    k->open = 1;
    if (!k->s3 && file_atomic_begin(&k->fa, local_path(k->name), err, errlen) != 0)
        return VJ_ERR_OUTPUT;
    return VJ_OK;
}

/* writes what is pending to the local file */
static int sink_flush(sink *k, char *err, size_t errlen)
{
    if (k->s3 || k->pending.len == 0) return VJ_OK;
    if (file_write_all(file_atomic_fd(k->fa), k->pending.data, k->pending.len) != 0) {
        int e = errno;
        err_printf(err, errlen, "%s: write failed: %s", local_path(k->name), strerror(e));
        return io_class(e);
    }
    buf_clear(&k->pending);
    return VJ_OK;
}

static int sink_append(sink *k, const void *data, size_t n, char *err, size_t errlen)
{
    if (buf_append(&k->pending, data, n) != 0) {
        err_printf(err, errlen, "%s: out of memory for the shard's %zu bytes", k->name,
                   k->pending.len + n);
        return VJ_ERR_OUT_OF_MEMORY;
    }
    k->size += n;
    return k->pending.len >= FLUSH_BYTES ? sink_flush(k, err, errlen) : VJ_OK;
}

static int tar_to_buf(void *ctx, const void *data, size_t n)
{
    return buf_append(ctx, data, n);
}

/* ends the archive and stores the shard */
static int sink_close(sink *k, char *err, size_t errlen)
{
    static const unsigned char end[2 * TAR_BLOCK];
    int rc = sink_append(k, end, sizeof end, err, errlen);
    k->open = 0;
    if (rc == VJ_OK && k->s3) {
        char bucket[256], key[4096], why[1024];
        if (s3_parse_uri(k->name, bucket, sizeof bucket, key, sizeof key, why, sizeof why) != 0) {
            err_printf(err, errlen, "--out %s", why);
            return VJ_ERR_OUTPUT;
        }
        s3_status st = s3_put(k->cli, bucket, key, k->pending.data, k->pending.len, why,
                              sizeof why);
        if (st != S3_OK) {
            err_printf(err, errlen, "%s: %s%s", k->name, why,
                       s3_status_retryable(st) ? " (retryable)" : "");
            return s3_status_retryable(st) ? VJ_ERR_IO : VJ_ERR_OUTPUT;
        }
        buf_clear(&k->pending);
        return VJ_OK;
    }
    if (rc == VJ_OK) rc = sink_flush(k, err, errlen);
    if (rc != VJ_OK) {
        file_atomic_abort(k->fa);
        k->fa = NULL;
        return rc;
    }
    file_atomic *fa = k->fa;
    k->fa = NULL;
    errno = 0;
    if (file_atomic_commit(fa, err, errlen) != 0) return io_class(errno);
    return VJ_OK;
}

static void sink_free(sink *k)
{
    file_atomic_abort(k->fa);
    shards_free(k->names);
    s3_free(k->cli);
    buf_free(&k->pending);
}

/* ---- the run ------------------------------------------------------------ */

/* Sample j of the source as tar members into *out (cleared first). 0, 1 when
 * it is skipped (a folder file that is not JPEG or PNG, or with skip_bad one
 * that cannot be decoded), or a vj_err. */
static int make_sample(source *s, size_t j, buf *out, buf *file, char *err, size_t errlen)
{
    char key[32], name[64], label[16];
    const char *k, *ext;
    const void *img;
    size_t imglen;
    unsigned char *enc = NULL;
    int cls;
    buf_clear(out);
    if (s->is_idx) {
        const dataset *d = s->idx;
        size_t px = (size_t)d->rows * (size_t)d->cols;
        snprintf(key, sizeof key, "%06zu", j);
        if (encode_image(s->format, d->pixels + j * px, d->cols, d->rows, 1, s->quality, key,
                         &enc, &imglen, err, errlen) != 0)
            return VJ_ERR_DATA;
        k = key;
        ext = encode_ext(s->format);
        img = enc;
        cls = d->labels[j];
    } else {
        const item *it = &s->items[j];
        char *path = join(s->dir, it->rel);
        if (!path) {
            err_printf(err, errlen, "out of memory");
            return VJ_ERR_OUT_OF_MEMORY;
        }
        buf_clear(file);
        file->max = MAX_IMAGE_BYTES;
        int bad = file_read(file, path, err, errlen);
        if (!bad && decode_sniff(file->data, file->len) == DECODE_UNKNOWN) {
            LOG_WARN("shards", "event=skipped path=%s reason=%s", LOGV(path),
                     LOGV("neither JPEG nor PNG bytes"));
            free(path);
            return 1;
        }
        if (!bad) {
            /* decoded at its smallest scale: the whole stream is read all
             * the same, so a cut or corrupt one fails here, not in training */
            decode_opts d = {.min_width = 1, .min_height = 1};
            decode_image im;
            char why[1024];
            if (decode_image_rgb(file->data, file->len, path, &d, &im, why, sizeof why) != 0) {
                if (s->skip_bad) {
                    LOG_WARN("shards", "event=skipped path=%s reason=%s", LOGV(path), LOGV(why));
                    free(path);
                    s->undecodable++;
                    return 1;
                }
                err_printf(err, errlen, "%s; --skip-bad leaves out the images that cannot be "
                           "decoded", why);
                free(path);
                return VJ_ERR_DATA;
            }
            decode_image_free(&im);
        }
        free(path);
        if (bad) return file->over_max || !file->failed ? VJ_ERR_DATA : VJ_ERR_OUT_OF_MEMORY;
        k = it->key;
        ext = it->ext;
        img = file->data;
        imglen = file->len;
        cls = it->cls;
    }
    snprintf(label, sizeof label, "%d", cls);
    tar_writer *w = tar_writer_new(tar_to_buf, out);
    char *mname = NULL;
    int rc = VJ_OK;
    size_t klen = strlen(k);
    char *member = klen + 8 <= sizeof name ? name : (mname = malloc(klen + 8));
    if (!w || !member) {
        err_printf(err, errlen, "%s: out of memory", k);
        rc = VJ_ERR_OUT_OF_MEMORY;
    } else {
        /* the members in bytewise order of their extensions: cls < jpeg < jpg < png */
        snprintf(member, klen + 8, "%s.cls", k);
        if (tar_writer_add(w, member, label, strlen(label), err, errlen) == 0) {
            snprintf(member, klen + 8, "%s.%s", k, ext);
            if (tar_writer_add(w, member, img, imglen, err, errlen) != 0) rc = VJ_ERR_DATA;
        } else {
            rc = VJ_ERR_DATA;
        }
        if (rc == VJ_OK && out->failed) {
            err_printf(err, errlen, "%s: out of memory for the sample", k);
            rc = VJ_ERR_OUT_OF_MEMORY;
        }
    }
    tar_writer_free(w);
    free(mname);
    free(enc);
    return rc;
}

/* --out as a brace pattern (shards.h): its names, in order, are the shards;
 * 0, or -1 with err naming it. */
static int brace_out(sink *k, const char *out, char *err, size_t errlen)
{
    if (strchr(out, '%')) {
        err_printf(err, errlen, "--out %s: a brace pattern names the shards itself: no %%d "
                   "beside it (either train-%%06d.tar or train-{000000..000009}.tar)", out);
        return -1;
    }
    char why[1024];
    if (!(k->names = shards_new(out, SHARDS_MAX_DEFAULT, why, sizeof why))) {
        err_printf(err, errlen, "--out: %s", why);
        return -1;
    }
    const char *brace = strchr(out, '{');
    if (k->s3 && (!brace || !memchr(out + 5, '/', (size_t)(brace - out - 5)))) {
        err_printf(err, errlen, "--out %s: the shard number must be in the key, not the "
                   "bucket", out);
        return -1;
    }
    size_t n = shards_count(k->names);
    const char **sorted = malloc(n * sizeof *sorted);
    if (!sorted) {
        err_printf(err, errlen, "--out %s: out of memory for its %zu names", out, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        sorted[i] = shards_at(k->names, i);
    qsort(sorted, n, sizeof *sorted, cmp_str);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            err_printf(err, errlen, "--out %s: names %s twice", out, sorted[i]);
            free(sorted);
            return -1;
        }
    }
    free(sorted);
    return 0;
}

/* uri as an absolute one: s3:// and file:// as they are, a relative path
 * joined to the working directory ("./" dropped) */
static void absolute_uri(const char *uri, char *out, size_t len)
{
    char cwd[4096];
    if (strncmp(uri, "s3://", 5) == 0 || strncmp(uri, "file://", 7) == 0 || uri[0] == '/' ||
        !getcwd(cwd, sizeof cwd)) {
        snprintf(out, len, "%s", uri);
        return;
    }
    while (strncmp(uri, "./", 2) == 0)
        uri += 2;
    if ((size_t)snprintf(out, len, "%s%s", cwd, strcmp(cwd, "/") == 0 ? "" : "/") < len)
        snprintf(out + strlen(out), len - strlen(out), "%s", uri);
}

static void report_shard(FILE *f, const sink *k)
{
    LOG_INFO("shards", "event=shard_written shard=%s samples=%ld bytes=%llu", LOGV(k->name),
             k->samples, (unsigned long long)k->size);
    if (f) {
        fprintf(f, "wrote %s: %ld samples, %llu bytes\n", k->name, k->samples,
                (unsigned long long)k->size);
        fflush(f); /* as it happens, also into a pipe */
    }
}

int shardwriter_run(const shardwriter_options *o, shardwriter_result *res, char *err,
                    size_t errlen)
{
    shardwriter_result r = {0};
    source s = {.skip_bad = o->skip_bad};
    sink k = {0};
    size_t *perm = NULL;
    buf sample = {0}, file = {0};
    int rc;
    long per_shard = o->samples_per_shard > 0 ? o->samples_per_shard
                     : o->shard_bytes ? LONG_MAX : SHARDWRITER_DEFAULT_SAMPLES;
    const char *split = o->split ? o->split : "train";

    if (!o->from || !*o->from || !o->out || !*o->out) {
        err_printf(err, errlen, "--from SRC and --out PATTERN are required");
        return VJ_ERR_USAGE;
    }
    if (o->samples_per_shard < 0) {
        err_printf(err, errlen, "--samples-per-shard %ld: must be at least 1",
                   o->samples_per_shard);
        return VJ_ERR_USAGE;
    }
    if (o->quality && (o->quality < 1 || o->quality > 100)) {
        err_printf(err, errlen, "--quality %d: must be from 1 to 100", o->quality);
        return VJ_ERR_USAGE;
    }
    if (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0) {
        err_printf(err, errlen, "--split %s: must be train or t10k", split);
        return VJ_ERR_USAGE;
    }
    k.s3 = strncmp(o->out, "s3://", 5) == 0;
    if (strchr(o->out, '{') || strchr(o->out, '}')) {
        if (brace_out(&k, o->out, err, errlen) != 0) {
            rc = VJ_ERR_USAGE;
            goto out;
        }
        if (o->samples_per_shard > 0 || o->shard_bytes) {
            err_printf(err, errlen, "--out %s names its %zu shards, so --samples-per-shard and "
                       "--shard-bytes do not go with it (with %%06d in --out they set the "
                       "number of shards)", o->out, shards_count(k.names));
            rc = VJ_ERR_USAGE;
            goto out;
        }
    } else if (shardwriter_pattern_parse(&k.pat, o->out, err, errlen) != 0) {
        return VJ_ERR_USAGE;
    }
    k.endpoint = o->endpoint;

    s.dir = local_path(o->from);
    s.format = o->format;
    s.quality = o->quality ? o->quality : SHARDWRITER_DEFAULT_QUALITY;
    if ((rc = source_kind(&s, err, errlen)) != VJ_OK) goto out;
    if (!s.is_idx && o->idx_options_given) {
        err_printf(err, errlen, "--from %s is an image folder (no IDX files): --format, "
                   "--quality and --split are for IDX files only (folder images are copied "
                   "as they are)", s.dir);
        rc = VJ_ERR_USAGE;
        goto out;
    }
    if ((rc = sink_check(&k, 0, err, errlen)) != VJ_OK) goto out;

    size_t n;
    if (s.is_idx) {
        if ((rc = dataset_load_idx(&s.idx, s.dir, split, 256, err, errlen)) != VJ_OK) goto out;
        n = (size_t)s.idx->n;
        for (size_t i = 0; i < n; i++)
            if (s.idx->labels[i] + 1 > r.classes) r.classes = s.idx->labels[i] + 1;
        if (n == 0) {
            err_printf(err, errlen, "%s: an empty data set: no images", s.idx->images_path);
            rc = VJ_ERR_DATA;
            goto out;
        }
        LOG_INFO("shards", "event=source kind=idx images=%s samples=%zu format=%s quality=%d",
                 LOGV(s.idx->images_path), n, LOGV(encode_ext(s.format)), s.quality);
    } else {
        if ((rc = folder_load(&s, err, errlen)) != VJ_OK) goto out;
        n = s.nitems;
        r.classes = s.nclasses;
        LOG_INFO("shards", "event=source kind=folder dir=%s samples=%zu classes=%d skipped=%ld",
                 LOGV(s.dir), n, s.nclasses, s.skipped);
    }
    r.skipped = s.skipped;
    size_t nout = k.names ? shards_count(k.names) : 0;
    if (nout > n) {
        err_printf(err, errlen, "--out %s names %zu shards but --from %s has %zu samples: "
                   "name at most %zu", o->out, nout, s.dir, n, n);
        rc = VJ_ERR_USAGE;
        goto out;
    }

    if (!(perm = malloc(n * sizeof *perm))) {
        err_printf(err, errlen, "out of memory for %zu samples", n);
        rc = VJ_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    if (!o->no_shuffle) {
        rng_state g;
        rng_seed(&g, o->seed, SHARDWRITER_STREAM, (uint64_t)n);
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)rng_below(&g, (uint64_t)i + 1);
            size_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }

    for (size_t i = 0; i < n; i++) {
        int got = make_sample(&s, perm[i], &sample, &file, err, errlen);
        if (got == 1) {
            r.skipped++;
            r.undecodable = s.undecodable;
            continue;
        }
        if ((rc = got) != VJ_OK) goto out;
        /* a brace pattern's N shards: sample i of n goes to shard i * N / n,
         * so that their sizes differ by one at most */
        long dest = nout ? (long)((uint64_t)i * nout / n) : -1;
        if (k.open && (nout ? dest != r.shards :
                       k.samples >= per_shard ||
                       (o->shard_bytes && k.size + sample.len + 2 * TAR_BLOCK > o->shard_bytes))) {
            if ((rc = sink_close(&k, err, errlen)) != VJ_OK) goto out;
            report_shard(o->report, &k);
            r.bytes += k.size;
            r.shards++;
        }
        if (!k.open && nout && dest != r.shards) break; /* shard r.shards would be empty */
        if (!k.open && (rc = sink_open(&k, r.shards, err, errlen)) != VJ_OK) goto out;
        if ((rc = sink_append(&k, sample.data, sample.len, err, errlen)) != VJ_OK) goto out;
        k.samples++;
        r.samples++;
    }
    if (r.samples == 0) {
        err_printf(err, errlen, "--from %s: an empty data set: none of its %zu image files is "
                   "a JPEG or PNG", s.dir, n);
        rc = VJ_ERR_DATA;
        goto out;
    }
    if (k.open) {
        if ((rc = sink_close(&k, err, errlen)) != VJ_OK) goto out;
        report_shard(o->report, &k);
        r.bytes += k.size;
        r.shards++;
    }
    if (nout && (size_t)r.shards != nout) {
        char name[6000];
        sink_name(&k, r.shards, name, sizeof name);
        err_printf(err, errlen, "--out %s: %s would hold no samples (the files dealt to it "
                   "were all skipped, not JPEG or PNG bytes); name fewer shards", o->out, name);
        rc = VJ_ERR_DATA;
        goto out;
    }
    char uri[sizeof r.data_uri];
    if (nout)
        snprintf(uri, sizeof uri, "%s", o->out);
    else
        shardwriter_pattern_braces(&k.pat, r.shards, uri, sizeof uri);
    absolute_uri(uri, r.data_uri, sizeof r.data_uri);
    LOG_INFO("shards", "event=done shards=%ld samples=%ld bytes=%llu skipped=%ld uri=%s",
             r.shards, r.samples, (unsigned long long)r.bytes, r.skipped, LOGV(r.data_uri));
    if (o->report) {
        fprintf(o->report, "total: %ld shards, %ld samples, %llu bytes; %ld files skipped",
                r.shards, r.samples, (unsigned long long)r.bytes, r.skipped);
        if (r.undecodable)
            fprintf(o->report, " (%ld could not be decoded)", r.undecodable);
        fputc('\n', o->report);
        fprintf(o->report, "data.format: webdataset\ndata.uri: %s\nmodel.numClasses: %d\n",
                r.data_uri, r.classes);
        if (!s.is_idx) {
            fprintf(o->report, "classes:\n");
            for (int c = 0; c < s.nclasses; c++)
                fprintf(o->report, "  %d: %s\n", c, s.classes[c]);
        }
    }
    rc = VJ_OK;
out:
    if (k.open && !k.s3) {
        file_atomic_abort(k.fa);
        k.fa = NULL;
    }
    if (res) *res = r;
    sink_free(&k);
    source_free(&s);
    free(perm);
    buf_free(&sample);
    buf_free(&file);
    return rc;
}
