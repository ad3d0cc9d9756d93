/* worker/gang/comm_nccl.c - the GPU backend of comm.h: NCCL, through the CUDA
 * plugin's table (kernels/comm_nccl.h, found by ops_cuda_nccl()).
 *
 * Owns: comm_new_nccl_store (rank 0's NCCL unique id handed to the other
 * ranks through the comm_store, under "nccl/<n>/id", n counting this
 * process's NCCL communicators), and the nccl slots of
 * worker/gang/comm_backend.h, which call the plugin and carry its failed flag
 * into the communicator.
 * Must not: call CUDA or NCCL itself (the binaries link nothing from
 * NVIDIA; the plugin owns the streams, the events and the deadlines), or
 * touch the buffers (device memory).
 */
#include "comm_backend.h"
#include "comm_nccl.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const vitjob_nccl_ops *T; /* the plugin's table, once loaded */
static int communicators;        /* for store keys: one per NCCL communicator of a process */

/* A slot's result, with the plugin's failed flag carried over. */
static int carry(comm *c, int rc)
{
    if (rc != 0 && T->failed(c->impl)) c->failed = 1;
    return rc;
}

static void destroy(void *impl) { T->destroy(impl); }

static int allreduce_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    return carry(c, T->allreduce_sum(c->impl, buf, count, err, errlen));
}

static int reduce_scatter_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    return carry(c, T->reduce_scatter_sum(c->impl, buf, count, err, errlen));
}

static int allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                     char *err, size_t errlen)
{
    return carry(c, T->allgather(c->impl, in, out, count, dtype == COMM_BF16, err, errlen));
}

static int broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, char *err,
                     size_t errlen)
{
    return carry(c, T->broadcast(c->impl, buf, count, dtype == COMM_BF16, root, err, errlen));
}

static int barrier(comm *c, char *err, size_t errlen)
{
    return carry(c, T->barrier(c->impl, err, errlen));
}

static const comm_backend nccl_backend = {
    .name = "nccl",
    .destroy = destroy,
    .allreduce_sum = allreduce_sum,
    .reduce_scatter_sum = reduce_scatter_sum,
    .allgather = allgather,
    .broadcast = broadcast,
    .barrier = barrier,
};

/* This rank's copy of the unique id: made (rank 0) or fetched. */
static int unique_id(unsigned char id[VITJOB_NCCL_ID_BYTES], const comm_store *store, int rank,
                     int world, double timeout_s, char *err, size_t errlen)
{
    char key[64], why[512];
    snprintf(key, sizeof key, "nccl/%d/id", communicators++);
    if (rank == 0) {
        if (T->unique_id(id, why, sizeof why) != 0) {
            snprintf(err, errlen, "NCCL communicator: %s", why);
            return -1;
        }
        if (world > 1 && store->set(store->ctx, key, id, VITJOB_NCCL_ID_BYTES, why,
                                    sizeof why) != 0) {
            snprintf(err, errlen, "NCCL communicator: rank 0 could not publish its unique id: %s",
                     why);
            return -1;
        }
        return 0;
    }
    void *val = NULL;
    size_t len = 0;
    if (store->get(store->ctx, key, timeout_s, &val, &len, why, sizeof why) != 0) {
        snprintf(err, errlen, "NCCL communicator: rank %d of %d got no unique id from rank 0 "
                 "within %.0f s: %s", rank, world, timeout_s, why);
        return -1;
    }
    if (len != VITJOB_NCCL_ID_BYTES) {
        snprintf(err, errlen, "NCCL communicator: the unique id under %s is %zu bytes, not %d",
                 key, len, VITJOB_NCCL_ID_BYTES);
        free(val);
        return -1;
    }
    memcpy(id, val, len);
    free(val);
    return 0;
}

int comm_new_nccl_store(comm **out, const comm_store *store, int rank, int world,
                        double timeout_s, char *err, size_t errlen)
{
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world || (world > 1 && !store)) {
        snprintf(err, errlen, "NCCL communicator: rank %d of %d%s", rank, world,
                 world > 1 && !store ? " needs a store" : " is not a valid placement");
        return -1;
    }
    char why[512];
    const vitjob_nccl_ops *t = ops_cuda_nccl(why, sizeof why);
    if (!t) {
        snprintf(err, errlen, "NCCL communicator: %s", why);
        return -1;
    }
    T = t;
    unsigned char id[VITJOB_NCCL_ID_BYTES];
    if (unique_id(id, store, rank, world, timeout_s, err, errlen) != 0) return -1;
    vitjob_nccl *n = NULL;
    if (T->init(&n, id, rank, world, timeout_s, err, errlen) != 0) return -1;
    comm *c = comm_wrap(&nccl_backend, n, rank, world, timeout_s);
    if (!c) {
        T->destroy(n);
        snprintf(err, errlen, "communicator: out of memory");
        return -1;
    }
    LOG_INFO("comm", "event=connected backend=nccl rank=%d world=%d timeout_s=%.0f", rank, world,
             timeout_s);
    *out = c;
    return 0;
}
