/* tests/test_httpd.c - operator/httpd.c over real HTTP (libcurl, 127.0.0.1,
 * port 0): /metrics, /healthz heartbeat, /readyz callback, 404, 405, HEAD,
 * address parsing, bind errors, and that stop releases the socket. */
#include "httpd.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#include <criterion/criterion.h>
#include <curl/curl.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define ERRLEN 256

/* ---------------------------------------------------------------- helpers */

static void curl_setup(void)
{
    log_level_current = LOG_LEVEL_WARN; /* no "serving ..." line per test */
    curl_global_init(CURL_GLOBAL_DEFAULT);
}
static void curl_teardown(void) { curl_global_cleanup(); }

struct resp {
    long status;
    char body[8192];
    size_t len;
    char content_type[128];
    char allow[64];
    CURLcode rc;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct resp *r = arg;
    size_t len = size * n;
    size_t room = sizeof r->body - 1 - r->len;
    size_t take = len < room ? len : room;
    memcpy(r->body + r->len, p, take);
    r->len += take;
    r->body[r->len] = '\0';
    return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct resp *r = arg;
    size_t len = size * n;
    if (len > 6 && strncasecmp(p, "Allow:", 6) == 0)
        snprintf(r->allow, sizeof r->allow, "%.*s", (int)(len - 7 - 2), p + 7);
    return len;
}

/* `method` NULL is GET; "HEAD" uses CURLOPT_NOBODY; a body is sent with POST. */
static struct resp fetch(int port, const char *method, const char *path, const char *body)
{
    struct resp r = {0};
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    cr_assert_not_null(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (method && strcmp(method, "HEAD") == 0) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    r.rc = curl_easy_perform(c);
    if (r.rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        if (ct) snprintf(r.content_type, sizeof r.content_type, "%s", ct);
    }
    curl_easy_cleanup(c);
    return r;
}

static struct resp get(int port, const char *path)
{
    struct resp r = fetch(port, NULL, path, NULL);
    cr_assert_eq(r.rc, CURLE_OK, "GET %s: %s", path, curl_easy_strerror(r.rc));
    return r;
}

static httpd *start(const httpd_config *cfg)
{
    char err[ERRLEN] = "";
    httpd *h = NULL;
    cr_assert_eq(httpd_start(&h, cfg, err, ERRLEN), 0, "httpd_start: %s", err);
    cr_assert_not_null(h);
    cr_assert_gt(httpd_port(h), 0);
    return h;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

TestSuite(httpd, .init = curl_setup, .fini = curl_teardown, .timeout = 20);

/* ---------------------------------------------------------------- /metrics */

Test(httpd, metrics_serves_the_registry_as_text_format_0_0_4_and_follows_updates)
{
    char err[ERRLEN];
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *c = metrics_counter_new(reg, "vitjob_reconcile_total", "Reconciles.", err,
                                             ERRLEN, 1, "result");
    metrics_counter_add(c, 2, "done");
    httpd_config cfg = {.addr = "127.0.0.1:0", .metrics = reg};
    httpd *h = start(&cfg);

    struct resp r = get(httpd_port(h), "/metrics");
    cr_assert_eq(r.status, 200);
    cr_assert_eq(strncmp(r.content_type, "text/plain; version=0.0.4", 25), 0, "%s",
                 r.content_type);
    char *want = metrics_render(reg);
    cr_assert_str_eq(r.body, want);
    free(want);

    metrics_counter_add(c, 1, "error");
    r = get(httpd_port(h), "/metrics?ignored=query");
    cr_assert_eq(r.status, 200);
    cr_assert_not_null(strstr(r.body, "vitjob_reconcile_total{result=\"error\"} 1\n"), "%s",
                       r.body);
    httpd_stop(h);
    metrics_registry_free(reg);
}

Test(httpd, metrics_without_a_registry_is_404)
{
    httpd_config cfg = {.addr = "127.0.0.1:0"};
    httpd *h = start(&cfg);
    cr_assert_eq(get(httpd_port(h), "/metrics").status, 404);
    httpd_stop(h);
}

/* ---------------------------------------------------------------- /healthz */

Test(httpd, healthz_is_200_ok_while_the_heartbeat_is_fresh_and_500_once_stale)
{
    httpd_config cfg = {.addr = "127.0.0.1:0", .liveness_timeout_s = 0.3};
    double t0 = mono_seconds();
    httpd *h = start(&cfg);
    int port = httpd_port(h);

    /* start counts as a heartbeat: a GET answered within 0.3 s of it must
     * be 200 (one answered later may rightly be 500: a loaded machine) */
    struct resp r = get(port, "/healthz");
    if (mono_seconds() - t0 < 0.3) {
        cr_assert_eq(r.status, 200);
        cr_assert_str_eq(r.body, "ok");
    }

    sleep_s(0.5); /* at least 0.5 s without a heartbeat: stale, on any machine */
    r = get(port, "/healthz");
    cr_assert_eq(r.status, 500);
    cr_assert_not_null(strstr(r.body, "heartbeat stale"), "%s", r.body);

    /* a new heartbeat makes it healthy again: a GET answered within 0.3 s
     * of one is 200 (tried until one is, which a 500 forever never is) */
    int fresh = 0;
    for (int i = 0; i < 200 && !fresh; i++) {
        double hb = mono_seconds();
        httpd_heartbeat(h);
        r = get(port, "/healthz");
        if (mono_seconds() - hb < 0.3) {
            cr_assert_eq(r.status, 200, "answered %.3f s after a heartbeat", mono_seconds() - hb);
            fresh = 1;
        }
    }
    cr_assert(fresh, "no GET answered within 0.3 s of a heartbeat in 200 tries");
    httpd_heartbeat(NULL);
    httpd_stop(h);
}

Test(httpd, healthz_without_a_threshold_is_always_ok)
{
    httpd_config cfg = {.addr = "127.0.0.1:0", .liveness_timeout_s = 0};
    httpd *h = start(&cfg);
    sleep_s(0.05);
    cr_assert_eq(get(httpd_port(h), "/healthz").status, 200);
    httpd_stop(h);
}

/* ---------------------------------------------------------------- /readyz */

static int ready_when_synced(void *arg, char *why, size_t whylen)
{
    atomic_int *synced = arg;
    if (atomic_load(synced)) return 1;
    snprintf(why, whylen, "informer caches not synced");
    return 0;
}

Test(httpd, readyz_is_503_with_the_reason_until_the_callback_says_ready_then_200)
{
    atomic_int synced = 0;
    httpd_config cfg = {.addr = "127.0.0.1:0", .ready = ready_when_synced, .ready_arg = &synced};
    httpd *h = start(&cfg);
    struct resp r = get(httpd_port(h), "/readyz");
    cr_assert_eq(r.status, 503);
    cr_assert_not_null(strstr(r.body, "informer caches not synced"), "%s", r.body);
    atomic_store(&synced, 1);
    r = get(httpd_port(h), "/readyz");
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.body, "ok");
    httpd_stop(h);
}

Test(httpd, readyz_without_a_callback_is_ready)
{
    httpd_config cfg = {.addr = "127.0.0.1:0"};
    httpd *h = start(&cfg);
    cr_assert_eq(get(httpd_port(h), "/readyz").status, 200);
    httpd_stop(h);
}

/* ---------------------------------------------------------------- routing */

Test(httpd, unknown_paths_are_404)
{
    httpd_config cfg = {.addr = "127.0.0.1:0"};
    httpd *h = start(&cfg);
    const char *paths[] = {"/", "/metricsx", "/healthz/", "/readyz/extra", "/favicon.ico"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        cr_assert_eq(get(httpd_port(h), paths[i]).status, 404, "%s", paths[i]);
    httpd_stop(h);
}

Test(httpd, methods_other_than_get_are_405_with_an_allow_header)
{
    metrics_registry *reg = metrics_registry_new();
    httpd_config cfg = {.addr = "127.0.0.1:0", .metrics = reg};
    httpd *h = start(&cfg);
    const char *methods[] = {"POST", "PUT", "DELETE", "PATCH"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        struct resp r = fetch(httpd_port(h), methods[i], "/metrics", "some=body&more=data");
        cr_assert_eq(r.rc, CURLE_OK, "%s: %s", methods[i], curl_easy_strerror(r.rc));
        cr_assert_eq(r.status, 405, "%s", methods[i]);
        cr_assert_str_eq(r.allow, "GET, HEAD");
    }
    /* The server is still fine afterwards. */
    cr_assert_eq(get(httpd_port(h), "/healthz").status, 200);
    httpd_stop(h);
    metrics_registry_free(reg);
}

Test(httpd, head_is_answered_like_get_without_a_body)
{
    httpd_config cfg = {.addr = "127.0.0.1:0"};
    httpd *h = start(&cfg);
    struct resp r = fetch(httpd_port(h), "HEAD", "/healthz", NULL);
    cr_assert_eq(r.rc, CURLE_OK);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(r.len, 0);
    httpd_stop(h);
}

/* ---------------------------------------------------------------- addresses and lifecycle */

Test(httpd, port_zero_binds_a_free_port_that_a_second_server_cannot_take)
{
    httpd_config cfg = {.addr = "127.0.0.1:0"};
    httpd *a = start(&cfg);
    char addr[64], err[ERRLEN] = "";
    snprintf(addr, sizeof addr, "127.0.0.1:%d", httpd_port(a));
    httpd_config busy = {.addr = addr};
    httpd *b = (httpd *)0x1;
    cr_assert_eq(httpd_start(&b, &busy, err, ERRLEN), -1);
    cr_assert_eq(b, (httpd *)0x1, "*out untouched on failure");
    cr_assert_not_null(strstr(err, "bind"), "%s", err);
    cr_assert_not_null(strstr(err, addr), "error names the address: %s", err);
    httpd_stop(a);
}

Test(httpd, colon_port_listens_on_all_ipv4_interfaces)
{
    httpd_config cfg = {.addr = ":0"};
    httpd *h = start(&cfg);
    cr_assert_eq(get(httpd_port(h), "/healthz").status, 200);
    httpd_stop(h);
}

Test(httpd, malformed_addresses_are_rejected_with_a_message)
{
    const char *bad[] = {"8080", "127.0.0.1:", "127.0.0.1:99999", "::1:80", "127.0.0.1:8x",
                         "127.0.0.1:-1", "no.such.host.invalid:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[ERRLEN] = "";
        httpd *h = NULL;
        httpd_config cfg = {.addr = bad[i]};
        cr_assert_eq(httpd_start(&h, &cfg, err, ERRLEN), -1, "%s accepted", bad[i]);
        cr_assert_null(h);
        cr_assert_not_null(strstr(err, bad[i]), "error names \"%s\": %s", bad[i], err);
    }
    httpd_config none = {.addr = NULL};
    httpd *h = NULL;
    char err[ERRLEN];
    cr_assert_eq(httpd_start(&h, &none, err, ERRLEN), -1);
    cr_assert_eq(httpd_start(&h, NULL, err, ERRLEN), -1);
    cr_assert_eq(httpd_port(NULL), -1);
}

Test(httpd, stop_closes_the_listening_socket_and_frees_everything)
{
    int before = count_fds();
    httpd_config cfg = {.addr = "127.0.0.1:0"};
    httpd *h = start(&cfg);
    int port = httpd_port(h);
    cr_assert_eq(get(port, "/healthz").status, 200);
    httpd_stop(h);
    httpd_stop(NULL);
    struct resp r = fetch(port, NULL, "/healthz", NULL);
    cr_assert_neq(r.rc, CURLE_OK, "still answering after stop");
    cr_assert_eq(count_fds(), before, "file descriptors leaked");
}

/* ---------------------------------------------------------------- concurrency */

struct scraper { int port; int ok; };

static void *scrape_loop(void *p)
{
    struct scraper *s = p;
    for (int i = 0; i < 20; i++) {
        struct resp r = fetch(s->port, NULL, "/metrics", NULL);
        if (r.rc == CURLE_OK && r.status == 200 && strstr(r.body, "# TYPE t_total counter\n"))
            s->ok++;
    }
    return NULL;
}

Test(httpd, concurrent_scrapes_while_metrics_update_all_succeed)
{
    char err[ERRLEN];
    metrics_registry *reg = metrics_registry_new();
    metrics_counter *c = metrics_counter_new(reg, "t_total", "T.", err, ERRLEN, 0);
    httpd_config cfg = {.addr = "127.0.0.1:0", .metrics = reg};
    httpd *h = start(&cfg);
    struct scraper s[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        s[i] = (struct scraper){httpd_port(h), 0};
        pthread_create(&t[i], NULL, scrape_loop, &s[i]);
    }
    for (int i = 0; i < 20000; i++) metrics_counter_add(c, 1);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(s[i].ok, 20);
    }
    struct resp r = get(httpd_port(h), "/metrics");
    cr_assert_not_null(strstr(r.body, "t_total 20000\n"), "%s", r.body);
    httpd_stop(h);
    metrics_registry_free(reg);
}
