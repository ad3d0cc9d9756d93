/* worker/data/randaug.h - timm's RandAugment on an 8-bit RGB image, as timm's
 * auto_augment.py does it with PIL (Pillow 9.4's arithmetic, pixel for pixel).
 *
 * Owns: the ops of timm's two RandAugment sets (_RAND_TRANSFORMS and
 * _RAND_INCREASING_TRANSFORMS), timm's level-to-argument rules, PIL's
 * semantics for each op (ImageOps.autocontrast/equalize/invert/posterize/
 * solarize, timm's solarize_add, ImageEnhance.Color/Contrast/Brightness/
 * Sharpness through Image.blend, Image.rotate and Image.transform(AFFINE)
 * with PIL's nearest, bilinear and bicubic transform filters and a fill
 * colour), and RandAugment's draws (which ops, whether each applies, the
 * magnitude noise, the signs) from the caller's stream.
 * Must not: decode, resample to the model's size, normalise, log, keep
 * global state, or include anything of the worker outside data/. The config
 * string is parsed by api/randaug_spec.c (the operator validates it too).
 *
 * Images are HWC, 3 bytes a pixel, rows packed, modified in place.
 *
 * The draws of ra_apply, in timm's order (RandAugment.__call__ then each
 * AugmentOp.__call__): n op indices (rng_below(15) each: np.random.choice
 * with replacement, uniform); then per chosen op in turn: when p < 1, one
 * rng_uniform u (the op is skipped unless u < p: timm skips when u > p, the
 * same but for u == p, so that p = 0 never applies one); when mstd > 0, the
 * magnitude m + mstd * rng_normal (mstd infinite: m * rng_uniform), clipped
 * to [0, mmax or 10]; for the signed ops (rotate, shear, translate, and the
 * increasing enhance ops) one rng_uniform, negated when > 0.5 (timm's
 * _randomly_negate). The resampling filter is the caller's (timm's
 * create_transform passes its interpolation when it is not "random"), so
 * nothing is drawn for it.
 */
#ifndef VITJOB_RANDAUG_H
#define VITJOB_RANDAUG_H

#include <stddef.h>
#include <stdint.h>

#include "randaug_spec.h" /* api/: randaug_spec, parsed from data.randAugment */
#include "rng.h"

/* timm's op names, in NAME_TO_OP's spelling */
typedef enum {
    RA_AUTO_CONTRAST,          /* AutoContrast */
    RA_EQUALIZE,               /* Equalize */
    RA_INVERT,                 /* Invert */
    RA_ROTATE,                 /* Rotate: degrees, (m/10)*30, random sign */
    RA_POSTERIZE,              /* Posterize: bits kept, int((m/10)*4) */
    RA_POSTERIZE_INCREASING,   /* PosterizeIncreasing: 4 - int((m/10)*4) */
    RA_SOLARIZE,               /* Solarize: threshold, min(256, int((m/10)*256)) */
    RA_SOLARIZE_INCREASING,    /* SolarizeIncreasing: 256 - that */
    RA_SOLARIZE_ADD,           /* SolarizeAdd: added below 128, min(128, int((m/10)*110)) */
    RA_COLOR,                  /* Color: factor (m/10)*1.8 + 0.1 */
    RA_COLOR_INCREASING,       /* ColorIncreasing: max(0.1, 1 +- (m/10)*0.9) */
    RA_CONTRAST,               /* Contrast */
    RA_CONTRAST_INCREASING,    /* ContrastIncreasing */
    RA_BRIGHTNESS,             /* Brightness */
    RA_BRIGHTNESS_INCREASING,  /* BrightnessIncreasing */
    RA_SHARPNESS,              /* Sharpness */
    RA_SHARPNESS_INCREASING,   /* SharpnessIncreasing */
    RA_SHEAR_X,                /* ShearX: factor (m/10)*0.3, random sign */
    RA_SHEAR_Y,                /* ShearY */
    RA_TRANSLATE_X_REL,        /* TranslateXRel: fraction of the width, (m/10)*0.45, random sign */
    RA_TRANSLATE_Y_REL,        /* TranslateYRel: fraction of the height */
    RA_N_OPS
} ra_op;

/* PIL's transform filters (Image.NEAREST, BILINEAR, BICUBIC) */
typedef enum { RA_NEAREST, RA_BILINEAR, RA_BICUBIC } ra_resample;

typedef struct {
    uint8_t fill[3];      /* what rotate/shear/translate leave where nothing maps (timm's
                           * img_mean: (128,128,128) by default; create_transform passes
                           * round(255 * mean)) */
    ra_resample resample; /* the geometric ops' filter */
} ra_params;

/* timm's name of op ("ShearX"); NULL for a value out of range. */
const char *ra_op_name(ra_op op);
/* The op of a timm name; -1 when there is none. */
int ra_op_from_name(const char *name);
/* The 15 ops of timm's _RAND_TRANSFORMS (increasing 0) or
 * _RAND_INCREASING_TRANSFORMS (1), in timm's order; *n = 15. Static. */
const ra_op *ra_op_set(int increasing, int *n);
/* 1 for the ops whose argument takes a random sign. */
int ra_op_signed(ra_op op);
/* timm's level-to-argument rule: op's argument at magnitude m (already noised
 * and clipped), negated when negate and the op is signed; 0 for the ops
 * without one. Posterize/solarize arguments are whole numbers. */
double ra_op_arg(ra_op op, double magnitude, int negate);

/* Reusable working memory (a second image, the nearest filter's table),
 * grown as needed; one per thread. NULL when out of memory. */
typedef struct ra_scratch ra_scratch;
ra_scratch *ra_scratch_new(void);
void ra_scratch_free(ra_scratch *s); /* NULL is a no-op */

/* Applies op with argument arg to img (w x h), as timm's op function does
 * with PIL. s: scratch (NULL: allocated and freed inside). Returns 0, or -1
 * when out of memory (img unchanged). */
int ra_op_apply(ra_op op, double arg, const ra_params *p, uint8_t *img, int w, int h,
                ra_scratch *s);

/* What ra_apply drew and did, for tests: per chosen op (up to 100). */
typedef struct {
    int n;
    ra_op op[100];
    int applied[100];
    double magnitude[100], arg[100];
} ra_trace;

/* RandAugment(spec) on img, drawing from r (see the top of this file);
 * spec->enabled 0: nothing is drawn or done. trace may be NULL. Returns 0,
 * or -1 when out of memory (img then holds the ops applied so far). */
int ra_apply(const randaug_spec *spec, const ra_params *p, uint8_t *img, int w, int h,
             rng_state *r, ra_scratch *s, ra_trace *trace);

#endif
