/* worker/dist/comm.c - comm.h's functions, whichever backend serves them.
 *
 * Owns: dispatching each collective to the communicator's backend
 * (worker/dist/comm_backend.h), the checks every backend shares (count 0, a
 * communicator that failed earlier), and world size 1 on the CPU (copies
 * or nothing, no library).
 * Must not: know a library, or touch a buffer except in the local
 * communicator (a GPU backend's buffers are device memory).
 */
#include "comm_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

comm *comm_wrap(const comm_backend *be, void *impl, int rank, int world, double timeout_s)
{
    comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->be = be;
    c->impl = impl;
    c->rank = rank;
    c->world = world;
    c->timeout_s = timeout_s;
    return c;
}

void comm_free(comm *c)
{
    if (!c) return;
    if (c->be) c->be->destroy(c->impl);
    free(c);
}

int comm_rank(const comm *c) { return c->rank; }
int comm_world_size(const comm *c) { return c->world; }
int comm_failed(const comm *c) { return c->failed; }

static int usable(const comm *c, const char *op, char *err, size_t errlen)
{
    if (!c->failed) return 1;
    if (err && errlen)
        snprintf(err, errlen, "%s: the communicator failed earlier; it cannot be used", op);
    return 0;
}

int comm_allreduce_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    if (!c->be || count == 0) return 0;
    if (!usable(c, "all-reduce", err, errlen)) return -1;
    return c->be->allreduce_sum(c, buf, count, err, errlen);
}

int comm_reduce_scatter_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    if (!c->be || count == 0) return 0;
    if (!usable(c, "reduce-scatter", err, errlen)) return -1;
    return c->be->reduce_scatter_sum(c, buf, count, err, errlen);
}

int comm_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, char *err,
                   size_t errlen)
{
    if (count == 0) return 0;
    if (!c->be) {
        size_t bytes = count * (dtype == COMM_BF16 ? 2 : 4);
        char *mine = (char *)out + (size_t)c->rank * bytes;
        if (in != mine) memmove(mine, in, bytes);
        return 0;
    }
    if (!usable(c, "all-gather", err, errlen)) return -1;
    return c->be->allgather(c, in, out, count, dtype, err, errlen);
}

int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, char *err,
                   size_t errlen)
{
    if (!c->be || count == 0) return 0;
    if (!usable(c, "broadcast", err, errlen)) return -1;
    return c->be->broadcast(c, buf, count, dtype, root, err, errlen);
}

int comm_barrier(comm *c, char *err, size_t errlen)
{
    if (!c->be) return 0;
    if (!usable(c, "barrier", err, errlen)) return -1;
    return c->be->barrier(c, err, errlen);
}
