/* worker/train/droppath.c - see droppath.h. */
#include "droppath.h"

#include <stddef.h>

#include "rng.h"

/* Keeps these streams apart from the other users of the seed (init,
 * shuffle, augmentation): "droppath" in ASCII. */
#define DROPPATH_DOMAIN 0x64726f7070617468ULL

double droppath_rate(double rate, int block, int depth)
{
    return depth > 1 ? rate * (double)block / (double)(depth - 1) : 0.0;
}

/* The scale of a kept branch of block l. */
static float kept_scale(double rate, int l, int depth)
{
    return (float)(1.0 / (1.0 - droppath_rate(rate, l, depth)));
}

void droppath_scales(float *scale, const float *keep, double rate, int depth, int B)
{
    for (int l = 0; l < depth; l++) {
        const int never = droppath_rate(rate, l, depth) <= 0.0; /* timm's Identity */
        const float s = kept_scale(rate, l, depth);
        for (int br = 0; br < 2; br++)
            for (int b = 0; b < B; b++) {
                const size_t i = (size_t)(l * 2 + br) * B + b;
                scale[i] = never || keep[i] != 0.0f ? s : 0.0f;
            }
    }
}

void droppath_draw(float *scale, float *keep, double rate, int depth, int B, uint64_t seed,
                   long step, long first)
{
    for (int b = 0; b < B; b++) {
        /* the sample's key, then one stream per (block, branch) */
        rng_state r;
        rng_seed(&r, seed ^ DROPPATH_DOMAIN, (uint64_t)step, (uint64_t)(first + b));
        const uint64_t key = rng_u64(&r);
        for (int l = 0; l < depth; l++) {
            const double p_keep = 1.0 - droppath_rate(rate, l, depth);
            const float s = kept_scale(rate, l, depth);
            for (int br = 0; br < 2; br++) {
                rng_state d;
                rng_seed(&d, key, (uint64_t)l, (uint64_t)br);
                const int kept = (double)rng_uniform(&d) < p_keep;
                const size_t i = (size_t)(l * 2 + br) * B + b;
                scale[i] = kept ? s : 0.0f;
                if (keep) keep[i] = (float)kept;
            }
        }
    }
}
