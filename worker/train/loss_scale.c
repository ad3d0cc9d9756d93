/* worker/train/loss_scale.c - see loss_scale.h. */
#include "loss_scale.h"

#include <math.h>
#include <stdlib.h>

struct lscale {
    lscale_params p;
    float scale;
    long tracker, skipped;
};

lscale_params lscale_defaults(void)
{
    return (lscale_params){.init_scale = LSCALE_INIT_SCALE,
                           .growth_factor = LSCALE_GROWTH_FACTOR,
                           .backoff_factor = LSCALE_BACKOFF_FACTOR,
                           .growth_interval = LSCALE_GROWTH_INTERVAL};
}

int lscale_new(lscale **out, const lscale_params *p)
{
    lscale *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->p = *p;
    s->scale = p->init_scale;
    *out = s;
    return 0;
}

void lscale_free(lscale *s) { free(s); }

float lscale_scale(const lscale *s) { return s->scale; }
float lscale_inv(const lscale *s) { return (float)(1.0 / (double)s->scale); }
long lscale_growth_tracker(const lscale *s) { return s->tracker; }
long lscale_skipped(const lscale *s) { return s->skipped; }

int lscale_update(lscale *s, int found_inf)
{
    if (found_inf) {
        s->scale = (float)((double)s->scale * s->p.backoff_factor);
        s->tracker = 0;
        s->skipped++;
        return 1;
    }
    long successful = s->tracker + 1;
    if (successful == s->p.growth_interval) {
        float grown = (float)((double)s->scale * s->p.growth_factor);
        if (isfinite(grown)) s->scale = grown; /* never past fp32's range */
        s->tracker = 0;
    } else {
        s->tracker = successful;
    }
    return 0;
}

int lscale_restore(lscale *s, float scale, long growth_tracker, long skipped)
{
    if (!(scale > 0) || !isfinite(scale) || growth_tracker < 0 ||
        growth_tracker >= s->p.growth_interval || skipped < 0)
        return -1;
    s->scale = scale;
    s->tracker = growth_tracker;
    s->skipped = skipped;
    return 0;
}

int lscale_injected(const char *spec, long step, int rank)
{
    if (!spec) return 0;
    const char *c = spec;
    while (*c) {
        char *end;
        long st = strtol(c, &end, 10);
        long rk = -1;
        int ok = end != c;
        if (ok && *end == '@') {
            const char *r = end + 1;
            rk = strtol(r, &end, 10);
            ok = end != r && rk >= 0;
        }
        ok = ok && (*end == ',' || *end == '\0');
        if (ok && st == step && (rk < 0 || rk == rank)) return 1;
        while (*end && *end != ',') end++; /* a malformed entry: skipped */
        c = *end ? end + 1 : end;
    }
    return 0;
}
