/* tests/kube_fixture.h - what the Kubernetes client tests share
 * (test_kube.c, test_kube_watch.c, test_kubeconfig.c): temporary files and
 * directories, the test API server (tests/cluster/apiserver) as a child
 * process, clients for it, ConfigMaps to create.
 *
 * With KUBE_FIXTURE_SERVER defined before including it, one server is
 * started for the whole run by a PRE_ALL report hook (in the runner, before
 * tests fork) and its state directory handed to the tests in
 * $VITJOB_TEST_APISERVER; tests that need special flags or kill the server
 * start their own. Run from the repository root. */
#ifndef VITJOB_TESTS_KUBE_FIXTURE_H
#define VITJOB_TESTS_KUBE_FIXTURE_H

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

static __attribute__((unused)) void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static __attribute__((unused)) char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *b = calloc(1, 1 << 20);
    size_t n = fread(b, 1, (1 << 20) - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

static __attribute__((unused)) void make_tmpdir(char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/vitjob-kube-XXXXXX");
    cr_assert(mkdtemp(buf), "mkdtemp: %s", strerror(errno));
}

static __attribute__((unused)) void rm_rf(const char *dir)
{
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/rm", "rm", "-rf", dir, (char *)NULL);
        _exit(127);
    }
    if (p > 0) waitpid(p, NULL, 0);
}

/* A TCP socket listening on 127.0.0.1 at a free port (written to *port). */
static __attribute__((unused)) int loopback_listener(int *port)
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

static __attribute__((unused)) void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Starts tests/cluster/apiserver on state dir (port 0 = any) with extra args;
 * waits for DIR/port. Returns the pid (or -1) and the port. */
static __attribute__((unused)) pid_t server_start(const char *state, int port, const char *const *extra, int *port_out)
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

static __attribute__((unused)) void server_stop(pid_t pid, int sig)
{
    if (pid <= 0) return;
    kill(pid, sig);
    waitpid(pid, NULL, 0);
}

/* The shared server, started once in the runner. */
static __attribute__((unused)) pid_t shared_pid = -1;
static __attribute__((unused)) char shared_dir[256];

#ifdef KUBE_FIXTURE_SERVER
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
#endif

static __attribute__((unused)) const char *shared_state(void)
{
    const char *s = getenv("VITJOB_TEST_APISERVER");
    cr_assert(s, "the test API server did not start (see its apiserver.log)");
    return s;
}

static __attribute__((unused)) kube_client *client_for(const char *state)
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

static __attribute__((unused)) kube_client *shared_client(void) { return client_for(shared_state()); }

static __attribute__((unused)) char *server_token(const char *state)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/token", state);
    char *t = read_text(path);
    cr_assert(t, "no token file in %s", state);
    t[strcspn(t, "\r\n")] = '\0';
    return t;
}

/* A ConfigMap {name, labels {key: value}, data {k: v}}; caller frees. */
static __attribute__((unused)) cJSON *configmap(const char *name, const char *lkey, const char *lval, const char *v)
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

static __attribute__((unused)) void create_cm(kube_client *c, const char *name, const char *lkey, const char *lval)
{
    cJSON *o = configmap(name, lkey, lval, "v"), *out = NULL;
    kube_status st;
    int rc = kube_create(c, NS "/configmaps", o, &out, &st);
    cr_assert_eq(rc, KUBE_OK, "create %s: %s", name, st.message);
    cr_assert_eq(st.http_code, 201);
    cJSON_Delete(o);
    cJSON_Delete(out);
}

static __attribute__((unused)) const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* A watch callback that records each event (test_kube.c, test_kube_watch.c). */
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

static __attribute__((unused)) int record(const char *type, const cJSON *obj, void *user)
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

#endif
