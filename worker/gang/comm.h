/* worker/gang/comm.h - collectives over the ranks of a job, on flat buffers.
 *
 * Owns: the collective operations training needs (all-reduce sum,
 * reduce-scatter sum, all-gather, broadcast, barrier) behind one interface,
 * whichever backend serves them: worker/gang/comm.c dispatches to the
 * communicator's backend (worker/gang/comm_backend.h) and serves world size 1 on
 * the CPU itself; comm_gloo.cc is the CPU's (gloo's TCP transport, its
 * rendezvous Store implemented on worker/gang/rdzv.h as PyTorch's c10d does);
 * comm_nccl.c the GPU's (NCCL, inside the CUDA plugin: kernels/comm_nccl.cu).
 * Must not: write ring or tree algorithms (the libraries have them; the
 * one exception is the gloo reduce-scatter, gloo's own ring reduce-scatter
 * phase on its unbound buffers, because gloo 0.5 has no reduce-scatter
 * that can be kept across calls: see worker/comm_gloo.cc), know about
 * models, or wait without the collective timeout.
 *
 * Buffers: counts are elements; for reduce-scatter and all-gather every
 * rank's chunk is count elements (callers pad the flat vector to a multiple
 * of the world size), chunks in rank order. CPU communicators take host
 * memory; NCCL communicators take device memory of the CUDA backend (what
 * vit_ops.alloc of ops_cuda() returns), never host memory.
 * Errors: 0, or -1 with one line in err naming the operation and, where
 * the library says, the peer; comm_failed then stays set (the communicator
 * is unusable after a timeout or a lost peer).
 *
 * Determinism: summation order is fixed for a given world size. gloo: the
 * ring all-reduce and ring reduce-scatter add in an order fixed by rank and
 * world size, so repeated runs are bit-identical. NCCL: the
 * order follows the algorithm, protocol and channel count NCCL picks from
 * the topology and the message size; on one machine with one NCCL version
 * and the same sizes it picks the same ones, and repeated runs are
 * bit-identical, but another topology, NCCL version or environment
 * (NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS...) may round differently.
 * Pin NCCL_ALGO=Ring and NCCL_PROTO=Simple to fix the order further; no
 * setting makes a GPU sum bit-equal to the CPU's.
 *
 * Ordering on the GPU (NCCL): a collective returns once it is queued on
 * the communicator's own stream, after every op queued before it on the
 * CUDA backend's compute stream; every op, download and release queued
 * after it waits for it (CUDA events: the host does not block, and the
 * device is never synchronised). broadcast and barrier return complete.
 * At most 8 collectives are in flight: a ninth first waits for the oldest.
 * Every wait is bounded by the collective timeout, counted from the
 * collective's call, and every call first checks those in flight: one
 * unfinished past its timeout, or an NCCL error, fails that call and
 * aborts the communicator. A download after a collective whose peer died
 * waits in CUDA without that bound: where that matters, a barrier first
 * bounds it.
 */
#ifndef VITJOB_COMM_H
#define VITJOB_COMM_H

#include <stddef.h>

#include "rdzv.h"

typedef enum { COMM_F32, COMM_BF16 } comm_dtype; /* bf16: 2-byte elements, moved not summed */

typedef struct comm comm;

/* The store a backend rendezvouses through: set a key, and get one waiting
 * at most timeout_s (value malloc'd, the caller frees). Both return 0 or -1
 * with a message in err. worker/gang/comm_rdzv.c adapts worker/gang/rdzv.h to it. */
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
/* The same, through the rendezvous store r (worker/gang/comm_rdzv.c). */
int comm_new_cpu(comm **out, rdzv *r, double timeout_s, char *err, size_t errlen);
/* A GPU communicator (NCCL) on this process's CUDA device (the backend of
 * ops_cuda(), initialised first if it was not): rank 0 makes NCCL's unique
 * id and sets it in store under "nccl/<n>/id" (n: this process's count of
 * NCCL communicators), the others get it waiting at most timeout_s; then
 * NCCL connects in non-blocking mode, aborted if the ranks are not all
 * connected within timeout_s. World size 1 is a real NCCL communicator
 * (device copies); store may then be NULL. One GPU per rank: NCCL refuses
 * two ranks of a communicator on one device. Without a usable GPU or the
 * CUDA plugin: -1 and the reason ("NCCL communicator: no usable CUDA GPU:
 * ..."). */
int comm_new_nccl_store(comm **out, const comm_store *store, int rank, int world,
                        double timeout_s, char *err, size_t errlen);
/* The same, through the rendezvous store r (worker/gang/comm_rdzv.c). */
int comm_new_nccl(comm **out, rdzv *r, double timeout_s, char *err, size_t errlen);
/* Accepts NULL. NCCL: waits (at most the timeout) for what is in flight,
 * then leaves the communicator cleanly (or aborts it). */
void comm_free(comm *c);

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
