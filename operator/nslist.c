/* operator/nslist.c - see nslist.h. */
#include "nslist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvalid.h"

void ns_list_free(ns_list *l)
{
    if (!l) return;
    for (int i = 0; l->names && i < l->n; i++) free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->n = 0;
}

int ns_list_parse(const char *s, ns_list *out, char *err, size_t errlen)
{
    out->names = NULL;
    out->n = 0;
    if (!s || !*s) return 0;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    out->names = calloc(cap, sizeof *out->names);
    if (!out->names) goto oom;
    const char *p = s;
    for (size_t i = 0; i < cap; i++) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        while (p < end && *p == ' ') p++;
        const char *e = end;
        while (e > p && e[-1] == ' ') e--;
        char *name = strndup(p, (size_t)(e - p));
        if (!name) goto oom;
        out->names[out->n++] = name;
        char why[128] = "";
        if (!*name) {
            snprintf(err, errlen, "--namespace: entry %zu of '%s' is empty (a stray comma?)",
                     i + 1, s);
            goto bad;
        }
        if (!kv_is_dns1123_label(name, why, sizeof why)) {
            snprintf(err, errlen, "--namespace: '%s' is not a valid namespace name: %s", name, why);
            goto bad;
        }
        for (int j = 0; j + 1 < out->n; j++)
            if (strcmp(out->names[j], name) == 0) {
                snprintf(err, errlen, "--namespace: '%s' is given twice", name);
                goto bad;
            }
        p = *end ? end + 1 : end;
    }
    return 0;
oom:
    snprintf(err, errlen, "--namespace: out of memory");
bad:
    ns_list_free(out);
    return -1;
}

int ns_list_contains(const ns_list *l, const char *ns)
{
    if (!l || l->n == 0) return 1;
    if (!ns) return 0;
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], ns) == 0) return 1;
    return 0;
}

void ns_list_join(const ns_list *l, char *buf, size_t len)
{
    if (!len) return;
    buf[0] = '\0';
    size_t used = 0;
    for (int i = 0; l && i < l->n; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? "," : "", l->names[i]);
        if (w < 0 || (size_t)w >= len - used) return; /* truncated */
        used += (size_t)w;
    }
}
