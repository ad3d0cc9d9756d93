/* worker/data/loader_index.c - see loader.h: the data set's index.
 *
 * Owns: what the data set is (ld_index: the shards of a brace pattern, a
 * single .tar or a prefix; or the files of an ImageFolder with their
 * labels and class names), the scan that counts each unit's samples on
 * threads and checks their labels, the counts the ranks' scans add up to,
 * and the order of the units in an epoch (the per-epoch permutation, the
 * split over ranks, each rank's samples in the epoch: loader_index.h).
 * Must not: decode an image, keep a stream's position, or run after the
 * scan: the shuffle buffer, the reader and decode threads and the position
 * a checkpoint saves are the pipeline's (loader.c).
 */
#define _DEFAULT_SOURCE /* strcasecmp, DT_* */
#include "loader_index.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "exitcode.h"
#include "log.h"
#include "rng.h"
#include "shards.h"
#include "source.h"
#include "wds.h"

#define MAX_MEMBER_DEFAULT (256u << 20)

/* ---- the listing ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int push_name(char ***v, size_t *n, size_t *cap, char *s)
{
    if (!s) return -1;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        char **nv = realloc(*v, c * sizeof *nv);
        if (!nv) {
            free(s);
            return -1;
        }
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = s;
    return 0;
}

static int image_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

/* Sorted names of the entries of dir that are directories (want_dir) or
 * regular files; NULL with err on an unreadable directory. */
static char **list_dir(const char *dir, int want_dir, size_t *n, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    *n = 0;
    if (!d) {
        snprintf(err, errlen, "%s: cannot read the folder: %s", dir, strerror(errno));
        return NULL;
    }
    char **v = NULL;
    size_t cap = 0;
    struct dirent *e;
    int fail = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0) continue;
        if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) continue;
        if (push_name(&v, n, &cap, strdup(e->d_name))) {
            fail = 1;
            break;
        }
    }
    closedir(d);
    if (fail) {
        for (size_t i = 0; i < *n; i++) free(v[i]);
        free(v);
        snprintf(err, errlen, "%s: out of memory listing the folder", dir);
        return NULL;
    }
    if (*n) qsort(v, *n, sizeof *v, cmp_str);
    if (!v) v = calloc(1, sizeof *v); /* an empty list, not a failure */
    return v;
}

/* Adds the images under dir (and its subfolders, as torchvision's
 * ImageFolder walks them, in bytewise order) with label c. */
static int add_images(ld_index *ix, const char *dir, int c, size_t *cap, size_t *lcap,
                      size_t *skipped, int depth, char *err, size_t errlen)
{
    if (depth > 32) {
        snprintf(err, errlen, "%s: folders nested more than 32 deep (a link loop?)", dir);
        return VJ_ERR_DATA;
    }
    size_t nf = 0, nd = 0;
    char **files = list_dir(dir, 0, &nf, err, errlen);
    if (!files) return VJ_ERR_DATA;
    char **dirs = list_dir(dir, 1, &nd, err, errlen);
    int rc = dirs ? 0 : VJ_ERR_DATA;
    for (size_t f = 0; rc == 0 && f < nf; f++) {
        if (!image_ext(files[f])) {
            (*skipped)++;
            continue;
        }
        char path[8192];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, files[f]) >= sizeof path) {
            snprintf(err, errlen, "%s: a file name makes a path too long", dir);
            rc = VJ_ERR_DATA;
            break;
        }
        if (push_name(&ix->units, &ix->n, cap, strdup(path))) {
            rc = VJ_ERR_OUT_OF_MEMORY;
            break;
        }
        if (ix->n > *lcap) {
            *lcap = *cap;
            int *nl = realloc(ix->labels, *lcap * sizeof *nl);
            if (!nl) {
                rc = VJ_ERR_OUT_OF_MEMORY;
                break;
            }
            ix->labels = nl;
        }
        ix->labels[ix->n - 1] = c;
    }
    if (rc == VJ_ERR_OUT_OF_MEMORY)
        snprintf(err, errlen, "%s: out of memory listing the images", dir);
    for (size_t k = 0; rc == 0 && k < nd; k++) {
        char sub[8192];
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", dir, dirs[k]) >= sizeof sub) {
            snprintf(err, errlen, "%s: a folder name makes a path too long", dir);
            rc = VJ_ERR_DATA;
            break;
        }
        rc = add_images(ix, sub, c, cap, lcap, skipped, depth + 1, err, errlen);
    }
    for (size_t f = 0; f < nf; f++) free(files[f]);
    free(files);
    for (size_t k = 0; dirs && k < nd; k++) free(dirs[k]);
    free(dirs);
    return rc;
}

static int index_imagefolder(ld_index *ix, const char *root, char *err, size_t errlen)
{
    size_t nc = 0;
    char **classes = list_dir(root, 1, &nc, err, errlen);
    if (!classes) return VJ_ERR_DATA;
    ix->classes = classes;
    ix->n_classes = (int)nc;
    if (nc == 0) {
        snprintf(err, errlen, "%s=%s: no class folders (an ImageFolder is root/<class>/<image>)",
                 ix->key, root);
        return VJ_ERR_DATA;
    }
    if ((int)nc > ix->num_classes) {
        snprintf(err, errlen, "%s=%s: %zu class folders (the last, \"%s\", is label %zu) but "
                 "model.numClasses=%d", ix->key, root, nc, classes[nc - 1], nc - 1,
                 ix->num_classes);
        return VJ_ERR_DATA;
    }
    size_t cap = 0, lcap = 0, skipped = 0;
    for (size_t c = 0; c < nc; c++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", root, classes[c]);
        size_t before = ix->n;
        int rc = add_images(ix, dir, (int)c, &cap, &lcap, &skipped, 0, err, errlen);
        if (rc) return rc;
        if (ix->n == before) {
            snprintf(err, errlen, "%s: class folder \"%s\" holds no .jpg, .jpeg or .png file",
                     dir, classes[c]);
            return VJ_ERR_DATA;
        }
    }
    if (skipped)
        LOG_WARN("data", "event=files_skipped root=%s count=%zu reason=%s", LOGV(root), skipped,
                 LOGV("not .jpg, .jpeg or .png"));
    return 0;
}

static int index_webdataset(ld_index *ix, const char *uri, char *err, size_t errlen)
{
    if (strchr(uri, '{') || strchr(uri, '}')) {
        char why[1024];
        shards_list *l = shards_new(uri, SHARDS_MAX_DEFAULT, why, sizeof why);
        if (!l) {
            snprintf(err, errlen, "%s: %s", ix->key, why);
            return VJ_ERR_CONFIG;
        }
        size_t cap = 0;
        for (size_t i = 0; i < shards_count(l); i++)
            if (push_name(&ix->units, &ix->n, &cap, strdup(shards_at(l, i)))) {
                shards_free(l);
                snprintf(err, errlen, "%s: out of memory", ix->key);
                return VJ_ERR_OUT_OF_MEMORY;
            }
        shards_free(l);
        return 0;
    }
    size_t len = strlen(uri);
    if (len > 4 && !strcmp(uri + len - 4, ".tar")) { /* one shard */
        ix->units = malloc(sizeof *ix->units);
        if (!ix->units || !(ix->units[0] = strdup(uri))) {
            snprintf(err, errlen, "%s: out of memory", ix->key);
            return VJ_ERR_OUT_OF_MEMORY;
        }
        ix->n = 1;
        return 0;
    }
    src_client *c = NULL;
    char why[1024];
    if (src_client_new(&c, ix->endpoint, 0, 0, why, sizeof why)) {
        snprintf(err, errlen, "%s=%s: %s", ix->key, uri, why);
        return VJ_ERR_DATA;
    }
    int rc = src_list(c, uri, ".tar", &ix->units, &ix->n, why, sizeof why);
    src_client_free(c);
    if (rc) {
        snprintf(err, errlen, "%s=%s: %s", ix->key, uri, why);
        return VJ_ERR_DATA;
    }
    if (ix->n == 0) {
        snprintf(err, errlen, "%s=%s: no .tar shards under this prefix (give a brace pattern "
                 "such as train-{000000..000099}.tar, or the prefix that holds the shards)",
                 ix->key, uri);
        return VJ_ERR_DATA;
    }
    return 0;
}

int ld_index_new(ld_index **out, const ld_index_options *o, char *err, size_t errlen)
{
    *out = NULL;
    ld_index *ix = calloc(1, sizeof *ix);
    if (!ix) {
        snprintf(err, errlen, "out of memory for the data index");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    ix->kind = o->kind;
    snprintf(ix->key, sizeof ix->key, "%s", o->key ? o->key : "data.uri");
    ix->endpoint = strdup(o->endpoint ? o->endpoint : "");
    ix->num_classes = o->num_classes;
    ix->max_member = o->max_member ? o->max_member : MAX_MEMBER_DEFAULT;
    ix->eval = o->eval;
    int rc;
    if (!ix->endpoint) {
        snprintf(err, errlen, "out of memory for the data index");
        rc = VJ_ERR_OUT_OF_MEMORY;
    } else if (o->kind == LD_IMAGEFOLDER) {
        const char *root = o->uri;
        if (!strncmp(root, "file://", 7)) root += 7;
        if (!strncmp(o->uri, "s3://", 5)) {
            snprintf(err, errlen, "%s=%s: data.format=imagefolder reads a local folder or a "
                     "mounted volume; for S3 write webdataset shards (vitjob-worker shards)",
                     ix->key, o->uri);
            rc = VJ_ERR_CONFIG;
        } else {
            rc = index_imagefolder(ix, root, err, errlen);
        }
    } else {
        rc = index_webdataset(ix, o->uri, err, errlen);
    }
    if (rc == 0 && !(ix->counts = calloc(ix->n ? ix->n : 1, sizeof *ix->counts))) {
        snprintf(err, errlen, "out of memory for the data index");
        rc = VJ_ERR_OUT_OF_MEMORY;
    }
    if (rc) {
        ld_index_free(ix);
        return rc;
    }
    *out = ix;
    return 0;
}

void ld_index_free(ld_index *ix)
{
    if (!ix) return;
    for (size_t i = 0; i < ix->n; i++) free(ix->units[i]);
    free(ix->units);
    for (int i = 0; i < ix->n_classes; i++) free(ix->classes[i]);
    free(ix->classes);
    free(ix->labels);
    free(ix->counts);
    free(ix->endpoint);
    free(ix);
}

size_t ld_index_units(const ld_index *ix) { return ix->n; }
const char *ld_index_unit(const ld_index *ix, size_t i) { return ix->units[i]; }
uint64_t ld_index_samples(const ld_index *ix) { return ix->total; }

const char *const *ld_index_classes(const ld_index *ix, int *n)
{
    *n = ix->n_classes;
    return ix->kind == LD_IMAGEFOLDER ? (const char *const *)ix->classes : NULL;
}

int ld_index_set_counts(ld_index *ix, const double *counts, char *err, size_t errlen)
{
    ix->total = 0;
    for (size_t i = 0; i < ix->n; i++) {
        ix->counts[i] = counts[i];
        ix->total += (uint64_t)counts[i];
    }
    if (ix->total == 0) {
        snprintf(err, errlen, "%s: the data set is empty (%zu %s, no samples)", ix->key, ix->n,
                 ix->kind == LD_WEBDATASET ? "shards" : "files");
        return VJ_ERR_DATA;
    }
    return 0;
}

/* ---- the scan ---- */

/* The scan of one shard: its samples counted, its labels checked. */
static int scan_shard(const ld_index *ix, src_client *c, size_t i, double *count, char *err,
                      size_t errlen)
{
    const char *uri = ix->units[i];
    src_stream *s = NULL;
    char why[640];
    if (src_open(c, uri, 0, &s, why, sizeof why)) {
        snprintf(err, errlen, "%s: shard %zu of %zu: %s", ix->key, i, ix->n, why);
        return VJ_ERR_DATA;
    }
    wds_reader *w = wds_reader_new(uri, src_read, s, ix->max_member);
    if (!w) {
        src_close(s);
        snprintf(err, errlen, "%s: out of memory", uri);
        return VJ_ERR_OUT_OF_MEMORY;
    }
    int rc = 0;
    double n = 0;
    for (;;) {
        wds_sample smp;
        wds_status st = wds_next(w, &smp, why, sizeof why);
        if (st == WDS_END) break;
        if (st == WDS_ERROR) {
            snprintf(err, errlen, "%s", why);
            rc = VJ_ERR_DATA;
            break;
        }
        if (st == WDS_SAMPLE && smp.label >= ix->num_classes) {
            snprintf(err, errlen, "%s: sample \"%s\" (byte %llu): label %d is not below "
                     "model.numClasses=%d", uri, smp.key, (unsigned long long)smp.offset,
                     (int)smp.label, ix->num_classes);
            rc = VJ_ERR_DATA;
            break;
        }
        n++; /* a bad sample is counted too: it holds a place in the stream */
    }
    wds_reader_free(w);
    src_close(s);
    *count = n;
    return rc;
}

typedef struct {
    ld_index *ix;
    src_client *c;
    int rank, world;
    double *counts;
    pthread_mutex_t mu;
    size_t next;
    size_t err_unit; /* the lowest failing unit, so the message does not depend on timing */
    int rc;
    char err[1024];
} scan_job;

static void *scan_thread(void *arg)
{
    scan_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t i = j->next;
        while (i < j->ix->n && (int)(i % (size_t)j->world) != j->rank) i++;
        j->next = i + 1;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->ix->n) return NULL;
        char why[1024];
        double n = 0;
        int rc = scan_shard(j->ix, j->c, i, &n, why, sizeof why);
        pthread_mutex_lock(&j->mu);
        if (rc && (j->rc == 0 || i < j->err_unit)) {
            j->rc = rc;
            j->err_unit = i;
            snprintf(j->err, sizeof j->err, "%s", why);
        }
        j->counts[i] = n;
        pthread_mutex_unlock(&j->mu);
    }
}

int ld_index_scan(ld_index *ix, int rank, int world, int threads, double *counts, char *err,
                  size_t errlen)
{
    if (ix->kind == LD_IMAGEFOLDER) {
        for (size_t i = (size_t)rank; i < ix->n; i += (size_t)world) counts[i] = 1;
        return 0;
    }
    if (!ix->eval && ix->n < (size_t)world) {
        snprintf(err, errlen, "%s: %zu shards for %d ranks: every rank needs at least one "
                 "shard (write smaller shards, or run fewer ranks)", ix->key, ix->n, world);
        return VJ_ERR_CONFIG;
    }
    scan_job j = {.ix = ix, .rank = rank, .world = world, .counts = counts};
    char why[1024];
    if (src_client_new(&j.c, ix->endpoint, 0, 0, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", ix->key, why);
        return VJ_ERR_DATA;
    }
    pthread_mutex_init(&j.mu, NULL);
    if (threads < 1) threads = 1;
    if (threads > 16) threads = 16;
    pthread_t t[16];
    int started = 0;
    for (; started < threads; started++)
        if (pthread_create(&t[started], NULL, scan_thread, &j) != 0) break;
    if (started == 0) scan_thread(&j);
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    pthread_mutex_destroy(&j.mu);
    src_client_free(j.c);
    if (j.rc) snprintf(err, errlen, "%s", j.err);
    return j.rc;
}

/* ---- the order of an epoch ---- */

/* Every unit of the data set in epoch e's order (training: permuted from
 * (seed, e); evaluation: index order): a fresh array, NULL out of memory. */
size_t *ld_epoch_order(const ld_options *o, long epoch)
{
    size_t N = o->ix->n, *perm = malloc((N ? N : 1) * sizeof *perm);
    if (!perm) return NULL;
    for (size_t i = 0; i < N; i++) perm[i] = i;
    if (o->train) {
        rng_state r;
        rng_seed(&r, o->seed ^ 0x5ba4d5ull, (uint64_t)epoch, 0);
        for (size_t i = N; i > 1; i--) {
            size_t j = (size_t)rng_below(&r, i);
            size_t t = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = t;
        }
    }
    return perm;
}

/* This rank's units in epoch e, in order: a fresh array of *n indices. */
size_t *ld_rank_units(const ld_options *o, long epoch, size_t *n)
{
    const ld_index *ix = o->ix;
    size_t N = ix->n, *perm = ld_epoch_order(o, epoch);
    if (!perm) return NULL;
    size_t k = 0;
    for (size_t i = (size_t)o->rank; i < N; i += (size_t)o->world) perm[k++] = perm[i];
    *n = k;
    return perm;
}

/* The samples of every rank in epoch e: this rank's, and the fewest. */
int64_t ld_epoch_counts(const ld_options *o, long epoch, int64_t *mine)
{
    const ld_index *ix = o->ix;
    size_t N = ix->n;
    const int W = o->world;
    int64_t *per = calloc((size_t)W, sizeof *per);
    size_t *perm = ld_epoch_order(o, epoch);
    int64_t min = 0;
    if (per && perm) {
        for (size_t i = 0; i < N; i++) per[i % (size_t)W] += (int64_t)ix->counts[perm[i]];
        min = per[0];
        for (int r = 1; r < W; r++)
            if (per[r] < min) min = per[r];
        if (mine) *mine = per[o->rank];
    }
    free(per);
    free(perm);
    return min;
}
