/* tests/test_source.c - worker/data/source.c: files (file:// URIs and bare
 * paths) read whole in odd-sized pieces, from an offset, refused at open
 * when missing or not regular, listed and read whole; S3 objects against
 * moto's server (tests/s3/moto_server.py, signatures checked) read in small
 * ranged GETs, from an offset, listed over several ListObjectsV2 pages, the
 * errors that cannot pass failed at once, and connections cut mid-range
 * (tests/s3/fault_proxy.py) resumed at the first byte not received, as the
 * proxy's log of Range headers shows.
 *
 * One moto server for the whole run, started by a PRE_ALL report hook as
 * tests/test_s3.c does; the S3 tests skip, saying why, without a Python
 * that imports moto and boto3 ($VITJOB_TEST_PYTHON, else python3). Every
 * test uses keys of its own in the one bucket. Run from the repository
 * root. Nothing here waits on time for its outcome: a test that watches the
 * fetcher polls the proxy's log until what it expects appears. */
#include "source.h"

#include "s3.h"
#include "tar.h"
#include "tar_fixture.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ERRLEN 2048
#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define BUCKET "vj-src"

TestSuite(source, .timeout = 240);

/* ------------------------------------------------------------ helpers */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (unsigned char)(seed >> 16);
    }
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

static void write_file(const char *path, const void *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(d, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

static char tmp[128];
static void make_tmp(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/test_source_XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
}
static void remove_tmp(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    cr_assert_eq(system(cmd), 0);
}

static src_client *new_client(const char *endpoint, size_t chunk, size_t ahead)
{
    char err[ERRLEN];
    src_client *c = NULL;
    cr_assert_eq(src_client_new(&c, endpoint, chunk, ahead, err, sizeof err), 0, "%s", err);
    /* quick retries, so that the fault tests take no time */
    src_client_tune(c, &(src_tuning){.attempts = 5, .backoff_s = 0.01});
    return c;
}

/* Reads the stream to its end in pieces of the sizes given in turn (0 ends
 * the list); the bytes (malloc'd) and their count in *n. */
static unsigned char *read_stream(src_stream *s, const size_t *sizes, size_t *n)
{
    size_t cap = 1 << 16, len = 0;
    unsigned char *b = malloc(cap);
    for (size_t i = 0;; i++) {
        size_t want = sizes[i % 64] ? sizes[i % 64] : sizes[0];
        if (!sizes[i % 64]) i = 0;
        if (len + want > cap) {
            while (len + want > cap) cap *= 2;
            b = realloc(b, cap);
        }
        ssize_t got = src_read(s, b + len, want);
        cr_assert(got >= 0, "read failed at %zu: %s", len, src_error(s));
        cr_assert(got <= (ssize_t)want);
        if (got == 0) break;
        len += (size_t)got;
    }
    *n = len;
    return b;
}

/* the first index where a and b differ, or n */
static size_t first_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static const size_t ODD[64] = {1, 7, 4093, 65537, 3, 131071, 512, 0};

/* ------------------------------------------------------------ moto */

static char run_dir[256];
static pid_t moto_pid = -1;

static const char *python(void)
{
    const char *p = getenv("VITJOB_TEST_PYTHON");
    if (p && *p) return p;
    if (system("python3 -c 'import moto, boto3' >/dev/null 2>&1") == 0) return "python3";
    return NULL;
}

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

/* Waits (up to 60 s) for path to exist while pid lives. */
static int wait_file(const char *path, pid_t pid)
{
    for (int i = 0; i < 1200; i++) {
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
    snprintf(run_dir, sizeof run_dir, "/tmp/vitjob-src-XXXXXX");
    if (!mkdtemp(run_dir)) return;
    char env[512], log[512];
    snprintf(env, sizeof env, "%s/moto.env", run_dir);
    snprintf(log, sizeof log, "%s/moto.log", run_dir);
    const char *argv[] = {"tests/s3/moto_server.py", "--port", "0", "--env-out", env,
                          "--bucket", BUCKET, NULL};
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

/* The launcher's variables into this test's environment (skips when the
 * S3 tests cannot run here); returns moto's endpoint. */
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
    snprintf(run_dir, sizeof run_dir, "%s", env);
    *strrchr(run_dir, '/') = '\0';
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_CA_BUNDLE");
    snprintf(endpoint, sizeof endpoint, "%s", getenv("S3_ENDPOINT"));
    signal(SIGPIPE, SIG_IGN); /* as the programs do (see http.h) */
    return endpoint;
}

/* Puts n bytes of data as BUCKET/key, straight to moto. */
static void put(const char *key, const void *data, size_t n)
{
    char err[ERRLEN];
    s3_client *s3 = NULL;
    s3_options o = {.endpoint = endpoint};
    cr_assert_eq(s3_new(&o, &s3, err, sizeof err), S3_OK, "%s", err);
    cr_assert_eq(s3_put(s3, BUCKET, key, data, n, err, sizeof err), S3_OK, "%s", err);
    s3_free(s3);
}

/* fault_proxy.py in front of moto with flags; its endpoint into ep. */
static pid_t proxy_start(const char *name, const char *const *flags, char *ep, size_t eplen)
{
    char target[64], ready[512], log[512], stats[512];
    snprintf(target, sizeof target, "%s", strstr(endpoint, "://") + 3);
    snprintf(ready, sizeof ready, "%s/%s.port", run_dir, name);
    snprintf(log, sizeof log, "%s/%s.out", run_dir, name);
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
    snprintf(ep, eplen, "http://127.0.0.1:%d", atoi(t));
    free(t);
    return pid;
}

static char *proxy_file(const char *name, const char *ext)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s", run_dir, name, ext);
    char *t = read_text(path);
    return t ? t : calloc(1, 1);
}

/* The Range headers of the GETs in the proxy's --log --log-range file, in
 * order (at most max; list requests, which have none, left out). */
static int get_ranges(const char *name, char ranges[][64], int max)
{
    char *t = proxy_file(name, "requests");
    int n = 0;
    for (char *save = NULL, *l = strtok_r(t, "\n", &save); l && n < max;
         l = strtok_r(NULL, "\n", &save)) {
        char *r = strrchr(l, ' ');
        if (strncmp(l, "GET ", 4) != 0 || !r || strcmp(r + 1, "-") == 0) continue;
        snprintf(ranges[n++], 64, "%s", r + 1);
    }
    free(t);
    return n;
}

/* Polls (up to 60 s) until the proxy has logged at least want ranged GETs. */
static int wait_gets(const char *name, int want)
{
    char r[64][64];
    int n = 0;
    for (int i = 0; i < 1200 && (n = get_ranges(name, r, 64)) < want; i++) sleep_ms(50);
    return n;
}

/* ------------------------------------------------------------ files */

Test(source, file_uri_and_bare_path_read_in_odd_sized_pieces_equal_the_file, .init = make_tmp,
     .fini = remove_tmp)
{
    size_t n = MIB + 12345;
    unsigned char *data = malloc(n);
    fill(data, n, 1);
    char path[256], uri[300], err[ERRLEN];
    snprintf(path, sizeof path, "%s/shard-000.tar", tmp);
    write_file(path, data, n);
    snprintf(uri, sizeof uri, "file://%s", path);
    src_client *c = new_client(NULL, 64 * KIB, 128 * KIB);
    const char *uris[] = {uri, path};
    for (int i = 0; i < 2; i++) {
        src_stream *s = NULL;
        cr_assert_eq(src_open(c, uris[i], 0, &s, err, sizeof err), 0, "%s", err);
        cr_assert_eq(src_size(s), n);
        size_t got = 0;
        unsigned char *back = read_stream(s, ODD, &got);
        cr_assert_eq(got, n, "%s: %zu bytes", uris[i], got);
        cr_assert(memcmp(back, data, n) == 0, "%s: the bytes", uris[i]);
        unsigned char one;
        cr_assert_eq(src_read(s, &one, 1), 0, "the end stays the end");
        cr_assert_str_eq(src_error(s), "");
        free(back);
        src_close(s);
    }
    src_client_free(c);
    free(data);
}

Test(source, file_opened_at_an_offset_reads_from_there_the_end_is_empty_and_past_it_is_an_error,
     .init = make_tmp, .fini = remove_tmp)
{
    size_t n = 300000;
    unsigned char *data = malloc(n);
    fill(data, n, 2);
    char path[256], err[ERRLEN];
    snprintf(path, sizeof path, "%s/x.tar", tmp);
    write_file(path, data, n);
    src_client *c = new_client(NULL, 0, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, path, 123457, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(src_size(s), n, "the whole file's size, whatever the offset");
    size_t got = 0;
    unsigned char *back = read_stream(s, ODD, &got);
    cr_assert_eq(got, n - 123457);
    cr_assert(memcmp(back, data + 123457, got) == 0);
    free(back);
    src_close(s);
    cr_assert_eq(src_open(c, path, n, &s, err, sizeof err), 0, "%s", err);
    unsigned char one;
    cr_assert_eq(src_read(s, &one, 1), 0);
    src_close(s);
    s = (src_stream *)1;
    cr_assert_eq(src_open(c, path, n + 1, &s, err, sizeof err), -1);
    cr_assert_null(s);
    char want[512];
    snprintf(want, sizeof want, "%s: offset 300001 is past its end (300000 bytes)", path);
    cr_assert_str_eq(err, want);
    src_client_free(c);
    free(data);
}

Test(source, missing_file_directory_and_fifo_are_errors_at_open_naming_the_uri, .init = make_tmp,
     .fini = remove_tmp)
{
    char uri[300], fifo[256], want[512], err[ERRLEN];
    src_client *c = new_client(NULL, 0, 0);
    src_stream *s = NULL;
    snprintf(uri, sizeof uri, "file://%s/train-000003.tar", tmp);
    cr_assert_eq(src_open(c, uri, 0, &s, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: No such file or directory", uri);
    cr_assert_str_eq(err, want);
    cr_assert_null(s);

    snprintf(uri, sizeof uri, "file://%s", tmp);
    cr_assert_eq(src_open(c, uri, 0, &s, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: is a directory, not a regular file", uri);
    cr_assert_str_eq(err, want);

    /* a FIFO with no writer: refused at once, never opened (which would block) */
    snprintf(fifo, sizeof fifo, "%s/pipe.tar", tmp);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(src_open(c, fifo, 0, &s, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: is a FIFO, not a regular file", fifo);
    cr_assert_str_eq(err, want);
    unsigned char *all = (unsigned char *)1;
    size_t len = 1;
    cr_assert_eq(src_read_all(c, fifo, 100, &all, &len, err, sizeof err), -1);
    cr_assert_str_eq(err, want);
    cr_assert_null(all);
    cr_assert_eq(len, 0);
    src_client_free(c);
}

Test(source, uris_of_other_schemes_and_file_uris_with_a_host_are_refused)
{
    char err[ERRLEN];
    src_client *c = new_client(NULL, 0, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, "http://host/x.tar", 0, &s, err, sizeof err), -1);
    cr_assert_str_eq(err, "http://host/x.tar: not a data URI (s3://, file:// or a path)");
    cr_assert_eq(src_open(c, "file://host/x.tar", 0, &s, err, sizeof err), -1);
    cr_assert_str_eq(err, "file://host/x.tar: a file:// URI takes an absolute path (file:///...)");
    cr_assert_eq(src_open(c, "s3://b", 0, &s, err, sizeof err), -1);
    cr_assert(strstr(err, "s3://b"), "%s", err);
    cr_assert_eq(src_open(c, "s3://bucket/dir/", 0, &s, err, sizeof err), -1);
    cr_assert_str_eq(err, "s3://bucket/dir/: names no object (the key is empty or ends in '/')");
    src_client_free(c);
}

Test(source, file_that_shrinks_while_read_is_an_error_at_the_byte_where_it_ends,
     .init = make_tmp, .fini = remove_tmp)
{
    unsigned char data[10000], buf[4000];
    fill(data, sizeof data, 3);
    char path[256], err[ERRLEN];
    snprintf(path, sizeof path, "%s/x.tar", tmp);
    write_file(path, data, sizeof data);
    src_client *c = new_client(NULL, 0, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, path, 0, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(src_read(s, buf, sizeof buf), (ssize_t)sizeof buf);
    cr_assert_eq(truncate(path, 6000), 0);
    cr_assert_eq(src_read(s, buf, sizeof buf), 2000, "what is left of it");
    cr_assert_eq(src_read(s, buf, sizeof buf), -1, "then not 0: it is not the end it had");
    char want[512];
    snprintf(want, sizeof want, "%s: ends at byte 6000 of the 10000 it had when opened (it "
             "shrank while read)", path);
    cr_assert_str_eq(src_error(s), want);
    src_close(s);
    src_client_free(c);
}

Test(source, empty_file_reads_as_its_end_at_once, .init = make_tmp, .fini = remove_tmp)
{
    char path[256], err[ERRLEN];
    snprintf(path, sizeof path, "%s/empty.tar", tmp);
    write_file(path, "", 0);
    src_client *c = new_client(NULL, 0, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, path, 0, &s, err, sizeof err), 0, "%s", err);
    unsigned char b[8];
    cr_assert_eq(src_size(s), 0);
    cr_assert_eq(src_read(s, b, sizeof b), 0);
    src_close(s);
    src_close(NULL);
    src_client_free(c);
    src_client_free(NULL);
}

Test(source, list_of_a_directory_is_its_regular_files_with_the_suffix_sorted_bytewise,
     .init = make_tmp, .fini = remove_tmp)
{
    char p[300], err[ERRLEN];
    const char *files[] = {"b.tar", "a.tar", "a-1.tar", "B.tar", "c.txt", "tar", NULL};
    for (int i = 0; files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
        write_file(p, files[i], strlen(files[i]));
    }
    snprintf(p, sizeof p, "%s/d.tar", tmp); /* a directory named like a shard */
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/sub", tmp);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/sub/e.tar", tmp);
    write_file(p, "e", 1);
    snprintf(p, sizeof p, "%s/f.tar", tmp);
    cr_assert_eq(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/g.tar", tmp); /* a link to a regular file counts */
    cr_assert_eq(symlink("a.tar", p), 0);
    snprintf(p, sizeof p, "%s/h.tar", tmp); /* a link to nothing does not */
    cr_assert_eq(symlink("nowhere", p), 0);

    src_client *c = new_client(NULL, 0, 0);
    const char *names[] = {"B.tar", "a-1.tar", "a.tar", "b.tar", "g.tar"};
    char prefix[3][300];
    snprintf(prefix[0], 300, "file://%s/", tmp);
    snprintf(prefix[1], 300, "file://%s", tmp);
    snprintf(prefix[2], 300, "%s", tmp);
    for (int k = 0; k < 3; k++) {
        char **out = NULL;
        size_t n = 0;
        cr_assert_eq(src_list(c, prefix[k], ".tar", &out, &n, err, sizeof err), 0, "%s", err);
        cr_assert_eq(n, 5, "%s: %zu names", prefix[k], n);
        for (size_t i = 0; i < n; i++) {
            char want[1024];
            snprintf(want, sizeof want, "%s%s%s", prefix[k], k == 0 ? "" : "/", names[i]);
            cr_assert_str_eq(out[i], want);
        }
        src_names_free(out, n);
    }
    char **out = NULL;
    size_t n = 9;
    cr_assert_eq(src_list(c, prefix[0], "", &out, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 7, "with no suffix, c.txt and tar too: %zu", n);
    src_names_free(out, n);
    cr_assert_eq(src_list(c, prefix[0], ".zip", &out, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 0, "no match is no error");
    cr_assert_null(out);
    char missing[300], want[400];
    snprintf(missing, sizeof missing, "file://%s/none/", tmp);
    cr_assert_eq(src_list(c, missing, ".tar", &out, &n, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: cannot list it: No such file or directory", missing);
    cr_assert_str_eq(err, want);
    src_client_free(c);
}

Test(source, read_all_of_a_file_is_its_bytes_and_more_than_max_names_both_sizes,
     .init = make_tmp, .fini = remove_tmp)
{
    unsigned char data[5000];
    fill(data, sizeof data, 4);
    char path[256], uri[300], want[512], err[ERRLEN];
    snprintf(path, sizeof path, "%s/x.json", tmp);
    snprintf(uri, sizeof uri, "file://%s", path);
    write_file(path, data, sizeof data);
    src_client *c = new_client(NULL, 0, 0);
    unsigned char *all = NULL;
    size_t len = 0;
    cr_assert_eq(src_read_all(c, uri, 5000, &all, &len, err, sizeof err), 0, "%s", err);
    cr_assert_eq(len, 5000);
    cr_assert(memcmp(all, data, len) == 0);
    cr_assert_eq(all[5000], 0, "a NUL after the bytes");
    free(all);
    cr_assert_eq(src_read_all(c, uri, 4999, &all, &len, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: 5000 bytes, more than the 4999 allowed", uri);
    cr_assert_str_eq(err, want);
    cr_assert_null(all);
    snprintf(path, sizeof path, "%s/none.json", tmp);
    cr_assert_eq(src_read_all(c, path, 10, &all, &len, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: No such file or directory", path);
    cr_assert_str_eq(err, want);
    src_client_free(c);
}

Test(source, client_for_files_needs_no_credentials_and_s3_without_them_fails_at_open,
     .init = make_tmp, .fini = remove_tmp)
{
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    char path[256], err[ERRLEN];
    snprintf(path, sizeof path, "%s/x.tar", tmp);
    write_file(path, "abc", 3);
    src_client *c = new_client("http://127.0.0.1:9", 0, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, path, 0, &s, err, sizeof err), 0, "%s", err);
    src_close(s);
    cr_assert_eq(src_open(c, "s3://bkt/x.tar", 0, &s, err, sizeof err), -1);
    cr_assert(starts(err, "s3://bkt/x.tar: "), "%s", err);
    cr_assert(strstr(err, "AWS_ACCESS_KEY_ID"), "%s", err);
    src_client_free(c);
}

/* A shard of 40 members of 1..60 KiB from tar_writer (out->p the caller's). */
static void make_shard(membuf *out, unsigned char **payload)
{
    static char names[40][32];
    fx_member m[40];
    *payload = malloc(40 * 60 * KIB);
    fill(*payload, 40 * 60 * KIB, 9);
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "%06d.jpg", i);
        m[i] = (fx_member){names[i], (const char *)*payload + (size_t)i * 60 * KIB,
                           (size_t)(i % 60 + 1) * KIB + (size_t)i};
    }
    fx_write(out, m, 40);
}

/* Reads the shard at uri with tar_reader over src_read: every member as written. */
static void check_shard(src_client *c, const char *uri, const unsigned char *payload)
{
    char err[ERRLEN];
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, uri, 0, &s, err, sizeof err), 0, "%s", err);
    tar_reader *r = tar_reader_new(uri, src_read, s, 64 * MIB);
    tar_member m;
    int i = 0, rc;
    while ((rc = tar_reader_next(r, &m, err, sizeof err)) == 1) {
        char want[32];
        snprintf(want, sizeof want, "%06d.jpg", i);
        cr_assert_str_eq(m.name, want);
        cr_assert_eq(m.size, (uint64_t)(i % 60 + 1) * KIB + (uint64_t)i);
        cr_assert(memcmp(m.data, payload + (size_t)i * 60 * KIB, m.size) == 0, "member %d", i);
        i++;
    }
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_eq(i, 40);
    tar_reader_free(r);
    src_close(s);
}

Test(source, tar_reader_reads_a_file_shard_through_src_read, .init = make_tmp, .fini = remove_tmp)
{
    membuf tarb;
    unsigned char *payload;
    make_shard(&tarb, &payload);
    char path[256];
    snprintf(path, sizeof path, "%s/shard.tar", tmp);
    write_file(path, tarb.p, tarb.n);
    src_client *c = new_client(NULL, 64 * KIB, 0);
    check_shard(c, path, payload);
    src_client_free(c);
    free(tarb.p);
    free(payload);
}

/* ------------------------------------------------------------ S3 */

Test(source, s3_object_of_20_mib_read_in_256_kib_ranges_equals_what_was_put)
{
    use_moto();
    size_t n = 20 * MIB + 333;
    unsigned char *data = malloc(n);
    fill(data, n, 11);
    put("big/train-000000.tar", data, n);
    src_client *c = new_client(endpoint, 256 * KIB, 3 * 256 * KIB);
    char err[ERRLEN];
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, "s3://" BUCKET "/big/train-000000.tar", 0, &s, err, sizeof err), 0,
                 "%s", err);
    cr_assert_eq(src_size(s), n);
    size_t got = 0;
    unsigned char *back = read_stream(s, ODD, &got);
    cr_assert_eq(got, n, "%zu bytes", got);
    cr_assert(memcmp(back, data, n) == 0, "the bytes");
    unsigned char one;
    cr_assert_eq(src_read(s, &one, 1), 0, "the end stays the end");
    free(back);
    src_close(s);
    src_client_free(c);
    free(data);
}

Test(source, s3_opened_at_an_offset_reads_from_there_and_past_the_end_is_an_error)
{
    use_moto();
    size_t n = MIB;
    unsigned char *data = malloc(n);
    fill(data, n, 12);
    put("off/x.tar", data, n);
    src_client *c = new_client(endpoint, 64 * KIB, 0);
    char err[ERRLEN];
    src_stream *s = NULL;
    const char *uri = "s3://" BUCKET "/off/x.tar";
    cr_assert_eq(src_open(c, uri, 300001, &s, err, sizeof err), 0, "%s", err);
    cr_assert_eq(src_size(s), n);
    size_t got = 0;
    unsigned char *back = read_stream(s, ODD, &got);
    cr_assert_eq(got, n - 300001);
    cr_assert(memcmp(back, data + 300001, got) == 0);
    free(back);
    src_close(s);
    cr_assert_eq(src_open(c, uri, n, &s, err, sizeof err), 0, "%s", err);
    unsigned char one;
    cr_assert_eq(src_read(s, &one, 1), 0, "opened at its size: nothing to read");
    src_close(s);
    cr_assert_eq(src_open(c, uri, n + 1, &s, err, sizeof err), -1);
    cr_assert_str_eq(err, "s3://" BUCKET "/off/x.tar: offset 1048577 is past its end (1048576 "
                     "bytes)");
    /* an empty object */
    put("off/empty.tar", "", 0);
    cr_assert_eq(src_open(c, "s3://" BUCKET "/off/empty.tar", 0, &s, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(src_size(s), 0);
    cr_assert_eq(src_read(s, &one, 1), 0);
    src_close(s);
    src_client_free(c);
    free(data);
}

Test(source, s3_list_follows_pages_and_keeps_objects_directly_under_the_prefix_with_the_suffix)
{
    use_moto();
    const char *keys[] = {"ls/b.tar", "ls/a.tar", "ls/c.txt", "ls/sub/d.tar", "ls/e.tar",
                          "ls/a-1.tar", "ls/B.tar", "lsx/f.tar", "ls.tar", "ls/", NULL};
    for (int i = 0; keys[i]; i++) put(keys[i], keys[i], strlen(keys[i]));
    char ep[64], log[512], err[ERRLEN];
    snprintf(log, sizeof log, "%s/list.requests", run_dir);
    const char *flags[] = {"--log", log, "--log-range", NULL};
    pid_t proxy = proxy_start("list", flags, ep, sizeof ep);
    src_client *c = new_client(ep, 0, 0);
    src_client_tune(c, &(src_tuning){.list_page_size = 2});
    const char *want[] = {"s3://" BUCKET "/ls/B.tar", "s3://" BUCKET "/ls/a-1.tar",
                          "s3://" BUCKET "/ls/a.tar", "s3://" BUCKET "/ls/b.tar",
                          "s3://" BUCKET "/ls/e.tar"};
    const char *prefixes[] = {"s3://" BUCKET "/ls/", "s3://" BUCKET "/ls"};
    for (int k = 0; k < 2; k++) {
        char **out = NULL;
        size_t n = 0;
        cr_assert_eq(src_list(c, prefixes[k], ".tar", &out, &n, err, sizeof err), 0, "%s", err);
        cr_assert_eq(n, 5, "%s: %zu names", prefixes[k], n);
        for (size_t i = 0; i < n; i++) cr_assert_str_eq(out[i], want[i]);
        src_names_free(out, n);
    }
    /* it took several pages: the later ones asked with a continuation token */
    char *seen = read_text(log);
    cr_assert(seen && strstr(seen, "continuation-token="), "%s", seen ? seen : "no log");
    free(seen);
    char **out = NULL;
    size_t n = 9;
    cr_assert_eq(src_list(c, prefixes[0], ".zip", &out, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 0);
    cr_assert_null(out);
    cr_assert_eq(src_list(c, "s3://" BUCKET "/nothing-here/", ".tar", &out, &n, err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(n, 0);
    cr_assert_eq(src_list(c, "s3://vj-src-none/ls/", ".tar", &out, &n, err, sizeof err), -1);
    cr_assert_str_eq(err, "s3://vj-src-none/ls/: no such bucket vj-src-none");
    src_client_free(c);
    stop(proxy);
}

Test(source, s3_missing_object_or_bucket_is_an_error_at_open_naming_the_uri)
{
    use_moto();
    src_client *c = new_client(endpoint, 0, 0);
    char err[ERRLEN];
    src_stream *s = (src_stream *)1;
    cr_assert_eq(src_open(c, "s3://" BUCKET "/train-000003.tar", 0, &s, err, sizeof err), -1);
    cr_assert_str_eq(err, "s3://" BUCKET "/train-000003.tar: no such object");
    cr_assert_null(s);
    cr_assert_eq(src_open(c, "s3://vj-src-none/train-000003.tar", 0, &s, err, sizeof err), -1);
    cr_assert_str_eq(err, "s3://vj-src-none/train-000003.tar: no such bucket vj-src-none");
    unsigned char *all = (unsigned char *)1;
    size_t len = 1;
    cr_assert_eq(src_read_all(c, "s3://" BUCKET "/none.json", 100, &all, &len, err, sizeof err),
                 -1);
    cr_assert_str_eq(err, "s3://" BUCKET "/none.json: no such object");
    cr_assert_null(all);
    src_client_free(c);
}

Test(source, s3_read_all_is_the_object_and_more_than_max_names_both_sizes)
{
    use_moto();
    unsigned char data[5000];
    fill(data, sizeof data, 13);
    put("ra/x.json", data, sizeof data);
    src_client *c = new_client(endpoint, 0, 0);
    char err[ERRLEN];
    unsigned char *all = NULL;
    size_t len = 0;
    cr_assert_eq(src_read_all(c, "s3://" BUCKET "/ra/x.json", 5000, &all, &len, err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(len, 5000);
    cr_assert(memcmp(all, data, len) == 0);
    cr_assert_eq(all[5000], 0, "a NUL after the bytes");
    free(all);
    cr_assert_eq(src_read_all(c, "s3://" BUCKET "/ra/x.json", 4999, &all, &len, err, sizeof err),
                 -1);
    cr_assert_str_eq(err, "s3://" BUCKET "/ra/x.json: 5000 bytes, more than the 4999 allowed");
    cr_assert_null(all);
    src_client_free(c);
}

Test(source, s3_denied_at_open_is_not_retried)
{
    use_moto();
    put("deny/x.tar", "abc", 3);
    setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000", 1);
    char ep[64], err[ERRLEN];
    pid_t proxy = proxy_start("deny", NULL, ep, sizeof ep);
    src_client *c = new_client(ep, 0, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, "s3://" BUCKET "/deny/x.tar", 0, &s, err, sizeof err), -1);
    cr_assert(starts(err, "s3://" BUCKET "/deny/x.tar: "), "%s", err);
    cr_assert(strstr(err, "access denied"), "%s", err);
    char *st = proxy_file("deny", "stats");
    cr_assert(starts(st, "requests=1 "), "one request, no retry: %s", st);
    free(st);
    src_client_free(c);
    stop(proxy);
}

Test(source, s3_denied_mid_object_fails_the_read_at_once_after_the_bytes_before_it)
{
    use_moto();
    size_t n = 100 * KIB;
    unsigned char *data = malloc(n);
    fill(data, n, 14);
    put("deny2/x.tar", data, n);
    /* the HEAD passes; every GET is answered 403 (with a proxy's HTML: no S3 code) */
    char ep[64], err[ERRLEN];
    const char *flags[] = {"--fail-500", "1000", "--fail-status", "403", "--fail-html",
                           "--only-method", "GET", NULL};
    pid_t proxy = proxy_start("deny2", flags, ep, sizeof ep);
    src_client *c = new_client(ep, 16 * KIB, 0);
    src_stream *s = NULL;
    const char *uri = "s3://" BUCKET "/deny2/x.tar";
    cr_assert_eq(src_open(c, uri, 4096, &s, err, sizeof err), 0, "%s", err);
    unsigned char b[1024];
    cr_assert_eq(src_read(s, b, sizeof b), -1);
    cr_assert(starts(src_error(s), "s3://" BUCKET "/deny2/x.tar: at byte 4096 of 102400: "),
              "%s", src_error(s));
    cr_assert(strstr(src_error(s), "access denied (HTTP 403)"), "%s", src_error(s));
    cr_assert_eq(src_read(s, b, sizeof b), -1, "and stays failed");
    char *st = proxy_file("deny2", "stats");
    cr_assert(starts(st, "requests=2 fail500=1 "), "the HEAD, one GET: %s", st);
    free(st);
    src_close(s);
    src_client_free(c);
    stop(proxy);
    free(data);
}

Test(source, s3_connections_reset_mid_range_are_survived_with_the_bytes_equal)
{
    use_moto();
    size_t n = 2 * MIB + 5;
    unsigned char *data = malloc(n);
    fill(data, n, 15);
    put("cut/x.tar", data, n);
    char ep[64], log[512], err[ERRLEN];
    snprintf(log, sizeof log, "%s/cut.requests", run_dir);
    /* the first three GETs: half the body, then a reset */
    const char *flags[] = {"--cut", "3", "--only-method", "GET", "--log", log, "--log-range", NULL};
    pid_t proxy = proxy_start("cut", flags, ep, sizeof ep);
    src_client *c = new_client(ep, 256 * KIB, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, "s3://" BUCKET "/cut/x.tar", 0, &s, err, sizeof err), 0, "%s", err);
    size_t got = 0;
    unsigned char *back = read_stream(s, ODD, &got);
    cr_assert_eq(got, n);
    cr_assert_eq(first_diff(back, data, n), n, "the bytes");
    free(back);
    src_close(s);
    char *st = proxy_file("cut", "stats");
    cr_assert(strstr(st, "cuts=3"), "%s", st);
    free(st);
    /* a reset may lose bytes in flight, so where each retry starts is not
     * known here (see the next test); but each finishes the first range,
     * from no earlier than the try before it and no later than the half
     * of the rest that the proxy sent */
    char r[16][64];
    int k = get_ranges("cut", r, 16);
    cr_assert(k >= 5, "%d GETs", k);
    cr_assert_str_eq(r[0], "bytes=0-262143");
    unsigned long prev = 0;
    for (int i = 1; i <= 3; i++) {
        unsigned long a = 0, b = 0;
        cr_assert_eq(sscanf(r[i], "bytes=%lu-%lu", &a, &b), 2, "%s", r[i]);
        cr_assert_eq(b, 262143, "retry %d finishes the same range: %s", i, r[i]);
        cr_assert(a >= prev && a <= prev + (262144 - prev) / 2, "retry %d: %s after %lu", i, r[i],
                  prev);
        prev = a;
    }
    cr_assert_str_eq(r[4], "bytes=262144-524287", "then the next range");
    src_client_free(c);
    stop(proxy);
    free(data);
}

Test(source, s3_dropped_connection_resumes_at_the_first_byte_not_received)
{
    use_moto();
    size_t n = MIB;
    unsigned char *data = malloc(n);
    fill(data, n, 16);
    put("resume/x.tar", data, n);
    char ep[64], log[512], err[ERRLEN];
    snprintf(log, sizeof log, "%s/resume.requests", run_dir);
    /* the first three GETs: 50000 bytes of the body, then a clean close, so
     * that every byte sent arrives and where it broke is known */
    const char *flags[] = {"--cut", "3", "--cut-bytes", "50000", "--cut-close", "--only-method",
                           "GET", "--log", log, "--log-range", NULL};
    pid_t proxy = proxy_start("resume", flags, ep, sizeof ep);
    src_client *c = new_client(ep, 256 * KIB, 0);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, "s3://" BUCKET "/resume/x.tar", 1000, &s, err, sizeof err), 0, "%s",
                 err);
    size_t got = 0;
    unsigned char *back = read_stream(s, ODD, &got);
    cr_assert_eq(got, n - 1000);
    cr_assert_eq(first_diff(back, data + 1000, got), got, "the bytes");
    free(back);
    src_close(s);
    char *st = proxy_file("resume", "stats");
    cr_assert(strstr(st, "cuts=3"), "%s", st);
    free(st);
    const char *want[] = {"bytes=1000-263143", "bytes=51000-263143", "bytes=101000-263143",
                          "bytes=151000-263143", "bytes=263144-525287", "bytes=525288-787431",
                          "bytes=787432-1048575"};
    char r[16][64];
    int k = get_ranges("resume", r, 16);
    cr_assert_eq(k, 7, "%d GETs", k);
    for (int i = 0; i < k; i++) cr_assert_str_eq(r[i], want[i], "GET %d", i);
    src_client_free(c);
    stop(proxy);
    free(data);
}

Test(source, s3_range_dropped_before_any_byte_every_time_fails_after_the_attempts)
{
    use_moto();
    size_t n = 100 * KIB;
    unsigned char *data = malloc(n);
    fill(data, n, 17);
    put("giveup/x.tar", data, n);
    char ep[64], err[ERRLEN];
    const char *flags[] = {"--cut", "1000", "--cut-bytes", "0", "--cut-close", "--only-method",
                           "GET", NULL};
    pid_t proxy = proxy_start("giveup", flags, ep, sizeof ep);
    src_client *c = new_client(ep, 64 * KIB, 0);
    src_client_tune(c, &(src_tuning){.attempts = 3, .backoff_s = 0.01});
    src_stream *s = NULL;
    const char *uri = "s3://" BUCKET "/giveup/x.tar";
    cr_assert_eq(src_open(c, uri, 0, &s, err, sizeof err), 0, "%s", err);
    unsigned char b[1024];
    cr_assert_eq(src_read(s, b, sizeof b), -1);
    const char *e = src_error(s);
    cr_assert(starts(e, "s3://" BUCKET "/giveup/x.tar: at byte 0 of 102400: "), "%s", e);
    cr_assert(strstr(e, "gave up after 3 attempts (3 in a row without a byte)"), "%s", e);
    char *st = proxy_file("giveup", "stats");
    cr_assert(strstr(st, "cuts=3"), "three tries, no more: %s", st);
    free(st);
    src_close(s);
    src_client_free(c);
    stop(proxy);
    free(data);
}

Test(source, s3_fetch_starts_at_open_and_stays_within_ahead_bytes_of_the_reader)
{
    use_moto();
    size_t n = 2 * MIB;
    unsigned char *data = malloc(n);
    fill(data, n, 18);
    put("ahead/x.tar", data, n);
    char ep[64], log[512], err[ERRLEN];
    snprintf(log, sizeof log, "%s/ahead.requests", run_dir);
    const char *flags[] = {"--log", log, "--log-range", NULL};
    pid_t proxy = proxy_start("ahead", flags, ep, sizeof ep);
    src_client *c = new_client(ep, 256 * KIB, 512 * KIB);
    src_stream *s = NULL;
    cr_assert_eq(src_open(c, "s3://" BUCKET "/ahead/x.tar", 0, &s, err, sizeof err), 0, "%s",
                 err);
    /* nothing read yet: two ranges come (ahead = 2 chunks), and no third */
    cr_assert_eq(wait_gets("ahead", 2), 2);
    sleep_ms(300); /* room for a wrong third GET to show; the right code never sends it */
    char r[16][64];
    cr_assert_eq(get_ranges("ahead", r, 16), 2, "no more than ahead_bytes before a read");
    cr_assert_str_eq(r[0], "bytes=0-262143");
    cr_assert_str_eq(r[1], "bytes=262144-524287");
    /* one chunk read: room for one more */
    unsigned char *b = malloc(256 * KIB);
    size_t got = 0;
    while (got < 256 * KIB) {
        ssize_t k = src_read(s, b + got, 256 * KIB - got);
        cr_assert(k > 0, "%s", src_error(s));
        got += (size_t)k;
    }
    cr_assert(memcmp(b, data, got) == 0);
    cr_assert_eq(wait_gets("ahead", 3), 3);
    cr_assert_eq(get_ranges("ahead", r, 16), 3);
    cr_assert_str_eq(r[2], "bytes=524288-786431");
    src_close(s); /* mid-object: the fetcher stops */
    free(b);
    src_client_free(c);
    stop(proxy);
    free(data);
}

Test(source, tar_reader_reads_an_s3_shard_through_src_read)
{
    use_moto();
    membuf tarb;
    unsigned char *payload;
    make_shard(&tarb, &payload);
    put("tar/shard-000.tar", tarb.p, tarb.n);
    src_client *c = new_client(endpoint, 100 * KIB, 0); /* members straddle the ranges */
    check_shard(c, "s3://" BUCKET "/tar/shard-000.tar", payload);
    src_client_free(c);
    free(tarb.p);
    free(payload);
}

typedef struct {
    src_client *c;
    char uri[128];
    const unsigned char *data;
    size_t n;
    int ok;
} reader_job;

static void *reader_thread(void *arg)
{
    reader_job *j = arg;
    char err[ERRLEN];
    for (int round = 0; round < 2; round++) {
        src_stream *s = NULL;
        if (src_open(j->c, j->uri, 0, &s, err, sizeof err) != 0) return NULL;
        unsigned char *b = malloc(j->n + 1);
        size_t got = 0;
        ssize_t k;
        while ((k = src_read(s, b + got, j->n + 1 - got > 9999 ? 9999 : j->n + 1 - got)) > 0)
            got += (size_t)k;
        j->ok += k == 0 && got == j->n && memcmp(b, j->data, got) == 0;
        free(b);
        src_close(s);
    }
    return NULL;
}

Test(source, s3_streams_of_one_client_on_four_threads_each_read_their_own_object)
{
    use_moto();
    size_t n = 700 * KIB;
    unsigned char *data = malloc(4 * n);
    fill(data, 4 * n, 19);
    reader_job j[4];
    pthread_t th[4];
    src_client *c = new_client(endpoint, 64 * KIB, 128 * KIB);
    for (int i = 0; i < 4; i++) {
        char key[64];
        snprintf(key, sizeof key, "threads/%d.tar", i);
        put(key, data + (size_t)i * n, n);
        j[i] = (reader_job){.c = c, .data = data + (size_t)i * n, .n = n};
        snprintf(j[i].uri, sizeof j[i].uri, "s3://" BUCKET "/%s", key);
    }
    for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&th[i], NULL, reader_thread, &j[i]), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) cr_assert_eq(j[i].ok, 2, "thread %d", i);
    src_client_free(c);
    free(data);
}
