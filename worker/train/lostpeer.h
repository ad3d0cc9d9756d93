/* worker/train/lostpeer.h - what a worker does once its heartbeat reached a
 * verdict (worker/gang/heartbeat.h): says so, reports it, exits.
 *
 * Owns: the one line of the verdict (event=peer_lost rank=... evidence=...,
 * or event=stale); status.lostPeer (docs/design.md: generation, rank and
 * reportedBy as pod indices, evidence, time, message), a JSON merge patch
 * on the ViTJob's status subresource with report.c's identity and
 * conditions (KUBERNETES_SERVICE_HOST, the service-account files,
 * $VITJOB_NAME), within a bounded time, written only by the process that
 * noticed the loss itself, a failure logged and never fatal; the process's
 * exit with class peer_lost and the worker's usual last line, from the
 * heartbeat's thread: stderr is held from that line to _exit, so that no
 * other thread (training, stuck in a collective or not) writes after it.
 * Must not: write anything for a stale verdict (no status, and the
 * process ends before training can write a checkpoint); wait without a
 * bound; return from lostpeer_on_verdict.
 */
#ifndef VITJOB_LOSTPEER_H
#define VITJOB_LOSTPEER_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "heartbeat.h"

typedef struct {
    int rank;                /* this process's global rank */
    int local_ranks;         /* VITJOB_LOCAL_RANKS (>= 1): pod index = rank / local_ranks */
    long generation;         /* VITJOB_RESTART */
    double report_timeout_s; /* the status write; <= 0: 2 */
    const char *sa_dir;      /* the service-account directory; NULL = KUBE_SA_DIR */
} lostpeer_ctx;

typedef struct {
    long generation;
    int rank;          /* the lost peer's pod index */
    int reported_by;   /* the reporter's pod index */
    char evidence[16]; /* heartbeat | closed */
    char time[40];     /* RFC 3339 UTC, when it was noticed */
    char message[257];
} lostpeer_info;

/* status.lostPeer of an HB_LOST verdict, noticed now. */
void lostpeer_info_of(lostpeer_info *out, const lostpeer_ctx *c, const hb_verdict *v);
/* {"status":{"lostPeer":{...}}}; NULL if out of memory. The caller frees. */
cJSON *lostpeer_patch(const lostpeer_info *p);
/* Writes p where this process runs for a ViTJob in Kubernetes: 1 written,
 * 0 not in Kubernetes (said in one debug line), -1 failed (logged). */
int lostpeer_report(const lostpeer_info *p, const lostpeer_ctx *c);
/* The exit line's message for v (it ends "; lost: rank N" for a loss). */
void lostpeer_exit_message(char *out, size_t len, const lostpeer_ctx *c, const hb_verdict *v);

/* An hb_verdict_fn (ctx: a lostpeer_ctx that outlives the heartbeat): logs
 * the verdict, reports a loss this process noticed, logs the exit line and
 * ends the process with peer_lost's exit code. Never returns. */
void lostpeer_on_verdict(void *ctx, const hb_verdict *v);

#endif
