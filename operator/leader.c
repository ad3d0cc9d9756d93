/* operator/leader.c - see leader.h. */
#include "leader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "log.h"
#include "timefmt.h"

struct leader_elector {
    kube_client *c;
    char *ns, *name, *identity;
    double lease_duration, renew_deadline;
    char path[512];
    /* what we saw last, and when (our clock) it last changed */
    char observed_holder[256];
    char observed_renew[64];
    double observed_at;
    double last_renew; /* our last successful renewal; < 0 = never */
};

int leader_new(kube_client *c, const leader_opts *o, leader_elector **out)
{
    leader_elector *le = calloc(1, sizeof *le);
    if (!le) return -1;
    le->c = c;
    le->ns = strdup(o->ns);
    le->name = strdup(o->name);
    le->identity = strdup(o->identity);
    le->lease_duration = o->lease_duration;
    le->renew_deadline = o->renew_deadline;
    le->last_renew = -1e300;
    le->observed_at = -1e300;
    if (!le->ns || !le->name || !le->identity ||
        kube_path(le->path, sizeof le->path, "/apis/coordination.k8s.io/v1", o->ns, "leases",
                  o->name, NULL) != 0) {
        leader_free(le);
        return -1;
    }
    *out = le;
    return 0;
}

void leader_free(leader_elector *le)
{
    if (!le) return;
    free(le->ns);
    free(le->name);
    free(le->identity);
    free(le);
}

const char *leader_observed_holder(const leader_elector *le) { return le->observed_holder; }

double leader_valid_until(const leader_elector *le) { return le->last_renew + le->renew_deadline; }

int leader_is_leader(const leader_elector *le, double now)
{
    return now - le->last_renew < le->renew_deadline;
}

/* obj.a.b as a string, "" when absent. */
static const char *str_at(const cJSON *obj, const char *a, const char *b)
{
    const char *v = json_str(json_get(obj, a), b);
    return v ? v : "";
}

/* Builds the spec we want the Lease to have. */
static cJSON *lease_spec(const char *holder, int duration, const char *acquire, const char *renew,
                         int transitions)
{
    cJSON *spec = cJSON_CreateObject();
    cJSON_AddStringToObject(spec, "holderIdentity", holder);
    cJSON_AddNumberToObject(spec, "leaseDurationSeconds", duration);
    cJSON_AddStringToObject(spec, "acquireTime", acquire);
    cJSON_AddStringToObject(spec, "renewTime", renew);
    cJSON_AddNumberToObject(spec, "leaseTransitions", transitions);
    return spec;
}

static void observe(leader_elector *le, const cJSON *lease, double now)
{
    const char *holder = str_at(lease, "spec", "holderIdentity");
    const char *renew = str_at(lease, "spec", "renewTime");
    if (strcmp(holder, le->observed_holder) != 0 || strcmp(renew, le->observed_renew) != 0) {
        snprintf(le->observed_holder, sizeof le->observed_holder, "%s", holder);
        snprintf(le->observed_renew, sizeof le->observed_renew, "%s", renew);
        le->observed_at = now;
    }
}

int leader_try(leader_elector *le, double now, kube_status *st)
{
    char when[TIMEFMT_LEN];
    timefmt_now(when, 6); /* a MicroTime */
    cJSON *lease = NULL;
    int rc = kube_get(le->c, le->path, &lease, st);
    if (rc != KUBE_OK && !kube_is_not_found(st)) return leader_is_leader(le, now);

    if (rc != KUBE_OK) { /* no Lease yet: create it, holding it */
        char coll[512];
        kube_path(coll, sizeof coll, "/apis/coordination.k8s.io/v1", le->ns, "leases", NULL, NULL);
        cJSON *obj = cJSON_CreateObject();
        cJSON_AddStringToObject(obj, "apiVersion", "coordination.k8s.io/v1");
        cJSON_AddStringToObject(obj, "kind", "Lease");
        cJSON *meta = cJSON_AddObjectToObject(obj, "metadata");
        cJSON_AddStringToObject(meta, "name", le->name);
        cJSON_AddStringToObject(meta, "namespace", le->ns);
        cJSON_AddItemToObject(obj, "spec", lease_spec(le->identity, (int)le->lease_duration,
                                                      when, when, 0));
        cJSON *created = NULL;
        rc = kube_create(le->c, coll, obj, &created, st);
        cJSON_Delete(obj);
        if (rc == KUBE_OK) {
            observe(le, created, now);
            le->last_renew = now;
            LOG_INFO("leader", "event=acquired lease=%s identity=%s",
                     LOGVF("%s/%s", le->ns, le->name), LOGV(le->identity));
        }
        cJSON_Delete(created);
        return leader_is_leader(le, now);
    }

    observe(le, lease, now);
    char holder[256]; /* a copy: the lease is replaced and freed below */
    snprintf(holder, sizeof holder, "%s", str_at(lease, "spec", "holderIdentity"));
    const cJSON *dur = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(lease, "spec"),
                                                        "leaseDurationSeconds");
    double duration = cJSON_IsNumber(dur) ? dur->valuedouble : le->lease_duration;
    int ours = strcmp(holder, le->identity) == 0;
    if (!ours && holder[0] && now < le->observed_at + duration) {
        cJSON_Delete(lease);
        le->last_renew = -1e300; /* someone else leads */
        return 0;
    }
    /* renew ours, or take over an expired or released lease */
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(lease, "spec"),
                                                       "leaseTransitions");
    int transitions = cJSON_IsNumber(tr) ? tr->valueint : 0;
    const char *acquire = ours ? str_at(lease, "spec", "acquireTime") : when;
    cJSON *spec = lease_spec(le->identity, (int)le->lease_duration, acquire[0] ? acquire : when,
                             when, ours ? transitions : transitions + 1);
    cJSON_ReplaceItemInObject(lease, "spec", spec);
    cJSON *updated = NULL;
    rc = kube_update(le->c, le->path, lease, &updated, st); /* conditional on resourceVersion */
    cJSON_Delete(lease);
    if (rc == KUBE_OK) {
        observe(le, updated, now);
        if (!ours)
            LOG_INFO("leader", "event=acquired lease=%s identity=%s previous=%s",
                     LOGVF("%s/%s", le->ns, le->name), LOGV(le->identity),
                     holder[0] ? "expired" : "released");
        le->last_renew = now;
    }
    cJSON_Delete(updated);
    return leader_is_leader(le, now);
}

int leader_release(leader_elector *le, kube_status *st)
{
    cJSON *lease = NULL;
    int rc = kube_get(le->c, le->path, &lease, st);
    if (rc != KUBE_OK) return rc;
    if (strcmp(str_at(lease, "spec", "holderIdentity"), le->identity) != 0) {
        cJSON_Delete(lease);
        return KUBE_OK; /* not ours to release */
    }
    char when[TIMEFMT_LEN];
    timefmt_now(when, 6); /* a MicroTime */
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(lease, "spec"),
                                                       "leaseTransitions");
    cJSON_ReplaceItemInObject(lease, "spec",
                              lease_spec("", 1, when, when, cJSON_IsNumber(tr) ? tr->valueint : 0));
    rc = kube_update(le->c, le->path, lease, NULL, st);
    cJSON_Delete(lease);
    if (rc == KUBE_OK) {
        le->last_renew = -1e300;
        LOG_INFO("leader", "event=released lease=%s identity=%s", LOGVF("%s/%s", le->ns, le->name),
                 LOGV(le->identity));
    }
    return rc;
}
