/* worker/train/dp_grad_op.c - training.sharding=grad-op (ZeRO-2): every rank
 * holds every parameter, but the gradients are reduce-scattered and each
 * rank keeps the AdamW state of, and updates, only its slice [lo, lo +
 * slice) of the padded flat vector; the updated slices are all-gathered.
 * With training.freeze only the trainable runs of each slice travel: they
 * are packed, rank q's at chunk q of a staging buffer (each chunk as long
 * as the largest rank's trainable count), reduce-scattered and all-gathered
 * packed, and unpacked into the model's buffers.
 * Must not: keep state beyond the model, the optimizer and that staging
 * (dp.h). */
#include "dp_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "freeze.h"
#include "log.h"

/* training.freeze's packing: every rank's trainable runs of its slice */
struct dp_pack {
    float *buf;      /* world x chunk floats, backend memory */
    size_t chunk;    /* the largest rank's trainable count */
    size_t *lo, *hi; /* the runs, rank after rank */
    int *first;      /* rank q's runs are [first[q], first[q + 1]) */
};

static void pack_free(dp *d)
{
    if (!d->pack) return;
    d->ops->release(d->pack->buf);
    free(d->pack->lo);
    free(d->pack->hi);
    free(d->pack->first);
    free(d->pack);
    d->pack = NULL;
}

/* The runs of every rank's slice, when some parameter is frozen. */
static vj_err pack_plan(dp *d, char *err, size_t errlen)
{
    const size_t n = model_num_params(d->model);
    const int w = d->world, per = model_num_tensors(d->model) + 1;
    size_t lo0, hi0;
    if (freeze_runs(d->model, 0, n, 1, &lo0, &hi0, 1) == 0) return VJ_OK; /* nothing frozen */
    struct dp_pack *k = calloc(1, sizeof *k);
    if (k) {
        k->lo = malloc(sizeof *k->lo * (size_t)(w * per));
        k->hi = malloc(sizeof *k->hi * (size_t)(w * per));
        k->first = calloc((size_t)w + 1, sizeof *k->first);
    }
    d->pack = k;
    if (!k || !k->lo || !k->hi || !k->first) {
        snprintf(err, errlen, "out of host memory planning the frozen parameters' packing");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    for (int q = 0; q < w; q++) {
        size_t a = (size_t)q * d->slice, b = a + d->slice;
        int r = freeze_runs(d->model, a < n ? a : n, b < n ? b : n, 0, k->lo + k->first[q],
                            k->hi + k->first[q], per);
        size_t c = 0;
        for (int i = 0; i < r; i++) c += k->hi[k->first[q] + i] - k->lo[k->first[q] + i];
        if (c > k->chunk) k->chunk = c;
        k->first[q + 1] = k->first[q] + r;
    }
    if (!(k->buf = d->ops->alloc(sizeof(float) * (k->chunk ? k->chunk : 1) * (size_t)w))) {
        snprintf(err, errlen, "out of %s memory for the frozen parameters' packing (%zu bytes)",
                 d->ops->gpu ? "GPU" : "host", sizeof(float) * k->chunk * (size_t)w);
        return VJ_ERR_TOO_LARGE;
    }
    LOG_INFO("train", "event=freeze_packing rank=%d world=%d packed=%zu slice=%zu runs=%d",
             d->rank, w, k->chunk, d->slice, k->first[d->rank + 1] - k->first[d->rank]);
    return VJ_OK;
}

/* Rank q's runs of x into its chunk (unpack 0), or back (unpack 1). */
static void pack_move(dp *d, int q, float *x, int unpack)
{
    struct dp_pack *k = d->pack;
    float *c = k->buf + (size_t)q * k->chunk;
    for (int i = k->first[q]; i < k->first[q + 1]; i++) {
        size_t len = k->hi[i] - k->lo[i];
        if (unpack)
            d->ops->copy(x + k->lo[i], c, len);
        else
            d->ops->copy(c, x + k->lo[i], len);
        c += len;
    }
}

/* Every rank's updated slice into every rank's parameters. */
static vj_err gather_params(dp *d, char *err, size_t errlen)
{
    float *p = model_params(d->model);
    if (!d->pack)
        return comm_allgather(d->comm, p + d->lo, p, d->slice, COMM_F32, err, errlen) != 0
                   ? VJ_ERR_PEER_LOST
                   : VJ_OK;
    pack_move(d, d->rank, p, 0);
    float *mine = d->pack->buf + (size_t)d->rank * d->pack->chunk;
    if (comm_allgather(d->comm, mine, d->pack->buf, d->pack->chunk, COMM_F32, err, errlen) != 0)
        return VJ_ERR_PEER_LOST;
    for (int q = 0; q < d->world; q++)
        if (q != d->rank) pack_move(d, q, p, 1);
    return VJ_OK;
}


static dp_memory memory(const dp *d, size_t n)
{
    const size_t w = (size_t)d->world, slice = (n + w - 1) / w;
    size_t mine = (size_t)d->rank * slice < n ? n - (size_t)d->rank * slice : 0;
    if (mine > slice) mine = slice;
    /* dp_plan's, with frozen parameters: the packing's world chunks of at
     * most a slice */
    return (dp_memory){.param_bytes = slice * w * sizeof(float),
                       .grad_bytes = slice * w * sizeof(float),
                       .optim_bytes = optim_memory_bytes(mine),
                       .own_bytes = optim_memory_bytes(mine),
                       .pack_bytes = d->freeze_planned ? slice * w * sizeof(float) : 0};
}

/* the planner's: per step the gradients' reduce-scatter, the loss's and
 * the clipping norm's all-gathers, the parameters' all-gather, each half an
 * all-reduce's latency; the bytes an all-reduce's */
static dp_cost cost(const dp_step *s)
{
    const double f = (double)(s->world - 1) / s->world, bytes = (double)s->n_params * sizeof(float);
    const double half = 4;
    return (dp_cost){.bus_bytes = 2 * f * bytes, .calls = half, .call_units = half / 2};
}

static vj_err attach(dp *d, char *err, size_t errlen)
{
    const size_t n = model_num_params(d->model);
    d->slice = model_padded_params(d->model) / (size_t)d->world;
    d->lo = (size_t)d->rank * d->slice;
    size_t lo = d->lo < n ? d->lo : n, hi = d->lo + d->slice < n ? d->lo + d->slice : n;
    const optim_span mine = {lo, hi, lo}; /* the padding has no state */
    vj_err rc = pack_plan(d, err, errlen);
    return rc ? rc : dp_optim_new(d, &mine, 1, err, errlen);
}

static vj_err update(dp *d, long step, optim_result *res, char *err, size_t errlen)
{
    float *g = model_grads(d->model), *p = model_params(d->model);
    if (d->pack) { /* the trainable runs alone, packed */
        for (int q = 0; q < d->world; q++) pack_move(d, q, g, 0);
        if (comm_reduce_scatter_sum(d->comm, d->pack->buf, d->pack->chunk, err, errlen) != 0)
            return VJ_ERR_PEER_LOST;
        pack_move(d, d->rank, g, 1);
    } else if (comm_reduce_scatter_sum(d->comm, g, d->slice, err, errlen) != 0) {
        return VJ_ERR_PEER_LOST;
    }
    double sq;
    vj_err rc = dp_global_sq(d, g, &sq, err, errlen);
    if (rc) return rc;
    *res = optim_step_in(d->opt, d->model, d->ops, step, sq, p, g);
    if ((rc = gather_params(d, err, errlen)) != VJ_OK) return rc;
    model_params_refreshed(d->model);
    return VJ_OK;
}

/* each rank's slice changed: gathered as after a step */
static vj_err refresh(dp *d, char *err, size_t errlen)
{
    vj_err rc = gather_params(d, err, errlen);
    if (rc == VJ_OK) model_params_refreshed(d->model);
    return rc;
}

static void save_range(const dp *d, size_t *lo, size_t *hi)
{
    *lo = 0; /* the optimizer's slice is this rank's part */
    *hi = model_num_params(d->model);
}

const dp_impl dp_grad_op = {.name = "grad-op",
                            .shards = 1,
                            .memory = memory,
                            .attach = attach,
                            .update = update,
                            .save_range = save_range,
                            .refresh = refresh,
                            .free = pack_free,
                            .cost = cost};
