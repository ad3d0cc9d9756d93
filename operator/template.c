/* operator/template.c - see template.h.
 *
 * Owns: validation of spec.template against the API server's pod rules.
 * Must not: allocate, log, or build pods.
 */
#include "template.h"

#include "json.h"
#include "kvalid.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ shapes
 * A table per object type: its keys, each with a JSON type and, for
 * objects and arrays of objects, the table of the nested type. Unknown keys
 * and wrong types are refused, naming the path. */

typedef enum { F_BOOL, F_INT, F_STR, F_OBJ, F_STR_LIST, F_INT_LIST, F_OBJ_LIST, F_STR_MAP } ftype;

typedef struct field {
    const char *name;
    ftype type;
    const struct field *sub;    /* F_OBJ, F_OBJ_LIST: the nested keys, {NULL}-terminated */
    const char *const *values;  /* F_STR: the allowed values, NULL-terminated; NULL = any */
} field;

static const char *const SECCOMP_TYPES[] = {"RuntimeDefault", "Localhost", "Unconfined", NULL};
static const char *const PROC_MOUNTS[] = {"Default", "Unmasked", NULL};
static const char *const FSGROUP_POLICIES[] = {"OnRootMismatch", "Always", NULL};
static const char *const TOLERATION_OPS[] = {"Exists", "Equal", "", NULL};
static const char *const TAINT_EFFECTS[] = {"NoSchedule", "PreferNoSchedule", "NoExecute", "",
                                            NULL};

static const field SECCOMP[] = {{"type", F_STR, NULL, SECCOMP_TYPES},
                                {"localhostProfile", F_STR, NULL, NULL},
                                {NULL, 0, NULL, NULL}};
static const field SELINUX[] = {{"user", F_STR, NULL, NULL},
                                {"role", F_STR, NULL, NULL},
                                {"type", F_STR, NULL, NULL},
                                {"level", F_STR, NULL, NULL},
                                {NULL, 0, NULL, NULL}};
static const field WINDOWS[] = {{"gmsaCredentialSpecName", F_STR, NULL, NULL},
                                {"gmsaCredentialSpec", F_STR, NULL, NULL},
                                {"runAsUserName", F_STR, NULL, NULL},
                                {"hostProcess", F_BOOL, NULL, NULL},
                                {NULL, 0, NULL, NULL}};
static const field SYSCTL[] = {{"name", F_STR, NULL, NULL},
                               {"value", F_STR, NULL, NULL},
                               {NULL, 0, NULL, NULL}};
static const field CAPABILITIES[] = {{"add", F_STR_LIST, NULL, NULL},
                                     {"drop", F_STR_LIST, NULL, NULL},
                                     {NULL, 0, NULL, NULL}};

/* core/v1 PodSecurityContext */
static const field POD_SECURITY[] = {{"runAsUser", F_INT, NULL, NULL},
                                     {"runAsGroup", F_INT, NULL, NULL},
                                     {"runAsNonRoot", F_BOOL, NULL, NULL},
                                     {"fsGroup", F_INT, NULL, NULL},
                                     {"fsGroupChangePolicy", F_STR, NULL, FSGROUP_POLICIES},
                                     {"supplementalGroups", F_INT_LIST, NULL, NULL},
                                     {"seccompProfile", F_OBJ, SECCOMP, NULL},
                                     {"appArmorProfile", F_OBJ, SECCOMP, NULL},
                                     {"seLinuxOptions", F_OBJ, SELINUX, NULL},
                                     {"windowsOptions", F_OBJ, WINDOWS, NULL},
                                     {"sysctls", F_OBJ_LIST, SYSCTL, NULL},
                                     {NULL, 0, NULL, NULL}};

/* core/v1 SecurityContext (of a container) */
static const field CONTAINER_SECURITY[] = {{"allowPrivilegeEscalation", F_BOOL, NULL, NULL},
                                           {"privileged", F_BOOL, NULL, NULL},
                                           {"readOnlyRootFilesystem", F_BOOL, NULL, NULL},
                                           {"runAsUser", F_INT, NULL, NULL},
                                           {"runAsGroup", F_INT, NULL, NULL},
                                           {"runAsNonRoot", F_BOOL, NULL, NULL},
                                           {"capabilities", F_OBJ, CAPABILITIES, NULL},
                                           {"procMount", F_STR, NULL, PROC_MOUNTS},
                                           {"seccompProfile", F_OBJ, SECCOMP, NULL},
                                           {"appArmorProfile", F_OBJ, SECCOMP, NULL},
                                           {"seLinuxOptions", F_OBJ, SELINUX, NULL},
                                           {"windowsOptions", F_OBJ, WINDOWS, NULL},
                                           {NULL, 0, NULL, NULL}};

static const field TOLERATION[] = {{"key", F_STR, NULL, NULL},
                                   {"operator", F_STR, NULL, TOLERATION_OPS},
                                   {"value", F_STR, NULL, NULL},
                                   {"effect", F_STR, NULL, TAINT_EFFECTS},
                                   {"tolerationSeconds", F_INT, NULL, NULL},
                                   {NULL, 0, NULL, NULL}};

static const field RESOURCES[] = {{"limits", F_OBJ, NULL, NULL},
                                  {"requests", F_OBJ, NULL, NULL},
                                  {NULL, 0, NULL, NULL}};

static const field TEMPLATE[] = {{"resources", F_OBJ, RESOURCES, NULL},
                                 {"nodeSelector", F_STR_MAP, NULL, NULL},
                                 {"tolerations", F_OBJ_LIST, TOLERATION, NULL},
                                 {"schedulerName", F_STR, NULL, NULL},
                                 {"priorityClassName", F_STR, NULL, NULL},
                                 {"terminationGracePeriodSeconds", F_INT, NULL, NULL},
                                 {"serviceAccountName", F_STR, NULL, NULL},
                                 {"securityContext", F_OBJ, POD_SECURITY, NULL},
                                 {"containerSecurityContext", F_OBJ, CONTAINER_SECURITY, NULL},
                                 {NULL, 0, NULL, NULL}};

static const char *type_word(ftype t)
{
    switch (t) {
    case F_BOOL: return "a boolean";
    case F_INT: return "an integer";
    case F_STR: return "a string";
    case F_OBJ: return "an object";
    case F_STR_MAP: return "an object of strings";
    case F_STR_LIST: return "a list of strings";
    case F_INT_LIST: return "a list of integers";
    case F_OBJ_LIST: return "a list of objects";
    }
    return "?";
}

static int is_int(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) < 9007199254740992.0;
}

static int all_items(const cJSON *arr, int (*ok)(const cJSON *))
{
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) if (!ok(it)) return 0;
    return 1;
}

static int is_str(const cJSON *v)
{
    return cJSON_IsString(v);
}

static int type_ok(const cJSON *v, ftype t)
{
    switch (t) {
    case F_BOOL: return cJSON_IsBool(v);
    case F_INT: return is_int(v);
    case F_STR: return cJSON_IsString(v);
    case F_OBJ: return cJSON_IsObject(v);
    case F_STR_MAP: return cJSON_IsObject(v) && all_items(v, is_str);
    case F_STR_LIST: return cJSON_IsArray(v) && all_items(v, is_str);
    case F_INT_LIST: return cJSON_IsArray(v) && all_items(v, is_int);
    case F_OBJ_LIST: return cJSON_IsArray(v) && all_items(v, cJSON_IsObject);
    }
    return 0;
}

static int shape(const cJSON *obj, const field *fields, const char *path, char *err,
                 size_t errlen)
{
    for (const cJSON *ch = obj->child; ch; ch = ch->next) {
        const field *f = fields;
        while (f->name && strcmp(f->name, ch->string) != 0)
            f++;
        if (f->name == NULL) {
            char allowed[512] = "";
            for (const field *g = fields; g->name; g++) {
                size_t n = strlen(allowed);
                snprintf(allowed + n, sizeof allowed - n, "%s%s", n ? ", " : "", g->name);
            }
            err_printf(err, errlen, "%s.%s: unknown key (allowed: %s)", path, ch->string, allowed);
            return -1;
        }
        if (!type_ok(ch, f->type)) {
            err_printf(err, errlen, "%s.%s: wrong type (expected %s)", path, ch->string,
                       type_word(f->type));
            return -1;
        }
        if (f->values) {
            const char *const *v = f->values;
            while (*v && strcmp(*v, ch->valuestring) != 0)
                v++;
            if (*v == NULL) {
                char allowed[256] = "";
                for (v = f->values; *v; v++) {
                    size_t n = strlen(allowed);
                    snprintf(allowed + n, sizeof allowed - n, "%s\"%s\"", n ? ", " : "", *v);
                }
                err_printf(err, errlen, "%s.%s=\"%s\": unsupported value (supported: %s)", path,
                           ch->string, ch->valuestring, allowed);
                return -1;
            }
        }
        char sub[256];
        if (f->type == F_OBJ && f->sub) {
            snprintf(sub, sizeof sub, "%s.%s", path, ch->string);
            if (shape(ch, f->sub, sub, err, errlen) != 0)
                return -1;
        } else if (f->type == F_OBJ_LIST && f->sub) {
            int i = 0;
            for (const cJSON *it = ch->child; it; it = it->next, i++) {
                snprintf(sub, sizeof sub, "%s.%s[%d]", path, ch->string, i);
                if (shape(it, f->sub, sub, err, errlen) != 0)
                    return -1;
            }
        }
    }
    return 0;
}

/* --------------------------------------------------------------- resources */

/* Names without a domain are Kubernetes' own; extended resources carry one
 * that is not *kubernetes.io. */
static int is_extended(const char *name)
{
    const char *slash = strchr(name, '/');
    if (slash == NULL)
        return 0;
    size_t plen = (size_t)(slash - name);
    static const char k8s[] = "kubernetes.io";
    return !(plen >= sizeof k8s - 1 && strncmp(slash - (sizeof k8s - 1), k8s, sizeof k8s - 1) == 0);
}

static int standard_name(const char *name)
{
    return strcmp(name, "cpu") == 0 || strcmp(name, "memory") == 0 ||
           strcmp(name, "ephemeral-storage") == 0 || strncmp(name, "hugepages-", 10) == 0 ||
           strchr(name, '/') != NULL;
}

/* One quantity of requests/limits: its value, or -1 with err set. */
static int quantity(const cJSON *v, const char *path, const char *name, long double *out,
                    char *err, size_t errlen)
{
    char buf[64], why[160];
    const char *s;
    if (cJSON_IsString(v)) {
        s = v->valuestring;
    } else if (cJSON_IsNumber(v)) {
        snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
        s = buf;
    } else {
        err_printf(err, errlen, "%s.%s: wrong type (expected a quantity such as \"500m\" or "
                                "\"4Gi\")", path, name);
        return -1;
    }
    if (!kv_parse_quantity(s, out, why, sizeof why)) {
        err_printf(err, errlen, "%s.%s=\"%s\": %s", path, name, s, why);
        return -1;
    }
    if (*out < 0) {
        err_printf(err, errlen, "%s.%s=\"%s\": must be greater than or equal to 0", path, name, s);
        return -1;
    }
    if (is_extended(name) && *out != floorl(*out)) {
        err_printf(err, errlen, "%s.%s=\"%s\": must be an integer (extended resource)", path,
                   name, s);
        return -1;
    }
    return 0;
}

static int resources(const cJSON *res, int gpus, char *err, size_t errlen)
{
    static const char *const parts[] = {"limits", "requests"};
    for (int p = 0; p < 2; p++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(res, parts[p]);
        char path[64];
        snprintf(path, sizeof path, "spec.template.resources.%s", parts[p]);
        for (const cJSON *q = m ? m->child : NULL; q; q = q->next) {
            char why[160];
            long double val;
            if (!kv_is_qualified_name(q->string, why, sizeof why)) {
                err_printf(err, errlen, "%s: resource name \"%s\": %s", path, q->string, why);
                return -1;
            }
            if (!standard_name(q->string)) {
                err_printf(err, errlen, "%s: resource name \"%s\": must be a standard resource "
                           "(cpu, memory, ephemeral-storage, hugepages-<size>) or carry a "
                           "domain prefix (e.g. nvidia.com/gpu)", path, q->string);
                return -1;
            }
            if (quantity(q, path, q->string, &val, err, errlen) != 0)
                return -1;
        }
    }
    const cJSON *limits = cJSON_GetObjectItemCaseSensitive(res, "limits");
    const cJSON *requests = cJSON_GetObjectItemCaseSensitive(res, "requests");
    for (const cJSON *q = requests ? requests->child : NULL; q; q = q->next) {
        if (gpus > 0 && strcmp(q->string, VJ_GPU_RESOURCE) == 0)
            continue; /* the operator sets both to gpusPerReplica */
        const cJSON *lim = cJSON_GetObjectItemCaseSensitive(limits, q->string);
        long double r, l;
        quantity(q, "", q->string, &r, NULL, 0);
        if (lim == NULL) {
            if (is_extended(q->string)) {
                err_printf(err, errlen, "spec.template.resources.limits.%s: required: a limit "
                           "must be set for an extended resource requested in "
                           "spec.template.resources.requests", q->string);
                return -1;
            }
            continue;
        }
        quantity(lim, "", q->string, &l, NULL, 0);
        if (is_extended(q->string) && r != l) {
            err_printf(err, errlen, "spec.template.resources.requests.%s: must be equal to the "
                       "%s limit", q->string, q->string);
            return -1;
        }
        if (r > l) {
            err_printf(err, errlen, "spec.template.resources.requests.%s: must be less than or "
                       "equal to the %s limit", q->string, q->string);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------- tolerations */

/* o[key] as a string, "" when absent. */
static const char *str_of(const cJSON *o, const char *key)
{
    const char *v = json_str(o, key);
    return v ? v : "";
}

static int tolerations(const cJSON *tols, char *err, size_t errlen)
{
    int i = 0;
    for (const cJSON *t = tols->child; t; t = t->next, i++) {
        const char *key = str_of(t, "key"), *op = str_of(t, "operator");
        const char *value = str_of(t, "value"), *effect = str_of(t, "effect");
        char why[160];
        if (*key && !kv_is_qualified_name(key, why, sizeof why)) {
            err_printf(err, errlen, "spec.template.tolerations[%d].key=\"%s\": %s", i, key, why);
            return -1;
        }
        if (!*key && strcmp(op, "Exists") != 0) {
            err_printf(err, errlen, "spec.template.tolerations[%d].operator=\"%s\": must be "
                       "Exists when key is empty (match all keys and values)", i, op);
            return -1;
        }
        if (strcmp(op, "Exists") == 0 && *value) {
            err_printf(err, errlen, "spec.template.tolerations[%d].value=\"%s\": must be empty "
                       "when operator is Exists", i, value);
            return -1;
        }
        if (strcmp(op, "Exists") != 0 && !kv_is_label_value(value, why, sizeof why)) {
            err_printf(err, errlen, "spec.template.tolerations[%d].value=\"%s\": %s", i, value,
                       why);
            return -1;
        }
        if (cJSON_GetObjectItemCaseSensitive(t, "tolerationSeconds") &&
            strcmp(effect, "NoExecute") != 0) {
            err_printf(err, errlen, "spec.template.tolerations[%d].effect=\"%s\": must be "
                       "NoExecute when tolerationSeconds is set", i, effect);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ entry */

int vj_template_validate(const cJSON *tmpl, int gpus, char *err, size_t errlen)
{
    if (tmpl == NULL)
        return 0;
    if (shape(tmpl, TEMPLATE, "spec.template", err, errlen) != 0)
        return -1;
    char why[160];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tmpl, "resources");
    if (v && resources(v, gpus, err, errlen) != 0)
        return -1;
    v = cJSON_GetObjectItemCaseSensitive(tmpl, "tolerations");
    if (v && tolerations(v, err, errlen) != 0)
        return -1;
    v = cJSON_GetObjectItemCaseSensitive(tmpl, "nodeSelector");
    for (const cJSON *kv = v ? v->child : NULL; kv; kv = kv->next) {
        if (!kv_is_qualified_name(kv->string, why, sizeof why)) {
            err_printf(err, errlen, "spec.template.nodeSelector: key \"%s\": %s", kv->string, why);
            return -1;
        }
        if (!kv_is_label_value(kv->valuestring, why, sizeof why)) {
            err_printf(err, errlen, "spec.template.nodeSelector.%s=\"%s\": %s", kv->string,
                       kv->valuestring, why);
            return -1;
        }
    }
    v = cJSON_GetObjectItemCaseSensitive(tmpl, "terminationGracePeriodSeconds");
    if (v && v->valuedouble < 0) {
        err_printf(err, errlen, "spec.template.terminationGracePeriodSeconds=%lld: must be "
                   "greater than or equal to 0", (long long)v->valuedouble);
        return -1;
    }
    static const char *const names[] = {"schedulerName", "priorityClassName",
                                        "serviceAccountName"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        v = cJSON_GetObjectItemCaseSensitive(tmpl, names[i]);
        if (v && !kv_is_dns1123_subdomain(v->valuestring, why, sizeof why)) {
            err_printf(err, errlen, "spec.template.%s=\"%s\": a lowercase RFC 1123 subdomain %s",
                       names[i], v->valuestring, why);
            return -1;
        }
    }
    return 0;
}
