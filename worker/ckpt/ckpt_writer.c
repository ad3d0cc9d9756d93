/* worker/ckpt/ckpt_writer.c - a checkpoint's save (ckpt.h): the host copy
 * on the caller's thread, then on the writer's own thread this rank's
 * shard, the ranks' report to rank 0 through the rendezvous store, rank
 * 0's manifest and the retention of the checkpoint.keep newest complete
 * steps; the fence asked before every put and delete and again after every
 * put (ckpt_fence.h).
 *
 * Owns: the writer (ckpt_writer_*, ckpt_save, ckpt_wait), the manifest's
 * writing (its fields, the shard entries with their CRCs) and retention.
 * Must not: read a checkpoint back (ckpt_reader.c), pick a step to resume
 * (ckpt_list.c, ckpt_resume.c), or make training wait on storage (only
 * the host copy runs on the caller's thread).
 */
#include "ckpt.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_fence.h"
#include "ckpt_internal.h"
#include "log.h"
#include "util.h"

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
        cJSON_AddItemToArray(crcs, cJSON_CreateNumber(ckpt_crc(w->buf + off, n)));
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
        if (ckpt_step_object(names[i], &step, &base) && step != last &&
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
        if (!ckpt_step_object(names[i], &step, &base) || step >= oldest_kept) continue;
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
    cJSON_AddStringToObject(man, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(man, "step", (double)w->meta.step);
    cJSON_AddNumberToObject(man, "generation", (double)w->generation);
    if (w->meta.total_steps > 0)
        cJSON_AddNumberToObject(man, "totalSteps", (double)w->meta.total_steps);
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
