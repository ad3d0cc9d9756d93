/* worker/data/data.c - see data.h. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "config.h"
#include "file.h"
#include "rng.h"

void dataset_free(dataset *d)
{
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    free(d);
}

/* Reads exactly len bytes; returns 0, or -1 at a short read. */
static int gz_read_exact(gzFile gz, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        unsigned chunk = len > (1u << 30) ? (1u << 30) : (unsigned)len;
        int r = gzread(gz, p, chunk);
        if (r <= 0) return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* Opens <dir>/<base>.gz, or <dir>/<base> if that does not exist: only a
 * regular file (a FIFO or device never blocks or feeds the loader). */
static gzFile open_idx(const char *dir, const char *base, char *path, size_t pathlen, char *err,
                       size_t errlen)
{
    struct stat st;
    snprintf(path, pathlen, "%s/%s.gz", dir, base);
    if (lstat(path, &st) != 0 && errno == ENOENT) snprintf(path, pathlen, "%s/%s", dir, base);
    char why[1200];
    int fd = file_open_regular(path, NULL, why, sizeof why);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open dataset file: %s", path, file_reason(why, path));
        return NULL;
    }
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        snprintf(err, errlen, "%s: cannot open dataset file: out of memory", path);
        close(fd);
    }
    return gz;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads an IDX file of unsigned bytes with `ndims` dims; dims[] out. */
static int read_idx(const char *dir, const char *base, int ndims, uint32_t *dims,
                    uint8_t **data, char *path, size_t pathlen, char *err, size_t errlen)
{
    gzFile gz = open_idx(dir, base, path, pathlen, err, errlen);
    if (!gz)
        return VJ_ERR_DATA;
    int rc = VJ_ERR_DATA;
    unsigned char hdr[16];
    *data = NULL;
    if (gz_read_exact(gz, hdr, 4 + 4 * (size_t)ndims) != 0) {
        snprintf(err, errlen, "%s: truncated IDX header", path);
        goto out;
    }
    uint32_t magic = be32(hdr), want = 0x0800u | (uint32_t)ndims;
    if (magic != want) {
        snprintf(err, errlen, "%s: bad IDX magic 0x%08x (expected 0x%08x: unsigned bytes, %d dims)",
                 path, magic, want, ndims);
        goto out;
    }
    size_t total = 1;
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        if (dims[i] == 0 || dims[i] > (1u << 24)) {
            snprintf(err, errlen, "%s: implausible IDX dimension %d = %u", path, i, dims[i]);
            goto out;
        }
        total *= dims[i];
        if (total > ((size_t)1 << 34)) { /* 16 GiB of pixels: not a data set we load whole */
            snprintf(err, errlen, "%s: IDX dimensions too large (more than 2^34 bytes)", path);
            goto out;
        }
    }
    *data = malloc(total);
    if (!*data) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes", path, total);
        rc = VJ_ERR_OUT_OF_MEMORY;
        goto out;
    }
    if (gz_read_exact(gz, *data, total) != 0) {
        int zerr = 0;
        const char *msg = gzerror(gz, &zerr);
        snprintf(err, errlen, "%s: truncated or corrupt: expected %zu bytes of data%s%s", path,
                 total, zerr ? ": " : "", zerr ? msg : "");
        free(*data);
        *data = NULL;
        goto out;
    }
    rc = 0;
out:
    gzclose(gz);
    return rc;
}

int dataset_load_idx(dataset **out, const char *dir, const char *split, int max_label,
                     char *err, size_t errlen)
{
    if (strncmp(dir, "file://", 7) == 0) dir += 7;
    dataset *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "dataset: out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    char base[64];
    uint32_t idims[3], ldims[1];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    int rc = read_idx(dir, base, 3, idims, &d->pixels, d->images_path, sizeof d->images_path, err,
                      errlen);
    if (rc) goto fail;
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    rc = read_idx(dir, base, 1, ldims, &d->labels, d->labels_path, sizeof d->labels_path, err,
                  errlen);
    if (rc) goto fail;
    if (idims[0] != ldims[0]) {
        snprintf(err, errlen, "%s: %u labels for %u images in %s", d->labels_path, ldims[0],
                 idims[0], d->images_path);
        rc = VJ_ERR_DATA;
        goto fail;
    }
    d->n = (int)idims[0];
    d->rows = (int)idims[1];
    d->cols = (int)idims[2];
    for (int i = 0; i < d->n; i++) {
        if (d->labels[i] >= max_label) {
            snprintf(err, errlen, "%s: label %d of sample %d is not below model.numClasses=%d",
                     d->labels_path, d->labels[i], i, max_label);
            rc = VJ_ERR_DATA;
            goto fail;
        }
    }
    *out = d;
    return 0;
fail:
    dataset_free(d);
    return rc;
}

int dataset_check_image_size(const dataset *d, int image_size, char *err, size_t errlen)
{
    if (d->rows == image_size && d->cols == image_size) return 0;
    snprintf(err, errlen, "%s: images are %dx%d but model.imageSize=%d", d->images_path, d->rows,
             d->cols, image_size);
    return VJ_ERR_DATA;
}

int dataset_check_same_size(const dataset *test, const dataset *train, char *err, size_t errlen)
{
    if (test->rows == train->rows && test->cols == train->cols) return 0;
    snprintf(err, errlen, "%s: test images are %dx%d but the training images of %s are %dx%d",
             test->images_path, test->rows, test->cols, train->images_path, train->rows,
             train->cols);
    return VJ_ERR_DATA;
}

void dataset_image(const dataset *d, int i, int augment, uint64_t seed, long epoch, float *out)
{
    const int R = d->rows, C = d->cols;
    const uint8_t *src = d->pixels + (size_t)i * R * C;
    int dy = 0, dx = 0, flip = 0;
    if (augment) {
        rng_state r;
        rng_seed(&r, seed ^ 0xa06e, (uint64_t)epoch, (uint64_t)i);
        dy = (int)rng_below(&r, 5) - 2; /* crop offset in [-2, 2] = pad 2, crop R x C */
        dx = (int)rng_below(&r, 5) - 2;
        flip = (int)rng_below(&r, 2);
    }
    const float zero = (0.0f - FMNIST_MEAN) / FMNIST_STD;
    for (int y = 0; y < R; y++) {
        for (int x = 0; x < C; x++) {
            int sy = y + dy, sx = (flip ? C - 1 - x : x) + dx;
            float v = zero;
            if (sy >= 0 && sy < R && sx >= 0 && sx < C)
                v = ((float)src[sy * C + sx] / 255.0f - FMNIST_MEAN) / FMNIST_STD;
            out[y * C + x] = v;
        }
    }
}

static void shuffle_epoch(data_loader *l)
{
    rng_state r;
    rng_seed(&r, l->seed ^ 0x5f1e, (uint64_t)l->epoch, 0);
    for (int i = 0; i < l->d->n; i++) l->perm[i] = i;
    for (int i = l->d->n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)rng_below(&r, (uint64_t)i + 1);
        int t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
}

int data_loader_init(data_loader *l, const dataset *d, uint64_t seed, int augment)
{
    memset(l, 0, sizeof *l);
    l->d = d;
    l->seed = seed;
    l->augment = augment;
    l->perm = malloc(sizeof(int) * (size_t)d->n);
    if (!l->perm) return VJ_ERR_OUT_OF_MEMORY;
    shuffle_epoch(l);
    return 0;
}

void data_loader_free(data_loader *l)
{
    free(l->perm);
    l->perm = NULL;
}

void data_loader_seek(data_loader *l, long epoch, long index)
{
    l->epoch = epoch;
    l->index = index;
    shuffle_epoch(l);
}

void data_loader_begin_step(data_loader *l, int G)
{
    if (l->index + G > l->d->n) data_loader_seek(l, l->epoch + 1, 0);
}

void data_loader_skip(data_loader *l, long k) { l->index += k; }

void data_loader_next(data_loader *l, int B, float *images, int *labels)
{
    if (l->index + B > l->d->n) data_loader_seek(l, l->epoch + 1, 0);
    const size_t img = (size_t)l->d->rows * l->d->cols;
    for (int b = 0; b < B; b++) {
        int i = l->perm[l->index + b];
        dataset_image(l->d, i, l->augment, l->seed, l->epoch, images + b * img);
        labels[b] = l->d->labels[i];
    }
    l->index += B;
}
