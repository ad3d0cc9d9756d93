/* worker/ckpt/ckpt.c - see ckpt.h. The writer's thread does all storage work
 * of a save; the reader functions run on the caller's thread. */
#include "ckpt.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l/crc.h>

#include "ckpt_fence.h"
#include "log.h"
#include "util.h"

#define FORMAT "vitjob-checkpoint-1"

void ckpt_step_name(long step, char *out, size_t len) { snprintf(out, len, "step-%09ld", step); }

/* CRC-32 as in gzip and zlib's crc32() (the manifest's "crc32"), by
 * ISA-L: PCLMULQDQ where the CPU has it, about 3x zlib's table code. */
static uint32_t crc_of(const unsigned char *p, size_t n) { return crc32_gzip_refl(0, p, n); }

/* ---------------------------------------------------------------- writer */

/* What a writer's fence guard checks (ckpt_store_put_guarded). */
typedef struct {
    ckpt_store *store;
    long generation, step;
    const char *action;
    int (*may_write)(const void *ctx); /* ckpt_writer_set_gate's, or NULL */
    const void *gate_ctx;
} fence_guard;

/* Before the put: the gate and the fence, then the test hold (ckpt_fence.h);
 * after it (stored): the fence alone (a gate that closed after the put
 * takes nothing back: what is stored is this generation's, and valid). */
static ckpt_status check_fence(void *ctx, int stored, char *err, size_t errlen)
{
    fence_guard *g = ctx;
    if (stored) return ckpt_fence_recheck(g->store, g->generation, g->action, g->step, err, errlen);
    if (g->may_write && !g->may_write(g->gate_ctx)) {
        snprintf(err, errlen, "checkpoint step %ld: %s not written: this process may write no "
                 "more (woken from a freeze, or a peer was lost)", g->step, g->action);
        return CKPT_FENCED;
    }
    ckpt_status st = ckpt_fence_check(g->store, g->generation, g->action, g->step, err, errlen);
    if (st == CKPT_OK) ckpt_fence_hold(g->action, g->step);
    return st;
}

struct ckpt_writer {
    ckpt_store *store;
    rdzv *r;
    int rank, world, keep;
    long generation; /* the writer generation in every name it writes (ckpt_fence.h) */
    int (*may_write)(const void *ctx); /* ckpt_writer_set_gate */
    const void *gate_ctx;
    double timeout_s;
    pthread_t thread;
    int running; /* a thread to join */
    ckpt_status status;
    char why[2048];
    /* the save in flight */
    ckpt_meta meta;
    size_t nseg, *lo, *hi;
    unsigned char *buf;
    size_t bytes, cap;
    double copy_s;
    _Atomic long stored_step; /* rank 0: the newest step whose manifest is written; -1 none */
};

int ckpt_writer_new(ckpt_writer **out, ckpt_store *store, rdzv *r, int rank, int world, int keep,
                    double timeout_s, char *err, size_t errlen)
{
    ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "checkpoint: out of memory");
        return -1;
    }
    w->store = store;
    w->r = r;
    w->rank = rank;
    w->world = world;
    w->keep = keep;
    w->timeout_s = timeout_s;
    atomic_init(&w->stored_step, -1);
    *out = w;
    return 0;
}

void ckpt_writer_set_generation(ckpt_writer *w, long generation) { w->generation = generation; }

void ckpt_writer_set_gate(ckpt_writer *w, int (*may_write)(const void *ctx), const void *ctx)
{
    w->may_write = may_write;
    w->gate_ctx = ctx;
}

void ckpt_writer_free(ckpt_writer *w)
{
    if (!w) return;
    if (w->running) pthread_join(w->thread, NULL);
    free(w->lo);
    free(w->hi);
    free(w->buf);
    free(w);
}

/* This rank's shard entry of the manifest. */
static cJSON *shard_entry(const ckpt_writer *w, const char *name)
{
    cJSON *e = cJSON_CreateObject(), *segs = cJSON_CreateArray(), *crcs = cJSON_CreateArray();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddNumberToObject(e, "bytes", (double)w->bytes);
    for (size_t i = 0; i < w->nseg; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)w->lo[i]));
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)w->hi[i]));
        cJSON_AddItemToArray(segs, pair);
    }
    for (size_t off = 0; off < w->bytes; off += CKPT_BLOCK_BYTES) {
        size_t n = w->bytes - off < CKPT_BLOCK_BYTES ? w->bytes - off : CKPT_BLOCK_BYTES;
        cJSON_AddItemToArray(crcs, cJSON_CreateNumber(crc_of(w->buf + off, n)));
    }
    cJSON_AddItemToObject(e, "segments", segs);
    cJSON_AddItemToObject(e, "crc32", crcs);
    return e;
}

static ckpt_status fail(ckpt_writer *w, ckpt_status st, const char *fmt, const char *detail)
{
    w->status = st;
    snprintf(w->why, sizeof w->why, fmt, detail);
    return st;
}

/* A step folder's object: the step and the name in the folder; 0 for an
 * object outside the steps (a fence). */
static int step_object(const char *name, long *step, const char **base)
{
    int off = 0;
    if (sscanf(name, "step-%ld/%n", step, &off) != 1 || off == 0) return 0;
    *base = name + off;
    return 1;
}

/* Deletes the objects of the steps older than the keep newest complete
 * ones (a manifest of any generation), rank 0 after writing a manifest:
 * only objects of this writer's generation or older ones (a newer
 * generation's stay, whatever their step), each step's only once the
 * fence says no newer generation has taken over. CKPT_FENCED when one has
 * (nothing more deleted); other failures are logged and skipped (the next
 * save retries). */
static ckpt_status retain(ckpt_writer *w, char *why, size_t whylen)
{
    char err[512], **names = NULL;
    uint64_t *sizes = NULL;
    size_t n = 0;
    if (ckpt_store_list(w->store, &names, &sizes, &n, err, sizeof err) != CKPT_OK) {
        LOG_WARN("ckpt", "event=retention_skipped reason=%s", LOGV(err));
        return CKPT_OK;
    }
    /* complete steps, newest first (names are sorted ascending) */
    long oldest_kept = -1, last = -1;
    int kept = 0;
    for (size_t i = n; i-- > 0 && kept < w->keep;) {
        long step, gen;
        const char *base;
        if (step_object(names[i], &step, &base) && step != last &&
            ckpt_object_kind(base, &gen) == CKPT_OBJ_MANIFEST) {
            oldest_kept = last = step;
            kept++;
        }
    }
    ckpt_status st = CKPT_OK;
    long checked = -1; /* the fence is asked again before each step's deletes */
    for (size_t i = 0; i < n && kept == w->keep && st == CKPT_OK; i++) {
        long step, gen;
        const char *base;
        if (!step_object(names[i], &step, &base) || step >= oldest_kept) continue;
        ckpt_object_kind(base, &gen);
        if (gen > w->generation) continue; /* a newer generation's: never ours to delete */
        if (step != checked) {
            st = ckpt_fence_check(w->store, w->generation, "retention", step, why, whylen);
            if (st != CKPT_OK && st != CKPT_FENCED) {
                LOG_WARN("ckpt", "event=retention_skipped reason=%s", LOGV(why));
                st = CKPT_OK;
                break;
            }
            if (st) break;
            checked = step;
            ckpt_fence_hold("retention", step);
        }
        if (ckpt_store_delete(w->store, names[i], err, sizeof err) != CKPT_OK)
            LOG_WARN("ckpt", "event=delete_failed name=%s reason=%s", LOGV(names[i]), LOGV(err));
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sizes);
    return st;
}

static ckpt_status store_all(ckpt_writer *w)
{
    char dir[32], name[96], shard[64], err[1024];
    ckpt_step_name(w->meta.step, dir, sizeof dir);
    /* (messages: err is at most 1023 bytes, why 2048) */
    ckpt_shard_name(w->rank, w->world, w->generation, shard, sizeof shard);
    snprintf(name, sizeof name, "%s/%s", dir, shard);
    double t0 = mono_seconds();
    /* a newer generation's fence: nothing written (ckpt_fence.h), checked
     * at the last moment before the shard becomes visible */
    fence_guard guard = {w->store, w->generation, w->meta.step, "shard", w->may_write, w->gate_ctx};
    ckpt_status st = ckpt_store_put_guarded(w->store, name, w->buf, w->bytes, check_fence, &guard,
                                            err, sizeof err);
    if (st) return fail(w, st, "%s", err);
    cJSON *mine = shard_entry(w, shard);
    char *mine_text = mine ? cJSON_PrintUnformatted(mine) : NULL;
    cJSON_Delete(mine);
    if (!mine_text) return fail(w, CKPT_RETRY, "checkpoint: out of memory%s", "");
    LOG_INFO("ckpt", "event=shard_stored step=%ld rank=%d bytes=%zu seconds=%.3f", w->meta.step,
             w->rank, w->bytes, mono_seconds() - t0);
    /* every rank tells rank 0 its shard is stored; rank 0 collects them */
    char **entries = w->rank == 0 ? calloc((size_t)w->world, sizeof *entries) : NULL;
    if (w->rank == 0 && !entries) {
        free(mine_text);
        return fail(w, CKPT_RETRY, "checkpoint: out of memory%s", "");
    }
    if (w->world > 1) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "ckpt/%ld", w->meta.step);
        if (rdzv_exchange(w->r, prefix, mine_text, strlen(mine_text), w->timeout_s, entries,
                          NULL, err, sizeof err) != 0) {
            free(mine_text);
            free(entries);
            char msg[1200];
            snprintf(msg, sizeof msg, "checkpoint step %ld: %s shards: %s", w->meta.step,
                     w->rank == 0 ? "collecting the" : "telling rank 0 of the", err);
            return fail(w, CKPT_RETRY, "%s", msg);
        }
    } else if (entries) {
        entries[0] = mine_text;
        mine_text = NULL;
    }
    free(mine_text);
    if (w->rank != 0) return CKPT_OK;
    /* rank 0: every shard stored, then the manifest */
    cJSON *man = cJSON_CreateObject(), *shards = cJSON_CreateArray();
    cJSON_AddStringToObject(man, "format", FORMAT);
    cJSON_AddNumberToObject(man, "step", (double)w->meta.step);
    cJSON_AddNumberToObject(man, "generation", (double)w->generation);
    cJSON_AddNumberToObject(man, "epoch", (double)w->meta.epoch);
    cJSON_AddNumberToObject(man, "index", (double)w->meta.index);
    cJSON_AddNumberToObject(man, "imagesDone", (double)w->meta.images_done);
    cJSON_AddNumberToObject(man, "worldSize", w->world);
    cJSON_AddStringToObject(man, "sharding", w->meta.sharding);
    if (w->meta.ema) cJSON_AddTrueToObject(man, "ema");
    if (w->meta.loss_scale > 0) {
        cJSON *ls = cJSON_AddObjectToObject(man, "lossScaler");
        cJSON_AddNumberToObject(ls, "scale", w->meta.loss_scale);
        cJSON_AddNumberToObject(ls, "growthTracker", (double)w->meta.scale_growth_tracker);
        cJSON_AddNumberToObject(ls, "skippedSteps", (double)w->meta.skipped_steps);
    }
    cJSON_AddNumberToObject(man, "params", (double)w->meta.n_params);
    cJSON_AddNumberToObject(man, "blockBytes", CKPT_BLOCK_BYTES);
    cJSON_AddItemToObject(man, "model", cJSON_Parse(w->meta.model));
    if (w->meta.loader[0]) cJSON_AddItemToObject(man, "loader", cJSON_Parse(w->meta.loader));
    cJSON_AddItemToObject(man, "shards", shards);
    for (int q = 0; q < w->world; q++) {
        cJSON_AddItemToArray(shards, cJSON_Parse(entries[q]));
        free(entries[q]);
    }
    free(entries);
    char *out = cJSON_Print(man);
    cJSON_Delete(man);
    if (!out) return fail(w, CKPT_RETRY, "checkpoint: out of memory%s", "");
    char mname[48];
    ckpt_manifest_name(w->generation, mname, sizeof mname);
    snprintf(name, sizeof name, "%s/%s", dir, mname);
    guard.action = "manifest";
    st = ckpt_store_put_guarded(w->store, name, out, strlen(out), check_fence, &guard, err,
                                sizeof err);
    free(out);
    if (st) return fail(w, st, "%s", err);
    atomic_store(&w->stored_step, w->meta.step);
    LOG_INFO("ckpt", "event=saved step=%ld world=%d generation=%ld", w->meta.step, w->world,
             w->generation);
    if ((st = retain(w, err, sizeof err)) != CKPT_OK) return fail(w, st, "%s", err);
    return CKPT_OK;
}

static void *writer_thread(void *arg)
{
    store_all(arg);
    return NULL;
}

ckpt_status ckpt_wait(ckpt_writer *w, double *copy_s, char *err, size_t errlen)
{
    if (w->running) {
        pthread_join(w->thread, NULL);
        w->running = 0;
    }
    if (copy_s) *copy_s = w->copy_s;
    if (w->status) snprintf(err, errlen, "%s", w->why);
    return w->status;
}

double ckpt_copy_seconds(const ckpt_writer *w) { return w->copy_s; }

long ckpt_stored_step(ckpt_writer *w) { return w ? atomic_load(&w->stored_step) : -1; }

ckpt_status ckpt_save(ckpt_writer *w, const ckpt_meta *meta, const ckpt_segment *segs, int n,
                      const vit_ops *ops, char *err, size_t errlen)
{
    ckpt_status st = ckpt_wait(w, NULL, err, errlen);
    if (st) return st;
    double t0 = mono_seconds();
    size_t total = 0;
    const int arrays = meta->ema ? 4 : 3; /* params, m, v (, ema) */
    for (int i = 0; i < n; i++) {
        total += segs[i].hi - segs[i].lo;
        if (meta->ema && !segs[i].ema) {
            snprintf(err, errlen, "checkpoint: segment %d has no EMA", i);
            return CKPT_PERMANENT;
        }
    }
    size_t bytes = (size_t)arrays * total * sizeof(float);
    if (bytes > w->cap) {
        unsigned char *b = realloc(w->buf, bytes ? bytes : 1);
        if (!b) {
            snprintf(err, errlen, "checkpoint: out of host memory for a %zu-byte copy", bytes);
            return CKPT_RETRY;
        }
        w->buf = b;
        w->cap = bytes;
    }
    size_t *lo = realloc(w->lo, sizeof *lo * (size_t)(n ? n : 1));
    if (lo) w->lo = lo;
    size_t *hi = realloc(w->hi, sizeof *hi * (size_t)(n ? n : 1));
    if (hi) w->hi = hi;
    if (!lo || !hi) {
        snprintf(err, errlen, "checkpoint: out of host memory");
        return CKPT_RETRY;
    }
    float *p = (float *)w->buf, *m = p + total, *v = m + total, *e = v + total;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t k = segs[i].hi - segs[i].lo;
        ops->download(p + at, segs[i].params, k * sizeof(float));
        if (segs[i].m) /* NULL: no AdamW state (a frozen parameter): zeros */
            ops->download(m + at, segs[i].m, k * sizeof(float));
        else
            memset(m + at, 0, k * sizeof(float));
        if (segs[i].v)
            ops->download(v + at, segs[i].v, k * sizeof(float));
        else
            memset(v + at, 0, k * sizeof(float));
        if (meta->ema) ops->download(e + at, segs[i].ema, k * sizeof(float));
        w->lo[i] = segs[i].lo;
        w->hi[i] = segs[i].hi;
        at += k;
    }
    w->nseg = (size_t)n;
    w->bytes = bytes;
    w->meta = *meta;
    w->copy_s = mono_seconds() - t0;
    w->status = CKPT_OK;
    w->why[0] = '\0';
    if (pthread_create(&w->thread, NULL, writer_thread, w) != 0) {
        snprintf(err, errlen, "checkpoint: cannot start the upload thread");
        return CKPT_RETRY;
    }
    w->running = 1;
    return CKPT_OK;
}

/* ---------------------------------------------------------------- reader */

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
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) != 0) {
        snprintf(why, len, "format is not %s", FORMAT);
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
     * before fencing, generation 0 */
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(j, "generation");
    if (gen && (!cJSON_IsNumber(gen) || gen->valuedouble < 0 ||
                gen->valuedouble != (double)(long)gen->valuedouble)) {
        snprintf(why, len, "\"generation\" is not a whole number >= 0");
        goto bad;
    }
    m->meta.generation = gen ? (long)gen->valuedouble : 0;
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

/* The newest generation among the manifests in names (a step's objects,
 * "step-N/..."; others are passed over): its generation, -1 when none;
 * *count (may be NULL): how many manifests. */
static long newest_manifest(char *const *names, size_t n, const char *dir, int *count)
{
    long best = -1, gen;
    size_t dl = strlen(dir);
    int c = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(names[i], dir, dl) == 0 && names[i][dl] == '/' &&
            ckpt_object_kind(names[i] + dl + 1, &gen) == CKPT_OBJ_MANIFEST) {
            c++;
            if (gen > best) best = gen;
        }
    if (count) *count = c;
    return best;
}

ckpt_status ckpt_read_step(ckpt_store *store, long step, ckpt_manifest **out, char *err,
                           size_t errlen)
{
    char dir[32], **names = NULL;
    uint64_t *sizes = NULL;
    size_t n = 0;
    ckpt_step_name(step, dir, sizeof dir);
    ckpt_status st = ckpt_store_list_dir(store, dir, &names, &sizes, &n, err, errlen);
    if (st) return st;
    long gen = newest_manifest(names, n, dir, NULL);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sizes);
    if (gen < 0) { /* as a read of the manifest would say */
        snprintf(err, errlen, "checkpoint: %s/manifest.json: no manifest of any generation",
                 dir);
        return CKPT_NOT_FOUND;
    }
    return ckpt_read_manifest(store, step, gen, out, err, errlen);
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
    if (crc_of(p, k) != ck->si->crc[b]) {
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

/* Every shard present with its size and, with read_blocks, every block
 * matching its CRC: one streamed read per shard. */
static ckpt_status verify(ckpt_store *store, const ckpt_manifest *m, char **names,
                          const uint64_t *sizes, size_t n, int read_blocks, char *why, size_t len)
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

typedef struct {
    char **names;
    uint64_t *sizes;
    size_t n;
} objects;

static void objects_free(objects *o)
{
    for (size_t i = 0; i < o->n; i++) free(o->names[i]);
    free(o->names);
    free(o->sizes);
}

/* The steps that have any object, descending; *count. A step left by a
 * fenced generation is not one: no manifest, and every object of it of a
 * generation older than fence (the newest fence; -1 none): what a stale
 * writer had in flight when a newer generation took over (ckpt_fence.h),
 * which no generation can complete any more. Nobody lists it, resumes from
 * it or passes it over; the retention of a newer generation deletes it
 * like any older step. */
static long *steps_of(const objects *o, long fence, size_t *count)
{
    long *steps = malloc(sizeof *steps * (o->n + 1));
    size_t k = 0;
    if (!steps) return NULL;
    long cur = -1, newest_gen = -1;
    int has_manifest = 0;
    for (size_t i = 0; i <= o->n; i++) {
        long s = -1, gen = 0;
        const char *base = NULL;
        if (i < o->n && !step_object(o->names[i], &s, &base)) continue;
        if (i == o->n || s != cur) { /* the step before is whole */
            if (cur >= 0 && (has_manifest || newest_gen >= fence)) steps[k++] = cur;
            if (i == o->n) break;
            cur = s;
            newest_gen = -1;
            has_manifest = 0;
        }
        if (ckpt_object_kind(base, &gen) == CKPT_OBJ_MANIFEST) has_manifest = 1;
        if (gen > newest_gen) newest_gen = gen;
    }
    for (size_t i = 0; i < k / 2; i++) { /* ascending (sorted names) -> descending */
        long t = steps[i];
        steps[i] = steps[k - 1 - i];
        steps[k - 1 - i] = t;
    }
    *count = k;
    return steps;
}

/* The state of one step: CKPT_OK with *out (may be NULL: not wanted), or
 * why it is torn or corrupt; its blocks are read only with read_blocks. */
static ckpt_status check_step(ckpt_store *store, const objects *o, long step, int read_blocks,
                              ckpt_manifest **out, int *manifests, char *why, size_t len)
{
    char dir[32];
    ckpt_step_name(step, dir, sizeof dir);
    /* the newest generation's manifest speaks for the step (ckpt_fence.h) */
    long gen = newest_manifest(o->names, o->n, dir, manifests);
    if (gen < 0) {
        snprintf(why, len, "torn: no manifest (a save that did not finish)");
        return CKPT_NOT_FOUND;
    }
    ckpt_manifest *m = NULL;
    char err[512];
    ckpt_status st = ckpt_read_manifest(store, step, gen, &m, err, sizeof err);
    if (st) {
        snprintf(why, len, "corrupt: %s", err);
        return st;
    }
    if ((st = verify(store, m, o->names, o->sizes, o->n, read_blocks, why, len)) != CKPT_OK) {
        ckpt_manifest_free(m);
        return st;
    }
    if (out)
        *out = m;
    else
        ckpt_manifest_free(m);
    return CKPT_OK;
}

/* Every object under store and the steps they belong to, newest first
 * (*steps malloc'd; free it and objects_free). */
static ckpt_status list_steps(ckpt_store *store, objects *o, long **steps, size_t *ns, char *err,
                              size_t errlen)
{
    long fence = -1;
    ckpt_status st = ckpt_fence_newest(store, &fence, err, errlen);
    if (st) return st;
    if ((st = ckpt_store_list(store, &o->names, &o->sizes, &o->n, err, errlen)) != CKPT_OK)
        return st;
    if (!(*steps = steps_of(o, fence, ns))) {
        objects_free(o);
        snprintf(err, errlen, "checkpoint: out of memory");
        return CKPT_RETRY;
    }
    return CKPT_OK;
}

/* ckpt_find and ckpt_find_candidate: the newest step below `below` that
 * check_step passes. */
static ckpt_status find(ckpt_store *store, long below, int read_blocks, ckpt_manifest **out,
                        char *err, size_t errlen)
{
    objects o = {0};
    long *steps = NULL;
    size_t ns = 0;
    ckpt_status st = list_steps(store, &o, &steps, &ns, err, errlen);
    if (st) return st;
    st = CKPT_NOT_FOUND;
    for (size_t i = 0; i < ns && st == CKPT_NOT_FOUND; i++) {
        char why[1024];
        if (steps[i] >= below) continue;
        ckpt_status s = check_step(store, &o, steps[i], read_blocks, out, NULL, why,
                                   sizeof why);
        if (s == CKPT_OK) {
            st = CKPT_OK;
        } else if (s == CKPT_RETRY) { /* storage failing now: not a verdict on the step */
            snprintf(err, errlen, "%s", why);
            st = CKPT_RETRY;
        } else {
            LOG_WARN("ckpt", "event=skipped step=%ld reason=%s", steps[i], LOGV(why));
        }
    }
    if (st == CKPT_NOT_FOUND) snprintf(err, errlen, "no complete checkpoint");
    free(steps);
    objects_free(&o);
    return st;
}

ckpt_status ckpt_find(ckpt_store *store, ckpt_manifest **out, char *err, size_t errlen)
{
    return find(store, LONG_MAX, 1, out, err, errlen);
}

ckpt_status ckpt_find_candidate(ckpt_store *store, long below, ckpt_manifest **out, char *err,
                                size_t errlen)
{
    return find(store, below, 0, out, err, errlen);
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

ckpt_status ckpt_describe(ckpt_store *store, FILE *out, char *err, size_t errlen)
{
    objects o = {0};
    long *steps = NULL;
    size_t ns = 0;
    ckpt_status st = list_steps(store, &o, &steps, &ns, err, errlen);
    if (st) return st;
    fprintf(out, "%-12s %-9s %s\n", "STEP", "STATE", "DETAIL");
    if (ns == 0) fprintf(out, "(no checkpoints under this URI)\n");
    for (size_t i = 0; i < ns; i++) {
        char why[1024];
        ckpt_manifest *m = NULL;
        int manifests = 0;
        ckpt_status s = check_step(store, &o, steps[i], 1, &m, &manifests, why, sizeof why);
        if (s == CKPT_OK) {
            char gen[64] = ""; /* a generation other than 0, or several manifests */
            if (m->meta.generation > 0 || manifests > 1)
                snprintf(gen, sizeof gen, " generation=%ld%s", m->meta.generation,
                         manifests > 1 ? " (newest of the step's manifests)" : "");
            fprintf(out, "%-12ld %-9s world_size=%d sharding=%s params=%zu epoch=%ld%s%s\n",
                    steps[i], "complete", m->meta.world_size, LOGV(m->meta.sharding),
                    m->meta.n_params, m->meta.epoch, gen, m->meta.ema ? " ema=1" : "");
            ckpt_manifest_free(m);
        } else if (s == CKPT_RETRY) {
            snprintf(err, errlen, "%s", why);
            st = CKPT_RETRY;
            break;
        } else {
            /* one line per step, whatever a corrupt file put in the reason */
            char line[sizeof why * 2];
            log_escape(line, sizeof line, why);
            const char *colon = strchr(line, ':');
            const char *rest = !colon ? line : colon[1] ? colon + 2 : colon + 1;
            fprintf(out, "%-12ld %-9.*s %s\n", steps[i], colon ? (int)(colon - line) : 7, line,
                    rest);
        }
    }
    free(steps);
    objects_free(&o);
    long fence = -1;
    char ferr[512];
    if (st == CKPT_OK && ckpt_fence_newest(store, &fence, ferr, sizeof ferr) == CKPT_OK &&
        fence > 0)
        fprintf(out, "fence: generation %ld (%s/g%ld.json): a writer of an older generation "
                "that sees it stores and deletes nothing more\n", fence, CKPT_FENCE_DIR, fence);
    return st;
}

/* ---------------------------------------------------------------- resume */

vj_err ckpt_status_class(ckpt_status st)
{
    if (st == CKPT_FENCED) return VJ_ERR_RENDEZVOUS; /* an older generation's process */
    return st == CKPT_RETRY || st == CKPT_NOT_FOUND ? VJ_ERR_IO : VJ_ERR_OUTPUT;
}

/* How bad a rank's load outcome is, for agreeing on one: a failing store
 * (stop and retry the run) over a corrupt step (try the one before) over
 * success. */
static int load_severity(ckpt_status st)
{
    return st == CKPT_OK ? 0 : st == CKPT_PERMANENT ? 1 : 2;
}

/* Every rank's outcome of loading attempt a, so that all ranks decide
 * alike: *all the worst one, why its message naming the rank. */
static vj_err agree_on_load(const ckpt_resume_options *o, int a, ckpt_status mine,
                            const char *mine_why, ckpt_status *all, char *why, size_t whylen,
                            char *err, size_t errlen)
{
    *all = mine;
    snprintf(why, whylen, "%s", mine_why);
    if (o->world == 1) return VJ_OK;
    char prefix[48], val[1100];
    char **vals = calloc((size_t)o->world, sizeof *vals);
    if (!vals) {
        snprintf(err, errlen, "checkpoint: out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    snprintf(prefix, sizeof prefix, "ckpt/loaded/%d", a);
    int n = snprintf(val, sizeof val, "%d %s", (int)mine, mine ? mine_why : "");
    if (rdzv_exchange(o->r, prefix, val, (size_t)(n < (int)sizeof val ? n : (int)sizeof val - 1),
                      o->timeout_s, vals, NULL, err, errlen) != 0) {
        free(vals);
        return VJ_ERR_RENDEZVOUS;
    }
    for (int q = 0; q < o->world; q++) {
        char *rest = NULL;
        ckpt_status theirs = (ckpt_status)strtol(vals[q], &rest, 10);
        if (load_severity(theirs) > load_severity(*all)) {
            *all = theirs;
            snprintf(why, whylen, "rank %d: %s", q, *rest == ' ' ? rest + 1 : rest);
        }
    }
    rdzv_exchange_free(o->r, vals);
    free(vals);
    return VJ_OK;
}

/* Attempt a's step: rank 0 finds it below `below` and posts it (-1: none)
 * with its manifest's generation and the writer generation *gen (rank 0's
 * ckpt_fence_enter); the others read them and that very manifest. */
static vj_err pick_step(const ckpt_resume_options *o, int a, long below, long *step, long *gen,
                        ckpt_manifest **man, char *err, size_t errlen)
{
    char key[48], val[96];
    snprintf(key, sizeof key, "ckpt/resume/%d", a);
    ckpt_status st;
    if (o->rank == 0) {
        st = ckpt_find_candidate(o->store, below, man, err, errlen);
        if (st != CKPT_OK && st != CKPT_NOT_FOUND) return ckpt_status_class(st);
        *step = st == CKPT_OK ? ckpt_manifest_meta(*man)->step : -1;
        int n = snprintf(val, sizeof val, "%ld %ld %ld", *step,
                         st == CKPT_OK ? ckpt_manifest_meta(*man)->generation : 0, *gen);
        if (o->world > 1 && rdzv_set(o->r, key, val, (size_t)n, NULL, err, errlen) != 0)
            return VJ_ERR_RENDEZVOUS;
        return VJ_OK;
    }
    void *v = NULL;
    size_t len = 0;
    if (rdzv_get(o->r, key, o->timeout_s, &v, &len, NULL, err, errlen) != 0)
        return VJ_ERR_RENDEZVOUS;
    snprintf(val, sizeof val, "%.*s", (int)(len < 95 ? len : 95), (char *)v);
    free(v);
    long mgen = 0;
    if (sscanf(val, "%ld %ld %ld", step, &mgen, gen) != 3) {
        snprintf(err, errlen, "checkpoint: rank 0 posted '%s' for the step to resume", val);
        return VJ_ERR_RENDEZVOUS;
    }
    if (*step >= 0 &&
        (st = ckpt_read_manifest(o->store, *step, mgen, man, err, errlen)) != CKPT_OK)
        return ckpt_status_class(st);
    return VJ_OK;
}

vj_err ckpt_resume(const ckpt_resume_options *o, ckpt_meta *meta, char *err, size_t errlen)
{
    long below = LONG_MAX, step = -1, gen = 0;
    memset(meta, 0, sizeof *meta);
    meta->step = -1;
    if (o->rank == 0) { /* the fence first: an older generation deletes nothing from now */
        ckpt_status st = ckpt_fence_enter(o->store, o->restart, &gen, err, errlen);
        if (st) return ckpt_status_class(st);
    }
    for (int a = 0;; a++) {
        ckpt_manifest *man = NULL;
        vj_err rc = pick_step(o, a, below, &step, &gen, &man, err, errlen);
        if (rc || step < 0) {
            ckpt_manifest_free(man);
            if (rc) return rc;
            break;
        }
        /* each attempt must go below the step passed over before it: the
         * same step again would be loaded, found corrupt and offered again
         * for ever (a retry that cannot help), so it ends here instead */
        if (step >= below) {
            snprintf(err, errlen, "checkpoint.uri=%s: step %ld was offered again after it was "
                     "passed over as corrupt (the search must go below step %ld); giving up "
                     "instead of loading it again", o->uri, step, below);
            ckpt_manifest_free(man);
            return VJ_ERR_OUTPUT;
        }
        const ckpt_meta *m = ckpt_manifest_meta(man);
        if (strcmp(m->model, o->model_json) != 0 || m->n_params != o->n_params) {
            snprintf(err, errlen, "checkpoint.uri=%s: step %ld was written for the model %s "
                     "(%zu parameters), not this run's %s (%zu); use another checkpoint.uri",
                     o->uri, step, m->model, m->n_params, o->model_json, o->n_params);
            ckpt_manifest_free(man);
            return VJ_ERR_CONFIG;
        }
        char why[1200] = "", all_why[1300];
        ckpt_status all = CKPT_OK;
        ckpt_status st = o->load(o->ctx, o->store, man, why, sizeof why);
        rc = agree_on_load(o, a, st, why, &all, all_why, sizeof all_why, err, errlen);
        if (!rc && all == CKPT_OK) *meta = *m;
        ckpt_manifest_free(man);
        if (rc) return rc;
        if (all == CKPT_OK) break;
        if (all != CKPT_PERMANENT) { /* storage failing now: not a verdict on the step */
            snprintf(err, errlen, "%s", all_why);
            return ckpt_status_class(all);
        }
        if (o->rank == 0)
            LOG_WARN("ckpt", "event=skipped step=%ld reason=%s", step,
                     LOGVF("corrupt: %s", all_why));
        below = step;
    }
    if (o->generation) *o->generation = gen;
    if (meta->step >= 0)
        LOG_INFO("ckpt", "event=resumed step=%ld from_world_size=%d from_sharding=%s "
                 "world_size=%d epoch=%ld index=%ld from_generation=%ld generation=%ld",
                 meta->step, meta->world_size, LOGV(meta->sharding), o->world, meta->epoch,
                 meta->index, meta->generation, gen);
    else if (o->rank == 0)
        LOG_INFO("ckpt", "event=fresh_start uri=%s reason=\"no complete checkpoint\"",
                 LOGV(o->uri));
    return VJ_OK;
}
