/* worker/train/optim.c - see optim.h. */
#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "freeze.h"
#include "layer_decay.h"

#define M_PI_VALUE 3.14159265358979323846

struct optim {
    const vit_ops *ops; /* m and v live in its memory */
    optimizer_config oc;
    long total_steps;
    optim_span *spans;  /* the parameters this state covers */
    int n_spans;
    size_t n;           /* their count: the spans' lengths summed */
    float *m, *v;       /* n each, span after span */
    double *lr_scale;   /* per tensor: layer_decay.h's scale (1 without layerDecay) */
    adamw_piece *pieces; /* adamw_multi's table, in the backend's memory: each */
    int n_pieces;        /* span's part of each tensor, in span order, */
    size_t pieces_len;   /* their lengths summed */
    int scaled;         /* optim_set_loss_scale called: fp16-mixed's loss scaling */
    float inv_scale;    /* ... its 1/scale for the next step */
    long skipped;       /* ... and the steps skipped before it */
    double *sq;         /* the step's global sum of squares, backend memory (1) */
    double *sq_host;    /* its readbacks, pinned (ops.h host_alloc): one per */
    int slot;           /* parity of the queued steps; the next one's */
};

double optim_lr_at(const optimizer_config *oc, long step, long total)
{
    if (step < oc->warmup_steps) return oc->lr * (double)(step + 1) / oc->warmup_steps;
    if (oc->schedule == SCHEDULE_COSINE) {
        long span = total - oc->warmup_steps;
        double progress = (double)(step - oc->warmup_steps) / (double)(span > 1 ? span : 1);
        if (progress > 1.0) progress = 1.0;
        return oc->min_lr + 0.5 * (oc->lr - oc->min_lr) * (1.0 + cos(M_PI_VALUE * progress));
    }
    return oc->lr;
}

size_t optim_memory_bytes(size_t n) { return 2 * n * sizeof(float); }

int optim_new(optim **out, const vit_model *m, const optimizer_config *oc, long total_steps,
              char *err, size_t errlen)
{
    const optim_span all = {0, model_num_params(m), 0};
    return optim_new_spans(out, m, oc, total_steps, &all, 1, err, errlen);
}

/* Each tensor's lr scale (malloc'd), or NULL when out of memory. */
static double *lr_scales(const vit_model *m, double layer_decay)
{
    int nt = model_num_tensors(m);
    double *s = malloc(sizeof(double) * (size_t)(nt > 0 ? nt : 1));
    const char **names = malloc(sizeof(char *) * (size_t)(nt > 0 ? nt : 1));
    if (s && names) {
        for (int k = 0; k < nt; k++) names[k] = model_tensor_at(m, k)->name;
        int depth = layer_decay_depth(names, nt);
        for (int k = 0; k < nt; k++) s[k] = layer_decay_scale(names[k], depth, layer_decay);
    } else {
        free(s);
        s = NULL;
    }
    free(names);
    return s;
}

/* The part of tensor t inside span s: [*a, *b), empty when *a >= *b. */
static void part_of(const model_tensor *t, const optim_span *s, size_t *a, size_t *b)
{
    *a = t->offset > s->lo ? t->offset : s->lo;
    *b = t->offset + t->numel < s->hi ? t->offset + t->numel : s->hi;
}

/* adamw_multi's table for o's spans (o->pieces, o->n_pieces), made once in
 * the backend's memory. Returns 0, or -1 out of memory. */
static int make_pieces(optim *o, const vit_model *m)
{
    const vit_ops *ops = o->ops;
    const int nt = model_num_tensors(m);
    int np = 0;
    for (int i = 0; i < o->n_spans; i++)
        for (int k = 0; k < nt; k++) {
            size_t a, b;
            part_of(model_tensor_at(m, k), &o->spans[i], &a, &b);
            np += a < b;
        }
    adamw_piece *host = calloc(np > 0 ? (size_t)np : 1, sizeof *host);
    if (!host) return -1;
    size_t state = 0, start = 0; /* span i's state starts at state */
    np = 0;
    for (int i = 0; i < o->n_spans; i++) {
        const optim_span *s = &o->spans[i];
        for (int k = 0; k < nt; k++) {
            const model_tensor *t = model_tensor_at(m, k);
            size_t a, b;
            part_of(t, s, &a, &b);
            if (a >= b) continue;
            /* the bf16 copy of the matmul weights is written in the same pass;
             * a floatX offset goes through floatx_bytes (ops.h) */
            floatX *lp = model_params_lp((vit_model *)m, k); /* reads m only */
            double scale, wd;
            optim_tensor_hparams(o, m, k, &scale, &wd);
            host[np++] = (adamw_piece){
                .start = start, .n = b - a, .at = s->at + (a - s->lo),
                .state = state + (a - s->lo),
                .p_lp = lp ? (floatX *)((char *)lp + (a - t->offset) * ops->floatx_bytes) : NULL,
                .lr_scale = scale, .weight_decay = (float)wd};
            start += b - a;
        }
        state += s->hi - s->lo;
    }
    o->n_pieces = np;
    o->pieces_len = start;
    if (np > 0) {
        o->pieces = ops->alloc((size_t)np * sizeof *host);
        if (o->pieces) ops->upload(o->pieces, host, (size_t)np * sizeof *host);
    }
    free(host);
    return np > 0 && !o->pieces ? -1 : 0;
}

int optim_new_spans(optim **out, const vit_model *m, const optimizer_config *oc,
                    long total_steps, const optim_span *spans, int n, char *err, size_t errlen)
{
    /* training.freeze: the state covers only the trainable runs of each span */
    const int nt = model_num_tensors(m), per = nt + 1;
    optim *o = calloc(1, sizeof *o);
    size_t *rlo = malloc(sizeof *rlo * (size_t)per), *rhi = malloc(sizeof *rhi * (size_t)per);
    if (o) o->spans = calloc(n > 0 ? (size_t)n * (size_t)per : 1, sizeof *o->spans);
    if (o && o->spans && rlo && rhi) {
        o->ops = model_ops(m);
        o->oc = *oc;
        o->total_steps = total_steps;
        for (int i = 0; i < n; i++) {
            int k = freeze_runs(m, spans[i].lo, spans[i].hi, 0, rlo, rhi, per);
            for (int r = 0; r < k && r < per; r++) {
                o->spans[o->n_spans++] = (optim_span){rlo[r], rhi[r],
                                                      spans[i].at + (rlo[r] - spans[i].lo)};
                o->n += rhi[r] - rlo[r];
            }
        }
        o->m = o->ops->alloc((o->n ? o->n : 1) * sizeof(float)); /* a rank may hold none */
        o->v = o->ops->alloc((o->n ? o->n : 1) * sizeof(float));
        o->lr_scale = lr_scales(m, oc->layer_decay);
        o->sq = o->ops->alloc(sizeof(double));
        o->sq_host = o->ops->host_alloc(2 * sizeof(double));
    }
    free(rlo);
    free(rhi);
    if (!o || !o->spans || !o->m || !o->v || !o->lr_scale || !o->sq || !o->sq_host ||
        make_pieces(o, m) != 0) {
        size_t want = o ? o->n : 0;
        snprintf(err, errlen, "optimizer: AdamW state of %zu parameters needs %zu bytes of %s "
                 "memory and the backend could not allocate them", want,
                 optim_memory_bytes(want), model_ops(m)->gpu ? "GPU" : "host");
        optim_free(o);
        return VJ_ERR_TOO_LARGE;
    }
    *out = o;
    return 0;
}

void optim_free(optim *o)
{
    if (!o) return;
    if (o->ops) {
        o->ops->release(o->m);
        o->ops->release(o->v);
        o->ops->release(o->pieces);
        o->ops->release(o->sq);
        o->ops->host_free(o->sq_host);
    }
    free(o->spans);
    free(o->lr_scale);
    free(o);
}

float *optim_m(optim *o) { return o->m; }
float *optim_v(optim *o) { return o->v; }
size_t optim_num_params(const optim *o) { return o->n; }
int optim_num_spans(const optim *o) { return o->n_spans; }

void optim_tensor_hparams(const optim *o, const vit_model *m, int t, double *lr_scale,
                          double *weight_decay)
{
    *lr_scale = o->lr_scale[t];
    *weight_decay = model_tensor_at(m, t)->decay ? o->oc.weight_decay : 0.0;
}

optim_span optim_span_at(const optim *o, int i, size_t *state_off)
{
    size_t off = 0;
    for (int k = 0; k < i; k++) off += o->spans[k].hi - o->spans[k].lo;
    *state_off = off;
    return o->spans[i];
}

/* The sum of squares of the spans' gradients in g, queued into o->sq: the
 * first span's stored, the others' added in span order (0.0 + s0 + s1 ...,
 * the bits of a host loop over sum_squares); 0 when the spans hold none. */
static void queue_sq(const optim *o, const vit_ops *ops, const float *g)
{
    int first = 1;
    for (int i = 0; i < o->n_spans; i++) {
        const optim_span *s = &o->spans[i];
        if (s->hi <= s->lo) continue;
        ops->sum_squares_into(o->sq, g + s->at, s->hi - s->lo, !first);
        first = 0;
    }
    if (first) ops->sum_squares_into(o->sq, g, 0, 0);
}

double optim_grad_sq_in(const optim *o, const float *g)
{
    double sq;
    queue_sq(o, o->ops, g);
    o->ops->download(&sq, o->sq, sizeof sq); /* one wait, whatever the spans */
    return sq;
}

/* AdamW over every piece, clipped by the sum of squares in o->sq. */
static void update(optim *o, const vit_ops *ops, optim_result *r, long step, float *p,
                   const float *g)
{
    const long taken = step + 1 - (o->scaled ? o->skipped : 0); /* AdamW's count of steps taken */
    /* one call over every span and tensor (the table made with the state);
     * the gradients are read unscaled (unscale_) and clipped on the fly, the
     * coefficient derived on the device from o->sq, left as they are in g */
    if (o->n_pieces > 0)
        ops->adamw_multi(p, o->m, o->v, g, o->pieces, o->n_pieces, o->pieces_len, r->lr,
                         o->scaled ? o->inv_scale : 1.0f, o->sq, o->oc.grad_clip,
                         (float)o->oc.beta1, (float)o->oc.beta2, (float)o->oc.eps, taken);
}

/* The norm reported from the sum of squares: the unscaled gradients' (loss
 * scaling: times 1/scale, exactly, a power of two in double). */
static double norm_of(const optim *o, double sq)
{
    return o->scaled ? sqrt(sq) * (double)o->inv_scale : sqrt(sq);
}

optim_result optim_step_queue(optim *o, vit_model *m, const vit_ops *ops, long step)
{
    optim_result r = {0};
    r.lr = optim_lr_at(&o->oc, step, o->total_steps);
    const float *g = model_grads(m);
    queue_sq(o, ops, g);
    if (o->scaled) { /* GradScaler's found_inf decides the step: read at once */
        double sq;
        ops->download(&sq, o->sq, sizeof sq);
        r.grad_norm = norm_of(o, sq);
        r.skipped = !isfinite(sq);
        if (!r.skipped) update(o, ops, &r, step, model_params(m), g);
        return r;
    }
    update(o, ops, &r, step, model_params(m), g);
    /* the norm for the log, read back without a wait: optim_step_collect */
    ops->download_async(&o->sq_host[o->slot], o->sq, sizeof(double));
    r.grad_norm = NAN;
    r.readback = 1 + o->slot;
    o->slot ^= 1;
    return r;
}

void optim_step_collect(optim *o, optim_result *r)
{
    if (r->readback <= 0) return;
    const double *sq = &o->sq_host[r->readback - 1];
    o->ops->wait_host(sq);
    r->grad_norm = norm_of(o, *sq);
    r->readback = 0;
}

optim_result optim_step(optim *o, vit_model *m, const vit_ops *ops, long step)
{
    optim_result r = optim_step_queue(o, m, ops, step);
    optim_step_collect(o, &r);
    return r;
}

void optim_set_loss_scale(optim *o, float inv_scale, long skipped)
{
    o->scaled = 1;
    o->inv_scale = inv_scale;
    o->skipped = skipped;
}

optim_result optim_step_in(optim *o, vit_model *m, const vit_ops *ops, long step, double norm_sq,
                           float *p, float *g)
{
    (void)m;
    optim_result r = {0};
    r.grad_norm = norm_of(o, norm_sq);
    r.lr = optim_lr_at(&o->oc, step, o->total_steps);
    if (o->scaled && !isfinite(norm_sq)) { /* GradScaler: found_inf, the step skipped */
        r.skipped = 1;
        return r;
    }
    ops->upload(o->sq, &norm_sq, sizeof norm_sq); /* staged: no wait */
    update(o, ops, &r, step, p, g);
    return r;
}
