/* worker/train/report.c - see report.h. */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "contract.h"
#include "kube.h"
#include "kubeconfig.h"
#include "log.h"
#include "timefmt.h"
#include "util.h"

struct report {
    kube_client *k;     /* used by the thread alone */
    char path[768];     /* .../namespaces/NS/vitjobs/NAME/status */
    char job[320];      /* NS/NAME, for logs */
    double interval_s, final_timeout_s, request_timeout_s;
    int (*may_write)(const void *ctx);
    const void *may_write_ctx;
    pthread_t thread;

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t wake; /* the thread: new progress, or stop */
    pthread_cond_t done; /* report_free: the thread has finished */
    report_info cur; /* the newest progress handed over */
    int dirty;           /* cur not yet written */
    int urgent;          /* a stored checkpoint: write before the interval is up */
    int failing;         /* the last write failed */
    double next_due;     /* mono_seconds() of the earliest next write */
    int stopping, finished, abandoned;
    double deadline;     /* stopping: when report_free stops waiting */
    long sent, failed;
};

static void free_all(report *r)
{
    kube_client_free(r->k);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->wake);
    pthread_cond_destroy(&r->done);
    free(r);
}

static struct timespec mono_ts(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    return ts;
}

/* mono_seconds() is CLOCK_MONOTONIC, as the condition variables' clock. */
static void timed_wait(pthread_cond_t *c, pthread_mutex_t *m, double until)
{
    struct timespec ts = mono_ts(until);
    pthread_cond_timedwait(c, m, &ts);
}

/* Through the decimal text: strtod gives the double nearest it, which
 * prints back as written (0.3904, not 0.39040000000000002). */
double report_round_places(double v, int places)
{
    if (!isfinite(v) || places < 0 || places > 17 || fabs(v) >= 1e21) return v;
    char t[64];
    snprintf(t, sizeof t, "%.*f", places, v);
    return strtod(t, NULL);
}

double report_round_sig(double v, int digits)
{
    if (!isfinite(v) || digits < 1 || digits > 17) return v;
    char t[64];
    snprintf(t, sizeof t, "%.*e", digits - 1, v);
    return strtod(t, NULL);
}

/* The merge patch {"status":{"progress":{...}}} of p; NULL if out of memory.
 * Values a schema would refuse (not finite, negative where it has a
 * minimum of 0) are left out rather than sent. */
static cJSON *progress_patch(const report_info *p)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *pr = cJSON_AddObjectToObject(cJSON_AddObjectToObject(root, "status"), "progress");
    if (!pr) {
        cJSON_Delete(root);
        return NULL;
    }
    int ok = 1;
#define NUM(key, v) ok &= cJSON_AddNumberToObject(pr, key, (v)) != NULL
    NUM("step", (double)(p->step > 0 ? p->step : 0));
    NUM("totalSteps", (double)(p->total_steps > 0 ? p->total_steps : 0));
    /* as kubectl get vj prints them: 1.37, 0.5123, 1830.2, 3m12s */
    if (isfinite(p->epoch) && p->epoch >= 0) NUM("epoch", report_round_places(p->epoch, 2));
    if (isfinite(p->loss)) NUM("loss", report_round_sig(p->loss, 4));
    if (isfinite(p->images_per_second) && p->images_per_second >= 0)
        NUM("imagesPerSecond", report_round_places(p->images_per_second, 1));
    if (isfinite(p->eta_seconds) && p->eta_seconds >= 0 && p->eta_seconds < 1e15) {
        long long eta = llround(p->eta_seconds);
        char human[TIMEFMT_DUR_LEN];
        timefmt_duration(human, eta);
        NUM("etaSeconds", (double)eta);
        ok &= cJSON_AddStringToObject(pr, "eta", human) != NULL;
    }
    if (p->skipped_samples > 0) NUM("skippedSamples", (double)p->skipped_samples);
    if (p->last_checkpoint_step >= 0) {
        NUM("lastCheckpointStep", (double)p->last_checkpoint_step);
        if (p->last_checkpoint_uri[0])
            ok &= cJSON_AddStringToObject(pr, "lastCheckpointURI", p->last_checkpoint_uri) != NULL;
    }
    if (isfinite(p->test_accuracy) && p->test_accuracy >= 0 && p->test_step >= 0) {
        NUM("testAccuracy", report_round_places(p->test_accuracy, 4));
        NUM("testStep", (double)p->test_step);
    }
#undef NUM
    char now[TIMEFMT_LEN];
    timefmt_now(now, 0);
    ok &= cJSON_AddStringToObject(pr, "updateTime", now) != NULL;
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* One PATCH of p within timeout_s. Called without the mutex. */
static int send_progress(report *r, const report_info *p, double timeout_s, int final)
{
    kube_status st = {0};
    if (r->may_write && !r->may_write(r->may_write_ctx)) {
        LOG_WARN("report", "event=report_skipped job=%s step=%ld final=%d reason=%s", LOGV(r->job),
                 p->step, final, LOGV("this rank may not write (its heartbeat went unanswered)"));
        return 0;
    }
    cJSON *patch = progress_patch(p);
    int rc = KUBE_ERR_INVALID;
    if (patch) {
        kube_client_set_timeout(r->k, (long)(timeout_s * 1000.0) > 100 ? (long)(timeout_s * 1000.0)
                                                                        : 100);
        rc = kube_merge_patch(r->k, r->path, patch, NULL, &st);
        cJSON_Delete(patch);
    } else {
        snprintf(st.message, sizeof st.message, "out of memory building the patch");
    }
    pthread_mutex_lock(&r->mu);
    int was_failing = r->failing;
    r->failing = rc != KUBE_OK;
    if (rc == KUBE_OK) r->sent++;
    else r->failed++;
    pthread_mutex_unlock(&r->mu);
    /* attempts are an interval apart (report_free's final one aside): one
     * line per attempt is one line per interval, whatever the step rate */
    if (rc != KUBE_OK)
        LOG_WARN("report", "event=report_failed job=%s step=%ld final=%d code=%d reason=%s "
                 "msg=%s%s", LOGV(r->job), p->step, final, st.http_code, LOGV(st.reason),
                 LOGV(st.message),
                 final ? "" : " retry=next_interval");
    else if (was_failing)
        LOG_INFO("report", "event=report_recovered job=%s step=%ld", LOGV(r->job), p->step);
    else
        LOG_DEBUG("report", "event=reported job=%s step=%ld final=%d", LOGV(r->job), p->step,
                  final);
    return rc == KUBE_OK;
}

static void *report_thread(void *arg)
{
    report *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stopping) {
            double now = mono_seconds();
            /* a checkpoint goes out at once, unless writes are failing: then
             * every attempt waits its interval, so failures log once per interval */
            if (r->dirty && ((r->urgent && !r->failing) || now >= r->next_due)) break;
            if (r->dirty) timed_wait(&r->wake, &r->mu, r->next_due);
            else pthread_cond_wait(&r->wake, &r->mu);
        }
        if (r->stopping) break;
        report_info p = r->cur;
        r->dirty = r->urgent = 0;
        pthread_mutex_unlock(&r->mu);
        int ok = send_progress(r, &p, r->request_timeout_s, 0);
        pthread_mutex_lock(&r->mu);
        r->next_due = mono_seconds() + r->interval_s;
        if (!ok) r->dirty = 1; /* the newest progress then, at the next interval */
    }
    /* the final state, unless already written */
    if (r->dirty) {
        report_info p = r->cur;
        r->dirty = 0;
        double left = r->deadline - mono_seconds();
        pthread_mutex_unlock(&r->mu);
        if (left > 0) send_progress(r, &p, left, 1);
        pthread_mutex_lock(&r->mu);
    }
    r->finished = 1;
    pthread_cond_broadcast(&r->done);
    int abandoned = r->abandoned;
    pthread_mutex_unlock(&r->mu);
    if (abandoned) free_all(r); /* report_free stopped waiting and left it to us */
    return NULL;
}

report *report_from_env(const report_options *o)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *name = getenv(VJ_ENV_NAME), *ns = getenv(VJ_ENV_NAMESPACE);
    if (!host || !*host) {
        LOG_DEBUG("report", "event=reporting_off reason=\"not in Kubernetes (no "
                  "KUBERNETES_SERVICE_HOST)\"");
        return NULL;
    }
    if (!name || !*name) {
        LOG_DEBUG("report", "event=reporting_off reason=%s", LOGVF("no %s", VJ_ENV_NAME));
        return NULL;
    }
    char err[512];
    kube_config *cfg = NULL;
    if (kube_config_in_cluster(o ? o->sa_dir : NULL, &cfg, err, sizeof err) != 0) {
        LOG_DEBUG("report", "event=reporting_off reason=%s", LOGV(err));
        return NULL;
    }
    if (!ns || !*ns) ns = kube_config_namespace(cfg);
    report *r = calloc(1, sizeof *r);
    if (!r) {
        kube_config_free(cfg);
        LOG_WARN("report", "event=reporting_off reason=\"out of memory\"");
        return NULL;
    }
    kube_status st;
    if (kube_client_new(cfg, &r->k, &st) != KUBE_OK) {
        LOG_WARN("report", "event=reporting_off reason=%s", LOGV(st.message));
        free(r);
        return NULL;
    }
    if (kube_path(r->path, sizeof r->path, "/apis/" VJ_API_VERSION, ns, VJ_RESOURCE, name,
                  "status") != 0) {
        LOG_WARN("report", "event=reporting_off reason=\"job name too long\"");
        kube_client_free(r->k);
        free(r);
        return NULL;
    }
    snprintf(r->job, sizeof r->job, "%s/%s", ns, name);
    r->interval_s = o && o->interval_s > 0 ? o->interval_s : 10.0;
    r->may_write = o ? o->may_write : NULL;
    r->may_write_ctx = o ? o->may_write_ctx : NULL;
    r->final_timeout_s = o && o->final_timeout_s > 0 ? o->final_timeout_s : 5.0;
    r->request_timeout_s = o && o->request_timeout_s > 0 ? o->request_timeout_s
                           : r->interval_s < 10.0    ? r->interval_s
                                                     : 10.0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->wake, &ca);
    pthread_cond_init(&r->done, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&r->thread, NULL, report_thread, r) != 0) {
        LOG_WARN("report", "event=reporting_off reason=\"cannot start a thread\"");
        free_all(r);
        return NULL;
    }
    LOG_INFO("report", "event=reporting job=%s interval_s=%g", LOGV(r->job), r->interval_s);
    return r;
}

static void hand_over(report *r, const report_info *p, int urgent)
{
    if (!r || !p) return;
    pthread_mutex_lock(&r->mu);
    r->cur = *p;
    r->dirty = 1;
    if (urgent) r->urgent = 1;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mu);
}

void report_progress(report *r, const report_info *p) { hand_over(r, p, 0); }
void report_checkpoint(report *r, const report_info *p) { hand_over(r, p, 1); }

void report_free(report *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    r->deadline = mono_seconds() + r->final_timeout_s;
    pthread_cond_signal(&r->wake);
    while (!r->finished && mono_seconds() < r->deadline)
        timed_wait(&r->done, &r->mu, r->deadline);
    if (!r->finished) {
        /* a write hangs past the wait: training's exit does not wait for it */
        r->abandoned = 1;
        LOG_WARN("report", "event=final_report_abandoned job=%s waited_s=%g", LOGV(r->job),
                 r->final_timeout_s);
        pthread_mutex_unlock(&r->mu);
        pthread_detach(r->thread);
        return;
    }
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    free_all(r);
}

long report_sent(report *r)
{
    if (!r) return 0;
    pthread_mutex_lock(&r->mu);
    long n = r->sent;
    pthread_mutex_unlock(&r->mu);
    return n;
}

long report_failed(report *r)
{
    if (!r) return 0;
    pthread_mutex_lock(&r->mu);
    long n = r->failed;
    pthread_mutex_unlock(&r->mu);
    return n;
}
