/* worker/data/shards.c - brace expansion of shard patterns (shards.h).
 *
 * Owns: parsing a pattern into literal text and brace groups (a list of
 * alternatives, or a numeric range kept as start, count and width), the
 * count check against the limit, then the names, first group slowest.
 * Must not: allocate before the count is known to be within the limit.
 */
#include "shards.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct shards_list {
    size_t n;
    char **names;
};

typedef struct {
    size_t lit_at, lit_len; /* the literal text before the group, in the pattern */
    int is_range;
    /* range */
    unsigned long long start, count;
    int width;
    /* alternatives: pattern[alt_at[i] .. alt_at[i] + alt_len[i]) */
    size_t n_alt;
    size_t *alt_at, *alt_len;
} group;

__attribute__((format(printf, 4, 5)))
static void say(char *err, size_t errlen, const char *pattern, const char *fmt, ...)
{
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "shard pattern '%s': %s", pattern, body);
}

static void free_groups(group *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(g[i].alt_at);
        free(g[i].alt_len);
    }
    free(g);
}

/* A decimal bound of at most 18 digits in p[0..n). */
static int bound(const char *p, size_t n, unsigned long long *v)
{
    if (n == 0 || n > 18)
        return -1;
    *v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        *v = *v * 10 + (unsigned long long)(p[i] - '0');
    }
    return 0;
}

/* The group inside pattern[a..b) (between the braces). Returns 0 or -1 with err set. */
static int parse_group(group *g, const char *pattern, size_t a, size_t b, char *err, size_t errlen)
{
    const char *in = pattern + a;
    size_t n = b - a;
    if (n == 0) {
        say(err, errlen, pattern, "empty braces at byte %zu", a - 1);
        return -1;
    }
    const char *dots = NULL;
    for (size_t i = 0; i + 1 < n; i++)
        if (in[i] == '.' && in[i + 1] == '.') {
            dots = in + i;
            break;
        }
    if (dots && !memchr(in, ',', n)) {
        size_t la = (size_t)(dots - in), lb = n - la - 2;
        unsigned long long lo, hi;
        if (bound(in, la, &lo) < 0 || bound(dots + 2, lb, &hi) < 0) {
            say(err, errlen, pattern,
                "the range at byte %zu is not {FIRST..LAST} with decimal bounds of at most 18 "
                "digits", a - 1);
            return -1;
        }
        if (hi < lo) {
            say(err, errlen, pattern, "the range at byte %zu is reversed (%llu > %llu)", a - 1,
                lo, hi);
            return -1;
        }
        g->is_range = 1;
        g->start = lo;
        g->count = hi - lo + 1;
        int pad = (la > 1 && in[0] == '0') || (lb > 1 && dots[2] == '0');
        g->width = pad ? (int)(la > lb ? la : lb) : 0;
        return 0;
    }
    size_t k = 1;
    for (size_t i = 0; i < n; i++)
        k += in[i] == ',';
    g->alt_at = malloc(k * sizeof *g->alt_at);
    g->alt_len = malloc(k * sizeof *g->alt_len);
    if (!g->alt_at || !g->alt_len) {
        say(err, errlen, pattern, "out of memory");
        return -1;
    }
    size_t from = 0;
    g->n_alt = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || in[i] == ',') {
            if (i == from) {
                say(err, errlen, pattern, "an empty alternative in the braces at byte %zu", a - 1);
                return -1;
            }
            g->alt_at[g->n_alt] = a + from;
            g->alt_len[g->n_alt++] = i - from;
            from = i + 1;
        }
    }
    return 0;
}

static size_t group_count(const group *g)
{
    return g->is_range ? (size_t)g->count : g->n_alt;
}

shards_list *shards_new(const char *pattern, size_t max_names, char *err, size_t errlen)
{
    size_t plen = strlen(pattern), ng = 0, cap = 0;
    group *gs = NULL;
    size_t lit = 0; /* where the current literal text starts */
    for (size_t i = 0; i < plen; i++) {
        if (pattern[i] == '}') {
            say(err, errlen, pattern, "a '}' at byte %zu without its '{'", i);
            goto fail;
        }
        if (pattern[i] != '{')
            continue;
        size_t j = i + 1;
        while (j < plen && pattern[j] != '}' && pattern[j] != '{')
            j++;
        if (j == plen) {
            say(err, errlen, pattern, "the '{' at byte %zu has no '}'", i);
            goto fail;
        }
        if (pattern[j] == '{') {
            say(err, errlen, pattern, "nested braces at byte %zu", j);
            goto fail;
        }
        if (ng == cap) {
            cap = cap ? 2 * cap : 4;
            group *t = realloc(gs, cap * sizeof *gs);
            if (!t) {
                say(err, errlen, pattern, "out of memory");
                goto fail;
            }
            gs = t;
        }
        group *g = &gs[ng++];
        memset(g, 0, sizeof *g);
        g->lit_at = lit;
        g->lit_len = i - lit;
        if (parse_group(g, pattern, i + 1, j, err, errlen) < 0)
            goto fail;
        lit = j + 1;
        i = j;
    }
    /* the count, checked before anything is built */
    size_t total = 1;
    for (size_t k = 0; k < ng; k++) {
        size_t c = group_count(&gs[k]);
        if ((gs[k].is_range && gs[k].count > SIZE_MAX) || c > max_names ||
            total > max_names / c) {
            say(err, errlen, pattern, "expands to more than the limit of %zu names", max_names);
            goto fail;
        }
        total *= c; /* <= max_names: checked just above */
    }
    shards_list *l = calloc(1, sizeof *l);
    size_t *idx = calloc(ng ? ng : 1, sizeof *idx);
    if (l)
        l->names = calloc(total, sizeof *l->names);
    if (!l || !idx || !l->names) {
        free(idx);
        shards_free(l);
        say(err, errlen, pattern, "out of memory");
        goto fail;
    }
    for (size_t s = 0; s < total; s++) {
        /* the name's length: literals, alternatives, numbers of at most 20 digits */
        size_t len = plen - lit + 1;
        for (size_t k = 0; k < ng; k++)
            len += gs[k].lit_len + (gs[k].is_range ? 24 : gs[k].alt_len[idx[k]]);
        char *name = malloc(len), *p = name;
        if (!name) {
            free(idx);
            shards_free(l);
            say(err, errlen, pattern, "out of memory");
            goto fail;
        }
        for (size_t k = 0; k < ng; k++) {
            memcpy(p, pattern + gs[k].lit_at, gs[k].lit_len);
            p += gs[k].lit_len;
            if (gs[k].is_range) {
                p += sprintf(p, "%0*llu", gs[k].width, gs[k].start + idx[k]);
            } else {
                memcpy(p, pattern + gs[k].alt_at[idx[k]], gs[k].alt_len[idx[k]]);
                p += gs[k].alt_len[idx[k]];
            }
        }
        memcpy(p, pattern + lit, plen - lit);
        p[plen - lit] = '\0';
        l->names[l->n++] = name;
        for (size_t k = ng; k-- > 0;) { /* the odometer: the last group fastest */
            if (++idx[k] < group_count(&gs[k]))
                break;
            idx[k] = 0;
        }
    }
    free(idx);
    free_groups(gs, ng);
    return l;
fail:
    free_groups(gs, ng);
    return NULL;
}

void shards_free(shards_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    free(l);
}

size_t shards_count(const shards_list *l) { return l->n; }

const char *shards_at(const shards_list *l, size_t i) { return i < l->n ? l->names[i] : NULL; }
