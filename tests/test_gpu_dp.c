/* tests/test_gpu_dp.c - the data-parallel strategies on the GPU: one NCCL
 * rank (a real NCCL communicator of world 1) runs every strategy (none,
 * grad-op, full) through the same code as many ranks and tracks the CPU's
 * one-process trajectory in fp32; where two or more GPUs exist, two NCCL
 * ranks (one process and one GPU each) do too. Every test skips, saying
 * why, without a usable GPU (or without two for the second). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp_fixture.h"
#include "rank_fixture.h"
#include "rdzv.h"

TestSuite(gpu_dp, .timeout = 300);

/* fp32 GPU against fp32 CPU: the sums run in other orders (cuBLAS, the
 * reductions), as tests/test_gpu_train.c bounds them */
#define TRACK_REL 1e-4
#define WEIGHT_ABS 1e-4

static const sharding_mode modes[] = {SHARDING_NONE, SHARDING_GRAD_OP, SHARDING_FULL};
static const char *const names[] = {"none", "grad-op", "full"};

static void cpu_reference(double *loss, float **params, size_t *n)
{
    char err[512] = "";
    ops_cpu_set_threads(4);
    cr_assert_eq(dpf_train(ops_cpu(), NULL, SHARDING_NONE, loss, NULL, n, err, sizeof err), 0,
                 "%s", err);
    *params = malloc(sizeof(float) * *n);
    cr_assert(*params);
    cr_assert_eq(dpf_train(ops_cpu(), NULL, SHARDING_NONE, NULL, *params, n, err, sizeof err),
                 0, "%s", err);
}

static void expect_tracks(const char *what, const double *loss, const double *ref,
                          const float *p, const float *pref, size_t n)
{
    for (int s = 0; s < DPF_STEPS; s++)
        cr_assert(fabs(loss[s] - ref[s]) <= TRACK_REL * fabs(ref[s]),
                  "%s: step %d loss %.9g, the CPU's %.9g", what, s + 1, loss[s], ref[s]);
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs(p[i] - pref[i]) <= WEIGHT_ABS, "%s: weight %zu is %.9g, the CPU's %.9g",
                  what, i, p[i], pref[i]);
}

Test(gpu_dp, one_nccl_rank_runs_every_strategy_along_the_cpu_trajectory)
{
    double ref[DPF_STEPS];
    float *pref = NULL;
    size_t n = 0;
    cpu_reference(ref, &pref, &n);
    char why[512] = "";
    const vit_ops *g = ops_cuda(0, why, sizeof why);
    if (!g) {
        free(pref);
        cr_skip_test("%s", why);
    }
    float *p = malloc(sizeof(float) * n);
    cr_assert(p);
    for (int k = 0; k < 3; k++) {
        comm *c = NULL;
        char err[512] = "";
        cr_assert_eq(comm_new_nccl_store(&c, NULL, 0, 1, 60, err, sizeof err), 0, "%s", err);
        double loss[DPF_STEPS];
        size_t got = 0;
        cr_assert_eq(dpf_train(g, c, modes[k], loss, p, &got, err, sizeof err), 0, "%s: %s",
                     names[k], err);
        comm_free(c);
        cr_assert_eq(got, n);
        expect_tracks(names[k], loss, ref, p, pref, n);
    }
    free(p);
    free(pref);
}

/* GPUs the NVIDIA driver lists, without initialising CUDA in this process
 * (the ranks are forked after). */
static int gpus_listed(void)
{
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

Test(gpu_dp, two_nccl_ranks_on_two_gpus_run_every_strategy_along_the_cpu_trajectory)
{
    const int gpus = gpus_listed();
    if (gpus < 2)
        cr_skip_test("needs two GPUs; the driver lists %d (/proc/driver/nvidia/gpus)", gpus);
    double ref[DPF_STEPS];
    float *pref = NULL;
    size_t n = 0;
    cpu_reference(ref, &pref, &n);
    for (int k = 0; k < 3; k++) {
        char ep[64];
        snprintf(ep, sizeof ep, "127.0.0.1:%d", free_port());
        int fds[2][2];
        pid_t pids[2];
        for (int r = 0; r < 2; r++) {
            cr_assert_eq(pipe(fds[r]), 0);
            if ((pids[r] = fork()) == 0) {
                char dev[16], err[512] = "";
                snprintf(dev, sizeof dev, "%d", r);
                setenv("CUDA_VISIBLE_DEVICES", dev, 1);
                signal(SIGPIPE, SIG_IGN);
                rdzv_options ro = {.endpoint = ep, .rank = r, .world_size = 2, .timeout_s = 60};
                rdzv *z = NULL;
                comm *c = NULL;
                const vit_ops *g = ops_cuda(0, err, sizeof err);
                double loss[DPF_STEPS];
                float *p = malloc(sizeof(float) * n);
                size_t got = 0;
                if (!g || !p || rdzv_new(&z, &ro, NULL, err, sizeof err) ||
                    comm_new_nccl(&c, z, 60, err, sizeof err) ||
                    dpf_train(g, c, modes[k], loss, p, &got, err, sizeof err)) {
                    fprintf(stderr, "rank %d, %s: %s\n", r, names[k], err);
                    _exit(1);
                }
                if (write(fds[r][1], loss, sizeof loss) != (ssize_t)sizeof loss ||
                    write(fds[r][1], p, sizeof(float) * n) != (ssize_t)(sizeof(float) * n))
                    _exit(2);
                comm_free(c);
                rdzv_free(z);
                _exit(0);
            }
            close(fds[r][1]);
        }
        for (int r = 0; r < 2; r++) {
            double loss[DPF_STEPS];
            float *p = malloc(sizeof(float) * n);
            cr_assert(p);
            FILE *f = fdopen(fds[r][0], "r");
            size_t a = fread(loss, sizeof loss, 1, f), b = fread(p, sizeof(float) * n, 1, f);
            fclose(f);
            int s;
            cr_assert_eq(waitpid(pids[r], &s, 0), pids[r]);
            cr_assert(WIFEXITED(s) && WEXITSTATUS(s) == 0, "%s: rank %d failed", names[k], r);
            cr_assert(a == 1 && b == 1, "%s: rank %d sent no results", names[k], r);
            char what[64];
            snprintf(what, sizeof what, "%s, rank %d of 2", names[k], r);
            expect_tracks(what, loss, ref, p, pref, n);
            free(p);
        }
    }
    free(pref);
}
