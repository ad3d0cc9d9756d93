/* worker/data/mixup.h - timm's Mixup and CutMix of a training micro-batch
 * (data.mixup, data.cutmix, data.cutmixMinMax, data.mixupProb,
 * data.mixupSwitchProb, data.mixupMode: batch), producing soft targets.
 *
 * Owns: the per-batch draw (mix or not, mixup or cutmix, lambda from
 * Beta(alpha, alpha), cutmix's box), its Beta sampler (two Gamma draws,
 * Marsaglia-Tsang), mixing the images in place with the batch reversed
 * (timm's x.flip(0)), and the targets: the smoothed one-hot of each label
 * and of the reversed batch's, mixed by lambda (timm's mixup_target).
 * Must not: include anything of the worker outside data/, allocate, log, read
 * the clock or keep global state: the same stream gives the same bits.
 *
 * The rules, as timm's Mixup(mode='batch', correct_lam=True) (timm/data/mixup.py):
 *   - with probability prob (u < prob, u uniform in [0, 1)) the batch mixes,
 *     else lambda = 1: the images stay as they are and the targets are the
 *     smoothed one-hot of the labels;
 *   - both alphas > 0: cutmix with probability switch_prob (u < switch_prob),
 *     else mixup; only one > 0: that one. cutmixMinMax given forces the
 *     cutmix alpha to 1 (timm does), so cutmix is then on;
 *   - lambda ~ Beta(alpha, alpha) of the chosen one; a draw of exactly 1 mixes
 *     nothing (timm returns early, the targets then as unmixed);
 *   - mixup: x = lambda x + (1 - lambda) x.flip(0);
 *   - cutmix: a box (rand_bbox: cut = int(side * sqrt(1 - lambda)) per side,
 *     centre cy = randint(0, H), cx = randint(0, W), rows [clip(cy - cut_h//2),
 *     clip(cy + cut_h//2)), columns likewise, clipped to the image; or
 *     rand_bbox_minmax with cutmixMinMax = [lo, hi]: cut_h = randint(int(H lo),
 *     int(H hi)), cut_w likewise, top = randint(0, H - cut_h), left =
 *     randint(0, W - cut_w)); every channel of that box is taken from the
 *     reversed batch, and lambda = 1 - box area / image area (the area
 *     correction, always on: timm's default for cutmix);
 *   - targets: off = smoothing / K, on = 1 - smoothing + off; row i =
 *     lambda onehot(label[i]) + (1 - lambda) onehot(label[B-1-i]).
 * Where it differs from timm:
 *   - the random numbers: timm draws from numpy's global generator, per
 *     process; here from a stream of rng.h that the caller seeds from the
 *     run's seed, the step and the micro-batch's place in the global batch
 *     (mixup_stream), so a resumed run draws the same. The draws in order:
 *     rng_u64 -> u (53 bits) for prob; with both alphas > 0 another for
 *     switch_prob; the Beta draw (mixup_beta); cutmix: rng_below(H) for cy
 *     then rng_below(W) for cx, or with cutmixMinMax rng_below for cut_h,
 *     cut_w, top, left in that order. numpy's Beta for alpha <= 1 is Johnk's
 *     algorithm, a different sampler of the same distribution.
 *   - arithmetic: mixup computes lambda a + (1 - lambda) b in float with
 *     lambda and 1 - lambda rounded to float (as torch's mul_ by a Python
 *     scalar does on a float tensor); the targets are computed in double and
 *     rounded once to float (torch: float32 throughout; within 1e-7).
 *   - an odd batch is accepted (timm asserts an even one): its middle sample
 *     is paired with itself. The config refuses an odd micro-batch anyway.
 *   - only mode batch (timm's default); pair and elem are refused by the config.
 */
#ifndef VITJOB_MIXUP_H
#define VITJOB_MIXUP_H

#include <stddef.h>
#include <stdint.h>

#include "config.h" /* api/config.h: data_config */
#include "rng.h"

typedef struct {
    double mixup_alpha;  /* 0 = no mixup */
    double cutmix_alpha; /* 0 = no cutmix (forced to 1 when has_minmax) */
    int has_minmax;      /* cutmixMinMax given: rand_bbox_minmax */
    double minmax[2];    /* its [lo, hi], fractions of the side */
    double prob;         /* mixupProb: a batch mixes with this probability */
    double switch_prob;  /* mixupSwitchProb: cutmix's share when both alphas > 0 */
    double smoothing;    /* label smoothing folded into the targets, [0, 1) */
    int num_classes;     /* K, > 0 */
} mixup_params;

typedef enum { MIXUP_NONE, MIXUP_MIXUP, MIXUP_CUTMIX } mixup_kind;

/* One batch's draw. */
typedef struct {
    mixup_kind kind;
    double lam;         /* each sample's own label's weight: 1 (NONE), the Beta draw
                         * (MIXUP), 1 - box area / image area (CUTMIX) */
    int yl, yh, xl, xh; /* CUTMIX: rows [yl, yh), columns [xl, xh); else 0 */
} mixup_draw;

/* Whether dc turns mixing on: data.mixup > 0, data.cutmix > 0 or
 * data.cutmixMinMax given (timm's train.py: mixup_active). */
int mixup_enabled(const data_config *dc);
/* The params of dc for K classes and label smoothing s. */
void mixup_params_from_config(mixup_params *p, const data_config *dc, int num_classes,
                              double smoothing);

/* Seeds the stream of one micro-batch: the run's seed, the optimizer step
 * (0-based, counted from the run's start, resumed or not) and the
 * micro-batch's place in the global batch (rank x accumulation steps +
 * micro-batch index: the same samples get the same draw at any world size
 * where the samples themselves do not depend on it). */
void mixup_stream(rng_state *r, uint64_t seed, long step, long micro);

/* A Beta(a, b) draw, a, b > 0, from two Gamma draws (Marsaglia-Tsang; for a
 * shape < 1 Gamma(shape + 1) U^(1/shape), in logs so that tiny shapes do not
 * underflow): X / (X + Y). In [0, 1]. */
double mixup_beta(rng_state *r, double a, double b);

/* timm's rand_bbox for lambda lam and the centre (cy, cx), then the area
 * correction: fills d (kind CUTMIX). H, W > 0; 0 <= lam <= 1. */
void mixup_box(int H, int W, double lam, int cy, int cx, mixup_draw *d);
/* timm's rand_bbox_minmax for the drawn cut_h x cut_w box at (top, left),
 * then lambda = 1 - area / (H W): fills d (kind CUTMIX). */
void mixup_box_minmax(int H, int W, int cut_h, int cut_w, int top, int left, mixup_draw *d);
/* The bounds rand_bbox_minmax draws cut sizes from for a side: [*lo, *hi)
 * = [int(side minmax[0]), int(side minmax[1])); empty (lo >= hi) is an
 * error of the config. */
void mixup_minmax_range(int side, const double minmax[2], int *lo, int *hi);

/* The whole draw of one batch of H x W images from r, as the rules above. */
void mixup_draw_batch(const mixup_params *p, int H, int W, rng_state *r, mixup_draw *d);

/* Mixes images (B x C x H x W floats, in place) as d says: nothing, the
 * blend with the reversed batch, or the box taken from it. */
void mixup_apply(const mixup_draw *d, float *images, int B, int C, int H, int W);

/* The soft targets (B x K floats) for labels and lam, smoothing s: row i =
 * lam y(label[i]) + (1 - lam) y(label[B-1-i]), y(c) = off everywhere and
 * 1 - s + off at c, off = s / K. Returns 0, or -1 when a label is outside
 * [0, K) (the message, naming it, in err). */
int mixup_targets(const int *labels, int B, int K, double smoothing, double lam, float *targets,
                  char *err, size_t errlen);

/* One micro-batch: mixup_draw_batch, mixup_apply, mixup_targets. d (may be
 * NULL) receives the draw. Returns 0 or -1 (a label outside [0, K), err). */
int mixup_batch(const mixup_params *p, rng_state *r, float *images, const int *labels, int B,
                int C, int H, int W, float *targets, mixup_draw *d, char *err, size_t errlen);

#endif
