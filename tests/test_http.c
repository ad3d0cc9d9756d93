/* tests/test_http.c - lib/http.c against the test API server: one kept-alive
 * connection serves request after request, a refused POST included. */
#define KUBE_FIXTURE_SERVER
#include "kube_fixture.h"

#include "http.h"

TestSuite(http, .timeout = 30);

Test(http, second_request_reuses_the_kept_alive_connection)
{
    const char *state = shared_state();
    char path[1024], err[ERRLEN], url[256], auth[512], *port;
    snprintf(path, sizeof path, "%s/kubeconfig", state);
    kube_config *cfg = NULL;
    cr_assert_eq(kube_config_load_kubeconfig(path, &cfg, err, sizeof err), 0, "%s", err);
    http_options o;
    kube_config_http_options(cfg, &o);
    http_client *h = NULL;
    cr_assert_eq(http_client_new(&o, &h, err, sizeof err), 0, "%s", err);
    char *tok = server_token(state);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", tok);
    snprintf(path, sizeof path, "%s/port", state);
    port = read_text(path);
    snprintf(url, sizeof url, "https://127.0.0.1:%d" NS "/configmaps", atoi(port));
    const char *hdrs[] = {auth, NULL};
    long connects[3];
    for (int i = 0; i < 3; i++) {
        http_response r = {0};
        /* the middle one a POST with a body the server refuses (nothing is created) */
        cr_assert_eq(http_request(h, i == 1 ? "POST" : "GET", url, hdrs, i == 1 ? "{}" : NULL,
                                  i == 1 ? 2 : 0, 5000, &r, err, sizeof err), 0, "%s", err);
        cr_assert_eq(r.status, i == 1 ? 422 : 200, "status %ld: %s", r.status, r.body);
        connects[i] = http_client_last_connects(h);
        http_response_free(&r);
    }
    cr_assert_eq(connects[0], 1, "the first request connects");
    cr_assert_eq(connects[1] + connects[2], 0, "later ones reuse the connection");
    http_client_free(h);
    kube_config_free(cfg);
    free(tok);
    free(port);
}
