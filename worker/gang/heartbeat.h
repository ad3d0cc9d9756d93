/* worker/gang/heartbeat.h - the ranks' heartbeat: a lost peer noticed in
 * seconds, with its evidence, whatever the training thread is doing.
 *
 * Owns: one thread per process of a multi-rank run. Every rank but 0
 * keeps a connection of its own to rank 0's rendezvous store (handed off
 * by rdzv_server.c) and pings on it every period (timeout/5); rank 0's thread
 * answers every ping, watches every rank's last one and tells every rank
 * which one it declared lost. The verdicts:
 *   HB_LOST, evidence closed:    the peer's connection closed or was reset
 *                                without its goodbye (its process ended);
 *   HB_LOST, evidence heartbeat: the peer sent (rank 0: answered) nothing
 *                                for timeout_s while its connection stayed
 *                                open (frozen, partitioned, node gone);
 *   HB_STALE: this process itself did not run for most of the timeout (it
 *             was frozen: SIGSTOP, a paused VM), or rank 0 told it that it
 *             was declared lost: a newer gang may have replaced it, and it
 *             must write nothing (no checkpoint, status or rendezvous key).
 * A process that stops cleanly says goodbye (no verdict); rank 0's
 * goodbye ends the others' heartbeats (no verdict either).
 * Must not: know training, checkpoints or Kubernetes; block training (the
 * calls it makes return at once); act on a verdict itself (on_verdict,
 * the caller's, does: log, report, exit).
 *
 *     hb *h; hb_start(&h, &(hb_options){.store = rv, .generation = g,
 *                     .timeout_s = 5, .on_verdict = fn, .ctx = c}, err, len);
 *     ... before a checkpoint or a status write:  if (!hb_ok(h)) stop;
 *     hb_stop(h);
 */
#ifndef VITJOB_HEARTBEAT_H
#define VITJOB_HEARTBEAT_H

#include <stddef.h>

#include "rdzv.h"

typedef enum { HB_NONE = 0, HB_LOST, HB_STALE } hb_kind;
typedef enum { HB_EVIDENCE_NONE = 0, HB_EVIDENCE_CLOSED, HB_EVIDENCE_HEARTBEAT } hb_evidence;

typedef struct {
    hb_kind kind;
    int self;             /* this process's rank */
    int rank;             /* HB_LOST: the lost process's rank; HB_STALE: self */
    hb_evidence evidence; /* HB_LOST */
    int noticed_by;       /* HB_LOST: self, or 0 when rank 0 told this process */
    double silent_s;      /* heartbeat evidence: seconds without one; HB_STALE:
                             seconds this process went unanswered */
    int told;             /* HB_STALE: rank 0 said it declared this process lost */
} hb_verdict;

/* "closed", "heartbeat" (status.lostPeer.evidence), "" for none. */
const char *hb_evidence_name(hb_evidence e);

/* Called once, on the heartbeat's thread, with the first verdict (not
 * after hb_stop began). It may exit the process (and then must not return
 * to hb_stop's caller: hb_stop waits for it). */
typedef void (*hb_verdict_fn)(void *ctx, const hb_verdict *v);

typedef struct {
    rdzv *store;              /* joined (borrowed; outlives the heartbeat): rank 0 serves
                                 the heartbeats on its store, the others connect to it */
    long generation;          /* VITJOB_RESTART: a heartbeat of another one is refused */
    double timeout_s;         /* training.heartbeatTimeoutSeconds */
    double period_s;          /* between pings; <= 0: timeout_s / 5 */
    double connect_timeout_s; /* for a rank's connection to rank 0 (and rank 0's wait for
                                 it); <= 0: 60 */
    hb_verdict_fn on_verdict; /* NULL: the verdict is only kept (hb_verdict_get) */
    void *ctx;
    /* The clock every judgment reads (silence, freezes, hb_ok), in seconds;
     * NULL: the monotonic clock (mono_seconds). The tests' own, to move time
     * by hand; the waits between pings stay real (period_s). */
    double (*clock)(void *clock_ctx);
    void *clock_ctx;
} hb_options;

typedef struct hb hb;

/* Starts this process's heartbeat thread (rank 0: serves; others: connect
 * and ping, RDZV_* kind on failure as rdzv_handoff_connect's). *out is the
 * caller's, ended with hb_stop. */
int hb_start(hb **out, const hb_options *o, rdzv_error *kind, char *err, size_t errlen);

/* 1 while this process may write (a checkpoint, a status, a rendezvous
 * key): no verdict yet, its own heartbeat thread ran within the last
 * 0.8 x timeout and (not rank 0) rank 0 answered within the timeout. A
 * process woken from a freeze reads 0 at once, before its heartbeat thread
 * has run. Any thread; never blocks. NULL (one process): 1. */
int hb_ok(const hb *h);

/* The verdict so far (kind HB_NONE: none). Returns 1 when there is one. */
int hb_verdict_get(hb *h, hb_verdict *out);

/* After training failed with a lost peer: waits at most timeout_s for a
 * verdict (with on_verdict set, its handler may end the process meanwhile).
 * Returns 1 with *out (may be NULL) when there is one, 0 when none came or
 * none can come (a peer said goodbye; rank 0 ended the heartbeats). */
int hb_await(hb *h, double timeout_s, hb_verdict *out);

/* Says goodbye (rank 0: ends every rank's heartbeat), stops the thread and
 * frees. Once on_verdict is running, waits for it (forever, when it exits
 * the process). Accepts NULL. */
void hb_stop(hb *h);

#endif
