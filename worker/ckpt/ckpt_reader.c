/* worker/ckpt/ckpt_reader.c - reading a step back (ckpt.h): its manifest
 * parsed and checked, its shards streamed with every block they pass
 * checked against its CRC, and ranges of the flat vector (parameters,
 * AdamW m and v, the EMA) read from them whatever world size wrote them.
 *
 * Owns: the manifest's parse (struct ckpt_manifest, opaque everywhere
 * else), ckpt_read_manifest, ckpt_read_range, ckpt_read_ema and the check
 * of a step's shards (ckpt_verify_shards: present, of their size, and with
 * read_blocks every block matching).
 * Must not: write or delete anything; list the steps or choose among them
 * (ckpt_list.c); hold more than one block of a shard beside the
 * destination.
 */
#include "ckpt.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_fence.h"
#include "ckpt_internal.h"

typedef struct {
    char name[64];
    uint64_t bytes;
    size_t nseg, total; /* total: floats per array */
    size_t *lo, *hi;
    uint32_t *crc;
    size_t nblocks;
} shard_info;

struct ckpt_manifest {
    ckpt_meta meta;
    int nshards;
    shard_info *shards;
};

void ckpt_manifest_free(ckpt_manifest *m)
{
    if (!m) return;
    for (int i = 0; i < m->nshards; i++) {
        free(m->shards[i].lo);
        free(m->shards[i].hi);
        free(m->shards[i].crc);
    }
    free(m->shards);
    free(m);
}

const ckpt_meta *ckpt_manifest_meta(const ckpt_manifest *m) { return &m->meta; }

static int num(const cJSON *o, const char *key, double *out)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x)) return -1;
    *out = x->valuedouble;
    return 0;
}

/* An optional whole number >= min under key: *out is it, or 0 when absent;
 * -1 with why naming the key when it is something else. */
static int optional_whole(const cJSON *o, const char *key, long min, long *out, char *why,
                          size_t len)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = 0;
    if (!x) return 0;
    if (!cJSON_IsNumber(x) || x->valuedouble < (double)min ||
        x->valuedouble != (double)(long)x->valuedouble) {
        snprintf(why, len, "\"%s\" is not a whole number >= %ld", key, min);
        return -1;
    }
    *out = (long)x->valuedouble;
    return 0;
}

/* Parses manifest text; why gets the reason it is not one. */
static ckpt_manifest *parse_manifest(const char *text, char *why, size_t len)
{
    cJSON *j = cJSON_Parse(text);
    ckpt_manifest *m = calloc(1, sizeof *m);
    double d[7];
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format"),
                *sh = cJSON_GetObjectItemCaseSensitive(j, "sharding"),
                *model = cJSON_GetObjectItemCaseSensitive(j, "model"),
                *shards = cJSON_GetObjectItemCaseSensitive(j, "shards");
    if (!j || !m) {
        snprintf(why, len, "%s", j ? "out of memory" : "not JSON");
        goto bad;
    }
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT) != 0) {
        snprintf(why, len, "format is not %s", CKPT_FORMAT);
        goto bad;
    }
    if (num(j, "step", &d[0]) || num(j, "epoch", &d[1]) || num(j, "index", &d[2]) ||
        num(j, "imagesDone", &d[3]) || num(j, "worldSize", &d[4]) || num(j, "params", &d[5]) ||
        num(j, "blockBytes", &d[6]) || !cJSON_IsString(sh) || !cJSON_IsObject(model) ||
        !cJSON_IsArray(shards) || d[6] != CKPT_BLOCK_BYTES) {
        snprintf(why, len, "a field is missing or of the wrong type");
        goto bad;
    }
    m->meta.step = (long)d[0];
    m->meta.epoch = (long)d[1];
    m->meta.index = (long)d[2];
    m->meta.images_done = (long)d[3];
    m->meta.world_size = (int)d[4];
    m->meta.n_params = (size_t)d[5];
    snprintf(m->meta.sharding, sizeof m->meta.sharding, "%s", sh->valuestring);
    const cJSON *ema = cJSON_GetObjectItemCaseSensitive(j, "ema"); /* optional: older steps */
    if (ema && !cJSON_IsBool(ema)) {
        snprintf(why, len, "\"ema\" is not a boolean");
        goto bad;
    }
    m->meta.ema = cJSON_IsTrue(ema);
    /* the writer's generation (ckpt_fence.h); absent: a step of the layout
     * before fencing, generation 0. The run's planned steps; absent: a step
     * written before the key, unknown (0). */
    if (optional_whole(j, "generation", 0, &m->meta.generation, why, len) ||
        optional_whole(j, "totalSteps", 1, &m->meta.total_steps, why, len))
        goto bad;
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(j, "lossScaler"); /* optional */
    if (ls) {
        double lv[3];
        if (!cJSON_IsObject(ls) || num(ls, "scale", &lv[0]) || num(ls, "growthTracker", &lv[1]) ||
            num(ls, "skippedSteps", &lv[2]) || !(lv[0] > 0)) {
            snprintf(why, len, "\"lossScaler\" is not an object of scale > 0, growthTracker "
                     "and skippedSteps");
            goto bad;
        }
        m->meta.loss_scale = lv[0];
        m->meta.scale_growth_tracker = (long)lv[1];
        m->meta.skipped_steps = (long)lv[2];
    }
    char *mt = cJSON_PrintUnformatted(model);
    if (mt) snprintf(m->meta.model, sizeof m->meta.model, "%s", mt);
    free(mt);
    const cJSON *ld = cJSON_GetObjectItemCaseSensitive(j, "loader");
    char *lt = ld ? cJSON_PrintUnformatted(ld) : NULL; /* optional; too long: left out */
    if (lt && strlen(lt) < sizeof m->meta.loader) memcpy(m->meta.loader, lt, strlen(lt) + 1);
    free(lt);
    m->nshards = cJSON_GetArraySize(shards);
    if (m->nshards != m->meta.world_size || m->nshards < 1) {
        snprintf(why, len, "%d shards for world size %d", m->nshards, m->meta.world_size);
        goto bad;
    }
    m->shards = calloc((size_t)m->nshards, sizeof *m->shards);
    if (!m->shards) {
        snprintf(why, len, "out of memory");
        goto bad;
    }
    for (int i = 0; i < m->nshards; i++) {
        const cJSON *s = cJSON_GetArrayItem(shards, i);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(s, "name"),
                    *segs = cJSON_GetObjectItemCaseSensitive(s, "segments"),
                    *crcs = cJSON_GetObjectItemCaseSensitive(s, "crc32");
        double b;
        shard_info *si = &m->shards[i];
        if (!cJSON_IsString(nm) || num(s, "bytes", &b) || !cJSON_IsArray(segs) ||
            !cJSON_IsArray(crcs) || strlen(nm->valuestring) >= sizeof si->name ||
            strchr(nm->valuestring, '/')) {
            snprintf(why, len, "shard %d's entry is malformed", i);
            goto bad;
        }
        long sgen;
        if (ckpt_object_kind(nm->valuestring, &sgen) != CKPT_OBJ_SHARD ||
            sgen != m->meta.generation) {
            snprintf(why, len, "shard %d's name %.64s is not a shard of generation %ld (the "
                     "manifest's)", i, nm->valuestring, m->meta.generation);
            goto bad;
        }
        snprintf(si->name, sizeof si->name, "%s", nm->valuestring);
        si->bytes = (uint64_t)b;
        si->nseg = (size_t)cJSON_GetArraySize(segs);
        si->nblocks = (size_t)cJSON_GetArraySize(crcs);
        si->lo = calloc(si->nseg + 1, sizeof *si->lo);
        si->hi = calloc(si->nseg + 1, sizeof *si->hi);
        si->crc = calloc(si->nblocks + 1, sizeof *si->crc);
        if (!si->lo || !si->hi || !si->crc) {
            snprintf(why, len, "out of memory");
            goto bad;
        }
        for (size_t k = 0; k < si->nseg; k++) {
            const cJSON *pair = cJSON_GetArrayItem(segs, (int)k);
            const cJSON *a = cJSON_GetArrayItem(pair, 0), *z = cJSON_GetArrayItem(pair, 1);
            if (!cJSON_IsNumber(a) || !cJSON_IsNumber(z) || a->valuedouble > z->valuedouble ||
                z->valuedouble > (double)m->meta.n_params) {
                snprintf(why, len, "shard %d's segment %zu is malformed", i, k);
                goto bad;
            }
            si->lo[k] = (size_t)a->valuedouble;
            si->hi[k] = (size_t)z->valuedouble;
            si->total += si->hi[k] - si->lo[k];
        }
        for (size_t k = 0; k < si->nblocks; k++) {
            const cJSON *c = cJSON_GetArrayItem(crcs, (int)k);
            if (!cJSON_IsNumber(c)) {
                snprintf(why, len, "shard %d's CRC %zu is not a number", i, k);
                goto bad;
            }
            si->crc[k] = (uint32_t)c->valuedouble;
        }
        if (si->bytes != (uint64_t)(m->meta.ema ? 4 : 3) * si->total * sizeof(float) ||
            si->nblocks != (si->bytes + CKPT_BLOCK_BYTES - 1) / CKPT_BLOCK_BYTES) {
            snprintf(why, len, "shard %d's size, segments and CRCs disagree", i);
            goto bad;
        }
    }
    cJSON_Delete(j);
    return m;
bad:
    cJSON_Delete(j);
    ckpt_manifest_free(m);
    return NULL;
}

ckpt_status ckpt_read_manifest(ckpt_store *store, long step, long gen, ckpt_manifest **out,
                               char *err, size_t errlen)
{
    char dir[32], name[96], mname[48], why[256];
    ckpt_step_name(step, dir, sizeof dir);
    ckpt_manifest_name(gen, mname, sizeof mname);
    snprintf(name, sizeof name, "%s/%s", dir, mname);
    void *text = NULL;
    size_t len = 0;
    ckpt_status st = ckpt_store_read(store, name, 64u << 20, &text, &len, err, errlen);
    if (st) return st;
    ckpt_manifest *m = parse_manifest(text, why, sizeof why);
    free(text);
    if (!m) {
        snprintf(err, errlen, "checkpoint %s: not a manifest: %s", name, why);
        return CKPT_PERMANENT;
    }
    if (m->meta.step != step || m->meta.generation != gen) {
        snprintf(err, errlen, "checkpoint %s: says step %ld of generation %ld", name,
                 m->meta.step, m->meta.generation);
        ckpt_manifest_free(m);
        return CKPT_PERMANENT;
    }
    *out = m;
    return CKPT_OK;
}

/* A shard's bytes [off, end) that a reader wants copied to dst. */
typedef struct {
    uint64_t off, end;
    unsigned char *dst;
} piece;

/* Checks a shard's blocks as a stream of its bytes passes (ckpt_sink) and
 * copies what the pieces ask for, so a read holds one block beside the
 * destination, however large the shard. */
typedef struct {
    const shard_info *si;
    const char *dir;
    uint64_t base, len;   /* the stream: shard bytes [base, base + len), base block-aligned */
    uint64_t done;        /* stream bytes taken so far */
    unsigned char *blk;   /* a block split across deliveries, fill bytes of it */
    size_t fill;
    const piece *pieces;  /* sorted by off */
    size_t npieces, next;
    char why[512];
} checker;

/* The block at stream offset at, size k, whole in p: its CRC, then the
 * pieces' bytes in it. (One thread: ISA-L's CRC outruns a disk, and on
 * file:// the store's reader thread fills the next chunk meanwhile.) */
static int take_block(checker *ck, uint64_t at, const unsigned char *p, size_t k)
{
    uint64_t lo = ck->base + at, hi = lo + k;
    size_t b = (size_t)(lo / CKPT_BLOCK_BYTES);
    if (ckpt_crc(p, k) != ck->si->crc[b]) {
        snprintf(ck->why, sizeof ck->why, "checkpoint %s/%s: block %zu (bytes %llu-%llu) does "
                 "not match its CRC (corrupt)", ck->dir, ck->si->name, b,
                 (unsigned long long)lo, (unsigned long long)hi);
        return 1;
    }
    for (size_t i = ck->next; i < ck->npieces && ck->pieces[i].off < hi; i++) {
        const piece *q = &ck->pieces[i];
        uint64_t a = q->off > lo ? q->off : lo, e = q->end < hi ? q->end : hi;
        if (a < e) memcpy(q->dst + (a - q->off), p + (a - lo), (size_t)(e - a));
        if (q->end <= hi && i == ck->next) ck->next++;
    }
    return 0;
}

static int check_sink(void *ctx, uint64_t pos, const void *data, size_t n)
{
    checker *ck = ctx;
    const unsigned char *d = data;
    if (pos == 0 && ck->done) { /* a retried request starts again */
        ck->done = 0;
        ck->fill = 0;
        ck->next = 0;
    }
    if (pos != ck->done || n > ck->len - ck->done) {
        snprintf(ck->why, sizeof ck->why, "checkpoint %s/%s: the store sent bytes %llu-%llu of "
                 "a %llu-byte read", ck->dir, ck->si->name, (unsigned long long)pos,
                 (unsigned long long)(pos + n), (unsigned long long)ck->len);
        return 1;
    }
    while (n) {
        uint64_t start = ck->done - ck->fill; /* the current block's stream offset */
        size_t want = ck->len - start < CKPT_BLOCK_BYTES ? (size_t)(ck->len - start)
                                                         : CKPT_BLOCK_BYTES;
        if (ck->fill == 0 && n >= want) { /* whole in this delivery: no copy */
            if (take_block(ck, start, d, want)) return 1;
            d += want, n -= want, ck->done += want;
            continue;
        }
        size_t k = want - ck->fill < n ? want - ck->fill : n;
        memcpy(ck->blk + ck->fill, d, k);
        ck->fill += k, d += k, n -= k, ck->done += k;
        if (ck->fill == want) {
            ck->fill = 0;
            if (take_block(ck, start, ck->blk, want)) return 1;
        }
    }
    return 0;
}

/* Streams blocks [b0, b1) of a shard through a checker copying pieces
 * (npieces may be 0: only check). blk: CKPT_BLOCK_BYTES of scratch. */
static ckpt_status stream_blocks(ckpt_store *store, long step, const shard_info *si, size_t b0,
                                 size_t b1, const piece *pieces, size_t npieces,
                                 unsigned char *blk, char *err, size_t errlen)
{
    char dir[32], name[128];
    ckpt_step_name(step, dir, sizeof dir);
    snprintf(name, sizeof name, "%s/%s", dir, si->name);
    uint64_t off = (uint64_t)b0 * CKPT_BLOCK_BYTES,
             end = (uint64_t)b1 * CKPT_BLOCK_BYTES < si->bytes ? (uint64_t)b1 * CKPT_BLOCK_BYTES
                                                               : si->bytes;
    checker ck = {.si = si, .dir = dir, .base = off, .len = end - off, .blk = blk,
                  .pieces = pieces, .npieces = npieces};
    ckpt_status st = ckpt_store_stream(store, name, off, end - off, check_sink, &ck, err, errlen);
    if (ck.why[0]) {
        snprintf(err, errlen, "%s", ck.why);
        return CKPT_PERMANENT;
    }
    if (!st && ck.done != end - off) {
        snprintf(err, errlen, "checkpoint %s/%s: got %llu of %llu bytes", dir, si->name,
                 (unsigned long long)ck.done, (unsigned long long)(end - off));
        st = CKPT_PERMANENT;
    }
    return st == CKPT_NOT_FOUND ? CKPT_PERMANENT : st;
}

/* ckpt_internal.h: every shard present with its size and, with
 * read_blocks, every block matching its CRC: one streamed read per shard. */
ckpt_status ckpt_verify_shards(ckpt_store *store, const ckpt_manifest *m, char **names,
                               const uint64_t *sizes, size_t n, int read_blocks, char *why,
                               size_t len)
{
    char dir[32], want[128];
    ckpt_step_name(m->meta.step, dir, sizeof dir);
    unsigned char *blk = malloc(CKPT_BLOCK_BYTES);
    if (!blk) {
        snprintf(why, len, "out of memory");
        return CKPT_RETRY;
    }
    ckpt_status st = CKPT_OK;
    for (int i = 0; i < m->nshards && !st; i++) {
        const shard_info *si = &m->shards[i];
        snprintf(want, sizeof want, "%s/%s", dir, si->name);
        size_t k = 0;
        while (k < n && strcmp(names[k], want) != 0) k++;
        if (k == n) {
            snprintf(why, len, "torn: %s is missing", si->name);
            st = CKPT_NOT_FOUND;
        } else if (sizes[k] != si->bytes) {
            snprintf(why, len, "corrupt: %s is %llu bytes, the manifest says %llu", si->name,
                     (unsigned long long)sizes[k], (unsigned long long)si->bytes);
            st = CKPT_PERMANENT;
        } else if (read_blocks && si->nblocks) {
            char e[768];
            st = stream_blocks(store, m->meta.step, si, 0, si->nblocks, NULL, 0, blk, e,
                               sizeof e);
            if (st) snprintf(why, len, "%s: %s", st == CKPT_RETRY ? "unreadable" : "corrupt", e);
        }
    }
    free(blk);
    return st;
}

/* ckpt_read_range and ckpt_read_ema: [lo, hi) of each array with a
 * destination (params, m, v, ema). */
static ckpt_status read_arrays(ckpt_store *store, const ckpt_manifest *man, size_t lo, size_t hi,
                               float *const dst[4], char *err, size_t errlen)
{
    size_t covered = 0, cap = 0;
    piece *pc = NULL;
    unsigned char *blk = malloc(CKPT_BLOCK_BYTES);
    ckpt_status st = blk ? CKPT_OK : CKPT_RETRY;
    if (!blk) snprintf(err, errlen, "checkpoint: out of memory reading a range");
    for (int i = 0; i < man->nshards && !st; i++) {
        const shard_info *si = &man->shards[i];
        /* the shard's pieces in shard order (arrays, then segments) */
        size_t np = 0;
        for (int arr = 0; arr < (man->meta.ema ? 4 : 3); arr++) {
            size_t pos = 0; /* the segment's first float within each array */
            for (size_t k = 0; k < si->nseg; pos += si->hi[k] - si->lo[k], k++) {
                size_t a = si->lo[k] > lo ? si->lo[k] : lo, b = si->hi[k] < hi ? si->hi[k] : hi;
                if (a >= b) continue;
                if (arr == 0) covered += b - a;
                if (!dst[arr]) continue;
                if (np == cap) {
                    piece *g = realloc(pc, sizeof *pc * (cap = cap ? 2 * cap : 16));
                    if (!g) {
                        snprintf(err, errlen, "checkpoint: out of memory reading a range");
                        st = CKPT_RETRY;
                        break;
                    }
                    pc = g;
                }
                uint64_t off = ((uint64_t)arr * si->total + pos + (a - si->lo[k])) * 4;
                pc[np++] = (piece){off, off + (uint64_t)(b - a) * 4,
                                   (unsigned char *)(dst[arr] + (a - lo))};
            }
        }
        /* one streamed read per run of pieces whose blocks touch */
        for (size_t g0 = 0; g0 < np && !st;) {
            size_t g1 = g0 + 1;
            uint64_t bend = (pc[g0].end + CKPT_BLOCK_BYTES - 1) / CKPT_BLOCK_BYTES;
            while (g1 < np && pc[g1].off / CKPT_BLOCK_BYTES <= bend) {
                uint64_t e = (pc[g1].end + CKPT_BLOCK_BYTES - 1) / CKPT_BLOCK_BYTES;
                if (e > bend) bend = e;
                g1++;
            }
            st = stream_blocks(store, man->meta.step, si,
                               (size_t)(pc[g0].off / CKPT_BLOCK_BYTES), (size_t)bend, pc + g0,
                               g1 - g0, blk, err, errlen);
            g0 = g1;
        }
    }
    free(pc);
    free(blk);
    if (!st && covered != hi - lo) {
        snprintf(err, errlen, "checkpoint step %ld: its shards cover %zu of the %zu values "
                 "[%zu, %zu)", man->meta.step, covered, hi - lo, lo, hi);
        st = CKPT_PERMANENT;
    }
    return st;
}

ckpt_status ckpt_read_range(ckpt_store *store, const ckpt_manifest *man, size_t lo, size_t hi,
                            float *params, float *m, float *v, char *err, size_t errlen)
{
    float *const dst[4] = {params, m, v, NULL};
    return read_arrays(store, man, lo, hi, dst, err, errlen);
}

ckpt_status ckpt_read_ema(ckpt_store *store, const ckpt_manifest *man, size_t lo, size_t hi,
                          float *ema, char *err, size_t errlen)
{
    if (!man->meta.ema) {
        snprintf(err, errlen, "checkpoint step %ld has no EMA of the weights (saved without "
                 "training.ema)", man->meta.step);
        return CKPT_PERMANENT;
    }
    float *const dst[4] = {NULL, NULL, NULL, ema};
    return read_arrays(store, man, lo, hi, dst, err, errlen);
}
