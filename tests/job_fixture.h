/* tests/job_fixture.h - a ViTJob on the shared test API server and a
 * worker's identity for it, for the tests of what the worker writes into a
 * job's status (tests/test_report.c: status.progress; tests/test_lostpeer.c:
 * status.lostPeer): the project's CRD, objects to create, a job and its
 * read-back, a ServiceAccount token that may patch only that job's status,
 * a pod's view of it (service-account directory and environment), the
 * operator's part of its status, and a count of the PATCH requests made. Include after kube_fixture.h (with
 * KUBE_FIXTURE_SERVER). Test code only. */
#ifndef VITJOB_TESTS_JOB_FIXTURE_H
#define VITJOB_TESTS_JOB_FIXTURE_H

#include <stdatomic.h>

#include "contract.h"
#include "yaml_json.h"

#define VJ_PATH "/apis/" VJ_API_VERSION "/namespaces/default/" VJ_RESOURCE

/* PATCH requests made by any kube client of this process (the reporter's). */
static atomic_int patches;
static void count_patches(void *user, const char *method, int code)
{
    (void)user;
    (void)code;
    if (strcmp(method, "PATCH") == 0) atomic_fetch_add(&patches, 1);
}

/* The project's CRD on the shared server (once; 409 from a parallel test is
 * fine), served once it lists. */
static void install_crd(kube_client *c)
{
    buf text = {0};
    char err[ERRLEN];
    cr_assert_eq(file_read(&text, "manifests/00-crd.yaml", err, sizeof err), 0, "%s", err);
    cJSON *crd = NULL;
    cr_assert_eq(yaml_json_parse(text.data, text.len, NULL, &crd, err, sizeof err), 0, "%s", err);
    buf_free(&text);
    kube_status st;
    int rc = kube_create(c, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, NULL,
                         &st);
    cr_assert(rc == KUBE_OK || st.http_code == 409, "CRD: %s", st.message);
    cJSON_Delete(crd);
    for (int i = 0; i < 600; i++) { /* 30 s: a cap, not a delay */
        if (kube_get(c, VJ_PATH, NULL, &st) == KUBE_OK) return;
        sleep_ms(50);
    }
    cr_assert_fail("vitjobs never served: %s", st.message);
}

static void create_job(kube_client *c, const char *name, int replicas)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"apiVersion\":\"" VJ_API_VERSION "\",\"kind\":\"" VJ_KIND "\","
             "\"metadata\":{\"name\":\"%s\"},\"spec\":{\"replicas\":%d,\"image\":\"x:1\","
             "\"model\":{\"preset\":\"fmnist_tiny\"},\"training\":{\"steps\":10,"
             "\"globalBatchSize\":128,\"microBatchSize\":64,\"optimizer\":{\"warmupSteps\":1}}}}",
             name, replicas);
    cJSON *o = cJSON_Parse(text);
    kube_status st;
    cr_assert_eq(kube_create(c, VJ_PATH, o, NULL, &st), KUBE_OK, "%s", st.message);
    cJSON_Delete(o);
}

static void create(kube_client *c, const char *path, const char *json)
{
    cJSON *o = cJSON_Parse(json);
    cr_assert(o, "bad JSON: %s", json);
    kube_status st;
    cr_assert_eq(kube_create(c, path, o, NULL, &st), KUBE_OK, "%s: %s", path, st.message);
    cJSON_Delete(o);
}

/* The job as the server has it (caller frees). */
static cJSON *get_job(kube_client *c, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, VJ_PATH "/%s", name);
    cJSON *o = NULL;
    kube_status st;
    cr_assert_eq(kube_get(c, path, &o, &st), KUBE_OK, "%s", st.message);
    return o;
}

/* A ServiceAccount `sa` and its token; with `job`, a Role and RoleBinding
 * that allow get and patch of that job's status alone (as the operator's
 * <job>-worker identity). Caller frees the token. */
static char *sa_token(kube_client *c, const char *sa, const char *job)
{
    char j[1024], path[256];
    snprintf(j, sizeof j, "{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":"
             "{\"name\":\"%s\"}}", sa);
    create(c, NS "/serviceaccounts", j);
    if (job) {
        snprintf(j, sizeof j, "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"Role\","
                 "\"metadata\":{\"name\":\"%s\"},\"rules\":[{\"apiGroups\":[\"" VJ_GROUP "\"],"
                 "\"resources\":[\"vitjobs/status\"],\"verbs\":[\"get\",\"patch\"],"
                 "\"resourceNames\":[\"%s\"]}]}", sa, job);
        create(c, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", j);
        snprintf(j, sizeof j, "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":"
                 "\"RoleBinding\",\"metadata\":{\"name\":\"%s\"},\"roleRef\":{\"apiGroup\":"
                 "\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":\"%s\"},\"subjects\":"
                 "[{\"kind\":\"ServiceAccount\",\"name\":\"%s\",\"namespace\":\"default\"}]}",
                 sa, sa, sa);
        create(c, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", j);
    }
    snprintf(path, sizeof path, NS "/serviceaccounts/%s/token", sa);
    cJSON *req = cJSON_Parse("{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":"
                             "\"TokenRequest\",\"spec\":{\"expirationSeconds\":3600}}"),
          *out = NULL;
    kube_status st;
    cr_assert_eq(kube_create(c, path, req, &out, &st), KUBE_OK, "%s", st.message);
    char *t = strdup(str_at(out, "status", "token"));
    cJSON_Delete(req);
    cJSON_Delete(out);
    return t;
}


/* A pod's view: a service-account directory (token, the server's CA,
 * namespace) in dir, KUBERNETES_SERVICE_HOST/PORT for port and the job's
 * VITJOB_NAME / VITJOB_NAMESPACE. */
static void pod_env(const char *dir, const char *token, int port, const char *job)
{
    char p[600], portbuf[32];
    snprintf(p, sizeof p, "%s/pki/ca.crt", shared_state());
    char *ca = read_text(p);
    cr_assert(ca);
    snprintf(p, sizeof p, "%s/ca.crt", dir);
    write_text(p, ca);
    free(ca);
    snprintf(p, sizeof p, "%s/namespace", dir);
    write_text(p, "default");
    snprintf(p, sizeof p, "%s/token", dir);
    write_text(p, token);
    snprintf(portbuf, sizeof portbuf, "%d", port);
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", portbuf, 1);
    setenv(VJ_ENV_NAME, job, 1);
    setenv(VJ_ENV_NAMESPACE, "default", 1);
}

/* The shared test API server's port. */
static int shared_port(void)
{
    char p[600];
    snprintf(p, sizeof p, "%s/port", shared_state());
    char *t = read_text(p);
    cr_assert(t);
    int port = atoi(t);
    free(t);
    return port;
}

/* Everything a test needs: the admin client, the CRD, the job, an identity
 * for it and the pod's environment. */
typedef struct {
    kube_client *admin;
    char dir[256];
    char *token;
} pod;

/* The job with `replicas`, its identity <job>-worker (allowed: may patch the
 * job's status), the pod's view of them, and the PATCH count from zero. */
static void pod_for(pod *pd, const char *job, int replicas, int allowed)
{
    char sa[128];
    snprintf(sa, sizeof sa, "%s-worker", job);
    pd->admin = shared_client();
    install_crd(pd->admin);
    create_job(pd->admin, job, replicas);
    pd->token = sa_token(pd->admin, sa, allowed ? job : NULL);
    make_tmpdir(pd->dir, sizeof pd->dir);
    pod_env(pd->dir, pd->token, shared_port(), job);
    kube_set_observer(count_patches, NULL);
    atomic_store(&patches, 0);
}

/* The operator's part of the job's status (`status`: a JSON object, merged
 * into status), which the worker must leave alone; PATCHes counted from zero
 * after it. */
static void operator_status(pod *pd, const char *job, const char *status)
{
    char path[256], text[512];
    snprintf(path, sizeof path, VJ_PATH "/%s/status", job);
    snprintf(text, sizeof text, "{\"status\":%s}", status);
    cJSON *o = cJSON_Parse(text);
    cr_assert(o, "bad JSON: %s", text);
    kube_status st;
    cr_assert_eq(kube_merge_patch(pd->admin, path, o, NULL, &st), KUBE_OK, "%s", st.message);
    cJSON_Delete(o);
    atomic_store(&patches, 0);
}

static void pod_free(pod *pd)
{
    kube_set_observer(NULL, NULL);
    kube_client_free(pd->admin);
    rm_rf(pd->dir);
    free(pd->token);
}

#endif
