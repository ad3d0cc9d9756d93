/* lib/http.c - see http.h. Owns the CURL easy handle and copies of the TLS
 * blobs; must not log headers or bodies (bearer tokens). */
#include <curl/curl.h>

#include "http.h"

#include "buf.h"
#include "check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct http_client {
    CURL *h;
    char *ca, *cert, *key;
    size_t ca_len, cert_len, key_len;
    int insecure;
    long connect_timeout_ms;
    char curl_err[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init_once(void) { global_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int http_global_init(char *err, size_t errlen)
{
    pthread_once(&global_once, global_init_once);
    return CURL_CHECK(global_rc, err, errlen) ? -1 : 0;
}

long http_client_last_connects(http_client *c)
{
    long n = 0;
    curl_easy_getinfo(c->h, CURLINFO_NUM_CONNECTS, &n);
    return n;
}

static char *dup_blob(const char *p, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

void http_client_free(http_client *c)
{
    if (!c) return;
    if (c->h) curl_easy_cleanup(c->h);
    free(c->ca);
    free(c->cert);
    if (c->key) memset(c->key, 0, c->key_len); /* private key material */
    free(c->key);
    free(c);
}

int http_client_new(const http_options *opts, http_client **out, char *err, size_t errlen)
{
    if (http_global_init(err, errlen)) return -1;
    http_client *c = calloc(1, sizeof *c);
    if (!c) goto oom;
    c->h = curl_easy_init();
    if (!c->h) {
        snprintf(err, errlen, "curl_easy_init failed");
        goto fail;
    }
    if (opts) {
        if (opts->ca_pem && opts->ca_len) {
            if (!(c->ca = dup_blob(opts->ca_pem, opts->ca_len))) goto oom;
            c->ca_len = opts->ca_len;
        }
        if (opts->cert_pem && opts->cert_len) {
            if (!(c->cert = dup_blob(opts->cert_pem, opts->cert_len))) goto oom;
            c->cert_len = opts->cert_len;
        }
        if (opts->key_pem && opts->key_len) {
            if (!(c->key = dup_blob(opts->key_pem, opts->key_len))) goto oom;
            c->key_len = opts->key_len;
        }
        c->insecure = opts->insecure;
        c->connect_timeout_ms = opts->connect_timeout_ms;
    }
    if (c->connect_timeout_ms <= 0) c->connect_timeout_ms = 10000;
    *out = c;
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    http_client_free(c);
    return -1;
}

/* Options common to every request; the handle is reset first so that nothing
 * (a POST body, a custom method) leaks from the previous request, while the
 * connection cache survives curl_easy_reset (keep-alive). */
static int setup(http_client *c, const char *method, const char *url, struct curl_slist *hdrs,
                 long timeout_ms, char *err, size_t errlen)
{
    CURL *h = c->h;
    curl_easy_reset(h);
    c->curl_err[0] = '\0';
    if (CURL_CHECK(curl_easy_setopt(h, CURLOPT_URL, url), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->curl_err), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms), err,
                   errlen) ||
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, ""), err, errlen))
        return -1;
    if (method && strcmp(method, "GET") != 0 &&
        CURL_CHECK(curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method), err, errlen))
        return -1;
    if (c->ca) {
        struct curl_blob b = {c->ca, c->ca_len, CURL_BLOB_NOCOPY};
        if (CURL_CHECK(curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b), err, errlen)) return -1;
    }
    if (c->cert) {
        struct curl_blob b = {c->cert, c->cert_len, CURL_BLOB_NOCOPY};
        if (CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b), err, errlen) ||
            CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM"), err, errlen))
            return -1;
    }
    if (c->key) {
        struct curl_blob b = {c->key, c->key_len, CURL_BLOB_NOCOPY};
        if (CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b), err, errlen) ||
            CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM"), err, errlen))
            return -1;
    }
    if (c->insecure) {
        if (CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L), err, errlen) ||
            CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L), err, errlen))
            return -1;
    }
    return 0;
}

static int make_headers(const char *const *headers, struct curl_slist **out, char *err,
                        size_t errlen)
{
    struct curl_slist *l = NULL;
    for (size_t i = 0; headers && headers[i]; i++) {
        struct curl_slist *n = curl_slist_append(l, headers[i]);
        if (!n) {
            curl_slist_free_all(l);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        l = n;
    }
    *out = l;
    return 0;
}

/* Failed transfer: the library's error string plus the detail in the error buffer. */
static void transport_error(http_client *c, CURLcode rc, const char *method, const char *url,
                            char *err, size_t errlen)
{
    /* url carries no secrets (tokens only travel in headers). */
    snprintf(err, errlen, "%s %s: curl error %d: %s%s%s", method ? method : "GET", url, (int)rc,
             curl_easy_strerror(rc), c->curl_err[0] ? ": " : "", c->curl_err);
}

/* A response body larger than this is refused: a list page or object the
 * operator cannot sensibly hold (the API server's own limit is far lower). */
#define HTTP_MAX_BODY ((size_t)256 << 20)

static size_t write_buf(char *d, size_t sz, size_t n, void *user)
{
    return buf_append(user, d, sz * n) ? 0 : sz * n;
}

typedef struct {
    const char *body;
    size_t len, off;
} reader;

static size_t read_body(char *dst, size_t sz, size_t n, void *user)
{
    reader *r = user;
    size_t want = sz * n, left = r->len - r->off;
    if (want > left) want = left;
    memcpy(dst, r->body + r->off, want);
    r->off += want;
    return want;
}

int http_request(http_client *c, const char *method, const char *url, const char *const *headers,
                 const char *body, size_t body_len, long timeout_ms, http_response *resp,
                 char *err, size_t errlen)
{
    int rc = -1;
    struct curl_slist *hdrs = NULL;
    buf b = {.max = HTTP_MAX_BODY};
    reader r = {body, body_len, 0};
    if (make_headers(headers, &hdrs, err, errlen)) return -1;
    if (setup(c, method, url, hdrs, timeout_ms > 0 ? timeout_ms : 30000, err, errlen)) goto out;
    if (CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, write_buf), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &b), err, errlen))
        goto out;
    if (body) {
        /* UPLOAD would turn the request into a PUT; POSTFIELDS keeps our method. */
        if (CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_POST, 1L), err, errlen) ||
            CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_READFUNCTION, read_body), err, errlen) ||
            CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_READDATA, &r), err, errlen) ||
            CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len),
                       err, errlen))
            goto out;
        if (method && strcmp(method, "POST") != 0 &&
            CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_CUSTOMREQUEST, method), err, errlen))
            goto out;
    }
    CURLcode cc = curl_easy_perform(c->h);
    if (b.failed) {
        if (b.over_max)
            snprintf(err, errlen, "%s %s: response body larger than %zu MiB", method, url,
                     HTTP_MAX_BODY >> 20);
        else
            snprintf(err, errlen, "%s %s: out of memory reading the response", method, url);
        goto out;
    }
    if (cc != CURLE_OK) {
        transport_error(c, cc, method, url, err, errlen);
        goto out;
    }
    long status = 0;
    if (CURL_CHECK(curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status), err, errlen)) goto out;
    resp->len = b.len;
    if ((resp->body = buf_take(&b)) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    resp->status = status;
    rc = 0;
out:
    /* The header list holds the bearer token: detach it before freeing. */
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdrs);
    buf_free(&b);
    return rc;
}

void http_response_free(http_response *r)
{
    if (!r) return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

typedef struct {
    http_client *c;
    http_chunk_cb cb;
    void *user;
    const volatile sig_atomic_t *stop;
    long status;     /* 0 until the first body byte */
    buf errbody;     /* non-2xx body */
    int stopped;     /* by cb or *stop */
} stream_state;

static size_t write_stream(char *d, size_t sz, size_t n, void *user)
{
    stream_state *s = user;
    size_t len = sz * n;
    if (s->status == 0) curl_easy_getinfo(s->c->h, CURLINFO_RESPONSE_CODE, &s->status);
    if (s->status < 200 || s->status >= 300) {
        if (s->errbody.len < 65536 && buf_append(&s->errbody, d, len)) return 0;
        return len;
    }
    if (s->cb(d, len, s->user)) {
        s->stopped = 1;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    return len;
}

static int xfer_stream(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    stream_state *s = user;
    if (s->stop && *s->stop) {
        s->stopped = 1;
        return 1;
    }
    return 0;
}

int http_stream(http_client *c, const char *url, const char *const *headers, long timeout_ms,
                http_chunk_cb cb, void *user, const volatile sig_atomic_t *stop, long *status,
                char **error_body, char *err, size_t errlen)
{
    int rc = -1;
    struct curl_slist *hdrs = NULL;
    stream_state s = {.c = c, .cb = cb, .user = user, .stop = stop};
    if (error_body) *error_body = NULL;
    *status = 0;
    if (make_headers(headers, &hdrs, err, errlen)) return -1;
    if (setup(c, "GET", url, hdrs, timeout_ms, err, errlen)) goto out;
    if (CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, write_stream), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &s), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_NOPROGRESS, 0L), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_XFERINFOFUNCTION, xfer_stream), err, errlen) ||
        CURL_CHECK(curl_easy_setopt(c->h, CURLOPT_XFERINFODATA, &s), err, errlen))
        goto out;
    CURLcode cc = curl_easy_perform(c->h);
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, status);
    if (s.stopped) {
        rc = 1;
        goto out;
    }
    if (s.errbody.failed) {
        snprintf(err, errlen, "GET %s: out of memory reading the error body", url);
        goto out;
    }
    if (cc != CURLE_OK) {
        transport_error(c, cc, "GET", url, err, errlen);
        goto out;
    }
    rc = 0;
out:
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdrs);
    if (rc == 0 && error_body && s.errbody.data)
        *error_body = buf_take(&s.errbody);
    buf_free(&s.errbody);
    return rc;
}
