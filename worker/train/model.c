/* worker/train/model.c - see model.h. The ViT forward and backward, one pass of op
 * calls; every number is computed by the op table, never here. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

enum { /* per-block tensors, in timm's order */
    BT_NORM1_W, BT_NORM1_B, BT_QKV_W, BT_QKV_B, BT_PROJ_W, BT_PROJ_B,
    BT_NORM2_W, BT_NORM2_B, BT_FC1_W, BT_FC1_B, BT_FC2_W, BT_FC2_B, BT_COUNT
};

typedef struct { /* activations of one block, (B,T,.) each */
    floatX *ln1;                      /* LayerNorm 1 out (without checkpointing: the
                                       * one buffer every block's ln1 and ln2 share,
                                       * recomputed in backward; see carve) */
    float *ln1_mean, *ln1_rstd;       /* its statistics */
    floatX *qkv;                      /* (B,T,3D) */
    float *lse;                       /* attention's row log-sum-exp (B,NH,T) */
    floatX *atty;                     /* attention out before proj (B,T,D) */
    float *res2;                      /* x + attn branch (B,T,D), fp32 */
    floatX *ln2;
    float *ln2_mean, *ln2_rstd;
    floatX *fc1;                      /* (B,T,H) pre-GELU */
    floatX *gelu;                     /* (B,T,H) */
} block_acts;

struct vit_model {
    const vit_ops *ops;
    int S, P, C, D, L, NH, H, K, T, N, max_batch, B;
    int ckpt;                   /* activation checkpointing: one shared block_acts */
    floatX *params_lp;          /* bf16 copy of the matmul parameters, or NULL */
    size_t n_params, n_padded;  /* n_padded: the buffers' length (pad_multiple) */
    float *params, *grads;      /* fp32 master parameters and their gradients */
    model_tensor *tensors;
    int n_tensors;
    /* index of the first tensor of each part */
    int t_cls, t_pos, t_patch_w, t_patch_b, t_block0, t_norm_w, t_norm_b, t_head_w, t_head_b;

    void *arena; /* every activation buffer lives in it (backend memory) */
    size_t arena_bytes;
    size_t arena_kept;          /* its first part: what the forward keeps for backward */
    float *images;              /* (B,C,S,S) the batch, uploaded */
    int *targets;               /* (B) its labels, uploaded */
    float *soft_targets;        /* (B,K) its target distributions (model_forward_soft) */
    int soft;                   /* the last forward's loss was against soft_targets */
    floatX *patches, *patch_out; /* (B*N, C*P*P), (B*N, D) */
    float **res;                /* L+1 residual streams (B,T,D): input of block l */
    block_acts *blk;
    float *cls, *lnf_mean, *lnf_rstd, *probs, *losses; /* head */
    floatX *lnf, *logits;
    float *logits_f32;          /* logits as fp32, for the host copy */
    /* backward scratch */
    float *dres, *dcls;
    floatX *dbuf_d, *dqkv, *dbuf_h, *dpatch_out, *dlogits, *dlnf;
    floatX *dres_lp;            /* bf16-mixed: dres as the matmuls read it (rounded copy) */
    int dres_lp_now;            /* dres_lp holds dres now: the last LayerNorm backward into
                                 * dres wrote it too, for the matmul that reads it next */
    /* drop path (model_options.drop_path; else all NULL): the scales of the
     * next forward (host, L x 2 x dp_B, dp_pending), those of the last
     * forward (backend, dp_scale) and which of its (block, branch) pairs
     * scale anything (dp_on; the others take the fused residual add); a
     * branch's output before its scaled add, and in backward its gradient
     * (dp_branch, B x T x D fp32, or floatX in backward) */
    float *dp_host, *dp_scale, *dp_branch;
    unsigned char *dp_on;
    int dp_pending, dp_B, dp_run;
    void *att_scratch;
    /* host copies */
    float *logits_host, *losses_host;
    /* the parameters the ops read now: the whole flat buffers, or under
     * sharding one unit's (cur_lo: the unit's first flat offset) */
    const model_shard *shard;
    size_t *unit_lo;            /* L+3 unit bounds (model_unit_bounds) */
    size_t max_unit;            /* the largest unit's length */
    floatX *unit_lp;            /* sharded bf16-mixed: the bf16 copy of one unit */
    float *cur_p, *cur_g;
    floatX *cur_lp;
    size_t cur_lo;
    /* training.freeze (model_set_frozen): the lowest tensor that trains
     * (n_tensors: none; 0 without a freeze list), and per unit whether
     * every tensor of it is frozen (L+2 flags; NULL: none is) */
    int min_trainable;
    unsigned char *unit_frozen;
    const volatile sig_atomic_t *stop; /* checked between blocks */
    int abandoned;                      /* the last pass stopped part-way ... */
    char abandoned_at[64];              /* ... there, for the message */
};

static void add_tensor(vit_model *m, const char *name, int ndim, const int *shape, int decay)
{
    model_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= (size_t)shape[i];
    }
    t->offset = m->n_params;
    t->decay = decay;
    m->n_params += t->numel;
}

#define SHAPE(...) ((const int[]){__VA_ARGS__})

static void build_layout(vit_model *m)
{
    const int D = m->D, H = m->H;
    char name[MODEL_MAX_NAME];
    m->t_cls = m->n_tensors;
    add_tensor(m, "cls_token", 3, SHAPE(1, 1, D), 0);
    m->t_pos = m->n_tensors;
    add_tensor(m, "pos_embed", 3, SHAPE(1, m->T, D), 0);
    m->t_patch_w = m->n_tensors;
    add_tensor(m, "patch_embed.proj.weight", 4, SHAPE(D, m->C, m->P, m->P), 1);
    m->t_patch_b = m->n_tensors;
    add_tensor(m, "patch_embed.proj.bias", 1, SHAPE(D), 0);
    m->t_block0 = m->n_tensors;
    static const char *const suffix[BT_COUNT] = {
        "norm1.weight", "norm1.bias", "attn.qkv.weight", "attn.qkv.bias",
        "attn.proj.weight", "attn.proj.bias", "norm2.weight", "norm2.bias",
        "mlp.fc1.weight", "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"};
    for (int l = 0; l < m->L; l++) {
        const int shapes[BT_COUNT][2] = {{D, 0}, {D, 0}, {3 * D, D}, {3 * D, 0}, {D, D}, {D, 0},
                                         {D, 0}, {D, 0}, {H, D},     {H, 0},     {D, H}, {D, 0}};
        for (int i = 0; i < BT_COUNT; i++) {
            snprintf(name, sizeof name, "blocks.%d.%s", l, suffix[i]);
            int nd = shapes[i][1] ? 2 : 1;
            add_tensor(m, name, nd, shapes[i], nd == 2);
        }
    }
    m->t_norm_w = m->n_tensors;
    add_tensor(m, "norm.weight", 1, SHAPE(D), 0);
    m->t_norm_b = m->n_tensors;
    add_tensor(m, "norm.bias", 1, SHAPE(D), 0);
    m->t_head_w = m->n_tensors;
    add_tensor(m, "head.weight", 2, SHAPE(m->K, D), 1);
    m->t_head_b = m->n_tensors;
    add_tensor(m, "head.bias", 1, SHAPE(m->K), 0);
}

/* Tensor t's parameters and gradients in the buffers of the current unit
 * (the whole flat buffers without sharding, where cur_lo is 0). */
static inline float *P_(vit_model *m, int t) { return m->cur_p + (m->tensors[t].offset - m->cur_lo); }
static inline float *G_(vit_model *m, int t) { return m->cur_g + (m->tensors[t].offset - m->cur_lo); }
/* A matmul weight or bias as the matmul reads it: the bf16 copy in
 * bf16-mixed (floatX elements: offsets in bytes), the master otherwise. */
static inline floatX *W_(vit_model *m, int t)
{
    if (!m->ops->bf16) return P_(m, t);
    return (floatX *)((char *)m->cur_lp + (m->tensors[t].offset - m->cur_lo) * m->ops->floatx_bytes);
}
/* Tensors that stay fp32 in bf16-mixed: LayerNorm, cls_token, pos_embed. */
static int stays_fp32(const vit_model *m, int t)
{
    return t == m->t_cls || t == m->t_pos || strstr(m->tensors[t].name, "norm") != NULL;
}
static inline int BT(const vit_model *m, int l, int i) { return m->t_block0 + l * BT_COUNT + i; }

/* The units (model.h): the stem, each block, the head; L+3 bounds. */
static void fill_unit_bounds(const vit_model *m, size_t *b)
{
    b[0] = 0;
    for (int l = 0; l < m->L; l++) b[l + 1] = m->tensors[BT(m, l, 0)].offset;
    b[m->L + 1] = m->tensors[m->t_norm_w].offset;
    b[m->L + 2] = m->n_params;
}

/* Carves the activation arena (byte offsets; floatX tensors take xb bytes
 * an element); with base NULL only counts. */
static size_t carve(vit_model *m, void *base)
{
    const size_t B = (size_t)m->max_batch, T = (size_t)m->T, D = (size_t)m->D,
                 H = (size_t)m->H, NH = (size_t)m->NH, K = (size_t)m->K, N = (size_t)m->N,
                 CPP = (size_t)m->C * m->P * m->P, F = sizeof(float), X = m->ops->floatx_bytes;
    size_t off = 0;
#define TAKE(ptr, count, esize)                                     \
    do {                                                            \
        if (base) (ptr) = (void *)((char *)base + off);             \
        off += ((size_t)(count) * (esize) + 255) & ~(size_t)255;    \
    } while (0)
    TAKE(m->images, B * m->C * m->S * m->S, F);
    TAKE(m->targets, B, sizeof(int));
    TAKE(m->soft_targets, B * K, F);
    if (m->dp_on) {
        TAKE(m->dp_scale, (size_t)m->L * 2 * B, F);
        TAKE(m->dp_branch, B * T * D, F); /* backward: floatX, no larger */
    }
    TAKE(m->patches, B * N * CPP, X);
    TAKE(m->patch_out, B * N * D, X);
    for (int l = 0; l <= m->L; l++) TAKE(m->res[l], B * T * D, F);
    /* Without checkpointing the LayerNorms' outputs are not kept: every
     * block writes its ln1 and ln2 into one buffer, and the backward
     * recomputes each from the fp32 input it keeps anyway (the same bits:
     * layernorm_forward is deterministic) just before the matmul that
     * reads it. That is 2L - 1 fewer (B,T,D) floatX tensors for two more
     * LayerNorm passes per block: the memory PyTorch needs no flat gradient
     * buffer for (its gradients are made during the backward, as the
     * activations are freed), the difference between the two peaks. */
    floatX *ln_shared = NULL;
    if (!m->ckpt) TAKE(ln_shared, B * T * D, X);
    for (int l = 0; l < (m->ckpt ? 1 : m->L); l++) {
        block_acts *a = &m->blk[l];
        if (m->ckpt) TAKE(a->ln1, B * T * D, X);
        else a->ln1 = ln_shared;
        TAKE(a->ln1_mean, B * T, F);
        TAKE(a->ln1_rstd, B * T, F);
        TAKE(a->qkv, B * T * 3 * D, X);
        TAKE(a->lse, B * NH * T, F);
        TAKE(a->atty, B * T * D, X);
        TAKE(a->res2, B * T * D, F);
        if (m->ckpt) TAKE(a->ln2, B * T * D, X);
        else a->ln2 = ln_shared;
        TAKE(a->ln2_mean, B * T, F);
        TAKE(a->ln2_rstd, B * T, F);
        TAKE(a->fc1, B * T * H, X);
        TAKE(a->gelu, B * T * H, X);
    }
    TAKE(m->cls, B * D, F);
    TAKE(m->lnf, B * D, X);
    TAKE(m->lnf_mean, B, F);
    TAKE(m->lnf_rstd, B, F);
    TAKE(m->logits, B * K, X);
    TAKE(m->logits_f32, B * K, F);
    TAKE(m->probs, B * K, F);
    TAKE(m->losses, B, F);
    m->arena_kept = off; /* the rest is the backward's scratch and the attention's */
    TAKE(m->dres, B * T * D, F);
    TAKE(m->dres_lp, m->ops->bf16 ? B * T * D : 0, X);
    TAKE(m->dbuf_d, B * T * D, X);
    /* one buffer for three gradients never live together: the MLP's hidden
     * one (dbuf_h), then the attention's (dqkv), in each block's backward,
     * then the patch embedding's after the blocks (dpatch_out) */
    {
        size_t most = B * T * 3 * D;
        if (B * T * H > most) most = B * T * H;
        if (B * N * D > most) most = B * N * D;
        TAKE(m->dqkv, most, X);
        m->dbuf_h = m->dpatch_out = m->dqkv;
    }
    TAKE(m->dlogits, B * K, X);
    TAKE(m->dlnf, B * D, X);
    TAKE(m->dcls, B * D, F);
    TAKE(m->att_scratch, m->ops->attention_scratch_bytes(m->max_batch, m->T, m->D, m->NH), 1);
#undef TAKE
    return off;
}

/* A model with the widths mc describes and its tensor layout, nothing else
 * (no backend, no buffers): what plan() starts from, and the throwaway model
 * that model_tensor_names and model_unit_bounds read. NULL when host memory
 * runs out; model_free frees it. */
static vit_model *layout_of(const model_config *mc)
{
    vit_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->S = mc->image_size;
    m->P = mc->patch_size;
    m->C = mc->channels;
    m->D = mc->dim;
    m->L = mc->depth;
    m->NH = mc->heads;
    m->H = config_mlp_hidden(mc);
    m->K = mc->num_classes;
    m->N = (m->S / m->P) * (m->S / m->P);
    m->T = m->N + 1;
    m->tensors = calloc((size_t)(6 + BT_COUNT * m->L + 4), sizeof *m->tensors);
    if (!m->tensors) {
        free(m);
        return NULL;
    }
    build_layout(m);
    return m;
}

/* Dims, the tensor layout and the arena's size: everything but the big
 * buffers. Returns NULL when host memory for the small tables runs out. */
static vit_model *plan(const model_config *mc, int max_batch, const model_options *opts,
                       const vit_ops *ops)
{
    vit_model *m = layout_of(mc);
    if (!m) return NULL;
    m->ops = ops;
    m->max_batch = max_batch;
    m->ckpt = opts && opts->activation_checkpointing;
    m->stop = opts ? opts->stop : NULL;
    m->shard = opts ? opts->shard : NULL;
    m->unit_lo = calloc((size_t)m->L + 3, sizeof *m->unit_lo);
    m->res = calloc((size_t)m->L + 1, sizeof *m->res);
    m->blk = calloc((size_t)m->L, sizeof *m->blk);
    m->logits_host = calloc((size_t)max_batch * m->K, sizeof(float));
    m->losses_host = calloc((size_t)max_batch, sizeof(float));
    if (opts && opts->drop_path) {
        m->dp_host = calloc((size_t)m->L * 2 * max_batch, sizeof(float));
        m->dp_on = calloc((size_t)m->L * 2, 1);
    }
    if (!m->unit_lo || !m->res || !m->blk || !m->logits_host || !m->losses_host ||
        (opts && opts->drop_path && (!m->dp_host || !m->dp_on))) {
        model_free(m);
        return NULL;
    }
    fill_unit_bounds(m, m->unit_lo);
    for (int u = 0; u < m->L + 2; u++)
        if (m->unit_lo[u + 1] - m->unit_lo[u] > m->max_unit)
            m->max_unit = m->unit_lo[u + 1] - m->unit_lo[u];
    size_t k = opts && opts->pad_multiple > 1 ? (size_t)opts->pad_multiple : 1;
    m->n_padded = (m->n_params + k - 1) / k * k;
    m->arena_bytes = carve(m, NULL);
    return m;
}

/* Backend bytes of a planned model, by part: parameters, gradients, the
 * bf16 copy and the activation arena (model_memory_plan). */
static model_memory memory_of(const vit_model *m)
{
    model_memory r = {.n_params = m->n_params,
                      .activation_bytes = m->arena_kept,
                      .workspace_bytes = m->arena_bytes - m->arena_kept};
    if (m->shard) { /* the parameters are the shard's; one unit's bf16 copy */
        r.lowp_bytes = m->ops->bf16 ? m->max_unit * m->ops->floatx_bytes : 0;
    } else {
        r.param_bytes = r.grad_bytes = m->n_padded * sizeof(float);
        r.lowp_bytes = m->ops->bf16 ? m->n_params * m->ops->floatx_bytes : 0;
    }
    r.total_bytes = r.param_bytes + r.grad_bytes + r.lowp_bytes + m->arena_bytes;
    return r;
}

static size_t backend_bytes(const vit_model *m) { return memory_of(m).total_bytes; }

int model_tensor_names(const model_config *mc, model_tensor *out, int max)
{
    vit_model *m = layout_of(mc);
    if (!m) return 0;
    int n = m->n_tensors;
    if (out && max >= n) memcpy(out, m->tensors, sizeof *out * (size_t)n);
    model_free(m);
    return n;
}

int model_unit_bounds(const model_config *mc, size_t *bounds, int max)
{
    if (max < mc->depth + 3) return 0;
    vit_model *m = layout_of(mc);
    if (!m) return 0;
    fill_unit_bounds(m, bounds);
    int n = m->L + 2;
    model_free(m);
    return n;
}

int model_memory_plan(const model_config *mc, int max_batch, const model_options *opts,
                      const vit_ops *ops, model_memory *out)
{
    vit_model *m = plan(mc, max_batch, opts, ops);
    if (!m) return -1;
    *out = memory_of(m);
    model_free(m);
    return 0;
}

size_t model_memory_bytes(const model_config *mc, int max_batch, const model_options *opts,
                          const vit_ops *ops, size_t *n_params)
{
    model_memory mm;
    if (model_memory_plan(mc, max_batch, opts, ops, &mm) != 0) return 0;
    if (n_params) *n_params = mm.n_params;
    return mm.total_bytes;
}

int model_new(vit_model **out, const model_config *mc, int max_batch,
              const model_options *opts, const vit_ops *ops, char *err, size_t errlen)
{
    vit_model *m = plan(mc, max_batch, opts, ops);
    if (!m) {
        snprintf(err, errlen, "model: out of host memory for its tables");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    if (m->shard) {
        if (ops->bf16) m->unit_lp = ops->alloc(m->max_unit * ops->floatx_bytes);
    } else {
        m->params = ops->alloc(m->n_padded * sizeof(float));
        m->grads = ops->alloc(m->n_padded * sizeof(float));
        if (ops->bf16) m->params_lp = ops->alloc(m->n_params * ops->floatx_bytes);
    }
    m->cur_p = m->params;
    m->cur_g = m->grads;
    m->cur_lp = m->params_lp;
    m->arena = ops->alloc(m->arena_bytes);
    if ((!m->shard && (!m->params || !m->grads || (ops->bf16 && !m->params_lp))) ||
        (m->shard && ops->bf16 && !m->unit_lp) || !m->arena) {
        snprintf(err, errlen,
                 "model: dim=%d depth=%d microBatchSize=%d needs %zu bytes of %s memory "
                 "(%zu parameters: %zu bytes with their gradients; activations %zu bytes) and "
                 "the %s backend could not allocate them",
                 mc->dim, mc->depth, max_batch, backend_bytes(m), ops->gpu ? "GPU" : "host",
                 m->n_params, backend_bytes(m) - m->arena_bytes, m->arena_bytes, ops->name);
        model_free(m);
        return VJ_ERR_TOO_LARGE;
    }
    carve(m, m->arena);
    *out = m;
    return 0;
}

const char *model_abandoned(const vit_model *m) { return m->abandoned ? m->abandoned_at : NULL; }

/* A stop was asked for: the pass in progress is abandoned before block l. */
static int stop_asked(vit_model *m, const char *pass, int l)
{
    if (m->stop && *m->stop && !m->abandoned) {
        m->abandoned = 1;
        snprintf(m->abandoned_at, sizeof m->abandoned_at, "%s pass, before block %d of %d", pass,
                 l + 1, m->L);
    }
    return m->abandoned;
}

void model_free(vit_model *m)
{
    if (!m) return;
    if (m->ops) {
        m->ops->release(m->params);
        m->ops->release(m->grads);
        m->ops->release(m->params_lp);
        m->ops->release(m->unit_lp);
        m->ops->release(m->arena);
    }
    free(m->tensors);
    free(m->unit_lo);
    free(m->res);
    free(m->blk);
    free(m->logits_host);
    free(m->losses_host);
    free(m->dp_host);
    free(m->dp_on);
    free(m->unit_frozen);
    free(m);
}

int model_tokens(const vit_model *m) { return m->T; }
int model_num_classes(const vit_model *m) { return m->K; }
int model_image_floats(const vit_model *m) { return m->C * m->S * m->S; }
size_t model_num_params(const vit_model *m) { return m->n_params; }
size_t model_activation_bytes(const vit_model *m) { return m->arena_bytes; }
const vit_ops *model_ops(const vit_model *m) { return m->ops; }
float *model_params(vit_model *m) { return m->params; }
float *model_grads(vit_model *m) { return m->grads; }
int model_num_tensors(const vit_model *m) { return m->n_tensors; }
const model_tensor *model_tensor_at(const vit_model *m, int i) { return &m->tensors[i]; }
const float *model_losses(const vit_model *m) { return m->losses_host; }

const float *model_logits(vit_model *m)
{
    const size_t n = (size_t)m->B * m->K;
    m->ops->to_float(m->logits_f32, m->logits, n);
    m->ops->download(m->logits_host, m->logits_f32, n * sizeof(float));
    return m->logits_host;
}

floatX *model_params_lp(vit_model *m, int t)
{
    if (!m->ops->bf16 || m->shard || stays_fp32(m, t)) return NULL;
    return W_(m, t);
}

int model_read_params(vit_model *m, float *host)
{
    if (m->shard) return m->shard->read(m->shard->ctx, host);
    m->ops->download(host, m->params, m->n_params * sizeof(float));
    return 0;
}

static void model_params_changed(vit_model *m);

void model_write_params(vit_model *m, const float *host)
{
    if (m->shard) {
        m->shard->write(m->shard->ctx, host);
        return;
    }
    m->ops->upload(m->params, host, m->n_params * sizeof(float));
    model_params_changed(m);
}

void model_read_grads(vit_model *m, float *host)
{
    if (m->shard) {
        memset(host, 0, m->n_params * sizeof(float));
        return;
    }
    m->ops->download(host, m->grads, m->n_params * sizeof(float));
}

int model_status(const vit_model *m, char *err, size_t errlen)
{
    return m->ops->status(err, errlen);
}

void model_set_frozen(vit_model *m, const unsigned char *frozen)
{
    m->min_trainable = 0;
    free(m->unit_frozen);
    m->unit_frozen = NULL;
    for (int i = 0; i < m->n_tensors; i++) m->tensors[i].frozen = frozen && frozen[i];
    if (!frozen) return;
    while (m->min_trainable < m->n_tensors && m->tensors[m->min_trainable].frozen)
        m->min_trainable++;
    m->unit_frozen = calloc((size_t)m->L + 2, 1);
    if (!m->unit_frozen) return; /* every unit asks for its gradient buffer: correct, slower */
    for (int u = 0; u < m->L + 2; u++) {
        m->unit_frozen[u] = 1;
        for (int i = 0; i < m->n_tensors; i++)
            if (m->tensors[i].offset >= m->unit_lo[u] && m->tensors[i].offset < m->unit_lo[u + 1])
                m->unit_frozen[u] &= (unsigned char)(m->tensors[i].frozen != 0);
    }
}

int model_find_tensor(const vit_model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}

static void fill_trunc_normal(float *x, size_t n, float std, rng_state *r)
{
    for (size_t i = 0; i < n; i++) {
        float z;
        do {
            z = rng_normal(r);
        } while (z < -2.0f || z > 2.0f); /* timm truncates at +-2 (absolute, std 0.02) */
        x[i] = z * std;
    }
}

int model_init_random(vit_model *m, uint64_t seed)
{
    float *host = calloc(m->n_params, sizeof(float));
    if (!host) return -1;
    rng_state r;
    rng_seed(&r, seed, 0x1a17, 0);
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        float *p = host + t->offset;
        const char *dot = strrchr(t->name, '.');
        if (i == m->t_cls) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1e-6f * rng_normal(&r);
        } else if (i == m->t_pos) {
            fill_trunc_normal(p, t->numel, 0.02f, &r);
        } else if (i == m->t_patch_w || i == m->t_patch_b) {
            float bound = 1.0f / sqrtf((float)(m->C * m->P * m->P));
            for (size_t j = 0; j < t->numel; j++) p[j] = (2.0f * rng_uniform(&r) - 1.0f) * bound;
        } else if (strstr(t->name, "norm") && dot && strcmp(dot, ".weight") == 0) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
        } else if (t->ndim == 2) {
            fill_trunc_normal(p, t->numel, 0.02f, &r);
        } /* biases stay 0 */
    }
    model_write_params(m, host);
    free(host);
    return 0;
}

/* Refreshes the bf16 copy of the matmul parameters from the masters (the
 * optimizer writes it itself, in its own pass); a no-op in fp32. */
static void model_params_changed(vit_model *m)
{
    if (!m->ops->bf16 || m->shard) return;
    /* the bf16 copy of what matmuls read; LayerNorm, cls and pos stay fp32 */
    for (int i = 0; i < m->n_tensors; i++)
        if (!stays_fp32(m, i)) m->ops->to_floatx(W_(m, i), P_(m, i), m->tensors[i].numel);
}

void model_zero_grads(vit_model *m)
{
    if (m->grads) m->ops->zero(m->grads, m->n_padded);
}

/* Under sharding, makes unit u's parameters (and their bf16 copy) the
 * current ones, for the forward or backward pass; nothing otherwise. */
static void use_unit(vit_model *m, int u, int backward)
{
    if (!m->shard) return;
    m->cur_p = m->shard->params(m->shard->ctx, u, backward);
    m->cur_lo = m->unit_lo[u];
    if (!m->ops->bf16) return;
    m->cur_lp = m->unit_lp;
    for (int i = 0; i < m->n_tensors; i++) {
        size_t off = m->tensors[i].offset;
        if (off >= m->unit_lo[u] && off < m->unit_lo[u + 1] && !stays_fp32(m, i))
            m->ops->to_floatx(W_(m, i), P_(m, i), m->tensors[i].numel);
    }
}

/* Under sharding, a fresh gradient buffer for unit u, and handing it back;
 * none for a unit whose tensors are all frozen (GF_ gives NULL for each). */
static int unit_frozen(const vit_model *m, int u) { return m->unit_frozen && m->unit_frozen[u]; }
static void grads_begin(vit_model *m, int u)
{
    if (m->shard) m->cur_g = unit_frozen(m, u) ? NULL : m->shard->grads(m->shard->ctx, u);
}

static void grads_end(vit_model *m, int u)
{
    if (m->shard && !unit_frozen(m, u)) m->shard->grads_done(m->shard->ctx, u);
}

/* training.freeze: tensor t's gradient, or NULL when it is frozen (the ops
 * skip a NULL dw and dbias); a LayerNorm's pair, NULL only when both are
 * frozen (the op skips both or neither). need: whether the backward must
 * still reach tensor t, i.e. t or a tensor before it trains. */
static inline float *GF_(vit_model *m, int t) { return m->tensors[t].frozen ? NULL : G_(m, t); }
static inline float *LG_(vit_model *m, int w, int b, int t)
{
    return m->tensors[w].frozen && m->tensors[b].frozen ? NULL : G_(m, t);
}
static inline int need(const vit_model *m, int t) { return m->min_trainable <= t; }

size_t model_padded_params(const vit_model *m) { return m->n_padded; }
void model_params_refreshed(vit_model *m) { model_params_changed(m); }

/* The residual gradient as a matmul reads it: bf16 in bf16-mixed (the
 * residual itself stays fp32), the fp32 buffer otherwise. */
static const floatX *dout_of_residual(vit_model *m, int n)
{
    if (!m->ops->bf16) return m->dres;
    if (!m->dres_lp_now) m->ops->to_floatx(m->dres_lp, m->dres, (size_t)n);
    m->dres_lp_now = 0;
    return m->dres_lp;
}

/* A LayerNorm backward into the residual gradient dres (the LayerNorm of
 * tensor w, whose input was inp): with copy, in a 16-bit floatX, it also
 * writes dres_lp for the matmul backward that reads dres next (ops.h: the
 * bits to_floatx would give), and dout_of_residual then takes it as is. */
static void residual_layernorm_backward(vit_model *m, int w, const floatX *dout,
                                        const float *inp, const float *mean, const float *rstd,
                                        int N, int copy)
{
    floatX *x = copy && m->ops->bf16 ? m->dres_lp : NULL;
    m->ops->layernorm_backward(m->dres, x, LG_(m, w, w + 1, w), LG_(m, w, w + 1, w + 1), dout,
                               inp, P_(m, w), mean, rstd, N, m->D);
    m->dres_lp_now = x != NULL;
}

/* The activations block l uses: its own, or the one shared buffer set when
 * activations are checkpointed. */
static block_acts *acts_of(vit_model *m, int l) { return &m->blk[m->ckpt ? 0 : l]; }

/* Drop path: whether branch br (0 attention, 1 MLP) of block l scales any
 * sample in the last forward, and its B scales (backend memory). */
static int drops(const vit_model *m, int l, int br) { return m->dp_run && m->dp_on[l * 2 + br]; }
static const float *dp_scales(const vit_model *m, int l, int br)
{
    return m->dp_scale + (size_t)(l * 2 + br) * m->B;
}

/* The matmul that ends a residual branch, with its residual add: out = res
 * + inp @ w^T + bias fused; or, where drop path scales this branch, the
 * branch alone into dp_branch (fp32, the same fused matmul on zeros) and
 * out = res + scale[b] * branch. The activations kept are the same either
 * way, so the backward (and a checkpointed recompute) needs nothing more. */
static void branch_end(vit_model *m, int l, int br, float *out, const floatX *inp, int tw,
                       int tb, const float *res, int B, int IC)
{
    const vit_ops *ops = m->ops;
    const int N = B * m->T, D = m->D;
    if (!drops(m, l, br)) {
        ops->matmul_forward_residual(out, inp, W_(m, tw), P_(m, tb), res, N, IC, D);
        return;
    }
    ops->zero(m->dp_branch, (size_t)N * D);
    ops->matmul_forward_residual(m->dp_branch, inp, W_(m, tw), P_(m, tb), m->dp_branch, N, IC, D);
    ops->droppath_forward(out, res, m->dp_branch, dp_scales(m, l, br), B, (size_t)m->T * D);
}

/* The gradient of branch br's output, as its last matmul reads it: that
 * of the residual (dres), or where drop path scales the branch, dres
 * scaled per sample (into dp_branch, as floatX). */
static const floatX *branch_grad(vit_model *m, int l, int br, int B)
{
    const int n = B * m->T * m->D;
    if (!drops(m, l, br)) return dout_of_residual(m, n);
    floatX *d = (floatX *)m->dp_branch;
    m->ops->droppath_backward(d, m->dres, dp_scales(m, l, br), B, (size_t)m->T * m->D);
    return d;
}

/* Block l: res[l] -> res[l+1], keeping what its backward needs in a. The
 * two residual adds are fused into the matmuls that end each branch. */
static void block_forward(vit_model *m, int l, block_acts *a, int B)
{
    const vit_ops *ops = m->ops;
    const int T = m->T, D = m->D, H = m->H, NH = m->NH, BT_ = B * T;
    const float *x = m->res[l];
    ops->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, P_(m, BT(m, l, BT_NORM1_W)),
                           P_(m, BT(m, l, BT_NORM1_B)), BT_, D);
    ops->matmul_forward(a->qkv, a->ln1, W_(m, BT(m, l, BT_QKV_W)), W_(m, BT(m, l, BT_QKV_B)),
                        BT_, D, 3 * D);
    ops->attention_forward(a->atty, a->lse, m->att_scratch, a->qkv, B, T, D, NH);
    branch_end(m, l, 0, a->res2, a->atty, BT(m, l, BT_PROJ_W), BT(m, l, BT_PROJ_B), x, B, D);
    ops->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, P_(m, BT(m, l, BT_NORM2_W)),
                           P_(m, BT(m, l, BT_NORM2_B)), BT_, D);
    ops->matmul_forward(a->fc1, a->ln2, W_(m, BT(m, l, BT_FC1_W)), W_(m, BT(m, l, BT_FC1_B)),
                        BT_, D, H);
    ops->gelu_forward(a->gelu, a->fc1, (size_t)BT_ * H);
    branch_end(m, l, 1, m->res[l + 1], a->gelu, BT(m, l, BT_FC2_W), BT(m, l, BT_FC2_B), a->res2,
               B, H);
}

/* dres holds d(block output); each LayerNorm backward adds its branch,
 * which is the residual add's backward. On return dres = d(block input),
 * unless nothing before the block trains (training.freeze): then it stops
 * after the lowest op whose parameters train, without its input gradient. */
static void block_backward(vit_model *m, int l, block_acts *a, int B)
{
    const vit_ops *ops = m->ops;
    const int T = m->T, D = m->D, H = m->H, NH = m->NH, BT_ = B * T;
    const int fc2 = BT(m, l, BT_FC2_W), fc1 = BT(m, l, BT_FC1_W), n2 = BT(m, l, BT_NORM2_W),
              proj = BT(m, l, BT_PROJ_W), qkv = BT(m, l, BT_QKV_W), n1 = BT(m, l, BT_NORM1_W);
    ops->matmul_backward(need(m, fc2 - 1) ? m->dbuf_h : NULL, GF_(m, fc2), GF_(m, fc2 + 1),
                         branch_grad(m, l, 1, B), a->gelu, W_(m, fc2), BT_, H, D);
    if (!need(m, fc2 - 1)) return;
    ops->gelu_backward(m->dbuf_h, a->fc1, m->dbuf_h, (size_t)BT_ * H);
    if (!m->ckpt) /* the shared buffer holds another LayerNorm's output: ln2 again */
        ops->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, P_(m, n2),
                               P_(m, n2 + 1), BT_, D);
    ops->matmul_backward(need(m, fc1 - 1) ? m->dbuf_d : NULL, GF_(m, fc1), GF_(m, fc1 + 1),
                         m->dbuf_h, a->ln2, W_(m, fc1), BT_, D, H);
    if (!need(m, fc1 - 1)) return;
    /* dres next goes to the attention branch's last matmul, unless drop path
     * scales it first */
    residual_layernorm_backward(m, n2, m->dbuf_d, a->res2, a->ln2_mean, a->ln2_rstd, BT_,
                                need(m, n2 - 1) && !drops(m, l, 0));
    if (!need(m, n2 - 1)) return;
    ops->matmul_backward(need(m, proj - 1) ? m->dbuf_d : NULL, GF_(m, proj), GF_(m, proj + 1),
                         branch_grad(m, l, 0, B), a->atty, W_(m, proj), BT_, D, D);
    if (!need(m, proj - 1)) return;
    ops->attention_backward(m->dqkv, m->att_scratch, m->dbuf_d, a->qkv, a->atty, a->lse, B, T, D,
                            NH);
    if (!m->ckpt) /* ln1 again, as ln2 above */
        ops->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, m->res[l], P_(m, n1),
                               P_(m, n1 + 1), BT_, D);
    ops->matmul_backward(need(m, qkv - 1) ? m->dbuf_d : NULL, GF_(m, qkv), GF_(m, qkv + 1),
                         m->dqkv, a->ln1, W_(m, qkv), BT_, D, 3 * D);
    if (!need(m, qkv - 1)) return;
    /* dres next goes to block l-1's MLP branch (the embedding's backward
     * reads the fp32 one after block 0) */
    residual_layernorm_backward(m, n1, m->dbuf_d, m->res[l], a->ln1_mean, a->ln1_rstd, BT_,
                                l > 0 && need(m, BT(m, l - 1, BT_COUNT - 1)) &&
                                    !drops(m, l - 1, 1));
}

int model_set_drop_path(vit_model *m, const float *scale, int B)
{
    if (!scale) {
        m->dp_pending = 0;
        return 0;
    }
    if (!m->dp_host || B < 1 || B > m->max_batch) return -1;
    memcpy(m->dp_host, scale, sizeof(float) * (size_t)m->L * 2 * B);
    m->dp_B = B;
    m->dp_pending = 1;
    return 0;
}

/* The drop path of this forward of B images: the pending scales (uploaded,
 * with the pairs that scale anything marked), or none. */
static void drop_path_begin(vit_model *m, int B)
{
    m->dp_run = m->dp_pending && m->dp_B == B;
    m->dp_pending = 0;
    if (!m->dp_run) return;
    int any = 0;
    for (int i = 0; i < m->L * 2; i++) {
        m->dp_on[i] = 0;
        for (int b = 0; b < B; b++) m->dp_on[i] |= m->dp_host[(size_t)i * B + b] != 1.0f;
        any |= m->dp_on[i];
    }
    if (any) m->ops->upload(m->dp_scale, m->dp_host, sizeof(float) * (size_t)m->L * 2 * B);
    m->dp_run = any;
}

/* model_forward and model_forward_soft: integer labels or target rows (at
 * most one of them), or neither. */
static float forward(vit_model *m, const float *images, const int *targets, const float *soft,
                     int B, float *losses_to)
{
    const vit_ops *ops = m->ops;
    const int T = m->T, D = m->D, K = m->K, CPP = m->C * m->P * m->P;
    m->B = B;
    m->soft = soft != NULL;
    drop_path_begin(m, B);

    /* on its own copy engine, beside the step before (ops.h: upload_ahead) */
    ops->upload_ahead(m->images, images, sizeof(float) * (size_t)B * m->C * m->S * m->S);
    if (targets) ops->upload(m->targets, targets, sizeof(int) * (size_t)B);
    if (soft) ops->upload(m->soft_targets, soft, sizeof(float) * (size_t)B * K);
    use_unit(m, 0, 0);
    ops->patchify(m->patches, m->images, B, m->C, m->S, m->P);
    ops->consumed(m->images); /* its one reader: the next batch may land */
    ops->matmul_forward(m->patch_out, m->patches, W_(m, m->t_patch_w), W_(m, m->t_patch_b),
                        B * m->N, CPP, D);
    ops->embed_forward(m->res[0], m->patch_out, P_(m, m->t_cls), P_(m, m->t_pos), B, T, D);

    m->abandoned = 0;
    for (int l = 0; l < m->L; l++) {
        if (stop_asked(m, "forward", l)) return NAN;
        use_unit(m, l + 1, 0);
        block_forward(m, l, acts_of(m, l), B);
    }
    use_unit(m, m->L + 1, 0);

    /* Final norm on the class tokens only: identical output and gradients
     * to timm's norm over all tokens followed by x[:, 0]. */
    ops->gather_cls(m->cls, m->res[m->L], B, T, D);
    ops->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->cls, P_(m, m->t_norm_w),
                           P_(m, m->t_norm_b), B, D);
    ops->matmul_forward(m->logits, m->lnf, W_(m, m->t_head_w), W_(m, m->t_head_b), B, D, K);
    if (soft)
        ops->crossentropy_soft_forward(m->losses, m->probs, m->logits, m->soft_targets, B, K);
    else if (targets)
        ops->crossentropy_forward(m->losses, m->probs, m->logits, m->targets, B, K);
    else
        return 0.0f;
    if (losses_to) { /* queued: the caller reads them once they are there */
        ops->download_async(losses_to, m->losses, sizeof(float) * (size_t)B);
        return NAN;
    }
    ops->download(m->losses_host, m->losses, sizeof(float) * (size_t)B);
    return model_mean_loss(m->losses_host, B);
}

float model_mean_loss(const float *losses, int B)
{
    double sum = 0.0;
    for (int b = 0; b < B; b++) sum += losses[b];
    return (float)(sum / B);
}

float model_forward(vit_model *m, const float *images, const int *targets, int B)
{
    return forward(m, images, targets, NULL, B, NULL);
}

float model_forward_soft(vit_model *m, const float *images, const float *targets, int B)
{
    return forward(m, images, NULL, targets, B, NULL);
}

void model_forward_queue(vit_model *m, const float *images, const int *targets,
                         const float *soft, int B, float *losses_to)
{
    (void)forward(m, images, targets, soft, B, losses_to);
}

void model_backward(vit_model *m, float dloss)
{
    const vit_ops *ops = m->ops;
    const int B = m->B, T = m->T, D = m->D, K = m->K, CPP = m->C * m->P * m->P;

    use_unit(m, m->L + 1, 1);
    grads_begin(m, m->L + 1);
    m->dres_lp_now = 0;
    if (m->soft)
        ops->crossentropy_soft_backward(m->dlogits, m->probs, m->soft_targets, dloss, B, K);
    else
        ops->crossentropy_backward(m->dlogits, m->probs, m->targets, dloss, B, K);
    const int nw = m->t_norm_w, hw = m->t_head_w;
    ops->matmul_backward(need(m, hw - 1) ? m->dlnf : NULL, GF_(m, hw), GF_(m, m->t_head_b),
                         m->dlogits, m->lnf, W_(m, hw), B, D, K);
    if (need(m, hw - 1)) {
        ops->zero(m->dcls, (size_t)B * D);
        ops->layernorm_backward(m->dcls, NULL, LG_(m, nw, m->t_norm_b, nw),
                                LG_(m, nw, m->t_norm_b, m->t_norm_b), m->dlnf, m->cls,
                                P_(m, nw), m->lnf_mean, m->lnf_rstd, B, D);
    }
    if (need(m, nw - 1)) {
        ops->zero(m->dres, (size_t)B * T * D);
        ops->scatter_cls_backward(m->dres, m->dcls, B, T, D);
        m->dres_lp_now = 0;
    }
    grads_end(m, m->L + 1);

    /* dres holds d(block output); each LayerNorm backward adds its branch,
     * which is the residual add's backward. */
    m->abandoned = 0;
    for (int l = m->L - 1; l >= 0 && need(m, BT(m, l, BT_COUNT - 1)); l--) {
        if (stop_asked(m, "backward", l)) return;
        block_acts *a = acts_of(m, l);
        use_unit(m, l + 1, 1);
        grads_begin(m, l + 1);
        if (m->ckpt) block_forward(m, l, a, B); /* recompute from the kept input res[l] */
        block_backward(m, l, a, B);
        grads_end(m, l + 1);
    }
    if (!need(m, m->t_patch_b)) return; /* the stem is frozen */
    use_unit(m, 0, 1);
    grads_begin(m, 0);

    /* cls_token and pos_embed frozen with patch_embed training: their sums
     * still go to their (ignored) slots, the op having no NULL for them */
    ops->embed_backward(m->dpatch_out, G_(m, m->t_cls), G_(m, m->t_pos), m->dres, B, T, D);
    if (need(m, m->t_patch_b) && !(m->tensors[m->t_patch_w].frozen &&
                                   m->tensors[m->t_patch_b].frozen))
        ops->matmul_backward(NULL, GF_(m, m->t_patch_w), GF_(m, m->t_patch_b), m->dpatch_out,
                             m->patches, W_(m, m->t_patch_w), B * m->N, CPP, D);
    grads_end(m, 0);
}
