/* worker/train/lostpeer.c - see lostpeer.h. */
#include "lostpeer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "contract.h"
#include "exitcode.h"
#include "kube.h"
#include "kubeconfig.h"
#include "log.h"
#include "timefmt.h"

static int pod_of(const lostpeer_ctx *c, int rank)
{
    return rank / (c->local_ranks > 0 ? c->local_ranks : 1);
}

void lostpeer_info_of(lostpeer_info *out, const lostpeer_ctx *c, const hb_verdict *v)
{
    memset(out, 0, sizeof *out);
    out->generation = c->generation;
    out->rank = pod_of(c, v->rank);
    out->reported_by = pod_of(c, c->rank);
    snprintf(out->evidence, sizeof out->evidence, "%s", hb_evidence_name(v->evidence));
    timefmt_now(out->time, 0);
    if (v->evidence == HB_EVIDENCE_HEARTBEAT)
        snprintf(out->message, sizeof out->message, "rank %d (pod index %d): no heartbeat for "
                 "%.1f s", v->rank, out->rank, v->silent_s);
    else
        snprintf(out->message, sizeof out->message, "rank %d (pod index %d): its connection "
                 "closed", v->rank, out->rank);
}

cJSON *lostpeer_patch(const lostpeer_info *p)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *lp = cJSON_AddObjectToObject(cJSON_AddObjectToObject(root, "status"), "lostPeer");
    int ok = lp && cJSON_AddNumberToObject(lp, "generation", (double)p->generation) &&
             cJSON_AddNumberToObject(lp, "rank", p->rank) &&
             cJSON_AddNumberToObject(lp, "reportedBy", p->reported_by) &&
             cJSON_AddStringToObject(lp, "evidence", p->evidence) &&
             cJSON_AddStringToObject(lp, "time", p->time) &&
             cJSON_AddStringToObject(lp, "message", p->message);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int lostpeer_report(const lostpeer_info *p, const lostpeer_ctx *c)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *name = getenv(VJ_ENV_NAME), *ns = getenv(VJ_ENV_NAMESPACE);
    char err[512], path[768];
    if (!host || !*host || !name || !*name) {
        LOG_DEBUG("lostpeer", "event=report_off reason=%s",
                  LOGV(!host || !*host ? "not in Kubernetes (no KUBERNETES_SERVICE_HOST)"
                                       : "no " VJ_ENV_NAME));
        return 0;
    }
    kube_config *cfg = NULL;
    if (kube_config_in_cluster(c->sa_dir, &cfg, err, sizeof err) != 0) {
        LOG_DEBUG("lostpeer", "event=report_off reason=%s", LOGV(err));
        return 0;
    }
    if (!ns || !*ns) ns = kube_config_namespace(cfg);
    char job[320];
    snprintf(job, sizeof job, "%s/%s", ns, name);
    if (kube_path(path, sizeof path, "/apis/" VJ_API_VERSION, ns, VJ_RESOURCE, name,
                  "status") != 0) {
        kube_config_free(cfg);
        LOG_WARN("lostpeer", "event=lost_peer_report_failed job=%s msg=\"job name too long\"",
                 LOGV(job));
        return -1;
    }
    kube_client *k = NULL;
    kube_status st = {0};
    int rc = kube_client_new(cfg, &k, &st);
    cJSON *patch = rc == KUBE_OK ? lostpeer_patch(p) : NULL;
    if (rc == KUBE_OK && !patch) {
        rc = KUBE_ERR_INVALID;
        snprintf(st.message, sizeof st.message, "out of memory building the patch");
    }
    if (patch) {
        double t = c->report_timeout_s > 0 ? c->report_timeout_s : 2.0;
        kube_client_set_timeout(k, (long)(t * 1000) > 100 ? (long)(t * 1000) : 100);
        rc = kube_merge_patch(k, path, patch, NULL, &st);
        cJSON_Delete(patch);
    }
    kube_client_free(k);
    if (rc != KUBE_OK) {
        LOG_WARN("lostpeer", "event=lost_peer_report_failed job=%s code=%d reason=%s msg=%s",
                 LOGV(job), st.http_code, LOGV(st.reason), LOGV(st.message));
        return -1;
    }
    LOG_INFO("lostpeer", "event=lost_peer_reported job=%s rank=%d evidence=%s generation=%ld",
             LOGV(job), p->rank, LOGV(p->evidence), p->generation);
    return 1;
}

void lostpeer_exit_message(char *out, size_t len, const lostpeer_ctx *c, const hb_verdict *v)
{
    if (v->kind == HB_STALE) {
        snprintf(out, len, "rank %d (pod index %d) went unanswered for %.1f s%s: it was frozen "
                 "or cut off and a newer gang may have replaced it; it exits without writing a "
                 "checkpoint, a status or a rendezvous key", c->rank, pod_of(c, c->rank),
                 v->silent_s, v->told ? " and rank 0 declared it lost" : "");
        return;
    }
    char why[160];
    if (v->evidence == HB_EVIDENCE_HEARTBEAT)
        snprintf(why, sizeof why, "no heartbeat for %.1f s while its connection stayed open",
                 v->silent_s);
    else
        snprintf(why, sizeof why, "its connection closed");
    char by[64] = "";
    if (v->noticed_by != c->rank) snprintf(by, sizeof by, ", noticed by rank %d", v->noticed_by);
    snprintf(out, len, "rank %d (pod index %d) lost: %s (evidence %s%s); lost: rank %d%s", v->rank,
             pod_of(c, v->rank), why, hb_evidence_name(v->evidence), by, v->rank,
             v->rank == 0 ? " (the rendezvous store's)" : "");
}

void lostpeer_on_verdict(void *ctx, const hb_verdict *v)
{
    const lostpeer_ctx *c = ctx;
    char msg[600];
    lostpeer_exit_message(msg, sizeof msg, c, v);
    if (v->kind == HB_STALE) {
        LOG_WARN("worker", "event=stale rank=%d pod=%d silent_s=%.1f told=%d generation=%ld",
                 c->rank, pod_of(c, c->rank), v->silent_s, v->told, c->generation);
    } else {
        LOG_WARN("worker", "event=peer_lost rank=%d pod=%d evidence=%s noticed_by=%d "
                 "silent_s=%.1f generation=%ld", v->rank, pod_of(c, v->rank),
                 LOGV(hb_evidence_name(v->evidence)), v->noticed_by, v->silent_s,
                 c->generation);
        if (v->noticed_by == c->rank) { /* the one that noticed reports; the others echo */
            lostpeer_info info;
            lostpeer_info_of(&info, c, v);
            lostpeer_report(&info, c);
        }
        fflush(NULL); /* the metrics written so far */
    }
    /* the last line: stderr stays held by this thread until the process ends */
    const int code = vj_exit_code(VJ_ERR_PEER_LOST, 0);
    flockfile(stderr);
    log_final("worker", "exit_code=%d class=%s retried=%s msg=%s", code,
              LOGV(vj_err_info(VJ_ERR_PEER_LOST)->name), vj_exit_permanent(code) ? "no" : "yes",
              LOGV(msg));
    fflush(stderr);
    _exit(code);
}
