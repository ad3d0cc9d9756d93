/* lib/kube.c - see kube.h. Owns the kube_client (config + one http_client);
 * must not log or report the bearer token. */
#include "kube.h"
#include "util.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AUTH_MAX 16500
#define URL_MAX 8192

struct kube_client {
    kube_config *cfg;
    http_client *http;
    long timeout_ms;
};

static void st_set(kube_status *st, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#include <stdarg.h>
static void st_set(kube_status *st, int code, const char *reason, const char *fmt, ...)
{
    if (!st) return;
    st->http_code = code;
    st->server_message[0] = '\0';
    snprintf(st->reason, sizeof st->reason, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof st->message, fmt, ap);
    va_end(ap);
}

static void st_ok(kube_status *st, int code)
{
    if (!st) return;
    st->http_code = code;
    st->reason[0] = '\0';
    st->message[0] = '\0';
    st->server_message[0] = '\0';
}

int kube_client_new(kube_config *cfg, kube_client **out, kube_status *st)
{
    char err[512];
    http_options o;
    kube_client *c = calloc(1, sizeof *c);
    if (!c) {
        kube_config_free(cfg);
        st_set(st, 0, "Invalid", "out of memory");
        return KUBE_ERR_INVALID;
    }
    c->cfg = cfg;
    c->timeout_ms = 30000;
    kube_config_http_options(cfg, &o);
    if (http_client_new(&o, &c->http, err, sizeof err)) {
        st_set(st, 0, "Invalid", "%s", err);
        kube_client_free(c);
        return KUBE_ERR_INVALID;
    }
    *out = c;
    return KUBE_OK;
}

void kube_client_free(kube_client *c)
{
    if (!c) return;
    http_client_free(c->http);
    kube_config_free(c->cfg);
    free(c);
}

kube_config *kube_client_config(kube_client *c) { return c->cfg; }
const char *kube_client_namespace(const kube_client *c) { return kube_config_namespace(c->cfg); }
void kube_client_set_timeout(kube_client *c, long timeout_ms)
{
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
}

int kube_client_http_new(kube_client *c, http_client **out, kube_status *st)
{
    char err[512];
    http_options o;
    kube_config_http_options(c->cfg, &o);
    if (http_client_new(&o, out, err, sizeof err)) {
        st_set(st, 0, "Invalid", "%s", err);
        return KUBE_ERR_INVALID;
    }
    return KUBE_OK;
}

const char *kube_meta_str(const cJSON *obj, const char *field)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), field);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int kube_is_not_found(const kube_status *st) { return st && st->http_code == 404; }

int kube_is_permanent(const kube_status *st)
{
    if (st == NULL || st->http_code < 400 || st->http_code > 499)
        return 0;
    switch (st->http_code) {
    case 401: /* credentials: a rotated token fixes it */
    case 404: /* something it needs is gone or not there yet */
    case 408: /* timeout */
    case 409: /* conflict or already exists: read again and retry */
    case 429: /* throttled */
        return 0;
    default:
        return 1;
    }
}

/* ------------------------------------------------------------------- paths */

/* Percent-escapes everything but RFC 3986 unreserved characters. */
static int escape_into(char *buf, size_t buflen, size_t *pos, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' || ch == '~';
        size_t need = plain ? 1 : 3;
        if (*pos + need >= buflen) return -1;
        if (plain) {
            buf[(*pos)++] = (char)ch;
        } else {
            buf[(*pos)++] = '%';
            buf[(*pos)++] = hex[ch >> 4];
            buf[(*pos)++] = hex[ch & 15];
        }
    }
    buf[*pos] = '\0';
    return 0;
}

static int raw_into(char *buf, size_t buflen, size_t *pos, const char *s)
{
    size_t n = strlen(s);
    if (*pos + n >= buflen) return -1;
    memcpy(buf + *pos, s, n + 1);
    *pos += n;
    return 0;
}

int kube_path(char *buf, size_t buflen, const char *prefix, const char *ns, const char *resource,
              const char *name, const char *sub)
{
    size_t pos = 0;
    if (!buflen) return -1;
    buf[0] = '\0';
    if (raw_into(buf, buflen, &pos, prefix)) return -1;
    if (ns && ns[0] &&
        (raw_into(buf, buflen, &pos, "/namespaces/") || escape_into(buf, buflen, &pos, ns)))
        return -1;
    if (raw_into(buf, buflen, &pos, "/") || escape_into(buf, buflen, &pos, resource)) return -1;
    if (name && name[0] &&
        (raw_into(buf, buflen, &pos, "/") || escape_into(buf, buflen, &pos, name)))
        return -1;
    if (name && name[0] && sub && sub[0] &&
        (raw_into(buf, buflen, &pos, "/") || escape_into(buf, buflen, &pos, sub)))
        return -1;
    return 0;
}

int kube_query_add(char *buf, size_t buflen, const char *key, const char *value)
{
    size_t pos = strlen(buf);
    if (raw_into(buf, buflen, &pos, strchr(buf, '?') ? "&" : "?") ||
        escape_into(buf, buflen, &pos, key) || raw_into(buf, buflen, &pos, "=") ||
        escape_into(buf, buflen, &pos, value))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- requests */

/* "Authorization: Bearer ..." into buf, or "" when there is no token. */
static int auth_header(kube_client *c, char *buf, size_t buflen, kube_status *st)
{
    char err[512];
    static const char pre[] = "Authorization: Bearer ";
    size_t pl = sizeof pre - 1;
    if (kube_config_token(c->cfg, buf + pl, buflen - pl, err, sizeof err)) {
        memset(buf, 0, buflen);
        st_set(st, 0, "Invalid", "%s", err);
        return KUBE_ERR_INVALID;
    }
    if (buf[pl] == '\0') {
        buf[0] = '\0';
        return KUBE_OK;
    }
    memcpy(buf, pre, pl);
    return KUBE_OK;
}

/* Fills st from a non-2xx answer: the Status object's reason and message when
 * the body is one, else the start of the body. */
static void status_from_body(kube_client *c, kube_status *st, long code, const char *method,
                             const char *path, const char *body)
{
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(j, "reason");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(j, "message");
    char text[400];
    if (cJSON_IsString(msg))
        snprintf(text, sizeof text, "%s", msg->valuestring);
    else
        snprintf(text, sizeof text, "%.200s", body && body[0] ? body : "(empty body)");
    const char *r = cJSON_IsString(reason) ? reason->valuestring
                    : code == 401           ? "Unauthorized"
                    : code == 403           ? "Forbidden"
                    : code == 404           ? "NotFound"
                                            : "Unknown";
    if (code == 401)
        st_set(st, (int)code, r, "%s %s: 401 %s: %s (the credentials from %s were rejected)",
               method, path, r, text, kube_config_source(c->cfg));
    else
        st_set(st, (int)code, r, "%s %s: %ld %s: %s", method, path, code, r, text);
    snprintf(st->server_message, sizeof st->server_message, "%s", text);
    cJSON_Delete(j);
}

static kube_observer_fn observer;
static void *observer_user;

void kube_set_observer(kube_observer_fn fn, void *user)
{
    observer = fn;
    observer_user = user;
}

static void observe(const char *method, int code)
{
    if (observer) observer(observer_user, method, code);
}

int kube_request(kube_client *c, const char *method, const char *path, const char *content_type,
                 const char *body, cJSON **out, kube_status *st)
{
    char url[URL_MAX], ctype[128], err[1024];
    char *auth = malloc(AUTH_MAX);
    http_response resp = {0};
    int rc = KUBE_ERR_INVALID;
    if (!auth) {
        st_set(st, 0, "Invalid", "out of memory");
        return KUBE_ERR_INVALID;
    }
    if (snprintf(url, sizeof url, "%s%s", kube_config_server(c->cfg), path) >= (int)sizeof url) {
        st_set(st, 0, "Invalid", "%s %s: path too long", method, path);
        goto out;
    }
    if ((rc = auth_header(c, auth, AUTH_MAX, st))) goto out;
    snprintf(ctype, sizeof ctype, "Content-Type: %s", content_type ? content_type : "application/json");
    const char *headers[4];
    int nh = 0;
    headers[nh++] = "Accept: application/json";
    if (body) headers[nh++] = ctype;
    if (auth[0]) headers[nh++] = auth;
    headers[nh] = NULL;
    double t0 = 1e3 * mono_seconds();
    if (http_request(c->http, method, url, headers, body, body ? strlen(body) : 0, c->timeout_ms,
                     &resp, err, sizeof err)) {
        LOG_DEBUG("kube", "method=%s path=%s error=%s", LOGV(method), LOGV(path), LOGV(err));
        observe(method, 0);
        st_set(st, 0, "Transport", "%s", err);
        rc = KUBE_ERR_TRANSPORT;
        goto out;
    }
    LOG_DEBUG("kube", "method=%s path=%s status=%ld ms=%.1f", LOGV(method), LOGV(path), resp.status,
              1e3 * mono_seconds() - t0);
    observe(method, (int)resp.status);
    if (resp.status < 200 || resp.status >= 300) {
        status_from_body(c, st, resp.status, method, path, resp.body);
        rc = KUBE_ERR_HTTP;
        goto out;
    }
    if (out) {
        cJSON *j = cJSON_ParseWithLength(resp.body, resp.len);
        if (!j) {
            st_set(st, (int)resp.status, "Invalid", "%s %s: response is not JSON", method, path);
            rc = KUBE_ERR_INVALID;
            goto out;
        }
        *out = j;
    }
    st_ok(st, (int)resp.status);
    rc = KUBE_OK;
out:
    memset(auth, 0, AUTH_MAX);
    free(auth);
    http_response_free(&resp);
    return rc;
}

static int send_json(kube_client *c, const char *method, const char *path, const char *ctype,
                     const cJSON *obj, cJSON **out, kube_status *st)
{
    char *body = cJSON_PrintUnformatted(obj);
    if (!body) {
        st_set(st, 0, "Invalid", "%s %s: cannot serialise the body", method, path);
        return KUBE_ERR_INVALID;
    }
    int rc = kube_request(c, method, path, ctype, body, out, st);
    free(body);
    return rc;
}

int kube_get(kube_client *c, const char *path, cJSON **out, kube_status *st)
{
    return kube_request(c, "GET", path, NULL, NULL, out, st);
}

int kube_create(kube_client *c, const char *path, const cJSON *obj, cJSON **out, kube_status *st)
{
    return send_json(c, "POST", path, "application/json", obj, out, st);
}

int kube_update(kube_client *c, const char *path, const cJSON *obj, cJSON **out, kube_status *st)
{
    return send_json(c, "PUT", path, "application/json", obj, out, st);
}

int kube_merge_patch(kube_client *c, const char *path, const cJSON *patch, cJSON **out,
                     kube_status *st)
{
    return send_json(c, "PATCH", path, "application/merge-patch+json", patch, out, st);
}

int kube_json_patch(kube_client *c, const char *path, const cJSON *ops, cJSON **out,
                    kube_status *st)
{
    if (!cJSON_IsArray(ops)) {
        st_set(st, 0, "Invalid", "PATCH %s: a JSON patch must be an array of operations", path);
        return KUBE_ERR_INVALID;
    }
    return send_json(c, "PATCH", path, "application/json-patch+json", ops, out, st);
}

int kube_delete(kube_client *c, const char *path, long grace_seconds, const char *propagation,
                cJSON **out, kube_status *st)
{
    cJSON *opts = cJSON_CreateObject();
    if (!opts || !cJSON_AddStringToObject(opts, "apiVersion", "v1") ||
        !cJSON_AddStringToObject(opts, "kind", "DeleteOptions") ||
        (grace_seconds >= 0 &&
         !cJSON_AddNumberToObject(opts, "gracePeriodSeconds", (double)grace_seconds)) ||
        (propagation && !cJSON_AddStringToObject(opts, "propagationPolicy", propagation))) {
        cJSON_Delete(opts);
        st_set(st, 0, "Invalid", "out of memory");
        return KUBE_ERR_INVALID;
    }
    int rc = send_json(c, "DELETE", path, "application/json", opts, out, st);
    cJSON_Delete(opts);
    return rc;
}

int kube_list_each(kube_client *c, const char *path, const kube_list_opts *opts,
                   kube_list_item_fn fn, void *user, char *rv, size_t rvlen, kube_status *st)
{
    char url[URL_MAX], *cont = NULL;
    char first_rv[64] = "";
    int rc = KUBE_ERR_INVALID, restarts = 0;
    for (;;) {
        cJSON *page = NULL;
        if (snprintf(url, sizeof url, "%s", path) >= (int)sizeof url ||
            (opts && opts->label_selector && opts->label_selector[0] &&
             kube_query_add(url, sizeof url, "labelSelector", opts->label_selector)) ||
            (opts && opts->field_selector && opts->field_selector[0] &&
             kube_query_add(url, sizeof url, "fieldSelector", opts->field_selector))) {
            st_set(st, 0, "Invalid", "GET %s: path too long", path);
            goto out;
        }
        if (opts && opts->limit > 0) {
            char lim[32];
            snprintf(lim, sizeof lim, "%ld", opts->limit);
            if (kube_query_add(url, sizeof url, "limit", lim) ||
                (cont && kube_query_add(url, sizeof url, "continue", cont))) {
                st_set(st, 0, "Invalid", "GET %s: path too long", path);
                goto out;
            }
        }
        rc = kube_get(c, url, &page, st);
        if (rc == KUBE_ERR_HTTP && st->http_code == 410 && cont && restarts < 3) {
            /* The continue token expired: start the list again. */
            LOG_INFO("kube", "msg=\"list continue token expired, relisting\" path=%s", LOGV(path));
            restarts++;
            free(cont);
            cont = NULL;
            first_rv[0] = '\0';
            if (fn(user, NULL) != 0) {
                st_set(st, 0, "Invalid", "GET %s: out of memory", path);
                rc = KUBE_ERR_INVALID;
                goto out;
            }
            continue;
        }
        if (rc) goto out;
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(page, "metadata");
        const cJSON *prv = cJSON_GetObjectItemCaseSensitive(meta, "resourceVersion");
        const cJSON *pc = cJSON_GetObjectItemCaseSensitive(meta, "continue");
        cJSON *its = cJSON_GetObjectItemCaseSensitive(page, "items");
        /* Every page is served from the first page's snapshot: its rv is the list's. */
        if (!first_rv[0] && cJSON_IsString(prv))
            snprintf(first_rv, sizeof first_rv, "%s", prv->valuestring);
        if (its && !cJSON_IsArray(its) && !cJSON_IsNull(its)) {
            cJSON_Delete(page);
            st_set(st, st->http_code, "Invalid", "GET %s: items is not an array", path);
            rc = KUBE_ERR_INVALID;
            goto out;
        }
        int failed = 0;
        while (cJSON_IsArray(its) && its->child && !failed)
            failed = fn(user, cJSON_DetachItemViaPointer(its, its->child)) != 0;
        free(cont);
        cont = NULL;
        if (!failed && opts && opts->limit > 0 && cJSON_IsString(pc) && pc->valuestring[0]) {
            size_t n = strlen(pc->valuestring) + 1;
            if ((cont = malloc(n))) memcpy(cont, pc->valuestring, n);
        }
        cJSON_Delete(page);
        if (failed) {
            st_set(st, 0, "Invalid", "GET %s: out of memory", path);
            rc = KUBE_ERR_INVALID;
            goto out;
        }
        if (!cont) break;
    }
    if (rv) snprintf(rv, rvlen, "%s", first_rv);
    rc = KUBE_OK;
out:
    free(cont);
    return rc;
}

/* kube_list's item handler: into the array; NULL empties it. */
static int collect_item(void *user, cJSON *item)
{
    cJSON *all = user;
    if (!item) {
        while (all->child) cJSON_Delete(cJSON_DetachItemViaPointer(all, all->child));
        return 0;
    }
    cJSON_AddItemToArray(all, item);
    return 0;
}

int kube_list(kube_client *c, const char *path, const kube_list_opts *opts, cJSON **items,
              char *rv, size_t rvlen, kube_status *st)
{
    cJSON *all = cJSON_CreateArray();
    if (!all) {
        st_set(st, 0, "Invalid", "out of memory");
        return KUBE_ERR_INVALID;
    }
    int rc = kube_list_each(c, path, opts, collect_item, all, rv, rvlen, st);
    if (rc != KUBE_OK) {
        cJSON_Delete(all);
        return rc;
    }
    *items = all;
    return KUBE_OK;
}

int kube_stream(kube_client *c, http_client *h, const char *path, long timeout_ms,
                http_chunk_cb cb, void *user, const volatile sig_atomic_t *stop, kube_status *st)
{
    char url[URL_MAX], err[1024];
    char *auth = malloc(AUTH_MAX), *ebody = NULL;
    int rc = KUBE_ERR_INVALID;
    long status = 0;
    if (!auth) {
        st_set(st, 0, "Invalid", "out of memory");
        return KUBE_ERR_INVALID;
    }
    if (snprintf(url, sizeof url, "%s%s", kube_config_server(c->cfg), path) >= (int)sizeof url) {
        st_set(st, 0, "Invalid", "GET %s: path too long", path);
        goto out;
    }
    if ((rc = auth_header(c, auth, AUTH_MAX, st))) goto out;
    const char *headers[3] = {"Accept: application/json", auth[0] ? auth : NULL, NULL};
    int r = http_stream(h, url, headers, timeout_ms, cb, user, stop, &status, &ebody, err,
                        sizeof err);
    observe("WATCH", (int)status);
    if (r == 1) {
        st_set(st, (int)status, "Stopped", "watch stopped");
        rc = KUBE_WATCH_STOPPED;
    } else if (r < 0) {
        st_set(st, (int)status, "Transport", "%s", err);
        rc = KUBE_ERR_TRANSPORT;
    } else if (status < 200 || status >= 300) {
        status_from_body(c, st, status, "GET", path, ebody);
        rc = KUBE_ERR_HTTP;
    } else {
        st_ok(st, (int)status);
        rc = KUBE_OK;
    }
out:
    memset(auth, 0, AUTH_MAX);
    free(auth);
    free(ebody);
    return rc;
}
