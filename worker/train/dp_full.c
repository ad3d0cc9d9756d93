/* worker/train/dp_full.c - training.sharding=full (FSDP): each rank holds a
 * shard of the parameters, gradients and AdamW state (fsdp.h's layout); the
 * model asks for one unit at a time through the shard's hooks, gathered
 * from every rank, and hands its gradients back to be reduce-scattered.
 * Must not: run collectives itself except through fsdp.c (whose thread
 * owns the communicator between dp_sync calls). */
#include "dp_impl.h"

#include <stdio.h>
#include <stdlib.h>

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
    double norm;
    vj_err rc = dp_global_norm(d, fsdp_grads(d->fsdp), &norm, err, errlen);
    if (rc) return rc;
    *res = optim_step_in(d->opt, d->model, d->ops, step, norm, fsdp_params(d->fsdp),
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

const dp_impl dp_full = {.name = "full",
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
                         .free = free_full};
