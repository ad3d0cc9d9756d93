/* operator/jobspec.c - see jobspec.h.
 *
 * Owns: reading and validating a ViTJob spec, and status time strings.
 * Must not: do I/O or keep pointers beyond the job object it was given.
 */
#include "jobspec.h"

#include "config.h"
#include "kvalid.h"
#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

static const cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static const char *get_str(const cJSON *o, const char *key)
{
    const cJSON *v = get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static long long get_int(const cJSON *o, const char *key, long long dflt)
{
    const cJSON *v = get(o, key);
    return cJSON_IsNumber(v) ? (long long)v->valuedouble : dflt;
}

int vj_jobspec_parse(const cJSON *job, vj_jobspec *js, char *err, size_t errlen)
{
    const cJSON *meta = get(job, "metadata");
    const char *name = get_str(meta, "name");
    if (name == NULL || name[0] == '\0') {
        set_err(err, errlen, "ViTJob has no metadata.name");
        return -1;
    }
    vj_jobspec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.ns = get_str(meta, "namespace");
    if (s.ns == NULL || s.ns[0] == '\0')
        s.ns = "default";
    s.uid = get_str(meta, "uid");
    if (s.uid == NULL)
        s.uid = "";
    s.generation = get_int(meta, "generation", 0);

    const cJSON *spec = get(job, "spec");
    s.spec = cJSON_IsObject(spec) ? spec : NULL;
    s.replicas = (int)get_int(spec, "replicas", 0);
    s.gpus = (int)get_int(spec, "gpusPerReplica", 0);
    s.local_ranks = s.gpus > 0 ? s.gpus : 1;
    s.world_size = s.replicas * s.local_ranks;
    s.image = get_str(spec, "image");
    const char *cs = get_str(get(spec, "checkpoint"), "credentialsSecret");
    s.credentials_secret = (cs && cs[0]) ? cs : NULL;

    const cJSON *rp = get(spec, "runPolicy");
    s.backoff_limit = (int)get_int(rp, "backoffLimit", 3);
    s.active_deadline = get_int(rp, "activeDeadlineSeconds", -1);
    s.ttl = get_int(rp, "ttlSecondsAfterFinished", -1);
    const char *cpp = get_str(rp, "cleanPodPolicy");
    s.clean_pod_policy = VJ_CLEAN_RUNNING;
    if (cpp && strcmp(cpp, "All") == 0)
        s.clean_pod_policy = VJ_CLEAN_ALL;
    else if (cpp && strcmp(cpp, "None") == 0)
        s.clean_pod_policy = VJ_CLEAN_NONE;
    s.suspend = cJSON_IsTrue(get(spec, "suspend"));
    const cJSON *t = get(spec, "template");
    s.tmpl = cJSON_IsObject(t) ? t : NULL;
    const char *sa = get_str(s.tmpl, "serviceAccountName");
    s.service_account = (sa && sa[0]) ? sa : NULL;
    *js = s;
    return 0;
}

cJSON *vj_jobspec_worker_config(const vj_jobspec *js)
{
    static const char *const keys[] = {"model", "data", "training", "checkpoint"};
    cJSON *out = cJSON_CreateObject();
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = get(js->spec, keys[i]);
        if (v == NULL)
            continue;
        cJSON *dup = cJSON_Duplicate(v, 1);
        if (dup == NULL || !cJSON_AddItemToObject(out, keys[i], dup)) {
            cJSON_Delete(dup);
            cJSON_Delete(out);
            return NULL;
        }
    }
    return out;
}

int vj_jobspec_validate(const vj_jobspec *js, char *err, size_t errlen)
{
    if (js->spec == NULL) {
        set_err(err, errlen, "spec: missing");
        return -1;
    }
    if (js->replicas < 1 || js->replicas > VJ_MAX_REPLICAS) {
        snprintf(err, errlen, "spec.replicas=%d: must be in [1, %d]", js->replicas,
                 VJ_MAX_REPLICAS);
        return -1;
    }
    /* <job> is a Service name: a DNS-1035 label (a ViTJob's own name is only
     * a DNS-1123 subdomain, so "1job" or "my.job" pass the API server). */
    char why[160];
    if (!kv_is_dns1035_label(js->name, why, sizeof why)) {
        snprintf(err, errlen,
                 "metadata.name=\"%s\": %s (it names the job's Service, which must be a "
                 "DNS-1035 label: lower case letters, digits and '-', starting with a letter, "
                 "ending with a letter or digit)", js->name, why);
        return -1;
    }
    /* <job>-worker-<rank> is a pod hostname: a DNS label of at most 63. */
    char last_rank[16];
    int digits = snprintf(last_rank, sizeof last_rank, "%d", js->replicas - 1);
    size_t max_name = 63 - strlen("-worker-") - (size_t)digits;
    if (js->name && strlen(js->name) > max_name) {
        snprintf(err, errlen,
                 "metadata.name=\"%s\" is %zu characters; with %d replicas at most %zu fit "
                 "(pod hostnames <name>-worker-<rank> are DNS labels of 63)",
                 js->name, strlen(js->name), js->replicas, max_name);
        return -1;
    }
    if (js->gpus < 0 || js->gpus > 64) {
        snprintf(err, errlen, "spec.gpusPerReplica=%d: must be in [0, 64]", js->gpus);
        return -1;
    }
    if (js->image == NULL || js->image[0] == '\0') {
        set_err(err, errlen, "spec.image: missing or empty");
        return -1;
    }
    if (vj_template_validate(js->tmpl, js->gpus, err, errlen) != 0)
        return -1;

    /* The worker's own code, on exactly the document the worker will read. */
    cJSON *wc = vj_jobspec_worker_config(js);
    char *text = wc ? cJSON_PrintUnformatted(wc) : NULL;
    cJSON_Delete(wc);
    if (text == NULL) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    vit_job_config *cfg = malloc(sizeof *cfg);
    int rc = -1;
    if (cfg == NULL) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    config_defaults(cfg);
    if (config_load_string(cfg, text, strlen(text), "spec", err, errlen) != 0)
        goto out;
    cfg->world_size = js->world_size;
    if (config_validate(cfg, err, errlen) != 0)
        goto out;
    rc = 0;
out:
    free(cfg);
    free(text);
    return rc;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's). */
static long long days_from_civil(long long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

void vj_time_format(long long t, char buf[VJ_TIME_LEN])
{
    long long days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
    long long secs = t - days * 86400;
    /* civil_from_days */
    long long z = days + 719468;
    long long era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long y = (long long)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    unsigned d = doy - (153 * mp + 2) / 5 + 1;
    unsigned m = mp < 10 ? mp + 3 : mp - 9;
    y += m <= 2;
    if (y < 0 || y > 9999)
        y = y < 0 ? 0 : 9999;
    unsigned hs = (unsigned)(secs / 3600) % 24u, ms = (unsigned)(secs / 60) % 60u,
             ss = (unsigned)secs % 60u;
    snprintf(buf, VJ_TIME_LEN, "%04u-%02u-%02uT%02u:%02u:%02uZ", (unsigned)y % 10000u, m % 100u,
             d % 100u, hs, ms, ss);
}

int vj_time_parse(const char *s, long long *out)
{
    int y, mo, d, h, mi, sec, n = 0;
    if (s == NULL || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
        n != 19)
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    const char *p = s + n;
    if (*p == '.' || *p == ',') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    long long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, k = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5)
            return -1;
        off = (oh * 3600LL + om * 60LL) * (*p == '+' ? 1 : -1);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    *out = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600LL + mi * 60LL + sec - off;
    return 0;
}
