/* kernels/comm_nccl.cu - comm.h's collectives on the GPU: NCCL, on a
 * communication stream of its own, in the CUDA plugin.
 *
 * Owns: one NCCL communicator per vitjob_nccl (non-blocking init with a
 * deadline), its communication stream and the events that order it against
 * the backend's compute stream (g_cuda.stream, kernels/ops_cuda.cu), the
 * deadline on every wait, and the abort of a communicator that failed. The
 * C table of kernels/comm_nccl.h, exported as vitjob_nccl_table.
 * Must not: synchronise the device or the compute stream (events only, so
 * that computation queued before a collective overlaps it and computation
 * queued after waits only for it), wait without the timeout, pick a GPU
 * (the backend's current device), or implement reduction algorithms.
 *
 * Ordering: a collective is enqueued on the communication stream after an
 * event recorded on the compute stream (it sees every op queued before
 * it), and the compute stream then waits for an event recorded after it
 * (every later op, download and release sees its result). The host does
 * not wait for it, except: at most IN_FLIGHT collectives are outstanding
 * (the oldest is waited for, with its deadline, before one more is
 * queued), broadcast and barrier return complete, and every call first
 * reaps what finished and fails on an asynchronous NCCL error or on a
 * collective not complete within the timeout of its call.
 */
#include <nccl.h> /* before cuda_common.cuh: lib/check.h then defines NCCL_CHECK */

#include "cuda_common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "comm_nccl.h"
}

static_assert(sizeof(ncclUniqueId) == VITJOB_NCCL_ID_BYTES, "ncclUniqueId's size changed");

/* kernels/ops_cuda.cu: initialises the device, the compute stream and g_cuda */
extern "C" const vit_ops *vitjob_cuda_backend(int storage, char *err, size_t errlen);

enum { IN_FLIGHT = 8 };

struct vitjob_nccl {
    ncclComm_t comm;             /* NULL once aborted or destroyed */
    cudaStream_t stream;         /* the communication stream */
    cudaEvent_t before;          /* on the compute stream, before a collective */
    cudaEvent_t done[IN_FLIGHT]; /* on the communication stream, after one */
    double since[IN_FLIGHT];     /* when done[i]'s collective was called */
    int pending[IN_FLIGHT];      /* done[i] recorded, not yet seen complete */
    unsigned next;               /* slot of the next collective */
    float *zero;                 /* one device float, 0: the barrier's all-reduce */
    int rank, world, failed;
    double timeout_s;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Polling: 20 us at first, doubling to 1 ms (a collective of a training
 * step is usually done within the first few polls). */
static void pause_for(long *ns)
{
    struct timespec t = {0, *ns};
    nanosleep(&t, NULL);
    if (*ns < 1000000) *ns *= 2;
}

/* Aborts NCCL's communicator (its kernels stop, so the streams waiting on
 * them drain) and marks this one failed. */
static void abort_comm(vitjob_nccl *c)
{
    c->failed = 1;
    if (c->comm) {
        (void)ncclCommAbort(c->comm);
        c->comm = NULL;
    }
}

/* The failure of op: one line in err, the communicator aborted. */
static int fail(vitjob_nccl *c, const char *op, const char *why, char *err, size_t errlen)
{
    if (err && errlen)
        snprintf(err, errlen, "%s: peer lost or collective timed out (limit %.0f s): %s", op,
                 c->timeout_s, why);
    abort_comm(c);
    return -1;
}

/* NCCL's own words for result r on this communicator. */
static void nccl_why(const vitjob_nccl *c, ncclResult_t r, char *out, size_t len)
{
    const char *last = c->comm ? ncclGetLastError(c->comm) : NULL;
    snprintf(out, len, "nccl error %d: %s%s%s", (int)r, ncclGetErrorString(r),
             last && *last ? ": " : "", last && *last ? last : "");
}

/* 0 while NCCL's communicator is healthy (or busy); else fails op. */
static int check_async(vitjob_nccl *c, const char *op, char *err, size_t errlen)
{
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
    if (r != ncclSuccess) st = r;
    if (st == ncclSuccess || st == ncclInProgress) return 0;
    char why[512];
    nccl_why(c, st, why, sizeof why);
    return fail(c, op, why, err, errlen);
}

/* Waits until NCCL's communicator has left ncclInProgress (a non-blocking
 * call is then done enqueueing), at most until deadline. */
static int settle(vitjob_nccl *c, const char *op, double deadline, char *err, size_t errlen)
{
    long ns = 20000;
    for (;;) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
        if (r != ncclSuccess) st = r;
        if (st == ncclSuccess) return 0;
        if (st != ncclInProgress) {
            char why[512];
            nccl_why(c, st, why, sizeof why);
            return fail(c, op, why, err, errlen);
        }
        if (now_s() > deadline)
            return fail(c, op, "NCCL was still in progress at the deadline", err, errlen);
        pause_for(&ns);
    }
}

/* Whether slot i's collective has finished: 1 yes, 0 not yet, -1 failed
 * (op fails: a CUDA error, or an NCCL error meanwhile). */
static int finished(vitjob_nccl *c, int i, const char *op, char *err, size_t errlen)
{
    cudaError_t e = cudaEventQuery(c->done[i]);
    if (e == cudaSuccess) {
        c->pending[i] = 0;
        return 1;
    }
    if (e != cudaErrorNotReady) {
        char why[512];
        CUDA_CHECK(e, why, sizeof why);
        return fail(c, op, why, err, errlen);
    }
    return check_async(c, op, err, errlen) ? -1 : 0;
}

/* Waits for slot i's collective, at most until the timeout of its call. */
static int wait_slot(vitjob_nccl *c, int i, const char *op, char *err, size_t errlen)
{
    long ns = 20000;
    for (;;) {
        int f = finished(c, i, op, err, errlen);
        if (f) return f > 0 ? 0 : -1;
        if (now_s() > c->since[i] + c->timeout_s) {
            char why[256];
            snprintf(why, sizeof why, "a collective queued by this rank was not complete after "
                     "%.0f s", c->timeout_s);
            return fail(c, op, why, err, errlen);
        }
        pause_for(&ns);
    }
}

/* Without blocking: forgets what finished, fails on an NCCL error or on a
 * collective past its deadline. */
static int reap(vitjob_nccl *c, const char *op, char *err, size_t errlen)
{
    double t = now_s();
    for (int i = 0; i < IN_FLIGHT; i++) {
        if (!c->pending[i]) continue;
        int f = finished(c, i, op, err, errlen);
        if (f < 0) return -1;
        if (f == 0 && t > c->since[i] + c->timeout_s) {
            char why[256];
            snprintf(why, sizeof why, "a collective queued by this rank was not complete after "
                     "%.0f s", c->timeout_s);
            return fail(c, op, why, err, errlen);
        }
    }
    return check_async(c, op, err, errlen);
}

/* Waits for every collective in flight, oldest first. */
static int wait_all(vitjob_nccl *c, const char *op, char *err, size_t errlen)
{
    for (unsigned k = 0; k < IN_FLIGHT; k++) {
        int i = (int)((c->next + k) % IN_FLIGHT);
        if (c->pending[i] && wait_slot(c, i, op, err, errlen)) return -1;
    }
    return 0;
}

static int usable(vitjob_nccl *c, const char *op, char *err, size_t errlen)
{
    if (c->failed || !c->comm) {
        snprintf(err, errlen, "%s: the communicator failed earlier; it cannot be used", op);
        return 0;
    }
    if (g_cuda.failed) {
        snprintf(err, errlen, "%s: the CUDA backend failed earlier: %s", op, g_cuda.err);
        return 0;
    }
    return 1;
}

/* Before a collective: a free slot, and the communication stream ordered
 * after the compute stream's work so far. */
static int begin(vitjob_nccl *c, const char *op, char *err, size_t errlen)
{
    if (!usable(c, op, err, errlen)) return -1;
    if (reap(c, op, err, errlen)) return -1;
    int slot = (int)(c->next % IN_FLIGHT);
    if (c->pending[slot] && wait_slot(c, slot, op, err, errlen)) return -1;
    char why[512];
    if (CUDA_CHECK(cudaEventRecord(c->before, g_cuda.stream), why, sizeof why) ||
        CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->before, 0), why, sizeof why))
        return fail(c, op, why, err, errlen);
    return 0;
}

/* After the NCCL call that returned r: enqueued for good (non-blocking
 * NCCL may still be enqueueing), then the compute stream ordered after it. */
static int end(vitjob_nccl *c, ncclResult_t r, double called, const char *op, char *err,
               size_t errlen)
{
    char why[512];
    if (r == ncclInProgress) {
        if (settle(c, op, called + c->timeout_s, err, errlen)) return -1;
    } else if (r != ncclSuccess) {
        nccl_why(c, r, why, sizeof why);
        return fail(c, op, why, err, errlen);
    }
    int slot = (int)(c->next % IN_FLIGHT);
    if (CUDA_CHECK(cudaEventRecord(c->done[slot], c->stream), why, sizeof why) ||
        CUDA_CHECK(cudaStreamWaitEvent(g_cuda.stream, c->done[slot], 0), why, sizeof why))
        return fail(c, op, why, err, errlen);
    c->pending[slot] = 1;
    c->since[slot] = called;
    c->next++;
    return 0;
}

static ncclDataType_t nccl_type(int bf16) { return bf16 ? ncclBfloat16 : ncclFloat32; }

/* ---- the table ---- */

static int nccl_unique_id(unsigned char id[VITJOB_NCCL_ID_BYTES], char *err, size_t errlen)
{
    ncclUniqueId u;
    if (NCCL_CHECK(ncclGetUniqueId(&u), err, errlen)) return -1;
    memcpy(id, &u, sizeof u);
    return 0;
}

static void nccl_destroy(vitjob_nccl *c)
{
    if (!c) return;
    if (c->comm) {
        char err[512];
        /* done with everything queued, then a clean goodbye to the peers */
        if (wait_all(c, "shutdown", err, sizeof err) == 0) {
            double deadline = now_s() + c->timeout_s;
            ncclResult_t r = ncclCommFinalize(c->comm);
            if ((r == ncclSuccess || r == ncclInProgress) &&
                settle(c, "shutdown", deadline, err, sizeof err) == 0) {
                (void)ncclCommDestroy(c->comm);
                c->comm = NULL;
            }
        }
        abort_comm(c); /* only where the above did not finish */
    }
    if (c->zero) (void)cudaFree(c->zero);
    for (int i = 0; i < IN_FLIGHT; i++)
        if (c->done[i]) (void)cudaEventDestroy(c->done[i]);
    if (c->before) (void)cudaEventDestroy(c->before);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    free(c);
}

static int nccl_init(vitjob_nccl **out, const unsigned char id[VITJOB_NCCL_ID_BYTES], int rank,
                     int world, double timeout_s, char *err, size_t errlen)
{
    *out = NULL;
    if (g_cuda.failed) {
        snprintf(err, errlen, "the CUDA backend failed earlier: %s", g_cuda.err);
        return -1;
    }
    vitjob_nccl *c = (vitjob_nccl *)calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "NCCL communicator: out of memory");
        return -1;
    }
    c->rank = rank;
    c->world = world;
    c->timeout_s = timeout_s;
    /* the backend's device, also where this thread is not the one that
     * initialised it */
    if (CUDA_CHECK(cudaSetDevice(g_cuda.device), err, errlen) ||
        CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err, errlen) ||
        CUDA_CHECK(cudaEventCreateWithFlags(&c->before, cudaEventDisableTiming), err, errlen))
        goto fail;
    for (int i = 0; i < IN_FLIGHT; i++)
        if (CUDA_CHECK(cudaEventCreateWithFlags(&c->done[i], cudaEventDisableTiming), err, errlen))
            goto fail;
    if (CUDA_CHECK(cudaMalloc(&c->zero, sizeof(float)), err, errlen) ||
        /* on the communication stream: ordered before the barrier's use */
        CUDA_CHECK(cudaMemsetAsync(c->zero, 0, sizeof(float), c->stream), err, errlen))
        goto fail;
    {
        ncclUniqueId u;
        memcpy(&u, id, sizeof u);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0; /* returns at once; we poll, with the deadline */
        double deadline = now_s() + timeout_s;
        ncclResult_t r = ncclCommInitRankConfig(&c->comm, world, u, rank, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            char why[512];
            nccl_why(c, r, why, sizeof why);
            snprintf(err, errlen, "NCCL communicator: rank %d of %d: init failed: %s", rank, world,
                     why);
            goto fail;
        }
        long ns = 20000;
        for (;;) {
            ncclResult_t st = ncclInProgress;
            r = ncclCommGetAsyncError(c->comm, &st);
            if (r != ncclSuccess) st = r;
            if (st == ncclSuccess) break;
            if (st != ncclInProgress) {
                char why[512];
                nccl_why(c, st, why, sizeof why);
                snprintf(err, errlen, "NCCL communicator: rank %d of %d: init failed: %s", rank,
                         world, why);
                goto fail;
            }
            if (now_s() > deadline) {
                snprintf(err, errlen,
                         "NCCL communicator: rank %d of %d: the ranks were not all connected "
                         "within the timeout (%.0f s); aborted", rank, world, timeout_s);
                goto fail;
            }
            pause_for(&ns);
        }
    }
    *out = c;
    return 0;
fail:
    abort_comm(c);
    nccl_destroy(c);
    return -1;
}

static int nccl_failed(const vitjob_nccl *c) { return c->failed; }

static int nccl_allreduce_sum(vitjob_nccl *c, float *buf, size_t count, char *err, size_t errlen)
{
    const char *op = "all-reduce";
    double t = now_s();
    if (begin(c, op, err, errlen)) return -1;
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, c->comm, c->stream);
    return end(c, r, t, op, err, errlen);
}

static int nccl_reduce_scatter_sum(vitjob_nccl *c, float *buf, size_t count, char *err,
                                   size_t errlen)
{
    const char *op = "reduce-scatter";
    double t = now_s();
    if (begin(c, op, err, errlen)) return -1;
    /* in place: NCCL allows recvbuff == sendbuff + rank * recvcount */
    ncclResult_t r = ncclReduceScatter(buf, buf + (size_t)c->rank * count, count, ncclFloat32,
                                       ncclSum, c->comm, c->stream);
    return end(c, r, t, op, err, errlen);
}

static int nccl_allgather(vitjob_nccl *c, const void *in, void *out, size_t count, int bf16,
                          char *err, size_t errlen)
{
    const char *op = "all-gather";
    double t = now_s();
    if (begin(c, op, err, errlen)) return -1;
    /* in place when in == out + rank * count elements, as NCCL allows */
    ncclResult_t r = ncclAllGather(in, out, count, nccl_type(bf16), c->comm, c->stream);
    return end(c, r, t, op, err, errlen);
}

static int nccl_broadcast(vitjob_nccl *c, void *buf, size_t count, int bf16, int root,
                          char *err, size_t errlen)
{
    const char *op = "broadcast";
    double t = now_s();
    if (begin(c, op, err, errlen)) return -1;
    ncclResult_t r = ncclBroadcast(buf, buf, count, nccl_type(bf16), root, c->comm, c->stream);
    if (end(c, r, t, op, err, errlen)) return -1;
    return wait_all(c, op, err, errlen);
}

static int nccl_barrier(vitjob_nccl *c, char *err, size_t errlen)
{
    const char *op = "barrier";
    double t = now_s();
    if (begin(c, op, err, errlen)) return -1;
    /* NCCL has no barrier: a one-float all-reduce (0 + 0 stays 0) that no
     * rank finishes before every rank has joined it */
    ncclResult_t r = ncclAllReduce(c->zero, c->zero, 1, ncclFloat32, ncclSum, c->comm, c->stream);
    if (end(c, r, t, op, err, errlen)) return -1;
    return wait_all(c, op, err, errlen);
}

static int nccl_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

static const vitjob_nccl_ops nccl_table = {
    nccl_unique_id,     nccl_init,      nccl_destroy,   nccl_failed,
    nccl_allreduce_sum, nccl_reduce_scatter_sum, nccl_allgather, nccl_broadcast,
    nccl_barrier,       nccl_device_count,
};

/* The plugin's entry point, found by kernels/ops_cuda_loader.c with dlsym
 * (ops_cuda_nccl there): the CUDA backend first (the device, the compute
 * stream), then the table. */
extern "C" const vitjob_nccl_ops *vitjob_nccl_table(char *err, size_t errlen)
{
    if (!vitjob_cuda_backend(0, err, errlen)) return NULL;
    return &nccl_table;
}
