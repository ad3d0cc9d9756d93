/* worker/data/transform.h - a decoded image to the model's input, as timm/DeiT.
 *
 * Owns: torchvision's RandomResizedCrop box rule, timm's evaluation box
 * (Resize(floor(size / crop_pct)) then CenterCrop(size)), and resampling a
 * box of an 8-bit RGB image to out_size x out_size normalised CHW floats,
 * antialiased exactly as torch.nn.functional.interpolate(mode=bilinear|
 * bicubic, antialias=True, align_corners=False) (and PIL's resize, before
 * PIL rounds to 8 bits), with the horizontal flip and PIL's "L" conversion;
 * for the 8-bit augmentations, the same resampling rounded to 8 bits and
 * the normalisation of 8-bit pixels.
 * Must not: decode, read files, log, keep global state, or include anything
 * of the worker outside data/.
 *
 * The resampling rule (torch's _upsample_*_aa, generalised to a fractional
 * box): per axis, scale = box size / out_size; output pixel i samples
 * centre = box start + scale * (i + 0.5) with the filter (bilinear: triangle;
 * bicubic: Keys' cubic with a = -0.5) stretched by max(scale, 1), over the
 * source pixels k with floor(centre - support + 0.5) <= k < floor(centre +
 * support + 0.5) (support = 1 or 2, times the stretch) that lie inside the
 * bounds (the box, or what the caller names, rounded outward to whole pixels,
 * an edge within 1e-6 of a whole pixel taken as on it, then cut to the
 * image); the weights filter((k + 0.5 - centre) / stretch) are divided by
 * their sum. For an integer box and bounds = the box this is
 * interpolate(image[y:y+h, x:x+w]) up to float rounding (measured: < 1e-5 of
 * the 0..1 range). Both passes run in float: horizontal over only the source
 * rows the vertical pass needs (a ring of rows), then vertical; no sum is
 * reordered by the compiler or contracted into FMAs, so the output does not
 * depend on the machine's vector width.
 */
#ifndef VITJOB_TRANSFORM_H
#define VITJOB_TRANSFORM_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h" /* worker/data/rng.h: rng_state, rng_uniform (float in [0,1)), rng_u64 ... */

typedef enum { XF_BILINEAR, XF_BICUBIC } xf_interp;
/* a region of the source, in source pixels: left, top, width, height */
typedef struct { double x, y, w, h; } xf_box;

/* torchvision's RandomResizedCrop.get_params, the same rule (10 attempts:
 * area = A * U(scale), log-uniform aspect ratio in ratio, w = round(sqrt(area*ar)),
 * h = round(sqrt(area/ar)), accept if 0 < w <= width and 0 < h <= height,
 * i = randint(0, height-h), j = randint(0, width-w); then the fallback: clamp
 * the whole image's aspect into ratio, centered) with the random numbers drawn
 * from r. Integer-valued box.
 * The draws, in torchvision's order: per attempt rng_uniform for the scale,
 * rng_uniform for the log aspect ratio; on acceptance rng_below(height-h+1)
 * for the top, then rng_below(width-w+1) for the left. The scale is
 * scale[0] + u * (scale[1] - scale[0]) and the log ratio bounds are logf of
 * the float ratios, as torch.log(torch.tensor(ratio)) (float32) gives them;
 * round() is Python's (half to even). */
xf_box xf_random_resized_crop(int width, int height, const double scale[2], const double ratio[2],
                              rng_state *r);

/* timm's evaluation transform: Resize(floor(size / crop_pct)) (shorter side to
 * that, the longer side as torchvision's Resize computes it:
 * int(new_short * long / short)), then CenterCrop(size) (top =
 * int(round((H - size) / 2.0)), left likewise, Python's half-to-even round) -
 * expressed as the region of the SOURCE that the output samples, so that
 * resampling that box to size x size with the scale factors of the full
 * resize gives the same pixels as resize-then-crop.
 * For the same pixels at the crop's border too, the filter must be allowed to
 * read beyond the box, as the full resize does: resample with
 * xf_resample_ex(..., bounds = the whole image, ...). xf_resample (bounds =
 * the box) differs from resize-then-crop in the output rows and columns
 * whose filter reaches past the box (about support * scale source pixels).
 * crop_pct in (0, 1]: a larger one (CenterCrop padding with zeros) is not
 * supported, and its box reaches outside the image (xf_resample refuses it). */
xf_box xf_center_crop_box(int width, int height, int size, double crop_pct);

typedef struct {
    int out_size; /* output is out_size x out_size */
    /* 3, or 1: first converted to PIL's "L"
     * (L = (R*19595 + G*38470 + B*7471 + 0x8000) >> 16), as PIL's convert("L") */
    int channels;
    xf_interp interp;
    const float *mean, *std; /* `channels` values each; out = (v/255 - mean[c]) / std[c] */
} xf_params;

/* Resamples `box` of rgb (HWC, 3 bytes per pixel, width x height, rows
 * packed) to p->out_size x p->out_size, antialiased when downscaling exactly
 * as torch.nn.functional.interpolate(mode=bilinear|bicubic, antialias=True,
 * align_corners=False) does on the cropped tensor (the rule above, bounds =
 * the box), mirrored horizontally when flip (torch.flip(out, [-1])),
 * normalised, written as CHW floats into out (channels * out_size *
 * out_size). Neither rounded to 8 bits nor clamped (bicubic overshoots a
 * little past 0 and 255, as torch on float tensors; PIL's resize would round
 * and clamp). Thread-safe, no global state; returns 0, or -1 with a message in
 * err (bad box, bad parameters, out of memory). A box may overrun the image
 * by 1e-6 pixels (rounding of a scaled box); more is refused. Allocates its
 * scratch per call: the loader's hot loop uses xf_resample_ex with an
 * xf_scratch per thread. */
int xf_resample(const uint8_t *rgb, int width, int height, xf_box box, int flip, const xf_params *p,
                float *out, char *err, size_t errlen);

/* Reusable working memory of xf_resample_ex (weight tables, the ring of
 * filtered rows), grown as needed and kept between calls; one per thread.
 * xf_scratch_new returns NULL when out of memory; free with xf_scratch_free
 * (NULL is a no-op). */
typedef struct xf_scratch xf_scratch;
xf_scratch *xf_scratch_new(void);
void xf_scratch_free(xf_scratch *s);

/* xf_resample with two more choices:
 *   bounds: where the filter may read (rounded outward to whole pixels, cut to
 *           the image); NULL: the box itself (torch on the crop, i.e.
 *           RandomResizedCrop). Pass {0, 0, width, height} with
 *           xf_center_crop_box's box for exactly resize-then-crop.
 *   s:      scratch (not shared between threads at once); NULL: allocated
 *           and freed inside the call. */
int xf_resample_ex(const uint8_t *rgb, int width, int height, xf_box box, const xf_box *bounds,
                   int flip, const xf_params *p, xf_scratch *s, float *out, char *err,
                   size_t errlen);

/* For the augmentations that work on 8-bit pixels (RandAugment): the box
 * resampled as xf_resample_ex resamples it, in RGB whatever p->channels
 * says (p's out_size and interp; mean and std unused), each value then
 * rounded half up and clamped to 0..255 as PIL's resize rounds (PIL filters
 * in fixed point, with an 8-bit image between its two passes: its bytes may
 * differ from these by 1), written HWC (out_size x out_size x 3 bytes) into
 * out. tmp: 3 x out_size x out_size floats of the caller's (overwritten).
 * Returns 0, or -1 with a message in err, as xf_resample_ex. */
int xf_resample_u8(const uint8_t *rgb, int width, int height, xf_box box, const xf_box *bounds,
                   int flip, const xf_params *p, xf_scratch *s, float *tmp, uint8_t *out,
                   char *err, size_t errlen);

/* 8-bit RGB HWC (p->out_size square) to normalised CHW floats into out, as
 * torchvision's ToTensor then Normalize compute them in float32:
 * ((float)v / 255 - mean[c]) / std[c]; p->channels 1: PIL's "L" of each
 * pixel first. p's mean and std must be set. */
void xf_normalize_u8(const uint8_t *hwc, const xf_params *p, float *out);

#endif
