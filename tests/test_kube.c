/* tests/test_kube.c - lib/kube.c: paths and queries, every request kind,
 * pagination, status codes and messages, auth errors, the
 * in-cluster configuration end to end against the test API server
 * (tests/cluster/apiserver), and which errors are permanent. */
#define KUBE_FIXTURE_SERVER
#include "kube_fixture.h"

/* ================================================== unit: paths and check */

Test(kube_paths, names_namespaces_and_selectors_are_escaped)
{
    char b[512];
    cr_assert_eq(kube_path(b, sizeof b, "/api/v1", "default", "pods", "a b/c", "status"), 0);
    cr_assert_str_eq(b, "/api/v1/namespaces/default/pods/a%20b%2Fc/status");
    cr_assert_eq(kube_path(b, sizeof b, "/apis/vitjob.dev/v1alpha1", NULL, "vitjobs", NULL, NULL),
                 0);
    cr_assert_str_eq(b, "/apis/vitjob.dev/v1alpha1/vitjobs");
    cr_assert_eq(kube_query_add(b, sizeof b, "labelSelector", "app=x,tier in (a,b)"), 0);
    cr_assert_eq(kube_query_add(b, sizeof b, "limit", "2"), 0);
    cr_assert_str_eq(b, "/apis/vitjob.dev/v1alpha1/vitjobs?labelSelector=app%3Dx%2Ctier%20in%20"
                        "%28a%2Cb%29&limit=2");
    char small[16];
    cr_assert_eq(kube_path(small, sizeof small, "/api/v1", "default", "pods", NULL, NULL), -1);
}

Test(kube_paths, a_path_that_exactly_fills_the_buffer_fits_and_one_byte_less_is_refused_in_bounds)
{
    const char *want = "/api/v1/namespaces/default/pods/a%20b";
    const size_t len = strlen(want);
    char b[128];
    memset(b, '#', sizeof b);
    cr_assert_eq(kube_path(b, len + 1, "/api/v1", "default", "pods", "a b", NULL), 0);
    cr_assert_str_eq(b, want);
    cr_assert_eq(b[len + 1], '#', "nothing written past the buffer");
    memset(b, '#', sizeof b);
    cr_assert_eq(kube_path(b, len, "/api/v1", "default", "pods", "a b", NULL), -1,
                 "no room for the NUL");
    cr_assert_eq(b[len], '#', "nothing written past the buffer");
    const size_t plain = strlen("/api/v1/namespaces/default/pods/ab"); /* ends plain */
    memset(b, '#', sizeof b);
    cr_assert_eq(kube_path(b, plain, "/api/v1", "default", "pods", "ab", NULL), -1);
    cr_assert_eq(b[plain], '#', "nothing written past the buffer");
    cr_assert_eq(kube_path(b, plain + 1, "/api/v1", "default", "pods", "ab", NULL), 0);
    cr_assert_str_eq(b, "/api/v1/namespaces/default/pods/ab");
}

/* ================================================ against the API server */

TestSuite(kube_api, .timeout = 30);

Test(kube_api, create_get_update_patch_delete_with_status_codes)
{
    kube_client *c = shared_client();
    kube_status st;
    cJSON *got = NULL, *o = configmap("crud-1", "t", "crud", "v1");
    char path[256];
    cr_assert_eq(kube_path(path, sizeof path, "/api/v1", kube_client_namespace(c), "configmaps",
                           "crud-1", NULL), 0);

    cr_assert_eq(kube_get(c, path, &got, &st), KUBE_ERR_HTTP);
    cr_assert_eq(st.http_code, 404);
    cr_assert_str_eq(st.reason, "NotFound");
    cr_assert(kube_is_not_found(&st));

    cr_assert_eq(kube_create(c, NS "/configmaps", o, &got, &st), KUBE_OK, "%s", st.message);
    cr_assert_eq(st.http_code, 201);
    char rv1[64];
    snprintf(rv1, sizeof rv1, "%s", str_at(got, "metadata", "resourceVersion"));
    cJSON_Delete(got);

    cr_assert_eq(kube_create(c, NS "/configmaps", o, NULL, &st), KUBE_ERR_HTTP);
    cr_assert_eq(st.http_code, 409);
    cr_assert_str_eq(st.reason, "AlreadyExists");

    cr_assert_eq(kube_get(c, path, &got, &st), KUBE_OK, "%s", st.message);
    cr_assert_str_eq(str_at(got, "data", "k"), "v1");
    cJSON_Delete(got);

    /* merge patch */
    cJSON *mp = cJSON_Parse("{\"data\":{\"k\":\"v2\",\"extra\":\"e\"}}");
    cr_assert_eq(kube_merge_patch(c, path, mp, &got, &st), KUBE_OK, "%s", st.message);
    cr_assert_str_eq(str_at(got, "data", "k"), "v2");
    cr_assert_str_eq(str_at(got, "data", "extra"), "e");
    cJSON_Delete(got);
    cJSON_Delete(mp);

    /* PUT with the stale resourceVersion: 409 Conflict */
    cJSON_AddStringToObject(cJSON_GetObjectItem(o, "metadata"), "resourceVersion", rv1);
    cr_assert_eq(kube_update(c, path, o, NULL, &st), KUBE_ERR_HTTP);
    cr_assert_eq(st.http_code, 409);
    cr_assert_str_eq(st.reason, "Conflict");
    cr_assert(strstr(st.message, "PUT"), "message says what failed: %s", st.message);
    /* ... and with the current one: 200 */
    cr_assert_eq(kube_get(c, path, &got, &st), KUBE_OK);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(o, "metadata"), "resourceVersion",
                              cJSON_CreateString(str_at(got, "metadata", "resourceVersion")));
    cJSON_Delete(got);
    cr_assert_eq(kube_update(c, path, o, &got, &st), KUBE_OK, "%s", st.message);
    cr_assert_eq(st.http_code, 200);
    cr_assert_str_eq(str_at(got, "data", "k"), "v1");
    cJSON_Delete(got);

    /* JSON patch, then a failing test op: 422 */
    cJSON *jp = cJSON_Parse("[{\"op\":\"replace\",\"path\":\"/data/k\",\"value\":\"v3\"},"
                            "{\"op\":\"add\",\"path\":\"/data/n\",\"value\":\"1\"}]");
    cr_assert_eq(kube_json_patch(c, path, jp, &got, &st), KUBE_OK, "%s", st.message);
    cr_assert_str_eq(str_at(got, "data", "k"), "v3");
    cr_assert_str_eq(str_at(got, "data", "n"), "1");
    cJSON_Delete(got);
    cJSON_Delete(jp);
    jp = cJSON_Parse("[{\"op\":\"test\",\"path\":\"/data/k\",\"value\":\"wrong\"}]");
    cr_assert_eq(kube_json_patch(c, path, jp, NULL, &st), KUBE_ERR_HTTP);
    cr_assert_eq(st.http_code, 422, "got %d %s", st.http_code, st.message);
    cJSON_Delete(jp);

    cr_assert_eq(kube_delete(c, path, 0, "Background", NULL, &st), KUBE_OK, "%s", st.message);
    cr_assert_eq(kube_get(c, path, NULL, &st), KUBE_ERR_HTTP);
    cr_assert_eq(st.http_code, 404);
    cr_assert_eq(kube_delete(c, path, -1, NULL, NULL, &st), KUBE_ERR_HTTP);
    cr_assert(kube_is_not_found(&st), "deleting twice is NotFound");
    cJSON_Delete(o);
    kube_client_free(c);
}

Test(kube_api, list_with_label_selector_and_limit_merges_every_page)
{
    kube_client *c = shared_client();
    kube_status st;
    char name[32];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "page-%d", i);
        create_cm(c, name, "pg", "yes");
    }
    create_cm(c, "page-other", "pg", "no");
    cJSON *items = NULL;
    char rv[64] = "";
    kube_list_opts lo = {.label_selector = "pg=yes", .limit = 2};
    cr_assert_eq(kube_list(c, NS "/configmaps", &lo, &items, rv, sizeof rv, &st), KUBE_OK, "%s",
                 st.message);
    cr_assert_eq(cJSON_GetArraySize(items), 5, "3 pages of 2 merged, the other label left out");
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "page-%d", i);
        cr_assert_str_eq(str_at(cJSON_GetArrayItem(items, i), "metadata", "name"), name);
    }
    cr_assert(rv[0], "the list's resourceVersion is returned");
    cJSON_Delete(items);
    /* no limit: one page */
    lo.limit = 0;
    lo.label_selector = "pg in (yes,no)";
    cr_assert_eq(kube_list(c, NS "/configmaps", &lo, &items, NULL, 0, &st), KUBE_OK);
    cr_assert_eq(cJSON_GetArraySize(items), 6);
    cJSON_Delete(items);
    kube_client_free(c);
}

/* kube_list_each: the GETs sent so far, and for each object handed out how
 * many had been sent when it arrived. */
static int list_gets;
static void count_gets(void *user, const char *method, int http_code)
{
    (void)user;
    (void)http_code;
    if (strcmp(method, "GET") == 0) __atomic_add_fetch(&list_gets, 1, __ATOMIC_SEQ_CST);
}

typedef struct {
    int n, stop_after;
    int gets_at[8];
    char names[8][32];
} each_seen;

static int take(void *user, cJSON *item)
{
    each_seen *s = user;
    if (!item) return 0;
    if (s->n < 8) {
        s->gets_at[s->n] = __atomic_load_n(&list_gets, __ATOMIC_SEQ_CST);
        snprintf(s->names[s->n], sizeof s->names[0], "%s", str_at(item, "metadata", "name"));
    }
    s->n++;
    cJSON_Delete(item); /* ownership is the handler's */
    return s->stop_after && s->n >= s->stop_after;
}

Test(kube_api, list_each_hands_out_every_object_page_by_page_before_the_next_page_is_fetched)
{
    kube_client *c = shared_client();
    kube_status st;
    char name[32], rv[64] = "";
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "each-%d", i);
        create_cm(c, name, "each", "yes");
    }
    kube_set_observer(count_gets, NULL);
    list_gets = 0;
    each_seen s = {0};
    kube_list_opts lo = {.label_selector = "each=yes", .limit = 2};
    cr_assert_eq(kube_list_each(c, NS "/configmaps", &lo, take, &s, rv, sizeof rv, &st), KUBE_OK,
                 "%s", st.message);
    kube_set_observer(NULL, NULL);
    cr_assert_eq(s.n, 5);
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "each-%d", i);
        cr_assert_str_eq(s.names[i], name);
        /* pages of 2: objects 0-1 after the first GET, 2-3 after the second, 4 after the third */
        cr_assert_eq(s.gets_at[i], i / 2 + 1, "object %d arrived after %d GETs", i, s.gets_at[i]);
    }
    cr_assert(rv[0], "the list's resourceVersion is returned");
    /* a handler's refusal stops the list */
    each_seen stop = {.stop_after = 1};
    cr_assert_eq(kube_list_each(c, NS "/configmaps", &lo, take, &stop, rv, sizeof rv, &st),
                 KUBE_ERR_INVALID);
    cr_assert_eq(stop.n, 1, "the rest of the page is not handed out after a refusal");
    kube_client_free(c);
}

Test(kube_api, unprocessable_object_gets_422_with_the_servers_message)
{
    kube_client *c = shared_client();
    kube_status st;
    cJSON *o = cJSON_Parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{}}");
    cr_assert_eq(kube_create(c, NS "/configmaps", o, NULL, &st), KUBE_ERR_HTTP);
    cr_assert_eq(st.http_code, 422, "%d %s", st.http_code, st.message);
    cr_assert_str_eq(st.reason, "Invalid");
    cr_assert(strlen(st.message) > 20, "%s", st.message);
    cJSON_Delete(o);
    kube_client_free(c);
}

Test(kube_api, wrong_token_gets_401_with_a_clear_message_and_no_log_line_has_the_token)
{
    const char *state = shared_state();
    char path[1024], err[ERRLEN], dir[256], logpath[512];
    snprintf(path, sizeof path, "%s/kubeconfig", state);
    char *text = read_text(path), *real = server_token(state);
    char *at = strstr(text, real);
    cr_assert(at);
    const char *bad = "wrong-token-5f3a9c";
    size_t tl = strlen(real);
    char *text2 = malloc(strlen(text) + 64);
    snprintf(text2, strlen(text) + 64, "%.*s%s%s", (int)(at - text), text, bad, at + tl);
    make_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bad-kubeconfig", dir);
    write_text(path, text2);

    /* Everything the client logs at debug level goes to a file we read back. */
    snprintf(logpath, sizeof logpath, "%s/log", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    log_level_current = LOG_LEVEL_DEBUG;

    kube_config *cfg = NULL;
    kube_client *c = NULL;
    kube_status st;
    cr_assert_eq(kube_config_load_kubeconfig(path, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kube_client_new(cfg, &c, &st), KUBE_OK);
    int rc = kube_get(c, NS "/configmaps", NULL, &st);
    char rv[64] = "";
    recorder r = {.stop_after = 1};
    int wrc = kube_watch_run(c, NS "/configmaps", NULL, rv, sizeof rv, record, &r, NULL, &st);
    kube_client_free(c);
    /* and a successful request with the real token */
    kube_client *good = client_for(state);
    kube_status st2;
    int grc = kube_get(good, NS "/configmaps", NULL, &st2);
    kube_client_free(good);
    LOG_INFO("test", "msg=\"end of captured log\"");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);

    cr_assert_eq(rc, KUBE_ERR_HTTP);
    cr_assert_eq(wrc, KUBE_ERR_HTTP, "a watch does not retry a 401");
    cr_assert_eq(st.http_code, 401);
    cr_assert_str_eq(st.reason, "Unauthorized");
    cr_assert(strstr(st.message, "401") && strstr(st.message, path),
              "says 401 and where the credentials came from: %s", st.message);
    cr_assert(!strstr(st.message, bad));
    cr_assert_eq(grc, KUBE_OK, "%s", st2.message);
    char *log = read_text(logpath);
    cr_assert(strstr(log, "status=401"), "the request was logged: %s", log);
    cr_assert(strstr(log, "status=200"), "%s", log);
    cr_assert(!strstr(log, bad), "log has the wrong token: %s", log);
    cr_assert(!strstr(log, real), "log has the real token");
    free(log);
    free(text);
    free(text2);
    free(real);
    rm_rf(dir);
}

Test(kube_api, in_cluster_config_reaches_the_server_and_follows_token_rotation)
{
    const char *state = shared_state();
    char dir[256], p[600], err[ERRLEN], portbuf[32];
    char *real = server_token(state);
    make_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/pki/ca.crt", state);
    char *ca = read_text(p);
    cr_assert(ca);
    snprintf(p, sizeof p, "%s/ca.crt", dir);
    write_text(p, ca);
    snprintf(p, sizeof p, "%s/namespace", dir);
    write_text(p, "default");
    snprintf(p, sizeof p, "%s/token", dir);
    write_text(p, real);
    snprintf(p, sizeof p, "%s/port", state);
    char *port = read_text(p);
    snprintf(portbuf, sizeof portbuf, "%d", atoi(port));
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", portbuf, 1);

    kube_config *cfg = NULL;
    kube_client *c = NULL;
    kube_status st;
    cr_assert_eq(kube_config_in_cluster(dir, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kube_client_new(cfg, &c, &st), KUBE_OK);
    cr_assert_eq(kube_get(c, NS "/configmaps", NULL, &st), KUBE_OK, "%s", st.message);

    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s/token.tmp", dir);
    snprintf(p, sizeof p, "%s/token", dir);
    write_text(tmp, "revoked-token");
    rename(tmp, p);
    cr_assert_eq(kube_get(c, NS "/configmaps", NULL, &st), KUBE_ERR_HTTP, "new token is used");
    cr_assert_eq(st.http_code, 401);
    write_text(tmp, real);
    rename(tmp, p);
    cr_assert_eq(kube_get(c, NS "/configmaps", NULL, &st), KUBE_OK, "%s", st.message);
    kube_client_free(c);
    free(ca);
    free(port);
    free(real);
    rm_rf(dir);
}

/* A client for scheme://127.0.0.1:port without credentials; caller frees. */
static kube_client *client_at(const char *scheme, int port)
{
    char text[512], err[ERRLEN];
    snprintf(text, sizeof text,
             "clusters:\n- name: c\n  cluster:\n    server: %s://127.0.0.1:%d\n"
             "contexts:\n- name: x\n  context:\n    cluster: c\n"
             "current-context: x\n", scheme, port);
    kube_config *cfg = NULL;
    kube_client *c = NULL;
    kube_status st;
    cr_assert_eq(kube_config_load_kubeconfig_string(text, strlen(text), "mem", &cfg, err,
                                                    sizeof err), 0, "%s", err);
    cr_assert_eq(kube_client_new(cfg, &c, &st), KUBE_OK);
    return c;
}

Test(kube_api, request_to_a_server_that_never_answers_times_out)
{
    /* A listening socket nobody accepts on: TCP connects, TLS never starts. */
    int port, s = loopback_listener(&port);
    kube_client *c = client_at("https", port);
    kube_status st;
    kube_client_set_timeout(c, 300);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = kube_get(c, NS "/pods", NULL, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_eq(rc, KUBE_ERR_TRANSPORT);
    cr_assert_eq(st.http_code, 0);
    cr_assert_str_eq(st.reason, "Transport");
    cr_assert(strstr(st.message, "curl error 28"), "a timeout: %s", st.message);
    /* not the 10 s connect timeout nor the 30 s default: the 300 ms given
     * (8 s tells them apart however loaded the machine) */
    cr_assert_lt(secs, 8.0);
    kube_client_free(c);
    close(s);
}

/* A plain-HTTP server thread that answers every request with one watch
 * ERROR event (code 500) and closes; it counts the connections. */
typedef struct {
    int sock;
    int connections;
} error_server;

static void *serve_errors(void *arg)
{
    error_server *es = arg;
    static const char body[] =
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":500,"
        "\"reason\":\"InternalError\",\"message\":\"etcd hiccup\"}}\n";
    char resp[512], req[4096];
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     sizeof body - 1, body);
    for (;;) {
        int c = accept(es->sock, NULL, NULL);
        if (c < 0) return NULL; /* the test closed the socket */
        if (read(c, req, sizeof req) > 0) {
            __atomic_add_fetch(&es->connections, 1, __ATOMIC_SEQ_CST);
            if (write(c, resp, (size_t)n) < 0) { /* the client went away */ }
        }
        close(c);
    }
}

static volatile sig_atomic_t stop_after_retries;

static int no_event(const char *type, const cJSON *obj, void *user)
{
    (void)type, (void)obj, (void)user;
    return 0;
}

static void *stop_when_retried(void *arg)
{
    error_server *es = arg;
    for (int i = 0; i < 1500 && __atomic_load_n(&es->connections, __ATOMIC_SEQ_CST) < 3; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    stop_after_retries = 1;
    return NULL;
}

Test(kube_api, watch_error_event_is_retried_with_backoff_not_treated_as_a_stop, .timeout = 30)
{
    int port;
    error_server es = {.sock = loopback_listener(&port)};
    pthread_t t;
    pthread_create(&t, NULL, serve_errors, &es);
    kube_client *c = client_at("http", port);
    kube_status st;
    /* stop from another thread once the client has come back three times */
    stop_after_retries = 0;
    kube_watch_opts o = {.backoff_initial_ms = 20, .backoff_max_ms = 50};
    char rv[64] = "5";
    pthread_t stopper;
    pthread_create(&stopper, NULL, stop_when_retried, &es);
    int rc = kube_watch_run(c, NS "/pods", &o, rv, sizeof rv, no_event, NULL,
                            &stop_after_retries, &st);
    pthread_join(stopper, NULL);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "rc=%d reason=%s msg=%s", rc, st.reason, st.message);
    cr_assert_geq(__atomic_load_n(&es.connections, __ATOMIC_SEQ_CST), 3,
                  "the watch gave up after an ERROR event instead of reconnecting");
    kube_client_free(c);
    shutdown(es.sock, SHUT_RDWR);
    close(es.sock);
    pthread_join(t, NULL);
}
Test(kube, permanent_errors_are_the_4xx_answers_that_retrying_cannot_fix)
{
    static const struct { int code; int permanent; } cases[] = {
        {400, 1}, {403, 1}, {405, 1}, {415, 1}, {422, 1},  /* invalid object, admission, RBAC */
        {401, 0}, {404, 0}, {408, 0}, {409, 0}, {429, 0},  /* token, missing, timeout, conflict, throttle */
        {500, 0}, {503, 0}, {0, 0}, {200, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kube_status st = {.http_code = cases[i].code};
        cr_assert_eq(kube_is_permanent(&st), cases[i].permanent, "HTTP %d", cases[i].code);
    }
    cr_assert_not(kube_is_permanent(NULL));
}
