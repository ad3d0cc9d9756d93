/* worker/gang/comm_rdzv.c - the collective backends' store (comm.h's
 * comm_store) on the rendezvous store (rdzv.h).
 *
 * Owns: comm_new_cpu and comm_new_nccl, the adapter from rdzv's set/get
 * to comm_store.
 * Must not: talk to the network itself or know a backend's key layout.
 */
#include "comm.h"

static int store_set(void *ctx, const char *key, const void *val, size_t len, char *err,
                     size_t errlen)
{
    return rdzv_set(ctx, key, val, len, NULL, err, errlen);
}

static int store_get(void *ctx, const char *key, double timeout_s, void **val, size_t *len,
                     char *err, size_t errlen)
{
    return rdzv_get(ctx, key, timeout_s, val, len, NULL, err, errlen);
}

int comm_new_cpu(comm **out, rdzv *r, double timeout_s, char *err, size_t errlen)
{
    const comm_store s = {.ctx = r, .set = store_set, .get = store_get};
    return comm_new_cpu_store(out, &s, rdzv_rank(r), rdzv_world_size(r), timeout_s, err,
                              errlen);
}

int comm_new_nccl(comm **out, rdzv *r, double timeout_s, char *err, size_t errlen)
{
    const comm_store s = {.ctx = r, .set = store_set, .get = store_get};
    return comm_new_nccl_store(out, &s, rdzv_rank(r), rdzv_world_size(r), timeout_s, err,
                               errlen);
}
