/* worker/data/decode.c - JPEG (TurboJPEG) and PNG (libspng) bytes to 8-bit RGB.
 *
 * Owns: the decoders' settings and the conversions to PIL's RGB (see
 * decode.h). Must not: read files, log, or know where the bytes came from.
 */
#include <spng.h>
#include <turbojpeg.h>

#include "check.h"
#include "decode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t PNG_SIG[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

decode_format decode_sniff(const void *data, size_t len)
{
    const uint8_t *p = data;
    if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return DECODE_JPEG;
    if (len >= sizeof PNG_SIG && memcmp(p, PNG_SIG, sizeof PNG_SIG) == 0) return DECODE_PNG;
    return DECODE_UNKNOWN;
}

const char *decode_format_name(decode_format f)
{
    return f == DECODE_JPEG ? "jpeg" : f == DECODE_PNG ? "png" : "unknown";
}

void decode_image_free(decode_image *img)
{
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

/* "NAME: FMT..." into err */
static int fail(char *err, size_t errlen, const char *name, const char *fmt, ...)
{
    if (err && errlen) {
        int n = snprintf(err, errlen, "%s: ", name);
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* the bomb limit, from the header's size */
static int check_pixels(const char *name, const char *fmt, uint64_t w, uint64_t h, uint64_t max,
                        char *err, size_t errlen)
{
    if (w == 0 || h == 0) return fail(err, errlen, name, "%s header says %llux%llu pixels", fmt,
                                      (unsigned long long)w, (unsigned long long)h);
    if (w * h > max)
        return fail(err, errlen, name,
                    "%s header says %llux%llu = %llu pixels, more than the limit of %llu "
                    "(max_pixels; a decompression bomb?)",
                    fmt, (unsigned long long)w, (unsigned long long)h,
                    (unsigned long long)(w * h), (unsigned long long)max);
    return 0;
}

/* The smallest factor <= 1 (best starts at 1/1 and only shrinks: never an
 * upscale) whose output is still >= min_w x min_h (1/1 when
 * none is smaller or no minimum is asked). */
static tjscalingfactor pick_scale(int w, int h, int min_w, int min_h)
{
    tjscalingfactor best = {1, 1};
    if (min_w <= 0 && min_h <= 0) return best;
    int n = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&n);
    for (int i = 0; sf && i < n; i++) {
        if (TJSCALED(w, sf[i]) < min_w || TJSCALED(h, sf[i]) < min_h) continue;
        if ((long)sf[i].num * best.denom < (long)best.num * sf[i].denom) best = sf[i];
    }
    return best;
}

/* PIL's CMYK->RGB (Convert.c cmyk2rgb) on libjpeg's output read as Adobe
 * (inverted) CMYK, PIL's "CMYK;I": in place, 4 bytes in, 3 out. */
static void cmyk_inverted_to_rgb(uint8_t *px, size_t npix)
{
    for (size_t i = 0; i < npix; i++) {
        const uint8_t *in = px + 4 * i;
        uint8_t *out = px + 3 * i;
        int nk = in[3]; /* 255 - K, K = 255 - stored */
        int c[3] = {255 - in[0], 255 - in[1], 255 - in[2]};
        for (int j = 0; j < 3; j++) {
            int t = c[j] * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            out[j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static int decode_jpeg(const uint8_t *data, size_t len, const char *name, const decode_opts *o,
                       uint64_t max_pixels, decode_image *out, char *err, size_t errlen)
{
    char why[512];
    int rc = -1;
    uint8_t *buf = NULL;
    tjhandle h = tjInitDecompress();
    if (!h) return fail(err, errlen, name, "tjInitDecompress: %s", tjGetErrorStr2(NULL));

    int w = 0, ht = 0, subsamp = 0, cs = 0;
    if (TJ_CHECK(tjDecompressHeader3(h, data, (unsigned long)len, &w, &ht, &subsamp, &cs), h, why,
                 sizeof why)) {
        fail(err, errlen, name, "%s", why);
        goto out;
    }
    if (check_pixels(name, "jpeg", (uint64_t)w, (uint64_t)ht, max_pixels, err, errlen)) goto out;

    tjscalingfactor sf = pick_scale(w, ht, o ? o->min_width : 0, o ? o->min_height : 0);
    int sw = TJSCALED(w, sf), sh = TJSCALED(ht, sf);
    int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    int pf = cmyk ? TJPF_CMYK : TJPF_RGB;
    size_t npix = (size_t)sw * (size_t)sh;
    buf = malloc(npix * (size_t)tjPixelSize[pf]);
    if (!buf) {
        fail(err, errlen, name, "out of memory for %dx%d pixels", sw, sh);
        goto out;
    }
    if (TJ_CHECK(tjDecompress2(h, data, (unsigned long)len, buf, sw, 0, sh, pf,
                               TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS),
                 h, why, sizeof why)) {
        fail(err, errlen, name, "%s", why);
        goto out;
    }
    if (cmyk) {
        cmyk_inverted_to_rgb(buf, npix);
        uint8_t *shrunk = realloc(buf, npix * 3);
        if (shrunk) buf = shrunk;
    }
    *out = (decode_image){.rgb = buf, .width = sw, .height = sh, .src_width = w,
                          .src_height = ht, .scale_num = sf.num, .scale_denom = sf.denom,
                          .format = DECODE_JPEG};
    buf = NULL;
    rc = 0;
out:
    free(buf);
    tjDestroy(h);
    return rc;
}

static int decode_png(const uint8_t *data, size_t len, const char *name, uint64_t max_pixels,
                      decode_image *out, char *err, size_t errlen)
{
    char why[512];
    int rc = -1;
    uint8_t *buf = NULL;
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return fail(err, errlen, name, "spng_ctx_new: out of memory");

    /* no chunk can be longer than the file; keeps a lying length from
     * making libspng reserve memory for it */
    if (SPNG_CHECK(spng_set_chunk_limits(ctx, len, len), why, sizeof why) ||
        SPNG_CHECK(spng_set_png_buffer(ctx, data, len), why, sizeof why)) {
        fail(err, errlen, name, "%s", why);
        goto out;
    }
    struct spng_ihdr ihdr;
    if (SPNG_CHECK(spng_get_ihdr(ctx, &ihdr), why, sizeof why)) {
        fail(err, errlen, name, "%s", why);
        goto out;
    }
    if (check_pixels(name, "png", ihdr.width, ihdr.height, max_pixels, err, errlen)) goto out;

    size_t size = 0;
    if (SPNG_CHECK(spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size), why, sizeof why)) {
        fail(err, errlen, name, "%s", why);
        goto out;
    }
    buf = malloc(size);
    if (!buf) {
        fail(err, errlen, name, "out of memory for %ux%u pixels", ihdr.width, ihdr.height);
        goto out;
    }
    /* flags 0: tRNS and gAMA ignored, as PIL's convert("RGB") does */
    if (SPNG_CHECK(spng_decode_image(ctx, buf, size, SPNG_FMT_RGB8, 0), why, sizeof why)) {
        fail(err, errlen, name, "%s", why);
        goto out;
    }
    *out = (decode_image){.rgb = buf, .width = (int)ihdr.width, .height = (int)ihdr.height,
                          .src_width = (int)ihdr.width, .src_height = (int)ihdr.height,
                          .scale_num = 1, .scale_denom = 1, .format = DECODE_PNG};
    buf = NULL;
    rc = 0;
out:
    free(buf);
    spng_ctx_free(ctx);
    return rc;
}

int decode_image_rgb(const void *data, size_t len, const char *name, const decode_opts *opts,
                     decode_image *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!name) name = "(image)";
    uint64_t max = opts && opts->max_pixels ? opts->max_pixels : DECODE_MAX_PIXELS_DEFAULT;
    switch (decode_sniff(data, len)) {
    case DECODE_JPEG: return decode_jpeg(data, len, name, opts, max, out, err, errlen);
    case DECODE_PNG: return decode_png(data, len, name, max, out, err, errlen);
    default: break;
    }
    const uint8_t *p = data;
    char head[3 * 8 + 1] = "";
    for (size_t i = 0, n = 0; i < len && i < 8; i++)
        n += (size_t)snprintf(head + n, sizeof head - n, "%s%02x", i ? " " : "", p[i]);
    if (len == 0) return fail(err, errlen, name, "empty (0 bytes): not a JPEG or PNG");
    return fail(err, errlen, name, "not a JPEG or PNG (%zu bytes starting %s)", len, head);
}
