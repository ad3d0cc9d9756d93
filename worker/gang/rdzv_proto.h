/* worker/gang/rdzv_proto.h - the rendezvous store's wire protocol, private to
 * its server (rdzv_server.c) and its client (rdzv_client.c); rdzv.h is the
 * API. Integers are packed by wire.h.
 *
 * Protocol (TCP, little-endian, one request in flight per client):
 *   request  = u32 length | u8 op | payload        (length counts op + payload)
 *   response = u32 length | u8 status | payload    (status: ST_OK or an rdzv_error)
 *   HELLO   u32 rank, u32 world, i64 generation          -> ok | STALE/INVALID + text
 *   SET     u16 klen, key, value                         -> ok
 *   GET     u32 timeout_ms, u16 klen, key                -> ok + value | TIMEOUT
 *   ADD     i64 delta, u16 klen, key                     -> ok + i64 new value
 *   CAS     u32 elen (0xffffffff: absent), expected, u16 klen, key, desired -> ok + u8 swapped
 *   JOIN    u32 timeout_ms                               -> ok once all ranks said HELLO |
 *                                                          TIMEOUT/LOST + text naming ranks
 *   BARRIER u32 timeout_ms, u16 nlen, name               -> ok once every rank arrived at its
 *                                                          n-th use of name | TIMEOUT/LOST
 *   HANDOFF payload (on a fresh connection, instead of HELLO) -> the connection leaves the
 *                                                          store for rdzv_set_handoff's handler,
 *                                                          which answers it | TIMEOUT "not ready"
 *   GOODBYE u8 0xff alone (length 1), no answer           -> the client closes: its rank
 *                                                          leaves, not lost
 * Waiting requests are parked on the server with their deadline and answered when
 * the store changes, a rank is lost, or the deadline passes. One client handle is
 * used by one thread at a time.
 *
 * Owns: the ops, the status of a response, the limits of keys, values and
 * messages, and moving a message's bytes before a deadline (rdzv_io_all).
 * Must not: be included outside the store's two files; parse a request or
 * build one (the server and the client do).
 */
#ifndef VITJOB_RDZV_PROTO_H
#define VITJOB_RDZV_PROTO_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "util.h"

enum { OP_HELLO = 1, OP_SET, OP_GET, OP_ADD, OP_CAS, OP_JOIN, OP_BARRIER, OP_HANDOFF };
#define ST_OK 0
#define MAX_KEY 512
#define MAX_VALUE (64u << 20)
#define MAX_MSG (MAX_VALUE + 2 * MAX_KEY + 64)

/* Sends or receives exactly len bytes before deadline (mono seconds), or
 * until *stop is set (stop may be NULL: never; it is looked at least every
 * 0.2 s, as the signal that sets it may reach another thread). Returns 0, -1
 * on a closed or broken connection, -2 on the deadline, -3 when stopped. */
static inline int rdzv_io_all(int fd, void *buf, size_t len, double deadline, int sending,
                              const volatile sig_atomic_t *stop)
{
    unsigned char *p = buf;
    while (len > 0) {
        if (stop && *stop) return -3;
        double left = deadline - mono_seconds();
        if (left <= 0) return -2;
        if (stop && left > 0.2) left = 0.2;
        struct pollfd pfd = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0) continue;
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

#endif
