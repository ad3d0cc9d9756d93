/* worker/train/dp_grad_op.c - training.sharding=grad-op (ZeRO-2): every rank
 * holds every parameter, but the gradients are reduce-scattered and each
 * rank keeps the AdamW state of, and updates, only its slice [lo, lo +
 * slice) of the padded flat vector; the updated slices are all-gathered.
 * Must not: keep state beyond the model and the optimizer (dp.h). */
#include "dp_impl.h"


static dp_memory memory(const dp *d, size_t n)
{
    const size_t w = (size_t)d->world, slice = (n + w - 1) / w;
    size_t mine = (size_t)d->rank * slice < n ? n - (size_t)d->rank * slice : 0;
    if (mine > slice) mine = slice;
    return (dp_memory){.param_bytes = slice * w * sizeof(float),
                       .grad_bytes = slice * w * sizeof(float),
                       .optim_bytes = optim_memory_bytes(mine),
                       .own_bytes = optim_memory_bytes(mine)};
}

static vj_err attach(dp *d, char *err, size_t errlen)
{
    const size_t n = model_num_params(d->model);
    d->slice = model_padded_params(d->model) / (size_t)d->world;
    d->lo = (size_t)d->rank * d->slice;
    size_t lo = d->lo < n ? d->lo : n, hi = d->lo + d->slice < n ? d->lo + d->slice : n;
    const optim_span mine = {lo, hi, lo}; /* the padding has no state */
    return dp_optim_new(d, &mine, 1, err, errlen);
}

static vj_err update(dp *d, long step, optim_result *res, char *err, size_t errlen)
{
    float *g = model_grads(d->model), *p = model_params(d->model);
    if (comm_reduce_scatter_sum(d->comm, g, d->slice, err, errlen) != 0) return VJ_ERR_PEER_LOST;
    double norm;
    vj_err rc = dp_global_norm(d, g, &norm, err, errlen);
    if (rc) return rc;
    *res = optim_step_in(d->opt, d->model, d->ops, step, norm, p, g);
    if (comm_allgather(d->comm, p + d->lo, p, d->slice, COMM_F32, err, errlen) != 0)
        return VJ_ERR_PEER_LOST;
    model_params_refreshed(d->model);
    return VJ_OK;
}

/* each rank's slice changed: gathered as after a step */
static vj_err refresh(dp *d, char *err, size_t errlen)
{
    float *p = model_params(d->model);
    if (comm_allgather(d->comm, p + d->lo, p, d->slice, COMM_F32, err, errlen) != 0)
        return VJ_ERR_PEER_LOST;
    model_params_refreshed(d->model);
    return VJ_OK;
}

static void save_range(const dp *d, size_t *lo, size_t *hi)
{
    *lo = 0; /* the optimizer's slice is this rank's part */
    *hi = model_num_params(d->model);
}

const dp_impl dp_grad_op = {.name = "grad-op",
                            .memory = memory,
                            .attach = attach,
                            .update = update,
                            .save_range = save_range,
                            .refresh = refresh};
