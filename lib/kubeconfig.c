/* lib/kubeconfig.c - see kubeconfig.h. Owns the parsed configuration and
 * copies of its secrets; must not log them or put them into messages. */
#include "kubeconfig.h"
#include "buf.h"
#include "file.h"
#include "util.h"
#include "yaml_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define TOKEN_MAX 16384
#define TOKEN_REREAD_SECONDS 60

struct kube_config {
    char *source;
    char *server;
    char *ns;
    char *ca; size_t ca_len;
    char *cert; size_t cert_len;
    char *key; size_t key_len;
    int insecure;
    char *token;       /* static token, or the last one read from token_file */
    char *token_file;  /* NULL: static */
    struct stat token_st;
    time_t token_read_at;
};

static void wipe_free(char *p, size_t n)
{
    if (p) memset(p, 0, n);
    free(p);
}

void kube_config_free(kube_config *c)
{
    if (!c) return;
    free(c->source);
    free(c->server);
    free(c->ns);
    free(c->ca);
    free(c->cert);
    wipe_free(c->key, c->key_len);
    if (c->token) wipe_free(c->token, strlen(c->token));
    free(c->token_file);
    free(c);
}

const char *kube_config_server(const kube_config *c) { return c->server; }
const char *kube_config_namespace(const kube_config *c) { return c->ns ? c->ns : "default"; }
const char *kube_config_source(const kube_config *c) { return c->source; }

void kube_config_http_options(const kube_config *c, http_options *o)
{
    memset(o, 0, sizeof *o);
    o->ca_pem = c->ca;
    o->ca_len = c->ca_len;
    o->cert_pem = c->cert;
    o->cert_len = c->cert_len;
    o->key_pem = c->key;
    o->key_len = c->key_len;
    o->insecure = c->insecure;
}

/* ---------------------------------------------------------------- helpers */


static int b64val(int ch)
{
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+' || ch == '-') return 62;
    if (ch == '/' || ch == '_') return 63;
    return -1;
}

int kube_base64_decode(const char *in, size_t len, char **out, size_t *out_len)
{
    char *o = malloc(len / 4 * 3 + 4);
    if (!o) return -1;
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0, pad = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') continue;
        if (ch == '=') {
            pad++;
            continue;
        }
        int v = b64val(ch);
        if (v < 0 || pad) {
            free(o);
            return -1;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[n++] = (char)((acc >> bits) & 0xff);
        }
    }
    if (bits >= 6 || pad > 2) { /* a dangling sextet cannot encode a byte */
        free(o);
        return -1;
    }
    o[n] = '\0';
    *out = o;
    *out_len = n;
    return 0;
}

/* Reads a whole regular file into a new NUL-terminated buffer. */
static int read_file(const char *path, char **out, size_t *out_len, char *err, size_t errlen)
{
    buf b = {0};
    if (file_read(&b, path, err, errlen) != 0) {
        buf_free(&b);
        return -1;
    }
    *out_len = b.len;
    if ((*out = buf_take(&b)) == NULL) {
        err_printf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    return 0;
}

/* "dir of origin" + "/" + rel, unless rel is absolute. */
static int resolve_path(const char *origin, const char *rel, char *buf, size_t buflen)
{
    if (rel[0] == '/' || !origin) return snprintf(buf, buflen, "%s", rel) >= (int)buflen ? -1 : 0;
    const char *slash = strrchr(origin, '/');
    int dirlen = slash ? (int)(slash - origin) : 1;
    const char *dir = slash ? origin : ".";
    return snprintf(buf, buflen, "%.*s/%s", dirlen, dir, rel) >= (int)buflen ? -1 : 0;
}

static int parse_yaml(const char *text, size_t len, const char *origin, cJSON **out, char *err,
                      size_t errlen)
{
    /* client-go's reading: every scalar a string, anchors and aliases allowed */
    static const yaml_json_opts opts = {.typed_scalars = 0, .aliases = 1};
    char why[512];
    cJSON *j = NULL;
    if (yaml_json_parse(text, len, &opts, &j, why, sizeof why) != 0) {
        err_printf(err, errlen, "%s: %s", origin, why);
        return -1;
    }
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(err, errlen, "%s: not a kubeconfig (expected a YAML mapping)", origin);
        return -1;
    }
    *out = j;
    return 0;
}

static const char *str_at(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

/* The `what` entry named name in a list like clusters: [{name, cluster: {...}}]. */
static const cJSON *named(const cJSON *root, const char *list, const char *what, const char *name)
{
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, list), *e;
    cJSON_ArrayForEach(e, l) {
        const char *n = str_at(e, "name");
        if (n && strcmp(n, name) == 0) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, what);
            return cJSON_IsObject(v) ? v : NULL;
        }
    }
    return NULL;
}

/* A PEM from key "<base>-data" (base64) or "<base>" (a file path). */
static int load_pem(const cJSON *o, const char *base, const char *where, const char *origin,
                    char **out, size_t *out_len, char *err, size_t errlen)
{
    char key[128];
    snprintf(key, sizeof key, "%s-data", base);
    const char *data = str_at(o, key), *file = str_at(o, base);
    if (data) {
        if (kube_base64_decode(data, strlen(data), out, out_len)) {
            snprintf(err, errlen, "%s: %s.%s is not valid base64", origin, where, key);
            return -1;
        }
        return 0;
    }
    if (file) {
        char path[4096];
        if (resolve_path(origin, file, path, sizeof path)) {
            snprintf(err, errlen, "%s: %s.%s: path too long", origin, where, base);
            return -1;
        }
        char e2[512];
        if (read_file(path, out, out_len, e2, sizeof e2)) {
            snprintf(err, errlen, "%s: %s.%s: %s", origin, where, base, e2);
            return -1;
        }
    }
    return 0;
}

static int is_true(const char *s)
{
    return s && (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0 ||
                 strcmp(s, "yes") == 0);
}

int kube_config_load_kubeconfig_string(const char *text, size_t len, const char *origin,
                                       kube_config **out, char *err, size_t errlen)
{
    int rc = -1;
    cJSON *root = NULL;
    kube_config *c = calloc(1, sizeof *c);
    if (!c || !(c->source = strdup(origin))) goto oom;
    if (parse_yaml(text, len, origin, &root, err, errlen)) goto out;

    const char *ctx_name = str_at(root, "current-context");
    if (!ctx_name) {
        snprintf(err, errlen, "%s: current-context is missing or empty", origin);
        goto out;
    }
    const cJSON *ctx = named(root, "contexts", "context", ctx_name);
    if (!ctx) {
        snprintf(err, errlen, "%s: current-context \"%s\" is not in contexts", origin, ctx_name);
        goto out;
    }
    const char *cluster_name = str_at(ctx, "cluster"), *user_name = str_at(ctx, "user");
    if (!cluster_name) {
        snprintf(err, errlen, "%s: contexts[%s].context.cluster is missing", origin, ctx_name);
        goto out;
    }
    const cJSON *cluster = named(root, "clusters", "cluster", cluster_name);
    if (!cluster) {
        snprintf(err, errlen, "%s: cluster \"%s\" (of context \"%s\") is not in clusters", origin,
                 cluster_name, ctx_name);
        goto out;
    }
    const char *server = str_at(cluster, "server");
    if (!server) {
        snprintf(err, errlen, "%s: clusters[%s].cluster.server is missing", origin, cluster_name);
        goto out;
    }
    if (!(c->server = strdup(server))) goto oom;
    size_t sl = strlen(c->server);
    while (sl > 0 && c->server[sl - 1] == '/') c->server[--sl] = '\0';
    const char *ns = str_at(ctx, "namespace");
    if (ns && !(c->ns = strdup(ns))) goto oom;

    char where[256];
    snprintf(where, sizeof where, "clusters[%s].cluster", cluster_name);
    if (load_pem(cluster, "certificate-authority", where, origin, &c->ca, &c->ca_len, err, errlen))
        goto out;
    c->insecure = is_true(str_at(cluster, "insecure-skip-tls-verify"));

    if (user_name) {
        const cJSON *user = named(root, "users", "user", user_name);
        if (!user) {
            snprintf(err, errlen, "%s: user \"%s\" (of context \"%s\") is not in users", origin,
                     user_name, ctx_name);
            goto out;
        }
        snprintf(where, sizeof where, "users[%s].user", user_name);
        if (cJSON_GetObjectItemCaseSensitive(user, "exec") ||
            cJSON_GetObjectItemCaseSensitive(user, "auth-provider")) {
            snprintf(err, errlen, "%s: %s: exec and auth-provider credentials are not supported",
                     origin, where);
            goto out;
        }
        if (load_pem(user, "client-certificate", where, origin, &c->cert, &c->cert_len, err,
                     errlen) ||
            load_pem(user, "client-key", where, origin, &c->key, &c->key_len, err, errlen))
            goto out;
        if (!c->cert != !c->key) {
            snprintf(err, errlen, "%s: %s: client-certificate and client-key must come together",
                     origin, where);
            goto out;
        }
        const char *tok = str_at(user, "token"), *tokfile = str_at(user, "tokenFile");
        if (tok) {
            if (!(c->token = strdup(tok))) goto oom;
        } else if (tokfile) {
            char path[4096];
            if (resolve_path(origin, tokfile, path, sizeof path) ||
                !(c->token_file = strdup(path)))
                goto oom;
        }
    }
    *out = c;
    c = NULL;
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "%s: out of memory", origin);
out:
    cJSON_Delete(root);
    kube_config_free(c);
    return rc;
}

int kube_config_load_kubeconfig(const char *path, kube_config **out, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    if (read_file(path, &text, &len, err, errlen)) return -1;
    int rc = kube_config_load_kubeconfig_string(text, len, path, out, err, errlen);
    free(text);
    return rc;
}

int kube_config_in_cluster(const char *root, kube_config **out, char *err, size_t errlen)
{
    if (!root) root = KUBE_SA_DIR;
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !host[0] || !port || !port[0]) {
        snprintf(err, errlen, "in-cluster config: KUBERNETES_SERVICE_HOST and "
                 "KUBERNETES_SERVICE_PORT must be set");
        return -1;
    }
    int rc = -1;
    char path[4096], server[512];
    kube_config *c = calloc(1, sizeof *c);
    if (!c || !(c->source = strdup(root))) goto oom;
    /* An IPv6 literal needs brackets in a URL. */
    int v6 = strchr(host, ':') != NULL;
    if (snprintf(server, sizeof server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
                 port) >= (int)sizeof server) {
        snprintf(err, errlen, "in-cluster config: KUBERNETES_SERVICE_HOST too long");
        goto out;
    }
    if (!(c->server = strdup(server))) goto oom;
    snprintf(path, sizeof path, "%s/ca.crt", root);
    if (read_file(path, &c->ca, &c->ca_len, err, errlen)) goto out;
    snprintf(path, sizeof path, "%s/namespace", root);
    char *ns = NULL;
    size_t nslen = 0;
    char e2[256];
    if (read_file(path, &ns, &nslen, e2, sizeof e2) == 0) {
        while (nslen > 0 && (ns[nslen - 1] == '\n' || ns[nslen - 1] == ' ')) ns[--nslen] = '\0';
        c->ns = ns;
    }
    snprintf(path, sizeof path, "%s/token", root);
    if (!(c->token_file = strdup(path))) goto oom;
    /* Fail now, not on the first request, if the token cannot be read. */
    char tok[TOKEN_MAX];
    int trc = kube_config_token(c, tok, sizeof tok, err, errlen);
    memset(tok, 0, sizeof tok);
    if (trc) goto out;
    *out = c;
    c = NULL;
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "in-cluster config: out of memory");
out:
    kube_config_free(c);
    return rc;
}

int kube_config_load_default(kube_config **out, char *err, size_t errlen)
{
    const char *kc = getenv("KUBECONFIG");
    if (kc && kc[0]) {
        char first[4096];
        size_t n = strcspn(kc, ":");
        snprintf(first, sizeof first, "%.*s", (int)n, kc);
        return kube_config_load_kubeconfig(first, out, err, errlen);
    }
    if (getenv("KUBERNETES_SERVICE_HOST")) return kube_config_in_cluster(NULL, out, err, errlen);
    const char *home = getenv("HOME");
    char path[4096];
    snprintf(path, sizeof path, "%s/.kube/config", home ? home : ".");
    return kube_config_load_kubeconfig(path, out, err, errlen);
}

/* Whether the token file may hold another token: a rotated token usually has
 * the length of the old one, and an in-place rewrite may keep the mtime
 * (rsync --inplace -t, cp -p), but not the ctime. */
static int stat_changed(const struct stat *a, const struct stat *b)
{
    return a->st_ino != b->st_ino || a->st_dev != b->st_dev || a->st_size != b->st_size ||
           a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec ||
           a->st_ctim.tv_sec != b->st_ctim.tv_sec || a->st_ctim.tv_nsec != b->st_ctim.tv_nsec;
}

int kube_config_token(kube_config *c, char *buf, size_t buflen, char *err, size_t errlen)
{
    if (c->token_file) {
        struct stat st;
        time_t now = time(NULL);
        /* stat follows the ..data symlink a projected volume swaps on rotation. */
        if (stat(c->token_file, &st) != 0) {
            if (!c->token) {
                snprintf(err, errlen, "%s: cannot read the token: %s", c->token_file,
                         strerror(errno));
                return -1;
            }
            /* Mid-rotation: keep the token we have. */
        } else if (!c->token || stat_changed(&st, &c->token_st) ||
                   now - c->token_read_at >= TOKEN_REREAD_SECONDS) {
            char *t = NULL;
            size_t n = 0;
            if (read_file(c->token_file, &t, &n, err, errlen)) {
                if (!c->token) return -1;
            } else {
                while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' '))
                    t[--n] = '\0';
                if (n == 0 || n >= TOKEN_MAX) {
                    snprintf(err, errlen, "%s: token file is %s", c->token_file,
                             n ? "too large" : "empty");
                    wipe_free(t, n);
                    if (!c->token) return -1;
                } else {
                    if (c->token) wipe_free(c->token, strlen(c->token));
                    c->token = t;
                    c->token_st = st;
                    c->token_read_at = now;
                }
            }
        }
    }
    const char *t = c->token ? c->token : "";
    if (strlen(t) >= buflen) {
        snprintf(err, errlen, "%s: token longer than %zu bytes", c->source, buflen - 1);
        return -1;
    }
    memcpy(buf, t, strlen(t) + 1);
    return 0;
}
