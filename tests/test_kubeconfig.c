/* tests/test_kubeconfig.c - lib/kubeconfig.c: kubeconfig files (contexts,
 * tokens, certificates inline and as files, errors naming the file and key)
 * and the in-cluster configuration (env, token rotation). */
#include "kube_fixture.h"

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

/* ============================= unit: rotation to a token of the same length
 * A rotated token usually has the length of the one before (the same claims,
 * a new signature), so "changed" must not mean "its size changed". */

static kube_config *in_cluster_at(const char *dir)
{
    char err[ERRLEN];
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    kube_config *c = NULL;
    cr_assert_eq(kube_config_in_cluster(dir, &c, err, sizeof err), 0, "%s", err);
    return c;
}

static void assert_token(kube_config *c, const char *want, const char *why)
{
    char tok[256], err[ERRLEN];
    cr_assert_eq(kube_config_token(c, tok, sizeof tok, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(tok, want, "%s", why);
}

Test(in_cluster, token_of_the_same_length_renamed_into_place_is_used_on_the_next_call)
{
    char dir[256], tmp[600], p[600];
    fake_sa_dir(dir, sizeof dir, "tok-AAAA");
    kube_config *c = in_cluster_at(dir);
    assert_token(c, "tok-AAAA", "the first token");
    snprintf(tmp, sizeof tmp, "%s/token.new", dir);
    snprintf(p, sizeof p, "%s/token", dir);
    write_text(tmp, "tok-BBBB");
    cr_assert_eq(rename(tmp, p), 0);
    assert_token(c, "tok-BBBB", "a new file (a new inode) of the same size renamed over the token");
    kube_config_free(c);
    rm_rf(dir);
}

Test(in_cluster, token_of_the_same_length_swapped_in_by_the_kubelet_data_symlink_is_used)
{
    /* A projected volume: token -> ..data/token, ..data -> ..TIMESTAMP; the
     * kubelet writes a new ..TIMESTAMP directory, renames a new ..data
     * symlink over the old one, then removes the old directory. */
    char dir[256], p[600], q[600];
    fake_sa_dir(dir, sizeof dir, "unused");
    snprintf(p, sizeof p, "%s/..2024_01_01_00_00_00.1", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/..2024_01_01_00_00_00.1/token", dir);
    write_text(p, "tok-AAAA");
    snprintf(p, sizeof p, "%s/..data", dir);
    cr_assert_eq(symlink("..2024_01_01_00_00_00.1", p), 0);
    snprintf(p, sizeof p, "%s/token", dir);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(symlink("..data/token", p), 0);
    kube_config *c = in_cluster_at(dir);
    assert_token(c, "tok-AAAA", "the first token, through the symlinks");

    snprintf(p, sizeof p, "%s/..2024_01_01_00_50_00.2", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/..2024_01_01_00_50_00.2/token", dir);
    write_text(p, "tok-BBBB");
    snprintf(p, sizeof p, "%s/..data_tmp", dir);
    cr_assert_eq(symlink("..2024_01_01_00_50_00.2", p), 0);
    snprintf(q, sizeof q, "%s/..data", dir);
    cr_assert_eq(rename(p, q), 0);
    snprintf(p, sizeof p, "%s/..2024_01_01_00_00_00.1", dir);
    rm_rf(p);
    assert_token(c, "tok-BBBB", "the token of the same size behind the swapped ..data symlink");
    kube_config_free(c);
    rm_rf(dir);
}

Test(in_cluster, token_of_the_same_length_rewritten_in_place_is_used_when_its_mtime_changed)
{
    char dir[256], p[600];
    fake_sa_dir(dir, sizeof dir, "tok-AAAA");
    snprintf(p, sizeof p, "%s/token", dir);
    kube_config *c = in_cluster_at(dir);
    assert_token(c, "tok-AAAA", "the first token");
    struct stat before, after;
    cr_assert_eq(stat(p, &before), 0);
    write_text(p, "tok-BBBB"); /* truncated and rewritten: same inode, same size */
    /* an mtime a few seconds on, set explicitly: no luck with timestamp granularity */
    struct timespec times[2] = {{before.st_atim.tv_sec, 0}, {before.st_mtim.tv_sec + 5, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, p, times, 0), 0, "utimensat: %s", strerror(errno));
    cr_assert_eq(stat(p, &after), 0);
    cr_assert_eq(after.st_ino, before.st_ino, "rewritten in place");
    cr_assert_eq(after.st_size, before.st_size);
    assert_token(c, "tok-BBBB", "same inode and size, another mtime: the token must be read again");
    kube_config_free(c);
    rm_rf(dir);
}

Test(in_cluster, token_rewritten_in_place_with_size_and_mtime_kept_is_used_when_its_ctime_changed)
{
    /* e.g. rsync --inplace --times, cp -p: every field but ctime as before */
    char dir[256], p[600];
    fake_sa_dir(dir, sizeof dir, "tok-AAAA");
    snprintf(p, sizeof p, "%s/token", dir);
    kube_config *c = in_cluster_at(dir);
    assert_token(c, "tok-AAAA", "the first token");
    struct stat before, after;
    cr_assert_eq(stat(p, &before), 0);
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    /* Rewrite and restore the mtime until the kernel's clock has moved on for
     * ctime (it ticks in milliseconds): deterministic whatever the tick. */
    for (int i = 0;; i++) {
        write_text(p, "tok-BBBB");
        cr_assert_eq(utimensat(AT_FDCWD, p, times, 0), 0, "utimensat: %s", strerror(errno));
        cr_assert_eq(stat(p, &after), 0);
        if (after.st_ctim.tv_sec != before.st_ctim.tv_sec ||
            after.st_ctim.tv_nsec != before.st_ctim.tv_nsec)
            break;
        cr_assert_lt(i, 10000, "the ctime of %s did not change in 10 s", p);
        sleep_ms(1);
    }
    cr_assert_eq(after.st_ino, before.st_ino, "rewritten in place");
    cr_assert_eq(after.st_size, before.st_size);
    cr_assert_eq(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
    cr_assert_eq(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
    assert_token(c, "tok-BBBB", "only the ctime changed: the token must be read again");
    kube_config_free(c);
    rm_rf(dir);
}
