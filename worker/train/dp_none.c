/* worker/train/dp_none.c - training.sharding=none (DDP): every rank holds
 * every parameter, gradient and AdamW value; after backward the gradients
 * are all-reduced and every rank takes the same step. In a checkpoint rank
 * r saves the r-th of world equal ranges.
 * Must not: keep state beyond the model and the optimizer (dp.h). */
#include "dp_impl.h"


static dp_memory memory(const dp *d, size_t n)
{
    const size_t padded = (n + (size_t)d->world - 1) / (size_t)d->world * (size_t)d->world;
    return (dp_memory){.param_bytes = padded * sizeof(float),
                       .grad_bytes = padded * sizeof(float),
                       .optim_bytes = optim_memory_bytes(n),
                       .own_bytes = optim_memory_bytes(n)};
}

/* the planner's: per step one all-reduce of the gradients (one per
 * trainable span with a freeze), and dp_sum's all-gather of the loss (half
 * an all-reduce's latency) */
static dp_cost cost(const dp_step *s)
{
    const double f = (double)(s->world - 1) / s->world, bytes = (double)s->n_params * sizeof(float);
    const double allreduce = s->spans > 0 ? s->spans : 1, half = 1;
    return (dp_cost){.bus_bytes = 2 * f * bytes, .calls = allreduce + half,
                     .call_units = allreduce + half / 2};
}

static vj_err attach(dp *d, char *err, size_t errlen)
{
    d->slice = model_padded_params(d->model);
    const optim_span all = {0, model_num_params(d->model), 0};
    return dp_optim_new(d, &all, 1, err, errlen);
}

static vj_err update(dp *d, long step, optim_result *res, char *err, size_t errlen)
{
    /* training.freeze: only the optimizer's spans, the trainable runs, are
     * all-reduced; without it the one span and the padding, in one call */
    float *g = model_grads(d->model);
    const int n = optim_num_spans(d->opt);
    size_t so;
    optim_span one = n == 1 ? optim_span_at(d->opt, 0, &so) : (optim_span){0, 0, 0};
    if (n == 1 && one.lo == 0 && one.hi == model_num_params(d->model)) {
        if (comm_allreduce_sum(d->comm, g, model_padded_params(d->model), err, errlen) != 0)
            return VJ_ERR_PEER_LOST;
    } else {
        for (int i = 0; i < n; i++) {
            optim_span sp = optim_span_at(d->opt, i, &so);
            if (comm_allreduce_sum(d->comm, g + sp.at, sp.hi - sp.lo, err, errlen) != 0)
                return VJ_ERR_PEER_LOST;
        }
    }
    *res = optim_step_queue(d->opt, d->model, d->ops, step); /* the norm read later */
    return VJ_OK;
}

/* every rank holds every value: only the bf16 copy to derive again */
static vj_err refresh(dp *d, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    model_params_refreshed(d->model);
    return VJ_OK;
}

static void save_range(const dp *d, size_t *lo, size_t *hi)
{
    const size_t np = model_num_params(d->model);
    const size_t c = (np + (size_t)d->world - 1) / (size_t)d->world;
    *lo = (size_t)d->rank * c < np ? (size_t)d->rank * c : np;
    *hi = *lo + c < np ? *lo + c : np;
}

const dp_impl dp_none = {.name = "none",
                         .shards = 0,
                         .memory = memory,
                         .attach = attach,
                         .update = update,
                         .save_range = save_range,
                         .refresh = refresh,
                         .cost = cost};
