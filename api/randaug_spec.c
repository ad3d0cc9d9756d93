/* api/randaug_spec.c - see randaug_spec.h. */
#include "randaug_spec.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

#define SECTION_MAX 64

double randaug_spec_upper(const randaug_spec *s)
{
    return s->magnitude_max > 0 ? (double)s->magnitude_max : 10.0;
}

/* an integer of digits only (Python's int() of a section's number), in lo..hi */
static int parse_int(const char *v, long lo, long hi, long *out)
{
    if (!*v || strlen(v) > 9) return -1;
    for (const char *p = v; *p; p++)
        if (!isdigit((unsigned char)*p)) return -1;
    long x = 0;
    for (const char *p = v; *p; p++) x = x * 10 + (*p - '0');
    if (x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int randaug_spec_parse(const char *s, const char *key, randaug_spec *out, char *err,
                       size_t errlen)
{
    randaug_spec r = {0, 2, 10, 0.0, 0, 0, 0.5};
    if (!s || !*s) {
        *out = r;
        return 0;
    }
    const char *keys = "(the keys: m, n, p, mstd, mmax, inc; e.g. \"rand-m9-mstd0.5-inc1\")";
    const char *dash = strchr(s, '-');
    size_t head = dash ? (size_t)(dash - s) : strlen(s);
    if (head != 4 || strncmp(s, "rand", 4) != 0) {
        err_printf(err, errlen, "%s=\"%s\": the string must start with \"rand\" (timm's RandAugment)",
                   key, s);
        return -1;
    }
    unsigned seen = 0;
    const char *p = dash;
    while (p) {
        const char *sec = p + 1, *next = strchr(sec, '-');
        size_t len = next ? (size_t)(next - sec) : strlen(sec);
        char c[SECTION_MAX];
        if (len == 0) {
            err_printf(err, errlen, "%s=\"%s\": an empty section (two '-' in a row, or one at the end)",
                       key, s);
            return -1;
        }
        if (len >= sizeof c) {
            err_printf(err, errlen, "%s=\"%s\": a section of %zu characters; unknown %s", key, s,
                       len, keys);
            return -1;
        }
        memcpy(c, sec, len);
        c[len] = '\0';
        p = next;
        if (c[0] == 't') {
            err_printf(err, errlen,
                       "%s=\"%s\": section \"%s\": timm's transform sets (t...) are not supported; "
                       "the ops are timm's default set, or the increasing one with inc1",
                       key, s, c);
            return -1;
        }
        size_t kl = strcspn(c, "0123456789");
        if (kl == len) {
            err_printf(err, errlen, "%s=\"%s\": unknown section \"%s\": no number %s", key, s, c, keys);
            return -1;
        }
        char k[SECTION_MAX];
        memcpy(k, c, kl);
        k[kl] = '\0';
        const char *v = c + kl;
        static const char *const names[] = {"m", "n", "p", "mstd", "mmax", "inc"};
        int which = -1;
        for (int i = 0; i < 6; i++)
            if (!strcmp(k, names[i])) which = i;
        if (which < 0) {
            err_printf(err, errlen, "%s=\"%s\": unknown section \"%s\" (key \"%s\") %s", key, s, c, k,
                       keys);
            return -1;
        }
        if (seen & (1u << which)) {
            err_printf(err, errlen, "%s=\"%s\": section \"%s\": %s given twice", key, s, c, k);
            return -1;
        }
        seen |= 1u << which;
        long iv = 0;
        double dv = 0;
        int bad = 0;
        const char *range = "";
        switch (which) {
        case 0:
            bad = parse_int(v, 0, 1000, &iv);
            range = "an integer in 0..1000";
            r.magnitude = (int)iv;
            break;
        case 1:
            bad = parse_int(v, 0, 100, &iv);
            range = "an integer in 0..100";
            r.num_ops = (int)iv;
            break;
        case 2:
            bad = parse_decimal(v, &dv) != 0 || !(dv >= 0.0 && dv <= 1.0);
            range = "a probability in [0, 1]";
            r.prob = dv;
            break;
        case 3:
            bad = parse_decimal(v, &dv) != 0 || !isfinite(dv) || dv < 0.0;
            range = "a number >= 0 (above 100: uniform magnitudes)";
            r.magnitude_std = dv > 100.0 ? INFINITY : dv;
            break;
        case 4:
            bad = parse_int(v, 0, 1000, &iv);
            range = "an integer in 0..1000 (0: the default bound, 10)";
            r.magnitude_max = (int)iv;
            break;
        default:
            bad = parse_int(v, 0, 999999999, &iv);
            range = "an integer (inc1: the increasing op set)";
            if (!bad && iv == 0) {
                err_printf(err, errlen,
                           "%s=\"%s\": section \"inc0\": timm reads any inc<number> as on (inc0 "
                           "included); write inc1, or leave inc out for the default op set",
                           key, s);
                return -1;
            }
            r.increasing = 1;
            break;
        }
        if (bad) {
            err_printf(err, errlen, "%s=\"%s\": section \"%s\": \"%s\" is not %s", key, s, c, v,
                       range);
            return -1;
        }
    }
    r.enabled = 1;
    *out = r;
    return 0;
}
