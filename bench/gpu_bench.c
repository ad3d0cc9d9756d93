/* bench/gpu_bench.c - the GPU engine's training throughput, the number
 * `make bench-gpu` (bench/gpu_vs_torch.py) sets against PyTorch + timm.
 *
 * Owns: timing the trainer's full step (zero_grads, forward, backward,
 * optim_step: grad clip + AdamW; one micro-batch = the global batch) on a
 * preset model with random init and one fixed synthetic batch (random images
 * and labels made once on the host; model_forward uploads them every step,
 * as the trainer does), on ops_cuda (or the CPU, for a smoke test); the model
 * FLOP count and MFU; the backend's peak memory; and, with --profile, a
 * per-op time table from a copy of the op table whose slots time the real op
 * between two synchronizes.
 * The steps are queued as the trainer queues them (train.c): the forward's
 * losses and the gradient norm come back to pinned memory without a wait
 * and are read one step later, so the host runs at most a step ahead and
 * never waits for the device inside a step; img/s is the timed steps over
 * the wall time between two synchronizes, and each step's time the time
 * between the readbacks of two steps. --sync-steps: a synchronize after
 * every step instead (the engine before the queued step), to measure what
 * the host waits cost. --graph: after the warm-up, one step captured as a
 * CUDA graph (ops.h: ops_cuda_graph) and replayed for the timed steps, a
 * synchronize after each: what launching the step as one graph would save
 * against the queued step (issue 42, item 4; the replays repeat the
 * captured step's inputs and learning rate, so it is a timing, not training).
 * --candidates: the step on the OPS_CANDIDATE_KERNELS table (ops.h: the
 * fused flash backward, bias gradients from cuBLASLt's BGRADB epilogue)
 * instead of the trainer's, for the A/B in the whole step (time and peak
 * memory; with --profile, each op's).
 * Must not: assert a time (not a test), or touch files, data sets or the
 * network.
 *
 * Model FLOPs per image = 3 x forward, forward = the matmuls and the two
 * attention products: patch embed 2*N*(C*P*P)*D, per block
 * 2*T*(3D*D + D*D + 2*D*H) + 2*2*T*T*D, head 2*D*K (T = N + 1). MFU =
 * achieved FLOP/s over --peak-tflops (default 989.4: H100/H200 SXM, dense
 * bf16). fp16-mixed is timed without the loss scaling the trainer adds (one
 * multiply of the seed and one of the gradients: the same kernels).
 *
 * With --attention, instead: the attention op alone (forward then
 * backward, on random 16-bit inputs) at --model's D and NH (vit_b16: 768,
 * 12, hd 64) and --batch, at T = the model's tokens (197) and T = 577 (a
 * 384-pixel image), through the flash kernels (path=flash: their tiles
 * copied with cp.async, as the trainer runs them; path=flash-sync: copied
 * through registers, the OPS_FLASH_SYNC_LOADS table, the schedule before
 * the pipeline; path=flash-fused: the fused backward of the
 * OPS_CANDIDATE_KERNELS table, S and dP once with dQ's parts added in
 * order, the forward flash's; 16-bit precisions only) and through the unfused cuBLAS
 * path (ops_cuda's OPS_UNFUSED_ATTENTION table), one key=value line each:
 * ms per forward and per backward, and TFLOP/s over both with one FLOP
 * count for the paths, FlashAttention's: forward 4*B*T*T*D (QK^T, PV),
 * backward 2.5 times that (dV, dP, dQ, dK and QK^T again; the flash
 * backward's own recomputation for its deterministic dQ is not counted).
 * bench/attention_vs_torch.py sets these lines beside torch's SDPA on each
 * of its backends, cuDNN's among them.
 *
 * usage: gpu_bench [--model vit_b16] [--batch 128] [--steps 20] [--warmup 5]
 *                  [--precision bf16-mixed|fp16-mixed|fp32] [--ckpt] [--device cuda|cpu]
 *                  [--threads N] [--grad-clip 1.0] [--peak-tflops 989.4]
 *                  [--profile] [--sync-steps] [--graph] [--candidates] [--json]
 *                  [--attention]
 * Exit: 0; 1 a failure while running (out of memory, a GPU fault, a
 * non-finite loss), message on stderr; 2 bad arguments, or --device cuda
 * where this build or machine has no usable GPU (one line saying why).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "config.h"
#include "model.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"
#include "stdfds.h"
#include "train.h"
#include "util.h"

#define DEFAULT_PEAK_TFLOPS 989.4 /* H100/H200 SXM, dense bf16 tensor cores */

typedef struct {
    const char *model, *precision, *device;
    int batch, steps, warmup, ckpt, threads, profile, json, peak_given, attention, sync_steps;
    int graph, candidates;
    double grad_clip, peak_tflops;
} bench_args;

/* ---- the profiling op table --------------------------------------------
 * A copy of the real table whose compute and copy slots call the real op
 * between two synchronizes and add the wall time to a row keyed by op name
 * (and, for matmuls and attention, by shape, with the FLOPs done). Rows only
 * accumulate while prof_on is set (the timed steps). */

typedef struct {
    char op[32];
    char shape[48]; /* "" or the dims: matmul N x IC x OC, attention B x T x D x NH */
    long calls;
    double seconds, flops;
} prof_row;

enum { PROF_MAX_ROWS = 128 };
static prof_row prof_rows[PROF_MAX_ROWS + 1]; /* the last: "(other)", once the rest are taken */
static int prof_n, prof_on;
static const vit_ops *prof_real;

static double prof_begin(void)
{
    prof_real->synchronize();
    return mono_seconds();
}

static void prof_end(const char *op, const char *shape, double flops, double t0)
{
    prof_real->synchronize();
    const double dt = mono_seconds() - t0;
    if (!prof_on) return;
    int i = 0;
    while (i < prof_n && (strcmp(prof_rows[i].op, op) != 0 || strcmp(prof_rows[i].shape, shape)))
        i++;
    if (i == PROF_MAX_ROWS) {
        snprintf(prof_rows[i].op, sizeof prof_rows[i].op, "(other)");
    } else if (i == prof_n) {
        prof_n++;
        snprintf(prof_rows[i].op, sizeof prof_rows[i].op, "%s", op);
        snprintf(prof_rows[i].shape, sizeof prof_rows[i].shape, "%s", shape);
    }
    prof_rows[i].calls++;
    prof_rows[i].seconds += dt;
    prof_rows[i].flops += flops;
}

/* A slot with no shape of interest: PARAMS is its parameter list, ARGS the
 * same names as a call. */
#define PROF_WRAP(NAME, PARAMS, ARGS)          \
    static void prof_##NAME PARAMS             \
    {                                          \
        const double t0 = prof_begin();        \
        prof_real->NAME ARGS;                  \
        prof_end(#NAME, "", 0.0, t0);          \
    }

PROF_WRAP(upload, (void *dst, const void *src, size_t bytes), (dst, src, bytes))
PROF_WRAP(download, (void *dst, const void *src, size_t bytes), (dst, src, bytes))
PROF_WRAP(patchify, (floatX *patches, const float *img, int B, int C, int S, int P),
          (patches, img, B, C, S, P))
PROF_WRAP(embed_forward,
          (float *x, const floatX *po, const float *cls, const float *pos, int B, int T, int D),
          (x, po, cls, pos, B, T, D))
PROF_WRAP(embed_backward,
          (floatX *dpo, float *dcls, float *dpos, const float *dx, int B, int T, int D),
          (dpo, dcls, dpos, dx, B, T, D))
PROF_WRAP(layernorm_forward,
          (floatX *out, float *mean, float *rstd, const float *inp, const float *w,
           const float *b, int N, int C),
          (out, mean, rstd, inp, w, b, N, C))
PROF_WRAP(layernorm_backward,
          (float *dinp, floatX *dinp_x, float *dw, float *db, const floatX *dout,
           const float *inp, const float *w, const float *mean, const float *rstd, int N, int C),
          (dinp, dinp_x, dw, db, dout, inp, w, mean, rstd, N, C))
PROF_WRAP(gelu_forward, (floatX *out, const floatX *inp, size_t n), (out, inp, n))
PROF_WRAP(gelu_backward, (floatX *dinp, const floatX *inp, const floatX *dout, size_t n),
          (dinp, inp, dout, n))
PROF_WRAP(zero, (float *x, size_t n), (x, n))
PROF_WRAP(to_floatx, (floatX *out, const float *in, size_t n), (out, in, n))
PROF_WRAP(to_float, (float *out, const floatX *in, size_t n), (out, in, n))
PROF_WRAP(gather_cls, (float *out, const float *x, int B, int T, int D), (out, x, B, T, D))
PROF_WRAP(scatter_cls_backward, (float *dx, const float *dcls, int B, int T, int D),
          (dx, dcls, B, T, D))
PROF_WRAP(crossentropy_forward,
          (float *losses, float *probs, const floatX *logits, const int *targets, int B, int K),
          (losses, probs, logits, targets, B, K))
PROF_WRAP(crossentropy_backward,
          (floatX *dlogits, const float *probs, const int *targets, float dloss, int B, int K),
          (dlogits, probs, targets, dloss, B, K))
PROF_WRAP(scale, (float *g, float s, size_t n), (g, s, n))
PROF_WRAP(adamw_update,
          (float *p, floatX *p_lp, float *m, float *v, const float *g, size_t n, float lr,
           float b1, float b2, float eps, float wd, long t),
          (p, p_lp, m, v, g, n, lr, b1, b2, eps, wd, t))
PROF_WRAP(adamw_multi,
          (float *p, float *m, float *v, const float *g, const adamw_piece *pieces, int np,
           size_t total, double lr, float unscale, const double *norm_sq, double grad_clip,
           float b1, float b2, float eps, long t),
          (p, m, v, g, pieces, np, total, lr, unscale, norm_sq, grad_clip, b1, b2, eps, t))
PROF_WRAP(sum_squares_into, (double *acc, const float *g, size_t n, int add), (acc, g, n, add))

static void shape3(char *s, size_t len, long a, long b, long c)
{
    snprintf(s, len, "%ldx%ldx%ld", a, b, c);
}

static void prof_matmul_forward(floatX *out, const floatX *inp, const floatX *w,
                                const floatX *bias, int N, int IC, int OC)
{
    char s[48];
    shape3(s, sizeof s, N, IC, OC);
    const double t0 = prof_begin();
    prof_real->matmul_forward(out, inp, w, bias, N, IC, OC);
    prof_end("matmul_forward", s, 2.0 * N * IC * OC, t0);
}

static void prof_matmul_forward_residual(float *out, const floatX *inp, const floatX *w,
                                         const float *bias, const float *res, int N, int IC,
                                         int OC)
{
    char s[48];
    shape3(s, sizeof s, N, IC, OC);
    const double t0 = prof_begin();
    prof_real->matmul_forward_residual(out, inp, w, bias, res, N, IC, OC);
    prof_end("matmul_forward_residual", s, 2.0 * N * IC * OC, t0);
}

static void prof_matmul_backward(floatX *dinp, float *dw, float *dbias, const floatX *dout,
                                 const floatX *inp, const floatX *w, int N, int IC, int OC)
{
    char s[48];
    shape3(s, sizeof s, N, IC, OC);
    const double t0 = prof_begin();
    prof_real->matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC);
    prof_end("matmul_backward", s, (dinp ? 4.0 : 2.0) * N * IC * OC, t0);
}

static void prof_attention_forward(floatX *out, float *lse, void *scratch, const floatX *qkv,
                                   int B, int T, int D, int NH)
{
    char s[48];
    snprintf(s, sizeof s, "%dx%dx%dx%d", B, T, D, NH);
    const double t0 = prof_begin();
    prof_real->attention_forward(out, lse, scratch, qkv, B, T, D, NH);
    prof_end("attention_forward", s, 4.0 * B * T * T * D, t0); /* QK^T, PV */
}

static void prof_attention_backward(floatX *dqkv, void *scratch, const floatX *dout,
                                    const floatX *qkv, const floatX *out, const float *lse,
                                    int B, int T, int D, int NH)
{
    char s[48];
    snprintf(s, sizeof s, "%dx%dx%dx%d", B, T, D, NH);
    const double t0 = prof_begin();
    prof_real->attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH);
    /* QK^T again, dP, dV, dQ, dK */
    prof_end("attention_backward", s, 10.0 * B * T * T * D, t0);
}

static double prof_sum_squares(const float *g, size_t n)
{
    const double t0 = prof_begin();
    const double r = prof_real->sum_squares(g, n);
    prof_end("sum_squares", "", 0.0, t0);
    return r;
}

/* The real table with its compute and copy slots timed (alloc, release,
 * status, synchronize and the scratch size pass through). */
static const vit_ops *prof_wrap(const vit_ops *real)
{
    static vit_ops t;
    prof_real = real;
    t = *real;
    t.upload = prof_upload;
    t.download = prof_download;
    t.patchify = prof_patchify;
    t.matmul_forward = prof_matmul_forward;
    t.matmul_forward_residual = prof_matmul_forward_residual;
    t.matmul_backward = prof_matmul_backward;
    t.embed_forward = prof_embed_forward;
    t.embed_backward = prof_embed_backward;
    t.layernorm_forward = prof_layernorm_forward;
    t.layernorm_backward = prof_layernorm_backward;
    t.attention_forward = prof_attention_forward;
    t.attention_backward = prof_attention_backward;
    t.gelu_forward = prof_gelu_forward;
    t.gelu_backward = prof_gelu_backward;
    t.zero = prof_zero;
    t.to_floatx = prof_to_floatx;
    t.to_float = prof_to_float;
    t.gather_cls = prof_gather_cls;
    t.scatter_cls_backward = prof_scatter_cls_backward;
    t.crossentropy_forward = prof_crossentropy_forward;
    t.crossentropy_backward = prof_crossentropy_backward;
    t.sum_squares = prof_sum_squares;
    t.sum_squares_into = prof_sum_squares_into;
    t.scale = prof_scale;
    t.adamw_update = prof_adamw_update;
    t.adamw_multi = prof_adamw_multi;
    return &t;
}

static int prof_cmp(const void *a, const void *b)
{
    const double x = ((const prof_row *)a)->seconds, y = ((const prof_row *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* ---- the benchmark ---- */

static void usage_exit(const char *why)
{
    fprintf(stderr,
            "gpu_bench: %s\nusage: gpu_bench [--model vit_b16] [--batch 128] [--steps 20] "
            "[--warmup 5] [--precision bf16-mixed|fp16-mixed|fp32] [--ckpt] [--device cuda|cpu] "
            "[--threads N] [--grad-clip 1.0] [--peak-tflops 989.4] [--profile] [--sync-steps] "
            "[--graph] [--candidates] [--json] [--attention]\n",
            why);
    exit(VITJOB_EXIT_CONFIG);
}

static long parse_long(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        char why[160];
        snprintf(why, sizeof why, "%s needs an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        usage_exit(why);
    }
    return v;
}

static double parse_double(const char *flag, const char *s, double lo)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v) || v < lo) {
        char why[160];
        snprintf(why, sizeof why, "%s needs a number >= %g, got '%s'", flag, lo, s);
        usage_exit(why);
    }
    return v;
}

static bench_args parse_args(int argc, char **argv)
{
    bench_args a = {.model = "vit_b16", .precision = "bf16-mixed", .device = "cuda",
                    .batch = 128, .steps = 20, .warmup = 5, .grad_clip = 1.0,
                    .peak_tflops = DEFAULT_PEAK_TFLOPS};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const int has_value = i + 1 < argc;
#define VALUE() (has_value ? argv[++i] : (usage_exit("a flag needs a value"), ""))
        if (strcmp(f, "--model") == 0) a.model = VALUE();
        else if (strcmp(f, "--batch") == 0) a.batch = (int)parse_long(f, VALUE(), 1, 1 << 16);
        else if (strcmp(f, "--steps") == 0) a.steps = (int)parse_long(f, VALUE(), 1, 1000000);
        else if (strcmp(f, "--warmup") == 0) a.warmup = (int)parse_long(f, VALUE(), 0, 1000000);
        else if (strcmp(f, "--threads") == 0) a.threads = (int)parse_long(f, VALUE(), 0, 4096);
        else if (strcmp(f, "--precision") == 0) a.precision = VALUE();
        else if (strcmp(f, "--device") == 0) a.device = VALUE();
        else if (strcmp(f, "--grad-clip") == 0) a.grad_clip = parse_double(f, VALUE(), 0.0);
        else if (strcmp(f, "--peak-tflops") == 0) {
            a.peak_tflops = parse_double(f, VALUE(), 1e-9);
            a.peak_given = 1;
        } else if (strcmp(f, "--ckpt") == 0) a.ckpt = 1;
        else if (strcmp(f, "--profile") == 0) a.profile = 1;
        else if (strcmp(f, "--sync-steps") == 0) a.sync_steps = 1;
        else if (strcmp(f, "--graph") == 0) a.graph = 1;
        else if (strcmp(f, "--candidates") == 0) a.candidates = 1;
        else if (strcmp(f, "--json") == 0) a.json = 1;
        else if (strcmp(f, "--attention") == 0) a.attention = 1;
        else {
            char why[160];
            snprintf(why, sizeof why, "unknown argument '%s'", f);
            usage_exit(why);
        }
#undef VALUE
    }
    if (strcmp(a.precision, "bf16-mixed") != 0 && strcmp(a.precision, "fp16-mixed") != 0 &&
        strcmp(a.precision, "fp32") != 0)
        usage_exit("--precision is bf16-mixed, fp16-mixed or fp32");
    if (strcmp(a.device, "cuda") != 0 && strcmp(a.device, "cpu") != 0)
        usage_exit("--device is cuda or cpu");
    if (a.graph && (strcmp(a.device, "cuda") != 0 || a.profile || a.sync_steps || a.warmup < 1))
        usage_exit("--graph needs --device cuda, at least one warm-up step, and neither "
                   "--profile nor --sync-steps");
    if (a.candidates && strcmp(a.device, "cuda") != 0)
        usage_exit("--candidates needs --device cuda");
    return a;
}

/* ---- --attention: the op alone, flash against unfused ---- */

/* A device floatX buffer of n random N(0,1) values (NULL: out of memory). */
static floatX *att_random(const vit_ops *g, size_t n, rng_state *r)
{
    float *h = malloc(n * sizeof *h), *tmp = g->alloc(n * sizeof(float));
    floatX *d = g->alloc(n * g->floatx_bytes);
    if (h && tmp && d) {
        for (size_t i = 0; i < n; i++) h[i] = rng_normal(r);
        g->upload(tmp, h, n * sizeof(float));
        g->to_floatx(d, tmp, n);
    } else if (d) {
        g->release(d);
        d = NULL;
    }
    if (tmp) g->release(tmp);
    free(h);
    return d;
}

/* Times `steps` forward + backward passes of g's attention at (B,T,D,NH)
 * after `warmup`, and prints the line; 0, or 1 with err set. */
static int att_bench_one(const vit_ops *g, const char *path, int B, int T, int D, int NH,
                         int steps, int warmup, char *err, size_t errlen)
{
    const size_t nq = (size_t)B * T * 3 * D, no = (size_t)B * T * D, nl = (size_t)B * NH * T;
    rng_state r;
    rng_seed(&r, 42, 0xa77e, 0);
    floatX *qkv = att_random(g, nq, &r), *dout = att_random(g, no, &r);
    floatX *out = g->alloc(no * g->floatx_bytes), *dqkv = g->alloc(nq * g->floatx_bytes);
    float *lse = g->alloc(nl * sizeof(float));
    const size_t sb = g->attention_scratch_bytes(B, T, D, NH);
    void *scratch = g->alloc(sb);
    int rc = 1;
    if (!qkv || !dout || !out || !dqkv || !lse || !scratch) {
        snprintf(err, errlen, "attention %s B=%d T=%d: out of device memory", path, B, T);
        goto out;
    }
    double tf = 0.0, tb = 0.0;
    for (int i = 0; i < warmup + steps; i++) {
        g->synchronize();
        const double t0 = mono_seconds();
        g->attention_forward(out, lse, scratch, qkv, B, T, D, NH);
        g->synchronize();
        const double t1 = mono_seconds();
        g->attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, D, NH);
        g->synchronize();
        const double t2 = mono_seconds();
        if (i >= warmup) tf += t1 - t0, tb += t2 - t1;
    }
    if (g->status(err, errlen)) goto out;
    const double fwd = 4.0 * B * (double)T * T * D, bwd = 2.5 * fwd;
    printf("attention path=%s backend=%s B=%d T=%d D=%d NH=%d hd=%d fwd_ms=%.3f bwd_ms=%.3f "
           "fwd_tflops=%.1f bwd_tflops=%.1f tflops=%.1f scratch_mib=%.1f\n",
           path, g->name, B, T, D, NH, D / NH, 1e3 * tf / steps, 1e3 * tb / steps,
           fwd * steps / tf / 1e12, bwd * steps / tb / 1e12, (fwd + bwd) * steps / (tf + tb) / 1e12,
           sb / 1048576.0);
    fflush(stdout);
    rc = 0;
out:
    g->release(qkv);
    g->release(dout);
    g->release(out);
    g->release(dqkv);
    g->release(lse);
    g->release(scratch);
    return rc;
}

/* ops_cuda's storage for a --precision */
static int storage_of(const char *precision)
{
    return strcmp(precision, "fp16-mixed") == 0   ? OPS_FP16
           : strcmp(precision, "bf16-mixed") == 0 ? OPS_BF16
                                                  : OPS_FP32;
}

static int attention_bench(const bench_args *a, const model_config *mc)
{
    char err[1024] = "";
    const int storage = storage_of(a->precision);
    const vit_ops *flash = ops_cuda(storage, err, sizeof err);
    const vit_ops *unfused = flash ? ops_cuda(storage | OPS_UNFUSED_ATTENTION, err, sizeof err)
                                   : NULL;
    const vit_ops *sync = unfused ? ops_cuda(storage | OPS_FLASH_SYNC_LOADS, err, sizeof err)
                                  : NULL;
    const vit_ops *fused = sync ? ops_cuda(storage | OPS_CANDIDATE_KERNELS, err, sizeof err)
                                : NULL;
    if (!flash || !unfused || !sync || !fused) {
        fprintf(stderr, "gpu_bench: %s\n", err);
        return VITJOB_EXIT_CONFIG;
    }
    const int N = (mc->image_size / mc->patch_size) * (mc->image_size / mc->patch_size);
    const int Ts[2] = {N + 1, 577};
    for (int i = 0; i < 2; i++) {
        if (att_bench_one(flash, "flash", a->batch, Ts[i], mc->dim, mc->heads, a->steps,
                          a->warmup, err, sizeof err) ||
            (storage != OPS_FP32 &&
             (att_bench_one(sync, "flash-sync", a->batch, Ts[i], mc->dim, mc->heads, a->steps,
                            a->warmup, err, sizeof err) ||
              att_bench_one(fused, "flash-fused", a->batch, Ts[i], mc->dim, mc->heads, a->steps,
                            a->warmup, err, sizeof err))) ||
            att_bench_one(unfused, "unfused", a->batch, Ts[i], mc->dim, mc->heads, a->steps,
                          a->warmup, err, sizeof err)) {
            fprintf(stderr, "gpu_bench: %s\n", err);
            return VITJOB_EXIT_FAILURE;
        }
    }
    return 0;
}

/* The module docstring's rule: 3 x (forward matmuls + attention products). */
static double model_flops_per_image(const model_config *mc)
{
    const double C = mc->channels, P = mc->patch_size, D = mc->dim, K = mc->num_classes,
                 H = config_mlp_hidden(mc), N = (double)(mc->image_size / mc->patch_size) *
                                                 (mc->image_size / mc->patch_size),
                 T = N + 1;
    const double block = 2.0 * T * (3 * D * D + D * D + 2 * D * H) + 2.0 * 2.0 * T * T * D;
    return 3.0 * (2.0 * N * (C * P * P) * D + mc->depth * block + 2.0 * D * K);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Queues one step as the trainer queues it (train.c): the forward's losses
 * to `losses`, the backward, the optimizer; its result is collected later. */
static optim_result queue_step(vit_model *m, optim *o, const vit_ops *ops, const float *images,
                               const int *labels, float *losses, float dloss, int batch,
                               long step)
{
    model_zero_grads(m);
    model_forward_queue(m, images, labels, NULL, batch, losses);
    model_backward(m, dloss);
    return optim_step_queue(o, m, ops, step);
}

/* --graph: one step (the trainer's queued step, as below) captured into a
 * CUDA graph after the warm-up, then replayed a.steps times, each replay
 * followed by a synchronize so that step_s holds each step's own time (a
 * host round trip of microseconds on a step of milliseconds). The replays
 * repeat the captured step's host inputs (batch, learning rate, step
 * count): a measurement of what launching the step as one graph saves, not
 * training. *t_timed: when the replays began; *res: the captured step's
 * result (optim_step_collect reads it once the replays are done). 0, or 1
 * with err set. */
static int graph_steps(vit_model *m, optim *o, const vit_ops *ops, const float *images,
                       const int *labels, float *losses, float dloss, bench_args a,
                       double *step_s, double *t_timed, optim_result *res, size_t *nodes,
                       char *err, size_t errlen)
{
    if (ops_cuda_graph(OPS_GRAPH_BEGIN, NULL, err, errlen)) return 1;
    *res = queue_step(m, o, ops, images, labels, losses + (size_t)(a.warmup & 1) * (size_t)a.batch,
                      dloss, a.batch, a.warmup);
    if (ops_cuda_graph(OPS_GRAPH_END, nodes, err, errlen)) return 1;
    *t_timed = mono_seconds();
    for (int i = 0; i < a.steps; i++) {
        const double t0 = mono_seconds();
        if (ops_cuda_graph(OPS_GRAPH_REPLAY, NULL, err, errlen)) return 1;
        ops->synchronize();
        step_s[i] = mono_seconds() - t0;
    }
    return model_status(m, err, errlen);
}

int main(int argc, char **argv)
{
    stdfds_ensure("gpu_bench", 1);
    const double t_start = mono_seconds();
    const bench_args a = parse_args(argc, argv);
    char err[1024] = "";

    vit_job_config cfg;
    config_defaults(&cfg);
    if (config_preset(&cfg.model, a.model) != 0) {
        fprintf(stderr, "gpu_bench: unknown --model '%s' (a preset of api/config.h: vit_ti16 "
                        "vit_s16 vit_b16 vit_l16 vit_h14 vit_g14 fmnist_tiny fmnist_small)\n",
                a.model);
        return VITJOB_EXIT_CONFIG;
    }
    const model_config *mc = &cfg.model;
    if (a.attention) return attention_bench(&a, mc);
    optimizer_config oc = cfg.training.optimizer; /* AdamW, betas, eps, wd 0.05: the trainer's */
    oc.lr = 1e-4;                                 /* constant: the rate only has to stay sane */
    oc.warmup_steps = 0;
    oc.schedule = SCHEDULE_CONSTANT;
    oc.grad_clip = a.grad_clip;

    /* the trainer's own choice of op table for this device and precision */
    cfg.training.device = strcmp(a.device, "cuda") == 0 ? DEVICE_CUDA : DEVICE_CPU;
    cfg.training.precision = strcmp(a.precision, "bf16-mixed") == 0   ? PRECISION_BF16_MIXED
                             : strcmp(a.precision, "fp16-mixed") == 0 ? PRECISION_FP16_MIXED
                                                                      : PRECISION_FP32;
    const vit_ops *real;
    if (train_pick_backend(&real, &cfg.training, err, sizeof err) != 0) {
        fprintf(stderr, "gpu_bench: %s\n", err);
        return VITJOB_EXIT_CONFIG;
    }
    if (a.candidates) { /* the same precision, the candidate kernels */
        real = ops_cuda(storage_of(a.precision) | OPS_CANDIDATE_KERNELS, err, sizeof err);
        if (!real) {
            fprintf(stderr, "gpu_bench: %s\n", err);
            return VITJOB_EXIT_CONFIG;
        }
    }
    const int on_gpu = real->gpu;
    const int threads = on_gpu ? 0 : ops_cpu_set_threads(a.threads);
    const vit_ops *ops = a.profile ? prof_wrap(real) : real;

    vit_model *m = NULL;
    optim *o = NULL;
    float *images = NULL;
    int *labels = NULL;
    double *step_s = NULL;
    float *losses = NULL; /* the steps' losses, read back by parity (train.c's loss_host) */
    int rc = VITJOB_EXIT_FAILURE;
    const model_options mopts = {.activation_checkpointing = a.ckpt};
    const long total = (long)a.warmup + a.steps;
    if (model_new(&m, mc, a.batch, &mopts, ops, err, sizeof err) != 0) goto out;
    if (model_init_random(m, cfg.training.seed) != 0) {
        snprintf(err, sizeof err, "out of host memory for the initial weights");
        goto out;
    }
    if (optim_new(&o, m, &oc, total, err, sizeof err) != 0) goto out;

    /* The synthetic batch: pixels ~ N(0,1) (normalised images), uniform labels. */
    const size_t n_img = (size_t)a.batch * model_image_floats(m);
    images = malloc(n_img * sizeof *images);
    labels = malloc((size_t)a.batch * sizeof *labels);
    step_s = malloc((size_t)a.steps * sizeof *step_s);
    if (!images || !labels || !step_s) {
        snprintf(err, sizeof err, "out of host memory for the batch (%zu floats)", n_img);
        goto out;
    }
    /* pinned, as the trainer's batch buffer is (train.c) */
    (void)real->pin(images, n_img * sizeof *images);
    rng_state r;
    rng_seed(&r, cfg.training.seed, 0xbe1c, 0);
    for (size_t i = 0; i < n_img; i++) images[i] = rng_normal(&r);
    for (int b = 0; b < a.batch; b++) labels[b] = (int)rng_below(&r, (uint64_t)mc->num_classes);

    const double setup_s = mono_seconds() - t_start; /* backend, model, init, batch */
    const float dloss = 1.0f / (float)a.batch;
    double loss_first = 0.0, loss_last = 0.0, grad_norm = 0.0, timed = 0.0;
    losses = real->host_alloc(2 * (size_t)a.batch * sizeof(float));
    if (!losses) {
        snprintf(err, sizeof err, "out of pinned host memory for the losses");
        goto out;
    }
    optim_result res[2];
    double t_timed = 0.0;
    size_t graph_nodes = 0;
    /* --graph: the warm-up steps as below, then the timed ones as graph_steps */
    const long loop_total = a.graph ? (long)a.warmup : total;
    for (long step = 0; step <= loop_total; step++) {
        if (step == a.warmup && !a.graph) {
            ops->synchronize();
            if (model_status(m, err, sizeof err)) goto out;
            prof_on = 1; /* the profile counts the timed steps only */
            t_timed = mono_seconds();
        }
        /* a step's time: queueing it and reading the one before back (on a
         * GPU the host waits there for the device; on the CPU it computes) */
        const double t_iter = mono_seconds();
        if (step < loop_total) { /* queue this step */
            res[step & 1] = queue_step(m, o, ops, images, labels,
                                       losses + (size_t)(step & 1) * (size_t)a.batch, dloss,
                                       a.batch, step);
            if (a.sync_steps) ops->synchronize();
        }
        if (step > 0) { /* the step before: read its loss and norm */
            const long done = step - 1;
            const float *l = losses + (size_t)(done & 1) * (size_t)a.batch;
            real->wait_host(l);
            optim_step_collect(o, &res[done & 1]);
            const float loss = model_mean_loss(l, a.batch);
            if (model_status(m, err, sizeof err)) goto out;
            if (!isfinite(loss)) {
                snprintf(err, sizeof err, "loss is %f at step %ld: the engine is broken", loss,
                         done);
                goto out;
            }
            if (done == 0) loss_first = loss;
            loss_last = loss;
            grad_norm = res[done & 1].grad_norm;
        }
        if (step >= a.warmup && step < total) step_s[step - a.warmup] = mono_seconds() - t_iter;
    }
    if (a.graph) {
        ops->synchronize();
        if (model_status(m, err, sizeof err)) goto out;
        if (graph_steps(m, o, ops, images, labels, losses, dloss, a, step_s, &t_timed,
                        &res[0], &graph_nodes, err, sizeof err))
            goto out;
        const float loss = model_mean_loss(losses + (size_t)(a.warmup & 1) * (size_t)a.batch,
                                           a.batch);
        optim_step_collect(o, &res[0]);
        if (model_status(m, err, sizeof err)) goto out;
        if (!isfinite(loss)) {
            snprintf(err, sizeof err, "loss is %f after the graph's replays", loss);
            goto out;
        }
        loss_last = loss;
        grad_norm = res[0].grad_norm;
    }
    ops->synchronize();
    timed = mono_seconds() - t_timed;
    prof_on = 0;
    if (prof_rows[PROF_MAX_ROWS].calls) prof_n = PROF_MAX_ROWS + 1;

    const double flops_img = model_flops_per_image(mc);
    const double ips = a.batch * a.steps / timed, ms_step = 1e3 * timed / a.steps;
    const double tflops = ips * flops_img / 1e12;
    const int have_peak = on_gpu || a.peak_given;
    const double mfu = have_peak ? tflops / a.peak_tflops : 0.0;
    qsort(step_s, (size_t)a.steps, sizeof *step_s, cmp_double);
    const int mid = a.steps / 2;
    const double ms_median =
        1e3 * (a.steps % 2 ? step_s[mid] : 0.5 * (step_s[mid - 1] + step_s[mid]));
    const double ms_min = 1e3 * step_s[0], ms_max = 1e3 * step_s[a.steps - 1];
    const size_t peak_dev = on_gpu ? ops_cuda_peak_bytes() : 0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double rss_mib = (double)ru.ru_maxrss / 1024.0;
    qsort(prof_rows, (size_t)prof_n, sizeof prof_rows[0], prof_cmp);
    double ops_s = 0.0;
    for (int i = 0; i < prof_n; i++) ops_s += prof_rows[i].seconds;

    if (a.json) {
        printf("{\"impl\":\"vitjob\",\"model\":\"%s\",\"backend\":\"%s\",\"precision\":\"%s\","
               "\"device\":\"%s\",\"batch\":%d,\"steps\":%d,\"warmup\":%d,\"ckpt\":%d,"
               "\"threads\":%d,\"grad_clip\":%g,\"params\":%zu,\"tokens\":%d,"
               "\"flops_per_image\":%.6e,\"images_per_sec\":%.3f,\"ms_per_step\":%.4f,"
               "\"ms_per_step_median\":%.4f,\"ms_per_step_min\":%.4f,\"ms_per_step_max\":%.4f,"
               "\"tflops\":%.4f,\"peak_tflops\":%.6g,\"mfu\":",
               a.model, real->name, a.precision, a.device, a.batch, a.steps, a.warmup, a.ckpt,
               threads, a.grad_clip, model_num_params(m), model_tokens(m), flops_img, ips,
               ms_step, ms_median, ms_min, ms_max, tflops, a.peak_tflops);
        if (have_peak) printf("%.6f", mfu);
        else printf("null");
        printf(",\"peak_device_bytes\":%zu,\"peak_rss_mib\":%.1f,\"loss_first\":%.6f,"
               "\"loss_last\":%.6f,\"grad_norm_last\":%.6g,\"setup_s\":%.3f,\"profiled\":%s,"
               "\"sync_steps\":%s,\"graph\":%s,\"graph_nodes\":%zu",
               peak_dev, rss_mib, loss_first, loss_last, grad_norm, setup_s,
               a.profile ? "true" : "false", a.sync_steps ? "true" : "false",
               a.graph ? "true" : "false", graph_nodes);
        if (a.profile) {
            printf(",\"profile_ops_ms\":%.4f,\"profile\":[", 1e3 * ops_s);
            for (int i = 0; i < prof_n; i++)
                printf("%s{\"op\":\"%s\",\"shape\":\"%s\",\"calls\":%ld,\"ms\":%.4f,"
                       "\"flops\":%.6e}",
                       i ? "," : "", prof_rows[i].op, prof_rows[i].shape, prof_rows[i].calls,
                       1e3 * prof_rows[i].seconds, prof_rows[i].flops);
            printf("]");
        }
        printf("}\n");
    } else {
        printf("gpu_bench: %s on %s (%s%s), batch %d, %d timed steps after %d warm-up%s%s\n",
               a.model, real->name, a.precision, a.ckpt ? ", activation checkpointing" : "",
               a.batch, a.steps, a.warmup,
               a.profile ? " [PROFILED: every op between two synchronizes; not the throughput]"
                         : "",
               a.graph ? " [GRAPH: one captured step replayed, a synchronize after each]" : "");
        if (a.graph) printf("  graph nodes  %10zu\n", graph_nodes);
        printf("  params %.2fM, tokens %d, model FLOPs/image %.2f G "
               "(3 x forward matmuls + attention)\n",
               model_num_params(m) / 1e6, model_tokens(m), flops_img / 1e9);
        printf("  img/s        %10.1f\n", ips);
        printf("  ms/step      %10.2f  (median %.2f, min %.2f, max %.2f)\n", ms_step, ms_median,
               ms_min, ms_max);
        printf("  TFLOP/s      %10.2f\n", tflops);
        if (have_peak)
            printf("  MFU          %9.1f%%  of %.1f TFLOP/s peak\n", 100.0 * mfu, a.peak_tflops);
        else
            printf("  MFU                 n/a  (CPU; give --peak-tflops)\n");
        if (on_gpu)
            printf("  peak memory  %10.2f GiB (device, all allocations through the backend)\n",
                   peak_dev / 1073741824.0);
        printf("  peak RSS     %10.1f MiB (host)\n", rss_mib);
        printf("  loss         %.4f -> %.4f (random labels; ln K = %.4f), last grad norm %.4g\n",
               loss_first, loss_last, log((double)mc->num_classes), grad_norm);
        printf("  setup        %10.1f s (backend, model, random init, batch; not timed)\n",
               setup_s);
        if (a.profile) {
            printf("\nper-op time over the %d timed steps (matmul shapes N x IC x OC, "
                   "attention B x T x D x NH):\n",
                   a.steps);
            printf("  %-24s %-18s %7s %10s %9s %7s %8s\n", "op", "shape", "calls", "total ms",
                   "ms/step", "% step", "TFLOP/s");
            for (int i = 0; i < prof_n; i++) {
                const prof_row *p = &prof_rows[i];
                printf("  %-24s %-18s %7ld %10.2f %9.3f %6.1f%%", p->op, p->shape, p->calls,
                       1e3 * p->seconds, 1e3 * p->seconds / a.steps, 100.0 * p->seconds / timed);
                if (p->flops > 0) printf(" %8.1f\n", p->flops / p->seconds / 1e12);
                else printf(" %8s\n", "");
            }
            printf("  %-24s %-18s %7s %10.2f %9.3f %6.1f%%\n", "(all ops)", "", "", 1e3 * ops_s,
                   1e3 * ops_s / a.steps, 100.0 * ops_s / timed);
            printf("  %-24s %-18s %7s %10.2f %9.3f %6.1f%%\n", "(outside ops: host, syncs)", "",
                   "", 1e3 * (timed - ops_s), 1e3 * (timed - ops_s) / a.steps,
                   100.0 * (timed - ops_s) / timed);
        }
    }
    fflush(stdout);
    rc = 0;
out:
    if (rc != 0) fprintf(stderr, "gpu_bench: %s\n", err[0] ? err : "failed");
    if (a.graph) {
        char ignored[64];
        (void)ops_cuda_graph(OPS_GRAPH_FREE, NULL, ignored, sizeof ignored);
    }
    if (images) real->unpin(images);
    real->host_free(losses);
    free(images);
    free(labels);
    free(step_s);
    optim_free(o);
    model_free(m);
    return rc;
}
