/* worker/plan/plan_probe.c - see plan_probe.h. Every timing is a median
 * (of passes, of batches of calls, of steps), as a run's steady rate is:
 * a burst of other work on the machine moves a mean.
 * Must not: plan or print; fork after this process has run OpenMP
 * threads (the step probe's copies and the loopback ranks are forked
 * first). */
#include "plan_probe.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "dp.h"
#include "model.h"
#include "optim.h"
#include "plan_memory.h"
#include "plan_time.h"
#include "rdzv.h"
#include "util.h"

#define PROBE_MIN_PASSES 5
#define PROBE_MAX_PASSES 4096

/* One copy of the step probe, in this process: the forward and backward's
 * FLOP rate, then the optimizer step's seconds per parameter. */
static int probe_one(const vit_job_config *cfg, int threads, double seconds, double *flops_per_s,
                     double *optim_s_per_param, char *err, size_t errlen)
{
    const model_config *mc = &cfg->model;
    const training_config *tc = &cfg->training;
    const vit_ops *ops = jobplan_cpu_ops(tc->precision);
    ops_cpu_set_threads(threads);
    const int B = tc->micro_batch_size;
    model_options mo = {.activation_checkpointing = tc->activation_checkpointing};
    vit_model *m = NULL;
    optim *o = NULL;
    vj_err rc = model_new(&m, mc, B, &mo, ops, err, errlen);
    if (rc) return -1;
    if (optim_new(&o, m, &tc->optimizer, tc->steps, err, errlen) != 0) {
        model_free(m);
        return -1;
    }
    const size_t img = (size_t)model_image_floats(m) * (size_t)B;
    float *images = malloc(img * sizeof(float));
    int *labels = malloc((size_t)B * sizeof(int));
    if (!images || !labels || model_init_random(m, 1) != 0) {
        free(images), free(labels), optim_free(o), model_free(m);
        snprintf(err, errlen, "compute probe: out of host memory");
        return -1;
    }
    for (size_t i = 0; i < img; i++) images[i] = (float)((i * 7919) % 97) * 2e-2f - 0.97f;
    for (int b = 0; b < B; b++) labels[b] = b % mc->num_classes;
    const double per_pass = jobplan_flops_per_image(mc, tc->activation_checkpointing) * B;
    /* pass 0, untimed, warms the threads and the caches (and the
     * optimizer's state); then passes for about `seconds` (at least
     * PROBE_MIN_PASSES, at most PROBE_MAX_PASSES), and the rate of the
     * median pass: a run's steady rate is a median too (its log
     * intervals'), and a burst of other work on the machine moves a mean */
    double pass_s[PROBE_MAX_PASSES], t0 = mono_seconds();
    int passes = 0;
    for (int pass = 0; pass == 0 || ((mono_seconds() - t0 < seconds || passes < PROBE_MIN_PASSES) &&
                                     passes < PROBE_MAX_PASSES);
         pass++) {
        if (pass == 1) t0 = mono_seconds();
        const double p0 = mono_seconds();
        model_zero_grads(m);
        model_forward(m, images, labels, B);
        model_backward(m, 1.0f / B);
        if (pass == 0) optim_step(o, m, ops, 0);
        if (pass > 0) pass_s[passes++] = mono_seconds() - p0;
    }
    const double mid = median_of(pass_s, passes);
    *flops_per_s = mid > 0 ? per_pass / mid : 0;
    /* the optimizer's part of a step, on the last gradients: the zeroing
     * comes back each step, so the gradients are computed once */
    int steps = 0;
    double opt = 0;
    float *keep = malloc(model_num_params(m) * sizeof(float));
    const float *g = model_grads(m);
    if (keep && g) memcpy(keep, g, model_num_params(m) * sizeof(float));
    while (keep && g && (steps < 2 || opt < seconds / 4)) {
        const double s0 = mono_seconds();
        model_zero_grads(m);
        const double s1 = mono_seconds();
        ops->upload(model_grads(m), keep, model_num_params(m) * sizeof(float));
        const double s2 = mono_seconds();
        optim_step(o, m, ops, 1 + steps);
        opt += (s1 - s0) + (mono_seconds() - s2); /* the zeroing and the step, not the copy */
        steps++;
    }
    *optim_s_per_param = steps ? opt / steps / (double)model_num_params(m) : 0;
    free(keep), free(images), free(labels), optim_free(o), model_free(m);
    if (*flops_per_s <= 0 || *optim_s_per_param <= 0) {
        snprintf(err, errlen, "compute probe: nothing timed");
        return -1;
    }
    return 0;
}

int jobplan_probe_step(const vit_job_config *cfg, int threads, int copies, double seconds,
                       jobplan_step_probe *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (copies < 1) copies = 1;
    int fds[2] = {-1, -1};
    pid_t kids[64];
    int n = 0;
    if (copies > 64) copies = 64;
    if (copies > 1 && pipe(fds) != 0) {
        snprintf(err, errlen, "compute probe: no pipe for %d copies", copies);
        return -1;
    }
    fflush(NULL);
    for (; n < copies - 1; n++) { /* the others, started together */
        pid_t pid = fork();
        if (pid < 0) break;
        if (pid == 0) {
            double r[2] = {0, 0};
            char e[256];
            close(fds[0]);
            int bad = probe_one(cfg, threads, seconds, &r[0], &r[1], e, sizeof e);
            ssize_t w = write(fds[1], r, sizeof r);
            _exit(bad || w != (ssize_t)sizeof r ? 1 : 0);
        }
        kids[n] = pid;
    }
    if (fds[1] >= 0) close(fds[1]);
    double rate = 0, opt = 0;
    int bad = probe_one(cfg, threads, seconds, &rate, &opt, err, errlen);
    int got = bad ? 0 : 1;
    for (int i = 0; i < n; i++) {
        double r[2];
        if (read(fds[0], r, sizeof r) == (ssize_t)sizeof r && r[0] > 0 && r[1] > 0) {
            rate += r[0], opt += r[1], got++;
        }
    }
    for (int i = 0; i < n; i++) waitpid(kids[i], NULL, 0);
    if (fds[0] >= 0) close(fds[0]);
    if (bad) return -1;
    if (got < copies) {
        snprintf(err, errlen, "compute probe: %d of %d copies timed nothing (fork or memory)",
                 copies - got, copies);
        return -1;
    }
    out->flops_per_s = rate / got;
    out->optim_s_per_param = opt / got;
    out->copies = got;
    return 0;
}

int jobplan_probe_compute(const vit_job_config *cfg, int threads, double seconds,
                          double *flops_per_s, char *err, size_t errlen)
{
    jobplan_step_probe pr;
    if (jobplan_probe_step(cfg, threads, 1, seconds, &pr, err, errlen) != 0) return -1;
    *flops_per_s = pr.flops_per_s;
    return 0;
}

/* A loopback port nobody listens on now, below the ephemeral range. */
static int free_port(void)
{
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 200; tries++) {
        seed = seed * 1103515245u + 12345u;
        int port = 20000 + (int)((seed >> 8) % 12000);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return port;
    }
    return -1;
}

/* One rank's part of a loopback probe, on its communicator; rank 0's
 * results go into arg (the forked ranks' copies are dropped). */
typedef int (*loopback_fn)(comm *c, int rank, void *arg, char *err, size_t errlen);

static int loopback_rank(const char *endpoint, int rank, int world, loopback_fn fn, void *arg,
                         char *err, size_t errlen)
{
    rdzv *rv = NULL;
    comm *c = NULL;
    rdzv_error kind;
    rdzv_options ro = {.endpoint = endpoint, .rank = rank, .world_size = world, .timeout_s = 30};
    int bad = rdzv_new(&rv, &ro, &kind, err, errlen) != 0 ||
              comm_new_cpu(&c, rv, 30, err, errlen) != 0 || fn(c, rank, arg, err, errlen) != 0;
    comm_free(c);
    rdzv_free(rv);
    return bad ? -1 : 0;
}

/* `ranks` (2 to 64) processes meeting on loopback (this one rank 0, ranks
 * - 1 forked: call it before this process has run OpenMP threads), each
 * running fn on its communicator. 0, or -1 with a message starting with
 * `what`. */
static int loopback_ranks(const char *what, int ranks, loopback_fn fn, void *arg, char *err,
                          size_t errlen)
{
    if (ranks < 2 || ranks > 64) {
        snprintf(err, errlen, "%s: %d ranks, not 2 to 64", what, ranks);
        return -1;
    }
    int port = free_port();
    if (port < 0) {
        snprintf(err, errlen, "%s: no free port", what);
        return -1;
    }
    char endpoint[32];
    snprintf(endpoint, sizeof endpoint, "127.0.0.1:%d", port);
    pid_t kids[63];
    int n = 0, bad = 0;
    fflush(NULL);
    for (; n < ranks - 1; n++) {
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(err, errlen, "%s: fork failed", what);
            bad = 1;
            break;
        }
        if (pid == 0) {
            char e[256];
            _exit(loopback_rank(endpoint, n + 1, ranks, fn, arg, e, sizeof e) ? 1 : 0);
        }
        kids[n] = pid;
    }
    if (!bad) bad = loopback_rank(endpoint, 0, ranks, fn, arg, err, errlen) != 0;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        int st = 0;
        if (bad) kill(kids[i], SIGKILL);
        waitpid(kids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (!bad && failed) snprintf(err, errlen, "%s: another rank failed", what);
    return bad || failed ? -1 : 0;
}

#define CALL_FLOATS 64 /* the latency probe's all-reduce: its bytes cost nothing */

#define PROBE_BATCHES 5
#define PROBE_MAX_REPS 16

/* The collectives probe's numbers: what to run, and rank 0's results. */
typedef struct {
    size_t count;
    int reps, calls;
    double gap_s;
    double per, per_call; /* rank 0's */
} collectives_probe;

/* One rank of jobplan_probe_collectives: all-reduces `count` floats
 * `reps` (at most PROBE_MAX_REPS) times after one warm-up, then
 * CALL_FLOATS `calls` times after one, in PROBE_BATCHES batches, each call
 * after gap_s of spinning; the seconds per all-reduce of each in per and
 * per_call (medians: see below; the spinning not counted). */
static int collectives_rank(comm *c, int rank, void *arg, char *err, size_t errlen)
{
    collectives_probe *a = arg;
    (void)rank;
    float *buf = calloc(a->count > CALL_FLOATS ? a->count : CALL_FLOATS, sizeof(float));
    int bad = !buf;
    if (bad) snprintf(err, errlen, "loopback probe: out of host memory");
    /* after one untimed call each: the median of `reps` timed all-reduces
     * of the buffer, and the median of PROBE_BATCHES batches' mean call
     * time (a batch keeps the scheduler's occasional long waits, which a
     * training run's calls meet too; the median drops a batch that a
     * burst of other work on the machine took) */
    double t[PROBE_BATCHES > PROBE_MAX_REPS ? PROBE_BATCHES : PROBE_MAX_REPS];
    int n = 0;
    for (int i = 0; !bad && i <= a->reps && i <= PROBE_MAX_REPS; i++) {
        double t0 = mono_seconds();
        bad = comm_allreduce_sum(c, buf, a->count, err, errlen) != 0;
        if (i > 0) t[n++] = mono_seconds() - t0;
    }
    if (!bad) a->per = median_of(t, n);
    n = 0;
    for (int b = 0; !bad && a->calls > 0 && b < PROBE_BATCHES; b++) {
        const int each = a->calls / PROBE_BATCHES;
        if (b == 0) bad = comm_allreduce_sum(c, buf, CALL_FLOATS, err, errlen) != 0;
        double in_calls = 0;
        for (int i = 0; !bad && i < each; i++) {
            /* the run's compute between two calls, as a core kept busy */
            mono_spin(a->gap_s);
            const double c0 = mono_seconds();
            bad = comm_allreduce_sum(c, buf, CALL_FLOATS, err, errlen) != 0;
            in_calls += mono_seconds() - c0;
        }
        t[n++] = in_calls / each;
    }
    if (!bad && a->calls > 0) a->per_call = median_of(t, n);
    free(buf);
    return bad ? -1 : 0;
}

int jobplan_probe_collectives(size_t bytes, int ranks, double gap_s, double *bus_bytes_per_s,
                              double *call_s, char *err, size_t errlen)
{
    collectives_probe a = {.count = bytes / sizeof(float), .reps = 5, .gap_s = gap_s};
    /* 400 calls, or as many as about 1.5 s of gaps allows (at least 20) */
    if (call_s) {
        double fit = 1.5 / (gap_s + 2e-4);
        a.calls = fit >= 400 ? 400 : fit <= 4 * PROBE_BATCHES ? 4 * PROBE_BATCHES : (int)fit;
        a.calls -= a.calls % PROBE_BATCHES;
    }
    if (loopback_ranks("loopback probe", ranks, collectives_rank, &a, err, errlen) != 0)
        return -1;
    if (a.per <= 0) {
        snprintf(err, errlen, "loopback probe: nothing timed");
        return -1;
    }
    /* an all-reduce of W ranks moves 2 (W-1)/W buffers per rank */
    *bus_bytes_per_s = 2.0 * (ranks - 1) / ranks * (double)a.count * sizeof(float) / a.per;
    if (call_s) *call_s = a.per_call;
    return 0;
}

/* ---- a strategy's own schedule on loopback ---- */

/* One rank of jobplan_probe_schedule: times the strategy's schedule
 * (dp_probe_schedule) with each unit's compute, its FLOPs at the probed
 * rate (jobplan_forward_flops' terms: the stem's patch embedding, the blocks,
 * the head; a third forward, two thirds backward, checkpointing's
 * recompute in the blocks' backward). */
typedef struct {
    const vit_job_config *cfg;
    double flops_per_s, seconds;
    double exposed; /* rank 0's */
} schedule_probe;

static int schedule_rank(comm *c, int rank, void *arg, char *err, size_t errlen)
{
    schedule_probe *a = arg;
    (void)rank;
    const model_config *mc = &a->cfg->model;
    const training_config *tc = &a->cfg->training;
    const int U = mc->depth + 2, B = tc->micro_batch_size;
    const int W = a->cfg->world_size > 0 ? a->cfg->world_size : comm_world_size(c); /* its accumulation */
    const int accum = tc->global_batch_size / (B * W) > 0 ? tc->global_batch_size / (B * W) : 1;
    double *fwd = calloc((size_t)U, sizeof *fwd), *bwd = calloc((size_t)U, sizeof *bwd);
    if (!fwd || !bwd) {
        free(fwd), free(bwd);
        snprintf(err, errlen, "schedule probe: out of host memory");
        return -1;
    }
    const jobplan_unit_flops f = jobplan_forward_flops(mc);
    for (int u = 0; u < U; u++) {
        const int blk = u > 0 && u < U - 1;
        const double ff = u == 0 ? f.stem : blk ? f.block_mm + f.block_att : f.head;
        fwd[u] = ff * B / a->flops_per_s;
        bwd[u] = (2 + (blk && tc->activation_checkpointing ? 1 : 0)) * ff * B / a->flops_per_s;
    }
    const dp_options o = {.comm = c, .ops = jobplan_cpu_ops(tc->precision), .mc = mc,
                          .oc = &tc->optimizer, .total_steps = tc->steps, .mode = tc->sharding};
    const dp_probe pr = {.n_units = U, .accum = accum, .fwd_s = fwd, .bwd_s = bwd,
                         .seconds = a->seconds};
    const int rc = dp_probe_schedule(&o, &pr, &a->exposed, err, errlen);
    free(fwd), free(bwd);
    return rc == 1 ? 0 : -1;
}

int jobplan_probe_schedule(const vit_job_config *cfg, int ranks, double flops_per_s,
                           double seconds, double *exposed_s, char *err, size_t errlen)
{
    if (!dp_has_schedule(cfg->training.sharding)) return 0;
    if (flops_per_s <= 0) {
        snprintf(err, errlen, "schedule probe: a compute rate of %g FLOP/s", flops_per_s);
        return -1;
    }
    schedule_probe a = {.cfg = cfg, .flops_per_s = flops_per_s, .seconds = seconds,
                        .exposed = -1};
    if (loopback_ranks("schedule probe", ranks, schedule_rank, &a, err, errlen) != 0) return -1;
    *exposed_s = a.exposed > 0 ? a.exposed : 0;
    return 1;
}

int jobplan_probe_loopback(size_t bytes, double *bus_bytes_per_s, char *err, size_t errlen)
{
    return jobplan_probe_collectives(bytes, 2, 0, bus_bytes_per_s, NULL, err, errlen);
}
