/* kernels/comm_nccl.h - the CUDA plugin's NCCL communicator, as plain C.
 *
 * Owns: the table of C functions through which worker/gang/comm_nccl.c drives
 * NCCL inside the plugin (kernels/comm_nccl.cu, in lib/libvitjob_cuda.so),
 * and ops_cuda_nccl(), which finds that table the way ops_cuda() finds the
 * op tables (kernels/ops_cuda_loader.c: same checks, same reasons).
 * Must not: name a CUDA or NCCL type (the binaries include it and link
 * nothing from NVIDIA), or know about the rendezvous store: the unique id
 * travels as bytes, and the caller moves it between ranks.
 *
 * Every function returns 0 or -1 with one line in err. Buffers are device
 * memory of the CUDA backend (vit_ops.alloc of ops_cuda()). A collective
 * returns once it is enqueued on the communicator's own stream, ordered
 * after everything queued before it on the backend's compute stream; the
 * compute stream's later work (ops, download, release) is ordered after it.
 * A failure (an asynchronous NCCL error, or no completion within the
 * timeout) aborts the NCCL communicator and sets *failed; it stays set.
 */
#ifndef VITJOB_COMM_NCCL_H
#define VITJOB_COMM_NCCL_H

#include <stddef.h>

#define VITJOB_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct vitjob_nccl vitjob_nccl; /* one NCCL communicator and its stream */

typedef struct {
    /* A new unique id (rank 0 makes it; every rank initialises with it). */
    int (*unique_id)(unsigned char id[VITJOB_NCCL_ID_BYTES], char *err, size_t errlen);
    /* Joins rank of world on the current device; fails (aborting NCCL's
     * half-made communicator) when the ranks have not all connected within
     * timeout_s, which also bounds every later wait of this communicator. */
    int (*init)(vitjob_nccl **out, const unsigned char id[VITJOB_NCCL_ID_BYTES], int rank,
                int world, double timeout_s, char *err, size_t errlen);
    /* Waits (at most the timeout) for what is in flight, then finalises and
     * destroys NCCL's communicator (or only frees what is left after an
     * abort). Accepts NULL. */
    void (*destroy)(vitjob_nccl *c);
    int (*failed)(const vitjob_nccl *c);
    /* comm.h's collectives on device buffers; bf16: 2-byte elements. */
    int (*allreduce_sum)(vitjob_nccl *c, float *buf, size_t count, char *err, size_t errlen);
    int (*reduce_scatter_sum)(vitjob_nccl *c, float *buf, size_t count, char *err,
                              size_t errlen);
    int (*allgather)(vitjob_nccl *c, const void *in, void *out, size_t count, int bf16,
                     char *err, size_t errlen);
    /* Returns once the data has arrived (waits, at most the timeout). */
    int (*broadcast)(vitjob_nccl *c, void *buf, size_t count, int bf16, int root, char *err,
                     size_t errlen);
    /* Returns once every rank got here and this rank's collectives are done. */
    int (*barrier)(vitjob_nccl *c, char *err, size_t errlen);
    /* CUDA devices this process sees (for tests placing ranks on GPUs). */
    int (*device_count)(void);
} vitjob_nccl_ops;

/* The plugin's table, or NULL with the reason (no nvcc at build time, no
 * driver, no plugin, no usable GPU) in err. Initialises the CUDA backend
 * (ops_cuda) first: NCCL shares its device and compute stream. */
const vitjob_nccl_ops *ops_cuda_nccl(char *err, size_t errlen);

#endif
