/* worker/train/fsdp.c - see fsdp.h. The main thread (the model's hooks) asks;
 * the communication thread runs the collectives, one at a time, in order
 * of asking; both meet under one mutex, with sequence numbers saying
 * what has finished. */
#include "fsdp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exitcode.h"
#include "log.h"

typedef enum { TASK_GATHER, TASK_REDUCE } task_kind;

typedef struct {
    task_kind kind;
    int unit, slot;
    long seq;
} task;

#define QUEUE_CAP 16 /* the hooks never have more than 4 tasks out */

struct fsdp {
    comm *comm;
    const vit_ops *ops;
    int rank, world, n_units;
    size_t *lo;       /* n_units + 1 unit bounds in the flat vector */
    size_t *chunk;    /* each unit's chunk: ceil(length / world) */
    size_t *at;       /* where each unit's chunk starts in the shard */
    size_t shard_len, max_padded;
    float *params, *grads;     /* the shard */
    float *pslot[2], *gslot[2]; /* whole units: max_padded each */
    int pslot_unit[2];         /* the unit a parameter slot holds (or is being
                                  gathered into it), -1: none */
    long pslot_seq[2];         /* the task that fills it */
    int pcur;                  /* the slot the model reads now */
    long gslot_seq[2];         /* the reduce-scatter that last read it */
    int gslot_unit[2], gnext;
    model_shard hooks;

    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task q[QUEUE_CAP];
    int qhead, qlen;
    long next_seq, done_seq;
    int quit, failed;
    char why[1024];
};

/* ---- the communication thread ---- */

static int run_task(fsdp *f, const task *t, char *err, size_t errlen)
{
    const size_t c = f->chunk[t->unit];
    if (t->kind == TASK_GATHER) {
        float *buf = f->pslot[t->slot];
        f->ops->copy(buf + (size_t)f->rank * c, f->params + f->at[t->unit], c);
        return comm_allgather(f->comm, buf + (size_t)f->rank * c, buf, c, COMM_F32, err, errlen);
    }
    float *buf = f->gslot[t->slot];
    if (comm_reduce_scatter_sum(f->comm, buf, c, err, errlen) != 0) return -1;
    f->ops->add(f->grads + f->at[t->unit], buf + (size_t)f->rank * c, c);
    return 0;
}

static void *comm_thread(void *arg)
{
    fsdp *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (f->qlen == 0 && !f->quit) pthread_cond_wait(&f->cv, &f->mu);
        if (f->qlen == 0) break; /* quit, and nothing left */
        task t = f->q[f->qhead];
        int failed = f->failed;
        pthread_mutex_unlock(&f->mu);
        char err[512] = "";
        int rc = failed ? 0 : run_task(f, &t, err, sizeof err);
        pthread_mutex_lock(&f->mu);
        f->qhead = (f->qhead + 1) % QUEUE_CAP;
        f->qlen--;
        if (rc != 0 && !f->failed) {
            char unit[32];
            if (t.unit == 0 || t.unit == f->n_units - 1)
                snprintf(unit, sizeof unit, "the %s", t.unit == 0 ? "stem" : "head");
            else
                snprintf(unit, sizeof unit, "block %d", t.unit - 1);
            f->failed = 1;
            snprintf(f->why, sizeof f->why, "sharding full: %s of %s: %s",
                     t.kind == TASK_GATHER ? "gathering the parameters"
                                           : "reduce-scattering the gradients", unit, err);
        }
        f->done_seq = t.seq;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* With the mutex held: queue a task, returning its sequence number. */
static long enqueue(fsdp *f, task_kind kind, int unit, int slot)
{
    while (f->qlen == QUEUE_CAP) pthread_cond_wait(&f->cv, &f->mu);
    task *t = &f->q[(f->qhead + f->qlen) % QUEUE_CAP];
    t->kind = kind;
    t->unit = unit;
    t->slot = slot;
    t->seq = ++f->next_seq;
    f->qlen++;
    pthread_cond_broadcast(&f->cv);
    return t->seq;
}

/* With the mutex held: wait until task seq (and all before it) finished. */
static void wait_for(fsdp *f, long seq)
{
    while (f->done_seq < seq) pthread_cond_wait(&f->cv, &f->mu);
}

/* ---- the model's hooks ---- */

static float *hook_params(void *ctx, int u, int backward)
{
    fsdp *f = ctx;
    pthread_mutex_lock(&f->mu);
    int s = f->pslot_unit[0] == u ? 0 : f->pslot_unit[1] == u ? 1 : -1;
    if (s < 0) { /* not kept, not prefetched: the model is done with the other slot */
        s = 1 - f->pcur;
        f->pslot_unit[s] = u;
        f->pslot_seq[s] = enqueue(f, TASK_GATHER, u, s);
    }
    f->pcur = s;
    /* prefetch the unit this pass computes next, while this one computes */
    int next = backward ? u - 1 : u + 1;
    if (next >= 0 && next < f->n_units && f->pslot_unit[1 - s] != next) {
        f->pslot_unit[1 - s] = next;
        f->pslot_seq[1 - s] = enqueue(f, TASK_GATHER, next, 1 - s);
    }
    wait_for(f, f->pslot_seq[s]);
    pthread_mutex_unlock(&f->mu);
    return f->pslot[s];
}

static float *hook_grads(void *ctx, int u)
{
    fsdp *f = ctx;
    pthread_mutex_lock(&f->mu);
    int g = f->gnext;
    f->gnext = 1 - g;
    wait_for(f, f->gslot_seq[g]); /* its last reduce-scatter has read it */
    f->gslot_unit[g] = u;
    pthread_mutex_unlock(&f->mu);
    f->ops->zero(f->gslot[g], f->chunk[u] * (size_t)f->world);
    return f->gslot[g];
}

static void hook_grads_done(void *ctx, int u)
{
    fsdp *f = ctx;
    pthread_mutex_lock(&f->mu);
    int g = f->gslot_unit[1 - f->gnext] == u ? 1 - f->gnext : f->gnext;
    f->gslot_seq[g] = enqueue(f, TASK_REDUCE, u, g);
    pthread_mutex_unlock(&f->mu);
}

static int hook_read(void *ctx, float *host)
{
    fsdp *f = ctx;
    pthread_mutex_lock(&f->mu);
    for (int u = 0; u < f->n_units && !f->failed; u++) {
        wait_for(f, f->next_seq); /* nothing in flight uses slot 0 */
        f->pslot_unit[0] = u;
        f->pcur = 0;
        f->pslot_seq[0] = enqueue(f, TASK_GATHER, u, 0);
        wait_for(f, f->pslot_seq[0]);
        if (!f->failed)
            f->ops->download(host + f->lo[u], f->pslot[0],
                             (f->lo[u + 1] - f->lo[u]) * sizeof(float));
    }
    int rc = f->failed ? -1 : 0;
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void hook_write(void *ctx, const float *host)
{
    fsdp *f = ctx;
    pthread_mutex_lock(&f->mu);
    wait_for(f, f->next_seq);
    for (int u = 0; u < f->n_units; u++) {
        const size_t n = f->lo[u + 1] - f->lo[u], c = f->chunk[u], first = (size_t)f->rank * c;
        size_t have = first < n ? n - first : 0; /* this rank's chunk; the padding is zero */
        if (have > c) have = c;
        if (have)
            f->ops->upload(f->params + f->at[u], host + f->lo[u] + first, have * sizeof(float));
        f->ops->zero(f->params + f->at[u] + have, c - have);
    }
    f->pslot_unit[0] = f->pslot_unit[1] = -1;
    pthread_mutex_unlock(&f->mu);
}

/* ---- the rest of fsdp.h ---- */

/* Per unit: its chunk, its start in the shard; the shard's length and the
 * largest padded unit. */
static void layout(const size_t *bounds, int n_units, int world, size_t *chunk, size_t *at,
                   size_t *shard_len, size_t *max_padded)
{
    size_t len = 0, maxp = 0;
    for (int u = 0; u < n_units; u++) {
        size_t n = bounds[u + 1] - bounds[u], c = (n + (size_t)world - 1) / (size_t)world;
        if (chunk) chunk[u] = c;
        if (at) at[u] = len;
        len += c;
        if (c * (size_t)world > maxp) maxp = c * (size_t)world;
    }
    *shard_len = len;
    *max_padded = maxp;
}

void fsdp_memory_bytes(const size_t *bounds, int n_units, int world, size_t *param_bytes,
                       size_t *grad_bytes)
{
    size_t len, maxp;
    layout(bounds, n_units, world, NULL, NULL, &len, &maxp);
    *param_bytes = (len + 2 * maxp) * sizeof(float);
    *grad_bytes = (len + 2 * maxp) * sizeof(float);
}

size_t fsdp_slot_bytes(const size_t *bounds, int n_units, int world)
{
    size_t len, maxp;
    layout(bounds, n_units, world, NULL, NULL, &len, &maxp);
    return 4 * maxp * sizeof(float);
}

size_t fsdp_planned_shard_len(const size_t *bounds, int n_units, int world)
{
    size_t len, maxp;
    layout(bounds, n_units, world, NULL, NULL, &len, &maxp);
    return len;
}

int fsdp_new(fsdp **out, comm *c, const vit_ops *ops, const size_t *bounds, int n_units,
             char *err, size_t errlen)
{
    fsdp *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "sharding full: out of host memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    f->comm = c;
    f->ops = ops;
    f->rank = comm_rank(c);
    f->world = comm_world_size(c);
    f->n_units = n_units;
    f->lo = malloc(sizeof *f->lo * ((size_t)n_units + 1));
    f->chunk = malloc(sizeof *f->chunk * (size_t)n_units);
    f->at = malloc(sizeof *f->at * (size_t)n_units);
    if (!f->lo || !f->chunk || !f->at) {
        fsdp_free(f);
        snprintf(err, errlen, "sharding full: out of host memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    memcpy(f->lo, bounds, sizeof *f->lo * ((size_t)n_units + 1));
    layout(bounds, n_units, f->world, f->chunk, f->at, &f->shard_len, &f->max_padded);
    f->params = ops->alloc(f->shard_len * sizeof(float));
    f->grads = ops->alloc(f->shard_len * sizeof(float));
    for (int s = 0; s < 2; s++) {
        f->pslot[s] = ops->alloc(f->max_padded * sizeof(float));
        f->gslot[s] = ops->alloc(f->max_padded * sizeof(float));
        f->pslot_unit[s] = f->gslot_unit[s] = -1;
    }
    if (!f->params || !f->grads || !f->pslot[0] || !f->pslot[1] || !f->gslot[0] ||
        !f->gslot[1]) {
        size_t pb, gb;
        fsdp_memory_bytes(bounds, n_units, f->world, &pb, &gb);
        fsdp_free(f);
        snprintf(err, errlen, "sharding full: the shard and the unit buffers need %zu bytes of "
                 "%s memory and the backend could not allocate them", pb + gb,
                 ops->gpu ? "GPU" : "host");
        return VJ_ERR_TOO_LARGE;
    }
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    if (pthread_create(&f->thread, NULL, comm_thread, f) != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
        fsdp_free(f);
        snprintf(err, errlen, "sharding full: cannot start the communication thread");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    f->started = 1;
    f->hooks = (model_shard){.ctx = f,
                             .params = hook_params,
                             .grads = hook_grads,
                             .grads_done = hook_grads_done,
                             .read = hook_read,
                             .write = hook_write};
    *out = f;
    return 0;
}

void fsdp_free(fsdp *f)
{
    if (!f) return;
    if (f->started) {
        pthread_mutex_lock(&f->mu);
        f->quit = 1;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv);
    }
    if (f->ops) {
        f->ops->release(f->params);
        f->ops->release(f->grads);
        for (int s = 0; s < 2; s++) {
            f->ops->release(f->pslot[s]);
            f->ops->release(f->gslot[s]);
        }
    }
    free(f->lo);
    free(f->chunk);
    free(f->at);
    free(f);
}

const model_shard *fsdp_hooks(fsdp *f) { return &f->hooks; }
size_t fsdp_shard_len(const fsdp *f) { return f->shard_len; }
float *fsdp_params(fsdp *f) { return f->params; }
float *fsdp_grads(fsdp *f) { return f->grads; }

void fsdp_shard_spans(const fsdp *f, size_t *lo, size_t *hi, size_t *at)
{
    for (int u = 0; u < f->n_units; u++) {
        size_t a = f->lo[u] + (size_t)f->rank * f->chunk[u], b = a + f->chunk[u];
        if (b > f->lo[u + 1]) b = f->lo[u + 1]; /* the padding has no state */
        if (a > b) a = b;
        lo[u] = a;
        hi[u] = b;
        at[u] = f->at[u];
    }
}

void fsdp_zero_grads(fsdp *f)
{
    pthread_mutex_lock(&f->mu);
    wait_for(f, f->next_seq);
    pthread_mutex_unlock(&f->mu);
    f->ops->zero(f->grads, f->shard_len);
}

void fsdp_params_changed(fsdp *f)
{
    pthread_mutex_lock(&f->mu);
    wait_for(f, f->next_seq);
    f->pslot_unit[0] = f->pslot_unit[1] = -1;
    pthread_mutex_unlock(&f->mu);
}

int fsdp_sync(fsdp *f, char *err, size_t errlen)
{
    pthread_mutex_lock(&f->mu);
    wait_for(f, f->next_seq);
    int rc = f->failed ? -1 : 0;
    if (rc) snprintf(err, errlen, "%s", f->why);
    pthread_mutex_unlock(&f->mu);
    return rc;
}
