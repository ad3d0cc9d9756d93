/* operator/kvalid.c - see kvalid.h.
 *
 * Owns: Kubernetes name, label and quantity formats.
 * Must not: allocate, log, or know about ViTJobs.
 */
#include "kvalid.h"

#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_alnum(char c)
{
    return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static int fail(char *why, size_t whylen, const char *msg)
{
    err_printf(why, whylen, "%s", msg);
    return 0;
}

/* One DNS label of len bytes at s; first: what the first character may be. */
static int label_ok(const char *s, size_t len, int letter_first, char *why, size_t whylen)
{
    if (len == 0)
        return fail(why, whylen, "must not be empty");
    if (len > KV_LABEL_MAX)
        return fail(why, whylen, "must be no more than 63 characters");
    for (size_t i = 0; i < len; i++)
        if (!is_lower_alnum(s[i]) && s[i] != '-')
            return fail(why, whylen,
                        "must consist of lower case alphanumeric characters or '-'");
    if (letter_first && !(s[0] >= 'a' && s[0] <= 'z'))
        return fail(why, whylen, "must start with a lowercase letter");
    if (!letter_first && s[0] == '-')
        return fail(why, whylen, "must start with an alphanumeric character");
    if (s[len - 1] == '-')
        return fail(why, whylen, "must end with an alphanumeric character");
    return 1;
}

int kv_is_dns1035_label(const char *s, char *why, size_t whylen)
{
    return s ? label_ok(s, strlen(s), 1, why, whylen) : fail(why, whylen, "must not be empty");
}

int kv_is_dns1123_label(const char *s, char *why, size_t whylen)
{
    return s ? label_ok(s, strlen(s), 0, why, whylen) : fail(why, whylen, "must not be empty");
}

int kv_is_dns1123_subdomain(const char *s, char *why, size_t whylen)
{
    if (s == NULL || *s == '\0')
        return fail(why, whylen, "must not be empty");
    if (strlen(s) > KV_SUBDOMAIN_MAX)
        return fail(why, whylen, "must be no more than 253 characters");
    for (const char *p = s;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        /* a subdomain's labels may be up to 253 long in all; only their shape counts */
        if (len == 0)
            return fail(why, whylen, "must not contain empty labels ('..', or a leading "
                                     "or trailing '.')");
        for (size_t i = 0; i < len; i++)
            if (!is_lower_alnum(p[i]) && p[i] != '-')
                return fail(why, whylen, "must consist of lower case alphanumeric characters, "
                                         "'-' or '.'");
        if (p[0] == '-' || p[len - 1] == '-')
            return fail(why, whylen, "must start and end with an alphanumeric character");
        if (!dot)
            return 1;
        p = dot + 1;
    }
}

/* ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], 1..63 */
static int name_part_ok(const char *s, size_t len, char *why, size_t whylen)
{
    if (len == 0)
        return fail(why, whylen, "name part must be non-empty");
    if (len > KV_LABEL_MAX)
        return fail(why, whylen, "name part must be no more than 63 characters");
    for (size_t i = 0; i < len; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return fail(why, whylen, "name part must consist of alphanumeric characters, '-', "
                                     "'_' or '.'");
    if (!is_alnum(s[0]) || !is_alnum(s[len - 1]))
        return fail(why, whylen, "name part must start and end with an alphanumeric character");
    return 1;
}

int kv_is_qualified_name(const char *s, char *why, size_t whylen)
{
    if (s == NULL || *s == '\0')
        return fail(why, whylen, "name part must be non-empty");
    const char *slash = strchr(s, '/');
    if (slash == NULL)
        return name_part_ok(s, strlen(s), why, whylen);
    if (strchr(slash + 1, '/'))
        return fail(why, whylen, "a qualified name must consist of an optional prefix, '/' "
                                 "and a name");
    char prefix[KV_SUBDOMAIN_MAX + 2];
    size_t plen = (size_t)(slash - s);
    if (plen == 0)
        return fail(why, whylen, "prefix part must be non-empty");
    if (plen > KV_SUBDOMAIN_MAX)
        return fail(why, whylen, "prefix part must be no more than 253 characters");
    memcpy(prefix, s, plen);
    prefix[plen] = '\0';
    if (!kv_is_dns1123_subdomain(prefix, NULL, 0))
        return fail(why, whylen, "prefix part must be a lowercase RFC 1123 subdomain");
    return name_part_ok(slash + 1, strlen(slash + 1), why, whylen);
}

int kv_is_label_value(const char *s, char *why, size_t whylen)
{
    if (s == NULL || *s == '\0')
        return 1;
    return name_part_ok(s, strlen(s), why, whylen);
}

/* ---------------------------------------------------------------- quantity */

static const struct {
    const char *suffix;
    long double mult;
} SUFFIXES[] = {
    {"", 1.0L},     {"n", 1e-9L},   {"u", 1e-6L},   {"m", 1e-3L},   {"k", 1e3L},
    {"M", 1e6L},    {"G", 1e9L},    {"T", 1e12L},   {"P", 1e15L},   {"E", 1e18L},
    {"Ki", 1024.0L}, {"Mi", 1048576.0L}, {"Gi", 1073741824.0L}, {"Ti", 1099511627776.0L},
    {"Pi", 1125899906842624.0L}, {"Ei", 1152921504606846976.0L},
};

int kv_parse_quantity(const char *s, long double *value, char *why, size_t whylen)
{
    static const char *const msg = "quantities must match the regular expression '"
                                   KV_QUANTITY_REGEX "'";
    if (s == NULL || *s == '\0')
        return fail(why, whylen, msg);
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    size_t before = 0, after = 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        before++;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            p++;
            after++;
        }
    }
    if (before + after == 0)
        return fail(why, whylen, msg);
    const char *suffix = p;
    long double mult = -1;
    for (size_t i = 0; i < sizeof SUFFIXES / sizeof SUFFIXES[0]; i++)
        if (strcmp(suffix, SUFFIXES[i].suffix) == 0)
            mult = SUFFIXES[i].mult;
    if (mult < 0 && (suffix[0] == 'e' || suffix[0] == 'E')) {
        const char *q = suffix + 1;
        if (*q == '+' || *q == '-')
            q++;
        size_t digits = strspn(q, "0123456789");
        if (digits > 0 && q[digits] == '\0') {
            long e = strtol(suffix + 1, NULL, 10);
            if (e > 4000 || e < -4000)
                return fail(why, whylen, "quantity exponent out of range");
            mult = powl(10.0L, (long double)e);
        }
    }
    if (mult < 0)
        return fail(why, whylen, msg);
    if (value) {
        char num[128];
        size_t n = (size_t)(suffix - s);
        if (n >= sizeof num)
            return fail(why, whylen, "quantity too long");
        memcpy(num, s, n);
        num[n] = '\0';
        *value = strtold(num, NULL) * mult;
    }
    return 1;
}
