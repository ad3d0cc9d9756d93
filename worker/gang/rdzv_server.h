/* worker/gang/rdzv_server.h - rank 0's rendezvous store server, as the
 * client (rdzv_client.c) starts and stops it; private to the two (rdzv.h
 * is the API).
 *
 * Owns: the server's handle: start, the handoff handler, stop.
 * Must not: be included outside the store's two files.
 */
#ifndef VITJOB_RDZV_SERVER_H
#define VITJOB_RDZV_SERVER_H

#include <stddef.h>

#include "rdzv.h"

typedef struct rdzv_server rdzv_server;

/* Serves the store of one generation of world ranks on port (all
 * addresses; IPv6 with v4-mapped addresses where the host has it, else
 * IPv4) from a thread of its own. 0 with *out (freed by rdzv_server_stop),
 * or -1 with one line in err. */
int rdzv_server_start(rdzv_server **out, int port, int world, long generation, char *err,
                      size_t errlen);
/* rdzv_set_handoff's handler (fn NULL: none); no call of the old one after
 * this returns. */
void rdzv_server_set_handoff(rdzv_server *s, rdzv_handoff_fn fn, void *ctx);
/* Waits until every client has gone or for a short grace (so that late
 * readers of a key are not cut off), then stops the thread and frees. */
void rdzv_server_stop(rdzv_server *s);

#endif
