/* tests/test_dp.c - worker/train/dp.c and its strategies (dp_none.c,
 * dp_grad_op.c, dp_full.c): with a communicator every strategy runs at every
 * world size, one included, through the same code as many ranks, and gives
 * the one-process weights bit for bit at world 1 (tests/ranks.bats runs 2 to
 * 4 ranks); the checkpoint segments of all ranks cover every parameter
 * exactly once; the memory plan counts what each strategy holds; an
 * unknown mode is refused. */
#include <criterion/criterion.h>

#include <signal.h>
#include <sys/wait.h>
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
