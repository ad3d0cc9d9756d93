/* tests/test_dp.c - worker/train/dp.c and its strategies (dp_none.c,
 * dp_grad_op.c, dp_full.c): with a communicator every strategy runs at every
 * world size, one included, through the same code as many ranks, and gives
 * the one-process weights bit for bit at world 1 (tests/ranks.bats runs 2 to
 * 4 ranks); the checkpoint segments of all ranks cover every parameter
 * exactly once; the memory plan counts what each strategy holds; an
 * unknown mode is refused; the planner's probe of a strategy's own
 * schedule (full's) runs on every rank for the same steps. */
#include <criterion/criterion.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dp_fixture.h"
#include "rank_fixture.h"
#include "rdzv.h"

TestSuite(dp, .timeout = 120);

static const sharding_mode modes[] = {SHARDING_NONE, SHARDING_GRAD_OP, SHARDING_FULL};
static const char *const names[] = {"none", "grad-op", "full"};

Test(dp, every_strategy_through_a_communicator_of_one_rank_gives_the_weights_of_one_process)
{
    ops_cpu_set_threads(1);
    char err[512] = "";
    size_t n = 0;
    double base_loss[DPF_STEPS];
    cr_assert_eq(dpf_train(ops_cpu(), NULL, SHARDING_FULL, base_loss, NULL, &n, err, sizeof err),
                 0, "%s", err);
    float *base = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    cr_assert(base && got);
    cr_assert_eq(dpf_train(ops_cpu(), NULL, SHARDING_NONE, NULL, base, &n, err, sizeof err), 0);
    for (int k = 0; k < 3; k++) {
        comm *c = NULL;
        cr_assert_eq(comm_new_cpu_store(&c, NULL, 0, 1, 10, err, sizeof err), 0, "%s", err);
        double loss[DPF_STEPS];
        cr_assert_eq(dpf_train(ops_cpu(), c, modes[k], loss, got, &n, err, sizeof err), 0,
                     "%s: %s", names[k], err);
        comm_free(c);
        cr_assert_arr_eq(loss, base_loss, sizeof loss, "%s: the losses differ", names[k]);
        cr_assert_arr_eq(got, base, sizeof(float) * n, "%s: the weights differ", names[k]);
    }
    /* and the steps did something */
    cr_assert(base_loss[DPF_STEPS - 1] != base_loss[0]);
    free(base);
    free(got);
}

/* rank r of world: dp over a gloo communicator, attached to the model; the
 * checkpoint segments' ranges written to fd as "lo hi" lines */
static int segments_of(const char *ep, int rank, int world, sharding_mode mode, int fd)
{
    const model_config mc = dpf_vit();
    const optimizer_config oc = dpf_adamw();
    rdzv_options ro = {.endpoint = ep, .rank = rank, .world_size = world, .timeout_s = 30};
    rdzv *z = NULL;
    comm *c = NULL;
    dp *d = NULL;
    vit_model *m = NULL;
    char err[512];
    model_options mo = {0};
    dp_options o = {.ops = ops_cpu(), .mc = &mc, .oc = &oc, .total_steps = 1, .mode = mode};
    if (rdzv_new(&z, &ro, NULL, err, sizeof err) || comm_new_cpu(&c, z, 30, err, sizeof err)) {
        fprintf(stderr, "rank %d of %d: %s\n", rank, world, err);
        return 1;
    }
    o.comm = c;
    if (dp_new(&d, &o, &mo, err, sizeof err) || dp_prepare(d, &mo, err, sizeof err) ||
        model_new(&m, &mc, 1, &mo, ops_cpu(), err, sizeof err) || model_init_random(m, 1) ||
        dp_attach(d, m, err, sizeof err)) {
        fprintf(stderr, "rank %d of %d: %s\n", rank, world, err);
        return 2;
    }
    ckpt_segment *segs = NULL;
    int k = dp_segments(d, &segs);
    if (k < 0) return 3;
    char line[64];
    for (int i = 0; i < k; i++) {
        int len = snprintf(line, sizeof line, "%zu %zu\n", segs[i].lo, segs[i].hi);
        if (write(fd, line, (size_t)len) != len) return 4;
    }
    free(segs);
    model_free(m);
    dp_free(d);
    /* leave together: a rank gone while a peer still finishes connecting
     * fails that peer's connect (no collective ran in between) */
    if (comm_barrier(c, err, sizeof err)) return 5;
    comm_free(c);
    rdzv_free(z);
    return 0;
}

static int by_lo(const void *a, const void *b)
{
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

Test(dp, the_checkpoint_segments_of_all_ranks_cover_every_parameter_exactly_once)
{
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    ops_cpu_set_threads(1);
    for (int k = 0; k < 3; k++) {
        for (int world = 1; world <= 3; world++) {
            char ep[64];
            snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
            int fds[2];
            cr_assert_eq(pipe(fds), 0);
            pid_t pids[3];
            for (int r = 0; r < world; r++) {
                if ((pids[r] = fork()) == 0) {
                    signal(SIGPIPE, SIG_IGN);
                    close(fds[0]);
                    _exit(segments_of(ep, r, world, modes[k], fds[1]));
                }
            }
            close(fds[1]);
            size_t ranges[512][2], nr = 0;
            FILE *f = fdopen(fds[0], "r");
            while (nr < 512 && fscanf(f, "%zu %zu", &ranges[nr][0], &ranges[nr][1]) == 2) nr++;
            fclose(f);
            for (int r = 0; r < world; r++) {
                int s;
                cr_assert_eq(waitpid(pids[r], &s, 0), pids[r]);
                cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "%s, world %d, rank %d: %d",
                          names[k], world, r, WEXITSTATUS(s));
            }
            qsort(ranges, nr, sizeof ranges[0], by_lo);
            size_t at = 0;
            for (size_t i = 0; i < nr; i++) {
                cr_assert_eq(ranges[i][0], at, "%s, world %d: a gap or an overlap at %zu",
                             names[k], world, at);
                cr_assert(ranges[i][1] > ranges[i][0]);
                at = ranges[i][1];
            }
            vit_model *m = NULL;
            char err[256];
            const model_config mc = dpf_vit();
            cr_assert_eq(model_new(&m, &mc, 1, NULL, ops_cpu(), err, sizeof err), 0);
            cr_assert_eq(at, model_num_params(m), "%s, world %d: covered %zu of %zu", names[k],
                         world, at, model_num_params(m));
            model_free(m);
        }
    }
}

Test(dp, the_memory_plan_shards_the_optimizer_under_grad_op_and_everything_under_full)
{
    const model_config mc = dpf_vit();
    const optimizer_config oc = dpf_adamw();
    char err[256];
    vit_model *m = NULL;
    cr_assert_eq(model_new(&m, &mc, 1, NULL, ops_cpu(), err, sizeof err), 0);
    const size_t n = model_num_params(m);
    model_free(m);
    dp_memory mem[3];
    for (int k = 0; k < 3; k++) {
        comm *c = NULL;
        cr_assert_eq(comm_new_cpu_store(&c, NULL, 0, 1, 10, err, sizeof err), 0);
        model_options mo = {0};
        dp_options o = {.comm = c, .ops = ops_cpu(), .mc = &mc, .oc = &oc, .total_steps = 1,
                        .mode = modes[k]};
        dp *d = NULL;
        cr_assert_eq(dp_new(&d, &o, &mo, err, sizeof err), 0, "%s", err);
        cr_assert_str_eq(dp_name(d), names[k]);
        cr_assert_eq(mo.shard != NULL, modes[k] == SHARDING_FULL, "%s: the model's shard hooks",
                     names[k]);
        mem[k] = dp_memory_of(d, n);
        dp_free(d);
        comm_free(c);
    }
    /* one rank: AdamW state for every parameter whatever the strategy */
    for (int k = 0; k < 3; k++)
        cr_assert_eq(mem[k].optim_bytes, optim_memory_bytes(n), "%s", names[k]);
    cr_assert_eq(mem[0].own_bytes, optim_memory_bytes(n), "none holds only the optimizer");
    cr_assert(mem[2].own_bytes >= optim_memory_bytes(n) + 2 * n * sizeof(float),
              "full holds the parameters and gradients too");
}

Test(dp, an_unknown_sharding_mode_is_refused_naming_it)
{
    const model_config mc = dpf_vit();
    const optimizer_config oc = dpf_adamw();
    model_options mo = {0};
    dp_options o = {.ops = ops_cpu(), .mc = &mc, .oc = &oc, .total_steps = 1,
                    .mode = (sharding_mode)7};
    dp *d = (dp *)1;
    char err[256] = "";
    cr_assert_eq(dp_new(&d, &o, &mo, err, sizeof err), VJ_ERR_CONFIG);
    cr_assert_null(d);
    cr_assert(strstr(err, "mode 7"), "%s", err);
}

/* rank r of world under grad-op: its memory plan's optimizer bytes to fd */
static int optim_bytes_of(const char *ep, int rank, int world, size_t n, int fd)
{
    const model_config mc = dpf_vit();
    const optimizer_config oc = dpf_adamw();
    rdzv_options ro = {.endpoint = ep, .rank = rank, .world_size = world, .timeout_s = 30};
    rdzv *z = NULL;
    comm *c = NULL;
    dp *d = NULL;
    char err[512];
    model_options mo = {0};
    dp_options o = {.ops = ops_cpu(), .mc = &mc, .oc = &oc, .total_steps = 1,
                    .mode = SHARDING_GRAD_OP};
    if (rdzv_new(&z, &ro, NULL, err, sizeof err) || comm_new_cpu(&c, z, 30, err, sizeof err)) {
        fprintf(stderr, "rank %d of %d: %s\n", rank, world, err);
        return 1;
    }
    o.comm = c;
    if (dp_new(&d, &o, &mo, err, sizeof err)) {
        fprintf(stderr, "rank %d of %d: %s\n", rank, world, err);
        return 2;
    }
    dp_memory mem = dp_memory_of(d, n);
    char line[64];
    int len = snprintf(line, sizeof line, "%d %zu\n", rank, mem.optim_bytes);
    if (write(fd, line, (size_t)len) != len) return 3;
    dp_free(d);
    if (comm_barrier(c, err, sizeof err)) return 4;
    comm_free(c);
    rdzv_free(z);
    return 0;
}

Test(dp, under_grad_op_each_rank_plans_adamw_state_for_its_slice_only_and_the_slices_sum_to_all)
{
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    vit_model *m = NULL;
    char err[256];
    const model_config mc = dpf_vit();
    cr_assert_eq(model_new(&m, &mc, 1, NULL, ops_cpu(), err, sizeof err), 0);
    const size_t n = model_num_params(m);
    model_free(m);
    enum { W = 3 };
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pids[W];
    for (int r = 0; r < W; r++) {
        if ((pids[r] = fork()) == 0) {
            signal(SIGPIPE, SIG_IGN);
            close(fds[0]);
            _exit(optim_bytes_of(ep, r, W, n, fds[1]));
        }
    }
    close(fds[1]);
    size_t bytes[W] = {0}, total = 0;
    int rank, seen = 0;
    size_t b;
    FILE *f = fdopen(fds[0], "r");
    while (fscanf(f, "%d %zu", &rank, &b) == 2)
        if (rank >= 0 && rank < W) bytes[rank] = b, seen++;
    fclose(f);
    for (int r = 0; r < W; r++) {
        int s;
        cr_assert_eq(waitpid(pids[r], &s, 0), pids[r]);
        cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "rank %d: %d", r, WEXITSTATUS(s));
    }
    cr_assert_eq(seen, W);
    const size_t slice = (n + W - 1) / W;
    for (int r = 0; r < W; r++) {
        cr_assert_leq(bytes[r], optim_memory_bytes(slice), "rank %d plans %zu bytes, more than "
                      "its slice of %zu parameters", r, bytes[r], slice);
        total += bytes[r];
    }
    cr_assert_eq(total, optim_memory_bytes(n), "the slices' state sums to every parameter's");
}

/* ---- training.ema: each rank keeps the EMA of its optimizer spans ---- */

Test(dp, with_training_ema_every_strategy_through_one_rank_keeps_the_one_process_ema_bit_for_bit)
{
    ops_cpu_set_threads(1);
    char err[512] = "";
    size_t n = 0;
    const ema_config cases[2] = {{.decay = 0.5, .warmup = 0}, {.decay = 0.7, .warmup = 1}};
    cr_assert_eq(dpf_train(ops_cpu(), NULL, SHARDING_NONE, NULL, NULL, &n, err, sizeof err), 0);
    float *plain = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n);
    float *base = malloc(sizeof(float) * n);
    float *got_w = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    cr_assert(plain && w && base && got_w && got);
    cr_assert_eq(dpf_train(ops_cpu(), NULL, SHARDING_NONE, NULL, plain, &n, err, sizeof err), 0);
    for (int e = 0; e < 2; e++) {
        dpf_ema = &cases[e];
        dpf_ema_out = base;
        cr_assert_eq(dpf_train(ops_cpu(), NULL, SHARDING_NONE, NULL, w, &n, err, sizeof err), 0,
                     "%s", err);
        /* the EMA changes nothing of the training, and is neither the weights nor zero */
        cr_assert_arr_eq(w, plain, sizeof(float) * n, "the EMA changed the weights");
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) differ += base[i] != w[i];
        cr_assert(differ > n / 2, "the EMA is the weights in %zu of %zu values", n - differ, n);
        for (int k = 0; k < 3; k++) {
            comm *c = NULL;
            cr_assert_eq(comm_new_cpu_store(&c, NULL, 0, 1, 10, err, sizeof err), 0, "%s", err);
            dpf_ema_out = got;
            cr_assert_eq(dpf_train(ops_cpu(), c, modes[k], NULL, got_w, &n, err, sizeof err), 0,
                         "%s: %s", names[k], err);
            comm_free(c);
            cr_assert_arr_eq(got, base, sizeof(float) * n, "%s (warmup %d): the EMA differs",
                             names[k], cases[e].warmup);
            cr_assert_arr_eq(got_w, w, sizeof(float) * n,
                             "%s: the weights after swapping the EMA in and out differ", names[k]);
        }
    }
    dpf_ema = NULL;
    dpf_ema_out = NULL;
    free(plain), free(w), free(base), free(got_w), free(got);
}

static comm *ema_comms[16];
static int ema_ncomms;

/* A strategy under mode with ema (NULL: none), alone, on the fixture's model
 * from seed 5, and `steps` of the fixture's steps taken. */
static void ema_run_on(const vit_ops *ops, sharding_mode mode, const ema_config *ema, int steps,
                       dp **d, vit_model **m);
static void ema_run(sharding_mode mode, const ema_config *ema, int steps, dp **d, vit_model **m)
{
    ema_run_on(ops_cpu(), mode, ema, steps, d, m);
}

static void ema_run_on(const vit_ops *ops, sharding_mode mode, const ema_config *ema, int steps,
                       dp **d, vit_model **m)
{
    static model_config mc;
    static optimizer_config oc;
    mc = dpf_vit();
    oc = dpf_adamw();
    char err[512] = "";
    comm *c = NULL;
    cr_assert_eq(comm_new_cpu_store(&c, NULL, 0, 1, 10, err, sizeof err), 0, "%s", err);
    model_options mo = {0};
    dp_options o = {.comm = c, .ops = ops, .mc = &mc, .oc = &oc, .total_steps = DPF_STEPS,
                    .mode = mode, .ema = ema};
    cr_assert_eq(dp_new(d, &o, &mo, err, sizeof err), 0, "%s", err);
    cr_assert_eq(dp_prepare(*d, &mo, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_new(m, &mc, DPF_BATCH, &mo, ops, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_random(*m, 5), 0);
    cr_assert_eq(dp_attach(*d, *m, err, sizeof err), 0, "%s", err);
    float img[DPF_CH * DPF_IMG * DPF_IMG * DPF_BATCH];
    int lab[DPF_BATCH];
    for (int s = 0; s < steps; s++) {
        dp_zero_grads(*d);
        dpf_rows(img, lab, 0, DPF_BATCH, s);
        model_forward(*m, img, lab, DPF_BATCH);
        model_backward(*m, 1.0f / DPF_BATCH);
        optim_result res;
        cr_assert_eq(dp_sync(*d, err, sizeof err) || dp_update(*d, s, &res, err, sizeof err), 0,
                     "%s", err);
    }
    /* the communicator is the strategy's to use until dp_free: freed with it below */
    ema_comms[ema_ncomms++] = c;
}

static void ema_read(dp *d, vit_model *m, float *weights, float *ema)
{
    char err[256];
    cr_assert_eq(model_read_params(m, weights), 0);
    cr_assert_eq(dp_use_ema(d, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_read_params(m, ema), 0);
    cr_assert_eq(dp_use_ema(d, 0, err, sizeof err), 0, "%s", err);
}

static ckpt_status load_into(void *ctx, ckpt_store *store, const ckpt_manifest *man, char *err,
                             size_t errlen)
{
    return dp_load(ctx, store, man, err, errlen);
}

Test(dp, a_checkpoint_restores_the_ema_and_one_saved_without_it_starts_the_ema_from_its_weights)
{
    ops_cpu_set_threads(1);
    char dir[64] = "/tmp/test_dp_ema_XXXXXX", uri[128], err[1024] = "";
    cr_assert_not_null(mkdtemp(dir));
    const ema_config ec = {.decay = 0.6, .warmup = 0};
    for (int k = 0; k < 3; k++) {
        for (int with = 0; with < 2; with++) {
            /* save after 2 steps (with or without an EMA) under mode k */
            snprintf(uri, sizeof uri, "file://%s/%s-%d", dir, names[k], with);
            ckpt_store *st = NULL;
            cr_assert_eq(ckpt_store_open(&st, uri, "", err, sizeof err), CKPT_OK, "%s", err);
            dp *d = NULL;
            vit_model *m = NULL;
            ema_run(modes[k], with ? &ec : NULL, 2, &d, &m);
            const size_t n = model_num_params(m);
            float *w = malloc(sizeof(float) * n), *e = malloc(sizeof(float) * n);
            float *w2 = malloc(sizeof(float) * n), *e2 = malloc(sizeof(float) * n);
            cr_assert(w && e && w2 && e2);
            if (with) ema_read(d, m, w, e);
            else cr_assert_eq(model_read_params(m, w), 0);
            ckpt_writer *wr = NULL;
            cr_assert_eq(ckpt_writer_new(&wr, st, NULL, 0, 1, 3, 10, err, sizeof err), 0);
            ckpt_meta meta = {.step = 2, .world_size = 1, .n_params = n, .ema = dp_has_ema(d)};
            snprintf(meta.sharding, sizeof meta.sharding, "%s", dp_name(d));
            snprintf(meta.model, sizeof meta.model, "{}");
            ckpt_segment *segs = NULL;
            int ns = dp_segments(d, &segs);
            cr_assert(ns > 0);
            cr_assert_eq(ckpt_save(wr, &meta, segs, ns, ops_cpu(), err, sizeof err), CKPT_OK,
                         "%s", err);
            cr_assert_eq(ckpt_wait(wr, NULL, err, sizeof err), CKPT_OK, "%s", err);
            free(segs);
            ckpt_writer_free(wr);
            model_free(m);
            dp_free(d);
            /* a fresh run with an EMA, under another mode (a resume reads any
             * layout), loads it */
            ema_run(modes[(k + 1) % 3], &ec, 0, &d, &m);
            ckpt_resume_options o = {.store = st, .rank = 0, .world = 1, .timeout_s = 5,
                                     .uri = uri, .model_json = "{}", .n_params = n,
                                     .load = load_into, .ctx = d};
            ckpt_meta got;
            cr_assert_eq(ckpt_resume(&o, &got, err, sizeof err), VJ_OK, "%s", err);
            cr_assert_eq(got.step, 2);
            ema_read(d, m, w2, e2);
            cr_assert_arr_eq(w2, w, sizeof(float) * n, "%s: the weights", names[k]);
            cr_assert_arr_eq(e2, with ? e : w, sizeof(float) * n, "%s, saved %s an EMA: the EMA",
                             names[k], with ? "with" : "without");
            model_free(m);
            dp_free(d);
            ckpt_store_free(st);
            free(w), free(e), free(w2), free(e2);
        }
    }
    for (int i = 0; i < ema_ncomms; i++) comm_free(ema_comms[i]);
    ema_ncomms = 0;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The logits of a plain model (no strategy) holding `weights`, on ops, for
 * the fixture's step-9 batch. */
static void logits_of(const vit_ops *ops, const float *weights, float *logits)
{
    const model_config mc = dpf_vit();
    vit_model *m = NULL;
    char err[256];
    cr_assert_eq(model_new(&m, &mc, DPF_BATCH, NULL, ops, err, sizeof err), 0, "%s", err);
    model_write_params(m, weights); /* refreshes the bf16 copy */
    float img[DPF_CH * DPF_IMG * DPF_IMG * DPF_BATCH];
    int lab[DPF_BATCH];
    dpf_rows(img, lab, 0, DPF_BATCH, 9);
    model_forward(m, img, lab, DPF_BATCH);
    memcpy(logits, model_logits(m), sizeof(float) * DPF_BATCH * DPF_CLASSES);
    model_free(m);
}

Test(dp, in_bf16_mixed_the_model_computes_with_the_ema_while_it_is_in_and_with_the_weights_after)
{
    ops_cpu_set_threads(1);
    const ema_config ec = {.decay = 0.5, .warmup = 0};
    const vit_ops *bf = ops_cpu_bf16();
    for (int k = 0; k < 3; k++) {
        dp *d = NULL;
        vit_model *m = NULL;
        ema_run_on(bf, modes[k], &ec, 3, &d, &m);
        const size_t n = model_num_params(m);
        float *w = malloc(sizeof(float) * n), *e = malloc(sizeof(float) * n);
        cr_assert(w && e);
        ema_read(d, m, w, e);
        float want_e[DPF_BATCH * DPF_CLASSES], want_w[DPF_BATCH * DPF_CLASSES];
        float got[DPF_BATCH * DPF_CLASSES];
        logits_of(bf, e, want_e);
        logits_of(bf, w, want_w);
        cr_assert(memcmp(want_e, want_w, sizeof want_e) != 0, "the EMA computes as the weights");
        float img[DPF_CH * DPF_IMG * DPF_IMG * DPF_BATCH];
        int lab[DPF_BATCH];
        dpf_rows(img, lab, 0, DPF_BATCH, 9);
        char err[256];
        for (int on = 1; on >= 0; on--) {
            cr_assert_eq(dp_use_ema(d, on, err, sizeof err), 0, "%s", err);
            model_forward(m, img, lab, DPF_BATCH);
            cr_assert_eq(dp_sync(d, err, sizeof err), 0, "%s", err);
            memcpy(got, model_logits(m), sizeof got);
            cr_assert_arr_eq(got, on ? want_e : want_w, sizeof got,
                             "%s: the logits with the %s in the model", names[k],
                             on ? "EMA" : "weights back");
        }
        model_free(m);
        dp_free(d);
        free(w), free(e);
    }
    for (int i = 0; i < ema_ncomms; i++) comm_free(ema_comms[i]);
    ema_ncomms = 0;
}

/* one rank of the schedule probe: starting rank x 30 ms after rank 0 (each
 * rank's clock says something else about when its seconds are up) */
static int probe_of(const char *ep, int rank, int world, int units, double *exposed)
{
    const model_config mc = dpf_vit();
    const optimizer_config oc = dpf_adamw();
    rdzv_options ro = {.endpoint = ep, .rank = rank, .world_size = world, .timeout_s = 30};
    rdzv *z = NULL;
    comm *c = NULL;
    char err[512];
    if (rdzv_new(&z, &ro, NULL, err, sizeof err) || comm_new_cpu(&c, z, 30, err, sizeof err)) {
        fprintf(stderr, "rank %d of %d: %s\n", rank, world, err);
        return 10;
    }
    struct timespec late = {.tv_sec = 0, .tv_nsec = (long)rank * 30000000L};
    nanosleep(&late, NULL);
    const double fwd[] = {1e-5, 2e-4, 2e-4, 1e-5}, bwd[] = {2e-5, 4e-4, 4e-4, 2e-5};
    const dp_options o = {.comm = c, .ops = ops_cpu(), .mc = &mc, .oc = &oc, .total_steps = 1,
                          .mode = SHARDING_FULL};
    const dp_probe pr = {.n_units = units, .accum = 2, .fwd_s = fwd, .bwd_s = bwd,
                         .seconds = 0.2};
    int rc = dp_probe_schedule(&o, &pr, exposed, err, sizeof err);
    if (rc != 1) fprintf(stderr, "rank %d of %d: %d: %s\n", rank, world, rc, err);
    comm_free(c);
    rdzv_free(z);
    return rc == 1 ? 0 : rc == 0 ? 11 : 12;
}

Test(dp, the_planners_probe_of_fulls_own_schedule_runs_every_rank_for_the_same_steps_at_2_3_and_4_ranks)
{
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    cr_assert(dp_has_schedule(SHARDING_FULL));
    cr_assert(!dp_has_schedule(SHARDING_NONE) && !dp_has_schedule(SHARDING_GRAD_OP),
              "none and grad-op call on the training thread");
    for (int world = 2; world <= 4; world++) {
        char ep[64];
        snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        pid_t pids[4];
        for (int r = 0; r < world; r++) {
            if ((pids[r] = fork()) == 0) {
                signal(SIGPIPE, SIG_IGN);
                close(fds[0]);
                double e = -1;
                int code = probe_of(ep, r, world, 4, &e);
                if (r == 0 && write(fds[1], &e, sizeof e) != (ssize_t)sizeof e) code = 13;
                _exit(code);
            }
        }
        close(fds[1]);
        double exposed = -1;
        cr_assert_eq(read(fds[0], &exposed, sizeof exposed), (ssize_t)sizeof exposed);
        close(fds[0]);
        for (int r = 0; r < world; r++) {
            int s;
            cr_assert_eq(waitpid(pids[r], &s, 0), pids[r]);
            cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "world %d, rank %d: %d", world, r,
                      WIFEXITED(s) ? WEXITSTATUS(s) : -WTERMSIG(s));
        }
        /* the collectives take time the spins do not: more than none */
        cr_assert_gt(exposed, 0, "world %d: %g s beyond the spins", world, exposed);
    }
}

Test(dp, the_schedule_probe_refuses_a_unit_count_that_is_not_the_models_and_none_has_no_schedule)
{
    const model_config mc = dpf_vit();
    const optimizer_config oc = dpf_adamw();
    const double t[8] = {0};
    char err[256] = "";
    double e = 0;
    dp_options o = {.ops = ops_cpu(), .mc = &mc, .oc = &oc, .total_steps = 1,
                    .mode = SHARDING_NONE};
    const dp_probe pr = {.n_units = 7, .accum = 1, .fwd_s = t, .bwd_s = t, .seconds = 0.1};
    cr_assert_eq(dp_probe_schedule(&o, &pr, &e, err, sizeof err), 0, "none: nothing to time");
    /* full on one rank alone, with the wrong count: refused before any collective */
    setenv("VITJOB_COMM_HOST", "127.0.0.1", 1);
    char ep[64];
    snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
    rdzv_options ro = {.endpoint = ep, .rank = 0, .world_size = 1, .timeout_s = 30};
    rdzv *z = NULL;
    comm *c = NULL;
    cr_assert_eq(rdzv_new(&z, &ro, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(comm_new_cpu(&c, z, 30, err, sizeof err), 0, "%s", err);
    o.comm = c;
    o.mode = SHARDING_FULL;
    cr_assert_eq(dp_probe_schedule(&o, &pr, &e, err, sizeof err), -1);
    cr_assert(strstr(err, "7 units") && strstr(err, "has 4"), "%s", err);
    comm_free(c);
    rdzv_free(z);
}
