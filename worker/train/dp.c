/* worker/train/dp.c - see dp.h. The table of strategies, and what every
 * strategy does alike: sums over ranks, the checkpoint segments of this
 * rank's spans and loading them back, the EMA of those spans, the layout
 * line. */
#include "dp_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "freeze.h"
#include "log.h"

#define SUM_MAX 8 /* doubles per dp_sum */

static const dp_impl *const strategies[] = {
    [SHARDING_NONE] = &dp_none,
    [SHARDING_GRAD_OP] = &dp_grad_op,
    [SHARDING_FULL] = &dp_full,
};

int dp_has_schedule(sharding_mode mode)
{
    return (size_t)mode < sizeof strategies / sizeof strategies[0] && strategies[mode] &&
           strategies[mode]->probe;
}

dp_cost dp_step_cost(sharding_mode mode, const dp_step *s)
{
    dp_cost c = {0};
    if ((size_t)mode >= sizeof strategies / sizeof strategies[0] || !strategies[mode])
        return c;
    if (s->world > 1) c = strategies[mode]->cost(s);
    c.own_schedule = dp_has_schedule(mode);
    return c;
}

const char *dp_mode_name(sharding_mode mode)
{
    return (size_t)mode < sizeof strategies / sizeof strategies[0] && strategies[mode]
               ? strategies[mode]->name
               : "?";
}

int dp_modes_sharding_more(sharding_mode mode, sharding_mode *out, int max)
{
    const size_t n = sizeof strategies / sizeof strategies[0];
    if ((size_t)mode >= n || !strategies[mode]) return 0;
    int got = 0;
    for (int level = strategies[mode]->shards + 1; got < max; level++) {
        int found = 0;
        for (size_t m = 0; m < n && got < max; m++)
            if (strategies[m] && strategies[m]->shards == level)
                out[got++] = (sharding_mode)m, found = 1;
        if (!found) break;
    }
    return got;
}

int dp_probe_schedule(const dp_options *o, const dp_probe *pr, double *exposed_s, char *err,
                      size_t errlen)
{
    if (!dp_has_schedule(o->mode)) return 0;
    return strategies[o->mode]->probe(o, pr, exposed_s, err, errlen) ? -1 : 1;
}

vj_err dp_new(dp **out, const dp_options *o, model_options *mo, char *err, size_t errlen)
{
    *out = NULL;
    if ((size_t)o->mode >= sizeof strategies / sizeof strategies[0] || !strategies[o->mode]) {
        snprintf(err, errlen, "training.sharding: no strategy for mode %d", (int)o->mode);
        return VJ_ERR_CONFIG;
    }
    dp *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of host memory planning the data parallelism");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    d->impl = o->comm ? strategies[o->mode] : &dp_none;
    d->comm = o->comm;
    if (!d->comm) { /* one process: a local communicator (copies or nothing) */
        if (comm_new_cpu_store(&d->comm, NULL, 0, 1, 0, err, errlen) != 0) {
            free(d);
            return VJ_ERR_OUT_OF_MEMORY;
        }
        d->own_comm = 1;
    }
    d->rank = comm_rank(d->comm);
    d->world = comm_world_size(d->comm);
    d->ops = o->ops;
    d->mc = o->mc;
    d->oc = o->oc;
    d->total_steps = o->total_steps;
    d->ec = ema_enabled(o->ema) ? o->ema : NULL;
    mo->pad_multiple = d->world;
    mo->shard = NULL;
    vj_err rc = d->impl->plan ? d->impl->plan(d, mo, err, errlen) : VJ_OK;
    if (rc) {
        dp_free(d);
        return rc;
    }
    *out = d;
    return VJ_OK;
}

void dp_free(dp *d)
{
    if (!d) return;
    ema_free(d->ema);
    optim_free(d->opt);
    free(d->own);
    if (d->impl->free) d->impl->free(d);
    if (d->stage) d->ops->release(d->stage);
    free(d->stage_host);
    if (d->own_comm) comm_free(d->comm);
    free(d);
}

const char *dp_name(const dp *d) { return d->impl->name; }

dp_memory dp_memory_of(const dp *d, size_t n_params)
{
    dp_memory m = d->impl->memory(d, n_params);
    if (d->ec) { /* one float per parameter the AdamW state (m and v: two) covers */
        m.ema_bytes = m.optim_bytes / 2;
        m.own_bytes += m.ema_bytes;
    }
    return m;
}

float *dp_params(dp *d) { return d->impl->params ? d->impl->params(d) : model_params(d->model); }

int dp_has_ema(const dp *d) { return d->ema != NULL; }

vj_err dp_use_ema(dp *d, int on, char *err, size_t errlen)
{
    if (!d->ema || !on == !d->ema_in) return VJ_OK;
    ema_swap(d->ema, dp_params(d));
    d->ema_in = !d->ema_in;
    return d->impl->refresh(d, err, errlen);
}

vj_err dp_optim_new(dp *d, const optim_span *spans, int n, char *err, size_t errlen)
{
    free(d->own);
    d->n_own = 0;
    if (!(d->own = malloc(sizeof *d->own * (size_t)(n > 0 ? n : 1)))) {
        snprintf(err, errlen, "out of host memory planning the optimizer state");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    memcpy(d->own, spans, sizeof *spans * (size_t)n);
    d->n_own = n;
    return optim_new_spans(&d->opt, d->model, d->oc, d->total_steps, spans, n, err, errlen);
}

static size_t stage_bytes(int world) { return sizeof(double) * SUM_MAX * (size_t)world; }

vj_err dp_plan(const dp_options *o, int world, int rank, int honour_mode, int max_batch,
               model_options *mo, model_memory *mm, dp_memory *dm, sharding_mode *mode,
               char *err, size_t errlen)
{
    if ((size_t)o->mode >= sizeof strategies / sizeof strategies[0] || !strategies[o->mode]) {
        snprintf(err, errlen, "training.sharding: no strategy for mode %d", (int)o->mode);
        return VJ_ERR_CONFIG;
    }
    if (world < 1 || rank < 0 || rank >= world) {
        snprintf(err, errlen, "rank %d of world %d: no such rank", rank, world);
        return VJ_ERR_CONFIG;
    }
    /* dp_new's handle, without a communicator: what plan and memory read */
    const sharding_mode runs = honour_mode || world > 1 ? o->mode : SHARDING_NONE;
    dp d = {.impl = strategies[runs], .rank = rank, .world = world, .ops = o->ops,
            .mc = o->mc, .oc = o->oc, .total_steps = o->total_steps,
            .freeze_planned = o->freeze_planned, .ec = ema_enabled(o->ema) ? o->ema : NULL};
    mo->pad_multiple = world;
    mo->shard = NULL;
    vj_err rc = d.impl->plan ? d.impl->plan(&d, mo, err, errlen) : VJ_OK;
    if (rc == VJ_OK && model_memory_plan(o->mc, max_batch, mo, o->ops, mm) != 0) {
        snprintf(err, errlen, "out of host memory planning the model");
        rc = VJ_ERR_OUT_OF_MEMORY;
    }
    if (rc == VJ_OK) {
        *dm = dp_memory_of(&d, mm->n_params);
        dm->stage_bytes = stage_bytes(world);
        *mode = runs;
    }
    if (d.impl->free) d.impl->free(&d);
    mo->shard = NULL; /* the plan's placeholder is not the caller's to keep */
    return rc;
}

vj_err dp_prepare(dp *d, model_options *mo, char *err, size_t errlen)
{
    d->stage = d->ops->alloc(stage_bytes(d->world));
    d->stage_host = malloc(sizeof(double) * SUM_MAX * (size_t)d->world);
    if (!d->stage || !d->stage_host) {
        snprintf(err, errlen, "out of %s memory for the sums over ranks",
                 d->ops->gpu ? "GPU" : "host");
        return VJ_ERR_TOO_LARGE;
    }
    return d->impl->prepare ? d->impl->prepare(d, mo, err, errlen) : VJ_OK;
}

vj_err dp_attach(dp *d, vit_model *m, char *err, size_t errlen)
{
    d->model = m;
    vj_err rc = d->impl->attach(d, err, errlen);
    if (rc) return rc;
    const size_t n = model_num_params(m), mine = optim_num_params(d->opt);
    if (d->ec) {
        if ((rc = ema_new(&d->ema, d->opt, d->ops, d->ec, err, errlen)) != VJ_OK) return rc;
        ema_reset(d->ema, dp_params(d)); /* from the first weights (ModelEmaV2's copy) */
        if (d->rank == 0)
            LOG_INFO("train", "event=ema decay=%.17g warmup=%d", d->ec->decay, d->ec->warmup);
    }
    dp_memory mem = dp_memory_of(d, n);
    LOG_INFO("train", "event=shard rank=%d world=%d sharding=%s params=%zu padded=%zu "
             "shard_params=%zu param_bytes=%zu grad_bytes=%zu optim_bytes=%zu ema_bytes=%zu",
             d->rank, d->world, LOGV(d->impl->name), n,
             d->fsdp ? fsdp_shard_len(d->fsdp) * (size_t)d->world : model_padded_params(m), mine,
             mem.param_bytes, mem.grad_bytes, optim_memory_bytes(mine),
             d->ema ? ema_memory_bytes(mine) : (size_t)0);
    return VJ_OK;
}

void dp_zero_grads(dp *d)
{
    model_zero_grads(d->model);
    if (d->impl->zero_grads) d->impl->zero_grads(d);
}

vj_err dp_sync(dp *d, char *err, size_t errlen)
{
    return d->impl->sync ? d->impl->sync(d, err, errlen) : VJ_OK;
}

vj_err dp_update(dp *d, long step, optim_result *res, char *err, size_t errlen)
{
    if (d->ema_in) {
        snprintf(err, errlen, "dp_update: step %ld with the EMA weights in the model", step + 1);
        return VJ_ERR_UNSUPPORTED;
    }
    vj_err rc = d->impl->update(d, step, res, err, errlen);
    if (rc == VJ_OK && d->ema) ema_update(d->ema, dp_params(d), step);
    return rc;
}

void dp_collect(dp *d, optim_result *res) { optim_step_collect(d->opt, res); }

void dp_set_loss_scale(dp *d, float inv_scale, long skipped)
{
    optim_set_loss_scale(d->opt, inv_scale, skipped);
}

vj_err dp_export_part(dp *d, char *err, size_t errlen)
{
    return d->impl->export_part ? d->impl->export_part(d, err, errlen) : VJ_OK;
}

/* Gathered as raw bytes (two f32 slots per double) through backend memory,
 * then added on the host in rank order. */
vj_err dp_sum(dp *d, double *v, int n, char *err, size_t errlen)
{
    if (d->world == 1) return VJ_OK;
    if (n < 1 || n > SUM_MAX) {
        snprintf(err, errlen, "dp_sum: %d values (at most %d)", n, SUM_MAX);
        return VJ_ERR_OUT_OF_MEMORY;
    }
    double *host = d->stage_host;
    double *mine = d->stage + (size_t)d->rank * (size_t)n;
    d->ops->upload(mine, v, sizeof *v * (size_t)n);
    vj_err rc = VJ_OK;
    if (comm_allgather(d->comm, mine, d->stage, (size_t)n * 2, COMM_F32, err, errlen) != 0) {
        rc = VJ_ERR_PEER_LOST;
    } else {
        d->ops->download(host, d->stage, sizeof(double) * (size_t)n * (size_t)d->world);
        for (int k = 0; k < n; k++) {
            double s = 0.0;
            for (int q = 0; q < d->world; q++) s += host[(size_t)q * (size_t)n + (size_t)k];
            v[k] = s;
        }
    }
    return rc;
}

vj_err dp_gather(dp *d, const double *v, int n, double *all, char *err, size_t errlen)
{
    if (n < 1 || n > SUM_MAX) {
        snprintf(err, errlen, "dp_gather: %d values (at most %d)", n, SUM_MAX);
        return VJ_ERR_OUT_OF_MEMORY;
    }
    if (d->world == 1) {
        memcpy(all, v, sizeof *v * (size_t)n);
        return VJ_OK;
    }
    double *mine = d->stage + (size_t)d->rank * (size_t)n;
    d->ops->upload(mine, v, sizeof *v * (size_t)n);
    if (comm_allgather(d->comm, mine, d->stage, (size_t)n * 2, COMM_F32, err, errlen) != 0)
        return VJ_ERR_PEER_LOST;
    d->ops->download(all, d->stage, sizeof(double) * (size_t)n * (size_t)d->world);
    return VJ_OK;
}

vj_err dp_global_sq(dp *d, const float *g, double *sq, char *err, size_t errlen)
{
    *sq = optim_grad_sq_in(d->opt, g);
    return dp_sum(d, sq, 1, err, errlen);
}

int dp_segments(dp *d, ckpt_segment **out)
{
    /* this rank's spans cut into runs: the trainable ones with their AdamW
     * state and EMA (the optimizer's spans), the frozen ones (training.freeze)
     * with their weights alone: no state (zeros in the shard), their EMA
     * the weights themselves, which never change */
    const int nt = model_num_tensors(d->model), per = 2 * nt + 2, n_opt = optim_num_spans(d->opt);
    ckpt_segment *segs = calloc((size_t)d->n_own * (size_t)per + 1, sizeof *segs);
    size_t *rlo = malloc(sizeof *rlo * (size_t)per), *rhi = malloc(sizeof *rhi * (size_t)per);
    if (!segs || !rlo || !rhi) {
        free(segs);
        free(rlo);
        free(rhi);
        return -1;
    }
    size_t lo, hi;
    d->impl->save_range(d, &lo, &hi);
    const float *p = dp_params(d), *e = d->ema ? ema_values(d->ema) : NULL;
    int k = 0;
    for (int i = 0; i < d->n_own; i++) {
        const optim_span own = d->own[i];
        size_t a = own.lo > lo ? own.lo : lo, b = own.hi < hi ? own.hi : hi;
        if (a >= b) continue;
        /* the frozen runs of [a, b), then the optimizer's spans inside it, in order */
        int nf = freeze_runs(d->model, a, b, 1, rlo, rhi, per);
        int f = 0;
        for (int j = 0; j < n_opt || f < nf;) {
            size_t so = 0;
            optim_span sp = j < n_opt ? optim_span_at(d->opt, j, &so) : (optim_span){0, 0, 0};
            size_t x = sp.lo > a ? sp.lo : a, y = sp.hi < b ? sp.hi : b;
            if (j < n_opt && x >= y) {
                j++;
                continue;
            }
            if (f < nf && (j >= n_opt || rlo[f] < x)) { /* a frozen run comes first */
                const float *w = p + own.at + (rlo[f] - own.lo);
                segs[k++] = (ckpt_segment){.lo = rlo[f], .hi = rhi[f], .params = w,
                                           .ema = e ? w : NULL};
                f++;
                continue;
            }
            const float *w = p + sp.at + (x - sp.lo), *avg = e ? e + so + (x - sp.lo) : NULL;
            if (d->ema_in) { /* the EMA is in the parameters, the weights in its place */
                const float *t = w;
                w = avg;
                avg = t;
            }
            segs[k++] = (ckpt_segment){.lo = x, .hi = y, .params = w,
                                       .m = optim_m(d->opt) + so + (x - sp.lo),
                                       .v = optim_v(d->opt) + so + (x - sp.lo), .ema = avg};
            j++;
        }
    }
    free(rlo);
    free(rhi);
    *out = segs;
    return k;
}

ckpt_status dp_load(dp *d, ckpt_store *store, const ckpt_manifest *man, char *err,
                    size_t errlen)
{
    const size_t n = model_num_params(d->model);
    float *host = malloc(sizeof(float) * 2 * n); /* params; then m and v of a span */
    if (!host) {
        snprintf(err, errlen, "out of host memory loading the checkpoint (%zu bytes)",
                 sizeof(float) * 2 * n);
        return CKPT_RETRY;
    }
    const int man_ema = ckpt_manifest_meta(man)->ema;
    d->ema_in = 0; /* every value comes from the checkpoint */
    ckpt_status st = ckpt_read_range(store, man, 0, n, host, NULL, NULL, err, errlen);
    if (!st) model_write_params(d->model, host);
    for (int i = 0; !st && i < optim_num_spans(d->opt); i++) {
        size_t so;
        optim_span sp = optim_span_at(d->opt, i, &so);
        size_t k = sp.hi - sp.lo;
        if (k == 0) continue;
        st = ckpt_read_range(store, man, sp.lo, sp.hi, NULL, host, host + k, err, errlen);
        if (st) break;
        d->ops->upload(optim_m(d->opt) + so, host, k * sizeof(float));
        d->ops->upload(optim_v(d->opt) + so, host + k, k * sizeof(float));
        if (d->ema && man_ema) {
            if ((st = ckpt_read_ema(store, man, sp.lo, sp.hi, host, err, errlen)) != CKPT_OK)
                break;
            d->ops->upload(ema_values(d->ema) + so, host, k * sizeof(float));
        }
    }
    free(host);
    if (!st && d->ema && !man_ema) {
        ema_reset(d->ema, dp_params(d));
        if (d->rank == 0)
            LOG_INFO("train", "event=ema_from_weights step=%ld reason=\"the checkpoint has no "
                     "EMA: it starts from the weights it holds\"", ckpt_manifest_meta(man)->step);
    }
    return st;
}
