/* worker/train/layer_decay.c - see layer_decay.h. */
#include "layer_decay.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

int layer_decay_layer(const char *name, int depth)
{
    /* timm's stem: r'^cls_token|reg_token|pos_embed|patch_embed' (re.match) */
    if (starts(name, "cls_token") || starts(name, "reg_token") || starts(name, "pos_embed") ||
        starts(name, "patch_embed"))
        return 0;
    /* r'^blocks\.(\d+)': ordinal (1, i) */
    if (starts(name, "blocks.") && name[7] >= '0' && name[7] <= '9') {
        char *end;
        long i = strtol(name + 7, &end, 10);
        if (i >= 0 && i < depth) return (int)i + 1;
    }
    /* r'^norm' with MATCH_PREV_GROUP: merged into the group before it */
    if (starts(name, "norm")) return depth;
    return depth + 1; /* unmatched (the head): the largest ordinal */
}

double layer_decay_scale(const char *name, int depth, double decay)
{
    if (decay == 0.0) return 1.0;
    return pow(decay, (double)(depth + 1 - layer_decay_layer(name, depth)));
}

int layer_decay_depth(const char *const *names, int n)
{
    int depth = 0;
    for (int k = 0; k < n; k++) {
        if (!starts(names[k], "blocks.") || names[k][7] < '0' || names[k][7] > '9') continue;
        long i = strtol(names[k] + 7, NULL, 10);
        if (i >= depth && i < 1 << 20) depth = (int)i + 1;
    }
    return depth;
}
