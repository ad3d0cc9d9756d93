/* worker/gang/comm.c - comm.h's functions, whichever backend serves them.
 *
 * Owns: dispatching each collective to the communicator's backend
 * (worker/gang/comm_backend.h), the checks every backend shares (count 0, a
 * communicator that failed earlier), world size 1 on the CPU (copies or
 * nothing, no library), and the tally of the calls a backend served (calls,
 * seconds inside them, bytes), logged at info level when the communicator
 * is freed (event=comm_stats): where a run's time went. For NCCL the
 * seconds are those of queueing (its collectives return queued).
 * Must not: know a library, or touch a buffer except in the local
 * communicator (a GPU backend's buffers are device memory).
 */
#include "comm_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

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

static const char *const op_keys[COMM_OPS] = {"allreduce", "reduce_scatter", "allgather",
                                                 "broadcast", "barrier"};

void comm_free(comm *c)
{
    if (!c) return;
    if (c->be) {
        char line[512];
        size_t n = 0;
        for (int op = 0; op < COMM_OPS && n < sizeof line; op++)
            n += (size_t)snprintf(line + n, sizeof line - n, "%s%s_calls=%ld %s_s=%.4f %s_mib=%.1f",
                                  op ? " " : "", op_keys[op], c->calls[op], op_keys[op],
                                  c->seconds[op], op_keys[op], c->bytes[op] / 1048576.0);
        LOG_INFO("comm", "event=comm_stats backend=%s rank=%d world=%d %s", LOGV(c->be->name),
                 c->rank, c->world, line /* pairs: the fixed keys above, numbers */);
        c->be->destroy(c->impl);
    }
    free(c);
}

int comm_rank(const comm *c) { return c->rank; }
int comm_world_size(const comm *c) { return c->world; }
int comm_failed(const comm *c) { return c->failed; }

static void tally(comm *c, int op, double t0, size_t bytes)
{
    c->calls[op]++;
    c->seconds[op] += mono_seconds() - t0;
    c->bytes[op] += (double)bytes;
}

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
    double t0 = mono_seconds();
    int rc = c->be->allreduce_sum(c, buf, count, err, errlen);
    tally(c, COMM_OP_ALLREDUCE, t0, count * sizeof(float));
    return rc;
}

int comm_reduce_scatter_sum(comm *c, float *buf, size_t count, char *err, size_t errlen)
{
    if (!c->be || count == 0) return 0;
    if (!usable(c, "reduce-scatter", err, errlen)) return -1;
    double t0 = mono_seconds();
    int rc = c->be->reduce_scatter_sum(c, buf, count, err, errlen);
    tally(c, COMM_OP_REDUCE_SCATTER, t0, count * (size_t)c->world * sizeof(float));
    return rc;
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
    double t0 = mono_seconds();
    int rc = c->be->allgather(c, in, out, count, dtype, err, errlen);
    tally(c, COMM_OP_ALLGATHER, t0, count * (size_t)c->world * (dtype == COMM_BF16 ? 2 : 4));
    return rc;
}

int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, char *err,
                   size_t errlen)
{
    if (!c->be || count == 0) return 0;
    if (!usable(c, "broadcast", err, errlen)) return -1;
    double t0 = mono_seconds();
    int rc = c->be->broadcast(c, buf, count, dtype, root, err, errlen);
    tally(c, COMM_OP_BROADCAST, t0, count * (dtype == COMM_BF16 ? 2 : 4));
    return rc;
}

int comm_barrier(comm *c, char *err, size_t errlen)
{
    if (!c->be) return 0;
    if (!usable(c, "barrier", err, errlen)) return -1;
    double t0 = mono_seconds();
    int rc = c->be->barrier(c, err, errlen);
    tally(c, COMM_OP_BARRIER, t0, 0);
    return rc;
}
