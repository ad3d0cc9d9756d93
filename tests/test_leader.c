/* tests/test_leader.c - operator/leader.c: leader election on a Lease.
 * Proves that losing the race to create the Lease (the create answered
 * 409 AlreadyExists, another replica created it between our GET and our
 * POST) leaves this replica NOT leading, deterministically: a scripted
 * plain-HTTP API server plays the race (GET 404, POST 409, then the Lease
 * held by the winner). Also, against the test API server, two electors on
 * one Lease: the first creates and leads, the second follows, and takes over
 * only once the Lease went unrenewed for its duration on its own clock. */
#include "kube_fixture.h"
#include "leader.h"

#include <arpa/inet.h>
#include <strings.h>

TestSuite(leader, .timeout = 60);

/* ============================================ a scripted API server (HTTP) */

#define LEASE_PATH "/apis/coordination.k8s.io/v1/namespaces/default/leases/lock"
#define LEASES_PATH "/apis/coordination.k8s.io/v1/namespaces/default/leases"

/* Plays the lost race: the first GET of the Lease answers 404, every POST
 * 409 AlreadyExists, later GETs the Lease as the winner ("other") wrote it;
 * anything else answers 500. It records each request line. */
typedef struct {
    int sock;
    int gets;
    int n;
    char reqs[16][300]; /* "METHOD PATH" */
    int writes;         /* PUTs seen: a loser must not renew */
} race_server;

static const char STATUS_404[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"leases.coordination.k8s.io \\\"lock\\\" not found\",\"reason\":\"NotFound\","
    "\"details\":{\"name\":\"lock\",\"group\":\"coordination.k8s.io\",\"kind\":\"leases\"},"
    "\"code\":404}";
static const char STATUS_409[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"leases.coordination.k8s.io \\\"lock\\\" already exists\","
    "\"reason\":\"AlreadyExists\","
    "\"details\":{\"name\":\"lock\",\"group\":\"coordination.k8s.io\",\"kind\":\"leases\"},"
    "\"code\":409}";
static const char LEASE_OTHER[] =
    "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":"
    "\"lock\",\"namespace\":\"default\",\"resourceVersion\":\"7\"},\"spec\":{\"holderIdentity\":"
    "\"other\",\"leaseDurationSeconds\":15,\"acquireTime\":\"2024-01-01T00:00:00.000000Z\","
    "\"renewTime\":\"2024-01-01T00:00:00.000000Z\",\"leaseTransitions\":0}}";
static const char STATUS_500[] =
    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
    "\"message\":\"unexpected request\",\"reason\":\"InternalError\",\"code\":500}";

/* Reads one request (headers, then Content-Length bytes of body) into buf;
 * returns the header length or -1. */
static int read_request(int c, char *buf, size_t cap)
{
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        if (have + 1 >= cap) return -1;
        ssize_t r = read(c, buf + have, cap - 1 - have);
        if (r <= 0) return -1;
        have += (size_t)r;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    size_t head = (size_t)(end + 4 - buf);
    size_t body = 0;
    for (char *p = buf; p < end; p = strstr(p, "\r\n") + 2) {
        if (strncasecmp(p, "Content-Length:", 15) == 0) body = strtoul(p + 15, NULL, 10);
        if (strncasecmp(p, "Expect: 100-continue", 20) == 0 && have == head) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            if (write(c, cont, sizeof cont - 1) < 0) return -1;
        }
    }
    while (have < head + body) {
        if (have + 1 >= cap) return -1;
        ssize_t r = read(c, buf + have, cap - 1 - have);
        if (r <= 0) return -1;
        have += (size_t)r;
    }
    return (int)head;
}

static void *serve_race(void *arg)
{
    race_server *rs = arg;
    static char req[65536];
    for (;;) {
        int c = accept(rs->sock, NULL, NULL);
        if (c < 0) return NULL; /* the test shut the socket down */
        if (read_request(c, req, sizeof req) > 0) {
            char method[16] = "", path[256] = "";
            sscanf(req, "%15s %255s", method, path);
            int n = __atomic_load_n(&rs->n, __ATOMIC_SEQ_CST);
            if (n < 16) snprintf(rs->reqs[n], sizeof rs->reqs[0], "%s %s", method, path);
            int code = 500;
            const char *reason = "Internal Server Error", *body = STATUS_500;
            if (strcmp(method, "GET") == 0 && strcmp(path, LEASE_PATH) == 0) {
                if (rs->gets++ == 0)
                    code = 404, reason = "Not Found", body = STATUS_404;
                else
                    code = 200, reason = "OK", body = LEASE_OTHER;
            } else if (strcmp(method, "POST") == 0 && strcmp(path, LEASES_PATH) == 0) {
                code = 409, reason = "Conflict", body = STATUS_409;
            } else if (strcmp(method, "PUT") == 0) {
                rs->writes++;
            }
            char resp[2048];
            int len = snprintf(resp, sizeof resp,
                               "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                               "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                               code, reason, strlen(body), body);
            __atomic_store_n(&rs->n, n + 1, __ATOMIC_SEQ_CST);
            if (write(c, resp, (size_t)len) < 0) { /* the client went away */ }
        }
        close(c);
    }
}

static kube_client *client_at_http(int port)
{
    char text[512], err[ERRLEN];
    snprintf(text, sizeof text,
             "clusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:%d\n"
             "contexts:\n- name: x\n  context:\n    cluster: c\n    namespace: default\n"
             "current-context: x\n", port);
    kube_config *cfg = NULL;
    kube_client *c = NULL;
    kube_status st;
    cr_assert_eq(kube_config_load_kubeconfig_string(text, strlen(text), "mem", &cfg, err,
                                                    sizeof err), 0, "%s", err);
    cr_assert_eq(kube_client_new(cfg, &c, &st), KUBE_OK);
    return c;
}

Test(leader, create_answered_409_already_exists_means_another_replica_won_so_we_do_not_lead)
{
    int port;
    race_server rs = {.sock = loopback_listener(&port)};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, serve_race, &rs), 0);
    kube_client *c = client_at_http(port);
    leader_opts o = {.ns = "default", .name = "lock", .identity = "me",
                     .lease_duration = 15, .renew_deadline = 10};
    leader_elector *le = NULL;
    cr_assert_eq(leader_new(c, &o, &le), 0);
    kube_status st;

    /* round 1: GET 404, POST 409 (the other replica created it in between) */
    int led = leader_try(le, 100.0, &st);
    int leads = leader_is_leader(le, 100.0);
    double until = leader_valid_until(le);
    /* round 2: GET shows the winner holding it */
    int led2 = leader_try(le, 102.0, &st);
    int leads2 = leader_is_leader(le, 102.0);
    char holder[64];
    snprintf(holder, sizeof holder, "%s", leader_observed_holder(le));

    leader_free(le);
    kube_client_free(c);
    shutdown(rs.sock, SHUT_RDWR);
    close(rs.sock);
    pthread_join(t, NULL);

    int n = __atomic_load_n(&rs.n, __ATOMIC_SEQ_CST);
    cr_assert_geq(n, 2, "the elector made %d requests", n);
    cr_assert_str_eq(rs.reqs[0], "GET " LEASE_PATH);
    cr_assert_str_eq(rs.reqs[1], "POST " LEASES_PATH);
    cr_assert_eq(led, 0, "leader_try said we lead after the create answered 409 AlreadyExists");
    cr_assert_not(leads, "leader_is_leader is true after the create answered 409 AlreadyExists");
    cr_assert_lt(until, 100.0, "the lost create gave a validity until %.1f", until);
    cr_assert_eq(led2, 0, "round 2: the winner holds the Lease");
    cr_assert_not(leads2);
    cr_assert_str_eq(holder, "other");
    cr_assert_eq(rs.writes, 0, "a replica that lost must not write the Lease (%d PUTs)",
                 rs.writes);
}

/* ================================ two electors against the test API server */

Test(leader, two_electors_one_leads_the_other_follows_and_takes_over_only_after_expiry)
{
    char dir[256], state[300];
    int port;
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    pid_t pid = server_start(state, 0, NULL, &port);
    cr_assert(pid > 0, "the test API server did not start (see %s/apiserver.log)", state);
    kube_client *ca = client_for(state), *cb = client_for(state);
    leader_opts oa = {.ns = "default", .name = "lock", .identity = "a",
                      .lease_duration = 15, .renew_deadline = 10};
    leader_opts ob = oa;
    ob.identity = "b";
    leader_elector *a = NULL, *b = NULL;
    cr_assert_eq(leader_new(ca, &oa, &a), 0);
    cr_assert_eq(leader_new(cb, &ob, &b), 0);
    kube_status st;

    /* each elector has its own clock: a's at 1000, b's at 5000 */
    int a1 = leader_try(a, 1000, &st);
    char a1_msg[512];
    snprintf(a1_msg, sizeof a1_msg, "%s", st.message);
    int b1 = leader_try(b, 5000, &st);
    char b_saw[64];
    snprintf(b_saw, sizeof b_saw, "%s", leader_observed_holder(b));
    int a2 = leader_try(a, 1002, &st);  /* a renews */
    int b2 = leader_try(b, 5002, &st);  /* renewTime changed: b's timer restarts at 5002 */
    int b3 = leader_try(b, 5016, &st);  /* 14 s after b saw the renewal: not yet expired */
    int a_still = leader_is_leader(a, 1011);
    int b4 = leader_try(b, 5018, &st);  /* 16 s unrenewed on b's clock: b takes over */
    char b4_msg[512];
    snprintf(b4_msg, sizeof b4_msg, "%s", st.message);
    int a3 = leader_try(a, 1020, &st);  /* a sees b holding it */
    char a_saw[64];
    snprintf(a_saw, sizeof a_saw, "%s", leader_observed_holder(a));

    leader_free(a);
    leader_free(b);
    kube_client_free(ca);
    kube_client_free(cb);
    server_stop(pid, SIGTERM);
    rm_rf(dir);

    cr_assert_eq(a1, 1, "a created the Lease and leads: %s", a1_msg);
    cr_assert_eq(b1, 0, "b found a's Lease and follows");
    cr_assert_str_eq(b_saw, "a");
    cr_assert_eq(a2, 1, "a renews");
    cr_assert_eq(b2, 0);
    cr_assert_eq(b3, 0, "b must not take over before leaseDuration unrenewed on its own clock");
    cr_assert_eq(a_still, 1, "a's last renewal at 1002 lets it act until 1012");
    cr_assert_eq(b4, 1, "b takes over the expired Lease: %s", b4_msg);
    cr_assert_eq(a3, 0, "a no longer leads");
    cr_assert_str_eq(a_saw, "b");
}

Test(leader, a_released_lease_is_taken_over_at_once_and_counts_one_transition)
{
    char dir[256], state[300];
    int port;
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    pid_t pid = server_start(state, 0, NULL, &port);
    cr_assert(pid > 0, "the test API server did not start (see %s/apiserver.log)", state);
    kube_client *ca = client_for(state), *cb = client_for(state);
    leader_opts oa = {.ns = "default", .name = "lock", .identity = "a",
                      .lease_duration = 15, .renew_deadline = 10};
    leader_opts ob = oa;
    ob.identity = "b";
    leader_elector *a = NULL, *b = NULL;
    cr_assert_eq(leader_new(ca, &oa, &a), 0);
    cr_assert_eq(leader_new(cb, &ob, &b), 0);
    kube_status st;
    int a1 = leader_try(a, 1000, &st);
    int b1 = leader_try(b, 5000, &st); /* b sees a holding it */
    int rel = leader_release(a, &st);  /* a shuts down cleanly */
    int a_after = leader_is_leader(a, 1001);
    int b2 = leader_try(b, 5001, &st); /* 1 s later, far inside leaseDuration */
    cJSON *lease = NULL;
    int got = kube_get(ca, LEASE_PATH, &lease, &st);
    const cJSON *spec = cJSON_GetObjectItem(lease, "spec");
    const cJSON *holder = cJSON_GetObjectItem(spec, "holderIdentity");
    const cJSON *tr = cJSON_GetObjectItem(spec, "leaseTransitions");
    char holder_s[64] = "";
    if (cJSON_IsString(holder)) snprintf(holder_s, sizeof holder_s, "%s", holder->valuestring);
    double transitions = cJSON_IsNumber(tr) ? tr->valuedouble : -1;
    cJSON_Delete(lease);
    leader_free(a);
    leader_free(b);
    kube_client_free(ca);
    kube_client_free(cb);
    server_stop(pid, SIGTERM);
    rm_rf(dir);

    cr_assert_eq(a1, 1);
    cr_assert_eq(b1, 0);
    cr_assert_eq(rel, KUBE_OK);
    cr_assert_eq(a_after, 0, "a no longer leads once it released");
    cr_assert_eq(b2, 1, "b takes a released Lease without waiting for it to expire");
    cr_assert_eq(got, KUBE_OK);
    cr_assert_str_eq(holder_s, "b");
    cr_assert_eq(transitions, 1, "a -> b is one transition (leaseTransitions %g)", transitions);
}
