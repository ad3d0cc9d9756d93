/* worker/data/loader.c - see loader.h: the loader's threaded pipeline.
 *
 * Owns: one rank's stream over the index (loader_index.c): the units of
 * its epoch read in order, their samples cut into the shuffle buffer's
 * blocks and each block emitted permuted, decoded and transformed on
 * threads, handed out in batches; the steps of an epoch, the bad-sample
 * accounting, and the position a checkpoint saves and ld_start resumes.
 * Must not: list or scan the data set, or decide the order of its units
 * (loader_index.c), or talk to other ranks.
 *
 * Threads: one reader (opens the units in order, gathers blocks of raw
 * samples, emits each block permuted into the ring), `workers` decoders
 * (take the ring's raw samples in order, decode and transform each into its
 * own slot), and the caller (takes the decoded slots in order). The ring's
 * order is the emission order, so what a batch holds never depends on
 * which thread finished first. One mutex and three condition variables.
 */
#include "loader.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode.h"
#include "exitcode.h"
#include "loader_index.h"
#include "log.h"
#include "rng.h"
#include "source.h"
#include "wds.h"

enum { SLOT_FREE, SLOT_RAW, SLOT_BUSY, SLOT_DONE };
enum { F_SKIP = 1, F_BAD = 2, F_END = 4, F_ERROR = 8 };

typedef struct {
    int state, flags;
    long epoch;
    int64_t idx;          /* emission index in the epoch's stream */
    unsigned char *bytes; /* the encoded image (raw) */
    size_t len;
    int label;
    size_t unit;          /* index in the data set */
    char *name;           /* "unit:key", for messages */
    uint64_t key_hash;
    float *img;
    int good, code;       /* code: the vj_err of an F_ERROR slot */
    char *why;
} slot;

typedef struct {
    long epoch;
    int64_t block_no, unit, offset;
} block_start;

struct ld_loader {
    ld_options o;
    float mean[3], std[3];
    size_t img_floats;
    int S;                 /* the block (shuffle buffer) size */
    int cap;
    slot *ring;
    int nblk;
    block_start *blocks;   /* ring of recent blocks' starts, indexed by block_no % nblk */
    pthread_mutex_t mu;
    pthread_cond_t can_fill, can_decode, can_take;
    pthread_t reader, *workers;
    int n_workers, reader_started;
    int stop;
    uint64_t seq_fill, seq_decode, seq_take;
    /* reader */
    ld_position start;
    int64_t skip_below;    /* first epoch: entries emitted below this index are skipped */
    long reader_done;      /* the last epoch whose stream the reader finished */
    int reader_exited;
    /* consumer */
    long epoch, step;
    int64_t consumed;
    uint64_t bad_epoch;
    double *bad_per_unit;
    uint64_t good_total, bad_total;
    double wait_s;
    long cached_epoch;
    long cached_steps;
    int64_t cached_min;
    int eval_ended;
    ld_position done_pos;  /* after the last ld_step_done */
    /* o.note_upscale: the first upscaled image's stored size (up_w x up_h),
     * claimed by one decode thread, readable once upscale_seen is set */
    atomic_int upscale_claimed, upscale_seen;
    int up_w, up_h;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

long ld_epoch_steps(const ld_loader *l, long epoch)
{
    ld_loader *m = (ld_loader *)l; /* a cache of the last epoch asked */
    if (m->cached_epoch == epoch) return m->cached_steps;
    int64_t mine = 0, min = ld_epoch_counts(&l->o, epoch, &mine);
    int64_t usable = (int64_t)floor((double)min * (1.0 - l->o.max_bad_fraction));
    m->cached_epoch = epoch;
    m->cached_steps = l->o.per_step > 0 ? (long)(usable / l->o.per_step) : 0;
    m->cached_min = mine;
    return m->cached_steps;
}

int64_t ld_eval_samples(const ld_loader *l, int64_t *max_over_ranks)
{
    const ld_index *ix = l->o.ix;
    int64_t mine = 0, max = 0;
    for (int r = 0; r < l->o.world; r++) {
        int64_t n = 0;
        for (size_t i = (size_t)r; i < ix->n; i += (size_t)l->o.world) n += (int64_t)ix->counts[i];
        if (r == l->o.rank) mine = n;
        if (n > max) max = n;
    }
    if (max_over_ranks) *max_over_ranks = max;
    return mine;
}

/* Samples the ring holds: the batches queued ahead, the one being taken,
 * one per decode thread. */
static int ring_cap(int batch, int prefetch_batches, int workers)
{
    return ((prefetch_batches < 1 ? 1 : prefetch_batches) + 1) * batch +
           (workers < 1 ? 1 : workers);
}

size_t ld_queue_bytes(int batch, int prefetch_batches, int workers, int channels, int out_size)
{
    return (size_t)ring_cap(batch, prefetch_batches, workers) * (size_t)channels *
           (size_t)out_size * (size_t)out_size * sizeof(float);
}

int ld_new(ld_loader **out, const ld_options *o, char *err, size_t errlen)
{
    *out = NULL;
    ld_loader *l = calloc(1, sizeof *l);
    if (!l) goto oom;
    l->o = *o;
    for (int c = 0; c < o->xf.channels && c < 3; c++) {
        l->mean[c] = o->xf.mean[c];
        l->std[c] = o->xf.std[c];
    }
    l->o.xf.mean = l->mean;
    l->o.xf.std = l->std;
    if (l->o.workers < 1) l->o.workers = 1;
    if (l->o.prefetch_batches < 1) l->o.prefetch_batches = 1;
    l->img_floats = (size_t)o->xf.channels * o->xf.out_size * o->xf.out_size;
    l->S = (o->ix->kind == LD_IMAGEFOLDER || !o->train || o->shuffle_buffer < 1)
               ? 1 : o->shuffle_buffer;
    l->cap = ring_cap(o->batch, l->o.prefetch_batches, l->o.workers);
    l->nblk = (l->cap + l->S) / l->S + 8;
    l->cached_epoch = -1;
    l->reader_done = -1;
    l->ring = calloc((size_t)l->cap, sizeof *l->ring);
    l->blocks = calloc((size_t)l->nblk, sizeof *l->blocks);
    l->bad_per_unit = calloc(o->ix->n ? o->ix->n : 1, sizeof *l->bad_per_unit);
    if (!l->ring || !l->blocks || !l->bad_per_unit) goto oom;
    for (int i = 0; i < l->nblk; i++) l->blocks[i].epoch = -1;
    for (int i = 0; i < l->cap; i++)
        if (!(l->ring[i].img = malloc(l->img_floats * sizeof(float)))) goto oom;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->can_fill, NULL);
    pthread_cond_init(&l->can_decode, NULL);
    pthread_cond_init(&l->can_take, NULL);
    *out = l;
    return 0;
oom:
    if (l) {
        if (l->ring)
            for (int i = 0; i < l->cap; i++) free(l->ring[i].img);
        free(l->ring);
        free(l->blocks);
        free(l->bad_per_unit);
        free(l);
    }
    snprintf(err, errlen, "out of memory for the data loader's queue");
    return VJ_ERR_OUT_OF_MEMORY;
}

static void slot_clear(slot *s)
{
    free(s->bytes);
    free(s->name);
    free(s->why);
    s->bytes = NULL;
    s->name = NULL;
    s->why = NULL;
    s->len = 0;
    s->flags = 0;
    s->good = 0;
    s->code = 0;
}

void ld_free(ld_loader *l)
{
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->can_fill);
    pthread_cond_broadcast(&l->can_decode);
    pthread_cond_broadcast(&l->can_take);
    pthread_mutex_unlock(&l->mu);
    if (l->reader_started) pthread_join(l->reader, NULL);
    for (int i = 0; i < l->n_workers; i++) pthread_join(l->workers[i], NULL);
    free(l->workers);
    for (int i = 0; i < l->cap; i++) {
        slot_clear(&l->ring[i]);
        free(l->ring[i].img);
    }
    free(l->ring);
    free(l->blocks);
    free(l->bad_per_unit);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->can_fill);
    pthread_cond_destroy(&l->can_decode);
    pthread_cond_destroy(&l->can_take);
    free(l);
}

/* ---- the reader thread ---- */

typedef struct {
    unsigned char *bytes;
    size_t len;
    int label, flags;
    size_t unit;
    char *name;
    uint64_t key_hash;
    char *why;
} raw;

/* Puts one entry into the ring (waiting for room); takes the raw's memory.
 * Returns -1 when the loader stops. */
static int ring_put(ld_loader *l, raw *r, long epoch, int64_t idx)
{
    pthread_mutex_lock(&l->mu);
    slot *s = &l->ring[l->seq_fill % (uint64_t)l->cap];
    while (!l->stop && s->state != SLOT_FREE) pthread_cond_wait(&l->can_fill, &l->mu);
    if (l->stop) {
        pthread_mutex_unlock(&l->mu);
        free(r->bytes);
        free(r->name);
        free(r->why);
        return -1;
    }
    s->bytes = r->bytes;
    s->len = r->len;
    s->label = r->label;
    s->flags = r->flags;
    s->unit = r->unit;
    s->name = r->name;
    s->why = r->why;
    s->key_hash = r->key_hash;
    s->epoch = epoch;
    s->idx = idx;
    s->state = SLOT_RAW;
    l->seq_fill++;
    pthread_cond_broadcast(&l->can_decode);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

static void put_marker(ld_loader *l, int flags, int code, const char *why, long epoch)
{
    raw r = {.flags = flags, .why = why ? strdup(why) : NULL};
    if (flags & F_ERROR) r.label = code;
    ring_put(l, &r, epoch, -1);
}

/* Emits a gathered block, permuted; frees the block's entries' ownership. */
static int emit_block(ld_loader *l, raw *blk, int n, long epoch, int64_t block_no,
                      int64_t first_idx)
{
    int *perm = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!perm) return -1;
    for (int i = 0; i < n; i++) perm[i] = i;
    if (l->o.train && n > 1) {
        rng_state r;
        rng_seed(&r, l->o.seed ^ 0xb10c5ull, (uint64_t)epoch,
                 (uint64_t)l->o.rank << 40 ^ (uint64_t)block_no);
        for (int i = n - 1; i > 0; i--) {
            int j = (int)rng_below(&r, (uint64_t)i + 1);
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    int rc = 0;
    for (int k = 0; k < n; k++) {
        raw *r = &blk[perm[k]];
        int64_t idx = first_idx + k;
        if (epoch == l->start.epoch && idx < l->skip_below) r->flags |= F_SKIP;
        if (rc == 0) {
            rc = ring_put(l, r, epoch, idx);
        } else {
            free(r->bytes);
            free(r->name);
            free(r->why);
        }
        memset(r, 0, sizeof *r);
    }
    free(perm);
    return rc;
}

static int consumer_epoch(ld_loader *l)
{
    pthread_mutex_lock(&l->mu);
    long e = l->epoch;
    int stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop ? -1 : (int)e;
}

/* One epoch of this rank's stream, from a block start. Returns 0 at the
 * stream's end, 1 when the consumer has moved past this epoch, -1 when the
 * loader stops or failed (a marker was put). */
static int read_epoch(ld_loader *l, src_client *c, long epoch, int64_t unit0, int64_t off0,
                      int64_t idx0)
{
    const ld_index *ix = l->o.ix;
    size_t nu = 0;
    size_t *units = ld_rank_units(&l->o, epoch, &nu);
    raw *blk = calloc((size_t)l->S, sizeof *blk);
    if (!units || !blk) {
        free(units);
        free(blk);
        put_marker(l, F_ERROR, VJ_ERR_OUT_OF_MEMORY, "out of memory in the data reader", epoch);
        return -1;
    }
    int nb = 0, rc = 0;
    int64_t idx = idx0, block_no = idx0 / l->S;
    src_stream *next = NULL;
    int64_t next_unit = -1;
    char why[1200];
    for (int64_t k = unit0; k < (int64_t)nu && rc == 0; k++) {
        if (l->o.train && consumer_epoch(l) > epoch) {
            rc = 1;
            break;
        }
        size_t u = units[k];
        uint64_t off = k == unit0 ? (uint64_t)off0 : 0;
        if (ix->kind == LD_IMAGEFOLDER) {
            raw r = {.label = ix->labels[u], .unit = u};
            const char *path = ix->units[u];
            r.name = strdup(path);
            const char *key = path + strlen(path); /* "class/file", as the key */
            for (int slashes = 0; key > path; key--)
                if (key[-1] == '/' && ++slashes == 2) break;
            r.key_hash = fnv1a(key);
            if (src_read_all(c, path, (size_t)ix->max_member, &r.bytes, &r.len, why, sizeof why)) {
                r.flags = F_BAD;
                r.why = strdup(why);
            }
            if (nb == 0) {
                block_start *b = &l->blocks[block_no % l->nblk];
                pthread_mutex_lock(&l->mu);
                *b = (block_start){epoch, block_no, k, 0};
                pthread_cond_broadcast(&l->can_take);
                pthread_mutex_unlock(&l->mu);
            }
            blk[nb++] = r;
            if (nb == l->S) {
                if (emit_block(l, blk, nb, epoch, block_no, idx) != 0) rc = -1;
                idx += nb;
                block_no++;
                nb = 0;
            }
            continue;
        }
        src_stream *s = NULL;
        if (next && next_unit == k && off == 0) {
            s = next;
            next = NULL;
        } else {
            src_close(next);
            next = NULL;
            if (src_open(c, ix->units[u], off, &s, why, sizeof why)) {
                put_marker(l, F_ERROR, VJ_ERR_DATA, why, epoch);
                rc = -1;
                break;
            }
        }
        if (k + 1 < (int64_t)nu) { /* read the next shard ahead */
            char w2[1200];
            if (src_open(c, ix->units[units[k + 1]], 0, &next, w2, sizeof w2) == 0)
                next_unit = k + 1;
            else
                next = NULL; /* reported when it is reached */
        }
        wds_reader *w = wds_reader_new(ix->units[u], src_read, s, ix->max_member);
        if (!w) {
            src_close(s);
            put_marker(l, F_ERROR, VJ_ERR_OUT_OF_MEMORY, "out of memory in the data reader", epoch);
            rc = -1;
            break;
        }
        if (off) wds_reader_start_at(w, off);
        for (;;) {
            wds_sample smp;
            wds_status st = wds_next(w, &smp, why, sizeof why);
            if (st == WDS_END) break;
            if (st == WDS_ERROR) {
                const char *se = src_error(s);
                int code = se && se[0] ? VJ_ERR_IO : VJ_ERR_DATA;
                put_marker(l, F_ERROR, code, why, epoch);
                rc = -1;
                break;
            }
            raw r = {.unit = u};
            if (nb == 0) {
                block_start *b = &l->blocks[block_no % l->nblk];
                pthread_mutex_lock(&l->mu);
                *b = (block_start){epoch, block_no, k,
                                   (int64_t)smp.offset};
                pthread_cond_broadcast(&l->can_take);
                pthread_mutex_unlock(&l->mu);
            }
            if (st == WDS_SAMPLE) {
                char name[1400];
                snprintf(name, sizeof name, "%s:%s", ix->units[u], smp.key);
                r.name = strdup(name);
                r.key_hash = fnv1a(smp.key);
                r.label = smp.label;
                r.len = smp.image_size;
                r.bytes = malloc(r.len ? r.len : 1);
                if (r.bytes) memcpy(r.bytes, smp.image, r.len);
                if (!r.bytes || !r.name) {
                    free(r.bytes);
                    free(r.name);
                    put_marker(l, F_ERROR, VJ_ERR_OUT_OF_MEMORY, "out of memory in the data "
                               "reader", epoch);
                    rc = -1;
                    break;
                }
            } else { /* WDS_BAD */
                char name[1400];
                snprintf(name, sizeof name, "%s:%s", ix->units[u], smp.key);
                r.flags = F_BAD;
                r.name = strdup(name);
                r.why = strdup(why);
            }
            blk[nb++] = r;
            if (nb == l->S) {
                if (emit_block(l, blk, nb, epoch, block_no, idx) != 0) {
                    rc = -1;
                    break;
                }
                idx += nb;
                block_no++;
                nb = 0;
                if (l->o.train && consumer_epoch(l) > epoch) {
                    rc = 1;
                    break;
                }
            }
        }
        wds_reader_free(w);
        src_close(s);
    }
    src_close(next);
    if (rc == 0 && nb > 0 && emit_block(l, blk, nb, epoch, block_no, idx) != 0) rc = -1;
    for (int i = 0; i < nb && rc != 0; i++) {
        free(blk[i].bytes);
        free(blk[i].name);
        free(blk[i].why);
    }
    free(blk);
    free(units);
    return rc;
}

static void *reader_main(void *arg)
{
    ld_loader *l = arg;
    src_client *c = NULL;
    char why[1024];
    if (src_client_new(&c, l->o.endpoint, 0, 0, why, sizeof why)) {
        put_marker(l, F_ERROR, VJ_ERR_DATA, why, l->start.epoch);
        return NULL;
    }
    long epoch = l->start.epoch;
    int64_t unit = l->start.unit, off = l->start.offset, idx = l->start.block_first;
    for (;;) {
        int rc = read_epoch(l, c, epoch, unit, off, idx);
        pthread_mutex_lock(&l->mu);
        if (rc >= 0) l->reader_done = epoch;
        pthread_cond_broadcast(&l->can_take);
        pthread_mutex_unlock(&l->mu);
        if (rc < 0) break;
        if (!l->o.train) {
            put_marker(l, F_END, 0, NULL, epoch);
            break;
        }
        epoch++;
        unit = off = idx = 0;
    }
    src_client_free(c);
    pthread_mutex_lock(&l->mu);
    l->reader_exited = 1;
    pthread_cond_broadcast(&l->can_take);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- the decode threads ---- */

/* a decode thread's memory for RandAugment: the 8-bit crop, the floats it
 * is filtered into, the ops' scratch (allocated only when it is on) */
typedef struct {
    ra_scratch *ra;
    uint8_t *px;
    float *tmp;
} aug_mem;

static void aug_mem_free(aug_mem *m)
{
    if (!m) return;
    ra_scratch_free(m->ra);
    free(m->px);
    free(m->tmp);
    free(m);
}

static aug_mem *aug_mem_new(const ld_options *o)
{
    if (!o->train || !o->augment || !o->randaug.enabled) return NULL;
    size_t n = (size_t)3 * o->xf.out_size * o->xf.out_size;
    aug_mem *m = calloc(1, sizeof *m);
    if (m && (!(m->ra = ra_scratch_new()) || !(m->px = malloc(n)) ||
              !(m->tmp = malloc(n * sizeof(float))))) {
        aug_mem_free(m);
        m = NULL;
    }
    return m;
}

/* the training crop through RandAugment: box b of img filtered to 8 bits
 * (flipped), the ops drawn from r, then normalised into the slot */
static int randaug_one(ld_loader *l, slot *s, const decode_image *img, xf_box b, int flip,
                       rng_state *r, xf_scratch *scratch, aug_mem *m, char *why, size_t whylen)
{
    if (!m) {
        snprintf(why, whylen, "%s: out of memory for RandAugment", s->name);
        return -1;
    }
    if (xf_resample_u8(img->rgb, img->width, img->height, b, NULL, flip, &l->o.xf, scratch,
                       m->tmp, m->px, why, whylen) != 0)
        return -1;
    const int S = l->o.xf.out_size;
    if (ra_apply(&l->o.randaug, &l->o.ra, m->px, S, S, r, m->ra, NULL) != 0) {
        snprintf(why, whylen, "%s: out of memory in RandAugment", s->name);
        return -1;
    }
    xf_normalize_u8(m->px, &l->o.xf, s->img);
    return 0;
}

static void decode_one(ld_loader *l, slot *s, xf_scratch *scratch, aug_mem *aug)
{
    char why[1200];
    int w = 0, h = 0;
    decode_format fmt;
    s->good = 0;
    if (decode_probe(s->bytes, s->len, s->name, &fmt, &w, &h, why, sizeof why) != 0) {
        s->why = strdup(why);
        return;
    }
    const int out = l->o.xf.out_size;
    xf_box box;
    int flip = 0;
    rng_state r; /* the sample's stream: the crop, the flip, RandAugment, erasing */
    if (l->o.train && l->o.augment) {
        rng_seed(&r, l->o.seed ^ 0xa06e7aull, (uint64_t)s->epoch, s->key_hash);
        box = xf_random_resized_crop(w, h, l->o.scale, l->o.ratio, &r);
        flip = rng_uniform(&r) < 0.5f;
    } else {
        box = xf_center_crop_box(w, h, out, l->o.crop_pct);
    }
    /* training: only the box's region of a JPEG, at the smallest of the
     * fast DCT scales (1/2, 1/4, 1/8) at which the box keeps out x out
     * pixels; evaluation: the whole image (the resize reads past the crop's
     * border), at the smallest such scale of the resized image */
    const int region = l->o.train && l->o.augment;
    decode_opts dopt = {.max_pixels = l->o.max_pixels, .fast_scales = 1};
    if (box.w > 0 && box.h > 0) {
        if (region) {
            dopt.min_width = out;
            dopt.min_height = out;
            dopt.crop_x = (int)floor(box.x);
            dopt.crop_y = (int)floor(box.y);
            dopt.crop_w = (int)ceil(box.x + box.w) - dopt.crop_x;
            dopt.crop_h = (int)ceil(box.y + box.h) - dopt.crop_y;
        } else {
            dopt.min_width = (int)ceil(out * (double)w / box.w);
            dopt.min_height = (int)ceil(out * (double)h / box.h);
            if (dopt.min_width > w) dopt.min_width = w;
            if (dopt.min_height > h) dopt.min_height = h;
        }
    }
    decode_image img;
    if (decode_image_rgb(s->bytes, s->len, s->name, &dopt, &img, why, sizeof why) != 0) {
        s->why = strdup(why);
        return;
    }
    const double area = (double)img.src_width * img.src_height;
    if (l->o.note_upscale && area * 4 <= (double)out * out &&
        !atomic_exchange(&l->upscale_claimed, 1)) {
        l->up_w = img.src_width;
        l->up_h = img.src_height;
        atomic_store(&l->upscale_seen, 1);
    }
    double b4[4] = {box.x, box.y, box.w, box.h};
    decode_box_in_image(&img, b4);
    xf_box b = {b4[0], b4[1], b4[2], b4[3]};
    xf_box whole = {0, 0, img.width, img.height};
    int rc = region && l->o.randaug.enabled
                 ? randaug_one(l, s, &img, b, flip, &r, scratch, aug, why, sizeof why)
                 : xf_resample_ex(img.rgb, img.width, img.height, b, region ? NULL : &whole, flip,
                                  &l->o.xf, scratch, s->img, why, sizeof why);
    if (rc == 0 && region)
        er_apply(&l->o.erasing, s->img, l->o.xf.channels, l->o.xf.out_size, l->o.xf.out_size, &r,
                 NULL);
    if (rc != 0)
        s->why = strdup(why);
    else
        s->good = 1;
    decode_image_free(&img);
}

static void *worker_main(void *arg)
{
    ld_loader *l = arg;
    xf_scratch *scratch = xf_scratch_new(); /* NULL: xf_resample_ex allocates per call */
    aug_mem *aug = aug_mem_new(&l->o);      /* NULL with RandAugment on: samples fail, named */
    pthread_mutex_lock(&l->mu);
    for (;;) {
        slot *s = &l->ring[l->seq_decode % (uint64_t)l->cap];
        while (!l->stop && !(l->seq_decode < l->seq_fill && s->state == SLOT_RAW)) {
            pthread_cond_wait(&l->can_decode, &l->mu);
            s = &l->ring[l->seq_decode % (uint64_t)l->cap];
        }
        if (l->stop) break;
        s->state = SLOT_BUSY;
        l->seq_decode++;
        int work = !(s->flags & (F_SKIP | F_BAD | F_END | F_ERROR)) &&
                   !(l->o.train && s->epoch < l->epoch);
        pthread_mutex_unlock(&l->mu);
        if (work) decode_one(l, s, scratch, aug);
        pthread_mutex_lock(&l->mu);
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&l->can_take);
    }
    pthread_mutex_unlock(&l->mu);
    xf_scratch_free(scratch);
    aug_mem_free(aug);
    return NULL;
}

int ld_start(ld_loader *l, const ld_position *p, int exact, char *err, size_t errlen)
{
    ld_position z = {0};
    if (!p) {
        p = &z;
        exact = 1;
    }
    l->epoch = p->epoch;
    l->step = p->step;
    l->start = (ld_position){.epoch = p->epoch};
    if (exact && p->unit >= 0) {
        l->start = *p;
        l->consumed = p->block_first;
        l->skip_below = p->consumed;
    } else { /* re-derived: the samples of the steps done, skipped unread */
        l->consumed = 0;
        l->skip_below = (int64_t)p->step * l->o.per_step;
    }
    if (l->o.train) {
        long guard = 0; /* an epoch too small for a step is passed over */
        while (ld_epoch_steps(l, l->epoch) == 0 && guard++ < 1000) {
            l->epoch++;
            l->step = 0;
            l->consumed = 0;
            l->start = (ld_position){.epoch = l->epoch};
            l->skip_below = 0;
        }
        if (ld_epoch_steps(l, l->epoch) == 0) {
            snprintf(err, errlen, "%s: too few samples for one step of %d per rank",
                     l->o.ix->key, l->o.per_step);
            return VJ_ERR_CONFIG;
        }
    }
    l->done_pos = exact ? *p : (ld_position){.epoch = l->epoch, .step = l->step, .unit = -1};
    if (l->epoch != p->epoch) l->done_pos = (ld_position){.epoch = l->epoch};
    l->workers = calloc((size_t)l->o.workers, sizeof *l->workers);
    if (!l->workers) {
        snprintf(err, errlen, "out of memory for the data loader's threads");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    for (; l->n_workers < l->o.workers; l->n_workers++)
        if (pthread_create(&l->workers[l->n_workers], NULL, worker_main, l) != 0) break;
    if (l->n_workers == 0 || pthread_create(&l->reader, NULL, reader_main, l) != 0) {
        snprintf(err, errlen, "cannot start the data loader's threads: %s", strerror(errno));
        return VJ_ERR_OUT_OF_MEMORY;
    }
    l->reader_started = 1;
    return 0;
}

/* The unit this rank's epoch had the most bad samples of. */
static size_t worst_unit(const ld_loader *l)
{
    size_t w = 0;
    for (size_t i = 1; i < l->o.ix->n; i++)
        if (l->bad_per_unit[i] > l->bad_per_unit[w]) w = i;
    return w;
}

/* What data.maxBadFraction allows of this rank's samples and the smallest
 * one-digit fraction that would allow `bad` (the user's advice), then the
 * worst unit: "file" in an image folder (each holds one sample), "shard" in
 * webdataset tars. Words only: the counting is ld_next's. */
static void bad_advice(const ld_loader *l, uint64_t bad, char *out, size_t outlen)
{
    double n = (double)(l->cached_min > 0 ? l->cached_min : 1);
    double allowed = floor(l->o.max_bad_fraction * n);
    char allows[32];
    if (allowed < 1) snprintf(allows, sizeof allows, "none");
    else snprintf(allows, sizeof allows, "%.0f", allowed);
    double need = (double)bad / n, scale = 1;
    while (need * scale < 1 && scale < 1e9) scale *= 10;
    double advice = ceil(need * scale - 1e-9) / scale;
    if (advice > 1) advice = 1;
    size_t wu = worst_unit(l);
    int folder = l->o.ix->kind == LD_IMAGEFOLDER;
    char worst[1200];
    if (folder) snprintf(worst, sizeof worst, "a bad file is %s", l->o.ix->units[wu]);
    else snprintf(worst, sizeof worst, "the worst shard is %s with %.0f bad", l->o.ix->units[wu],
                  l->bad_per_unit[wu]);
    snprintf(out, outlen, "data.maxBadFraction=%g allows %s of its %lld: set it to %g or more to "
             "skip such %s; %s", l->o.max_bad_fraction, allows, (long long)l->cached_min, advice,
             folder ? "images" : "samples", worst);
}

int ld_next(ld_loader *l, float *images, int *labels, int *n, char *err, size_t errlen)
{
    int got = 0, rc = 0;
    *n = 0;
    pthread_mutex_lock(&l->mu);
    while (got < l->o.batch) {
        slot *s = &l->ring[l->seq_take % (uint64_t)l->cap];
        if (!(l->seq_take < l->seq_fill && s->state == SLOT_DONE)) {
            double t0 = now_s();
            while (!l->stop && !(l->seq_take < l->seq_fill && s->state == SLOT_DONE))
                pthread_cond_wait(&l->can_take, &l->mu);
            l->wait_s += now_s() - t0;
            if (l->stop) break;
        }
        if (s->flags & F_ERROR) {
            snprintf(err, errlen, "%s", s->why ? s->why : "the data reader failed");
            rc = s->label ? s->label : VJ_ERR_DATA;
            break; /* left in the ring: later calls fail the same */
        }
        if (s->flags & F_END) {
            l->eval_ended = 1;
            break;
        }
        int use = 0;
        if (l->o.train && s->epoch != l->epoch) {
            if (s->epoch > l->epoch) { /* this rank's stream ran out before the epoch's steps */
                char advice[1600];
                bad_advice(l, l->bad_epoch, advice, sizeof advice);
                snprintf(err, errlen, "epoch %ld: rank %d ran out of samples after %llu of them "
                         "could not be read or decoded; %s", l->epoch, l->o.rank,
                         (unsigned long long)l->bad_epoch, advice);
                rc = VJ_ERR_DATA;
                break;
            }
            /* the rest of a finished epoch: dropped */
        } else {
            l->consumed++;
            if (s->flags & F_SKIP) {
            } else if (!s->good) {
                l->bad_epoch++;
                l->bad_total++;
                if (l->bad_per_unit[s->unit]++ == 0)
                    LOG_WARN("data", "event=bad_sample shard=%s sample=%s reason=%s "
                             "msg=%s", LOGV(l->o.ix->units[s->unit]), LOGV(s->name),
                             LOGV(s->why ? s->why : "unreadable"),
                             LOGV("skipped; later bad samples of this shard are only counted"));
                ld_epoch_steps(l, l->epoch); /* cached_min: this rank's samples */
                if ((double)l->bad_epoch > l->o.max_bad_fraction * (double)l->cached_min) {
                    char advice[1600];
                    bad_advice(l, l->bad_epoch, advice, sizeof advice);
                    snprintf(err, errlen, "%s; %llu of %lld %s could not be read or decoded "
                             "(epoch %ld, rank %d); %s", s->why ? s->why : "unreadable sample",
                             (unsigned long long)l->bad_epoch, (long long)l->cached_min,
                             l->o.ix->kind == LD_IMAGEFOLDER ? "images" : "samples", l->epoch,
                             l->o.rank, advice);
                    rc = VJ_ERR_DATA;
                    slot_clear(s);
                    s->state = SLOT_FREE;
                    l->seq_take++;
                    pthread_cond_broadcast(&l->can_fill);
                    break;
                }
            } else {
                use = 1;
            }
        }
        if (use) {
            memcpy(images + (size_t)got * l->img_floats, s->img, l->img_floats * sizeof(float));
            labels[got] = s->label;
            got++;
            l->good_total++;
        }
        slot_clear(s);
        s->state = SLOT_FREE;
        l->seq_take++;
        pthread_cond_broadcast(&l->can_fill);
    }
    pthread_mutex_unlock(&l->mu);
    *n = got;
    if (rc == 0 && l->stop && got < l->o.batch && l->o.train) {
        snprintf(err, errlen, "the data loader was stopped");
        rc = VJ_ERR_STOPPED;
    }
    return rc;
}

static ld_position position_locked(ld_loader *l);

void ld_step_done(ld_loader *l)
{
    pthread_mutex_lock(&l->mu);
    l->step++;
    if (l->step >= ld_epoch_steps(l, l->epoch)) {
        do {
            l->epoch++;
        } while (ld_epoch_steps(l, l->epoch) == 0 && l->epoch < l->start.epoch + 1000000);
        l->step = 0;
        l->consumed = 0;
        l->bad_epoch = 0;
        memset(l->bad_per_unit, 0, l->o.ix->n * sizeof *l->bad_per_unit);
        pthread_cond_broadcast(&l->can_take);
    }
    l->done_pos = position_locked(l);
    pthread_mutex_unlock(&l->mu);
}

/* The position now (between steps); called with the mutex held. */
static ld_position position_locked(ld_loader *l)
{
    ld_position p = {.epoch = l->epoch, .step = l->step, .consumed = l->consumed};
    p.block_first = l->consumed - l->consumed % l->S;
    int64_t bn = p.block_first / l->S;
    if (p.block_first == 0) {
        p.unit = p.offset = 0;
        return p;
    }
    /* the reader records a block's start before emitting it; wait for it
     * when the next block has not been started yet */
    block_start *b = &l->blocks[bn % l->nblk];
    while (!l->stop && !l->reader_exited && l->reader_done < p.epoch &&
           !(b->epoch == p.epoch && b->block_no == bn))
        pthread_cond_wait(&l->can_take, &l->mu);
    if (b->epoch == p.epoch && b->block_no == bn) {
        p.unit = b->unit;
        p.offset = b->offset;
    } else {
        p.unit = -1; /* not known: a resume re-derives the position */
        p.offset = 0;
    }
    return p;
}

ld_position ld_position_now(const ld_loader *cl)
{
    ld_loader *l = (ld_loader *)cl;
    pthread_mutex_lock(&l->mu);
    ld_position p = l->done_pos;
    pthread_mutex_unlock(&l->mu);
    return p;
}

ld_stats ld_stats_now(const ld_loader *cl)
{
    ld_loader *l = (ld_loader *)cl;
    pthread_mutex_lock(&l->mu);
    ld_stats s = {.samples = l->good_total, .skipped = l->bad_total, .wait_seconds = l->wait_s};
    pthread_mutex_unlock(&l->mu);
    return s;
}

int ld_upscaled(const ld_loader *cl, int *w, int *h)
{
    ld_loader *l = (ld_loader *)cl;
    if (!atomic_load(&l->upscale_seen)) return 0;
    *w = l->up_w;
    *h = l->up_h;
    return 1;
}
