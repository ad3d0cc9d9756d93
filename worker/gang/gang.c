/* worker/gang/gang.c - one rank's gang started and ended (gang.h): the
 * rendezvous, the heartbeat over it, the collectives, in that order, and
 * their teardown.
 *
 * Owns: the order of the start-up and teardown and the error class of each
 * step's failure. Must not: know the config or training; exit the process.
 */
#include "gang.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gang {
    rdzv *rv;
    hb *beat;
    comm *cm;
    double heartbeat_timeout_s;
};

static vj_err rdzv_class(rdzv_error k)
{
    return k == RDZV_INVALID   ? VJ_ERR_ENVIRONMENT
           : k == RDZV_LOST    ? VJ_ERR_PEER_LOST
           : k == RDZV_STOPPED ? VJ_ERR_STOPPED
                               : VJ_ERR_RENDEZVOUS;
}

vj_err gang_start(gang **out, const gang_options *o, char *err, size_t errlen)
{
    *out = NULL;
    gang *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return VJ_ERR_OUT_OF_MEMORY;
    }
    g->heartbeat_timeout_s = o->heartbeat_timeout_s;
    /* meet at rank 0's store */
    rdzv_error kind = RDZV_OK;
    rdzv_options ro = {.endpoint = o->endpoint, .rank = o->rank, .world_size = o->world_size,
                       .generation = o->generation, .timeout_s = o->rendezvous_timeout_s,
                       .stop = o->stop};
    if (rdzv_new(&g->rv, &ro, &kind, err, errlen) != 0) {
        free(g);
        return rdzv_class(kind);
    }
    /* the heartbeat (heartbeat.h): a lost peer reaches on_verdict from the
     * heartbeat's thread, whatever the caller is doing */
    hb_options ho = {.store = g->rv, .generation = o->generation,
                     .timeout_s = o->heartbeat_timeout_s,
                     .connect_timeout_s = o->rendezvous_timeout_s,
                     .on_verdict = o->on_verdict, .ctx = o->ctx};
    if (hb_start(&g->beat, &ho, &kind, err, errlen) != 0) {
        rdzv_free(g->rv);
        free(g);
        return kind == RDZV_STALE || kind == RDZV_TIMEOUT ? VJ_ERR_RENDEZVOUS : VJ_ERR_PEER_LOST;
    }
    /* then the collectives */
    const double ct = o->collective_timeout_s;
    if ((o->gpu ? comm_new_nccl(&g->cm, g->rv, ct, err, errlen)
                : comm_new_cpu(&g->cm, g->rv, ct, err, errlen)) != 0) {
        hb_await(g->beat, o->heartbeat_timeout_s + 2, NULL); /* a verdict ends the process here */
        hb_stop(g->beat);
        rdzv_free(g->rv);
        free(g);
        return VJ_ERR_PEER_LOST;
    }
    *out = g;
    return VJ_OK;
}

rdzv *gang_rdzv(gang *g) { return g ? g->rv : NULL; }
comm *gang_comm(gang *g) { return g ? g->cm : NULL; }
hb *gang_hb(gang *g) { return g ? g->beat : NULL; }

void gang_stop(gang *g, int peer_lost, char *err, size_t errlen)
{
    if (!g) return;
    if (peer_lost) hb_await(g->beat, g->heartbeat_timeout_s + 2, NULL); /* as in gang_start */
    hb_stop(g->beat);
    g->beat = NULL;
    if (peer_lost) { /* name the peer: the store saw whose connection broke */
        int lost = rdzv_lost_rank(g->rv, 5);
        size_t used = strlen(err);
        if (lost >= 0 && used < errlen)
            snprintf(err + used, errlen - used, "; lost: rank %d%s", lost,
                     lost == 0 ? " (the rendezvous store's)" : "");
    }
}

void gang_free(gang *g)
{
    if (!g) return;
    hb_stop(g->beat);
    comm_free(g->cm);
    rdzv_free(g->rv);
    free(g);
}
