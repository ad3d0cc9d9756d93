/* worker/comm.h - collectives over the ranks of a job, on flat buffers.
 *
 * Owns: the collective operations training needs (all-reduce sum,
 * reduce-scatter sum, all-gather, broadcast, barrier) behind one interface,
 * with one file per backend: comm_gloo.cc (CPU: gloo's TCP transport, its
 * rendezvous Store implemented on worker/rdzv.h as PyTorch's c10d does) and,
 * in the CUDA plugin, NCCL. World size 1 needs no backend (comm_local).
 * Must not: write ring or tree algorithms (the libraries have them), know
 * about models, or wait without the collective timeout.
 *
 * Buffers: counts are elements; for reduce-scatter and all-gather every
 * rank's chunk is count elements (callers pad the flat vector to a multiple
 * of the world size), chunks in rank order. Summation order is fixed for a
 * given world size: repeated runs give bit-identical results.
 * Errors: 0, or -1 with one line in err naming the operation and, where
 * the library says, the peer; comm_failed then stays set (the communicator
 * is unusable after a timeout or a lost peer).
 */
#ifndef VITJOB_COMM_H
#define VITJOB_COMM_H

#include <stddef.h>

#include "rdzv.h"

typedef enum { COMM_F32, COMM_BF16 } comm_dtype; /* bf16: 2-byte elements, moved not summed */

typedef struct comm comm;

/* The store a backend rendezvouses through: set a key, and get one waiting
 * at most timeout_s (value malloc'd, the caller frees). Both return 0 or -1
 * with a message in err. worker/comm_rdzv.c adapts worker/rdzv.h to it. */
typedef struct {
    void *ctx;
    int (*set)(void *ctx, const char *key, const void *val, size_t len, char *err,
               size_t errlen);
    int (*get)(void *ctx, const char *key, double timeout_s, void **val, size_t *len, char *err,
               size_t errlen);
} comm_store;

/* A CPU communicator (gloo) for rank of world ranks that meet through
 * store (borrowed for the call only), with the collective timeout in
 * seconds. World size 1: a local communicator whose operations copy or do
 * nothing (no store is used). *out is the caller's (comm_free). */
int comm_new_cpu_store(comm **out, const comm_store *store, int rank, int world,
                       double timeout_s, char *err, size_t errlen);
/* The same, through the rendezvous store r (worker/comm_rdzv.c). */
int comm_new_cpu(comm **out, rdzv *r, double timeout_s, char *err, size_t errlen);
void comm_free(comm *c); /* accepts NULL */

int comm_rank(const comm *c);
int comm_world_size(const comm *c);
int comm_failed(const comm *c);

/* In place: buf (count f32) = sum over ranks. */
int comm_allreduce_sum(comm *c, float *buf, size_t count, char *err, size_t errlen);
/* In place: buf holds world_size chunks of count f32 (this rank's full
 * vector); afterwards this rank's chunk (buf + rank * count) holds the sum
 * over ranks of that chunk, and the other chunks are scratch. */
int comm_reduce_scatter_sum(comm *c, float *buf, size_t count, char *err, size_t errlen);
/* in: this rank's chunk (count elements of dtype); out: world_size chunks
 * in rank order. in may be out + rank * count (in place). */
int comm_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, char *err,
                   size_t errlen);
/* buf (count elements of dtype) from root to every rank. */
int comm_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, char *err,
                   size_t errlen);
int comm_barrier(comm *c, char *err, size_t errlen);

#endif
