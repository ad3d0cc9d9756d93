/* worker/data/decode.h - a JPEG or PNG held in memory, decoded to 8-bit RGB.
 *
 * Owns: recognising the format from the magic bytes (never the name), the
 * decompression-bomb limit (checked from the header, before any pixel
 * buffer is allocated), JPEG's DCT-domain downscaling, and converting every
 * kind of JPEG and PNG to the same pixels PIL's Image.open(f).convert("RGB")
 * gives, with the one exception below.
 * Must not: read files or archives (the caller hands bytes and a name for
 * messages), resize or crop beyond JPEG's DCT scaling, log, or include
 * anything of the worker outside data/.
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
     * least min_width x min_height; 0: full size. PNGs are always full size. */
    int min_width, min_height;
} decode_opts;

typedef struct {
    uint8_t *rgb;                /* height * width * 3 bytes, owned: decode_image_free */
    int width, height;           /* of rgb */
    int src_width, src_height;   /* the header's */
    int scale_num, scale_denom;  /* width = ceil(src_width * num / denom); 1/1 unscaled */
    decode_format format;
} decode_image;

/* The format data starts with (JPEG: FF D8 FF; PNG: its 8-byte signature). */
decode_format decode_sniff(const void *data, size_t len);

/* "jpeg", "png" or "unknown". */
const char *decode_format_name(decode_format f);

/* Decodes data (len bytes, borrowed) into *out; opts may be NULL (full
 * size, the default limit). name is only used in messages. On failure *out
 * holds nothing to free. Thread-safe: each call has its own decoder. */
int decode_image_rgb(const void *data, size_t len, const char *name, const decode_opts *opts,
                     decode_image *out, char *err, size_t errlen);

/* Frees out->rgb and zeroes *img; NULL and a zeroed image are no-ops. */
void decode_image_free(decode_image *img);

#endif
