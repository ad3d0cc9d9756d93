/* worker/train/dp_full.c - training.sharding=full (FSDP): each rank holds a
 * shard of the parameters, gradients and AdamW state (fsdp.h's layout); the
 * model asks for one unit at a time through the shard's hooks, gathered
 * from every rank, and hands its gradients back to be reduce-scattered.
 * The planner's probe (dp_probe_schedule) drives the same shard and hooks
 * with spins for the compute.
 * Must not: run collectives itself except through fsdp.c (whose thread
 * owns the communicator between dp_sync calls). */
#include "dp_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "util.h"

static vj_err plan(dp *d, model_options *mo, char *err, size_t errlen)
{
    const int max = d->mc->depth + 3;
    d->bounds = malloc(sizeof *d->bounds * (size_t)max);
    if (!d->bounds || (d->units = model_unit_bounds(d->mc, d->bounds, max)) == 0) {
        snprintf(err, errlen, "out of host memory planning the shards");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    static const model_shard planned; /* the model plans no parameters of its own */
    mo->shard = &planned;
    mo->pad_multiple = 1;
    return VJ_OK;
}

static dp_memory memory(const dp *d, size_t n)
{
    (void)n;
    size_t pb, gb;
    fsdp_memory_bytes(d->bounds, d->units, d->world, &pb, &gb);
    size_t mine = optim_memory_bytes(fsdp_planned_shard_len(d->bounds, d->units, d->world));
    return (dp_memory){.param_bytes = pb, .grad_bytes = gb, .optim_bytes = mine,
                       .own_bytes = pb + gb + mine,
                       .unit_bytes = fsdp_slot_bytes(d->bounds, d->units, d->world)};
}

/* the planner's: per micro-batch each of the model's units gathered for
 * the forward, each but the last again for the backward (the last is still
 * held), each reduce-scattered (the bytes: three (W-1)/W of the
 * parameters); then the loss's and the norm's all-gathers. Each call is
 * one of the kind the planner times for it (on the communication thread,
 * its bytes included: dp_cost) */
static dp_cost cost(const dp_step *s)
{
    const double f = (double)(s->world - 1) / s->world, bytes = (double)s->n_params * sizeof(float);
    const double calls = (double)s->accum * (3 * s->units - 1) + 2;
    return (dp_cost){.bus_bytes = 3 * f * bytes * s->accum, .calls = calls, .call_units = calls};
}

static vj_err prepare(dp *d, model_options *mo, char *err, size_t errlen)
{
    vj_err rc = fsdp_new(&d->fsdp, d->comm, d->ops, d->bounds, d->units, err, errlen);
    if (rc) return rc;
    mo->shard = fsdp_hooks(d->fsdp);
    return VJ_OK;
}

static vj_err attach(dp *d, char *err, size_t errlen)
{
    const size_t u = (size_t)d->units;
    size_t *lo = malloc(sizeof *lo * 3 * u);
    optim_span *spans = malloc(sizeof *spans * u);
    if (!lo || !spans) {
        free(lo);
        free(spans);
        snprintf(err, errlen, "out of host memory planning the shards");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    fsdp_shard_spans(d->fsdp, lo, lo + u, lo + 2 * u);
    for (size_t i = 0; i < u; i++) spans[i] = (optim_span){lo[i], lo[u + i], lo[2 * u + i]};
    vj_err rc = dp_optim_new(d, spans, d->units, err, errlen);
    free(lo);
    free(spans);
    d->slice = fsdp_shard_len(d->fsdp);
    return rc;
}

static void zero_grads(dp *d) { fsdp_zero_grads(d->fsdp); }

static vj_err sync(dp *d, char *err, size_t errlen)
{
    return fsdp_sync(d->fsdp, err, errlen) != 0 ? VJ_ERR_PEER_LOST : VJ_OK;
}

/* the gradients are already reduce-scattered into the shard (dp_sync) */
static vj_err update(dp *d, long step, optim_result *res, char *err, size_t errlen)
{
    double sq;
    vj_err rc = dp_global_sq(d, fsdp_grads(d->fsdp), &sq, err, errlen);
    if (rc) return rc;
    *res = optim_step_in(d->opt, d->model, d->ops, step, sq, fsdp_params(d->fsdp),
                         fsdp_grads(d->fsdp));
    fsdp_params_changed(d->fsdp);
    return VJ_OK;
}

static void save_range(const dp *d, size_t *lo, size_t *hi)
{
    *lo = 0; /* the shard's spans are this rank's part */
    *hi = model_num_params(d->model);
}

static float *params(dp *d) { return fsdp_params(d->fsdp); }

/* the shard changed: the units are gathered again when next computed */
static vj_err refresh(dp *d, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    fsdp_params_changed(d->fsdp);
    return VJ_OK;
}

/* rank 0 reads every parameter unit by unit: the other ranks gather with it */
static vj_err export_part(dp *d, char *err, size_t errlen)
{
    float *scratch = malloc(sizeof(float) * model_num_params(d->model));
    if (!scratch) {
        snprintf(err, errlen, "out of host memory gathering the parameters to export");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    int bad = model_read_params(d->model, scratch);
    free(scratch);
    return bad ? sync(d, err, errlen) : VJ_OK;
}

static void free_full(dp *d)
{
    fsdp_free(d->fsdp);
    free(d->bounds);
}

/* ---- the planner's probe (dp_probe_schedule) ---- */

#define PROBE_MAX_STEPS 64

/* fsdp.c's shard of mc's units, its hooks asked as model.c asks them: per
 * micro-batch each unit's parameters for the forward, then from the last
 * unit down its parameters, a gradient buffer, the compute and the
 * gradients handed back; then fsdp_sync, the loss's and the clipping
 * norm's all-gathers (dp_sum, the norm), and the parameters changed (the
 * optimizer's step). */
static int probe(const dp_options *o, const dp_probe *pr, double *exposed_s, char *err,
                 size_t errlen)
{
    const int U = o->mc->depth + 2;
    if (pr->n_units != U) {
        snprintf(err, errlen, "full's probe: %d units given, the model has %d", pr->n_units, U);
        return -1;
    }
    const int world = comm_world_size(o->comm), rank = comm_rank(o->comm);
    size_t *bounds = malloc(sizeof *bounds * (size_t)(U + 1));
    float *one = calloc((size_t)world, sizeof(float));
    fsdp *f = NULL;
    int bad = !bounds || !one || model_unit_bounds(o->mc, bounds, U + 1) != U;
    if (bad) snprintf(err, errlen, "full's probe: out of host memory");
    bad = bad || fsdp_new(&f, o->comm, o->ops, bounds, U, err, errlen) != 0;
    const model_shard *h = bad ? NULL : fsdp_hooks(f);
    double spun = 0;
    for (int u = 0; u < U; u++) spun += pr->accum * (pr->fwd_s[u] + pr->bwd_s[u]);
    double t[PROBE_MAX_STEPS];
    int n = 0;
    const double start = mono_seconds();
    float more = 1; /* rank 0's word after each step: every rank runs as many */
    for (int step = 0; !bad && more > 0; step++) {
        const double t0 = mono_seconds();
        fsdp_zero_grads(f);
        for (int a = 0; a < pr->accum; a++) {
            for (int u = 0; u < U; u++) {
                h->params(h->ctx, u, 0);
                mono_spin(pr->fwd_s[u]);
            }
            for (int u = U - 1; u >= 0; u--) {
                h->params(h->ctx, u, 1);
                h->grads(h->ctx, u);
                mono_spin(pr->bwd_s[u]);
                h->grads_done(h->ctx, u);
            }
        }
        bad = fsdp_sync(f, err, errlen) != 0;
        for (int i = 0; !bad && i < 2; i++)
            bad = comm_allgather(o->comm, one + rank, one, 1, COMM_F32, err, errlen) != 0;
        fsdp_params_changed(f);
        if (step > 0) t[n++] = mono_seconds() - t0 - spun;
        more = n < PROBE_MAX_STEPS && (n < 3 || mono_seconds() - start < pr->seconds);
        bad = bad || comm_broadcast(o->comm, &more, 1, COMM_F32, 0, err, errlen) != 0;
    }
    if (!bad) {
        const double mid = median_of(t, n);
        *exposed_s = mid > 0 ? mid : 0;
    }
    fsdp_free(f);
    free(bounds);
    free(one);
    return bad ? -1 : 0;
}

const dp_impl dp_full = {.name = "full",
                         .shards = 2,
                         .plan = plan,
                         .memory = memory,
                         .prepare = prepare,
                         .attach = attach,
                         .zero_grads = zero_grads,
                         .sync = sync,
                         .update = update,
                         .save_range = save_range,
                         .params = params,
                         .refresh = refresh,
                         .export_part = export_part,
                         .free = free_full,
                         .probe = probe,
                         .cost = cost};
