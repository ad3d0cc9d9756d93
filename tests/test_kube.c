/* tests/test_kube.c - lib/check.h, lib/kubeconfig.c, lib/kube.c and
 * lib/kube_watch.c: the line splitter and kubeconfig parser on their own, then
 * every request kind, pagination, watches (order, bookmarks, 410, a server
 * restart mid-watch), auth errors and in-cluster config against the test API
 * server (tests/cluster/apiserver).
 *
 * One server is started for the whole run by a PRE_ALL report hook (in the
 * runner, before tests fork) and its state directory handed to the tests in
 * $VITJOB_TEST_APISERVER; tests that need special flags or kill the server
 * start their own. Run from the repository root. */
#include <curl/curl.h>

#include "check.h"
#include "kube.h"
#include "kube_watch.h"
#include "kubeconfig.h"
#include "log.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ERRLEN 1024
#define NS "/api/v1/namespaces/default"

/* ---------------------------------------------------------------- helpers */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 20);
    size_t n = fread(b, 1, (1 << 20) - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

static void make_tmpdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/vitjob-kube-XXXXXX");
    cr_assert(mkdtemp(buf), "mkdtemp: %s", strerror(errno));
}

static void rm_rf(const char *dir)
{
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/rm", "rm", "-rf", dir, (char *)NULL);
        _exit(127);
    }
    if (p > 0) waitpid(p, NULL, 0);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts tests/cluster/apiserver on state dir (port 0 = any) with extra args;
 * waits for DIR/port. Returns the pid (or -1) and the port. */
static pid_t server_start(const char *state, int port, const char *const *extra, int *port_out)
{
    char path[1024], portarg[16], log[1024];
    snprintf(path, sizeof path, "%s/port", state);
    unlink(path);
    snprintf(portarg, sizeof portarg, "%d", port);
    snprintf(log, sizeof log, "%s/apiserver.log", state);
    mkdir(state, 0700);
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv[16] = {"/usr/bin/python3", "tests/cluster/apiserver", "--state", state,
                                "--port", portarg};
        int n = 6;
        for (int i = 0; extra && extra[i] && n < 15; i++) argv[n++] = extra[i];
        argv[n] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    if (pid < 0) return -1;
    for (int i = 0; i < 400; i++) { /* 20 s */
        char *t = read_text(path);
        if (t) {
            *port_out = atoi(t);
            free(t);
            if (*port_out > 0) return pid;
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void server_stop(pid_t pid, int sig)
{
    if (pid <= 0) return;
    kill(pid, sig);
    waitpid(pid, NULL, 0);
}

/* The shared server, started once in the runner. */
static pid_t shared_pid = -1;
static char shared_dir[256];

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    int port = 0;
    make_tmpdir(shared_dir, sizeof shared_dir);
    char state[512];
    snprintf(state, sizeof state, "%s/state", shared_dir);
    const char *extra[] = {"--bookmark-interval", "0.3", NULL};
    shared_pid = server_start(state, 0, extra, &port);
    if (shared_pid > 0) setenv("VITJOB_TEST_APISERVER", state, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    server_stop(shared_pid, SIGTERM);
    if (shared_dir[0]) rm_rf(shared_dir);
}

static const char *shared_state(void)
{
    const char *s = getenv("VITJOB_TEST_APISERVER");
    cr_assert(s, "the test API server did not start (see its apiserver.log)");
    return s;
}

static kube_client *client_for(const char *state)
{
    char path[1024], err[ERRLEN];
    kube_config *cfg = NULL;
    kube_client *c = NULL;
    kube_status st;
    signal(SIGPIPE, SIG_IGN); /* as the programs do (see http.h) */
    snprintf(path, sizeof path, "%s/kubeconfig", state);
    cr_assert_eq(kube_config_load_kubeconfig(path, &cfg, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kube_client_new(cfg, &c, &st), KUBE_OK, "%s", st.message);
    return c;
}

static kube_client *shared_client(void) { return client_for(shared_state()); }

static char *server_token(const char *state)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/token", state);
    char *t = read_text(path);
    cr_assert(t, "no token file in %s", state);
    t[strcspn(t, "\r\n")] = '\0';
    return t;
}

/* A ConfigMap {name, labels {key: value}, data {k: v}}; caller frees. */
static cJSON *configmap(const char *name, const char *lkey, const char *lval, const char *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON_AddStringToObject(o, "kind", "ConfigMap");
    cJSON *m = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(m, "name", name);
    if (lkey) cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "labels"), lkey, lval);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "data"), "k", v);
    return o;
}

static void create_cm(kube_client *c, const char *name, const char *lkey, const char *lval)
{
    cJSON *o = configmap(name, lkey, lval, "v"), *out = NULL;
    kube_status st;
    int rc = kube_create(c, NS "/configmaps", o, &out, &st);
    cr_assert_eq(rc, KUBE_OK, "create %s: %s", name, st.message);
    cr_assert_eq(st.http_code, 201);
    cJSON_Delete(o);
    cJSON_Delete(out);
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* ================================================== unit: the line splitter */

typedef struct {
    char lines[16][64];
    int n;
    size_t longest;
} line_sink;

static int sink_line(const char *line, size_t len, void *user)
{
    line_sink *s = user;
    cr_assert_eq(strlen(line), len, "line is NUL-terminated at len");
    if (len > s->longest) s->longest = len;
    if (s->n < 16) snprintf(s->lines[s->n], sizeof s->lines[0], "%.*s", (int)len, line);
    s->n++;
    return 0;
}

static line_sink feed_chunks(const char *const *chunks)
{
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(0, &l), 0);
    for (int i = 0; chunks[i]; i++)
        cr_assert_eq(kube_lines_feed(l, chunks[i], strlen(chunks[i]), sink_line, &s), 0);
    cr_assert_eq(kube_lines_pending(l), 0, "no unfinished line left");
    kube_lines_free(l);
    return s;
}

Test(kube_lines, event_split_mid_line_across_chunks_is_reassembled)
{
    const char *chunks[] = {"{\"type\":\"ADD", "ED\",\"o\":1", "}\n", NULL};
    line_sink s = feed_chunks(chunks);
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.lines[0], "{\"type\":\"ADDED\",\"o\":1}");
}

Test(kube_lines, several_events_in_one_chunk_come_out_in_order)
{
    const char *chunks[] = {"a1\nb22\nc333\nd", "4\n", NULL};
    line_sink s = feed_chunks(chunks);
    cr_assert_eq(s.n, 4);
    cr_assert_str_eq(s.lines[0], "a1");
    cr_assert_str_eq(s.lines[1], "b22");
    cr_assert_str_eq(s.lines[2], "c333");
    cr_assert_str_eq(s.lines[3], "d4");
}

Test(kube_lines, chunk_ending_exactly_at_newline_and_lone_newline_chunks)
{
    const char *chunks[] = {"one\n", "\n", "two", "\n", "\r\n", "three\r\n", NULL};
    line_sink s = feed_chunks(chunks);
    cr_assert_eq(s.n, 3, "blank lines are skipped");
    cr_assert_str_eq(s.lines[0], "one");
    cr_assert_str_eq(s.lines[1], "two");
    cr_assert_str_eq(s.lines[2], "three", "a trailing CR is dropped");
}

Test(kube_lines, byte_by_byte_feeding_gives_the_same_lines)
{
    const char *text = "{\"x\":1}\n{\"y\":2}\n";
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(0, &l), 0);
    for (size_t i = 0; i < strlen(text); i++)
        cr_assert_eq(kube_lines_feed(l, text + i, 1, sink_line, &s), 0);
    kube_lines_free(l);
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.lines[1], "{\"y\":2}");
}

Test(kube_lines, huge_object_of_three_mebibytes_in_odd_chunks_is_one_line)
{
    size_t n = 3u << 20;
    char *big = malloc(n + 2);
    memset(big, 'x', n);
    big[n] = '\n';
    big[n + 1] = '\0';
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(0, &l), 0);
    for (size_t off = 0; off < n + 1; off += 16381) {
        size_t len = n + 1 - off < 16381 ? n + 1 - off : 16381;
        cr_assert_eq(kube_lines_feed(l, big + off, len, sink_line, &s), 0);
    }
    kube_lines_free(l);
    free(big);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.longest, n);
}

Test(kube_lines, line_longer_than_the_limit_is_an_error)
{
    kube_lines *l;
    line_sink s = {0};
    cr_assert_eq(kube_lines_new(8, &l), 0);
    cr_assert_eq(kube_lines_feed(l, "123456789", 9, sink_line, &s), -1);
    cr_assert_eq(kube_lines_feed(l, "ok\n", 3, sink_line, &s), 0, "usable again after the error");
    kube_lines_free(l);
    cr_assert_eq(s.n, 1);
}

static int stop_at_second(const char *line, size_t len, void *user)
{
    (void)line, (void)len;
    return ++*(int *)user == 2 ? 7 : 0;
}

Test(kube_lines, callback_nonzero_stops_feeding_and_is_returned)
{
    kube_lines *l;
    int n = 0;
    cr_assert_eq(kube_lines_new(0, &l), 0);
    cr_assert_eq(kube_lines_feed(l, "a\nb\nc\n", 6, stop_at_second, &n), 7);
    cr_assert_eq(n, 2);
    kube_lines_free(l);
}

/* ======================================================= unit: kubeconfig */

static const char *KC_HEAD =
    "apiVersion: v1\nkind: Config\n"
    "clusters:\n"
    "- name: other\n  cluster:\n    server: https://10.0.0.1:6443\n"
    "- name: c1\n  cluster:\n    server: https://127.0.0.1:6443/\n"
    "    certificate-authority-data: Q0EgUEVN\n"   /* "CA PEM" */
    "    insecure-skip-tls-verify: true\n"
    "contexts:\n"
    "- name: ctx\n  context:\n    cluster: c1\n    user: u1\n    namespace: team-a\n"
    "users:\n"
    "- name: u1\n  user:\n";

static int load_kc(const char *user_part, const char *tail, kube_config **out, char *err,
                   char *path_out)
{
    char dir[256], text[4096];
    make_tmpdir(dir, sizeof dir);
    snprintf(path_out, 512, "%s/config", dir);
    snprintf(text, sizeof text, "%s%s%s", KC_HEAD, user_part, tail);
    write_text(path_out, text);
    int rc = kube_config_load_kubeconfig(path_out, out, err, ERRLEN);
    rm_rf(dir); /* everything was read into memory */
    return rc;
}

Test(kubeconfig, token_server_namespace_ca_data_and_insecure_come_from_current_context)
{
    kube_config *c = NULL;
    char err[ERRLEN], path[512], tok[256];
    int rc = load_kc("    token: abc.def\n", "current-context: ctx\n", &c, err, path);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(kube_config_server(c), "https://127.0.0.1:6443", "trailing / dropped");
    cr_assert_str_eq(kube_config_namespace(c), "team-a");
    cr_assert_eq(kube_config_token(c, tok, sizeof tok, err, sizeof err), 0);
    cr_assert_str_eq(tok, "abc.def");
    http_options o;
    kube_config_http_options(c, &o);
    cr_assert_eq(o.ca_len, 6);
    cr_assert_eq(memcmp(o.ca_pem, "CA PEM", 6), 0);
    cr_assert_eq(o.insecure, 1);
    cr_assert_null(o.cert_pem);
    kube_config_free(c);
}

Test(kubeconfig, client_certificate_and_key_data_are_base64_decoded)
{
    kube_config *c = NULL;
    char err[ERRLEN], path[512];
    /* "CERT PEM", "KEY PEM" */
    int rc = load_kc("    client-certificate-data: Q0VSVCBQRU0=\n    client-key-data: S0VZIFBFTQ==\n",
                     "current-context: ctx\n", &c, err, path);
    cr_assert_eq(rc, 0, "%s", err);
    http_options o;
    kube_config_http_options(c, &o);
    cr_assert_eq(o.cert_len, 8);
    cr_assert_eq(memcmp(o.cert_pem, "CERT PEM", 8), 0);
    cr_assert_eq(o.key_len, 7);
    cr_assert_eq(memcmp(o.key_pem, "KEY PEM", 7), 0);
    kube_config_free(c);
}

Test(kubeconfig, relative_certificate_files_resolve_against_the_kubeconfig_directory)
{
    kube_config *c = NULL;
    char err[ERRLEN], dir[256], path[512], f[600];
    make_tmpdir(dir, sizeof dir);
    snprintf(f, sizeof f, "%s/client.crt", dir);
    write_text(f, "FILE CERT");
    snprintf(f, sizeof f, "%s/client.key", dir);
    write_text(f, "FILE KEY");
    snprintf(path, sizeof path, "%s/config", dir);
    char text[4096];
    snprintf(text, sizeof text, "%s%s", KC_HEAD,
             "    client-certificate: client.crt\n    client-key: client.key\n"
             "current-context: ctx\n");
    write_text(path, text);
    cr_assert_eq(kube_config_load_kubeconfig(path, &c, err, sizeof err), 0, "%s", err);
    http_options o;
    kube_config_http_options(c, &o);
    cr_assert_eq(o.cert_len, 9);
    cr_assert_eq(memcmp(o.key_pem, "FILE KEY", 8), 0);
    kube_config_free(c);
    rm_rf(dir);
}

Test(kubeconfig, missing_current_context_error_names_the_file_and_the_key)
{
    kube_config *c = NULL;
    char err[ERRLEN], path[512];
    int rc = load_kc("    token: secret-token-xyz\n", "", &c, err, path);
    cr_assert_eq(rc, -1);
    cr_assert_null(c);
    cr_assert(strstr(err, path), "names the file: %s", err);
    cr_assert(strstr(err, "current-context"), "names the key: %s", err);
    cr_assert(!strstr(err, "secret-token-xyz"));
}

Test(kubeconfig, current_context_not_in_contexts_is_a_clear_error)
{
    kube_config *c = NULL;
    char err[ERRLEN], path[512];
    cr_assert_eq(load_kc("    token: t\n", "current-context: nope\n", &c, err, path), -1);
    cr_assert(strstr(err, "\"nope\" is not in contexts"), "%s", err);
}

Test(kubeconfig, invalid_yaml_reports_file_and_line)
{
    kube_config *c = NULL;
    char err[ERRLEN];
    const char *t = "clusters:\n  - a: [1,\n";
    cr_assert_eq(kube_config_load_kubeconfig_string(t, strlen(t), "k.yaml", &c, err, sizeof err),
                 -1);
    cr_assert(strstr(err, "k.yaml:") && strstr(err, "invalid YAML"), "%s", err);
}

Test(kubeconfig, exec_credentials_are_refused_by_name)
{
    kube_config *c = NULL;
    char err[ERRLEN], path[512];
    cr_assert_eq(load_kc("    exec:\n      command: aws\n", "current-context: ctx\n", &c, err, path),
                 -1);
    cr_assert(strstr(err, "users[u1].user") && strstr(err, "exec"), "%s", err);
}

Test(kubeconfig, base64_decoder_handles_padding_whitespace_and_rejects_garbage)
{
    char *o;
    size_t n;
    cr_assert_eq(kube_base64_decode("aGVs\nbG8=", 9, &o, &n), 0);
    cr_assert_eq(n, 5);
    cr_assert_str_eq(o, "hello");
    free(o);
    cr_assert_eq(kube_base64_decode("a$b=", 4, &o, &n), -1);
    cr_assert_eq(kube_base64_decode("abcde", 5, &o, &n), -1, "a dangling sextet is invalid");
}

/* ======================================================= unit: in-cluster */

static void fake_sa_dir(char *dir, size_t len, const char *token)
{
    char p[600];
    make_tmpdir(dir, len);
    snprintf(p, sizeof p, "%s/token", dir);
    write_text(p, token);
    snprintf(p, sizeof p, "%s/ca.crt", dir);
    write_text(p, "-----BEGIN CERTIFICATE-----\n");
    snprintf(p, sizeof p, "%s/namespace", dir);
    write_text(p, "ns-x\n");
}

Test(in_cluster, server_from_env_and_token_ca_namespace_from_the_directory)
{
    char dir[256], err[ERRLEN], tok[256];
    fake_sa_dir(dir, sizeof dir, "tok-1\n");
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    kube_config *c = NULL;
    cr_assert_eq(kube_config_in_cluster(dir, &c, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(kube_config_server(c), "https://10.96.0.1:443");
    cr_assert_str_eq(kube_config_namespace(c), "ns-x");
    cr_assert_eq(kube_config_token(c, tok, sizeof tok, err, sizeof err), 0);
    cr_assert_str_eq(tok, "tok-1");
    kube_config_free(c);
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    cr_assert_eq(kube_config_in_cluster(dir, &c, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(kube_config_server(c), "https://[fd00::1]:443", "IPv6 gets brackets");
    kube_config_free(c);
    rm_rf(dir);
}

Test(in_cluster, rotated_token_file_is_read_again)
{
    char dir[256], err[ERRLEN], tok[256], p[600];
    fake_sa_dir(dir, sizeof dir, "tok-1");
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    kube_config *c = NULL;
    cr_assert_eq(kube_config_in_cluster(dir, &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(kube_config_token(c, tok, sizeof tok, err, sizeof err), 0);
    cr_assert_str_eq(tok, "tok-1");
    /* Rotation as kubelet does it: a new file renamed over the old one. */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s/token.new", dir);
    snprintf(p, sizeof p, "%s/token", dir);
    write_text(tmp, "tok-2-rotated");
    cr_assert_eq(rename(tmp, p), 0);
    cr_assert_eq(kube_config_token(c, tok, sizeof tok, err, sizeof err), 0);
    cr_assert_str_eq(tok, "tok-2-rotated");
    /* While the file is briefly missing, the last token is kept. */
    unlink(p);
    cr_assert_eq(kube_config_token(c, tok, sizeof tok, err, sizeof err), 0);
    cr_assert_str_eq(tok, "tok-2-rotated");
    kube_config_free(c);
    rm_rf(dir);
}

Test(in_cluster, missing_env_or_token_is_a_clear_error)
{
    char dir[256], err[ERRLEN], p[600];
    kube_config *c = NULL;
    unsetenv("KUBERNETES_SERVICE_HOST");
    cr_assert_eq(kube_config_in_cluster("/nonexistent", &c, err, sizeof err), -1);
    cr_assert(strstr(err, "KUBERNETES_SERVICE_HOST"), "%s", err);
    fake_sa_dir(dir, sizeof dir, "t");
    snprintf(p, sizeof p, "%s/token", dir);
    unlink(p);
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    cr_assert_eq(kube_config_in_cluster(dir, &c, err, sizeof err), -1);
    cr_assert(strstr(err, p), "names the token file: %s", err);
    rm_rf(dir);
}

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

Test(check, curl_check_reports_file_line_expression_and_curls_own_message)
{
    char err[ERRLEN] = "";
    int line = __LINE__ + 1;
    int rc = CURL_CHECK(CURLE_COULDNT_CONNECT, err, sizeof err);
    cr_assert_eq(rc, CURLE_COULDNT_CONNECT);
    char want[64];
    snprintf(want, sizeof want, "test_kube.c:%d:", line);
    cr_assert(strstr(err, want), "%s", err);
    cr_assert(strstr(err, "CURLE_COULDNT_CONNECT"), "%s", err);
    cr_assert(strstr(err, curl_easy_strerror(CURLE_COULDNT_CONNECT)), "%s", err);
    err[0] = '\0';
    cr_assert_eq(CURL_CHECK(CURLE_OK, err, sizeof err), 0);
    cr_assert_str_eq(err, "", "success writes nothing");
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

Test(kube_api, second_request_reuses_the_kept_alive_connection)
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

typedef struct {
    char types[32][16];
    char names[32][32];
    char rvs[32][32];
    int n;
    int stop_after;       /* stop after this many non-bookmark events */
    int bookmarks;
    int stop_on_bookmark;
    void (*on_event)(int n, void *arg);
    void *arg;
} recorder;

static int record(const char *type, const cJSON *obj, void *user)
{
    recorder *r = user;
    if (strcmp(type, "BOOKMARK") == 0) {
        r->bookmarks++;
        return r->stop_on_bookmark;
    }
    if (r->n < 32) {
        snprintf(r->types[r->n], sizeof r->types[0], "%s", type);
        snprintf(r->names[r->n], sizeof r->names[0], "%s", str_at(obj, "metadata", "name"));
        snprintf(r->rvs[r->n], sizeof r->rvs[0], "%s", str_at(obj, "metadata", "resourceVersion"));
    }
    r->n++;
    if (r->on_event) r->on_event(r->n, r->arg);
    return r->n >= r->stop_after;
}

Test(kube_api, watch_delivers_added_modified_deleted_in_order_and_tracks_resource_version)
{
    kube_client *c = shared_client();
    kube_status st;
    cJSON *items = NULL;
    char rv[64];
    kube_list_opts lo = {.label_selector = "wo=1"};
    cr_assert_eq(kube_list(c, NS "/configmaps", &lo, &items, rv, sizeof rv, &st), KUBE_OK);
    cJSON_Delete(items);
    create_cm(c, "wo-1", "wo", "1");
    cJSON *p = cJSON_Parse("{\"data\":{\"k\":\"changed\"}}");
    cr_assert_eq(kube_merge_patch(c, NS "/configmaps/wo-1", p, NULL, &st), KUBE_OK);
    cJSON_Delete(p);
    cr_assert_eq(kube_delete(c, NS "/configmaps/wo-1", 0, NULL, NULL, &st), KUBE_OK);

    recorder r = {.stop_after = 3};
    kube_watch_opts wo = {.label_selector = "wo=1"};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%d %s", rc, st.message);
    cr_assert_eq(r.n, 3);
    cr_assert_str_eq(r.types[0], "ADDED");
    cr_assert_str_eq(r.types[1], "MODIFIED");
    cr_assert_str_eq(r.types[2], "DELETED");
    cr_assert_str_eq(r.names[2], "wo-1");
    cr_assert(atol(r.rvs[0]) < atol(r.rvs[1]) && atol(r.rvs[1]) < atol(r.rvs[2]));
    cr_assert_str_eq(rv, r.rvs[2], "rv is the last delivered event's");
    kube_client_free(c);
}

static void create_next(int n, void *arg)
{
    /* Live events: each delivered event triggers the next write. */
    kube_client *c = arg;
    char name[32];
    if (n < 3) {
        snprintf(name, sizeof name, "live-%d", n);
        create_cm(c, name, "live", "1");
    }
}

Test(kube_api, watch_from_empty_rv_starts_with_current_state_then_live_events)
{
    kube_client *c = shared_client(), *writer = shared_client();
    kube_status st;
    create_cm(c, "live-0", "live", "1");
    recorder r = {.stop_after = 3, .on_event = create_next, .arg = writer};
    char rv[64] = "";
    kube_watch_opts wo = {.label_selector = "live=1"};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%s", st.message);
    cr_assert_str_eq(r.names[0], "live-0");
    cr_assert_str_eq(r.names[1], "live-1");
    cr_assert_str_eq(r.names[2], "live-2");
    kube_client_free(writer);
    kube_client_free(c);
}

Test(kube_api, bookmarks_advance_the_resource_version_without_events)
{
    kube_client *c = shared_client();
    kube_status st;
    cJSON *items = NULL;
    char rv[64], before[64];
    cr_assert_eq(kube_list(c, NS "/configmaps", NULL, &items, rv, sizeof rv, &st), KUBE_OK);
    cJSON_Delete(items);
    create_cm(c, "bm-unrelated", NULL, NULL); /* moves the global rv on */
    snprintf(before, sizeof before, "%s", rv);
    recorder r = {.stop_on_bookmark = 1};
    kube_watch_opts wo = {.label_selector = "nothing-has-this"};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%s", st.message);
    cr_assert_eq(r.bookmarks, 1);
    cr_assert_eq(r.n, 0);
    cr_assert_gt(atol(rv), atol(before), "bookmark rv %s > list rv %s", rv, before);
    kube_client_free(c);
}

static volatile sig_atomic_t alarm_stop;
static void on_alarm(int sig)
{
    (void)sig;
    alarm_stop = 1;
}

Test(kube_api, stop_flag_set_by_a_signal_handler_ends_a_quiet_watch_within_a_second)
{
    kube_client *c = shared_client();
    kube_status st;
    char rv[64] = "";
    recorder r = {.stop_after = 1000};
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    alarm(1);
    kube_watch_opts wo = {.label_selector = "quiet=1"};
    int rc = kube_watch_run(c, NS "/services", &wo, rv, sizeof rv, record, &r, &alarm_stop, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%s", st.message);
    cr_assert_lt(secs, 2.5, "stopped after %.2fs", secs);
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

/* A TCP socket listening on 127.0.0.1 at a free port (written to *port). */
static int loopback_listener(int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(s, 8), 0);
    socklen_t al = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &al);
    *port = ntohs(a.sin_port);
    return s;
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
    cr_assert_lt(secs, 2.0);
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
    for (int i = 0; i < 1000 && __atomic_load_n(&es->connections, __ATOMIC_SEQ_CST) < 3; i++) {
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

/* ============================== own servers: 410 Gone and restart mid-watch */

TestSuite(kube_server, .timeout = 60);

Test(kube_server, too_old_resource_version_is_reported_as_watch_gone)
{
    char dir[256], state[300];
    int port;
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    const char *extra[] = {"--history", "5", NULL};
    pid_t pid = server_start(state, 0, extra, &port);
    cr_assert(pid > 0, "server did not start");
    kube_client *c = client_for(state);
    kube_status st;
    cJSON *o = configmap("old", NULL, NULL, "0"), *got = NULL;
    cr_assert_eq(kube_create(c, NS "/configmaps", o, &got, &st), KUBE_OK, "%s", st.message);
    char rv[64];
    snprintf(rv, sizeof rv, "%s", str_at(got, "metadata", "resourceVersion"));
    cJSON_Delete(got);
    cJSON_Delete(o);
    for (int i = 0; i < 10; i++) {
        char b[64];
        snprintf(b, sizeof b, "{\"data\":{\"k\":\"%d\"}}", i);
        cJSON *p = cJSON_Parse(b);
        cr_assert_eq(kube_merge_patch(c, NS "/configmaps/old", p, NULL, &st), KUBE_OK);
        cJSON_Delete(p);
    }
    recorder r = {.stop_after = 100};
    int rc = kube_watch_run(c, NS "/configmaps", NULL, rv, sizeof rv, record, &r, NULL, &st);
    kube_client_free(c);
    server_stop(pid, SIGTERM);
    rm_rf(dir);
    cr_assert_eq(rc, KUBE_WATCH_GONE, "%d %s", rc, st.message);
    cr_assert_eq(st.http_code, 410);
    cr_assert_str_eq(st.reason, "Expired");
    cr_assert_eq(r.n, 0);
}

typedef struct {
    const char *state;
    pid_t pid;
    int port;
    kube_client *writer;
    int restarted;
} restart_ctx;

static void restart_on_first(int n, void *arg)
{
    restart_ctx *x = arg;
    if (n != 1) return;
    /* Kill the server under the open watch, bring it back on the same port,
     * and write while the watch is disconnected. */
    server_stop(x->pid, SIGKILL);
    int port = 0;
    char portarg[16];
    snprintf(portarg, sizeof portarg, "%d", x->port);
    x->pid = server_start(x->state, x->port, NULL, &port);
    cr_assert(x->pid > 0 && port == x->port, "restart on port %d failed", x->port);
    x->restarted = 1;
    create_cm(x->writer, "rs-2", "rs", "1");
    create_cm(x->writer, "rs-3", "rs", "1");
}

Test(kube_server, watch_resumes_after_server_restart_on_the_same_port_without_losing_events)
{
    char dir[256], state[300];
    make_tmpdir(dir, sizeof dir);
    snprintf(state, sizeof state, "%s/state", dir);
    restart_ctx x = {.state = state};
    x.pid = server_start(state, 0, NULL, &x.port);
    cr_assert(x.pid > 0, "server did not start");
    kube_client *c = client_for(state);
    x.writer = client_for(state);
    kube_status st;
    cJSON *items = NULL;
    char rv[64];
    kube_list_opts lo = {.label_selector = "rs=1"};
    cr_assert_eq(kube_list(c, NS "/configmaps", &lo, &items, rv, sizeof rv, &st), KUBE_OK);
    cJSON_Delete(items);
    create_cm(c, "rs-1", "rs", "1");

    recorder r = {.stop_after = 3, .on_event = restart_on_first, .arg = &x};
    kube_watch_opts wo = {.label_selector = "rs=1", .backoff_initial_ms = 100,
                          .backoff_max_ms = 1000};
    int rc = kube_watch_run(c, NS "/configmaps", &wo, rv, sizeof rv, record, &r, NULL, &st);
    kube_client_free(c);
    kube_client_free(x.writer);
    server_stop(x.pid, SIGTERM);
    rm_rf(dir);
    cr_assert_eq(rc, KUBE_WATCH_STOPPED, "%d %s", rc, st.message);
    cr_assert(x.restarted);
    cr_assert_eq(r.n, 3);
    cr_assert_str_eq(r.names[0], "rs-1");
    cr_assert_str_eq(r.names[1], "rs-2", "the event written while disconnected arrives");
    cr_assert_str_eq(r.names[2], "rs-3");
    cr_assert_str_eq(r.types[1], "ADDED");
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
