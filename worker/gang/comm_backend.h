/* worker/gang/comm_backend.h - what a collective backend gives worker/gang/comm.c,
 * private to the worker/comm* files.
 *
 * Owns: struct comm (the backend's table, its state, rank, world size, the
 * failed flag, the timeout) and the table a backend fills: comm_gloo.cc
 * (CPU) and comm_nccl.c (GPU, through the CUDA plugin).
 * Must not: be included outside worker/comm*; callers see comm.h only.
 *
 * worker/gang/comm.c checks before calling a slot: a communicator with no
 * backend (world size 1 on the CPU) is served there without one; count 0
 * returns 0; a failed communicator is refused. A slot sets c->failed itself
 * when its library says the communicator is lost.
 */
#ifndef VITJOB_COMM_BACKEND_H
#define VITJOB_COMM_BACKEND_H

#include "comm.h"

typedef struct comm_backend {
    const char *name; /* "gloo", "nccl" */
    void (*destroy)(void *impl);
    int (*allreduce_sum)(comm *c, float *buf, size_t count, char *err, size_t errlen);
    int (*reduce_scatter_sum)(comm *c, float *buf, size_t count, char *err, size_t errlen);
    int (*allgather)(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                     char *err, size_t errlen);
    int (*broadcast)(comm *c, void *buf, size_t count, comm_dtype dtype, int root, char *err,
                     size_t errlen);
    int (*barrier)(comm *c, char *err, size_t errlen);
} comm_backend;

/* worker/comm.c's tally of the calls a backend served, by operation */
enum { COMM_OP_ALLREDUCE, COMM_OP_REDUCE_SCATTER, COMM_OP_ALLGATHER, COMM_OP_BROADCAST,
       COMM_OP_BARRIER, COMM_OPS };

struct comm {
    const comm_backend *be; /* NULL: world size 1, host memory, no library */
    void *impl;             /* the backend's state, freed by be->destroy */
    int rank, world, failed;
    double timeout_s;
    long calls[COMM_OPS];   /* per operation: calls, seconds inside them, bytes of the */
    double seconds[COMM_OPS]; /* whole vector (all-gather: out, reduce-scatter: buf) */
    double bytes[COMM_OPS];
};

/* A communicator of backend be (NULL: local) owning impl; NULL when out of
 * memory (impl is then still the caller's). */
comm *comm_wrap(const comm_backend *be, void *impl, int rank, int world, double timeout_s);

#endif
