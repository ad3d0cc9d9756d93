/* operator/main.c - the vitjob-operator command line.
 *
 * Owns: what the flags say (operator/flags.h: the table, its parser and
 * --help; the namespaces, the planner and the lease timings checked here),
 * the client factory (kubeconfig or in-cluster), the /metrics and probe
 * endpoint, leader election, the controller's lifetime, and signals
 * (SIGTERM/SIGINT only set a flag; the main loop stops everything, releases
 * the Lease and exits 0).
 * Must not: reconcile (operator/controller.c), parse a flag itself, or log
 * a token.
 */
#include <curl/curl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller.h"
#include "flags.h"
#include "httpd.h"
#include "kube.h"
#include "leader.h"
#include "log.h"
#include "nslist.h"
#include "stdfds.h"
#include "util.h"
#include "version.h"

static volatile sig_atomic_t stop_requested;
/* With --leader-elect: until when (monotonic ms) this replica may act; the
 * reconcile workers check it before every write. */
static atomic_llong leading_until_ms;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

typedef struct {
    const char *kubeconfig; /* NULL: $KUBECONFIG, ~/.kube/config, or in-cluster */
} factory_ctx;

static int make_client(void *user, kube_client **out, kube_status *st)
{
    factory_ctx *f = user;
    kube_config *cfg = NULL;
    char err[512];
    int rc = f->kubeconfig ? kube_config_load_kubeconfig(f->kubeconfig, &cfg, err, sizeof err)
                           : kube_config_load_default(&cfg, err, sizeof err);
    if (rc != 0) {
        memset(st, 0, sizeof *st);
        snprintf(st->reason, sizeof st->reason, "Config");
        snprintf(st->message, sizeof st->message, "%s", err);
        return KUBE_ERR_INVALID;
    }
    return kube_client_new(cfg, out, st);
}

/* Every API request of every client, by status code (0 = no answer). */
static void count_request(void *user, const char *method, int code)
{
    (void)method;
    char c[16];
    snprintf(c, sizeof c, "%d", code);
    metrics_counter_add(user, 1, c);
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Shared with the HTTP thread (the readiness callback). */
typedef struct {
    controller *_Atomic ctl; /* set once started; cleared before it is freed */
    atomic_int leading;
    int elect;
    pthread_mutex_t lock;    /* held while the HTTP thread looks into ctl */
} ready_ctx;

static int ready(void *arg, char *why, size_t whylen)
{
    ready_ctx *r = arg;
    if (r->elect && !atomic_load(&r->leading)) {
        snprintf(why, whylen, "standby: not the leader");
        return 1; /* a standby replica is healthy and ready to take over */
    }
    pthread_mutex_lock(&r->lock);
    controller *c = atomic_load(&r->ctl);
    int synced = c && controller_synced(c);
    pthread_mutex_unlock(&r->lock);
    if (!synced) snprintf(why, whylen, "informer caches not synced");
    return synced;
}

/* path = the directory of this executable + "/" + name, when that is an
 * executable file: 0; else -1. */
static int beside_self(char *path, size_t len, const char *name)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return -1;
    *slash = 0;
    int w = snprintf(path, len, "%s/%s", self, name);
    return w > 0 && (size_t)w < len && access(path, X_OK) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    /* 0, 1 and 2 open before any file is: see lib/stdfds.h */
    stdfds_ensure("vitjob-operator", 1);
    operator_flags f;
    char err[512];
    switch (flags_parse(&f, argc, argv, err, sizeof err)) {
    case FLAGS_RUN:
        break;
    case FLAGS_HELP:
        flags_help(stdout);
        return 0;
    case FLAGS_VERSION:
        printf("vitjob-operator %s\ncommit: %s\nbackends: kubernetes API over %s, "
               "metrics and probes over libmicrohttpd %s\n", VJ_RELEASE, vj_git_commit(),
               curl_version(), MHD_get_version());
        return 0;
    case FLAGS_UNKNOWN:
        LOG_ERROR("operator", "msg=%s", LOGV(err));
        flags_help(stderr);
        return 2;
    case FLAGS_BAD:
        LOG_ERROR("operator", "msg=%s", LOGV(err));
        return 2;
    }
    log_set_level_name(f.log_level);
    factory_ctx fctx = {f.kubeconfig};
    const char *ns = f.ns, *metrics_addr = f.metrics_addr, *lease_name = f.lease_name;
    const char *lease_ns = f.lease_ns ? f.lease_ns : getenv("POD_NAMESPACE");
    char identity[256] = "";
    if (f.identity) snprintf(identity, sizeof identity, "%s", f.identity);
    int elect = f.leader_elect, workers = f.workers;
    const char *planner = f.planner;
    char planner_beside[4096];
    double lease_duration = f.lease_duration, renew_deadline = f.renew_deadline,
           retry_period = f.retry_period;
    if (!(retry_period > 0 && retry_period < renew_deadline && renew_deadline < lease_duration)) {
        LOG_ERROR("operator", "msg=\"need 0 < --retry-period < --renew-deadline < --lease-duration\" "
                  "retry_period=%g renew_deadline=%g lease_duration=%g", retry_period,
                  renew_deadline, lease_duration);
        return 2;
    }
    ns_list watched;
    if (ns_list_parse(ns, &watched, err, sizeof err) != 0) {
        LOG_ERROR("operator", "msg=%s", LOGV(err));
        return 2;
    }
    char watched_s[1024];
    ns_list_join(&watched, watched_s, sizeof watched_s);
    /* The leader-election identity: --identity, else the pod's name (the
     * Deployment passes POD_NAME from the downward API: unique per pod and
     * readable in the Lease), else host_pid outside Kubernetes. */
    const char *pod_name = getenv("POD_NAME");
    if (!identity[0] && pod_name && *pod_name)
        snprintf(identity, sizeof identity, "%s", pod_name);
    if (!identity[0]) {
        char host[200] = "operator";
        gethostname(host, sizeof host - 1);
        snprintf(identity, sizeof identity, "%s_%ld", host, (long)getpid());
    }
    if (!lease_ns || !*lease_ns) lease_ns = "vitjob-system";
    if (planner && !strcmp(planner, "none")) {
        planner = NULL;
    } else if (planner) {
        if (access(planner, X_OK) != 0) {
            LOG_ERROR("operator", "msg=%s",
                      LOGVF("--planner %s: not an executable file", planner));
            ns_list_free(&watched);
            return 2;
        }
    } else if (beside_self(planner_beside, sizeof planner_beside, "vitjob-worker") == 0) {
        planner = planner_beside;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Fail fast on a bad configuration. */
    kube_client *client = NULL;
    kube_status st;
    if (make_client(&fctx, &client, &st) != KUBE_OK) {
        LOG_ERROR("operator", "msg=%s",
                  LOGVF("cannot configure the Kubernetes client: %s", st.message));
        ns_list_free(&watched);
        return 2;
    }

    metrics_registry *metrics = metrics_registry_new();
    ready_ctx rctx = {.ctl = NULL, .leading = 0, .elect = elect,
                      .lock = PTHREAD_MUTEX_INITIALIZER};
    httpd *http = NULL;
    metrics_counter *api = metrics ? metrics_counter_new(metrics, "vitjob_api_requests_total",
                                                         "Kubernetes API requests by HTTP status "
                                                         "code (0: no answer).",
                                                         err, sizeof err, 1, "code")
                                   : NULL;
    if (api) kube_set_observer(count_request, api);
    httpd_config hc = {.addr = metrics_addr, .metrics = metrics, .ready = ready,
                       .ready_arg = &rctx, .liveness_timeout_s = 30};
    if (!metrics || httpd_start(&http, &hc, err, sizeof err) != 0) {
        LOG_ERROR("operator", "msg=%s", LOGV(metrics ? err : "out of memory"));
        kube_client_free(client);
        metrics_registry_free(metrics);
        ns_list_free(&watched);
        return 1;
    }
    LOG_INFO("operator", "event=start identity=%s namespace=%s metrics_port=%d leader_elect=%d "
             "workers=%d planner=%s", LOGV(identity), LOGV(watched.n ? watched_s : "(all)"),
             httpd_port(http), elect, workers, LOGV(planner ? planner : "none"));

    leader_elector *le = NULL;
    leader_opts lo = {.ns = lease_ns, .name = lease_name, .identity = identity,
                      .lease_duration = lease_duration, .renew_deadline = renew_deadline};
    if (elect && leader_new(client, &lo, &le) != 0) {
        LOG_ERROR("operator", "msg=\"out of memory\"");
        stop_requested = 1;
    }

    controller_opts co = {.factory = make_client, .factory_user = &fctx, .namespaces = &watched,
                          .workers = workers, .metrics = metrics, .stop = &stop_requested,
                          .leading_until_ms = le ? &leading_until_ms : NULL,
                          .planner = planner};
    /* Lease calls must fail well inside the renew deadline, so that a replica
     * whose API calls hang stops acting before a standby may take over. */
    if (le) {
        double t = (renew_deadline - retry_period) / 2;
        kube_client_set_timeout(client, (long)((t < 5 ? t : 5) * 1000));
    }
    int exit_code = 0;
    double next_try = 0;
    while (!stop_requested) {
        httpd_heartbeat(http);
        double now = mono_seconds();
        if (le && now >= next_try) {
            leader_try(le, now, &st);
            now = mono_seconds(); /* the calls may have taken a while: judge with a fresh clock */
            int leading = leader_is_leader(le, now);
            next_try = now + retry_period;
            if (!leading && atomic_load(&rctx.ctl)) {
                /* Lost the lease: stop acting at once; a restart rejoins as standby. */
                LOG_ERROR("operator", "event=leadership_lost identity=%s", LOGV(identity));
                exit_code = 1;
                break;
            }
            atomic_store(&rctx.leading, leading);
            atomic_store(&leading_until_ms,
                         leading ? (long long)(leader_valid_until(le) * 1000) : 0);
        }
        if ((!le || atomic_load(&rctx.leading)) && !atomic_load(&rctx.ctl)) {
            controller *ctl = NULL;
            if (controller_start(&co, &ctl, err, sizeof err) != 0) {
                LOG_ERROR("operator", "msg=%s", LOGV(err));
                exit_code = 1;
                break;
            }
            atomic_store(&rctx.ctl, ctl);
            LOG_INFO("operator", "event=controller_started identity=%s", LOGV(identity));
        }
        sleep_s(0.2);
    }
    stop_requested = 1;
    pthread_mutex_lock(&rctx.lock);
    controller *ctl = atomic_exchange(&rctx.ctl, NULL);
    pthread_mutex_unlock(&rctx.lock);
    controller_join(ctl);
    if (le && atomic_load(&rctx.leading)) leader_release(le, &st);
    leader_free(le);
    httpd_stop(http);
    metrics_registry_free(metrics);
    kube_client_free(client);
    ns_list_free(&watched);
    LOG_INFO("operator", "event=stopped exit_code=%d", exit_code);
    return exit_code;
}
