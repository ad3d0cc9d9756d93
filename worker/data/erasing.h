/* worker/data/erasing.h - timm's RandomErasing on one normalised image.
 *
 * Owns: timm's RandomErasing(probability, mode, min_area=0.02,
 * max_area=1/3, min_aspect=0.3, max_aspect=1/0.3, min_count=max_count=1)
 * applied to one CHW float image after normalisation, with its draws taken
 * from the caller's stream. Must not: touch 8-bit images, log, keep global
 * state, allocate, or include anything of the worker outside data/.
 *
 * The draws, in timm's order (_erase): one rng_uniform u, no erasing unless
 * u < probability (timm erases unless u > probability: the same but for
 * u == probability, so that probability 0 never erases); then up to 10
 * attempts, each: rng_uniform a for the area, target = (min_area +
 * (max_area - min_area) * a) * H * W; rng_uniform b for the aspect,
 * aspect = exp(log(min_aspect) + (log(max_aspect) - log(min_aspect)) * b);
 * h = round(sqrt(target * aspect)), w = round(sqrt(target / aspect))
 * (Python's round, half to even); accepted when w < W and h < H: then
 * top = rng_below(H - h + 1), left = rng_below(W - w + 1), and the box's
 * values: mode pixel: rng_normal per value, channel by channel, row by row
 * (torch's normal_ of a (C, h, w) tensor); rand: rng_normal per channel;
 * const: 0. Nothing more is drawn after an accepted attempt or the tenth.
 */
#ifndef VITJOB_ERASING_H
#define VITJOB_ERASING_H

#include "rng.h"

typedef enum { ER_PIXEL, ER_CONST, ER_RAND } er_mode; /* timm's mode 'pixel' | 'const' | 'rand' */

typedef struct {
    double probability; /* [0, 1]; 0: off */
    er_mode mode;
} er_params;

/* an erased box: rows top..top+h-1, columns left..left+w-1 */
typedef struct {
    int top, left, h, w;
} er_box;

/* Random erasing of img (chans x height x width floats, CHW), drawing from
 * r. Returns 1 when a box was erased (in *box when box is not NULL; h or w
 * may be 0, as timm's rounding allows: nothing changes then), 0 when not. */
int er_apply(const er_params *p, float *img, int chans, int height, int width, rng_state *r,
             er_box *box);

#endif
