/* worker/data/decode.h - a JPEG or PNG held in memory, decoded to 8-bit RGB.
 *
 * Owns: recognising the format from the magic bytes (never the name), the
 * decompression-bomb limit (checked from the header, before any pixel
 * buffer is allocated), JPEG's DCT-domain downscaling, and converting every
 * kind of JPEG and PNG to the same pixels PIL's Image.open(f).convert("RGB")
 * gives, with the one exception below.
 * Must not: read files or archives (the caller hands bytes and a name for
 * messages), resize, or crop beyond what libjpeg does for a region (below),
 * log, or include anything of the worker outside data/.
 *
 * Output: interleaved HWC, 3 bytes per pixel, rows packed (pitch width*3).
 *   JPEG (libjpeg-turbo's TurboJPEG API, the same libjpeg-turbo Debian's PIL
 *   links, with PIL's settings: accurate integer IDCT, fancy upsampling):
 *   YCbCr and RGB as decoded; grayscale repeated into R, G and B; CMYK and
 *   YCCK read with Adobe's inverted polarity, as PIL assumes for every CMYK
 *   JPEG, then PIL's CMYK->RGB (R = K' - K'*C/255 rounded as PIL's
 *   MULDIV255, K' = 255 - K). Progressive and restart-marker files alike.
 *   PNG (libspng): every colour type and bit depth; palette expanded; tRNS,
 *   alpha and gAMA ignored (convert("RGB") drops alpha without compositing);
 *   16-bit samples reduced to their high byte, as PIL reads "RGB;16B".
 *   The exception: 16-bit GRAYSCALE. PIL 9.4 opens it as mode "I" and
 *   convert("RGB") clips each value to 255 (nearly every pixel white); we
 *   take the high byte as for every other 16-bit PNG.
 * Warnings: any libjpeg warning is an error here (TJFLAG_STOPONWARNING).
 *   PIL refuses truncated files ("image file is truncated") but silently
 *   keeps the pixels of other "Corrupt JPEG data" warnings; we refuse both,
 *   naming the warning. Progressive JPEGs with more than 500 scans are
 *   refused (TJFLAG_LIMITSCANS: libjpeg-turbo's guard against scan bombs).
 * A region (decode_opts.crop_w/crop_h > 0), for random crops: a JPEG is
 *   then decoded with libjpeg's own API (jpeglib.h, the same libjpeg-turbo,
 *   the same settings: accurate IDCT, fancy upsampling, CMYK as above,
 *   warnings and more than 500 scans refused) only as far as the box needs:
 *   the rows above it are skipped (jpeg_skip_scanlines: entropy-decoded,
 *   no IDCT), the rows below it are not read at all, and the columns
 *   outside it are cropped (jpeg_crop_scanline: entropy-decoded, no IDCT,
 *   no colour conversion). libjpeg starts a cropped row on an iMCU
 *   boundary (8 or 16 pixels times the scale), so the region decoded is
 *   aligned outward on the left; the decoder also asks for one pixel
 *   column more on each side of the box (see the exactness below) and
 *   returns what it decoded: decode_image.x/y place rgb in the whole
 *   scaled image, so the box maps to rgb's pixels as
 *   (box_x * num / denom - x, box_y * num / denom - y, box_w * num / denom,
 *   box_h * num / denom); decode_box_in_image does it.
 *   Exactness (measured, tests/test_decode.c): every row is the full
 *   decode's row exactly (skipping is exact, the chroma's vertical
 *   upsampling included), and every column but the outermost decoded
 *   column on a side that is not the image's edge. That column differs
 *   (by up to 32 in the test's images; at most a quarter of the chroma
 *   step times 1.772, 115) in 4:2:0 and 4:2:2 JPEGs at the scales where
 *   libjpeg upsamples chroma horizontally with its fancy (triangle) filter
 *   (4:2:0: 1/1 only, below it libjpeg scales chroma in the IDCT; 4:2:2:
 *   7/8 to 1/4 too; at 1/8 nothing is upsampled fancily): the filter
 *   replicates the chroma at a cropped edge instead of blending in its
 *   neighbour. The extra column on each side keeps those columns outside
 *   the box: the box's pixels are the full decode's, bit for bit, at every
 *   scale, subsampling and kind of JPEG. A progressive JPEG's scans are
 *   all read before the first row, as ever: a region saves only its IDCT
 *   and colour work.
 *   With a region, data past the region's last row is never read, so a
 *   file truncated or corrupt only there decodes without error. PNGs
 *   ignore the region (decoded whole, x = y = 0).
 * Errors: functions return 0 or -1 with one line in err,
 *   "NAME: REASON", NAME being what the caller passed (e.g. shard:key) and
 *   library failures in lib/check.h's format with the library's own string.
 */
#ifndef VITJOB_DECODE_H
#define VITJOB_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* PIL's Image.MAX_IMAGE_PIXELS: 1024 * 1024 * 1024 // 4 // 3 */
#define DECODE_MAX_PIXELS_DEFAULT 89478485ULL

typedef enum { DECODE_UNKNOWN = 0, DECODE_JPEG, DECODE_PNG } decode_format;

typedef struct {
    /* images whose header claims more pixels (width * height, before any
     * scaling) are refused before anything is allocated; 0: the default */
    uint64_t max_pixels;
    /* > 0: a JPEG may be decoded at the smallest of TurboJPEG's scaling
     * factors (M/8 and the like, never above 1) whose output is still at
     * least min_width x min_height (with a region: whose scaled box is,
     * exactly: crop_w * num / denom >= min_width, no rounding); 0: full
     * size. PNGs are always full size. */
    int min_width, min_height;
    /* nonzero: only the factors 1/1, 1/2, 1/4 and 1/8 (PIL's draft()
     * factors). libjpeg-turbo's other scaled IDCTs (7/8 .. 3/8) are slower
     * than the full decode: a 500x375 4:2:0 q90 JPEG takes 1.01 ms at 1/1,
     * 1.62 at 7/8, 1.35 at 3/4, 1.23 at 5/8, 0.89 at 1/2 (bench/NOTES.md) */
    int fast_scales;
    /* crop_w > 0 and crop_h > 0: only this box of the source image is
     * needed (source pixels, before any scaling; clipped to the image, and
     * refused when nothing is left); see "A region" above. 0: everything. */
    int crop_x, crop_y, crop_w, crop_h;
} decode_opts;

typedef struct {
    uint8_t *rgb;                /* height * width * 3 bytes, owned: decode_image_free */
    int width, height;           /* of rgb */
    int src_width, src_height;   /* the header's */
    int scale_num, scale_denom;  /* 1/1 unscaled */
    /* the whole scaled image: ceil(src_width * num / denom) x
     * ceil(src_height * num / denom); without a region, width x height */
    int scaled_width, scaled_height;
    int x, y;                    /* rgb's first pixel in the scaled image: 0, 0 without a region */
    decode_format format;
} decode_image;

/* The format data starts with (JPEG: FF D8 FF; PNG: its 8-byte signature). */
decode_format decode_sniff(const void *data, size_t len);

/* "jpeg", "png" or "unknown". */
const char *decode_format_name(decode_format f);

/* The format and the header's width and height, no pixels decoded (a
 * random crop is drawn from the size before its region is decoded; about
 * 3 us for a JPEG). 0, or -1 with err as decode_image_rgb's. */
int decode_probe(const void *data, size_t len, const char *name, decode_format *fmt, int *width,
                 int *height, char *err, size_t errlen);

/* Decodes data (len bytes, borrowed) into *out; opts may be NULL (full
 * size, the default limit). name is only used in messages. On failure *out
 * holds nothing to free. Thread-safe: each call has its own decoder. */
int decode_image_rgb(const void *data, size_t len, const char *name, const decode_opts *opts,
                     decode_image *out, char *err, size_t errlen);

/* A box of the source image (box[0..3] = x, y, w, h in source pixels) in
 * img->rgb's pixels, in place: scaled by scale_num / scale_denom and moved
 * by -img->x, -img->y. */
void decode_box_in_image(const decode_image *img, double box[4]);

/* Frees out->rgb and zeroes *img; NULL and a zeroed image are no-ops. */
void decode_image_free(decode_image *img);

#endif
