/* worker/gang/gang.h - one rank's place in its gang, started and ended: the
 * distributed start-up of a training run of many ranks.
 *
 * Owns: the order of the start-up (the rendezvous at rank 0's store,
 * rdzv.h; then the heartbeat over it, heartbeat.h; then the collectives,
 * comm.h: NCCL for GPU buffers, gloo for host memory), the error class of
 * each step's failure (api/exitcode.h), and the matching teardown: waiting
 * for the heartbeat's verdict when the run ended with a peer lost, and
 * naming the lost peer.
 * Must not: know the config, training or checkpoints (the caller passes
 * plain values and the verdict's handler); exit the process (a verdict's
 * handler may).
 *
 *     gang *g; if ((rc = gang_start(&g, &opts, err, len))) return rc;
 *     rc = run(gang_comm(g), gang_rdzv(g), gang_hb(g));
 *     gang_stop(g, rc == VJ_ERR_PEER_LOST, err, len);
 *     gang_free(g);
 */
#ifndef VITJOB_GANG_H
#define VITJOB_GANG_H

#include <signal.h>
#include <stddef.h>

#include "comm.h"
#include "exitcode.h"
#include "heartbeat.h"
#include "rdzv.h"

typedef struct {
    const char *endpoint;        /* host:port of rank 0's store (VITJOB_RDZV_ENDPOINT) */
    int rank, world_size;
    long generation;             /* VITJOB_RESTART */
    double rendezvous_timeout_s; /* the join, and the heartbeat's connection */
    double heartbeat_timeout_s;  /* a peer silent this long is lost */
    double collective_timeout_s;
    int gpu;                     /* NCCL collectives (GPU buffers); 0: gloo (host memory) */
    hb_verdict_fn on_verdict;    /* the heartbeat's verdict (may end the process) */
    void *ctx;                   /* on_verdict's; outlives the gang */
    const volatile sig_atomic_t *stop; /* the SIGTERM handler's flag: the rendezvous gives
                                        * up at once (VJ_ERR_STOPPED); NULL: never */
} gang_options;

typedef struct gang gang;

/* Meets the other ranks, starts the heartbeat, connects the collectives.
 * Returns VJ_OK with *out the caller's (gang_free), or the class of the
 * step that failed, with nothing left running: VJ_ERR_ENVIRONMENT (a bad
 * endpoint, rank or world size), VJ_ERR_STOPPED (stop set during the
 * rendezvous: a pod deleted while it waits for its peers), VJ_ERR_RENDEZVOUS (the join or the
 * heartbeat's connection timed out, or this process is of an older
 * generation), VJ_ERR_PEER_LOST (a connection broke; the collectives could
 * not connect: the heartbeat's verdict is awaited first, and its handler
 * may end the process). */
vj_err gang_start(gang **out, const gang_options *o, char *err, size_t errlen);

/* Borrowed; valid until gang_free. */
rdzv *gang_rdzv(gang *g);
comm *gang_comm(gang *g);
hb *gang_hb(gang *g);

/* Ends the heartbeat after the run. peer_lost (the run ended with
 * VJ_ERR_PEER_LOST): first waits for the heartbeat's verdict (its handler
 * may end the process), then appends "; lost: rank N" to err where the
 * store saw whose connection broke. NULL: nothing. */
void gang_stop(gang *g, int peer_lost, char *err, size_t errlen);

/* Stops the heartbeat if gang_stop did not, closes the collectives and the
 * store connection (rank 0: the store), frees. NULL: nothing. */
void gang_free(gang *g);

#endif
