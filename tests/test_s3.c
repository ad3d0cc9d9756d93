/* tests/test_s3.c - lib/s3.c against moto's S3 server with signature
 * checking on (tests/s3/moto_server.py), with boto3 as a second reader
 * (tests/s3/boto_check.py) and a proxy that answers 500 or resets
 * connections (tests/s3/fault_proxy.py).
 *
 * One moto server is started for the whole run by a PRE_ALL report hook (in
 * the runner, before tests fork); each test reads its credentials from the
 * file the launcher writes ($VITJOB_TEST_S3_ENV) and uses its own bucket.
 * Python: $VITJOB_TEST_PYTHON, else python3 when it can import moto; without
 * one the tests skip, saying so. Run from the repository root. */
#include "s3.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ERRLEN 2048
#define MIB ((size_t)1 << 20)

static const char *const BUCKETS[] = {"vj-basic", "vj-multi", "vj-list", "vj-odd", "vj-retry",
                                      "vj-abort", "vj-vhost", "vj-errors", NULL};

static char run_dir[256];
static pid_t moto_pid = -1;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
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

/* $VITJOB_TEST_PYTHON, else python3 when it imports moto, else NULL */
static const char *python(void)
{
    const char *p = getenv("VITJOB_TEST_PYTHON");
    if (p && *p) return p;
    if (system("python3 -c 'import moto, boto3' >/dev/null 2>&1") == 0) return "python3";
    return NULL;
}

/* Starts a Python helper with argv (argv[0] the script); stdout and stderr to log. */
static pid_t spawn(const char *const *argv, const char *log)
{
    const char *py = python();
    if (!py) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        const char *a[32] = {py};
        int n = 1;
        for (int i = 0; argv[i] && n < 31; i++) a[n++] = argv[i];
        a[n] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execvp(py, (char *const *)a);
        _exit(127);
    }
    return pid;
}

/* Waits (up to 30 s) for path to exist while pid lives. */
static int wait_file(const char *path, pid_t pid)
{
    for (int i = 0; i < 600; i++) {
        if (access(path, R_OK) == 0) return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) return -1;
        sleep_ms(50);
    }
    return -1;
}

static void stop(pid_t pid)
{
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (!python()) {
        setenv("VITJOB_TEST_S3_SKIP", "no Python with moto and boto3 (set VITJOB_TEST_PYTHON)", 1);
        return;
    }
    snprintf(run_dir, sizeof run_dir, "/tmp/vitjob-s3-XXXXXX");
    if (!mkdtemp(run_dir)) return;
    char env[512], log[512];
    snprintf(env, sizeof env, "%s/moto.env", run_dir);
    snprintf(log, sizeof log, "%s/moto.log", run_dir);
    const char *argv[32] = {"tests/s3/moto_server.py", "--port", "0", "--env-out", env};
    int n = 5;
    for (int i = 0; BUCKETS[i]; i++) {
        argv[n++] = "--bucket";
        argv[n++] = BUCKETS[i];
    }
    argv[n] = NULL;
    moto_pid = spawn(argv, log);
    if (moto_pid > 0 && wait_file(env, moto_pid) == 0) setenv("VITJOB_TEST_S3_ENV", env, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    stop(moto_pid);
    if (run_dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", run_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
    }
}

/* Sets the launcher's variables in this test's environment; skips when the
 * tests cannot run here. Returns the endpoint. */
static char endpoint[256];
static const char *use_moto(void)
{
    const char *skip = getenv("VITJOB_TEST_S3_SKIP");
    if (skip) cr_skip_test("%s", skip);
    const char *env = getenv("VITJOB_TEST_S3_ENV");
    cr_assert(env, "moto did not start (see its moto.log)");
    char *t = read_text(env);
    cr_assert(t, "cannot read %s", env);
    for (char *save = NULL, *l = strtok_r(t, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(l, '=');
        if (!eq) continue;
        *eq = '\0';
        setenv(l, eq + 1, 1);
    }
    free(t);
    /* the run's directory (the tests run in processes of their own, which
     * see the runner's environment but not its variables) */
    snprintf(run_dir, sizeof run_dir, "%s", env);
    *strrchr(run_dir, '/') = '\0';
    unsetenv("AWS_SESSION_TOKEN");
    snprintf(endpoint, sizeof endpoint, "%s", getenv("S3_ENDPOINT"));
    signal(SIGPIPE, SIG_IGN); /* as the programs do (see http.h) */
    return endpoint;
}

static s3_client *client_at(const char *ep, s3_options o)
{
    char err[ERRLEN];
    s3_client *c = NULL;
    o.endpoint = ep;
    if (o.backoff_s == 0) o.backoff_s = 0.05;
    if (o.deadline_s == 0) o.deadline_s = 60;
    cr_assert_eq(s3_new(&o, &c, err, sizeof err), S3_OK, "%s", err);
    return c;
}

static s3_client *client(void) { return client_at(use_moto(), (s3_options){0}); }

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (unsigned char)(seed >> 16);
    }
}

static void sha_hex(const void *d, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(d, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* boto_check.py's output for bucket/prefix (malloc'd) */
static char *boto(const char *bucket, const char *prefix, int uploads)
{
    char cmd[1024];
    const char *py = python();
    snprintf(cmd, sizeof cmd, "PYTHONIOENCODING=utf-8 %s tests/s3/boto_check.py --bucket %s "
             "--prefix '%s' %s", py, bucket, prefix, uploads ? "--uploads" : "");
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen: %s", strerror(errno));
    char *b = calloc(1, 1 << 20);
    size_t n = fread(b, 1, (1 << 20) - 1, p);
    b[n] = '\0';
    cr_assert_eq(pclose(p), 0, "boto_check.py failed: %s", b);
    return b;
}

/* What boto_check.py should print for what our client lists and reads. */
static char *our_view(s3_client *c, const char *bucket, const char *prefix)
{
    char err[ERRLEN], sha[65];
    s3_listing l = {0};
    cr_assert_eq(s3_list(c, bucket, prefix, NULL, &l, err, sizeof err), S3_OK, "%s", err);
    size_t cap = 1 << 20, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < l.n; i++) {
        void *d = NULL;
        size_t n = 0;
        cr_assert_eq(s3_get_all(c, bucket, l.items[i].key, 64 * MIB, &d, &n, err, sizeof err),
                     S3_OK, "%s", err);
        cr_assert_eq(n, l.items[i].size, "%s: listed %zu, read %zu", l.items[i].key,
                     (size_t)l.items[i].size, n);
        sha_hex(d, n, sha);
        len += snprintf(out + len, cap - len, "%s\t%zu\t%s\n", l.items[i].key, n, sha);
        free(d);
    }
    s3_listing_free(&l);
    return out;
}

/* fault_proxy.py in front of target_port; *port its port. */
static pid_t proxy_start(const char *name, const char *const *flags, int *port)
{
    char target[64], ready[512], log[512], stats[512];
    const char *ep = getenv("S3_ENDPOINT");
    snprintf(target, sizeof target, "%s", strstr(ep, "://") + 3);
    snprintf(ready, sizeof ready, "%s/%s.port", run_dir, name);
    snprintf(log, sizeof log, "%s/%s.log", run_dir, name);
    snprintf(stats, sizeof stats, "%s/%s.stats", run_dir, name);
    unlink(ready);
    const char *argv[32] = {"tests/s3/fault_proxy.py", "--listen-port", "0", "--target", target,
                            "--ready-file", ready, "--stats-file", stats};
    int n = 9;
    for (int i = 0; flags && flags[i] && n < 31; i++) argv[n++] = flags[i];
    argv[n] = NULL;
    pid_t pid = spawn(argv, log);
    cr_assert(pid > 0 && wait_file(ready, pid) == 0, "the fault proxy did not start (%s)", log);
    char *t = read_text(ready);
    *port = atoi(t);
    free(t);
    return pid;
}

static char *proxy_stats(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.stats", run_dir, name);
    char *t = read_text(path);
    cr_assert(t, "no stats from the proxy");
    return t;
}

TestSuite(s3, .timeout = 120);

/* ------------------------------------------------------------ pure */

Test(s3, parse_uri_splits_bucket_and_prefix_and_refuses_what_is_not_an_s3_uri)
{
    char b[64], p[256], err[ERRLEN];
    cr_assert_eq(s3_parse_uri("s3://my-bucket/some/prefix/", b, sizeof b, p, sizeof p, err,
                              sizeof err), 0, "%s", err);
    cr_assert_str_eq(b, "my-bucket");
    cr_assert_str_eq(p, "some/prefix/");
    cr_assert_eq(s3_parse_uri("s3://bkt", b, sizeof b, p, sizeof p, err, sizeof err), 0);
    cr_assert_str_eq(b, "bkt");
    cr_assert_str_eq(p, "");
    cr_assert_eq(s3_parse_uri("s3://bkt/", b, sizeof b, p, sizeof p, err, sizeof err), 0);
    cr_assert_str_eq(p, "");
    const char *bad[] = {"http://bkt/x", "s3:/bkt", "s3://", "s3://ab/x", "s3://Upper/x",
                         "s3://under_score", NULL};
    for (int i = 0; bad[i]; i++) {
        err[0] = '\0';
        cr_assert_eq(s3_parse_uri(bad[i], b, sizeof b, p, sizeof p, err, sizeof err), -1,
                     "%s accepted", bad[i]);
        cr_assert(strstr(err, bad[i]), "the message names the URI: %s", err);
    }
    char small[4];
    cr_assert_eq(s3_parse_uri("s3://bucket/x", small, sizeof small, p, sizeof p, err,
                              sizeof err), -1, "a bucket longer than the buffer");
}

Test(s3, uri_encode_keeps_unreserved_bytes_and_slash_only_when_asked_with_uppercase_hex)
{
    char *e = s3_uri_encode("a-Z_0.~/b c+=é%", 1);
    cr_assert_str_eq(e, "a-Z_0.~/b%20c%2B%3D%C3%A9%25");
    free(e);
    e = s3_uri_encode("a/b:c,d@e&f$g'h!i*j(k)l;m", 0);
    cr_assert_str_eq(e, "a%2Fb%3Ac%2Cd%40e%26f%24g%27h%21i%2Aj%28k%29l%3Bm");
    free(e);
    e = s3_uri_encode("", 0);
    cr_assert_str_eq(e, "");
    free(e);
}

Test(s3, status_names_and_which_statuses_may_pass_later)
{
    cr_assert_str_eq(s3_status_name(S3_NO_BUCKET), "no_bucket");
    cr_assert_str_eq(s3_status_name(S3_BAD_SIGNATURE), "bad_signature");
    cr_assert(s3_status_retryable(S3_UNREACHABLE));
    cr_assert(s3_status_retryable(S3_TRANSIENT));
    cr_assert(!s3_status_retryable(S3_DENIED));
    cr_assert(!s3_status_retryable(S3_NOT_FOUND));
    cr_assert(!s3_status_retryable(S3_INVALID));
}

Test(s3, new_without_credentials_in_the_environment_is_invalid)
{
    char err[ERRLEN];
    s3_client *c = (s3_client *)1;
    unsetenv("AWS_ACCESS_KEY_ID");
    setenv("AWS_SECRET_ACCESS_KEY", "x", 1);
    cr_assert_eq(s3_new(NULL, &c, err, sizeof err), S3_INVALID);
    cr_assert_null(c);
    cr_assert(strstr(err, "AWS_ACCESS_KEY_ID"), "%s", err);
    s3_options o = {.endpoint = "ftp://x"};
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    cr_assert_eq(s3_new(&o, &c, err, sizeof err), S3_INVALID, "a non-http endpoint");
}

/* ------------------------------------------------------------ against moto */

Test(s3, put_then_get_ranges_get_all_head_and_delete_round_trip)
{
    s3_client *c = client();
    char err[ERRLEN];
    unsigned char data[1000], out[1000];
    fill(data, sizeof data, 1);
    cr_assert_eq(s3_put(c, "vj-basic", "dir/small.bin", data, sizeof data, err, sizeof err),
                 S3_OK, "%s", err);
    uint64_t size = 0;
    cr_assert_eq(s3_head(c, "vj-basic", "dir/small.bin", &size, err, sizeof err), S3_OK, "%s", err);
    cr_assert_eq(size, 1000);
    size_t got = 0;
    cr_assert_eq(s3_get(c, "vj-basic", "dir/small.bin", 100, 200, out, &got, err, sizeof err),
                 S3_OK, "%s", err);
    cr_assert_eq(got, 200);
    cr_assert_arr_eq(out, data + 100, 200, "the range bytes=100-299");
    /* a range over the end: only what is there */
    cr_assert_eq(s3_get(c, "vj-basic", "dir/small.bin", 900, 500, out, &got, err, sizeof err),
                 S3_OK, "%s", err);
    cr_assert_eq(got, 100);
    cr_assert_arr_eq(out, data + 900, 100);
    /* a range past the end: nothing, and no error */
    cr_assert_eq(s3_get(c, "vj-basic", "dir/small.bin", 1000, 10, out, &got, err, sizeof err),
                 S3_OK, "%s", err);
    cr_assert_eq(got, 0);
    /* len 0: existence */
    cr_assert_eq(s3_get(c, "vj-basic", "dir/small.bin", 0, 0, out, &got, err, sizeof err), S3_OK);
    void *all = NULL;
    size_t len = 0;
    cr_assert_eq(s3_get_all(c, "vj-basic", "dir/small.bin", 1000, &all, &len, err, sizeof err),
                 S3_OK, "%s", err);
    cr_assert_eq(len, 1000);
    cr_assert_arr_eq(all, data, 1000);
    cr_assert_eq(((char *)all)[1000], '\0', "NUL after the bytes");
    free(all);
    cr_assert_eq(s3_get_all(c, "vj-basic", "dir/small.bin", 999, &all, &len, err, sizeof err),
                 S3_INVALID, "one byte over max");
    cr_assert_null(all);
    /* an empty object */
    cr_assert_eq(s3_put(c, "vj-basic", "empty", "", 0, err, sizeof err), S3_OK, "%s", err);
    cr_assert_eq(s3_get_all(c, "vj-basic", "empty", 10, &all, &len, err, sizeof err), S3_OK);
    cr_assert_eq(len, 0);
    free(all);
    cr_assert_eq(s3_delete(c, "vj-basic", "dir/small.bin", err, sizeof err), S3_OK, "%s", err);
    cr_assert_eq(s3_head(c, "vj-basic", "dir/small.bin", &size, err, sizeof err), S3_NOT_FOUND);
    cr_assert_eq(s3_get(c, "vj-basic", "dir/small.bin", 0, 0, out, &got, err, sizeof err),
                 S3_NOT_FOUND);
    cr_assert_eq(s3_delete(c, "vj-basic", "dir/small.bin", err, sizeof err), S3_OK,
                 "deleting an absent key is fine: %s", err);
    cr_assert_eq(s3_delete(c, "vj-basic", "never-was", err, sizeof err), S3_OK, "%s", err);
    s3_free(c);
}

Test(s3, multipart_put_of_12_mib_in_5_mib_parts_in_parallel_reads_back_identical_in_boto3)
{
    use_moto();
    int pport;
    pid_t proxy = proxy_start("multi", NULL, &pport);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.multipart_threshold = 6 * MIB,
                                              .part_size = 5 * MIB, .parallel = 3});
    char err[ERRLEN], sha[65], want[256];
    size_t n = 12 * MIB;
    unsigned char *data = malloc(n);
    fill(data, n, 7);
    cr_assert_eq(s3_put(c, "vj-multi", "big/obj", data, n, err, sizeof err), S3_OK, "%s", err);
    char *st = proxy_stats("multi");
    /* Create, 3 parts, Complete: it went multipart, parts side by side */
    cr_assert(strncmp(st, "requests=5 fail500=0 resets=0 ", 30) == 0, "%s", st);
    cr_assert(strstr(st, "maxinflight=2") || strstr(st, "maxinflight=3"), "%s", st);
    free(st);
    size_t got = 0;
    unsigned char *back = malloc(n);
    cr_assert_eq(s3_get(c, "vj-multi", "big/obj", 0, n, back, &got, err, sizeof err), S3_OK,
                 "%s", err);
    cr_assert_eq(got, n);
    cr_assert(memcmp(back, data, n) == 0, "the bytes read back");
    /* a range across the part boundary */
    cr_assert_eq(s3_get(c, "vj-multi", "big/obj", 5 * MIB - 10, 20, back, &got, err, sizeof err),
                 S3_OK);
    cr_assert_arr_eq(back, data + 5 * MIB - 10, 20);
    sha_hex(data, n, sha);
    snprintf(want, sizeof want, "big/obj\t%zu\t%s\n", n, sha);
    char *b = boto("vj-multi", "big/", 0);
    cr_assert_str_eq(b, want);
    free(b);
    free(data);
    free(back);
    s3_free(c);
    stop(proxy);
}

Test(s3, list_follows_continuation_tokens_and_folds_common_prefixes_sorted)
{
    s3_client *c = client_at(use_moto(), (s3_options){.list_page_size = 2});
    char err[ERRLEN];
    const char *keys[] = {"p/e", "p/a", "p/d/x", "p/c", "p/b", "p/d/y", "q/other", NULL};
    for (int i = 0; keys[i]; i++)
        cr_assert_eq(s3_put(c, "vj-list", keys[i], keys[i], strlen(keys[i]), err, sizeof err),
                     S3_OK, "%s", err);
    s3_listing l = {0};
    cr_assert_eq(s3_list(c, "vj-list", "p/", NULL, &l, err, sizeof err), S3_OK, "%s", err);
    const char *want[] = {"p/a", "p/b", "p/c", "p/d/x", "p/d/y", "p/e"};
    cr_assert_eq(l.n, 6, "all pages: %zu", l.n);
    for (size_t i = 0; i < l.n; i++) {
        cr_assert_str_eq(l.items[i].key, want[i]);
        cr_assert_eq(l.items[i].size, strlen(want[i]));
        cr_assert(!l.items[i].is_prefix);
    }
    s3_listing_free(&l);
    cr_assert_null(l.items);
    cr_assert_eq(s3_list(c, "vj-list", "p/", "/", &l, err, sizeof err), S3_OK, "%s", err);
    const char *want2[] = {"p/a", "p/b", "p/c", "p/d/", "p/e"};
    cr_assert_eq(l.n, 5, "%zu items", l.n);
    for (size_t i = 0; i < l.n; i++) {
        cr_assert_str_eq(l.items[i].key, want2[i]);
        cr_assert_eq(l.items[i].is_prefix, strcmp(want2[i], "p/d/") == 0);
    }
    s3_listing_free(&l);
    /* one page: S3 sends the keys, then the prefixes; the listing is sorted all the same */
    s3_client *one = client_at(endpoint, (s3_options){0});
    cr_assert_eq(s3_list(one, "vj-list", "p/", "/", &l, err, sizeof err), S3_OK, "%s", err);
    cr_assert_eq(l.n, 5, "%zu items", l.n);
    for (size_t i = 0; i < l.n; i++) cr_assert_str_eq(l.items[i].key, want2[i]);
    s3_listing_free(&l);
    s3_free(one);
    cr_assert_eq(s3_list(c, "vj-list", "none/", NULL, &l, err, sizeof err), S3_OK);
    cr_assert_eq(l.n, 0);
    s3_listing_free(&l);
    s3_free(c);
}

Test(s3, keys_with_spaces_and_punctuation_round_trip_and_boto3_lists_and_reads_what_we_do)
{
    s3_client *c = client_at(use_moto(), (s3_options){.list_page_size = 3});
    char err[ERRLEN];
    const char *keys[] = {"odd/a b", "odd/x=y+z", "odd/tilde~star*", "odd/(paren)", "odd/é",
                          "odd/colon:comma,semi;", "odd/at@amp&dollar$", "odd/quote'bang!",
                          "odd/per%cent", "odd/sp ace/and/slash", "odd/<lt>&gt\"", NULL};
    for (int i = 0; keys[i]; i++) {
        char body[64];
        int n = snprintf(body, sizeof body, "body of %d", i);
        cr_assert_eq(s3_put(c, "vj-odd", keys[i], body, (size_t)n, err, sizeof err), S3_OK,
                     "%s: %s", keys[i], err);
        uint64_t size = 0;
        cr_assert_eq(s3_head(c, "vj-odd", keys[i], &size, err, sizeof err), S3_OK, "%s", err);
        cr_assert_eq(size, (uint64_t)n);
    }
    /* the prefix itself holds characters to encode */
    s3_listing l = {0};
    cr_assert_eq(s3_list(c, "vj-odd", "odd/x=y+", NULL, &l, err, sizeof err), S3_OK, "%s", err);
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].key, "odd/x=y+z");
    s3_listing_free(&l);
    char *ours = our_view(c, "vj-odd", "odd/");
    char *theirs = boto("vj-odd", "odd/", 0);
    cr_assert_str_eq(ours, theirs);
    int lines = 0;
    for (char *p = ours; *p; p++) lines += *p == '\n';
    cr_assert_eq(lines, 11, "%s", ours);
    free(ours);
    free(theirs);
    s3_free(c);
}

Test(s3, virtual_hosted_style_round_trip_through_bucket_dot_localhost)
{
    use_moto();
    /* curl resolves *.localhost to the loopback; the proxy logs what it got */
    char ep[128], log[512], want[256];
    snprintf(log, sizeof log, "%s/vhost.requests", run_dir);
    const char *flags[] = {"--log", log, NULL};
    int pport;
    pid_t proxy = proxy_start("vhost", flags, &pport);
    snprintf(ep, sizeof ep, "http://localhost:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.path_style = 2});
    char err[ERRLEN];
    cr_assert_eq(s3_put(c, "vj-vhost", "v/k 1", "abc", 3, err, sizeof err), S3_OK, "%s", err);
    char *seen = read_text(log);
    snprintf(want, sizeof want, "PUT /v/k%%201 vj-vhost.localhost:%d\n", pport);
    cr_assert_str_eq(seen, want, "the bucket in the host name, not the path: %s", seen);
    free(seen);
    s3_listing l = {0};
    cr_assert_eq(s3_list(c, "vj-vhost", "v/", NULL, &l, err, sizeof err), S3_OK, "%s", err);
    cr_assert_eq(l.n, 1);
    cr_assert_str_eq(l.items[0].key, "v/k 1");
    s3_listing_free(&l);
    char *b = boto("vj-vhost", "v/", 0);
    cr_assert(strncmp(b, "v/k 1\t3\t", 8) == 0, "%s", b);
    free(b);
    s3_free(c);
    stop(proxy);
}

/* ------------------------------------------------------------ errors */

Test(s3, wrong_secret_is_bad_signature_and_the_message_never_holds_the_secret)
{
    use_moto();
    setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-x9Q7", 1);
    s3_client *c = client_at(endpoint, (s3_options){0});
    char err[ERRLEN];
    s3_status st = s3_put(c, "vj-errors", "k", "x", 1, err, sizeof err);
    cr_assert_eq(st, S3_BAD_SIGNATURE, "%s: %s", s3_status_name(st), err);
    cr_assert(!s3_status_retryable(st));
    cr_assert(strstr(err, "s3 PUT bucket=vj-errors key=k: "), "%s", err);
    cr_assert(strstr(err, "SignatureDoesNotMatch"), "%s", err);
    cr_assert(strstr(err, endpoint), "names the endpoint: %s", err);
    cr_assert_null(strstr(err, "not-the-secret-x9Q7"), "%s", err);
    s3_free(c);
}

Test(s3, unknown_access_key_id_is_denied)
{
    use_moto();
    setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000", 1);
    s3_client *c = client_at(endpoint, (s3_options){0});
    char err[ERRLEN];
    s3_listing l = {0};
    s3_status st = s3_list(c, "vj-errors", "", NULL, &l, err, sizeof err);
    cr_assert_eq(st, S3_DENIED, "%s: %s", s3_status_name(st), err);
    cr_assert(strstr(err, "InvalidAccessKeyId"), "%s", err);
    s3_free(c);
}

Test(s3, session_token_is_sent_and_an_unknown_one_is_denied_without_showing_it)
{
    use_moto();
    setenv("AWS_SESSION_TOKEN", "bogus-session-token-Zz9", 1);
    s3_client *c = client_at(endpoint, (s3_options){0});
    char err[ERRLEN], out[4];
    size_t got;
    /* a GET: its error reply has a body (S3 answers 400 InvalidToken) */
    s3_status st = s3_get(c, "vj-errors", "k", 0, sizeof out, out, &got, err, sizeof err);
    cr_assert_eq(st, S3_DENIED, "%s: %s", s3_status_name(st), err);
    cr_assert(strstr(err, "InvalidToken"), "%s", err);
    cr_assert_null(strstr(err, "bogus-session-token-Zz9"), "%s", err);
    s3_free(c);
}

Test(s3, missing_bucket_is_no_bucket_with_code_and_message)
{
    s3_client *c = client();
    char err[ERRLEN], want[512];
    s3_status st = s3_put(c, "vj-no-such-bucket", "k", "x", 1, err, sizeof err);
    cr_assert_eq(st, S3_NO_BUCKET, "%s: %s", s3_status_name(st), err);
    snprintf(want, sizeof want, "s3 PUT bucket=vj-no-such-bucket key=k: no such bucket "
             "(NoSuchBucket: The specified bucket does not exist) at %s", endpoint);
    cr_assert_str_eq(err, want);
    s3_listing l = {0};
    cr_assert_eq(s3_list(c, "vj-no-such-bucket", "", NULL, &l, err, sizeof err), S3_NO_BUCKET,
                 "%s", err);
    s3_free(c);
}

Test(s3, get_of_a_missing_key_is_not_found)
{
    s3_client *c = client();
    char err[ERRLEN], out[8];
    size_t got = 1;
    s3_status st = s3_get(c, "vj-errors", "no/such/key", 0, sizeof out, out, &got, err, sizeof err);
    cr_assert_eq(st, S3_NOT_FOUND, "%s: %s", s3_status_name(st), err);
    cr_assert_eq(got, 0);
    cr_assert(strstr(err, "NoSuchKey"), "%s", err);
    cr_assert(strstr(err, "key=no/such/key"), "%s", err);
    void *all = (void *)1;
    size_t len;
    cr_assert_eq(s3_get_all(c, "vj-errors", "no/such/key", 10, &all, &len, err, sizeof err),
                 S3_NOT_FOUND);
    cr_assert_null(all);
    s3_free(c);
}

Test(s3, nothing_listening_is_unreachable_retryable_and_within_the_deadline)
{
    use_moto();
    /* a port that was free a moment ago */
    s3_client *c = client_at("http://127.0.0.1:9", (s3_options){.deadline_s = 1.5,
                                                                  .max_attempts = 100,
                                                                  .backoff_s = 0.05});
    char err[ERRLEN];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    s3_status st = s3_put(c, "vj-errors", "k", "x", 1, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_assert_eq(st, S3_UNREACHABLE, "%s: %s", s3_status_name(st), err);
    cr_assert(s3_status_retryable(st));
    cr_assert(strstr(err, "127.0.0.1:9"), "%s", err);
    cr_assert(strstr(err, "attempts"), "says it retried: %s", err);
    /* without the deadline, 100 attempts backing off from 0.05 s doubling
     * would take hours: 20 s tells the two apart on any machine */
    cr_assert(s < 20.0, "gave up after %.2f s with a 1.5 s deadline", s);
    cr_assert(s > 0.2, "retried for a while (%.2f s)", s);
    s3_free(c);
    /* and max_attempts bounds it too */
    c = client_at("http://127.0.0.1:9", (s3_options){.max_attempts = 2, .backoff_s = 0.01});
    cr_assert_eq(s3_head(c, "vj-errors", "k", NULL, err, sizeof err), S3_UNREACHABLE);
    cr_assert(strstr(err, "after 2 attempts"), "%s", err);
    s3_free(c);
}

Test(s3, put_and_get_pass_after_500s_and_resets_from_the_proxy)
{
    use_moto();
    const char *flags[] = {"--fail-500", "2", "--reset", "2", NULL};
    int pport;
    pid_t proxy = proxy_start("retry", flags, &pport);
    char ep[64], err[ERRLEN];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.max_attempts = 6, .backoff_s = 0.02});
    unsigned char data[4096], out[4096];
    fill(data, sizeof data, 3);
    cr_assert_eq(s3_put(c, "vj-retry", "r/k", data, sizeof data, err, sizeof err), S3_OK, "%s",
                 err);
    char *st = proxy_stats("retry");
    cr_assert(strncmp(st, "requests=5 fail500=2 resets=2 ", 30) == 0, "4 failed, the 5th "
              "passed: %s", st);
    free(st);
    s3_free(c);
    stop(proxy);

    /* a GET: two 500s use up its two attempts; the next call passes a reset */
    const char *flags2[] = {"--fail-500", "2", "--reset", "1", NULL};
    proxy = proxy_start("retry2", flags2, &pport);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    c = client_at(ep, (s3_options){.max_attempts = 2, .backoff_s = 0.02});
    size_t got = 0;
    s3_status s = s3_get(c, "vj-retry", "r/k", 0, sizeof out, out, &got, err, sizeof err);
    cr_assert_eq(s, S3_TRANSIENT, "%s: %s", s3_status_name(s), err);
    cr_assert(s3_status_retryable(s));
    cr_assert_eq(s3_get(c, "vj-retry", "r/k", 0, sizeof out, out, &got, err, sizeof err), S3_OK,
                 "%s", err);
    cr_assert_eq(got, sizeof data);
    cr_assert_arr_eq(out, data, sizeof data);
    s3_free(c);
    stop(proxy);
}

/* Something in front of the store (a load balancer, an ingress) answers
 * 502 or 503 with its own HTML page: no S3 <Code>, and not XML at all. It may
 * pass like S3's InternalError, so it is retried; the operation then
 * succeeds. */
Test(s3, html_502_and_503_from_a_load_balancer_are_retried_until_the_store_answers)
{
    use_moto();
    const char *flags[] = {"--fail-500", "3", "--fail-status", "502,503", "--fail-html", NULL};
    int pport;
    pid_t proxy = proxy_start("lb", flags, &pport);
    char ep[64], err[ERRLEN];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.max_attempts = 5, .backoff_s = 0.01});
    unsigned char data[1000], out[1000];
    fill(data, sizeof data, 7);
    cr_assert_eq(s3_put(c, "vj-retry", "lb/k", data, sizeof data, err, sizeof err), S3_OK, "%s",
                 err);
    char *st = proxy_stats("lb");
    cr_assert(strncmp(st, "requests=4 fail500=3 ", 21) == 0, "3 HTML answers, the 4th passed: %s",
              st);
    free(st);
    size_t got = 0;
    cr_assert_eq(s3_get(c, "vj-retry", "lb/k", 0, sizeof out, out, &got, err, sizeof err), S3_OK,
                 "%s", err);
    cr_assert_eq(got, sizeof data);
    cr_assert_arr_eq(out, data, sizeof data);
    s3_free(c);
    stop(proxy);
}

/* The HTML 500 never ends: giving up is retryable (transient) and names the
 * HTTP status, not a code the page does not hold, nor the page itself. */
Test(s3, html_500s_that_never_end_give_up_naming_the_status)
{
    use_moto();
    const char *flags[] = {"--fail-500", "1000", "--fail-status", "500", "--fail-html", NULL};
    int pport;
    pid_t proxy = proxy_start("lb500", flags, &pport);
    char ep[64], err[ERRLEN];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.max_attempts = 3, .backoff_s = 0.01});
    s3_status st = s3_put(c, "vj-retry", "lb/never", "x", 1, err, sizeof err);
    cr_assert_eq(st, S3_TRANSIENT, "%s: %s", s3_status_name(st), err);
    cr_assert(s3_status_retryable(st));
    cr_assert(strstr(err, "(HTTP 500) at http://127.0.0.1:"), "%s", err);
    cr_assert(strstr(err, "gave up after 3 attempts"), "%s", err);
    cr_assert(!strstr(err, "<") && !strstr(err, "nginx"), "no HTML in the message: %s", err);
    char *stats = proxy_stats("lb500");
    cr_assert(strncmp(stats, "requests=3 fail500=3 ", 21) == 0, "%s", stats);
    free(stats);
    /* a GET and a HEAD (no body at all) meet the same */
    size_t got = 0;
    unsigned char out[16];
    st = s3_get(c, "vj-retry", "lb/never", 0, sizeof out, out, &got, err, sizeof err);
    cr_assert_eq(st, S3_TRANSIENT, "%s: %s", s3_status_name(st), err);
    cr_assert(strstr(err, "HTTP 500"), "%s", err);
    st = s3_head(c, "vj-retry", "lb/never", NULL, err, sizeof err);
    cr_assert_eq(st, S3_TRANSIENT, "%s: %s", s3_status_name(st), err);
    cr_assert(strstr(err, "HTTP 500"), "%s", err);
    s3_free(c);
    stop(proxy);
}

/* The store answered once (500 InternalError), then reset every
 * connection: the message gives up naming the answer, the strongest cause,
 * with the resets as the last attempt's error, not the resets alone. */
Test(s3, giving_up_names_the_stores_answer_before_the_resets_that_followed)
{
    use_moto();
    const char *flags[] = {"--fail-500", "1", "--reset", "100", NULL};
    int pport;
    pid_t proxy = proxy_start("strongest", flags, &pport);
    char ep[64], err[ERRLEN];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.max_attempts = 3, .backoff_s = 0.01});
    s3_status st = s3_put(c, "vj-retry", "strong/k", "x", 1, err, sizeof err);
    cr_assert_eq(st, S3_TRANSIENT, "%s: %s", s3_status_name(st), err);
    const char *ans = strstr(err, "InternalError"), *last = strstr(err, "; last: ");
    cr_assert(ans && last && ans < last, "the answer first, then the last error: %s", err);
    cr_assert(strstr(last, "curl error"), "the last attempt's reset: %s", err);
    cr_assert(strstr(err, "gave up after 3 attempts"), "%s", err);
    s3_free(c);
    stop(proxy);
}

/* A sink that rebuilds the range in a buffer and counts restarts; it stops
 * the transfer after stop_at bytes when that is set. */
typedef struct {
    unsigned char *out;
    size_t cap, restarts, stop_at, calls;
} collect;

static int collect_sink(void *ctx, uint64_t pos, const void *data, size_t n)
{
    collect *c = ctx;
    c->calls++;
    if (pos == 0 && c->calls > 1) c->restarts++;
    if (pos + n > c->cap) return 1;
    memcpy(c->out + pos, data, n);
    return c->stop_at && pos + n >= c->stop_at;
}

Test(s3, streamed_get_restarts_at_zero_after_a_reply_cut_midway_and_a_sink_can_stop_it)
{
    use_moto();
    size_t n = 3 * MIB, got = 0;
    unsigned char *data = malloc(n), *back = calloc(1, n);
    fill(data, n, 5);
    char err[ERRLEN];
    s3_client *direct = client();
    cr_assert_eq(s3_put(direct, "vj-retry", "stream/k", data, n, err, sizeof err), S3_OK, "%s",
                 err);
    s3_free(direct);
    const char *flags[] = {"--only-method", "GET", "--cut", "1", NULL};
    int pport;
    pid_t proxy = proxy_start("cut", flags, &pport);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.max_attempts = 3, .backoff_s = 0.02});
    collect col = {.out = back, .cap = n - 100};
    cr_assert_eq(s3_get_stream(c, "vj-retry", "stream/k", 100, n - 100, collect_sink, &col, &got,
                               err, sizeof err), S3_OK, "%s", err);
    char *st = proxy_stats("cut");
    cr_assert(strstr(st, "cuts=1"), "the first reply was cut: %s", st);
    free(st);
    cr_assert_eq(col.restarts, 1, "the retried request started again at byte 0");
    cr_assert_eq(got, n - 100);
    cr_assert_arr_eq(back, data + 100, n - 100);

    collect stopper = {.out = back, .cap = n, .stop_at = 1};
    s3_status s = s3_get_stream(c, "vj-retry", "stream/k", 0, n, collect_sink, &stopper, &got,
                                err, sizeof err);
    cr_assert_eq(s, S3_INVALID, "%s: %s", s3_status_name(s), err);
    cr_assert(strstr(err, "stopped by the reader"), "%s", err);
    cr_assert_eq(stopper.restarts, 0, "a stop is not retried");
    s3_free(c);
    stop(proxy);
    free(data);
    free(back);
}

Test(s3, multipart_put_passes_through_500s_and_resets_on_its_parts)
{
    use_moto();
    const char *flags[] = {"--only-method", "PUT", "--fail-500", "2", "--reset", "2", NULL};
    int pport;
    pid_t proxy = proxy_start("mp-retry", flags, &pport);
    char ep[64], err[ERRLEN];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.multipart_threshold = 5 * MIB,
                                              .part_size = 5 * MIB, .parallel = 2,
                                              .max_attempts = 6, .backoff_s = 0.02});
    size_t n = 11 * MIB;
    unsigned char *data = malloc(n);
    fill(data, n, 11);
    cr_assert_eq(s3_put(c, "vj-retry", "mp/k", data, n, err, sizeof err), S3_OK, "%s", err);
    char *st = proxy_stats("mp-retry");
    cr_assert(strstr(st, "fail500=2 resets=2"), "the faults happened: %s", st);
    free(st);
    char sha[65], want[256];
    sha_hex(data, n, sha);
    snprintf(want, sizeof want, "mp/k\t%zu\t%s\n", n, sha);
    char *b = boto("vj-retry", "mp/", 0);
    cr_assert_str_eq(b, want);
    free(b);
    free(data);
    s3_free(c);
    stop(proxy);
}

Test(s3, multipart_failure_aborts_the_upload_and_leaves_no_object)
{
    use_moto();
    const char *flags[] = {"--only-method", "PUT", "--fail-500", "1000", NULL};
    int pport;
    pid_t proxy = proxy_start("abort", flags, &pport);
    char ep[64], err[ERRLEN];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", pport);
    s3_client *c = client_at(ep, (s3_options){.multipart_threshold = 5 * MIB,
                                              .part_size = 5 * MIB, .parallel = 2,
                                              .max_attempts = 2, .backoff_s = 0.01});
    size_t n = 10 * MIB + 1;
    unsigned char *data = calloc(1, n);
    s3_status st = s3_put(c, "vj-abort", "ab/k", data, n, err, sizeof err);
    cr_assert_eq(st, S3_TRANSIENT, "%s: %s", s3_status_name(st), err);
    cr_assert(strstr(err, "UploadPart") && strstr(err, "InternalError"), "%s", err);
    char *u = boto("vj-abort", "ab/", 1);
    cr_assert_str_eq(u, "", "uploads left in progress: %s", u);
    free(u);
    uint64_t size;
    cr_assert_eq(s3_head(c, "vj-abort", "ab/k", &size, err, sizeof err), S3_NOT_FOUND);
    free(data);
    s3_free(c);
    stop(proxy);
}
