/* lib/s3.c - see s3.h. An S3 client on libcurl's SigV4 signing.
 *
 * Owns: the client's credentials (copies, wiped on free), one kept-alive
 * easy handle per client (and one per multipart worker thread), URL and
 * query building in the form SigV4 signs, the retry loop (exponential
 * backoff with full jitter, within the call's deadline), parsing S3's XML
 * (list pages, multipart replies, error bodies) with libxml2, and the
 * mapping of failures to s3_status and a message.
 * Must not: put the secret key or the session token in an err buffer or a
 * log line, add a header it does not mean to sign (curl signs every header
 * it is given, blank ones too), retry what cannot pass (4xx other than 429
 * and RequestTimeout), or turn TLS verification off.
 *
 * What this libcurl (7.88) does and does not do for SigV4, found by trying:
 * it signs the path and the query exactly as written (so this file writes
 * them canonical: sorted, %XX-encoded, "name=" for valueless parameters),
 * it does not send x-amz-content-sha256 (this file does, hashed with
 * OpenSSL), and it signs the Content-Type curl would add to a POST unless
 * one is given (so POSTs carry their own).
 */
#include <curl/curl.h>

#include "s3.h"

#include "buf.h"
#include "check.h"
#include "http.h"
#include "log.h"
#include "util.h"

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <openssl/evp.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define S3_MIN_PART ((size_t)5 << 20)
#define S3_MAX_PARTS 10000
#define S3_ERRBODY_MAX ((size_t)64 << 10) /* an error reply kept for its <Code> */
#define S3_XMLBODY_MAX ((size_t)64 << 20) /* a list page or multipart reply */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct s3_client {
    char *endpoint;    /* scheme://host[:port] without a trailing '/' */
    int virtual_host;  /* bucket in the host name rather than the path */
    char *region;
    char *sigv4;       /* "aws:amz:REGION:s3" */
    char *ca_bundle;
    char *key_id;
    char *secret;      /* never printed */
    char *token_hdr;   /* "x-amz-security-token: ..." or NULL; never printed */
    int max_attempts, parallel, list_page_size;
    double timeout_s, deadline_s, backoff_s;
    size_t multipart_threshold, part_size;
    CURL *h;
};

const char *s3_status_name(s3_status st)
{
    switch (st) {
    case S3_OK: return "ok";
    case S3_NOT_FOUND: return "not_found";
    case S3_NO_BUCKET: return "no_bucket";
    case S3_DENIED: return "denied";
    case S3_BAD_SIGNATURE: return "bad_signature";
    case S3_UNREACHABLE: return "unreachable";
    case S3_TRANSIENT: return "transient";
    case S3_INVALID: return "invalid";
    case S3_NOMEM: return "nomem";
    }
    return "unknown";
}

int s3_status_retryable(s3_status st)
{
    return st == S3_UNREACHABLE || st == S3_TRANSIENT || st == S3_NOMEM;
}

/* what an err message says for each status */
static const char *status_text(s3_status st)
{
    switch (st) {
    case S3_OK: return "ok";
    case S3_NOT_FOUND: return "not found";
    case S3_NO_BUCKET: return "no such bucket";
    case S3_DENIED: return "access denied";
    case S3_BAD_SIGNATURE: return "signature does not match (a wrong secret key?)";
    case S3_UNREACHABLE: return "unreachable";
    case S3_TRANSIENT: return "server failing (5xx, 429, resets or timeouts)";
    case S3_INVALID: return "invalid request";
    case S3_NOMEM: return "out of memory";
    }
    return "error";
}

/* ------------------------------------------------------------ encoding */

char *s3_uri_encode(const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *o = malloc(3 * n + 1), *p = o;
    if (!o) return NULL;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (isalnum(*c) || *c == '-' || *c == '_' || *c == '.' || *c == '~' ||
            (keep_slash && *c == '/')) {
            *p++ = (char)*c;
        } else {
            *p++ = '%';
            *p++ = hex[*c >> 4];
            *p++ = hex[*c & 15];
        }
    }
    *p = '\0';
    return o;
}

int s3_parse_uri(const char *uri, char *bucket, size_t bucket_len, char *prefix,
                 size_t prefix_len, char *err, size_t errlen)
{
    if (!uri || strncmp(uri, "s3://", 5) != 0) {
        err_printf(err, errlen, "s3 URI %s: does not start with s3://", uri ? uri : "(null)");
        return -1;
    }
    const char *b = uri + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl < 3 || bl > 63) {
        err_printf(err, errlen, "s3 URI %s: bucket name must be 3 to 63 characters", uri);
        return -1;
    }
    for (size_t i = 0; i < bl; i++) {
        unsigned char ch = (unsigned char)b[i];
        if (!(islower(ch) || isdigit(ch) || ch == '-' || ch == '.')) {
            err_printf(err, errlen,
                       "s3 URI %s: bucket names hold only a-z, 0-9, '-' and '.'", uri);
            return -1;
        }
    }
    const char *p = slash ? slash + 1 : "";
    if (bl + 1 > bucket_len || strlen(p) + 1 > prefix_len) {
        err_printf(err, errlen, "s3 URI %s: too long", uri);
        return -1;
    }
    memcpy(bucket, b, bl);
    bucket[bl] = '\0';
    memcpy(prefix, p, strlen(p) + 1);
    return 0;
}

/* "scheme://[bucket.]host[:port]/[bucket/]key?query" */
static char *make_url(const s3_client *c, const char *bucket, const char *key, const char *query)
{
    char *ekey = s3_uri_encode(key ? key : "", 1);
    if (!ekey) return NULL;
    buf u = {0};
    const char *sep = strstr(c->endpoint, "://");
    if (c->virtual_host && bucket) {
        buf_printf(&u, "%.*s%s.%s/%s", (int)(sep - c->endpoint + 3), c->endpoint, bucket,
                   sep + 3, ekey);
    } else if (bucket) {
        buf_printf(&u, "%s/%s/%s", c->endpoint, bucket, ekey);
    } else {
        buf_printf(&u, "%s/", c->endpoint);
    }
    if (query && *query) buf_printf(&u, "?%s", query);
    free(ekey);
    if (u.failed) {
        buf_free(&u);
        return NULL;
    }
    return buf_take(&u);
}

static void sha256_hex(const void *d, size_t n, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (!EVP_Digest(d, n, md, &mdlen, EVP_sha256(), NULL)) mdlen = 0;
    for (unsigned i = 0; i < mdlen && i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[mdlen ? 64 : 0] = '\0';
}

/* ------------------------------------------------------------ XML */

static xmlDocPtr xml_parse(const char *d, size_t n)
{
    if (!d || n == 0 || n > INT32_MAX) return NULL;
    return xmlReadMemory(d, (int)n, "s3.xml", NULL,
                         XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

static int named(xmlNodePtr n, const char *name)
{
    return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

/* The first child element called name, or NULL. */
static xmlNodePtr child(xmlNodePtr n, const char *name)
{
    for (xmlNodePtr k = n ? n->children : NULL; k; k = k->next)
        if (named(k, name)) return k;
    return NULL;
}

/* The text of child `name` of n (malloc'd; "" when empty), or NULL. */
static char *child_text(xmlNodePtr n, const char *name)
{
    xmlNodePtr k = child(n, name);
    if (!k) return NULL;
    xmlChar *t = xmlNodeGetContent(k);
    char *s = strdup(t ? (const char *)t : "");
    xmlFree(t);
    return s;
}

/* ------------------------------------------------------------ requests */

typedef struct {
    const char *op;        /* for messages: "PUT", "UploadPart", ... */
    const char *method;    /* GET PUT POST HEAD DELETE */
    const char *bucket, *key;
    const char *query;     /* canonical already, or NULL */
    const char *range;     /* "bytes=a-b" or NULL */
    const char *content_type;
    const void *body;      /* PUT/POST body (borrowed) */
    size_t body_len;
    /* the reply: 2xx bodies into out (fixed, out_cap) when out is set, else
     * into resp; other bodies into ebody */
    void *out;
    size_t out_cap, out_len;
    s3_sink sink;          /* when set, 2xx bodies go to it instead (out_len counts) */
    void *sink_ctx;
    int sink_stopped;
    buf resp, ebody;
    size_t resp_max;
    long status;
    uint64_t length;       /* Content-Length of a HEAD reply */
    char etag[256];
    size_t body_off;
    int too_big;           /* resp went over resp_max */
    CURL *h;
} req;

static size_t on_body(char *d, size_t sz, size_t n, void *user)
{
    req *r = user;
    size_t len = sz * n;
    if (r->status == 0) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status < 200 || r->status > 299) {
        buf_append(&r->ebody, d, len); /* capped; an over-long error body is cut */
        return len;
    }
    if (r->sink) {
        if (r->sink(r->sink_ctx, r->out_len, d, len)) {
            r->sink_stopped = 1;
            return 0; /* curl stops with CURLE_WRITE_ERROR */
        }
        r->out_len += len;
        return len;
    }
    if (r->out) {
        size_t room = r->out_cap - r->out_len, k = len < room ? len : room;
        memcpy((char *)r->out + r->out_len, d, k);
        r->out_len += k;
        return len;
    }
    if (buf_append(&r->resp, d, len)) {
        r->too_big = r->resp.over_max;
        return 0;
    }
    return len;
}

static size_t on_header(char *d, size_t sz, size_t n, void *user)
{
    req *r = user;
    size_t len = sz * n;
    if (len > 5 && strncasecmp(d, "ETag:", 5) == 0) {
        size_t i = 5, j = len;
        while (i < j && (d[i] == ' ' || d[i] == '\t')) i++;
        while (j > i && (d[j - 1] == '\r' || d[j - 1] == '\n' || d[j - 1] == ' ')) j--;
        if (j - i < sizeof r->etag) {
            memcpy(r->etag, d + i, j - i);
            r->etag[j - i] = '\0';
        }
    }
    return len;
}

static size_t on_read(char *dst, size_t sz, size_t n, void *user)
{
    req *r = user;
    size_t want = sz * n, left = r->body_len - r->body_off;
    if (want > left) want = left;
    memcpy(dst, (const char *)r->body + r->body_off, want);
    r->body_off += want;
    return want;
}

/* Every option of one attempt; the handle is reset first (its connection
 * cache survives). 0 or a CURLcode with err filled. */
static int setup(s3_client *c, req *r, const char *url, struct curl_slist *hdrs,
                 double left_s, char *err, size_t errlen)
{
    CURL *h = r->h;
    long total_ms = (long)(left_s * 1000) > 1 ? (long)(left_s * 1000) : 1;
    long stall_s = (long)c->timeout_s > 1 ? (long)c->timeout_s : 1;
    long connect_ms = (long)(c->timeout_s * 1000) < total_ms ? (long)(c->timeout_s * 1000)
                                                             : total_ms;
    int rc;
    curl_easy_reset(h);
    if ((rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_URL, url), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_AWS_SIGV4, c->sigv4), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_USERNAME, c->key_id), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_PASSWORD, c->secret), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, total_ms), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms), err,
                         errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall_s), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L), err,
                         errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_WRITEDATA, r), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header), err, errlen)) ||
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_HEADERDATA, r), err, errlen)))
        return rc;
    if (c->ca_bundle &&
        (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_bundle), err, errlen)))
        return rc;
    if (strcmp(r->method, "HEAD") == 0)
        return CURL_CHECK(curl_easy_setopt(h, CURLOPT_NOBODY, 1L), err, errlen);
    if (strcmp(r->method, "PUT") == 0) {
        if ((rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_UPLOAD, 1L), err, errlen)) ||
            (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read), err, errlen)) ||
            (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_READDATA, r), err, errlen)) ||
            (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                                              (curl_off_t)r->body_len), err, errlen)))
            return rc;
        return 0;
    }
    if (strcmp(r->method, "POST") == 0) {
        if ((rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : ""),
                             err, errlen)) ||
            (rc = CURL_CHECK(curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                                              (curl_off_t)r->body_len), err, errlen)))
            return rc;
        return 0;
    }
    if (strcmp(r->method, "GET") != 0)
        return CURL_CHECK(curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method), err, errlen);
    return 0;
}

/* "s3 OP bucket=B key=K: " */
static void what(buf *m, const s3_client *c, const req *r)
{
    (void)c;
    buf_printf(m, "s3 %s", r->op);
    if (r->bucket) buf_printf(m, " bucket=%s", r->bucket);
    if (r->key) buf_printf(m, " key=%s", r->key);
    buf_puts(m, ": ");
}

static void say(char *err, size_t errlen, buf *m)
{
    if (err && errlen) snprintf(err, errlen, "%s", m->data ? m->data : "s3: out of memory");
    buf_free(m);
}

/* The status of a non-2xx reply, from S3's <Code> when the body has one,
 * else from the HTTP status alone: a load balancer's HTML 502/503 (no S3
 * code, not XML) may pass like S3's InternalError, so it is transient. */
static s3_status http_status(long status, const char *code)
{
    static const struct { const char *code; s3_status st; } codes[] = {
        {"NoSuchBucket", S3_NO_BUCKET},       {"NoSuchKey", S3_NOT_FOUND},
        {"NoSuchUpload", S3_NOT_FOUND},       {"AccessDenied", S3_DENIED},
        {"InvalidAccessKeyId", S3_DENIED},    {"ExpiredToken", S3_DENIED},
        {"InvalidToken", S3_DENIED},          {"AccountProblem", S3_DENIED},
        {"SignatureDoesNotMatch", S3_BAD_SIGNATURE},
        {"InternalError", S3_TRANSIENT},      {"ServiceUnavailable", S3_TRANSIENT},
        {"SlowDown", S3_TRANSIENT},           {"RequestTimeout", S3_TRANSIENT},
    };
    for (size_t i = 0; code && i < sizeof codes / sizeof *codes; i++)
        if (strcmp(code, codes[i].code) == 0) return codes[i].st;
    if (status >= 500 || status == 429) return S3_TRANSIENT;
    if (status == 404) return S3_NOT_FOUND;
    if (status == 403) return S3_DENIED;
    return S3_INVALID;
}

typedef enum { FAIL_NONE, FAIL_CONNECT, FAIL_TRANSIENT, FAIL_FINAL } fail_kind;

static fail_kind curl_kind(CURLcode cc)
{
    switch (cc) {
    case CURLE_OK: return FAIL_NONE;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT: return FAIL_CONNECT;
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY: return FAIL_TRANSIENT;
    default: return FAIL_FINAL;
    }
}

/* A random double in [0, 1) from a per-call state (xorshift). */
static double jitter(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static void sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* One request with its retries, on r->h, before the absolute deadline (on
 * mono_seconds). 2xx (and 416 when ok_416) is S3_OK with r->status set. */
static s3_status perform(s3_client *c, req *r, double deadline, int ok_416, char *err,
                         size_t errlen)
{
    s3_status st = S3_NOMEM;
    char sha[65], sha_hdr[100], range_hdr[96], type_hdr[128], curl_err[CURL_ERROR_SIZE];
    char cerr[512] = "";
    struct curl_slist *hdrs = NULL, *n;
    buf m = {0}, best = {0}; /* best: see the retry loop */
    char *url = make_url(c, r->bucket, r->key, r->query);
    uint64_t seed = (uint64_t)(mono_seconds() * 1e9) ^ (uint64_t)(uintptr_t)r ^ 0x9e3779b97f4a7c15ULL;
    if (!url) goto nomem;
    if (r->body_len) sha256_hex(r->body, r->body_len, sha);
    else snprintf(sha, sizeof sha, "%s", EMPTY_SHA256);
    snprintf(sha_hdr, sizeof sha_hdr, "x-amz-content-sha256: %s", sha);
    if (!(n = curl_slist_append(hdrs, sha_hdr))) goto nomem;
    hdrs = n;
    if (r->range) {
        snprintf(range_hdr, sizeof range_hdr, "Range: %s", r->range);
        if (!(n = curl_slist_append(hdrs, range_hdr))) goto nomem;
        hdrs = n;
    }
    if (r->content_type) {
        snprintf(type_hdr, sizeof type_hdr, "Content-Type: %s", r->content_type);
        if (!(n = curl_slist_append(hdrs, type_hdr))) goto nomem;
        hdrs = n;
    }
    if (c->token_hdr) {
        if (!(n = curl_slist_append(hdrs, c->token_hdr))) goto nomem;
        hdrs = n;
    }

    double start = mono_seconds();
    fail_kind last = FAIL_NONE;
    /* the strongest cause of the attempts so far (an answer from the store
     * > a connection that failed > a transfer that timed out or broke), for
     * the message when all fail: a timeout after a 503 says less than it */
    int best_rank = 0;
    s3_status best_st = S3_OK;
    size_t pre = 0;
    int attempt;
    for (attempt = 1;; attempt++) {
        double left = deadline - mono_seconds();
        r->out_len = 0;
        r->body_off = 0;
        r->status = 0;
        r->etag[0] = '\0';
        r->too_big = 0;
        buf_clear(&r->resp);
        buf_clear(&r->ebody);
        r->resp.max = r->resp_max;
        r->ebody.max = S3_ERRBODY_MAX;
        curl_err[0] = '\0';
        int rc = setup(c, r, url, hdrs, left, cerr, sizeof cerr);
        if (!rc) rc = CURL_CHECK(curl_easy_setopt(r->h, CURLOPT_ERRORBUFFER, curl_err), cerr,
                                 sizeof cerr);
        if (rc) {
            what(&m, c, r);
            buf_printf(&m, "%s", cerr);
            st = rc == CURLE_OUT_OF_MEMORY ? S3_NOMEM : S3_INVALID;
            goto out;
        }
        CURLcode cc = curl_easy_perform(r->h);
        curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->status);
        if (r->sink_stopped) {
            buf_clear(&m);
            what(&m, c, r);
            buf_printf(&m, "stopped by the reader after %zu bytes", r->out_len);
            st = S3_INVALID;
            goto out;
        }
        if (r->too_big) {
            what(&m, c, r);
            buf_printf(&m, "reply larger than %zu bytes at %s", r->resp_max, c->endpoint);
            st = S3_INVALID;
            goto out;
        }
        if (r->resp.failed || r->ebody.failed) {
            if (!r->ebody.over_max) goto nomem;
        }
        last = curl_kind(cc);
        if (cc == CURLE_OK) {
            if ((r->status >= 200 && r->status <= 299) || (ok_416 && r->status == 416)) {
                if (strcmp(r->method, "HEAD") == 0) {
                    curl_off_t cl = -1;
                    curl_easy_getinfo(r->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
                    r->length = cl > 0 ? (uint64_t)cl : 0;
                }
                st = S3_OK;
                goto out;
            }
            char *code = NULL, *msg = NULL;
            xmlDocPtr doc = xml_parse(r->ebody.data, r->ebody.len);
            xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
            if (root && named(root, "Error")) {
                code = child_text(root, "Code");
                msg = child_text(root, "Message");
            }
            xmlFreeDoc(doc);
            st = http_status(r->status, code);
            m.len = 0;
            buf_clear(&m);
            what(&m, c, r);
            pre = m.len;
            buf_printf(&m, "%s (", status_text(st));
            if (code) buf_printf(&m, "%s: %s", code, msg && *msg ? msg : "no message");
            else buf_printf(&m, "HTTP %ld", r->status);
            buf_printf(&m, ") at %s", c->endpoint);
            free(code);
            free(msg);
            if (st != S3_TRANSIENT) goto out;
            last = FAIL_TRANSIENT;
        } else {
            buf_clear(&m);
            what(&m, c, r);
            pre = m.len;
            buf_printf(&m, "%s (curl error %d: %s%s%s) at %s",
                       last == FAIL_CONNECT ? "unreachable" : status_text(S3_TRANSIENT),
                       (int)cc, curl_easy_strerror(cc), curl_err[0] ? ": " : "", curl_err,
                       c->endpoint);
            if (last == FAIL_FINAL) {
                st = cc == CURLE_OUT_OF_MEMORY ? S3_NOMEM : S3_INVALID;
                goto out;
            }
            st = last == FAIL_CONNECT ? S3_UNREACHABLE : S3_TRANSIENT;
        }
        int rank = last == FAIL_TRANSIENT && cc == CURLE_OK ? 3 : last == FAIL_CONNECT ? 2 : 1;
        if (rank >= best_rank) {
            best_rank = rank;
            best_st = st;
            buf_clear(&best);
            if (buf_append(&best, m.data, m.len) != 0) goto nomem;
        }
        /* a failure that may pass: back off (full jitter) and try again */
        double cap = c->backoff_s * (double)(1u << (attempt < 20 ? attempt - 1 : 19));
        double wait = cap * jitter(&seed);
        if (attempt >= c->max_attempts || mono_seconds() + wait >= deadline) break;
        LOG_WARN("s3", "op=%s bucket=%s key=%s attempt=%d status=%ld curl=%d retry_in=%.3fs",
                 LOGV(r->op), LOGV(r->bucket ? r->bucket : ""), LOGV(r->key ? r->key : ""),
                 attempt, r->status,
                 (int)cc, wait);
        sleep_s(wait);
    }
    if (best.len != m.len || memcmp(best.data, m.data, m.len) != 0) {
        /* the strongest cause, then what the last attempt met */
        if (buf_printf(&best, "; last: %s", m.data + pre) != 0) goto nomem;
        buf_free(&m);
        m = best;
        best = (buf){0};
        st = best_st;
    }
    buf_printf(&m, "; gave up after %d attempt%s in %.1f s", attempt, attempt == 1 ? "" : "s",
               mono_seconds() - start);
    goto out;
nomem:
    st = S3_NOMEM;
    buf_clear(&m);
    what(&m, c, r);
    buf_puts(&m, "out of memory");
out:
    if (st != S3_OK) say(err, errlen, &m);
    buf_free(&m);
    buf_free(&best);
    /* the header list holds the session token: detach it before freeing */
    if (r->h) {
        curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(r->h, CURLOPT_ERRORBUFFER, NULL);
    }
    curl_slist_free_all(hdrs);
    free(url);
    return st;
}

static void req_free(req *r)
{
    buf_free(&r->resp);
    buf_free(&r->ebody);
}

static double call_deadline(const s3_client *c) { return mono_seconds() + c->deadline_s; }

/* ------------------------------------------------------------ client */

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

static void wipe_free(char *s)
{
    if (!s) return;
    volatile char *p = s;
    while (*p) *p++ = '\0';
    free(s);
}

void s3_free(s3_client *c)
{
    if (!c) return;
    if (c->h) curl_easy_cleanup(c->h);
    free(c->endpoint);
    free(c->region);
    free(c->sigv4);
    free(c->ca_bundle);
    free(c->key_id);
    wipe_free(c->secret);
    wipe_free(c->token_hdr);
    free(c);
}

s3_status s3_new(const s3_options *opts, s3_client **out, char *err, size_t errlen)
{
    s3_options o = {0};
    if (opts) o = *opts;
    *out = NULL;
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    if (!id || !*id || !secret || !*secret) {
        err_printf(err, errlen, "s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set");
        return S3_INVALID;
    }
    const char *region = o.region && *o.region ? o.region : getenv("AWS_REGION");
    if (!region || !*region) region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region) region = "us-east-1";
    for (const char *p = region; *p; p++) {
        if (!isalnum((unsigned char)*p) && *p != '-') {
            err_printf(err, errlen, "s3: region \"%s\" is not a region name", region);
            return S3_INVALID;
        }
    }
    int custom = o.endpoint && *o.endpoint;
    if (custom && strncmp(o.endpoint, "http://", 7) != 0 && strncmp(o.endpoint, "https://", 8) != 0) {
        err_printf(err, errlen, "s3: endpoint %s: not an http:// or https:// URL", o.endpoint);
        return S3_INVALID;
    }
    if (o.path_style < 0 || o.path_style > 2) {
        err_printf(err, errlen, "s3: path_style %d: 0 (auto), 1 (path) or 2 (virtual)",
                   o.path_style);
        return S3_INVALID;
    }
    char errbuf[256];
    if (http_global_init(errbuf, sizeof errbuf)) {
        err_printf(err, errlen, "s3: %s", errbuf);
        return S3_NOMEM;
    }
    xmlInitParser(); /* once, before any thread parses */

    s3_client *c = calloc(1, sizeof *c);
    if (!c) goto nomem;
    buf e = {0};
    if (custom) {
        buf_puts(&e, o.endpoint);
        while (e.len > 0 && e.data[e.len - 1] == '/') e.data[--e.len] = '\0';
    } else {
        buf_printf(&e, "https://s3.%s.amazonaws.com", region);
    }
    if (e.failed) goto nomem;
    c->endpoint = buf_take(&e);
    c->virtual_host = o.path_style == 2 || (o.path_style == 0 && !custom);
    c->region = strdup(region);
    size_t sl = strlen(region) + 16;
    if ((c->sigv4 = malloc(sl))) snprintf(c->sigv4, sl, "aws:amz:%s:s3", region);
    c->ca_bundle = dup_or_null(o.ca_bundle);
    c->key_id = strdup(id);
    c->secret = strdup(secret);
    if (token && *token) {
        size_t tl = strlen(token) + 32;
        if ((c->token_hdr = malloc(tl))) snprintf(c->token_hdr, tl, "x-amz-security-token: %s", token);
        if (!c->token_hdr) goto nomem;
    }
    if (!c->endpoint || !c->region || !c->sigv4 || !c->key_id || !c->secret ||
        (o.ca_bundle && *o.ca_bundle && !c->ca_bundle))
        goto nomem;
    c->max_attempts = o.max_attempts > 0 ? o.max_attempts : 5;
    c->timeout_s = o.timeout_s > 0 ? o.timeout_s : 30;
    c->deadline_s = o.deadline_s > 0 ? o.deadline_s : 900;
    c->backoff_s = o.backoff_s > 0 ? o.backoff_s : 0.5;
    c->parallel = o.parallel > 0 ? o.parallel : 4;
    c->multipart_threshold = o.multipart_threshold > 0 ? o.multipart_threshold : (size_t)64 << 20;
    c->part_size = o.part_size > 0 ? o.part_size : (size_t)16 << 20;
    if (c->part_size < S3_MIN_PART) c->part_size = S3_MIN_PART;
    c->list_page_size = o.list_page_size > 0 ? o.list_page_size : 1000;
    if (!(c->h = curl_easy_init())) goto nomem;
    *out = c;
    return S3_OK;
nomem:
    s3_free(c);
    err_printf(err, errlen, "s3: out of memory");
    return S3_NOMEM;
}

/* ------------------------------------------------------------ operations */

static s3_status check_names(const char *op, const char *bucket, const char *key, char *err,
                             size_t errlen)
{
    if (!bucket || !*bucket || strchr(bucket, '/')) {
        err_printf(err, errlen, "s3 %s: bucket \"%s\" is not a bucket name", op,
                   bucket ? bucket : "(null)");
        return S3_INVALID;
    }
    if (key && !*key) {
        err_printf(err, errlen, "s3 %s bucket=%s: empty key", op, bucket);
        return S3_INVALID;
    }
    return S3_OK;
}

static s3_status put_single(s3_client *c, const char *bucket, const char *key, const void *b,
                            size_t len, double deadline, char *err, size_t errlen)
{
    req r = {.op = "PUT", .method = "PUT", .bucket = bucket, .key = key, .body = b,
             .body_len = len, .resp_max = S3_XMLBODY_MAX, .h = c->h};
    s3_status st = perform(c, &r, deadline, 0, err, errlen);
    req_free(&r);
    return st;
}

/* multipart: the parts shared by the worker threads */
typedef struct {
    s3_client *c;
    const char *bucket, *key, *upload_id_enc;
    const char *data;
    size_t len, part_size, nparts;
    double deadline;
    pthread_mutex_t mu;
    size_t next;      /* the next part to send (0-based) */
    int failed;       /* stop taking parts */
    s3_status st;     /* the first failure */
    char err[1024];
    char (*etags)[256];
} mp_state;

static void *mp_worker(void *arg)
{
    mp_state *s = arg;
    char err[1024];
    CURL *h = curl_easy_init();
    for (;;) {
        pthread_mutex_lock(&s->mu);
        size_t i = s->next++;
        int stop = s->failed || i >= s->nparts || !h;
        if (!h && !s->failed) {
            s->failed = 1;
            s->st = S3_NOMEM;
            snprintf(s->err, sizeof s->err, "s3 UploadPart bucket=%s key=%s: curl_easy_init failed",
                     s->bucket, s->key);
        }
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        char query[1200];
        snprintf(query, sizeof query, "partNumber=%zu&uploadId=%s", i + 1, s->upload_id_enc);
        size_t off = i * s->part_size;
        size_t n = s->len - off < s->part_size ? s->len - off : s->part_size;
        req r = {.op = "UploadPart", .method = "PUT", .bucket = s->bucket, .key = s->key,
                 .query = query, .body = s->data + off, .body_len = n,
                 .resp_max = S3_XMLBODY_MAX, .h = h};
        s3_status st = perform(s->c, &r, s->deadline, 0, err, sizeof err);
        if (st == S3_OK && !r.etag[0]) {
            st = S3_INVALID;
            snprintf(err, sizeof err, "s3 UploadPart bucket=%s key=%s: part %zu: no ETag in the "
                     "reply at %s", s->bucket, s->key, i + 1, s->c->endpoint);
        }
        if (st == S3_OK) memcpy(s->etags[i], r.etag, sizeof r.etag);
        req_free(&r);
        if (st != S3_OK) {
            pthread_mutex_lock(&s->mu);
            if (!s->failed) {
                s->failed = 1;
                s->st = st;
                snprintf(s->err, sizeof s->err, "%s", err);
            }
            pthread_mutex_unlock(&s->mu);
            break;
        }
    }
    if (h) curl_easy_cleanup(h);
    return NULL;
}

/* The text of a child of the root of an XML reply (malloc'd), or NULL. */
static char *reply_field(const buf *b, const char *root_name, const char *field)
{
    xmlDocPtr doc = xml_parse(b->data, b->len);
    xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
    char *v = root && named(root, root_name) ? child_text(root, field) : NULL;
    xmlFreeDoc(doc);
    return v;
}

static void mp_abort(s3_client *c, const char *bucket, const char *key, const char *id_enc,
                     double deadline)
{
    char query[1100], err[512];
    snprintf(query, sizeof query, "uploadId=%s", id_enc);
    req r = {.op = "AbortMultipartUpload", .method = "DELETE", .bucket = bucket, .key = key,
             .query = query, .resp_max = S3_XMLBODY_MAX, .h = c->h};
    /* a few seconds more than the call's deadline, so that an upload that
     * ran out of time is still cleaned up */
    double now = mono_seconds();
    s3_status st = perform(c, &r, deadline > now + 10 ? deadline : now + 10, 0, err, sizeof err);
    if (st != S3_OK && st != S3_NOT_FOUND)
        LOG_WARN("s3", "msg=\"abort of a failed multipart upload failed; the bucket's lifecycle "
                 "rule must remove it\" err=%s", LOGV(err));
    req_free(&r);
}

static s3_status put_multipart(s3_client *c, const char *bucket, const char *key, const void *b,
                               size_t len, double deadline, char *err, size_t errlen)
{
    s3_status st;
    size_t part = c->part_size;
    if ((len + part - 1) / part > S3_MAX_PARTS) part = (len + S3_MAX_PARTS - 1) / S3_MAX_PARTS;
    size_t nparts = (len + part - 1) / part;
    char *id = NULL, *id_enc = NULL;
    mp_state s = {.c = c, .bucket = bucket, .key = key, .data = b, .len = len,
                  .part_size = part, .nparts = nparts, .deadline = deadline};
    buf body = {0};

    req cr = {.op = "CreateMultipartUpload", .method = "POST", .bucket = bucket, .key = key,
              .query = "uploads=", .content_type = "application/octet-stream",
              .resp_max = S3_XMLBODY_MAX, .h = c->h};
    st = perform(c, &cr, deadline, 0, err, errlen);
    if (st == S3_OK) {
        id = reply_field(&cr.resp, "InitiateMultipartUploadResult", "UploadId");
        if (!id || !*id) {
            err_printf(err, errlen, "s3 CreateMultipartUpload bucket=%s key=%s: no UploadId in "
                       "the reply at %s", bucket, key, c->endpoint);
            st = S3_INVALID;
        }
    }
    req_free(&cr);
    if (st != S3_OK) goto out;
    if (!(id_enc = s3_uri_encode(id, 0))) goto nomem_abort;

    s.upload_id_enc = id_enc;
    if (!(s.etags = calloc(nparts, sizeof *s.etags))) goto nomem_abort;
    pthread_mutex_init(&s.mu, NULL);
    int nt = c->parallel < (int)nparts ? c->parallel : (int)nparts, started = 0;
    pthread_t tids[64];
    if (nt > 64) nt = 64;
    for (int i = 0; i < nt; i++) {
        if (pthread_create(&tids[i], NULL, mp_worker, &s) != 0) break;
        started++;
    }
    if (started == 0) mp_worker(&s); /* no thread to be had: this one sends them all */
    for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
    pthread_mutex_destroy(&s.mu);
    if (s.failed) {
        st = s.st;
        err_printf(err, errlen, "%s", s.err);
        mp_abort(c, bucket, key, id_enc, deadline);
        goto out;
    }

    buf_puts(&body, "<CompleteMultipartUpload>");
    for (size_t i = 0; i < nparts; i++) {
        xmlChar *etag = xmlEncodeSpecialChars(NULL, (const xmlChar *)s.etags[i]);
        buf_printf(&body, "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", i + 1,
                   etag ? (const char *)etag : "");
        xmlFree(etag);
    }
    buf_puts(&body, "</CompleteMultipartUpload>");
    if (body.failed) goto nomem_abort;
    char query[1100];
    snprintf(query, sizeof query, "uploadId=%s", id_enc);
    req done = {.op = "CompleteMultipartUpload", .method = "POST", .bucket = bucket, .key = key,
                .query = query, .content_type = "application/xml", .body = body.data,
                .body_len = body.len, .resp_max = S3_XMLBODY_MAX, .h = c->h};
    st = perform(c, &done, deadline, 0, err, errlen);
    /* a 200 whose body is an <Error> is a failure (S3 says so for Complete) */
    if (st == S3_OK) {
        char *code = reply_field(&done.resp, "Error", "Code");
        if (code) {
            char *msg = reply_field(&done.resp, "Error", "Message");
            st = http_status(500, code);
            err_printf(err, errlen, "s3 CompleteMultipartUpload bucket=%s key=%s: %s (%s: %s) at %s",
                       bucket, key, status_text(st), code, msg ? msg : "no message", c->endpoint);
            free(msg);
            free(code);
        }
    }
    req_free(&done);
    if (st != S3_OK) mp_abort(c, bucket, key, id_enc, deadline);
    goto out;
nomem_abort:
    st = S3_NOMEM;
    err_printf(err, errlen, "s3 PUT bucket=%s key=%s: out of memory", bucket, key);
    if (id_enc) mp_abort(c, bucket, key, id_enc, deadline);
out:
    buf_free(&body);
    free(s.etags);
    free(id);
    free(id_enc);
    return st;
}

s3_status s3_put(s3_client *c, const char *bucket, const char *key, const void *buf_,
                 size_t len, char *err, size_t errlen)
{
    s3_status st = check_names("PUT", bucket, key ? key : "", err, errlen);
    if (st != S3_OK) return st;
    double deadline = call_deadline(c);
    if (len >= c->multipart_threshold && len > 0)
        return put_multipart(c, bucket, key, buf_, len, deadline, err, errlen);
    return put_single(c, bucket, key, buf_, len, deadline, err, errlen);
}

s3_status s3_head(s3_client *c, const char *bucket, const char *key, uint64_t *size, char *err,
                  size_t errlen)
{
    s3_status st = check_names("HEAD", bucket, key ? key : "", err, errlen);
    if (st != S3_OK) return st;
    req r = {.op = "HEAD", .method = "HEAD", .bucket = bucket, .key = key,
             .resp_max = S3_XMLBODY_MAX, .h = c->h};
    st = perform(c, &r, call_deadline(c), 0, err, errlen);
    if (st == S3_OK && size) *size = r.length;
    req_free(&r);
    return st;
}

/* A ranged GET of len bytes at off into out, or handed to sink when out is
 * NULL; *got the bytes that came (0 for a 416: off at or past the end). */
static s3_status get_range(s3_client *c, const char *bucket, const char *key, uint64_t off,
                           size_t len, void *out, s3_sink sink, void *ctx, size_t *got,
                           char *err, size_t errlen)
{
    *got = 0;
    if (len == 0) return s3_head(c, bucket, key, NULL, err, errlen);
    s3_status st = check_names("GET", bucket, key ? key : "", err, errlen);
    if (st != S3_OK) return st;
    char range[64];
    snprintf(range, sizeof range, "bytes=%" PRIu64 "-%" PRIu64, off, off + (uint64_t)len - 1);
    req r = {.op = "GET", .method = "GET", .bucket = bucket, .key = key, .range = range,
             .out = out, .out_cap = out ? len : 0, .sink = out ? NULL : sink, .sink_ctx = ctx,
             .resp_max = S3_XMLBODY_MAX, .h = c->h};
    st = perform(c, &r, call_deadline(c), 1, err, errlen);
    if (st == S3_OK) *got = r.status == 416 ? 0 : r.out_len;
    req_free(&r);
    return st;
}

s3_status s3_get(s3_client *c, const char *bucket, const char *key, uint64_t off, size_t len,
                 void *out, size_t *got, char *err, size_t errlen)
{
    return get_range(c, bucket, key, off, len, out, NULL, NULL, got, err, errlen);
}

s3_status s3_get_stream(s3_client *c, const char *bucket, const char *key, uint64_t off,
                        size_t len, s3_sink sink, void *ctx, size_t *got, char *err,
                        size_t errlen)
{
    return get_range(c, bucket, key, off, len, NULL, sink, ctx, got, err, errlen);
}

s3_status s3_get_all(s3_client *c, const char *bucket, const char *key, size_t max, void **out,
                     size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    s3_status st = check_names("GET", bucket, key ? key : "", err, errlen);
    if (st != S3_OK) return st;
    req r = {.op = "GET", .method = "GET", .bucket = bucket, .key = key,
             .resp_max = max, .h = c->h};
    st = perform(c, &r, call_deadline(c), 0, err, errlen);
    if (st == S3_OK) {
        *len = r.resp.len;
        if (!(*out = buf_take(&r.resp))) {
            *len = 0;
            st = S3_NOMEM;
            err_printf(err, errlen, "s3 GET bucket=%s key=%s: out of memory", bucket, key);
        }
    }
    req_free(&r);
    return st;
}

s3_status s3_delete(s3_client *c, const char *bucket, const char *key, char *err, size_t errlen)
{
    s3_status st = check_names("DELETE", bucket, key ? key : "", err, errlen);
    if (st != S3_OK) return st;
    req r = {.op = "DELETE", .method = "DELETE", .bucket = bucket, .key = key,
             .resp_max = S3_XMLBODY_MAX, .h = c->h};
    st = perform(c, &r, call_deadline(c), 0, err, errlen);
    req_free(&r);
    return st == S3_NOT_FOUND && r.status == 404 && key ? S3_OK : st;
}

void s3_listing_free(s3_listing *l)
{
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) free(l->items[i].key);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

static int item_cmp(const void *a, const void *b)
{
    return strcmp(((const s3_item *)a)->key, ((const s3_item *)b)->key);
}

static int add_item(s3_listing *l, size_t *cap, char *key, uint64_t size, int is_prefix)
{
    if (l->n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        s3_item *it = realloc(l->items, nc * sizeof *it);
        if (!it) return -1;
        l->items = it;
        *cap = nc;
    }
    l->items[l->n++] = (s3_item){.key = key, .size = size, .is_prefix = is_prefix};
    return 0;
}

/* One ListObjectsV2 page into l; *next the continuation token (malloc'd) or NULL. */
static int parse_page(const buf *b, s3_listing *l, size_t *cap, char **next)
{
    *next = NULL;
    xmlDocPtr doc = xml_parse(b->data, b->len);
    xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
    int rc = -1;
    if (!root || !named(root, "ListBucketResult")) goto out;
    for (xmlNodePtr k = root->children; k; k = k->next) {
        if (named(k, "Contents")) {
            char *key = child_text(k, "Key"), *size = child_text(k, "Size");
            if (!key || add_item(l, cap, key, size ? strtoull(size, NULL, 10) : 0, 0)) {
                free(key);
                free(size);
                goto out;
            }
            free(size);
        } else if (named(k, "CommonPrefixes")) {
            char *p = child_text(k, "Prefix");
            if (!p || add_item(l, cap, p, 0, 1)) {
                free(p);
                goto out;
            }
        }
    }
    char *trunc = child_text(root, "IsTruncated");
    if (trunc && strcmp(trunc, "true") == 0) {
        *next = child_text(root, "NextContinuationToken");
        if (!*next || !**next) {
            free(trunc);
            free(*next);
            *next = NULL;
            goto out; /* truncated without a token: a reply we cannot follow */
        }
    }
    free(trunc);
    rc = 0;
out:
    xmlFreeDoc(doc);
    return rc;
}

s3_status s3_list(s3_client *c, const char *bucket, const char *prefix, const char *delimiter,
                  s3_listing *out, char *err, size_t errlen)
{
    out->items = NULL;
    out->n = 0;
    s3_status st = check_names("LIST", bucket, NULL, err, errlen);
    if (st != S3_OK) return st;
    double deadline = call_deadline(c);
    size_t cap = 0;
    char *token = NULL;
    char *eprefix = s3_uri_encode(prefix ? prefix : "", 0);
    char *edelim = s3_uri_encode(delimiter ? delimiter : "", 0);
    buf q = {0};
    if (!eprefix || !edelim) goto nomem;
    do {
        char *etoken = token ? s3_uri_encode(token, 0) : NULL;
        if (token && !etoken) goto nomem;
        /* sorted by name, as SigV4 signs them */
        buf_clear(&q);
        if (etoken) buf_printf(&q, "continuation-token=%s&", etoken);
        if (*edelim) buf_printf(&q, "delimiter=%s&", edelim);
        buf_printf(&q, "list-type=2&max-keys=%d&prefix=%s", c->list_page_size, eprefix);
        free(etoken);
        if (q.failed) goto nomem;
        req r = {.op = "LIST", .method = "GET", .bucket = bucket, .key = prefix ? prefix : "",
                 .query = q.data, .resp_max = S3_XMLBODY_MAX, .h = c->h};
        r.key = NULL; /* the bucket's root */
        st = perform(c, &r, deadline, 0, err, errlen);
        free(token);
        token = NULL;
        if (st == S3_OK && parse_page(&r.resp, out, &cap, &token)) {
            st = S3_INVALID;
            err_printf(err, errlen, "s3 LIST bucket=%s prefix=%s: a reply that is not a "
                       "ListBucketResult at %s", bucket, prefix ? prefix : "", c->endpoint);
        }
        req_free(&r);
        if (st != S3_OK) goto fail;
    } while (token);
    if (out->n > 1) qsort(out->items, out->n, sizeof *out->items, item_cmp);
    goto done;
nomem:
    st = S3_NOMEM;
    err_printf(err, errlen, "s3 LIST bucket=%s: out of memory", bucket);
fail:
    s3_listing_free(out);
done:
    free(token);
    free(eprefix);
    free(edelim);
    buf_free(&q);
    return st;
}
